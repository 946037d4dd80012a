//! Read/write separation carried out: each device is wrapped in a [`Separated`] device that
//! follows the role schedule. A write addressed to a device in the window (a reader) waits in
//! its bounded write buffer; a flusher task writes the buffer out, in arrival order, while the
//! device is a writer. Reads answer from the buffer first (it holds the newest data). The
//! reliability manager above sees ordinary devices and asks [`Rails::read_plan`] where to read.
//!
//! Durability: buffered writes live in memory until flushed; `sync` makes durable what reached
//! the device. With m >= k (or a replica on a writer) the writer-role pieces alone rebuild every
//! object after a power loss; otherwise buffered pieces can be lost with it. The intent log that
//! closes this gap is not built yet.

use crate::buffer::{BufferError, Pending, WriteBuffer};
use crate::plan::{ReadPlan, ScheduledReads};
use crate::schedule::{Role, Schedule, ScheduleConfig};
use async_trait::async_trait;
use railstore_device::{
    CompactStats, Device, DeviceError, DeviceInfo, IterBatch, IterEntry, IterRequest, Limits,
    ReadRange, Retrieved, StoreMode,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;

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
    /// Separation on with `schedule`, 256 MiB buffers, back-pressure, compaction while writing.
    pub fn new(schedule: ScheduleConfig) -> RailsConfig {
        RailsConfig {
            schedule,
            separation: true,
            write_buffer_bytes_max: 256 << 20,
            partial_when_full: false,
            compact_budget_bytes: 64 << 20,
            adaptive: None,
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
    /// Times a writer waited for buffer room.
    pub backpressure_waits: AtomicU64,
    /// Compaction passes run while a writer.
    pub compactions: AtomicU64,
    /// Value bytes read through this device (buffer hits included).
    pub read_bytes: AtomicU64,
    /// Value bytes written to this device (buffered or direct).
    pub written_bytes: AtomicU64,
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
}

struct DeviceState {
    inner: Arc<dyn Device>,
    /// The device failed: its buffer was dropped and every operation fails fast, so writers
    /// never wait on a buffer nobody will flush (its data comes back by rebuild).
    failed: std::sync::atomic::AtomicBool,
    buffer: Mutex<WriteBuffer>,
    /// Wakes the flusher (new work, or a role change it computed).
    work: Notify,
    /// Wakes writers waiting for buffer room.
    room: Notify,
    counters: DeviceCounters,
}

/// Buffered operations a flusher sends to its device at once.
const FLUSH_BATCH_OPS_MAX: usize = 16;

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
}

impl std::fmt::Debug for Rails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rails")
            .field("cfg", &self.cfg)
            .field("devices", &self.devices.len())
            .finish()
    }
}

impl Rails {
    /// Wraps `devices` (device d has colour `colour_of[d]`) and starts one flusher task per
    /// device; call inside a tokio runtime. Returns the shared state and the wrapped devices to
    /// hand to the reliability manager.
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
                    failed: std::sync::atomic::AtomicBool::new(false),
                    buffer: Mutex::new(WriteBuffer::new(cfg.write_buffer_bytes_max)),
                    work: Notify::new(),
                    room: Notify::new(),
                    counters: DeviceCounters::default(),
                })
            })
            .collect();
        let rails = Arc::new(Rails {
            cfg,
            partial_frames: AtomicU64::new(0),
            plan,
            start,
            devices: states,
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

    /// The role of device `d` now.
    pub fn role(&self, d: usize) -> Role {
        if self.cfg.separation {
            self.plan.role(d)
        } else {
            Role::Writer
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

    /// Role and buffer of every device now.
    pub fn snapshot(&self) -> Vec<DeviceSnapshot> {
        (0..self.devices.len())
            .map(|d| {
                let b = self.devices[d].buffer.lock().unwrap();
                DeviceSnapshot {
                    role: self.role(d),
                    buffer_bytes: b.bytes(),
                    buffer_keys: b.len(),
                }
            })
            .collect()
    }

    /// Writes every buffer out now, whatever the roles (shutdown, or before a crash-safe
    /// checkpoint); reads may see write latency meanwhile.
    pub async fn drain(&self) -> Result<(), DeviceError> {
        for d in 0..self.devices.len() {
            flush_all(&self.devices[d], None).await?;
        }
        Ok(())
    }
}

impl DeviceState {
    fn fail(&self) {
        if !self.failed.swap(true, Ordering::SeqCst) {
            let dropped = {
                let mut b = self.buffer.lock().unwrap();
                let n = b.len();
                b.clear();
                n
            };
            tracing::warn!(
                dropped,
                "device failed; its buffered writes are dropped for rebuild"
            );
        }
        self.room.notify_waiters();
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

/// Applies buffered operations to the device in arrival order while `keep_going` holds.
async fn flush_all(
    st: &DeviceState,
    keep_going: Option<&(dyn Fn() -> bool + Sync)>,
) -> Result<(), DeviceError> {
    loop {
        if keep_going.is_some_and(|k| !k()) {
            return Ok(());
        }
        // Several keys at once: each key appears once in a batch, so order per key holds.
        let batch = st.buffer.lock().unwrap().next_batch(FLUSH_BATCH_OPS_MAX);
        if batch.is_empty() {
            return Ok(());
        }
        let results = futures_util::future::join_all(batch.iter().map(|(_, key, op)| async move {
            match op {
                Pending::Store(v) => st
                    .inner
                    .store(key, v, StoreMode::Upsert)
                    .await
                    .map(|_| v.len() as u64),
                Pending::Delete => st.inner.delete(key, false).await.map(|_| 0),
            }
        }))
        .await;
        let mut first_error = None;
        for ((seq, key, _), res) in batch.iter().zip(results) {
            match res {
                Ok(bytes) => {
                    st.buffer.lock().unwrap().flushed(*seq, key);
                    st.counters.flushed_ops.fetch_add(1, Ordering::Relaxed);
                    st.counters
                        .flushed_bytes
                        .fetch_add(bytes, Ordering::Relaxed);
                }
                Err(e) => {
                    if matches!(e, DeviceError::Failed { .. } | DeviceError::Io { .. }) {
                        st.fail();
                    }
                    first_error.get_or_insert(e);
                }
            }
        }
        st.room.notify_waiters();
        if let Some(e) = first_error {
            return Err(e);
        }
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
                acc.1 + st.counters.written_bytes.load(Ordering::Relaxed),
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
            // Device bytes already include every piece, so each counts once.
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

/// One device's flusher: writes its buffer out whenever it is a writer, compacts it then, and
/// sleeps until its role changes or new work arrives.
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
        if r.role(d) == Role::Writer {
            let check = {
                let r = r.clone();
                move || r.role(d) == Role::Writer
            };
            if let Err(e) = flush_all(&st, Some(&check)).await {
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

impl Separated {
    fn st(&self) -> &DeviceState {
        &self.rails.devices[self.d]
    }

    /// Sends a write now or buffers it, by role; waits for room when the buffer is full.
    async fn write(&self, key: &[u8], op: Pending) -> Result<(), DeviceError> {
        let st = self.st();
        if let Pending::Store(v) = &op {
            st.counters
                .written_bytes
                .fetch_add(v.len() as u64, Ordering::Relaxed);
        }
        if !self.rails.cfg.separation {
            return apply(st, key, &op).await;
        }
        loop {
            st.check()?;
            let room = st.room.notified();
            match self.place(key, &op) {
                Placed::Buffered => return Ok(()),
                Placed::Direct => return apply(st, key, &op).await,
                Placed::Full => room.await,
            }
        }
    }

    /// Decides, under the buffer lock, where a write goes.
    fn place(&self, key: &[u8], op: &Pending) -> Placed {
        let st = self.st();
        let role = self.rails.role(self.d);
        let mut b = st.buffer.lock().unwrap();
        // A writer with nothing pending writes directly; otherwise order needs the buffer (a
        // writer still flushing keeps taking writes behind its backlog).
        if role == Role::Writer && b.is_empty() {
            st.counters.direct_ops.fetch_add(1, Ordering::Relaxed);
            return Placed::Direct;
        }
        match b.push(key, op.clone()) {
            Ok(()) => {
                st.counters.buffered_ops.fetch_add(1, Ordering::Relaxed);
                if role == Role::Writer {
                    st.work.notify_one();
                }
                Placed::Buffered
            }
            Err(BufferError::Full { .. }) if self.rails.cfg.partial_when_full => {
                // Partial separation: the device takes it now. An older buffered op on this key
                // goes, so it cannot overwrite this one when flushed.
                b.discard(key);
                st.counters.partial_ops.fetch_add(1, Ordering::Relaxed);
                Placed::Direct
            }
            Err(BufferError::Full { .. }) => {
                st.counters
                    .backpressure_waits
                    .fetch_add(1, Ordering::Relaxed);
                Placed::Full
            }
        }
    }
}

enum Placed {
    Buffered,
    Direct,
    Full,
}

async fn apply(st: &DeviceState, key: &[u8], op: &Pending) -> Result<(), DeviceError> {
    let res = match op {
        Pending::Store(v) => st.inner.store(key, v, StoreMode::Upsert).await,
        Pending::Delete => st.inner.delete(key, false).await.map(|_| ()),
    };
    if matches!(
        res,
        Err(DeviceError::Failed { .. } | DeviceError::Io { .. })
    ) {
        st.fail();
    }
    res
}

#[async_trait]
impl Device for Separated {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<(), DeviceError> {
        self.limits().check(key, value)?;
        if mode != StoreMode::Upsert {
            let exists = self.exist(&[key]).await?[0];
            mode.check(key, exists)?;
        }
        self.write(key, Pending::Store(value.to_vec())).await
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved, DeviceError> {
        let st = self.st();
        st.check()?;
        let buffered = st.buffer.lock().unwrap().get(key).cloned();
        match buffered {
            Some(Pending::Store(v)) => {
                st.counters.buffer_reads.fetch_add(1, Ordering::Relaxed);
                let (a, b) = range.resolve(v.len() as u64)?;
                st.counters.read_bytes.fetch_add(b - a, Ordering::Relaxed);
                Ok(Retrieved {
                    value: v[a as usize..b as usize].to_vec(),
                    value_len: v.len() as u64,
                })
            }
            Some(Pending::Delete) => {
                st.counters.buffer_reads.fetch_add(1, Ordering::Relaxed);
                Err(DeviceError::KeyNotFound { key: key.to_vec() })
            }
            None => {
                let r = st.inner.retrieve(key, range).await?;
                st.counters
                    .read_bytes
                    .fetch_add(r.value.len() as u64, Ordering::Relaxed);
                Ok(r)
            }
        }
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool, DeviceError> {
        let existed = self.exist(&[key]).await?[0];
        if must_exist && !existed {
            return Err(DeviceError::KeyNotFound { key: key.to_vec() });
        }
        self.write(key, Pending::Delete).await?;
        Ok(existed)
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>, DeviceError> {
        let st = self.st();
        let known: Vec<Option<bool>> = {
            let b = st.buffer.lock().unwrap();
            keys.iter()
                .map(|k| b.get(k).map(|op| matches!(op, Pending::Store(_))))
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

    /// The device's keys with the buffer laid over them.
    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch, DeviceError> {
        let st = self.st();
        let batch = st.inner.iterate(req).await?;
        let upper = batch
            .more
            .then(|| batch.entries.last().map(|e| e.key.clone()))
            .flatten();
        let mut merged: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> = batch
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

    async fn sync(&self) -> Result<(), DeviceError> {
        self.st().inner.sync().await
    }

    /// Housekeeping only while a writer; the flusher also compacts then.
    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats, DeviceError> {
        if self.rails.role(self.d) != Role::Writer {
            return Ok(CompactStats::default());
        }
        self.st().inner.compact(budget_bytes).await
    }

    fn limits(&self) -> Limits {
        self.st().inner.limits()
    }
}
