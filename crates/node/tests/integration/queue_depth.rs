//! The remote device keeps its calls within the node device's queue depth.

use crate::common::*;
use async_trait::async_trait;
use railstore_device::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts the operations in flight at once; each takes a moment, so that they overlap.
struct InFlight {
    inner: MemDevice,
    now: AtomicUsize,
    most: AtomicUsize,
}

impl InFlight {
    async fn hold<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let r = f.await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

#[async_trait]
impl Device for InFlight {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.hold(self.inner.store(key, value, mode)).await
    }
    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.hold(self.inner.retrieve(key, range)).await
    }
    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.hold(self.inner.delete(key, must_exist)).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        self.hold(self.inner.exist(keys)).await
    }
    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        self.hold(self.inner.iterate(req)).await
    }
    async fn info(&self) -> Result<DeviceInfo> {
        self.inner.info().await
    }
    async fn sync(&self) -> Result<()> {
        self.hold(self.inner.sync()).await
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_stay_within_the_nodes_queue_depth() {
    const DEPTH: usize = 4;
    let device = Arc::new(InFlight {
        inner: MemDevice::new(MemConfig {
            queue_depth_max: DEPTH,
            ..Default::default()
        })
        .unwrap(),
        now: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
    });
    let (_node, dev) = remote(device.clone()).await;
    assert_eq!(dev.info().await.unwrap().queue_depth_max, DEPTH);
    let dev = Arc::new(dev);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64u32 {
        let dev = dev.clone();
        tasks.spawn(async move {
            let key = format!("k{i}");
            dev.store(key.as_bytes(), &i.to_le_bytes(), StoreMode::Upsert)
                .await?;
            dev.retrieve(key.as_bytes(), ReadRange::ALL).await.map(drop)
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    let most = device.most.load(Ordering::SeqCst);
    assert!(
        most <= DEPTH,
        "{most} operations in flight at a device of depth {DEPTH}"
    );
    assert!(
        most > 1,
        "the remote device ran its operations one at a time"
    );
}
