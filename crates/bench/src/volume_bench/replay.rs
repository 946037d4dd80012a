//! `railstore bench volume-trace`: a block trace replayed onto a volume at its offsets, open
//! loop (each request sent at its arrival time, its latency counted from then), on a fresh
//! store per run: with read/write separation and without, so the read tail under writes can
//! be compared on the same requests. Offsets are folded into the volume (device d's offset o
//! goes to `(d * 2^40 + o) mod (volume - request)`, rounded down to 512 bytes) and the volume
//! is filled first, so reads find data. With `--record`, the export writes what it received
//! as a trace in the FlashNet/Heimdall format, which this command replays in turn.

use super::driver::{self, Amount, Latencies, Pipeline};
use super::study::Pattern;
use super::{device_bytes, Exported};
use crate::harness::{machine_description, OutputArgs};
use crate::plot::{human_bytes, parse_bytes, Chart, Series, XAxis};
use crate::progress::bar;
use crate::trace::{read_requests, TraceFormat};
use anyhow::{bail, ensure, Context, Result};
use hdrhistogram::Histogram;
use railstore_redundancy::Mechanism;
use railstore_store::{Store, StoreConfig};
use railstore_volume::VolumeSpec;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// Read/write separation in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Separation {
    /// As the configuration sets it (the embedded default: 3 of 6 colours read).
    On,
    /// The same store without it.
    Off,
}

impl Separation {
    fn name(self) -> &'static str {
        match self {
            Separation::On => "on",
            Separation::Off => "off",
        }
    }
}

/// Options of `railstore bench volume-trace` (the binary adds where the store comes from).
#[derive(Debug, Clone, clap::Args)]
pub struct VolumeTraceArgs {
    /// The trace (`../shared/traces/...`, gzip'ed or not).
    #[arg(long)]
    pub trace: PathBuf,
    /// Its format; guessed from the first line when not given.
    #[arg(long, value_enum)]
    pub trace_format: Option<TraceFormat>,
    /// Replay speed: arrival times are divided by it.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Stop after this many seconds of replay (default: the whole trace once).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Requests in flight at most; a request that arrives when all are busy waits, and its
    /// wait counts in its latency.
    #[arg(long, default_value_t = 32)]
    pub qd: usize,
    /// Runs, a comma list, each on a fresh store.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on,off")]
    pub separation: Vec<Separation>,
    /// The volume's mechanism.
    #[arg(long, default_value = "split3+3")]
    pub mechanism: String,
    /// The volume's object size. Trace requests are 512 B to about 1 MiB; with 4 MiB objects
    /// every small write of a split object rewrites 4 MiB.
    #[arg(long, default_value = "64KiB")]
    pub object_size: String,
    /// The volume's size (filled before the replay). Default 1GiB (256MiB with `--quick`).
    #[arg(long)]
    pub volume_size: Option<String>,
    /// Record the requests the export received, as a trace (FlashNet/Heimdall format): to
    /// this file with one run, to FILE.on and FILE.off with two.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// A short run: small volume, at most 10 s of replay.
    #[arg(long)]
    pub quick: bool,
    /// Seed of the written data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// One request as replayed.
#[derive(Debug, Clone, Copy)]
struct Replayed {
    at: Duration,
    offset: u64,
    len: u32,
    write: bool,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub separation: Separation,
    pub seconds: f64,
    pub reads: Side,
    pub writes: Side,
    /// Device bytes read per byte the client read, and written per byte it wrote.
    pub device_read_per_byte: f64,
    pub device_write_per_byte: f64,
    pub errors: u64,
}

/// Latencies of one kind of request, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub count: u64,
    pub bytes: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
}

impl Side {
    fn of(h: &Histogram<u64>, bytes: u64) -> Side {
        let q = |p: f64| h.value_at_quantile(p) as f64 / 1e3;
        Side {
            count: h.len(),
            bytes,
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            p999_us: q(0.999),
            p9999_us: q(0.9999),
            max_us: h.max() as f64 / 1e3,
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    pub command: String,
    pub machine: String,
    pub trace: String,
    pub requests: usize,
    pub read_pct: f64,
    pub span_s: f64,
    pub speed: f64,
    pub qd: usize,
    pub mechanism: String,
    pub object_bytes: u64,
    pub volume_bytes: u64,
    pub runs: Vec<Run>,
}

/// Runs the replays, each on a fresh store made from `cfg` in a folder of its own under
/// `cfg.data_dir` (which must be empty and is the caller's to remove).
pub async fn run(args: &VolumeTraceArgs, cfg: StoreConfig) -> Result<TraceReport> {
    ensure!(args.speed > 0.0, "--speed must be positive");
    ensure!((1..=1024).contains(&args.qd), "--qd: 1 to 1024");
    ensure!(!args.separation.is_empty(), "--separation names no run");
    let mechanism = Mechanism::parse(&args.mechanism)
        .with_context(|| format!("--mechanism {:?}", args.mechanism))?;
    let object_bytes = parse_bytes(&args.object_size)?;
    let volume_bytes = match &args.volume_size {
        Some(s) => parse_bytes(s)?,
        None if args.quick => 256 << 20,
        None => 1 << 30,
    };
    ensure!(
        volume_bytes >= (64 << 20) && volume_bytes % object_bytes.max(512) == 0,
        "--volume-size: at least 64 MiB and a multiple of the object size"
    );
    if args.separation.contains(&Separation::On) && cfg.separation.is_none() {
        bail!("the configuration has no read/write separation to turn on ([separation])");
    }
    let duration = match (args.duration, args.quick) {
        (Some(d), _) => Some(d),
        (None, true) => Some(10.0),
        (None, false) => None,
    };
    let trace = read_requests(&args.trace, args.trace_format)?;
    let t0 = trace[0].at_ns;
    let span = volume_bytes;
    let requests: Vec<Replayed> = trace
        .iter()
        .map(|r| {
            let len = r.len.clamp(512, 32 << 20).next_multiple_of(512);
            let len = len.min(span);
            let folded = (r.device << 40).wrapping_add(r.offset) % (span - len + 1);
            Replayed {
                at: Duration::from_secs_f64((r.at_ns - t0).max(0.0) / 1e9 / args.speed),
                offset: folded / 512 * 512,
                len: len as u32,
                write: r.write,
            }
        })
        .take_while(|r| duration.is_none_or(|d| r.at.as_secs_f64() <= d))
        .collect();
    ensure!(
        !requests.is_empty(),
        "no request of the trace falls in the replay"
    );
    let reads = requests.iter().filter(|r| !r.write).count();
    args.output.say(&format!(
        "volume-trace: {} requests of {} ({:.1} % reads) over {:.1} s at speed {}, qd {}, a \
         {} volume of {} in {} objects",
        requests.len(),
        args.trace.display(),
        100.0 * reads as f64 / requests.len() as f64,
        requests.last().map_or(0.0, |r| r.at.as_secs_f64()),
        args.speed,
        args.qd,
        args.mechanism,
        human_bytes(volume_bytes),
        human_bytes(object_bytes)
    ));
    let mut runs = Vec::new();
    for &sep in &args.separation {
        let mut c = cfg.clone();
        c.data_dir = cfg.data_dir.join(sep.name());
        if sep == Separation::Off {
            c.separation = None;
        }
        let record = args.record.as_ref().map(|p| {
            if args.separation.len() == 1 {
                p.clone()
            } else {
                let mut s = p.clone().into_os_string();
                s.push(format!(".{}", sep.name()));
                PathBuf::from(s)
            }
        });
        let store = Store::open(c).await.context("opening the store")?;
        let result = replay_once(
            args,
            &store,
            sep,
            mechanism,
            object_bytes,
            volume_bytes,
            &requests,
            record,
        )
        .await;
        let shut = store.shutdown().await;
        let r = result?;
        shut.context("shutting the store down")?;
        args.output.say(&format!(
            "separation {:>3}: reads p50 {:.0} us p99 {:.0} us p99.9 {:.0} us max {:.0} us; \
             writes p50 {:.0} us p99 {:.0} us; device r {:.2} w {:.2} per byte",
            sep.name(),
            r.reads.p50_us,
            r.reads.p99_us,
            r.reads.p999_us,
            r.reads.max_us,
            r.writes.p50_us,
            r.writes.p99_us,
            r.device_read_per_byte,
            r.device_write_per_byte
        ));
        runs.push(r);
    }
    Ok(TraceReport {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: machine_description(),
        trace: args.trace.display().to_string(),
        requests: requests.len(),
        read_pct: 100.0 * reads as f64 / requests.len() as f64,
        span_s: requests.last().map_or(0.0, |r| r.at.as_secs_f64()),
        speed: args.speed,
        qd: args.qd,
        mechanism: args.mechanism.clone(),
        object_bytes,
        volume_bytes,
        runs,
    })
}

#[allow(clippy::too_many_arguments)]
async fn replay_once(
    args: &VolumeTraceArgs,
    store: &Store,
    sep: Separation,
    mechanism: Mechanism,
    object_bytes: u64,
    volume_bytes: u64,
    requests: &[Replayed],
    record: Option<PathBuf>,
) -> Result<Run> {
    let export = Exported::start(store, None).await?;
    let name = "trace";
    export
        .volumes
        .create(VolumeSpec {
            name: name.into(),
            size: volume_bytes,
            object_bytes,
            mechanism: Some(mechanism),
        })
        .await?;
    let fill = object_bytes.max(1 << 20);
    driver::own(
        export.addr,
        name,
        Pattern::Write,
        fill,
        8,
        Amount::Ops(volume_bytes / fill),
        volume_bytes,
        args.seed,
    )
    .await
    .context("filling the volume")?;
    store.flush().await?;
    export.stop().await?;
    // The replay's own export, so a recording holds the replay alone.
    let export = Exported::start(store, record.as_deref()).await?;
    let mut payload = vec![0u8; 32 << 20];
    ChaCha8Rng::seed_from_u64(args.seed ^ 0x0074_7261_6365).fill_bytes(&mut payload);
    let progress = bar(
        args.output.quiet,
        Some(requests.len() as u64),
        &format!("separation {}", sep.name()),
    );
    let dev0 = device_bytes(store).await;
    let mut pipe = Pipeline::connect(export.addr, name, args.qd).await?;
    let start = tokio::time::Instant::now();
    for r in requests {
        let due = start + r.at;
        tokio::time::sleep_until(due).await;
        let data = r.write.then(|| &payload[..r.len as usize]);
        pipe.submit(r.offset, r.len, data, due.into_std()).await?;
        progress.inc(1);
    }
    let lat: Latencies = pipe.finish().await?;
    let seconds = start.elapsed().as_secs_f64();
    progress.finish_and_clear();
    let dev1 = device_bytes(store).await;
    export.stop().await?;
    let bytes = |write: bool| {
        requests
            .iter()
            .filter(|r| r.write == write)
            .map(|r| r.len as u64)
            .sum::<u64>()
    };
    let (read_bytes, write_bytes) = (bytes(false), bytes(true));
    Ok(Run {
        separation: sep,
        seconds,
        reads: Side::of(&lat.reads, read_bytes),
        writes: Side::of(&lat.writes, write_bytes),
        device_read_per_byte: dev1.0.saturating_sub(dev0.0) as f64 / read_bytes.max(1) as f64,
        device_write_per_byte: dev1.1.saturating_sub(dev0.1) as f64 / write_bytes.max(1) as f64,
        errors: lat.errors,
    })
}

impl TraceReport {
    /// Writes `--json` and `--out` (results.json, results.csv, summary.md, the plot).
    pub fn write(&self, output: &OutputArgs) -> Result<()> {
        let json = serde_json::to_string_pretty(self)?;
        let files = [
            ("results.json", json.clone()),
            ("results.csv", self.csv()),
            ("summary.md", self.summary()),
        ];
        let mut written = output.write(&json, &files)?.len();
        if let (Some(out), false) = (&output.out, output.no_plots) {
            let labels = ["p50", "p90", "p99", "p99.9", "p99.99", "max"];
            let series = self
                .runs
                .iter()
                .map(|r| Series {
                    name: format!("separation {}", r.separation.name()),
                    points: side_values(&r.reads)
                        .into_iter()
                        .enumerate()
                        .map(|(i, v)| (i as f64, v))
                        .collect(),
                })
                .collect();
            let chart = Chart {
                title: "volume trace replay: read latency",
                x_label: "percentile",
                y_label: "read latency (us)",
                x_axis: XAxis::Categories(labels.iter().map(|s| s.to_string()).collect()),
                series,
            };
            match chart.write(out, "read-latency") {
                Ok(p) => written += p.len(),
                Err(e) => output.say(&format!("plot skipped: {e:#}")),
            }
        }
        if let (Some(out), true) = (&output.out, written > 0) {
            output.say(&format!("wrote {written} files to {}", out.display()));
        }
        ensure!(
            self.runs.iter().all(|r| r.errors == 0),
            "requests failed: {:?}",
            self.runs.iter().map(|r| r.errors).collect::<Vec<_>>()
        );
        Ok(())
    }

    fn csv(&self) -> String {
        let mut s = String::from(
            "separation,kind,count,bytes,p50_us,p90_us,p99_us,p999_us,p9999_us,max_us,\
             device_per_byte,seconds,errors\n",
        );
        for r in &self.runs {
            for (kind, side, dev) in [
                ("read", &r.reads, r.device_read_per_byte),
                ("write", &r.writes, r.device_write_per_byte),
            ] {
                let v = side_values(side);
                let _ = writeln!(
                    s,
                    "{},{kind},{},{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{dev:.3},{:.3},{}",
                    r.separation.name(),
                    side.count,
                    side.bytes,
                    v[0],
                    v[1],
                    v[2],
                    v[3],
                    v[4],
                    v[5],
                    r.seconds,
                    r.errors
                );
            }
        }
        s
    }

    fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "## volume-trace results\n");
        let _ = writeln!(s, "- command: `{}`", self.command);
        let _ = writeln!(s, "- machine: {}", self.machine);
        let _ = writeln!(
            s,
            "- trace: {} ({} requests, {:.1} % reads, {:.1} s at speed {}), qd {}",
            self.trace, self.requests, self.read_pct, self.span_s, self.speed, self.qd
        );
        let _ = writeln!(
            s,
            "- volume: {} of {} in {} objects, filled first\n",
            self.mechanism,
            human_bytes(self.volume_bytes),
            human_bytes(self.object_bytes)
        );
        let _ = writeln!(
            s,
            "| separation | kind | count | p50 us | p90 us | p99 us | p99.9 us | p99.99 us | \
             max us | device bytes / byte |"
        );
        let _ = writeln!(
            s,
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for r in &self.runs {
            for (kind, side, dev) in [
                ("read", &r.reads, r.device_read_per_byte),
                ("write", &r.writes, r.device_write_per_byte),
            ] {
                let v = side_values(side);
                let _ = writeln!(
                    s,
                    "| {} | {kind} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {dev:.2} |",
                    r.separation.name(),
                    side.count,
                    v[0],
                    v[1],
                    v[2],
                    v[3],
                    v[4],
                    v[5]
                );
            }
        }
        s
    }
}

fn side_values(s: &Side) -> [f64; 6] {
    [
        s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.p9999_us, s.max_us,
    ]
}
