//! Packing (KVMD §3.2.4): recent writes wait in one queue per colour of their group; up to k of
//! them from different colours form a set whose m parity pieces go to other colours. Members are
//! virtually zero-padded to the longest. After `pack_wait`, fewer than k are packed.
//!
//! Beyond KVMD: an update or delete does not regroup the old set. The old member's bytes move to
//! a dead-member key on the same device (`TAG_DEAD`), so the set still decodes its live members;
//! set compaction reclaims sets whose members are all dead.

use crate::error::{RedundancyError, Result};
use crate::format::{
    segment_key, set_key, PieceHeader, PieceKind, SetDescriptor, SetMember, TAG_DEAD, TAG_PARITY,
    TAG_SET,
};
use crate::inner::Inner;
use crate::manager::{ObjectMeta, Resolved, SegmentHead};
use crate::mechanism::Mechanism;
use futures_util::future::join_all;
use railstore_placement::Placement;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

struct Pending {
    key: Vec<u8>,
    colour: usize,
    device: usize,
    pointer_devices: Vec<usize>,
    head: SegmentHead,
    data: Vec<u8>,
    /// It replaces an older version's pointers that may be the only way to that version:
    /// they are replaced once the new set is durable.
    set_first: bool,
    queued: Instant,
    done: oneshot::Sender<Result<()>>,
}

struct Request {
    group: usize,
    mech: Mechanism,
    /// The group's device of each colour.
    group_devices: Vec<usize>,
    pending: Pending,
}

/// Most segments waiting in the packing queues or in sets being written; more writers wait.
pub(crate) const PACK_QUEUE_ENTRIES_MAX: usize = 8192;

/// The packing queues and the task that forms sets.
pub(crate) struct Packer {
    tx: mpsc::UnboundedSender<Request>,
    /// Bounds the queues: a permit per queued segment, held until its set is written.
    slots: tokio::sync::Semaphore,
}

impl Packer {
    pub(crate) fn new(inner: Weak<Inner>, wait: Duration) -> Packer {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, inner, wait));
        Packer {
            tx,
            slots: tokio::sync::Semaphore::new(PACK_QUEUE_ENTRIES_MAX),
        }
    }

    /// Queues one segment and waits until its set is written. `set_first`: its pointers replace
    /// an older version's only once the set is durable.
    pub(crate) async fn submit(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        mech: Mechanism,
        head: SegmentHead,
        data: &[u8],
        set_first: bool,
    ) -> Result<()> {
        let Mechanism::Pack { m, .. } = mech else {
            unreachable!("packer given {mech}")
        };
        let device = place.device(0);
        let layout_width = place.width();
        let group_devices: Vec<usize> = {
            // The group's device of each colour: position p holds colour (p + rotation) mod n.
            let mut by_colour = vec![0; layout_width];
            for p in 0..layout_width {
                by_colour[place.colour(p)] = place.device(p);
            }
            by_colour
        };
        let _slot = self.slots.acquire().await.map_err(|_| closed())?;
        let (done, wait) = oneshot::channel();
        let req = Request {
            group: place.group(),
            mech,
            group_devices,
            pending: Pending {
                key: key.to_vec(),
                colour: place.colour(0),
                device,
                pointer_devices: (1..=m as usize)
                    .map(|i| place.of_pieces(mech.pieces()).device(i))
                    .collect(),
                head,
                data: data.to_vec(),
                set_first,
                queued: Instant::now(),
                done,
            },
        };
        self.tx.send(req).map_err(|_| closed())?;
        wait.await.map_err(|_| closed())?
    }
}

fn closed() -> RedundancyError {
    RedundancyError::Config("the packer stopped (manager dropped)".into())
}

struct Queues {
    mech: Mechanism,
    group_devices: Vec<usize>,
    by_colour: Vec<VecDeque<Pending>>,
}

impl Queues {
    fn ready_colours(&self) -> Vec<usize> {
        let mut c: Vec<usize> = (0..self.by_colour.len())
            .filter(|&c| !self.by_colour[c].is_empty())
            .collect();
        c.sort_by_key(|&c| self.by_colour[c].front().unwrap().queued);
        c
    }

    fn oldest(&self) -> Option<Instant> {
        self.by_colour
            .iter()
            .filter_map(|q| q.front().map(|p| p.queued))
            .min()
    }

    fn take(&mut self, colours: &[usize]) -> Vec<Pending> {
        colours
            .iter()
            .map(|&c| self.by_colour[c].pop_front().unwrap())
            .collect()
    }
}

async fn run(mut rx: mpsc::UnboundedReceiver<Request>, inner: Weak<Inner>, wait: Duration) {
    let mut queues: HashMap<(usize, Mechanism), Queues> = HashMap::new();
    loop {
        let deadline = queues
            .values()
            .filter_map(Queues::oldest)
            .min()
            .map(|t| t + wait);
        let msg = match deadline {
            Some(d) => tokio::select! {
                m = rx.recv() => Some(m),
                _ = tokio::time::sleep_until(d) => None,
            },
            None => Some(rx.recv().await),
        };
        match msg {
            Some(None) => {
                // The manager is gone: nobody can write sets any more.
                for q in queues.into_values() {
                    for p in q.by_colour.into_iter().flatten() {
                        let _ = p.done.send(Err(closed()));
                    }
                }
                return;
            }
            Some(Some(req)) => {
                let Mechanism::Pack { k, .. } = req.mech else {
                    continue;
                };
                let q = queues
                    .entry((req.group, req.mech))
                    .or_insert_with(|| Queues {
                        mech: req.mech,
                        by_colour: (0..req.group_devices.len())
                            .map(|_| VecDeque::new())
                            .collect(),
                        group_devices: req.group_devices,
                    });
                q.by_colour[req.pending.colour].push_back(req.pending);
                let ready = q.ready_colours();
                if ready.len() >= k as usize {
                    let members = q.take(&ready[..k as usize]);
                    spawn_set(&inner, q.mech, q.group_devices.clone(), members);
                }
            }
            None => {
                let now = Instant::now();
                for q in queues.values_mut() {
                    let Mechanism::Pack { k, .. } = q.mech else {
                        continue;
                    };
                    while q.oldest().is_some_and(|t| t + wait <= now) {
                        let ready = q.ready_colours();
                        let take = ready.len().min(k as usize);
                        let members = q.take(&ready[..take]);
                        spawn_set(&inner, q.mech, q.group_devices.clone(), members);
                    }
                }
                queues.retain(|_, q| q.oldest().is_some());
            }
        }
    }
}

fn spawn_set(
    inner: &Weak<Inner>,
    mech: Mechanism,
    group_devices: Vec<usize>,
    members: Vec<Pending>,
) {
    let Some(inner) = inner.upgrade() else {
        for p in members {
            let _ = p.done.send(Err(closed()));
        }
        return;
    };
    tokio::spawn(async move {
        let (dones, result) = write_set(&inner, mech, &group_devices, members).await;
        for (key, done) in dones {
            // Each member hears the set's outcome under its own key.
            let _ = done.send(match &result {
                Ok(()) => Ok(()),
                Err(RedundancyError::WriteFailed {
                    written,
                    needed,
                    cause,
                    ..
                }) => Err(RedundancyError::WriteFailed {
                    key,
                    written: *written,
                    needed: *needed,
                    cause: cause.clone(),
                }),
                Err(e) => Err(RedundancyError::WriteFailed {
                    key,
                    written: 0,
                    needed: 1,
                    cause: e.to_string(),
                }),
            });
        }
    });
}

/// Codes and writes one set; returns the members' reply channels and the outcome.
async fn write_set(
    inner: &Inner,
    mech: Mechanism,
    group_devices: &[usize],
    members: Vec<Pending>,
) -> (Vec<(Vec<u8>, oneshot::Sender<Result<()>>)>, Result<()>) {
    let Mechanism::Pack { code, k, m } = mech else {
        unreachable!()
    };
    let set = inner.next_version();
    let used: Vec<usize> = members.iter().map(|p| p.colour).collect();
    let free: Vec<usize> = (0..group_devices.len())
        .filter(|c| !used.contains(c))
        .collect();
    let start = (set % free.len() as u64) as usize;
    let parity_devices: Vec<u16> = (0..m as usize)
        .map(|j| group_devices[free[(start + j) % free.len()]] as u16)
        .collect();
    let mut descriptor_devices = parity_devices.clone();
    descriptor_devices.push(members[0].device as u16);
    let desc = SetDescriptor {
        code: code.as_u8(),
        k,
        m,
        members: members
            .iter()
            .map(|p| SetMember {
                user_key: p.key.clone(),
                segment: p.head.segment,
                version: p.head.version,
                len: p.data.len() as u32,
                device: p.device as u16,
            })
            .collect(),
        parity_devices,
        descriptor_devices,
    };
    let result = async {
        let parity = compute_parity(inner, &desc, members.iter().map(|p| p.data.as_slice()))?;
        let desc_bytes = desc.encode();
        // Members, parity and descriptors first; pointers, which name the set from the
        // object's other positions, second.
        let mut first: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
        let mut pointers: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
        for (slot, p) in members.iter().enumerate() {
            let pieces = inner.pieces_of(
                mech,
                p.head,
                &p.data,
                Some((set, slot as u8)),
                Some(&desc_bytes),
            )?;
            let skey = segment_key(&p.key, p.head.segment, p.head.version);
            for (pos, bytes) in pieces {
                if pos == 0 {
                    first.push((p.device, skey.clone(), bytes));
                } else {
                    pointers.push((p.pointer_devices[pos - 1], skey.clone(), bytes));
                }
            }
        }
        for (j, par) in parity.iter().enumerate() {
            let h = set_piece(PieceKind::Parity, &desc, j as u8, set, par.len());
            first.push((
                desc.parity_devices[j] as usize,
                set_key(TAG_PARITY, set, j as u8),
                h.encode(par),
            ));
        }
        for &d in &desc.descriptor_devices {
            let h = set_piece(PieceKind::SetDescriptor, &desc, 0, set, desc_bytes.len());
            first.push((d as usize, set_key(TAG_SET, set, 0), h.encode(&desc_bytes)));
        }
        let store_all = |writes: Vec<(usize, Vec<u8>, Vec<u8>)>| async move {
            join_all(
                writes
                    .into_iter()
                    .map(|(d, key, v)| async move { (d, inner.io.store(d, &key, &v).await) }),
            )
            .await
        };
        let mut res = if members.iter().any(|p| p.set_first) {
            // An overwrite in a degraded group replaces the old version's pointers in place,
            // and with the member's device out they are the only way to the old version: once
            // a new one can be found the set it names must be durable, or a crash could leave
            // neither version readable (the old pointers gone, the new set incomplete). In a
            // whole group the old member stays in place until the new one lands.
            let mut res = store_all(first).await;
            let mut landed: Vec<usize> = res
                .iter()
                .filter(|(_, r)| r.is_ok())
                .map(|(d, _)| *d)
                .collect();
            landed.sort_unstable();
            landed.dedup();
            inner.sync_shared(landed.into_iter()).await?;
            res.extend(store_all(pointers).await);
            res
        } else {
            first.extend(pointers);
            store_all(first).await
        };
        res.sort_by_key(|(d, _)| *d);
        let mut devices: Vec<usize> = res.iter().map(|(d, _)| *d).collect();
        devices.dedup();
        let mut failed: Vec<usize> = res
            .iter()
            .filter(|(_, r)| r.is_err())
            .map(|(d, _)| *d)
            .collect();
        failed.dedup();
        if failed.len() > m as usize {
            return Err(RedundancyError::WriteFailed {
                key: Vec::new(),
                written: devices.len() - failed.len(),
                needed: devices.len() - m as usize,
                cause: format!(
                    "packing set {set}: devices {failed:?} failed, more than {m} parity can cover"
                ),
            });
        }
        Ok(())
    }
    .await;
    if result.is_ok() {
        let c = &inner.io.counters;
        c.pack_sets.fetch_add(1, Ordering::Relaxed);
        c.pack_members
            .fetch_add(members.len() as u64, Ordering::Relaxed);
    }
    (
        members.into_iter().map(|p| (p.key, p.done)).collect(),
        result,
    )
}

fn set_piece(
    kind: PieceKind,
    desc: &SetDescriptor,
    index: u8,
    set: u64,
    len: usize,
) -> PieceHeader {
    PieceHeader {
        kind,
        code: desc.code,
        k: desc.k,
        m: desc.m,
        index,
        segment: 0,
        segment_count: 0,
        object_len: desc.parity_len() as u64,
        version: set,
        set,
        payload_len: len as u32,
    }
}

/// Parity of a set's members, each virtually zero-padded to the longest; absent slots are zero.
fn compute_parity<'a>(
    inner: &Inner,
    desc: &SetDescriptor,
    members: impl Iterator<Item = &'a [u8]>,
) -> Result<Vec<Vec<u8>>> {
    let code = railstore_ec::CodeId::from_u8(desc.code)
        .map_err(|e| RedundancyError::Config(e.to_string()))?;
    let len = desc.parity_len();
    let mut data: Vec<Vec<u8>> = members
        .map(|d| {
            let mut v = d.to_vec();
            v.resize(len, 0);
            v
        })
        .collect();
    data.resize(desc.k as usize, vec![0; len]);
    let mut parity = vec![vec![0u8; len]; desc.m as usize];
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let mut out: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
    inner
        .codec(code, desc.k, desc.m)?
        .encode(&refs, &mut out)
        .map_err(|e| RedundancyError::Config(e.to_string()))?;
    Ok(parity)
}

/// A set's pieces as found on its devices.
pub(crate) struct SetScan {
    /// Member payloads by slot (live copy or dead-member copy).
    pub members: Vec<Option<Vec<u8>>>,
    /// Whether each member is still live (its object's current version is this one).
    pub live: Vec<bool>,
    /// Whether each member has a dead-member copy.
    pub dead_copy: Vec<bool>,
    /// Parity payloads.
    pub parity: Vec<Option<Vec<u8>>>,
}

impl Inner {
    /// Reads every piece of a set.
    /// With `preferred_only`, reads only devices the read plan prefers now (the rest count as
    /// missing, and members there as live).
    pub(crate) async fn scan_set(
        &self,
        set: u64,
        desc: &SetDescriptor,
        preferred_only: bool,
    ) -> SetScan {
        let members = join_all(
            desc.members
                .iter()
                .enumerate()
                .map(|(slot, mem)| async move {
                    let d = mem.device as usize;
                    if self.io.is_failed(d) || (preferred_only && !self.io.prefers(d)) {
                        // Unknown: count it live so nothing is reclaimed or duplicated on a guess.
                        return (None, true, false);
                    }
                    let check = |bytes: Option<Vec<u8>>| {
                        let bytes = bytes?;
                        let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                        (h.kind == PieceKind::Member
                            && h.set == set
                            && h.index as usize == slot
                            && h.version == mem.version
                            && payload.len() == mem.len as usize)
                            .then(|| payload.to_vec())
                    };
                    let live = match self
                        .io
                        .retrieve(d, &segment_key(&mem.user_key, mem.segment, mem.version))
                        .await
                    {
                        Ok(bytes) => check(bytes),
                        // The device failed or erred meanwhile: unknown, so live (a set
                        // reclaimed on a read error lost its only live member, SIM-16).
                        Err(_) => return (None, true, false),
                    };
                    let dead = self
                        .io
                        .retrieve(d, &set_key(TAG_DEAD, set, slot as u8))
                        .await
                        .ok()
                        .and_then(check);
                    let is_live = live.is_some();
                    let has_dead = dead.is_some();
                    (live.or(dead), is_live, has_dead)
                }),
        )
        .await;
        let parity = join_all(
            desc.parity_devices
                .iter()
                .enumerate()
                .map(|(j, &d)| async move {
                    let d = d as usize;
                    if self.io.is_failed(d) || (preferred_only && !self.io.prefers(d)) {
                        return None;
                    }
                    let bytes = self
                        .io
                        .retrieve(d, &set_key(TAG_PARITY, set, j as u8))
                        .await
                        .ok()??;
                    let (h, payload) = PieceHeader::decode(&bytes).ok()?;
                    (h.kind == PieceKind::Parity
                        && h.set == set
                        && h.index as usize == j
                        && payload.len() == desc.parity_len())
                    .then(|| payload.to_vec())
                }),
        )
        .await;
        let mut scan = SetScan {
            members: Vec::new(),
            live: Vec::new(),
            dead_copy: Vec::new(),
            parity,
        };
        for (p, l, d) in members {
            scan.members.push(p);
            scan.live.push(l);
            scan.dead_copy.push(d);
        }
        scan
    }

    /// Decodes every missing member and parity piece of a set in place; `false` when too many
    /// are missing.
    pub(crate) fn complete_set(&self, desc: &SetDescriptor, scan: &mut SetScan) -> Result<bool> {
        let (k, m) = (desc.k as usize, desc.m as usize);
        let len = desc.parity_len();
        let mut present = Vec::with_capacity(k + m);
        let mut bufs: Vec<Vec<u8>> = Vec::with_capacity(k + m);
        for slot in 0..k {
            match scan.members.get(slot) {
                Some(Some(v)) => {
                    let mut b = v.clone();
                    b.resize(len, 0);
                    bufs.push(b);
                    present.push(true);
                }
                Some(None) => {
                    bufs.push(vec![0; len]);
                    present.push(false);
                }
                // Virtual zero member.
                None => {
                    bufs.push(vec![0; len]);
                    present.push(true);
                }
            }
        }
        for p in &scan.parity {
            present.push(p.is_some());
            bufs.push(p.clone().unwrap_or_else(|| vec![0; len]));
        }
        let missing = present.iter().filter(|p| !**p).count();
        if missing == 0 {
            return Ok(true);
        }
        if missing > m {
            return Ok(false);
        }
        let code = railstore_ec::CodeId::from_u8(desc.code)
            .map_err(|e| RedundancyError::Config(e.to_string()))?;
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        self.codec(code, desc.k, desc.m)?
            .reconstruct(&mut refs, &present)
            .map_err(|e| RedundancyError::Config(e.to_string()))?;
        self.io.counters.decodes.fetch_add(1, Ordering::Relaxed);
        for ((slot, buf), mem) in scan.members.iter_mut().zip(&bufs).zip(&desc.members) {
            if slot.is_none() {
                let mut b = buf.clone();
                b.truncate(mem.len as usize);
                *slot = Some(b);
            }
        }
        for (p, buf) in scan.parity.iter_mut().zip(&bufs[k..]) {
            if p.is_none() {
                *p = Some(buf.clone());
            }
        }
        Ok(true)
    }

    /// Rebuilds a packed member from the rest of its set (the descriptor travels in pointers).
    pub(crate) async fn decode_member(
        &self,
        desc_bytes: &[u8],
        set: u64,
        slot: u8,
        version: u64,
        preferred_only: bool,
    ) -> Result<Option<Vec<u8>>> {
        let Some(desc) = SetDescriptor::decode(desc_bytes) else {
            return Ok(None);
        };
        let Some(member) = desc.members.get(slot as usize) else {
            return Ok(None);
        };
        if member.version != version {
            return Ok(None);
        }
        // With `preferred_only` the member's own device is read only if the plan prefers it
        // by the time of the scan (the window moved since the caller looked): then its copy,
        // checked like every member's, is as good as a rebuilt one, and without it the
        // readers may hold one piece fewer than the set needs.
        let mut scan = self.scan_set(set, &desc, preferred_only).await;
        if !self.complete_set(&desc, &mut scan)? {
            return Ok(None);
        }
        Ok(scan.members[slot as usize].take())
    }

    /// Before an update or delete of a packed object: keeps each old member's bytes under its
    /// dead-member key, so its set still decodes the others. Best effort: a member that cannot be
    /// read now is rebuilt from its set by scrub or rebuild.
    pub(crate) async fn retire_packed(&self, key: &[u8], prev: &ObjectMeta) {
        self.retire_packed_at(key, prev, &self.epochs().layout.place(key))
            .await
    }

    /// [`Inner::retire_packed`] for the object's pieces at `place`.
    pub(crate) async fn retire_packed_at(
        &self,
        key: &[u8],
        prev: &ObjectMeta,
        place: &Placement<'_>,
    ) {
        let d = place.device(0);
        for s in 0..prev.segments {
            let Ok(Some(bytes)) = self
                .io
                .retrieve(d, &segment_key(key, s, prev.version))
                .await
            else {
                continue;
            };
            if let Ok((h, _)) = PieceHeader::decode(&bytes) {
                if h.kind == PieceKind::Member {
                    let _ = self
                        .io
                        .store(d, &set_key(TAG_DEAD, h.set, h.index), &bytes)
                        .await;
                }
            }
        }
    }

    /// Makes sure the sets a packed object's segments live in can rebuild them, healing what
    /// they lack (parity, descriptor copies); when one cannot be completed, writes the object
    /// anew as a new version in new sets. A put that a crash cut can leave a member in place
    /// whose set never got its parity: the read that rolls it forward finds the member whole,
    /// yet it is its only copy, and losing that device within tolerance would lose it. The
    /// caller holds the key's lock; `segments` are the object's resolved segments, in order.
    /// `Ok(true)`: the object was written anew (and the metadata cache holds its new version).
    pub(crate) async fn secure_packed(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        segments: &[&Resolved],
    ) -> Result<bool> {
        let Some(first) = segments.first() else {
            return Ok(false);
        };
        if first.set.is_none() {
            return Ok(false);
        }
        let mut sound = true;
        for set in segments.iter().filter_map(|r| r.set.map(|(set, _)| set)) {
            let healed = match self.find_descriptor(set, place.devices()).await {
                Some((desc, _)) => self.heal_set(set, &desc, false).await.ok(),
                None => None,
            };
            if !matches!(healed, Some((_, false, false))) {
                sound = false;
                break;
            }
        }
        if sound {
            return Ok(false);
        }
        let value: Vec<u8> = segments
            .iter()
            .flat_map(|r| r.data.iter().copied())
            .collect();
        let prev = first.meta();
        tracing::info!(
            key = %String::from_utf8_lossy(key),
            version = first.version,
            "a packing set of this object cannot be completed: writing it anew"
        );
        self.write_object(key, &value, first.mechanism, Some(&prev))
            .await?;
        Ok(true)
    }

    /// Finds a valid descriptor copy of `set` among `devices`.
    pub(crate) async fn find_descriptor(
        &self,
        set: u64,
        devices: impl Iterator<Item = usize>,
    ) -> Option<(SetDescriptor, Vec<u8>)> {
        for d in devices {
            if !self.io.readable(d) {
                continue;
            }
            let Ok(Some(bytes)) = self.io.retrieve(d, &set_key(TAG_SET, set, 0)).await else {
                continue;
            };
            if let Ok((h, payload)) = PieceHeader::decode(&bytes) {
                if h.kind == PieceKind::SetDescriptor && h.set == set {
                    if let Some(desc) = SetDescriptor::decode(payload) {
                        return Some((desc, payload.to_vec()));
                    }
                }
            }
        }
        None
    }

    /// Checks and repairs one set: missing parity and descriptor copies are rewritten, and with
    /// `dead_copies` missing dead-member copies too; a set with no live member left is deleted.
    /// Returns (pieces repaired, set reclaimed, set lost). Dead copies are restored only once
    /// every object has been repaired (scrub and rebuild check sets last): until then a live
    /// member missing from its device looks like a dead one.
    pub(crate) async fn heal_set(
        &self,
        set: u64,
        desc: &SetDescriptor,
        dead_copies: bool,
    ) -> Result<(usize, bool, bool)> {
        let mut scan = self.scan_set(set, desc, false).await;
        if !scan.live.iter().any(|l| *l) {
            // Every member was overwritten or deleted: nothing needs this set any more.
            let mut ops: Vec<(usize, Vec<u8>)> = Vec::new();
            for (j, &d) in desc.parity_devices.iter().enumerate() {
                ops.push((d as usize, set_key(TAG_PARITY, set, j as u8)));
            }
            for (slot, mem) in desc.members.iter().enumerate() {
                ops.push((mem.device as usize, set_key(TAG_DEAD, set, slot as u8)));
            }
            for &d in &desc.descriptor_devices {
                ops.push((d as usize, set_key(TAG_SET, set, 0)));
            }
            join_all(ops.iter().map(|(d, k)| async move {
                let _ = self.io.delete(*d, k).await;
            }))
            .await;
            return Ok((0, true, false));
        }
        let before_parity: Vec<bool> = scan.parity.iter().map(|p| p.is_some()).collect();
        if !self.complete_set(desc, &mut scan)? {
            return Ok((0, false, true));
        }
        let mut writes: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
        let desc_bytes = desc.encode();
        for (j, had) in before_parity.iter().enumerate() {
            if !had {
                let par = scan.parity[j].as_ref().unwrap();
                let h = set_piece(PieceKind::Parity, desc, j as u8, set, par.len());
                writes.push((
                    desc.parity_devices[j] as usize,
                    set_key(TAG_PARITY, set, j as u8),
                    h.encode(par),
                ));
            }
        }
        for (slot, mem) in desc.members.iter().enumerate() {
            // A dead member whose copy is gone: put its bytes back so the set stays complete.
            // (A live member lost with its device is rewritten by the object's own repair.)
            if dead_copies
                && !scan.live[slot]
                && !scan.dead_copy[slot]
                && !self.io.is_failed(mem.device as usize)
            {
                let data = scan.members[slot].as_ref().unwrap();
                let h = PieceHeader {
                    kind: PieceKind::Member,
                    code: desc.code,
                    k: desc.k,
                    m: desc.m,
                    index: slot as u8,
                    segment: mem.segment,
                    segment_count: 0,
                    object_len: 0,
                    version: mem.version,
                    set,
                    payload_len: data.len() as u32,
                };
                writes.push((
                    mem.device as usize,
                    set_key(TAG_DEAD, set, slot as u8),
                    h.encode(data),
                ));
            }
        }
        let desc_ref = &desc_bytes;
        let descriptors = join_all(desc.descriptor_devices.iter().map(|&d| async move {
            let d = d as usize;
            if self.io.is_failed(d) {
                return (d, true);
            }
            let ok = matches!(self.io.retrieve(d, &set_key(TAG_SET, set, 0)).await,
                Ok(Some(b)) if PieceHeader::decode(&b).is_ok_and(|(h, p)| h.kind == PieceKind::SetDescriptor && p == desc_ref.as_slice()));
            (d, ok)
        }))
        .await;
        for (d, ok) in descriptors {
            if !ok {
                let h = set_piece(PieceKind::SetDescriptor, desc, 0, set, desc_bytes.len());
                writes.push((d, set_key(TAG_SET, set, 0), h.encode(&desc_bytes)));
            }
        }
        let n = writes.len();
        join_all(writes.iter().map(|(d, k, v)| async move {
            let _ = self.io.store(*d, k, v).await;
        }))
        .await;
        self.io
            .counters
            .repairs
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok((n, false, false))
    }
}
