//! Journalling a buffered write: where its records go (writers first; readers too while a
//! device has failed), storing the copies it asks for, and writing again the records that a
//! failed holder took with it. The module docs of `separated` say why this keeps every
//! acknowledged write.

use super::*;

impl Rails {
    /// Forgets the journal records device `w` holds (it failed: they are gone); their
    /// targets journal the writes still buffered again at their next sync.
    pub(super) fn drop_held(&self, w: usize) {
        let held = std::mem::take(&mut *self.devices.get(w).held.lock().unwrap());
        for ((t, g), cost) in held {
            self.devices
                .get(w)
                .held_bytes
                .fetch_sub(cost, Ordering::SeqCst);
            let ts = &self.devices.get(t as usize);
            ts.journal_bytes.fetch_sub(cost, Ordering::SeqCst);
            if t as usize != w {
                ts.lost.lock().unwrap().push(g);
            }
            ts.room.notify_waiters();
        }
    }

    /// Journals again the buffered writes to `d` whose records were on a device that failed.
    pub(super) async fn rejournal_lost(&self, d: usize) -> Result<(), DeviceError> {
        let st = &self.devices.get(d);
        let lost: std::collections::BTreeSet<u64> = std::mem::take(&mut *st.lost.lock().unwrap())
            .into_iter()
            .collect();
        if lost.is_empty() {
            return Ok(());
        }
        let again = st.buffer.lock().unwrap().tagged(&lost);
        for (i, f) in again.iter().enumerate() {
            let cost = journal::record_bytes(f.key.len(), &f.op) as u64;
            st.journal_bytes.fetch_add(cost, Ordering::SeqCst);
            // One copy replaces the one lost; the others are still held.
            if let Err(e) = self.journal(d, f.tag, &f.key, &f.op, 1).await {
                st.lost
                    .lock()
                    .unwrap()
                    .extend(again[i..].iter().map(|f| f.tag));
                return Err(e);
            }
        }
        Ok(())
    }

    /// The device to journal a write to `d` on: the healthy writer-role device other than `d`
    /// holding the fewest journal bytes, one not flushing a backlog first (a sync of it waits
    /// for that backlog to reach its disk), else `d` itself if it writes (behind its backlog).
    /// While a device has failed, or while fewer healthy writers than the journal copies exist
    /// besides `d` (a window that leaves fewer writer devices than copies: RS(3,3) on six
    /// devices reading three, its tolerance 3 asking four copies), else any other healthy
    /// device, a reader too: the failure may have taken the writer a copy needs, and waiting
    /// for the next frame would hold every buffered write for up to a frame (degraded service,
    /// Rails §4.2.1; one small write on a reader costs less).
    pub(super) fn journal_device(&self, d: usize, tried: &[usize]) -> Option<usize> {
        let n = self.devices.len();
        let first = self.journal_rr.fetch_add(1, Ordering::Relaxed) % n;
        let healthy = |w: usize| !tried.contains(&w) && !self.is_failed(w);
        let usable = |w: usize| healthy(w) && self.role(w) == Role::Writer;
        let least_held = |only: &dyn Fn(usize) -> bool| {
            (0..n)
                .map(|i| (first + i) % n)
                .filter(|&w| w != d && only(w))
                .min_by_key(|&w| {
                    let flushing = !self.devices.get(w).buffer.lock().unwrap().is_empty();
                    (
                        flushing,
                        self.devices.get(w).held_bytes.load(Ordering::SeqCst),
                    )
                })
        };
        least_held(&usable)
            .or_else(|| usable(d).then_some(d))
            .or_else(|| {
                let degraded = (0..n).any(|x| self.is_failed(x));
                // Writers of this frame, those guarding before they read included: a guard
                // is over within the frame, a window too wide for the copies is not.
                let writers = (0..n)
                    .filter(|&w| w != d && !self.is_failed(w) && self.role(w) != Role::Reader)
                    .count();
                let short = writers < self.journal_copies();
                (degraded || short).then(|| least_held(&healthy)).flatten()
            })
    }

    /// The journal copies asked of each buffered write (at least one).
    pub(super) fn journal_copies(&self) -> usize {
        self.cfg.journal_copies.max(1)
    }

    /// The devices holding a journal record of the write tagged `tag` to `d`.
    pub(super) fn holders(&self, d: usize, tag: u64) -> Vec<usize> {
        (0..self.devices.len())
            .filter(|&w| {
                self.devices
                    .get(w)
                    .held
                    .lock()
                    .unwrap()
                    .contains_key(&(d as u32, tag))
            })
            .collect()
    }

    /// Records the write tagged `tag` to device `d` in the journal, `copies` times on distinct
    /// devices that do not hold it yet (`copies` times its `record_bytes` are already reserved
    /// against `journal_bytes_max`). Returns once the copies are stored, or the device itself
    /// holds the write under a stored watermark. While fewer writers than copies are usable
    /// (every writer guarding, or too few) it waits for the next role change; with no other
    /// healthy device to take a copy it has `d` take its backlog, this write included, now
    /// (partial separation, never a lost write).
    pub(super) async fn journal(
        &self,
        d: usize,
        tag: u64,
        key: &[u8],
        op: &Pending,
        copies: usize,
    ) -> Result<(), DeviceError> {
        let st = &self.devices.get(d);
        let cost = journal::record_bytes(key.len(), op) as u64;
        let mut left = copies as u64;
        let release = |left: u64| {
            st.journal_bytes.fetch_sub(cost * left, Ordering::SeqCst);
            st.room.notify_waiters();
        };
        let value = journal::encode_record(d as u32, tag, key, op);
        let rkey = journal::record_key(d as u32, tag);
        let mut tried = self.holders(d, tag);
        loop {
            if let Err(e) = st.check() {
                release(left);
                return Err(e);
            }
            if st.wm_stored.load(Ordering::SeqCst) >= tag {
                // Already applied and under a stored watermark: a sync of `d` makes it durable.
                st.mark_dirty();
                release(left);
                return Ok(());
            }
            match self.journal_device(d, &tried) {
                Some(w) => {
                    let hs = &self.devices.get(w);
                    match hs.inner.store(&rkey, &value, StoreMode::Upsert).await {
                        Ok(()) => {
                            hs.mark_dirty();
                            hs.held.lock().unwrap().insert((d as u32, tag), cost);
                            hs.held_bytes.fetch_add(cost, Ordering::SeqCst);
                            if self.is_failed(w) {
                                // It failed meanwhile; `fail_device` may have run before the insert.
                                self.drop_held(w);
                            }
                            st.counters.journal_records.fetch_add(1, Ordering::Relaxed);
                            st.counters
                                .journal_bytes
                                .fetch_add(value.len() as u64, Ordering::Relaxed);
                            left -= 1;
                            if left == 0 {
                                return Ok(());
                            }
                            tried.push(w);
                        }
                        Err(e) => {
                            if fatal(&e) {
                                self.fail_device(w);
                            }
                            tried.push(w);
                        }
                    }
                }
                None => {
                    let holders = self.holders(d, tag);
                    let could = (0..self.devices.len())
                        .any(|x| x != d && !self.is_failed(x) && !holders.contains(&x));
                    if could {
                        // A device that may take a copy once it writes.
                        st.counters.journal_waits.fetch_add(1, Ordering::Relaxed);
                        let now = self.now_ns();
                        let next = self.plan.with_schedule(|s| s.next_change(now));
                        tokio::time::sleep_until(
                            self.start + std::time::Duration::from_nanos(next),
                        )
                        .await;
                        tried = holders;
                    } else if !holders.is_empty() {
                        // Every healthy device holds a copy: as many as the array has now.
                        st.counters.journal_short.fetch_add(1, Ordering::Relaxed);
                        release(left);
                        return Ok(());
                    } else {
                        st.counters
                            .journal_fallbacks
                            .fetch_add(1, Ordering::Relaxed);
                        let res = self.flush_all(d, None).await;
                        st.mark_dirty();
                        release(left);
                        return res;
                    }
                }
            }
        }
    }
}
