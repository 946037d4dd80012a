//! `railstore bench kv` and `railstore bench rebuild`: the reliability manager (KVMD) measured
//! the way KVMD §4 and the Ceph erasure-coding study (§V–VI) measure it.
//!
//! `kv` is kvbench-style. For each mechanism it builds fresh devices, inserts `--objects`
//! objects (the `load` phase, KVMD's "store"), then runs `--ops` operations or `--duration`
//! seconds of a read/insert/update/delete mix (each `--mix` is one `run` phase, KVMD's
//! "retrieve", "update", "delete"). `none` is the baseline: the same devices with no manager,
//! each key stored once on the device its hash picks; it always runs first, and every other
//! row reports its throughput as a percentage of it (`pct_of_raw`, KVMD's lollipops).
//!
//! Every device is wrapped in a [`MeteredDevice`], so the rows carry Ceph-style I/O
//! amplification: `write_amp` = device bytes stored (keys, piece headers, parity, pointers and
//! set descriptors included) / user value bytes written, `read_amp` = device value bytes
//! returned / user value bytes read (`null` where the phase wrote or read nothing). CPU cost is
//! the process's user + system time from `getrusage` (all threads: the benchmark's tasks,
//! coding, the file devices' flusher and compaction threads), per GB of user data moved;
//! context switches are voluntary + involuntary, per MB of user data moved (Ceph Fig. 11–12's
//! "relative number of context switches").
//!
//! `rebuild` writes `--objects` objects per mechanism, fails device 0, and times
//! [`Manager::rebuild`] onto a fresh device (KVMD §4.3, Fig. 12), once with all objects and
//! once with half, to show that the time follows live data. The RAID-style baseline rewrites
//! the device's whole capacity (see [`RebuildRow::full_copy_method`]).

use crate::device::{sim_config, Backend, Percentiles};
use crate::harness::OutputArgs;
use crate::plot::{ensure_font, human_bytes, parse_bytes};
use crate::progress::bar;
use anyhow::{anyhow, bail, ensure, Context, Result};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use plotters::coord::Shift;
use plotters::prelude::*;
use railstore_device::aligned::AlignedBuf;
use railstore_device::fasthash::FastHasher;
use railstore_device::sim::{virtual_time_runtime, VIRTUAL_TIME_DILATION};
use railstore_device::{
    CompactionPolicy, Device, FileConfig, FileDevice, Limits, MemConfig, MemDevice, MeteredDevice,
    OpKind, ReadRange, SimConfig, SimDevice, StoreMode,
};
use railstore_ec::{Engine, Offload};
use railstore_redundancy::{
    EcEngines, Manager, ManagerConfig, Mechanism, Policy, RepairOptions, RepairProgress,
};
use railstore_store::array::{assemble, pass_through};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::fmt::Write as _;
use std::hash::Hasher;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod array;
mod load;
mod rebuild;
mod report;
mod workload;

use array::*;
use load::*;
pub use rebuild::{measure_rebuild, rebuild_csv, run_rebuild, RebuildBenchArgs, RebuildRow};
use report::*;
use workload::*;

/// The hybrid policy `--mechanism hybrid` uses without `--config`: KVMD §4.2.2's split of
/// replication for small values, packing for medium ones and splitting for large ones.
pub const DEFAULT_HYBRID_TOML: &str = r#"# railstore bench kv: default hybrid policy (KVMD §4.2.2)
mode = "hybrid"
pack_wait_ms = 2
[[hybrid]]
max_bytes = 4096
mechanism = "rep3"
[[hybrid]]
max_bytes = 65536
mechanism = "pack4+2"
[[hybrid]]
mechanism = "split4+2"
"#;

/// Options of `railstore bench kv`.
#[derive(Debug, Clone, clap::Args)]
pub struct KvBenchArgs {
    /// Mechanisms to compare, a comma list: `none` (raw devices, keys spread by hash: the
    /// baseline, always run first), `hash`, `repR`, `splitK+M`, `packK+M` (e.g. `split6+3`,
    /// `split10+4`), `hybrid` (`--config`, or rep3 up to 4 KiB, pack4+2 up to 64 KiB, split4+2
    /// above). Each runs on fresh devices.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,rep3,split4+2,pack4+2"
    )]
    pub mechanism: Vec<String>,
    /// Manager configuration (TOML, see `docs/redundancy.md`) for `--mechanism hybrid`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Erasure-coding engines to compare, a comma list: `auto` (the store's default: the
    /// fastest CPU engine here), a CPU engine (`avx512-gfni`, `avx2`, `scalar`, ...), or `cuda`:
    /// the GPU codes shards of `--ec-offload-min-bytes` or more and the CPU engine the rest
    /// (the store's `ec_offload`). Each mechanism runs once per engine; with more than one, its
    /// rows are named `MECHANISM@ENGINE`.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub ec_engine: Vec<String>,
    /// Shard length from which `--ec-engine cuda` sends a call to the GPU.
    #[arg(long, default_value = "256KiB")]
    pub ec_offload_min_bytes: String,
    /// Device backend.
    #[arg(long, value_enum, default_value = "file")]
    pub backend: Backend,
    /// Devices in the array.
    #[arg(long, default_value_t = 6)]
    pub devices: usize,
    /// Folder for the file devices (one folder per device and mechanism, removed afterwards
    /// unless `--keep`); a temporary folder when not given.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Objects inserted by the load phase. On `file`, a load that fits in the devices' write
    /// buffers (16 MiB each) mostly measures buffering and the closing sync; store a few
    /// hundred MB (e.g. 150000 objects of 4 KiB) for device-bound store throughput.
    #[arg(long, default_value_t = 20_000)]
    pub objects: u64,
    /// Operations per run phase (default: `--objects`, unless `--duration` is given).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Seconds per run phase (virtual seconds for `sim`).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Bytes per value (`4096`, `4KiB`, `1M`).
    #[arg(long, default_value = "4KiB")]
    pub value_size: String,
    /// Mixed value sizes with weights, e.g. `4KiB:30,16KiB:40,64KiB:30`; overrides
    /// `--value-size`. Each key keeps its size for life.
    #[arg(long)]
    pub value_mix: Option<String>,
    /// Operation mix of a run phase, e.g. `read=100`, `read=50,update=50`, `delete=100`
    /// (`read`, `insert` (alias `write`: new keys), `update`, `delete`). Repeat the option for
    /// several run phases, run in order on the same data. A mix without inserts ends early
    /// once no key is left.
    #[arg(long, default_value = "read=100")]
    pub mix: Vec<String>,
    /// tokio worker threads (1: everything on one thread). Ignored for `sim`, which runs on
    /// one thread in virtual time.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Operations in flight (concurrent client tasks).
    #[arg(long, default_value_t = 32)]
    pub qd: usize,
    /// How long packing waits for k objects (ms); default 2, or the `--config` file's.
    #[arg(long)]
    pub pack_wait_ms: Option<f64>,
    /// Buffered I/O instead of O_DIRECT for `file`.
    #[arg(long)]
    pub buffered: bool,
    /// Keep the device folders.
    #[arg(long)]
    pub keep: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A small run for tests and smoke checks: at most 2000 objects and 2000 operations.
    #[arg(long)]
    pub quick: bool,
    /// Where the rows go: `--json` is their JSON array (one per mechanism and phase).
    #[command(flatten)]
    pub output: OutputArgs,
}

impl Default for KvBenchArgs {
    fn default() -> Self {
        KvBenchArgs {
            mechanism: vec![
                "none".into(),
                "rep3".into(),
                "split4+2".into(),
                "pack4+2".into(),
            ],
            config: None,
            ec_engine: vec!["auto".into()],
            ec_offload_min_bytes: "256KiB".into(),
            backend: Backend::File,
            devices: 6,
            path: None,
            objects: 20_000,
            ops: None,
            duration: None,
            value_size: "4KiB".into(),
            value_mix: None,
            mix: vec!["read=100".into()],
            threads: 2,
            qd: 32,
            pack_wait_ms: None,
            buffered: false,
            keep: false,
            seed: 1,
            quick: false,
            output: OutputArgs {
                quiet: true,
                ..OutputArgs::default()
            },
        }
    }
}

/// One (mechanism, phase) measurement: a row of the table, the JSON array and the CSV.
#[derive(Debug, Clone, Serialize)]
pub struct KvRow {
    /// `none`, a mechanism (`rep3`, `split4+2`, ...) or `hybrid`.
    pub mechanism: String,
    /// `load`, then `run` (or `run1`, `run2`, ... with several `--mix`).
    pub phase: String,
    /// The operation mix (`insert=100` for the load phase).
    pub mix: String,
    /// Device backend.
    pub backend: Backend,
    /// Devices in the array.
    pub devices: usize,
    /// Value sizes (`4KiB` or the `--value-mix`).
    pub value_size: String,
    /// Operations in flight.
    pub qd: usize,
    /// tokio worker threads.
    pub threads: usize,
    /// The erasure-coding engines (`avx512-gfni`, or `avx512-gfni, cuda from 262144 B`);
    /// `null` for the raw baseline.
    pub ec_engine: Option<String>,
    /// Coding calls the GPU completed during the phase.
    pub gpu_calls: u64,
    /// Live objects at the end of the phase.
    pub objects: u64,
    /// Operations completed.
    pub ops: u64,
    /// Seconds (virtual for `sim`), including the final sync of a phase that wrote.
    pub elapsed_s: f64,
    /// Operations per second.
    pub ops_per_s: f64,
    /// User value megabytes (10^6 B) read and written per second.
    pub mb_per_s: f64,
    /// ops_per_s as a percentage of the `none` run's same phase.
    pub pct_of_raw: Option<f64>,
    /// Median latency of all operations, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// Mean, µs.
    pub mean_us: f64,
    /// Latencies of reads, when there were any.
    pub read: Option<Percentiles>,
    /// Latencies of inserts (new keys).
    pub insert: Option<Percentiles>,
    /// Latencies of updates (overwrites).
    pub update: Option<Percentiles>,
    /// Latencies of deletes.
    pub delete: Option<Percentiles>,
    /// Reads completed.
    pub reads: u64,
    /// Inserts completed.
    pub inserts: u64,
    /// Updates completed.
    pub updates: u64,
    /// Deletes completed.
    pub deletes: u64,
    /// Value bytes the users wrote.
    pub user_bytes_written: u64,
    /// Value bytes the users read.
    pub user_bytes_read: u64,
    /// Key and value bytes stored on the devices.
    pub device_bytes_written: u64,
    /// Value bytes the devices returned (retrieves and iteration).
    pub device_bytes_read: u64,
    /// Device stores issued.
    pub device_stores: u64,
    /// Device retrieves issued (misses included: a manager checks what a key holds).
    pub device_retrieves: u64,
    /// Device deletes issued.
    pub device_deletes: u64,
    /// Device operations per user operation.
    pub device_ops_per_op: f64,
    /// device_bytes_written / user_bytes_written; null when the phase wrote nothing.
    pub write_amp: Option<f64>,
    /// device_bytes_read / user_bytes_read; null when the phase read nothing.
    pub read_amp: Option<f64>,
    /// Process CPU seconds (user + system, all threads) during the phase.
    pub cpu_s: f64,
    /// CPU seconds per GB (10^9 B) of user data read and written.
    pub cpu_s_per_gb: Option<f64>,
    /// Voluntary + involuntary context switches of the process during the phase.
    pub ctx_switches: u64,
    /// Context switches per MB (10^6 B) of user data read and written.
    pub ctx_switches_per_mb: Option<f64>,
    /// Segments the manager rebuilt by decoding.
    pub decodes: u64,
    /// Pieces the manager found bad or stale and rewrote.
    pub repairs: u64,
    /// O_DIRECT in use (file).
    pub direct_io: Option<bool>,
    /// Times are virtual (sim).
    pub virtual_time: bool,
}

/// What is measured: raw devices, or a manager configuration.
#[derive(Clone)]
struct Scheme {
    name: String,
    config: Option<ManagerConfig>,
}

/// Parses `--ec-engine` into (label, engines); an engine that cannot run here is an error
/// before anything runs.
fn ec_engine_choices(list: &[String], offload_min: &str) -> Result<Vec<(String, EcEngines)>> {
    let min = parse_bytes(offload_min).context("--ec-offload-min-bytes")? as usize;
    let mut out: Vec<(String, EcEngines)> = Vec::new();
    for label in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        if out.iter().any(|(l, _)| l == label) {
            continue;
        }
        let engine = Engine::from_name(label).map_err(|e| anyhow!("--ec-engine: {e}"))?;
        let ec = if label == "auto" {
            EcEngines::default()
        } else if engine.is_offload() {
            EcEngines {
                engine: None,
                offload: Some(Offload {
                    engine,
                    min_shard_bytes: min,
                }),
            }
        } else {
            EcEngines {
                engine: Some(engine),
                offload: None,
            }
        };
        engine
            .check_available()
            .map_err(|e| anyhow!("--ec-engine {label}: {e}"))?;
        out.push((label.to_string(), ec));
    }
    ensure!(!out.is_empty(), "--ec-engine names no engine");
    Ok(out)
}

/// What the engines of `ec` are, for the rows.
fn describe_engines(ec: &EcEngines) -> String {
    let cpu = match ec.engine {
        Some(e) => e,
        None => Engine::auto().unwrap_or_else(|_| Engine::detect()),
    };
    match ec.offload {
        Some(o) => format!("{cpu}, {} from {} B", o.engine, o.min_shard_bytes),
        None => cpu.to_string(),
    }
}

/// Each manager scheme once per engine choice (named `MECH@ENGINE` when there are several).
fn by_engine(schemes: Vec<Scheme>, engines: &[(String, EcEngines)]) -> Vec<Scheme> {
    let mut out = Vec::new();
    for s in schemes {
        let Some(config) = &s.config else {
            out.push(s);
            continue;
        };
        for (label, ec) in engines {
            let name = if engines.len() == 1 && label == "auto" {
                s.name.clone()
            } else {
                format!("{}@{label}", s.name)
            };
            out.push(Scheme {
                name,
                config: Some(ManagerConfig {
                    ec: *ec,
                    ..config.clone()
                }),
            });
        }
    }
    out
}

/// Parses `--mechanism` into schemes; checks each fits the array before anything runs.
fn schemes(
    list: &[String],
    config_file: Option<&Path>,
    pack_wait_ms: Option<f64>,
    devices: usize,
    dilation: u64,
) -> Result<Vec<Scheme>> {
    let mut out: Vec<Scheme> = Vec::new();
    let scale = |d: Duration| d.mul_f64(dilation as f64);
    for name in list
        .iter()
        .flat_map(|s| s.split(','))
        .map(|s| match s.trim().to_ascii_lowercase() {
            raw if raw == "raw" => "none".to_string(),
            name => name,
        })
        .filter(|s| !s.is_empty())
    {
        if out.iter().any(|s| s.name == name) {
            continue;
        }
        let config = match name.as_str() {
            "none" => None,
            "hybrid" => {
                let text = match config_file {
                    Some(p) => std::fs::read_to_string(p)
                        .with_context(|| format!("reading {}", p.display()))?,
                    None => DEFAULT_HYBRID_TOML.to_string(),
                };
                let mut c = ManagerConfig::from_toml(&text).context("the hybrid configuration")?;
                if let Some(ms) = pack_wait_ms {
                    c.pack_wait = Duration::from_secs_f64(ms.max(0.0) / 1000.0);
                }
                c.pack_wait = scale(c.pack_wait);
                Some(c)
            }
            m => {
                let mech = Mechanism::parse(m).map_err(|e| anyhow!("--mechanism {m}: {e}"))?;
                Some(ManagerConfig {
                    policy: Policy::Standalone(mech),
                    pack_wait: scale(Duration::from_secs_f64(
                        pack_wait_ms.unwrap_or(2.0).max(0.0) / 1000.0,
                    )),
                    ..ManagerConfig::default()
                })
            }
        };
        if let Some(c) = &config {
            ensure!(
                c.width() <= devices,
                "{name} needs groups of {} devices; --devices is {devices}",
                c.width()
            );
        }
        out.push(Scheme { name, config });
    }
    ensure!(!out.is_empty(), "--mechanism names nothing to measure");
    Ok(out)
}

/// Where the devices of one run live: under `--path`, or a temporary folder for `file`.
struct Place {
    base: Option<PathBuf>,
    temporary: bool,
}

impl Place {
    fn new(backend: Backend, path: Option<&Path>, what: &str) -> Result<Place> {
        match (backend, path) {
            (Backend::File, Some(p)) => Ok(Place {
                base: Some(p.to_path_buf()),
                temporary: false,
            }),
            (Backend::File, None) => {
                let p = std::env::temp_dir()
                    .join(format!("railstore-bench-{what}-{}", std::process::id()));
                std::fs::create_dir_all(&p)?;
                Ok(Place {
                    base: Some(p),
                    temporary: true,
                })
            }
            _ => Ok(Place {
                base: None,
                temporary: false,
            }),
        }
    }

    fn folder(&self, name: &str) -> Option<PathBuf> {
        self.base.as_ref().map(|b| b.join(name))
    }

    /// Removes a temporary folder unless `keep`; says where kept folders are (on stderr when
    /// stdout carries the JSON).
    fn finish(self, keep: bool, output: &OutputArgs) {
        match (self.base, self.temporary, keep) {
            (Some(b), true, false) => {
                let _ = std::fs::remove_dir_all(b);
            }
            (Some(b), _, true) => output.say(&format!("device folders kept in {}", b.display())),
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// railstore bench kv

/// The workload of one invocation, derived from the options.
struct KvPlan {
    schemes: Vec<Scheme>,
    sizes: Sizes,
    mixes: Vec<Mix>,
    objects: u64,
    ops: Option<u64>,
    duration: Option<f64>,
    dilation: u64,
    spec: DevSpec,
}

fn kv_plan(args: &KvBenchArgs) -> Result<KvPlan> {
    ensure!(args.devices >= 1, "--devices must be at least 1");
    ensure!(args.qd >= 1, "--qd must be at least 1");
    let dilation = if args.backend == Backend::Sim {
        VIRTUAL_TIME_DILATION
    } else {
        1
    };
    let schemes = schemes(
        &args.mechanism,
        args.config.as_deref(),
        args.pack_wait_ms,
        args.devices,
        dilation,
    )?;
    let engines = ec_engine_choices(&args.ec_engine, &args.ec_offload_min_bytes)?;
    let mut schemes = by_engine(schemes, &engines);
    // The baseline first: every other row is a percentage of it.
    match schemes.iter().position(|s| s.config.is_none()) {
        Some(0) => {}
        Some(i) => {
            let s = schemes.remove(i);
            schemes.insert(0, s);
        }
        None => schemes.insert(
            0,
            Scheme {
                name: "none".into(),
                config: None,
            },
        ),
    }
    let sizes = Sizes::parse(&args.value_size, args.value_mix.as_deref())?;
    let mut mixes = args
        .mix
        .iter()
        .map(|m| Mix::parse(m))
        .collect::<Result<Vec<_>>>()?;
    if mixes.is_empty() {
        mixes.push(Mix::parse("read=100")?);
    }
    let (mut objects, mut ops, mut duration) = (args.objects, args.ops, args.duration);
    if args.quick {
        objects = objects.min(2000);
        ops = Some(ops.unwrap_or(objects).min(2000));
        duration = None;
    }
    if ops.is_none() && duration.is_none() {
        ops = Some(objects);
    }
    // Per device: every object up to 3.5 times (replication plus headers), twice over for
    // updates not yet compacted, and the inserts of the run phases.
    let live = (objects + ops.unwrap_or(objects)) as f64 * (sizes.mean() + 128.0);
    let per_device = (live * 3.5 * 2.0 / args.devices as f64) as u64;
    Ok(KvPlan {
        schemes,
        mixes,
        objects,
        ops,
        duration,
        dilation,
        spec: DevSpec {
            backend: args.backend,
            value_bytes_max: sizes.max() + 4096,
            capacity_bytes: 1 << 50,
            queue_depth_max: (args.qd * 2).max(64),
            buffered: args.buffered,
            sim_logical_bytes: per_device.max(64 << 20),
        },
        sizes,
    })
}

fn phase_names(mixes: &[Mix]) -> Vec<String> {
    if mixes.len() == 1 {
        vec!["run".into()]
    } else {
        (1..=mixes.len()).map(|i| format!("run{i}")).collect()
    }
}

/// Runs `railstore bench kv` and returns its rows without printing anything but progress.
pub fn measure_kv(args: &KvBenchArgs) -> Result<Vec<KvRow>> {
    run_kv(args, false)
}

fn run_kv(args: &KvBenchArgs, print: bool) -> Result<Vec<KvRow>> {
    let plan = kv_plan(args)?;
    let rt = build_runtime(args.backend, args.threads)?;
    let place = Place::new(args.backend, args.path.as_deref(), "kv")?;
    let names = phase_names(&plan.mixes);
    let mut rows: Vec<KvRow> = Vec::new();
    if print {
        args.output.say(&describe_kv(args, &plan));
        args.output.say(&table_header());
    }
    let mut result = Ok(());
    for (n, scheme) in plan.schemes.iter().enumerate() {
        let folder = place.folder(&format!("kv-{n}-{}", scheme.name));
        let array = match Array::build(&plan.spec, args.devices, folder) {
            Ok(a) => a,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        let r = rt.block_on(measure_scheme(args, &plan, scheme, &array, &names));
        // Devices close outside the runtime: a file device's close blocks on its threads.
        array.remove(args.keep);
        match r {
            Ok(mut new_rows) => {
                // The baseline's own rows are their own reference.
                let reference: Vec<(String, f64)> = if scheme.config.is_none() {
                    &new_rows[..]
                } else {
                    &rows[..]
                }
                .iter()
                .filter(|r| r.mechanism == "none")
                .map(|r| (r.phase.clone(), r.ops_per_s))
                .collect();
                for row in &mut new_rows {
                    let raw = reference.iter().find(|r| r.0 == row.phase).map(|r| r.1);
                    row.pct_of_raw = match raw {
                        Some(b) if b > 0.0 => Some(row.ops_per_s / b * 100.0),
                        _ => None,
                    };
                }
                if print {
                    for row in &new_rows {
                        args.output.say(&table_line(row));
                    }
                }
                rows.extend(new_rows);
            }
            Err(e) => {
                result = Err(e.context(format!("mechanism {}", scheme.name)));
                break;
            }
        }
    }
    drop(rt);
    place.finish(args.keep, &args.output);
    result.map(|()| rows)
}

/// A manager over `devices` through the one array path (no separation here).
async fn open_manager(devices: Vec<Arc<dyn Device>>, config: ManagerConfig) -> Result<Manager> {
    let rails = pass_through(config.width());
    Ok(assemble(devices, rails, config, &[], None).await?.manager)
}

async fn measure_scheme(
    args: &KvBenchArgs,
    plan: &KvPlan,
    scheme: &Scheme,
    array: &Array,
    names: &[String],
) -> Result<Vec<KvRow>> {
    let target = match &scheme.config {
        None => Target::Raw(array.devices()),
        Some(c) => Target::Kvmd(open_manager(array.devices(), c.clone()).await?),
    };
    let ctx = Arc::new(Ctx {
        target,
        sizes: plan.sizes.clone(),
        seed: args.seed,
        dilation: plan.dilation,
    });
    let tasks = args.qd.max(1);
    let mut workers: Vec<Worker> = (0..tasks)
        .map(|t| Worker::new(t, tasks, args.seed, plan.sizes.max()))
        .collect();
    let mut rows = Vec::new();
    /// One phase to run: its name and mix, what the workers do, and how long.
    struct Phase {
        name: String,
        mix: String,
        plan: Plan,
        duration: Option<f64>,
        ops: Option<u64>,
    }
    let mut phases = vec![Phase {
        name: "load".into(),
        mix: "insert=100".into(),
        plan: Plan::Load {
            objects: plan.objects,
        },
        duration: None,
        ops: Some(plan.objects),
    }];
    for (name, mix) in names.iter().zip(&plan.mixes) {
        phases.push(Phase {
            name: name.clone(),
            mix: mix.text.clone(),
            plan: Plan::Run {
                mix: mix.clone(),
                ops_max: plan.ops.unwrap_or(u64::MAX),
            },
            duration: plan.duration,
            ops: plan.ops,
        });
    }
    for Phase {
        name: phase,
        mix,
        plan: p,
        duration,
        ops: len,
    } in phases
    {
        let b = bar(args.output.quiet, len, &format!("{} {phase}", scheme.name));
        let dev0 = DevTotals::of(&array.metered);
        let (dec0, rep0) = ctx.target.counters();
        let gpu0 = railstore_ec::gpu_calls();
        let use0 = Usage::now();
        let (w, tally, elapsed) = run_phase(&ctx, workers, p, duration, &b).await?;
        let use1 = Usage::now();
        let (dec1, rep1) = ctx.target.counters();
        let gpu_calls = railstore_ec::gpu_calls() - gpu0;
        let dev = DevTotals::of(&array.metered).since(&dev0);
        b.finish_and_clear();
        workers = w;
        let all = tally.all();
        let ops = all.len();
        let user_bytes = tally.user_written + tally.user_read;
        let cpu_s = use1.cpu_s - use0.cpu_s;
        let ctx_switches = use1.ctx_switches.saturating_sub(use0.ctx_switches);
        let lat = percentiles(&all).unwrap_or_default();
        let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        rows.push(KvRow {
            mechanism: scheme.name.clone(),
            phase,
            mix,
            backend: args.backend,
            devices: args.devices,
            value_size: plan.sizes.text.clone(),
            qd: tasks,
            threads: if args.backend == Backend::Sim {
                1
            } else {
                args.threads.max(1)
            },
            ec_engine: scheme.config.as_ref().map(|c| describe_engines(&c.ec)),
            gpu_calls,
            objects: workers.iter().map(|w| w.live.len() as u64).sum(),
            ops,
            elapsed_s: elapsed,
            ops_per_s: ops as f64 / elapsed.max(1e-9),
            mb_per_s: user_bytes as f64 / elapsed.max(1e-9) / 1e6,
            pct_of_raw: None,
            p50_us: lat.p50_us,
            p99_us: lat.p99_us,
            p999_us: lat.p999_us,
            mean_us: lat.mean_us,
            read: percentiles(&tally.hist[READ]),
            insert: percentiles(&tally.hist[INSERT]),
            update: percentiles(&tally.hist[UPDATE]),
            delete: percentiles(&tally.hist[DELETE]),
            reads: tally.hist[READ].len(),
            inserts: tally.hist[INSERT].len(),
            updates: tally.hist[UPDATE].len(),
            deletes: tally.hist[DELETE].len(),
            user_bytes_written: tally.user_written,
            user_bytes_read: tally.user_read,
            device_bytes_written: dev.bytes_written,
            device_bytes_read: dev.bytes_read,
            device_stores: dev.stores,
            device_retrieves: dev.retrieves,
            device_deletes: dev.deletes,
            device_ops_per_op: (dev.stores + dev.retrieves + dev.deletes) as f64
                / ops.max(1) as f64,
            write_amp: ratio(dev.bytes_written, tally.user_written),
            read_amp: ratio(dev.bytes_read, tally.user_read),
            cpu_s,
            cpu_s_per_gb: (user_bytes > 0).then(|| cpu_s / (user_bytes as f64 / 1e9)),
            ctx_switches,
            ctx_switches_per_mb: (user_bytes > 0)
                .then(|| ctx_switches as f64 / (user_bytes as f64 / 1e6)),
            decodes: dec1 - dec0,
            repairs: rep1 - rep0,
            direct_io: array.direct_io,
            virtual_time: args.backend == Backend::Sim,
        });
    }
    Ok(rows)
}

/// Runs `railstore bench kv`: prints the table as rows complete, writes `--json` and `--out`.
pub fn run(args: &KvBenchArgs) -> Result<()> {
    let rows = run_kv(args, true)?;
    let plan = kv_plan(args)?;
    let json = serde_json::to_string_pretty(&rows)?;
    let files = [
        ("results.json", json.clone()),
        ("results.csv", kv_csv(&rows)),
        ("summary.md", kv_summary(args, &plan, &rows)),
    ];
    let written = args.output.write(&json, &files)?;
    args.output
        .plot_and_list(written, |out| kv_plot(&rows, out));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_sizes_parse_and_keep_their_weights() {
        let one = Sizes::parse("4KiB", None).unwrap();
        assert_eq!(
            (one.of(7, 1), one.max(), one.text.as_str()),
            (4096, 4096, "4KiB")
        );
        let mix = Sizes::parse("ignored", Some("4KiB:30, 16K:40,64KiB:30")).unwrap();
        assert_eq!(mix.text, "4KiB:30,16KiB:40,64KiB:30");
        assert_eq!(mix.max(), 64 << 10);
        let mut counts = std::collections::BTreeMap::new();
        for id in 0..10_000 {
            *counts.entry(mix.of(id, 3)).or_insert(0u32) += 1;
            assert_eq!(mix.of(id, 3), mix.of(id, 3), "a key keeps its size");
        }
        let share = |s: usize| counts[&s] as f64 / 10_000.0;
        assert!((share(4096) - 0.3).abs() < 0.03, "{counts:?}");
        assert!((share(16384) - 0.4).abs() < 0.03, "{counts:?}");
        for bad in ["4KiB", "4KiB:x", "0:5", "4KiB:0"] {
            assert!(Sizes::parse("4K", Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn mixes_parse_with_aliases() {
        let m = Mix::parse("read=50, write=20,update=20,del=10").unwrap();
        assert_eq!(m.text, "read=50,insert=20,update=20,delete=10");
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut seen = [0u32; 4];
        for _ in 0..10_000 {
            seen[m.pick(&mut rng)] += 1;
        }
        assert!((4700..5300).contains(&seen[READ]), "{seen:?}");
        assert!((800..1200).contains(&seen[DELETE]), "{seen:?}");
        for bad in ["", "read", "read=x", "scan=5", "read=0"] {
            assert!(Mix::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_baseline_runs_first_and_mechanisms_must_fit() {
        let args = KvBenchArgs {
            mechanism: vec!["rep3,split6+3".into(), "none".into(), "rep3".into()],
            devices: 9,
            ..Default::default()
        };
        let plan = kv_plan(&args).unwrap();
        let names: Vec<&str> = plan.schemes.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["none", "rep3", "split6+3"]);
        let plan = kv_plan(&KvBenchArgs {
            mechanism: vec!["hybrid".into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(plan.schemes[0].name, "none");
        let hybrid = plan.schemes[1].config.as_ref().unwrap();
        assert_eq!(hybrid.policy.choose(4096).to_string(), "rep3");
        assert_eq!(hybrid.policy.choose(16384).to_string(), "pack4+2");
        assert_eq!(hybrid.policy.choose(1 << 20).to_string(), "split4+2");
        let e = kv_plan(&KvBenchArgs {
            mechanism: vec!["split10+4".into()],
            ..Default::default()
        })
        .err()
        .unwrap();
        assert!(e.to_string().contains("14 devices"), "{e}");
    }

    #[test]
    fn each_mechanism_runs_once_per_ec_engine() {
        let plan = kv_plan(&KvBenchArgs {
            mechanism: vec!["rep3,split4+2".into()],
            ec_engine: vec!["auto".into(), "scalar".into()],
            ..Default::default()
        })
        .unwrap();
        let names: Vec<&str> = plan.schemes.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "none",
                "rep3@auto",
                "rep3@scalar",
                "split4+2@auto",
                "split4+2@scalar"
            ]
        );
        let scalar = plan.schemes[4].config.as_ref().unwrap();
        assert_eq!(scalar.ec.engine, Some(Engine::Scalar));
        assert_eq!(describe_engines(&scalar.ec), "scalar");
        let e = kv_plan(&KvBenchArgs {
            ec_engine: vec!["warp".into()],
            ..Default::default()
        })
        .err()
        .unwrap();
        assert!(e.to_string().contains("unknown engine \"warp\""), "{e}");
        let cuda = kv_plan(&KvBenchArgs {
            mechanism: vec!["split4+2".into()],
            ec_engine: vec!["cuda".into()],
            ec_offload_min_bytes: "64KiB".into(),
            ..Default::default()
        });
        match railstore_ec::gpu_unavailable_reason() {
            Some(why) => {
                let e = cuda.err().unwrap().to_string();
                assert!(e.contains("--ec-engine cuda") && e.contains(&why), "{e}");
            }
            None => {
                let plan = cuda.unwrap();
                let ec = plan.schemes[1].config.as_ref().unwrap().ec;
                assert_eq!(ec.offload.unwrap().min_shard_bytes, 64 << 10);
                assert_eq!(plan.schemes[1].name, "split4+2@cuda");
            }
        }
    }

    #[test]
    fn quick_runs_are_small() {
        let plan = kv_plan(&KvBenchArgs {
            quick: true,
            duration: Some(30.0),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            (plan.objects, plan.ops, plan.duration),
            (2000, Some(2000), None)
        );
    }

    #[test]
    fn raw_keys_spread_over_every_device() {
        let devs: Vec<Arc<dyn Device>> = (0..6)
            .map(|_| Arc::new(MemDevice::new(MemConfig::default()).unwrap()) as Arc<dyn Device>)
            .collect();
        let mut per = [0u32; 6];
        for id in 0..60_000 {
            per[Target::raw_device(&devs, &key_of(id))] += 1;
        }
        assert!(per.iter().all(|&n| (9_000..11_000).contains(&n)), "{per:?}");
    }
}
