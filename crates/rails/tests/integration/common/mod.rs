//! A memory device whose stores and syncs take the virtual time a test gives them.

use async_trait::async_trait;
use railstore_device::{
    CompactStats, Device, DeviceInfo, IterBatch, IterRequest, Limits, MemConfig, MemDevice,
    ReadRange, Retrieved, StoreMode,
};
use std::sync::Arc;
use std::time::Duration;

/// How long a store of (key, value) waits before it lands.
pub type StoreWait = Box<dyn Fn(&[u8], &[u8]) -> Duration + Send + Sync>;

pub struct Timed {
    inner: MemDevice,
    store_wait: StoreWait,
    sync_wait: Duration,
}

impl Timed {
    pub fn new(store_wait: StoreWait, sync_wait: Duration) -> Arc<Timed> {
        Arc::new(Timed {
            inner: MemDevice::new(MemConfig::default()).unwrap(),
            store_wait,
            sync_wait,
        })
    }
}

#[async_trait]
impl Device for Timed {
    async fn store(&self, k: &[u8], v: &[u8], m: StoreMode) -> railstore_device::Result<()> {
        let wait = (self.store_wait)(k, v);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        self.inner.store(k, v, m).await
    }
    async fn retrieve(&self, k: &[u8], r: ReadRange) -> railstore_device::Result<Retrieved> {
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
        if !self.sync_wait.is_zero() {
            tokio::time::sleep(self.sync_wait).await;
        }
        self.inner.sync().await
    }
    async fn compact(&self, b: u64) -> railstore_device::Result<CompactStats> {
        self.inner.compact(b).await
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}
