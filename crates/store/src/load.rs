//! Start-up: the index is rebuilt from the records, interrupted work is finished or undone, and
//! chunks no record names are deleted.

use crate::error::{Result, StoreError};
use crate::record::{
    chunk_id_of, decode, decode_object, object_key, part_key, upload_key, version_key,
    BucketRecord, Id, Kind, UploadRecord, TAG_BUCKET, TAG_CHUNK, TAG_OBJECT, TAG_PART, TAG_UPLOAD,
    TAG_VERSION,
};
use crate::store::{Bucket, Entry, Store, Stored};
use crate::types::BucketInfo;
use futures_util::StreamExt;
use railstore_device::{ReadRange, StoreMode};
use railstore_redundancy::RedundancyError;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// A manager key and its value.
type Record = (Vec<u8>, Vec<u8>);

/// What reading one record at start-up found.
enum Fetched {
    Record(Record),
    Absent,
    /// Too few pieces on the devices in service to read it.
    Unreadable,
}

/// What start-up found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadReport {
    /// Buckets.
    pub buckets: usize,
    /// Objects (current ones).
    pub objects: usize,
    /// Older versions and delete markers, in buckets with versioning.
    pub versions: usize,
    /// Version records written or removed to finish versioning changes a crash cut short.
    pub versions_settled: usize,
    /// Multipart uploads in progress.
    pub uploads: usize,
    /// Records of deleted buckets or finished uploads removed.
    pub records_removed: usize,
    /// Chunks no record named, deleted.
    pub chunks_removed: usize,
    /// Records that could not be read (too few pieces on the devices in service: a write a
    /// crash cut off while devices were out of service, or damage beyond the tolerance). They
    /// are left on the devices and not indexed; while there are any, nothing is removed as
    /// unreferenced, since an unreadable record may have named it.
    pub records_unreadable: usize,
}

impl Store {
    /// Reads every record with `tag`; skips keys whose object is gone. After a clean shutdown
    /// most records are read at once ([`railstore_redundancy::Manager::scan`]: each device's
    /// records in log order), the rest one by one. After an unclean shutdown each record is
    /// resolved the careful way (every copy, newest decodable version, stale copies
    /// rewritten), so the index, the chunks kept and a later scrub all agree on one version of
    /// each record.
    async fn records(&self, tag: u8, report: &mut LoadReport) -> Result<Vec<Record>> {
        let manager = &self.inner.manager;
        let careful = self.inner.unclean_start;
        let (mut out, keys) = if careful {
            (Vec::new(), manager.keys(&[tag]).await?)
        } else {
            let scan = manager.scan(&[tag]).await?;
            (scan.values, scan.others)
        };
        let fetched: Vec<Result<Fetched>> = futures_util::stream::iter(keys)
            .map(|k| async move {
                if self.inner.closing.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(StoreError::ShuttingDown);
                }
                let got = if careful {
                    manager.get_resolved(&k).await
                } else {
                    manager.get(&k, ReadRange::ALL).await
                };
                match got {
                    Ok((v, _)) => Ok(Fetched::Record((k, v))),
                    Err(RedundancyError::NotFound { .. }) => Ok(Fetched::Absent),
                    Err(e @ RedundancyError::Lost { .. }) => {
                        tracing::warn!(error = %e, "a record cannot be read; it is not indexed");
                        Ok(Fetched::Unreadable)
                    }
                    Err(e) => Err(e.into()),
                }
            })
            .buffer_unordered(crate::store::LOAD_CONCURRENCY)
            .collect()
            .await;
        out.reserve(fetched.len());
        for f in fetched {
            match f? {
                Fetched::Record(kv) => out.push(kv),
                Fetched::Absent => {}
                Fetched::Unreadable => report.records_unreadable += 1,
            }
        }
        Ok(out)
    }

    /// Removes a record nothing needs any more (of a deleted bucket, a finished upload), unless
    /// an unreadable record might still need it.
    async fn remove_record(&self, key: &[u8], report: &mut LoadReport) -> Result<()> {
        if report.records_unreadable == 0 && self.delete_unneeded(key).await? {
            report.records_removed += 1;
        }
        Ok(())
    }

    /// Deletes a manager object nothing names. One that cannot be read (too few pieces on the
    /// devices in service) is left for a scrub to report: a start-up is no reason to refuse.
    async fn delete_unneeded(&self, key: &[u8]) -> Result<bool> {
        match self.inner.manager.delete(key).await {
            Ok(_) => Ok(true),
            Err(e @ RedundancyError::Lost { .. }) => {
                tracing::warn!(error = %e, "an unneeded object cannot be read; left in place");
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The first phase of the start: the buckets, published at once with no objects (their
    /// count is small; reads that need no more than a bucket and one record are served from
    /// here on, see `warmup.rs`).
    pub(crate) async fn load_buckets(&self) -> Result<LoadReport> {
        let mut report = LoadReport::default();
        let mut buckets: BTreeMap<String, Bucket> = BTreeMap::new();
        for (_, v) in self.records(TAG_BUCKET, &mut report).await? {
            let (rec, _): (BucketRecord, _) = decode(Kind::Bucket, &v)?;
            let info = BucketInfo {
                name: rec.name.clone(),
                created: rec.created,
                settings: rec.settings,
            };
            buckets.insert(rec.name, Bucket::new(info, rec.id));
        }
        report.buckets = buckets.len();
        self.inner.state.write().unwrap().buckets = buckets;
        Ok(report)
    }

    /// The second phase: every object, version and upload, read from the records into the
    /// buckets [`Store::load_buckets`] published, interrupted work settled and chunks no
    /// record names deleted. Nothing may change the index while it runs (see `warmup.rs`).
    pub(crate) async fn load(&self, mut report: LoadReport) -> Result<LoadReport> {
        let started = Instant::now();
        let mut buckets: BTreeMap<String, Bucket> = {
            let st = self.inner.state.read().unwrap();
            st.buckets
                .values()
                .map(|b| (b.info.name.clone(), Bucket::new(b.info.clone(), b.id)))
                .collect()
        };
        let by_id: HashMap<u64, String> = buckets
            .values()
            .map(|b| (b.id, b.info.name.clone()))
            .collect();
        let mut last_seq = 0u64;
        // Current objects by bucket id, in key order (records come sorted): each bucket's map
        // is built from them in one go.
        let mut current: HashMap<u64, Vec<(String, Arc<Entry>)>> = HashMap::new();
        for tag in [TAG_OBJECT, TAG_VERSION] {
            for (k, v) in self.records(tag, &mut report).await? {
                let (rec, _) = decode_object(&v)?;
                let Some(b) = by_id.get(&rec.bucket_id).and_then(|n| buckets.get_mut(n)) else {
                    self.remove_record(&k, &mut report).await?;
                    continue;
                };
                let expected = match tag {
                    TAG_OBJECT => object_key(rec.bucket_id, &rec.info.key),
                    _ => version_key(rec.bucket_id, &rec.info.key, rec.seq),
                };
                if expected != k {
                    return Err(StoreError::Corrupt(format!(
                        "object record of {:?} under another key",
                        rec.info.key
                    )));
                }
                last_seq = last_seq.max(rec.seq);
                let key = rec.info.key.clone();
                let entry = Arc::new(Entry {
                    info: rec.info,
                    body: Stored::from_ref(rec.body),
                    upload_id: rec.upload_id,
                    seq: rec.seq,
                });
                match tag {
                    TAG_OBJECT => current.entry(b.id).or_default().push((key, entry)),
                    _ => b.history.entry(key).or_default().push(entry),
                }
            }
        }
        for (id, objects) in current {
            if let Some(b) = by_id.get(&id).and_then(|n| buckets.get_mut(n)) {
                b.objects = objects.into_iter().collect();
            }
        }
        self.inner
            .version_clock
            .fetch_max(last_seq, std::sync::atomic::Ordering::SeqCst);
        for b in buckets.values_mut() {
            let keys: Vec<String> = b.history.keys().cloned().collect();
            for key in keys {
                self.settle(b, &key, &mut report).await?;
            }
        }
        let mut referenced: HashSet<Id> = HashSet::new();
        for b in buckets.values() {
            for e in b.objects.values().chain(b.history.values().flatten()) {
                if let Stored::Chunks(c) = &e.body {
                    referenced.extend(c.iter().map(|c| c.id));
                }
            }
        }
        // Uploads: drop those of deleted buckets and those whose completion was interrupted
        // after the object was written (the object names their chunks).
        let mut uploads: HashMap<String, (String, Arc<crate::multipart::Upload>)> = HashMap::new();
        for (k, v) in self.records(TAG_UPLOAD, &mut report).await? {
            let (rec, _): (UploadRecord, _) = decode(Kind::Upload, &v)?;
            let bucket = by_id.get(&rec.bucket_id).cloned();
            let finished = bucket.as_ref().is_some_and(|n| {
                let b = &buckets[n];
                let versions = b.objects.get(&rec.key).into_iter();
                versions
                    .chain(b.history.get(&rec.key).into_iter().flatten())
                    .any(|e| e.upload_id.as_deref() == Some(&rec.upload_id))
            });
            match (bucket, finished) {
                (Some(name), false) => {
                    let Some(u) = Store::upload_from_record(rec) else {
                        return Err(StoreError::Corrupt("an upload record's id".into()));
                    };
                    uploads.insert(u.record.upload_id.clone(), (name, Arc::new(u)));
                }
                _ => self.remove_record(&k, &mut report).await?,
            }
        }
        for (k, v) in self.records(TAG_PART, &mut report).await? {
            let (upload_id, part) = Store::part_from_record(&v)?;
            match uploads.get(&upload_id) {
                Some((_, u)) if part_key(&u.id, part.info.number) == k => {
                    referenced.extend(part.chunks.iter().map(|c| c.id));
                    u.parts.lock().unwrap().parts.insert(part.info.number, part);
                }
                _ => self.remove_record(&k, &mut report).await?,
            }
        }
        for (id, (bucket, u)) in uploads {
            debug_assert_eq!(upload_key(&u.id)[1..], u.id);
            if let Some(b) = buckets.get_mut(&bucket) {
                b.uploads.insert(id, u);
                report.uploads += 1;
            }
        }
        // Chunks of interrupted puts, replaced objects and finished uploads.
        let chunks = if report.records_unreadable == 0 {
            self.inner.manager.keys(&[TAG_CHUNK]).await?
        } else {
            Vec::new()
        };
        for k in chunks {
            match chunk_id_of(&k) {
                Some(id) if referenced.contains(&id) => {}
                _ => {
                    if self.delete_unneeded(&k).await? {
                        report.chunks_removed += 1;
                    }
                }
            }
        }
        report.buckets = buckets.len();
        report.objects = buckets.values().map(|b| b.objects.len()).sum();
        report.versions = buckets
            .values()
            .flat_map(|b| b.history.values())
            .map(Vec::len)
            .sum();
        self.publish(buckets);
        // After an unclean shutdown the careful reads above rolled records forward or back
        // and rewrote their missing copies: make that durable before anything is served, or
        // the next power cut takes the rewrites back and the object depends on the few pieces
        // the crash left (on devices that may be lost next).
        let changed = report.records_removed + report.chunks_removed + report.versions_settled;
        if self.inner.unclean_start || changed > 0 {
            self.durable().await?;
        }
        tracing::info!(
            buckets = report.buckets,
            objects = report.objects,
            versions = report.versions,
            versions_settled = report.versions_settled,
            uploads = report.uploads,
            records_removed = report.records_removed,
            chunks_removed = report.chunks_removed,
            records_unreadable = report.records_unreadable,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "index loaded"
        );
        Ok(report)
    }

    /// Installs the loaded buckets as the index, with the chunk lists read-throughs hold.
    fn publish(&self, mut buckets: BTreeMap<String, Bucket>) {
        self.inner.warmup.adopt(&mut buckets);
        self.inner.state.write().unwrap().buckets = buckets;
    }

    /// Puts a key's versions where they belong when a crash cut a versioning change short
    /// (see `versions.rs`): the newest, when it is an object, in the `K` record and every
    /// other version in a `V` record; a version found in both places loses the copy it should
    /// not have, and of two null versions the older goes. Copies are written before anything
    /// is removed, so a crash here too leaves what the next start settles.
    async fn settle(&self, b: &mut Bucket, key: &str, report: &mut LoadReport) -> Result<()> {
        let manager = &self.inner.manager;
        let rkey = object_key(b.id, key);
        let in_k = b.objects.remove(key);
        let mut versions = b.history.remove(key).unwrap_or_default();
        if let Some(k) = &in_k {
            if !versions.iter().any(|e| e.seq == k.seq) {
                versions.push(k.clone());
            }
        }
        versions.sort_by_key(|v| std::cmp::Reverse(v.seq));
        let k_seq = in_k.as_ref().map(|k| k.seq);
        // Which versions have a V record: every one the V pass found.
        let v_seqs: HashSet<u64> = versions
            .iter()
            .filter(|e| !in_k.as_ref().is_some_and(|k| Arc::ptr_eq(k, e)))
            .map(|e| e.seq)
            .collect();
        let newest_null = versions
            .iter()
            .find(|e| e.info.version_id.is_none())
            .map(|e| e.seq);
        let (kept, dropped): (Vec<Arc<Entry>>, Vec<Arc<Entry>>) = versions
            .into_iter()
            .partition(|e| e.info.version_id.is_some() || Some(e.seq) == newest_null);
        let target_k = kept.first().filter(|e| !e.info.delete_marker).cloned();
        let target_seq = target_k.as_ref().map(|e| e.seq);
        // 1. Every version that stays but not as current gets its V record.
        let mut wrote = false;
        for e in kept.iter().filter(|e| Some(e.seq) != target_seq) {
            if !v_seqs.contains(&e.seq) {
                let (value, mech) = self.record_value(b.id, e, &rkey).await?;
                let vkey = version_key(b.id, key, e.seq);
                manager.put(&vkey, &value, StoreMode::Upsert, mech).await?;
                report.versions_settled += 1;
                wrote = true;
            }
        }
        if wrote {
            self.durable().await?;
        }
        // 2. The K record holds the newest version when it is an object, else nothing.
        let k_changed = match &target_k {
            Some(t) if k_seq != Some(t.seq) => {
                let vkey = version_key(b.id, key, t.seq);
                let (value, mech) = self.record_value(b.id, t, &vkey).await?;
                manager.put(&rkey, &value, StoreMode::Upsert, mech).await?;
                true
            }
            None if k_seq.is_some() => {
                manager.delete(&rkey).await?;
                true
            }
            _ => false,
        };
        // 3. V records of the current version and of dropped null versions go.
        let stale: Vec<u64> = target_seq
            .into_iter()
            .chain(dropped.iter().map(|e| e.seq))
            .filter(|s| v_seqs.contains(s))
            .collect();
        if k_changed {
            report.versions_settled += 1;
            if !stale.is_empty() {
                self.durable().await?;
            }
        }
        for seq in stale {
            manager.delete(&version_key(b.id, key, seq)).await?;
            report.versions_settled += 1;
        }
        let older: Vec<Arc<Entry>> = kept
            .into_iter()
            .filter(|e| Some(e.seq) != target_seq)
            .collect();
        if let Some(t) = target_k {
            b.objects.insert(key.to_string(), t);
        }
        if !older.is_empty() {
            b.history.insert(key.to_string(), older);
        }
        Ok(())
    }
}
