//! `railstore bench grow`: what growing the array costs (issue 16's "6 → 12 moves at most 55 %
//! of the objects and loses none"). On a fresh in-process store (the embedded default, file
//! devices) served over S3, with one steady mixed GET+PUT load:
//!
//! 1. the load alone on the first epoch's devices (baseline);
//! 2. the server stopped, the array grown by a width of devices (`Store::grow_offline`), the
//!    server started again: the load runs while the objects move (the configured throttle);
//! 3. the load alone again on the grown array;
//! 4. the added devices drained while the server serves (`Store::drain_online`, what
//!    `railstore device remove` asks for): the load runs while the objects move back; then
//!    the server is stopped (the clean shutdown takes the devices out) and started once more on
//!    the first epoch's devices.
//!
//! It reports the share of the array's keys each move moved, their rates, GET latency of each
//! load run, how long the online drain took to start (it waits for the operations placed by
//! the layout before it), and the load's errors (every GET checks its object's length: none
//! may fail).

use crate::repair_bench_cmd::{load_figures, LoadFigures, UnderLoad};
use crate::s3_bench_cmd::{describe_store, InProcess};
use anyhow::{bail, Context, Result};
use clap::Args;
use railstore_bench::s3load::{self, LoadArgs, Session, Workload};
use railstore_store::{RepairStatus, Store, StoreConfig};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Options of `railstore bench grow`.
#[derive(Args, Debug, Clone)]
pub struct GrowBenchArgs {
    /// Objects stored before the runs.
    #[arg(long, default_value_t = 4000)]
    pub objects: u64,
    /// Object size (`64KiB`: packed under the embedded default's hybrid policy).
    #[arg(long, default_value = "64KiB")]
    pub size: String,
    /// Concurrent clients of the load.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Measured time of each load run (the one during the move is at least this long).
    #[arg(long, default_value = "10s")]
    pub duration: String,
    /// Share of GETs in the load (the rest overwrite the stored objects).
    #[arg(long, default_value_t = 0.9)]
    pub get_ratio: f64,
    /// Store configuration (TOML; `[server]` ignored, `data_dir` replaced by a temporary
    /// folder): its `[repair]` settings throttle the moves. Default: the embedded default.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Folder under which the temporary data folder is made (default: the system's).
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Write the report as JSON to this file (`-`: stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Short runs for tests and smoke checks (300 objects of 16 KiB, 2 s runs).
    #[arg(long)]
    pub quick: bool,
}

/// One move.
#[derive(Debug, Clone, Serialize)]
pub struct MoveFigures {
    /// `grow` or `drain`.
    pub kind: String,
    pub devices_before: usize,
    pub devices_after: usize,
    /// Manager keys in the array when the move started.
    pub keys: u64,
    /// Keys whose group changed (what the move walked to).
    pub keys_moved: u64,
    /// `keys_moved / keys` (goal for a grow from 6 to 12: <= 0.55).
    pub share_moved: f64,
    pub elapsed_s: f64,
    pub keys_per_s: f64,
    pub mb_per_s: f64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct GrowBenchReport {
    pub machine: String,
    pub store: String,
    pub objects: u64,
    pub size: String,
    pub clients: usize,
    pub get_ratio: f64,
    pub load: Vec<LoadFigures>,
    pub moves: Vec<MoveFigures>,
    /// GET p99 during the grow's move / before it.
    pub get_p99_ratio: f64,
    /// Share of the loaded run's time the move was running.
    pub overlap: f64,
    /// How long `Store::drain_online` took under the load (the switch of layouts).
    pub drain_start_ms: f64,
}

fn move_figures(s: &RepairStatus, keys: u64, before: usize, after: usize) -> MoveFigures {
    MoveFigures {
        kind: s.kind.clone(),
        devices_before: before,
        devices_after: after,
        keys,
        keys_moved: s.items_total,
        share_moved: s.items_total as f64 / keys.max(1) as f64,
        elapsed_s: s.elapsed_s,
        keys_per_s: s.items_done as f64 / s.elapsed_s.max(1e-9),
        mb_per_s: s.bytes_done as f64 / 1e6 / s.elapsed_s.max(1e-9),
    }
}

/// Waits for the store's move to end; refuses one that stopped.
async fn moved(store: &Store) -> Result<RepairStatus> {
    let s = loop {
        match store.repair_status() {
            Some(s) if !s.running => break s,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    if let Some(e) = &s.error {
        bail!("the move stopped: {e}");
    }
    Ok(s)
}

pub fn run(args: &GrowBenchArgs) -> Result<()> {
    let (objects, size, duration) = if args.quick {
        (300, "16KiB".to_string(), "2s".to_string())
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

/// Serves `store`, runs `work` against it, stops serving and shuts it down.
async fn serving<T>(
    store: Store,
    work: impl AsyncFnOnce(&Store, &InProcess) -> Result<T>,
) -> Result<T> {
    let server = InProcess::start(&store, "us-east-1").await?;
    let result = work(&store, &server).await;
    let served = server.stop().await;
    let closed = store.shutdown().await;
    let out = result?;
    served?;
    closed.context("shutting the store down")?;
    Ok(out)
}

async fn measure(
    args: &GrowBenchArgs,
    load: &LoadArgs,
    cfg: StoreConfig,
    objects: u64,
    size: String,
) -> Result<GrowBenchReport> {
    let description = describe_store(&cfg);
    let width = cfg.manager.width();
    let n = cfg.device_count();
    eprintln!("storing {objects} objects of {size} on {n} devices");
    let store = Store::open(cfg.clone())
        .await
        .context("opening the store")?;
    let (mut session, before) = serving(store, async |store, server| {
        let mut session = Session::prepare(load, &server.endpoint, Some(store)).await?;
        eprintln!("load alone ({n} devices)");
        let before = session.run(load, Workload::Mixed).await?;
        Ok((session, before))
    })
    .await?;

    eprintln!("growing by {width} devices");
    Store::grow_offline(cfg.clone(), width, Vec::new()).await?;
    let store = Store::open(cfg.clone())
        .await
        .context("opening the grown store")?;
    let (during, grow, after, draining, drain, drain_start_ms) =
        serving(store, async |store, server| {
            session.reconnect(&server.endpoint).await?;
            let keys = store.manager().keys(b"").await?.len() as u64;
            eprintln!("load while the objects move");
            let during = session.run(load, Workload::Mixed).await?;
            let status = moved(store).await?;
            let grow = move_figures(&status, keys, n, n + width);
            eprintln!("load alone ({} devices)", n + width);
            let after = session.run(load, Workload::Mixed).await?;

            eprintln!("draining the added devices while serving");
            let keys = store.manager().keys(b"").await?.len() as u64;
            let (draining, started) = {
                let run = session.run(load, Workload::Mixed);
                let start = async {
                    // Under way before the drain starts.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let t = std::time::Instant::now();
                    store.drain_online().await?;
                    Ok::<_, anyhow::Error>(t.elapsed().as_secs_f64() * 1e3)
                };
                let (draining, started) = tokio::join!(run, start);
                (draining?, started?)
            };
            let status = moved(store).await?;
            let drain = move_figures(&status, keys, n + width, n);
            Ok((during, grow, after, draining, drain, started))
        })
        .await?;
    let store = Store::open(cfg.clone())
        .await
        .context("opening the drained store")?;
    let devices = store.manager().devices().len();
    store.shutdown().await?;
    if devices != n {
        bail!("after the drain the array has {devices} devices, not {n}");
    }

    let load_rows = vec![
        load_figures(&format!("before ({n} devices)"), &before),
        load_figures("during the grow's move", &during),
        load_figures(&format!("after ({} devices)", n + width), &after),
        load_figures("during the online drain's move", &draining),
    ];
    let errors: u64 = load_rows.iter().map(|l| l.errors).sum();
    if errors > 0 {
        bail!("{errors} requests failed during the runs");
    }
    Ok(GrowBenchReport {
        machine: s3load::machine_description(),
        store: description,
        objects,
        size,
        clients: args.clients,
        get_ratio: args.get_ratio,
        get_p99_ratio: load_rows[1].get_p99_us / load_rows[0].get_p99_us.max(1e-9),
        overlap: (grow.elapsed_s / during.elapsed_s.max(1e-9)).min(1.0),
        drain_start_ms,
        load: load_rows,
        moves: vec![grow, drain],
    })
}

/// The report as Markdown.
fn render(r: &GrowBenchReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "# railstore bench grow\n");
    let _ = writeln!(out, "{}; {}", r.machine, r.store);
    let _ = writeln!(
        out,
        "{} objects of {}, {} clients, {:.0} % GETs\n",
        r.objects,
        r.size,
        r.clients,
        r.get_ratio * 100.0
    );
    let _ = writeln!(
        out,
        "| load | ops/s | GET p50 ms | GET p99 ms | PUT p99 ms | errors |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: |");
    for l in &r.load {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {} |",
            l.phase,
            l.ops_per_s,
            l.get_p50_us / 1e3,
            l.get_p99_us / 1e3,
            l.put_p99_us / 1e3,
            l.errors
        );
    }
    let _ = writeln!(
        out,
        "\n| move | devices | keys | moved | share | s | keys/s | MB/s |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for m in &r.moves {
        let _ = writeln!(
            out,
            "| {} | {} -> {} | {} | {} | {:.3} | {:.2} | {:.0} | {:.1} |",
            m.kind,
            m.devices_before,
            m.devices_after,
            m.keys,
            m.keys_moved,
            m.share_moved,
            m.elapsed_s,
            m.keys_per_s,
            m.mb_per_s
        );
    }
    let _ = writeln!(
        out,
        "\nshare of the keys the grow moved: {:.3} (goal <= 0.55); GET p99 during its move / \
         before: {:.2} (the move ran {:.0} % of that run); the online drain started in \
         {:.1} ms under the load; no request failed",
        r.moves[0].share_moved,
        r.get_p99_ratio,
        r.overlap * 100.0,
        r.drain_start_ms
    );
    out
}
