//! Read/write separation carried out: each device is wrapped in a [`Separated`] device that
//! follows the role schedule. A write addressed to a device in the window (a reader) waits in
//! its bounded write buffer; a flusher task writes the buffer out, in arrival order, while the
//! device is a writer. Reads answer from the buffer first (it holds the newest data). The
//! reliability manager above sees ordinary devices and asks [`Rails::read_plan`] where to read.
//!
//! Durability ([`Durability`], docs/rails.md): with [`Durability::Journal`] (the default) a
//! buffered write is acknowledged only once a journal record of it (target device, journal tag,
//! key, value; format in [`crate::journal`]) is stored on a writer-role device, and
//! [`Separated::sync`] syncs the device and the devices holding its journal records stored
//! since their last sync. So after `sync` of device d every write acknowledged to d survives a power failure:
//! on d itself, or in the journal. [`Rails::recover`] (run before the first operation is served)
//! replays the journal records above each device's watermark into it, in tag order.
//! [`Durability::Memory`] keeps buffered writes only in memory: a power failure loses the ones
//! not yet flushed, synced or not.
//!
//! Why a replay neither puts stale data over newer data nor skips a write it needs. Every
//! buffered write to d gets a tag from d's counter, under the buffer lock, in arrival order, and
//! its record is stored before the write is acknowledged. The flusher applies the buffer in
//! arrival order; now and then (a checkpoint) it syncs d, then stores on d a watermark W: one
//! below the oldest tag d has not had, that of a buffered write not yet applied or of an older
//! write to the same key that such a write replaced before the older one was applied. Only
//! then do the applied writes leave the buffer. So every tag <= W belongs to a write d holds
//! durably, or that a write d holds durably replaced; W is stored after the sync, so a W that
//! survives a crash implies all of that. Recovery replays the tags > W in order: per key the
//! last one replayed is its newest journalled write. A write goes straight to a writer only
//! when its buffer is empty and the stored W covers every tag handed out: a later sync
//! persists W with it, so no record of an older write to that key is replayed over it. A write
//! that overtakes a full buffer (partial separation) is journalled with a fresh tag first and
//! lands, under the flush lock, before the older buffered write on its key is dropped, so a
//! replay ends with it too. A holder deletes journal records, while it writes, once the
//! watermark covering them is durable (after a later sync of d). All this assumes only that
//! one store is atomic and that a sync persists what was stored before it, not the order in
//! which a device persists unsynced writes.

use crate::buffer::{Pending, WriteBuffer};
use crate::journal::{self, RECORD_OVERHEAD_BYTES};
use crate::plan::{ReadPlan, ScheduledReads};
use crate::schedule::{Role, Schedule, ScheduleConfig};
use async_trait::async_trait;
use railstore_device::{
    iterate_all, CompactStats, Device, DeviceError, DeviceInfo, IterBatch, IterEntry, IterRequest,
    Limits, ReadRange, Retrieved, StoreMode,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;

mod recovery;

/// How acknowledged writes to reader-role devices survive a power failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A buffered write is acknowledged once it is in memory. A power failure loses every
    /// buffered write not yet flushed, synced or not (Flash on Rails §4.2.3: up to T·w per
    /// device); only the redundancy above can bring such a piece back.
    Memory,
    /// A buffered write is also recorded in a journal on a writer-role device before it is
    /// acknowledged; `sync` makes the record durable and recovery replays it. Costs one extra
    /// write (key, value and 28 bytes) on a writer per buffered write, one sync and one small
    /// watermark write per checkpoint of the flusher, and the record's later deletion.
    #[default]
    Journal,
}

/// How separation runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RailsConfig {
    /// The role schedule.
    pub schedule: ScheduleConfig,
    /// Separate at all; off passes every operation straight through (the "mixed" baseline on
    /// the same code path).
    pub separation: bool,
    /// Bound of each device's write buffer.
    pub write_buffer_bytes_max: u64,
    /// When a reader's buffer is full: write to the device anyway (partial separation) instead
    /// of making the writer wait (back-pressure).
    pub partial_when_full: bool,
    /// Live bytes a writer-role device may copy per compaction pass of its flusher (0: never
    /// compact from here).
    pub compact_budget_bytes: u64,
    /// Size the window from the load measured each frame (Rails §4.3.1); `None` keeps it at
    /// the schedule's minimum.
    pub adaptive: Option<AdaptiveWindow>,
    /// What a power failure may take (buffered writes in memory only, or journalled).
    pub durability: Durability,
    /// Spread the writes a non-writer buffers over its stint (Rails §4.2.2: the buffer holds
    /// what arrives while the device reads): once its buffer holds more than an eighth of its
    /// bound, a write waits until the stint so far has earned room for it, at a rate that
    /// reaches seven eighths of the bound as the stint ends (the last eighth takes what
    /// arrives while the flush that follows makes room).
    /// A steady load then flows at what the buffers sustain instead of filling them at full
    /// speed and stopping every writer until the stint ends and the flush has made room. Off, or with
    /// `partial_when_full` (whose writes never wait for a buffer): writers run until the
    /// buffer is full, then wait (or go partial).
    pub pace_buffered_writes: bool,
    /// Bound of the journal records kept for one device's writes, in bytes of records (key,
    /// value and overhead), from the write until the holder deletes the record. Superseded
    /// writes keep their records until the device's watermark passes them, so this also bounds
    /// overwrites of buffered keys. Above it writers wait (back-pressure) — also with
    /// `partial_when_full`, which relieves only the write buffer. One record is always let in.
    pub journal_bytes_max: u64,
    /// How long a device that turns writer lets the reads still in flight on it finish before
    /// it writes (Rails §4.4: a write queued with them could stall them behind a program or
    /// GC); `Duration::ZERO` writes at once. Meanwhile its writes are buffered. At most half
    /// the frame.
    pub switch_read_wait: std::time::Duration,
    /// Journal records kept of each buffered write, on distinct devices. A power failure
    /// loses every buffer, so a buffered piece then survives as long as one device holding its
    /// record does: with `t + 1` copies it survives any `t` device losses on top of the power
    /// failure. A write waits (like a full buffer) until it has its copies, or until no other
    /// healthy device is left to take one.
    pub journal_copies: usize,
}

/// What one device sustains, for sizing the window from measured load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveWindow {
    /// Read bytes/s one device serves.
    pub read_bytes_per_s: f64,
    /// Write bytes/s one device absorbs.
    pub write_bytes_per_s: f64,
}

impl RailsConfig {
    /// Separation on with `schedule`, 256 MiB buffers, paced buffered writes, back-pressure,
    /// compaction while writing, buffered writes journalled (512 MiB of journal per device).
    pub fn new(schedule: ScheduleConfig) -> RailsConfig {
        RailsConfig {
            schedule,
            separation: true,
            write_buffer_bytes_max: 256 << 20,
            partial_when_full: false,
            compact_budget_bytes: 64 << 20,
            adaptive: None,
            durability: Durability::Journal,
            journal_bytes_max: 512 << 20,
            pace_buffered_writes: true,
            switch_read_wait: std::time::Duration::from_millis(20),
            journal_copies: 1,
        }
    }
}

/// Counters of one device, readable while running.
#[derive(Debug, Default)]
pub struct DeviceCounters {
    /// Writes buffered because the device was a reader (or guarding, or still flushing).
    pub buffered_ops: AtomicU64,
    /// Writes that went straight to the device as a writer.
    pub direct_ops: AtomicU64,
    /// Writes sent to a reader because its buffer was full (partial separation).
    pub partial_ops: AtomicU64,
    /// Operations flushed from the buffer.
    pub flushed_ops: AtomicU64,
    /// Value bytes flushed.
    pub flushed_bytes: AtomicU64,
    /// Reads answered from the buffer.
    pub buffer_reads: AtomicU64,
    /// Times a writer waited for buffer (or journal) room.
    pub backpressure_waits: AtomicU64,
    /// Times a write to this device waited for its share of the stint
    /// ([`RailsConfig::pace_buffered_writes`]).
    pub paced_waits: AtomicU64,
    /// Nanoseconds those waits lasted, summed.
    pub paced_ns: AtomicU64,
    /// Times the device turned writer with reads still in flight, and let them finish first.
    pub switch_read_waits: AtomicU64,
    /// Nanoseconds those waits lasted, summed.
    pub switch_read_wait_ns: AtomicU64,
    /// Compaction passes run while a writer.
    pub compactions: AtomicU64,
    /// Value bytes read through this device (buffer hits included).
    pub read_bytes: AtomicU64,
    /// Value bytes written to this device (buffered or direct).
    pub written_bytes: AtomicU64,
    /// Journal records written for this device's writes (on other devices, or on itself while
    /// it writes behind a backlog).
    pub journal_records: AtomicU64,
    /// Bytes of those records (key, value and overhead).
    pub journal_bytes: AtomicU64,
    /// Journal records of this device deleted (their watermark was durable).
    pub journal_deleted: AtomicU64,
    /// Journal records replayed into this device at recovery.
    pub journal_replayed: AtomicU64,
    /// Times a write waited for a writer-role device to journal on (every writer was guarding).
    pub journal_waits: AtomicU64,
    /// Times no other device could hold a journal record, so this device took its backlog and
    /// the write at once, whatever its role.
    pub journal_fallbacks: AtomicU64,
    /// Writes journalled on fewer devices than `journal_copies` because every other healthy
    /// device already held a copy (an array too small or degraded for the copies asked).
    pub journal_short: AtomicU64,
    /// Watermarks stored on this device (checkpoints of its flusher).
    pub watermarks: AtomicU64,
}

/// A snapshot of one device's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSnapshot {
    /// Its role now.
    pub role: Role,
    /// Bytes waiting in its buffer.
    pub buffer_bytes: u64,
    /// Keys waiting in its buffer.
    pub buffer_keys: usize,
    /// Bytes of journal records kept for its writes (reserved or stored, not yet deleted).
    pub journal_bytes: u64,
}

/// What [`Rails::recover`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalRecovery {
    /// Journal records found (a record stored on two devices counts twice).
    pub records_found: u64,
    /// Records replayed into their device.
    pub replayed: u64,
    /// Records at or below their device's watermark: already on it, not replayed.
    pub stale: u64,
    /// Records (or odd reserved keys) that failed their checks and were skipped.
    pub corrupt: u64,
    /// Records naming a device beyond the array.
    pub orphaned: u64,
    /// Records deleted once their device's new watermark was durable.
    pub deleted: u64,
    /// Records replayed, per device.
    pub replayed_per_device: Vec<u64>,
    /// Devices that failed during recovery (their records, and writes to them, were skipped).
    pub failed_devices: Vec<usize>,
}

struct DeviceState {
    inner: Arc<dyn Device>,
    /// The device failed: its buffer was dropped and every operation fails fast, so writers
    /// never wait on a buffer nobody will flush (its data comes back by rebuild).
    failed: AtomicBool,
    buffer: Mutex<WriteBuffer>,
    /// Wakes the flusher (new work, a role change it computed, or journal records to delete).
    work: Notify,
    /// Wakes writers waiting for buffer or journal room.
    room: Notify,
    counters: DeviceCounters,
    /// Held while a batch is applied, a checkpoint is taken, or a write overtakes the buffer:
    /// one at a time, so order per key holds and a checkpoint sees no write half done.
    flush_lock: tokio::sync::Mutex<()>,
    /// Held across a sync of the device: one at a time, and a caller that waited for one
    /// finds what it covered.
    sync_lock: tokio::sync::Mutex<()>,
    /// Counts the stores that a sync of the device must make durable, each once it has
    /// returned: journal records, direct writes, or a write whose journal record it let go
    /// because its stored watermark covers it. Buffered writes it applied need no sync: their
    /// records do.
    dirty_seq: AtomicU64,
    /// The `dirty_seq` that the last completed sync covers: the device is clean while it is
    /// at least `dirty_seq`.
    synced_seq: AtomicU64,
    /// The next journal tag of writes to this device (changed under the buffer lock).
    next_tag: AtomicU64,
    /// The watermark last stored on this device.
    wm_stored: AtomicU64,
    /// The watermark known durable on this device (`u64::MAX` once it failed: its records are
    /// of no more use).
    wm_durable: AtomicU64,
    /// Bytes of journal records for this device's writes, reserved or stored, not deleted.
    journal_bytes: AtomicU64,
    /// Journal records this device holds: (target, tag) -> bytes.
    held: Mutex<BTreeMap<(u32, u64), u64>>,
    /// Bytes of `held`.
    held_bytes: AtomicU64,
    /// Tags of this device's writes whose journal record was on a device that failed: the
    /// next sync journals those still buffered again.
    lost: Mutex<Vec<u64>>,
    /// Reads at the device now, and their wake-up for a flusher waiting on them.
    reads_in_flight: AtomicUsize,
    reads_done: Notify,
    /// Writes may go straight to the device: false from the flusher's first pass in a
    /// non-writer stint until the reads in flight at the start of the next writer stint have
    /// finished (`RailsConfig::switch_read_wait`).
    writes_released: AtomicBool,
    /// A replacement being rebuilt: it serves no reads, so it writes whatever its colour's
    /// role ([`Rails::readmit`] to [`Rails::rebuilt`]).
    rebuilding: AtomicBool,
}

/// Buffered operations a flusher sends to its device at once.
const FLUSH_BATCH_OPS_MAX: usize = 16;
/// Journal records a holder deletes at once.
const DELETE_BATCH_OPS_MAX: usize = 16;
/// Operations a flusher applies between two checkpoints (sync, then watermark); a checkpoint
/// also comes once the applied operations hold a quarter of the write buffer's bound (they
/// keep their room until then), and at the end of a pass.
const CHECKPOINT_OPS_MAX: usize = 256;

/// What [`Rails::new`] returns: the shared state and the wrapped devices.
pub type RailsAndDevices = (Arc<Rails>, Vec<Arc<dyn Device>>);

/// Shared state of separation over an array.
pub struct Rails {
    cfg: RailsConfig,
    /// Frames in which the writes needed more writers than the smallest window leaves
    /// (W > W_sep: separation can only be partial).
    partial_frames: AtomicU64,
    plan: Arc<ScheduledReads>,
    start: Instant,
    devices: Vec<Arc<DeviceState>>,
    /// The journal replay, run once before the first operation.
    recovery: tokio::sync::OnceCell<JournalRecovery>,
    /// Where the search for a journal device starts (spreads ties).
    journal_rr: AtomicUsize,
    /// The smallest value limit of any device: every journal record must fit it.
    journal_value_bytes_max: usize,
    /// Told when rails first fails a device (to record it durably).
    on_failure: std::sync::RwLock<Option<FailureListener>>,
    /// Devices replaced by an empty one for a rebuild: journal records addressed to them are
    /// not replayed (they belong to the device replaced) but dropped.
    replaced: Mutex<Vec<usize>>,
}

/// Called with a device's index when it first fails (to record that durably).
pub type FailureListener = Arc<dyn Fn(usize) + Send + Sync>;

impl std::fmt::Debug for Rails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rails")
            .field("cfg", &self.cfg)
            .field("devices", &self.devices.len())
            .finish()
    }
}

/// Whether an error means the device is gone (fail-stop), not that one operation failed.
fn fatal(e: &DeviceError) -> bool {
    matches!(e, DeviceError::Failed { .. } | DeviceError::Io { .. })
}

fn reserved_key(key: &[u8]) -> DeviceError {
    DeviceError::Config(format!(
        "key {:02x?} starts with 0x{:02x}, which rails reserves for its journal (docs/rails.md)",
        &key[..key.len().min(8)],
        journal::RESERVED_KEY_BYTE
    ))
}

impl Rails {
    /// Wraps `devices` (device d has colour `colour_of[d]`) and starts one flusher task per
    /// device; call inside a tokio runtime. Returns the shared state and the wrapped devices to
    /// hand to the reliability manager. The first operation on any wrapped device first runs
    /// [`Rails::recover`]; call it yourself to see its report or its errors (or use
    /// [`Rails::open`]). Devices must come in the same order on every start: journal records
    /// name their device by index.
    pub fn new(
        cfg: RailsConfig,
        devices: Vec<Arc<dyn Device>>,
        colour_of: Vec<usize>,
    ) -> Result<RailsAndDevices, DeviceError> {
        if devices.len() != colour_of.len() {
            return Err(DeviceError::Config(format!(
                "{} devices but {} colours",
                devices.len(),
                colour_of.len()
            )));
        }
        if let Some(c) = colour_of.iter().find(|&&c| c >= cfg.schedule.colours) {
            return Err(DeviceError::Config(format!(
                "colour {c} outside the schedule's {} colours",
                cfg.schedule.colours
            )));
        }
        if cfg.switch_read_wait > cfg.schedule.frame / 2 {
            return Err(DeviceError::Config(format!(
                "switch_read_wait {:?} is more than half the frame {:?}: a writer stint could \
                 pass waiting",
                cfg.switch_read_wait, cfg.schedule.frame
            )));
        }
        // With the journal, every device may hold journal records and a watermark.
        let journalled = cfg.separation && cfg.durability == Durability::Journal;
        for (d, dev) in devices.iter().enumerate().filter(|_| journalled) {
            let l = dev.limits();
            if l.key_bytes_min > journal::WATERMARK_KEY_BYTES
                || l.key_bytes_max < journal::JOURNAL_KEY_BYTES
            {
                return Err(DeviceError::Config(format!(
                    "device {d}: keys of {}-{} B cannot hold rails' {} and {} B journal keys",
                    l.key_bytes_min,
                    l.key_bytes_max,
                    journal::WATERMARK_KEY_BYTES,
                    journal::JOURNAL_KEY_BYTES
                )));
            }
            if l.value_bytes_max <= RECORD_OVERHEAD_BYTES + l.key_bytes_max {
                return Err(DeviceError::Config(format!(
                    "device {d}: values of at most {} B leave no room for a journal record",
                    l.value_bytes_max
                )));
            }
        }
        let journal_value_bytes_max = devices
            .iter()
            .map(|d| d.limits().value_bytes_max)
            .min()
            .unwrap_or(0);
        let schedule =
            Schedule::new(cfg.schedule).map_err(|e| DeviceError::Config(e.to_string()))?;
        let start = Instant::now();
        let plan = Arc::new(ScheduledReads::new(schedule, colour_of, move || {
            start.elapsed().as_nanos() as u64
        }));
        let states: Vec<Arc<DeviceState>> = devices
            .into_iter()
            .map(|inner| {
                Arc::new(DeviceState {
                    inner,
                    failed: AtomicBool::new(false),
                    buffer: Mutex::new(WriteBuffer::new(cfg.write_buffer_bytes_max)),
                    work: Notify::new(),
                    room: Notify::new(),
                    counters: DeviceCounters::default(),
                    flush_lock: tokio::sync::Mutex::new(()),
                    sync_lock: tokio::sync::Mutex::new(()),
                    dirty_seq: AtomicU64::new(0),
                    synced_seq: AtomicU64::new(0),
                    next_tag: AtomicU64::new(1),
                    wm_stored: AtomicU64::new(0),
                    wm_durable: AtomicU64::new(0),
                    journal_bytes: AtomicU64::new(0),
                    held: Mutex::new(BTreeMap::new()),
                    held_bytes: AtomicU64::new(0),
                    lost: Mutex::new(Vec::new()),
                    reads_in_flight: AtomicUsize::new(0),
                    reads_done: Notify::new(),
                    writes_released: AtomicBool::new(true),
                    rebuilding: AtomicBool::new(false),
                })
            })
            .collect();
        let rails = Arc::new(Rails {
            cfg,
            partial_frames: AtomicU64::new(0),
            plan,
            start,
            devices: states,
            recovery: tokio::sync::OnceCell::new(),
            journal_rr: AtomicUsize::new(0),
            journal_value_bytes_max,
            on_failure: std::sync::RwLock::new(None),
            replaced: Mutex::new(Vec::new()),
        });
        let wrapped = (0..rails.devices.len())
            .map(|d| {
                if rails.cfg.separation {
                    tokio::spawn(flusher(Arc::downgrade(&rails), d));
                }
                Arc::new(Separated {
                    rails: rails.clone(),
                    d,
                }) as Arc<dyn Device>
            })
            .collect();
        if rails.cfg.separation && rails.cfg.adaptive.is_some() {
            tokio::spawn(window_controller(Arc::downgrade(&rails)));
        }
        Ok((rails, wrapped))
    }

    /// [`Rails::new`], then [`Rails::recover`]: the devices are ready to serve when it returns.
    pub async fn open(
        cfg: RailsConfig,
        devices: Vec<Arc<dyn Device>>,
        colour_of: Vec<usize>,
    ) -> Result<(Arc<Rails>, Vec<Arc<dyn Device>>, JournalRecovery), DeviceError> {
        let (rails, wrapped) = Rails::new(cfg, devices, colour_of)?;
        let report = rails.recover().await?;
        Ok((rails, wrapped, report))
    }

    /// Replays the journal left by an earlier run (a power failure) before anything is served:
    /// on every device, the records above the device's watermark, in tag order; then syncs,
    /// moves the watermarks past them, and deletes the journal. Runs once (the first operation
    /// on a wrapped device runs it too); later calls return the same report. Ignores roles: it
    /// runs before reads are served. Refuses to run (every operation then fails with the same
    /// error) when a watermark is corrupt or names another device (devices reordered).
    pub async fn recover(&self) -> Result<JournalRecovery, DeviceError> {
        self.recovery
            .get_or_try_init(|| self.replay_journal())
            .await
            .cloned()
    }

    async fn ready(&self) -> Result<(), DeviceError> {
        if self.recovery.initialized() {
            return Ok(());
        }
        self.recover().await.map(|_| ())
    }

    /// Where reads should go now: the window's devices (every device with separation off).
    pub fn read_plan(&self) -> Arc<dyn ReadPlan> {
        if self.cfg.separation {
            self.plan.clone()
        } else {
            Arc::new(crate::plan::AnyHealthy)
        }
    }

    /// Nanoseconds since separation started (virtual under a paused-clock runtime).
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The role of device `d` now: its colour's, except for a replacement being rebuilt, which
    /// writes throughout (it serves no reads that writes could slow).
    pub fn role(&self, d: usize) -> Role {
        if self.cfg.separation && !self.devices[d].rebuilding.load(Ordering::SeqCst) {
            self.plan.role(d)
        } else {
            Role::Writer
        }
    }

    /// Device `d`, readmitted by [`Rails::readmit`], holds everything again and serves reads:
    /// from now on it follows its colour's role.
    pub fn rebuilt(&self, d: usize) {
        let st = &self.devices[d];
        if st.rebuilding.swap(false, Ordering::SeqCst) {
            tracing::info!(device = d, "rebuilt device follows the schedule again");
            st.work.notify_one();
        }
    }

    /// Window size in the current frame.
    pub fn window_size(&self) -> usize {
        let now = self.now_ns();
        self.plan.with_schedule(|s| s.window_size(s.frame_at(now)))
    }

    /// Frames so far whose write load exceeded what separation sustains.
    pub fn partial_frames(&self) -> u64 {
        self.partial_frames.load(Ordering::Relaxed)
    }

    /// The configuration.
    pub fn config(&self) -> &RailsConfig {
        &self.cfg
    }

    /// Counters of device `d`.
    pub fn counters(&self, d: usize) -> &DeviceCounters {
        &self.devices[d].counters
    }

    /// Role, buffer and journal of every device now.
    pub fn snapshot(&self) -> Vec<DeviceSnapshot> {
        (0..self.devices.len())
            .map(|d| {
                let st = &self.devices[d];
                let b = st.buffer.lock().unwrap();
                DeviceSnapshot {
                    role: self.role(d),
                    buffer_bytes: b.bytes(),
                    buffer_keys: b.len(),
                    journal_bytes: st.journal_bytes.load(Ordering::SeqCst),
                }
            })
            .collect()
    }

    /// Writes every buffer out now, whatever the roles (shutdown, or before a crash-safe
    /// checkpoint), syncs, and deletes the journal records this made useless; reads may see
    /// write latency meanwhile.
    pub async fn drain(&self) -> Result<(), DeviceError> {
        self.ready().await?;
        for d in 0..self.devices.len() {
            match self.flush_all(d, None).await {
                // A device that failed has nothing left to flush (its buffer is dropped for
                // the rebuild); the others still are.
                Err(_) if self.is_failed(d) => {}
                r => r?,
            }
        }
        if self.journalled() {
            for w in 0..self.devices.len() {
                if self.is_failed(w) {
                    continue;
                }
                match self.delete_dead_records(w, None).await {
                    Err(_) if self.is_failed(w) => {}
                    r => r?,
                }
            }
        }
        Ok(())
    }

    /// When a write of `op` to device `d` may enter its buffer, if not now
    /// ([`RailsConfig::pace_buffered_writes`]): the buffer may hold an eighth of its bound at
    /// once, and more in proportion to the time its stint has run.
    fn paced_until(&self, d: usize, op: &Pending) -> Option<u64> {
        if !self.cfg.pace_buffered_writes || self.cfg.partial_when_full {
            return None;
        }
        let now = self.now_ns();
        let (start, end) = self.plan.buffering_stint(d, now)?;
        let (held, max) = {
            let b = self.devices[d].buffer.lock().unwrap();
            (b.bytes(), b.bytes_max())
        };
        let len = match op {
            Pending::Store(v) => v.len() as u64,
            // Small, and they make room where they replace a buffered value.
            Pending::Delete => return None,
        };
        let slack = max / 8;
        let want = held + len;
        if want <= slack || held == 0 {
            return None;
        }
        // Aim at the bound less another eighth, for what arrives after the stint while the
        // flush makes room (its first checkpoint frees up to a quarter of the bound).
        let span = u128::from(end - start);
        let aim = (max - slack) as u128;
        if aim <= slack as u128 {
            return None;
        }
        let share = |t: u64| slack as u128 + (aim - slack as u128) * u128::from(t - start) / span;
        if want as u128 <= share(now) {
            return None;
        }
        // The instant the share reaches `want` (the stint's end at the latest: the device
        // then writes, and a full buffer waits for room as before).
        let at = start as u128
            + (want as u128).min(aim).saturating_sub(slack as u128) * span / (aim - slack as u128);
        Some((at.min(u128::from(end)) as u64).max(now + 1))
    }

    /// Lets the reads in flight on `d`, which has just turned writer, finish before it writes,
    /// for at most [`RailsConfig::switch_read_wait`].
    async fn finish_reads(&self, d: usize) {
        let st = &self.devices[d];
        if st.reads_in_flight.load(Ordering::SeqCst) == 0 || self.cfg.switch_read_wait.is_zero() {
            return;
        }
        let (from, until) = (
            self.now_ns(),
            tokio::time::Instant::now() + self.cfg.switch_read_wait,
        );
        st.counters
            .switch_read_waits
            .fetch_add(1, Ordering::Relaxed);
        loop {
            let done = st.reads_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if st.reads_in_flight.load(Ordering::SeqCst) == 0 {
                break;
            }
            tokio::select! {
                _ = done => {}
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        st.counters
            .switch_read_wait_ns
            .fetch_add(self.now_ns().saturating_sub(from), Ordering::Relaxed);
    }

    /// Buffered writes are journalled.
    fn journalled(&self) -> bool {
        self.cfg.separation && self.cfg.durability == Durability::Journal
    }

    fn is_failed(&self, d: usize) -> bool {
        self.devices[d].failed.load(Ordering::SeqCst)
    }

    /// Device `d` is an empty replacement being rebuilt: the journal records addressed to the
    /// device it replaces are dropped at recovery instead of replayed onto it (they would put
    /// old versions, and objects deleted since, on the new device). Call it before
    /// [`Rails::recover`].
    pub fn replacing(&self, d: usize) {
        self.replaced.lock().unwrap().push(d);
    }

    /// Calls `listener` whenever rails first fails a device (a flush or journal write that did
    /// not land, or [`Rails::mark_failed`]).
    pub fn on_failure(&self, listener: FailureListener) {
        *self.on_failure.write().unwrap() = Some(listener);
    }

    /// Takes device `d` out of service: nothing is buffered for it, replayed onto it or read
    /// from it until a rebuild replaces it. For a start with a device known to be stale or
    /// missing; call it before [`Rails::recover`].
    pub fn mark_failed(&self, d: usize) {
        self.fail_device(d);
    }

    /// Device `d` failed: drops its buffer, so writers never wait on it, and the journal around
    /// it (its own records are of no more use; those it held for others went with it).
    fn fail_device(&self, d: usize) {
        let st = &self.devices[d];
        if !st.failed.swap(true, Ordering::SeqCst) {
            let dropped = {
                let mut b = st.buffer.lock().unwrap();
                let n = b.len();
                b.clear();
                n
            };
            tracing::warn!(
                device = d,
                dropped,
                "device failed; its buffered writes are dropped for rebuild"
            );
            let listener = self.on_failure.read().unwrap().clone();
            if let Some(f) = listener {
                f(d);
            }
            st.wm_durable.store(u64::MAX, Ordering::SeqCst);
            self.drop_held(d);
            self.wake_holders();
        }
        st.room.notify_waiters();
    }

    /// Forgets the journal records device `w` holds (it failed: they are gone); their
    /// targets journal the writes still buffered again at their next sync.
    fn drop_held(&self, w: usize) {
        let held = std::mem::take(&mut *self.devices[w].held.lock().unwrap());
        for ((t, g), cost) in held {
            self.devices[w].held_bytes.fetch_sub(cost, Ordering::SeqCst);
            let ts = &self.devices[t as usize];
            ts.journal_bytes.fetch_sub(cost, Ordering::SeqCst);
            if t as usize != w {
                ts.lost.lock().unwrap().push(g);
            }
            ts.room.notify_waiters();
        }
    }

    /// Journals again the buffered writes to `d` whose records were on a device that failed.
    async fn rejournal_lost(&self, d: usize) -> Result<(), DeviceError> {
        let st = &self.devices[d];
        let lost: std::collections::BTreeSet<u64> = std::mem::take(&mut *st.lost.lock().unwrap())
            .into_iter()
            .collect();
        if lost.is_empty() {
            return Ok(());
        }
        let again = st.buffer.lock().unwrap().tagged(&lost);
        for (i, f) in again.iter().enumerate() {
            let cost = journal::record_bytes(f.key.len(), &f.op) as u64;
            st.journal_bytes.fetch_add(cost, Ordering::SeqCst);
            // One copy replaces the one lost; the others are still held.
            if let Err(e) = self.journal(d, f.tag, &f.key, &f.op, 1).await {
                st.lost
                    .lock()
                    .unwrap()
                    .extend(again[i..].iter().map(|f| f.tag));
                return Err(e);
            }
        }
        Ok(())
    }

    /// Makes every write acknowledged to `d` durable (see [`Separated::sync`]).
    async fn sync_target(&self, d: usize) -> Result<(), DeviceError> {
        // A journal device failing meanwhile drops its records; they are written again
        // elsewhere and the round repeats (a few times: a power failure fails everything).
        let mut rounds = 0;
        loop {
            self.rejournal_lost(d).await?;
            // Only what `d` must hold itself: a backlog it is flushing is in the journal, so
            // a sync here need not wait for it to reach the disk.
            self.sync_device(d, true).await?;
            let mut lost_one = None;
            for w in (0..self.devices.len()).filter(|&w| w != d) {
                let holds = {
                    let held = self.devices[w].held.lock().unwrap();
                    let t = d as u32;
                    held.range((t, 0)..=(t, u64::MAX)).next().is_some()
                };
                if !holds {
                    continue;
                }
                if let Err(e) = self.sync_device(w, true).await {
                    if !fatal(&e) {
                        return Err(e);
                    }
                    lost_one.get_or_insert(e);
                }
            }
            match lost_one {
                None if self.devices[d].lost.lock().unwrap().is_empty() => return Ok(()),
                Some(e) if rounds >= 2 => return Err(e),
                _ if rounds >= 2 => {
                    return Err(DeviceError::Failed {
                        reason: "journal devices kept failing during sync",
                    })
                }
                _ => rounds += 1,
            }
        }
    }

    /// Wakes every flusher: some journal records may have become deletable.
    fn wake_holders(&self) {
        for st in &self.devices {
            st.work.notify_one();
        }
    }

    async fn apply(&self, d: usize, key: &[u8], op: &Pending) -> Result<(), DeviceError> {
        let st = &self.devices[d];
        let res = match op {
            Pending::Store(v) => st.inner.store(key, v, StoreMode::Upsert).await,
            Pending::Delete => st.inner.delete(key, false).await.map(|_| ()),
        };
        if res.as_ref().is_err_and(fatal) {
            self.fail_device(d);
        }
        res
    }

    /// Syncs device `x` (with `only_if_dirty`, only when a store counted in its `dirty_seq`
    /// is not covered yet); a watermark stored before is durable afterwards.
    async fn sync_device(&self, x: usize, only_if_dirty: bool) -> Result<(), DeviceError> {
        let st = &self.devices[x];
        // Every store that needs this sync has returned and counted itself by now; a clean
        // device is not waited for, even while its flusher syncs a backlog.
        let wanted = st.dirty_seq.load(Ordering::SeqCst);
        let clean = || st.synced_seq.load(Ordering::SeqCst) >= wanted;
        if only_if_dirty && clean() {
            return Ok(());
        }
        let _g = st.sync_lock.lock().await;
        if only_if_dirty && clean() {
            return Ok(());
        }
        let covers = st.dirty_seq.load(Ordering::SeqCst);
        let stored = st.wm_stored.load(Ordering::SeqCst);
        match st.inner.sync().await {
            Ok(()) => {
                st.synced_seq.fetch_max(covers, Ordering::SeqCst);
                if st.wm_durable.fetch_max(stored, Ordering::SeqCst) < stored {
                    self.wake_holders();
                }
                Ok(())
            }
            Err(e) => {
                if fatal(&e) {
                    self.fail_device(x);
                }
                Err(e)
            }
        }
    }

    /// The device to journal a write to `d` on: the healthy writer-role device other than `d`
    /// holding the fewest journal bytes, one not flushing a backlog first (a sync of it waits
    /// for that backlog to reach its disk), else `d` itself if it writes (behind its backlog).
    /// While a device has failed, else any other healthy device, a reader too: the failure may
    /// have taken the writer a copy needs, and waiting for the next frame would hold every
    /// buffered write for up to a frame (degraded service, Rails §4.2.1; one small write on a
    /// reader costs less).
    fn journal_device(&self, d: usize, tried: &[usize]) -> Option<usize> {
        let n = self.devices.len();
        let first = self.journal_rr.fetch_add(1, Ordering::Relaxed) % n;
        let healthy = |w: usize| !tried.contains(&w) && !self.is_failed(w);
        let usable = |w: usize| healthy(w) && self.role(w) == Role::Writer;
        let least_held = |only: &dyn Fn(usize) -> bool| {
            (0..n)
                .map(|i| (first + i) % n)
                .filter(|&w| w != d && only(w))
                .min_by_key(|&w| {
                    let flushing = !self.devices[w].buffer.lock().unwrap().is_empty();
                    (flushing, self.devices[w].held_bytes.load(Ordering::SeqCst))
                })
        };
        least_held(&usable)
            .or_else(|| usable(d).then_some(d))
            .or_else(|| {
                let degraded = (0..n).any(|x| self.is_failed(x));
                degraded.then(|| least_held(&healthy)).flatten()
            })
    }

    /// The journal copies asked of each buffered write (at least one).
    fn journal_copies(&self) -> usize {
        self.cfg.journal_copies.max(1)
    }

    /// The devices holding a journal record of the write tagged `tag` to `d`.
    fn holders(&self, d: usize, tag: u64) -> Vec<usize> {
        (0..self.devices.len())
            .filter(|&w| {
                self.devices[w]
                    .held
                    .lock()
                    .unwrap()
                    .contains_key(&(d as u32, tag))
            })
            .collect()
    }

    /// Records the write tagged `tag` to device `d` in the journal, `copies` times on distinct
    /// devices that do not hold it yet (`copies` times its `record_bytes` are already reserved
    /// against `journal_bytes_max`). Returns once the copies are stored, or the device itself
    /// holds the write under a stored watermark. While fewer writers than copies are usable
    /// (every writer guarding, or too few) it waits for the next role change; with no other
    /// healthy device to take a copy it has `d` take its backlog, this write included, now
    /// (partial separation, never a lost write).
    async fn journal(
        &self,
        d: usize,
        tag: u64,
        key: &[u8],
        op: &Pending,
        copies: usize,
    ) -> Result<(), DeviceError> {
        let st = &self.devices[d];
        let cost = journal::record_bytes(key.len(), op) as u64;
        let mut left = copies as u64;
        let release = |left: u64| {
            st.journal_bytes.fetch_sub(cost * left, Ordering::SeqCst);
            st.room.notify_waiters();
        };
        let value = journal::encode_record(d as u32, tag, key, op);
        let rkey = journal::record_key(d as u32, tag);
        let mut tried = self.holders(d, tag);
        loop {
            if let Err(e) = st.check() {
                release(left);
                return Err(e);
            }
            if st.wm_stored.load(Ordering::SeqCst) >= tag {
                // Already applied and under a stored watermark: a sync of `d` makes it durable.
                st.mark_dirty();
                release(left);
                return Ok(());
            }
            match self.journal_device(d, &tried) {
                Some(w) => {
                    let hs = &self.devices[w];
                    match hs.inner.store(&rkey, &value, StoreMode::Upsert).await {
                        Ok(()) => {
                            hs.mark_dirty();
                            hs.held.lock().unwrap().insert((d as u32, tag), cost);
                            hs.held_bytes.fetch_add(cost, Ordering::SeqCst);
                            if self.is_failed(w) {
                                // It failed meanwhile; `fail_device` may have run before the insert.
                                self.drop_held(w);
                            }
                            st.counters.journal_records.fetch_add(1, Ordering::Relaxed);
                            st.counters
                                .journal_bytes
                                .fetch_add(value.len() as u64, Ordering::Relaxed);
                            left -= 1;
                            if left == 0 {
                                return Ok(());
                            }
                            tried.push(w);
                        }
                        Err(e) => {
                            if fatal(&e) {
                                self.fail_device(w);
                            }
                            tried.push(w);
                        }
                    }
                }
                None => {
                    let holders = self.holders(d, tag);
                    let could = (0..self.devices.len())
                        .any(|x| x != d && !self.is_failed(x) && !holders.contains(&x));
                    if could {
                        // A device that may take a copy once it writes.
                        st.counters.journal_waits.fetch_add(1, Ordering::Relaxed);
                        let now = self.now_ns();
                        let next = self.plan.with_schedule(|s| s.next_change(now));
                        tokio::time::sleep_until(
                            self.start + std::time::Duration::from_nanos(next),
                        )
                        .await;
                        tried = holders;
                    } else if !holders.is_empty() {
                        // Every healthy device holds a copy: as many as the array has now.
                        st.counters.journal_short.fetch_add(1, Ordering::Relaxed);
                        release(left);
                        return Ok(());
                    } else {
                        st.counters
                            .journal_fallbacks
                            .fetch_add(1, Ordering::Relaxed);
                        let res = self.flush_all(d, None).await;
                        st.mark_dirty();
                        release(left);
                        return res;
                    }
                }
            }
        }
    }

    /// Applies buffered operations to device `d` in arrival order while `keep_going` holds;
    /// with the journal, takes checkpoints on the way and at the end, then makes the last
    /// watermark durable.
    async fn flush_all(
        &self,
        d: usize,
        keep_going: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), DeviceError> {
        let st = &self.devices[d];
        let journal = self.journalled();
        let go = || keep_going.is_none_or(|k| k());
        let (mut ops, mut bytes) = (0usize, 0u64);
        loop {
            let _g = st.flush_lock.lock().await;
            if !go() {
                return Ok(());
            }
            // Several keys at once: each key appears once in a batch, so order per key holds.
            let batch = st
                .buffer
                .lock()
                .unwrap()
                .next_batch_tagged(FLUSH_BATCH_OPS_MAX);
            if batch.is_empty() {
                break;
            }
            let results = futures_util::future::join_all(batch.iter().map(|f| async move {
                match &f.op {
                    Pending::Store(v) => st
                        .inner
                        .store(&f.key, v, StoreMode::Upsert)
                        .await
                        .map(|_| v.len() as u64),
                    Pending::Delete => st.inner.delete(&f.key, false).await.map(|_| 0),
                }
            }))
            .await;
            let mut first_error = None;
            let mut done = Vec::new();
            for (f, res) in batch.iter().zip(results) {
                match res {
                    Ok(b) => {
                        done.push(f);
                        st.counters.flushed_ops.fetch_add(1, Ordering::Relaxed);
                        st.counters.flushed_bytes.fetch_add(b, Ordering::Relaxed);
                        // What the applied operation keeps charged in the buffer.
                        bytes += f.key.len() as u64 + b + crate::buffer::ENTRY_OVERHEAD_BYTES;
                    }
                    Err(e) => {
                        if fatal(&e) {
                            self.fail_device(d);
                        }
                        first_error.get_or_insert(e);
                    }
                }
            }
            if journal {
                // A batch counts whole or not at all: the watermark must never pass an
                // operation the device lacks. The ones that did land are written again.
                if let Some(e) = first_error {
                    return Err(e);
                }
                let mut b = st.buffer.lock().unwrap();
                for f in &done {
                    b.applied(f.seq, &f.key);
                }
                ops += done.len();
            } else {
                {
                    let mut b = st.buffer.lock().unwrap();
                    for f in &done {
                        b.flushed(f.seq, &f.key);
                    }
                }
                st.room.notify_waiters();
                if let Some(e) = first_error {
                    return Err(e);
                }
                continue;
            }
            if ops >= CHECKPOINT_OPS_MAX || bytes >= self.cfg.write_buffer_bytes_max / 4 {
                self.checkpoint(d).await?;
                (ops, bytes) = (0, 0);
            }
        }
        if journal && go() {
            let _g = st.flush_lock.lock().await;
            if st.buffer.lock().unwrap().has_applied() {
                self.checkpoint(d).await?;
            }
            // Make the watermark durable as well, so the records it covers can be deleted.
            if st.wm_stored.load(Ordering::SeqCst) > st.wm_durable.load(Ordering::SeqCst) {
                self.sync_device(d, false).await?;
            }
        }
        Ok(())
    }

    /// Under `d`'s flush lock: syncs `d` (the applied operations become durable), stores the
    /// watermark W = (oldest tag the device has not had, see
    /// [`WriteBuffer::oldest_unapplied_tag`]) - 1, then lets the applied operations go.
    async fn checkpoint(&self, d: usize) -> Result<(), DeviceError> {
        let st = &self.devices[d];
        let w = {
            let b = st.buffer.lock().unwrap();
            // Under the buffer lock: no tag is being handed out meanwhile.
            let next = st.next_tag.load(Ordering::SeqCst);
            b.oldest_unapplied_tag().unwrap_or(next) - 1
        };
        self.sync_device(d, false).await?;
        if w > st.wm_stored.load(Ordering::SeqCst) {
            let res = st
                .inner
                .store(
                    &journal::watermark_key(d as u32),
                    &journal::encode_watermark(d as u32, w),
                    StoreMode::Upsert,
                )
                .await;
            if let Err(e) = res {
                if fatal(&e) {
                    self.fail_device(d);
                }
                return Err(e);
            }
            st.wm_stored.store(w, Ordering::SeqCst);
            st.counters.watermarks.fetch_add(1, Ordering::Relaxed);
        }
        // Every applied operation is durable now (an applied one above W only makes W lag; a
        // replay of it rewrites the same value).
        st.buffer.lock().unwrap().confirm_applied(u64::MAX);
        st.room.notify_waiters();
        Ok(())
    }

    /// Deletes, while `keep_going` holds, the journal records device `w` holds whose target's
    /// durable watermark covers them.
    async fn delete_dead_records(
        &self,
        w: usize,
        keep_going: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), DeviceError> {
        let hs = &self.devices[w];
        loop {
            if keep_going.is_some_and(|k| !k()) {
                return Ok(());
            }
            let batch: Vec<((u32, u64), u64)> = {
                let held = hs.held.lock().unwrap();
                let mut out = Vec::new();
                for t in 0..self.devices.len() {
                    let durable = self.devices[t].wm_durable.load(Ordering::SeqCst);
                    let t = t as u32;
                    out.extend(
                        held.range((t, 0)..=(t, durable))
                            .take(DELETE_BATCH_OPS_MAX - out.len())
                            .map(|(k, c)| (*k, *c)),
                    );
                    if out.len() == DELETE_BATCH_OPS_MAX {
                        break;
                    }
                }
                out
            };
            if batch.is_empty() {
                return Ok(());
            }
            let results = futures_util::future::join_all(batch.iter().map(|((t, g), _)| {
                let key = journal::record_key(*t, *g);
                async move { hs.inner.delete(&key, false).await }
            }))
            .await;
            for (((t, g), cost), res) in batch.into_iter().zip(results) {
                match res {
                    Ok(_) => {
                        if hs.held.lock().unwrap().remove(&(t, g)).is_some() {
                            hs.held_bytes.fetch_sub(cost, Ordering::SeqCst);
                            let ts = &self.devices[t as usize];
                            ts.journal_bytes.fetch_sub(cost, Ordering::SeqCst);
                            ts.counters.journal_deleted.fetch_add(1, Ordering::Relaxed);
                            ts.room.notify_waiters();
                        }
                    }
                    Err(e) => {
                        if fatal(&e) {
                            self.fail_device(w);
                        }
                        return Err(e);
                    }
                }
            }
        }
    }
}

impl DeviceState {
    /// Counts a store that has returned and that a sync must make durable.
    fn mark_dirty(&self) {
        self.dirty_seq.fetch_add(1, Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), DeviceError> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(DeviceError::Failed {
                reason: "failed under read/write separation",
            });
        }
        Ok(())
    }
}

/// Once per frame: measures the device read and write bytes of the frame that ended and plans
/// the window two frames ahead (a colour joining then still gets its guard).
async fn window_controller(rails: std::sync::Weak<Rails>) {
    let mut last = (0u64, 0u64);
    loop {
        let Some(r) = rails.upgrade() else { return };
        let Some(a) = r.cfg.adaptive else { return };
        let now = r.now_ns();
        let (f, next) = r
            .plan
            .with_schedule(|s| (s.frame_at(now), s.frame_start(s.frame_at(now) + 1)));
        let sums = r.devices.iter().fold((0, 0), |acc, st| {
            (
                acc.0 + st.counters.read_bytes.load(Ordering::Relaxed),
                acc.1
                    + st.counters.written_bytes.load(Ordering::Relaxed)
                    + st.counters.journal_bytes.load(Ordering::Relaxed),
            )
        });
        let frame_s = r.cfg.schedule.frame.as_secs_f64();
        let (reads, writes) = (
            (sums.0 - last.0) as f64 / frame_s,
            (sums.1 - last.1) as f64 / frame_s,
        );
        last = sums;
        let sched = r.cfg.schedule;
        let choice = crate::schedule::WindowSizer {
            colours: sched.colours,
            window_min: sched.window_min,
            window_max: sched.window_max,
            read_bytes_per_s: a.read_bytes_per_s,
            write_bytes_per_s: a.write_bytes_per_s,
            // Device bytes already include every piece (and journal record), so each counts once.
            write_factor: 1.0,
        }
        .choose(reads, writes);
        if choice.partial {
            r.partial_frames.fetch_add(1, Ordering::Relaxed);
        }
        let _ = r
            .plan
            .with_schedule(|s| s.set_window_size(f + 2, choice.size, now));
        let deadline = r.start + std::time::Duration::from_nanos(next);
        drop(r);
        tokio::time::sleep_until(deadline).await;
    }
}

/// One device's flusher: writes its buffer out whenever it is a writer, compacts it then,
/// deletes the journal records it holds that are no longer needed, and sleeps until its role
/// changes or new work arrives.
async fn flusher(rails: std::sync::Weak<Rails>, d: usize) {
    // The frame in which this device last compacted: once per writer stint is enough.
    let mut compacted_in: Option<u64> = None;
    loop {
        let Some(r) = rails.upgrade() else { return };
        let st = r.devices[d].clone();
        let now = r.now_ns();
        let (frame, wake_at) = r
            .plan
            .with_schedule(|s| (s.frame_at(now), s.next_change(now)));
        let mut failed_now = false;
        let writer = r.role(d) == Role::Writer;
        if writer && !st.writes_released.load(Ordering::SeqCst) {
            // A new writer stint: reads still at the device go first.
            r.finish_reads(d).await;
            st.writes_released.store(true, Ordering::SeqCst);
            // Time moved on: look at the roles again.
            continue;
        }
        if !writer {
            st.writes_released.store(false, Ordering::SeqCst);
        }
        if writer {
            let check = {
                let r = r.clone();
                move || r.role(d) == Role::Writer
            };
            if let Err(e) = r.flush_all(d, Some(&check)).await {
                tracing::warn!(device = d, error = %e, "flush failed; retrying at the next role change");
                failed_now = true;
            } else if r.cfg.compact_budget_bytes > 0
                && check()
                && compacted_in.is_none_or(|f| f + 1 < frame)
            {
                compacted_in = Some(frame);
                if let Ok(s) = st.inner.compact(r.cfg.compact_budget_bytes).await {
                    if s.segments_freed > 0 {
                        st.counters.compactions.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if !failed_now && r.journalled() && !r.is_failed(d) {
                if let Err(e) = r.delete_dead_records(d, Some(&check)).await {
                    tracing::warn!(device = d, error = %e, "journal deletes failed; retrying at the next role change");
                    failed_now = true;
                }
            }
        }
        let deadline = r.start + std::time::Duration::from_nanos(wake_at);
        drop(r);
        if failed_now {
            // A failing device is not retried on every new write: wait for the next change.
            tokio::time::sleep_until(deadline).await;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = st.work.notified() => {}
        }
    }
}

/// One device behind read/write separation.
pub struct Separated {
    rails: Arc<Rails>,
    d: usize,
}

enum Placed {
    /// In the buffer, with its journal tag when journalled.
    Buffered(Option<u64>),
    /// Straight to the device: it writes and nothing waits before it.
    Direct,
    /// To the device past its backlog (partial separation), with its journal tag when
    /// journalled (without, the older buffered operation on the key is already gone).
    Bypass(Option<u64>),
    /// No room: wait.
    Full,
}

impl Separated {
    fn st(&self) -> &DeviceState {
        &self.rails.devices[self.d]
    }

    /// Sends a write now or buffers it, by role; waits for room when the buffer is full.
    async fn write(&self, key: &[u8], op: Pending) -> Result<(), DeviceError> {
        let (r, d, st) = (&self.rails, self.d, self.st());
        r.ready().await?;
        if let Pending::Store(v) = &op {
            st.counters
                .written_bytes
                .fetch_add(v.len() as u64, Ordering::Relaxed);
        }
        if !r.cfg.separation {
            return r.apply(d, key, &op).await;
        }
        loop {
            st.check()?;
            if let Some(until) = r.paced_until(d, &op) {
                let now = r.now_ns();
                st.counters.paced_waits.fetch_add(1, Ordering::Relaxed);
                st.counters
                    .paced_ns
                    .fetch_add(until.saturating_sub(now), Ordering::Relaxed);
                tokio::time::sleep_until(r.start + std::time::Duration::from_nanos(until)).await;
                continue;
            }
            let room = st.room.notified();
            // Decided once: `place` reserves journal room for exactly these copies.
            let copies = r.journal_copies();
            match self.place(key, &op, copies) {
                Placed::Buffered(None) => return Ok(()),
                Placed::Buffered(Some(tag)) => return r.journal(d, tag, key, &op, copies).await,
                Placed::Direct | Placed::Bypass(None) => {
                    r.apply(d, key, &op).await?;
                    // Set once the store is done, so a sync that finds it clean covered it.
                    st.mark_dirty();
                    return Ok(());
                }
                Placed::Bypass(Some(tag)) => {
                    r.journal(d, tag, key, &op, copies).await?;
                    // Under the flush lock no batch or checkpoint runs: this write lands before
                    // any watermark is taken, and only then does the older buffered operation
                    // on the key go (a failed write leaves it, so nothing acknowledged is lost).
                    let _g = st.flush_lock.lock().await;
                    if st.buffer.lock().unwrap().pending_tag(key) > Some(tag) {
                        // A newer write to the key waits in the buffer: this one is superseded.
                        return Ok(());
                    }
                    r.apply(d, key, &op).await?;
                    st.mark_dirty();
                    st.buffer.lock().unwrap().discard_older(key, tag);
                    st.room.notify_waiters();
                    return Ok(());
                }
                Placed::Full => room.await,
            }
        }
    }

    /// Decides, under the buffer lock, where a write goes; hands out its journal tag.
    fn place(&self, key: &[u8], op: &Pending, copies: usize) -> Placed {
        let (r, st) = (&self.rails, self.st());
        let journal = r.journalled();
        let role = r.role(self.d);
        let mut b = st.buffer.lock().unwrap();
        // A writer with nothing pending writes directly; otherwise order needs the buffer (a
        // writer still flushing keeps taking writes behind its backlog). With the journal the
        // stored watermark must also cover every tag handed out, or a journal record of an
        // older write on this key could be replayed over this one.
        let covered = !journal
            || st.wm_stored.load(Ordering::SeqCst) + 1 >= st.next_tag.load(Ordering::SeqCst);
        // At the start of a writer stint, reads still at the device go first
        // (`RailsConfig::switch_read_wait`).
        let released = st.writes_released.load(Ordering::SeqCst);
        if role == Role::Writer && b.is_empty() && covered && released {
            st.counters.direct_ops.fetch_add(1, Ordering::Relaxed);
            return Placed::Direct;
        }
        let cost = journal::record_bytes(key.len(), op) as u64 * copies as u64;
        let journal_room = !journal || {
            let held = st.journal_bytes.load(Ordering::SeqCst);
            held == 0 || held + cost <= r.cfg.journal_bytes_max
        };
        let take_tag = || {
            st.journal_bytes.fetch_add(cost, Ordering::SeqCst);
            st.next_tag.fetch_add(1, Ordering::SeqCst)
        };
        if journal_room && b.fits(key, op) {
            let tag = journal.then(take_tag);
            b.push_tagged(key, op.clone(), tag.unwrap_or(0))
                .expect("checked that it fits");
            st.counters.buffered_ops.fetch_add(1, Ordering::Relaxed);
            if role == Role::Writer {
                st.work.notify_one();
            }
            return Placed::Buffered(tag);
        }
        if journal_room && r.cfg.partial_when_full {
            // Partial separation: the device takes it now. An older buffered op on this key
            // goes, so it cannot overwrite this one when flushed.
            st.counters.partial_ops.fetch_add(1, Ordering::Relaxed);
            if journal {
                return Placed::Bypass(Some(take_tag()));
            }
            b.discard(key);
            return Placed::Bypass(None);
        }
        st.counters
            .backpressure_waits
            .fetch_add(1, Ordering::Relaxed);
        Placed::Full
    }
}

#[async_trait]
impl Device for Separated {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<(), DeviceError> {
        self.limits().check(key, value)?;
        if journal::is_reserved(key) {
            return Err(reserved_key(key));
        }
        if mode != StoreMode::Upsert {
            let exists = self.exist(&[key]).await?[0];
            mode.check(key, exists)?;
        }
        self.write(key, Pending::Store(value.to_vec())).await
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved, DeviceError> {
        let st = self.st();
        self.rails.ready().await?;
        st.check()?;
        if journal::is_reserved(key) {
            return Err(DeviceError::KeyNotFound { key: key.to_vec() });
        }
        let buffered = st.buffer.lock().unwrap().get(key).cloned();
        match buffered {
            Some(Pending::Store(v)) => {
                st.counters.buffer_reads.fetch_add(1, Ordering::Relaxed);
                let (a, b) = range.resolve(v.len() as u64)?;
                st.counters.read_bytes.fetch_add(b - a, Ordering::Relaxed);
                Ok(Retrieved {
                    value: railstore_device::Bytes::copy_from_slice(&v[a as usize..b as usize]),
                    value_len: v.len() as u64,
                })
            }
            Some(Pending::Delete) => {
                st.counters.buffer_reads.fetch_add(1, Ordering::Relaxed);
                Err(DeviceError::KeyNotFound { key: key.to_vec() })
            }
            None => {
                let _reading = ReadInFlight::new(st);
                let r = st.inner.retrieve(key, range).await?;
                st.counters
                    .read_bytes
                    .fetch_add(r.value.len() as u64, Ordering::Relaxed);
                Ok(r)
            }
        }
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool, DeviceError> {
        if journal::is_reserved(key) {
            return Err(reserved_key(key));
        }
        if !self.rails.cfg.separation {
            // Straight through: no buffer to look into first.
            self.rails.ready().await?;
            let st = self.st();
            st.check()?;
            let res = st.inner.delete(key, must_exist).await;
            if res.as_ref().is_err_and(fatal) {
                self.rails.fail_device(self.d);
            }
            return res;
        }
        let existed = self.exist(&[key]).await?[0];
        if must_exist && !existed {
            return Err(DeviceError::KeyNotFound { key: key.to_vec() });
        }
        self.write(key, Pending::Delete).await?;
        Ok(existed)
    }

    /// Rails' own keys never exist here.
    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>, DeviceError> {
        let st = self.st();
        self.rails.ready().await?;
        let known: Vec<Option<bool>> = {
            let b = st.buffer.lock().unwrap();
            keys.iter()
                .map(|k| {
                    if journal::is_reserved(k) {
                        Some(false)
                    } else {
                        b.get(k).map(|op| matches!(op, Pending::Store(_)))
                    }
                })
                .collect()
        };
        let ask: Vec<&[u8]> = keys
            .iter()
            .zip(&known)
            .filter(|(_, k)| k.is_none())
            .map(|(k, _)| *k)
            .collect();
        let mut answers = if ask.is_empty() {
            Vec::new()
        } else {
            st.inner.exist(&ask).await?
        }
        .into_iter();
        Ok(known
            .into_iter()
            .map(|k| k.unwrap_or_else(|| answers.next().unwrap_or(false)))
            .collect())
    }

    /// The device's keys with the buffer laid over them; rails' own keys (all after every
    /// other key, as they start with 0xFF) are left out.
    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch, DeviceError> {
        let st = self.st();
        self.rails.ready().await?;
        if journal::is_reserved(&req.prefix) {
            return Ok(IterBatch::default());
        }
        let mut batch = st.inner.iterate(req).await?;
        if let Some(i) = batch
            .entries
            .iter()
            .position(|e| journal::is_reserved(&e.key))
        {
            batch.entries.truncate(i);
            batch.more = false;
        }
        let upper = batch
            .more
            .then(|| batch.entries.last().map(|e| e.key.clone()))
            .flatten();
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = batch
            .entries
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect();
        {
            let b = st.buffer.lock().unwrap();
            for (k, op) in b.keys_with_prefix(&req.prefix) {
                if req.start_after.as_deref().is_some_and(|s| k <= s) {
                    continue;
                }
                if upper.as_deref().is_some_and(|u| k > u) {
                    break;
                }
                match op {
                    Pending::Store(v) => {
                        merged.insert(k.to_vec(), req.with_values.then(|| v.clone()));
                    }
                    Pending::Delete => {
                        merged.remove(k);
                    }
                }
            }
        }
        let limit = if req.entries_max == 0 {
            usize::MAX
        } else {
            req.entries_max
        };
        let more = batch.more || merged.len() > limit;
        let entries = merged
            .into_iter()
            .take(limit)
            .map(|(key, value)| IterEntry { key, value })
            .collect();
        Ok(IterBatch { entries, more })
    }

    async fn info(&self) -> Result<DeviceInfo, DeviceError> {
        self.st().inner.info().await
    }

    /// Makes every write acknowledged before it durable: syncs the device and, with the
    /// journal, the devices holding journal records of its writes that were stored since their
    /// last sync. Writes whose journal device failed are journalled again elsewhere first.
    async fn sync(&self) -> Result<(), DeviceError> {
        let r = &self.rails;
        r.ready().await?;
        if !r.journalled() {
            return self.st().inner.sync().await;
        }
        r.sync_target(self.d).await
    }

    /// Housekeeping only while a writer; the flusher also compacts then.
    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats, DeviceError> {
        if self.rails.role(self.d) != Role::Writer {
            return Ok(CompactStats::default());
        }
        self.st().inner.compact(budget_bytes).await
    }

    /// The device's limits; with the journal, values are shorter by a journal record's
    /// overhead and the longest key, so every value this device accepts can be journalled on
    /// any device of the array.
    fn limits(&self) -> Limits {
        let mut l = self.st().inner.limits();
        if self.rails.journalled() {
            let room = self
                .rails
                .journal_value_bytes_max
                .saturating_sub(RECORD_OVERHEAD_BYTES + l.key_bytes_max);
            l.value_bytes_max = l.value_bytes_max.min(room);
        }
        l
    }
}

/// Counts a read at the device while it runs (also when its task is dropped).
struct ReadInFlight<'a>(&'a DeviceState);

impl<'a> ReadInFlight<'a> {
    fn new(st: &'a DeviceState) -> Self {
        st.reads_in_flight.fetch_add(1, Ordering::SeqCst);
        ReadInFlight(st)
    }
}

impl Drop for ReadInFlight<'_> {
    fn drop(&mut self) {
        if self.0.reads_in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.reads_done.notify_waiters();
        }
    }
}
