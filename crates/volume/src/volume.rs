//! One volume's block I/O: reads and writes at any offset and length, striped over objects of
//! the volume's object size.
//!
//! A write that covers a whole object stores it; one that covers part of an object reads the
//! object, patches it and stores it again (read-modify-write), under the object's lock, so
//! writes to one object are applied one at a time and writes to different objects run in
//! parallel. Every object store is atomic (the manager keeps the old version until the new one
//! is whole), so a crash leaves each object as it was before or after a write, never torn.
//! Bytes never written read as zeros: an object that does not exist is all zeros, and so is
//! any part of an object beyond its stored length (a volume grown since it was written).
//! Zeroing (trim, write-zeroes) deletes whole objects and zeroes parts of others.
//! Durability is the store's: a write is acknowledged once every piece is on its device, and
//! [`Volume::flush`] (or a write with `fua`) makes every acknowledged write durable.
//!
//! One overwrite in flight per object. The manager overwrites a split or packed object's
//! pieces in place; a crash that cuts one unsynced overwrite leaves the old and the new
//! version sharing the positions, and one of them whole. Two unsynced overwrites of one
//! object could leave three versions, none whole, and so lose a flushed one (the simulator
//! found it). So a write to an object that was written since the last completed flush
//! flushes first.

use crate::error::{Result, VolumeError};
use crate::meta::{data_key, VolumeMeta};
use futures_util::future::{join_all, try_join_all};
use railstore_device::{ReadRange, StoreMode};
use railstore_redundancy::{Mechanism, RedundancyError};
use railstore_store::Store;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

/// Stripes of the per-object lock table.
const OBJECT_LOCK_STRIPES: usize = 1024;

/// An open volume.
pub struct Volume {
    store: Store,
    meta: RwLock<VolumeMeta>,
    mechanism: Option<Mechanism>,
    /// Serialises read-modify-writes of one object.
    object_locks: Vec<tokio::sync::Mutex<()>>,
    /// Held shared by every operation and exclusively by a resize or delete, which so see no
    /// operation half done.
    ops: tokio::sync::RwLock<()>,
    deleted: AtomicBool,
    /// Flushes started (each takes the next number).
    flushes_started: AtomicU64,
    /// The highest number of a flush that completed.
    flushed: AtomicU64,
    /// Objects written and not yet known durable: index -> `flushes_started` when the write
    /// completed (a flush numbered above it covers it).
    unflushed: Mutex<HashMap<u64, u64>>,
}

/// Part of a read: `len` bytes at `offset` of the volume, with their bytes, or `None` for a
/// hole (no object there: zeros).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    pub offset: u64,
    pub len: u64,
    pub data: Option<Vec<u8>>,
}

/// The part of one object a request touches.
#[derive(Debug, Clone, Copy)]
struct Span {
    index: u64,
    /// Offset within the object.
    within: u64,
    len: u64,
    /// Offset within the request's buffer.
    at: usize,
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume")
            .field("meta", &*self.meta.read().unwrap())
            .finish()
    }
}

impl Volume {
    pub(crate) fn new(store: Store, meta: VolumeMeta) -> Result<Volume> {
        let mechanism = meta.mechanism()?;
        Ok(Volume {
            store,
            meta: RwLock::new(meta),
            mechanism,
            object_locks: (0..OBJECT_LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            ops: tokio::sync::RwLock::new(()),
            deleted: AtomicBool::new(false),
            flushes_started: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            unflushed: Mutex::new(HashMap::new()),
        })
    }

    /// The volume's record as it is now.
    pub fn meta(&self) -> VolumeMeta {
        self.meta.read().unwrap().clone()
    }

    /// Bytes the volume has.
    pub fn size(&self) -> u64 {
        self.meta.read().unwrap().size
    }

    /// Reads `len` bytes at `offset`.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len as usize];
        for e in self.read_extents(offset, len).await? {
            if let Some(bytes) = e.data {
                let at = (e.offset - offset) as usize;
                out[at..at + bytes.len()].copy_from_slice(&bytes);
            }
        }
        Ok(out)
    }

    /// Reads `len` bytes at `offset` as consecutive extents, in order: the bytes of objects
    /// that exist, and holes (`data: None`, reading as zeros) where objects do not. Adjacent
    /// holes are merged.
    pub async fn read_extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        let _op = self.enter().await?;
        let meta = self.meta();
        let spans = spans(&meta, "read", offset, len)?;
        let parts = try_join_all(spans.iter().map(|s| self.read_span(&meta, *s))).await?;
        let mut out: Vec<Extent> = Vec::with_capacity(spans.len());
        for (s, data) in spans.iter().zip(parts) {
            let at = offset + s.at as u64;
            match (out.last_mut(), data) {
                (Some(last), None) if last.data.is_none() => last.len += s.len,
                (_, data) => out.push(Extent {
                    offset: at,
                    len: s.len,
                    data,
                }),
            }
        }
        Ok(out)
    }

    /// Which parts of `len` bytes at `offset` are allocated: consecutive runs, in order, each
    /// `true` where some object may hold data and `false` where none exists (reads as zeros).
    /// Until the store is settled after an unclean start every part is reported allocated
    /// (what a read will show is not decided yet).
    pub async fn allocation(&self, offset: u64, len: u64) -> Result<Vec<(u64, bool)>> {
        let _op = self.enter().await?;
        let meta = self.meta();
        let spans = spans(&meta, "block status", offset, len)?;
        let settled = self.store.settled();
        let manager = self.store.manager();
        let held = try_join_all(spans.iter().map(|s| async move {
            if !settled {
                return Ok::<bool, VolumeError>(true);
            }
            Ok(manager.holds(&data_key(meta.id, s.index)).await?)
        }))
        .await?;
        let mut out: Vec<(u64, bool)> = Vec::new();
        for (s, allocated) in spans.iter().zip(held) {
            match out.last_mut() {
                Some((n, a)) if *a == allocated => *n += s.len,
                _ => out.push((s.len, allocated)),
            }
        }
        Ok(out)
    }

    /// Writes `data` at `offset`; with `fua`, durably before it returns.
    pub async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        {
            let _op = self.enter().await?;
            let meta = self.meta();
            let spans = spans(&meta, "write", offset, data.len() as u64)?;
            // Every part runs to its end, even when one fails: a store cut off half-way could
            // leave an overwrite in flight that `written` never recorded.
            all_of(join_all(spans.iter().map(|s| {
                let bytes = &data[s.at..s.at + s.len as usize];
                self.write_span(&meta, *s, Some(bytes))
            })))
            .await?;
        }
        if fua {
            self.flush().await?;
        }
        Ok(())
    }

    /// Makes `len` bytes at `offset` read as zeros (trim and write-zeroes): whole objects are
    /// deleted, parts of objects zeroed; with `fua`, durably before it returns.
    pub async fn zero(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        {
            let _op = self.enter().await?;
            let meta = self.meta();
            let spans = spans(&meta, "zero", offset, len)?;
            all_of(join_all(
                spans.iter().map(|s| self.write_span(&meta, *s, None)),
            ))
            .await?;
        }
        if fua {
            self.flush().await?;
        }
        Ok(())
    }

    /// Makes every write acknowledged so far durable.
    pub async fn flush(&self) -> Result<()> {
        self.check_live()?;
        self.commit().await
    }

    async fn commit(&self) -> Result<()> {
        let n = self.flushes_started.fetch_add(1, Ordering::SeqCst) + 1;
        self.store.flush().await?;
        self.flushed.fetch_max(n, Ordering::SeqCst);
        self.unflushed.lock().unwrap().retain(|_, w| *w >= n);
        Ok(())
    }

    /// Flushes first when object `index` was written since the last completed flush (see the
    /// module docs); call under the object's lock.
    async fn settle_overwrite(&self, index: u64) -> Result<()> {
        let written = self.unflushed.lock().unwrap().get(&index).copied();
        if written.is_some_and(|w| self.flushed.load(Ordering::SeqCst) <= w) {
            self.commit().await?;
        }
        Ok(())
    }

    /// Records that object `index` was just written; call under the object's lock.
    fn written(&self, index: u64) {
        let now = self.flushes_started.load(Ordering::SeqCst);
        self.unflushed.lock().unwrap().insert(index, now);
    }

    fn check_live(&self) -> Result<()> {
        if self.deleted.load(Ordering::SeqCst) {
            return Err(VolumeError::Deleted(self.meta.read().unwrap().name.clone()));
        }
        Ok(())
    }

    async fn enter(&self) -> Result<tokio::sync::RwLockReadGuard<'_, ()>> {
        let guard = self.ops.read().await;
        self.check_live()?;
        Ok(guard)
    }

    /// Waits for every operation in flight and keeps new ones out (resize, delete).
    pub(crate) async fn exclusive(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.ops.write().await
    }

    pub(crate) fn set_meta(&self, meta: VolumeMeta) {
        *self.meta.write().unwrap() = meta;
    }

    pub(crate) fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::SeqCst);
    }

    /// One object's span; `None` when the object does not exist (a hole).
    async fn read_span(&self, meta: &VolumeMeta, s: Span) -> Result<Option<Vec<u8>>> {
        let key = data_key(meta.id, s.index);
        let range = ReadRange {
            offset: s.within,
            len: Some(s.len),
        };
        match self.get(&key, range).await {
            Ok(mut bytes) => {
                bytes.resize(s.len as usize, 0);
                Ok(Some(bytes))
            }
            // Beyond the stored length of an object written before the volume grew.
            Err(RedundancyError::Offset { .. }) => Ok(Some(vec![0; s.len as usize])),
            Err(RedundancyError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// `range` of an object. Until the store is settled after an unclean start
    /// ([`Store::settled`]) the object is read resolved, the way scrub will leave it, so a block
    /// never shows one version and then another.
    async fn get(&self, key: &[u8], range: ReadRange) -> Result<Vec<u8>, RedundancyError> {
        let manager = self.store.manager();
        if self.store.settled() {
            return manager.get(key, range).await.map(|(b, _)| b);
        }
        let (object, len) = manager.get_resolved(key).await?;
        let (start, end) = range.resolve(len).map_err(|_| RedundancyError::Offset {
            offset: range.offset,
            len,
        })?;
        Ok(object[start as usize..end as usize].to_vec())
    }

    /// Writes `bytes` (or zeros, for `None`) over one object's span.
    async fn write_span(&self, meta: &VolumeMeta, s: Span, bytes: Option<&[u8]>) -> Result<()> {
        let manager = self.store.manager();
        let key = data_key(meta.id, s.index);
        let object_len = meta.object_len(s.index);
        let _lock = self.object_locks[(s.index % OBJECT_LOCK_STRIPES as u64) as usize]
            .lock()
            .await;
        self.settle_overwrite(s.index).await?;
        if s.len == object_len {
            let done = match bytes {
                Some(b) => {
                    manager
                        .put(&key, b, StoreMode::Upsert, self.mechanism)
                        .await
                }
                None => manager.delete(&key).await.map(|_| ()),
            };
            // A write that failed may have landed in part: it counts as one in flight.
            self.written(s.index);
            return Ok(done?);
        }
        let mut object = match self.get(&key, ReadRange::ALL).await {
            Ok(b) => b,
            // Zeroing part of an object never written changes nothing.
            Err(RedundancyError::NotFound { .. }) if bytes.is_none() => return Ok(()),
            Err(RedundancyError::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        object.resize(object_len as usize, 0);
        let target = &mut object[s.within as usize..(s.within + s.len) as usize];
        match bytes {
            Some(b) => target.copy_from_slice(b),
            None => target.fill(0),
        }
        let done = manager
            .put(&key, &object, StoreMode::Upsert, self.mechanism)
            .await;
        self.written(s.index);
        Ok(done?)
    }
}

/// Waits for every part; the first error, if any.
async fn all_of(parts: impl std::future::Future<Output = Vec<Result<()>>>) -> Result<()> {
    parts.await.into_iter().collect()
}

/// Cuts `len` bytes at `offset` into per-object spans; refuses a range beyond the volume.
fn spans(meta: &VolumeMeta, what: &'static str, offset: u64, len: u64) -> Result<Vec<Span>> {
    let end = offset.checked_add(len).filter(|&e| e <= meta.size);
    let Some(end) = end else {
        return Err(VolumeError::OutOfRange {
            what,
            offset,
            end: offset.saturating_add(len),
            size: meta.size,
        });
    };
    let mut out = Vec::new();
    let mut pos = offset;
    while pos < end {
        let index = pos / meta.object_bytes;
        let within = pos % meta.object_bytes;
        let n = (meta.object_bytes - within).min(end - pos);
        out.push(Span {
            index,
            within,
            len: n,
            at: (pos - offset) as usize,
        });
        pos += n;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(size: u64, object_bytes: u64) -> VolumeMeta {
        VolumeMeta {
            name: "v".into(),
            id: 1,
            size,
            object_bytes,
            mechanism: None,
        }
    }

    #[test]
    fn spans_cover_the_range_object_by_object() {
        let m = meta(10_000, 4096);
        let s = spans(&m, "read", 4000, 5000).unwrap();
        let got: Vec<_> = s.iter().map(|s| (s.index, s.within, s.len, s.at)).collect();
        assert_eq!(
            got,
            vec![(0, 4000, 96, 0), (1, 0, 4096, 96), (2, 0, 808, 4192)]
        );
        assert!(spans(&m, "read", 9_000, 1_001).is_err());
        assert!(spans(&m, "read", u64::MAX, 2).is_err());
        assert!(spans(&m, "read", 10_000, 0).unwrap().is_empty());
    }
}
