//! Rebuild of a failed device onto a replacement (KVMD §3.1 "Rebuild Device") and scrub. Both
//! walk the keys the devices hold, so their cost follows live data, not capacity.

use crate::error::{RedundancyError, Result};
use crate::format::{parse_device_key, segment_key, DeviceKey, PieceHeader, PieceKind};
use crate::inner::Inner;
use crate::manager::{Manager, Resolved, SegmentHead};
use futures_util::stream::{self, StreamExt};
use railstore_device::purpose::background;
use railstore_device::{Device, IterEntry, IterRequest};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How hard a rebuild or scrub may push the devices.
#[derive(Debug, Clone, Copy)]
pub struct RepairOptions {
    /// Objects or sets repaired at once (foreground work keeps the rest of each device's
    /// queue).
    pub concurrency: usize,
    /// Most bytes per second written by the repair; `None` for no limit.
    pub write_bytes_per_s_max: Option<u64>,
}

impl RepairOptions {
    /// Waits until `written` bytes since `started` are within `write_bytes_per_s_max`.
    pub(crate) async fn throttle(&self, started: Instant, written: u64) {
        if let Some(max) = self.write_bytes_per_s_max.filter(|m| *m > 0) {
            let due = Duration::from_secs_f64(written as f64 / max as f64);
            let now = started.elapsed();
            if due > now {
                tokio::time::sleep(due - now).await;
            }
        }
    }
}

impl Default for RepairOptions {
    fn default() -> Self {
        RepairOptions {
            concurrency: 16,
            write_bytes_per_s_max: None,
        }
    }
}

/// Progress of a rebuild or scrub, readable while it runs (for a progress bar and metrics).
#[derive(Debug, Default)]
pub struct RepairProgress {
    /// Device keys listed so far.
    pub keys_listed: AtomicU64,
    /// Objects and sets to check, once listing is done.
    pub items_total: AtomicU64,
    /// Objects and sets checked.
    pub items_done: AtomicU64,
    /// Pieces rewritten or deleted.
    pub pieces_repaired: AtomicU64,
    /// Bytes written to devices.
    pub bytes_written: AtomicU64,
    /// Set to stop the repair: items not started are skipped and it returns
    /// [`RedundancyError::Cancelled`] (a store shutting down mid-rebuild).
    pub cancel: std::sync::atomic::AtomicBool,
}

/// What a rebuild or scrub found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Objects checked.
    pub objects: u64,
    /// Objects that needed at least one piece rewritten.
    pub objects_repaired: u64,
    /// Objects that cannot be read back (more lost than their mechanism tolerates).
    pub objects_lost: Vec<Vec<u8>>,
    /// Packing sets checked.
    pub sets: u64,
    /// Sets with a piece rewritten.
    pub sets_repaired: u64,
    /// Sets whose members were all dead and were deleted.
    pub sets_reclaimed: u64,
    /// Sets that cannot be completed.
    pub sets_lost: u64,
    /// Pieces rewritten or deleted.
    pub pieces_repaired: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Wall (or virtual) time taken.
    pub elapsed: Duration,
}

impl Manager {
    /// Replaces failed device `device` with `replacement` and regenerates everything it held
    /// from the devices that share redundancy groups with it. Reads avoid the device until the
    /// rebuild ends; writes reach it at once.
    pub async fn rebuild(
        &self,
        device: usize,
        replacement: Arc<dyn Device>,
        options: RepairOptions,
        progress: Arc<RepairProgress>,
    ) -> Result<RepairReport> {
        let inner = &self.inner;
        if device >= inner.io.len() {
            return Err(RedundancyError::NoSuchDevice {
                index: device,
                devices: inner.io.len(),
            });
        }
        inner.io.replace(device, replacement);
        let mut peers: BTreeSet<usize> = BTreeSet::new();
        // While objects move between epochs, the device's groups in both layouts.
        let epochs = inner.epochs();
        for layout in std::iter::once(&epochs.layout).chain(epochs.source.as_ref()) {
            for g in layout.groups_of(device) {
                peers.extend(layout.group(g));
            }
        }
        peers.remove(&device);
        // Peers out of service are not walked: within the tolerance, every object with a
        // piece on the device has enough pieces on the peers that are in service.
        peers.retain(|&p| !inner.io.is_failed(p));
        let report = background(inner.repair(
            peers.into_iter().collect(),
            Some(device),
            options,
            &progress,
        ))
        .await?;
        inner.io.finish_rebuild(device);
        Ok(report)
    }

    /// Verifies every object and set on every healthy device, repairs what is wrong, and
    /// reclaims packing sets whose members are all dead. Run after an unclean shutdown to roll
    /// incomplete writes forward or back.
    pub async fn scrub(
        &self,
        options: RepairOptions,
        progress: Arc<RepairProgress>,
    ) -> Result<RepairReport> {
        let inner = &self.inner;
        let all = (0..inner.io.len())
            .filter(|&d| !inner.io.is_failed(d))
            .collect();
        background(inner.repair(all, None, options, &progress)).await
    }
}

/// A key of one version of an object seen on a device (a later segment, or a staged segment
/// 0): (device, device key, version in the key).
type LaterKey = (usize, Vec<u8>, u64);

enum Item {
    Object(Vec<u8>),
    /// A set, the device it was listed on and the piece's key there.
    Set(u64, usize, Vec<u8>),
}

impl Inner {
    /// Lists device `d`'s keys under `prefix` into `each`, a batch at a time, counting them in
    /// `progress.keys_listed`. A device that leaves service during the walk is walked no
    /// further: what it shares with others has pieces on them too. `Cancelled` once `progress`
    /// is.
    pub(crate) async fn walk_device(
        &self,
        d: usize,
        prefix: Vec<u8>,
        progress: &RepairProgress,
        mut each: impl FnMut(&[IterEntry]),
    ) -> Result<()> {
        let mut req = IterRequest {
            prefix,
            start_after: None,
            entries_max: 4096,
            with_values: false,
        };
        loop {
            if progress.cancel.load(Ordering::Relaxed) {
                return Err(RedundancyError::Cancelled);
            }
            let batch = match self.io.iterate(d, &req).await {
                Ok(b) => b,
                Err(_) if self.io.is_failed(d) => return Ok(()),
                Err(source) => return Err(RedundancyError::Device { device: d, source }),
            };
            progress
                .keys_listed
                .fetch_add(batch.entries.len() as u64, Ordering::Relaxed);
            each(&batch.entries);
            if !batch.more {
                return Ok(());
            }
            req.start_after = batch.entries.last().map(|e| e.key.clone());
        }
    }

    async fn repair(
        &self,
        walk: Vec<usize>,
        target: Option<usize>,
        options: RepairOptions,
        progress: &RepairProgress,
    ) -> Result<RepairReport> {
        let started = Instant::now();
        let mut objects: HashSet<Vec<u8>> = HashSet::new();
        // Later-segment keys seen, by object: those of other versions than the one a repair
        // settles on are leftovers of interrupted writes.
        let mut later_keys: HashMap<Vec<u8>, Vec<LaterKey>> = HashMap::new();
        let mut sets: HashSet<u64> = HashSet::new();
        let mut set_items: Vec<(u64, usize, Vec<u8>)> = Vec::new();
        let epochs = self.epochs();
        for &d in &walk {
            self.walk_device(d, Vec::new(), progress, |entries| {
                for e in entries {
                    // An object's key, with the version of a key that names one (a later
                    // segment, or a staged segment 0).
                    let (user_key, versioned) = match parse_device_key(&e.key) {
                        Some(DeviceKey::Segment {
                            user_key,
                            segment,
                            version,
                        }) => (user_key, (segment > 0).then_some(version)),
                        Some(DeviceKey::Staged { user_key, version }) => (user_key, Some(version)),
                        Some(DeviceKey::Set { set, .. }) => {
                            if sets.insert(set) {
                                set_items.push((set, d, e.key.clone()));
                            }
                            continue;
                        }
                        None => continue,
                    };
                    let relevant = target.is_none_or(|t| {
                        epochs.layout.place(&user_key).devices().any(|x| x == t)
                            || self
                                .moved_from(&epochs, &user_key)
                                .is_some_and(|old| old.devices().any(|x| x == t))
                    });
                    if relevant {
                        if let Some(version) = versioned {
                            later_keys.entry(user_key.clone()).or_default().push((
                                d,
                                e.key.clone(),
                                version,
                            ));
                        }
                        objects.insert(user_key);
                    }
                }
            })
            .await?;
        }
        let mut objects: Vec<Vec<u8>> = objects.into_iter().collect();
        objects.sort();
        progress
            .items_total
            .store((objects.len() + set_items.len()) as u64, Ordering::Relaxed);
        let written0 = self.io.counters.store_bytes.load(Ordering::Relaxed);
        let report = std::sync::Mutex::new(RepairReport::default());
        // Objects first, all of them: a live packed member is back on its device before any
        // set is checked, so no set mistakes it for a dead one and reclaims it.
        let later_keys = &later_keys;
        let run_items = |items: Vec<Item>| {
            let report = &report;
            stream::iter(items).for_each_concurrent(
                options.concurrency.max(1),
                move |item| async move {
                    if progress.cancel.load(Ordering::Relaxed) {
                        return;
                    }
                    let before = self.io.counters.repairs.load(Ordering::Relaxed);
                    match item {
                        Item::Object(key) => {
                            let stale = later_keys.get(&key).map(Vec::as_slice).unwrap_or(&[]);
                            let outcome = match target {
                                Some(t) => self.rebuild_object(&key, t, stale).await,
                                None => self.heal_object(&key, stale).await,
                            };
                            let repaired =
                                self.io.counters.repairs.load(Ordering::Relaxed) > before;
                            let mut r = report.lock().unwrap();
                            r.objects += 1;
                            match outcome {
                                Ok(_) => r.objects_repaired += u64::from(repaired),
                                Err(_) => r.objects_lost.push(key),
                            }
                        }
                        Item::Set(set, found_on, listed) => {
                            let outcome = match self.heal_set_by_id(set, found_on, target).await {
                                // No descriptor anywhere, and the piece listed is gone too: the
                                // set was reclaimed since the listing (all its members dead),
                                // not lost.
                                None if matches!(
                                    self.io.exists(found_on, &listed).await,
                                    Ok(false)
                                ) =>
                                {
                                    Some((0, false, false))
                                }
                                outcome => outcome,
                            };
                            let mut r = report.lock().unwrap();
                            r.sets += 1;
                            match outcome {
                                Some((n, reclaimed, lost)) => {
                                    r.sets_repaired += u64::from(n > 0);
                                    r.sets_reclaimed += u64::from(reclaimed);
                                    r.sets_lost += u64::from(lost);
                                }
                                None => r.sets_lost += 1,
                            }
                        }
                    }
                    let after = self.io.counters.repairs.load(Ordering::Relaxed);
                    progress
                        .pieces_repaired
                        .fetch_add(after.saturating_sub(before), Ordering::Relaxed);
                    progress.items_done.fetch_add(1, Ordering::Relaxed);
                    let written = self.io.counters.store_bytes.load(Ordering::Relaxed) - written0;
                    progress.bytes_written.store(written, Ordering::Relaxed);
                    options.throttle(started, written).await;
                },
            )
        };
        run_items(objects.into_iter().map(Item::Object).collect()).await;
        run_items(
            set_items
                .into_iter()
                .map(|(s, d, key)| Item::Set(s, d, key))
                .collect(),
        )
        .await;
        if progress.cancel.load(Ordering::Relaxed) {
            return Err(RedundancyError::Cancelled);
        }
        let mut r = report.into_inner().unwrap();
        r.pieces_repaired = progress.pieces_repaired.load(Ordering::Relaxed);
        r.bytes_written = self.io.counters.store_bytes.load(Ordering::Relaxed) - written0;
        r.elapsed = started.elapsed();
        r.objects_lost.sort();
        Ok(r)
    }

    /// Resolves an object from all its pieces and rewrites what is missing, corrupt or stale;
    /// deletes the `later` segment keys (device, key, version) of other versions. `Ok(false)`:
    /// nothing of it is stored.
    pub(crate) async fn heal_object(&self, key: &[u8], later: &[LaterKey]) -> Result<bool> {
        let _guard = self.lock(key).await;
        // During a move an object is healed where it goes (and `later` keys of its old
        // version are gone with the move).
        self.relocate_locked(key).await?;
        let epochs = self.epochs();
        let place = epochs.layout.place(key);
        let found = self.slow_segment(key, 0, &place, None).await?;
        let current = found.as_ref().map(|r| r.version);
        if self.cached(key).is_some_and(|m| Some(m.version) != current) {
            // The cache names another version, whose later segments go now.
            self.forget(key);
        }
        let mut staged_current = Vec::new();
        for (d, dkey, v) in later {
            if Some(*v) != current && !self.io.is_failed(*d) {
                let _ = self.io.delete(*d, dkey).await;
            } else if matches!(parse_device_key(dkey), Some(DeviceKey::Staged { .. })) {
                // Segment 0 was just repaired in place from it: it goes after the next sync.
                staged_current.push((*d, dkey.clone()));
            }
        }
        self.defer_deletes(staged_current).await?;
        if let Some(first) = found.as_ref().filter(|r| r.set.is_some()) {
            let rest = self.later_segments(key, &place, first).await?;
            let segments: Vec<&Resolved> = std::iter::once(first).chain(&rest).collect();
            self.secure_packed(key, &place, &segments).await?;
        }
        if found.is_none() {
            // Leftovers of an incomplete write or delete: roll it back (or forward) to absent.
            self.forget(key);
            let skey = crate::format::segment_key(key, 0, 0);
            for pos in 0..self.width {
                let d = place.device(pos);
                if !self.io.is_failed(d) {
                    let _ = self.io.delete(d, &skey).await;
                }
            }
        }
        Ok(found.is_some())
    }

    /// Regenerates what device `target` should hold of one object, reading only what a normal
    /// read needs (one copy, or k shards) from the other devices. Falls back to
    /// [`Inner::heal_object`] when the cheap read does not settle it, and for packed objects.
    async fn rebuild_object(&self, key: &[u8], target: usize, later: &[LaterKey]) -> Result<bool> {
        let fast = {
            let _guard = self.lock(key).await;
            self.relocate_locked(key).await?;
            self.rebuild_object_fast(key, target).await
        };
        match fast {
            Some(()) => Ok(true),
            None => self.heal_object(key, later).await,
        }
    }

    async fn rebuild_object_fast(&self, key: &[u8], target: usize) -> Option<()> {
        let epochs = self.epochs();
        let place = epochs.layout.place(key);
        let hint = self.cached(key).map(|m| m.mechanism);
        let first = self.fast_segment(key, 0, &place, hint, None).await?;
        if first.set.is_some() {
            return None;
        }
        let own = place.of_pieces(first.mechanism.pieces());
        let positions: Vec<usize> = (0..first.mechanism.pieces())
            .filter(|&p| own.device(p) == target)
            .collect();
        for s in 0..first.segment_count {
            let r = if s == 0 {
                first.clone()
            } else {
                self.fast_segment(key, s, &place, Some(first.mechanism), Some(first.version))
                    .await?
            };
            if positions.is_empty() {
                continue;
            }
            let head = SegmentHead {
                segment: s,
                segment_count: r.segment_count,
                object_len: r.object_len,
                version: r.version,
                shard_len: r.shard_len,
            };
            let pieces = self
                .pieces_of(r.mechanism, head, &r.data, None, None)
                .ok()?;
            let skey = segment_key(key, s, r.version);
            for (pos, bytes) in pieces.iter().filter(|(p, _)| positions.contains(p)) {
                self.io.store(own.device(*pos), &skey, bytes).await.ok()?;
                self.io.counters.repairs.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(())
    }

    async fn heal_set_by_id(
        &self,
        set: u64,
        found_on: usize,
        target: Option<usize>,
    ) -> Option<(usize, bool, bool)> {
        // Descriptor copies live on devices of the same group as the device the set was seen on.
        let mut candidates: Vec<usize> = vec![found_on];
        let epochs = self.epochs();
        for layout in std::iter::once(&epochs.layout).chain(epochs.source.as_ref()) {
            for g in layout.groups_of(found_on) {
                candidates.extend(layout.group(g));
            }
        }
        let mut seen = HashSet::new();
        candidates.retain(|d| seen.insert(*d));
        let (desc, _) = self.find_descriptor(set, candidates.into_iter()).await?;
        if let Some(t) = target {
            let involved = desc.parity_devices.iter().any(|&d| d as usize == t)
                || desc.descriptor_devices.iter().any(|&d| d as usize == t)
                || desc.members.iter().any(|m| m.device as usize == t);
            if !involved {
                return Some((0, false, false));
            }
            // Only a member there, and the objects pass already put it back live: nothing to do.
            let only_member = !desc.parity_devices.iter().any(|&d| d as usize == t)
                && !desc.descriptor_devices.iter().any(|&d| d as usize == t);
            if only_member {
                let (slot, mem) = desc
                    .members
                    .iter()
                    .enumerate()
                    .find(|(_, m)| m.device as usize == t)?;
                let live = self
                    .io
                    .retrieve(t, &segment_key(&mem.user_key, mem.segment, mem.version))
                    .await
                    .ok()
                    .flatten()
                    .and_then(|b| PieceHeader::decode(&b).ok().map(|(h, _)| h))
                    .is_some_and(|h| {
                        h.kind == PieceKind::Member
                            && h.set == set
                            && h.index as usize == slot
                            && h.version == mem.version
                    });
                if live {
                    return Some((0, false, false));
                }
            }
        }
        self.heal_set(set, &desc, true).await.ok()
    }
}
