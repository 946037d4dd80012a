//! Server-side encryption: SSE-C, SSE-S3 and KMS on single and multipart objects, copies
//! between them, bucket defaults, and the bytes at rest (read from the store underneath).

use crate::common::*;
use aws_sdk_s3::types::{
    ServerSideEncryption, ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration,
    ServerSideEncryptionRule,
};
use railstore_s3::Keyring;

const MIB: usize = 1 << 20;

/// A customer key: (key, its MD5), base64 as the headers carry them.
fn customer_key(byte: u8) -> (String, String) {
    use s3s::crypto::Checksum;
    let key = [byte; 32];
    (b64(&key), b64(&s3s::crypto::Md5::checksum(&key)))
}

async fn with_master_key() -> TestServer {
    start_configured(false, |c| c.keyring = Keyring::new([42; 32])).await
}

/// The object's bytes as the store keeps them.
async fn at_rest(s: &TestServer, bucket: &str, key: &str) -> Vec<u8> {
    let got = s.store.get_object(bucket, key, None).await.unwrap();
    railstore_store::collect_body(got.body).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_c_objects_are_read_only_with_their_key() {
    let s = start().await;
    let b = s.bucket("ssec").await;
    let (key_a, md5_a) = customer_key(1);
    let (key_b, md5_b) = customer_key(2);
    let body = data(100_000, 1);
    let put = s
        .put_request(&b, "k")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_a)
        .sse_customer_key_md5(&md5_a)
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    assert_eq!(put.sse_customer_algorithm(), Some("AES256"));
    assert_eq!(put.sse_customer_key_md5(), Some(md5_a.as_str()));
    let stored = at_rest(&s, &b, "k").await;
    assert_eq!(stored.len(), body.len(), "CTR keeps sizes");
    assert!(
        stored != body && stored[..64] != body[..64],
        "encrypted at rest"
    );

    let e = s.get_request(&b, "k").send().await.unwrap_err();
    assert_eq!(status(&e), Some(400), "no key: {}", describe(&e));
    let e = s
        .get_request(&b, "k")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_b)
        .sse_customer_key_md5(&md5_b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(400), "another key: {}", describe(&e));
    let e = s.head_request(&b, "k").send().await.unwrap_err();
    assert_eq!(status(&e), Some(400));

    let out = s
        .get_request(&b, "k")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_a)
        .sse_customer_key_md5(&md5_a)
        .range("bytes=12345-70000")
        .send()
        .await
        .unwrap();
    assert_eq!(out.sse_customer_key_md5(), Some(md5_a.as_str()));
    let got = out.body.collect().await.unwrap().into_bytes();
    assert!(got[..] == body[12345..=70000]);
    let listed = s.list_v2_request(&b).send().await.unwrap();
    assert_eq!(listed.contents()[0].size(), Some(body.len() as i64));

    // A key whose MD5 is wrong, and SSE-C mixed with SSE-S3: refused, nothing stored.
    for bad in [
        s.put_request(&b, "bad")
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&key_a)
            .sse_customer_key_md5(&md5_b),
        s.put_request(&b, "bad")
            .server_side_encryption(ServerSideEncryption::Aes256)
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&key_a)
            .sse_customer_key_md5(&md5_a),
    ] {
        let e = bad.body(b"x".to_vec().into()).send().await.unwrap_err();
        assert_eq!(status(&e), Some(400), "{}", describe(&e));
    }
    assert!(s.head_request(&b, "bad").send().await.is_err());
    // An SSE-C key for an object stored in the clear is refused too.
    s.put(&b, "plain", b"clear").await;
    let e = s
        .get_request(&b, "plain")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_a)
        .sse_customer_key_md5(&md5_a)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(400));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_s3_and_kms_use_the_master_key() {
    let s = with_master_key().await;
    let b = s.bucket("sses3").await;
    let body = data(300_000, 2);
    let put = s
        .put_request(&b, "s3")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    assert_eq!(
        put.server_side_encryption(),
        Some(&ServerSideEncryption::Aes256)
    );
    // As AWS: an SSE-S3 object's ETag is its plaintext's MD5.
    assert_eq!(
        put.e_tag(),
        Some(format!("\"{}\"", md5_hex(&body)).as_str())
    );
    let out = s.get_request(&b, "s3").send().await.unwrap();
    assert_eq!(
        out.server_side_encryption(),
        Some(&ServerSideEncryption::Aes256)
    );
    assert!(out.body.collect().await.unwrap().into_bytes()[..] == body[..]);
    assert!(at_rest(&s, &b, "s3").await != body);

    for id in ["testkey-1", "testkey-2"] {
        let put = s
            .put_request(&b, id)
            .server_side_encryption(ServerSideEncryption::AwsKms)
            .ssekms_key_id(id)
            .body(body.clone().into())
            .send()
            .await
            .unwrap();
        assert_eq!(put.ssekms_key_id(), Some(id));
        let head = s.head_request(&b, id).send().await.unwrap();
        assert_eq!(
            head.server_side_encryption(),
            Some(&ServerSideEncryption::AwsKms)
        );
        assert_eq!(head.ssekms_key_id(), Some(id));
        assert!(s.get(&b, id).await == body);
    }
    let (one, two) = (
        at_rest(&s, &b, "testkey-1").await,
        at_rest(&s, &b, "testkey-2").await,
    );
    assert!(one != body && one != two, "each object its own key");
    // KMS without a key id (railstore has no default key), or a key id without KMS.
    let e = s
        .put_request(&b, "nokey")
        .server_side_encryption(ServerSideEncryption::AwsKms)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidArgument"));
    let e = s
        .put_request(&b, "nokms")
        .ssekms_key_id("testkey-1")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidArgument"));
    s.stop().await;

    // Without a master key, SSE-S3 is refused rather than stored in the clear.
    let s = start().await;
    let b = s.bucket("nomaster").await;
    let e = s
        .put_request(&b, "k")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NotImplemented"));
    assert!(s.head_request(&b, "k").send().await.is_err());
    s.stop().await;
}

/// Parts numbered 1, 3 and 4 (uneven sizes) of an SSE-C upload: every request needs the key,
/// and ranges across part boundaries and part reads decrypt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_sse_c_needs_the_key_throughout() {
    let s = start().await;
    let b = s.bucket("mpssec").await;
    let (key_a, md5_a) = customer_key(5);
    let (key_b, md5_b) = customer_key(6);
    let up = s
        .create_upload_request(&b, "big")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_a)
        .sse_customer_key_md5(&md5_a)
        .send()
        .await
        .unwrap();
    assert_eq!(up.sse_customer_key_md5(), Some(md5_a.as_str()));
    let id = up.upload_id().unwrap().to_string();
    let bodies = [
        (1, data(5 * MIB, 11)),
        (3, data(5 * MIB + 1, 12)),
        (4, data(1000, 13)),
    ];
    let e = s
        .upload_part_request(&b, "big")
        .upload_id(&id)
        .part_number(1)
        .body(b"small: refused before it is read".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(400), "a part without the key");
    let e = s
        .upload_part_request(&b, "big")
        .upload_id(&id)
        .part_number(1)
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_b)
        .sse_customer_key_md5(&md5_b)
        .body(b"small".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(400), "a part with another key");
    let mut parts = Vec::new();
    for (n, body) in &bodies {
        let out = s
            .upload_part_request(&b, "big")
            .upload_id(&id)
            .part_number(*n)
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&key_a)
            .sse_customer_key_md5(&md5_a)
            .body(body.clone().into())
            .send()
            .await
            .unwrap();
        assert_eq!(out.sse_customer_key_md5(), Some(md5_a.as_str()));
        parts.push((*n, out.e_tag().unwrap().to_string()));
    }
    // A part sent again (encrypted from a new IV) keeps its ETag, which is not its MD5.
    let again = s
        .upload_part_request(&b, "big")
        .upload_id(&id)
        .part_number(4)
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_a)
        .sse_customer_key_md5(&md5_a)
        .body(bodies[2].1.clone().into())
        .send()
        .await
        .unwrap();
    assert_eq!(again.e_tag(), Some(parts[2].1.as_str()));
    assert_ne!(parts[2].1, format!("\"{}\"", md5_hex(&bodies[2].1)));
    let e = s
        .complete_request(&b, "big")
        .upload_id(&id)
        .multipart_upload(completed(&parts))
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(400), "a completion without the key");
    s.complete_request(&b, "big")
        .upload_id(&id)
        .multipart_upload(completed(&parts))
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_a)
        .sse_customer_key_md5(&md5_a)
        .send()
        .await
        .unwrap();
    let whole: Vec<u8> = bodies.iter().flat_map(|(_, b)| b.clone()).collect();
    let read = |range: Option<String>, part: Option<i32>| {
        let mut r = s
            .get_request(&b, "big")
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&key_a)
            .sse_customer_key_md5(&md5_a);
        if let Some(range) = range {
            r = r.range(range);
        }
        if let Some(p) = part {
            r = r.part_number(p);
        }
        async move {
            r.send()
                .await
                .unwrap()
                .body
                .collect()
                .await
                .unwrap()
                .into_bytes()
        }
    };
    assert!(read(None, None).await[..] == whole[..]);
    let boundary = 5 * MIB;
    for (first, last) in [
        (boundary - 100, boundary + 99),
        (2 * boundary - 3, 2 * boundary + 500),
        (17, whole.len() - 1),
    ] {
        let got = read(Some(format!("bytes={first}-{last}")), None).await;
        assert!(got[..] == whole[first..=last], "{first}-{last}");
    }
    let got = read(None, Some(2)).await;
    assert!(
        got[..] == bodies[1].1[..],
        "the second part is upload part 3"
    );
    assert!(at_rest(&s, &b, "big").await != whole);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_take_the_encryption_they_ask_for() {
    let s = with_master_key().await;
    let b = s.bucket("copyenc").await;
    let (key_a, md5_a) = customer_key(7);
    let body = data(2 * MIB + 3, 3);
    s.put_request(&b, "src")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_a)
        .sse_customer_key_md5(&md5_a)
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    let e = s
        .copy_request(&b, "dst")
        .copy_source(format!("{b}/src"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(400), "the source's key is needed");
    let out = s
        .copy_request(&b, "dst")
        .copy_source(format!("{b}/src"))
        .copy_source_sse_customer_algorithm("AES256")
        .copy_source_sse_customer_key(&key_a)
        .copy_source_sse_customer_key_md5(&md5_a)
        .server_side_encryption(ServerSideEncryption::AwsKms)
        .ssekms_key_id("testkey-2")
        .send()
        .await
        .unwrap();
    assert_eq!(out.ssekms_key_id(), Some("testkey-2"));
    assert!(s.get(&b, "dst").await == body, "readable without a key now");
    // KMS to clear: stored as plaintext.
    s.copy_request(&b, "clear")
        .copy_source(format!("{b}/dst"))
        .send()
        .await
        .unwrap();
    assert!(at_rest(&s, &b, "clear").await == body);

    // UploadPartCopy: a range of the SSE-C source into an SSE-S3 upload.
    let id = s
        .create_upload_request(&b, "parts")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let (first, last) = (100, 100 + MIB);
    let e = s
        .client
        .upload_part_copy()
        .bucket(&b)
        .key("parts")
        .upload_id(&id)
        .part_number(1)
        .copy_source(format!("{b}/src"))
        .copy_source_range(format!("bytes={first}-{}", body.len()))
        .copy_source_sse_customer_algorithm("AES256")
        .copy_source_sse_customer_key(&key_a)
        .copy_source_sse_customer_key_md5(&md5_a)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidRange"));
    let copied = s
        .client
        .upload_part_copy()
        .bucket(&b)
        .key("parts")
        .upload_id(&id)
        .part_number(1)
        .copy_source(format!("{b}/src"))
        .copy_source_range(format!("bytes={first}-{last}"))
        .copy_source_sse_customer_algorithm("AES256")
        .copy_source_sse_customer_key(&key_a)
        .copy_source_sse_customer_key_md5(&md5_a)
        .send()
        .await
        .unwrap();
    assert_eq!(
        copied.server_side_encryption(),
        Some(&ServerSideEncryption::Aes256)
    );
    let etag = copied
        .copy_part_result()
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string();
    assert_eq!(etag, format!("\"{}\"", md5_hex(&body[first..=last])));
    s.complete_request(&b, "parts")
        .upload_id(&id)
        .multipart_upload(completed(&[(1, etag)]))
        .send()
        .await
        .unwrap();
    assert!(s.get(&b, "parts").await[..] == body[first..=last]);
    assert!(at_rest(&s, &b, "parts").await[..] != body[first..=last]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_default_encryption_applies_to_writes_that_ask_for_none() {
    let s = with_master_key().await;
    let b = s.bucket("defaults").await;
    let c = &s.client;
    let e = c
        .get_bucket_encryption()
        .bucket(&b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(&e).as_deref(),
        Some("ServerSideEncryptionConfigurationNotFoundError")
    );
    let config = |alg: ServerSideEncryption, id: Option<&str>| {
        let by_default = ServerSideEncryptionByDefault::builder()
            .sse_algorithm(alg)
            .set_kms_master_key_id(id.map(str::to_string))
            .build()
            .unwrap();
        ServerSideEncryptionConfiguration::builder()
            .rules(
                ServerSideEncryptionRule::builder()
                    .apply_server_side_encryption_by_default(by_default)
                    .build(),
            )
            .build()
            .unwrap()
    };
    let e = c
        .put_bucket_encryption()
        .bucket(&b)
        .server_side_encryption_configuration(config(ServerSideEncryption::AwsKms, None))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidArgument"));
    c.put_bucket_encryption()
        .bucket(&b)
        .server_side_encryption_configuration(config(
            ServerSideEncryption::AwsKms,
            Some("testkey-1"),
        ))
        .send()
        .await
        .unwrap();
    let got = c.get_bucket_encryption().bucket(&b).send().await.unwrap();
    let rule = &got.server_side_encryption_configuration().unwrap().rules()[0];
    let d = rule.apply_server_side_encryption_by_default().unwrap();
    assert_eq!(d.sse_algorithm(), &ServerSideEncryption::AwsKms);
    assert_eq!(d.kms_master_key_id(), Some("testkey-1"));

    let body = data(4000, 9);
    let put = s
        .put_request(&b, "k")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    assert_eq!(put.ssekms_key_id(), Some("testkey-1"));
    assert!(at_rest(&s, &b, "k").await != body);
    let up = s.create_upload_request(&b, "mp").send().await.unwrap();
    assert_eq!(
        up.server_side_encryption(),
        Some(&ServerSideEncryption::AwsKms)
    );
    // A request's own choice wins over the default.
    let (key, md5) = customer_key(9);
    let put = s
        .put_request(&b, "own")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key)
        .sse_customer_key_md5(&md5)
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    assert_eq!(put.server_side_encryption(), None);

    c.delete_bucket_encryption()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    c.delete_bucket_encryption()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    let put = s
        .put_request(&b, "after")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    assert_eq!(put.server_side_encryption(), None);
    assert!(at_rest(&s, &b, "after").await == body);
    s.stop().await;
}
