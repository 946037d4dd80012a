//! Object and bucket tagging: Get/Put/DeleteObjectTagging, tags given with PutObject,
//! CreateMultipartUpload and CopyObject (`x-amz-tagging`), their count on GET and HEAD, and
//! Get/Put/DeleteBucketTagging.
//!
//! An object's tags live in its stored headers (never sent as headers), sorted by key; a
//! change rewrites the object's record only, not its body.

use crate::access::Seen;
use crate::errors::{err, no_configuration, store_error};
use crate::service::RailS3;
use crate::versioning;
use railstore_store::{version_name, ObjectInfo, StoreError};
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;

/// The stored header that holds an object's tags (`k=v&k2=v2`, URL-encoded, sorted).
const STORED: &str = "x-railstore-tagging";
/// The bucket setting that holds a bucket's tags, in the same form.
const BUCKET_SETTING: &str = "tagging";
/// S3's limits.
const OBJECT_TAGS_MAX: usize = 10;
const BUCKET_TAGS_MAX: usize = 50;
const KEY_CHARS_MAX: usize = 128;
const VALUE_CHARS_MAX: usize = 256;

/// A tag set, by key.
pub(crate) type Tags = BTreeMap<String, String>;

fn invalid_tag(why: impl Into<String>) -> s3s::S3Error {
    err(S3ErrorCode::InvalidTag, why)
}

/// Checks a tag set against S3's limits; `pairs` in the order given (duplicates refused).
fn checked(pairs: Vec<(String, String)>, max: usize) -> S3Result<Tags> {
    if pairs.len() > max {
        return Err(invalid_tag(format!(
            "Object tags cannot be greater than {max}"
        )));
    }
    let mut tags = Tags::new();
    for (k, v) in pairs {
        if k.is_empty() || k.chars().count() > KEY_CHARS_MAX {
            return Err(invalid_tag(format!(
                "A tag key must be 1 to {KEY_CHARS_MAX} characters"
            )));
        }
        if v.chars().count() > VALUE_CHARS_MAX {
            return Err(invalid_tag(format!(
                "A tag value must be at most {VALUE_CHARS_MAX} characters"
            )));
        }
        if tags.insert(k, v).is_some() {
            return Err(invalid_tag(
                "Cannot provide multiple Tags with the same key",
            ));
        }
    }
    Ok(tags)
}

/// The pairs of a `k=v&k2=v2` text, URL-decoded (`k` alone: empty value); `None` when it is
/// not URL-encoded.
pub(crate) fn pairs(v: &str) -> Option<Vec<(String, String)>> {
    v.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((url_decode(k)?, url_decode(v)?))
        })
        .collect()
}

/// The tags of an `x-amz-tagging` header (`k=v&k2=v2`, URL-encoded; `k` alone: empty value).
pub(crate) fn from_header(v: &str) -> S3Result<Tags> {
    let pairs =
        pairs(v).ok_or_else(|| invalid_tag("The x-amz-tagging header is not URL-encoded"))?;
    checked(pairs, OBJECT_TAGS_MAX)
}

fn from_set(set: &TagSet, max: usize) -> S3Result<Tags> {
    let pairs = set
        .iter()
        .map(|t| {
            let k = t.key.clone().unwrap_or_default();
            (k, t.value.clone().unwrap_or_default())
        })
        .collect();
    checked(pairs, max)
}

fn to_set(tags: &Tags) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

fn encode(tags: &Tags) -> String {
    tags.iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                crate::util::url_encode(k),
                crate::util::url_encode(v)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Decodes `%XX` escapes (and `+` as a space, as query strings have it).
fn url_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

/// Stores `tags` (none: removes them) in an object's headers.
pub(crate) fn set_stored(headers: &mut BTreeMap<String, String>, tags: &Tags) {
    if tags.is_empty() {
        headers.remove(STORED);
    } else {
        headers.insert(STORED.to_string(), encode(tags));
    }
}

/// An object's tags.
pub(crate) fn stored(info: &ObjectInfo) -> Tags {
    // Written by `set_stored` only, so it parses.
    info.headers
        .get(STORED)
        .and_then(|v| from_header(v).ok())
        .unwrap_or_default()
}

/// How many tags an object has, as GET and HEAD answer (`x-amz-tagging-count`): none when 0.
pub(crate) fn count(info: &ObjectInfo) -> Option<i32> {
    let n = stored(info).len();
    (n > 0).then_some(n as i32)
}

pub(crate) async fn get_object_tagging(
    s3: &RailS3,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let input = req.input;
    let info = s3
        .store
        .head_object_version(&input.bucket, &input.key, input.version_id.as_deref())
        .await
        .map_err(store_error)?;
    crate::access::confirm_seen(&req.extensions, &info, false)?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: to_set(&stored(&info)),
        version_id: versioning::version_header(&s3.store, &input.bucket, &info),
    }))
}

/// Replaces the tags of an object's current version (`version`, when named) with `tags`
/// (none: removes them). Older versions keep the tags they were stored with.
async fn replace(
    s3: &RailS3,
    (bucket, key, version): (&str, &str, Option<&str>),
    tags: Tags,
    seen: Seen,
) -> S3Result<()> {
    s3.store
        .update_object_headers(bucket, key, |current, headers| {
            if !seen.matches(current) {
                return Err(crate::access::changed_since_checked_store());
            }
            if version.is_some_and(|v| v != version_name(current.version_id.as_deref())) {
                return Err(StoreError::InvalidArgument(
                    "only the current version's tags can be changed".into(),
                ));
            }
            set_stored(headers, &tags);
            Ok(())
        })
        .await
        .map_err(store_error)?;
    Ok(())
}

pub(crate) async fn put_object_tagging(
    s3: &RailS3,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let seen = crate::access::seen(&req.extensions, false);
    let input = req.input;
    let tags = from_set(&input.tagging.tag_set, OBJECT_TAGS_MAX)?;
    let target = (
        input.bucket.as_str(),
        input.key.as_str(),
        input.version_id.as_deref(),
    );
    replace(s3, target, tags, seen).await?;
    Ok(S3Response::new(PutObjectTaggingOutput::default()))
}

pub(crate) async fn delete_object_tagging(
    s3: &RailS3,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let seen = crate::access::seen(&req.extensions, false);
    let input = req.input;
    let target = (
        input.bucket.as_str(),
        input.key.as_str(),
        input.version_id.as_deref(),
    );
    replace(s3, target, Tags::new(), seen).await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput::default()))
}

pub(crate) async fn get_bucket_tagging(
    s3: &RailS3,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let stored = s3
        .store
        .bucket_setting(&req.input.bucket, BUCKET_SETTING)
        .map_err(store_error)?;
    let Some(text) = stored else {
        return Err(no_configuration(
            S3ErrorCode::NoSuchTagSet,
            "The TagSet does not exist",
        ));
    };
    // Written by `encode` only, so it parses.
    let tags: Tags = pairs(&text).unwrap_or_default().into_iter().collect();
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: to_set(&tags),
    }))
}

pub(crate) async fn put_bucket_tagging(
    s3: &RailS3,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let input = req.input;
    let tags = from_set(&input.tagging.tag_set, BUCKET_TAGS_MAX)?;
    s3.store
        .set_bucket_setting(&input.bucket, BUCKET_SETTING, Some(encode(&tags)))
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutBucketTaggingOutput::default()))
}

pub(crate) async fn delete_bucket_tagging(
    s3: &RailS3,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    s3.store
        .set_bucket_setting(&req.input.bucket, BUCKET_SETTING, None)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tags_decode_sort_and_keep_the_limits() {
        let t = from_header("foo=bar&bar&a%20b=c+d").unwrap();
        let got: Vec<_> = t.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, [("a b", "c d"), ("bar", ""), ("foo", "bar")]);
        assert_eq!(
            from_header(&encode(&t)).unwrap(),
            t,
            "stored form round-trips"
        );
        let many: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        assert!(from_header(&many[..10].join("&")).is_ok());
        for bad in [
            many.join("&"),
            "a=1&a=2".to_string(),
            format!("{}=v", "k".repeat(129)),
            format!("k={}", "v".repeat(257)),
            "k=%zz".to_string(),
        ] {
            assert!(from_header(&bad).is_err(), "{bad}");
        }
    }
}
