//! The `Device` trait and the types it speaks, shaped like the SNIA key-value API
//! (`kvs_store_kvp`, `kvs_retrieve_kvp`, `kvs_delete_kvp`, `kvs_exist_kv_pairs`,
//! `kvs_open_iterator`, `kvs_get_device_info`).

use crate::error::{DeviceError, Result};
use async_trait::async_trait;
use tokio::sync::{Semaphore, SemaphorePermit};

/// How `store` treats an existing or missing key (SNIA `kvs_store_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum StoreMode {
    /// Write whether or not the key exists.
    #[default]
    Upsert,
    /// Write only if the key exists, else [`DeviceError::KeyNotFound`].
    UpdateOnly,
    /// Write only if the key does not exist, else [`DeviceError::KeyExists`].
    InsertOnly,
}

impl StoreMode {
    /// Checks the mode against whether the key exists now.
    pub fn check(self, key: &[u8], exists: bool) -> Result<()> {
        match (self, exists) {
            (StoreMode::UpdateOnly, false) => Err(DeviceError::KeyNotFound { key: key.to_vec() }),
            (StoreMode::InsertOnly, true) => Err(DeviceError::KeyExists { key: key.to_vec() }),
            _ => Ok(()),
        }
    }
}

/// Which part of a value `retrieve` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadRange {
    /// First byte of the value to return.
    pub offset: u64,
    /// Most bytes to return; `None` reads to the end of the value.
    pub len: Option<u64>,
}

impl ReadRange {
    /// The whole value.
    pub const ALL: ReadRange = ReadRange {
        offset: 0,
        len: None,
    };

    /// Resolves the range against a value of `value_len` bytes into `(start, end)`.
    pub fn resolve(self, value_len: u64) -> Result<(u64, u64)> {
        if self.offset > value_len {
            return Err(DeviceError::Offset {
                offset: self.offset,
                value_len,
            });
        }
        let end = match self.len {
            Some(len) => self.offset.saturating_add(len).min(value_len),
            None => value_len,
        };
        Ok((self.offset, end))
    }
}

/// What `retrieve` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retrieved {
    /// The requested bytes of the value. Shared, not copied, where the device holds the value
    /// in memory (`mem`, and `sim` around it): a read then costs no copy of the value.
    pub value: bytes::Bytes,
    /// The full stored length of the value (SNIA `actual_value_size`).
    pub value_len: u64,
}

/// One iteration request (SNIA iterator by key prefix), paged so a device with many keys can
/// be walked in bounded batches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IterRequest {
    /// Only keys starting with these bytes.
    pub prefix: Vec<u8>,
    /// Resume after this key (exclusive); `None` starts at the first key with the prefix.
    pub start_after: Option<Vec<u8>>,
    /// Most entries in one batch; 0 means no limit.
    pub entries_max: usize,
    /// Return values too (SNIA `KVS_ITERATOR_KEY_VALUE`), not only keys.
    pub with_values: bool,
}

/// One key (and value, if asked) from an iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IterEntry {
    /// The key.
    pub key: Vec<u8>,
    /// The value, when the request asked for values.
    pub value: Option<Vec<u8>>,
}

/// A batch of iteration results in ascending key order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IterBatch {
    /// The entries.
    pub entries: Vec<IterEntry>,
    /// More keys with the prefix follow the last entry.
    pub more: bool,
}

/// Device facts (SNIA `kvs_get_device_info` and utilisation).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceInfo {
    /// Total bytes the device can hold.
    pub capacity_bytes: u64,
    /// Bytes in use, including dead space not yet reclaimed.
    pub used_bytes: u64,
    /// Bytes of live keys, values and their metadata.
    pub live_bytes: u64,
    /// Number of stored keys.
    pub key_count: u64,
    /// Limits on key and value sizes.
    pub limits: Limits,
    /// Value size at which the device is most efficient.
    pub optimal_value_bytes: u64,
    /// Most operations in flight at once.
    pub queue_depth_max: usize,
}

/// What one `compact` call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactStats {
    /// Segments (or blocks) reclaimed.
    pub segments_freed: u64,
    /// Live bytes copied to reclaim them.
    pub bytes_copied: u64,
    /// Bytes returned to free space.
    pub bytes_freed: u64,
}

/// Key and value size limits of a device (SNIA `max_key_len`, `max_value_len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Shortest key.
    pub key_bytes_min: usize,
    /// Longest key.
    pub key_bytes_max: usize,
    /// Longest value.
    pub value_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            key_bytes_min: 1,
            key_bytes_max: 255,
            value_bytes_max: 2 << 20,
        }
    }
}

impl Limits {
    /// Checks a key's length.
    pub fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.len() < self.key_bytes_min || key.len() > self.key_bytes_max {
            return Err(DeviceError::KeyLength {
                len: key.len(),
                min: self.key_bytes_min,
                max: self.key_bytes_max,
            });
        }
        Ok(())
    }

    /// Checks a key's and a value's lengths.
    pub fn check(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_key(key)?;
        if value.len() > self.value_bytes_max {
            return Err(DeviceError::ValueLength {
                len: value.len(),
                max: self.value_bytes_max,
            });
        }
        Ok(())
    }

    /// Rejects limits that cannot work.
    pub fn validate(&self) -> Result<()> {
        if self.key_bytes_min == 0 || self.key_bytes_min > self.key_bytes_max {
            return Err(DeviceError::Config(format!(
                "key length limits [{}, {}] must satisfy 1 <= min <= max",
                self.key_bytes_min, self.key_bytes_max
            )));
        }
        Ok(())
    }
}

/// A key-value device. Object safe: upper layers hold `Arc<dyn Device>`.
///
/// Every operation is asynchronous; each device bounds how many run at once (its queue depth),
/// so callers may issue many operations to many devices concurrently. A failed operation
/// changes nothing.
#[async_trait]
pub trait Device: Send + Sync + 'static {
    /// Stores `value` under `key` according to `mode`. Durable only after [`Device::sync`].
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()>;

    /// Reads `range` of the value under `key`, reporting the value's full length.
    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved>;

    /// [`Device::retrieve`] for a caller that checks the bytes itself (the manager's unit
    /// checksums): a device whose own checksum covers the whole value may read only the blocks
    /// that hold `range` and skip that check. The default reads as `retrieve` does.
    async fn retrieve_part(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.retrieve(key, range).await
    }

    /// Deletes `key`. Returns whether it existed; with `must_exist`, a missing key is
    /// [`DeviceError::KeyNotFound`].
    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool>;

    /// Tells for each key whether it is stored.
    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>>;

    /// Lists keys (and values) with a prefix, in ascending key order, one batch at a time.
    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch>;

    /// Capacity, utilisation and limits.
    async fn info(&self) -> Result<DeviceInfo>;

    /// Durability barrier: every store and delete acknowledged before this call survives a crash
    /// once it returns.
    async fn sync(&self) -> Result<()>;

    /// Reclaims dead space, copying at most about `budget_bytes` of live data. The owner calls
    /// this when the device may spend time writing. Devices without dead space do nothing.
    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats> {
        let _ = budget_bytes;
        Ok(CompactStats::default())
    }

    /// The device's key and value limits.
    fn limits(&self) -> Limits;

    /// Bytes of memory the device keeps for what it stores (its index of keys; a memory
    /// device's values too), by its own estimate ([`crate::memory`]); wrappers pass their
    /// device's on. Walks the index: for reports, not for every request.
    fn memory_bytes(&self) -> u64 {
        0
    }

    /// Whether the device's calls cross the network (a device on another node): an array
    /// reads the copies and shards on its own node's devices first where it may choose.
    /// Wrappers pass their device's on.
    fn remote(&self) -> bool {
        false
    }
}

/// Walks every batch of an iteration and returns all entries.
pub async fn iterate_all(
    dev: &dyn Device,
    prefix: &[u8],
    with_values: bool,
) -> Result<Vec<IterEntry>> {
    let mut out = Vec::new();
    let mut req = IterRequest {
        prefix: prefix.to_vec(),
        start_after: None,
        entries_max: 1024,
        with_values,
    };
    loop {
        let batch = dev.iterate(&req).await?;
        let more = batch.more;
        if let Some(last) = batch.entries.last() {
            req.start_after = Some(last.key.clone());
        }
        out.extend(batch.entries);
        if !more {
            return Ok(out);
        }
    }
}

/// Bounds the operations in flight on one device.
#[derive(Debug)]
pub struct QueueGate {
    sem: Semaphore,
    depth_max: usize,
}

impl QueueGate {
    /// A gate admitting at most `depth_max` operations at once.
    pub fn new(depth_max: usize) -> Self {
        let depth_max = depth_max.max(1);
        QueueGate {
            sem: Semaphore::new(depth_max),
            depth_max,
        }
    }

    /// Waits for a slot; the slot is held until the permit drops.
    pub async fn enter(&self) -> SemaphorePermit<'_> {
        // The semaphore is never closed, so acquire cannot fail.
        self.sem
            .acquire()
            .await
            .expect("queue gate semaphore closed")
    }

    /// The bound.
    pub fn depth_max(&self) -> usize {
        self.depth_max
    }
}

/// Selects the keys of an ordered map for one iteration batch. Shared by the backends that keep
/// an ordered index.
pub(crate) fn iter_range<'a, V>(
    map: &'a std::collections::BTreeMap<Vec<u8>, V>,
    req: &IterRequest,
) -> (Vec<(&'a Vec<u8>, &'a V)>, bool) {
    use std::ops::Bound;
    let lower = match &req.start_after {
        Some(k) if k.as_slice() >= req.prefix.as_slice() => Bound::Excluded(k.clone()),
        _ => Bound::Included(req.prefix.clone()),
    };
    let limit = if req.entries_max == 0 {
        usize::MAX
    } else {
        req.entries_max
    };
    let mut out = Vec::new();
    let mut more = false;
    for (k, v) in map.range((lower, Bound::Unbounded)) {
        if !k.starts_with(&req.prefix) {
            break;
        }
        if out.len() == limit {
            more = true;
            break;
        }
        out.push((k, v));
    }
    (out, more)
}
