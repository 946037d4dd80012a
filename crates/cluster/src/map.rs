//! The cluster map: what etcd holds about the cluster, as one JSON document changed only by
//! compare-and-swap on its revision (`etcd.rs`). Pure: building, checking and changing a map
//! needs no etcd.

use crate::clock::FrameClock;
use crate::domain::{arrange, node_loss, node_of, NodeLoss};
use crate::error::{ClusterError, Result};
use railstore_placement::{Layout, LayoutSpec};
use railstore_redundancy::{Mechanism, Policy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the map's JSON.
pub const MAP_FORMAT: u32 = 1;

/// Longest node or cluster name.
pub const NAME_BYTES_MAX: usize = 63;

fn shards_default() -> u32 {
    crate::shards::SHARDS_DEFAULT
}

/// Everything the nodes must agree on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterMap {
    /// [`MAP_FORMAT`] when written.
    pub format: u32,
    /// The cluster's name (its key prefix in etcd).
    pub name: String,
    /// The array id every node's fences carry (random at creation).
    pub array_id: u64,
    /// The policy, as its mechanisms by size.
    pub policy: PolicySpec,
    /// Devices in a redundancy group (the widest mechanism).
    pub width: usize,
    /// Rounds of groups per device (`placement`).
    pub rounds: usize,
    /// Seed of the layout and of key hashing.
    pub seed: u64,
    /// Devices each node brings.
    pub devices_per_node: usize,
    /// The first layout forms once this many nodes are members.
    pub nodes_to_form: usize,
    /// Shards of the key space, each with one owner at a time (`shards.rs`).
    #[serde(default = "shards_default")]
    pub shards: u32,
    /// The rails frame clock.
    pub clock: FrameClock,
    /// Nodes that joined, by name. Membership is durable; liveness is a leased key beside the map.
    pub members: BTreeMap<String, Member>,
    /// The layout, once formed.
    pub layout: Option<ClusterLayout>,
}

/// The policy as the map keeps it: mechanisms by object size, named as in the configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySpec {
    /// (largest object length, mechanism), ascending.
    pub rules: Vec<(u64, String)>,
    /// The mechanism above every rule.
    pub rest: String,
}

/// A node that joined.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Where its node service (the remote devices) listens.
    pub address: String,
    /// Where it serves S3, if it does.
    pub s3: Option<String>,
    /// Its devices, by their names on the node.
    pub devices: Vec<String>,
    /// Bytes each device may hold.
    pub capacity_bytes: u64,
    /// When it joined (ms since the Unix epoch).
    pub joined_unix_ms: u64,
}

/// The devices of the array in array order, with the epoch that made them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterLayout {
    /// Layout epoch: fences carry it; it only rises.
    pub epoch: u64,
    /// Array device d lives on `devices[d]`.
    pub devices: Vec<DeviceRef>,
}

/// One device of the array: a node and the device's name there.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceRef {
    /// The member.
    pub node: String,
    /// The device's name on it.
    pub device: String,
}

impl PolicySpec {
    /// The map's form of `policy`.
    pub fn of(policy: &Policy) -> PolicySpec {
        match policy {
            Policy::Standalone(m) => PolicySpec {
                rules: Vec::new(),
                rest: m.to_string(),
            },
            Policy::Hybrid { rules, rest } => PolicySpec {
                rules: rules.iter().map(|(b, m)| (*b, m.to_string())).collect(),
                rest: rest.to_string(),
            },
        }
    }

    /// The policy it names.
    pub fn policy(&self) -> Result<Policy> {
        let parse = |s: &str| Mechanism::parse(s).map_err(|e| ClusterError::Invalid(e.to_string()));
        let rest = parse(&self.rest)?;
        if self.rules.is_empty() {
            return Ok(Policy::Standalone(rest));
        }
        let rules = self
            .rules
            .iter()
            .map(|(b, m)| Ok((*b, parse(m)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Policy::Hybrid { rules, rest })
    }
}

/// Checks a node or cluster name: 1 to 63 of `a-z A-Z 0-9 - _ .`, so it is one etcd key
/// segment and one word in logs.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ClusterError::Invalid(format!(
            "{what} name {name:?}: use 1 to {NAME_BYTES_MAX} letters, digits, '-', '_' or '.'"
        )))
    }
}

impl ClusterMap {
    /// The mechanisms of the policy.
    pub fn mechanisms(&self) -> Result<Vec<Mechanism>> {
        Ok(self.policy.policy()?.mechanisms())
    }

    /// Checks a new map: names, sizes, the clock, and that `nodes_to_form` nodes can hold the
    /// layout with any one node lost (refused when not, saying how many nodes it takes).
    pub fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(ClusterError::Invalid(s));
        check_name("cluster", &self.name)?;
        let mechanisms = self.mechanisms()?;
        let widest = mechanisms.iter().map(Mechanism::width).max().unwrap_or(1);
        if self.width < widest {
            return bad(format!(
                "groups of {} devices cannot hold the policy's widest mechanism ({widest})",
                self.width
            ));
        }
        if self.devices_per_node == 0 || self.nodes_to_form == 0 || self.rounds == 0 {
            return bad("devices per node, nodes and rounds must be at least 1".into());
        }
        if !(1..=crate::shards::SHARDS_MAX).contains(&self.shards) {
            return bad(format!(
                "{} shards: a cluster has 1 to {}",
                self.shards,
                crate::shards::SHARDS_MAX
            ));
        }
        if self.clock.schedule(self.width).is_none() {
            return bad(format!(
                "the frame clock ({} ms frames, {} ms guard, {} of {} colours reading) is no rails schedule",
                self.clock.frame_ms, self.clock.guard_ms, self.clock.window, self.width
            ));
        }
        if let Some(loss) = self.loss_of_one(self.nodes_to_form)? {
            if !loss.within() {
                return bad(format!(
                    "{} nodes of {} devices cannot lose a node: one node would hold {} pieces of a {} object, which survives the loss of {}; start with more nodes",
                    self.nodes_to_form, self.devices_per_node, loss.pieces, loss.mechanism, loss.tolerance
                ));
            }
        }
        Ok(())
    }

    /// The worst loss of one node when `nodes` nodes form the layout.
    fn loss_of_one(&self, nodes: usize) -> Result<Option<NodeLoss>> {
        let devices = nodes * self.devices_per_node;
        if !devices.is_multiple_of(self.width) {
            return Err(ClusterError::Invalid(format!(
                "{nodes} nodes of {} devices ({devices}) do not split into groups of {}",
                self.devices_per_node, self.width
            )));
        }
        let layout = self.placement(devices, 1)?;
        let node_of = node_of(&arrange(nodes, self.devices_per_node, self.width));
        Ok(node_loss(&layout, &node_of, &self.mechanisms()?))
    }

    /// The placement layout over `devices` devices at `epoch`.
    pub fn placement(&self, devices: usize, epoch: u64) -> Result<Layout> {
        Layout::new(LayoutSpec {
            devices,
            width: self.width,
            rounds: self.rounds,
            seed: self.seed,
            version: epoch,
        })
        .map_err(|e| ClusterError::Invalid(e.to_string()))
    }

    /// Adds `member` as `name` (again: the same devices, a new address). Forms the first
    /// layout when this makes `nodes_to_form` members. Returns whether the map changed.
    pub fn join(&mut self, name: &str, member: Member) -> Result<bool> {
        check_name("node", name)?;
        if member.devices.len() != self.devices_per_node {
            return Err(ClusterError::Invalid(format!(
                "node {name} brings {} devices; every node of cluster {} brings {}",
                member.devices.len(),
                self.name,
                self.devices_per_node
            )));
        }
        let mut names = member.devices.clone();
        names.sort();
        names.dedup();
        if names.len() != member.devices.len() {
            return Err(ClusterError::Invalid(format!(
                "node {name} names a device twice: {:?}",
                member.devices
            )));
        }
        if let Some(known) = self.members.get_mut(name) {
            if known.devices != member.devices {
                return Err(ClusterError::Refused(format!(
                    "node {name} is a member with devices {:?}, not {:?}: a node comes back with the devices it had",
                    known.devices, member.devices
                )));
            }
            if known.address == member.address && known.s3 == member.s3 {
                return Ok(false);
            }
            known.address = member.address;
            known.s3 = member.s3;
            return Ok(true);
        }
        self.members.insert(name.to_string(), member);
        if self.layout.is_none() && self.members.len() >= self.nodes_to_form {
            self.form()?;
        }
        Ok(true)
    }

    /// The first layout over every member (by name), each node's devices given positions by
    /// [`arrange`], checked against the loss of any one node.
    fn form(&mut self) -> Result<()> {
        let names: Vec<&String> = self.members.keys().collect();
        let devices = names.len() * self.devices_per_node;
        let positions = arrange(names.len(), self.devices_per_node, self.width);
        let mut slots: Vec<Option<DeviceRef>> = vec![None; devices];
        for (node, ps) in positions.iter().enumerate() {
            let member = &self.members[names[node]];
            for (j, &p) in ps.iter().enumerate() {
                slots[p] = Some(DeviceRef {
                    node: names[node].clone(),
                    device: member.devices[j].clone(),
                });
            }
        }
        let layout = ClusterLayout {
            epoch: 1,
            devices: slots
                .into_iter()
                .map(|s| s.expect("arrange fills every slot"))
                .collect(),
        };
        if let Some(loss) = self.check_layout(&layout)? {
            if !loss.within() {
                return Err(ClusterError::Refused(format!(
                    "the layout over {} nodes would put {} pieces of a {} object on node {}, which survives the loss of {}",
                    names.len(), loss.pieces, loss.mechanism, names[loss.node], loss.tolerance
                )));
            }
        }
        self.layout = Some(layout);
        Ok(())
    }

    /// The worst loss of one node in `layout`.
    pub fn check_layout(&self, layout: &ClusterLayout) -> Result<Option<NodeLoss>> {
        let nodes: Vec<&String> = self.members.keys().collect();
        let node_of: Vec<usize> = layout
            .devices
            .iter()
            .map(|d| {
                nodes
                    .iter()
                    .position(|n| **n == d.node)
                    .unwrap_or(usize::MAX)
            })
            .collect();
        if node_of.contains(&usize::MAX) {
            return Err(ClusterError::Corrupt(
                "the layout names a node that is not a member".into(),
            ));
        }
        let placement = self.placement(layout.devices.len(), layout.epoch)?;
        Ok(node_loss(&placement, &node_of, &self.mechanisms()?))
    }

    /// Removes member `name`. Refused while the layout holds its devices: their data must move
    /// first (a drain, or repair after the node is lost).
    pub fn leave(&mut self, name: &str) -> Result<()> {
        if !self.members.contains_key(name) {
            return Err(ClusterError::Invalid(format!(
                "node {name} is not a member of cluster {}",
                self.name
            )));
        }
        if let Some(layout) = &self.layout {
            if layout.devices.iter().any(|d| d.node == name) {
                return Err(ClusterError::Refused(format!(
                    "node {name} holds devices of layout epoch {}: its data must move to other nodes before it leaves",
                    layout.epoch
                )));
            }
        }
        self.members.remove(name);
        Ok(())
    }

    /// The map as stored.
    pub fn encode(&self) -> String {
        serde_json::to_string_pretty(self).expect("the map serialises")
    }

    /// A stored map.
    pub fn decode(bytes: &[u8]) -> Result<ClusterMap> {
        let map: ClusterMap =
            serde_json::from_slice(bytes).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
        if map.format != MAP_FORMAT {
            return Err(ClusterError::Corrupt(format!(
                "map format {} (this railstore reads {MAP_FORMAT})",
                map.format
            )));
        }
        Ok(map)
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::clock::FrameClock;

    /// A map of the embedded default's shape, three nodes to form.
    pub fn small_map() -> ClusterMap {
        ClusterMap {
            format: MAP_FORMAT,
            name: "t".into(),
            array_id: 1,
            policy: PolicySpec {
                rules: vec![(4096, "rep3".into())],
                rest: "split3+3".into(),
            },
            width: 6,
            rounds: 4,
            seed: 9,
            devices_per_node: 6,
            nodes_to_form: 3,
            shards: crate::shards::SHARDS_DEFAULT,
            clock: FrameClock {
                origin_unix_ms: 0,
                frame_ms: 2000,
                guard_ms: 50,
                window: 3,
            },
            members: BTreeMap::new(),
            layout: None,
        }
    }

    #[test]
    fn a_small_map_is_valid_and_bad_shard_counts_are_not() {
        small_map().validate().unwrap();
        for shards in [0, crate::shards::SHARDS_MAX + 1] {
            let map = ClusterMap {
                shards,
                ..small_map()
            };
            assert!(
                matches!(map.validate(), Err(ClusterError::Invalid(_))),
                "{shards}"
            );
        }
    }
}
