//! Object lock: a bucket made with it is versioned for good; retentions and legal holds keep
//! versions from deletion (governance gives way to the bypass, compliance and holds do not);
//! retentions only grow without the bypass; writes carry the lock they ask for or the
//! bucket's default, and a copy never its source's.

use crate::common::*;
use aws_sdk_s3::primitives::DateTime;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, DefaultRetention,
    ObjectLockConfiguration, ObjectLockEnabled, ObjectLockLegalHold, ObjectLockLegalHoldStatus,
    ObjectLockLegalHoldStatus as Hold, ObjectLockMode, ObjectLockRetention,
    ObjectLockRetentionMode, ObjectLockRule, VersioningConfiguration,
};
use std::time::{Duration, SystemTime};

/// Seconds since the epoch, `days` from now.
fn in_days(days: u64) -> DateTime {
    DateTime::from(SystemTime::now() + Duration::from_secs(days * 86_400))
}

async fn locked_bucket(s: &TestServer, name: &str) -> String {
    s.client
        .create_bucket()
        .bucket(name)
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    name.to_string()
}

async fn put_version(s: &TestServer, b: &str, key: &str) -> String {
    s.client
        .put_object()
        .bucket(b)
        .key(key)
        .body(b"locked bytes".to_vec().into())
        .send()
        .await
        .unwrap()
        .version_id
        .expect("a lock bucket is versioned")
}

fn retention(mode: ObjectLockRetentionMode, until: DateTime) -> ObjectLockRetention {
    ObjectLockRetention::builder()
        .mode(mode)
        .retain_until_date(until)
        .build()
}

async fn set_retention(
    s: &TestServer,
    b: &str,
    key: &str,
    version: &str,
    r: ObjectLockRetention,
    bypass: bool,
) -> Result<(), (Option<u16>, Option<String>)> {
    s.client
        .put_object_retention()
        .bucket(b)
        .key(key)
        .version_id(version)
        .retention(r)
        .bypass_governance_retention(bypass)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| (status(&e), code(&e)))
}

async fn delete_version(
    s: &TestServer,
    b: &str,
    key: &str,
    version: &str,
    bypass: bool,
) -> Result<(), (Option<u16>, Option<String>)> {
    s.client
        .delete_object()
        .bucket(b)
        .key(key)
        .version_id(version)
        .bypass_governance_retention(bypass)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| (status(&e), code(&e)))
}

async fn set_hold(s: &TestServer, b: &str, key: &str, version: &str, on: bool) {
    let status = if on { Hold::On } else { Hold::Off };
    s.client
        .put_object_legal_hold()
        .bucket(b)
        .key(key)
        .version_id(version)
        .legal_hold(ObjectLockLegalHold::builder().status(status).build())
        .send()
        .await
        .unwrap();
}

const DENIED: (Option<u16>, Option<&str>) = (Some(403), Some("AccessDenied"));

fn denied(r: Result<(), (Option<u16>, Option<String>)>) -> bool {
    matches!(r, Err((s, c)) if (s, c.as_deref()) == DENIED)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_and_legal_hold_keep_versions() {
    let s = start().await;
    let b = locked_bucket(&s, "locked").await;
    let c = &s.client;
    let v = c.get_bucket_versioning().bucket(&b).send().await.unwrap();
    assert_eq!(v.status(), Some(&BucketVersioningStatus::Enabled));
    let e = c
        .put_bucket_versioning()
        .bucket(&b)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Suspended)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (status(&e), code(&e).as_deref()),
        (Some(409), Some("InvalidBucketState"))
    );

    // Governance: refused without the bypass, then deleted with it.
    let v1 = put_version(&s, &b, "gov").await;
    let gov = ObjectLockRetentionMode::Governance;
    set_retention(
        &s,
        &b,
        "gov",
        &v1,
        retention(gov.clone(), in_days(30)),
        false,
    )
    .await
    .unwrap();
    let head = c.head_object().bucket(&b).key("gov").send().await.unwrap();
    assert_eq!(head.object_lock_mode(), Some(&ObjectLockMode::Governance));
    assert!(head.object_lock_retain_until_date().is_some());
    // Longer is fine; shorter needs the bypass.
    set_retention(
        &s,
        &b,
        "gov",
        &v1,
        retention(gov.clone(), in_days(40)),
        false,
    )
    .await
    .unwrap();
    assert!(denied(
        set_retention(
            &s,
            &b,
            "gov",
            &v1,
            retention(gov.clone(), in_days(35)),
            false
        )
        .await
    ));
    // A delete without a version id only hides it behind a marker.
    c.delete_object()
        .bucket(&b)
        .key("gov")
        .send()
        .await
        .unwrap();
    assert!(denied(delete_version(&s, &b, "gov", &v1, false).await));
    let multi = c
        .delete_objects()
        .bucket(&b)
        .delete(
            aws_sdk_s3::types::Delete::builder()
                .objects(
                    aws_sdk_s3::types::ObjectIdentifier::builder()
                        .key("gov")
                        .version_id(&v1)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(multi.errors().len(), 1);
    assert_eq!(multi.errors()[0].code(), Some("AccessDenied"));
    let got = c
        .get_object()
        .bucket(&b)
        .key("gov")
        .version_id(&v1)
        .send()
        .await
        .unwrap();
    assert_eq!(got.body.collect().await.unwrap().to_vec(), b"locked bytes");
    delete_version(&s, &b, "gov", &v1, true).await.unwrap();

    // Compliance: no bypass shortens or removes it.
    let v2 = put_version(&s, &b, "comp").await;
    let comp = ObjectLockRetentionMode::Compliance;
    set_retention(
        &s,
        &b,
        "comp",
        &v2,
        retention(comp.clone(), in_days(30)),
        false,
    )
    .await
    .unwrap();
    assert!(denied(
        set_retention(
            &s,
            &b,
            "comp",
            &v2,
            retention(gov.clone(), in_days(30)),
            true
        )
        .await
    ));
    assert!(denied(delete_version(&s, &b, "comp", &v2, true).await));
    let r = c
        .get_object_retention()
        .bucket(&b)
        .key("comp")
        .version_id(&v2)
        .send()
        .await
        .unwrap();
    assert_eq!(r.retention().and_then(|r| r.mode()), Some(&comp));

    // A legal hold stops even a bypassing delete, until it is lifted.
    let v3 = put_version(&s, &b, "held").await;
    set_hold(&s, &b, "held", &v3, true).await;
    assert!(denied(delete_version(&s, &b, "held", &v3, true).await));
    let h = c
        .get_object_legal_hold()
        .bucket(&b)
        .key("held")
        .version_id(&v3)
        .send()
        .await
        .unwrap();
    assert_eq!(
        h.legal_hold().and_then(|h| h.status()),
        Some(&ObjectLockLegalHoldStatus::On)
    );
    set_hold(&s, &b, "held", &v3, false).await;
    delete_version(&s, &b, "held", &v3, false).await.unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_take_the_lock_asked_for_or_the_default_and_copies_none() {
    let s = start().await;
    let b = locked_bucket(&s, "defaults").await;
    let c = &s.client;
    let rule = |days: i32| {
        ObjectLockConfiguration::builder()
            .object_lock_enabled(ObjectLockEnabled::Enabled)
            .rule(
                ObjectLockRule::builder()
                    .default_retention(
                        DefaultRetention::builder()
                            .mode(ObjectLockRetentionMode::Governance)
                            .days(days)
                            .build(),
                    )
                    .build(),
            )
            .build()
    };
    let e = c
        .put_object_lock_configuration()
        .bucket(&b)
        .object_lock_configuration(rule(0))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (status(&e), code(&e).as_deref()),
        (Some(400), Some("InvalidRetentionPeriod"))
    );
    c.put_object_lock_configuration()
        .bucket(&b)
        .object_lock_configuration(rule(2))
        .send()
        .await
        .unwrap();
    let got = c
        .get_object_lock_configuration()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    assert_eq!(got.object_lock_configuration(), Some(&rule(2)));

    // The default: governance, two days from the write.
    let before = SystemTime::now();
    put_version(&s, &b, "plain").await;
    let head = c
        .head_object()
        .bucket(&b)
        .key("plain")
        .send()
        .await
        .unwrap();
    assert_eq!(head.object_lock_mode(), Some(&ObjectLockMode::Governance));
    let until = SystemTime::try_from(*head.object_lock_retain_until_date().unwrap()).unwrap();
    let two_days = Duration::from_secs(2 * 86_400);
    assert!(until >= before + two_days - Duration::from_secs(1));
    assert!(until <= SystemTime::now() + two_days + Duration::from_secs(1));

    // Asked for on the write: compliance and a legal hold, through a multipart upload too.
    let up = c
        .create_multipart_upload()
        .bucket(&b)
        .key("mp")
        .object_lock_mode(ObjectLockMode::Compliance)
        .object_lock_retain_until_date(in_days(9))
        .object_lock_legal_hold_status(Hold::On)
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = c
        .upload_part()
        .bucket(&b)
        .key("mp")
        .upload_id(id)
        .part_number(1)
        .body(b"part".to_vec().into())
        .send()
        .await
        .unwrap();
    let done = c
        .complete_multipart_upload()
        .bucket(&b)
        .key("mp")
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let head = c.head_object().bucket(&b).key("mp").send().await.unwrap();
    assert_eq!(head.object_lock_mode(), Some(&ObjectLockMode::Compliance));
    assert_eq!(head.object_lock_legal_hold_status(), Some(&Hold::On));
    assert!(denied(
        delete_version(&s, &b, "mp", done.version_id().unwrap(), true).await
    ));

    // A copy of it takes the bucket's default, not the source's compliance and hold.
    c.copy_object()
        .bucket(&b)
        .key("copy")
        .copy_source(format!("{b}/mp"))
        .send()
        .await
        .unwrap();
    let head = c.head_object().bucket(&b).key("copy").send().await.unwrap();
    assert_eq!(head.object_lock_mode(), Some(&ObjectLockMode::Governance));
    assert_eq!(head.object_lock_legal_hold_status(), None);

    // Lock headers on a bucket without lock are refused, and store nothing.
    let plain = s.bucket("unlocked").await;
    let e = c
        .put_object()
        .bucket(&plain)
        .key("k")
        .object_lock_mode(ObjectLockMode::Governance)
        .object_lock_retain_until_date(in_days(1))
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (status(&e), code(&e).as_deref()),
        (Some(400), Some("InvalidRequest"))
    );
    assert!(c
        .head_object()
        .bucket(&plain)
        .key("k")
        .send()
        .await
        .is_err());
    s.stop().await;
}
