//! Multipart uploads. Each part's body goes to chunks and a part record; completing writes one
//! object record naming the chosen parts' chunks (no bytes are copied), then deletes the upload's
//! records. An object remembers the upload that made it, so a repeated completion with the same
//! parts returns the same object.
//!
//! Lock order. Every operation that changes an upload (a part, the completion, the abort) holds
//! the upload's own lock (`Upload::op`) from its check that the upload is still open until its
//! change is in the index, and inside it at most one record lock (`Store::lock`): a part that of
//! its part record, an abort that of the upload record, a completion that of the object. Nothing
//! waits for an upload's lock while holding a record lock, so this cannot deadlock. (The upload's
//! lock is not a record lock: those are striped, and two stripes taken by one task may be the
//! same one, or taken in opposite orders by two tasks.) So a part cannot replace, nor an abort
//! discard, a part a completion has picked; and once an upload is completed or aborted, parts and
//! aborts for it are refused with `NoSuchUpload`.

use crate::error::{Result, StoreError};
use crate::record::{
    decode, encode, new_id, object_key, parse_upload_id, part_key, upload_key, ChunkRef, Id, Kind,
    PartRecord, StoredOptions, UploadRecord,
};
use crate::store::{Store, WrittenBody};
use crate::types::{
    Body, ChecksumsAtEnd, ObjectInfo, PartInfo, PartOptions, PutOptions, SentMd5, UploadInfo,
    WriteCondition,
};
use md5::{Digest, Md5};
use railstore_device::StoreMode;
use railstore_redundancy::Mechanism;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Highest part number (S3).
pub const PART_NUMBER_MAX: u32 = 10_000;

/// A part the store holds.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub info: PartInfo,
    pub chunks: Arc<Vec<ChunkRef>>,
    pub mechanism: String,
}

#[derive(Debug, Default)]
pub(crate) struct Parts {
    pub parts: BTreeMap<u32, Part>,
    /// Completed or aborted: takes no more parts.
    pub closed: bool,
}

/// An upload in progress.
#[derive(Debug)]
pub(crate) struct Upload {
    pub id: Id,
    pub record: UploadRecord,
    /// Held by every operation that changes the upload (see the lock order above).
    op: tokio::sync::Mutex<()>,
    pub parts: Mutex<Parts>,
    /// Test hook: the next completion stops after picking the parts.
    pause: Mutex<Option<Arc<CompletePause>>>,
}

/// Test hook: stops a completion of one upload once it has picked the parts, before it writes
/// the object record, so that tests can run other operations on the upload at that point.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct CompletePause {
    reached: tokio::sync::Notify,
    resume: tokio::sync::Notify,
}

impl CompletePause {
    /// Waits until the completion has stopped.
    pub async fn reached(&self) {
        self.reached.notified().await
    }

    /// Lets the completion go on.
    pub fn resume(&self) {
        self.resume.notify_one()
    }
}

/// The ETag S3 gives a multipart object: MD5 of the parts' MD5s, then `-` and the count.
pub fn multipart_etag(part_etags: &[String]) -> Option<String> {
    let mut md5 = Md5::new();
    for e in part_etags {
        let mut raw = [0u8; 16];
        hex::decode_to_slice(e.trim_matches('"'), &mut raw).ok()?;
        md5.update(raw);
    }
    Some(format!(
        "{}-{}",
        hex::encode(md5.finalize()),
        part_etags.len()
    ))
}

impl Store {
    fn upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<(u64, Arc<Upload>)> {
        let none = || StoreError::NoSuchUpload(upload_id.to_string());
        let st = self.inner.state.read().unwrap();
        let b = st.bucket(bucket)?;
        let u = b.uploads.get(upload_id).ok_or_else(none)?;
        if u.record.key != key {
            return Err(none());
        }
        Ok((b.id, u.clone()))
    }

    /// Starts a multipart upload; returns its id.
    pub async fn create_multipart(
        &self,
        bucket: &str,
        key: &str,
        options: PutOptions,
    ) -> Result<String> {
        self.indexed().await?;
        self.check_open()?;
        crate::store::check_key(key)?;
        let bucket_id = self.bucket_id(bucket)?;
        let id = new_id();
        let record = UploadRecord {
            bucket_id,
            key: key.to_string(),
            upload_id: hex::encode(id),
            initiated: SystemTime::now(),
            options: StoredOptions {
                content_type: options.content_type,
                user_metadata: options.user_metadata,
                headers: options.headers,
                mechanism: options.mechanism.map(|m| m.to_string()),
                checksum_algorithm: options.checksums.keys().next().cloned(),
            },
        };
        self.inner
            .manager
            .put(
                &upload_key(&id),
                &encode(Kind::Upload, &record, b""),
                StoreMode::Upsert,
                None,
            )
            .await?;
        self.durable().await?;
        let upload_id = record.upload_id.clone();
        let mut st = self.inner.state.write().unwrap();
        match st.buckets.get_mut(bucket) {
            Some(b) if b.id == bucket_id && !b.deleting => {
                b.uploads.insert(
                    upload_id.clone(),
                    Arc::new(Upload {
                        id,
                        record,
                        op: tokio::sync::Mutex::new(()),
                        parts: Mutex::new(Parts::default()),
                        pause: Mutex::default(),
                    }),
                );
                Ok(upload_id)
            }
            _ => Err(StoreError::NoSuchBucket(bucket.to_string())),
        }
    }

    /// Stores part `number` of an upload, replacing an earlier part of that number.
    pub async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        number: u32,
        body: Body,
        options: PartOptions,
    ) -> Result<PartInfo> {
        self.indexed().await?;
        let PartOptions {
            content_md5,
            checksums,
            checksums_at_end,
            sent_md5,
            annotation,
        } = options;
        self.check_open()?;
        if !(1..=PART_NUMBER_MAX).contains(&number) {
            return Err(StoreError::InvalidArgument(format!(
                "part number {number}: parts are numbered 1 to {PART_NUMBER_MAX}"
            )));
        }
        let (_, upload) = self.upload(bucket, key, upload_id)?;
        let mechanism = upload
            .record
            .options
            .mechanism
            .as_deref()
            .map(Mechanism::parse)
            .transpose()?;
        // Parts are always chunks: a record names them without copying.
        let written = self.write_body(body, mechanism, 0).await?;
        let chunks = Arc::new(written.chunks);
        if content_md5.is_some_and(|m| m != written.md5) {
            self.discard(chunks);
            return Err(StoreError::BadDigest(
                "Content-MD5 does not match the part".into(),
            ));
        }
        let info = PartInfo {
            number,
            etag: SentMd5::etag(sent_md5.as_ref(), written.md5),
            size: written.size,
            last_modified: SystemTime::now(),
            checksums: ChecksumsAtEnd::added_to(checksums_at_end.as_ref(), checksums),
            annotation,
        };
        let rec = PartRecord {
            upload_id: upload_id.to_string(),
            part: info.clone(),
            chunks: chunks.to_vec(),
            mechanism: written.mechanism.to_string(),
        };
        let pkey = part_key(&upload.id, number);
        let res = async {
            self.durable().await?;
            let _op = upload.op.lock().await;
            let _lock = self.lock(&pkey).await;
            if upload.parts.lock().unwrap().closed {
                return Err(StoreError::NoSuchUpload(upload_id.to_string()));
            }
            self.inner
                .manager
                .put(
                    &pkey,
                    &encode(Kind::Part, &rec, b""),
                    StoreMode::Upsert,
                    None,
                )
                .await?;
            let mut parts = upload.parts.lock().unwrap();
            Ok(parts.parts.insert(
                number,
                Part {
                    info: info.clone(),
                    chunks: chunks.clone(),
                    mechanism: rec.mechanism.clone(),
                },
            ))
        }
        .await;
        match res {
            Ok(old) => {
                self.durable().await?;
                if let Some(old) = old {
                    self.discard(old.chunks);
                }
                self.inner.metrics.parts.fetch_add(1, Ordering::Relaxed);
                self.inner
                    .metrics
                    .bytes_in
                    .fetch_add(info.size, Ordering::Relaxed);
                Ok(info)
            }
            Err(e) => {
                self.discard(chunks);
                Err(e)
            }
        }
    }

    /// Completes an upload from the listed `(part number, ETag)` pairs, in ascending order.
    /// `checksums` are the object's (the caller composes them from the parts'). Repeating a
    /// completion that succeeded returns the object it made. A failed `condition` leaves the
    /// upload as it was.
    pub async fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
        checksums: BTreeMap<String, String>,
        condition: Option<&WriteCondition>,
    ) -> Result<ObjectInfo> {
        self.indexed().await?;
        self.check_open()?;
        if parts.is_empty() {
            return Err(StoreError::InvalidArgument(
                "a completion lists at least one part".into(),
            ));
        }
        if parts.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(StoreError::InvalidPartOrder);
        }
        let etags: Vec<String> = parts
            .iter()
            .map(|(_, e)| e.trim_matches('"').to_string())
            .collect();
        let bucket_id = self.bucket_id(bucket)?;
        let rkey = object_key(bucket_id, key);
        let upload = match self.upload(bucket, key, upload_id) {
            Ok((_, u)) => Some(u),
            Err(StoreError::NoSuchUpload(_)) => None,
            Err(e) => return Err(e),
        };
        let etag = match (multipart_etag(&etags), &upload) {
            (Some(etag), _) => etag,
            // An unknown upload is that before anything about its parts, as S3 answers.
            (None, None) => return Err(StoreError::NoSuchUpload(upload_id.to_string())),
            (None, Some(_)) => {
                return Err(StoreError::InvalidPart {
                    part: parts[0].0,
                    why: "ETag is not an MD5 in hex".into(),
                })
            }
        };
        // The upload's lock, then the object's (see the lock order above).
        let _op = match &upload {
            Some(u) => Some(u.op.lock().await),
            None => None,
        };
        let _lock = self.lock(&rkey).await;
        let upload = match upload.as_ref().filter(|u| !u.parts.lock().unwrap().closed) {
            Some(u) => u,
            None => {
                // Completed already with these parts?
                let st = self.inner.state.read().unwrap();
                let done = st
                    .buckets
                    .get(bucket)
                    .and_then(|b| b.objects.get(key))
                    .filter(|e| e.upload_id.as_deref() == Some(upload_id) && e.info.etag == etag);
                return match done {
                    Some(e) => Ok(e.info.clone()),
                    None => Err(StoreError::NoSuchUpload(upload_id.to_string())),
                };
            }
        };
        let chosen: Vec<Part> = {
            let held = upload.parts.lock().unwrap();
            let mut chosen = Vec::with_capacity(parts.len());
            for (i, (n, e)) in parts.iter().enumerate() {
                let p = held.parts.get(n).ok_or_else(|| StoreError::InvalidPart {
                    part: *n,
                    why: "not uploaded".into(),
                })?;
                if p.info.etag != etags[i] {
                    return Err(StoreError::InvalidPart {
                        part: *n,
                        why: format!("ETag {e} does not match the uploaded part's"),
                    });
                }
                let last = i + 1 == parts.len();
                if !last && p.info.size < self.inner.config.part_bytes_min {
                    return Err(StoreError::EntityTooSmall {
                        part: *n,
                        size: p.info.size,
                        min: self.inner.config.part_bytes_min,
                    });
                }
                chosen.push(p.clone());
            }
            chosen
        };
        let pause = upload.pause.lock().unwrap().take();
        if let Some(p) = pause {
            p.reached.notify_one();
            p.resume.notified().await;
        }
        if let Some(c) = condition {
            c.check(self.current(bucket, key).as_ref(), bucket, key)?;
        }
        let size: u64 = chosen.iter().map(|p| p.info.size).sum();
        let opts = &upload.record.options;
        let info = ObjectInfo {
            key: key.to_string(),
            size,
            etag,
            last_modified: SystemTime::now(),
            content_type: opts.content_type.clone(),
            user_metadata: opts.user_metadata.clone(),
            headers: opts.headers.clone(),
            checksums,
            mechanism: chosen[0].mechanism.clone(),
            parts: parts.len() as u32,
            part_sizes: chosen.iter().map(|p| p.info.size).collect(),
            part_numbers: chosen.iter().map(|p| p.info.number).collect(),
            part_checksums: if chosen.iter().any(|p| !p.info.checksums.is_empty()) {
                chosen.iter().map(|p| p.info.checksums.clone()).collect()
            } else {
                Vec::new()
            },
            part_annotations: if chosen.iter().any(|p| p.info.annotation.is_some()) {
                chosen
                    .iter()
                    .map(|p| p.info.annotation.clone().unwrap_or_default())
                    .collect()
            } else {
                Vec::new()
            },
            version_id: None,
            delete_marker: false,
        };
        let written = WrittenBody {
            size,
            md5: [0; 16],
            inline: None,
            chunks: chosen
                .iter()
                .flat_map(|p| p.chunks.iter().cloned())
                .collect(),
            mechanism: Mechanism::parse(&chosen[0].mechanism)?,
        };
        // The parts' chunks are durable already (each part was synced).
        let (info, gone) = self
            .install(
                bucket,
                bucket_id,
                &rkey,
                info,
                written,
                Some(upload_id.to_string()),
            )
            .await?;
        // From here the object owns the chosen chunks; the upload's records go, and are gone
        // durably before anyone can replace the object and discard its chunks (the object's
        // lock is held until then).
        let unused = self.close_upload(bucket, upload).await;
        let used: std::collections::HashSet<Id> = chosen
            .iter()
            .flat_map(|p| p.chunks.iter().map(|c| c.id))
            .collect();
        self.durable().await?;
        drop(_lock);
        drop(_op);
        for p in unused {
            let rest: Vec<ChunkRef> = p
                .chunks
                .iter()
                .filter(|c| !used.contains(&c.id))
                .cloned()
                .collect();
            self.discard(Arc::new(rest));
        }
        self.discard_entries(gone);
        self.inner.metrics.puts.fetch_add(1, Ordering::Relaxed);
        Ok(info)
    }

    /// Marks an upload closed, deletes its records and takes it out of the index; returns its
    /// parts (whose chunks the caller disposes of).
    async fn close_upload(&self, bucket: &str, upload: &Upload) -> Vec<Part> {
        let parts: Vec<Part> = {
            let mut held = upload.parts.lock().unwrap();
            held.closed = true;
            std::mem::take(&mut held.parts).into_values().collect()
        };
        for p in &parts {
            if let Err(e) = self
                .inner
                .manager
                .delete(&part_key(&upload.id, p.info.number))
                .await
            {
                tracing::warn!(error = %e, "deleting a part record; the next start retries");
            }
        }
        if let Err(e) = self.inner.manager.delete(&upload_key(&upload.id)).await {
            tracing::warn!(error = %e, "deleting an upload record; the next start retries");
        }
        let mut st = self.inner.state.write().unwrap();
        if let Some(b) = st.buckets.get_mut(bucket) {
            b.uploads.remove(&upload.record.upload_id);
        }
        parts
    }

    /// Abandons an upload and frees its parts.
    pub async fn abort_multipart(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        self.indexed().await?;
        self.check_open()?;
        let (_, upload) = self.upload(bucket, key, upload_id)?;
        if !self.abort_upload(bucket, &upload).await? {
            // Completed or aborted while this waited for the lock.
            return Err(StoreError::NoSuchUpload(upload_id.to_string()));
        }
        Ok(())
    }

    /// Aborts `upload` of `bucket` (also while the bucket is being deleted); `Ok(false)` when
    /// it was completed or aborted meanwhile.
    pub(crate) async fn abort_upload(&self, bucket: &str, upload: &Upload) -> Result<bool> {
        let _op = upload.op.lock().await;
        let _lock = self.lock(&upload_key(&upload.id)).await;
        if upload.parts.lock().unwrap().closed {
            return Ok(false);
        }
        let parts = self.close_upload(bucket, upload).await;
        self.durable().await?;
        for p in parts {
            self.discard(p.chunks);
        }
        Ok(true)
    }

    /// Test hook: the next completion of the upload stops once it has picked the parts, until
    /// the returned pause is resumed.
    #[doc(hidden)]
    pub fn pause_next_complete(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<Arc<CompletePause>> {
        let (_, upload) = self.upload(bucket, key, upload_id)?;
        let p = Arc::new(CompletePause::default());
        *upload.pause.lock().unwrap() = Some(p.clone());
        Ok(p)
    }

    /// Uploads in progress in a bucket whose key starts with `prefix`, by key then start time.
    pub fn list_uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<UploadInfo>> {
        self.index_ready()?;
        let st = self.inner.state.read().unwrap();
        let b = st.bucket(bucket)?;
        let mut out: Vec<UploadInfo> = b
            .uploads
            .values()
            .filter(|u| u.record.key.starts_with(prefix))
            .map(|u| UploadInfo {
                key: u.record.key.clone(),
                upload_id: u.record.upload_id.clone(),
                initiated: u.record.initiated,
            })
            .collect();
        out.sort_by(|a, b| (&a.key, a.initiated).cmp(&(&b.key, b.initiated)));
        Ok(out)
    }

    /// The parts of an upload, by number.
    pub fn list_parts(&self, bucket: &str, key: &str, upload_id: &str) -> Result<Vec<PartInfo>> {
        self.index_ready()?;
        let (_, upload) = self.upload(bucket, key, upload_id)?;
        let held = upload.parts.lock().unwrap();
        Ok(held.parts.values().map(|p| p.info.clone()).collect())
    }

    /// The options an upload was created with (content type, metadata, checksum algorithm).
    pub fn upload_options(&self, bucket: &str, key: &str, upload_id: &str) -> Result<PutOptions> {
        self.index_ready()?;
        let (_, upload) = self.upload(bucket, key, upload_id)?;
        let o = &upload.record.options;
        Ok(PutOptions {
            content_type: o.content_type.clone(),
            user_metadata: o.user_metadata.clone(),
            headers: o.headers.clone(),
            checksums: o
                .checksum_algorithm
                .iter()
                .map(|a| (a.clone(), String::new()))
                .collect(),
            checksums_at_end: None,
            content_md5: None,
            sent_md5: None,
            mechanism: o.mechanism.as_deref().map(Mechanism::parse).transpose()?,
            condition: None,
        })
    }

    /// Loads an upload from its record (start-up).
    pub(crate) fn upload_from_record(record: UploadRecord) -> Option<Upload> {
        let id = parse_upload_id(&record.upload_id)?;
        Some(Upload {
            id,
            record,
            op: tokio::sync::Mutex::new(()),
            parts: Mutex::new(Parts::default()),
            pause: Mutex::default(),
        })
    }

    /// Decodes a part record (start-up).
    pub(crate) fn part_from_record(value: &[u8]) -> Result<(String, Part)> {
        let (rec, _): (PartRecord, _) = decode(Kind::Part, value)?;
        Ok((
            rec.upload_id,
            Part {
                info: rec.part,
                chunks: Arc::new(rec.chunks),
                mechanism: rec.mechanism,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_etags_follow_s3() {
        // Two parts whose MD5s are those of "a" and "b".
        let a = hex::encode(Md5::digest(b"a"));
        let b = hex::encode(Md5::digest(b"b"));
        let mut both = Md5::digest(b"a").to_vec();
        both.extend_from_slice(&Md5::digest(b"b"));
        let want = format!("{}-2", hex::encode(Md5::digest(&both)));
        assert_eq!(multipart_etag(&[a, format!("\"{b}\"")]), Some(want));
        assert_eq!(multipart_etag(&["nothex".into()]), None);
    }
}
