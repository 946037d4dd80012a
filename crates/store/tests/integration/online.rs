//! The array healed while it serves: a device whose folder vanishes under the running store is
//! noticed and taken out of service (durably), every acknowledged object stays readable, a
//! replacement is rebuilt in the background while a client writes and reads, after which a
//! scrub finds nothing to repair; a rebuild cut off by a shutdown is resumed by the next start.

use railstore_store::{
    body_from, collect_body, DeviceHealth, DeviceKind, PutOptions, RepairOptions, RepairProgress,
    Store, StoreConfig, StoreError,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The embedded default (RS(3,3), separation on, hybrid policy) on small file devices, with a
/// quick device watch.
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
    c.repair.watch_interval = Duration::from_millis(100);
    c
}

/// [`config`] with a rebuild throttled to one object at a time and 100 KiB/s, so that it is
/// still running when a test acts on it.
fn slow_rebuild_config(dir: &Path) -> StoreConfig {
    let mut c = config(dir);
    c.repair.concurrency = 1;
    c.repair.write_bytes_per_s_max = Some(100 << 10);
    c
}

/// Sizes over every mechanism of the hybrid policy: rep3, pack3+3, split3+3 (inline and
/// chunked records).
fn value(i: usize, version: u8) -> Vec<u8> {
    let len = [700, 9_000, 40_000, 150_000][i % 4];
    let mut v = vec![version; len];
    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    v
}

async fn read(store: &Store, key: &str) -> Result<Vec<u8>, StoreError> {
    let g = store.get_object("bkt", key, None).await?;
    collect_body(g.body).await
}

async fn put(store: &Store, key: &str, v: Vec<u8>) -> Result<(), StoreError> {
    store
        .put_object("bkt", key, body_from(v), PutOptions::default())
        .await
        .map(|_| ())
}

/// A bucket with 40 objects of every size class; returns them.
async fn fill(store: &Store) -> BTreeMap<String, Vec<u8>> {
    store.create_bucket("bkt").await.unwrap();
    let mut model = BTreeMap::new();
    for i in 0..40 {
        let (k, v) = (format!("k{i}"), value(i, 1));
        put(store, &k, v.clone()).await.unwrap();
        model.insert(k, v);
    }
    model
}

async fn check_all(store: &Store, model: &BTreeMap<String, Vec<u8>>) {
    for (k, v) in model {
        let got = read(store, k).await.unwrap_or_else(|e| panic!("{k}: {e}"));
        assert!(got == *v, "{k}: wrong bytes ({} read)", got.len());
    }
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..300 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

/// A client that writes new objects and reads the model's while it runs; what it wrote and was
/// acknowledged joins the model.
fn client(
    store: Store,
    model: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut i = 10_000;
        while !stop.load(Ordering::SeqCst) {
            let key = format!("c{i}");
            let v = value(i, 7);
            put(&store, &key, v.clone())
                .await
                .expect("a put while rebuilding");
            model.lock().unwrap().insert(key, v);
            let probe = format!("k{}", i % 40);
            let want = model.lock().unwrap().get(&probe).cloned();
            if let Some(want) = want {
                assert!(read(&store, &probe).await.unwrap() == want, "{probe}");
            }
            i += 1;
        }
        i - 10_000
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_device_is_failed_and_rebuilt_while_a_client_works() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(cfg.clone()).await.unwrap();
    let model = fill(&store).await;
    // The folder goes under the running store; its open files would keep working unnoticed.
    std::fs::remove_dir_all(dir.path().join("devices").join("2")).unwrap();
    wait_until("device 2 is reported failed", || {
        !store.manager().devices().readable(2)
    })
    .await;
    let s = store.status().await;
    assert_eq!(s.devices[2].recorded, Some(DeviceHealth::Failed), "{s:?}");
    assert!(
        s.devices[2].error.as_deref().unwrap_or("").contains("gone"),
        "{:?}",
        s.devices[2].error
    );
    // At risk: every packed and split object (their pieces span all six devices) and the
    // rep3 objects with a copy on device 2 (about half of the ten); none lost.
    let risk = s.at_risk.clone().expect("degraded");
    assert_eq!(risk.devices_out, vec![2]);
    assert!((30..40).contains(&risk.objects_at_risk), "{risk:?}");
    assert_eq!(
        (risk.objects_without_redundancy, risk.objects_unreadable),
        (0, 0),
        "{risk:?}"
    );
    check_all(&store, &model).await;

    // A device in service is not replaced; an unknown one is refused.
    assert!(matches!(
        store.replace_device(0).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.replace_device(6).await,
        Err(StoreError::InvalidArgument(_))
    ));

    let model = Arc::new(Mutex::new(model));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = client(store.clone(), model.clone(), stop.clone());
    let started = store.replace_device(2).await.unwrap();
    assert!(started.running && started.device == Some(2));
    let done = store.wait_for_repair().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    let written = writer.await.unwrap();
    assert!(!done.running, "{done:?}");
    assert_eq!(
        (done.error.clone(), done.objects_lost),
        (None, 0),
        "{done:?}"
    );
    assert!(done.items_done > 0 && done.bytes_done > 0, "{done:?}");
    let s = store.status().await;
    assert!(s.devices[2].healthy, "{:?}", s.devices[2]);
    assert_eq!(s.devices[2].recorded, Some(DeviceHealth::Ok));
    assert_eq!(s.at_risk, None);
    eprintln!("client wrote {written} objects during the rebuild: {done:?}");

    // Whole again: every object reads, and a scrub has nothing to put back.
    let model = model.lock().unwrap().clone();
    check_all(&store, &model).await;
    assert_whole(&store).await;
    store.shutdown().await.unwrap();
    drop(store);

    // And it opens with every device current.
    let store = reopen(&cfg).await;
    let s = store.status().await;
    assert!(s.devices.iter().all(|d| d.healthy), "{s:?}");
    check_all(&store, &model).await;
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_cut_off_by_a_shutdown_is_resumed_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    // Slow enough that the shutdown comes first.
    let slow = slow_rebuild_config(dir.path());
    let store = Store::open(slow.clone()).await.unwrap();
    let model = fill(&store).await;
    store.fail_device(1, "operator test").unwrap();
    assert_eq!(
        store.status().await.devices[1].recorded,
        Some(DeviceHealth::Failed)
    );
    // Two out of service is what rep3 (the policy's weakest) tolerates; a third is refused.
    // Copies are spread over every other colour of a group of six, so devices two colours
    // apart (1 and 3) both hold copies of some objects: those have none to spare.
    store.fail_device(3, "operator test").unwrap();
    let risk = store.objects_at_risk();
    assert_eq!(risk.devices_out, vec![1, 3]);
    assert_eq!(risk.objects_unreadable, 0, "{risk:?}");
    assert!(
        risk.objects_at_risk >= 30 && risk.objects_without_redundancy > 0,
        "{risk:?}"
    );
    assert!(matches!(
        store.fail_device(4, "operator test"),
        Err(StoreError::Conflict(_))
    ));
    store.replace_device(1).await.unwrap();
    wait_until("the rebuild has written something", || {
        store.repair_status().is_some_and(|r| r.bytes_done > 0)
    })
    .await;
    store.shutdown().await.unwrap();
    let cut = store.repair_status().unwrap();
    assert!(!cut.running && cut.error.is_some(), "{cut:?}");
    drop(store);

    let cfg = config(dir.path());
    let store = reopen(&cfg).await;
    let s = store.status().await;
    assert_eq!(s.devices[1].recorded, Some(DeviceHealth::Rebuilding));
    assert!(!s.devices[1].healthy);
    check_all(&store, &model).await;
    assert_eq!(store.resume_repairs().await.unwrap(), vec![1]);
    let done = store.wait_for_repair().await.unwrap();
    assert_eq!(
        (done.error.clone(), done.objects_lost),
        (None, 0),
        "{done:?}"
    );
    // Device 3 next, by the operator.
    store.replace_device(3).await.unwrap();
    let done = store.wait_for_repair().await.unwrap();
    assert_eq!(
        (done.error.clone(), done.objects_lost),
        (None, 0),
        "{done:?}"
    );
    let s = store.status().await;
    assert!(s.devices.iter().all(|d| d.healthy), "{s:?}");
    check_all(&store, &model).await;
    assert_whole(&store).await;
    store.shutdown().await.unwrap();
}

/// Nothing for a scrub to put back: every piece of every object and set is where it belongs.
async fn assert_whole(store: &Store) {
    let scrub = store
        .scrub(
            RepairOptions::default(),
            Arc::new(RepairProgress::default()),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            scrub.pieces_repaired,
            scrub.objects_lost.len(),
            scrub.sets_lost
        ),
        (0, 0, 0),
        "{scrub:?}"
    );
}

/// Opens the store again once the last one has let go of the data folder.
async fn reopen(cfg: &StoreConfig) -> Store {
    for _ in 0..100 {
        match Store::open(cfg.clone()).await {
            Err(e) if e.to_string().contains("in use") => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            r => return r.unwrap(),
        }
    }
    panic!("the data folder stayed in use");
}

/// A device failed again while it is rebuilt is not readmitted: it stays out of service,
/// recorded failed, and the rebuild reports why it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_failed_during_its_rebuild_stays_out_of_service() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(slow_rebuild_config(dir.path())).await.unwrap();
    let model = fill(&store).await;
    store.fail_device(3, "test").unwrap();
    store.replace_device(3).await.unwrap();
    wait_until("the rebuild has written something", || {
        store.repair_status().is_some_and(|r| r.bytes_done > 0)
    })
    .await;
    store.fail_device(3, "pulled again").unwrap();
    let done = store.wait_for_repair().await.unwrap();
    assert!(done.error.is_some(), "{done:?}");
    let s = store.status().await;
    assert!(!s.devices[3].healthy, "{:?}", s.devices[3]);
    assert_eq!(s.devices[3].recorded, Some(DeviceHealth::Failed));
    check_all(&store, &model).await;
    store.shutdown().await.unwrap();
}

/// Pieces deleted from a device while the store was stopped are put back by the scrub the
/// schedule starts, and every scrub leaves its report in the data folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_scrub_heals_what_it_finds_and_keeps_its_report() {
    use railstore_device::Device;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(cfg.clone()).await.unwrap();
    let model = fill(&store).await;
    store.shutdown().await.unwrap();
    drop(store);
    // Every third piece of device 0 goes (its own records, not rails' reserved keys).
    let dev_dir = dir.path().join("devices").join("0");
    let dev = wait_for_device(&dev_dir);
    let keys = railstore_device::iterate_all(&dev, b"", false)
        .await
        .unwrap();
    let mut deleted = 0;
    for e in keys.iter().filter(|e| e.key[0] != 0xFF).step_by(3) {
        dev.delete(&e.key, true).await.unwrap();
        deleted += 1;
    }
    dev.sync().await.unwrap();
    dev.close_blocking().unwrap();
    drop(dev);
    assert!(deleted > 10, "{deleted} pieces deleted");

    let mut cfg = cfg;
    cfg.repair.scrub_interval = Duration::from_millis(300);
    let store = reopen(&cfg).await;
    assert!(!store.unclean_start());
    wait_until("a scheduled scrub has finished", || {
        store.last_scrub().is_some()
    })
    .await;
    let first = store.last_scrub().unwrap();
    assert_eq!(first.reason, "scheduled");
    assert_eq!(
        (first.error.clone(), first.objects_lost),
        (None, 0),
        "{first:?}"
    );
    assert!(
        first.pieces_repaired >= deleted,
        "{first:?} ({deleted} deleted)"
    );
    check_all(&store, &model).await;
    // The next one, an interval later, finds the array whole.
    wait_until("a second scheduled scrub has finished", || {
        store
            .last_scrub()
            .is_some_and(|r| r.finished_unix_ms > first.finished_unix_ms)
    })
    .await;
    let second = store.last_scrub().unwrap();
    assert_eq!(
        (second.pieces_repaired, second.error.clone()),
        (0, None),
        "{second:?}"
    );
    assert_eq!(store.status().await.last_scrub, Some(second.clone()));
    store.shutdown().await.unwrap();
    let history = std::fs::read_to_string(dir.path().join("scrub-history.jsonl")).unwrap();
    assert!(history.lines().count() >= 2, "{history}");
}

/// Opens a stopped store's device folder once the store has let go of it.
fn wait_for_device(path: &Path) -> railstore_device::FileDevice {
    let cfg = railstore_device::FileConfig {
        capacity_bytes: 1 << 30,
        direct_io: false,
        ..Default::default()
    };
    for _ in 0..100 {
        match railstore_device::FileDevice::open(path, cfg.clone()) {
            Ok(d) => return d,
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    panic!("{} stayed in use", path.display());
}

/// A store on devices of its caller's (as the simulator opens one) gets a failed device
/// replaced by a device the caller gives: refused while it holds anything, rebuilt onto it
/// while it is empty, after which every object reads and a scrub finds the array whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_device_is_rebuilt_onto_an_empty_device_the_caller_gives() {
    use railstore_device::{Device, MemConfig, MemDevice, StoreMode};
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.devices.kind = DeviceKind::Mem;
    let mem = || Arc::new(MemDevice::new(MemConfig::default()).unwrap());
    let devices: Vec<Arc<dyn Device>> = (0..cfg.devices.count)
        .map(|_| mem() as Arc<dyn Device>)
        .collect();
    let store = Store::open_with_devices(cfg, devices).await.unwrap();
    let model = fill(&store).await;

    store.fail_device(2, "pulled for the test").unwrap();
    let used = mem();
    used.store(b"left-over", b"x", StoreMode::Upsert)
        .await
        .unwrap();
    let e = store
        .replace_device_onto(2, used, RepairOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::InvalidArgument(_)), "{e}");
    let fresh = mem();
    store
        .replace_device_onto(2, fresh.clone(), RepairOptions::default())
        .await
        .unwrap();
    let end = store.wait_for_repair().await.unwrap();
    assert_eq!(
        (end.running, &end.error, end.objects_lost),
        (false, &None, 0)
    );
    assert!(
        fresh.info().await.unwrap().key_count > 0,
        "nothing was rebuilt"
    );
    assert!(store.status().await.devices[2].healthy);
    check_all(&store, &model).await;
    assert_whole(&store).await;
    store.shutdown().await.unwrap();
}

/// `railstore device replace N --path P`: a failed device rebuilt onto a new device at another
/// path while serving; bad paths are refused and change nothing; after a restart with the same
/// configuration the device is opened at its new path (the old one is left as it was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_replaced_onto_another_path_is_found_there_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(cfg.clone()).await.unwrap();
    let model = fill(&store).await;
    store.fail_device(2, "operator test").unwrap();

    let elsewhere = tempfile::tempdir().unwrap();
    let full = elsewhere.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("something"), b"x").unwrap();
    let own = dir.path().join("devices").join("2");
    let other = dir.path().join("devices").join("0");
    for (path, why) in [
        (Path::new("relative/dev2"), "must be absolute"),
        (other.as_path(), "device 0 is there"),
        (own.as_path(), "replace it without a path"),
        (full.as_path(), "not empty"),
    ] {
        match store.replace_device_at(2, path).await {
            Err(StoreError::InvalidArgument(e)) => assert!(e.contains(why), "{e}"),
            other => panic!("{}: {other:?}", path.display()),
        }
    }
    let s = store.status().await;
    assert_eq!(s.devices[2].recorded, Some(DeviceHealth::Failed));
    assert!(store.repair_status().is_none());

    let new = elsewhere.path().join("dev2");
    let started = store.replace_device_at(2, &new).await.unwrap();
    assert_eq!(started.device, Some(2));
    let done = store.wait_for_repair().await.unwrap();
    assert_eq!(
        (done.error.clone(), done.objects_lost),
        (None, 0),
        "{done:?}"
    );
    assert!(std::fs::read_dir(&new).unwrap().next().is_some());
    check_all(&store, &model).await;
    store.shutdown().await.unwrap();
    drop(store);

    // The old place still holds the old device, an epoch behind: opened there, it would be
    // out of service. It is opened at the recorded path instead, current.
    assert!(own.exists());
    let store = reopen(&cfg).await;
    let s = store.status().await;
    assert!(s.devices.iter().all(|d| d.healthy), "{s:?}");
    check_all(&store, &model).await;
    assert_whole(&store).await;
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_device_failed_the_window_widens_and_reads_stay_on_readers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path())).await.unwrap();
    let model = fill(&store).await;
    store.fail_device(2, "test").unwrap();
    // Window sizes are planned two frames ahead: from the third frame on, a window holding
    // colour 2 takes one colour more, so three live devices read (docs/admin.md).
    tokio::time::sleep(Duration::from_millis(700)).await;
    let off = || async { store.status().await.window.unwrap() };
    let before = off().await;
    let (mut widened, mut gets) = (false, 0u64);
    // Eight frames: colour 2 enters and leaves the window.
    let until = std::time::Instant::now() + Duration::from_millis(1600);
    while std::time::Instant::now() < until {
        check_all(&store, &model).await;
        gets += model.len() as u64;
        widened |= off().await.size == 4;
    }
    let after = off().await;
    // Without the widening about one GET in five read a writer here (2,397 of 12,520). What
    // may remain is a read planned in the last instant of a frame that reaches its device
    // after the device turned writer (0 on a quiet machine, 1 or 2 with both cores busy).
    let reached = after.off_window_reads - before.off_window_reads;
    assert!(
        reached * 200 <= gets,
        "{reached} of {gets} GETs' reads reached writers with device 2 failed: {after:?}"
    );
    assert!(widened, "the window never widened past device 2: {after:?}");
    store.shutdown().await.unwrap();
}
