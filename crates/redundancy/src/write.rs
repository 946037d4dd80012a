//! The write path: a new version of an object cut into segments, each segment's pieces under
//! its mechanism (copies, RS shards, or a packed member and pointers through the packer), and
//! what the previous version left behind scheduled for deletion once the new one is durable.

use crate::error::{RedundancyError, Result};
use crate::format::{segment_key, PieceHeader, PieceKind};
use crate::inner::{Garbage, Inner, Writing};
use crate::manager::{ObjectMeta, Resolved, SegmentHead};
use crate::mechanism::Mechanism;
use futures_util::future::join_all;
use railstore_placement::Placement;

impl Inner {
    /// Writes `value` under `key` as a new version with `mech`, replacing `prev` (what the key
    /// held). The caller holds the key's lock.
    pub(crate) async fn write_object(
        &self,
        key: &[u8],
        value: &[u8],
        mech: Mechanism,
        prev: Option<&ObjectMeta>,
    ) -> Result<()> {
        if let Some(p) = prev {
            if matches!(p.mechanism, Mechanism::Pack { .. }) {
                self.retire_packed(key, p).await;
            }
        }
        // The write is a change of the key from here to its end (and again when it starts on
        // segment 0, `Inner::writing`): a read that overlaps either point does not cache what
        // it saw, the old version's metadata goes, and the new one's is cached at the end.
        let change = self.change(key);
        let version = self.next_version();
        let seg_bytes = self.segment_bytes(mech);
        let segments = value.len().div_ceil(seg_bytes).max(1);
        let segments_u32 = u32::try_from(segments)
            .map_err(|_| RedundancyError::Config("object needs too many segments".into()))?;
        let epochs = self.epochs();
        let place = epochs.layout.place(key);
        // Later segments first, under keys of their own version, and durable before segment 0
        // names them: a crash leaves either the old object whole or the new one whole.
        for s in (1..segments).chain([0]) {
            let data =
                &value[(s * seg_bytes).min(value.len())..((s + 1) * seg_bytes).min(value.len())];
            let head = SegmentHead {
                segment: s as u32,
                segment_count: segments_u32,
                object_len: value.len() as u64,
                version,
                shard_len: 0,
            };
            let _writing = (s == 0).then(|| {
                let resolved = Resolved {
                    mechanism: mech,
                    version,
                    object_len: value.len() as u64,
                    segment_count: segments_u32,
                    set: None,
                    shard_len: 0,
                    data: data.to_vec(),
                };
                self.writing(key, Writing::Put(resolved))
            });
            self.write_segment(key, &place, mech, head, data, prev.map(|p| p.mechanism))
                .await?;
            if s + 1 == segments && segments > 1 {
                self.sync_positions(&place, mech.span(self.width)).await?;
            }
        }
        if let Some(p) = prev {
            self.defer_leftovers(key, &place, p, mech).await?;
        }
        change.written(ObjectMeta {
            mechanism: mech,
            version,
            len: value.len() as u64,
            segments: segments_u32,
            segment_bytes: crate::manager::object_cut(
                segments_u32,
                seg_bytes as u64,
                value.len() as u64,
            ),
        });
        Ok(())
    }

    /// The pieces of one segment under `mech`, as (placement position, stored value).
    pub(crate) fn pieces_of(
        &self,
        mech: Mechanism,
        head: SegmentHead,
        data: &[u8],
        set: Option<(u64, u8)>,
        descriptor: Option<&[u8]>,
    ) -> Result<Vec<(usize, Vec<u8>)>> {
        // Copies and shards long enough to be read in part carry a checksum per unit.
        let encode = |h: PieceHeader, payload: &[u8]| {
            if self.units_for(payload.len()) {
                h.encode_units(payload)
            } else {
                h.encode(payload)
            }
        };
        let base = |kind, k, m, index, payload: &[u8]| PieceHeader {
            kind,
            code: mech.code_byte(),
            k,
            m,
            index,
            segment: head.segment,
            segment_count: head.segment_count,
            object_len: head.object_len,
            version: head.version,
            set: set.map(|s| s.0).unwrap_or(0),
            payload_len: payload.len() as u32,
        };
        Ok(match mech {
            Mechanism::Hash => vec![(0, base(PieceKind::Hashed, 1, 0, 0, data).encode(data))],
            Mechanism::Replicate { r } => (0..r)
                .map(|i| {
                    (
                        i as usize,
                        encode(base(PieceKind::Copy, r, 0, i, data), data),
                    )
                })
                .collect(),
            Mechanism::Split { code, k, m } => {
                let (ku, n) = (k as usize, (k + m) as usize);
                // A repair writes the shards again at their stored length.
                let shard_len = match head.shard_len {
                    0 => self.shard_len(data.len(), ku),
                    stored => stored.max(data.len().div_ceil(ku)),
                };
                let codec = self.codec(code, k, m)?;
                // Pinned when the codec sends shards this long to the GPU: no staging copy.
                let mut shards = codec.shard_buffers(n, shard_len);
                for (i, s) in shards.iter_mut().take(ku).enumerate() {
                    let lo = (i * shard_len).min(data.len());
                    let hi = ((i + 1) * shard_len).min(data.len());
                    s[..hi - lo].copy_from_slice(&data[lo..hi]);
                }
                {
                    let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| &mut s[..]).collect();
                    codec
                        .encode_shards(&mut refs)
                        .map_err(|e| RedundancyError::Config(e.to_string()))?;
                }
                shards
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (i, encode(base(PieceKind::Shard, k, m, i as u8, s), s)))
                    .collect()
            }
            Mechanism::Pack { k, m, .. } => {
                // Pointers carry the set descriptor, so a lost member is one hop from its set.
                let (Some((_, slot)), Some(desc)) = (set, descriptor) else {
                    return Err(RedundancyError::Config(
                        "packed pieces need their set".into(),
                    ));
                };
                let mut v = vec![(0, base(PieceKind::Member, k, m, slot, data).encode(data))];
                for i in 1..=m {
                    v.push((
                        i as usize,
                        base(PieceKind::Pointer, k, m, slot, desc).encode(desc),
                    ));
                }
                v
            }
        })
    }

    /// Writes one segment; succeeds when enough pieces landed for the object to be readable.
    /// `replaces`: the mechanism of the older version segment 0 replaces in place, staged
    /// first where a crash could otherwise leave neither version readable.
    async fn write_segment(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        mech: Mechanism,
        head: SegmentHead,
        data: &[u8],
        replaces: Option<Mechanism>,
    ) -> Result<()> {
        let overwrite = replaces.is_some();
        if let Mechanism::Pack { .. } = mech {
            // An overwrite in a degraded group may have only the old pointers to find the old
            // version by (its member's device out): they go once the new set is durable.
            let set_first = overwrite && head.segment == 0 && self.degraded(place, mech);
            return self
                .packer
                .submit(key, place, mech, head, data, set_first)
                .await;
        }
        let pieces = self.pieces_of(mech, head, data, None, None)?;
        let staged =
            head.segment == 0 && replaces.is_some_and(|old| self.must_stage(place, mech, old));
        if staged {
            self.stage(key, place, head, mech, &pieces).await?;
        }
        self.store_pieces(key, place, head, mech, &pieces).await?;
        if staged {
            self.unstage(key, place, mech, head.version).await?;
        }
        Ok(())
    }

    /// Stores pieces at their placement positions; fails when more than the mechanism's
    /// tolerance did not land.
    pub(crate) async fn store_pieces(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        head: SegmentHead,
        mech: Mechanism,
        pieces: &[(usize, Vec<u8>)],
    ) -> Result<()> {
        let skey = segment_key(key, head.segment, head.version);
        self.store_pieces_at(key, &skey, place, mech, pieces).await
    }

    /// Stores pieces under device key `skey` at their placement positions; fails when more
    /// than the mechanism's tolerance did not land.
    pub(crate) async fn store_pieces_at(
        &self,
        key: &[u8],
        skey: &[u8],
        place: &Placement<'_>,
        mech: Mechanism,
        pieces: &[(usize, Vec<u8>)],
    ) -> Result<()> {
        let place = place.of_pieces(mech.pieces());
        let res = join_all(pieces.iter().map(|(pos, v)| {
            let d = place.device(*pos);
            async move { self.io.store(d, skey, v).await }
        }))
        .await;
        let written = res.iter().filter(|r| r.is_ok()).count();
        let needed = pieces.len().saturating_sub(mech.tolerance()).max(1);
        if written < needed {
            let cause = res
                .into_iter()
                .find_map(|r| r.err())
                .map(|e| e.to_string())
                .unwrap_or_default();
            return Err(RedundancyError::WriteFailed {
                key: key.to_vec(),
                written,
                needed,
                cause,
            });
        }
        Ok(())
    }

    /// Schedules what an older version left behind for deletion after the next sync: its later
    /// segments (their keys name the old version) and segment-0 pieces past the new
    /// mechanism's positions. Deleting them before the new version is durable could leave
    /// neither version readable after a crash.
    async fn defer_leftovers(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        prev: &ObjectMeta,
        mech: Mechanism,
    ) -> Result<()> {
        let mut later = Vec::new();
        let (old, new) = (
            place.of_pieces(prev.mechanism.pieces()),
            place.of_pieces(mech.pieces()),
        );
        for d in old.devices().filter(|d| !new.devices().any(|n| n == *d)) {
            later.push(Garbage {
                device: d,
                device_key: segment_key(key, 0, prev.version),
                only_version: Some((key.to_vec(), prev.version)),
            });
        }
        for s in 1..prev.segments {
            for d in old.devices() {
                later.push(Garbage {
                    device: d,
                    device_key: segment_key(key, s, prev.version),
                    only_version: None,
                });
            }
        }
        self.push_garbage(later).await
    }
}
