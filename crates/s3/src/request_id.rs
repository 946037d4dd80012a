//! Request ids: every answer carries `x-amz-request-id`, and an error's XML names the same id
//! in `<RequestId>`, as AWS does, so a client's report and the server's answer can be matched.

use http::{HeaderValue, Response};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::SystemTime;

static NEXT: AtomicU64 = AtomicU64::new(0);
static BASE: OnceLock<u64> = OnceLock::new();

/// A new id: 16 hex digits, distinct within the process and, seeded from the start time,
/// unlikely to repeat across restarts.
pub(crate) fn next() -> String {
    let base = *BASE.get_or_init(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:016X}",
        base.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    )
}

/// Puts `id` on an answer: the header always; in an XML error body that has no request id of
/// its own, a `<RequestId>` element (error bodies are small and already in memory).
pub(crate) fn stamp(resp: &mut Response<s3s::Body>, id: &str) {
    let Ok(value) = HeaderValue::from_str(id) else {
        return;
    };
    resp.headers_mut().insert("x-amz-request-id", value);
    if !(resp.status().is_client_error() || resp.status().is_server_error()) {
        return;
    }
    let Some(body) = resp.body().bytes() else {
        return;
    };
    let Some(text) = std::str::from_utf8(&body).ok() else {
        return;
    };
    if text.contains("<RequestId>") {
        return;
    }
    let Some(at) = text.rfind("</Error>") else {
        return;
    };
    let stamped = format!("{}<RequestId>{id}</RequestId>{}", &text[..at], &text[at..]);
    *resp.body_mut() = s3s::Body::from(stamped);
    // The length changed; hyper counts it again from the body.
    resp.headers_mut().remove(http::header::CONTENT_LENGTH);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Response<s3s::Body> {
        let mut r = Response::new(s3s::Body::from(body.to_string()));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        r.headers_mut()
            .insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        r
    }

    #[test]
    fn errors_name_the_id_of_their_header() {
        let (a, b) = (next(), next());
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        let mut r = answer(404, "<Error><Code>NoSuchKey</Code></Error>");
        stamp(&mut r, &a);
        assert_eq!(r.headers()["x-amz-request-id"], a.as_str());
        assert!(!r.headers().contains_key(http::header::CONTENT_LENGTH));
        let body = r.body().bytes().unwrap();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            format!("<Error><Code>NoSuchKey</Code><RequestId>{a}</RequestId></Error>")
        );
        // A success keeps its body; an error that names an id keeps it.
        let mut ok = answer(200, "<Error>not an error</Error>");
        stamp(&mut ok, &b);
        assert_eq!(ok.headers()["x-amz-request-id"], b.as_str());
        assert_eq!(
            &ok.body().bytes().unwrap()[..],
            b"<Error>not an error</Error>"
        );
        let named = "<Error><RequestId>X</RequestId></Error>";
        let mut e = answer(403, named);
        stamp(&mut e, &b);
        assert_eq!(&e.body().bytes().unwrap()[..], named.as_bytes());
    }
}
