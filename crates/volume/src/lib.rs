//! Block volumes over the store (DESIGN §5): a volume is a named, fixed-size block device
//! striped over objects of the store's reliability manager, each with the volume's mechanism
//! (or the store's policy), exported over NBD. See docs/volumes.md.
//!
//! - [`meta`]: the volume record and the keys of its objects;
//! - [`registry`]: the store's volumes (create, list, resize, delete; found again on open);
//! - [`volume`]: one volume's reads, writes, zeroing and flush;
//! - [`nbd`]: the NBD server.

pub mod error;
pub mod meta;
pub mod nbd;
pub mod registry;
pub mod volume;

pub use error::{Result, VolumeError};
pub use meta::{parse_mechanism, parse_size, VolumeMeta, VolumeSpec, OBJECT_BYTES_DEFAULT};
pub use nbd::NbdServer;
pub use registry::{VolumeInfo, Volumes};
pub use volume::Volume;
