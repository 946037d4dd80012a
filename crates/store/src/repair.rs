//! Scrub and rebuild through the store: the reliability manager does the work; the store opens
//! the array the way the repair needs it.

use crate::config::{DeviceKind, StoreConfig};
use crate::error::{Result, StoreError};
use crate::identity::DeviceHealth;
use crate::store::Store;
use railstore_device::Device;
use railstore_redundancy::{RepairOptions, RepairProgress, RepairReport};
use std::sync::Arc;

impl Store {
    /// Verifies every object and set, repairs what is wrong and rolls interrupted writes
    /// forward or back (run after an unclean shutdown; safe while serving). Its report is kept
    /// in the data folder (`scrubber.rs`).
    pub async fn scrub(
        &self,
        options: RepairOptions,
        progress: Arc<RepairProgress>,
    ) -> Result<RepairReport> {
        self.scrub_and_record("requested", options, progress).await
    }

    /// Rebuilds device `device` of a stopped store onto an empty device at its place: its old
    /// contents (if any) are moved aside, then every object and set that had a piece on it is
    /// restored from the others. Runs without separation (the store is offline), then shuts
    /// down cleanly.
    pub async fn rebuild_offline(
        config: StoreConfig,
        device: usize,
        options: RepairOptions,
        progress: Arc<RepairProgress>,
    ) -> Result<RepairReport> {
        Store::rebuild_offline_on(config, device, None, options, progress).await
    }

    /// [`Store::rebuild_offline`] over devices the caller made (see
    /// [`Store::open_with_devices`]); `devices[device]` is the empty replacement.
    pub async fn rebuild_offline_with_devices(
        config: StoreConfig,
        device: usize,
        devices: Vec<Arc<dyn Device>>,
        options: RepairOptions,
        progress: Arc<RepairProgress>,
    ) -> Result<RepairReport> {
        Store::rebuild_offline_on(config, device, Some(devices), options, progress).await
    }

    async fn rebuild_offline_on(
        mut config: StoreConfig,
        device: usize,
        injected: Option<Vec<Arc<dyn Device>>>,
        options: RepairOptions,
        progress: Arc<RepairProgress>,
    ) -> Result<RepairReport> {
        if injected.is_some() || config.devices.kind != DeviceKind::Mem {
            // A grown array has the devices its layout file names.
            crate::grow::adopt_epochs(&mut config)?;
        }
        if device >= config.device_count() {
            return Err(StoreError::InvalidArgument(format!(
                "device {device}: the array has {} (0 to {})",
                config.device_count(),
                config.device_count() - 1
            )));
        }
        config.separation = None;
        let store = Store::open_array(config, Some(device), injected).await?;
        let identity = store.inner.identity.clone();
        if let Some(id) = &identity {
            // A rebuild cut off leaves the device out of service: the next start does not
            // take a half-rebuilt device for a current one.
            id.set_health(
                device,
                DeviceHealth::Rebuilding,
                Some("rebuild started".into()),
            )?;
        }
        let replacement = store.inner.slots.get(device).clone() as Arc<dyn Device>;
        let report = store
            .inner
            .manager
            .rebuild(device, replacement.clone(), options, progress)
            .await?;
        // Back in service with what could be rebuilt (objects lost elsewhere are reported).
        store.inner.manager.sync().await?;
        if let Some(id) = &identity {
            id.readmit(device, replacement.as_ref()).await?;
        }
        store.shutdown().await?;
        Ok(report)
    }
}
