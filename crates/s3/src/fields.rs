//! What the S3 operations share: the fields objects are stored with, request bodies on their
//! way to the store, checksums in answers, and the refusals of what railstore does not do.

use crate::checksum::{self, Algorithm, Outcome};
use crate::errors::{err, not_implemented};
use crate::service::MECHANISM_HEADER;
use crate::util;
use http::{HeaderMap, HeaderValue};
use railstore_store::{Body, ChecksumsAtEnd, Mechanism, PutOptions, WriteCondition};
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Result};
use std::collections::{BTreeMap, HashMap};

/// S3's limit on user metadata: keys and values together, in bytes.
const USER_METADATA_BYTES_MAX: usize = 2048;

// The s3s inputs and outputs are distinct types with the same field names; these macros
// read or fill those fields wherever they stand.

/// The [`ObjectFields`] of a put, copy or multipart-upload input.
macro_rules! object_fields {
    ($input:expr) => {
        ObjectFields {
            content_type: $input.content_type.as_ref(),
            metadata: $input.metadata.as_ref(),
            cache_control: $input.cache_control.as_ref(),
            content_disposition: $input.content_disposition.as_ref(),
            content_encoding: $input.content_encoding.as_ref(),
            content_language: $input.content_language.as_ref(),
            expires: $input.expires.as_ref(),
        }
    };
}

/// The checksum [`Plan`] of a body-carrying input (PutObject, UploadPart); `$upload` is the
/// algorithm the multipart upload was created with, if any.
macro_rules! checksum_plan {
    ($input:expr, $upload:expr, $headers:expr, $trailers:expr) => {
        Plan::from_request(
            [
                (Algorithm::Crc32, $input.checksum_crc32.as_ref()),
                (Algorithm::Crc32c, $input.checksum_crc32c.as_ref()),
                (Algorithm::Crc64Nvme, $input.checksum_crc64nvme.as_ref()),
                (Algorithm::Sha1, $input.checksum_sha1.as_ref()),
                (Algorithm::Sha256, $input.checksum_sha256.as_ref()),
            ],
            $input
                .checksum_algorithm
                .as_ref()
                .map(ChecksumAlgorithm::as_str),
            $upload,
            $headers,
            $trailers,
        )?
    };
}

/// `$ty { fields }` with the [`ChecksumFields`] `$c` filled in, the rest default; `untyped`
/// for outputs without a checksum type (parts).
macro_rules! with_checksums {
    ($ty:ident { $($field:ident: $value:expr),* $(,)? }, $c:expr) => {{
        let mut c: ChecksumFields = $c;
        let kind = c.kind.take();
        with_checksums!($ty { checksum_type: kind, $($field: $value),* }, c, untyped)
    }};
    ($ty:ident { $($field:ident: $value:expr),* $(,)? }, $c:expr, untyped) => {{
        let c: ChecksumFields = $c;
        // Some outputs (CopyObjectResult, Part) have no fields besides these.
        #[allow(clippy::needless_update)]
        let output = $ty {
            $($field: $value,)*
            checksum_crc32: c.crc32,
            checksum_crc32c: c.crc32c,
            checksum_crc64nvme: c.crc64nvme,
            checksum_sha1: c.sha1,
            checksum_sha256: c.sha256,
            ..$ty::default()
        };
        output
    }};
}

/// A request body ready for the store.
pub(crate) struct Incoming {
    pub(crate) body: Body,
    /// The checksums to store with it whose values are known before the body is read.
    pub(crate) checksums: BTreeMap<String, String>,
    /// The rest, known once the body has been read.
    pub(crate) at_end: Option<ChecksumsAtEnd>,
    pub(crate) outcome: Outcome,
}

/// The store's precondition from a write's `If-Match` and `If-None-Match` headers (an ETag or
/// `*` in either; not both headers at once).
pub(crate) fn write_condition(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<Option<WriteCondition>> {
    Ok(Some(match (if_match, if_none_match) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(not_implemented(
                "If-Match and If-None-Match together on a write are not supported",
            ))
        }
        (Some(ETagCondition::ETag(e)), None) => WriteCondition::ETag(e.value().to_string()),
        (Some(ETagCondition::Any), None) => WriteCondition::Exists,
        (None, Some(ETagCondition::Any)) => WriteCondition::Absent,
        (None, Some(ETagCondition::ETag(e))) => WriteCondition::NotETag(e.value().to_string()),
    }))
}

/// The checksums a write answers with: every value that was checked (the stored ones when
/// the store saw no end). `outcome` and `stored` are an [`Incoming`]'s, its body spent.
pub(crate) fn answered_checksums(
    outcome: &Outcome,
    stored: &BTreeMap<String, String>,
) -> ChecksumFields {
    ChecksumFields::from_map(&outcome.values().unwrap_or_else(|| stored.clone()))
}

#[derive(Default)]
pub(crate) struct ChecksumFields {
    pub(crate) crc32: Option<String>,
    pub(crate) crc32c: Option<String>,
    pub(crate) crc64nvme: Option<String>,
    pub(crate) sha1: Option<String>,
    pub(crate) sha256: Option<String>,
    pub(crate) kind: Option<ChecksumType>,
}

impl ChecksumFields {
    pub(crate) fn from_map(map: &BTreeMap<String, String>) -> ChecksumFields {
        let get = |a| checksum::stored(map, a);
        let kind = Algorithm::ALL
            .into_iter()
            .find_map(get)
            .map(|v| ChecksumType::from(checksum::checksum_type(&v).to_string()));
        ChecksumFields {
            crc32: get(Algorithm::Crc32),
            crc32c: get(Algorithm::Crc32c),
            crc64nvme: get(Algorithm::Crc64Nvme),
            sha1: get(Algorithm::Sha1),
            sha256: get(Algorithm::Sha256),
            kind,
        }
    }
}

#[derive(Default)]
pub(crate) struct Described {
    pub(crate) content_type: Option<String>,
    pub(crate) metadata: Option<HashMap<String, String>>,
    pub(crate) cache_control: Option<String>,
    pub(crate) content_disposition: Option<String>,
    pub(crate) content_encoding: Option<String>,
    pub(crate) content_language: Option<String>,
    pub(crate) expires: Option<Timestamp>,
    pub(crate) e_tag: Option<ETag>,
    pub(crate) last_modified: Option<Timestamp>,
    pub(crate) checksums: ChecksumFields,
}

pub(crate) fn mechanism_headers(mechanism: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(mechanism) {
        h.insert(MECHANISM_HEADER, v);
    }
    h
}

pub(crate) fn content_md5(v: Option<&String>) -> S3Result<Option<[u8; 16]>> {
    let Some(v) = v else { return Ok(None) };
    checksum::unb64(v)
        .and_then(|raw| <[u8; 16]>::try_from(raw).ok())
        .map(Some)
        .ok_or_else(|| {
            err(
                S3ErrorCode::InvalidDigest,
                "The Content-MD5 you specified is not valid.",
            )
        })
}

/// `Content-Encoding` as stored: `aws-chunked` is the transfer's, not the object's.
pub(crate) fn stored_content_encoding(v: Option<&String>) -> Option<String> {
    let kept: Vec<&str> = v?
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The fields a put, copy (`REPLACE`) or multipart upload stores with an object.
pub(crate) struct ObjectFields<'a> {
    pub(crate) content_type: Option<&'a String>,
    pub(crate) metadata: Option<&'a Metadata>,
    pub(crate) cache_control: Option<&'a String>,
    pub(crate) content_disposition: Option<&'a String>,
    pub(crate) content_encoding: Option<&'a String>,
    pub(crate) content_language: Option<&'a String>,
    pub(crate) expires: Option<&'a Timestamp>,
}

pub(crate) fn put_options(
    d: ObjectFields<'_>,
    mechanism: Option<Mechanism>,
) -> S3Result<PutOptions> {
    let mut user_metadata = BTreeMap::new();
    let mut bytes = 0;
    for (k, v) in d.metadata.into_iter().flatten() {
        bytes += k.len() + v.len();
        user_metadata.insert(k.to_ascii_lowercase(), v.clone());
    }
    if bytes > USER_METADATA_BYTES_MAX {
        return Err(err(
            S3ErrorCode::MetadataTooLarge,
            format!(
                "Your metadata headers exceed the maximum allowed metadata size \
                 ({bytes} > {USER_METADATA_BYTES_MAX} bytes)."
            ),
        ));
    }
    let mut headers = BTreeMap::new();
    let mut put = |name: &str, v: Option<String>| {
        if let Some(v) = v {
            headers.insert(name.to_string(), v);
        }
    };
    put("cache-control", d.cache_control.cloned());
    put("content-disposition", d.content_disposition.cloned());
    put(
        "content-encoding",
        stored_content_encoding(d.content_encoding),
    );
    put("content-language", d.content_language.cloned());
    put("expires", d.expires.and_then(util::http_date));
    Ok(PutOptions {
        content_type: d.content_type.filter(|c| !c.is_empty()).cloned(),
        user_metadata,
        headers,
        mechanism,
        ..PutOptions::default()
    })
}

/// `STANDARD` as whichever storage-class type an output has.
pub(crate) fn standard_class<T: From<String>>() -> T {
    T::from(StorageClass::STANDARD.to_string())
}

/// A bucket setting stored as JSON (CORS rules, lifecycle rules): `None` when the bucket has
/// none, or it cannot be read (then said in the log).
pub(crate) fn json_setting<T: serde::de::DeserializeOwned>(
    store: &railstore_store::Store,
    bucket: &str,
    setting: &str,
) -> Option<T> {
    let text = store.bucket_setting(bucket, setting).ok()??;
    serde_json::from_str(&text)
        .map_err(
            |e| tracing::warn!(bucket, setting, error = %e, "a stored bucket setting is damaged"),
        )
        .ok()
}
