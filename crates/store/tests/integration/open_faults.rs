//! Device faults while the array opens or shuts down cost at most that device, never the whole
//! array (simulator bugs SIM-2, SIM-3, SIM-4): transient errors are retried, a device that
//! fail-stops before a clean shutdown leaves service and the shutdown completes, and a flipped
//! bit in one device's identity record takes that device out of service instead of refusing the
//! array.

use railstore_device::{
    Device, FaultConfig, FaultyDevice, MemConfig, MemDevice, ReadRange, StoreMode,
};
use railstore_rails::journal::IDENTITY_KEY;
use railstore_store::{
    body_from, collect_body, DeviceHealth, DeviceKind, PutOptions, Store, StoreConfig,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const DEVICES: usize = 6;
const OBJECTS: usize = 40;

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig {
        data_dir: dir.to_path_buf(),
        ..StoreConfig::default()
    };
    c.devices.kind = DeviceKind::Mem;
    c.devices.count = DEVICES;
    if let Some(s) = &mut c.separation {
        s.frame = Duration::from_millis(200);
    }
    c
}

/// Every object protected by `mechanism`, without separation.
fn config_of_one_mechanism(dir: &Path, mechanism: &str) -> StoreConfig {
    let mut c = config(dir);
    c.separation = None;
    c.manager.policy = railstore_redundancy::Policy::Standalone(
        railstore_redundancy::Mechanism::parse(mechanism).unwrap(),
    );
    c
}

fn disks() -> Vec<Arc<MemDevice>> {
    (0..DEVICES)
        .map(|_| Arc::new(MemDevice::new(MemConfig::default()).unwrap()))
        .collect()
}

/// The disks behind fault injectors with `transient` errors per operation.
fn faulty(disks: &[Arc<MemDevice>], transient: f64) -> Vec<Arc<FaultyDevice>> {
    disks
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Arc::new(FaultyDevice::new(
                d.clone(),
                FaultConfig {
                    seed: 11 + i as u64,
                    transient_error_prob: transient,
                    ..FaultConfig::default()
                },
            ))
        })
        .collect()
}

fn as_devices(f: &[Arc<FaultyDevice>]) -> Vec<Arc<dyn Device>> {
    f.iter().map(|d| d.clone() as Arc<dyn Device>).collect()
}

/// Sizes across the hybrid policy's mechanisms (inline copies, packed, split chunks).
fn value(i: usize) -> Vec<u8> {
    let len = [100, 3000, 20_000, 200_000][i % 4];
    (0..len).map(|b| (b * 31 + i) as u8).collect()
}

/// A fresh array with `OBJECTS` objects, shut down cleanly.
async fn populated(dir: &Path, disks: &[Arc<MemDevice>]) {
    populated_with(config(dir), disks).await
}

/// [`populated`] with `cfg`.
async fn populated_with(cfg: StoreConfig, disks: &[Arc<MemDevice>]) {
    let store = Store::open_with_devices(cfg, as_devices(&faulty(disks, 0.0)))
        .await
        .unwrap();
    store.create_bucket("bkt").await.unwrap();
    for i in 0..OBJECTS {
        store
            .put_object(
                "bkt",
                &format!("k{i}"),
                body_from(value(i)),
                PutOptions::default(),
            )
            .await
            .unwrap();
    }
    store.shutdown().await.unwrap();
}

async fn check_all(store: &Store) {
    for i in 0..OBJECTS {
        let g = store
            .get_object("bkt", &format!("k{i}"), None)
            .await
            .unwrap_or_else(|e| panic!("k{i}: {e}"));
        assert_eq!(collect_body(g.body).await.unwrap(), value(i), "k{i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_while_opening_are_retried() {
    let dir = tempfile::tempdir().unwrap();
    let disks = disks();
    populated(dir.path(), &disks).await;
    // One operation in ten fails transiently on every device, from the first identity read on.
    let store = Store::open_with_devices(config(dir.path()), as_devices(&faulty(&disks, 0.1)))
        .await
        .unwrap();
    check_all(&store).await;
    let st = store.status().await;
    assert!(st.devices.iter().all(|d| d.healthy), "{:?}", st.devices);
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_fails_before_a_clean_shutdown_leaves_service_and_the_shutdown_completes() {
    for separation in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path());
        if !separation {
            cfg.separation = None;
        }
        let disks = disks();
        populated(dir.path(), &disks).await;
        let f = faulty(&disks, 0.0);
        let store = Store::open_with_devices(cfg.clone(), as_devices(&f))
            .await
            .unwrap();
        f[2].fail_stop();
        // Overwrites after the failure: some pieces and buffered writes are for device 2.
        for i in 0..OBJECTS / 2 {
            store
                .put_object(
                    "bkt",
                    &format!("k{i}"),
                    body_from(value(i)),
                    PutOptions::default(),
                )
                .await
                .unwrap();
        }
        store
            .shutdown()
            .await
            .unwrap_or_else(|e| panic!("separation {separation}: {e}"));
        drop(store);
        let store = Store::open_with_devices(cfg, as_devices(&f)).await.unwrap();
        let d2 = &store.status().await.devices[2];
        assert!(!d2.healthy, "{d2:?}");
        assert_eq!(d2.recorded, Some(DeviceHealth::Failed));
        check_all(&store).await;
        store.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_bit_in_one_identity_record_takes_only_that_device_out_of_service() {
    let dir = tempfile::tempdir().unwrap();
    let disks = disks();
    populated(dir.path(), &disks).await;
    // Flip one bit in the array id of device 4's record: the JSON still parses, and names
    // another array.
    let rec = disks[4]
        .retrieve(&IDENTITY_KEY, ReadRange::ALL)
        .await
        .unwrap()
        .value
        .to_vec();
    let at = rec
        .windows(10)
        .position(|w| w == b"\"array_id\"")
        .expect("the record names its array")
        + 13;
    let mut bad = rec.clone();
    bad[at] ^= 0x01;
    disks[4]
        .store(&IDENTITY_KEY, &bad, StoreMode::Upsert)
        .await
        .unwrap();
    let store = Store::open_with_devices(config(dir.path()), as_devices(&faulty(&disks, 0.0)))
        .await
        .unwrap();
    let d4 = &store.status().await.devices[4];
    assert!(!d4.healthy, "{d4:?}");
    assert!(
        d4.error.as_deref().is_some_and(|e| e.contains("checksum")),
        "{d4:?}"
    );
    check_all(&store).await;
    store.shutdown().await.unwrap();
}

/// A record with too few pieces on the devices in service (a put a crash cut off while a device
/// was out) is left unindexed, and the open goes on (simulator bug SIM-5): before, the whole
/// array refused to open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_record_does_not_stop_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let disks = disks();
    let cfg = config_of_one_mechanism(dir.path(), "split3+3");
    populated_with(cfg.clone(), &disks).await;
    // One object record keeps two pieces in service: device 0 is gone, and three others lost
    // theirs.
    let records = railstore_device::iterate_all(disks[1].as_ref(), b"oK", false)
        .await
        .unwrap();
    let victim = records[0].key.clone();
    for d in [1, 2, 3] {
        disks[d].delete(&victim, true).await.unwrap();
    }
    let f = faulty(&disks, 0.0);
    f[0].fail_stop();
    let store = Store::open_with_devices(cfg, as_devices(&f)).await.unwrap();
    let mut readable = 0;
    for i in 0..OBJECTS {
        if let Ok(g) = store.get_object("bkt", &format!("k{i}"), None).await {
            assert_eq!(collect_body(g.body).await.unwrap(), value(i), "k{i}");
            readable += 1;
        }
    }
    assert_eq!(readable, OBJECTS - 1);
    store.shutdown().await.unwrap();
}

/// After an unclean shutdown the open rolls each record forward or back and rewrites its
/// missing copies; those rewrites are durable before the open returns. Before, a power cut
/// right after the open took them back, and losing the one device a cut delete had left the
/// record on (within the tolerance) lost an object the open had shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclean_open_makes_its_repairs_durable() {
    let dir = tempfile::tempdir().unwrap();
    let disks = disks();
    let cfg = config_of_one_mechanism(dir.path(), "rep3");
    let volatile = || -> Vec<Arc<FaultyDevice>> {
        disks
            .iter()
            .map(|d| {
                Arc::new(FaultyDevice::new(
                    d.clone(),
                    FaultConfig {
                        volatile_writes: true,
                        ..FaultConfig::default()
                    },
                ))
            })
            .collect()
    };
    let f = volatile();
    let store = Store::open_with_devices(cfg.clone(), as_devices(&f))
        .await
        .unwrap();
    store.create_bucket("bkt").await.unwrap();
    store
        .put_object("bkt", "k", body_from(value(0)), PutOptions::default())
        .await
        .unwrap();
    // A process crash in the middle of a delete: two of the record's three copies are gone.
    drop(store);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut holders = Vec::new();
    for (d, disk) in disks.iter().enumerate() {
        let keys = railstore_device::iterate_all(disk.as_ref(), b"oK", false)
            .await
            .unwrap();
        if let Some(k) = keys.first() {
            holders.push((d, k.key.clone()));
        }
    }
    assert_eq!(holders.len(), 3, "rep3 keeps three copies of the record");
    for (d, key) in &holders[..2] {
        disks[*d].delete(key, true).await.unwrap();
    }
    let f = volatile();
    let store = Store::open_with_devices(cfg.clone(), as_devices(&f))
        .await
        .unwrap();
    let g = store.get_object("bkt", "k", None).await.unwrap();
    assert_eq!(collect_body(g.body).await.unwrap(), value(0));
    // Power fails, and the device holding the surviving copy is lost.
    for d in &f {
        d.crash().await;
    }
    drop(store);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let f = volatile();
    f[holders[2].0].fail_stop();
    let store = Store::open_with_devices(cfg, as_devices(&f)).await.unwrap();
    let g = store
        .get_object("bkt", "k", None)
        .await
        .expect("the object the open showed is still there");
    assert_eq!(collect_body(g.body).await.unwrap(), value(0));
}
