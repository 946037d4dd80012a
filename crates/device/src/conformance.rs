//! The device conformance model: random operation sequences run on any [`Device`] and on a
//! `BTreeMap`, with identical outcomes asserted. The device tests run it on every backend; the
//! remote device (`railstore-node`) runs it through a node. Panics on a mismatch, naming the seed
//! and step, so that `RAILSTORE_TEST_SEED` replays it.

use crate::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Limits small enough that violations are cheap to provoke.
pub fn test_limits() -> Limits {
    Limits {
        key_bytes_min: 1,
        key_bytes_max: 16,
        value_bytes_max: 9000,
    }
}

/// Seeds to run: fixed ones plus `RAILSTORE_TEST_SEED` if set.
pub fn seeds(fixed: &[u64]) -> Vec<u64> {
    let mut s = fixed.to_vec();
    if let Ok(v) = std::env::var("RAILSTORE_TEST_SEED") {
        s.push(v.parse().expect("RAILSTORE_TEST_SEED must be a number"));
    }
    s
}

/// The generator the driver uses for `seed`.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

fn random_key(rng: &mut ChaCha8Rng) -> Vec<u8> {
    match rng.gen_range(0..40) {
        0 => vec![],
        1 => vec![b'x'; 17],
        _ => {
            let len = rng.gen_range(1..=3);
            (0..len).map(|_| b"abcd"[rng.gen_range(0..4)]).collect()
        }
    }
}

fn random_value(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let len = match rng.gen_range(0..20) {
        0 => 9001,
        1 => 0,
        2..=4 => rng.gen_range(4000..9000),
        _ => rng.gen_range(1..300),
    };
    let b: u8 = rng.gen();
    (0..len).map(|i| b.wrapping_add(i as u8)).collect()
}

/// What an error is, without its data, for comparison with the model.
pub fn kind(e: &DeviceError) -> &'static str {
    match e {
        DeviceError::KeyLength { .. } => "key length",
        DeviceError::ValueLength { .. } => "value length",
        DeviceError::Capacity { .. } => "capacity",
        DeviceError::KeyNotFound { .. } => "not found",
        DeviceError::KeyExists { .. } => "exists",
        DeviceError::Offset { .. } => "offset",
        other => panic!("unexpected error {other}"),
    }
}

/// What the device should hold.
pub struct Model {
    /// Keys and values.
    pub map: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The device's limits, which decide the errors the model expects.
    pub limits: Limits,
}

impl Model {
    /// An empty model of a device with `limits`.
    pub fn new(limits: Limits) -> Model {
        Model {
            map: BTreeMap::new(),
            limits,
        }
    }

    fn check_key(&self, k: &[u8]) -> Result<(), &'static str> {
        if k.len() < self.limits.key_bytes_min || k.len() > self.limits.key_bytes_max {
            return Err("key length");
        }
        Ok(())
    }
}

/// Runs `ops` random operations on `dev` and on the model, asserting identical outcomes.
pub async fn drive(dev: &dyn Device, model: &mut Model, seed: u64, ops: usize) {
    let mut rng = rng(seed);
    for step in 0..ops {
        let ctx = format!("seed {seed} step {step}");
        match rng.gen_range(0..100) {
            0..=39 => {
                let (k, v) = (random_key(&mut rng), random_value(&mut rng));
                let mode = [
                    StoreMode::Upsert,
                    StoreMode::UpdateOnly,
                    StoreMode::InsertOnly,
                ][rng.gen_range(0..3)];
                let expect = model.check_key(&k).and_then(|()| {
                    if v.len() > model.limits.value_bytes_max {
                        return Err("value length");
                    }
                    match (mode, model.map.contains_key(&k)) {
                        (StoreMode::UpdateOnly, false) => Err("not found"),
                        (StoreMode::InsertOnly, true) => Err("exists"),
                        _ => Ok(()),
                    }
                });
                let got = dev.store(&k, &v, mode).await;
                assert_eq!(
                    got.as_ref().map_err(kind).copied(),
                    expect,
                    "{ctx}: store {k:?} {mode:?}"
                );
                if got.is_ok() {
                    model.map.insert(k, v);
                }
            }
            40..=69 => {
                let k = random_key(&mut rng);
                let range = match rng.gen_range(0..3) {
                    0 => ReadRange::ALL,
                    1 => ReadRange {
                        offset: rng.gen_range(0..400),
                        len: None,
                    },
                    _ => ReadRange {
                        offset: rng.gen_range(0..300),
                        len: Some(rng.gen_range(0..500)),
                    },
                };
                let expect = model.check_key(&k).and_then(|()| {
                    let v = model.map.get(&k).ok_or("not found")?;
                    let (s, e) = range.resolve(v.len() as u64).map_err(|e| kind(&e))?;
                    Ok(Retrieved {
                        value: v[s as usize..e as usize].to_vec().into(),
                        value_len: v.len() as u64,
                    })
                });
                let got = dev.retrieve(&k, range).await.map_err(|e| kind(&e));
                assert_eq!(got, expect, "{ctx}: retrieve {k:?} {range:?}");
                // Part of a value, read without the device's whole-value check: same answer.
                let got = dev.retrieve_part(&k, range).await.map_err(|e| kind(&e));
                assert_eq!(got, expect, "{ctx}: retrieve_part {k:?} {range:?}");
            }
            70..=81 => {
                let k = random_key(&mut rng);
                let must = rng.gen_bool(0.5);
                let expect = model
                    .check_key(&k)
                    .and_then(|()| match model.map.contains_key(&k) {
                        false if must => Err("not found"),
                        e => Ok(e),
                    });
                let got = dev.delete(&k, must).await.map_err(|e| kind(&e));
                assert_eq!(got, expect, "{ctx}: delete {k:?}");
                if got.is_ok() {
                    model.map.remove(&k);
                }
            }
            82..=87 => {
                let keys: Vec<Vec<u8>> = (0..rng.gen_range(1..5))
                    .map(|_| random_key(&mut rng))
                    .collect();
                let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
                let expect: Result<Vec<bool>, &str> = keys
                    .iter()
                    .map(|k| model.check_key(k).map(|()| model.map.contains_key(k)))
                    .collect();
                let got = dev.exist(&refs).await.map_err(|e| kind(&e));
                assert_eq!(got, expect, "{ctx}: exist {keys:?}");
            }
            88..=94 => {
                let prefix: Vec<u8> = (0..rng.gen_range(0..2))
                    .map(|_| b"abcd"[rng.gen_range(0..4)])
                    .collect();
                let with_values = rng.gen_bool(0.5);
                let mut req = IterRequest {
                    prefix: prefix.clone(),
                    start_after: None,
                    entries_max: rng.gen_range(1..6),
                    with_values,
                };
                let mut got = Vec::new();
                loop {
                    let b = dev.iterate(&req).await.expect("iterate");
                    assert!(b.entries.len() <= req.entries_max, "{ctx}: batch too long");
                    if let Some(l) = b.entries.last() {
                        req.start_after = Some(l.key.clone());
                    }
                    got.extend(b.entries);
                    if !b.more {
                        break;
                    }
                }
                let expect: Vec<IterEntry> = model
                    .map
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, v)| IterEntry {
                        key: k.clone(),
                        value: with_values.then(|| v.clone()),
                    })
                    .collect();
                assert_eq!(got, expect, "{ctx}: iterate {prefix:?}");
            }
            95..=97 => {
                let info = dev.info().await.expect("info");
                assert_eq!(info.key_count, model.map.len() as u64, "{ctx}: key count");
                assert!(
                    info.used_bytes <= info.capacity_bytes,
                    "{ctx}: used above capacity"
                );
            }
            _ => dev.sync().await.expect("sync"),
        }
    }
}

/// Asserts the device holds exactly the model's contents.
pub async fn assert_same(dev: &dyn Device, model: &Model, ctx: &str) {
    let all = iterate_all(dev, b"", true).await.expect("iterate");
    let got: BTreeMap<Vec<u8>, Vec<u8>> =
        all.into_iter().map(|e| (e.key, e.value.unwrap())).collect();
    assert_eq!(got.len(), model.map.len(), "{ctx}: key count");
    for (k, v) in &model.map {
        assert_eq!(got.get(k), Some(v), "{ctx}: key {k:?}");
        let r = dev
            .retrieve(k, ReadRange::ALL)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: retrieve {k:?}: {e}"));
        assert_eq!(&r.value, v, "{ctx}: key {k:?}");
    }
}
