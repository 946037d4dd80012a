//! `railstore serve --cluster URL --node NAME`: one node of a cluster. It creates the map when
//! there is none (from its configuration: the embedded default without one), joins it as a
//! member, exports its devices over gRPC (`railstore-node`), keeps its live record under an
//! etcd lease, and holds its share of the key space's shards under the same lease. A node that loses its lease stops: the cluster may already count its devices as
//! failed, and a node comes back only through repair.

use crate::cluster_cmd::{connect, map_from_config, NODES_TO_FORM};
use crate::server_cmd::{keep_private, runtime, Loaded};
use anyhow::{bail, Context, Result};
use railstore_cluster::clock::unix_ms;
use railstore_cluster::{ClusterUrl, Member, NodeIdentity};
use railstore_device::{CompactionPolicy, Device, FileConfig, FileDevice};
use railstore_node::{Exported, FenceBook, NodeService};
use railstore_store::DeviceKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// What `serve` passes in cluster mode.
pub struct NodeOptions {
    pub url: ClusterUrl,
    pub node: String,
    /// Where the node service listens.
    pub listen: SocketAddr,
    pub lease_ttl: Duration,
}

/// How often the node looks at the map to report changes (the layout forming).
const MAP_POLL: Duration = Duration::from_secs(2);

/// How often the node claims or lets go of shards: a dead owner's shards are taken over within
/// its lease's TTL and this.
const SHARD_PERIOD: Duration = Duration::from_secs(1);

/// How long a stopping node waits for etcd to take its lease back before leaving it to run out.
const REVOKE_TIMEOUT: Duration = Duration::from_secs(3);

/// Runs the node until `stop()`'s future resolves (made inside the runtime: signal handlers
/// need one) or its lease is lost.
pub fn serve<F: std::future::Future<Output = ()>>(
    loaded: Loaded,
    options: NodeOptions,
    stop: impl FnOnce() -> F,
) -> Result<()> {
    let cfg = loaded.store;
    if cfg.devices.kind != DeviceKind::File || !cfg.devices.paths.is_empty() {
        bail!("a cluster node exports file devices in its data folder ([devices] kind = \"file\", no paths)");
    }
    // A folder of another node or cluster is refused before anything is asked of etcd (a
    // mistyped cluster name must not create a map).
    if let Some(found) = NodeIdentity::read(&cfg.data_dir)? {
        if found.cluster != options.url.name || found.node != options.node {
            bail!(
                "{} belongs to node {} of cluster {}, not node {} of cluster {}",
                cfg.data_dir.display(),
                found.node,
                found.cluster,
                options.node,
                options.url.name
            );
        }
    }
    runtime()?.block_on(async move {
        let stop = stop();
        let mut cluster = connect(&options.url).await?;
        let map = cluster
            .init_or_load(&map_from_config(&options.url.name, &cfg, NODES_TO_FORM))
            .await?;
        if map.devices_per_node != cfg.devices.count {
            bail!(
                "cluster {} has {} devices per node; this node's configuration has {}",
                map.name,
                map.devices_per_node,
                cfg.devices.count
            );
        }
        // The folder belongs to one node of one array: checked (or written) before any device
        // is opened.
        NodeIdentity {
            cluster: map.name.clone(),
            array_id: map.array_id,
            node: options.node.clone(),
        }
        .claim(&cfg.data_dir)?;
        keep_private(&cfg.data_dir);
        let fences = Arc::new(
            FenceBook::open(map.array_id, &cfg.data_dir.join("fences"))
                .context("the node's fence file")?,
        );
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .with_context(|| format!("listening on {}", options.listen))?;
        let address = listener.local_addr()?.to_string();
        // The live record first: a second process under the same name is refused here, before
        // it opens devices or changes the member's address.
        let mut registration = cluster
            .register(&options.node, &address, options.lease_ttl)
            .await?;
        let (mut files, exported, map) =
            match open_and_join(&mut cluster, &cfg, &options, &address).await {
                Ok(started) => started,
                Err(e) => {
                    let _ = registration.revoke().await;
                    return Err(e);
                }
            };
        let service = NodeService::new(options.node.clone(), exported, fences);
        let (quit, quitting) = tokio::sync::oneshot::channel::<()>();
        let mut server = tokio::spawn(railstore_node::serve(service, listener, async {
            let _ = quitting.await;
        }));
        tracing::info!(
            cluster = %map.name,
            node = %options.node,
            address = %address,
            devices = cfg.devices.count,
            lease_ttl_s = registration.ttl().as_secs(),
            "node serving its devices"
        );
        // Shard ownership under the same lease as the live record: a node that dies lets go
        // of its shards when the lease runs out, and survivors take them over.
        let (owned_tx, mut owned) = tokio::sync::watch::channel(Default::default());
        let mut keeper = tokio::spawn(railstore_cluster::keep_shards(
            cluster.clone(),
            map.shards,
            options.node.clone(),
            registration.lease(),
            SHARD_PERIOD,
            owned_tx,
        ));
        let shards_reported = async {
            while owned.changed().await.is_ok() {
                let held = owned.borrow_and_update().clone();
                tracing::info!(
                    shards = held.len(),
                    newest_token = held.values().max().copied().unwrap_or(0),
                    "shards owned"
                );
            }
            std::future::pending::<()>().await
        };
        let mut formed = map.layout.is_some();
        report_layout(&map, &options.node);
        let watch = async {
            loop {
                tokio::time::sleep(MAP_POLL).await;
                match cluster.map().await {
                    Ok(Some((map, _))) if !formed && map.layout.is_some() => {
                        formed = true;
                        report_layout(&map, &options.node);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "reading the cluster map"),
                }
            }
        };
        let mut server_ended = false;
        let mut lease_lost = false;
        let outcome = tokio::select! {
            _ = stop => Ok(()),
            lost = registration.lost() => {
                lease_lost = true;
                Err(anyhow::Error::new(lost))
            }
            _ = watch => Ok(()),
            _ = shards_reported => Ok(()),
            // The keeper only returns if it panicked: its claimer record would live on under
            // the renewed lease and the node's share of the shards stay unowned.
            _ = &mut keeper => Err(anyhow::anyhow!("the shard keeper stopped")),
            ended = &mut server => {
                server_ended = true;
                Err(match ended {
                    Ok(Ok(())) => anyhow::anyhow!("the node service stopped"),
                    Ok(Err(e)) => anyhow::Error::new(e).context("the node service"),
                    Err(e) => anyhow::Error::new(e).context("the node service's task"),
                })
            }
        };
        keeper.abort();
        if lease_lost {
            // The cluster may count this node as gone within moments: take no new calls and
            // close the devices now, so calls in flight fail rather than finish, before
            // anything else (the revoke below may wait on an etcd that cannot be reached).
            server.abort();
            server_ended = true;
            close_devices(&mut files).await?;
        }
        let _ = quit.send(());
        if !server_ended {
            match server.await {
                Ok(Err(e)) => tracing::warn!(error = %e, "the node service"),
                Err(e) => tracing::warn!(error = %e, "the node service's task"),
                Ok(Ok(())) => {}
            }
        }
        // The live record and the shards go now, not when the lease runs out (after a lost
        // lease this finds it gone, or ends what is left of it).
        match tokio::time::timeout(REVOKE_TIMEOUT, registration.revoke()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if outcome.is_ok() => {
                tracing::warn!(error = %e, "revoking the node's lease")
            }
            Err(_) if outcome.is_ok() => tracing::warn!(
                "revoking the node's lease: etcd did not answer; the lease runs out by itself"
            ),
            _ => {}
        }
        close_devices(&mut files).await?;
        tracing::info!(node = %options.node, "node stopped");
        outcome
    })
}

/// Closes the devices still open (each once: `files` is emptied).
async fn close_devices(files: &mut Vec<Arc<FileDevice>>) -> Result<()> {
    for f in files.drain(..) {
        if let Err(e) = tokio::task::spawn_blocking(move || f.close_blocking()).await? {
            tracing::warn!(error = %e, "closing a device");
        }
    }
    Ok(())
}

/// Opens the node's file devices and makes it a member at `address`: the devices (to close),
/// what the service exports, and the map after joining.
async fn open_and_join(
    cluster: &mut railstore_cluster::Cluster,
    cfg: &railstore_store::StoreConfig,
    options: &NodeOptions,
    address: &str,
) -> Result<(
    Vec<Arc<FileDevice>>,
    Vec<Exported>,
    railstore_cluster::ClusterMap,
)> {
    let mut files = Vec::new();
    let mut exported = Vec::new();
    for i in 0..cfg.devices.count {
        let path = cfg.data_dir.join("devices").join(i.to_string());
        let file = Arc::new(
            FileDevice::open(
                &path,
                FileConfig {
                    capacity_bytes: cfg.devices.capacity_bytes,
                    direct_io: cfg.devices.direct_io,
                    // Rails on the array's side asks for compaction while a device writes.
                    compaction: if cfg.separation.is_some() {
                        CompactionPolicy::Manual
                    } else {
                        FileConfig::default().compaction
                    },
                    ..FileConfig::default()
                },
            )
            .with_context(|| format!("device {i} at {}", path.display()))?,
        );
        files.push(file.clone());
        exported.push(Exported {
            name: i.to_string(),
            device: file as Arc<dyn Device>,
        });
    }
    let member = Member {
        address: address.to_string(),
        s3: None,
        devices: exported.iter().map(|e| e.name.clone()).collect(),
        capacity_bytes: cfg.devices.capacity_bytes,
        joined_unix_ms: unix_ms(),
    };
    let map = cluster.join(&options.node, member).await?;
    Ok((files, exported, map))
}

fn report_layout(map: &railstore_cluster::ClusterMap, node: &str) {
    match &map.layout {
        Some(l) => {
            let mine = l.devices.iter().filter(|d| d.node == node).count();
            tracing::info!(
                epoch = l.epoch,
                devices = l.devices.len(),
                here = mine,
                "cluster layout{}",
                if mine == 0 {
                    " (this node is a standby)"
                } else {
                    ""
                }
            );
        }
        None => tracing::info!(
            members = map.members.len(),
            needed = map.nodes_to_form,
            "waiting for members before the first layout"
        ),
    }
}
