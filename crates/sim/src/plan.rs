//! The plan of one seed: every operation and every fault, drawn from the seed alone before
//! anything runs. The store's answers never feed back into the plan, so a seed always means
//! the same operations and the same faults (the plan's hash, [`Plan::hash`], shows it).

use crate::body::Segment;
use crate::config::{Mutation, SimConfig};
use railstore_store::RangeSpec;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The bucket every object lives in.
pub const BUCKET: &str = "sim";

/// The keys operations pick from: nested prefixes so that listings with prefixes and
/// delimiters have something to roll up.
pub const KEYS: [&str; 12] = [
    "a/1", "a/2", "a/b/1", "a/b/2", "a/c", "b/1", "b/2", "b/3/x", "c", "d/e/f", "e", "f/1",
];

/// Listing prefixes.
pub const PREFIXES: [&str; 6] = ["", "a/", "a/b", "b/", "d/", "x"];

/// One S3-level operation. Operations of one step run at once, each on its own key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Put version `vid` (one segment) under `KEYS[key]`.
    Put {
        /// Index into [`KEYS`].
        key: usize,
        /// The version it writes.
        vid: u64,
        /// Its body.
        body: Segment,
    },
    /// Delete `KEYS[key]`.
    Delete {
        /// Index into [`KEYS`].
        key: usize,
    },
    /// Read `KEYS[key]`, or a range of it.
    Get {
        /// Index into [`KEYS`].
        key: usize,
        /// The range asked for.
        range: Option<RangeSpec>,
    },
    /// List the bucket, page by page.
    List {
        /// Only keys starting with this.
        prefix: &'static str,
        /// Roll up at `/`.
        delimiter: bool,
        /// Entries per page.
        max_keys: usize,
    },
    /// A multipart upload of version `vid` under `KEYS[key]`.
    Multipart {
        /// Index into [`KEYS`].
        key: usize,
        /// The version it makes when it completes.
        vid: u64,
        /// The parts, in order (part i + 1).
        parts: Vec<Segment>,
        /// Parts sent a second time (same bytes, as a client retry does).
        resend: Vec<usize>,
        /// How it ends.
        end: MultipartEnd,
    },
    /// List the uploads in progress and abort them all.
    CleanupUploads,
}

impl Op {
    /// The key it writes, if it writes one.
    pub fn writes(&self) -> Option<usize> {
        match self {
            Op::Put { key, .. } | Op::Delete { key } | Op::Multipart { key, .. } => Some(*key),
            _ => None,
        }
    }
}

/// How a multipart upload ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultipartEnd {
    /// Completed.
    Complete,
    /// Aborted.
    Abort,
    /// A completion and an abort sent at once.
    RaceAbort,
    /// A completion while a part is sent again.
    RaceResend,
    /// Left open (a later cleanup or nothing ends it).
    Abandon,
}

/// A fault while operations run, triggered by the count of device operations since the step
/// began (virtual time alone would not do: memory devices answer at once, so most of a step
/// happens in one instant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MidFault {
    /// The process stops dead before device operation number `after_device_ops` (or at the
    /// end of the step if it has fewer); with `power`, the devices also lose their volatile
    /// caches.
    Crash {
        /// Device operations allowed before the crash.
        after_device_ops: u64,
        /// A power cut, not only a process crash.
        power: bool,
    },
    /// `devices` fail-stop before device operation number `after_device_ops`.
    FailStop {
        /// Device operations before the failure.
        after_device_ops: u64,
        /// Devices that stop.
        devices: Vec<usize>,
    },
    /// Node `node` goes down (a crash, a power cut or a partition: from the array's side all
    /// the same) before device operation number `after_device_ops`: every one of its devices
    /// stops answering at once. It comes back at the step's stop ([`Stop::returns`]) with
    /// what its devices had made durable.
    NodeDown {
        /// Device operations before the node goes.
        after_device_ops: u64,
        /// The node.
        node: usize,
        /// Its devices.
        devices: Vec<usize>,
    },
}

/// How the store goes down at a stop (when no crash during the step took it down already).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopHow {
    /// `shutdown`.
    Clean,
    /// Killed: background work in flight is cut; device caches survive.
    ProcessCrash,
    /// Power cut: killed, and every device loses its volatile cache.
    PowerCut,
}

/// An offline command run between restarts (as `railstore status` / `scrub` do: without
/// separation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offline {
    /// Open, report status, shut down.
    Status,
    /// Open, scrub, shut down; with `crash`, the scrub is cut after that many device
    /// operations (power cut when the flag is set).
    Scrub {
        /// (device operations, power cut) of a crash in the middle.
        crash: Option<(u64, bool)>,
    },
    /// `railstore grow` when the array has its first epoch's devices only (as many devices as
    /// a group's width join as a new layout epoch; the next opens move objects to them), else
    /// `railstore drain` (the last epoch's objects move back; the clean shutdown after the
    /// move removes its devices).
    GrowOrDrain,
    /// Open for service and crash during the open (journal replay, index load).
    CrashedOpen {
        /// Device operations before the crash.
        after_device_ops: u64,
        /// A power cut.
        power: bool,
    },
}

/// Everything done while the store is down, in this order: the store goes down, a node that
/// was down comes back, repairs (of devices broken at earlier stops), snapshots, devices
/// swapped (stale images back, devices wiped), a flaky device, offline commands, then the
/// store opens again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// How it goes down (ignored when a crash during the step took it down).
    pub how: StopHow,
    /// Devices whose contents are copied (for a stale return later).
    pub snapshot: Vec<usize>,
    /// Devices whose earlier copy is put back (they missed writes since).
    pub stale_return: Vec<usize>,
    /// Devices replaced by empty ones (a lost disk).
    pub wipe: Vec<usize>,
    /// A device that from now on answers with transient errors and flips bits in what it
    /// writes, until it is repaired.
    pub flaky: Option<usize>,
    /// Offline commands.
    pub offline: Vec<Offline>,
    /// Devices rebuilt (onto an empty device each), one at a time; the harness also rebuilds
    /// any device the store reported failed.
    pub repair: Vec<usize>,
    /// The devices of a node that went down during the step, back as it left them (what
    /// reached their stable storage), first of all: the store must not take them as current
    /// if they missed writes.
    pub returns: Vec<usize>,
    /// Mutation: copy every device.
    pub rollback_snapshot: bool,
    /// Mutation: put every device back to the copy, identity records kept current.
    pub rollback: bool,
}

impl Stop {
    fn new(how: StopHow) -> Stop {
        Stop {
            how,
            snapshot: Vec::new(),
            stale_return: Vec::new(),
            wipe: Vec::new(),
            flaky: None,
            offline: Vec::new(),
            repair: Vec::new(),
            returns: Vec::new(),
            rollback_snapshot: false,
            rollback: false,
        }
    }
}

/// What an operator does on the running store while a step's operations run (docs/admin.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Online {
    /// Device `d` is taken out of service by request, then replaced by an empty device and
    /// rebuilt in the background while the operations run; the step ends when the rebuild has.
    FailReplace(usize),
    /// A scrub runs while the operations do; the step ends when it has.
    Scrub,
    /// `railstore device remove`: the last grow's devices are drained while the operations
    /// run (refused when the array is not grown or a move runs); the step ends when the
    /// drain's move has, and the next clean stop takes the devices out.
    Drain,
}

/// One step: operations at once, maybe a fault among them, maybe a stop after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The operations, each on its own key.
    pub ops: Vec<Op>,
    /// A fault while they run.
    pub mid: Option<MidFault>,
    /// An operator's action while they run.
    pub online: Option<Online>,
    /// Volume operations, in order, beside the S3 ones.
    pub volume: Vec<crate::volume::VolOp>,
    /// What happens after them while the store is down; always there after a mid-step crash.
    pub stop: Option<Stop>,
    /// This step takes the array beyond its tolerance (beyond mode).
    pub breach: bool,
}

/// A seed's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The separation frame, milliseconds.
    pub frame_ms: u64,
    /// Whether a full write buffer writes through to its device at once (partial separation,
    /// the store's default) or waits for the device's next write frame: half the seeds each.
    pub partial_when_full: bool,
    /// The steps.
    pub steps: Vec<Step>,
}

impl Plan {
    /// The plan as text, one line per step (the trace two runs of a seed share).
    pub fn trace(&self) -> String {
        let mut s = format!(
            "frame {} ms, partial separation {}\n",
            self.frame_ms, self.partial_when_full
        );
        for (i, step) in self.steps.iter().enumerate() {
            let _ = writeln!(s, "step {i}: {step:?}");
        }
        s
    }

    /// FNV-1a of [`Plan::trace`].
    pub fn hash(&self) -> u64 {
        fnv1a(self.trace().as_bytes())
    }
}

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What the planner tracks to keep faults within the tolerance.
struct Budget {
    tolerance: usize,
    devices: usize,
    /// Devices out of service or untrustworthy until repaired.
    broken: BTreeSet<usize>,
    flaky: Option<usize>,
    /// Device -> the stop its copy was taken at.
    snapshots: BTreeMap<usize, usize>,
    stops: usize,
    breached: bool,
}

impl Budget {
    fn room(&self) -> bool {
        self.breached || self.broken.len() < self.tolerance
    }

    fn healthy(&self) -> Vec<usize> {
        (0..self.devices)
            .filter(|d| !self.broken.contains(d))
            .collect()
    }
}

struct Planner {
    rng: ChaCha8Rng,
    seed: u64,
    next_vid: u64,
    next_segment: u64,
}

impl Planner {
    fn segment(&mut self, len: usize) -> Segment {
        self.next_segment += 1;
        let mut seed = crate::body_seed(self.seed, self.next_segment);
        if seed == 0 {
            seed = 1;
        }
        Segment { seed, len }
    }

    fn vid(&mut self) -> u64 {
        self.next_vid += 1;
        self.next_vid
    }

    /// A body length of some size class: empty, small (inline), around the inline limit,
    /// one chunk, many chunks.
    fn len(&mut self) -> usize {
        match self.rng.gen_range(0..100) {
            0..=4 => 0,
            5..=39 => self.rng.gen_range(1..=4096),
            40..=46 => [4095, 4096, 4097][self.rng.gen_range(0..3)],
            47..=76 => self.rng.gen_range(4097..=80 << 10),
            77..=81 => [80 << 10, (80 << 10) + 1, 160 << 10][self.rng.gen_range(0..3)],
            _ => self.rng.gen_range((80 << 10) + 1..=300_000),
        }
    }

    fn range(&mut self) -> Option<RangeSpec> {
        match self.rng.gen_range(0..4) {
            0 => None,
            1 => Some(RangeSpec::Suffix(self.rng.gen_range(1..100_000))),
            _ => {
                let first = self.rng.gen_range(0..200_000);
                let last = self
                    .rng
                    .gen_bool(0.7)
                    .then(|| first + self.rng.gen_range(0..100_000));
                Some(RangeSpec::FromTo { first, last })
            }
        }
    }

    fn op(&mut self, key: usize) -> Op {
        match self.rng.gen_range(0..100) {
            0..=37 => {
                let vid = self.vid();
                let len = self.len();
                Op::Put {
                    key,
                    vid,
                    body: self.segment(len),
                }
            }
            38..=52 => Op::Delete { key },
            53..=72 => Op::Get {
                key,
                range: self.range(),
            },
            73..=80 => Op::List {
                prefix: PREFIXES[self.rng.gen_range(0..PREFIXES.len())],
                delimiter: self.rng.gen_bool(0.5),
                max_keys: self.rng.gen_range(1..=5),
            },
            81..=97 => {
                let vid = self.vid();
                let n = self.rng.gen_range(1..=3);
                let mut parts = Vec::new();
                for i in 0..n {
                    let len = if i + 1 == n {
                        self.rng.gen_range(1..=40 << 10)
                    } else {
                        self.rng.gen_range(16 << 10..=40 << 10)
                    };
                    parts.push(self.segment(len));
                }
                let resend = (0..n).filter(|_| self.rng.gen_bool(0.2)).collect();
                let end = match self.rng.gen_range(0..10) {
                    0..=4 => MultipartEnd::Complete,
                    5 => MultipartEnd::Abort,
                    6 | 7 => MultipartEnd::RaceAbort,
                    8 => MultipartEnd::RaceResend,
                    _ => MultipartEnd::Abandon,
                };
                Op::Multipart {
                    key,
                    vid,
                    parts,
                    resend,
                    end,
                }
            }
            _ => Op::CleanupUploads,
        }
    }

    /// Device operations before a crash or failure: mostly early in a step, sometimes late.
    fn trigger(&mut self) -> u64 {
        match self.rng.gen_range(0..3) {
            0 => self.rng.gen_range(1..=20),
            1 => self.rng.gen_range(1..=120),
            _ => self.rng.gen_range(1..=600),
        }
    }

    fn pick(&mut self, from: &[usize], n: usize) -> Vec<usize> {
        let mut from = from.to_vec();
        let mut out = Vec::new();
        while out.len() < n && !from.is_empty() {
            out.push(from.swap_remove(self.rng.gen_range(0..from.len())));
        }
        out.sort_unstable();
        out
    }

    /// Faults while the store is down, within the budget (or, once breached, anything but
    /// repairs).
    fn stop(&mut self, how: StopHow, b: &mut Budget, cfg: &SimConfig) -> Stop {
        let mut s = Stop::new(how);
        b.stops += 1;
        let mutation = cfg.mutation.is_some();
        // Repairs are of what broke at earlier stops; this stop's new faults stay.
        if !b.breached && !b.broken.is_empty() && self.rng.gen_bool(0.5) {
            s.repair = b.broken.iter().copied().collect();
            b.broken.clear();
            b.flaky = None;
        }
        if !mutation && b.snapshots.len() < 2 && self.rng.gen_bool(0.25) {
            let candidates: Vec<usize> = (0..b.devices)
                .filter(|d| !b.snapshots.contains_key(d))
                .collect();
            for d in self.pick(&candidates, 1) {
                b.snapshots.insert(d, b.stops);
                s.snapshot.push(d);
            }
        }
        if !mutation {
            let old: Vec<usize> = b
                .snapshots
                .iter()
                .filter(|(_, at)| **at < b.stops)
                .map(|(d, _)| *d)
                .collect();
            for d in old {
                if self.rng.gen_bool(0.35) && (b.broken.contains(&d) || b.room()) {
                    b.snapshots.remove(&d);
                    s.stale_return.push(d);
                    b.broken.insert(d);
                }
            }
            if self.rng.gen_bool(0.08) && b.room() {
                let healthy = b.healthy();
                for d in self.pick(&healthy, 1) {
                    s.wipe.push(d);
                    b.broken.insert(d);
                }
            }
            if b.flaky.is_none() && self.rng.gen_bool(0.15) && b.room() {
                let healthy = b.healthy();
                if let Some(&d) = self.pick(&healthy, 1).first() {
                    s.flaky = Some(d);
                    b.flaky = Some(d);
                    b.broken.insert(d);
                }
            }
        }
        if self.rng.gen_bool(0.25) {
            s.offline.push(Offline::Status);
        }
        if self.rng.gen_bool(0.25) {
            let crash = self
                .rng
                .gen_bool(0.25)
                .then(|| (self.trigger(), self.rng.gen_bool(0.5)));
            s.offline.push(Offline::Scrub { crash });
        }
        if self.rng.gen_bool(0.08) {
            s.offline.push(Offline::CrashedOpen {
                after_device_ops: self.trigger(),
                power: self.rng.gen_bool(0.5),
            });
        }
        s
    }

    fn stop_how(&mut self) -> StopHow {
        match self.rng.gen_range(0..10) {
            0..=3 => StopHow::Clean,
            4..=6 => StopHow::PowerCut,
            _ => StopHow::ProcessCrash,
        }
    }
}

/// The plan of `seed` under `cfg`.
pub fn generate(cfg: &SimConfig, seed: u64) -> Plan {
    let mut p = Planner {
        rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5349_4d55_4c41_5445),
        seed,
        next_vid: 0,
        next_segment: 0,
    };
    let frame_ms = p.rng.gen_range(100..=200);
    // From a stream of its own, so that the rest of a seed's plan is what it was before.
    let partial_when_full = ChaCha8Rng::seed_from_u64(seed ^ 0x5041_5254_4941_4c14).gen_bool(0.5);
    let mut online = ChaCha8Rng::seed_from_u64(seed ^ 0x4f4e_4c49_4e45_0016);
    // Volume operations come from a stream of their own too.
    let mut volume = ChaCha8Rng::seed_from_u64(seed ^ 0x564f_4c55_4d45_0017);
    // And grows and drains.
    let mut relayout = ChaCha8Rng::seed_from_u64(seed ^ 0x4752_4f57_0016_0005);
    // And nodes going down (multi-node configurations only).
    let mut nodes_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4e4f_4445_5330_0018);
    let node_devices = cfg.node_devices();
    let mut b = Budget {
        tolerance: cfg.tolerance(),
        // Faults may land on the devices a grow adds too (the world skips those on devices
        // the array does not have at the time).
        devices: cfg.devices + cfg.group_width(),
        broken: BTreeSet::new(),
        flaky: None,
        snapshots: BTreeMap::new(),
        stops: 0,
        breached: false,
    };
    let breach_at = cfg.beyond.then(|| {
        p.rng
            .gen_range(cfg.steps / 3..=(2 * cfg.steps / 3).max(cfg.steps / 3))
    });
    let mut steps = Vec::with_capacity(cfg.steps);
    for i in 0..cfg.steps {
        let n_ops = p.rng.gen_range(2..=6);
        let mut keys: Vec<usize> = (0..KEYS.len()).collect();
        let mut ops = Vec::new();
        for _ in 0..n_ops {
            let key = keys.swap_remove(p.rng.gen_range(0..keys.len()));
            ops.push(p.op(key));
        }
        let mut step = Step {
            ops,
            mid: None,
            online: None,
            volume: crate::volume::draw(&mut volume),
            stop: None,
            breach: false,
        };
        match cfg.mutation {
            Some(Mutation::UndetectableRollback) => {
                if i == 2 || i == cfg.steps / 2 {
                    let mut s = Stop::new(StopHow::Clean);
                    s.rollback_snapshot = i == 2;
                    s.rollback = i != 2;
                    step.stop = Some(s);
                }
                steps.push(step);
                continue;
            }
            Some(Mutation::NodeBackAsCurrent) if node_devices.len() > 1 => {
                // Half the keys written, overwritten while node 0 is down, then read.
                let keys = 0..KEYS.len() / 2;
                match i {
                    0 | 2 => {
                        step.ops = keys
                            .map(|key| {
                                let vid = p.vid();
                                let len = p.rng.gen_range(1..=4096);
                                Op::Put {
                                    key,
                                    vid,
                                    body: p.segment(len),
                                }
                            })
                            .collect();
                        if i == 2 {
                            step.mid = Some(MidFault::NodeDown {
                                after_device_ops: 1,
                                node: 0,
                                devices: node_devices[0].clone(),
                            });
                            let mut s = Stop::new(StopHow::Clean);
                            s.returns = node_devices[0].clone();
                            step.stop = Some(s);
                        }
                    }
                    3 => {
                        step.ops = keys.map(|key| Op::Get { key, range: None }).collect();
                    }
                    _ => {}
                }
                step.volume.clear();
                steps.push(step);
                continue;
            }
            // One machine: no node to bring back; the plan is the ordinary one.
            Some(Mutation::NodeBackAsCurrent) => {}
            Some(Mutation::LyingSync) => {
                if i % 5 == 4 {
                    step.mid = Some(MidFault::Crash {
                        after_device_ops: u64::MAX,
                        power: true,
                    });
                    step.stop = Some(Stop::new(StopHow::PowerCut));
                }
                steps.push(step);
                continue;
            }
            None => {}
        }
        if breach_at == Some(i) {
            step.breach = true;
            b.breached = true;
            // On the devices the array always has, so that the breach happens.
            let always = |d: &usize| *d < cfg.devices;
            let need =
                (b.tolerance + 1).saturating_sub(b.broken.iter().filter(|d| always(d)).count());
            let healthy: Vec<usize> = b.healthy().into_iter().filter(always).collect();
            let victims = p.pick(&healthy, need.max(1));
            b.broken.extend(victims.iter().copied());
            match p.rng.gen_range(0..3) {
                0 => {
                    step.mid = Some(MidFault::FailStop {
                        after_device_ops: p.trigger(),
                        devices: victims,
                    })
                }
                1 => {
                    let mut s = p.stop(StopHow::PowerCut, &mut b, cfg);
                    s.wipe.extend(victims);
                    step.stop = Some(s);
                }
                _ => {
                    step.mid = Some(MidFault::FailStop {
                        after_device_ops: p.trigger(),
                        devices: victims,
                    });
                    let how = p.stop_how();
                    step.stop = Some(p.stop(how, &mut b, cfg));
                }
            }
            steps.push(step);
            continue;
        }
        let roll = p.rng.gen_range(0..100);
        if roll < 12 {
            let power = p.rng.gen_bool(0.6);
            step.mid = Some(MidFault::Crash {
                after_device_ops: p.trigger(),
                power,
            });
            let how = if power {
                StopHow::PowerCut
            } else {
                StopHow::ProcessCrash
            };
            step.stop = Some(p.stop(how, &mut b, cfg));
        } else {
            if roll < 18 && b.room() && !b.breached {
                let healthy = b.healthy();
                let devices = p.pick(&healthy, 1);
                b.broken.extend(devices.iter().copied());
                step.mid = Some(MidFault::FailStop {
                    after_device_ops: p.trigger(),
                    devices,
                });
            } else if let Some((node, devices)) = node_down(&mut nodes_rng, &node_devices, &b) {
                b.broken.extend(devices.iter().copied());
                step.mid = Some(MidFault::NodeDown {
                    after_device_ops: nodes_rng.gen_range(1..=300),
                    node,
                    devices: devices.clone(),
                });
                // The node is back by the next open.
                let how = p.stop_how();
                let mut s = p.stop(how, &mut b, cfg);
                s.returns = devices;
                step.stop = Some(s);
            }
            // Before the stop's faults: the online device is whole again when they come. Not
            // a device failed and replaced while a node is down: the node's stop may already
            // have counted the devices broken so far as repaired.
            step.online = match online_action(&mut online, &b) {
                Some(Online::FailReplace(_))
                    if matches!(step.mid, Some(MidFault::NodeDown { .. })) =>
                {
                    None
                }
                action => action,
            };
            if step.stop.is_none() && p.rng.gen_range(0..100) < 15 {
                let how = p.stop_how();
                step.stop = Some(p.stop(how, &mut b, cfg));
            }
        }
        // A grow or drain needs an array shut down cleanly: first among the stop's commands.
        if let Some(s) = step.stop.as_mut().filter(|s| s.how == StopHow::Clean) {
            if !b.breached && relayout.gen_bool(0.4) {
                s.offline.insert(0, Offline::GrowOrDrain);
            }
        }
        steps.push(step);
    }
    Plan {
        frame_ms,
        partial_when_full,
        steps,
    }
}

/// A node to take down in a multi-node configuration (about one step in ten): one none of
/// whose devices is broken, when its devices fit in what the tolerance has left.
fn node_down(
    rng: &mut ChaCha8Rng,
    nodes: &[Vec<usize>],
    b: &Budget,
) -> Option<(usize, Vec<usize>)> {
    if nodes.len() < 2 || b.breached || !rng.gen_bool(0.1) {
        return None;
    }
    let whole: Vec<usize> = (0..nodes.len())
        .filter(|&n| nodes[n].iter().all(|d| !b.broken.contains(d)))
        .filter(|&n| b.broken.len() + nodes[n].len() <= b.tolerance)
        .collect();
    let node = *whole.get(rng.gen_range(0..whole.len().max(1)))?;
    Some((node, nodes[node].clone()))
}

/// An operator's action for a step without a crash, from a stream of its own (so the rest of a
/// seed's plan is what it was before online actions existed). A device failed and replaced
/// online is out of service only during its step, so it counts against the tolerance with the
/// devices broken so far (this step's fail-stop included) and is back before the next fault.
fn online_action(rng: &mut ChaCha8Rng, b: &Budget) -> Option<Online> {
    match rng.gen_range(0..100) {
        0..=5 if !b.breached && b.room() => {
            let healthy = b.healthy();
            Some(Online::FailReplace(
                healthy[rng.gen_range(0..healthy.len())],
            ))
        }
        6..=9 => Some(Online::Scrub),
        10..=13 => Some(Online::Drain),
        _ => None,
    }
}
