//! Object operations: put, get, head, delete (one or many).

use crate::acl;
use crate::body::Outgoing;
use crate::checksum::{Algorithm, Plan};
use crate::errors::{err, invalid_request, not_implemented, store_error};
use crate::fields::*;
use crate::lifecycle;
use crate::lock::{self, lock_requested};
use crate::service::RailS3;
use crate::sse;
use crate::tagging;
use crate::util::{self, Conditions, Verdict};
use crate::versioning;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode};
use railstore_store::{version_name, Deleted, ObjectInfo, RangeSpec, StoreError};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use std::collections::HashMap;

/// Most keys one DeleteObjects request names, as S3.
const DELETE_KEYS_MAX: usize = 1000;
const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

/// The conditional headers of a GET or HEAD input.
macro_rules! read_conditions {
    ($input:expr) => {
        Conditions {
            if_match: $input.if_match.as_ref(),
            if_none_match: $input.if_none_match.as_ref(),
            if_modified_since: $input.if_modified_since.as_ref(),
            if_unmodified_since: $input.if_unmodified_since.as_ref(),
        }
    };
}

/// A GET or HEAD output: `$ty { fields }` with the object's [`Described`] `$d` filled in.
macro_rules! described_output {
    ($ty:ident { $($field:ident: $value:expr),* $(,)? }, $d:expr) => {{
        let d: Described = $d;
        with_checksums!($ty {
            $($field: $value,)*
            content_type: d.content_type,
            metadata: d.metadata,
            cache_control: d.cache_control,
            content_disposition: d.content_disposition,
            content_encoding: d.content_encoding,
            content_language: d.content_language,
            expires: d.expires,
            e_tag: d.e_tag,
            last_modified: d.last_modified,
        }, d.checksums)
    }};
}

/// The object's description as GET and HEAD return it.
fn described(info: &ObjectInfo, checksum_mode: bool, whole: bool) -> Described {
    let h = |name: &str| info.headers.get(name).cloned();
    let mut d = Described {
        content_type: Some(
            info.content_type
                .clone()
                .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.to_string()),
        ),
        metadata: (!info.user_metadata.is_empty()).then(|| {
            info.user_metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<HashMap<_, _>>()
        }),
        cache_control: h("cache-control"),
        content_disposition: h("content-disposition"),
        content_encoding: h("content-encoding"),
        content_language: h("content-language"),
        expires: h("expires").as_deref().and_then(util::parse_http_date),
        e_tag: Some(ETag::Strong(info.etag.clone())),
        last_modified: Some(util::timestamp(info.last_modified)),
        ..Described::default()
    };
    if checksum_mode && whole {
        d.checksums = ChecksumFields::from_map(&info.checksums);
    }
    d
}

fn range_spec(r: Option<&Range>) -> Option<RangeSpec> {
    r.map(|r| match *r {
        Range::Int { first, last } => RangeSpec::FromTo { first, last },
        Range::Suffix { length } => RangeSpec::Suffix(length),
    })
}

fn verdict_error(v: Verdict, info: &ObjectInfo) -> S3Result<()> {
    match v {
        Verdict::Proceed => Ok(()),
        Verdict::PreconditionFailed => Err(err(
            S3ErrorCode::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold",
        )),
        Verdict::NotModified => {
            let mut e = S3Error::new(S3ErrorCode::NotModified);
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", info.etag)) {
                h.insert(http::header::ETAG, v);
            }
            if let Some(d) = util::http_date(&util::timestamp(info.last_modified)) {
                if let Ok(v) = HeaderValue::from_str(&d) {
                    h.insert(http::header::LAST_MODIFIED, v);
                }
            }
            e.set_headers(h);
            Err(e)
        }
    }
}

/// The bytes `[start, end)` of part `n` of an object, as GET and HEAD with `partNumber` read
/// them: an object not uploaded in parts is one part, the whole object.
fn part_range(info: &ObjectInfo, n: i32, range: Option<RangeSpec>) -> S3Result<(u64, u64)> {
    if range.is_some() {
        return Err(invalid_request(
            "Cannot specify both Range header and partNumber query parameter",
        ));
    }
    if info.parts == 0 {
        return if n == 1 {
            Ok((0, info.size))
        } else {
            Err(invalid_part(n))
        };
    }
    if info.part_sizes.len() != info.parts as usize {
        return Err(not_implemented(
            "this object was completed before railstore kept its part sizes; read it by range",
        ));
    }
    let i = usize::try_from(n)
        .ok()
        .filter(|i| (1..=info.part_sizes.len()).contains(i))
        .ok_or_else(|| invalid_part(n))?;
    let start: u64 = info.part_sizes[..i - 1].iter().sum();
    Ok((start, start + info.part_sizes[i - 1]))
}

/// The checksums a read of part `n` answers with: a multipart object's part's own, typed as
/// the object's checksum (`whole`: what a single-part object answers).
fn part_checksums(info: &ObjectInfo, n: i32, whole: ChecksumFields) -> ChecksumFields {
    if info.parts == 0 {
        return whole;
    }
    let part = usize::try_from(n)
        .ok()
        .and_then(|n| info.part_checksums.get(n.checked_sub(1)?));
    let Some(map) = part else {
        return ChecksumFields::default();
    };
    let mut c = ChecksumFields::from_map(map);
    c.kind = ChecksumFields::from_map(&info.checksums).kind;
    c
}

/// A part range as the store reads it: none for the whole object.
fn part_spec(info: &ObjectInfo, (start, end): (u64, u64)) -> Option<RangeSpec> {
    ((start, end) != (0, info.size)).then_some(RangeSpec::FromTo {
        first: start,
        last: Some(end.max(start + 1) - 1),
    })
}

fn checksum_mode_enabled(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

/// `Content-Range` of a ranged read of `[start, end)` of `size` bytes.
fn content_range(whole: bool, start: u64, end: u64, size: u64) -> Option<String> {
    (!whole).then(|| format!("bytes {start}-{}/{size}", end.max(1) - 1))
}

fn invalid_part(n: i32) -> S3Error {
    err(
        S3ErrorCode::InvalidPart,
        format!("The object has no part {n}"),
    )
}

pub(crate) async fn put_object(
    s3: &RailS3,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let S3Request {
        input,
        headers,
        trailing_headers,
        credentials,
        ..
    } = req;
    let condition = write_condition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
    if input.write_offset_bytes.is_some() {
        return Err(not_implemented(
            "appends (x-amz-write-offset-bytes) are not supported",
        ));
    }
    s3.store.head_bucket(&input.bucket).map_err(store_error)?;
    let scheme = sse::write_scheme!(s3, input)?;
    let mechanism = s3.mechanism(&headers, input.storage_class.as_ref())?;
    let mut options = put_options(object_fields!(input), mechanism)?;
    if let Some(t) = &input.tagging {
        tagging::set_stored(&mut options.headers, &tagging::from_header(t)?);
    }
    lock::apply_to_new(
        s3,
        &input.bucket,
        lock_requested!(input),
        &mut options.headers,
    )?;
    let caller = s3.users.caller(credentials.as_ref());
    acl::apply_to_new(s3, &input.bucket, caller, &headers, &mut options.headers)?;
    let content_md5 = content_md5(input.content_md5.as_ref())?;
    options.condition = condition;
    let plan = checksum_plan!(input, None, &headers, trailing_headers.as_ref());
    let incoming = RailS3::incoming(input.body, plan, trailing_headers);
    options.checksums = incoming.checksums.clone();
    options.checksums_at_end = incoming.at_end.clone();
    let (body, sealed) = match &scheme {
        None => {
            options.content_md5 = content_md5;
            (incoming.body, None)
        }
        Some(scheme) => {
            let (sealed, key) = sse::seal_into(scheme, &s3.keyring, &mut options.headers)?;
            let (body, sent_md5) = sse::encrypt(incoming.body, &sealed, &key, key.iv, content_md5);
            options.sent_md5 = Some(sent_md5);
            (body, Some(sealed))
        }
    };
    let info = s3
        .store
        .put_object(&input.bucket, &input.key, body, options)
        .await
        .map_err(|e| incoming.outcome.error(e))?;
    let c = answered_checksums(&incoming.outcome, &incoming.checksums);
    let mut output = with_checksums!(
        PutObjectOutput {
            e_tag: Some(ETag::Strong(info.etag.clone())),
            // A write names the version it made; a null version is not named.
            version_id: info.version_id.clone(),
        },
        c
    );
    sse::set_sse!(output, sse::Answer::of(sealed.as_ref()));
    output.expiration = lifecycle::expiration_header(&s3.store, &input.bucket, &info);
    Ok(S3Response::with_headers(
        output,
        mechanism_headers(&info.mechanism),
    ))
}

pub(crate) async fn get_object(
    s3: &RailS3,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let input = &req.input;
    let version = input.version_id.as_deref();
    let missing = |e| versioning::read_error(&s3.store, &input.bucket, &input.key, e);
    sse::refuse_on_read(&req.headers)?;
    let customer = sse::customer(sse::customer_headers!(input))?;
    let conditions = read_conditions!(input);
    let mut range = range_spec(input.range.as_ref());
    // The part's bytes, as a range of the object version they were found in.
    let mut part: Option<(String, u32)> = None;
    if let Some(n) = input.part_number {
        let info = s3
            .store
            .head_object_version(&input.bucket, &input.key, version)
            .await
            .map_err(missing)?;
        range = part_spec(&info, part_range(&info, n, range)?);
        part = Some((info.etag.clone(), info.parts.max(1)));
    }
    let got = s3
        .store
        .get_object_version(&input.bucket, &input.key, version, range)
        .await;
    let got = match got {
        Ok(g) => g,
        Err(StoreError::InvalidRange { size }) => {
            if conditions.any() {
                let info = s3
                    .store
                    .head_object_version(&input.bucket, &input.key, version)
                    .await
                    .map_err(missing)?;
                verdict_error(conditions.evaluate(&info.etag, info.last_modified), &info)?;
            }
            let mut e = store_error(StoreError::InvalidRange { size });
            let mut h = HeaderMap::new();
            // These replace the error response's headers: keep its content type.
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/xml"),
            );
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                h.insert(http::header::CONTENT_RANGE, v);
            }
            e.set_headers(h);
            return Err(e);
        }
        Err(e) => return Err(missing(e)),
    };
    let info = &got.info;
    crate::access::confirm_seen(&req.extensions, info, false)?;
    if part.as_ref().is_some_and(|(etag, _)| *etag != info.etag) {
        // Replaced between finding the part and reading it: its bytes may be elsewhere now.
        return Err(err(
            S3ErrorCode::SlowDown,
            "The object changed while its part was read; retry",
        ));
    }
    let sealed = sse::Sealed::from_headers(&info.headers)?;
    let key = sse::open(sealed.as_ref(), customer.as_ref(), &s3.keyring)?;
    verdict_error(conditions.evaluate(&info.etag, info.last_modified), info)?;
    let (start, end) = got.range;
    let whole = range.is_none();
    let checksum_mode = checksum_mode_enabled(input.checksum_mode.as_ref());
    let mut d = described(info, checksum_mode, whole);
    if let (Some(n), true) = (input.part_number, checksum_mode) {
        d.checksums = part_checksums(info, n, d.checksums);
    }
    let content_range = content_range(whole, start, end, info.size);
    let what = format!("{}/{}", input.bucket, input.key);
    let body = sse::decrypt(got.body, key, info, start)?;
    let body = Outgoing::new(body, end - start, what);
    let mut output = described_output!(
        GetObjectOutput {
            accept_ranges: Some("bytes".to_string()),
            body: Some(StreamingBlob::new(body)),
            content_length: Some((end - start) as i64),
            content_range: content_range,
            parts_count: part.map(|(_, n)| n as i32),
            tag_count: tagging::count(info),
            version_id: versioning::version_header(&s3.store, &input.bucket, info),
        },
        d
    );
    sse::set_sse!(output, sse::Answer::of(sealed.as_ref()));
    output.expiration = lifecycle::expiration_header(&s3.store, &input.bucket, info);
    lock::set_lock_output!(output, info);
    Ok(S3Response::with_headers(
        output,
        mechanism_headers(&info.mechanism),
    ))
}

pub(crate) async fn head_object(
    s3: &RailS3,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let input = &req.input;
    sse::refuse_on_read(&req.headers)?;
    let customer = sse::customer(sse::customer_headers!(input))?;
    let info = s3
        .store
        .head_object_version(&input.bucket, &input.key, input.version_id.as_deref())
        .await
        .map_err(|e| versioning::read_error(&s3.store, &input.bucket, &input.key, e))?;
    crate::access::confirm_seen(&req.extensions, &info, false)?;
    let sealed = sse::Sealed::from_headers(&info.headers)?;
    let conditions = read_conditions!(input);
    let mut range = range_spec(input.range.as_ref());
    if let Some(n) = input.part_number {
        range = part_spec(&info, part_range(&info, n, range)?);
    }
    // The key is checked, though nothing is decrypted: a HEAD without it is refused as a GET,
    // before its conditions say anything of the object.
    sse::open(sealed.as_ref(), customer.as_ref(), &s3.keyring)?;
    verdict_error(conditions.evaluate(&info.etag, info.last_modified), &info)?;
    let (start, end) = match range {
        None => (0, info.size),
        Some(r) => r.resolve(info.size).map_err(store_error)?,
    };
    let whole = range.is_none();
    let checksum_mode = checksum_mode_enabled(input.checksum_mode.as_ref());
    let mut d = described(&info, checksum_mode, whole);
    if let (Some(n), true) = (input.part_number, checksum_mode) {
        d.checksums = part_checksums(&info, n, d.checksums);
    }
    let mut output = described_output!(
        HeadObjectOutput {
            accept_ranges: Some("bytes".to_string()),
            content_length: Some((end - start) as i64),
            content_range: content_range(whole, start, end, info.size),
            parts_count: input.part_number.map(|_| info.parts.max(1) as i32),
            version_id: versioning::version_header(&s3.store, &input.bucket, &info),
        },
        d
    );
    sse::set_sse!(output, sse::Answer::of(sealed.as_ref()));
    output.expiration = lifecycle::expiration_header(&s3.store, &input.bucket, &info);
    lock::set_lock_output!(output, &info);
    let mut headers = mechanism_headers(&info.mechanism);
    // HeadObjectOutput has no field for it.
    if let Some(n) = tagging::count(&info) {
        headers.insert("x-amz-tagging-count", HeaderValue::from(n));
    }
    let mut resp = S3Response::with_headers(output, headers);
    if !whole {
        resp.status = Some(StatusCode::PARTIAL_CONTENT);
    }
    Ok(resp)
}

pub(crate) async fn delete_object(
    s3: &RailS3,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let input = req.input;
    if input.if_match_last_modified_time.is_some() || input.if_match_size.is_some() {
        return Err(not_implemented(
            "deletes conditional on the modification time or the size are not supported",
        ));
    }
    let condition = write_condition(input.if_match.as_ref(), None)?;
    let deleted = match input.version_id.as_deref() {
        Some(v) => s3
            .store
            .delete_version(
                &input.bucket,
                &input.key,
                v,
                condition.as_ref(),
                input.bypass_governance_retention.unwrap_or(false),
            )
            .await
            .map_err(store_error)?,
        None => s3
            .store
            .delete_object_if(&input.bucket, &input.key, condition.as_ref())
            .await
            .map_err(store_error)?,
    };
    Ok(S3Response::new(deleted_output(
        &deleted,
        input.version_id.is_some(),
    )))
}

/// What a DeleteObject answers: the version removed or the delete marker made.
fn deleted_output(d: &Deleted, by_version: bool) -> DeleteObjectOutput {
    let named = by_version || d.delete_marker;
    DeleteObjectOutput {
        delete_marker: d.delete_marker.then_some(true),
        version_id: named.then(|| version_name(d.version_id.as_deref()).to_string()),
        request_charged: None,
    }
}

pub(crate) async fn delete_objects(
    s3: &RailS3,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let input = req.input;
    let objects = input.delete.objects;
    if objects.is_empty() || objects.len() > DELETE_KEYS_MAX {
        return Err(err(
            S3ErrorCode::MalformedXML,
            format!("A delete request names 1 to {DELETE_KEYS_MAX} objects"),
        ));
    }
    s3.store.head_bucket(&input.bucket).map_err(store_error)?;
    let quiet = input.delete.quiet.unwrap_or(false);
    let bypass = input.bypass_governance_retention.unwrap_or(false);
    let mut errors = Vec::new();
    let targets: Vec<(String, Option<String>)> = objects
        .iter()
        .map(|o| (o.key.clone(), o.version_id.clone()))
        .collect();
    // Owned keys: async_trait needs a `Send` future for every lifetime.
    let results: Vec<Result<Deleted, StoreError>> = futures_util::stream::iter(targets.clone())
        .map(|(k, v)| {
            let store = s3.store.clone();
            let bucket = input.bucket.clone();
            async move {
                match v {
                    Some(v) => store.delete_version(&bucket, &k, &v, None, bypass).await,
                    None => store.delete_object_if(&bucket, &k, None).await,
                }
            }
        })
        .buffered(8)
        .collect()
        .await;
    let mut deleted = Vec::new();
    for ((key, version), r) in targets.into_iter().zip(results) {
        match r {
            Ok(d) => {
                if !quiet {
                    let out = deleted_output(&d, version.is_some());
                    deleted.push(DeletedObject {
                        key: Some(key),
                        // The version asked for, or none.
                        version_id: version,
                        delete_marker: out.delete_marker,
                        delete_marker_version_id: out.version_id.filter(|_| d.delete_marker),
                    });
                }
            }
            Err(e) => {
                let e = store_error(e);
                errors.push(Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(key),
                    message: e.message().map(str::to_string),
                    version_id: version,
                });
            }
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: (!deleted.is_empty()).then_some(deleted),
        errors: (!errors.is_empty()).then_some(errors),
        request_charged: None,
    }))
}
