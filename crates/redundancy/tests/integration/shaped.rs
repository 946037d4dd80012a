//! A memory device that presents itself otherwise: on another node, or admitting shorter
//! values than it could hold.

use async_trait::async_trait;
use railstore_device::*;
use std::sync::Arc;

pub struct Shaped {
    pub inner: Arc<MemDevice>,
    /// What [`Device::remote`] says.
    pub remote: bool,
    /// A smaller value limit than the memory device's, enforced.
    pub value_bytes_max: Option<usize>,
}

impl Shaped {
    /// `inner`, said to be on another node.
    pub fn remote(inner: Arc<MemDevice>) -> Shaped {
        Shaped {
            inner,
            remote: true,
            value_bytes_max: None,
        }
    }

    /// `inner`, admitting values of at most `max` bytes.
    pub fn limited(inner: Arc<MemDevice>, max: usize) -> Shaped {
        Shaped {
            inner,
            remote: false,
            value_bytes_max: Some(max),
        }
    }
}

#[async_trait]
impl Device for Shaped {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        self.limits().check(key, value)?;
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
        let limits = self.inner.limits();
        Limits {
            value_bytes_max: self.value_bytes_max.unwrap_or(limits.value_bytes_max),
            ..limits
        }
    }
    fn remote(&self) -> bool {
        self.remote
    }
}
