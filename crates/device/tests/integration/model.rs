//! Model-based tests: random operation sequences on every backend, compared with a `BTreeMap`.

use crate::common;

use common::*;
use railstore_device::*;
use std::sync::Arc;

fn file_config() -> FileConfig {
    FileConfig {
        capacity_bytes: 64 << 20,
        limits: test_limits(),
        queue_depth_max: 8,
        segment_bytes: 64 << 10,
        write_buffer_bytes: 32 << 10,
        flush_bytes: 8 << 10,
        checkpoint_interval_bytes: 48 << 10,
        compaction: CompactionPolicy::Manual,
        direct_io: true,
        io_uring: true,
        ..Default::default()
    }
}

fn mem() -> Arc<dyn Device> {
    Arc::new(
        MemDevice::new(MemConfig {
            limits: test_limits(),
            ..Default::default()
        })
        .unwrap(),
    )
}

#[tokio::test]
async fn mem_matches_model() {
    for seed in seeds(&[1, 2, 3]) {
        let dev = mem();
        let mut model = Model::new(test_limits());
        drive(dev.as_ref(), &mut model, seed, 3000).await;
        assert_same(dev.as_ref(), &model, &format!("seed {seed}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_matches_model_across_reopen_and_compaction() {
    for layout in LAYOUTS {
        for seed in seeds(&[11, 12, 13]) {
            // Seed 12 runs buffered I/O with the blocking read pool instead of O_DIRECT +
            // io_uring.
            let fast = seed != 12;
            let cfg = FileConfig {
                direct_io: fast,
                io_uring: fast,
                ..with_layout(file_config(), layout)
            };
            let dir = tempfile::tempdir().unwrap();
            let path = device_path(dir.path(), layout);
            let mut model = Model::new(test_limits());
            for round in 0..4u64 {
                let ctx = format!("{layout:?} seed {seed} round {round}");
                let dev = FileDevice::open(&path, cfg.clone()).unwrap();
                assert_eq!(dev.single_file(), layout == Layout::File);
                if !fast {
                    assert!(!dev.direct_io() && !dev.io_uring());
                }
                if round > 0 {
                    assert!(
                        dev.recovery().checkpoint_used,
                        "{ctx}: clean close leaves a checkpoint"
                    );
                }
                assert_same(&dev, &model, &format!("{ctx} reopen")).await;
                drive(&dev, &mut model, seed * 100 + round, 600).await;
                let before = dev.info().await.unwrap();
                let stats = dev.compact(u64::MAX).await.unwrap();
                let after = dev.info().await.unwrap();
                assert_eq!(
                    after.used_bytes + stats.bytes_freed,
                    before.used_bytes + stats.bytes_copied,
                    "{ctx}"
                );
                assert_same(&dev, &model, &format!("{ctx} after compaction")).await;
                dev.close_blocking().unwrap();
            }
        }
    }
}

/// tmpfs refuses O_DIRECT before Linux 6.6 and accepts it since; either way the device works
/// (buffered I/O with a warning where refused; the buffered path itself is covered by seed 12
/// above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_works_on_tmpfs() {
    let shm = std::path::Path::new("/dev/shm");
    let is_tmpfs = std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(1) == Some("/dev/shm") && l.contains("tmpfs"))
        })
        .unwrap_or(false);
    if !is_tmpfs {
        eprintln!("no tmpfs at /dev/shm; not exercised here");
        return;
    }
    for layout in LAYOUTS {
        let dir = tempfile::tempdir_in(shm).unwrap();
        let path = device_path(dir.path(), layout);
        let cfg = with_layout(file_config(), layout);
        let dev = FileDevice::open(&path, cfg.clone()).unwrap();
        eprintln!("tmpfs, {layout:?}: O_DIRECT {}", dev.direct_io());
        let mut model = Model::new(test_limits());
        drive(&dev, &mut model, 5, 500).await;
        dev.close_blocking().unwrap();
        drop(dev);
        let dev = FileDevice::open(&path, cfg).unwrap();
        assert_same(&dev, &model, &format!("tmpfs reopen, {layout:?}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_replays_log_without_checkpoint() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let path = device_path(dir.path(), layout);
        let cfg = with_layout(file_config(), layout);
        let mut model = Model::new(test_limits());
        {
            let dev = FileDevice::open(&path, cfg.clone()).unwrap();
            drive(&dev, &mut model, 77, 800).await;
            dev.close_blocking().unwrap();
        }
        remove_checkpoints(&path, layout);
        let dev = FileDevice::open(&path, cfg).unwrap();
        assert!(!dev.recovery().checkpoint_used, "{layout:?}");
        assert_same(&dev, &model, &format!("full replay, {layout:?}")).await;
    }
}

#[tokio::test(start_paused = true)]
async fn sim_matches_model_in_virtual_time() {
    for seed in seeds(&[21, 22]) {
        let cfg = SimConfig {
            channels: 4,
            dies_per_channel: 2,
            logical_bytes: 64 << 20,
            pages_per_block: 16,
            ..Default::default()
        };
        let dev = SimDevice::new(mem(), cfg).unwrap();
        let mut model = Model::new(test_limits());
        let t0 = tokio::time::Instant::now();
        drive(&dev, &mut model, seed, 3000).await;
        assert!(
            t0.elapsed() > std::time::Duration::from_millis(10),
            "sim operations take virtual time"
        );
        assert_same(&dev, &model, &format!("seed {seed}")).await;
    }
}

#[tokio::test(start_paused = true)]
async fn wrappers_without_faults_match_model() {
    for seed in seeds(&[31]) {
        let faulty = Arc::new(FaultyDevice::new(
            mem(),
            FaultConfig {
                seed,
                volatile_writes: true,
                ..Default::default()
            },
        ));
        let metered = MeteredDevice::new(faulty);
        let mut model = Model::new(test_limits());
        drive(&metered, &mut model, seed, 3000).await;
        assert_same(&metered, &model, &format!("seed {seed}")).await;
        let s = metered.stats(OpKind::Store);
        assert!(
            s.ops > 500 && s.errors > 0 && s.bytes_in > 0,
            "store counters {s:?}"
        );
        assert_eq!(s.latency_ns.len(), s.ops);
        assert!(metered.stats(OpKind::Retrieve).bytes_out > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_capacity_error_changes_nothing_and_compaction_frees_space() {
    for layout in LAYOUTS {
        capacity_error_changes_nothing_and_compaction_frees_space(layout).await;
    }
}

async fn capacity_error_changes_nothing_and_compaction_frees_space(layout: Layout) {
    let dir = tempfile::tempdir().unwrap();
    // The single-file layout: four slots of 64 KiB, one kept for compaction.
    let cfg = FileConfig {
        capacity_bytes: 256 << 10,
        ..with_layout(file_config(), layout)
    };
    let dev = FileDevice::open(device_path(dir.path(), layout), cfg).unwrap();
    let v = vec![3u8; 8000];
    let mut stored = 0u32;
    let err = loop {
        match dev
            .store(&stored.to_be_bytes(), &v, StoreMode::Upsert)
            .await
        {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 100, "capacity never enforced");
    };
    assert!(
        matches!(err, DeviceError::Capacity { .. }),
        "{layout:?}: {err}"
    );
    assert!(
        !dev.exist(&[&stored.to_be_bytes()]).await.unwrap()[0],
        "a refused store changes nothing"
    );
    let info = dev.info().await.unwrap();
    assert!(info.used_bytes <= info.capacity_bytes);
    // Delete most keys, compact, and the space comes back.
    for i in 0..stored - 2 {
        dev.delete(&i.to_be_bytes(), true).await.unwrap();
    }
    let stats = dev.compact(u64::MAX).await.unwrap();
    assert!(
        stats.segments_freed > 0 && stats.bytes_freed > 100 << 10,
        "{layout:?}: {stats:?}"
    );
    dev.store(&stored.to_be_bytes(), &v, StoreMode::Upsert)
        .await
        .unwrap();
    for i in stored - 2..=stored {
        assert_eq!(
            dev.retrieve(&i.to_be_bytes(), ReadRange::ALL)
                .await
                .unwrap()
                .value,
            v
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_auto_compaction_reclaims_overwritten_space() {
    for layout in LAYOUTS {
        auto_compaction_reclaims_overwritten_space(layout).await;
    }
}

async fn auto_compaction_reclaims_overwritten_space(layout: Layout) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = FileConfig {
        compaction: CompactionPolicy::Auto {
            dead_ratio_min: 0.5,
        },
        ..with_layout(file_config(), layout)
    };
    let dev = FileDevice::open(device_path(dir.path(), layout), cfg).unwrap();
    let v = vec![9u8; 4000];
    for round in 0..40u32 {
        for k in 0..8u32 {
            let mut val = v.clone();
            val[0] = round as u8;
            dev.store(&k.to_be_bytes(), &val, StoreMode::Upsert)
                .await
                .unwrap();
        }
    }
    dev.sync().await.unwrap();
    let written = 40 * 8 * 4040u64;
    let mut used = u64::MAX;
    for _ in 0..100 {
        used = dev.info().await.unwrap().used_bytes;
        if used < written / 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        used < written / 3,
        "{layout:?}: background compaction left {used} of {written} B"
    );
    for k in 0..8u32 {
        let r = dev
            .retrieve(&k.to_be_bytes(), ReadRange::ALL)
            .await
            .unwrap();
        assert_eq!(r.value[0], 39);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_never_drops_live_records_behind_a_corrupt_one() {
    for layout in LAYOUTS {
        compaction_keeps_live_records_behind_a_corrupt_one(layout).await;
    }
}

async fn compaction_keeps_live_records_behind_a_corrupt_one(layout: Layout) {
    let dir = tempfile::tempdir().unwrap();
    let path = device_path(dir.path(), layout);
    // Checkpoint only on close, so reopening trusts the index and never rescans segment 1.
    let cfg = FileConfig {
        checkpoint_interval_bytes: 0,
        ..with_layout(file_config(), layout)
    };
    let v = |i: u32| vec![(i as u8) ^ 0x5A; 6000];
    let seg1 = {
        let dev = FileDevice::open(&path, cfg.clone()).unwrap();
        for i in 0..20u32 {
            dev.store(&i.to_be_bytes(), &v(i), StoreMode::Upsert)
                .await
                .unwrap();
        }
        // Key 0's first copy, at the start of the now sealed segment 1, becomes dead.
        dev.store(&0u32.to_be_bytes(), &v(100), StoreMode::Upsert)
            .await
            .unwrap();
        dev.sync().await.unwrap();
        dev.close_blocking().unwrap();
        dev.segment_extents().remove(0)
    };
    assert_eq!(seg1.id, 1);
    // Inside the dead record: its CRC fails, the live ones are intact.
    let at = seg1.offset + 100;
    let byte = read_at(&seg1.path, at, 1)[0];
    write_at(&seg1.path, at, &[byte ^ 0xFF]);
    for round in 0..2 {
        let dev = FileDevice::open(&path, cfg.clone()).unwrap();
        if round == 0 {
            // It may refuse (the segment cannot be walked), but must not lose live records.
            let _ = dev.compact(u64::MAX).await;
        }
        for i in 1..20u32 {
            let got = dev.retrieve(&i.to_be_bytes(), ReadRange::ALL).await;
            assert_eq!(
                got.unwrap().value.to_vec(),
                v(i),
                "{layout:?}: key {i} after round {round}"
            );
        }
        let got = dev.retrieve(&0u32.to_be_bytes(), ReadRange::ALL).await;
        assert_eq!(got.unwrap().value.to_vec(), v(100));
        dev.close_blocking().unwrap();
    }
}

/// An iteration with values reads neighbouring records together (`file/bulk.rs`): a prefix
/// whose records are spread over several segments, among records of other prefixes, reads
/// with a few reads and gives every value, in key order, on both layouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_iteration_reads_neighbouring_values_together() {
    use rand::{Rng, RngCore};
    for layout in LAYOUTS {
        for seed in seeds(&[21]) {
            let ctx = format!("{layout:?} seed {seed}");
            let mut rng = rng(seed);
            let dir = tempfile::tempdir().unwrap();
            let path = device_path(dir.path(), layout);
            let cfg = with_layout(file_config(), layout);
            let mut wanted = std::collections::BTreeMap::new();
            {
                let dev = FileDevice::open(&path, cfg.clone()).unwrap();
                for i in 0..1500u32 {
                    // Three in four keys under the prefix, of 1 to 600 bytes (some block-aligned
                    // values among them), the rest elsewhere.
                    let len = rng.gen_range(1..600);
                    let mut v = vec![0u8; len];
                    rng.fill_bytes(&mut v);
                    let key = if i % 4 == 3 {
                        format!("b{i:05}").into_bytes()
                    } else {
                        format!("a{i:05}").into_bytes()
                    };
                    dev.store(&key, &v, StoreMode::Upsert).await.unwrap();
                    if key[0] == b'a' {
                        wanted.insert(key, v);
                    }
                }
                dev.close_blocking().unwrap();
            }
            let dev = FileDevice::open(&path, cfg).unwrap();
            let got = dev
                .iterate(&IterRequest {
                    prefix: b"a".to_vec(),
                    start_after: None,
                    entries_max: 0,
                    with_values: true,
                })
                .await
                .unwrap();
            let got: Vec<(Vec<u8>, Vec<u8>)> = got
                .entries
                .into_iter()
                .map(|e| (e.key, e.value.unwrap()))
                .collect();
            let expect: Vec<(Vec<u8>, Vec<u8>)> = wanted.into_iter().collect();
            assert_eq!(got, expect, "{ctx}");
            let reads = dev.bulk_reads();
            // Read alone: only the few records of the log's last block, which the reopened
            // device holds in its write buffer.
            assert_eq!(
                reads.values + reads.alone,
                expect.len() as u64,
                "{ctx}: {reads:?}"
            );
            assert!(reads.alone <= 16, "{ctx}: {reads:?}");
            // 64 KiB segments of about 330-byte records: a run per segment or so.
            assert!(reads.runs * 20 < reads.values, "{ctx}: {reads:?}");
        }
    }
}
