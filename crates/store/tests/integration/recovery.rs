//! Recovery after an unclean shutdown decides one version per object and keeps the index and
//! the chunks consistent with it.
//!
//! The case: an overwrite of a chunked object was cut off between its record write and the
//! sync, so the record's copies disagree — the primary copy still holds the old version, another
//! the new one, whose chunks are all durable (chunks are synced before the record). Start-up
//! used to read the primary copy only, keep the old version's chunks and delete the new one's;
//! scrub then rolled the record forward to the new version, whose chunks were gone: an object
//! listed but unreadable.

use railstore_device::{Device, IterRequest, MemDevice, StoreMode};
use railstore_redundancy::format::PieceHeader;
use railstore_store::{
    body_from, collect_body, PutOptions, RepairOptions, RepairProgress, Store, StoreConfig,
};
use std::sync::Arc;

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

fn body(version: u8) -> Vec<u8> {
    (0..200_000u32)
        .map(|i| (i as u8).wrapping_mul(version))
        .collect()
}

/// Every record piece (device key starting with the manager's object tag and the store's
/// object-record tag) on `dev`, with its bytes.
async fn record_pieces(dev: &MemDevice) -> Vec<(Vec<u8>, Vec<u8>)> {
    let batch = dev
        .iterate(&IterRequest {
            prefix: b"oK".to_vec(),
            start_after: None,
            entries_max: 1000,
            with_values: true,
        })
        .await
        .unwrap();
    batch
        .entries
        .into_iter()
        .map(|e| (e.key, e.value.unwrap().to_vec()))
        .collect()
}

async fn read(store: &Store) -> Vec<u8> {
    collect_body(store.get_object("bkt", "obj", None).await.unwrap().body)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwrite_cut_off_before_its_sync_resolves_to_one_readable_version() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mems: Vec<Arc<MemDevice>> = (0..cfg.device_count())
        .map(|_| Arc::new(MemDevice::new(Default::default()).unwrap()))
        .collect();
    let devices =
        || -> Vec<Arc<dyn Device>> { mems.iter().map(|m| m.clone() as Arc<dyn Device>).collect() };
    let store = Store::open_with_devices(cfg.clone(), devices())
        .await
        .unwrap();
    store.create_bucket("bkt").await.unwrap();
    store
        .put_object("bkt", "obj", body_from(body(1)), PutOptions::default())
        .await
        .unwrap();
    store.shutdown().await.unwrap();
    drop(store);
    // The old record's copies, device by device.
    let mut old = Vec::new();
    for m in &mems {
        old.push(record_pieces(m).await);
    }

    let store = Store::open_with_devices(cfg.clone(), devices())
        .await
        .unwrap();
    store
        .put_object("bkt", "obj", body_from(body(2)), PutOptions::default())
        .await
        .unwrap();
    store.shutdown().await.unwrap();
    drop(store);

    // Make it look like the sync of the overwrite's record never reached the primary copy:
    // put the old record back there, and drop the clean-shutdown mark.
    let mut rolled_back = 0;
    for (d, m) in mems.iter().enumerate() {
        for (key, bytes) in &old[d] {
            let (h, _) = PieceHeader::decode(bytes).unwrap();
            if h.index == 0 {
                m.store(key, bytes, StoreMode::Upsert).await.unwrap();
                rolled_back += 1;
            }
        }
    }
    assert_eq!(rolled_back, 1, "one primary copy of the record");
    std::fs::remove_file(dir.path().join("clean-shutdown")).unwrap();

    let store = Store::open_with_devices(cfg.clone(), devices())
        .await
        .unwrap();
    let got = read(&store).await;
    assert!(
        got == body(2) || got == body(1),
        "the object mixes versions"
    );
    store
        .scrub(
            RepairOptions::default(),
            Arc::new(RepairProgress::default()),
        )
        .await
        .unwrap();
    assert_eq!(
        read(&store).await,
        got,
        "scrub changed the object's version"
    );
    store.shutdown().await.unwrap();
    drop(store);

    let store = Store::open_with_devices(cfg, devices()).await.unwrap();
    assert_eq!(
        store.head_object("bkt", "obj").await.unwrap().size,
        got.len() as u64
    );
    let g = store.get_object("bkt", "obj", None).await.unwrap();
    let bytes = collect_body(g.body).await;
    assert_eq!(
        bytes.as_ref().map(Vec::len).map_err(|e| e.to_string()),
        Ok(got.len()),
        "listed but unreadable after scrub and restart"
    );
    assert_eq!(bytes.unwrap(), got);
    store.shutdown().await.unwrap();
}
