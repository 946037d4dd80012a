//! Separation on real devices in virtual time: random writes, deletes and reads on every device
//! across many frames, checked against a model; every write that reaches a device starts while
//! its colour is a writer; after a drain every device holds exactly the model.

use async_trait::async_trait;
use railstore_device::{
    iterate_all, CompactStats, Device, DeviceInfo, IterBatch, IterRequest, Limits, MemConfig,
    MemDevice, ReadRange, Retrieved, StoreMode,
};
use railstore_rails::journal::{is_reserved, JOURNAL_KEY_PREFIX};
use railstore_rails::{Rails, RailsConfig, Role, Schedule, ScheduleConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Records the instant of every write that reaches the inner device; reads take
/// `read_delay`.
struct Recording {
    inner: MemDevice,
    writes: Mutex<Vec<Instant>>,
    read_delay: Duration,
}

#[async_trait]
impl Device for Recording {
    async fn store(&self, k: &[u8], v: &[u8], m: StoreMode) -> railstore_device::Result<()> {
        self.writes.lock().unwrap().push(Instant::now());
        // A device write takes time, so reads and role changes interleave with it.
        tokio::time::sleep(Duration::from_micros(300)).await;
        self.inner.store(k, v, m).await
    }
    async fn retrieve(&self, k: &[u8], r: ReadRange) -> railstore_device::Result<Retrieved> {
        if !self.read_delay.is_zero() {
            tokio::time::sleep(self.read_delay).await;
        }
        self.inner.retrieve(k, r).await
    }
    async fn delete(&self, k: &[u8], must: bool) -> railstore_device::Result<bool> {
        self.writes.lock().unwrap().push(Instant::now());
        self.inner.delete(k, must).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> railstore_device::Result<Vec<bool>> {
        self.inner.exist(keys).await
    }
    async fn iterate(&self, req: &IterRequest) -> railstore_device::Result<IterBatch> {
        self.inner.iterate(req).await
    }
    async fn info(&self) -> railstore_device::Result<DeviceInfo> {
        self.inner.info().await
    }
    async fn sync(&self) -> railstore_device::Result<()> {
        self.inner.sync().await
    }
    async fn compact(&self, b: u64) -> railstore_device::Result<CompactStats> {
        self.inner.compact(b).await
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}

/// Two devices, one reading and one writing, 100 ms frames, 10 ms guard.
fn two_colours() -> ScheduleConfig {
    ScheduleConfig {
        colours: 2,
        frame: Duration::from_millis(100),
        window_min: 1,
        window_max: 1,
        guard: Duration::from_millis(10),
    }
}

fn schedule_config() -> ScheduleConfig {
    ScheduleConfig {
        colours: 3,
        frame: Duration::from_millis(100),
        window_min: 2,
        window_max: 2,
        guard: Duration::from_millis(10),
    }
}

async fn run(seed: u64, buffer_bytes: u64, partial: bool) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let recs: Vec<Arc<Recording>> = (0..6)
        .map(|_| {
            Arc::new(Recording {
                inner: MemDevice::new(MemConfig::default()).unwrap(),
                writes: Mutex::new(Vec::new()),
                read_delay: Duration::ZERO,
            })
        })
        .collect();
    let colour_of: Vec<usize> = (0..6).map(|d| d % 3).collect();
    let t0 = Instant::now();
    let cfg = RailsConfig {
        write_buffer_bytes_max: buffer_bytes,
        partial_when_full: partial,
        ..RailsConfig::new(schedule_config())
    };
    let (rails, devs) = Rails::new(
        cfg,
        recs.iter().map(|r| r.clone() as Arc<dyn Device>).collect(),
        colour_of.clone(),
    )
    .unwrap();
    let mut model: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = vec![BTreeMap::new(); 6];
    let mut max_buffer = 0;
    for i in 0..3000 {
        let d = rng.gen_range(0..6);
        let key = format!("k{}", rng.gen_range(0..40)).into_bytes();
        match rng.gen_range(0..10) {
            0..=4 => {
                let v = vec![rng.gen::<u8>(); rng.gen_range(0..2000)];
                devs[d].store(&key, &v, StoreMode::Upsert).await.unwrap();
                model[d].insert(key, v);
            }
            5 => {
                let existed = devs[d].delete(&key, false).await.unwrap();
                assert_eq!(
                    existed,
                    model[d].remove(&key).is_some(),
                    "seed {seed} op {i}"
                );
            }
            _ => {
                let got = devs[d]
                    .retrieve(&key, ReadRange::ALL)
                    .await
                    .ok()
                    .map(|r| r.value.to_vec());
                assert_eq!(
                    got.as_ref(),
                    model[d].get(&key),
                    "seed {seed} op {i} device {d}"
                );
            }
        }
        for s in rails.snapshot() {
            max_buffer = max_buffer.max(s.buffer_bytes);
        }
        if rng.gen_bool(0.05) {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(1..40))).await;
        }
    }
    assert!(
        max_buffer <= buffer_bytes,
        "buffer {max_buffer} above its bound {buffer_bytes}"
    );
    // Listings see buffered writes.
    for d in 0..6 {
        let listed: Vec<Vec<u8>> = iterate_all(devs[d].as_ref(), b"k", false)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(
            listed,
            model[d].keys().cloned().collect::<Vec<_>>(),
            "seed {seed} device {d}"
        );
    }
    // No write reached a device while its colour read or guarded (partial separation aside).
    let sched = Schedule::new(schedule_config()).unwrap();
    if !partial {
        for (d, r) in recs.iter().enumerate() {
            for t in r.writes.lock().unwrap().iter() {
                let ns = (*t - t0).as_nanos() as u64;
                assert_eq!(
                    sched.role(colour_of[d], ns),
                    Role::Writer,
                    "seed {seed}: device {d} written at {ns} ns"
                );
            }
        }
    }
    rails.drain().await.unwrap();
    for d in 0..6 {
        // Rails' own keys (0xFF-led: the device's journal watermark) aside; the journal
        // records a drain made useless are gone.
        let all = iterate_all(&recs[d].inner, b"", true).await.unwrap();
        assert!(
            !all.iter().any(|e| e.key.starts_with(&JOURNAL_KEY_PREFIX)),
            "seed {seed}: device {d} keeps journal records after a drain"
        );
        let stored: BTreeMap<Vec<u8>, Vec<u8>> = all
            .into_iter()
            .filter(|e| !is_reserved(&e.key))
            .map(|e| (e.key, e.value.unwrap()))
            .collect();
        assert!(
            stored == model[d],
            "seed {seed}: device {d} differs from the model after drain"
        );
    }
    let flushed: u64 = (0..6)
        .map(|d| {
            rails
                .counters(d)
                .flushed_ops
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    assert!(flushed > 0, "nothing was ever buffered and flushed");
}

#[tokio::test(start_paused = true)]
async fn separation_matches_the_model_and_writes_only_writers() {
    for seed in 1..=4 {
        run(seed, 1 << 20, false).await;
    }
}

#[tokio::test(start_paused = true)]
async fn small_buffers_apply_back_pressure_and_stay_bounded() {
    run(9, 8 << 10, false).await;
}

#[tokio::test(start_paused = true)]
async fn partial_separation_when_full_loses_nothing() {
    run(11, 8 << 10, true).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_device_drops_its_buffer_and_fails_fast() {
    use railstore_device::{FaultConfig, FaultyDevice};
    let faulty: Vec<Arc<FaultyDevice>> = (0..3)
        .map(|_| {
            Arc::new(FaultyDevice::new(
                Arc::new(MemDevice::new(MemConfig::default()).unwrap()),
                FaultConfig::default(),
            ))
        })
        .collect();
    let cfg = RailsConfig {
        write_buffer_bytes_max: 64 << 10,
        ..RailsConfig::new(ScheduleConfig {
            colours: 3,
            frame: Duration::from_millis(100),
            window_min: 1,
            window_max: 1,
            guard: Duration::from_millis(10),
        })
    };
    let (rails, devs) = Rails::new(
        cfg,
        faulty
            .iter()
            .map(|f| f.clone() as Arc<dyn Device>)
            .collect(),
        vec![0, 1, 2],
    )
    .unwrap();
    // Device 0 reads in frame 0: its writes are buffered.
    assert_eq!(rails.role(0), Role::Reader);
    devs[0]
        .store(b"a", &[1; 1000], StoreMode::Upsert)
        .await
        .unwrap();
    assert_eq!(rails.snapshot()[0].buffer_keys, 1);
    faulty[0].fail_stop();
    // It turns writer, the flush fails, the buffer goes, and writers no longer wait on it.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(rails.snapshot()[0].buffer_bytes, 0);
    let started = Instant::now();
    for _ in 0..200 {
        assert!(devs[0]
            .store(b"b", &[2; 1000], StoreMode::Upsert)
            .await
            .is_err());
    }
    assert!(
        started.elapsed() < Duration::from_millis(1),
        "writes to a failed device waited"
    );
    // The other devices go on.
    devs[1].store(b"c", b"v", StoreMode::Upsert).await.unwrap();
    assert_eq!(
        devs[1]
            .retrieve(b"c", ReadRange::ALL)
            .await
            .unwrap()
            .value
            .to_vec(),
        b"v"
    );
}

#[tokio::test(start_paused = true)]
async fn the_window_follows_the_measured_load() {
    use railstore_rails::AdaptiveWindow;
    let mems: Vec<Arc<MemDevice>> = (0..4)
        .map(|_| Arc::new(MemDevice::new(MemConfig::default()).unwrap()))
        .collect();
    let cfg = RailsConfig {
        adaptive: Some(AdaptiveWindow {
            read_bytes_per_s: Some(100_000.0),
            write_bytes_per_s: Some(100_000.0),
            window_max: None,
        }),
        ..RailsConfig::new(ScheduleConfig {
            colours: 4,
            frame: Duration::from_millis(100),
            window_min: 1,
            window_max: 3,
            guard: Duration::from_millis(10),
        })
    };
    let (rails, devs) = Rails::new(
        cfg,
        mems.iter().map(|m| m.clone() as Arc<dyn Device>).collect(),
        vec![0, 1, 2, 3],
    )
    .unwrap();
    for d in &devs {
        d.store(b"x", &[7; 1000], StoreMode::Upsert).await.unwrap();
    }
    assert_eq!(rails.window_size(), 1);
    // Reads of 2.5 MB/s want more readers than the window may have: it grows to its maximum.
    for _ in 0..100 {
        for _ in 0..25 {
            devs[0].retrieve(b"x", ReadRange::ALL).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(rails.window_size(), 3);
    assert_eq!(rails.partial_frames(), 0);
    // Writes of 500 KB/s need five writers of four colours: back to one reader, and separation
    // is only partial.
    for _ in 0..100 {
        for d in &devs {
            d.store(b"y", &[1; 1250], StoreMode::Upsert).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(rails.window_size(), 1);
    assert!(rails.partial_frames() > 0);
}

/// Writes as fast as they are taken to the reader of a two-device ring for its whole stint:
/// (largest buffer seen, writes taken, counters of the reader).
async fn fill_one_stint(pace: bool) -> (u64, u64, u64, u64) {
    const VALUE: usize = 8 << 10;
    let mems: Vec<Arc<dyn Device>> = (0..2)
        .map(|_| Arc::new(MemDevice::new(MemConfig::default()).unwrap()) as Arc<dyn Device>)
        .collect();
    let cfg = RailsConfig {
        write_buffer_bytes_max: 256 << 10,
        pace_buffered_writes: pace,
        ..RailsConfig::new(two_colours())
    };
    let (rails, devs) = Rails::new(cfg, mems, vec![0, 1]).unwrap();
    let t0 = Instant::now();
    let (mut peak, mut taken) = (0, 0u64);
    while t0.elapsed() < Duration::from_millis(95) {
        assert_eq!(rails.role(0), Role::Reader);
        // Bounded so the unpaced run (which stops once the buffer is full) ends too.
        let key = format!("k{taken}");
        let left = Duration::from_millis(95).saturating_sub(t0.elapsed());
        let put = devs[0].store(key.as_bytes(), &[1; VALUE], StoreMode::Upsert);
        if tokio::time::timeout(left, put).await.is_err() {
            break;
        }
        taken += 1;
        peak = peak.max(rails.snapshot()[0].buffer_bytes);
    }
    let c = rails.counters(0);
    use std::sync::atomic::Ordering::Relaxed;
    (
        peak,
        taken,
        c.paced_waits.load(Relaxed),
        c.backpressure_waits.load(Relaxed),
    )
}

#[tokio::test(start_paused = true)]
async fn paced_writes_spread_over_the_stint_instead_of_stopping() {
    const VALUE: u64 = 8 << 10;
    // Device 0 reads from 0 to 100 ms: its 256 KiB buffer takes 32 KiB at once and is aimed
    // at 224 KiB by the stint's end.
    let (peak, taken, paced, full) = fill_one_stint(true).await;
    assert!(peak <= (224 << 10) + VALUE, "peak {peak}");
    assert!(paced > 0);
    assert_eq!(full, 0, "a paced write waited for a full buffer");
    // The writes were spread over the stint: 95 % of it earned about 182 KiB past the first
    // 32 KiB, 22-23 writes, with the first 4 at once.
    assert!((24..=28).contains(&taken), "{taken} writes taken");
    // Unpaced, the same load fills the whole buffer at once and then waits for room.
    let (peak, taken, paced, full) = fill_one_stint(false).await;
    assert!(peak > (256 << 10) - VALUE, "peak {peak}");
    assert!((30..=32).contains(&taken), "{taken} writes taken");
    assert_eq!(paced, 0);
    assert!(full > 0);
}

/// Device 0 reads in [0, 100 ms) and writes in [100, 200 ms). A read sent to it at 95 ms that
/// takes `read_ms`: returns when its device writes first, how many switch waits it counted,
/// and whether a write at 160 ms, after the wait, went straight to the device.
async fn first_write_after_a_late_read(read_ms: u64) -> (Duration, u64, bool) {
    let devices: Vec<Arc<Recording>> = (0..2)
        .map(|_| {
            Arc::new(Recording {
                inner: MemDevice::new(MemConfig::default()).unwrap(),
                writes: Mutex::new(Vec::new()),
                read_delay: Duration::from_millis(read_ms),
            })
        })
        .collect();
    let cfg = RailsConfig {
        durability: railstore_rails::Durability::Memory,
        switch_read_wait: Duration::from_millis(50),
        ..RailsConfig::new(two_colours())
    };
    let (rails, devs) = Rails::new(
        cfg,
        devices
            .iter()
            .map(|d| d.clone() as Arc<dyn Device>)
            .collect(),
        vec![0, 1],
    )
    .unwrap();
    let t0 = Instant::now();
    assert_eq!(rails.role(0), Role::Reader);
    devs[0]
        .store(b"a", b"buffered", StoreMode::Upsert)
        .await
        .unwrap();
    tokio::time::sleep_until(t0 + Duration::from_millis(95)).await;
    let read = tokio::spawn({
        let dev = devs[0].clone();
        async move { dev.retrieve(b"missing", ReadRange::ALL).await }
    });
    tokio::time::sleep_until(t0 + Duration::from_millis(110)).await;
    assert_eq!(rails.role(0), Role::Writer);
    // A write to the writer while the read is still at the device waits behind it too.
    devs[0]
        .store(b"b", b"direct", StoreMode::Upsert)
        .await
        .unwrap();
    tokio::time::sleep_until(t0 + Duration::from_millis(160)).await;
    let direct = || {
        rails
            .counters(0)
            .direct_ops
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = direct();
    devs[0]
        .store(b"c", b"later", StoreMode::Upsert)
        .await
        .unwrap();
    let direct_after_wait = direct() == before + 1;
    tokio::time::sleep_until(t0 + Duration::from_millis(190)).await;
    assert!(read.is_finished() || read_ms > 95);
    let first = *devices[0]
        .writes
        .lock()
        .unwrap()
        .first()
        .expect("the writer wrote nothing");
    let waits = rails
        .counters(0)
        .switch_read_waits
        .load(std::sync::atomic::Ordering::Relaxed);
    (first - t0, waits, direct_after_wait)
}

#[tokio::test(start_paused = true)]
async fn reads_in_flight_at_a_switch_finish_before_the_device_writes() {
    // The read ends at 125 ms; the device turned writer at 100 ms and waits for it.
    let (first, waits, direct) = first_write_after_a_late_read(30).await;
    assert!(
        first >= Duration::from_millis(125) && first < Duration::from_millis(130),
        "first write at {first:?}"
    );
    assert_eq!(waits, 1);
    assert!(direct, "a write after the wait was buffered");
    // A read that outlasts the bound (50 ms) does not hold the writer longer, nor later writes.
    let (first, waits, direct) = first_write_after_a_late_read(300).await;
    assert!(
        first >= Duration::from_millis(150) && first < Duration::from_millis(155),
        "first write at {first:?}"
    );
    assert_eq!(waits, 1);
    assert!(
        direct,
        "a write after the bound was buffered behind a slow read"
    );
    // The bound must leave most of a stint for writing.
    let cfg = RailsConfig {
        switch_read_wait: Duration::from_millis(60),
        ..RailsConfig::new(two_colours())
    };
    let devs: Vec<Arc<dyn Device>> = (0..2)
        .map(|_| Arc::new(MemDevice::new(MemConfig::default()).unwrap()) as Arc<dyn Device>)
        .collect();
    let e = Rails::new(cfg, devs, vec![0, 1]).err().expect("accepted");
    assert!(e.to_string().contains("half the frame"), "{e}");
}
