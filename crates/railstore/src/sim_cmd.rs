//! `railstore sim`: the deterministic whole-system simulator (docs/sim.md).

use anyhow::{bail, Result};
use railstore_sim::{known, Mutation, SimConfig};
use std::io::Write;
use std::time::Instant;

/// Arguments of `railstore sim`.
#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Seeds to run, over the configurations (seed s runs configuration s mod 16 with
    /// `--config all`, s mod 8 with `--config nodes`). Default: 100, or 1 with --seed.
    #[arg(long)]
    seeds: Option<u64>,
    /// The first seed (alone: replay exactly this seed).
    #[arg(long)]
    seed: Option<u64>,
    /// A configuration (`rep3-sep-n6`, `split3+3-nosep-n12`, `hybrid-sep-n6-3nodes`, …; see
    /// docs/sim.md), `all` (the one-machine ones) or `nodes` (the multi-node ones).
    #[arg(long, default_value = "all")]
    config: String,
    /// Steps per seed.
    #[arg(long, default_value_t = railstore_sim::DEFAULT_STEPS)]
    steps: usize,
    /// Go beyond the configuration's tolerance once per seed: the store must then refuse or
    /// report, never return wrong data.
    #[arg(long)]
    beyond: bool,
    /// A deliberate defect that the checker must catch (`rollback`, `lying-sync`;
    /// `node-back-current` in the multi-node configurations).
    #[arg(long)]
    mutation: Option<String>,
    /// Run each seed this many times (the store's own randomness can make a failure show
    /// only on some runs of its seed).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Threads (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// Seeds stopped by a known bug (docs/sim.md) do not make the run fail.
    #[arg(long)]
    allow_known: bool,
    /// Print every action, answer and check to stderr.
    #[arg(long)]
    trace: bool,
}

pub fn run(args: &SimArgs) -> Result<()> {
    let mut configs: Vec<SimConfig> = match args.config.as_str() {
        "all" => railstore_sim::configurations(args.steps),
        "nodes" => railstore_sim::node_configurations(args.steps),
        name => match railstore_sim::configuration(name, args.steps) {
            Some(c) => vec![c],
            None => {
                let names: Vec<String> = railstore_sim::configurations(args.steps)
                    .iter()
                    .chain(&railstore_sim::node_configurations(args.steps))
                    .map(SimConfig::name)
                    .collect();
                bail!(
                    "unknown configuration {:?}; the configurations are all, nodes, {}",
                    args.config,
                    names.join(", ")
                );
            }
        },
    };
    let mutation = match &args.mutation {
        None => None,
        Some(m) => match Mutation::parse(m) {
            Some(m) => Some(m),
            None => bail!("unknown mutation {m:?}: rollback, lying-sync or node-back-current"),
        },
    };
    if mutation == Some(Mutation::NodeBackAsCurrent) && configs.iter().any(|c| c.nodes < 2) {
        bail!(
            "--mutation node-back-current needs nodes: --config nodes or a *-3nodes configuration"
        );
    }
    for c in &mut configs {
        c.beyond = args.beyond;
        c.mutation = mutation;
        c.verbose = args.trace;
    }
    let first = args.seed.unwrap_or(0);
    let count = args
        .seeds
        .unwrap_or(if args.seed.is_some() { 1 } else { 100 });
    let seeds: Vec<u64> = (first..first.saturating_add(count))
        .flat_map(|s| std::iter::repeat_n(s, args.repeat.max(1) as usize))
        .collect();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let total = seeds.len();
    println!(
        "railstore sim: {total} runs of seeds {first}..{} over {} configuration{}, {} steps \
         each{}{}, {threads} threads",
        first.saturating_add(count),
        configs.len(),
        if configs.len() == 1 { "" } else { "s" },
        args.steps,
        if args.beyond {
            ", beyond tolerance"
        } else {
            ", within tolerance"
        },
        mutation.map_or(String::new(), |m| format!(", mutation {}", m.name())),
    );
    let started = Instant::now();
    let failed = std::sync::atomic::AtomicUsize::new(0);
    let known_stops = std::sync::atomic::AtomicUsize::new(0);
    let progress = |done: usize, r: &railstore_sim::SeedReport| {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(f) = r.failures.first() {
            failed.fetch_add(1, Relaxed);
            eprintln!("\n{f}");
        } else if !r.known.is_empty() {
            known_stops.fetch_add(1, Relaxed);
        }
        let secs = started.elapsed().as_secs_f64();
        eprint!(
            "\r{done}/{total} seeds, {:.0} seeds/s, {} failures, {} stopped by known bugs   ",
            done as f64 / secs.max(1e-9),
            failed.load(Relaxed),
            known_stops.load(Relaxed)
        );
        let _ = std::io::stderr().flush();
    };
    let (summary, _) = railstore_sim::run_seeds(&configs, &seeds, threads, &progress);
    let secs = started.elapsed().as_secs_f64();
    eprintln!();
    println!(
        "{total} seeds in {secs:.1} s ({:.1} seeds/s)\n",
        total as f64 / secs.max(1e-9)
    );
    print!("{}", summary.text());
    let known = summary.known();
    if !known.is_empty() {
        println!("\nknown bugs (docs/sim.md):");
        for (id, n) in &known {
            let what = known::by_id(id).map_or("", |b| b.summary);
            println!("  {id} ({n} seeds): {what}");
        }
    }
    let failures = summary.failures();
    if failures > 0 {
        bail!("{failures} seeds failed; each failure above prints the command that replays it");
    }
    let stops: usize = known.values().sum();
    if stops > 0 && !args.allow_known {
        bail!("{stops} seeds stopped by known bugs (--allow-known accepts them)");
    }
    Ok(())
}
