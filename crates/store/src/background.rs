//! What the store runs in the background while it serves, one at a time: a rebuild of a
//! replaced device (`online.rs`), a scrub (`scrubber.rs`) or a grow's or drain's move
//! (`grow.rs`; a rebuild or scrub stops it, and it resumes after). Their progress is readable while
//! they run (`/status`, the admin API, `railstore repair status`), and a shutdown stops them.

use crate::error::{Result, StoreError};
use crate::store::Store;
use railstore_redundancy::{Move, RepairProgress, RepairReport};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a background run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunKind {
    /// Rebuilds this device.
    Rebuild(usize),
    /// Verifies every object and set and repairs what is wrong.
    Scrub,
    /// Moves the objects whose group changed between the layout's last two epochs.
    Move(Move),
}

impl std::fmt::Display for RunKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunKind::Rebuild(d) => write!(f, "a rebuild of device {d}"),
            RunKind::Scrub => f.write_str("a scrub"),
            RunKind::Move(Move::Grow) => f.write_str("a grow's move"),
            RunKind::Move(Move::Drain) => f.write_str("a drain's move"),
        }
    }
}

/// A rebuild or scrub started while serving.
pub(crate) struct RepairRun {
    kind: RunKind,
    started: Instant,
    started_unix_ms: u64,
    progress: Arc<RepairProgress>,
    /// Set when it ended: its report, or why it stopped.
    outcome: Option<std::result::Result<RepairReport, String>>,
    finished_after: Option<Duration>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// A rebuild or scrub as `/status`, the admin API and `railstore repair status` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepairStatus {
    /// Still running (or, with `queued`, about to).
    pub running: bool,
    /// A recorded grow's or drain's move not started yet: it starts once the index has
    /// loaded and no rebuild or scrub runs.
    #[serde(default)]
    pub queued: bool,
    /// What it does: `rebuild`, `scrub`, or the move of a `grow` or a `drain`.
    pub kind: String,
    /// The device rebuilt (none for a scrub).
    pub device: Option<usize>,
    /// When it started (Unix milliseconds).
    pub started_unix_ms: u64,
    /// Seconds it has run (or ran).
    pub elapsed_s: f64,
    /// Device keys listed so far (the walk before the objects are known).
    pub keys_listed: u64,
    /// Objects and packing sets to check; 0 while the walk lists them.
    pub items_total: u64,
    /// Objects and sets checked.
    pub items_done: u64,
    /// Bytes written so far.
    pub bytes_done: u64,
    /// Bytes still to write, estimated from the bytes per item so far.
    pub bytes_to_do: u64,
    /// Bytes written per second.
    pub bytes_per_s: f64,
    /// Objects and sets checked per second.
    pub items_per_s: f64,
    /// Seconds left at the rate so far, once it can be told.
    pub eta_s: Option<f64>,
    /// Objects that could not be rebuilt or read back (lost beyond the tolerance), once
    /// finished.
    pub objects_lost: u64,
    /// Why it stopped, when it did not finish.
    pub error: Option<String>,
}

impl RepairRun {
    fn status(&self) -> RepairStatus {
        let p = &self.progress;
        let elapsed = self
            .finished_after
            .unwrap_or_else(|| self.started.elapsed())
            .as_secs_f64();
        let items_total = p.items_total.load(Ordering::Relaxed);
        let items_done = p.items_done.load(Ordering::Relaxed);
        let bytes_done = p.bytes_written.load(Ordering::Relaxed);
        let left = items_total.saturating_sub(items_done);
        let per_item = if items_done > 0 {
            bytes_done as f64 / items_done as f64
        } else {
            0.0
        };
        let items_per_s = if elapsed > 0.0 {
            items_done as f64 / elapsed
        } else {
            0.0
        };
        let running = self.outcome.is_none();
        RepairStatus {
            running,
            queued: false,
            kind: match self.kind {
                RunKind::Rebuild(_) => "rebuild",
                RunKind::Scrub => "scrub",
                RunKind::Move(Move::Grow) => "grow",
                RunKind::Move(Move::Drain) => "drain",
            }
            .into(),
            device: match self.kind {
                RunKind::Rebuild(d) => Some(d),
                RunKind::Scrub | RunKind::Move(_) => None,
            },
            started_unix_ms: self.started_unix_ms,
            elapsed_s: elapsed,
            keys_listed: p.keys_listed.load(Ordering::Relaxed),
            items_total,
            items_done,
            bytes_done,
            bytes_to_do: (left as f64 * per_item) as u64,
            bytes_per_s: if elapsed > 0.0 {
                bytes_done as f64 / elapsed
            } else {
                0.0
            },
            items_per_s,
            eta_s: (running && items_total > 0 && items_per_s > 0.0)
                .then(|| left as f64 / items_per_s),
            objects_lost: match &self.outcome {
                Some(Ok(r)) => r.objects_lost.len() as u64,
                _ => 0,
            },
            error: match &self.outcome {
                Some(Err(e)) => Some(e.clone()),
                _ => None,
            },
        }
    }
}

impl Store {
    /// The rebuild or scrub running, or the last one since the store opened.
    /// Before anything has run, a recorded move shows as queued: a client that asks at once
    /// after a start (the index still loading) learns that it will run.
    pub fn repair_status(&self) -> Option<RepairStatus> {
        let last = self
            .inner
            .repair
            .lock()
            .unwrap()
            .as_ref()
            .map(|r| r.status());
        last.or_else(|| self.queued_move())
    }

    fn queued_move(&self) -> Option<RepairStatus> {
        if self.inner.closing.load(Ordering::SeqCst) {
            return None;
        }
        let (direction, _) = self.inner.manager.moving()?;
        Some(RepairStatus {
            running: true,
            queued: true,
            kind: match direction {
                Move::Grow => "grow",
                Move::Drain => "drain",
            }
            .into(),
            device: None,
            started_unix_ms: 0,
            elapsed_s: 0.0,
            keys_listed: 0,
            items_total: 0,
            items_done: 0,
            bytes_done: 0,
            bytes_to_do: 0,
            bytes_per_s: 0.0,
            items_per_s: 0.0,
            eta_s: None,
            objects_lost: 0,
            error: None,
        })
    }

    /// Waits until no rebuild or scrub runs; returns the last one's status.
    pub async fn wait_for_repair(&self) -> Option<RepairStatus> {
        loop {
            match self.repair_status() {
                Some(r) if r.running => tokio::time::sleep(Duration::from_millis(20)).await,
                last => return last,
            }
        }
    }

    /// Stops what runs (at shutdown): a rebuilt device stays `rebuilding`, so the next start
    /// rebuilds it again; a scrub is due again.
    pub(crate) async fn stop_repair(&self) {
        let task = {
            let mut run = self.inner.repair.lock().unwrap();
            run.as_mut().and_then(|r| {
                r.progress.cancel.store(true, Ordering::SeqCst);
                r.task.take()
            })
        };
        if let Some(t) = task {
            let _ = t.await;
        }
    }

    /// A rebuild or scrub goes before a move (they restore redundancy and trust; a move only
    /// spreads objects over more devices or fewer): stops a grow's or drain's move that runs,
    /// which the move schedule starts again once nothing else runs. Called with `repair_ops`
    /// held.
    pub(crate) async fn stop_move(&self) {
        let task = {
            let mut run = self.inner.repair.lock().unwrap();
            run.as_mut()
                .filter(|r| r.outcome.is_none() && matches!(r.kind, RunKind::Move(_)))
                .and_then(|r| {
                    r.progress.cancel.store(true, Ordering::SeqCst);
                    r.task.take()
                })
        };
        if let Some(t) = task {
            tracing::info!("the move stops for a rebuild or scrub; it resumes after it");
            let _ = t.await;
        }
    }

    /// Refuses when a rebuild or scrub runs.
    pub(crate) fn check_idle(&self) -> Result<()> {
        match self.inner.repair.lock().unwrap().as_ref() {
            Some(r) if r.outcome.is_none() => Err(StoreError::Conflict(format!(
                "{} is running; one at a time",
                r.kind
            ))),
            _ => Ok(()),
        }
    }

    /// Runs `work` in the background as the store's one run, with `progress` shown while it
    /// runs. Refused when another runs.
    pub(crate) fn start_run<F>(
        &self,
        kind: RunKind,
        progress: Arc<RepairProgress>,
        work: F,
    ) -> Result<RepairStatus>
    where
        F: Future<Output = Result<RepairReport>> + Send + 'static,
    {
        let mut run = self.inner.repair.lock().unwrap();
        if let Some(r) = run.as_ref().filter(|r| r.outcome.is_none()) {
            return Err(StoreError::Conflict(format!(
                "{} is running; one at a time",
                r.kind
            )));
        }
        let store = self.clone();
        let task = tokio::spawn(async move {
            let outcome = work.await;
            match (&outcome, kind) {
                (Ok(r), _) => tracing::info!(
                    run = %kind,
                    objects = r.objects,
                    repaired = r.objects_repaired,
                    lost = r.objects_lost.len(),
                    bytes = r.bytes_written,
                    secs = r.elapsed.as_secs_f64(),
                    "done while serving"
                ),
                (Err(e), _) => tracing::warn!(run = %kind, error = %e, "stopped"),
            }
            if let Some(r) = store.inner.repair.lock().unwrap().as_mut() {
                r.finished_after = Some(r.started.elapsed());
                r.outcome = Some(outcome.map_err(|e| e.to_string()));
            }
        });
        *run = Some(RepairRun {
            kind,
            started: Instant::now(),
            started_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |t| t.as_millis() as u64),
            progress,
            outcome: None,
            finished_after: None,
            task: Some(task),
        });
        Ok(run.as_ref().expect("just set").status())
    }
}
