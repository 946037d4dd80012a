use crate::common::*;
use aws_sdk_s3::types::{CommonPrefix, EncodingType, Object};

const KEYS: [&str; 10] = [
    "a.txt",
    "a/b",
    "a/b/c",
    "a/b/d",
    "a/b0",
    "a/c",
    "b",
    "c/x/y",
    "sp ace/é+%",
    "z",
];

/// The keys of a listing page's objects.
fn keys_of(contents: &[Object]) -> Vec<String> {
    contents
        .iter()
        .map(|o| o.key().unwrap().to_string())
        .collect()
}

/// A listing page's common prefixes.
fn prefixes_of(prefixes: &[CommonPrefix]) -> Vec<String> {
    prefixes
        .iter()
        .map(|p| p.prefix().unwrap().to_string())
        .collect()
}

async fn filled() -> (TestServer, String) {
    let s = start().await;
    let b = s.bucket("list").await;
    for (i, k) in KEYS.iter().enumerate() {
        s.put(&b, k, data(i + 1, i as u64)).await;
    }
    (s, b)
}

/// Pages through ListObjectsV2; returns (keys, prefixes, pages).
async fn v2_all(
    s: &TestServer,
    b: &str,
    prefix: Option<&str>,
    delimiter: Option<&str>,
    max: Option<i32>,
) -> (Vec<String>, Vec<String>, usize) {
    let mut keys = Vec::new();
    let mut prefixes = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let out = s
            .list_v2_request(b)
            .set_prefix(prefix.map(str::to_string))
            .set_delimiter(delimiter.map(str::to_string))
            .set_max_keys(max)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        pages += 1;
        let n = out.contents().len() + out.common_prefixes().len();
        assert_eq!(out.key_count(), Some(n as i32));
        if let Some(m) = max {
            assert!(n <= m as usize);
        }
        keys.extend(keys_of(out.contents()));
        prefixes.extend(prefixes_of(out.common_prefixes()));
        if out.is_truncated() == Some(true) {
            token = Some(out.next_continuation_token().expect("a token").to_string());
            assert!(pages < 100);
        } else {
            assert_eq!(out.next_continuation_token(), None);
            return (keys, prefixes, pages);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_v2_prefixes_delimiters_and_pages() {
    let (s, b) = filled().await;
    let all: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
    let (keys, prefixes, pages) = v2_all(&s, &b, None, None, None).await;
    assert_eq!((keys, prefixes.len(), pages), (all.clone(), 0, 1));

    let (keys, prefixes, _) = v2_all(&s, &b, None, Some("/"), None).await;
    assert_eq!(keys, ["a.txt", "b", "z"]);
    assert_eq!(prefixes, ["a/", "c/", "sp ace/"]);

    // `a/b` is an object and `a/b/` a common prefix, side by side.
    let (keys, prefixes, _) = v2_all(&s, &b, Some("a/"), Some("/"), None).await;
    assert_eq!(keys, ["a/b", "a/b0", "a/c"]);
    assert_eq!(prefixes, ["a/b/"]);
    let (keys, prefixes, _) = v2_all(&s, &b, Some("a/b"), Some("/"), None).await;
    assert_eq!(keys, ["a/b", "a/b0"]);
    assert_eq!(prefixes, ["a/b/"]);
    let (keys, prefixes, _) = v2_all(&s, &b, Some("a/b/"), None, None).await;
    assert_eq!(
        (keys, prefixes.len()),
        (vec!["a/b/c".to_string(), "a/b/d".to_string()], 0)
    );

    // Pages of every size give the same listing, without and with a delimiter.
    for max in 1..=4 {
        let (keys, _, pages) = v2_all(&s, &b, None, None, Some(max)).await;
        assert_eq!(keys, all, "max-keys {max}");
        assert_eq!(pages, all.len().div_ceil(max as usize), "max-keys {max}");
        let (keys, prefixes, _) = v2_all(&s, &b, None, Some("/"), Some(max)).await;
        assert_eq!(keys, ["a.txt", "b", "z"], "max-keys {max}");
        assert_eq!(prefixes, ["a/", "c/", "sp ace/"], "max-keys {max}");
    }

    // start-after, and max-keys limits.
    let out = s
        .list_v2_request(&b)
        .start_after("a/b")
        .max_keys(2)
        .send()
        .await
        .unwrap();
    assert_eq!(keys_of(out.contents()), ["a/b/c", "a/b/d"]);
    assert_eq!(out.start_after(), Some("a/b"));
    let out = s.list_v2_request(&b).max_keys(0).send().await.unwrap();
    assert!(out.contents().is_empty());
    assert_eq!(out.is_truncated(), Some(false));
    let out = s.list_v2_request(&b).max_keys(5000).send().await.unwrap();
    assert_eq!(out.max_keys(), Some(1000));
    assert_eq!(out.contents().len(), KEYS.len());
    assert!(out.contents()[0].owner().is_none());
    let out = s
        .list_v2_request(&b)
        .fetch_owner(true)
        .send()
        .await
        .unwrap();
    assert!(out.contents()[0].owner().is_some());
    let o = &out.contents()[1];
    assert_eq!(o.key(), Some("a/b"));
    assert_eq!(o.size(), Some(2));
    assert_eq!(
        o.e_tag(),
        Some(format!("\"{}\"", md5_hex(&data(2, 1))).as_str())
    );

    let e = s
        .list_v2_request(&b)
        .continuation_token("not a token!")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidArgument"));
    let e = s.list_v2_request("nobucket").send().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchBucket"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_url_encoding() {
    let (s, b) = filled().await;
    let out = s
        .list_v2_request(&b)
        .prefix("sp ace/")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(out.encoding_type(), Some(&EncodingType::Url));
    assert_eq!(out.prefix(), Some("sp%20ace/"));
    assert_eq!(keys_of(out.contents()), ["sp%20ace/%C3%A9%2B%25"]);
    let out = s
        .list_v2_request(&b)
        .delimiter("/")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        prefixes_of(out.common_prefixes()),
        ["a/", "c/", "sp%20ace/"]
    );
    assert_eq!(out.delimiter(), Some("/"));
    let out = s
        .list_v1_request(&b)
        .prefix("sp")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(out.contents()[0].key(), Some("sp%20ace/%C3%A9%2B%25"));
    let out = s
        .list_v1_request(&b)
        .prefix("sp ace/")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.prefix(),
        Some("sp ace/"),
        "V1 echoes its prefix unencoded"
    );
    // Without it, keys come as they are.
    let out = s.list_v2_request(&b).prefix("sp").send().await.unwrap();
    assert_eq!(out.contents()[0].key(), Some("sp ace/é+%"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_v1_markers() {
    let (s, b) = filled().await;
    // Without a delimiter: no NextMarker, the last key is the marker.
    let mut keys = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let out = s
            .list_v1_request(&b)
            .max_keys(3)
            .set_marker(marker.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(out.next_marker(), None);
        keys.extend(keys_of(out.contents()));
        if out.is_truncated() != Some(true) {
            break;
        }
        marker = keys.last().cloned();
    }
    assert_eq!(keys, KEYS.map(str::to_string));
    // With one: NextMarker, which may be a common prefix.
    let mut keys = Vec::new();
    let mut prefixes = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let out = s
            .list_v1_request(&b)
            .delimiter("/")
            .max_keys(2)
            .set_marker(marker.clone())
            .send()
            .await
            .unwrap();
        keys.extend(keys_of(out.contents()));
        prefixes.extend(prefixes_of(out.common_prefixes()));
        if out.is_truncated() != Some(true) {
            assert_eq!(out.next_marker(), None);
            break;
        }
        marker = Some(
            out.next_marker()
                .expect("NextMarker with a delimiter")
                .to_string(),
        );
    }
    assert_eq!(keys, ["a.txt", "b", "z"]);
    assert_eq!(prefixes, ["a/", "c/", "sp ace/"]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_object_versions_of_an_unversioned_bucket() {
    let (s, b) = filled().await;
    let mut seen = Vec::new();
    let mut key_marker: Option<String> = None;
    let mut version_marker: Option<String> = None;
    loop {
        let out = s
            .list_versions_request(&b)
            .max_keys(4)
            .set_key_marker(key_marker.clone())
            .set_version_id_marker(version_marker.clone())
            .send()
            .await
            .unwrap();
        for v in out.versions() {
            assert_eq!(v.version_id(), Some("null"));
            assert_eq!(v.is_latest(), Some(true));
            seen.push(v.key().unwrap().to_string());
        }
        assert!(out.delete_markers().is_empty());
        if out.is_truncated() != Some(true) {
            break;
        }
        key_marker = out.next_key_marker().map(str::to_string);
        version_marker = out.next_version_id_marker().map(str::to_string);
        assert_eq!(version_marker.as_deref(), Some("null"));
    }
    assert_eq!(seen, KEYS.map(str::to_string));
    let out = s
        .list_versions_request(&b)
        .prefix("a/")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = out.versions().iter().map(|v| v.key().unwrap()).collect();
    assert_eq!(keys, ["a/b", "a/b0", "a/c"]);
    assert_eq!(out.common_prefixes()[0].prefix(), Some("a/b/"));
    s.stop().await;
}
