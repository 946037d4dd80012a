//! A node served on a loopback port within the test's runtime.

use railstore_device::{Device, Fence};
use railstore_node::{serve, Exported, FenceBook, NodeService, RemoteDevice, RemoteNode};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;

pub const ARRAY: u64 = 0xa11a7;

/// The fence of a writer of shard 0 with `token`.
pub fn writer(token: u64) -> Fence {
    Fence {
        array_id: ARRAY,
        layout_epoch: 1,
        shard: 0,
        token,
    }
}

/// A running node; dropping it (or [`Node::stop`]) stops serving.
pub struct Node {
    pub address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Node {
    /// Serves `devices` (named `d0`, `d1`, ...) on a free loopback port, or on `address`.
    pub async fn start(
        devices: Vec<Arc<dyn Device>>,
        fences: Arc<FenceBook>,
        address: Option<SocketAddr>,
    ) -> Node {
        let listener = bind(address.unwrap_or(([127, 0, 0, 1], 0).into())).await;
        let address = listener.local_addr().unwrap();
        let exported = devices
            .into_iter()
            .enumerate()
            .map(|(i, device)| Exported {
                name: format!("d{i}"),
                device,
            })
            .collect();
        let (stop, stopped) = oneshot::channel();
        let service = NodeService::new("test-node", exported, fences);
        let served = tokio::spawn(async move {
            serve(service, listener, async {
                let _ = stopped.await;
            })
            .await
            .expect("node serves");
        });
        Node {
            address,
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// Stops serving and waits until the listener and connections are closed.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.served.take().unwrap().await.unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Binds `address`; a restarted node's port may take a moment to come free.
async fn bind(address: SocketAddr) -> tokio::net::TcpListener {
    let mut tries = 0;
    loop {
        match tokio::net::TcpListener::bind(address).await {
            Ok(l) => return l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 100 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("bind {address}: {e}"),
        }
    }
}

/// One node serving `dev` and the remote device for it, writing as `writer(1)`.
pub async fn remote(dev: Arc<dyn Device>) -> (Node, RemoteDevice) {
    let node = Node::start(vec![dev], Arc::new(FenceBook::in_memory(ARRAY)), None).await;
    let remote = RemoteNode::connect(&node.address.to_string())
        .await
        .expect("connect")
        .device("d0", writer(1))
        .expect("device d0");
    (node, remote)
}
