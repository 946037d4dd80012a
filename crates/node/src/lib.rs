//! A node's devices over the network (DESIGN §5, Cluster; docs/cluster.md).
//!
//! - [`service::NodeService`] exports a node's local devices over gRPC (tonic), admitting each
//!   store and delete through the node's [`fences::FenceBook`], which refuses writers that
//!   have been superseded (another array, an older layout epoch, a lower shard token);
//! - [`remote::RemoteDevice`] is one of those devices as a [`railstore_device::Device`]: every
//!   operation of the trait, values streamed in [`wire::CHUNK_BYTES`] pieces, no more
//!   operations in flight than the node's device takes, errors arriving as the device's own
//!   ([`errors`]);
//! - [`traffic::Traffic`] counts what a node moves over the cluster network, per kind of call
//!   and on its sockets (the Ceph study's private network traffic).
//!
//! The messages are prost structs written by hand ([`wire`]); `build.rs` generates the service's
//! client and server from a method list, so building needs no `protoc`.

#![warn(missing_docs)]

pub mod errors;
pub mod fences;
pub mod loopback;
pub mod remote;
pub mod service;
pub mod traffic;
pub mod wire;

#[allow(missing_docs, clippy::all)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/railstore.node.Node.rs"));
}

/// The generated gRPC client and server, for tools and tests that speak the protocol directly.
pub mod rpc {
    pub use crate::generated::node_client::NodeClient;
    pub use crate::generated::node_server::{Node, NodeServer};
}

pub use fences::FenceBook;
pub use loopback::LoopbackNode;
pub use remote::{RemoteDevice, RemoteNode};
pub use service::{serve, Exported, NodeService};
pub use traffic::{Call, Traffic, TrafficSnapshot};
