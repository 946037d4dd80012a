//! Reading many values at once (an iteration with values). The records are read in log order,
//! neighbours with one read, so reading every value under a prefix costs about one pass over
//! the log bytes that hold them instead of one random read per key. The store's index loads
//! its records this way at start (issue 20): a record of a 100-byte object is a few hundred
//! bytes, and a read of its own (one O_DIRECT block each) made the load 20 µs per object.

use super::layout::{aligned_span, read_aligned, read_aligned_into, SegIo};
use super::Shared;
use crate::aligned::AlignedBuf;
use crate::api::{IterEntry, ReadRange};
use crate::error::{DeviceError, Result};
use crate::format::Loc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Records at most this far apart in a segment are read with one read, the bytes between
/// them read and dropped: a further read costs more than that many bytes on flash.
const GAP_BYTES_MAX: u64 = 64 << 10;
/// The most one read covers.
const READ_BYTES_MAX: u64 = 4 << 20;

/// What iterations with values have read, since the device opened.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BulkReads {
    /// Reads that each covered a run of neighbouring values.
    pub runs: u64,
    /// Values those reads gave.
    pub values: u64,
    /// Values read alone: still in memory, empty, or failing their check in a run.
    pub alone: u64,
}

#[derive(Debug, Default)]
pub(super) struct BulkCounters {
    runs: AtomicU64,
    values: AtomicU64,
    alone: AtomicU64,
}

impl BulkCounters {
    pub(super) fn get(&self) -> BulkReads {
        BulkReads {
            runs: self.runs.load(Ordering::Relaxed),
            values: self.values.load(Ordering::Relaxed),
            alone: self.alone.load(Ordering::Relaxed),
        }
    }
}

/// A value to read from disk: its place in the answer, its location and its segment.
struct Wanted {
    at: usize,
    loc: Loc,
    io: SegIo,
}

impl Shared {
    /// The values of the `listed` keys, at the locations the index gave when they were listed,
    /// in their order. A value that fails its check, and one of a record still in memory, is
    /// read alone where the index says it is now (compaction may have moved it); a key
    /// deleted meanwhile is left out (as if the iteration had listed it a moment later).
    pub(super) fn values_blocking(&self, listed: Vec<(Vec<u8>, Loc)>) -> Result<Vec<IterEntry>> {
        let mut values: Vec<Option<Vec<u8>>> = vec![None; listed.len()];
        // Values still in memory, empty ones and any whose segment is gone: read alone.
        let mut alone = Vec::new();
        let mut wanted = Vec::new();
        {
            let st = self.lock();
            Self::check_failed(&st)?;
            for (at, (_, loc)) in listed.iter().enumerate() {
                let in_memory = st.active.covers(loc) || st.queued.iter().any(|b| b.covers(loc));
                match st.segments.get(&loc.segment) {
                    Some(s) if !in_memory && loc.value_len > 0 => wanted.push(Wanted {
                        at,
                        loc: *loc,
                        io: s.io.clone(),
                    }),
                    _ => alone.push(at),
                }
            }
        }
        let keys: Vec<Vec<u8>> = listed.into_iter().map(|(k, _)| k).collect();
        wanted.sort_unstable_by_key(|w| (w.loc.segment, w.loc.offset));
        let mut buf = AlignedBuf::new(if wanted.is_empty() {
            0
        } else {
            READ_BYTES_MAX as usize + 2 * self.read_align as usize
        });
        for run in runs(&wanted) {
            let start = run[0].loc.value_offset();
            let end = run
                .iter()
                .map(|w| w.loc.value_offset() + w.loc.value_len as u64)
                .max()
                .unwrap_or(start);
            let io = &run[0].io;
            let (offset, len) = (io.base + start, (end - start) as usize);
            // One buffer for every run that fits it (zeroing a fresh one per read cost as
            // much as the read); a longer value gets its own.
            let read = if aligned_span(offset, len, self.read_align) <= buf.len() {
                read_aligned_into(&io.file, offset, len, self.read_align, &mut buf)
            } else {
                read_aligned(&io.file, offset, len, self.read_align).map(|(b, at)| {
                    buf = b;
                    at
                })
            };
            let Ok(base) = read else {
                alone.extend(run.iter().map(|w| w.at));
                continue;
            };
            self.bulk.runs.fetch_add(1, Ordering::Relaxed);
            for w in run {
                let from = base + (w.loc.value_offset() - start) as usize;
                let value = &buf[from..from + w.loc.value_len as usize];
                match Self::verify_value(&keys[w.at], &w.loc, value) {
                    Ok(()) => {
                        values[w.at] = Some(value.to_vec());
                        self.bulk.values.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => alone.push(w.at),
                }
            }
        }
        self.bulk
            .alone
            .fetch_add(alone.len() as u64, Ordering::Relaxed);
        for at in alone {
            match self.retrieve_blocking(&keys[at], ReadRange::ALL) {
                Ok(r) => values[at] = Some(r.value.into()),
                Err(DeviceError::KeyNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(keys
            .into_iter()
            .zip(values)
            .filter_map(|(key, value)| {
                value.map(|v| IterEntry {
                    key,
                    value: Some(v),
                })
            })
            .collect())
    }
}

/// Cuts `wanted` (in log order) into runs read with one read each: one segment, gaps of at
/// most [`GAP_BYTES_MAX`], at most [`READ_BYTES_MAX`] in all (a value longer than that is a
/// run of its own).
fn runs(wanted: &[Wanted]) -> Vec<&[Wanted]> {
    let mut out = Vec::new();
    let mut begin = 0;
    for i in 1..=wanted.len() {
        let split = i == wanted.len() || {
            let (first, prev, next) = (&wanted[begin].loc, &wanted[i - 1].loc, &wanted[i].loc);
            let prev_end = prev.value_offset() + prev.value_len as u64;
            let next_end = next.value_offset() + next.value_len as u64;
            next.segment != first.segment
                || next.value_offset() > prev_end + GAP_BYTES_MAX
                || next_end - first.value_offset() > READ_BYTES_MAX
        };
        if split {
            out.push(&wanted[begin..i]);
            begin = i;
        }
    }
    out
}
