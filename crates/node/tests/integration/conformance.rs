//! The device conformance model run through a node: a remote device must answer exactly as
//! the device behind it, for every operation and every error the model provokes.

use crate::common::*;
use railstore_device::conformance::*;
use railstore_device::*;
use std::sync::Arc;

fn mem(limits: Limits) -> Arc<dyn Device> {
    Arc::new(
        MemDevice::new(MemConfig {
            limits,
            ..Default::default()
        })
        .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_memory_device_matches_the_model() {
    for seed in seeds(&[1, 2]) {
        let (_node, dev) = remote(mem(test_limits())).await;
        let mut model = Model::new(test_limits());
        drive(&dev, &mut model, seed, 2000).await;
        assert_same(&dev, &model, &format!("seed {seed}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_file_device_matches_the_model() {
    for seed in seeds(&[3]) {
        let dir = tempfile::tempdir().unwrap();
        let file: Arc<dyn Device> = Arc::new(
            FileDevice::open(
                dir.path(),
                FileConfig {
                    capacity_bytes: 64 << 20,
                    limits: test_limits(),
                    segment_bytes: 1 << 20,
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        let (_node, dev) = remote(file).await;
        let mut model = Model::new(test_limits());
        drive(&dev, &mut model, seed, 1500).await;
        dev.compact(u64::MAX).await.unwrap();
        assert_same(&dev, &model, &format!("seed {seed}")).await;
    }
}

/// Values of several chunks cross whole, and ranges across chunk edges come back exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_stream_in_chunks() {
    let chunk = railstore_node::wire::CHUNK_BYTES;
    let limits = Limits {
        value_bytes_max: 4 << 20,
        ..Limits::default()
    };
    let inner = mem(limits);
    let (_node, dev) = remote(inner.clone()).await;
    let sizes = [0, 1, chunk - 1, chunk, chunk + 1, 3 * chunk + 17, 4 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        let value: Vec<u8> = (0..len).map(|b| (b * 31 + i) as u8).collect();
        let key = format!("big{i}");
        dev.store(key.as_bytes(), &value, StoreMode::Upsert)
            .await
            .unwrap();
        let direct = inner
            .retrieve(key.as_bytes(), ReadRange::ALL)
            .await
            .unwrap();
        assert_eq!(direct.value, value, "{len} B stored whole");
        let back = dev.retrieve(key.as_bytes(), ReadRange::ALL).await.unwrap();
        assert_eq!(back.value_len, len as u64);
        assert_eq!(back.value, value, "{len} B read whole");
        for (offset, n) in [
            (chunk as u64 - 3, Some(7)),
            (1, None),
            (len as u64, Some(5)),
        ] {
            if offset > len as u64 {
                continue;
            }
            let part = dev
                .retrieve(key.as_bytes(), ReadRange { offset, len: n })
                .await
                .unwrap();
            let want = ReadRange { offset, len: n }.resolve(len as u64).unwrap();
            assert_eq!(part.value, value[want.0 as usize..want.1 as usize]);
        }
    }
    // An iteration with values larger than a message's worth comes back whole and in order.
    let all = iterate_all(&dev, b"big", true).await.unwrap();
    assert_eq!(all.len(), sizes.len());
    for e in all {
        let v = inner.retrieve(&e.key, ReadRange::ALL).await.unwrap();
        assert_eq!(e.value.unwrap(), v.value);
    }
    let info = dev.info().await.unwrap();
    assert_eq!(info, inner.info().await.unwrap());
    assert_eq!(dev.limits(), limits);
}
