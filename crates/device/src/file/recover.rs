//! Opening a device: the index rebuilt from the newest checkpoint that agrees with the log and
//! the log replayed after it; a torn tail cut, after a copy to a side file when intact records
//! lie behind it.

use super::layout::{self, Found, Layout};
use super::{FileConfig, RecoveryReport, Segment, State, WriteBuf};
use crate::aligned::{align_down, align_up, AlignedBuf};
use crate::error::{DeviceError, Result};
use crate::format::{
    decode_checkpoint, decode_record, find_intact_record, newer_intact_records, scan_records,
    Checkpoint, Loc, RecordKind,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Whether a checkpoint that decoded (so its CRC and lengths are right) agrees with the log it
/// claims to describe. A checkpoint that does not is ignored and the whole log replayed, which
/// is always correct; trusting it could make recovery cut intact records (a replay point inside
/// a record looks like a torn tail) or append records whose `seq` breaks the log's order.
/// `read` returns a segment's bytes. The rules (docs/format.md, "Checkpoint"): the replay
/// segment exists (or, if compacted away, a later one starts with a record after the
/// checkpoint); the record at the replay point, if one is intact there, is the checkpoint's
/// `seq + 1`; otherwise the replay point is where the segment's records end, the last of them
/// the checkpoint's `seq` (damage before the replay point leaves the checkpoint in use: it
/// knows the records behind the damage). `read` also gives, for a slot of the single-file
/// layout, the slot's floor: records at or below it are older bytes of the slot, not the
/// segment's, and count as nothing (as zeros do in a file).
fn checkpoint_matches_log<'a>(
    c: &Checkpoint,
    ids: &[u64],
    read: impl FnOnce(u64) -> Result<(&'a [u8], Option<u64>)>,
) -> Result<bool> {
    let Some(&first) = ids.iter().find(|&&id| id >= c.replay_segment) else {
        // Replay would start past the newest segment, which is never compacted away.
        return Ok(ids.is_empty());
    };
    let (bytes, floor) = read(first)?;
    // Whether bytes hold nothing of the log.
    let blank = |b: &[u8]| match floor {
        None => b.iter().all(|&x| x == 0),
        Some(f) => {
            !decode_record(b).is_ok_and(|r| r.header.seq > f)
                && newer_intact_records(b, 0, f).is_none()
        }
    };
    let ours = |r: &crate::format::RecordRef<'_>| floor.is_none_or(|f| r.header.seq > f);
    if first != c.replay_segment {
        return Ok(match decode_record(bytes) {
            Ok(r) if ours(&r) => r.header.seq > c.seq,
            _ => blank(bytes),
        });
    }
    let off = match usize::try_from(c.replay_offset) {
        Ok(off) if off <= bytes.len() => off,
        _ => return Ok(false),
    };
    match decode_record(&bytes[off..]) {
        // `decode_checkpoint` keeps `seq` far below u64::MAX.
        Ok(r) if ours(&r) => return Ok(r.header.seq == c.seq + 1),
        _ => {}
    }
    // Nothing intact at the replay point (zeros after a clean close, or a tail torn there): it
    // must be where the segment's records end.
    let scan = scan_records(bytes, 0, floor.unwrap_or(0), |_, _| {});
    Ok(match scan.end.cmp(&off) {
        std::cmp::Ordering::Equal => off == 0 || scan.last_seq == c.seq,
        // A record runs across the replay point.
        std::cmp::Ordering::Greater => false,
        // The records end before the replay point (only zeros between), or damage inside the
        // checkpointed records stops the scan early.
        std::cmp::Ordering::Less => !blank(&bytes[scan.end..off]),
    })
}

/// Copies `tail` to a new file `name` in `dir` (`-<n>` appended if that exists), durably.
fn set_aside(dir: &Path, name: &str, tail: &[u8]) -> Result<PathBuf> {
    let io = |e| DeviceError::io("copy corrupt tail aside", e);
    for n in 0u32.. {
        let mut aside = dir.join(name);
        if n > 0 {
            aside.as_mut_os_string().push(format!("-{n}"));
        }
        let mut f = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&aside)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(e)),
        };
        std::io::Write::write_all(&mut f, tail).map_err(io)?;
        f.sync_all().map_err(io)?;
        layout::sync_dir(dir)?;
        return Ok(aside);
    }
    unreachable!("u32 names run out")
}

/// Copies the tail of segment `f` from `offset` aside (see [`set_aside`]) and logs it.
fn keep_tail(
    layout: &Layout,
    f: &Found,
    offset: u64,
    first_intact: usize,
    tail: &[u8],
    report: &mut RecoveryReport,
) -> Result<()> {
    let (dir, name) = layout.aside_path(f, offset)?;
    let kept = set_aside(&dir, &name, tail)?;
    tracing::error!(
        segment = f.id,
        offset,
        first_intact_record = first_intact,
        copy = %kept.display(),
        "intact records behind a corrupt one in the last segment; \
         the tail was copied aside before the cut"
    );
    report.set_aside.push(kept);
    Ok(())
}

/// Rebuilds the index from the checkpoint and the log; cuts a torn tail. Returns the state and
/// the free slots (single-file layout).
pub(super) fn recover(
    layout: &Layout,
    config: &FileConfig,
    direct: bool,
) -> Result<(State, RecoveryReport)> {
    let single = layout.single();
    let mut report = RecoveryReport {
        direct_io: direct,
        single_file: single.is_some(),
        superblock_repaired: single.is_some_and(|s| s.superblock_repaired),
        ..Default::default()
    };
    let (found, mut free_slots) = layout.list(direct)?;
    let ids: Vec<u64> = found.iter().map(|f| f.id).collect();
    report.segments = ids.len();
    let by_id = |id: u64| &found[ids.binary_search(&id).expect("listed")];
    // A segment's log bytes: a whole file; a sealed slot up to its end, an open one whole.
    let read_segment = |f: &Found| layout.read_segment(f, f.end.filter(|_| single.is_some()));
    // Records at or below a slot's floor are older bytes of the slot, not the segment's.
    let floor = |f: &Found| single.map(|_| f.floor);
    // The segment read to check the checkpoint, kept for the replay.
    let mut checked: Option<(u64, layout::SegBytes)> = None;
    let mut ckpt = None;
    for (i, (region, b)) in layout.read_checkpoints().iter().enumerate() {
        let Some(c) = decode_checkpoint(b) else {
            tracing::warn!(path = %layout.path().display(), "checkpoint invalid; trying an older one or replaying the whole log");
            continue;
        };
        report.checkpoint_fallback = i > 0;
        if checkpoint_matches_log(&c, &ids, |id| {
            let f = by_id(id);
            let bytes = read_segment(f)?;
            Ok((&checked.insert((id, bytes)).1[..], floor(f)))
        })? {
            ckpt = Some(c);
            layout.checkpoint_in_use(Some(*region));
        } else {
            tracing::warn!(
                path = %layout.path().display(),
                "checkpoint does not match the log; replaying the whole log"
            );
        }
        break;
    }
    let mut index: BTreeMap<Vec<u8>, Loc> = BTreeMap::new();
    let mut tombs: HashMap<Vec<u8>, Loc> = HashMap::new();
    // The single-file layout's first record has the superblock's `seq_base`.
    let mut last_seq = single.map_or(0, |s| s.sb.seq_base - 1);
    let (replay_seg, replay_off) = match ckpt {
        Some(c) => {
            report.checkpoint_used = true;
            // Checkpoint entries are sorted: a map built from them in one go (no per-key
            // search, no copy of the keys): about half the open time of a large device.
            index = c.entries.into_iter().collect();
            tombs = c.tombstones.into_iter().collect();
            last_seq = last_seq.max(c.seq);
            (c.replay_segment, c.replay_offset)
        }
        None => (0, 0),
    };
    let mut segments = BTreeMap::new();
    let mut tail: Option<(u64, Vec<u8>)> = None;
    for (i, f) in found.iter().enumerate() {
        let id = f.id;
        let is_last = i + 1 == found.len();
        // Known without reading: a file's length, a sealed slot's end.
        let mut end = f.end.unwrap_or(0);
        let replay = id >= replay_seg;
        // An open slot below the replay point is read only to find where its log ends.
        if replay || f.end.is_none() {
            let bytes = match checked.take() {
                Some((c, bytes)) if c == id => bytes,
                _ => read_segment(f)?,
            };
            let start = if id == replay_seg {
                // Checked against the segment's length by `checkpoint_matches_log`.
                usize::try_from(replay_off).unwrap_or(usize::MAX)
            } else {
                0
            };
            let from_seq = if replay {
                last_seq.max(f.floor)
            } else {
                f.floor
            };
            let scan = scan_records(&bytes, start, from_seq, |off, rec| {
                if !replay {
                    return;
                }
                report.records_replayed += 1;
                let loc = Loc::of(id, off as u64, &rec.header);
                match rec.header.kind {
                    RecordKind::Put => {
                        tombs.remove(rec.key);
                        index.insert(rec.key.to_vec(), loc);
                    }
                    RecordKind::Delete => {
                        index.remove(rec.key);
                        tombs.insert(rec.key.to_vec(), loc);
                    }
                }
            });
            if replay {
                last_seq = scan.last_seq;
            }
            let sealed_slot = single.is_some() && f.end.is_some();
            if is_last && single.is_none() {
                end = scan.end as u64;
                if (bytes.len() as u64) > end {
                    if scan.garbage_after {
                        report.torn_tail_bytes = bytes.len() as u64 - end;
                        tracing::warn!(
                            segment = id,
                            offset = end,
                            bytes = report.torn_tail_bytes,
                            reason = scan.stop.map(|s| s.as_str()).unwrap_or("stale record"),
                            "cutting torn log tail"
                        );
                        // A torn write leaves garbage and nothing intact behind it; a damaged
                        // record in the middle of synced data leaves intact (maybe synced,
                        // acknowledged) records behind it. Those bytes are never destroyed: the
                        // tail is copied aside, durably, before the segment is cut.
                        if let Some(at) = find_intact_record(&bytes, scan.end) {
                            keep_tail(layout, f, end, at, &bytes[scan.end..], &mut report)?;
                        }
                    }
                    layout.cut_tail(f, &bytes, end, 0)?;
                }
                tail = Some((id, bytes[align_down(end) as usize..end as usize].to_vec()));
            } else if is_last && !sealed_slot {
                // The open slot being appended to. Its log ends with zeros (`flush_len`); the
                // bytes after them are older ones of the slot, left as they are.
                end = scan.end as u64;
                let block_end = align_up(end + 1).min(bytes.len() as u64) as usize;
                let torn = bytes[scan.end..block_end].iter().any(|&b| b != 0);
                // Intact records newer than the log's end lie behind damage: copied aside,
                // then zeroed so that no later replay can take them for new records.
                let behind = newer_intact_records(&bytes, scan.end, scan.last_seq);
                if torn || behind.is_some() {
                    let cut_to = behind.map_or(block_end, |(_, e)| e.max(block_end));
                    report.torn_tail_bytes = (cut_to - scan.end) as u64;
                    tracing::warn!(
                        segment = id,
                        offset = end,
                        reason = scan.stop.map(|s| s.as_str()).unwrap_or("stale record"),
                        "cutting torn log tail"
                    );
                }
                if let Some((at, tail_end)) = behind {
                    keep_tail(layout, f, end, at, &bytes[scan.end..tail_end], &mut report)?;
                    layout.cut_tail(f, &bytes, end, tail_end as u64)?;
                }
                tail = Some((id, bytes[align_down(end) as usize..end as usize].to_vec()));
            } else {
                if f.end.is_none() {
                    // An open slot before the last one (a crash before its seal was written).
                    end = scan.end as u64;
                }
                let damaged = if single.is_some() && f.end.is_none() {
                    let block_end = align_up(end + 1).min(bytes.len() as u64) as usize;
                    bytes[scan.end..block_end].iter().any(|&b| b != 0)
                } else {
                    scan.garbage_after
                };
                if damaged {
                    tracing::warn!(
                        segment = id,
                        offset = scan.end,
                        "corruption inside a sealed segment; records after it are lost"
                    );
                    report.corrupt_segments.push(id);
                }
            }
        }
        segments.insert(
            id,
            Segment {
                io: f.io.clone(),
                place: f.place.clone(),
                end,
                live_bytes: 0,
            },
        );
    }
    // Entries whose segment was compacted away after the checkpoint are dead: compaction only
    // deletes a segment once its live records are durable elsewhere, and replay saw those copies.
    // A checkpoint entry past its segment's end cannot be right (a damaged or foreign
    // checkpoint); dropping it keeps reads from ever chasing it.
    let fits = |l: &Loc| {
        segments.get(&l.segment).is_some_and(|s: &Segment| {
            l.offset
                .checked_add(l.record_len())
                .is_some_and(|e| e <= s.end)
        })
    };
    // Records in the last partial block are served from the write buffer, which holds a copy
    // of it, without the checksum check a disk read makes: an entry pointing there must match
    // the record that is there.
    let in_carry = |key: &[u8], l: &Loc| match &tail {
        Some((seg, carry)) if l.segment == *seg => {
            let base = align_down(segments[seg].end);
            l.offset < base
                || decode_record(&carry[(l.offset - base) as usize..])
                    .is_ok_and(|r| r.key == key && Loc::of(*seg, l.offset, &r.header) == *l)
        }
        _ => true,
    };
    index.retain(|k, l| fits(l) && in_carry(k, l));
    tombs.retain(|_, l| fits(l));
    let mut live_bytes = 0;
    for l in index.values().chain(tombs.values()) {
        let s = segments.get_mut(&l.segment).expect("retained");
        s.live_bytes += l.record_len();
        live_bytes += l.record_len();
    }
    let next_segment = ids.last().map_or(1, |l| l + 1);
    let (active_seg, carry) = match tail {
        Some(t) => t,
        None => {
            // A new device, or the last segment is sealed: appends go to a new segment.
            let id = next_segment;
            let (io, place) = layout
                .create_segment(&mut free_slots, 0, id, last_seq + 1, direct)?
                .ok_or(DeviceError::Capacity {
                    needed: config.segment_bytes,
                    available: 0,
                })?;
            match layout {
                Layout::Dir(dir) => layout::sync_dir(dir)?,
                Layout::Single(s) => s
                    .file
                    .sync_data()
                    .map_err(|e| DeviceError::io("write slot header", e))?,
            }
            segments.insert(
                id,
                Segment {
                    io,
                    place,
                    end: 0,
                    live_bytes: 0,
                },
            );
            (id, Vec::new())
        }
    };
    let seg = &segments[&active_seg];
    let mut buf = AlignedBuf::new(config.write_buffer_bytes);
    buf[..carry.len()].copy_from_slice(&carry);
    let active = WriteBuf {
        seg: active_seg,
        io: seg.io.clone(),
        place: seg.place.clone(),
        base: align_down(seg.end),
        len: carry.len(),
        buf,
        seal: false,
        last_seq,
        number: 0,
    };
    let used_bytes = segments.values().map(|s| s.end).sum();
    let pos = (active_seg, seg.end);
    let next_segment = next_segment.max(active_seg + 1);
    Ok((
        State {
            index,
            tombs,
            segments,
            active,
            queued: VecDeque::new(),
            in_flight: 0,
            jobs_queued: 0,
            jobs_written: 0,
            spare: Vec::new(),
            next_seq: last_seq + 1,
            next_segment,
            written_seq: last_seq,
            durable_seq: last_seq,
            sync_target: 0,
            durable_pos: pos,
            written_pos: pos,
            unsynced_file: None,
            free_slots,
            used_bytes,
            live_bytes,
            appended_since_checkpoint: 0,
            failed: None,
            io_failed: false,
            shutdown: false,
            crashed: false,
        },
        report,
    ))
}
