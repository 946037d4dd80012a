use crate::common::*;
use aws_sdk_s3::config::RequestChecksumCalculation;
use aws_sdk_s3::primitives::{ByteStream, SdkBody};
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, ChecksumType};
use s3s::crypto::Checksum;
use std::sync::Arc;

fn value(a: &ChecksumAlgorithm, d: &[u8]) -> String {
    match a {
        ChecksumAlgorithm::Crc32 => b64(&s3s::crypto::Crc32::checksum(d)),
        ChecksumAlgorithm::Crc32C => b64(&s3s::crypto::Crc32c::checksum(d)),
        ChecksumAlgorithm::Crc64Nvme => b64(&s3s::crypto::Crc64Nvme::checksum(d)),
        ChecksumAlgorithm::Sha1 => b64(&s3s::crypto::Sha1::checksum(d)),
        ChecksumAlgorithm::Sha256 => b64(&s3s::crypto::Sha256::checksum(d)),
        _ => unreachable!(),
    }
}

async fn stored_checksums(
    s: &TestServer,
    b: &str,
    key: &str,
) -> (Vec<(String, String)>, Option<ChecksumType>) {
    let out = s
        .head_request(b, key)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    let mut v = Vec::new();
    for (name, x) in [
        ("CRC32", out.checksum_crc32()),
        ("CRC32C", out.checksum_crc32_c()),
        ("CRC64NVME", out.checksum_crc64_nvme()),
        ("SHA1", out.checksum_sha1()),
        ("SHA256", out.checksum_sha256()),
    ] {
        if let Some(x) = x {
            v.push((name.to_string(), x.to_string()));
        }
    }
    (v, out.checksum_type().cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_default_checksums_are_checked_stored_and_returned() {
    let s = start().await;
    let b = s.bucket("sums").await;
    let dir = tempfile::tempdir().unwrap();
    // In memory (x-amz-checksum-crc32 header, signed payload) and from a file (aws-chunked,
    // signed chunks, trailing checksum). The largest streams through in chunks; its trailing
    // value is stored all the same.
    for (i, len) in [0usize, 1000, 20 << 20].into_iter().enumerate() {
        let body = data(len, 50 + i as u64);
        let want = value(&ChecksumAlgorithm::Crc32, &body);
        let key = format!("mem-{len}");
        let out = s
            .put_request(&b, &key)
            .body(body.clone().into())
            .send()
            .await
            .unwrap();
        assert_eq!(out.checksum_crc32(), Some(want.as_str()));
        assert_eq!(
            stored_checksums(&s, &b, &key).await,
            (
                vec![("CRC32".to_string(), want.clone())],
                Some(ChecksumType::FullObject)
            )
        );

        let path = dir.path().join(format!("f{len}"));
        std::fs::write(&path, &body).unwrap();
        let rec = Recorder::default();
        let key = format!("file-{len}");
        let out = s
            .put_request(&b, &key)
            .body(ByteStream::from_path(&path).await.unwrap())
            .customize()
            .interceptor(rec.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(
            rec.header("x-amz-trailer").as_deref(),
            Some("x-amz-checksum-crc32"),
            "the SDK sent a trailing checksum"
        );
        assert_eq!(out.checksum_crc32(), Some(want.as_str()));
        assert_eq!(
            stored_checksums(&s, &b, &key).await.0,
            vec![("CRC32".to_string(), want.clone())]
        );
        // The transfer's aws-chunked encoding is not the object's.
        let head = s.head_request(&b, &key).send().await.unwrap();
        assert_eq!(head.content_encoding(), None);
        // The SDK validates what GET returns (its default), and the bytes are the same.
        let got = s
            .get_request(&b, &key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        assert_eq!(got.checksum_crc32(), Some(want.as_str()));
        assert!(got.body.collect().await.unwrap().into_bytes()[..] == body[..]);
    }
    // No checksum mode, no checksums; a range gets none either.
    let out = s.head_request(&b, "mem-1000").send().await.unwrap();
    assert_eq!(out.checksum_crc32(), None);
    let out = s
        .get_request(&b, "mem-1000")
        .range("bytes=0-9")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(out.checksum_crc32(), None);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_and_when_required() {
    let s = start().await;
    let b = s.bucket("algs").await;
    let body = data(70_000, 9);
    for (i, alg) in [
        ChecksumAlgorithm::Crc32,
        ChecksumAlgorithm::Crc32C,
        ChecksumAlgorithm::Crc64Nvme,
        ChecksumAlgorithm::Sha1,
        ChecksumAlgorithm::Sha256,
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("alg-{i}");
        s.put_request(&b, &key)
            .checksum_algorithm(alg.clone())
            .body(body.clone().into())
            .send()
            .await
            .unwrap();
        let (stored, _) = stored_checksums(&s, &b, &key).await;
        assert_eq!(
            stored,
            vec![(alg.as_str().to_string(), value(&alg, &body))],
            "{alg:?}"
        );
    }
    // Checksums off unless required: nothing sent, nothing stored, all still works.
    let plain = s.client_with(RequestChecksumCalculation::WhenRequired);
    let rec = Recorder::default();
    plain
        .put_object()
        .bucket(&b)
        .key("plain")
        .body(body.clone().into())
        .customize()
        .interceptor(rec.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(rec.header("x-amz-checksum-crc32"), None);
    assert_eq!(stored_checksums(&s, &b, "plain").await, (vec![], None));
    assert_eq!(s.get(&b, "plain").await, body);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mismatches_are_refused_and_store_nothing() {
    let s = start().await;
    let b = s.bucket("bad-sums").await;
    let body = data(5000, 1);
    let absent = |key: &'static str| {
        let c = s.client.clone();
        let b = b.clone();
        async move {
            let e = c
                .head_object()
                .bucket(&b)
                .key(key)
                .send()
                .await
                .unwrap_err();
            assert_eq!(status(&e), Some(404), "{key} must not exist");
        }
    };

    // A wrong x-amz-checksum-crc32 header.
    let e = s
        .put_request(&b, "wrong-crc32")
        .checksum_crc32(value(&ChecksumAlgorithm::Crc32, b"something else"))
        .body(body.clone().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("BadDigest"), "{}", describe(&e));
    assert_eq!(status(&e), Some(400));
    absent("wrong-crc32").await;
    // A wrong SHA-256 on a 20 MiB body: checked at the end of the stream.
    let big = data(20 << 20, 2);
    let e = s
        .put_request(&b, "wrong-sha256")
        .checksum_sha256(value(&ChecksumAlgorithm::Sha256, b"x"))
        .body(big.into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("BadDigest"));
    absent("wrong-sha256").await;
    // Not base64 of the right length.
    let e = s
        .put_request(&b, "malformed")
        .checksum_crc32_c("AAAA")
        .body(body.clone().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidRequest"));
    absent("malformed").await;
    // A wrong Content-MD5; a right one passes.
    let e = s
        .put_request(&b, "wrong-md5")
        .content_md5(b64(&s3s::crypto::Md5::checksum(b"other")))
        .body(body.clone().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("BadDigest"));
    absent("wrong-md5").await;
    s.put_request(&b, "right-md5")
        .content_md5(b64(&s3s::crypto::Md5::checksum(&body)))
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    // The body changed after signing: the signed payload hash no longer matches.
    let e = s
        .put_request(&b, "tampered")
        .body(body.clone().into())
        .customize()
        .interceptor(AfterSigning(Arc::new(|r| {
            *r.body_mut() = SdkBody::from(vec![b'x'; 5000]);
        })))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(&e).as_deref(),
        Some("XAmzContentSHA256Mismatch"),
        "{}",
        describe(&e)
    );
    absent("tampered").await;
    s.stop().await;
}

/// An unsigned aws-chunked body with a trailing checksum, as SDKs send over TLS (the Rust SDK
/// signs every chunk over plain HTTP, so this request is built and signed here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailing_checksums_of_unsigned_chunked_bodies() {
    use aws_sigv4::http_request::SignableBody;
    let s = start().await;
    let b = s.bucket("trailers").await;
    let body = data(3000, 5);
    let chunked = |trailer: &str| {
        let mut v = Vec::new();
        v.extend_from_slice(format!("{:x}\r\n", 1000).as_bytes());
        v.extend_from_slice(&body[..1000]);
        v.extend_from_slice(format!("\r\n{:x}\r\n", 2000).as_bytes());
        v.extend_from_slice(&body[1000..]);
        v.extend_from_slice(b"\r\n0\r\n");
        v.extend_from_slice(trailer.as_bytes());
        v.extend_from_slice(b"\r\n\r\n");
        v
    };
    let right = value(&ChecksumAlgorithm::Crc32C, &body);
    let wrong = value(&ChecksumAlgorithm::Crc32C, b"nope");
    for (key, trailer, want) in [
        ("good", format!("x-amz-checksum-crc32c:{right}"), 200),
        ("bad", format!("x-amz-checksum-crc32c:{wrong}"), 400),
        ("missing", "x-amz-checksum-other:1".to_string(), 400),
    ] {
        let r = s
            .signed(
                "PUT",
                &format!("/{b}/{key}"),
                &[
                    ("content-encoding", "aws-chunked".to_string()),
                    ("x-amz-decoded-content-length", body.len().to_string()),
                    ("x-amz-trailer", "x-amz-checksum-crc32c".to_string()),
                    ("x-amz-sdk-checksum-algorithm", "CRC32C".to_string()),
                ],
                &chunked(&trailer),
                SignableBody::StreamingUnsignedPayloadTrailer,
            )
            .await;
        assert_eq!(r.status, want, "{key}: {}", r.text());
        if want == 200 {
            assert_eq!(s.get(&b, key).await, body);
            assert_eq!(
                stored_checksums(&s, &b, key).await.0,
                vec![("CRC32C".to_string(), right.clone())]
            );
        } else {
            assert!(r.text().contains("<Code>BadDigest</Code>"), "{}", r.text());
            let e = s.head_request(&b, key).send().await.unwrap_err();
            assert_eq!(status(&e), Some(404));
        }
    }
    // The same for a body larger than what is read into memory first: checked as it streams.
    let big = data(17 << 20, 6);
    let mut v = Vec::new();
    for piece in big.chunks(1 << 20) {
        v.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        v.extend_from_slice(piece);
        v.extend_from_slice(b"\r\n");
    }
    v.extend_from_slice(format!("0\r\nx-amz-checksum-crc32c:{wrong}\r\n\r\n").as_bytes());
    let r = s
        .signed(
            "PUT",
            &format!("/{b}/big"),
            &[
                ("content-encoding", "aws-chunked".to_string()),
                ("x-amz-decoded-content-length", big.len().to_string()),
                ("x-amz-trailer", "x-amz-checksum-crc32c".to_string()),
            ],
            &v,
            SignableBody::StreamingUnsignedPayloadTrailer,
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("<Code>BadDigest</Code>"), "{}", r.text());
    let e = s.head_request(&b, "big").send().await.unwrap_err();
    assert_eq!(status(&e), Some(404));
    s.stop().await;
}
