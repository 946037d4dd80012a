//! Object lock, which railstore does not do: no bucket is made with it (CreateBucket refuses
//! `x-amz-bucket-object-lock-enabled`), so every bucket answers as an AWS bucket without
//! object lock does — its configuration is not found, cannot be set on an existing bucket,
//! and no object in it has a retention or a legal hold.

use crate::errors::{err, invalid_request, no_configuration, store_error};
use crate::service::RailS3;
use http::StatusCode;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

/// The refusal of a retention or legal hold: the bucket has no object lock.
fn no_lock(s3: &RailS3, bucket: &str, key: &str) -> S3Error {
    if let Err(e) = s3.store.head_object(bucket, key) {
        return store_error(e);
    }
    invalid_request("Bucket is missing Object Lock Configuration")
}

pub(crate) async fn get_object_lock_configuration(
    s3: &RailS3,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    s3.store
        .head_bucket(&req.input.bucket)
        .map_err(store_error)?;
    Err(no_configuration(
        S3ErrorCode::ObjectLockConfigurationNotFoundError,
        "Object Lock configuration does not exist for this bucket",
    ))
}

pub(crate) async fn put_object_lock_configuration(
    s3: &RailS3,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    s3.store
        .head_bucket(&req.input.bucket)
        .map_err(store_error)?;
    let mut e = err(
        S3ErrorCode::InvalidBucketState,
        "Object Lock configuration cannot be enabled on this bucket: railstore has no object \
         lock",
    );
    e.set_status_code(StatusCode::CONFLICT);
    Err(e)
}

pub(crate) async fn get_object_retention(
    s3: &RailS3,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    Err(no_lock(s3, &req.input.bucket, &req.input.key))
}

pub(crate) async fn put_object_retention(
    s3: &RailS3,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    Err(no_lock(s3, &req.input.bucket, &req.input.key))
}

pub(crate) async fn get_object_legal_hold(
    s3: &RailS3,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    Err(no_lock(s3, &req.input.bucket, &req.input.key))
}

pub(crate) async fn put_object_legal_hold(
    s3: &RailS3,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    Err(no_lock(s3, &req.input.bucket, &req.input.key))
}
