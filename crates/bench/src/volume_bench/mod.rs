//! Benchmarks of block volumes, each on a store in this process with its NBD export on a
//! loopback port, driven through NBD by fio's `nbd` engine or the project's own client
//! ([`driver`]):
//! - [`study`]: `railstore bench ceph-study`, the Ceph SSD study (ceph-ec-ssd-overheads.txt)
//!   per mechanism, pattern and request size ([`study_report`], [`paper`]);
//! - [`cluster`]: `railstore bench cluster`, the same load across nodes over gRPC, with the
//!   cluster network's bytes per byte (the study's §VI-B);
//! - [`replay`]: `railstore bench volume-trace`, block traces replayed onto a volume at their
//!   offsets, with read/write separation on and off.

pub mod cluster;
pub mod driver;
pub mod paper;
pub mod replay;
pub mod study;
pub mod study_report;

use anyhow::{Context, Result};
use railstore_store::Store;
use railstore_volume::{NbdServer, Volumes};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// A store's volumes exported over NBD on a free loopback port, until [`Exported::stop`].
pub struct Exported {
    pub volumes: Arc<Volumes>,
    pub addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    serving: tokio::task::JoinHandle<()>,
}

impl Exported {
    /// Opens the store's volumes and starts the export; with `record`, every request the
    /// export receives is written there as a trace (FlashNet/Heimdall format).
    pub async fn start(store: &Store, record: Option<&Path>) -> Result<Exported> {
        let volumes = Volumes::open(store.clone()).await?;
        let loopback: SocketAddr = "127.0.0.1:0".parse().expect("a valid address");
        let mut server = NbdServer::bind(volumes.clone(), Some(loopback), None)
            .await
            .context("binding the NBD export")?;
        if let Some(path) = record {
            server = server
                .record(path)
                .with_context(|| format!("recording requests to {}", path.display()))?;
        }
        let addr = server.tcp_addr().context("the NBD export has no address")?;
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let serving = tokio::spawn(server.serve(stop_rx));
        Ok(Exported {
            volumes,
            addr,
            stop,
            serving,
        })
    }

    /// Stops the export (requests in flight finish first).
    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.serving.await.context("the NBD export panicked")
    }
}

/// Device bytes so far, from the store's own counters: (read, written), the rails journal
/// among the written.
pub async fn device_bytes(store: &Store) -> (u64, u64) {
    let text = store.metrics_text().await;
    let sum = |name: &str| -> u64 {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let metric = series.split('{').next()?;
                (metric == name).then(|| value.parse::<f64>().ok())?
            })
            .sum::<f64>() as u64
    };
    (
        sum("railstore_device_retrieve_bytes_total"),
        sum("railstore_device_store_bytes_total") + sum("railstore_rails_journal_bytes_total"),
    )
}
