//! Errors arrive as the device's own, with their data; a node that cannot be reached is an
//! I/O error of the call, which the array treats as a device fault.

use crate::common::*;
use railstore_device::*;
use railstore_node::errors::NODE_CALL;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_errors_keep_their_variant_and_data() {
    let inner = Arc::new(
        MemDevice::new(MemConfig {
            capacity_bytes: 4096,
            ..Default::default()
        })
        .unwrap(),
    );
    let faulty = Arc::new(FaultyDevice::new(inner.clone(), FaultConfig::default()));
    let (_node, dev) = remote(faulty.clone()).await;
    dev.store(b"k", b"v", StoreMode::Upsert).await.unwrap();
    match dev.store(b"k", b"w", StoreMode::InsertOnly).await {
        Err(DeviceError::KeyExists { key }) => assert_eq!(key, b"k"),
        other => panic!("{other:?}"),
    }
    match dev.retrieve(b"nope", ReadRange::ALL).await {
        Err(DeviceError::KeyNotFound { key }) => assert_eq!(key, b"nope"),
        other => panic!("{other:?}"),
    }
    match dev
        .retrieve(
            b"k",
            ReadRange {
                offset: 5,
                len: None,
            },
        )
        .await
    {
        Err(DeviceError::Offset { offset, value_len }) => assert_eq!((offset, value_len), (5, 1)),
        other => panic!("{other:?}"),
    }
    match dev.store(b"big", &[0u8; 8192], StoreMode::Upsert).await {
        Err(DeviceError::Capacity { needed, available }) => assert!(needed > available),
        other => panic!("{other:?}"),
    }
    match dev.delete(b"gone", true).await {
        Err(DeviceError::KeyNotFound { key }) => assert_eq!(key, b"gone"),
        other => panic!("{other:?}"),
    }
    faulty.fail_stop();
    match dev.retrieve(b"k", ReadRange::ALL).await {
        Err(DeviceError::Failed { reason }) => {
            let local = faulty.retrieve(b"k", ReadRange::ALL).await.err().unwrap();
            assert_eq!(
                DeviceError::Failed { reason }.to_string(),
                local.to_string()
            );
        }
        other => panic!("{other:?}"),
    }
}

/// Limits are the device's, refused with the device's errors (the client checks a store's and a
/// delete's before the network; the node would refuse them too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_the_devices_and_refused_at_once() {
    let inner = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
    let metered = Arc::new(MeteredDevice::new(inner));
    let (_node, dev) = remote(metered.clone()).await;
    assert_eq!(dev.limits(), Limits::default());
    let too_long = vec![0u8; Limits::default().value_bytes_max + 1];
    assert!(matches!(
        dev.store(b"k", &too_long, StoreMode::Upsert).await,
        Err(DeviceError::ValueLength { .. })
    ));
    assert!(matches!(
        dev.delete(b"", false).await,
        Err(DeviceError::KeyLength { .. })
    ));
    let ops = metered.stats(OpKind::Store).ops + metered.stats(OpKind::Delete).ops;
    assert_eq!(ops, 0, "nothing reached the device");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_is_an_io_error_of_the_call() {
    let inner = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
    let (node, dev) = remote(inner).await;
    dev.store(b"k", b"v", StoreMode::Upsert).await.unwrap();
    node.stop().await;
    for e in [
        dev.retrieve(b"k", ReadRange::ALL).await.err(),
        dev.store(b"k", b"w", StoreMode::Upsert).await.err(),
        dev.sync().await.err(),
    ] {
        match e {
            Some(DeviceError::Io { op, .. }) => assert_eq!(op, NODE_CALL),
            other => panic!("expected an I/O error of the call, got {other:?}"),
        }
    }
    let refused = railstore_node::RemoteNode::connect("127.0.0.1:1")
        .await
        .err();
    assert!(
        matches!(refused, Some(DeviceError::Io { .. })),
        "{refused:?}"
    );
}
