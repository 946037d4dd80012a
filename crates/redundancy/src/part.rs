//! Reads below a segment: only the units of the copies or data shards that hold a byte range,
//! each checked against its checksum in the piece's unit table (piece format version 2), so a
//! 4 KiB read of a 4 MiB object reads about 4 KiB instead of the whole segment. A data shard
//! whose device should not serve reads now (a writer under separation) is decoded from the
//! same units of k other shards. Anything unexpected (a version 1 piece, a missing or stale
//! piece, a unit that fails its check) answers `None`, and the caller reads the whole segment
//! the usual way, which finds, decodes around and repairs what is wrong.
//!
//! The tables of recently read pieces are kept (`UnitTables`), bounded in bytes, so a warm
//! read is one device read of the units alone.

use crate::format::{
    segment_key, unit_header_bytes, units_match, PieceHeader, PieceKind, PIECE_HEADER_BYTES,
    PIECE_UNITS_MIN_PAYLOAD, PIECE_UNIT_BYTES,
};
use crate::inner::Inner;
use crate::manager::{mechanism_of, ObjectMeta};
use crate::mechanism::Mechanism;
use futures_util::future::join_all;
use railstore_device::ReadRange;
use railstore_placement::Placement;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a piece's header says, as far as a read of its units needs it.
pub(crate) struct UnitTable {
    version: u64,
    index: u8,
    /// The unit checksums; empty for a version 1 piece (no table: read it whole).
    crcs: Vec<u32>,
}

/// The unit tables of recently read pieces, by (device, device key), oldest dropped first once
/// over the byte budget. The queue names each entry with the number it was inserted under, so a
/// key removed and inserted again is dropped by its own turn, not by the old one's.
#[derive(Default)]
pub(crate) struct UnitTables {
    tables: HashMap<(usize, Vec<u8>), (u64, Arc<UnitTable>)>,
    order: VecDeque<(u64, usize, Vec<u8>)>,
    inserted: u64,
    bytes: usize,
}

impl UnitTables {
    fn cost(key: &[u8], t: &UnitTable) -> usize {
        // Key twice (map and queue), the table, and the entry itself.
        2 * key.len() + 4 * t.crcs.len() + 96
    }

    /// Bytes held, by the same estimate the budget uses.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    fn get(&self, d: usize, key: &[u8]) -> Option<Arc<UnitTable>> {
        self.tables.get(&(d, key.to_vec())).map(|(_, t)| t.clone())
    }

    fn insert(&mut self, d: usize, key: &[u8], t: UnitTable, budget: usize) {
        let cost = Self::cost(key, &t);
        if cost > budget {
            return;
        }
        self.remove(d, key);
        while self.bytes + cost > budget {
            let Some((n, d, key)) = self.order.pop_front() else {
                break;
            };
            self.remove_inserted(d, &key, n);
        }
        self.inserted += 1;
        self.bytes += cost;
        self.order.push_back((self.inserted, d, key.to_vec()));
        self.tables
            .insert((d, key.to_vec()), (self.inserted, Arc::new(t)));
        // Entries of removed keys wait in the queue for their turn; not more than the live.
        if self.order.len() > 2 * self.tables.len() + 64 {
            let tables = &self.tables;
            self.order
                .retain(|(n, d, key)| tables.get(&(*d, key.clone())).is_some_and(|(m, _)| m == n));
        }
    }

    fn remove(&mut self, d: usize, key: &[u8]) {
        if let Some((_, t)) = self.tables.remove(&(d, key.to_vec())) {
            self.bytes -= Self::cost(key, &t);
        }
    }

    /// Removes the entry of `key` if it is the one inserted as number `n`.
    fn remove_inserted(&mut self, d: usize, key: &[u8], n: u64) {
        if self
            .tables
            .get(&(d, key.to_vec()))
            .is_some_and(|(m, _)| *m == n)
        {
            self.remove(d, key);
        }
    }

    /// Forgets every table: the placement changed, so a device may hold another piece under
    /// the same key.
    pub(crate) fn clear(&mut self) {
        self.tables.clear();
        self.order.clear();
        self.bytes = 0;
    }
}

/// One piece to read units of: where, and what its header must say.
#[derive(Clone, Copy)]
struct PieceAt<'a> {
    device: usize,
    key: &'a [u8],
    kind: PieceKind,
    index: u8,
    segment: u32,
    payload_len: usize,
}

/// The shard length of whole units a segment of `seg_len` bytes may have under k data shards
/// (whatever the devices' value limit, so a reader accepts it whoever wrote it); `None` when
/// its shards are too short for unit tables.
pub(crate) fn unit_shard_len(seg_len: usize, k: usize) -> Option<usize> {
    let plain = seg_len.div_ceil(k);
    (plain >= PIECE_UNITS_MIN_PAYLOAD).then(|| plain.next_multiple_of(PIECE_UNIT_BYTES))
}

impl Inner {
    /// Whether pieces of `payload_len` bytes are written with a unit table: long enough to be
    /// worth reading in part, and short enough that the table still fits the devices' values.
    pub(crate) fn units_for(&self, payload_len: usize) -> bool {
        payload_len >= PIECE_UNITS_MIN_PAYLOAD
            && unit_header_bytes(payload_len) + payload_len
                <= self.piece_payload_max + PIECE_HEADER_BYTES
    }

    /// The shard length of a segment of `seg_len` bytes under k data shards: ceil(seg_len / k),
    /// rounded up to whole units where such shards carry a unit table, so that a unit of the
    /// segment is a unit of one shard. Readers accept both lengths (shards written before unit
    /// tables have the first).
    pub(crate) fn shard_len(&self, seg_len: usize, k: usize) -> usize {
        match unit_shard_len(seg_len, k) {
            Some(aligned) if self.units_for(aligned) => aligned,
            _ => seg_len.div_ceil(k),
        }
    }

    /// Bytes `[lo, hi)` of segment `segment` of the object `meta` describes, read below the
    /// segment; `None`: read the whole segment instead.
    pub(crate) async fn read_part(
        &self,
        key: &[u8],
        segment: u32,
        place: &Placement<'_>,
        meta: &ObjectMeta,
        lo: usize,
        hi: usize,
    ) -> Option<Vec<u8>> {
        let seg_bytes = meta.segment_bytes;
        let seg_start = segment as u64 * seg_bytes;
        let seg_len = meta.len.checked_sub(seg_start)?.min(seg_bytes) as usize;
        if lo >= hi || hi > seg_len {
            return None;
        }
        let skey = segment_key(key, segment, meta.version);
        let place = place.of_pieces(meta.mechanism.pieces());
        let piece = |i: usize, kind, payload_len| PieceAt {
            device: place.device(i),
            key: &skey,
            kind,
            index: i as u8,
            segment,
            payload_len,
        };
        match meta.mechanism {
            Mechanism::Replicate { r } => {
                if !self.units_for(seg_len) {
                    return None;
                }
                let copies: Vec<usize> = (0..r as usize).map(|i| place.device(i)).collect();
                let d = *self.io.read_order(copies.iter().copied()).first()?;
                if !self.io.prefers(d) {
                    return None;
                }
                let i = copies.iter().position(|&c| c == d)?;
                self.read_units(piece(i, PieceKind::Copy, seg_len), meta, lo, hi)
                    .await
            }
            Mechanism::Split { k, m, .. } => {
                let (ku, n) = (k as usize, (k + m) as usize);
                let shard_len = self.shard_len(seg_len, ku);
                if !self.units_for(shard_len) {
                    return None;
                }
                let shards: Vec<PieceAt> = (0..n)
                    .map(|i| piece(i, PieceKind::Shard, shard_len))
                    .collect();
                let reads = (lo / shard_len..=(hi - 1) / shard_len).map(|i| {
                    let from = i * shard_len;
                    let (a, b) = (lo.max(from) - from, hi.min(from + shard_len) - from);
                    let shards = &shards;
                    async move {
                        if self.io.prefers(shards[i].device) {
                            self.read_units(shards[i], meta, a, b).await
                        } else {
                            self.decode_units(shards, i, ku, meta, a, b).await
                        }
                    }
                });
                let parts = join_all(reads).await;
                let mut out = Vec::with_capacity(hi - lo);
                for p in parts {
                    out.extend_from_slice(&p?);
                }
                Some(out)
            }
            _ => None,
        }
    }

    /// Bytes `[a, b)` of shard `want`'s payload, decoded from the same units of k other shards
    /// on devices that should serve reads (data shards first, this node's first).
    async fn decode_units(
        &self,
        shards: &[PieceAt<'_>],
        want: usize,
        k: usize,
        meta: &ObjectMeta,
        a: usize,
        b: usize,
    ) -> Option<Vec<u8>> {
        let Mechanism::Split { code, k: k8, m } = meta.mechanism else {
            return None;
        };
        let (u0, u1) = (a / PIECE_UNIT_BYTES, b.div_ceil(PIECE_UNIT_BYTES));
        let (from, to) = (
            u0 * PIECE_UNIT_BYTES,
            (u1 * PIECE_UNIT_BYTES).min(shards[want].payload_len),
        );
        let mut order: Vec<usize> = (0..shards.len())
            .filter(|&i| i != want && self.io.prefers(shards[i].device))
            .collect();
        order.sort_by_key(|&i| (i >= k, self.io.remote(shards[i].device), i));
        if order.len() < k {
            return None;
        }
        let reads = order[..k]
            .iter()
            .map(|&i| self.read_units(shards[i], meta, from, to));
        let got = join_all(reads).await;
        let mut present = vec![false; shards.len()];
        let mut bufs: Vec<Vec<u8>> = vec![vec![0; to - from]; shards.len()];
        for (&i, units) in order[..k].iter().zip(got) {
            bufs[i] = units?;
            present[i] = true;
        }
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        self.codec(code, k8, m)
            .ok()?
            .reconstruct_data(&mut refs, &present)
            .ok()?;
        self.io.counters.decodes.fetch_add(1, Ordering::Relaxed);
        let mut shard = std::mem::take(&mut bufs[want]);
        shard.truncate(b - from);
        shard.drain(..a - from);
        Some(shard)
    }

    /// Bytes `[a, b)` of one piece's payload: the whole units that hold them, read and checked
    /// against the piece's table (kept, or read beside the units and kept).
    async fn read_units(
        &self,
        p: PieceAt<'_>,
        meta: &ObjectMeta,
        a: usize,
        b: usize,
    ) -> Option<Vec<u8>> {
        let header = unit_header_bytes(p.payload_len);
        let u0 = a / PIECE_UNIT_BYTES;
        let (from, to) = (
            header + u0 * PIECE_UNIT_BYTES,
            header + (b.div_ceil(PIECE_UNIT_BYTES) * PIECE_UNIT_BYTES).min(p.payload_len),
        );
        let units_range = ReadRange {
            offset: from as u64,
            len: Some((to - from) as u64),
        };
        let cached = self.unit_tables.lock().unwrap().get(p.device, p.key);
        // A table of another version or piece (segment 0's key is every version's) is read
        // again; a piece without one is read whole.
        let cached = match cached {
            Some(t) if t.version != meta.version || t.index != p.index => {
                self.unit_tables.lock().unwrap().remove(p.device, p.key);
                None
            }
            other => other,
        };
        let (table, units) = match cached {
            Some(t) => {
                if t.crcs.is_empty() {
                    return None;
                }
                let units = self
                    .io
                    .retrieve_part(p.device, p.key, units_range)
                    .await
                    .ok()??;
                (t, units)
            }
            None => {
                let head_range = ReadRange {
                    offset: 0,
                    len: Some(header as u64),
                };
                let (head, units) = futures_util::join!(
                    self.io.retrieve_part(p.device, p.key, head_range),
                    self.io.retrieve_part(p.device, p.key, units_range)
                );
                let t = Arc::new(self.check_table(&head.ok()??, p, meta)?);
                let budget = self.config.unit_table_cache_bytes;
                if budget > 0 {
                    let copy = UnitTable {
                        version: t.version,
                        index: t.index,
                        crcs: t.crcs.clone(),
                    };
                    self.unit_tables
                        .lock()
                        .unwrap()
                        .insert(p.device, p.key, copy, budget);
                }
                if t.crcs.is_empty() {
                    return None;
                }
                (t, units.ok()??)
            }
        };
        if units.len() != to - from || !units_match(&table.crcs, u0, &units) {
            // Damaged or replaced since the table was read: the whole read finds out which.
            self.unit_tables.lock().unwrap().remove(p.device, p.key);
            return None;
        }
        let skip = a - u0 * PIECE_UNIT_BYTES;
        Some(units[skip..skip + (b - a)].to_vec())
    }

    /// The table of the piece whose first bytes are `head`, if it is the piece `p` should be
    /// (a version 1 piece of it: an empty table).
    fn check_table(&self, head: &[u8], p: PieceAt<'_>, meta: &ObjectMeta) -> Option<UnitTable> {
        let h = PieceHeader::decode_unchecked(head).ok()?;
        let expected = h.kind == p.kind
            && h.index == p.index
            && h.version == meta.version
            && h.object_len == meta.len
            && h.segment == p.segment
            && h.segment_count == meta.segments
            && mechanism_of(&h) == Some(meta.mechanism);
        if !expected {
            return None;
        }
        let crcs = if h.payload_len as usize != p.payload_len {
            // Shards of the length written before unit tables (ceil(len / k), kept by
            // repairs): not cut where this read cuts, so read whole.
            Vec::new()
        } else {
            match PieceHeader::decode_table(head) {
                Ok((_, crcs)) => crcs,
                // Written before unit tables.
                Err(crate::format::PieceError::Version) => Vec::new(),
                Err(_) => return None,
            }
        };
        Some(UnitTable {
            version: h.version,
            index: h.index,
            crcs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(units: usize) -> UnitTable {
        UnitTable {
            version: 1,
            index: 0,
            crcs: vec![0; units],
        }
    }

    #[test]
    fn unit_tables_stay_within_the_budget_and_the_queue_stays_short() {
        let mut t = UnitTables::default();
        let budget = 10_000;
        for round in 0..1000usize {
            let key = format!("key-{}", round % 7).into_bytes();
            t.insert(round % 3, &key, table(round % 50), budget);
            if round % 5 == 0 {
                t.remove((round + 1) % 3, &key);
            }
            let counted: usize = t
                .tables
                .iter()
                .map(|((_, k), (_, v))| UnitTables::cost(k, v))
                .sum();
            assert_eq!(t.bytes(), counted, "round {round}");
            assert!(t.bytes() <= budget);
            assert!(t.order.len() <= 2 * t.tables.len() + 65, "round {round}");
        }
        // Re-inserted keys are dropped by their own turn: the newest survives the oldest.
        let mut t = UnitTables::default();
        let one = UnitTables::cost(b"a", &table(10));
        t.insert(0, b"a", table(10), 3 * one);
        t.insert(0, b"b", table(10), 3 * one);
        t.insert(0, b"a", table(10), 3 * one);
        t.insert(0, b"c", table(10), 3 * one);
        t.insert(0, b"d", table(10), 3 * one);
        assert!(t.get(0, b"a").is_some() && t.get(0, b"b").is_none());
    }

    #[test]
    fn full_segments_are_cut_for_a_table_and_apart_from_whole_values() {
        use crate::format::unit_header_bytes;
        use crate::inner::tabled_payload_max;
        for value_max in [2 << 20, 1 << 20, 3 << 20, 100_000, 40_000, 1 << 16] {
            let whole = value_max - PIECE_HEADER_BYTES;
            let p = tabled_payload_max(whole);
            // Whole units, the table fits, and at least a unit apart from the whole value:
            // the last segments' rounded shards of the two cuts never coincide.
            assert_eq!(p % PIECE_UNIT_BYTES, 0, "{value_max}");
            assert!(p + unit_header_bytes(p) <= value_max, "{value_max}");
            assert!(whole - p >= PIECE_UNIT_BYTES, "{value_max}");
            // And the longest such.
            let next = p + PIECE_UNIT_BYTES;
            assert!(
                next + unit_header_bytes(next) > value_max || whole - next < PIECE_UNIT_BYTES,
                "{value_max}"
            );
        }
        assert_eq!(
            tabled_payload_max((2 << 20) - PIECE_HEADER_BYTES),
            510 * 4096
        );
        // No table fits: whole values.
        assert_eq!(tabled_payload_max(10_000), 10_000);
    }
}
