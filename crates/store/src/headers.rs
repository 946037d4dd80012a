//! Changing the stored headers of an object, or of one of its older versions, in place (its
//! tags, its retention and legal hold): the version's record is rewritten with the same body,
//! under the key's lock, so the change is one atomic record write and no byte of the body is
//! copied.

use crate::error::{Result, StoreError};
use crate::record::object_key;
use crate::store::{Entry, Store};
use crate::types::ObjectInfo;
use railstore_device::StoreMode;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Store {
    /// Applies `change` to the stored headers of the object under `key` and returns its new
    /// description, durable. `change` sees the object as it is under the key's lock (it may
    /// refuse, and then nothing changes); the body, ETag and modification time stay.
    pub async fn update_object_headers(
        &self,
        bucket: &str,
        key: &str,
        change: impl FnOnce(&ObjectInfo, &mut BTreeMap<String, String>) -> Result<()>,
    ) -> Result<ObjectInfo> {
        self.indexed().await?;
        self.update_version_headers(bucket, key, None, change).await
    }

    /// `update_object_headers` on one version of the key (`"null"`: its null version; `None`:
    /// the current object), current or older. A delete marker has no headers to change.
    pub async fn update_version_headers(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        change: impl FnOnce(&ObjectInfo, &mut BTreeMap<String, String>) -> Result<()>,
    ) -> Result<ObjectInfo> {
        self.indexed().await?;
        self.check_open()?;
        let bucket_id = self.bucket_id(bucket)?;
        let rkey = object_key(bucket_id, key);
        let _lock = self.lock(&rkey).await;
        let (target, record_key) = self.locate(bucket, key, version_id)?;
        // `locate` builds the record key from the bucket's id now: another id means the bucket
        // was deleted and made again since `bucket_id` was read.
        let same_bucket = record_key.len() >= rkey.len() && record_key[1..rkey.len()] == rkey[1..];
        if !same_bucket {
            return Err(StoreError::NoSuchKey {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        }
        let current = record_key == rkey;
        let mut info = target.info.clone();
        change(&target.info, &mut info.headers)?;
        let updated = Entry {
            info,
            body: target.body.clone(),
            upload_id: target.upload_id.clone(),
            seq: target.seq,
        };
        let (value, mechanism) = self.record_value(bucket_id, &updated, &record_key).await?;
        self.inner
            .manager
            .put(&record_key, &value, StoreMode::Upsert, mechanism)
            .await?;
        // The new entry shares the old one's chunks: nothing is discarded.
        let updated = Arc::new(updated);
        {
            let mut st = self.inner.state.write().unwrap();
            if let Some(b) = st.buckets.get_mut(bucket).filter(|b| b.id == bucket_id) {
                if current {
                    b.objects.insert(key.to_string(), updated.clone());
                } else if let Some(slot) = b
                    .history
                    .get_mut(key)
                    .and_then(|h| h.iter_mut().find(|e| Arc::ptr_eq(e, &target)))
                {
                    *slot = updated.clone();
                }
            }
        }
        self.durable().await?;
        Ok(updated.info.clone())
    }
}
