//! Multipart uploads: create, upload a part, complete, abort, list parts and uploads.

use crate::acl;
use crate::checksum::{self, Algorithm, Plan};
use crate::errors::{err, invalid_argument, invalid_request, store_error};
use crate::fields::*;
use crate::list::{common_prefixes, nonempty, page_size, url_encoded, Enc};
use crate::lock::{self, lock_requested};
use crate::service::RailS3;
use crate::sse;
use crate::tagging;
use crate::util;
use railstore_store::{PartOptions, PutOptions, StoreError};
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;

/// The value a completion or a completed part states for `$alg`.
macro_rules! checksum_of {
    ($fields:expr, $alg:expr) => {
        match $alg {
            Algorithm::Crc32 => $fields.checksum_crc32.as_ref(),
            Algorithm::Crc32c => $fields.checksum_crc32c.as_ref(),
            Algorithm::Crc64Nvme => $fields.checksum_crc64nvme.as_ref(),
            Algorithm::Sha1 => $fields.checksum_sha1.as_ref(),
            Algorithm::Sha256 => $fields.checksum_sha256.as_ref(),
        }
    };
}

/// The checksum type a multipart upload's object gets: full-object or composite.
fn checksum_type_name(full_object: bool) -> &'static str {
    if full_object {
        ChecksumType::FULL_OBJECT
    } else {
        ChecksumType::COMPOSITE
    }
}

pub(crate) fn part_number(n: i32) -> S3Result<u32> {
    u32::try_from(n)
        .ok()
        .filter(|n| (1..=railstore_store::PART_NUMBER_MAX).contains(n))
        .ok_or_else(|| {
            invalid_argument(format!(
                "Part number must be an integer between 1 and {}, inclusive",
                railstore_store::PART_NUMBER_MAX
            ))
        })
}

/// The checksum a multipart upload was created with: the store keeps one "algorithm" string
/// per upload, which holds `ALGORITHM:TYPE` here.
fn upload_checksum(o: &PutOptions) -> Option<(Algorithm, bool)> {
    let key = o.checksums.keys().next()?;
    let (alg, kind) = key.split_once(':').unwrap_or((key, ""));
    let alg = Algorithm::parse(alg)?;
    Some((alg, kind == ChecksumType::FULL_OBJECT))
}

pub(crate) async fn create_multipart_upload(
    s3: &RailS3,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let S3Request {
        input,
        headers,
        credentials,
        ..
    } = req;
    s3.store.head_bucket(&input.bucket).map_err(store_error)?;
    let scheme = sse::write_scheme!(s3, input)?;
    let mechanism = s3.mechanism(&headers, input.storage_class.as_ref())?;
    let mut options = put_options(object_fields!(input), mechanism)?;
    if let Some(t) = &input.tagging {
        tagging::set_stored(&mut options.headers, &tagging::from_header(t)?);
    }
    // Applied when the upload starts, as S3 does: the default retention counts from here.
    lock::apply_to_new(
        s3,
        &input.bucket,
        lock_requested!(input),
        &mut options.headers,
    )?;
    // The object's owner and ACL, as the upload starts: the upload is its initiator's.
    let caller = s3.users.caller(credentials.as_ref());
    acl::apply_to_new(s3, &input.bucket, caller, &headers, &mut options.headers)?;
    // The upload's data key, kept with it; each part is encrypted under it as it arrives.
    let sealed = match &scheme {
        Some(scheme) => Some(sse::seal_into(scheme, &s3.keyring, &mut options.headers)?.0),
        None => None,
    };
    let algorithm = match input.checksum_algorithm.as_ref() {
        None => None,
        Some(a) => Some(Algorithm::parse(a.as_str()).ok_or_else(|| {
            invalid_request("Value for x-amz-checksum-algorithm header is invalid.")
        })?),
    };
    let kind = input
        .checksum_type
        .as_ref()
        .map(|t| t.as_str().to_ascii_uppercase());
    let full_object = match (algorithm, kind.as_deref()) {
        (None, Some(_)) => {
            return Err(invalid_request(
                "The x-amz-checksum-type header can only be used with the \
                 x-amz-checksum-algorithm header.",
            ))
        }
        (None, None) => false,
        (Some(a), None) => a == Algorithm::Crc64Nvme,
        (Some(a), Some(ChecksumType::FULL_OBJECT)) if a.combinable() => true,
        (Some(a), Some(ChecksumType::COMPOSITE)) if a != Algorithm::Crc64Nvme => false,
        (Some(a), Some(k)) => {
            return Err(invalid_request(format!(
                "The {k} checksum type cannot be used with the {} checksum algorithm.",
                a.name().to_ascii_lowercase()
            )))
        }
    };
    if let Some(a) = algorithm {
        let kind = checksum_type_name(full_object);
        options
            .checksums
            .insert(format!("{}:{kind}", a.name()), String::new());
    }
    let upload_id = s3
        .store
        .create_multipart(&input.bucket, &input.key, options)
        .await
        .map_err(store_error)?;
    let mut output = CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(upload_id),
        checksum_algorithm: input.checksum_algorithm,
        checksum_type: algorithm
            .map(|_| ChecksumType::from(checksum_type_name(full_object).to_string())),
        ..CreateMultipartUploadOutput::default()
    };
    sse::set_sse!(output, sse::Answer::of(sealed.as_ref()));
    Ok(S3Response::new(output))
}

pub(crate) async fn upload_part(
    s3: &RailS3,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let S3Request {
        input,
        headers,
        trailing_headers,
        ..
    } = req;
    let number = part_number(input.part_number)?;
    let customer = sse::customer(sse::customer_headers!(input))?;
    let upload = s3
        .store
        .upload_options(&input.bucket, &input.key, &input.upload_id)
        .map_err(store_error)?;
    let sealed = sse::Sealed::from_headers(&upload.headers)?;
    let plan = checksum_plan!(
        input,
        upload_checksum(&upload).map(|(a, _)| a),
        &headers,
        trailing_headers.as_ref()
    );
    let incoming = RailS3::incoming(input.body, plan, trailing_headers);
    let mut options = PartOptions {
        checksums: incoming.checksums.clone(),
        checksums_at_end: incoming.at_end.clone(),
        ..PartOptions::default()
    };
    let body = sse::part_body(
        incoming.body,
        sealed.as_ref(),
        customer.as_ref(),
        &s3.keyring,
        content_md5(input.content_md5.as_ref())?,
        &mut options,
    )?;
    let info = s3
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
        .map_err(|e| incoming.outcome.error(e))?;
    let c = answered_checksums(&incoming.outcome, &incoming.checksums);
    let mut output = with_checksums!(
        UploadPartOutput {
            e_tag: Some(ETag::Strong(info.etag)),
        },
        c,
        untyped
    );
    sse::set_sse!(output, sse::Answer::of(sealed.as_ref()));
    Ok(S3Response::new(output))
}

/// A completion's parts with a number listed several times in a row kept once, as last
/// listed: a client that resent a part may list both answers, and the part stored is the one
/// that finished last (as Ceph RGW takes it; the ETag must still be the stored part's).
fn last_of_each_number(listed: &[CompletedPart]) -> Vec<CompletedPart> {
    let mut kept: Vec<CompletedPart> = Vec::with_capacity(listed.len());
    for p in listed {
        match kept.last_mut() {
            Some(last) if p.part_number.is_some() && last.part_number == p.part_number => {
                *last = p.clone()
            }
            _ => kept.push(p.clone()),
        }
    }
    kept
}

pub(crate) async fn complete_multipart_upload(
    s3: &RailS3,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let input = req.input;
    let condition = write_condition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
    let customer = sse::customer(sse::customer_headers!(input))?;
    let listed = input
        .multipart_upload
        .as_ref()
        .and_then(|m| m.parts.as_ref())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            err(
                S3ErrorCode::MalformedXML,
                "The XML you provided was not well-formed or did not validate against our \
                 published schema: a completion lists at least one part",
            )
        })?;
    let listed = &last_of_each_number(listed);
    let mut parts: Vec<(u32, String)> = Vec::with_capacity(listed.len());
    for p in listed {
        let n = p
            .part_number
            .ok_or_else(|| err(S3ErrorCode::MalformedXML, "a part without a PartNumber"))?;
        let e = p
            .e_tag
            .as_ref()
            .ok_or_else(|| err(S3ErrorCode::MalformedXML, "a part without an ETag"))?;
        parts.push((part_number(n)?, e.value().to_string()));
    }
    let checksums = match s3
        .store
        .upload_options(&input.bucket, &input.key, &input.upload_id)
    {
        Ok(upload) => {
            // An SSE-C upload is completed only with its key, as every request of it.
            let sealed = sse::Sealed::from_headers(&upload.headers)?;
            sse::check_customer(sealed.as_ref(), customer.as_ref())?;
            compose_checksums(s3, &input, listed, &parts, &upload)?
        }
        // Completed already (a repeat returns the object) or no such upload: the store
        // answers either.
        Err(StoreError::NoSuchUpload(_)) => BTreeMap::new(),
        Err(e) => return Err(store_error(e)),
    };
    let info = s3
        .store
        .complete_multipart(
            &input.bucket,
            &input.key,
            &input.upload_id,
            &parts,
            checksums,
            condition.as_ref(),
        )
        .await
        .map_err(store_error)?;
    let c = ChecksumFields::from_map(&info.checksums);
    let answer = sse::Answer::of(sse::Sealed::from_headers(&info.headers)?.as_ref());
    let output = with_checksums!(
        CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            e_tag: Some(ETag::Strong(info.etag.clone())),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            server_side_encryption: answer.sse.clone(),
            ssekms_key_id: answer.kms_key_id.clone(),
            version_id: info.version_id.clone(),
        },
        c
    );
    // The output has no fields for SSE-C.
    Ok(S3Response::with_headers(output, answer.customer_headers()))
}

pub(crate) async fn abort_multipart_upload(
    s3: &RailS3,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let input = req.input;
    s3.store
        .abort_multipart(&input.bucket, &input.key, &input.upload_id)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub(crate) async fn list_parts(
    s3: &RailS3,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    let upload = s3
        .store
        .upload_options(&input.bucket, &input.key, &input.upload_id)
        .map_err(store_error)?;
    let bucket_owner = acl::bucket_acl(&s3.store, &s3.users, &input.bucket)?.owner;
    let upload_owner = acl::owner_in_headers(&s3.users, &upload.headers, &bucket_owner);
    let all = s3
        .store
        .list_parts(&input.bucket, &input.key, &input.upload_id)
        .map_err(store_error)?;
    let max = page_size(input.max_parts, "max-parts")?;
    let marker = input.part_number_marker.unwrap_or(0).max(0) as u32;
    let rest: Vec<_> = all.into_iter().filter(|p| p.number > marker).collect();
    let truncated = rest.len() > max;
    let page: Vec<_> = rest.into_iter().take(max).collect();
    let next = page.last().map(|p| p.number as i32);
    let parts = page
        .into_iter()
        .map(|p| {
            let c = ChecksumFields::from_map(&p.checksums);
            with_checksums!(
                Part {
                    part_number: Some(p.number as i32),
                    e_tag: Some(ETag::Strong(p.etag)),
                    size: Some(p.size as i64),
                    last_modified: Some(util::timestamp(p.last_modified)),
                },
                c,
                untyped
            )
        })
        .collect::<Vec<_>>();
    let checksum = upload_checksum(&upload);
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        part_number_marker: input.part_number_marker,
        next_part_number_marker: if truncated { next } else { None },
        max_parts: Some(max as i32),
        is_truncated: Some(truncated),
        parts: (!parts.is_empty()).then_some(parts),
        owner: Some(upload_owner.clone()),
        initiator: Some(Initiator {
            display_name: upload_owner.display_name,
            id: upload_owner.id,
        }),
        storage_class: Some(standard_class()),
        checksum_algorithm: checksum.map(|(a, _)| ChecksumAlgorithm::from(a.name().to_string())),
        checksum_type: checksum
            .map(|(_, full)| ChecksumType::from(checksum_type_name(full).to_string())),
        ..ListPartsOutput::default()
    }))
}

pub(crate) async fn list_multipart_uploads(
    s3: &RailS3,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = req.input;
    let enc = Enc(url_encoded(input.encoding_type.as_ref())?);
    let prefix = input.prefix.clone().unwrap_or_default();
    let delimiter = nonempty(input.delimiter.clone());
    let max = page_size(input.max_uploads, "max-uploads")?;
    let all = s3
        .store
        .list_uploads(&input.bucket, &prefix)
        .map_err(store_error)?;
    let bucket_owner = acl::bucket_acl(&s3.store, &s3.users, &input.bucket)?.owner;
    let rollup = |key: &str| -> Option<String> {
        let d = delimiter.as_deref()?;
        let rest = key.get(prefix.len()..)?;
        rest.find(d)
            .map(|i| key[..prefix.len() + i + d.len()].to_string())
    };
    // Skip to after the markers.
    let key_marker = nonempty(input.key_marker.clone());
    let id_marker = input
        .upload_id_marker
        .clone()
        .filter(|_| key_marker.is_some());
    let mut passed_id_marker = false;
    let mut uploads = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    let mut truncated = false;
    let mut last: Option<(String, Option<String>)> = None;
    for u in all {
        if let Some(m) = &key_marker {
            if rollup(m).as_deref() == Some(m.as_str()) && u.key.starts_with(m.as_str()) {
                continue;
            }
            if u.key < *m {
                continue;
            }
            // The marker's own key: only its uploads after the upload-id marker.
            if u.key == *m && !passed_id_marker {
                if id_marker.as_deref() == Some(u.upload_id.as_str()) {
                    passed_id_marker = true;
                }
                continue;
            }
        }
        let cp = rollup(&u.key);
        if let Some(cp) = &cp {
            if prefixes.last() == Some(cp) {
                continue;
            }
        }
        if uploads.len() + prefixes.len() >= max {
            truncated = true;
            break;
        }
        match cp {
            Some(cp) => {
                last = Some((cp.clone(), None));
                prefixes.push(cp);
            }
            None => {
                last = Some((u.key.clone(), Some(u.upload_id.clone())));
                // The upload's initiator owns it (an upload aborted meanwhile: the bucket's).
                let owner = match s3.store.upload_options(&input.bucket, &u.key, &u.upload_id) {
                    Ok(o) => acl::owner_in_headers(&s3.users, &o.headers, &bucket_owner),
                    Err(_) => acl::owner_dto(&s3.users, &bucket_owner),
                };
                uploads.push(MultipartUpload {
                    key: Some(enc.s(&u.key)),
                    upload_id: Some(u.upload_id),
                    initiated: Some(util::timestamp(u.initiated)),
                    initiator: Some(Initiator {
                        display_name: owner.display_name.clone(),
                        id: owner.id.clone(),
                    }),
                    owner: Some(owner),
                    storage_class: Some(standard_class()),
                    ..MultipartUpload::default()
                });
            }
        }
    }
    let (next_key, next_id) = match (truncated, last) {
        (true, Some((k, id))) => (Some(enc.s(&k)), id),
        _ => (None, None),
    };
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: Some(enc.s(&prefix)),
        delimiter: enc.o(input.delimiter.as_ref()),
        key_marker: Some(enc.s(input.key_marker.as_deref().unwrap_or_default())),
        upload_id_marker: Some(input.upload_id_marker.unwrap_or_default()),
        max_uploads: Some(max as i32),
        is_truncated: Some(truncated),
        next_key_marker: next_key,
        next_upload_id_marker: next_id,
        common_prefixes: common_prefixes(&prefixes, &enc),
        uploads: (!uploads.is_empty()).then_some(uploads),
        encoding_type: enc.kind(),
        request_charged: None,
    }))
}

/// The object checksum a completion stores: composed from the parts' checksums of the
/// upload's algorithm (those the store kept, else those the client lists), checked against
/// what the client states for the whole object.
fn compose_checksums(
    s3: &RailS3,
    input: &CompleteMultipartUploadInput,
    listed: &[CompletedPart],
    parts: &[(u32, String)],
    upload: &PutOptions,
) -> S3Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let Some((alg, full)) = upload_checksum(upload) else {
        return Ok(out);
    };
    let stored = s3
        .store
        .list_parts(&input.bucket, &input.key, &input.upload_id)
        .map_err(store_error)?;
    let mut raws = Vec::with_capacity(parts.len());
    for ((n, _), listed) in parts.iter().zip(listed) {
        let Some(part) = stored.iter().find(|p| p.number == *n) else {
            // The store refuses the completion with InvalidPart.
            return Ok(out);
        };
        let client = checksum_of!(listed, alg);
        let client = match client {
            Some(v) => Some(checksum::decode_value(alg, v).ok_or_else(|| {
                err(
                    S3ErrorCode::InvalidPart,
                    format!("part {n}: the {} checksum is not valid", alg.name()),
                )
            })?),
            None => None,
        };
        let kept =
            checksum::stored(&part.checksums, alg).and_then(|v| checksum::decode_value(alg, &v));
        let raw = match (kept, client) {
            (Some(k), Some(c)) if k != c => {
                return Err(err(
                    S3ErrorCode::InvalidPart,
                    format!(
                        "part {n}: the {} checksum listed does not match the part's",
                        alg.name()
                    ),
                ))
            }
            (Some(k), _) => k,
            (None, Some(c)) => c,
            (None, None) => {
                tracing::debug!(part = n, "a part has no checksum; the object gets none");
                return Ok(out);
            }
        };
        raws.push((raw, part.size));
    }
    if let Some(size) = input.mpu_object_size {
        let total: u64 = raws.iter().map(|(_, s)| s).sum();
        if u64::try_from(size).ok() != Some(total) {
            return Err(invalid_request(format!(
                "The provided x-amz-mp-object-size ({size}) does not match the parts' size \
                 ({total})."
            )));
        }
    }
    let Some(value) = checksum::compose(alg, full, &raws) else {
        return Ok(out);
    };
    let stated = checksum_of!(input, alg);
    if let Some(s) = stated {
        let base = |v: &str| v.split('-').next().unwrap_or_default().trim().to_string();
        if base(s) != base(&value) {
            return Err(err(
                S3ErrorCode::BadDigest,
                format!(
                    "The {} you specified for the object did not match the calculated \
                     checksum.",
                    alg.name()
                ),
            ));
        }
    }
    out.insert(alg.name().to_string(), value);
    Ok(out)
}
