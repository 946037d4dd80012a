//! The volumes of a store: created, listed, resized and deleted while the store serves; found
//! again when it opens.
//!
//! Crash safety. A volume's record is stored (and made durable) before `create` returns, and
//! removed before its objects are: a crash in the middle of a delete leaves objects that no
//! record names, which [`Volumes::open`] deletes. A shrink zeroes and deletes what lies beyond
//! the new size before the record says it: a crash in between leaves the old size with the cut
//! part reading as zeros, never a smaller volume whose later growth shows old bytes.

use crate::error::{Result, VolumeError};
use crate::meta::{
    data_prefix, meta_key, meta_prefix, parse_data_key, volume_data_prefix, VolumeMeta, VolumeSpec,
};
use crate::volume::Volume;
use railstore_device::{ReadRange, StoreMode};
use railstore_redundancy::RedundancyError;
use railstore_store::Store;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// The volumes of one store.
pub struct Volumes {
    store: Store,
    open: Mutex<BTreeMap<String, Arc<Volume>>>,
    /// One create, resize or delete at a time.
    changes: tokio::sync::Mutex<()>,
}

/// What `list` and `info` tell about a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeInfo {
    pub name: String,
    pub size: u64,
    pub object_bytes: u64,
    /// `hybrid` (the store's policy) or the mechanism's name.
    pub mechanism: String,
    /// Objects the volume spans.
    pub objects: u64,
    /// Objects stored (the rest read as zeros); only `info` counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_stored: Option<u64>,
}

impl VolumeInfo {
    fn of(meta: &VolumeMeta) -> VolumeInfo {
        VolumeInfo {
            name: meta.name.clone(),
            size: meta.size,
            object_bytes: meta.object_bytes,
            mechanism: meta.mechanism.clone().unwrap_or_else(|| "hybrid".into()),
            objects: meta.objects(),
            objects_stored: None,
        }
    }
}

impl std::fmt::Debug for Volumes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volumes")
            .field(
                "open",
                &self.open.lock().unwrap().keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Volumes {
    /// Finds the store's volumes and deletes objects of volumes whose delete a crash cut off.
    pub async fn open(store: Store) -> Result<Arc<Volumes>> {
        let manager = store.manager();
        let mut open = BTreeMap::new();
        for key in manager.keys(&meta_prefix()).await? {
            let bytes = match manager.get(&key, ReadRange::ALL).await {
                Ok((b, _)) => b,
                // Listed keys may be leftovers of a delete (see `Manager::keys`).
                Err(RedundancyError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let meta = VolumeMeta::decode(&key, &bytes)?;
            open.insert(
                meta.name.clone(),
                Arc::new(Volume::new(store.clone(), meta)?),
            );
        }
        let ids: BTreeSet<u64> = open.values().map(|v| v.meta().id).collect();
        let mut orphans = 0u64;
        for key in manager.keys(&data_prefix()).await? {
            if parse_data_key(&key).is_some_and(|(id, _)| !ids.contains(&id)) {
                manager.delete(&key).await?;
                orphans += 1;
            }
        }
        if orphans > 0 {
            store.flush().await?;
            tracing::info!(
                objects = orphans,
                "deleted the objects of volumes whose delete was cut off"
            );
        }
        Ok(Arc::new(Volumes {
            store,
            open: Mutex::new(open),
            changes: tokio::sync::Mutex::new(()),
        }))
    }

    /// Creates a volume (it reads as zeros) and makes its record durable.
    pub async fn create(&self, spec: VolumeSpec) -> Result<VolumeInfo> {
        spec.check()?;
        let _change = self.changes.lock().await;
        if self.open.lock().unwrap().contains_key(&spec.name) {
            return Err(VolumeError::Exists(spec.name));
        }
        let meta = VolumeMeta {
            name: spec.name.clone(),
            id: railstore_store::random_id().max(1),
            size: spec.size,
            object_bytes: spec.object_bytes,
            mechanism: spec.mechanism.map(|m| m.to_string()),
        };
        let volume = Volume::new(self.store.clone(), meta.clone())?;
        let manager = self.store.manager();
        match manager
            .put(
                &meta_key(&meta.name),
                &meta.encode(),
                StoreMode::InsertOnly,
                None,
            )
            .await
        {
            Ok(()) => {}
            Err(RedundancyError::Exists { .. }) => return Err(VolumeError::Exists(spec.name)),
            Err(e) => return Err(e.into()),
        }
        self.store.flush().await?;
        self.open
            .lock()
            .unwrap()
            .insert(meta.name.clone(), Arc::new(volume));
        tracing::info!(volume = %meta.name, size = meta.size, object_bytes = meta.object_bytes, mechanism = meta.mechanism.as_deref().unwrap_or("hybrid"), "volume created");
        Ok(VolumeInfo::of(&meta))
    }

    /// The volume named `name`, for I/O.
    pub fn get(&self, name: &str) -> Result<Arc<Volume>> {
        self.open
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .ok_or_else(|| VolumeError::NotFound(name.to_string()))
    }

    /// Every volume, by name.
    pub fn list(&self) -> Vec<VolumeInfo> {
        self.open
            .lock()
            .unwrap()
            .values()
            .map(|v| VolumeInfo::of(&v.meta()))
            .collect()
    }

    /// One volume, with the objects it has stored counted.
    pub async fn info(&self, name: &str) -> Result<VolumeInfo> {
        let meta = self.get(name)?.meta();
        let stored = self
            .store
            .manager()
            .keys(&volume_data_prefix(meta.id))
            .await?
            .len() as u64;
        Ok(VolumeInfo {
            objects_stored: Some(stored),
            ..VolumeInfo::of(&meta)
        })
    }

    /// Changes the volume's size; what a shrink cuts off reads as zeros if it grows again.
    pub async fn resize(&self, name: &str, size: u64) -> Result<VolumeInfo> {
        crate::meta::check_size(size)?;
        let _change = self.changes.lock().await;
        let volume = self.get(name)?;
        let _quiet = volume.exclusive().await;
        let old = volume.meta();
        let new = VolumeMeta {
            size,
            ..old.clone()
        };
        if size < old.size {
            // What lies beyond the new size goes first (see the module docs).
            self.cut(&old, size).await?;
        }
        self.store
            .manager()
            .put(&meta_key(name), &new.encode(), StoreMode::UpdateOnly, None)
            .await?;
        self.store.flush().await?;
        volume.set_meta(new.clone());
        tracing::info!(volume = %name, from = old.size, to = size, "volume resized");
        Ok(VolumeInfo::of(&new))
    }

    /// Zeroes `old`'s bytes from `from` on: the object holding `from` in part, the rest whole.
    async fn cut(&self, old: &VolumeMeta, from: u64) -> Result<()> {
        let manager = self.store.manager();
        let first_whole = from.div_ceil(old.object_bytes);
        if !from.is_multiple_of(old.object_bytes) {
            let index = from / old.object_bytes;
            let keep = (from % old.object_bytes) as usize;
            let key = crate::meta::data_key(old.id, index);
            // Resolved: after an unclean start the object's pieces may still disagree.
            match manager.get_resolved(&key).await {
                Ok((mut object, _)) if object.len() > keep => {
                    object.truncate(keep);
                    manager
                        .put(&key, &object, StoreMode::Upsert, old.mechanism()?)
                        .await?;
                }
                Ok(_) | Err(RedundancyError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for key in manager.keys(&volume_data_prefix(old.id)).await? {
            if parse_data_key(&key).is_some_and(|(_, i)| i >= first_whole) {
                manager.delete(&key).await?;
            }
        }
        Ok(())
    }

    /// Deletes a volume: its record at once (durably), then its objects.
    pub async fn delete(&self, name: &str) -> Result<()> {
        let _change = self.changes.lock().await;
        let volume = self.get(name)?;
        let _quiet = volume.exclusive().await;
        volume.mark_deleted();
        let meta = volume.meta();
        let manager = self.store.manager();
        manager.delete(&meta_key(name)).await?;
        self.store.flush().await?;
        self.open.lock().unwrap().remove(name);
        let mut objects = 0;
        for key in manager.keys(&volume_data_prefix(meta.id)).await? {
            manager.delete(&key).await?;
            objects += 1;
        }
        self.store.flush().await?;
        tracing::info!(volume = %name, objects, "volume deleted");
        Ok(())
    }
}
