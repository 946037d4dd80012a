//! The NBD listeners: TCP (the NBD port, 10809, on loopback by default) and a Unix socket.
//! Each connection negotiates, then transmits until the client leaves or the server stops.

use super::handshake::{negotiate, Negotiated};
use super::record::Recorder;
use super::transmission::transmit;
use crate::registry::Volumes;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long a client may take to negotiate: one that connects and stays silent does not keep a
/// task for ever.
const NEGOTIATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Bound NBD listeners, not yet serving.
pub struct NbdServer {
    volumes: Arc<Volumes>,
    tcp: Option<TcpListener>,
    unix: Option<(UnixListener, PathBuf)>,
    recorder: Option<Arc<Recorder>>,
}

impl std::fmt::Debug for NbdServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdServer")
            .field("tcp", &self.tcp_addr())
            .field("unix", &self.unix.as_ref().map(|u| &u.1))
            .finish()
    }
}

impl NbdServer {
    /// Binds the listeners asked for (a Unix socket left by an earlier run is replaced).
    pub async fn bind(
        volumes: Arc<Volumes>,
        tcp: Option<SocketAddr>,
        unix: Option<&Path>,
    ) -> io::Result<NbdServer> {
        let tcp = match tcp {
            Some(a) => Some(TcpListener::bind(a).await?),
            None => None,
        };
        let unix = match unix {
            Some(p) => {
                match std::fs::remove_file(p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                Some((UnixListener::bind(p)?, p.to_path_buf()))
            }
            None => None,
        };
        Ok(NbdServer {
            volumes,
            tcp,
            unix,
            recorder: None,
        })
    }

    /// Records every read and write it receives to a trace file at `path` (see
    /// [`Recorder`]).
    pub fn record(mut self, path: &Path) -> io::Result<NbdServer> {
        self.recorder = Some(Arc::new(Recorder::create(path)?));
        Ok(self)
    }

    /// The TCP address it listens on.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The Unix socket it listens on.
    pub fn unix_path(&self) -> Option<&Path> {
        self.unix.as_ref().map(|u| u.1.as_path())
    }

    /// Serves until `stop` becomes true; then stops accepting, lets each connection finish the
    /// requests it has in flight, and returns.
    pub async fn serve(self, mut stop: watch::Receiver<bool>) {
        let mut conns = JoinSet::new();
        let watcher = stop.clone();
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                Some(accepted) = accept_tcp(self.tcp.as_ref()) => match accepted {
                    Ok((s, peer)) => {
                        let _ = s.set_nodelay(true);
                        conns.spawn(connection(s, peer.to_string(), self.volumes.clone(), watcher.clone(), self.recorder.clone()));
                    }
                    Err(e) => tracing::warn!(error = %e, "accepting an NBD connection"),
                },
                Some(accepted) = accept_unix(self.unix.as_ref()) => match accepted {
                    Ok(s) => {
                        conns.spawn(connection(s, "unix".into(), self.volumes.clone(), watcher.clone(), self.recorder.clone()));
                    }
                    Err(e) => tracing::warn!(error = %e, "accepting an NBD connection"),
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        while conns.join_next().await.is_some() {}
        if let Some(r) = &self.recorder {
            r.flush();
        }
        if let Some((_, p)) = &self.unix {
            let _ = std::fs::remove_file(p);
        }
    }
}

async fn accept_tcp(
    l: Option<&TcpListener>,
) -> Option<io::Result<(tokio::net::TcpStream, SocketAddr)>> {
    match l {
        Some(l) => Some(l.accept().await),
        None => std::future::pending().await,
    }
}

async fn accept_unix(
    l: Option<&(UnixListener, PathBuf)>,
) -> Option<io::Result<tokio::net::UnixStream>> {
    match l {
        Some((l, _)) => Some(l.accept().await.map(|(s, _)| s)),
        None => std::future::pending().await,
    }
}

async fn connection<S>(
    mut stream: S,
    peer: String,
    volumes: Arc<Volumes>,
    stop: watch::Receiver<bool>,
    recorder: Option<Arc<Recorder>>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let negotiated = tokio::time::timeout(NEGOTIATION_TIMEOUT, negotiate(&mut stream, &volumes));
    let (volume, session) = match negotiated.await {
        Ok(Ok(Negotiated::Export(v, session))) => (v, session),
        Ok(Ok(Negotiated::Closed)) => return,
        Ok(Err(e)) => {
            tracing::debug!(peer = %peer, error = %e, "NBD negotiation ended");
            return;
        }
        Err(_) => {
            tracing::info!(peer = %peer, "NBD client took too long to choose an export");
            return;
        }
    };
    let name = volume.meta().name;
    tracing::info!(peer = %peer, volume = %name, structured = session.structured, block_status = session.allocation, "NBD client connected");
    match transmit(stream, volume, session, stop, recorder).await {
        Ok(()) => tracing::info!(peer = %peer, volume = %name, "NBD client disconnected"),
        Err(e) => tracing::warn!(peer = %peer, volume = %name, error = %e, "NBD connection ended"),
    }
}
