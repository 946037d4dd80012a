//! The `file` backend's single-file layout (one preallocated file or block device): reused
//! slots never return old data, a torn superblock copy or checkpoint falls back to the other,
//! damage in the last slot keeps the intact records behind it, bad paths give clear errors, and
//! a real block device (a loop device, where the test may create one) works.

use crate::common;

use common::*;
use railstore_device::format::{decode_checkpoint_region, scan_records};
use railstore_device::*;
use std::collections::BTreeMap;
use std::path::Path;

fn config() -> FileConfig {
    FileConfig {
        capacity_bytes: 8 * (64 << 10),
        limits: test_limits(),
        queue_depth_max: 8,
        segment_bytes: 64 << 10,
        write_buffer_bytes: 32 << 10,
        flush_bytes: 8 << 10,
        checkpoint_interval_bytes: 0,
        compaction: CompactionPolicy::Manual,
        layout: FileLayout::SingleFile,
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

fn value(tag: u8, i: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i as usize * 37 + j * 11) as u8 ^ tag)
        .collect()
}

async fn get(dev: &FileDevice, k: &[u8]) -> Option<Vec<u8>> {
    match dev.retrieve(k, ReadRange::ALL).await {
        Ok(r) => Some(r.value.to_vec()),
        Err(DeviceError::KeyNotFound { .. }) => None,
        Err(e) => panic!("key {k:?}: {e}"),
    }
}

async fn put(dev: &FileDevice, k: &str, v: &[u8]) {
    dev.store(k.as_bytes(), v, StoreMode::Upsert).await.unwrap();
}

fn config_error(r: Result<FileDevice>) -> String {
    match r {
        Err(DeviceError::Config(m)) => m,
        Err(e) => panic!("expected a configuration error, got {e}"),
        Ok(_) => panic!("expected a configuration error, the device opened"),
    }
}

/// Checks what a reopened image holds: the `a` keys were deleted (their records sit in a slot
/// that was freed and reused) and must stay absent; the `b` and `c` keys hold their values or,
/// with `lost` (the test overwrote records in the reused slot), may be absent.
async fn check_reuse_image(dev: &FileDevice, c_keys: u32, lost: bool, ctx: &str) {
    for i in 0..20 {
        assert_eq!(
            get(dev, format!("a{i}").as_bytes()).await,
            None,
            "{ctx}: deleted key a{i} came back"
        );
    }
    let expect = (0..20)
        .map(|i| (format!("b{i}"), value(2, i, 5000)))
        .chain((0..c_keys).map(|i| (format!("c{i}"), value(3, i, 3000))));
    for (k, want) in expect {
        let got = get(dev, k.as_bytes()).await;
        assert!(
            got.as_ref() == Some(&want) || (lost && got.is_none()),
            "{ctx}: {k} holds {:?} B",
            got.map(|v| v.len())
        );
    }
    let keys = iterate_all(dev, b"a", false).await.unwrap();
    assert!(keys.is_empty(), "{ctx}: listed deleted keys {keys:?}");
}

#[test]
fn reused_slot_never_returns_old_data() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.img");
    let dev = FileDevice::open(&path, config()).unwrap();
    let (slot0, old_bytes, c_keys) = rt.block_on(async {
        // Segment 1 full of puts of `a` keys; their deletes go to segment 2.
        let mut a_keys = 0;
        while dev.segment_extents().len() == 1 {
            put(&dev, &format!("a{a_keys}"), &value(1, a_keys, 5000)).await;
            a_keys += 1;
        }
        dev.sync().await.unwrap();
        let first = dev.segment_extents().remove(0);
        assert_eq!((first.id, first.cap), (1, 64 << 10));
        for i in 0..a_keys {
            dev.delete(format!("a{i}").as_bytes(), true).await.unwrap();
        }
        for i in 0..20 {
            put(&dev, &format!("b{i}"), &value(2, i, 5000)).await;
        }
        dev.sync().await.unwrap();
        // Segment 1 holds only dead records now: compaction frees its slot.
        let old_bytes = read_at(&path, first.offset, first.cap as usize);
        let stats = dev.compact(u64::MAX).await.unwrap();
        assert!(stats.segments_freed >= 1, "{stats:?}");
        assert!(dev.segment_extents().iter().all(|e| e.id != 1));
        dev.checkpoint_blocking().unwrap();
        // New records until a new segment takes the freed slot.
        let mut c = 0;
        while !dev
            .segment_extents()
            .iter()
            .any(|e| e.offset == first.offset && e.id > 1)
        {
            put(&dev, &format!("c{c}"), &value(3, c, 3000)).await;
            c += 1;
            assert!(c < 200, "the freed slot is never reused");
        }
        put(&dev, &format!("c{c}"), &value(3, c, 3000)).await;
        dev.sync().await.unwrap();
        (first, old_bytes, c + 1)
    });
    // A crash: the reused slot holds a few new records, then the old segment's bytes.
    dev.crash();
    drop(dev);
    let image = std::fs::read(&path).unwrap();
    let dev = FileDevice::open(&path, config()).unwrap();
    rt.block_on(check_reuse_image(&dev, c_keys, false, "after the crash"));
    assert!(dev.recovery().set_aside.is_empty(), "{:?}", dev.recovery());
    drop(dev);

    // Worse: the new segment's identity reached the disk but none of its records did, so the
    // slot holds nothing but the old segment's intact records, from byte 0 on. Their sequence
    // numbers are below the slot's start: never replayed.
    std::fs::write(&path, &image).unwrap();
    write_at(&path, slot0.offset, &old_bytes);
    assert_eq!(
        scan_records(&old_bytes, 0, 0, |_, _| {}).end,
        scan_records(
            &read_at(&path, slot0.offset, old_bytes.len()),
            0,
            0,
            |_, _| {}
        )
        .end,
        "the slot holds the old segment's intact records"
    );
    for round in 0..2 {
        let dev = FileDevice::open(&path, config()).unwrap();
        let ctx = format!("old bytes in the reused slot, open {round}");
        rt.block_on(async {
            check_reuse_image(&dev, c_keys, true, &ctx).await;
            assert!(dev.recovery().set_aside.is_empty(), "{ctx}");
            // The device goes on appending into the slot, over the old bytes.
            put(&dev, &format!("d{round}"), &value(4, round, 100)).await;
            dev.sync().await.unwrap();
        });
        if round == 0 {
            dev.crash();
        } else {
            dev.close_blocking().unwrap();
        }
    }
    let dev = FileDevice::open(&path, config()).unwrap();
    rt.block_on(async {
        check_reuse_image(&dev, c_keys, true, "final").await;
        for round in 0..2 {
            assert_eq!(
                get(&dev, format!("d{round}").as_bytes()).await,
                Some(value(4, round, 100))
            );
        }
    });
    drop(dev);

    // Worst: nothing else is left to say the old records are stale (no checkpoint, every other
    // slot free), so only the slot's start sequence number keeps them out.
    std::fs::write(&path, &image).unwrap();
    write_at(&path, slot0.offset, &old_bytes);
    remove_checkpoints(&path, Layout::File);
    let sb = superblock(&path);
    for i in 0..sb.slot_count {
        let header = sb.slot_offset(i);
        if header + 4096 != slot0.offset {
            write_at(&path, header, &[0u8; 4096]);
        }
    }
    let dev = FileDevice::open(&path, config()).unwrap();
    assert_eq!(dev.recovery().segments, 1, "{:?}", dev.recovery());
    rt.block_on(async {
        let keys = iterate_all(&dev, b"", false).await.unwrap();
        assert!(keys.is_empty(), "old records replayed: {} keys", keys.len());
        put(&dev, "e", b"v").await;
    });
    dev.close_blocking().unwrap();
    drop(dev);
    let dev = FileDevice::open(&path, config()).unwrap();
    rt.block_on(async {
        let keys = iterate_all(&dev, b"", false).await.unwrap();
        assert_eq!(keys.len(), 1, "only the new key");
        assert_eq!(get(&dev, b"e").await, Some(b"v".to_vec()));
    });
}

#[test]
fn torn_superblock_copy_is_rewritten_from_the_other() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.img");
    {
        let dev = FileDevice::open(&path, config()).unwrap();
        assert!(!dev.recovery().superblock_repaired);
        rt.block_on(put(&dev, "k", b"v"));
        dev.close_blocking().unwrap();
    }
    let good = read_at(&path, 0, 4096);
    assert_eq!(read_at(&path, 4096, 4096), good, "two equal copies");
    // A torn write of copy 0 (its first sector zeroed), then a flipped bit in copy 1.
    for (at, damage) in [(0u64, vec![0u8; 512]), (4096 + 40, vec![good[40] ^ 0x10])] {
        write_at(&path, at, &damage);
        let dev = FileDevice::open(&path, config()).unwrap();
        assert!(dev.recovery().superblock_repaired, "damage at {at}");
        rt.block_on(async { assert_eq!(get(&dev, b"k").await, Some(b"v".to_vec())) });
        drop(dev);
        assert_eq!(read_at(&path, 0, 4096), good, "copy 0 after repair");
        assert_eq!(read_at(&path, 4096, 4096), good, "copy 1 after repair");
    }
    // Both copies damaged: refused with a clear error, nothing formatted over the data.
    write_at(&path, 30, &[good[30] ^ 1]);
    write_at(&path, 4096 + 30, &[good[30] ^ 1]);
    let before = std::fs::read(&path).unwrap();
    let msg = config_error(FileDevice::open(&path, config()));
    assert!(
        msg.contains("superblock") && msg.contains("refusing"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// Which checkpoint region holds the newest checkpoint, and its offset and length.
fn newest_checkpoint(path: &Path) -> (u64, usize) {
    let sb = superblock(path);
    let mut best = (0, 0, 0);
    for r in 0..2 {
        let at = sb.checkpoint_region_offset(r);
        let region = read_at(path, at, sb.checkpoint_region_bytes as usize);
        if let Some((generation, bytes)) = decode_checkpoint_region(&region, sb.device_id) {
            if generation > best.0 {
                best = (generation, at, bytes.len());
            }
        }
    }
    assert!(best.0 > 0, "no checkpoint");
    (best.1, best.2)
}

#[test]
fn torn_checkpoint_falls_back_to_the_older_one() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.img");
    let keys = |from: u32, to: u32| -> BTreeMap<Vec<u8>, Vec<u8>> {
        (from..to)
            .map(|i| (format!("k{i}").into_bytes(), value(5, i, 700)))
            .collect()
    };
    {
        let dev = FileDevice::open(&path, config()).unwrap();
        rt.block_on(async {
            for (k, v) in keys(0, 10) {
                dev.store(&k, &v, StoreMode::Upsert).await.unwrap();
            }
        });
        dev.checkpoint_blocking().unwrap();
        rt.block_on(async {
            for (k, v) in keys(10, 20) {
                dev.store(&k, &v, StoreMode::Upsert).await.unwrap();
            }
        });
        // Close writes the second checkpoint, into the other region.
        dev.close_blocking().unwrap();
    }
    let contents = |dev: &FileDevice| {
        let all = rt.block_on(iterate_all(dev, b"", true)).unwrap();
        all.into_iter()
            .map(|e| (e.key, e.value.unwrap()))
            .collect::<BTreeMap<_, _>>()
    };
    let (at, len) = newest_checkpoint(&path);
    // Torn: the second half of the newest checkpoint never reached the disk.
    write_at(&path, at + 64 + len as u64 / 2, &vec![0u8; len / 2]);
    let sb = superblock(&path);
    let older_at = sb.checkpoint_region_offset(0) + sb.checkpoint_region_offset(1) - at;
    let older = read_at(&path, older_at, 8192);
    let dev = FileDevice::open(&path, config()).unwrap();
    let r = dev.recovery().clone();
    assert!(r.checkpoint_used && r.checkpoint_fallback, "{r:?}");
    assert_eq!(
        r.records_replayed, 10,
        "replay from the older checkpoint: {r:?}"
    );
    assert!(contents(&dev) == keys(0, 20), "contents");
    dev.close_blocking().unwrap();
    drop(dev);
    // The close wrote a new checkpoint over the torn one, not over the one it fell back to.
    assert_eq!(newest_checkpoint(&path).0, at);
    assert!(
        read_at(&path, older_at, 8192) == older,
        "the checkpoint in use was kept"
    );
    let dev = FileDevice::open(&path, config()).unwrap();
    let r = dev.recovery().clone();
    assert!(r.checkpoint_used && !r.checkpoint_fallback, "{r:?}");
    assert_eq!(r.records_replayed, 0, "{r:?}");
    drop(dev);
    // Both regions damaged: the whole log is replayed.
    for region in 0..2 {
        write_at(&path, sb.checkpoint_region_offset(region) + 70, &[0xEE; 8]);
    }
    let dev = FileDevice::open(&path, config()).unwrap();
    let r = dev.recovery().clone();
    assert!(!r.checkpoint_used && r.records_replayed == 20, "{r:?}");
    assert!(contents(&dev) == keys(0, 20), "contents");
}

#[test]
fn corrupt_record_in_last_slot_keeps_the_intact_tail() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.img");
    let dev = FileDevice::open(&path, config()).unwrap();
    rt.block_on(async {
        for i in 0..6 {
            put(&dev, &format!("k{i}"), &value(6, i, 3000)).await;
        }
        dev.sync().await.unwrap();
    });
    let seg = dev.segment_extents().remove(0);
    dev.crash();
    drop(dev);
    let bytes = read_at(&path, seg.offset, seg.cap as usize);
    let mut recs = vec![];
    let end = scan_records(&bytes, 0, 0, |off, r| recs.push((off, r.key.to_vec()))).end;
    assert_eq!(recs.len(), 6);
    // Bit rot in k2's value: k3, k4 and k5 behind it (in later blocks) are intact and synced.
    let bad = recs[2].0;
    write_at(
        &path,
        seg.offset + bad as u64 + 100,
        &[bytes[bad + 100] ^ 0x40],
    );
    let damaged = read_at(&path, seg.offset, end);

    let dev = FileDevice::open(&path, config()).unwrap();
    let r = dev.recovery().clone();
    let aside = dir.path().join(format!("device.img.corrupt-1-{bad}"));
    assert_eq!(r.set_aside, vec![aside.clone()], "{r:?}");
    assert!(r.torn_tail_bytes >= (end - bad) as u64, "{r:?}");
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        damaged[bad..],
        "the cut tail is kept byte for byte"
    );
    rt.block_on(async {
        assert_eq!(get(&dev, b"k1").await, Some(value(6, 1, 3000)));
        for k in [b"k2", b"k3", b"k5"] {
            assert_eq!(get(&dev, k).await, None, "behind the damage");
        }
        dev.store(b"new", b"v", StoreMode::Upsert).await.unwrap();
        dev.sync().await.unwrap();
    });
    // The intact records behind the cut were zeroed in the slot: after more appends and a
    // crash they are neither copied again nor replayed.
    dev.crash();
    drop(dev);
    for _ in 0..2 {
        let dev = FileDevice::open(&path, config()).unwrap();
        assert!(dev.recovery().set_aside.is_empty(), "{:?}", dev.recovery());
        rt.block_on(async {
            assert_eq!(get(&dev, b"new").await, Some(b"v".to_vec()));
            for k in [b"k3", b"k4", b"k5"] {
                assert_eq!(get(&dev, k).await, None, "cut records stay cut");
            }
        });
    }
}

#[test]
fn bad_paths_and_sizes_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config();
    // A directory where one file was asked for, and the other way round.
    let msg = config_error(FileDevice::open(dir.path(), cfg.clone()));
    assert!(msg.contains("is a directory"), "{msg}");
    let file = dir.path().join("device.img");
    drop(FileDevice::open(&file, cfg.clone()).unwrap());
    let msg = config_error(FileDevice::open(
        &file,
        FileConfig {
            layout: FileLayout::Directory,
            ..cfg.clone()
        },
    ));
    assert!(msg.contains("directory layout"), "{msg}");
    // `Auto` picks by what the path is.
    let dev = FileDevice::open(
        &file,
        FileConfig {
            layout: FileLayout::Auto,
            ..cfg.clone()
        },
    )
    .unwrap();
    assert!(dev.single_file());
    // The device is locked while open.
    match FileDevice::open(&file, cfg.clone()) {
        Err(DeviceError::Io { op, .. }) => assert_eq!(op, "lock device file"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened twice"),
    }
    drop(dev);
    // Too small: a new file for fewer than four segments (not left behind), an existing one.
    let small = dir.path().join("small.img");
    let msg = config_error(FileDevice::open(
        &small,
        FileConfig {
            capacity_bytes: 3 * (64 << 10),
            ..cfg.clone()
        },
    ));
    assert!(
        msg.contains("too small") && msg.contains("4 segment slots"),
        "{msg}"
    );
    assert!(!small.exists());
    std::fs::write(&small, vec![0u8; 200 << 10]).unwrap();
    let msg = config_error(FileDevice::open(
        &small,
        FileConfig {
            layout: FileLayout::Auto,
            ..cfg.clone()
        },
    ));
    assert!(msg.contains("too small"), "{msg}");
    // A file that holds something else: never formatted.
    let other = dir.path().join("other.img");
    std::fs::write(&other, vec![0xABu8; 1 << 20]).unwrap();
    let msg = config_error(FileDevice::open(&other, cfg.clone()));
    assert!(msg.contains("refusing to format"), "{msg}");
    assert!(std::fs::read(&other).unwrap().iter().all(|&b| b == 0xAB));
    // A file shorter than its superblock says.
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - 4096).unwrap();
    let msg = config_error(FileDevice::open(&file, cfg.clone()));
    assert!(msg.contains("superblock describes"), "{msg}");
    // Neither a directory, a regular file nor a block device.
    let msg = config_error(FileDevice::open(
        "/dev/null",
        FileConfig {
            layout: FileLayout::Auto,
            ..cfg.clone()
        },
    ));
    assert!(msg.contains("neither"), "{msg}");
}

#[test]
fn device_geometry_wins_over_the_config() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.img");
    // An empty file is grown to the configured capacity.
    std::fs::write(&path, b"").unwrap();
    let dev = FileDevice::open(&path, config()).unwrap();
    let info = rt.block_on(dev.info()).unwrap();
    assert_eq!(info.capacity_bytes, 8 * (64 << 10));
    rt.block_on(put(&dev, "k", b"v"));
    drop(dev);
    let sb = superblock(&path);
    assert_eq!((sb.segment_bytes, sb.slot_count), (64 << 10, 8));
    // Reopened with other sizes: the device's segments and slots count.
    let dev = FileDevice::open(
        &path,
        FileConfig {
            segment_bytes: 1 << 20,
            capacity_bytes: 1 << 40,
            ..config()
        },
    )
    .unwrap();
    let info = rt.block_on(dev.info()).unwrap();
    assert_eq!(info.capacity_bytes, 8 * (64 << 10));
    assert_eq!(dev.segment_extents()[0].cap, 64 << 10);
    rt.block_on(async { assert_eq!(get(&dev, b"k").await, Some(b"v".to_vec())) });
    drop(dev);
    // Limits whose largest record does not fit the device's segments.
    let msg = config_error(FileDevice::open(
        &path,
        FileConfig {
            segment_bytes: 1 << 20,
            limits: Limits {
                value_bytes_max: 100 << 10,
                ..test_limits()
            },
            write_buffer_bytes: 1 << 20,
            ..config()
        },
    ));
    assert!(msg.contains("segments do not fit"), "{msg}");
}

/// A loop device over a file, detached on drop.
struct LoopDevice(String);

impl LoopDevice {
    fn attach(img: &Path) -> Option<LoopDevice> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let out = std::process::Command::new("losetup")
            .args(["-f", "--show"])
            .arg(img)
            .output()
            .ok()?;
        let dev = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !dev.is_empty()).then_some(LoopDevice(dev))
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = std::process::Command::new("losetup")
            .args(["-d", &self.0])
            .status();
    }
}

#[test]
fn block_device_through_a_loop_device() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("backing.img");
    std::fs::write(&img, vec![0u8; 4 << 20]).unwrap();
    let Some(lo) = LoopDevice::attach(&img) else {
        eprintln!("no loop device (needs root and losetup); not exercised here");
        return;
    };
    let rt = runtime();
    let cfg = FileConfig {
        layout: FileLayout::Auto,
        capacity_bytes: u64::MAX,
        ..config()
    };
    let dev = FileDevice::open(&lo.0, cfg.clone()).unwrap();
    assert!(dev.single_file());
    // Sized by BLKGETSIZE64.
    let sb = superblock(&img);
    assert_eq!(sb.total_bytes, 4 << 20);
    let info = rt.block_on(dev.info()).unwrap();
    assert_eq!(info.capacity_bytes, sb.slot_count * (64 << 10));
    rt.block_on(async {
        for i in 0..40 {
            put(&dev, &format!("k{i}"), &value(7, i, 6000)).await;
        }
    });
    dev.close_blocking().unwrap();
    drop(dev);
    let dev = FileDevice::open(&lo.0, cfg).unwrap();
    assert!(dev.recovery().checkpoint_used);
    rt.block_on(async {
        for i in 0..40 {
            assert_eq!(
                get(&dev, format!("k{i}").as_bytes()).await,
                Some(value(7, i, 6000))
            );
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_compaction_and_slot_reuse_never_fail() {
    let dir = tempfile::tempdir().unwrap();
    let dev =
        std::sync::Arc::new(FileDevice::open(dir.path().join("device.img"), config()).unwrap());
    const KEYS: u32 = 24;
    for i in 0..KEYS {
        put(&dev, &format!("k{i}"), &value(0, i, 3000)).await;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = vec![];
    for r in 0..3u32 {
        let (dev, stop) = (dev.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut reads = 0u64;
            let mut i = r;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i = (i * 7 + 3) % KEYS;
                let v = get(&dev, format!("k{i}").as_bytes()).await.expect("stored");
                // Any version written, never other bytes.
                let tag = v[0] ^ (i as usize * 37) as u8;
                assert_eq!(v, value(tag, i, 3000), "k{i}");
                reads += 1;
            }
            reads
        }));
    }
    let mut freed = 0;
    for round in 1..=60u32 {
        for i in 0..KEYS {
            put(&dev, &format!("k{i}"), &value(round as u8, i, 3000)).await;
        }
        freed += dev.compact(u64::MAX).await.unwrap().segments_freed;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut reads = 0;
    for t in tasks {
        reads += t.await.unwrap();
    }
    assert!(
        freed > 20 && reads > 100,
        "freed {freed} segments, {reads} reads"
    );
}
