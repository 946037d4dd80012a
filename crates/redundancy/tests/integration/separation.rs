//! The reliability manager over read/write-separated devices, in virtual time: random puts,
//! deletes and reads across many role switches return the last acknowledged value, and reads
//! go only to reader-role devices (a packed member on a writer is rebuilt from its set) — for
//! every mechanism alone and for the hybrid policy (copies, packing and splitting in one
//! group), with one group (N = n) and with several (N > n).

use railstore_device::{Device, MemConfig, MemDevice, MeteredDevice, OpKind, ReadRange, StoreMode};
use railstore_placement::PieceOrder;
use railstore_rails::{Rails, RailsConfig, Role, ScheduleConfig};
use railstore_redundancy::{Manager, ManagerConfig, Mechanism, Policy, RedundancyError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// One array under separation: its policy, devices, window and piece order.
struct Case {
    name: &'static str,
    policy: Policy,
    devices: usize,
    window: usize,
    order: PieceOrder,
    /// Value lengths: a class (lowest, past the highest) picked uniformly, then a length in it.
    value_bytes: Vec<(usize, usize)>,
}

impl Case {
    fn alone(mech: &'static str, window: usize) -> Case {
        Case {
            name: mech,
            policy: Policy::Standalone(Mechanism::parse(mech).unwrap()),
            devices: Mechanism::parse(mech).unwrap().width(),
            window,
            order: PieceOrder::Spread,
            value_bytes: vec![(0, 30_000)],
        }
    }

    /// The embedded default's policy: rep3 up to 4 KiB, pack3+3 up to 64 KiB, split3+3 above,
    /// in groups of six read through a window of three.
    fn hybrid(devices: usize, order: PieceOrder) -> Case {
        let m = |s| Mechanism::parse(s).unwrap();
        Case {
            name: "hybrid",
            policy: Policy::Hybrid {
                rules: vec![(4096, m("rep3")), (65_536, m("pack3+3"))],
                rest: m("split3+3"),
            },
            devices,
            window: 3,
            order,
            // As many objects of each mechanism.
            value_bytes: vec![(0, 4097), (4097, 65_537), (65_537, 200_000)],
        }
    }

    fn config(&self) -> ManagerConfig {
        ManagerConfig {
            policy: self.policy.clone(),
            pack_wait: Duration::from_millis(1),
            piece_order: self.order,
            ..ManagerConfig::default()
        }
    }
}

/// Runs random operations and checks every answer against the model; returns the reads that
/// reached a writer- or guard-role device (counted only for reads during which no role
/// changed).
async fn run(case: &Case, seed: u64) -> u64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mech = case.name;
    let n = case.devices;
    let metered: Vec<Arc<MeteredDevice>> = (0..n)
        .map(|_| {
            Arc::new(MeteredDevice::new(Arc::new(
                MemDevice::new(MemConfig::default()).unwrap(),
            )))
        })
        .collect();
    let layout = case.config().layout(n).unwrap();
    let colour_of: Vec<usize> = (0..n).map(|d| layout.colour_of(d)).collect();
    let schedule = ScheduleConfig {
        frame: Duration::from_millis(200),
        guard: Duration::from_millis(20),
        ..ScheduleConfig::new(layout.width(), case.window)
    };
    let (rails, devs) = Rails::new(
        RailsConfig::new(schedule),
        metered
            .iter()
            .map(|m| m.clone() as Arc<dyn Device>)
            .collect(),
        colour_of,
    )
    .unwrap();
    let m = Manager::open(devs, case.config()).await.unwrap();
    m.devices().set_read_plan(rails.read_plan());
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut reads_checked = 0;
    let mut writer_reads = 0;
    for i in 0..600 {
        let key = format!("o{}", rng.gen_range(0..50)).into_bytes();
        match rng.gen_range(0..10) {
            0..=3 => {
                let (lo, hi) = case.value_bytes[rng.gen_range(0..case.value_bytes.len())];
                let mut v = vec![0u8; rng.gen_range(lo..hi)];
                rng.fill(v.as_mut_slice());
                m.put(&key, &v, StoreMode::Upsert, None).await.unwrap();
                model.insert(key, v);
            }
            4 => {
                m.delete(&key).await.unwrap();
                model.remove(&key);
            }
            _ => {
                // Reads must not touch writer-role devices: count their retrieves around it.
                let before: Vec<u64> = metered
                    .iter()
                    .map(|d| d.stats(OpKind::Retrieve).ops)
                    .collect();
                let roles: Vec<Role> = (0..n).map(|d| rails.role(d)).collect();
                let got = m.get(&key, ReadRange::ALL).await;
                let roles_after: Vec<Role> = (0..n).map(|d| rails.role(d)).collect();
                match (model.get(&key), got) {
                    (Some(v), Ok((g, _))) => {
                        assert!(g == *v, "{mech} seed {seed} op {i}: wrong bytes")
                    }
                    (None, Err(RedundancyError::NotFound { .. })) => {}
                    (want, got) => panic!(
                        "{mech} seed {seed} op {i}: want {:?} B, got {got:?}",
                        want.map(|v| v.len())
                    ),
                }
                if roles == roles_after && model.contains_key(&key) {
                    reads_checked += 1;
                    for d in 0..n {
                        let reads = metered[d].stats(OpKind::Retrieve).ops - before[d];
                        if roles[d] != Role::Reader && reads > 0 {
                            eprintln!(
                                "{mech} N={n} seed {seed} op {i}: {:?} device {d} served {reads} reads",
                                roles[d]
                            );
                            writer_reads += reads;
                        }
                    }
                }
            }
        }
        if rng.gen_bool(0.1) {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(1..60))).await;
        }
    }
    assert!(reads_checked > 50, "only {reads_checked} reads checked");
    let flushed: u64 = (0..n)
        .map(|d| {
            rails
                .counters(d)
                .flushed_ops
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    assert!(flushed > 0, "{mech}: nothing was buffered");
    // After every buffer drained, a manager without separation reads the same.
    rails.drain().await.unwrap();
    let plain = Manager::open(
        metered
            .iter()
            .map(|m| m.clone() as Arc<dyn Device>)
            .collect(),
        case.config(),
    )
    .await
    .unwrap();
    for (k, v) in &model {
        let (g, _) = plain.get(k, ReadRange::ALL).await.unwrap();
        assert!(g == *v, "{mech} seed {seed}: {k:?} wrong after drain");
    }
    writer_reads
}

#[tokio::test(start_paused = true)]
async fn separated_arrays_return_the_last_acknowledged_value() {
    for seed in 1..=3 {
        for case in [
            Case::alone("rep2", 1),
            Case::alone("rep3", 2),
            Case::alone("split3+3", 3),
            Case::alone("split4+2", 4),
            Case::alone("pack4+2", 4),
            Case::hybrid(6, PieceOrder::Spread),
            Case::hybrid(12, PieceOrder::Spread),
        ] {
            let writer_reads = run(&case, seed).await;
            assert_eq!(
                writer_reads, 0,
                "{} N={} seed {seed}: reads reached writers",
                case.name, case.devices
            );
        }
    }
}

/// The checker bites: with copies on consecutive colours (the order of layouts made before
/// spreading), the hybrid policy's rep3 objects have a window position with no copy on a
/// reader, and the same run counts reads on writers.
#[tokio::test(start_paused = true)]
async fn consecutive_copies_send_reads_to_writers() {
    let writer_reads = run(&Case::hybrid(6, PieceOrder::Consecutive), 1).await;
    assert!(writer_reads > 0, "no read reached a writer");
}

/// A read plan whose window moves the moment the packed member's own device is first asked
/// about: before, every device but that one reads; after, only it and `after`'s two others.
struct MovingWindow {
    home: usize,
    after: [usize; 2],
    moved: std::sync::atomic::AtomicBool,
}

impl railstore_redundancy::ReadPlan for MovingWindow {
    fn prefers(&self, d: usize) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        if !self.moved.load(SeqCst) {
            if d == self.home {
                self.moved.store(true, SeqCst);
                return false;
            }
            return true;
        }
        d == self.home || self.after.contains(&d)
    }
}

/// A packed member whose device writes when its read starts and reads again by the time its
/// set is scanned (the window moved in between, with the readers holding only k pieces of
/// the set, its own among them) is served from the readers, not by the careful path that
/// reads every device.
#[tokio::test(start_paused = true)]
async fn a_packed_member_is_read_from_readers_when_the_window_moves_during_its_read() {
    let metered: Vec<Arc<MeteredDevice>> = (0..6)
        .map(|_| {
            Arc::new(MeteredDevice::new(Arc::new(
                MemDevice::new(MemConfig::default()).unwrap(),
            )))
        })
        .collect();
    let config = ManagerConfig {
        policy: Policy::Standalone(Mechanism::parse("pack3+3").unwrap()),
        pack_wait: Duration::from_millis(100),
        ..ManagerConfig::default()
    };
    let layout = config.layout(6).unwrap();
    let m = Manager::open(
        metered
            .iter()
            .map(|d| d.clone() as Arc<dyn Device>)
            .collect(),
        config.clone(),
    )
    .await
    .unwrap();
    // Three objects on three different devices form one full set: one piece per device.
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for i in 0.. {
        let key = format!("k{i}").into_bytes();
        let home = layout.place(&key).device(0);
        if keys.iter().all(|k| layout.place(k).device(0) != home) {
            keys.push(key);
        }
        if keys.len() == 3 {
            break;
        }
    }
    let value = |i: usize| vec![i as u8 + 1; 10_000];
    let values: Vec<Vec<u8>> = (0..3).map(value).collect();
    futures_util::future::join_all(
        keys.iter()
            .zip(&values)
            .map(|(k, v)| m.put(k, v, StoreMode::Upsert, None)),
    )
    .await
    .into_iter()
    .for_each(|r| r.unwrap());
    let place = layout.place(&keys[0]);
    let home = place.device(0);
    // A device holding one of the member's pointers, and any other.
    let pointer = place.of_pieces(4).device(1);
    let other = (0..6).find(|&d| d != home && d != pointer).unwrap();
    m.devices().set_read_plan(Arc::new(MovingWindow {
        home,
        after: [pointer, other],
        moved: Default::default(),
    }));
    let before: Vec<u64> = metered
        .iter()
        .map(|d| d.stats(OpKind::Retrieve).ops)
        .collect();
    let (got, _) = m.get(&keys[0], ReadRange::ALL).await.unwrap();
    assert!(got == value(0), "wrong bytes");
    for d in (0..6).filter(|&d| ![home, pointer, other].contains(&d)) {
        let reads = metered[d].stats(OpKind::Retrieve).ops - before[d];
        assert_eq!(
            reads, 0,
            "device {d}, outside the window, served {reads} reads"
        );
    }
}
