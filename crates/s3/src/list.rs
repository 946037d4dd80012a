//! Listings of keys: ListObjects (V1, V2), and the paging and encoding that the multipart
//! listings and ListObjectVersions (`versioning.rs`) share.

use crate::acl;
use crate::errors::{invalid_argument, store_error};
use crate::fields::standard_class;
use crate::service::RailS3;
use crate::users::Users;
use crate::util::{self, token_decode, token_encode, url_encode};
use railstore_store::{ListPage, ListQuery};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

/// Most keys (or uploads, parts, buckets) one listing page returns, as S3.
const PAGE_MAX: usize = 1000;

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

pub(crate) use {key_listing, listing_output};

/// A listing's page size from its `max-keys` (or `max-parts`, `max-uploads`: `name`).
pub(crate) fn page_size(v: Option<i32>, name: &str) -> S3Result<usize> {
    match v {
        None => Ok(PAGE_MAX),
        Some(n) if n < 0 => Err(invalid_argument(format!("{name} must not be negative"))),
        Some(n) => Ok((n as usize).min(PAGE_MAX)),
    }
}

pub(crate) fn url_encoded(e: Option<&EncodingType>) -> S3Result<bool> {
    match e.map(EncodingType::as_str) {
        None => Ok(false),
        Some(s) if s.eq_ignore_ascii_case(EncodingType::URL) => Ok(true),
        Some(_) => Err(invalid_argument(
            "Invalid Encoding Method specified in Request",
        )),
    }
}

pub(crate) fn nonempty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// Encodes listing text when the request asked for `encoding-type=url`.
pub(crate) struct Enc(pub(crate) bool);

impl Enc {
    pub(crate) fn s(&self, s: &str) -> String {
        if self.0 {
            url_encode(s)
        } else {
            s.to_string()
        }
    }

    pub(crate) fn o(&self, s: Option<&String>) -> Option<String> {
        s.map(|s| self.s(s))
    }

    pub(crate) fn kind(&self) -> Option<EncodingType> {
        self.0
            .then(|| EncodingType::from(EncodingType::URL.to_string()))
    }
}

pub(crate) fn common_prefixes(prefixes: &[String], enc: &Enc) -> Option<Vec<CommonPrefix>> {
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
pub(crate) struct KeyListing {
    pub(crate) enc: Enc,
    pub(crate) max: usize,
    pub(crate) prefix: String,
}

/// A ListObjects (V1 or V2) page's objects; `owner` where the request wants it.
/// The page's objects, with their owners when `owners` (the users and the bucket's owner) is
/// given.
pub(crate) fn listed_objects(
    page: &ListPage,
    enc: &Enc,
    owners: Option<(&Users, &str)>,
) -> Vec<Object> {
    page.objects
        .iter()
        .map(|o| Object {
            key: Some(enc.s(&o.key)),
            size: Some(o.size as i64),
            e_tag: Some(ETag::Strong(o.etag.clone())),
            last_modified: Some(util::timestamp(o.last_modified)),
            storage_class: Some(standard_class()),
            owner: owners.map(|(users, bucket_owner)| {
                acl::owner_in_acl(users, o.acl.as_deref(), bucket_owner)
            }),
            ..Object::default()
        })
        .collect()
}

/// Where a truncated page's next one starts, encoded for the response.
pub(crate) fn next_marker(page: &ListPage, enc: &Enc) -> Option<String> {
    page.truncated
        .then(|| page.next_after.as_ref().map(|m| enc.s(m)))
        .flatten()
}

/// A page of the bucket's keys after `after`, rolled up at `delimiter` (an empty one is
/// none).
pub(crate) fn list(
    s3: &RailS3,
    bucket: &str,
    l: &KeyListing,
    delimiter: Option<&String>,
    after: Option<String>,
) -> S3Result<ListPage> {
    if l.max == 0 {
        s3.store.head_bucket(bucket).map_err(store_error)?;
        return Ok(ListPage::default());
    }
    let q = ListQuery {
        prefix: l.prefix.clone(),
        delimiter: nonempty(delimiter.cloned()),
        after,
        max_keys: l.max,
    };
    s3.store.list_objects(bucket, &q).map_err(store_error)
}

pub(crate) async fn list_objects_v2(
    s3: &RailS3,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let input = req.input;
    let l = key_listing!(input);
    let after = match input.continuation_token.as_deref() {
        Some(t) => Some(
            token_decode(t)
                .ok_or_else(|| invalid_argument("The continuation token provided is incorrect"))?,
        ),
        None => nonempty(input.start_after.clone()),
    };
    let delimiter = nonempty(input.delimiter.clone());
    let page = list(s3, &input.bucket, &l, delimiter.as_ref(), after)?;
    let bucket_owner = acl::bucket_acl(&s3.store, &s3.users, &input.bucket)?.owner;
    let owners = input
        .fetch_owner
        .unwrap_or(false)
        .then_some((&s3.users, bucket_owner.as_str()));
    let contents = listed_objects(&page, &l.enc, owners);
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

pub(crate) async fn list_objects(
    s3: &RailS3,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let input = req.input;
    let l = key_listing!(input);
    let delimiter = nonempty(input.delimiter.clone());
    let after = nonempty(input.marker.clone());
    let page = list(s3, &input.bucket, &l, delimiter.as_ref(), after)?;
    let bucket_owner = acl::bucket_acl(&s3.store, &s3.users, &input.bucket)?.owner;
    let contents = listed_objects(&page, &l.enc, Some((&s3.users, &bucket_owner)));
    // S3 gives NextMarker only with a delimiter; without one the last key is the marker.
    let next_marker = next_marker(&page, &l.enc).filter(|_| delimiter.is_some());
    let mut output = listing_output!(
        ListObjectsOutput {
            marker: Some(l.enc.s(input.marker.as_deref().unwrap_or_default())),
            contents: (!contents.is_empty()).then_some(contents),
            next_marker: next_marker,
        },
        input,
        l,
        page
    );
    // Version 1 echoes its prefix as given, even with `encoding-type=url` (as S3 does, and as
    // the SDKs expect: they decode V1's keys and markers, not its prefix).
    output.prefix = Some(l.prefix.clone());
    Ok(S3Response::new(output))
}
