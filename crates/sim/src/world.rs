//! The harness: the devices (memory "disks" behind volatile caches, behind the gate), the
//! store's incarnations (each a process with its own virtual-time runtime), the execution of
//! a plan, and the checks after every step.

use crate::body;
use crate::config::{Mutation, PolicyKind, SimConfig};
use crate::gate::{Gate, GateShared};
use crate::known::{self, Context, Kind};
use crate::model::{Model, Read};
use crate::ops::{self, Outcome};
use crate::plan::{
    self, MidFault, MultipartEnd, Offline, Op, Plan, Step, Stop, StopHow, BUCKET, KEYS, PREFIXES,
};
use crate::report::{Failure, SeedReport, Stats};
use crate::volume::{VolOp, VolumeModel};
use railstore_device::sim::virtual_time_runtime;
use railstore_device::{
    iterate_all, Device, FaultConfig, FaultyDevice, MemConfig, MemDevice, ReadRange, StoreMode,
};
use railstore_store::{
    DeviceHealth, RangeSpec, RepairOptions, RepairProgress, Store, StoreConfig, StoreError,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Runtime;

mod check;
mod offline;
mod online;
mod stop;

/// Virtual time a step, an open, a shutdown or a repair may take before it counts as stuck.
const LIMIT: Duration = Duration::from_secs(900);

/// Transient errors per operation of a flaky device.
const FLAKY_TRANSIENT: f64 = 0.005;
/// Bit flips per store of a flaky device.
const FLAKY_BIT_FLIP: f64 = 0.02;

/// A device's contents: every key and value.
type Image = Vec<(Vec<u8>, Vec<u8>)>;

/// One "disk": the memory device that keeps the data, behind a volatile write cache that a
/// power cut drops.
struct Disk {
    mem: Arc<MemDevice>,
    cache: Arc<FaultyDevice>,
    /// Fail-stopped: it stays failed (across power cycles too) until replaced.
    dead: bool,
}

/// A running store: its process (runtime), the store, and the gate in front of its devices.
/// Fields drop in order: the store handle first, the runtime (and with it every task of the
/// process) last.
struct Live {
    store: Store,
    gate: Arc<GateShared>,
    rt: Runtime,
}

/// Why a seed stops early.
#[derive(Debug)]
pub(crate) enum Halt {
    /// A violation (recorded in the report).
    Failed,
    /// Beyond tolerance, the store refused to open: the seed is over, correctly.
    Refused,
    /// A known bug showed (see [`crate::known`]): the seed is over.
    Known,
}

type Flow = Result<(), Halt>;

enum Opened {
    Live(Live),
    Crashed(Runtime),
    Refused(String),
    Stuck,
}

pub(crate) struct World<'a> {
    cfg: &'a SimConfig,
    seed: u64,
    store_cfg: StoreConfig,
    _dir: tempfile::TempDir,
    disks: Vec<Disk>,
    flaky: Option<usize>,
    /// Devices the harness broke and has not repaired (what the store may rightly take out of
    /// service).
    broken: BTreeSet<usize>,
    snapshots: HashMap<usize, Image>,
    rollback: Option<Vec<Image>>,
    wrappers: u64,
    model: Model,
    /// What the volumes' objects may hold.
    volumes: VolumeModel,
    /// The store went down without a clean shutdown since the volumes were last checked.
    volumes_crashed: bool,
    live: Option<Live>,
    /// Helper runtime for device work between incarnations.
    util: Runtime,
    step: usize,
    breached: bool,
    /// A device has been rebuilt (for recognising known bugs).
    rebuilt: bool,
    /// A device has failed, been wiped, come back stale or turned flaky.
    device_fault: bool,
    /// The first check after an open narrows uncertain keys.
    fresh: bool,
    trace: String,
    /// Prints the trace as it runs (`RAILSTORE_SIM_TRACE=1`).
    verbose: bool,
    pub(crate) stats: Stats,
    pub(crate) failures: Vec<Failure>,
}

fn data_dir() -> tempfile::TempDir {
    // Fsyncs of the data folder's small files cost real time on a disk, nothing on tmpfs.
    let shm = std::path::Path::new("/dev/shm");
    let b = {
        let mut b = tempfile::Builder::new();
        b.prefix("railstore-sim-");
        b
    };
    if shm.is_dir() {
        if let Ok(d) = b.tempdir_in(shm) {
            return d;
        }
    }
    b.tempdir().expect("a temporary folder")
}

fn mix(a: u64, b: u64) -> u64 {
    crate::body_seed(a, b)
}

impl<'a> World<'a> {
    pub(crate) fn new(cfg: &'a SimConfig, seed: u64, plan: &Plan) -> World<'a> {
        // Every store of this seed runs on this thread: its ids, and so where its objects
        // land, follow from the seed.
        railstore_store::seed_ids_on_this_thread(Some(mix(seed, 0x1D5)));
        let dir = data_dir();
        let store_cfg = cfg.store_config(
            dir.path(),
            Duration::from_millis(plan.frame_ms),
            plan.partial_when_full,
        );
        let mut w = World {
            cfg,
            seed,
            store_cfg,
            _dir: dir,
            disks: Vec::new(),
            flaky: None,
            broken: BTreeSet::new(),
            snapshots: HashMap::new(),
            rollback: None,
            wrappers: 0,
            model: Model::default(),
            volumes: VolumeModel::default(),
            volumes_crashed: false,
            live: None,
            util: virtual_time_runtime().expect("a runtime"),
            step: 0,
            breached: false,
            rebuilt: false,
            device_fault: false,
            fresh: false,
            trace: String::new(),
            verbose: cfg.verbose
                || std::env::var_os("RAILSTORE_SIM_TRACE").is_some_and(|v| v != "0"),
            stats: Stats::default(),
            failures: Vec::new(),
        };
        for _ in 0..cfg.devices {
            let d = w.new_disk(None);
            w.disks.push(d);
        }
        w
    }

    pub(crate) fn trace_hash(&self) -> u64 {
        plan::fnv1a(self.trace.as_bytes())
    }

    /// Prints a line of what happened with `RAILSTORE_SIM_TRACE` set; not part of the trace.
    fn debug(&self, line: impl AsRef<str>) {
        if self.verbose {
            eprintln!("[seed {} {}] {}", self.seed, self.cfg.name(), line.as_ref());
        }
    }

    /// Records an action of the plan as it runs (the trace two runs of a seed share).
    fn log(&mut self, line: impl AsRef<str>) {
        if self.verbose {
            eprintln!("[seed {} {}] {}", self.seed, self.cfg.name(), line.as_ref());
        }
        self.trace.push_str(line.as_ref());
        self.trace.push('\n');
    }

    fn context(&self) -> Context {
        Context {
            separation: self.cfg.separation,
            rebuilt: self.rebuilt,
            device_fault: self.device_fault,
            flaky: self.flaky.is_some(),
            pack: matches!(self.cfg.policy, PolicyKind::Pack33 | PolicyKind::Hybrid),
        }
    }

    /// Records a problem: a symptom of a known bug, or a new failure.
    fn violation(&mut self, kind: Kind, what: impl Into<String>) {
        let what = what.into();
        let known = known::classify(kind, &what, &self.context()).map(|b| b.id);
        self.debug(format!("{}: {what}", known.unwrap_or("FAILURE")));
        self.failures.push(Failure {
            seed: self.seed,
            config: self.cfg.name(),
            step: self.step,
            what,
            replay: self.cfg.replay_command(self.seed),
            known,
        });
    }

    /// A known bug met and worked around (retried, or carried on past).
    fn known_hit(&mut self, kind: Kind, what: &str) -> bool {
        match known::classify(kind, what, &self.context()) {
            Some(b) => {
                self.debug(format!("{} worked around: {what}", b.id));
                *self.stats.known_hits.entry(b.id).or_default() += 1;
                true
            }
            None => false,
        }
    }

    fn halt_if_failed(&self) -> Flow {
        if self.failures.is_empty() {
            Ok(())
        } else if self.failures.iter().any(|f| f.known.is_none()) {
            Err(Halt::Failed)
        } else {
            Err(Halt::Known)
        }
    }

    fn next_seed(&mut self) -> u64 {
        self.wrappers += 1;
        mix(self.seed ^ 0xFA17, self.wrappers)
    }

    fn new_disk(&mut self, image: Option<&Image>) -> Disk {
        let mem = Arc::new(MemDevice::new(MemConfig::default()).expect("a memory device"));
        if let Some(img) = image {
            self.util.block_on(async {
                for (k, v) in img {
                    mem.store(k, v, StoreMode::Upsert)
                        .await
                        .expect("restoring an image");
                }
            });
        }
        let cache = Arc::new(FaultyDevice::new(
            mem.clone(),
            FaultConfig {
                seed: self.next_seed(),
                volatile_writes: true,
                ..FaultConfig::default()
            },
        ));
        Disk {
            mem,
            cache,
            dead: false,
        }
    }

    /// Puts a new disk at `d` (empty, or holding `image`).
    fn replace_disk(&mut self, d: usize, image: Option<&Image>) {
        let disk = self.new_disk(image);
        self.disks[d] = disk;
        if self.flaky == Some(d) {
            self.flaky = None;
        }
    }

    fn image(&self, d: usize) -> Image {
        let mem = self.disks[d].mem.clone();
        self.util.block_on(async move {
            iterate_all(mem.as_ref(), b"", true)
                .await
                .expect("reading a memory device")
                .into_iter()
                .map(|e| (e.key, e.value.unwrap_or_default()))
                .collect()
        })
    }

    /// The devices a new incarnation sees, behind a new gate.
    fn devices(&mut self, gate: &Arc<GateShared>) -> Vec<Arc<dyn Device>> {
        let mut out: Vec<Arc<dyn Device>> = Vec::new();
        for d in 0..self.disks.len() {
            let cache: Arc<dyn Device> = self.disks[d].cache.clone();
            let link: Arc<dyn Device> = if self.flaky == Some(d) {
                let seed = self.next_seed();
                Arc::new(FaultyDevice::new(
                    cache,
                    FaultConfig {
                        seed,
                        transient_error_prob: FLAKY_TRANSIENT,
                        bit_flip_prob: FLAKY_BIT_FLIP,
                        ..FaultConfig::default()
                    },
                ))
            } else {
                cache
            };
            out.push(Arc::new(Gate::new(link, gate.clone())));
        }
        out
    }

    fn new_gate(&self) -> Arc<GateShared> {
        GateShared::new(self.cfg.mutation == Some(Mutation::LyingSync))
    }

    /// Opens a store with `cfg`; with `crash_after`, the process crashes after that many
    /// device operations if the open takes that many.
    fn open(&mut self, cfg: StoreConfig, crash_after: Option<u64>) -> Opened {
        self.stats.opens += 1;
        let rt = virtual_time_runtime().expect("a runtime");
        let gate = self.new_gate();
        if let Some(n) = crash_after {
            gate.arm_crash(n);
        }
        let devices = self.devices(&gate);
        let g = gate.clone();
        let r = rt.block_on(async move {
            tokio::select! {
                r = tokio::time::timeout(LIMIT, Store::open_with_devices(cfg, devices)) => Some(r),
                _ = g.wait_tripped() => None,
            }
        });
        match r {
            None => Opened::Crashed(rt),
            Some(Ok(Ok(store))) => {
                // The mutation lies from here until a clean shutdown begins.
                gate.set_lying(true);
                Opened::Live(Live { store, gate, rt })
            }
            Some(Ok(Err(e))) => Opened::Refused(e.to_string()),
            Some(Err(_)) => Opened::Stuck,
        }
    }

    /// Every volatile cache is lost; dead devices stay dead.
    fn power_cut(&mut self) {
        let caches: Vec<(Arc<FaultyDevice>, bool)> = self
            .disks
            .iter()
            .map(|d| (d.cache.clone(), d.dead))
            .collect();
        self.util.block_on(async move {
            for (c, dead) in caches {
                c.crash().await;
                c.restart().await;
                if dead {
                    c.fail_stop();
                }
            }
        });
    }

    /// Takes the running store down.
    fn down(&mut self, how: StopHow) -> Flow {
        let Some(live) = self.live.take() else {
            return Ok(());
        };
        match how {
            StopHow::Clean => {
                live.gate.set_lying(false);
                let store = live.store.clone();
                let r = live
                    .rt
                    .block_on(async move { tokio::time::timeout(LIMIT, store.shutdown()).await });
                let problem = match r {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(format!("a clean shutdown failed: {e}")),
                    Err(_) => Some("a clean shutdown did not finish (stuck)".into()),
                };
                if let Some(p) = problem {
                    // The process exits anyway: what follows is as after a crash.
                    if !self.breached && !self.known_hit(Kind::Shutdown, &p) {
                        self.violation(Kind::Shutdown, p);
                    }
                    live.gate.trip();
                    self.volumes_crashed = true;
                } else {
                    // A clean shutdown makes every acknowledged write durable.
                    self.volumes.apply(VolOp::Flush { vol: 0 }, true);
                    self.forget_drained();
                }
                self.stats.fault("clean-restart");
            }
            StopHow::ProcessCrash => {
                live.gate.trip();
                self.volumes_crashed = true;
                self.stats.fault("process-crash");
            }
            StopHow::PowerCut => {
                live.gate.trip();
                self.volumes_crashed = true;
                self.stats.fault("power-cut");
            }
        }
        {
            let _in_runtime = live.rt.enter();
            drop(live.store);
        }
        drop(live.rt);
        if how == StopHow::PowerCut {
            self.power_cut();
        }
        self.halt_if_failed()
    }

    /// Runs the plan.
    pub(crate) fn run(&mut self, plan: &Plan) -> Flow {
        self.log(format!("open {}", self.cfg.name()));
        let cfg = self.store_cfg.clone();
        match self.open(cfg, None) {
            Opened::Live(l) => self.live = Some(l),
            Opened::Refused(e) => return self.refused("creating the store", e),
            Opened::Stuck => return self.stuck("creating the store"),
            Opened::Crashed(_) => unreachable!("no crash armed"),
        }
        {
            let live = self.live.as_ref().expect("open");
            let store = live.store.clone();
            if let Err(e) = live
                .rt
                .block_on(async move { store.create_bucket(BUCKET).await })
            {
                self.violation(Kind::Other, format!("creating the bucket failed: {e}"));
                return Err(Halt::Failed);
            }
            let store = live.store.clone();
            if let Err(e) = live
                .rt
                .block_on(async move { crate::volume::create(&store).await })
            {
                self.violation(Kind::Other, format!("creating the volumes failed: {e}"));
                return Err(Halt::Failed);
            }
        }
        self.check()?;
        for (i, step) in plan.steps.iter().enumerate() {
            self.step = i;
            self.stats.steps += 1;
            if step.breach {
                self.breached = true;
                self.stats.fault("breach");
            }
            self.log(format!(
                "step {i}: {:?} mid {:?} online {:?}",
                step.ops, step.mid, step.online
            ));
            let down = self.exec_step(step)?;
            match &step.stop {
                Some(stop) => {
                    self.log(format!("stop {i}: {stop:?}"));
                    self.stop(stop, down)?;
                }
                None => {
                    debug_assert!(!down, "a crash is always followed by a stop");
                    self.check()?;
                }
            }
        }
        self.step = plan.steps.len();
        self.log("final clean restart");
        self.down(StopHow::Clean)?;
        self.open_service()?;
        self.down(StopHow::Clean)
    }

    fn exec_step(&mut self, step: &Step) -> Result<bool, Halt> {
        let mut inputs = Vec::with_capacity(step.ops.len());
        for op in &step.ops {
            let bodies = match op {
                Op::Put { key, vid, body } => {
                    self.model.register(*vid, *key, vec![*body]);
                    vec![body::body(&[*body])]
                }
                Op::Multipart {
                    key, vid, parts, ..
                } => {
                    self.model.register(*vid, *key, parts.clone());
                    parts.iter().map(|p| body::body(&[*p])).collect()
                }
                _ => Vec::new(),
            };
            inputs.push((op.clone(), bodies));
        }
        self.stats.ops += step.ops.len() as u64;
        let live = self.live.as_ref().expect("the store runs during steps");
        let gate = live.gate.clone();
        match &step.mid {
            Some(MidFault::Crash {
                after_device_ops, ..
            }) => gate.arm_crash(*after_device_ops),
            Some(MidFault::FailStop {
                after_device_ops,
                devices,
            })
            | Some(MidFault::NodeDown {
                after_device_ops,
                devices,
                ..
            }) => gate.arm_fail(
                *after_device_ops,
                self.present(devices)
                    .iter()
                    .map(|d| self.disks[*d].cache.clone())
                    .collect(),
            ),
            None => {}
        }
        let online = step.online.filter(|&action| self.start_online(action));
        let live = self.live.as_ref().expect("the store runs during steps");
        let slots: Arc<Mutex<Vec<Option<Outcome>>>> =
            Arc::new(Mutex::new((0..inputs.len()).map(|_| None).collect()));
        let store = live.store.clone();
        let (g, s) = (gate.clone(), slots.clone());
        let volume_done: Arc<Mutex<Vec<bool>>> = Arc::new(Mutex::new(Vec::new()));
        let (volume_ops, vg, vd) = (step.volume.clone(), gate.clone(), volume_done.clone());
        let end = live.rt.block_on(async move {
            let volume_store = store.clone();
            let volume_task = tokio::spawn(async move {
                crate::volume::run(volume_store, volume_ops, |ok| {
                    // A process that crashed answers nobody.
                    if !vg.tripped() {
                        vd.lock().unwrap().push(ok);
                    }
                })
                .await
            });
            let handles: Vec<_> = inputs
                .into_iter()
                .enumerate()
                .map(|(i, (op, bodies))| {
                    let (store, g, s) = (store.clone(), g.clone(), s.clone());
                    tokio::spawn(async move {
                        let o = ops::run(store, op, bodies).await;
                        // A process that crashed answers nobody.
                        if !g.tripped() {
                            s.lock().unwrap()[i] = Some(o);
                        }
                    })
                })
                .chain(std::iter::once(volume_task))
                .collect();
            let all = futures_util::future::join_all(handles);
            tokio::select! {
                r = tokio::time::timeout(LIMIT, all) => match r {
                    Ok(joins) => StepEnd::Done(
                        joins
                            .into_iter()
                            .filter_map(|j| j.err().map(ops::panic_text))
                            .collect(),
                    ),
                    Err(_) => StepEnd::Stuck,
                },
                _ = g.wait_tripped() => StepEnd::Crashed,
            }
        });
        let mut down = false;
        match end {
            StepEnd::Done(panics) => {
                for p in panics {
                    self.violation(Kind::Other, format!("an operation {p}"));
                }
                match &step.mid {
                    Some(MidFault::Crash { power, .. }) => {
                        // The step ended before the crash point: crash now, with background
                        // work (separation flushes, packing, reaping) in flight.
                        gate.trip();
                        self.mid_crash(*power)?;
                        down = true;
                    }
                    Some(MidFault::FailStop { devices, .. }) => {
                        gate.fire_fail_now();
                        self.fail_stopped(&self.present(devices), "fail-stop");
                    }
                    Some(MidFault::NodeDown { node, devices, .. }) => {
                        gate.fire_fail_now();
                        self.log(format!("node {node} down: devices {devices:?}"));
                        self.stats.fault("node-down");
                        self.fail_stopped(&self.present(devices), "node-device-down");
                    }
                    None => {}
                }
            }
            StepEnd::Crashed => {
                let power = matches!(step.mid, Some(MidFault::Crash { power: true, .. }));
                self.mid_crash(power)?;
                down = true;
            }
            StepEnd::Stuck => {
                if self.breached {
                    self.log("stuck beyond tolerance");
                    self.stats.fault("stuck-beyond-tolerance");
                } else {
                    self.violation(
                        Kind::Other,
                        format!(
                            "the step's operations did not finish in {} s of virtual time (stuck)",
                            LIMIT.as_secs()
                        ),
                    );
                }
                gate.trip();
                let _ = self.down(StopHow::ProcessCrash);
                return Err(if self.breached {
                    Halt::Refused
                } else {
                    Halt::Failed
                });
            }
        }
        if let (Some(action), false) = (online, down) {
            self.finish_online(action)?;
        }
        let outcomes: Vec<Option<Outcome>> = std::mem::take(&mut *slots.lock().unwrap());
        let acknowledged = std::mem::take(&mut *volume_done.lock().unwrap());
        for (i, op) in step.volume.iter().enumerate() {
            let ok = acknowledged.get(i).copied().unwrap_or(false);
            if self.verbose {
                self.debug(format!("    volume {op:?}: acknowledged {ok}"));
            }
            self.volumes.apply(*op, ok);
        }
        self.settle(step, outcomes);
        self.halt_if_failed()?;
        Ok(down)
    }

    /// Of the devices a fault names, those the array has now: the planner draws from the
    /// devices of a grown array too, and a fault on a device not there (not grown yet, or
    /// drained) does not happen.
    fn present(&self, devices: &[usize]) -> Vec<usize> {
        devices
            .iter()
            .copied()
            .filter(|d| *d < self.disks.len())
            .collect()
    }

    /// `devices` stopped answering (counted in the stats as `what`).
    fn fail_stopped(&mut self, devices: &[usize], what: &'static str) {
        for d in devices {
            self.device_fault = true;
            self.disks[*d].dead = true;
            self.broken.insert(*d);
            self.stats.fault(what);
        }
    }

    fn mid_crash(&mut self, power: bool) -> Flow {
        // A fail-stop armed in the same step has either fired (its devices are dead) or not.
        if let Some(live) = &self.live {
            let _ = live.gate.fire_fail_now();
        }
        let dead: Vec<usize> = (0..self.disks.len())
            .filter(|d| self.disks[*d].cache.is_failed() && !self.disks[*d].dead)
            .collect();
        self.fail_stopped(&dead, "fail-stop");
        self.down(if power {
            StopHow::PowerCut
        } else {
            StopHow::ProcessCrash
        })
    }

    /// Applies a step's answers to the model and checks what they returned.
    fn settle(&mut self, step: &Step, outcomes: Vec<Option<Outcome>>) {
        let unsettled: BTreeSet<usize> = step.ops.iter().filter_map(Op::writes).collect();
        let beyond = self.breached;
        let mut problems = Vec::new();
        for (op, outcome) in step.ops.iter().zip(outcomes) {
            if self.verbose {
                let short = match &outcome {
                    Some(Outcome::Get(Read::Body { size, range, .. })) => {
                        format!("body of {size} bytes, range {range:?}")
                    }
                    o => format!("{o:?}"),
                };
                eprintln!("    {op:?} => {short}");
            }
            match (op, outcome) {
                (Op::Put { key, vid, .. }, Some(Outcome::Put(Ok(())))) => {
                    self.model.acknowledge(*key, Some(*vid));
                }
                (Op::Put { key, vid, .. }, r) => {
                    if r.is_some() {
                        self.stats.op_errors += 1;
                    }
                    self.model.maybe(*key, Some(*vid));
                }
                (Op::Delete { key }, Some(Outcome::Delete(Ok(existed)))) => {
                    if !beyond && existed && self.model.surely_absent(*key) {
                        problems.push(format!(
                            "deleting {:?} found an object where none may be (allowed {})",
                            KEYS[*key],
                            self.model.show(*key)
                        ));
                    }
                    if !beyond && !existed && self.model.surely_present(*key) {
                        problems.push(format!(
                            "deleting {:?} found no object where one must be (allowed {})",
                            KEYS[*key],
                            self.model.show(*key)
                        ));
                    }
                    self.model.acknowledge(*key, None);
                }
                (Op::Delete { key }, r) => {
                    if r.is_some() {
                        self.stats.op_errors += 1;
                    }
                    self.model.maybe(*key, None);
                }
                (Op::Get { key, range }, Some(Outcome::Get(read))) => {
                    let r = match range {
                        None => self
                            .model
                            .check_read(*key, &read, beyond, beyond)
                            .map(|_| ()),
                        Some(spec) => self.model.check_range(*key, *spec, &read, beyond, beyond),
                    };
                    if let Err(e) = r {
                        problems.push(format!("a read during the step: {e}"));
                    }
                    if matches!(read, Read::Error(_)) {
                        self.stats.reads_refused += 1;
                    }
                }
                (
                    Op::List {
                        prefix, delimiter, ..
                    },
                    Some(Outcome::List(r)),
                ) => match r {
                    Ok(listed) => {
                        if let Err(e) = self
                            .model
                            .check_listing(prefix, *delimiter, &listed, &unsettled)
                        {
                            if !beyond {
                                problems.push(format!("a listing during the step: {e}"));
                            }
                        }
                    }
                    Err(e) if !beyond => {
                        problems.push(format!("a listing failed within tolerance: {e}"))
                    }
                    Err(_) => {}
                },
                (Op::Multipart { key, vid, .. }, Some(Outcome::Multipart(m))) => {
                    if matches!(m.complete, Some(Ok(()))) && matches!(m.abort, Some(Ok(()))) {
                        problems.push(format!(
                            "multipart upload of {:?}: a completion and an abort racing both \
                             succeeded",
                            KEYS[*key]
                        ));
                    }
                    if m.create.is_some() || m.parts_failed > 0 {
                        self.stats.op_errors += 1;
                    }
                    match m.complete {
                        Some(Ok(())) => self.model.acknowledge(*key, Some(*vid)),
                        Some(Err((true, _))) | None => {}
                        Some(Err((false, _))) => {
                            self.stats.op_errors += 1;
                            self.model.maybe(*key, Some(*vid));
                        }
                    }
                }
                // A crash cut it off: a completion may have happened.
                (Op::Multipart { key, vid, end, .. }, None)
                    if !matches!(end, MultipartEnd::Abort | MultipartEnd::Abandon) =>
                {
                    self.model.maybe(*key, Some(*vid));
                }
                (Op::CleanupUploads, Some(Outcome::Cleanup(Err(_)))) => self.stats.op_errors += 1,
                _ => {}
            }
        }
        for p in problems {
            self.violation(Kind::Data, p);
        }
    }

    fn refused(&mut self, what: &str, e: String) -> Flow {
        if self.breached {
            self.log(format!("{what} refused beyond tolerance"));
            self.debug(format!("refused: {e}"));
            self.stats.opens_refused += 1;
            Err(Halt::Refused)
        } else {
            self.violation(
                Kind::Open,
                format!("{what}: the store refused to open within tolerance: {e}"),
            );
            self.halt_if_failed()
        }
    }

    fn stuck(&mut self, what: &str) -> Flow {
        if self.breached {
            self.stats.fault("stuck-beyond-tolerance");
            Err(Halt::Refused)
        } else {
            self.violation(Kind::Other, format!("{what} is stuck"));
            self.halt_if_failed()
        }
    }

    fn open_service(&mut self) -> Flow {
        let cfg = self.store_cfg.clone();
        match self.open(cfg, None) {
            Opened::Live(l) => {
                self.live = Some(l);
                self.fresh = true;
                self.check()
            }
            Opened::Refused(e) => self.refused("opening the store", e),
            Opened::Stuck => self.stuck("opening the store"),
            Opened::Crashed(_) => unreachable!("no crash armed"),
        }
    }

    /// Ends the seed: the store is taken down whatever state it is in.
    pub(crate) fn finish(&mut self) {
        if let Some(live) = self.live.take() {
            live.gate.trip();
            {
                let _in_runtime = live.rt.enter();
                drop(live.store);
            }
            drop(live.rt);
        }
    }

    pub(crate) fn report(&self, plan_hash: u64) -> SeedReport {
        SeedReport {
            seed: self.seed,
            config: self.cfg.name(),
            plan_hash,
            trace_hash: self.trace_hash(),
            trace: self.trace.clone(),
            stats: self.stats.clone(),
            failures: self
                .failures
                .iter()
                .filter(|f| f.known.is_none())
                .cloned()
                .collect(),
            known: self
                .failures
                .iter()
                .filter(|f| f.known.is_some())
                .cloned()
                .collect(),
        }
    }
}

enum StepEnd {
    Done(Vec<String>),
    Crashed,
    Stuck,
}
