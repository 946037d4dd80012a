//! Bucket policies and the public access block through the SDK: stored and returned as given,
//! malformed ones refused, an Allow to everyone opening the bucket to unsigned reads (until
//! the block restricts it or the policy goes), an explicit Deny refusing even the owner, and
//! conditions (the caller's address, request headers) deciding whether a Deny applies.

use crate::common::*;

fn unsigned_get(s: &TestServer, bucket: &str, key: &str) -> Vec<u8> {
    format!(
        "GET /{bucket}/{key} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        s.addr
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_open_and_close_a_bucket() {
    let s = start().await;
    let b = s.bucket("pol").await;
    s.put(&b, "public/a", b"hello".to_vec()).await;
    s.put(&b, "private/b", b"secret".to_vec()).await;
    assert_eq!(s.raw(&unsigned_get(&s, &b, "public/a")).await.status, 403);

    // Malformed: not JSON, an unknown effect, a resource of another bucket.
    for bad in [
        "not json".to_string(),
        r#"{"Statement": [{"Effect": "Perhaps", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::x/*"}]}"#.to_string(),
        format!(r#"{{"Statement": [{{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::other-{b}/*"}}]}}"#),
    ] {
        let e = s.client.put_bucket_policy().bucket(&b).policy(bad).send().await.unwrap_err();
        assert_eq!(code(&e).as_deref(), Some("MalformedPolicy"), "{}", describe(&e));
    }
    let e = s
        .client
        .get_bucket_policy()
        .bucket(&b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchBucketPolicy"));

    let public = format!(
        r#"{{"Version": "2012-10-17", "Statement": [{{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::{b}/public/*"}}]}}"#
    );
    s.client
        .put_bucket_policy()
        .bucket(&b)
        .policy(&public)
        .send()
        .await
        .unwrap();
    let got = s
        .client
        .get_bucket_policy()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    assert_eq!(got.policy(), Some(public.as_str()), "returned as given");
    let status = s
        .client
        .get_bucket_policy_status()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    assert_eq!(
        status.policy_status().and_then(|p| p.is_public()),
        Some(true)
    );
    let r = s.raw(&unsigned_get(&s, &b, "public/a")).await;
    assert_eq!((r.status, r.text()), (200, "hello".to_string()));
    assert_eq!(s.raw(&unsigned_get(&s, &b, "private/b")).await.status, 403);
    // Even `s3:*` to everyone opens objects only: not the policy, not copies (whose source
    // is another resource).
    let everything = format!(
        r#"{{"Statement": [{{"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": ["arn:aws:s3:::{b}", "arn:aws:s3:::{b}/*"]}}]}}"#
    );
    s.client
        .put_bucket_policy()
        .bucket(&b)
        .policy(&everything)
        .send()
        .await
        .unwrap();
    let delete_policy = format!(
        "DELETE /{b}?policy HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        s.addr
    );
    assert_eq!(s.raw(delete_policy.as_bytes()).await.status, 403);
    let copy = format!(
        "PUT /{b}/public/copy HTTP/1.1\r\nHost: {}\r\nx-amz-copy-source: /{b}/private/b\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n",
        s.addr
    );
    assert_eq!(s.raw(copy.as_bytes()).await.status, 403);
    assert_eq!(s.raw(&unsigned_get(&s, &b, "private/b")).await.status, 200);
    s.client
        .put_bucket_policy()
        .bucket(&b)
        .policy(&public)
        .send()
        .await
        .unwrap();

    // RestrictPublicBuckets closes it again; BlockPublicPolicy refuses a public policy.
    let block = |restrict: bool, block_policy: bool| {
        aws_sdk_s3::types::PublicAccessBlockConfiguration::builder()
            .restrict_public_buckets(restrict)
            .block_public_policy(block_policy)
            .build()
    };
    s.client
        .put_public_access_block()
        .bucket(&b)
        .public_access_block_configuration(block(true, true))
        .send()
        .await
        .unwrap();
    assert_eq!(s.raw(&unsigned_get(&s, &b, "public/a")).await.status, 403);
    let e = s
        .client
        .put_bucket_policy()
        .bucket(&b)
        .policy(&public)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("AccessDenied"));
    let got = s
        .client
        .get_public_access_block()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    let c = got.public_access_block_configuration().unwrap();
    assert_eq!(
        (c.restrict_public_buckets(), c.block_public_acls()),
        (Some(true), Some(false))
    );
    s.client
        .delete_public_access_block()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    let e = s
        .client
        .get_public_access_block()
        .bucket(&b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(&e).as_deref(),
        Some("NoSuchPublicAccessBlockConfiguration")
    );
    assert_eq!(s.raw(&unsigned_get(&s, &b, "public/a")).await.status, 200);

    // An explicit Deny refuses the owner too, but never the policy's own management.
    let deny = format!(
        r#"{{"Statement": [{{"Effect": "Deny", "Principal": {{"AWS": "*"}}, "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::{b}/private/*"}}]}}"#
    );
    s.client
        .put_bucket_policy()
        .bucket(&b)
        .policy(&deny)
        .send()
        .await
        .unwrap();
    let e = s
        .client
        .delete_object()
        .bucket(&b)
        .key("private/b")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("AccessDenied"));
    assert_eq!(s.get(&b, "private/b").await, b"secret");
    assert_eq!(s.raw(&unsigned_get(&s, &b, "public/a")).await.status, 403);
    s.client
        .delete_bucket_policy()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    s.client
        .delete_object()
        .bucket(&b)
        .key("private/b")
        .send()
        .await
        .unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_on_the_callers_address_and_headers_decide_a_deny() {
    // A master key, for SSE-S3.
    let s = start_configured(false, |c| {
        c.keyring = railstore_s3::Keyring::new([42; 32]);
    })
    .await;
    let b = s.bucket("cond").await;
    s.put(&b, "k", b"v".to_vec()).await;
    let deny_reads_unless_from = |net: &str| {
        format!(
            r#"{{"Version": "2012-10-17", "Statement": [
                {{"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
                  "Resource": "arn:aws:s3:::{b}/*",
                  "Condition": {{"NotIpAddress": {{"aws:SourceIp": "{net}"}}}}}},
                {{"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
                  "Resource": "arn:aws:s3:::{b}/*",
                  "Condition": {{"Null": {{"s3:x-amz-server-side-encryption": "true"}}}}}}]}}"#
        )
    };
    let set = |policy: String| {
        let client = s.client.clone();
        let b = b.clone();
        async move {
            client
                .put_bucket_policy()
                .bucket(&b)
                .policy(policy)
                .send()
                .await
                .unwrap();
        }
    };
    let get = || s.client.get_object().bucket(&b).key("k").send();
    // The test's client is on loopback: inside 127.0.0.0/8, outside 10.0.0.0/8.
    set(deny_reads_unless_from("127.0.0.0/8")).await;
    assert!(get().await.is_ok());
    set(deny_reads_unless_from("10.0.0.0/8")).await;
    let e = get().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("AccessDenied"));
    // The PUT deny holds for a request without the header only.
    let put = |sse: bool| {
        let mut req = s
            .client
            .put_object()
            .bucket(&b)
            .key("p")
            .body(b"x".to_vec().into());
        if sse {
            req = req.server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256);
        }
        req.send()
    };
    let e = put(false).await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("AccessDenied"));
    assert!(put(true).await.is_ok());
}
