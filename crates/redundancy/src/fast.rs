//! The cheap read: the fewest pieces (one copy, or k shards) from the devices the read plan
//! prefers, all agreeing on one version; anything odd sends the read to the careful path
//! (`careful.rs`).

use crate::error::{RedundancyError, Result};
use crate::format::{segment_key, PieceHeader, PieceKind};
use crate::inner::{expected_segment_len, Inner};
use crate::manager::{mechanism_of, Resolved};
use crate::mechanism::Mechanism;
use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use railstore_device::DeviceError;
use railstore_ec::CodeId;
use railstore_placement::Placement;
use std::sync::atomic::Ordering;

impl Inner {
    /// Reads a segment the cheap way: the fewest pieces, from preferred devices, all agreeing.
    /// `None` means "look closer" (missing, corrupt, stale or unexpected pieces).
    pub(crate) async fn fast_segment(
        &self,
        key: &[u8],
        segment: u32,
        place: &Placement<'_>,
        hint: Option<Mechanism>,
        want: Option<u64>,
    ) -> Option<Resolved> {
        let skey = segment_key(key, segment, want.unwrap_or(0));
        let mech = match hint {
            Some(m) => m,
            None => {
                // Every mechanism keeps piece 0 on the primary; its header names the mechanism.
                let primary = place.device(0);
                if !self.io.readable(primary) {
                    return None;
                }
                let bytes = self.io.retrieve(primary, &skey).await.ok()??;
                let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                let mech = mechanism_of(&h)?;
                if !matches!(mech, Mechanism::Split { .. }) {
                    return self.accept_whole(&h, payload.to_vec(), want);
                }
                mech
            }
        };
        // The mechanism's pieces, spread over the ring by the layout.
        let place = place.of_pieces(mech.pieces());
        match mech {
            Mechanism::Pack { m, .. } if !self.io.prefers(place.device(0)) => {
                // The member's device should not serve reads now (a writer under separation):
                // rebuild the member from its set on devices that should.
                let pos = (1..=m as usize).find(|&p| self.io.prefers(place.device(p)))?;
                let bytes = self.io.retrieve(place.device(pos), &skey).await.ok()??;
                let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                // The pointer's own mechanism, not a caller's guess, goes into the answer.
                if h.kind != PieceKind::Pointer
                    || mechanism_of(&h) != Some(mech)
                    || want.is_some_and(|w| w != h.version)
                {
                    return None;
                }
                let data = self
                    .decode_member(payload, h.set, h.index, h.version, true)
                    .await
                    .ok()??;
                if !self.segment_len_ok(&h, data.len(), mech) {
                    return None;
                }
                Some(Resolved {
                    mechanism: mech,
                    version: h.version,
                    object_len: h.object_len,
                    segment_count: h.segment_count,
                    set: Some((h.set, h.index)),
                    shard_len: 0,
                    data,
                })
            }
            Mechanism::Hash | Mechanism::Pack { .. } => {
                let d = place.device(0);
                if !self.io.readable(d) {
                    return None;
                }
                let bytes = self.io.retrieve(d, &skey).await.ok()??;
                let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                self.accept_whole(&h, payload.to_vec(), want)
            }
            Mechanism::Replicate { r } => {
                let order = self.io.read_order((0..r as usize).map(|i| place.device(i)));
                let spares: Vec<usize> = order
                    .iter()
                    .skip(1)
                    .copied()
                    .filter(|&d| self.io.prefers(d))
                    .collect();
                let (_, bytes) = self
                    .read_pieces(&skey, order.first().copied().into_iter().collect(), spares)
                    .await
                    .pop()?;
                let bytes = bytes.ok()??;
                let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                self.accept_whole(&h, payload.to_vec(), want)
            }
            Mechanism::Split { code, k, m } => {
                let n = (k + m) as usize;
                let devs: Vec<usize> = (0..n).map(|i| place.device(i)).collect();
                // Data shards first among the preferred devices: no decoding when they serve;
                // among the parity shards read in their place, this node's first.
                let mut order: Vec<usize> = (0..n).filter(|&i| self.io.readable(devs[i])).collect();
                order.sort_by_cached_key(|&i| {
                    let parity = i >= k as usize;
                    (
                        !self.io.prefers(devs[i]),
                        parity,
                        parity && self.io.remote(devs[i]),
                        i,
                    )
                });
                if order.len() < k as usize {
                    return None;
                }
                let spares = order[k as usize..]
                    .iter()
                    .map(|&i| devs[i])
                    .filter(|&d| self.io.prefers(d))
                    .collect();
                let first = order[..k as usize].iter().map(|&i| devs[i]).collect();
                let reads = self.read_pieces(&skey, first, spares).await;
                let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
                let mut head: Option<PieceHeader> = None;
                for (d, r) in reads {
                    let i = devs.iter().position(|&x| x == d)?;
                    let bytes = r.ok()??;
                    let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                    if h.kind != PieceKind::Shard
                        || h.index as usize != i
                        || mechanism_of(&h) != Some(mech)
                    {
                        return None;
                    }
                    if let Some(prev) = &head {
                        if (
                            prev.version,
                            prev.object_len,
                            prev.payload_len,
                            prev.segment_count,
                        ) != (h.version, h.object_len, h.payload_len, h.segment_count)
                        {
                            return None;
                        }
                    }
                    if want.is_some_and(|w| w != h.version) {
                        return None;
                    }
                    head = Some(h);
                    shards[i] = Some(payload.to_vec());
                }
                let h = head?;
                let data = self.decode_split(code, k, m, &h, shards).ok()?;
                Some(Resolved {
                    mechanism: mech,
                    version: h.version,
                    object_len: h.object_len,
                    segment_count: h.segment_count,
                    set: None,
                    shard_len: h.payload_len as usize,
                    data,
                })
            }
        }
    }

    /// Reads `skey` from every device of `first` and returns one answer per device, in the
    /// order they come. With [`ManagerConfig::slow_read_bypass`] set, a device that has not
    /// answered by then is bypassed: the next of `spares` (devices the read plan prefers) is
    /// read too, and the first `first.len()` answers win (fail-fast, as IODA and LinnOS do; the
    /// slow read is dropped).
    async fn read_pieces(
        &self,
        skey: &[u8],
        first: Vec<usize>,
        spares: Vec<usize>,
    ) -> Vec<(usize, std::result::Result<Option<Vec<u8>>, DeviceError>)> {
        let read = |d: usize| async move { (d, self.io.retrieve(d, skey).await) };
        let Some(after) = self.config.slow_read_bypass.filter(|_| !spares.is_empty()) else {
            return join_all(first.into_iter().map(read)).await;
        };
        let want = first.len();
        let mut pending: FuturesUnordered<_> = first.into_iter().map(read).collect();
        let mut spares = spares.into_iter();
        let mut answers = Vec::with_capacity(want);
        let bypass_at = tokio::time::sleep(after);
        tokio::pin!(bypass_at);
        let mut bypassed = false;
        while answers.len() < want {
            tokio::select! {
                answer = pending.next() => match answer {
                    Some(a) => answers.push(a),
                    None => break,
                },
                _ = &mut bypass_at, if !bypassed => {
                    bypassed = true;
                    for d in spares.by_ref().take(want - answers.len()) {
                        self.io.counters.slow_read_bypasses.fetch_add(1, Ordering::Relaxed);
                        pending.push(read(d));
                    }
                }
            }
        }
        answers
    }

    pub(crate) fn accept_whole(
        &self,
        h: &PieceHeader,
        payload: Vec<u8>,
        want: Option<u64>,
    ) -> Option<Resolved> {
        if want.is_some_and(|w| w != h.version) {
            return None;
        }
        let mechanism = mechanism_of(h)?;
        // Only copies, hashed pieces and packed members hold a whole segment (a shard of a
        // tiny object can have the segment's length).
        let whole = matches!(
            h.kind,
            PieceKind::Copy | PieceKind::Hashed | PieceKind::Member
        );
        if !whole || !self.segment_len_ok(h, payload.len(), mechanism) {
            return None;
        }
        self.observe_version(h.version);
        Some(Resolved {
            mechanism,
            version: h.version,
            object_len: h.object_len,
            segment_count: h.segment_count,
            set: (h.kind == PieceKind::Member).then_some((h.set, h.index)),
            shard_len: 0,
            data: payload,
        })
    }

    /// Whether a whole-segment payload has the length its header implies.
    pub(crate) fn segment_len_ok(&self, h: &PieceHeader, len: usize, mech: Mechanism) -> bool {
        self.segment_cuts(mech)
            .iter()
            .any(|&cut| expected_segment_len(h, cut) == Some(len))
    }

    /// Reassembles a segment from k or more shards (missing ones decoded).
    pub(crate) fn decode_split(
        &self,
        code: CodeId,
        k: u8,
        m: u8,
        h: &PieceHeader,
        mut shards: Vec<Option<Vec<u8>>>,
    ) -> Result<Vec<u8>> {
        let (ku, n) = (k as usize, (k + m) as usize);
        let shard_len = h.payload_len as usize;
        // The segment's length under the cut whose shard length this is (the cuts' shard
        // lengths never coincide, `inner::tabled_payload_max`).
        let seg_len = self
            .segment_cuts(Mechanism::Split { code, k, m })
            .iter()
            .filter_map(|&cut| expected_segment_len(h, cut))
            .find(|&len| {
                len.div_ceil(ku) == shard_len
                    || crate::part::unit_shard_len(len, ku) == Some(shard_len)
            })
            .ok_or_else(|| RedundancyError::Config("shard length inconsistent".into()))?;
        if shards.iter().take(ku).any(|s| s.is_none()) {
            let present: Vec<bool> = shards.iter().map(|s| s.is_some()).collect();
            let mut bufs: Vec<Vec<u8>> = shards
                .iter_mut()
                .map(|s| s.take().unwrap_or_else(|| vec![0; shard_len]))
                .collect();
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            self.codec(code, k, m)?
                .reconstruct_data(&mut refs, &present)
                .map_err(|e| RedundancyError::Config(e.to_string()))?;
            self.io.counters.decodes.fetch_add(1, Ordering::Relaxed);
            shards = bufs.into_iter().map(Some).collect();
        }
        debug_assert_eq!(shards.len(), n);
        let mut out = Vec::with_capacity(seg_len);
        for s in shards.iter().take(ku) {
            out.extend_from_slice(s.as_deref().unwrap());
        }
        out.truncate(seg_len);
        Ok(out)
    }
}
