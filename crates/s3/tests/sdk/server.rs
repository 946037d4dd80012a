use crate::common::*;
use aws_sdk_s3::config::RequestChecksumCalculation;
use aws_sdk_s3::primitives::SdkBody;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_refused() {
    let s = start().await;
    let b = s.bucket("auth").await;
    s.put(&b, "k", b"secret".to_vec()).await;

    let wrong_secret = client(
        s.addr,
        ACCESS_KEY,
        "not-the-secret",
        RequestChecksumCalculation::WhenSupported,
    );
    let e = wrong_secret.list_buckets().send().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("SignatureDoesNotMatch"));
    assert_eq!(status(&e), Some(403));
    let e = wrong_secret
        .put_object()
        .bucket(&b)
        .key("k")
        .body(b"overwritten".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(403));

    let unknown = client(
        s.addr,
        "AKIDUNKNOWN",
        SECRET_KEY,
        RequestChecksumCalculation::WhenSupported,
    );
    let e = unknown
        .get_object()
        .bucket(&b)
        .key("k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidAccessKeyId"));
    assert_eq!(status(&e), Some(403));
    assert_eq!(s.get(&b, "k").await, b"secret");
    s.stop().await;
}

/// As AWS: 400 `AuthorizationHeaderMalformed` naming the expected region (in the message and
/// `x-amz-bucket-region`), so that a client can sign again for it; nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_signed_for_another_region_is_told_the_right_one() {
    let s = start().await;
    let b = s.bucket("region").await;
    let elsewhere = client_in(
        s.addr,
        ACCESS_KEY,
        SECRET_KEY,
        RequestChecksumCalculation::WhenSupported,
        "eu-west-1",
    );
    let e = elsewhere
        .put_object()
        .bucket(&b)
        .key("k")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("AuthorizationHeaderMalformed"));
    assert_eq!(status(&e), Some(400));
    let message = e.as_service_error().and_then(|e| e.meta().message());
    assert!(
        message.is_some_and(|m| m.contains("'eu-west-1' is wrong; expecting 'us-east-1'")),
        "{message:?}"
    );
    let raw = e.raw_response().unwrap();
    assert_eq!(raw.headers().get("x-amz-bucket-region"), Some(REGION));
    assert!(s.head_request(&b, "k").send().await.is_err());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_requests_are_refused() {
    let s = start().await;
    let b = s.bucket("anon").await;
    s.put(&b, "k", b"private".to_vec()).await;
    for req in [
        format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            s.addr
        ),
        format!(
            "GET /{b}/k HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            s.addr
        ),
        format!(
            "GET /{b}?list-type=2 HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            s.addr
        ),
        format!(
            "PUT /{b}/k HTTP/1.1\r\nHost: {}\r\nContent-Length: 4\r\nConnection: close\r\n\r\nevil",
            s.addr
        ),
        format!(
            "DELETE /{b}/k HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            s.addr
        ),
        format!(
            "PUT /newbucket HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            s.addr
        ),
    ] {
        let r = s.raw(req.as_bytes()).await;
        assert_eq!(r.status, 403, "{req}");
        assert!(
            r.text().contains("<Code>AccessDenied</Code>"),
            "{}",
            r.text()
        );
    }
    assert_eq!(s.get(&b, "k").await, b"private");
    let buckets = s.client.list_buckets().send().await.unwrap();
    assert_eq!(buckets.buckets().len(), 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presigned_urls() {
    let s = start().await;
    let b = s.bucket("presign").await;
    s.put(&b, "k", b"shared".to_vec()).await;
    let r = s.presigned_get(&b, "k").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"shared");
    assert_eq!(
        r.header("etag"),
        Some(format!("\"{}\"", md5_hex(b"shared")).as_str())
    );
    // A presigned URL for another key does not open this one.
    let p = s
        .client
        .get_object()
        .bucket(&b)
        .key("k")
        .presigned(
            aws_sdk_s3::presigning::PresigningConfig::expires_in(std::time::Duration::from_secs(
                60,
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    let uri: http::Uri = p.uri().parse().unwrap();
    let tampered = uri
        .path_and_query()
        .unwrap()
        .as_str()
        .replace(&format!("/{b}/k?"), &format!("/{b}/other?"));
    let r = s
        .raw(
            format!(
                "GET {tampered} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                s.addr
            )
            .as_bytes(),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text());
    s.stop().await;
}

/// The SDK's presigned PUT and UploadPart work from a plain HTTP client; an expired URL is
/// refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presigned_puts_and_expiry() {
    use aws_sdk_s3::presigning::PresigningConfig;
    use std::time::Duration;
    let s = start().await;
    let b = s.bucket("presignput").await;
    let path_of = |uri: &str| {
        let uri: http::Uri = uri.parse().unwrap();
        uri.path_and_query().unwrap().as_str().to_string()
    };
    let put = |path: String, body: &[u8]| {
        let mut req = format!(
            "PUT {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            s.addr,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        req
    };
    let p = s
        .put_request(&b, "k")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(60)).unwrap())
        .await
        .unwrap();
    let r = s.raw(&put(path_of(p.uri()), b"via a presigned PUT")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.get(&b, "k").await, b"via a presigned PUT");

    // A multipart upload whose part goes up through a presigned URL.
    let id = s
        .create_upload_request(&b, "mp")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let p = s
        .upload_part_request(&b, "mp")
        .upload_id(&id)
        .part_number(1)
        .presigned(PresigningConfig::expires_in(Duration::from_secs(60)).unwrap())
        .await
        .unwrap();
    let r = s.raw(&put(path_of(p.uri()), b"one part")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let etag = r.header("etag").unwrap().to_string();
    s.complete_request(&b, "mp")
        .upload_id(&id)
        .multipart_upload(completed(&[(1, etag)]))
        .send()
        .await
        .unwrap();
    assert_eq!(s.get(&b, "mp").await, b"one part");

    let p = s
        .put_request(&b, "k")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(1)).unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let r = s.raw(&put(path_of(p.uri()), b"too late")).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(s.get(&b, "k").await, b"via a presigned PUT");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_status_without_auth() {
    let s = start().await;
    let b = s.bucket("metrics").await;
    s.put(&b, "k", b"counted".to_vec()).await;
    let r = s
        .raw(
            format!(
                "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                s.addr
            )
            .as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let text = r.text();
    assert!(text.contains("# TYPE railstore_"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("railstore_")));
    let r = s
        .raw(
            format!(
                "GET /status HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                s.addr
            )
            .as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200);
    let status: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(status["buckets"], 1);
    assert_eq!(status["objects"], 1);
    assert_eq!(status["devices"].as_array().unwrap().len(), 6);
    // Signed, the same path is ListObjects on the bucket named "metrics".
    let list = s
        .client
        .list_objects_v2()
        .bucket("metrics")
        .send()
        .await
        .unwrap();
    assert_eq!(list.contents()[0].key(), Some("k"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_change_nothing() {
    let s = start().await;
    let b = s.bucket("malformed").await;
    s.put(&b, "keep", b"kept".to_vec()).await;

    // Malformed XML, signed.
    for (bad, want) in [
        ("<Delete><Object><Key>keep</Key>", "MalformedXML"),
        ("not xml at all", "MalformedXML"),
        (
            "<Delete><Object><Key>keep</Key></Object><Extra>",
            "MalformedXML",
        ),
        ("", "MissingRequestBodyError"),
    ] {
        let e = s
            .client
            .delete_objects()
            .bucket(&b)
            .delete(
                Delete::builder()
                    .objects(ObjectIdentifier::builder().key("keep").build().unwrap())
                    .build()
                    .unwrap(),
            )
            .customize()
            .mutate_request(move |r| {
                *r.body_mut() = SdkBody::from(bad);
                r.headers_mut()
                    .insert("content-length", bad.len().to_string());
                r.headers_mut().remove("content-md5");
            })
            .send()
            .await
            .unwrap_err();
        assert_eq!(status(&e), Some(400), "{bad:?}: {}", describe(&e));
        assert_eq!(code(&e).as_deref(), Some(want), "{bad:?}");
    }
    assert_eq!(s.get(&b, "keep").await, b"kept");

    // Headers larger than S3 takes: S3's error; far larger: hyper's 431.
    let big = format!(
        "GET /{b}/keep HTTP/1.1\r\nHost: {}\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        s.addr,
        "x".repeat(30 << 10)
    );
    let r = s.raw(big.as_bytes()).await;
    assert_eq!(r.status, 400);
    assert!(
        r.text()
            .contains("<Code>RequestHeaderSectionTooLarge</Code>"),
        "{}",
        r.text()
    );
    let huge = format!(
        "GET /{b}/keep HTTP/1.1\r\nHost: {}\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        s.addr,
        "x".repeat(200 << 10)
    );
    let r = s.raw(huge.as_bytes()).await;
    assert_eq!(r.status, 431);
    // Garbage instead of HTTP.
    let r = raw(s.addr, b"HELLO THERE\r\n\r\n").await;
    assert_eq!(r.status, 400);
    // A path that is no bucket name.
    let r = s
        .raw(
            format!(
                "GET /Not_A_Bucket/k HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                s.addr
            )
            .as_bytes(),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    // The server still serves.
    assert_eq!(s.get(&b, "keep").await, b"kept");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_serving() {
    let s = start().await;
    let addr = s.addr;
    let b = s.bucket("bye").await;
    s.put(&b, "k", b"v".to_vec()).await;
    let c = s.client.clone();
    s.stop().await;
    let e = c.list_buckets().send().await.unwrap_err();
    assert!(status(&e).is_none(), "no answer after shutdown");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_store_answers_service_unavailable() {
    let s = start().await;
    let b = s.bucket("closing").await;
    s.store.shutdown().await.unwrap();
    let e = s
        .client
        .put_object()
        .bucket(&b)
        .key("k")
        .body(b"v".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("ServiceUnavailable"));
    assert_eq!(status(&e), Some(503));
}
