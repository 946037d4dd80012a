//! POST Object: uploads from browser forms (multipart/form-data with a signed policy).
//!
//! s3s would read the whole form, file included, before anyone checked who sent it. Here the
//! router hands the form over unread: its fields (before the file, bounded) are read, the
//! signature over the policy is checked (Version 2 or 4), then the policy's expiration and
//! conditions; only then is the file streamed, straight into the same path as a PutObject
//! (encryption, checksums, tags, metadata), its length held to the policy's
//! `content-length-range` as it arrives. Anonymous forms are refused (no bucket is public).

mod form;
mod policy;

use crate::service::RailS3;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode};
use hyper::body::Body;
use policy::{Fields, Refusal};
use s3s::dto::{StreamingBlob, Timestamp, TimestampFormat};
use s3s::S3Request;
use s3s::StdError;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// The answer to a form: status, headers, body.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

fn refused(Refusal(status, code, message): Refusal) -> Answer {
    error_answer(status, code, &message)
}

/// An S3 error document.
fn error_answer(status: StatusCode, code: &str, message: &str) -> Answer {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message></Error>",
        xml_escape(message)
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    Answer {
        status,
        headers,
        body: xml.into(),
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The file's length as it streams, against the policy's `content-length-range`.
#[derive(Default)]
struct Length {
    bytes: AtomicU64,
    /// 1: above the range; 2: below it.
    outside: AtomicU8,
}

/// Handles one form POST to `bucket`.
pub(crate) async fn post_object<B>(
    s3: &RailS3,
    bucket: &str,
    content_type: Option<&HeaderValue>,
    body: B,
    fields_max: usize,
) -> Answer
where
    B: Body<Data = Bytes, Error = StdError> + Unpin + Send + Sync + 'static,
{
    let (head, file) = match form::read(content_type, body, fields_max).await {
        Ok(f) => f,
        Err(form::FormError::TooLarge) => {
            return refused(Refusal(
                StatusCode::BAD_REQUEST,
                "MaxPostPreDataLengthExceeded",
                format!(
                    "Your POST request fields preceding the upload file were too large (more \
                     than {fields_max} bytes)."
                ),
            ))
        }
        Err(form::FormError::Malformed(why)) => {
            return refused(Refusal(
                StatusCode::BAD_REQUEST,
                "MalformedPOSTRequest",
                format!(
                    "The body of your POST request is not well-formed multipart/form-data: {why}."
                ),
            ))
        }
        Err(form::FormError::Body(why)) => {
            return refused(Refusal(
                StatusCode::BAD_REQUEST,
                "IncompleteBody",
                format!("The request body could not be read: {why}"),
            ))
        }
    };
    // `${filename}` in the key is the file's name, before the policy sees the key.
    let mut head = head;
    let filename = head.filename.clone().unwrap_or_default();
    for (name, value) in &mut head.fields {
        if name.eq_ignore_ascii_case("key") {
            *value = value.replace("${filename}", &filename);
        }
    }
    let fields = Fields(&head.fields);
    // Signed, or anonymous (then the bucket's ACL or policy must let everyone write).
    let signed = match policy::authenticate(&fields, &s3.users) {
        Ok(s) => s,
        Err(r) => return refused(r),
    };
    let user = signed.map(|(_, u)| u);
    let Some(key) = fields.get("key").filter(|k| !k.is_empty()) else {
        return refused(Refusal(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "Bucket POST must contain a field named 'key'.  If it is specified, please check \
             the order of the fields."
                .into(),
        ));
    };
    let range = match signed {
        Some((policy, _)) => match policy::check(policy, &fields, bucket, SystemTime::now()) {
            Ok(r) => r,
            Err(r) => return refused(r),
        },
        None => None,
    };
    let Some(file) = file else {
        return refused(Refusal(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "POST requires exactly one file upload per request.".into(),
        ));
    };
    let key = key.to_string();
    let length = Arc::new(Length::default());
    let counted = length.clone();
    let (min, max) = range.unwrap_or((0, u64::MAX));
    let file = file.map(move |piece| {
        let piece = piece?;
        let total = counted
            .bytes
            .fetch_add(piece.len() as u64, Ordering::SeqCst)
            + piece.len() as u64;
        if total > max {
            counted.outside.store(1, Ordering::SeqCst);
            return Err(form::FileError(
                "the file is larger than the policy allows".into(),
            ));
        }
        Ok(piece)
    });
    // The end of the file decides the minimum.
    let ended = length.clone();
    let file = file.chain(futures_util::stream::once(async move {
        if ended.bytes.load(Ordering::SeqCst) < min {
            ended.outside.store(2, Ordering::SeqCst);
            return Err(form::FileError(
                "the file is smaller than the policy allows".into(),
            ));
        }
        Ok(Bytes::new())
    }));
    let input = match put_input(&fields, bucket, &key, StreamingBlob::wrap(file)) {
        Ok(i) => i,
        Err(r) => return refused(r),
    };
    // The form's `acl` is the PutObject's `x-amz-acl`.
    let mut headers = HeaderMap::new();
    if let Some(acl) = fields.get("acl") {
        match HeaderValue::from_str(acl) {
            Ok(v) => {
                headers.insert("x-amz-acl", v);
            }
            Err(_) => {
                return refused(Refusal(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgument",
                    "The acl field is not a canned ACL".into(),
                ))
            }
        }
    }
    // Whoever signed the form needs the same right to write here as a PutObject would.
    let target = crate::access::Target {
        bucket,
        key: Some(&key),
        version: None,
    };
    let mut context = crate::policy::Request {
        headers: &headers,
        query: "",
        source: None,
        existing_tags: None,
        prefix: None,
    };
    if let Err(e) = crate::access::authorize(
        &s3.store,
        &s3.users,
        user,
        "PutObject",
        &target,
        &mut context,
    )
    .await
    {
        return refused(Refusal(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            e.message().unwrap_or("Access Denied").to_string(),
        ));
    }
    let req = S3Request {
        input,
        method: http::Method::PUT,
        uri: http::Uri::from_static("/"),
        headers,
        extensions: http::Extensions::new(),
        // Who sent it: the object is theirs (an anonymous one's, the bucket owner's).
        credentials: user.map(|u| s3s::auth::Credentials {
            access_key: u.access_key.clone(),
            secret_key: s3s::auth::SecretKey::from(u.secret_key.as_str()),
        }),
        region: None,
        service: None,
        trailing_headers: None,
    };
    let put = crate::object::put_object(s3, req).await;
    match length.outside.load(Ordering::SeqCst) {
        1 => {
            return refused(Refusal(
                StatusCode::BAD_REQUEST,
                "EntityTooLarge",
                "Your proposed upload exceeds the maximum allowed size".into(),
            ))
        }
        2 => {
            return refused(Refusal(
                StatusCode::BAD_REQUEST,
                "EntityTooSmall",
                "Your proposed upload is smaller than the minimum allowed size".into(),
            ))
        }
        _ => {}
    }
    let out = match put {
        Ok(resp) => resp.output,
        Err(e) => {
            let status = e.status_code().unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error_answer(status, e.code().as_str(), e.message().unwrap_or_default());
        }
    };
    let etag = out.e_tag.map(|e| e.value().to_string()).unwrap_or_default();
    success(&fields, bucket, &key, &etag)
}

/// The PutObject a form asks for.
fn put_input(
    fields: &Fields<'_>,
    bucket: &str,
    key: &str,
    body: StreamingBlob,
) -> Result<s3s::dto::PutObjectInput, Refusal> {
    let text = |name: &str| fields.get(name).map(str::to_string);
    let metadata = fields
        .0
        .iter()
        .filter_map(|(k, v)| {
            let name = k.to_ascii_lowercase();
            Some((name.strip_prefix("x-amz-meta-")?.to_string(), v.clone()))
        })
        .collect::<std::collections::HashMap<_, _>>();
    let expires = match fields.get("Expires") {
        None => None,
        Some(v) => Some(Timestamp::parse(TimestampFormat::HttpDate, v).map_err(|_| {
            Refusal(
                StatusCode::BAD_REQUEST,
                "InvalidArgument",
                format!("Expires {v:?} is not an HTTP date"),
            )
        })?),
    };
    let tagging = match fields.get("tagging") {
        None => None,
        Some(xml) => Some(tagging_header(xml)?),
    };
    Ok(s3s::dto::PutObjectInput {
        bucket: bucket.to_string(),
        key: key.to_string(),
        body: Some(body),
        content_type: text("Content-Type"),
        cache_control: text("Cache-Control"),
        content_disposition: text("Content-Disposition"),
        content_encoding: text("Content-Encoding"),
        content_language: text("Content-Language"),
        expires,
        metadata: (!metadata.is_empty()).then_some(metadata),
        tagging,
        server_side_encryption: text("x-amz-server-side-encryption").map(Into::into),
        ssekms_key_id: text("x-amz-server-side-encryption-aws-kms-key-id"),
        sse_customer_algorithm: text("x-amz-server-side-encryption-customer-algorithm"),
        sse_customer_key: text("x-amz-server-side-encryption-customer-key"),
        sse_customer_key_md5: text("x-amz-server-side-encryption-customer-key-MD5"),
        checksum_crc32: text("x-amz-checksum-crc32"),
        checksum_crc32c: text("x-amz-checksum-crc32c"),
        checksum_crc64nvme: text("x-amz-checksum-crc64nvme"),
        checksum_sha1: text("x-amz-checksum-sha1"),
        checksum_sha256: text("x-amz-checksum-sha256"),
        storage_class: text("x-amz-storage-class").map(Into::into),
        ..Default::default()
    })
}

/// A form's `tagging` (a `<Tagging>` document) as the `x-amz-tagging` header writes it.
fn tagging_header(xml: &str) -> Result<String, Refusal> {
    let malformed = || {
        Refusal(
            StatusCode::BAD_REQUEST,
            "MalformedXML",
            "The tagging field is not a valid Tagging document".into(),
        )
    };
    let mut d = s3s::xml::Deserializer::new(xml.as_bytes());
    let tagging: s3s::dto::Tagging =
        s3s::xml::Deserialize::deserialize(&mut d).map_err(|_| malformed())?;
    let pairs: Vec<String> = tagging
        .tag_set
        .iter()
        .map(|t| {
            format!(
                "{}={}",
                crate::util::url_encode(t.key.as_deref().unwrap_or_default()),
                crate::util::url_encode(t.value.as_deref().unwrap_or_default())
            )
        })
        .collect();
    Ok(pairs.join("&"))
}

/// What a stored upload answers: `success_action_redirect` (303 to it, with the bucket, key
/// and ETag), else `success_action_status` 200 (empty), 201 (a `PostResponse` document) or
/// 204, the default (and the answer to any other value).
fn success(fields: &Fields<'_>, bucket: &str, key: &str, etag: &str) -> Answer {
    let quoted = format!("\"{etag}\"");
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&quoted) {
        headers.insert(http::header::ETAG, v);
    }
    let location = format!("/{bucket}/{}", crate::util::url_encode(key));
    if let Ok(v) = HeaderValue::from_str(&location) {
        headers.insert(http::header::LOCATION, v);
    }
    let redirect = fields
        .get("success_action_redirect")
        .or_else(|| fields.get("redirect"))
        .filter(|r| r.starts_with("http://") || r.starts_with("https://"));
    if let Some(to) = redirect {
        let sep = if to.contains('?') { '&' } else { '?' };
        let url = format!(
            "{to}{sep}bucket={}&key={}&etag={}",
            crate::util::url_encode(bucket),
            crate::util::url_encode(key),
            crate::util::url_encode(&quoted)
        );
        if let Ok(v) = HeaderValue::from_str(&url) {
            headers.insert(http::header::LOCATION, v);
            return Answer {
                status: StatusCode::SEE_OTHER,
                headers,
                body: Bytes::new(),
            };
        }
    }
    match fields.get("success_action_status") {
        Some("200") => Answer {
            status: StatusCode::OK,
            headers,
            body: Bytes::new(),
        },
        Some("201") => {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/xml"),
            );
            let xml = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<PostResponse><Location>{}</Location>\
                 <Bucket>{}</Bucket><Key>{}</Key><ETag>{}</ETag></PostResponse>",
                xml_escape(&location),
                xml_escape(bucket),
                xml_escape(key),
                xml_escape(&quoted)
            );
            Answer {
                status: StatusCode::CREATED,
                headers,
                body: xml.into(),
            }
        }
        _ => Answer {
            status: StatusCode::NO_CONTENT,
            headers,
            body: Bytes::new(),
        },
    }
}
