//! The loopback node used by the benchmarks: serves from its own threads, and once dropped
//! has let go of its devices (a file device's directory can be opened again at once).

use crate::common::*;
use railstore_device::*;
use railstore_node::{Exported, FenceBook, LoopbackNode, RemoteNode};
use std::sync::Arc;

#[test]
fn a_dropped_loopback_node_lets_go_of_its_devices() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = FileConfig {
        capacity_bytes: 64 << 20,
        segment_bytes: 4 << 20,
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for round in 0..2u8 {
        let file: Arc<dyn Device> = Arc::new(FileDevice::open(dir.path(), cfg.clone()).unwrap());
        let node = LoopbackNode::start(
            vec![Exported {
                name: "d0".into(),
                device: file,
            }],
            FenceBook::in_memory(ARRAY),
            1,
        )
        .unwrap();
        runtime.block_on(async {
            let dev = RemoteNode::connect(&node.address().to_string())
                .await
                .unwrap()
                .device("d0", writer(1))
                .unwrap();
            if round == 1 {
                let r = dev.retrieve(b"k", ReadRange::ALL).await.unwrap();
                assert_eq!(&r.value[..], b"v0");
            }
            dev.store(b"k", &[b'v', b'0' + round], StoreMode::Upsert)
                .await
                .unwrap();
            dev.sync().await.unwrap();
        });
        drop(node);
    }
}
