//! The crate's one error type.

use std::io;

/// Everything a device operation can fail with. Variants carry the data a caller needs to
/// react (the offending length, the limit, the key) rather than a formatted string.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The key is shorter or longer than the device's limits allow.
    #[error("key length {len} B outside [{min}, {max}] B")]
    KeyLength {
        /// Length of the key that was passed.
        len: usize,
        /// Shortest key the device accepts.
        min: usize,
        /// Longest key the device accepts.
        max: usize,
    },
    /// The value is longer than the device's limit.
    #[error("value length {len} B above the limit of {max} B")]
    ValueLength {
        /// Length of the value that was passed.
        len: usize,
        /// Longest value the device accepts.
        max: usize,
    },
    /// The device has no room for the operation.
    #[error("device full: need {needed} B, {available} B available")]
    Capacity {
        /// Bytes the operation needs.
        needed: u64,
        /// Bytes still free.
        available: u64,
    },
    /// The key is not stored (update-only store, retrieve, delete with `must_exist`).
    #[error("key does not exist ({} B key)", key.len())]
    KeyNotFound {
        /// The missing key.
        key: Vec<u8>,
    },
    /// The key is already stored (insert-only store).
    #[error("key already exists ({} B key)", key.len())]
    KeyExists {
        /// The existing key.
        key: Vec<u8>,
    },
    /// A retrieve offset past the end of the value.
    #[error("offset {offset} beyond value of {value_len} B")]
    Offset {
        /// The requested offset.
        offset: u64,
        /// The stored value's length.
        value_len: u64,
    },
    /// An operating-system I/O error.
    #[error("I/O error during {op}: {source}")]
    Io {
        /// What the device was doing.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Stored bytes failed their checksum or do not parse.
    #[error("corrupt data at {location}: {reason}")]
    Corrupt {
        /// Where (file and offset, or key).
        location: String,
        /// What check failed.
        reason: &'static str,
    },
    /// The device has failed (fail-stop) or was crashed or closed; it serves nothing more.
    #[error("device failed: {reason}")]
    Failed {
        /// Why it stopped.
        reason: &'static str,
    },
    /// The operation never ran: the process is stopping (its runtime refused new work) or the
    /// device's owner closed it. Not a fault of the device, which keeps what it held; counting
    /// it as one would mark every device failed whenever a process exits with work in flight.
    #[error("device operation not run: {reason}")]
    Stopped {
        /// What stopped it.
        reason: &'static str,
    },
    /// A transient failure: the same operation may succeed if retried.
    #[error("transient I/O error (injected)")]
    Transient,
    /// A configuration that cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A mutation refused because its writer has been superseded: another array, an older
    /// layout epoch, or a lower token for its shard than one the device's owner has admitted.
    /// Nothing changed; not a fault of the device.
    #[error("write refused: sent {sent}, but the device's owner holds {held}")]
    Fenced {
        /// The writer's credentials.
        sent: crate::fence::Fence,
        /// What the owner holds for that shard: the array, the newest epoch, the highest token.
        held: crate::fence::Fence,
    },
}

impl DeviceError {
    /// Wraps an `io::Error` with what the device was doing.
    pub fn io(op: &'static str, source: io::Error) -> Self {
        DeviceError::Io { op, source }
    }
}

/// Result alias for device operations.
pub type Result<T, E = DeviceError> = std::result::Result<T, E>;
