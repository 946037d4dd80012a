use crate::common::*;
use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_lifecycle() {
    let s = start().await;
    let c = &s.client;

    c.create_bucket().bucket("alpha").send().await.unwrap();
    // Re-creating one's own bucket succeeds (us-east-1 behaviour) and keeps its objects.
    s.put("alpha", "k", b"v".to_vec()).await;
    c.create_bucket().bucket("alpha").send().await.unwrap();
    assert_eq!(s.get("alpha", "k").await, b"v");
    c.create_bucket().bucket("beta").send().await.unwrap();

    let list = c.list_buckets().send().await.unwrap();
    let names: Vec<_> = list
        .buckets()
        .iter()
        .map(|b| b.name().unwrap().to_string())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert!(list.buckets()[0].creation_date().is_some());
    assert!(list.owner().is_some());
    let only_b = c.list_buckets().prefix("b").send().await.unwrap();
    assert_eq!(only_b.buckets().len(), 1);
    let paged = c.list_buckets().max_buckets(1).send().await.unwrap();
    assert_eq!(paged.buckets().len(), 1);
    let rest = c
        .list_buckets()
        .max_buckets(1)
        .continuation_token(paged.continuation_token().expect("a token"))
        .send()
        .await
        .unwrap();
    assert_eq!(rest.buckets()[0].name(), Some("beta"));
    assert_eq!(rest.continuation_token(), None);

    c.head_bucket().bucket("alpha").send().await.unwrap();
    let e = c.head_bucket().bucket("gamma").send().await.unwrap_err();
    assert_eq!(status(&e), Some(404));

    let loc = c
        .get_bucket_location()
        .bucket("alpha")
        .send()
        .await
        .unwrap();
    assert!(loc
        .location_constraint()
        .is_none_or(|l| l.as_str().is_empty()));
    let v = c
        .get_bucket_versioning()
        .bucket("alpha")
        .send()
        .await
        .unwrap();
    assert!(v.status().is_none());

    // Not empty: 409 BucketNotEmpty, nothing changes.
    let e = c.delete_bucket().bucket("alpha").send().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("BucketNotEmpty"));
    assert_eq!(status(&e), Some(409));
    assert_eq!(s.get("alpha", "k").await, b"v");
    // An upload in progress does not keep it: it is aborted with the bucket, as S3 does.
    let up = c
        .create_multipart_upload()
        .bucket("alpha")
        .key("m")
        .send()
        .await
        .unwrap();
    c.delete_object()
        .bucket("alpha")
        .key("k")
        .send()
        .await
        .unwrap();
    c.delete_bucket().bucket("alpha").send().await.unwrap();
    let e = c
        .abort_multipart_upload()
        .bucket("alpha")
        .key("m")
        .upload_id(up.upload_id().unwrap())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchBucket"));
    let e = c.delete_bucket().bucket("alpha").send().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchBucket"));
    let names: Vec<_> = c
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .map(|b| b.name().unwrap().to_string())
        .collect();
    assert_eq!(names, ["beta"]);
    let e = c
        .put_object()
        .bucket("alpha")
        .key("k")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchBucket"));
    assert_eq!(status(&e), Some(404));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bucket_names_and_locations_are_refused() {
    let s = start().await;
    let c = &s.client;
    for name in ["ab", "Upper-Case", "under_score", "-dash", "192.168.1.1"] {
        let e = c.create_bucket().bucket(name).send().await.unwrap_err();
        assert_eq!(code(&e).as_deref(), Some("InvalidBucketName"), "{name}");
        assert_eq!(status(&e), Some(400), "{name}");
    }
    let e = c
        .create_bucket()
        .bucket("elsewhere")
        .create_bucket_configuration(
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::EuWest1)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(&e).as_deref(),
        Some("IllegalLocationConstraintException")
    );
    // As AWS: us-east-1 takes no constraint, not even its own name.
    let e = c
        .create_bucket()
        .bucket("east")
        .create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from("us-east-1"))
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidLocationConstraint"));
    assert!(c.list_buckets().send().await.unwrap().buckets().is_empty());
    s.stop().await;
}

/// A server for eu-west-1: its own name, the legacy `EU` or none; GetBucketLocation answers
/// what the bucket was made with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locations_follow_the_configured_region() {
    let s = start_configured(false, |c| c.region = "eu-west-1".into()).await;
    let c = client_in(
        s.addr,
        ACCESS_KEY,
        SECRET_KEY,
        aws_sdk_s3::config::RequestChecksumCalculation::WhenSupported,
        "eu-west-1",
    );
    for (bucket, constraint, want) in [
        ("named", Some("eu-west-1"), "eu-west-1"),
        ("legacy", Some("EU"), "EU"),
        ("unnamed", None, "eu-west-1"),
    ] {
        let mut req = c.create_bucket().bucket(bucket);
        if let Some(l) = constraint {
            req = req.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(l))
                    .build(),
            );
        }
        req.send().await.unwrap();
        let got = c.get_bucket_location().bucket(bucket).send().await.unwrap();
        assert_eq!(
            got.location_constraint().map(|l| l.as_str()),
            Some(want),
            "{bucket}"
        );
    }
    let e = c
        .create_bucket()
        .bucket("west")
        .create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::UsWest2)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(&e).as_deref(),
        Some("IllegalLocationConstraintException")
    );
    s.stop().await;
}

/// A bucket made without object lock, without ownership controls and not public: the answers
/// say so as AWS says it of such a bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_object_lock_and_ownership_are_reported_as_absent() {
    use aws_sdk_s3::types::{
        ObjectLockConfiguration, ObjectLockEnabled, ObjectLockLegalHold, ObjectLockLegalHoldStatus,
    };
    let s = start().await;
    let b = s.bucket("nolock").await;
    let c = &s.client;
    s.put(&b, "k", b"x".to_vec()).await;
    let e = c
        .get_object_lock_configuration()
        .bucket(&b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (status(&e), code(&e).as_deref()),
        (Some(404), Some("ObjectLockConfigurationNotFoundError"))
    );
    let e = c
        .put_object_lock_configuration()
        .bucket(&b)
        .object_lock_configuration(
            ObjectLockConfiguration::builder()
                .object_lock_enabled(ObjectLockEnabled::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (status(&e), code(&e).as_deref()),
        (Some(409), Some("InvalidBucketState"))
    );
    let e = c
        .put_object_legal_hold()
        .bucket(&b)
        .key("k")
        .legal_hold(
            ObjectLockLegalHold::builder()
                .status(ObjectLockLegalHoldStatus::On)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (status(&e), code(&e).as_deref()),
        (Some(400), Some("InvalidRequest"))
    );
    let e = c
        .get_object_retention()
        .bucket(&b)
        .key("missing")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchKey"));
    let e = c
        .get_bucket_ownership_controls()
        .bucket(&b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("OwnershipControlsNotFoundError"));
    let status = c
        .get_bucket_policy_status()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    assert_eq!(
        status.policy_status().and_then(|p| p.is_public()),
        Some(false)
    );
    s.stop().await;
}
