//! An NBD export of one volume over a store on memory devices, in the test's process.

use railstore_store::{DeviceKind, Store, StoreConfig};
use railstore_volume::{NbdServer, VolumeSpec, Volumes};
use std::net::SocketAddr;
use std::path::Path;

pub struct Export {
    pub store: Store,
    #[allow(dead_code)] // not every test makes more volumes
    pub volumes: std::sync::Arc<Volumes>,
    pub addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    serving: tokio::task::JoinHandle<()>,
}

/// Serves volume `v` (`size` bytes in objects of `object_bytes`) on a loopback port; with
/// `trace`, recording its requests there.
pub async fn export(dir: &Path, size: u64, object_bytes: u64, trace: Option<&Path>) -> Export {
    let mut cfg = StoreConfig {
        data_dir: dir.join("data"),
        ..StoreConfig::default()
    };
    cfg.devices.kind = DeviceKind::Mem;
    cfg.separation = None;
    let store = Store::open(cfg).await.unwrap();
    let volumes = Volumes::open(store.clone()).await.unwrap();
    volumes
        .create(VolumeSpec {
            object_bytes,
            ..VolumeSpec::new("v", size)
        })
        .await
        .unwrap();
    let mut server = NbdServer::bind(volumes.clone(), Some("127.0.0.1:0".parse().unwrap()), None)
        .await
        .unwrap();
    if let Some(t) = trace {
        server = server.record(t).unwrap();
    }
    let addr = server.tcp_addr().unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn(server.serve(stop_rx));
    Export {
        store,
        volumes,
        addr,
        stop,
        serving,
    }
}

impl Export {
    /// Stops the export, then the store.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.serving.await.unwrap();
        self.store.shutdown().await.unwrap();
    }
}
