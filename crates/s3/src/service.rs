//! [`RailS3`]: the S3 operations, each mapped onto the store.

use crate::body::Outgoing;
use crate::checksum::{self, Algorithm, Outcome, Plan, Verified, Verifier};
use crate::errors::{err, invalid_argument, invalid_request, not_implemented, store_error};
use crate::util::{self, token_decode, token_encode, url_encode, Conditions, Verdict};
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode};
use railstore_store::{
    Body, ChecksumsAtEnd, ListPage, ListQuery, Mechanism, ObjectInfo, PartOptions, PutOptions,
    RangeSpec, Store, StoreError, WriteCondition,
};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, TrailingHeaders, S3};
use std::collections::{BTreeMap, HashMap};

/// The response header naming the mechanism that protects an object, and the request header
/// that picks it for a put or a multipart upload.
pub const MECHANISM_HEADER: &str = "x-railstore-mechanism";

/// Most keys (or uploads, parts, buckets) one listing page returns, as S3.
const PAGE_MAX: usize = 1000;
/// Most keys one DeleteObjects request names, as S3.
const DELETE_KEYS_MAX: usize = 1000;
/// S3's limit on user metadata: keys and values together, in bytes.
const USER_METADATA_BYTES_MAX: usize = 2048;
const OWNER_ID: &str = "railstore";
const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

// The s3s inputs and outputs are distinct types with the same field names; these macros
// read or fill those fields wherever they stand.

/// The [`ObjectFields`] of a put, copy or multipart-upload input.
macro_rules! object_fields {
    ($input:expr) => {
        ObjectFields {
            content_type: $input.content_type.as_ref(),
            metadata: $input.metadata.as_ref(),
            cache_control: $input.cache_control.as_ref(),
            content_disposition: $input.content_disposition.as_ref(),
            content_encoding: $input.content_encoding.as_ref(),
            content_language: $input.content_language.as_ref(),
            expires: $input.expires.as_ref(),
        }
    };
}

/// Whether a write input asks for object lock (which [`refuse_unsupported`] refuses).
macro_rules! object_lock_requested {
    ($input:expr) => {
        $input.object_lock_mode.is_some()
            || $input.object_lock_retain_until_date.is_some()
            || $input.object_lock_legal_hold_status.is_some()
    };
}

/// The checksum [`Plan`] of a body-carrying input (PutObject, UploadPart); `$upload` is the
/// algorithm the multipart upload was created with, if any.
macro_rules! checksum_plan {
    ($input:expr, $upload:expr, $headers:expr, $trailers:expr) => {
        Plan::from_request(
            [
                (Algorithm::Crc32, $input.checksum_crc32.as_ref()),
                (Algorithm::Crc32c, $input.checksum_crc32c.as_ref()),
                (Algorithm::Crc64Nvme, $input.checksum_crc64nvme.as_ref()),
                (Algorithm::Sha1, $input.checksum_sha1.as_ref()),
                (Algorithm::Sha256, $input.checksum_sha256.as_ref()),
            ],
            $input
                .checksum_algorithm
                .as_ref()
                .map(ChecksumAlgorithm::as_str),
            $upload,
            $headers,
            $trailers,
        )?
    };
}

/// The value a completion or a completed part states for `$alg`.
macro_rules! checksum_of {
    ($fields:expr, $alg:expr) => {
        match $alg {
            Algorithm::Crc32 => $fields.checksum_crc32.as_ref(),
            Algorithm::Crc32c => $fields.checksum_crc32c.as_ref(),
            Algorithm::Crc64Nvme => $fields.checksum_crc64nvme.as_ref(),
            Algorithm::Sha1 => $fields.checksum_sha1.as_ref(),
            Algorithm::Sha256 => $fields.checksum_sha256.as_ref(),
        }
    };
}

/// The conditional headers of a GET or HEAD input.
macro_rules! read_conditions {
    ($input:expr) => {
        Conditions {
            if_match: $input.if_match.as_ref(),
            if_none_match: $input.if_none_match.as_ref(),
            if_modified_since: $input.if_modified_since.as_ref(),
            if_unmodified_since: $input.if_unmodified_since.as_ref(),
        }
    };
}

/// `$ty { fields }` with the [`ChecksumFields`] `$c` filled in, the rest default; `untyped`
/// for outputs without a checksum type (parts).
macro_rules! with_checksums {
    ($ty:ident { $($field:ident: $value:expr),* $(,)? }, $c:expr) => {{
        let mut c: ChecksumFields = $c;
        let kind = c.kind.take();
        with_checksums!($ty { checksum_type: kind, $($field: $value),* }, c, untyped)
    }};
    ($ty:ident { $($field:ident: $value:expr),* $(,)? }, $c:expr, untyped) => {{
        let c: ChecksumFields = $c;
        // Some outputs (CopyObjectResult, Part) have no fields besides these.
        #[allow(clippy::needless_update)]
        let output = $ty {
            $($field: $value,)*
            checksum_crc32: c.crc32,
            checksum_crc32c: c.crc32c,
            checksum_crc64nvme: c.crc64nvme,
            checksum_sha1: c.sha1,
            checksum_sha256: c.sha256,
            ..$ty::default()
        };
        output
    }};
}

/// The [`KeyListing`] of a ListObjects (V1, V2) or ListObjectVersions input.
macro_rules! key_listing {
    ($input:expr) => {
        KeyListing {
            enc: Enc(url_encoded($input.encoding_type.as_ref())?),
            max: page_size($input.max_keys, "max-keys")?,
            prefix: $input.prefix.clone().unwrap_or_default(),
        }
    };
}

/// A ListObjects (V1, V2) or ListObjectVersions output: `$ty { fields }` with the fields they
/// share, from the input, its [`KeyListing`] and the page.
macro_rules! listing_output {
    ($ty:ident { $($field:ident: $value:expr),* $(,)? }, $input:expr, $l:expr, $page:expr) => {
        $ty {
            $($field: $value,)*
            name: Some($input.bucket.clone()),
            prefix: Some($l.enc.s(&$l.prefix)),
            max_keys: Some($l.max as i32),
            is_truncated: Some($page.truncated),
            common_prefixes: common_prefixes(&$page.prefixes, &$l.enc),
            // An empty delimiter is no delimiter, and S3 does not echo it.
            delimiter: $l.enc.o($input.delimiter.as_ref().filter(|d| !d.is_empty())),
            encoding_type: $l.enc.kind(),
            request_charged: None,
        }
    };
}

/// A GET or HEAD output: `$ty { fields }` with the object's [`Described`] `$d` filled in.
macro_rules! described_output {
    ($ty:ident { $($field:ident: $value:expr),* $(,)? }, $d:expr) => {{
        let d: Described = $d;
        with_checksums!($ty {
            $($field: $value,)*
            content_type: d.content_type,
            metadata: d.metadata,
            cache_control: d.cache_control,
            content_disposition: d.content_disposition,
            content_encoding: d.content_encoding,
            content_language: d.content_language,
            expires: d.expires,
            e_tag: d.e_tag,
            last_modified: d.last_modified,
        }, d.checksums)
    }};
}

/// The S3 API over a [`Store`]. Give it to [`s3s::service::S3ServiceBuilder`], or use
/// [`crate::bind`] / [`crate::serve`], which do.
#[derive(Debug, Clone)]
pub struct RailS3 {
    store: Store,
    region: String,
}

impl RailS3 {
    /// Serves `store`, answering for `region`.
    pub fn new(store: Store, region: impl Into<String>) -> RailS3 {
        RailS3 {
            store,
            region: region.into(),
        }
    }

    /// The store it serves.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn owner() -> Owner {
        Owner {
            display_name: Some(OWNER_ID.to_string()),
            id: Some(OWNER_ID.to_string()),
        }
    }

    /// Reads the mechanism a request asks for (`x-railstore-mechanism`, or a mechanism name as
    /// storage class); `STANDARD` or nothing leaves it to the policy.
    fn mechanism(
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
    fn incoming(
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

    /// The object's description as GET and HEAD return it.
    fn described(&self, info: &ObjectInfo, checksum_mode: bool, whole: bool) -> Described {
        let h = |name: &str| info.headers.get(name).cloned();
        let mut d = Described {
            content_type: Some(
                info.content_type
                    .clone()
                    .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.to_string()),
            ),
            metadata: (!info.user_metadata.is_empty()).then(|| {
                info.user_metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<HashMap<_, _>>()
            }),
            cache_control: h("cache-control"),
            content_disposition: h("content-disposition"),
            content_encoding: h("content-encoding"),
            content_language: h("content-language"),
            expires: h("expires").as_deref().and_then(util::parse_http_date),
            e_tag: Some(ETag::Strong(info.etag.clone())),
            last_modified: Some(util::timestamp(info.last_modified)),
            ..Described::default()
        };
        if checksum_mode && whole {
            d.checksums = ChecksumFields::from_map(&info.checksums);
        }
        d
    }

    /// A page of the bucket's keys after `after`, rolled up at `delimiter` (an empty one is
    /// none).
    fn list(
        &self,
        bucket: &str,
        l: &KeyListing,
        delimiter: Option<&String>,
        after: Option<String>,
    ) -> S3Result<ListPage> {
        if l.max == 0 {
            self.store.head_bucket(bucket).map_err(store_error)?;
            return Ok(ListPage::default());
        }
        let q = ListQuery {
            prefix: l.prefix.clone(),
            delimiter: nonempty(delimiter.cloned()),
            after,
            max_keys: l.max,
        };
        self.store.list_objects(bucket, &q).map_err(store_error)
    }
}

/// A request body ready for the store.
struct Incoming {
    body: Body,
    /// The checksums to store with it whose values are known before the body is read.
    checksums: BTreeMap<String, String>,
    /// The rest, known once the body has been read.
    at_end: Option<ChecksumsAtEnd>,
    outcome: Outcome,
}

/// The store's precondition from a write's `If-Match` and `If-None-Match` headers (an ETag or
/// `*` in either; not both headers at once).
fn write_condition(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<Option<WriteCondition>> {
    Ok(Some(match (if_match, if_none_match) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(not_implemented(
                "If-Match and If-None-Match together on a write are not supported",
            ))
        }
        (Some(ETagCondition::ETag(e)), None) => WriteCondition::ETag(e.value().to_string()),
        (Some(ETagCondition::Any), None) => WriteCondition::Exists,
        (None, Some(ETagCondition::Any)) => WriteCondition::Absent,
        (None, Some(ETagCondition::ETag(e))) => WriteCondition::NotETag(e.value().to_string()),
    }))
}

/// The checksums a write answers with: every value that was checked (the stored ones when
/// the store saw no end). `outcome` and `stored` are an [`Incoming`]'s, its body spent.
fn answered_checksums(outcome: &Outcome, stored: &BTreeMap<String, String>) -> ChecksumFields {
    ChecksumFields::from_map(&outcome.values().unwrap_or_else(|| stored.clone()))
}

#[derive(Default)]
struct ChecksumFields {
    crc32: Option<String>,
    crc32c: Option<String>,
    crc64nvme: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
    kind: Option<ChecksumType>,
}

impl ChecksumFields {
    fn from_map(map: &BTreeMap<String, String>) -> ChecksumFields {
        let get = |a| checksum::stored(map, a);
        let kind = Algorithm::ALL
            .into_iter()
            .find_map(get)
            .map(|v| ChecksumType::from(checksum::checksum_type(&v).to_string()));
        ChecksumFields {
            crc32: get(Algorithm::Crc32),
            crc32c: get(Algorithm::Crc32c),
            crc64nvme: get(Algorithm::Crc64Nvme),
            sha1: get(Algorithm::Sha1),
            sha256: get(Algorithm::Sha256),
            kind,
        }
    }
}

#[derive(Default)]
struct Described {
    content_type: Option<String>,
    metadata: Option<HashMap<String, String>>,
    cache_control: Option<String>,
    content_disposition: Option<String>,
    content_encoding: Option<String>,
    content_language: Option<String>,
    expires: Option<Timestamp>,
    e_tag: Option<ETag>,
    last_modified: Option<Timestamp>,
    checksums: ChecksumFields,
}

fn mechanism_headers(mechanism: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(mechanism) {
        h.insert(MECHANISM_HEADER, v);
    }
    h
}

fn check_version(version_id: Option<&str>) -> S3Result<()> {
    match version_id {
        None | Some("null") => Ok(()),
        Some(_) => Err(invalid_argument(
            "Invalid version id specified (buckets are not versioned)",
        )),
    }
}

fn content_md5(v: Option<&String>) -> S3Result<Option<[u8; 16]>> {
    let Some(v) = v else { return Ok(None) };
    checksum::unb64(v)
        .and_then(|raw| <[u8; 16]>::try_from(raw).ok())
        .map(Some)
        .ok_or_else(|| {
            err(
                S3ErrorCode::InvalidDigest,
                "The Content-MD5 you specified is not valid.",
            )
        })
}

/// `Content-Encoding` as stored: `aws-chunked` is the transfer's, not the object's.
fn stored_content_encoding(v: Option<&String>) -> Option<String> {
    let kept: Vec<&str> = v?
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The fields a put, copy (`REPLACE`) or multipart upload stores with an object.
struct ObjectFields<'a> {
    content_type: Option<&'a String>,
    metadata: Option<&'a Metadata>,
    cache_control: Option<&'a String>,
    content_disposition: Option<&'a String>,
    content_encoding: Option<&'a String>,
    content_language: Option<&'a String>,
    expires: Option<&'a Timestamp>,
}

fn put_options(d: ObjectFields<'_>, mechanism: Option<Mechanism>) -> S3Result<PutOptions> {
    let mut user_metadata = BTreeMap::new();
    let mut bytes = 0;
    for (k, v) in d.metadata.into_iter().flatten() {
        bytes += k.len() + v.len();
        user_metadata.insert(k.to_ascii_lowercase(), v.clone());
    }
    if bytes > USER_METADATA_BYTES_MAX {
        return Err(err(
            S3ErrorCode::MetadataTooLarge,
            format!(
                "Your metadata headers exceed the maximum allowed metadata size \
                 ({bytes} > {USER_METADATA_BYTES_MAX} bytes)."
            ),
        ));
    }
    let mut headers = BTreeMap::new();
    let mut put = |name: &str, v: Option<String>| {
        if let Some(v) = v {
            headers.insert(name.to_string(), v);
        }
    };
    put("cache-control", d.cache_control.cloned());
    put("content-disposition", d.content_disposition.cloned());
    put(
        "content-encoding",
        stored_content_encoding(d.content_encoding),
    );
    put("content-language", d.content_language.cloned());
    put("expires", d.expires.and_then(util::http_date));
    Ok(PutOptions {
        content_type: d.content_type.filter(|c| !c.is_empty()).cloned(),
        user_metadata,
        headers,
        mechanism,
        ..PutOptions::default()
    })
}

/// Refuses what railstore does not do rather than pretending to.
fn refuse_unsupported(
    sse: Option<&ServerSideEncryption>,
    sse_c: Option<&String>,
    kms: Option<&String>,
    lock: bool,
) -> S3Result<()> {
    if sse.is_some() || sse_c.is_some() || kms.is_some() {
        return Err(not_implemented("server-side encryption is not supported"));
    }
    if lock {
        return Err(not_implemented("object lock is not supported"));
    }
    Ok(())
}

fn range_spec(r: Option<&Range>) -> Option<RangeSpec> {
    r.map(|r| match *r {
        Range::Int { first, last } => RangeSpec::FromTo { first, last },
        Range::Suffix { length } => RangeSpec::Suffix(length),
    })
}

fn verdict_error(v: Verdict, info: &ObjectInfo) -> S3Result<()> {
    match v {
        Verdict::Proceed => Ok(()),
        Verdict::PreconditionFailed => Err(err(
            S3ErrorCode::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold",
        )),
        Verdict::NotModified => {
            let mut e = S3Error::new(S3ErrorCode::NotModified);
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", info.etag)) {
                h.insert(http::header::ETAG, v);
            }
            if let Some(d) = util::http_date(&util::timestamp(info.last_modified)) {
                if let Ok(v) = HeaderValue::from_str(&d) {
                    h.insert(http::header::LAST_MODIFIED, v);
                }
            }
            e.set_headers(h);
            Err(e)
        }
    }
}

/// Checks a read's `partNumber`: an object not uploaded in parts is one part, the whole
/// object; `parts` gives the object's part count, `multipart_refusal` the answer when it has
/// parts.
fn check_single_part(
    n: i32,
    range: Option<RangeSpec>,
    parts: impl FnOnce() -> S3Result<u32>,
    multipart_refusal: &str,
) -> S3Result<()> {
    if range.is_some() {
        return Err(invalid_request(
            "Cannot specify both Range header and partNumber query parameter",
        ));
    }
    if parts()? > 0 {
        return Err(not_implemented(multipart_refusal));
    }
    if n != 1 {
        return Err(invalid_part_number());
    }
    Ok(())
}

fn checksum_mode_enabled(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

/// `Content-Range` of a ranged read of `[start, end)` of `size` bytes.
fn content_range(whole: bool, start: u64, end: u64, size: u64) -> Option<String> {
    (!whole).then(|| format!("bytes {start}-{}/{size}", end.max(1) - 1))
}

fn initiator() -> Initiator {
    Initiator {
        display_name: Some(OWNER_ID.to_string()),
        id: Some(OWNER_ID.to_string()),
    }
}

/// `STANDARD` as whichever storage-class type an output has.
fn standard_class<T: From<String>>() -> T {
    T::from(StorageClass::STANDARD.to_string())
}

/// The checksum type a multipart upload's object gets: full-object or composite.
fn checksum_type_name(full_object: bool) -> &'static str {
    if full_object {
        ChecksumType::FULL_OBJECT
    } else {
        ChecksumType::COMPOSITE
    }
}

fn invalid_part_number() -> S3Error {
    let mut e = err(
        S3ErrorCode::from_bytes(b"InvalidPartNumber").expect("a code"),
        "The requested partnumber is not satisfiable",
    );
    e.set_status_code(StatusCode::RANGE_NOT_SATISFIABLE);
    e
}

/// A listing's page size from its `max-keys` (or `max-parts`, `max-uploads`: `name`).
fn page_size(v: Option<i32>, name: &str) -> S3Result<usize> {
    match v {
        None => Ok(PAGE_MAX),
        Some(n) if n < 0 => Err(invalid_argument(format!("{name} must not be negative"))),
        Some(n) => Ok((n as usize).min(PAGE_MAX)),
    }
}

fn url_encoded(e: Option<&EncodingType>) -> S3Result<bool> {
    match e.map(EncodingType::as_str) {
        None => Ok(false),
        Some(s) if s.eq_ignore_ascii_case(EncodingType::URL) => Ok(true),
        Some(_) => Err(invalid_argument(
            "Invalid Encoding Method specified in Request",
        )),
    }
}

fn nonempty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// Encodes listing text when the request asked for `encoding-type=url`.
struct Enc(bool);

impl Enc {
    fn s(&self, s: &str) -> String {
        if self.0 {
            url_encode(s)
        } else {
            s.to_string()
        }
    }

    fn o(&self, s: Option<&String>) -> Option<String> {
        s.map(|s| self.s(s))
    }

    fn kind(&self) -> Option<EncodingType> {
        self.0
            .then(|| EncodingType::from(EncodingType::URL.to_string()))
    }
}

fn common_prefixes(prefixes: &[String], enc: &Enc) -> Option<Vec<CommonPrefix>> {
    (!prefixes.is_empty()).then(|| {
        prefixes
            .iter()
            .map(|p| CommonPrefix {
                prefix: Some(enc.s(p)),
            })
            .collect()
    })
}

/// What ListObjects (V1, V2) and ListObjectVersions read alike from their requests.
struct KeyListing {
    enc: Enc,
    max: usize,
    prefix: String,
}

/// A ListObjects (V1 or V2) page's objects; `owner` where the request wants it.
fn listed_objects(page: &ListPage, enc: &Enc, owner: Option<Owner>) -> Vec<Object> {
    page.objects
        .iter()
        .map(|o| Object {
            key: Some(enc.s(&o.key)),
            size: Some(o.size as i64),
            e_tag: Some(ETag::Strong(o.etag.clone())),
            last_modified: Some(util::timestamp(o.last_modified)),
            storage_class: Some(standard_class()),
            owner: owner.clone(),
            ..Object::default()
        })
        .collect()
}

/// Where a truncated page's next one starts, encoded for the response.
fn next_marker(page: &ListPage, enc: &Enc) -> Option<String> {
    page.truncated
        .then(|| page.next_after.as_ref().map(|m| enc.s(m)))
        .flatten()
}

fn part_number(n: i32) -> S3Result<u32> {
    u32::try_from(n)
        .ok()
        .filter(|n| (1..=railstore_store::PART_NUMBER_MAX).contains(n))
        .ok_or_else(|| {
            invalid_argument(format!(
                "Part number must be an integer between 1 and {}, inclusive",
                railstore_store::PART_NUMBER_MAX
            ))
        })
}

/// The checksum a multipart upload was created with: the store keeps one "algorithm" string
/// per upload, which holds `ALGORITHM:TYPE` here.
fn upload_checksum(o: &PutOptions) -> Option<(Algorithm, bool)> {
    let key = o.checksums.keys().next()?;
    let (alg, kind) = key.split_once(':').unwrap_or((key, ""));
    let alg = Algorithm::parse(alg)?;
    Some((alg, kind == ChecksumType::FULL_OBJECT))
}

#[async_trait::async_trait]
impl S3 for RailS3 {
    // ---- buckets ----

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let input = req.input;
        let max = match input.max_buckets {
            None => usize::MAX,
            Some(n) if (1..=10_000).contains(&n) => n as usize,
            Some(_) => return Err(invalid_argument("max-buckets must be 1 to 10000")),
        };
        let after =
            match input.continuation_token.as_deref() {
                None => None,
                Some(t) => Some(token_decode(t).ok_or_else(|| {
                    invalid_argument("The continuation token provided is incorrect")
                })?),
            };
        let prefix = input.prefix.clone().unwrap_or_default();
        let all: Vec<_> = self
            .store
            .list_buckets()
            .into_iter()
            .filter(|b| b.name.starts_with(&prefix))
            .filter(|b| after.as_ref().is_none_or(|a| b.name > *a))
            .collect();
        let truncated = all.len() > max;
        let page: Vec<_> = all.into_iter().take(max).collect();
        let token = truncated
            .then(|| page.last().map(|b| token_encode(&b.name)))
            .flatten();
        let buckets = page
            .into_iter()
            .map(|b| Bucket {
                bucket_region: Some(self.region.clone()),
                creation_date: Some(util::timestamp(b.created)),
                name: Some(b.name),
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            continuation_token: token,
            owner: Some(Self::owner()),
            prefix: input.prefix,
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let input = req.input;
        let constraint = input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref())
            .map(|c| c.as_str().to_string())
            .filter(|c| !c.is_empty());
        if let Some(c) = constraint {
            if c != self.region {
                return Err(err(
                    S3ErrorCode::IllegalLocationConstraintException,
                    format!(
                        "The {c} location constraint is incompatible for the region specific \
                         endpoint this request was sent to ({}).",
                        self.region
                    ),
                ));
            }
        }
        if input.object_lock_enabled_for_bucket == Some(true) {
            return Err(not_implemented("object lock is not supported"));
        }
        let created = self
            .store
            .create_bucket(&input.bucket)
            .await
            .map_err(store_error)?;
        if !created {
            tracing::debug!(bucket = %input.bucket, "bucket re-created by its owner");
        }
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{}", input.bucket)),
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        self.store
            .delete_bucket(&req.input.bucket)
            .await
            .map_err(store_error)?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.store
            .head_bucket(&req.input.bucket)
            .map_err(store_error)?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.region.clone()),
            ..HeadBucketOutput::default()
        }))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.store
            .head_bucket(&req.input.bucket)
            .map_err(store_error)?;
        // S3 answers an empty constraint for us-east-1.
        let location_constraint = (self.region != "us-east-1")
            .then(|| BucketLocationConstraint::from(self.region.clone()));
        Ok(S3Response::new(GetBucketLocationOutput {
            location_constraint,
        }))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        self.store
            .head_bucket(&req.input.bucket)
            .map_err(store_error)?;
        // Never versioned: no status at all.
        Ok(S3Response::new(GetBucketVersioningOutput::default()))
    }

    // ---- objects ----

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let S3Request {
            input,
            headers,
            trailing_headers,
            ..
        } = req;
        refuse_unsupported(
            input.server_side_encryption.as_ref(),
            input.sse_customer_key.as_ref(),
            input.ssekms_key_id.as_ref(),
            object_lock_requested!(input),
        )?;
        let condition = write_condition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
        if input.write_offset_bytes.is_some() {
            return Err(not_implemented(
                "appends (x-amz-write-offset-bytes) are not supported",
            ));
        }
        self.store.head_bucket(&input.bucket).map_err(store_error)?;
        let mechanism = self.mechanism(&headers, input.storage_class.as_ref())?;
        let mut options = put_options(object_fields!(input), mechanism)?;
        options.content_md5 = content_md5(input.content_md5.as_ref())?;
        options.condition = condition;
        let plan = checksum_plan!(input, None, &headers, trailing_headers.as_ref());
        let incoming = Self::incoming(input.body, plan, trailing_headers);
        options.checksums = incoming.checksums.clone();
        options.checksums_at_end = incoming.at_end.clone();
        let info = self
            .store
            .put_object(&input.bucket, &input.key, incoming.body, options)
            .await
            .map_err(|e| incoming.outcome.error(e))?;
        let c = answered_checksums(&incoming.outcome, &incoming.checksums);
        let output = with_checksums!(
            PutObjectOutput {
                e_tag: Some(ETag::Strong(info.etag.clone())),
            },
            c
        );
        Ok(S3Response::with_headers(
            output,
            mechanism_headers(&info.mechanism),
        ))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = &req.input;
        check_version(input.version_id.as_deref())?;
        let conditions = read_conditions!(input);
        let mut range = range_spec(input.range.as_ref());
        let mut part_answer = false;
        if let Some(n) = input.part_number {
            check_single_part(
                n,
                range,
                || {
                    let info = self.store.head_object(&input.bucket, &input.key);
                    Ok(info.map_err(store_error)?.parts)
                },
                "reading one part of a multipart object is not supported; use a range",
            )?;
            range = None;
            part_answer = true;
        }
        let got = match self
            .store
            .get_object(&input.bucket, &input.key, range)
            .await
        {
            Ok(g) => g,
            Err(StoreError::InvalidRange { size }) => {
                if conditions.any() {
                    let info = self
                        .store
                        .head_object(&input.bucket, &input.key)
                        .map_err(store_error)?;
                    verdict_error(conditions.evaluate(&info.etag, info.last_modified), &info)?;
                }
                let mut e = store_error(StoreError::InvalidRange { size });
                let mut h = HeaderMap::new();
                // These replace the error response's headers: keep its content type.
                h.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/xml"),
                );
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    h.insert(http::header::CONTENT_RANGE, v);
                }
                e.set_headers(h);
                return Err(e);
            }
            Err(e) => return Err(store_error(e)),
        };
        let info = &got.info;
        verdict_error(conditions.evaluate(&info.etag, info.last_modified), info)?;
        let (start, end) = got.range;
        let whole = range.is_none();
        let checksum_mode = checksum_mode_enabled(input.checksum_mode.as_ref());
        let d = self.described(info, checksum_mode, whole);
        let content_range = content_range(whole, start, end, info.size);
        let what = format!("{}/{}", input.bucket, input.key);
        let body = Outgoing::new(got.body, end - start, what);
        let output = described_output!(
            GetObjectOutput {
                accept_ranges: Some("bytes".to_string()),
                body: Some(StreamingBlob::new(body)),
                content_length: Some((end - start) as i64),
                content_range: content_range,
                parts_count: part_answer.then_some(1),
            },
            d
        );
        Ok(S3Response::with_headers(
            output,
            mechanism_headers(&info.mechanism),
        ))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = &req.input;
        check_version(input.version_id.as_deref())?;
        let info = self
            .store
            .head_object(&input.bucket, &input.key)
            .map_err(store_error)?;
        let conditions = read_conditions!(input);
        verdict_error(conditions.evaluate(&info.etag, info.last_modified), &info)?;
        let mut range = range_spec(input.range.as_ref());
        if let Some(n) = input.part_number {
            check_single_part(
                n,
                range,
                || Ok(info.parts),
                "describing one part of a multipart object is not supported",
            )?;
            range = None;
        }
        let (start, end) = match range {
            None => (0, info.size),
            Some(r) => r.resolve(info.size).map_err(store_error)?,
        };
        let whole = range.is_none();
        let checksum_mode = checksum_mode_enabled(input.checksum_mode.as_ref());
        let d = self.described(&info, checksum_mode, whole);
        let output = described_output!(
            HeadObjectOutput {
                accept_ranges: Some("bytes".to_string()),
                content_length: Some((end - start) as i64),
                content_range: content_range(whole, start, end, info.size),
                parts_count: input.part_number.map(|_| 1),
            },
            d
        );
        let mut resp = S3Response::with_headers(output, mechanism_headers(&info.mechanism));
        if !whole {
            resp.status = Some(StatusCode::PARTIAL_CONTENT);
        }
        Ok(resp)
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let input = req.input;
        check_version(input.version_id.as_deref())?;
        if input.if_match_last_modified_time.is_some() || input.if_match_size.is_some() {
            return Err(not_implemented(
                "deletes conditional on the modification time or the size are not supported",
            ));
        }
        let condition = write_condition(input.if_match.as_ref(), None)?;
        self.store
            .delete_object_if(&input.bucket, &input.key, condition.as_ref())
            .await
            .map_err(store_error)?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        let objects = input.delete.objects;
        if objects.is_empty() || objects.len() > DELETE_KEYS_MAX {
            return Err(err(
                S3ErrorCode::MalformedXML,
                format!("A delete request names 1 to {DELETE_KEYS_MAX} objects"),
            ));
        }
        self.store.head_bucket(&input.bucket).map_err(store_error)?;
        let quiet = input.delete.quiet.unwrap_or(false);
        let mut errors = Vec::new();
        let mut keys = Vec::new();
        for o in &objects {
            match o.version_id.as_deref() {
                None | Some("null") => keys.push(o.key.clone()),
                Some(v) => errors.push(Error {
                    code: Some("NoSuchVersion".to_string()),
                    key: Some(o.key.clone()),
                    message: Some("The specified version does not exist.".to_string()),
                    version_id: Some(v.to_string()),
                }),
            }
        }
        // Store::delete_objects' future is not `Send` for every lifetime (its closure borrows
        // the keys), which async_trait needs; the same, with owned keys.
        let results: Vec<Result<bool, StoreError>> = futures_util::stream::iter(keys.clone())
            .map(|k| {
                let store = self.store.clone();
                let bucket = input.bucket.clone();
                async move { store.delete_object(&bucket, &k).await }
            })
            .buffered(8)
            .collect()
            .await;
        let mut deleted = Vec::new();
        for (key, r) in keys.into_iter().zip(results) {
            match r {
                Ok(_) => {
                    if !quiet {
                        deleted.push(DeletedObject {
                            key: Some(key),
                            ..DeletedObject::default()
                        });
                    }
                }
                Err(e) => {
                    let e = store_error(e);
                    errors.push(Error {
                        code: Some(e.code().as_str().to_string()),
                        key: Some(key),
                        message: e.message().map(str::to_string),
                        version_id: None,
                    });
                }
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: (!deleted.is_empty()).then_some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            request_charged: None,
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let S3Request { input, headers, .. } = req;
        let (src_bucket, src_key) = match &input.copy_source {
            CopySource::Bucket {
                bucket,
                key,
                version_id,
            } => {
                check_version(version_id.as_deref())?;
                (bucket.to_string(), key.to_string())
            }
            _ => {
                return Err(not_implemented(
                    "copying from access points is not supported",
                ))
            }
        };
        refuse_unsupported(
            input.server_side_encryption.as_ref(),
            input
                .sse_customer_key
                .as_ref()
                .or(input.copy_source_sse_customer_key.as_ref()),
            input.ssekms_key_id.as_ref(),
            object_lock_requested!(input),
        )?;
        let src = self
            .store
            .head_object(&src_bucket, &src_key)
            .map_err(store_error)?;
        let conditions = Conditions {
            if_match: input.copy_source_if_match.as_ref(),
            if_none_match: input.copy_source_if_none_match.as_ref(),
            if_modified_since: input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
        };
        if conditions.evaluate(&src.etag, src.last_modified) != Verdict::Proceed {
            return Err(err(
                S3ErrorCode::PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold",
            ));
        }
        let replace = match input
            .metadata_directive
            .as_ref()
            .map(MetadataDirective::as_str)
        {
            None | Some(MetadataDirective::COPY) => false,
            Some(MetadataDirective::REPLACE) => true,
            Some(other) => {
                return Err(invalid_argument(format!(
                    "Unknown metadata directive {other:?}"
                )))
            }
        };
        let mechanism = self.mechanism(&headers, input.storage_class.as_ref())?;
        let same = src_bucket == input.bucket && src_key == input.key;
        if same && !replace && mechanism.is_none() && input.storage_class.is_none() {
            return Err(invalid_request(
                "This copy request is illegal because it is trying to copy an object to itself \
                 without changing the object's metadata, storage class, website redirect \
                 location or encryption attributes.",
            ));
        }
        let body_checksums = if src.parts == 0 {
            src.checksums.clone()
        } else {
            BTreeMap::new()
        };
        let options = if replace {
            let mut o = put_options(object_fields!(input), mechanism)?;
            o.checksums = body_checksums;
            Some(o)
        } else if mechanism.is_some() {
            Some(PutOptions {
                content_type: src.content_type.clone(),
                user_metadata: src.user_metadata.clone(),
                headers: src.headers.clone(),
                checksums: body_checksums,
                checksums_at_end: None,
                content_md5: None,
                mechanism,
                condition: None,
            })
        } else {
            None
        };
        let info = self
            .store
            .copy_object(&src_bucket, &src_key, &input.bucket, &input.key, options)
            .await
            .map_err(store_error)?;
        let c = ChecksumFields::from_map(&info.checksums);
        let output = CopyObjectOutput {
            copy_object_result: Some(with_checksums!(
                CopyObjectResult {
                    e_tag: Some(ETag::Strong(info.etag.clone())),
                    last_modified: Some(util::timestamp(info.last_modified)),
                },
                c
            )),
            ..CopyObjectOutput::default()
        };
        Ok(S3Response::with_headers(
            output,
            mechanism_headers(&info.mechanism),
        ))
    }

    // ---- listings ----

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let l = key_listing!(input);
        let after =
            match input.continuation_token.as_deref() {
                Some(t) => Some(token_decode(t).ok_or_else(|| {
                    invalid_argument("The continuation token provided is incorrect")
                })?),
                None => nonempty(input.start_after.clone()),
            };
        let delimiter = nonempty(input.delimiter.clone());
        let page = self.list(&input.bucket, &l, delimiter.as_ref(), after)?;
        let owner = input.fetch_owner.unwrap_or(false).then(Self::owner);
        let contents = listed_objects(&page, &l.enc, owner);
        let key_count = (page.objects.len() + page.prefixes.len()) as i32;
        Ok(S3Response::new(listing_output!(
            ListObjectsV2Output {
                key_count: Some(key_count),
                continuation_token: input.continuation_token.clone(),
                next_continuation_token: page
                    .truncated
                    .then(|| page.next_after.as_deref().map(token_encode))
                    .flatten(),
                contents: (!contents.is_empty()).then_some(contents),
                start_after: l.enc.o(input.start_after.as_ref()),
            },
            input,
            l,
            page
        )))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let l = key_listing!(input);
        let delimiter = nonempty(input.delimiter.clone());
        let after = nonempty(input.marker.clone());
        let page = self.list(&input.bucket, &l, delimiter.as_ref(), after)?;
        let contents = listed_objects(&page, &l.enc, Some(Self::owner()));
        // S3 gives NextMarker only with a delimiter; without one the last key is the marker.
        let next_marker = next_marker(&page, &l.enc).filter(|_| delimiter.is_some());
        Ok(S3Response::new(listing_output!(
            ListObjectsOutput {
                marker: Some(l.enc.s(input.marker.as_deref().unwrap_or_default())),
                contents: (!contents.is_empty()).then_some(contents),
                next_marker: next_marker,
            },
            input,
            l,
            page
        )))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let input = req.input;
        let l = key_listing!(input);
        if input.version_id_marker.is_some() && input.key_marker.is_none() {
            return Err(invalid_argument(
                "A version-id marker cannot be specified without a key marker.",
            ));
        }
        // One version per key: every version of the marker's key comes before "null".
        let after = nonempty(input.key_marker.clone());
        let page = self.list(&input.bucket, &l, input.delimiter.as_ref(), after)?;
        let enc = &l.enc;
        let versions: Vec<ObjectVersion> = page
            .objects
            .iter()
            .map(|o| ObjectVersion {
                key: Some(enc.s(&o.key)),
                size: Some(o.size as i64),
                e_tag: Some(ETag::Strong(o.etag.clone())),
                last_modified: Some(util::timestamp(o.last_modified)),
                is_latest: Some(true),
                version_id: Some("null".to_string()),
                owner: Some(Self::owner()),
                storage_class: Some(standard_class()),
                ..ObjectVersion::default()
            })
            .collect();
        let last_is_object = page
            .next_after
            .as_ref()
            .is_some_and(|n| page.objects.last().is_some_and(|o| &o.key == n));
        Ok(S3Response::new(listing_output!(
            ListObjectVersionsOutput {
                key_marker: Some(enc.s(input.key_marker.as_deref().unwrap_or_default())),
                version_id_marker: Some(input.version_id_marker.clone().unwrap_or_default()),
                next_key_marker: next_marker(&page, enc),
                next_version_id_marker: (page.truncated && last_is_object)
                    .then(|| "null".to_string()),
                versions: (!versions.is_empty()).then_some(versions),
                delete_markers: None,
            },
            input,
            l,
            page
        )))
    }

    // ---- multipart ----

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let S3Request { input, headers, .. } = req;
        refuse_unsupported(
            input.server_side_encryption.as_ref(),
            input.sse_customer_key.as_ref(),
            input.ssekms_key_id.as_ref(),
            object_lock_requested!(input),
        )?;
        let mechanism = self.mechanism(&headers, input.storage_class.as_ref())?;
        let mut options = put_options(object_fields!(input), mechanism)?;
        let algorithm = match input.checksum_algorithm.as_ref() {
            None => None,
            Some(a) => Some(Algorithm::parse(a.as_str()).ok_or_else(|| {
                invalid_request("Value for x-amz-checksum-algorithm header is invalid.")
            })?),
        };
        let kind = input
            .checksum_type
            .as_ref()
            .map(|t| t.as_str().to_ascii_uppercase());
        let full_object = match (algorithm, kind.as_deref()) {
            (None, Some(_)) => {
                return Err(invalid_request(
                    "The x-amz-checksum-type header can only be used with the \
                     x-amz-checksum-algorithm header.",
                ))
            }
            (None, None) => false,
            (Some(a), None) => a == Algorithm::Crc64Nvme,
            (Some(a), Some(ChecksumType::FULL_OBJECT)) if a.combinable() => true,
            (Some(a), Some(ChecksumType::COMPOSITE)) if a != Algorithm::Crc64Nvme => false,
            (Some(a), Some(k)) => {
                return Err(invalid_request(format!(
                    "The {k} checksum type cannot be used with the {} checksum algorithm.",
                    a.name().to_ascii_lowercase()
                )))
            }
        };
        if let Some(a) = algorithm {
            let kind = checksum_type_name(full_object);
            options
                .checksums
                .insert(format!("{}:{kind}", a.name()), String::new());
        }
        let upload_id = self
            .store
            .create_multipart(&input.bucket, &input.key, options)
            .await
            .map_err(store_error)?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(upload_id),
            checksum_algorithm: input.checksum_algorithm,
            checksum_type: algorithm
                .map(|_| ChecksumType::from(checksum_type_name(full_object).to_string())),
            ..CreateMultipartUploadOutput::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let S3Request {
            input,
            headers,
            trailing_headers,
            ..
        } = req;
        if input.sse_customer_key.is_some() {
            return Err(not_implemented("server-side encryption is not supported"));
        }
        let number = part_number(input.part_number)?;
        let upload = self
            .store
            .upload_options(&input.bucket, &input.key, &input.upload_id)
            .map_err(store_error)?;
        let plan = checksum_plan!(
            input,
            upload_checksum(&upload).map(|(a, _)| a),
            &headers,
            trailing_headers.as_ref()
        );
        let incoming = Self::incoming(input.body, plan, trailing_headers);
        let options = PartOptions {
            content_md5: content_md5(input.content_md5.as_ref())?,
            checksums: incoming.checksums.clone(),
            checksums_at_end: incoming.at_end.clone(),
        };
        let info = self
            .store
            .upload_part(
                &input.bucket,
                &input.key,
                &input.upload_id,
                number,
                incoming.body,
                options,
            )
            .await
            .map_err(|e| incoming.outcome.error(e))?;
        let c = answered_checksums(&incoming.outcome, &incoming.checksums);
        Ok(S3Response::new(with_checksums!(
            UploadPartOutput {
                e_tag: Some(ETag::Strong(info.etag)),
            },
            c,
            untyped
        )))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let condition = write_condition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
        let listed = input
            .multipart_upload
            .as_ref()
            .and_then(|m| m.parts.as_ref())
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                err(
                    S3ErrorCode::MalformedXML,
                    "The XML you provided was not well-formed or did not validate against our \
                     published schema: a completion lists at least one part",
                )
            })?;
        let mut parts: Vec<(u32, String)> = Vec::with_capacity(listed.len());
        for p in listed {
            let n = p
                .part_number
                .ok_or_else(|| err(S3ErrorCode::MalformedXML, "a part without a PartNumber"))?;
            let e = p
                .e_tag
                .as_ref()
                .ok_or_else(|| err(S3ErrorCode::MalformedXML, "a part without an ETag"))?;
            parts.push((part_number(n)?, e.value().to_string()));
        }
        let checksums = match self
            .store
            .upload_options(&input.bucket, &input.key, &input.upload_id)
        {
            Ok(upload) => self.compose_checksums(&input, listed, &parts, &upload)?,
            // Completed already (a repeat returns the object) or no such upload: the store
            // answers either.
            Err(StoreError::NoSuchUpload(_)) => BTreeMap::new(),
            Err(e) => return Err(store_error(e)),
        };
        let info = self
            .store
            .complete_multipart(
                &input.bucket,
                &input.key,
                &input.upload_id,
                &parts,
                checksums,
                condition.as_ref(),
            )
            .await
            .map_err(store_error)?;
        let c = ChecksumFields::from_map(&info.checksums);
        Ok(S3Response::new(with_checksums!(
            CompleteMultipartUploadOutput {
                bucket: Some(input.bucket.clone()),
                key: Some(input.key.clone()),
                e_tag: Some(ETag::Strong(info.etag)),
                location: Some(format!("/{}/{}", input.bucket, input.key)),
            },
            c
        )))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        self.store
            .abort_multipart(&input.bucket, &input.key, &input.upload_id)
            .await
            .map_err(store_error)?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let upload = self
            .store
            .upload_options(&input.bucket, &input.key, &input.upload_id)
            .map_err(store_error)?;
        let all = self
            .store
            .list_parts(&input.bucket, &input.key, &input.upload_id)
            .map_err(store_error)?;
        let max = page_size(input.max_parts, "max-parts")?;
        let marker = input.part_number_marker.unwrap_or(0).max(0) as u32;
        let rest: Vec<_> = all.into_iter().filter(|p| p.number > marker).collect();
        let truncated = rest.len() > max;
        let page: Vec<_> = rest.into_iter().take(max).collect();
        let next = page.last().map(|p| p.number as i32);
        let parts = page
            .into_iter()
            .map(|p| {
                let c = ChecksumFields::from_map(&p.checksums);
                with_checksums!(
                    Part {
                        part_number: Some(p.number as i32),
                        e_tag: Some(ETag::Strong(p.etag)),
                        size: Some(p.size as i64),
                        last_modified: Some(util::timestamp(p.last_modified)),
                    },
                    c,
                    untyped
                )
            })
            .collect::<Vec<_>>();
        let checksum = upload_checksum(&upload);
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: if truncated { next } else { None },
            max_parts: Some(max as i32),
            is_truncated: Some(truncated),
            parts: (!parts.is_empty()).then_some(parts),
            owner: Some(Self::owner()),
            initiator: Some(initiator()),
            storage_class: Some(standard_class()),
            checksum_algorithm: checksum
                .map(|(a, _)| ChecksumAlgorithm::from(a.name().to_string())),
            checksum_type: checksum
                .map(|(_, full)| ChecksumType::from(checksum_type_name(full).to_string())),
            ..ListPartsOutput::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        let enc = Enc(url_encoded(input.encoding_type.as_ref())?);
        let prefix = input.prefix.clone().unwrap_or_default();
        let delimiter = nonempty(input.delimiter.clone());
        let max = page_size(input.max_uploads, "max-uploads")?;
        let all = self
            .store
            .list_uploads(&input.bucket, &prefix)
            .map_err(store_error)?;
        let rollup = |key: &str| -> Option<String> {
            let d = delimiter.as_deref()?;
            let rest = key.get(prefix.len()..)?;
            rest.find(d)
                .map(|i| key[..prefix.len() + i + d.len()].to_string())
        };
        // Skip to after the markers.
        let key_marker = nonempty(input.key_marker.clone());
        let id_marker = input
            .upload_id_marker
            .clone()
            .filter(|_| key_marker.is_some());
        let mut passed_id_marker = false;
        let mut uploads = Vec::new();
        let mut prefixes: Vec<String> = Vec::new();
        let mut truncated = false;
        let mut last: Option<(String, Option<String>)> = None;
        for u in all {
            if let Some(m) = &key_marker {
                if rollup(m).as_deref() == Some(m.as_str()) && u.key.starts_with(m.as_str()) {
                    continue;
                }
                if u.key < *m {
                    continue;
                }
                // The marker's own key: only its uploads after the upload-id marker.
                if u.key == *m && !passed_id_marker {
                    if id_marker.as_deref() == Some(u.upload_id.as_str()) {
                        passed_id_marker = true;
                    }
                    continue;
                }
            }
            let cp = rollup(&u.key);
            if let Some(cp) = &cp {
                if prefixes.last() == Some(cp) {
                    continue;
                }
            }
            if uploads.len() + prefixes.len() >= max {
                truncated = true;
                break;
            }
            match cp {
                Some(cp) => {
                    last = Some((cp.clone(), None));
                    prefixes.push(cp);
                }
                None => {
                    last = Some((u.key.clone(), Some(u.upload_id.clone())));
                    uploads.push(MultipartUpload {
                        key: Some(enc.s(&u.key)),
                        upload_id: Some(u.upload_id),
                        initiated: Some(util::timestamp(u.initiated)),
                        initiator: Some(initiator()),
                        owner: Some(Self::owner()),
                        storage_class: Some(standard_class()),
                        ..MultipartUpload::default()
                    });
                }
            }
        }
        let (next_key, next_id) = match (truncated, last) {
            (true, Some((k, id))) => (Some(enc.s(&k)), id),
            _ => (None, None),
        };
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: Some(enc.s(&prefix)),
            delimiter: enc.o(input.delimiter.as_ref()),
            key_marker: Some(enc.s(input.key_marker.as_deref().unwrap_or_default())),
            upload_id_marker: Some(input.upload_id_marker.unwrap_or_default()),
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: next_key,
            next_upload_id_marker: next_id,
            common_prefixes: common_prefixes(&prefixes, &enc),
            uploads: (!uploads.is_empty()).then_some(uploads),
            encoding_type: enc.kind(),
            request_charged: None,
        }))
    }
}

impl RailS3 {
    /// The object checksum a completion stores: composed from the parts' checksums of the
    /// upload's algorithm (those the store kept, else those the client lists), checked against
    /// what the client states for the whole object.
    fn compose_checksums(
        &self,
        input: &CompleteMultipartUploadInput,
        listed: &[CompletedPart],
        parts: &[(u32, String)],
        upload: &PutOptions,
    ) -> S3Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        let Some((alg, full)) = upload_checksum(upload) else {
            return Ok(out);
        };
        let stored = self
            .store
            .list_parts(&input.bucket, &input.key, &input.upload_id)
            .map_err(store_error)?;
        let mut raws = Vec::with_capacity(parts.len());
        for ((n, _), listed) in parts.iter().zip(listed) {
            let Some(part) = stored.iter().find(|p| p.number == *n) else {
                // The store refuses the completion with InvalidPart.
                return Ok(out);
            };
            let client = checksum_of!(listed, alg);
            let client = match client {
                Some(v) => Some(checksum::decode_value(alg, v).ok_or_else(|| {
                    err(
                        S3ErrorCode::InvalidPart,
                        format!("part {n}: the {} checksum is not valid", alg.name()),
                    )
                })?),
                None => None,
            };
            let kept = checksum::stored(&part.checksums, alg)
                .and_then(|v| checksum::decode_value(alg, &v));
            let raw = match (kept, client) {
                (Some(k), Some(c)) if k != c => {
                    return Err(err(
                        S3ErrorCode::InvalidPart,
                        format!(
                            "part {n}: the {} checksum listed does not match the part's",
                            alg.name()
                        ),
                    ))
                }
                (Some(k), _) => k,
                (None, Some(c)) => c,
                (None, None) => {
                    tracing::debug!(part = n, "a part has no checksum; the object gets none");
                    return Ok(out);
                }
            };
            raws.push((raw, part.size));
        }
        if let Some(size) = input.mpu_object_size {
            let total: u64 = raws.iter().map(|(_, s)| s).sum();
            if u64::try_from(size).ok() != Some(total) {
                return Err(invalid_request(format!(
                    "The provided x-amz-mp-object-size ({size}) does not match the parts' size \
                     ({total})."
                )));
            }
        }
        let Some(value) = checksum::compose(alg, full, &raws) else {
            return Ok(out);
        };
        let stated = checksum_of!(input, alg);
        if let Some(s) = stated {
            let base = |v: &str| v.split('-').next().unwrap_or_default().trim().to_string();
            if base(s) != base(&value) {
                return Err(err(
                    S3ErrorCode::BadDigest,
                    format!(
                        "The {} you specified for the object did not match the calculated \
                         checksum.",
                        alg.name()
                    ),
                ));
            }
        }
        out.insert(alg.name().to_string(), value);
        Ok(out)
    }
}
