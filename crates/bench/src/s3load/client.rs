//! The load generator's S3 client: HTTP/1.1 over hyper, one keep-alive connection per client
//! (driven inside the caller's task, no pool), path-style URLs, AWS Signature V4 with
//! `UNSIGNED-PAYLOAD`.

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use hmac::{KeyInit, Mac};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;

/// An S3 endpoint and the key pair to sign with.
#[derive(Clone)]
pub struct Endpoint {
    /// `http://host:port` (no TLS).
    pub url: String,
    /// Region requests are signed for.
    pub region: String,
    /// Access key id.
    pub access_key: String,
    /// Secret key.
    pub secret_key: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .finish()
    }
}

/// An endpoint resolved to an address, shared by every client.
pub struct Resolved {
    addr: SocketAddr,
    host: http::HeaderValue,
    region: String,
    access_key: String,
    secret_key: String,
}

impl Endpoint {
    pub(super) async fn resolve(&self) -> Result<Arc<Resolved>> {
        let rest = self
            .url
            .strip_prefix("http://")
            .with_context(|| format!("{}: only http:// endpoints are supported", self.url))?;
        let authority = rest.split('/').next().unwrap_or_default();
        ensure!(!authority.is_empty(), "{}: no host", self.url);
        let with_port = if authority.rsplit_once(':').is_some_and(|(_, p)| {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !authority.ends_with(']')
        }) {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addr = tokio::net::lookup_host(&with_port)
            .await
            .with_context(|| format!("resolving {with_port}"))?
            .next()
            .with_context(|| format!("{with_port} resolves to no address"))?;
        ensure!(!self.access_key.is_empty(), "an access key is required");
        ensure!(!self.secret_key.is_empty(), "a secret key is required");
        Ok(Arc::new(Resolved {
            addr,
            host: http::HeaderValue::from_str(authority)
                .with_context(|| format!("{authority:?} is not a valid Host"))?,
            region: self.region.clone(),
            access_key: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
        }))
    }
}

type Hmac256 = hmac::Hmac<Sha256>;

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m = <Hmac256 as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    let mut out = [0u8; 32];
    out.copy_from_slice(&m.finalize().into_bytes());
    out
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Appends `s` percent-encoded as SigV4 wants: unreserved characters as they are, `/` kept
/// when `keep_slash` (paths), everything else `%XX` in upper case.
pub(super) fn uri_encode(out: &mut String, s: &str, keep_slash: bool) {
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else if b == b'/' && keep_slash {
            out.push('/');
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// (year, month, day) of a day count since 1970-01-01 (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `YYYYMMDDTHHMMSSZ` of a Unix time in seconds.
pub(super) fn amz_date(unix_s: u64) -> String {
    let (y, mo, d) = civil_from_days((unix_s / 86_400) as i64);
    let rem = unix_s % 86_400;
    format!(
        "{y:04}{mo:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// SigV4 header signing with the signing key cached per day.
pub(super) struct Signer {
    access_key: String,
    secret_key: String,
    region: String,
    /// (unix second, its x-amz-date).
    now: (u64, String),
    /// (YYYYMMDD, signing key).
    key: (String, [u8; 32]),
}

impl Signer {
    pub(super) fn new(access_key: &str, secret_key: &str, region: &str) -> Signer {
        Signer {
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
            region: region.to_string(),
            now: (u64::MAX, String::new()),
            key: (String::new(), [0; 32]),
        }
    }

    pub(super) fn date_now(&mut self) -> String {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if self.now.0 != secs {
            self.now = (secs, amz_date(secs));
        }
        self.now.1.clone()
    }

    /// The `Authorization` value for a request whose canonical headers are `headers` (names
    /// in lower case, sorted, values trimmed; `host`, `x-amz-content-sha256` and
    /// `x-amz-date` among them).
    pub(super) fn authorization(
        &mut self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        payload_hash: &str,
        amz_date: &str,
    ) -> String {
        let day = &amz_date[..8];
        let mut canonical = String::with_capacity(256);
        canonical.push_str(method);
        canonical.push('\n');
        uri_encode(&mut canonical, path, true);
        canonical.push('\n');
        let mut q: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| {
                let (mut a, mut b) = (String::new(), String::new());
                uri_encode(&mut a, k, false);
                uri_encode(&mut b, v, false);
                (a, b)
            })
            .collect();
        q.sort();
        for (i, (k, v)) in q.iter().enumerate() {
            if i > 0 {
                canonical.push('&');
            }
            let _ = write!(canonical, "{k}={v}");
        }
        canonical.push('\n');
        for (name, value) in headers {
            let _ = writeln!(canonical, "{name}:{}", value.trim());
        }
        canonical.push('\n');
        let signed: Vec<&str> = headers.iter().map(|h| h.0).collect();
        let signed = signed.join(";");
        canonical.push_str(&signed);
        canonical.push('\n');
        canonical.push_str(payload_hash);
        let scope = format!("{day}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        if self.key.0 != day {
            let k_date = hmac(
                format!("AWS4{}", self.secret_key).as_bytes(),
                day.as_bytes(),
            );
            let k_region = hmac(&k_date, self.region.as_bytes());
            let k_service = hmac(&k_region, b"s3");
            self.key = (day.to_string(), hmac(&k_service, b"aws4_request"));
        }
        let signature = hex(&hmac(&self.key.1, to_sign.as_bytes()));
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
            self.access_key
        )
    }
}

type Conn = (
    SendRequest<Full<Bytes>>,
    Pin<Box<Connection<TokioIo<TcpStream>, Full<Bytes>>>>,
);

/// What one request brought back.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    /// Body bytes received.
    pub(super) bytes: u64,
    /// Time from sending to the response head, ns.
    pub(super) ttfb_ns: u64,
    /// The start of the body of a non-2xx answer.
    pub(super) error_body: String,
}

/// One client's connection: opened on first use, reopened after a transport error.
pub struct S3Client {
    ep: Arc<Resolved>,
    signer: Signer,
    conn: Option<Conn>,
}

const PAYLOAD_UNSIGNED: &str = "UNSIGNED-PAYLOAD";
const ERROR_BODY_BYTES_MAX: usize = 2048;
/// How long an answer may still take to arrive once the server has closed the connection.
const CLOSED_ANSWER_WAIT: Duration = Duration::from_secs(1);

impl S3Client {
    pub(super) fn new(ep: Arc<Resolved>) -> S3Client {
        let signer = Signer::new(&ep.access_key, &ep.secret_key, &ep.region);
        S3Client {
            ep,
            signer,
            conn: None,
        }
    }

    async fn connect(&self) -> Result<Conn, String> {
        let stream = TcpStream::connect(self.ep.addr)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.ep.addr))?;
        let _ = stream.set_nodelay(true);
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake with {}: {e}", self.ep.addr))?;
        Ok((send, Box::pin(conn)))
    }

    /// Sends one signed request and reads the whole answer (counting body bytes, keeping the
    /// start of an error body). The connection is driven in this task.
    pub(super) async fn request(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Reply, String> {
        if self.conn.is_none() {
            self.conn = Some(self.connect().await?);
        }
        let date = self.signer.date_now();
        let host = self.ep.host.to_str().unwrap_or_default().to_string();
        let auth = self.signer.authorization(
            method.as_str(),
            path,
            &[],
            &[
                ("host", &host),
                ("x-amz-content-sha256", PAYLOAD_UNSIGNED),
                ("x-amz-date", &date),
            ],
            PAYLOAD_UNSIGNED,
            &date,
        );
        let mut uri = String::with_capacity(path.len() + 8);
        uri_encode(&mut uri, path, true);
        let mut req = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(http::header::HOST, self.ep.host.clone())
            .header("x-amz-date", date)
            .header("x-amz-content-sha256", PAYLOAD_UNSIGNED)
            .header(http::header::AUTHORIZATION, auth);
        if method == Method::PUT || !body.is_empty() {
            req = req.header(http::header::CONTENT_LENGTH, body.len());
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| format!("building the request: {e}"))?;
        let (result, closed) = {
            let (send, conn) = self.conn.as_mut().expect("connected above");
            let work = async {
                send.ready()
                    .await
                    .map_err(|e| format!("connection not ready: {e}"))?;
                let t0 = Instant::now();
                let resp = send
                    .send_request(req)
                    .await
                    .map_err(|e| format!("{method} {path}: {e}"))?;
                let ttfb_ns = t0.elapsed().as_nanos() as u64;
                let status = resp.status();
                let mut body = resp.into_body();
                let mut bytes = 0u64;
                let mut error_body = Vec::new();
                while let Some(frame) = body.frame().await {
                    let frame =
                        frame.map_err(|e| format!("{method} {path}: reading the body: {e}"))?;
                    if let Ok(data) = frame.into_data() {
                        bytes += data.len() as u64;
                        if !status.is_success() && error_body.len() < ERROR_BODY_BYTES_MAX {
                            let room = ERROR_BODY_BYTES_MAX - error_body.len();
                            error_body.extend_from_slice(&data[..data.len().min(room)]);
                        }
                    }
                }
                Ok(Reply {
                    status,
                    bytes,
                    ttfb_ns,
                    error_body: String::from_utf8_lossy(&error_body).into_owned(),
                })
            };
            tokio::pin!(work);
            let mut closed = false;
            let result = tokio::select! {
                biased;
                r = &mut work => r,
                c = conn.as_mut() => match c {
                    // A server that closes after its answer (`Connection: close`): the
                    // answer may be complete already.
                    Ok(()) => {
                        closed = true;
                        match tokio::time::timeout(CLOSED_ANSWER_WAIT, &mut work).await {
                            Ok(r) => r,
                            Err(_) => Err(format!(
                                "{method} {path}: the server closed the connection"
                            )),
                        }
                    }
                    Err(e) => Err(format!("{method} {path}: connection failed: {e}")),
                },
            };
            (result, closed)
        };
        if result.is_err() || closed {
            self.conn = None;
        }
        result
    }
}

pub(super) fn status_error(method: &str, path: &str, r: &Reply) -> String {
    let body = r.error_body.trim();
    let code = body
        .split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map(|(c, _)| c);
    let message = body
        .split_once("<Message>")
        .and_then(|(_, rest)| rest.split_once("</Message>"))
        .map(|(m, _)| m);
    match (code, message) {
        (Some(c), Some(m)) => format!("{method} {path}: {} {c}: {m}", r.status),
        (Some(c), None) => format!("{method} {path}: {} {c}", r.status),
        _ if body.is_empty() => format!("{method} {path}: {}", r.status),
        _ => format!("{method} {path}: {}: {body}", r.status),
    }
}

impl S3Client {
    /// Sends `method` on `/{bucket}/{key}` (`key` empty: the bucket) with `body`; returns the
    /// answer's body length, or the error a non-2xx answer or the transport gave.
    pub(super) async fn call(
        &mut self,
        method: Method,
        bucket: &str,
        key: &str,
        body: Bytes,
    ) -> Result<u64, String> {
        let path = if key.is_empty() {
            format!("/{bucket}")
        } else {
            format!("/{bucket}/{key}")
        };
        let r = self.request(method.clone(), &path, body).await?;
        if !r.status.is_success() {
            return Err(status_error(method.as_str(), &path, &r));
        }
        Ok(r.bytes)
    }
}
