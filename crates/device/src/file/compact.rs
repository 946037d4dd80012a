//! Compaction and the maintenance thread: the live records of sealed segments with enough
//! dead space are copied to the log head and the segments deleted (or their slots freed);
//! background checkpoints.

use super::*;

impl Shared {
    /// Compacts sealed segments until about `budget_bytes` of live data were copied.
    /// `dead_ratio_min` skips segments with too little dead space.
    pub(super) fn compact_blocking(
        &self,
        budget_bytes: u64,
        dead_ratio_min: f64,
    ) -> Result<CompactStats> {
        let _m = self.maint_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut stats = CompactStats::default();
        loop {
            if stats.bytes_copied >= budget_bytes && stats.segments_freed > 0 {
                return Ok(stats);
            }
            let victim = {
                let st = self.lock();
                Self::check_failed(&st)?;
                st.segments
                    .iter()
                    .filter(|(id, _)| {
                        **id != st.active.seg && st.queued.iter().all(|b| b.seg != **id)
                    })
                    .filter(|(_, s)| {
                        let dead = s.end.saturating_sub(s.live_bytes);
                        dead > 0 && dead as f64 >= dead_ratio_min * s.end as f64
                    })
                    .max_by_key(|(_, s)| s.end.saturating_sub(s.live_bytes))
                    .map(|(id, s)| (*id, s.io.clone(), s.end, s.place.clone()))
            };
            let Some((id, io, end, place)) = victim else {
                return Ok(stats);
            };
            let (buf, _) = read_aligned(&io.file, io.base, end as usize, ALIGN_BYTES as u64)
                .map_err(|e| DeviceError::io("read segment", e))?;
            let mut copied = 0u64;
            let mut result = Ok(());
            scan_records(&buf[..end as usize], 0, 0, |off, rec| {
                if result.is_err() {
                    return;
                }
                let here = |l: &Loc| l.segment == id && l.offset == off as u64;
                result = self.blocking(|sh, st| {
                    Self::check_failed(st)?;
                    let key = rec.key;
                    match rec.header.kind {
                        RecordKind::Put => {
                            if !st.index.get(key).is_some_and(here) {
                                return Ok(Some(()));
                            }
                            let Some(loc) =
                                sh.try_append(st, RecordKind::Put, key, rec.value, 0)?
                            else {
                                return Ok(None);
                            };
                            let old = st.index.insert(key.to_vec(), loc).expect("live");
                            Self::kill(st, &old);
                            copied += loc.record_len();
                        }
                        RecordKind::Delete => {
                            if !st.tombs.get(key).is_some_and(here) {
                                return Ok(Some(()));
                            }
                            // An older segment may still hold a put this tombstone hides.
                            let older = st.segments.range(..id).next().is_some();
                            if older {
                                let Some(loc) =
                                    sh.try_append(st, RecordKind::Delete, key, &[], 0)?
                                else {
                                    return Ok(None);
                                };
                                let old = st.tombs.insert(key.to_vec(), loc).expect("live");
                                Self::kill(st, &old);
                                copied += loc.record_len();
                            } else {
                                let old = st.tombs.remove(key).expect("live");
                                Self::kill(st, &old);
                            }
                        }
                    }
                    Ok(Some(()))
                });
            });
            result?;
            // The copies must be durable before the originals disappear.
            self.sync_blocking()?;
            {
                let mut st = self.lock();
                let live = st.segments.get(&id).expect("victim segment").live_bytes;
                if live != 0 {
                    // The scan stopped at a record it could not parse, and live records lie
                    // behind it: keep the segment (the index still reads them) rather than
                    // delete data that is intact.
                    return Err(DeviceError::Corrupt {
                        location: place_name(&self.layout, &place),
                        reason: "an unreadable record hides live ones; segment kept",
                    });
                }
                let seg = st.segments.remove(&id).expect("victim segment");
                st.used_bytes -= seg.end;
            }
            self.layout
                .free_segment(&place)
                .inspect_err(|e| self.single_file_failed(e))?;
            if let SegPlace::Slot { index, .. } = place {
                self.lock().free_slots.push(index);
            }
            stats.segments_freed += 1;
            stats.bytes_copied += copied;
            stats.bytes_freed += end;
            if budget_bytes == 0 {
                return Ok(stats);
            }
        }
    }

    /// The maintenance thread: background checkpoints and the automatic compaction policy.
    pub(super) fn maintenance(self: Arc<Self>) {
        loop {
            {
                let st = self.lock();
                let (st, _) = self
                    .maint_cv
                    .wait_timeout(st, Duration::from_millis(500))
                    .unwrap_or_else(|e| e.into_inner());
                if st.shutdown || st.failed.is_some() {
                    return;
                }
            }
            let need_ckpt = {
                let st = self.lock();
                self.config.checkpoint_interval_bytes > 0
                    && st.appended_since_checkpoint >= self.config.checkpoint_interval_bytes
            };
            if need_ckpt {
                if let Err(e) = self.checkpoint_blocking() {
                    tracing::warn!(error = %e, "background checkpoint failed");
                }
            }
            if let CompactionPolicy::Auto { dead_ratio_min } = self.config.compaction {
                if let Err(e) = self.compact_blocking(self.config.segment_bytes, dead_ratio_min) {
                    // A close while compacting is not a failure.
                    let closing = {
                        let st = self.lock();
                        st.shutdown || st.failed == Some("closed")
                    };
                    if !closing {
                        tracing::warn!(error = %e, "background compaction failed");
                    }
                }
            }
        }
    }
}
