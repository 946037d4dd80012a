//! The reliability manager: a virtual key-value device over N devices (KVMD §3). It cuts objects
//! into segments, protects each segment with its mechanism, reads back the newest version that
//! enough consistent pieces agree on, and rewrites pieces it finds bad, missing or stale.

use crate::error::{RedundancyError, Result};
use crate::format::{
    segment_key, staged_key, PieceHeader, PieceKind, KEY_OVERHEAD_BYTES, PIECE_HEADER_BYTES,
};
use crate::inner::{Epochs, Inner, Writing, KEY_LOCK_STRIPES};
use crate::io::DeviceSet;
use crate::mechanism::{ManagerConfig, Mechanism};
use crate::pack::Packer;
use crate::relocate::Move;
use futures_util::future::join_all;
use railstore_device::purpose::writing;
use railstore_device::{Device, ReadRange, StoreMode};
use railstore_ec::CodeId;
use railstore_placement::{Layout, PieceOrder, Placement};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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
    /// The length of every segment but the last (segment 0's, when there are more than one;
    /// the object's length, at least 1, otherwise): the cut the object was written with.
    pub segment_bytes: u64,
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
    /// A value was there but failed its checks, or reading it failed on a device still in
    /// service.
    pub corrupt: Vec<bool>,
    /// Of `corrupt`: the read failed (the device may hold anything, or nothing).
    pub read_failed: Vec<bool>,
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
    /// The length of a split segment's shards as stored (0 otherwise): a repair writes its
    /// pieces again at that length, whatever a new write would choose.
    pub shard_len: usize,
    pub data: Vec<u8>,
}

/// [`ObjectMeta::segment_bytes`] of an object of `segments` segments and `object_len` bytes
/// whose segment 0 is `segment0_len` bytes long.
pub(crate) fn object_cut(segments: u32, segment0_len: u64, object_len: u64) -> u64 {
    match segments > 1 {
        true => segment0_len,
        false => object_len.max(1),
    }
}

impl Resolved {
    /// What the object whose segment 0 this is looks like.
    pub(crate) fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            mechanism: self.mechanism,
            version: self.version,
            len: self.object_len,
            segments: self.segment_count,
            segment_bytes: object_cut(self.segment_count, self.data.len() as u64, self.object_len),
        }
    }
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
        config.ec.check()?;
        let whole = config.layout(devices.len())?;
        let (layout, source) = match config.moving {
            None => (whole, None),
            Some(Move::Grow) => {
                let before = whole.previous().ok_or_else(|| {
                    RedundancyError::Config(
                        "a grow is moving objects, but the layout has one epoch".into(),
                    )
                })?;
                (whole, Some(before))
            }
            Some(Move::Drain) => {
                let before = whole.previous().ok_or_else(|| {
                    RedundancyError::Config(
                        "a drain is moving objects, but the layout has one epoch".into(),
                    )
                })?;
                (before, Some(whole))
            }
        };
        let moving = AtomicBool::new(source.is_some());
        let device_count = devices.len();
        let key_max = devices.iter().map(|d| d.limits().key_bytes_max).min();
        let value_max = devices.iter().map(|d| d.limits().value_bytes_max).min();
        let key_bytes_max = key_max.unwrap_or(0).saturating_sub(KEY_OVERHEAD_BYTES);
        let piece_payload_max = value_max.unwrap_or(0).saturating_sub(PIECE_HEADER_BYTES);
        let tabled_payload_max = crate::inner::tabled_payload_max(piece_payload_max);
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
            width: layout.width(),
            piece_order: layout.piece_order(),
            epochs: std::sync::RwLock::new(Arc::new(Epochs {
                layout: Arc::new(layout),
                source: source.map(Arc::new),
                moving: config.moving,
            })),
            moving,
            packer: Packer::new(weak.clone(), config.pack_wait),
            config,
            codecs: Mutex::new(HashMap::new()),
            locks: (0..KEY_LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            cache: Mutex::new(HashMap::new()),
            stamps: (0..KEY_LOCK_STRIPES).map(|_| AtomicU64::new(0)).collect(),
            unit_tables: Mutex::default(),
            writing: Mutex::new(HashMap::new()),
            writing_count: AtomicUsize::new(0),
            garbage: Mutex::new(Vec::new()),
            me: weak.clone(),
            version: AtomicU64::new(start),
            key_bytes_max,
            piece_payload_max,
            tabled_payload_max,
            sync_groups: std::sync::RwLock::new(
                (0..device_count).map(|_| Arc::default()).collect(),
            ),
        });
        Ok(Manager { inner })
    }

    /// The device set (health, read plan, counters).
    pub fn devices(&self) -> &DeviceSet {
        &self.inner.io
    }

    /// The placement layout objects are written by.
    pub fn layout(&self) -> Arc<Layout> {
        self.inner.epochs().layout.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &ManagerConfig {
        &self.inner.config
    }

    /// Bytes of memory the manager's own maps hold (the metadata cache of objects read or
    /// written, the writes in progress, and the unit tables of pieces read in part), by the estimates of `railstore_device::memory`.
    /// The devices' memory is theirs: [`railstore_device::Device::memory_bytes`].
    pub fn memory_bytes(&self) -> u64 {
        use railstore_device::memory::{hash_entry, heap};
        let slot = std::mem::size_of::<Vec<u8>>();
        let cache: u64 = self
            .inner
            .cache
            .lock()
            .unwrap()
            .keys()
            .map(|k| hash_entry(slot + std::mem::size_of::<ObjectMeta>()) + heap(k.len()))
            .sum();
        let writing: u64 = self
            .inner
            .writing
            .lock()
            .unwrap()
            .keys()
            .map(|k| hash_entry(slot + std::mem::size_of::<Writing>()) + heap(k.len()))
            .sum();
        cache + writing + self.inner.unit_tables.lock().unwrap().bytes() as u64
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
        // What it reads (the version it replaces) is part of a write.
        writing(self.put_marked(key, value, mode, custom)).await
    }

    async fn put_marked(
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
                if m.width() > inner.width {
                    return Err(RedundancyError::Config(format!(
                        "{m} needs {} devices per group; the layout has {}",
                        m.width(),
                        inner.width
                    )));
                }
                m
            }
            None => inner.config.policy.choose(value.len() as u64),
        };
        let _guard = inner.lock(key).await;
        inner.relocate_locked(key).await?;
        let prev = inner.meta(key, true).await?;
        match (mode, &prev) {
            (StoreMode::InsertOnly, Some(_)) => {
                return Err(RedundancyError::Exists { key: key.to_vec() })
            }
            (StoreMode::UpdateOnly, None) => {
                return Err(RedundancyError::NotFound { key: key.to_vec() })
            }
            _ => {}
        }
        inner.write_object(key, value, mech, prev.as_ref()).await
    }

    /// Reads `range` of the object under `key`; returns the bytes and the object's length.
    pub async fn get(&self, key: &[u8], range: ReadRange) -> Result<(Vec<u8>, u64)> {
        self.get_guessing(key, range, None).await
    }

    /// [`Manager::get`] for a key written once and never overwritten, whose mechanism the caller
    /// can guess (what the policy picks for its length). When the cache does not know the key,
    /// the read starts from the guess instead of from the primary's header, so under separation
    /// it need not ask a writer. A wrong guess is safe (the pieces' headers disagree and the read
    /// falls back to the careful path); a key that is overwritten is not: pieces an older
    /// mechanism left outside the newer one's positions could answer.
    pub async fn get_written_once(
        &self,
        key: &[u8],
        range: ReadRange,
        guess: Mechanism,
    ) -> Result<(Vec<u8>, u64)> {
        self.get_guessing(key, range, Some(guess)).await
    }

    async fn get_guessing(
        &self,
        key: &[u8],
        range: ReadRange,
        guess: Option<Mechanism>,
    ) -> Result<(Vec<u8>, u64)> {
        let inner = &self.inner;
        inner.check_key(key)?;
        let epochs = inner.epochs();
        let place = epochs.layout.place(key);
        // Whether to look at the source is decided before the first look: a move that ends
        // during it leaves the key at the target, and one that ended before the read began
        // left nothing at the source.
        let moved_from = inner.moved_from(&epochs, key);
        let found = match self.read_at(key, range, guess, &place, None).await {
            Ok(Ok(found)) => Ok(found),
            // No position holds a first segment (index lookups, no data read): absent, or a
            // write not yet begun or a delete just done; nothing to repair.
            Ok(Err(0)) if !inner.holds_at(key, &place).await => {
                Err(RedundancyError::NotFound { key: key.to_vec() })
            }
            Ok(Err(unsettled)) => {
                // The cheap read did not settle. The careful read repairs what it finds
                // missing or stale, which is only right while no write of the key is under
                // way: it would put the old version back over pieces an overwrite just
                // stored (leaving the acknowledged version short of its tolerance), or find
                // neither version complete and answer "absent". It runs under the key's lock,
                // and so does the look at the source of a move below.
                let _guard = inner.lock(key).await;
                let found = self.get_careful(key, range, guess, &place, unsettled).await;
                return match (found, moved_from) {
                    (Err(RedundancyError::NotFound { .. }), Some(old)) => {
                        self.get_moved(key, range, guess, &old, &place).await
                    }
                    (found, _) => found,
                };
            }
            Err(e) => Err(e),
        };
        if !matches!(found, Err(RedundancyError::NotFound { .. })) {
            return found;
        }
        let Some(old) = moved_from else {
            return found;
        };
        // Not moved yet, or moved since the first look: under the lock no move is half done.
        let _guard = inner.lock(key).await;
        self.get_moved(key, range, guess, &old, &place).await
    }

    /// A read of a key that may be moving from `old` to `place`, under the key's lock (no
    /// move is half done): the source first, then the target.
    async fn get_moved(
        &self,
        key: &[u8],
        range: ReadRange,
        guess: Option<Mechanism>,
        old: &Placement<'_>,
        place: &Placement<'_>,
    ) -> Result<(Vec<u8>, u64)> {
        match self.get_careful(key, range, guess, old, u32::MAX).await {
            Err(RedundancyError::NotFound { .. }) => {
                self.get_careful(key, range, guess, place, u32::MAX).await
            }
            other => other,
        }
    }

    /// [`Manager::read_at`] with the careful path allowed, segment `unsettled` read the
    /// careful way at once (a cheap read of it just failed); the caller holds the key's lock.
    async fn get_careful(
        &self,
        key: &[u8],
        range: ReadRange,
        guess: Option<Mechanism>,
        place: &Placement<'_>,
        unsettled: u32,
    ) -> Result<(Vec<u8>, u64)> {
        self.read_at(key, range, guess, place, Some(unsettled))
            .await?
            .map_err(|_| RedundancyError::Lost {
                key: key.to_vec(),
                detail: "the careful read gave no answer".into(),
            })
    }

    /// [`Manager::get`] at one placement. With `careful` `None` (no lock held) only the cheap
    /// reads are made, and `Ok(Err(s))` says the one of segment `s` did not settle. With
    /// `Some(s)` the caller holds the key's lock: every segment the cheap read cannot settle
    /// is read the careful way (which repairs), segment `s` at once (reading it the cheap way
    /// again would double a faulty device's errors and not repair), and the answer is never
    /// `Ok(Err(_))`. Only the segments the range needs are read beside segment 0, so a
    /// careful read of one bad segment of a large object reads that segment whole, not the
    /// object.
    async fn read_at(
        &self,
        key: &[u8],
        range: ReadRange,
        guess: Option<Mechanism>,
        place: &Placement<'_>,
        careful: Option<u32>,
    ) -> Result<std::result::Result<(Vec<u8>, u64), u32>> {
        let inner = &self.inner;
        let stamp = inner.stamp(key);
        let hint = inner.cached(key).map(|m| m.mechanism).or(guess);
        let overlapping = inner.overlapping(key);
        // Only what the devices hold goes into the metadata cache: a write in progress may
        // still fail.
        let from_devices = overlapping.is_none();
        if overlapping.is_none() && careful.is_none() {
            if let Some(found) = self.get_part(key, range, place).await {
                return Ok(Ok(found));
            }
        }
        let first = match overlapping {
            Some(Writing::Put(r)) => r,
            Some(Writing::Delete) => return Err(RedundancyError::NotFound { key: key.to_vec() }),
            None => {
                let cheap = match careful {
                    Some(0) => None,
                    _ => inner.fast_segment(key, 0, place, hint, None).await,
                };
                match (cheap, careful) {
                    (Some(r), _) => r,
                    (None, None) => return Ok(Err(0)),
                    (None, Some(_)) => match inner.slow_segment(key, 0, place, None).await? {
                        Some(r) => r,
                        None => return Err(RedundancyError::NotFound { key: key.to_vec() }),
                    },
                }
            }
        };
        let (start, end) =
            range
                .resolve(first.object_len)
                .map_err(|_| RedundancyError::Offset {
                    offset: range.offset,
                    len: first.object_len,
                })?;
        let seg_bytes = first.meta().segment_bytes;
        let (s_first, s_last) = if end > start {
            (start / seg_bytes, (end - 1) / seg_bytes)
        } else {
            (0, 0)
        };
        let (mechanism, version, object_len, meta) = (
            first.mechanism,
            first.version,
            first.object_len,
            first.meta(),
        );
        // Segment 0 is used once, as it is; a read of most of one segment from its start
        // takes the segment's bytes without copying them (a 1 MiB GET is one segment).
        let mut first = Some(first);
        // Allocated only when bytes are copied into it (not for a segment taken whole).
        let mut out = Vec::new();
        for s in s_first..=s_last {
            let seg = if s == 0 {
                first.take().expect("segment 0 is read once")
            } else {
                let s = s as u32;
                let cheap = match careful {
                    Some(c) if c == s => None,
                    _ => {
                        inner
                            .fast_segment(key, s, place, Some(mechanism), Some(version))
                            .await
                    }
                };
                match cheap {
                    Some(r) => r,
                    None if careful.is_none() => return Ok(Err(s)),
                    None => match inner.slow_segment(key, s, place, Some(version)).await? {
                        Some(r) => r,
                        None => {
                            return Err(RedundancyError::Lost {
                                key: key.to_vec(),
                                detail: format!(
                                    "segment {s} of version {} cannot be read",
                                    version
                                ),
                            })
                        }
                    },
                }
            };
            let seg_start = s * seg_bytes;
            let lo = start.max(seg_start) - seg_start;
            let hi = end.min(seg_start + seg.data.len() as u64) - seg_start;
            // Taken whole only when most of it is wanted: a short read must not hold a
            // segment's memory (NBD budgets what a connection holds by the request's length).
            if s_first == s_last && lo == 0 && 2 * hi as usize >= seg.data.len() {
                out = seg.data;
                out.truncate(hi as usize);
            } else if lo < hi {
                out.reserve_exact((end - start) as usize - out.len());
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
            inner.remember(key, meta, stamp);
        }
        Ok(Ok((out, object_len)))
    }

    /// [`Manager::get`] of part of an object the metadata cache knows, read below its segments
    /// (`part.rs`); `None` when that does not apply or does not work out, and the segments are
    /// read whole.
    async fn get_part(
        &self,
        key: &[u8],
        range: ReadRange,
        place: &Placement<'_>,
    ) -> Option<(Vec<u8>, u64)> {
        let inner = &self.inner;
        let meta = inner.cached(key)?;
        let (start, end) = range.resolve(meta.len).ok()?;
        if start == end || (start == 0 && end == meta.len) {
            return None;
        }
        let seg_bytes = meta.segment_bytes;
        let mut out = Vec::with_capacity((end - start) as usize);
        for s in start / seg_bytes..=(end - 1) / seg_bytes {
            let seg_start = s * seg_bytes;
            let lo = (start.max(seg_start) - seg_start) as usize;
            let hi = (end.min(seg_start + seg_bytes) - seg_start) as usize;
            let part = inner.read_part(key, s as u32, place, &meta, lo, hi).await?;
            out.extend_from_slice(&part);
        }
        Some((out, meta.len))
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
        let stamp = inner.stamp(key);
        inner.relocate_locked(key).await?;
        let epochs = inner.epochs();
        let place = epochs.layout.place(key);
        let repairs = inner.io.counters.repairs.load(Ordering::Relaxed);
        let Some(first) = inner.slow_segment(key, 0, &place, None).await? else {
            inner.forget(key);
            return Err(RedundancyError::NotFound { key: key.to_vec() });
        };
        let later = inner.later_segments(key, &place, &first).await?;
        let segments: Vec<&Resolved> = std::iter::once(&first).chain(&later).collect();
        let rewritten = inner.secure_packed(key, &place, &segments).await?;
        if rewritten || inner.io.counters.repairs.load(Ordering::Relaxed) != repairs {
            // The version answered may have been on fewer devices than the tolerance needs
            // (a write cut by a crash): its repaired (or rewritten) pieces are made durable
            // before anyone sees it, or a power cut and a device lost afterwards would bring
            // back the older one (SIM-17). Repairs of other keys meanwhile only cost this read
            // a sync.
            inner.sync_shared(place.devices()).await?;
        }
        let out: Vec<u8> = segments
            .iter()
            .flat_map(|r| r.data.iter().copied())
            .collect();
        if rewritten {
            // Packed anew: another set and slot than what the cache may hold.
            inner.forget(key);
        } else {
            inner.remember(key, first.meta(), stamp);
        }
        Ok((out, first.object_len))
    }

    /// Deletes the object under `key`; returns whether it existed.
    pub async fn delete(&self, key: &[u8]) -> Result<bool> {
        writing(self.delete_marked(key)).await
    }

    async fn delete_marked(&self, key: &[u8]) -> Result<bool> {
        let inner = &self.inner;
        inner.check_key(key)?;
        let _guard = inner.lock(key).await;
        inner.relocate_locked(key).await?;
        let prev = match inner.meta(key, true).await {
            Ok(Some(prev)) => prev,
            Ok(None) => return Ok(false),
            Err(lost @ RedundancyError::Lost { .. }) => {
                // What is left of an object that cannot be read (scrub counts it lost): its
                // owner may still delete it, or it stays lost for ever.
                self.delete_remains(key, lost).await?;
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        // Ends (the cache forgetting the key) when this returns, however it returns.
        let _change = inner.change(key);
        if matches!(prev.mechanism, Mechanism::Pack { .. }) {
            inner.retire_packed(key, &prev).await;
        }
        let epochs = inner.epochs();
        let place = epochs.layout.place(key);
        let skey = segment_key(key, 0, prev.version);
        let writing = inner.writing(key, Writing::Delete);
        // Every position, not only the mechanism's: an earlier mechanism's leftovers may wait
        // there for a sync.
        let res = join_all((0..inner.width).map(|i| {
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
        let pieces = place.of_pieces(prev.mechanism.pieces());
        for s in 1..prev.segments {
            for d in pieces.devices() {
                later.push((d, segment_key(key, s, prev.version)));
            }
        }
        inner.defer_deletes(later).await?;
        if !failed.is_empty() {
            tracing::warn!(
                ?failed,
                "delete left pieces on failed devices; rebuild replaces them"
            );
        }
        Ok(true)
    }

    /// Deletes every piece of `key` in its group, of any version: what is left of a lost
    /// object (`lost` says why), whose versions and mechanism are unknown. Fails with `lost`
    /// when no device of the group is in service. The caller holds the key's lock.
    async fn delete_remains(&self, key: &[u8], lost: RedundancyError) -> Result<()> {
        let inner = &self.inner;
        let _change = inner.change(key);
        let _writing = inner.writing(key, Writing::Delete);
        let epochs = inner.epochs();
        let place = epochs.layout.place(key);
        // Later segments and staged copies: `s` + key + version + segment.
        let mut later_prefix = staged_key(key, 0);
        later_prefix.truncate(1 + key.len());
        let in_service: Vec<usize> = (0..inner.width)
            .map(|i| place.device(i))
            .filter(|&d| !inner.io.is_failed(d))
            .collect();
        if in_service.is_empty() {
            return Err(lost);
        }
        for d in in_service {
            let device_error = |source| RedundancyError::Device { device: d, source };
            let later = inner
                .io
                .iterate_keys(d, &later_prefix)
                .await
                .map_err(device_error)?;
            // Only this key's: longer keys that start with it have other lengths.
            let ours = later
                .into_iter()
                .filter(|k| k.len() == later_prefix.len() + 12);
            for dkey in std::iter::once(segment_key(key, 0, 0)).chain(ours) {
                inner.io.delete(d, &dkey).await.map_err(device_error)?;
            }
        }
        tracing::warn!(
            key = %crate::error::show_key(key),
            "deleted what was left of a lost object"
        );
        Ok(())
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
                let batch = match inner.io.iterate(d, &req).await {
                    Ok(b) => b,
                    // A device that failed while listed is out of service now; every key it
                    // held a first segment of is listed by the others (within the tolerance).
                    Err(_) if inner.io.is_failed(d) => break,
                    Err(source) => return Err(RedundancyError::Device { device: d, source }),
                };
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
        let inner = &self.inner;
        inner.check_key(key)?;
        // Decided before the first look, as for a read (`get_guessing`).
        let epochs = inner.epochs();
        let moved_from = inner.moved_from(&epochs, key);
        let found = inner.meta(key, false).await?;
        if found.is_some() {
            return Ok(found);
        }
        let Some(old) = moved_from else {
            return Ok(None);
        };
        let _guard = inner.lock(key).await;
        match inner.meta_at(key, &old, true).await? {
            Some(m) => Ok(Some(m)),
            None => inner.meta_at(key, &epochs.layout.place(key), true).await,
        }
    }

    /// Whether a read of `key` may find something. `false` only when no write or delete of it
    /// is in flight and every device of its group (and of the group it is moving from) can be
    /// asked and holds no piece of its first segment: then [`Manager::get`] answers `NotFound`.
    /// Errs towards `true` (an unreadable device, a leftover piece), so a caller may treat
    /// `false` as "reads as absent" (NBD block status reports such objects as holes). Costs an
    /// index lookup per device, no data read.
    pub async fn holds(&self, key: &[u8]) -> Result<bool> {
        let inner = &self.inner;
        inner.check_key(key)?;
        if inner.cached(key).is_some() || inner.overlapping(key).is_some() {
            return Ok(true);
        }
        let epochs = inner.epochs();
        let place = epochs.layout.place(key);
        let moved_from = inner.moved_from(&epochs, key);
        // While the key may move, its lock keeps a move from running between the looks at
        // the two groups (found at neither, though the move wrote the one looked at first
        // only after that look), as `get` does.
        let _guard = match moved_from {
            Some(_) => Some(inner.lock(key).await),
            None => None,
        };
        for p in std::iter::once(&place).chain(moved_from.as_ref()) {
            if inner.holds_at(key, p).await {
                return Ok(true);
            }
        }
        Ok(false)
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
    /// A split segment's shard length: the stored one for a repair, 0 for a new write (which
    /// chooses, `Inner::shard_len`).
    pub shard_len: usize,
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

    /// Pieces of a group of `width` one object depends on: its own, or for a packed object
    /// the whole group (its set's members and parity take every colour).
    pub fn span(&self, width: usize) -> usize {
        match *self {
            Mechanism::Pack { .. } => width,
            _ => self.pieces().min(width),
        }
    }
}

pub(crate) fn mechanism_of(h: &PieceHeader) -> Option<Mechanism> {
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

/// The slot (ring offset from the key's rotation, what indexes a scan of the group) where a
/// copy, shard or hashed piece belongs, by its index and the layout's piece order; `None` for
/// an index past its mechanism's pieces and for packed pieces (whose index is their set slot).
pub(crate) fn slot_of(order: PieceOrder, width: usize, h: &PieceHeader) -> Option<usize> {
    let mech = mechanism_of(h)?;
    let (index, pieces) = (h.index as usize, mech.pieces());
    match h.kind {
        PieceKind::Member | PieceKind::Pointer => None,
        _ if index < pieces && pieces <= width => Some(order.shard(index, pieces, width)),
        _ => None,
    }
}
