//! Operations on the array while it serves (docs/admin.md): the device watch that takes a
//! device whose files vanished out of service, failing a device by request, and replacing a
//! failed device by an empty one rebuilt from the others in the background, throttled, with
//! progress, resumed by the next start when a restart cuts it off.
//!
//! A replace puts a fresh device in the failed one's slot (under rails and the manager, which
//! keep their handles), lets rails readmit it (its watermark past the old device's journal
//! tags), and runs the manager's rebuild: the device takes writes at once and serves reads
//! only once the rebuild has finished and the array has recorded it back in service.

use crate::background::{RepairStatus, RunKind};
use crate::config::DeviceKind;
use crate::devices::{check_empty, device_path, open_device};
use crate::error::{Result, StoreError};
use crate::identity::DeviceHealth;
use crate::open::move_aside;
use crate::store::{Inner, Store};
use railstore_device::{Device, RetryingDevice};
use railstore_redundancy::{RedundancyError, RepairOptions, RepairProgress, RepairReport};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

impl Store {
    /// Devices out of service (failed or being rebuilt).
    fn out_of_service(&self) -> Vec<usize> {
        let io = self.inner.manager.devices();
        (0..io.len()).filter(|&d| !io.readable(d)).collect()
    }

    /// Takes device `d` out of service at an operator's request (`railstore device fail`),
    /// recorded durably with `reason`. Refused when it would leave more devices out of service
    /// than the policy tolerates.
    pub fn fail_device(&self, d: usize, reason: &str) -> Result<()> {
        self.check_open()?;
        self.check_device_index(d)?;
        let io = self.inner.manager.devices();
        if io.is_failed(d) {
            return Ok(());
        }
        let out = self.out_of_service();
        let tolerance = self.inner.config.tolerance();
        if !out.contains(&d) && out.len() >= tolerance {
            return Err(StoreError::Conflict(format!(
                "devices {out:?} are already out of service and the policy tolerates \
                 {tolerance}: failing device {d} as well could lose objects"
            )));
        }
        self.record_failure(d, reason)
    }

    /// Marks device `d` failed in every layer and in the array state.
    fn record_failure(&self, d: usize, reason: &str) -> Result<()> {
        tracing::warn!(device = d, reason, "taking device out of service");
        // The durable record first: a crash right after must not bring it back as current.
        if let Some(id) = &self.inner.identity {
            id.set_health(d, DeviceHealth::Failed, Some(reason.to_string()))?;
        }
        self.inner.rails_layer.mark_failed(d);
        self.inner.manager.devices().mark_failed(d);
        Ok(())
    }

    fn check_device_index(&self, d: usize) -> Result<()> {
        let n = self.inner.slots.len();
        if d >= n {
            return Err(StoreError::InvalidArgument(format!(
                "device {d}: the array has {n} (0 to {})",
                n - 1
            )));
        }
        Ok(())
    }

    /// Replaces failed device `d` by an empty device at its configured place (its old
    /// contents, if any, are moved aside) and rebuilds it from the others in the background,
    /// while the store serves. Watch it with [`Store::repair_status`]. Refused for a device
    /// in service (fail it first), while another rebuild runs, and for memory devices.
    pub async fn replace_device(&self, d: usize) -> Result<RepairStatus> {
        self.replace_device_with(d, self.inner.config.repair.options())
            .await
    }

    /// [`Store::replace_device`] with the rebuild's throttle given (`railstore bench repair`
    /// compares it with none).
    pub async fn replace_device_with(
        &self,
        d: usize,
        options: RepairOptions,
    ) -> Result<RepairStatus> {
        self.replace_at(d, None, options).await
    }

    /// [`Store::replace_device`] onto a new device at `path` instead of the configured place
    /// (`railstore device replace N --path P`): `path` must be absolute, belong to no other
    /// device, and be absent or empty. The array state records it before the rebuild starts,
    /// and from then on the device is opened there whatever the configuration says; the old
    /// place is left as it is.
    pub async fn replace_device_at(&self, d: usize, path: &Path) -> Result<RepairStatus> {
        self.replace_at(d, Some(path), self.inner.config.repair.options())
            .await
    }

    async fn replace_at(
        &self,
        d: usize,
        path: Option<&Path>,
        options: RepairOptions,
    ) -> Result<RepairStatus> {
        let _one_at_a_time = self.inner.repair_ops.lock().await;
        self.check_replaceable(d).await?;
        let inner = &self.inner;
        let current = inner.devices.get(d).lock().unwrap().path.clone();
        let (Some(current), false) = (current, inner.config.devices.kind == DeviceKind::Mem) else {
            return Err(StoreError::InvalidArgument(format!(
                "device {d} has no folder or file of its own to rebuild onto"
            )));
        };
        let target = match path {
            Some(p) => {
                self.check_new_path(d, p)?;
                p.to_path_buf()
            }
            None => current,
        };
        self.mark_rebuilding(d)?;
        let mut config = inner.config.clone();
        config.devices.paths = (0..inner.slots.len())
            .map(|i| {
                if i == d {
                    target.clone()
                } else {
                    device_path(&inner.config, i)
                }
            })
            .collect();
        let moving = path.is_some();
        let fresh = tokio::task::spawn_blocking(move || {
            if !moving {
                move_aside(&config, d)?;
            }
            open_device(&config, d)
        })
        .await
        .map_err(|e| StoreError::Config(format!("opening the new device {d}: {e}")))??;
        if moving {
            if let Some(id) = &inner.identity {
                id.set_path(d, &target)?;
            }
        }
        self.swap_in_and_rebuild(d, fresh, options).await
    }

    /// Where a replace may put device `d`: an absolute path no other device uses, absent or
    /// empty (a folder without entries, or a file of no bytes).
    fn check_new_path(&self, d: usize, p: &Path) -> Result<()> {
        let bad = |why: String| {
            Err(StoreError::InvalidArgument(format!(
                "{}: {why}",
                p.display()
            )))
        };
        if !p.is_absolute() {
            return bad("the path to rebuild onto must be absolute".into());
        }
        if self.inner.identity.is_none() {
            return bad("a store without a data folder cannot record a device's new path".into());
        }
        for (i, o) in self.inner.devices.all().iter().enumerate() {
            if o.lock().unwrap().path.as_deref() == Some(p) {
                return bad(if i == d {
                    format!("device {d} is there already: replace it without a path")
                } else {
                    format!("device {i} is there")
                });
            }
        }
        match std::fs::metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => bad(format!("cannot be looked at ({e})")),
            Ok(m) if m.is_dir() => match std::fs::read_dir(p).map(|mut e| e.next().is_none()) {
                Ok(true) => Ok(()),
                Ok(false) => bad("the folder is not empty".into()),
                Err(e) => bad(format!("cannot be listed ({e})")),
            },
            Ok(m) if m.is_file() && m.len() == 0 => Ok(()),
            Ok(_) => bad("something is there already; give an absent path or an empty one".into()),
        }
    }

    /// Replaces failed device `d` by `device`, which the caller opened and which must be
    /// empty, and rebuilds it from the others in the background while the store serves (as
    /// [`Store::replace_device_with`]; for stores opened on devices of their own, such as the
    /// simulator's).
    pub async fn replace_device_onto(
        &self,
        d: usize,
        device: Arc<dyn Device>,
        options: RepairOptions,
    ) -> Result<RepairStatus> {
        let _one_at_a_time = self.inner.repair_ops.lock().await;
        self.check_replaceable(d).await?;
        check_empty(
            device.as_ref(),
            &format!("the device to rebuild device {d} onto"),
        )
        .await?;
        self.mark_rebuilding(d)?;
        let path = self.inner.devices.get(d).lock().unwrap().path.clone();
        let fresh = crate::devices::Opened {
            device,
            file: None,
            path,
        };
        self.swap_in_and_rebuild(d, fresh, options).await
    }

    /// What a replace asks first: an open store, a device that exists and is out of service,
    /// and no other rebuild or scrub running (a grow's or drain's move is stopped for it).
    async fn check_replaceable(&self, d: usize) -> Result<()> {
        self.check_open()?;
        self.check_device_index(d)?;
        if self.inner.manager.devices().readable(d) {
            return Err(StoreError::Conflict(format!(
                "device {d} is in service: take it out first (railstore device fail {d})"
            )));
        }
        self.stop_move().await;
        self.check_idle()
    }

    /// Records that device `d` is being rebuilt: a restart before the rebuild ends takes the
    /// device for what it is, half built.
    fn mark_rebuilding(&self, d: usize) -> Result<()> {
        if let Some(id) = &self.inner.identity {
            id.set_health(d, DeviceHealth::Rebuilding, Some("rebuild started".into()))?;
        }
        Ok(())
    }

    /// Puts `fresh` in device `d`'s slot, lets rails readmit it, and starts the rebuild.
    async fn swap_in_and_rebuild(
        &self,
        d: usize,
        fresh: crate::devices::Opened,
        options: RepairOptions,
    ) -> Result<RepairStatus> {
        let inner = &self.inner;
        let device: Arc<dyn Device> = Arc::new(RetryingDevice::new(fresh.device.clone()));
        let old = std::mem::replace(
            &mut *inner.devices.get(d).lock().unwrap(),
            crate::devices::Opened {
                device: device.clone(),
                ..fresh
            },
        );
        inner.slots.get(d).swap(device);
        if let Some(f) = old.file {
            // Its files are gone or set aside: nothing more is written through it.
            f.crash();
        }
        inner
            .rails_layer
            .readmit(d)
            .await
            .map_err(|source| StoreError::Device {
                what: "readmitting the new device",
                source,
            })?;
        let path = inner.devices.get(d).lock().unwrap().path.clone();
        tracing::info!(device = d, path = ?path, "rebuilding device while serving");
        self.start_rebuild(d, options)
    }

    /// Runs the rebuild of device `d` (already in its slot and readmitted) in the background.
    fn start_rebuild(&self, d: usize, options: RepairOptions) -> Result<RepairStatus> {
        let progress = Arc::new(RepairProgress::default());
        let store = self.clone();
        let p = progress.clone();
        self.start_run(RunKind::Rebuild(d), progress, async move {
            store.rebuild_in_place(d, options, p).await
        })
    }

    async fn rebuild_in_place(
        &self,
        d: usize,
        options: RepairOptions,
        progress: Arc<RepairProgress>,
    ) -> Result<RepairReport> {
        let inner = &self.inner;
        // The manager writes through rails, as for any object, so the rebuild's writes follow
        // the device's role like the clients' do.
        let through_rails = inner.manager.devices().device(d);
        let report = inner
            .manager
            .rebuild(d, through_rails, options, progress)
            .await
            .map_err(|e| match e {
                RedundancyError::Cancelled => StoreError::Conflict(
                    "stopped by the shutdown; the next start resumes it".into(),
                ),
                e => e.into(),
            })?;
        // It serves reads again: back under the schedule.
        inner.rails_layer.rebuilt(d);
        inner.manager.sync().await?;
        if inner.manager.devices().is_failed(d) {
            // Failed again while it was rebuilt (by the operator, or a write that did not
            // land): it stays out of service.
            return Err(StoreError::Conflict(format!(
                "device {d} failed while it was rebuilt; replace it again"
            )));
        }
        if let Some(id) = &inner.identity {
            id.readmit(d, inner.slots.get(d).as_ref()).await?;
            if inner.manager.devices().is_failed(d) {
                // It failed between the check and the record: record that instead.
                id.set_health(
                    d,
                    DeviceHealth::Failed,
                    Some("failed as it was readmitted".into()),
                )?;
            }
        }
        Ok(report)
    }

    /// Rebuilds again, in the background, every device a restart found half rebuilt (`serve`
    /// calls it after opening). Returns the devices it started on.
    pub async fn resume_repairs(&self) -> Result<Vec<usize>> {
        let Some(id) = self.inner.identity.clone() else {
            return Ok(Vec::new());
        };
        let half: Vec<usize> = (0..self.inner.slots.len())
            .filter(|&d| id.health(d).0 == DeviceHealth::Rebuilding)
            .collect();
        // One at a time: the first now, the next by the operator once it is done.
        if let Some(&d) = half.first() {
            tracing::info!(
                device = d,
                "a rebuild was cut off by a restart; starting it again"
            );
            self.replace_device(d).await?;
            return Ok(vec![d]);
        }
        Ok(Vec::new())
    }
}

/// Every `interval`, checks that each device in service still has its files; one whose folder
/// or files vanished or shrank leaves service (reads already decode around it, but without
/// this it would silently hold no redundancy).
pub(crate) async fn device_watch(store: Weak<Inner>, interval: Duration) {
    if interval.is_zero() {
        return;
    }
    loop {
        tokio::time::sleep(interval).await;
        let Some(inner) = store.upgrade() else { return };
        if inner.closing.load(Ordering::SeqCst) {
            return;
        }
        let files: Vec<_> = inner
            .devices
            .all()
            .iter()
            .enumerate()
            .filter(|(d, _)| inner.manager.devices().readable(*d))
            .filter_map(|(d, o)| o.lock().unwrap().file.clone().map(|f| (d, f)))
            .collect();
        if files.is_empty() {
            // Memory or injected devices: nothing to look at, and no thread to hop to (a
            // simulation in virtual time stays deterministic).
            continue;
        }
        let store = Store { inner };
        let gone = tokio::task::spawn_blocking(move || {
            files
                .into_iter()
                .filter_map(|(d, f)| f.vanished().map(|why| (d, why)))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (d, why) in gone {
            if let Err(e) = store.record_failure(d, &why) {
                // Not recorded, but not used either: its data is gone (and at the next start
                // its folder or identity is found missing).
                tracing::error!(device = d, error = %e, "recording a vanished device");
                store.inner.rails_layer.mark_failed(d);
                store.inner.manager.devices().mark_failed(d);
            }
        }
    }
}
