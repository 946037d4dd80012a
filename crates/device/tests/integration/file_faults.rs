//! The `file` backend under faults it cannot prevent: write and fdatasync errors (the device
//! must stop, never retry an fsync), a corrupt record in the middle of the last segment (intact
//! records behind it must not be destroyed), and checkpoints whose CRC is right but whose
//! contents are not (recovery must neither panic nor trust them over the log).

use crate::common;

use common::*;
use proptest::prelude::*;
use railstore_device::format::{
    decode_checkpoint, decode_checkpoint_region, decode_slot_header, encode_checkpoint,
    encode_checkpoint_region_header, scan_records, Checkpoint,
};
use railstore_device::*;
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn config() -> FileConfig {
    FileConfig {
        capacity_bytes: 64 << 20,
        limits: test_limits(),
        queue_depth_max: 8,
        segment_bytes: 64 << 10,
        write_buffer_bytes: 32 << 10,
        flush_bytes: 8 << 10,
        checkpoint_interval_bytes: 0,
        compaction: CompactionPolicy::Manual,
        direct_io: true,
        io_uring: true,
        ..Default::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn value(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 37 + j * 11) as u8).collect()
}

fn seg1(dir: &Path) -> PathBuf {
    dir.join("seg-0000000001.log")
}

/// The descriptor number this process has `path` open under.
fn fd_of(path: &Path) -> RawFd {
    let want = std::fs::canonicalize(path).unwrap();
    for e in std::fs::read_dir("/proc/self/fd").unwrap() {
        let e = e.unwrap();
        if std::fs::read_link(e.path()).ok().as_deref() == Some(want.as_path()) {
            return e.file_name().to_str().unwrap().parse().unwrap();
        }
    }
    panic!("{} is not open", path.display());
}

/// Points descriptor `fd` at `target` (the device's own descriptor now writes there); returns a
/// copy of the original for [`restore`].
fn redirect(fd: RawFd, target: &str) -> RawFd {
    let c = std::ffi::CString::new(target).unwrap();
    // SAFETY: plain descriptor calls on descriptors this process owns; `fd` stays open
    // throughout (dup3 replaces it atomically). Close-on-exec throughout: other tests of this
    // binary start child processes meanwhile.
    unsafe {
        let saved = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0);
        let t = libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        assert!(saved >= 0 && t >= 0);
        assert_eq!(libc::dup3(t, fd, libc::O_CLOEXEC), fd);
        libc::close(t);
        saved
    }
}

fn restore(fd: RawFd, saved: RawFd) {
    // SAFETY: as in `redirect`.
    unsafe {
        assert_eq!(libc::dup3(saved, fd, libc::O_CLOEXEC), fd);
        libc::close(saved);
    }
}

async fn get(dev: &FileDevice, k: &[u8]) -> Option<Vec<u8>> {
    match dev.retrieve(k, ReadRange::ALL).await {
        Ok(r) => Some(r.value.to_vec()),
        Err(DeviceError::KeyNotFound { .. }) => None,
        Err(e) => panic!("key {k:?}: {e}"),
    }
}

fn failed<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(DeviceError::Failed { .. }))
}

/// The file the device's first segment is written to: its segment file, or the device file.
fn data_file(dev: &FileDevice, dir: &Path) -> PathBuf {
    if dev.single_file() {
        dev.dir().to_path_buf()
    } else {
        seg1(dir)
    }
}

/// The file-fault tests' config for `layout` (a small single file).
fn layout_config(layout: Layout) -> FileConfig {
    FileConfig {
        capacity_bytes: 8 * (64 << 10),
        ..with_layout(config(), layout)
    }
}

#[test]
fn write_error_stops_the_device() {
    for layout in LAYOUTS {
        write_error_stops(layout);
    }
}

fn write_error_stops(layout: Layout) {
    let dir = tempfile::tempdir().unwrap();
    let path = device_path(dir.path(), layout);
    let rt = runtime();
    let dev = FileDevice::open(&path, layout_config(layout)).unwrap();
    rt.block_on(async {
        dev.store(b"a", &value(1, 100), StoreMode::Upsert)
            .await
            .unwrap();
        dev.sync().await.unwrap();
    });
    let file = data_file(&dev, dir.path());
    let before = std::fs::read(&file).unwrap();
    let durable = dev.durable_position();
    let fd = fd_of(&file);
    let saved = redirect(fd, "/dev/full"); // every write fails with ENOSPC
    rt.block_on(async {
        dev.store(b"b", &value(2, 100), StoreMode::Upsert)
            .await
            .unwrap();
        assert!(failed(dev.sync().await), "the failed write is reported");
        assert!(failed(dev.store(b"c", b"x", StoreMode::Upsert).await));
        assert!(failed(dev.sync().await), "and stays reported");
    });
    assert_eq!(dev.durable_position(), durable);
    // The segment works again; a device that kept going would now write its buffers there.
    restore(fd, saved);
    std::thread::sleep(Duration::from_millis(100));
    assert!(dev.close_blocking().is_err(), "close reports the failure");
    assert!(
        std::fs::read(&file).unwrap() == before,
        "{layout:?}: nothing is written after a failed write"
    );
    drop(dev);
    let dev = FileDevice::open(&path, layout_config(layout)).unwrap();
    rt.block_on(async {
        assert_eq!(
            get(&dev, b"a").await,
            Some(value(1, 100)),
            "synced data stays"
        );
        assert_eq!(get(&dev, b"b").await, None);
    });
}

#[test]
fn fdatasync_error_is_never_retried() {
    for layout in LAYOUTS {
        fdatasync_error_never_retried(layout);
    }
}

fn fdatasync_error_never_retried(layout: Layout) {
    let dir = tempfile::tempdir().unwrap();
    let path = device_path(dir.path(), layout);
    let rt = runtime();
    let dev = FileDevice::open(&path, layout_config(layout)).unwrap();
    rt.block_on(async {
        dev.store(b"a", &value(1, 100), StoreMode::Upsert)
            .await
            .unwrap();
        dev.sync().await.unwrap();
    });
    let durable = dev.durable_position();
    let fd = fd_of(&data_file(&dev, dir.path()));
    // Writes to /dev/null succeed and vanish; its fdatasync fails (EINVAL): a write the kernel
    // accepted and then lost, as when write-back fails.
    let saved = redirect(fd, "/dev/null");
    rt.block_on(async {
        dev.store(b"b", &value(2, 100), StoreMode::Upsert)
            .await
            .unwrap();
        assert!(failed(dev.sync().await), "the failed fdatasync is reported");
        // A second fdatasync would succeed (nothing is dirty any more) without `b` on disk.
        assert!(failed(dev.sync().await), "a later sync never succeeds");
        assert!(failed(dev.store(b"c", b"x", StoreMode::Upsert).await));
    });
    assert_eq!(
        dev.durable_position(),
        durable,
        "nothing after the failure counts as durable"
    );
    restore(fd, saved);
    assert!(dev.close_blocking().is_err());
    drop(dev);
    let dev = FileDevice::open(&path, layout_config(layout)).unwrap();
    rt.block_on(async {
        assert_eq!(get(&dev, b"a").await, Some(value(1, 100)));
        assert_eq!(get(&dev, b"b").await, None, "b never reached the disk");
    });
}

/// Offsets of the records in a segment file, in log order, with their keys.
fn record_offsets(seg: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let mut v = vec![];
    scan_records(seg, 0, 0, |off, r| v.push((off, r.key.to_vec())));
    v
}

/// Stores `n` keys, syncs, and crashes (no checkpoint: recovery replays the segment).
fn write_and_crash(dir: &Path, n: u32) {
    let dev = FileDevice::open(dir, config()).unwrap();
    runtime().block_on(async {
        for i in 0..n {
            dev.store(
                format!("k{i}").as_bytes(),
                &value(i, 300),
                StoreMode::Upsert,
            )
            .await
            .unwrap();
        }
        dev.sync().await.unwrap();
    });
    dev.crash();
}

#[test]
fn corrupt_record_in_last_segment_keeps_the_intact_tail() {
    let dir = tempfile::tempdir().unwrap();
    write_and_crash(dir.path(), 6);
    let seg = std::fs::read(seg1(dir.path())).unwrap();
    let recs = record_offsets(&seg);
    assert_eq!(recs.len(), 6);
    // Bit rot in the value of k2: k3, k4 and k5 behind it are intact (and were synced).
    let bad = recs[2].0;
    let mut damaged = seg.clone();
    damaged[bad + 100] ^= 0x40;
    std::fs::write(seg1(dir.path()), &damaged).unwrap();

    let dev = FileDevice::open(dir.path(), config()).unwrap();
    let r = dev.recovery().clone();
    assert_eq!(r.torn_tail_bytes, (seg.len() - bad) as u64, "{r:?}");
    let expect_aside = dir.path().join(format!("seg-0000000001.log.corrupt-{bad}"));
    assert_eq!(r.set_aside, vec![expect_aside.clone()], "{r:?}");
    let aside = std::fs::read(&expect_aside).unwrap();
    assert_eq!(aside, damaged[bad..], "the cut tail is kept byte for byte");
    let kept: Vec<_> = record_offsets(&aside[recs[3].0 - bad..])
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(kept, [b"k3".to_vec(), b"k4".to_vec(), b"k5".to_vec()]);
    runtime().block_on(async {
        assert_eq!(get(&dev, b"k1").await, Some(value(1, 300)));
        for k in [b"k2", b"k3", b"k5"] {
            assert_eq!(get(&dev, k).await, None, "behind the damage");
        }
        // The device goes on appending where it cut.
        dev.store(b"new", b"v", StoreMode::Upsert).await.unwrap();
        dev.sync().await.unwrap();
    });
    drop(dev);
    let dev = FileDevice::open(dir.path(), config()).unwrap();
    assert!(dev.recovery().set_aside.is_empty(), "nothing more to cut");
    runtime().block_on(async {
        assert_eq!(get(&dev, b"new").await, Some(b"v".to_vec()));
    });
    assert_eq!(std::fs::read(&expect_aside).unwrap(), aside);
}

#[test]
fn torn_tail_is_cut_without_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    write_and_crash(dir.path(), 4);
    let seg = std::fs::read(seg1(dir.path())).unwrap();
    let recs = record_offsets(&seg);
    // The last record half written, garbage after it: nothing intact is lost by the cut.
    let mut torn = seg[..recs[3].0 + 150].to_vec();
    torn.extend_from_slice(&[0xa5; 700]);
    std::fs::write(seg1(dir.path()), &torn).unwrap();
    let dev = FileDevice::open(dir.path(), config()).unwrap();
    let r = dev.recovery().clone();
    assert_eq!(r.torn_tail_bytes, (torn.len() - recs[3].0) as u64, "{r:?}");
    assert!(r.set_aside.is_empty(), "{r:?}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(!names.iter().any(|n| n.contains("corrupt")), "{names:?}");
    runtime().block_on(async {
        assert_eq!(get(&dev, b"k2").await, Some(value(2, 300)));
        assert_eq!(get(&dev, b"k3").await, None);
    });
}

const BASE_KEYS: u32 = 12;
const CHECKPOINTED_KEYS: u32 = 7;

fn base_value(i: u32) -> Vec<u8> {
    value(i, [40, 300, 5000][i as usize % 3])
}

/// A device image: keys 0..7 stored and checkpointed, keys 7..12 stored and synced after the
/// checkpoint, then a crash (so the log holds records after the replay point); or, `clean`,
/// all keys then a close (the checkpoint covers everything, the last block is in the write
/// buffer after a reopen).
fn base_image(dir: &Path, layout: Layout, clean: bool) -> Checkpoint {
    let path = device_path(dir, layout);
    let dev = FileDevice::open(&path, layout_config(layout)).unwrap();
    runtime().block_on(async {
        for i in 0..BASE_KEYS {
            if i == CHECKPOINTED_KEYS {
                dev.checkpoint_blocking().unwrap();
            }
            dev.store(
                format!("k{i}").as_bytes(),
                &base_value(i),
                StoreMode::Upsert,
            )
            .await
            .unwrap();
        }
        dev.sync().await.unwrap();
    });
    if clean {
        dev.close_blocking().unwrap();
    } else {
        dev.crash();
    }
    read_checkpoint(&path, layout)
}

/// The checkpoint recovery would use: the file, or the newest region's (and its generation).
fn newest_region(path: &Path) -> Option<(u64, usize, Vec<u8>)> {
    let sb = superblock(path);
    (0..2)
        .filter_map(|r| {
            let b = read_at(
                path,
                sb.checkpoint_region_offset(r),
                sb.checkpoint_region_bytes as usize,
            );
            decode_checkpoint_region(&b, sb.device_id).map(|(g, c)| (g, r, c.to_vec()))
        })
        .max_by_key(|(g, _, _)| *g)
}

fn read_checkpoint(path: &Path, layout: Layout) -> Checkpoint {
    let bytes = match layout {
        Layout::Dir => std::fs::read(path.join("checkpoint")).unwrap(),
        Layout::File => newest_region(path).expect("a checkpoint").2,
    };
    decode_checkpoint(&bytes).unwrap()
}

/// Replaces the checkpoint: the file, or a newer generation in the other region.
fn write_checkpoint(path: &Path, layout: Layout, c: &Checkpoint) {
    let bytes = encode_checkpoint(c);
    match layout {
        Layout::Dir => std::fs::write(path.join("checkpoint"), bytes).unwrap(),
        Layout::File => {
            let sb = superblock(path);
            let (g, r) = newest_region(path).map_or((0, 1), |(g, r, _)| (g, r));
            let mut region =
                encode_checkpoint_region_header(sb.device_id, g + 1, bytes.len() as u64).to_vec();
            region.extend_from_slice(&bytes);
            write_at(path, sb.checkpoint_region_offset(1 - r), &region);
        }
    }
}

/// Segment 1's bytes: its file, or its slot's log bytes.
fn log_of_segment_1(path: &Path, layout: Layout) -> Vec<u8> {
    match layout {
        Layout::Dir => std::fs::read(seg1(path)).unwrap(),
        Layout::File => {
            let sb = superblock(path);
            let slot = (0..sb.slot_count)
                .find(|&i| {
                    let h = read_at(path, sb.slot_offset(i), 4096);
                    decode_slot_header(&h, sb.device_id, sb.slot_data_bytes())
                        .0
                        .is_some_and(|id| id.segment == 1)
                })
                .expect("segment 1");
            read_at(
                path,
                sb.slot_offset(slot) + 4096,
                sb.slot_data_bytes() as usize,
            )
        }
    }
}

fn base_keys() -> BTreeMap<Vec<u8>, Vec<u8>> {
    (0..BASE_KEYS)
        .map(|i| (format!("k{i}").into_bytes(), base_value(i)))
        .collect()
}

/// Opens `dir` after its checkpoint was replaced by `ckpt`, and checks what recovery must do
/// whatever the checkpoint says: open, never hand out wrong bytes, never cut the intact log,
/// and leave a log that a full replay reads completely. Returns whether the checkpoint was used
/// (the single-file layout falls back to the older region's when it does not decode).
fn open_with_checkpoint(dir: &Path, layout: Layout, ckpt: &Checkpoint) -> bool {
    let path = device_path(dir, layout);
    write_checkpoint(&path, layout, ckpt);
    let seg_before = log_of_segment_1(&path, layout);
    let log_end = scan_records(&seg_before, 0, 0, |_, _| {}).end;
    let rt = runtime();
    let dev = FileDevice::open(&path, layout_config(layout)).unwrap();
    let used = dev.recovery().checkpoint_used;
    let given_used = used && !dev.recovery().checkpoint_fallback;
    assert!(dev.recovery().set_aside.is_empty(), "{:?}", dev.recovery());
    let seg_after = log_of_segment_1(&path, layout);
    assert!(
        seg_after.len() >= log_end && seg_after[..log_end] == seg_before[..log_end],
        "recovery cut or changed the intact log"
    );
    rt.block_on(async {
        for (k, v) in base_keys() {
            match dev.retrieve(&k, ReadRange::ALL).await {
                Ok(r) => assert_eq!(r.value, v, "key {k:?}: wrong bytes"),
                // A checkpoint may misplace or drop a key; the read then fails, never lies.
                Err(DeviceError::KeyNotFound { .. } | DeviceError::Corrupt { .. }) if used => {}
                Err(e) => panic!("key {k:?}: {e} (checkpoint used: {used})"),
            }
        }
        dev.store(b"after", b"v", StoreMode::Upsert).await.unwrap();
        dev.sync().await.unwrap();
    });
    dev.crash();
    drop(dev);
    // Whatever the checkpoint made the device do, the log itself is whole and in order.
    remove_checkpoints(&path, layout);
    let dev = FileDevice::open(&path, layout_config(layout)).unwrap();
    let mut expect = base_keys();
    expect.insert(b"after".to_vec(), b"v".to_vec());
    let all = rt.block_on(iterate_all(&dev, b"", true)).unwrap();
    let got: BTreeMap<_, _> = all.into_iter().map(|e| (e.key, e.value.unwrap())).collect();
    assert_eq!(got, expect, "full replay after the bad checkpoint");
    given_used
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn checkpoint_entry_past_u64_max_means_full_replay() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mut c = base_image(dir.path(), layout, false);
        c.entries[0].1.offset = u64::MAX - 10;
        assert_eq!(decode_checkpoint(&encode_checkpoint(&c)), None);
        assert!(
            !open_with_checkpoint(dir.path(), layout, &c),
            "{layout:?}: checkpoint ignored"
        );
    }
}

#[test]
fn checkpoint_that_disagrees_with_the_log_means_full_replay() {
    for layout in LAYOUTS {
        checkpoint_disagreeing_with_the_log(layout);
    }
}

fn checkpoint_disagreeing_with_the_log(layout: Layout) {
    let base = tempfile::tempdir().unwrap();
    let good = base_image(base.path(), layout, false);
    // Sanity: the true checkpoint is used as it is.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(base.path(), dir.path());
    assert!(open_with_checkpoint(dir.path(), layout, &good));
    let bad: Vec<(&str, Checkpoint)> = vec![
        // Replay from inside a record: it would look like a torn tail and cut k7..k11.
        (
            "replay offset inside a record",
            Checkpoint {
                replay_offset: good.replay_offset + 5,
                ..good.clone()
            },
        ),
        // A seq above the log's: k7..k11 would look stale and be cut.
        (
            "seq too high",
            Checkpoint {
                seq: good.seq + 1000,
                ..good.clone()
            },
        ),
        // A seq below: new records would repeat sequence numbers.
        (
            "seq too low",
            Checkpoint {
                seq: good.seq - 2,
                entries: vec![],
                tombstones: vec![],
                ..good.clone()
            },
        ),
        (
            "replay segment past the log",
            Checkpoint {
                replay_segment: 9,
                ..good.clone()
            },
        ),
        (
            "replay offset past the segment",
            Checkpoint {
                replay_offset: 1 << 40,
                ..good.clone()
            },
        ),
    ];
    for (what, c) in bad {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(base.path(), dir.path());
        assert!(
            !open_with_checkpoint(dir.path(), layout, &c),
            "{layout:?}, {what}: not used"
        );
    }
}

#[test]
fn checkpoint_entry_pointing_at_another_record_never_returns_its_bytes() {
    for layout in LAYOUTS {
        checkpoint_entry_pointing_at_another_record(layout);
    }
}

fn checkpoint_entry_pointing_at_another_record(layout: Layout) {
    let dir = tempfile::tempdir().unwrap();
    let path = device_path(dir.path(), layout);
    let rt = runtime();
    let dev = FileDevice::open(&path, layout_config(layout)).unwrap();
    rt.block_on(async {
        for i in 0..4u32 {
            dev.store(format!("k{i}").as_bytes(), &value(i, 50), StoreMode::Upsert)
                .await
                .unwrap();
        }
    });
    // A clean close: the checkpoint covers everything, and the last partial block (all four
    // records) is served from the write buffer after the reopen.
    dev.close_blocking().unwrap();
    drop(dev);
    let mut c = read_checkpoint(&path, layout);
    let loc = |c: &Checkpoint, k: &[u8]| c.entries.iter().position(|(key, _)| key == k).unwrap();
    let (i1, i2) = (loc(&c, b"k1"), loc(&c, b"k2"));
    c.entries[i1].1 = c.entries[i2].1; // k1 -> k2's record (same key length)
    write_checkpoint(&path, layout, &c);
    let dev = FileDevice::open(&path, layout_config(layout)).unwrap();
    assert!(dev.recovery().checkpoint_used);
    rt.block_on(async {
        match dev.retrieve(b"k1", ReadRange::ALL).await {
            Ok(r) => assert_eq!(r.value, value(1, 50), "k2's bytes returned for k1"),
            Err(DeviceError::KeyNotFound { .. } | DeviceError::Corrupt { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        assert_eq!(get(&dev, b"k2").await, Some(value(2, 50)));
    });
}

/// The base images (crashed, clean; per layout), made once and copied for each case.
fn shared_base(layout: Layout, clean: bool) -> &'static (tempfile::TempDir, Checkpoint) {
    type Base = (tempfile::TempDir, Checkpoint);
    static BASES: std::sync::OnceLock<[Base; 4]> = std::sync::OnceLock::new();
    let make = |layout, clean| {
        let d = tempfile::tempdir().unwrap();
        let c = base_image(d.path(), layout, clean);
        (d, c)
    };
    let i = 2 * (layout == Layout::File) as usize + clean as usize;
    &BASES.get_or_init(|| {
        [
            make(Layout::Dir, false),
            make(Layout::Dir, true),
            make(Layout::File, false),
            make(Layout::File, true),
        ]
    })[i]
}

/// A u64 near interesting values: small, near `near`, or near the top.
fn wild(near: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        0..64u64,
        (0..64u64).prop_map(move |d| near.wrapping_add(d).wrapping_sub(32)),
        (0..64u64).prop_map(|d| u64::MAX - d),
        any::<u64>(),
    ]
}

#[derive(Debug, Clone)]
enum Edit {
    Seq(u64),
    ReplaySegment(u64),
    ReplayOffset(u64),
    EntrySegment(usize, u64),
    EntryOffset(usize, u64),
    EntryValueLen(usize, u32),
    EntrySeq(usize, u64),
    EntryCrc(usize, u32),
    /// Entry i takes entry j's location (same record, other key).
    EntrySwap(usize, usize),
    DropEntry(usize),
}

fn edit(layout: Layout) -> impl Strategy<Value = Edit> {
    let (c, seq, off) = {
        let (_, c) = shared_base(layout, true);
        (c.entries.len(), c.seq, c.replay_offset)
    };
    prop_oneof![
        wild(seq).prop_map(Edit::Seq),
        wild(1).prop_map(Edit::ReplaySegment),
        wild(off).prop_map(Edit::ReplayOffset),
        (0..c, wild(1)).prop_map(|(i, v)| Edit::EntrySegment(i, v)),
        (0..c, wild(off)).prop_map(|(i, v)| Edit::EntryOffset(i, v)),
        (0..c, prop_oneof![0..6000u32, any::<u32>()]).prop_map(|(i, v)| Edit::EntryValueLen(i, v)),
        (0..c, wild(seq)).prop_map(|(i, v)| Edit::EntrySeq(i, v)),
        (0..c, any::<u32>()).prop_map(|(i, v)| Edit::EntryCrc(i, v)),
        (0..c, 0..c).prop_map(|(i, j)| Edit::EntrySwap(i, j)),
        (0..c).prop_map(Edit::DropEntry),
    ]
}

fn apply(c: &mut Checkpoint, e: &Edit) {
    let n = c.entries.len();
    match *e {
        Edit::Seq(v) => c.seq = v,
        Edit::ReplaySegment(v) => c.replay_segment = v,
        Edit::ReplayOffset(v) => c.replay_offset = v,
        Edit::EntrySegment(i, v) if i < n => c.entries[i].1.segment = v,
        Edit::EntryOffset(i, v) if i < n => c.entries[i].1.offset = v,
        Edit::EntryValueLen(i, v) if i < n => c.entries[i].1.value_len = v,
        Edit::EntrySeq(i, v) if i < n => c.entries[i].1.seq = v,
        Edit::EntryCrc(i, v) if i < n => c.entries[i].1.body_crc = v,
        Edit::EntrySwap(i, j) if i < n && j < n => {
            let (key_len, loc) = (c.entries[i].1.key_len, c.entries[j].1);
            c.entries[i].1 = railstore_device::format::Loc { key_len, ..loc };
        }
        Edit::DropEntry(i) if i < n => {
            c.entries.remove(i);
        }
        _ => {}
    }
}

/// Checkpoints with a valid CRC and arbitrary contents: recovery never panics, never returns
/// wrong bytes, never cuts the intact log, and leaves it whole.
fn survives_wrong_checkpoint(layout: Layout, clean: bool, edits: &[Edit]) -> bool {
    let (base, good) = shared_base(layout, clean);
    let mut c = good.clone();
    for e in edits {
        apply(&mut c, e);
    }
    let dir = tempfile::tempdir().unwrap();
    copy_dir(base.path(), dir.path());
    let used = open_with_checkpoint(dir.path(), layout, &c);
    used && decode_checkpoint(&encode_checkpoint(&c)).is_none()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn recovery_survives_checkpoints_with_valid_crc_and_wrong_contents(
        clean in any::<bool>(),
        edits in prop::collection::vec(edit(Layout::Dir), 1..4)
    ) {
        prop_assert!(!survives_wrong_checkpoint(Layout::Dir, clean, &edits), "undecodable checkpoint used");
    }

    #[test]
    fn single_file_recovery_survives_checkpoints_with_valid_crc_and_wrong_contents(
        clean in any::<bool>(),
        edits in prop::collection::vec(edit(Layout::File), 1..4)
    ) {
        prop_assert!(!survives_wrong_checkpoint(Layout::File, clean, &edits), "undecodable checkpoint used");
    }
}

/// With O_DIRECT a segment file is allocated ahead of its writes (zeros after the log, so the
/// writes do not extend the file); sealing cuts it back to its last written block, and after a
/// crash the zeros of the open segment read as a clean end: every synced record is back.
#[test]
fn segments_allocated_ahead_are_trimmed_at_seal_and_recover_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let dev = FileDevice::open(dir.path(), config()).unwrap();
    // Seven 8 kB values fill a 64 KiB segment to about 60 kB: the seal cuts a block or more.
    let n = 24u32;
    runtime().block_on(async {
        for i in 0..n {
            let k = format!("k{i}");
            dev.store(k.as_bytes(), &value(i, 8000), StoreMode::Upsert)
                .await
                .unwrap();
        }
        dev.sync().await.unwrap();
    });
    let segs = dev.segment_extents();
    assert!(segs.len() >= 2, "{segs:?}");
    for s in &segs[..segs.len() - 1] {
        let len = std::fs::metadata(&s.path).unwrap().len();
        assert_eq!(len, s.len.div_ceil(4096) * 4096, "sealed {s:?}");
    }
    let open = segs.last().unwrap();
    let open_len = std::fs::metadata(&open.path).unwrap().len();
    if dev.direct_io() {
        assert_eq!(open_len, config().segment_bytes, "allocated ahead {open:?}");
    }
    dev.crash();
    drop(dev);
    let dev = FileDevice::open(dir.path(), config()).unwrap();
    let r = dev.recovery().clone();
    assert_eq!(r.torn_tail_bytes, 0, "{r:?}");
    assert!(
        r.set_aside.is_empty() && r.corrupt_segments.is_empty(),
        "{r:?}"
    );
    runtime().block_on(async {
        for i in 0..n {
            let k = format!("k{i}");
            assert_eq!(get(&dev, k.as_bytes()).await, Some(value(i, 8000)), "{k}");
        }
    });
}

/// Files removed or truncated under a running device: its open descriptors keep working, so
/// only `vanished` notices (the array's device watch calls it).
#[test]
fn vanished_notices_files_removed_or_truncated_under_the_device() {
    for damage in ["truncate", "remove files", "remove folder"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev");
        let dev = FileDevice::open(&path, config()).unwrap();
        runtime().block_on(async {
            for i in 0..24u32 {
                let k = format!("k{i}");
                dev.store(k.as_bytes(), &value(i, 8000), StoreMode::Upsert)
                    .await
                    .unwrap();
            }
            dev.sync().await.unwrap();
        });
        assert_eq!(dev.vanished(), None, "an intact device");
        let segs = dev.segment_extents();
        match damage {
            "truncate" => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&segs[0].path)
                    .unwrap();
                f.set_len(0).unwrap();
            }
            "remove files" => {
                for s in &segs {
                    std::fs::remove_file(&s.path).unwrap();
                }
            }
            _ => std::fs::remove_dir_all(&path).unwrap(),
        }
        let why = dev.vanished();
        assert!(why.is_some(), "{damage} went unnoticed");
        eprintln!("{damage}: {}", why.unwrap());
        dev.crash();
    }
}

/// Work sent to a device its owner has closed (a background task racing a shutdown) is refused
/// as stopped, not as a device failure that layers above would record against the device.
#[test]
fn a_closed_device_refuses_work_as_stopped_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    let dev = FileDevice::open(dir.path().join("dev"), config()).unwrap();
    runtime().block_on(async {
        dev.store(b"k", b"v", StoreMode::Upsert).await.unwrap();
    });
    dev.close_blocking().unwrap();
    runtime().block_on(async {
        let stored = dev.store(b"k2", b"v", StoreMode::Upsert).await;
        assert!(
            matches!(stored, Err(DeviceError::Stopped { .. })),
            "{stored:?}"
        );
        let read = dev.retrieve(b"k", ReadRange::ALL).await;
        assert!(matches!(read, Err(DeviceError::Stopped { .. })), "{read:?}");
    });
}
