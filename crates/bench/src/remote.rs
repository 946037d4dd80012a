//! `railstore bench remote`: a device against the same device through a node on loopback
//! (issue 18, part 1), in one run: 1 MiB random reads and writes at queue depth 32 for
//! throughput, 4 KiB random reads at queue depth 1 for the latency the network adds. Local and
//! remote runs alternate, `--rounds` times each, and the medians are compared, so that drift in
//! the disk's speed during the run falls on both sides alike.

use crate::device::{measure_device, Backend, DeviceBenchArgs, DeviceBenchReport, Pattern};
use anyhow::Context;
use serde::Serialize;
use std::path::PathBuf;

/// Options of `railstore bench remote`.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoteBenchArgs {
    /// Backend of the device measured (the same device serves both sides).
    #[arg(long, value_enum, default_value = "file")]
    pub backend: Backend,
    /// Directory for the file device's data; a fresh temporary directory if not given.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Seconds per measured run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Runs of each side per case; the medians are compared.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bytes of data the 1 MiB cases span.
    #[arg(long, default_value_t = 1 << 30)]
    pub size_large: u64,
    /// Bytes of data the 4 KiB case spans.
    #[arg(long, default_value_t = 256 << 20)]
    pub size_small: u64,
    /// Worker threads of the node's runtime.
    #[arg(long, default_value_t = 1)]
    pub node_threads: usize,
    /// Threads driving the load (on both sides).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Only the cases whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Write the result as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One case: the same load locally and through the node.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteCase {
    /// What the case measures.
    pub name: String,
    /// Every local run.
    pub local: Vec<DeviceBenchReport>,
    /// Every remote run.
    pub remote: Vec<DeviceBenchReport>,
    /// Median MB/s, local.
    pub local_mbps: f64,
    /// Median MB/s, remote.
    pub remote_mbps: f64,
    /// Remote throughput over local.
    pub throughput_ratio: f64,
    /// Median p50 latency, local, µs.
    pub local_p50_us: f64,
    /// Median p50 latency, remote, µs.
    pub remote_p50_us: f64,
    /// What the node adds to the median latency, µs.
    pub p50_added_us: f64,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteBenchReport {
    /// The device measured.
    pub backend: Backend,
    /// Cases in order.
    pub cases: Vec<RemoteCase>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the comparison and returns it without printing.
pub fn measure(args: &RemoteBenchArgs) -> anyhow::Result<RemoteBenchReport> {
    let scratch = tempfile::tempdir_in(std::env::temp_dir())?;
    let root = args.path.clone().unwrap_or(scratch.path().to_path_buf());
    let cases = [
        (
            "1 MiB random reads, qd 32",
            Pattern::Randread,
            1 << 20,
            32,
            args.size_large,
        ),
        (
            "1 MiB random writes, qd 32",
            Pattern::Randwrite,
            1 << 20,
            32,
            args.size_large,
        ),
        (
            "4 KiB random reads, qd 1",
            Pattern::Randread,
            4096,
            1,
            args.size_small,
        ),
    ];
    let mut out = Vec::new();
    for (name, pattern, value_size, qd, size) in cases {
        if args
            .only
            .as_ref()
            .is_some_and(|o| !name.contains(o.as_str()))
        {
            continue;
        }
        let base = DeviceBenchArgs {
            backend: args.backend,
            // One device per value size, shared by both sides: the remote side reads what
            // the local side's prefill wrote.
            path: Some(root.join(format!("device-{value_size}"))),
            pattern,
            value_size,
            qd,
            duration: Some(args.duration),
            size,
            threads: args.threads,
            node_threads: args.node_threads,
            quiet: true,
            ..DeviceBenchArgs::default()
        };
        let (mut local, mut remote) = (Vec::new(), Vec::new());
        for round in 0..args.rounds.max(1) {
            for through_node in [false, true] {
                let run = DeviceBenchArgs {
                    remote: through_node,
                    seed: round as u64 + 1,
                    ..base.clone()
                };
                let r = measure_device(&run)
                    .with_context(|| format!("{name}, round {round}, remote {through_node}"))?;
                eprintln!(
                    "  {name}, round {}: {} {:.1} MB/s, p50 {:.1} µs",
                    round + 1,
                    if through_node { "remote" } else { "local " },
                    r.mbps,
                    r.p50_us
                );
                if through_node {
                    &mut remote
                } else {
                    &mut local
                }
                .push(r);
            }
        }
        let mbps = |v: &[DeviceBenchReport]| median(v.iter().map(|r| r.mbps).collect());
        let p50 = |v: &[DeviceBenchReport]| median(v.iter().map(|r| r.p50_us).collect());
        out.push(RemoteCase {
            name: name.into(),
            local_mbps: mbps(&local),
            remote_mbps: mbps(&remote),
            throughput_ratio: mbps(&remote) / mbps(&local),
            local_p50_us: p50(&local),
            remote_p50_us: p50(&remote),
            p50_added_us: p50(&remote) - p50(&local),
            local,
            remote,
        });
    }
    Ok(RemoteBenchReport {
        backend: args.backend,
        cases: out,
    })
}

/// Runs `railstore bench remote`: prints the table and writes `--json`.
pub fn run(args: &RemoteBenchArgs) -> anyhow::Result<()> {
    let r = measure(args)?;
    println!(
        "{:?} device, local against through a node on loopback ({} node thread(s), {} load thread(s)); medians of {} runs of {} s",
        r.backend, args.node_threads.max(1), args.threads.max(1), args.rounds.max(1), args.duration
    );
    println!(
        "  {:<28} {:>10} {:>10} {:>7} {:>10} {:>10} {:>9}",
        "case", "local MB/s", "node MB/s", "ratio", "local p50", "node p50", "added µs"
    );
    for c in &r.cases {
        println!(
            "  {:<28} {:>10.1} {:>10.1} {:>6.0}% {:>10.1} {:>10.1} {:>9.1}",
            c.name,
            c.local_mbps,
            c.remote_mbps,
            c.throughput_ratio * 100.0,
            c.local_p50_us,
            c.remote_p50_us,
            c.p50_added_us
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&r)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
