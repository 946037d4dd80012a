//! The manager's shared state and the helpers every operation uses: the layouts it places by,
//! the per-key locks, the metadata cache, the table of writes in progress, deferred deletes and
//! the group commit of device syncs. The operations themselves are in `manager.rs` and the
//! modules beside it.

use crate::error::{RedundancyError, Result};
use crate::format::{
    segment_key, unit_header_bytes, PieceHeader, PieceKind, PIECE_HEADER_BYTES,
    PIECE_UNITS_MIN_PAYLOAD, PIECE_UNIT_BYTES,
};
use crate::io::DeviceSet;
use crate::manager::{mechanism_of, ObjectMeta, Resolved};
use crate::mechanism::{ManagerConfig, Mechanism};
use crate::pack::Packer;
use crate::relocate::Move;
use futures_util::future::join_all;
use railstore_device::purpose::background;
use railstore_ec::{Code, CodeId, Codec};
use railstore_placement::{Layout, PieceOrder, Placement};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Stripes of the per-key write lock table.
pub(crate) const KEY_LOCK_STRIPES: usize = 4096;
/// Deletes waiting for a sync before the manager syncs by itself.
pub(crate) const GARBAGE_ENTRIES_MAX: usize = 1 << 16;

/// A piece to delete once the version that replaced it is durable.
#[derive(Debug)]
pub(crate) struct Garbage {
    pub device: usize,
    pub device_key: Vec<u8>,
    /// For reused (segment 0) keys: the user key and the version whose piece may go.
    pub only_version: Option<(Vec<u8>, u64)>,
}

/// Segment 0 of an object as a put or delete in progress leaves it.
#[derive(Clone)]
pub(crate) enum Writing {
    Put(Resolved),
    Delete,
}

/// The layouts objects are placed by. An operation takes them once ([`Inner::epochs`]) and
/// holds them while it works, so a drain that starts while the array serves
/// ([`Manager::start_drain`]) knows when no operation still places by the layouts before it.
pub(crate) struct Epochs {
    /// Where objects are written: the last epoch's layout, or for a drain the one before it.
    pub layout: Arc<Layout>,
    /// While objects move between epochs, the layout they move out of (`relocate.rs`).
    pub source: Option<Arc<Layout>>,
    /// Which way they move.
    pub moving: Option<Move>,
}

pub(crate) struct Inner {
    pub(crate) io: DeviceSet,
    /// Read through [`Inner::epochs`]; only a drain started online replaces them.
    pub(crate) epochs: std::sync::RwLock<Arc<Epochs>>,
    /// Devices per group and how pieces sit in a group (the same in every epoch).
    pub(crate) width: usize,
    pub(crate) piece_order: PieceOrder,
    /// Whether a move runs: reads and writes look at the source layout too.
    pub(crate) moving: AtomicBool,
    pub(crate) config: ManagerConfig,
    pub(crate) codecs: Mutex<HashMap<(u8, u8, u8), Arc<Codec>>>,
    pub(crate) locks: Vec<tokio::sync::Mutex<()>>,
    pub(crate) cache: Mutex<HashMap<Vec<u8>, ObjectMeta>>,
    /// Per key stripe: changes of keys' metadata (writes and deletes at their start, at segment
    /// 0 and at their end; repairs that rewrote pieces; heals that settle another version), so
    /// a read does not put into the cache what a change made stale while it read.
    pub(crate) stamps: Vec<AtomicU64>,
    /// Unit tables of large pieces read below their segment (`part.rs`).
    pub(crate) unit_tables: Mutex<crate::part::UnitTables>,
    /// What a put or delete is writing to segment 0 right now (see [`Inner::overlapping`]).
    pub(crate) writing: Mutex<HashMap<Vec<u8>, Writing>>,
    /// Entries in `writing`, so reads look there only when something is.
    pub(crate) writing_count: AtomicUsize,
    pub(crate) garbage: Mutex<Vec<Garbage>>,
    /// This manager, for background tasks.
    pub(crate) me: std::sync::Weak<Inner>,
    pub(crate) version: AtomicU64,
    pub(crate) key_bytes_max: usize,
    pub(crate) piece_payload_max: usize,
    /// The payload of a full segment's copy or shard: whole units with their table, one
    /// device value (see [`tabled_payload_max`]).
    pub(crate) tabled_payload_max: usize,
    pub(crate) packer: Packer,
    /// Per device: syncs that concurrent writers share (see [`Inner::sync_shared`]); grows
    /// with the array.
    pub(crate) sync_groups: std::sync::RwLock<Vec<Arc<SyncGroup>>>,
}

/// Group commit of one device's syncs: a writer takes a ticket once its writes are done, and
/// one sync started after that covers them, whoever issues it.
#[derive(Default)]
pub(crate) struct SyncGroup {
    /// Tickets handed out.
    tickets: AtomicU64,
    /// The highest ticket a finished sync covers; held while a sync runs.
    covered: tokio::sync::Mutex<u64>,
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
        self.locks[Self::stripe(key)].lock().await
    }

    /// Every key's lock: no write is under way while they are held. Nothing holds two keys'
    /// locks at once, so taking them all in order cannot deadlock.
    pub(crate) async fn lock_all(&self) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut all = Vec::with_capacity(KEY_LOCK_STRIPES);
        for l in &self.locks {
            all.push(l.lock().await);
        }
        all
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
            .and_then(|c| self.config.ec.codec(c))
            .map_err(|e| RedundancyError::Config(e.to_string()))?;
        let codec = Arc::new(codec);
        map.insert((code.as_u8(), k, m), codec.clone());
        Ok(codec)
    }

    /// Bytes of user data in one full segment under `mech`.
    pub(crate) fn segment_bytes(&self, mech: Mechanism) -> usize {
        self.segment_cuts(mech)[0]
    }

    /// The segment lengths objects of `mech` may be cut at: what new writes use, then what
    /// writes used before unit tables covered full segments (the whole device value, with no
    /// room for a table). An object's own cut is the length of its segment 0 when it has
    /// more than one (`ObjectMeta::segment_bytes`); a piece's header alone fits only one of
    /// the two (see `tabled_payload_max`).
    pub(crate) fn segment_cuts(&self, mech: Mechanism) -> [usize; 2] {
        let legacy = self.piece_payload_max;
        match mech {
            Mechanism::Split { k, .. } => {
                [self.tabled_payload_max * k as usize, legacy * k as usize]
            }
            Mechanism::Replicate { .. } => [self.tabled_payload_max, legacy],
            _ => [legacy, legacy],
        }
    }

    /// Notes that a put or delete is writing segment 0 of `key`, until the guard drops. The
    /// caller holds the key's lock.
    pub(crate) fn writing<'a>(&'a self, key: &'a [u8], what: Writing) -> WritingGuard<'a> {
        self.writing.lock().unwrap().insert(key.to_vec(), what);
        self.writing_count.fetch_add(1, Ordering::SeqCst);
        // Then a change of the key: a read that began before (and so may have read the old
        // segment 0) does not cache it, and one that begins after finds this entry first. So
        // once a read has seen the new version, none after it takes the old one's metadata
        // from the cache, whose later segments are still on the devices until a sync.
        self.forget(key);
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
    /// Whether a put or delete of `key` is writing it now.
    pub(crate) fn is_writing(&self, key: &[u8]) -> bool {
        self.overlapping(key).is_some()
    }

    pub(crate) fn overlapping(&self, key: &[u8]) -> Option<Writing> {
        if self.writing_count.load(Ordering::SeqCst) == 0 {
            return None;
        }
        self.writing.lock().unwrap().get(key).cloned()
    }

    pub(crate) fn cached(&self, key: &[u8]) -> Option<ObjectMeta> {
        self.cache.lock().unwrap().get(key).cloned()
    }

    fn stripe(key: &[u8]) -> usize {
        railstore_placement::key_hash(key, 0x6c6f_636b) as usize % KEY_LOCK_STRIPES
    }

    /// Where `key`'s metadata changes stand; taken before reading it, for [`Inner::remember`].
    pub(crate) fn stamp(&self, key: &[u8]) -> u64 {
        self.stamps[Self::stripe(key)].load(Ordering::SeqCst)
    }

    /// [`Inner::stamp`] of every stripe, for a read of many keys.
    pub(crate) fn stamps_now(&self) -> Vec<u64> {
        self.stamps
            .iter()
            .map(|s| s.load(Ordering::SeqCst))
            .collect()
    }

    /// [`Inner::stamp`] of `key` in [`Inner::stamps_now`]'s answer.
    pub(crate) fn stamp_in(stamps: &[u64], key: &[u8]) -> u64 {
        stamps[Self::stripe(key)]
    }

    /// Caches what a read found of `key`, unless a key of its stripe changed (`stamps`) since
    /// `stamp` was taken: the read may have seen what the change replaced, and reads below a
    /// segment trust the cache's version (`part.rs`).
    pub(crate) fn remember(&self, key: &[u8], meta: ObjectMeta, stamp: u64) {
        let mut c = self.cache.lock().unwrap();
        if self.stamp(key) != stamp {
            return;
        }
        self.cache_insert(&mut c, key, meta);
    }

    /// Caches what a write of `key` just made durable, as a change of it.
    pub(crate) fn remember_written(&self, key: &[u8], meta: ObjectMeta) {
        let mut c = self.cache.lock().unwrap();
        self.stamps[Self::stripe(key)].fetch_add(1, Ordering::SeqCst);
        self.cache_insert(&mut c, key, meta);
    }

    fn cache_insert(&self, c: &mut HashMap<Vec<u8>, ObjectMeta>, key: &[u8], meta: ObjectMeta) {
        let max = self.config.meta_cache_entries_max;
        if max == 0 {
            return;
        }
        if c.len() >= max && !c.contains_key(key) {
            // Crude but bounded: drop everything and let hot keys come back.
            c.clear();
        }
        c.insert(key.to_vec(), meta);
    }

    /// The layouts as they are now; an operation holds them while it works.
    pub(crate) fn epochs(&self) -> Arc<Epochs> {
        self.epochs.read().unwrap().clone()
    }

    /// Drops what the cache knows of `key`, as a change of it: a write or delete calls it
    /// when it begins and when it fails (a write that succeeds ends with
    /// [`Inner::remember_written`]), a repair when it rewrote pieces, so no read that
    /// overlapped it caches what it saw.
    pub(crate) fn forget(&self, key: &[u8]) {
        let mut c = self.cache.lock().unwrap();
        self.stamps[Self::stripe(key)].fetch_add(1, Ordering::SeqCst);
        c.remove(key);
    }

    /// Marks a write or delete of `key` begun; the guard marks it ended when dropped (on any
    /// path, a cancelled one too) unless [`Change::written`] did.
    pub(crate) fn change<'a>(&'a self, key: &'a [u8]) -> Change<'a> {
        self.forget(key);
        Change {
            inner: self,
            key,
            open: true,
        }
    }

    /// Whether some position of `place` may hold a first segment of `key`: an index lookup
    /// per device, no data read; errs towards `true` (a device that cannot be asked).
    pub(crate) async fn holds_at(&self, key: &[u8], place: &Placement<'_>) -> bool {
        let skey = segment_key(key, 0, 0);
        for d in (0..place.width()).map(|i| place.device(i)) {
            if !self.io.readable(d) || !matches!(self.io.exists(d, &skey).await, Ok(false)) {
                return true;
            }
        }
        false
    }

    /// What is stored under `key`: the cache, else segment 0's header on the primary, else (when
    /// the primary cannot answer) a scan of the whole placement. `locked`: the caller holds the
    /// key's lock (else the scan takes it).
    pub(crate) async fn meta(&self, key: &[u8], locked: bool) -> Result<Option<ObjectMeta>> {
        if let Some(m) = self.cached(key) {
            return Ok(Some(m));
        }
        self.meta_at(key, &self.epochs().layout.place(key), locked)
            .await
    }

    /// What `place` holds under `key` (the cache not asked): segment 0's header on the
    /// primary, else a scan of the whole placement, under the key's lock (taken unless
    /// `locked`: the scan repairs, see `Manager::get_guessing`).
    pub(crate) async fn meta_at(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        locked: bool,
    ) -> Result<Option<ObjectMeta>> {
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
                                // Segment 0's length, from its piece's.
                                let segment0_len = match h.kind {
                                    PieceKind::Shard => h.k as u64 * h.payload_len as u64,
                                    PieceKind::Copy | PieceKind::Hashed => h.payload_len as u64,
                                    _ => self.segment_bytes(mech) as u64,
                                };
                                let segment_bytes = crate::manager::object_cut(
                                    h.segment_count,
                                    segment0_len,
                                    h.object_len,
                                );
                                return Ok(Some(ObjectMeta {
                                    mechanism: mech,
                                    version: h.version,
                                    len: h.object_len,
                                    segments: h.segment_count,
                                    segment_bytes,
                                }));
                            }
                        }
                    }
                }
                Err(_) => {}
            }
        }
        let _guard = match locked {
            true => None,
            false => Some(self.lock(key).await),
        };
        Ok(self
            .slow_segment(key, 0, place, None)
            .await?
            .map(|r| r.meta()))
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

    pub(crate) async fn push_garbage(&self, later: Vec<Garbage>) -> Result<()> {
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
        // No client waits on these reads (the version checks).
        background(self.delete_garbage(garbage)).await;
        Ok(())
    }

    async fn delete_garbage(&self, garbage: Vec<Garbage>) {
        for g in garbage {
            match &g.only_version {
                None => {
                    let _ = self.io.delete(g.device, &g.device_key).await;
                }
                Some((key, version)) => {
                    // A segment-0 key is reused by later writes: delete only the old piece.
                    let _guard = self.lock(key).await;
                    // The header says which version it is.
                    let head = self
                        .io
                        .retrieve_prefix(g.device, &g.device_key, PIECE_HEADER_BYTES as u64)
                        .await;
                    if let Ok(Some(bytes)) = head {
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
    }

    /// Makes what was stored on the devices of an object of `pieces` pieces durable.
    pub(crate) async fn sync_positions(&self, place: &Placement<'_>, pieces: usize) -> Result<()> {
        self.sync_devices(place.of_pieces(pieces).devices()).await
    }

    /// Makes what this task stored on `devices` durable, with one sync per device shared by
    /// every task that waits at the same time.
    pub(crate) async fn sync_shared(&self, devices: impl Iterator<Item = usize>) -> Result<()> {
        join_all(devices.map(|d| async move {
            let group = self.sync_groups.read().unwrap()[d].clone();
            let ticket = group.tickets.fetch_add(1, Ordering::SeqCst) + 1;
            let mut covered = group.covered.lock().await;
            if *covered >= ticket {
                return Ok(());
            }
            let upto = group.tickets.load(Ordering::SeqCst);
            self.sync_devices(std::iter::once(d)).await?;
            *covered = upto;
            Ok(())
        }))
        .await
        .into_iter()
        .collect()
    }

    /// Syncs the given devices at once; devices marked failed have nothing to sync. A device
    /// that fails during its sync leaves service (what it held is read from the others, as
    /// for any failed device), so it does not fail the sync while the devices out of service
    /// are within the policy's tolerance; beyond it the sync fails, since what it covers may
    /// be durable nowhere. Other errors fail it too.
    async fn sync_devices(&self, devices: impl Iterator<Item = usize>) -> Result<()> {
        let results = join_all(devices.map(|d| async move { (d, self.io.sync(d).await) })).await;
        let mut left_service = None;
        for (d, r) in results {
            match r {
                Ok(()) => {}
                Err(source) if self.io.is_failed(d) => {
                    left_service.get_or_insert(RedundancyError::Device { device: d, source });
                }
                Err(source) => return Err(RedundancyError::Device { device: d, source }),
            }
        }
        // Beyond the tolerance nothing is durable enough to acknowledge, whether the devices
        // left service during this sync or before it (a failed device is not synced at all,
        // so a sync over devices that all failed would otherwise succeed).
        let out = self.devices_out_of_service();
        if out <= self.tolerance() {
            return Ok(());
        }
        Err(left_service.unwrap_or_else(|| RedundancyError::Device {
            device: (0..self.io.len())
                .find(|&d| self.io.is_failed(d))
                .unwrap_or(0),
            source: railstore_device::DeviceError::Failed {
                reason: "more devices are out of service than the policy tolerates",
            },
        }))
    }

    fn devices_out_of_service(&self) -> usize {
        (0..self.io.len()).filter(|&d| self.io.is_failed(d)).count()
    }

    /// Device losses every object of the policy survives.
    fn tolerance(&self) -> usize {
        let mechanisms = self.config.policy.mechanisms();
        mechanisms.iter().map(|m| m.tolerance()).min().unwrap_or(0)
    }
}

/// The payload length a whole-segment piece must have, from its header.
/// The longest payload of whole 4 KiB units whose unit table still fits a device value of
/// `piece_payload_max` + the plain header, and at least one unit shorter than
/// `piece_payload_max`: then a reader tells a piece of a full segment cut this way from one
/// cut at `piece_payload_max` (before unit tables) by its length alone, and the last
/// segment's shards of the two cuts differ by more than the rounding to whole units.
/// `piece_payload_max` itself when no such payload reaches the minimum for a table.
pub(crate) fn tabled_payload_max(piece_payload_max: usize) -> usize {
    let mut p =
        piece_payload_max.saturating_sub(PIECE_UNIT_BYTES) / PIECE_UNIT_BYTES * PIECE_UNIT_BYTES;
    while p >= PIECE_UNITS_MIN_PAYLOAD {
        if unit_header_bytes(p) + p <= piece_payload_max + PIECE_HEADER_BYTES {
            return p;
        }
        p -= PIECE_UNIT_BYTES;
    }
    piece_payload_max
}

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

/// A write or delete of one key under way ([`Inner::change`]).
pub(crate) struct Change<'a> {
    inner: &'a Inner,
    key: &'a [u8],
    open: bool,
}

impl Change<'_> {
    /// The write is durable: cache what it wrote.
    pub(crate) fn written(mut self, meta: ObjectMeta) {
        self.inner.remember_written(self.key, meta);
        self.open = false;
    }
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        if self.open {
            self.inner.forget(self.key);
        }
    }
}

/// Ends a [`Inner::writing`] entry.
pub(crate) struct WritingGuard<'a> {
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
