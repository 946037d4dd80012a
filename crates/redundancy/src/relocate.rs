//! Moving objects between the layout's last two epochs: into the groups a grow added, or out of
//! them before their devices are removed (a drain).
//!
//! A grown layout keeps every old group and adds groups over the added devices only, and the
//! jump hash sends a key either to its old group or to a new one; so a key that moves has all
//! its old pieces on devices its new group does not use, and one that stays is untouched.
//!
//! While a move runs, writes go to the *target* layout and a key may still be held under the
//! *source* one. The rules that keep every acknowledged write and delete:
//! - every write of a key (put, delete, scrub's and rebuild's repairs) first moves it under its
//!   lock ([`Inner::relocate_locked`]), so a write never leaves an older version behind at the
//!   source;
//! - a move writes the object at the target, makes it durable, then deletes the source's pieces
//!   and makes that durable: a crash leaves the target whole, the source whole, or both (the
//!   target wins);
//! - a read that misses at the target takes the key's lock and reads the source, then the
//!   target again (the object may have moved between the two looks).
//!
//! [`Manager::relocate_all`] walks the source's devices and moves every key whose group
//! changed, throttled and with progress like a rebuild; run again after a restart it finds
//! only what is left. The caller records the move finished and calls
//! [`Manager::finish_move`].

use crate::error::{RedundancyError, Result};
use crate::format::{
    parse_device_key, segment_key, DeviceKey, KEY_OVERHEAD_BYTES, PIECE_HEADER_BYTES,
};
use crate::inner::{Epochs, Inner};
use crate::manager::{Manager, ObjectMeta, Resolved};
use crate::mechanism::Mechanism;
use crate::rebuild::{RepairOptions, RepairProgress};
use futures_util::future::join_all;
use futures_util::stream::{self, StreamExt};
use railstore_device::purpose::background;
use railstore_device::Device;
use railstore_placement::{Layout, Placement};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Which way objects move between a layout's last two epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Into the last epoch's groups (devices were added).
    Grow,
    /// Out of the last epoch's groups, back into the earlier ones, so its devices can go.
    Drain,
}

/// What [`Manager::relocate_all`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// Keys whose group changed that the walk found at the source.
    pub keys: u64,
    /// Objects written at the target (the others were there already, or gone).
    pub objects_moved: u64,
    /// Keys that could not be moved (their source could not be read): the move is not done.
    pub failed: Vec<Vec<u8>>,
    /// Wall time taken.
    pub elapsed: Duration,
}

impl Inner {
    /// Where `key` was before the move, while a move runs and the key's group changed.
    pub(crate) fn moved_from<'a>(&self, epochs: &'a Epochs, key: &[u8]) -> Option<Placement<'a>> {
        if !self.moving.load(Ordering::Acquire) {
            return None;
        }
        let source = epochs.source.as_ref()?;
        let old = source.place(key);
        (old.group() != epochs.layout.place(key).group()).then_some(old)
    }

    /// Moves `key` from its source placement to its target one when a move runs and the
    /// source still holds it. The caller holds the key's lock. Returns the bytes written at
    /// the target (0 when nothing needed writing).
    pub(crate) async fn relocate_locked(&self, key: &[u8]) -> Result<u64> {
        let epochs = self.epochs();
        let Some(old) = self.moved_from(&epochs, key) else {
            return Ok(0);
        };
        let skey = segment_key(key, 0, 0);
        let width = self.width;
        // Index lookups only: the common case (moved already, or never there) costs no read.
        // A device out of service cannot answer, and what it holds cannot be read either.
        let held = join_all((0..width).map(|i| {
            let d = old.device(i);
            let skey = &skey;
            async move { !self.io.is_failed(d) && self.io.exists(d, skey).await.unwrap_or(true) }
        }))
        .await;
        if !held.iter().any(|&h| h) {
            return Ok(0);
        }
        let Some(first) = self.slow_segment(key, 0, &old, None).await? else {
            // Leftovers of a write or delete that never completed there.
            self.delete_at(key, &old, None).await?;
            return Ok(0);
        };
        let new = epochs.layout.place(key);
        let written = if self.settled_at(key, &new).await? {
            // A crash came between the two halves of an earlier move: the target's is newer,
            // and now whole and durable.
            self.forget(key);
            0
        } else {
            let later = self.later_segments(key, &old, &first).await?;
            let mut value = first.data.clone();
            for r in &later {
                value.extend_from_slice(&r.data);
            }
            self.write_object(key, &value, first.mechanism, None)
                .await?;
            // Durable at the target before the source lets go; the moves running at once
            // share their syncs.
            self.sync_shared(new.of_pieces(first.mechanism.span(width)).devices())
                .await?;
            value.len() as u64
        };
        if matches!(first.mechanism, Mechanism::Pack { .. }) {
            self.retire_packed_at(key, &first.meta(), &old).await;
        }
        self.delete_at(key, &old, Some(&first.meta())).await?;
        Ok(written)
    }

    /// Whether `place` holds a version of `key` (an earlier move's, cut by a crash before it
    /// deleted the source): if so it is made whole (every piece of every segment, its packing
    /// sets complete) and durable, as the source is about to go.
    async fn settled_at(&self, key: &[u8], place: &Placement<'_>) -> Result<bool> {
        let skey = segment_key(key, 0, 0);
        let there =
            join_all(
                (0..self.width).map(|i| {
                    let d = place.device(i);
                    let skey = &skey;
                    async move {
                        !self.io.is_failed(d) && self.io.exists(d, skey).await.unwrap_or(false)
                    }
                }),
            )
            .await;
        if !there.iter().any(|&t| t) {
            return Ok(false);
        }
        let Some(first) = self.slow_segment(key, 0, place, None).await? else {
            return Ok(false);
        };
        let later = self.later_segments(key, place, &first).await?;
        let segments: Vec<&Resolved> = std::iter::once(&first).chain(&later).collect();
        self.secure_packed(key, place, &segments).await?;
        self.sync_shared(place.of_pieces(first.mechanism.span(self.width)).devices())
            .await?;
        Ok(true)
    }

    /// Deletes what `place` holds of `key`: segment 0 on every position and, for `prev`, its
    /// later segments; durable before it returns (the source of a move must not come back).
    async fn delete_at(
        &self,
        key: &[u8],
        place: &Placement<'_>,
        prev: Option<&ObjectMeta>,
    ) -> Result<()> {
        let mut deletes: Vec<(usize, Vec<u8>)> = (0..self.width)
            .map(|i| (place.device(i), segment_key(key, 0, 0)))
            .collect();
        if let Some(p) = prev {
            let pieces = place.of_pieces(p.mechanism.pieces());
            for s in 1..p.segments {
                deletes.extend(
                    pieces
                        .devices()
                        .map(|d| (d, segment_key(key, s, p.version))),
                );
            }
        }
        let devices: BTreeSet<usize> = deletes
            .iter()
            .map(|(d, _)| *d)
            .filter(|&d| !self.io.is_failed(d))
            .collect();
        join_all(
            deletes
                .iter()
                .filter(|(d, _)| !self.io.is_failed(*d))
                .map(|(d, k)| self.io.delete(*d, k)),
        )
        .await;
        self.sync_shared(devices.into_iter()).await
    }
}

impl Manager {
    /// The move running, if any, and the layout objects move out of.
    pub fn moving(&self) -> Option<(Move, Arc<Layout>)> {
        let inner = &self.inner;
        if !inner.moving.load(Ordering::Acquire) {
            return None;
        }
        let epochs = inner.epochs();
        Some((epochs.moving?, epochs.source.clone()?))
    }

    /// Starts a drain while the array serves: from now on objects are written by the layout
    /// before the last epoch, and found under either until the move is done (the caller has
    /// recorded the drain where the next open reads it, and runs [`Manager::relocate_all`]).
    /// Refused while a move runs and when the layout has one epoch. The switch is
    /// [`Manager::switch_epochs`]'s.
    pub async fn start_drain(&self) -> Result<()> {
        self.switch_epochs(|_, cell| {
            let Some(kept) = cell.layout.previous() else {
                return Err(RedundancyError::Config(
                    "the layout has one epoch: there is nothing to drain".into(),
                ));
            };
            Ok(Epochs {
                layout: Arc::new(kept),
                source: Some(cell.layout.clone()),
                moving: Some(Move::Drain),
            })
        })
        .await
    }

    /// Starts a grow while the array serves: `added` join the array after its devices, and
    /// objects are written by `grown` (the current layout with one more epoch over them) from
    /// now on and found under either layout until the move is done (the caller has recorded
    /// the grow where the next open reads it, and runs [`Manager::relocate_all`]). Refused
    /// while a move runs, while a drained epoch still awaits its clean stop, and for a layout
    /// that is not the current one grown by exactly the added devices.
    pub async fn start_grow(&self, added: Vec<Arc<dyn Device>>, grown: Layout) -> Result<()> {
        self.switch_epochs(move |inner, cell| {
            let current = &cell.layout;
            if current.devices() != inner.io.len() {
                return Err(RedundancyError::Config(
                    "a drained epoch's devices are still in the array: grow after the clean \
                     stop that takes them out"
                        .into(),
                ));
            }
            if grown.previous().map(|p| p.encode()) != Some(current.encode()) {
                return Err(RedundancyError::Config(
                    "the grown layout is not the current one with an epoch added".into(),
                ));
            }
            if grown.devices() != current.devices() + added.len() {
                return Err(RedundancyError::Config(format!(
                    "the grown layout has {} devices; {} + {} were given",
                    grown.devices(),
                    current.devices(),
                    added.len()
                )));
            }
            for (i, d) in added.iter().enumerate() {
                let limits = d.limits();
                if limits.key_bytes_max < inner.key_bytes_max + KEY_OVERHEAD_BYTES
                    || limits.value_bytes_max < inner.piece_payload_max + PIECE_HEADER_BYTES
                {
                    return Err(RedundancyError::Config(format!(
                        "added device {} takes smaller keys or values than the array's",
                        current.devices() + i
                    )));
                }
            }
            // Unused until the switch below, which places objects on them.
            let count = added.len();
            inner.io.add(added);
            inner
                .sync_groups
                .write()
                .unwrap()
                .extend((0..count).map(|_| Arc::default()));
            Ok(Epochs {
                layout: Arc::new(grown),
                source: Some(current.clone()),
                moving: Some(Move::Grow),
            })
        })
        .await
    }

    /// Replaces the layouts objects are placed by while the array serves, by what `next`
    /// makes of the current ones (refused while a move runs or a drained epoch awaits its
    /// clean stop). The switch is made holding every key's lock, so no write is placed partly
    /// by the old layouts and partly by the new; it returns once no operation holds the old
    /// layouts, so a move started after it empties no old place under a reader still looking
    /// there.
    async fn switch_epochs(
        &self,
        next: impl FnOnce(&Inner, &Epochs) -> Result<Epochs>,
    ) -> Result<()> {
        let inner = &self.inner;
        // No write straddles the switch: a write holds its key's lock from before it first
        // places the key until it is done, and one that looked under the old layouts (finding
        // nothing to move) and then wrote or deleted under the new ones would leave the old
        // place as it was, for the move to bring back.
        let no_writes = inner.lock_all().await;
        let before = {
            let mut cell = inner.epochs.write().unwrap();
            if cell.source.is_some() && inner.moving.load(Ordering::Acquire) {
                return Err(RedundancyError::Config("a move is running already".into()));
            }
            if cell.moving == Some(Move::Drain) {
                // Its layout is the one kept; the drained epoch goes at the next clean stop.
                return Err(RedundancyError::Config(
                    "the last epoch is drained already".into(),
                ));
            }
            let epochs = next(inner, &cell)?;
            // Set first: an operation that takes the new layouts must look at the source.
            inner.moving.store(true, Ordering::Release);
            std::mem::replace(&mut *cell, Arc::new(epochs))
        };
        // A device may now hold another piece under a key whose table is kept.
        inner.unit_tables.lock().unwrap().clear();
        drop(no_writes);
        // Reads hold the layouts they took until they end.
        let waiting = Instant::now();
        let mut told = false;
        while Arc::strong_count(&before) > 1 {
            if !told && waiting.elapsed() > Duration::from_secs(10) {
                tracing::info!("a layout switch waits for operations that started before it");
                told = true;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// Moves `key` to its target placement now if a move runs and it is still at its source;
    /// returns the bytes written.
    pub async fn relocate(&self, key: &[u8]) -> Result<u64> {
        let inner = &self.inner;
        inner.check_key(key)?;
        let _guard = inner.lock(key).await;
        inner.relocate_locked(key).await
    }

    /// Moves every key whose group changed from the source layout to the target: walks the
    /// source's devices (keys listed as it goes into `progress.keys_listed`), then moves them
    /// `options.concurrency` at a time within `options.write_bytes_per_s_max`.
    pub async fn relocate_all(
        &self,
        options: RepairOptions,
        progress: &RepairProgress,
    ) -> Result<MoveReport> {
        background(self.relocate_all_inner(options, progress)).await
    }

    async fn relocate_all_inner(
        &self,
        options: RepairOptions,
        progress: &RepairProgress,
    ) -> Result<MoveReport> {
        let inner = &self.inner;
        let started = Instant::now();
        let Some((direction, source)) = self.moving() else {
            return Ok(MoveReport::default());
        };
        // The devices that can hold a key that moves: every old one for a grow (any old group
        // may lose keys), the drained ones for a drain (only their groups lose keys).
        let epochs = inner.epochs();
        let walk: Vec<usize> = match direction {
            Move::Grow => (0..source.devices()).collect(),
            Move::Drain => (epochs.layout.devices()..source.devices()).collect(),
        };
        let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
        for d in walk.into_iter().filter(|&d| !inner.io.is_failed(d)) {
            inner
                .walk_device(d, segment_key(b"", 0, 0), progress, |entries| {
                    for e in entries {
                        if let Some(DeviceKey::Segment { user_key, .. }) = parse_device_key(&e.key)
                        {
                            if inner.moved_from(&epochs, &user_key).is_some() {
                                keys.insert(user_key);
                            }
                        }
                    }
                })
                .await?;
        }
        progress
            .items_total
            .store(keys.len() as u64, Ordering::Relaxed);
        let report = std::sync::Mutex::new(MoveReport {
            keys: keys.len() as u64,
            ..MoveReport::default()
        });
        let moved_bytes = std::sync::atomic::AtomicU64::new(0);
        stream::iter(keys)
            .for_each_concurrent(options.concurrency.max(1), |key| {
                let (report, moved_bytes) = (&report, &moved_bytes);
                async move {
                    if progress.cancel.load(Ordering::Relaxed) {
                        return;
                    }
                    let outcome = self.relocate(&key).await;
                    {
                        let mut r = report.lock().unwrap();
                        match outcome {
                            Ok(0) => {}
                            Ok(bytes) => {
                                r.objects_moved += 1;
                                moved_bytes.fetch_add(bytes, Ordering::Relaxed);
                            }
                            Err(e) => {
                                tracing::warn!(
                                    key = %crate::show_key(&key),
                                    error = %e,
                                    "an object could not be moved"
                                );
                                r.failed.push(key);
                            }
                        }
                    }
                    progress.items_done.fetch_add(1, Ordering::Relaxed);
                    let written = moved_bytes.load(Ordering::Relaxed);
                    progress.bytes_written.store(written, Ordering::Relaxed);
                    options.throttle(started, written).await;
                }
            })
            .await;
        if progress.cancel.load(Ordering::Relaxed) {
            return Err(RedundancyError::Cancelled);
        }
        let mut r = report.into_inner().unwrap();
        r.failed.sort();
        r.elapsed = started.elapsed();
        Ok(r)
    }

    /// Ends the move: reads stop looking at the source. Call once [`Manager::relocate_all`]
    /// reported no failures and the end of the move is recorded where the next open reads it.
    pub fn finish_move(&self) {
        self.inner.moving.store(false, Ordering::Release);
    }
}
