//! `railstore cluster init|join|status|leave`: the cluster map in etcd (docs/cluster.md).

use crate::server_cmd::{runtime, ConfigArgs};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use railstore_cluster::clock::{unix_ms, FrameClock};
use railstore_cluster::{
    Cluster, ClusterMap, ClusterStatus, ClusterUrl, Member, PolicySpec, MAP_FORMAT,
};
use railstore_store::StoreConfig;
use std::collections::BTreeMap;
use std::time::Duration;

/// Where the cluster is.
#[derive(Args, Debug, Clone)]
pub struct ClusterArg {
    /// The cluster: etcd's client address and the cluster's name,
    /// `etcd://HOST:PORT[,HOST:PORT...][/NAME]` (name `railstore` when none).
    #[arg(
        long = "cluster",
        env = "RAILSTORE_CLUSTER",
        value_name = "etcd://HOST:PORT[/NAME]"
    )]
    pub url: ClusterUrl,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Create the cluster map from a configuration (the embedded default without one). A
    /// node started with `serve --cluster` creates it by itself when there is none.
    Init(InitArgs),
    /// Make a node a member before it first starts (or change its address).
    Join(JoinArgs),
    /// Members, who is running, the layout, the frame clock, and what losing a node costs.
    Status(StatusArgs),
    /// Remove a member whose devices are in no layout (a standby, or before the layout forms).
    Leave(LeaveArgs),
}

#[derive(Args, Debug)]
pub struct InitArgs {
    #[command(flatten)]
    pub cluster: ClusterArg,
    /// The policy, devices per node, separation and layout seed come from this configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The first layout forms once this many nodes have joined.
    #[arg(long, default_value_t = NODES_TO_FORM)]
    pub nodes: usize,
}

#[derive(Args, Debug)]
pub struct JoinArgs {
    #[command(flatten)]
    pub cluster: ClusterArg,
    /// The node's name.
    #[arg(long)]
    pub node: String,
    /// Where its node service will listen.
    #[arg(long, value_name = "HOST:PORT")]
    pub address: std::net::SocketAddr,
    /// Its devices' names (default: 0, 1, ... as many as the cluster's nodes bring).
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Bytes each device may hold.
    #[arg(long, default_value_t = StoreConfig::default().devices.capacity_bytes)]
    pub capacity_bytes: u64,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub cluster: ClusterArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print the running nodes' network counters in Prometheus' text format instead.
    #[arg(long, conflicts_with = "json")]
    pub metrics: bool,
}

#[derive(Args, Debug)]
pub struct LeaveArgs {
    #[command(flatten)]
    pub cluster: ClusterArg,
    /// The member to remove.
    #[arg(long)]
    pub node: String,
}

/// Nodes a cluster waits for before its first layout: three, so that with the embedded
/// default (six devices a node, RS(3,3)) any one node may be lost.
pub const NODES_TO_FORM: usize = 3;

/// How long a frame is when the configuration turns separation off (the map always has a
/// clock, so turning it on later needs no new map).
const FRAME_WITHOUT_SEPARATION: Duration = Duration::from_secs(2);

/// A new map for cluster `name` from a store configuration: its policy, group width, layout
/// rounds and seed, devices per node, and frame clock (origin now).
pub fn map_from_config(name: &str, cfg: &StoreConfig, nodes_to_form: usize) -> ClusterMap {
    let (frame, guard, window) = match &cfg.separation {
        Some(s) => (s.frame, s.guard, s.window),
        None => (
            FRAME_WITHOUT_SEPARATION,
            Duration::from_millis(50),
            cfg.manager.width() / 2,
        ),
    };
    ClusterMap {
        format: MAP_FORMAT,
        name: name.to_string(),
        array_id: rand::random(),
        policy: PolicySpec::of(&cfg.manager.policy),
        width: cfg.manager.width(),
        rounds: cfg.manager.layout_rounds,
        seed: cfg.manager.layout_seed,
        devices_per_node: cfg.devices.count,
        nodes_to_form,
        shards: railstore_cluster::shards::SHARDS_DEFAULT,
        clock: FrameClock {
            origin_unix_ms: unix_ms(),
            frame_ms: frame.as_millis() as u64,
            guard_ms: guard.as_millis() as u64,
            window: window.max(1),
        },
        members: BTreeMap::new(),
        layout: None,
    }
}

pub fn run(what: ClusterCommand) -> Result<()> {
    runtime()?.block_on(async move {
        match what {
            ClusterCommand::Init(a) => {
                let cfg = a.config.load()?.store;
                let map = map_from_config(&a.cluster.url.name, &cfg, a.nodes);
                connect(&a.cluster.url).await?.init(&map).await?;
                println!(
                    "cluster {} created: {} devices per node, groups of {}; the layout forms at {} nodes",
                    map.name, map.devices_per_node, map.width, map.nodes_to_form
                );
            }
            ClusterCommand::Join(a) => {
                let mut cluster = connect(&a.cluster.url).await?;
                let (known, _) = cluster.existing_map().await?;
                let devices = if a.devices.is_empty() {
                    (0..known.devices_per_node).map(|i| i.to_string()).collect()
                } else {
                    a.devices
                };
                let member = Member {
                    address: a.address.to_string(),
                    s3: None,
                    devices,
                    capacity_bytes: a.capacity_bytes,
                    joined_unix_ms: unix_ms(),
                };
                let map = cluster.join(&a.node, member).await?;
                println!("{} is a member of cluster {}", a.node, map.name);
                say_layout(&map);
            }
            ClusterCommand::Status(a) => {
                let mut cluster = connect(&a.cluster.url).await?;
                let status = ClusterStatus::read(&mut cluster).await?;
                let network = crate::cluster_network::ask_nodes(&status).await;
                if a.metrics {
                    print!("{}", crate::cluster_network::metrics(&network));
                } else if a.json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&crate::cluster_network::StatusReport::new(
                            &status, &network
                        ))?
                    );
                } else {
                    print!("{}", status.render());
                    print!("{}", crate::cluster_network::render(&network));
                }
            }
            ClusterCommand::Leave(a) => {
                let map = connect(&a.cluster.url).await?.leave(&a.node).await?;
                println!("{} left cluster {} ({} members)", a.node, map.name, map.members.len());
            }
        }
        Ok(())
    })
}

/// Connects to the cluster's etcd, saying where on failure.
pub async fn connect(url: &ClusterUrl) -> Result<Cluster> {
    Cluster::connect(url)
        .await
        .with_context(|| format!("connecting to etcd at {}", url.endpoints.join(",")))
}

/// One line on the layout: formed (its epoch and size) or how many members it waits for.
pub fn say_layout(map: &ClusterMap) {
    match &map.layout {
        Some(l) => println!("layout epoch {}: {} devices", l.epoch, l.devices.len()),
        None => println!(
            "layout not formed yet: {} of {} members",
            map.members.len(),
            map.nodes_to_form
        ),
    }
}
