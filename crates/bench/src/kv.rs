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
use railstore_redundancy::{
    Manager, ManagerConfig, Mechanism, Policy, RepairOptions, RepairProgress,
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
    /// Write the rows (one per mechanism and phase) as a JSON array to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Folder for results.json, results.csv, summary.md and the plot.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the plot.
    #[arg(long)]
    pub no_plots: bool,
    /// A small run for tests and smoke checks: at most 2000 objects and 2000 operations.
    #[arg(long)]
    pub quick: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
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
            json: None,
            out: None,
            no_plots: false,
            quick: false,
            quiet: true,
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

// ---------------------------------------------------------------------------------------------
// Workload description

/// Value sizes with weights; each key's size is a pure function of its id.
#[derive(Debug, Clone)]
struct Sizes {
    choices: Vec<(usize, u64)>,
    total: u64,
    text: String,
}

impl Sizes {
    fn parse(value_size: &str, mix: Option<&str>) -> Result<Sizes> {
        let mut choices = Vec::new();
        match mix {
            None => choices.push((parse_bytes(value_size)? as usize, 1)),
            Some(m) => {
                for part in m.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let (size, weight) = part
                        .split_once(':')
                        .with_context(|| format!("{part:?}: expected SIZE:WEIGHT"))?;
                    let w: u64 = weight
                        .trim()
                        .parse()
                        .with_context(|| format!("{part:?}: weight is not a number"))?;
                    if w > 0 {
                        choices.push((parse_bytes(size)? as usize, w));
                    }
                }
            }
        }
        ensure!(!choices.is_empty(), "no value size with a positive weight");
        ensure!(
            choices.iter().all(|c| c.0 > 0),
            "value sizes must be positive"
        );
        let text = match mix {
            None => human_bytes(choices[0].0 as u64),
            Some(_) => choices
                .iter()
                .map(|(s, w)| format!("{}:{w}", human_bytes(*s as u64)))
                .collect::<Vec<_>>()
                .join(","),
        };
        Ok(Sizes {
            total: choices.iter().map(|c| c.1).sum(),
            choices,
            text,
        })
    }

    fn of(&self, id: u64, seed: u64) -> usize {
        if self.choices.len() == 1 {
            return self.choices[0].0;
        }
        let mut x = splitmix(id ^ seed.rotate_left(29)) % self.total;
        for &(size, w) in &self.choices {
            if x < w {
                return size;
            }
            x -= w;
        }
        self.choices[self.choices.len() - 1].0
    }

    fn max(&self) -> usize {
        self.choices.iter().map(|c| c.0).max().unwrap_or(0)
    }

    fn mean(&self) -> f64 {
        self.choices
            .iter()
            .map(|&(s, w)| s as f64 * w as f64)
            .sum::<f64>()
            / self.total as f64
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const READ: usize = 0;
const INSERT: usize = 1;
const UPDATE: usize = 2;
const DELETE: usize = 3;
const OP_NAMES: [&str; 4] = ["read", "insert", "update", "delete"];

/// Weights of the four operations in a run phase.
#[derive(Debug, Clone)]
struct Mix {
    weights: [u64; 4],
    text: String,
}

impl Mix {
    fn parse(s: &str) -> Result<Mix> {
        let mut weights = [0u64; 4];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, w) = part
                .split_once('=')
                .with_context(|| format!("mix entry {part:?}: expected NAME=WEIGHT"))?;
            let op = match name.trim().to_ascii_lowercase().as_str() {
                "read" | "get" | "retrieve" => READ,
                "insert" | "write" | "put" | "store" => INSERT,
                "update" | "overwrite" => UPDATE,
                "delete" | "del" => DELETE,
                other => bail!("mix entry {part:?}: unknown operation {other:?} (read, insert/write, update, delete)"),
            };
            weights[op] += w
                .trim()
                .parse::<u64>()
                .with_context(|| format!("mix entry {part:?}: weight is not a number"))?;
        }
        ensure!(
            weights.iter().sum::<u64>() > 0,
            "mix {s:?} has no operation with a positive weight"
        );
        Ok(Mix {
            text: Mix::describe(&weights),
            weights,
        })
    }

    fn describe(weights: &[u64; 4]) -> String {
        (0..4)
            .filter(|&i| weights[i] > 0)
            .map(|i| format!("{}={}", OP_NAMES[i], weights[i]))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn pick(&self, rng: &mut ChaCha8Rng) -> usize {
        let mut x = rng.gen_range(0..self.weights.iter().sum::<u64>());
        for (i, &w) in self.weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        READ
    }
}

/// What is measured: raw devices, or a manager configuration.
#[derive(Clone)]
struct Scheme {
    name: String,
    config: Option<ManagerConfig>,
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

// ---------------------------------------------------------------------------------------------
// Devices

/// How to build each device of an array.
#[derive(Debug, Clone)]
struct DevSpec {
    backend: Backend,
    /// Largest value a device accepts.
    value_bytes_max: usize,
    /// Capacity of each device.
    capacity_bytes: u64,
    /// Operations in flight per device.
    queue_depth_max: usize,
    buffered: bool,
    /// Logical size of each simulated SSD.
    sim_logical_bytes: u64,
}

impl DevSpec {
    fn build(&self, dir: Option<&Path>) -> Result<(Arc<dyn Device>, Option<bool>)> {
        let limits = Limits {
            value_bytes_max: self.value_bytes_max.max(Limits::default().value_bytes_max),
            ..Limits::default()
        };
        Ok(match self.backend {
            Backend::Mem => (
                Arc::new(MemDevice::new(MemConfig {
                    capacity_bytes: self.capacity_bytes,
                    limits,
                    queue_depth_max: self.queue_depth_max,
                })?),
                None,
            ),
            Backend::File => {
                let dir = dir.context("a file device needs a folder")?;
                let buffer = (4 * (limits.value_bytes_max + 8192))
                    .max(FileConfig::default().write_buffer_bytes);
                let dev = FileDevice::open(
                    dir,
                    FileConfig {
                        capacity_bytes: self.capacity_bytes,
                        limits,
                        queue_depth_max: self.queue_depth_max,
                        write_buffer_bytes: buffer,
                        segment_bytes: (64u64 << 20).max(2 * buffer as u64),
                        compaction: CompactionPolicy::Auto {
                            dead_ratio_min: 0.5,
                        },
                        direct_io: !self.buffered,
                        ..Default::default()
                    },
                )
                .with_context(|| format!("opening a file device in {}", dir.display()))?;
                let direct = dev.direct_io();
                (Arc::new(dev), Some(direct))
            }
            Backend::Sim => {
                let inner: Arc<dyn Device> = Arc::new(MemDevice::new(MemConfig {
                    capacity_bytes: u64::MAX / 4,
                    limits,
                    queue_depth_max: 1 << 16,
                })?);
                let cfg = SimConfig {
                    queue_depth_max: self
                        .queue_depth_max
                        .max(SimConfig::default().queue_depth_max),
                    ..sim_config(self.sim_logical_bytes, true, VIRTUAL_TIME_DILATION)
                };
                (Arc::new(SimDevice::new(inner, cfg)?), None)
            }
        })
    }
}

/// The devices of one run, metered, and the folder that holds them.
struct Array {
    metered: Vec<Arc<MeteredDevice>>,
    direct_io: Option<bool>,
    folder: Option<PathBuf>,
}

/// Marks folders this benchmark created, so a rerun may clear what a crashed run left.
const MARKER: &str = ".railstore-bench";

fn fresh_folder(dir: &Path) -> Result<()> {
    if dir.exists() {
        ensure!(
            dir.join(MARKER).exists(),
            "{} exists and was not made by railstore bench; remove it or pick another --path",
            dir.display()
        );
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(
        dir.join(MARKER),
        b"made by railstore bench; safe to delete\n",
    )?;
    Ok(())
}

impl Array {
    fn build(spec: &DevSpec, n: usize, folder: Option<PathBuf>) -> Result<Array> {
        if let Some(f) = &folder {
            fresh_folder(f)?;
        }
        let mut metered = Vec::with_capacity(n);
        let mut direct_io = None;
        for i in 0..n {
            let dir = folder.as_ref().map(|f| f.join(format!("dev{i}")));
            let (dev, direct) = spec.build(dir.as_deref())?;
            direct_io = direct_io.or(direct);
            metered.push(Arc::new(MeteredDevice::new(dev)));
        }
        Ok(Array {
            metered,
            direct_io,
            folder,
        })
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.metered
            .iter()
            .map(|m| m.clone() as Arc<dyn Device>)
            .collect()
    }

    /// Drops the devices (file devices flush and close) and removes the folder.
    fn remove(self, keep: bool) {
        let Array {
            metered, folder, ..
        } = self;
        drop(metered);
        if let (Some(f), false) = (folder, keep) {
            let _ = std::fs::remove_dir_all(f);
        }
    }
}

/// Device operation totals over an array.
#[derive(Debug, Default, Clone, Copy)]
struct DevTotals {
    stores: u64,
    bytes_written: u64,
    retrieves: u64,
    bytes_read: u64,
    deletes: u64,
}

impl DevTotals {
    fn of<'a>(devs: impl IntoIterator<Item = &'a Arc<MeteredDevice>>) -> DevTotals {
        let mut t = DevTotals::default();
        for d in devs {
            for s in d.snapshot() {
                match s.kind {
                    OpKind::Store => {
                        t.stores += s.ops;
                        t.bytes_written += s.bytes_in;
                    }
                    OpKind::Retrieve => {
                        t.retrieves += s.ops;
                        t.bytes_read += s.bytes_out;
                    }
                    OpKind::Iterate => t.bytes_read += s.bytes_out,
                    OpKind::Delete => t.deletes += s.ops,
                    _ => {}
                }
            }
        }
        t
    }

    fn since(&self, b: &DevTotals) -> DevTotals {
        DevTotals {
            stores: self.stores - b.stores,
            bytes_written: self.bytes_written - b.bytes_written,
            retrieves: self.retrieves - b.retrieves,
            bytes_read: self.bytes_read - b.bytes_read,
            deletes: self.deletes - b.deletes,
        }
    }
}

/// Process CPU time and context switches (`getrusage`, all threads).
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    cpu_s: f64,
    ctx_switches: u64,
}

impl Usage {
    fn now() -> Usage {
        // SAFETY: rusage is plain old data, for which all-zero bytes are a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes one rusage through a valid, exclusive pointer.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return Usage::default();
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        Usage {
            cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
            ctx_switches: (ru.ru_nvcsw + ru.ru_nivcsw).max(0) as u64,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The load

/// Where user operations go.
enum Target {
    /// Raw devices; a key lives on the device its hash picks.
    Raw(Vec<Arc<dyn Device>>),
    /// The reliability manager.
    Kvmd(Manager),
}

impl Target {
    fn raw_device(devs: &[Arc<dyn Device>], key: &[u8]) -> usize {
        let mut h = FastHasher::default();
        h.write(key);
        ((h.finish() as u128 * devs.len() as u128) >> 64) as usize
    }

    async fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        match self {
            Target::Raw(d) => {
                d[Self::raw_device(d, key)]
                    .store(key, value, StoreMode::Upsert)
                    .await?
            }
            Target::Kvmd(m) => m.put(key, value, StoreMode::Upsert, None).await?,
        }
        Ok(())
    }

    async fn get(&self, key: &[u8]) -> Result<Vec<u8>> {
        Ok(match self {
            Target::Raw(d) => d[Self::raw_device(d, key)]
                .retrieve(key, ReadRange::ALL)
                .await?
                .value
                .into(),
            Target::Kvmd(m) => m.get(key, ReadRange::ALL).await?.0,
        })
    }

    async fn delete(&self, key: &[u8]) -> Result<bool> {
        Ok(match self {
            Target::Raw(d) => d[Self::raw_device(d, key)].delete(key, false).await?,
            Target::Kvmd(m) => m.delete(key).await?,
        })
    }

    async fn sync(&self) -> Result<()> {
        match self {
            Target::Raw(d) => {
                for dev in d {
                    dev.sync().await?;
                }
            }
            Target::Kvmd(m) => m.sync().await?,
        }
        Ok(())
    }

    fn counters(&self) -> (u64, u64) {
        match self {
            Target::Raw(_) => (0, 0),
            Target::Kvmd(m) => {
                let c = &m.devices().counters;
                (
                    c.decodes.load(Ordering::Relaxed),
                    c.repairs.load(Ordering::Relaxed),
                )
            }
        }
    }
}

/// What every client task shares.
struct Ctx {
    target: Target,
    sizes: Sizes,
    seed: u64,
    /// tokio time per reported time (sim in virtual time).
    dilation: u64,
}

fn key_of(id: u64) -> [u8; 10] {
    let mut k = [0u8; 10];
    k[..2].copy_from_slice(b"kv");
    k[2..].copy_from_slice(&id.to_be_bytes());
    k
}

/// One client task's own keys: task t of T owns ids t, t + T, t + 2T, ... so tasks never race
/// on a key and each knows which of its keys exist.
struct Worker {
    step: u64,
    live: Vec<u64>,
    next_new: u64,
    stamp: u64,
    rng: ChaCha8Rng,
    buf: Vec<u8>,
}

impl Worker {
    fn new(t: usize, tasks: usize, seed: u64, max_value: usize) -> Worker {
        let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1_000_003) ^ t as u64);
        let mut buf = vec![0u8; max_value];
        rng.fill(&mut buf[..]);
        Worker {
            step: tasks as u64,
            live: Vec::new(),
            next_new: t as u64,
            stamp: 0,
            rng,
            buf,
        }
    }

    /// The value of `id`: its size, with the id and a write counter in its first 16 bytes.
    fn value(&mut self, ctx: &Ctx, id: u64) -> usize {
        let len = ctx.sizes.of(id, ctx.seed);
        self.stamp += 1;
        let mut stamp = [0u8; 16];
        stamp[..8].copy_from_slice(&id.to_le_bytes());
        stamp[8..].copy_from_slice(&self.stamp.to_le_bytes());
        let n = len.min(16);
        self.buf[..n].copy_from_slice(&stamp[..n]);
        len
    }

    async fn one(&mut self, ctx: &Ctx, op: usize, tally: &mut Tally) -> Result<()> {
        match op {
            READ => {
                let id = self.live[self.rng.gen_range(0..self.live.len())];
                let v = ctx
                    .target
                    .get(&key_of(id))
                    .await
                    .with_context(|| format!("reading object {id}"))?;
                let want = ctx.sizes.of(id, ctx.seed);
                let n = want.min(8);
                ensure!(
                    v.len() == want && v[..n] == id.to_le_bytes()[..n],
                    "object {id}: read {} B that are not what was written ({want} B)",
                    v.len()
                );
                tally.user_read += v.len() as u64;
            }
            INSERT | UPDATE => {
                let id = if op == INSERT {
                    let id = self.next_new;
                    self.next_new += self.step;
                    id
                } else {
                    self.live[self.rng.gen_range(0..self.live.len())]
                };
                let len = self.value(ctx, id);
                ctx.target
                    .put(&key_of(id), &self.buf[..len])
                    .await
                    .with_context(|| format!("writing object {id}"))?;
                if op == INSERT {
                    self.live.push(id);
                }
                tally.user_written += len as u64;
            }
            _ => {
                let i = self.rng.gen_range(0..self.live.len());
                let id = self.live.swap_remove(i);
                let existed = ctx
                    .target
                    .delete(&key_of(id))
                    .await
                    .with_context(|| format!("deleting object {id}"))?;
                ensure!(existed, "object {id} was missing when deleted");
            }
        }
        Ok(())
    }

    async fn drive(
        mut self,
        ctx: Arc<Ctx>,
        plan: Plan,
        issued: Arc<AtomicU64>,
        stop: Arc<AtomicBool>,
        deadline: Option<tokio::time::Instant>,
        bar: ProgressBar,
    ) -> Result<(Worker, Tally)> {
        let mut tally = Tally::new();
        let mut since_tick = 0u64;
        loop {
            let op = match &plan {
                Plan::Load { objects } => {
                    if self.next_new >= *objects {
                        break;
                    }
                    INSERT
                }
                Plan::Run { mix, ops_max } => {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let op = match mix.pick(&mut self.rng) {
                        // No key left to read, update or delete: insert one if the mix
                        // inserts at all, else this task is done (a delete phase ends when
                        // everything is deleted).
                        op if op != INSERT && self.live.is_empty() => {
                            if mix.weights[INSERT] == 0 {
                                break;
                            }
                            INSERT
                        }
                        op => op,
                    };
                    if issued.fetch_add(1, Ordering::Relaxed) >= *ops_max {
                        break;
                    }
                    op
                }
            };
            let t0 = tokio::time::Instant::now();
            self.one(&ctx, op, &mut tally).await?;
            let now = tokio::time::Instant::now();
            let ns = ((now - t0).as_nanos() as u64 / ctx.dilation).max(1);
            tally.hist[op].saturating_record(ns);
            since_tick += 1;
            if since_tick == 64 {
                bar.inc(since_tick);
                since_tick = 0;
            }
            if deadline.is_some_and(|d| now >= d) {
                stop.store(true, Ordering::Relaxed);
            }
        }
        bar.inc(since_tick);
        Ok((self, tally))
    }
}

#[derive(Clone)]
enum Plan {
    /// Insert ids below `objects`.
    Load { objects: u64 },
    /// The mix until `ops_max` operations were issued or the deadline passed.
    Run { mix: Mix, ops_max: u64 },
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

/// What the client tasks did in one phase.
struct Tally {
    hist: [Histogram<u64>; 4],
    user_written: u64,
    user_read: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            hist: [hist(), hist(), hist(), hist()],
            user_written: 0,
            user_read: 0,
        }
    }

    fn add(&mut self, o: &Tally) {
        for (a, b) in self.hist.iter_mut().zip(&o.hist) {
            a.add(b).ok();
        }
        self.user_written += o.user_written;
        self.user_read += o.user_read;
    }

    fn all(&self) -> Histogram<u64> {
        let mut h = hist();
        for x in &self.hist {
            h.add(x).ok();
        }
        h
    }
}

fn percentiles(h: &Histogram<u64>) -> Option<Percentiles> {
    if h.is_empty() {
        return None;
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    Some(Percentiles {
        p50_us: us(h.value_at_quantile(0.5)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        p9999_us: us(h.value_at_quantile(0.9999)),
        max_us: us(h.max()),
        mean_us: h.mean() / 1000.0,
    })
}

/// Runs one phase with every worker; returns the workers (their keys), the tally and the
/// elapsed seconds (the closing sync of a phase that wrote included).
async fn run_phase(
    ctx: &Arc<Ctx>,
    workers: Vec<Worker>,
    plan: Plan,
    duration_s: Option<f64>,
    bar: &ProgressBar,
) -> Result<(Vec<Worker>, Tally, f64)> {
    let issued = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = tokio::time::Instant::now();
    let deadline =
        duration_s.map(|s| start + Duration::from_secs_f64(s.min(1e7) * ctx.dilation as f64));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, w) in workers.into_iter().enumerate() {
        let fut = w.drive(
            ctx.clone(),
            plan.clone(),
            issued.clone(),
            stop.clone(),
            deadline,
            bar.clone(),
        );
        tasks.spawn(async move { fut.await.map(|(w, t)| (i, w, t)) });
    }
    let mut back = Vec::new();
    let mut tally = Tally::new();
    while let Some(r) = tasks.join_next().await {
        let (i, w, t) = r.context("benchmark task panicked")??;
        tally.add(&t);
        back.push((i, w));
    }
    back.sort_by_key(|(i, _)| *i);
    if tally.hist[INSERT].len() + tally.hist[UPDATE].len() + tally.hist[DELETE].len() > 0 {
        // Writes count once durable, as fio's end_fsync has them.
        ctx.target.sync().await?;
    }
    let elapsed = start.elapsed().as_secs_f64() / ctx.dilation as f64;
    Ok((back.into_iter().map(|(_, w)| w).collect(), tally, elapsed))
}

fn build_runtime(backend: Backend, threads: usize) -> Result<tokio::runtime::Runtime> {
    Ok(if backend == Backend::Sim {
        virtual_time_runtime()?
    } else if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    })
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

    fn finish(self, keep: bool) {
        match (self.base, self.temporary, keep) {
            (Some(b), true, false) => {
                let _ = std::fs::remove_dir_all(b);
            }
            (Some(b), _, true) => println!("device folders kept in {}", b.display()),
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
    let mut schemes = schemes(
        &args.mechanism,
        args.config.as_deref(),
        args.pack_wait_ms,
        args.devices,
        dilation,
    )?;
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
        println!("{}", describe_kv(args, &plan));
        println!("{}", table_header());
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
                        println!("{}", table_line(row));
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
    place.finish(args.keep);
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
        let b = bar(args.quiet, len, &format!("{} {phase}", scheme.name));
        let dev0 = DevTotals::of(&array.metered);
        let (dec0, rep0) = ctx.target.counters();
        let use0 = Usage::now();
        let (w, tally, elapsed) = run_phase(&ctx, workers, p, duration, &b).await?;
        let use1 = Usage::now();
        let (dec1, rep1) = ctx.target.counters();
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

fn describe_kv(args: &KvBenchArgs, plan: &KvPlan) -> String {
    let on = match args.backend {
        Backend::File => format!(
            "{} file devices in {}{}",
            args.devices,
            args.path
                .as_ref()
                .map_or("a temporary folder".into(), |p| p.display().to_string()),
            if args.buffered { " (buffered I/O)" } else { "" }
        ),
        Backend::Mem => format!("{} in-memory devices", args.devices),
        Backend::Sim => format!(
            "{} simulated SSDs in virtual time (CPU figures are real)",
            args.devices
        ),
    };
    let run = match (plan.ops, plan.duration) {
        (Some(n), _) => format!("{n} operations"),
        (None, Some(s)) => format!("{s} s"),
        (None, None) => unreachable!("kv_plan sets one"),
    };
    format!(
        "kv bench on {on}; {} objects of {}, then {run} of {} per run phase; {} tasks, {} thread(s)\n\
         mechanisms: {}",
        plan.objects,
        plan.sizes.text,
        plan.mixes
            .iter()
            .map(|m| m.text.as_str())
            .collect::<Vec<_>>()
            .join(" / "),
        args.qd,
        if args.backend == Backend::Sim {
            1
        } else {
            args.threads.max(1)
        },
        plan.schemes
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn table_header() -> String {
    format!(
        "{:<10} {:<6} {:>10} {:>9} {:>7} {:>9} {:>9} {:>9} {:>6} {:>6} {:>7} {:>8} {:>8}",
        "mechanism",
        "phase",
        "ops/s",
        "MB/s",
        "% raw",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "w-amp",
        "r-amp",
        "dev-ops",
        "cpu s/GB",
        "csw/MB"
    )
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.decimals$}"))
}

fn table_line(r: &KvRow) -> String {
    format!(
        "{:<10} {:<6} {:>10.0} {:>9.1} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>6} {:>6} {:>7.2} {:>8} {:>8}",
        r.mechanism,
        r.phase,
        r.ops_per_s,
        r.mb_per_s,
        opt(r.pct_of_raw, 1),
        r.p50_us,
        r.p99_us,
        r.p999_us,
        opt(r.write_amp, 2),
        opt(r.read_amp, 2),
        r.device_ops_per_op,
        opt(r.cpu_s_per_gb, 1),
        opt(r.ctx_switches_per_mb, 1)
    )
}

/// The CSV form of the rows.
pub fn kv_csv(rows: &[KvRow]) -> String {
    let mut s = String::from(
        "mechanism,phase,mix,backend,devices,value_size,qd,threads,objects,ops,elapsed_s,\
         ops_per_s,mb_per_s,pct_of_raw,p50_us,p99_us,p999_us,mean_us,reads,inserts,updates,\
         deletes,user_bytes_written,user_bytes_read,device_bytes_written,device_bytes_read,\
         device_stores,device_retrieves,device_deletes,device_ops_per_op,write_amp,read_amp,\
         cpu_s,cpu_s_per_gb,ctx_switches,ctx_switches_per_mb,decodes,repairs\n",
    );
    let o = |v: Option<f64>| v.map(|x| format!("{x:.4}")).unwrap_or_default();
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},\"{}\",{},{},\"{}\",{},{},{},{},{:.4},{:.2},{:.3},{},{:.2},{:.2},{:.2},{:.2},\
             {},{},{},{},{},{},{},{},{},{},{},{:.3},{},{},{:.4},{},{},{},{},{}",
            r.mechanism,
            r.phase,
            r.mix,
            backend_name(r.backend),
            r.devices,
            r.value_size,
            r.qd,
            r.threads,
            r.objects,
            r.ops,
            r.elapsed_s,
            r.ops_per_s,
            r.mb_per_s,
            o(r.pct_of_raw),
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.mean_us,
            r.reads,
            r.inserts,
            r.updates,
            r.deletes,
            r.user_bytes_written,
            r.user_bytes_read,
            r.device_bytes_written,
            r.device_bytes_read,
            r.device_stores,
            r.device_retrieves,
            r.device_deletes,
            r.device_ops_per_op,
            o(r.write_amp),
            o(r.read_amp),
            r.cpu_s,
            o(r.cpu_s_per_gb),
            r.ctx_switches,
            o(r.ctx_switches_per_mb),
            r.decodes,
            r.repairs
        );
    }
    s
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::File => "file",
        Backend::Mem => "mem",
        Backend::Sim => "sim",
    }
}

fn machine_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(str::trim)
        .unwrap_or("unknown CPU");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cpus} CPUs")
}

fn kv_summary(args: &KvBenchArgs, plan: &KvPlan, rows: &[KvRow]) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## kv bench results\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(s, "- machine: {}", machine_description());
    for line in describe_kv(args, plan).lines() {
        let _ = writeln!(s, "- {line}");
    }
    if let Some(d) = rows.first().and_then(|r| r.direct_io) {
        let _ = writeln!(
            s,
            "- file devices use {}",
            if d { "O_DIRECT" } else { "buffered I/O" }
        );
    }
    if plan.schemes.iter().any(|x| x.name == "hybrid") {
        let text = match &args.config {
            Some(p) => std::fs::read_to_string(p).unwrap_or_default(),
            None => DEFAULT_HYBRID_TOML.to_string(),
        };
        let _ = writeln!(s, "- hybrid configuration:\n\n```toml\n{}```", text);
    }
    let _ = writeln!(
        s,
        "\n`none` is the raw devices (each key once, on the device its hash picks). `% raw` is \
         ops/s against `none`'s same phase. `w-amp` = device key+value bytes stored / user value \
         bytes written; `r-amp` = device value bytes returned / user value bytes read (piece \
         headers, parity, packing pointers and set descriptors included). `dev ops/op` counts \
         device stores, retrieves (misses included) and deletes per user operation. CPU is \
         process user+system time (getrusage, all threads) per GB of user data moved; `csw/MB` \
         is voluntary+involuntary context switches per MB moved. Latencies include the wait of \
         packing for a full set.\n"
    );
    let _ = writeln!(
        s,
        "| mechanism | phase | mix | ops/s | MB/s | % raw | p50 µs | p99 µs | p99.9 µs | w-amp | r-amp | dev ops/op | CPU s/GB | csw/MB |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {:.2} | {} | {} |",
            r.mechanism,
            r.phase,
            r.mix,
            r.ops_per_s,
            r.mb_per_s,
            opt(r.pct_of_raw, 1),
            r.p50_us,
            r.p99_us,
            r.p999_us,
            opt(r.write_amp, 2),
            opt(r.read_amp, 2),
            r.device_ops_per_op,
            opt(r.cpu_s_per_gb, 1),
            opt(r.ctx_switches_per_mb, 1)
        );
    }
    s
}

fn kv_plot(rows: &[KvRow], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut phases: Vec<String> = Vec::new();
    let mut mechs: Vec<String> = Vec::new();
    for r in rows {
        if !phases.contains(&r.phase) {
            phases.push(r.phase.clone());
        }
        if !mechs.contains(&r.mechanism) {
            mechs.push(r.mechanism.clone());
        }
    }
    let find = |m: &str, p: &str| rows.iter().find(|r| r.mechanism == m && r.phase == p);
    let panels: Vec<Panel> = phases
        .iter()
        .map(|p| {
            let mix = find(&mechs[0], p).map_or(String::new(), |r| r.mix.clone());
            Panel {
                title: format!("{p} ({mix}): throughput (bars) and % of raw (lollipops)"),
                y_label: "ops/s".into(),
                categories: mechs.clone(),
                series: vec![(
                    "ops/s".into(),
                    mechs
                        .iter()
                        .map(|m| find(m, p).map_or(0.0, |r| r.ops_per_s))
                        .collect(),
                )],
                lollipop: Some((
                    "% of raw".into(),
                    mechs
                        .iter()
                        .map(|m| find(m, p).and_then(|r| r.pct_of_raw))
                        .collect(),
                )),
            }
        })
        .collect();
    write_panels(dir, "pct_of_raw", &panels)
}

fn write_file(path: &Path, body: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))
}

/// Runs `railstore bench kv`: prints the table as rows complete, writes `--json` and `--out`.
pub fn run(args: &KvBenchArgs) -> Result<()> {
    let rows = run_kv(args, true)?;
    let plan = kv_plan(args)?;
    let json = serde_json::to_string_pretty(&rows)?;
    if let Some(path) = &args.json {
        write_file(path, &json)?;
    }
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let mut written = Vec::new();
        let summary = kv_summary(args, &plan, &rows);
        for (name, body) in [
            ("results.json", json.as_str()),
            ("results.csv", &kv_csv(&rows)),
            ("summary.md", &summary),
        ] {
            let p = out.join(name);
            write_file(&p, body)?;
            written.push(p);
        }
        if !args.no_plots {
            match kv_plot(&rows, out) {
                Ok(files) => written.extend(files),
                Err(e) => println!("plot skipped: {e:#}"),
            }
        }
        println!("wrote:");
        for p in written {
            println!("  {}", p.display());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// railstore bench rebuild

/// Options of `railstore bench rebuild`.
#[derive(Debug, Clone, clap::Args)]
pub struct RebuildBenchArgs {
    /// Mechanisms to rebuild, a comma list (anything `--mechanism` of `bench kv` takes except
    /// `none` and `hash`, which keep no redundancy).
    #[arg(long, value_delimiter = ',', default_value = "rep3,pack4+2,split4+2")]
    pub mechanism: Vec<String>,
    /// Manager configuration (TOML) for `--mechanism hybrid`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Device backend.
    #[arg(long, value_enum, default_value = "file")]
    pub backend: Backend,
    /// Devices in the array.
    #[arg(long, default_value_t = 6)]
    pub devices: usize,
    /// Folder for the file devices; a temporary folder when not given.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Objects written before device 0 fails (a second run uses half as many).
    #[arg(long, default_value_t = 20_000)]
    pub objects: u64,
    /// Bytes per value.
    #[arg(long, default_value = "4KiB")]
    pub value_size: String,
    /// Mixed value sizes with weights (as in `bench kv`).
    #[arg(long)]
    pub value_mix: Option<String>,
    /// Capacity of each device; the RAID-style baseline rewrites this much.
    #[arg(long, default_value = "1GiB")]
    pub device_capacity: String,
    /// Objects or sets the rebuild repairs at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// tokio worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Writes in flight while loading.
    #[arg(long, default_value_t = 32)]
    pub qd: usize,
    /// How long packing waits for k objects (ms).
    #[arg(long)]
    pub pack_wait_ms: Option<f64>,
    /// Buffered I/O instead of O_DIRECT for `file` (the devices and the baseline copy).
    #[arg(long)]
    pub buffered: bool,
    /// Keep the device folders.
    #[arg(long)]
    pub keep: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the rows as a JSON array to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Folder for results.json, results.csv, summary.md and the plot.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the plot.
    #[arg(long)]
    pub no_plots: bool,
    /// A small run for tests: at most 1000 objects, devices of at most 32 MiB.
    #[arg(long)]
    pub quick: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl Default for RebuildBenchArgs {
    fn default() -> Self {
        RebuildBenchArgs {
            mechanism: vec!["rep3".into(), "pack4+2".into(), "split4+2".into()],
            config: None,
            backend: Backend::File,
            devices: 6,
            path: None,
            objects: 20_000,
            value_size: "4KiB".into(),
            value_mix: None,
            device_capacity: "1GiB".into(),
            concurrency: 16,
            threads: 2,
            qd: 32,
            pack_wait_ms: None,
            buffered: false,
            keep: false,
            seed: 1,
            json: None,
            out: None,
            no_plots: false,
            quick: false,
            quiet: true,
        }
    }
}

/// One rebuild measurement.
#[derive(Debug, Clone, Serialize)]
pub struct RebuildRow {
    /// Mechanism (or `hybrid`).
    pub mechanism: String,
    /// Device backend.
    pub backend: Backend,
    /// Devices in the array.
    pub devices: usize,
    /// Objects stored before the failure.
    pub objects: u64,
    /// User value bytes stored.
    pub user_bytes: u64,
    /// Bytes the failed device held (its live keys, values and per-record metadata).
    pub live_bytes: u64,
    /// Keys the failed device held.
    pub keys_before: u64,
    /// Keys on the replacement after the rebuild (equal to `keys_before` when complete).
    pub keys_after: u64,
    /// Seconds from the start of the rebuild until the replacement is synced (virtual for sim).
    pub rebuild_s: f64,
    /// Bytes stored on the replacement (keys and values) per second, MB (10^6 B)/s.
    pub rebuild_mb_per_s: f64,
    /// Key and value bytes stored on the replacement.
    pub replacement_bytes: u64,
    /// Value bytes read from the surviving devices during the rebuild.
    pub survivor_bytes_read: u64,
    /// Objects the rebuild checked.
    pub objects_checked: u64,
    /// Objects that needed a piece rewritten.
    pub objects_repaired: u64,
    /// Packing sets checked.
    pub sets_checked: u64,
    /// Packing sets with a piece rewritten.
    pub sets_repaired: u64,
    /// Segments rebuilt by decoding.
    pub decodes: u64,
    /// Process CPU seconds during the rebuild.
    pub cpu_s: f64,
    /// Capacity of each device, bytes.
    pub device_capacity: u64,
    /// Seconds the RAID-style baseline took to rewrite a whole device's capacity.
    pub full_copy_s: f64,
    /// Its rate, MB (10^6 B)/s.
    pub full_copy_mb_per_s: f64,
    /// What the baseline measured.
    pub full_copy_method: String,
    /// full_copy_s / rebuild_s.
    pub speedup_vs_full_copy: f64,
}

/// The RAID-style baseline: what rebuilding a device costs when every byte of its capacity
/// is regenerated, whatever it holds.
#[derive(Debug, Clone)]
struct FullCopy {
    bytes: u64,
    seconds: f64,
    method: String,
}

/// Copies a file of `capacity` bytes to a new file on the same file system, 1 MiB at a time
/// with O_DIRECT (or buffered, with the source's cached pages dropped first), and syncs it: a
/// RAID-1 resync of one device, which is the least a RAID rebuild does (RAID-5/6 also read k
/// survivors and decode). Preparing the source is not timed.
fn full_copy_file(dir: &Path, capacity: u64, direct: bool, b: &ProgressBar) -> Result<FullCopy> {
    const CHUNK: usize = 1 << 20;
    let capacity = capacity.div_ceil(CHUNK as u64) * CHUNK as u64;
    std::fs::create_dir_all(dir)?;
    let src = dir.join("raid-baseline-source");
    let dst = dir.join("raid-baseline-replacement");
    let result = (|| -> Result<FullCopy> {
        let mut buf = AlignedBuf::new(CHUNK);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        rng.fill(&mut buf[..]);
        {
            let mut f = std::fs::File::create(&src)
                .with_context(|| format!("creating {}", src.display()))?;
            for _ in 0..capacity / CHUNK as u64 {
                f.write_all(&buf)?;
            }
            f.sync_all()?;
            drop_cache(&f);
        }
        let open = |direct: bool| -> std::io::Result<(std::fs::File, std::fs::File)> {
            use std::os::unix::fs::OpenOptionsExt;
            let flags = if direct { libc::O_DIRECT } else { 0 };
            let r = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(&src)?;
            let w = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(flags)
                .open(&dst)?;
            Ok((r, w))
        };
        let copy = |direct: bool, buf: &mut AlignedBuf| -> std::io::Result<f64> {
            let (mut r, mut w) = open(direct)?;
            let t = std::time::Instant::now();
            loop {
                let mut n = 0;
                while n < CHUNK {
                    match r.read(&mut buf[n..])? {
                        0 => break,
                        k => n += k,
                    }
                }
                if n == 0 {
                    break;
                }
                w.write_all(&buf[..n])?;
                b.inc(n as u64);
                if n < CHUNK {
                    break;
                }
            }
            w.sync_all()?;
            Ok(t.elapsed().as_secs_f64())
        };
        let (seconds, method) = match direct.then(|| copy(true, &mut buf)) {
            Some(Ok(s)) => (
                s,
                "copy of a device-sized file with O_DIRECT, 1 MiB at a time, synced",
            ),
            _ => {
                b.set_position(0);
                (
                    copy(false, &mut buf)?,
                    "copy of a device-sized file, buffered (source pages dropped first), 1 MiB at a time, synced",
                )
            }
        };
        Ok(FullCopy {
            bytes: capacity,
            seconds,
            method: method.into(),
        })
    })();
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&dst);
    result
}

fn drop_cache(f: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise only advises the kernel about a valid, open descriptor.
    unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// For `mem` and `sim`: stores `capacity` bytes as 1 MiB values (8 in flight) on a fresh
/// device of the same backend, in its own clock: the replacement's side of a RAID rebuild.
async fn full_copy_device(
    spec: &DevSpec,
    capacity: u64,
    dilation: u64,
    b: &ProgressBar,
) -> Result<FullCopy> {
    const CHUNK: usize = 1 << 20;
    let chunks = capacity.div_ceil(CHUNK as u64);
    // Room for the keys and per-entry metadata on top of the data.
    let spec = DevSpec {
        capacity_bytes: chunks * (CHUNK as u64 + 4096),
        sim_logical_bytes: chunks * (CHUNK as u64 + 4096),
        ..spec.clone()
    };
    let dev = spec.build(None)?.0;
    let next = Arc::new(AtomicU64::new(0));
    let value: Arc<[u8]> = {
        let mut v = vec![0u8; CHUNK];
        ChaCha8Rng::seed_from_u64(7).fill(&mut v[..]);
        v.into()
    };
    let t = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (dev, next, value, b) = (dev.clone(), next.clone(), value.clone(), b.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= chunks {
                    return Ok::<(), anyhow::Error>(());
                }
                dev.store(&i.to_be_bytes(), &value, StoreMode::Upsert)
                    .await?;
                b.inc(CHUNK as u64);
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("copy task panicked")??;
    }
    dev.sync().await?;
    Ok(FullCopy {
        bytes: chunks * CHUNK as u64,
        seconds: t.elapsed().as_secs_f64() / dilation as f64,
        method: format!(
            "{} MiB stored as 1 MiB values on a fresh {} device, 8 in flight (the write side only)",
            chunks,
            backend_name(spec.backend)
        ),
    })
}

/// Runs `railstore bench rebuild` and returns its rows without printing anything but progress.
pub fn measure_rebuild(args: &RebuildBenchArgs) -> Result<Vec<RebuildRow>> {
    rebuild_rows(args, false)
}

fn rebuild_rows(args: &RebuildBenchArgs, print: bool) -> Result<Vec<RebuildRow>> {
    ensure!(args.objects >= 2, "--objects must be at least 2");
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
    for s in &schemes {
        let unprotected = match &s.config {
            None => true,
            Some(c) => c.policy.mechanisms().iter().any(|m| m.tolerance() == 0),
        };
        ensure!(
            !unprotected,
            "{}: a mechanism without redundancy cannot be rebuilt",
            s.name
        );
    }
    let sizes = Sizes::parse(&args.value_size, args.value_mix.as_deref())?;
    let mut objects = args.objects;
    let mut capacity = parse_bytes(&args.device_capacity)?;
    if args.quick {
        objects = objects.min(1000);
        capacity = capacity.min(32 << 20);
    }
    let spec = DevSpec {
        backend: args.backend,
        value_bytes_max: sizes.max() + 4096,
        capacity_bytes: capacity,
        queue_depth_max: (args.qd * 2).max(64),
        buffered: args.buffered,
        sim_logical_bytes: capacity,
    };
    let rt = build_runtime(args.backend, args.threads)?;
    let place = Place::new(args.backend, args.path.as_deref(), "rebuild")?;
    let result = (|| -> Result<Vec<RebuildRow>> {
        if print {
            println!(
                "rebuild bench: {} devices ({}), {} and {} objects of {}, device capacity {}",
                args.devices,
                match args.backend {
                    Backend::Sim => "sim, virtual time",
                    b => backend_name(b),
                },
                objects,
                objects / 2,
                sizes.text,
                human_bytes(capacity)
            );
        }
        let b = bar(args.quiet, Some(capacity), "full-device copy");
        let copy = match place.folder("raid-baseline") {
            Some(dir) if args.backend == Backend::File => {
                let r = full_copy_file(&dir, capacity, !args.buffered, &b);
                let _ = std::fs::remove_dir_all(&dir);
                r?
            }
            _ => rt.block_on(full_copy_device(&spec, capacity, dilation, &b))?,
        };
        b.finish_and_clear();
        if print {
            println!(
                "RAID-style baseline: {} in {:.2} s ({:.0} MB/s): {}",
                human_bytes(copy.bytes),
                copy.seconds,
                copy.bytes as f64 / copy.seconds / 1e6,
                copy.method
            );
            println!("{}", rebuild_header());
        }
        let mut rows = Vec::new();
        for (n, scheme) in schemes.iter().enumerate() {
            for count in [objects, objects / 2] {
                let folder = place.folder(&format!("rebuild-{n}-{}-{count}", scheme.name));
                let array = Array::build(&spec, args.devices, folder.clone())?;
                let r = rt.block_on(rebuild_once(
                    args,
                    &spec,
                    scheme,
                    &sizes,
                    count,
                    dilation,
                    array,
                    folder.as_deref(),
                    &copy,
                ));
                let (row, array) = r.with_context(|| format!("mechanism {}", scheme.name))?;
                array.remove(args.keep);
                if print {
                    println!("{}", rebuild_line(&row));
                }
                rows.push(row);
            }
        }
        Ok(rows)
    })();
    drop(rt);
    place.finish(args.keep);
    result
}

#[allow(clippy::too_many_arguments)]
async fn rebuild_once(
    args: &RebuildBenchArgs,
    spec: &DevSpec,
    scheme: &Scheme,
    sizes: &Sizes,
    objects: u64,
    dilation: u64,
    mut array: Array,
    folder: Option<&Path>,
    copy: &FullCopy,
) -> Result<(RebuildRow, Array)> {
    let config = scheme.config.clone().expect("checked: a manager scheme");
    let manager = open_manager(array.devices(), config).await?;
    let ctx = Arc::new(Ctx {
        target: Target::Kvmd(manager.clone()),
        sizes: sizes.clone(),
        seed: args.seed,
        dilation,
    });
    let tasks = args.qd.max(1);
    let workers: Vec<Worker> = (0..tasks)
        .map(|t| Worker::new(t, tasks, args.seed, sizes.max()))
        .collect();
    let b = bar(args.quiet, Some(objects), &format!("{} load", scheme.name));
    let (_, tally, _) = run_phase(&ctx, workers, Plan::Load { objects }, None, &b)
        .await
        .context("loading (raise --device-capacity if a device is full)")?;
    b.finish_and_clear();
    drop(ctx);
    let failed = array.metered[0].info().await?;
    // Device 0 fails: nothing more reaches it, and it is dropped once replaced.
    manager.devices().mark_failed(0);
    let replacement_dir = folder.map(|f| f.join("dev0-replacement"));
    let (fresh, _) = spec.build(replacement_dir.as_deref())?;
    let fresh = Arc::new(MeteredDevice::new(fresh));
    array.metered[0] = fresh.clone();
    let survivors0 = DevTotals::of(&array.metered[1..]);
    let dec0 = manager.devices().counters.decodes.load(Ordering::Relaxed);
    let progress = Arc::new(RepairProgress::default());
    let b = bar(args.quiet, Some(0), &format!("{} rebuild", scheme.name));
    let ticker = {
        let (p, b) = (progress.clone(), b.clone());
        tokio::spawn(async move {
            loop {
                b.set_length(p.items_total.load(Ordering::Relaxed));
                b.set_position(p.items_done.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100) * dilation as u32).await;
            }
        })
    };
    let use0 = Usage::now();
    let t = tokio::time::Instant::now();
    let report = manager
        .rebuild(
            0,
            fresh.clone(),
            RepairOptions {
                concurrency: args.concurrency.max(1),
                write_bytes_per_s_max: None,
            },
            progress.clone(),
        )
        .await;
    let synced = manager.sync().await;
    let rebuild_s = t.elapsed().as_secs_f64() / dilation as f64;
    let use1 = Usage::now();
    ticker.abort();
    b.finish_and_clear();
    let report = report?;
    synced?;
    ensure!(
        report.objects_lost.is_empty() && report.sets_lost == 0,
        "rebuild lost {} objects and {} sets",
        report.objects_lost.len(),
        report.sets_lost
    );
    let after = fresh.info().await?;
    let survivors = DevTotals::of(&array.metered[1..]).since(&survivors0);
    let replacement_bytes = fresh.stats(OpKind::Store).bytes_in;
    let decodes = manager.devices().counters.decodes.load(Ordering::Relaxed) - dec0;
    drop(manager);
    Ok((
        RebuildRow {
            mechanism: scheme.name.clone(),
            backend: args.backend,
            devices: args.devices,
            objects,
            user_bytes: tally.user_written,
            live_bytes: failed.live_bytes,
            keys_before: failed.key_count,
            keys_after: after.key_count,
            rebuild_s,
            rebuild_mb_per_s: replacement_bytes as f64 / rebuild_s.max(1e-9) / 1e6,
            replacement_bytes,
            survivor_bytes_read: survivors.bytes_read,
            objects_checked: report.objects,
            objects_repaired: report.objects_repaired,
            sets_checked: report.sets,
            sets_repaired: report.sets_repaired,
            decodes,
            cpu_s: use1.cpu_s - use0.cpu_s,
            device_capacity: spec.capacity_bytes,
            full_copy_s: copy.seconds,
            full_copy_mb_per_s: copy.bytes as f64 / copy.seconds.max(1e-9) / 1e6,
            full_copy_method: copy.method.clone(),
            speedup_vs_full_copy: copy.seconds / rebuild_s.max(1e-9),
        },
        array,
    ))
}

fn rebuild_header() -> String {
    format!(
        "{:<10} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8}",
        "mechanism",
        "objects",
        "user MB",
        "live MB",
        "keys",
        "rebuild s",
        "MB/s",
        "copy s",
        "speedup"
    )
}

fn rebuild_line(r: &RebuildRow) -> String {
    format!(
        "{:<10} {:>8} {:>9.1} {:>9.1} {:>8} {:>9.3} {:>9.1} {:>9.3} {:>7.1}x",
        r.mechanism,
        r.objects,
        r.user_bytes as f64 / 1e6,
        r.live_bytes as f64 / 1e6,
        r.keys_after,
        r.rebuild_s,
        r.rebuild_mb_per_s,
        r.full_copy_s,
        r.speedup_vs_full_copy
    )
}

/// The CSV form of the rebuild rows.
pub fn rebuild_csv(rows: &[RebuildRow]) -> String {
    let mut s = String::from(
        "mechanism,backend,devices,objects,user_bytes,live_bytes,keys_before,keys_after,\
         rebuild_s,rebuild_mb_per_s,replacement_bytes,survivor_bytes_read,objects_checked,\
         objects_repaired,sets_checked,sets_repaired,decodes,cpu_s,device_capacity,full_copy_s,\
         full_copy_mb_per_s,speedup_vs_full_copy\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.4},{:.2},{},{},{},{},{},{},{},{:.4},{},{:.4},{:.2},{:.2}",
            r.mechanism,
            backend_name(r.backend),
            r.devices,
            r.objects,
            r.user_bytes,
            r.live_bytes,
            r.keys_before,
            r.keys_after,
            r.rebuild_s,
            r.rebuild_mb_per_s,
            r.replacement_bytes,
            r.survivor_bytes_read,
            r.objects_checked,
            r.objects_repaired,
            r.sets_checked,
            r.sets_repaired,
            r.decodes,
            r.cpu_s,
            r.device_capacity,
            r.full_copy_s,
            r.full_copy_mb_per_s,
            r.speedup_vs_full_copy
        );
    }
    s
}

fn rebuild_summary(args: &RebuildBenchArgs, rows: &[RebuildRow]) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## rebuild bench results\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(s, "- machine: {}", machine_description());
    if let Some(r) = rows.first() {
        let _ = writeln!(
            s,
            "- {} {} devices of {}; device 0 fails after the objects are written and is \
             rebuilt onto a fresh device with `Manager::rebuild` ({} objects or sets at once); \
             the time runs until the replacement is synced",
            r.devices,
            backend_name(r.backend),
            human_bytes(r.device_capacity),
            args.concurrency
        );
        let _ = writeln!(
            s,
            "- RAID-style baseline ({}): {} in {:.3} s ({:.0} MB/s)",
            r.full_copy_method,
            human_bytes(r.device_capacity),
            r.full_copy_s,
            r.full_copy_mb_per_s
        );
    }
    let _ = writeln!(
        s,
        "\n| mechanism | objects | user MB | live MB on failed device | keys before / after | rebuild s | MB/s | full copy s | speedup |\n\
         |---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.1} | {} / {} | {:.3} | {:.1} | {:.3} | {:.1}x |",
            r.mechanism,
            r.objects,
            r.user_bytes as f64 / 1e6,
            r.live_bytes as f64 / 1e6,
            r.keys_before,
            r.keys_after,
            r.rebuild_s,
            r.rebuild_mb_per_s,
            r.full_copy_s,
            r.speedup_vs_full_copy
        );
    }
    let _ = writeln!(
        s,
        "\nRebuild time with half the objects, as a fraction of the time with all of them \
         (1/2 when the time follows live data):\n"
    );
    let mut seen: Vec<&str> = Vec::new();
    for r in rows {
        if seen.contains(&r.mechanism.as_str()) {
            continue;
        }
        seen.push(&r.mechanism);
        let mine: Vec<&RebuildRow> = rows.iter().filter(|x| x.mechanism == r.mechanism).collect();
        if let (Some(full), Some(half)) = (
            mine.iter().max_by_key(|x| x.objects),
            mine.iter().min_by_key(|x| x.objects),
        ) {
            if full.objects > half.objects {
                let _ = writeln!(
                    s,
                    "- {}: {:.2} ({} → {} objects)",
                    r.mechanism,
                    half.rebuild_s / full.rebuild_s.max(1e-9),
                    full.objects,
                    half.objects
                );
            }
        }
    }
    s
}

fn rebuild_plot(rows: &[RebuildRow], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut mechs: Vec<String> = Vec::new();
    let mut counts: Vec<u64> = Vec::new();
    for r in rows {
        if !mechs.contains(&r.mechanism) {
            mechs.push(r.mechanism.clone());
        }
        if !counts.contains(&r.objects) {
            counts.push(r.objects);
        }
    }
    let mut categories = mechs.clone();
    categories.push("full copy".into());
    let mut series: Vec<(String, Vec<f64>)> = counts
        .iter()
        .map(|&c| {
            let mut v: Vec<f64> = mechs
                .iter()
                .map(|m| {
                    rows.iter()
                        .find(|r| &r.mechanism == m && r.objects == c)
                        .map_or(0.0, |r| r.rebuild_s)
                })
                .collect();
            v.push(0.0);
            (format!("{c} objects"), v)
        })
        .collect();
    let mut copy = vec![0.0; mechs.len()];
    copy.push(rows.first().map_or(0.0, |r| r.full_copy_s));
    series.push((
        format!(
            "RAID-style copy of {}",
            human_bytes(rows.first().map_or(0, |r| r.device_capacity))
        ),
        copy,
    ));
    write_panels(
        dir,
        "rebuild_time",
        &[Panel {
            title: "Rebuild of one failed device: KVMD (live data) vs full-capacity copy".into(),
            y_label: "seconds".into(),
            categories,
            series,
            lollipop: None,
        }],
    )
}

/// Runs `railstore bench rebuild`: prints the baseline and one line per rebuild, writes `--json`
/// and `--out`.
pub fn run_rebuild(args: &RebuildBenchArgs) -> Result<()> {
    let rows = rebuild_rows(args, true)?;
    let json = serde_json::to_string_pretty(&rows)?;
    if let Some(path) = &args.json {
        write_file(path, &json)?;
    }
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let mut written = Vec::new();
        let summary = rebuild_summary(args, &rows);
        for (name, body) in [
            ("results.json", json.as_str()),
            ("results.csv", &rebuild_csv(&rows)),
            ("summary.md", &summary),
        ] {
            let p = out.join(name);
            write_file(&p, body)?;
            written.push(p);
        }
        if !args.no_plots {
            match rebuild_plot(&rows, out) {
                Ok(files) => written.extend(files),
                Err(e) => println!("plot skipped: {e:#}"),
            }
        }
        println!("wrote:");
        for p in written {
            println!("  {}", p.display());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Bar charts with lollipops (KVMD Fig. 9-12 style)

/// One chart: grouped bars per category, and optionally a lollipop per category on a second
/// (percent) axis.
struct Panel {
    title: String,
    y_label: String,
    categories: Vec<String>,
    /// (name, one value per category).
    series: Vec<(String, Vec<f64>)>,
    /// (name, one percentage per category).
    lollipop: Option<(String, Vec<Option<f64>>)>,
}

/// Bar colours (the lollipops are red).
const BAR_COLORS: [RGBColor; 5] = [
    RGBColor(107, 174, 214),
    RGBColor(33, 113, 181),
    RGBColor(253, 174, 107),
    RGBColor(116, 196, 118),
    RGBColor(158, 154, 200),
];

/// Writes `<stem>.png` and `<stem>.svg`, the panels stacked.
fn write_panels(dir: &Path, stem: &str, panels: &[Panel]) -> Result<Vec<PathBuf>> {
    ensure_font()?;
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    let size = (1000, 420 * panels.len().max(1) as u32);
    draw_panels(BitMapBackend::new(&png, size).into_drawing_area(), panels)
        .with_context(|| format!("drawing {}", png.display()))?;
    draw_panels(SVGBackend::new(&svg, size).into_drawing_area(), panels)
        .with_context(|| format!("drawing {}", svg.display()))?;
    Ok(vec![png, svg])
}

fn draw_panels<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, panels: &[Panel]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (area, p) in areas.iter().zip(panels) {
        let n = p.categories.len().max(1);
        let y1 = p
            .series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .fold(0.0f64, f64::max);
        // Headroom above the tallest bar and lollipop for the legend.
        let y1 = if y1 > 0.0 { y1 * 1.3 } else { 1.0 };
        let pct_max = p
            .lollipop
            .iter()
            .flat_map(|l| l.1.iter().flatten().copied())
            .fold(0.0f64, f64::max);
        let y2 = (pct_max * 1.35).max(120.0);
        let x = -0.5f64..(n as f64 - 0.5);
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .right_y_label_area_size(if p.lollipop.is_some() { 60 } else { 10 })
            .build_cartesian_2d(x.clone(), 0.0..y1)
            .map_err(err)?
            .set_secondary_coord(x, 0.0..y2);
        let label = |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 {
                p.categories.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        // Enough decimals to tell ticks about a tenth of the range apart.
        let decimals = (-(y1 / 10.0).log10()).ceil().clamp(0.0, 4.0) as usize;
        let y_fmt = |v: &f64| format!("{v:.decimals$}");
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_labels(n * 4 + 1)
            .x_label_formatter(&label)
            .y_label_formatter(&y_fmt)
            .y_desc(p.y_label.as_str())
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        let groups = p.series.len().max(1) as f64;
        let width = 0.7 / groups;
        for (j, (name, values)) in p.series.iter().enumerate() {
            let color = BAR_COLORS[j % BAR_COLORS.len()].to_rgba();
            let x0 = |i: usize| i as f64 - 0.35 + j as f64 * width;
            chart
                .draw_series(values.iter().enumerate().map(|(i, &v)| {
                    Rectangle::new([(x0(i), 0.0), (x0(i) + width * 0.9, v)], color.filled())
                }))
                .map_err(err)?
                .label(name.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        if let Some((name, pcts)) = &p.lollipop {
            chart
                .configure_secondary_axes()
                .y_desc("% of raw")
                .y_label_formatter(&|v: &f64| format!("{v:.0}"))
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(err)?;
            let red = RGBColor(214, 39, 40);
            chart
                .draw_secondary_series(std::iter::once(PathElement::new(
                    vec![(-0.5, 100.0), (n as f64 - 0.5, 100.0)],
                    RGBColor(160, 160, 160).stroke_width(1),
                )))
                .map_err(err)?;
            let points: Vec<(f64, f64)> = pcts
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.map(|v| (i as f64, v)))
                .collect();
            chart
                .draw_secondary_series(
                    points.iter().map(|&(i, v)| {
                        PathElement::new(vec![(i, 0.0), (i, v)], red.stroke_width(2))
                    }),
                )
                .map_err(err)?
                .label(name.clone())
                .legend(move |(x, y)| Circle::new((x + 6, y), 5, red.filled()));
            chart
                .draw_secondary_series(
                    points
                        .iter()
                        .map(|&(i, v)| Circle::new((i, v), 6, red.filled())),
                )
                .map_err(err)?;
            chart
                .draw_secondary_series(points.iter().map(|&(i, v)| {
                    Text::new(
                        format!("{v:.0}%"),
                        (i + 0.06, v + y2 * 0.02),
                        ("sans-serif", 14).into_font().color(&BLACK),
                    )
                }))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
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
