//! [`RailS3`]: the S3 API over a store, and the one table that routes each operation to
//! the module of its resource (`bucket`, `object`, `copy`, `list`, `multipart`, `sse`,
//! `tagging`, `cors`, `lock`, `lifecycle`).

use crate::checksum::{Outcome, Plan, Verified, Verifier};
use crate::errors::{err, invalid_argument};
use crate::fields::Incoming;
use crate::sse::{self, Keyring};
use crate::users::Users;
use crate::{
    acl, attributes, bucket, copy, cors, lifecycle, list, lock, multipart, object, policy, tagging,
    versioning,
};
use http::HeaderMap;
use railstore_store::{ChecksumsAtEnd, Mechanism, Store};
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result, TrailingHeaders, S3};

/// The response header naming the mechanism that protects an object, and the request header
/// that picks it for a put or a multipart upload.
pub const MECHANISM_HEADER: &str = "x-railstore-mechanism";

/// The S3 API over a [`Store`]. Give it to [`s3s::service::S3ServiceBuilder`], or use
/// [`crate::bind`] / [`crate::serve`], which do.
#[derive(Debug, Clone)]
pub struct RailS3 {
    pub(crate) store: Store,
    pub(crate) region: String,
    pub(crate) keyring: Keyring,
    pub(crate) users: Users,
}

impl RailS3 {
    /// Serves `store`, answering for `region`, with no master key (SSE-S3 and KMS refused;
    /// see [`RailS3::with_keyring`]).
    pub fn new(store: Store, region: impl Into<String>) -> RailS3 {
        RailS3 {
            store,
            region: region.into(),
            keyring: Keyring::default(),
            users: Users::default(),
        }
    }

    /// The same, with these users (by default the main user alone, whom every signed request
    /// is from).
    pub fn with_users(mut self, users: Users) -> RailS3 {
        self.users = users;
        self
    }

    /// The same, encrypting with `keyring`'s master key for SSE-S3 and KMS.
    pub fn with_keyring(mut self, keyring: Keyring) -> RailS3 {
        self.keyring = keyring;
        self
    }

    /// The store it serves.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Reads the mechanism a request asks for (`x-railstore-mechanism`, or a mechanism name as
    /// storage class); `STANDARD` or nothing leaves it to the policy.
    pub(crate) fn mechanism(
        &self,
        headers: &HeaderMap,
        storage_class: Option<&StorageClass>,
    ) -> S3Result<Option<Mechanism>> {
        let parse = |s: &str, what: &str, code: S3ErrorCode| -> S3Result<Mechanism> {
            let m =
                Mechanism::parse(s).map_err(|e| err(code.clone(), format!("{what} {s:?}: {e}")))?;
            m.validate()
                .map_err(|e| err(code.clone(), format!("{what} {s:?}: {e}")))?;
            let width = self.store.manager().layout().width();
            if m.width() > width {
                return Err(err(
                    code,
                    format!(
                        "{what} {s:?} needs {} devices per group; this store's groups have {width}",
                        m.width()
                    ),
                ));
            }
            Ok(m)
        };
        let from_header = match headers.get(MECHANISM_HEADER) {
            Some(v) => {
                let s = v
                    .to_str()
                    .map_err(|_| invalid_argument(format!("{MECHANISM_HEADER} is not text")))?;
                Some(parse(
                    s.trim(),
                    MECHANISM_HEADER,
                    S3ErrorCode::InvalidArgument,
                )?)
            }
            None => None,
        };
        let from_class = match storage_class.map(StorageClass::as_str) {
            None | Some(StorageClass::STANDARD) => None,
            Some(s) => Some(parse(s, "storage class", S3ErrorCode::InvalidStorageClass)?),
        };
        match (from_header, from_class) {
            (Some(a), Some(b)) if a != b => Err(invalid_argument(format!(
                "{MECHANISM_HEADER} {a} contradicts storage class {b}"
            ))),
            (a, b) => Ok(a.or(b)),
        }
    }

    /// Reads a request body for the store, checking its checksums as it streams. Values known
    /// only at the body's end reach the store through [`ChecksumsAtEnd`].
    pub(crate) fn incoming(
        blob: Option<StreamingBlob>,
        plan: Plan,
        trailers: Option<TrailingHeaders>,
    ) -> Incoming {
        let outcome = Outcome::default();
        let checksums = plan.early_values();
        let at_end = plan.has_late_values().then(|| {
            let outcome = outcome.clone();
            ChecksumsAtEnd::new(move || outcome.values().unwrap_or_default())
        });
        let body = Box::pin(Verified::new(
            blob,
            Verifier::new(plan, trailers),
            outcome.clone(),
        ));
        Incoming {
            body,
            checksums,
            at_end,
            outcome,
        }
    }
}

/// Routes each S3 operation to its handler; operations not named here are s3s's
/// `NotImplemented`.
macro_rules! routes {
    ($($module:ident::$op:ident($input:ident) -> $output:ident;)*) => {
        #[async_trait::async_trait]
        impl S3 for RailS3 {
            $(
                async fn $op(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    $module::$op(self, req).await
                }
            )*
        }
    };
}

routes! {
    bucket::list_buckets(ListBucketsInput) -> ListBucketsOutput;
    bucket::create_bucket(CreateBucketInput) -> CreateBucketOutput;
    bucket::delete_bucket(DeleteBucketInput) -> DeleteBucketOutput;
    bucket::head_bucket(HeadBucketInput) -> HeadBucketOutput;
    bucket::get_bucket_location(GetBucketLocationInput) -> GetBucketLocationOutput;
    versioning::get_bucket_versioning(GetBucketVersioningInput) -> GetBucketVersioningOutput;
    versioning::put_bucket_versioning(PutBucketVersioningInput) -> PutBucketVersioningOutput;
    acl::get_bucket_ownership_controls(GetBucketOwnershipControlsInput) -> GetBucketOwnershipControlsOutput;
    acl::put_bucket_ownership_controls(PutBucketOwnershipControlsInput) -> PutBucketOwnershipControlsOutput;
    acl::delete_bucket_ownership_controls(DeleteBucketOwnershipControlsInput) -> DeleteBucketOwnershipControlsOutput;
    acl::get_bucket_acl(GetBucketAclInput) -> GetBucketAclOutput;
    acl::put_bucket_acl(PutBucketAclInput) -> PutBucketAclOutput;
    acl::get_object_acl(GetObjectAclInput) -> GetObjectAclOutput;
    acl::put_object_acl(PutObjectAclInput) -> PutObjectAclOutput;
    policy::get_bucket_policy_status(GetBucketPolicyStatusInput) -> GetBucketPolicyStatusOutput;
    policy::put_bucket_policy(PutBucketPolicyInput) -> PutBucketPolicyOutput;
    policy::get_bucket_policy(GetBucketPolicyInput) -> GetBucketPolicyOutput;
    policy::delete_bucket_policy(DeleteBucketPolicyInput) -> DeleteBucketPolicyOutput;
    policy::put_public_access_block(PutPublicAccessBlockInput) -> PutPublicAccessBlockOutput;
    policy::get_public_access_block(GetPublicAccessBlockInput) -> GetPublicAccessBlockOutput;
    policy::delete_public_access_block(DeletePublicAccessBlockInput) -> DeletePublicAccessBlockOutput;
    lock::get_object_lock_configuration(GetObjectLockConfigurationInput) -> GetObjectLockConfigurationOutput;
    lock::put_object_lock_configuration(PutObjectLockConfigurationInput) -> PutObjectLockConfigurationOutput;
    lock::get_object_retention(GetObjectRetentionInput) -> GetObjectRetentionOutput;
    lock::put_object_retention(PutObjectRetentionInput) -> PutObjectRetentionOutput;
    lock::get_object_legal_hold(GetObjectLegalHoldInput) -> GetObjectLegalHoldOutput;
    lock::put_object_legal_hold(PutObjectLegalHoldInput) -> PutObjectLegalHoldOutput;
    lifecycle::put_bucket_lifecycle_configuration(PutBucketLifecycleConfigurationInput) -> PutBucketLifecycleConfigurationOutput;
    lifecycle::get_bucket_lifecycle_configuration(GetBucketLifecycleConfigurationInput) -> GetBucketLifecycleConfigurationOutput;
    lifecycle::delete_bucket_lifecycle(DeleteBucketLifecycleInput) -> DeleteBucketLifecycleOutput;
    cors::put_bucket_cors(PutBucketCorsInput) -> PutBucketCorsOutput;
    cors::get_bucket_cors(GetBucketCorsInput) -> GetBucketCorsOutput;
    cors::delete_bucket_cors(DeleteBucketCorsInput) -> DeleteBucketCorsOutput;
    sse::put_bucket_encryption(PutBucketEncryptionInput) -> PutBucketEncryptionOutput;
    sse::get_bucket_encryption(GetBucketEncryptionInput) -> GetBucketEncryptionOutput;
    sse::delete_bucket_encryption(DeleteBucketEncryptionInput) -> DeleteBucketEncryptionOutput;
    object::put_object(PutObjectInput) -> PutObjectOutput;
    object::get_object(GetObjectInput) -> GetObjectOutput;
    object::head_object(HeadObjectInput) -> HeadObjectOutput;
    object::delete_object(DeleteObjectInput) -> DeleteObjectOutput;
    object::delete_objects(DeleteObjectsInput) -> DeleteObjectsOutput;
    attributes::get_object_attributes(GetObjectAttributesInput) -> GetObjectAttributesOutput;
    tagging::get_object_tagging(GetObjectTaggingInput) -> GetObjectTaggingOutput;
    tagging::put_object_tagging(PutObjectTaggingInput) -> PutObjectTaggingOutput;
    tagging::delete_object_tagging(DeleteObjectTaggingInput) -> DeleteObjectTaggingOutput;
    tagging::get_bucket_tagging(GetBucketTaggingInput) -> GetBucketTaggingOutput;
    tagging::put_bucket_tagging(PutBucketTaggingInput) -> PutBucketTaggingOutput;
    tagging::delete_bucket_tagging(DeleteBucketTaggingInput) -> DeleteBucketTaggingOutput;
    copy::copy_object(CopyObjectInput) -> CopyObjectOutput;
    copy::upload_part_copy(UploadPartCopyInput) -> UploadPartCopyOutput;
    list::list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output;
    list::list_objects(ListObjectsInput) -> ListObjectsOutput;
    versioning::list_object_versions(ListObjectVersionsInput) -> ListObjectVersionsOutput;
    multipart::create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput;
    multipart::upload_part(UploadPartInput) -> UploadPartOutput;
    multipart::complete_multipart_upload(CompleteMultipartUploadInput) -> CompleteMultipartUploadOutput;
    multipart::abort_multipart_upload(AbortMultipartUploadInput) -> AbortMultipartUploadOutput;
    multipart::list_parts(ListPartsInput) -> ListPartsOutput;
    multipart::list_multipart_uploads(ListMultipartUploadsInput) -> ListMultipartUploadsOutput;
}
