//! `railstore ec-bench`: EC-Bench (Shi, Lu, Panda) for railstore's coders. Encode and decode
//! sweeps over k, m, chunk size, engine and threads; latency, throughput (eq. 1), normalized
//! throughput (eq. 2), CPU utilisation and cache pressure; a table, JSON, CSV, a Markdown
//! summary and plots.

use crate::meter::{CpuMeter, CpuSample};
use crate::plot::{human_bytes, parse_bytes, Chart, Series, XAxis};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use railstore_ec::bench::{DataSet, Op};
use railstore_ec::{Code, CodeId, Codec, Engine};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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

struct Plan {
    code: CodeId,
    configs: Vec<(usize, usize)>,
    chunks: Vec<usize>,
    threads: Vec<usize>,
    engines: Vec<Engine>,
    ops: Vec<Op>,
    /// The eRails k = m sweep of the default run: 256 KiB chunks, 1 and 2 threads.
    erails: Vec<(usize, usize)>,
    data_size: usize,
    repeat: usize,
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
}

/// The GPU and its transfer ceilings, for the summary.
struct GpuSummary {
    description: String,
    h2d_gbps: f64,
    d2h_gbps: f64,
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
        unreachable!("no offload without the cuda feature")
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
            unreachable!("no offload without the cuda feature")
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
        unreachable!("no offload without the cuda feature")
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
    let data_gbps = median(&mut res.rates);
    let (k, m) = (g.k as f64, g.m as f64);
    let thr_mbps = data_gbps * 1e3 * (k + m) / k;
    res.lat_ns.sort_unstable();
    let pct = |p: f64| {
        let i = ((res.lat_ns.len() as f64 - 1.0) * p).round() as usize;
        res.lat_ns[i] as f64 / 1e3
    };
    let coding_s = res.coding_ns as f64 / 1e9;
    Row {
        engine: engine.name().to_string(),
        op: g.op.name().to_string(),
        code: plan.code.name().to_string(),
        k: g.k,
        m: g.m,
        w: 8,
        chunk: g.chunk,
        threads: g.threads,
        data_size: plan.data_size.max(g.k * g.chunk),
        repeats: plan.repeat,
        ops: res.ops,
        data_gbps,
        thr_mbps,
        norm_thr_mbps: (k - 1.0) * m / (k + m) * thr_mbps,
        lat_mean_us: res.lat_ns.iter().sum::<u64>() as f64 / res.lat_ns.len() as f64 / 1e3,
        lat_p50_us: pct(0.5),
        lat_p99_us: pct(0.99),
        cycles_per_s: res.cpu.cycles.map(|c| c as f64 / coding_s),
        l1d_misses_per_s: res.cpu.l1d_misses.map(|c| c as f64 / coding_s),
        cpu_s_per_s: res.cpu.cpu_s / coding_s,
    }
}

/// Prints above the progress bar, or plainly when there is no terminal to draw it on.
fn say(pb: &ProgressBar, line: String) {
    if pb.is_hidden() {
        println!("{line}");
    } else {
        pb.println(line);
    }
}

fn median(v: &mut [f64]) -> f64 {
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

fn machine_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(str::trim)
        .unwrap_or("unknown CPU");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let flags: Vec<&str> = ["avx512f", "avx512bw", "gfni", "avx2", "ssse3"]
        .into_iter()
        .filter(|f| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with("flags"))
                .is_some_and(|l| l.split_whitespace().any(|x| x == *f))
        })
        .collect();
    format!("{model}, {cpus} CPUs, {}", flags.join(" "))
}

/// The CSV form of the rows: one header line, one line per row.
pub fn to_csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "engine,op,code,k,m,w,chunk,threads,data_size,repeats,ops,data_gbps,thr_mbps,\
         norm_thr_mbps,lat_mean_us,lat_p50_us,lat_p99_us,cycles_per_s,l1d_misses_per_s,cpu_s_per_s\n",
    );
    let opt = |v: Option<f64>| v.map(|x| format!("{x:.0}")).unwrap_or_default();
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{:.4},{:.2},{:.2},{:.3},{:.3},{:.3},{},{},{:.4}",
            r.engine,
            r.op,
            r.code,
            r.k,
            r.m,
            r.w,
            r.chunk,
            r.threads,
            r.data_size,
            r.repeats,
            r.ops,
            r.data_gbps,
            r.thr_mbps,
            r.norm_thr_mbps,
            r.lat_mean_us,
            r.lat_p50_us,
            r.lat_p99_us,
            opt(r.cycles_per_s),
            opt(r.l1d_misses_per_s),
            r.cpu_s_per_s
        );
    }
    s
}

fn write_outputs(
    args: &EcBenchArgs,
    plan: &Plan,
    rows: &[Row],
    counters_missing: Option<&str>,
    gpu: Option<&GpuSummary>,
) -> Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let json = serde_json::to_string_pretty(rows)?;
    let csv = to_csv(rows);
    let mut written = Vec::new();
    for (path, body) in [
        (Some(args.out.join("results.json")), &json),
        (args.json.clone(), &json),
        (Some(args.out.join("results.csv")), &csv),
        (args.csv.clone(), &csv),
    ] {
        if let Some(p) = path {
            std::fs::write(&p, body).with_context(|| format!("writing {}", p.display()))?;
            written.push(p);
        }
    }
    let mut summary = summary_markdown(plan, rows, counters_missing);
    summary.push_str(&against_markdown(rows, "klauspost"));
    if let Some(g) = gpu {
        summary.push_str(&offload_markdown(g, rows));
    }
    let summary_path = args.out.join("summary.md");
    std::fs::write(&summary_path, &summary)?;
    written.push(summary_path);
    println!("\n{summary}");
    if !args.no_plots {
        match plots(rows, &args.out) {
            Ok(files) => written.extend(files),
            Err(e) => println!("plots skipped: {e:#}"),
        }
    }
    println!("wrote:");
    for p in written {
        println!("  {}", p.display());
    }
    Ok(())
}

/// Markdown: the command, the machine, railstore's pick, its ratios to ISA-L and the k = m sweep.
fn summary_markdown(plan: &Plan, rows: &[Row], counters_missing: Option<&str>) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## ec-bench results\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(s, "- machine: {}", machine_description());
    let _ = writeln!(
        s,
        "- data set D = {} per point (at least one block), {} repeats, medians reported",
        human_bytes(plan.data_size as u64),
        plan.repeat
    );
    if let Some(why) = counters_missing {
        let _ = writeln!(s, "- hardware counters unavailable: {why}");
    }
    let best = Engine::detect().name();
    let by_key = |engine: &str| -> BTreeMap<(String, usize, usize, usize, usize), f64> {
        rows.iter()
            .filter(|r| r.engine == engine)
            .map(|r| ((r.op.clone(), r.k, r.m, r.chunk, r.threads), r.data_gbps))
            .collect()
    };
    let ours = by_key(best);
    let isal = by_key("isal");
    if !isal.is_empty() && !ours.is_empty() {
        let _ = writeln!(
            s,
            "\n### {best} (railstore's pick) against ISA-L, user-data GB/s\n\n\
             | op | code | chunk | threads | {best} | isal | ratio |\n|---|---|---|---|---|---|---|"
        );
        for (key, g) in &ours {
            if let Some(i) = isal.get(key) {
                let _ = writeln!(
                    s,
                    "| {} | RS({},{}) | {} | {} | {:.2} | {:.2} | {:.2}x |",
                    key.0,
                    key.1,
                    key.2,
                    human_bytes(key.3 as u64),
                    key.4,
                    g,
                    i,
                    g / i
                );
            }
        }
    }
    let picked: Vec<&Row> = rows.iter().filter(|r| r.engine == best).collect();
    if !picked.is_empty() {
        let _ = writeln!(
            s,
            "\n### {best} (railstore's pick)\n\n\
             | op | code | chunk | threads | GB/s | Thr MB/s | norm MB/s | p50 us | p99 us |\n\
             |---|---|---|---|---|---|---|---|---|"
        );
        for r in picked {
            let _ = writeln!(
                s,
                "| {} | RS({},{}) | {} | {} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} |",
                r.op,
                r.k,
                r.m,
                human_bytes(r.chunk as u64),
                r.threads,
                r.data_gbps,
                r.thr_mbps,
                r.norm_thr_mbps,
                r.lat_p50_us,
                r.lat_p99_us
            );
        }
    }
    let km: Vec<&Row> = rows
        .iter()
        .filter(|r| r.k == r.m && r.chunk == 256 << 10 && r.engine == best)
        .collect();
    if !km.is_empty() {
        let _ = writeln!(
            s,
            "\n### eRails k = m sweep, 256 KiB chunks, {best}, user-data GB/s\n\n\
             | op | k = m | 1 thread | 2 threads | speed-up |\n|---|---|---|---|---|"
        );
        let mut seen = BTreeMap::new();
        for r in &km {
            seen.entry((r.op.clone(), r.k))
                .or_insert_with(BTreeMap::new)
                .insert(r.threads, r.data_gbps);
        }
        for ((op, k), t) in seen {
            let one = t.get(&1).copied();
            let two = t.get(&2).copied();
            let fmt = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}"));
            let up = match (one, two) {
                (Some(a), Some(b)) => format!("{:.2}x", b / a),
                _ => "-".into(),
            };
            let _ = writeln!(s, "| {op} | {k} | {} | {} | {up} |", fmt(one), fmt(two));
        }
    }
    s
}

/// railstore's pick against another coder timed in the same run, point by point (one thread).
fn against_markdown(rows: &[Row], other: &str) -> String {
    let ours = Engine::detect().name();
    let mut s = String::new();
    let pairs: Vec<(&Row, &Row)> = rows
        .iter()
        .filter(|r| r.engine == other)
        .filter_map(|o| {
            rows.iter()
                .find(|r| {
                    r.engine == ours
                        && r.threads == 1
                        && r.op == o.op
                        && r.k == o.k
                        && r.m == o.m
                        && r.chunk == o.chunk
                })
                .map(|r| (r, o))
        })
        .collect();
    if pairs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\n### {ours} (railstore's pick) against {other}, one thread, user-data GB/s\n\n\
         | op | code | chunk | {ours} | {other} | ratio |\n|---|---|---|---|---|---|"
    );
    for (r, o) in pairs {
        let _ = writeln!(
            s,
            "| {} | RS({},{}) | {} | {:.2} | {:.2} | {:.2}x |",
            r.op,
            r.k,
            r.m,
            human_bytes(r.chunk as u64),
            r.data_gbps,
            o.data_gbps,
            r.data_gbps / o.data_gbps
        );
    }
    s
}

/// The offload section: each GPU row beside the CPU engine coding the same batch on every core
/// (like for like: same data set, same layout, data in host memory), and where offload wins.
fn offload_markdown(g: &GpuSummary, rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n### Offload coder (cuda) against the CPU engines of this run\n\n\
         - GPU: {}\n- pinned copy ceilings: host-to-device {:.1} GB/s, device-to-host {:.1} GB/s\n\
         - `cuda-kernel`: data on the GPU, kernels only; `cuda-h2h`: host to host through \
         pinned memory, pipelined over streams; `*-batch`: the CPU engine coding the same batch \
         in host memory on every core, whole stripes per thread; `cuda` (table above): one \
         stripe per call through the codec\n",
        g.description, g.h2d_gbps, g.d2h_gbps
    );
    let _ = writeln!(
        s,
        "| op | code | chunk | batch | kernel GB/s | h2h GB/s | h2h / H2D | host CPU s per GB \
         (h2h) | CPU batch GB/s (engine x threads) | CPU s per GB (CPU batch) | h2h / CPU | \
         kernel / CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let same = |r: &Row, h: &Row| r.op == h.op && r.k == h.k && r.m == h.m && r.chunk == h.chunk;
    // Per (op, k, m): the chunks at which host-to-host, and device-resident, coding win.
    type Wins = (Vec<usize>, Vec<usize>);
    let mut wins: BTreeMap<(String, usize, usize), Wins> = BTreeMap::new();
    for h in rows.iter().filter(|r| r.engine == "cuda-h2h") {
        let kernel = rows
            .iter()
            .find(|r| r.engine == "cuda-kernel" && same(r, h));
        let cpu = rows
            .iter()
            .find(|r| r.engine.ends_with("-batch") && same(r, h));
        let (Some(kernel), Some(cpu)) = (kernel, cpu) else {
            continue;
        };
        let w = wins.entry((h.op.clone(), h.k, h.m)).or_default();
        if h.data_gbps > cpu.data_gbps {
            w.0.push(h.chunk);
        }
        if kernel.data_gbps > cpu.data_gbps {
            w.1.push(h.chunk);
        }
        let _ = writeln!(
            s,
            "| {} | RS({},{}) | {} | {} | {:.1} | {:.1} | {:.0}% | {:.3} | {:.1} ({} x{}) | {:.3} | \
             {:.2}x | {:.1}x |",
            h.op,
            h.k,
            h.m,
            human_bytes(h.chunk as u64),
            human_bytes(h.data_size as u64),
            kernel.data_gbps,
            h.data_gbps,
            100.0 * h.data_gbps / g.h2d_gbps,
            h.cpu_s_per_s / h.data_gbps.max(1e-9),
            cpu.data_gbps,
            cpu.engine.trim_end_matches("-batch"),
            cpu.threads,
            cpu.cpu_s_per_s / cpu.data_gbps.max(1e-9),
            h.data_gbps / cpu.data_gbps,
            kernel.data_gbps / cpu.data_gbps
        );
    }
    let list = |v: &[usize]| {
        if v.is_empty() {
            "none in this sweep".to_string()
        } else {
            v.iter()
                .map(|&c| human_bytes(c as u64))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let _ = writeln!(
        s,
        "\nCrossover: the chunk sizes at which the GPU beats every CPU core on the same batch\n"
    );
    for ((op, k, m), (h2h, kernel)) in wins {
        let _ = writeln!(
            s,
            "- {op} RS({k},{m}): host to host at {}; data already on the GPU at {}",
            list(&h2h),
            list(&kernel)
        );
    }
    s
}

fn plots(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let engines: Vec<String> = {
        let mut e: Vec<String> = rows.iter().map(|r| r.engine.clone()).collect();
        e.dedup();
        e.sort();
        e.dedup();
        e
    };
    // One line per engine and thread count (the CPU engines threaded over every core are what
    // an offload coder must beat).
    let lines: Vec<(String, usize)> = {
        let mut l: Vec<(String, usize)> = rows
            .iter()
            .filter(|r| r.k != r.m || r.chunk != 256 << 10)
            .map(|r| (r.engine.clone(), r.threads))
            .collect();
        l.sort();
        l.dedup();
        l
    };
    let line_name = |e: &str, t: usize| {
        if t == 1 {
            e.to_string()
        } else {
            format!("{e} x{t}")
        }
    };
    let configs: Vec<(usize, usize)> = {
        let mut c: Vec<(usize, usize)> = rows
            .iter()
            .filter(|r| r.k != r.m || r.chunk != 256 << 10)
            .map(|r| (r.k, r.m))
            .collect();
        c.sort();
        c.dedup();
        c
    };
    for op in ["encode", "decode"] {
        // EC-Bench Fig. 2-5: throughput against chunk size, one chart per configuration.
        for &(k, m) in &configs {
            let series: Vec<Series> = lines
                .iter()
                .map(|(e, t)| Series {
                    name: line_name(e, *t),
                    points: rows
                        .iter()
                        .filter(|r| {
                            r.op == op && r.k == k && r.m == m && r.engine == *e && r.threads == *t
                        })
                        .map(|r| (r.chunk as f64, r.data_gbps))
                        .collect(),
                })
                .filter(|s| s.points.len() > 1)
                .collect();
            if series.is_empty() {
                continue;
            }
            let title = format!("{op} RS({k},{m}): user-data throughput against chunk size");
            files.extend(
                Chart {
                    title: &title,
                    x_label: "chunk size",
                    y_label: "GB/s of user data",
                    x_axis: XAxis::Bytes,
                    series,
                }
                .write(dir, &format!("{op}-rs{k}-{m}-chunk"))?,
            );
        }
        // EC-Bench Fig. 6: normalized throughput per configuration (best chunk per engine).
        let labels: Vec<String> = configs
            .iter()
            .map(|(k, m)| format!("RS({k},{m})"))
            .collect();
        let series: Vec<Series> = lines
            .iter()
            .map(|(e, t)| Series {
                name: line_name(e, *t),
                points: configs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &(k, m))| {
                        rows.iter()
                            .filter(|r| {
                                r.op == op
                                    && r.k == k
                                    && r.m == m
                                    && r.engine == *e
                                    && r.threads == *t
                            })
                            .map(|r| r.norm_thr_mbps)
                            .reduce(f64::max)
                            .map(|v| (i as f64, v))
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if configs.len() > 1 && !series.is_empty() {
            let title = format!("{op}: normalized throughput per configuration (best chunk)");
            files.extend(
                Chart {
                    title: &title,
                    x_label: "configuration",
                    y_label: "normalized throughput, MB/s",
                    x_axis: XAxis::Categories(labels),
                    series,
                }
                .write(dir, &format!("{op}-normalized"))?,
            );
        }
        // eRails Fig. 4 and 5: k = m sweep against k, per engine and per thread count.
        let km = |r: &&Row| r.op == op && r.k == r.m && r.chunk == 256 << 10;
        let mut series: Vec<Series> = Vec::new();
        for e in &engines {
            let mut threads: Vec<usize> = rows
                .iter()
                .filter(km)
                .filter(|r| r.engine == *e)
                .map(|r| r.threads)
                .collect();
            threads.sort();
            threads.dedup();
            for t in threads {
                series.push(Series {
                    name: format!("{e}, {t} thread{}", if t == 1 { "" } else { "s" }),
                    points: rows
                        .iter()
                        .filter(km)
                        .filter(|r| r.engine == *e && r.threads == t)
                        .map(|r| (r.k as f64, r.data_gbps))
                        .collect(),
                });
            }
        }
        series.retain(|s| s.points.len() > 1);
        if !series.is_empty() {
            let title = format!("{op} RS(k,k), 256 KiB chunks: throughput against k and threads");
            files.extend(
                Chart {
                    title: &title,
                    x_label: "k = m",
                    y_label: "GB/s of user data",
                    x_axis: XAxis::Linear,
                    series,
                }
                .write(dir, &format!("{op}-k-equals-m"))?,
            );
        }
    }
    Ok(files)
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
