//! `kill -9` during a put-heavy load: this test runs itself again as a child process that
//! writes objects and reports each acknowledged one, kills it without warning, reopens the store
//! and checks that every acknowledged object is intact and that an object whose put was cut off
//! is absent or intact, never partial. Several rounds on the same data folder.

use railstore_store::{body_from, collect_body, DeviceKind, PutOptions, Store, StoreConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "RAILSTORE_CRASH_CHILD";
const WRITERS: usize = 4;
const KEYS_PER_WRITER: u64 = 12;

fn config(dir: &str, separated: bool) -> StoreConfig {
    let mut c = StoreConfig {
        data_dir: dir.into(),
        inline_bytes_max: 4 << 10,
        chunk_bytes: 64 << 10,
        ..StoreConfig::default()
    };
    c.devices.kind = DeviceKind::File;
    c.devices.capacity_bytes = 1 << 30;
    c.devices.direct_io = false;
    match (&mut c.separation, separated) {
        (Some(s), true) => s.frame = Duration::from_millis(200),
        (s, _) => *s = None,
    }
    c
}

/// The body written for `seed`: its length and bytes follow from it.
fn body(seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let len = [0usize, 100, 4096, 5000, 60_000, 150_000, 400_000][rng.gen_range(0..7)];
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// The child: writers put objects until killed, printing `BEGIN key seed` before each put and
/// `ACK key seed` once it returned.
fn child(dir: &str, round: u64, separated: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Store::open(config(dir, separated)).await.unwrap();
        store.create_bucket("crash").await.unwrap();
        let tasks: Vec<_> = (0..WRITERS as u64)
            .map(|w| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut rng = ChaCha8Rng::seed_from_u64(round * 1000 + w);
                    loop {
                        let key = format!("w{w}/k{}", rng.gen_range(0..KEYS_PER_WRITER));
                        let seed: u64 = rng.gen();
                        println!("BEGIN {key} {seed}");
                        store
                            .put_object("crash", &key, body_from(body(seed)), PutOptions::default())
                            .await
                            .unwrap();
                        println!("ACK {key} {seed}");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn kill_9_during_puts_loses_no_acknowledged_object() {
    kill_9_rounds("kill_9_during_puts_loses_no_acknowledged_object", false);
}

/// The same with read/write separation: pieces buffered for readers survive through the
/// separation journal.
#[test]
fn kill_9_with_separation_loses_no_acknowledged_object() {
    kill_9_rounds("kill_9_with_separation_loses_no_acknowledged_object", true);
}

fn kill_9_rounds(test: &str, separated: bool) {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (dir, round) = spec.rsplit_once(':').unwrap();
        child(dir, round.parse().unwrap(), separated);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    // Per key: the seed of the last acknowledged put.
    let mut acked: HashMap<String, u64> = HashMap::new();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for round in 1..=3u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([harness_name(test).as_str(), "--exact", "--nocapture"])
            .env(CHILD_ENV, format!("{path}:{round}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let acks_wanted = rng.gen_range(30..150);
        let mut in_flight: HashMap<String, u64> = HashMap::new();
        let mut acks = 0;
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        while acks < acks_wanted {
            let line = lines
                .next()
                .expect("the child stopped before enough puts were acknowledged")
                .unwrap();
            let parts: Vec<&str> = line.split(' ').collect();
            match parts[..] {
                ["BEGIN", key, seed] => {
                    in_flight.insert(key.to_string(), seed.parse().unwrap());
                }
                ["ACK", key, seed] => {
                    acked.insert(key.to_string(), seed.parse().unwrap());
                    in_flight.remove(key);
                    acks += 1;
                }
                _ => {}
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Lines the child printed before it died still count.
        for line in lines.map_while(Result::ok) {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts[..] {
                ["BEGIN", key, seed] => {
                    in_flight.insert(key.to_string(), seed.parse().unwrap());
                }
                ["ACK", key, seed] => {
                    acked.insert(key.to_string(), seed.parse().unwrap());
                    in_flight.remove(key);
                }
                _ => {}
            }
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = Store::open(config(&path, separated)).await.unwrap();
            for w in 0..WRITERS {
                for k in 0..KEYS_PER_WRITER {
                    let key = format!("w{w}/k{k}");
                    let got = match store.get_object("crash", &key, None).await {
                        Ok(g) => Some(collect_body(g.body).await.unwrap_or_else(|e| {
                            panic!("round {round}: {key} is listed but unreadable: {e}")
                        })),
                        Err(railstore_store::StoreError::NoSuchKey { .. }) => None,
                        Err(railstore_store::StoreError::NoSuchBucket(_)) => None,
                        Err(e) => panic!("round {round}: {key}: {e}"),
                    };
                    let last = acked.get(&key).map(|&s| body(s));
                    let cut = in_flight.get(&key).map(|&s| body(s));
                    let ok = match &got {
                        None => last.is_none(),
                        Some(g) => Some(g) == last.as_ref() || Some(g) == cut.as_ref(),
                    };
                    assert!(
                        ok,
                        "round {round}: {key} holds {:?} bytes; acknowledged {:?}, cut off {:?}",
                        got.as_ref().map(Vec::len),
                        last.as_ref().map(Vec::len),
                        cut.as_ref().map(Vec::len)
                    );
                    // What the reopened store holds is the truth from here on.
                    if let Some(g) = got {
                        if Some(&g) != last.as_ref() {
                            acked.insert(key.clone(), in_flight[&key]);
                        }
                    }
                }
            }
            store.shutdown().await.unwrap();
        });
    }
}

/// `test` as the harness names it: its module path inside the test binary, then its name.
fn harness_name(test: &str) -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    format!("{module}::{test}")
}
