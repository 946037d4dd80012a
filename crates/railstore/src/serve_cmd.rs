//! `railstore serve`: the store as a running service (S3, the admin API, NBD volumes) until
//! SIGTERM or Ctrl-C.

use crate::server_cmd::{credentials, keep_private, runtime, ConfigArgs, Loaded, ServerSection};
use anyhow::{bail, Context, Result};
use clap::Args;
use railstore_store::{Store, EXAMPLE_TOML};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `railstore serve`. `--help` ends with the configuration file, every setting commented.
#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLE_TOML)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Listening address (overrides `[server].listen`).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<SocketAddr>,
    /// S3 access key id (overrides `[server].access_key` and the data folder's generated
    /// pair); give `--secret-key` with it.
    #[arg(long, env = "RAILSTORE_ACCESS_KEY")]
    pub access_key: Option<String>,
    /// S3 secret key, with `--access-key`.
    #[arg(long, env = "RAILSTORE_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
    /// Bearer token that `GET /metrics` and `GET /status` require (overrides
    /// `[server].operator_token`); without one they are open.
    #[arg(long, env = "RAILSTORE_OPERATOR_TOKEN", hide_env_values = true)]
    pub operator_token: Option<String>,
    /// Where volumes are exported over NBD (overrides `[server].nbd_listen`; default
    /// 127.0.0.1:10809, loopback only).
    #[arg(long, value_name = "HOST:PORT")]
    pub nbd_listen: Option<SocketAddr>,
    /// Record every NBD read and write to this file as a block trace (FlashNet/Heimdall
    /// format; `railstore bench volume-trace --trace FILE` replays it).
    #[arg(long, value_name = "FILE")]
    pub nbd_trace: Option<PathBuf>,
    /// Run as a node of a cluster (docs/cluster.md): `etcd://HOST:PORT[,HOST:PORT...][/NAME]`.
    /// The first node creates the cluster map from its configuration; each node joins it and
    /// exports its devices. S3 on the cluster comes with shard owners (not yet).
    #[arg(long, value_name = "etcd://HOST:PORT[/NAME]", requires = "node")]
    pub cluster: Option<railstore_cluster::ClusterUrl>,
    /// This node's name in the cluster (with `--cluster`).
    #[arg(long, requires = "cluster")]
    pub node: Option<String>,
    /// Where the node service (its devices, over gRPC) listens (with `--cluster`; default: the
    /// listening address's port + 1).
    #[arg(long, value_name = "HOST:PORT", requires = "cluster")]
    pub node_listen: Option<SocketAddr>,
    /// Seconds the node's live record outlives its last renewal in etcd (with `--cluster`):
    /// how long a dead node takes to be seen as down.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10,
        requires = "cluster"
    )]
    pub lease_ttl: u64,
}

/// A future that resolves on Ctrl-C or SIGTERM. The handlers are in place when this returns
/// (not when the future is first polled), so a signal sent once the server says it listens
/// stops it cleanly instead of killing it with the default action.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

pub fn serve(args: &ServeArgs) -> Result<()> {
    let mut loaded = args.config.load()?;
    if let Some(l) = args.listen {
        loaded.server.listen = l;
    }
    match (&args.access_key, &args.secret_key) {
        (Some(a), Some(s)) => {
            loaded.server.access_key = Some(a.clone());
            loaded.server.secret_key = Some(s.clone());
        }
        (None, None) => {}
        _ => bail!(
            "give both --access-key and --secret-key (or RAILSTORE_ACCESS_KEY and \
             RAILSTORE_SECRET_KEY), or neither"
        ),
    }
    if let Some(t) = &args.operator_token {
        loaded.server.operator_token = Some(t.clone());
    }
    if let Some(a) = args.nbd_listen {
        loaded.server.nbd_listen = Some(a);
    }
    if let (Some(url), Some(node)) = (&args.cluster, &args.node) {
        // Beside the S3 port by default (an ephemeral port when that is one too).
        let s3 = loaded.server.listen;
        let listen = match args.node_listen {
            Some(a) => a,
            None if s3.port() == 0 => SocketAddr::new(s3.ip(), 0),
            None => match s3.port().checked_add(1) {
                Some(p) => SocketAddr::new(s3.ip(), p),
                None => bail!("no port after {s3}: give --node-listen"),
            },
        };
        if args.lease_ttl == 0 {
            bail!("--lease-ttl must be at least 1 second");
        }
        let options = crate::cluster_node::NodeOptions {
            url: url.clone(),
            node: node.clone(),
            listen,
            lease_ttl: Duration::from_secs(args.lease_ttl),
        };
        return crate::cluster_node::serve(loaded, options, stop_signal);
    }
    let Loaded { store: cfg, server } = loaded;
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("creating {}", cfg.data_dir.display()))?;
    keep_private(&cfg.data_dir);
    let (access_key, secret_key, generated) = credentials(&server, &cfg.data_dir)?;
    keep_private(&cfg.data_dir.join("credentials.toml"));
    // Checked before the store opens: a wrong key file changes nothing.
    let keyring = sse_keyring(&server, &cfg.data_dir)?;
    let rt = runtime()?;
    rt.block_on(async move {
        tracing::info!(data_dir = %cfg.data_dir.display(), "opening the store");
        // After a clean shutdown it serves while the objects load (docs/admin.md, "Starting").
        let store = Store::open_serving(cfg.clone())
            .await
            .context("opening the store")?;
        // Whatever stops the server from here on, the store is closed cleanly: an error exit
        // must not leave buffers unflushed or owe the next start a scrub.
        let served = async {
            if !store.index_loaded() {
                tracing::info!("serving while the index loads");
            }
            let status = store.status().await;
            for d in &status.devices {
                tracing::info!(
                    device = d.index,
                    colour = d.colour,
                    path = d.path.as_deref().unwrap_or("(memory)"),
                    capacity_bytes = d.capacity_bytes,
                    "device ({:?})",
                    cfg.devices.kind
                );
            }
            tracing::info!(policy = %status.policy, "redundancy");
            let ec = &cfg.manager.ec;
            let engine = ec.engine.map_or_else(
                || railstore_ec::Engine::auto().map_or_else(|e| e.to_string(), |e| e.to_string()),
                |e| e.to_string(),
            );
            match ec.offload {
                Some(o) => tracing::info!(
                    engine = %engine,
                    offload = %o.engine,
                    offload_min_shard_bytes = o.min_shard_bytes,
                    gpu = railstore_ec::gpu_description().as_deref().unwrap_or("none"),
                    "erasure coding"
                ),
                None => tracing::info!(engine = %engine, "erasure coding"),
            }
            match &cfg.separation {
                Some(s) => tracing::info!(
                    frame_ms = s.frame.as_millis() as u64,
                    window = s.window,
                    window_max = status.window.as_ref().map_or(s.window, |w| w.size_range.1),
                    adaptive = s.adaptive,
                    guard_ms = s.guard.as_millis() as u64,
                    write_buffer_bytes_max = s.write_buffer_bytes_max,
                    partial_when_full = s.partial_when_full,
                    "read/write separation on"
                ),
                None => tracing::info!("read/write separation off"),
            }
            tracing::info!(
                buckets = status.buckets,
                objects = status.objects,
                bytes = status.object_bytes,
                "contents"
            );
            // Never the secret key: logs are collected, shipped and kept.
            if generated {
                tracing::info!(
                    access_key = %access_key,
                    file = %cfg.data_dir.join("credentials.toml").display(),
                    "generated an access key pair; its secret key is in the file named here (mode 0600)"
                );
            } else {
                tracing::info!(access_key = %access_key, "S3 access key");
            }
            tracing::info!(user = %server.user_id, "the main user (that key pair's)");
            for u in &server.users {
                tracing::info!(user = %u.id, access_key = %u.access_key, "S3 user");
            }
            if store.unclean_start() {
                tracing::warn!("the last run did not shut down cleanly; scrubbing in the background");
                // Its progress is in /status; its report in the data folder.
                store
                    .start_scrub("unclean start")
                    .await
                    .context("starting the scrub an unclean start owes")?;
            }
            if server.lifecycle_interval_s > 0 {
                let store = store.clone();
                let every = Duration::from_secs(server.lifecycle_interval_s);
                tokio::spawn(async move {
                    let mut ticks = tokio::time::interval(every);
                    loop {
                        ticks.tick().await;
                        // Expiry needs listings: not before the index has loaded.
                        if !store.index_loaded() {
                            continue;
                        }
                        let r =
                            railstore_s3::apply_lifecycle(&store, std::time::SystemTime::now()).await;
                        if r.objects_deleted + r.uploads_aborted + r.errors > 0 {
                            tracing::info!(
                                buckets = r.buckets,
                                objects_deleted = r.objects_deleted,
                                uploads_aborted = r.uploads_aborted,
                                errors = r.errors,
                                "lifecycle pass"
                            );
                        }
                    }
                });
            }
            match store.resume_repairs().await {
                Ok(d) if !d.is_empty() => {
                    tracing::warn!(devices = ?d, "resuming the rebuild a restart cut off")
                }
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "resuming a rebuild cut off by a restart"),
            }
            let mut s3 = server.s3_config(access_key, secret_key);
            s3.admin_token = Some(crate::admin_cmd::serve_admin_token(&server, &cfg.data_dir)?);
            s3.keyring = keyring;
            if s3.sigv2 {
                tracing::warn!(
                    "AWS Signature Version 2 is accepted ([server] sigv2 = true): its signatures are \
                     compared in variable time and its header form is not checked for age"
                );
            }
            if s3.operator_token.is_none() && !server.listen.ip().is_loopback() {
                tracing::warn!(
                    "/metrics and /status are open to anyone who reaches {}: set [server] \
                     operator_token (or --operator-token) to require a bearer token",
                    server.listen
                );
            }
            let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
            let signal = stop_signal();
            tokio::spawn(async move {
                signal.await;
                let _ = stop_tx.send(true);
            });
            let volumes = railstore_volume::Volumes::open(store.clone())
                .await
                .context("opening the volumes")?;
            let nbd_listen = server.nbd_listen.unwrap_or_else(|| {
                SocketAddr::from(([127, 0, 0, 1], crate::volume_cmd::NBD_PORT_DEFAULT))
            });
            let nbd_socket = server
                .nbd_socket
                .clone()
                .unwrap_or_else(|| cfg.data_dir.join("nbd.sock"));
            let nbd = crate::volume_cmd::bind_nbd(
                volumes.clone(),
                nbd_listen,
                server.nbd_listen.is_some(),
                &nbd_socket,
            )
            .await?;
            let nbd = match &args.nbd_trace {
                Some(p) => nbd
                    .record(p)
                    .with_context(|| format!("--nbd-trace {}", p.display()))?,
                None => nbd,
            };
            let nbd_at = nbd
                .tcp_addr()
                .map_or("off".to_string(), |a| format!("nbd://{a}"));
            tracing::info!(
                volumes = volumes.list().len(),
                tcp = %nbd_at,
                socket = %nbd_socket.display(),
                "NBD export of volumes at {nbd_at}"
            );
            let nbd = tokio::spawn(nbd.serve(stop_rx.clone()));
            let bound = railstore_s3::bind(store.clone(), s3)
                .await
                .with_context(|| format!("listening on {}", server.listen))?
                .with_volumes(volumes);
            let at = bound.local_addr();
            tracing::info!(
                "metrics at http://{at}/metrics, status at http://{at}/status, console at \
                 http://{at}/admin/console/ (with the admin token)"
            );
            let mut stop = stop_rx;
            bound
                .serve(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await?;
            let _ = nbd.await;
            anyhow::Ok(())
        }
        .await;
        match &served {
            Ok(()) => tracing::info!("stopping: flushing buffers and closing devices"),
            Err(e) => tracing::error!(
                error = %format!("{e:#}"),
                "stopping after an error: flushing buffers and closing devices"
            ),
        }
        let closed = store.shutdown().await.context("closing the store");
        served.and(closed)
    })
}

/// The master key of SSE-S3 and KMS objects, from its file (made on a first start). The id of
/// the key this store's objects were sealed with is kept beside it: a missing or other key file
/// (a typo, an unmounted volume, a restore without it) must not start the server with a fresh
/// key, under which every SSE-S3 and KMS object would be unreadable.
fn sse_keyring(server: &ServerSection, data_dir: &Path) -> Result<railstore_s3::Keyring> {
    let key_file = server
        .sse_master_key_file
        .clone()
        .unwrap_or_else(|| data_dir.join("sse-master.key"));
    let id_file = data_dir.join("sse-master.key.id");
    let known_id = std::fs::read_to_string(&id_file)
        .ok()
        .map(|s| s.trim().to_string());
    if !key_file.exists() && known_id.is_some() {
        bail!(
            "the SSE master key file {} is missing, but this store's objects were sealed \
             with the key {} names: put that key file back (or name it with [server] \
             sse_master_key_file)",
            key_file.display(),
            id_file.display()
        );
    }
    let (keyring, made) = railstore_s3::Keyring::load_or_create(&key_file)
        .with_context(|| format!("the SSE master key in {}", key_file.display()))?;
    let id = keyring.key_id().expect("a master key");
    match &known_id {
        Some(known) if *known != id => bail!(
            "the SSE master key in {} is not the one this store's objects were sealed with \
             (its id is {id}; {} says {known})",
            key_file.display(),
            id_file.display()
        ),
        Some(_) => {}
        None => std::fs::write(&id_file, format!("{id}\n"))
            .with_context(|| format!("writing {}", id_file.display()))?,
    }
    if made {
        tracing::warn!(
            file = %key_file.display(),
            "made the master key of SSE-S3 and KMS objects: back it up, apart from the \
             devices; without it they cannot be read"
        );
    }
    Ok(keyring)
}
