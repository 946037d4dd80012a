//! `railstore bench mixed --preset serve`: the separation experiment through the product. Each
//! mode opens `railstore serve`'s store (the embedded default: six devices, hybrid policy,
//! adaptive window) on simulated SSDs in real time in a fresh temporary folder, serves S3 on a
//! loopback port in this process, and drives it with `bench s3`'s load generator: `separated`
//! (separation on) and `mixed` (off) run the mixed workload, `read-only` runs only the reads
//! (separation on) with the share of the clients that reads. Beside the S3 latencies it reports
//! what the store counted: reads that reached a device outside the read window (a writer or a
//! guarding device), frames run partially separated, the window's size, and the device write
//! rate against what the writers absorb (sampled from the store's status twice a second).

use crate::s3_bench_cmd::{describe_store, InProcess, TempDir};
use anyhow::{bail, Context, Result};
use railstore_bench::harness::{machine_description, OutputArgs};
use railstore_bench::mixed::{DurabilityArg, MixedBenchArgs, Mode};
use railstore_bench::s3load::{self, LoadArgs, RunResult, Setup, Workload};
use railstore_store::{DeviceKind, Store, StoreConfig, WindowStatus};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Objects from 1 KiB to 8 MiB: every mechanism of the hybrid policy (rep3 up to 4 KiB,
/// pack3+3 up to 64 KiB, split3+3 above) takes part.
const SIZES: &str = "1KiB-8MiB";

/// Objects stored before each mode (about 560 MB at the mean size of `SIZES`, 933 KB; 56 MB
/// with `--quick`).
const OBJECTS: u64 = 600;
const OBJECTS_QUICK: u64 = 60;

/// What the store's status showed while one mode ran.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WindowSamples {
    /// Samples taken.
    pub samples: u64,
    /// Smallest and largest read window seen (colours).
    pub window_size_range: (usize, usize),
    /// Mean device write rate over the samples (every piece and journal record), MB/s.
    pub device_write_mb_per_s: f64,
    /// Mean of what the window's writers absorb, MB/s (samples with a measured rate only).
    pub write_bound_mb_per_s: Option<f64>,
}

/// One mode's result.
#[derive(Debug, Clone, Serialize)]
pub struct ServeModeResult {
    /// The mode.
    pub mode: Mode,
    /// The S3 run (latency per kind, rates, CPU).
    pub run: RunResult,
    /// Reads serving GETs that reached a device outside the read window (writers, guarding
    /// devices), counted by the store over the measured window (from the last status sample
    /// before it); `None` without separation.
    pub off_window_reads: Option<u64>,
    /// Reads by writes, deletes and background work outside the window.
    pub off_window_other_reads: Option<u64>,
    /// Frames whose writes needed more writers than separation leaves.
    pub partial_frames: Option<u64>,
    /// The window over the measured run (status samples taken in it).
    pub window: Option<WindowSamples>,
}

/// The whole report (`--json`, `--out`).
#[derive(Debug, Clone, Serialize)]
pub struct ServeReport {
    /// CPU model and count.
    pub machine: String,
    /// The store, the devices and the load, in words.
    pub description: String,
    /// Each mode in the order run.
    pub modes: Vec<ServeModeResult>,
    /// Separated GET p99.9 over read-only GET p99.9 (both measured).
    pub separated_get_p999_vs_read_only: Option<f64>,
    /// Separated PUT MB/s over mixed PUT MB/s (both measured).
    pub separated_put_vs_mixed: Option<f64>,
}

/// The settings every mode shares, from the options.
struct ServePlan {
    modes: Vec<Mode>,
    duration_s: f64,
    device_bytes: u64,
    buffer_bytes: Option<u64>,
    frame: Option<Duration>,
    guard: Duration,
    clients: usize,
    read_share: f64,
    size: String,
    objects: u64,
    seed: u64,
    /// The bench's `--json`, `--out` and `--quiet`.
    output: OutputArgs,
}

impl ServePlan {
    /// The read-only mode's clients: the share of the mix's clients that reads.
    fn read_only_clients(&self) -> usize {
        ((self.clients as f64 * self.read_share).round() as usize).max(1)
    }
}

fn plan_of(args: &MixedBenchArgs) -> Result<ServePlan> {
    if args.trace.is_some()
        || args.ks.is_some()
        || args.clock != railstore_bench::mixed::Clock::Virtual
    {
        bail!("--preset serve runs in real time on synthetic S3 load: --trace, --ks and --clock do not apply");
    }
    if args.durability != DurabilityArg::Journal || args.cold_cache {
        bail!(
            "--preset serve runs the store as `serve` does (journal durability, caches as the \
             store keeps them): --durability memory and --cold-cache do not apply"
        );
    }
    if args.frame.is_some_and(|f| !(f > 0.0 && f.is_finite())) {
        bail!("--frame must be a positive number of seconds");
    }
    if !(args.guard_ms >= 0.0 && args.guard_ms.is_finite()) {
        bail!("--guard-ms must be zero or more");
    }
    let q = args.quick;
    let read_share = args.read_share.unwrap_or(0.75);
    if !(0.0..=1.0).contains(&read_share) {
        bail!("--read-share must be between 0 and 1");
    }
    let clients = args.read_streams.unwrap_or(if q { 6 } else { 12 })
        + args.write_streams.unwrap_or(if q { 2 } else { 4 });
    // Room for the journal copies and the garbage of overwrites beside the data set.
    let device_bytes = args.device_mib.unwrap_or(if q { 1024 } else { 4096 }) << 20;
    let size = match args.request_bytes {
        Some(b) => b.to_string(),
        None => SIZES.to_string(),
    };
    // A fixed count keeps the preload through S3 short whatever the devices' size.
    let objects = if q { OBJECTS_QUICK } else { OBJECTS };
    Ok(ServePlan {
        modes: args
            .modes
            .clone()
            .unwrap_or_else(|| vec![Mode::Separated, Mode::Mixed, Mode::ReadOnly]),
        duration_s: args.duration.unwrap_or(if q { 3.0 } else { 20.0 }),
        device_bytes,
        buffer_bytes: args.buffer_mib.map(|m| m << 20),
        frame: args
            .frame
            .or(if q { Some(0.5) } else { None })
            .map(Duration::from_secs_f64),
        guard: Duration::from_secs_f64(args.guard_ms / 1000.0),
        clients,
        read_share,
        size,
        objects,
        seed: args.seed,
        output: args.output.clone(),
    })
}

fn config_of(plan: &ServePlan, mode: Mode, data_dir: &Path) -> StoreConfig {
    let mut cfg = StoreConfig {
        data_dir: data_dir.to_path_buf(),
        ..StoreConfig::default()
    };
    cfg.devices.kind = DeviceKind::Sim;
    cfg.devices.capacity_bytes = plan.device_bytes;
    if mode == Mode::Mixed {
        cfg.separation = None;
    } else if let Some(s) = cfg.separation.as_mut() {
        if let Some(f) = plan.frame {
            s.frame = f;
        }
        s.guard = plan.guard;
        if let Some(b) = plan.buffer_bytes {
            s.write_buffer_bytes_max = b;
        }
    }
    cfg
}

fn load_of(plan: &ServePlan, mode: Mode) -> LoadArgs {
    let read_only = mode == Mode::ReadOnly;
    LoadArgs {
        workload: vec![if read_only {
            Workload::Get
        } else {
            Workload::Mixed
        }],
        size: plan.size.clone(),
        clients: if read_only {
            plan.read_only_clients()
        } else {
            plan.clients
        },
        duration: Some(format!("{}s", plan.duration_s)),
        warmup: Some("1s".into()),
        objects: Some(plan.objects),
        get_ratio: plan.read_share,
        no_baseline: true,
        // The store and its folder go at the end of the mode.
        keep_objects: true,
        seed: plan.seed,
        // The load's lines go where the report's do (stderr when its JSON is on stdout); the
        // load writes no report of its own.
        output: OutputArgs {
            json: plan.output.json_on_stdout().then(|| "-".into()),
            quiet: plan.output.quiet,
            ..OutputArgs::default()
        },
        ..LoadArgs::default()
    }
}

/// One look at the window.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    size: usize,
    write_bytes_per_s: u64,
    write_bound_bytes_per_s: Option<u64>,
    off_window_reads: u64,
    off_window_other_reads: u64,
    partial_frames: u64,
}

impl Sample {
    fn of(w: &WindowStatus) -> Sample {
        Sample {
            at: Instant::now(),
            size: w.size,
            write_bytes_per_s: w.write_bytes_per_s,
            write_bound_bytes_per_s: w.write_bound_bytes_per_s,
            off_window_reads: w.off_window_reads,
            off_window_other_reads: w.off_window_other_reads,
            partial_frames: w.partial_frames,
        }
    }
}

/// Samples the window twice a second (until the task is aborted).
async fn sample_window(store: Store, samples: Arc<Mutex<Vec<Sample>>>) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        if let Some(w) = store.status().await.window {
            samples.lock().expect("not poisoned").push(Sample::of(&w));
        }
    }
}

async fn one_mode(plan: &ServePlan, mode: Mode, cfg: StoreConfig) -> Result<ServeModeResult> {
    let description = describe_store(&cfg);
    let store = Store::open(cfg).await.context("opening the store")?;
    let server = InProcess::start(&store, "us-east-1").await?;
    let setup = Setup {
        endpoint: server.endpoint.url.clone(),
        in_process: true,
        store: Some(description),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = tokio::spawn(sample_window(store.clone(), samples.clone()));
    let load = load_of(plan, mode);
    if !plan.output.quiet {
        plan.output.say(&format!("mode {}:", mode.name()));
    }
    let measured = s3load::measure(&load, setup, &server.endpoint, None).await;
    let ended = Instant::now();
    sampler.abort();
    let last = store.status().await.window.as_ref().map(Sample::of);
    let served = server.stop().await;
    let closed = store.shutdown().await;
    let report = measured?;
    served?;
    closed.context("shutting the store down")?;
    let run = report
        .runs
        .into_iter()
        .next()
        .context("the load generator reported no run")?;
    // The measured window: the run's last `elapsed_s` (the preload and warmup come before).
    let start = ended
        .checked_sub(Duration::from_secs_f64(run.elapsed_s))
        .unwrap_or(ended);
    let samples = samples.lock().expect("not poisoned").clone();
    let counts = last.map(|last| {
        let before = samples
            .iter()
            .rev()
            .find(|s| s.at <= start)
            .copied()
            .unwrap_or(Sample {
                off_window_reads: 0,
                off_window_other_reads: 0,
                partial_frames: 0,
                ..last
            });
        (
            last.off_window_reads - before.off_window_reads,
            last.off_window_other_reads - before.off_window_other_reads,
            last.partial_frames - before.partial_frames,
        )
    });
    let during: Vec<Sample> = samples.into_iter().filter(|s| s.at >= start).collect();
    Ok(ServeModeResult {
        mode,
        run,
        off_window_reads: counts.map(|c| c.0),
        off_window_other_reads: counts.map(|c| c.1),
        partial_frames: counts.map(|c| c.2),
        window: last.map(|_| window_of(&during)),
    })
}

fn window_of(samples: &[Sample]) -> WindowSamples {
    let n = samples.len().max(1) as f64;
    let bounds: Vec<u64> = samples
        .iter()
        .filter_map(|s| s.write_bound_bytes_per_s)
        .collect();
    WindowSamples {
        samples: samples.len() as u64,
        window_size_range: (
            samples.iter().map(|s| s.size).min().unwrap_or(0),
            samples.iter().map(|s| s.size).max().unwrap_or(0),
        ),
        device_write_mb_per_s: samples
            .iter()
            .map(|s| s.write_bytes_per_s as f64)
            .sum::<f64>()
            / n
            / 1e6,
        write_bound_mb_per_s: (!bounds.is_empty())
            .then(|| bounds.iter().map(|&b| b as f64).sum::<f64>() / bounds.len() as f64 / 1e6),
    }
}

fn kind<'a>(r: &'a RunResult, name: &str) -> Option<&'a s3load::KindResult> {
    r.kinds.iter().find(|k| k.kind == name && k.ops > 0)
}

fn table(report: &ServeReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9}",
        "mode",
        "GET p50",
        "GET p99",
        "p99.9 ms",
        "GET MB/s",
        "PUT MB/s",
        "PUT p99",
        "off-win",
        "partial",
        "window",
        "dev W MB/s"
    );
    for m in &report.modes {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.2}", v / 1000.0));
        let get = kind(&m.run, "get");
        let put = kind(&m.run, "put");
        let lat = |k: Option<&s3load::KindResult>, f: fn(&s3load::Latency) -> f64| {
            k.and_then(|k| k.latency.as_ref()).map(f)
        };
        let _ = writeln!(
            s,
            "{:<10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9}",
            m.mode.name(),
            ms(lat(get, |l| l.p50_us)),
            ms(lat(get, |l| l.p99_us)),
            ms(lat(get, |l| l.p999_us)),
            get.map_or("-".into(), |k| format!("{:.1}", k.mb_per_s)),
            put.map_or("-".into(), |k| format!("{:.1}", k.mb_per_s)),
            ms(lat(put, |l| l.p99_us)),
            m.off_window_reads.map_or("-".into(), |n| n.to_string()),
            m.partial_frames.map_or("-".into(), |n| n.to_string()),
            m.window.as_ref().map_or("-".into(), |w| format!(
                "{}-{}",
                w.window_size_range.0, w.window_size_range.1
            )),
            m.window.as_ref().map_or("-".into(), |w| format!(
                "{:.1}{}",
                w.device_write_mb_per_s,
                w.write_bound_mb_per_s
                    .map_or(String::new(), |b| format!(" / {b:.0}"))
            )),
        );
    }
    if let Some(r) = report.separated_get_p999_vs_read_only {
        let _ = writeln!(s, "separated GET p99.9 = {r:.2}x read-only");
    }
    if let Some(r) = report.separated_put_vs_mixed {
        let _ = writeln!(s, "separated PUT rate = {:.0} % of mixed", 100.0 * r);
    }
    s
}

fn ratio(
    report: &[ServeModeResult],
    (a, b): (Mode, Mode),
    what: impl Fn(&RunResult) -> Option<f64>,
) -> Option<f64> {
    let of = |m: Mode| {
        report
            .iter()
            .find(|r| r.mode == m)
            .and_then(|r| what(&r.run))
    };
    match (of(a), of(b)) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    }
}

/// Runs `bench mixed --preset serve`.
pub fn run(args: &MixedBenchArgs) -> Result<()> {
    let plan = plan_of(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let parent = std::env::temp_dir();
    let mut modes = Vec::new();
    for &mode in &plan.modes {
        let dir = TempDir::new(&parent)?;
        let cfg = config_of(&plan, mode, &dir.0);
        let result = rt.block_on(one_mode(&plan, mode, cfg));
        drop(dir);
        modes.push(result.with_context(|| format!("mode {}", mode.name()))?);
    }
    drop(rt);
    let get_p999 = |r: &RunResult| {
        kind(r, "get")
            .and_then(|k| k.latency.as_ref())
            .map(|l| l.p999_us)
    };
    let put_rate = |r: &RunResult| kind(r, "put").map(|k| k.mb_per_s);
    let report = ServeReport {
        machine: machine_description(),
        description: format!(
            "the embedded default store (6 simulated SSDs of {} MiB in real time, hybrid policy: \
             rep3 <= 4 KiB, pack3+3 <= 64 KiB, split3+3 above; adaptive window) behind S3 on \
             loopback; {} objects of {}, {} clients ({:.0} % GETs) for {} s after 1 s warmup; \
             read-only: {} clients reading; window figures over the measured seconds; seed {}",
            plan.device_bytes >> 20,
            plan.objects,
            plan.size,
            plan.clients,
            100.0 * plan.read_share,
            plan.duration_s,
            plan.read_only_clients(),
            plan.seed
        ),
        separated_get_p999_vs_read_only: ratio(&modes, (Mode::Separated, Mode::ReadOnly), get_p999),
        separated_put_vs_mixed: ratio(&modes, (Mode::Separated, Mode::Mixed), put_rate),
        modes,
    };
    let text = table(&report);
    plan.output.say(&format!(
        "{}\n{}",
        report.description,
        text.strip_suffix('\n').unwrap_or(&text)
    ));
    let json = serde_json::to_string_pretty(&report)?;
    let summary = format!(
        "# bench mixed --preset serve\n\n{}\n\n{}\n\n```\n{text}```\n",
        report.machine, report.description
    );
    plan.output.write(
        &json,
        &[("results.json", json.clone()), ("summary.md", summary)],
    )?;
    Ok(())
}
