//! One device behind read/write separation ([`Separated`]): where each write goes (straight to
//! the device, into its buffer with a journal record, or past a full buffer), and reads that
//! answer from the buffer first.

use super::*;

/// One device behind read/write separation.
pub struct Separated {
    pub(super) rails: Arc<Rails>,
    pub(super) d: usize,
    /// Device `d`'s state in `rails`.
    pub(super) st: Arc<DeviceState>,
}

enum Placed {
    /// In the buffer, with its journal tag when journalled.
    Buffered(Option<u64>),
    /// Straight to the device: it writes and nothing waits before it.
    Direct,
    /// To the device past its backlog (partial separation), with its journal tag when
    /// journalled (without, the older buffered operation on the key is already gone).
    Bypass(Option<u64>),
    /// No room: wait.
    Full,
}

impl Separated {
    /// `retrieve` (or, with `part`, the inner device's `retrieve_part`): from the write
    /// buffer when the key waits there, else from the device, counted.
    async fn read(
        &self,
        key: &[u8],
        range: ReadRange,
        part: bool,
    ) -> Result<Retrieved, DeviceError> {
        let st = self.st();
        self.rails.ready().await?;
        st.check()?;
        if journal::is_reserved(key) {
            return Err(DeviceError::KeyNotFound { key: key.to_vec() });
        }
        let buffered = st.buffer.lock().unwrap().get(key).cloned();
        match buffered {
            Some(Pending::Store(v)) => {
                st.counters.buffer_reads.fetch_add(1, Ordering::Relaxed);
                let (a, b) = range.resolve(v.len() as u64)?;
                st.counters.read_bytes.fetch_add(b - a, Ordering::Relaxed);
                Ok(Retrieved {
                    value: railstore_device::Bytes::copy_from_slice(&v[a as usize..b as usize]),
                    value_len: v.len() as u64,
                })
            }
            Some(Pending::Delete) => {
                st.counters.buffer_reads.fetch_add(1, Ordering::Relaxed);
                Err(DeviceError::KeyNotFound { key: key.to_vec() })
            }
            None => {
                let _reading = ReadInFlight::new(st);
                if self.rails.cfg.separation && self.rails.role(self.d) != Role::Reader {
                    let counter = match railstore_device::purpose::current() {
                        None => &st.counters.off_window_reads,
                        Some(_) => &st.counters.off_window_other_reads,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                let r = if part {
                    st.inner.retrieve_part(key, range).await?
                } else {
                    st.inner.retrieve(key, range).await?
                };
                st.counters
                    .read_bytes
                    .fetch_add(r.value.len() as u64, Ordering::Relaxed);
                Ok(r)
            }
        }
    }

    fn st(&self) -> &DeviceState {
        &self.st
    }

    /// Sends a write now or buffers it, by role; waits for room when the buffer is full.
    async fn write(&self, key: &[u8], op: Pending) -> Result<(), DeviceError> {
        let (r, d, st) = (&self.rails, self.d, self.st());
        r.ready().await?;
        if let Pending::Store(v) = &op {
            st.counters
                .written_bytes
                .fetch_add(v.len() as u64, Ordering::Relaxed);
        }
        if !r.cfg.separation {
            return r.apply(d, key, &op).await;
        }
        loop {
            st.check()?;
            if let Some(until) = r.paced_until(d, &op) {
                let now = r.now_ns();
                st.counters.paced_waits.fetch_add(1, Ordering::Relaxed);
                st.counters
                    .paced_ns
                    .fetch_add(until.saturating_sub(now), Ordering::Relaxed);
                tokio::time::sleep_until(r.start + std::time::Duration::from_nanos(until)).await;
                continue;
            }
            let room = st.room.notified();
            // Decided once: `place` reserves journal room for exactly these copies.
            let copies = r.journal_copies();
            match self.place(key, &op, copies) {
                Placed::Buffered(None) => return Ok(()),
                Placed::Buffered(Some(tag)) => return r.journal(d, tag, key, &op, copies).await,
                Placed::Direct | Placed::Bypass(None) => {
                    r.apply(d, key, &op).await?;
                    // Set once the store is done, so a sync that finds it clean covered it.
                    st.mark_dirty();
                    return Ok(());
                }
                Placed::Bypass(Some(tag)) => {
                    r.journal(d, tag, key, &op, copies).await?;
                    // Under the flush lock no batch or checkpoint runs: this write lands before
                    // any watermark is taken, and only then does the older buffered operation
                    // on the key go (a failed write leaves it, so nothing acknowledged is lost).
                    let _g = st.flush_lock.lock().await;
                    if st.buffer.lock().unwrap().pending_tag(key) > Some(tag) {
                        // A newer write to the key waits in the buffer: this one is superseded.
                        return Ok(());
                    }
                    r.apply(d, key, &op).await?;
                    st.mark_dirty();
                    st.buffer.lock().unwrap().discard_older(key, tag);
                    st.room.notify_waiters();
                    return Ok(());
                }
                Placed::Full => room.await,
            }
        }
    }

    /// Decides, under the buffer lock, where a write goes; hands out its journal tag.
    fn place(&self, key: &[u8], op: &Pending, copies: usize) -> Placed {
        let (r, st) = (&self.rails, self.st());
        let journal = r.journalled();
        let role = r.role(self.d);
        let mut b = st.buffer.lock().unwrap();
        // A writer with nothing pending writes directly; otherwise order needs the buffer (a
        // writer still flushing keeps taking writes behind its backlog). With the journal the
        // stored watermark must also cover every tag handed out, or a journal record of an
        // older write on this key could be replayed over this one.
        let covered = !journal
            || st.wm_stored.load(Ordering::SeqCst) + 1 >= st.next_tag.load(Ordering::SeqCst);
        // At the start of a writer stint, reads still at the device go first
        // (`RailsConfig::switch_read_wait`).
        let released = st.writes_released.load(Ordering::SeqCst);
        if role == Role::Writer && b.is_empty() && covered && released {
            st.counters.direct_ops.fetch_add(1, Ordering::Relaxed);
            return Placed::Direct;
        }
        let cost = journal::record_bytes(key.len(), op) as u64 * copies as u64;
        let journal_room = !journal || {
            let held = st.journal_bytes.load(Ordering::SeqCst);
            held == 0 || held + cost <= r.cfg.journal_bytes_max
        };
        let take_tag = || {
            st.journal_bytes.fetch_add(cost, Ordering::SeqCst);
            st.next_tag.fetch_add(1, Ordering::SeqCst)
        };
        if journal_room && b.fits(key, op) {
            let tag = journal.then(take_tag);
            b.push_tagged(key, op.clone(), tag.unwrap_or(0))
                .expect("checked that it fits");
            st.counters.buffered_ops.fetch_add(1, Ordering::Relaxed);
            if role == Role::Writer {
                st.work.notify_one();
            }
            return Placed::Buffered(tag);
        }
        if journal_room && r.cfg.partial_when_full {
            // Partial separation: the device takes it now. An older buffered op on this key
            // goes, so it cannot overwrite this one when flushed.
            st.counters.partial_ops.fetch_add(1, Ordering::Relaxed);
            if journal {
                return Placed::Bypass(Some(take_tag()));
            }
            b.discard(key);
            return Placed::Bypass(None);
        }
        st.counters
            .backpressure_waits
            .fetch_add(1, Ordering::Relaxed);
        Placed::Full
    }
}

#[async_trait]
impl Device for Separated {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<(), DeviceError> {
        self.limits().check(key, value)?;
        if journal::is_reserved(key) {
            return Err(reserved_key(key));
        }
        if mode != StoreMode::Upsert {
            let exists = self.exist(&[key]).await?[0];
            mode.check(key, exists)?;
        }
        self.write(key, Pending::Store(value.to_vec())).await
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved, DeviceError> {
        self.read(key, range, false).await
    }

    async fn retrieve_part(&self, key: &[u8], range: ReadRange) -> Result<Retrieved, DeviceError> {
        self.read(key, range, true).await
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool, DeviceError> {
        if journal::is_reserved(key) {
            return Err(reserved_key(key));
        }
        if !self.rails.cfg.separation {
            // Straight through: no buffer to look into first.
            self.rails.ready().await?;
            let st = self.st();
            st.check()?;
            let res = st.inner.delete(key, must_exist).await;
            if res.as_ref().is_err_and(fatal) {
                self.rails.fail_device(self.d);
            }
            return res;
        }
        let existed = self.exist(&[key]).await?[0];
        if must_exist && !existed {
            return Err(DeviceError::KeyNotFound { key: key.to_vec() });
        }
        self.write(key, Pending::Delete).await?;
        Ok(existed)
    }

    /// Rails' own keys never exist here.
    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>, DeviceError> {
        let st = self.st();
        self.rails.ready().await?;
        let known: Vec<Option<bool>> = {
            let b = st.buffer.lock().unwrap();
            keys.iter()
                .map(|k| {
                    if journal::is_reserved(k) {
                        Some(false)
                    } else {
                        b.get(k).map(|op| matches!(op, Pending::Store(_)))
                    }
                })
                .collect()
        };
        let ask: Vec<&[u8]> = keys
            .iter()
            .zip(&known)
            .filter(|(_, k)| k.is_none())
            .map(|(k, _)| *k)
            .collect();
        let mut answers = if ask.is_empty() {
            Vec::new()
        } else {
            st.inner.exist(&ask).await?
        }
        .into_iter();
        Ok(known
            .into_iter()
            .map(|k| k.unwrap_or_else(|| answers.next().unwrap_or(false)))
            .collect())
    }

    /// The device's keys with the buffer laid over them; rails' own keys (all after every
    /// other key, as they start with 0xFF) are left out.
    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch, DeviceError> {
        let st = self.st();
        self.rails.ready().await?;
        if journal::is_reserved(&req.prefix) {
            return Ok(IterBatch::default());
        }
        let mut batch = st.inner.iterate(req).await?;
        if let Some(i) = batch
            .entries
            .iter()
            .position(|e| journal::is_reserved(&e.key))
        {
            batch.entries.truncate(i);
            batch.more = false;
        }
        let upper = batch
            .more
            .then(|| batch.entries.last().map(|e| e.key.clone()))
            .flatten();
        // Buffered stores (with their values if asked) and deletes in the batch's range.
        let pending: Vec<(Vec<u8>, Option<Option<Vec<u8>>>)> = {
            let b = st.buffer.lock().unwrap();
            b.keys_with_prefix(&req.prefix)
                .filter(|(k, _)| req.start_after.as_deref().is_none_or(|s| *k > s))
                .take_while(|(k, _)| upper.as_deref().is_none_or(|u| *k <= u))
                .map(|(k, op)| {
                    let op = match op {
                        Pending::Store(v) => Some(req.with_values.then(|| v.clone())),
                        Pending::Delete => None,
                    };
                    (k.to_vec(), op)
                })
                .collect()
        };
        // Nothing buffered there (a scan after the buffers were written out): the device's
        // batch as it is, without copying it through a map.
        if pending.is_empty() {
            return Ok(batch);
        }
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = batch
            .entries
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect();
        for (k, op) in pending {
            match op {
                Some(v) => {
                    merged.insert(k, v);
                }
                None => {
                    merged.remove(&k);
                }
            }
        }
        let limit = if req.entries_max == 0 {
            usize::MAX
        } else {
            req.entries_max
        };
        let more = batch.more || merged.len() > limit;
        let entries = merged
            .into_iter()
            .take(limit)
            .map(|(key, value)| IterEntry { key, value })
            .collect();
        Ok(IterBatch { entries, more })
    }

    async fn info(&self) -> Result<DeviceInfo, DeviceError> {
        self.st().inner.info().await
    }

    /// Makes every write acknowledged before it durable: syncs the device and, with the
    /// journal, the devices holding journal records of its writes that were stored since their
    /// last sync. Writes whose journal device failed are journalled again elsewhere first.
    async fn sync(&self) -> Result<(), DeviceError> {
        let r = &self.rails;
        r.ready().await?;
        if !r.journalled() {
            return self.st().inner.sync().await;
        }
        r.sync_target(self.d).await
    }

    /// Housekeeping only while a writer; the flusher also compacts then.
    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats, DeviceError> {
        if self.rails.role(self.d) != Role::Writer {
            return Ok(CompactStats::default());
        }
        self.st().inner.compact(budget_bytes).await
    }

    fn memory_bytes(&self) -> u64 {
        self.st().inner.memory_bytes()
    }

    fn remote(&self) -> bool {
        self.st().inner.remote()
    }

    /// The device's limits; with the journal, values are shorter by a journal record's
    /// overhead and the longest key, so every value this device accepts can be journalled on
    /// any device of the array.
    fn limits(&self) -> Limits {
        let mut l = self.st().inner.limits();
        if self.rails.journalled() {
            let room = self
                .rails
                .journal_value_bytes_max
                .saturating_sub(RECORD_OVERHEAD_BYTES + l.key_bytes_max);
            l.value_bytes_max = l.value_bytes_max.min(room);
        }
        l
    }
}

/// Counts a read at the device while it runs (also when its task is dropped).
struct ReadInFlight<'a>(&'a DeviceState);

impl<'a> ReadInFlight<'a> {
    fn new(st: &'a DeviceState) -> Self {
        st.reads_in_flight.fetch_add(1, Ordering::SeqCst);
        ReadInFlight(st)
    }
}

impl Drop for ReadInFlight<'_> {
    fn drop(&mut self) {
        if self.0.reads_in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.reads_done.notify_waiters();
        }
    }
}
