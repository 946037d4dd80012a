//! `Manager::scan` against `get`, seeded: every key it answers reads as `get` reads it, every
//! key `keys` lists is in its answer or left for `get`, every object held whole in one segment
//! is answered, and copies that disagree or fail their checks are left for `get`.

use railstore_device::{Device, Limits, MemConfig, MemDevice, ReadRange, StoreMode};
use railstore_redundancy::format::segment_key;
use railstore_redundancy::{Manager, ManagerConfig, Mechanism, Policy, RedundancyError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

fn seeds() -> Vec<u64> {
    match std::env::var("SEED") {
        Ok(s) => vec![s.parse().expect("SEED is a number")],
        Err(_) => vec![1, 2, 3],
    }
}

async fn open(policy: Policy) -> (Vec<Arc<MemDevice>>, Manager) {
    let mems: Vec<Arc<MemDevice>> = (0..6)
        .map(|_| {
            Arc::new(
                MemDevice::new(MemConfig {
                    capacity_bytes: 1 << 30,
                    // Objects above ~8 KiB take several segments.
                    limits: Limits {
                        value_bytes_max: 8 << 10,
                        ..Limits::default()
                    },
                    queue_depth_max: 64,
                })
                .unwrap(),
            )
        })
        .collect();
    let devs: Vec<Arc<dyn Device>> = mems.iter().map(|m| m.clone() as Arc<dyn Device>).collect();
    let cfg = ManagerConfig {
        policy,
        pack_wait: Duration::from_millis(1),
        ..ManagerConfig::default()
    };
    (mems, Manager::open(devs, cfg).await.unwrap())
}

fn policies() -> Vec<(&'static str, Policy)> {
    let m = |s| Mechanism::parse(s).unwrap();
    vec![
        ("hash", Policy::Standalone(m("hash"))),
        ("rep3", Policy::Standalone(m("rep3"))),
        ("pack4+2", Policy::Standalone(m("pack4+2"))),
        (
            "hybrid",
            Policy::Hybrid {
                rules: vec![(256, m("rep3")), (6000, m("pack4+2"))],
                rest: m("split4+2"),
            },
        ),
    ]
}

/// Whether the scan must answer `key` itself: its first segment is held whole and it has one.
async fn held_whole(m: &Manager, key: &[u8]) -> bool {
    let meta = m.meta(key).await.unwrap().expect("stored");
    meta.segments == 1 && !matches!(meta.mechanism, Mechanism::Split { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_answers_what_get_answers() {
    for (name, policy) in policies() {
        for seed in seeds() {
            let ctx = format!("{name} seed {seed} (SEED={seed} to replay)");
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let (_mems, m) = open(policy.clone()).await;
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for _ in 0..300 {
                let prefix = if rng.gen_bool(0.8) { "a/" } else { "b/" };
                let key = format!("{prefix}{:03}", rng.gen_range(0..120)).into_bytes();
                if rng.gen_bool(0.15) {
                    m.delete(&key).await.unwrap();
                    model.remove(&key);
                    continue;
                }
                let len = match rng.gen_range(0..10) {
                    0..=5 => rng.gen_range(1..300),
                    6..=8 => rng.gen_range(300..7000),
                    _ => rng.gen_range(7000..30_000),
                };
                let v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                m.put(&key, &v, StoreMode::Upsert, None).await.unwrap();
                model.insert(key, v);
            }
            m.sync().await.unwrap();
            let scan = m.scan(b"a/").await.unwrap();
            let mut answered = 0;
            for (k, v) in &scan.values {
                assert_eq!(Some(v), model.get(k), "{ctx}: scanned {k:?}");
                answered += 1;
            }
            let mut listed: Vec<Vec<u8>> = scan.values.iter().map(|(k, _)| k.clone()).collect();
            listed.extend(scan.others.iter().cloned());
            listed.sort();
            assert_eq!(listed, m.keys(b"a/").await.unwrap(), "{ctx}: keys");
            for k in &scan.others {
                match m.get(k, ReadRange::ALL).await {
                    Ok((v, _)) => {
                        assert_eq!(Some(&v), model.get(k), "{ctx}: {k:?}");
                        assert!(!held_whole(&m, k).await, "{ctx}: {k:?} left to get");
                    }
                    Err(RedundancyError::NotFound { .. }) => assert!(!model.contains_key(k)),
                    Err(e) => panic!("{ctx}: {k:?}: {e}"),
                }
            }
            let live: Vec<&Vec<u8>> = model.keys().filter(|k| k.starts_with(b"a/")).collect();
            assert!(answered > 0 && answered <= live.len(), "{ctx}");
            for k in live {
                assert!(listed.contains(k), "{ctx}: {k:?} not listed");
            }
        }
    }
}

/// A copy left from an older version, and a damaged copy, send the key to `get`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_leaves_disagreeing_and_damaged_copies_to_get() {
    let (mems, m) = open(Policy::Standalone(Mechanism::parse("rep3").unwrap())).await;
    for key in [&b"k/stale"[..], b"k/damaged", b"k/fine"] {
        m.put(key, b"version one", StoreMode::Upsert, None)
            .await
            .unwrap();
    }
    m.sync().await.unwrap();
    // The first device holding a copy of each, and that copy's bytes now.
    let holder = |key: &[u8]| {
        let dkey = segment_key(key, 0, 0);
        let mems = mems.clone();
        async move {
            for d in mems {
                if let Ok(r) = d.retrieve(&dkey, ReadRange::ALL).await {
                    return (d, dkey, r.value.to_vec());
                }
            }
            panic!("no copy");
        }
    };
    let (stale_dev, stale_key, old) = holder(b"k/stale").await;
    m.put(b"k/stale", b"version two", StoreMode::Upsert, None)
        .await
        .unwrap();
    m.sync().await.unwrap();
    stale_dev
        .store(&stale_key, &old, StoreMode::Upsert)
        .await
        .unwrap();
    let (bad_dev, bad_key, mut bytes) = holder(b"k/damaged").await;
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    bad_dev
        .store(&bad_key, &bytes, StoreMode::Upsert)
        .await
        .unwrap();
    let scan = m.scan(b"k/").await.unwrap();
    assert_eq!(
        scan.values,
        vec![(b"k/fine".to_vec(), b"version one".to_vec())]
    );
    assert_eq!(
        scan.others,
        vec![b"k/damaged".to_vec(), b"k/stale".to_vec()]
    );
}
