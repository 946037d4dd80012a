//! The journal of buffered writes under power failures, in virtual time: random writes,
//! deletes, reads and syncs on separated devices with volatile write caches, frames moving, and
//! the power cut at random points (between operations, or inside a sync, the flusher's included);
//! then rails is built again over the same devices, recovers, and every device is checked
//! against a model: a write acknowledged before the device's last completed sync is there (or
//! a later one), and nothing never written appears.

use async_trait::async_trait;
use railstore_device::{
    iterate_all, CompactStats, Device, DeviceError, DeviceInfo, FaultConfig, FaultyDevice,
    IterBatch, IterRequest, Limits, MemConfig, MemDevice, ReadRange, Retrieved, StoreMode,
};
use railstore_rails::journal::{is_reserved, JOURNAL_KEY_PREFIX, RECORD_OVERHEAD_BYTES};
use railstore_rails::{Durability, Rails, RailsConfig, Role, ScheduleConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One power supply for every device: once off, every operation fails until the machine is
/// "rebooted" (new wrappers over the same media).
#[derive(Default)]
struct Power {
    off: AtomicBool,
    /// Chance in a million that an operation fails with a transient error (before it
    /// reaches the device).
    transient_ppm: AtomicU32,
}

/// Per key, the values (None: a delete) written since the last completed sync.
type Writes = BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>>;

/// A device on that power supply: a faulty device with a volatile write cache, with some
/// latency so that the flushers and the test interleave. The latency comes before the power
/// check, so nothing reaches the media after the cut. It also remembers every write since the
/// last completed sync: at the cut, any of them may have reached the media on its own, in any
/// order (the faulty device alone would persist them in key order, which hides ordering bugs).
struct Powered {
    dev: Arc<FaultyDevice>,
    power: Arc<Power>,
    rng: Mutex<ChaCha8Rng>,
    unsynced: Mutex<Writes>,
    /// Cut the power right after the next watermark lands on the media.
    cut_after_watermark: AtomicBool,
}

impl Powered {
    async fn enter(&self) -> railstore_device::Result<()> {
        let (delay, transient) = {
            let mut rng = self.rng.lock().unwrap();
            let ppm = self.power.transient_ppm.load(Ordering::SeqCst);
            (
                rng.gen_bool(0.3).then(|| rng.gen_range(50..2000)),
                rng.gen_range(0..1_000_000) < ppm,
            )
        };
        if let Some(us) = delay {
            tokio::time::sleep(Duration::from_micros(us)).await;
        }
        if self.power.off.load(Ordering::SeqCst) {
            return Err(DeviceError::Failed {
                reason: "power off",
            });
        }
        if transient {
            return Err(DeviceError::Transient);
        }
        Ok(())
    }

    /// A crash the faulty device injected itself (inside a sync) cuts the power for all; a
    /// fail-stop is a failure of this device alone.
    fn leave<T>(&self, r: railstore_device::Result<T>) -> railstore_device::Result<T> {
        if matches!(
            r,
            Err(DeviceError::Failed {
                reason: "injected crash"
            })
        ) {
            self.power.off.store(true, Ordering::SeqCst);
        }
        r
    }
}

#[async_trait]
impl Device for Powered {
    async fn store(&self, k: &[u8], v: &[u8], m: StoreMode) -> railstore_device::Result<()> {
        self.enter().await?;
        if k.starts_with(&[0xFF, b'w']) && self.cut_after_watermark.swap(false, Ordering::SeqCst) {
            self.dev.store(k, v, m).await?;
            self.dev.sync().await?;
            self.power.off.store(true, Ordering::SeqCst);
            return Err(DeviceError::Failed {
                reason: "power off",
            });
        }
        let r = self.leave(self.dev.store(k, v, m).await);
        if r.is_ok() {
            let mut u = self.unsynced.lock().unwrap();
            u.entry(k.to_vec()).or_default().push(Some(v.to_vec()));
        }
        r
    }
    async fn retrieve(&self, k: &[u8], r: ReadRange) -> railstore_device::Result<Retrieved> {
        self.enter().await?;
        self.leave(self.dev.retrieve(k, r).await)
    }
    async fn delete(&self, k: &[u8], must: bool) -> railstore_device::Result<bool> {
        self.enter().await?;
        let r = self.leave(self.dev.delete(k, must).await);
        if r.is_ok() {
            let mut u = self.unsynced.lock().unwrap();
            u.entry(k.to_vec()).or_default().push(None);
        }
        r
    }
    async fn exist(&self, keys: &[&[u8]]) -> railstore_device::Result<Vec<bool>> {
        self.enter().await?;
        self.leave(self.dev.exist(keys).await)
    }
    async fn iterate(&self, req: &IterRequest) -> railstore_device::Result<IterBatch> {
        self.enter().await?;
        self.leave(self.dev.iterate(req).await)
    }
    async fn info(&self) -> railstore_device::Result<DeviceInfo> {
        self.enter().await?;
        self.leave(self.dev.info().await)
    }
    async fn sync(&self) -> railstore_device::Result<()> {
        self.enter().await?;
        // Writes that arrive while the sync runs are not covered by it.
        let covered = std::mem::take(&mut *self.unsynced.lock().unwrap());
        let r = self.leave(self.dev.sync().await);
        if r.is_err() {
            let mut u = self.unsynced.lock().unwrap();
            for (k, mut vs) in covered {
                let later = u.remove(&k).unwrap_or_default();
                vs.extend(later);
                u.insert(k, vs);
            }
        }
        r
    }
    async fn compact(&self, b: u64) -> railstore_device::Result<CompactStats> {
        self.enter().await?;
        self.leave(self.dev.compact(b).await)
    }
    fn limits(&self) -> Limits {
        self.dev.limits()
    }
}

/// The media (mem devices) and, per boot, the wrappers over them.
struct Machine {
    media: Vec<Arc<MemDevice>>,
    faulty: Vec<Arc<FaultyDevice>>,
    powered: Vec<Arc<Powered>>,
    power: Arc<Power>,
    rng: ChaCha8Rng,
    /// Chance that a key written since its device's last sync reaches the media at a cut.
    unsynced_survive: f64,
}

impl Machine {
    fn new(n: usize) -> Machine {
        Machine {
            media: (0..n)
                .map(|_| Arc::new(MemDevice::new(MemConfig::default()).unwrap()))
                .collect(),
            faulty: Vec::new(),
            powered: Vec::new(),
            power: Arc::new(Power::default()),
            rng: ChaCha8Rng::seed_from_u64(n as u64),
            unsynced_survive: 0.5,
        }
    }

    /// Powers on: fresh volatile caches over the media; device `crash_dev`, if any, crashes
    /// (cutting the power) at its `crash_after`-th write to the media (inside a sync).
    fn boot(&mut self, seed: u64, crash: Option<(usize, u64)>) -> Vec<Arc<dyn Device>> {
        self.power = Arc::new(Power::default());
        self.faulty = self
            .media
            .iter()
            .enumerate()
            .map(|(d, m)| {
                Arc::new(FaultyDevice::new(
                    m.clone(),
                    FaultConfig {
                        seed: seed ^ d as u64,
                        volatile_writes: true,
                        crash_after_inner_writes: crash
                            .and_then(|(cd, after)| (cd == d).then_some(after)),
                        ..FaultConfig::default()
                    },
                ))
            })
            .collect();
        self.rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        self.powered = self
            .faulty
            .iter()
            .enumerate()
            .map(|(d, f)| {
                Arc::new(Powered {
                    dev: f.clone(),
                    power: self.power.clone(),
                    rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed.wrapping_mul(31) ^ d as u64)),
                    unsynced: Mutex::new(BTreeMap::new()),
                    cut_after_watermark: AtomicBool::new(false),
                })
            })
            .collect();
        self.powered
            .iter()
            .map(|p| p.clone() as Arc<dyn Device>)
            .collect()
    }

    /// Cuts the power: each write since the last completed sync of its device is lost, or
    /// (for a random half of the keys) one of the values written since reached the media.
    async fn cut(&mut self) {
        self.power.off.store(true, Ordering::SeqCst);
        for f in &self.faulty {
            f.crash().await;
        }
        for (p, m) in self.powered.iter().zip(&self.media) {
            let unsynced = std::mem::take(&mut *p.unsynced.lock().unwrap());
            for (k, vs) in unsynced {
                if !self.rng.gen_bool(self.unsynced_survive) {
                    continue;
                }
                match &vs[self.rng.gen_range(0..vs.len())] {
                    Some(v) => m.store(&k, v, StoreMode::Upsert).await.unwrap(),
                    None => {
                        m.delete(&k, false).await.unwrap();
                    }
                }
            }
        }
    }

    fn is_off(&self) -> bool {
        self.power.off.load(Ordering::SeqCst)
    }
}

/// What one key of one device may hold after a power failure.
#[derive(Debug, Clone)]
struct KeyModel {
    /// Values in acknowledgement order (None: deleted); the first is the state at boot.
    values: Vec<Option<Vec<u8>>>,
    /// Index of the value the last completed sync made durable.
    floor: usize,
    /// Values of writes cut off by the power failure: they may or may not have landed.
    maybe: Vec<Option<Vec<u8>>>,
}

impl KeyModel {
    fn new(v: Option<Vec<u8>>) -> KeyModel {
        KeyModel {
            values: vec![v],
            floor: 0,
            maybe: Vec::new(),
        }
    }

    fn allows(&self, v: &Option<Vec<u8>>) -> bool {
        self.values[self.floor..].contains(v) || self.maybe.contains(v)
    }
}

type Model = Vec<BTreeMap<Vec<u8>, KeyModel>>;

/// The whole value of `key` on `dev`, which must hold it.
async fn value_of(dev: &Arc<dyn Device>, key: &[u8]) -> Vec<u8> {
    dev.retrieve(key, ReadRange::ALL)
        .await
        .unwrap()
        .value
        .to_vec()
}

fn describe(v: &Option<Vec<u8>>) -> String {
    match v {
        None => "absent".into(),
        Some(v) => format!("{:?}", String::from_utf8_lossy(&v[..v.len().min(24)])),
    }
}

#[derive(Debug, Clone, Copy)]
struct Setup {
    devices: usize,
    /// Journal copies of each buffered write.
    copies: usize,
    colours: usize,
    window: usize,
    /// The window moves between 1 and 2 readers with the load (fixed device rates).
    adaptive: bool,
    buffer_bytes: u64,
    partial: bool,
    journal_bytes: u64,
    keys: usize,
    value_bytes_max: usize,
    sleep_ms_max: u64,
    transient_ppm: u32,
}

fn config(s: &Setup, durability: Durability) -> RailsConfig {
    RailsConfig {
        write_buffer_bytes_max: s.buffer_bytes,
        partial_when_full: s.partial,
        durability,
        journal_bytes_max: s.journal_bytes,
        journal_copies: s.copies,
        adaptive: s.adaptive.then_some(railstore_rails::AdaptiveWindow {
            read_bytes_per_s: Some(5_000.0),
            write_bytes_per_s: Some(20_000.0),
            window_max: None,
        }),
        ..RailsConfig::new(ScheduleConfig {
            colours: s.colours,
            frame: Duration::from_millis(100),
            window_min: if s.adaptive { 1 } else { s.window },
            window_max: if s.adaptive { 2 } else { s.window },
            guard: Duration::from_millis(10),
        })
    }
}

/// Reads every user key of every device after recovery and checks it against the model;
/// then the model starts over from what is there (it is all durable now).
async fn check_and_rebase(seed: u64, epoch: usize, devs: &[Arc<dyn Device>], model: &mut Model) {
    for (d, dev) in devs.iter().enumerate() {
        let listed: BTreeMap<Vec<u8>, Vec<u8>> = iterate_all(dev.as_ref(), b"", true)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.key, e.value.unwrap()))
            .collect();
        for k in listed.keys() {
            assert!(
                !is_reserved(k) && model[d].contains_key(k),
                "seed {seed} epoch {epoch}: device {d} lists {k:?}, which was never written"
            );
        }
        for (k, m) in model[d].iter_mut() {
            let got = listed.get(k).cloned();
            assert!(
                m.allows(&got),
                "seed {seed} epoch {epoch}: device {d} key {:?} holds {} after recovery; \
                 durable was {}, later {:?}",
                String::from_utf8_lossy(k),
                describe(&got),
                describe(&m.values[m.floor]),
                m.values[m.floor + 1..]
                    .iter()
                    .chain(&m.maybe)
                    .map(describe)
                    .collect::<Vec<_>>()
            );
            let read = dev
                .retrieve(k, ReadRange::ALL)
                .await
                .ok()
                .map(|r| r.value.to_vec());
            assert_eq!(
                read, got,
                "seed {seed}: device {d} reads differ from listing"
            );
            *m = KeyModel::new(got);
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    replayed: u64,
    stale: u64,
    records: u64,
    crashes_in_sync: u64,
    recoveries_cut: u64,
    synced_while_buffered: u64,
    /// Window sizes seen (bit s) in adaptive seeds.
    adaptive_windows: u32,
}

/// One seed: several boots, each running random operations until the power is cut.
async fn run(seed: u64, totals: &mut Totals) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let setup = Setup {
        // From the seed, not the generator, so earlier seeds replay as they did.
        copies: 1 + (seed % 3) as usize,
        adaptive: (seed / 3) % 2 == 1,
        devices: [3, 6][rng.gen_range(0..2)],
        colours: 3,
        window: rng.gen_range(1..=2),
        buffer_bytes: [6 << 10, 1 << 20][rng.gen_range(0..2)],
        partial: rng.gen_bool(0.3),
        journal_bytes: [12 << 10, 64 << 20][rng.gen_range(0..2)],
        keys: [8, 40][rng.gen_range(0..2)],
        value_bytes_max: [64, 1500][rng.gen_range(0..2)],
        sleep_ms_max: [80, 8][rng.gen_range(0..2)],
        transient_ppm: [0, 20_000][rng.gen_range(0..2)],
    };
    let mut machine = Machine::new(setup.devices);
    let mut model: Model = vec![BTreeMap::new(); setup.devices];
    let mut op_id = 0u64;
    for epoch in 0..4 {
        // Sometimes a crash inside the n-th sync write of one device: early ones hit
        // recovery itself.
        let crash = rng.gen_bool(0.5).then(|| {
            let after = [rng.gen_range(1..12), rng.gen_range(1..200)][rng.gen_range(0..2)];
            (rng.gen_range(0..setup.devices), after)
        });
        let devs = machine.boot(seed ^ (epoch as u64) << 32, crash);
        let colours = (0..setup.devices).map(|d| d % setup.colours).collect();
        let (rails, devs) = Rails::new(config(&setup, Durability::Journal), devs, colours).unwrap();
        // Transient errors only while serving: recovery and the check run clean.
        machine.power.transient_ppm.store(0, Ordering::SeqCst);
        match rails.recover().await {
            Ok(rep) if !machine.is_off() => {
                totals.replayed += rep.replayed;
                totals.stale += rep.stale;
                check_and_rebase(seed, epoch, &devs, &mut model).await;
            }
            res => {
                totals.recoveries_cut += 1;
                // The power went during recovery: nothing was served, try the next boot.
                assert!(machine.is_off(), "seed {seed}: recovery failed: {res:?}");
                machine.cut().await;
                continue;
            }
        }
        machine
            .power
            .transient_ppm
            .store(setup.transient_ppm, Ordering::SeqCst);
        let cut_at = rng.gen_range(20..400);
        for i in 0..cut_at {
            if machine.is_off() {
                totals.crashes_in_sync += 1;
                break;
            }
            if setup.adaptive {
                totals.adaptive_windows |= 1 << rails.window_size();
            }
            let d = rng.gen_range(0..setup.devices);
            let key = format!("k{}", rng.gen_range(0..setup.keys)).into_bytes();
            match rng.gen_range(0..100) {
                0..=59 => {
                    let value = (rng.gen_range(0..100) < 75).then(|| {
                        op_id += 1;
                        let mut v = format!("s{seed}e{epoch}o{op_id}:").into_bytes();
                        v.resize(v.len() + rng.gen_range(0..setup.value_bytes_max), rng.gen());
                        v
                    });
                    let res = match &value {
                        Some(v) => devs[d].store(&key, v, StoreMode::Upsert).await,
                        None => devs[d].delete(&key, false).await.map(|_| ()),
                    };
                    let m = model[d]
                        .entry(key.clone())
                        .or_insert_with(|| KeyModel::new(None));
                    match res {
                        Ok(()) if !machine.is_off() => m.values.push(value),
                        _ => {
                            assert!(
                                machine.is_off() || matches!(res, Err(DeviceError::Transient)),
                                "seed {seed} op {i}: {res:?}"
                            );
                            m.maybe.push(value);
                        }
                    }
                }
                60..=74 => {
                    let got = devs[d].retrieve(&key, ReadRange::ALL).await;
                    if !machine.is_off() && !matches!(got, Err(DeviceError::Transient)) {
                        let want = model[d]
                            .get(&key)
                            .and_then(|m| m.values.last().cloned())
                            .flatten();
                        assert_eq!(
                            describe(&got.ok().map(|r| r.value.to_vec())),
                            describe(&want),
                            "seed {seed} epoch {epoch} op {i}: read of device {d}"
                        );
                    }
                }
                75..=89 => {
                    let buffered = rails.role(d) != Role::Writer;
                    let res = devs[d].sync().await;
                    if res.is_ok() && !machine.is_off() {
                        totals.synced_while_buffered += buffered as u64;
                        for m in model[d].values_mut() {
                            m.floor = m.values.len() - 1;
                        }
                    } else {
                        assert!(
                            machine.is_off() || matches!(res, Err(DeviceError::Transient)),
                            "seed {seed} op {i}: {res:?}"
                        );
                    }
                }
                _ => {
                    tokio::time::sleep(Duration::from_millis(
                        rng.gen_range(1..=setup.sleep_ms_max),
                    ))
                    .await;
                }
            }
        }
        totals.records += (0..setup.devices)
            .map(|d| rails.counters(d).journal_records.load(Ordering::Relaxed))
            .sum::<u64>();
        machine.cut().await;
        drop(devs);
        drop(rails);
        // Let the old flushers see the cut.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A last boot, without crashes, checks the last run.
    let devs = machine.boot(seed ^ 0xf1a1, None);
    let colours = (0..setup.devices).map(|d| d % setup.colours).collect();
    let (rails, devs) = Rails::new(config(&setup, Durability::Journal), devs, colours).unwrap();
    machine.power.transient_ppm.store(0, Ordering::SeqCst);
    let rep = rails.recover().await.unwrap();
    totals.replayed += rep.replayed;
    check_and_rebase(seed, 4, &devs, &mut model).await;
}

/// Names the seed of a failing run, whatever panicked.
struct SeedOnPanic(u64);

impl Drop for SeedOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "failing seed: {} (JOURNAL_SEED_FIRST={0} JOURNAL_SEEDS=1)",
                self.0
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn acknowledged_synced_writes_survive_power_cuts() {
    let mut totals = Totals::default();
    let seeds = std::env::var("JOURNAL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000u64);
    let first = std::env::var("JOURNAL_SEED_FIRST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0u64);
    for seed in first..first + seeds {
        let _guard = SeedOnPanic(seed);
        run(seed, &mut totals).await;
    }
    println!("{totals:?}");
    // The test exercised what it claims to.
    assert!(totals.records > 100, "{totals:?}");
    assert!(totals.replayed > 20, "{totals:?}");
    assert!(totals.stale > 20, "{totals:?}");
    assert!(totals.crashes_in_sync > 5, "{totals:?}");
    assert!(totals.recoveries_cut > 5, "{totals:?}");
    assert!(totals.synced_while_buffered > 20, "{totals:?}");
    // The adaptive seeds' window moved with the load.
    assert_eq!(totals.adaptive_windows, 0b110, "{totals:?}");
}

fn three_colours() -> ScheduleConfig {
    ScheduleConfig {
        colours: 3,
        ..two_colours()
    }
}

/// Separation with its defaults over three devices of three colours, booted with `seed`.
fn three_colour_rails(machine: &mut Machine, seed: u64) -> (Arc<Rails>, Vec<Arc<dyn Device>>) {
    Rails::new(
        RailsConfig::new(three_colours()),
        machine.boot(seed, None),
        vec![0, 1, 2],
    )
    .unwrap()
}

/// Five devices of five colours, two of them reading, each buffered write journalled `copies`
/// times.
fn five_colours_two_reading(
    machine: &mut Machine,
    copies: usize,
) -> (Arc<Rails>, Vec<Arc<dyn Device>>) {
    let schedule = ScheduleConfig {
        colours: 5,
        window_min: 2,
        window_max: 2,
        ..two_colours()
    };
    let cfg = RailsConfig {
        journal_copies: copies,
        ..RailsConfig::new(schedule)
    };
    Rails::new(cfg, machine.boot(1, None), (0..5).collect()).unwrap()
}

fn two_colours() -> ScheduleConfig {
    ScheduleConfig {
        colours: 2,
        frame: Duration::from_millis(100),
        window_min: 1,
        window_max: 1,
        guard: Duration::from_millis(10),
    }
}

/// A write buffered for a reader and synced, then the power fails before it is flushed: with
/// the journal it is there after recovery; in memory only, it is lost (so the crash test can
/// fail).
#[tokio::test(start_paused = true)]
async fn a_synced_buffered_write_survives_only_with_the_journal() {
    for durability in [Durability::Memory, Durability::Journal] {
        let mut machine = Machine::new(2);
        let cfg = RailsConfig {
            durability,
            ..RailsConfig::new(two_colours())
        };
        let (rails, devs) = Rails::new(cfg, machine.boot(1, None), vec![0, 1]).unwrap();
        assert_eq!(rails.role(0), Role::Reader);
        devs[0].store(b"k", b"v1", StoreMode::Upsert).await.unwrap();
        assert_eq!(rails.snapshot()[0].buffer_keys, 1);
        devs[0].sync().await.unwrap();
        machine.cut().await;
        drop((rails, devs));
        let (rails, devs, rep) = Rails::open(
            RailsConfig::new(two_colours()),
            machine.boot(2, None),
            vec![0, 1],
        )
        .await
        .unwrap();
        let got = devs[0].retrieve(b"k", ReadRange::ALL).await.ok();
        match durability {
            Durability::Memory => {
                assert!(got.is_none(), "a buffered write survived without a journal");
                assert_eq!(rep.replayed, 0);
            }
            Durability::Journal => {
                assert_eq!(got.unwrap().value.to_vec(), b"v1");
                assert_eq!((rep.replayed, rep.records_found), (1, 1), "{rep:?}");
                assert_eq!(
                    rails.counters(0).journal_replayed.load(Ordering::Relaxed),
                    1
                );
                // The journal is gone after recovery.
                for m in &machine.media {
                    assert!(iterate_all(m.as_ref(), &JOURNAL_KEY_PREFIX, false)
                        .await
                        .unwrap()
                        .is_empty());
                }
            }
        }
    }
}

/// A write buffered for a reader and synced, then the power fails and one device holding its
/// journal record is lost with it: with one copy the write is gone, with two (on distinct
/// devices) it is replayed from the other. So `journal_copies = t + 1` keeps an array's
/// tolerance of `t` lost devices through a power failure.
#[tokio::test(start_paused = true)]
async fn a_buffered_write_survives_a_power_cut_and_a_lost_journal_device_with_two_copies() {
    for copies in [1, 2] {
        let mut machine = Machine::new(3);
        let cfg = RailsConfig {
            journal_copies: copies,
            ..RailsConfig::new(three_colours())
        };
        let (rails, devs) = Rails::new(cfg, machine.boot(1, None), vec![0, 1, 2]).unwrap();
        assert_eq!(rails.role(0), Role::Reader);
        devs[0].store(b"k", b"v1", StoreMode::Upsert).await.unwrap();
        devs[0].sync().await.unwrap();
        machine.cut().await;
        drop((rails, devs));
        // Every device holding a record, then the first of them loses everything.
        let mut holders = Vec::new();
        for (d, m) in machine.media.iter().enumerate() {
            if !iterate_all(m.as_ref(), &JOURNAL_KEY_PREFIX, false)
                .await
                .unwrap()
                .is_empty()
            {
                holders.push(d);
            }
        }
        assert_eq!(
            holders.len(),
            copies,
            "copies {copies}: held by {holders:?}"
        );
        assert!(!holders.contains(&0), "the reader holds its own record");
        machine.media[holders[0]] = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
        let (_rails, devs, _) = Rails::open(
            RailsConfig::new(three_colours()),
            machine.boot(2, None),
            vec![0, 1, 2],
        )
        .await
        .unwrap();
        let got = devs[0].retrieve(b"k", ReadRange::ALL).await.ok();
        match copies {
            1 => assert!(
                got.is_none(),
                "the write survived the loss of its only record"
            ),
            _ => assert_eq!(got.unwrap().value.to_vec(), b"v1", "copies {copies}"),
        }
    }
}

/// A device with a journalled write fails and is replaced by an empty one for a rebuild: the
/// record addressed to the old device is dropped, not replayed onto the new one (it would put
/// an old version, or an object deleted since, there), and the journal is gone afterwards.
#[tokio::test(start_paused = true)]
async fn a_replacement_device_gets_no_journal_records_of_the_device_it_replaces() {
    for replacing in [false, true] {
        let mut machine = Machine::new(3);
        let (rails, devs) = three_colour_rails(&mut machine, 1);
        assert_eq!(rails.role(0), Role::Reader);
        devs[0]
            .store(b"k", b"old", StoreMode::Upsert)
            .await
            .unwrap();
        devs[0].sync().await.unwrap();
        machine.cut().await;
        drop((rails, devs));
        // Device 0 is replaced by an empty device.
        machine.media[0] = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
        let (rails, devs) = three_colour_rails(&mut machine, 2);
        if replacing {
            rails.replacing(0);
        }
        let rep = rails.recover().await.unwrap();
        let got = devs[0].retrieve(b"k", ReadRange::ALL).await.ok();
        if replacing {
            assert!(
                got.is_none(),
                "an old record was replayed onto the replacement"
            );
            assert_eq!(rep.replayed, 0, "{rep:?}");
            for m in &machine.media {
                assert!(iterate_all(m.as_ref(), &JOURNAL_KEY_PREFIX, false)
                    .await
                    .unwrap()
                    .is_empty());
            }
        } else {
            // Without the call the replacement would receive it: what the rebuild must avoid.
            assert_eq!(got.unwrap().value.to_vec(), b"old");
        }
    }
}

/// A write buffered (and journalled), flushed, then overwritten directly while its journal
/// record is still on a reader that cannot delete it: the record is not replayed over the
/// newer value.
#[tokio::test(start_paused = true)]
async fn a_stale_journal_record_is_not_replayed_over_a_newer_direct_write() {
    let mut machine = Machine::new(2);
    let (rails, devs) = Rails::new(
        RailsConfig::new(two_colours()),
        machine.boot(3, None),
        vec![0, 1],
    )
    .unwrap();
    // Frame 0: device 0 reads, so the write is buffered and journalled on device 1.
    assert_eq!((rails.role(0), rails.role(1)), (Role::Reader, Role::Writer));
    devs[0]
        .store(b"k", b"old", StoreMode::Upsert)
        .await
        .unwrap();
    devs[0].sync().await.unwrap();
    // Frame 1: device 0 writes (flushes, takes a checkpoint) and device 1 reads, keeping the
    // record.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!((rails.role(0), rails.role(1)), (Role::Writer, Role::Reader));
    assert_eq!(rails.snapshot()[0].buffer_keys, 0);
    let direct = rails.counters(0).direct_ops.load(Ordering::Relaxed);
    devs[0]
        .store(b"k", b"new", StoreMode::Upsert)
        .await
        .unwrap();
    assert_eq!(
        rails.counters(0).direct_ops.load(Ordering::Relaxed),
        direct + 1,
        "the newer write was not direct"
    );
    devs[0].sync().await.unwrap();
    let records = iterate_all(machine.faulty[1].as_ref(), &JOURNAL_KEY_PREFIX, false)
        .await
        .unwrap();
    assert_eq!(
        records.len(),
        1,
        "the old record should still be on device 1"
    );
    machine.cut().await;
    drop((rails, devs));
    let (_rails, devs, rep) = Rails::open(
        RailsConfig::new(two_colours()),
        machine.boot(4, None),
        vec![0, 1],
    )
    .await
    .unwrap();
    assert_eq!((rep.stale, rep.replayed), (1, 0), "{rep:?}");
    assert_eq!(value_of(&devs[0], b"k").await, b"new");
}

/// A device flushing a long backlog takes a checkpoint half way and the power fails right
/// after its watermark lands: the writes it had not flushed yet are replayed, not skipped.
#[tokio::test(start_paused = true)]
async fn a_watermark_taken_mid_flush_skips_no_unflushed_write() {
    let mut machine = Machine::new(2);
    let cfg = RailsConfig {
        write_buffer_bytes_max: 8 << 10,
        // The whole backlog arrives at once, so the flush has one to cut in half.
        pace_buffered_writes: false,
        ..RailsConfig::new(two_colours())
    };
    let (rails, devs) = Rails::new(cfg, machine.boot(6, None), vec![0, 1]).unwrap();
    assert_eq!(rails.role(0), Role::Reader);
    for i in 0..40 {
        let key = format!("k{i:02}");
        devs[0]
            .store(key.as_bytes(), &[i as u8; 100], StoreMode::Upsert)
            .await
            .unwrap();
    }
    devs[0].sync().await.unwrap();
    machine.powered[0]
        .cut_after_watermark
        .store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(machine.is_off(), "no watermark was stored");
    assert!(
        rails.counters(0).flushed_ops.load(Ordering::Relaxed) < 40,
        "the watermark came after the whole backlog: the test needs one half way"
    );
    machine.cut().await;
    drop((rails, devs));
    let (_rails, devs, rep) = Rails::open(
        RailsConfig::new(two_colours()),
        machine.boot(7, None),
        vec![0, 1],
    )
    .await
    .unwrap();
    assert!(rep.replayed > 0 && rep.stale > 0, "{rep:?}");
    for i in 0..40 {
        let key = format!("k{i:02}");
        let got = devs[0].retrieve(key.as_bytes(), ReadRange::ALL).await;
        assert_eq!(
            got.unwrap().value.to_vec(),
            vec![i as u8; 100],
            "{key} after {rep:?}"
        );
    }
}

/// A write synced while buffered, then replaced by an unsynced one before either is flushed;
/// the power fails right after the first watermark of the flush lands, and nothing unsynced
/// survives: the key holds one of the two values, never the older state.
#[tokio::test(start_paused = true)]
async fn a_synced_write_replaced_before_its_flush_is_not_skipped() {
    let mut machine = Machine::new(2);
    machine.unsynced_survive = 0.0;
    let cfg = RailsConfig {
        write_buffer_bytes_max: 8 << 10,
        ..RailsConfig::new(two_colours())
    };
    let (rails, devs) = Rails::new(cfg, machine.boot(10, None), vec![0, 1]).unwrap();
    devs[0]
        .store(b"k", b"synced", StoreMode::Upsert)
        .await
        .unwrap();
    for i in 0..30 {
        let key = format!("o{i:02}");
        devs[0]
            .store(key.as_bytes(), &[i as u8; 100], StoreMode::Upsert)
            .await
            .unwrap();
    }
    devs[0].sync().await.unwrap();
    devs[0]
        .store(b"k", b"unsynced", StoreMode::Upsert)
        .await
        .unwrap();
    machine.powered[0]
        .cut_after_watermark
        .store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(machine.is_off(), "no watermark was stored");
    machine.cut().await;
    drop((rails, devs));
    let (_rails, devs, rep) = Rails::open(
        RailsConfig::new(two_colours()),
        machine.boot(11, None),
        vec![0, 1],
    )
    .await
    .unwrap();
    // A watermark half way would pass the synced write's record while the write that
    // replaced it is neither flushed nor durably journalled; the first watermark may only come
    // once `k` is flushed.
    let got = devs[0]
        .retrieve(b"k", ReadRange::ALL)
        .await
        .map(|r| r.value.to_vec());
    assert!(
        matches!(got.as_deref(), Ok(b"synced" | b"unsynced")),
        "{got:?} after {rep:?}"
    );
}

/// The device holding a write's journal record fails: the next sync journals the write
/// again on another writer, so it still survives a power failure.
#[tokio::test(start_paused = true)]
async fn a_record_lost_with_its_device_is_journalled_again_at_sync() {
    let mut machine = Machine::new(3);
    machine.unsynced_survive = 0.0;
    let (rails, devs) = Rails::new(
        RailsConfig::new(ScheduleConfig {
            window_min: 1,
            window_max: 1,
            ..three_colours()
        }),
        machine.boot(12, None),
        vec![0, 1, 2],
    )
    .unwrap();
    assert_eq!(rails.role(0), Role::Reader);
    devs[0].store(b"k", b"v", StoreMode::Upsert).await.unwrap();
    let holder = (1..3)
        .find(|&w| {
            machine.powered[w]
                .unsynced
                .lock()
                .unwrap()
                .keys()
                .any(|k| k.starts_with(&JOURNAL_KEY_PREFIX))
        })
        .expect("a journal record on a writer");
    machine.faulty[holder].fail_stop();
    devs[0].sync().await.unwrap();
    assert_eq!(rails.counters(0).journal_records.load(Ordering::Relaxed), 2);
    machine.cut().await;
    drop((rails, devs));
    let (_rails, devs, rep) = Rails::open(
        RailsConfig::new(three_colours()),
        machine.boot(13, None),
        vec![0, 1, 2],
    )
    .await
    .unwrap();
    assert_eq!(rep.replayed, 1, "{rep:?}");
    assert_eq!(value_of(&devs[0], b"k").await, b"v");
}

/// With no other healthy device to journal on, the device takes the write (and its backlog)
/// at once, even as a reader: it is never dropped nor left unprotected.
#[tokio::test(start_paused = true)]
async fn with_no_device_to_journal_on_the_device_takes_the_write() {
    let mut machine = Machine::new(2);
    machine.unsynced_survive = 0.0;
    let (rails, devs) = Rails::new(
        RailsConfig::new(two_colours()),
        machine.boot(14, None),
        vec![0, 1],
    )
    .unwrap();
    machine.faulty[1].fail_stop();
    assert_eq!(rails.role(0), Role::Reader);
    devs[0].store(b"k", b"v", StoreMode::Upsert).await.unwrap();
    assert_eq!(
        rails.counters(0).journal_fallbacks.load(Ordering::Relaxed),
        1
    );
    assert_eq!(rails.snapshot()[0].buffer_keys, 0);
    devs[0].sync().await.unwrap();
    machine.cut().await;
    drop((rails, devs));
    let (_rails, devs, _) = Rails::open(
        RailsConfig::new(two_colours()),
        machine.boot(15, None),
        vec![0, 1],
    )
    .await
    .unwrap();
    assert_eq!(value_of(&devs[0], b"k").await, b"v");
}

/// A write that overtakes a full buffer (partial separation) leaves the buffer empty; a later
/// write to the same key, once the device writes, must not be overwritten at recovery by the
/// journal records of the overtaken writes.
#[tokio::test(start_paused = true)]
async fn a_replay_does_not_undo_a_write_after_one_that_overtook_the_buffer() {
    let mut machine = Machine::new(2);
    let cfg = RailsConfig {
        write_buffer_bytes_max: 250,
        partial_when_full: true,
        ..RailsConfig::new(two_colours())
    };
    let (rails, devs) = Rails::new(cfg, machine.boot(8, None), vec![0, 1]).unwrap();
    assert_eq!(rails.role(0), Role::Reader);
    devs[0]
        .store(b"k", &[1; 100], StoreMode::Upsert)
        .await
        .unwrap();
    devs[0]
        .store(b"k", &[2; 200], StoreMode::Upsert)
        .await
        .unwrap();
    assert_eq!(rails.counters(0).partial_ops.load(Ordering::Relaxed), 1);
    assert_eq!(rails.snapshot()[0].buffer_keys, 0);
    devs[0].sync().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(rails.role(0), Role::Writer);
    devs[0]
        .store(b"k", &[3; 10], StoreMode::Upsert)
        .await
        .unwrap();
    devs[0].sync().await.unwrap();
    machine.cut().await;
    drop((rails, devs));
    let (_rails, devs, rep) = Rails::open(
        RailsConfig::new(two_colours()),
        machine.boot(9, None),
        vec![0, 1],
    )
    .await
    .unwrap();
    assert_eq!(value_of(&devs[0], b"k").await, vec![3; 10], "{rep:?}");
}

/// Rails' keys are hidden and refused; values shrink by what a journal record adds.
#[tokio::test(start_paused = true)]
async fn reserved_keys_are_hidden_and_refused() {
    let mut machine = Machine::new(2);
    let (rails, devs) = Rails::new(
        RailsConfig::new(two_colours()),
        machine.boot(5, None),
        vec![0, 1],
    )
    .unwrap();
    let inner = machine.media[0].limits();
    assert_eq!(
        devs[0].limits().value_bytes_max,
        inner.value_bytes_max - RECORD_OVERHEAD_BYTES - inner.key_bytes_max
    );
    let e = devs[0]
        .store(&[0xFF, b'x'], b"v", StoreMode::Upsert)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("reserves"), "{e}");
    assert!(devs[0].delete(&[0xFF, b'j'], false).await.is_err());
    // A buffered write leaves a journal record on device 1 and, once flushed, a watermark on
    // device 0; neither shows.
    devs[0].store(b"a", b"1", StoreMode::Upsert).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(rails.counters(0).watermarks.load(Ordering::Relaxed) > 0);
    for dev in &devs {
        let keys: Vec<Vec<u8>> = iterate_all(dev.as_ref(), b"", false)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert!(keys.iter().all(|k| !is_reserved(k)), "{keys:?}");
    }
    let on_media = iterate_all(machine.faulty[0].as_ref(), &[0xFF], false)
        .await
        .unwrap();
    assert!(!on_media.is_empty(), "no watermark on device 0");
    let k: &[u8] = &on_media[0].key;
    assert_eq!(devs[0].exist(&[k, b"a"]).await.unwrap(), vec![false, true]);
    assert!(devs[0].retrieve(k, ReadRange::ALL).await.is_err());
    assert!(iterate_all(devs[0].as_ref(), &[0xFF], false)
        .await
        .unwrap()
        .is_empty());
}

/// Degraded service (Rails §4.2.1): with `journal_copies = 3` and a writer failed, a buffered
/// write still gets its three copies (two writers and a reader) and is acknowledged at once,
/// instead of waiting a frame for a third writer.
#[tokio::test(start_paused = true)]
async fn with_a_writer_failed_a_buffered_write_gets_its_journal_copies_without_waiting() {
    let mut machine = Machine::new(5);
    let (rails, devs) = five_colours_two_reading(&mut machine, 3);
    let by_role =
        |role: Role| -> Vec<usize> { (0..5).filter(|&d| rails.role(d) == role).collect() };
    let (readers, writers) = (by_role(Role::Reader), by_role(Role::Writer));
    assert_eq!(
        (readers.len(), writers.len()),
        (2, 3),
        "{readers:?} {writers:?}"
    );
    let target = readers[0];
    let records = || {
        rails
            .counters(target)
            .journal_records
            .load(Ordering::Relaxed)
    };
    let waits = || rails.counters(target).journal_waits.load(Ordering::Relaxed);

    devs[target]
        .store(b"whole", b"v", StoreMode::Upsert)
        .await
        .unwrap();
    assert_eq!(records(), 3, "three copies on the three writers");

    rails.mark_failed(writers[0]);
    let started = tokio::time::Instant::now();
    devs[target]
        .store(b"degraded", b"v", StoreMode::Upsert)
        .await
        .unwrap();
    assert_eq!(records(), 6, "three copies again");
    assert_eq!(waits(), 0, "the write waited for a role change");
    assert!(
        started.elapsed() < Duration::from_millis(10),
        "acknowledged after {:?}",
        started.elapsed()
    );
    assert_eq!(
        rails.role(target),
        Role::Reader,
        "it was buffered, not written"
    );
    // Where the copies are: the two writers left and the other reader.
    let mut holders = Vec::new();
    for (d, cache) in machine.faulty.iter().enumerate() {
        let n = iterate_all(cache.as_ref(), &JOURNAL_KEY_PREFIX, false)
            .await
            .unwrap()
            .len();
        if n > 0 {
            holders.push((d, n));
        }
    }
    assert!(
        holders.iter().any(|&(d, _)| d == readers[1]),
        "no copy on the other reader: {holders:?}"
    );
}

/// A window that leaves fewer writers than journal copies (RS(3,3) on six devices reading
/// three asks four copies of three writers): a buffered write takes its last copies on readers
/// and is acknowledged at once, instead of waiting a frame for writers that never come (every
/// write of such a store took a whole frame).
#[tokio::test(start_paused = true)]
async fn with_fewer_writers_than_journal_copies_a_buffered_write_does_not_wait() {
    let mut machine = Machine::new(5);
    let (rails, devs) = five_colours_two_reading(&mut machine, 4);
    let readers: Vec<usize> = (0..5).filter(|&d| rails.role(d) == Role::Reader).collect();
    assert_eq!(readers.len(), 2);
    let target = readers[0];
    let started = tokio::time::Instant::now();
    devs[target]
        .store(b"key", b"v", StoreMode::Upsert)
        .await
        .unwrap();
    let counters = rails.counters(target);
    assert_eq!(counters.journal_waits.load(Ordering::Relaxed), 0);
    assert!(
        started.elapsed() < Duration::from_millis(10),
        "acknowledged after {:?}",
        started.elapsed()
    );
    assert_eq!(rails.role(target), Role::Reader, "buffered, not written");
    assert_eq!(counters.journal_records.load(Ordering::Relaxed), 4);
    // Four copies on four distinct devices: the three writers and the other reader.
    let mut holders = Vec::new();
    for (d, cache) in machine.faulty.iter().enumerate() {
        if !iterate_all(cache.as_ref(), &JOURNAL_KEY_PREFIX, false)
            .await
            .unwrap()
            .is_empty()
        {
            holders.push(d);
        }
    }
    let expected: Vec<usize> = (0..5).filter(|&d| d != target).collect();
    assert_eq!(holders, expected);
}

/// A replacement being rebuilt serves no reads, so it writes in every frame: its writes go
/// straight to it, not into a buffer waiting for its writer frames. Once rebuilt it follows its
/// colour's role again.
#[tokio::test(start_paused = true)]
async fn a_readmitted_device_writes_in_every_frame_until_it_is_rebuilt() {
    let mut machine = Machine::new(3);
    let (rails, devs) = three_colour_rails(&mut machine, 1);
    let frame = three_colours().frame;
    let d = (0..3).find(|&d| rails.role(d) == Role::Reader).unwrap();
    rails.mark_failed(d);
    rails.readmit(d).await.unwrap();
    let direct = || rails.counters(d).direct_ops.load(Ordering::Relaxed);
    let buffered = || rails.counters(d).buffered_ops.load(Ordering::Relaxed);
    for i in 0..6u8 {
        assert_eq!(rails.role(d), Role::Writer, "frame {i}");
        devs[d]
            .store(&[b'k', i], b"v", StoreMode::Upsert)
            .await
            .unwrap();
        tokio::time::sleep(frame / 2).await;
    }
    assert_eq!((direct(), buffered()), (6, 0));
    rails.rebuilt(d);
    let mut roles = Vec::new();
    for _ in 0..6 {
        roles.push(rails.role(d));
        tokio::time::sleep(frame / 2).await;
    }
    assert!(roles.contains(&Role::Reader), "{roles:?}");
}

/// Devices added while serving (`Rails::add_devices`, a grow) take their colour's role at once:
/// a write to an added reader is buffered and journalled on another device like any other, and
/// after a power cut the array opened over every device replays it.
#[tokio::test(start_paused = true)]
async fn a_device_added_while_serving_follows_its_colour_and_its_writes_survive_a_power_cut() {
    let mut machine = Machine::new(4);
    let booted = machine.boot(1, None);
    let (rails, mut devs) = Rails::new(
        RailsConfig::new(two_colours()),
        booted[..2].to_vec(),
        vec![0, 1],
    )
    .unwrap();
    rails.recover().await.unwrap();
    devs[0].store(b"a", b"v0", StoreMode::Upsert).await.unwrap();

    let Err(e) = rails.add_devices(booted[2..].to_vec(), vec![0, 2]) else {
        panic!("a colour outside the schedule was taken");
    };
    assert!(e.to_string().contains("outside the schedule"), "{e}");
    assert_eq!(rails.device_count(), 2);
    devs.extend(rails.add_devices(booted[2..].to_vec(), vec![0, 1]).unwrap());
    assert_eq!(rails.device_count(), 4);
    for _ in 0..4 {
        assert_eq!(rails.role(2), rails.role(0));
        assert_eq!(rails.role(3), rails.role(1));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Wait for device 2's reader stint, then write to it: buffered, and journalled elsewhere.
    while rails.role(2) != Role::Reader {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    devs[2].store(b"k", b"v2", StoreMode::Upsert).await.unwrap();
    assert_eq!(rails.snapshot()[2].buffer_keys, 1);
    devs[2].sync().await.unwrap();
    devs[0].sync().await.unwrap();
    machine.cut().await;
    drop((rails, devs));

    let (_rails, devs, report) = Rails::open(
        RailsConfig::new(two_colours()),
        machine.boot(2, None),
        vec![0, 1, 0, 1],
    )
    .await
    .unwrap();
    assert!(report.replayed >= 1, "{report:?}");
    let got = devs[2].retrieve(b"k", ReadRange::ALL).await.unwrap();
    assert_eq!(got.value.to_vec(), b"v2");
    let got = devs[0].retrieve(b"a", ReadRange::ALL).await.unwrap();
    assert_eq!(got.value.to_vec(), b"v0");
}
