//! The reliability manager (KVMD): a virtual key-value device over N devices that protects each
//! object with hashing, replication, splitting or packing, chosen per size or per object.
//!
//! - [`format`]: device keys and the versioned, checksummed piece header.
//! - [`mechanism`]: the mechanisms, the policy (standalone, hybrid, custom) and the TOML config.
//! - [`io`]: the one submission point to the devices, their health, and the read plan.
//! - [`Manager`]: put/get/delete with versions, verification and self-healing reads.
//! - packing sets, rebuild of a failed device and scrub; [`Manager::scan`], every object under a
//!   prefix read at once.
//! - moving objects between layout epochs (a grow or a drain): [`Manager::relocate_all`].
//! - [`mttdl`]: KVMD §5.1's reliability model.

mod careful;
pub mod error;
mod fast;
pub mod format;
mod inner;
pub mod io;
mod manager;
pub mod mechanism;
pub mod mttdl;
mod pack;
mod part;
mod rebuild;
mod relocate;
mod scan;
mod staged;
mod vdev;
mod write;

pub use error::{show_key, RedundancyError, Result};
pub use io::{AnyHealthy, DeviceSet, FailureListener, FaultPolicy, IoCounters, ReadPlan};
pub use manager::{Manager, ObjectMeta};
pub use mechanism::{EcEngines, ManagerConfig, Mechanism, Policy, OFFLOAD_MIN_SHARD_BYTES_DEFAULT};
pub use rebuild::{RepairOptions, RepairProgress, RepairReport};
pub use relocate::{Move, MoveReport};
pub use scan::Scan;
