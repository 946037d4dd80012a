//! Reads below a segment (`part.rs`): a range of a large replicated or split object reads only
//! the units that hold it, checked unit by unit, and answers exactly what a whole read does —
//! for any range, after overwrites and deletes, with a damaged unit, with a data shard's device
//! not serving reads (decoded from other shards' units), and for pieces written without unit
//! tables.

use railstore_device::*;
use railstore_redundancy::format::{segment_key, PieceHeader};
use railstore_redundancy::{Manager, ManagerConfig, Mechanism, Policy, ReadPlan};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const SEED: u64 = 0x7061_7274;

async fn manager(mechanism: &str, devices: usize) -> (Manager, Vec<Arc<MemDevice>>) {
    let mems: Vec<Arc<MemDevice>> = (0..devices)
        .map(|_| Arc::new(MemDevice::new(MemConfig::default()).unwrap()))
        .collect();
    let config = ManagerConfig {
        policy: Policy::Standalone(Mechanism::parse(mechanism).unwrap()),
        ..ManagerConfig::default()
    };
    let devs = mems.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
    (Manager::open(devs, config).await.unwrap(), mems)
}

fn object(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.gen()).collect()
}

fn bytes_read(m: &Manager) -> u64 {
    m.devices().counters.retrieve_bytes.load(Ordering::Relaxed)
}

async fn read(m: &Manager, key: &[u8], offset: u64, len: u64) -> Vec<u8> {
    let range = ReadRange {
        offset,
        len: Some(len),
    };
    m.get(key, range).await.unwrap().0
}

#[tokio::test]
async fn ranges_read_below_segments_match_the_object_and_read_little() {
    for (mechanism, devices) in [("rep3", 3), ("split3+3", 6), ("split6+3", 9)] {
        let seed = SEED ^ devices as u64;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (m, _) = manager(mechanism, devices).await;
        // One segment, and several (2 MiB device values; full segments cut one unit short of
        // a whole value, so that their pieces carry a table too).
        let lens = [1_900_000, 5 * (1 << 20) + 12_345, 13 * (1 << 20) + 999];
        let mut values = Vec::new();
        for (i, len) in lens.into_iter().enumerate() {
            let value = object(&mut rng, len);
            let key = format!("vol/{i}");
            m.put(key.as_bytes(), &value, StoreMode::Upsert, None)
                .await
                .unwrap();
            for j in 0..200 {
                let offset = rng.gen_range(0..value.len() as u64);
                let len = match j % 3 {
                    0 => 4096,
                    1 => rng.gen_range(1..64 << 10),
                    _ => rng.gen_range(1..3 << 20),
                };
                let end = (offset + len).min(value.len() as u64);
                let got = read(&m, key.as_bytes(), offset, len).await;
                assert!(
                    got == value[offset as usize..end as usize],
                    "{mechanism} seed {seed:#x}: {key} range {offset}+{len} differs"
                );
            }
            values.push(value);
        }
        // Warm: an aligned 4 KiB read of a one-segment object reads one unit of one piece.
        let (key, value) = if mechanism == "rep3" {
            ("vol/0", &values[0])
        } else {
            ("vol/1", &values[1])
        };
        let before = bytes_read(&m);
        for i in 0..64u64 {
            let offset = (i * 77_777 % (value.len() as u64 / 4096 - 1)) * 4096;
            let got = read(&m, key.as_bytes(), offset, 4096).await;
            assert!(got == value[offset as usize..offset as usize + 4096]);
        }
        // Units of whole shards: an aligned read is one unit (tables are kept by now).
        let per_read = (bytes_read(&m) - before) / 64;
        assert!(
            per_read <= 4096 + 512,
            "{mechanism}: {per_read} B read from devices per 4 KiB read"
        );
    }
}

#[tokio::test]
async fn overwrites_and_deletes_are_seen_by_reads_below_segments() {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    for mechanism in ["rep3", "split3+3"] {
        let (m, _) = manager(mechanism, 6).await;
        // One segment (a rep3 copy filling a whole 2 MiB value has no table).
        let mut value = object(&mut rng, 1_900_000);
        m.put(b"k", &value, StoreMode::Upsert, None).await.unwrap();
        assert!(read(&m, b"k", 1 << 20, 4096).await == value[1 << 20..(1 << 20) + 4096]);
        for round in 0..4 {
            // A new version whose bytes differ in the range read, and one shorter.
            value = object(&mut rng, 1_900_000 - round * 150_000);
            m.put(b"k", &value, StoreMode::Upsert, None).await.unwrap();
            let before = bytes_read(&m);
            let got = read(&m, b"k", 1 << 20, 4096).await;
            assert!(
                got == value[1 << 20..(1 << 20) + 4096],
                "{mechanism} round {round}"
            );
            // The kept table of the old version is read again (a header of under 4 KiB with
            // the unit), not the whole segment.
            let read_now = bytes_read(&m) - before;
            assert!(
                read_now <= 2 * 4096,
                "{mechanism} round {round}: {read_now} B"
            );
        }
        assert!(m.delete(b"k").await.unwrap());
        let range = ReadRange {
            offset: 1 << 20,
            len: Some(4096),
        };
        assert!(matches!(
            m.get(b"k", range).await,
            Err(railstore_redundancy::RedundancyError::NotFound { .. })
        ));
    }
}

/// A split segment's shard length when its shards carry unit tables: whole units.
fn shard_len(seg_len: usize, k: usize) -> usize {
    seg_len.div_ceil(k).next_multiple_of(4096)
}

/// Flips one byte of the payload of the piece under `dkey` on `dev`.
async fn damage(dev: &MemDevice, dkey: &[u8], at_payload: usize) {
    let mut v = dev
        .retrieve(dkey, ReadRange::ALL)
        .await
        .unwrap()
        .value
        .to_vec();
    let header = v.len() - PieceHeader::decode(&v).unwrap().1.len();
    v[header + at_payload] ^= 0x40;
    dev.store(dkey, &v, StoreMode::Upsert).await.unwrap();
}

#[tokio::test]
async fn a_damaged_unit_is_never_answered() {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let (m, mems) = manager("split3+3", 6).await;
    let value = object(&mut rng, 3 << 20);
    m.put(b"k", &value, StoreMode::Upsert, None).await.unwrap();
    // Warm the unit table of data shard 0, then damage a unit of it behind the manager.
    assert!(read(&m, b"k", 8192, 4096).await == value[8192..12288]);
    let d = m.layout().place(b"k").of_pieces(6).device(0);
    damage(&mems[d], &segment_key(b"k", 0, 0), 8192 + 100).await;
    assert!(read(&m, b"k", 8192, 4096).await == value[8192..12288]);
    // And a cold read of another object's damaged unit.
    let other = object(&mut rng, 2 << 20);
    m.put(b"j", &other, StoreMode::Upsert, None).await.unwrap();
    let d = m.layout().place(b"j").of_pieces(6).device(1);
    let shard_len = shard_len(2 << 20, 3);
    damage(&mems[d], &segment_key(b"j", 0, 0), 4096 * 3 + 5).await;
    let at = shard_len + 4096 * 3;
    assert!(read(&m, b"j", at as u64, 4096).await == other[at..at + 4096]);
}

/// Every device but one serves reads.
struct AllBut(usize);

impl ReadPlan for AllBut {
    fn prefers(&self, device: usize) -> bool {
        device != self.0
    }
}

#[tokio::test]
async fn a_shard_on_a_device_not_serving_reads_is_decoded_from_units() {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let (m, _) = manager("split3+3", 6).await;
    let value = object(&mut rng, 4 << 20);
    m.put(b"k", &value, StoreMode::Upsert, None).await.unwrap();
    let shard1 = m.layout().place(b"k").of_pieces(6).device(1);
    let shard_len = shard_len(4 << 20, 3);
    // Warm every shard's table, then take data shard 1's device out of the read plan.
    for i in 0..3 {
        let at = i * shard_len + 4096;
        assert!(read(&m, b"k", at as u64, 4096).await == value[at..at + 4096]);
    }
    m.devices().set_read_plan(Arc::new(AllBut(shard1)));
    let decodes = m.devices().counters.decodes.load(Ordering::Relaxed);
    let before = bytes_read(&m);
    for i in 0..50 {
        let at = shard_len + rng.gen_range(0..shard_len - 10_000);
        let len = rng.gen_range(1..10_000);
        let got = read(&m, b"k", at as u64, len as u64).await;
        assert!(got == value[at..at + len], "read {i} at {at}+{len}");
    }
    assert_eq!(
        m.devices().counters.decodes.load(Ordering::Relaxed) - decodes,
        50,
        "every read decoded shard 1"
    );
    let per_read = (bytes_read(&m) - before) / 50;
    // k = 3 shards' units, each up to 10 KiB plus the partial units at both ends; tables
    // of parity shards read once.
    assert!(per_read < 3 * 20_480 + 4096, "{per_read} B per read");
}

#[tokio::test]
async fn pieces_without_unit_tables_are_read_whole() {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    for mechanism in ["rep3", "split3+3"] {
        let (m, mems) = manager(mechanism, 6).await;
        let value = object(&mut rng, 1 << 20);
        m.put(b"k", &value, StoreMode::Upsert, None).await.unwrap();
        // Rewrite every piece as the format before unit tables wrote it.
        let dkey = segment_key(b"k", 0, 0);
        let mut rewritten = 0;
        for dev in &mems {
            if let Ok(r) = dev.retrieve(&dkey, ReadRange::ALL).await {
                let (h, payload) = PieceHeader::decode(&r.value).unwrap();
                assert!(r.value.len() > payload.len() + 52, "written with a table");
                dev.store(&dkey, &h.encode(payload), StoreMode::Upsert)
                    .await
                    .unwrap();
                rewritten += 1;
            }
        }
        assert!(rewritten >= 3);
        for _ in 0..20 {
            let at = rng.gen_range(0..value.len() - 5000);
            assert!(read(&m, b"k", at as u64, 5000).await == value[at..at + 5000]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_read_below_segments_on_file_devices() {
    // The `file` device reads part of a value alone (O_DIRECT, io_uring), unchecked by its own
    // whole-value CRC: the units' CRCs check it, before and after a reopen and a compaction.
    let dir = tempfile::tempdir().unwrap();
    let open = || async {
        let devs: Vec<Arc<dyn Device>> = (0..6)
            .map(|d| {
                let cfg = FileConfig {
                    capacity_bytes: 256 << 20,
                    segment_bytes: 8 << 20,
                    direct_io: true,
                    io_uring: true,
                    ..Default::default()
                };
                Arc::new(FileDevice::open(dir.path().join(format!("d{d}")), cfg).unwrap())
                    as Arc<dyn Device>
            })
            .collect();
        let config = ManagerConfig {
            policy: Policy::Standalone(Mechanism::parse("split3+3").unwrap()),
            ..ManagerConfig::default()
        };
        Manager::open(devs, config).await.unwrap()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let values: Vec<Vec<u8>> = (0..4).map(|_| object(&mut rng, 4 << 20)).collect();
    let m = open().await;
    for (i, v) in values.iter().enumerate() {
        m.put(format!("f{i}").as_bytes(), v, StoreMode::Upsert, None)
            .await
            .unwrap();
    }
    // Overwrite one, so compaction has dead records to move live ones past.
    m.put(b"f0", &values[0], StoreMode::Upsert, None)
        .await
        .unwrap();
    m.sync().await.unwrap();
    let check = |m: Manager, rng: &mut ChaCha8Rng| {
        let picks: Vec<(usize, usize, usize)> = (0..120)
            .map(|_| {
                let i = rng.gen_range(0..values.len());
                let at = rng.gen_range(0..(4 << 20) - 9000);
                (i, at, rng.gen_range(1..9000))
            })
            .collect();
        let values = &values;
        async move {
            for (i, at, len) in picks {
                let key = format!("f{i}");
                // Cached by the first read of each key (a whole read), then read in part.
                let got = read(&m, key.as_bytes(), at as u64, len as u64).await;
                assert!(got == values[i][at..at + len], "f{i} {at}+{len}");
            }
            m
        }
    };
    let m = check(m, &mut rng).await;
    for d in 0..6 {
        m.devices().device(d).compact(u64::MAX).await.unwrap();
    }
    let m = check(m, &mut rng).await;
    drop(m);
    let m = open().await;
    check(m, &mut rng).await;
}

#[tokio::test]
async fn shards_of_the_older_length_are_repaired_at_their_length() {
    // Written with shards of ceil(len / 3) bytes (as before unit tables, so not rounded up
    // to whole units), then read and repaired by a manager that would round a new write's.
    let len: usize = (3 << 19) + 1000;
    let plain = len.div_ceil(3);
    assert_ne!(plain % 4096, 0);
    let (m, mems) = manager("split3+3", 6).await;
    let value = object(&mut ChaCha8Rng::seed_from_u64(SEED), len);
    let mech = Mechanism::parse("split3+3").unwrap();
    put_cut_at_whole_values(&m, &mems, mech, b"k", &value, false).await;
    let dkey = segment_key(b"k", 0, 0);
    let lengths = || async {
        let mut v = Vec::new();
        for d in &mems {
            if let Ok(r) = d.retrieve(&dkey, ReadRange::ALL).await {
                v.push(PieceHeader::decode(&r.value).unwrap().0.payload_len as usize);
            }
        }
        v
    };
    assert_eq!(lengths().await, vec![plain; 6]);
    assert!(m.get(b"k", ReadRange::ALL).await.unwrap().0 == value);
    assert!(read(&m, b"k", 600_000, 5000).await == value[600_000..605_000]);
    // Such shards are read whole, and after the first look no longer probed for a table:
    // one read of each of the k = 3 data shards.
    let retrieves = || m.devices().counters.retrieves.load(Ordering::Relaxed);
    let before = retrieves();
    assert!(read(&m, b"k", 700_000, 5000).await == value[700_000..705_000]);
    assert_eq!(retrieves() - before, 3, "device reads of a ranged read");
    // Two shards lost; the careful read decodes and writes them again, at their length.
    let layout = m.layout();
    let place = layout.place(b"k").of_pieces(6);
    for pos in [0, 4] {
        mems[place.device(pos)].delete(&dkey, true).await.unwrap();
    }
    assert!(m.get_resolved(b"k").await.unwrap().0 == value);
    assert_eq!(
        lengths().await,
        vec![plain; 6],
        "repaired at the stored length"
    );
    assert!(read(&m, b"k", 1_000_000, 5000).await == value[1_000_000..1_005_000]);
}

/// Stores `value` under `key` as the code before unit tables covered full segments cut it:
/// segments of a whole device value (2 MiB - 52 B a piece), full pieces in format 1, the
/// last segment's with a table (format 2, shards rounded to whole units) when `tables`, else
/// as the code before unit tables wrote them (format 1, shards of ceil(len / k)).
async fn put_cut_at_whole_values(
    m: &Manager,
    mems: &[Arc<MemDevice>],
    mech: Mechanism,
    key: &[u8],
    value: &[u8],
    tables: bool,
) {
    let piece_max = (2 << 20) - railstore_redundancy::format::PIECE_HEADER_BYTES;
    let (k, code, count) = match mech {
        Mechanism::Replicate { r } => (1usize, None, r as usize),
        Mechanism::Split { code, k, m } => (k as usize, Some(code), (k + m) as usize),
        other => panic!("{other}"),
    };
    let cut = piece_max * k;
    let segments = value.len().div_ceil(cut);
    let version = 77;
    let layout = m.layout();
    let place = layout.place(key).of_pieces(count);
    for s in 0..segments {
        let data = &value[s * cut..((s + 1) * cut).min(value.len())];
        let full = data.len() == cut;
        let payloads: Vec<Vec<u8>> = match code {
            None => vec![data.to_vec(); count],
            Some(code) => {
                let shard = match (full, tables) {
                    (true, _) => piece_max,
                    (false, true) => data.len().div_ceil(k).next_multiple_of(4096),
                    (false, false) => data.len().div_ceil(k),
                };
                let mut padded = data.to_vec();
                padded.resize(shard * count, 0);
                let codec =
                    railstore_ec::Codec::new(railstore_ec::Code::new(code, k, count - k).unwrap())
                        .unwrap();
                let (data_part, parity_part) = padded.split_at_mut(shard * k);
                let data_shards: Vec<&[u8]> = data_part.chunks(shard).collect();
                let mut parity: Vec<&mut [u8]> = parity_part.chunks_mut(shard).collect();
                codec.encode(&data_shards, &mut parity).unwrap();
                padded.chunks(shard).map(|c| c.to_vec()).collect()
            }
        };
        for (i, payload) in payloads.iter().enumerate() {
            let h = PieceHeader {
                kind: match code {
                    None => railstore_redundancy::format::PieceKind::Copy,
                    Some(_) => railstore_redundancy::format::PieceKind::Shard,
                },
                code: code.map(|c| c.as_u8()).unwrap_or(0),
                k: if code.is_some() { k as u8 } else { count as u8 },
                m: if code.is_some() { (count - k) as u8 } else { 0 },
                index: i as u8,
                segment: s as u32,
                segment_count: segments as u32,
                object_len: value.len() as u64,
                version,
                set: 0,
                payload_len: payload.len() as u32,
            };
            let bytes = match !full && tables {
                true => h.encode_units(payload),
                false => h.encode(payload),
            };
            mems[place.device(i)]
                .store(
                    &segment_key(key, s as u32, version),
                    &bytes,
                    StoreMode::Upsert,
                )
                .await
                .unwrap();
        }
    }
}

/// Full segments are cut one unit short of a whole device value, so their copies and shards
/// carry unit tables and are read in part; objects cut at whole device values before that are
/// still read, whole and in part, and repaired at their own cut.
#[tokio::test]
async fn objects_of_either_segment_cut_are_read_and_repaired() {
    for (mechanism, devices) in [("rep3", 3), ("split3+3", 6)] {
        let mech = Mechanism::parse(mechanism).unwrap();
        let (m, mems) = manager(mechanism, devices).await;
        let mut rng = ChaCha8Rng::seed_from_u64(SEED ^ 0xc47);
        let k = match mech {
            Mechanism::Split { k, .. } => k as usize,
            _ => 1,
        };
        let len = 2 * k * (2 << 20) + 300_001;
        let old_value = object(&mut rng, len);
        put_cut_at_whole_values(&m, &mems, mech, b"old", &old_value, true).await;
        let new_value = object(&mut rng, len);
        m.put(b"new", &new_value, StoreMode::Upsert, None)
            .await
            .unwrap();
        for (key, value) in [(&b"old"[..], &old_value), (&b"new"[..], &new_value)] {
            let name = String::from_utf8_lossy(key);
            assert!(
                m.get(key, ReadRange::ALL).await.unwrap().0 == *value,
                "{mechanism} {name}: whole read"
            );
            for _ in 0..100 {
                let offset = rng.gen_range(0..len as u64);
                let want = rng.gen_range(1..3 << 20);
                let end = (offset + want).min(len as u64) as usize;
                assert!(
                    read(&m, key, offset, want).await == value[offset as usize..end],
                    "{mechanism} {name}: range {offset}+{want}"
                );
            }
        }
        // A new object's full segment is read in part: an aligned 4 KiB read in segment 0
        // reads one unit (its table kept after the first read).
        let before = bytes_read(&m);
        for i in 0..32u64 {
            let offset = i * 12_288;
            assert!(read(&m, b"new", offset, 4096).await == new_value[offset as usize..][..4096]);
        }
        let per_read = (bytes_read(&m) - before) / 32;
        assert!(
            per_read <= 4096 + 1024,
            "{mechanism}: {per_read} B read per 4 KiB read of a full segment"
        );
        // A lost piece of the old object's segment 0 is written again at the old cut.
        let layout = m.layout();
        let place = layout.place(b"old").of_pieces(mech.pieces());
        let dkey = segment_key(b"old", 0, 0);
        mems[place.device(0)].delete(&dkey, true).await.unwrap();
        assert!(m.get_resolved(b"old").await.unwrap().0 == old_value);
        let repaired = mems[place.device(0)]
            .retrieve(&dkey, ReadRange::ALL)
            .await
            .unwrap();
        let (h, _) = PieceHeader::decode(&repaired.value).unwrap();
        assert_eq!(
            h.payload_len as usize,
            (2 << 20) - railstore_redundancy::format::PIECE_HEADER_BYTES,
            "{mechanism}: repaired at another cut"
        );
    }
}
