//! Crash tests of the `file` backend: crashes injected by `faulty` at random points with torn
//! tails, and a real `kill -9` of a child process. Afterwards every synced store must read back
//! exactly, no partial or mixed value may appear, deleted keys stay deleted, and the device
//! opens without manual repair.

use crate::common;

use common::*;
use railstore_device::*;
use rand::Rng;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;

fn config() -> FileConfig {
    FileConfig {
        capacity_bytes: 64 << 20,
        limits: test_limits(),
        queue_depth_max: 8,
        segment_bytes: 48 << 10,
        write_buffer_bytes: 32 << 10,
        flush_bytes: 8 << 10,
        checkpoint_interval_bytes: 40 << 10,
        compaction: CompactionPolicy::Manual,
        direct_io: true,
        io_uring: true,
        ..Default::default()
    }
}

/// Per key: the state at the last completed sync, and every state written since.
#[derive(Default)]
struct CrashModel {
    durable: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    since: BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>>,
}

impl CrashModel {
    fn write(&mut self, k: &[u8], v: Option<Vec<u8>>) {
        self.since.entry(k.to_vec()).or_default().push(v);
    }
    fn synced(&mut self) {
        for (k, mut vs) in std::mem::take(&mut self.since) {
            self.durable.insert(k, vs.pop().expect("non-empty"));
        }
    }
    /// Checks a recovered device: each key holds its durable state or one written after it.
    async fn check(&self, dev: &dyn Device, ctx: &str) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        let mut now = BTreeMap::new();
        let keys: std::collections::BTreeSet<_> = self
            .durable
            .keys()
            .chain(self.since.keys())
            .cloned()
            .collect();
        for k in keys {
            let got = match dev.retrieve(&k, ReadRange::ALL).await {
                Ok(r) => Some(r.value.to_vec()),
                Err(DeviceError::KeyNotFound { .. }) => None,
                Err(e) => panic!("{ctx}: key {k:?}: {e}"),
            };
            let durable = self.durable.get(&k).cloned().unwrap_or(None);
            let allowed = got == durable || self.since.get(&k).is_some_and(|vs| vs.contains(&got));
            assert!(
                allowed,
                "{ctx}: key {k:?} holds {:?} B, durable {:?} B",
                got.as_ref().map(|v| v.len()),
                durable.as_ref().map(|v| v.len())
            );
            now.insert(k, got);
        }
        let listed = iterate_all(dev, b"", false).await.expect("iterate").len();
        assert_eq!(
            listed,
            now.values().filter(|v| v.is_some()).count(),
            "{ctx}: no unknown keys"
        );
        now
    }
}

/// Power loss: bytes past the durable position may be gone or garbage.
fn tear(dev: &FileDevice, layout: Layout, rng: &mut impl Rng) {
    let durable = dev.durable_position();
    match layout {
        Layout::Dir => tear_files(dev.dir(), durable, rng),
        Layout::File => tear_slots(dev, durable, rng),
    }
}

/// In the single-file layout: the bytes a write may have touched past the durable position
/// (up to the block after the log end) may be zeros (never written) or garbage.
fn tear_slots(dev: &FileDevice, durable: (u64, u64), rng: &mut impl Rng) {
    for e in dev.segment_extents() {
        let from = match e.id.cmp(&durable.0) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Equal => durable.1,
            std::cmp::Ordering::Greater => 0,
        };
        let to = ((e.len + 1).div_ceil(4096) * 4096).min(e.cap);
        if to <= from {
            continue;
        }
        let mut bytes = read_at(&e.path, e.offset + from, (to - from) as usize);
        let n = bytes.len();
        match rng.gen_range(0..3) {
            0 => {
                let at = rng.gen_range(0..=n);
                bytes[at..].fill(0);
            }
            1 => {
                for _ in 0..rng.gen_range(1..4) {
                    let at = rng.gen_range(0..n);
                    bytes[at] ^= 1 << rng.gen_range(0..8);
                }
            }
            _ => {
                let at = rng.gen_range(0..n);
                let end = (at + rng.gen_range(1..5000)).min(n);
                rng.fill(&mut bytes[at..end]);
            }
        }
        write_at(&e.path, e.offset + from, &bytes);
    }
}

fn tear_files(dir: &Path, durable: (u64, u64), rng: &mut impl Rng) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let Some(id) = name
            .strip_prefix("seg-")
            .and_then(|s| s.strip_suffix(".log"))
            .map(|s| s.parse::<u64>().unwrap())
        else {
            continue;
        };
        let from = match id.cmp(&durable.0) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Equal => durable.1,
            std::cmp::Ordering::Greater => 0,
        };
        let mut bytes = std::fs::read(&path).unwrap();
        if bytes.len() as u64 <= from {
            continue;
        }
        match rng.gen_range(0..3) {
            0 => bytes.truncate(rng.gen_range(from as usize..=bytes.len())),
            1 => {
                for _ in 0..rng.gen_range(1..4) {
                    let at = rng.gen_range(from as usize..bytes.len());
                    bytes[at] ^= 1 << rng.gen_range(0..8);
                }
            }
            _ => {
                let at = rng.gen_range(from as usize..bytes.len());
                let end = (at + rng.gen_range(1..5000)).min(bytes.len());
                rng.fill(&mut bytes[at..end]);
            }
        }
        std::fs::write(&path, &bytes).unwrap();
    }
}

/// One life of the device: recover, check, random work, crash, tear. Returns 1 if recovery cut
/// a torn tail.
async fn crash_round(
    dir: &Path,
    layout: Layout,
    seed: u64,
    round: u64,
    model: &mut CrashModel,
) -> u64 {
    let mut rng = rng(seed * 1000 + round);
    let path = device_path(dir, layout);
    let file = Arc::new(FileDevice::open(path, with_layout(config(), layout)).unwrap());
    let torn = file.recovery().torn_tail_bytes.min(1);
    let ctx = format!("{layout:?} seed {seed} round {round}");
    let now = model
        .check(file.as_ref(), &format!("{ctx} after recovery"))
        .await;
    // What survived becomes the new durable state.
    model.durable = now;
    model.since.clear();
    let faulty = FaultyDevice::new(
        file.clone(),
        FaultConfig {
            seed: seed + round,
            volatile_writes: rng.gen_bool(0.5),
            crash_after_inner_writes: Some(rng.gen_range(1..400)),
            ..Default::default()
        },
    );
    for _ in 0..2000 {
        let k = vec![b'a' + rng.gen_range(0..12u8), b'0' + rng.gen_range(0..3u8)];
        let r = match rng.gen_range(0..20) {
            0..=12 => {
                let len = if rng.gen_bool(0.2) {
                    rng.gen_range(3000..9000)
                } else {
                    rng.gen_range(0..200)
                };
                let v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                let r = faulty.store(&k, &v, StoreMode::Upsert).await;
                if r.is_ok() {
                    model.write(&k, Some(v));
                }
                r
            }
            13..=15 => {
                let r = faulty.delete(&k, false).await;
                if r.is_ok() {
                    model.write(&k, None);
                }
                r.map(|_| ())
            }
            16..=18 => {
                let r = faulty.sync().await;
                if r.is_ok() {
                    model.synced();
                }
                r
            }
            _ => faulty.compact(u64::MAX).await.map(|_| ()),
        };
        if let Err(e) = r {
            assert!(
                matches!(e, DeviceError::Failed { .. }),
                "{ctx}: unexpected {e}"
            );
            break;
        }
    }
    faulty.crash().await;
    file.crash();
    tear(&file, layout, &mut rng);
    torn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_crashes_at_random_points() {
    for layout in LAYOUTS {
        let mut torn = 0;
        for seed in seeds(&[1, 2, 3, 4, 5, 6]) {
            let dir = tempfile::tempdir().unwrap();
            let mut model = CrashModel::default();
            for round in 0..5 {
                torn += crash_round(dir.path(), layout, seed, round, &mut model).await;
            }
            let path = device_path(dir.path(), layout);
            let dev = FileDevice::open(path, with_layout(config(), layout)).unwrap();
            model
                .check(&dev, &format!("{layout:?} seed {seed} final"))
                .await;
            torn += dev.recovery().torn_tail_bytes.min(1);
        }
        assert!(
            torn > 3,
            "{layout:?}: the test must exercise torn tails ({torn} recoveries cut one)"
        );
    }
}

const CHILD_ENV: &str = "RAILSTORE_KILL9_CHILD_DIR";

fn child_value(round: u64, i: u64) -> Vec<u8> {
    let len = (i * 977 + round * 13) % 9000;
    (0..len)
        .map(|j| (i.wrapping_mul(31) ^ j ^ round) as u8)
        .collect()
}

fn key(round: u64, i: u64) -> Vec<u8> {
    format!("r{round}k{i}").into_bytes()
}

/// The child: stores and deletes, syncs, and prints what is durable, until killed.
fn child(path: &str, layout: Layout, round: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dev = FileDevice::open(path, with_layout(config(), layout)).unwrap();
        let mut out = std::io::stdout();
        for i in 0u64.. {
            dev.store(&key(round, i), &child_value(round, i), StoreMode::Upsert)
                .await
                .unwrap();
            let deleted = (i % 5 == 4).then(|| i - 2);
            if let Some(d) = deleted {
                dev.delete(&key(round, d), false).await.unwrap();
            }
            if i % 3 == 2 || deleted.is_some() {
                dev.sync().await.unwrap();
                use std::io::Write;
                writeln!(out, "synced {i}").unwrap();
                out.flush().unwrap();
            }
        }
    });
}

#[test]
fn kill9_child_recovers() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (rest, round) = spec.rsplit_once(':').unwrap();
        let (path, layout) = rest.rsplit_once(':').unwrap();
        let layout = if layout == "File" {
            Layout::File
        } else {
            Layout::Dir
        };
        child(path, layout, round.parse().unwrap());
        return;
    }
    for layout in LAYOUTS {
        kill9_rounds(layout);
    }
}

fn kill9_rounds(layout: Layout) {
    let dir = tempfile::tempdir().unwrap();
    let path = device_path(dir.path(), layout);
    let mut rng = rng(9);
    let mut synced = Vec::new();
    for round in 0..3u64 {
        let mut c = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                format!(
                    "{}::kill9_child_recovers",
                    module_path!().split_once("::").unwrap().1
                )
                .as_str(),
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{}:{layout:?}:{round}", path.display()))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let kill_after = rng.gen_range(20..300);
        let mut synced_upto = None;
        for line in BufReader::new(c.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("synced ") {
                synced_upto = Some(n.parse::<u64>().unwrap());
                if synced_upto.unwrap() >= kill_after {
                    break;
                }
            }
        }
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
        synced.push(synced_upto.expect("child synced something"));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dev = FileDevice::open(&path, with_layout(config(), layout)).unwrap();
            for (r, &upto) in synced.iter().enumerate() {
                let r = r as u64;
                for i in 0..=upto + 40 {
                    let got = match dev.retrieve(&key(r, i), ReadRange::ALL).await {
                        Ok(v) => Some(v.value.to_vec()),
                        Err(DeviceError::KeyNotFound { .. }) => None,
                        Err(e) => panic!("{layout:?} round {r} key {i}: {e}"),
                    };
                    // Key i is deleted right after key i + 2 is stored when (i + 2) % 5 == 4,
                    // and that delete is synced before "synced {i + 2}" is printed.
                    let deleted_at = i + 2;
                    if deleted_at % 5 == 4 && deleted_at <= upto {
                        assert_eq!(
                            got, None,
                            "{layout:?} round {r}: key {i} was deleted and synced"
                        );
                    } else if i <= upto {
                        assert_eq!(
                            got,
                            Some(child_value(r, i)),
                            "{layout:?} round {r}: key {i} was synced"
                        );
                    } else if let Some(v) = got {
                        assert_eq!(
                            v,
                            child_value(r, i),
                            "{layout:?} round {r}: key {i} partial or mixed"
                        );
                    }
                }
            }
        });
    }
}
