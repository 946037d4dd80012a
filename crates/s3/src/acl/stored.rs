//! Where owners, ACLs and ownership controls live, and who owns what is written.
//!
//! - A bucket's ACL (with its owner) is its `acl` setting, written in the same record that
//!   creates the bucket; a bucket made before buckets had owners has none and is the main
//!   user's, private.
//! - An object's ACL (with its owner) is kept in its stored headers (`x-railstore-acl`, never
//!   sent as a header), only when it is not the bucket owner's private default, so the
//!   common object carries nothing extra.
//! - A bucket's object ownership (`BucketOwnerEnforced`, `BucketOwnerPreferred`,
//!   `ObjectWriter`) is its `object-ownership` setting; none set behaves as `ObjectWriter`,
//!   with ACLs on, as S3 buckets did before ownership controls.

use super::Acl;
use crate::errors::{err, store_error};
use crate::service::RailS3;
use crate::users::{User, Users};
use http::{HeaderMap, StatusCode};
use railstore_store::{ObjectInfo, Store};
use s3s::dto;
use s3s::{S3Error, S3ErrorCode, S3Result};
use std::collections::BTreeMap;

pub(crate) const BUCKET_ACL_SETTING: &str = "acl";
pub(crate) const OWNERSHIP_SETTING: &str = "object-ownership";
use railstore_store::ACL_HEADER as OBJECT_ACL_HEADER;

/// A bucket's object ownership control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// The writer owns what it writes (the default).
    ObjectWriter,
    /// The bucket owner owns what is written with `bucket-owner-full-control`.
    BucketOwnerPreferred,
    /// The bucket owner owns everything; ACLs are off.
    BucketOwnerEnforced,
}

impl Ownership {
    pub(crate) fn parse(s: &str) -> Option<Ownership> {
        Some(match s {
            "ObjectWriter" => Ownership::ObjectWriter,
            "BucketOwnerPreferred" => Ownership::BucketOwnerPreferred,
            "BucketOwnerEnforced" => Ownership::BucketOwnerEnforced,
            _ => return None,
        })
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Ownership::ObjectWriter => "ObjectWriter",
            Ownership::BucketOwnerPreferred => "BucketOwnerPreferred",
            Ownership::BucketOwnerEnforced => "BucketOwnerEnforced",
        }
    }
}

/// 400 `AccessControlListNotSupported`: ACLs are off in a `BucketOwnerEnforced` bucket.
pub(crate) fn acls_off() -> S3Error {
    let mut e = err(
        S3ErrorCode::from_bytes(b"AccessControlListNotSupported").expect("a code"),
        "The bucket does not allow ACLs",
    );
    e.set_status_code(StatusCode::BAD_REQUEST);
    e
}

/// 403 `AccessDenied`: the public access block's `BlockPublicAcls` refuses a public ACL.
pub(crate) fn public_acl_blocked() -> S3Error {
    err(
        S3ErrorCode::AccessDenied,
        "The bucket's public access block (BlockPublicAcls) refuses a public ACL",
    )
}

/// A bucket's ACL: its setting, else the main user's private default. A setting that
/// cannot be read is an internal error, never an open bucket.
pub(crate) fn bucket_acl(store: &Store, users: &Users, bucket: &str) -> S3Result<Acl> {
    let setting = store
        .bucket_setting(bucket, BUCKET_ACL_SETTING)
        .map_err(store_error)?;
    acl_of_setting(setting.as_deref(), users, bucket)
}

/// The ACL a bucket's `acl` setting holds (`None`: the main user's private default).
pub(crate) fn acl_of_setting(setting: Option<&str>, users: &Users, bucket: &str) -> S3Result<Acl> {
    match setting {
        None => Ok(Acl::private(&users.main().id)),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            err(
                S3ErrorCode::InternalError,
                format!("bucket {bucket:?}: its stored ACL cannot be read: {e}"),
            )
        }),
    }
}

/// The settings a new bucket is created with: its ACL (and owner), and its object ownership
/// when one is asked for.
pub(crate) fn new_bucket_settings(
    acl: &Acl,
    ownership: Option<Ownership>,
) -> BTreeMap<String, String> {
    let mut settings = BTreeMap::new();
    settings.insert(
        BUCKET_ACL_SETTING.to_string(),
        serde_json::to_string(acl).expect("serialises"),
    );
    if let Some(o) = ownership {
        settings.insert(OWNERSHIP_SETTING.to_string(), o.as_str().to_string());
    }
    settings
}

/// A bucket's object ownership control, if one is set.
pub(crate) fn ownership(store: &Store, bucket: &str) -> S3Result<Option<Ownership>> {
    Ok(store
        .bucket_setting(bucket, OWNERSHIP_SETTING)
        .map_err(store_error)?
        .and_then(|s| Ownership::parse(&s)))
}

/// The object ownership control among a bucket's settings, if one is set.
pub(crate) fn ownership_of(settings: &BTreeMap<String, String>) -> Option<Ownership> {
    settings
        .get(OWNERSHIP_SETTING)
        .and_then(|s| Ownership::parse(s))
}

/// An object's ACL: the one kept with it, else its bucket owner's private default.
pub(crate) fn object_acl(info: &ObjectInfo, bucket_owner: &str) -> Acl {
    info.headers
        .get(OBJECT_ACL_HEADER)
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_else(|| Acl::private(bucket_owner))
}

/// An object's owner as listings show it.
pub(crate) fn object_owner(users: &Users, info: &ObjectInfo, bucket_owner: &str) -> dto::Owner {
    owner_in_headers(users, &info.headers, bucket_owner)
}

/// The owner that an object's (or a multipart upload's) stored headers name.
pub(crate) fn owner_in_headers(
    users: &Users,
    headers: &BTreeMap<String, String>,
    bucket_owner: &str,
) -> dto::Owner {
    owner_in_acl(
        users,
        headers.get(OBJECT_ACL_HEADER).map(String::as_str),
        bucket_owner,
    )
}

/// The owner a stored ACL names (none stored: the bucket's owner).
pub(crate) fn owner_in_acl(users: &Users, stored: Option<&str>, bucket_owner: &str) -> dto::Owner {
    let acl: Option<Acl> = stored.and_then(|t| serde_json::from_str(t).ok());
    super::owner_dto(
        users,
        acl.as_ref().map_or(bucket_owner, |a| a.owner.as_str()),
    )
}

/// Keeps `acl` in an object's stored headers (nothing when it is the default).
pub(crate) fn set_object_acl(
    headers: &mut BTreeMap<String, String>,
    acl: &Acl,
    bucket_owner: &str,
) {
    if *acl == Acl::private(bucket_owner) {
        headers.remove(OBJECT_ACL_HEADER);
    } else {
        headers.insert(
            OBJECT_ACL_HEADER.to_string(),
            serde_json::to_string(acl).expect("serialises"),
        );
    }
}

/// The ACL of a new object (a put, a copy, a multipart upload, a form POST) by `caller` in
/// `bucket`, from the request's `x-amz-acl` or `x-amz-grant-*` and the bucket's ownership
/// control, kept in `headers` (replacing a copy source's). Refused: ACLs other than
/// `bucket-owner-full-control` where the bucket enforces its ownership (400), and public ACLs
/// where its public access block has `BlockPublicAcls` (403).
pub(crate) fn apply_to_new(
    s3: &RailS3,
    bucket: &str,
    caller: Option<&User>,
    request: &HeaderMap,
    headers: &mut BTreeMap<String, String>,
) -> S3Result<()> {
    let bucket_acl = bucket_acl(&s3.store, &s3.users, bucket)?;
    let bucket_owner = bucket_acl.owner.as_str();
    let writer = caller.map_or(bucket_owner, |u| u.id.as_str());
    let canned = super::canned_header(request)?;
    let to_bucket_owner = canned.as_deref() == Some("bucket-owner-full-control");
    let owner = match ownership(&s3.store, bucket)? {
        Some(Ownership::BucketOwnerEnforced) => {
            if super::asks_acl(request) && !to_bucket_owner {
                return Err(acls_off());
            }
            bucket_owner
        }
        Some(Ownership::BucketOwnerPreferred) if to_bucket_owner => bucket_owner,
        _ => writer,
    };
    let acl = Acl::from_headers(request, &s3.users, owner, bucket_owner)?
        .unwrap_or_else(|| Acl::private(owner));
    if acl.is_public() && crate::policy::blocks_public_acls(&s3.store, bucket)? {
        return Err(public_acl_blocked());
    }
    set_object_acl(headers, &acl, bucket_owner);
    Ok(())
}
