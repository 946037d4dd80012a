//! The one submission point between the mechanisms and the devices, and the read plan that says
//! which devices should serve reads now. Read/write separation (`rails`) plugs in here: the
//! mechanisms never call a device directly.

use railstore_device::{
    Device, DeviceError, IterBatch, IterRequest, ReadRange, Retrieved, StoreMode,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

pub use railstore_rails::{AnyHealthy, ReadPlan};

/// How often a transient device error is retried before it counts as a failure.
const TRANSIENT_RETRIES: usize = 3;

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
}

/// The devices of the array, their health, and the read plan.
pub struct DeviceSet {
    devices: RwLock<Vec<Arc<dyn Device>>>,
    failed: Vec<AtomicBool>,
    rebuilding: Vec<AtomicBool>,
    plan: RwLock<Arc<dyn ReadPlan>>,
    /// Operation counters.
    pub counters: IoCounters,
}

impl DeviceSet {
    /// Wraps the array's devices, all healthy.
    pub fn new(devices: Vec<Arc<dyn Device>>) -> DeviceSet {
        let n = devices.len();
        DeviceSet {
            devices: RwLock::new(devices),
            failed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            rebuilding: (0..n).map(|_| AtomicBool::new(false)).collect(),
            plan: RwLock::new(Arc::new(AnyHealthy)),
            counters: IoCounters::default(),
        }
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.failed.len()
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.failed.is_empty()
    }

    /// Device `d`.
    pub fn device(&self, d: usize) -> Arc<dyn Device> {
        self.devices.read().unwrap()[d].clone()
    }

    /// Replaces the read plan.
    pub fn set_read_plan(&self, plan: Arc<dyn ReadPlan>) {
        *self.plan.write().unwrap() = plan;
    }

    /// Marks device `d` failed: nothing more is sent to it until it is replaced.
    pub fn mark_failed(&self, d: usize) {
        if !self.failed[d].swap(true, Ordering::SeqCst) {
            tracing::warn!(device = d, "device marked failed");
        }
    }

    /// Whether device `d` is failed.
    pub fn is_failed(&self, d: usize) -> bool {
        self.failed[d].load(Ordering::SeqCst)
    }

    /// Whether device `d` is being rebuilt (it takes writes but serves no reads).
    pub fn is_rebuilding(&self, d: usize) -> bool {
        self.rebuilding[d].load(Ordering::SeqCst)
    }

    /// Puts `replacement` in place of device `d`; it takes writes and serves no reads until
    /// [`DeviceSet::finish_rebuild`].
    pub fn replace(&self, d: usize, replacement: Arc<dyn Device>) {
        self.rebuilding[d].store(true, Ordering::SeqCst);
        self.devices.write().unwrap()[d] = replacement;
        self.failed[d].store(false, Ordering::SeqCst);
    }

    /// Device `d` holds everything it should again.
    pub fn finish_rebuild(&self, d: usize) {
        self.rebuilding[d].store(false, Ordering::SeqCst);
    }

    /// Whether reads may go to `d` at all.
    pub fn readable(&self, d: usize) -> bool {
        !self.is_failed(d) && !self.is_rebuilding(d)
    }

    /// Whether `d` is readable and the read plan wants it to serve reads now.
    pub fn prefers(&self, d: usize) -> bool {
        self.readable(d) && self.plan.read().unwrap().prefers(d)
    }

    /// Orders candidate devices for a read: readable and preferred first, then readable ones
    /// the plan would rather not use; failed and rebuilding devices are left out.
    pub fn read_order(&self, candidates: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let plan = self.plan.read().unwrap().clone();
        let (mut preferred, rest): (Vec<usize>, Vec<usize>) = candidates
            .into_iter()
            .filter(|&d| self.readable(d))
            .partition(|&d| plan.prefers(d));
        preferred.extend(rest);
        preferred
    }

    fn note(&self, d: usize, e: &DeviceError) {
        if matches!(e, DeviceError::Failed { .. } | DeviceError::Io { .. }) {
            self.mark_failed(d);
        }
    }

    /// Stores on device `d` (upsert), retrying transient errors.
    pub async fn store(&self, d: usize, key: &[u8], value: &[u8]) -> Result<(), DeviceError> {
        if self.is_failed(d) {
            return Err(DeviceError::Failed {
                reason: "marked failed",
            });
        }
        let dev = self.device(d);
        self.counters.stores.fetch_add(1, Ordering::Relaxed);
        self.counters
            .store_bytes
            .fetch_add(value.len() as u64, Ordering::Relaxed);
        let mut tries = 0;
        loop {
            match dev.store(key, value, StoreMode::Upsert).await {
                Err(DeviceError::Transient) if tries < TRANSIENT_RETRIES => tries += 1,
                Err(e) => {
                    self.note(d, &e);
                    return Err(e);
                }
                Ok(()) => return Ok(()),
            }
        }
    }

    /// Reads the whole value under `key` on device `d`; `Ok(None)` when it is not there.
    pub async fn retrieve(&self, d: usize, key: &[u8]) -> Result<Option<Vec<u8>>, DeviceError> {
        if self.is_failed(d) {
            return Err(DeviceError::Failed {
                reason: "marked failed",
            });
        }
        let dev = self.device(d);
        self.counters.retrieves.fetch_add(1, Ordering::Relaxed);
        let mut tries = 0;
        loop {
            match dev.retrieve(key, ReadRange::ALL).await {
                Ok(Retrieved { value, .. }) => {
                    self.counters
                        .retrieve_bytes
                        .fetch_add(value.len() as u64, Ordering::Relaxed);
                    return Ok(Some(value));
                }
                Err(DeviceError::KeyNotFound { .. }) => return Ok(None),
                Err(DeviceError::Transient) if tries < TRANSIENT_RETRIES => tries += 1,
                Err(e) => {
                    self.note(d, &e);
                    return Err(e);
                }
            }
        }
    }

    /// Whether `key` is stored on device `d` (an index lookup on most devices, cheaper than a
    /// read that misses).
    pub async fn exists(&self, d: usize, key: &[u8]) -> Result<bool, DeviceError> {
        if self.is_failed(d) {
            return Err(DeviceError::Failed {
                reason: "marked failed",
            });
        }
        let dev = self.device(d);
        let mut tries = 0;
        loop {
            match dev.exist(&[key]).await {
                Ok(v) => return Ok(v.first().copied().unwrap_or(false)),
                Err(DeviceError::Transient) if tries < TRANSIENT_RETRIES => tries += 1,
                Err(e) => {
                    self.note(d, &e);
                    return Err(e);
                }
            }
        }
    }

    /// Reads the first `len` bytes of the value under `key` on device `d`.
    pub async fn retrieve_prefix(
        &self,
        d: usize,
        key: &[u8],
        len: u64,
    ) -> Result<Option<Vec<u8>>, DeviceError> {
        if self.is_failed(d) {
            return Err(DeviceError::Failed {
                reason: "marked failed",
            });
        }
        let dev = self.device(d);
        self.counters.retrieves.fetch_add(1, Ordering::Relaxed);
        let mut tries = 0;
        let range = ReadRange {
            offset: 0,
            len: Some(len),
        };
        loop {
            match dev.retrieve(key, range).await {
                Ok(Retrieved { value, .. }) => {
                    self.counters
                        .retrieve_bytes
                        .fetch_add(value.len() as u64, Ordering::Relaxed);
                    return Ok(Some(value));
                }
                Err(DeviceError::KeyNotFound { .. }) => return Ok(None),
                Err(DeviceError::Transient) if tries < TRANSIENT_RETRIES => tries += 1,
                Err(e) => {
                    self.note(d, &e);
                    return Err(e);
                }
            }
        }
    }

    /// Deletes `key` on device `d`; a missing key is fine.
    pub async fn delete(&self, d: usize, key: &[u8]) -> Result<(), DeviceError> {
        if self.is_failed(d) {
            return Err(DeviceError::Failed {
                reason: "marked failed",
            });
        }
        let dev = self.device(d);
        self.counters.deletes.fetch_add(1, Ordering::Relaxed);
        let mut tries = 0;
        loop {
            match dev.delete(key, false).await {
                Ok(_) => return Ok(()),
                Err(DeviceError::Transient) if tries < TRANSIENT_RETRIES => tries += 1,
                Err(e) => {
                    self.note(d, &e);
                    return Err(e);
                }
            }
        }
    }

    /// Durability barrier on device `d`, retrying transient errors.
    pub async fn sync(&self, d: usize) -> Result<(), DeviceError> {
        if self.is_failed(d) {
            return Ok(());
        }
        let dev = self.device(d);
        let mut tries = 0;
        loop {
            match dev.sync().await {
                Err(DeviceError::Transient) if tries < TRANSIENT_RETRIES => tries += 1,
                Err(e) => {
                    self.note(d, &e);
                    return Err(e);
                }
                Ok(()) => return Ok(()),
            }
        }
    }

    /// One iteration batch on device `d`.
    pub async fn iterate(&self, d: usize, req: &IterRequest) -> Result<IterBatch, DeviceError> {
        let dev = self.device(d);
        let mut tries = 0;
        loop {
            match dev.iterate(req).await {
                Err(DeviceError::Transient) if tries < TRANSIENT_RETRIES => tries += 1,
                Err(e) => {
                    self.note(d, &e);
                    return Err(e);
                }
                Ok(b) => return Ok(b),
            }
        }
    }
}
