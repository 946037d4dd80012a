//! The crate's one error type.

use railstore_device::DeviceError;

/// Everything a reliability-manager operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RedundancyError {
    /// The object is not stored.
    #[error("object {} does not exist", show_key(key))]
    NotFound {
        /// The user key.
        key: Vec<u8>,
    },
    /// The object exists and the store was insert-only.
    #[error("object {} already exists", show_key(key))]
    Exists {
        /// The user key.
        key: Vec<u8>,
    },
    /// A user key outside the lengths the devices can hold after the manager's key prefix.
    #[error("key length {len} B outside [{min}, {max}] B")]
    KeyLength {
        /// Length passed.
        len: usize,
        /// Shortest accepted.
        min: usize,
        /// Longest accepted.
        max: usize,
    },
    /// A value longer than the configured object limit.
    #[error("object length {len} B above the limit of {max} B")]
    ValueLength {
        /// Length passed.
        len: u64,
        /// Longest accepted.
        max: u64,
    },
    /// A read offset past the end of the object.
    #[error("offset {offset} beyond object of {len} B")]
    Offset {
        /// Offset asked for.
        offset: u64,
        /// Object length.
        len: u64,
    },
    /// More pieces of the object are lost or corrupt than its mechanism tolerates.
    #[error("object {} lost: {detail}", show_key(key))]
    Lost {
        /// The user key.
        key: Vec<u8>,
        /// What was found.
        detail: String,
    },
    /// A write reached fewer devices than its mechanism needs to stay protected.
    #[error(
        "write of {} failed: {written} of {needed} pieces stored ({cause})",
        show_key(key)
    )]
    WriteFailed {
        /// The user key.
        key: Vec<u8>,
        /// Pieces stored.
        written: usize,
        /// Pieces needed.
        needed: usize,
        /// The first device error.
        cause: String,
    },
    /// A device index outside the array.
    #[error("device {index} does not exist (array of {devices})")]
    NoSuchDevice {
        /// Index passed.
        index: usize,
        /// Devices in the array.
        devices: usize,
    },
    /// A configuration that cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A rebuild or scrub was stopped before it finished (`RepairProgress::cancel`).
    #[error("stopped before it finished")]
    Cancelled,
    /// A device failed in a way the manager cannot hide.
    #[error("device {device}: {source}")]
    Device {
        /// Which device.
        device: usize,
        /// What it said.
        #[source]
        source: DeviceError,
    },
}

/// Shows a key as text when it is printable, else as hex.
pub fn show_key(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => format!("{s:?}"),
        _ => key.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// Result alias.
pub type Result<T, E = RedundancyError> = std::result::Result<T, E>;
