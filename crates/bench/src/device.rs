//! `railstore bench device`: a fio-like load on any device backend, and the simulated-SSD
//! validation (random reads alone vs. with random writes, in virtual time).

use crate::progress::bar;
use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use railstore_device::sim::{precondition, virtual_time_runtime, VIRTUAL_TIME_DILATION};
use railstore_device::Fence;
use railstore_device::{
    CompactionPolicy, Device, FileConfig, FileDevice, Limits, MemConfig, MemDevice, ReadRange,
    SimConfig, SimDevice, StoreMode,
};
use railstore_node::{Exported, FenceBook, LoopbackNode, RemoteNode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Which backend to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The log-structured file device (O_DIRECT where allowed) in `--path`.
    File,
    /// The in-memory device.
    Mem,
    /// The simulated SSD around an in-memory device.
    Sim,
}

/// The access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Uniformly random retrieves of existing keys.
    Randread,
    /// Uniformly random overwrites.
    Randwrite,
    /// Retrieves in key order.
    Read,
    /// Stores in key order.
    Write,
    /// Random retrieves and overwrites (`--write-percent` writes).
    Mixed,
}

/// Options of `railstore bench device`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeviceBenchArgs {
    /// Backend to measure.
    #[arg(long, value_enum, default_value = "mem")]
    pub backend: Backend,
    /// Device directory for `--backend file`.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Access pattern.
    #[arg(long, value_enum, default_value = "randread")]
    pub pattern: Pattern,
    /// Bytes per value.
    #[arg(long, default_value_t = 4096)]
    pub value_size: usize,
    /// Operations in flight.
    #[arg(long, default_value_t = 32)]
    pub qd: usize,
    /// Seconds to run (virtual seconds for `sim`); default 10 unless `--ops` is given.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Operations to run.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Bytes of data the keys span (like fio's --size); keys = size / value size.
    #[arg(long, default_value_t = 1 << 30)]
    pub size: u64,
    /// Percentage of writes for `--pattern mixed`.
    #[arg(long, default_value_t = 25)]
    pub write_percent: u32,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Use buffered I/O instead of O_DIRECT for `file`.
    #[arg(long)]
    pub buffered: bool,
    /// For `sim`: overwrite this many times the key count after filling (preconditioning).
    #[arg(long, default_value_t = 1.0)]
    pub precondition_overwrites: f64,
    /// For `sim`: run in real time instead of virtual time.
    #[arg(long)]
    pub real_time: bool,
    /// For `sim` in virtual time: tokio nanoseconds per model nanosecond. tokio's timers tick
    /// in milliseconds, so 1000 gives 1 µs model resolution, 100 gives 10 µs and runs faster.
    #[arg(long, default_value_t = VIRTUAL_TIME_DILATION)]
    pub sim_time_dilation: u64,
    /// Open loop: operations arrive at this rate (per second, Poisson) whatever the device
    /// does, up to `--qd` outstanding, and latency counts from arrival; without it the load is
    /// closed-loop with `--qd` operations in flight.
    #[arg(long)]
    pub rate: Option<f64>,
    /// tokio worker threads driving the load; 1 runs everything on one thread (like fio's one
    /// job), which avoids cross-thread wake-ups per I/O.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Serve the device from a node on a loopback port (its own runtime and threads, as a
    /// separate process would have) and measure it through a remote device over gRPC.
    #[arg(long)]
    pub remote: bool,
    /// Worker threads of the node's runtime for `--remote`.
    #[arg(long, default_value_t = 1)]
    pub node_threads: usize,
    /// Write the result as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl Default for DeviceBenchArgs {
    fn default() -> Self {
        DeviceBenchArgs {
            backend: Backend::Mem,
            path: None,
            pattern: Pattern::Randread,
            value_size: 4096,
            qd: 32,
            duration: None,
            ops: None,
            size: 1 << 30,
            write_percent: 25,
            seed: 1,
            buffered: false,
            precondition_overwrites: 1.0,
            real_time: false,
            sim_time_dilation: VIRTUAL_TIME_DILATION,
            threads: 1,
            rate: None,
            remote: false,
            node_threads: 1,
            json: None,
            quiet: true,
        }
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Percentiles {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// 99.99th percentile.
    pub p9999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        let us = |ns: u64| ns as f64 / 1000.0;
        Percentiles {
            p50_us: us(h.value_at_quantile(0.5)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            p9999_us: us(h.value_at_quantile(0.9999)),
            max_us: us(h.max()),
            mean_us: h.mean() / 1000.0,
        }
    }
}

/// Result of one device benchmark run (the `--json` object).
#[derive(Debug, Clone, Serialize)]
pub struct DeviceBenchReport {
    /// Backend measured.
    pub backend: Backend,
    /// Pattern run.
    pub pattern: Pattern,
    /// Bytes per value.
    pub value_size: usize,
    /// Operations in flight.
    pub qd: usize,
    /// Keys the pattern spans.
    pub keys: u64,
    /// Operations completed.
    pub ops: u64,
    /// Seconds measured (virtual seconds for `sim` in virtual time).
    pub elapsed_s: f64,
    /// Wall-clock seconds the measurement took.
    pub wall_s: f64,
    /// Operations per (measured) second.
    pub iops: f64,
    /// Value megabytes (10^6 B) per second.
    pub mbps: f64,
    /// Median latency of all operations, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// 99.99th percentile, µs.
    pub p9999_us: f64,
    /// Latencies of retrieves only.
    pub read: Percentiles,
    /// Latencies of stores only.
    pub write: Percentiles,
    /// Retrieves completed.
    pub reads: u64,
    /// Stores completed.
    pub writes: u64,
    /// Time was virtual (paused tokio clock).
    pub virtual_time: bool,
    /// Simulated operations per wall-clock second (sim in virtual time).
    pub ops_per_wall_s: f64,
    /// O_DIRECT in use (file).
    pub direct_io: Option<bool>,
    /// Reads through io_uring (file).
    pub io_uring: Option<bool>,
    /// Simulated-SSD counters (sim).
    pub sim: Option<SimSummary>,
    /// Measured through a node on loopback (`--remote`).
    pub remote: bool,
}

/// The simulated SSD's counters after a run.
#[derive(Debug, Clone, Serialize)]
pub struct SimSummary {
    /// Write amplification (all programs / host programs).
    pub write_amplification: f64,
    /// Garbage-collection runs.
    pub gc_runs: u64,
    /// Blocks erased.
    pub blocks_erased: u64,
}

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

/// Builds the device for `args` (inside the runtime that will drive it).
#[allow(clippy::type_complexity)]
async fn build(
    args: &DeviceBenchArgs,
    keys: u64,
) -> anyhow::Result<(
    Arc<dyn Device>,
    Option<Arc<SimDevice>>,
    Option<(bool, bool)>,
)> {
    let limits = Limits {
        value_bytes_max: args.value_size.max(Limits::default().value_bytes_max),
        ..Limits::default()
    };
    let need = keys * (args.value_size as u64 + 64);
    Ok(match args.backend {
        Backend::Mem => (
            Arc::new(MemDevice::new(MemConfig {
                capacity_bytes: need * 2 + (1 << 20),
                limits,
                queue_depth_max: 1024,
            })?),
            None,
            None,
        ),
        Backend::File => {
            let path = args
                .path
                .clone()
                .context("--backend file needs --path DIR")?;
            let buffer =
                (4 * (args.value_size + 8192)).max(FileConfig::default().write_buffer_bytes);
            let dev = FileDevice::open(
                &path,
                FileConfig {
                    capacity_bytes: u64::MAX / 4,
                    limits,
                    queue_depth_max: args.qd.max(1) * 2,
                    write_buffer_bytes: buffer,
                    segment_bytes: (1u64 << 30).max(2 * buffer as u64),
                    compaction: CompactionPolicy::Auto {
                        dead_ratio_min: 0.5,
                    },
                    direct_io: !args.buffered,
                    ..Default::default()
                },
            )?;
            let direct = (dev.direct_io(), dev.io_uring());
            (Arc::new(dev), None, Some(direct))
        }
        Backend::Sim => {
            let units = (args.value_size as u64).div_ceil(4096).max(1);
            let logical = (keys * units * 4096).max(64 << 20);
            let inner: Arc<dyn Device> = Arc::new(MemDevice::new(MemConfig {
                capacity_bytes: need * 2 + (1 << 20),
                limits,
                queue_depth_max: 1 << 16,
            })?);
            let sim = Arc::new(SimDevice::new(
                inner,
                sim_config(logical, !args.real_time, args.sim_time_dilation),
            )?);
            (sim.clone(), Some(sim), None)
        }
    })
}

/// The default SSD model for `logical` bytes (see [`SimConfig::for_logical_bytes`]), in
/// virtual time with `dilation` or in real time.
pub fn sim_config(logical: u64, virtual_time: bool, dilation: u64) -> SimConfig {
    SimConfig {
        time_dilation: if virtual_time { dilation } else { 1 },
        ..SimConfig::for_logical_bytes(logical)
    }
}

struct Totals {
    all: Histogram<u64>,
    read: Histogram<u64>,
    write: Histogram<u64>,
}

impl Totals {
    fn new() -> Totals {
        Totals {
            all: hist(),
            read: hist(),
            write: hist(),
        }
    }
}

/// Takes the tasks' shared totals once they are done, with reads and writes merged into
/// `all`; syncs the device after writes, which count only once durable (as fio's end_fsync
/// would have them).
async fn finish(dev: &dyn Device, totals: &std::sync::Mutex<Totals>) -> anyhow::Result<Totals> {
    let mut t = std::mem::replace(&mut *totals.lock().expect("totals lock"), Totals::new());
    t.all.add(&t.read).ok();
    t.all.add(&t.write).ok();
    if !t.write.is_empty() {
        dev.sync().await?;
    }
    Ok(t)
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

/// Runs the measured phase: `qd` tasks issuing the pattern until `ops` or `duration`.
async fn measure(
    dev: Arc<dyn Device>,
    args: &DeviceBenchArgs,
    keys: u64,
    dilation: u64,
    progress: &ProgressBar,
) -> anyhow::Result<(Totals, f64)> {
    let ops_max = args.ops.unwrap_or(u64::MAX);
    let secs = args
        .duration
        .unwrap_or(if args.ops.is_some() { 1e9 } else { 10.0 })
        .min(1e9);
    let duration = Duration::from_secs_f64(secs * dilation as f64);
    let issued = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = tokio::time::Instant::now();
    let deadline = start + duration;
    // One set of histograms for all tasks: per-task ones (3 × 64 of them at qd 64, each
    // hundreds of KiB) missed the cache on most records and cost ~10 % of a simulated read.
    let totals = Arc::new(std::sync::Mutex::new(Totals::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..args.qd.max(1) {
        let (dev, issued, stop, progress, totals) = (
            dev.clone(),
            issued.clone(),
            stop.clone(),
            progress.clone(),
            totals.clone(),
        );
        let (pattern, value_size, write_percent) =
            (args.pattern, args.value_size, args.write_percent);
        let seed = args.seed;
        tasks.spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1_000_003) ^ t as u64);
            let mut value = vec![0u8; value_size];
            rng.fill(&mut value[..]);
            let mut since_tick = 0u64;
            loop {
                let n = issued.fetch_add(1, Ordering::Relaxed);
                if n >= ops_max || stop.load(Ordering::Relaxed) {
                    break;
                }
                let (write, k) = match pattern {
                    Pattern::Randread => (false, rng.gen_range(0..keys)),
                    Pattern::Randwrite => (true, rng.gen_range(0..keys)),
                    Pattern::Read => (false, n % keys),
                    Pattern::Write => (true, n % keys),
                    Pattern::Mixed => (
                        rng.gen_range(0..100) < write_percent,
                        rng.gen_range(0..keys),
                    ),
                };
                let t0 = tokio::time::Instant::now();
                if write {
                    value[..8].copy_from_slice(&n.to_le_bytes());
                    dev.store(&key(k), &value, StoreMode::Upsert).await?;
                } else {
                    let r = dev.retrieve(&key(k), ReadRange::ALL).await?;
                    anyhow::ensure!(r.value.len() == value_size, "short value for key {k}");
                }
                let now = tokio::time::Instant::now();
                let ns = ((now - t0).as_nanos() as u64 / dilation).max(1);
                {
                    let mut tot = totals.lock().expect("totals lock");
                    if write { &mut tot.write } else { &mut tot.read }.saturating_record(ns);
                }
                since_tick += 1;
                if since_tick == 256 {
                    progress.inc(since_tick);
                    since_tick = 0;
                }
                if now >= deadline {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            progress.inc(since_tick);
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("benchmark task panicked")??;
    }
    let tot = finish(dev.as_ref(), &totals).await?;
    Ok((tot, start.elapsed().as_secs_f64() / dilation as f64))
}

/// Open-loop load: Poisson arrivals at `rate` per (model) second; latency from arrival, so a
/// stalled device delays every operation that arrives meanwhile (no coordinated omission).
async fn measure_open_loop(
    dev: Arc<dyn Device>,
    args: &DeviceBenchArgs,
    rate: f64,
    keys: u64,
    dilation: u64,
    progress: &ProgressBar,
) -> anyhow::Result<(Totals, f64)> {
    let secs = args.duration.unwrap_or(10.0).min(1e9);
    let ops_max = args.ops.unwrap_or((secs * rate) as u64);
    let slots = Arc::new(tokio::sync::Semaphore::new(args.qd.max(1)));
    let totals = Arc::new(std::sync::Mutex::new(Totals::new()));
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut value = vec![0u8; args.value_size];
    rng.fill(&mut value[..]);
    let value: Arc<[u8]> = value.into();
    let start = tokio::time::Instant::now();
    let mut at_ns = 0f64;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..ops_max {
        // Exponential gaps: a Poisson arrival process.
        at_ns += -(1.0 - rng.gen::<f64>()).ln() / rate * 1e9;
        let arrival = start + Duration::from_nanos((at_ns * dilation as f64) as u64);
        tokio::time::sleep_until(arrival).await;
        let write = match args.pattern {
            Pattern::Randwrite | Pattern::Write => true,
            Pattern::Mixed => rng.gen_range(0..100) < args.write_percent,
            Pattern::Randread | Pattern::Read => false,
        };
        let k = match args.pattern {
            Pattern::Read | Pattern::Write => n % keys,
            _ => rng.gen_range(0..keys),
        };
        let (dev, slots, totals, value, progress) = (
            dev.clone(),
            slots.clone(),
            totals.clone(),
            value.clone(),
            progress.clone(),
        );
        tasks.spawn(async move {
            let _slot = slots.acquire_owned().await.expect("semaphore open");
            if write {
                dev.store(&key(k), &value, StoreMode::Upsert).await?;
            } else {
                dev.retrieve(&key(k), ReadRange::ALL).await?;
            }
            let ns = ((tokio::time::Instant::now() - arrival).as_nanos() as u64 / dilation).max(1);
            let mut t = totals.lock().expect("totals lock");
            if write { &mut t.write } else { &mut t.read }.saturating_record(ns);
            progress.inc(1);
            Ok::<(), anyhow::Error>(())
        });
        while let Some(r) = tasks.try_join_next() {
            r.context("benchmark task panicked")??;
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.context("benchmark task panicked")??;
    }
    let t = finish(dev.as_ref(), &totals).await?;
    Ok((t, start.elapsed().as_secs_f64() / dilation as f64))
}

/// Writes every key once (sequentially, `qd` in flight) so reads find values.
async fn prefill(
    dev: Arc<dyn Device>,
    keys: u64,
    value_size: usize,
    qd: usize,
    progress: &ProgressBar,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..qd.max(1) {
        let (dev, next, progress) = (dev.clone(), next.clone(), progress.clone());
        tasks.spawn(async move {
            let value: Vec<u8> = (0..value_size).map(|i| (i * 7 + 1) as u8).collect();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= keys {
                    return Ok::<(), anyhow::Error>(());
                }
                dev.store(&key(i), &value, StoreMode::Upsert).await?;
                progress.inc(1);
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("prefill task panicked")??;
    }
    dev.sync().await?;
    Ok(())
}

async fn run_async(args: &DeviceBenchArgs) -> anyhow::Result<DeviceBenchReport> {
    if args.value_size == 0 {
        bail!("--value-size must be positive");
    }
    let keys = (args.size / args.value_size as u64).max(1);
    let (dev, sim, direct) = build(args, keys).await?;
    let (dev, _node) = if args.remote {
        let (remote, node) = through_a_node(dev, args).await?;
        (remote, Some(node))
    } else {
        (dev, None)
    };
    let needs_data = !matches!(args.pattern, Pattern::Write | Pattern::Randwrite)
        || args.backend == Backend::Sim;
    let have = dev.info().await?.key_count;
    if needs_data && have < keys {
        let p = bar(args.quiet, Some(keys), "prefill");
        if let Some(sim) = &sim {
            let overwrites = (keys as f64 * args.precondition_overwrites) as u64;
            p.set_length(keys + overwrites);
            precondition(
                sim.clone(),
                keys,
                args.value_size,
                overwrites,
                args.qd.max(8),
                args.seed,
            )
            .await?;
            sim.drain().await;
        } else {
            prefill(dev.clone(), keys, args.value_size, args.qd, &p).await?;
        }
        p.finish_and_clear();
    }
    let p = bar(args.quiet, args.ops, "measure");
    let wall = std::time::Instant::now();
    let dilation = sim.as_ref().map_or(1, |s| s.config().time_dilation);
    let (tot, elapsed) = match args.rate {
        Some(rate) => measure_open_loop(dev.clone(), args, rate, keys, dilation, &p).await?,
        None => measure(dev.clone(), args, keys, dilation, &p).await?,
    };
    let wall_s = wall.elapsed().as_secs_f64();
    p.finish_and_clear();
    let n = tot.all.len();
    let all = Percentiles::of(&tot.all);
    let virtual_time = args.backend == Backend::Sim && !args.real_time;
    Ok(DeviceBenchReport {
        backend: args.backend,
        pattern: args.pattern,
        value_size: args.value_size,
        qd: args.qd,
        keys,
        ops: n,
        elapsed_s: elapsed,
        wall_s,
        iops: n as f64 / elapsed,
        mbps: n as f64 * args.value_size as f64 / elapsed / 1e6,
        p50_us: all.p50_us,
        p99_us: all.p99_us,
        p999_us: all.p999_us,
        p9999_us: all.p9999_us,
        read: Percentiles::of(&tot.read),
        write: Percentiles::of(&tot.write),
        reads: tot.read.len(),
        writes: tot.write.len(),
        virtual_time,
        ops_per_wall_s: n as f64 / wall_s,
        direct_io: direct.map(|d| d.0),
        io_uring: direct.map(|d| d.1),
        sim: sim.map(|s| {
            let st = s.stats();
            SimSummary {
                write_amplification: st.write_amplification(),
                gc_runs: st.gc_runs,
                blocks_erased: st.blocks_erased,
            }
        }),
        remote: args.remote,
    })
}

/// `dev` served by a loopback node, and the remote device for it.
async fn through_a_node(
    dev: Arc<dyn Device>,
    args: &DeviceBenchArgs,
) -> anyhow::Result<(Arc<dyn Device>, LoopbackNode)> {
    if args.backend == Backend::Sim {
        bail!("--remote measures a device in real time: use --backend file or mem");
    }
    let array_id = 1;
    let node = LoopbackNode::start(
        vec![Exported {
            name: "bench".into(),
            device: dev,
        }],
        FenceBook::in_memory(array_id),
        args.node_threads,
    )?;
    let remote = RemoteNode::connect(&node.address().to_string())
        .await?
        .device(
            "bench",
            Fence {
                array_id,
                ..Fence::default()
            },
        )?;
    Ok((Arc::new(remote), node))
}

/// Runs the benchmark and returns its report without printing.
pub fn measure_device(args: &DeviceBenchArgs) -> anyhow::Result<DeviceBenchReport> {
    let rt = if args.backend == Backend::Sim && !args.real_time {
        virtual_time_runtime()?
    } else if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    rt.block_on(run_async(args))
}

fn describe(r: &DeviceBenchReport, args: &DeviceBenchArgs) -> String {
    let on = match r.backend {
        Backend::File => format!(
            "file device in {} ({}, reads via {}, {} runtime thread(s))",
            args.path
                .as_ref()
                .map_or("?".into(), |p| p.display().to_string()),
            if r.direct_io == Some(true) {
                "O_DIRECT"
            } else {
                "buffered I/O"
            },
            if r.io_uring == Some(true) {
                "io_uring"
            } else {
                "blocking thread pool"
            },
            args.threads.max(1)
        ),
        Backend::Mem => "in-memory device".into(),
        Backend::Sim => format!(
            "simulated SSD (default TLC model) in {} time",
            if r.virtual_time { "virtual" } else { "real" }
        ),
    };
    let on = if args.remote {
        format!(
            "{on}, through a node on loopback ({} thread(s))",
            args.node_threads.max(1)
        )
    } else {
        on
    };
    format!(
        "{:?} of {} B values over {} keys, qd {}, on the {on}\n  {} ops in {:.3} s{}: {:.0} IOPS, {:.1} MB/s\n  latency µs: p50 {:.1}  p99 {:.1}  p99.9 {:.1}  p99.99 {:.1}",
        r.pattern,
        r.value_size,
        r.keys,
        r.qd,
        r.ops,
        r.elapsed_s,
        if r.virtual_time { format!(" (virtual; {:.2} s wall, {:.0} ops per wall second)", r.wall_s, r.ops_per_wall_s) } else { String::new() },
        r.iops,
        r.mbps,
        r.p50_us,
        r.p99_us,
        r.p999_us,
        r.p9999_us,
    )
}

/// Runs `railstore bench device`: prints a summary and writes `--json`.
pub fn run(args: &DeviceBenchArgs) -> anyhow::Result<()> {
    let r = measure_device(args)?;
    println!("{}", describe(&r, args));
    if r.reads > 0 && r.writes > 0 {
        println!(
            "  reads  p50 {:.1}  p99 {:.1}  p99.9 {:.1} µs\n  writes p50 {:.1}  p99 {:.1}  p99.9 {:.1} µs",
            r.read.p50_us, r.read.p99_us, r.read.p999_us, r.write.p50_us, r.write.p99_us, r.write.p999_us
        );
    }
    if let Some(s) = &r.sim {
        println!(
            "  sim: write amplification {:.2}, {} GC runs, {} blocks erased",
            s.write_amplification, s.gc_runs, s.blocks_erased
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&r)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Options of the simulated-SSD validation.
#[derive(Debug, Clone, clap::Args)]
pub struct SimValidationArgs {
    /// Logical bytes of the simulated SSD (keys = this / 4 KiB).
    #[arg(long, default_value_t = 512 << 20)]
    pub size: u64,
    /// Operations in flight.
    #[arg(long, default_value_t = 4)]
    pub qd: usize,
    /// Operations measured in each run.
    #[arg(long, default_value_t = 400_000)]
    pub ops: u64,
    /// Open-loop arrival rate (operations per second); `None` runs closed-loop at `qd`.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the two reports as a JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl Default for SimValidationArgs {
    fn default() -> Self {
        SimValidationArgs {
            size: 512 << 20,
            qd: 1024,
            ops: 400_000,
            rate: Some(20_000.0),
            seed: 1,
            json: None,
            quiet: true,
        }
    }
}

/// Result of the validation: random 4 KiB reads alone and with 25 % random writes.
#[derive(Debug, Clone, Serialize)]
pub struct SimValidationReport {
    /// Random reads on the preconditioned SSD.
    pub read_only: DeviceBenchReport,
    /// 75 % random reads, 25 % random writes.
    pub mixed: DeviceBenchReport,
    /// Mixed read p99 / read-only read p99.
    pub p99_ratio: f64,
    /// Mixed read p99.9 / read-only read p99.9.
    pub p999_ratio: f64,
}

/// Runs the simulated-SSD validation in virtual time (each run preconditions a fresh SSD:
/// fill, then one full random overwrite).
pub fn sim_validation(v: &SimValidationArgs) -> anyhow::Result<SimValidationReport> {
    let base = DeviceBenchArgs {
        backend: Backend::Sim,
        value_size: 4096,
        qd: v.qd,
        ops: Some(v.ops),
        size: v.size,
        seed: v.seed,
        rate: v.rate,
        quiet: v.quiet,
        ..Default::default()
    };
    let read_only = measure_device(&DeviceBenchArgs {
        pattern: Pattern::Randread,
        ..base.clone()
    })?;
    let mixed = measure_device(&DeviceBenchArgs {
        pattern: Pattern::Mixed,
        write_percent: 25,
        ..base
    })?;
    Ok(SimValidationReport {
        p99_ratio: mixed.read.p99_us / read_only.read.p99_us,
        p999_ratio: mixed.read.p999_us / read_only.read.p999_us,
        read_only,
        mixed,
    })
}

/// Runs the validation, prints the comparison and writes `--json`.
pub fn run_sim_validation(v: &SimValidationArgs) -> anyhow::Result<()> {
    let r = sim_validation(v)?;
    println!(
        "simulated SSD, random 4 KiB reads, qd {}, {} MiB logical, preconditioned, virtual time",
        v.qd,
        v.size >> 20
    );
    for (name, x) in [("read-only", &r.read_only), ("25% writes", &r.mixed)] {
        println!(
            "  {name:>10}: read p50 {:>8.1}  p99 {:>9.1}  p99.9 {:>9.1}  p99.99 {:>9.1} µs  ({:.0} ops per wall second)",
            x.read.p50_us, x.read.p99_us, x.read.p999_us, x.read.p9999_us, x.ops_per_wall_s
        );
    }
    println!(
        "  mixed / read-only: p99 x{:.1}, p99.9 x{:.1}",
        r.p99_ratio, r.p999_ratio
    );
    if let Some(path) = &v.json {
        std::fs::write(path, serde_json::to_string_pretty(&r)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_randread_reports_all_fields() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let args = DeviceBenchArgs {
            size: 4 << 20,
            ops: Some(5000),
            qd: 4,
            json: Some(json.clone()),
            ..Default::default()
        };
        run(&args).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        for f in ["iops", "mbps", "p50_us", "p99_us", "p999_us", "p9999_us"] {
            assert!(v[f].as_f64().is_some_and(|x| x > 0.0), "{f} in {v}");
        }
        assert_eq!(v["ops"], 5000);
    }

    #[test]
    fn file_write_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let base = DeviceBenchArgs {
            backend: Backend::File,
            path: Some(dir.path().join("dev")),
            size: 2 << 20,
            ops: Some(2000),
            qd: 8,
            ..Default::default()
        };
        let w = measure_device(&DeviceBenchArgs {
            pattern: Pattern::Write,
            ..base.clone()
        })
        .unwrap();
        assert_eq!(w.writes, 2000);
        let r = measure_device(&DeviceBenchArgs {
            pattern: Pattern::Randread,
            ..base
        })
        .unwrap();
        assert_eq!(r.reads, 2000);
    }

    #[test]
    fn sim_validation_shape() {
        // Small and short, to stay fast in CI; the full run is in docs/benchmarks/sim-ssd.md.
        let r = sim_validation(&SimValidationArgs {
            size: 64 << 20,
            ops: 60_000,
            ..Default::default()
        })
        .unwrap();
        assert!(r.read_only.virtual_time && r.mixed.writes > 10_000);
        assert!(
            r.read_only.read.p99_us < 200.0,
            "read-only p99 {} µs",
            r.read_only.read.p99_us
        );
        assert!(r.p99_ratio >= 10.0, "p99 ratio {}", r.p99_ratio);
        assert!(r.p999_ratio >= 15.0, "p99.9 ratio {}", r.p999_ratio);
    }
}
