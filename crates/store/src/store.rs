//! The store: buckets and objects over the reliability manager.
//!
//! Every S3 object is one *record* in the manager (its metadata, and its body when small); a
//! larger body is cut into *chunks*, each a manager object of its own, written and made durable
//! before the record that names them. The manager writes one key atomically (the old version
//! whole or the new one whole), so a crash never leaves an object half-replaced; chunks no
//! record names are deleted at the next start. An in-memory index of every object's metadata
//! answers HEAD and listings and is rebuilt from the records at start-up.
//!
//! Durability: a put, delete or multipart step returns after a manager sync that covers it
//! (group commit: concurrent operations share one sync). With read/write separation, what a
//! sync makes durable is what `rails` documents for its configuration.

use crate::config::StoreConfig;
use crate::devices::Opened;
use crate::error::{Result, StoreError};
use crate::identity::ArrayIdentity;
use crate::listing;
use crate::metrics::Metrics;
use crate::record::{
    self, bucket_key, chunk_key, decode_object, encode, encode_object, object_key, BodyRef,
    BucketRecord, ChunkRef, Kind, ObjectRecord,
};
use crate::types::{
    Body, BucketInfo, ChecksumsAtEnd, GetObject, ListEntry, ListPage, ListQuery, ObjectInfo,
    PutOptions, RangeSpec, SentMd5,
};
use crate::warmup::ReadThrough;
use bytes::Bytes;
use futures_util::StreamExt;
use md5::{Digest, Md5};
use railstore_device::{ReadRange, StoreMode};
use railstore_rails::Rails;
use railstore_redundancy::{Manager, Mechanism, RedundancyError};
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

/// Longest object key (S3's limit).
pub const KEY_BYTES_MAX: usize = 1024;
/// Stripes of the per-record lock table.
pub(crate) const RECORD_LOCK_STRIPES: usize = 1024;
/// Bytes one read of a chunk fetches at a time.
const READ_PIECE_BYTES: u64 = 4 << 20;
/// Records read at once while loading the index.
pub(crate) const LOAD_CONCURRENCY: usize = 32;
/// The file in the data folder that says the last shutdown was clean.
pub(crate) const CLEAN_MARKER: &str = "clean-shutdown";

/// An object as the index knows it.
#[derive(Debug)]
pub(crate) struct Entry {
    pub info: ObjectInfo,
    pub body: Stored,
    pub upload_id: Option<String>,
    /// The version's place among the key's versions (its record's `seq`).
    pub seq: u64,
}

/// Where an indexed object's body is.
#[derive(Debug, Clone)]
pub(crate) enum Stored {
    /// In its record.
    Inline,
    /// In chunks; readers hold a clone while they stream, and the chunks are deleted only once
    /// nobody does.
    Chunks(Arc<Vec<ChunkRef>>),
}

impl Stored {
    pub(crate) fn from_ref(b: BodyRef) -> Stored {
        match b {
            BodyRef::Inline => Stored::Inline,
            BodyRef::Chunks(c) => Stored::Chunks(Arc::new(c)),
        }
    }
}

pub(crate) struct Bucket {
    pub info: BucketInfo,
    pub id: u64,
    /// The current object of each key that has one (never a delete marker).
    pub objects: BTreeMap<String, Arc<Entry>>,
    /// The other versions of each key, newest first: older objects and delete markers. A key
    /// with no current object but versions here has a delete marker first.
    pub history: BTreeMap<String, Vec<Arc<Entry>>>,
    pub uploads: BTreeMap<String, Arc<crate::multipart::Upload>>,
    /// Being deleted: takes no new objects.
    pub deleting: bool,
}

impl Bucket {
    pub(crate) fn new(info: BucketInfo, id: u64) -> Bucket {
        Bucket {
            info,
            id,
            objects: BTreeMap::new(),
            history: BTreeMap::new(),
            uploads: BTreeMap::new(),
            deleting: false,
        }
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub buckets: BTreeMap<String, Bucket>,
}

impl State {
    /// The bucket named `name`, unless it is missing or being deleted.
    pub(crate) fn bucket(&self, name: &str) -> Result<&Bucket> {
        self.buckets
            .get(name)
            .filter(|b| !b.deleting)
            .ok_or_else(|| StoreError::NoSuchBucket(name.to_string()))
    }
}

/// Makes writes durable in groups: a caller takes a ticket after its writes returned; whoever
/// syncs next covers every ticket taken before its sync began.
#[derive(Default)]
pub(crate) struct Committer {
    requested: AtomicU64,
    done: AtomicU64,
    lock: tokio::sync::Mutex<()>,
}

impl Committer {
    async fn sync(&self, manager: &Manager) -> Result<()> {
        let ticket = self.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let _turn = self.lock.lock().await;
        if self.done.load(Ordering::SeqCst) >= ticket {
            return Ok(());
        }
        let upto = self.requested.load(Ordering::SeqCst);
        manager.sync().await?;
        self.done.fetch_max(upto, Ordering::SeqCst);
        Ok(())
    }
}

/// A body written to the manager but not yet named by a record.
pub(crate) struct WrittenBody {
    pub size: u64,
    pub md5: [u8; 16],
    /// The body itself when it fits in the record.
    pub inline: Option<Vec<u8>>,
    pub chunks: Vec<ChunkRef>,
    pub mechanism: Mechanism,
}

pub(crate) struct Inner {
    pub config: StoreConfig,
    pub manager: Manager,
    pub rails: Option<Arc<Rails>>,
    /// Rails whether or not it separates (a pass-through without separation): failing and
    /// readmitting devices go through it.
    pub rails_layer: Arc<Rails>,
    /// The devices as opened; an online replace changes one, an online grow adds some.
    pub devices: Growing<Arc<Mutex<Opened>>>,
    /// The slot each device sits in under rails (`online.rs` swaps them).
    pub slots: Growing<Arc<railstore_device::DeviceSlot>>,
    /// The rebuild running or last run while serving.
    pub repair: Mutex<Option<crate::background::RepairRun>>,
    /// Held while a rebuild or scrub is being started (one start at a time).
    pub repair_ops: tokio::sync::Mutex<()>,
    pub state: RwLock<State>,
    pub locks: Vec<tokio::sync::Mutex<()>>,
    pub bucket_ops: tokio::sync::Mutex<()>,
    pub committer: Committer,
    /// Chunk lists no record names any more, deleted once no reader holds them.
    pub garbage: Mutex<Vec<Arc<Vec<ChunkRef>>>>,
    pub metrics: Metrics,
    pub closing: AtomicBool,
    /// A drain's move is done: the clean shutdown removes the drained devices (`grow.rs`).
    pub drained: AtomicBool,
    /// Holds the data folder's lock for the store's lifetime.
    pub lock_file: Option<File>,
    /// The array's identity and device states (none for memory devices).
    pub identity: Option<Arc<ArrayIdentity>>,
    /// The last shutdown was not clean: scrub before trusting every piece.
    pub unclean_start: bool,
    /// A scrub is owed (the start was unclean and no full scrub has finished since): the
    /// shutdown does not mark the folder clean, so the next start scrubs.
    pub scrub_owed: AtomicBool,
    /// The last version sequence number given out (see `versions.rs`).
    pub version_clock: AtomicU64,
    /// Whether the index has loaded (see `warmup.rs`).
    pub warmup: crate::warmup::Warmup,
    /// The background load of the index, awaited at shutdown.
    pub loader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// A list of the array's devices that an online grow appends to; read without a lock.
pub(crate) struct Growing<T>(arc_swap::ArcSwap<Vec<T>>);

impl<T: Clone> Growing<T> {
    pub fn new(items: Vec<T>) -> Growing<T> {
        Growing(arc_swap::ArcSwap::from_pointee(items))
    }

    pub fn get(&self, d: usize) -> T {
        self.0.load()[d].clone()
    }

    pub fn all(&self) -> Arc<Vec<T>> {
        self.0.load_full()
    }

    pub fn len(&self) -> usize {
        self.0.load().len()
    }

    /// Appends `more` (callers add one grow at a time).
    pub fn extend(&self, more: &[T]) {
        self.0.rcu(|old| {
            let mut all = Vec::clone(old);
            all.extend_from_slice(more);
            all
        });
    }
}

/// The store. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("data_dir", &self.inner.config.data_dir)
            .field("devices", &self.inner.devices.len())
            .finish()
    }
}

fn now() -> SystemTime {
    SystemTime::now()
}

/// S3's bucket naming rules (the general-purpose ones).
pub fn check_bucket_name(name: &str) -> Result<()> {
    let bad = |why| {
        Err(StoreError::InvalidBucketName {
            name: name.to_string(),
            why,
        })
    };
    if !(3..=63).contains(&name.len()) {
        return bad("names take 3 to 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return bad("only lower-case letters, digits, dots and hyphens");
    }
    let edge = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !edge(name.as_bytes()[0]) || !edge(name.as_bytes()[name.len() - 1]) {
        return bad("names begin and end with a letter or digit");
    }
    if name.contains("..") {
        return bad("no two adjacent dots");
    }
    // Each dot-separated part is a DNS label (virtual-hosted-style names are host names).
    if name.contains(".-") || name.contains("-.") {
        return bad("no hyphen next to a dot");
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return bad("not an IP address");
    }
    Ok(())
}

pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(StoreError::KeyLength {
            len: key.len(),
            max: KEY_BYTES_MAX,
        });
    }
    Ok(())
}

impl Store {
    /// The configuration it runs with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// The reliability manager underneath (status, repair).
    pub fn manager(&self) -> &Manager {
        &self.inner.manager
    }

    /// Read/write separation, when on.
    pub fn rails(&self) -> Option<&Arc<Rails>> {
        self.inner.rails.as_ref()
    }

    /// Whether the previous run ended without a clean shutdown (a scrub is advisable).
    pub fn unclean_start(&self) -> bool {
        self.inner.unclean_start
    }

    /// False after an unclean start until a full scrub has run: the pieces of an object
    /// written when the crash came may disagree, and a plain [`Manager::get`] may meet one
    /// version now and the other later. A reader that must not see a value change under it
    /// reads with [`Manager::get_resolved`] until then (the store's own records are resolved
    /// that way when it opens).
    pub fn settled(&self) -> bool {
        !self.inner.scrub_owed.load(Ordering::SeqCst)
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.inner.closing.load(Ordering::SeqCst) {
            return Err(StoreError::ShuttingDown);
        }
        Ok(())
    }

    pub(crate) async fn lock(&self, record_key: &[u8]) -> tokio::sync::MutexGuard<'_, ()> {
        let h = railstore_placement::key_hash(record_key, 0x5354_4f52);
        self.inner.locks[(h % RECORD_LOCK_STRIPES as u64) as usize]
            .lock()
            .await
    }

    /// Makes every write acknowledged so far durable (the group commit S3 writes share): what
    /// a block device's flush asks for.
    pub async fn flush(&self) -> Result<()> {
        self.check_open()?;
        self.durable().await
    }

    pub(crate) async fn durable(&self) -> Result<()> {
        self.inner.committer.sync(&self.inner.manager).await
    }

    /// Queues chunks no record names any more; the reaper deletes them once no reader holds
    /// them.
    pub(crate) fn discard(&self, chunks: Arc<Vec<ChunkRef>>) {
        if !chunks.is_empty() {
            self.inner.garbage.lock().unwrap().push(chunks);
        }
    }

    /// Queues the chunks of versions no record names any more.
    pub(crate) fn discard_entries(&self, gone: Vec<Arc<Entry>>) {
        for e in gone {
            if let Stored::Chunks(c) = &e.body {
                self.discard(c.clone());
            }
        }
    }

    /// Deletes the discarded chunks nobody reads any more (all of them with `all`).
    pub(crate) async fn reap(&self, all: bool) {
        let ready: Vec<Arc<Vec<ChunkRef>>> = {
            let mut g = self.inner.garbage.lock().unwrap();
            let (ready, keep) = std::mem::take(&mut *g)
                .into_iter()
                .partition(|c| all || Arc::strong_count(c) == 1);
            *g = keep;
            ready
        };
        for list in ready {
            for c in list.iter() {
                if let Err(e) = self.inner.manager.delete(&chunk_key(&c.id)).await {
                    tracing::warn!(error = %e, "deleting an unused chunk; the next start retries");
                }
            }
        }
    }

    // ---- buckets ----

    /// Creates a bucket; `Ok(false)` when it exists already (S3 lets an owner re-create it).
    pub async fn create_bucket(&self, name: &str) -> Result<bool> {
        self.create_bucket_with(name, BTreeMap::new()).await
    }

    /// Creates a bucket with these settings (its owner, its ACL, …) in the same record, so a
    /// crash leaves either no bucket or the bucket with all of them; `Ok(false)` when it exists
    /// already (and then nothing changes).
    pub async fn create_bucket_with(
        &self,
        name: &str,
        settings: BTreeMap<String, String>,
    ) -> Result<bool> {
        self.indexed().await?;
        self.check_open()?;
        check_bucket_name(name)?;
        let _ops = self.inner.bucket_ops.lock().await;
        if self.inner.state.read().unwrap().buckets.contains_key(name) {
            return Ok(false);
        }
        let rec = BucketRecord {
            name: name.to_string(),
            id: crate::ids::random::<u64>() | 1,
            created: now(),
            settings,
        };
        self.inner
            .manager
            .put(
                &bucket_key(name),
                &encode(Kind::Bucket, &rec, b""),
                StoreMode::Upsert,
                None,
            )
            .await?;
        self.durable().await?;
        let info = BucketInfo {
            name: rec.name,
            created: rec.created,
            settings: rec.settings,
        };
        self.inner
            .state
            .write()
            .unwrap()
            .buckets
            .insert(name.to_string(), Bucket::new(info, rec.id));
        self.inner
            .metrics
            .buckets_created
            .fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// One of a bucket's settings (see [`BucketInfo::settings`]).
    pub fn bucket_setting(&self, bucket: &str, name: &str) -> Result<Option<String>> {
        let st = self.inner.state.read().unwrap();
        Ok(st.bucket(bucket)?.info.settings.get(name).cloned())
    }

    /// Sets (or with `None` removes) one of a bucket's settings, durably before it returns.
    pub async fn set_bucket_setting(
        &self,
        bucket: &str,
        name: &str,
        value: Option<String>,
    ) -> Result<()> {
        self.indexed().await?;
        self.check_open()?;
        // Bucket creation and deletion take this lock too: the record written here is the
        // bucket's, not a deleted one's.
        let _ops = self.inner.bucket_ops.lock().await;
        let rec = {
            let st = self.inner.state.read().unwrap();
            let b = st.bucket(bucket)?;
            let mut settings = b.info.settings.clone();
            match &value {
                Some(v) => settings.insert(name.to_string(), v.clone()),
                None => settings.remove(name),
            };
            BucketRecord {
                name: bucket.to_string(),
                id: b.id,
                created: b.info.created,
                settings,
            }
        };
        self.inner
            .manager
            .put(
                &bucket_key(bucket),
                &encode(Kind::Bucket, &rec, b""),
                StoreMode::Upsert,
                None,
            )
            .await?;
        self.durable().await?;
        let mut st = self.inner.state.write().unwrap();
        if let Some(b) = st.buckets.get_mut(bucket) {
            b.info.settings = rec.settings;
        }
        Ok(())
    }

    /// Deletes an empty bucket (no objects and no versions of any). Multipart uploads in
    /// progress are aborted with it.
    pub async fn delete_bucket(&self, name: &str) -> Result<()> {
        self.indexed().await?;
        self.check_open()?;
        let _ops = self.inner.bucket_ops.lock().await;
        let uploads: Vec<_> = {
            let mut st = self.inner.state.write().unwrap();
            let b = st
                .buckets
                .get_mut(name)
                .ok_or_else(|| StoreError::NoSuchBucket(name.to_string()))?;
            if !b.objects.is_empty() || !b.history.is_empty() {
                return Err(StoreError::BucketNotEmpty(name.to_string()));
            }
            // From here the bucket takes no new object, upload or part.
            b.deleting = true;
            b.uploads.values().cloned().collect()
        };
        let res = async {
            // As S3 does: uploads still in progress are aborted with their bucket.
            for upload in &uploads {
                self.abort_upload(name, upload).await?;
            }
            self.inner.manager.delete(&bucket_key(name)).await?;
            self.durable().await
        }
        .await;
        let mut st = self.inner.state.write().unwrap();
        match res {
            Ok(()) => {
                st.buckets.remove(name);
                Ok(())
            }
            Err(e) => {
                if let Some(b) = st.buckets.get_mut(name) {
                    b.deleting = false;
                }
                Err(e)
            }
        }
    }

    /// The bucket, if it exists.
    pub fn head_bucket(&self, name: &str) -> Result<BucketInfo> {
        let st = self.inner.state.read().unwrap();
        st.bucket(name).map(|b| b.info.clone())
    }

    /// Every bucket, by name.
    pub fn list_buckets(&self) -> Vec<BucketInfo> {
        let st = self.inner.state.read().unwrap();
        st.buckets
            .values()
            .filter(|b| !b.deleting)
            .map(|b| b.info.clone())
            .collect()
    }

    pub(crate) fn bucket_id(&self, name: &str) -> Result<u64> {
        let st = self.inner.state.read().unwrap();
        st.bucket(name).map(|b| b.id)
    }

    // ---- objects ----

    /// Stores an object, replacing any under the same key. Returns once it is durable; a body
    /// error, a size above the limit or a `Content-MD5` mismatch stores nothing.
    pub async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Body,
        options: PutOptions,
    ) -> Result<ObjectInfo> {
        self.indexed().await?;
        self.check_open()?;
        check_key(key)?;
        let bucket_id = self.bucket_id(bucket)?;
        let written = self
            .write_body(body, options.mechanism, self.inner.config.inline_bytes_max)
            .await?;
        if let Some(want) = options.content_md5 {
            if want != written.md5 {
                self.discard(Arc::new(written.chunks));
                return Err(StoreError::BadDigest(
                    "Content-MD5 does not match the body".into(),
                ));
            }
        }
        let condition = options.condition;
        let info = ObjectInfo {
            key: key.to_string(),
            size: written.size,
            etag: SentMd5::etag(options.sent_md5.as_ref(), written.md5),
            last_modified: now(),
            content_type: options.content_type,
            user_metadata: options.user_metadata,
            headers: options.headers,
            checksums: ChecksumsAtEnd::added_to(
                options.checksums_at_end.as_ref(),
                options.checksums,
            ),
            mechanism: written.mechanism.to_string(),
            parts: 0,
            part_sizes: Vec::new(),
            part_numbers: Vec::new(),
            part_checksums: Vec::new(),
            part_annotations: Vec::new(),
            version_id: None,
            delete_marker: false,
        };
        if !written.chunks.is_empty() {
            // The chunks are durable before any record names them.
            if let Err(e) = self.durable().await {
                self.discard(Arc::new(written.chunks));
                return Err(e);
            }
        }
        let rkey = object_key(bucket_id, key);
        let (info, gone) = {
            let _lock = self.lock(&rkey).await;
            if let Some(c) = &condition {
                if let Err(e) = c.check(self.current(bucket, key).as_ref(), bucket, key) {
                    self.discard(Arc::new(written.chunks));
                    return Err(e);
                }
            }
            self.install(bucket, bucket_id, &rkey, info, written, None)
                .await?
        };
        self.durable().await?;
        self.discard_entries(gone);
        self.inner.metrics.puts.fetch_add(1, Ordering::Relaxed);
        self.inner
            .metrics
            .bytes_in
            .fetch_add(info.size, Ordering::Relaxed);
        Ok(info)
    }

    /// Writes the object's record as the key's current object and enters it in the index
    /// (the caller holds the record's lock and makes it durable). With versioning the object
    /// it replaces becomes an older version (see `versions.rs`). Returns the object as stored
    /// (with its version id) and the versions no record names any more, whose chunks the
    /// caller discards once the change is durable.
    pub(crate) async fn install(
        &self,
        bucket: &str,
        bucket_id: u64,
        rkey: &[u8],
        mut info: ObjectInfo,
        written: WrittenBody,
        upload_id: Option<String>,
    ) -> Result<(ObjectInfo, Vec<Arc<Entry>>)> {
        let (body_ref, inline_mech) = match &written.inline {
            Some(_) => (BodyRef::Inline, Some(written.mechanism)),
            None => (BodyRef::Chunks(written.chunks.clone()), None),
        };
        let seq = self.next_version_seq();
        let room = self.make_room(bucket, bucket_id, &info.key, seq).await?;
        info.version_id = room.version_id.clone();
        let rec = ObjectRecord {
            bucket_id,
            info,
            body: body_ref,
            upload_id,
            seq,
        };
        let value = encode_object(&rec, written.inline.as_deref().unwrap_or_default());
        // A failed record write discards nothing: some of its pieces may be on the devices, so
        // recovery may yet roll the record forward, and for a completion the chunks still
        // belong to the upload's parts. Chunks no record names go at the next start.
        self.inner
            .manager
            .put(rkey, &value, StoreMode::Upsert, inline_mech)
            .await?;
        let info = rec.info.clone();
        let entry = Arc::new(Entry {
            info: rec.info,
            body: Stored::from_ref(rec.body),
            upload_id: rec.upload_id,
            seq,
        });
        let placed = {
            let mut st = self.inner.state.write().unwrap();
            match st.buckets.get_mut(bucket) {
                Some(b) if b.id == bucket_id && !b.deleting => Ok(room.enter(b, entry)),
                _ => Err(()),
            }
        };
        match placed {
            Ok(gone) => {
                self.forget_null_record(bucket_id, &info.key, &room).await;
                Ok((info, gone))
            }
            Err(()) => {
                // The bucket went while the body was written.
                let _ = self.inner.manager.delete(rkey).await;
                self.discard(Arc::new(written.chunks));
                Err(StoreError::NoSuchBucket(bucket.to_string()))
            }
        }
    }

    /// Reads a body into the manager: kept in memory when it ends within `inline_max` bytes,
    /// else written as chunks as it arrives. On any error the chunks written are discarded.
    pub(crate) async fn write_body(
        &self,
        mut body: Body,
        mechanism: Option<Mechanism>,
        inline_max: u64,
    ) -> Result<WrittenBody> {
        let cfg = &self.inner.config;
        let chunk_bytes = cfg.chunk_bytes as usize;
        let mut md5 = Md5::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut size = 0u64;
        let mut chunks: Vec<ChunkRef> = Vec::new();
        let mut chunk_mech: Option<Mechanism> = None;
        let res: Result<()> = async {
            while let Some(piece) = body.next().await {
                let piece = piece?;
                size += piece.len() as u64;
                if size > cfg.object_bytes_max {
                    return Err(StoreError::EntityTooLarge {
                        size,
                        max: cfg.object_bytes_max,
                    });
                }
                md5.update(&piece);
                buf.extend_from_slice(&piece);
                while buf.len() >= chunk_bytes && size > inline_max {
                    let rest = buf.split_off(chunk_bytes);
                    let full = std::mem::replace(&mut buf, rest);
                    chunks.push(self.write_chunk(&full, mechanism, &mut chunk_mech).await?);
                }
            }
            if size > inline_max && !buf.is_empty() {
                let last = std::mem::take(&mut buf);
                chunks.push(self.write_chunk(&last, mechanism, &mut chunk_mech).await?);
            }
            Ok(())
        }
        .await;
        if let Err(e) = res {
            self.discard(Arc::new(chunks));
            return Err(e);
        }
        let policy = &self.inner.manager.config().policy;
        Ok(if size <= inline_max {
            WrittenBody {
                size,
                md5: md5.finalize().into(),
                mechanism: mechanism.unwrap_or_else(|| policy.choose(size)),
                inline: Some(buf),
                chunks,
            }
        } else {
            WrittenBody {
                size,
                md5: md5.finalize().into(),
                mechanism: chunk_mech.expect("a chunked body has chunks"),
                inline: None,
                chunks,
            }
        })
    }

    async fn write_chunk(
        &self,
        data: &[u8],
        custom: Option<Mechanism>,
        chosen: &mut Option<Mechanism>,
    ) -> Result<ChunkRef> {
        let mech = *chosen.get_or_insert_with(|| {
            custom.unwrap_or_else(|| self.inner.manager.config().policy.choose(data.len() as u64))
        });
        let id = record::new_id();
        self.inner
            .manager
            .put(&chunk_key(&id), data, StoreMode::Upsert, Some(mech))
            .await?;
        Ok(ChunkRef {
            id,
            len: data.len() as u64,
        })
    }

    /// The description of the object under `key` now, if any (under the key's lock: the one a
    /// write will replace).
    pub(crate) fn current(&self, bucket: &str, key: &str) -> Option<ObjectInfo> {
        self.entry(bucket, key).ok().map(|(_, e)| e.info.clone())
    }

    pub(crate) fn entry(&self, bucket: &str, key: &str) -> Result<(u64, Arc<Entry>)> {
        let st = self.inner.state.read().unwrap();
        let b = st.bucket(bucket)?;
        let e = b.objects.get(key).ok_or_else(|| StoreError::NoSuchKey {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })?;
        Ok((b.id, e.clone()))
    }

    /// An object's description.
    pub async fn head_object(&self, bucket: &str, key: &str) -> Result<ObjectInfo> {
        self.head_object_version(bucket, key, None).await
    }

    /// Reads an object, or the range of it asked for. The body streams lazily.
    pub async fn get_object(
        &self,
        bucket: &str,
        key: &str,
        range: Option<RangeSpec>,
    ) -> Result<GetObject> {
        self.get_object_version(bucket, key, None, range).await
    }

    /// Reads a version of an object (`None`: the current one; `"null"`: the null version),
    /// or the range of it asked for. The body streams lazily.
    pub async fn get_object_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        range: Option<RangeSpec>,
    ) -> Result<GetObject> {
        self.check_open()?;
        self.inner.metrics.gets.fetch_add(1, Ordering::Relaxed);
        if version_id.is_none() {
            if let ReadThrough::Found {
                info,
                inline,
                chunks,
            } = self.read_through(bucket, key).await?
            {
                return self.serve(*info, inline, chunks, range);
            }
        }
        self.indexed().await?;
        // An inline object's record may be replaced (or the version moved between its current
        // and older place) between the index lookup and its read; the record read is
        // authoritative, and names chunks only readers of the index hold.
        for _ in 0..8 {
            let (entry, rkey) = self.locate(bucket, key, version_id)?;
            let chunks = match &entry.body {
                Stored::Chunks(c) => c.clone(),
                Stored::Inline => {
                    let value = match self.inner.manager.get(&rkey, ReadRange::ALL).await {
                        Ok((v, _)) => v,
                        Err(RedundancyError::NotFound { .. }) => continue,
                        Err(e) => return Err(e.into()),
                    };
                    let (rec, body) = decode_object(&value)?;
                    // The current object's record is whichever it is now; a version's must
                    // be that version.
                    let other = version_id.is_some() && rec.seq != entry.seq;
                    if rec.body != BodyRef::Inline || rec.info.key != key || other {
                        continue;
                    }
                    let (start, end) = resolve(range, rec.info.size)?;
                    let bytes = Bytes::copy_from_slice(&body[start as usize..end as usize]);
                    self.inner
                        .metrics
                        .bytes_out
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    return Ok(GetObject {
                        info: rec.info,
                        range: (start, end),
                        body: crate::types::body_from(bytes),
                    });
                }
            };
            let (start, end) = resolve(range, entry.info.size)?;
            return Ok(GetObject {
                info: entry.info.clone(),
                range: (start, end),
                body: chunk_stream(
                    self.clone(),
                    chunks,
                    Mechanism::parse(&entry.info.mechanism).ok(),
                    start,
                    end,
                ),
            });
        }
        Err(StoreError::NoSuchKey {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }

    /// A GET's answer from a version's description and its body (inline) or chunk list.
    fn serve(
        &self,
        info: ObjectInfo,
        inline: Option<Vec<u8>>,
        chunks: Arc<Vec<ChunkRef>>,
        range: Option<RangeSpec>,
    ) -> Result<GetObject> {
        let (start, end) = resolve(range, info.size)?;
        let body = match inline {
            Some(body) => {
                let bytes = Bytes::copy_from_slice(&body[start as usize..end as usize]);
                self.inner
                    .metrics
                    .bytes_out
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                crate::types::body_from(bytes)
            }
            None => chunk_stream(
                self.clone(),
                chunks,
                Mechanism::parse(&info.mechanism).ok(),
                start,
                end,
            ),
        };
        Ok(GetObject {
            info,
            range: (start, end),
            body,
        })
    }

    /// Deletes an object; `Ok(false)` when there was none (S3 answers both the same way). In
    /// a bucket with versioning this makes a delete marker (see [`Store::delete_object_if`]).
    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<bool> {
        Ok(self.delete_object_if(bucket, key, None).await?.existed)
    }

    /// Deletes several objects; one result per key, in order.
    pub async fn delete_objects(&self, bucket: &str, keys: &[String]) -> Vec<Result<bool>> {
        futures_util::stream::iter(keys)
            .map(|k| self.delete_object(bucket, k))
            .buffered(8)
            .collect()
            .await
    }

    /// Copies an object; `options` replaces the metadata, `None` keeps the source's.
    pub async fn copy_object(
        &self,
        src_bucket: &str,
        src_key: &str,
        dst_bucket: &str,
        dst_key: &str,
        options: Option<PutOptions>,
    ) -> Result<ObjectInfo> {
        self.indexed().await?;
        let src = self.get_object(src_bucket, src_key, None).await?;
        let options = match options {
            Some(o) => o,
            None => PutOptions {
                content_type: src.info.content_type.clone(),
                user_metadata: src.info.user_metadata.clone(),
                headers: src.info.headers.clone(),
                checksums: if src.info.parts == 0 {
                    src.info.checksums.clone()
                } else {
                    BTreeMap::new()
                },
                checksums_at_end: None,
                content_md5: None,
                sent_md5: None,
                mechanism: Mechanism::parse(&src.info.mechanism).ok(),
                condition: None,
            },
        };
        self.put_object(dst_bucket, dst_key, src.body, options)
            .await
    }

    /// One page of a bucket's listing.
    pub fn list_objects(&self, bucket: &str, q: &ListQuery) -> Result<ListPage> {
        self.index_ready()?;
        self.inner.metrics.lists.fetch_add(1, Ordering::Relaxed);
        let st = self.inner.state.read().unwrap();
        let b = st.bucket(bucket)?;
        let (objects, mut page) = listing::list(&b.objects, q, |key, e| ListEntry {
            key: key.to_string(),
            size: e.info.size,
            etag: e.info.etag.clone(),
            last_modified: e.info.last_modified,
            mechanism: e.info.mechanism.clone(),
            acl: e.info.headers.get(crate::types::ACL_HEADER).cloned(),
        });
        page.objects = objects;
        Ok(page)
    }
}

fn resolve(range: Option<RangeSpec>, size: u64) -> Result<(u64, u64)> {
    match range {
        None => Ok((0, size)),
        Some(r) => r.resolve(size),
    }
}

/// Streams bytes `start..end` of a chunked body, one piece at a time. `mechanism`: the one the
/// object's record names for its chunks.
fn chunk_stream(
    store: Store,
    chunks: Arc<Vec<ChunkRef>>,
    mechanism: Option<Mechanism>,
    start: u64,
    end: u64,
) -> Body {
    let pieces = futures_util::stream::unfold(
        (store, chunks, start),
        move |(store, chunks, pos)| async move {
            if pos >= end {
                return None;
            }
            // Find the chunk holding `pos`.
            let mut base = 0u64;
            let mut found = None;
            for c in chunks.iter() {
                if pos < base + c.len {
                    found = Some((c.clone(), base));
                    break;
                }
                base += c.len;
            }
            let Some((c, base)) = found else {
                let e = StoreError::Corrupt("the object's chunks are shorter than its size".into());
                return Some((Err(e), (store, chunks, end)));
            };
            let offset = pos - base;
            let len = (c.len - offset).min(end - pos).min(READ_PIECE_BYTES);
            // Chunks are written once: the record's mechanism (else the policy's for their
            // length) is a safe guess when the manager's cache does not know them (after a
            // restart), so the read need not start at a primary that is writing.
            let manager = &store.inner.manager;
            let guess = mechanism.unwrap_or_else(|| manager.config().policy.choose(c.len));
            let res = manager
                .get_written_once(
                    &chunk_key(&c.id),
                    ReadRange {
                        offset,
                        len: Some(len),
                    },
                    guess,
                )
                .await;
            match res {
                Ok((bytes, _)) if bytes.len() as u64 == len => {
                    store
                        .inner
                        .metrics
                        .bytes_out
                        .fetch_add(len, Ordering::Relaxed);
                    Some((Ok(Bytes::from(bytes)), (store, chunks, pos + len)))
                }
                Ok((bytes, _)) => {
                    let e = StoreError::Corrupt(format!(
                        "a chunk returned {} bytes where {len} were due",
                        bytes.len()
                    ));
                    Some((Err(e), (store, chunks, end)))
                }
                Err(e) => Some((Err(e.into()), (store, chunks, end))),
            }
        },
    );
    Box::pin(pieces)
}

/// Deletes discarded chunks in the background.
pub(crate) async fn reaper(store: std::sync::Weak<Inner>) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Some(inner) = store.upgrade() else { return };
        if inner.closing.load(Ordering::SeqCst) {
            return;
        }
        // Chunks nothing names any more: no client waits on these deletes' reads.
        railstore_device::purpose::background(Store { inner }.reap(false)).await;
    }
}
