//! `railstore bench ceph-study`: the Ceph SSD study (ceph-ec-ssd-overheads.txt) reproduced on
//! railstore's block volumes. A store runs in this process with its NBD export on a loopback
//! port; for each mechanism a volume is made and filled, then fio's `nbd` engine (or, without
//! fio, the project's own NBD load generator on the same path) drives sequential and random
//! reads and writes at each request size. Per point: MB/s, IOPS, latency p50/p99/p99.9, the
//! server's CPU user and system seconds per GB, its context switches per MB, and the device
//! bytes read and written per byte asked (from the store's own device counters, the rails
//! journal included).
//!
//! CPU and context switches are the process's (`getrusage`) over the point: fio is another
//! process, so they are the server's alone; the own generator runs on a thread of its own
//! whose usage is taken out.

use super::{device_bytes, driver, Exported};
use crate::harness::{process_disk_bytes, OutputArgs, Usage};
use crate::plot::{human_bytes, parse_bytes};
use crate::progress::bar;
use anyhow::{bail, ensure, Context, Result};
use railstore_node::TrafficSnapshot;
use railstore_redundancy::Mechanism;
use railstore_store::{Store, StoreConfig};
use railstore_volume::{VolumeSpec, Volumes};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

pub use super::study_report::Report;

/// The access pattern of one point (fio's `--rw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Sequential writes.
    Write,
    /// Random writes.
    Randwrite,
    /// Sequential reads.
    Read,
    /// Random reads.
    Randread,
}

impl Pattern {
    /// fio's name of it.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Write => "write",
            Pattern::Randwrite => "randwrite",
            Pattern::Read => "read",
            Pattern::Randread => "randread",
        }
    }

    pub(super) fn writes(self) -> bool {
        matches!(self, Pattern::Write | Pattern::Randwrite)
    }

    pub(super) fn random(self) -> bool {
        matches!(self, Pattern::Randwrite | Pattern::Randread)
    }
}

/// Which load generator drives the volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Generator {
    /// fio where it is installed with its `nbd` engine, else the own generator.
    Auto,
    /// fio's `nbd` engine (an error if fio is missing).
    Fio,
    /// The project's own NBD client (one connection, `--iodepth` requests in flight).
    Own,
}

/// Options of `railstore bench ceph-study` (the binary adds where the store comes from).
#[derive(Debug, Clone, clap::Args)]
pub struct CephStudyArgs {
    /// Mechanisms, a comma list (the study's: 3-replication, RS(6,3), RS(10,4)).
    #[arg(long, value_delimiter = ',', default_value = "rep3,split6+3,split10+4")]
    pub mechanisms: Vec<String>,
    /// Request sizes, a comma list. Default 1KiB,4KiB,16KiB,64KiB,128KiB,1MiB,4MiB (with
    /// `--quick`: 4KiB,128KiB,1MiB).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<String>>,
    /// Patterns, a comma list, run in this order at each size.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "write,randwrite,read,randread"
    )]
    pub patterns: Vec<Pattern>,
    /// Size of each volume (filled before the first point). Default 1GiB (256MiB with
    /// `--quick`).
    #[arg(long)]
    pub volume_size: Option<String>,
    /// Object size of the volumes (RBD's default is 4 MiB).
    #[arg(long, default_value = "4MiB")]
    pub object_size: String,
    /// Requests in flight (fio `--iodepth`, one job).
    #[arg(long, default_value_t = 16)]
    pub iodepth: usize,
    /// Measured seconds per point. Default 10 (2 with `--quick`).
    #[arg(long)]
    pub runtime: Option<u64>,
    /// Load generator.
    #[arg(long, value_enum, default_value = "auto")]
    pub generator: Generator,
    /// A short run: three request sizes, small volumes, 2 s per point (a few minutes).
    #[arg(long)]
    pub quick: bool,
    /// Random seed of the own generator's offsets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The resolved options.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub mechanisms: Vec<String>,
    pub sizes: Vec<u64>,
    pub patterns: Vec<Pattern>,
    pub volume_bytes: u64,
    pub object_bytes: u64,
    pub iodepth: usize,
    pub runtime_s: u64,
    pub generator: &'static str,
    pub seed: u64,
}

impl CephStudyArgs {
    /// Checks the options and fills in the defaults.
    pub fn plan(&self) -> Result<Plan> {
        let sizes: Vec<u64> = match &self.sizes {
            Some(s) => s.iter().map(|s| parse_bytes(s)).collect::<Result<_>>()?,
            None if self.quick => vec![4 << 10, 128 << 10, 1 << 20],
            None => vec![
                1 << 10,
                4 << 10,
                16 << 10,
                64 << 10,
                128 << 10,
                1 << 20,
                4 << 20,
            ],
        };
        ensure!(!sizes.is_empty(), "--sizes names no size");
        for &s in &sizes {
            ensure!(
                s >= 512 && s % 512 == 0 && s <= 32 << 20,
                "request size {s}: a multiple of 512 bytes up to 32 MiB"
            );
        }
        for m in &self.mechanisms {
            Mechanism::parse(m).with_context(|| format!("--mechanisms {m:?}"))?;
        }
        ensure!(!self.mechanisms.is_empty(), "--mechanisms names none");
        ensure!(!self.patterns.is_empty(), "--patterns names none");
        ensure!((1..=1024).contains(&self.iodepth), "--iodepth: 1 to 1024");
        let volume_bytes = match &self.volume_size {
            Some(s) => parse_bytes(s)?,
            None if self.quick => 256 << 20,
            None => 1 << 30,
        };
        let object_bytes = parse_bytes(&self.object_size)?;
        let largest = *sizes.iter().max().expect("sizes are not empty");
        ensure!(
            volume_bytes >= largest.max(object_bytes) && volume_bytes % 512 == 0,
            "--volume-size {volume_bytes}: a multiple of 512 bytes, at least the largest request \
             and one object"
        );
        let runtime_s = self.runtime.unwrap_or(if self.quick { 2 } else { 10 });
        ensure!(runtime_s >= 1, "--runtime: at least 1 second");
        let generator = match self.generator {
            Generator::Own => "own",
            Generator::Fio => {
                if !driver::fio_has_nbd() {
                    bail!("fio with its nbd engine was not found on PATH (--generator own works without it)");
                }
                "fio"
            }
            Generator::Auto if driver::fio_has_nbd() => "fio",
            Generator::Auto => "own",
        };
        Ok(Plan {
            mechanisms: self.mechanisms.clone(),
            sizes,
            patterns: self.patterns.clone(),
            volume_bytes,
            object_bytes,
            iodepth: self.iodepth,
            runtime_s,
            generator,
            seed: self.seed,
        })
    }
}

/// The study's store when no configuration is given: 14 file devices (RS(10,4) needs 14),
/// no read/write separation (Ceph has none; the study measures the coding's costs), groups
/// as wide as the widest mechanism asked for.
pub fn default_config(args: &CephStudyArgs) -> Result<StoreConfig> {
    let mut cfg = StoreConfig::default();
    let widest = args
        .mechanisms
        .iter()
        .map(|m| Mechanism::parse(m).map(|m| m.width()))
        .collect::<std::result::Result<Vec<_>, _>>()?
        .into_iter()
        .max()
        .unwrap_or(1);
    cfg.devices.count = widest.max(6);
    cfg.manager.layout_width = Some(widest.max(6));
    cfg.separation = None;
    Ok(cfg)
}

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub mechanism: String,
    pub pattern: Pattern,
    pub request_bytes: u64,
    pub generator: &'static str,
    pub seconds: f64,
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub lat_mean_us: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_p999_us: f64,
    /// Server CPU seconds in user mode per GB moved.
    pub cpu_user_s_per_gb: f64,
    /// Server CPU seconds in the kernel per GB moved.
    pub cpu_system_s_per_gb: f64,
    pub context_switches_per_mb: f64,
    /// Device bytes read per byte the client read or wrote.
    pub device_read_per_byte: f64,
    /// Device bytes written (pieces with headers, and the rails journal) per byte.
    pub device_write_per_byte: f64,
    /// Bytes the process read from disk (`/proc/self/io`: what the file devices' reads,
    /// index and compaction included, took from the block layer) per byte; `None` where
    /// unknown. With memory devices, or buffered I/O served from the page cache, it is 0.
    pub disk_read_per_byte: Option<f64>,
    /// Bytes the process wrote to disk per byte (as above; what Ceph's study and the anchor
    /// measure at the devices).
    pub disk_write_per_byte: Option<f64>,
    /// Across nodes (`bench cluster`): bytes on the cluster network (the gRPC messages between
    /// the serving node and the other nodes, both ways) per byte the client moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_per_byte: Option<f64>,
    /// The same counted on the nodes' sockets (HTTP/2 framing, headers and pings included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_per_byte: Option<f64>,
    /// `network_per_byte` by kind of call (store, retrieve, ...), the calls that moved any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_per_byte_by_call: Option<BTreeMap<&'static str, f64>>,
}

/// What the other nodes have moved over the cluster network so far (`bench cluster`).
pub type NetworkProbe<'a> = &'a (dyn Fn() -> TrafficSnapshot + Send + Sync);

/// Runs the study on a fresh store opened from `cfg` (its data folder must be empty and is
/// the caller's to remove).
pub async fn run(args: &CephStudyArgs, cfg: StoreConfig) -> Result<Report> {
    args.plan()?;
    let store_text = format!(
        "{} devices, {}",
        cfg.device_count(),
        if cfg.separation.is_some() {
            "read/write separation"
        } else {
            "no read/write separation"
        }
    );
    let store = Store::open(cfg).await.context("opening the store")?;
    run_on(args, store, store_text, None, "ceph-study").await
}

/// Runs the study on `store` (described by `store_text`) and shuts it down; with `network`,
/// each point also counts the cluster network's bytes. `title` heads the summary.
pub async fn run_on(
    args: &CephStudyArgs,
    store: Store,
    store_text: String,
    network: Option<NetworkProbe<'_>>,
    title: &'static str,
) -> Result<Report> {
    let plan = args.plan()?;
    let result = measure(args, &plan, &store, network, title).await;
    let shut = store.shutdown().await;
    let rows = result?;
    shut.context("shutting the store down")?;
    Ok(Report::new(title, plan, store_text, rows))
}

async fn measure(
    args: &CephStudyArgs,
    plan: &Plan,
    store: &Store,
    network: Option<NetworkProbe<'_>>,
    title: &str,
) -> Result<Vec<Row>> {
    let export = Exported::start(store, None).await?;
    let result = measure_volumes(
        args,
        plan,
        store,
        &export.volumes,
        export.addr,
        network,
        title,
    )
    .await;
    export.stop().await?;
    result
}

#[allow(clippy::too_many_arguments)]
async fn measure_volumes(
    args: &CephStudyArgs,
    plan: &Plan,
    store: &Store,
    volumes: &Volumes,
    addr: SocketAddr,
    network: Option<NetworkProbe<'_>>,
    title: &str,
) -> Result<Vec<Row>> {
    let points = plan.mechanisms.len() * plan.sizes.len() * plan.patterns.len();
    args.output.say(&format!(
        "{title}: {} x {} sizes x {} patterns = {points} points of {} s, {} volumes of {} \
         with {} objects, iodepth {}, generator {}",
        plan.mechanisms.join(","),
        plan.sizes.len(),
        plan.patterns.len(),
        plan.runtime_s,
        plan.mechanisms.len(),
        human_bytes(plan.volume_bytes),
        human_bytes(plan.object_bytes),
        plan.iodepth,
        plan.generator
    ));
    let progress = bar(args.output.quiet, Some(points as u64), title);
    let mut rows = Vec::new();
    for (i, mech) in plan.mechanisms.iter().enumerate() {
        let name = format!("study-{i}-{}", mech.replace('+', "-"));
        let mechanism = Mechanism::parse(mech)?;
        volumes
            .create(VolumeSpec {
                name: name.clone(),
                size: plan.volume_bytes,
                object_bytes: plan.object_bytes,
                mechanism: Some(mechanism),
            })
            .await
            .with_context(|| format!("creating a {mech} volume"))?;
        progress.set_message(format!("{mech} fill"));
        // Every object written once, so reads find data (a never-written object reads as
        // zeros without touching a device).
        let fill = plan.object_bytes.min(4 << 20);
        driver::own(
            addr,
            &name,
            Pattern::Write,
            fill,
            4,
            driver::Amount::Ops(plan.volume_bytes / fill),
            plan.volume_bytes,
            plan.seed,
        )
        .await
        .with_context(|| format!("filling the {mech} volume"))?;
        store.flush().await?;
        for &size in &plan.sizes {
            for &pattern in &plan.patterns {
                progress.set_message(format!("{mech} {} {}", pattern.name(), human_bytes(size)));
                let row = point(plan, store, addr, &name, mech, pattern, size, network).await?;
                progress.inc(1);
                progress.suspend(|| {
                    args.output.say(&format!(
                        "{mech:>10} {:>9} {:>7}: {:>9.1} MB/s {:>8.0} IOPS p50 {:>7.0} us p99 \
                         {:>8.0} us  CPU {:.2}+{:.2} s/GB  {:.0} cs/MB  dev r {:.2} w {:.2}{}",
                        pattern.name(),
                        human_bytes(size),
                        row.mb_per_s,
                        row.iops,
                        row.lat_p50_us,
                        row.lat_p99_us,
                        row.cpu_user_s_per_gb,
                        row.cpu_system_s_per_gb,
                        row.context_switches_per_mb,
                        row.device_read_per_byte,
                        row.device_write_per_byte,
                        row.network_per_byte
                            .map_or(String::new(), |n| format!("  net {n:.2}"))
                    ))
                });
                ensure!(
                    row.errors == 0,
                    "{mech} {} {}: {} requests failed",
                    pattern.name(),
                    human_bytes(size),
                    row.errors
                );
                rows.push(row);
            }
        }
        volumes.delete(&name).await?;
    }
    progress.finish_and_clear();
    Ok(rows)
}

#[allow(clippy::too_many_arguments)]
async fn point(
    plan: &Plan,
    store: &Store,
    addr: SocketAddr,
    volume: &str,
    mech: &str,
    pattern: Pattern,
    size: u64,
    network: Option<NetworkProbe<'_>>,
) -> Result<Row> {
    let runtime = Duration::from_secs(plan.runtime_s);
    let dev0 = device_bytes(store).await;
    let net0 = network.map(|n| n());
    let disk0 = process_disk_bytes();
    let usage0 = Usage::process();
    let m = match plan.generator {
        "fio" => {
            driver::fio(
                addr,
                volume,
                pattern,
                size,
                plan.iodepth,
                runtime,
                plan.volume_bytes,
            )
            .await?
        }
        _ => {
            driver::own(
                addr,
                volume,
                pattern,
                size,
                plan.iodepth,
                driver::Amount::Time(runtime),
                plan.volume_bytes,
                plan.seed,
            )
            .await?
        }
    };
    let server = Usage::process().since(&usage0).minus(&m.client);
    // Before the device counters are read: reading them asks every device for its figures,
    // remote ones over the network, which is not the load's traffic.
    let net = network.zip(net0).map(|(n, before)| n().since(&before));
    let dev1 = device_bytes(store).await;
    let disk = disk0.zip(process_disk_bytes()).map(|(a, b)| {
        (
            b.0.saturating_sub(a.0) as f64,
            b.1.saturating_sub(a.1) as f64,
        )
    });
    let bytes = m.bytes.max(1) as f64;
    Ok(Row {
        mechanism: mech.to_string(),
        pattern,
        request_bytes: size,
        generator: plan.generator,
        seconds: m.seconds,
        ops: m.ops,
        bytes: m.bytes,
        errors: m.errors,
        iops: m.ops as f64 / m.seconds.max(1e-9),
        mb_per_s: m.bytes as f64 / 1e6 / m.seconds.max(1e-9),
        lat_mean_us: m.lat_mean_us,
        lat_p50_us: m.lat_us[0],
        lat_p99_us: m.lat_us[1],
        lat_p999_us: m.lat_us[2],
        cpu_user_s_per_gb: server.user_s / (bytes / 1e9),
        cpu_system_s_per_gb: server.system_s / (bytes / 1e9),
        context_switches_per_mb: server.context_switches as f64 / (bytes / 1e6),
        device_read_per_byte: dev1.0.saturating_sub(dev0.0) as f64 / bytes,
        device_write_per_byte: dev1.1.saturating_sub(dev0.1) as f64 / bytes,
        disk_read_per_byte: disk.map(|d| d.0 / bytes),
        disk_write_per_byte: disk.map(|d| d.1 / bytes),
        network_per_byte: net.as_ref().map(|n| n.message_bytes() as f64 / bytes),
        socket_per_byte: net.as_ref().map(|n| n.socket_bytes() as f64 / bytes),
        network_per_byte_by_call: net.as_ref().map(|n| {
            n.calls
                .iter()
                .filter(|c| c.received + c.sent > 0)
                .map(|c| (c.call.name(), (c.received + c.sent) as f64 / bytes))
                .collect()
        }),
    })
}
