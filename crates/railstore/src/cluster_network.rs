//! The cluster network in `railstore cluster status`: each running node is asked over gRPC
//! what its node service has moved since it started (`railstore_node::traffic`), shown per
//! node and per kind of call, in JSON, or in Prometheus' text format (`--metrics`).

use railstore_bench::plot::human_bytes as human;
use railstore_cluster::ClusterStatus;
use railstore_node::{RemoteNode, TrafficSnapshot};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// How long one node may take to answer: a node that hangs leaves status waiting no longer.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// What a node answered: its counters, or why there are none.
pub type Answers = BTreeMap<String, Result<TrafficSnapshot, String>>;

/// Asks every node with a live record, all at once.
pub async fn ask_nodes(status: &ClusterStatus) -> Answers {
    let mut asks = tokio::task::JoinSet::new();
    for (name, live) in &status.live {
        let (name, address) = (name.clone(), live.address.clone());
        asks.spawn(async move {
            let answer = tokio::time::timeout(ASK_TIMEOUT, async {
                RemoteNode::connect_with(&address, 1).await?.traffic().await
            })
            .await
            .map_err(|_| format!("no answer within {} s", ASK_TIMEOUT.as_secs()))
            .and_then(|r| r.map_err(|e| e.to_string()));
            (name, answer)
        });
    }
    let mut answers = Answers::new();
    while let Some(joined) = asks.join_next().await {
        if let Ok((name, answer)) = joined {
            answers.insert(name, answer);
        }
    }
    answers
}

/// One node's counters in the JSON status.
#[derive(Serialize)]
pub struct NodeNetwork {
    /// Message bytes the node took in, every kind of call.
    pub received: u64,
    /// Message bytes it sent.
    pub sent: u64,
    /// Bytes it read from its sockets (HTTP/2 framing, headers and pings included).
    pub socket_received: u64,
    /// Bytes it wrote to them.
    pub socket_sent: u64,
    /// Per kind of call that any arrived of: calls, bytes in, bytes out.
    pub calls: BTreeMap<&'static str, [u64; 3]>,
}

impl From<&TrafficSnapshot> for NodeNetwork {
    fn from(t: &TrafficSnapshot) -> Self {
        NodeNetwork {
            received: t.calls.iter().map(|c| c.received).sum(),
            sent: t.calls.iter().map(|c| c.sent).sum(),
            socket_received: t.socket_received,
            socket_sent: t.socket_sent,
            calls: t
                .calls
                .iter()
                .filter(|c| c.calls > 0)
                .map(|c| (c.call.name(), [c.calls, c.received, c.sent]))
                .collect(),
        }
    }
}

/// `cluster status --json`: the status with each running node's network counters (or the
/// reason it gave none).
#[derive(Serialize)]
pub struct StatusReport<'a> {
    #[serde(flatten)]
    pub status: &'a ClusterStatus,
    pub network: BTreeMap<String, NodeNetworkAnswer>,
}

/// A node's counters, or why there are none.
#[derive(Serialize)]
#[serde(untagged)]
pub enum NodeNetworkAnswer {
    /// It answered.
    Counted(NodeNetwork),
    /// It did not, and why.
    Failed { error: String },
}

impl<'a> StatusReport<'a> {
    pub fn new(status: &'a ClusterStatus, answers: &Answers) -> Self {
        StatusReport {
            status,
            network: answers
                .iter()
                .map(|(node, a)| {
                    let answer = match a {
                        Ok(t) => NodeNetworkAnswer::Counted(NodeNetwork::from(t)),
                        Err(e) => NodeNetworkAnswer::Failed { error: e.clone() },
                    };
                    (node.clone(), answer)
                })
                .collect(),
        }
    }
}

/// The text status's network section.
pub fn render(answers: &Answers) -> String {
    let mut s = String::new();
    if answers.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "cluster network (message bytes each running node took in / sent since it started):"
    );
    for (node, a) in answers {
        match a {
            Err(e) => {
                let _ = writeln!(s, "  {node:<16} not counted: {e}");
            }
            Ok(t) => {
                let n = NodeNetwork::from(t);
                let busiest: Vec<String> = t
                    .calls
                    .iter()
                    .filter(|c| c.received + c.sent > 0)
                    .map(|c| format!("{} {}/{}", c.call.name(), human(c.received), human(c.sent)))
                    .collect();
                let _ = writeln!(
                    s,
                    "  {node:<16} {} in, {} out (sockets {}/{}): {}",
                    human(n.received),
                    human(n.sent),
                    human(n.socket_received),
                    human(n.socket_sent),
                    busiest.join(", ")
                );
            }
        }
    }
    s
}

/// `cluster status --metrics`: the counters of the nodes that answered.
pub fn metrics(answers: &Answers) -> String {
    let counted: Vec<(String, TrafficSnapshot)> = answers
        .iter()
        .filter_map(|(node, a)| Some((node.clone(), a.as_ref().ok()?.clone())))
        .collect();
    railstore_node::traffic::prometheus(&counted)
}
