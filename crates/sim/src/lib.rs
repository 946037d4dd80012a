//! The deterministic whole-system simulator (in the spirit of TigerBeetle's VOPR and
//! FoundationDB's simulation): a seed draws random S3-level operations and faults, runs them
//! against the real store, redundancy and rails over fault-injecting memory devices in virtual
//! time, and checks a model after every step. See `docs/sim.md`.
//!
//! - [`plan`]: the seed's operations and faults, drawn before anything runs.
//! - `world`: the harness (devices, process incarnations, faults, checks).
//! - [`model`]: per key, the states the store may show.
//! - [`body`]: self-describing bodies, so a mix of versions is visible and explained.

pub mod body;
pub mod config;
mod gate;
pub mod known;
pub mod model;
mod ops;
pub mod plan;
pub mod report;
pub mod volume;
mod world;

pub use config::{
    configuration, configurations, node_configurations, Mutation, PolicyKind, SimConfig,
    DEFAULT_STEPS,
};
pub use report::{ConfigSummary, Failure, SeedReport, Stats, Summary};

/// A seed for something numbered `n` within run `seed` (segments, device fault generators).
pub fn body_seed(seed: u64, n: u64) -> u64 {
    let mut x = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 33)).wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x = (x ^ (x >> 33)).wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    x ^ (x >> 33)
}

/// Runs `seed` under `cfg` and reports what happened. A panic of the harness or the store is
/// reported as a failure, not propagated.
pub fn run_seed(cfg: &SimConfig, seed: u64) -> SeedReport {
    let plan = plan::generate(cfg, seed);
    let plan_hash = plan.hash();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut w = world::World::new(cfg, seed, &plan);
        let _ = w.run(&plan);
        w.finish();
        w.report(plan_hash)
    }));
    match result {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            SeedReport {
                seed,
                config: cfg.name(),
                plan_hash,
                trace_hash: 0,
                trace: String::new(),
                stats: Stats::default(),
                failures: vec![Failure {
                    seed,
                    config: cfg.name(),
                    step: 0,
                    what: format!("panicked: {msg}"),
                    replay: cfg.replay_command(seed),
                    known: None,
                }],
                known: Vec::new(),
            }
        }
    }
}

/// Runs `seeds` (in that order, repeats allowed) on `threads` threads; seed `s` runs on
/// `configs[s % configs.len()]`. `progress` is called after each seed with (seeds done, its
/// report). Reports come back in the order of `seeds`.
pub fn run_seeds(
    configs: &[SimConfig],
    seeds: &[u64],
    threads: usize,
    progress: &(dyn Fn(usize, &SeedReport) + Sync),
) -> (Summary, Vec<SeedReport>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let reports = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&seed) = seeds.get(i) else { return };
                let cfg = &configs[(seed % configs.len() as u64) as usize];
                let r = run_seed(cfg, seed);
                let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                progress(n, &r);
                reports.lock().unwrap().push((i, r));
            });
        }
    });
    let mut reports = reports.into_inner().unwrap();
    reports.sort_by_key(|(i, _)| *i);
    let reports: Vec<SeedReport> = reports.into_iter().map(|(_, r)| r).collect();
    let mut summary = Summary::default();
    for r in &reports {
        summary.add(r);
    }
    (summary, reports)
}
