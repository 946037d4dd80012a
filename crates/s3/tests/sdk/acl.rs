//! Several users and ACLs through the SDK: each user's own buckets, the owner's private
//! default, canned ACLs and grants opening a bucket or an object to another user or to
//! unsigned requests, copies that must be able to read their source, and a bucket that
//! enforces its ownership.

use crate::common::*;
use aws_sdk_s3::config::RequestChecksumCalculation;
use aws_sdk_s3::types::{
    BucketCannedAcl, ObjectCannedAcl, ObjectOwnership, OwnershipControls, OwnershipControlsRule,
    Permission,
};
use aws_sdk_s3::Client;

const ALT_KEY: &str = "AKIDRAILSTOREALT";
const ALT_SECRET: &str = "railstore/test/alt/secret/0123456789";

/// A server whose main user is `main` and which knows `alt` too; returns alt's client.
async fn two_users() -> (TestServer, Client) {
    let s = start_configured(false, |c| {
        c.user_id = "main".into();
        c.display_name = "Main".into();
        c.users = vec![railstore_s3::User {
            id: "alt".into(),
            display_name: "Alt".into(),
            email: Some("alt@example.org".into()),
            access_key: ALT_KEY.into(),
            secret_key: ALT_SECRET.into(),
        }];
    })
    .await;
    let alt = client(
        s.addr,
        ALT_KEY,
        ALT_SECRET,
        RequestChecksumCalculation::WhenSupported,
    );
    (s, alt)
}

fn unsigned(method: &str, s: &TestServer, path: &str) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        s.addr
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_owns_its_buckets_and_needs_a_grant_for_anothers() {
    let (s, alt) = two_users().await;
    let b = s.bucket("mains").await;
    s.put(&b, "k", b"main's".to_vec()).await;
    alt.create_bucket().bucket("alts").send().await.unwrap();

    // Each sees its own buckets, and the name is taken for the other.
    let names = |out: aws_sdk_s3::operation::list_buckets::ListBucketsOutput| {
        out.buckets()
            .iter()
            .map(|b| b.name().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(s.client.list_buckets().send().await.unwrap()),
        ["mains"]
    );
    assert_eq!(names(alt.list_buckets().send().await.unwrap()), ["alts"]);
    let e = alt.create_bucket().bucket(&b).send().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("BucketAlreadyExists"));

    // Private by default: the owner alone, with full control.
    let acl = s.client.get_bucket_acl().bucket(&b).send().await.unwrap();
    assert_eq!(acl.owner().unwrap().id(), Some("main"));
    assert_eq!(acl.owner().unwrap().display_name(), Some("Main"));
    assert_eq!(acl.grants().len(), 1);
    assert_eq!(acl.grants()[0].permission(), Some(&Permission::FullControl));
    let e = alt.list_objects_v2().bucket(&b).send().await.unwrap_err();
    assert_eq!(status(&e), Some(403));
    let e = alt
        .get_object()
        .bucket(&b)
        .key("k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(403));
    let e = alt
        .put_object()
        .bucket(&b)
        .key("alt-was-here")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(403));
    let e = alt.get_bucket_acl().bucket(&b).send().await.unwrap_err();
    assert_eq!(status(&e), Some(403));

    // Opened for writes: alt's object is alt's; the bucket owner lists and deletes it but
    // reads neither it nor its ACL without a grant.
    s.client
        .put_bucket_acl()
        .bucket(&b)
        .acl(BucketCannedAcl::PublicReadWrite)
        .send()
        .await
        .unwrap();
    alt.put_object()
        .bucket(&b)
        .key("alts-object")
        .body(b"alt's".to_vec().into())
        .send()
        .await
        .unwrap();
    let listed = s.client.list_objects().bucket(&b).send().await.unwrap();
    let owner_of = |key: &str| {
        listed
            .contents()
            .iter()
            .find(|o| o.key() == Some(key))
            .and_then(|o| o.owner().and_then(|w| w.id().map(str::to_string)))
    };
    assert_eq!(owner_of("alts-object").as_deref(), Some("alt"));
    assert_eq!(owner_of("k").as_deref(), Some("main"));
    let e = s
        .client
        .get_object_acl()
        .bucket(&b)
        .key("alts-object")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(403));
    let e = s
        .client
        .get_object()
        .bucket(&b)
        .key("alts-object")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(403));
    let mine = alt
        .get_object_acl()
        .bucket(&b)
        .key("alts-object")
        .send()
        .await
        .unwrap();
    assert_eq!(mine.owner().unwrap().id(), Some("alt"));
    // A bucket-owner-full-control rewrite gives the bucket owner its bytes.
    alt.put_object()
        .bucket(&b)
        .key("alts-object")
        .acl(ObjectCannedAcl::BucketOwnerFullControl)
        .body(b"shared".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(s.get(&b, "alts-object").await, b"shared");
    s.client
        .delete_object()
        .bucket(&b)
        .key("alts-object")
        .send()
        .await
        .unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_acls_open_reads_and_missing_keys_answer_by_who_may_list() {
    let (s, alt) = two_users().await;
    let b = s.bucket("acl-objects").await;
    s.client
        .put_object()
        .bucket(&b)
        .key("open")
        .acl(ObjectCannedAcl::PublicRead)
        .body(b"for all".to_vec().into())
        .send()
        .await
        .unwrap();
    s.put(&b, "closed", b"private".to_vec()).await;
    let before = s
        .client
        .head_object()
        .bucket(&b)
        .key("open")
        .send()
        .await
        .unwrap();

    let open = s.raw(&unsigned("GET", &s, &format!("/{b}/open"))).await;
    assert_eq!((open.status, open.body.as_slice()), (200, &b"for all"[..]));
    let got = alt
        .get_object()
        .bucket(&b)
        .key("open")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes(),
        &b"for all"[..]
    );
    assert_eq!(
        s.raw(&unsigned("GET", &s, &format!("/{b}/closed")))
            .await
            .status,
        403
    );
    // The bucket is private: a missing key is none of an outsider's business (403) ...
    assert_eq!(
        s.raw(&unsigned("GET", &s, &format!("/{b}/none")))
            .await
            .status,
        403
    );
    // ... until it may list the bucket (404); a missing bucket is 404 to anyone.
    s.client
        .put_bucket_acl()
        .bucket(&b)
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    let missing = s.raw(&unsigned("GET", &s, &format!("/{b}/none"))).await;
    assert_eq!(missing.status, 404, "{}", missing.text());
    assert!(missing.text().contains("NoSuchKey"));
    let listed = s.raw(&unsigned("GET", &s, &format!("/{b}"))).await;
    assert_eq!(listed.status, 200);
    assert_eq!(
        s.raw(&unsigned("PUT", &s, &format!("/{b}/new")))
            .await
            .status,
        403
    );
    let gone = s.raw(&unsigned("GET", &s, "/no-such-bucket/k")).await;
    assert_eq!(gone.status, 404);
    assert!(gone.text().contains("NoSuchBucket"));

    // Closing it again keeps the object's time and ETag: only its record changes.
    s.client
        .put_object_acl()
        .bucket(&b)
        .key("open")
        .acl(ObjectCannedAcl::Private)
        .send()
        .await
        .unwrap();
    assert_eq!(
        s.raw(&unsigned("GET", &s, &format!("/{b}/open")))
            .await
            .status,
        403
    );
    let after = s
        .client
        .head_object()
        .bucket(&b)
        .key("open")
        .send()
        .await
        .unwrap();
    assert_eq!(after.e_tag(), before.e_tag());
    assert_eq!(after.last_modified(), before.last_modified());

    // A grant by email names the user; an unknown one is refused and changes nothing.
    s.client
        .put_object_acl()
        .bucket(&b)
        .key("closed")
        .grant_read("emailAddress=alt@example.org")
        .send()
        .await
        .unwrap();
    alt.get_object()
        .bucket(&b)
        .key("closed")
        .send()
        .await
        .unwrap();
    let e = s
        .client
        .put_object_acl()
        .bucket(&b)
        .key("closed")
        .grant_read("emailAddress=nobody@example.org")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("UnresolvableGrantByEmailAddress"));
    alt.get_object()
        .bucket(&b)
        .key("closed")
        .send()
        .await
        .unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_needs_to_read_its_source() {
    let (s, alt) = two_users().await;
    let b = s.bucket("copy-source").await;
    s.put(&b, "secret", b"not for alt".to_vec()).await;
    alt.create_bucket().bucket("alt-dest").send().await.unwrap();
    let copy = || {
        alt.copy_object()
            .bucket("alt-dest")
            .key("stolen")
            .copy_source(format!("{b}/secret"))
            .send()
    };
    let e = copy().await.unwrap_err();
    assert_eq!(status(&e), Some(403), "{}", describe(&e));
    assert!(alt
        .head_object()
        .bucket("alt-dest")
        .key("stolen")
        .send()
        .await
        .is_err());
    s.client
        .put_object_acl()
        .bucket(&b)
        .key("secret")
        .grant_read("id=alt")
        .send()
        .await
        .unwrap();
    copy().await.unwrap();
    let got = alt
        .get_object()
        .bucket("alt-dest")
        .key("stolen")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes(),
        &b"not for alt"[..]
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_that_enforces_its_ownership_owns_everything_and_takes_no_acls() {
    let (s, alt) = two_users().await;
    let b = s.bucket("enforced").await;
    let e = s
        .client
        .get_bucket_ownership_controls()
        .bucket(&b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("OwnershipControlsNotFoundError"));
    let enforced = || {
        OwnershipControls::builder()
            .rules(
                OwnershipControlsRule::builder()
                    .object_ownership(ObjectOwnership::BucketOwnerEnforced)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap()
    };
    // Not while the bucket's ACL grants anyone else anything.
    s.client
        .put_bucket_acl()
        .bucket(&b)
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    let e = s
        .client
        .put_bucket_ownership_controls()
        .bucket(&b)
        .ownership_controls(enforced())
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(&e).as_deref(),
        Some("InvalidBucketAclWithObjectOwnership")
    );
    s.client
        .put_bucket_acl()
        .bucket(&b)
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .unwrap();
    s.client
        .put_bucket_ownership_controls()
        .bucket(&b)
        .ownership_controls(enforced())
        .send()
        .await
        .unwrap();
    let e = s
        .client
        .put_bucket_acl()
        .bucket(&b)
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("AccessControlListNotSupported"));
    assert_eq!(status(&e), Some(400));
    let e = s
        .client
        .put_object()
        .bucket(&b)
        .key("k")
        .acl(ObjectCannedAcl::PublicRead)
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("AccessControlListNotSupported"));
    // A policy lets alt write; what alt writes is the bucket owner's.
    let policy = format!(
        r#"{{"Statement": [{{"Effect": "Allow", "Principal": {{"AWS": "arn:aws:iam::alt:root"}}, "Action": "s3:PutObject", "Resource": "arn:aws:s3:::{b}/*"}}]}}"#
    );
    s.client
        .put_bucket_policy()
        .bucket(&b)
        .policy(policy)
        .send()
        .await
        .unwrap();
    alt.put_object()
        .bucket(&b)
        .key("from-alt")
        .body(b"alt wrote".to_vec().into())
        .send()
        .await
        .unwrap();
    let acl = s
        .client
        .get_object_acl()
        .bucket(&b)
        .key("from-alt")
        .send()
        .await
        .unwrap();
    assert_eq!(acl.owner().unwrap().id(), Some("main"));
    assert_eq!(s.get(&b, "from-alt").await, b"alt wrote");
    // The expected owner header is checked against the bucket's owner.
    let e = s
        .client
        .list_objects_v2()
        .bucket(&b)
        .expected_bucket_owner("alt")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), Some(403));
    s.client
        .list_objects_v2()
        .bucket(&b)
        .expected_bucket_owner("main")
        .send()
        .await
        .unwrap();
    s.stop().await;
}
