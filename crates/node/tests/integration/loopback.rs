//! The loopback node used by the benchmarks: serves from its own threads, and once dropped
//! has let go of its devices (a file device's directory can be opened again at once).

use crate::common::*;
use railstore_device::*;
use railstore_node::{Call, Exported, FenceBook, LoopbackNode, RemoteNode};
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

/// The node counts what crosses the network: a store's value arrives once (with its key and a
/// few bytes of framing), a retrieve's value leaves once, and the sockets carry at least the
/// messages; a client reads the same counters with a call.
#[test]
fn a_node_counts_its_network_bytes_per_kind_of_call() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mem: Arc<dyn Device> = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
    let node = LoopbackNode::start(
        vec![Exported {
            name: "d0".into(),
            device: mem,
        }],
        FenceBook::in_memory(ARRAY),
        1,
    )
    .unwrap();
    let value = vec![0xa5u8; 100 << 10];
    let key = b"a-key-of-some-length";
    let (near, before_call) = runtime.block_on(async {
        let remote = RemoteNode::connect(&node.address().to_string())
            .await
            .unwrap();
        let dev = remote.device("d0", writer(1)).unwrap();
        let start = node.traffic().snapshot();
        dev.store(key, &value, StoreMode::Upsert).await.unwrap();
        let stored = node.traffic().snapshot().since(&start);
        let got = dev.retrieve(key, ReadRange::ALL).await.unwrap();
        assert_eq!(got.value.len(), value.len());
        let both = node.traffic().snapshot().since(&start);
        let of = |s: &railstore_node::TrafficSnapshot, call: Call| {
            *s.calls.iter().find(|c| c.call == call).unwrap()
        };
        let store = of(&stored, Call::Store);
        assert_eq!(store.calls, 1);
        let payload = (value.len() + key.len()) as u64;
        assert!(
            (payload..payload + 64).contains(&store.received),
            "a store of {payload} B took in {} B",
            store.received
        );
        assert!(store.sent < 16, "a store's answer is a few bytes");
        let retrieve = of(&both, Call::Retrieve);
        assert!(
            (value.len() as u64..value.len() as u64 + 64).contains(&retrieve.sent),
            "a retrieve of {} B sent {} B",
            value.len(),
            retrieve.sent
        );
        assert!(retrieve.received < key.len() as u64 + 32);
        assert!(both.socket_received >= store.received);
        // The node counts a socket write once it returns, which may be just after the client
        // has the bytes.
        let mut socket_sent = both.socket_sent;
        for _ in 0..100 {
            if socket_sent >= retrieve.sent {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            socket_sent = node.traffic().snapshot().socket_sent;
        }
        assert!(
            socket_sent >= retrieve.sent,
            "{socket_sent} < {}",
            retrieve.sent
        );
        assert!(
            both.socket_bytes() < both.message_bytes() + (16 << 10),
            "framing is a small share: {} socket bytes for {} message bytes",
            both.socket_bytes(),
            both.message_bytes()
        );
        let before_call = node.traffic().snapshot();
        (remote.traffic().await.unwrap(), before_call)
    });
    // The client's view is the node's at the moment of the call (the call itself counted as
    // it arrived, its answer not yet).
    let call_in = near.since(&before_call);
    let traffic_call = call_in
        .calls
        .iter()
        .find(|c| c.call == Call::Traffic)
        .unwrap();
    assert_eq!(traffic_call.calls, 1);
    assert_eq!(traffic_call.sent, 0);
    let store_now = near.calls.iter().find(|c| c.call == Call::Store).unwrap();
    assert_eq!(store_now.calls, 1);
    let text = railstore_node::traffic::prometheus(&[("n1".into(), node.traffic().snapshot())]);
    assert!(text.contains("railstore_node_calls_total{node=\"n1\",call=\"store\"} 1"));
}
