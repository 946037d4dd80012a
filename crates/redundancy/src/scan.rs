//! Reading every object under a prefix at once: each device's first-segment pieces under the
//! prefix with one iteration with values (which the `file` device reads in log order,
//! neighbours together), instead of one [`Manager::get`] per key. The store loads its index
//! this way at start (issue 20): a `get` per record cost a random device read each, 20 µs per
//! object.
//!
//! It answers only what it can answer at least as surely as `get`'s cheap read: an object of
//! one segment held whole (a copy, a hashed piece, a packed member) on the devices placement
//! puts it on, every piece of it that a device in service holds agreeing on one version and
//! its bytes. Anything else (shards, several segments, copies that disagree or fail their
//! checks, pieces off their places, a write in progress) is left to `get` and its careful path.

use crate::error::{RedundancyError, Result};
use crate::format::{segment_key, PieceHeader, PieceKind};
use crate::inner::Inner;
use crate::manager::{mechanism_of, Manager, Resolved};
use crate::mechanism::Mechanism;
use railstore_device::{IterEntry, IterRequest};

/// Keys per device iteration: large, so that the device reads its log in long runs; the
/// devices are read at once, each with one batch in flight, a few hundred bytes a record.
const SCAN_BATCH_KEYS: usize = 1 << 16;

/// What [`Manager::scan`] found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Objects read whole, with their bytes, in key order.
    pub values: Vec<(Vec<u8>, Vec<u8>)>,
    /// Keys some device holds a first segment of that the scan did not answer: read them with
    /// [`Manager::get`] (which may find nothing: a key listed here can be absent, as with
    /// [`Manager::keys`]).
    pub others: Vec<Vec<u8>>,
}

/// What the pieces of one key said so far.
#[derive(Default)]
struct Seen {
    whole: Option<Resolved>,
    /// A piece the scan cannot vouch for: the key goes to `get`.
    unsure: bool,
    /// The version every piece named.
    version: Option<u64>,
}

/// One device's pieces under the prefix: a batch being taken in and the request for the next.
struct Cursor {
    d: usize,
    batch: std::vec::IntoIter<IterEntry>,
    head: Option<IterEntry>,
    /// The next batch's request; `None` once the device has given its last.
    next: Option<IterRequest>,
    /// The metadata change stamps from before the batch was read ([`Inner::stamps_now`]).
    stamps: std::sync::Arc<Vec<u64>>,
}

impl Cursor {
    fn advance(&mut self) {
        self.head = self.batch.next();
    }
}

impl Manager {
    /// Every object under `prefix`: those the pieces answer whole (see the module docs) with
    /// their bytes, and the keys left for [`Manager::get`]. Together they are the keys
    /// [`Manager::keys`] lists. The devices' pieces come sorted; they are merged a batch at a
    /// time, each device reading its next batch at once with the others.
    pub async fn scan(&self, prefix: &[u8]) -> Result<Scan> {
        self.scan_in_batches(prefix, SCAN_BATCH_KEYS).await
    }

    async fn scan_in_batches(&self, prefix: &[u8], batch_keys: usize) -> Result<Scan> {
        let inner = &self.inner;
        let first = IterRequest {
            prefix: segment_key(prefix, 0, 0),
            start_after: None,
            entries_max: batch_keys,
            with_values: true,
        };
        let mut cursors: Vec<Cursor> = (0..inner.io.len())
            .filter(|&d| !inner.io.is_failed(d))
            .map(|d| Cursor {
                d,
                batch: Vec::new().into_iter(),
                head: None,
                next: Some(first.clone()),
                stamps: Default::default(),
            })
            .collect();
        let mut out = Scan::default();
        loop {
            // Devices whose batch is taken in read their next one, all at once.
            let stamps = std::sync::Arc::new(inner.stamps_now());
            let refills = cursors
                .iter_mut()
                .filter(|c| c.head.is_none() && c.next.is_some())
                .map(|c| {
                    c.stamps = stamps.clone();
                    self.refill(c)
                });
            for r in futures_util::future::join_all(refills).await {
                r?;
            }
            cursors.retain(|c| c.head.is_some() || c.next.is_some());
            if cursors.is_empty() {
                return Ok(out);
            }
            // Keys up to the smallest last key of a device with more to give are complete.
            let bound: Option<Vec<u8>> = cursors
                .iter()
                .filter(|c| c.next.is_some())
                .filter_map(|c| c.batch.as_slice().last().or(c.head.as_ref()))
                .map(|e| e.key.clone())
                .min();
            while let Some(key) = cursors
                .iter()
                .filter_map(|c| c.head.as_ref().map(|e| &e.key))
                .min()
                .filter(|k| bound.as_ref().is_none_or(|b| *k <= b))
                .cloned()
            {
                let mut s = Seen::default();
                // The oldest stamp of the batches that hold the key: stamps only grow.
                let mut stamp = u64::MAX;
                for c in cursors.iter_mut() {
                    let Some(e) = c.head.as_ref().filter(|e| e.key == key) else {
                        continue;
                    };
                    stamp = stamp.min(Inner::stamp_in(&c.stamps, &key[1..]));
                    // A device being rebuilt serves no reads: its pieces only say the key
                    // exists.
                    if !s.unsure && inner.io.readable(c.d) {
                        s.unsure = !self.take_piece(&mut s, c.d, &key[1..], e.value.as_deref());
                    }
                    c.advance();
                }
                let mut key = key;
                key.remove(0);
                match s.whole {
                    Some(r) if !s.unsure && r.segment_count == 1 && !inner.is_writing(&key) => {
                        inner.remember(&key, r.meta(), stamp);
                        out.values.push((key, r.data));
                    }
                    _ => out.others.push(key),
                }
            }
        }
    }

    /// Reads a cursor's next batch that holds anything (a batch can be empty and not the
    /// last: buffered deletes may remove every key a device listed).
    async fn refill(&self, c: &mut Cursor) -> Result<()> {
        let inner = &self.inner;
        while c.head.is_none() {
            let Some(req) = c.next.take() else {
                return Ok(());
            };
            let batch = match inner.io.iterate(c.d, &req).await {
                Ok(b) => b,
                // Out of service now: the others list what it held (within the tolerance).
                Err(_) if inner.io.is_failed(c.d) => return Ok(()),
                Err(source) => {
                    return Err(RedundancyError::Device {
                        device: c.d,
                        source,
                    })
                }
            };
            if batch.more {
                let start_after = batch
                    .entries
                    .last()
                    .map(|e| e.key.clone())
                    .or(req.start_after.clone());
                c.next = Some(IterRequest { start_after, ..req });
            }
            c.batch = batch.entries.into_iter();
            c.advance();
        }
        Ok(())
    }

    /// Adds a piece device `d` holds of `key` to what the key's pieces said; false if the scan
    /// cannot vouch for it.
    fn take_piece(&self, s: &mut Seen, d: usize, key: &[u8], value: Option<&[u8]>) -> bool {
        let inner = &self.inner;
        let Some((h, payload)) = value.and_then(|v| PieceHeader::decode(v).ok()) else {
            return false;
        };
        let Some(mech) = mechanism_of(&h) else {
            return false;
        };
        if s.version.replace(h.version).is_some_and(|v| v != h.version) {
            return false;
        }
        let epochs = inner.epochs();
        let place = epochs.layout.place(key).of_pieces(mech.pieces());
        let placed = |positions: std::ops::RangeInclusive<usize>| {
            positions.into_iter().any(|i| place.device(i) == d)
        };
        match (h.kind, mech) {
            // A packed member's pointers hold no bytes of it; their version is checked above.
            (PieceKind::Pointer, Mechanism::Pack { m, .. }) => placed(1..=m as usize),
            (PieceKind::Copy | PieceKind::Hashed | PieceKind::Member, _) => {
                let copies = match mech {
                    Mechanism::Replicate { r } => r as usize,
                    _ => 1,
                };
                if !placed(0..=copies - 1) {
                    return false;
                }
                // A further copy is compared, not copied.
                if let Some(w) = &s.whole {
                    return w.mechanism == mech
                        && w.object_len == h.object_len
                        && w.segment_count == h.segment_count
                        && w.data == payload;
                }
                match inner.accept_whole(&h, payload.to_vec(), None) {
                    Some(r) => {
                        s.whole = Some(r);
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanism::{ManagerConfig, Policy};
    use railstore_device::{Device, MemDevice, StoreMode};
    use std::sync::Arc;

    /// Batches of any size merge to the same answer: the devices' batches end at different
    /// keys, and a key is taken only once every device has given its pieces of it.
    #[tokio::test]
    async fn batches_of_any_size_merge_alike() {
        let devs: Vec<Arc<dyn Device>> = (0..6)
            .map(|_| Arc::new(MemDevice::new(Default::default()).unwrap()) as Arc<dyn Device>)
            .collect();
        let cfg = ManagerConfig {
            policy: Policy::Standalone(Mechanism::Replicate { r: 3 }),
            ..ManagerConfig::default()
        };
        let m = Manager::open(devs, cfg).await.unwrap();
        for i in 0..200u32 {
            let key = format!("p/{i:04}");
            m.put(key.as_bytes(), &i.to_le_bytes(), StoreMode::Upsert, None)
                .await
                .unwrap();
        }
        m.put(b"q/other", b"x", StoreMode::Upsert, None)
            .await
            .unwrap();
        let whole = m.scan_in_batches(b"p/", 1 << 16).await.unwrap();
        assert_eq!(whole.values.len(), 200);
        assert!(whole.others.is_empty());
        for (i, (k, v)) in whole.values.iter().enumerate() {
            assert_eq!(k, format!("p/{i:04}").as_bytes());
            assert_eq!(v, &(i as u32).to_le_bytes());
        }
        for batch in [1, 2, 3, 7, 64] {
            let got = m.scan_in_batches(b"p/", batch).await.unwrap();
            assert_eq!(got.values, whole.values, "batches of {batch}");
            assert!(got.others.is_empty(), "batches of {batch}");
        }
    }
}
