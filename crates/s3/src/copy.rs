//! CopyObject.

use crate::errors::{err, invalid_argument, invalid_request, not_implemented, store_error};
use crate::fields::*;
use crate::service::RailS3;
use crate::util::{self, Conditions, Verdict};
use railstore_store::PutOptions;
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;

pub(crate) async fn copy_object(
    s3: &RailS3,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let S3Request { input, headers, .. } = req;
    let (src_bucket, src_key) = match &input.copy_source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => {
            check_version(version_id.as_deref())?;
            (bucket.to_string(), key.to_string())
        }
        _ => {
            return Err(not_implemented(
                "copying from access points is not supported",
            ))
        }
    };
    refuse_unsupported(
        input.server_side_encryption.as_ref(),
        input
            .sse_customer_key
            .as_ref()
            .or(input.copy_source_sse_customer_key.as_ref()),
        input.ssekms_key_id.as_ref(),
        object_lock_requested!(input),
    )?;
    let src = s3
        .store
        .head_object(&src_bucket, &src_key)
        .map_err(store_error)?;
    let conditions = Conditions {
        if_match: input.copy_source_if_match.as_ref(),
        if_none_match: input.copy_source_if_none_match.as_ref(),
        if_modified_since: input.copy_source_if_modified_since.as_ref(),
        if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
    };
    if conditions.evaluate(&src.etag, src.last_modified) != Verdict::Proceed {
        return Err(err(
            S3ErrorCode::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold",
        ));
    }
    let replace = match input
        .metadata_directive
        .as_ref()
        .map(MetadataDirective::as_str)
    {
        None | Some(MetadataDirective::COPY) => false,
        Some(MetadataDirective::REPLACE) => true,
        Some(other) => {
            return Err(invalid_argument(format!(
                "Unknown metadata directive {other:?}"
            )))
        }
    };
    let mechanism = s3.mechanism(&headers, input.storage_class.as_ref())?;
    let same = src_bucket == input.bucket && src_key == input.key;
    if same && !replace && mechanism.is_none() && input.storage_class.is_none() {
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
    let options = if replace {
        let mut o = put_options(object_fields!(input), mechanism)?;
        o.checksums = body_checksums;
        Some(o)
    } else if mechanism.is_some() {
        Some(PutOptions {
            content_type: src.content_type.clone(),
            user_metadata: src.user_metadata.clone(),
            headers: src.headers.clone(),
            checksums: body_checksums,
            checksums_at_end: None,
            content_md5: None,
            mechanism,
            condition: None,
        })
    } else {
        None
    };
    let info = s3
        .store
        .copy_object(&src_bucket, &src_key, &input.bucket, &input.key, options)
        .await
        .map_err(store_error)?;
    let c = ChecksumFields::from_map(&info.checksums);
    let output = CopyObjectOutput {
        copy_object_result: Some(with_checksums!(
            CopyObjectResult {
                e_tag: Some(ETag::Strong(info.etag.clone())),
                last_modified: Some(util::timestamp(info.last_modified)),
            },
            c
        )),
        ..CopyObjectOutput::default()
    };
    Ok(S3Response::with_headers(
        output,
        mechanism_headers(&info.mechanism),
    ))
}
