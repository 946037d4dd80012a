//! The S3 HTTP API of railstore (DESIGN §3.6), on the `s3s` crate. The only crate that speaks
//! HTTP or maps errors to HTTP statuses.
//!
//! [`serve`] (or [`bind`] then [`Server::serve`]) listens on one address, HTTP/1.1, and answers:
//! - `GET /metrics` (Prometheus text) and `GET /status` (JSON), open, or behind
//!   `Authorization: Bearer <token>` when [`S3Config::operator_token`] is set; a *signed*
//!   `GET /metrics` is ListObjects on a bucket named `metrics`;
//! - everything else as S3, path style (and virtual-hosted style under
//!   [`S3Config::domain`]), authenticated with AWS Signature V4 against the users' key pairs
//!   ([`Users`]: the main one and [`S3Config::users`]) — `Authorization` header, presigned URL, and aws-chunked bodies (signed or
//!   unsigned, with trailers). Requests are authorized before their body is read
//!   (`access.rs`: policies, then owners and ACLs); anonymous ones get `AccessDenied` unless a
//!   policy or an ACL opens the bucket or object to everyone. Signature V2 is refused (`AccessDenied`) unless [`S3Config::sigv2`] is set.
//!   `OPTIONS` (CORS preflights) is answered before authentication, from the bucket's CORS
//!   rules.
//!
//! # Hostile clients
//! [`Limits`] bounds what one client can make the server hold: connections at once, the time
//! to send a request head (and to idle between requests), the time a request body may send
//! nothing or a response go unread, and the bytes of a browser-form POST read to find its
//! fields. s3s reads such a form, and buffers its whole file, before it checks the
//! signature; the router therefore answers every form POST itself (POST uploads are not
//! supported) after reading at most [`Limits::post_form_bytes_max`] of it.
//!
//! # Supported
//! - Buckets: ListBuckets (prefix, max-buckets, continuation token), CreateBucket
//!   (re-creating one's own bucket succeeds, as in us-east-1), DeleteBucket (aborting uploads
//!   in progress; `BucketNotEmpty` while objects remain), HeadBucket, GetBucketLocation.
//! - Objects: PutObject, GetObject (ranges → 206, unsatisfiable → 416; `partNumber=N`: part N
//!   of a multipart object, 1 of any other), HeadObject, conditional reads (`If-Match`, `If-None-Match`,
//!   `If-Modified-Since`, `If-Unmodified-Since` → 304 / 412), DeleteObject, DeleteObjects
//!   (quiet mode too; at most 1000 keys), CopyObject (`x-amz-metadata-directive` COPY or
//!   REPLACE, `x-amz-copy-source-if-*`), UploadPartCopy (`x-amz-copy-source-range`).
//! - Server-side encryption (docs/s3.md): SSE-C, SSE-S3 and SSE-KMS (key ids derived from the
//!   [`Keyring`]'s master key) on PutObject, CopyObject (both sides), CreateMultipartUpload,
//!   UploadPart(Copy), GET and HEAD; Put/Get/DeleteBucketEncryption as the default.
//! - Tagging: `x-amz-tagging` on writes, Get/Put/DeleteObjectTagging, `x-amz-tagging-count`,
//!   Get/Put/DeleteBucketTagging. CORS: Put/Get/DeleteBucketCors, preflight `OPTIONS`
//!   (answered by the router, unsigned) and CORS headers on answers to requests with an
//!   `Origin`.
//! - GetObjectAttributes (ETag, checksum, parts with their sizes and checksums, storage
//!   class, size).
//! - Lifecycle: Put/Get/DeleteBucketLifecycleConfiguration (checked, kept as given),
//!   `x-amz-expiration`, and [`apply_lifecycle`], the pass `serve` runs periodically.
//! - Regions: a request signed for another region is 400 `AuthorizationHeaderMalformed`
//!   naming the right one; location constraints as AWS takes them for the configured region.
//! - Conditional writes: `If-None-Match: *` and `If-Match: "etag"` on PutObject and
//!   CompleteMultipartUpload, `If-Match` on DeleteObject. The store checks them under the
//!   key's lock, so of racing creates exactly one succeeds; a failed one is 412
//!   `PreconditionFailed` (`NoSuchKey` for `If-Match` on a missing key) and changes nothing.
//! - Metadata: `x-amz-meta-*` (2 KiB at most, as S3), `Content-Type`, `Content-Encoding`
//!   (without `aws-chunked`), `Cache-Control`, `Content-Disposition`, `Content-Language`,
//!   `Expires` are stored and returned. ETags are MD5s (multipart: MD5 of the part MD5s, `-N`),
//!   quoted.
//! - Listings: ListObjectsV2 (prefix, delimiter, max-keys capped at 1000, opaque
//!   continuation tokens, start-after, fetch-owner, `encoding-type=url`), ListObjects V1
//!   (marker; NextMarker with a delimiter), ListObjectVersions (unversioned: every object once,
//!   version id `null`, latest).
//! - Multipart: CreateMultipartUpload, UploadPart, CompleteMultipartUpload (a repeated
//!   completion returns the same object), AbortMultipartUpload, ListMultipartUploads
//!   (prefix, delimiter, markers), ListParts (paged).
//! - Integrity: `Content-MD5`; the flexible checksums CRC32, CRC32C, CRC64NVME, SHA-1 and
//!   SHA-256 in headers or aws-chunked trailers are checked while the body streams — a
//!   mismatch is `BadDigest` and nothing is stored; a signed payload whose SHA-256 differs is
//!   `XAmzContentSHA256Mismatch`. Checksums are stored and returned by GET/HEAD with
//!   `x-amz-checksum-mode: ENABLED` (whole-object reads only). Multipart objects get the
//!   COMPOSITE checksum (checksum of the part checksums, `-N`) or, for CRCs created with
//!   `x-amz-checksum-type: FULL_OBJECT` (CRC64NVME always), the full-object CRC combined from
//!   the parts.
//! - Redundancy per object: `x-railstore-mechanism: rep3|split3+3|pack3+3|…` (or that name
//!   as `x-amz-storage-class`) on PutObject, CreateMultipartUpload and CopyObject;
//!   `STANDARD` or nothing lets the store's policy choose. GET, HEAD, PUT and COPY answer
//!   with the mechanism in `x-railstore-mechanism`.
//!
//! - Users and ACLs (`users.rs`, `acl/`): each user's own buckets, owners of buckets and
//!   objects, canned ACLs and grants (headers or documents) on buckets and objects,
//!   Get/PutBucketAcl, Get/PutObjectAcl, ownership controls.
//! - Versioning (`versioning.rs`), bucket policies and the public access block (`policy/`),
//!   POST uploads (`post/`), and object lock (`lock.rs`): buckets made with it or given it
//!   while versioned, default retention, retention and legal hold per version on writes and
//!   by request, the lock fields on HEAD and GET; the store refuses to delete a locked
//!   version (governance gives way to `x-amz-bypass-governance-retention`).
//!
//! # Not supported
//! - Users added or removed while serving (they come from the configuration), the log
//!   delivery group's grants (kept and shown, matching no request), website, replication, notifications, bucket logging, SigV4a, SelectObjectContent.
//! - Other conditional writes: `If-Match: *`, `If-None-Match` with an ETag, both at once,
//!   and deletes conditional on time or size (`NotImplemented`).
//! - GET/HEAD with `partNumber` on a multipart object completed before the store kept part
//!   sizes.
//! - Checksums of DeleteObjects and other XML
//!   bodies are not checked. CopyObject does not compute new checksums.
//! - Headers above [`REQUEST_HEADER_BYTES_MAX`] get S3's `RequestHeaderSectionTooLarge`, but
//!   request heads above [`REQUEST_HEAD_BYTES_MAX`] get hyper's bare `431`, not an S3 XML
//!   error. A connection cut for a slow head or an unread response gets no S3 error either.

// Before the operations' modules: its macros are theirs.
#[macro_use]
mod fields;

mod access;
mod acl;
pub mod admin;
mod attributes;
mod body;
mod bucket;
mod checksum;
mod console;
mod copy;
mod cors;
mod errors;
mod guard;
pub mod latency;
mod lifecycle;
mod list;
mod lock;
mod multipart;
mod object;
mod policy;
mod post;
mod request_id;
mod server;
mod service;
mod sse;
mod tagging;
mod users;
mod util;
mod versioning;

pub use lifecycle::{expire as apply_lifecycle, ExpiryReport};
pub use server::{
    bind, s3_service, serve, Limits, S3Config, ServeError, Server, BODY_IDLE_TIMEOUT,
    CONNECTIONS_MAX, HEADER_READ_TIMEOUT, POST_FORM_BYTES_MAX, REQUEST_HEADERS_MAX,
    REQUEST_HEADER_BYTES_MAX, REQUEST_HEAD_BYTES_MAX, SHUTDOWN_GRACE,
};
pub use service::{RailS3, MECHANISM_HEADER};
pub use sse::Keyring;
pub use users::{User, Users, MAIN_ID as MAIN_USER_ID};
