//! What a seed reports, and the summary of many seeds per configuration.

use std::collections::BTreeMap;
use std::fmt::Write;

/// A violation the checker found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The configuration's name.
    pub config: String,
    /// The step it was found at (the number of steps for the final check).
    pub step: usize,
    /// What went wrong.
    pub what: String,
    /// The command that replays the seed.
    pub replay: String,
    /// The known bug (`SIM-n`, see [`crate::known`]) this is a symptom of; `None` for a new
    /// failure.
    pub known: Option<&'static str>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.known {
            Some(id) => write!(f, "KNOWN BUG {id} seed {}", self.seed)?,
            None => write!(f, "FAILURE seed {}", self.seed)?,
        }
        write!(
            f,
            " config {} step {}: {}\n  replay: {}",
            self.config, self.step, self.what, self.replay
        )
    }
}

/// Counters of one seed (and, summed, of many).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Steps run.
    pub steps: u64,
    /// Operations run.
    pub ops: u64,
    /// Operations answered with an error (outcome unknown; allowed, not a violation).
    pub op_errors: u64,
    /// Faults and offline commands injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Store opens (service and offline).
    pub opens: u64,
    /// Reads refused with an error beyond tolerance.
    pub reads_refused: u64,
    /// Objects gone missing beyond tolerance while the store reported damage.
    pub lost_reported: u64,
    /// Opens refused beyond tolerance (the seed ends there).
    pub opens_refused: u64,
    /// Objects a scrub or rebuild reported lost.
    pub repair_lost: u64,
    /// Keys whose uncertain outcome a restart resolved.
    pub narrowed: u64,
    /// Known bugs met and worked around (retried, or carried on), by id.
    pub known_hits: BTreeMap<&'static str, u64>,
}

impl Stats {
    /// Counts a fault of `kind`.
    pub fn fault(&mut self, kind: &'static str) {
        *self.faults.entry(kind).or_default() += 1;
    }

    /// Adds `o` to these.
    pub fn add(&mut self, o: &Stats) {
        self.steps += o.steps;
        self.ops += o.ops;
        self.op_errors += o.op_errors;
        for (k, v) in &o.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.opens += o.opens;
        self.reads_refused += o.reads_refused;
        self.lost_reported += o.lost_reported;
        self.opens_refused += o.opens_refused;
        self.repair_lost += o.repair_lost;
        self.narrowed += o.narrowed;
        for (k, v) in &o.known_hits {
            *self.known_hits.entry(k).or_default() += v;
        }
    }
}

/// What one seed did and found.
#[derive(Debug, Clone)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// The configuration's name.
    pub config: String,
    /// The hash of the seed's plan (the operations and faults it drew).
    pub plan_hash: u64,
    /// The hash of what was executed, in order (the plan's actions as they ran, without the
    /// store's answers).
    pub trace_hash: u64,
    /// What was executed, one action a line (the text [`SeedReport::trace_hash`] hashes).
    pub trace: String,
    /// Counters.
    pub stats: Stats,
    /// New violations (the seed stops at the first check that finds any).
    pub failures: Vec<Failure>,
    /// Symptoms of known bugs that stopped the seed (see [`crate::known`]).
    pub known: Vec<Failure>,
}

/// Seeds of one configuration, summed.
#[derive(Debug, Clone, Default)]
pub struct ConfigSummary {
    /// Seeds run.
    pub seeds: u64,
    /// Counters.
    pub stats: Stats,
    /// Seeds that failed, with their first failure.
    pub failed: Vec<Failure>,
    /// Seeds stopped by a known bug, with the symptom.
    pub known: Vec<Failure>,
}

/// Summaries by configuration name.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// By configuration.
    pub configs: BTreeMap<String, ConfigSummary>,
}

impl Summary {
    /// Adds a seed's report.
    pub fn add(&mut self, r: &SeedReport) {
        let c = self.configs.entry(r.config.clone()).or_default();
        c.seeds += 1;
        c.stats.add(&r.stats);
        if let Some(f) = r.failures.first() {
            c.failed.push(f.clone());
        } else if let Some(f) = r.known.first() {
            c.known.push(f.clone());
        }
    }

    /// Seeds stopped by each known bug, over every configuration.
    pub fn known(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut out = std::collections::BTreeMap::new();
        for c in self.configs.values() {
            for f in &c.known {
                *out.entry(f.known.unwrap_or("?")).or_default() += 1;
            }
        }
        out
    }

    /// Seeds that failed, over every configuration.
    pub fn failures(&self) -> usize {
        self.configs.values().map(|c| c.failed.len()).sum()
    }

    /// The summary as text: one block per configuration.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for (name, c) in &self.configs {
            let st = &c.stats;
            let _ = writeln!(
                s,
                "{name}: {} seeds, {} steps, {} operations ({} answered with an error), {} opens, \
                 {} failures, {} stopped by known bugs",
                c.seeds,
                st.steps,
                st.ops,
                st.op_errors,
                st.opens,
                c.failed.len(),
                c.known.len()
            );
            let faults: Vec<String> = st.faults.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(s, "  faults: {}", faults.join(", "));
            let _ = writeln!(
                s,
                "  uncertain outcomes resolved {}, reads refused {}, losses reported {}, opens \
                 refused {}, objects reported lost by repair {}",
                st.narrowed, st.reads_refused, st.lost_reported, st.opens_refused, st.repair_lost
            );
            let mut known: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
            for f in &c.known {
                known.entry(f.known.unwrap_or("?")).or_default().0 += 1;
            }
            for (id, n) in &st.known_hits {
                known.entry(id).or_default().1 += n;
            }
            if !known.is_empty() {
                let k: Vec<String> = known
                    .iter()
                    .map(|(id, (stops, hits))| {
                        format!("{id} stopped {stops} seeds, worked around {hits} times")
                    })
                    .collect();
                let _ = writeln!(s, "  known bugs: {}", k.join("; "));
            }
            for f in &c.failed {
                let first = f.what.lines().next().unwrap_or("");
                let _ = writeln!(s, "  FAILED seed {} step {}: {first}", f.seed, f.step);
                let _ = writeln!(s, "    replay: {}", f.replay);
            }
        }
        s
    }
}
