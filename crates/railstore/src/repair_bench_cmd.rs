//! `railstore bench repair`: what an online rebuild costs the clients, and what the clients
//! cost the rebuild (issue 16's figures). On a fresh in-process store (the embedded default,
//! file devices) served over S3, with one steady mixed GET+PUT load:
//!
//! 1. the load alone (baseline, before);
//! 2. device D failed and rebuilt with no throttle and no load (the unthrottled rate);
//! 3. device D failed again and rebuilt with the configured throttle while the load runs;
//! 4. the load alone again (baseline, after: the machine may drift).
//!
//! It reports GET and PUT latency of each load run, the rebuild's objects per second in
//! steps 2 and 3, and the two ratios the issue names: GET p99 during the rebuild against the
//! baselines, and the throttled rebuild rate against the unthrottled one.

use crate::s3_bench_cmd::{describe_store, emit_report, read_store_config, InProcess, TempDir};
use anyhow::{bail, Context, Result};
use clap::Args;
use railstore_bench::harness::OutputArgs;
use railstore_bench::s3load::{self, LoadArgs, RunResult, Session, Workload};
use railstore_store::{RepairOptions, RepairStatus, Store, StoreConfig};
use serde::Serialize;
use std::path::PathBuf;

/// Options of `railstore bench repair`.
#[derive(Args, Debug, Clone)]
pub struct RepairBenchArgs {
    /// Objects stored before the runs (what the rebuilds restore).
    #[arg(long, default_value_t = 4000)]
    pub objects: u64,
    /// Object size (`256KiB`: split3+3 chunks under the embedded default's hybrid policy).
    #[arg(long, default_value = "256KiB")]
    pub size: String,
    /// Concurrent clients of the load.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Measured time of each load run.
    #[arg(long, default_value = "10s")]
    pub duration: String,
    /// Share of GETs in the load (the rest overwrite the stored objects).
    #[arg(long, default_value_t = 0.9)]
    pub get_ratio: f64,
    /// The device failed and rebuilt.
    #[arg(long, default_value_t = 2)]
    pub device: usize,
    /// Store configuration (TOML; `[server]` ignored, `data_dir` replaced by a temporary
    /// folder): its `[repair]` settings are the throttle of step 3. Default: the embedded
    /// default.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Folder under which the temporary data folder is made (default: the system's).
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Write the report as JSON to this file (`-`: stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Short runs for tests and smoke checks (300 objects of 64 KiB, 2 s runs).
    #[arg(long)]
    pub quick: bool,
}

/// One load run, in short.
#[derive(Debug, Clone, Serialize)]
pub struct LoadFigures {
    /// `before`, `during rebuild`, `after` (`bench grow`: its own phases).
    pub phase: String,
    pub ops_per_s: f64,
    pub get_p50_us: f64,
    pub get_p99_us: f64,
    pub get_p999_us: f64,
    pub put_p99_us: f64,
    pub errors: u64,
}

/// One rebuild.
#[derive(Debug, Clone, Serialize)]
pub struct RebuildFigures {
    /// `unthrottled, no load` or `throttled, under load`.
    pub phase: String,
    pub concurrency: usize,
    pub write_bytes_per_s_max: Option<u64>,
    pub elapsed_s: f64,
    pub items: u64,
    pub items_per_s: f64,
    pub bytes_written: u64,
    pub mb_per_s: f64,
    pub objects_lost: u64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct RepairBenchReport {
    pub machine: String,
    pub store: String,
    pub objects: u64,
    pub size: String,
    pub clients: usize,
    pub get_ratio: f64,
    pub device: usize,
    pub load: Vec<LoadFigures>,
    pub rebuilds: Vec<RebuildFigures>,
    /// GET p99 during the throttled rebuild / the mean of the two baselines' (goal <= 1.5).
    pub get_p99_ratio: f64,
    /// Throttled rebuild rate under load / unthrottled rate without (goal >= 0.5).
    pub rebuild_rate_ratio: f64,
    /// Share of the loaded run's time the throttled rebuild was running (the latency ratio
    /// describes a rebuild only as far as this is near 1).
    pub overlap: f64,
}

pub(crate) fn load_figures(phase: &str, r: &RunResult) -> LoadFigures {
    let kind = |k: &str| r.kinds.iter().find(|x| x.kind == k);
    let lat = |k: &str, f: fn(&s3load::Latency) -> f64| {
        kind(k).and_then(|x| x.latency.as_ref()).map_or(0.0, f)
    };
    LoadFigures {
        phase: phase.to_string(),
        ops_per_s: r.ops_per_s,
        get_p50_us: lat("get", |l| l.p50_us),
        get_p99_us: lat("get", |l| l.p99_us),
        get_p999_us: lat("get", |l| l.p999_us),
        put_p99_us: lat("put", |l| l.p99_us),
        errors: r.errors,
    }
}

fn rebuild_figures(phase: &str, options: RepairOptions, s: &RepairStatus) -> RebuildFigures {
    RebuildFigures {
        phase: phase.to_string(),
        concurrency: options.concurrency,
        write_bytes_per_s_max: options.write_bytes_per_s_max,
        elapsed_s: s.elapsed_s,
        items: s.items_done,
        items_per_s: s.items_done as f64 / s.elapsed_s.max(1e-9),
        bytes_written: s.bytes_done,
        mb_per_s: s.bytes_done as f64 / 1e6 / s.elapsed_s.max(1e-9),
        objects_lost: s.objects_lost,
    }
}

/// Fails `d`, rebuilds it with `options`, and returns when the rebuild is done.
async fn fail_and_rebuild(store: &Store, d: usize, options: RepairOptions) -> Result<()> {
    store
        .fail_device(d, "railstore bench repair")
        .context("failing the device")?;
    store
        .replace_device_with(d, options)
        .await
        .context("starting the rebuild")?;
    Ok(())
}

async fn finished(store: &Store) -> Result<RepairStatus> {
    let s = store.wait_for_repair().await.context("no rebuild ran")?;
    if let Some(e) = &s.error {
        bail!("the rebuild stopped: {e}");
    }
    Ok(s)
}

/// The steady mixed load, the temporary data folder and the store configuration of a benchmark
/// that changes the array under load (`bench repair`, `bench grow`).
pub(crate) struct UnderLoad {
    pub load: LoadArgs,
    pub dir: TempDir,
    pub cfg: StoreConfig,
}

impl UnderLoad {
    pub(crate) fn new(
        objects: u64,
        size: &str,
        duration: &str,
        clients: usize,
        get_ratio: f64,
        config: Option<&std::path::Path>,
        path: Option<&std::path::Path>,
    ) -> Result<UnderLoad> {
        let load = LoadArgs {
            workload: vec![Workload::Mixed],
            size: size.to_string(),
            clients,
            duration: Some(duration.to_string()),
            warmup: Some("0s".into()),
            objects: Some(objects),
            get_ratio,
            output: OutputArgs {
                quiet: true,
                ..OutputArgs::default()
            },
            ..LoadArgs::default()
        };
        load.plan()?;
        let parent = path.map_or_else(std::env::temp_dir, |p| p.to_path_buf());
        let dir = TempDir::new(&parent)?;
        let mut cfg = read_store_config(config)?;
        cfg.data_dir = dir.0.clone();
        cfg.devices.paths.clear();
        // No scheduled scrub in the middle of the measurement.
        cfg.repair.scrub_interval = std::time::Duration::ZERO;
        Ok(UnderLoad { load, dir, cfg })
    }

    /// Runs `measure` with the load and the configuration on a runtime of its own, removes the
    /// data folder, and prints the report `render` makes (and its JSON to `json`).
    pub(crate) fn run<R, F>(
        self,
        json: Option<&std::path::Path>,
        render: fn(&R) -> String,
        measure: impl FnOnce(LoadArgs, StoreConfig) -> F,
    ) -> Result<()>
    where
        R: Serialize,
        F: std::future::Future<Output = Result<R>>,
    {
        let UnderLoad { load, dir, cfg } = self;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let report = rt.block_on(measure(load, cfg));
        drop(rt);
        drop(dir);
        let report = report?;
        emit_report(&render(&report), json, &report)
    }
}

pub fn run(args: &RepairBenchArgs) -> Result<()> {
    let (objects, size, duration) = if args.quick {
        (300, "64KiB".to_string(), "2s".to_string())
    } else {
        (args.objects, args.size.clone(), args.duration.clone())
    };
    UnderLoad::new(
        objects,
        &size,
        &duration,
        args.clients,
        args.get_ratio,
        args.config.as_deref(),
        args.path.as_deref(),
    )?
    .run(args.json.as_deref(), render, async |load, cfg| {
        measure(args, &load, cfg, objects, size).await
    })
}

async fn measure(
    args: &RepairBenchArgs,
    load: &LoadArgs,
    cfg: StoreConfig,
    objects: u64,
    size: String,
) -> Result<RepairBenchReport> {
    let description = describe_store(&cfg);
    let throttled = cfg.repair.options();
    let unthrottled = RepairOptions::default();
    let store = Store::open(cfg).await.context("opening the store")?;
    let server = InProcess::start(&store, "us-east-1").await?;
    let result = async {
        let d = args.device;
        eprintln!("storing {objects} objects of {size}");
        let mut session = Session::prepare(load, &server.endpoint, Some(&store)).await?;
        eprintln!("load alone (before)");
        let before = session.run(load, Workload::Mixed).await?;
        eprintln!("device {d}: rebuild, no throttle, no load");
        fail_and_rebuild(&store, d, unthrottled).await?;
        let fast = finished(&store).await?;
        eprintln!("device {d}: rebuild, throttled, under load");
        fail_and_rebuild(&store, d, throttled).await?;
        let during = session.run(load, Workload::Mixed).await?;
        let slow = finished(&store).await?;
        eprintln!("load alone (after)");
        let after = session.run(load, Workload::Mixed).await?;
        let load_rows = vec![
            load_figures("before", &before),
            load_figures("during rebuild", &during),
            load_figures("after", &after),
        ];
        let rebuilds = vec![
            rebuild_figures("unthrottled, no load", unthrottled, &fast),
            rebuild_figures("throttled, under load", throttled, &slow),
        ];
        let base_p99 = (load_rows[0].get_p99_us + load_rows[2].get_p99_us) / 2.0;
        anyhow::Ok(RepairBenchReport {
            machine: s3load::machine_description(),
            store: description,
            objects,
            size,
            clients: args.clients,
            get_ratio: args.get_ratio,
            device: d,
            get_p99_ratio: load_rows[1].get_p99_us / base_p99.max(1e-9),
            rebuild_rate_ratio: rebuilds[1].items_per_s / rebuilds[0].items_per_s.max(1e-9),
            overlap: (slow.elapsed_s / during.elapsed_s.max(1e-9)).min(1.0),
            load: load_rows,
            rebuilds,
        })
    }
    .await;
    let served = server.stop().await;
    let closed = store.shutdown().await;
    let report = result?;
    served?;
    closed.context("shutting the store down")?;
    Ok(report)
}

/// The report as Markdown.
fn render(r: &RepairBenchReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "# railstore bench repair\n");
    let _ = writeln!(out, "{}; {}", r.machine, r.store);
    let _ = writeln!(
        out,
        "{} objects of {}, {} clients, {:.0} % GETs; device {} rebuilt\n",
        r.objects,
        r.size,
        r.clients,
        r.get_ratio * 100.0,
        r.device
    );
    let _ = writeln!(
        out,
        "| load | ops/s | GET p50 ms | GET p99 ms | GET p99.9 ms | PUT p99 ms | errors |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for l in &r.load {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            l.phase,
            l.ops_per_s,
            l.get_p50_us / 1e3,
            l.get_p99_us / 1e3,
            l.get_p999_us / 1e3,
            l.put_p99_us / 1e3,
            l.errors
        );
    }
    let _ = writeln!(
        out,
        "\n| rebuild | concurrency | write cap | s | objects and sets | per s | MB/s | lost |"
    );
    let _ = writeln!(
        out,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for b in &r.rebuilds {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {} | {:.0} | {:.1} | {} |",
            b.phase,
            b.concurrency,
            b.write_bytes_per_s_max
                .map_or("none".to_string(), |c| format!("{c} B/s")),
            b.elapsed_s,
            b.items,
            b.items_per_s,
            b.mb_per_s,
            b.objects_lost
        );
    }
    let _ = writeln!(
        out,
        "\nGET p99 during the rebuild / without: {:.2} (goal <= 1.5; the rebuild ran {:.0} % of \
         that run)\nthrottled rebuild rate under load / unthrottled: {:.2} (goal >= 0.5)",
        r.get_p99_ratio,
        r.overlap * 100.0,
        r.rebuild_rate_ratio
    );
    out
}
