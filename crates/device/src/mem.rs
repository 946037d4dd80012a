//! `mem`: an in-memory device for tests and as the data keeper inside `sim`.

use crate::api::{
    iter_range, Device, DeviceInfo, IterBatch, IterEntry, IterRequest, Limits, ReadRange,
    Retrieved, StoreMode,
};
use crate::error::{DeviceError, Result};
use crate::fasthash::{FastMap, MapKey};
use async_trait::async_trait;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Per-entry bookkeeping charged against capacity on top of key and value bytes.
const ENTRY_OVERHEAD_BYTES: u64 = 32;

/// Settings of a [`MemDevice`].
#[derive(Debug, Clone)]
pub struct MemConfig {
    /// Bytes of keys, values and per-entry overhead the device may hold.
    pub capacity_bytes: u64,
    /// Key and value limits.
    pub limits: Limits,
    /// Most operations in flight, as reported by `info` (see [`MemDevice`]).
    pub queue_depth_max: usize,
}

impl Default for MemConfig {
    fn default() -> Self {
        MemConfig {
            capacity_bytes: 1 << 30,
            limits: Limits::default(),
            queue_depth_max: 256,
        }
    }
}

/// Values in a hash map for fast point operations; the keys again in an ordered map for
/// iteration.
#[derive(Default)]
struct MemState {
    map: FastMap<MapKey, Bytes>,
    order: BTreeMap<Vec<u8>, ()>,
    used_bytes: u64,
}

/// A device that keeps everything in memory. `sync` is a no-op: nothing survives a drop.
///
/// Every operation finishes within the poll that starts it, so none ever waits in a queue and
/// the device needs no queue-depth gate (`queue_depth_max` is only reported): a semaphore here
/// cost about 5 % of a simulated read (`sim` wraps this device). Each operation still takes a
/// unit of tokio's cooperative budget, as the semaphore did, so a task looping over it yields.
pub struct MemDevice {
    config: MemConfig,
    state: Mutex<MemState>,
}

fn entry_bytes(key: &[u8], value_len: usize) -> u64 {
    key.len() as u64 + value_len as u64 + ENTRY_OVERHEAD_BYTES
}

impl MemDevice {
    /// A new empty device.
    pub fn new(config: MemConfig) -> Result<Self> {
        config.limits.validate()?;
        Ok(MemDevice {
            config,
            state: Mutex::new(MemState::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemState> {
        // A panic while holding the lock leaves the map consistent (every mutation is one call).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Device for MemDevice {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.config.limits.check(key, value)?;
        tokio::task::consume_budget().await;
        let mut st = self.state();
        let old = st.map.get(key).map(|v| entry_bytes(key, v.len()));
        mode.check(key, old.is_some())?;
        let new = entry_bytes(key, value.len());
        let used_after = st.used_bytes - old.unwrap_or(0) + new;
        if used_after > self.config.capacity_bytes {
            return Err(DeviceError::Capacity {
                needed: new,
                available: self.config.capacity_bytes.saturating_sub(st.used_bytes),
            });
        }
        st.used_bytes = used_after;
        match st.map.get_mut(key) {
            Some(v) => *v = Bytes::copy_from_slice(value),
            None => {
                st.map
                    .insert(MapKey::new(key), Bytes::copy_from_slice(value));
                st.order.insert(key.to_vec(), ());
            }
        }
        Ok(())
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.config.limits.check_key(key)?;
        tokio::task::consume_budget().await;
        let st = self.state();
        let v = st
            .map
            .get(key)
            .ok_or_else(|| DeviceError::KeyNotFound { key: key.to_vec() })?;
        let (start, end) = range.resolve(v.len() as u64)?;
        Ok(Retrieved {
            value: v.slice(start as usize..end as usize),
            value_len: v.len() as u64,
        })
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.config.limits.check_key(key)?;
        tokio::task::consume_budget().await;
        let mut st = self.state();
        match st.map.remove(key) {
            Some(v) => {
                st.order.remove(key);
                st.used_bytes -= entry_bytes(key, v.len());
                Ok(true)
            }
            None if must_exist => Err(DeviceError::KeyNotFound { key: key.to_vec() }),
            None => Ok(false),
        }
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        for k in keys {
            self.config.limits.check_key(k)?;
        }
        tokio::task::consume_budget().await;
        let st = self.state();
        Ok(keys.iter().map(|k| st.map.contains_key(*k)).collect())
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        tokio::task::consume_budget().await;
        let st = self.state();
        let (sel, more) = iter_range(&st.order, req);
        let entries = sel
            .into_iter()
            .map(|(k, ())| IterEntry {
                key: k.clone(),
                value: req.with_values.then(|| st.map[k.as_slice()].to_vec()),
            })
            .collect();
        Ok(IterBatch { entries, more })
    }

    async fn info(&self) -> Result<DeviceInfo> {
        let st = self.state();
        Ok(DeviceInfo {
            capacity_bytes: self.config.capacity_bytes,
            used_bytes: st.used_bytes,
            live_bytes: st.used_bytes,
            key_count: st.map.len() as u64,
            limits: self.config.limits,
            optimal_value_bytes: 4096,
            queue_depth_max: self.config.queue_depth_max.max(1),
        })
    }

    async fn sync(&self) -> Result<()> {
        Ok(())
    }

    /// Keys and values, in the hash map and the ordered key list.
    fn memory_bytes(&self) -> u64 {
        use crate::memory::{btree_entry, hash_entry, heap};
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let slot = std::mem::size_of::<MapKey>() + std::mem::size_of::<Bytes>();
        st.order
            .keys()
            .map(|k| {
                let value = st.map.get(k.as_slice()).map_or(0, |v| v.len());
                let boxed = if k.len() > crate::fasthash::INLINE_KEY_BYTES {
                    heap(k.len())
                } else {
                    0
                };
                hash_entry(slot) + boxed + heap(value) + btree_entry(24) + heap(k.len())
            })
            .sum()
    }

    fn limits(&self) -> Limits {
        self.config.limits
    }
}
