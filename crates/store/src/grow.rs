//! Growing and draining the array (docs/admin.md, "Growing and draining").
//!
//! A grow adds devices, a multiple of the group width, as a new layout epoch with groups of
//! their own (placement's `Layout::grown`); a drain takes the last epoch's devices out again.
//! Both are recorded with the server stopped (`railstore grow`, `railstore drain`) or while it
//! serves (`Store::grow_online`, `Store::drain_online`: rails and the manager take the change
//! in place), and the objects whose group changed move while `serve` serves, as the store's one background run, throttled like a
//! rebuild and shown in `/status` (`repair.kind`: `grow` or `drain`). The manager finds every
//! object under the old or the new epoch until the move is done (redundancy's `relocate.rs`).
//!
//! What the data folder records, and in what order (a crash anywhere leaves the array as it
//! was before the command, or with the command done):
//! - grow: the added devices are made and stamped with the array's identity, `array.json`
//!   names them, the `moving` file says `grow E`, then the layout file gains its `grow` line
//!   (the commit); online, the devices join rails and the manager after it. An open drops devices `array.json` names beyond the layout, and ignores a
//!   `moving` file whose epoch count is not the layout's.
//! - drain: the `moving` file says `drain E`; nothing else changes until the move is done.
//! - the end of a grow's move removes the `moving` file. The end of a drain's move is kept in
//!   memory, and the next clean shutdown (after its last flush and sync, so no journal record
//!   on the drained devices is still needed) writes the layout without the last epoch and
//!   forgets the drained devices, then removes the `moving` file. After a crash instead, the
//!   next start runs the drain's move again (finding nothing left) and so on.

use crate::background::RunKind;
use crate::config::{DeviceKind, StoreConfig};
use crate::devices::{check_empty, device_path, open_device, Opened};
use crate::error::{Result, StoreError};
use crate::identity::{write_durably, ArrayIdentity};
use crate::open::{lock_data_dir, remove_durably, LAYOUT_FILE};
use crate::store::{Inner, Store, CLEAN_MARKER};
use crate::RepairStatus;
use railstore_device::Device;
use railstore_placement::Layout;
use railstore_redundancy::{Move, RedundancyError, RepairOptions, RepairProgress, RepairReport};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The data folder's record of a move in progress: `grow E` or `drain E`, E the number of
/// epochs of the layout it belongs to.
const MOVING_FILE: &str = "moving";

/// Why a move stopped that did not fail (`Store::stop_move`, or the shutdown).
const MOVE_STOPPED: &str = "stopped by the shutdown or for a rebuild or scrub; it resumes after";

/// What [`Store::grow_offline`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrowReport {
    /// Devices before and after.
    pub devices_before: usize,
    pub devices_after: usize,
    /// Where the added devices live.
    pub paths: Vec<PathBuf>,
}

/// The move recorded in `data_dir` for a layout of `epochs` epochs, if any.
fn recorded_move(data_dir: &Path, epochs: usize) -> Result<Option<Move>> {
    let path = data_dir.join(MOVING_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(format!("reading {}", path.display()), e)),
    };
    let mut words = text.split_whitespace();
    let direction = match words.next() {
        Some("grow") => Move::Grow,
        Some("drain") => Move::Drain,
        _ => {
            return Err(StoreError::Corrupt(format!(
                "{}: expected `grow E` or `drain E`, found {text:?}",
                path.display()
            )))
        }
    };
    let of: Option<usize> = words.next().and_then(|w| w.parse().ok());
    // A record for another layout is what a crash left between two of a command's writes.
    Ok((of == Some(epochs) && epochs > 1).then_some(direction))
}

fn record_move(data_dir: &Path, direction: Move, epochs: usize) -> Result<()> {
    let word = match direction {
        Move::Grow => "grow",
        Move::Drain => "drain",
    };
    write_durably(
        &data_dir.join(MOVING_FILE),
        format!("{word} {epochs}\n").as_bytes(),
    )
}

/// The layout the data folder's layout file holds, if it holds one.
fn saved_layout(data_dir: &Path) -> Result<Option<Layout>> {
    let path = data_dir.join(LAYOUT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Layout::decode(&text)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(format!("reading {}", path.display()), e)),
    }
}

/// Applies a grown layout in the data folder to `config`: the devices its epochs added join
/// the configured ones (at the paths `array.json` records for them), the manager derives the
/// same epochs, and a recorded move runs. The configuration names the devices of one of the
/// layout's epochs (normally the first: `railstore grow` does not edit it).
pub(crate) fn adopt_epochs(config: &mut StoreConfig) -> Result<()> {
    let Ok(Some(saved)) = saved_layout(&config.data_dir) else {
        // None yet, or one the open's own check reports.
        return Ok(());
    };
    if saved.epochs() == 1 {
        return Ok(());
    }
    let mut counts = Vec::new();
    let mut epoch = Some(saved.clone());
    while let Some(l) = epoch {
        counts.push(l.devices());
        epoch = l.previous();
    }
    let configured = config.device_count();
    if !counts.contains(&configured) {
        return Err(StoreError::Config(format!(
            "the data folder {} holds an array grown to {} devices (epochs of {counts:?} \
             devices); the configuration names {configured}",
            config.data_dir.display(),
            saved.devices()
        )));
    }
    let n = saved.devices();
    if config.devices.paths.is_empty() {
        config.devices.count = n;
    } else {
        for i in config.devices.paths.len()..n {
            let p = device_path(config, i);
            config.devices.paths.push(p);
        }
    }
    config.manager.grows = saved.grows().to_vec();
    config.manager.moving = recorded_move(&config.data_dir, saved.epochs())?;
    Ok(())
}

/// An absent path, or an empty folder or file.
fn check_unused(p: &Path) -> Result<()> {
    let bad = |why: &str| {
        Err(StoreError::InvalidArgument(format!(
            "{}: {why}",
            p.display()
        )))
    };
    match std::fs::metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => bad(&format!("cannot be looked at ({e})")),
        Ok(m) if m.is_dir() => match std::fs::read_dir(p).map(|mut e| e.next().is_none()) {
            Ok(true) => Ok(()),
            Ok(false) => bad("the folder is not empty"),
            Err(e) => bad(&format!("cannot be listed ({e})")),
        },
        Ok(m) if m.is_file() && m.len() == 0 => Ok(()),
        Ok(_) => bad("something is there already; give an absent path or an empty one"),
    }
}

/// What an offline grow or drain asks of the data folder: an array made and shut down
/// cleanly, and no move running. Returns its layout.
fn stopped_array(config: &StoreConfig) -> Result<Layout> {
    let dir = &config.data_dir;
    let Some(saved) = saved_layout(dir)? else {
        return Err(StoreError::Config(format!(
            "{} holds no array yet: start it once (railstore serve) first",
            dir.display()
        )));
    };
    if !Store::stopped_cleanly(config) {
        return Err(StoreError::Conflict(format!(
            "the array in {} was not shut down cleanly: start it (railstore serve) and stop \
             it once, so its recovery runs first",
            dir.display()
        )));
    }
    if let Some(m) = recorded_move(dir, saved.epochs())? {
        return Err(StoreError::Conflict(format!(
            "a {} is still moving objects: start the server and let it finish \
             (railstore repair status)",
            match m {
                Move::Grow => "grow",
                Move::Drain => "drain",
            }
        )));
    }
    Ok(saved)
}

/// The last two writes of a grow, once its devices are stamped and named in `array.json`:
/// the `moving` record, then the layout file with the new epoch (the commit).
fn commit_grow(data_dir: &Path, grown: &Layout) -> Result<()> {
    record_move(data_dir, Move::Grow, grown.epochs())?;
    write_durably(&data_dir.join(LAYOUT_FILE), grown.encode().as_bytes())?;
    tracing::info!(
        devices = grown.devices(),
        "array grown; its objects move when the server starts"
    );
    Ok(())
}

/// Makes the `added` devices a grow adds after the array's `existing` ones: at `paths` (absent
/// or empty, one per device) or in the data folder's `devices/`. Returns where they are and
/// the devices opened.
fn make_devices(
    config: &StoreConfig,
    existing: &[PathBuf],
    added: usize,
    paths: &[PathBuf],
) -> Result<(Vec<PathBuf>, Vec<Opened>)> {
    if !paths.is_empty() && paths.len() != added {
        return Err(StoreError::InvalidArgument(format!(
            "{} paths for {added} devices: give one per device, or none",
            paths.len()
        )));
    }
    let before = existing.len();
    let mut targets = Vec::with_capacity(added);
    for j in 0..added {
        let i = before + j;
        let p = match paths.get(j) {
            Some(p) if !p.is_absolute() => {
                return Err(StoreError::InvalidArgument(format!(
                    "{}: a device's path must be absolute",
                    p.display()
                )))
            }
            Some(p) => p.clone(),
            None => config.data_dir.join("devices").join(i.to_string()),
        };
        if existing.contains(&p) || targets.contains(&p) {
            return Err(StoreError::InvalidArgument(format!(
                "{}: another device of the array is there",
                p.display()
            )));
        }
        check_unused(&p)?;
        targets.push(p);
    }
    let mut opened = Vec::with_capacity(added);
    for (j, p) in targets.iter().enumerate() {
        let i = before + j;
        let mut one = config.clone();
        one.devices.paths = (0..=i)
            .map(|d| existing.get(d).cloned().unwrap_or_else(|| p.clone()))
            .collect();
        opened.push(open_device(&one, i)?);
    }
    Ok((targets, opened))
}

/// The paths `array.json` records for added devices: only where the open would not look by
/// itself (`--path`); a device in the data folder's `devices/` moves with the folder.
fn recorded_targets(paths: &[PathBuf], targets: &[PathBuf]) -> Vec<Option<PathBuf>> {
    if paths.is_empty() {
        vec![None; targets.len()]
    } else {
        targets.iter().cloned().map(Some).collect()
    }
}

impl Store {
    /// Adds `added` devices to the stopped array of `config` as a new layout epoch: at
    /// `paths` (absent or empty, one per device) or in the data folder's `devices/`. The
    /// objects whose group changed move when the server next runs.
    pub async fn grow_offline(
        config: StoreConfig,
        added: usize,
        paths: Vec<PathBuf>,
    ) -> Result<GrowReport> {
        config.validate()?;
        if config.devices.kind == DeviceKind::Mem {
            return Err(StoreError::InvalidArgument(
                "memory devices hold nothing across restarts: there is no array to grow".into(),
            ));
        }
        let _lock = lock_data_dir(&config)?;
        let saved = stopped_array(&config)?;
        let grown = saved
            .grown(added)
            .map_err(|e| StoreError::InvalidArgument(e.to_string()))?;
        let before = saved.devices();
        let mut config = config;
        if config.devices.paths.is_empty() {
            config.devices.count = before;
        }
        let recorded = crate::identity::recorded_paths(&config.data_dir)?;
        let existing: Vec<PathBuf> = (0..before)
            .map(|d| {
                recorded
                    .get(d)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| device_path(&config, d))
            })
            .collect();
        let (targets, opened) = make_devices(&config, &existing, added, &paths)?;
        let devices: Vec<Arc<dyn Device>> = opened.iter().map(|o| o.device.clone()).collect();
        let recorded = recorded_targets(&paths, &targets);
        ArrayIdentity::add_devices(&config.data_dir, before, &devices, &recorded).await?;
        for o in &opened {
            if let Some(f) = &o.file {
                f.close_blocking().map_err(|source| StoreError::Device {
                    what: "closing an added device",
                    source,
                })?;
            }
        }
        commit_grow(&config.data_dir, &grown)?;
        Ok(GrowReport {
            devices_before: before,
            devices_after: grown.devices(),
            paths: targets,
        })
    }

    /// [`Store::grow_offline`] onto devices the caller made (empty ones, in array order after
    /// the array's own; the whole-system simulator's), for arrays opened with
    /// [`Store::open_with_devices`]. Returns the device count after the grow.
    pub async fn grow_with_devices(
        config: StoreConfig,
        added: Vec<Arc<dyn Device>>,
    ) -> Result<usize> {
        config.validate()?;
        let _lock = lock_data_dir(&config)?;
        let saved = stopped_array(&config)?;
        let grown = saved
            .grown(added.len())
            .map_err(|e| StoreError::InvalidArgument(e.to_string()))?;
        for (j, d) in added.iter().enumerate() {
            check_empty(d.as_ref(), &format!("added device {j}")).await?;
        }
        let before = saved.devices();
        ArrayIdentity::add_devices(&config.data_dir, before, &added, &vec![None; added.len()])
            .await?;
        commit_grow(&config.data_dir, &grown)?;
        Ok(grown.devices())
    }

    /// Whether the array in `config`'s data folder was last shut down cleanly with no scrub
    /// owed (what a grow or drain asks; `railstore scrub` makes it so).
    pub fn stopped_cleanly(config: &StoreConfig) -> bool {
        config.data_dir.join(CLEAN_MARKER).exists()
    }

    /// How many devices the array in `config`'s data folder has (its layout file), if one
    /// was made there: what a drain's commit leaves, for callers that open the array on
    /// devices of their own.
    pub fn recorded_devices(config: &StoreConfig) -> Result<Option<usize>> {
        Ok(saved_layout(&config.data_dir)?.map(|l| l.devices()))
    }

    /// Starts taking the last epoch's devices out of the stopped array of `config`: the
    /// server moves their objects back to the earlier epochs' devices, and the clean shutdown
    /// after that removes them from the array. Returns the devices to be removed.
    pub fn drain_offline(config: &StoreConfig) -> Result<std::ops::Range<usize>> {
        config.validate()?;
        let _lock = lock_data_dir(config)?;
        let saved = stopped_array(config)?;
        let Some(previous) = saved.previous() else {
            return Err(StoreError::InvalidArgument(
                "the array was never grown: there is no epoch of devices to drain".into(),
            ));
        };
        record_move(&config.data_dir, Move::Drain, saved.epochs())?;
        Ok(previous.devices()..saved.devices())
    }

    /// [`Store::drain_offline`] while the array serves (`railstore device remove`): the drain
    /// is recorded, objects are written to the earlier epochs' devices from now on (and found
    /// under either layout until they have moved), and the move starts as the store's
    /// background run; the clean shutdown after it removes the drained devices. Refused while
    /// a rebuild, scrub or move runs. Returns the move's status; [`Store::drain_target`]
    /// names the devices drained.
    pub async fn drain_online(&self) -> Result<RepairStatus> {
        let inner = &self.inner;
        if inner.closing.load(Ordering::SeqCst) {
            return Err(StoreError::ShuttingDown);
        }
        {
            let _one_at_a_time = inner.repair_ops.lock().await;
            if let Some(r) = self.repair_status().filter(|r| r.running) {
                return Err(StoreError::Conflict(format!(
                    "a {} is running: drain once it is done (railstore repair status)",
                    r.kind
                )));
            }
            if inner.drained.load(Ordering::SeqCst) {
                return Err(StoreError::Conflict(
                    "the last epoch is drained already: its devices leave the array at the next \
                     clean shutdown"
                        .into(),
                ));
            }
            if inner.manager.moving().is_some() {
                return Err(StoreError::Conflict(
                    "a move between layout epochs is under way: drain once it is done".into(),
                ));
            }
            let layout = inner.manager.layout();
            if layout.previous().is_none() {
                return Err(StoreError::InvalidArgument(
                    "the array was never grown: there is no epoch of devices to drain".into(),
                ));
            }
            // Recorded first: from the switch on, writes go where only a drain's open looks.
            record_move(&inner.config.data_dir, Move::Drain, layout.epochs())?;
            if let Err(e) = inner.manager.start_drain().await {
                // Not switched: the next start must not drain either.
                remove_durably(&inner.config.data_dir.join(MOVING_FILE))?;
                return Err(e.into());
            }
        }
        tracing::info!(
            devices = ?self.drain_target(),
            "draining the last epoch's devices while serving"
        );
        self.start_move_schedule();
        self.repair_status().ok_or_else(|| {
            StoreError::Conflict("the drain is recorded; its move starts shortly".into())
        })
    }

    /// [`Store::grow_offline`] while the array serves (`railstore device add`): the devices
    /// are made, stamped and recorded as the offline grow does (the layout file last, the
    /// commit), then join rails and the manager, which from then on writes by the grown layout
    /// and finds objects under either until the move, started as the store's background run,
    /// is done. Refused while a rebuild, scrub or move runs, or while a drained epoch awaits
    /// its clean shutdown. Returns what was added and the move's status.
    pub async fn grow_online(
        &self,
        added: usize,
        paths: Vec<PathBuf>,
    ) -> Result<(GrowReport, RepairStatus)> {
        let inner = &self.inner;
        if inner.closing.load(Ordering::SeqCst) {
            return Err(StoreError::ShuttingDown);
        }
        let Some(identity) = inner.identity.clone() else {
            return Err(StoreError::InvalidArgument(
                "memory devices hold nothing across restarts: grow an array of files".into(),
            ));
        };
        let report = {
            let _one_at_a_time = inner.repair_ops.lock().await;
            if let Some(r) = self.repair_status().filter(|r| r.running) {
                return Err(StoreError::Conflict(format!(
                    "a {} is running: grow once it is done (railstore repair status)",
                    r.kind
                )));
            }
            if inner.drained.load(Ordering::SeqCst) || inner.manager.moving().is_some() {
                return Err(StoreError::Conflict(
                    "a drain awaits its clean shutdown, or a move between layout epochs is \
                     under way: grow after it"
                        .into(),
                ));
            }
            let layout = inner.manager.layout();
            let before = layout.devices();
            let grown = layout
                .grown(added)
                .map_err(|e| StoreError::InvalidArgument(e.to_string()))?;
            let existing: Vec<PathBuf> = inner
                .devices
                .all()
                .iter()
                .map(|o| {
                    let o = o.lock().unwrap();
                    o.path.clone().unwrap_or_default()
                })
                .collect();
            let (targets, mut opened) = make_devices(&inner.config, &existing, added, &paths)?;
            let (slots, raw) = crate::open::slotted(&mut opened);
            identity
                .join_devices(before, &raw, &recorded_targets(&paths, &targets))
                .await?;
            // The commit: from here the next open finds the array grown, its move to run.
            commit_grow(&inner.config.data_dir, &grown)?;
            let colours: Vec<usize> = (before..grown.devices())
                .map(|d| grown.colour_of(d))
                .collect();
            // If either refuses now, the array serves by the old layout until the next start,
            // which finds the grow recorded and runs its move.
            let wrapped = inner
                .rails_layer
                .add_devices(raw, colours)
                .map_err(|source| StoreError::Device {
                    what: "adding devices to separation",
                    source,
                })?;
            inner.manager.start_grow(wrapped, grown.clone()).await?;
            // Last: what lists the store's devices (`/status`) finds them in every layer.
            inner.devices.extend(
                &opened
                    .into_iter()
                    .map(|o| Arc::new(std::sync::Mutex::new(o)))
                    .collect::<Vec<_>>(),
            );
            inner.slots.extend(&slots);
            tracing::info!(
                before,
                after = grown.devices(),
                "devices added while serving; the objects whose group changed move now"
            );
            GrowReport {
                devices_before: before,
                devices_after: grown.devices(),
                paths: targets,
            }
        };
        self.start_move_schedule();
        let status = self.repair_status().ok_or_else(|| {
            StoreError::Conflict("the grow is recorded; its move starts shortly".into())
        })?;
        Ok((report, status))
    }

    /// The devices a drain (running, or done and awaiting the clean shutdown) takes out of
    /// the array; empty when no drain was started.
    pub fn drain_target(&self) -> std::ops::Range<usize> {
        match self.inner.manager.moving() {
            Some((Move::Drain, source)) => self.inner.manager.layout().devices()..source.devices(),
            _ if self.inner.drained.load(Ordering::SeqCst) => {
                self.inner.manager.layout().devices()..self.inner.devices.len()
            }
            _ => 0..0,
        }
    }

    /// Starts the recorded move in the background, once the index has loaded (`open.rs`): at
    /// once when nothing else runs, so `/status` shows it as soon as the store is open.
    pub(crate) fn start_move_schedule(&self) {
        if self.inner.manager.moving().is_some() {
            let started = self.start_move().is_ok();
            tokio::spawn(move_schedule(Arc::downgrade(&self.inner), started));
        }
    }

    /// Starts the move as the store's one background run; refused while another runs or is
    /// being started.
    fn start_move(&self) -> Result<()> {
        let Some((direction, _)) = self.inner.manager.moving() else {
            return Ok(());
        };
        let Ok(_one_at_a_time) = self.inner.repair_ops.try_lock() else {
            return Err(StoreError::Conflict(
                "a rebuild or scrub is being started".into(),
            ));
        };
        let progress = Arc::new(RepairProgress::default());
        let options = self.inner.config.repair.options();
        let worker = self.clone();
        let p = progress.clone();
        self.start_run(RunKind::Move(direction), progress, async move {
            worker.run_move(direction, options, p).await
        })
        .map(|_| ())
    }

    async fn run_move(
        &self,
        direction: Move,
        options: RepairOptions,
        progress: Arc<RepairProgress>,
    ) -> Result<RepairReport> {
        let inner = &self.inner;
        let report = inner
            .manager
            .relocate_all(options, &progress)
            .await
            .map_err(|e| match e {
                RedundancyError::Cancelled => StoreError::Conflict(MOVE_STOPPED.into()),
                e => e.into(),
            })?;
        if !report.failed.is_empty() {
            return Err(StoreError::Conflict(format!(
                "{} objects could not be moved (their old place cannot be read; see the log); \
                 the move is tried again later",
                report.failed.len()
            )));
        }
        // What moved is durable at its new place (each move syncs); the record goes next.
        match direction {
            Move::Grow => {
                remove_durably(&inner.config.data_dir.join(MOVING_FILE))?;
                inner.manager.finish_move();
            }
            Move::Drain => {
                inner.manager.finish_move();
                inner.drained.store(true, Ordering::SeqCst);
            }
        }
        tracing::info!(
            ?direction,
            objects = report.objects_moved,
            secs = report.elapsed.as_secs_f64(),
            "the move between layout epochs is done"
        );
        Ok(RepairReport {
            objects: report.keys,
            objects_repaired: report.objects_moved,
            bytes_written: progress.bytes_written.load(Ordering::Relaxed),
            elapsed: report.elapsed,
            ..RepairReport::default()
        })
    }

    /// At a clean shutdown after a drain's move, with every buffer flushed and every device
    /// synced and closed: the layout without the drained epoch, the array without its devices.
    pub(crate) fn commit_drain(&self) -> Result<()> {
        let inner = &self.inner;
        if !inner.drained.load(Ordering::SeqCst) {
            return Ok(());
        }
        let kept = inner.manager.layout();
        let drained: Vec<PathBuf> = inner.devices.all()[kept.devices()..]
            .iter()
            .filter_map(|o| o.lock().unwrap().path.clone())
            .collect();
        write_durably(
            &inner.config.data_dir.join(LAYOUT_FILE),
            kept.encode().as_bytes(),
        )?;
        if let Some(id) = &inner.identity {
            id.keep_devices(kept.devices())?;
        }
        remove_durably(&inner.config.data_dir.join(MOVING_FILE))?;
        // The drained devices hold nothing the array needs now. Those in the data folder's
        // `devices/` go (a later grow puts its devices there); those elsewhere (`--path`) are
        // the operator's to clear.
        let own = inner.config.data_dir.join("devices");
        let (ours, theirs): (Vec<PathBuf>, Vec<PathBuf>) =
            drained.into_iter().partition(|p| p.starts_with(&own));
        for p in &ours {
            let removed = if p.is_dir() {
                std::fs::remove_dir_all(p)
            } else {
                std::fs::remove_file(p)
            };
            if let Err(e) = removed {
                tracing::warn!(path = %p.display(), error = %e, "removing a drained device");
            }
        }
        tracing::info!(
            devices = kept.devices(),
            removed = ours.len(),
            left = ?theirs,
            "the drained devices left the array (those elsewhere than devices/ can be cleared)"
        );
        Ok(())
    }
}

/// Runs the recorded move until it is done: (re)started as soon as no rebuild or scrub runs,
/// and a minute after a run that did not finish. `running`: a run was started already. Holds
/// the store only while it looks, so a shutdown's drop releases the data folder at once.
async fn move_schedule(store: Weak<Inner>, mut running: bool) {
    let look = || {
        let inner = store.upgrade()?;
        let s = Store { inner };
        (!s.inner.closing.load(Ordering::SeqCst) && s.inner.manager.moving().is_some()).then_some(s)
    };
    loop {
        while running {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(s) = look() else { return };
            running = s.repair_status().is_some_and(|r| r.running);
        }
        // Not done (the run stopped), or not started (a rebuild or scrub runs).
        let Some(s) = look() else { return };
        // A move that failed is tried again a minute later; one that a rebuild or scrub
        // stopped or kept from starting, as soon as that is done.
        let failed = s.repair_status().is_some_and(|r| {
            (r.kind == "grow" || r.kind == "drain")
                && r.error.is_some_and(|e| !e.ends_with(MOVE_STOPPED))
        });
        let wait = if failed {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(5)
        };
        drop(s);
        tokio::time::sleep(wait).await;
        let Some(s) = look() else { return };
        running = s.start_move().is_ok();
    }
}
