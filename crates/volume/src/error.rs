//! What can go wrong with a volume, and the NBD error number each maps to.

use railstore_redundancy::RedundancyError;
use railstore_store::StoreError;

/// Result of volume operations.
pub type Result<T, E = VolumeError> = std::result::Result<T, E>;

/// Everything a volume operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A bad name, size, mechanism or range: nothing was changed.
    #[error("{0}")]
    Invalid(String),
    #[error("a volume named {0:?} exists")]
    Exists(String),
    #[error("no volume named {0:?}")]
    NotFound(String),
    #[error("the volume {0:?} was deleted")]
    Deleted(String),
    #[error("{what}: bytes {offset}..{end} are beyond the volume's {size} bytes")]
    OutOfRange {
        what: &'static str,
        offset: u64,
        end: u64,
        size: u64,
    },
    #[error("volume metadata {key}: {why}")]
    Corrupt { key: String, why: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Redundancy(#[from] RedundancyError),
}

/// NBD error numbers (the protocol's, which are Linux's).
pub mod errno {
    pub const EIO: u32 = 5;
    pub const EINVAL: u32 = 22;
    pub const ENOSPC: u32 = 28;
    pub const ESHUTDOWN: u32 = 108;
}

impl VolumeError {
    /// The NBD error a request that failed this way is answered with.
    pub fn errno(&self) -> u32 {
        match self {
            VolumeError::Invalid(_) => errno::EINVAL,
            VolumeError::OutOfRange { what: "write", .. } => errno::ENOSPC,
            VolumeError::OutOfRange { .. } => errno::EINVAL,
            VolumeError::Deleted(_) | VolumeError::Store(StoreError::ShuttingDown) => {
                errno::ESHUTDOWN
            }
            _ => errno::EIO,
        }
    }
}
