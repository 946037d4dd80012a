//! Staged overwrites of segment 0.
//!
//! Segment 0 of an object lives under one key per device (`o` + user key), so an overwrite
//! replaces the old version's pieces in place. After a crash in the middle, the positions in
//! service hold old and new pieces between them: one of the two versions keeps k pieces only
//! when at least 2k - 1 positions are in service (not with RS(3,3) and two devices out, nor
//! with any code whose m < k - 1), and even then a device lost later, within the tolerance,
//! can take the survivor below k. The old version was acknowledged. So a split object's
//! overwrite first stores the new pieces under a staged key of their own version
//! (`format::staged_key`) and makes them durable; only then does it overwrite in place. A careful read that finds no version readable in place looks
//! for staged pieces and rolls the object forward from them. Staged pieces go after the next
//! sync once the overwrite is done, or when a scrub finds them.

use crate::error::Result;
use crate::format::{parse_device_key, staged_key, DeviceKey, PieceHeader};
use crate::manager::{Inner, Piece, SegmentHead, SegmentScan};
use crate::mechanism::Mechanism;
use futures_util::future::join_all;
use railstore_device::IterRequest;
use railstore_placement::Placement;
use std::collections::BTreeMap;

impl Inner {
    /// Whether an overwrite of segment 0 with `mech` is staged: for split objects, always.
    /// After a crash in the middle of an in-place overwrite the positions hold old and new
    /// pieces between them, so the version that survives has fewer than all of its pieces and
    /// a device lost later within the tolerance can take it below k (and with fewer than
    /// 2k - 1 positions in service, neither version may keep k at all). Copies and hashing
    /// need only one piece of a version; packed members are moved aside before they are
    /// replaced.
    pub(crate) fn must_stage(&self, mech: Mechanism) -> bool {
        matches!(mech, Mechanism::Split { .. })
    }

    /// Stores the new version's segment-0 pieces under their staged key, durably.
    pub(crate) async fn stage(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        head: SegmentHead,
        mech: Mechanism,
        pieces: &[(usize, Vec<u8>)],
    ) -> Result<()> {
        let skey = staged_key(key, head.version);
        self.store_pieces_at(key, &skey, place, mech, pieces)
            .await?;
        // Concurrent overwrites share their syncs: one per device, not one per overwrite.
        self.sync_shared(place, mech.pieces()).await
    }

    /// The staged pieces of `version` go once the next sync has made segment 0 durable in
    /// place.
    pub(crate) async fn unstage_later(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        mech: Mechanism,
        version: u64,
    ) -> Result<()> {
        let skey = staged_key(key, version);
        self.defer_deletes(
            (0..mech.pieces())
                .map(|pos| (place.device(pos), skey.clone()))
                .collect(),
        )
        .await
    }

    /// `scan` (segment 0 of `key`, in place) with the newest staged version's pieces put in
    /// at the positions whose own piece is of another version; `None` when nothing is staged,
    /// or what is staged is not the newest version segment 0 has seen.
    pub(crate) async fn with_staged(&self, key: &[u8], scan: &SegmentScan) -> Option<SegmentScan> {
        // Staged keys are `s` + user key + version + segment 0: list them by the prefix and
        // keep the ones of exactly this user key.
        let prefix = staged_key(key, 0)[..1 + key.len()].to_vec();
        let found = join_all(scan.devices.iter().enumerate().map(|(pos, &d)| {
            let prefix = prefix.clone();
            async move {
                let mut pieces = Vec::new();
                if self.io.is_failed(d) {
                    return pieces;
                }
                // Keys only: the object's later segments share the prefix.
                let mut req = IterRequest {
                    prefix,
                    start_after: None,
                    entries_max: 1024,
                    with_values: false,
                };
                loop {
                    let Ok(batch) = self.io.iterate(d, &req).await else {
                        return pieces;
                    };
                    for e in &batch.entries {
                        let Some(DeviceKey::Staged { user_key, version }) =
                            parse_device_key(&e.key)
                        else {
                            continue;
                        };
                        if user_key != key {
                            continue;
                        }
                        let Ok(Some(bytes)) = self.io.retrieve(d, &e.key).await else {
                            continue;
                        };
                        if let Ok((h, payload)) = PieceHeader::decode(&bytes) {
                            if h.version == version && h.segment == 0 && h.index as usize == pos {
                                pieces.push((
                                    pos,
                                    Piece {
                                        header: h,
                                        payload: payload.to_vec(),
                                    },
                                ));
                            }
                        }
                    }
                    if !batch.more {
                        return pieces;
                    }
                    req.start_after = batch.entries.last().map(|e| e.key.clone());
                }
            }
        }))
        .await;
        let mut by_version: BTreeMap<u64, Vec<(usize, Piece)>> = BTreeMap::new();
        for (pos, piece) in found.into_iter().flatten() {
            self.observe_version(piece.header.version);
            by_version
                .entry(piece.header.version)
                .or_default()
                .push((pos, piece));
        }
        let (staged, pieces) = by_version.pop_last()?;
        // Only an overwrite that was cut: segment 0 holds pieces of that version or of older
        // ones. A staged copy whose garbage a crash forgot, of an object deleted since (no
        // pieces in place) or overwritten since (newer pieces), is no candidate.
        let in_place = scan
            .pieces
            .iter()
            .flatten()
            .map(|p| p.header.version)
            .max()?;
        if in_place > staged {
            return None;
        }
        let mut merged = scan.clone();
        for (pos, piece) in pieces {
            let own = merged.pieces[pos]
                .as_ref()
                .is_some_and(|p| p.header.version == piece.header.version);
            if !own {
                merged.pieces[pos] = Some(piece);
                merged.corrupt[pos] = false;
                merged.staged[pos] = true;
            }
        }
        Some(merged)
    }
}
