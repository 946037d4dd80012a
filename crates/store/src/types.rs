//! The values the store's operations take and return.

use crate::error::StoreError;
use bytes::Bytes;
use futures_util::Stream;
use railstore_redundancy::Mechanism;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

/// A body travelling into or out of the store, in pieces. A put ends at the stream's end; an
/// `Err` item aborts it and nothing is stored (the `s3` crate yields `BadDigest` there when a
/// trailing checksum does not match).
pub type Body = Pin<Box<dyn Stream<Item = Result<Bytes, StoreError>> + Send>>;

/// Collects a body into one buffer (tests and small objects).
pub async fn collect_body(mut body: Body) -> Result<Vec<u8>, StoreError> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    while let Some(piece) = body.next().await {
        out.extend_from_slice(&piece?);
    }
    Ok(out)
}

/// A body of bytes already in memory.
pub fn body_from(bytes: impl Into<Bytes>) -> Body {
    let b: Bytes = bytes.into();
    Box::pin(futures_util::stream::once(async move { Ok(b) }))
}

/// What a put stores next to the bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// User metadata (`x-amz-meta-*`), names in lower case without the prefix.
    pub user_metadata: BTreeMap<String, String>,
    /// Other headers stored and returned as given (`Content-Encoding`, `Cache-Control`,
    /// `Content-Disposition`, `Content-Language`, `Expires`), names in lower case.
    pub headers: BTreeMap<String, String>,
    /// Checksums the client sent and the caller verified, by algorithm (`CRC32`, `CRC32C`,
    /// `CRC64NVME`, `SHA1`, `SHA256`) → base64 value; returned on reads when asked.
    pub checksums: BTreeMap<String, String>,
    /// Checksums whose values are known only at the body's end, stored with `checksums`.
    pub checksums_at_end: Option<ChecksumsAtEnd>,
    /// `Content-MD5`: the store checks it against the body it receives.
    pub content_md5: Option<[u8; 16]>,
    /// The MD5 of the body as the client sent it, for a body the caller transformed
    /// (encrypted): the ETag is made from it instead of from the bytes stored.
    pub sent_md5: Option<SentMd5>,
    /// The mechanism for this object (custom mode); `None` lets the hybrid policy choose by
    /// size.
    pub mechanism: Option<Mechanism>,
    /// A precondition on the object this put replaces.
    pub condition: Option<WriteCondition>,
}

/// A precondition on the object a write replaces or deletes (S3's conditional writes). The
/// store checks it under the key's lock, after the body has been written and just before the
/// record, so no other write of the key comes between the check and the write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteCondition {
    /// `If-None-Match: *`: no object has the key.
    Absent,
    /// `If-Match: "etag"`: the object under the key has this ETag (without quotes).
    ETag(String),
    /// `If-Match: *`: an object has the key.
    Exists,
    /// `If-None-Match: "etag"`: no object under the key has this ETag (none at all will do).
    NotETag(String),
    /// The object under the key is this version of it: this ETag, stored at this time (an
    /// ETag alone is only a digest of the bytes, which a newer write may repeat).
    Version {
        /// Its ETag, without quotes.
        etag: String,
        /// When it was stored.
        last_modified: SystemTime,
    },
}

impl WriteCondition {
    /// Whether a write may replace `current` (the object under the key now, if any): an
    /// error says why not.
    pub(crate) fn check(
        &self,
        current: Option<&ObjectInfo>,
        bucket: &str,
        key: &str,
    ) -> Result<(), StoreError> {
        match (self, current) {
            (WriteCondition::Absent, None) => Ok(()),
            (WriteCondition::Absent, Some(_)) => Err(StoreError::PreconditionFailed(
                "an object exists under the key (If-None-Match: *)".into(),
            )),
            (WriteCondition::ETag(_), None) => Err(StoreError::NoSuchKey {
                bucket: bucket.to_string(),
                key: key.to_string(),
            }),
            (WriteCondition::ETag(want), Some(o)) if o.etag == want.trim_matches('"') => Ok(()),
            (WriteCondition::ETag(want), Some(o)) => Err(StoreError::PreconditionFailed(format!(
                "the object's ETag is \"{}\", not {want:?} (If-Match)",
                o.etag
            ))),
            (WriteCondition::Exists, None) => Err(StoreError::NoSuchKey {
                bucket: bucket.to_string(),
                key: key.to_string(),
            }),
            (WriteCondition::Exists, Some(_)) => Ok(()),
            (WriteCondition::NotETag(not), Some(o)) if o.etag == not.trim_matches('"') => {
                Err(StoreError::PreconditionFailed(format!(
                    "the object's ETag is {not:?} (If-None-Match)"
                )))
            }
            (WriteCondition::NotETag(_), _) => Ok(()),
            (WriteCondition::Version { .. }, None) => Err(StoreError::NoSuchKey {
                bucket: bucket.to_string(),
                key: key.to_string(),
            }),
            (
                WriteCondition::Version {
                    etag,
                    last_modified,
                },
                Some(o),
            ) if o.etag == *etag && o.last_modified == *last_modified => Ok(()),
            (WriteCondition::Version { .. }, Some(_)) => Err(StoreError::PreconditionFailed(
                "the object under the key is another version".into(),
            )),
        }
    }
}

/// What a multipart part carries besides its bytes (as for [`PutOptions`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartOptions {
    /// `Content-MD5`: checked against the part's bytes.
    pub content_md5: Option<[u8; 16]>,
    /// Checksums the client sent and the caller verified, by algorithm → base64 value.
    pub checksums: BTreeMap<String, String>,
    /// Checksums whose values are known only at the body's end, stored with `checksums`.
    pub checksums_at_end: Option<ChecksumsAtEnd>,
    /// As [`PutOptions::sent_md5`]: the part's ETag is made from it.
    pub sent_md5: Option<SentMd5>,
    /// An opaque string kept with the part and, once the upload completes, with the object
    /// ([`ObjectInfo::part_annotations`]): the S3 layer keeps each part's encryption IV there.
    pub annotation: Option<String>,
}

/// The MD5 of a body as the client sent it, known once the body has ended: for a body the
/// caller transforms on its way to the store (encryption), whose ETag is still the MD5 of what
/// the client sent.
#[derive(Clone)]
pub struct SentMd5(Arc<dyn Fn() -> Option<[u8; 16]> + Send + Sync>);

impl SentMd5 {
    /// `md5` is called once the body has ended without error.
    pub fn new(md5: impl Fn() -> Option<[u8; 16]> + Send + Sync + 'static) -> Self {
        SentMd5(Arc::new(md5))
    }

    /// The ETag of a body whose stored bytes have MD5 `stored`.
    pub(crate) fn etag(sent: Option<&SentMd5>, stored: [u8; 16]) -> String {
        hex::encode(sent.and_then(|f| (f.0)()).unwrap_or(stored))
    }
}

impl fmt::Debug for SentMd5 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SentMd5(..)")
    }
}

impl PartialEq for SentMd5 {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SentMd5 {}

/// Checksum values that become known only once the whole body has been read: an aws-chunked
/// trailer, or values the caller computes while the body streams. The store asks for them
/// after the body's last piece, before it writes the record, so a body of any size keeps its
/// checksums without being held in memory.
#[derive(Clone)]
pub struct ChecksumsAtEnd(Arc<dyn Fn() -> BTreeMap<String, String> + Send + Sync>);

impl ChecksumsAtEnd {
    /// `values` is called once the body has ended without error.
    pub fn new(values: impl Fn() -> BTreeMap<String, String> + Send + Sync + 'static) -> Self {
        ChecksumsAtEnd(Arc::new(values))
    }

    /// `checksums` with the values known now added (they win over equal names).
    pub(crate) fn added_to(
        at_end: Option<&ChecksumsAtEnd>,
        mut checksums: BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        if let Some(f) = at_end {
            checksums.extend((f.0)());
        }
        checksums
    }
}

impl fmt::Debug for ChecksumsAtEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChecksumsAtEnd(..)")
    }
}

impl PartialEq for ChecksumsAtEnd {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ChecksumsAtEnd {}

/// An object's description, as HEAD returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    /// The key.
    pub key: String,
    /// Bytes.
    pub size: u64,
    /// Hex MD5 of the body for single-part objects, `md5(part md5s)-N` for multipart ones;
    /// without quotes.
    pub etag: String,
    /// When it was stored.
    #[serde(with = "unix_nanos")]
    pub last_modified: SystemTime,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// User metadata.
    pub user_metadata: BTreeMap<String, String>,
    /// Other stored headers.
    pub headers: BTreeMap<String, String>,
    /// Checksums stored with it (full-object ones; for multipart objects, of the parts' values
    /// as S3 composes them — see `s3`).
    pub checksums: BTreeMap<String, String>,
    /// The mechanism protecting it (`rep3`, `split3+3`, …) — its storage class.
    pub mechanism: String,
    /// Parts, for an object made by a multipart upload; 0 otherwise.
    pub parts: u32,
    /// The sizes of those parts, in order (empty for single-part objects, and for objects
    /// completed before sizes were kept): GET by part number and SSE find parts by them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub part_sizes: Vec<u64>,
    /// The upload's numbers of those parts, in order (with `part_sizes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub part_numbers: Vec<u32>,
    /// The checksums each of those parts was stored with, in order (empty when none had any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub part_checksums: Vec<BTreeMap<String, String>>,
    /// Those parts' annotations, in order (empty when none had one; `""` for one without).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub part_annotations: Vec<String>,
    /// Its version id in a bucket with versioning; `None` is the *null* version (every object
    /// of a bucket that never had versioning, and those written while it was suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// A delete marker: the version a delete made in a versioned bucket (no body).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_marker: bool,
}

impl Default for ObjectInfo {
    /// An empty object stored at the epoch, with no key (for tests and builders).
    fn default() -> Self {
        ObjectInfo {
            key: String::new(),
            size: 0,
            etag: String::new(),
            last_modified: SystemTime::UNIX_EPOCH,
            content_type: None,
            user_metadata: BTreeMap::new(),
            headers: BTreeMap::new(),
            checksums: BTreeMap::new(),
            mechanism: String::new(),
            parts: 0,
            part_sizes: Vec::new(),
            part_numbers: Vec::new(),
            part_checksums: Vec::new(),
            part_annotations: Vec::new(),
            version_id: None,
            delete_marker: false,
        }
    }
}

/// A byte range as a request states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `bytes=first-last` (inclusive) or `bytes=first-` (`last` = `None`).
    FromTo {
        /// First byte.
        first: u64,
        /// Last byte, inclusive.
        last: Option<u64>,
    },
    /// `bytes=-n`: the last n bytes.
    Suffix(u64),
}

impl RangeSpec {
    /// The `(start, end)` (end exclusive) this range selects in an object of `size` bytes, or
    /// `InvalidRange` when it selects nothing.
    pub fn resolve(self, size: u64) -> Result<(u64, u64), StoreError> {
        match self {
            RangeSpec::FromTo { first, last } => {
                if first >= size || last.is_some_and(|l| l < first) {
                    return Err(StoreError::InvalidRange { size });
                }
                let end = last.map_or(size, |l| l.saturating_add(1).min(size));
                Ok((first, end))
            }
            RangeSpec::Suffix(n) => {
                if n == 0 || size == 0 {
                    return Err(StoreError::InvalidRange { size });
                }
                Ok((size.saturating_sub(n), size))
            }
        }
    }
}

/// A read: the object's description, the byte range being returned, and the bytes.
pub struct GetObject {
    /// The object.
    pub info: ObjectInfo,
    /// `(start, end)` of the returned bytes, end exclusive; `(0, size)` without a range.
    pub range: (u64, u64),
    /// The bytes, read lazily as the stream is polled; dropping it reads nothing more.
    pub body: Body,
}

impl std::fmt::Debug for GetObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetObject")
            .field("info", &self.info)
            .field("range", &self.range)
            .finish()
    }
}

/// A bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketInfo {
    /// Its name.
    pub name: String,
    /// When it was created.
    #[serde(with = "unix_nanos")]
    pub created: SystemTime,
    /// Its settings by name (the S3 layer's bucket configurations: encryption, CORS, …), kept
    /// as the caller gave them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
}

/// A listing request (ListObjects V1 and V2 both reduce to it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Only keys starting with this.
    pub prefix: String,
    /// Roll keys up to the first occurrence of this after the prefix into common prefixes.
    pub delimiter: Option<String>,
    /// Start after this key or common prefix (V1 marker, V2 start-after or continuation).
    pub after: Option<String>,
    /// Most entries (objects plus common prefixes) in the page; S3 caps it at 1000.
    pub max_keys: usize,
}

/// One object in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    /// The key.
    pub key: String,
    /// Bytes.
    pub size: u64,
    /// ETag without quotes.
    pub etag: String,
    /// When it was stored.
    pub last_modified: SystemTime,
    /// Its mechanism.
    pub mechanism: String,
    /// The object's stored [`ACL_HEADER`], if it has one: listings show owners from it.
    pub acl: Option<String>,
}

/// The stored header (never sent as one) the S3 layer keeps an object's owner and ACL in;
/// listings return it with each object ([`ListEntry::acl`]).
pub const ACL_HEADER: &str = "x-railstore-acl";

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Objects, in key order.
    pub objects: Vec<ListEntry>,
    /// Common prefixes, in order.
    pub prefixes: Vec<String>,
    /// More entries follow.
    pub truncated: bool,
    /// When truncated: the last key or common prefix of this page; pass it as
    /// [`ListQuery::after`] for the next page.
    pub next_after: Option<String>,
}

/// A multipart upload in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadInfo {
    /// The key it will create.
    pub key: String,
    /// Its id.
    pub upload_id: String,
    /// When it was created.
    #[serde(with = "unix_nanos")]
    pub initiated: SystemTime,
}

/// A part of a multipart upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartInfo {
    /// 1 to 10000.
    pub number: u32,
    /// Hex MD5 of the part, without quotes.
    pub etag: String,
    /// Bytes.
    pub size: u64,
    /// When it was uploaded.
    #[serde(with = "unix_nanos")]
    pub last_modified: SystemTime,
    /// Checksums the client sent with it.
    pub checksums: BTreeMap<String, String>,
    /// What the caller gave to keep with it ([`PartOptions::annotation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<String>,
}

/// `SystemTime` as nanoseconds since the Unix epoch.
pub(crate) mod unix_nanos {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    pub fn to_nanos(t: SystemTime) -> u64 {
        t.duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(to_nanos(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        Ok(UNIX_EPOCH + Duration::from_nanos(u64::deserialize(d)?))
    }
}
