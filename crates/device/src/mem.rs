//! `mem`: an in-memory device for tests and as the data keeper inside `sim`.

use crate::api::{
    iter_range, Device, DeviceInfo, IterBatch, IterEntry, IterRequest, Limits, QueueGate,
    ReadRange, Retrieved, StoreMode,
};
use crate::error::{DeviceError, Result};
use crate::fasthash::FastMap;
use async_trait::async_trait;
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
    /// Most operations in flight.
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
    map: FastMap<Vec<u8>, Vec<u8>>,
    order: BTreeMap<Vec<u8>, ()>,
    used_bytes: u64,
}

/// A device that keeps everything in memory. `sync` is a no-op: nothing survives a drop.
pub struct MemDevice {
    config: MemConfig,
    gate: QueueGate,
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
            gate: QueueGate::new(config.queue_depth_max),
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
        let _slot = self.gate.enter().await;
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
            Some(v) => {
                v.clear();
                v.extend_from_slice(value);
            }
            None => {
                st.map.insert(key.to_vec(), value.to_vec());
                st.order.insert(key.to_vec(), ());
            }
        }
        Ok(())
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.config.limits.check_key(key)?;
        let _slot = self.gate.enter().await;
        let st = self.state();
        let v = st
            .map
            .get(key)
            .ok_or_else(|| DeviceError::KeyNotFound { key: key.to_vec() })?;
        let (start, end) = range.resolve(v.len() as u64)?;
        Ok(Retrieved {
            value: v[start as usize..end as usize].to_vec(),
            value_len: v.len() as u64,
        })
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.config.limits.check_key(key)?;
        let _slot = self.gate.enter().await;
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
        let _slot = self.gate.enter().await;
        let st = self.state();
        Ok(keys.iter().map(|k| st.map.contains_key(*k)).collect())
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        let _slot = self.gate.enter().await;
        let st = self.state();
        let (sel, more) = iter_range(&st.order, req);
        let entries = sel
            .into_iter()
            .map(|(k, ())| IterEntry {
                key: k.clone(),
                value: req.with_values.then(|| st.map[k].clone()),
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
            queue_depth_max: self.gate.depth_max(),
        })
    }

    async fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn limits(&self) -> Limits {
        self.config.limits
    }
}
