//! Object and bucket tagging: tags given with a write, replaced, removed, counted, copied,
//! and S3's limits.

use crate::common::*;
use aws_sdk_s3::types::{Tag, Tagging, TaggingDirective};

fn tags(pairs: &[(&str, &str)]) -> Tagging {
    Tagging::builder()
        .set_tag_set(Some(
            pairs
                .iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build().unwrap())
                .collect(),
        ))
        .build()
        .unwrap()
}

async fn object_tags(s: &TestServer, bucket: &str, key: &str) -> Vec<(String, String)> {
    let out = s
        .client
        .get_object_tagging()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap();
    out.tag_set()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_tags_are_set_replaced_counted_and_copied() {
    let s = start().await;
    let b = s.bucket("tags").await;
    let c = &s.client;
    let body = data(200_000, 4);
    s.put_request(&b, "k")
        .tagging("foo=bar&bar&a%20b=c")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    assert_eq!(
        object_tags(&s, &b, "k").await,
        pairs(&[("a b", "c"), ("bar", ""), ("foo", "bar")]),
        "sorted by key"
    );
    let got = s.get_request(&b, "k").send().await.unwrap();
    assert_eq!(got.tag_count(), Some(3));
    let etag = got.e_tag().map(str::to_string);

    c.put_object_tagging()
        .bucket(&b)
        .key("k")
        .tagging(tags(&[("key3", "val3")]))
        .send()
        .await
        .unwrap();
    assert_eq!(object_tags(&s, &b, "k").await, pairs(&[("key3", "val3")]));
    // Over the limits: refused, and the tags stay.
    let eleven: Vec<(String, String)> = (0..11).map(|i| (i.to_string(), "v".into())).collect();
    let too_many: Vec<(&str, &str)> = eleven
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let long_key = "k".repeat(129);
    for bad in [tags(&too_many), tags(&[(long_key.as_str(), "v")])] {
        let e = c
            .put_object_tagging()
            .bucket(&b)
            .key("k")
            .tagging(bad)
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e).as_deref(), Some("InvalidTag"));
    }
    assert_eq!(object_tags(&s, &b, "k").await, pairs(&[("key3", "val3")]));
    // The body and ETag are untouched by tagging.
    let got = s.get_request(&b, "k").send().await.unwrap();
    assert_eq!(got.e_tag().map(str::to_string), etag);
    assert!(got.body.collect().await.unwrap().into_bytes()[..] == body[..]);

    // Copies keep the source's tags, or take the request's with REPLACE.
    s.copy_request(&b, "copy")
        .copy_source(format!("{b}/k"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        object_tags(&s, &b, "copy").await,
        pairs(&[("key3", "val3")])
    );
    s.copy_request(&b, "retagged")
        .copy_source(format!("{b}/k"))
        .tagging_directive(TaggingDirective::Replace)
        .tagging("x=y")
        .send()
        .await
        .unwrap();
    assert_eq!(object_tags(&s, &b, "retagged").await, pairs(&[("x", "y")]));

    c.delete_object_tagging()
        .bucket(&b)
        .key("k")
        .send()
        .await
        .unwrap();
    assert!(object_tags(&s, &b, "k").await.is_empty());
    assert_eq!(
        s.get_request(&b, "k").send().await.unwrap().tag_count(),
        None
    );
    let e = c
        .get_object_tagging()
        .bucket(&b)
        .key("missing")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchKey"));

    // Tags given when a multipart upload starts end on its object.
    let id = s
        .create_upload_request(&b, "mp")
        .tagging("Hello=World")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let part = s
        .upload_part_request(&b, "mp")
        .upload_id(&id)
        .part_number(1)
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    s.complete_request(&b, "mp")
        .upload_id(&id)
        .multipart_upload(completed(&[(1, part.e_tag().unwrap().to_string())]))
        .send()
        .await
        .unwrap();
    assert_eq!(
        object_tags(&s, &b, "mp").await,
        pairs(&[("Hello", "World")])
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_tags_are_set_and_removed() {
    let s = start().await;
    let b = s.bucket("btags").await;
    let c = &s.client;
    let e = c.get_bucket_tagging().bucket(&b).send().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchTagSet"));
    assert_eq!(status(&e), Some(404));
    c.put_bucket_tagging()
        .bucket(&b)
        .tagging(tags(&[("team", "storage"), ("cost centre", "42")]))
        .send()
        .await
        .unwrap();
    let got = c.get_bucket_tagging().bucket(&b).send().await.unwrap();
    let got: Vec<_> = got
        .tag_set()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect();
    assert_eq!(got, pairs(&[("cost centre", "42"), ("team", "storage")]));
    c.delete_bucket_tagging().bucket(&b).send().await.unwrap();
    let e = c.get_bucket_tagging().bucket(&b).send().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchTagSet"));
    s.stop().await;
}
