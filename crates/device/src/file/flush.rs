//! Writing out: the flusher thread starts queued write buffers in order, a few at once, each
//! written on a thread of its own (large ones as concurrent chunks) into segment space
//! allocated ahead of it; it seals segments and serves syncs by group commit.

use super::*;

impl Shared {
    /// The flusher thread: starts writing queued buffers in order, up to
    /// [`JOBS_IN_FLIGHT_MAX`] at once, each on a thread of its own that reports back through
    /// [`Shared::job_done`]; seals segments; serves syncs.
    pub(super) fn flusher(self: Arc<Self>) {
        // Segment and how many of its bytes are allocated (see `allocate_ahead`).
        let mut allocated = (0, 0);
        let mut st = self.lock();
        loop {
            if st.crashed || st.io_failed {
                // Writes already started finish before the thread ends (and the device closes).
                if st.in_flight == 0 {
                    break;
                }
                st = self.flush_cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let unwritten = st.active.last_seq > st.written_seq;
            let want_sync = st.sync_target > st.durable_seq;
            // A segment is sealed (fdatasync) before anything of the next one is written, and
            // the seal must cover all of the segment's writes: a sealing job is written alone.
            let sealing = st.queued.iter().take(st.in_flight).any(|j| j.seal);
            if !sealing && st.in_flight < JOBS_IN_FLIGHT_MAX {
                let queued_seq = st.queued.back().map_or(st.written_seq, |j| j.last_seq);
                // While a job is being written, the active buffer fills up (and is queued when
                // full) rather than going out in small pieces.
                if st.queued.len() == st.in_flight
                    && st.active.last_seq > queued_seq
                    && ((want_sync && queued_seq < st.sync_target)
                        || (st.active.len >= self.config.flush_bytes && st.in_flight == 0)
                        || st.shutdown)
                {
                    self.rotate_active(&mut st, false, None);
                }
                if let Some(job) = st.queued.get(st.in_flight).cloned() {
                    if !job.seal || st.in_flight == 0 {
                        st.in_flight += 1;
                        drop(st);
                        let end = job.base + job.flush_len(self.zero_past_end()) as u64;
                        self.allocate_ahead(&job, end, &mut allocated);
                        self.start_job(job);
                        st = self.lock();
                        continue;
                    }
                }
            }
            if want_sync && (st.written_seq >= st.sync_target || !unwritten) {
                let file = st.unsynced_file.take();
                let upto = st.written_seq;
                let pos = st.written_pos;
                drop(st);
                let r = file.map(|f| f.sync_data()).unwrap_or(Ok(()));
                st = self.lock();
                match r {
                    Ok(()) => {
                        st.durable_seq = st.durable_seq.max(upto);
                        st.durable_pos = pos;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, path = %self.layout.path().display(), "fdatasync failed; device stops");
                        self.io_failed(&mut st, "fdatasync failed");
                    }
                }
                self.done_cv.notify_all();
                continue;
            }
            if st.shutdown && !unwritten && st.in_flight == 0 {
                break;
            }
            if st.failed.is_some() {
                // Nothing more will be written; release anyone waiting.
                self.done_cv.notify_all();
                self.space.notify_waiters();
                if st.shutdown && st.in_flight == 0 {
                    break;
                }
            }
            st = self.flush_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        self.done_cv.notify_all();
        self.space.notify_waiters();
    }

    /// Writes `job` on a thread of its own, or on this one if no thread can be started.
    pub(super) fn start_job(self: &Arc<Self>, job: Arc<WriteBuf>) {
        let (shared, j) = (self.clone(), job.clone());
        let spawned = std::thread::Builder::new()
            .name("railstore-write".into())
            .spawn(move || {
                // A panic must still count the job as done, or the flusher waits for it forever.
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shared.write_job(&j)))
                        .unwrap_or(Err(DeviceError::Failed {
                            reason: "write thread panicked",
                        }));
                shared.job_done(j, r);
            });
        match spawned {
            Ok(_) => drop(job),
            Err(_) => {
                let r = self.write_job(&job);
                self.job_done(job, r);
            }
        }
    }

    /// Records that `job`, the oldest buffer being written, is written (or failed).
    pub(super) fn job_done(&self, job: Arc<WriteBuf>, r: Result<()>) {
        let mut st = self.lock();
        st.in_flight -= 1;
        // After a failure the queue is empty and nothing more counts as written.
        if !st.io_failed {
            match r {
                Ok(()) => {
                    // Jobs finish in order (`write_job`).
                    let oldest = st.queued.pop_front();
                    debug_assert!(oldest.is_some_and(|o| Arc::ptr_eq(&o, &job)));
                    st.jobs_written = job.number;
                    st.written_seq = st.written_seq.max(job.last_seq);
                    st.written_pos = (job.seg, job.base + job.len as u64);
                    st.unsynced_file = if job.seal {
                        None
                    } else {
                        Some(job.io.file.clone())
                    };
                    if job.seal {
                        st.durable_pos = st.written_pos;
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, path = %self.layout.path().display(), "device write failed; device stops");
                    self.io_failed(&mut st, "write failed");
                }
            }
        }
        if let Ok(b) = Arc::try_unwrap(job) {
            st.spare.push(b.buf);
        }
        self.done_cv.notify_all();
        self.space.notify_waiters();
        self.flush_cv.notify_one();
    }

    /// Writes a job's blocks, then, for a sealing job, seals the segment. Consecutive jobs of a
    /// segment share a block: the last one of the earlier job (a partial block, or in a slot
    /// the zero block past the log end) is the first of the later one, which carries its bytes
    /// over and adds records. So that the newer copy lands last, a job writes its first block
    /// only once the previous job is completely written, and the rest at once; jobs thus also
    /// finish in order.
    pub(super) fn write_job(&self, job: &WriteBuf) -> Result<()> {
        let padded = job.flush_len(self.zero_past_end());
        let at = job.io.base + job.base;
        let head = padded.min(ALIGN_BYTES);
        self.write_chunks(&job.io.file, &job.buf[head..padded], at + head as u64)?;
        {
            let mut st = self.lock();
            while st.jobs_written + 1 < job.number && !st.io_failed {
                st = self.done_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.io_failed {
                // The previous job failed: nothing more may be written.
                return Err(DeviceError::Failed {
                    reason: "write failed",
                });
            }
        }
        job.io
            .file
            .write_all_at(&job.buf[..head], at)
            .map_err(|e| DeviceError::io("write segment", e))?;
        if job.seal {
            // A later segment must never be durable before this one is complete.
            self.layout
                .seal(&job.io, &job.place, job.seg, job.base + job.len as u64)?;
        }
        Ok(())
    }

    /// Writes `data` at `at`, large amounts as several concurrent writes: one sequential
    /// stream at queue depth 1 leaves most of an SSD's bandwidth unused. The chunks are
    /// disjoint, so their order does not matter.
    pub(super) fn write_chunks(&self, file: &File, data: &[u8], at: u64) -> Result<()> {
        let io = |e| DeviceError::io("write segment", e);
        if data.len() < 2 * WRITE_CHUNK_BYTES {
            return file.write_all_at(data, at).map_err(io);
        }
        std::thread::scope(|scope| {
            let chunks: Vec<_> = data
                .chunks(WRITE_CHUNK_BYTES)
                .enumerate()
                .map(|(i, chunk)| {
                    let off = at + (i * WRITE_CHUNK_BYTES) as u64;
                    scope.spawn(move || file.write_all_at(chunk, off))
                })
                .collect();
            chunks
                .into_iter()
                .try_for_each(|c| c.join().expect("write thread panicked"))
        })
        .map_err(io)
    }

    /// With O_DIRECT in the directory layout, makes sure the segment file of `job` is allocated
    /// (zeros) up to `end`, in steps of [`ALLOCATE_AHEAD_BYTES`] up to the segment size. ext4
    /// runs O_DIRECT writes that extend a file one at a time, each waited for, but writes inside
    /// the file in parallel (fio lays its file out the same way before it measures; see
    /// `docs/benchmarks/device.md`). The zeros read as the log's end, like those after its last
    /// block; the seal cuts the file back to its log (`Layout::seal`). Where allocation fails,
    /// writes extend the file.
    pub(super) fn allocate_ahead(&self, job: &WriteBuf, end: u64, allocated: &mut (u64, u64)) {
        if !self.direct || self.layout.single().is_some() {
            return;
        }
        let have = if allocated.0 == job.seg {
            allocated.1
        } else {
            0
        };
        if end <= have {
            return;
        }
        let to = end.max((have + ALLOCATE_AHEAD_BYTES).min(self.config.segment_bytes));
        if let Err(e) = allocate(&job.io.file, have, to - have) {
            tracing::debug!(error = %e, segment = job.seg, "segment not allocated ahead");
        }
        *allocated = (job.seg, to);
    }
}
