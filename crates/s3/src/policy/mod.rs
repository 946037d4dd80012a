//! Bucket policies and the public access block: their configuration, and what a policy says
//! of a request ([`decide`], which the access check in `access.rs` asks) — an explicit Deny
//! refuses even the owner, an Allow admits the users it names (`Principal: *`: everyone, and
//! unsigned requests unless the public access block restricts the bucket).

mod condition;
mod document;

use crate::errors::{err, no_configuration, store_error};
use crate::service::RailS3;
use condition::{Context, Lookup};
pub(crate) use document::Decision;
use document::Policy;
use http::HeaderMap;
use railstore_store::Store;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

/// The bucket settings they are kept in: the policy as given, the block as JSON.
const POLICY_SETTING: &str = "policy";
const PUBLIC_BLOCK_SETTING: &str = "public-access-block";

fn access_denied(msg: &str) -> S3Error {
    err(S3ErrorCode::AccessDenied, msg)
}

/// The bucket's public access block (all off when none is set).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PublicBlock {
    pub block_public_acls: bool,
    pub ignore_public_acls: bool,
    pub block_public_policy: bool,
    pub restrict_public_buckets: bool,
}

fn public_block(store: &Store, bucket: &str) -> S3Result<Option<PublicBlock>> {
    let text = store
        .bucket_setting(bucket, PUBLIC_BLOCK_SETTING)
        .map_err(store_error)?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

pub(crate) async fn put_bucket_policy(
    s3: &RailS3,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    let input = req.input;
    let policy = Policy::parse(&input.policy, &input.bucket)
        .map_err(|why| err(S3ErrorCode::MalformedPolicy, why))?;
    let block = public_block(&s3.store, &input.bucket)?.unwrap_or_default();
    if block.block_public_policy && policy.is_public() {
        return Err(access_denied(
            "The bucket's public access block (BlockPublicPolicy) refuses a public policy",
        ));
    }
    s3.store
        .set_bucket_setting(&input.bucket, POLICY_SETTING, Some(input.policy))
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutBucketPolicyOutput::default()))
}

pub(crate) async fn get_bucket_policy(
    s3: &RailS3,
    req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    let policy = s3
        .store
        .bucket_setting(&req.input.bucket, POLICY_SETTING)
        .map_err(store_error)?
        .ok_or_else(|| {
            no_configuration(
                S3ErrorCode::NoSuchBucketPolicy,
                "The bucket policy does not exist",
            )
        })?;
    Ok(S3Response::new(GetBucketPolicyOutput {
        policy: Some(policy),
    }))
}

pub(crate) async fn delete_bucket_policy(
    s3: &RailS3,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    s3.store
        .set_bucket_setting(&req.input.bucket, POLICY_SETTING, None)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(DeleteBucketPolicyOutput::default()))
}

pub(crate) async fn get_bucket_policy_status(
    s3: &RailS3,
    req: S3Request<GetBucketPolicyStatusInput>,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    let bucket = &req.input.bucket;
    let text = s3
        .store
        .bucket_setting(bucket, POLICY_SETTING)
        .map_err(store_error)?;
    // Public by its policy, or by its ACL (a grant to everyone or every signed user).
    let public = text
        .and_then(|t| Policy::parse(&t, bucket).ok())
        .is_some_and(|p| p.is_public())
        || crate::acl::bucket_acl(&s3.store, &s3.users, bucket)?.is_public();
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(public),
        }),
    }))
}

pub(crate) async fn put_public_access_block(
    s3: &RailS3,
    req: S3Request<PutPublicAccessBlockInput>,
) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
    let input = req.input;
    let c = &input.public_access_block_configuration;
    let block = PublicBlock {
        block_public_acls: c.block_public_acls.unwrap_or(false),
        ignore_public_acls: c.ignore_public_acls.unwrap_or(false),
        block_public_policy: c.block_public_policy.unwrap_or(false),
        restrict_public_buckets: c.restrict_public_buckets.unwrap_or(false),
    };
    let json = serde_json::to_string(&block).expect("serialises");
    s3.store
        .set_bucket_setting(&input.bucket, PUBLIC_BLOCK_SETTING, Some(json))
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
}

pub(crate) async fn get_public_access_block(
    s3: &RailS3,
    req: S3Request<GetPublicAccessBlockInput>,
) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
    let block = public_block(&s3.store, &req.input.bucket)?.ok_or_else(|| {
        no_configuration(
            S3ErrorCode::from_bytes(b"NoSuchPublicAccessBlockConfiguration").expect("a code"),
            "The public access block configuration was not found",
        )
    })?;
    Ok(S3Response::new(GetPublicAccessBlockOutput {
        public_access_block_configuration: Some(PublicAccessBlockConfiguration {
            block_public_acls: Some(block.block_public_acls),
            ignore_public_acls: Some(block.ignore_public_acls),
            block_public_policy: Some(block.block_public_policy),
            restrict_public_buckets: Some(block.restrict_public_buckets),
        }),
    }))
}

pub(crate) async fn delete_public_access_block(
    s3: &RailS3,
    req: S3Request<DeletePublicAccessBlockInput>,
) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
    s3.store
        .set_bucket_setting(&req.input.bucket, PUBLIC_BLOCK_SETTING, None)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(DeletePublicAccessBlockOutput::default()))
}

/// The IAM action an S3 operation is (`s3:GetObject`).
fn action(op: &str) -> String {
    let name = match op {
        "ListObjects" | "ListObjectsV2" | "HeadBucket" => "ListBucket",
        "ListObjectVersions" => "ListBucketVersions",
        "HeadObject" => "GetObject",
        "CreateMultipartUpload"
        | "UploadPart"
        | "CompleteMultipartUpload"
        | "CopyObject"
        | "UploadPartCopy" => "PutObject",
        "AbortMultipartUpload" => "AbortMultipartUpload",
        "ListMultipartUploads" => "ListBucketMultipartUploads",
        "ListParts" => "ListMultipartUploadParts",
        "DeleteObjects" => "DeleteObject",
        "GetPublicAccessBlock" => "GetBucketPublicAccessBlock",
        "PutPublicAccessBlock" | "DeletePublicAccessBlock" => "PutBucketPublicAccessBlock",
        "DeleteBucketPolicy" => "DeleteBucketPolicy",
        other => other,
    };
    format!("s3:{name}")
}

/// The operations a policy can open to unsigned requests: reads, listings and writes of
/// objects. Never the bucket's configuration (a public `s3:*` does not let anyone rewrite the
/// policy or delete the bucket), and never copies (their source, another resource, would be
/// read unchecked).
pub(crate) fn open_to_public(op: &str) -> bool {
    matches!(
        op,
        "GetObject"
            | "HeadObject"
            | "GetObjectAttributes"
            | "GetObjectTagging"
            | "PutObjectTagging"
            | "DeleteObjectTagging"
            | "ListObjects"
            | "ListObjectsV2"
            | "ListObjectVersions"
            | "HeadBucket"
            | "GetBucketLocation"
            | "PutObject"
            | "DeleteObject"
            | "DeleteObjects"
            | "CreateMultipartUpload"
            | "UploadPart"
            | "CompleteMultipartUpload"
            | "AbortMultipartUpload"
            | "ListParts"
            | "ListMultipartUploads"
    )
}

/// What a request says to a policy's conditions: its `x-amz-*` headers (`s3:x-amz-acl`,
/// `s3:x-amz-server-side-encryption`, …), its listing parameters (`s3:prefix`,
/// `s3:delimiter`, `s3:max-keys`), `s3:VersionId`, the tags it sets (`s3:RequestObjectTag/K`,
/// `s3:RequestObjectTagKeys`), `aws:UserAgent`, `aws:Referer` and `aws:SourceIp` (the TCP
/// peer: behind a proxy, the proxy). Anything else — an object's stored tags, the time — is
/// unknown here.
pub(crate) struct Request<'a> {
    pub headers: &'a HeaderMap,
    pub query: &'a str,
    /// The connection's peer (`aws:SourceIp`); unknown when served another way.
    pub source: Option<std::net::IpAddr>,
    /// The tags stored with the object the request works on (`s3:ExistingObjectTag/K`),
    /// when they were looked up; unknown otherwise.
    pub existing_tags: Option<Vec<(String, String)>>,
    /// `s3:prefix` when it is not the query's: a GET or HEAD of a missing key asks whether
    /// the caller could list that key.
    pub prefix: Option<String>,
}

impl Request<'_> {
    fn header(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    }

    fn query(&self, name: &str) -> Vec<String> {
        self.query
            .split('&')
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (crate::guard::percent_decode(k) == name).then(|| crate::guard::percent_decode(v))
            })
            .collect()
    }

    fn request_tags(&self) -> Vec<(String, String)> {
        self.header("x-amz-tagging")
            .first()
            .and_then(|t| crate::tagging::pairs(t))
            .unwrap_or_default()
    }
}

impl Context for Request<'_> {
    fn lookup(&self, key: &str) -> Lookup {
        let known = Lookup::Known;
        if let Some(h) = key.strip_prefix("s3:").filter(|h| h.starts_with("x-amz-")) {
            return known(self.header(h));
        }
        if let Some(tag) = key.strip_prefix("s3:existingobjecttag/") {
            let Some(tags) = &self.existing_tags else {
                return Lookup::Unknown;
            };
            let values = tags.iter().filter(|(k, _)| k.eq_ignore_ascii_case(tag));
            return known(values.map(|(_, v)| v.clone()).collect());
        }
        if let Some(tag) = key.strip_prefix("s3:requestobjecttag/") {
            let tags = self.request_tags();
            // Tag keys are case-sensitive; condition keys arrive lower-cased.
            let values = tags
                .into_iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case(tag));
            return known(values.map(|(_, v)| v).collect());
        }
        match key {
            "s3:prefix" => match &self.prefix {
                Some(p) => known(vec![p.clone()]),
                None => known(self.query("prefix")),
            },
            "s3:delimiter" => known(self.query("delimiter")),
            "s3:max-keys" => known(self.query("max-keys")),
            "s3:versionid" => known(self.query("versionId")),
            "s3:requestobjecttagkeys" => {
                known(self.request_tags().into_iter().map(|(k, _)| k).collect())
            }
            "aws:useragent" => known(self.header("user-agent")),
            "aws:referer" => known(self.header("referer")),
            "aws:sourceip" => match self.source {
                Some(ip) => known(vec![ip.to_string()]),
                None => Lookup::Unknown,
            },
            _ => Lookup::Unknown,
        }
    }
}

/// What a bucket's policy (the `policy` setting among `settings`) says of `op` on `resource`
/// by `caller` (a canonical id; `None`: unsigned). A policy that cannot be read says nothing
/// (it was checked when it was set).
pub(crate) fn decide(
    settings: &std::collections::BTreeMap<String, String>,
    bucket: &str,
    op: &str,
    resource: &str,
    caller: Option<&str>,
    request: &Request<'_>,
) -> Decision {
    settings
        .get(POLICY_SETTING)
        .and_then(|t| Policy::parse(t, bucket).ok())
        .map_or(Decision::Silent, |p| {
            p.decide(&action(op), resource, caller, request)
        })
}

/// Whether the operation manages the policy itself (which a policy never refuses the owner,
/// so it cannot lock its owner out, and never grants anyone else).
pub(crate) fn manages_policy(op: &str) -> bool {
    matches!(
        op,
        "PutBucketPolicy" | "DeleteBucketPolicy" | "GetBucketPolicy"
    )
}

/// Whether a bucket's policy (among `settings`) has conditions on an object's stored tags
/// (`s3:ExistingObjectTag/…`): then the object's tags are looked up before it is decided.
pub(crate) fn needs_existing_tags(settings: &std::collections::BTreeMap<String, String>) -> bool {
    settings
        .get(POLICY_SETTING)
        .is_some_and(|t| t.to_ascii_lowercase().contains("s3:existingobjecttag/"))
}

/// The public access block among a bucket's `settings` (all off when none).
pub(crate) fn public_block_of(
    settings: &std::collections::BTreeMap<String, String>,
) -> PublicBlock {
    settings
        .get(PUBLIC_BLOCK_SETTING)
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// Whether the bucket's public access block refuses public ACLs (`BlockPublicAcls`).
pub(crate) fn blocks_public_acls(store: &Store, bucket: &str) -> S3Result<bool> {
    Ok(public_block(store, bucket)?.is_some_and(|b| b.block_public_acls))
}
