//! `faulty`: a wrapper that injects failures into any device, driven by a seeded generator.

use crate::api::{
    CompactStats, Device, DeviceInfo, IterBatch, IterEntry, IterRequest, Limits, ReadRange,
    Retrieved, StoreMode,
};
use crate::error::{DeviceError, Result};
use async_trait::async_trait;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to inject. Probabilities are per operation.
#[derive(Debug, Clone, Default)]
pub struct FaultConfig {
    /// Seed of the generator that decides every injection.
    pub seed: u64,
    /// An operation fails with [`DeviceError::Transient`] without reaching the inner device.
    pub transient_error_prob: f64,
    /// A store silently writes the value with one bit flipped.
    pub bit_flip_prob: f64,
    /// An operation is delayed by `latency_spike` first.
    pub latency_spike_prob: f64,
    /// Length of a latency spike.
    pub latency_spike: Duration,
    /// Keep stores and deletes in a volatile cache until `sync`, so that [`FaultyDevice::crash`]
    /// loses exactly what was not synced (a device with a volatile write cache).
    pub volatile_writes: bool,
    /// Crash automatically when this many mutations have reached the inner device (a crash in
    /// the middle of anything, including a sync's flush).
    pub crash_after_inner_writes: Option<u64>,
}

/// The fault-injecting wrapper.
pub struct FaultyDevice {
    inner: Arc<dyn Device>,
    cfg: FaultConfig,
    rng: Mutex<ChaCha8Rng>,
    failed: AtomicBool,
    inner_writes: AtomicU64,
    /// Unsynced mutations when `volatile_writes`: `Some(value)` a store, `None` a delete.
    cache: tokio::sync::Mutex<BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
}

impl FaultyDevice {
    /// `retrieve` (or, with `part`, `retrieve_part`) through the faults.
    async fn read(&self, key: &[u8], range: ReadRange, part: bool) -> Result<Retrieved> {
        self.enter().await?;
        if self.cfg.volatile_writes {
            let cache = self.cache.lock().await;
            match cache.get(key) {
                Some(Some(v)) => {
                    let (s, e) = range.resolve(v.len() as u64)?;
                    return Ok(Retrieved {
                        value: bytes::Bytes::copy_from_slice(&v[s as usize..e as usize]),
                        value_len: v.len() as u64,
                    });
                }
                Some(None) => return Err(DeviceError::KeyNotFound { key: key.to_vec() }),
                None => {}
            }
        }
        if part {
            self.inner.retrieve_part(key, range).await
        } else {
            self.inner.retrieve(key, range).await
        }
    }

    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Device>, cfg: FaultConfig) -> FaultyDevice {
        FaultyDevice {
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(cfg.seed)),
            inner,
            cfg,
            failed: AtomicBool::new(false),
            inner_writes: AtomicU64::new(0),
            cache: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// Fail-stop: every later operation fails with [`DeviceError::Failed`].
    pub fn fail_stop(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    /// Crash: drops every unsynced write held in the volatile cache and fails like
    /// [`FaultyDevice::fail_stop`] until [`FaultyDevice::restart`].
    pub async fn crash(&self) {
        self.failed.store(true, Ordering::SeqCst);
        self.cache.lock().await.clear();
    }

    /// Serves again after a crash or fail-stop, from what the inner device holds.
    pub async fn restart(&self) {
        self.cache.lock().await.clear();
        self.failed.store(false, Ordering::SeqCst);
    }

    /// Whether the device is failed or crashed.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    fn roll(&self, p: f64) -> bool {
        p > 0.0
            && self
                .rng
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .gen_bool(p.min(1.0))
    }

    /// Checks fail-stop, then maybe injects a latency spike or a transient error.
    async fn enter(&self) -> Result<()> {
        if self.is_failed() {
            return Err(DeviceError::Failed {
                reason: "injected failure",
            });
        }
        if self.roll(self.cfg.latency_spike_prob) {
            tokio::time::sleep(self.cfg.latency_spike).await;
        }
        if self.roll(self.cfg.transient_error_prob) {
            return Err(DeviceError::Transient);
        }
        Ok(())
    }

    /// Counts one mutation about to reach the inner device; crashes when the budget is spent.
    async fn inner_write(&self) -> Result<()> {
        let n = self.inner_writes.fetch_add(1, Ordering::SeqCst) + 1;
        if self.cfg.crash_after_inner_writes.is_some_and(|c| n > c) {
            // The caller holding the cache (sync) drops it; otherwise it is empty.
            self.failed.store(true, Ordering::SeqCst);
            return Err(DeviceError::Failed {
                reason: "injected crash",
            });
        }
        Ok(())
    }

    fn maybe_flip(&self, value: &[u8]) -> Option<Vec<u8>> {
        if value.is_empty() || !self.roll(self.cfg.bit_flip_prob) {
            return None;
        }
        let mut v = value.to_vec();
        let bit = self
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .gen_range(0..v.len() * 8);
        v[bit / 8] ^= 1 << (bit % 8);
        Some(v)
    }

    async fn exists_now(
        &self,
        cache: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        key: &[u8],
    ) -> Result<bool> {
        match cache.get(key) {
            Some(op) => Ok(op.is_some()),
            None => Ok(self.inner.exist(&[key]).await?[0]),
        }
    }
}

#[async_trait]
impl Device for FaultyDevice {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.enter().await?;
        let flipped = self.maybe_flip(value);
        let value = flipped.as_deref().unwrap_or(value);
        if self.cfg.volatile_writes {
            self.inner.limits().check(key, value)?;
            let mut cache = self.cache.lock().await;
            mode.check(key, self.exists_now(&cache, key).await?)?;
            cache.insert(key.to_vec(), Some(value.to_vec()));
            return Ok(());
        }
        self.inner_write().await?;
        self.inner.store(key, value, mode).await
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.read(key, range, false).await
    }

    async fn retrieve_part(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.read(key, range, true).await
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.enter().await?;
        if self.cfg.volatile_writes {
            self.inner.limits().check_key(key)?;
            let mut cache = self.cache.lock().await;
            let existed = self.exists_now(&cache, key).await?;
            if !existed && must_exist {
                return Err(DeviceError::KeyNotFound { key: key.to_vec() });
            }
            if existed {
                cache.insert(key.to_vec(), None);
            }
            return Ok(existed);
        }
        self.inner_write().await?;
        self.inner.delete(key, must_exist).await
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        self.enter().await?;
        let mut r = self.inner.exist(keys).await?;
        if self.cfg.volatile_writes {
            let cache = self.cache.lock().await;
            for (k, e) in keys.iter().zip(r.iter_mut()) {
                if let Some(op) = cache.get(*k) {
                    *e = op.is_some();
                }
            }
        }
        Ok(r)
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        self.enter().await?;
        if !self.cfg.volatile_writes {
            return self.inner.iterate(req).await;
        }
        let cache = self.cache.lock().await;
        let limit = if req.entries_max == 0 {
            usize::MAX
        } else {
            req.entries_max
        };
        let mut req = req.clone();
        loop {
            let inner = self.inner.iterate(&req).await?;
            // Merge the cache over the key range this inner batch covers.
            let upper = if inner.more {
                inner.entries.last().map(|e| e.key.clone())
            } else {
                None
            };
            let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = inner
                .entries
                .into_iter()
                .map(|e| (e.key, e.value))
                .collect();
            for (k, op) in cache.iter() {
                let after_start = req.start_after.as_ref().is_none_or(|s| k > s);
                let below_upper = upper.as_ref().is_none_or(|u| k <= u);
                if !k.starts_with(&req.prefix) || !after_start || !below_upper {
                    continue;
                }
                match op {
                    Some(v) => {
                        merged.insert(k.clone(), req.with_values.then(|| v.clone()));
                    }
                    None => {
                        merged.remove(k);
                    }
                }
            }
            if merged.is_empty() && inner.more {
                // Everything in this batch was deleted in the cache: look further.
                req.start_after = upper;
                continue;
            }
            let more = inner.more || merged.len() > limit;
            let entries = merged
                .into_iter()
                .take(limit)
                .map(|(key, value)| IterEntry { key, value })
                .collect();
            return Ok(IterBatch { entries, more });
        }
    }

    async fn info(&self) -> Result<DeviceInfo> {
        self.enter().await?;
        let mut info = self.inner.info().await?;
        if self.cfg.volatile_writes {
            let cache = self.cache.lock().await;
            for (k, op) in cache.iter() {
                match (op.is_some(), self.inner.exist(&[k]).await?[0]) {
                    (true, false) => info.key_count += 1,
                    (false, true) => info.key_count -= 1,
                    _ => {}
                }
            }
        }
        Ok(info)
    }

    async fn sync(&self) -> Result<()> {
        self.enter().await?;
        if self.cfg.volatile_writes {
            let mut cache = self.cache.lock().await;
            while let Some((k, op)) = cache.pop_first() {
                if let Err(e) = self.inner_write().await {
                    cache.clear();
                    return Err(e);
                }
                let r = match &op {
                    Some(v) => self.inner.store(&k, v, StoreMode::Upsert).await,
                    None => self.inner.delete(&k, false).await.map(|_| ()),
                };
                if let Err(e) = r {
                    cache.insert(k, op);
                    return Err(e);
                }
            }
        }
        self.inner.sync().await
    }

    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats> {
        self.enter().await?;
        self.inner.compact(budget_bytes).await
    }

    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }

    fn remote(&self) -> bool {
        self.inner.remote()
    }

    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}
