use crate::common::*;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{
    CompletedMultipartUpload, CompletedPart, Delete, MetadataDirective, ObjectIdentifier,
};
use std::time::{Duration, SystemTime};

/// The mechanism a presigned GET of the object says protects it.
async fn mechanism_of(s: &TestServer, b: &str, key: &str) -> Option<String> {
    let raw = s.presigned_get(b, key).await;
    raw.header("x-railstore-mechanism").map(str::to_string)
}

/// Puts 100 bytes with `class` as storage class.
async fn put_in_class(
    s: &TestServer,
    b: &str,
    key: &str,
    class: aws_sdk_s3::types::StorageClass,
) -> Result<
    aws_sdk_s3::operation::put_object::PutObjectOutput,
    aws_sdk_s3::error::SdkError<
        aws_sdk_s3::operation::put_object::PutObjectError,
        aws_sdk_s3::config::http::HttpResponse,
    >,
> {
    s.put_request(b, key)
        .storage_class(class)
        .body(data(100, 3).into())
        .send()
        .await
}

async fn sizes_round_trip(separation: bool) {
    let s = start_with(separation).await;
    let b = s.bucket("sizes").await;
    let sizes = [0usize, 1, 4 << 10, 100 << 10, 10 << 20, 50 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        let body = data(len, i as u64);
        let key = format!("obj-{len}");
        let etag = s.put(&b, &key, body.clone()).await;
        assert_eq!(etag, format!("\"{}\"", md5_hex(&body)), "{len} B");
        let head = s.head_request(&b, &key).send().await.unwrap();
        assert_eq!(head.content_length(), Some(len as i64));
        assert_eq!(head.e_tag(), Some(etag.as_str()));
        assert_eq!(head.content_type(), Some("application/octet-stream"));
        let got = s.get(&b, &key).await;
        assert!(got == body, "{len} B object read back differently");
    }
    // Every object once in the listing, with its size.
    let list = s.list_v2_request(&b).send().await.unwrap();
    let mut listed: Vec<i64> = list.contents().iter().map(|o| o.size().unwrap()).collect();
    listed.sort();
    assert_eq!(listed, sizes.map(|n| n as i64));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_every_size_round_trip() {
    sizes_round_trip(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_with_read_write_separation() {
    sizes_round_trip(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges() {
    let s = start().await;
    let b = s.bucket("ranges").await;
    let body = data(100_000, 7);
    s.put(&b, "r", body.clone()).await;
    s.put(&b, "empty", Vec::new()).await;
    let cases: [(&str, usize, usize); 6] = [
        ("bytes=0-0", 0, 1),
        ("bytes=10-19", 10, 20),
        ("bytes=99990-", 99_990, 100_000),
        ("bytes=-5", 99_995, 100_000),
        ("bytes=99000-200000", 99_000, 100_000),
        ("bytes=-200000", 0, 100_000),
    ];
    for (range, start, end) in cases {
        let out = s.get_request(&b, "r").range(range).send().await.unwrap();
        assert_eq!(
            out.content_range(),
            Some(format!("bytes {start}-{}/100000", end - 1).as_str()),
            "{range}"
        );
        assert_eq!(out.content_length(), Some((end - start) as i64));
        let got = out.body.collect().await.unwrap().into_bytes();
        assert!(got[..] == body[start..end], "{range}");
    }
    for (key, range) in [
        ("r", "bytes=100000-"),
        ("r", "bytes=200000-300000"),
        ("empty", "bytes=0-"),
    ] {
        let e = s
            .get_request(&b, key)
            .range(range)
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e).as_deref(), Some("InvalidRange"), "{range}");
        assert_eq!(status(&e), Some(416), "{range}");
    }
    // Through a presigned URL, where the status and headers show: 200, 206, 416.
    let whole = s.presigned_get(&b, "r").await;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body, body);
    assert_eq!(whole.header("accept-ranges"), Some("bytes"));
    let part = s
        .presigned_get_with(&b, "r", "Range: bytes=10-19\r\n")
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(part.header("content-range"), Some("bytes 10-19/100000"));
    assert_eq!(part.header("content-length"), Some("10"));
    assert_eq!(part.body, body[10..20]);
    let none = s
        .presigned_get_with(&b, "r", "Range: bytes=100000-\r\n")
        .await;
    assert_eq!(none.status, 416);
    assert_eq!(none.header("content-range"), Some("bytes */100000"));
    assert!(none.text().contains("<Code>InvalidRange</Code>"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_and_headers_round_trip() {
    let s = start().await;
    let b = s.bucket("meta").await;
    let expires = DateTime::from_secs(2_000_000_000);
    s.put_request(&b, "doc.txt")
        .body(b"hello".to_vec().into())
        .content_type("text/plain; charset=utf-8")
        .metadata("colour", "blue")
        .metadata("Mixed-Case", "Value With Spaces")
        .cache_control("max-age=60")
        .content_disposition("attachment; filename=\"doc.txt\"")
        .content_encoding("identity")
        .content_language("en-GB")
        .expires(expires)
        .send()
        .await
        .unwrap();
    let head = s.head_request(&b, "doc.txt").send().await.unwrap();
    let get = s.get_request(&b, "doc.txt").send().await.unwrap();
    for (ct, meta, cc, cd, ce, cl) in [
        (
            head.content_type(),
            head.metadata().cloned(),
            head.cache_control(),
            head.content_disposition(),
            head.content_encoding(),
            head.content_language(),
        ),
        (
            get.content_type(),
            get.metadata().cloned(),
            get.cache_control(),
            get.content_disposition(),
            get.content_encoding(),
            get.content_language(),
        ),
    ] {
        assert_eq!(ct, Some("text/plain; charset=utf-8"));
        let meta = meta.unwrap();
        assert_eq!(meta.get("colour").map(String::as_str), Some("blue"));
        assert_eq!(
            meta.get("mixed-case").map(String::as_str),
            Some("Value With Spaces")
        );
        assert_eq!(meta.len(), 2);
        assert_eq!(cc, Some("max-age=60"));
        assert_eq!(cd, Some("attachment; filename=\"doc.txt\""));
        assert_eq!(ce, Some("identity"));
        assert_eq!(cl, Some("en-GB"));
    }
    assert_eq!(head.expires_string(), Some("Wed, 18 May 2033 03:33:20 GMT"));
    assert_eq!(
        get.body.collect().await.unwrap().into_bytes().as_ref(),
        b"hello"
    );

    // Metadata over S3's 2 KiB is refused; nothing is stored.
    let e = s
        .put_request(&b, "big-meta")
        .metadata("m", "x".repeat(3000))
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("MetadataTooLarge"));
    let e = s.head_request(&b, "big-meta").send().await.unwrap_err();
    assert_eq!(status(&e), Some(404));

    // Keys: 1024 bytes is the limit.
    let long = "k".repeat(1024);
    s.put(&b, &long, b"long".to_vec()).await;
    assert_eq!(s.get(&b, &long).await, b"long");
    let e = s
        .put_request(&b, "k".repeat(1025))
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("KeyTooLongError"));
    assert_eq!(status(&e), Some(400));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_reads() {
    let s = start().await;
    let b = s.bucket("cond").await;
    let etag = s.put(&b, "c", b"conditional".to_vec()).await;
    let head = s.head_request(&b, "c").send().await.unwrap();
    let modified = head.last_modified().unwrap().secs();
    let past = DateTime::from_secs(modified - 3600);
    let future = DateTime::from_secs(modified + 3600);
    let at = DateTime::from_secs(modified);

    // (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since) -> status
    type Case<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        Option<DateTime>,
        Option<DateTime>,
        u16,
    );
    let cases: Vec<Case<'_>> = vec![
        (Some(&etag), None, None, None, 200),
        (Some("*"), None, None, None, 200),
        (Some("\"0123\""), None, None, None, 412),
        (None, Some(&etag), None, None, 304),
        (None, Some("*"), None, None, 304),
        (None, Some("\"0123\""), None, None, 200),
        (None, None, Some(past), None, 200),
        (None, None, Some(at), None, 304),
        (None, None, Some(future), None, 304),
        (None, None, None, Some(past), 412),
        (None, None, None, Some(at), 200),
        (None, None, None, Some(future), 200),
        // If-Match wins over If-Unmodified-Since; If-None-Match over If-Modified-Since.
        (Some(&etag), None, None, Some(past), 200),
        (None, Some("\"0123\""), Some(future), None, 200),
        (None, Some(&etag), Some(past), None, 304),
    ];
    for (i, (im, inm, ims, ius, want)) in cases.into_iter().enumerate() {
        let get = s
            .get_request(&b, "c")
            .set_if_match(im.map(str::to_string))
            .set_if_none_match(inm.map(str::to_string))
            .set_if_modified_since(ims)
            .set_if_unmodified_since(ius)
            .send()
            .await;
        let head = s
            .head_request(&b, "c")
            .set_if_match(im.map(str::to_string))
            .set_if_none_match(inm.map(str::to_string))
            .set_if_modified_since(ims)
            .set_if_unmodified_since(ius)
            .send()
            .await;
        match want {
            200 => {
                let got = get.unwrap_or_else(|e| panic!("case {i}: {}", describe(&e)));
                assert_eq!(
                    got.body.collect().await.unwrap().into_bytes().as_ref(),
                    b"conditional"
                );
                head.unwrap_or_else(|e| panic!("case {i}: {}", describe(&e)));
            }
            _ => {
                let e = get.expect_err(&format!("case {i}"));
                assert_eq!(status(&e), Some(want), "GET case {i}");
                if want == 412 {
                    assert_eq!(code(&e).as_deref(), Some("PreconditionFailed"), "case {i}");
                }
                let e = head.expect_err(&format!("case {i}"));
                assert_eq!(status(&e), Some(want), "HEAD case {i}");
            }
        }
    }
    // A failed precondition outranks an unsatisfiable range.
    let e = s
        .get_request(&b, "c")
        .range("bytes=500-")
        .if_match("\"0123\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(412));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes() {
    let s = start().await;
    let b = s.bucket("cond-writes").await;
    // If-None-Match: * creates once.
    let first = s
        .put_request(&b, "k")
        .body(b"first".to_vec().into())
        .if_none_match("*")
        .send()
        .await
        .unwrap();
    let etag = first.e_tag().unwrap().to_string();
    let e = s
        .put_request(&b, "k")
        .body(data(100_000, 1).into())
        .if_none_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(412), "{}", describe(&e));
    assert_eq!(code(&e).as_deref(), Some("PreconditionFailed"));
    // If-Match replaces only the version the client saw.
    let e = s
        .put_request(&b, "k")
        .body(b"stale".to_vec().into())
        .if_match("\"0123\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(412), "{}", describe(&e));
    let e = s
        .put_request(&b, "absent")
        .body(b"x".to_vec().into())
        .if_match(etag.as_str())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchKey"), "{}", describe(&e));
    assert_eq!(s.get(&b, "k").await, b"first");
    let second = s
        .put_request(&b, "k")
        .body(b"second".to_vec().into())
        .if_match(etag.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(s.get(&b, "k").await, b"second");
    // If-None-Match with the current ETag fails; both headers at once are not supported.
    let current = second.e_tag().unwrap().to_string();
    for (im, inm, want) in [
        (None, Some(current.as_str()), "PreconditionFailed"),
        (Some(etag.as_str()), Some("*"), "NotImplemented"),
    ] {
        let e = s
            .put_request(&b, "k")
            .body(b"odd".to_vec().into())
            .set_if_match(im.map(str::to_string))
            .set_if_none_match(inm.map(str::to_string))
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e).as_deref(), Some(want), "{im:?} {inm:?}");
    }
    assert_eq!(s.get(&b, "k").await, b"second");
    // If-Match: * needs an object under the key; If-None-Match with another ETag passes.
    let e = s
        .put_request(&b, "absent")
        .body(b"odd".to_vec().into())
        .if_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchKey"));
    s.put_request(&b, "k")
        .body(b"third".to_vec().into())
        .if_match("*")
        .send()
        .await
        .unwrap();
    s.put_request(&b, "k")
        .body(b"second".to_vec().into())
        .if_none_match("\"0123\"")
        .send()
        .await
        .unwrap();
    assert_eq!(s.get(&b, "k").await, b"second");
    // CompleteMultipartUpload with If-None-Match: * on an existing key.
    let id = s
        .create_upload_request(&b, "k")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let part = s
        .upload_part_request(&b, "k")
        .upload_id(&id)
        .part_number(1)
        .body(b"part".to_vec().into())
        .send()
        .await
        .unwrap();
    let done = CompletedMultipartUpload::builder()
        .parts(
            CompletedPart::builder()
                .part_number(1)
                .e_tag(part.e_tag().unwrap())
                .build(),
        )
        .build();
    let e = s
        .complete_request(&b, "k")
        .upload_id(&id)
        .multipart_upload(done.clone())
        .if_none_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(412), "{}", describe(&e));
    assert_eq!(s.get(&b, "k").await, b"second");
    s.complete_request(&b, "k")
        .upload_id(&id)
        .multipart_upload(done)
        .if_match(second.e_tag().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(s.get(&b, "k").await, b"part");
    // DeleteObject with If-Match.
    let e = s
        .client
        .delete_object()
        .bucket(&b)
        .key("k")
        .if_match(etag.as_str())
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(412), "{}", describe(&e));
    let now = s.head_request(&b, "k").send().await.unwrap();
    s.client
        .delete_object()
        .bucket(&b)
        .key("k")
        .if_match(now.e_tag().unwrap())
        .send()
        .await
        .unwrap();
    assert!(s.head_request(&b, "k").send().await.is_err());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes() {
    let s = start().await;
    let b = s.bucket("del").await;
    for i in 0..6 {
        s.put(&b, &format!("d/{i}"), data(10, i)).await;
    }
    s.client
        .delete_object()
        .bucket(&b)
        .key("d/0")
        .send()
        .await
        .unwrap();
    let e = s.get_request(&b, "d/0").send().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchKey"));
    assert_eq!(status(&e), Some(404));
    // Deleting what is not there succeeds, as in S3.
    s.client
        .delete_object()
        .bucket(&b)
        .key("d/0")
        .send()
        .await
        .unwrap();

    let ids = |keys: &[&str]| {
        keys.iter()
            .map(|k| ObjectIdentifier::builder().key(*k).build().unwrap())
            .collect::<Vec<_>>()
    };
    let out = s
        .client
        .delete_objects()
        .bucket(&b)
        .delete(
            Delete::builder()
                .set_objects(Some(ids(&["d/1", "d/2", "missing"])))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let mut deleted: Vec<_> = out.deleted().iter().map(|d| d.key().unwrap()).collect();
    deleted.sort();
    assert_eq!(deleted, ["d/1", "d/2", "missing"]);
    assert!(out.errors().is_empty());

    let out = s
        .client
        .delete_objects()
        .bucket(&b)
        .delete(
            Delete::builder()
                .set_objects(Some(ids(&["d/3", "d/4"])))
                .quiet(true)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert!(out.deleted().is_empty(), "quiet mode lists no deletions");
    assert!(out.errors().is_empty());

    let left: Vec<_> = s
        .list_v2_request(&b)
        .send()
        .await
        .unwrap()
        .contents()
        .iter()
        .map(|o| o.key().unwrap().to_string())
        .collect();
    assert_eq!(left, ["d/5"]);
    let e = s
        .client
        .delete_objects()
        .bucket("nobucket")
        .delete(
            Delete::builder()
                .set_objects(Some(ids(&["x"])))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchBucket"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies() {
    let s = start().await;
    let b = s.bucket("copy").await;
    let other = s.bucket("copy-dest").await;
    let body = data(200_000, 3);
    let src_key = "dir/a b+c%ü.txt";
    s.put_request(&b, src_key)
        .body(body.clone().into())
        .content_type("text/x-source")
        .metadata("origin", "source")
        .send()
        .await
        .unwrap();
    let source = format!("{b}/{}", urlencode(src_key));

    // COPY (default): bytes and metadata both come along.
    let out = s
        .copy_request(&other, "copied")
        .copy_source(&source)
        .send()
        .await
        .unwrap();
    let etag = out
        .copy_object_result()
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string();
    assert_eq!(etag, format!("\"{}\"", md5_hex(&body)));
    let head = s.head_request(&other, "copied").send().await.unwrap();
    assert_eq!(head.content_type(), Some("text/x-source"));
    assert_eq!(
        head.metadata().unwrap().get("origin").map(String::as_str),
        Some("source")
    );
    assert_eq!(s.get(&other, "copied").await, body);

    // REPLACE: the request's metadata.
    s.copy_request(&b, "replaced")
        .copy_source(&source)
        .metadata_directive(MetadataDirective::Replace)
        .content_type("text/x-new")
        .metadata("fresh", "yes")
        .send()
        .await
        .unwrap();
    let head = s.head_request(&b, "replaced").send().await.unwrap();
    assert_eq!(head.content_type(), Some("text/x-new"));
    let meta = head.metadata().unwrap();
    assert_eq!(meta.get("fresh").map(String::as_str), Some("yes"));
    assert!(!meta.contains_key("origin"));
    assert_eq!(s.get(&b, "replaced").await, body);

    // Onto itself: only with new metadata.
    let e = s
        .copy_request(&b, src_key)
        .copy_source(&source)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidRequest"));
    s.copy_request(&b, src_key)
        .copy_source(&source)
        .metadata_directive(MetadataDirective::Replace)
        .metadata("origin", "itself")
        .send()
        .await
        .unwrap();
    let head = s.head_request(&b, src_key).send().await.unwrap();
    assert_eq!(
        head.metadata().unwrap().get("origin").map(String::as_str),
        Some("itself")
    );

    // Source conditions.
    let e = s
        .copy_request(&b, "cond")
        .copy_source(&source)
        .copy_source_if_match("\"0000\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("PreconditionFailed"));
    s.copy_request(&b, "cond")
        .copy_source(&source)
        .copy_source_if_match(&etag)
        .send()
        .await
        .unwrap();

    // A missing source.
    let e = s
        .copy_request(&b, "x")
        .copy_source(format!("{b}/nothing-here"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchKey"));
    s.stop().await;
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_of_one_key_leave_one_whole_value() {
    let s = start().await;
    let b = s.bucket("race").await;
    // Sizes on both sides of the store's inline limit and its chunk size.
    let bodies: Vec<Vec<u8>> = (0..8u64)
        .map(|i| data([1000, 70_000, 3 << 20, 9 << 20][i as usize % 4], 100 + i))
        .collect();
    for round in 0..3 {
        let mut tasks = Vec::new();
        for body in bodies.iter().cloned() {
            let c = s.client.clone();
            let b = b.clone();
            tasks.push(tokio::spawn(async move {
                c.put_object()
                    .bucket(&b)
                    .key("contended")
                    .body(body.into())
                    .send()
                    .await
                    .map(|o| o.e_tag.unwrap())
            }));
        }
        let mut etags = Vec::new();
        for t in tasks {
            etags.push(t.await.unwrap().expect("every writer succeeds"));
        }
        let got = s.get(&b, "contended").await;
        let which = bodies.iter().position(|v| *v == got);
        assert!(
            which.is_some(),
            "round {round}: the object ({} B) is none of the values written",
            got.len()
        );
        let head = s.head_request(&b, "contended").send().await.unwrap();
        assert_eq!(
            head.e_tag(),
            Some(format!("\"{}\"", md5_hex(&got)).as_str()),
            "the description matches the bytes"
        );
        assert!(etags.contains(&head.e_tag().unwrap().to_string()));
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mechanisms_per_object() {
    let s = start().await;
    let b = s.bucket("mech").await;
    for (key, mech, size) in [
        ("tiny-split", "split3+3", 100usize),
        ("big-rep", "rep3", 300_000),
        ("packed", "pack3+3", 10_000),
    ] {
        let m = mech.to_string();
        s.put_request(&b, key)
            .body(data(size, 1).into())
            .customize()
            .mutate_request(move |r| {
                r.headers_mut().insert("x-railstore-mechanism", m.clone());
            })
            .send()
            .await
            .unwrap();
        let raw = s.presigned_get(&b, key).await;
        assert_eq!(raw.status, 200);
        assert_eq!(raw.header("x-railstore-mechanism"), Some(mech), "{key}");
        assert_eq!(raw.body, data(size, 1));
    }
    // The policy's choice when none is asked for: 4 KiB and below are replicated.
    s.put(&b, "small", data(100, 2)).await;
    let raw = s.presigned_get(&b, "small").await;
    assert_eq!(raw.header("x-railstore-mechanism"), Some("rep3"));
    // A mechanism as storage class; STANDARD is the policy.
    put_in_class(
        &s,
        &b,
        "classy",
        aws_sdk_s3::types::StorageClass::from("split3+3"),
    )
    .await
    .unwrap();
    assert_eq!(
        mechanism_of(&s, &b, "classy").await.as_deref(),
        Some("split3+3")
    );
    put_in_class(
        &s,
        &b,
        "standard",
        aws_sdk_s3::types::StorageClass::Standard,
    )
    .await
    .unwrap();
    let e = put_in_class(&s, &b, "glacier", aws_sdk_s3::types::StorageClass::Glacier)
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidStorageClass"));
    for bad in ["split9+9", "rep", "mirror"] {
        let e = s
            .put_request(&b, "bad")
            .body(data(10, 1).into())
            .customize()
            .mutate_request(move |r| {
                r.headers_mut().insert("x-railstore-mechanism", bad);
            })
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e).as_deref(), Some("InvalidArgument"), "{bad}");
    }
    let e = s.head_request(&b, "bad").send().await.unwrap_err();
    assert_eq!(status(&e), Some(404));
    // Copy keeps the mechanism, or changes it when asked.
    s.copy_request(&b, "copy-of-big-rep")
        .copy_source(format!("{b}/big-rep"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        mechanism_of(&s, &b, "copy-of-big-rep").await.as_deref(),
        Some("rep3")
    );
    s.copy_request(&b, "big-rep")
        .copy_source(format!("{b}/big-rep"))
        .customize()
        .mutate_request(|r| {
            r.headers_mut().insert("x-railstore-mechanism", "split3+3");
        })
        .send()
        .await
        .unwrap();
    let raw = s.presigned_get(&b, "big-rep").await;
    assert_eq!(raw.header("x-railstore-mechanism"), Some("split3+3"));
    assert_eq!(raw.body, data(300_000, 1));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_modified_is_recent_and_listed() {
    let s = start().await;
    let b = s.bucket("times").await;
    let before = SystemTime::now() - Duration::from_secs(2);
    s.put(
        &b,
        "t",
        ByteStream::from_static(b"t")
            .collect()
            .await
            .unwrap()
            .to_vec(),
    )
    .await;
    let head = s.head_request(&b, "t").send().await.unwrap();
    let lm = head.last_modified().unwrap().secs();
    let before = before
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(lm >= before && lm <= before + 60);
    let list = s.list_v2_request(&b).send().await.unwrap();
    assert_eq!(list.contents()[0].last_modified().unwrap().secs(), lm);
    s.stop().await;
}
