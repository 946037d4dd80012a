//! The one submission point between the mechanisms and the devices, and the read plan that says
//! which devices should serve reads now. Read/write separation (`rails`) plugs in here: the
//! mechanisms never call a device directly.

use railstore_device::{
    Device, DeviceError, IterBatch, IterRequest, ReadRange, Retrieved, StoreMode,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

pub use railstore_rails::{AnyHealthy, FailureListener, ReadPlan};

use railstore_device::retry::TRANSIENT_RETRIES;

/// How a device's faults are handled (see [`DeviceSet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPolicy {
    /// Longest a device operation may take; past it a read counts as a read error and a write
    /// takes the device out of service. `None`: wait for ever.
    pub op_timeout: Option<std::time::Duration>,
    /// Read errors (after retries) a device may give within `read_error_window` before it is
    /// taken out of service; below that each one is a lost piece that the reader decodes
    /// around and a repair rewrites.
    pub read_errors_max: u64,
    /// The window `read_errors_max` counts over.
    pub read_error_window: std::time::Duration,
}

impl Default for FaultPolicy {
    fn default() -> Self {
        FaultPolicy {
            op_timeout: None,
            read_errors_max: 16,
            read_error_window: std::time::Duration::from_secs(60),
        }
    }
}

/// Whether an operation reads or changes the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
}

/// Device operations issued through the manager, counted by kind.
#[derive(Debug, Default)]
pub struct IoCounters {
    /// Stores issued.
    pub stores: AtomicU64,
    /// Bytes stored (header and payload).
    pub store_bytes: AtomicU64,
    /// Retrieves issued.
    pub retrieves: AtomicU64,
    /// Bytes retrieved.
    pub retrieve_bytes: AtomicU64,
    /// Deletes issued.
    pub deletes: AtomicU64,
    /// Pieces found bad (checksum, parse) or stale and rewritten.
    pub repairs: AtomicU64,
    /// Segments or set members rebuilt by decoding.
    pub decodes: AtomicU64,
    /// Reads sent to a spare device because a preferred one was slow to answer
    /// (`ManagerConfig::slow_read_bypass`).
    pub slow_read_bypasses: AtomicU64,
    /// Reads that failed after retries (or timed out) on a device still in service.
    pub read_errors: AtomicU64,
    /// Operations that ran past `FaultPolicy::op_timeout`.
    pub timeouts: AtomicU64,
    /// Devices taken out of service because a write did not land on them.
    pub failed_on_write: AtomicU64,
    /// Packing sets written, and the members they held (k at most: a set closed by
    /// `pack_wait` holds fewer, and its parity costs each member more).
    pub pack_sets: AtomicU64,
    pub pack_members: AtomicU64,
}

/// The devices of the array, their health, and the read plan.
pub struct DeviceSet {
    /// Appended to when the array grows while serving ([`DeviceSet::add`]); an online
    /// replace swaps one.
    members: RwLock<Vec<Arc<Member>>>,
    plan: RwLock<Arc<dyn ReadPlan>>,
    /// Told when a device is first marked failed, before the operation that found it returns.
    on_failure: RwLock<Option<FailureListener>>,
    faults: FaultPolicy,
    /// Operation counters.
    pub counters: IoCounters,
}

/// One device of the set and its health.
struct Member {
    device: Arc<dyn Device>,
    /// The device is on another node (asked once per member: a replaced device gets a new one).
    remote: bool,
    failed: AtomicBool,
    /// A replacement being rebuilt: it takes writes and serves no reads.
    rebuilding: AtomicBool,
    /// Read errors in the current window, and when the window began.
    read_errors: std::sync::Mutex<(u64, Option<tokio::time::Instant>)>,
}

impl Member {
    fn new(device: Arc<dyn Device>, rebuilding: bool) -> Arc<Member> {
        Arc::new(Member {
            remote: device.remote(),
            device,
            failed: AtomicBool::new(false),
            rebuilding: AtomicBool::new(rebuilding),
            read_errors: std::sync::Mutex::new((0, None)),
        })
    }
}

impl DeviceSet {
    /// Wraps the array's devices, all healthy.
    pub fn new(devices: Vec<Arc<dyn Device>>) -> DeviceSet {
        DeviceSet::with_faults(devices, FaultPolicy::default())
    }

    /// Wraps the array's devices, all healthy, handling faults by `faults`.
    pub fn with_faults(devices: Vec<Arc<dyn Device>>, faults: FaultPolicy) -> DeviceSet {
        DeviceSet {
            members: RwLock::new(devices.into_iter().map(|d| Member::new(d, false)).collect()),
            plan: RwLock::new(Arc::new(AnyHealthy)),
            on_failure: RwLock::new(None),
            faults,
            counters: IoCounters::default(),
        }
    }

    /// Appends `devices`, healthy, after the array's (a grow while serving); returns the
    /// index of the first.
    pub fn add(&self, devices: Vec<Arc<dyn Device>>) -> usize {
        let mut members = self.members.write().unwrap();
        let first = members.len();
        members.extend(devices.into_iter().map(|d| Member::new(d, false)));
        first
    }

    fn member(&self, d: usize) -> Arc<Member> {
        self.members.read().unwrap()[d].clone()
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.members.read().unwrap().len()
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Device `d`.
    pub fn device(&self, d: usize) -> Arc<dyn Device> {
        self.members.read().unwrap()[d].device.clone()
    }

    /// Replaces the read plan.
    pub fn set_read_plan(&self, plan: Arc<dyn ReadPlan>) {
        *self.plan.write().unwrap() = plan;
    }

    /// Marks device `d` failed: nothing more is sent to it until it is replaced.
    pub fn mark_failed(&self, d: usize) {
        if !self.member(d).failed.swap(true, Ordering::SeqCst) {
            tracing::warn!(device = d, "device marked failed");
            let listener = self.on_failure.read().unwrap().clone();
            if let Some(f) = listener {
                f(d);
            }
        }
    }

    /// Calls `listener` whenever a device is first marked failed.
    pub fn on_failure(&self, listener: FailureListener) {
        *self.on_failure.write().unwrap() = Some(listener);
    }

    /// Whether device `d` is failed.
    pub fn is_failed(&self, d: usize) -> bool {
        self.members.read().unwrap()[d]
            .failed
            .load(Ordering::SeqCst)
    }

    /// Whether device `d` is being rebuilt (it takes writes but serves no reads).
    pub fn is_rebuilding(&self, d: usize) -> bool {
        self.members.read().unwrap()[d]
            .rebuilding
            .load(Ordering::SeqCst)
    }

    /// Puts `replacement` in place of device `d`; it takes writes and serves no reads until
    /// [`DeviceSet::finish_rebuild`].
    pub fn replace(&self, d: usize, replacement: Arc<dyn Device>) {
        // Its health starts afresh: not failed, no read errors counted.
        self.members.write().unwrap()[d] = Member::new(replacement, true);
    }

    /// Device `d` holds everything it should again.
    pub fn finish_rebuild(&self, d: usize) {
        self.member(d).rebuilding.store(false, Ordering::SeqCst);
    }

    /// Whether reads may go to `d` at all.
    pub fn readable(&self, d: usize) -> bool {
        !self.is_failed(d) && !self.is_rebuilding(d)
    }

    /// Whether `d` is readable and the read plan wants it to serve reads now.
    pub fn prefers(&self, d: usize) -> bool {
        self.readable(d) && self.plan.read().unwrap().prefers(d)
    }

    /// Whether `d` is on another node (its calls cross the network).
    pub fn remote(&self, d: usize) -> bool {
        self.member(d).remote
    }

    /// Orders candidate devices for a read: readable and preferred first, then readable ones
    /// the plan would rather not use; failed and rebuilding devices are left out. Within each,
    /// this node's devices come before remote ones (a copy read here crosses no network),
    /// otherwise in the candidates' order.
    pub fn read_order(&self, candidates: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let plan = self.plan.read().unwrap().clone();
        let mut order: Vec<usize> = candidates
            .into_iter()
            .filter(|&d| self.readable(d))
            .collect();
        // A stable sort: the candidates' order stays within each rank.
        order.sort_by_cached_key(|&d| (!plan.prefers(d), self.remote(d)));
        order
    }

    /// What an error says about device `d`:
    /// - a fail-stop always takes it out of service;
    /// - a write that did not land (an I/O error, no room, a timeout, transient errors past the
    ///   retries) takes it out of service too: it would hold an old piece while the write is
    ///   acknowledged on the others, and a later read of it could return the old version;
    /// - a read error is a lost piece, decoded around and rewritten by a repair, until the
    ///   device gives more than `read_errors_max` of them within `read_error_window`;
    /// - a key or value the device refuses by its limits, or a missing key, is the caller's
    ///   concern, not the device's.
    fn note(&self, d: usize, op: Op, e: &DeviceError) {
        let device_fault = matches!(
            e,
            DeviceError::Io { .. } | DeviceError::Transient | DeviceError::Capacity { .. }
        );
        match (op, e) {
            (_, DeviceError::Failed { .. }) => self.mark_failed(d),
            (Op::Write, _) if device_fault => {
                self.counters
                    .failed_on_write
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(device = d, error = %e, "a write did not land; device taken out of service");
                self.mark_failed(d);
            }
            (Op::Read, _) if device_fault => {
                self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
                let now = tokio::time::Instant::now();
                let too_many = {
                    let member = self.member(d);
                    let mut w = member.read_errors.lock().unwrap();
                    if w.1
                        .is_none_or(|t| now.duration_since(t) > self.faults.read_error_window)
                    {
                        *w = (0, Some(now));
                    }
                    w.0 += 1;
                    w.0 > self.faults.read_errors_max
                };
                if too_many {
                    tracing::warn!(
                        device = d,
                        "too many read errors; device taken out of service"
                    );
                    self.mark_failed(d);
                }
            }
            _ => {}
        }
    }

    /// Runs one operation on device `d`: refused at once if the device is marked failed,
    /// retried on transient errors, bounded by the timeout, and its failure judged by
    /// [`DeviceSet::note`].
    async fn run<T, F>(
        &self,
        d: usize,
        kind: Op,
        op: impl Fn(Arc<dyn Device>) -> F,
    ) -> Result<T, DeviceError>
    where
        F: std::future::Future<Output = Result<T, DeviceError>>,
    {
        if self.is_failed(d) {
            return Err(DeviceError::Failed {
                reason: "marked failed",
            });
        }
        let dev = self.device(d);
        let mut tries = 0;
        loop {
            let res = match self.faults.op_timeout {
                None => op(dev.clone()).await,
                Some(t) => match tokio::time::timeout(t, op(dev.clone())).await {
                    Ok(r) => r,
                    Err(_) => {
                        self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                        Err(DeviceError::io(
                            "an operation past the device timeout",
                            std::io::ErrorKind::TimedOut.into(),
                        ))
                    }
                },
            };
            match res {
                Err(DeviceError::Transient) if tries < TRANSIENT_RETRIES => tries += 1,
                Err(e) => {
                    self.note(d, kind, &e);
                    return Err(e);
                }
                Ok(v) => return Ok(v),
            }
        }
    }

    /// Stores on device `d` (upsert).
    pub async fn store(&self, d: usize, key: &[u8], value: &[u8]) -> Result<(), DeviceError> {
        self.counters.stores.fetch_add(1, Ordering::Relaxed);
        self.counters
            .store_bytes
            .fetch_add(value.len() as u64, Ordering::Relaxed);
        self.run(d, Op::Write, |dev| async move {
            dev.store(key, value, StoreMode::Upsert).await
        })
        .await
    }

    /// Reads the whole value under `key` on device `d`; `Ok(None)` when it is not there.
    pub async fn retrieve(&self, d: usize, key: &[u8]) -> Result<Option<Vec<u8>>, DeviceError> {
        self.retrieve_range(d, key, ReadRange::ALL).await
    }

    /// Reads the first `len` bytes of the value under `key` on device `d`.
    pub async fn retrieve_prefix(
        &self,
        d: usize,
        key: &[u8],
        len: u64,
    ) -> Result<Option<Vec<u8>>, DeviceError> {
        let range = ReadRange {
            offset: 0,
            len: Some(len),
        };
        self.retrieve_range(d, key, range).await
    }

    async fn retrieve_range(
        &self,
        d: usize,
        key: &[u8],
        range: ReadRange,
    ) -> Result<Option<Vec<u8>>, DeviceError> {
        self.read(d, key, range, false).await
    }

    /// Reads `range` of the value under `key` on device `d` for a caller that checks the bytes
    /// itself ([`Device::retrieve_part`]); `Ok(None)` when it is not there.
    pub async fn retrieve_part(
        &self,
        d: usize,
        key: &[u8],
        range: ReadRange,
    ) -> Result<Option<Vec<u8>>, DeviceError> {
        self.read(d, key, range, true).await
    }

    async fn read(
        &self,
        d: usize,
        key: &[u8],
        range: ReadRange,
        part: bool,
    ) -> Result<Option<Vec<u8>>, DeviceError> {
        self.counters.retrieves.fetch_add(1, Ordering::Relaxed);
        match self
            .run(d, Op::Read, |dev| async move {
                if part {
                    dev.retrieve_part(key, range).await
                } else {
                    dev.retrieve(key, range).await
                }
            })
            .await
        {
            Ok(Retrieved { value, .. }) => {
                self.counters
                    .retrieve_bytes
                    .fetch_add(value.len() as u64, Ordering::Relaxed);
                Ok(Some(value.into()))
            }
            Err(DeviceError::KeyNotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether `key` is stored on device `d` (an index lookup on most devices, cheaper than a
    /// read that misses).
    pub async fn exists(&self, d: usize, key: &[u8]) -> Result<bool, DeviceError> {
        let v = self
            .run(d, Op::Read, |dev| async move { dev.exist(&[key]).await })
            .await?;
        Ok(v.first().copied().unwrap_or(false))
    }

    /// Deletes `key` on device `d`; a missing key is fine.
    pub async fn delete(&self, d: usize, key: &[u8]) -> Result<(), DeviceError> {
        self.counters.deletes.fetch_add(1, Ordering::Relaxed);
        self.run(d, Op::Write, |dev| async move {
            dev.delete(key, false).await.map(|_| ())
        })
        .await
    }

    /// Durability barrier on device `d`; a device marked failed has nothing to sync.
    pub async fn sync(&self, d: usize) -> Result<(), DeviceError> {
        if self.is_failed(d) {
            return Ok(());
        }
        self.run(d, Op::Write, |dev| async move { dev.sync().await })
            .await
    }

    /// One iteration batch on device `d`.
    pub async fn iterate(&self, d: usize, req: &IterRequest) -> Result<IterBatch, DeviceError> {
        self.run(d, Op::Read, |dev| async move { dev.iterate(req).await })
            .await
    }

    /// Every key under `prefix` on device `d`, batch after batch.
    pub async fn iterate_keys(&self, d: usize, prefix: &[u8]) -> Result<Vec<Vec<u8>>, DeviceError> {
        let mut req = IterRequest {
            prefix: prefix.to_vec(),
            start_after: None,
            entries_max: 4096,
            with_values: false,
        };
        let mut keys = Vec::new();
        loop {
            let batch = self.iterate(d, &req).await?;
            keys.extend(batch.entries.into_iter().map(|e| e.key));
            if !batch.more {
                return Ok(keys);
            }
            req.start_after = keys.last().cloned();
        }
    }
}
