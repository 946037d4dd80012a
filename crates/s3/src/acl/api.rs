//! Get/PutBucketAcl, Get/PutObjectAcl and the bucket ownership controls. Who may call them is
//! decided before (`access.rs`: the owner, or `READ_ACP` / `WRITE_ACP` grants).

use super::{acls_off, bucket_acl, object_acl, ownership, public_acl_blocked, set_object_acl};
use super::{Acl, Ownership, BUCKET_ACL_SETTING, OWNERSHIP_SETTING};
use crate::errors::{err, invalid_request, no_configuration, store_error};
use crate::service::RailS3;
use crate::users::Users;
use http::{HeaderMap, StatusCode};
use railstore_store::StoreError;
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};

/// The ACL a Put…Acl request sets on a resource `owner` owns in a bucket `bucket_owner`
/// owns: its headers' or its document's, not both, and one of them.
fn requested(
    headers: &HeaderMap,
    policy: Option<&AccessControlPolicy>,
    users: &Users,
    owner: &str,
    bucket_owner: &str,
) -> S3Result<Acl> {
    match (
        Acl::from_headers(headers, users, owner, bucket_owner)?,
        policy,
    ) {
        (Some(_), Some(_)) => Err(invalid_request(
            "Specifying both an ACL header and an AccessControlPolicy document is not allowed",
        )),
        (Some(acl), None) => Ok(acl),
        (None, Some(p)) => Acl::from_policy(p, users, owner),
        (None, None) => Err(err(
            S3ErrorCode::MissingSecurityHeader,
            "Your request is missing a required header: x-amz-acl, x-amz-grant-* or an \
             AccessControlPolicy document",
        )),
    }
}

pub(crate) async fn get_bucket_acl(
    s3: &RailS3,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let bucket = &req.input.bucket;
    s3.store.head_bucket(bucket).map_err(store_error)?;
    let acl = bucket_acl(&s3.store, &s3.users, bucket)?;
    Ok(S3Response::new(GetBucketAclOutput {
        grants: Some(acl.grants_dto(&s3.users)),
        owner: Some(acl.owner_dto(&s3.users)),
    }))
}

pub(crate) async fn put_bucket_acl(
    s3: &RailS3,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let bucket = &req.input.bucket;
    s3.store.head_bucket(bucket).map_err(store_error)?;
    if ownership(&s3.store, bucket)? == Some(Ownership::BucketOwnerEnforced) {
        return Err(acls_off());
    }
    let owner = bucket_acl(&s3.store, &s3.users, bucket)?.owner;
    let acl = requested(
        &req.headers,
        req.input.access_control_policy.as_ref(),
        &s3.users,
        &owner,
        &owner,
    )?;
    if acl.is_public() && crate::policy::blocks_public_acls(&s3.store, bucket)? {
        return Err(public_acl_blocked());
    }
    s3.store
        .set_bucket_setting(
            bucket,
            BUCKET_ACL_SETTING,
            Some(serde_json::to_string(&acl).expect("serialises")),
        )
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutBucketAclOutput::default()))
}

pub(crate) async fn get_object_acl(
    s3: &RailS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let input = &req.input;
    let bucket_owner = bucket_acl(&s3.store, &s3.users, &input.bucket)?.owner;
    let info = s3
        .store
        .head_object_version(&input.bucket, &input.key, input.version_id.as_deref())
        .await
        .map_err(|e| crate::versioning::read_error(&s3.store, &input.bucket, &input.key, e))?;
    crate::access::confirm_seen(&req.extensions, &info, false)?;
    let acl = object_acl(&info, &bucket_owner);
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(acl.grants_dto(&s3.users)),
        owner: Some(acl.owner_dto(&s3.users)),
        request_charged: None,
    }))
}

pub(crate) async fn put_object_acl(
    s3: &RailS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let input = &req.input;
    let bucket = &input.bucket;
    let version = input.version_id.as_deref();
    if ownership(&s3.store, bucket)? == Some(Ownership::BucketOwnerEnforced) {
        return Err(acls_off());
    }
    let bucket_owner = bucket_acl(&s3.store, &s3.users, bucket)?.owner;
    let info = s3
        .store
        .head_object_version(bucket, &input.key, version)
        .await
        .map_err(|e| crate::versioning::read_error(&s3.store, bucket, &input.key, e))?;
    let owner = object_acl(&info, &bucket_owner).owner;
    let acl = requested(
        &req.headers,
        input.access_control_policy.as_ref(),
        &s3.users,
        &owner,
        &bucket_owner,
    )?;
    if acl.is_public() && crate::policy::blocks_public_acls(&s3.store, bucket)? {
        return Err(public_acl_blocked());
    }
    // Only the record changes: the version, its time and its bytes stay.
    let seen = crate::access::seen(&req.extensions, false);
    s3.store
        .update_version_headers(bucket, &input.key, version, |now, headers| {
            if !seen.matches(now) {
                return Err(crate::access::changed_since_checked_store());
            }
            if object_acl(now, &bucket_owner).owner != owner {
                return Err(StoreError::PreconditionFailed(
                    "the object was replaced while its ACL was set; retry".into(),
                ));
            }
            set_object_acl(headers, &acl, &bucket_owner);
            Ok(())
        })
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

pub(crate) async fn get_bucket_ownership_controls(
    s3: &RailS3,
    req: S3Request<GetBucketOwnershipControlsInput>,
) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
    let bucket = &req.input.bucket;
    s3.store.head_bucket(bucket).map_err(store_error)?;
    let o = ownership(&s3.store, bucket)?.ok_or_else(|| {
        no_configuration(
            S3ErrorCode::OwnershipControlsNotFoundError,
            "The bucket ownership controls were not found",
        )
    })?;
    Ok(S3Response::new(GetBucketOwnershipControlsOutput {
        ownership_controls: Some(OwnershipControls {
            rules: vec![OwnershipControlsRule {
                object_ownership: ObjectOwnership::from(o.as_str().to_string()),
            }],
        }),
    }))
}

/// The ownership a request names (one rule, a value S3 knows).
pub(crate) fn parse_ownership(value: &str) -> S3Result<Ownership> {
    Ownership::parse(value).ok_or_else(|| {
        err(
            S3ErrorCode::MalformedXML,
            format!(
                "Unknown object ownership {value:?}: BucketOwnerEnforced, BucketOwnerPreferred \
                 or ObjectWriter"
            ),
        )
    })
}

pub(crate) async fn put_bucket_ownership_controls(
    s3: &RailS3,
    req: S3Request<PutBucketOwnershipControlsInput>,
) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
    let bucket = &req.input.bucket;
    s3.store.head_bucket(bucket).map_err(store_error)?;
    let [rule] = &req.input.ownership_controls.rules[..] else {
        return Err(err(
            S3ErrorCode::MalformedXML,
            "Ownership controls hold exactly one rule",
        ));
    };
    let o = parse_ownership(rule.object_ownership.as_str())?;
    if o == Ownership::BucketOwnerEnforced
        && !bucket_acl(&s3.store, &s3.users, bucket)?.owner_only()
    {
        let mut e = err(
            S3ErrorCode::from_bytes(b"InvalidBucketAclWithObjectOwnership").expect("a code"),
            "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting",
        );
        e.set_status_code(StatusCode::BAD_REQUEST);
        return Err(e);
    }
    s3.store
        .set_bucket_setting(bucket, OWNERSHIP_SETTING, Some(o.as_str().to_string()))
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutBucketOwnershipControlsOutput::default()))
}

pub(crate) async fn delete_bucket_ownership_controls(
    s3: &RailS3,
    req: S3Request<DeleteBucketOwnershipControlsInput>,
) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
    s3.store
        .set_bucket_setting(&req.input.bucket, OWNERSHIP_SETTING, None)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(
        DeleteBucketOwnershipControlsOutput::default(),
    ))
}
