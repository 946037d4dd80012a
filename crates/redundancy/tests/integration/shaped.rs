//! A memory device that presents itself as on another node.

use async_trait::async_trait;
use railstore_device::*;
use std::sync::Arc;

pub struct Shaped {
    pub inner: Arc<MemDevice>,
    /// What [`Device::remote`] says.
    pub remote: bool,
}

impl Shaped {
    /// `inner`, said to be on another node.
    pub fn remote(inner: Arc<MemDevice>) -> Shaped {
        Shaped {
            inner,
            remote: true,
        }
    }
}

#[async_trait]
impl Device for Shaped {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.inner.store(key, value, mode).await
    }
    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.inner.retrieve(key, range).await
    }
    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.inner.delete(key, must_exist).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        self.inner.exist(keys).await
    }
    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        self.inner.iterate(req).await
    }
    async fn info(&self) -> Result<DeviceInfo> {
        self.inner.info().await
    }
    async fn sync(&self) -> Result<()> {
        self.inner.sync().await
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
    fn remote(&self) -> bool {
        self.remote
    }
}
