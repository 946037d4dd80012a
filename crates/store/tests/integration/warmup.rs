//! Serving while the index loads (`Store::open_serving`, docs/admin.md "Starting"): after a
//! clean shutdown reads of current versions are answered from their records at once, writes
//! wait for the index, listings answer `IndexLoading`; a body streamed through such a read
//! keeps its chunks when a put replaces the object after the load.

use railstore_store::{
    body_from, collect_body, ListQuery, PutOptions, RepairOptions, RepairProgress, Store,
    StoreConfig, StoreError, Versioning,
};
use std::sync::Arc;
use std::time::Duration;

fn config(dir: &std::path::Path) -> StoreConfig {
    let mut c = StoreConfig {
        data_dir: dir.to_path_buf(),
        inline_bytes_max: 4 << 10,
        chunk_bytes: 64 << 10,
        ..StoreConfig::default()
    };
    c.separation = None;
    c
}

fn body(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(seed)).collect()
}

async fn put(store: &Store, bucket: &str, key: &str, b: &[u8]) {
    store
        .put_object(bucket, key, body_from(b.to_vec()), PutOptions::default())
        .await
        .unwrap();
}

async fn read(store: &Store, bucket: &str, key: &str) -> Vec<u8> {
    collect_body(store.get_object(bucket, key, None).await.unwrap().body)
        .await
        .unwrap()
}

/// A store in `dir` with bucket `bkt` holding `objects`, shut down cleanly.
async fn stored(dir: &std::path::Path, objects: &[(String, Vec<u8>)]) {
    let store = Store::open(config(dir)).await.unwrap();
    store.create_bucket("bkt").await.unwrap();
    for (k, b) in objects {
        put(&store, "bkt", k, b).await;
    }
    store.shutdown().await.unwrap();
}

/// How many objects bucket `bkt` lists (it must list).
fn listed(store: &Store) -> usize {
    store
        .list_objects("bkt", &list_all())
        .unwrap()
        .objects
        .len()
}

fn list_all() -> ListQuery {
    ListQuery {
        max_keys: 1000,
        ..ListQuery::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_clean_start_reads_answer_while_the_index_loads_and_writes_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let (small, big, big2) = (body(100, 3), body(300_000, 7), body(200_000, 11));
    let store = Store::open(config(dir.path())).await.unwrap();
    store.create_bucket("bkt").await.unwrap();
    put(&store, "bkt", "small", &small).await;
    put(&store, "bkt", "big", &big).await;
    store.create_bucket("ver").await.unwrap();
    store
        .set_versioning("ver", Versioning::Enabled)
        .await
        .unwrap();
    put(&store, "ver", "gone", &small).await;
    store.delete_object("ver", "gone").await.unwrap();
    store.shutdown().await.unwrap();
    drop(store);

    let (store, hold) = Store::open_serving_held(config(dir.path())).await.unwrap();
    assert!(!store.index_loaded());
    assert_eq!(store.status().await.index, "loading");
    // Buckets are there; reads of current versions come from their records.
    assert_eq!(store.list_buckets().len(), 2);
    assert_eq!(read(&store, "bkt", "small").await, small);
    assert_eq!(
        store.head_object("bkt", "big").await.unwrap().size,
        big.len() as u64
    );
    // A chunked body streamed now, read only after a put has replaced it.
    let old_big = store.get_object("bkt", "big", None).await.unwrap().body;
    assert!(matches!(
        store.list_objects("bkt", &list_all()),
        Err(StoreError::IndexLoading)
    ));
    // A write waits for the index; so does a read no single record answers (a delete marker).
    let writer = tokio::spawn({
        let (store, big2) = (store.clone(), big2.clone());
        async move { put(&store, "bkt", "big", &big2).await }
    });
    let marker = tokio::spawn({
        let store = store.clone();
        async move { store.get_object("ver", "gone", None).await.err() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "a put went ahead of the index");
    assert!(
        !marker.is_finished(),
        "a delete marker was answered from no index"
    );
    assert!(!store.index_loaded());

    hold.notify_one();
    writer.await.unwrap();
    assert!(matches!(
        marker.await.unwrap(),
        Some(StoreError::NoSuchKey { .. }) | Some(StoreError::DeleteMarker(_))
    ));
    assert!(store.index_loaded());
    assert_eq!(store.status().await.index, "loaded");
    // The replaced chunks go once nobody holds them: give the reaper (every 200 ms) its turns.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        collect_body(old_big).await.unwrap(),
        big,
        "the stream started while loading lost its chunks"
    );
    assert_eq!(read(&store, "bkt", "big").await, big2);
    let keys: Vec<String> = store
        .list_objects("bkt", &list_all())
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(keys, ["big", "small"]);
    store.shutdown().await.unwrap();
    drop(store);
    let store = Store::open(config(dir.path())).await.unwrap();
    assert_eq!(read(&store, "bkt", "big").await, big2);
    assert_eq!(read(&store, "bkt", "small").await, small);
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_unclean_start_the_index_loads_before_anything_is_served() {
    let dir = tempfile::tempdir().unwrap();
    stored(dir.path(), &[("k".into(), body(100, 5))]).await;
    std::fs::remove_file(dir.path().join("clean-shutdown")).unwrap();
    let (store, _hold) = Store::open_serving_held(config(dir.path())).await.unwrap();
    assert!(store.unclean_start());
    assert!(store.index_loaded(), "served before the careful load");
    assert_eq!(listed(&store), 1);
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_while_the_index_loads_stops_the_load_and_the_next_start_is_whole() {
    let dir = tempfile::tempdir().unwrap();
    let objects: Vec<(String, Vec<u8>)> = (0..50)
        .map(|i| (format!("k{i:02}"), body(100 + i, 9)))
        .collect();
    stored(dir.path(), &objects).await;
    let (store, _hold) = Store::open_serving_held(config(dir.path())).await.unwrap();
    store.shutdown().await.unwrap();
    drop(store);
    let store = Store::open(config(dir.path())).await.unwrap();
    assert!(!store.unclean_start());
    assert_eq!(listed(&store), 50);
    for i in 0..50 {
        assert_eq!(
            read(&store, "bkt", &format!("k{i:02}")).await,
            body(100 + i, 9)
        );
    }
    store.shutdown().await.unwrap();
}

/// A process that exits with the store open (a server refusing to start after opening it, an
/// error on the way out) drops its runtime while the index loads: the device operations that
/// runtime no longer runs are not device failures, and the next start finds every device
/// current. Rounds exit at different points, because the load must be caught mid-way.
#[test]
fn an_exit_while_the_index_loads_fails_no_device() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    let objects: Vec<(String, Vec<u8>)> = (0..400)
        .map(|i| (format!("k{i:03}"), body(100 + i, 9)))
        .collect();
    runtime().block_on(stored(dir.path(), &objects));
    for round in 0..12u64 {
        let rt = runtime();
        rt.block_on(async {
            let store = Store::open_serving(config(dir.path())).await.unwrap();
            assert!(
                !store.unclean_start(),
                "round {round}: a clean start serves at once"
            );
            // Exits at different points of the load.
            tokio::time::sleep(Duration::from_millis(3 * (round % 4))).await;
            drop(store);
        });
        drop(rt);
        runtime().block_on(async {
            let store = Store::open(config(dir.path()))
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!(listed(&store), 400, "round {round}");
            // The scrub an unclean start owes, so that the next round starts clean.
            let scrub = store
                .scrub(
                    RepairOptions::default(),
                    Arc::new(RepairProgress::default()),
                )
                .await
                .unwrap();
            assert_eq!(scrub.pieces_repaired, 0, "round {round}");
            store.shutdown().await.unwrap();
        });
    }
}
