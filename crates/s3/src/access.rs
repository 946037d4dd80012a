//! Who may do what, decided before an operation reads its input, in this order:
//!
//! 1. A request signed for another region is refused as AWS refuses it, naming the region
//!    this server expects so that clients can sign again for it.
//! 2. Listing buckets and creating one need a signature; a missing bucket is left to the
//!    operation, which answers `NoSuchBucket` to anyone.
//! 3. `x-amz-expected-bucket-owner` other than the bucket's owner: 403.
//! 4. The bucket's policy (`policy`): an explicit Deny refuses even the owner (never the
//!    owner's management of the policy itself); an Allow admits a signed user, and an
//!    unsigned request to the operations on objects a policy may open (unless the public
//!    access block restricts the bucket).
//! 5. The bucket's owner may do anything to its bucket and to the objects in it, except read
//!    another user's object or its ACL without a grant (S3's `ObjectWriter` rule).
//! 6. Otherwise the ACLs (`acl`), unless the bucket enforces its ownership: `READ` on the
//!    bucket lists it, `WRITE` writes and deletes in it, `READ` on an object reads it,
//!    `READ_ACP` / `WRITE_ACP` read and change ACLs; group grants count unless the public
//!    access block ignores public ACLs. An object's owner may read and change its ACL and
//!    tags. A GET or HEAD of a missing key is 404 for who may list the bucket (`s3:prefix` the
//!    key), 403 for others, as S3 answers.
//! 7. A copy also needs to read its source, by the same rules.
//!
//! The operations themselves know who sent a request from its credentials
//! ([`Users::caller`]): owners of new buckets and objects, each user's bucket list.

use crate::acl::{self, Acl, Ownership, Permission};
use crate::policy::{self, Decision};
use crate::users::{User, Users};
use http::{HeaderMap, HeaderValue, StatusCode};
use railstore_store::{ObjectInfo, Store, StoreError};
use s3s::access::{S3Access, S3AccessContext};
use s3s::path::S3Path;
use s3s::{S3Error, S3ErrorCode, S3Result};

/// The header AWS names a bucket's region in; SDKs read it to retry in the right region.
const BUCKET_REGION_HEADER: &str = "x-amz-bucket-region";

/// The access check of every S3 request.
pub(crate) struct Access {
    pub store: Store,
    pub region: String,
    pub users: Users,
}

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let caller = self.users.caller(cx.credentials());
        if caller.is_some() {
            let query = cx.uri().query().unwrap_or_default();
            if let Some((region, presigned)) = signed_region(cx.headers(), query) {
                if region != self.region {
                    return Err(wrong_region(&region, &self.region, presigned));
                }
            }
        }
        let source = cx
            .extensions_mut()
            .get::<crate::server::PeerAddr>()
            .map(|p| p.0.ip());
        let query = cx.uri().query().unwrap_or_default();
        let mut request = policy::Request {
            headers: cx.headers(),
            query,
            source,
            existing_tags: None,
            prefix: None,
        };
        let op = cx.s3_op().name();
        let target = match cx.s3_path() {
            S3Path::Root => {
                return caller.map(|_| ()).ok_or_else(unsigned);
            }
            S3Path::Bucket { bucket } => Target {
                bucket,
                key: None,
                version: None,
            },
            S3Path::Object { bucket, key } => Target {
                bucket,
                key: Some(key),
                version: query_value(query, "versionId"),
            },
        };
        if op == "CreateBucket" {
            return caller.map(|_| ()).ok_or_else(unsigned);
        }
        authorize(&self.store, &self.users, caller, op, &target, &mut request).await?;
        if matches!(op, "CopyObject" | "UploadPartCopy") {
            let Some(source) = copy_source(cx.headers()) else {
                return Ok(()); // The operation refuses the malformed header.
            };
            let source = Target {
                bucket: &source.0,
                key: Some(&source.1),
                version: source.2.clone(),
            };
            request.existing_tags = None;
            authorize(
                &self.store,
                &self.users,
                caller,
                "GetObject",
                &source,
                &mut request,
            )
            .await?;
        }
        Ok(())
    }
}

/// What a request works on.
pub(crate) struct Target<'a> {
    pub bucket: &'a str,
    pub key: Option<&'a str>,
    /// The object version it names (`versionId`), if any.
    pub version: Option<String>,
}

/// What an operation needs from the ACLs of a caller other than the bucket's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    Bucket(Permission),
    Object(Permission),
    /// To own the object (its tags): ACLs grant none of it.
    ObjectOwner,
    /// To own the bucket (its configuration): ACLs grant none of it.
    BucketOwner,
}

fn needs(op: &str) -> Needs {
    use Permission::*;
    match op {
        "ListObjects"
        | "ListObjectsV2"
        | "ListObjectVersions"
        | "ListMultipartUploads"
        | "HeadBucket"
        | "GetBucketLocation" => Needs::Bucket(Read),
        "PutObject"
        | "DeleteObject"
        | "DeleteObjects"
        | "CopyObject"
        | "CreateMultipartUpload"
        | "UploadPart"
        | "UploadPartCopy"
        | "CompleteMultipartUpload"
        | "AbortMultipartUpload"
        | "ListParts" => Needs::Bucket(Write),
        "GetBucketAcl" => Needs::Bucket(ReadAcp),
        "PutBucketAcl" => Needs::Bucket(WriteAcp),
        "GetObject" | "HeadObject" | "GetObjectAttributes" => Needs::Object(Read),
        "GetObjectAcl" => Needs::Object(ReadAcp),
        "PutObjectAcl" => Needs::Object(WriteAcp),
        "GetObjectTagging" | "PutObjectTagging" | "DeleteObjectTagging" => Needs::ObjectOwner,
        _ => Needs::BucketOwner,
    }
}

fn denied() -> S3Error {
    S3Error::with_message(S3ErrorCode::AccessDenied, "Access Denied")
}

fn unsigned() -> S3Error {
    S3Error::with_message(S3ErrorCode::AccessDenied, "Signature is required")
}

/// Whether `caller` (`None`: unsigned) may do `op` to `target`; see the module's comment for
/// the rules. `request` gives the policy its condition keys; the object's tags and the
/// listing prefix are filled in here when they are needed.
pub(crate) async fn authorize(
    store: &Store,
    users: &Users,
    caller: Option<&User>,
    op: &str,
    target: &Target<'_>,
    request: &mut policy::Request<'_>,
) -> S3Result<()> {
    let refuse = || {
        if caller.is_some() {
            denied()
        } else {
            unsigned()
        }
    };
    // A missing bucket is NoSuchBucket to anyone: the operation says so.
    let Ok(bucket) = store.head_bucket(target.bucket) else {
        return Ok(());
    };
    let settings = &bucket.settings;
    let bucket_acl = acl::acl_of_setting(
        settings.get(acl::BUCKET_ACL_SETTING).map(String::as_str),
        users,
        target.bucket,
    )?;
    let owner = bucket_acl.owner.as_str();
    if let Some(expected) = request.headers.get("x-amz-expected-bucket-owner") {
        if expected.as_bytes() != owner.as_bytes() {
            return Err(denied());
        }
    }
    let is_owner = caller.is_some_and(|u| u.id == owner);
    let needs = needs(op);
    // The object, when its owner, ACL or tags take part.
    let object = match target.key {
        Some(key)
            if matches!(needs, Needs::Object(_) | Needs::ObjectOwner)
                || policy::needs_existing_tags(settings) =>
        {
            // No such object (or version, or a delete marker) is an answer the operation gives
            // to who may know it; any other failure refuses rather than lets the operation try
            // what could not be checked.
            match store
                .head_object_version(target.bucket, key, target.version.as_deref())
                .await
            {
                Ok(o) => Some(o),
                Err(
                    StoreError::NoSuchKey { .. }
                    | StoreError::NoSuchVersion { .. }
                    | StoreError::DeleteMarker(_)
                    | StoreError::NoSuchBucket(_)
                    | StoreError::InvalidArgument(_),
                ) => None,
                Err(e) => return Err(crate::errors::store_error(e)),
            }
        }
        _ => None,
    };
    if let Some(o) = &object {
        request.existing_tags = Some(crate::tagging::stored(o).into_iter().collect());
    }
    let resource = match target.key {
        None => format!("arn:aws:s3:::{}", target.bucket),
        Some(k) => format!("arn:aws:s3:::{}/{k}", target.bucket),
    };
    let caller_id = caller.map(|u| u.id.as_str());
    let block = policy::public_block_of(settings);
    match policy::decide(settings, target.bucket, op, &resource, caller_id, request) {
        Decision::Deny if !(is_owner && policy::manages_policy(op)) => {
            return Err(S3Error::with_message(
                S3ErrorCode::AccessDenied,
                "Access Denied by the bucket's policy",
            ))
        }
        Decision::Allow if caller.is_some() && !policy::manages_policy(op) => return Ok(()),
        Decision::Allow
            if caller.is_none() && !block.restrict_public_buckets && policy::open_to_public(op) =>
        {
            return Ok(())
        }
        _ => {}
    }
    let enforced = acl::ownership_of(settings) == Some(Ownership::BucketOwnerEnforced);
    let public = !block.ignore_public_acls;
    let object_acl = |o: &ObjectInfo| acl::object_acl(o, owner);
    if is_owner {
        // Another user's object keeps its bytes and ACL from the bucket owner unless it
        // grants them (never in a bucket that enforces its ownership: it owns them all).
        return match (needs, &object) {
            (Needs::Object(p), Some(o)) if !enforced && !object_acl(o).allows(caller, p, true) => {
                Err(denied())
            }
            _ => Ok(()),
        };
    }
    if enforced || caller.is_none() && matches!(op, "CopyObject" | "UploadPartCopy") {
        return Err(refuse());
    }
    let allowed = match needs {
        Needs::Bucket(p) => bucket_acl.allows(caller, p, public),
        Needs::Object(p) => match &object {
            Some(o) => object_acl(o).allows(caller, p, public),
            // A missing key: 404 to who may list it, 403 to others.
            None if p == Permission::Read => {
                may_list(&bucket_acl, caller, public, settings, target, request)
            }
            None => false,
        },
        Needs::ObjectOwner => object
            .as_ref()
            .is_some_and(|o| caller.is_some_and(|u| object_acl(o).owner == u.id)),
        Needs::BucketOwner => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(refuse())
    }
}

/// Whether `caller` may list the bucket at `target`'s key: by a `READ` grant, or by the
/// policy with `s3:prefix` the key.
fn may_list(
    bucket_acl: &Acl,
    caller: Option<&User>,
    public: bool,
    settings: &std::collections::BTreeMap<String, String>,
    target: &Target<'_>,
    request: &mut policy::Request<'_>,
) -> bool {
    if bucket_acl.allows(caller, Permission::Read, public) {
        return true;
    }
    request.prefix = target.key.map(str::to_string);
    let resource = format!("arn:aws:s3:::{}", target.bucket);
    let caller_id = caller.map(|u| u.id.as_str());
    let decision = policy::decide(
        settings,
        target.bucket,
        "ListObjects",
        &resource,
        caller_id,
        request,
    );
    request.prefix = None;
    decision == Decision::Allow
}

/// One query parameter's value, decoded.
fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (crate::guard::percent_decode(k) == name).then(|| crate::guard::percent_decode(v))
    })
}

/// The bucket, key and version a copy's `x-amz-copy-source` names, parsed by s3s's own parser
/// so that the object checked here is the one the operation reads.
fn copy_source(headers: &HeaderMap) -> Option<(String, String, Option<String>)> {
    let raw = headers.get("x-amz-copy-source")?.to_str().ok()?;
    match s3s::dto::CopySource::parse(raw).ok()? {
        s3s::dto::CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Some((
            bucket.to_string(),
            key.to_string(),
            version_id.map(|v| v.to_string()),
        )),
        _ => None,
    }
}

/// The region a Signature V4 request was signed for, from its `Authorization` header or its
/// presigned `X-Amz-Credential` (then `true`); `None` for other signatures.
fn signed_region(headers: &HeaderMap, query: &str) -> Option<(String, bool)> {
    // Credential=AKID/20260101/REGION/s3/aws4_request
    let scope_region = |credential: &str| credential.split('/').nth(2).map(str::to_string);
    if let Some(auth) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let rest = auth.strip_prefix("AWS4-HMAC-SHA256")?;
        let credential = rest
            .split(',')
            .find_map(|part| part.trim().strip_prefix("Credential="))?;
        return scope_region(credential).map(|r| (r, false));
    }
    let credential = query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == "X-Amz-Credential").then_some(value)
    })?;
    let decoded = credential.replace("%2F", "/").replace("%2f", "/");
    scope_region(&decoded).map(|r| (r, true))
}

fn wrong_region(region: &str, expected: &str, presigned: bool) -> S3Error {
    let (code, text) = if presigned {
        (
            "AuthorizationQueryParametersError",
            "Error parsing the X-Amz-Credential parameter;",
        )
    } else {
        (
            "AuthorizationHeaderMalformed",
            "The authorization header is malformed;",
        )
    };
    let mut e = S3Error::with_message(
        S3ErrorCode::from_bytes(code.as_bytes()).expect("a code"),
        format!("{text} the region '{region}' is wrong; expecting '{expected}'"),
    );
    e.set_status_code(StatusCode::BAD_REQUEST);
    let mut h = HeaderMap::new();
    // These replace the error response's headers: keep its content type.
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    if let Ok(v) = HeaderValue::from_str(expected) {
        h.insert(BUCKET_REGION_HEADER, v);
    }
    e.set_headers(h);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_source_is_read_as_the_operation_reads_it() {
        let source = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("x-amz-copy-source", HeaderValue::from_str(v).unwrap());
            copy_source(&h)
        };
        // `+` is a plus in a copy source (not a space, as in a query), and only `?versionId=`
        // ends the key.
        assert_eq!(
            source("/bkt/a+b%20c?versionId=v1"),
            Some(("bkt".into(), "a+b c".into(), Some("v1".into())))
        );
        assert_eq!(
            source("bkt/dir/k?x"),
            Some(("bkt".into(), "dir/k?x".into(), None))
        );
        assert_eq!(source("no-key"), None);
    }

    #[test]
    fn the_signed_region_is_read_from_header_or_query() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static(
                "AWS4-HMAC-SHA256 Credential=AKID/20261125/eu-west-1/s3/aws4_request, \
                 SignedHeaders=host, Signature=abc",
            ),
        );
        assert_eq!(
            signed_region(&h, ""),
            Some(("eu-west-1".to_string(), false))
        );
        let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20261125%2Fus-west-2%2Fs3%2Faws4_request";
        assert_eq!(
            signed_region(&HeaderMap::new(), q),
            Some(("us-west-2".to_string(), true))
        );
        let mut v2 = HeaderMap::new();
        v2.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("AWS AKID:sig"),
        );
        assert_eq!(signed_region(&v2, ""), None);
    }
}
