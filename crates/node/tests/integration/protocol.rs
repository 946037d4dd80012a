//! Requests the protocol does not allow, sent by a raw client: each is refused as a
//! configuration error (not a device fault) and changes nothing.

use crate::common::*;
use railstore_device::*;
use railstore_node::errors::from_status;
use railstore_node::rpc::NodeClient;
use railstore_node::wire::{self, StoreChunk};
use std::sync::Arc;

fn chunk(value_len: u64, data: &[u8], mode: u32, fence: Option<wire::Fence>) -> StoreChunk {
    StoreChunk {
        device: 0,
        key: b"k".to_vec(),
        mode,
        value_len,
        fence,
        data: data.to_vec().into(),
    }
}

fn fence() -> Option<wire::Fence> {
    Some(writer(1).into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_stores_are_refused_and_change_nothing() {
    let inner = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
    let (node, _dev) = remote(inner.clone()).await;
    let mut client = NodeClient::connect(format!("http://{}", node.address))
        .await
        .unwrap();
    let more = StoreChunk {
        data: b"tail".to_vec().into(),
        ..Default::default()
    };
    let cases: Vec<(&str, Vec<StoreChunk>)> = vec![
        (
            "more data than announced in one message",
            vec![chunk(3, b"abcde", 0, fence())],
        ),
        (
            "more data than announced over two messages",
            vec![chunk(10, b"abcdefgh", 0, fence()), more.clone()],
        ),
        (
            "a message after the value was whole",
            vec![chunk(3, b"abc", 0, fence()), more.clone()],
        ),
        (
            "less data than announced",
            vec![chunk(10, b"abc", 0, fence())],
        ),
        ("an unknown store mode", vec![chunk(3, b"abc", 7, fence())]),
        ("no fence", vec![chunk(3, b"abc", 0, None)]),
        ("no message at all", vec![]),
    ];
    for (what, messages) in cases {
        let status = client
            .store(futures_util::stream::iter(messages))
            .await
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(
            matches!(from_status(&status), DeviceError::Config(_)),
            "{what}: {status:?}"
        );
        assert!(!inner.exist(&[b"k"]).await.unwrap()[0], "{what}: stored");
    }
    // The same client's well-formed store lands.
    client
        .store(futures_util::stream::iter(vec![
            chunk(6, b"abc", 0, fence()),
            StoreChunk {
                data: b"def".to_vec().into(),
                ..Default::default()
            },
        ]))
        .await
        .unwrap();
    assert_eq!(
        &inner.retrieve(b"k", ReadRange::ALL).await.unwrap().value[..],
        b"abcdef"
    );
}
