//! GetObjectAttributes: an object's ETag, checksum, parts (paged, with their sizes and
//! checksums), storage class and size, each when asked for.

use crate::errors::store_error;
use crate::fields::{standard_class, ChecksumFields};
use crate::list::page_size;
use crate::service::RailS3;
use crate::sse;
use crate::util;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

pub(crate) async fn get_object_attributes(
    s3: &RailS3,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let input = req.input;
    let customer = sse::customer(sse::customer_headers!(input))?;
    let info = s3
        .store
        .head_object_version(&input.bucket, &input.key, input.version_id.as_deref())
        .await
        .map_err(store_error)?;
    crate::access::confirm_seen(&req.extensions, &info, false)?;
    // As a GET: an SSE-C object's attributes need its key.
    let sealed = sse::Sealed::from_headers(&info.headers)?;
    sse::open(sealed.as_ref(), customer.as_ref(), &s3.keyring)?;
    // One header, `x-amz-object-attributes: ETag,ObjectSize`, may name several.
    let wants = |a: &str| {
        input
            .object_attributes
            .iter()
            .flat_map(|x| x.as_str().split(','))
            .any(|x| x.trim() == a)
    };
    let checksum = wants(ObjectAttributes::CHECKSUM)
        .then(|| ChecksumFields::from_map(&info.checksums))
        .filter(|c| c.kind.is_some())
        .map(|c| Checksum {
            checksum_crc32: c.crc32,
            checksum_crc32c: c.crc32c,
            checksum_crc64nvme: c.crc64nvme,
            checksum_sha1: c.sha1,
            checksum_sha256: c.sha256,
            checksum_type: c.kind,
        });
    let object_parts = if wants(ObjectAttributes::OBJECT_PARTS) && info.parts > 0 {
        let max = page_size(input.max_parts, "max-parts")?;
        let marker = input.part_number_marker.unwrap_or(0).max(0) as usize;
        let all = info.part_sizes.len();
        let page: Vec<ObjectPart> = (marker..all)
            .take(max)
            .map(|i| {
                let c = info
                    .part_checksums
                    .get(i)
                    .map(ChecksumFields::from_map)
                    .unwrap_or_default();
                ObjectPart {
                    part_number: Some(i as i32 + 1),
                    size: Some(info.part_sizes[i] as i64),
                    checksum_crc32: c.crc32,
                    checksum_crc32c: c.crc32c,
                    checksum_crc64nvme: c.crc64nvme,
                    checksum_sha1: c.sha1,
                    checksum_sha256: c.sha256,
                }
            })
            .collect();
        let last = page.last().and_then(|p| p.part_number);
        let truncated = marker + page.len() < all;
        Some(GetObjectAttributesParts {
            total_parts_count: Some(info.parts as i32),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: if truncated { last } else { None },
            max_parts: Some(max as i32),
            is_truncated: Some(truncated),
            parts: Some(page),
        })
    } else {
        None
    };
    Ok(S3Response::new(GetObjectAttributesOutput {
        e_tag: wants(ObjectAttributes::ETAG).then(|| ETag::Strong(info.etag.clone())),
        checksum,
        object_parts,
        storage_class: wants(ObjectAttributes::STORAGE_CLASS).then(standard_class),
        object_size: wants(ObjectAttributes::OBJECT_SIZE).then_some(info.size as i64),
        last_modified: Some(util::timestamp(info.last_modified)),
        version_id: crate::versioning::version_header(&s3.store, &input.bucket, &info),
        ..GetObjectAttributesOutput::default()
    }))
}

/// Whether a request is GetObjectAttributes (`GET ?attributes`).
pub(crate) fn is_get_object_attributes(method: &http::Method, uri: &http::Uri) -> bool {
    // Object level only: `/bucket/key?attributes`.
    let object_level = uri.path().trim_start_matches('/').contains('/');
    method == http::Method::GET
        && object_level
        && uri.query().is_some_and(|q| {
            q.split('&')
                .any(|p| p == "attributes" || p.starts_with("attributes="))
        })
}

/// GetObjectAttributes answers its ETag unquoted (`<ETag>abc</ETag>`), unlike every other
/// response; s3s 0.14.1 quotes every ETag it writes, so the body is mended here.
pub(crate) async fn unquote_etag(resp: http::Response<s3s::Body>) -> http::Response<s3s::Body> {
    if resp.status() != http::StatusCode::OK {
        return resp;
    }
    let (mut parts, mut body) = resp.into_parts();
    // An attributes document is small: its parts are paged at 1000.
    let Ok(bytes) = body.store_all_limited(4 << 20).await else {
        let mut resp = http::Response::new(s3s::Body::empty());
        *resp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        return resp;
    };
    let text = String::from_utf8_lossy(&bytes)
        .replace("<ETag>\"", "<ETag>")
        .replace("\"</ETag>", "</ETag>");
    parts.headers.insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(text.len()),
    );
    http::Response::from_parts(parts, s3s::Body::from(text))
}
