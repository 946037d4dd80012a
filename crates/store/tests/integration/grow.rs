//! Growing the array from six to twelve devices and draining it back, on file devices: the
//! objects whose group changed move while a client writes, reads and deletes, every object
//! reads as the model says before, during and after, a restart in the middle of a move
//! resumes it, and after the drain's clean shutdown the array is six devices again.

use railstore_store::{
    body_from, collect_body, DeviceKind, ListQuery, PutOptions, RepairOptions, RepairProgress,
    Store, StoreConfig, StoreError,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Model = Arc<Mutex<BTreeMap<String, Vec<u8>>>>;

/// The embedded default (RS(3,3), separation on, hybrid policy) on small file devices, the
/// move throttled so that clients meet it half done.
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
    c.repair.concurrency = 2;
    c.repair.write_bytes_per_s_max = Some(2 << 20);
    c
}

/// Sizes over every mechanism of the hybrid policy: rep3, pack3+3, split3+3.
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

async fn put(store: &Store, key: &str, v: Vec<u8>) {
    store
        .put_object("bkt", key, body_from(v), PutOptions::default())
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

async fn check_all(store: &Store, model: &Model, when: &str) {
    let model = model.lock().unwrap().clone();
    for (k, v) in &model {
        let got = read(store, k)
            .await
            .unwrap_or_else(|e| panic!("{when}: {k}: {e}"));
        assert!(got == *v, "{when}: {k}: wrong bytes ({} read)", got.len());
    }
    let listed = store
        .list_objects(
            "bkt",
            &ListQuery {
                max_keys: 1000,
                ..ListQuery::default()
            },
        )
        .unwrap();
    let names: Vec<&str> = listed.objects.iter().map(|o| o.key.as_str()).collect();
    let want: Vec<&str> = model.keys().map(String::as_str).collect();
    assert_eq!(names, want, "{when}: listing");
}

/// Shuts `store` down and lets its data folder go.
async fn close(store: Store) {
    store.shutdown().await.unwrap();
    drop(store);
}

/// A new array of `cfg` with 120 objects, shut down; returns its model.
async fn filled(cfg: &StoreConfig) -> Model {
    let model: Model = Arc::default();
    let store = Store::open(cfg.clone()).await.unwrap();
    store.create_bucket("bkt").await.unwrap();
    for i in 0..120 {
        let (k, v) = (format!("k{i:03}"), value(i, 1));
        put(&store, &k, v.clone()).await;
        model.lock().unwrap().insert(k, v);
    }
    close(store).await;
    model
}

/// Overwrites, new objects, deletes and checked reads until `stop`.
fn client(store: Store, model: Model, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut i = 0;
        while !stop.load(Ordering::SeqCst) {
            let n = 1000 + i;
            match i % 4 {
                0 => {
                    let (k, v) = (format!("k{:03}", n % 120), value(n, 2));
                    put(&store, &k, v.clone()).await;
                    model.lock().unwrap().insert(k, v);
                }
                1 => {
                    let (k, v) = (format!("c{n}"), value(n, 3));
                    put(&store, &k, v.clone()).await;
                    model.lock().unwrap().insert(k, v);
                }
                2 => {
                    let k = format!("k{:03}", (n * 7) % 120);
                    match store.delete_object("bkt", &k).await {
                        Ok(_) => {
                            model.lock().unwrap().remove(&k);
                        }
                        Err(e) => panic!("delete {k}: {e}"),
                    }
                }
                _ => {
                    let k = format!("k{:03}", (n * 13) % 120);
                    let want = model.lock().unwrap().get(&k).cloned();
                    match (read(&store, &k).await, want) {
                        (Ok(got), Some(want)) => assert!(got == want, "{k} during the move"),
                        (Err(StoreError::NoSuchKey { .. }), None) => {}
                        (got, want) => panic!(
                            "{k} during the move: {:?}, the model has {:?} B",
                            got.map(|v| v.len()),
                            want.map(|v| v.len())
                        ),
                    }
                }
            }
            i += 1;
        }
        i
    })
}

/// Waits until the move has moved a few objects (or two seconds).
async fn move_under_way(store: &Store) {
    for _ in 0..200 {
        if store.repair_status().is_some_and(|r| r.items_done >= 5) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An array of 120 objects grown 6 to 12 and opened, its move under way.
async fn grown_and_moving() -> (tempfile::TempDir, StoreConfig, Model, Store) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let model = filled(&cfg).await;
    Store::grow_offline(cfg.clone(), 6, vec![]).await.unwrap();
    let store = Store::open(cfg.clone()).await.unwrap();
    move_under_way(&store).await;
    (dir, cfg, model, store)
}

/// Waits until a grow's move (started again by the move schedule) has finished, and checks
/// that it did without an error.
async fn grow_finished(store: &Store) {
    let mut finished = None;
    for _ in 0..300 {
        match store.repair_status() {
            Some(r) if r.kind == "grow" && !r.running => {
                finished = Some(r);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let finished = finished.unwrap_or_else(|| panic!("{:?}", store.repair_status()));
    assert_eq!(finished.error, None, "{finished:?}");
    assert!(store.manager().moving().is_none());
}

/// Runs the store's move with a client working until it is done; returns its status.
async fn move_with_client(
    store: &Store,
    model: &Model,
    kind: &str,
) -> railstore_store::RepairStatus {
    let stop = Arc::new(AtomicBool::new(false));
    let c = client(store.clone(), model.clone(), stop.clone());
    let mut status = None;
    for _ in 0..1200 {
        match store.repair_status() {
            Some(r) if !r.running => {
                status = Some(r);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    stop.store(true, Ordering::SeqCst);
    let steps = c.await.unwrap();
    let status = status.expect("the move ended");
    assert_eq!(status.kind, kind, "{status:?}");
    assert_eq!(status.error, None, "{status:?}");
    assert!(steps > 0, "the client worked during the move");
    assert!(store.manager().moving().is_none());
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_grows_and_drains_while_a_client_works() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let model = filled(&cfg).await;

    // Refused while the server runs (the data folder is locked), and refused uneven.
    let running = Store::open(cfg.clone()).await.unwrap();
    let e = Store::grow_offline(cfg.clone(), 6, vec![])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
    close(running).await;
    let e = Store::grow_offline(cfg.clone(), 4, vec![])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("multiple of 6"), "{e}");
    let e = Store::drain_offline(&cfg).unwrap_err();
    assert!(e.to_string().contains("never grown"), "{e}");

    let grown = Store::grow_offline(cfg.clone(), 6, vec![]).await.unwrap();
    assert_eq!((grown.devices_before, grown.devices_after), (6, 12));

    // The move starts with the server; a shutdown in the middle leaves it to the next start.
    let store = Store::open(cfg.clone()).await.unwrap();
    assert_eq!(store.manager().devices().len(), 12);
    check_all(&store, &model, "grown, the move starting").await;
    move_under_way(&store).await;
    let cut = store.repair_status().expect("the move started");
    assert!(cut.running && cut.items_done >= 5, "{cut:?}");
    close(store).await;
    assert!(dir.path().join("moving").exists());

    let store = Store::open(cfg.clone()).await.unwrap();
    let status = move_with_client(&store, &model, "grow").await;
    // Half the groups are new: about half the keys move (the goal is at most 55 %).
    let keys = store.manager().keys(b"").await.unwrap().len() as f64;
    assert!(
        (status.items_total as f64) < 0.62 * keys,
        "{} of {keys} keys moved",
        status.items_total
    );
    check_all(&store, &model, "grown, moved").await;
    assert!(!dir.path().join("moving").exists());
    close(store).await;

    let store = Store::open(cfg.clone()).await.unwrap();
    assert_eq!(store.manager().devices().len(), 12);
    assert!(store.manager().moving().is_none());
    check_all(&store, &model, "grown, reopened").await;
    let status = store.status().await;
    assert_eq!(status.devices.len(), 12);
    close(store).await;

    // Drain the six added devices.
    assert_eq!(Store::drain_offline(&cfg).unwrap(), 6..12);
    let store = Store::open(cfg.clone()).await.unwrap();
    move_with_client(&store, &model, "drain").await;
    check_all(&store, &model, "drained").await;
    close(store).await;
    assert!(!dir.path().join("moving").exists());

    let store = Store::open(cfg.clone()).await.unwrap();
    assert_eq!(store.manager().devices().len(), 6);
    check_all(&store, &model, "drained, reopened").await;
    close(store).await;
    let state = std::fs::read_to_string(dir.path().join("array.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["devices"].as_array().unwrap().len(), 6);

    // The drained devices' folders went with them, so the array grows there again.
    assert!(dir.path().join("devices/5").exists());
    assert!(!dir.path().join("devices/6").exists());
    let again = Store::grow_offline(cfg.clone(), 6, vec![]).await.unwrap();
    assert_eq!(again.devices_after, 12);
    let store = Store::open(cfg.clone()).await.unwrap();
    move_with_client(&store, &model, "grow").await;
    check_all(&store, &model, "grown again").await;
    close(store).await;
}

/// `railstore device remove`: a grown array drains while it serves. The switch to the kept
/// layout happens under a client's load; a shutdown in the middle of the move leaves it to
/// the next start (the drain was recorded); the clean shutdown after it removes the devices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_drains_while_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let model = filled(&cfg).await;
    let store = Store::open(cfg.clone()).await.unwrap();
    let e = store.drain_online().await.unwrap_err();
    assert!(e.to_string().contains("never grown"), "{e}");
    close(store).await;
    Store::grow_offline(cfg.clone(), 6, vec![]).await.unwrap();
    let store = Store::open(cfg.clone()).await.unwrap();
    let e = store.drain_online().await.unwrap_err();
    assert!(e.to_string().contains("is running"), "{e}");
    move_with_client(&store, &model, "grow").await;
    assert_eq!(store.drain_target(), 0..0);

    let stop = Arc::new(AtomicBool::new(false));
    let c = client(store.clone(), model.clone(), stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = store.drain_online().await.unwrap();
    assert_eq!(started.kind, "drain");
    assert_eq!(store.drain_target(), 6..12);
    assert!(dir.path().join("moving").exists());
    let e = store.drain_online().await.unwrap_err();
    assert!(e.to_string().contains("is running"), "{e}");
    move_under_way(&store).await;
    stop.store(true, Ordering::SeqCst);
    assert!(c.await.unwrap() > 0);
    check_all(&store, &model, "draining online").await;
    close(store).await;

    // The next start goes on with it; the clean shutdown after it takes the devices out.
    let store = Store::open(cfg.clone()).await.unwrap();
    assert_eq!(store.drain_target(), 6..12);
    move_with_client(&store, &model, "drain").await;
    let e = store.drain_online().await.unwrap_err();
    assert!(e.to_string().contains("drained already"), "{e}");
    check_all(&store, &model, "drained online").await;
    close(store).await;
    let store = Store::open(cfg.clone()).await.unwrap();
    assert_eq!(store.manager().devices().len(), 6);
    check_all(&store, &model, "drained online, reopened").await;
    close(store).await;
    assert!(!dir.path().join("devices/6").exists());
}

/// `Store::grow_online`: six devices join the running array under a client's load, the move
/// runs, a shutdown in the middle of it is resumed at the next start, and the array opens as
/// twelve devices with every object as the model says. A second grow while the move runs is
/// refused; an uneven count is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_grows_while_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let model = filled(&cfg).await;
    let store = Store::open(cfg.clone()).await.unwrap();
    let e = store.grow_online(4, vec![]).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidArgument(_)), "{e}");
    assert_eq!(store.manager().devices().len(), 6);

    let stop = Arc::new(AtomicBool::new(false));
    let c = client(store.clone(), model.clone(), stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (report, started) = store.grow_online(6, vec![]).await.unwrap();
    assert_eq!((report.devices_before, report.devices_after), (6, 12));
    assert_eq!(started.kind, "grow");
    assert_eq!(store.manager().devices().len(), 12);
    assert_eq!(store.status().await.devices.len(), 12);
    assert!(dir.path().join("moving").exists());
    assert!(dir.path().join("devices/11").exists());
    let e = store.grow_online(6, vec![]).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
    move_under_way(&store).await;
    stop.store(true, Ordering::SeqCst);
    assert!(c.await.unwrap() > 0);
    check_all(&store, &model, "growing online").await;
    close(store).await;

    // The next start goes on with the move.
    let store = Store::open(cfg.clone()).await.unwrap();
    assert_eq!(store.manager().devices().len(), 12);
    move_with_client(&store, &model, "grow").await;
    check_all(&store, &model, "grown online").await;
    close(store).await;
    assert!(!dir.path().join("moving").exists());
    let store = Store::open(cfg.clone()).await.unwrap();
    assert_eq!(store.manager().moving(), None);
    check_all(&store, &model, "grown online, reopened").await;
    close(store).await;
}

/// A grow cut by a crash before its layout named the added devices did not happen: the next
/// open forgets them, and so does a grow made again (their folders cleared) without an open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grow_cut_before_its_layout_is_written_did_not_happen() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let model: Model = Arc::default();
    let store = Store::open(cfg.clone()).await.unwrap();
    store.create_bucket("bkt").await.unwrap();
    for i in 0..20 {
        let (k, v) = (format!("k{i:03}"), value(i, 1));
        put(&store, &k, v.clone()).await;
        model.lock().unwrap().insert(k, v);
    }
    close(store).await;
    let layout = std::fs::read(dir.path().join("layout")).unwrap();
    let devices_in_state = || {
        let state = std::fs::read_to_string(dir.path().join("array.json")).unwrap();
        let state: serde_json::Value = serde_json::from_str(&state).unwrap();
        state["devices"].as_array().unwrap().len()
    };
    // As if the crash came just before the layout file: array.json names twelve devices.
    let cut_grow = async || {
        Store::grow_offline(cfg.clone(), 6, vec![]).await.unwrap();
        std::fs::write(dir.path().join("layout"), &layout).unwrap();
        for i in 6..12 {
            std::fs::remove_dir_all(dir.path().join("devices").join(i.to_string())).unwrap();
        }
        assert_eq!(devices_in_state(), 12);
    };

    cut_grow().await;
    let store = Store::open(cfg.clone()).await.unwrap();
    assert_eq!(store.manager().devices().len(), 6);
    assert!(store.manager().moving().is_none());
    check_all(&store, &model, "a grow cut short").await;
    close(store).await;
    assert_eq!(devices_in_state(), 6);

    cut_grow().await;
    Store::grow_offline(cfg.clone(), 6, vec![]).await.unwrap();
    assert_eq!(devices_in_state(), 12);
    let store = Store::open(cfg.clone()).await.unwrap();
    assert_eq!(store.manager().devices().len(), 12);
    let status = store.status().await;
    assert!(
        status.devices.iter().all(|d| d.error.is_none()),
        "every device current: {:?}",
        status.devices
    );
    move_with_client(&store, &model, "grow").await;
    check_all(&store, &model, "grown again").await;
    close(store).await;
}

/// A rebuild goes first: replacing a failed device while a grow's objects move stops the move,
/// rebuilds the device (moving what it repairs), and the move then resumes and finishes;
/// nothing is lost throughout. Then a device the grow added is lost and rebuilt offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_stops_a_move_which_resumes_after_it_and_added_devices_rebuild() {
    let (dir, cfg, model, store) = grown_and_moving().await;
    let moving = store.repair_status().expect("the move started");
    assert!(moving.running && moving.kind == "grow", "{moving:?}");

    store.fail_device(2, "the test").unwrap();
    let rebuild = store.replace_device(2).await.unwrap();
    assert_eq!(
        (rebuild.kind.as_str(), rebuild.device),
        ("rebuild", Some(2))
    );
    let rebuilt = store.wait_for_repair().await.expect("a rebuild ran");
    assert_eq!(rebuilt.kind, "rebuild", "{rebuilt:?}");
    assert_eq!(rebuilt.error, None, "{rebuilt:?}");
    assert!(store.status().await.devices[2].healthy);
    check_all(&store, &model, "rebuilt, the move stopped").await;
    assert!(
        store.manager().moving().is_some(),
        "the move is not done yet"
    );

    // The move schedule starts it again a few seconds after the rebuild, and it finishes (the
    // rebuild moved what it repaired, so little may be left).
    grow_finished(&store).await;
    check_all(&store, &model, "grown after the rebuild").await;
    close(store).await;

    // An added device is rebuilt offline like any other.
    std::fs::remove_dir_all(dir.path().join("devices/8")).unwrap();
    let report = Store::rebuild_offline(
        cfg.clone(),
        8,
        RepairOptions::default(),
        Arc::new(RepairProgress::default()),
    )
    .await
    .unwrap();
    assert!(report.objects_lost.is_empty(), "{report:?}");
    let store = Store::open(cfg.clone()).await.unwrap();
    assert!(store.status().await.devices[8].healthy);
    check_all(&store, &model, "added device rebuilt offline").await;
    close(store).await;
}

/// After an unclean stop in the middle of a move the owed scrub starts (as `serve` starts it
/// at once): the move stops for it, and resumes and finishes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrub_an_unclean_start_owes_goes_before_the_move() {
    let (dir, cfg, model, store) = grown_and_moving().await;
    close(store).await;
    // As if the server had been killed.
    std::fs::remove_file(dir.path().join("clean-shutdown")).unwrap();

    let store = Store::open(cfg.clone()).await.unwrap();
    assert!(store.unclean_start());
    let moving = store
        .repair_status()
        .expect("the move started with the store");
    assert!(moving.running && moving.kind == "grow", "{moving:?}");
    let scrub = store.start_scrub("unclean start").await.unwrap();
    assert_eq!(scrub.kind, "scrub");
    let scrubbed = store.wait_for_repair().await.expect("the scrub ran");
    assert_eq!(
        (scrubbed.kind.as_str(), scrubbed.error.as_deref()),
        ("scrub", None)
    );
    check_all(&store, &model, "scrubbed, the move stopped").await;

    grow_finished(&store).await;
    check_all(&store, &model, "grown after the scrub").await;
    close(store).await;
    assert!(Store::stopped_cleanly(&cfg));
}

/// A recorded move shows in the status from the moment the store is open, before the index
/// has loaded and the move can start (a client asking at once learns that it will run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_move_is_queued_until_the_index_has_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let model = filled(&cfg).await;
    Store::grow_offline(cfg.clone(), 6, vec![]).await.unwrap();
    let (store, load) = Store::open_serving_held(cfg.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let queued = store.repair_status().expect("the recorded move shows");
    assert!(
        queued.queued && queued.running && queued.kind == "grow",
        "{queued:?}"
    );
    assert_eq!(queued.items_done, 0);
    load.notify_one();
    grow_finished(&store).await;
    let done = store.repair_status().unwrap();
    assert!(!done.queued && done.items_done > 0, "{done:?}");
    check_all(&store, &model, "grown").await;
    close(store).await;
}
