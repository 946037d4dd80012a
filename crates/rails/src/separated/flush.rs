//! The flusher: a device's buffered writes applied in arrival order while it is a writer, with
//! checkpoints (sync, then watermark) on the way, and the journal records it holds deleted once
//! the watermarks covering them are durable. The module docs of `separated` say why.

use super::*;

impl Rails {
    /// Applies buffered operations to device `d` in arrival order while `keep_going` holds;
    /// with the journal, takes checkpoints on the way and at the end, then makes the last
    /// watermark durable.
    pub(super) async fn flush_all(
        &self,
        d: usize,
        keep_going: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), DeviceError> {
        let st = &self.devices.get(d);
        let journal = self.journalled();
        let go = || keep_going.is_none_or(|k| k());
        let (mut ops, mut bytes) = (0usize, 0u64);
        loop {
            let _g = st.flush_lock.lock().await;
            if !go() {
                return Ok(());
            }
            // Several keys at once: each key appears once in a batch, so order per key holds.
            let batch = st
                .buffer
                .lock()
                .unwrap()
                .next_batch_tagged(FLUSH_BATCH_OPS_MAX);
            if batch.is_empty() {
                break;
            }
            let results = futures_util::future::join_all(batch.iter().map(|f| async move {
                match &f.op {
                    Pending::Store(v) => st
                        .inner
                        .store(&f.key, v, StoreMode::Upsert)
                        .await
                        .map(|_| v.len() as u64),
                    Pending::Delete => st.inner.delete(&f.key, false).await.map(|_| 0),
                }
            }))
            .await;
            let mut first_error = None;
            let mut done = Vec::new();
            for (f, res) in batch.iter().zip(results) {
                match res {
                    Ok(b) => {
                        done.push(f);
                        st.counters.flushed_ops.fetch_add(1, Ordering::Relaxed);
                        st.counters.flushed_bytes.fetch_add(b, Ordering::Relaxed);
                        // What the applied operation keeps charged in the buffer.
                        bytes += f.key.len() as u64 + b + crate::buffer::ENTRY_OVERHEAD_BYTES;
                    }
                    Err(e) => {
                        if fatal(&e) {
                            self.fail_device(d);
                        }
                        first_error.get_or_insert(e);
                    }
                }
            }
            if journal {
                // A batch counts whole or not at all: the watermark must never pass an
                // operation the device lacks. The ones that did land are written again.
                if let Some(e) = first_error {
                    return Err(e);
                }
                let mut b = st.buffer.lock().unwrap();
                for f in &done {
                    b.applied(f.seq, &f.key);
                }
                ops += done.len();
            } else {
                {
                    let mut b = st.buffer.lock().unwrap();
                    for f in &done {
                        b.flushed(f.seq, &f.key);
                    }
                }
                st.room.notify_waiters();
                if let Some(e) = first_error {
                    return Err(e);
                }
                continue;
            }
            let bound = st.buffer.lock().unwrap().bytes_max();
            if ops >= CHECKPOINT_OPS_MAX || bytes >= bound / 4 {
                self.checkpoint(d).await?;
                (ops, bytes) = (0, 0);
            }
        }
        if journal && go() {
            let _g = st.flush_lock.lock().await;
            if st.buffer.lock().unwrap().has_applied() {
                self.checkpoint(d).await?;
            }
            // Make the watermark durable as well, so the records it covers can be deleted.
            if st.wm_stored.load(Ordering::SeqCst) > st.wm_durable.load(Ordering::SeqCst) {
                self.sync_device(d, false).await?;
            }
        }
        Ok(())
    }

    /// Under `d`'s flush lock: syncs `d` (the applied operations become durable), stores the
    /// watermark W = (oldest tag the device has not had, see
    /// [`WriteBuffer::oldest_unapplied_tag`]) - 1, then lets the applied operations go.
    pub(super) async fn checkpoint(&self, d: usize) -> Result<(), DeviceError> {
        let st = &self.devices.get(d);
        let w = {
            let b = st.buffer.lock().unwrap();
            // Under the buffer lock: no tag is being handed out meanwhile.
            let next = st.next_tag.load(Ordering::SeqCst);
            b.oldest_unapplied_tag().unwrap_or(next) - 1
        };
        self.sync_device(d, false).await?;
        if w > st.wm_stored.load(Ordering::SeqCst) {
            let res = st
                .inner
                .store(
                    &journal::watermark_key(d as u32),
                    &journal::encode_watermark(d as u32, w),
                    StoreMode::Upsert,
                )
                .await;
            if let Err(e) = res {
                if fatal(&e) {
                    self.fail_device(d);
                }
                return Err(e);
            }
            st.wm_stored.store(w, Ordering::SeqCst);
            st.counters.watermarks.fetch_add(1, Ordering::Relaxed);
        }
        // Every applied operation is durable now (an applied one above W only makes W lag; a
        // replay of it rewrites the same value).
        st.buffer.lock().unwrap().confirm_applied(u64::MAX);
        st.room.notify_waiters();
        Ok(())
    }

    /// Deletes, while `keep_going` holds, the journal records device `w` holds whose target's
    /// durable watermark covers them.
    pub(super) async fn delete_dead_records(
        &self,
        w: usize,
        keep_going: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), DeviceError> {
        let hs = &self.devices.get(w);
        loop {
            if keep_going.is_some_and(|k| !k()) {
                return Ok(());
            }
            let batch: Vec<((u32, u64), u64)> = {
                let held = hs.held.lock().unwrap();
                let mut out = Vec::new();
                for t in 0..self.devices.len() {
                    let durable = self.devices.get(t).wm_durable.load(Ordering::SeqCst);
                    let t = t as u32;
                    out.extend(
                        held.range((t, 0)..=(t, durable))
                            .take(DELETE_BATCH_OPS_MAX - out.len())
                            .map(|(k, c)| (*k, *c)),
                    );
                    if out.len() == DELETE_BATCH_OPS_MAX {
                        break;
                    }
                }
                out
            };
            if batch.is_empty() {
                return Ok(());
            }
            let results = futures_util::future::join_all(batch.iter().map(|((t, g), _)| {
                let key = journal::record_key(*t, *g);
                async move { hs.inner.delete(&key, false).await }
            }))
            .await;
            for (((t, g), cost), res) in batch.into_iter().zip(results) {
                match res {
                    Ok(_) => {
                        if hs.held.lock().unwrap().remove(&(t, g)).is_some() {
                            hs.held_bytes.fetch_sub(cost, Ordering::SeqCst);
                            let ts = &self.devices.get(t as usize);
                            ts.journal_bytes.fetch_sub(cost, Ordering::SeqCst);
                            ts.counters.journal_deleted.fetch_add(1, Ordering::Relaxed);
                            ts.room.notify_waiters();
                        }
                    }
                    Err(e) => {
                        if fatal(&e) {
                            self.fail_device(w);
                        }
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// One device's flusher: writes its buffer out whenever it is a writer, compacts it then,
/// deletes the journal records it holds that are no longer needed, and sleeps until its role
/// changes or new work arrives.
pub(super) async fn flusher(rails: std::sync::Weak<Rails>, d: usize) {
    // The frame in which this device last compacted: once per writer stint is enough.
    let mut compacted_in: Option<u64> = None;
    loop {
        let Some(r) = rails.upgrade() else { return };
        let st = r.devices.get(d).clone();
        let now = r.now_ns();
        let (frame, wake_at) = r
            .plan
            .with_schedule(|s| (s.frame_at(now), s.next_change(now)));
        let mut failed_now = false;
        let writer = r.role(d) == Role::Writer;
        if writer && !st.writes_released.load(Ordering::SeqCst) {
            // A new writer stint: reads still at the device go first.
            r.finish_reads(d).await;
            st.writes_released.store(true, Ordering::SeqCst);
            // Time moved on: look at the roles again.
            continue;
        }
        if !writer {
            st.writes_released.store(false, Ordering::SeqCst);
        }
        if writer {
            let check = {
                let r = r.clone();
                move || r.role(d) == Role::Writer
            };
            let (started, flushed) = (
                r.now_ns(),
                st.counters.flushed_bytes.load(Ordering::Relaxed),
            );
            let pass = r.flush_all(d, Some(&check)).await;
            if pass.is_ok() {
                // A backlog written as fast as the device takes it measures its write rate.
                let bytes = st.counters.flushed_bytes.load(Ordering::Relaxed) - flushed;
                r.note_flush_pass(d, bytes, r.now_ns() - started);
            }
            if let Err(e) = pass {
                tracing::warn!(device = d, error = %e, "flush failed; retrying at the next role change");
                failed_now = true;
            } else if r.cfg.compact_budget_bytes > 0
                && check()
                && compacted_in.is_none_or(|f| f + 1 < frame)
            {
                compacted_in = Some(frame);
                if let Ok(s) = st.inner.compact(r.cfg.compact_budget_bytes).await {
                    if s.segments_freed > 0 {
                        st.counters.compactions.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if !failed_now && r.journalled() && !r.is_failed(d) {
                if let Err(e) = r.delete_dead_records(d, Some(&check)).await {
                    tracing::warn!(device = d, error = %e, "journal deletes failed; retrying at the next role change");
                    failed_now = true;
                }
            }
        }
        let deadline = r.start + std::time::Duration::from_nanos(wake_at);
        drop(r);
        if failed_now {
            // A failing device is not retried on every new write: wait for the next change.
            tokio::time::sleep_until(deadline).await;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = st.work.notified() => {}
        }
    }
}
