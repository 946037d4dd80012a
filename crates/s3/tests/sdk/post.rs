//! POST Object (browser forms) over raw HTTP: forms signed with Version 4 and Version 2 store
//! their file with the form's metadata; a file outside the policy's `content-length-range`,
//! an expired policy, a wrong signature or a field the policy does not name stores nothing.

use crate::common::*;
use std::time::{Duration, SystemTime};

/// A form POST to `/bucket` with these fields, then the file.
fn form_request(s: &TestServer, bucket: &str, fields: &[(&str, String)], file: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--B0undary\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(
        b"--B0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up.bin\"\r\n\
          Content-Type: application/octet-stream\r\n\r\n",
    );
    body.extend_from_slice(file);
    body.extend_from_slice(b"\r\n--B0undary--\r\n");
    let mut req = format!(
        "POST /{bucket} HTTP/1.1\r\nHost: {}\r\nContent-Type: multipart/form-data; \
         boundary=B0undary\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        s.addr,
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    req
}

fn iso(t: SystemTime) -> String {
    let d = time::OffsetDateTime::from(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        d.year(),
        d.month() as u8,
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

/// A policy for `bucket`: keys under `uploads/`, any `Content-Type`, `x-amz-meta-color`, and
/// files of 1 to `max` bytes; `extra` conditions too.
fn policy(bucket: &str, expires: SystemTime, max: u64, extra: &str) -> String {
    let doc = format!(
        r#"{{"expiration": "{}", "conditions": [{{"bucket": "{bucket}"}},
        ["starts-with", "$key", "uploads/"], ["starts-with", "$Content-Type", ""],
        ["eq", "$x-amz-meta-color", "blue"], ["content-length-range", 1, {max}]{extra}]}}"#,
        iso(expires)
    );
    b64(doc.as_bytes())
}

/// The fields of a Version 4 form.
fn v4_fields(policy: &str, key: &str) -> Vec<(&'static str, String)> {
    let now = SystemTime::now();
    let date = iso(now)[..10].replace('-', "");
    let credential = format!("{ACCESS_KEY}/{date}/us-east-1/s3/aws4_request");
    let signing_key = aws_sigv4::sign::v4::generate_signing_key(SECRET_KEY, now, "us-east-1", "s3");
    let signature = aws_sigv4::sign::v4::calculate_signature(signing_key, policy.as_bytes());
    vec![
        ("key", key.to_string()),
        ("Content-Type", "text/plain".to_string()),
        ("x-amz-meta-color", "blue".to_string()),
        ("x-amz-algorithm", "AWS4-HMAC-SHA256".to_string()),
        ("x-amz-credential", credential),
        ("x-amz-date", format!("{date}T000000Z")),
        ("policy", policy.to_string()),
        ("x-amz-signature", signature),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_form_stores_its_file_within_its_policy() {
    let s = start().await;
    let b = s.bucket("forms").await;
    let hour = Duration::from_secs(3600);
    let later = SystemTime::now() + hour;
    // Version 4: the policy's conditions need the credential fields named too.
    let v4_extra = r#", ["starts-with", "$x-amz-algorithm", ""], ["starts-with", "$x-amz-credential", ""], ["starts-with", "$x-amz-date", ""]"#;
    let p = policy(&b, later, 1 << 20, v4_extra);
    let file = data(300_000, 7);
    let r = s
        .raw(&form_request(
            &s,
            &b,
            &v4_fields(&p, "uploads/${filename}"),
            &file,
        ))
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        r.header("etag"),
        Some(format!("\"{}\"", md5_hex(&file)).as_str())
    );
    let got = s
        .client
        .get_object()
        .bucket(&b)
        .key("uploads/up.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(got.content_type(), Some("text/plain"));
    assert_eq!(
        got.metadata()
            .and_then(|m| m.get("color"))
            .map(String::as_str),
        Some("blue")
    );
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        &file[..]
    );

    // Version 2 (HMAC-SHA1 of the policy), answering 201 with a PostResponse document.
    let p2 = policy(&b, later, 1 << 20, r#", {"success_action_status": "201"}"#);
    let v2 = |p: &str, key: &str| {
        vec![
            ("key", key.to_string()),
            ("Content-Type", "text/plain".to_string()),
            ("x-amz-meta-color", "blue".to_string()),
            ("success_action_status", "201".to_string()),
            ("AWSAccessKeyId", ACCESS_KEY.to_string()),
            ("policy", p.to_string()),
            (
                "signature",
                b64(&hmac_sha1(SECRET_KEY.as_bytes(), p.as_bytes())),
            ),
        ]
    };
    let r = s
        .raw(&form_request(&s, &b, &v2(&p2, "uploads/v2"), b"hello"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(r.text().contains("<Key>uploads/v2</Key>"), "{}", r.text());
    assert_eq!(s.get(&b, "uploads/v2").await, b"hello");

    // Refusals, each storing nothing.
    let small = policy(&b, later, 1000, r#", {"success_action_status": "201"}"#);
    let too_large = s
        .raw(&form_request(
            &s,
            &b,
            &v2(&small, "uploads/big"),
            &data(5000, 1),
        ))
        .await;
    assert_eq!(too_large.status, 400, "{}", too_large.text());
    assert!(
        too_large.text().contains("EntityTooLarge"),
        "{}",
        too_large.text()
    );
    let empty = s
        .raw(&form_request(&s, &b, &v2(&p2, "uploads/empty"), b""))
        .await;
    assert!(empty.text().contains("EntityTooSmall"), "{}", empty.text());
    let expired = policy(
        &b,
        SystemTime::now() - hour,
        1000,
        r#", {"success_action_status": "201"}"#,
    );
    let r = s
        .raw(&form_request(&s, &b, &v2(&expired, "uploads/late"), b"x"))
        .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("Policy expired"), "{}", r.text());
    let mut forged = v2(&p2, "uploads/forged");
    forged[6].1 = b64(&hmac_sha1(b"another secret", p2.as_bytes()));
    let r = s.raw(&form_request(&s, &b, &forged, b"x")).await;
    assert_eq!(r.status, 403);
    assert!(r.text().contains("SignatureDoesNotMatch"), "{}", r.text());
    let mut extra = v2(&p2, "uploads/extra");
    extra.insert(0, ("x-amz-meta-size", "9".to_string()));
    let r = s.raw(&form_request(&s, &b, &extra, b"x")).await;
    assert_eq!(r.status, 403);
    assert!(r.text().contains("Extra input fields"), "{}", r.text());
    let outside = s
        .raw(&form_request(&s, &b, &v2(&p2, "elsewhere/k"), b"x"))
        .await;
    assert_eq!(outside.status, 403, "{}", outside.text());
    let keys: Vec<String> = s
        .list_v2_request(&b)
        .send()
        .await
        .unwrap()
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect();
    assert_eq!(keys, ["uploads/up.bin", "uploads/v2"]);
    s.stop().await;
}
