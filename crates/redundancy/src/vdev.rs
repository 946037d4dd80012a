//! The manager as a [`Device`]: the KV API of the devices issue over the whole array, so any
//! tool that drives a device (the device benchmark, tests) drives the reliability manager too.

use crate::error::RedundancyError;
use crate::format::TAG_OBJECT;
use crate::manager::Manager;
use async_trait::async_trait;
use futures_util::future::join_all;
use railstore_device::{
    Device, DeviceError, DeviceInfo, IterBatch, IterEntry, IterRequest, Limits, ReadRange,
    Retrieved, StoreMode,
};
use std::collections::BTreeSet;

impl From<RedundancyError> for DeviceError {
    fn from(e: RedundancyError) -> DeviceError {
        match e {
            RedundancyError::NotFound { key } => DeviceError::KeyNotFound { key },
            RedundancyError::Exists { key } => DeviceError::KeyExists { key },
            RedundancyError::KeyLength { len, min, max } => {
                DeviceError::KeyLength { len, min, max }
            }
            RedundancyError::ValueLength { len, max } => DeviceError::ValueLength {
                len: len as usize,
                max: max as usize,
            },
            RedundancyError::Offset { offset, len } => DeviceError::Offset {
                offset,
                value_len: len,
            },
            RedundancyError::Lost { key, .. } => DeviceError::Corrupt {
                location: crate::error::show_key(&key),
                reason: "more pieces lost than the mechanism tolerates",
            },
            RedundancyError::Device { source, .. } => source,
            other => DeviceError::io(
                "reliability manager",
                std::io::Error::other(other.to_string()),
            ),
        }
    }
}

#[async_trait]
impl Device for Manager {
    async fn store(
        &self,
        key: &[u8],
        value: &[u8],
        mode: StoreMode,
    ) -> railstore_device::Result<()> {
        Ok(self.put(key, value, mode, None).await?)
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> railstore_device::Result<Retrieved> {
        let (value, value_len) = self.get(key, range).await?;
        Ok(Retrieved {
            value: value.into(),
            value_len,
        })
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> railstore_device::Result<bool> {
        let existed = Manager::delete(self, key).await?;
        if must_exist && !existed {
            return Err(DeviceError::KeyNotFound { key: key.to_vec() });
        }
        Ok(existed)
    }

    async fn exist(&self, keys: &[&[u8]]) -> railstore_device::Result<Vec<bool>> {
        let res = join_all(keys.iter().map(|k| self.meta(k))).await;
        res.into_iter()
            .map(|r| r.map(|m| m.is_some()).map_err(DeviceError::from))
            .collect()
    }

    /// Lists user keys by merging every readable device's object keys (segment 0 pieces).
    async fn iterate(&self, req: &IterRequest) -> railstore_device::Result<IterBatch> {
        let io = self.devices();
        let mut prefix = vec![TAG_OBJECT];
        prefix.extend_from_slice(&req.prefix);
        let start_after = req.start_after.as_ref().map(|s| {
            let mut k = vec![TAG_OBJECT];
            k.extend_from_slice(s);
            k
        });
        let limit = if req.entries_max == 0 {
            usize::MAX
        } else {
            req.entries_max
        };
        let batches = join_all((0..io.len()).filter(|&d| !io.is_failed(d)).map(|d| {
            let r = IterRequest {
                prefix: prefix.clone(),
                start_after: start_after.clone(),
                entries_max: req.entries_max,
                with_values: false,
            };
            async move { (d, io.iterate(d, &r).await) }
        }))
        .await;
        let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
        // A device that stopped early bounds how far the merged listing is complete.
        let mut complete_up_to: Option<Vec<u8>> = None;
        for (d, b) in batches {
            let b = b.map_err(|e| {
                DeviceError::from(RedundancyError::Device {
                    device: d,
                    source: e,
                })
            })?;
            if b.more {
                if let Some(last) = b.entries.last() {
                    if complete_up_to.as_ref().is_none_or(|c| last.key < *c) {
                        complete_up_to = Some(last.key.clone());
                    }
                }
            }
            keys.extend(b.entries.into_iter().map(|e| e.key));
        }
        let mut entries = Vec::new();
        let mut more = complete_up_to.is_some();
        for k in keys {
            if complete_up_to.as_ref().is_some_and(|c| k > *c) {
                break;
            }
            if entries.len() == limit {
                more = true;
                break;
            }
            let user_key = k[1..].to_vec();
            let value = if req.with_values {
                match self.get(&user_key, ReadRange::ALL).await {
                    Ok((v, _)) => Some(v),
                    // Deleted between the listing and the read.
                    Err(RedundancyError::NotFound { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            } else {
                None
            };
            entries.push(IterEntry {
                key: user_key,
                value,
            });
        }
        Ok(IterBatch { entries, more })
    }

    async fn info(&self) -> railstore_device::Result<DeviceInfo> {
        let io = self.devices();
        let mut info = DeviceInfo {
            limits: self.limits(),
            optimal_value_bytes: 64 << 10,
            queue_depth_max: 0,
            ..DeviceInfo::default()
        };
        for d in 0..io.len() {
            if io.is_failed(d) {
                continue;
            }
            let i = io.device(d).info().await?;
            info.capacity_bytes += i.capacity_bytes;
            info.used_bytes += i.used_bytes;
            info.live_bytes += i.live_bytes;
            info.queue_depth_max += i.queue_depth_max;
        }
        Ok(info)
    }

    async fn sync(&self) -> railstore_device::Result<()> {
        Ok(Manager::sync(self).await?)
    }

    async fn compact(
        &self,
        budget_bytes: u64,
    ) -> railstore_device::Result<railstore_device::CompactStats> {
        let io = self.devices();
        let mut total = railstore_device::CompactStats::default();
        for d in 0..io.len() {
            if io.is_failed(d) {
                continue;
            }
            let s = io.device(d).compact(budget_bytes).await?;
            total.segments_freed += s.segments_freed;
            total.bytes_copied += s.bytes_copied;
            total.bytes_freed += s.bytes_freed;
        }
        Ok(total)
    }

    fn limits(&self) -> Limits {
        Limits {
            key_bytes_min: 1,
            key_bytes_max: self.key_bytes_max(),
            value_bytes_max: usize::try_from(self.config().object_bytes_max).unwrap_or(usize::MAX),
        }
    }
}
