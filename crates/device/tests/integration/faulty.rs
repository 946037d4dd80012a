//! The fault-injecting wrapper: each kind of fault does what it says, deterministically.

use railstore_device::*;
use std::sync::Arc;
use std::time::Duration;

fn mem() -> Arc<dyn Device> {
    Arc::new(MemDevice::new(MemConfig::default()).unwrap())
}

#[tokio::test(start_paused = true)]
async fn transient_errors_change_nothing() {
    let inner = mem();
    let dev = FaultyDevice::new(
        inner.clone(),
        FaultConfig {
            seed: 4,
            transient_error_prob: 0.3,
            ..Default::default()
        },
    );
    let (mut ok, mut failed) = (0, 0);
    for i in 0..300u32 {
        match dev.store(&i.to_be_bytes(), b"v", StoreMode::Upsert).await {
            Ok(()) => ok += 1,
            Err(DeviceError::Transient) => {
                failed += 1;
                assert!(
                    !inner.exist(&[&i.to_be_bytes()]).await.unwrap()[0],
                    "failed store {i} reached the device"
                );
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(failed > 50 && ok > 150, "{ok} ok, {failed} failed");
    assert_eq!(inner.info().await.unwrap().key_count, ok);
}

#[tokio::test(start_paused = true)]
async fn bit_flips_are_silent_and_single() {
    let dev = FaultyDevice::new(
        mem(),
        FaultConfig {
            seed: 1,
            bit_flip_prob: 1.0,
            ..Default::default()
        },
    );
    let v = vec![0x55u8; 1000];
    dev.store(b"k", &v, StoreMode::Upsert).await.unwrap();
    let got = dev.retrieve(b"k", ReadRange::ALL).await.unwrap().value;
    let flipped: u32 = got.iter().zip(&v).map(|(a, b)| (a ^ b).count_ones()).sum();
    assert_eq!(flipped, 1);
}

#[tokio::test(start_paused = true)]
async fn latency_spikes_delay_operations() {
    let dev = FaultyDevice::new(
        mem(),
        FaultConfig {
            seed: 2,
            latency_spike_prob: 1.0,
            latency_spike: Duration::from_millis(30),
            ..Default::default()
        },
    );
    let t = tokio::time::Instant::now();
    dev.store(b"k", b"v", StoreMode::Upsert).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(30));
}

#[tokio::test(start_paused = true)]
async fn fail_stop_and_crash_drop_unsynced_writes() {
    let dev = FaultyDevice::new(
        mem(),
        FaultConfig {
            seed: 3,
            volatile_writes: true,
            ..Default::default()
        },
    );
    dev.store(b"synced", b"1", StoreMode::Upsert).await.unwrap();
    dev.sync().await.unwrap();
    dev.store(b"unsynced", b"2", StoreMode::Upsert)
        .await
        .unwrap();
    dev.delete(b"synced", true).await.unwrap();
    assert!(!dev.exist(&[b"synced"]).await.unwrap()[0]);
    dev.crash().await;
    assert!(matches!(
        dev.retrieve(b"synced", ReadRange::ALL).await,
        Err(DeviceError::Failed { .. })
    ));
    dev.restart().await;
    assert_eq!(
        dev.retrieve(b"synced", ReadRange::ALL)
            .await
            .unwrap()
            .value
            .to_vec(),
        b"1"
    );
    assert!(!dev.exist(&[b"unsynced"]).await.unwrap()[0]);
    dev.fail_stop();
    assert!(matches!(dev.sync().await, Err(DeviceError::Failed { .. })));
    assert!(dev.is_failed());
}

#[tokio::test(start_paused = true)]
async fn same_seed_same_faults() {
    let run = |seed| async move {
        let dev = FaultyDevice::new(
            mem(),
            FaultConfig {
                seed,
                transient_error_prob: 0.5,
                ..Default::default()
            },
        );
        let mut out = vec![];
        for i in 0..64u32 {
            out.push(
                dev.store(&i.to_be_bytes(), b"v", StoreMode::Upsert)
                    .await
                    .is_ok(),
            );
        }
        out
    };
    assert_eq!(run(7).await, run(7).await);
    assert_ne!(run(7).await, run(8).await);
}
