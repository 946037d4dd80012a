//! The cluster map in etcd (DESIGN §5, Cluster; docs/cluster.md): members and their devices,
//! each running node's liveness under an etcd lease, the layout with the node as the failure
//! domain, layout epochs, and the rails frame clock every node shares. Consensus is etcd's,
//! never ours: the map changes only by compare-and-swap transactions.
//!
//! - [`map`]: the map itself and its rules (who may join, when the layout forms, who may leave);
//! - [`domain`]: which array positions each node's devices take, and the check that losing any
//!   one node stays within every mechanism's tolerance;
//! - [`clock`]: frames counted from the map's origin on each node's clock;
//! - [`etcd`]: the map and the live records in etcd;
//! - [`identity`]: which node of which cluster a data folder belongs to;
//! - [`shards`]: the key space's shards and their owners, whose fencing tokens are etcd
//!   revisions;
//! - [`status`]: what `railstore cluster status` shows;
//! - [`testing`]: a throwaway etcd process for tests and benchmarks.

#![warn(missing_docs)]

pub mod clock;
pub mod domain;
pub mod error;
pub mod etcd;
pub mod identity;
pub mod map;
pub mod shards;
pub mod status;
pub mod testing;

pub use clock::FrameClock;
pub use error::{ClusterError, Result};
pub use etcd::{Cluster, ClusterUrl, Live, Registration};
pub use identity::NodeIdentity;
pub use map::{ClusterLayout, ClusterMap, DeviceRef, Member, PolicySpec, MAP_FORMAT};
pub use shards::{keep_shards, shard_of, Owner};
pub use status::ClusterStatus;
