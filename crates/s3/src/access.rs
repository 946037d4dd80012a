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
        let seen = authorize(&self.store, &self.users, caller, op, &target, &mut request).await?;
        let copy = matches!(op, "CopyObject" | "UploadPartCopy");
        if copy {
            let Some(source) = copy_source(cx.headers()) else {
                return Ok(()); // The operation refuses the malformed header.
            };
            let source = Target {
                bucket: &source.0,
                key: Some(&source.1),
                version: source.2.clone(),
            };
            request.existing_tags = None;
            let seen_source = authorize(
                &self.store,
                &self.users,
                caller,
                "GetObject",
                &source,
                &mut request,
            )
            .await?;
            cx.extensions_mut().insert(SeenSource(seen_source));
        }
        if seen != Seen::Unlooked && !copy {
            cx.extensions_mut().insert(SeenObject(seen));
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

/// What an access check's decision rested on, for the operation to hold the object it finds
/// to it: an object replaced between the check and the operation (by another user, with
/// another ACL) is not read or changed on the strength of the one the check saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Nothing about the object.
    Unlooked,
    /// Its ACL: the object found must give `caller` (a canonical id; `None`: unsigned)
    /// `wanted` (group grants only when `public`).
    Acl {
        caller: Option<String>,
        wanted: Permission,
        public: bool,
        bucket_owner: String,
    },
    /// Its owner: the object found must be `caller`'s.
    Owner {
        caller: String,
        bucket_owner: String,
    },
    /// The object itself (a policy decided on its stored tags): the same version, or none.
    Exactly(Option<(String, std::time::SystemTime, Option<String>)>),
}

impl Seen {
    fn identity(o: Option<&ObjectInfo>) -> Option<(String, std::time::SystemTime, Option<String>)> {
        o.map(|o| (o.etag.clone(), o.last_modified, o.version_id.clone()))
    }

    /// Whether the object the operation found passes what the check's decision rested on.
    pub(crate) fn matches(&self, found: &ObjectInfo) -> bool {
        match self {
            Seen::Unlooked => true,
            Seen::Acl {
                caller,
                wanted,
                public,
                bucket_owner,
            } => {
                acl::object_acl(found, bucket_owner).allows_id(caller.as_deref(), *wanted, *public)
            }
            Seen::Owner {
                caller,
                bucket_owner,
            } => acl::object_acl(found, bucket_owner).owner == *caller,
            Seen::Exactly(id) => *id == Seen::identity(Some(found)),
        }
    }
}

/// The refusal when an operation finds another object than its access check saw: 503
/// `SlowDown`, which clients retry.
pub(crate) fn changed_since_checked() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::SlowDown,
        "The object changed while its access was checked; retry",
    )
}

/// As [`changed_since_checked`], inside a store update (`store_error` maps it to 409
/// `OperationAborted`, which clients retry too).
pub(crate) fn changed_since_checked_store() -> StoreError {
    StoreError::Conflict("The object changed while its access was checked; retry".into())
}

/// What the access check saw of the object an operation works on.
#[derive(Debug, Clone)]
pub(crate) struct SeenObject(pub Seen);

/// What the access check saw of a copy's source.
#[derive(Debug, Clone)]
pub(crate) struct SeenSource(pub Seen);

/// What the access check saw of an operation's object (`source`: of a copy's source), from
/// the request's extensions: [`Seen::Unlooked`] when it recorded nothing.
pub(crate) fn seen(extensions: &http::Extensions, source: bool) -> Seen {
    let seen = if source {
        extensions.get::<SeenSource>().map(|s| &s.0)
    } else {
        extensions.get::<SeenObject>().map(|s| &s.0)
    };
    seen.cloned().unwrap_or(Seen::Unlooked)
}

/// Refuses when `found` is not what the access check saw.
pub(crate) fn confirm_seen(
    extensions: &http::Extensions,
    found: &ObjectInfo,
    source: bool,
) -> S3Result<()> {
    if seen(extensions, source).matches(found) {
        Ok(())
    } else {
        Err(changed_since_checked())
    }
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
) -> S3Result<Seen> {
    let mut seen = Seen::Unlooked;
    decide(store, users, caller, op, target, request, &mut seen).await?;
    Ok(seen)
}

async fn decide(
    store: &Store,
    users: &Users,
    caller: Option<&User>,
    op: &str,
    target: &Target<'_>,
    request: &mut policy::Request<'_>,
    seen: &mut Seen,
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
    // A decision on the object's stored tags holds for that very version only.
    let tags_used = policy::needs_existing_tags(settings) && target.key.is_some();
    let by_tags = |o: Option<&ObjectInfo>| {
        if tags_used {
            Seen::Exactly(Seen::identity(o))
        } else {
            Seen::Unlooked
        }
    };
    match policy::decide(settings, target.bucket, op, &resource, caller_id, request) {
        Decision::Deny if !(is_owner && policy::manages_policy(op)) => {
            return Err(S3Error::with_message(
                S3ErrorCode::AccessDenied,
                "Access Denied by the bucket's policy",
            ))
        }
        Decision::Allow if caller.is_some() && !policy::manages_policy(op) => {
            *seen = by_tags(object.as_ref());
            return Ok(());
        }
        Decision::Allow
            if caller.is_none() && !block.restrict_public_buckets && policy::open_to_public(op) =>
        {
            *seen = by_tags(object.as_ref());
            return Ok(());
        }
        _ => {}
    }
    let enforced = acl::ownership_of(settings) == Some(Ownership::BucketOwnerEnforced);
    let public = !block.ignore_public_acls;
    let object_acl = |o: &ObjectInfo| acl::object_acl(o, owner);
    let acl_seen = |wanted, public| Seen::Acl {
        caller: caller_id.map(str::to_string),
        wanted,
        public,
        bucket_owner: owner.to_string(),
    };
    if is_owner {
        // Another user's object keeps its bytes and ACL from the bucket owner unless it
        // grants them (never in a bucket that enforces its ownership: it owns them all).
        if let (Needs::Object(p), false) = (needs, enforced) {
            *seen = acl_seen(p, true);
        }
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
    match (needs, caller) {
        (Needs::Object(p), _) => *seen = acl_seen(p, public),
        (Needs::ObjectOwner, Some(u)) => {
            *seen = Seen::Owner {
                caller: u.id.clone(),
                bucket_owner: owner.to_string(),
            }
        }
        _ => {}
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
    fn an_object_replaced_after_the_check_is_held_to_what_the_check_rested_on() {
        let object = |acl: Option<Acl>, etag: &str| {
            let mut o = ObjectInfo {
                etag: etag.into(),
                ..ObjectInfo::default()
            };
            if let Some(a) = acl {
                acl::set_object_acl(&mut o.headers, &a, "main");
            }
            o
        };
        let public = object(
            Some(Acl::canned("public-read", "main", "main").unwrap()),
            "e1",
        );
        let private = object(None, "e2");
        let by_acl = Seen::Acl {
            caller: Some("alt".into()),
            wanted: Permission::Read,
            public: true,
            bucket_owner: "main".into(),
        };
        assert!(by_acl.matches(&public));
        assert!(!by_acl.matches(&private), "replaced by a private object");
        let owners = Seen::Acl {
            caller: Some("main".into()),
            wanted: Permission::Read,
            public: true,
            bucket_owner: "main".into(),
        };
        assert!(
            owners.matches(&private),
            "the owner's own overwrite reads on"
        );
        let alts = object(Some(Acl::private("alt")), "e3");
        assert!(!owners.matches(&alts), "another user's object, no grant");
        let owner_of = Seen::Owner {
            caller: "alt".into(),
            bucket_owner: "main".into(),
        };
        assert!(owner_of.matches(&alts) && !owner_of.matches(&private));
        let exactly = Seen::Exactly(Seen::identity(Some(&public)));
        assert!(exactly.matches(&public) && !exactly.matches(&private));
        assert!(!Seen::Exactly(None).matches(&public));
        assert!(Seen::Unlooked.matches(&alts));
    }

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
