//! Opening and closing a store: the data folder's lock and layout, the devices' identities,
//! the array (through [`crate::array::assemble`], the one way to put it together), the index;
//! and the clean shutdown.

use crate::array::{assemble, pass_through};
use crate::config::{DeviceKind, StoreConfig};
use crate::devices::{device_path, open_device, Opened};
use crate::error::{Result, StoreError};
use crate::identity::{sync_dir, write_durably, ArrayIdentity, DeviceHealth, NotCurrent};
use crate::metrics::Metrics;
use crate::online::device_watch;
use crate::scrubber::scrub_schedule;
use crate::store::{
    reaper, Committer, Growing, Inner, State, Store, CLEAN_MARKER, RECORD_LOCK_STRIPES,
};
use crate::warmup::IndexState;
use railstore_device::{Device, DeviceSlot, MemConfig, MemDevice, RetryingDevice};
use railstore_placement::Layout;
use railstore_rails::{AdaptiveWindow, RailsConfig, ScheduleConfig};
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// The layout file in the data folder.
pub(crate) const LAYOUT_FILE: &str = "layout";

impl Store {
    /// Opens (or creates) the store the configuration describes: checks the devices'
    /// identities, replays the separation journal, opens the reliability manager and loads the
    /// index. Refuses a data folder another process holds, one made with a different layout,
    /// and devices that belong elsewhere; starts degraded (with the devices that are not
    /// current out of service) when the configuration tolerates it.
    pub async fn open(config: StoreConfig) -> Result<Store> {
        Store::open_loaded(config, None, false, None).await
    }

    /// [`Store::open`] for a server: after a clean shutdown it returns once the buckets are
    /// read and loads the objects in the background, serving meanwhile what needs no more than
    /// one record (`warmup.rs`: reads of current versions; writes wait, listings answer
    /// [`StoreError::IndexLoading`]). After an unclean one it loads everything first, as
    /// [`Store::open`] does.
    pub async fn open_serving(config: StoreConfig) -> Result<Store> {
        Store::open_loaded(config, None, true, None).await
    }

    /// [`Store::open_serving`] with the background load held after the buckets until the
    /// returned notify is notified (tests of what the store answers while it loads).
    #[doc(hidden)]
    pub async fn open_serving_held(
        config: StoreConfig,
    ) -> Result<(Store, Arc<tokio::sync::Notify>)> {
        let hold = Arc::new(tokio::sync::Notify::new());
        let store = Store::open_loaded(config, None, true, Some(hold.clone())).await?;
        Ok((store, hold))
    }

    /// [`Store::open`] over devices the caller made, in array order (the whole-system
    /// simulator's fault-injecting devices): `config.devices` is not used, but the data folder
    /// holds the lock, the layout and the array state as for `file` devices, so the devices'
    /// identities are checked the same way. A device that lost everything is simply empty.
    pub async fn open_with_devices(
        config: StoreConfig,
        devices: Vec<Arc<dyn Device>>,
    ) -> Result<Store> {
        Store::open_loaded(config, Some(devices), false, None).await
    }

    async fn open_loaded(
        config: StoreConfig,
        injected: Option<Vec<Arc<dyn Device>>>,
        serve_while_loading: bool,
        hold: Option<Arc<tokio::sync::Notify>>,
    ) -> Result<Store> {
        let store = Store::open_array(config, None, injected).await?;
        // Loading reads are background work: clients' reads go first.
        let report = railstore_device::purpose::background(store.load_buckets()).await?;
        if store.inner.unclean_start || !serve_while_loading {
            // After a crash the careful load settles every record before anything is served.
            railstore_device::purpose::background(store.load(report)).await?;
            store.inner.warmup.set(IndexState::Ready);
            store.start_background();
        } else {
            if let Some(h) = hold {
                store.inner.warmup.hold(h);
            }
            let loader = store.clone();
            let handle = tokio::spawn(async move {
                loader.held().await;
                match railstore_device::purpose::background(loader.load(report)).await {
                    Ok(_) => {
                        loader.inner.warmup.set(IndexState::Ready);
                        loader.start_background();
                    }
                    Err(StoreError::ShuttingDown) => {
                        tracing::info!("the index load stopped: the store is shutting down");
                        loader
                            .inner
                            .warmup
                            .set(IndexState::Failed(StoreError::ShuttingDown.to_string()));
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the index did not load");
                        loader.inner.warmup.set(IndexState::Failed(e.to_string()));
                    }
                }
            });
            *store.inner.loader.lock().unwrap() = Some(handle);
        }
        Ok(store)
    }

    /// The tasks that run once the index is loaded: chunk reaping, the device watch, the
    /// scrub schedule.
    fn start_background(&self) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(reaper(weak.clone()));
        tokio::spawn(device_watch(
            weak.clone(),
            self.inner.config.repair.watch_interval,
        ));
        tokio::spawn(scrub_schedule(
            weak,
            self.inner.config.repair.scrub_interval,
        ));
        self.start_move_schedule();
    }

    /// Opens the array without loading the index. With `fresh`, device `fresh` starts empty
    /// (its old contents moved aside, or, with `injected` devices, the caller's empty one) for
    /// a rebuild.
    pub(crate) async fn open_array(
        mut config: StoreConfig,
        fresh: Option<usize>,
        injected: Option<Vec<Arc<dyn Device>>>,
    ) -> Result<Store> {
        config.validate()?;
        let persistent = injected.is_some() || config.devices.kind != DeviceKind::Mem;
        if persistent {
            // A grown array has the devices its layout file names, and maybe a move running.
            crate::grow::adopt_epochs(&mut config)?;
        }
        let n = config.device_count();
        if injected.as_ref().is_some_and(|d| d.len() != n) {
            return Err(StoreError::Config(format!(
                "{} devices given; the configuration's layout has {n}",
                injected.as_ref().map_or(0, Vec::len)
            )));
        }
        let lock_file = if persistent {
            Some(lock_data_dir(&config)?)
        } else {
            None
        };
        let data_dir = &config.data_dir.clone();
        let mut layout = config.manager.layout(n)?;
        let mut existed = false;
        if persistent {
            let layout_file = data_dir.join(LAYOUT_FILE);
            if layout_file.exists() {
                existed = true;
                let saved = std::fs::read_to_string(&layout_file)
                    .map_err(|e| StoreError::io(format!("reading {}", layout_file.display()), e))?;
                // A folder made before pieces were spread keeps its consecutive pieces: that
                // is where its objects are.
                if let Ok(old) = Layout::decode(&saved) {
                    if old.piece_order() != layout.piece_order() {
                        config.manager.piece_order = old.piece_order();
                        layout = config.manager.layout(n)?;
                    }
                }
                if saved.trim() != layout.encode().trim() {
                    return Err(StoreError::Config(format!(
                        "the data folder {} was made with another layout (device count, group \
                         width or seed); its layout is in {}",
                        data_dir.display(),
                        layout_file.display()
                    )));
                }
            } else if data_dir.join(crate::identity::STATE_FILE).exists() {
                // An array without its layout file: which order its pieces are in (consecutive
                // before format 3, spread since) cannot be told, and guessing wrong makes a
                // careful read take pieces for misplaced ones.
                return Err(StoreError::Config(format!(
                    "the data folder {} holds an array (array.json) but not its layout file {}:                      restore it (docs/format.md, \"Layout\")",
                    data_dir.display(),
                    layout_file.display()
                )));
            } else {
                write_durably(&layout_file, layout.encode().as_bytes())?;
            }
        }
        if persistent && injected.is_none() {
            // A device replaced onto another path lives there now, whatever the configuration
            // says (docs/admin.md).
            let recorded = crate::identity::recorded_paths(data_dir)?;
            if recorded.len() == n && recorded.iter().any(Option::is_some) {
                config.devices.paths = (0..n)
                    .map(|i| {
                        recorded[i]
                            .clone()
                            .unwrap_or_else(|| device_path(&config, i))
                    })
                    .collect();
            }
        }
        let marker = data_dir.join(CLEAN_MARKER);
        let unclean_start = existed && !marker.exists();
        if let (Some(d), None) = (fresh, &injected) {
            move_aside(&config, d)?;
        }
        // A device of a known array whose folder or file is gone is not recreated empty: it
        // stays out of service until it is rebuilt.
        let known = persistent && existed;
        let mut devices = Vec::with_capacity(n);
        let mut present = Vec::with_capacity(n);
        match injected {
            Some(given) => {
                for device in given {
                    present.push(true);
                    devices.push(Opened {
                        device,
                        file: None,
                        path: None,
                    });
                }
            }
            None => {
                // Each device reads its index at open (a checkpoint and the log after it):
                // all at once, one thread each, so a restart takes the slowest, not the sum.
                let opened: Vec<(bool, Result<Opened>)> = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..n)
                        .map(|i| {
                            let config = &config;
                            scope.spawn(move || {
                                let there =
                                    !known || Some(i) == fresh || device_path(config, i).exists();
                                let o = if there {
                                    open_device(config, i)
                                } else {
                                    absent_device(config, i)
                                };
                                (there, o)
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().expect("a device open panicked"))
                        .collect()
                });
                for (there, o) in opened {
                    present.push(there);
                    devices.push(o?);
                }
            }
        }
        let (slots, raw) = slotted(&mut devices);
        let tolerance = config.tolerance();
        let (identity, failed) = if persistent {
            let a = ArrayIdentity::admit(data_dir, &raw, &present, fresh, tolerance).await?;
            let failed: Vec<usize> = a
                .not_current
                .iter()
                .filter(|(_, why)| *why != NotCurrent::Replacing)
                .map(|(d, _)| *d)
                .collect();
            (Some(a.identity), failed)
        } else {
            (None, Vec::new())
        };
        let rails_cfg = match &config.separation {
            Some(s) => {
                let widest = s.window_max_in(layout.width(), raw.len(), tolerance);
                let base = RailsConfig::new(ScheduleConfig {
                    colours: layout.width(),
                    frame: s.frame,
                    window_min: s.window,
                    // Room to widen past a failed device's colour (rails keeps the window's
                    // live readers); the load itself asks for at most `widest`.
                    window_max: widest.max(layout.width().saturating_sub(2)),
                    guard: s.guard,
                });
                // A power failure loses every buffer: each buffered piece's journal record on
                // tolerance + 1 devices keeps the tolerance through it. The journal's bound
                // grows with the copies, so it does not bind before the buffers do.
                let copies = s.copies(tolerance);
                RailsConfig {
                    write_buffer_bytes_max: s.write_buffer_bytes_max,
                    partial_when_full: s.partial_when_full,
                    // Device rates measured by the flushers; no read rate: reads first.
                    adaptive: s.adaptive.then_some(AdaptiveWindow {
                        window_max: Some(widest),
                        ..AdaptiveWindow::default()
                    }),
                    size_buffers: s.adaptive,
                    journal_copies: copies,
                    journal_bytes_max: base.journal_bytes_max * copies as u64,
                    ..base
                }
            }
            None => pass_through(layout.width()),
        };
        let array = assemble(raw, rails_cfg, config.manager.clone(), &failed, fresh).await?;
        if let Some(id) = &identity {
            // A device that fails while the array runs stays failed across restarts.
            for d in array.journal.failed_devices.iter() {
                id.set_health(
                    *d,
                    DeviceHealth::Failed,
                    Some("failed during journal replay".into()),
                )?;
            }
            let id = id.clone();
            let record: railstore_redundancy::FailureListener = Arc::new(move |d| {
                if let Err(e) =
                    id.set_health(d, DeviceHealth::Failed, Some("failed while serving".into()))
                {
                    tracing::error!(device = d, error = %e, "recording a failed device");
                }
            });
            array.rails.on_failure(record.clone());
            array.manager.devices().on_failure(record);
        }
        // A crash from here on is an unclean shutdown.
        remove_durably(&marker)?;
        Ok(Store {
            inner: Arc::new(Inner {
                manager: array.manager,
                rails: config.separation.is_some().then_some(array.rails.clone()),
                rails_layer: array.rails,
                devices: Growing::new(
                    devices
                        .into_iter()
                        .map(|o| Arc::new(Mutex::new(o)))
                        .collect(),
                ),
                slots: Growing::new(slots),
                repair: Mutex::new(None),
                repair_ops: tokio::sync::Mutex::new(()),
                state: RwLock::new(State::default()),
                locks: (0..RECORD_LOCK_STRIPES)
                    .map(|_| tokio::sync::Mutex::new(()))
                    .collect(),
                bucket_ops: tokio::sync::Mutex::new(()),
                committer: Committer::default(),
                garbage: Mutex::new(Vec::new()),
                metrics: Metrics::default(),
                closing: AtomicBool::new(false),
                drained: AtomicBool::new(false),
                lock_file,
                identity,
                unclean_start,
                scrub_owed: AtomicBool::new(unclean_start),
                version_clock: AtomicU64::new(0),
                warmup: crate::warmup::Warmup::new(),
                loader: Mutex::new(None),
                config,
            }),
        })
    }

    /// A full scrub finished: the folder may be marked clean again at shutdown.
    pub(crate) fn scrub_done(&self) {
        self.inner.scrub_owed.store(false, Ordering::SeqCst);
    }

    /// Flushes separation buffers, makes everything durable, deletes discarded chunks, closes
    /// the devices and, unless a scrub is still owed, marks the shutdown clean. Later calls
    /// fail with `ShuttingDown`.
    pub async fn shutdown(&self) -> Result<()> {
        if self.inner.closing.swap(true, Ordering::SeqCst) {
            return Err(StoreError::ShuttingDown);
        }
        // A loader still running stops at its next record (or is let past its test hold).
        self.inner.warmup.release_hold();
        let loader = self.inner.loader.lock().unwrap().take();
        if let Some(l) = loader {
            let _ = l.await;
        }
        // A rebuild or scrub stops first, so the final sync covers what it wrote.
        self.stop_repair().await;
        // Let operations that passed the closing check finish their record writes.
        for l in &self.inner.locks {
            drop(l.lock().await);
        }
        // Deleting the discarded chunks writes too: flush and sync once more after it.
        for reap in [true, false] {
            if let Some(r) = &self.inner.rails {
                r.drain().await.map_err(|source| StoreError::Device {
                    what: "flushing separation buffers",
                    source,
                })?;
            }
            self.inner.manager.sync().await?;
            if reap {
                self.reap(true).await;
            }
        }
        let files: Vec<_> = self
            .inner
            .devices
            .all()
            .iter()
            .filter_map(|o| o.lock().unwrap().file.clone())
            .collect();
        tokio::task::spawn_blocking(move || {
            for f in files {
                f.close_blocking()?;
            }
            Ok::<_, railstore_device::DeviceError>(())
        })
        .await
        .map_err(|e| StoreError::Config(format!("closing devices: {e}")))?
        .map_err(|source| StoreError::Device {
            what: "closing devices",
            source,
        })?;
        if self.inner.lock_file.is_some() {
            self.commit_drain()?;
            if self.inner.scrub_owed.load(Ordering::SeqCst) {
                tracing::warn!(
                    "shut down before the scrub an unclean start owes; the next start scrubs"
                );
            } else {
                write_durably(&self.inner.config.data_dir.join(CLEAN_MARKER), b"")?;
            }
        }
        tracing::info!("store shut down");
        Ok(())
    }
}

/// Moves device `d`'s old contents aside (for a rebuild onto an empty device).
pub(crate) fn move_aside(config: &StoreConfig, d: usize) -> Result<()> {
    let path = device_path(config, d);
    if std::fs::metadata(&path).is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_block_device()
    }) {
        // Renaming a device node would not empty the disk, and reopening it would take its
        // old contents for the new device's.
        return Err(StoreError::Config(format!(
            "device {d} is the block device {}: railstore neither moves nor wipes block \
             devices, so it cannot rebuild onto one in place yet",
            path.display()
        )));
    }
    if path.exists() {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_secs());
        // Two replaces in one second (a rebuild cut off and started again) get two names.
        let aside = (0..)
            .map(|n| match n {
                0 => path.with_extension(format!("replaced-{secs}")),
                n => path.with_extension(format!("replaced-{secs}-{n}")),
            })
            .find(|p| !p.exists())
            .expect("some name is free");
        std::fs::rename(&path, &aside)
            .map_err(|e| StoreError::io(format!("moving {} aside", path.display()), e))?;
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        tracing::info!(device = d, aside = %aside.display(), "old device contents moved aside");
    }
    Ok(())
}

/// A stand-in for a device whose folder or file is gone: it is marked failed before anything
/// could touch it, and nothing is created where it was.
fn absent_device(config: &StoreConfig, i: usize) -> Result<Opened> {
    let mem = MemDevice::new(MemConfig::default())
        .map_err(|e| StoreError::Config(format!("device {i}: {e}")))?;
    Ok(Opened {
        device: Arc::new(mem),
        file: None,
        path: Some(device_path(config, i)),
    })
}

/// Removes `path` durably (the unlink reaches the disk before anything that relies on it).
pub(crate) fn remove_durably(path: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(path.parent().unwrap_or(std::path::Path::new("."))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(format!("removing {}", path.display()), e)),
    }
}

pub(crate) fn lock_data_dir(config: &StoreConfig) -> Result<File> {
    let dir = &config.data_dir;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| StoreError::io(format!("creating {}", dir.display()), e))?;
    let path = dir.join("lock");
    let f = File::options()
        .mode(0o600)
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| StoreError::io(format!("opening {}", path.display()), e))?;
    f.try_lock().map_err(|_| {
        StoreError::Config(format!(
            "the data folder {} is in use by another railstore process",
            dir.display()
        ))
    })?;
    Ok(f)
}

/// Wraps opened devices as every layer above expects them: transient faults retried at the
/// device, under every layer that uses it, and each device in a slot, so an online replace
/// swaps it under rails and the manager (`online.rs`). Returns the slots, and them as devices.
pub(crate) fn slotted(devices: &mut [Opened]) -> (Vec<Arc<DeviceSlot>>, Vec<Arc<dyn Device>>) {
    for o in devices.iter_mut() {
        o.device = Arc::new(RetryingDevice::new(o.device.clone()));
    }
    let slots: Vec<Arc<DeviceSlot>> = devices
        .iter()
        .map(|o| Arc::new(DeviceSlot::new(o.device.clone())))
        .collect();
    let raw = slots.iter().map(|s| s.clone() as Arc<dyn Device>).collect();
    (slots, raw)
}
