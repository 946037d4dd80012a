//! The store against a plain model: buckets, objects of every size class, ranges, listings,
//! multipart uploads, failed bodies, and reopening from the devices.

use bytes::Bytes;
use railstore_store::{
    body_from, collect_body, Body, ChecksumsAtEnd, DeviceKind, ListQuery, PartOptions, PutOptions,
    RangeSpec, Store, StoreConfig, StoreError, WriteCondition,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Small sizes so that inline, single-chunk and many-chunk objects all occur quickly.
fn config(kind: DeviceKind, dir: &std::path::Path, separation: bool) -> StoreConfig {
    let mut c = StoreConfig {
        data_dir: dir.to_path_buf(),
        inline_bytes_max: 4 << 10,
        chunk_bytes: 64 << 10,
        part_bytes_min: 16 << 10,
        ..StoreConfig::default()
    };
    c.devices.kind = kind;
    c.devices.capacity_bytes = 1 << 30;
    c.devices.direct_io = false;
    match (&mut c.separation, separation) {
        (Some(s), true) => s.frame = Duration::from_millis(200),
        (s, _) => *s = None,
    }
    c
}

fn bytes(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

async fn get(store: &Store, bucket: &str, key: &str) -> Result<Vec<u8>, StoreError> {
    let g = store.get_object(bucket, key, None).await?;
    collect_body(g.body).await
}

/// A body that arrives in uneven pieces.
fn pieces(data: &[u8], rng: &mut ChaCha8Rng) -> Body {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let n = rng.gen_range(1..=(data.len() - at).min(40_000));
        out.push(Ok(Bytes::copy_from_slice(&data[at..at + n])));
        at += n;
    }
    Box::pin(futures_util::stream::iter(out))
}

#[tokio::test]
async fn buckets_follow_s3_rules() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(DeviceKind::Mem, dir.path(), false))
        .await
        .unwrap();
    assert!(store.create_bucket("photos").await.unwrap());
    assert!(
        !store.create_bucket("photos").await.unwrap(),
        "re-creating is fine"
    );
    for bad in [
        "ab",
        "Photos",
        "-x-",
        "a..b",
        "foo-.bar",
        "foo.-bar",
        "192.168.1.1",
        &"x".repeat(64),
    ] {
        assert!(
            matches!(
                store.create_bucket(bad).await,
                Err(StoreError::InvalidBucketName { .. })
            ),
            "{bad}"
        );
    }
    store
        .put_object("photos", "a", body_from("x"), PutOptions::default())
        .await
        .unwrap();
    assert!(matches!(
        store.delete_bucket("photos").await,
        Err(StoreError::BucketNotEmpty(_))
    ));
    assert!(matches!(
        store
            .put_object("nope", "a", body_from("x"), PutOptions::default())
            .await,
        Err(StoreError::NoSuchBucket(_))
    ));
    store.delete_object("photos", "a").await.unwrap();
    store.delete_bucket("photos").await.unwrap();
    assert!(store.list_buckets().is_empty());
    assert!(matches!(
        store.head_bucket("photos"),
        Err(StoreError::NoSuchBucket(_))
    ));
}

/// Changing an object's stored headers rewrites its record only: the body (inline or in
/// chunks), ETag and size stay, across a reopen; a refused change changes nothing.
#[tokio::test]
async fn object_headers_change_in_place_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(DeviceKind::File, dir.path(), false);
    let store = Store::open(cfg.clone()).await.unwrap();
    store.create_bucket("bkt").await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let small = bytes(&mut rng, 100);
    let big = bytes(&mut rng, 300_001);
    for (key, body) in [("small", &small), ("big", &big)] {
        let before = store
            .put_object("bkt", key, body_from(body.clone()), PutOptions::default())
            .await
            .unwrap();
        let after = store
            .update_object_headers("bkt", key, |info, h| {
                assert_eq!(info.etag, before.etag);
                h.insert("x-test".into(), key.into());
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(
            (after.etag.as_str(), after.size),
            (before.etag.as_str(), before.size)
        );
        let refused = store
            .update_object_headers("bkt", key, |_, h| {
                h.clear();
                Err(StoreError::InvalidArgument("no".into()))
            })
            .await;
        assert!(refused.is_err());
    }
    assert!(matches!(
        store
            .update_object_headers("bkt", "nope", |_, _| Ok(()))
            .await,
        Err(StoreError::NoSuchKey { .. })
    ));
    store.shutdown().await.unwrap();
    drop(store);
    let store = Store::open(cfg).await.unwrap();
    for (key, body) in [("small", &small), ("big", &big)] {
        let info = store.head_object("bkt", key).await.unwrap();
        assert_eq!(info.headers.get("x-test").map(String::as_str), Some(key));
        assert!(get(&store, "bkt", key).await.unwrap() == *body, "{key}");
    }
    // Replacing the object later frees its chunks once, and the new body reads back.
    store
        .put_object(
            "bkt",
            "big",
            body_from(small.clone()),
            PutOptions::default(),
        )
        .await
        .unwrap();
    assert!(get(&store, "bkt", "big").await.unwrap() == small);
    store.shutdown().await.unwrap();
}

/// Bucket settings are durable, per bucket, and go with their bucket.
#[tokio::test]
async fn bucket_settings_persist_and_go_with_the_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(DeviceKind::File, dir.path(), false);
    let store = Store::open(cfg.clone()).await.unwrap();
    store.create_bucket("one").await.unwrap();
    store.create_bucket("two").await.unwrap();
    store
        .set_bucket_setting("one", "encryption", Some("<xml/>".into()))
        .await
        .unwrap();
    store
        .set_bucket_setting("one", "cors", Some("rules".into()))
        .await
        .unwrap();
    store.set_bucket_setting("one", "cors", None).await.unwrap();
    assert!(matches!(
        store
            .set_bucket_setting("nope", "cors", Some("x".into()))
            .await,
        Err(StoreError::NoSuchBucket(_))
    ));
    store.shutdown().await.unwrap();
    drop(store);
    let store = Store::open(cfg.clone()).await.unwrap();
    let got = |b: &str, n: &str| store.bucket_setting(b, n).unwrap();
    assert_eq!(got("one", "encryption").as_deref(), Some("<xml/>"));
    assert_eq!(got("one", "cors"), None);
    assert_eq!(got("two", "encryption"), None);
    store.delete_bucket("one").await.unwrap();
    store.create_bucket("one").await.unwrap();
    assert_eq!(got("one", "encryption"), None, "a new bucket starts bare");
    store.shutdown().await.unwrap();
}

#[tokio::test]
async fn objects_of_every_size_round_trip_with_ranges_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(DeviceKind::Mem, dir.path(), true))
        .await
        .unwrap();
    store.create_bucket("bkt").await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for len in [0, 1, 4096, 4097, 65_536, 65_537, 300_001] {
        let data = bytes(&mut rng, len);
        let key = format!("size/{len}");
        let opts = PutOptions {
            content_type: Some("application/x-test".into()),
            user_metadata: [("colour".to_string(), "blue".to_string())].into(),
            ..PutOptions::default()
        };
        let info = store
            .put_object("bkt", &key, pieces(&data, &mut rng), opts)
            .await
            .unwrap();
        assert_eq!(info.size, len as u64);
        assert_eq!(info.etag, hex_md5(&data));
        let head = store.head_object("bkt", &key).await.unwrap();
        assert_eq!(head, info);
        assert_eq!(head.user_metadata["colour"], "blue");
        assert_eq!(get(&store, "bkt", &key).await.unwrap(), data, "{len}");
        if len == 0 {
            assert!(matches!(
                store
                    .get_object("bkt", &key, Some(RangeSpec::Suffix(1)))
                    .await,
                Err(StoreError::InvalidRange { size: 0 })
            ));
            continue;
        }
        for (spec, want) in [
            (
                RangeSpec::FromTo {
                    first: 0,
                    last: Some(0),
                },
                0..1,
            ),
            (
                RangeSpec::FromTo {
                    first: len as u64 / 2,
                    last: None,
                },
                len / 2..len,
            ),
            (RangeSpec::Suffix(70_000), len.saturating_sub(70_000)..len),
            (
                RangeSpec::FromTo {
                    first: len as u64 - 1,
                    last: Some(len as u64 + 100),
                },
                len - 1..len,
            ),
        ] {
            let g = store.get_object("bkt", &key, Some(spec)).await.unwrap();
            assert_eq!(g.range, (want.start as u64, want.end as u64));
            assert_eq!(collect_body(g.body).await.unwrap(), &data[want], "{spec:?}");
        }
        assert!(matches!(
            store
                .get_object(
                    "bkt",
                    &key,
                    Some(RangeSpec::FromTo {
                        first: len as u64,
                        last: None
                    })
                )
                .await,
            Err(StoreError::InvalidRange { .. })
        ));
    }
    let long = "k".repeat(1024);
    store
        .put_object("bkt", &long, body_from("long"), PutOptions::default())
        .await
        .unwrap();
    assert_eq!(get(&store, "bkt", &long).await.unwrap(), b"long");
    assert!(matches!(
        store
            .put_object(
                "bkt",
                &"k".repeat(1025),
                body_from("x"),
                PutOptions::default()
            )
            .await,
        Err(StoreError::KeyLength { len: 1025, .. })
    ));
    store.shutdown().await.unwrap();
}

fn hex_md5(data: &[u8]) -> String {
    use md5::{Digest, Md5};
    hex::encode(Md5::digest(data))
}

#[tokio::test]
async fn a_failed_body_or_digest_stores_nothing_and_keeps_the_old_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(DeviceKind::Mem, dir.path(), false))
        .await
        .unwrap();
    store.create_bucket("bkt").await.unwrap();
    store
        .put_object("bkt", "k", body_from("old"), PutOptions::default())
        .await
        .unwrap();
    let chunks_before = store.manager().keys(b"D").await.unwrap().len();
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let big = bytes(&mut rng, 200_000);
    let failing: Body = Box::pin(futures_util::stream::iter(vec![
        Ok(Bytes::copy_from_slice(&big[..150_000])),
        Err(StoreError::BadDigest("trailing checksum".into())),
    ]));
    assert!(matches!(
        store
            .put_object("bkt", "k", failing, PutOptions::default())
            .await,
        Err(StoreError::BadDigest(_))
    ));
    let wrong_md5 = PutOptions {
        content_md5: Some([0; 16]),
        ..PutOptions::default()
    };
    assert!(matches!(
        store
            .put_object("bkt", "k", body_from(big.clone()), wrong_md5)
            .await,
        Err(StoreError::BadDigest(_))
    ));
    let small = PutOptions {
        content_md5: Some(md5_of(b"new")),
        ..PutOptions::default()
    };
    store
        .put_object("bkt", "k2", body_from("new"), small)
        .await
        .unwrap();
    assert_eq!(get(&store, "bkt", "k").await.unwrap(), b"old");
    // The chunks the failed puts wrote are reclaimed.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        store.manager().keys(b"D").await.unwrap().len(),
        chunks_before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_take_effect_only_when_their_condition_holds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(DeviceKind::Mem, dir.path(), false))
        .await
        .unwrap();
    store.create_bucket("bkt").await.unwrap();
    let only = |c: WriteCondition| PutOptions {
        condition: Some(c),
        ..PutOptions::default()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let big = bytes(&mut rng, 200_000);
    let first = store
        .put_object(
            "bkt",
            "k",
            body_from(big.clone()),
            only(WriteCondition::Absent),
        )
        .await
        .unwrap();
    let chunks = store.manager().keys(b"D").await.unwrap().len();
    assert!(chunks > 0);
    // Refused writes leave the object and write no lasting chunks.
    let refused = store
        .put_object(
            "bkt",
            "k",
            body_from(vec![1u8; 150_000]),
            only(WriteCondition::Absent),
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::PreconditionFailed(_))),
        "{refused:?}"
    );
    let stale = store
        .put_object(
            "bkt",
            "k",
            body_from("x"),
            only(WriteCondition::ETag(hex_md5(b"other"))),
        )
        .await;
    assert!(
        matches!(stale, Err(StoreError::PreconditionFailed(_))),
        "{stale:?}"
    );
    let missing = store
        .put_object(
            "bkt",
            "nope",
            body_from("x"),
            only(WriteCondition::ETag(first.etag.clone())),
        )
        .await;
    assert!(
        matches!(missing, Err(StoreError::NoSuchKey { .. })),
        "{missing:?}"
    );
    assert!(store.head_object("bkt", "nope").await.is_err());
    assert_eq!(get(&store, "bkt", "k").await.unwrap(), big);
    // A matching ETag (quoted, as HTTP gives it) replaces the object.
    let second = store
        .put_object(
            "bkt",
            "k",
            body_from("second"),
            only(WriteCondition::ETag(format!("\"{}\"", first.etag))),
        )
        .await
        .unwrap();
    assert_eq!(get(&store, "bkt", "k").await.unwrap(), b"second");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(store.manager().keys(b"D").await.unwrap().len(), 0);

    // Racing creates of one key: exactly one wins.
    let racers: Vec<_> = (0..8u8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .put_object(
                        "bkt",
                        "race",
                        body_from(vec![i; 70_000]),
                        only(WriteCondition::Absent),
                    )
                    .await
            })
        })
        .collect();
    let mut won = Vec::new();
    for (i, r) in racers.into_iter().enumerate() {
        match r.await.unwrap() {
            Ok(_) => won.push(i as u8),
            Err(StoreError::PreconditionFailed(_)) => {}
            Err(e) => panic!("racer {i}: {e}"),
        }
    }
    assert_eq!(won.len(), 1, "winners {won:?}");
    assert_eq!(
        get(&store, "bkt", "race").await.unwrap(),
        vec![won[0]; 70_000]
    );

    // Conditional deletes.
    let wrong = WriteCondition::ETag(first.etag.clone());
    assert!(matches!(
        store.delete_object_if("bkt", "k", Some(&wrong)).await,
        Err(StoreError::PreconditionFailed(_))
    ));
    assert_eq!(get(&store, "bkt", "k").await.unwrap(), b"second");
    let right = WriteCondition::ETag(second.etag.clone());
    assert!(
        store
            .delete_object_if("bkt", "k", Some(&right))
            .await
            .unwrap()
            .existed
    );
    assert!(
        !store
            .delete_object_if("bkt", "k", Some(&right))
            .await
            .unwrap()
            .existed
    );

    // A completion refused by its condition leaves the upload to complete later.
    let id = store
        .create_multipart("bkt", "race", PutOptions::default())
        .await
        .unwrap();
    let part = store
        .upload_part(
            "bkt",
            "race",
            &id,
            1,
            body_from("tail"),
            PartOptions::default(),
        )
        .await
        .unwrap();
    let parts = [(1, part.etag)];
    let refused = store
        .complete_multipart(
            "bkt",
            "race",
            &id,
            &parts,
            BTreeMap::new(),
            Some(&WriteCondition::Absent),
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::PreconditionFailed(_))),
        "{refused:?}"
    );
    assert_eq!(store.list_parts("bkt", "race", &id).unwrap().len(), 1);
    let current = WriteCondition::ETag(store.head_object("bkt", "race").await.unwrap().etag);
    store
        .complete_multipart("bkt", "race", &id, &parts, BTreeMap::new(), Some(&current))
        .await
        .unwrap();
    assert_eq!(get(&store, "bkt", "race").await.unwrap(), b"tail");
}

#[tokio::test]
async fn checksums_known_at_the_end_are_stored_with_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(DeviceKind::Mem, dir.path(), false))
        .await
        .unwrap();
    store.create_bucket("bkt").await.unwrap();
    // The value exists only once the body has been read: the body's last piece sets it.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None::<usize>));
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let data = bytes(&mut rng, 300_000);
    let len = data.len();
    let marked = seen.clone();
    let body: Body = Box::pin(futures_util::StreamExt::chain(
        pieces(&data, &mut rng),
        futures_util::stream::poll_fn(move |_| {
            *marked.lock().unwrap() = Some(len);
            std::task::Poll::Ready(None)
        }),
    ));
    let read = seen.clone();
    let options = PutOptions {
        checksums: BTreeMap::from([("SHA1".to_string(), "early".to_string())]),
        checksums_at_end: Some(ChecksumsAtEnd::new(move || {
            let n = read
                .lock()
                .unwrap()
                .expect("asked only after the body ended");
            BTreeMap::from([("CRC32".to_string(), format!("len{n}"))])
        })),
        ..PutOptions::default()
    };
    let info = store.put_object("bkt", "k", body, options).await.unwrap();
    let want = BTreeMap::from([
        ("CRC32".to_string(), format!("len{len}")),
        ("SHA1".to_string(), "early".to_string()),
    ]);
    assert_eq!(info.checksums, want);
    assert_eq!(store.head_object("bkt", "k").await.unwrap().checksums, want);
}

fn md5_of(data: &[u8]) -> [u8; 16] {
    use md5::{Digest, Md5};
    Md5::digest(data).into()
}

#[tokio::test]
async fn multipart_uploads_complete_once_abort_and_check_their_parts() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(DeviceKind::Mem, dir.path(), true))
        .await
        .unwrap();
    store.create_bucket("bkt").await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let id = store
        .create_multipart("bkt", "big", PutOptions::default())
        .await
        .unwrap();
    let parts: Vec<Vec<u8>> = [20_000, 100_000, 16_384, 7]
        .iter()
        .map(|&n| bytes(&mut rng, n))
        .collect();
    let mut etags = Vec::new();
    // Upload out of order, and part 2 twice (the second replaces the first).
    for i in [3, 1, 0, 2, 1] {
        let p = store
            .upload_part(
                "bkt",
                "big",
                &id,
                i as u32 + 1,
                body_from(parts[i].clone()),
                PartOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(p.etag, hex_md5(&parts[i]));
    }
    for (i, p) in parts.iter().enumerate() {
        etags.push((i as u32 + 1, format!("\"{}\"", hex_md5(p))));
    }
    let listed = store.list_parts("bkt", "big", &id).unwrap();
    assert_eq!(
        listed.iter().map(|p| p.number).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    let reversed: Vec<_> = etags.iter().rev().cloned().collect();
    assert!(matches!(
        store
            .complete_multipart("bkt", "big", &id, &reversed, BTreeMap::new(), None)
            .await,
        Err(StoreError::InvalidPartOrder)
    ));
    let mut wrong = etags.clone();
    wrong[1].1 = hex_md5(b"other");
    assert!(matches!(
        store
            .complete_multipart("bkt", "big", &id, &wrong, BTreeMap::new(), None)
            .await,
        Err(StoreError::InvalidPart { part: 2, .. })
    ));
    // An ETag that is no MD5: an invalid part of a known upload; of an unknown one, no upload.
    let not_md5 = [(1, "1234".to_string())];
    assert!(matches!(
        store
            .complete_multipart("bkt", "big", &id, &not_md5, BTreeMap::new(), None)
            .await,
        Err(StoreError::InvalidPart { part: 1, .. })
    ));
    assert!(matches!(
        store
            .complete_multipart("bkt", "big", "abc1234def", &not_md5, BTreeMap::new(), None)
            .await,
        Err(StoreError::NoSuchUpload(_))
    ));
    // Part 4 (7 bytes) may only be last; skipping part 3 leaves the 16 KiB minimum met.
    let info = store
        .complete_multipart("bkt", "big", &id, &etags, BTreeMap::new(), None)
        .await
        .unwrap();
    assert_eq!(info.parts, 4);
    assert!(info.etag.ends_with("-4"));
    let again = store
        .complete_multipart("bkt", "big", &id, &etags, BTreeMap::new(), None)
        .await
        .unwrap();
    assert_eq!(
        again.etag, info.etag,
        "a repeated completion returns the object"
    );
    assert_eq!(get(&store, "bkt", "big").await.unwrap(), parts.concat());
    assert!(store.list_uploads("bkt", "").unwrap().is_empty());
    // A too-small middle part, then an abort.
    let id2 = store
        .create_multipart("bkt", "small", PutOptions::default())
        .await
        .unwrap();
    for (n, len) in [(1u32, 10usize), (2, 10)] {
        store
            .upload_part(
                "bkt",
                "small",
                &id2,
                n,
                body_from(vec![n as u8; len]),
                PartOptions::default(),
            )
            .await
            .unwrap();
    }
    let e = hex_md5(&[1u8; 10]);
    let e2 = hex_md5(&[2u8; 10]);
    assert!(matches!(
        store
            .complete_multipart(
                "bkt",
                "small",
                &id2,
                &[(1, e), (2, e2)],
                BTreeMap::new(),
                None
            )
            .await,
        Err(StoreError::EntityTooSmall { part: 1, .. })
    ));
    assert_eq!(store.list_uploads("bkt", "sm").unwrap().len(), 1);
    store.abort_multipart("bkt", "small", &id2).await.unwrap();
    assert!(matches!(
        store.list_parts("bkt", "small", &id2),
        Err(StoreError::NoSuchUpload(_))
    ));
    assert!(matches!(
        store.get_object("bkt", "small", None).await,
        Err(StoreError::NoSuchKey { .. })
    ));
    store.shutdown().await.unwrap();
}

/// Random operations against a `BTreeMap`, on `devices` file devices (groups of six: N > n from
/// 12), reopening the store now and then (cleanly, and by dropping it without a shutdown).
async fn model_run(seed: u64, separation: bool, devices: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(DeviceKind::File, dir.path(), separation);
    cfg.devices.count = devices;
    let mut store = Store::open(cfg.clone()).await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    store.create_bucket("model").await.unwrap();
    let names = ["a", "a/b", "a/b/c", "a/bc", "b/1", "b/2", "c", "d/e/f"];
    let mut off_window_reads = 0;
    for step in 0..300 {
        let key = names[rng.gen_range(0..names.len())].to_string();
        match rng.gen_range(0..10) {
            0..=3 => {
                let len = [0, 10, 4096, 5000, 70_000, 200_000][rng.gen_range(0..6)];
                let data = bytes(&mut rng, len);
                store
                    .put_object(
                        "model",
                        &key,
                        pieces(&data, &mut rng),
                        PutOptions::default(),
                    )
                    .await
                    .unwrap();
                model.insert(key, data);
            }
            4..=5 => match model.get(&key) {
                Some(want) => assert_eq!(
                    &get(&store, "model", &key).await.unwrap(),
                    want,
                    "seed {seed} step {step}"
                ),
                None => assert!(matches!(
                    get(&store, "model", &key).await,
                    Err(StoreError::NoSuchKey { .. })
                )),
            },
            6 => {
                let existed = store.delete_object("model", &key).await.unwrap();
                assert_eq!(existed, model.remove(&key).is_some());
            }
            7..=8 => {
                let prefix = ["", "a", "a/", "a/b", "b/"][rng.gen_range(0..5)];
                let delim = rng.gen_bool(0.5).then(|| "/".to_string());
                let mut got = Vec::new();
                let mut after = None;
                loop {
                    let page = store
                        .list_objects(
                            "model",
                            &ListQuery {
                                prefix: prefix.into(),
                                delimiter: delim.clone(),
                                after,
                                max_keys: 2,
                            },
                        )
                        .unwrap();
                    got.extend(page.objects.iter().map(|o| o.key.clone()));
                    got.extend(page.prefixes.iter().cloned());
                    if !page.truncated {
                        break;
                    }
                    after = page.next_after;
                }
                got.sort();
                let mut want: Vec<String> = model
                    .keys()
                    .filter(|k| k.starts_with(prefix))
                    .map(|k| match &delim {
                        Some(d) => match k[prefix.len()..].find(d.as_str()) {
                            Some(i) => k[..prefix.len() + i + 1].to_string(),
                            None => k.clone(),
                        },
                        None => k.clone(),
                    })
                    .collect();
                want.sort();
                want.dedup();
                assert_eq!(got, want, "seed {seed} step {step} prefix {prefix:?}");
            }
            _ => {
                // Separation's flushers outlive a dropped store: only shut it down.
                off_window_reads += reads_off_window(&store).await;
                if separation || rng.gen_bool(0.5) {
                    store.shutdown().await.unwrap();
                    drop(store);
                } else {
                    // No shutdown: what was acknowledged must be there anyway.
                    let manager = store.manager().clone();
                    drop(store);
                    drop(manager);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                store = Store::open(cfg.clone()).await.unwrap();
            }
        }
    }
    for (k, v) in &model {
        assert_eq!(
            &get(&store, "model", k).await.unwrap(),
            v,
            "seed {seed} final {k}"
        );
    }
    let page = store
        .list_objects(
            "model",
            &ListQuery {
                max_keys: 1000,
                ..ListQuery::default()
            },
        )
        .unwrap();
    assert_eq!(page.objects.len(), model.len());
    off_window_reads += reads_off_window(&store).await;
    if separation {
        let w = store.status().await.window.unwrap();
        // Adaptive by default, from the configured 3 up to what leaves writers for the 3
        // journal copies: 3 colours of one device, 2 colours of two (the range shown is the
        // schedule's, 3 to 4, which also widens past a failed device).
        let widest = if devices == 12 { 4 } else { 3 };
        assert_eq!((w.colours, w.size_range), (6, (3, 4)), "{w:?}");
        assert!((3..=widest).contains(&w.size), "{w:?}");
    }
    // Every client read (records rep3, packed and split bodies, chunks after a reopen) is
    // served by readers only; start-up loads and deferred deletes count apart.
    assert_eq!(
        off_window_reads, 0,
        "seed {seed}, {devices} devices: client reads reached writers"
    );
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_and_buffers_follow_the_measured_load() {
    let dir = tempfile::tempdir().unwrap();
    // Twelve devices: two per colour, so two writer colours hold the 3 journal copies and
    // the window may reach 4 (with six devices it stays at 3).
    let mut c = config(DeviceKind::Mem, dir.path(), true);
    c.devices.count = 12;
    let store = Store::open(c).await.unwrap();
    let w = store.status().await.window.unwrap();
    assert!(w.adaptive);
    assert_eq!((w.size, w.size_range), (3, (3, 4)), "{w:?}");
    // Nothing measured yet: the window keeps its minimum and buffers the memory setting.
    assert_eq!(w.device_write_bytes_per_s, None);
    assert_eq!(w.buffer_bytes_max, 256 << 20);
    store.create_bucket("window").await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // 24 MiB of split3+3 objects: each device's backlog flushes in passes above 1 MiB.
    for i in 0..24 {
        let body = bytes(&mut rng, 1 << 20);
        store
            .put_object(
                "window",
                &format!("o{i}"),
                body_from(body),
                PutOptions::default(),
            )
            .await
            .unwrap();
    }
    // The next frames measure the flushers' rate; with the writes over, reads come first and
    // the window widens to its most.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let w = loop {
        let w = store.status().await.window.unwrap();
        if w.size == 4 || std::time::Instant::now() > deadline {
            break w;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(w.size, 4, "{w:?}");
    let rate = w.device_write_bytes_per_s.expect("a device rate measured");
    assert!(rate > 0);
    // Two writer colours of six, two devices each, at the measured rate.
    let bound = w.write_bound_bytes_per_s.unwrap();
    assert!(bound.abs_diff(4 * rate) <= 4, "{w:?}");
    // The rule's ask is shown; each buffer's bound stays within the memory setting.
    assert!(w.buffer_bytes_needed.unwrap() > 0);
    assert!(
        (32 << 20..=256 << 20).contains(&w.buffer_bytes_max),
        "{w:?}"
    );
    store.shutdown().await.unwrap();
}

/// Read requests that reached a device outside the read window since the store opened, as
/// its status reports them.
async fn reads_off_window(store: &Store) -> u64 {
    store
        .status()
        .await
        .window
        .map_or(0, |w| w.off_window_reads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_match_a_model_across_reopens() {
    for seed in 0..2 {
        model_run(seed, false, 6).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_match_a_model_with_separation() {
    model_run(10, true, 6).await;
    model_run(11, true, 12).await;
}

#[tokio::test]
async fn a_data_folder_is_used_by_one_store_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(DeviceKind::File, dir.path(), false);
    let store = Store::open(cfg.clone()).await.unwrap();
    let e = Store::open(cfg.clone()).await.unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
    store.shutdown().await.unwrap();
    drop(store);
    let mut other = cfg.clone();
    other.devices.count = 12;
    let e = Store::open(other).await.unwrap_err();
    assert!(e.to_string().contains("another layout"), "{e}");
}

/// A data folder made before pieces were spread (its layout file is format 1: copies on
/// consecutive colours) keeps that order when a newer railstore opens it, so its objects are
/// found where they are; a new folder spreads them (format 3).
#[tokio::test]
async fn a_folder_made_before_spreading_keeps_its_piece_order() {
    use railstore_placement::{Layout, PieceOrder};
    let dir = tempfile::tempdir().unwrap();
    let mut old = config(DeviceKind::File, dir.path(), false);
    old.manager.piece_order = PieceOrder::Consecutive;
    let store = Store::open(old.clone()).await.unwrap();
    store.create_bucket("old-order").await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // Records and bodies of every mechanism of the default policy (rep3, pack3+3, split3+3).
    let objects: Vec<(String, Vec<u8>)> = [10usize, 3000, 20_000, 200_000]
        .iter()
        .map(|&len| (format!("o{len}"), bytes(&mut rng, len)))
        .collect();
    for (k, v) in &objects {
        store
            .put_object(
                "old-order",
                k,
                body_from(Bytes::from(v.clone())),
                PutOptions::default(),
            )
            .await
            .unwrap();
    }
    store.shutdown().await.unwrap();
    drop(store);
    let text = std::fs::read_to_string(dir.path().join("layout")).unwrap();
    assert!(text.starts_with("railstore-layout 1\n"), "{text}");

    // Opened with today's defaults: still consecutive, every object read without repairs.
    let store = Store::open(config(DeviceKind::File, dir.path(), false))
        .await
        .unwrap();
    assert_eq!(
        store.manager().layout().piece_order(),
        PieceOrder::Consecutive
    );
    for (k, v) in &objects {
        assert_eq!(&get(&store, "old-order", k).await.unwrap(), v, "{k}");
    }
    let repairs = store
        .manager()
        .devices()
        .counters
        .repairs
        .load(Ordering::Relaxed);
    assert_eq!(repairs, 0, "pieces were looked for in the wrong places");
    store.shutdown().await.unwrap();
    drop(store);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("layout")).unwrap(),
        text
    );

    let fresh = tempfile::tempdir().unwrap();
    let store = Store::open(config(DeviceKind::File, fresh.path(), false))
        .await
        .unwrap();
    store.shutdown().await.unwrap();
    let text = std::fs::read_to_string(fresh.path().join("layout")).unwrap();
    assert_eq!(
        Layout::decode(&text).unwrap().piece_order(),
        PieceOrder::Spread
    );
}

/// A data folder that holds an array but lost its layout file is refused with the reason: the
/// order of its pieces cannot be told, and a wrong guess would make reads take pieces for
/// misplaced ones.
#[tokio::test]
async fn an_array_without_its_layout_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(DeviceKind::File, dir.path(), false);
    let store = Store::open(cfg.clone()).await.unwrap();
    store.shutdown().await.unwrap();
    drop(store);
    std::fs::remove_file(dir.path().join("layout")).unwrap();
    let e = Store::open(cfg).await.unwrap_err();
    assert!(e.to_string().contains("not its layout file"), "{e}");
    assert!(!dir.path().join("layout").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_layer_accounts_for_the_memory_its_objects_take() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(DeviceKind::File, dir.path(), false))
        .await
        .unwrap();
    store.create_bucket("memory").await.unwrap();
    let empty = store.memory_use();
    let key = |i: usize| format!("a-rather-long-key-name-to-count/{i:06}");
    for i in 0..200 {
        store
            .put_object(
                "memory",
                &key(i),
                body_from(vec![7u8; 1000]),
                PutOptions::default(),
            )
            .await
            .unwrap();
    }
    let full = store.memory_use();
    let per = |a: u64, b: u64| (b - a) as f64 / 200.0;
    // The store's entry holds the 38-byte key twice (map and metadata), the ETag and the
    // mechanism's name, in blocks of at least 32 bytes, and the entry itself.
    let index = per(empty.store_index_bytes, full.store_index_bytes);
    assert!(
        (200.0..2000.0).contains(&index),
        "{index} B per object: {full:?}"
    );
    // Each rep3 object's record is a key in three device indexes (key and location).
    let devices = per(
        empty.device_bytes.iter().sum(),
        full.device_bytes.iter().sum(),
    );
    assert!(
        (3.0 * 64.0..3.0 * 400.0).contains(&devices),
        "{devices}: {full:?}"
    );
    assert!(full.manager_bytes > empty.manager_bytes, "{full:?}");
    for i in 0..200 {
        store.delete_object("memory", &key(i)).await.unwrap();
    }
    let after = store.memory_use();
    assert_eq!(
        after.store_index_bytes, empty.store_index_bytes,
        "{after:?}"
    );
    store.shutdown().await.unwrap();
}
