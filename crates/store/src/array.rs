//! The one way to put an array together: devices → rails (its journal replayed) → manager →
//! read plan. `Store::open`, every offline command, the benchmarks and the tests all go through
//! [`assemble`], so nothing ever acts on a view of the devices that `serve` would not see: a
//! buffered write or delete a crash left in the journal is back before anything is read.
//!
//! Rails is always there. With separation off it passes operations straight through, but it
//! still replays a journal an earlier run with separation on left behind.

use crate::error::{Result, StoreError};
use railstore_device::Device;
use railstore_rails::{JournalRecovery, Rails, RailsConfig, ScheduleConfig};
use railstore_redundancy::{Manager, ManagerConfig};
use std::sync::Arc;
use std::time::Duration;

/// An assembled array: what the layers above use.
#[derive(Clone)]
pub struct Array {
    /// Separation (or the pass-through) over the raw devices.
    pub rails: Arc<Rails>,
    /// The reliability manager over rails' devices, reading where rails' plan says.
    pub manager: Manager,
    /// What the journal replay found and did.
    pub journal: JournalRecovery,
}

/// Rails' configuration when separation is off. Its schedule is never consulted (every device
/// reads and writes); it only has to be valid for `colours` (at least 2, for a window of 1).
pub fn pass_through(colours: usize) -> RailsConfig {
    RailsConfig {
        separation: false,
        ..RailsConfig::new(ScheduleConfig {
            colours: colours.max(2),
            frame: Duration::from_secs(1),
            window_min: 1,
            window_max: 1,
            guard: Duration::ZERO,
        })
    }
}

/// Assembles `raw` (in array order) into an array: wraps them in rails with `rails` (use
/// [`pass_through`] for no separation), marks the devices in `failed` failed before anything
/// touches them (a degraded start: they are neither read nor replayed onto), drops the journal
/// records of `replacing` (an empty device a rebuild fills), replays the journal, opens the manager with `manager` and gives it rails' read plan. Refuses a rails
/// configuration whose colours disagree with the manager's layout.
pub async fn assemble(
    raw: Vec<Arc<dyn Device>>,
    rails: RailsConfig,
    manager: ManagerConfig,
    failed: &[usize],
    replacing: Option<usize>,
) -> Result<Array> {
    let n = raw.len();
    let layout = manager.layout(n)?;
    if rails.separation && rails.schedule.colours != layout.width() {
        return Err(StoreError::Config(format!(
            "separation has {} colours; the layout's groups are {} devices wide",
            rails.schedule.colours,
            layout.width()
        )));
    }
    let colour_of = (0..n).map(|d| layout.colour_of(d)).collect();
    let (rails, wrapped) = Rails::new(rails, raw, colour_of)
        .map_err(|e| StoreError::Config(format!("separation: {e}")))?;
    for &d in failed {
        rails.mark_failed(d);
    }
    if let Some(d) = replacing {
        rails.replacing(d);
    }
    let journal = rails.recover().await.map_err(|source| StoreError::Device {
        what: "replaying the separation journal",
        source,
    })?;
    if journal.records_found > 0 {
        tracing::info!(
            found = journal.records_found,
            replayed = journal.replayed,
            stale = journal.stale,
            corrupt = journal.corrupt,
            "separation journal replayed"
        );
    }
    let manager = Manager::open(wrapped, manager).await?;
    for &d in failed.iter().chain(&journal.failed_devices) {
        manager.devices().mark_failed(d);
    }
    manager.devices().set_read_plan(rails.read_plan());
    Ok(Array {
        rails,
        manager,
        journal,
    })
}
