//! Reads stay on this node where they may: with copies on this node's devices and on remote
//! ones, a replicated object is read from the local copy; with the local device failed, from a
//! remote one.

use crate::shaped::Shaped;
use railstore_device::*;
use railstore_redundancy::{Manager, ManagerConfig, Mechanism, Policy};
use std::sync::Arc;

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
                    Arc::new(Shaped::remote(Arc::new(mem)))
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
