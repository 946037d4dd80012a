//! Who may do what, checked before an operation reads its input: the bucket's policy (an
//! explicit Deny refuses even the owner; unsigned requests need an Allow to everyone, see
//! `policy`), and a request signed for another region is refused as AWS refuses it, naming
//! the region this server expects so that clients can sign again for it.

use http::{HeaderMap, HeaderValue, StatusCode};
use s3s::access::{S3Access, S3AccessContext};
use s3s::{S3Error, S3ErrorCode, S3Result};

/// The header AWS names a bucket's region in; SDKs read it to retry in the right region.
const BUCKET_REGION_HEADER: &str = "x-amz-bucket-region";

/// The access check of the one-user server.
pub(crate) struct Access {
    pub store: railstore_store::Store,
    pub region: String,
}

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let signed = cx.credentials().is_some();
        let source = cx
            .extensions_mut()
            .get::<crate::server::PeerAddr>()
            .map(|p| p.0.ip());
        let request = crate::policy::Request {
            headers: cx.headers(),
            query: cx.uri().query().unwrap_or_default(),
            source,
        };
        crate::policy::check(
            &self.store,
            signed,
            cx.s3_op().name(),
            cx.s3_path(),
            &request,
        )?;
        if !signed {
            return Ok(());
        }
        let query = cx.uri().query().unwrap_or_default();
        match signed_region(cx.headers(), query) {
            Some((region, presigned)) if region != self.region => {
                Err(wrong_region(&region, &self.region, presigned))
            }
            _ => Ok(()),
        }
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
