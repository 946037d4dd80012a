//! Committed on-disk images of the `file` backend (`tests/fixtures/`), valid and corrupt, read
//! back with their exact expected contents. `RAILSTORE_WRITE_FIXTURES=1 cargo test -p
//! railstore-device --test fixtures` regenerates them (only when the format changes on purpose;
//! bump the format version then).

use railstore_device::format::{
    decode_checkpoint, decode_checkpoint_region, decode_record, decode_slot_header,
    decode_superblock, scan_records, RecordKind, RECORD_HEADER_BYTES,
};
use railstore_device::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SEGMENT: &str = "seg-0000000001.log";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn config() -> FileConfig {
    FileConfig {
        compaction: CompactionPolicy::Manual,
        ..Default::default()
    }
}

/// The single-file fixture: four slots of 16 KiB (a small image).
fn single_config() -> FileConfig {
    FileConfig {
        capacity_bytes: 4 * (16 << 10),
        limits: Limits {
            key_bytes_min: 1,
            key_bytes_max: 16,
            value_bytes_max: 6000,
        },
        segment_bytes: 16 << 10,
        write_buffer_bytes: 16 << 10,
        flush_bytes: 8 << 10,
        layout: FileLayout::SingleFile,
        ..config()
    }
}

const SINGLE: &str = "single-file/device.img";

/// The operations the valid image holds, in order.
async fn write_valid(dir: &Path) {
    write_ops(dir, config()).await
}

async fn write_ops(path: &Path, cfg: FileConfig) {
    let dev = FileDevice::open(path, cfg).unwrap();
    dev.store(b"alpha", b"first value", StoreMode::Upsert)
        .await
        .unwrap();
    dev.store(b"beta", &pattern(300, 1), StoreMode::Upsert)
        .await
        .unwrap();
    dev.store(b"gamma", b"g", StoreMode::InsertOnly)
        .await
        .unwrap();
    dev.delete(b"beta", true).await.unwrap();
    dev.store(b"alpha", b"second value", StoreMode::UpdateOnly)
        .await
        .unwrap();
    dev.store(b"delta", &pattern(5000, 2), StoreMode::Upsert)
        .await
        .unwrap();
    dev.sync().await.unwrap();
    dev.close_blocking().unwrap();
}

fn expect_valid() -> BTreeMap<Vec<u8>, Vec<u8>> {
    [
        (b"alpha".to_vec(), b"second value".to_vec()),
        (b"delta".to_vec(), pattern(5000, 2)),
        (b"gamma".to_vec(), b"g".to_vec()),
    ]
    .into()
}

/// Offsets of the records in the valid segment.
fn offsets(seg: &[u8]) -> Vec<usize> {
    let mut v = vec![];
    scan_records(seg, 0, 0, |off, _| v.push(off));
    v
}

async fn generate() {
    let root = fixtures();
    let _ = std::fs::remove_dir_all(&root);
    let valid = root.join("valid");
    write_valid(&valid).await;
    std::fs::remove_file(valid.join("LOCK")).unwrap();
    let seg = std::fs::read(valid.join(SEGMENT)).unwrap();
    let ckpt = std::fs::read(valid.join("checkpoint")).unwrap();
    let offs = offsets(&seg);
    let end = scan_records(&seg, 0, 0, |_, _| {}).end;
    let put = |name: &str, seg: &[u8], ckpt: Option<&[u8]>| {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(SEGMENT), seg).unwrap();
        if let Some(c) = ckpt {
            std::fs::write(d.join("checkpoint"), c).unwrap();
        }
    };
    put("no-checkpoint", &seg, None);
    // A torn append: the header and half of a new record's value, then nothing.
    let mut torn = seg[..end].to_vec();
    let mut rec = vec![0u8; format::record_len(4, 1000)];
    format::encode_record(&mut rec, RecordKind::Put, 7, b"torn", &pattern(1000, 3), 0);
    torn.extend_from_slice(&rec[..RECORD_HEADER_BYTES + 500]);
    put("torn-tail", &torn, Some(&ckpt));
    // A flipped bit inside gamma's record (the third): everything from there on is cut.
    let mut bad = seg.clone();
    bad[offs[2] + RECORD_HEADER_BYTES + 2] ^= 0x01;
    put("bad-record-crc", &bad, None);
    // A flipped bit in the checkpoint: it is ignored and the log replayed.
    let mut bad_ckpt = ckpt.clone();
    bad_ckpt[20] ^= 0x80;
    put("bad-checkpoint", &seg, Some(&bad_ckpt));
    // The same operations on the single-file layout.
    std::fs::create_dir_all(root.join(SINGLE).parent().unwrap()).unwrap();
    write_ops(&root.join(SINGLE), single_config()).await;
}

/// Opens a copy of a fixture (opening repairs in place) and returns its contents.
async fn open_copy(name: &str) -> (BTreeMap<Vec<u8>, Vec<u8>>, RecoveryReport) {
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixtures().join(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
    }
    let dev = FileDevice::open(tmp.path(), config()).unwrap();
    let all = iterate_all(&dev, b"", true).await.unwrap();
    let report = dev.recovery().clone();
    dev.close_blocking().unwrap();
    // Reopening the repaired copy gives the same contents.
    let again = FileDevice::open(tmp.path(), config()).unwrap();
    assert_eq!(
        iterate_all(&again, b"", true).await.unwrap(),
        all,
        "{name}: stable after repair"
    );
    (
        all.into_iter().map(|e| (e.key, e.value.unwrap())).collect(),
        report,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixtures_decode_to_expected_contents() {
    if std::env::var("RAILSTORE_WRITE_FIXTURES").is_ok() {
        generate().await;
    }
    let (valid, r) = open_copy("valid").await;
    assert_eq!(valid, expect_valid());
    assert!(
        r.checkpoint_used && r.torn_tail_bytes == 0 && r.records_replayed == 0,
        "{r:?}"
    );

    let (replayed, r) = open_copy("no-checkpoint").await;
    assert_eq!(replayed, expect_valid());
    assert!(!r.checkpoint_used && r.records_replayed == 6, "{r:?}");

    let (torn, r) = open_copy("torn-tail").await;
    assert_eq!(torn, expect_valid(), "torn record never appears");
    assert_eq!(
        r.torn_tail_bytes,
        (RECORD_HEADER_BYTES + 500) as u64,
        "{r:?}"
    );
    assert!(r.set_aside.is_empty(), "a torn tail is just cut: {r:?}");

    let (bad, r) = open_copy("bad-record-crc").await;
    let expect: BTreeMap<_, _> = [
        (b"alpha".to_vec(), b"first value".to_vec()),
        (b"beta".to_vec(), pattern(300, 1)),
    ]
    .into();
    assert_eq!(bad, expect, "records from the corrupt one on are cut");
    assert!(r.torn_tail_bytes > 0 && r.records_replayed == 2, "{r:?}");
    // Intact records lie behind gamma's: the cut tail was copied aside first.
    assert_eq!(r.set_aside.len(), 1, "{r:?}");

    let (ckpt, r) = open_copy("bad-checkpoint").await;
    assert_eq!(ckpt, expect_valid());
    assert!(!r.checkpoint_used && r.records_replayed == 6, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_file_fixture_decodes_to_expected_contents() {
    if std::env::var("RAILSTORE_WRITE_FIXTURES").is_ok() {
        return; // written by `fixtures_decode_to_expected_contents`
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("device.img");
    std::fs::copy(fixtures().join(SINGLE), &img).unwrap();
    for round in 0..2 {
        let dev = FileDevice::open(&img, single_config()).unwrap();
        let r = dev.recovery().clone();
        assert!(r.single_file && r.checkpoint_used, "{r:?}");
        assert_eq!((r.records_replayed, r.torn_tail_bytes), (0, 0), "{r:?}");
        let all = iterate_all(&dev, b"", true).await.unwrap();
        let got: BTreeMap<_, _> = all.into_iter().map(|e| (e.key, e.value.unwrap())).collect();
        assert_eq!(got, expect_valid(), "open {round}");
        dev.close_blocking().unwrap();
    }
}

#[test]
fn single_file_fixture_bytes_match_the_format() {
    if std::env::var("RAILSTORE_WRITE_FIXTURES").is_ok() {
        return; // being rewritten by `fixtures_decode_to_expected_contents`
    }
    let img = std::fs::read(fixtures().join(SINGLE)).unwrap();
    let u64_at = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
    // The superblock, byte by byte as docs/format.md describes it, twice.
    assert_eq!(&img[0..8], b"RSDEVSB1");
    assert_eq!(&img[8..12], &1u32.to_le_bytes());
    assert_eq!(img[0..4096], img[4096..8192]);
    let sb = decode_superblock(&img[..4096]).unwrap();
    assert_eq!(u64_at(24), img.len() as u64, "total bytes");
    assert_eq!(u64_at(32), 16 << 10, "segment bytes");
    assert_eq!(
        u64_at(40),
        20 << 10,
        "slot bytes: a 4 KiB header and 16 KiB of log"
    );
    assert_eq!(u64_at(48), 4, "slots");
    assert_eq!(
        (u64_at(56), u64_at(64)),
        (8192, 64 << 10),
        "checkpoint regions"
    );
    assert_eq!(u64_at(72), 8192 + 2 * (64 << 10), "slot 0");
    assert_eq!(sb.seq_base, u64_at(80));
    assert!(img[92..4096].iter().all(|&b| b == 0));
    // Slot 0 holds segment 1 (open: no seal); the others are free (zeros).
    let slot = |i: u64| &img[sb.slot_offset(i) as usize..][..sb.slot_bytes as usize];
    let (id, seal) = decode_slot_header(slot(0), sb.device_id, sb.slot_data_bytes());
    let id = id.unwrap();
    assert_eq!(&slot(0)[..8], b"RSSLOT01");
    assert_eq!((id.segment, id.start_seq, seal), (1, sb.seq_base, None));
    for i in 1..4 {
        assert!(slot(i)[..4096].iter().all(|&b| b == 0), "slot {i} free");
    }
    // Segment 1's log: the directory fixture's records, with sequence numbers from seq_base.
    let log = &slot(0)[4096..];
    let mut recs = vec![];
    let end = scan_records(log, 0, 0, |_, r| recs.push((r.header.seq, r.key.to_vec())));
    let keys: Vec<&[u8]> = recs.iter().map(|(_, k)| k.as_slice()).collect();
    assert_eq!(
        keys,
        [
            &b"alpha"[..],
            b"beta",
            b"gamma",
            b"beta",
            b"alpha",
            b"delta"
        ]
    );
    assert!(recs
        .iter()
        .enumerate()
        .all(|(i, (seq, _))| *seq == sb.seq_base + i as u64));
    // Zeros after the last record to the end of its block and beyond.
    assert!(log[end.end..].iter().all(|&b| b == 0));
    // The checkpoint went to region 0 as generation 1; region 1 is empty.
    let region = |r: usize| &img[sb.checkpoint_region_offset(r) as usize..][..64 << 10];
    assert_eq!(&region(0)[..8], b"RSCKREG1");
    let (generation, ckpt) = decode_checkpoint_region(region(0), sb.device_id).unwrap();
    assert_eq!(generation, 1);
    let c = decode_checkpoint(ckpt).unwrap();
    assert_eq!((c.seq, c.replay_segment), (sb.seq_base + 5, 1));
    assert_eq!(c.replay_offset, end.end as u64);
    assert!(region(1).iter().all(|&b| b == 0));
}

#[test]
fn valid_segment_bytes_parse_record_by_record() {
    let seg = std::fs::read(fixtures().join("valid").join(SEGMENT)).unwrap();
    let mut recs = vec![];
    let end = scan_records(&seg, 0, 0, |off, r| {
        recs.push((
            off,
            r.header.kind,
            r.header.seq,
            r.key.to_vec(),
            r.value.len(),
        ))
    });
    let names: Vec<(RecordKind, u64, &[u8], usize)> = recs
        .iter()
        .map(|(_, k, s, key, n)| (*k, *s, key.as_slice(), *n))
        .collect();
    assert_eq!(
        names,
        vec![
            (RecordKind::Put, 1, &b"alpha"[..], 11),
            (RecordKind::Put, 2, &b"beta"[..], 300),
            (RecordKind::Put, 3, &b"gamma"[..], 1),
            (RecordKind::Delete, 4, &b"beta"[..], 0),
            (RecordKind::Put, 5, &b"alpha"[..], 12),
            (RecordKind::Put, 6, &b"delta"[..], 5000),
        ]
    );
    // Packed back to back: each record starts where the previous one ends; only the 5000-byte
    // value is padded, so that it starts on a 512-byte boundary.
    assert_eq!(recs[1].0, format::record_len(5, 11));
    let mut at = 0;
    for (off, _, _, key, n) in &recs {
        assert_eq!(*off, at);
        let pad = format::value_pad(at as u64, key.len(), *n) as usize;
        assert_eq!(pad > 0, *n >= 4096);
        if *n >= 4096 {
            assert_eq!(
                (at + format::RECORD_HEADER_BYTES + key.len() + pad) % 512,
                0
            );
        }
        at += format::record_len(key.len(), *n) + pad;
    }
    assert_eq!(end.end, at);
    assert!(!end.garbage_after && seg.len().is_multiple_of(4096));
    // The first record, byte by byte as docs/format.md describes it.
    assert_eq!(&seg[0..4], b"RSRD");
    assert_eq!(seg[4], 1);
    assert_eq!(seg[5], 1);
    assert_eq!(&seg[6..8], &5u16.to_le_bytes());
    assert_eq!(&seg[8..12], &11u32.to_le_bytes());
    assert_eq!(&seg[16..24], &1u64.to_le_bytes());
    assert_eq!(&seg[32..37], b"alpha");
    assert_eq!(decode_record(&seg).unwrap().value.to_vec(), b"first value");
}
