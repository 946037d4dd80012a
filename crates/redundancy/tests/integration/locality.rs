//! Reads stay on this node where they may: with copies on this node's devices and on remote
//! ones, a replicated object is read from the local copy; with the local device failed, from a
//! remote one.

use async_trait::async_trait;
use railstore_device::*;
use railstore_redundancy::{Manager, ManagerConfig, Mechanism, Policy};
use std::sync::Arc;

/// A memory device that says it is on another node.
struct Remote(MemDevice);

#[async_trait]
impl Device for Remote {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.0.store(key, value, mode).await
    }
    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.0.retrieve(key, range).await
    }
    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.0.delete(key, must_exist).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        self.0.exist(keys).await
    }
    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        self.0.iterate(req).await
    }
    async fn info(&self) -> Result<DeviceInfo> {
        self.0.info().await
    }
    async fn sync(&self) -> Result<()> {
        self.0.sync().await
    }
    fn limits(&self) -> Limits {
        self.0.limits()
    }
    fn remote(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn replicated_reads_take_the_local_copy_first() {
    // Three devices, rep3: every object has a copy on each. Device `local` is this node's.
    for local in 0..3 {
        let metered: Vec<Arc<MeteredDevice>> = (0..3)
            .map(|d| {
                let mem = MemDevice::new(MemConfig::default()).unwrap();
                let inner: Arc<dyn Device> = if d == local {
                    Arc::new(mem)
                } else {
                    Arc::new(Remote(mem))
                };
                Arc::new(MeteredDevice::new(inner))
            })
            .collect();
        let devices: Vec<Arc<dyn Device>> = metered
            .iter()
            .map(|m| m.clone() as Arc<dyn Device>)
            .collect();
        let config = ManagerConfig {
            policy: Policy::Standalone(Mechanism::parse("rep3").unwrap()),
            ..ManagerConfig::default()
        };
        let m = Manager::open(devices, config).await.unwrap();
        for i in 0..40 {
            let key = format!("object-{i}");
            m.put(key.as_bytes(), key.as_bytes(), StoreMode::Upsert, None)
                .await
                .unwrap();
        }
        let reads = |d: usize| metered[d].stats(OpKind::Retrieve).ops;
        let before: Vec<u64> = (0..3).map(reads).collect();
        for i in 0..40 {
            let key = format!("object-{i}");
            let (got, _) = m.get(key.as_bytes(), ReadRange::ALL).await.unwrap();
            assert_eq!(got, key.as_bytes());
        }
        let after: Vec<u64> = (0..3).map(reads).collect();
        for d in 0..3 {
            let n = after[d] - before[d];
            if d == local {
                assert_eq!(n, 40, "local device {d}: every read there");
            } else {
                assert_eq!(n, 0, "remote device {d} read {n} times (local {local})");
            }
        }
        // Without the local device, the copies on the other nodes serve.
        m.devices().mark_failed(local);
        for i in 0..40 {
            let key = format!("object-{i}");
            let (got, _) = m.get(key.as_bytes(), ReadRange::ALL).await.unwrap();
            assert_eq!(got, key.as_bytes());
        }
        let remote_reads: u64 = (0..3)
            .filter(|&d| d != local)
            .map(|d| reads(d) - after[d])
            .sum();
        assert_eq!(remote_reads, 40);
    }
}
