//! Volumes against a model: random unaligned, overlapping writes, zeroing and reads on a real
//! store (file devices, separation on), checked byte for byte against a plain buffer, across a
//! restart, a resize and a delete. Seeded: a failing seed prints itself; set
//! `RAILSTORE_VOLUME_SEED` to replay one.

use railstore_store::{DeviceKind, Store, StoreConfig};
use railstore_volume::{parse_mechanism, VolumeError, VolumeSpec, Volumes};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::time::Duration;

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig {
        data_dir: dir.to_path_buf(),
        ..StoreConfig::default()
    };
    c.devices.kind = DeviceKind::File;
    c.devices.capacity_bytes = 1 << 30;
    c.devices.direct_io = false;
    if let Some(s) = &mut c.separation {
        s.frame = Duration::from_millis(200);
    }
    c
}

fn seeds() -> Vec<u64> {
    match std::env::var("RAILSTORE_VOLUME_SEED") {
        Ok(s) => vec![s.parse().expect("a seed")],
        Err(_) => (1..=3).collect(),
    }
}

/// A volume to make: (name, mechanism, object size, volume size).
type Made = (&'static str, &'static str, u64, u64);

async fn create(volumes: &Volumes, (name, mech, object_bytes, size): Made) {
    volumes
        .create(VolumeSpec {
            name: name.into(),
            size,
            object_bytes,
            mechanism: parse_mechanism(mech).unwrap(),
        })
        .await
        .unwrap();
}

/// One random operation on `name` and the model.
async fn step(volumes: &Volumes, name: &str, model: &mut [u8], rng: &mut ChaCha8Rng, seed: u64) {
    let v = volumes.get(name).unwrap();
    let size = model.len() as u64;
    let offset = rng.gen_range(0..size);
    let len = rng.gen_range(1..=(size - offset).min(40_000));
    match rng.gen_range(0..10) {
        0..=4 => {
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let fua = rng.gen_bool(0.1);
            v.write(offset, &data, fua).await.unwrap();
            model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        }
        5 => {
            v.zero(offset, len, false).await.unwrap();
            model[offset as usize..(offset + len) as usize].fill(0);
        }
        6 => v.flush().await.unwrap(),
        _ => {
            let got = v.read(offset, len).await.unwrap();
            assert!(
                got == model[offset as usize..(offset + len) as usize],
                "seed {seed}: {name}: read {offset}+{len} differs from the model"
            );
        }
    }
}

async fn check_whole(volumes: &Volumes, name: &str, model: &[u8], when: &str) {
    let v = volumes.get(name).unwrap();
    let got = v.read(0, model.len() as u64).await.unwrap();
    if let Some(i) = got.iter().zip(model).position(|(a, b)| a != b) {
        panic!(
            "{name} {when}: byte {i} is {} where the model has {}",
            got[i], model[i]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn volumes_match_a_model_across_restart_resize_and_delete() {
    // (name, mechanism, object size, volume size): objects small enough that requests span
    // several and most writes are partial (read-modify-write).
    let volumes_made: [Made; 4] = [
        ("hybrid", "hybrid", 16 << 10, 200 << 10),
        ("rep3", "rep3", 16 << 10, 160 << 10),
        ("split", "split4+2", 64 << 10, 320 << 10),
        ("pack", "pack4+2", 4 << 10, 96 << 10),
    ];
    for seed in seeds() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut models = Vec::new();
        {
            let store = Store::open(config(dir.path())).await.unwrap();
            let volumes = Volumes::open(store.clone()).await.unwrap();
            for made in volumes_made {
                create(&volumes, made).await;
                models.push(vec![0u8; made.3 as usize]);
            }
            for i in 0..240 {
                let which = i % volumes_made.len();
                let name = volumes_made[which].0;
                step(&volumes, name, &mut models[which], &mut rng, seed).await;
            }
            for (i, (name, ..)) in volumes_made.iter().enumerate() {
                check_whole(&volumes, name, &models[i], &format!("seed {seed}")).await;
            }
            store.shutdown().await.unwrap();
        }
        // Found again after a restart, every byte as acknowledged.
        let store = Store::open(config(dir.path())).await.unwrap();
        let volumes = Volumes::open(store.clone()).await.unwrap();
        let listed: Vec<String> = volumes.list().into_iter().map(|v| v.name).collect();
        let mut names: Vec<String> = volumes_made.iter().map(|v| v.0.to_string()).collect();
        names.sort();
        assert_eq!(listed, names, "seed {seed}");
        for (i, (name, mech, ..)) in volumes_made.iter().enumerate() {
            check_whole(
                &volumes,
                name,
                &models[i],
                &format!("seed {seed} after restart"),
            )
            .await;
            assert_eq!(volumes.info(name).await.unwrap().mechanism, *mech);
        }
        // A shrink cuts, a grow brings zeros back (never the old bytes).
        let (name, _, _, size) = volumes_made[0];
        let cut = size / 2 + 512;
        volumes.resize(name, cut).await.unwrap();
        models[0].truncate(cut as usize);
        check_whole(&volumes, name, &models[0], "after shrinking").await;
        let v = volumes.get(name).unwrap();
        assert!(matches!(
            v.read(cut - 512, 1024).await,
            Err(VolumeError::OutOfRange { .. })
        ));
        volumes.resize(name, size).await.unwrap();
        models[0].resize(size as usize, 0);
        check_whole(&volumes, name, &models[0], "after growing again").await;
        // Deleted and made again under the same name: zeros, and the old handle is dead.
        let (name, _, _, size) = volumes_made[1];
        let old = volumes.get(name).unwrap();
        volumes.delete(name).await.unwrap();
        assert!(matches!(
            old.write(0, b"x", false).await,
            Err(VolumeError::Deleted(_))
        ));
        assert!(matches!(volumes.get(name), Err(VolumeError::NotFound(_))));
        create(&volumes, volumes_made[1]).await;
        check_whole(&volumes, name, &vec![0; size as usize], "made again").await;
        assert_eq!(volumes.info(name).await.unwrap().objects_stored, Some(0));
        store.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path())).await.unwrap();
    let volumes = Volumes::open(store.clone()).await.unwrap();
    let spec = VolumeSpec::new("v", 1 << 20);
    volumes.create(spec.clone()).await.unwrap();
    assert!(matches!(
        volumes.create(spec.clone()).await,
        Err(VolumeError::Exists(_))
    ));
    for bad in [
        VolumeSpec::new("bad/name", 1 << 20),
        VolumeSpec::new("odd", 1000),
        VolumeSpec {
            object_bytes: 3000,
            ..VolumeSpec::new("w", 1 << 20)
        },
    ] {
        assert!(
            matches!(
                volumes.create(bad.clone()).await,
                Err(VolumeError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    let v = volumes.get("v").unwrap();
    v.write(0, &[7; 4096], false).await.unwrap();
    let e = v.write((1 << 20) - 10, &[1; 20], false).await.unwrap_err();
    assert_eq!(e.errno(), 28, "{e}");
    assert_eq!(v.read(1 << 20, 1).await.unwrap_err().errno(), 22);
    assert_eq!(v.read(0, 4096).await.unwrap(), vec![7; 4096]);
    assert!(volumes.resize("v", 100).await.is_err());
    assert_eq!(volumes.list().len(), 1);
    assert_eq!(volumes.list()[0].size, 1 << 20);
    store.shutdown().await.unwrap();
}
