//! The reliability manager: a virtual key-value device over N devices (KVMD §3). It cuts objects
//! into segments, protects each segment with its mechanism, reads back the newest version that
//! enough consistent pieces agree on, and rewrites pieces it finds bad, missing or stale.

use crate::error::{RedundancyError, Result};
use crate::format::{segment_key, PieceHeader, PieceKind, KEY_OVERHEAD_BYTES, PIECE_HEADER_BYTES};
use crate::io::DeviceSet;
use crate::mechanism::{ManagerConfig, Mechanism};
use crate::pack::Packer;
use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use railstore_device::{Device, DeviceError, ReadRange, StoreMode};
use railstore_ec::{Code, CodeId, Codec};
use railstore_placement::{Layout, Placement};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Stripes of the per-key write lock table.
const KEY_LOCK_STRIPES: usize = 4096;
/// Deletes waiting for a sync before the manager syncs by itself.
const GARBAGE_ENTRIES_MAX: usize = 1 << 16;

/// A piece to delete once the version that replaced it is durable.
#[derive(Debug)]
pub(crate) struct Garbage {
    device: usize,
    device_key: Vec<u8>,
    /// For reused (segment 0) keys: the user key and the version whose piece may go.
    only_version: Option<(Vec<u8>, u64)>,
}

/// What the manager remembers about a stored object (the metadata cache), so hybrid mode does not
/// read a header before every operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Mechanism of the stored version.
    pub mechanism: Mechanism,
    /// The stored version.
    pub version: u64,
    /// Object length in bytes.
    pub len: u64,
    /// Segments.
    pub segments: u32,
}

/// One valid piece read from a device.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    pub header: PieceHeader,
    pub payload: Vec<u8>,
}

/// What each of a segment's devices holds (index = position in the key's placement).
#[derive(Debug, Default, Clone)]
pub(crate) struct SegmentScan {
    /// Device of each position.
    pub devices: Vec<usize>,
    /// The valid piece at each position.
    pub pieces: Vec<Option<Piece>>,
    /// A value was there but failed its checks.
    pub corrupt: Vec<bool>,
    /// The position's device could not be read.
    pub unreadable: Vec<bool>,
    /// The piece comes from a staged segment 0 (`format::staged_key`), not from the
    /// position's own key, which a repair must still rewrite.
    pub staged: Vec<bool>,
}

/// A segment resolved to one version.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub mechanism: Mechanism,
    pub version: u64,
    pub object_len: u64,
    pub segment_count: u32,
    /// Packing set and slot, for packed segments.
    pub set: Option<(u64, u8)>,
    pub data: Vec<u8>,
}

/// Segment 0 of an object as a put or delete in progress leaves it.
#[derive(Clone)]
enum Writing {
    Put(Resolved),
    Delete,
}

pub(crate) struct Inner {
    pub io: DeviceSet,
    pub layout: Layout,
    pub config: ManagerConfig,
    codecs: Mutex<HashMap<(u8, u8, u8), Arc<Codec>>>,
    locks: Vec<tokio::sync::Mutex<()>>,
    cache: Mutex<HashMap<Vec<u8>, ObjectMeta>>,
    /// What a put or delete is writing to segment 0 right now (see [`Inner::overlapping`]).
    writing: Mutex<HashMap<Vec<u8>, Writing>>,
    /// Entries in `writing`, so reads look there only when something is.
    writing_count: AtomicUsize,
    garbage: Mutex<Vec<Garbage>>,
    /// This manager, for background tasks.
    me: std::sync::Weak<Inner>,
    version: AtomicU64,
    pub key_bytes_max: usize,
    pub piece_payload_max: usize,
    pub packer: Packer,
}

/// The reliability manager. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Manager {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("devices", &self.inner.io.len())
            .field("policy", &self.inner.config.policy)
            .finish()
    }
}

impl Manager {
    /// Builds a manager over `devices` (their order is the array order; the layout is derived
    /// from the device count and the configuration, so reopening with the same devices in the
    /// same order and the same configuration finds every object). Call inside a tokio runtime:
    /// the packer runs as a task.
    pub async fn open(devices: Vec<Arc<dyn Device>>, config: ManagerConfig) -> Result<Manager> {
        let width = config.width();
        for m in config.policy.mechanisms() {
            m.validate()?;
            if m.width() > width {
                return Err(RedundancyError::Config(format!(
                    "{m} needs groups of {} devices; layout_width is {width}",
                    m.width()
                )));
            }
        }
        if devices.len() < width {
            return Err(RedundancyError::Config(format!(
                "{} devices cannot hold groups of {width} (the widest mechanism of the policy)",
                devices.len()
            )));
        }
        let layout = config.layout(devices.len())?;
        let key_max = devices.iter().map(|d| d.limits().key_bytes_max).min();
        let value_max = devices.iter().map(|d| d.limits().value_bytes_max).min();
        let key_bytes_max = key_max.unwrap_or(0).saturating_sub(KEY_OVERHEAD_BYTES);
        let piece_payload_max = value_max.unwrap_or(0).saturating_sub(PIECE_HEADER_BYTES);
        if key_bytes_max == 0 || piece_payload_max < 64 {
            return Err(RedundancyError::Config(
                "device key or value limits too small for piece headers".into(),
            ));
        }
        if key_bytes_max > u8::MAX as usize {
            // Set descriptors store key lengths in one byte.
            return Err(RedundancyError::Config(
                "device key limit above 260 B is not supported".into(),
            ));
        }
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let inner = Arc::new_cyclic(|weak| Inner {
            io: DeviceSet::with_faults(devices, config.faults),
            layout,
            packer: Packer::new(weak.clone(), config.pack_wait),
            config,
            codecs: Mutex::new(HashMap::new()),
            locks: (0..KEY_LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            cache: Mutex::new(HashMap::new()),
            writing: Mutex::new(HashMap::new()),
            writing_count: AtomicUsize::new(0),
            garbage: Mutex::new(Vec::new()),
            me: weak.clone(),
            version: AtomicU64::new(start),
            key_bytes_max,
            piece_payload_max,
        });
        Ok(Manager { inner })
    }

    /// The device set (health, read plan, counters).
    pub fn devices(&self) -> &DeviceSet {
        &self.inner.io
    }

    /// The placement layout.
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// The configuration.
    pub fn config(&self) -> &ManagerConfig {
        &self.inner.config
    }

    /// Longest user key.
    pub fn key_bytes_max(&self) -> usize {
        self.inner.key_bytes_max
    }

    /// Stores `value` under `key` with the policy's mechanism, or with `custom` when given
    /// (KVMD's custom mode). Returns once every piece is on its device.
    pub async fn put(
        &self,
        key: &[u8],
        value: &[u8],
        mode: StoreMode,
        custom: Option<Mechanism>,
    ) -> Result<()> {
        let inner = &self.inner;
        inner.check_key(key)?;
        if value.len() as u64 > inner.config.object_bytes_max {
            return Err(RedundancyError::ValueLength {
                len: value.len() as u64,
                max: inner.config.object_bytes_max,
            });
        }
        let mech = match custom {
            Some(m) => {
                m.validate()?;
                if m.width() > inner.layout.width() {
                    return Err(RedundancyError::Config(format!(
                        "{m} needs {} devices per group; the layout has {}",
                        m.width(),
                        inner.layout.width()
                    )));
                }
                m
            }
            None => inner.config.policy.choose(value.len() as u64),
        };
        let _guard = inner.lock(key).await;
        let prev = inner.meta(key).await?;
        match (mode, &prev) {
            (StoreMode::InsertOnly, Some(_)) => {
                return Err(RedundancyError::Exists { key: key.to_vec() })
            }
            (StoreMode::UpdateOnly, None) => {
                return Err(RedundancyError::NotFound { key: key.to_vec() })
            }
            _ => {}
        }
        if let Some(p) = &prev {
            if matches!(p.mechanism, Mechanism::Pack { .. }) {
                inner.retire_packed(key, p).await;
            }
        }
        let version = inner.next_version();
        let seg_bytes = inner.segment_bytes(mech);
        let segments = value.len().div_ceil(seg_bytes).max(1);
        let segments_u32 = u32::try_from(segments)
            .map_err(|_| RedundancyError::Config("object needs too many segments".into()))?;
        let place = inner.layout.place(key);
        // Later segments first, under keys of their own version, and durable before segment 0
        // names them: a crash leaves either the old object whole or the new one whole.
        for s in (1..segments).chain([0]) {
            let data =
                &value[(s * seg_bytes).min(value.len())..((s + 1) * seg_bytes).min(value.len())];
            let head = SegmentHead {
                segment: s as u32,
                segment_count: segments_u32,
                object_len: value.len() as u64,
                version,
            };
            let _writing = (s == 0).then(|| {
                let resolved = Resolved {
                    mechanism: mech,
                    version,
                    object_len: value.len() as u64,
                    segment_count: segments_u32,
                    set: None,
                    data: data.to_vec(),
                };
                inner.writing(key, Writing::Put(resolved))
            });
            inner
                .write_segment(key, &place, mech, head, data, prev.is_some())
                .await?;
            if s + 1 == segments && segments > 1 {
                inner.sync_positions(&place, mech.pieces()).await?;
            }
        }
        if let Some(p) = &prev {
            inner.defer_leftovers(key, &place, p, mech).await?;
        }
        inner.remember(
            key,
            ObjectMeta {
                mechanism: mech,
                version,
                len: value.len() as u64,
                segments: segments_u32,
            },
        );
        Ok(())
    }

    /// Reads `range` of the object under `key`; returns the bytes and the object's length.
    pub async fn get(&self, key: &[u8], range: ReadRange) -> Result<(Vec<u8>, u64)> {
        let inner = &self.inner;
        inner.check_key(key)?;
        let place = inner.layout.place(key);
        let hint = inner.cached(key).map(|m| m.mechanism);
        let overlapping = inner.overlapping(key);
        // Only what the devices hold goes into the metadata cache: a write in progress may
        // still fail.
        let from_devices = overlapping.is_none();
        let first = match overlapping {
            Some(Writing::Put(r)) => r,
            Some(Writing::Delete) => return Err(RedundancyError::NotFound { key: key.to_vec() }),
            None => match inner.fast_segment(key, 0, &place, hint, None).await {
                Some(r) => r,
                None => match inner.slow_segment(key, 0, &place, None).await? {
                    Some(r) => r,
                    None => return Err(RedundancyError::NotFound { key: key.to_vec() }),
                },
            },
        };
        let (start, end) =
            range
                .resolve(first.object_len)
                .map_err(|_| RedundancyError::Offset {
                    offset: range.offset,
                    len: first.object_len,
                })?;
        let seg_bytes = inner.segment_bytes(first.mechanism) as u64;
        let (s_first, s_last) = if end > start {
            (start / seg_bytes, (end - 1) / seg_bytes)
        } else {
            (0, 0)
        };
        let mut out = Vec::with_capacity((end - start) as usize);
        for s in s_first..=s_last {
            let seg = if s == 0 {
                first.clone()
            } else {
                let s = s as u32;
                match inner
                    .fast_segment(key, s, &place, Some(first.mechanism), Some(first.version))
                    .await
                {
                    Some(r) => r,
                    None => match inner
                        .slow_segment(key, s, &place, Some(first.version))
                        .await?
                    {
                        Some(r) => r,
                        None => {
                            return Err(RedundancyError::Lost {
                                key: key.to_vec(),
                                detail: format!(
                                    "segment {s} of version {} cannot be read",
                                    first.version
                                ),
                            })
                        }
                    },
                }
            };
            let seg_start = s * seg_bytes;
            let lo = start.max(seg_start) - seg_start;
            let hi = end.min(seg_start + seg.data.len() as u64) - seg_start;
            if lo < hi {
                out.extend_from_slice(&seg.data[lo as usize..hi as usize]);
            }
        }
        if out.len() as u64 != end - start {
            return Err(RedundancyError::Lost {
                key: key.to_vec(),
                detail: format!(
                    "segments hold {} B of the {} B asked for",
                    out.len(),
                    end - start
                ),
            });
        }
        if from_devices {
            inner.remember(
                key,
                ObjectMeta {
                    mechanism: first.mechanism,
                    version: first.version,
                    len: first.object_len,
                    segments: first.segment_count,
                },
            );
        }
        Ok((out, first.object_len))
    }

    /// Reads the whole object under `key` the careful way, as scrub does: every piece of every
    /// segment, the newest version decodable in all of them, and stale or damaged pieces
    /// rewritten. After an unclean shutdown the copies of an object may disagree (a write cut
    /// off before its sync); [`Manager::get`] reads as few pieces as it can and may meet either
    /// version, this always gives the answer scrub will give.
    pub async fn get_resolved(&self, key: &[u8]) -> Result<(Vec<u8>, u64)> {
        let inner = &self.inner;
        inner.check_key(key)?;
        let _guard = inner.lock(key).await;
        let place = inner.layout.place(key);
        let Some(first) = inner.slow_segment(key, 0, &place, None).await? else {
            inner.forget(key);
            return Err(RedundancyError::NotFound { key: key.to_vec() });
        };
        let mut out = first.data.clone();
        for s in 1..first.segment_count {
            match inner
                .slow_segment(key, s, &place, Some(first.version))
                .await?
            {
                Some(r) => out.extend_from_slice(&r.data),
                None => {
                    return Err(RedundancyError::Lost {
                        key: key.to_vec(),
                        detail: format!("segment {s} of version {} cannot be read", first.version),
                    })
                }
            }
        }
        inner.remember(
            key,
            ObjectMeta {
                mechanism: first.mechanism,
                version: first.version,
                len: first.object_len,
                segments: first.segment_count,
            },
        );
        Ok((out, first.object_len))
    }

    /// Deletes the object under `key`; returns whether it existed.
    pub async fn delete(&self, key: &[u8]) -> Result<bool> {
        let inner = &self.inner;
        inner.check_key(key)?;
        let _guard = inner.lock(key).await;
        let Some(prev) = inner.meta(key).await? else {
            return Ok(false);
        };
        if matches!(prev.mechanism, Mechanism::Pack { .. }) {
            inner.retire_packed(key, &prev).await;
        }
        let place = inner.layout.place(key);
        let skey = segment_key(key, 0, prev.version);
        let writing = inner.writing(key, Writing::Delete);
        // Every position, not only the mechanism's: an earlier mechanism's leftovers may wait
        // there for a sync.
        let res = join_all((0..inner.layout.width()).map(|i| {
            let d = place.device(i);
            let skey = &skey;
            async move { (d, inner.io.delete(d, skey).await) }
        }))
        .await;
        drop(writing);
        let failed: Vec<usize> = res
            .into_iter()
            .filter(|(_, r)| r.is_err())
            .map(|(d, _)| d)
            .collect();
        // Later segments go once the deletion of segment 0 is durable.
        let mut later = Vec::new();
        for s in 1..prev.segments {
            for pos in 0..prev.mechanism.pieces() {
                later.push((place.device(pos), segment_key(key, s, prev.version)));
            }
        }
        inner.defer_deletes(later).await?;
        inner.forget(key);
        if !failed.is_empty() {
            tracing::warn!(
                ?failed,
                "delete left pieces on failed devices; rebuild replaces them"
            );
        }
        Ok(true)
    }

    /// The user keys starting with `prefix` that some healthy device holds a first segment of,
    /// sorted. A key whose pieces outlived a delete on a device that was away may be listed
    /// although [`Manager::get`] finds nothing: callers treat `NotFound` as absent.
    pub async fn keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let inner = &self.inner;
        let device_prefix = segment_key(prefix, 0, 0);
        let mut keys = std::collections::BTreeSet::new();
        for d in (0..inner.io.len()).filter(|&d| !inner.io.is_failed(d)) {
            let mut req = railstore_device::IterRequest {
                prefix: device_prefix.clone(),
                start_after: None,
                entries_max: 4096,
                with_values: false,
            };
            loop {
                let batch = inner
                    .io
                    .iterate(d, &req)
                    .await
                    .map_err(|source| RedundancyError::Device { device: d, source })?;
                keys.extend(batch.entries.iter().map(|e| e.key[1..].to_vec()));
                if !batch.more {
                    break;
                }
                req.start_after = batch.entries.last().map(|e| e.key.clone());
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// The cached metadata of `key`, if the cache holds it.
    pub fn cached_meta(&self, key: &[u8]) -> Option<ObjectMeta> {
        self.inner.cached(key)
    }

    /// The metadata of `key`, from the cache or the devices.
    pub async fn meta(&self, key: &[u8]) -> Result<Option<ObjectMeta>> {
        self.inner.check_key(key)?;
        self.inner.meta(key).await
    }

    /// Makes every acknowledged store and delete durable on every healthy device, then deletes
    /// the pieces older versions left behind.
    pub async fn sync(&self) -> Result<()> {
        self.inner.sync_all().await
    }
}

/// The per-write fields every piece of a segment carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentHead {
    pub segment: u32,
    pub segment_count: u32,
    pub object_len: u64,
    pub version: u64,
}

impl Mechanism {
    /// Positions of the key's placement one segment occupies: copies, shards, or a packed
    /// member plus its m pointers.
    pub fn pieces(&self) -> usize {
        match *self {
            Mechanism::Pack { m, .. } => 1 + m as usize,
            _ => self.width(),
        }
    }
}

fn mechanism_of(h: &PieceHeader) -> Option<Mechanism> {
    let code = || CodeId::from_u8(h.code).ok();
    Some(match h.kind {
        PieceKind::Hashed => Mechanism::Hash,
        PieceKind::Copy => Mechanism::Replicate { r: h.k },
        PieceKind::Shard => Mechanism::Split {
            code: code()?,
            k: h.k,
            m: h.m,
        },
        PieceKind::Member | PieceKind::Pointer => Mechanism::Pack {
            code: code()?,
            k: h.k,
            m: h.m,
        },
        PieceKind::Parity | PieceKind::SetDescriptor => return None,
    })
}

impl Inner {
    pub(crate) fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() || key.len() > self.key_bytes_max {
            return Err(RedundancyError::KeyLength {
                len: key.len(),
                min: 1,
                max: self.key_bytes_max,
            });
        }
        Ok(())
    }

    pub(crate) async fn lock(&self, key: &[u8]) -> tokio::sync::MutexGuard<'_, ()> {
        let h = railstore_placement::key_hash(key, 0x6c6f_636b) as usize;
        self.locks[h % KEY_LOCK_STRIPES].lock().await
    }

    pub(crate) fn next_version(&self) -> u64 {
        self.version.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Raises the version counter above `seen`, so a version read from a device is never reused.
    pub(crate) fn observe_version(&self, seen: u64) {
        self.version.fetch_max(seen, Ordering::SeqCst);
    }

    pub(crate) fn codec(&self, code: CodeId, k: u8, m: u8) -> Result<Arc<Codec>> {
        let mut map = self.codecs.lock().unwrap();
        if let Some(c) = map.get(&(code.as_u8(), k, m)) {
            return Ok(c.clone());
        }
        let codec = Code::new(code, k as usize, m as usize)
            .and_then(Codec::new)
            .map_err(|e| RedundancyError::Config(e.to_string()))?;
        let codec = Arc::new(codec);
        map.insert((code.as_u8(), k, m), codec.clone());
        Ok(codec)
    }

    /// Bytes of user data in one full segment under `mech`.
    pub(crate) fn segment_bytes(&self, mech: Mechanism) -> usize {
        match mech {
            Mechanism::Split { k, .. } => self.piece_payload_max * k as usize,
            _ => self.piece_payload_max,
        }
    }

    /// Notes that a put or delete is writing segment 0 of `key`, until the guard drops. The
    /// caller holds the key's lock.
    fn writing<'a>(&'a self, key: &'a [u8], what: Writing) -> WritingGuard<'a> {
        self.writing.lock().unwrap().insert(key.to_vec(), what);
        self.writing_count.fetch_add(1, Ordering::SeqCst);
        WritingGuard { inner: self, key }
    }

    /// What a put or delete in progress is writing to segment 0 of `key`. A read that overlaps
    /// the write answers from it: while the pieces change, the devices that serve reads under
    /// separation may hold pieces of both versions, too few of either to decode, and only the
    /// careful path (which reads every device, writers too) would resolve them. Answering with
    /// the write's outcome is what a read just after it returns; reads stay monotonic because
    /// every read of the key asks here first, for writes that succeed. A write that fails after
    /// a read saw it leaves what its pieces decode to, possibly the old value: that read saw a
    /// write that did not happen (the price of never reading writers for it).
    fn overlapping(&self, key: &[u8]) -> Option<Writing> {
        if self.writing_count.load(Ordering::SeqCst) == 0 {
            return None;
        }
        self.writing.lock().unwrap().get(key).cloned()
    }

    pub(crate) fn cached(&self, key: &[u8]) -> Option<ObjectMeta> {
        self.cache.lock().unwrap().get(key).cloned()
    }

    pub(crate) fn remember(&self, key: &[u8], meta: ObjectMeta) {
        let max = self.config.meta_cache_entries_max;
        if max == 0 {
            return;
        }
        let mut c = self.cache.lock().unwrap();
        if c.len() >= max && !c.contains_key(key) {
            // Crude but bounded: drop everything and let hot keys come back.
            c.clear();
        }
        c.insert(key.to_vec(), meta);
    }

    pub(crate) fn forget(&self, key: &[u8]) {
        self.cache.lock().unwrap().remove(key);
    }

    /// What is stored under `key`: the cache, else segment 0's header on the primary, else (when
    /// the primary cannot answer) a scan of the whole placement.
    pub(crate) async fn meta(&self, key: &[u8]) -> Result<Option<ObjectMeta>> {
        if let Some(m) = self.cached(key) {
            return Ok(Some(m));
        }
        let place = self.layout.place(key);
        let primary = place.device(0);
        if self.io.readable(primary) {
            // An existence check first: inserts of new keys, the common case, then cost an index
            // lookup rather than a read that misses; existing keys cost a header read.
            let skey = segment_key(key, 0, 0);
            match self.io.exists(primary, &skey).await {
                Ok(false) => return Ok(None),
                Ok(true) => {
                    let head = self
                        .io
                        .retrieve_prefix(primary, &skey, PIECE_HEADER_BYTES as u64)
                        .await;
                    if let Ok(Some(bytes)) = head {
                        if let Ok(h) = PieceHeader::decode_unchecked(&bytes) {
                            if let Some(mech) = mechanism_of(&h) {
                                self.observe_version(h.version);
                                return Ok(Some(ObjectMeta {
                                    mechanism: mech,
                                    version: h.version,
                                    len: h.object_len,
                                    segments: h.segment_count,
                                }));
                            }
                        }
                    }
                }
                Err(_) => {}
            }
        }
        Ok(self
            .slow_segment(key, 0, &place, None)
            .await?
            .map(|r| ObjectMeta {
                mechanism: r.mechanism,
                version: r.version,
                len: r.object_len,
                segments: r.segment_count,
            }))
    }

    /// The pieces of one segment under `mech`, as (placement position, stored value).
    pub(crate) fn pieces_of(
        &self,
        mech: Mechanism,
        head: SegmentHead,
        data: &[u8],
        set: Option<(u64, u8)>,
        descriptor: Option<&[u8]>,
    ) -> Result<Vec<(usize, Vec<u8>)>> {
        let base = |kind, k, m, index, payload: &[u8]| PieceHeader {
            kind,
            code: mech.code_byte(),
            k,
            m,
            index,
            segment: head.segment,
            segment_count: head.segment_count,
            object_len: head.object_len,
            version: head.version,
            set: set.map(|s| s.0).unwrap_or(0),
            payload_len: payload.len() as u32,
        };
        Ok(match mech {
            Mechanism::Hash => vec![(0, base(PieceKind::Hashed, 1, 0, 0, data).encode(data))],
            Mechanism::Replicate { r } => (0..r)
                .map(|i| {
                    (
                        i as usize,
                        base(PieceKind::Copy, r, 0, i, data).encode(data),
                    )
                })
                .collect(),
            Mechanism::Split { code, k, m } => {
                let (ku, n) = (k as usize, (k + m) as usize);
                let shard_len = data.len().div_ceil(ku);
                let mut shards = vec![vec![0u8; shard_len]; n];
                for (i, s) in shards.iter_mut().take(ku).enumerate() {
                    let lo = (i * shard_len).min(data.len());
                    let hi = ((i + 1) * shard_len).min(data.len());
                    s[..hi - lo].copy_from_slice(&data[lo..hi]);
                }
                let codec = self.codec(code, k, m)?;
                {
                    let mut refs: Vec<&mut [u8]> =
                        shards.iter_mut().map(|s| s.as_mut_slice()).collect();
                    codec
                        .encode_shards(&mut refs)
                        .map_err(|e| RedundancyError::Config(e.to_string()))?;
                }
                shards
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (i, base(PieceKind::Shard, k, m, i as u8, s).encode(s)))
                    .collect()
            }
            Mechanism::Pack { k, m, .. } => {
                // Pointers carry the set descriptor, so a lost member is one hop from its set.
                let (Some((_, slot)), Some(desc)) = (set, descriptor) else {
                    return Err(RedundancyError::Config(
                        "packed pieces need their set".into(),
                    ));
                };
                let mut v = vec![(0, base(PieceKind::Member, k, m, slot, data).encode(data))];
                for i in 1..=m {
                    v.push((
                        i as usize,
                        base(PieceKind::Pointer, k, m, slot, desc).encode(desc),
                    ));
                }
                v
            }
        })
    }

    /// Writes one segment; succeeds when enough pieces landed for the object to be readable.
    /// `overwrite`: segment 0 replaces an older version in place, staged first where a crash
    /// could otherwise leave neither version readable.
    async fn write_segment(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        mech: Mechanism,
        head: SegmentHead,
        data: &[u8],
        overwrite: bool,
    ) -> Result<()> {
        if let Mechanism::Pack { .. } = mech {
            return self.packer.submit(key, place, mech, head, data).await;
        }
        let pieces = self.pieces_of(mech, head, data, None, None)?;
        let staged = head.segment == 0 && overwrite && self.must_stage(mech);
        if staged {
            self.stage(key, place, head, mech, &pieces).await?;
        }
        self.store_pieces(key, place, head, mech, &pieces).await?;
        if staged {
            self.unstage_later(key, place, mech, head.version).await?;
        }
        Ok(())
    }

    /// Stores pieces at their placement positions; fails when more than the mechanism's
    /// tolerance did not land.
    pub(crate) async fn store_pieces(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        head: SegmentHead,
        mech: Mechanism,
        pieces: &[(usize, Vec<u8>)],
    ) -> Result<()> {
        let skey = segment_key(key, head.segment, head.version);
        self.store_pieces_at(key, &skey, place, mech, pieces).await
    }

    /// Stores pieces under device key `skey` at their placement positions; fails when more
    /// than the mechanism's tolerance did not land.
    pub(crate) async fn store_pieces_at(
        &self,
        key: &[u8],
        skey: &[u8],
        place: &Placement<'_>,
        mech: Mechanism,
        pieces: &[(usize, Vec<u8>)],
    ) -> Result<()> {
        let res = join_all(pieces.iter().map(|(pos, v)| {
            let d = place.device(*pos);
            async move { self.io.store(d, skey, v).await }
        }))
        .await;
        let written = res.iter().filter(|r| r.is_ok()).count();
        let needed = pieces.len().saturating_sub(mech.tolerance()).max(1);
        if written < needed {
            let cause = res
                .into_iter()
                .find_map(|r| r.err())
                .map(|e| e.to_string())
                .unwrap_or_default();
            return Err(RedundancyError::WriteFailed {
                key: key.to_vec(),
                written,
                needed,
                cause,
            });
        }
        Ok(())
    }

    /// Schedules what an older version left behind for deletion after the next sync: its later
    /// segments (their keys name the old version) and segment-0 pieces past the new
    /// mechanism's positions. Deleting them before the new version is durable could leave
    /// neither version readable after a crash.
    async fn defer_leftovers(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        prev: &ObjectMeta,
        mech: Mechanism,
    ) -> Result<()> {
        let mut later = Vec::new();
        for pos in mech.pieces()..prev.mechanism.pieces() {
            later.push(Garbage {
                device: place.device(pos),
                device_key: segment_key(key, 0, prev.version),
                only_version: Some((key.to_vec(), prev.version)),
            });
        }
        for s in 1..prev.segments {
            for pos in 0..prev.mechanism.pieces() {
                later.push(Garbage {
                    device: place.device(pos),
                    device_key: segment_key(key, s, prev.version),
                    only_version: None,
                });
            }
        }
        self.push_garbage(later).await
    }

    /// Schedules deletes of keys no version refers to any more, for after the next sync.
    pub(crate) async fn defer_deletes(&self, keys: Vec<(usize, Vec<u8>)>) -> Result<()> {
        let later = keys
            .into_iter()
            .map(|(device, device_key)| Garbage {
                device,
                device_key,
                only_version: None,
            })
            .collect();
        self.push_garbage(later).await
    }

    async fn push_garbage(&self, later: Vec<Garbage>) -> Result<()> {
        if later.is_empty() {
            return Ok(());
        }
        let full = {
            let mut g = self.garbage.lock().unwrap();
            g.extend(later);
            g.len() >= GARBAGE_ENTRIES_MAX
        };
        if full {
            // In the background: the caller may hold a key lock that sync_all takes.
            if let Some(me) = self.me.upgrade() {
                tokio::spawn(async move {
                    if let Err(e) = me.sync_all().await {
                        tracing::warn!(error = %e, "background sync for deferred deletes failed");
                    }
                });
            }
        }
        Ok(())
    }

    /// Syncs every healthy device, then deletes the garbage scheduled before the sync began.
    pub(crate) async fn sync_all(&self) -> Result<()> {
        let garbage = std::mem::take(&mut *self.garbage.lock().unwrap());
        if let Err(e) = self.sync_devices(0..self.io.len()).await {
            self.garbage.lock().unwrap().extend(garbage);
            return Err(e);
        }
        for g in garbage {
            match &g.only_version {
                None => {
                    let _ = self.io.delete(g.device, &g.device_key).await;
                }
                Some((key, version)) => {
                    // A segment-0 key is reused by later writes: delete only the old piece.
                    let _guard = self.lock(key).await;
                    if let Ok(Some(bytes)) = self.io.retrieve(g.device, &g.device_key).await {
                        let stale = PieceHeader::decode_unchecked(&bytes)
                            .map(|h| h.version == *version)
                            .unwrap_or(true);
                        if stale {
                            let _ = self.io.delete(g.device, &g.device_key).await;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes what was stored at the first `positions` placement positions durable.
    pub(crate) async fn sync_positions(
        &self,
        place: &Placement<'_>,
        positions: usize,
    ) -> Result<()> {
        self.sync_devices((0..positions).map(|pos| place.device(pos)))
            .await
    }

    /// Syncs the given devices at once; devices marked failed have nothing to sync. A device
    /// that fails during its sync leaves service (what it held is read from the others, as
    /// for any failed device), so it does not fail the sync; other errors do.
    async fn sync_devices(&self, devices: impl Iterator<Item = usize>) -> Result<()> {
        join_all(devices.map(|d| async move {
            match self.io.sync(d).await {
                Err(_) if self.io.is_failed(d) => Ok(()),
                r => r.map_err(|source| RedundancyError::Device { device: d, source }),
            }
        }))
        .await
        .into_iter()
        .collect()
    }

    /// Reads a segment the cheap way: the fewest pieces, from preferred devices, all agreeing.
    /// `None` means "look closer" (missing, corrupt, stale or unexpected pieces).
    pub(crate) async fn fast_segment(
        &self,
        key: &[u8],
        segment: u32,
        place: &Placement<'_>,
        hint: Option<Mechanism>,
        want: Option<u64>,
    ) -> Option<Resolved> {
        let skey = segment_key(key, segment, want.unwrap_or(0));
        let mech = match hint {
            Some(m) => m,
            None => {
                // Every mechanism keeps piece 0 on the primary; its header names the mechanism.
                let primary = place.device(0);
                if !self.io.readable(primary) {
                    return None;
                }
                let bytes = self.io.retrieve(primary, &skey).await.ok()??;
                let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                let mech = mechanism_of(&h)?;
                if !matches!(mech, Mechanism::Split { .. }) {
                    return self.accept_whole(&h, payload.to_vec(), want);
                }
                mech
            }
        };
        match mech {
            Mechanism::Pack { m, .. } if !self.io.prefers(place.device(0)) => {
                // The member's device should not serve reads now (a writer under separation):
                // rebuild the member from its set on devices that should.
                let pos = (1..=m as usize).find(|&p| self.io.prefers(place.device(p)))?;
                let bytes = self.io.retrieve(place.device(pos), &skey).await.ok()??;
                let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                if h.kind != PieceKind::Pointer || want.is_some_and(|w| w != h.version) {
                    return None;
                }
                let data = self
                    .decode_member(payload, h.set, h.index, h.version, true)
                    .await
                    .ok()??;
                if !self.segment_len_ok(&h, data.len(), mech) {
                    return None;
                }
                Some(Resolved {
                    mechanism: mech,
                    version: h.version,
                    object_len: h.object_len,
                    segment_count: h.segment_count,
                    set: Some((h.set, h.index)),
                    data,
                })
            }
            Mechanism::Hash | Mechanism::Pack { .. } => {
                let d = place.device(0);
                if !self.io.readable(d) {
                    return None;
                }
                let bytes = self.io.retrieve(d, &skey).await.ok()??;
                let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                self.accept_whole(&h, payload.to_vec(), want)
            }
            Mechanism::Replicate { r } => {
                let order = self.io.read_order((0..r as usize).map(|i| place.device(i)));
                let spares: Vec<usize> = order
                    .iter()
                    .skip(1)
                    .copied()
                    .filter(|&d| self.io.prefers(d))
                    .collect();
                let (_, bytes) = self
                    .read_pieces(&skey, order.first().copied().into_iter().collect(), spares)
                    .await
                    .pop()?;
                let bytes = bytes.ok()??;
                let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                self.accept_whole(&h, payload.to_vec(), want)
            }
            Mechanism::Split { code, k, m } => {
                let n = (k + m) as usize;
                let devs: Vec<usize> = (0..n).map(|i| place.device(i)).collect();
                // Data shards first among the preferred devices: no decoding when they serve.
                let mut order: Vec<usize> = (0..n).filter(|&i| self.io.readable(devs[i])).collect();
                order.sort_by_key(|&i| (!self.io.prefers(devs[i]), i >= k as usize, i));
                if order.len() < k as usize {
                    return None;
                }
                let spares = order[k as usize..]
                    .iter()
                    .map(|&i| devs[i])
                    .filter(|&d| self.io.prefers(d))
                    .collect();
                let first = order[..k as usize].iter().map(|&i| devs[i]).collect();
                let reads = self.read_pieces(&skey, first, spares).await;
                let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
                let mut head: Option<PieceHeader> = None;
                for (d, r) in reads {
                    let i = devs.iter().position(|&x| x == d)?;
                    let bytes = r.ok()??;
                    let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                    if h.kind != PieceKind::Shard
                        || h.index as usize != i
                        || mechanism_of(&h) != Some(mech)
                    {
                        return None;
                    }
                    if let Some(prev) = &head {
                        if (
                            prev.version,
                            prev.object_len,
                            prev.payload_len,
                            prev.segment_count,
                        ) != (h.version, h.object_len, h.payload_len, h.segment_count)
                        {
                            return None;
                        }
                    }
                    if want.is_some_and(|w| w != h.version) {
                        return None;
                    }
                    head = Some(h);
                    shards[i] = Some(payload.to_vec());
                }
                let h = head?;
                let data = self.decode_split(code, k, m, &h, shards).ok()?;
                Some(Resolved {
                    mechanism: mech,
                    version: h.version,
                    object_len: h.object_len,
                    segment_count: h.segment_count,
                    set: None,
                    data,
                })
            }
        }
    }

    /// Reads `skey` from every device of `first` and returns one answer per device, in the
    /// order they come. With [`ManagerConfig::slow_read_bypass`] set, a device that has not
    /// answered by then is bypassed: the next of `spares` (devices the read plan prefers) is
    /// read too, and the first `first.len()` answers win (fail-fast, as IODA and LinnOS do; the
    /// slow read is dropped).
    async fn read_pieces(
        &self,
        skey: &[u8],
        first: Vec<usize>,
        spares: Vec<usize>,
    ) -> Vec<(usize, std::result::Result<Option<Vec<u8>>, DeviceError>)> {
        let read = |d: usize| async move { (d, self.io.retrieve(d, skey).await) };
        let Some(after) = self.config.slow_read_bypass.filter(|_| !spares.is_empty()) else {
            return join_all(first.into_iter().map(read)).await;
        };
        let want = first.len();
        let mut pending: FuturesUnordered<_> = first.into_iter().map(read).collect();
        let mut spares = spares.into_iter();
        let mut answers = Vec::with_capacity(want);
        let bypass_at = tokio::time::sleep(after);
        tokio::pin!(bypass_at);
        let mut bypassed = false;
        while answers.len() < want {
            tokio::select! {
                answer = pending.next() => match answer {
                    Some(a) => answers.push(a),
                    None => break,
                },
                _ = &mut bypass_at, if !bypassed => {
                    bypassed = true;
                    for d in spares.by_ref().take(want - answers.len()) {
                        self.io.counters.slow_read_bypasses.fetch_add(1, Ordering::Relaxed);
                        pending.push(read(d));
                    }
                }
            }
        }
        answers
    }

    fn accept_whole(
        &self,
        h: &PieceHeader,
        payload: Vec<u8>,
        want: Option<u64>,
    ) -> Option<Resolved> {
        if want.is_some_and(|w| w != h.version) {
            return None;
        }
        let mechanism = mechanism_of(h)?;
        if h.kind == PieceKind::Pointer || !self.segment_len_ok(h, payload.len(), mechanism) {
            return None;
        }
        self.observe_version(h.version);
        Some(Resolved {
            mechanism,
            version: h.version,
            object_len: h.object_len,
            segment_count: h.segment_count,
            set: (h.kind == PieceKind::Member).then_some((h.set, h.index)),
            data: payload,
        })
    }

    /// Whether a whole-segment payload has the length its header implies.
    fn segment_len_ok(&self, h: &PieceHeader, len: usize, mech: Mechanism) -> bool {
        expected_segment_len(h, self.segment_bytes(mech)) == Some(len)
    }

    /// Reassembles a segment from k or more shards (missing ones decoded).
    pub(crate) fn decode_split(
        &self,
        code: CodeId,
        k: u8,
        m: u8,
        h: &PieceHeader,
        mut shards: Vec<Option<Vec<u8>>>,
    ) -> Result<Vec<u8>> {
        let (ku, n) = (k as usize, (k + m) as usize);
        let shard_len = h.payload_len as usize;
        let seg_len = expected_segment_len(h, self.segment_bytes(Mechanism::Split { code, k, m }))
            .ok_or_else(|| RedundancyError::Config("segment header inconsistent".into()))?;
        if seg_len.div_ceil(ku) != shard_len {
            return Err(RedundancyError::Config("shard length inconsistent".into()));
        }
        if shards.iter().take(ku).any(|s| s.is_none()) {
            let present: Vec<bool> = shards.iter().map(|s| s.is_some()).collect();
            let mut bufs: Vec<Vec<u8>> = shards
                .iter_mut()
                .map(|s| s.take().unwrap_or_else(|| vec![0; shard_len]))
                .collect();
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            self.codec(code, k, m)?
                .reconstruct_data(&mut refs, &present)
                .map_err(|e| RedundancyError::Config(e.to_string()))?;
            self.io.counters.decodes.fetch_add(1, Ordering::Relaxed);
            shards = bufs.into_iter().map(Some).collect();
        }
        debug_assert_eq!(shards.len(), n);
        let mut out = Vec::with_capacity(seg_len);
        for s in shards.iter().take(ku) {
            out.extend_from_slice(s.as_deref().unwrap());
        }
        out.truncate(seg_len);
        Ok(out)
    }

    /// Reads every piece of a segment from every readable device of the key's group.
    pub(crate) async fn scan_segment(
        &self,
        key: &[u8],
        segment: u32,
        version: u64,
        place: &Placement<'_>,
    ) -> SegmentScan {
        let skey = segment_key(key, segment, version);
        let n = self.layout.width();
        let devices: Vec<usize> = (0..n).map(|i| place.device(i)).collect();
        let reads = join_all(devices.iter().map(|&d| {
            let skey = &skey;
            async move {
                // A device being rebuilt is read too: what it holds is right, what it lacks
                // gets written.
                if self.io.is_failed(d) {
                    return Err(true);
                }
                // A read error on a device still in service is a lost piece: rewritten by the
                // repair like a corrupt one.
                self.io
                    .retrieve(d, skey)
                    .await
                    .map_err(|_| self.io.is_failed(d))
            }
        }))
        .await;
        let mut scan = SegmentScan {
            devices,
            pieces: vec![None; n],
            corrupt: vec![false; n],
            unreadable: vec![false; n],
            staged: vec![false; n],
        };
        for (pos, r) in reads.into_iter().enumerate() {
            match r {
                Err(true) => scan.unreadable[pos] = true,
                Err(false) => scan.corrupt[pos] = true,
                Ok(None) => {}
                Ok(Some(bytes)) => match PieceHeader::decode(&bytes) {
                    Ok((h, payload))
                        if h.segment == segment
                            && mechanism_of(&h).is_some()
                            && (h.index as usize == pos
                                || matches!(h.kind, PieceKind::Member | PieceKind::Pointer)) =>
                    {
                        self.observe_version(h.version);
                        scan.pieces[pos] = Some(Piece {
                            header: h,
                            payload: payload.to_vec(),
                        });
                    }
                    _ => scan.corrupt[pos] = true,
                },
            }
        }
        scan
    }

    /// Versions of a segment that its valid pieces can produce, newest first (packed pointers
    /// count: their set decodes the member).
    pub(crate) fn decodable_versions(&self, scan: &SegmentScan) -> Vec<u64> {
        let mut by_version: HashMap<u64, Vec<(usize, &Piece)>> = HashMap::new();
        for (pos, p) in scan.pieces.iter().enumerate() {
            if let Some(p) = p {
                by_version
                    .entry(p.header.version)
                    .or_default()
                    .push((pos, p));
            }
        }
        let mut out: Vec<u64> = by_version
            .into_iter()
            .filter(|(_, ps)| {
                ps.iter().any(|(pos, p)| match p.header.kind {
                    PieceKind::Hashed => *pos == 0,
                    PieceKind::Copy => (*pos) < p.header.k as usize,
                    PieceKind::Member => *pos == 0,
                    PieceKind::Pointer => true,
                    PieceKind::Shard => {
                        ps.iter()
                            .filter(|(_, q)| {
                                q.header.kind == PieceKind::Shard
                                    && (q.header.k, q.header.m, q.header.code, q.header.payload_len)
                                        == (
                                            p.header.k,
                                            p.header.m,
                                            p.header.code,
                                            p.header.payload_len,
                                        )
                            })
                            .count()
                            >= p.header.k as usize
                    }
                    _ => false,
                })
            })
            .map(|(v, _)| v)
            .collect();
        out.sort_unstable_by(|a, b| b.cmp(a));
        out
    }

    /// Produces version `version` of a segment from a scan.
    pub(crate) async fn decode_scan(
        &self,
        scan: &SegmentScan,
        version: u64,
    ) -> Result<Option<Resolved>> {
        let at_version: Vec<(usize, &Piece)> = scan
            .pieces
            .iter()
            .enumerate()
            .filter_map(|(pos, p)| {
                p.as_ref()
                    .filter(|p| p.header.version == version)
                    .map(|p| (pos, p))
            })
            .collect();
        // Whole copies first: no decoding.
        for (pos, p) in &at_version {
            let h = &p.header;
            let Some(mech) = mechanism_of(h) else {
                continue;
            };
            let whole = match h.kind {
                PieceKind::Hashed | PieceKind::Member => *pos == 0,
                PieceKind::Copy => true,
                _ => false,
            };
            if whole && self.segment_len_ok(h, p.payload.len(), mech) {
                return Ok(Some(Resolved {
                    mechanism: mech,
                    version,
                    object_len: h.object_len,
                    segment_count: h.segment_count,
                    set: (h.kind == PieceKind::Member).then_some((h.set, h.index)),
                    data: p.payload.clone(),
                }));
            }
        }
        if let Some((_, p)) = at_version
            .iter()
            .find(|(_, p)| p.header.kind == PieceKind::Shard)
        {
            let h = p.header;
            if let Some(Mechanism::Split { code, k, m }) = mechanism_of(&h) {
                let n = (k + m) as usize;
                let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
                let mut found = 0;
                for (pos, q) in &at_version {
                    let qh = &q.header;
                    if qh.kind == PieceKind::Shard
                        && *pos < n
                        && (
                            qh.k,
                            qh.m,
                            qh.code,
                            qh.payload_len,
                            qh.object_len,
                            qh.segment_count,
                        ) == (k, m, h.code, h.payload_len, h.object_len, h.segment_count)
                    {
                        shards[*pos] = Some(q.payload.clone());
                        found += 1;
                    }
                }
                if found >= k as usize {
                    // Use at most k shards so a silently wrong extra shard cannot mix in.
                    let data = self.decode_split(code, k, m, &h, shards)?;
                    return Ok(Some(Resolved {
                        mechanism: Mechanism::Split { code, k, m },
                        version,
                        object_len: h.object_len,
                        segment_count: h.segment_count,
                        set: None,
                        data,
                    }));
                }
            }
        }
        if let Some((_, p)) = at_version
            .iter()
            .find(|(_, p)| p.header.kind == PieceKind::Pointer)
        {
            let h = p.header;
            if let Some(data) = self
                .decode_member(&p.payload, h.set, h.index, version, false)
                .await?
            {
                return Ok(Some(Resolved {
                    mechanism: mechanism_of(&h).unwrap(),
                    version,
                    object_len: h.object_len,
                    segment_count: h.segment_count,
                    set: Some((h.set, h.index)),
                    data,
                }));
            }
        }
        Ok(None)
    }

    /// Reads a segment the careful way: every piece, newest decodable version (or `want`), and
    /// repairs what it found wrong. `Ok(None)`: nothing of the object is stored.
    pub(crate) async fn slow_segment(
        &self,
        key: &[u8],
        segment: u32,
        place: &Placement<'_>,
        want: Option<u64>,
    ) -> Result<Option<Resolved>> {
        let scan = self
            .scan_segment(key, segment, want.unwrap_or(0), place)
            .await;
        let nothing = scan.pieces.iter().all(|p| p.is_none()) && !scan.corrupt.iter().any(|&c| c);
        if nothing {
            if scan.unreadable.iter().any(|&u| u) && segment == 0 {
                // Pieces may sit on the devices we cannot read.
                let readable = scan.unreadable.iter().filter(|u| !**u).count();
                if readable == 0 {
                    return Err(RedundancyError::Lost {
                        key: key.to_vec(),
                        detail: "no device of its group can be read".into(),
                    });
                }
            }
            return Ok(None);
        }
        if let Some(r) = self.resolve_scan(key, segment, place, &scan, want).await? {
            return Ok(Some(r));
        }
        if segment == 0 {
            // An overwrite a crash cut may have left its new version only staged.
            if let Some(merged) = self.with_staged(key, &scan).await {
                if let Some(r) = self.resolve_scan(key, 0, place, &merged, want).await? {
                    return Ok(Some(r));
                }
            }
        }
        if want.is_none()
            && !scan.unreadable.iter().any(|&u| u)
            && !scan.corrupt.iter().any(|&c| c)
            && !scan.devices.iter().any(|&d| self.io.is_rebuilding(d))
        {
            // Every device answered and nothing is damaged, yet no version has enough pieces:
            // a write or delete that never completed (a crash before sync, or one in flight).
            // Neither was acknowledged as durable, so the object reads as absent.
            return Ok(None);
        }
        if want.is_none()
            && self.decodable_versions(&scan).is_empty()
            && self.damage_tolerated(&scan)
        {
            // An acknowledged version landed on every position in service when it was written
            // (a device that missed it left service), so with no more positions damaged than
            // its mechanism tolerates it still has enough readable pieces. None has: what is
            // there is a write that never completed, and the object reads as absent.
            return Ok(None);
        }
        Err(RedundancyError::Lost {
            key: key.to_vec(),
            detail: format!(
                "segment {segment}: {} valid, {} corrupt, {} unreadable pieces; no version{} has enough",
                scan.pieces.iter().filter(|p| p.is_some()).count(),
                scan.corrupt.iter().filter(|c| **c).count(),
                scan.unreadable.iter().filter(|u| **u).count(),
                want.map(|w| format!(" ({w})")).unwrap_or_default()
            ),
        })
    }

    /// Whether the positions `scan` could not use (unreadable, corrupt, being rebuilt) are
    /// within the tolerance of every mechanism its pieces were written with.
    fn damage_tolerated(&self, scan: &SegmentScan) -> bool {
        let damaged = |pos: usize| {
            scan.unreadable[pos] || scan.corrupt[pos] || self.io.is_rebuilding(scan.devices[pos])
        };
        scan.pieces.iter().flatten().all(|p| {
            mechanism_of(&p.header).is_some_and(|mech| {
                (0..mech.pieces().min(scan.devices.len()))
                    .filter(|&pos| damaged(pos))
                    .count()
                    <= mech.tolerance()
            })
        })
    }

    /// The newest version (or `want`) that `scan` decodes, made whole: every segment of it
    /// readable, the scanned positions repaired.
    async fn resolve_scan(
        &self,
        key: &[u8],
        segment: u32,
        place: &Placement<'_>,
        scan: &SegmentScan,
        want: Option<u64>,
    ) -> Result<Option<Resolved>> {
        let versions = self.decodable_versions(scan);
        let candidates: Vec<u64> = match want {
            Some(w) => versions.into_iter().filter(|&v| v == w).collect(),
            None => versions,
        };
        for v in candidates {
            if let Some(r) = self.decode_scan(scan, v).await? {
                if segment == 0 && r.segment_count > 1 && want.is_none() {
                    // The object's version must be readable in every segment.
                    return self.resolve_object(key, place, scan, r).await;
                }
                self.repair_segment(key, segment, place, scan, &r).await;
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// Segment 0 of a multi-segment object resolved to `first`: reads every later segment of
    /// that version, else falls back to an older version of segment 0 whose segments are all
    /// there (later segments are durable before segment 0 names them, so one normally is).
    async fn resolve_object(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        scan0: &SegmentScan,
        first: Resolved,
    ) -> Result<Option<Resolved>> {
        for v in self.decodable_versions(scan0) {
            let Some(r0) = self.decode_scan(scan0, v).await? else {
                continue;
            };
            let mut later = Vec::new();
            for s in 1..r0.segment_count {
                let scan = self.scan_segment(key, s, v, place).await;
                match self.decode_scan(&scan, v).await? {
                    Some(r) => later.push((s, scan, r)),
                    None => break,
                }
            }
            if later.len() + 1 != r0.segment_count as usize {
                continue;
            }
            for (s, scan, r) in &later {
                self.repair_segment(key, *s, place, scan, r).await;
            }
            self.repair_segment(key, 0, place, scan0, &r0).await;
            return Ok(Some(r0));
        }
        Err(RedundancyError::Lost {
            key: key.to_vec(),
            detail: format!(
                "no version is readable in all {} segments",
                first.segment_count
            ),
        })
    }

    /// Rewrites the pieces of a resolved segment that a scan found missing, corrupt or stale,
    /// and deletes pieces past the mechanism's positions. Best effort.
    pub(crate) async fn repair_segment(
        &self,
        key: &[u8],
        segment: u32,
        place: &Placement<'_>,
        scan: &SegmentScan,
        r: &Resolved,
    ) -> usize {
        let head = SegmentHead {
            segment,
            segment_count: r.segment_count,
            object_len: r.object_len,
            version: r.version,
        };
        let descriptor = match r.set {
            None => None,
            Some((set, _)) => {
                let from_pointer = scan.pieces.iter().flatten().find(|p| {
                    p.header.kind == PieceKind::Pointer
                        && p.header.set == set
                        && p.header.version == r.version
                });
                match from_pointer {
                    Some(p) => Some(p.payload.clone()),
                    None => self
                        .find_descriptor(set, scan.devices.iter().copied())
                        .await
                        .map(|(_, b)| b),
                }
            }
        };
        let Ok(pieces) = self.pieces_of(r.mechanism, head, &r.data, r.set, descriptor.as_deref())
        else {
            return 0;
        };
        let skey = segment_key(key, segment, r.version);
        let mut fixes: Vec<(usize, Option<&Vec<u8>>)> = Vec::new();
        for (pos, bytes) in &pieces {
            let good = !scan.staged[*pos]
                && scan.pieces[*pos].as_ref().is_some_and(|p| {
                    p.header.version == r.version
                        && PieceHeader::decode(bytes).is_ok_and(|(h, payload)| {
                            h == p.header && payload == p.payload.as_slice()
                        })
                });
            if !good && !scan.unreadable[*pos] {
                fixes.push((*pos, Some(bytes)));
            }
        }
        let mut later = Vec::new();
        for pos in r.mechanism.pieces()..scan.pieces.len() {
            if scan.unreadable[pos] {
                continue;
            }
            if scan.corrupt[pos] {
                fixes.push((pos, None));
            } else if let Some(p) = &scan.pieces[pos] {
                // A valid piece of another version or mechanism: it may be what survives if
                // the resolved version is not durable yet, so it goes after the next sync.
                later.push(Garbage {
                    device: place.device(pos),
                    device_key: skey.clone(),
                    only_version: Some((key.to_vec(), p.header.version)),
                });
            }
        }
        let deferred = later.len();
        let _ = self.push_garbage(later).await;
        if fixes.is_empty() {
            return deferred;
        }
        let count = fixes.len();
        join_all(fixes.into_iter().map(|(pos, bytes)| {
            let d = place.device(pos);
            let skey = &skey;
            async move {
                let _ = match bytes {
                    Some(b) => self.io.store(d, skey, b).await,
                    None => self.io.delete(d, skey).await,
                };
            }
        }))
        .await;
        self.io
            .counters
            .repairs
            .fetch_add(count as u64, Ordering::Relaxed);
        count
    }
}

/// The payload length a whole-segment piece must have, from its header.
pub(crate) fn expected_segment_len(h: &PieceHeader, segment_bytes: usize) -> Option<usize> {
    let count = h.segment_count as u64;
    if count == 0 || h.segment >= h.segment_count {
        return None;
    }
    let seg = segment_bytes as u64;
    let needed = h.object_len.div_ceil(seg).max(1);
    if needed != count {
        return None;
    }
    let start = h.segment as u64 * seg;
    Some((h.object_len - start.min(h.object_len)).min(seg) as usize)
}

/// Ends a [`Inner::writing`] entry.
struct WritingGuard<'a> {
    inner: &'a Inner,
    key: &'a [u8],
}

impl Drop for WritingGuard<'_> {
    fn drop(&mut self) {
        if self
            .inner
            .writing
            .lock()
            .unwrap()
            .remove(self.key)
            .is_some()
        {
            self.inner.writing_count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
