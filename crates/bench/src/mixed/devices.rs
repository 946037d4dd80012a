//! The devices under the simulated SSDs: a sparse data keeper for filler, and a probe that counts
//! what reaches each device.

use async_trait::async_trait;
use railstore_device::{
    CompactStats, Device, DeviceInfo, IterBatch, IterRequest, Limits, MemDevice, ReadRange,
    Retrieved, StoreMode,
};
use railstore_rails::{Rails, Role};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

// ---------------------------------------------------------------------------------------------
// The data keeper inside each simulated SSD

/// A memory device that keeps only the lengths of filler values (`precondition`'s 8-byte keys;
/// the manager's keys are longer): the SSD model above still sees every byte written, so the
/// simulated SSDs can be larger than the memory that holds the data set. Filler reads back as
/// zeros; listings leave it out.
pub(super) struct SparseFiller {
    pub(super) mem: MemDevice,
    pub(super) filler: Mutex<std::collections::HashMap<[u8; 8], u32>>,
}

impl SparseFiller {
    pub(super) fn filler_key(key: &[u8]) -> Option<[u8; 8]> {
        key.try_into().ok()
    }
}

#[async_trait]
impl Device for SparseFiller {
    async fn store(&self, k: &[u8], v: &[u8], m: StoreMode) -> railstore_device::Result<()> {
        match Self::filler_key(k) {
            Some(f) => {
                let mut map = self.filler.lock().expect("filler lock");
                m.check(k, map.contains_key(&f))?;
                map.insert(f, v.len() as u32);
                Ok(())
            }
            None => self.mem.store(k, v, m).await,
        }
    }
    async fn retrieve(&self, k: &[u8], r: ReadRange) -> railstore_device::Result<Retrieved> {
        let len = Self::filler_key(k)
            .and_then(|f| self.filler.lock().expect("filler lock").get(&f).copied());
        match len {
            Some(len) => {
                let (a, b) = r.resolve(len as u64)?;
                Ok(Retrieved {
                    value: vec![0; (b - a) as usize].into(),
                    value_len: len as u64,
                })
            }
            None => self.mem.retrieve(k, r).await,
        }
    }
    async fn delete(&self, k: &[u8], must: bool) -> railstore_device::Result<bool> {
        if let Some(f) = Self::filler_key(k) {
            if self
                .filler
                .lock()
                .expect("filler lock")
                .remove(&f)
                .is_some()
            {
                return Ok(true);
            }
        }
        self.mem.delete(k, must).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> railstore_device::Result<Vec<bool>> {
        let mut found = self.mem.exist(keys).await?;
        let map = self.filler.lock().expect("filler lock");
        for (i, k) in keys.iter().enumerate() {
            found[i] |= Self::filler_key(k).is_some_and(|f| map.contains_key(&f));
        }
        Ok(found)
    }
    async fn iterate(&self, req: &IterRequest) -> railstore_device::Result<IterBatch> {
        self.mem.iterate(req).await
    }
    async fn info(&self) -> railstore_device::Result<DeviceInfo> {
        self.mem.info().await
    }
    async fn sync(&self) -> railstore_device::Result<()> {
        self.mem.sync().await
    }
    fn limits(&self) -> Limits {
        self.mem.limits()
    }
}

// ---------------------------------------------------------------------------------------------
// A probe between rails and each SSD: which reads reached a device outside the window

pub(super) struct Probe {
    pub(super) inner: Arc<dyn Device>,
    pub(super) d: usize,
    pub(super) rails: OnceLock<Weak<Rails>>,
    pub(super) reads_in_window: AtomicU64,
    pub(super) reads_outside: AtomicU64,
}

impl Probe {
    pub(super) fn new(inner: Arc<dyn Device>, d: usize) -> Probe {
        Probe {
            inner,
            d,
            rails: OnceLock::new(),
            reads_in_window: AtomicU64::new(0),
            reads_outside: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl Device for Probe {
    async fn store(&self, k: &[u8], v: &[u8], m: StoreMode) -> railstore_device::Result<()> {
        self.inner.store(k, v, m).await
    }
    async fn retrieve(&self, k: &[u8], r: ReadRange) -> railstore_device::Result<Retrieved> {
        let role = self
            .rails
            .get()
            .and_then(Weak::upgrade)
            .map(|r| r.role(self.d));
        match role {
            Some(Role::Reader) => &self.reads_in_window,
            _ => &self.reads_outside,
        }
        .fetch_add(1, Ordering::Relaxed);
        self.inner.retrieve(k, r).await
    }
    async fn delete(&self, k: &[u8], must: bool) -> railstore_device::Result<bool> {
        self.inner.delete(k, must).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> railstore_device::Result<Vec<bool>> {
        self.inner.exist(keys).await
    }
    async fn iterate(&self, req: &IterRequest) -> railstore_device::Result<IterBatch> {
        self.inner.iterate(req).await
    }
    async fn info(&self) -> railstore_device::Result<DeviceInfo> {
        self.inner.info().await
    }
    async fn sync(&self) -> railstore_device::Result<()> {
        self.inner.sync().await
    }
    async fn compact(&self, b: u64) -> railstore_device::Result<CompactStats> {
        self.inner.compact(b).await
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}
