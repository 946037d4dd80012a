//! A superseded writer changes nothing: once a node has admitted a writer with a higher token
//! (or a newer layout epoch), the older writer's stores and deletes are refused, with what the
//! node holds, and the data stays the newer writer's.

use crate::common::*;
use railstore_device::*;
use railstore_node::{FenceBook, RemoteNode};
use std::sync::Arc;

async fn two_writers() -> (
    Node,
    Arc<MemDevice>,
    railstore_node::RemoteDevice,
    railstore_node::RemoteDevice,
) {
    let inner = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
    let node = Node::start(
        vec![inner.clone()],
        Arc::new(FenceBook::in_memory(ARRAY)),
        None,
    )
    .await;
    let connection = RemoteNode::connect(&node.address.to_string())
        .await
        .unwrap();
    let old = connection.device("d0", writer(1)).unwrap();
    let new = old.with_fence(writer(2));
    (node, inner, old, new)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_owner_cannot_write_after_a_new_one() {
    let (_node, inner, old, new) = two_writers().await;
    old.store(b"k", b"old", StoreMode::Upsert).await.unwrap();
    old.store(b"gone", b"x", StoreMode::Upsert).await.unwrap();
    // The old owner's writes land until the new owner's first.
    new.store(b"k", b"new", StoreMode::Upsert).await.unwrap();
    match old.store(b"k", b"stale", StoreMode::Upsert).await {
        Err(DeviceError::Fenced { sent, held }) => {
            assert_eq!(sent, writer(1));
            assert_eq!(held, writer(2));
        }
        other => panic!("a stale store must be fenced, got {other:?}"),
    }
    assert!(matches!(
        old.delete(b"gone", false).await,
        Err(DeviceError::Fenced { .. })
    ));
    assert_eq!(
        &inner.retrieve(b"k", ReadRange::ALL).await.unwrap().value[..],
        b"new"
    );
    assert!(
        inner.exist(&[b"gone"]).await.unwrap()[0],
        "the stale delete undid nothing"
    );
    // Reads are not fenced: the old owner may still read (it cannot act on what it reads).
    assert_eq!(
        &old.retrieve(b"k", ReadRange::ALL).await.unwrap().value[..],
        b"new"
    );
    // Once it learns its new token it writes again.
    old.set_fence(writer(3));
    old.store(b"k", b"newest", StoreMode::Upsert).await.unwrap();
    assert!(matches!(
        new.store(b"k", b"x", StoreMode::Upsert).await,
        Err(DeviceError::Fenced { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_epochs_and_other_arrays_are_refused() {
    let (_node, inner, old, new) = two_writers().await;
    new.set_fence(Fence {
        layout_epoch: 2,
        ..writer(1)
    });
    new.store(b"k", b"epoch 2", StoreMode::Upsert)
        .await
        .unwrap();
    // Same token, older epoch: refused.
    assert!(matches!(
        old.store(b"k", b"epoch 1", StoreMode::Upsert).await,
        Err(DeviceError::Fenced { .. })
    ));
    // Another array's writer, with any epoch or token: refused.
    let stranger = new.with_fence(Fence {
        array_id: ARRAY + 1,
        layout_epoch: 9,
        shard: 0,
        token: 99,
    });
    assert!(matches!(
        stranger.store(b"k", b"elsewhere", StoreMode::Upsert).await,
        Err(DeviceError::Fenced { .. })
    ));
    assert_eq!(
        &inner.retrieve(b"k", ReadRange::ALL).await.unwrap().value[..],
        b"epoch 2"
    );
    // A writer of another shard is not held back by shard 0's tokens.
    let other_shard = new.with_fence(Fence {
        shard: 1,
        layout_epoch: 2,
        ..writer(1)
    });
    other_shard
        .store(b"s1", b"v", StoreMode::Upsert)
        .await
        .unwrap();
}

/// The node's fences outlive it: restarted with its fence file, it still refuses the writer
/// it had fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_survive_a_node_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fences");
    let inner = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
    let node = Node::start(
        vec![inner.clone()],
        Arc::new(FenceBook::open(ARRAY, &path).unwrap()),
        None,
    )
    .await;
    let address = node.address;
    let conn = RemoteNode::connect(&address.to_string()).await.unwrap();
    let old = conn.device("d0", writer(1)).unwrap();
    old.with_fence(writer(5))
        .store(b"k", b"new", StoreMode::Upsert)
        .await
        .unwrap();
    node.stop().await;
    let _node = Node::start(
        vec![inner.clone()],
        Arc::new(FenceBook::open(ARRAY, &path).unwrap()),
        Some(address),
    )
    .await;
    let old = RemoteNode::connect(&address.to_string())
        .await
        .unwrap()
        .device("d0", writer(4))
        .unwrap();
    assert!(matches!(
        old.store(b"k", b"stale", StoreMode::Upsert).await,
        Err(DeviceError::Fenced { .. })
    ));
    assert_eq!(
        &inner.retrieve(b"k", ReadRange::ALL).await.unwrap().value[..],
        b"new"
    );
}
