//! A node that restarts over the same devices serves the same data to the same remote
//! device: the connection comes back by itself, and what was synced is there.

use crate::common::*;
use railstore_device::*;
use railstore_node::FenceBook;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_device_outlives_a_node_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = FileConfig {
        capacity_bytes: 64 << 20,
        segment_bytes: 4 << 20,
        ..Default::default()
    };
    let file: Arc<dyn Device> = Arc::new(FileDevice::open(dir.path(), cfg.clone()).unwrap());
    let (node, dev) = remote(file.clone()).await;
    let address = node.address;
    for i in 0..100u32 {
        dev.store(
            format!("k{i}").as_bytes(),
            &[i as u8; 3000],
            StoreMode::Upsert,
        )
        .await
        .unwrap();
    }
    dev.sync().await.unwrap();
    node.stop().await;
    drop(file);
    let reopened: Arc<dyn Device> = Arc::new(FileDevice::open(dir.path(), cfg).unwrap());
    let _node = Node::start(
        vec![reopened],
        Arc::new(FenceBook::in_memory(ARRAY)),
        Some(address),
    )
    .await;
    // The first call after the restart may find the old connection closed; the channel
    // reconnects, so a retry succeeds.
    let mut tries = 0;
    let first = loop {
        match dev.retrieve(b"k7", ReadRange::ALL).await {
            Ok(r) => break r,
            Err(DeviceError::Io { .. }) if tries < 20 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("after the restart: {e}"),
        }
    };
    assert_eq!(first.value, vec![7u8; 3000]);
    for i in 0..100u32 {
        let r = dev
            .retrieve(format!("k{i}").as_bytes(), ReadRange::ALL)
            .await
            .unwrap();
        assert_eq!(r.value, vec![i as u8; 3000]);
    }
    assert_eq!(dev.info().await.unwrap().key_count, 100);
}
