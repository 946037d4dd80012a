//! Opening the array the configuration names: `file` devices (folders under the data folder, or
//! the files and block devices listed), simulated SSDs over them, or memory.

use crate::config::{DeviceKind, StoreConfig};
use crate::error::{Result, StoreError};
use railstore_device::{
    CompactionPolicy, Device, FileConfig, FileDevice, MemConfig, MemDevice, SimConfig, SimDevice,
};
use std::path::PathBuf;
use std::sync::Arc;

/// One opened device.
#[derive(Clone)]
pub(crate) struct Opened {
    /// What the layers above use.
    pub device: Arc<dyn Device>,
    /// The file device underneath, to close it cleanly.
    pub file: Option<Arc<FileDevice>>,
    /// Where it lives, for logs and status.
    pub path: Option<PathBuf>,
}

/// Where device `i` lives.
pub(crate) fn device_path(cfg: &StoreConfig, i: usize) -> PathBuf {
    match cfg.devices.paths.get(i) {
        Some(p) => p.clone(),
        None => cfg.data_dir.join("devices").join(i.to_string()),
    }
}

/// Opens device `i` of the configuration.
pub(crate) fn open_device(cfg: &StoreConfig, i: usize) -> Result<Opened> {
    let d = &cfg.devices;
    if d.kind == DeviceKind::Mem {
        let mem = MemDevice::new(MemConfig {
            capacity_bytes: d.capacity_bytes,
            ..MemConfig::default()
        })
        .map_err(|e| StoreError::Config(format!("device {i}: {e}")))?;
        return Ok(Opened {
            device: Arc::new(mem),
            file: None,
            path: None,
        });
    }
    let path = device_path(cfg, i);
    let file = Arc::new(
        FileDevice::open(
            &path,
            FileConfig {
                capacity_bytes: d.capacity_bytes,
                direct_io: d.direct_io,
                // Under separation a device compacts only while it writes (rails asks).
                compaction: if cfg.separation.is_some() {
                    CompactionPolicy::Manual
                } else {
                    FileConfig::default().compaction
                },
                ..FileConfig::default()
            },
        )
        .map_err(|e| StoreError::Config(format!("device {i} at {}: {e}", path.display())))?,
    );
    let device: Arc<dyn Device> = match d.kind {
        DeviceKind::Sim => Arc::new(
            SimDevice::new(file.clone(), SimConfig::for_logical_bytes(d.capacity_bytes))
                .map_err(|e| StoreError::Config(format!("device {i}: {e}")))?,
        ),
        _ => file.clone(),
    };
    Ok(Opened {
        device,
        file: Some(file),
        path: Some(path),
    })
}

/// Refuses a device the caller gave that holds anything (`what` names it in the error).
pub(crate) async fn check_empty(device: &dyn Device, what: &str) -> Result<()> {
    let keys = device
        .info()
        .await
        .map_err(|source| StoreError::Device {
            what: "looking at a device given to fill",
            source,
        })?
        .key_count;
    if keys > 0 {
        return Err(StoreError::InvalidArgument(format!(
            "{what} holds {keys} keys: it must be empty"
        )));
    }
    Ok(())
}
