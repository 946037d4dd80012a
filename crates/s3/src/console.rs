//! The web console (docs/admin.md): one static page, its script and its style, compiled into
//! the binary and served under `/admin/console/` on the S3 listener. The files hold no data
//! and need no token; the page asks for the admin token and reads everything it shows from
//! the admin API (`/admin/v1/status`, `/admin/v1/latency`) with it.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};

/// Where the console lives.
pub const PATH: &str = "/admin/console/";

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// The console's answer to `GET`/`HEAD path`, or `None` when the path is not one of its files
/// (the admin API answers it then).
pub fn asset(method: &Method, path: &str) -> Option<Response<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    let (body, content_type) = match path {
        "/admin/console" => {
            let mut resp = Response::new(Bytes::new());
            *resp.status_mut() = StatusCode::PERMANENT_REDIRECT;
            resp.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static(PATH));
            return Some(resp);
        }
        "/admin/console/" | "/admin/console/index.html" => (INDEX, "text/html; charset=utf-8"),
        "/admin/console/console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/admin/console/console.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return None,
    };
    let mut resp = Response::new(if method == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from_static(body.as_bytes())
    });
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    // Only its own files and the admin API: no inline script, no other origin, no framing.
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    Some(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_files_are_served_with_their_types_and_nothing_else_is() {
        let page = asset(&Method::GET, "/admin/console/").unwrap();
        assert_eq!(
            page.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert!(std::str::from_utf8(page.body())
            .unwrap()
            .contains("console.js"));
        let script = asset(&Method::GET, "/admin/console/console.js").unwrap();
        assert!(script.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/javascript"));
        let head = asset(&Method::HEAD, "/admin/console/console.css").unwrap();
        assert!(head.body().is_empty());
        let redirect = asset(&Method::GET, "/admin/console").unwrap();
        assert_eq!(redirect.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(redirect.headers()[header::LOCATION], PATH);
        assert!(asset(&Method::GET, "/admin/console/../v1/status").is_none());
        assert!(asset(&Method::GET, "/admin/v1/status").is_none());
        assert!(asset(&Method::POST, "/admin/console/").is_none());
    }
}
