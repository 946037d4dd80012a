//! Bucket default encryption: Put/Get/DeleteBucketEncryption, and the default they set,
//! which PutObject, CopyObject and CreateMultipartUpload apply when a request asks for none.

use super::{kek, Scheme, AES256, AWS_KMS};
use crate::errors::{err, invalid_argument, no_configuration, store_error};
use crate::service::RailS3;
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use serde::{Deserialize, Serialize};

/// The bucket setting that holds the default.
const SETTING: &str = "encryption";

/// A bucket's default encryption as stored.
#[derive(Serialize, Deserialize)]
struct BucketDefault {
    algorithm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kms_key_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bucket_key_enabled: Option<bool>,
}

impl BucketDefault {
    fn scheme(&self) -> Option<Scheme> {
        match self.algorithm.as_str() {
            AES256 => Some(Scheme::S3),
            AWS_KMS => self.kms_key_id.clone().map(Scheme::Kms),
            _ => None,
        }
    }
}

fn stored(s3: &RailS3, bucket: &str) -> S3Result<Option<BucketDefault>> {
    let Some(text) = s3
        .store
        .bucket_setting(bucket, SETTING)
        .map_err(store_error)?
    else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        err(
            S3ErrorCode::InternalError,
            format!("the bucket's stored encryption setting is damaged: {e}"),
        )
    })
}

/// The encryption a bucket applies to writes that ask for none.
pub(crate) fn bucket_default(s3: &RailS3, bucket: &str) -> S3Result<Option<Scheme>> {
    Ok(stored(s3, bucket)?.and_then(|d| d.scheme()))
}

pub(crate) async fn put_bucket_encryption(
    s3: &RailS3,
    req: S3Request<PutBucketEncryptionInput>,
) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
    let input = req.input;
    let rules = &input.server_side_encryption_configuration.rules;
    let [rule] = rules.as_slice() else {
        return Err(err(
            S3ErrorCode::MalformedXML,
            "A server-side encryption configuration has exactly one rule",
        ));
    };
    let by_default = rule
        .apply_server_side_encryption_by_default
        .as_ref()
        .ok_or_else(|| {
            err(
                S3ErrorCode::MalformedXML,
                "The rule needs ApplyServerSideEncryptionByDefault",
            )
        })?;
    let algorithm = by_default.sse_algorithm.as_str().to_string();
    let kms_key_id = by_default
        .kms_master_key_id
        .clone()
        .filter(|k| !k.is_empty());
    if let Some(id) = &kms_key_id {
        super::check_kms_key_id(id)?;
    }
    let default = BucketDefault {
        algorithm,
        kms_key_id,
        bucket_key_enabled: rule.bucket_key_enabled,
    };
    let scheme = match (default.algorithm.as_str(), &default.kms_key_id) {
        (AES256, None) => Scheme::S3,
        (AWS_KMS, Some(id)) => Scheme::Kms(id.clone()),
        (AWS_KMS, None) => {
            return Err(invalid_argument(
                "railstore has no default KMS key: give KMSMasterKeyID",
            ))
        }
        (AES256, Some(_)) => {
            return Err(invalid_argument(
                "KMSMasterKeyID goes only with SSEAlgorithm aws:kms",
            ))
        }
        (other, _) => {
            return Err(invalid_argument(format!(
                "The encryption method specified is not supported: {other:?}"
            )))
        }
    };
    // Refuse now what every later write would be refused.
    kek(&scheme, &s3.keyring)?;
    let text = serde_json::to_string(&default).expect("a default serialises");
    s3.store
        .set_bucket_setting(&input.bucket, SETTING, Some(text))
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutBucketEncryptionOutput::default()))
}

pub(crate) async fn get_bucket_encryption(
    s3: &RailS3,
    req: S3Request<GetBucketEncryptionInput>,
) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
    let Some(d) = stored(s3, &req.input.bucket)? else {
        return Err(no_configuration(
            S3ErrorCode::ServerSideEncryptionConfigurationNotFoundError,
            "The server side encryption configuration was not found",
        ));
    };
    let rule = ServerSideEncryptionRule {
        apply_server_side_encryption_by_default: Some(ServerSideEncryptionByDefault {
            sse_algorithm: ServerSideEncryption::from(d.algorithm),
            kms_master_key_id: d.kms_key_id,
        }),
        bucket_key_enabled: d.bucket_key_enabled,
    };
    Ok(S3Response::new(GetBucketEncryptionOutput {
        server_side_encryption_configuration: Some(ServerSideEncryptionConfiguration {
            rules: vec![rule],
        }),
    }))
}

pub(crate) async fn delete_bucket_encryption(
    s3: &RailS3,
    req: S3Request<DeleteBucketEncryptionInput>,
) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
    s3.store
        .set_bucket_setting(&req.input.bucket, SETTING, None)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(DeleteBucketEncryptionOutput::default()))
}
