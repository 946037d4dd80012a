//! `slot`: a place in an array whose device can be swapped while the array serves. The layers
//! above (rails, the reliability manager) keep their handle on the slot; replacing a failed
//! device puts the new one in the slot, so nothing above has to be rebuilt around it.
//! Operations already running finish on the device they started on.

use crate::api::{
    CompactStats, Device, DeviceInfo, IterBatch, IterRequest, Limits, ReadRange, Retrieved,
    StoreMode,
};
use crate::error::Result;
use async_trait::async_trait;
use std::sync::{Arc, RwLock};

/// A swappable device.
pub struct DeviceSlot {
    current: RwLock<Arc<dyn Device>>,
}

impl DeviceSlot {
    /// A slot holding `device`.
    pub fn new(device: Arc<dyn Device>) -> DeviceSlot {
        DeviceSlot {
            current: RwLock::new(device),
        }
    }

    /// The device in the slot now.
    pub fn current(&self) -> Arc<dyn Device> {
        self.current.read().unwrap().clone()
    }

    /// Puts `device` in the slot; returns the one it held. Its limits must not be narrower
    /// than the old one's: the layers above checked keys and values against those.
    pub fn swap(&self, device: Arc<dyn Device>) -> Arc<dyn Device> {
        std::mem::replace(&mut *self.current.write().unwrap(), device)
    }
}

#[async_trait]
impl Device for DeviceSlot {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.current().store(key, value, mode).await
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.current().retrieve(key, range).await
    }

    async fn retrieve_part(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.current().retrieve_part(key, range).await
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.current().delete(key, must_exist).await
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        self.current().exist(keys).await
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        self.current().iterate(req).await
    }

    async fn info(&self) -> Result<DeviceInfo> {
        self.current().info().await
    }

    async fn sync(&self) -> Result<()> {
        self.current().sync().await
    }

    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats> {
        self.current().compact(budget_bytes).await
    }

    fn memory_bytes(&self) -> u64 {
        self.current().memory_bytes()
    }

    fn remote(&self) -> bool {
        self.current().remote()
    }

    fn limits(&self) -> Limits {
        self.current().limits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemConfig, MemDevice};

    #[tokio::test]
    async fn operations_reach_the_device_in_the_slot_now() {
        let old = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
        let new = Arc::new(MemDevice::new(MemConfig::default()).unwrap());
        let slot = DeviceSlot::new(old.clone());
        slot.store(b"a", b"1", StoreMode::Upsert).await.unwrap();
        let was = slot.swap(new.clone());
        assert!(Arc::ptr_eq(&was, &(old.clone() as Arc<dyn Device>)));
        slot.store(b"b", b"2", StoreMode::Upsert).await.unwrap();
        assert!(slot.retrieve(b"a", ReadRange::ALL).await.is_err());
        assert_eq!(old.exist(&[b"a", b"b"]).await.unwrap(), vec![true, false]);
        assert_eq!(new.exist(&[b"a", b"b"]).await.unwrap(), vec![false, true]);
    }
}
