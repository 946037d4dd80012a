//! Growing and draining the layout, seeded (SEED= replays one seed): objects written under six
//! devices move to a grown twelve-device layout while a client puts, deletes and reads, and
//! back again by a drain; at every step every key reads as the model says, only keys whose
//! group changed move, and after each move the source holds nothing of them. A power loss in
//! the middle of a move loses no synced write and brings back no synced delete. Devices added
//! and drained while the manager serves switch its layouts under a client's load.

use railstore_device::{
    Device, FaultConfig, FaultyDevice, Limits, MemConfig, MemDevice, ReadRange, StoreMode,
};
use railstore_redundancy::format::segment_key;
use railstore_redundancy::{
    Manager, ManagerConfig, Mechanism, Move, Policy, RedundancyError, RepairOptions, RepairProgress,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

fn seeds() -> Vec<u64> {
    match std::env::var("SEED") {
        Ok(s) => vec![s.parse().expect("SEED is a number")],
        Err(_) => vec![1, 2],
    }
}

fn mem_devices(n: usize) -> Vec<Arc<MemDevice>> {
    (0..n)
        .map(|_| {
            Arc::new(
                MemDevice::new(MemConfig {
                    capacity_bytes: 1 << 30,
                    // Objects above ~8 KiB take several segments.
                    limits: Limits {
                        value_bytes_max: 8 << 10,
                        ..Limits::default()
                    },
                    queue_depth_max: 64,
                })
                .unwrap(),
            )
        })
        .collect()
}

fn as_devices<D: Device + 'static>(devs: &[Arc<D>]) -> Vec<Arc<dyn Device>> {
    devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect()
}

fn policies() -> Vec<(&'static str, Policy)> {
    let m = |s| Mechanism::parse(s).unwrap();
    vec![
        ("hash", Policy::Standalone(m("hash"))),
        ("rep3", Policy::Standalone(m("rep3"))),
        ("pack4+2", Policy::Standalone(m("pack4+2"))),
        (
            "hybrid",
            Policy::Hybrid {
                rules: vec![(256, m("rep3")), (6000, m("pack4+2"))],
                rest: m("split4+2"),
            },
        ),
    ]
}

fn config(policy: &Policy, grows: &[usize], moving: Option<Move>) -> ManagerConfig {
    ManagerConfig {
        policy: policy.clone(),
        pack_wait: Duration::from_millis(1),
        grows: grows.to_vec(),
        moving,
        ..ManagerConfig::default()
    }
}

fn value(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let len = match rng.gen_range(0..10) {
        0..=5 => rng.gen_range(1..300),
        6..=8 => rng.gen_range(300..7000),
        _ => rng.gen_range(7000..30_000),
    };
    (0..len).map(|_| rng.gen()).collect()
}

/// One client step against `m` and the model: a put, a delete or a checked read.
async fn client_step(
    m: &Manager,
    rng: &mut ChaCha8Rng,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    ctx: &str,
) {
    let key = format!("k{:03}", rng.gen_range(0..160)).into_bytes();
    match rng.gen_range(0..10) {
        0..=3 => {
            let v = value(rng);
            m.put(&key, &v, StoreMode::Upsert, None).await.unwrap();
            model.insert(key, v);
        }
        4 => {
            let existed = m.delete(&key).await.unwrap();
            assert_eq!(
                existed,
                model.remove(&key).is_some(),
                "{ctx}: delete {key:?}"
            );
        }
        5 | 6 => {
            // Conditional puts see a key that has not moved yet.
            let v = value(rng);
            let mode = if rng.gen_bool(0.5) {
                StoreMode::InsertOnly
            } else {
                StoreMode::UpdateOnly
            };
            let r = m.put(&key, &v, mode, None).await;
            match (mode, model.contains_key(&key), r) {
                (StoreMode::InsertOnly, true, Err(RedundancyError::Exists { .. }))
                | (StoreMode::UpdateOnly, false, Err(RedundancyError::NotFound { .. })) => {}
                (_, _, Ok(())) if (mode == StoreMode::InsertOnly) != model.contains_key(&key) => {
                    model.insert(key, v);
                }
                (mode, held, r) => panic!("{ctx}: {mode:?} put of {key:?} (held: {held}): {r:?}"),
            }
        }
        _ => check(m, &key, model.get(&key), ctx).await,
    }
}

async fn check(m: &Manager, key: &[u8], want: Option<&Vec<u8>>, ctx: &str) {
    match (m.get(key, ReadRange::ALL).await, want) {
        (Ok((v, _)), Some(w)) => assert!(&v == w, "{ctx}: {key:?} read other bytes"),
        (Err(RedundancyError::NotFound { .. }), None) => {}
        (got, want) => panic!(
            "{ctx}: {key:?}: {:?}, the model has {:?} B",
            got.map(|(v, _)| v.len()),
            want.map(Vec::len)
        ),
    }
    let meta = m.meta(key).await.unwrap();
    assert_eq!(
        meta.map(|m| m.len),
        want.map(|w| w.len() as u64),
        "{ctx}: meta of {key:?}"
    );
}

async fn check_all(m: &Manager, model: &BTreeMap<Vec<u8>, Vec<u8>>, ctx: &str) {
    for i in 0..160 {
        let key = format!("k{i:03}").into_bytes();
        check(m, &key, model.get(&key), ctx).await;
    }
    let listed = m.keys(b"").await.unwrap();
    for k in model.keys() {
        assert!(listed.contains(k), "{ctx}: {k:?} not listed");
    }
}

/// A manager over `mems` with `cfg`, opened once to check every key before the move (which
/// fills the metadata cache) and again without that cache for the move itself.
async fn checked_then_reopened(
    mems: &[Arc<MemDevice>],
    cfg: ManagerConfig,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    ctx: &str,
) -> Manager {
    let m = Manager::open(as_devices(mems), cfg.clone()).await.unwrap();
    check_all(&m, model, &format!("{ctx}, before the move")).await;
    drop(m);
    Manager::open(as_devices(mems), cfg).await.unwrap()
}

/// Whether any of `devices` holds a first segment of `key`.
async fn held_on(
    devs: &[Arc<MemDevice>],
    devices: impl Iterator<Item = usize>,
    key: &[u8],
) -> bool {
    let skey = segment_key(key, 0, 0);
    for d in devices {
        if devs[d].exist(&[&skey]).await.unwrap()[0] {
            return true;
        }
    }
    false
}

/// Runs a move on `m` while a client works, then checks and ends it.
async fn move_under_load(
    m: &Manager,
    rng: &mut ChaCha8Rng,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    ctx: &str,
) {
    let progress = Arc::new(RepairProgress::default());
    let mover = {
        let (m, progress) = (m.clone(), progress.clone());
        tokio::spawn(async move {
            // Slow enough that the client's steps meet it half done.
            let options = RepairOptions {
                concurrency: 4,
                write_bytes_per_s_max: Some(400_000),
            };
            m.relocate_all(options, &progress).await
        })
    };
    while !mover.is_finished() {
        client_step(m, rng, model, &format!("{ctx}, during the move")).await;
    }
    let report = mover.await.unwrap().unwrap();
    assert!(report.failed.is_empty(), "{ctx}: {report:?}");
    m.finish_move();
    check_all(m, model, &format!("{ctx}, after the move")).await;
}

/// A manager over the first six of `mems` after 300 client steps of `seed`; with the client's
/// generator and the model.
async fn six_with_objects(
    policy: &Policy,
    seed: u64,
    mems: &[Arc<MemDevice>],
    ctx: &str,
) -> (Manager, ChaCha8Rng, BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    let m = Manager::open(as_devices(&mems[..6]), config(policy, &[], None))
        .await
        .unwrap();
    for _ in 0..300 {
        client_step(&m, &mut rng, &mut model, ctx).await;
    }
    (m, rng, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_and_draining_under_load_keeps_every_object() {
    for (name, policy) in policies() {
        for seed in seeds() {
            let ctx = format!("{name} seed {seed} (SEED={seed} to replay)");
            let mems = mem_devices(12);
            let (m, mut rng, mut model) = six_with_objects(&policy, seed, &mems, &ctx).await;
            m.sync().await.unwrap();
            drop(m);

            // Grow 6 -> 12. The reads before the move fill the metadata cache; the move runs
            // on a manager that starts without it.
            let grow = config(&policy, &[6], Some(Move::Grow));
            let m = checked_then_reopened(&mems, grow, &model, &format!("{ctx}, grown")).await;
            let (_, source) = m.moving().expect("moving");
            let source = source.clone();
            let changed: Vec<Vec<u8>> = model
                .keys()
                .filter(|k| source.place(k).group() != m.layout().place(k).group())
                .cloned()
                .collect();
            let share = changed.len() as f64 / model.len() as f64;
            assert!(share <= 0.7, "{ctx}: {share} of the keys change group");
            move_under_load(&m, &mut rng, &mut model, &format!("{ctx}, grow")).await;
            for k in model.keys() {
                let old = source.place(k);
                if old.group() != m.layout().place(k).group() {
                    assert!(
                        !held_on(&mems, old.devices(), k).await,
                        "{ctx}: {k:?} still at its old place after the grow"
                    );
                } else {
                    assert!(held_on(&mems, old.devices(), k).await, "{ctx}: {k:?} moved");
                }
            }
            m.sync().await.unwrap();
            drop(m);

            // The grown layout alone, no move: everything is where it reads from.
            let m = Manager::open(as_devices(&mems), config(&policy, &[6], None))
                .await
                .unwrap();
            check_all(&m, &model, &format!("{ctx}, grown, reopened")).await;
            for _ in 0..100 {
                client_step(&m, &mut rng, &mut model, &ctx).await;
            }
            m.sync().await.unwrap();
            drop(m);

            // Drain the six added devices.
            let drain = config(&policy, &[6], Some(Move::Drain));
            let m = checked_then_reopened(&mems, drain, &model, &format!("{ctx}, draining")).await;
            move_under_load(&m, &mut rng, &mut model, &format!("{ctx}, drain")).await;
            m.sync().await.unwrap();
            drop(m);
            for k in model.keys() {
                assert!(
                    !held_on(&mems, 6..12, k).await,
                    "{ctx}: {k:?} still on a drained device"
                );
            }

            // The first six devices alone hold everything again.
            let m = Manager::open(as_devices(&mems[..6]), config(&policy, &[], None))
                .await
                .unwrap();
            check_all(&m, &model, &format!("{ctx}, drained, reopened")).await;
        }
    }
}

type State = Option<Vec<u8>>;

/// Power fails at a random point of a grow's move while a client writes; after the restart
/// the move runs again to the end, and every key reads as it was at the last completed sync or
/// as something written after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_loss_during_a_move_loses_no_synced_write() {
    for (name, policy) in policies() {
        for seed in seeds() {
            let ctx = format!("{name} seed {seed} (SEED={seed} to replay)");
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC4A5);
            let mems = mem_devices(12);
            let mut synced: BTreeMap<Vec<u8>, State> = BTreeMap::new();
            let m = Manager::open(as_devices(&mems[..6]), config(&policy, &[], None))
                .await
                .unwrap();
            for _ in 0..200 {
                let key = format!("k{:03}", rng.gen_range(0..120)).into_bytes();
                let v = value(&mut rng);
                m.put(&key, &v, StoreMode::Upsert, None).await.unwrap();
                synced.insert(key, Some(v));
            }
            m.sync().await.unwrap();
            drop(m);

            let faulty: Vec<Arc<FaultyDevice>> = mems
                .iter()
                .enumerate()
                .map(|(i, mem)| {
                    Arc::new(FaultyDevice::new(
                        mem.clone(),
                        FaultConfig {
                            seed: seed * 31 + i as u64,
                            volatile_writes: true,
                            crash_after_inner_writes: Some(rng.gen_range(10..200)),
                            ..FaultConfig::default()
                        },
                    ))
                })
                .collect();
            let crashed = || faulty.iter().any(|f| f.is_failed());
            let cfg = config(&policy, &[6], Some(Move::Grow));
            let m = Manager::open(as_devices(&faulty), cfg.clone())
                .await
                .unwrap();
            let progress = Arc::new(RepairProgress::default());
            let mover = {
                let (m, progress) = (m.clone(), progress.clone());
                tokio::spawn(async move {
                    // Slow enough that the client's writes meet it half done.
                    let options = RepairOptions {
                        concurrency: 4,
                        write_bytes_per_s_max: Some(400_000),
                    };
                    m.relocate_all(options, &progress).await
                })
            };
            let mut since: BTreeMap<Vec<u8>, Vec<State>> = BTreeMap::new();
            'run: for _round in 0..40 {
                for _ in 0..rng.gen_range(3..20) {
                    let key = format!("k{:03}", rng.gen_range(0..120)).into_bytes();
                    let state = rng.gen_bool(0.7).then(|| value(&mut rng));
                    since.entry(key.clone()).or_default().push(state.clone());
                    let r = match &state {
                        Some(v) => m.put(&key, v, StoreMode::Upsert, None).await,
                        None => m.delete(&key).await.map(|_| ()),
                    };
                    if r.is_err() || crashed() {
                        break 'run;
                    }
                }
                if m.sync().await.is_err() || crashed() {
                    break 'run;
                }
                for (k, states) in std::mem::take(&mut since) {
                    synced.insert(k, states.last().unwrap().clone());
                }
            }
            // Power fails everywhere at once.
            for f in &faulty {
                f.crash().await;
            }
            progress
                .cancel
                .store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = mover.await.unwrap();
            drop(m);
            for f in &faulty {
                f.restart().await;
            }
            let m = Manager::open(as_devices(&mems), cfg).await.unwrap();
            // The rest of the move, over what the crash left; then the recovery's scrub.
            let report = m
                .relocate_all(RepairOptions::default(), &RepairProgress::default())
                .await
                .unwrap();
            assert!(report.failed.is_empty(), "{ctx}: {report:?}");
            m.scrub(
                RepairOptions::default(),
                Arc::new(RepairProgress::default()),
            )
            .await
            .unwrap();
            let source = m.moving().expect("moving").1.clone();
            m.finish_move();
            let keys: Vec<Vec<u8>> = synced.keys().chain(since.keys()).cloned().collect();
            for k in keys {
                let mut allowed: Vec<State> = vec![synced.get(&k).cloned().flatten()];
                allowed.extend(since.get(&k).into_iter().flatten().cloned());
                let got = match m.get(&k, ReadRange::ALL).await {
                    Ok((v, _)) => Some(v),
                    Err(RedundancyError::NotFound { .. }) => None,
                    Err(e) => panic!("{ctx}: {k:?}: {e}"),
                };
                assert!(
                    allowed.contains(&got),
                    "{ctx}: {:?} reads as {} B, not its synced value or a later one",
                    String::from_utf8_lossy(&k),
                    got.map(|v| v.len() as i64).unwrap_or(-1)
                );
                if got.is_some() {
                    let old = source.place(&k);
                    let moved = old.group() != m.layout().place(&k).group();
                    assert!(
                        !moved || !held_on(&mems, old.devices(), &k).await,
                        "{ctx}: {k:?} still at its old place after the move"
                    );
                }
            }
        }
    }
}

/// A device whose reads, while `held` is set, answer with what the device held when they came
/// but only once the test lets them go, one permit each; its existence checks likewise while
/// `exists_held` is set, but asking the device only once let go. Counts what it held so far.
struct HeldReads {
    inner: Arc<dyn Device>,
    holds: Holds,
}

/// What the test and its [`HeldReads`] devices share.
#[derive(Clone)]
struct Holds {
    held: Arc<std::sync::atomic::AtomicBool>,
    arrived: Arc<std::sync::atomic::AtomicUsize>,
    permits: Arc<tokio::sync::Semaphore>,
    /// While set, an existence check waits, before it asks the device, for a permit of
    /// `permits` (counted in `arrived` like the reads).
    exists_held: Arc<std::sync::atomic::AtomicBool>,
}

impl Holds {
    fn new() -> Holds {
        Holds {
            held: Arc::default(),
            arrived: Arc::default(),
            permits: Arc::new(tokio::sync::Semaphore::new(0)),
            exists_held: Arc::default(),
        }
    }

    /// `devices` with those in `wrapped` wrapped so that their reads and existence checks can
    /// be held.
    fn wrap(
        &self,
        devices: Vec<Arc<dyn Device>>,
        wrapped: std::ops::Range<usize>,
    ) -> Vec<Arc<dyn Device>> {
        devices
            .into_iter()
            .enumerate()
            .map(|(d, inner)| {
                if !wrapped.contains(&d) {
                    return inner;
                }
                Arc::new(HeldReads {
                    inner,
                    holds: self.clone(),
                }) as Arc<dyn Device>
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl Device for HeldReads {
    async fn store(
        &self,
        key: &[u8],
        value: &[u8],
        mode: StoreMode,
    ) -> railstore_device::Result<()> {
        self.inner.store(key, value, mode).await
    }
    async fn retrieve(
        &self,
        key: &[u8],
        range: ReadRange,
    ) -> railstore_device::Result<railstore_device::Retrieved> {
        use std::sync::atomic::Ordering::SeqCst;
        let answer = self.inner.retrieve(key, range).await;
        let h = &self.holds;
        if h.held.load(SeqCst) {
            h.arrived.fetch_add(1, SeqCst);
            h.permits.acquire().await.unwrap().forget();
        }
        answer
    }
    async fn delete(&self, key: &[u8], must_exist: bool) -> railstore_device::Result<bool> {
        self.inner.delete(key, must_exist).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> railstore_device::Result<Vec<bool>> {
        use std::sync::atomic::Ordering::SeqCst;
        let h = &self.holds;
        if h.exists_held.load(SeqCst) {
            h.arrived.fetch_add(1, SeqCst);
            h.permits.acquire().await.unwrap().forget();
        }
        self.inner.exist(keys).await
    }
    async fn iterate(
        &self,
        req: &railstore_device::IterRequest,
    ) -> railstore_device::Result<railstore_device::IterBatch> {
        self.inner.iterate(req).await
    }
    async fn info(&self) -> railstore_device::Result<railstore_device::DeviceInfo> {
        self.inner.info().await
    }
    async fn sync(&self) -> railstore_device::Result<()> {
        self.inner.sync().await
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}

/// A rep3 manager growing six devices onto twelve (a move running, nothing moved yet), the
/// devices in `wrapped` held by `holds`, over 40 keys written and synced before the grow; with
/// a key whose group the grow changes.
async fn growing_with_a_moving_key(
    holds: &Holds,
    wrapped: std::ops::Range<usize>,
) -> (Manager, Vec<u8>) {
    let policy = Policy::Standalone(Mechanism::parse("rep3").unwrap());
    let mems = mem_devices(12);
    let m = Manager::open(as_devices(&mems[..6]), config(&policy, &[], None))
        .await
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("k{i:03}").into_bytes()).collect();
    for k in &keys {
        m.put(k, k, StoreMode::Upsert, None).await.unwrap();
    }
    m.sync().await.unwrap();
    drop(m);
    let devices = holds.wrap(as_devices(&mems), wrapped);
    let m = Manager::open(devices, config(&policy, &[6], Some(Move::Grow)))
        .await
        .unwrap();
    let (_, source) = m.moving().expect("moving");
    let key = keys
        .iter()
        .find(|k| source.place(k).group() != m.layout().place(k).group())
        .expect("a key that moves")
        .clone();
    (m, key)
}

/// A read that began during a move and looked at the key's new place before the key moved
/// there still finds it when the move ends before that look answers: whether to look at the
/// old place is decided when the read begins (found by `railstore sim`, seed 144 of
/// `rep3-sep-n6`: a volume block read as zeros). The look held is the cheap one, made without
/// the key's lock; the careful look after it takes the lock, as the move does, so a move
/// cannot end during it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_overlaps_the_end_of_a_move_finds_its_key() {
    use std::sync::atomic::Ordering::SeqCst;
    let holds = Holds::new();
    let Holds {
        held,
        arrived,
        permits,
        ..
    } = holds.clone();
    let (m, key) = growing_with_a_moving_key(&holds, 6..12).await;

    // The read looks at the new place (nothing there yet) and its answer is held.
    held.store(true, SeqCst);
    let reader = {
        let (m, key) = (m.clone(), key.clone());
        tokio::spawn(async move { m.get(&key, ReadRange::ALL).await })
    };
    while arrived.load(SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            !reader.is_finished(),
            "the read ended before its first look"
        );
    }
    // Meanwhile the move runs to its end.
    held.store(false, SeqCst);
    let report = m
        .relocate_all(RepairOptions::default(), &RepairProgress::default())
        .await
        .unwrap();
    assert!(
        report.objects_moved > 0 && report.failed.is_empty(),
        "{report:?}"
    );
    m.finish_move();
    permits.add_permits(1000);
    let (got, _) = reader.await.unwrap().expect("the key is found");
    assert_eq!(got, key);
}

/// `Manager::holds` (NBD block status) never calls a moving key absent: it looks at the key's
/// new place, then its old one, and a move that ran between the two looks would leave it
/// nowhere to be found. The test holds its look at the old place while the move runs; the
/// key's lock keeps the move waiting until the look is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_finds_a_key_that_moves_between_its_looks() {
    use std::sync::atomic::Ordering::SeqCst;
    // The old place is on the six first devices: their existence checks can be held.
    let holds = Holds::new();
    let (m, key) = growing_with_a_moving_key(&holds, 0..6).await;

    holds.exists_held.store(true, SeqCst);
    let asking = {
        let (m, key) = (m.clone(), key.clone());
        tokio::spawn(async move { m.holds(&key).await })
    };
    // Its look at the new place found nothing; it now waits to look at the old one.
    while holds.arrived.load(SeqCst) == 0 {
        assert!(
            !asking.is_finished(),
            "holds answered before its look at the old place"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    holds.exists_held.store(false, SeqCst);
    let mover = {
        let m = m.clone();
        tokio::spawn(async move {
            m.relocate_all(RepairOptions::default(), &RepairProgress::default())
                .await
        })
    };
    // Give the move time to reach the key (it cannot finish it while the look holds the lock).
    let mut mover = std::pin::pin!(mover);
    let early = tokio::time::timeout(Duration::from_millis(500), &mut mover).await;
    holds.permits.add_permits(1000);
    assert!(
        asking.await.unwrap().unwrap(),
        "a key that moved between the looks was called absent (move done before the look: {})",
        early.is_ok()
    );
    let report = match early {
        Ok(done) => done,
        Err(_) => mover.await,
    }
    .unwrap()
    .unwrap();
    assert!(
        report.objects_moved > 0 && report.failed.is_empty(),
        "{report:?}"
    );
    m.finish_move();
    let (got, _) = m.get(&key, ReadRange::ALL).await.unwrap();
    assert_eq!(got, key);
    assert!(m.holds(&key).await.unwrap());
}

/// A rep3 manager over `devices` (twelve: six grown onto six, no move running) holding 40
/// keys, synced; with the keys and one whose group a drain changes.
async fn grown_with_keys(devices: Vec<Arc<dyn Device>>) -> (Manager, Vec<Vec<u8>>, Vec<u8>) {
    let policy = Policy::Standalone(Mechanism::parse("rep3").unwrap());
    let m = Manager::open(devices, config(&policy, &[6], None))
        .await
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("k{i:03}").into_bytes()).collect();
    for k in &keys {
        m.put(k, k, StoreMode::Upsert, None).await.unwrap();
    }
    m.sync().await.unwrap();
    let whole = m.layout();
    let kept = whole.previous().unwrap();
    let key = keys
        .iter()
        .find(|k| kept.place(k).group() != whole.place(k).group())
        .expect("a key on the drained devices")
        .clone();
    (m, keys, key)
}

/// A drain started while the array serves (`Manager::start_drain`) returns only once the
/// operations that placed keys by the layout before it have ended: a move started after it
/// would otherwise walk the drained devices before such a write landed there, or delete what
/// such a read is about to read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_online_drain_waits_for_operations_placed_by_the_layout_before_it() {
    use std::sync::atomic::Ordering::SeqCst;
    let holds = Holds::new();
    let Holds {
        held,
        arrived,
        permits,
        ..
    } = holds.clone();
    let (m, keys, key) = grown_with_keys(holds.wrap(as_devices(&mem_devices(12)), 6..12)).await;

    held.store(true, SeqCst);
    let reader = {
        let (m, key) = (m.clone(), key.clone());
        tokio::spawn(async move { m.get(&key, ReadRange::ALL).await })
    };
    while arrived.load(SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain = {
        let m = m.clone();
        tokio::spawn(async move { m.start_drain().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!drain.is_finished(), "the drain did not wait for the read");
    assert!(m.moving().is_some(), "operations from now on see the drain");
    held.store(false, SeqCst);
    permits.add_permits(1000);
    let (got, _) = reader.await.unwrap().expect("the key is found");
    assert_eq!(got, key);
    drain.await.unwrap().unwrap();
    assert_eq!(m.layout().devices(), 6);
    let e = m.start_drain().await.unwrap_err();
    assert!(e.to_string().contains("already"), "{e}");

    let report = m
        .relocate_all(RepairOptions::default(), &RepairProgress::default())
        .await
        .unwrap();
    assert!(
        report.objects_moved > 0 && report.failed.is_empty(),
        "{report:?}"
    );
    m.finish_move();
    for k in &keys {
        let (got, _) = m.get(k, ReadRange::ALL).await.unwrap();
        assert_eq!(&got, k);
    }
    let e = m.start_drain().await.unwrap_err();
    assert!(e.to_string().contains("drained already"), "{e}");
}

/// A delete that began before an online drain and had not yet placed the key (its lookup of
/// what the key holds was slow) ends before the drain's layouts are swapped in: without that,
/// it deleted at the new place, the object stayed at the old one, and the move brought the
/// deleted object back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_straddles_an_online_drain_stays_deleted() {
    use std::sync::atomic::Ordering::SeqCst;
    let policy = Policy::Standalone(Mechanism::parse("rep3").unwrap());
    let mems = mem_devices(12);
    let (m, _, key) = grown_with_keys(as_devices(&mems)).await;
    drop(m);

    // Reopened, so the delete's lookup of the key goes to the devices.
    let holds = Holds::new();
    let m = Manager::open(
        holds.wrap(as_devices(&mems), 6..12),
        config(&policy, &[6], None),
    )
    .await
    .unwrap();
    holds.held.store(true, SeqCst);
    let delete = {
        let (m, key) = (m.clone(), key.clone());
        tokio::spawn(async move { m.delete(&key).await })
    };
    while holds.arrived.load(SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain = {
        let m = m.clone();
        tokio::spawn(async move { m.start_drain().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    holds.held.store(false, SeqCst);
    holds.permits.add_permits(1000);
    assert!(delete.await.unwrap().unwrap(), "the key existed");
    drain.await.unwrap().unwrap();
    let report = m
        .relocate_all(RepairOptions::default(), &RepairProgress::default())
        .await
        .unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    m.finish_move();
    match m.get(&key, ReadRange::ALL).await {
        Err(RedundancyError::NotFound { .. }) => {}
        other => panic!("the deleted key is back: {other:?}"),
    }
}

/// Devices added while the array serves (`Manager::start_grow`): a client works through the
/// switch and the move, every key reads as the model says throughout, the keys whose group
/// changed leave their old place, and the twelve devices opened with the grown layout hold
/// everything. Wrong layouts and device counts are refused and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_while_serving_keeps_every_object() {
    for (name, policy) in policies() {
        for seed in seeds() {
            let ctx = format!("{name} seed {seed} (SEED={seed} to replay)");
            let mems = mem_devices(18);
            let (m, mut rng, mut model) = six_with_objects(&policy, seed, &mems, &ctx).await;
            let before = m.layout();
            let grown = config(&policy, &[6], None).layout(12).unwrap();

            // Refused, and nothing changes: a count that does not match, a layout that is not
            // this one grown.
            let e = m
                .start_grow(as_devices(&mems[6..11]), grown.clone())
                .await
                .unwrap_err();
            assert!(e.to_string().contains("5 were given"), "{ctx}: {e}");
            let other = config(&policy, &[6, 6], None).layout(18).unwrap();
            let e = m
                .start_grow(as_devices(&mems[6..18]), other)
                .await
                .unwrap_err();
            assert!(e.to_string().contains("not the current one"), "{ctx}: {e}");
            assert_eq!(m.devices().len(), 6, "{ctx}");
            assert!(m.moving().is_none(), "{ctx}");

            // The switch, with a client working through it.
            let client = {
                let (m, mut rng, mut model, ctx) =
                    (m.clone(), rng.clone(), model.clone(), ctx.clone());
                let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let s = stop.clone();
                let task = tokio::spawn(async move {
                    while !s.load(std::sync::atomic::Ordering::SeqCst) {
                        client_step(&m, &mut rng, &mut model, &format!("{ctx}, switching")).await;
                    }
                    (rng, model)
                });
                (task, stop)
            };
            m.start_grow(as_devices(&mems[6..12]), grown.clone())
                .await
                .unwrap();
            client.1.store(true, std::sync::atomic::Ordering::SeqCst);
            (rng, model) = client.0.await.unwrap();
            assert_eq!(m.devices().len(), 12, "{ctx}");
            let (direction, source) = m.moving().expect("moving");
            assert_eq!(direction, Move::Grow, "{ctx}");
            assert_eq!(source.encode(), before.encode(), "{ctx}");
            let e = m
                .start_grow(as_devices(&mems[12..18]), other_grown(&policy))
                .await
                .unwrap_err();
            assert!(e.to_string().contains("running already"), "{ctx}: {e}");

            move_under_load(&m, &mut rng, &mut model, &format!("{ctx}, grow")).await;
            for k in model.keys() {
                let old = before.place(k);
                if old.group() != grown.place(k).group() {
                    assert!(
                        !held_on(&mems, old.devices(), k).await,
                        "{ctx}: {k:?} still at its old place after the grow"
                    );
                }
            }
            m.sync().await.unwrap();
            drop(m);
            let m = Manager::open(as_devices(&mems[..12]), config(&policy, &[6], None))
                .await
                .unwrap();
            check_all(&m, &model, &format!("{ctx}, grown online, reopened")).await;
        }
    }
}

/// Twelve devices grown to eighteen: a layout a manager of twelve may take, not one of six.
fn other_grown(policy: &Policy) -> railstore_placement::Layout {
    config(policy, &[6, 6], None).layout(18).unwrap()
}
