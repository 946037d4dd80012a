//! What each layer holds in memory for what the store keeps, by its own accounting (issue
//! 20; `railstore bench scale` reports it beside the process's resident memory).

use crate::record::ChunkRef;
use crate::store::{Entry, Store, Stored};
use crate::types::ObjectInfo;
use railstore_device::memory::{btree_entry, heap};
use serde::Serialize;
use std::collections::BTreeMap;
use std::mem::size_of;

/// Bytes of memory per layer ([`Store::memory_use`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryUse {
    /// The store's index: buckets, every version's entry and its metadata.
    pub store_index_bytes: u64,
    /// The reliability manager's maps (object metadata cache, writes in progress).
    pub manager_bytes: u64,
    /// Each device's own index (and a memory device's values).
    pub device_bytes: Vec<u64>,
    /// Writes buffered by separation for devices that read (bounded by
    /// `write_buffer_bytes_max` per device, whatever the object count).
    pub write_buffer_bytes: u64,
}

impl MemoryUse {
    /// All layers together.
    pub fn total(&self) -> u64 {
        self.store_index_bytes
            + self.manager_bytes
            + self.device_bytes.iter().sum::<u64>()
            + self.write_buffer_bytes
    }
}

impl Store {
    /// What each layer holds in memory now. Walks every index: for reports and benchmarks,
    /// not for every request.
    pub fn memory_use(&self) -> MemoryUse {
        let store_index_bytes = {
            let st = self.inner.state.read().unwrap();
            let per_key = size_of::<String>() + size_of::<usize>();
            st.buckets
                .iter()
                .map(|(name, b)| {
                    let current: u64 = b
                        .objects
                        .iter()
                        .map(|(k, e)| btree_entry(per_key) + heap(k.len()) + entry_bytes(e))
                        .sum();
                    let history: u64 = b
                        .history
                        .iter()
                        .map(|(k, versions)| {
                            btree_entry(size_of::<String>() + size_of::<Vec<usize>>())
                                + heap(k.len())
                                + heap(versions.len() * size_of::<usize>())
                                + versions.iter().map(|e| entry_bytes(e)).sum::<u64>()
                        })
                        .sum();
                    btree_entry(size_of::<String>() + size_of::<crate::store::Bucket>())
                        + heap(name.len())
                        + current
                        + history
                })
                .sum()
        };
        MemoryUse {
            store_index_bytes,
            manager_bytes: self.inner.manager.memory_bytes(),
            device_bytes: self
                .inner
                .slots
                .all()
                .iter()
                .map(|s| railstore_device::Device::memory_bytes(s.as_ref()))
                .collect(),
            write_buffer_bytes: self
                .inner
                .rails_layer
                .snapshot()
                .iter()
                .map(|d| d.buffer_bytes)
                .sum(),
        }
    }
}

/// One version's entry: its shared block (two reference counts and the entry) and what its
/// fields keep on the heap.
fn entry_bytes(e: &Entry) -> u64 {
    let chunks = match &e.body {
        Stored::Inline => 0,
        Stored::Chunks(c) => {
            heap(16 + size_of::<Vec<ChunkRef>>()) + heap(c.len() * size_of::<ChunkRef>())
        }
    };
    heap(16 + size_of::<Entry>())
        + info_bytes(&e.info)
        + chunks
        + e.upload_id.as_ref().map_or(0, |u| heap(u.len()))
}

fn info_bytes(i: &ObjectInfo) -> u64 {
    let text = |s: &str| heap(s.len());
    let map = |m: &BTreeMap<String, String>| -> u64 {
        m.iter()
            .map(|(k, v)| btree_entry(2 * size_of::<String>()) + text(k) + text(v))
            .sum()
    };
    text(&i.key)
        + text(&i.etag)
        + text(&i.mechanism)
        + i.content_type.as_deref().map_or(0, text)
        + i.version_id.as_deref().map_or(0, text)
        + map(&i.user_metadata)
        + map(&i.headers)
        + map(&i.checksums)
        + heap(i.part_sizes.len() * 8)
        + heap(i.part_numbers.len() * 4)
        + i.part_checksums.iter().map(map).sum::<u64>()
        + heap(i.part_checksums.len() * size_of::<BTreeMap<String, String>>())
        + i.part_annotations.iter().map(|a| text(a)).sum::<u64>()
        + heap(i.part_annotations.len() * size_of::<String>())
}
