//! Durable device identity and state: a device image that missed writes is never read (the
//! array starts degraded without it and a rebuild re-admits it), a missing device folder is not
//! recreated empty, swapped or foreign devices are refused, more devices out of service than
//! the configuration tolerates are refused, and a device that failed while serving stays
//! failed across restarts.

use railstore_store::{
    body_from, collect_body, DeviceHealth, DeviceKind, PutOptions, RepairOptions, RepairProgress,
    Store, StoreConfig, StoreError,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The embedded default (RS(3,3), separation on, hybrid policy) on small file devices.
fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig {
        data_dir: dir.to_path_buf(),
        ..StoreConfig::default()
    };
    c.devices.kind = DeviceKind::File;
    c.devices.capacity_bytes = 1 << 30;
    c.devices.direct_io = false;
    if let Some(s) = &mut c.separation {
        s.frame = Duration::from_millis(200);
    }
    c
}

fn device_dir(dir: &Path, d: usize) -> std::path::PathBuf {
    dir.join("devices").join(d.to_string())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn value(i: usize, version: u8) -> Vec<u8> {
    let mut v = vec![version; 1024];
    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    v
}

async fn read(store: &Store, key: &str) -> Result<Vec<u8>, StoreError> {
    let g = store.get_object("bkt", key, None).await?;
    collect_body(g.body).await
}

async fn put(store: &Store, i: usize, version: u8) {
    store
        .put_object(
            "bkt",
            &format!("k{i}"),
            body_from(value(i, version)),
            PutOptions::default(),
        )
        .await
        .unwrap();
}

/// 300 objects written, device 2's folder copied aside while stopped, 150 overwritten and 150
/// deleted, the old folder put back: no client may read an old version or a deleted object,
/// the device is reported stale, and a rebuild brings it back in service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_device_image_is_never_read_and_a_rebuild_readmits_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(cfg.clone()).await.unwrap();
    store.create_bucket("bkt").await.unwrap();
    for i in 0..300 {
        put(&store, i, 1).await;
    }
    store.shutdown().await.unwrap();
    drop(store);
    let aside = dir.path().join("device-2-copy");
    copy_dir(&device_dir(dir.path(), 2), &aside);

    let store = Store::open(cfg.clone()).await.unwrap();
    for i in 0..150 {
        put(&store, i, 2).await;
    }
    for i in 150..300 {
        assert!(store.delete_object("bkt", &format!("k{i}")).await.unwrap());
    }
    store.shutdown().await.unwrap();
    drop(store);
    std::fs::remove_dir_all(device_dir(dir.path(), 2)).unwrap();
    copy_dir(&aside, &device_dir(dir.path(), 2));

    let check = |store: Store| async move {
        for i in 0..150 {
            assert_eq!(
                read(&store, &format!("k{i}")).await.unwrap(),
                value(i, 2),
                "k{i} reads an old version"
            );
        }
        for i in 150..300 {
            match read(&store, &format!("k{i}")).await {
                Err(StoreError::NoSuchKey { .. }) => {}
                other => panic!("k{i} was deleted, yet reads {:?}", other.map(|v| v.len())),
            }
        }
        store
    };
    let store = check(Store::open(cfg.clone()).await.unwrap()).await;
    let status = store.status().await;
    let d2 = &status.devices[2];
    assert!(!d2.healthy, "the stale device is in service: {d2:?}");
    assert_eq!(d2.recorded, Some(DeviceHealth::Failed));
    assert!(
        d2.error.as_deref().unwrap_or("").contains("stale"),
        "{:?}",
        d2.error
    );
    store.shutdown().await.unwrap();
    drop(store);

    // Still out of service at the next start: only a rebuild re-admits it.
    let store = Store::open(cfg.clone()).await.unwrap();
    assert!(!store.status().await.devices[2].healthy);
    store.shutdown().await.unwrap();
    drop(store);
    let report = Store::rebuild_offline(
        cfg.clone(),
        2,
        RepairOptions::default(),
        Arc::new(RepairProgress::default()),
    )
    .await
    .unwrap();
    assert!(report.objects_lost.is_empty(), "{report:?}");
    let store = Store::open(cfg).await.unwrap();
    let status = store.status().await;
    assert!(
        status.devices.iter().all(|d| d.healthy),
        "after the rebuild: {:?}",
        status.devices
    );
    let store = check(store).await;
    store.shutdown().await.unwrap();
}

/// A device folder that disappeared is not recreated empty: the array starts degraded with the
/// device out of service while the configuration tolerates it, and refuses beyond that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_device_is_out_of_service_and_too_many_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(cfg.clone()).await.unwrap();
    store.create_bucket("bkt").await.unwrap();
    for i in 0..50 {
        put(&store, i, 1).await;
    }
    store.shutdown().await.unwrap();
    drop(store);

    std::fs::remove_dir_all(device_dir(dir.path(), 4)).unwrap();
    let store = Store::open(cfg.clone()).await.unwrap();
    assert!(
        !device_dir(dir.path(), 4).exists(),
        "the missing folder was recreated"
    );
    let d4 = &store.status().await.devices[4];
    assert!(!d4.healthy);
    assert!(
        d4.error.as_deref().unwrap_or("").contains("missing"),
        "{d4:?}"
    );
    for i in 0..50 {
        assert_eq!(read(&store, &format!("k{i}")).await.unwrap(), value(i, 1));
    }
    store.shutdown().await.unwrap();
    drop(store);

    // rep3 tolerates 2 lost pieces; 3 devices out of service is more.
    std::fs::remove_dir_all(device_dir(dir.path(), 0)).unwrap();
    std::fs::remove_dir_all(device_dir(dir.path(), 1)).unwrap();
    let e = Store::open(cfg.clone()).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("3 devices are not current") && text.contains("tolerates 2"),
        "{text}"
    );
    for d in [0, 1, 4] {
        assert!(!device_dir(dir.path(), d).exists(), "device {d} recreated");
    }
}

/// Devices swapped between positions, or taken from another array, are refused with the
/// reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapped_or_foreign_devices_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(cfg.clone()).await.unwrap();
    store.create_bucket("bkt").await.unwrap();
    put(&store, 1, 1).await;
    store.shutdown().await.unwrap();
    drop(store);

    let (a, b) = (device_dir(dir.path(), 0), device_dir(dir.path(), 1));
    let tmp = dir.path().join("swap");
    std::fs::rename(&a, &tmp).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&tmp, &b).unwrap();
    let e = Store::open(cfg.clone()).await.unwrap_err();
    assert!(e.to_string().contains("swapped"), "{e}");
    // Put back, it opens.
    std::fs::rename(&a, &tmp).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&tmp, &b).unwrap();
    Store::open(cfg.clone())
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();

    let other_dir = tempfile::tempdir().unwrap();
    let other = Store::open(config(other_dir.path())).await.unwrap();
    other.shutdown().await.unwrap();
    drop(other);
    std::fs::remove_dir_all(device_dir(dir.path(), 3)).unwrap();
    copy_dir(&device_dir(other_dir.path(), 3), &device_dir(dir.path(), 3));
    let e = Store::open(cfg).await.unwrap_err();
    assert!(e.to_string().contains("another array"), "{e}");
}

/// A device marked failed while serving is recorded as failed before the failure is acted on,
/// so a restart does not take it back although it opens fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_failed_while_serving_stays_failed_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(cfg.clone()).await.unwrap();
    store.create_bucket("bkt").await.unwrap();
    store.manager().devices().mark_failed(3);
    for i in 0..20 {
        put(&store, i, 1).await;
    }
    // Dropped without a shutdown, like a crash.
    drop(store);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let store = Store::open(cfg).await.unwrap();
    let d3 = &store.status().await.devices[3];
    assert!(!d3.healthy, "{d3:?}");
    assert_eq!(d3.recorded, Some(DeviceHealth::Failed));
    for i in 0..20 {
        assert_eq!(read(&store, &format!("k{i}")).await.unwrap(), value(i, 1));
    }
    store.shutdown().await.unwrap();
}
