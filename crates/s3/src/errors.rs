//! The one place where store errors become S3 errors and HTTP statuses.

use railstore_store::StoreError;
use s3s::{S3Error, S3ErrorCode};

/// Maps a store error to the S3 error a client expects. Errors that are the server's fault are
/// logged here, with their detail, and answered with a generic `InternalError`.
pub(crate) fn store_error(e: StoreError) -> S3Error {
    use S3ErrorCode as C;
    let msg = e.to_string();
    let code = match &e {
        StoreError::NoSuchBucket(_) => C::NoSuchBucket,
        StoreError::BucketNotEmpty(_) => C::BucketNotEmpty,
        StoreError::InvalidBucketName { .. } => C::InvalidBucketName,
        StoreError::NoSuchKey { .. } => C::NoSuchKey,
        StoreError::KeyLength { len: 0, .. } => C::InvalidArgument,
        StoreError::KeyLength { .. } => C::KeyTooLongError,
        StoreError::EntityTooLarge { .. } => C::EntityTooLarge,
        StoreError::EntityTooSmall { .. } => C::EntityTooSmall,
        StoreError::InvalidRange { .. } => C::InvalidRange,
        StoreError::BadDigest(_) => C::BadDigest,
        StoreError::Body(_) => C::IncompleteBody,
        StoreError::NoSuchUpload(_) => C::NoSuchUpload,
        StoreError::InvalidPart { .. } => C::InvalidPart,
        StoreError::InvalidPartOrder => C::InvalidPartOrder,
        StoreError::PreconditionFailed(_) => C::PreconditionFailed,
        StoreError::InvalidArgument(_) => C::InvalidArgument,
        StoreError::NoSuchVersion { .. } => C::NoSuchVersion,
        StoreError::ObjectLocked(_) => C::AccessDenied,
        // A race with another request (retried by clients).
        StoreError::Conflict(_) => C::OperationAborted,
        StoreError::DeleteMarker(version) => {
            // A delete marker has nothing to read; the headers say what it is.
            let mut e = S3Error::with_message(C::MethodNotAllowed, msg.clone());
            let mut h = http::HeaderMap::new();
            h.insert(
                "x-amz-delete-marker",
                http::HeaderValue::from_static("true"),
            );
            if let Ok(v) = http::HeaderValue::from_str(version) {
                h.insert("x-amz-version-id", v);
            }
            e.set_headers(h);
            return e;
        }
        StoreError::ShuttingDown | StoreError::IndexLoading => C::ServiceUnavailable,
        _ => {
            tracing::error!(error = %e, "internal error");
            return S3Error::with_message(
                C::InternalError,
                "We encountered an internal error. Please try again.",
            );
        }
    };
    S3Error::with_message(code, msg)
}

/// An S3 error with a message.
pub(crate) fn err(code: S3ErrorCode, msg: impl Into<String>) -> S3Error {
    S3Error::with_message(code, msg.into())
}

/// A bucket configuration that is not set (CORS, tagging, encryption): 404, as S3.
pub(crate) fn no_configuration(code: S3ErrorCode, msg: &str) -> S3Error {
    let mut e = err(code, msg);
    e.set_status_code(http::StatusCode::NOT_FOUND);
    e
}

/// `InvalidArgument` with a message.
pub(crate) fn invalid_argument(msg: impl Into<String>) -> S3Error {
    err(S3ErrorCode::InvalidArgument, msg)
}

/// `InvalidRequest` with a message.
pub(crate) fn invalid_request(msg: impl Into<String>) -> S3Error {
    err(S3ErrorCode::InvalidRequest, msg)
}

/// `InvalidBucketState`: the bucket's state forbids the request (409, as S3).
pub(crate) fn invalid_bucket_state(msg: &str) -> S3Error {
    let mut e = err(S3ErrorCode::InvalidBucketState, msg);
    e.set_status_code(http::StatusCode::CONFLICT);
    e
}

/// `NotImplemented` with a message.
pub(crate) fn not_implemented(msg: impl Into<String>) -> S3Error {
    err(S3ErrorCode::NotImplemented, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn status(e: StoreError) -> (String, StatusCode) {
        let s = store_error(e);
        (s.code().as_str().to_string(), s.status_code().unwrap())
    }

    #[test]
    fn store_errors_map_to_s3_codes_and_statuses() {
        let cases: Vec<(StoreError, &str, u16)> = vec![
            (StoreError::NoSuchBucket("b".into()), "NoSuchBucket", 404),
            (
                StoreError::BucketNotEmpty("b".into()),
                "BucketNotEmpty",
                409,
            ),
            (
                StoreError::InvalidBucketName {
                    name: "B".into(),
                    why: "x",
                },
                "InvalidBucketName",
                400,
            ),
            (
                StoreError::NoSuchKey {
                    bucket: "b".into(),
                    key: "k".into(),
                },
                "NoSuchKey",
                404,
            ),
            (
                StoreError::KeyLength {
                    len: 2000,
                    max: 1024,
                },
                "KeyTooLongError",
                400,
            ),
            (
                StoreError::EntityTooLarge { size: 2, max: 1 },
                "EntityTooLarge",
                400,
            ),
            (
                StoreError::EntityTooSmall {
                    part: 1,
                    size: 1,
                    min: 2,
                },
                "EntityTooSmall",
                400,
            ),
            (StoreError::InvalidRange { size: 1 }, "InvalidRange", 416),
            (StoreError::BadDigest("x".into()), "BadDigest", 400),
            (StoreError::Body("x".into()), "IncompleteBody", 400),
            (StoreError::NoSuchUpload("u".into()), "NoSuchUpload", 404),
            (
                StoreError::InvalidPart {
                    part: 1,
                    why: "x".into(),
                },
                "InvalidPart",
                400,
            ),
            (StoreError::InvalidPartOrder, "InvalidPartOrder", 400),
            (
                StoreError::InvalidArgument("x".into()),
                "InvalidArgument",
                400,
            ),
            (StoreError::ShuttingDown, "ServiceUnavailable", 503),
            (StoreError::IndexLoading, "ServiceUnavailable", 503),
            (StoreError::Corrupt("x".into()), "InternalError", 500),
        ];
        for (e, code, st) in cases {
            assert_eq!(
                status(e),
                (code.to_string(), StatusCode::from_u16(st).unwrap())
            );
        }
    }
}
