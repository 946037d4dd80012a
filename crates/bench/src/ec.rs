//! `railstore ec-bench`: EC-Bench (Shi, Lu, Panda) for railstore's coders. Encode and decode
//! sweeps over k, m, chunk size, engine and threads; latency, throughput (eq. 1), normalized
//! throughput (eq. 2), CPU utilisation and cache pressure; a table, JSON, CSV, a Markdown
//! summary and plots.

pub use crate::ec_report::to_csv;
use crate::ec_report::{write_outputs, GpuSummary};
use crate::meter::{CpuMeter, CpuSample};
use crate::plot::{human_bytes, parse_bytes};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use railstore_ec::bench::{DataSet, Op};
use railstore_ec::{Code, CodeId, Codec, Engine};
use serde::Serialize;
use std::path::PathBuf;

/// Options of `railstore ec-bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct EcBenchArgs {
    /// Data shards; a comma list. With --m, every k is paired with every m.
    #[arg(long, value_delimiter = ',')]
    pub k: Vec<usize>,
    /// Parity shards; a comma list.
    #[arg(long, value_delimiter = ',')]
    pub m: Vec<usize>,
    /// Exact (k, m) pairs as K+M, e.g. `6+3,10+4`; adds to --k/--m.
    #[arg(long, value_delimiter = ',')]
    pub config: Vec<String>,
    /// Word size in bits; railstore codes over GF(2^8), so only 8.
    #[arg(long, default_value_t = 8)]
    pub w: u32,
    /// Chunk sizes: a comma list (`4K,64K`) or a doubling range (`1-64M`), 1 B to 64 MiB.
    #[arg(long)]
    pub chunk: Option<String>,
    /// Size D of the in-memory data set of user data each point cycles through (at least one
    /// block of k chunks).
    #[arg(long, default_value = "1M")]
    pub data_size: String,
    /// Engine: a name, a comma list, `auto` (what railstore picks here) or `all`.
    #[arg(long, default_value = "all")]
    pub engine: String,
    /// Coding threads per operation; a comma list.
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Which operations to time.
    #[arg(long, value_enum, default_value_t = OpChoice::Both)]
    pub op: OpChoice,
    /// The code family.
    #[arg(long, default_value = "cauchy")]
    pub code: String,
    /// A small subset that runs in well under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Measurements per point; the median is reported.
    #[arg(long)]
    pub repeat: Option<usize>,
    /// Seconds of coding per measurement (at least 3 operations).
    #[arg(long)]
    pub min_time: Option<f64>,
    /// Seed of the data and the erasure patterns.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Folder for results.json, results.csv, summary.md and the plots.
    #[arg(long, default_value = "ec-bench-out")]
    pub out: PathBuf,
    /// Also write the JSON array here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write the CSV here.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Skip the plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Also time another coder in the same run: `klauspost` (klauspost/reedsolomon, built
    /// with the machine's Go; skipped with the reason where Go is missing).
    #[arg(long)]
    pub against: Option<String>,
    /// Pin the process (and the coders it starts) to this CPU, for single-core figures.
    #[arg(long)]
    pub pin: Option<usize>,
    /// User data each offload point (`cuda-kernel`, `cuda-h2h`) codes per pass: enough
    /// stripes to fill the GPU and to be several times its cache.
    #[arg(long, default_value = "256M")]
    pub gpu_data_size: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OpChoice {
    Encode,
    Decode,
    Both,
}

/// One measured point, as written to JSON and CSV.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub engine: String,
    pub op: String,
    pub code: String,
    pub k: usize,
    pub m: usize,
    pub w: u32,
    pub chunk: usize,
    pub threads: usize,
    pub data_size: usize,
    pub repeats: usize,
    pub ops: u64,
    /// User bytes per second / 1e9, median over repeats.
    pub data_gbps: f64,
    /// EC-Bench Thr = D/t * (k+m)/k, MB/s.
    pub thr_mbps: f64,
    /// EC-Bench normalized throughput = (k-1)m/(k+m) * Thr, MB/s.
    pub norm_thr_mbps: f64,
    pub lat_mean_us: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    /// CPU cycles per second of coding time (EC-Bench eq. 3); null without counters.
    pub cycles_per_s: Option<f64>,
    /// L1D read misses per second of coding time (EC-Bench eq. 4); null without counters.
    pub l1d_misses_per_s: Option<f64>,
    /// Process CPU seconds per second of coding time (all threads).
    pub cpu_s_per_s: f64,
}

pub(crate) struct Plan {
    code: CodeId,
    configs: Vec<(usize, usize)>,
    chunks: Vec<usize>,
    threads: Vec<usize>,
    engines: Vec<Engine>,
    ops: Vec<Op>,
    /// The eRails k = m sweep of the default run: 256 KiB chunks, 1 and 2 threads.
    erails: Vec<(usize, usize)>,
    pub(crate) data_size: usize,
    pub(crate) repeat: usize,
    min_time_s: f64,
}

/// A group of points that differ only in engine: measured interleaved so engine ratios come
/// from the same moments of a noisy machine.
#[derive(Clone, Copy)]
struct Group {
    op: Op,
    k: usize,
    m: usize,
    chunk: usize,
    threads: usize,
}

/// One measured point as the other coders (offload, klauspost) need it.
#[derive(Clone, Copy, Debug)]
pub struct Point {
    pub code: CodeId,
    pub op: Op,
    pub k: usize,
    pub m: usize,
    pub chunk: usize,
    pub repeat: usize,
    pub min_time_s: f64,
}

impl Point {
    fn of(plan: &Plan, g: Group) -> Point {
        Point {
            code: plan.code,
            op: g.op,
            k: g.k,
            m: g.m,
            chunk: g.chunk,
            repeat: plan.repeat,
            min_time_s: plan.min_time_s,
        }
    }
}

/// What one coder measured at a point; [`Point::row`] adds the figures EC-Bench derives.
pub struct Measurement {
    /// User bytes per second / 1e9, median over repeats.
    pub data_gbps: f64,
    /// Latency of one operation: mean, p50, p99, in microseconds.
    pub lat_us: [f64; 3],
    pub ops: u64,
    pub threads: usize,
    /// User data the point cycled through.
    pub data_size: usize,
    pub cpu_s_per_s: f64,
}

impl Point {
    /// The row of `engine` at this point: eq. 1 (Thr) and eq. 2 (normalized throughput) from
    /// the measured user-data rate; no hardware counters.
    pub fn row(&self, engine: &str, m: Measurement) -> Row {
        let (kf, mf) = (self.k as f64, self.m as f64);
        let thr_mbps = m.data_gbps * 1e3 * (kf + mf) / kf;
        Row {
            engine: engine.to_string(),
            op: self.op.name().to_string(),
            code: self.code.name().to_string(),
            k: self.k,
            m: self.m,
            w: 8,
            chunk: self.chunk,
            threads: m.threads,
            data_size: m.data_size,
            repeats: self.repeat,
            ops: m.ops,
            data_gbps: m.data_gbps,
            thr_mbps,
            norm_thr_mbps: (kf - 1.0) * mf / (kf + mf) * thr_mbps,
            lat_mean_us: m.lat_us[0],
            lat_p50_us: m.lat_us[1],
            lat_p99_us: m.lat_us[2],
            cycles_per_s: None,
            l1d_misses_per_s: None,
            cpu_s_per_s: m.cpu_s_per_s,
        }
    }
}

/// Mean, p50 and p99 of `v` (sorted here), each times `scale`.
pub(crate) fn latency_summary<T: Copy + Into<f64>>(v: &mut [T], scale: f64) -> [f64; 3] {
    v.sort_by(|a, b| (*a).into().total_cmp(&(*b).into()));
    let pct = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize].into() * scale;
    let mean = v.iter().map(|&x| x.into()).sum::<f64>() / v.len() as f64 * scale;
    [mean, pct(0.5), pct(0.99)]
}

const CHUNK_MAX: usize = 64 << 20;

fn parse_chunks(s: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let (mut a, b) = (parse_bytes(a)? as usize, parse_bytes(b)? as usize);
            if a == 0 || a > b {
                bail!("chunk range {part:?} must go from a smaller to a larger positive size");
            }
            while a <= b {
                out.push(a);
                a *= 2;
            }
        } else {
            out.push(parse_bytes(part)? as usize);
        }
    }
    if out.is_empty() {
        bail!("--chunk names no size");
    }
    if let Some(bad) = out.iter().find(|&&c| c == 0 || c > CHUNK_MAX) {
        bail!("chunk size {bad} is outside 1 B ..= 64 MiB");
    }
    Ok(out)
}

fn parse_engines(s: &str) -> Result<Vec<Engine>> {
    if s == "all" {
        return Ok(Engine::available());
    }
    let mut out = Vec::new();
    for name in s.split(',').filter(|p| !p.is_empty()) {
        let e = Engine::from_name(name)?;
        e.check_available()?;
        if !out.contains(&e) {
            out.push(e);
        }
    }
    if out.is_empty() {
        bail!("--engine names no engine");
    }
    Ok(out)
}

fn plan(args: &EcBenchArgs) -> Result<Plan> {
    if args.w != 8 {
        bail!(
            "--w {}: railstore codes over GF(2^8), so w must be 8",
            args.w
        );
    }
    let code: CodeId = args.code.parse()?;
    let mut configs: Vec<(usize, usize)> = Vec::new();
    for c in &args.config {
        let (k, m) = c
            .split_once('+')
            .with_context(|| format!("--config {c:?} is not K+M like 6+3"))?;
        configs.push((k.trim().parse()?, m.trim().parse()?));
    }
    match (args.k.is_empty(), args.m.is_empty()) {
        (false, false) => {
            for &k in &args.k {
                for &m in &args.m {
                    configs.push((k, m));
                }
            }
        }
        (true, true) => {}
        _ => bail!("--k and --m go together"),
    }
    for &(k, m) in &configs {
        Code::new(code, k, m)?;
    }
    let explicit = !configs.is_empty();
    let mut erails = Vec::new();
    let (default_chunks, default_engines, default_threads): (&str, &str, Vec<usize>) = if args.quick
    {
        if !explicit {
            configs = vec![(6, 3), (10, 4)];
        }
        let engines = if Engine::Isal.is_available() {
            "auto,isal"
        } else {
            "auto"
        };
        (("4K,64K"), engines, vec![1])
    } else {
        if !explicit {
            configs = vec![(3, 2), (6, 3), (10, 4), (17, 3)];
            erails = (2..=10).map(|k| (k, k)).collect();
        }
        ("1,16,256,1K,4K,16K,64K,256K,1M,4M", "all", vec![1])
    };
    let chunks = parse_chunks(args.chunk.as_deref().unwrap_or(default_chunks))?;
    let engine_spec = if args.engine == "all" && args.quick {
        default_engines
    } else {
        &args.engine
    };
    let threads = if args.threads.is_empty() {
        default_threads
    } else {
        args.threads.clone()
    };
    if threads.contains(&0) {
        bail!("--threads must be at least 1");
    }
    let ops = match args.op {
        OpChoice::Encode => vec![Op::Encode],
        OpChoice::Decode => vec![Op::Decode],
        OpChoice::Both => vec![Op::Encode, Op::Decode],
    };
    Ok(Plan {
        code,
        configs,
        chunks,
        threads,
        engines: parse_engines(engine_spec)?,
        ops,
        erails,
        data_size: parse_bytes(&args.data_size)? as usize,
        repeat: args.repeat.unwrap_or(if args.quick { 3 } else { 5 }).max(1),
        min_time_s: args
            .min_time
            .unwrap_or(if args.quick { 0.03 } else { 0.05 }),
    })
}

impl Plan {
    fn groups(&self) -> Vec<Group> {
        let mut g = Vec::new();
        for &op in &self.ops {
            for &(k, m) in &self.configs {
                for &chunk in &self.chunks {
                    for &threads in &self.threads {
                        g.push(Group {
                            op,
                            k,
                            m,
                            chunk,
                            threads,
                        });
                    }
                }
            }
            for &(k, m) in &self.erails {
                for threads in [1, 2] {
                    g.push(Group {
                        op,
                        k,
                        m,
                        chunk: 256 << 10,
                        threads,
                    });
                }
            }
        }
        g
    }
}

struct Measured {
    rates: Vec<f64>,
    lat_ns: Vec<u64>,
    ops: u64,
    coding_ns: u64,
    cpu: CpuSample,
}

/// Runs the benchmark described by `args`, printing a table and writing the files.
pub fn run(args: &EcBenchArgs) -> Result<Vec<Row>> {
    let plan = plan(args)?;
    // Counters first, so the coding threads started later inherit them.
    let mut meter = CpuMeter::new();
    let groups = plan.groups();
    let measured = |g: &Group| {
        plan.engines
            .iter()
            .filter(|e| !(e.is_offload() && g.threads > 1))
            .count()
    };
    let total = (groups.iter().map(measured).sum::<usize>() * plan.repeat) as u64;
    println!(
        "ec-bench: {} code, engines [{}], railstore's own pick here: {}; {} points x {} repeats, D = {}",
        plan.code.name(),
        plan.engines.iter().map(|e| e.name()).collect::<Vec<_>>().join(", "),
        Engine::auto()?,
        groups.iter().map(measured).sum::<usize>(),
        plan.repeat,
        human_bytes(plan.data_size as u64),
    );
    println!("machine: {}", machine_description());
    match meter.unavailable() {
        Some(why) => println!(
            "hardware counters unavailable ({why}): CPU utilisation is reported as process CPU \
             seconds per coding second; cycles and L1D misses are left empty"
        ),
        None => println!("hardware counters: cycles and L1D read misses via perf_event_open"),
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} measurements {elapsed_precise} {msg}")
            .expect("static template"),
    );
    say(&pb, table_header());
    if let Some(cpu) = args.pin {
        if plan.threads.iter().any(|&t| t > 1) {
            bail!("--pin {cpu} runs on one core: use --threads 1");
        }
        crate::ec_klauspost::pin_to_cpu(cpu)?;
        println!("pinned to CPU {cpu}");
    }
    let klauspost = match args.against.as_deref() {
        None => None,
        Some("klauspost") => match crate::ec_klauspost::Klauspost::build(&args.out) {
            Ok(k) => Some(k),
            Err(e) => {
                println!("--against klauspost skipped: {e:#}");
                None
            }
        },
        Some(other) => bail!("--against {other:?}: the only other coder is `klauspost`"),
    };
    let mut offload = Offload::open(&plan, args)?;
    if let Some(o) = &offload {
        say(&pb, o.describe());
    }
    let mut rows = Vec::new();
    let mut klauspost_version: Option<String> = None;
    for g in groups {
        rows.extend(measure_group(&plan, g, &mut meter, &pb)?);
        if let Some(kp) = klauspost.as_ref().filter(|_| g.threads == 1) {
            let (row, version) = kp.measure(&Point::of(&plan, g), plan.seed())?;
            if klauspost_version.is_none() {
                say(&pb, format!("klauspost: {version}"));
                klauspost_version = Some(version);
            }
            say(&pb, table_line(&row));
            rows.push(row);
        }
        if let Some(o) = offload.as_mut() {
            for row in o.measure(&plan, g, &mut meter)? {
                say(&pb, table_line(&row));
                rows.push(row);
            }
        }
    }
    pb.finish_and_clear();
    let gpu = offload.as_ref().map(Offload::summary);
    write_outputs(args, &plan, &rows, meter.unavailable(), gpu.as_ref())?;
    Ok(rows)
}

/// The offload rows, when the cuda engine is among the engines run (and the build has it).
struct Offload {
    #[cfg(feature = "cuda")]
    inner: crate::ec_offload::Offload,
    /// (op, k, m, chunk) already measured: the GPU has no thread count.
    #[cfg(feature = "cuda")]
    done: std::collections::HashSet<(Op, usize, usize, usize)>,
    /// Without the feature there is never an `Offload`.
    #[cfg(not(feature = "cuda"))]
    never: std::convert::Infallible,
}

impl Offload {
    #[cfg(feature = "cuda")]
    fn open(plan: &Plan, args: &EcBenchArgs) -> Result<Option<Offload>> {
        if !plan.engines.contains(&Engine::Cuda) {
            return Ok(None);
        }
        let ratio = plan
            .configs
            .iter()
            .chain(&plan.erails)
            .map(|&(k, m)| m as f64 / k as f64)
            .fold(1.0, f64::max);
        let inner =
            crate::ec_offload::Offload::new(parse_bytes(&args.gpu_data_size)? as usize, ratio)?;
        Ok(Some(Offload {
            inner,
            done: Default::default(),
        }))
    }

    #[cfg(not(feature = "cuda"))]
    fn open(_plan: &Plan, _args: &EcBenchArgs) -> Result<Option<Offload>> {
        Ok(None)
    }

    fn describe(&self) -> String {
        #[cfg(feature = "cuda")]
        {
            let c = self.inner.ceilings;
            format!(
                "GPU: {}; pinned copies: host-to-device {:.1} GB/s, device-to-host {:.1} GB/s",
                self.inner.description, c.h2d_gbps, c.d2h_gbps
            )
        }
        #[cfg(not(feature = "cuda"))]
        match self.never {}
    }

    fn measure(&mut self, plan: &Plan, g: Group, meter: &mut CpuMeter) -> Result<Vec<Row>> {
        #[cfg(feature = "cuda")]
        {
            if !self.done.insert((g.op, g.k, g.m, g.chunk)) {
                return Ok(Vec::new());
            }
            let cpu_engine = plan
                .engines
                .iter()
                .copied()
                .find(|e| !e.is_offload())
                .unwrap_or_else(Engine::detect);
            let cpu_threads = plan.threads.iter().copied().max().unwrap_or(1);
            Ok(self
                .inner
                .measure(&Point::of(plan, g), meter, cpu_engine, cpu_threads)?
                .map(Vec::from)
                .unwrap_or_default())
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (plan, g, meter);
            match self.never {}
        }
    }

    fn summary(&self) -> GpuSummary {
        #[cfg(feature = "cuda")]
        {
            GpuSummary {
                description: self.inner.description.clone(),
                h2d_gbps: self.inner.ceilings.h2d_gbps,
                d2h_gbps: self.inner.ceilings.d2h_gbps,
            }
        }
        #[cfg(not(feature = "cuda"))]
        match self.never {}
    }
}

fn measure_group(
    plan: &Plan,
    g: Group,
    meter: &mut CpuMeter,
    pb: &ProgressBar,
) -> Result<Vec<Row>> {
    // An offload engine has no thread count: measure it once per point.
    let engines: Vec<Engine> = plan
        .engines
        .iter()
        .copied()
        .filter(|e| !(e.is_offload() && g.threads > 1))
        .collect();
    let mut setups = Vec::new();
    for &engine in &engines {
        let codec =
            Codec::with_engine(Code::new(plan.code, g.k, g.m)?, engine)?.with_threads(g.threads)?;
        let data = DataSet::new(&codec, g.op, g.chunk, plan.data_size, plan.seed())?;
        setups.push((codec, data));
    }
    let mut results: Vec<Measured> = engines
        .iter()
        .map(|_| Measured {
            rates: Vec::new(),
            lat_ns: Vec::new(),
            ops: 0,
            coding_ns: 0,
            cpu: CpuSample {
                cycles: Some(0),
                l1d_misses: Some(0),
                cpu_s: 0.0,
            },
        })
        .collect();
    pb.set_message(format!(
        "{} RS({},{}) {} x{}",
        g.op.name(),
        g.k,
        g.m,
        human_bytes(g.chunk as u64),
        g.threads
    ));
    for _ in 0..plan.repeat {
        for ((codec, data), res) in setups.iter_mut().zip(results.iter_mut()) {
            // One untimed warm-up operation pulls the stripe and tables into cache.
            data.run_one(codec)?;
            let before = meter.read();
            let (mut ns, mut ops) = (0u64, 0u64);
            while ops < 3 || (ns as f64) < plan.min_time_s * 1e9 {
                let t = data.run_one(codec)?;
                res.lat_ns.push(t);
                ns += t;
                ops += 1;
            }
            res.cpu = res.cpu.plus(&meter.read().since(&before));
            res.rates
                .push((data.user_bytes_per_op() as u64 * ops) as f64 / ns.max(1) as f64);
            res.ops += ops;
            res.coding_ns += ns;
            pb.inc(1);
        }
    }
    let mut rows = Vec::new();
    for (engine, mut res) in engines.iter().zip(results) {
        let row = to_row(plan, g, *engine, &mut res);
        say(pb, table_line(&row));
        rows.push(row);
    }
    Ok(rows)
}

impl Plan {
    fn seed(&self) -> u64 {
        1
    }
}

fn to_row(plan: &Plan, g: Group, engine: Engine, res: &mut Measured) -> Row {
    let coding_s = res.coding_ns as f64 / 1e9;
    // Nanosecond latencies fit an f64 exactly far beyond any benchmark's length.
    let mut lat: Vec<f64> = res.lat_ns.iter().map(|&n| n as f64).collect();
    let mut row = Point::of(plan, g).row(
        engine.name(),
        Measurement {
            data_gbps: median(&mut res.rates),
            lat_us: latency_summary(&mut lat, 1e-3),
            ops: res.ops,
            threads: g.threads,
            data_size: plan.data_size.max(g.k * g.chunk),
            cpu_s_per_s: res.cpu.cpu_s / coding_s,
        },
    );
    row.cycles_per_s = res.cpu.cycles.map(|c| c as f64 / coding_s);
    row.l1d_misses_per_s = res.cpu.l1d_misses.map(|c| c as f64 / coding_s);
    row
}

/// Prints above the progress bar, or plainly when there is no terminal to draw it on.
fn say(pb: &ProgressBar, line: String) {
    if pb.is_hidden() {
        println!("{line}");
    } else {
        pb.println(line);
    }
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn table_header() -> String {
    format!(
        "{:<6} {:<9} {:>7} {:>3} {:<12} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8}",
        "op",
        "code",
        "chunk",
        "thr",
        "engine",
        "GB/s",
        "Thr MB/s",
        "Norm MB/s",
        "mean us",
        "p50 us",
        "p99 us",
        "cpu"
    )
}

fn table_line(r: &Row) -> String {
    let cpu = match r.cycles_per_s {
        Some(c) => format!("{:.0}Mc/s", c / 1e6),
        None => format!("{:.0}%", r.cpu_s_per_s * 100.0),
    };
    format!(
        "{:<6} {:<9} {:>7} {:>3} {:<12} {:>8.2} {:>10.0} {:>10.0} {:>9.2} {:>9.2} {:>9.2} {:>8}",
        r.op,
        format!("RS({},{})", r.k, r.m),
        human_bytes(r.chunk as u64),
        r.threads,
        r.engine,
        r.data_gbps,
        r.thr_mbps,
        r.norm_thr_mbps,
        r.lat_mean_us,
        r.lat_p50_us,
        r.lat_p99_us,
        cpu
    )
}

/// The machine, with the SIMD extensions the engines use.
pub(crate) fn machine_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = ["avx512f", "avx512bw", "gfni", "avx2", "ssse3"]
        .into_iter()
        .filter(|f| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with("flags"))
                .is_some_and(|l| l.split_whitespace().any(|x| x == *f))
        })
        .collect();
    format!(
        "{}, {}",
        crate::harness::machine_description(),
        flags.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: EcBenchArgs,
    }

    fn args(line: &[&str]) -> EcBenchArgs {
        let mut v = vec!["ec-bench"];
        v.extend_from_slice(line);
        Cli::try_parse_from(v).unwrap().args
    }

    #[test]
    fn chunk_lists_and_ranges() {
        assert_eq!(parse_chunks("4K,64K").unwrap(), vec![4096, 65536]);
        assert_eq!(parse_chunks("1K-8K").unwrap(), vec![1024, 2048, 4096, 8192]);
        assert!(parse_chunks("0").is_err());
        assert!(parse_chunks("128M").is_err());
        assert!(parse_chunks("8K-1K").is_err());
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(plan(&args(&["--w", "16"])).is_err());
        assert!(plan(&args(&["--k", "6"])).is_err());
        assert!(plan(&args(&["--k", "200", "--m", "100"])).is_err());
        assert!(plan(&args(&["--engine", "nope"])).is_err());
        assert!(plan(&args(&["--threads", "0"])).is_err());
        assert!(plan(&args(&["--config", "6x3"])).is_err());
    }

    #[test]
    fn default_sweep_has_the_paper_configurations_and_the_erails_sweep() {
        let p = plan(&args(&[])).unwrap();
        assert_eq!(p.configs, vec![(3, 2), (6, 3), (10, 4), (17, 3)]);
        assert_eq!(p.erails.len(), 9);
        let g = p.groups();
        assert!(g
            .iter()
            .any(|g| g.k == 10 && g.m == 10 && g.threads == 2 && g.chunk == 256 << 10));
    }

    #[test]
    fn a_small_run_writes_consistent_rows_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let a = args(&[
            "--config",
            "4+2",
            "--chunk",
            "1K,4K",
            "--engine",
            "scalar,auto",
            "--repeat",
            "2",
            "--min-time",
            "0.001",
            "--data-size",
            "16K",
            "--out",
            dir.path().to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ]);
        let rows = run(&a).unwrap();
        assert_eq!(rows.len(), 2 * 2 * 2, "2 ops x 2 chunks x 2 engines");
        for r in &rows {
            assert!(r.data_gbps > 0.0);
            let thr = r.data_gbps * 1e3 * 6.0 / 4.0;
            assert!((r.thr_mbps - thr).abs() < 1e-6 * thr, "eq. 1");
            assert!(
                (r.norm_thr_mbps - 3.0 * 2.0 / 6.0 * r.thr_mbps).abs() < 1e-6 * thr,
                "eq. 2"
            );
            assert!(r.lat_p50_us <= r.lat_p99_us);
            assert!(r.ops >= 6);
        }
        let parsed: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let first = &parsed.as_array().unwrap()[0];
        for key in [
            "engine",
            "op",
            "k",
            "m",
            "chunk",
            "threads",
            "data_gbps",
            "thr_mbps",
            "norm_thr_mbps",
            "lat_mean_us",
            "lat_p99_us",
        ] {
            assert!(first.get(key).is_some(), "JSON lacks {key}");
        }
        let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
        assert_eq!(csv.lines().count(), rows.len() + 1);
        assert!(dir.path().join("summary.md").exists());
    }
}
