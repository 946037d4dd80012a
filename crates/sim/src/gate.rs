//! The gate: the outermost wrapper of every device the store sees. It counts device
//! operations so that a crash or a fail-stop can land at an exact point of a step (memory
//! devices answer at once, so virtual time alone would put most of a step in one instant),
//! freezes everything once the process has "crashed", and carries the harness-side mutation
//! that makes `sync` lie.

use async_trait::async_trait;
use railstore_device::{
    CompactStats, Device, DeviceInfo, FaultyDevice, IterBatch, IterRequest, Limits, ReadRange,
    Result, Retrieved, StoreMode,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// State shared by the gates of one process incarnation.
pub(crate) struct GateShared {
    ops: AtomicU64,
    trip_at: AtomicU64,
    tripped: AtomicBool,
    notify: Notify,
    fail: Mutex<Option<(u64, Vec<Arc<FaultyDevice>>)>>,
    /// Mutation `LyingSync`: syncs answer success without flushing while `lie_now` is set.
    lying: bool,
    lie_now: AtomicBool,
}

impl GateShared {
    pub(crate) fn new(lying: bool) -> Arc<GateShared> {
        Arc::new(GateShared {
            ops: AtomicU64::new(0),
            trip_at: AtomicU64::new(u64::MAX),
            tripped: AtomicBool::new(false),
            notify: Notify::new(),
            fail: Mutex::new(None),
            lying,
            lie_now: AtomicBool::new(false),
        })
    }

    /// Device operations so far.
    pub(crate) fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }

    /// The process crashes before the `after`-th device operation from now.
    pub(crate) fn arm_crash(&self, after: u64) {
        let at = self.ops().saturating_add(after.max(1));
        self.trip_at.store(at, Ordering::SeqCst);
    }

    /// No crash armed any more.
    pub(crate) fn disarm(&self) {
        self.trip_at.store(u64::MAX, Ordering::SeqCst);
    }

    /// `devices` fail-stop before the `after`-th device operation from now.
    pub(crate) fn arm_fail(&self, after: u64, devices: Vec<Arc<FaultyDevice>>) {
        let at = self.ops().saturating_add(after.max(1));
        *self.fail.lock().unwrap() = Some((at, devices));
    }

    /// Fires a fail-stop still armed (the step ended before its point).
    pub(crate) fn fire_fail_now(&self) -> bool {
        match self.fail.lock().unwrap().take() {
            Some((_, devices)) => {
                for d in devices {
                    d.fail_stop();
                }
                true
            }
            None => false,
        }
    }

    /// The process crashes now: every device operation from here on waits forever.
    pub(crate) fn trip(&self) {
        self.tripped.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Whether the process has crashed.
    pub(crate) fn tripped(&self) -> bool {
        self.tripped.load(Ordering::SeqCst)
    }

    /// Waits until the process crashes.
    pub(crate) async fn wait_tripped(&self) {
        loop {
            if self.tripped() {
                return;
            }
            self.notify.notified().await;
        }
    }

    /// Sets whether syncs lie now (only with the `LyingSync` mutation).
    pub(crate) fn set_lying(&self, on: bool) {
        self.lie_now.store(self.lying && on, Ordering::SeqCst);
    }

    async fn enter(&self) {
        if self.tripped() {
            std::future::pending::<()>().await;
        }
        let n = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= self.trip_at.load(Ordering::SeqCst) {
            self.trip();
            std::future::pending::<()>().await;
        }
        let due = {
            let mut f = self.fail.lock().unwrap();
            match &*f {
                Some((at, _)) if n >= *at => f.take(),
                _ => None,
            }
        };
        if let Some((_, devices)) = due {
            for d in devices {
                d.fail_stop();
            }
        }
    }
}

/// One device behind the gate.
pub(crate) struct Gate {
    inner: Arc<dyn Device>,
    shared: Arc<GateShared>,
}

impl Gate {
    pub(crate) fn new(inner: Arc<dyn Device>, shared: Arc<GateShared>) -> Gate {
        Gate { inner, shared }
    }
}

#[async_trait]
impl Device for Gate {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.shared.enter().await;
        self.inner.store(key, value, mode).await
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.shared.enter().await;
        self.inner.retrieve(key, range).await
    }

    async fn retrieve_part(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.shared.enter().await;
        self.inner.retrieve_part(key, range).await
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.shared.enter().await;
        self.inner.delete(key, must_exist).await
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        self.shared.enter().await;
        self.inner.exist(keys).await
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        self.shared.enter().await;
        self.inner.iterate(req).await
    }

    async fn info(&self) -> Result<DeviceInfo> {
        self.inner.info().await
    }

    async fn sync(&self) -> Result<()> {
        self.shared.enter().await;
        if self.shared.lie_now.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.inner.sync().await
    }

    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats> {
        self.shared.enter().await;
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
