//! CopyObject.

use crate::acl;
use crate::errors::{err, invalid_argument, invalid_request, not_implemented, store_error};
use crate::fields::*;
use crate::lifecycle;
use crate::lock::{self, lock_requested};
use crate::multipart::part_number;
use crate::service::RailS3;
use crate::sse;
use crate::tagging;
use crate::util::{self, Conditions, Verdict};
use crate::versioning;
use railstore_store::{Body, Mechanism, ObjectInfo, PartOptions, PutOptions, RangeSpec};
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;

/// The bucket, key and version (`None`: the current one) a copy reads.
fn copy_source(source: &CopySource) -> S3Result<(String, String, Option<String>)> {
    match source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((
            bucket.to_string(),
            key.to_string(),
            version_id.as_deref().map(str::to_string),
        )),
        _ => Err(not_implemented(
            "copying from access points is not supported",
        )),
    }
}

/// Refuses a copy whose `x-amz-copy-source-if-*` conditions do not hold for `src`.
macro_rules! check_source_conditions {
    ($input:expr, $src:expr) => {{
        let conditions = Conditions {
            if_match: $input.copy_source_if_match.as_ref(),
            if_none_match: $input.copy_source_if_none_match.as_ref(),
            if_modified_since: $input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: $input.copy_source_if_unmodified_since.as_ref(),
        };
        if conditions.evaluate(&$src.etag, $src.last_modified) != Verdict::Proceed {
            return Err(err(
                S3ErrorCode::PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold",
            ));
        }
    }};
}

/// Reads the source's bytes (`range` of them), decrypted with `key`. `src` is the version the
/// checks were made on and the key opened from; any other version found now (its ETag, time
/// or encryption differ) is refused rather than copied unchecked or decrypted with the wrong
/// key.
async fn read_source(
    s3: &RailS3,
    (bucket, key, version): (&str, &str, Option<&str>),
    src: &ObjectInfo,
    range: Option<RangeSpec>,
    data_key: Option<sse::DataKey>,
) -> S3Result<Body> {
    let got = s3
        .store
        .get_object_version(bucket, key, version, range)
        .await
        .map_err(store_error)?;
    let same = got.info.etag == src.etag
        && got.info.last_modified == src.last_modified
        && sse::Sealed::from_headers(&got.info.headers)?
            == sse::Sealed::from_headers(&src.headers)?;
    if !same {
        return Err(err(
            S3ErrorCode::SlowDown,
            "The copy source changed while it was copied; retry",
        ));
    }
    sse::decrypt(got.body, data_key, &got.info, got.range.0)
}

/// Whether a copy's `x-amz-metadata-directive` or `x-amz-tagging-directive` (`what`) is
/// `REPLACE` (the source's are kept with `COPY`, the default).
fn replaces(directive: Option<&str>, what: &str) -> S3Result<bool> {
    match directive {
        None | Some("COPY") => Ok(false),
        Some("REPLACE") => Ok(true),
        Some(other) => Err(invalid_argument(format!(
            "Unknown {what} directive {other:?}"
        ))),
    }
}

pub(crate) async fn copy_object(
    s3: &RailS3,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let S3Request {
        input,
        headers,
        credentials,
        extensions,
        ..
    } = req;
    let (src_bucket, src_key, src_version) = copy_source(&input.copy_source)?;
    let src_customer = sse::customer(sse::customer_headers!(input, copy_source))?;
    s3.store.head_bucket(&input.bucket).map_err(store_error)?;
    let dest_scheme = sse::write_scheme!(s3, input)?;
    let src = s3
        .store
        .head_object_version(&src_bucket, &src_key, src_version.as_deref())
        .await
        .map_err(store_error)?;
    crate::access::confirm_seen(&extensions, &src, true)?;
    check_source_conditions!(input, src);
    let src_sealed = sse::Sealed::from_headers(&src.headers)?;
    let src_data_key = sse::open(src_sealed.as_ref(), src_customer.as_ref(), &s3.keyring)?;
    let replace = replaces(
        input
            .metadata_directive
            .as_ref()
            .map(MetadataDirective::as_str),
        "metadata",
    )?;
    let mechanism = s3.mechanism(&headers, input.storage_class.as_ref())?;
    // An older version copied over the current one changes the object.
    let same = src_bucket == input.bucket && src_key == input.key && src_version.is_none();
    let asks_encryption =
        input.server_side_encryption.is_some() || input.sse_customer_algorithm.is_some();
    if same
        && !replace
        && mechanism.is_none()
        && input.storage_class.is_none()
        && !asks_encryption
        && input.tagging_directive.is_none()
    {
        return Err(invalid_request(
            "This copy request is illegal because it is trying to copy an object to itself \
             without changing the object's metadata, storage class, website redirect \
             location or encryption attributes.",
        ));
    }
    let body_checksums = if src.parts == 0 {
        src.checksums.clone()
    } else {
        BTreeMap::new()
    };
    let mut options = if replace {
        put_options(object_fields!(input), mechanism)?
    } else {
        let mut headers = src.headers.clone();
        sse::strip(&mut headers);
        PutOptions {
            content_type: src.content_type.clone(),
            user_metadata: src.user_metadata.clone(),
            headers,
            mechanism,
            ..PutOptions::default()
        }
    };
    options.checksums = body_checksums;
    // The tags: the source's (`COPY`, the default) or the request's (`REPLACE`).
    let replace_tags = replaces(
        input
            .tagging_directive
            .as_ref()
            .map(TaggingDirective::as_str),
        "tagging",
    )?;
    let tags = if replace_tags {
        input
            .tagging
            .as_deref()
            .map(tagging::from_header)
            .transpose()?
            .unwrap_or_default()
    } else {
        tagging::stored(&src)
    };
    tagging::set_stored(&mut options.headers, &tags);
    // A copy has the lock it asks for, or the bucket's default, never its source's.
    lock::apply_to_new(
        s3,
        &input.bucket,
        lock_requested!(input),
        &mut options.headers,
    )?;
    // Nor its source's owner or ACL: the copy is its writer's, with the ACL it asks for.
    let caller = s3.users.caller(credentials.as_ref());
    acl::apply_to_new(s3, &input.bucket, caller, &headers, &mut options.headers)?;
    if !replace && options.mechanism.is_none() {
        // Unchanged, a copy keeps the source's mechanism.
        options.mechanism = Mechanism::parse(&src.mechanism).ok();
    }
    let source = (
        src_bucket.as_str(),
        src_key.as_str(),
        src_version.as_deref(),
    );
    let body = read_source(s3, source, &src, None, src_data_key).await?;
    let (body, sealed) = match &dest_scheme {
        None => (body, None),
        Some(scheme) => {
            let (sealed, key) = sse::seal_into(scheme, &s3.keyring, &mut options.headers)?;
            let (body, sent_md5) = sse::encrypt(body, &sealed, &key, key.iv, None);
            options.sent_md5 = Some(sent_md5);
            (body, Some(sealed))
        }
    };
    let info = s3
        .store
        .put_object(&input.bucket, &input.key, body, options)
        .await
        .map_err(store_error)?;
    let c = ChecksumFields::from_map(&info.checksums);
    let mut output = CopyObjectOutput {
        copy_object_result: Some(with_checksums!(
            CopyObjectResult {
                e_tag: Some(ETag::Strong(info.etag.clone())),
                last_modified: Some(util::timestamp(info.last_modified)),
            },
            c
        )),
        version_id: info.version_id.clone(),
        copy_source_version_id: versioning::version_header(&s3.store, &src_bucket, &src),
        ..CopyObjectOutput::default()
    };
    sse::set_sse!(output, sse::Answer::of(sealed.as_ref()));
    output.expiration = lifecycle::expiration_header(&s3.store, &input.bucket, &info);
    Ok(S3Response::with_headers(
        output,
        mechanism_headers(&info.mechanism),
    ))
}

/// The bytes an `x-amz-copy-source-range` names: `bytes=first-last`, nothing else.
fn copy_range(v: &str) -> S3Result<(u64, u64)> {
    let parsed = v.strip_prefix("bytes=").and_then(|r| {
        let (a, b) = r.split_once('-')?;
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
        if !all_digits(a) || !all_digits(b) {
            return None;
        }
        Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
    });
    match parsed {
        Some((first, last)) if first <= last => Ok((first, last)),
        _ => Err(invalid_argument(
            "The x-amz-copy-source-range value must be of the form bytes=first-last where \
             first and last are the zero-based offsets of the first and last bytes to copy",
        )),
    }
}

pub(crate) async fn upload_part_copy(
    s3: &RailS3,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let input = req.input;
    let (src_bucket, src_key, src_version) = copy_source(&input.copy_source)?;
    let number = part_number(input.part_number)?;
    let range = input
        .copy_source_range
        .as_deref()
        .map(copy_range)
        .transpose()?;
    let customer = sse::customer(sse::customer_headers!(input))?;
    let src_customer = sse::customer(sse::customer_headers!(input, copy_source))?;
    let upload = s3
        .store
        .upload_options(&input.bucket, &input.key, &input.upload_id)
        .map_err(store_error)?;
    let sealed = sse::Sealed::from_headers(&upload.headers)?;
    sse::check_customer(sealed.as_ref(), customer.as_ref())?;
    let src = s3
        .store
        .head_object_version(&src_bucket, &src_key, src_version.as_deref())
        .await
        .map_err(store_error)?;
    crate::access::confirm_seen(&req.extensions, &src, true)?;
    check_source_conditions!(input, src);
    let src_sealed = sse::Sealed::from_headers(&src.headers)?;
    let src_data_key = sse::open(src_sealed.as_ref(), src_customer.as_ref(), &s3.keyring)?;
    let spec = match range {
        None => None,
        Some((_, last)) if last >= src.size => {
            return Err(err(
                S3ErrorCode::InvalidRange,
                format!(
                    "The x-amz-copy-source-range is outside the source object ({} bytes)",
                    src.size
                ),
            ))
        }
        Some((first, last)) => Some(RangeSpec::FromTo {
            first,
            last: Some(last),
        }),
    };
    let source = (
        src_bucket.as_str(),
        src_key.as_str(),
        src_version.as_deref(),
    );
    let body = read_source(s3, source, &src, spec, src_data_key).await?;
    let mut options = PartOptions::default();
    let body = sse::part_body(
        body,
        sealed.as_ref(),
        customer.as_ref(),
        &s3.keyring,
        None,
        &mut options,
    )?;
    let part = s3
        .store
        .upload_part(
            &input.bucket,
            &input.key,
            &input.upload_id,
            number,
            body,
            options,
        )
        .await
        .map_err(store_error)?;
    let mut output = UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(ETag::Strong(part.etag)),
            last_modified: Some(util::timestamp(part.last_modified)),
            ..CopyPartResult::default()
        }),
        copy_source_version_id: versioning::version_header(&s3.store, &src_bucket, &src),
        ..UploadPartCopyOutput::default()
    };
    sse::set_sse!(output, sse::Answer::of(sealed.as_ref()));
    Ok(S3Response::new(output))
}
