//! Scrub while serving: started on request (the admin API), after an unclean start, and on a
//! schedule (`[repair] scrub_interval_s`). Every scrub, offline ones included, leaves its report
//! in the data folder: `scrub-report.json` (the last) and one line per scrub in
//! `scrub-history.jsonl`, so an operator can tell when the array was last verified and what
//! was found.

use crate::background::{RepairStatus, RunKind};
use crate::error::{Result, StoreError};
use crate::identity::write_durably;
use crate::store::{Inner, Store};
use railstore_redundancy::{RepairOptions, RepairProgress, RepairReport};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last scrub's report, in the data folder.
pub(crate) const SCRUB_REPORT_FILE: &str = "scrub-report.json";
/// Every scrub's report, one JSON line each.
const SCRUB_HISTORY_FILE: &str = "scrub-history.jsonl";
/// Lost keys named in a report (the count is always complete).
const LOST_KEYS_SHOWN: usize = 100;

/// What one scrub found and did, as kept in the data folder and shown in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScrubRecord {
    /// Why it ran: `requested`, `scheduled`, `unclean start` or `offline`.
    pub reason: String,
    /// When it started and ended (Unix milliseconds).
    pub started_unix_ms: u64,
    pub finished_unix_ms: u64,
    /// Objects checked, and those that needed a piece rewritten.
    pub objects: u64,
    pub objects_repaired: u64,
    /// Objects that cannot be read back (more pieces lost than their mechanism tolerates).
    pub objects_lost: u64,
    /// The first of them (manager keys, shown as text where printable).
    pub lost_keys: Vec<String>,
    /// Packing sets checked, repaired, reclaimed (every member dead) and lost.
    pub sets: u64,
    pub sets_repaired: u64,
    pub sets_reclaimed: u64,
    pub sets_lost: u64,
    /// Pieces rewritten or deleted, and bytes written.
    pub pieces_repaired: u64,
    pub bytes_written: u64,
    /// Why it stopped, when it did not finish.
    pub error: Option<String>,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl ScrubRecord {
    fn new(reason: &str, started: SystemTime, outcome: &Result<RepairReport>) -> ScrubRecord {
        let r = outcome.as_ref().ok().cloned().unwrap_or_default();
        ScrubRecord {
            reason: reason.to_string(),
            started_unix_ms: unix_ms(started),
            finished_unix_ms: unix_ms(SystemTime::now()),
            objects: r.objects,
            objects_repaired: r.objects_repaired,
            objects_lost: r.objects_lost.len() as u64,
            lost_keys: r
                .objects_lost
                .iter()
                .take(LOST_KEYS_SHOWN)
                .map(|k| railstore_redundancy::show_key(k))
                .collect(),
            sets: r.sets,
            sets_repaired: r.sets_repaired,
            sets_reclaimed: r.sets_reclaimed,
            sets_lost: r.sets_lost,
            pieces_repaired: r.pieces_repaired,
            bytes_written: r.bytes_written,
            error: outcome.as_ref().err().map(|e| e.to_string()),
        }
    }
}

impl Store {
    /// Verifies every object and set, repairs what is wrong and rolls interrupted writes
    /// forward or back (run after an unclean shutdown; safe while serving). Its report goes to
    /// the data folder with `reason`.
    pub(crate) async fn scrub_and_record(
        &self,
        reason: &str,
        options: RepairOptions,
        progress: Arc<RepairProgress>,
    ) -> Result<RepairReport> {
        let started = SystemTime::now();
        let outcome = self
            .inner
            .manager
            .scrub(options, progress)
            .await
            .map_err(StoreError::from);
        if outcome.is_ok() {
            self.scrub_done();
        }
        if let Err(e) = self.record_scrub(&ScrubRecord::new(reason, started, &outcome)) {
            tracing::error!(error = %e, "keeping the scrub's report");
        }
        outcome
    }

    /// Starts a scrub in the background (`reason` goes into its report); a grow's or drain's
    /// move stops for it and resumes after. Refused while a rebuild or another scrub runs.
    pub async fn start_scrub(&self, reason: &str) -> Result<RepairStatus> {
        let _one_at_a_time = self.inner.repair_ops.lock().await;
        self.check_open()?;
        self.stop_move().await;
        self.check_idle()?;
        let options = self.inner.config.repair.options();
        let progress = Arc::new(RepairProgress::default());
        let (store, p, reason) = (self.clone(), progress.clone(), reason.to_string());
        self.start_run(RunKind::Scrub, progress, async move {
            store.scrub_and_record(&reason, options, p).await
        })
    }

    /// The last scrub's report, if any scrub has run on this data folder.
    pub fn last_scrub(&self) -> Option<ScrubRecord> {
        // Memory devices have no data folder of their own.
        self.inner.identity.as_ref()?;
        let path = self.inner.config.data_dir.join(SCRUB_REPORT_FILE);
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    fn record_scrub(&self, rec: &ScrubRecord) -> Result<()> {
        if self.inner.identity.is_none() {
            return Ok(()); // memory devices: no data folder to keep it in
        }
        let dir = &self.inner.config.data_dir;
        let line = serde_json::to_string(rec).expect("a report serialises");
        write_durably(&dir.join(SCRUB_REPORT_FILE), line.as_bytes())?;
        let path = dir.join(SCRUB_HISTORY_FILE);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::io(format!("opening {}", path.display()), e))?;
        writeln!(f, "{line}")
            .and_then(|()| f.sync_data())
            .map_err(|e| StoreError::io(format!("writing {}", path.display()), e))
    }
}

/// Starts a scrub whenever one is due: `interval` after the last one finished (by its report),
/// or after the store opened when no scrub has run. Waits while a rebuild or scrub runs.
pub(crate) async fn scrub_schedule(store: Weak<Inner>, interval: Duration) {
    if interval.is_zero() {
        return;
    }
    let opened = SystemTime::now();
    loop {
        let due = {
            let Some(inner) = store.upgrade() else { return };
            let s = Store { inner };
            // A scrub that did not finish (a shutdown stopped it) does not count.
            let last = s
                .last_scrub()
                .filter(|r| r.error.is_none())
                .map(|r| UNIX_EPOCH + Duration::from_millis(r.finished_unix_ms))
                .filter(|t| *t > UNIX_EPOCH);
            last.unwrap_or(opened) + interval
        };
        let wait = due
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        // Wake at least once a minute: the store may have closed, or a scrub run meanwhile.
        tokio::time::sleep(wait.min(Duration::from_secs(60))).await;
        let Some(inner) = store.upgrade() else { return };
        if inner.closing.load(Ordering::SeqCst) {
            return;
        }
        if SystemTime::now() < due {
            continue;
        }
        let s = Store { inner };
        match s.start_scrub("scheduled").await {
            Ok(_) => {
                tracing::info!("scheduled scrub started");
                s.wait_for_repair().await;
            }
            // A rebuild or a requested scrub runs: try again in a while.
            Err(e) => {
                tracing::info!(reason = %e, "scheduled scrub put off");
                drop(s);
                tokio::time::sleep(Duration::from_secs(60).min(interval)).await;
            }
        }
    }
}
