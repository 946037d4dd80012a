//! `railstore volume create|list|info|resize|delete` (the admin API of a running server), and
//! the NBD export `serve` starts (docs/volumes.md).

use crate::admin_cmd::{call, percent_encode, AdminArgs};
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use railstore_volume::{NbdServer, VolumeInfo, Volumes};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// The NBD port.
pub const NBD_PORT_DEFAULT: u16 = 10809;

/// `railstore volume …`.
#[derive(Subcommand, Debug)]
pub enum VolumeCommand {
    /// Create a volume (it reads as zeros until written).
    Create {
        /// Its name (the NBD export name): letters, digits, '.', '_', '-'.
        name: String,
        /// Its size: 1GiB, 512M, 4096…
        #[arg(long)]
        size: String,
        /// The mechanism of its objects: hybrid (the store's policy), rep3, split4+2, pack4+2…
        #[arg(long, default_value = "hybrid")]
        mechanism: String,
        /// Bytes per object it is striped over (a power of two, 4KiB to 64MiB).
        #[arg(long, default_value = "4MiB")]
        object_size: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List the volumes.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// One volume, with the objects it has stored.
    Info {
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Change a volume's size (what a shrink cuts off is gone).
    Resize {
        name: String,
        #[arg(long)]
        size: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Delete a volume and its data.
    Delete {
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

pub fn run(cmd: &VolumeCommand) -> Result<()> {
    match cmd {
        VolumeCommand::Create {
            name,
            size,
            mechanism,
            object_size,
            admin,
        } => {
            let path = format!(
                "/admin/v1/volumes/{}?size={}&mechanism={}&object-size={}",
                percent_encode(name),
                percent_encode(size),
                percent_encode(mechanism),
                percent_encode(object_size)
            );
            let v: VolumeInfo = parse(&call(&admin.target()?, "POST", &path)?)?;
            println!("created {}", describe(&v));
        }
        VolumeCommand::List { json, admin } => {
            let body = call(&admin.target()?, "GET", "/admin/v1/volumes")?;
            if *json {
                println!("{body}");
                return Ok(());
            }
            let list: Vec<VolumeInfo> = parse(&body)?;
            if list.is_empty() {
                println!("no volumes");
            }
            for v in &list {
                println!("{}", describe(v));
            }
        }
        VolumeCommand::Info { name, admin } => {
            let path = format!("/admin/v1/volumes/{}", percent_encode(name));
            println!("{}", call(&admin.target()?, "GET", &path)?.trim_end());
        }
        VolumeCommand::Resize { name, size, admin } => {
            let path = format!(
                "/admin/v1/volumes/{}/resize?size={}",
                percent_encode(name),
                percent_encode(size)
            );
            let v: VolumeInfo = parse(&call(&admin.target()?, "POST", &path)?)?;
            println!("resized {}", describe(&v));
        }
        VolumeCommand::Delete { name, admin } => {
            let path = format!("/admin/v1/volumes/{}", percent_encode(name));
            call(&admin.target()?, "DELETE", &path)?;
            println!("deleted {name}");
        }
    }
    Ok(())
}

fn parse<T: serde::de::DeserializeOwned>(body: &str) -> Result<T> {
    serde_json::from_str(body).context("parsing the server's answer")
}

fn describe(v: &VolumeInfo) -> String {
    format!(
        "{}: {} B ({:.2} GiB), {} objects of {} B, {}",
        v.name,
        v.size,
        v.size as f64 / (1u64 << 30) as f64,
        v.objects,
        v.object_bytes,
        v.mechanism
    )
}

/// Binds the NBD export: TCP on `listen` (loopback only: there is no TLS), and the Unix socket
/// `socket`. A default address already taken leaves TCP off with a warning (another server
/// holds the NBD port); an address asked for must bind.
pub async fn bind_nbd(
    volumes: Arc<Volumes>,
    listen: SocketAddr,
    asked: bool,
    socket: &Path,
) -> Result<NbdServer> {
    if !listen.ip().is_loopback() {
        bail!(
            "NBD on {listen}: volumes are exported on loopback only (NBD here has no TLS and \
             no secret yet); use 127.0.0.1 or the Unix socket"
        );
    }
    match NbdServer::bind(volumes.clone(), Some(listen), Some(socket)).await {
        Ok(s) => Ok(s),
        Err(e) if !asked && e.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(
                address = %listen,
                "the NBD port is taken (another server?): NBD over TCP is off, the Unix socket \
                 serves; set [server] nbd_listen or --nbd-listen"
            );
            NbdServer::bind(volumes, None, Some(socket))
                .await
                .with_context(|| format!("NBD socket {}", socket.display()))
        }
        Err(e) => Err(e).with_context(|| format!("NBD on {listen} and {}", socket.display())),
    }
}
