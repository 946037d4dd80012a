//! Bucket versioning: its configuration, ListObjectVersions, and the version ids S3 names in
//! responses. The versions themselves are the store's (`railstore_store::Versioning`).

use crate::acl;
use crate::errors::{invalid_argument, not_implemented, store_error};
use crate::fields::standard_class;
use crate::list::{
    common_prefixes, key_listing, listing_output, nonempty, page_size, url_encoded, Enc, KeyListing,
};
use crate::service::RailS3;
use crate::util;
use http::{HeaderMap, HeaderValue};
use railstore_store::{version_name, ObjectInfo, Store, StoreError, VersionQuery, Versioning};
use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response, S3Result};

pub(crate) async fn put_bucket_versioning(
    s3: &RailS3,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    let input = req.input;
    let config = &input.versioning_configuration;
    if config
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
    {
        return Err(not_implemented("MFA delete is not supported"));
    }
    let state = match config.status.as_ref().map(BucketVersioningStatus::as_str) {
        Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
        Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
        // No status leaves the state as it is (S3 takes an empty configuration).
        None => {
            s3.store.head_bucket(&input.bucket).map_err(store_error)?;
            return Ok(S3Response::new(PutBucketVersioningOutput::default()));
        }
        Some(other) => {
            return Err(s3s::s3_error!(
                MalformedXML,
                "Versioning status {other:?}: it is Enabled or Suspended"
            ))
        }
    };
    if state == Versioning::Suspended && crate::lock::enabled(s3, &input.bucket)? {
        return Err(crate::errors::invalid_bucket_state(
            "Versioning cannot be suspended on a bucket with object lock",
        ));
    }
    s3.store
        .set_versioning(&input.bucket, state)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutBucketVersioningOutput::default()))
}

pub(crate) async fn get_bucket_versioning(
    s3: &RailS3,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let status = match s3
        .store
        .versioning(&req.input.bucket)
        .map_err(store_error)?
    {
        // Never versioned: no status at all.
        Versioning::Unversioned => None,
        Versioning::Enabled => Some(BucketVersioningStatus::ENABLED),
        Versioning::Suspended => Some(BucketVersioningStatus::SUSPENDED),
    };
    Ok(S3Response::new(GetBucketVersioningOutput {
        mfa_delete: None,
        status: status.map(|s| BucketVersioningStatus::from(s.to_string())),
    }))
}

/// The version id S3 names for `info`: its own, `"null"` for a null version in a bucket that
/// has (or had) versioning, none in a bucket that never had it.
pub(crate) fn version_header(store: &Store, bucket: &str, info: &ObjectInfo) -> Option<String> {
    match &info.version_id {
        Some(v) => Some(v.clone()),
        None => match store.versioning(bucket) {
            Ok(Versioning::Enabled | Versioning::Suspended) => Some("null".to_string()),
            _ => None,
        },
    }
}

/// The error for a read that found no object: `x-amz-delete-marker` says whether a delete
/// marker hides the key (and `x-amz-version-id` names it).
pub(crate) fn read_error(store: &Store, bucket: &str, key: &str, e: StoreError) -> S3Error {
    let no_key = matches!(e, StoreError::NoSuchKey { .. });
    let marker = no_key
        .then(|| store.latest_delete_marker(bucket, key))
        .flatten();
    let mut err = store_error(e);
    if no_key {
        let mut h = HeaderMap::new();
        let hidden = HeaderValue::from_static(if marker.is_some() { "true" } else { "false" });
        h.insert("x-amz-delete-marker", hidden);
        if let Some(m) = marker {
            if let Ok(v) = HeaderValue::from_str(version_name(m.version_id.as_deref())) {
                h.insert("x-amz-version-id", v);
            }
        }
        err.set_headers(h);
    }
    err
}

pub(crate) async fn list_object_versions(
    s3: &RailS3,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let input = req.input;
    let l = key_listing!(input);
    if input.version_id_marker.is_some() && input.key_marker.is_none() {
        return Err(invalid_argument(
            "A version-id marker cannot be specified without a key marker.",
        ));
    }
    let q = VersionQuery {
        prefix: l.prefix.clone(),
        delimiter: nonempty(input.delimiter.clone()),
        key_marker: nonempty(input.key_marker.clone()),
        version_marker: nonempty(input.version_id_marker.clone()),
        max_keys: l.max,
    };
    let page = match q.max_keys {
        0 => {
            s3.store.head_bucket(&input.bucket).map_err(store_error)?;
            Default::default()
        }
        _ => s3
            .store
            .list_versions(&input.bucket, &q)
            .map_err(store_error)?,
    };
    let enc = &l.enc;
    let bucket_owner = acl::bucket_acl(&s3.store, &s3.users, &input.bucket)?.owner;
    let owner = |o| Some(acl::object_owner(&s3.users, o, &bucket_owner));
    let mut versions = Vec::new();
    let mut delete_markers = Vec::new();
    for v in &page.versions {
        let o = &v.info;
        let version_id = Some(version_name(o.version_id.as_deref()).to_string());
        if o.delete_marker {
            delete_markers.push(DeleteMarkerEntry {
                key: Some(enc.s(&o.key)),
                version_id,
                is_latest: Some(v.latest),
                last_modified: Some(util::timestamp(o.last_modified)),
                owner: owner(o),
            });
        } else {
            versions.push(ObjectVersion {
                key: Some(enc.s(&o.key)),
                size: Some(o.size as i64),
                e_tag: Some(ETag::Strong(o.etag.clone())),
                last_modified: Some(util::timestamp(o.last_modified)),
                is_latest: Some(v.latest),
                version_id,
                owner: owner(o),
                storage_class: Some(standard_class()),
                ..ObjectVersion::default()
            });
        }
    }
    Ok(S3Response::new(listing_output!(
        ListObjectVersionsOutput {
            key_marker: Some(enc.s(input.key_marker.as_deref().unwrap_or_default())),
            version_id_marker: Some(input.version_id_marker.clone().unwrap_or_default()),
            next_key_marker: page.next_key_marker.as_ref().map(|k| enc.s(k)),
            next_version_id_marker: page.next_version_marker.clone(),
            versions: (!versions.is_empty()).then_some(versions),
            delete_markers: (!delete_markers.is_empty()).then_some(delete_markers),
        },
        input,
        l,
        page
    )))
}
