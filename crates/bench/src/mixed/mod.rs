//! `railstore bench mixed`: reads and writes at once on an array of simulated SSDs, with
//! read/write separation on (`separated`), off (`mixed`, the same code path with every device
//! serving reads and taking writes) and without writes (`read-only`) — the experiments of Flash
//! on Rails §4.4 (two drives, replication) and eRails §7 (k = m = 3 and 5, a read stream and a
//! write stream dispatched 0.75 : 0.25), plus the grouped layout of eRails §6.2 and eRails
//! §6.1's read throughput against k with and without decoding (`erails-decode`).
//!
//! Every mode runs on fresh devices built the same way from the same seed: each simulated SSD is
//! preconditioned with filler (a fill, then a pass of random overwrites, so garbage collection is
//! in steady state), the data set is loaded through the reliability manager, the array is
//! wrapped by `rails`, every key is read once (the manager's metadata cache), and the measured
//! phase starts on a frame boundary. Time is virtual by default: the simulated SSDs' delays run on
//! a paused tokio clock, so CPU work (erasure coding, copies) costs no simulated time — except in
//! `erails-decode`, where each read that decodes holds one of `--decode-threads` modelled cores
//! for the decode's CPU time, measured on this machine with the manager's codec before the run.

pub use crate::trace::TraceFormat;
use anyhow::{ensure, Context, Result};
use serde::Serialize;
use std::path::PathBuf;

use crate::harness::OutputArgs;
use crate::plot::human_bytes;

mod decode;
mod devices;
mod output;
mod plan;
mod report;
mod run;
mod trace;
mod workload;

use decode::*;
use devices::*;
use output::*;
use plan::*;
use report::*;
use run::*;
use trace::*;
use workload::*;

// ---------------------------------------------------------------------------------------------
// Options

/// The experiment to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Preset {
    /// Flash on Rails §4.4: 2 devices, 2-way replication, four streams (two reading, two
    /// writing) of 256 KiB requests as fast as possible.
    #[value(name = "rails-2")]
    #[serde(rename = "rails-2")]
    Rails2,
    /// eRails §7: 6 devices, RS split 3+3, 128 KiB requests, reads and writes dispatched
    /// 0.75 : 0.25.
    #[value(name = "erails-k3")]
    #[serde(rename = "erails-k3")]
    ErailsK3,
    /// eRails §7: 10 devices, RS split 5+5, otherwise as erails-k3.
    #[value(name = "erails-k5")]
    #[serde(rename = "erails-k5")]
    ErailsK5,
    /// eRails §6.2: 12 devices in 6 colour classes of 2, redundancy groups of 6 (4 rounds),
    /// RS split 3+3, otherwise as erails-k3 with twice the streams.
    #[value(name = "groups-12")]
    #[serde(rename = "groups-12")]
    Groups12,
    /// eRails §6.1: read-only, 2k devices with RS split k+k for each k of `--ks`, 128 KiB reads
    /// served by the k window devices; reads whose data shards all sit in the window (no
    /// decoding) against reads that need parity (decoding, its CPU time charged).
    #[value(name = "erails-decode")]
    #[serde(rename = "erails-decode")]
    ErailsDecode,
    /// The product: `railstore serve`'s store (embedded default, hybrid policy) on simulated
    /// SSDs in real time, driven through S3 by `bench s3`'s load generator with objects of
    /// 1 KiB to 8 MiB; the binary runs it (it starts the S3 endpoint).
    #[value(name = "serve")]
    #[serde(rename = "serve")]
    Serve,
}

impl Preset {
    /// The preset's name as typed.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Rails2 => "rails-2",
            Preset::ErailsK3 => "erails-k3",
            Preset::ErailsK5 => "erails-k5",
            Preset::Groups12 => "groups-12",
            Preset::ErailsDecode => "erails-decode",
            Preset::Serve => "serve",
        }
    }
}

/// What a buffered write waits for before it is acknowledged (`RailsConfig::durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityArg {
    /// A journal record on a writer-role device (every buffered piece is written twice).
    Journal,
    /// Memory only: enough where the pieces on writers rebuild every object (m >= k).
    Memory,
}

/// Which clock drives the simulated SSDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// A paused tokio clock: simulated time advances when every task waits (fast, repeatable;
    /// CPU time is not charged).
    Virtual,
    /// Wall-clock time: CPU time counts, but simulated delays under 1 ms round up to tokio's
    /// 1 ms timer tick.
    Real,
}

/// One configuration of the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Mode {
    /// Read/write separation on.
    #[value(name = "separated")]
    #[serde(rename = "separated")]
    Separated,
    /// Separation off: every device reads and writes (same code path).
    #[value(name = "mixed")]
    #[serde(rename = "mixed")]
    Mixed,
    /// Only the reads, with the separated read plan.
    #[value(name = "read-only")]
    #[serde(rename = "read-only")]
    ReadOnly,
}

impl Mode {
    /// The mode's name as typed.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Separated => "separated",
            Mode::Mixed => "mixed",
            Mode::ReadOnly => "read-only",
        }
    }
}

/// Which reads an `erails-decode` run issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DecodeVariant {
    /// Keys whose k data shards all sit on the window's colours now: no decoding.
    #[serde(rename = "no-decode")]
    NoDecode,
    /// Keys with at least one data shard outside the window: every read decodes.
    #[serde(rename = "decode")]
    Decode,
}

impl DecodeVariant {
    /// The variant's name as reported.
    pub fn name(self) -> &'static str {
        match self {
            DecodeVariant::NoDecode => "no-decode",
            DecodeVariant::Decode => "decode",
        }
    }
}

/// Options of `railstore bench mixed`.
#[derive(Debug, Clone, clap::Args)]
pub struct MixedBenchArgs {
    /// The experiment.
    #[arg(long, value_enum)]
    pub preset: Preset,
    /// Modes to run, in order (default separated,mixed,read-only; erails-decode runs only
    /// read-only).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub modes: Option<Vec<Mode>>,
    /// Clock of the simulated SSDs.
    #[arg(long, value_enum, default_value = "virtual")]
    pub clock: Clock,
    /// Simulated seconds measured per mode (default 20, erails-decode 4; 3 and 1 with --quick).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Frame length T in simulated seconds: the read window moves one colour per frame
    /// (default 2; 0.5 with --quick).
    #[arg(long)]
    pub frame: Option<f64>,
    /// Milliseconds before joining the window that a device stops writing.
    #[arg(long, default_value_t = 50.0)]
    pub guard_ms: f64,
    /// What a buffered write waits for (docs/rails.md, "Durability").
    #[arg(long, value_enum, default_value_t = DurabilityArg::Journal)]
    pub durability: DurabilityArg,
    /// Logical MiB of each simulated SSD (default 1024; 64 with --quick; the serve preset:
    /// 4096 and 1024, room for journal copies and overwrites' garbage).
    #[arg(long)]
    pub device_mib: Option<u64>,
    /// Write buffer of each device under separation, MiB (default 128; 8 with --quick).
    #[arg(long)]
    pub buffer_mib: Option<u64>,
    /// Fraction of each SSD's logical space filled with filler before the data set (4 KiB
    /// values, filled, then overwritten twice at random, so garbage collection is active; the
    /// SSD model sees every byte, memory keeps only the lengths).
    #[arg(long, default_value_t = 0.45)]
    pub filler_fraction: f64,
    /// Fraction of each SSD's logical space the data set takes (the serve preset stores 600
    /// objects, 60 with --quick).
    #[arg(long, default_value_t = 0.4)]
    pub data_fraction: f64,
    /// Fraction of the data set's objects the writes overwrite (in passes, each a fresh
    /// shuffle); reads address the others, so no read is answered from a write buffer (the
    /// worst case of Flash on Rails §4.4). With a write set of at least twice what one device's
    /// buffer holds, no buffered write is replaced before its flush.
    #[arg(long, default_value_t = 0.75)]
    pub write_set: f64,
    /// Request (object) size in bytes; default from the preset (256 KiB or 128 KiB).
    #[arg(long)]
    pub request_bytes: Option<usize>,
    /// Read requests in flight (closed loop); default from the preset.
    #[arg(long)]
    pub read_streams: Option<usize>,
    /// erails-decode: the values of k (m = k, 2k devices; default 2,3,4,5,6; 2,3 with --quick).
    #[arg(long, value_delimiter = ',')]
    pub ks: Option<Vec<usize>>,
    /// erails-decode in virtual time: cores that decode (each decoding read holds one for the
    /// measured CPU time of its decode); 0 charges nothing, a control that shows what the two
    /// variants' key sets alone give.
    #[arg(long, default_value_t = 1)]
    pub decode_threads: usize,
    /// Write requests in flight (closed loop); default from the preset.
    #[arg(long)]
    pub write_streams: Option<usize>,
    /// Share of dispatches that are reads (0.75: three reads per write); 0 or 1 dispatches both
    /// streams as fast as they go. Default from the preset.
    #[arg(long)]
    pub read_share: Option<f64>,
    /// Random seed (the same for every mode).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip reading every key once before measuring: the manager's metadata cache starts
    /// empty, and a miss reads the key's primary device whatever its role.
    #[arg(long)]
    pub cold_cache: bool,
    /// Replay this block trace (see /work/shared/traces/README.md for the formats; `.gz` is
    /// decompressed with `gzip -dc`) instead of the synthetic streams.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Trace format; by default guessed from the file's first line.
    #[arg(long, value_enum)]
    pub trace_format: Option<TraceFormat>,
    /// Bytes per key when replaying a trace: offsets map to keys of this many bytes (default
    /// 64 KiB); a write stores its blocks whole, a read reads its byte range of them.
    #[arg(long)]
    pub trace_block: Option<usize>,
    /// Trace time is divided by this (2 replays twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub trace_speed: f64,
    /// Most trace reads outstanding, and separately most writes (arrivals beyond wait, their
    /// latency counting): writes held back by separation never hold up reads.
    #[arg(long, default_value_t = 256)]
    pub trace_qd: usize,
    /// Tiny devices and durations (tests, smoke runs).
    #[arg(long)]
    pub quick: bool,
    /// Where the report goes (`--out`: results.json, the CSV series, summary.md, the plots);
    /// `--quiet` also drops the per-mode lines.
    #[command(flatten)]
    pub output: OutputArgs,
}

impl MixedBenchArgs {
    /// The defaults for `preset`, as the command line would give them.
    pub fn new(preset: Preset) -> MixedBenchArgs {
        MixedBenchArgs {
            preset,
            modes: None,
            clock: Clock::Virtual,
            duration: None,
            frame: None,
            guard_ms: 50.0,
            durability: DurabilityArg::Journal,
            device_mib: None,
            buffer_mib: None,
            filler_fraction: 0.45,
            data_fraction: 0.4,
            write_set: 0.75,
            request_bytes: None,
            read_streams: None,
            ks: None,
            decode_threads: 1,
            write_streams: None,
            read_share: None,
            seed: 1,
            cold_cache: false,
            trace: None,
            trace_format: None,
            trace_block: None,
            trace_speed: 1.0,
            trace_qd: 256,
            quick: false,
            output: OutputArgs {
                quiet: true,
                ..OutputArgs::default()
            },
        }
    }
}

/// Runs the benchmark and returns its report, printing one line per mode unless quiet.
pub fn measure_mixed(args: &MixedBenchArgs) -> Result<MixedReport> {
    if args.preset == Preset::ErailsDecode {
        return measure_decode(args);
    }
    let plan = plan_of(args, 0)?;
    let modes = args
        .modes
        .clone()
        .unwrap_or_else(|| vec![Mode::Separated, Mode::Mixed, Mode::ReadOnly]);
    ensure!(!modes.is_empty(), "--modes names nothing to run");
    let output = &args.output;
    if !output.quiet {
        output.say(&plan.describe());
    }
    let w = plan.runtime()?.block_on(measure_w(&plan))?;
    let bound = plan.write_bound_bps(w);
    let (k, m) = plan.readers_writers();
    if !output.quiet {
        output.say(&format!(
            "w = {:.0} MB/s (one SSD, sequential {} writes, preconditioned); write bound k m w / \
             (k + m) = {:.0} MB/s{}; buffers allow {:.0} MB/s",
            w / 1e6,
            human_bytes(plan.piece_device_bytes),
            bound / 1e6,
            if plan.devices > plan.colours {
                format!(" (x{} colour-class members)", plan.devices / plan.colours)
            } else {
                String::new()
            },
            plan.buffer_bound_bps() / 1e6
        ));
        output.say(&table_header());
    }
    let mut runs = Vec::new();
    for &mode in &modes {
        let rt = plan.runtime()?;
        let mut r = rt
            .block_on(run_mode(&plan, mode, output.quiet))
            .with_context(|| format!("{} {}", plan.preset.name(), mode.name()))?;
        drop(rt);
        r.write_pct_of_bound = if bound > 0.0 {
            r.write_mbps * 1e6 / bound * 100.0
        } else {
            0.0
        };
        if !output.quiet {
            output.say(&table_line(&r));
        }
        runs.push(r);
    }
    Ok(MixedReport {
        preset: plan.preset,
        mechanism: plan.mechanism.to_string(),
        devices: plan.devices,
        colours: plan.colours,
        readers: k,
        writers: m,
        request_bytes: plan.request_bytes,
        objects: plan.objects,
        read_streams: plan.read_streams,
        write_streams: plan.write_streams,
        read_share: plan.read_share,
        trace: plan.trace.as_ref().map(|t| t.path.display().to_string()),
        clock: plan.clock,
        cpu_time_charged: plan.clock == Clock::Real,
        duration_s: plan.duration_s,
        frame_s: plan.frame_s,
        guard_ms: plan.guard_s * 1000.0,
        durability: plan.durability,
        device_bytes: plan.device_bytes,
        buffer_bytes: plan.buffer_bytes,
        seed: plan.seed,
        w_mbps: w / 1e6,
        write_bound_mbps: bound / 1e6,
        buffer_bound_mbps: plan.buffer_bound_bps() / 1e6,
        decode_threads: None,
        decode_charge: None,
        decode_calibration: None,
        runs,
        description: plan.describe(),
    })
}

/// Runs `railstore bench mixed`: prints the table, writes `--json` and `--out`.
pub fn run(args: &MixedBenchArgs) -> Result<()> {
    let output = &args.output;
    let report = measure_mixed(args)?;
    let json = serde_json::to_string_pretty(&report)?;
    let mut files = vec![
        ("results.json", json.clone()),
        ("series.csv", series_csv(&report)),
        ("buffer.csv", buffer_csv(&report)),
        ("iops_cdf.csv", iops_cdf_csv(&report)),
        ("summary.md", summary(&report)),
    ];
    if report.preset == Preset::ErailsDecode {
        files.push(("decode.csv", decode_csv(&report)));
    }
    let written = output.write(&json, &files)?;
    let Some(out) = &output.out else {
        if !output.quiet {
            output.say(
                "(--out DIR writes the per-second series, buffer occupancy, IOPS CDF and plots)",
            );
        }
        return Ok(());
    };
    let mut written = output.under_out(written);
    if !output.no_plots {
        match plots(&report, out) {
            Ok(files) => written.extend(files),
            Err(e) => output.say(&format!("plots skipped: {e:#}")),
        }
    }
    if !output.quiet {
        output.say("wrote:");
        for p in written {
            output.say(&format!("  {}", p.display()));
        }
    }
    Ok(())
}
