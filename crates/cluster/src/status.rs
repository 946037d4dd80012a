//! What `railstore cluster status` shows: the map, who is running, the frame clock now, and
//! what losing the worst node would cost.

use crate::clock::{unix_ms, FrameNow};
use crate::error::Result;
use crate::etcd::{Cluster, Live};
use crate::map::ClusterMap;
use crate::shards::Owner;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The cluster as seen at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterStatus {
    /// The map.
    pub map: ClusterMap,
    /// Its revision in etcd.
    pub map_revision: i64,
    /// Members with a live record, by name.
    pub live: BTreeMap<String, Live>,
    /// Members in the layout without one: their devices are unreachable.
    pub down: Vec<String>,
    /// The frame clock now, once a layout exists: the frame and the colours reading.
    pub frame: Option<Frame>,
    /// The worst loss of one node in the layout.
    pub node_loss: Option<Loss>,
    /// Each owned shard's owner and fencing token.
    pub owners: BTreeMap<u32, Owner>,
}

/// The frame clock at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Frame {
    /// Frame number.
    pub frame: u64,
    /// Colours reading.
    pub reading: Vec<usize>,
    /// Milliseconds left in the frame.
    pub left_ms: u64,
}

/// The worst loss of one node.
#[derive(Clone, Debug, Serialize)]
pub struct Loss {
    /// The node.
    pub node: String,
    /// The mechanism hit hardest.
    pub mechanism: String,
    /// Pieces of one such object on the node.
    pub pieces: usize,
    /// Pieces that mechanism may lose.
    pub tolerance: usize,
    /// Whether that is within the tolerance.
    pub within: bool,
}

impl From<FrameNow> for Frame {
    fn from(f: FrameNow) -> Frame {
        Frame {
            frame: f.frame,
            reading: f.reading,
            left_ms: f.left.as_millis() as u64,
        }
    }
}

impl ClusterStatus {
    /// Reads the cluster's status from etcd.
    pub async fn read(cluster: &mut Cluster) -> Result<ClusterStatus> {
        let (map, map_revision) = cluster.existing_map().await?;
        let live = cluster.live().await?;
        let owners = cluster.owners().await?;
        let in_layout: Vec<String> = match &map.layout {
            None => Vec::new(),
            Some(l) => {
                let mut nodes: Vec<String> = l.devices.iter().map(|d| d.node.clone()).collect();
                nodes.sort();
                nodes.dedup();
                nodes
            }
        };
        let down = in_layout
            .into_iter()
            .filter(|n| !live.contains_key(n))
            .collect();
        let (frame, node_loss) = match &map.layout {
            None => (None, None),
            Some(layout) => {
                let frame = map.clock.at(map.width, unix_ms()).map(Frame::from);
                let names: Vec<&String> = map.members.keys().collect();
                let loss = map.check_layout(layout)?.map(|l| Loss {
                    node: names[l.node].clone(),
                    mechanism: l.mechanism.to_string(),
                    pieces: l.pieces,
                    tolerance: l.tolerance,
                    within: l.within(),
                });
                (frame, loss)
            }
        };
        Ok(ClusterStatus {
            map,
            map_revision,
            live,
            down,
            frame,
            node_loss,
            owners,
        })
    }

    /// The status as text for operators.
    pub fn render(&self) -> String {
        let m = &self.map;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "cluster {} (array {:016x}, map revision {})",
            m.name, m.array_id, self.map_revision
        );
        let _ = writeln!(
            s,
            "policy: {} above {}; groups of {}, {} rounds; {} devices per node",
            m.policy.rest,
            m.policy
                .rules
                .iter()
                .map(|(b, mech)| format!("{mech} up to {b} B"))
                .collect::<Vec<_>>()
                .join(", "),
            m.width,
            m.rounds,
            m.devices_per_node
        );
        let _ = writeln!(
            s,
            "members: {} (the layout forms at {})",
            m.members.len(),
            m.nodes_to_form
        );
        for (name, member) in &m.members {
            let state = match self.live.get(name) {
                Some(l) => format!("up (pid {}, lease {:x})", l.pid, l.lease),
                None => "down".to_string(),
            };
            let in_layout = m
                .layout
                .as_ref()
                .is_some_and(|l| l.devices.iter().any(|d| &d.node == name));
            let shards = self.owners.values().filter(|o| &o.node == name).count();
            let _ = writeln!(
                s,
                "  {name:<16} {:<22} {:<28} {} devices, {shards} shards{}",
                member.address,
                state,
                member.devices.len(),
                if in_layout {
                    ""
                } else {
                    ", standby (not in the layout)"
                }
            );
        }
        let _ = writeln!(s, "shards: {} of {} owned", self.owners.len(), m.shards);
        match &m.layout {
            None => {
                let _ = writeln!(
                    s,
                    "layout: not formed ({} of {} members)",
                    m.members.len(),
                    m.nodes_to_form
                );
            }
            Some(l) => {
                let _ = writeln!(s, "layout: epoch {}, {} devices", l.epoch, l.devices.len());
                for (d, r) in l.devices.iter().enumerate() {
                    let _ = writeln!(
                        s,
                        "  device {d:>3} colour {:>2}  {}/{}",
                        d % m.width,
                        r.node,
                        r.device
                    );
                }
            }
        }
        if let Some(f) = &self.frame {
            let _ = writeln!(
                s,
                "frame {}: colours {:?} read ({} ms left)",
                f.frame, f.reading, f.left_ms
            );
        }
        if let Some(l) = &self.node_loss {
            let _ = writeln!(
                s,
                "losing node {} costs up to {} pieces of a {} object (tolerates {}): {}",
                l.node,
                l.pieces,
                l.mechanism,
                l.tolerance,
                if l.within {
                    "within tolerance"
                } else {
                    "NOT within tolerance"
                }
            );
        }
        if !self.down.is_empty() {
            let _ = writeln!(s, "down: {}", self.down.join(", "));
        }
        s
    }
}
