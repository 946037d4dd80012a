//! What a simulation runs on: the configurations (policy × separation × device count), the
//! mode (within the configuration's tolerance, or beyond it) and the deliberate mutations that
//! show the checker bites.

use railstore_redundancy::Policy;
use railstore_store::{DeviceKind, Mechanism, SeparationConfig, StoreConfig};
use std::path::Path;
use std::time::Duration;

/// The redundancy policy of a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Three copies of everything.
    Rep3,
    /// RS(3,3) over each object's pieces.
    Split33,
    /// RS(3,3) over packing sets of small objects.
    Pack33,
    /// `StoreConfig::default()`'s policy: rep3 up to 4 KiB, pack3+3 up to 64 KiB, split3+3
    /// above.
    Hybrid,
}

impl PolicyKind {
    /// Every policy.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::Rep3,
        PolicyKind::Split33,
        PolicyKind::Pack33,
        PolicyKind::Hybrid,
    ];

    /// Its name in configuration names.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Rep3 => "rep3",
            PolicyKind::Split33 => "split3+3",
            PolicyKind::Pack33 => "pack3+3",
            PolicyKind::Hybrid => "hybrid",
        }
    }

    /// Devices that may be lost (failed, stale, wiped, flaky) at once without losing anything:
    /// the smallest tolerance of the policy's mechanisms (r - 1 for repR, m for k+m).
    pub fn tolerance(self) -> usize {
        match self {
            PolicyKind::Rep3 | PolicyKind::Hybrid => 2,
            PolicyKind::Split33 | PolicyKind::Pack33 => 3,
        }
    }

    /// Readers at once under separation: at least the largest k, below the group width.
    fn window(self) -> usize {
        match self {
            PolicyKind::Rep3 => 2,
            _ => 3,
        }
    }
}

/// A deliberate defect the harness introduces, to show that the checker reports it. None of
/// them touches the store's code: each is something the harness does behind the store's back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// At an early stop every device's contents are copied; at a later stop every device is
    /// put back to that copy, with its identity record replaced by the current one, so the
    /// identity checks cannot see it. Acknowledged writes and deletes since are undone.
    UndetectableRollback,
    /// While operations run, `sync` on every device returns success without flushing the
    /// device's volatile cache; a power cut then drops acknowledged writes.
    LyingSync,
    /// Multi-node: a node that was down while objects were overwritten comes back, and its
    /// devices are marked healthy in the array's state file behind the store's back, so the
    /// store takes their old copies as current.
    NodeBackAsCurrent,
}

impl Mutation {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutation::UndetectableRollback => "rollback",
            Mutation::LyingSync => "lying-sync",
            Mutation::NodeBackAsCurrent => "node-back-current",
        }
    }

    /// The mutation called `name`.
    pub fn parse(name: &str) -> Option<Mutation> {
        [
            Mutation::UndetectableRollback,
            Mutation::LyingSync,
            Mutation::NodeBackAsCurrent,
        ]
        .into_iter()
        .find(|m| m.name() == name)
    }
}

/// One simulated configuration and how to run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// The redundancy policy.
    pub policy: PolicyKind,
    /// Read/write separation on.
    pub separation: bool,
    /// Devices in the array.
    pub devices: usize,
    /// Steps per seed.
    pub steps: usize,
    /// Go beyond the configuration's tolerance once per seed (the store must then refuse or
    /// report, never return wrong data).
    pub beyond: bool,
    /// A deliberate defect (see [`Mutation`]); `None` in real runs.
    pub mutation: Option<Mutation>,
    /// Print what happens (the plan's actions, every answer, every check) to stderr.
    pub verbose: bool,
    /// Machines the devices are spread over (1: one machine). With more, the devices are
    /// placed with the node as the failure domain, as a cluster's map places them, and a
    /// node can go down whole mid-step and come back at the next stop.
    pub nodes: usize,
}

/// Steps per seed unless told otherwise.
pub const DEFAULT_STEPS: usize = 24;

impl SimConfig {
    /// The configuration's name: `<policy>-<sep|nosep>-n<devices>[-<nodes>nodes]`, e.g.
    /// `split3+3-sep-n12`, `rep3-nosep-n6-3nodes`.
    pub fn name(&self) -> String {
        format!(
            "{}-{}-n{}{}",
            self.policy.name(),
            if self.separation { "sep" } else { "nosep" },
            self.devices,
            if self.nodes > 1 {
                format!("-{}nodes", self.nodes)
            } else {
                String::new()
            }
        )
    }

    /// The array devices on each node (`nodes[i]` holds node i's), placed as the cluster map
    /// places them (`railstore_cluster::domain::arrange`); one node of every device when
    /// the configuration has one machine.
    pub fn node_devices(&self) -> Vec<Vec<usize>> {
        if self.nodes <= 1 {
            return vec![(0..self.devices).collect()];
        }
        railstore_cluster::domain::arrange(
            self.nodes,
            self.devices / self.nodes,
            self.group_width(),
        )
    }

    /// Devices that may be lost at once (see [`PolicyKind::tolerance`]).
    pub fn tolerance(&self) -> usize {
        self.policy.tolerance()
    }

    /// The command that replays `seed` exactly.
    pub fn replay_command(&self, seed: u64) -> String {
        let mut c = format!(
            "railstore sim --seed {seed} --config {} --steps {}",
            self.name(),
            self.steps
        );
        if self.beyond {
            c.push_str(" --beyond");
        }
        if let Some(m) = self.mutation {
            c.push_str(&format!(" --mutation {}", m.name()));
        }
        c
    }

    /// The width of a redundancy group: what a grow adds.
    pub fn group_width(&self) -> usize {
        self.store_config(Path::new("/"), Duration::from_millis(100), true)
            .manager
            .layout(self.devices)
            .expect("the configuration's layout")
            .width()
    }

    /// The store's configuration for a seed's data folder. `frame` is the separation frame and
    /// `partial_when_full` whether full buffers write through (the seed picks both).
    pub fn store_config(
        &self,
        data_dir: &Path,
        frame: Duration,
        partial_when_full: bool,
    ) -> StoreConfig {
        let mech = |s| Mechanism::parse(s).expect("a valid mechanism");
        let mut c = StoreConfig {
            data_dir: data_dir.to_path_buf(),
            // Small sizes so that every size class occurs: inline bodies up to 4 KiB, chunks
            // of 80 KiB (above the hybrid policy's 64 KiB pack limit, so full chunks are
            // split3+3 and tails pack3+3), parts from 16 KiB.
            inline_bytes_max: 4 << 10,
            chunk_bytes: 80 << 10,
            part_bytes_min: 16 << 10,
            ..StoreConfig::default()
        };
        c.devices.kind = DeviceKind::Mem;
        c.devices.count = self.devices;
        c.devices.direct_io = false;
        match self.policy {
            PolicyKind::Rep3 => {
                c.manager.policy = railstore_store_policy(mech("rep3"));
            }
            PolicyKind::Split33 => {
                c.manager.policy = railstore_store_policy(mech("split3+3"));
            }
            PolicyKind::Pack33 => {
                c.manager.policy = railstore_store_policy(mech("pack3+3"));
            }
            PolicyKind::Hybrid => {}
        }
        c.separation = self.separation.then_some(SeparationConfig {
            frame,
            window: self.policy.window(),
            window_max: None,
            adaptive: true,
            guard: Duration::from_millis(20),
            write_buffer_bytes_max: 1 << 20,
            partial_when_full,
            journal_copies: None,
        });
        c
    }
}

fn railstore_store_policy(m: Mechanism) -> Policy {
    Policy::Standalone(m)
}

/// Every configuration: the four policies, separation on and off, 6 and 12 devices.
pub fn configurations(steps: usize) -> Vec<SimConfig> {
    let mut out = Vec::new();
    for policy in PolicyKind::ALL {
        for separation in [true, false] {
            for devices in [6, 12] {
                out.push(SimConfig {
                    policy,
                    separation,
                    devices,
                    steps,
                    beyond: false,
                    mutation: None,
                    verbose: false,
                    nodes: 1,
                });
            }
        }
    }
    out
}

/// The multi-node configurations: the four policies, separation on and off, six devices on
/// three nodes of two (a node's loss stays within every policy's tolerance).
pub fn node_configurations(steps: usize) -> Vec<SimConfig> {
    configurations(steps)
        .into_iter()
        .filter(|c| c.devices == 6)
        .map(|c| SimConfig { nodes: 3, ..c })
        .collect()
}

/// The configuration called `name` (see [`SimConfig::name`]), of either list.
pub fn configuration(name: &str, steps: usize) -> Option<SimConfig> {
    configurations(steps)
        .into_iter()
        .chain(node_configurations(steps))
        .find(|c| c.name() == name)
}
