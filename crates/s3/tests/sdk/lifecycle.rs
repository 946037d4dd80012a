//! Lifecycle: the configuration kept as given and checked, the expiration header, and the
//! worker run as of a later day.

use crate::common::*;
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, ExpirationStatus,
    LifecycleExpiration, LifecycleRule, LifecycleRuleFilter,
};
use std::time::{Duration, SystemTime};

fn expire_rule(id: Option<&str>, prefix: &str, days: i32) -> LifecycleRule {
    LifecycleRule::builder()
        .set_id(id.map(str::to_string))
        .filter(LifecycleRuleFilter::builder().prefix(prefix).build())
        .status(ExpirationStatus::Enabled)
        .expiration(LifecycleExpiration::builder().days(days).build())
        .build()
        .unwrap()
}

async fn put_rules(s: &TestServer, bucket: &str, rules: Vec<LifecycleRule>) -> Result<(), String> {
    s.client
        .put_bucket_lifecycle_configuration()
        .bucket(bucket)
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .set_rules(Some(rules))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .map(|_| ())
        .map_err(|e| code(&e).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_rules_are_checked_reported_and_applied() {
    let s = start().await;
    let b = s.bucket("lifecycle").await;
    let c = &s.client;
    let e = c
        .get_bucket_lifecycle_configuration()
        .bucket(&b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchLifecycleConfiguration"));
    // Refused: zero days, a duplicate ID, an ID too long.
    for (rules, want) in [
        (vec![expire_rule(Some("r"), "a/", 0)], "InvalidArgument"),
        (
            vec![
                expire_rule(Some("r"), "a/", 1),
                expire_rule(Some("r"), "b/", 2),
            ],
            "InvalidArgument",
        ),
        (
            vec![expire_rule(Some(&"i".repeat(256)), "a/", 1)],
            "InvalidArgument",
        ),
    ] {
        assert_eq!(put_rules(&s, &b, rules).await, Err(want.to_string()));
    }
    let abort = LifecycleRule::builder()
        .id("uploads")
        .filter(LifecycleRuleFilter::builder().prefix("").build())
        .status(ExpirationStatus::Enabled)
        .abort_incomplete_multipart_upload(
            AbortIncompleteMultipartUpload::builder()
                .days_after_initiation(2)
                .build(),
        )
        .build()
        .unwrap();
    put_rules(
        &s,
        &b,
        vec![
            expire_rule(Some("tmp"), "tmp/", 1),
            expire_rule(None, "logs/", 30),
            abort,
        ],
    )
    .await
    .unwrap();
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket(&b)
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules().len(), 3);
    assert_eq!(got.rules()[0].id(), Some("tmp"));
    assert!(got.rules()[1].id().is_some(), "an ID was given");

    // PUT answers when the object will expire: the next midnight after a day.
    let put = s
        .put_request(&b, "tmp/a")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    let header = put.expiration().unwrap();
    assert!(header.starts_with("expiry-date=\""), "{header}");
    assert!(
        header.ends_with("00:00:00 GMT\", rule-id=\"tmp\""),
        "{header}"
    );
    s.put(&b, "logs/a", b"y".to_vec()).await;
    s.put(&b, "keep/a", b"z".to_vec()).await;
    let upload = s
        .create_upload_request(&b, "big")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();

    // Today nothing has expired; in three days the tmp object and the upload have; in a
    // month the logs too, and never the object no rule names.
    let now = SystemTime::now();
    let r = railstore_s3::apply_lifecycle(&s.store, now).await;
    assert_eq!((r.objects_deleted, r.uploads_aborted), (0, 0));
    let r = railstore_s3::apply_lifecycle(&s.store, now + Duration::from_secs(3 * 86_400)).await;
    assert_eq!((r.objects_deleted, r.uploads_aborted, r.errors), (1, 1, 0));
    assert!(s.head_request(&b, "tmp/a").send().await.is_err());
    assert!(s.head_request(&b, "logs/a").send().await.is_ok());
    let uploads = c.list_multipart_uploads().bucket(&b).send().await.unwrap();
    assert!(uploads
        .uploads()
        .iter()
        .all(|u| u.upload_id() != Some(&upload)));
    let r = railstore_s3::apply_lifecycle(&s.store, now + Duration::from_secs(40 * 86_400)).await;
    assert_eq!(r.objects_deleted, 1);
    assert!(s.head_request(&b, "keep/a").send().await.is_ok());

    c.delete_bucket_lifecycle().bucket(&b).send().await.unwrap();
    let put = s
        .put_request(&b, "tmp/b")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(put.expiration(), None);
    s.stop().await;
}
