//! The reliability manager over read/write-separated devices, in virtual time: random puts,
//! deletes and reads across many role switches return the last acknowledged value, and reads
//! go only to reader-role devices (a packed member on a writer is rebuilt from its set).

use railstore_device::{Device, MemConfig, MemDevice, MeteredDevice, OpKind, ReadRange, StoreMode};
use railstore_rails::{Rails, RailsConfig, Role, ScheduleConfig};
use railstore_redundancy::{Manager, ManagerConfig, Mechanism, Policy, RedundancyError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

async fn run(mech: &str, k: usize, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mechanism = Mechanism::parse(mech).unwrap();
    let n = mechanism.width();
    let metered: Vec<Arc<MeteredDevice>> = (0..n)
        .map(|_| {
            Arc::new(MeteredDevice::new(Arc::new(
                MemDevice::new(MemConfig::default()).unwrap(),
            )))
        })
        .collect();
    // N = n: one group, device d has colour d.
    let colour_of: Vec<usize> = (0..n).collect();
    let schedule = ScheduleConfig {
        frame: Duration::from_millis(200),
        guard: Duration::from_millis(20),
        ..ScheduleConfig::new(n, k)
    };
    let (rails, devs) = Rails::new(
        RailsConfig::new(schedule),
        metered
            .iter()
            .map(|m| m.clone() as Arc<dyn Device>)
            .collect(),
        colour_of,
    )
    .unwrap();
    let m = Manager::open(
        devs,
        ManagerConfig {
            policy: Policy::Standalone(mechanism),
            pack_wait: Duration::from_millis(1),
            ..ManagerConfig::default()
        },
    )
    .await
    .unwrap();
    m.devices().set_read_plan(rails.read_plan());
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut reads_checked = 0;
    for i in 0..600 {
        let key = format!("o{}", rng.gen_range(0..50)).into_bytes();
        match rng.gen_range(0..10) {
            0..=3 => {
                let mut v = vec![0u8; rng.gen_range(0..30_000)];
                rng.fill(v.as_mut_slice());
                m.put(&key, &v, StoreMode::Upsert, None).await.unwrap();
                model.insert(key, v);
            }
            4 => {
                m.delete(&key).await.unwrap();
                model.remove(&key);
            }
            _ => {
                // Reads must not touch writer-role devices: count their retrieves around it.
                let before: Vec<u64> = metered
                    .iter()
                    .map(|d| d.stats(OpKind::Retrieve).ops)
                    .collect();
                let roles: Vec<Role> = (0..n).map(|d| rails.role(d)).collect();
                let got = m.get(&key, ReadRange::ALL).await;
                let roles_after: Vec<Role> = (0..n).map(|d| rails.role(d)).collect();
                match (model.get(&key), got) {
                    (Some(v), Ok((g, _))) => {
                        assert!(g == *v, "{mech} seed {seed} op {i}: wrong bytes")
                    }
                    (None, Err(RedundancyError::NotFound { .. })) => {}
                    (want, got) => panic!(
                        "{mech} seed {seed} op {i}: want {:?} B, got {got:?}",
                        want.map(|v| v.len())
                    ),
                }
                if roles == roles_after && model.contains_key(&key) {
                    reads_checked += 1;
                    for d in 0..n {
                        let reads = metered[d].stats(OpKind::Retrieve).ops - before[d];
                        if roles[d] != Role::Reader {
                            assert_eq!(
                                reads, 0,
                                "{mech} seed {seed} op {i}: {:?} device {d} served {reads} reads",
                                roles[d]
                            );
                        }
                    }
                }
            }
        }
        if rng.gen_bool(0.1) {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(1..60))).await;
        }
    }
    assert!(reads_checked > 50, "only {reads_checked} reads checked");
    let flushed: u64 = (0..n)
        .map(|d| {
            rails
                .counters(d)
                .flushed_ops
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    assert!(flushed > 0, "{mech}: nothing was buffered");
    // After every buffer drained, a manager without separation reads the same.
    rails.drain().await.unwrap();
    let plain = Manager::open(
        metered
            .iter()
            .map(|m| m.clone() as Arc<dyn Device>)
            .collect(),
        ManagerConfig {
            policy: Policy::Standalone(mechanism),
            ..ManagerConfig::default()
        },
    )
    .await
    .unwrap();
    for (k, v) in &model {
        let (g, _) = plain.get(k, ReadRange::ALL).await.unwrap();
        assert!(g == *v, "{mech} seed {seed}: {k:?} wrong after drain");
    }
}

#[tokio::test(start_paused = true)]
async fn separated_arrays_return_the_last_acknowledged_value() {
    for seed in 1..=3 {
        run("rep2", 1, seed).await;
        run("rep3", 2, seed).await;
        run("split3+3", 3, seed).await;
        run("split4+2", 4, seed).await;
        run("pack4+2", 4, seed).await;
    }
}
