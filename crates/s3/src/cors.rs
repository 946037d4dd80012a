//! CORS, for browsers as S3 clients: Put/Get/DeleteBucketCors, preflight `OPTIONS` requests
//! (answered by the router before s3s, unauthenticated, as browsers send them), and the CORS
//! headers on every response to a request that names an `Origin`, errors included.

use crate::errors::{err, invalid_request, no_configuration, store_error};
use crate::service::RailS3;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use railstore_store::Store;
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use serde::{Deserialize, Serialize};

/// The bucket setting that holds the rules.
const SETTING: &str = "cors";
const RULES_MAX: usize = 100;
const METHODS: [&str; 5] = ["GET", "PUT", "HEAD", "POST", "DELETE"];

/// One CORS rule as stored.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    origins: Vec<String>,
    methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    expose: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_age: Option<i32>,
}

impl Rule {
    fn allows(&self, origin: &str, method: &str) -> bool {
        self.origins.iter().any(|o| wildcard_match(o, origin))
            && self.methods.iter().any(|m| m == method)
    }

    /// Whether every header a preflight asks for is one of the rule's.
    fn allows_headers(&self, asked: &[String]) -> bool {
        asked.iter().all(|h| {
            self.headers
                .iter()
                .any(|a| wildcard_match(&a.to_ascii_lowercase(), &h.to_ascii_lowercase()))
        })
    }

    /// `Access-Control-Allow-Origin`: `*` for a rule open to every origin, else the origin.
    fn allowed_origin<'a>(&self, origin: &'a str) -> &'a str {
        if self.origins.iter().any(|o| o == "*") {
            "*"
        } else {
            origin
        }
    }
}

/// `pattern` with at most one `*` (any run of characters) against `s`, whole.
fn wildcard_match(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, tail)) => {
            s.len() >= head.len() + tail.len() && s.starts_with(head) && s.ends_with(tail)
        }
    }
}

fn rules(store: &Store, bucket: &str) -> Vec<Rule> {
    crate::fields::json_setting(store, bucket, SETTING).unwrap_or_default()
}

pub(crate) async fn put_bucket_cors(
    s3: &RailS3,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    let input = req.input;
    let given = &input.cors_configuration.cors_rules;
    if given.is_empty() || given.len() > RULES_MAX {
        return Err(err(
            S3ErrorCode::MalformedXML,
            format!("A CORS configuration has 1 to {RULES_MAX} rules"),
        ));
    }
    let mut stored = Vec::with_capacity(given.len());
    for r in given {
        if r.allowed_origins.is_empty() || r.allowed_methods.is_empty() {
            return Err(err(
                S3ErrorCode::MalformedXML,
                "A CORS rule needs an AllowedOrigin and an AllowedMethod",
            ));
        }
        if let Some(m) = r
            .allowed_methods
            .iter()
            .find(|m| !METHODS.contains(&m.as_str()))
        {
            return Err(invalid_request(format!(
                "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
            )));
        }
        let wildcards = |v: &[String]| v.iter().any(|o| o.matches('*').count() > 1);
        if wildcards(&r.allowed_origins) || wildcards(r.allowed_headers.as_deref().unwrap_or(&[])) {
            return Err(invalid_request(
                "An AllowedOrigin or AllowedHeader can have at most one * wildcard",
            ));
        }
        stored.push(Rule {
            id: r.id.clone(),
            origins: r.allowed_origins.clone(),
            methods: r.allowed_methods.clone(),
            headers: r.allowed_headers.clone().unwrap_or_default(),
            expose: r.expose_headers.clone().unwrap_or_default(),
            max_age: r.max_age_seconds,
        });
    }
    let text = serde_json::to_string(&stored).expect("rules serialise");
    s3.store
        .set_bucket_setting(&input.bucket, SETTING, Some(text))
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutBucketCorsOutput::default()))
}

pub(crate) async fn get_bucket_cors(
    s3: &RailS3,
    req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    s3.store
        .head_bucket(&req.input.bucket)
        .map_err(store_error)?;
    let stored = rules(&s3.store, &req.input.bucket);
    if stored.is_empty() {
        return Err(no_configuration(
            S3ErrorCode::NoSuchCORSConfiguration,
            "The CORS configuration does not exist",
        ));
    }
    let non_empty = |v: Vec<String>| (!v.is_empty()).then_some(v);
    let cors_rules = stored
        .into_iter()
        .map(|r| CORSRule {
            id: r.id,
            allowed_origins: r.origins,
            allowed_methods: r.methods,
            allowed_headers: non_empty(r.headers),
            expose_headers: non_empty(r.expose),
            max_age_seconds: r.max_age,
        })
        .collect();
    Ok(S3Response::new(GetBucketCorsOutput {
        cors_rules: Some(cors_rules),
    }))
}

pub(crate) async fn delete_bucket_cors(
    s3: &RailS3,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    s3.store
        .set_bucket_setting(&req.input.bucket, SETTING, None)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(DeleteBucketCorsOutput::default()))
}

/// A header's text, if it has any.
fn text<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

fn insert(h: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(HeaderName::from_static(name), v);
    }
}

/// The headers granting a matched request: origin, methods, exposed headers.
fn grant(h: &mut HeaderMap, rule: &Rule, origin: &str) {
    let allowed = rule.allowed_origin(origin);
    insert(h, "access-control-allow-origin", allowed);
    insert(h, "access-control-allow-methods", &rule.methods.join(", "));
    if !rule.expose.is_empty() {
        insert(h, "access-control-expose-headers", &rule.expose.join(", "));
    }
    if allowed != "*" {
        insert(h, "access-control-allow-credentials", "true");
    }
    h.append(http::header::VARY, HeaderValue::from_static("Origin"));
}

/// The answer to a preflight `OPTIONS` on `bucket` (none: the service root).
pub(crate) fn preflight(store: &Store, bucket: Option<&str>, req: &HeaderMap) -> Preflight {
    let Some(origin) = text(req, "origin") else {
        return Preflight::Refused(
            StatusCode::BAD_REQUEST,
            "Insufficient information. Origin request header needed.",
        );
    };
    let Some(method) = text(req, "access-control-request-method") else {
        return Preflight::Refused(
            StatusCode::BAD_REQUEST,
            "Invalid Access-Control-Request-Method header",
        );
    };
    let asked: Vec<String> = text(req, "access-control-request-headers")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect();
    let rules = bucket.map(|b| rules(store, b)).unwrap_or_default();
    let Some(rule) = rules
        .iter()
        .find(|r| r.allows(origin, method) && r.allows_headers(&asked))
    else {
        return Preflight::Refused(
            StatusCode::FORBIDDEN,
            "CORSResponse: This CORS request is not allowed. This is usually because the \
             evalution of Origin, request method / Access-Control-Request-Method or \
             Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
        );
    };
    let mut h = HeaderMap::new();
    grant(&mut h, rule, origin);
    if !asked.is_empty() {
        insert(&mut h, "access-control-allow-headers", &asked.join(", "));
    }
    if let Some(age) = rule.max_age {
        insert(&mut h, "access-control-max-age", &age.to_string());
    }
    Preflight::Allowed(h)
}

/// What a preflight gets.
pub(crate) enum Preflight {
    /// 200 with these headers.
    Allowed(HeaderMap),
    /// An error, without CORS headers.
    Refused(StatusCode, &'static str),
}

/// Adds the CORS headers a response to an ordinary request gets when its `Origin` (and
/// `Access-Control-Request-Method`, else its own method) match one of the bucket's rules.
pub(crate) fn decorate(
    store: &Store,
    bucket: Option<&str>,
    method: &Method,
    req: &HeaderMap,
    resp: &mut HeaderMap,
) {
    let (Some(bucket), Some(origin)) = (bucket, text(req, "origin")) else {
        return;
    };
    let method = text(req, "access-control-request-method").unwrap_or(method.as_str());
    if let Some(rule) = rules(store, bucket)
        .iter()
        .find(|r| r.allows(origin, method))
    {
        grant(resp, rule, origin);
    }
}

/// The bucket a request names: the host's first label under `domain` (virtual-hosted
/// style), else the path's first segment.
pub(crate) fn bucket_of(
    uri: &http::Uri,
    headers: &HeaderMap,
    domain: Option<&str>,
) -> Option<String> {
    if let (Some(domain), Some(host)) = (domain, text(headers, "host")) {
        let host = host.split(':').next().unwrap_or(host);
        if let Some(b) = host.strip_suffix(domain).and_then(|b| b.strip_suffix('.')) {
            return (!b.is_empty()).then(|| b.to_string());
        }
    }
    let first = uri.path().trim_start_matches('/').split('/').next()?;
    (!first.is_empty()).then(|| first.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_with_one_wildcard_anchored_at_both_ends() {
        for (pattern, s, want) in [
            ("*suffix", "foo.suffix", true),
            ("*suffix", "foo.suffix.get", false),
            ("start*end", "startend", true),
            ("start*end", "start12end", true),
            ("start*end", "0start12end", false),
            ("prefix*", "prefix", true),
            ("prefix*", "bla.prefix", false),
            ("*", "anything", true),
            ("http://a.example", "http://a.example", true),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(wildcard_match(pattern, s), want, "{pattern} {s}");
        }
    }
}
