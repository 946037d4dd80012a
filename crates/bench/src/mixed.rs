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

use crate::progress::bar;
pub use crate::trace::TraceFormat;
use anyhow::{bail, ensure, Context, Result};
use async_trait::async_trait;
use futures_util::future::join_all;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use railstore_device::sim::{precondition, virtual_time_runtime, VIRTUAL_TIME_DILATION};
use railstore_device::{
    CompactStats, Device, DeviceInfo, IterBatch, IterRequest, Limits, MemConfig, MemDevice,
    ReadRange, Retrieved, SimDevice, SimStats, StoreMode,
};
use railstore_placement::{Layout, LayoutSpec};
use railstore_rails::{
    write_bound, DeviceCounters, Durability, Rails, RailsConfig, Role, ScheduleConfig,
};
use railstore_redundancy::{Manager, ManagerConfig, Mechanism, Policy};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use crate::device::sim_config;
use crate::plot::{human_bytes, Chart, Series, XAxis};
use railstore_store::array::{assemble, pass_through};

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
    /// Logical MiB of each simulated SSD (default 1024; 64 with --quick).
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
    /// Fraction of each SSD's logical space the data set takes.
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
    /// Write the report as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Folder for results.json, the CSV series, summary.md and the plots.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Tiny devices and durations (tests, smoke runs).
    #[arg(long)]
    pub quick: bool,
    /// No progress bars or per-mode lines.
    #[arg(long)]
    pub quiet: bool,
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
            json: None,
            out: None,
            no_plots: false,
            quick: false,
            quiet: true,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The plan

/// Everything one invocation does, derived from the options.
#[derive(Debug, Clone)]
struct Plan {
    preset: Preset,
    mechanism: Mechanism,
    devices: usize,
    /// Colours (the group width n).
    colours: usize,
    /// Colours in the read window (k for splitting, 1 for replication).
    window: usize,
    /// Device bytes written per user byte.
    write_factor: f64,
    request_bytes: usize,
    read_streams: usize,
    write_streams: usize,
    /// Writes allowed per read dispatched (None: as fast as they go).
    writes_per_read: Option<f64>,
    read_share: Option<f64>,
    duration_s: f64,
    frame_s: f64,
    guard_s: f64,
    durability: DurabilityArg,
    device_bytes: u64,
    buffer_bytes: u64,
    filler_fraction: f64,
    data_fraction: f64,
    write_set: f64,
    objects: u64,
    /// Bytes one piece occupies on a device (header included, rounded to 4 KiB units).
    piece_device_bytes: u64,
    /// Simulated seconds of the write-only measurement of w.
    w_measure_s: f64,
    clock: Clock,
    /// tokio time per simulated time.
    dilation: u64,
    seed: u64,
    cold_cache: bool,
    trace: Option<Arc<Trace>>,
    /// erails-decode: which reads this run issues (None: uniform over the read set).
    decode_variant: Option<DecodeVariant>,
    /// erails-decode in virtual time: the decode CPU time each decoding read is charged.
    decode_cost: Option<Arc<DecodeCalibration>>,
    /// Modelled decoding cores.
    decode_threads: usize,
}

/// Length of one time bucket (simulated), for the series and the IOPS CDF.
const BUCKET_S: f64 = 0.1;
/// Buffer and role samples, simulated seconds apart.
const SAMPLE_S: f64 = 0.1;
/// Piece header bytes the manager adds (see `redundancy::format`).
const PIECE_HEADER_BYTES: u64 = 52;
const UNIT_BYTES: u64 = 4096;

/// The plan of `args`; `k` picks erails-decode's array (ignored by the other presets).
fn plan_of(args: &MixedBenchArgs, k: usize) -> Result<Plan> {
    let q = args.quick;
    let decode = args.preset == Preset::ErailsDecode;
    let (devices, mech, request, rs, ws, share) = match args.preset {
        Preset::Rails2 => (2, "rep2".to_string(), 256 << 10, 2, 2, None),
        Preset::ErailsK3 => (6, "split3+3".into(), 128 << 10, 4, 4, Some(0.75)),
        Preset::ErailsK5 => (10, "split5+5".into(), 128 << 10, 4, 4, Some(0.75)),
        Preset::Groups12 => (12, "split3+3".into(), 128 << 10, 8, 8, Some(0.75)),
        // Reads only; enough in flight that the readers' channels, not the streams, set the
        // pace (each read keeps one shard read queued on every reader).
        Preset::ErailsDecode => (2 * k, format!("split{k}+{k}"), 128 << 10, 64, 0, None),
    };
    ensure!(
        !decode || args.trace.is_none(),
        "erails-decode measures decoding on synthetic reads; --trace goes with the other presets"
    );
    let mechanism = Mechanism::parse(&mech).map_err(|e| anyhow::anyhow!("{e}"))?;
    let colours = mechanism.width();
    let (window, write_factor) = match mechanism {
        Mechanism::Split { k, m, .. } => (k as usize, (k + m) as f64 / k as f64),
        Mechanism::Replicate { r } => (1, r as f64),
        other => bail!("{other}: the mixed benchmark covers replication and splitting"),
    };
    let request_bytes = args.request_bytes.unwrap_or(request);
    ensure!(request_bytes > 0, "--request-bytes must be positive");
    let read_share = match args.read_share.or(share) {
        Some(s) if s > 0.0 && s < 1.0 => Some(s),
        Some(s) if s == 0.0 || s == 1.0 => None,
        Some(s) => bail!("--read-share {s} must lie in [0, 1]"),
        None => None,
    };
    let duration_s = args.duration.unwrap_or(match (decode, q) {
        (true, true) => 1.0,
        (true, false) => 4.0,
        (false, true) => 3.0,
        (false, false) => 20.0,
    });
    let frame_s = args.frame.unwrap_or(if q { 0.5 } else { 2.0 });
    ensure!(duration_s > 0.0, "--duration must be positive");
    ensure!(
        args.guard_ms >= 0.0 && args.guard_ms / 1000.0 < frame_s,
        "--guard-ms must be shorter than the frame"
    );
    let device_bytes = args.device_mib.unwrap_or(if q { 64 } else { 1024 }) << 20;
    let buffer_bytes = args.buffer_mib.unwrap_or(if q { 8 } else { 128 }) << 20;
    ensure!(
        args.write_set > 0.0 && args.write_set < 1.0,
        "--write-set must lie strictly between 0 and 1"
    );
    ensure!(
        (0.0..0.9).contains(&args.filler_fraction)
            && args.data_fraction > 0.0
            && args.filler_fraction + args.data_fraction <= 0.9,
        "filler and data fractions must be positive and leave at least 10 % of each SSD free"
    );
    let trace = match &args.trace {
        Some(p) => Some(Arc::new(Trace::load(
            p,
            args.trace_format,
            args.trace_block.unwrap_or(64 << 10).max(512),
            args.trace_speed,
            args.trace_qd,
        )?)),
        None => None,
    };
    let request_bytes = trace.as_ref().map_or(request_bytes, |t| t.block_bytes);
    let shard = match mechanism {
        Mechanism::Split { k, .. } => request_bytes.div_ceil(k as usize) as u64,
        _ => request_bytes as u64,
    };
    let piece_device_bytes = (shard + PIECE_HEADER_BYTES).div_ceil(UNIT_BYTES) * UNIT_BYTES;
    // Each object puts one piece on `colours` of the `devices` devices.
    let budget = args.data_fraction * device_bytes as f64 * devices as f64 / colours as f64;
    let mut objects = (budget / piece_device_bytes as f64) as u64;
    if let Some(t) = &trace {
        objects = objects.min(t.distinct_blocks.max(1));
    }
    ensure!(
        objects >= 16,
        "the data set holds only {objects} objects: raise --device-mib or --data-fraction"
    );
    Ok(Plan {
        preset: args.preset,
        mechanism,
        devices,
        colours,
        window,
        write_factor,
        request_bytes,
        read_streams: args.read_streams.unwrap_or(rs).max(1),
        write_streams: if decode {
            0
        } else {
            args.write_streams.unwrap_or(ws)
        },
        writes_per_read: read_share.map(|s| (1.0 - s) / s),
        read_share,
        duration_s,
        frame_s,
        guard_s: args.guard_ms / 1000.0,
        durability: args.durability,
        device_bytes,
        buffer_bytes,
        filler_fraction: args.filler_fraction,
        data_fraction: args.data_fraction,
        write_set: args.write_set,
        objects,
        piece_device_bytes,
        w_measure_s: if q { 0.2 } else { 1.0 },
        clock: args.clock,
        dilation: match args.clock {
            Clock::Virtual => VIRTUAL_TIME_DILATION,
            Clock::Real => 1,
        },
        seed: args.seed,
        cold_cache: args.cold_cache,
        trace,
        decode_variant: None,
        decode_cost: None,
        decode_threads: args.decode_threads,
    })
}

impl Plan {
    /// tokio duration of `s` simulated seconds.
    fn dur(&self, s: f64) -> Duration {
        Duration::from_secs_f64(s * self.dilation as f64)
    }

    /// Simulated nanoseconds in a tokio duration.
    fn sim_ns(&self, d: Duration) -> u64 {
        (d.as_nanos() / self.dilation as u128) as u64
    }

    /// Objects the read streams read: the first `1 - write_set` of them. Writes overwrite the
    /// rest, so no read is answered from a write buffer (the worst case Flash on Rails §4.4
    /// measured; such reads would also take no simulated time).
    fn read_objects(&self) -> u64 {
        if self.trace.is_some() || self.preset == Preset::ErailsDecode {
            self.objects
        } else {
            ((self.objects as f64 * (1.0 - self.write_set)) as u64).clamp(1, self.objects - 1)
        }
    }

    /// User writes that fill one device's write buffer (its pieces plus the buffer's
    /// per-entry charge; a device gets `colours / devices` of the pieces).
    fn buffer_writes(&self) -> usize {
        let entry = self.piece_device_bytes + 64 + 32;
        (self.buffer_bytes / entry) as usize * self.devices / self.colours
    }

    fn readers_writers(&self) -> (usize, usize) {
        (self.window, self.colours - self.window)
    }

    /// eRails §4's bound k m w / (k + m), for each of the N / n disjoint sets of colours'
    /// devices (groups-12 has two devices per colour).
    fn write_bound_bps(&self, w: f64) -> f64 {
        let (k, m) = self.readers_writers();
        write_bound(k, m, w) * (self.devices / self.colours) as f64
    }

    /// What the buffers allow: a device buffers the writes addressed to it for the `window`
    /// frames it reads, so q W / N x window x T <= buffer.
    fn buffer_bound_bps(&self) -> f64 {
        self.devices as f64 * self.buffer_bytes as f64
            / (self.write_factor * self.window as f64 * self.frame_s)
    }

    fn runtime(&self) -> Result<tokio::runtime::Runtime> {
        Ok(match self.clock {
            Clock::Virtual => virtual_time_runtime()?,
            Clock::Real => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
                .enable_all()
                .build()?,
        })
    }

    fn manager_config(&self) -> ManagerConfig {
        ManagerConfig {
            policy: Policy::Standalone(self.mechanism),
            ..ManagerConfig::default()
        }
    }

    /// Colour of every device, from the layout the manager will derive.
    fn colours_of(&self) -> Result<Vec<usize>> {
        let config = self.manager_config();
        let layout = Layout::new(LayoutSpec {
            devices: self.devices,
            width: self.colours,
            rounds: if self.devices == self.colours {
                1
            } else {
                config.layout_rounds
            },
            seed: config.layout_seed,
            version: 1,
        })?;
        Ok((0..self.devices).map(|d| layout.colour_of(d)).collect())
    }

    fn sim_device(&self) -> Result<Arc<SimDevice>> {
        let limits = Limits {
            value_bytes_max: (self.request_bytes + 4096).max(Limits::default().value_bytes_max),
            ..Limits::default()
        };
        let inner: Arc<dyn Device> = Arc::new(SparseFiller {
            mem: MemDevice::new(MemConfig {
                capacity_bytes: u64::MAX / 4,
                limits,
                queue_depth_max: 1 << 16,
            })?,
            filler: Mutex::new(std::collections::HashMap::new()),
        });
        let cfg = sim_config(
            self.device_bytes,
            self.clock == Clock::Virtual,
            VIRTUAL_TIME_DILATION,
        );
        Ok(Arc::new(SimDevice::new(inner, cfg)?))
    }

    /// Fills and overwrites filler on a fresh simulated SSD (4 KiB values; 8-byte keys that
    /// never meet the manager's tagged keys).
    async fn precondition(&self, sim: &Arc<SimDevice>, salt: u64) -> Result<()> {
        let keys = (self.filler_fraction * self.device_bytes as f64 / UNIT_BYTES as f64) as u64;
        if keys > 0 {
            precondition(
                sim.clone(),
                keys,
                UNIT_BYTES as usize,
                2 * keys,
                32,
                self.seed ^ salt.wrapping_mul(0x9E37_79B9),
            )
            .await?;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let mut s = String::new();
        let (k, m) = self.readers_writers();
        let _ = writeln!(
            s,
            "preset {}: {} simulated SSDs of {} (default TLC model), {} in {} colour classes, \
             window of {k} reader colour(s) and {m} writer colour(s), frame T = {} s, guard {} ms, \
             buffered writes kept in {}",
            self.preset.name(),
            self.devices,
            human_bytes(self.device_bytes),
            self.mechanism,
            self.colours,
            self.frame_s,
            self.guard_s * 1000.0,
            match self.durability {
                DurabilityArg::Journal => "a journal on writers",
                DurabilityArg::Memory => "memory",
            }
        );
        match &self.trace {
            Some(t) => {
                let _ = writeln!(
                    s,
                    "workload: trace {} ({} requests, {:.1} % reads, {:.1} s at speed x{}), \
                     offsets mapped to {} keys of {} ({} distinct blocks{}), open loop, at \
                     most {} reads and as many writes outstanding; a write \
                     stores its blocks whole, a read reads its byte range",
                    t.path.display(),
                    t.ops.len(),
                    t.read_pct(),
                    t.span_s(),
                    t.speed,
                    self.objects,
                    human_bytes(t.block_bytes as u64),
                    t.distinct_blocks,
                    if t.distinct_blocks > self.objects {
                        ", folded onto the keys by modulo"
                    } else {
                        ""
                    },
                    t.qd
                );
            }
            None if self.preset == Preset::ErailsDecode => {
                let _ = writeln!(
                    s,
                    "workload: {} objects of {} (data set {}), read-only, {} read request(s) in \
                     flight (closed loop); the k devices in the window serve every read. \
                     no-decode reads keys whose k data shards all lie on the window's colours \
                     (their rotation equals the window's start, 1 key in {}); decode reads the \
                     others, so every read rebuilds at least one data shard from parity",
                    self.objects,
                    human_bytes(self.request_bytes as u64),
                    human_bytes(self.objects * self.request_bytes as u64),
                    self.read_streams,
                    self.colours,
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "workload: {} objects of {} (data set {}; reads address the first {} at \
                     random, writes overwrite the other {} in shuffled passes), {} read and {} \
                     write request(s) in flight (closed loop), {}",
                    self.objects,
                    human_bytes(self.request_bytes as u64),
                    human_bytes(self.objects * self.request_bytes as u64),
                    self.read_objects(),
                    self.objects - self.read_objects(),
                    self.read_streams,
                    self.write_streams,
                    match self.read_share {
                        Some(r) => format!("reads and writes dispatched {:.2} : {:.2}", r, 1.0 - r),
                        None => "both streams as fast as they go".into(),
                    }
                );
            }
        }
        let _ = writeln!(
            s,
            "each mode: fresh SSDs; filler {:.0} % of each SSD (filled, then overwritten twice at \
             random), data set {:.0} %, {}, {} s measured from a frame boundary; seed {}; write \
             buffers {} per device",
            self.filler_fraction * 100.0,
            self.data_fraction * 100.0,
            if self.cold_cache {
                "metadata cache cold"
            } else {
                "every key read once first (metadata cache warm)"
            },
            self.duration_s,
            self.seed,
            human_bytes(self.buffer_bytes)
        );
        let write_set = (self.objects - self.read_objects()) as usize;
        if self.trace.is_none()
            && self.write_streams > 0
            && write_set < 2 * (self.buffer_writes() + self.write_streams)
        {
            let _ = writeln!(
                s,
                "note: the write set ({write_set} objects) is less than twice what one device's \
                 buffer holds ({} writes): some overwrites will coalesce in the buffers (fewer \
                 device writes than the worst case); raise --write-set or --device-mib",
                self.buffer_writes()
            );
        }
        let _ = write!(
            s,
            "clock: {}",
            match (self.clock, self.preset) {
                (Clock::Virtual, Preset::ErailsDecode) if self.decode_threads == 0 => {
                    "virtual (paused tokio clock); --decode-threads 0: decoding, like all CPU \
                     work, costs no simulated time (a control)"
                        .into()
                }
                (Clock::Virtual, Preset::ErailsDecode) => format!(
                    "virtual (paused tokio clock); a read that decodes then holds one of {} \
                     modelled decoding core(s) for the CPU time its decode took on this machine \
                     (measured before the run, thread CPU time, the manager's codec); other CPU \
                     work costs no simulated time",
                    self.decode_threads
                ),
                (Clock::Virtual, _) => "virtual (paused tokio clock; CPU time of coding and \
                                        copies costs no simulated time)"
                    .into(),
                (Clock::Real, _) => "real (CPU time counts, decoding included; simulated \
                                     delays under 1 ms round up to tokio's 1 ms timer tick)"
                    .into(),
            }
        );
        s
    }
}

// ---------------------------------------------------------------------------------------------
// The data keeper inside each simulated SSD

/// A memory device that keeps only the lengths of filler values (`precondition`'s 8-byte keys;
/// the manager's keys are longer): the SSD model above still sees every byte written, so the
/// simulated SSDs can be larger than the memory that holds the data set. Filler reads back as
/// zeros; listings leave it out.
struct SparseFiller {
    mem: MemDevice,
    filler: Mutex<std::collections::HashMap<[u8; 8], u32>>,
}

impl SparseFiller {
    fn filler_key(key: &[u8]) -> Option<[u8; 8]> {
        key.try_into().ok()
    }
}

#[async_trait]
impl Device for SparseFiller {
    async fn store(&self, k: &[u8], v: &[u8], m: StoreMode) -> railstore_device::Result<()> {
        match Self::filler_key(k) {
            Some(f) => {
                let mut map = self.filler.lock().expect("filler lock");
                m.check(k, map.contains_key(&f))?;
                map.insert(f, v.len() as u32);
                Ok(())
            }
            None => self.mem.store(k, v, m).await,
        }
    }
    async fn retrieve(&self, k: &[u8], r: ReadRange) -> railstore_device::Result<Retrieved> {
        let len = Self::filler_key(k)
            .and_then(|f| self.filler.lock().expect("filler lock").get(&f).copied());
        match len {
            Some(len) => {
                let (a, b) = r.resolve(len as u64)?;
                Ok(Retrieved {
                    value: vec![0; (b - a) as usize].into(),
                    value_len: len as u64,
                })
            }
            None => self.mem.retrieve(k, r).await,
        }
    }
    async fn delete(&self, k: &[u8], must: bool) -> railstore_device::Result<bool> {
        if let Some(f) = Self::filler_key(k) {
            if self
                .filler
                .lock()
                .expect("filler lock")
                .remove(&f)
                .is_some()
            {
                return Ok(true);
            }
        }
        self.mem.delete(k, must).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> railstore_device::Result<Vec<bool>> {
        let mut found = self.mem.exist(keys).await?;
        let map = self.filler.lock().expect("filler lock");
        for (i, k) in keys.iter().enumerate() {
            found[i] |= Self::filler_key(k).is_some_and(|f| map.contains_key(&f));
        }
        Ok(found)
    }
    async fn iterate(&self, req: &IterRequest) -> railstore_device::Result<IterBatch> {
        self.mem.iterate(req).await
    }
    async fn info(&self) -> railstore_device::Result<DeviceInfo> {
        self.mem.info().await
    }
    async fn sync(&self) -> railstore_device::Result<()> {
        self.mem.sync().await
    }
    fn limits(&self) -> Limits {
        self.mem.limits()
    }
}

// ---------------------------------------------------------------------------------------------
// A probe between rails and each SSD: which reads reached a device outside the window

struct Probe {
    inner: Arc<dyn Device>,
    d: usize,
    rails: OnceLock<Weak<Rails>>,
    reads_in_window: AtomicU64,
    reads_outside: AtomicU64,
}

impl Probe {
    fn new(inner: Arc<dyn Device>, d: usize) -> Probe {
        Probe {
            inner,
            d,
            rails: OnceLock::new(),
            reads_in_window: AtomicU64::new(0),
            reads_outside: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl Device for Probe {
    async fn store(&self, k: &[u8], v: &[u8], m: StoreMode) -> railstore_device::Result<()> {
        self.inner.store(k, v, m).await
    }
    async fn retrieve(&self, k: &[u8], r: ReadRange) -> railstore_device::Result<Retrieved> {
        let role = self
            .rails
            .get()
            .and_then(Weak::upgrade)
            .map(|r| r.role(self.d));
        match role {
            Some(Role::Reader) => &self.reads_in_window,
            _ => &self.reads_outside,
        }
        .fetch_add(1, Ordering::Relaxed);
        self.inner.retrieve(k, r).await
    }
    async fn delete(&self, k: &[u8], must: bool) -> railstore_device::Result<bool> {
        self.inner.delete(k, must).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> railstore_device::Result<Vec<bool>> {
        self.inner.exist(keys).await
    }
    async fn iterate(&self, req: &IterRequest) -> railstore_device::Result<IterBatch> {
        self.inner.iterate(req).await
    }
    async fn info(&self) -> railstore_device::Result<DeviceInfo> {
        self.inner.info().await
    }
    async fn sync(&self) -> railstore_device::Result<()> {
        self.inner.sync().await
    }
    async fn compact(&self, b: u64) -> railstore_device::Result<CompactStats> {
        self.inner.compact(b).await
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    reads: u64,
    read_bytes: u64,
    writes: u64,
    write_bytes: u64,
}

/// What the streams record, shared.
struct Tally {
    read: Histogram<u64>,
    write: Histogram<u64>,
    reads_over_1ms: u64,
    reads_over_10ms: u64,
    buckets: Vec<Bucket>,
}

impl Tally {
    fn new(buckets: usize) -> Tally {
        Tally {
            read: hist(),
            write: hist(),
            reads_over_1ms: 0,
            reads_over_10ms: 0,
            buckets: vec![Bucket::default(); buckets],
        }
    }
}

/// What every stream shares in one mode.
struct Ctx {
    plan: Plan,
    manager: Manager,
    start: Instant,
    deadline: Instant,
    stop: AtomicBool,
    reads_dispatched: AtomicU64,
    writes_dispatched: AtomicU64,
    gate: Notify,
    tally: Mutex<Tally>,
    writes: Mutex<WriteOrder>,
    rails: Arc<Rails>,
    /// One device of each colour (index = colour).
    colour_device: Vec<usize>,
    /// erails-decode: the read set's keys by rotation (shard 0's colour).
    by_rotation: Vec<Vec<u64>>,
    /// erails-decode: the modelled decoding cores.
    decoders: Semaphore,
    /// erails-decode: reads whose shards in the window leave out a data shard (so the manager
    /// must decode), and the simulated ns of decoding charged for them.
    decoding_reads: AtomicU64,
    charged_ns: AtomicU64,
    /// Trace replay: reads and writes arrived but not completed.
    trace_pending: [AtomicU64; 2],
}

/// The order of overwrites: passes over the write set, each a fresh shuffle (so the SSDs see
/// scattered overwrites), in which the last `recent` keys of a pass stay out of the first
/// `recent` places of the next. Two writes of a key are then always more than `recent` writes
/// apart; with `recent` at least the writes that fill one device's buffer, a buffered piece is
/// flushed before its key comes round again: no write coalesces in a buffer (the worst case).
struct WriteOrder {
    keys: Vec<u64>,
    next: usize,
    recent: usize,
    rng: ChaCha8Rng,
}

impl WriteOrder {
    fn new(first: u64, end: u64, recent: usize, seed: u64) -> WriteOrder {
        let keys: Vec<u64> = (first..end).collect();
        WriteOrder {
            recent: recent.min(keys.len() / 2),
            keys,
            next: usize::MAX,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5752_4954),
        }
    }

    fn next(&mut self) -> u64 {
        let n = self.keys.len();
        if self.next >= n {
            use rand::seq::SliceRandom;
            let first_pass = self.next == usize::MAX;
            let last: std::collections::HashSet<u64> =
                self.keys[n - self.recent..].iter().copied().collect();
            self.keys.shuffle(&mut self.rng);
            if !first_pass {
                for i in 0..self.recent {
                    while last.contains(&self.keys[i]) {
                        let j = self.rng.gen_range(self.recent..n);
                        if !last.contains(&self.keys[j]) {
                            self.keys.swap(i, j);
                        }
                    }
                }
            }
            self.next = 0;
        }
        self.next += 1;
        self.keys[self.next - 1]
    }
}

impl Ctx {
    fn record(&self, write: bool, t0: Instant, bytes: u64) {
        let now = Instant::now();
        let ns = self.plan.sim_ns(now - t0).max(1);
        let bucket = (self.plan.sim_ns(now.saturating_duration_since(self.start)) as f64
            / 1e9
            / BUCKET_S) as usize;
        let mut t = self.tally.lock().expect("tally lock");
        if write {
            t.write.saturating_record(ns);
        } else {
            t.read.saturating_record(ns);
            t.reads_over_1ms += (ns > 1_000_000) as u64;
            t.reads_over_10ms += (ns > 10_000_000) as u64;
        }
        if now <= self.deadline {
            if let Some(b) = t.buckets.get_mut(bucket) {
                if write {
                    b.writes += 1;
                    b.write_bytes += bytes;
                } else {
                    b.reads += 1;
                    b.read_bytes += bytes;
                }
            }
        }
    }

    fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    /// The first colour of the read window now (the window is a run of colours, mod n).
    fn window_start(&self) -> usize {
        let n = self.plan.colours;
        let reading: Vec<bool> = self
            .colour_device
            .iter()
            .map(|&d| self.rails.role(d) == Role::Reader)
            .collect();
        (0..n)
            .find(|&c| reading[c] && !reading[(c + n - 1) % n])
            .unwrap_or(0)
    }

    /// The next key to read, and for erails-decode the first shard index of the run of
    /// shards the window holds for it (0: the k data shards, no decoding).
    fn pick_read(&self, rng: &mut ChaCha8Rng) -> (u64, Option<usize>) {
        let Some(variant) = self.plan.decode_variant else {
            return (rng.gen_range(0..self.plan.read_objects()), None);
        };
        let n = self.plan.colours;
        let w = self.window_start();
        let rotation = match variant {
            DecodeVariant::NoDecode => w,
            DecodeVariant::Decode => (w + rng.gen_range(1..n)) % n,
        };
        let keys = &self.by_rotation[rotation];
        // Both variants read about objects / n distinct keys at a time, spread over the whole
        // load order: a smaller hot set loads an SSD's dies less evenly, and keys loaded
        // together lie together on flash (the first keys of each rotation read 4-5 %
        // faster at k = 6), either of which would tilt the comparison.
        let i = match variant {
            DecodeVariant::NoDecode => rng.gen_range(0..keys.len()),
            DecodeVariant::Decode => {
                let hot = keys.len().div_ceil(n - 1);
                (rng.gen_range(0..hot) * (n - 1)).min(keys.len() - 1)
            }
        };
        // Shard i lives on colour (i + rotation) mod n, so the window's first colour w holds
        // shard (w - rotation) mod n and the next k - 1 colours the shards after it.
        (keys[i], Some((w + n - rotation) % n))
    }

    /// Holds a modelled decoding core for the decode's CPU time (erails-decode, virtual time).
    async fn charge_decode(&self, first_shard: usize) {
        let Some(cost) = &self.plan.decode_cost else {
            return;
        };
        let ns = cost.decode_ns(first_shard);
        if ns == 0 {
            return;
        }
        let _core = self.decoders.acquire().await.expect("decoders never close");
        tokio::time::sleep(self.plan.dur(ns as f64 / 1e9)).await;
        self.charged_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

fn object_key(i: u64) -> Vec<u8> {
    format!("obj{i:010}").into_bytes()
}

async fn read_stream(ctx: Arc<Ctx>, s: usize) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(ctx.plan.seed.wrapping_mul(7919) ^ (s as u64) << 20);
    while !ctx.done() {
        let (i, first_shard) = ctx.pick_read(&mut rng);
        let key = object_key(i);
        ctx.reads_dispatched.fetch_add(1, Ordering::Relaxed);
        ctx.gate.notify_waiters();
        let t0 = Instant::now();
        let (v, _) = ctx
            .manager
            .get(&key, ReadRange::ALL)
            .await
            .with_context(|| format!("reading {}", String::from_utf8_lossy(&key)))?;
        ensure!(
            v.len() == ctx.plan.request_bytes,
            "read {} B of {}, expected {}",
            v.len(),
            String::from_utf8_lossy(&key),
            ctx.plan.request_bytes
        );
        if let Some(first) = first_shard.filter(|&f| f != 0) {
            ctx.decoding_reads.fetch_add(1, Ordering::Relaxed);
            ctx.charge_decode(first).await;
        }
        ctx.record(false, t0, v.len() as u64);
        if Instant::now() == t0 {
            // Served without touching a device (write buffers hold every piece): costs no
            // simulated time, so pause a simulated microsecond rather than spin at one instant.
            tokio::time::sleep(ctx.plan.dur(1e-6)).await;
        }
        tokio::task::yield_now().await;
    }
    Ok(())
}

async fn write_stream(ctx: Arc<Ctx>, s: usize) -> Result<()> {
    let mut rng =
        ChaCha8Rng::seed_from_u64(ctx.plan.seed.wrapping_mul(104_729) ^ (s as u64) << 24 ^ 1);
    let mut value = vec![0u8; ctx.plan.request_bytes];
    rng.fill(&mut value[..]);
    let mut n = 0u64;
    loop {
        if let Some(ratio) = ctx.plan.writes_per_read {
            // The dispatch ratio: at most `ratio` writes per read dispatched so far.
            loop {
                let wake = ctx.gate.notified();
                let reads = ctx.reads_dispatched.load(Ordering::Relaxed) as f64;
                let writes = ctx.writes_dispatched.load(Ordering::Relaxed) as f64;
                if ctx.done() || writes < reads * ratio {
                    break;
                }
                wake.await;
            }
        }
        if ctx.done() {
            return Ok(());
        }
        ctx.writes_dispatched.fetch_add(1, Ordering::Relaxed);
        let key = object_key(ctx.writes.lock().expect("write order").next());
        n += 1;
        let stamp = (s as u64) << 48 | n;
        let len = value.len().min(8);
        value[..len].copy_from_slice(&stamp.to_le_bytes()[..len]);
        let t0 = Instant::now();
        ctx.manager
            .put(&key, &value, StoreMode::Upsert, None)
            .await
            .with_context(|| format!("writing {}", String::from_utf8_lossy(&key)))?;
        ctx.record(true, t0, value.len() as u64);
        if Instant::now() == t0 {
            tokio::time::sleep(ctx.plan.dur(1e-6)).await;
        }
        tokio::task::yield_now().await;
    }
}

/// One sample of every device's role and buffer, and of the counters that change with roles
/// (cumulative since the mode's start, so rates are differences between samples).
#[derive(Debug, Clone)]
struct Sample {
    t_s: f64,
    roles: Vec<Role>,
    buffer_bytes: Vec<u64>,
    /// Per device: bytes flushed from its buffer, and reads its buffer answered.
    flushed_bytes: Vec<u64>,
    buffer_reads: Vec<u64>,
    /// The array: segments decoded, and frames that separated only partially.
    decodes: u64,
    partial_frames: u64,
}

/// The result of one mode.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// `separated`, `mixed` or `read-only`.
    pub mode: Mode,
    /// Read latency percentiles, simulated µs.
    pub read_p50_us: f64,
    /// 99th percentile.
    pub read_p99_us: f64,
    /// 99.9th percentile.
    pub read_p999_us: f64,
    /// 99.99th percentile.
    pub read_p9999_us: f64,
    /// Slowest read.
    pub read_max_us: f64,
    /// Mean read latency.
    pub read_mean_us: f64,
    /// Write latency percentiles, µs (0 without writes).
    pub write_p50_us: f64,
    /// 99th percentile.
    pub write_p99_us: f64,
    /// 99.9th percentile.
    pub write_p999_us: f64,
    /// Slowest write that completed (writes still waiting for buffer room at the end are not
    /// counted).
    pub write_max_us: f64,
    /// Reads completed in the measured time.
    pub reads: u64,
    /// Writes completed in the measured time.
    pub writes: u64,
    /// User read MB/s (10^6 B).
    pub read_mbps: f64,
    /// User write MB/s.
    pub write_mbps: f64,
    /// Reads per second.
    pub read_iops: f64,
    /// Reads slower than 1 ms.
    pub reads_over_1ms: u64,
    /// Reads slower than 10 ms.
    pub reads_over_10ms: u64,
    /// Write MB/s as a percentage of the eRails bound k m w / (k + m).
    pub write_pct_of_bound: f64,
    /// Most bytes buffered on one device at a sample.
    pub buffer_bytes_max: u64,
    /// Writes buffered because their device was reading (or guarding, or flushing).
    pub buffered_ops: u64,
    /// Writes sent straight to a writer.
    pub direct_ops: u64,
    /// Bytes flushed from buffers.
    pub flushed_bytes: u64,
    /// Device reads answered from a buffer.
    pub buffer_reads: u64,
    /// Times a write waited for buffer room.
    pub backpressure_waits: u64,
    /// Buffered writes replaced by a newer write of the same piece before being flushed.
    pub coalesced_ops: u64,
    /// Device reads that reached a device in the read window.
    pub device_reads_in_window: u64,
    /// Device reads that reached a device outside it (writer or guard); meaningful only with
    /// separation on.
    pub device_reads_outside_window: u64,
    /// Segments rebuilt by decoding.
    pub decodes: u64,
    /// Garbage-collection runs on the SSDs during the measured time.
    pub gc_runs: u64,
    /// Die-milliseconds spent in garbage collection (summed over dies and SSDs).
    pub gc_busy_die_ms: f64,
    /// SSD write amplification during the measured time.
    pub ssd_write_amplification: f64,
    /// Flash pages read per device read that reached an SSD (GC relocations can spread a
    /// value over more pages).
    pub ssd_pages_per_read: f64,
    /// Wall-clock seconds of the measured phase.
    pub wall_s: f64,
    /// Process CPU seconds of the measured phase (coding, copies, the simulation itself).
    pub cpu_s: f64,
    /// erails-decode: readers (k; m = k).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<usize>,
    /// erails-decode: `no-decode` or `decode`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<DecodeVariant>,
    /// erails-decode: reads whose window shards leave out a data shard, as the bench predicts
    /// them from the placement and the window (the manager's `decodes` count the real ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoding_reads: Option<u64>,
    /// erails-decode: simulated ms of decoding charged (0 in real time, where it costs itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_charged_ms: Option<f64>,
    /// erails-decode: charged decoding time over what the modelled cores offer in the
    /// measured time, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_busy_pct: Option<f64>,
    /// Trace replay: reads that arrived in the measured time but had not completed 50
    /// simulated ms after it (abandoned; their latency is in no percentile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_reads_abandoned: Option<u64>,
    /// Trace replay: writes abandoned likewise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_writes_abandoned: Option<u64>,
    #[serde(skip)]
    buckets: Vec<Bucket>,
    #[serde(skip)]
    samples: Vec<Sample>,
}

/// The report of one invocation (the `--json` object).
#[derive(Debug, Clone, Serialize)]
pub struct MixedReport {
    /// The preset.
    pub preset: Preset,
    /// Mechanism of every object.
    pub mechanism: String,
    /// Simulated SSDs.
    pub devices: usize,
    /// Colour classes (group width).
    pub colours: usize,
    /// Reader colours (k).
    pub readers: usize,
    /// Writer colours (m).
    pub writers: usize,
    /// Request size.
    pub request_bytes: usize,
    /// Objects in the data set.
    pub objects: u64,
    /// Closed-loop read requests in flight.
    pub read_streams: usize,
    /// Closed-loop write requests in flight.
    pub write_streams: usize,
    /// Share of dispatches that are reads (null: as fast as they go).
    pub read_share: Option<f64>,
    /// The trace replayed, if any.
    pub trace: Option<String>,
    /// The clock.
    pub clock: Clock,
    /// Whether CPU time costs simulated time (false in virtual time).
    pub cpu_time_charged: bool,
    /// Simulated seconds measured per mode.
    pub duration_s: f64,
    /// Frame T.
    pub frame_s: f64,
    /// Guard before joining the window.
    pub guard_ms: f64,
    /// What a buffered write waited for.
    pub durability: DurabilityArg,
    /// Logical bytes of each SSD.
    pub device_bytes: u64,
    /// Write buffer bound of each device.
    pub buffer_bytes: u64,
    /// Seed.
    pub seed: u64,
    /// w: one SSD's sequential write MB/s (preconditioned, piece-sized values, 32 in flight).
    pub w_mbps: f64,
    /// eRails §4's bound on user writes, k m w / (k + m) per set of n devices.
    pub write_bound_mbps: f64,
    /// What the write buffers allow: N x buffer / (q x window x T).
    pub buffer_bound_mbps: f64,
    /// erails-decode: modelled decoding cores (virtual time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_threads: Option<usize>,
    /// erails-decode: how decoding time reaches the clock, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_charge: Option<String>,
    /// erails-decode: the decode CPU time measured for each k before its runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_calibration: Option<Vec<DecodeCalibration>>,
    /// One entry per mode (erails-decode: per k and variant, all `read-only`; the top-level
    /// array fields then describe the largest k).
    pub runs: Vec<RunReport>,
    /// What ran, on what, in words.
    #[serde(skip)]
    pub description: String,
}

fn percentile_us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(q) as f64 / 1000.0
    }
}

fn sum_sim(sims: &[Arc<SimDevice>]) -> SimStats {
    sims.iter().fold(SimStats::default(), |a, s| {
        let b = s.stats();
        SimStats {
            host_pages_programmed: a.host_pages_programmed + b.host_pages_programmed,
            gc_pages_programmed: a.gc_pages_programmed + b.gc_pages_programmed,
            pages_read: a.pages_read + b.pages_read,
            blocks_erased: a.blocks_erased + b.blocks_erased,
            gc_runs: a.gc_runs + b.gc_runs,
            gc_busy_ns: a.gc_busy_ns + b.gc_busy_ns,
            buffer_stalls: a.buffer_stalls + b.buffer_stalls,
        }
    })
}

/// Sums of the rails counters: buffered, direct, flushed bytes, buffer reads, back-pressure
/// waits, flushed ops, and keys buffered now.
fn rails_totals(rails: &Rails, n: usize) -> [u64; 7] {
    let mut t = [0u64; 7];
    for d in 0..n {
        let c = rails.counters(d);
        t[0] += c.buffered_ops.load(Ordering::Relaxed);
        t[1] += c.direct_ops.load(Ordering::Relaxed);
        t[2] += c.flushed_bytes.load(Ordering::Relaxed);
        t[3] += c.buffer_reads.load(Ordering::Relaxed);
        t[4] += c.backpressure_waits.load(Ordering::Relaxed);
        t[5] += c.flushed_ops.load(Ordering::Relaxed);
    }
    t[6] = rails.snapshot().iter().map(|s| s.buffer_keys as u64).sum();
    t
}

/// Runs `jobs` tasks over the ids 0..count, each doing `f(id)`.
async fn for_each_id<F, Fut>(count: u64, jobs: usize, progress: &ProgressBar, f: F) -> Result<()>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..jobs.max(1) {
        let (f, next, progress) = (f.clone(), next.clone(), progress.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                f(i).await?;
                progress.inc(1);
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a load task panicked")??;
    }
    Ok(())
}

/// One mode on fresh SSDs: precondition, load the data set through a manager on the bare
/// SSDs, wrap them with rails (separation on or off) under a second manager, read every key
/// once, then measure from the next frame boundary.
async fn run_mode(plan: &Plan, mode: Mode, quiet: bool) -> Result<RunReport> {
    let sims: Vec<Arc<SimDevice>> = (0..plan.devices)
        .map(|_| plan.sim_device())
        .collect::<Result<_>>()?;
    let label = |what: &str| format!("{} {}: {what}", plan.preset.name(), mode.name());
    // 1. Filler, all SSDs at once.
    let p = bar(quiet, None, &label("precondition"));
    join_all(
        sims.iter()
            .enumerate()
            .map(|(d, s)| plan.precondition(s, d as u64 + 1)),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<()>>>()?;
    p.finish_and_clear();
    // 2. The data set through a manager on the bare SSDs.
    let raw: Vec<Arc<dyn Device>> = sims.iter().map(|s| s.clone() as Arc<dyn Device>).collect();
    let config = plan.manager_config();
    {
        let loader = assemble(
            raw.clone(),
            pass_through(plan.colours),
            config.clone(),
            &[],
            None,
        )
        .await?
        .manager;
        let p = bar(quiet, Some(plan.objects), &label("load"));
        let seed = plan.seed;
        let size = plan.request_bytes;
        let m = loader.clone();
        for_each_id(plan.objects, 16, &p, move |i| {
            let m = m.clone();
            async move {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ i.wrapping_mul(0x2545_F491));
                let mut v = vec![0u8; size];
                rng.fill(&mut v[..]);
                m.put(&object_key(i), &v, StoreMode::Upsert, None).await?;
                Ok(())
            }
        })
        .await?;
        loader.sync().await?;
        p.finish_and_clear();
    }
    for s in &sims {
        s.drain().await;
    }
    // 3. Separation over probes over the SSDs.
    let probes: Vec<Arc<Probe>> = raw
        .iter()
        .enumerate()
        .map(|(d, s)| Arc::new(Probe::new(s.clone(), d)))
        .collect();
    let colour_of = plan.colours_of()?;
    let schedule = ScheduleConfig {
        colours: plan.colours,
        frame: plan.dur(plan.frame_s),
        window_min: plan.window,
        window_max: plan.window,
        guard: plan.dur(plan.guard_s),
    };
    let rails_cfg = RailsConfig {
        separation: mode != Mode::Mixed,
        write_buffer_bytes_max: plan.buffer_bytes,
        durability: match plan.durability {
            DurabilityArg::Journal => Durability::Journal,
            DurabilityArg::Memory => Durability::Memory,
        },
        ..RailsConfig::new(schedule)
    };
    let array = assemble(
        probes
            .iter()
            .map(|p| p.clone() as Arc<dyn Device>)
            .collect(),
        rails_cfg,
        config,
        &[],
        None,
    )
    .await?;
    let (rails, manager) = (array.rails, array.manager);
    for p in &probes {
        let _ = p.rails.set(Arc::downgrade(&rails));
    }
    // 4. Warm the metadata cache: one read of every key (not measured).
    if !plan.cold_cache {
        let p = bar(quiet, Some(plan.objects), &label("warm-up"));
        let m = manager.clone();
        for_each_id(plan.objects, 16, &p, move |i| {
            let m = m.clone();
            async move {
                m.get(&object_key(i), ReadRange::ALL).await?;
                Ok(())
            }
        })
        .await?;
        p.finish_and_clear();
    }
    // erails-decode picks keys by where their data shards lie.
    let mut by_rotation = Vec::new();
    if plan.decode_variant.is_some() {
        by_rotation = vec![Vec::new(); plan.colours];
        for i in 0..plan.read_objects() {
            by_rotation[manager.layout().place(&object_key(i)).rotation()].push(i);
        }
        ensure!(
            by_rotation.iter().all(|keys| !keys.is_empty()),
            "some rotation holds no key of the {} objects: raise --device-mib",
            plan.read_objects()
        );
    }
    let mut colour_device = vec![0; plan.colours];
    for (d, &c) in colour_of.iter().enumerate().rev() {
        colour_device[c] = d;
    }
    // 5. Start on a frame boundary.
    let frame_ns = plan.dur(plan.frame_s).as_nanos() as u64;
    let into = rails.now_ns() % frame_ns;
    if into > 0 {
        tokio::time::sleep(Duration::from_nanos(frame_ns - into)).await;
    }
    let sim0 = sum_sim(&sims);
    let rails0 = rails_totals(&rails, plan.devices);
    let probe0: (u64, u64) = probe_totals(&probes);
    let decodes0 = manager.devices().counters.decodes.load(Ordering::Relaxed);
    let wall = std::time::Instant::now();
    let cpu = crate::meter::process_cpu_seconds();
    let start = Instant::now();
    let deadline = start + plan.dur(plan.duration_s);
    let n_buckets = (plan.duration_s / BUCKET_S).ceil() as usize;
    let ctx = Arc::new(Ctx {
        plan: plan.clone(),
        manager: manager.clone(),
        start,
        deadline,
        stop: AtomicBool::new(false),
        reads_dispatched: AtomicU64::new(0),
        writes_dispatched: AtomicU64::new(0),
        gate: Notify::new(),
        tally: Mutex::new(Tally::new(n_buckets)),
        writes: Mutex::new(WriteOrder::new(
            plan.read_objects(),
            plan.objects,
            plan.buffer_writes() + plan.write_streams,
            plan.seed,
        )),
        rails: rails.clone(),
        colour_device,
        by_rotation,
        decoders: Semaphore::new(plan.decode_threads.max(1)),
        decoding_reads: AtomicU64::new(0),
        charged_ns: AtomicU64::new(0),
        trace_pending: Default::default(),
    });
    let progress = bar(
        quiet,
        Some((plan.duration_s * 1000.0) as u64),
        &label("simulated ms"),
    );
    // The sampler: roles and buffers, and the progress bar.
    let sampler = {
        let (rails, ctx, progress) = (rails.clone(), ctx.clone(), progress.clone());
        let step = plan.dur(SAMPLE_S);
        let n = plan.devices;
        tokio::spawn(async move {
            let mut out = Vec::new();
            let mut at = start;
            while at <= deadline {
                tokio::time::sleep_until(at).await;
                let snap = rails.snapshot();
                let t_s = ctx.plan.sim_ns(at - start) as f64 / 1e9;
                let counter = |f: fn(&DeviceCounters) -> &AtomicU64| {
                    (0..n)
                        .map(|d| f(&rails.counters(d)).load(Ordering::Relaxed))
                        .collect()
                };
                out.push(Sample {
                    t_s,
                    roles: snap.iter().map(|s| s.role).collect(),
                    buffer_bytes: snap.iter().map(|s| s.buffer_bytes).collect(),
                    flushed_bytes: counter(|c| &c.flushed_bytes),
                    buffer_reads: counter(|c| &c.buffer_reads),
                    decodes: ctx
                        .manager
                        .devices()
                        .counters
                        .decodes
                        .load(Ordering::Relaxed),
                    partial_frames: rails.partial_frames(),
                });
                debug_assert_eq!(snap.len(), n);
                progress.set_position((t_s * 1000.0) as u64);
                at += step;
            }
            out
        })
    };
    let mut readers = tokio::task::JoinSet::new();
    let mut writers = tokio::task::JoinSet::new();
    match &plan.trace {
        Some(trace) => {
            readers.spawn(replay(ctx.clone(), trace.clone(), mode != Mode::ReadOnly));
        }
        None => {
            for s in 0..plan.read_streams {
                readers.spawn(read_stream(ctx.clone(), s));
            }
            if mode != Mode::ReadOnly {
                for s in 0..plan.write_streams {
                    writers.spawn(write_stream(ctx.clone(), s));
                }
            }
        }
    }
    tokio::time::sleep_until(deadline).await;
    ctx.stop.store(true, Ordering::Relaxed);
    ctx.gate.notify_waiters();
    // Reads in flight finish (their latency counts); writes waiting for buffer room are
    // abandoned: the measurement is over.
    while let Some(r) = readers.join_next().await {
        r.context("a read stream panicked")??;
    }
    let grace = Instant::now() + plan.dur(0.05);
    while !writers.is_empty() {
        tokio::select! {
            r = writers.join_next() => {
                if let Some(r) = r {
                    r.context("a write stream panicked")??;
                }
            }
            _ = tokio::time::sleep_until(grace) => {
                writers.abort_all();
                while writers.join_next().await.is_some() {}
            }
        }
    }
    let samples = sampler.await.context("the sampler panicked")?;
    progress.finish_and_clear();
    let wall_s = wall.elapsed().as_secs_f64();
    let cpu_s = crate::meter::process_cpu_seconds() - cpu;
    let sim1 = sum_sim(&sims);
    let rails1 = rails_totals(&rails, plan.devices);
    let probe1 = probe_totals(&probes);
    let decodes = manager.devices().counters.decodes.load(Ordering::Relaxed) - decodes0;
    let charged_ns = ctx.charged_ns.load(Ordering::Relaxed);
    let tally = std::mem::replace(&mut *ctx.tally.lock().expect("tally lock"), Tally::new(0));
    let reads: u64 = tally.buckets.iter().map(|b| b.reads).sum();
    let writes: u64 = tally.buckets.iter().map(|b| b.writes).sum();
    let read_bytes: u64 = tally.buckets.iter().map(|b| b.read_bytes).sum();
    let write_bytes: u64 = tally.buckets.iter().map(|b| b.write_bytes).sum();
    let host = sim1.host_pages_programmed - sim0.host_pages_programmed;
    let gc_pages = sim1.gc_pages_programmed - sim0.gc_pages_programmed;
    let d = |i: usize| rails1[i] - rails0[i];
    Ok(RunReport {
        mode,
        read_p50_us: percentile_us(&tally.read, 0.5),
        read_p99_us: percentile_us(&tally.read, 0.99),
        read_p999_us: percentile_us(&tally.read, 0.999),
        read_p9999_us: percentile_us(&tally.read, 0.9999),
        read_max_us: tally.read.max() as f64 / 1000.0,
        read_mean_us: tally.read.mean() / 1000.0,
        write_p50_us: percentile_us(&tally.write, 0.5),
        write_p99_us: percentile_us(&tally.write, 0.99),
        write_p999_us: percentile_us(&tally.write, 0.999),
        write_max_us: tally.write.max() as f64 / 1000.0,
        reads,
        writes,
        read_mbps: read_bytes as f64 / plan.duration_s / 1e6,
        write_mbps: write_bytes as f64 / plan.duration_s / 1e6,
        read_iops: reads as f64 / plan.duration_s,
        reads_over_1ms: tally.reads_over_1ms,
        reads_over_10ms: tally.reads_over_10ms,
        write_pct_of_bound: 0.0,
        buffer_bytes_max: samples
            .iter()
            .flat_map(|s| s.buffer_bytes.iter().copied())
            .max()
            .unwrap_or(0),
        buffered_ops: d(0),
        direct_ops: d(1),
        flushed_bytes: d(2),
        buffer_reads: d(3),
        backpressure_waits: d(4),
        // Buffered in, minus flushed out, minus growth of what is still buffered.
        coalesced_ops: (d(0) + rails0[6]).saturating_sub(d(5) + rails1[6]),
        device_reads_in_window: probe1.0 - probe0.0,
        device_reads_outside_window: probe1.1 - probe0.1,
        decodes,
        gc_runs: sim1.gc_runs - sim0.gc_runs,
        gc_busy_die_ms: (sim1.gc_busy_ns - sim0.gc_busy_ns) as f64 / 1e6,
        ssd_write_amplification: if host == 0 {
            1.0
        } else {
            (host + gc_pages) as f64 / host as f64
        },
        ssd_pages_per_read: {
            let device_reads = (probe1.0 + probe1.1) - (probe0.0 + probe0.1);
            (sim1.pages_read - sim0.pages_read) as f64 / device_reads.max(1) as f64
        },
        wall_s,
        cpu_s,
        k: plan.decode_variant.map(|_| plan.window),
        variant: plan.decode_variant,
        decoding_reads: plan
            .decode_variant
            .map(|_| ctx.decoding_reads.load(Ordering::Relaxed)),
        decode_charged_ms: plan.decode_variant.map(|_| charged_ns as f64 / 1e6),
        decode_busy_pct: plan.decode_variant.map(|_| {
            charged_ns as f64 / (plan.duration_s * 1e9 * plan.decode_threads.max(1) as f64) * 100.0
        }),
        trace_reads_abandoned: plan
            .trace
            .as_ref()
            .map(|_| ctx.trace_pending[0].load(Ordering::Relaxed)),
        trace_writes_abandoned: plan
            .trace
            .as_ref()
            .map(|_| ctx.trace_pending[1].load(Ordering::Relaxed)),
        buckets: tally.buckets,
        samples,
    })
}

fn probe_totals(probes: &[Arc<Probe>]) -> (u64, u64) {
    probes.iter().fold((0, 0), |(a, b), p| {
        (
            a + p.reads_in_window.load(Ordering::Relaxed),
            b + p.reads_outside.load(Ordering::Relaxed),
        )
    })
}

/// w: one fresh SSD, preconditioned like the array's, then piece-sized values written in key
/// order over a region the size of the data set's share, 32 in flight, for `w_measure_s`.
async fn measure_w(plan: &Plan) -> Result<f64> {
    let sim = plan.sim_device()?;
    plan.precondition(&sim, 0).await?;
    sim.drain().await;
    let piece = (plan.piece_device_bytes - UNIT_BYTES / 2) as usize;
    let region =
        ((plan.data_fraction * plan.device_bytes as f64) as u64 / plan.piece_device_bytes).max(1);
    let value: Arc<[u8]> = vec![0x5au8; piece].into();
    let next = Arc::new(AtomicU64::new(0));
    let written = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + plan.dur(plan.w_measure_s);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let (sim, value, next, written) =
            (sim.clone(), value.clone(), next.clone(), written.clone());
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed) % region;
                let key = format!("w{i:010}");
                sim.store(key.as_bytes(), &value, StoreMode::Upsert).await?;
                if Instant::now() <= deadline {
                    written.fetch_add(value.len() as u64, Ordering::Relaxed);
                }
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a w task panicked")??;
    }
    Ok(written.load(Ordering::Relaxed) as f64 / plan.w_measure_s)
}

/// The CPU cost of the decodes one k's reads need, measured on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeCalibration {
    /// Data shards (readers).
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Bytes of one shard (the object over k).
    pub shard_bytes: usize,
    /// The decoding engine.
    pub engine: String,
    /// CPU µs of one decode by the first shard index s of the k consecutive shards the window
    /// holds (0: the data shards, nothing to decode; s in 1..=k misses s data shards, s > k
    /// misses n - s).
    pub decode_us_by_first_shard: Vec<f64>,
    /// Object MB (10^6 B) decoded per CPU second by one thread, averaged over the decoding
    /// values of s (each equally likely in the `decode` variant).
    pub decode_mbps_one_thread: f64,
}

impl DecodeCalibration {
    /// Simulated ns of the decode for reads whose window run starts at shard `first`.
    fn decode_ns(&self, first: usize) -> u64 {
        self.decode_us_by_first_shard
            .get(first)
            .map_or(0, |us| (us * 1000.0).round() as u64)
    }
}

/// Times the decodes of `plan`'s mechanism for every window position, as the manager does them
/// (`Codec::new` on the same code, zeroed buffers for the missing shards, `reconstruct_data`):
/// the median of several batches in thread CPU time, so other processes on the machine do not
/// inflate it.
fn calibrate_decode(plan: &Plan) -> Result<DecodeCalibration> {
    use railstore_ec::{Code, Codec};
    let Mechanism::Split { code, k, m } = plan.mechanism else {
        bail!("{}: only split objects decode", plan.mechanism);
    };
    let (k, m) = (k as usize, m as usize);
    let n = k + m;
    let codec = Codec::new(Code::new(code, k, m)?)?;
    let shard = plan.request_bytes.div_ceil(k);
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed ^ 0xDEC0DE);
    let mut shards: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; shard]).collect();
    for s in &mut shards[..k] {
        rng.fill(&mut s[..]);
    }
    {
        let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| s.as_mut_slice()).collect();
        codec.encode_shards(&mut refs)?;
    }
    const BATCH: usize = 32;
    const BATCHES: usize = 11;
    let mut us = vec![0.0; n];
    for (first, cost) in us.iter_mut().enumerate().skip(1) {
        let present: Vec<bool> = (0..n).map(|i| (i + n - first) % n < k).collect();
        let decode_once = |shards: &mut Vec<Vec<u8>>| -> Result<()> {
            let mut bufs: Vec<Vec<u8>> = shards
                .iter_mut()
                .zip(&present)
                .map(|(s, &p)| if p { std::mem::take(s) } else { vec![0; shard] })
                .collect();
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            codec.reconstruct_data(&mut refs, &present)?;
            std::hint::black_box(&bufs);
            for (s, (b, &p)) in shards.iter_mut().zip(bufs.into_iter().zip(&present)) {
                if p {
                    *s = b;
                }
            }
            Ok(())
        };
        // Once untimed: builds the decode matrix (the manager's codec caches it too).
        decode_once(&mut shards)?;
        let mut batches = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let t0 = crate::meter::thread_cpu_seconds();
            for _ in 0..BATCH {
                decode_once(&mut shards)?;
            }
            batches.push((crate::meter::thread_cpu_seconds() - t0) / BATCH as f64);
        }
        batches.sort_by(f64::total_cmp);
        *cost = batches[BATCHES / 2] * 1e6;
    }
    let mean_us = us[1..].iter().sum::<f64>() / (n - 1) as f64;
    Ok(DecodeCalibration {
        k,
        m,
        shard_bytes: shard,
        engine: codec.engine().name().to_string(),
        decode_mbps_one_thread: if mean_us > 0.0 {
            plan.request_bytes as f64 / mean_us
        } else {
            0.0
        },
        decode_us_by_first_shard: us,
    })
}

/// erails-decode: for each k, both variants read-only on fresh devices.
fn measure_decode(args: &MixedBenchArgs) -> Result<MixedReport> {
    if let Some(modes) = &args.modes {
        ensure!(
            modes == &[Mode::ReadOnly],
            "erails-decode runs read-only (eRails §6.1 has no writes): drop --modes or give \
             --modes read-only"
        );
    }
    let mut ks = args.ks.clone().unwrap_or(if args.quick {
        vec![2, 3]
    } else {
        vec![2, 3, 4, 5, 6]
    });
    ks.sort_unstable();
    ks.dedup();
    ensure!(
        !ks.is_empty() && ks[0] >= 1 && 2 * ks[ks.len() - 1] <= railstore_ec::SHARDS_MAX,
        "--ks must name values of k from 1 to {}",
        railstore_ec::SHARDS_MAX / 2
    );
    let mut runs = Vec::new();
    let mut calibrations = Vec::new();
    let mut last = None;
    for (i, &k) in ks.iter().enumerate() {
        let mut plan = plan_of(args, k)?;
        let cal = calibrate_decode(&plan)?;
        if !args.quiet {
            if i == 0 {
                println!("{}", plan.describe());
            }
            println!(
                "k = {k}: {} devices, split{k}+{k}, {} objects; decode CPU µs by first window \
                 shard {:?} ({} engine, one thread: {:.0} MB/s of objects)",
                plan.devices,
                plan.objects,
                cal.decode_us_by_first_shard
                    .iter()
                    .map(|u| (u * 10.0).round() / 10.0)
                    .collect::<Vec<_>>(),
                cal.engine,
                cal.decode_mbps_one_thread
            );
            println!("{}", decode_table_header());
        }
        if plan.clock == Clock::Virtual && plan.decode_threads > 0 {
            plan.decode_cost = Some(Arc::new(cal.clone()));
        }
        calibrations.push(cal);
        for variant in [DecodeVariant::NoDecode, DecodeVariant::Decode] {
            plan.decode_variant = Some(variant);
            let rt = plan.runtime()?;
            let r = rt
                .block_on(run_mode(&plan, Mode::ReadOnly, args.quiet))
                .with_context(|| format!("erails-decode k = {k} {}", variant.name()))?;
            drop(rt);
            if !args.quiet {
                println!("{}", decode_table_line(&r));
            }
            runs.push(r);
        }
        plan.decode_variant = None;
        last = Some(plan);
    }
    let plan = last.expect("at least one k");
    let w = plan.runtime()?.block_on(measure_w(&plan))?;
    let (k, m) = plan.readers_writers();
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
        read_share: None,
        trace: None,
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
        write_bound_mbps: plan.write_bound_bps(w) / 1e6,
        buffer_bound_mbps: plan.buffer_bound_bps() / 1e6,
        decode_threads: Some(plan.decode_threads),
        decode_charge: Some(match plan.clock {
            Clock::Virtual if plan.decode_threads == 0 => {
                "none (--decode-threads 0): decoding costs no simulated time".into()
            }
            Clock::Virtual => format!(
                "virtual time: each decoding read holds one of {} modelled core(s) for its \
                 decode's measured CPU time (decode_calibration)",
                plan.decode_threads
            ),
            Clock::Real => "real time: decoding costs its own CPU time".into(),
        }),
        decode_calibration: Some(calibrations),
        runs,
        description: format!(
            "values of k: {ks:?} (m = k, 2k devices each; the lines below are for k = {k})\n{}",
            plan.describe()
        ),
    })
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
    if !args.quiet {
        println!("{}", plan.describe());
    }
    let w = plan.runtime()?.block_on(measure_w(&plan))?;
    let bound = plan.write_bound_bps(w);
    let (k, m) = plan.readers_writers();
    if !args.quiet {
        println!(
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
        );
        println!("{}", table_header());
    }
    let mut runs = Vec::new();
    for &mode in &modes {
        let rt = plan.runtime()?;
        let mut r = rt
            .block_on(run_mode(&plan, mode, args.quiet))
            .with_context(|| format!("{} {}", plan.preset.name(), mode.name()))?;
        drop(rt);
        r.write_pct_of_bound = if bound > 0.0 {
            r.write_mbps * 1e6 / bound * 100.0
        } else {
            0.0
        };
        if !args.quiet {
            println!("{}", table_line(&r));
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

// ---------------------------------------------------------------------------------------------
// Trace replay

#[derive(Debug, Clone, Copy)]
struct TraceOp {
    /// Arrival, simulated ns from the trace's start (already divided by the speed).
    at_ns: u64,
    write: bool,
    /// Where its blocks' dense ids (before folding onto the keys) start in
    /// `Trace::block_ids`; the byte range starts `offset` into the first block.
    ids: usize,
    offset: u64,
    len: u64,
}

#[derive(Debug)]
struct Trace {
    path: PathBuf,
    ops: Vec<TraceOp>,
    /// The dense ids of every request's blocks, request after request.
    block_ids: Vec<u64>,
    block_bytes: usize,
    distinct_blocks: u64,
    speed: f64,
    qd: usize,
}

impl Trace {
    fn load(
        path: &Path,
        format: Option<TraceFormat>,
        block_bytes: usize,
        speed: f64,
        qd: usize,
    ) -> Result<Trace> {
        ensure!(speed > 0.0, "--trace-speed must be positive");
        let raw = crate::trace::read_requests(path, format)?;
        let t0 = raw[0].at_ns;
        let bb = block_bytes as u64;
        let mut ids: std::collections::HashMap<(u64, u64), u64> = Default::default();
        let mut ops = Vec::with_capacity(raw.len());
        let mut block_ids = Vec::with_capacity(raw.len());
        for r in raw {
            let (t, dev, off, len, write) = (r.at_ns, r.device, r.offset, r.len.max(1), r.write);
            let first = off / bb;
            let last = (off + len - 1) / bb;
            // Dense ids by first touch. Each block keeps its own: a request that spans a block
            // seen before and a new one has ids that need not be consecutive.
            let at = block_ids.len();
            for b in first..=last {
                let next = ids.len() as u64;
                block_ids.push(*ids.entry((dev, b)).or_insert(next));
            }
            ops.push(TraceOp {
                at_ns: ((t - t0) / speed) as u64,
                write,
                ids: at,
                offset: off % bb,
                len,
            });
        }
        Ok(Trace {
            path: path.to_path_buf(),
            distinct_blocks: ids.len() as u64,
            ops,
            block_ids,
            block_bytes,
            speed,
            qd,
        })
    }

    /// The dense ids of `op`'s blocks, in offset order.
    fn blocks(&self, op: &TraceOp) -> &[u64] {
        let n = (op.offset + op.len).div_ceil(self.block_bytes as u64) as usize;
        &self.block_ids[op.ids..op.ids + n]
    }

    fn read_pct(&self) -> f64 {
        100.0 * self.ops.iter().filter(|o| !o.write).count() as f64 / self.ops.len() as f64
    }

    fn span_s(&self) -> f64 {
        self.ops.last().map_or(0.0, |o| o.at_ns as f64 / 1e9)
    }
}

/// Replays the trace open loop (looping it until the deadline); a request's latency counts
/// from its arrival and covers every block it touches.
async fn replay(ctx: Arc<Ctx>, trace: Arc<Trace>, writes: bool) -> Result<()> {
    // Reads and writes queue apart: with one shared limit, writes that separation throttles
    // (paced or waiting for buffer room) fill every slot and the reads' latency would measure
    // the write throttle, not the devices.
    let slots = [
        Arc::new(Semaphore::new(trace.qd.max(1))),
        Arc::new(Semaphore::new(trace.qd.max(1))),
    ];
    let span = trace.ops.last().map_or(0, |o| o.at_ns) + 1_000_000;
    let bb = trace.block_bytes as u64;
    let objects = ctx.plan.objects;
    let mut tasks = tokio::task::JoinSet::new();
    let mut value = vec![0u8; trace.block_bytes];
    ChaCha8Rng::seed_from_u64(ctx.plan.seed).fill(&mut value[..]);
    let value: Arc<[u8]> = value.into();
    'outer: for round in 0u64.. {
        for op in &trace.ops {
            if op.write && !writes {
                continue;
            }
            let at = ctx.start + ctx.plan.dur((round * span + op.at_ns) as f64 / 1e9);
            if at >= ctx.deadline {
                break 'outer;
            }
            tokio::time::sleep_until(at).await;
            let (ctx2, slots, op, value) = (
                ctx.clone(),
                slots[op.write as usize].clone(),
                *op,
                value.clone(),
            );
            let trace = trace.clone();
            ctx.trace_pending[op.write as usize].fetch_add(1, Ordering::Relaxed);
            tasks.spawn(async move {
                let _slot = slots.acquire_owned().await.expect("semaphore open");
                let parts = trace.blocks(&op).iter().enumerate().map(|(j, &id)| {
                    let j = j as u64;
                    let key = object_key(id % objects);
                    let lo = if j == 0 { op.offset } else { 0 };
                    let hi = ((op.offset + op.len) - j * bb).min(bb);
                    let (m, value) = (ctx2.manager.clone(), value.clone());
                    async move {
                        if op.write {
                            m.put(&key, &value, StoreMode::Upsert, None).await?;
                        } else {
                            m.get(
                                &key,
                                ReadRange {
                                    offset: lo,
                                    len: Some(hi - lo),
                                },
                            )
                            .await?;
                        }
                        Ok::<(), anyhow::Error>(())
                    }
                });
                for r in join_all(parts).await {
                    r?;
                }
                ctx2.record(op.write, at, op.len);
                ctx2.trace_pending[op.write as usize].fetch_sub(1, Ordering::Relaxed);
                Ok::<(), anyhow::Error>(())
            });
            while let Some(r) = tasks.try_join_next() {
                r.context("a trace request panicked")??;
            }
        }
        if trace.ops.iter().all(|o| o.write && !writes) {
            break;
        }
    }
    // Requests still waiting past the deadline are abandoned with the writes; the report
    // counts them (`trace_pending`), as their latency never reaches the percentiles.
    let grace = Instant::now() + ctx.plan.dur(0.05);
    while !tasks.is_empty() {
        tokio::select! {
            r = tasks.join_next() => {
                if let Some(r) = r {
                    r.context("a trace request panicked")??;
                }
            }
            _ = tokio::time::sleep_until(grace) => {
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Output

fn table_header() -> String {
    format!(
        "{:<10} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>7} {:>10} {:>8} {:>7}",
        "mode",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "p99.99µs",
        ">1ms",
        ">10ms",
        "read MB/s",
        "write MB/s",
        "% bound",
        "buf max",
        "off-win",
        "wall s"
    )
}

fn table_line(r: &RunReport) -> String {
    format!(
        "{:<10} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>8} {:>9.1} {:>9.1} {:>7.1} {:>10} {:>8} {:>7.1}",
        r.mode.name(),
        r.read_p50_us,
        r.read_p99_us,
        r.read_p999_us,
        r.read_p9999_us,
        r.reads_over_1ms,
        r.reads_over_10ms,
        r.read_mbps,
        r.write_mbps,
        r.write_pct_of_bound,
        human_bytes(r.buffer_bytes_max),
        if r.mode == Mode::Mixed {
            "-".to_string()
        } else {
            r.device_reads_outside_window.to_string()
        },
        r.wall_s
    )
}

fn decode_table_header() -> String {
    format!(
        "{:<3} {:<10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7}",
        "k",
        "variant",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "read MB/s",
        "decodes",
        "predicted",
        "charge ms",
        "busy %",
        "wall s"
    )
}

fn decode_table_line(r: &RunReport) -> String {
    format!(
        "{:<3} {:<10} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>9} {:>9.1} {:>8.1} {:>7.1}",
        r.k.unwrap_or(0),
        r.variant.map_or("-", DecodeVariant::name),
        r.read_p50_us,
        r.read_p99_us,
        r.read_p999_us,
        r.read_mbps,
        r.decodes,
        r.decoding_reads.unwrap_or(0),
        r.decode_charged_ms.unwrap_or(0.0),
        r.decode_busy_pct.unwrap_or(0.0),
        r.wall_s
    )
}

impl RunReport {
    /// The run's name in the CSV series and plots: the mode, or `k3-decode` in erails-decode.
    pub fn label(&self) -> String {
        match (self.k, self.variant) {
            (Some(k), Some(v)) => format!("k{k}-{}", v.name()),
            _ => self.mode.name().to_string(),
        }
    }
}

/// erails-decode: one line per k and variant.
pub fn decode_csv(report: &MixedReport) -> String {
    let mut s = String::from(
        "k,variant,read_mbps,read_p50_us,read_p99_us,read_p999_us,reads,decodes,\
         decoding_reads,decode_charged_ms,decode_busy_pct\n",
    );
    for r in &report.runs {
        let _ = writeln!(
            s,
            "{},{},{:.1},{:.1},{:.1},{:.1},{},{},{},{:.1},{:.1}",
            r.k.unwrap_or(0),
            r.variant.map_or("-", DecodeVariant::name),
            r.read_mbps,
            r.read_p50_us,
            r.read_p99_us,
            r.read_p999_us,
            r.reads,
            r.decodes,
            r.decoding_reads.unwrap_or(0),
            r.decode_charged_ms.unwrap_or(0.0),
            r.decode_busy_pct.unwrap_or(0.0)
        );
    }
    s
}

/// Per-second read and write MB/s and read IOPS of every mode.
pub fn series_csv(report: &MixedReport) -> String {
    let mut s = String::from("mode,second,read_mbps,write_mbps,read_iops,write_iops\n");
    let per_s = (1.0 / BUCKET_S).round() as usize;
    for r in &report.runs {
        for (i, chunk) in r.buckets.chunks(per_s).enumerate() {
            let secs = chunk.len() as f64 * BUCKET_S;
            let sum = |f: fn(&Bucket) -> u64| chunk.iter().map(f).sum::<u64>() as f64 / secs;
            let _ = writeln!(
                s,
                "{},{},{:.3},{:.3},{:.1},{:.1}",
                r.label(),
                i,
                sum(|b| b.read_bytes) / 1e6,
                sum(|b| b.write_bytes) / 1e6,
                sum(|b| b.reads),
                sum(|b| b.writes)
            );
        }
    }
    s
}

/// Every device's role and buffer at every sample of every mode.
pub fn buffer_csv(report: &MixedReport) -> String {
    let mut s = String::from(
        "mode,time_s,device,role,buffer_bytes,flushed_bytes,buffer_reads,decodes,partial_frames\n",
    );
    for r in &report.runs {
        for smp in &r.samples {
            for (d, role) in smp.roles.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "{},{:.3},{d},{},{},{},{},{},{}",
                    r.label(),
                    smp.t_s,
                    match role {
                        Role::Reader => "reader",
                        Role::Writer => "writer",
                        Role::Guard => "guard",
                    },
                    smp.buffer_bytes[d],
                    smp.flushed_bytes[d],
                    smp.buffer_reads[d],
                    smp.decodes,
                    smp.partial_frames,
                );
            }
        }
    }
    s
}

/// Read IOPS of every 100 ms interval, sorted: (IOPS, fraction of intervals at or below).
fn iops_cdf(r: &RunReport) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = r
        .buckets
        .iter()
        .map(|b| b.reads as f64 / BUCKET_S)
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.into_iter()
        .enumerate()
        .map(|(i, x)| (x, (i + 1) as f64 / n))
        .collect()
}

/// The read IOPS CDF of every mode.
pub fn iops_cdf_csv(report: &MixedReport) -> String {
    let mut s = String::from("mode,read_iops,fraction\n");
    for r in &report.runs {
        for (x, f) in iops_cdf(r) {
            let _ = writeln!(s, "{},{x:.1},{f:.4}", r.label());
        }
    }
    s
}

/// erails-decode: read MB/s against k, both variants, and what the modelled cores can decode.
fn decode_plot(report: &MixedReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let line = |v: DecodeVariant| -> Vec<(f64, f64)> {
        report
            .runs
            .iter()
            .filter(|r| r.variant == Some(v))
            .map(|r| (r.k.unwrap_or(0) as f64, r.read_mbps))
            .collect()
    };
    let threads = report.decode_threads.unwrap_or(1);
    let mut series = vec![
        Series {
            name: "no decoding (data shards in the window)".into(),
            points: line(DecodeVariant::NoDecode),
        },
        Series {
            name: if threads == 0 {
                "decoding (not charged)".into()
            } else {
                format!("decoding ({threads} decode thread(s))")
            },
            points: line(DecodeVariant::Decode),
        },
    ];
    if report.clock == Clock::Virtual && threads > 0 {
        series.push(Series {
            name: format!("decode capacity of {threads} thread(s)"),
            points: report
                .decode_calibration
                .iter()
                .flatten()
                .map(|c| (c.k as f64, c.decode_mbps_one_thread * threads as f64))
                .collect(),
        });
    }
    Chart {
        title: &format!(
            "erails-decode: read throughput against k (k = m, {} reads)",
            human_bytes(report.request_bytes as u64)
        ),
        x_label: "k (readers; 2k devices)",
        y_label: "read MB/s",
        x_axis: XAxis::Linear,
        series,
    }
    .write(dir, "read_vs_k")
}

fn plots(report: &MixedReport, dir: &Path) -> Result<Vec<PathBuf>> {
    if report.preset == Preset::ErailsDecode {
        return decode_plot(report, dir);
    }
    let mut files = Vec::new();
    let per_s = (1.0 / BUCKET_S).round() as usize;
    let per_second = |r: &RunReport, f: fn(&Bucket) -> u64| -> Vec<(f64, f64)> {
        r.buckets
            .chunks(per_s)
            .enumerate()
            .map(|(i, c)| {
                let secs = c.len() as f64 * BUCKET_S;
                (i as f64, c.iter().map(f).sum::<u64>() as f64 / secs / 1e6)
            })
            .collect()
    };
    let title = format!(
        "{} ({}, {} devices): throughput per second",
        report.preset.name(),
        report.mechanism,
        report.devices
    );
    let mut series = Vec::new();
    for r in &report.runs {
        series.push(Series {
            name: format!("{} reads", r.label()),
            points: per_second(r, |b| b.read_bytes),
        });
        if r.writes > 0 {
            series.push(Series {
                name: format!("{} writes", r.label()),
                points: per_second(r, |b| b.write_bytes),
            });
        }
    }
    files.extend(
        Chart {
            title: &title,
            x_label: "simulated second",
            y_label: "MB/s",
            x_axis: XAxis::Linear,
            series,
        }
        .write(dir, "throughput")?,
    );
    if let Some(r) = report.runs.iter().find(|r| r.mode == Mode::Separated) {
        let title = format!(
            "{}: write buffer per device (separated)",
            report.preset.name()
        );
        let series = (0..report.devices)
            .map(|d| Series {
                name: format!("device {d}"),
                points: r
                    .samples
                    .iter()
                    .map(|s| (s.t_s, s.buffer_bytes[d] as f64 / (1 << 20) as f64))
                    .collect(),
            })
            .collect();
        files.extend(
            Chart {
                title: &title,
                x_label: "simulated second",
                y_label: "MiB buffered",
                x_axis: XAxis::Linear,
                series,
            }
            .write(dir, "buffer")?,
        );
    }
    let title = format!(
        "{}: CDF of read IOPS per {} ms",
        report.preset.name(),
        BUCKET_S * 1000.0
    );
    let series = report
        .runs
        .iter()
        .map(|r| Series {
            name: r.label(),
            points: iops_cdf(r),
        })
        .collect();
    files.extend(
        Chart {
            title: &title,
            x_label: "read IOPS",
            y_label: "fraction of intervals",
            x_axis: XAxis::Linear,
            series,
        }
        .write(dir, "iops_cdf")?,
    );
    Ok(files)
}

/// erails-decode's Markdown summary: read MB/s per k and variant, and the decode costs.
fn decode_summary(report: &MixedReport) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## mixed bench: erails-decode\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    for line in report.description.lines() {
        let _ = writeln!(s, "- {line}");
    }
    if let Some(c) = &report.decode_charge {
        let _ = writeln!(s, "- decoding: {c}");
    }
    let _ = writeln!(
        s,
        "\n| k | devices | variant | read MB/s | vs no-decode | read p50 µs | p99 µs | p99.9 µs \
         | reads | decodes | decoding reads | decode charged ms | decode busy % | wall s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &report.runs {
        let base = report
            .runs
            .iter()
            .find(|b| b.k == r.k && b.variant == Some(DecodeVariant::NoDecode))
            .map_or(0.0, |b| b.read_mbps);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {:.1} | {:.1} \
             | {:.1} |",
            r.k.unwrap_or(0),
            2 * r.k.unwrap_or(0),
            r.variant.map_or("-", DecodeVariant::name),
            r.read_mbps,
            if base > 0.0 {
                format!("{:.1} %", r.read_mbps / base * 100.0)
            } else {
                "-".into()
            },
            r.read_p50_us,
            r.read_p99_us,
            r.read_p999_us,
            r.reads,
            r.decodes,
            r.decoding_reads.unwrap_or(0),
            r.decode_charged_ms.unwrap_or(0.0),
            r.decode_busy_pct.unwrap_or(0.0),
            r.wall_s
        );
    }
    let _ = writeln!(
        s,
        "\nDecode CPU time measured before the runs (median of batches, thread CPU time), by the \
         first shard s of the window's run of k shards (s = 0: the data shards):\n\n\
         | k | shard bytes | engine | decode µs for s = 1 .. 2k-1 | one thread MB/s |\n\
         |---|---|---|---|---|"
    );
    for c in report.decode_calibration.iter().flatten() {
        let us: Vec<String> = c.decode_us_by_first_shard[1..]
            .iter()
            .map(|u| format!("{u:.1}"))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} |",
            c.k,
            c.shard_bytes,
            c.engine,
            us.join(", "),
            c.decode_mbps_one_thread
        );
    }
    let _ = writeln!(
        s,
        "\n`decodes`: segments the manager rebuilt from parity (its counter); `decoding reads`: \
         reads the bench expected to decode from the placement and the window (the two agree \
         when the variants do what they say). `decode busy %`: charged decode time over the \
         modelled cores' time. The top-level JSON fields (devices, write bound) describe the \
         largest k."
    );
    s
}

/// The Markdown summary: what ran, on what, and the table.
pub fn summary(report: &MixedReport) -> String {
    if report.preset == Preset::ErailsDecode {
        return decode_summary(report);
    }
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## mixed bench: {}\n", report.preset.name());
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    for line in report.description.lines() {
        let _ = writeln!(s, "- {line}");
    }
    let _ = writeln!(
        s,
        "- w = {:.0} MB/s (one SSD, sequential piece-sized writes, preconditioned); eRails bound \
         k m w / (k + m) = {:.0} MB/s; the buffers allow {:.0} MB/s\n",
        report.w_mbps, report.write_bound_mbps, report.buffer_bound_mbps
    );
    let _ = writeln!(
        s,
        "| mode | read p50 µs | p99 µs | p99.9 µs | p99.99 µs | reads > 1 ms | > 10 ms | read MB/s \
         | write MB/s | % of bound | write p99 µs | write max µs | buffer max | coalesced \
         | reads outside window | GC runs | decodes | wall s | CPU s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &report.runs {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} \
             | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            r.mode.name(),
            r.read_p50_us,
            r.read_p99_us,
            r.read_p999_us,
            r.read_p9999_us,
            r.reads_over_1ms,
            r.reads_over_10ms,
            r.read_mbps,
            r.write_mbps,
            r.write_pct_of_bound,
            r.write_p99_us,
            r.write_max_us,
            human_bytes(r.buffer_bytes_max),
            r.coalesced_ops,
            if r.mode == Mode::Mixed {
                "-".to_string()
            } else {
                r.device_reads_outside_window.to_string()
            },
            r.gc_runs,
            r.decodes,
            r.wall_s,
            r.cpu_s
        );
    }
    if report.trace.is_some() {
        let left: Vec<String> = report
            .runs
            .iter()
            .map(|r| {
                format!(
                    "{} {} reads, {} writes",
                    r.label(),
                    r.trace_reads_abandoned.unwrap_or(0),
                    r.trace_writes_abandoned.unwrap_or(0)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "\nTrace requests still unfinished 50 simulated ms after the measured time (abandoned; \
             in no percentile): {}. Trace latencies count from each request's arrival in the \
             trace (open loop).",
            left.join("; ")
        );
    }
    let _ = writeln!(
        s,
        "\nLatencies are simulated time from dispatch to completion (closed loop). `% of bound` \
         is write MB/s over the eRails bound. `coalesced`: buffered writes replaced by a newer \
         write of the same piece before their flush (the worst case has none). `reads outside \
         window`: device reads that reached a writer or guarding device (separation on). \
         `decodes`: segments rebuilt from parity. `CPU s`: process CPU time of the measured \
         phase{}.",
        if report.cpu_time_charged {
            ""
        } else {
            ", which costs no simulated time"
        }
    );
    s
}

fn write_file(path: &Path, body: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))
}

/// Runs `railstore bench mixed`: prints the table, writes `--json` and `--out`.
pub fn run(args: &MixedBenchArgs) -> Result<()> {
    let report = measure_mixed(args)?;
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(p) = &args.json {
        write_file(p, &json)?;
    }
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let mut written = Vec::new();
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
        for (name, body) in files {
            let p = out.join(name);
            write_file(&p, &body)?;
            written.push(p);
        }
        if !args.no_plots {
            match plots(&report, out) {
                Ok(files) => written.extend(files),
                Err(e) => println!("plots skipped: {e:#}"),
            }
        }
        if !args.quiet {
            println!("wrote:");
            for p in written {
                println!("  {}", p.display());
            }
        }
    } else if !args.quiet {
        println!("(--out DIR writes the per-second series, buffer occupancy, IOPS CDF and plots)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_plan_their_arrays() {
        let p = plan_of(&MixedBenchArgs::new(Preset::Groups12), 0).unwrap();
        assert_eq!((p.devices, p.colours, p.window), (12, 6, 3));
        let colours = p.colours_of().unwrap();
        assert_eq!(colours, (0..12).map(|d| d % 6).collect::<Vec<_>>());
        let r = plan_of(&MixedBenchArgs::new(Preset::Rails2), 0).unwrap();
        assert_eq!((r.window, r.colours, r.write_factor), (1, 2, 2.0));
        // Rails: one reader, one writer: w / 2; groups-12: two sets of k = m = 3: 2 x 1.5 w.
        assert_eq!(r.write_bound_bps(100.0), 50.0);
        assert_eq!(p.write_bound_bps(100.0), 300.0);
        let k3 = plan_of(&MixedBenchArgs::new(Preset::ErailsK3), 0).unwrap();
        assert_eq!(k3.writes_per_read, Some(1.0 / 3.0));
        // 128 KiB over k = 3: 43 691 B shards + header -> 11 units.
        assert_eq!(k3.piece_device_bytes, 11 * 4096);
        // erails-decode: 2k devices, k readers, no writes, every object readable.
        let d = plan_of(&MixedBenchArgs::new(Preset::ErailsDecode), 4).unwrap();
        assert_eq!((d.devices, d.colours, d.window), (8, 8, 4));
        assert_eq!((d.write_streams, d.read_objects()), (0, d.objects));
    }

    #[test]
    fn overwrites_of_a_key_stay_more_than_recent_writes_apart() {
        let mut w = WriteOrder::new(100, 200, 40, 7);
        let mut last = std::collections::HashMap::new();
        for i in 0..5000usize {
            let k = w.next();
            assert!((100..200).contains(&k));
            if let Some(prev) = last.insert(k, i) {
                assert!(i - prev > 40, "key {k} at {prev} and {i}");
            }
        }
        assert_eq!(last.len(), 100);
    }

    #[test]
    fn traces_parse_in_every_format() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("m.trace", "100 0 8 16 1\n200 1 8 8 0\n", TraceFormat::Mqsim),
            (
                "h.trace",
                "0.000 0 4096 8192 0\n1.500 0 0 4096 1\n",
                TraceFormat::Heimdall,
            ),
            (
                "c.csv",
                "version,time,op,size,lbn\n1,10,2a,512,8\n1,12,28,1024,8\n1,13,12,512,8\n",
                TraceFormat::Cloudphysics,
            ),
        ];
        for (name, body, _) in cases {
            let p = dir.path().join(name);
            std::fs::write(&p, body).unwrap();
            let t = Trace::load(&p, None, 4096, 1.0, 8).unwrap();
            assert_eq!(t.ops.len(), 2, "{name}: {t:?}");
            assert_eq!(t.ops[0].at_ns, 0, "{name}");
        }
        let t = Trace::load(&dir.path().join("h.trace"), None, 4096, 2.0, 8).unwrap();
        // 8 KiB at 4 KiB spans blocks 1 and 2; then block 0: three distinct blocks.
        assert_eq!(t.distinct_blocks, 3);
        assert_eq!(t.ops[1].at_ns, 750_000);
        assert!(t.ops[0].write && !t.ops[1].write);
        assert_eq!(t.blocks(&t.ops[0]), [0, 1]);
        assert_eq!(t.blocks(&t.ops[1]), [2]);
    }

    #[test]
    fn a_request_over_a_known_and_a_new_block_keeps_each_blocks_id() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.trace");
        // Block 1, then block 0, then blocks 1 and 2 (id 0 and a new id 2: not consecutive),
        // then 100 bytes inside block 2 from byte 4000, which reach into block 3.
        std::fs::write(
            &p,
            "0.000 0 4096 4096 0\n1.000 0 0 4096 1\n2.000 0 4096 8192 1\n\
             3.000 0 12192 200 1\n",
        )
        .unwrap();
        let t = Trace::load(&p, None, 4096, 1.0, 8).unwrap();
        let ids: Vec<&[u64]> = t.ops.iter().map(|o| t.blocks(o)).collect();
        assert_eq!(ids, [&[0][..], &[1], &[0, 2], &[2, 3]]);
        assert_eq!(t.distinct_blocks, 4);
        assert_eq!((t.ops[3].offset, t.ops[3].len), (4000, 200));
    }
}
