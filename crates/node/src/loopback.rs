//! A node on a loopback port, run from its own runtime on its own threads as a separate
//! process would be: for `railstore bench remote` (and `bench device --remote`), which compare
//! a device with the same device through a node in one run.

use crate::fences::FenceBook;
use crate::service::{serve, Exported, NodeService};
use crate::traffic::Traffic;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;

/// A node serving until dropped.
pub struct LoopbackNode {
    address: SocketAddr,
    traffic: Arc<Traffic>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LoopbackNode {
    /// Serves `devices` on a free loopback port from a runtime of `threads` worker threads.
    pub fn start(
        devices: Vec<Exported>,
        fences: FenceBook,
        threads: usize,
    ) -> std::io::Result<LoopbackNode> {
        let runtime = if threads <= 1 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("railstore-node")
                .enable_all()
                .build()?
        };
        // Bound here (not in the runtime) so that a caller inside another runtime may start it.
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let service = NodeService::new("loopback", devices, Arc::new(fences));
        let traffic = service.traffic();
        let thread = std::thread::Builder::new()
            .name("railstore-node-main".into())
            .spawn(move || {
                runtime.block_on(async {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => return tracing::error!(error = %e, "loopback node listener"),
                    };
                    // Stopping drops the server and its connections at once: nothing waits
                    // for clients to say goodbye.
                    tokio::select! {
                        served = serve(service, listener, std::future::pending()) => {
                            if let Err(e) = served {
                                tracing::error!(error = %e, "loopback node stopped");
                            }
                        }
                        _ = stopped => {}
                    }
                });
                // Dropped, not shut down with a timeout: the drop waits for the device work
                // still running on blocking threads, so the devices are let go of (a file
                // device's directory lock released) by the time the node's drop returns.
                drop(runtime);
            })?;
        Ok(LoopbackNode {
            address,
            traffic,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// What it has moved over the network.
    pub fn traffic(&self) -> &Arc<Traffic> {
        &self.traffic
    }
}

impl Drop for LoopbackNode {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
