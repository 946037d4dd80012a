//! The careful read: every piece of a segment from every device of its group, the newest
//! version enough consistent pieces decode (staged pieces of a cut overwrite included), and the
//! repair of what was missing, corrupt or stale. Reads fall back to it when the cheap read
//! (`Inner::fast_segment`) does not settle; rebuild, scrub and start-up use it on purpose.

use crate::error::{RedundancyError, Result};
use crate::format::{segment_key, PieceHeader, PieceKind};
use crate::inner::{Garbage, Inner};
use crate::manager::{mechanism_of, slot_of, Piece, Resolved, SegmentHead, SegmentScan};
use crate::mechanism::Mechanism;
use futures_util::future::join_all;
use railstore_placement::Placement;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

impl Inner {
    /// Reads every piece of a segment from every readable device of the key's group. The scan
    /// is indexed by slot (`place` covers the whole width); a piece's own slot follows from its
    /// index and mechanism (`slot_of`).
    pub(crate) async fn scan_segment(
        &self,
        key: &[u8],
        segment: u32,
        version: u64,
        place: &Placement<'_>,
    ) -> SegmentScan {
        let skey = segment_key(key, segment, version);
        let n = self.width;
        let devices: Vec<usize> = (0..n).map(|i| place.device(i)).collect();
        let reads = join_all(devices.iter().map(|&d| {
            let skey = &skey;
            async move {
                // A device being rebuilt is read too: what it holds is right, what it lacks
                // gets written.
                if self.io.is_failed(d) {
                    return Err(true);
                }
                // A read error on a device still in service is a lost piece: rewritten by the
                // repair like a corrupt one.
                self.io
                    .retrieve(d, skey)
                    .await
                    .map_err(|_| self.io.is_failed(d))
            }
        }))
        .await;
        let mut scan = SegmentScan {
            devices,
            pieces: vec![None; n],
            corrupt: vec![false; n],
            read_failed: vec![false; n],
            unreadable: vec![false; n],
            staged: vec![false; n],
        };
        for (pos, r) in reads.into_iter().enumerate() {
            match r {
                Err(true) => scan.unreadable[pos] = true,
                Err(false) => {
                    scan.corrupt[pos] = true;
                    scan.read_failed[pos] = true;
                }
                Ok(None) => {}
                Ok(Some(bytes)) => match PieceHeader::decode(&bytes) {
                    Ok((h, payload))
                        if h.segment == segment
                            && mechanism_of(&h).is_some()
                            && (slot_of(self.piece_order, self.width, &h) == Some(pos)
                                || matches!(h.kind, PieceKind::Member | PieceKind::Pointer)) =>
                    {
                        self.observe_version(h.version);
                        scan.pieces[pos] = Some(Piece {
                            header: h,
                            payload: payload.to_vec(),
                        });
                    }
                    _ => scan.corrupt[pos] = true,
                },
            }
        }
        scan
    }

    /// Versions of a segment that its valid pieces can produce, newest first (packed pointers
    /// count: their set decodes the member).
    pub(crate) fn decodable_versions(&self, scan: &SegmentScan) -> Vec<u64> {
        let mut by_version: HashMap<u64, Vec<(usize, &Piece)>> = HashMap::new();
        for (pos, p) in scan.pieces.iter().enumerate() {
            if let Some(p) = p {
                by_version
                    .entry(p.header.version)
                    .or_default()
                    .push((pos, p));
            }
        }
        let mut out: Vec<u64> = by_version
            .into_iter()
            .filter(|(_, ps)| {
                ps.iter().any(|(pos, p)| match p.header.kind {
                    PieceKind::Hashed => *pos == 0,
                    // The scan kept copies only at their own slots.
                    PieceKind::Copy => true,
                    PieceKind::Member => *pos == 0,
                    PieceKind::Pointer => true,
                    PieceKind::Shard => {
                        ps.iter()
                            .filter(|(_, q)| {
                                q.header.kind == PieceKind::Shard
                                    && (q.header.k, q.header.m, q.header.code, q.header.payload_len)
                                        == (
                                            p.header.k,
                                            p.header.m,
                                            p.header.code,
                                            p.header.payload_len,
                                        )
                            })
                            .count()
                            >= p.header.k as usize
                    }
                    _ => false,
                })
            })
            .map(|(v, _)| v)
            .collect();
        out.sort_unstable_by(|a, b| b.cmp(a));
        out
    }

    /// Produces version `version` of a segment from a scan.
    pub(crate) async fn decode_scan(
        &self,
        scan: &SegmentScan,
        version: u64,
    ) -> Result<Option<Resolved>> {
        let at_version: Vec<(usize, &Piece)> = scan
            .pieces
            .iter()
            .enumerate()
            .filter_map(|(pos, p)| {
                p.as_ref()
                    .filter(|p| p.header.version == version)
                    .map(|p| (pos, p))
            })
            .collect();
        // Whole copies first: no decoding.
        for (pos, p) in &at_version {
            let h = &p.header;
            let Some(mech) = mechanism_of(h) else {
                continue;
            };
            let whole = match h.kind {
                PieceKind::Hashed | PieceKind::Member => *pos == 0,
                PieceKind::Copy => true,
                _ => false,
            };
            if whole && self.segment_len_ok(h, p.payload.len(), mech) {
                return Ok(Some(Resolved {
                    mechanism: mech,
                    version,
                    object_len: h.object_len,
                    segment_count: h.segment_count,
                    set: (h.kind == PieceKind::Member).then_some((h.set, h.index)),
                    shard_len: 0,
                    data: p.payload.clone(),
                }));
            }
        }
        // Shards agreeing on their fields, tried for each shard length present (a version's
        // shards all have one, but a reader must not depend on it).
        let mut lengths: Vec<u32> = Vec::new();
        let mut failed = None;
        for (_, p) in at_version
            .iter()
            .filter(|(_, p)| p.header.kind == PieceKind::Shard)
        {
            if lengths.contains(&p.header.payload_len) {
                continue;
            }
            lengths.push(p.header.payload_len);
            let h = p.header;
            if let Some(Mechanism::Split { code, k, m }) = mechanism_of(&h) {
                let n = (k + m) as usize;
                let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
                let mut found = 0;
                for (_, q) in &at_version {
                    let qh = &q.header;
                    if qh.kind == PieceKind::Shard
                        && (qh.index as usize) < n
                        && (
                            qh.k,
                            qh.m,
                            qh.code,
                            qh.payload_len,
                            qh.object_len,
                            qh.segment_count,
                        ) == (k, m, h.code, h.payload_len, h.object_len, h.segment_count)
                    {
                        shards[qh.index as usize] = Some(q.payload.clone());
                        found += 1;
                    }
                }
                if found >= k as usize {
                    // Use at most k shards so a silently wrong extra shard cannot mix in.
                    let data = match self.decode_split(code, k, m, &h, shards) {
                        Ok(data) => data,
                        Err(e) => {
                            failed = Some(e);
                            continue;
                        }
                    };
                    return Ok(Some(Resolved {
                        mechanism: Mechanism::Split { code, k, m },
                        version,
                        object_len: h.object_len,
                        segment_count: h.segment_count,
                        set: None,
                        shard_len: h.payload_len as usize,
                        data,
                    }));
                }
            }
        }
        if let Some(e) = failed {
            // No group decoded, and one that could have failed: an error, never "absent".
            return Err(e);
        }
        if let Some((_, p)) = at_version
            .iter()
            .find(|(_, p)| p.header.kind == PieceKind::Pointer)
        {
            let h = p.header;
            if let Some(data) = self
                .decode_member(&p.payload, h.set, h.index, version, false)
                .await?
            {
                return Ok(Some(Resolved {
                    mechanism: mechanism_of(&h).unwrap(),
                    version,
                    object_len: h.object_len,
                    segment_count: h.segment_count,
                    set: Some((h.set, h.index)),
                    shard_len: 0,
                    data,
                }));
            }
        }
        Ok(None)
    }

    /// Reads a segment the careful way: every piece, newest decodable version (or `want`), and
    /// repairs what it found wrong. `Ok(None)`: nothing of the object is stored.
    pub(crate) async fn slow_segment(
        &self,
        key: &[u8],
        segment: u32,
        place: &Placement<'_>,
        want: Option<u64>,
    ) -> Result<Option<Resolved>> {
        let scan = self
            .scan_segment(key, segment, want.unwrap_or(0), place)
            .await;
        let nothing = scan.pieces.iter().all(|p| p.is_none()) && !scan.corrupt.iter().any(|&c| c);
        if nothing {
            if scan.unreadable.iter().any(|&u| u) && segment == 0 {
                // Pieces may sit on the devices we cannot read.
                let readable = scan.unreadable.iter().filter(|u| !**u).count();
                if readable == 0 {
                    return Err(RedundancyError::Lost {
                        key: key.to_vec(),
                        detail: "no device of its group can be read".into(),
                    });
                }
            }
            return Ok(None);
        }
        if let Some(r) = self.resolve_scan(key, segment, place, &scan, want).await? {
            return Ok(Some(r));
        }
        if segment == 0 {
            // An overwrite a crash cut may have left its new version only staged.
            if let Some(merged) = self.with_staged(key, &scan).await {
                if let Some(r) = self.resolve_scan(key, 0, place, &merged, want).await? {
                    return Ok(Some(r));
                }
            }
        }
        if want.is_none()
            && !scan.unreadable.iter().any(|&u| u)
            && !scan.corrupt.iter().any(|&c| c)
            && !scan.devices.iter().any(|&d| self.io.is_rebuilding(d))
        {
            // Every device answered and nothing is damaged, yet no version has enough pieces:
            // a write or delete that never completed (a crash before sync, or one in flight).
            // Neither was acknowledged as durable, so the object reads as absent.
            return Ok(None);
        }
        // Without one valid piece nothing says which mechanism the damaged ones had. Every
        // mechanism keeps piece 0 on the primary: when the primary holds a corrupt piece, it
        // may be all that is left of an acknowledged object (a hashed one, or one whose
        // other pieces are damaged too), which is lost, not absent, and heal must not roll
        // it back to absent. A primary that cleanly holds nothing never took an acknowledged
        // version; one whose read failed says nothing, and is treated as one out of service.
        let some_valid = scan.pieces.iter().any(|p| p.is_some());
        let primary_corrupt = scan.corrupt[0] && !scan.read_failed[0];
        if want.is_none() && (some_valid || !primary_corrupt) && self.damage_tolerated(&scan) {
            // No version decoded (a packed pointer may name a set that cannot). An acknowledged
            // version landed on every position in service when it was written (a device that
            // missed it left service), and its packing set on every device of the group, so
            // with no more damage than its mechanism tolerates it would still decode. None
            // does: what is there is a write that never completed, and the object reads as
            // absent.
            return Ok(None);
        }
        Err(RedundancyError::Lost {
            key: key.to_vec(),
            detail: format!(
                "segment {segment}: {} valid, {} corrupt, {} unreadable pieces; no version{} has enough",
                scan.pieces.iter().filter(|p| p.is_some()).count(),
                scan.corrupt.iter().filter(|c| **c).count(),
                scan.unreadable.iter().filter(|u| **u).count(),
                want.map(|w| format!(" ({w})")).unwrap_or_default()
            ),
        })
    }

    /// Segments 1.. of the object whose segment 0 resolved to `first`, the careful way.
    pub(crate) async fn later_segments(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        first: &Resolved,
    ) -> Result<Vec<Resolved>> {
        let mut later = Vec::new();
        for s in 1..first.segment_count {
            match self
                .slow_segment(key, s, place, Some(first.version))
                .await?
            {
                Some(r) => later.push(r),
                None => {
                    return Err(RedundancyError::Lost {
                        key: key.to_vec(),
                        detail: format!("segment {s} of version {} cannot be read", first.version),
                    })
                }
            }
        }
        Ok(later)
    }

    /// Whether the positions `scan` could not use (unreadable, corrupt, being rebuilt) are
    /// within the tolerance of every mechanism its pieces were written with. A packed object
    /// also depends on its set, which may span every device of the group.
    fn damage_tolerated(&self, scan: &SegmentScan) -> bool {
        let damaged = |pos: usize| {
            scan.unreadable[pos] || scan.corrupt[pos] || self.io.is_rebuilding(scan.devices[pos])
        };
        let width = scan.devices.len();
        let order = self.piece_order;
        scan.pieces.iter().flatten().all(|p| {
            mechanism_of(&p.header).is_some_and(|mech| {
                let pieces = mech.span(width);
                (0..pieces)
                    .filter(|&i| damaged(order.shard(i, pieces, width)))
                    .count()
                    <= mech.tolerance()
            })
        })
    }

    /// The newest version (or `want`) that `scan` decodes, made whole: every segment of it
    /// readable, the scanned positions repaired.
    async fn resolve_scan(
        &self,
        key: &[u8],
        segment: u32,
        place: &Placement<'_>,
        scan: &SegmentScan,
        want: Option<u64>,
    ) -> Result<Option<Resolved>> {
        let versions = self.decodable_versions(scan);
        let candidates: Vec<u64> = match want {
            Some(w) => versions.into_iter().filter(|&v| v == w).collect(),
            None => versions,
        };
        for v in candidates {
            if let Some(r) = self.decode_scan(scan, v).await? {
                if segment == 0 && r.segment_count > 1 && want.is_none() {
                    // The object's version must be readable in every segment.
                    return self.resolve_object(key, place, scan, r).await;
                }
                self.repair_segment(key, segment, place, scan, &r).await;
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// Segment 0 of a multi-segment object resolved to `first`: reads every later segment of
    /// that version, else falls back to an older version of segment 0 whose segments are all
    /// there (later segments are durable before segment 0 names them, so one normally is).
    async fn resolve_object(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        scan0: &SegmentScan,
        first: Resolved,
    ) -> Result<Option<Resolved>> {
        for v in self.decodable_versions(scan0) {
            let Some(r0) = self.decode_scan(scan0, v).await? else {
                continue;
            };
            let mut later = Vec::new();
            for s in 1..r0.segment_count {
                let scan = self.scan_segment(key, s, v, place).await;
                match self.decode_scan(&scan, v).await? {
                    Some(r) => later.push((s, scan, r)),
                    None => break,
                }
            }
            if later.len() + 1 != r0.segment_count as usize {
                continue;
            }
            for (s, scan, r) in &later {
                self.repair_segment(key, *s, place, scan, r).await;
            }
            self.repair_segment(key, 0, place, scan0, &r0).await;
            return Ok(Some(r0));
        }
        Err(RedundancyError::Lost {
            key: key.to_vec(),
            detail: format!(
                "no version is readable in all {} segments",
                first.segment_count
            ),
        })
    }

    /// Rewrites the pieces of a resolved segment that a scan found missing, corrupt or stale,
    /// and deletes pieces past the mechanism's positions. Best effort.
    pub(crate) async fn repair_segment(
        &self,
        key: &[u8],
        segment: u32,
        place: &Placement<'_>,
        scan: &SegmentScan,
        r: &Resolved,
    ) -> usize {
        let head = SegmentHead {
            segment,
            segment_count: r.segment_count,
            object_len: r.object_len,
            version: r.version,
            shard_len: r.shard_len,
        };
        let descriptor = match r.set {
            None => None,
            Some((set, _)) => {
                let from_pointer = scan.pieces.iter().flatten().find(|p| {
                    p.header.kind == PieceKind::Pointer
                        && p.header.set == set
                        && p.header.version == r.version
                });
                match from_pointer {
                    Some(p) => Some(p.payload.clone()),
                    None => self
                        .find_descriptor(set, scan.devices.iter().copied())
                        .await
                        .map(|(_, b)| b),
                }
            }
        };
        let Ok(pieces) = self.pieces_of(r.mechanism, head, &r.data, r.set, descriptor.as_deref())
        else {
            return 0;
        };
        let skey = segment_key(key, segment, r.version);
        // Fixes by slot: `pieces` are numbered by piece, the scan by slot.
        let own = place.of_pieces(r.mechanism.pieces());
        let mut fixes: Vec<(usize, Option<&Vec<u8>>)> = Vec::new();
        for (piece, bytes) in &pieces {
            let pos = own.slot(*piece);
            let good = !scan.staged[pos]
                && scan.pieces[pos].as_ref().is_some_and(|p| {
                    p.header.version == r.version
                        && PieceHeader::decode(bytes).is_ok_and(|(h, payload)| {
                            h == p.header && payload == p.payload.as_slice()
                        })
                });
            if !good && !scan.unreadable[pos] {
                fixes.push((pos, Some(bytes)));
            }
        }
        let mut later = Vec::new();
        let own_slots: Vec<usize> = (0..r.mechanism.pieces()).map(|i| own.slot(i)).collect();
        for pos in (0..scan.pieces.len()).filter(|p| !own_slots.contains(p)) {
            if scan.unreadable[pos] {
                continue;
            }
            if scan.corrupt[pos] {
                fixes.push((pos, None));
            } else if let Some(p) = &scan.pieces[pos] {
                // A valid piece of another version or mechanism: it may be what survives if
                // the resolved version is not durable yet, so it goes after the next sync.
                later.push(Garbage {
                    device: place.device(pos),
                    device_key: skey.clone(),
                    only_version: Some((key.to_vec(), p.header.version)),
                });
            }
        }
        let deferred = later.len();
        let _ = self.push_garbage(later).await;
        if fixes.is_empty() {
            return deferred;
        }
        let count = fixes.len();
        join_all(fixes.into_iter().map(|(pos, bytes)| {
            let d = place.device(pos);
            let skey = &skey;
            async move {
                let _ = match bytes {
                    Some(b) => self.io.store(d, skey, b).await,
                    None => self.io.delete(d, skey).await,
                };
            }
        }))
        .await;
        self.io
            .counters
            .repairs
            .fetch_add(count as u64, Ordering::Relaxed);
        // A change of the key (it may have rolled a cut write forward or back): a read that
        // overlapped it does not cache what it saw, and what the cache held goes.
        self.forget(key);
        count
    }
}
