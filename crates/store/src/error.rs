//! The store's one error type. The `s3` crate maps each variant to an S3 error code and HTTP
//! status; nothing here knows about HTTP.

use railstore_redundancy::RedundancyError;

/// What went wrong in a store operation. Every error leaves the store as it was.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No bucket of that name.
    #[error("bucket {0:?} does not exist")]
    NoSuchBucket(String),
    /// A bucket of that name exists already (creating it again is not an error; see
    /// [`crate::Store::create_bucket`]).
    #[error("bucket {0:?} is not empty")]
    BucketNotEmpty(String),
    /// The name breaks the bucket naming rules.
    #[error("invalid bucket name {name:?}: {why}")]
    InvalidBucketName {
        /// The name given.
        name: String,
        /// The rule it breaks.
        why: &'static str,
    },
    /// No object under that key.
    #[error("no object {key:?} in bucket {bucket:?}")]
    NoSuchKey {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
    },
    /// An object key longer than the store accepts, or empty.
    #[error("object key of {len} bytes; keys take 1 to {max} bytes")]
    KeyLength {
        /// Bytes given.
        len: usize,
        /// Most accepted.
        max: usize,
    },
    /// An object larger than the store accepts.
    #[error("object of {size} bytes is larger than the {max} bytes accepted")]
    EntityTooLarge {
        /// Bytes given (so far).
        size: u64,
        /// Most accepted.
        max: u64,
    },
    /// A multipart part below the minimum size that is not the last part.
    #[error("part {part} has {size} bytes; every part but the last needs at least {min}")]
    EntityTooSmall {
        /// The part number.
        part: u32,
        /// Its size.
        size: u64,
        /// The minimum.
        min: u64,
    },
    /// The range asked for starts at or beyond the end of the object.
    #[error("range not satisfiable for an object of {size} bytes")]
    InvalidRange {
        /// The object's size.
        size: u64,
    },
    /// The body does not match the digest the client sent; nothing was stored.
    #[error("digest mismatch: {0}")]
    BadDigest(String),
    /// The client's body stream failed or ended early; nothing was stored.
    #[error("request body: {0}")]
    Body(String),
    /// No multipart upload with that id (for that bucket and key).
    #[error("no multipart upload {0:?}")]
    NoSuchUpload(String),
    /// A part listed in a completion was not uploaded, or its ETag does not match.
    #[error("part {part}: {why}")]
    InvalidPart {
        /// The part number.
        part: u32,
        /// What is wrong.
        why: String,
    },
    /// A conditional write's precondition does not hold; nothing was changed.
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// The parts of a completion are not in ascending order.
    #[error("parts must be listed in ascending order of part number")]
    InvalidPartOrder,
    /// A request argument out of its range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The request conflicts with the array's state (a device still in service, a repair
    /// already running).
    #[error("{0}")]
    Conflict(String),
    /// No version of the key with that version id.
    #[error("no version {version:?} of {key:?} in bucket {bucket:?}")]
    NoSuchVersion {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
        /// The version id asked for.
        version: String,
    },
    /// The version is locked (a legal hold, or a retention in force): it stays.
    #[error("object locked: {0}")]
    ObjectLocked(String),
    /// The version asked for is a delete marker: it has no body or headers to return.
    #[error("version {0:?} is a delete marker")]
    DeleteMarker(String),
    /// A configuration that cannot work.
    #[error("configuration: {0}")]
    Config(String),
    /// The data folder or a stored record is not what this version of railstore wrote.
    #[error("corrupt store metadata: {0}")]
    Corrupt(String),
    /// The store is shutting down and takes no new work.
    #[error("the store is shutting down")]
    ShuttingDown,
    /// The index is still loading after the start (listings and other answers that cannot
    /// wait for it); retry shortly.
    #[error("the index is still loading after the start; retry shortly")]
    IndexLoading,
    /// The index did not load; the store serves nothing that needs it.
    #[error("the index did not load: {0}")]
    IndexFailed(String),
    /// A file-system error on the data folder.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A device operation outside the reliability manager failed (flushing separation
    /// buffers, closing devices).
    #[error("{what}: {source}")]
    Device {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: railstore_device::DeviceError,
    },
    /// The reliability manager failed (devices lost beyond tolerance, I/O errors, …).
    #[error(transparent)]
    Redundancy(#[from] RedundancyError),
}

impl StoreError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> StoreError {
        StoreError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result with [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
