//! Defences against hostile clients, applied before s3s sees a request: idle timeouts on
//! request bodies and on responses a client does not read, the browser-form POST that s3s
//! would buffer before authenticating, Signature Version 2, and the operator token.

use bytes::Bytes;
use http::{HeaderMap, Request};
use hyper::body::{Body, Frame, SizeHint};
use s3s::StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Text that marks a request body cut off for being idle; `checksum::classify` turns a body
/// error carrying it into S3's `RequestTimeout`, whatever s3s wrapped it in.
pub(crate) const BODY_IDLE_MARKER: &str = "RequestTimeout: the request body sent nothing for";

/// The request body stopped arriving for longer than the idle timeout.
#[derive(Debug, thiserror::Error)]
#[error("{BODY_IDLE_MARKER} {0:?}")]
pub(crate) struct BodyIdle(Duration);

/// A deadline that runs only while someone waits on the other side: armed at the first
/// `Pending` after progress, disarmed by progress.
struct IdleTimer {
    idle: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl IdleTimer {
    fn new(idle: Duration) -> IdleTimer {
        IdleTimer {
            idle,
            sleep: None,
            armed: false,
        }
    }

    fn progress(&mut self) {
        self.armed = false;
    }

    /// Called when the inner operation is `Pending`: true once the idle time has passed.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = Instant::now() + self.idle;
        if !self.armed {
            self.armed = true;
            match &mut self.sleep {
                Some(s) => s.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        let sleep = self.sleep.as_mut().expect("set when armed");
        sleep.as_mut().poll(cx).is_ready()
    }
}

/// A request body that fails with [`BodyIdle`] when the client sends nothing for the idle
/// time while the server waits for it. Time the server spends not reading (the store pushing
/// back) does not count.
pub(crate) struct IdleBody<B> {
    inner: B,
    timer: IdleTimer,
    timed_out: bool,
}

impl<B> IdleBody<B> {
    pub fn new(inner: B, idle: Duration) -> IdleBody<B> {
        IdleBody {
            inner,
            timer: IdleTimer::new(idle),
            timed_out: false,
        }
    }
}

impl<B> Body for IdleBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<StdError>,
{
    type Data = Bytes;
    type Error = StdError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
        let this = self.get_mut();
        if this.timed_out {
            return Poll::Ready(Some(Err(Box::new(BodyIdle(this.timer.idle)))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.timer.progress();
                Poll::Ready(r.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if this.timer.expired(cx) {
                    this.timed_out = true;
                    tracing::info!(
                        idle_ms = this.timer.idle.as_millis() as u64,
                        "a request body stopped arriving: cutting the connection"
                    );
                    Poll::Ready(Some(Err(Box::new(BodyIdle(this.timer.idle)))))
                } else {
                    Poll::Pending
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.timed_out && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection whose writes fail with `TimedOut` when the client reads nothing of a response
/// for the idle time (its receive window stays full), so a client that stops reading does not
/// keep its connection, and what the response holds, forever.
pub(crate) struct IdleWrites<T> {
    inner: T,
    timer: IdleTimer,
}

impl<T> IdleWrites<T> {
    pub fn new(inner: T, idle: Duration) -> IdleWrites<T> {
        IdleWrites {
            inner,
            timer: IdleTimer::new(idle),
        }
    }

    fn written<R>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match r {
            Poll::Ready(r) => {
                self.timer.progress();
                Poll::Ready(r)
            }
            Poll::Pending if self.timer.expired(cx) => {
                tracing::info!(
                    idle_ms = self.timer.idle.as_millis() as u64,
                    "a client stopped reading its response: cutting the connection"
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client read nothing of the response for the idle timeout",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleWrites<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleWrites<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.written(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.written(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.written(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Whether s3s would take the request as a browser-form POST (POST Object): s3s reads such a
/// form, and buffers its file, before it knows who sent it. This errs on the side of yes.
pub(crate) fn is_form_post<B>(req: &Request<B>) -> bool {
    req.method() == http::Method::POST
        && req
            .headers()
            .get_all(http::header::CONTENT_TYPE)
            .iter()
            .any(|v| {
                let v = String::from_utf8_lossy(v.as_bytes());
                let essence = v.split(';').next().unwrap_or_default().trim();
                essence.eq_ignore_ascii_case("multipart/form-data")
            })
}

/// Whether a request is signed with AWS Signature Version 2: an `Authorization: AWS key:sig`
/// header or a `Signature` query parameter (s3s checks these before Version 4, with a plain
/// comparison and, in the header form, no check of the date). This errs on the side of yes.
pub(crate) fn is_sigv2<B>(req: &Request<B>) -> bool {
    let header = req
        .headers()
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .any(|v| v.as_bytes().starts_with(b"AWS "));
    header
        || query_keys(req.uri().query().unwrap_or_default()).any(|k| {
            k.eq_ignore_ascii_case("Signature") || k.eq_ignore_ascii_case("AWSAccessKeyId")
        })
}

/// The longest a presigned URL may be valid, as AWS allows: a week.
pub(crate) const PRESIGNED_EXPIRES_MAX_SECS: u64 = 604_800;

/// Why a presigned (Version 4) URL's `X-Amz-Expires` is refused, if it is: AWS takes 1 second
/// to a week. (s3s takes any 32-bit count, a negative one as a malformed request.)
pub(crate) fn presigned_expiry_refusal<B>(req: &Request<B>) -> Option<String> {
    let query = req.uri().query().unwrap_or_default();
    let value = query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        percent_decode(k)
            .eq_ignore_ascii_case("X-Amz-Expires")
            .then(|| percent_decode(v))
    })?;
    match value.parse::<i64>() {
        Ok(n) if n >= 1 && n as u64 <= PRESIGNED_EXPIRES_MAX_SECS => None,
        Ok(n) if n > 0 => Some(format!(
            "X-Amz-Expires must be less than a week (in seconds) that is;              {PRESIGNED_EXPIRES_MAX_SECS}, not {n}"
        )),
        // The value is not echoed: the answer is XML, and it is the client's text.
        _ => Some("X-Amz-Expires must be a positive number of seconds".to_string()),
    }
}

/// The query's parameter names, percent-decoded (`+` is a space).
pub(crate) fn query_keys(query: &str) -> impl Iterator<Item = String> + '_ {
    query
        .split('&')
        .map(|kv| percent_decode(kv.split('=').next().unwrap_or_default()))
}

/// Percent-decodes a query component (`+` is a space).
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the request carries `Authorization: Bearer <token>` with this token (compared in
/// constant time for a given length).
pub(crate) fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .any(|v| match bearer(v.as_bytes()) {
            Some(given) => crate::util::constant_time_eq(given, token.as_bytes()),
            None => false,
        })
}

/// The credentials of an `Authorization: Bearer …` value.
pub(crate) fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"Bearer ")
        .then(|| rest.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presigned_urls_live_a_second_to_a_week() {
        let at = |q: &str| {
            let r = Request::builder()
                .uri(format!("/b/k?{q}"))
                .body(())
                .unwrap();
            presigned_expiry_refusal(&r)
        };
        assert_eq!(at("X-Amz-Expires=1"), None);
        assert_eq!(at("a=b&X-Amz-Expires=604800&c"), None);
        assert_eq!(
            at("X-Amz-Signature=x"),
            None,
            "no expiry, nothing to refuse"
        );
        for bad in ["604801", "609901", "0", "-7", "", "7d"] {
            let why = at(&format!("X-Amz-Expires={bad}")).expect(bad);
            assert!(why.contains("X-Amz-Expires"), "{why}");
        }
        assert!(at("x-amz-expires=-1").is_some(), "the name in any case");
    }

    #[test]
    fn sigv2_and_bearer_are_recognised() {
        let req = |uri: &str, auth: Option<&str>| {
            let mut b = Request::builder().uri(uri);
            if let Some(a) = auth {
                b = b.header("authorization", a);
            }
            b.body(()).unwrap()
        };
        assert!(is_sigv2(&req("/b/k", Some("AWS AKID:c2ln"))));
        assert!(is_sigv2(&req(
            "/b/k?AWSAccessKeyId=A&Expires=1&Signature=x",
            None
        )));
        assert!(is_sigv2(&req("/b/k?Sig%6Eature=x", None)));
        assert!(!is_sigv2(&req(
            "/b/k",
            Some("AWS4-HMAC-SHA256 Credential=A/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=x")
        )));
        assert!(!is_sigv2(&req("/b/k?X-Amz-Signature=x", None)));
        let h = req("/metrics", Some("Bearer  sesame ")).headers().clone();
        assert!(bearer_matches(&h, "sesame"));
        assert!(!bearer_matches(&h, "sesam"));
        assert!(!bearer_matches(&h, "sesamE"));
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("a+b%41"), "a bA");
    }
}
