use crate::common::*;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, ChecksumType, CompletedMultipartUpload, CompletedPart,
    ObjectAttributes,
};
use s3s::crypto::Checksum;

const MIB: usize = 1 << 20;

fn multipart_etag(parts: &[&[u8]]) -> String {
    let mut md5s = Vec::new();
    for p in parts {
        md5s.extend_from_slice(&s3s::crypto::Md5::checksum(p));
    }
    format!("\"{}-{}\"", md5_hex(&md5s), parts.len())
}

type SdkFailure<E> = aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>;

/// Sends a completion listing `parts` that must be refused; returns the error.
async fn refused_completion(
    s: &TestServer,
    b: &str,
    key: &str,
    id: &str,
    parts: &[(i32, String)],
) -> SdkFailure<aws_sdk_s3::operation::complete_multipart_upload::CompleteMultipartUploadError> {
    s.complete_request(b, key)
        .upload_id(id)
        .multipart_upload(completed(parts))
        .send()
        .await
        .unwrap_err()
}

/// Uploads a part that must be refused; returns the error.
async fn refused_part(
    s: &TestServer,
    b: &str,
    key: &str,
    id: &str,
    n: i32,
    body: Vec<u8>,
) -> SdkFailure<aws_sdk_s3::operation::upload_part::UploadPartError> {
    s.upload_part_request(b, key)
        .upload_id(id)
        .part_number(n)
        .body(body.into())
        .send()
        .await
        .unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_upload_complete_and_repeat() {
    let s = start().await;
    let b = s.bucket("mpu").await;
    let c = &s.client;
    let bodies: Vec<Vec<u8>> = vec![
        data(5 * MIB, 1),
        data(5 * MIB, 2),
        data(5 * MIB, 3),
        data(100 << 10, 4),
    ];
    let up = s
        .create_upload_request(&b, "big")
        .content_type("video/x-test")
        .metadata("kind", "multipart")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_string();
    assert_eq!(up.key(), Some("big"));
    // Parts may come in any order, and a part may be replaced.
    let mut parts = Vec::new();
    for n in [2usize, 1, 4, 3] {
        let out = s
            .upload_part_request(&b, "big")
            .upload_id(&id)
            .part_number(n as i32)
            .body(bodies[n - 1].clone().into())
            .send()
            .await
            .unwrap();
        assert_eq!(
            out.e_tag(),
            Some(format!("\"{}\"", md5_hex(&bodies[n - 1])).as_str())
        );
        parts.push((n as i32, out.e_tag().unwrap().to_string()));
    }
    s.upload_part_request(&b, "big")
        .upload_id(&id)
        .part_number(3)
        .body(bodies[2].clone().into())
        .send()
        .await
        .unwrap();
    parts.sort();

    let uploads = c.list_multipart_uploads().bucket(&b).send().await.unwrap();
    let ids: Vec<_> = uploads
        .uploads()
        .iter()
        .map(|u| u.upload_id().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    assert_eq!(uploads.uploads()[0].key(), Some("big"));

    let listed = c
        .list_parts()
        .bucket(&b)
        .key("big")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    let sizes: Vec<_> = listed
        .parts()
        .iter()
        .map(|p| (p.part_number(), p.size()))
        .collect();
    assert_eq!(
        sizes,
        [
            (Some(1), Some(5 * MIB as i64)),
            (Some(2), Some(5 * MIB as i64)),
            (Some(3), Some(5 * MIB as i64)),
            (Some(4), Some(100 << 10))
        ]
    );
    let page = c
        .list_parts()
        .bucket(&b)
        .key("big")
        .upload_id(&id)
        .max_parts(3)
        .send()
        .await
        .unwrap();
    assert_eq!(page.parts().len(), 3);
    assert_eq!(page.is_truncated(), Some(true));
    let rest = c
        .list_parts()
        .bucket(&b)
        .key("big")
        .upload_id(&id)
        .part_number_marker(page.next_part_number_marker().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(rest.parts().len(), 1);
    assert_eq!(rest.parts()[0].part_number(), Some(4));

    let want_etag = multipart_etag(&bodies.iter().map(Vec::as_slice).collect::<Vec<_>>());
    // The first completion makes the object; completing again answers the same object.
    for _ in 0..2 {
        let done = s
            .complete_request(&b, "big")
            .upload_id(&id)
            .multipart_upload(completed(&parts))
            .send()
            .await
            .unwrap();
        assert_eq!(done.e_tag(), Some(want_etag.as_str()));
    }

    let whole: Vec<u8> = bodies.concat();
    assert!(s.get(&b, "big").await == whole);
    let head = s.head_request(&b, "big").send().await.unwrap();
    assert_eq!(head.content_length(), Some(whole.len() as i64));
    assert_eq!(head.e_tag(), Some(want_etag.as_str()));
    assert_eq!(head.content_type(), Some("video/x-test"));
    assert_eq!(
        head.metadata().unwrap().get("kind").map(String::as_str),
        Some("multipart")
    );
    let out = s
        .get_request(&b, "big")
        .range(format!("bytes={}-{}", 5 * MIB - 10, 5 * MIB + 9))
        .send()
        .await
        .unwrap();
    let got = out.body.collect().await.unwrap().into_bytes();
    assert!(got[..] == whole[5 * MIB - 10..5 * MIB + 10]);
    // One part by its number: its bytes, the object's ETag and part count.
    for n in [2usize, 4] {
        let start: usize = bodies[..n - 1].iter().map(Vec::len).sum();
        let out = s
            .get_request(&b, "big")
            .part_number(n as i32)
            .send()
            .await
            .unwrap();
        assert_eq!(out.parts_count(), Some(4));
        assert_eq!(out.e_tag(), Some(want_etag.as_str()));
        assert_eq!(out.content_length(), Some(bodies[n - 1].len() as i64));
        let got = out.body.collect().await.unwrap().into_bytes();
        assert!(
            got[..] == whole[start..start + bodies[n - 1].len()],
            "part {n}"
        );
        let head = s.head_request(&b, "big").part_number(n as i32).send().await;
        assert_eq!(
            head.unwrap().content_length(),
            Some(bodies[n - 1].len() as i64)
        );
    }
    let e = s
        .get_request(&b, "big")
        .part_number(5)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidPart"));
    let single = s.put(&b, "single", b"one part").await;
    let out = s.get_request(&b, "single").part_number(1).send().await;
    assert_eq!(out.unwrap().e_tag(), Some(single.as_str()));
    let e = s
        .get_request(&b, "single")
        .part_number(2)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidPart"));
    assert!(c
        .list_multipart_uploads()
        .bucket(&b)
        .send()
        .await
        .unwrap()
        .uploads()
        .is_empty());
    let e = c
        .list_parts()
        .bucket(&b)
        .key("big")
        .upload_id(&id)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchUpload"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_errors() {
    let s = start().await;
    let b = s.bucket("mpu-errors").await;
    let c = &s.client;
    let create = |key: &'static str| {
        let c = c.clone();
        let b = b.clone();
        async move {
            c.create_multipart_upload()
                .bucket(&b)
                .key(key)
                .send()
                .await
                .unwrap()
                .upload_id()
                .unwrap()
                .to_string()
        }
    };
    let part = |key: &'static str, id: String, n: i32, body: Vec<u8>| {
        let c = c.clone();
        let b = b.clone();
        async move {
            c.upload_part()
                .bucket(&b)
                .key(key)
                .upload_id(id)
                .part_number(n)
                .body(body.into())
                .send()
                .await
                .unwrap()
                .e_tag()
                .unwrap()
                .to_string()
        }
    };

    // Abort: the upload and its parts are gone.
    let id = create("aborted").await;
    part("aborted", id.clone(), 1, data(1000, 1)).await;
    c.abort_multipart_upload()
        .bucket(&b)
        .key("aborted")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    let e = refused_part(&s, &b, "aborted", &id, 2, data(10, 1)).await;
    assert_eq!(code(&e).as_deref(), Some("NoSuchUpload"));
    assert_eq!(status(&e), Some(404));
    let e = refused_completion(
        &s,
        &b,
        "aborted",
        &id,
        &[(1, "\"00000000000000000000000000000000\"".into())],
    )
    .await;
    assert_eq!(code(&e).as_deref(), Some("NoSuchUpload"));
    let e = s.head_request(&b, "aborted").send().await.unwrap_err();
    assert_eq!(status(&e), Some(404));

    // Parts out of order; a small part that is not the last; a wrong ETag.
    let id = create("bad").await;
    let e1 = part("bad", id.clone(), 1, data(MIB, 1)).await;
    let e2 = part("bad", id.clone(), 2, data(MIB, 2)).await;
    let e = refused_completion(&s, &b, "bad", &id, &[(2, e2.clone()), (1, e1.clone())]).await;
    assert_eq!(code(&e).as_deref(), Some("InvalidPartOrder"));
    let e = refused_completion(&s, &b, "bad", &id, &[(1, e1.clone()), (2, e2.clone())]).await;
    assert_eq!(code(&e).as_deref(), Some("EntityTooSmall"));
    assert_eq!(status(&e), Some(400));
    let e = refused_completion(&s, &b, "bad", &id, &[(1, e2.clone())]).await;
    assert_eq!(code(&e).as_deref(), Some("InvalidPart"));
    let e = refused_completion(&s, &b, "bad", &id, &[(3, e2.clone())]).await;
    assert_eq!(code(&e).as_deref(), Some("InvalidPart"));
    // Nothing of that changed anything: a single small part (the last) completes.
    s.complete_request(&b, "bad")
        .upload_id(&id)
        .multipart_upload(completed(&[(2, e2)]))
        .send()
        .await
        .unwrap();
    assert_eq!(s.get(&b, "bad").await, data(MIB, 2));

    // Part numbers are 1 to 10000.
    let id = create("numbers").await;
    for n in [0, 10_001] {
        let e = refused_part(&s, &b, "numbers", &id, n, data(10, 1)).await;
        assert_eq!(code(&e).as_deref(), Some("InvalidArgument"), "part {n}");
    }
    // Another key's upload id is no upload of this key.
    let e = refused_part(&s, &b, "other-key", &id, 1, data(10, 1)).await;
    assert_eq!(code(&e).as_deref(), Some("NoSuchUpload"));

    // Listing uploads by prefix and delimiter, and page by page (two uploads of one key).
    let one_a = create("dir/one").await;
    let one_b = create("dir/one").await;
    let two = create("dir/two").await;
    let out = c
        .list_multipart_uploads()
        .bucket(&b)
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = out.uploads().iter().map(|u| u.key().unwrap()).collect();
    assert_eq!(keys, ["numbers"]);
    let prefixes: Vec<_> = out
        .common_prefixes()
        .iter()
        .map(|p| p.prefix().unwrap())
        .collect();
    assert_eq!(prefixes, ["dir/"]);
    let mut seen = Vec::new();
    let (mut km, mut im): (Option<String>, Option<String>) = (None, None);
    loop {
        let out = c
            .list_multipart_uploads()
            .bucket(&b)
            .prefix("dir/")
            .max_uploads(1)
            .set_key_marker(km.clone())
            .set_upload_id_marker(im.clone())
            .send()
            .await
            .unwrap();
        assert!(out.uploads().len() <= 1);
        seen.extend(
            out.uploads()
                .iter()
                .map(|u| u.upload_id().unwrap().to_string()),
        );
        if out.is_truncated() != Some(true) {
            break;
        }
        km = out.next_key_marker().map(str::to_string);
        im = out.next_upload_id_marker().map(str::to_string);
    }
    let mut first_two = [one_a, one_b];
    // Uploads of one key come in the order they started (same instant: either order).
    if seen[..2] != first_two[..] {
        first_two.reverse();
    }
    assert_eq!(seen, [first_two[0].clone(), first_two[1].clone(), two]);
    s.stop().await;
}

fn crc<C: Checksum>(d: &[u8]) -> Vec<u8> {
    C::checksum(d).as_ref().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_checksums() {
    let s = start().await;
    let b = s.bucket("mpu-sums").await;
    let bodies = [data(5 * MIB, 11), data(5 * MIB, 12), data(1000, 13)];
    let whole = bodies.concat();
    // (algorithm, type asked, type expected, part digest, composite?)
    type Digest = fn(&[u8]) -> Vec<u8>;
    let cases: [(
        ChecksumAlgorithm,
        Option<ChecksumType>,
        ChecksumType,
        Digest,
    ); 4] = [
        (
            ChecksumAlgorithm::Crc32,
            None,
            ChecksumType::Composite,
            crc::<s3s::crypto::Crc32>,
        ),
        (
            ChecksumAlgorithm::Sha256,
            None,
            ChecksumType::Composite,
            crc::<s3s::crypto::Sha256>,
        ),
        (
            ChecksumAlgorithm::Crc32C,
            Some(ChecksumType::FullObject),
            ChecksumType::FullObject,
            crc::<s3s::crypto::Crc32c>,
        ),
        (
            ChecksumAlgorithm::Crc64Nvme,
            None,
            ChecksumType::FullObject,
            crc::<s3s::crypto::Crc64Nvme>,
        ),
    ];
    for (i, (alg, kind, want_kind, digest)) in cases.into_iter().enumerate() {
        let key = format!("sums-{i}");
        let id = s
            .create_upload_request(&b, &key)
            .checksum_algorithm(alg.clone())
            .set_checksum_type(kind)
            .send()
            .await
            .unwrap()
            .upload_id()
            .unwrap()
            .to_string();
        let mut parts = Vec::new();
        for (n, body) in bodies.iter().enumerate() {
            let out = s
                .upload_part_request(&b, &key)
                .upload_id(&id)
                .part_number(n as i32 + 1)
                .checksum_algorithm(alg.clone())
                .body(body.clone().into())
                .send()
                .await
                .unwrap();
            let value = match alg {
                ChecksumAlgorithm::Crc32 => out.checksum_crc32(),
                ChecksumAlgorithm::Sha256 => out.checksum_sha256(),
                ChecksumAlgorithm::Crc32C => out.checksum_crc32_c(),
                _ => out.checksum_crc64_nvme(),
            }
            .expect("the part's checksum")
            .to_string();
            assert_eq!(value, b64(&digest(body)), "{alg:?} part {n}");
            let p = CompletedPart::builder()
                .part_number(n as i32 + 1)
                .e_tag(out.e_tag().unwrap());
            let p = match alg {
                ChecksumAlgorithm::Crc32 => p.checksum_crc32(value),
                ChecksumAlgorithm::Sha256 => p.checksum_sha256(value),
                ChecksumAlgorithm::Crc32C => p.checksum_crc32_c(value),
                _ => p.checksum_crc64_nvme(value),
            };
            parts.push(p.build());
        }
        let done = s
            .complete_request(&b, &key)
            .upload_id(&id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .unwrap();
        let want = if want_kind == ChecksumType::Composite {
            let raw: Vec<u8> = bodies.iter().flat_map(|p| digest(p)).collect();
            format!("{}-{}", b64(&digest(&raw)), bodies.len())
        } else {
            b64(&digest(&whole))
        };
        let got = s
            .get_request(&b, &key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        let (done_value, got_value) = match alg {
            ChecksumAlgorithm::Crc32 => (done.checksum_crc32(), got.checksum_crc32()),
            ChecksumAlgorithm::Sha256 => (done.checksum_sha256(), got.checksum_sha256()),
            ChecksumAlgorithm::Crc32C => (done.checksum_crc32_c(), got.checksum_crc32_c()),
            _ => (done.checksum_crc64_nvme(), got.checksum_crc64_nvme()),
        };
        assert_eq!(done_value, Some(want.as_str()), "{alg:?}");
        assert_eq!(got_value, Some(want.as_str()), "{alg:?}");
        assert_eq!(got.checksum_type(), Some(&want_kind), "{alg:?}");
        let body = got.body.collect().await.unwrap().into_bytes();
        assert!(body[..] == whole[..]);
        // A part read by number answers the part's own checksum.
        let part = s
            .get_request(&b, &key)
            .part_number(2)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        let part_value = match alg {
            ChecksumAlgorithm::Crc32 => part.checksum_crc32(),
            ChecksumAlgorithm::Sha256 => part.checksum_sha256(),
            ChecksumAlgorithm::Crc32C => part.checksum_crc32_c(),
            _ => part.checksum_crc64_nvme(),
        };
        assert_eq!(
            part_value,
            Some(b64(&digest(&bodies[1])).as_str()),
            "{alg:?}"
        );
        assert_eq!(part.checksum_type(), Some(&want_kind));
        // GetObjectAttributes: the ETag unquoted (as S3), the checksum, the parts.
        let attrs = s
            .client
            .get_object_attributes()
            .bucket(&b)
            .key(&key)
            .object_attributes(ObjectAttributes::Etag)
            .object_attributes(ObjectAttributes::Checksum)
            .object_attributes(ObjectAttributes::ObjectParts)
            .object_attributes(ObjectAttributes::ObjectSize)
            .send()
            .await
            .unwrap();
        assert_eq!(attrs.e_tag(), done.e_tag().map(|e| e.trim_matches('"')));
        assert_eq!(attrs.object_size(), Some(whole.len() as i64));
        let c = attrs.checksum().unwrap();
        let value = match alg {
            ChecksumAlgorithm::Crc32 => c.checksum_crc32(),
            ChecksumAlgorithm::Sha256 => c.checksum_sha256(),
            ChecksumAlgorithm::Crc32C => c.checksum_crc32_c(),
            _ => c.checksum_crc64_nvme(),
        };
        assert_eq!(value, Some(want.as_str()));
        let parts = attrs.object_parts().unwrap();
        assert_eq!(parts.total_parts_count(), Some(3));
        let sizes: Vec<_> = parts.parts().iter().map(|p| p.size()).collect();
        assert_eq!(
            sizes,
            [Some(5 * MIB as i64), Some(5 * MIB as i64), Some(1000)]
        );
    }
    // A stated object checksum that does not match the parts is BadDigest; nothing is made.
    let id = s
        .create_upload_request(&b, "wrong-sum")
        .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    let out = s
        .upload_part_request(&b, "wrong-sum")
        .upload_id(&id)
        .part_number(1)
        .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
        .body(data(100, 1).into())
        .send()
        .await
        .unwrap();
    let e = s
        .complete_request(&b, "wrong-sum")
        .upload_id(&id)
        .checksum_crc64_nvme(b64(&[0u8; 8]))
        .multipart_upload(completed(&[(1, out.e_tag().unwrap().to_string())]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("BadDigest"));
    let e = s.head_request(&b, "wrong-sum").send().await.unwrap_err();
    assert_eq!(status(&e), Some(404));
    // A SHA-256 full-object checksum cannot be composed.
    let e = s
        .create_upload_request(&b, "impossible")
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .checksum_type(ChecksumType::FullObject)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidRequest"));
    s.stop().await;
}

/// A part number listed twice in a row counts once, as last listed; that listing must name
/// the part stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_listed_twice_counts_as_last_listed() {
    let s = start().await;
    let b = s.bucket("twice").await;
    let id = s
        .create_upload_request(&b, "k")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let mut etags = Vec::new();
    for body in [&b"first"[..], b"second"] {
        let out = s
            .upload_part_request(&b, "k")
            .upload_id(&id)
            .part_number(1)
            .body(body.to_vec().into())
            .send()
            .await
            .unwrap();
        etags.push(out.e_tag().unwrap().to_string());
    }
    let e = s
        .complete_request(&b, "k")
        .upload_id(&id)
        .multipart_upload(completed(&[(1, etags[1].clone()), (1, etags[0].clone())]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidPart"));
    s.complete_request(&b, "k")
        .upload_id(&id)
        .multipart_upload(completed(&[(1, etags[0].clone()), (1, etags[1].clone())]))
        .send()
        .await
        .unwrap();
    assert_eq!(s.get(&b, "k").await, b"second");
    s.stop().await;
}
