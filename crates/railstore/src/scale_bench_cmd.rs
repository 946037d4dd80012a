//! `railstore bench scale`: what one node pays per object as the object count grows (issue
//! 20). On a fresh in-process store (the embedded default, file devices) it loads objects of a
//! size mix in steps up to each count and at every step reports:
//!
//! - memory per object: the process's resident memory above the empty store's, and each
//!   layer's own accounting (store index, manager maps, device indexes: [`Store::memory_use`]);
//! - bytes on disk per object (every device's used and live bytes, once separation's buffers
//!   are written out) and the mechanisms of the mix;
//! - the time to list every key, GET and PUT rates (random keys, closed loop);
//! - the time to restart (shut down, open again: the index is loaded), and the layers'
//!   memory after it;
//!
//! then fits a line through the last two steps and extrapolates to 10^9 objects, and draws
//! each figure against the count. With `--s3` the loads and the rate runs go through the
//! store's S3 endpoint, served in this process (so the layers' accounting still reads), one
//! HTTP/1.1 connection per client; the listing stays on the store.

use crate::s3_bench_cmd::{describe_store, emit_report, read_store_config, InProcess, TempDir};
use anyhow::{bail, ensure, Context, Result};
use bytes::Bytes;
use clap::Args;
use railstore_bench::plot::{parse_bytes, Chart, Series, XAxis};
use railstore_bench::s3load::{parse_duration, Target};
use railstore_store::{ListQuery, Store, StoreConfig};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `railstore bench scale`.
#[derive(Args, Debug, Clone)]
pub struct ScaleBenchArgs {
    /// Object counts to measure at, ascending; each step adds objects to the last.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000u64, 10_000, 100_000])]
    pub steps: Vec<u64>,
    /// Object sizes, `SMALLEST-LARGEST` (drawn uniformly) or one size.
    #[arg(long, default_value = "100B-4KiB")]
    pub sizes: String,
    /// Concurrent clients of the loads and of the rate runs.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Length of each GET and PUT rate run.
    #[arg(long, default_value = "3s")]
    pub rate_duration: String,
    /// Store configuration (TOML; `[server]` ignored, `data_dir` replaced by a temporary
    /// folder). Default: the embedded default.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Folder under which the temporary data folder is made (default: the system's).
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Write the report as JSON to this file (`-`: stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the figures against the object count into this folder (PNG and SVG).
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// Short runs for tests and smoke checks (steps of 300 and 1,200 objects, 1 s rates).
    #[arg(long)]
    pub quick: bool,
    /// Load and measure the rates through the store's S3 endpoint (served in this process)
    /// instead of the store's own API.
    #[arg(long)]
    pub s3: bool,
}

/// Bytes of memory per object, by layer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PerObject {
    /// Resident memory of the process above the empty store's (after a restart: the
    /// allocator keeps freed memory, so this is the loading run's, not the restarted one's).
    pub process: f64,
    pub store_index: f64,
    pub manager: f64,
    pub devices: f64,
    /// Separation's write buffers (bounded per device: this falls as objects grow).
    pub write_buffers: f64,
}

/// One step.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleStep {
    pub objects: u64,
    /// Seconds to load this step's new objects, and their rate.
    pub load_s: f64,
    pub load_per_s: f64,
    pub memory: PerObject,
    /// The layers' accounting after the restart.
    pub memory_after_restart: PerObject,
    pub disk_bytes_per_object: f64,
    /// Of it, live keys and values (the rest is dead space compaction has not reclaimed yet:
    /// overwritten or deleted records, rails' journal records).
    pub disk_live_bytes_per_object: f64,
    /// Members per packing set written by this step's load (None: nothing packed). A set
    /// closed by `pack_wait` with fewer than k members costs each member more parity.
    pub pack_members_per_set: Option<f64>,
    /// Objects per mechanism, from the listing.
    pub mechanisms: BTreeMap<String, u64>,
    pub list_s: f64,
    pub get_per_s: f64,
    pub put_per_s: f64,
    /// From the start of a restart to the first answered GET (`Store::open_serving`).
    pub restart_s: f64,
    /// From the start of a restart until the whole index has loaded.
    pub index_load_s: f64,
}

/// A straight line through the last two steps, and where it leads.
#[derive(Debug, Clone, Serialize)]
pub struct Extrapolation {
    /// From which two counts.
    pub from: (u64, u64),
    /// Bytes per added object (process, and the layers together).
    pub process_bytes_per_object: f64,
    pub layers_bytes_per_object: f64,
    /// Restart seconds per million objects.
    pub restart_s_per_million: f64,
    /// At 10^9 objects.
    pub process_gb_at_1g: f64,
    pub layers_gb_at_1g: f64,
    pub restart_s_at_1g: f64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleBenchReport {
    pub machine: String,
    pub store: String,
    pub sizes: String,
    pub clients: usize,
    /// What the loads and rate runs went through: `store`, or `s3` (the in-process endpoint).
    pub via: String,
    /// Resident memory of the process with the empty store open.
    pub empty_rss_bytes: u64,
    pub steps: Vec<ScaleStep>,
    pub extrapolation: Option<Extrapolation>,
    /// The last step's GET and PUT rates against the first's.
    pub get_rate_ratio: f64,
    pub put_rate_ratio: f64,
}

const BUCKET: &str = "scale";

fn key(i: u64) -> String {
    format!("obj/{i:012}")
}

/// `SMALLEST-LARGEST` or one size.
fn parse_sizes(s: &str) -> Result<(usize, usize)> {
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (parse_bytes(a)?, parse_bytes(b)?),
        None => (parse_bytes(s)?, parse_bytes(s)?),
    };
    ensure!(
        lo <= hi,
        "--sizes {s}: the smallest is larger than the largest"
    );
    Ok((lo as usize, hi as usize))
}

/// Resident memory of this process (Linux: `VmRSS` of /proc/self/status).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

pub fn run(args: &ScaleBenchArgs) -> Result<()> {
    let (steps, rate) = if args.quick {
        (vec![300, 1_200], 1.0)
    } else {
        (args.steps.clone(), parse_duration(&args.rate_duration)?)
    };
    ensure!(
        !steps.is_empty() && steps.windows(2).all(|w| w[0] < w[1]) && steps[0] > 0,
        "--steps must be ascending counts above zero"
    );
    ensure!(args.clients > 0, "--clients must be at least 1");
    let sizes = parse_sizes(&args.sizes)?;
    let parent = args.path.clone().unwrap_or_else(std::env::temp_dir);
    let dir = TempDir::new(&parent)?;
    let mut cfg = read_store_config(args.config.as_deref())?;
    if !cfg.devices.paths.is_empty() {
        bail!("the configuration names device paths; bench scale only runs on a fresh temporary data folder (remove [devices].paths)");
    }
    cfg.data_dir = dir.0.clone();
    // No scheduled scrub in the middle of the measurement.
    cfg.repair.scrub_interval = Duration::ZERO;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(measure(args, cfg, &steps, sizes, rate));
    drop(rt);
    drop(dir);
    let report = report?;
    emit_report(&render(&report), args.json.as_deref(), &report)?;
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        match plot(&report, dir) {
            Ok(files) => {
                for f in files {
                    eprintln!("wrote {}", f.display());
                }
            }
            // Like the other benchmarks: no font, no plots, said clearly.
            Err(e) => eprintln!("plots skipped: {e:#}"),
        }
    }
    Ok(())
}

async fn measure(
    args: &ScaleBenchArgs,
    cfg: StoreConfig,
    steps: &[u64],
    sizes: (usize, usize),
    rate_s: f64,
) -> Result<ScaleBenchReport> {
    let description = describe_store(&cfg);
    let mut store = Store::open(cfg.clone())
        .await
        .context("opening the store")?;
    store.create_bucket(BUCKET).await?;
    let mut server = match args.s3 {
        true => Some(InProcess::start(&store, REGION).await?),
        false => None,
    };
    let empty_rss = rss_bytes();
    let mut rows = Vec::new();
    let mut have = 0u64;
    for &n in steps {
        eprintln!("loading objects {have}..{n}");
        let packed_before = packing(&store);
        let t = Instant::now();
        let target = match &server {
            Some(s) => Target::s3(&s.endpoint).await?,
            None => Target::Store(store.clone()),
        };
        load(&target, have, n, sizes, args.clients).await?;
        let load_s = t.elapsed().as_secs_f64();
        let loaded = n - have;
        have = n;
        let packed = packing(&store);
        let (sets, members) = (packed.0 - packed_before.0, packed.1 - packed_before.1);
        let pack_members_per_set = (sets > 0).then(|| members as f64 / sets as f64);
        let per = |b: u64| b as f64 / n as f64;
        let layers = store.memory_use();
        let memory = PerObject {
            process: per(rss_bytes().saturating_sub(empty_rss)),
            store_index: per(layers.store_index_bytes),
            manager: per(layers.manager_bytes),
            devices: per(layers.device_bytes.iter().sum()),
            write_buffers: per(layers.write_buffer_bytes),
        };
        // Disk in the steady state: separation's buffers written out, so their journal
        // records (a second copy of every buffered piece, several times) are gone.
        if let Some(r) = store.rails() {
            r.drain().await.context("draining the separation buffers")?;
        }
        let status = store.status().await;
        let disk: u64 = status.devices.iter().map(|d| d.used_bytes).sum();
        let disk_live: u64 = status.devices.iter().map(|d| d.live_bytes).sum();
        eprintln!("listing {n} keys");
        let (list_s, mechanisms) = list_all(&store, n)?;
        eprintln!("GET and PUT rates");
        let get_per_s = rates(&target, n, sizes, args.clients, rate_s, false).await?;
        let put_per_s = rates(&target, n, sizes, args.clients, rate_s, true).await?;
        eprintln!("restarting");
        // Nothing may hold the store across its restart (its data folder's lock).
        drop(target);
        if let Some(s) = server.take() {
            s.stop().await?;
        }
        store.shutdown().await?;
        drop(store);
        // Restart as `serve` does it: to the first answered GET, and on to the whole index.
        let t = Instant::now();
        store = Store::open_serving(cfg.clone())
            .await
            .context("reopening the store")?;
        let probe = store
            .get_object(BUCKET, &key(n / 2), None)
            .await
            .context("the first GET after the restart")?;
        railstore_store::collect_body(probe.body).await?;
        let restart_s = t.elapsed().as_secs_f64();
        while !store.index_loaded() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let index_load_s = t.elapsed().as_secs_f64();
        if args.s3 {
            server = Some(InProcess::start(&store, REGION).await?);
        }
        let after = store.memory_use();
        rows.push(ScaleStep {
            objects: n,
            load_s,
            load_per_s: loaded as f64 / load_s,
            memory_after_restart: PerObject {
                process: memory.process,
                store_index: per(after.store_index_bytes),
                manager: per(after.manager_bytes),
                devices: per(after.device_bytes.iter().sum()),
                write_buffers: per(after.write_buffer_bytes),
            },
            memory,
            disk_bytes_per_object: per(disk),
            disk_live_bytes_per_object: per(disk_live),
            pack_members_per_set,
            mechanisms,
            list_s,
            get_per_s,
            put_per_s,
            restart_s,
            index_load_s,
        });
    }
    if let Some(s) = server.take() {
        s.stop().await?;
    }
    store.shutdown().await?;
    let first = &rows[0];
    let last = rows.last().unwrap();
    Ok(ScaleBenchReport {
        machine: railstore_bench::harness::machine_description(),
        store: description,
        sizes: args.sizes.clone(),
        clients: args.clients,
        via: if args.s3 { "s3" } else { "store" }.into(),
        empty_rss_bytes: empty_rss,
        get_rate_ratio: last.get_per_s / first.get_per_s,
        put_rate_ratio: last.put_per_s / first.put_per_s,
        extrapolation: extrapolate(&rows),
        steps: rows,
    })
}

/// The body of object `i` (its size drawn from `sizes` by its number, so a rerun repeats it).
fn body(i: u64, sizes: (usize, usize)) -> Bytes {
    let (len, mut rng) = body_len_and_rng(i, sizes);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v.into()
}

/// The length of object `i`'s body, and the generator that fills it.
fn body_len_and_rng(i: u64, sizes: (usize, usize)) -> (usize, rand::rngs::StdRng) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(i);
    (rng.gen_range(sizes.0..=sizes.1), rng)
}

const REGION: &str = "us-east-1";

/// Packing sets written so far, and their members.
fn packing(store: &Store) -> (u64, u64) {
    let c = &store.manager().devices().counters;
    (
        c.pack_sets.load(Ordering::Relaxed),
        c.pack_members.load(Ordering::Relaxed),
    )
}

/// Stores objects `from..to` with `clients` at once.
async fn load(
    target: &Target,
    from: u64,
    to: u64,
    sizes: (usize, usize),
    clients: usize,
) -> Result<()> {
    let next = Arc::new(AtomicU64::new(from));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (mut client, next) = (target.client(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= to {
                    return Ok::<_, anyhow::Error>(());
                }
                client
                    .put(BUCKET, &key(i), &body(i, sizes))
                    .await
                    .map_err(anyhow::Error::msg)?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Lists every key a page of 1,000 at a time; checks the count; counts the mechanisms.
fn list_all(store: &Store, n: u64) -> Result<(f64, BTreeMap<String, u64>)> {
    let t = Instant::now();
    let mut q = ListQuery {
        max_keys: 1000,
        ..ListQuery::default()
    };
    let (mut seen, mut mechanisms) = (0u64, BTreeMap::new());
    loop {
        let page = store.list_objects(BUCKET, &q)?;
        seen += page.objects.len() as u64;
        for o in &page.objects {
            *mechanisms.entry(o.mechanism.clone()).or_insert(0) += 1;
        }
        if !page.truncated {
            break;
        }
        q.after = page.next_after;
    }
    ensure!(seen == n, "listed {seen} objects of {n}");
    Ok((t.elapsed().as_secs_f64(), mechanisms))
}

/// GETs (or PUTs over) random stored objects for `secs` with `clients` at once; per second.
async fn rates(
    target: &Target,
    n: u64,
    sizes: (usize, usize),
    clients: usize,
    secs: f64,
    put: bool,
) -> Result<f64> {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (mut client, done) = (target.client(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(c as u64 ^ n);
            while Instant::now() < until {
                let i = rng.gen_range(0..n);
                if put {
                    // The same size as before, other bytes: the count and the mix stay.
                    let v: Vec<u8> = body(i, sizes).iter().map(|b| !b).collect();
                    client.put(BUCKET, &key(i), &v.into()).await
                } else {
                    let len = body_len_and_rng(i, sizes).0 as u64;
                    client.get(BUCKET, &key(i), len).await
                }
                .map_err(anyhow::Error::msg)?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / secs)
}

fn extrapolate(rows: &[ScaleStep]) -> Option<Extrapolation> {
    let [.., a, b] = rows else { return None };
    let dn = (b.objects - a.objects) as f64;
    let layers = |s: &ScaleStep| {
        let m = &s.memory;
        // Write buffers are bounded whatever the count: not part of the per-object line.
        (m.store_index + m.manager + m.devices) * s.objects as f64
    };
    let process = |s: &ScaleStep| s.memory.process * s.objects as f64;
    let slope_p = (process(b) - process(a)) / dn;
    let slope_l = (layers(b) - layers(a)) / dn;
    let slope_r = (b.restart_s - a.restart_s) / dn;
    let at = |v_b: f64, slope: f64| v_b + slope * (1e9 - b.objects as f64);
    Some(Extrapolation {
        from: (a.objects, b.objects),
        process_bytes_per_object: slope_p,
        layers_bytes_per_object: slope_l,
        restart_s_per_million: slope_r * 1e6,
        process_gb_at_1g: at(process(b), slope_p) / 1e9,
        layers_gb_at_1g: at(layers(b), slope_l) / 1e9,
        restart_s_at_1g: at(b.restart_s, slope_r),
    })
}

fn render(r: &ScaleBenchReport) -> String {
    let mut out = format!(
        "scale bench: {}\nstore: {}\nsizes {}, {} clients through {}; empty store: {:.1} MB resident\n",
        r.machine,
        r.store,
        r.sizes,
        r.clients,
        match r.via.as_str() {
            "s3" => "S3 (the in-process endpoint, one HTTP/1.1 connection each, SigV4)",
            _ => "the store's API",
        },
        r.empty_rss_bytes as f64 / 1e6
    );
    out.push_str(
        "   objects   load/s  B/obj process  index  manager  devices  buffers  (after restart: index manager devices)  disk B/obj (live)  list s   GET/s    PUT/s  restart s  index s\n",
    );
    for s in &r.steps {
        let (m, a) = (&s.memory, &s.memory_after_restart);
        out.push_str(&format!(
            "{:>10} {:>8.0} {:>15.0} {:>6.0} {:>8.0} {:>8.0} {:>8.0}  ({:>6.0} {:>7.0} {:>7.0})                  {:>10.0} {:>7.0} {:>7.3} {:>7.0} {:>8.0} {:>10.3} {:>8.3}\n",
            s.objects,
            s.load_per_s,
            m.process,
            m.store_index,
            m.manager,
            m.devices,
            m.write_buffers,
            a.store_index,
            a.manager,
            a.devices,
            s.disk_bytes_per_object,
            s.disk_live_bytes_per_object,
            s.list_s,
            s.get_per_s,
            s.put_per_s,
            s.restart_s,
            s.index_load_s,
        ));
    }
    if let Some(last) = r.steps.last() {
        let mix: Vec<String> = last
            .mechanisms
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect();
        out.push_str(&format!(
            "mechanisms at the last step: {}\n",
            mix.join(", ")
        ));
        if let Some(fill) = last.pack_members_per_set {
            out.push_str(&format!(
                "packing sets written by the last step's load: {fill:.2} members per set\n"
            ));
        }
    }
    out.push_str(&format!(
        "GET rate at the last step / first: {:.2}; PUT: {:.2}\n",
        r.get_rate_ratio, r.put_rate_ratio
    ));
    if let Some(e) = &r.extrapolation {
        out.push_str(&format!(
            "from {} to {} objects: {:.0} B of process memory and {:.0} B of the layers' per added object, {:.2} s of restart per million; \
             at 10^9 objects (a straight line, nothing else changing): {:.0} GB process, {:.0} GB layers, restart {:.0} s\n",
            e.from.0,
            e.from.1,
            e.process_bytes_per_object,
            e.layers_bytes_per_object,
            e.restart_s_per_million,
            e.process_gb_at_1g,
            e.layers_gb_at_1g,
            e.restart_s_at_1g,
        ));
    }
    out
}

fn plot(r: &ScaleBenchReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let line = |name: &str, f: &dyn Fn(&ScaleStep) -> f64| Series {
        name: name.into(),
        points: r.steps.iter().map(|s| (s.objects as f64, f(s))).collect(),
    };
    let count_axis = || XAxis::Categories(r.steps.iter().map(|s| s.objects.to_string()).collect());
    // Categories are drawn at x = i: the points go there too.
    let at_index = |mut s: Series| {
        s.points = s
            .points
            .iter()
            .enumerate()
            .map(|(i, p)| (i as f64, p.1))
            .collect();
        s
    };
    let mut files = Vec::new();
    files.extend(
        Chart {
            title: "Memory per object",
            x_label: "objects",
            y_label: "bytes per object",
            x_axis: count_axis(),
            series: vec![
                at_index(line("process (resident)", &|s| s.memory.process)),
                at_index(line("store index", &|s| s.memory.store_index)),
                at_index(line("manager", &|s| s.memory.manager)),
                at_index(line("device indexes", &|s| s.memory.devices)),
                at_index(line("write buffers", &|s| s.memory.write_buffers)),
                at_index(line("disk", &|s| s.disk_bytes_per_object)),
            ],
        }
        .write(dir, "scale-memory")?,
    );
    files.extend(
        Chart {
            title: "Restart and listing time",
            x_label: "objects",
            y_label: "seconds",
            x_axis: count_axis(),
            series: vec![
                at_index(line("restart", &|s| s.restart_s)),
                at_index(line("list every key", &|s| s.list_s)),
            ],
        }
        .write(dir, "scale-time")?,
    );
    files.extend(
        Chart {
            title: "GET and PUT rates",
            x_label: "objects",
            y_label: "operations per second",
            x_axis: count_axis(),
            series: vec![
                at_index(line("GET", &|s| s.get_per_s)),
                at_index(line("PUT", &|s| s.put_per_s)),
            ],
        }
        .write(dir, "scale-rates")?,
    );
    Ok(files)
}
