//! `file`: a log-structured key-value store in a directory of segment files, or in one
//! preallocated regular file or raw block device divided into fixed-size segment slots
//! (`layout`; both byte by byte in `docs/format.md`).
//!
//! Records (`format`) are packed back to back into segments (values of 4 KiB and more start
//! on a 512-byte boundary, so they read with exactly their own blocks) through aligned in-memory
//! write buffers and written in aligned blocks, with O_DIRECT where the file system allows it.
//! One flusher thread per device (`flush`) writes full buffers in order, two at a time (large
//! ones as several concurrent 1 MiB writes), into segment files it allocates ahead of the
//! writes, and serves `sync` by group commit: every sync waiting when a flush finishes shares
//! one `fdatasync`. Reads (`read`) look the key up in an in-memory index (which also keeps each
//! record's CRC) and fetch the aligned range that covers the value through io_uring (one ring
//! and reaper thread per device), or on tokio's blocking thread pool where io_uring is
//! unavailable; io_uring saved two context switches per read (see
//! `docs/benchmarks/device.md`). An iteration with values reads its records in log order,
//! neighbours with one read (`bulk`). A checkpoint of the index plus replay of the log after it
//! rebuilds the index on open (`recover`; a checkpoint that disagrees with the log is ignored); a torn or
//! corrupt tail fails its CRC and is cut off, after a copy to a side file if intact records lie
//! behind it. A failed write or fdatasync stops the device for good. Compaction (`compact`)
//! copies the live records of a sealed segment to the log head and deletes the segment (or
//! frees its slot); the
//! owner calls it through [`Device::compact`], or a background thread does when
//! [`CompactionPolicy::Auto`] is set.

mod bulk;
mod compact;
mod flush;
mod layout;
mod read;

pub use bulk::BulkReads;
mod recover;

use crate::aligned::{align_down, align_up, AlignedBuf, ALIGN_BYTES};
use crate::api::{
    iter_range, CompactStats, Device, DeviceInfo, IterBatch, IterEntry, IterRequest, Limits,
    QueueGate, ReadRange, Retrieved, StoreMode,
};
use crate::error::{DeviceError, Result};
use crate::format::{
    encode_checkpoint, encode_record, record_len, scan_records, value_pad, Checkpoint, Loc,
    RecordKind, VALUE_ALIGN_BYTES, VALUE_ALIGN_MIN_BYTES,
};
use async_trait::async_trait;
use layout::{allocate, read_aligned, DeviceLock, Layout, SegIo, SegPlace};
pub use layout::{CHECKPOINT_FILE, LOCK_FILE};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Full buffers allowed to wait for the flusher before stores wait.
const QUEUED_BUFFERS_MAX: usize = 4;
/// Large flushes are cut into chunks of this size written concurrently.
const WRITE_CHUNK_BYTES: usize = 1 << 20;
/// How far ahead of its writes a segment file is allocated (see `Shared::allocate_ahead`).
const ALLOCATE_AHEAD_BYTES: u64 = 64 << 20;
/// Flush jobs (queued buffers) written at once. With one, the disk idled between jobs, while
/// a job's last chunks finished and the next started; a second keeps writes queued (see
/// `Shared::write_job` for how overlapping jobs stay ordered).
const JOBS_IN_FLIGHT_MAX: usize = 2;

/// When the device reclaims dead space on its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CompactionPolicy {
    /// Only when the owner calls [`Device::compact`] (the layers above decide when a device may
    /// spend time writing).
    Manual,
    /// A background thread compacts a sealed segment once its dead fraction reaches
    /// `dead_ratio_min` (standalone use).
    Auto {
        /// Dead bytes / segment bytes at which a segment is compacted.
        dead_ratio_min: f64,
    },
}

/// Which on-disk layout [`FileDevice::open`] uses for its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileLayout {
    /// By what the path is: a directory, or a path that does not exist, gives
    /// [`FileLayout::Directory`] (created if missing); a regular file or a block device gives
    /// [`FileLayout::SingleFile`].
    #[default]
    Auto,
    /// One file per segment in a directory (created if missing); a file is refused.
    Directory,
    /// The whole device in one regular file or raw block device: a path that does not exist is
    /// created as a file preallocated for `capacity_bytes` of segments (plus metadata); an empty
    /// regular file is grown the same way; a file or block device without a superblock is
    /// formatted only if its first 8 KiB are zero; a directory is refused.
    SingleFile,
}

/// Settings of a [`FileDevice`].
#[derive(Debug, Clone)]
pub struct FileConfig {
    /// Bytes of segments the device may hold (live and dead). For the single-file layout, the
    /// size of a file it creates; an existing file or block device gives at most its slots'
    /// bytes.
    pub capacity_bytes: u64,
    /// Key and value limits.
    pub limits: Limits,
    /// Most operations in flight.
    pub queue_depth_max: usize,
    /// Size at which a segment is sealed and a new one started. A single-file device keeps the
    /// size it was formatted with.
    pub segment_bytes: u64,
    /// Capacity of each of the write buffers (the active one and those being flushed).
    pub write_buffer_bytes: usize,
    /// Buffered bytes at which the flusher writes without waiting for a sync.
    pub flush_bytes: usize,
    /// Log bytes appended between background checkpoints; 0 checkpoints only on close.
    pub checkpoint_interval_bytes: u64,
    /// When dead space is reclaimed.
    pub compaction: CompactionPolicy,
    /// Try O_DIRECT (falls back to buffered I/O with a warning where refused).
    pub direct_io: bool,
    /// Read through io_uring (falls back to a blocking thread pool where unavailable).
    pub io_uring: bool,
    /// Directory or single file (see [`FileLayout`]).
    pub layout: FileLayout,
    /// Where the single-file layout copies a cut log tail that still holds intact records
    /// (see [`RecoveryReport::set_aside`]); `None`: the device file's directory. A block device
    /// needs it set, or such a device does not open.
    pub aside_dir: Option<PathBuf>,
}

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            capacity_bytes: 64 << 30,
            limits: Limits::default(),
            queue_depth_max: 128,
            segment_bytes: 64 << 20,
            write_buffer_bytes: 16 << 20,
            flush_bytes: 4 << 20,
            checkpoint_interval_bytes: 256 << 20,
            compaction: CompactionPolicy::Auto {
                dead_ratio_min: 0.5,
            },
            direct_io: true,
            io_uring: true,
            layout: FileLayout::Auto,
            aside_dir: None,
        }
    }
}

impl FileConfig {
    fn validate(&self) -> Result<()> {
        self.limits.validate()?;
        let rec_max = record_len(self.limits.key_bytes_max, self.limits.value_bytes_max) as u64
            + VALUE_ALIGN_BYTES;
        if self.limits.key_bytes_max > u16::MAX as usize
            || self.limits.value_bytes_max > crate::format::FORMAT_VALUE_BYTES_MAX as usize
        {
            return Err(DeviceError::Config(
                "limits exceed what the record format can hold".into(),
            ));
        }
        if (self.write_buffer_bytes as u64) < align_up(rec_max) + 2 * ALIGN_BYTES as u64 {
            return Err(DeviceError::Config(format!(
                "write_buffer_bytes {} must hold the largest record ({rec_max} B) plus two blocks",
                self.write_buffer_bytes
            )));
        }
        if self.segment_bytes < rec_max {
            return Err(DeviceError::Config(
                "segment_bytes smaller than the largest record".into(),
            ));
        }
        Ok(())
    }
}

/// What opening the device found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// A valid checkpoint was used.
    pub checkpoint_used: bool,
    /// Segments found.
    pub segments: usize,
    /// Records replayed from the log after the checkpoint.
    pub records_replayed: u64,
    /// Bytes cut from a torn or corrupt tail of the last segment.
    pub torn_tail_bytes: u64,
    /// Sealed segments with corruption inside (records after it were lost).
    pub corrupt_segments: Vec<u64>,
    /// Copies of cut tails of the last segment that still held intact records behind a corrupt
    /// one (`seg-NNNNNNNNNN.log.corrupt-<offset>`, or `<file>.corrupt-<segment>-<offset>` for
    /// the single-file layout; see docs/format.md). The device never reads them; they are kept
    /// for inspection and manual recovery.
    pub set_aside: Vec<PathBuf>,
    /// O_DIRECT is in use.
    pub direct_io: bool,
    /// The single-file layout is in use.
    pub single_file: bool,
    /// A damaged superblock copy was rewritten from the other (single-file layout).
    pub superblock_repaired: bool,
    /// The newest checkpoint did not decode (a torn write) and an older one was used
    /// (single-file layout).
    pub checkpoint_fallback: bool,
}

/// Where one segment's bytes lie ([`FileDevice::segment_extents`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentExtent {
    /// Segment id.
    pub id: u64,
    /// The segment file, or the device file that holds the slot.
    pub path: PathBuf,
    /// Offset of the segment's byte 0 in that file.
    pub offset: u64,
    /// Bytes the segment holds now (the log end).
    pub len: u64,
    /// Bytes the segment may span (`u64::MAX` for a file of its own).
    pub cap: u64,
}

struct Segment {
    io: SegIo,
    place: SegPlace,
    /// Bytes appended (the logical end of the log in this segment).
    end: u64,
    /// Bytes of records the index (or a needed tombstone) still points at.
    live_bytes: u64,
}

/// An aligned buffer holding the log bytes of `seg` from segment offset `base`.
struct WriteBuf {
    seg: u64,
    io: SegIo,
    place: SegPlace,
    base: u64,
    len: usize,
    buf: AlignedBuf,
    /// The segment ends with this buffer: fdatasync it before anything later is written.
    seal: bool,
    last_seq: u64,
    /// Position in the flush order (1, 2, …), given when the buffer is queued.
    number: u64,
}

impl WriteBuf {
    /// Bytes a flush of this buffer writes: whole blocks covering its records and, in a slot,
    /// at least one zero byte after them (unless the slot ends there). So a log end in a slot
    /// is always followed by zeros, as in a file, and recovery tells a clean end (zeros) from a
    /// torn one although the slot holds older bytes further on.
    fn flush_len(&self, zero_past_end: bool) -> usize {
        let len = self.len as u64;
        if zero_past_end {
            align_up(len + 1).min(self.io.cap - self.base) as usize
        } else {
            align_up(len) as usize
        }
    }

    fn covers(&self, loc: &Loc) -> bool {
        loc.segment == self.seg
            && loc.offset >= self.base
            && loc.offset + loc.record_len() <= self.base + self.len as u64
    }

    fn record(&self, loc: &Loc) -> &[u8] {
        let at = (loc.offset - self.base) as usize;
        &self.buf[at..at + loc.record_len() as usize]
    }
}

struct State {
    index: BTreeMap<Vec<u8>, Loc>,
    tombs: HashMap<Vec<u8>, Loc>,
    segments: BTreeMap<u64, Segment>,
    active: WriteBuf,
    /// Buffers to write, oldest first; the first `in_flight` of them are being written.
    queued: VecDeque<Arc<WriteBuf>>,
    in_flight: usize,
    /// Number of the last buffer queued, and of the last one completely written.
    jobs_queued: u64,
    jobs_written: u64,
    spare: Vec<AlignedBuf>,
    next_seq: u64,
    next_segment: u64,
    written_seq: u64,
    durable_seq: u64,
    sync_target: u64,
    /// Segment and end offset known durable (for crash tests).
    durable_pos: (u64, u64),
    written_pos: (u64, u64),
    /// File written since the last fdatasync, if any.
    unsynced_file: Option<Arc<File>>,
    /// Free slots of the single-file layout (the lowest last).
    free_slots: Vec<u32>,
    used_bytes: u64,
    live_bytes: u64,
    appended_since_checkpoint: u64,
    failed: Option<&'static str>,
    /// A write or fdatasync failed: nothing more may be written (see `Shared::io_failed`).
    io_failed: bool,
    shutdown: bool,
    crashed: bool,
}

struct Shared {
    config: FileConfig,
    layout: Layout,
    direct: bool,
    /// Alignment of O_DIRECT reads (see `probe_direct`).
    read_align: u64,
    state: Mutex<State>,
    /// Wakes the flusher.
    flush_cv: Condvar,
    /// Wakes threads waiting for a flush, a sync or buffer space.
    done_cv: Condvar,
    /// Wakes the maintenance thread.
    maint_cv: Condvar,
    /// Wakes async stores waiting for buffer space (after every flush).
    space: tokio::sync::Notify,
    /// One compaction or checkpoint at a time.
    maint_lock: Mutex<()>,
    /// Holds the device's flock until close.
    lock: Mutex<Option<DeviceLock>>,
    /// What iterations with values read (`bulk.rs`).
    bulk: bulk::BulkCounters,
}

/// The log-structured file device. See the module docs.
pub struct FileDevice {
    shared: Arc<Shared>,
    /// io_uring for reads, where the kernel allows it; else tokio's blocking pool.
    ring: Option<crate::uring::ReadRing>,
    gate: QueueGate,
    recovery: RecoveryReport,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether flushes write a zero byte past the log end (see [`WriteBuf::flush_len`]).
    fn zero_past_end(&self) -> bool {
        self.layout.single().is_some()
    }

    fn check_failed(st: &State) -> Result<()> {
        match st.failed {
            // Closed by its owner: the device holds what it held, it is not faulty.
            Some("closed") => Err(DeviceError::Stopped {
                reason: "the device is closed",
            }),
            Some(reason) => Err(DeviceError::Failed { reason }),
            None => Ok(()),
        }
    }

    fn new_buf(&self, st: &mut State) -> AlignedBuf {
        st.spare
            .pop()
            .unwrap_or_else(|| AlignedBuf::new(self.config.write_buffer_bytes))
    }

    /// Moves the active buffer to the flush queue; the new active buffer starts with a copy of
    /// the last partial block, which is rewritten (same bytes, more records) by a later flush.
    fn rotate_active(&self, st: &mut State, seal: bool, next: Option<(u64, SegIo, SegPlace)>) {
        let mut buf = self.new_buf(st);
        let old = &mut st.active;
        let end = old.base + old.len as u64;
        let padded = old.flush_len(self.zero_past_end());
        old.buf[old.len..padded].fill(0);
        let (seg, io, place, base, carry) = match next {
            Some((seg, io, place)) => (seg, io, place, 0, 0),
            None => {
                let base = align_down(end);
                let carry = (end - base) as usize;
                let from = (base - old.base) as usize;
                buf[..carry].copy_from_slice(&old.buf[from..from + carry]);
                (old.seg, old.io.clone(), old.place.clone(), base, carry)
            }
        };
        let last_seq = old.last_seq;
        let mut new = WriteBuf {
            seg,
            io,
            place,
            base,
            len: carry,
            buf,
            seal: false,
            last_seq,
            number: 0,
        };
        std::mem::swap(&mut new, &mut st.active);
        new.seal = seal;
        st.jobs_queued += 1;
        new.number = st.jobs_queued;
        st.queued.push_back(Arc::new(new));
        self.flush_cv.notify_one();
    }

    /// Appends one record if there is room now; `Ok(None)` means wait for the flusher. A new
    /// segment in the single-file layout leaves `keep_slots` free slots for others (stores keep
    /// one for compaction, which must be able to copy before it frees).
    fn try_append(
        &self,
        st: &mut State,
        kind: RecordKind,
        key: &[u8],
        value: &[u8],
        keep_slots: usize,
    ) -> Result<Option<Loc>> {
        Self::check_failed(st)?;
        // Room is checked for the most padding a long value may need at any position.
        let len = record_len(key.len(), value.len()) as u64
            + if value.len() >= VALUE_ALIGN_MIN_BYTES {
                VALUE_ALIGN_BYTES - 1
            } else {
                0
            };
        if st.used_bytes + len > self.config.capacity_bytes {
            return Err(DeviceError::Capacity {
                needed: len,
                available: self.config.capacity_bytes.saturating_sub(st.used_bytes),
            });
        }
        let pos = st.active.base + st.active.len as u64;
        if pos + len > self.config.segment_bytes && pos > 0 {
            if st.queued.len() >= QUEUED_BUFFERS_MAX {
                return Ok(None);
            }
            let id = st.next_segment;
            let created = self.layout.create_segment(
                &mut st.free_slots,
                keep_slots,
                id,
                st.next_seq,
                self.direct,
            );
            let (io, place) = match created {
                Ok(Some(c)) => c,
                Ok(None) => {
                    return Err(DeviceError::Capacity {
                        needed: len,
                        available: self.config.segment_bytes.saturating_sub(pos),
                    })
                }
                Err(e) => {
                    if self.layout.single().is_some() {
                        // One descriptor for everything: see `io_failed`.
                        self.io_failed(st, "write failed");
                    }
                    return Err(e);
                }
            };
            st.next_segment += 1;
            st.segments.insert(
                id,
                Segment {
                    io: io.clone(),
                    place: place.clone(),
                    end: 0,
                    live_bytes: 0,
                },
            );
            self.rotate_active(st, true, Some((id, io, place)));
            self.maint_cv.notify_one();
        } else if st.active.len + len as usize >= st.active.buf.capacity() {
            // `>=`: a flush may write a zero byte past the records (`WriteBuf::flush_len`).
            if st.queued.len() >= QUEUED_BUFFERS_MAX {
                return Ok(None);
            }
            self.rotate_active(st, false, None);
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let a = &mut st.active;
        let at = a.len;
        let offset = a.base + at as u64;
        let pad = value_pad(offset, key.len(), value.len());
        let len = record_len(key.len(), value.len()) as u64 + pad as u64;
        let body_crc = encode_record(
            &mut a.buf[at..at + len as usize],
            kind,
            seq,
            key,
            value,
            pad,
        );
        let loc = Loc {
            segment: a.seg,
            offset,
            key_len: key.len() as u16,
            value_len: value.len() as u32,
            pad,
            seq,
            body_crc,
        };
        a.len += len as usize;
        a.last_seq = seq;
        let full = a.len >= self.config.flush_bytes;
        let seg = loc.segment;
        let s = st
            .segments
            .get_mut(&seg)
            .expect("active segment is registered");
        s.end += len;
        s.live_bytes += len;
        st.used_bytes += len;
        st.live_bytes += len;
        st.appended_since_checkpoint += len;
        if full {
            self.flush_cv.notify_one();
        }
        if st.appended_since_checkpoint >= self.config.checkpoint_interval_bytes
            && self.config.checkpoint_interval_bytes > 0
        {
            self.maint_cv.notify_one();
        }
        Ok(Some(loc))
    }

    /// Marks a record dead in the space accounting.
    fn kill(st: &mut State, loc: &Loc) {
        let len = loc.record_len();
        if let Some(s) = st.segments.get_mut(&loc.segment) {
            s.live_bytes -= len;
        }
        st.live_bytes -= len;
    }

    /// Store under the lock; `Ok(None)` means wait for buffer space and retry.
    fn store_locked(
        &self,
        st: &mut State,
        key: &[u8],
        value: &[u8],
        mode: StoreMode,
    ) -> Result<Option<()>> {
        Self::check_failed(st)?;
        mode.check(key, st.index.contains_key(key))?;
        let Some(loc) = self.try_append(st, RecordKind::Put, key, value, 1)? else {
            return Ok(None);
        };
        if let Some(old) = st.index.insert(key.to_vec(), loc) {
            Self::kill(st, &old);
        }
        if let Some(t) = st.tombs.remove(key) {
            Self::kill(st, &t);
        }
        Ok(Some(()))
    }

    /// Delete under the lock; `Ok(None)` means wait and retry.
    fn delete_locked(&self, st: &mut State, key: &[u8], must_exist: bool) -> Result<Option<bool>> {
        Self::check_failed(st)?;
        if !st.index.contains_key(key) {
            return if must_exist {
                Err(DeviceError::KeyNotFound { key: key.to_vec() })
            } else {
                Ok(Some(false))
            };
        }
        let Some(loc) = self.try_append(st, RecordKind::Delete, key, &[], 0)? else {
            return Ok(None);
        };
        let old = st.index.remove(key).expect("checked above");
        Self::kill(st, &old);
        if let Some(t) = st.tombs.insert(key.to_vec(), loc) {
            Self::kill(st, &t);
        }
        Ok(Some(true))
    }

    /// Runs `f` under the lock until it stops asking to wait.
    fn blocking<T>(
        &self,
        mut f: impl FnMut(&Shared, &mut State) -> Result<Option<T>>,
    ) -> Result<T> {
        let mut st = self.lock();
        loop {
            if let Some(v) = f(self, &mut st)? {
                return Ok(v);
            }
            self.flush_cv.notify_one();
            st = self.done_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits until every record appended before the call is durable.
    fn sync_blocking(&self) -> Result<()> {
        let mut st = self.lock();
        Self::check_failed(&st)?;
        let target = st.next_seq - 1;
        if st.durable_seq >= target {
            return Ok(());
        }
        st.sync_target = st.sync_target.max(target);
        self.flush_cv.notify_one();
        while st.durable_seq < target {
            Self::check_failed(&st)?;
            st = self.done_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        Ok(())
    }

    /// Stops the device after a failed write or fdatasync. Nothing more is written and no
    /// sync succeeds again: after a failed fdatasync the kernel may have dropped the dirty
    /// pages and cleared the error, so a retried fdatasync can succeed without the data being
    /// on disk ("fsyncgate"), and records written after a failed write would leave a hole in
    /// the log. Waiters see [`DeviceError::Failed`]; what was synced before stays readable
    /// after a reopen.
    fn io_failed(&self, st: &mut State, reason: &'static str) {
        st.failed = Some(reason);
        st.io_failed = true;
        st.unsynced_file = None;
        st.queued.clear();
        self.done_cv.notify_all();
        self.space.notify_waiters();
    }

    /// Writes a checkpoint of the index that is durable before the checkpoint is.
    fn checkpoint_blocking(&self) -> Result<()> {
        let _m = self.maint_lock.lock().unwrap_or_else(|e| e.into_inner());
        let ckpt = {
            let mut st = self.lock();
            Self::check_failed(&st)?;
            st.appended_since_checkpoint = 0;
            let mut tombstones: Vec<_> = st.tombs.iter().map(|(k, l)| (k.clone(), *l)).collect();
            // Sorted so equal states give equal checkpoint bytes (fixtures, diffs).
            tombstones.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            Checkpoint {
                seq: st.next_seq - 1,
                replay_segment: st.active.seg,
                replay_offset: st.active.base + st.active.len as u64,
                entries: st.index.iter().map(|(k, l)| (k.clone(), *l)).collect(),
                tombstones,
            }
        };
        // Everything the checkpoint reflects must be on disk before the checkpoint is.
        self.sync_blocking()?;
        let bytes = encode_checkpoint(&ckpt);
        self.layout
            .write_checkpoint(&bytes)
            .map(|_| ())
            .inspect_err(|e| self.single_file_failed(e))
    }

    /// In the single-file layout every write and fdatasync goes to one descriptor, so any that
    /// fails (a checkpoint, a slot header) stops the device as a failed log write does: the
    /// kernel reports a write-back error once per descriptor, and a later fdatasync of the log
    /// could succeed without the log's data on disk.
    fn single_file_failed(&self, e: &DeviceError) {
        if self.layout.single().is_some() && matches!(e, DeviceError::Io { .. }) {
            tracing::error!(error = %e, path = %self.layout.path().display(), "device write failed; device stops");
            let mut st = self.lock();
            self.io_failed(&mut st, "write failed");
        }
    }
}

/// A segment's name for errors: its file, or the device file and slot.
fn place_name(layout: &Layout, place: &SegPlace) -> String {
    match place {
        SegPlace::File(path) => path.display().to_string(),
        SegPlace::Slot { index, .. } => format!("{} slot {index}", layout.path().display()),
    }
}

impl FileDevice {
    /// Opens the device at `path`, recovering its index: a directory of segment files, or one
    /// regular file or block device (the layout is chosen by [`FileConfig::layout`]; by default
    /// by what the path is, a missing path becoming a directory). Missing storage is created
    /// and blank storage formatted.
    pub fn open(path: impl AsRef<Path>, mut config: FileConfig) -> Result<FileDevice> {
        config.validate()?;
        let opened = Layout::open(path.as_ref(), &mut config)?;
        let direct = opened.direct.is_some();
        let read_align = opened.direct.unwrap_or(ALIGN_BYTES as u64);
        let layout = opened.layout;
        let (state, recovery) = recover::recover(&layout, &config, direct)?;
        let io_uring = config.io_uring;
        let gate = QueueGate::new(config.queue_depth_max);
        let shared = Arc::new(Shared {
            config,
            layout,
            direct,
            read_align,
            state: Mutex::new(state),
            flush_cv: Condvar::new(),
            done_cv: Condvar::new(),
            maint_cv: Condvar::new(),
            space: tokio::sync::Notify::new(),
            maint_lock: Mutex::new(()),
            lock: Mutex::new(Some(opened.lock)),
            bulk: Default::default(),
        });
        let spawn = |name: &str, f: fn(Arc<Shared>)| {
            let sh = shared.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(sh))
                .map_err(|e| DeviceError::io("spawn device thread", e))
        };
        let threads = vec![
            spawn("rs-dev-flush", Shared::flusher)?,
            spawn("rs-dev-maint", Shared::maintenance)?,
        ];
        let ring = if io_uring {
            crate::uring::ReadRing::new(gate.depth_max())
        } else {
            None
        };
        if io_uring && ring.is_none() {
            tracing::warn!("io_uring unavailable; reads use the blocking thread pool");
        }
        Ok(FileDevice {
            shared,
            ring,
            gate,
            recovery,
            threads: Mutex::new(threads),
        })
    }

    /// What opening the device found and repaired.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// What iterations with values have read since the device opened.
    pub fn bulk_reads(&self) -> BulkReads {
        self.shared.bulk.get()
    }

    /// Whether O_DIRECT is in use.
    pub fn direct_io(&self) -> bool {
        self.shared.direct
    }

    /// Whether reads go through io_uring.
    pub fn io_uring(&self) -> bool {
        self.ring.is_some()
    }

    /// The device directory, or the device file of the single-file layout.
    pub fn dir(&self) -> &Path {
        self.shared.layout.path()
    }

    /// Whether the whole device is one file or block device (else a directory).
    pub fn single_file(&self) -> bool {
        self.shared.layout.single().is_some()
    }

    /// Where each segment's bytes lie, in id order (for tests and tools that inspect or
    /// damage an image).
    pub fn segment_extents(&self) -> Vec<SegmentExtent> {
        let st = self.shared.lock();
        st.segments
            .iter()
            .map(|(&id, s)| SegmentExtent {
                id,
                path: match &s.place {
                    SegPlace::File(p) => p.clone(),
                    SegPlace::Slot { .. } => self.shared.layout.path().to_path_buf(),
                },
                offset: s.io.base,
                len: s.end,
                cap: s.io.cap,
            })
            .collect()
    }

    /// Why the device's files no longer hold what it wrote, if they do not: its directory or
    /// file is gone, or a segment file is missing or shorter than the log made durable in it
    /// (removed or truncated under the running device). An open file keeps working after it
    /// is unlinked, so writes alone would never notice; the array checks this periodically.
    /// Blocking (file metadata).
    pub fn vanished(&self) -> Option<String> {
        use std::os::unix::fs::FileTypeExt;
        let root = self.dir();
        let meta = match std::fs::metadata(root) {
            Ok(m) => m,
            Err(e) => return Some(format!("{} is gone ({e})", root.display())),
        };
        let (durable_seg, durable_off) = self.durable_position();
        for ext in self.segment_extents() {
            let durable_len = match ext.id.cmp(&durable_seg) {
                std::cmp::Ordering::Less => ext.len,
                std::cmp::Ordering::Equal => durable_off.min(ext.len),
                std::cmp::Ordering::Greater => continue,
            };
            let m = if ext.path == root {
                meta.clone()
            } else {
                match std::fs::metadata(&ext.path) {
                    Ok(m) => m,
                    Err(e) => {
                        return Some(format!("segment file {} is gone ({e})", ext.path.display()))
                    }
                }
            };
            // A block device reports no length; its size cannot shrink under us.
            if !m.file_type().is_block_device() && m.len() < ext.offset + durable_len {
                return Some(format!(
                    "{} holds {} bytes, less than the {} written to it",
                    ext.path.display(),
                    m.len(),
                    ext.offset + durable_len
                ));
            }
        }
        None
    }

    /// `(segment id, offset)`: the log up to here is known durable. Bytes past it may be lost
    /// or torn by a power failure (crash tests tear exactly there).
    pub fn durable_position(&self) -> (u64, u64) {
        self.shared.lock().durable_pos
    }

    /// Writes a checkpoint now (also done in the background and on close).
    pub fn checkpoint_blocking(&self) -> Result<()> {
        self.shared.checkpoint_blocking()
    }

    /// Simulates a process crash: buffered, unwritten records are dropped, nothing more is
    /// written, no checkpoint is taken, and every later operation fails. A write already
    /// handed to the OS may or may not complete, as in a real crash.
    pub fn crash(&self) {
        {
            let mut st = self.shared.lock();
            st.crashed = true;
            st.shutdown = true;
            st.failed = Some("crashed");
            st.active.len = 0;
        }
        self.stop_threads();
        self.release_lock();
    }

    fn release_lock(&self) {
        self.shared
            .lock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    fn stop_threads(&self) {
        self.shared.space.notify_waiters();
        self.shared.flush_cv.notify_all();
        self.shared.maint_cv.notify_all();
        self.shared.done_cv.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }

    /// Flushes, syncs, checkpoints and stops the device's threads. Dropping the device does the
    /// same; call this to see the error.
    pub fn close_blocking(&self) -> Result<()> {
        let already = self.shared.lock().shutdown;
        if already {
            return Ok(());
        }
        let r = self
            .shared
            .sync_blocking()
            .and_then(|()| self.shared.checkpoint_blocking());
        {
            // Failed before the threads are joined: a background compaction waiting in
            // `sync_blocking`, or appending copies, sees it and stops instead of waiting for a
            // flusher that has already exited.
            let mut st = self.shared.lock();
            st.shutdown = true;
            st.failed.get_or_insert("closed");
        }
        self.stop_threads();
        self.release_lock();
        r
    }

    /// Runs `f` under the state lock until it finds room in the write buffers (`Some`); while
    /// they are full it wakes the flusher and waits without blocking the executor.
    async fn with_buffer_space<T>(
        &self,
        mut f: impl FnMut(&Shared, &mut State) -> Result<Option<T>>,
    ) -> Result<T> {
        loop {
            // Registered before trying, so a flush finishing in between is not missed.
            let space = self.shared.space.notified();
            tokio::pin!(space);
            space.as_mut().enable();
            {
                let mut st = self.shared.lock();
                if let Some(r) = f(&self.shared, &mut st)? {
                    return Ok(r);
                }
                self.shared.flush_cv.notify_one();
            }
            space.await;
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Shared) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let sh = self.shared.clone();
        tokio::task::spawn_blocking(move || f(&sh))
            .await
            .map_err(|e| {
                if e.is_cancelled() {
                    DeviceError::Stopped {
                        reason: "the runtime is shutting down",
                    }
                } else {
                    DeviceError::Failed {
                        reason: "device worker panicked",
                    }
                }
            })?
    }
}

impl Drop for FileDevice {
    fn drop(&mut self) {
        if let Err(e) = self.close_blocking() {
            tracing::warn!(error = %e, "closing file device");
        }
    }
}

#[async_trait]
impl Device for FileDevice {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.shared.config.limits.check(key, value)?;
        let _slot = self.gate.enter().await;
        self.with_buffer_space(|sh, st| sh.store_locked(st, key, value, mode))
            .await
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.read(key, range, false).await
    }

    async fn retrieve_part(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.read(key, range, true).await
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.shared.config.limits.check_key(key)?;
        let _slot = self.gate.enter().await;
        self.with_buffer_space(|sh, st| sh.delete_locked(st, key, must_exist))
            .await
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        for k in keys {
            self.shared.config.limits.check_key(k)?;
        }
        let _slot = self.gate.enter().await;
        let st = self.shared.lock();
        Shared::check_failed(&st)?;
        Ok(keys.iter().map(|k| st.index.contains_key(*k)).collect())
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        let _slot = self.gate.enter().await;
        let (listed, more) = {
            let st = self.shared.lock();
            Shared::check_failed(&st)?;
            let (sel, more) = iter_range(&st.index, req);
            (
                sel.into_iter()
                    .map(|(k, loc)| (k.clone(), *loc))
                    .collect::<Vec<_>>(),
                more,
            )
        };
        if !req.with_values {
            let entries = listed
                .into_iter()
                .map(|(key, _)| IterEntry { key, value: None })
                .collect();
            return Ok(IterBatch { entries, more });
        }
        // Read in log order, neighbours together (`bulk.rs`).
        let entries = self.blocking(move |sh| sh.values_blocking(listed)).await?;
        Ok(IterBatch { entries, more })
    }

    async fn info(&self) -> Result<DeviceInfo> {
        let st = self.shared.lock();
        Ok(DeviceInfo {
            capacity_bytes: self.shared.config.capacity_bytes,
            used_bytes: st.used_bytes,
            live_bytes: st.live_bytes,
            key_count: st.index.len() as u64,
            limits: self.shared.config.limits,
            optimal_value_bytes: 64 << 10,
            queue_depth_max: self.gate.depth_max(),
        })
    }

    async fn sync(&self) -> Result<()> {
        {
            let st = self.shared.lock();
            Shared::check_failed(&st)?;
            if st.durable_seq + 1 >= st.next_seq {
                return Ok(());
            }
        }
        self.blocking(|sh| sh.sync_blocking()).await
    }

    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats> {
        self.blocking(move |sh| sh.compact_blocking(budget_bytes, 0.0))
            .await
    }

    fn limits(&self) -> Limits {
        self.shared.config.limits
    }

    /// The index of live keys and of tombstones (each a key on the heap and its location).
    fn memory_bytes(&self) -> u64 {
        use crate::memory::{btree_entry, hash_entry, heap};
        let st = self.shared.lock();
        let slot = std::mem::size_of::<Vec<u8>>() + std::mem::size_of::<Loc>();
        let index: u64 = st
            .index
            .keys()
            .map(|k| btree_entry(slot) + heap(k.len()))
            .sum();
        let tombs: u64 = st
            .tombs
            .keys()
            .map(|k| hash_entry(slot) + heap(k.len()))
            .sum();
        index + tombs
    }
}
