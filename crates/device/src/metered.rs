//! `metered`: counts operations and bytes per kind and records latency histograms, the raw
//! material for I/O-amplification figures.

use crate::api::{
    CompactStats, Device, DeviceInfo, IterBatch, IterRequest, Limits, ReadRange, Retrieved,
    StoreMode,
};
use crate::error::Result;
use async_trait::async_trait;
use hdrhistogram::Histogram;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// Kinds of operations counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `store`.
    Store,
    /// `retrieve`.
    Retrieve,
    /// `delete`.
    Delete,
    /// `exist`.
    Exist,
    /// `iterate`.
    Iterate,
    /// `sync`.
    Sync,
    /// `compact`.
    Compact,
}

impl OpKind {
    /// Every kind, in a fixed order.
    pub const ALL: [OpKind; 7] = [
        OpKind::Store,
        OpKind::Retrieve,
        OpKind::Delete,
        OpKind::Exist,
        OpKind::Iterate,
        OpKind::Sync,
        OpKind::Compact,
    ];
}

/// Counters and latencies of one kind of operation.
#[derive(Debug, Clone)]
pub struct OpStats {
    /// Which operations.
    pub kind: OpKind,
    /// Operations completed (successful or not).
    pub ops: u64,
    /// Operations that returned an error.
    pub errors: u64,
    /// Key and value bytes sent to the device.
    pub bytes_in: u64,
    /// Value bytes returned by the device.
    pub bytes_out: u64,
    /// Latency in nanoseconds.
    pub latency_ns: Histogram<u64>,
}

impl OpStats {
    fn new(kind: OpKind) -> OpStats {
        OpStats {
            kind,
            ops: 0,
            errors: 0,
            bytes_in: 0,
            bytes_out: 0,
            // 1 ns .. 1 h at 3 significant digits.
            latency_ns: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("histogram bounds"),
        }
    }
}

/// The metering wrapper.
pub struct MeteredDevice {
    inner: Arc<dyn Device>,
    stats: Mutex<Vec<OpStats>>,
}

impl MeteredDevice {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Device>) -> MeteredDevice {
        MeteredDevice {
            inner,
            stats: Mutex::new(OpKind::ALL.iter().map(|&k| OpStats::new(k)).collect()),
        }
    }

    /// A copy of the counters, one entry per kind in [`OpKind::ALL`] order.
    pub fn snapshot(&self) -> Vec<OpStats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Counters of one kind.
    pub fn stats(&self, kind: OpKind) -> OpStats {
        self.snapshot()
            .into_iter()
            .find(|s| s.kind == kind)
            .expect("every kind is counted")
    }

    /// Zeroes every counter.
    pub fn reset(&self) {
        for s in self
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
        {
            *s = OpStats::new(s.kind);
        }
    }

    fn record<T>(
        &self,
        kind: OpKind,
        start: Instant,
        bytes_in: u64,
        r: &Result<T>,
        bytes_out: impl Fn(&T) -> u64,
    ) {
        let ns = start.elapsed().as_nanos().clamp(1, u64::MAX as u128) as u64;
        let mut all = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut all[OpKind::ALL
            .iter()
            .position(|&k| k == kind)
            .expect("kind listed")];
        s.ops += 1;
        s.bytes_in += bytes_in;
        match r {
            Ok(v) => s.bytes_out += bytes_out(v),
            Err(_) => s.errors += 1,
        }
        s.latency_ns.saturating_record(ns);
    }
}

#[async_trait]
impl Device for MeteredDevice {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        let t = Instant::now();
        let r = self.inner.store(key, value, mode).await;
        self.record(
            OpKind::Store,
            t,
            (key.len() + value.len()) as u64,
            &r,
            |_| 0,
        );
        r
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        let t = Instant::now();
        let r = self.inner.retrieve(key, range).await;
        self.record(OpKind::Retrieve, t, key.len() as u64, &r, |v| {
            v.value.len() as u64
        });
        r
    }

    async fn retrieve_part(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        let t = Instant::now();
        let r = self.inner.retrieve_part(key, range).await;
        self.record(OpKind::Retrieve, t, key.len() as u64, &r, |v| {
            v.value.len() as u64
        });
        r
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        let t = Instant::now();
        let r = self.inner.delete(key, must_exist).await;
        self.record(OpKind::Delete, t, key.len() as u64, &r, |_| 0);
        r
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        let t = Instant::now();
        let r = self.inner.exist(keys).await;
        self.record(
            OpKind::Exist,
            t,
            keys.iter().map(|k| k.len() as u64).sum(),
            &r,
            |_| 0,
        );
        r
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        let t = Instant::now();
        let r = self.inner.iterate(req).await;
        self.record(OpKind::Iterate, t, req.prefix.len() as u64, &r, |b| {
            b.entries
                .iter()
                .map(|e| (e.key.len() + e.value.as_ref().map_or(0, |v| v.len())) as u64)
                .sum()
        });
        r
    }

    async fn info(&self) -> Result<DeviceInfo> {
        self.inner.info().await
    }

    async fn sync(&self) -> Result<()> {
        let t = Instant::now();
        let r = self.inner.sync().await;
        self.record(OpKind::Sync, t, 0, &r, |_| 0);
        r
    }

    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats> {
        let t = Instant::now();
        let r = self.inner.compact(budget_bytes).await;
        self.record(OpKind::Compact, t, 0, &r, |s| s.bytes_copied);
        r
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
