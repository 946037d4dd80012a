//! `railstore bench s3`: a warp-like S3 load generator, with the store underneath measured in
//! the same run as the baseline.
//!
//! The S3 client is this module's own: HTTP/1.1 over hyper, one keep-alive connection per
//! client task (driven inside the task, no connection pool), path-style URLs, AWS Signature V4
//! in the `Authorization` header with `x-amz-content-sha256: UNSIGNED-PAYLOAD` (the body is
//! not hashed, as S3 allows over any transport and `s3s` accepts). Every non-2xx answer, every
//! transport error and every GET whose body is not the object's size counts as an error; the
//! first one is kept and printed.
//!
//! Workloads, each run for `--duration` (or `--ops` operations) after `--warmup`:
//! - `put`: every operation stores a new object (`<prefix>/put-<target>/<client>/<n>`);
//! - `get`: reads of `--objects` objects stored first (unmeasured), chosen at random;
//! - `mixed`: `--get-ratio` of the operations are such reads, the rest overwrite one of those
//!   objects.
//!
//! The baseline (`target` = `store`) runs the same workload with the same clients, sizes and
//! objects directly against [`Store`] in the process: no HTTP, no signing, no s3s. Each S3
//! row states its throughput as a percentage of the baseline's (`pct_of_store`), per
//! operation kind; with `--rounds N` the two alternate N times and the comparison uses the
//! totals. Every run also reports the process's CPU time per operation: with an in-process
//! server the clients, the HTTP stack and the store share the same cores, so on a machine
//! whose CPUs are the bottleneck the ratio of CPU per operation decides `pct_of_store`, and
//! where the devices are the bottleneck it does not. Separation buffers are drained before
//! every run so each starts from the same state. Only the binary can start an S3 server
//! (this crate sits beside `s3`), so it hands in the [`Endpoint`] and, for an in-process
//! server, the [`Store`].

use crate::harness::OutputArgs;
use crate::meter::process_cpu_seconds;
use crate::plot::{human_bytes, parse_bytes, Chart, Series, XAxis};
use crate::progress::bar;
use anyhow::{bail, ensure, Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Method, StatusCode};
use indicatif::ProgressBar;
use railstore_store::{body_from, PutOptions, Store};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod client;
mod options;
mod report;
mod session;
mod target;
use client::status_error;
pub use client::Resolved;
pub use client::{Endpoint, S3Client};
pub use options::*;
pub use report::{results_csv, series_csv, summary_md, write_report};
use report::{table_header, table_lines};
pub use session::Session;
use target::{object_key, put_key};
pub use target::{Client, Done, Target};

// ---------------------------------------------------------------------------------------------
// Running

const PUT: usize = 0;
const GET: usize = 1;
const KIND_NAMES: [&str; 2] = ["put", "get"];

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

/// (operations, bytes) of each kind.
type PerKind = [(u64, u64); 2];

/// What one client did in a run.
struct Tally {
    lat: [Histogram<u64>; 2],
    ttfb: [Histogram<u64>; 2],
    ops: [u64; 2],
    bytes: [u64; 2],
    errors: [u64; 2],
    /// Per second of the measured window.
    series: Vec<PerKind>,
    /// PUT keys this client made (`put` workload), for cleanup.
    put_keys: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            lat: [hist(), hist()],
            ttfb: [hist(), hist()],
            ops: [0; 2],
            bytes: [0; 2],
            errors: [0; 2],
            series: Vec::new(),
            put_keys: 0,
        }
    }

    fn add(&mut self, o: &Tally) {
        for k in 0..2 {
            self.lat[k].add(&o.lat[k]).ok();
            self.ttfb[k].add(&o.ttfb[k]).ok();
            self.ops[k] += o.ops[k];
            self.bytes[k] += o.bytes[k];
            self.errors[k] += o.errors[k];
        }
        if self.series.len() < o.series.len() {
            self.series.resize(o.series.len(), [(0, 0); 2]);
        }
        for (a, b) in self.series.iter_mut().zip(&o.series) {
            for k in 0..2 {
                a[k].0 += b[k].0;
                a[k].1 += b[k].1;
            }
        }
    }
}

/// What every client of a run shares.
struct RunCtx {
    workload: Workload,
    plan: Plan,
    data: Bytes,
    target: &'static str,
    round: usize,
    measure_start: Instant,
    deadline: Option<Instant>,
    tickets: AtomicU64,
    first_error: Mutex<Option<String>>,
    bar: ProgressBar,
}

impl RunCtx {
    fn error(&self, e: String) {
        let mut first = self.first_error.lock().expect("not poisoned");
        if first.is_none() {
            *first = Some(e);
        }
    }
}

async fn drive(ctx: Arc<RunCtx>, mut client: Client, index: usize) -> Tally {
    let mut t = Tally::new();
    let mut rng = ChaCha8Rng::seed_from_u64(
        ctx.plan
            .seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(index as u64 + 1),
    );
    let p = &ctx.plan;
    loop {
        let t0 = Instant::now();
        if ctx.deadline.is_some_and(|d| t0 >= d) {
            break;
        }
        let measured = t0 >= ctx.measure_start;
        if measured {
            if let Some(n) = p.ops {
                if ctx.tickets.fetch_add(1, Ordering::Relaxed) >= n {
                    break;
                }
            }
        }
        let kind = match ctx.workload {
            Workload::Put => PUT,
            Workload::Get => GET,
            Workload::Mixed => {
                if rng.gen::<f64>() < p.get_ratio {
                    GET
                } else {
                    PUT
                }
            }
        };
        let (key, size) = if ctx.workload == Workload::Put {
            t.put_keys += 1;
            let n = t.put_keys - 1;
            (
                put_key(&p.prefix, ctx.target, ctx.round, index, n),
                p.size_of(((index as u64) << 40) | n),
            )
        } else {
            let id = rng.gen_range(0..p.objects);
            (object_key(&p.prefix, id), p.size_of(id))
        };
        let r = if kind == PUT {
            client
                .put(&p.bucket, &key, &ctx.data.slice(..size as usize))
                .await
        } else {
            client.get(&p.bucket, &key, size).await
        };
        let t1 = Instant::now();
        match r {
            Err(e) => {
                t.errors[kind] += 1;
                ctx.error(e);
            }
            Ok(done) if measured => {
                let ns = (t1 - t0).as_nanos() as u64;
                t.lat[kind].saturating_record(ns.max(1));
                if let Some(f) = done.ttfb_ns {
                    t.ttfb[kind].saturating_record(f.max(1));
                }
                t.ops[kind] += 1;
                t.bytes[kind] += done.bytes;
                let sec = (t1 - ctx.measure_start).as_secs() as usize;
                if t.series.len() <= sec {
                    t.series.resize(sec + 1, [(0, 0); 2]);
                }
                t.series[sec][kind].0 += 1;
                t.series[sec][kind].1 += done.bytes;
                ctx.bar.inc(1);
            }
            Ok(_) => {}
        }
    }
    t
}

/// Latency percentiles of one operation kind, µs.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Option<Latency> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Latency {
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
            mean_us: h.mean() / 1000.0,
        })
    }
}

/// One operation kind of one run.
#[derive(Debug, Clone, Serialize)]
pub struct KindResult {
    /// `put` or `get`.
    pub kind: String,
    /// Measured operations.
    pub ops: u64,
    /// Body bytes moved.
    pub bytes: u64,
    /// Failed operations (warmup included).
    pub errors: u64,
    /// Operations per second.
    pub ops_per_s: f64,
    /// Body megabytes (10^6 B) per second.
    pub mb_per_s: f64,
    /// Body MiB per second.
    pub mib_per_s: f64,
    /// Request to last byte of the answer.
    pub latency: Option<Latency>,
    /// Request to the answer's head (S3) or to `get_object`'s return (store); reads only.
    pub ttfb: Option<Latency>,
    /// ops_per_s as a percentage of the store baseline's same kind in the same workload and
    /// round (S3 rows with a baseline only).
    pub pct_of_store: Option<f64>,
}

/// One second of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// End of the interval, seconds since the measured window began.
    pub t_s: f64,
    /// Operations per second in it.
    pub ops_per_s: f64,
    /// Megabytes (10^6 B) per second in it.
    pub mb_per_s: f64,
    /// PUTs completed in it.
    pub puts: u64,
    /// GETs completed in it.
    pub gets: u64,
}

/// One workload against one target.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// `s3` (through HTTP) or `store` (the in-process baseline).
    pub target: String,
    /// The workload.
    pub workload: Workload,
    /// Which of `--rounds` (from 0).
    pub round: usize,
    /// Measured seconds: from the end of the warmup until the last client finished.
    pub elapsed_s: f64,
    /// Measured operations.
    pub ops: u64,
    /// Body bytes moved.
    pub bytes: u64,
    /// Operations per second.
    pub ops_per_s: f64,
    /// Megabytes (10^6 B) per second.
    pub mb_per_s: f64,
    /// Failed operations (warmup included).
    pub errors: u64,
    /// The first failure.
    pub first_error: Option<String>,
    /// Process CPU seconds (user + system, all threads: clients, server, store) in the
    /// measured window.
    pub cpu_s: f64,
    /// cpu_s per measured operation, µs.
    pub cpu_us_per_op: f64,
    /// cpu_s / elapsed_s / CPUs, %: how busy the machine's CPUs were with this process.
    pub cpu_busy_pct: f64,
    /// Per operation kind (`put`, `get`; only kinds the workload does).
    pub kinds: Vec<KindResult>,
    /// Throughput per second.
    pub series: Vec<Second>,
}

/// S3 against the store, per workload and kind.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The workload.
    pub workload: Workload,
    /// `put` or `get`.
    pub kind: String,
    /// Through S3.
    pub s3_ops_per_s: f64,
    /// The store directly.
    pub store_ops_per_s: f64,
    /// Through S3, MB/s.
    pub s3_mb_per_s: f64,
    /// The store directly, MB/s.
    pub store_mb_per_s: f64,
    /// s3 / store, %.
    pub pct_of_store: f64,
    /// Process CPU per operation through S3 (clients, HTTP, s3s, store), µs; the whole run
    /// when the workload mixes kinds.
    pub s3_cpu_us_per_op: f64,
    /// Process CPU per operation against the store (clients, store), µs.
    pub store_cpu_us_per_op: f64,
}

/// Where the load went: filled in by the caller (the binary).
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    /// The endpoint URL.
    pub endpoint: String,
    /// The server runs in this process on the same runtime as the clients.
    pub in_process: bool,
    /// The store under the server, in words (in-process only).
    pub store: Option<String>,
    /// tokio worker threads of the runtime (clients, and the server when in-process).
    pub threads: usize,
}

/// The whole report (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct S3Report {
    /// CPU model and count.
    pub machine: String,
    /// CPUs available.
    pub cpus: usize,
    /// Where the load went.
    pub setup: Setup,
    /// What every run did.
    pub plan: Plan,
    /// The store baseline ran.
    pub baseline: bool,
    /// Runs in order (for each workload and round: S3, then the store baseline).
    pub runs: Vec<RunResult>,
    /// S3 as a percentage of the store, per workload and kind.
    pub comparison: Vec<Comparison>,
    /// Failed operations over all runs.
    pub errors: u64,
}

fn result_of(
    target: &str,
    workload: Workload,
    round: usize,
    tally: &Tally,
    elapsed_s: f64,
    cpu_s: f64,
) -> RunResult {
    let mb = |b: u64| b as f64 / 1e6 / elapsed_s;
    let kinds: Vec<usize> = match workload {
        Workload::Put => vec![PUT],
        Workload::Get => vec![GET],
        Workload::Mixed => vec![PUT, GET],
    };
    let kinds = kinds
        .into_iter()
        .map(|k| KindResult {
            kind: KIND_NAMES[k].to_string(),
            ops: tally.ops[k],
            bytes: tally.bytes[k],
            errors: tally.errors[k],
            ops_per_s: tally.ops[k] as f64 / elapsed_s,
            mb_per_s: mb(tally.bytes[k]),
            mib_per_s: tally.bytes[k] as f64 / (1u64 << 20) as f64 / elapsed_s,
            latency: Latency::of(&tally.lat[k]),
            ttfb: Latency::of(&tally.ttfb[k]),
            pct_of_store: None,
        })
        .collect();
    // Whole seconds; the stragglers finishing after the last whole second (a run with a
    // duration ends with a few in-flight operations) join that second rather than make a
    // sliver of their own with a meaningless rate.
    let mut buckets: Vec<(f64, f64, PerKind)> = Vec::new();
    for (i, s) in tally.series.iter().enumerate() {
        let start = i as f64;
        let end = ((i + 1) as f64).min(elapsed_s.max(start + 1e-3));
        match buckets.last_mut() {
            Some(last) if end - start < 1.0 => {
                last.1 = end;
                for (a, b) in last.2.iter_mut().zip(s) {
                    a.0 += b.0;
                    a.1 += b.1;
                }
            }
            _ => buckets.push((start, end, *s)),
        }
    }
    let series = buckets
        .iter()
        .map(|(start, end, s)| {
            let width = end - start;
            Second {
                t_s: *end,
                ops_per_s: (s[0].0 + s[1].0) as f64 / width,
                mb_per_s: (s[0].1 + s[1].1) as f64 / 1e6 / width,
                puts: s[PUT].0,
                gets: s[GET].0,
            }
        })
        .collect();
    let ops = tally.ops[0] + tally.ops[1];
    let bytes = tally.bytes[0] + tally.bytes[1];
    RunResult {
        target: target.to_string(),
        workload,
        round,
        elapsed_s,
        ops,
        bytes,
        ops_per_s: ops as f64 / elapsed_s,
        mb_per_s: mb(bytes),
        errors: tally.errors[0] + tally.errors[1],
        first_error: None,
        cpu_s,
        cpu_us_per_op: if ops > 0 {
            cpu_s * 1e6 / ops as f64
        } else {
            0.0
        },
        cpu_busy_pct: 100.0 * cpu_s / elapsed_s / cpus() as f64,
        kinds,
        series,
    }
}

/// Object contents: one random buffer of the largest size, whose start every PUT sends (the
/// store neither compresses nor deduplicates).
fn object_data(size: u64, seed: u64) -> Bytes {
    let mut v = vec![0u8; size as usize];
    ChaCha8Rng::seed_from_u64(seed ^ 0x5eed).fill(&mut v[..]);
    Bytes::from(v)
}

/// Runs one workload against one target with every client; returns the result and the PUT
/// keys per client.
async fn run_one(
    args: &LoadArgs,
    plan: &Plan,
    target: &Target,
    workload: Workload,
    round: usize,
    data: &Bytes,
) -> Result<(RunResult, Vec<u64>)> {
    let what = if plan.rounds > 1 {
        format!("{} {} {}", target.name(), workload.name(), round + 1)
    } else {
        format!("{} {}", target.name(), workload.name())
    };
    let progress = bar(args.output.quiet, plan.ops, &what);
    let start = Instant::now();
    let measure_start = start + Duration::from_secs_f64(plan.warmup_s);
    let ctx = Arc::new(RunCtx {
        workload,
        plan: plan.clone(),
        data: data.clone(),
        target: target.name(),
        round,
        measure_start,
        deadline: plan
            .duration_s
            .map(|d| measure_start + Duration::from_secs_f64(d)),
        tickets: AtomicU64::new(0),
        first_error: Mutex::new(None),
        bar: progress.clone(),
    });
    let cpu_start = tokio::spawn(async move {
        tokio::time::sleep_until(measure_start.into()).await;
        process_cpu_seconds()
    });
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..plan.clients {
        let fut = drive(ctx.clone(), target.client(), i);
        tasks.spawn(async move { (i, fut.await) });
    }
    let mut tally = Tally::new();
    let mut put_keys = vec![0u64; plan.clients];
    while let Some(r) = tasks.join_next().await {
        let (i, t) = r.context("a benchmark client panicked")?;
        tally.add(&t);
        put_keys[i] = t.put_keys;
    }
    let elapsed = measure_start.elapsed().as_secs_f64().max(1e-9);
    let cpu_s = process_cpu_seconds() - cpu_start.await.context("the CPU meter task")?;
    progress.finish_and_clear();
    let mut r = result_of(target.name(), workload, round, &tally, elapsed, cpu_s);
    r.first_error = ctx.first_error.lock().expect("not poisoned").take();
    Ok((r, put_keys))
}

/// Runs `f(client, i)` for i in 0..n with `clients` tasks; stops at the first error.
async fn for_each_key<F, Fut>(
    target: &Target,
    clients: usize,
    n: u64,
    label: &str,
    quiet: bool,
    f: F,
) -> Result<()>
where
    F: Fn(Client, u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = (Client, Result<(), String>)> + Send,
{
    let progress = bar(quiet, Some(n), label);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients.min(n.max(1) as usize) {
        let (next, f, progress) = (next.clone(), f.clone(), progress.clone());
        let mut client = target.client();
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok(());
                }
                let (c, r) = f(client, i).await;
                client = c;
                r?;
                progress.inc(1);
            }
        });
    }
    let mut first: Option<String> = None;
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r.context("a benchmark client panicked")? {
            next.store(n, Ordering::Relaxed);
            first.get_or_insert(e);
        }
    }
    progress.finish_and_clear();
    match first {
        Some(e) => bail!("{label}: {e}"),
        None => Ok(()),
    }
}

/// Creates the plan's bucket through `s3`.
async fn make_bucket(s3: &Target, plan: &Plan) -> Result<()> {
    s3.client()
        .create_bucket(&plan.bucket)
        .await
        .map_err(|e| anyhow::anyhow!(e))
}

/// Stores the plan's objects: through `store` when it is the store behind the endpoint, in
/// this process (quicker, and not what is measured), else through `s3`.
async fn preload_via(
    args: &LoadArgs,
    plan: &Plan,
    s3: &Target,
    store: Option<&Store>,
    data: &Bytes,
) -> Result<()> {
    let via = match store {
        Some(s) => Target::Store(s.clone()),
        None => s3.clone(),
    };
    preload(args, plan, &via, data).await
}

async fn preload(args: &LoadArgs, plan: &Plan, target: &Target, data: &Bytes) -> Result<()> {
    let (bucket, prefix, data) = (plan.bucket.clone(), plan.prefix.clone(), data.clone());
    let sizes = plan.clone();
    for_each_key(
        target,
        plan.clients,
        plan.objects,
        "preload",
        args.output.quiet,
        move |mut c, i| {
            let (bucket, key) = (bucket.clone(), object_key(&prefix, i));
            let data = data.slice(..sizes.size_of(i) as usize);
            async move {
                let r = c.put(&bucket, &key, &data).await.map(|_| ());
                (c, r)
            }
        },
    )
    .await
}

/// Deletes the objects a run against an external endpoint made.
async fn cleanup(
    args: &LoadArgs,
    plan: &Plan,
    target: &Target,
    preloaded: bool,
    put_keys: &[(usize, Vec<u64>)],
) -> Result<()> {
    let mut keys: Vec<String> = Vec::new();
    if preloaded {
        keys.extend((0..plan.objects).map(|i| object_key(&plan.prefix, i)));
    }
    for (round, per_client) in put_keys {
        for (c, &n) in per_client.iter().enumerate() {
            keys.extend((0..n).map(|s| put_key(&plan.prefix, target.name(), *round, c, s)));
        }
    }
    let keys = Arc::new(keys);
    let bucket = plan.bucket.clone();
    let n = keys.len() as u64;
    for_each_key(
        target,
        plan.clients,
        n,
        "cleanup",
        args.output.quiet,
        move |mut c, i| {
            let (bucket, keys) = (bucket.clone(), keys.clone());
            async move {
                let r = c.delete(&bucket, &keys[i as usize]).await;
                (c, r)
            }
        },
    )
    .await
}

/// Writes every buffer of read/write separation out, so each run starts from the same state.
async fn settle(store: Option<&Store>) -> Result<()> {
    if let Some(r) = store.and_then(|s| s.rails()) {
        r.drain()
            .await
            .context("draining the separation buffers between runs")?;
    }
    Ok(())
}

/// Runs every workload of `args` through the S3 endpoint and, when `store` is the store
/// behind it (in this process) and the baseline is not switched off, against the store
/// directly. Prints the table as runs finish.
pub async fn measure(
    args: &LoadArgs,
    setup: Setup,
    endpoint: &Endpoint,
    store: Option<&Store>,
) -> Result<S3Report> {
    let plan = args.plan()?;
    let s3 = Target::s3(endpoint).await?;
    let baseline = store
        .filter(|_| !args.no_baseline)
        .cloned()
        .map(Target::Store);
    let report_head = describe(&plan, &setup, baseline.is_some());
    for line in report_head.lines() {
        args.output.say(line);
    }
    args.output.say(&table_header());
    make_bucket(&s3, &plan).await?;
    let data = object_data(plan.size_max_bytes, plan.seed);
    let mut runs = Vec::new();
    let mut preloaded = false;
    let mut s3_put_keys = Vec::new();
    for &w in &plan.workloads {
        if w.needs_objects() && !preloaded {
            preload_via(args, &plan, &s3, store, &data).await?;
            preloaded = true;
        }
        for round in 0..plan.rounds {
            settle(store).await?;
            let (mut r, keys) = run_one(args, &plan, &s3, w, round, &data).await?;
            if w == Workload::Put {
                s3_put_keys.push((round, keys));
            }
            let base = match &baseline {
                Some(t) => {
                    settle(store).await?;
                    Some(run_one(args, &plan, t, w, round, &data).await?.0)
                }
                None => None,
            };
            // Each S3 run against the store run of its round.
            if let Some(b) = &base {
                for k in &mut r.kinds {
                    k.pct_of_store = b
                        .kinds
                        .iter()
                        .find(|x| x.kind == k.kind && x.ops_per_s > 0.0)
                        .map(|x| 100.0 * k.ops_per_s / x.ops_per_s);
                }
            }
            print_run(args, &r);
            runs.push(r);
            if let Some(b) = base {
                print_run(args, &b);
                runs.push(b);
            }
        }
    }
    if store.is_none() && !args.keep_objects {
        cleanup(args, &plan, &s3, preloaded, &s3_put_keys).await?;
    }
    let comparison = compare(&plan, &runs);
    let errors = runs.iter().map(|r| r.errors).sum();
    Ok(S3Report {
        machine: machine_description(),
        cpus: cpus(),
        setup,
        plan,
        baseline: baseline.is_some(),
        runs,
        comparison,
        errors,
    })
}

fn print_run(args: &LoadArgs, r: &RunResult) {
    for line in table_lines(r) {
        args.output.say(&line);
    }
    if let Some(e) = &r.first_error {
        args.output.say(&format!("  first error: {e}"));
    }
}

/// One target's runs of one workload, summed over the rounds.
struct Totals {
    /// (kind, operations, bytes).
    kinds: Vec<(String, u64, u64)>,
    elapsed_s: f64,
    ops: u64,
    cpu_s: f64,
}

impl Totals {
    fn of(runs: &[RunResult], target: &str, w: Workload) -> Option<Totals> {
        let mine: Vec<&RunResult> = runs
            .iter()
            .filter(|r| r.target == target && r.workload == w)
            .collect();
        if mine.is_empty() {
            return None;
        }
        let mut kinds: Vec<(String, u64, u64)> = Vec::new();
        for r in &mine {
            for k in &r.kinds {
                match kinds.iter_mut().find(|x| x.0 == k.kind) {
                    Some(x) => {
                        x.1 += k.ops;
                        x.2 += k.bytes;
                    }
                    None => kinds.push((k.kind.clone(), k.ops, k.bytes)),
                }
            }
        }
        Some(Totals {
            kinds,
            elapsed_s: mine.iter().map(|r| r.elapsed_s).sum(),
            ops: mine.iter().map(|r| r.ops).sum(),
            cpu_s: mine.iter().map(|r| r.cpu_s).sum(),
        })
    }

    fn cpu_us_per_op(&self) -> f64 {
        if self.ops > 0 {
            self.cpu_s * 1e6 / self.ops as f64
        } else {
            0.0
        }
    }
}

/// S3 against the store per workload and kind, over all rounds (total operations / total
/// measured time).
fn compare(plan: &Plan, runs: &[RunResult]) -> Vec<Comparison> {
    let mut out = Vec::new();
    for &w in &plan.workloads {
        let (Some(s3), Some(st)) = (Totals::of(runs, "s3", w), Totals::of(runs, "store", w)) else {
            continue;
        };
        for (kind, ops, bytes) in &s3.kinds {
            let Some((_, sops, sbytes)) = st.kinds.iter().find(|x| &x.0 == kind) else {
                continue;
            };
            let (rate, srate) = (*ops as f64 / s3.elapsed_s, *sops as f64 / st.elapsed_s);
            out.push(Comparison {
                workload: w,
                kind: kind.clone(),
                s3_ops_per_s: rate,
                store_ops_per_s: srate,
                s3_mb_per_s: *bytes as f64 / 1e6 / s3.elapsed_s,
                store_mb_per_s: *sbytes as f64 / 1e6 / st.elapsed_s,
                pct_of_store: if srate > 0.0 {
                    100.0 * rate / srate
                } else {
                    0.0
                },
                s3_cpu_us_per_op: s3.cpu_us_per_op(),
                store_cpu_us_per_op: st.cpu_us_per_op(),
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reports

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub use crate::harness::machine_description;

fn describe(plan: &Plan, setup: &Setup, baseline: bool) -> String {
    let amount = match (plan.ops, plan.duration_s) {
        (Some(n), _) => format!("{n} operations"),
        (None, Some(s)) => format!("{s} s"),
        (None, None) => "nothing".into(),
    };
    let mut s = format!(
        "s3 bench: {} objects of {}, {} clients (one HTTP/1.1 connection each, SigV4, \
         UNSIGNED-PAYLOAD), {amount} per run after {} s warmup{}{}\n",
        plan.workloads
            .iter()
            .map(|w| match w {
                Workload::Mixed => format!("mixed ({:.0} % get)", plan.get_ratio * 100.0),
                w => w.name().to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        plan.size,
        plan.clients,
        plan.warmup_s,
        if plan.workloads.iter().any(|w| w.needs_objects()) {
            format!("; {} objects stored first for reads", plan.objects)
        } else {
            String::new()
        },
        if plan.rounds > 1 {
            format!("; {} rounds, S3 and store alternating", plan.rounds)
        } else {
            String::new()
        }
    );
    if setup.in_process {
        let _ = writeln!(
            s,
            "server: railstore's S3 endpoint in this process at {} over {}",
            setup.endpoint,
            setup.store.as_deref().unwrap_or("the store")
        );
        let _ = writeln!(
            s,
            "clients and server share one tokio runtime of {} worker thread(s) on {}: the \
             load generator's own CPU time is part of what is measured",
            setup.threads,
            machine_description()
        );
    } else {
        let _ = writeln!(
            s,
            "server: {} (external; no store baseline); clients on {} tokio thread(s), {}",
            setup.endpoint,
            setup.threads,
            machine_description()
        );
    }
    if baseline {
        s.push_str(
            "`store` rows: the same workload, clients and objects against the Store in \
             process (no HTTP); `% store` = S3 ops/s / store ops/s",
        );
    } else {
        s.push_str("no store baseline");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::client::{amz_date, uri_encode, Signer};
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("10s").unwrap(), 10.0);
        assert_eq!(parse_duration("10").unwrap(), 10.0);
        assert_eq!(parse_duration("500ms").unwrap(), 0.5);
        assert_eq!(parse_duration("2m").unwrap(), 120.0);
        assert_eq!(parse_duration("1.5s").unwrap(), 1.5);
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(951_782_400 + 3661), "20000229T010101Z");
        assert_eq!(amz_date(4_107_542_399), "21000228T235959Z");
    }

    #[test]
    fn uri_encoding_keeps_unreserved_characters() {
        let mut s = String::new();
        uri_encode(&mut s, "/b/a b+c~d_e.f-g/ü", true);
        assert_eq!(s, "/b/a%20b%2Bc~d_e.f-g/%C3%BC");
        let mut q = String::new();
        uri_encode(&mut q, "a/b", false);
        assert_eq!(q, "a%2Fb");
    }

    /// The "GET Object" example of the AWS Signature V4 documentation for S3 (header-based
    /// authentication), signed with this module's signer.
    #[test]
    fn signatures_match_the_aws_example() {
        let mut s = Signer::new(
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "us-east-1",
        );
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let auth = s.authorization(
            "GET",
            "/test.txt",
            &[],
            &[
                ("host", "examplebucket.s3.amazonaws.com"),
                ("range", "bytes=0-9"),
                ("x-amz-content-sha256", empty),
                ("x-amz-date", "20130524T000000Z"),
            ],
            empty,
            "20130524T000000Z",
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn the_last_partial_second_joins_the_one_before() {
        let mut t = Tally::new();
        t.series = vec![[(0, 0), (10, 40)], [(0, 0), (20, 80)], [(0, 0), (3, 12)]];
        t.ops[GET] = 33;
        t.bytes[GET] = 132;
        let r = result_of("s3", Workload::Get, 0, &t, 2.05, 1.0);
        assert_eq!(r.series.len(), 2);
        assert_eq!(r.series[1].gets, 23);
        assert!((r.series[1].t_s - 2.05).abs() < 1e-9);
        assert!((r.series[1].ops_per_s - 23.0 / 1.05).abs() < 1e-9);
        assert!((r.series[0].ops_per_s - 10.0).abs() < 1e-9);
        assert!((r.cpu_us_per_op - 1e6 / 33.0).abs() < 1e-6);
        assert_eq!(r.kinds.len(), 1);
    }

    #[test]
    fn plans_resolve_defaults_and_quick() {
        let cli = Cli::parse_from(["x"]);
        let p = cli.load.plan().unwrap();
        assert_eq!(p.workloads, vec![Workload::Put, Workload::Get]);
        assert_eq!(p.size_bytes, 1 << 20);
        assert_eq!((p.clients, p.duration_s, p.warmup_s), (16, Some(10.0), 1.0));
        assert_eq!(p.objects, 1000);
        let cli = Cli::parse_from([
            "x",
            "--quick",
            "--workload",
            "mixed",
            "--size",
            "4KiB",
            "--json",
        ]);
        let p = cli.load.plan().unwrap();
        assert_eq!((p.duration_s, p.warmup_s, p.objects), (Some(2.0), 0.0, 100));
        assert_eq!(p.size_bytes, 4096);
        assert!(cli.load.output.json_on_stdout());
        let cli = Cli::parse_from(["x", "--ops", "50", "--json", "r.json"]);
        let p = cli.load.plan().unwrap();
        assert_eq!((p.duration_s, p.ops), (None, Some(50)));
        assert!(!cli.load.output.json_on_stdout());
        assert!(Cli::try_parse_from(["x", "--ops", "5", "--duration", "1s"]).is_err());
        let bad = Cli::parse_from(["x", "--get-ratio", "1.5"]);
        assert!(bad.load.plan().is_err());
    }

    /// The whole loop against the store alone (the S3 side is exercised by the binary's test).
    /// Runs `body` on a store of memory devices, in a runtime of two workers.
    fn on_a_memory_store<F, Fut>(body: F)
    where
        F: FnOnce(Store) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let mut cfg = railstore_store::StoreConfig {
                data_dir: dir.path().to_path_buf(),
                ..Default::default()
            };
            cfg.devices.kind = railstore_store::DeviceKind::Mem;
            cfg.devices.capacity_bytes = 256 << 20;
            let store = Store::open(cfg).await.unwrap();
            body(store.clone()).await;
        });
    }

    #[test]
    fn store_runs_count_operations() {
        on_a_memory_store(|store| async move {
            let args = LoadArgs {
                workload: vec![Workload::Put, Workload::Mixed],
                size: "4KiB".into(),
                clients: 4,
                ops: Some(200),
                warmup: Some("0s".into()),
                objects: Some(20),
                ..LoadArgs::default()
            };
            let plan = args.plan().unwrap();
            let target = Target::Store(store.clone());
            let data = object_data(plan.size_bytes, 1);
            let mut c = target.client();
            c.create_bucket(&plan.bucket).await.unwrap();
            preload(&args, &plan, &target, &data).await.unwrap();
            let (r, keys) = run_one(&args, &plan, &target, Workload::Put, 0, &data)
                .await
                .unwrap();
            assert_eq!(r.ops, 200);
            assert_eq!(r.errors, 0, "{:?}", r.first_error);
            assert_eq!(keys.iter().sum::<u64>(), 200);
            let (r, _) = run_one(&args, &plan, &target, Workload::Mixed, 0, &data)
                .await
                .unwrap();
            assert_eq!(r.ops, 200);
            assert_eq!(r.errors, 0, "{:?}", r.first_error);
            assert_eq!(r.kinds.len(), 2);
            assert_eq!(r.kinds.iter().map(|k| k.ops).sum::<u64>(), 200);
            assert_eq!(r.bytes, 200 * 4096);
        });
    }

    #[test]
    fn sizes_from_a_range_are_fixed_per_object_and_span_it() {
        let cli = Cli::parse_from(["x", "--size", "1KiB-8MiB", "--seed", "3"]);
        let p = cli.load.plan().unwrap();
        assert_eq!((p.size_bytes, p.size_max_bytes), (1024, 8 << 20));
        assert_eq!(p.size, "1KiB-8MiB");
        let sizes: Vec<u64> = (0..4000).map(|i| p.size_of(i)).collect();
        assert!(sizes.iter().all(|s| (1024..=8 << 20).contains(s)));
        assert_eq!(sizes, (0..4000).map(|i| p.size_of(i)).collect::<Vec<_>>());
        // Log-uniform over 2^10..2^23: each factor of two holds about 1/13 of the objects.
        let small = sizes.iter().filter(|&&s| s < 2048).count();
        let large = sizes.iter().filter(|&&s| s >= 4 << 20).count();
        assert!((200..420).contains(&small), "{small}");
        assert!((200..420).contains(&large), "{large}");
        let fixed = Cli::parse_from(["x", "--size", "4KiB"])
            .load
            .plan()
            .unwrap();
        assert!((0..100).all(|i| fixed.size_of(i) == 4096));
        for bad in ["8MiB-1KiB", "0-4KiB", "1KiB-2GiB", "1KiB-"] {
            let cli = Cli::parse_from(["x", "--size", bad]);
            assert!(cli.load.plan().is_err(), "{bad}");
        }
    }

    #[test]
    fn objects_of_a_size_range_read_back_at_their_own_lengths() {
        on_a_memory_store(|store| async move {
            let args = LoadArgs {
                workload: vec![Workload::Get],
                size: "100-64KiB".into(),
                clients: 4,
                ops: Some(300),
                warmup: Some("0s".into()),
                objects: Some(30),
                ..LoadArgs::default()
            };
            let plan = args.plan().unwrap();
            let target = Target::Store(store.clone());
            let data = object_data(plan.size_max_bytes, 1);
            let mut c = target.client();
            c.create_bucket(&plan.bucket).await.unwrap();
            preload(&args, &plan, &target, &data).await.unwrap();
            let (r, _) = run_one(&args, &plan, &target, Workload::Get, 0, &data)
                .await
                .unwrap();
            // A GET whose body is not the object's own size counts as an error.
            assert_eq!((r.ops, r.errors), (300, 0), "{:?}", r.first_error);
            assert!(
                r.bytes > 300 * 100 && r.bytes < 300 * (64 << 10),
                "{}",
                r.bytes
            );
            for i in 0..plan.objects {
                let got = store
                    .head_object(&plan.bucket, &object_key(&plan.prefix, i))
                    .await
                    .unwrap();
                assert_eq!(got.size, plan.size_of(i), "object {i}");
            }
        });
    }
}
