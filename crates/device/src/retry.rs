//! `retry`: retries operations that failed with [`DeviceError::Transient`] (the operation did
//! not happen, and the same one may succeed). Every layer above a raw device — the array's
//! identity records, rails' journal and flushes, the reliability manager — then sees a
//! transient fault only when it persists past the retries, and judges that as a device fault.

use crate::api::{
    CompactStats, Device, DeviceInfo, IterBatch, IterRequest, Limits, ReadRange, Retrieved,
    StoreMode,
};
use crate::error::{DeviceError, Result};
use async_trait::async_trait;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Retries after the first try of an operation.
pub const TRANSIENT_RETRIES: usize = 3;

/// The retrying wrapper.
pub struct RetryingDevice {
    inner: Arc<dyn Device>,
    retries: AtomicU64,
}

impl RetryingDevice {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Device>) -> RetryingDevice {
        RetryingDevice {
            inner,
            retries: AtomicU64::new(0),
        }
    }

    /// Operations tried again after a transient error, so far.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    async fn run<'a, T, F>(&'a self, op: impl Fn(&'a dyn Device) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>> + 'a,
    {
        let mut tries = 0;
        loop {
            match op(self.inner.as_ref()).await {
                Err(DeviceError::Transient) if tries < TRANSIENT_RETRIES => {
                    tries += 1;
                    self.retries.fetch_add(1, Ordering::Relaxed);
                }
                r => return r,
            }
        }
    }
}

#[async_trait]
impl Device for RetryingDevice {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.run(|d| d.store(key, value, mode)).await
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.run(|d| d.retrieve(key, range)).await
    }

    async fn retrieve_part(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.run(|d| d.retrieve_part(key, range)).await
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.run(|d| d.delete(key, must_exist)).await
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        self.run(|d| d.exist(keys)).await
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        self.run(|d| d.iterate(req)).await
    }

    async fn info(&self) -> Result<DeviceInfo> {
        self.run(|d| d.info()).await
    }

    async fn sync(&self) -> Result<()> {
        self.run(|d| d.sync()).await
    }

    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats> {
        self.run(|d| d.compact(budget_bytes)).await
    }

    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }

    fn remote(&self) -> bool {
        self.inner.remote()
    }

    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FaultConfig, FaultyDevice, MemConfig, MemDevice};

    #[tokio::test]
    async fn transient_errors_are_retried_and_persistent_ones_returned() {
        let mem = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
        let flaky = Arc::new(FaultyDevice::new(
            mem.clone(),
            FaultConfig {
                seed: 7,
                transient_error_prob: 0.3,
                ..FaultConfig::default()
            },
        ));
        let dev = RetryingDevice::new(flaky.clone());
        let mut failed = 0;
        for i in 0..200u32 {
            let key = format!("k{i}");
            match dev.store(key.as_bytes(), b"v", StoreMode::Upsert).await {
                Ok(()) => assert_eq!(
                    mem.retrieve(key.as_bytes(), ReadRange::ALL)
                        .await
                        .unwrap()
                        .value
                        .as_ref(),
                    b"v"
                ),
                Err(DeviceError::Transient) => failed += 1,
                Err(e) => panic!("{e}"),
            }
        }
        // 0.3^4 of 200 operations: about 1.6 persist past the retries; without retries, 60.
        assert!(dev.retries() > 30, "{} retries", dev.retries());
        assert!(failed < 10, "{failed} operations failed");
        // A fail-stop is not retried.
        flaky.fail_stop();
        let before = dev.retries();
        assert!(matches!(
            dev.store(b"x", b"v", StoreMode::Upsert).await,
            Err(DeviceError::Failed { .. })
        ));
        assert_eq!(dev.retries(), before);
    }
}
