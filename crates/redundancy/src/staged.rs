//! Staged overwrites of segment 0.
//!
//! Segment 0 of an object lives under one key per device (`o` + user key), so an overwrite
//! replaces the old version's pieces in place. After a crash in the middle, the positions in
//! service hold old and new pieces between them: one of the two versions keeps k pieces only
//! when at least 2k - 1 positions are in service (not with RS(3,3) and two devices out, nor
//! with any code whose m < k - 1), and even then a device lost later, within the tolerance,
//! can take the survivor below k. The old version was acknowledged. So a split object's
//! overwrite in a degraded group first stores the new pieces under a staged key of their own
//! version (`format::staged_key`) and makes them durable; only then does it overwrite in
//! place.
//!
//! A careful read that finds no version readable in place looks for staged pieces and rolls
//! the object forward from them. Staged pieces go once the write in place is durable, or when
//! a scrub finds them.

use crate::error::Result;
use crate::format::{parse_device_key, staged_key, DeviceKey, PieceHeader};
use crate::inner::Inner;
use crate::manager::{slot_of, Piece, SegmentHead, SegmentScan};
use crate::mechanism::Mechanism;
use futures_util::future::join_all;
use railstore_device::IterRequest;
use railstore_placement::Placement;
use std::collections::BTreeMap;

impl Inner {
    /// Whether an overwrite of segment 0 with `mech` of a version stored with `old` is
    /// staged: a split object's, while a device of its placement is out of service, or when
    /// a torn write could leave neither version readable in a whole group. In place, a crash
    /// in the middle (a power cut during the sync that follows) leaves the positions holding
    /// old and new pieces between them: the new version needs k of its pieces, so up to
    /// k - 1 of them may land, each over an old piece where the two share a position. The
    /// old version must keep what it needs (one copy or pointer; k_old shards) even then:
    /// RS(3,3) over RS(3,3) keeps 4 of 6, but RS(4,2) over RS(4,2) may keep 3 of 6, and a
    /// split over three copies or one hashed piece may keep none (simulator-found, 2026-11-28).
    /// With a device already out a further loss within the tolerance before the next open
    /// repairs it can take the survivor below k, so a degraded group always stages. Copies
    /// and hashing need only one piece of a version, and staging every overwrite would cost a
    /// sync each (docs/benchmarks/kv.md).
    pub(crate) fn must_stage(
        &self,
        place: &Placement<'_>,
        mech: Mechanism,
        old: Mechanism,
    ) -> bool {
        let Mechanism::Split { k, .. } = mech else {
            return false;
        };
        if self.degraded(place, mech) {
            return true;
        }
        let old_at: Vec<usize> = place.of_pieces(old.pieces()).devices().collect();
        let shared = place
            .of_pieces(mech.pieces())
            .devices()
            .filter(|d| old_at.contains(d))
            .count();
        let old_needs = match old {
            Mechanism::Split { k, .. } => k as usize,
            _ => 1,
        };
        old_at.len() - shared.min(k as usize - 1) < old_needs
    }

    /// Whether a device holding one of `mech`'s positions of this placement is out of service.
    pub(crate) fn degraded(&self, place: &Placement<'_>, mech: Mechanism) -> bool {
        place
            .of_pieces(mech.pieces())
            .devices()
            .any(|d| self.io.is_failed(d))
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
        self.sync_shared(place.of_pieces(mech.pieces()).devices())
            .await
    }

    /// Deletes the staged pieces of `version` once segment 0 is durable in place. Not left for
    /// the manager's deferred deletes: staged copies are whole pieces, and until the next full
    /// sync they would fill the devices.
    pub(crate) async fn unstage(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        mech: Mechanism,
        version: u64,
    ) -> Result<()> {
        let skey = staged_key(key, version);
        let devices: Vec<usize> = place.of_pieces(mech.pieces()).devices().collect();
        self.unstage_keys(devices.into_iter().map(|d| (d, skey.clone())).collect())
            .await
    }

    /// Deletes staged pieces `(device, key)` once what was written in place after them is
    /// durable (a sync shared with concurrent writers). A delete that fails is left for scrub.
    pub(crate) async fn unstage_keys(&self, staged: Vec<(usize, Vec<u8>)>) -> Result<()> {
        let mut devices: Vec<usize> = staged.iter().map(|(d, _)| *d).collect();
        devices.sort_unstable();
        devices.dedup();
        self.sync_shared(devices.into_iter()).await?;
        join_all(staged.iter().map(|(d, k)| async move {
            let _ = self.io.delete(*d, k).await;
        }))
        .await;
        Ok(())
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
                            if h.version == version
                                && h.segment == 0
                                && slot_of(self.piece_order, self.width, &h) == Some(pos)
                            {
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
                merged.read_failed[pos] = false;
                merged.staged[pos] = true;
            }
        }
        Some(merged)
    }
}
