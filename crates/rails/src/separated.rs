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
use arc_swap::ArcSwap;
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

mod controller;
mod device;
mod flush;
mod journaling;
mod recovery;

pub use device::Separated;

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
    /// Size each device's buffer bound every frame by the Rails rule from its measured write
    /// rate ([`write_buffer_bytes_min`](crate::write_buffer_bytes_min) at the widest window),
    /// at most `write_buffer_bytes_max` (the memory setting) and at least an eighth of it;
    /// until a rate is measured the bound is `write_buffer_bytes_max`.
    pub size_buffers: bool,
    /// Journal records kept of each buffered write, on distinct devices. A power failure
    /// loses every buffer, so a buffered piece then survives as long as one device holding its
    /// record does: with `t + 1` copies it survives any `t` device losses on top of the power
    /// failure. A write waits (like a full buffer) until it has its copies, or until no other
    /// healthy device is left to take one.
    pub journal_copies: usize,
}

/// What one device sustains, for sizing the window from measured load.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AdaptiveWindow {
    /// Read bytes/s one device serves; `None`: not known, and the window is as wide as the
    /// writes and the buffers allow (reads first).
    pub read_bytes_per_s: Option<f64>,
    /// Write bytes/s one device absorbs; `None`: measured from the flushers' passes (a pass
    /// writes a backlog as fast as the device takes it), and until one is measured the window
    /// stays at its minimum.
    pub write_bytes_per_s: Option<f64>,
    /// The widest window the load may ask for; `None`: the schedule's `window_max`. Below it,
    /// the schedule's widest window is left for widening past devices out of service.
    pub window_max: Option<usize>,
}

/// The load of the last frame, what the devices sustain, and what the buffers need
/// ([`Rails::load`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FrameLoad {
    /// Bytes/s read from the devices (buffer hits included) in the last frame.
    pub read_bytes_per_s: f64,
    /// Bytes/s written to the devices (every piece, buffered or direct, and journal records).
    pub write_bytes_per_s: f64,
    /// The write rate of one device, configured or measured (mean of the healthy devices);
    /// `None` until measured.
    pub device_write_bytes_per_s: Option<f64>,
    /// Device bytes/s the writers of the current window absorb: writer devices x the device
    /// rate. Writes above it fill the buffers.
    pub write_bound_bytes_per_s: Option<f64>,
    /// What the Rails rule asks of each buffer at the widest window and the measured rate.
    pub buffer_bytes_needed: Option<u64>,
    /// The bound each buffer has now (the largest, where devices differ).
    pub buffer_bytes_max: u64,
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
            size_buffers: false,
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
    /// Reads serving a read request that reached the device itself (not its buffer) while,
    /// under separation, it was not a reader: a writer, guarding, or a replacement being
    /// rebuilt. What separation exists to keep at zero; a read that must (a degraded group, a
    /// careful read of every piece) shows here.
    pub off_window_reads: AtomicU64,
    /// The same for reads made by writes and deletes (what they replace) and by background
    /// work (start-up load, deferred deletes, scrub, rebuild): see
    /// [`railstore_device::purpose`].
    pub off_window_other_reads: AtomicU64,
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
    /// Its buffer's bound now ([`RailsConfig::size_buffers`]).
    pub buffer_bytes_max: u64,
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
    counters: Arc<DeviceCounters>,
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
    /// The device's measured write rate in bytes/s (`f64` bits; 0: not measured yet).
    write_rate: AtomicU64,
}

/// The devices' state, appended to when the array grows while serving
/// ([`Rails::add_devices`]); read without a lock.
struct DeviceTable(ArcSwap<Vec<Arc<DeviceState>>>);

impl DeviceTable {
    fn get(&self, d: usize) -> Arc<DeviceState> {
        self.0.load()[d].clone()
    }

    fn all(&self) -> Arc<Vec<Arc<DeviceState>>> {
        self.0.load_full()
    }

    fn len(&self) -> usize {
        self.0.load().len()
    }
}

/// Buffered operations a flusher sends to its device at once.
const FLUSH_BATCH_OPS_MAX: usize = 16;
/// Journal records a holder deletes at once.
const DELETE_BATCH_OPS_MAX: usize = 16;
/// Operations a flusher applies between two checkpoints (sync, then watermark); a checkpoint
/// also comes once the applied operations hold a quarter of the write buffer's bound (they
/// keep their room until then), and at the end of a pass.
const CHECKPOINT_OPS_MAX: usize = 256;
/// A flush pass counts as a measurement of its device's write rate once it wrote this much:
/// shorter ones measure latency more than bandwidth.
const RATE_SAMPLE_BYTES_MIN: u64 = 1 << 20;

/// What [`Rails::new`] returns: the shared state and the wrapped devices.
pub type RailsAndDevices = (Arc<Rails>, Vec<Arc<dyn Device>>);

/// Shared state of separation over an array.
pub struct Rails {
    cfg: RailsConfig,
    /// Frames in which the writes needed more writers than the smallest window leaves
    /// (W > W_sep: separation can only be partial).
    partial_frames: AtomicU64,
    /// The last frame's load (the window controller's measurement).
    load: Mutex<FrameLoad>,
    plan: Arc<ScheduledReads>,
    start: Instant,
    devices: DeviceTable,
    /// Held while devices are added ([`Rails::add_devices`]): one grow at a time.
    growing: Mutex<()>,
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

/// Every colour is one of the schedule's.
fn check_colours(cfg: &RailsConfig, colour_of: &[usize]) -> Result<(), DeviceError> {
    match colour_of.iter().find(|&&c| c >= cfg.schedule.colours) {
        Some(c) => Err(DeviceError::Config(format!(
            "colour {c} outside the schedule's {} colours",
            cfg.schedule.colours
        ))),
        None => Ok(()),
    }
}

/// Device `d` can hold journal records and a watermark, when the journal is on.
fn check_journal_room(cfg: &RailsConfig, d: usize, device: &dyn Device) -> Result<(), DeviceError> {
    // With the journal, every device may hold journal records and a watermark.
    if cfg.separation && cfg.durability == Durability::Journal {
        let l = device.limits();
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
    Ok(())
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
        check_colours(&cfg, &colour_of)?;
        if cfg.switch_read_wait > cfg.schedule.frame / 2 {
            return Err(DeviceError::Config(format!(
                "switch_read_wait {:?} is more than half the frame {:?}: a writer stint could \
                 pass waiting",
                cfg.switch_read_wait, cfg.schedule.frame
            )));
        }
        for (d, dev) in devices.iter().enumerate() {
            check_journal_room(&cfg, d, dev.as_ref())?;
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
            .map(|inner| DeviceState::new(inner, &cfg))
            .collect();
        let rails = Arc::new(Rails {
            cfg,
            partial_frames: AtomicU64::new(0),
            load: Mutex::new(FrameLoad {
                buffer_bytes_max: cfg.write_buffer_bytes_max,
                ..FrameLoad::default()
            }),
            plan,
            start,
            devices: DeviceTable(ArcSwap::from_pointee(states)),
            growing: Mutex::new(()),
            recovery: tokio::sync::OnceCell::new(),
            journal_rr: AtomicUsize::new(0),
            journal_value_bytes_max,
            on_failure: std::sync::RwLock::new(None),
            replaced: Mutex::new(Vec::new()),
        });
        let wrapped = (0..rails.devices.len()).map(|d| rails.wrap(d)).collect();
        if rails.cfg.separation {
            tokio::spawn(controller::window_controller(Arc::downgrade(&rails)));
        }
        Ok((rails, wrapped))
    }

    /// Device `d` as the layers above see it; starts its flusher.
    fn wrap(self: &Arc<Self>, d: usize) -> Arc<dyn Device> {
        if self.cfg.separation {
            tokio::spawn(flush::flusher(Arc::downgrade(self), d));
        }
        Arc::new(Separated {
            rails: self.clone(),
            d,
            st: self.devices.get(d),
        })
    }

    /// Devices added while the array serves (a grow), after the others: device
    /// `device_count() + i` is `devices[i]`, of colour `colours[i]`, empty, in its colour's
    /// role from now on. Returns them wrapped, their flushers started. Call after the journal
    /// replay ([`Rails::recover`]): the added devices hold no journal of an earlier run.
    pub fn add_devices(
        self: &Arc<Self>,
        devices: Vec<Arc<dyn Device>>,
        colours: Vec<usize>,
    ) -> Result<Vec<Arc<dyn Device>>, DeviceError> {
        if devices.len() != colours.len() {
            return Err(DeviceError::Config(format!(
                "{} devices but {} colours",
                devices.len(),
                colours.len()
            )));
        }
        check_colours(&self.cfg, &colours)?;
        let _one_at_a_time = self.growing.lock().unwrap();
        let first = self.devices.len();
        for (i, dev) in devices.iter().enumerate() {
            check_journal_room(&self.cfg, first + i, dev.as_ref())?;
            if self.journalled() && dev.limits().value_bytes_max < self.journal_value_bytes_max {
                return Err(DeviceError::Config(format!(
                    "device {}: values of at most {} B are smaller than the array's journal \
                     records ({} B)",
                    first + i,
                    dev.limits().value_bytes_max,
                    self.journal_value_bytes_max
                )));
            }
        }
        // Colours first: a device the table lists has a role.
        self.plan.add_devices(&colours);
        let states: Vec<Arc<DeviceState>> = devices
            .into_iter()
            .map(|inner| DeviceState::new(inner, &self.cfg))
            .collect();
        self.devices.0.rcu(|old| {
            let mut all = Vec::clone(old);
            all.extend(states.iter().cloned());
            all
        });
        tracing::info!(first, added = states.len(), "devices joined separation");
        Ok((first..first + states.len())
            .map(|d| self.wrap(d))
            .collect())
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
        if self.cfg.separation && !self.devices.get(d).rebuilding.load(Ordering::SeqCst) {
            self.plan.role(d)
        } else {
            Role::Writer
        }
    }

    /// Device `d`, readmitted by [`Rails::readmit`], holds everything again and serves reads:
    /// from now on it follows its colour's role.
    pub fn rebuilt(&self, d: usize) {
        let st = &self.devices.get(d);
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

    /// The last frame's load against what the devices and buffers sustain.
    pub fn load(&self) -> FrameLoad {
        *self.load.lock().unwrap()
    }

    /// Device `d`'s write rate as measured by its flusher (bytes/s), if measured yet.
    pub fn measured_write_rate(&self, d: usize) -> Option<f64> {
        let r = f64::from_bits(self.devices.get(d).write_rate.load(Ordering::Relaxed));
        (r > 0.0).then_some(r)
    }

    /// Folds one flush pass (`bytes` in `ns`) into device `d`'s measured write rate.
    fn note_flush_pass(&self, d: usize, bytes: u64, ns: u64) {
        if bytes < RATE_SAMPLE_BYTES_MIN || ns == 0 {
            return;
        }
        let sample = bytes as f64 * 1e9 / ns as f64;
        let rate = match self.measured_write_rate(d) {
            // A moving average: one slow pass (a sync behind, a busy device) moves it a quarter.
            Some(r) => r + (sample - r) / 4.0,
            None => sample,
        };
        self.devices
            .get(d)
            .write_rate
            .store(rate.to_bits(), Ordering::Relaxed);
    }

    /// The configuration.
    pub fn config(&self) -> &RailsConfig {
        &self.cfg
    }

    /// The devices it separates.
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// Counters of device `d`.
    pub fn counters(&self, d: usize) -> Arc<DeviceCounters> {
        self.devices.get(d).counters.clone()
    }

    /// Role, buffer and journal of every device now.
    pub fn snapshot(&self) -> Vec<DeviceSnapshot> {
        (0..self.devices.len())
            .map(|d| {
                let st = &self.devices.get(d);
                let b = st.buffer.lock().unwrap();
                DeviceSnapshot {
                    role: self.role(d),
                    buffer_bytes: b.bytes(),
                    buffer_bytes_max: b.bytes_max(),
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
            let st = self.devices.get(d);
            let b = st.buffer.lock().unwrap();
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
        let st = &self.devices.get(d);
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
        self.devices.get(d).failed.load(Ordering::SeqCst)
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
        let st = &self.devices.get(d);
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

    /// Makes every write acknowledged to `d` durable (see [`Separated::sync`]).
    async fn sync_target(&self, d: usize) -> Result<(), DeviceError> {
        // A journal device failing meanwhile drops its records (they join `d`'s lost ones);
        // the next round journals them again elsewhere. The rounds end: a record is lost only
        // when a device fails (each fails once) or when a copy that was in flight to it lands
        // after its failure (finitely many), and a failure of `d` itself, or of every device
        // (a power cut), ends the round with its error.
        loop {
            self.rejournal_lost(d).await?;
            // Only what `d` must hold itself: a backlog it is flushing is in the journal, so
            // a sync here need not wait for it to reach the disk.
            self.sync_device(d, true).await?;
            for w in (0..self.devices.len()).filter(|&w| w != d) {
                let holds = {
                    let hs = self.devices.get(w);
                    let held = hs.held.lock().unwrap();
                    let t = d as u32;
                    held.range((t, 0)..=(t, u64::MAX)).next().is_some()
                };
                if !holds {
                    continue;
                }
                // A fatal error failed `w`: its records for `d` are lost ones now. Never `d`'s
                // error: the redundancy layer would take `d`, healthy, out of service (SIM-15).
                if let Err(e) = self.sync_device(w, true).await {
                    if !fatal(&e) {
                        return Err(e);
                    }
                }
            }
            if self.devices.get(d).lost.lock().unwrap().is_empty() {
                return Ok(());
            }
        }
    }

    /// Wakes every flusher: some journal records may have become deletable.
    fn wake_holders(&self) {
        for st in self.devices.all().iter() {
            st.work.notify_one();
        }
    }

    async fn apply(&self, d: usize, key: &[u8], op: &Pending) -> Result<(), DeviceError> {
        let st = &self.devices.get(d);
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
        let st = &self.devices.get(x);
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
}

impl DeviceState {
    fn new(inner: Arc<dyn Device>, cfg: &RailsConfig) -> Arc<DeviceState> {
        Arc::new(DeviceState {
            inner,
            failed: AtomicBool::new(false),
            buffer: Mutex::new(WriteBuffer::new(cfg.write_buffer_bytes_max)),
            work: Notify::new(),
            room: Notify::new(),
            counters: Arc::default(),
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
            write_rate: AtomicU64::new(0),
        })
    }

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
