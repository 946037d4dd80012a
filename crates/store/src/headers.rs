//! Changing an object's stored headers in place (its tags, for one): the object's record is
//! rewritten with the same body, under the key's lock, so the change is one atomic record
//! write and no byte of the body is copied.

use crate::error::{Result, StoreError};
use crate::record::{decode, encode, object_key, BodyRef, Kind, ObjectRecord};
use crate::store::{Entry, Store, Stored};
use crate::types::ObjectInfo;
use railstore_device::{ReadRange, StoreMode};
use railstore_redundancy::Mechanism;
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
        self.check_open()?;
        let bucket_id = self.bucket_id(bucket)?;
        let rkey = object_key(bucket_id, key);
        let _lock = self.lock(&rkey).await;
        let (id, entry) = self.entry(bucket, key)?;
        if id != bucket_id {
            // The bucket was deleted and made again since its id was read.
            return Err(StoreError::NoSuchKey {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        }
        let mut info = entry.info.clone();
        change(&entry.info, &mut info.headers)?;
        let (body, inline, mechanism) = match &entry.body {
            Stored::Chunks(c) => (BodyRef::Chunks(c.to_vec()), Vec::new(), None),
            Stored::Inline => {
                let (value, _) = self.inner.manager.get(&rkey, ReadRange::ALL).await?;
                let (rec, bytes): (ObjectRecord, &[u8]) = decode(Kind::Object, &value)?;
                if rec.body != BodyRef::Inline || rec.info.etag != entry.info.etag {
                    return Err(StoreError::Corrupt(format!(
                        "{bucket}/{key}: the record does not match the index"
                    )));
                }
                let mechanism = Mechanism::parse(&info.mechanism)?;
                (BodyRef::Inline, bytes.to_vec(), Some(mechanism))
            }
        };
        let rec = ObjectRecord {
            bucket_id,
            info,
            body,
            upload_id: entry.upload_id.clone(),
            seq: entry.seq,
        };
        let value = encode(Kind::Object, &rec, &inline);
        self.inner
            .manager
            .put(&rkey, &value, StoreMode::Upsert, mechanism)
            .await?;
        // The new entry shares the old one's chunks: nothing is discarded.
        let updated = Arc::new(Entry {
            info: rec.info.clone(),
            body: entry.body.clone(),
            upload_id: rec.upload_id,
            seq: entry.seq,
        });
        {
            let mut st = self.inner.state.write().unwrap();
            match st.buckets.get_mut(bucket) {
                Some(b) if b.id == bucket_id => {
                    b.objects.insert(key.to_string(), updated);
                }
                _ => {}
            }
        }
        self.durable().await?;
        Ok(rec.info)
    }
}
