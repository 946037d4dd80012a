//! Bucket operations: list, create, delete, head, location, versioning.

use crate::acl;
use crate::errors::{err, invalid_argument, store_error};
use crate::lock;
use crate::service::RailS3;
use crate::util::{self, token_decode, token_encode};
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};

pub(crate) async fn list_buckets(
    s3: &RailS3,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let input = req.input;
    // Each user sees its own buckets (an unsigned request never gets here).
    let caller = s3.users.caller(req.credentials.as_ref());
    let me = caller.map_or(s3.users.main().id.as_str(), |u| u.id.as_str());
    let max = match input.max_buckets {
        None => usize::MAX,
        Some(n) if (1..=10_000).contains(&n) => n as usize,
        Some(_) => return Err(invalid_argument("max-buckets must be 1 to 10000")),
    };
    let after = match input.continuation_token.as_deref() {
        None => None,
        Some(t) => Some(
            token_decode(t)
                .ok_or_else(|| invalid_argument("The continuation token provided is incorrect"))?,
        ),
    };
    let prefix = input.prefix.clone().unwrap_or_default();
    let all: Vec<_> = s3
        .store
        .list_buckets()
        .into_iter()
        .filter(|b| b.name.starts_with(&prefix))
        .filter(|b| after.as_ref().is_none_or(|a| b.name > *a))
        .filter(|b| {
            let setting = b.settings.get(acl::BUCKET_ACL_SETTING);
            acl::acl_of_setting(setting.map(String::as_str), &s3.users, &b.name)
                .is_ok_and(|a| a.owner == me)
        })
        .collect();
    let truncated = all.len() > max;
    let page: Vec<_> = all.into_iter().take(max).collect();
    let token = truncated
        .then(|| page.last().map(|b| token_encode(&b.name)))
        .flatten();
    let buckets = page
        .into_iter()
        .map(|b| Bucket {
            bucket_region: Some(s3.region.clone()),
            creation_date: Some(util::timestamp(b.created)),
            name: Some(b.name),
        })
        .collect();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        continuation_token: token,
        owner: Some(acl::owner_dto(&s3.users, me)),
        prefix: input.prefix,
    }))
}

const US_EAST_1: &str = "us-east-1";
/// The legacy name of eu-west-1 as a location constraint.
const LEGACY_EU: &str = "EU";
/// The bucket setting that keeps a legacy location constraint.
const LOCATION_SETTING: &str = "location";

/// A CreateBucket location constraint as AWS takes it at an endpoint for `region`: the
/// region's own name (`EU` too for eu-west-1), or none (the endpoint's region; AWS insists on
/// the name outside us-east-1, railstore does not); us-east-1's own name is refused there.
fn check_location(constraint: Option<&str>, region: &str) -> S3Result<()> {
    match constraint {
        None => Ok(()),
        Some(c) if region == US_EAST_1 && c == US_EAST_1 => Err(err(
            S3ErrorCode::InvalidLocationConstraint,
            "The specified location-constraint is not valid: us-east-1 takes none",
        )),
        Some(c) if c == region || (c == LEGACY_EU && region == "eu-west-1") => Ok(()),
        Some(c) => Err(err(
            S3ErrorCode::IllegalLocationConstraintException,
            format!(
                "The {c} location constraint is incompatible for the region specific endpoint \
                 this request was sent to ({region})."
            ),
        )),
    }
}

pub(crate) async fn create_bucket(
    s3: &RailS3,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let S3Request {
        input,
        headers,
        credentials,
        ..
    } = req;
    let Some(caller) = s3.users.caller(credentials.as_ref()) else {
        return Err(err(S3ErrorCode::AccessDenied, "Signature is required"));
    };
    let constraint = input
        .create_bucket_configuration
        .as_ref()
        .and_then(|c| c.location_constraint.as_ref())
        .map(|c| c.as_str().to_string())
        .filter(|c| !c.is_empty());
    check_location(constraint.as_deref(), &s3.region)?;
    let ownership = input
        .object_ownership
        .as_ref()
        .map(|o| acl::parse_ownership(o.as_str()))
        .transpose()?;
    let new_acl = acl::Acl::from_headers(&headers, &s3.users, &caller.id, &caller.id)?
        .unwrap_or_else(|| acl::Acl::private(&caller.id));
    if ownership == Some(acl::Ownership::BucketOwnerEnforced) && !new_acl.owner_only() {
        return Err(acl::acls_off());
    }
    let created = s3
        .store
        .create_bucket_with(&input.bucket, acl::new_bucket_settings(&new_acl, ownership))
        .await
        .map_err(store_error)?;
    let with_lock = input.object_lock_enabled_for_bucket == Some(true);
    if created && with_lock {
        lock::enable_on_new_bucket(s3, &input.bucket).await?;
    }
    if !created {
        // Another's bucket, or one whose ACL this request would change (RGW's rule: a
        // re-creation changes nothing, so it succeeds only when it would make the same).
        let existing = acl::bucket_acl(&s3.store, &s3.users, &input.bucket)?;
        if existing != new_acl {
            let why = if existing.owner == caller.id {
                "The bucket exists with another ACL than this request asks for"
            } else {
                "The requested bucket name is not available. The bucket namespace is shared by \
                 all users of the system. Please select a different name and try again."
            };
            return Err(err(S3ErrorCode::BucketAlreadyExists, why));
        }
        if with_lock && !lock::enabled(s3, &input.bucket)? {
            return Err(err(
                S3ErrorCode::BucketAlreadyOwnedByYou,
                "The bucket exists without object lock; lock it with PutObjectLockConfiguration",
            ));
        }
        tracing::debug!(bucket = %input.bucket, "bucket re-created by its owner");
    } else if constraint.as_deref() == Some(LEGACY_EU) {
        // GetBucketLocation answers the legacy name the bucket was made with.
        s3.store
            .set_bucket_setting(&input.bucket, LOCATION_SETTING, Some(LEGACY_EU.into()))
            .await
            .map_err(store_error)?;
    }
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{}", input.bucket)),
    }))
}

pub(crate) async fn delete_bucket(
    s3: &RailS3,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    s3.store
        .delete_bucket(&req.input.bucket)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(DeleteBucketOutput {}))
}

pub(crate) async fn head_bucket(
    s3: &RailS3,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    s3.store
        .head_bucket(&req.input.bucket)
        .map_err(store_error)?;
    Ok(S3Response::new(HeadBucketOutput {
        bucket_region: Some(s3.region.clone()),
        ..HeadBucketOutput::default()
    }))
}

pub(crate) async fn get_bucket_location(
    s3: &RailS3,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    s3.store
        .head_bucket(&req.input.bucket)
        .map_err(store_error)?;
    let stored = s3
        .store
        .bucket_setting(&req.input.bucket, LOCATION_SETTING)
        .map_err(store_error)?;
    // S3 answers an empty constraint for us-east-1.
    let location_constraint = stored
        .or_else(|| (s3.region != US_EAST_1).then(|| s3.region.clone()))
        .map(BucketLocationConstraint::from);
    Ok(S3Response::new(GetBucketLocationOutput {
        location_constraint,
    }))
}
