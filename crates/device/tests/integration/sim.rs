//! The simulated SSD in virtual time: page-read latency when idle, reads stalled behind
//! programs and garbage collection, determinism, suspend, and the write buffer.

use railstore_device::sim::{precondition, virtual_time_runtime, VIRTUAL_TIME_DILATION};
use railstore_device::*;
use std::sync::Arc;
use std::time::Duration;

fn small(suspend_ns: Option<u64>) -> SimConfig {
    SimConfig {
        channels: 2,
        dies_per_channel: 2,
        logical_bytes: 16 << 20,
        pages_per_block: 8,
        suspend_ns,
        time_dilation: VIRTUAL_TIME_DILATION,
        ..Default::default()
    }
}

fn sim(cfg: SimConfig) -> Arc<SimDevice> {
    let inner = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
    Arc::new(SimDevice::new(inner, cfg).unwrap())
}

/// Model microseconds an operation took.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, f64) {
    let t = tokio::time::Instant::now();
    let r = f.await;
    (
        r,
        t.elapsed().as_nanos() as f64 / VIRTUAL_TIME_DILATION as f64 / 1000.0,
    )
}

/// Mixed random load with `qd` in flight; returns sorted read latencies (model µs) and stats.
async fn mixed(
    dev: Arc<SimDevice>,
    ops: u64,
    write_percent: u32,
    seed: u64,
) -> (Vec<f64>, SimStats) {
    use rand::{Rng, SeedableRng};
    let keys = 3000u64;
    precondition(dev.clone(), keys, 4096, keys, 8, seed)
        .await
        .unwrap();
    dev.drain().await;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..4u64 {
        let dev = dev.clone();
        tasks.spawn(async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed + t);
            let mut lat = vec![];
            let v = vec![7u8; 4096];
            for _ in 0..ops / 4 {
                let k = rng.gen_range(0..keys).to_be_bytes();
                if rng.gen_range(0..100) < write_percent {
                    dev.store(&k, &v, StoreMode::Upsert).await.unwrap();
                } else {
                    let (r, us) = timed(dev.retrieve(&k, ReadRange::ALL)).await;
                    assert_eq!(r.unwrap().value.len(), 4096);
                    lat.push(us);
                }
            }
            lat
        });
    }
    let mut all = vec![];
    while let Some(l) = tasks.join_next().await {
        all.extend(l.unwrap());
    }
    all.sort_by(f64::total_cmp);
    (all, dev.stats())
}

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p) as usize]
}

#[test]
fn idle_read_takes_page_read_time() {
    virtual_time_runtime().unwrap().block_on(async {
        let dev = sim(small(None));
        dev.store(b"k", &[1u8; 4096], StoreMode::Upsert)
            .await
            .unwrap();
        // In the write buffer: served from DRAM.
        let (_, us) = timed(dev.retrieve(b"k", ReadRange::ALL)).await;
        assert!(us < 20.0, "buffered read took {us} µs");
        // Fill a page so it is programmed, then wait until the die is idle.
        for i in 0..64u32 {
            dev.store(&i.to_be_bytes(), &[2u8; 4096], StoreMode::Upsert)
                .await
                .unwrap();
        }
        dev.drain().await;
        let (_, us) = timed(dev.retrieve(b"k", ReadRange::ALL)).await;
        assert!((50.0..70.0).contains(&us), "idle flash read took {us} µs");
        let (_, us) = timed(dev.retrieve(b"missing", ReadRange::ALL)).await;
        assert!(us < 10.0);
    });
}

#[test]
fn writes_stall_reads_and_gc_runs() {
    let (ro, _) = virtual_time_runtime()
        .unwrap()
        .block_on(mixed(sim(small(None)), 20_000, 0, 5));
    let (mx, stats) =
        virtual_time_runtime()
            .unwrap()
            .block_on(mixed(sim(small(None)), 20_000, 25, 5));
    assert!(
        stats.gc_runs > 50 && stats.write_amplification() > 1.2,
        "{stats:?}"
    );
    let (p99_ro, p99_mx) = (pct(&ro, 0.99), pct(&mx, 0.99));
    assert!(p99_ro < 200.0, "read-only p99 {p99_ro}");
    assert!(
        p99_mx > 10.0 * p99_ro,
        "mixed p99 {p99_mx} vs read-only {p99_ro}"
    );
}

#[test]
fn same_seed_same_virtual_times() {
    let a = virtual_time_runtime()
        .unwrap()
        .block_on(mixed(sim(small(None)), 4000, 25, 9));
    let b = virtual_time_runtime()
        .unwrap()
        .block_on(mixed(sim(small(None)), 4000, 25, 9));
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
}

#[test]
fn suspend_shortens_stalls() {
    let (plain, _) =
        virtual_time_runtime()
            .unwrap()
            .block_on(mixed(sim(small(None)), 20_000, 25, 3));
    let (susp, _) =
        virtual_time_runtime()
            .unwrap()
            .block_on(mixed(sim(small(Some(20_000))), 20_000, 25, 3));
    assert!(
        pct(&susp, 0.99) < pct(&plain, 0.99),
        "suspend {} vs {}",
        pct(&susp, 0.99),
        pct(&plain, 0.99)
    );
}

#[test]
fn capacity_and_real_time_clock() {
    virtual_time_runtime().unwrap().block_on(async {
        let dev = sim(small(None));
        let too_big = vec![0u8; 2 << 20];
        for i in 0..8u32 {
            dev.store(&i.to_be_bytes(), &too_big, StoreMode::Upsert)
                .await
                .unwrap();
        }
        let e = dev
            .store(b"x", &too_big, StoreMode::Upsert)
            .await
            .unwrap_err();
        assert!(matches!(e, DeviceError::Capacity { .. }), "{e}");
        assert!(
            !dev.exist(&[b"x"]).await.unwrap()[0],
            "a refused store changes nothing"
        );
    });
    // The same code in real time: a flash read really waits (at least the timer tick).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let dev = sim(SimConfig {
            time_dilation: 1,
            ..small(None)
        });
        let t = std::time::Instant::now();
        dev.store(b"k", &[1u8; 4096], StoreMode::Upsert)
            .await
            .unwrap();
        dev.sync().await.unwrap();
        assert!(t.elapsed() >= Duration::from_micros(2));
    });
}

/// Stores that overlap in time (each waits on a slow inner device between the space check and
/// recording the store) must never together take more than the logical space: the model's
/// physical blocks would run out and it would panic.
#[test]
fn concurrent_stores_never_overcommit_space() {
    virtual_time_runtime().unwrap().block_on(async {
        let inner = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
        // Every operation sleeps before it reaches the memory device, so all stores below are
        // in flight at once.
        let slow = Arc::new(FaultyDevice::new(
            inner,
            FaultConfig {
                latency_spike_prob: 1.0,
                latency_spike: Duration::from_millis(5),
                ..Default::default()
            },
        ));
        let cfg = small(None);
        let logical = cfg.logical_bytes;
        let dev = Arc::new(SimDevice::new(slow, cfg).unwrap());
        let value = vec![9u8; 1 << 20];
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..40u32 {
            let (dev, value) = (dev.clone(), value.clone());
            tasks
                .spawn(async move { dev.store(&i.to_be_bytes(), &value, StoreMode::Upsert).await });
        }
        let (mut stored, mut refused) = (0u64, 0);
        while let Some(r) = tasks.join_next().await {
            match r.expect("no store panics") {
                Ok(()) => stored += 1,
                Err(DeviceError::Capacity { .. }) => refused += 1,
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(
            stored,
            logical / value.len() as u64,
            "the logical space fills"
        );
        assert_eq!(stored + refused, 40);
        let info = dev.info().await.unwrap();
        assert!(info.used_bytes <= logical, "{info:?}");
        assert_eq!(info.key_count, stored, "refused stores changed nothing");
        // The space held for refused stores was given back: on the full device an overwrite
        // still fits, and once a key is deleted exactly one new key does.
        let mut present = None;
        for i in 0..40u32 {
            if dev.exist(&[&i.to_be_bytes()]).await.unwrap()[0] {
                present = Some(i.to_be_bytes());
            }
        }
        let k = present.expect("some store succeeded");
        dev.store(&k, &value, StoreMode::Upsert).await.unwrap();
        dev.delete(&k, true).await.unwrap();
        dev.store(b"new", &value, StoreMode::Upsert).await.unwrap();
        let e = dev
            .store(b"new2", &value, StoreMode::Upsert)
            .await
            .unwrap_err();
        assert!(matches!(e, DeviceError::Capacity { .. }), "{e}");
    });
}
