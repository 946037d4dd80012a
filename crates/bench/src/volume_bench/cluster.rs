//! `railstore bench cluster`: the Ceph study's private-network comparison (§VI-B, Figs. 16 and
//! 17: bytes between storage nodes per byte the client asked for, 3-replication against RS(6,3)
//! and RS(10,4) across request sizes) on railstore across nodes.
//!
//! The nodes are node services on loopback ports (each on a thread of its own, over file
//! devices in the temporary folder), the devices placed with the node as the failure domain as
//! a cluster's map places them (`railstore_cluster::domain`). Node 0 serves the volumes: its
//! own devices are local, every other device is a remote device over gRPC, as for a shard's
//! owner. Each point runs the ceph-study's load ([`super::study`]) and adds what the other
//! nodes' services took in and sent: gRPC message bytes per kind of call and socket bytes.

use super::study::{self, CephStudyArgs, Report};
use anyhow::{bail, ensure, Context, Result};
use railstore_cluster::domain::{arrange, node_loss, node_of};
use railstore_device::{Device, Fence, FileConfig, FileDevice};
use railstore_node::{Exported, FenceBook, LoopbackNode, RemoteNode, TrafficSnapshot};
use railstore_redundancy::{Mechanism, Policy};
use railstore_store::{Store, StoreConfig};
use std::sync::Arc;

/// Options of `railstore bench cluster` (the binary adds where the temporary folder goes).
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub study: CephStudyArgs,
    /// Nodes (the study's cluster has four storage nodes).
    #[arg(long, default_value_t = 4)]
    pub nodes: usize,
    /// File devices per node.
    #[arg(long, default_value_t = 6)]
    pub devices_per_node: usize,
}

impl ClusterArgs {
    /// The group width: the narrowest that divides the devices, fits the widest mechanism and
    /// lets any one node be lost within every mechanism's tolerance.
    pub fn width(&self) -> Result<usize> {
        ensure!(
            (2..=64).contains(&self.nodes),
            "--nodes: 2 to 64 (node 0 serves, the others are reached over the network)"
        );
        ensure!(
            (1..=64).contains(&self.devices_per_node),
            "--devices-per-node: 1 to 64"
        );
        self.study.plan()?;
        let mechanisms = self.mechanisms()?;
        let total = self.nodes * self.devices_per_node;
        let widest = mechanisms.iter().map(|m| m.width()).max().unwrap_or(1);
        for width in (widest.max(2)..=total).filter(|w| total.is_multiple_of(*w)) {
            let layout = layout_config(total, width).manager.layout(total)?;
            let positions = arrange(self.nodes, self.devices_per_node, width);
            if node_loss(&layout, &node_of(&positions), &mechanisms).is_none_or(|l| l.within()) {
                return Ok(width);
            }
        }
        bail!(
            "{} nodes of {} devices cannot hold {} so that any one node may be lost: add nodes",
            self.nodes,
            self.devices_per_node,
            self.study.mechanisms.join(",")
        )
    }

    /// The volumes' mechanisms and the store policy's (for its own records).
    fn mechanisms(&self) -> Result<Vec<Mechanism>> {
        let mut all: Vec<Mechanism> = self
            .study
            .mechanisms
            .iter()
            .map(|m| Mechanism::parse(m).with_context(|| format!("--mechanisms {m:?}")))
            .collect::<Result<_>>()?;
        all.push(RECORDS);
        Ok(all)
    }
}

/// How the store keeps what is not a volume's data (the volumes' own records): three copies,
/// which any one node's loss leaves readable wherever they fall (packing, in the embedded
/// default's policy, could put a whole set on one node of a wide group).
const RECORDS: Mechanism = Mechanism::Replicate { r: 3 };

/// The study's store configuration (no separation: Ceph has none) over `total` devices in
/// groups of `width`.
fn layout_config(total: usize, width: usize) -> StoreConfig {
    let mut cfg = StoreConfig::default();
    cfg.devices.count = total;
    cfg.manager.layout_width = Some(width);
    cfg.manager.policy = Policy::Standalone(RECORDS);
    cfg.separation = None;
    cfg
}

/// Runs the benchmark with its nodes' devices and the serving store under `folder` (empty;
/// the caller removes it).
pub async fn run(args: &ClusterArgs, folder: &std::path::Path) -> Result<Report> {
    let width = args.width()?;
    let total = args.nodes * args.devices_per_node;
    let mut cfg = layout_config(total, width);
    cfg.data_dir = folder.join("array");
    let positions = arrange(args.nodes, args.devices_per_node, width);
    let fence = Fence {
        array_id: railstore_store::random_id(),
        layout_epoch: 1,
        shard: 0,
        token: 1,
    };
    let file_config = FileConfig {
        capacity_bytes: cfg.devices.capacity_bytes,
        direct_io: cfg.devices.direct_io,
        ..FileConfig::default()
    };
    let mut local = Vec::new();
    let mut nodes = Vec::new();
    let mut array: Vec<Option<Arc<dyn Device>>> = vec![None; total];
    for (node, places) in positions.iter().enumerate() {
        let mut exported = Vec::new();
        for (j, &position) in places.iter().enumerate() {
            let path = folder
                .join("nodes")
                .join(node.to_string())
                .join(j.to_string());
            let file = Arc::new(
                FileDevice::open(&path, file_config.clone())
                    .with_context(|| format!("device {j} of node {node} at {}", path.display()))?,
            );
            if node == 0 {
                array[position] = Some(file.clone());
                local.push(file);
            } else {
                exported.push(Exported {
                    name: format!("d{j}"),
                    device: file,
                });
            }
        }
        if node == 0 {
            continue;
        }
        let loopback = LoopbackNode::start(exported, FenceBook::in_memory(fence.array_id), 1)
            .with_context(|| format!("starting node {node}"))?;
        let remote = RemoteNode::connect(&loopback.address().to_string())
            .await
            .with_context(|| format!("connecting to node {node}"))?;
        for (j, &position) in places.iter().enumerate() {
            array[position] = Some(Arc::new(remote.device(&format!("d{j}"), fence)?));
        }
        nodes.push(loopback);
    }
    let devices = array
        .into_iter()
        .map(|d| d.expect("every position has a device"))
        .collect();
    let store = Store::open_with_devices(cfg, devices)
        .await
        .context("opening the store over the nodes' devices")?;
    let store_text = format!(
        "{} nodes of {} file devices (node 0 serves: its devices local, the others' over gRPC \
         on loopback), groups of {width} with any one node's loss within every mechanism's \
         tolerance, no read/write separation; CPU and context switches are the whole \
         process's, the nodes' threads included",
        args.nodes, args.devices_per_node
    );
    let traffic: Vec<_> = nodes.iter().map(|n| n.traffic().clone()).collect();
    let probe =
        move || TrafficSnapshot::sum(&traffic.iter().map(|t| t.snapshot()).collect::<Vec<_>>());
    let report = study::run_on(&args.study, store, store_text, Some(&probe), "cluster").await;
    drop(nodes);
    for file in local {
        if let Err(e) = tokio::task::spawn_blocking(move || file.close_blocking()).await? {
            tracing::warn!(error = %e, "closing a device");
        }
    }
    report
}
