//! `railstore bench s3`: a warp-like S3 load generator, with the store underneath measured in
//! the same run as the baseline.
//!
//! The S3 client is this module's own: HTTP/1.1 over hyper, one keep-alive connection per
//! client task (driven inside the task, no connection pool), path-style URLs, AWS Signature V4
//! in the `Authorization` header with `x-amz-content-sha256: UNSIGNED-PAYLOAD` (the body is
//! not hashed, as S3 allows over any transport and `s3s` accepts). Every non-2xx answer, every
//! transport error and every GET whose body is not the object's size counts as an error; the
//! first one is kept and printed.
//!
//! Workloads, each run for `--duration` (or `--ops` operations) after `--warmup`:
//! - `put`: every operation stores a new object (`<prefix>/put-<target>/<client>/<n>`);
//! - `get`: reads of `--objects` objects stored first (unmeasured), chosen at random;
//! - `mixed`: `--get-ratio` of the operations are such reads, the rest overwrite one of those
//!   objects.
//!
//! The baseline (`target` = `store`) runs the same workload with the same clients, sizes and
//! objects directly against [`Store`] in the process: no HTTP, no signing, no s3s. Each S3
//! row states its throughput as a percentage of the baseline's (`pct_of_store`), per
//! operation kind; with `--rounds N` the two alternate N times and the comparison uses the
//! totals. Every run also reports the process's CPU time per operation: with an in-process
//! server the clients, the HTTP stack and the store share the same cores, so on a machine
//! whose CPUs are the bottleneck the ratio of CPU per operation decides `pct_of_store`, and
//! where the devices are the bottleneck it does not. Separation buffers are drained before
//! every run so each starts from the same state. Only the binary can start an S3 server
//! (this crate sits beside `s3`), so it hands in the [`Endpoint`] and, for an in-process
//! server, the [`Store`].

use crate::meter::process_cpu_seconds;
use crate::plot::{human_bytes, parse_bytes, Chart, Series, XAxis};
use crate::progress::bar;
use anyhow::{bail, ensure, Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use hmac::{KeyInit, Mac};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;
use indicatif::ProgressBar;
use railstore_store::{body_from, PutOptions, Store};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;

mod session;
pub use session::Session;

// ---------------------------------------------------------------------------------------------
// Options

/// What the clients do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// New objects.
    Put,
    /// Reads of objects stored beforehand.
    Get,
    /// Reads (`--get-ratio`) and overwrites of objects stored beforehand.
    Mixed,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Put => "put",
            Workload::Get => "get",
            Workload::Mixed => "mixed",
        }
    }

    fn needs_objects(self) -> bool {
        self != Workload::Put
    }
}

/// The load of `railstore bench s3` (the binary adds where the server and store come from).
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Workloads, run in this order, a comma list: `put` (each operation a new object), `get`
    /// (random reads of `--objects` objects stored first, unmeasured), `mixed` (`--get-ratio`
    /// reads, the rest overwrites of those objects).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "put,get")]
    pub workload: Vec<Workload>,
    /// Object size (`4096`, `4KiB`, `1MiB`).
    #[arg(long, default_value = "1MiB")]
    pub size: String,
    /// Concurrent clients (tasks), each with its own connection.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Measured time per run (`10s`, `500ms`, `2m`; a bare number is seconds). Default 10 s
    /// (2 s with `--quick`).
    #[arg(long, conflicts_with = "ops")]
    pub duration: Option<String>,
    /// Measured operations per run, instead of a duration.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Unmeasured time at the start of each run. Default 1 s (none with `--quick`).
    #[arg(long)]
    pub warmup: Option<String>,
    /// Objects stored before `get` and `mixed` runs. Default 1000 (100 with `--quick`).
    #[arg(long)]
    pub objects: Option<u64>,
    /// Share of reads in `mixed`.
    #[arg(long, default_value_t = 0.7)]
    pub get_ratio: f64,
    /// Runs of each workload per target, S3 and store alternating (on a busy machine the
    /// comparison then sees the same disturbances on both sides).
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Bucket (created if missing).
    #[arg(long, default_value = "railstore-bench")]
    pub bucket: String,
    /// Skip the in-process store baseline.
    #[arg(long)]
    pub no_baseline: bool,
    /// Leave the objects on an external endpoint (by default they are deleted at the end).
    #[arg(long)]
    pub keep_objects: bool,
    /// Random seed (which objects are read, which operations a mixed run does).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the report as JSON: to stdout with a bare `--json` (the table then goes to
    /// stderr), or to the file named.
    #[arg(long, num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// Folder for results.json, results.csv, series.csv, summary.md and the plot.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the plot.
    #[arg(long)]
    pub no_plots: bool,
    /// A short run for tests and smoke checks: 2 s per run, no warmup, 100 objects.
    #[arg(long)]
    pub quick: bool,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

impl Default for LoadArgs {
    fn default() -> Self {
        LoadArgs {
            workload: vec![Workload::Put, Workload::Get],
            size: "1MiB".into(),
            clients: 16,
            duration: None,
            ops: None,
            warmup: None,
            objects: None,
            get_ratio: 0.7,
            rounds: 1,
            bucket: "railstore-bench".into(),
            no_baseline: false,
            keep_objects: false,
            seed: 1,
            json: None,
            out: None,
            no_plots: false,
            quick: false,
            quiet: true,
        }
    }
}

/// Parses `10s`, `1.5s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<f64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a duration like 10s, 500ms or 2m"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => bail!("unknown duration unit {other:?} in {s:?} (use ms, s, m or h)"),
    };
    let secs = v * mult;
    ensure!(
        secs.is_finite() && secs >= 0.0,
        "{s:?} is not a usable duration"
    );
    Ok(secs)
}

/// The options resolved: what every run does.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Workloads in order.
    pub workloads: Vec<Workload>,
    /// Object size in bytes.
    pub size_bytes: u64,
    /// Object size as written (`1MiB`).
    pub size: String,
    /// Client tasks.
    pub clients: usize,
    /// Measured seconds per run (unless `ops`).
    pub duration_s: Option<f64>,
    /// Measured operations per run.
    pub ops: Option<u64>,
    /// Unmeasured seconds at the start of each run.
    pub warmup_s: f64,
    /// Objects stored before `get` and `mixed`.
    pub objects: u64,
    /// Share of reads in `mixed`.
    pub get_ratio: f64,
    /// Runs of each workload per target.
    pub rounds: usize,
    /// Bucket.
    pub bucket: String,
    /// Key prefix of this invocation (random, so runs against one endpoint never collide).
    pub prefix: String,
    /// Seed.
    pub seed: u64,
}

impl LoadArgs {
    /// Checks and resolves the options.
    pub fn plan(&self) -> Result<Plan> {
        ensure!(!self.workload.is_empty(), "no workload given");
        ensure!(self.clients > 0, "--clients must be at least 1");
        ensure!(self.rounds > 0, "--rounds must be at least 1");
        let size_bytes = parse_bytes(&self.size)?;
        ensure!(size_bytes > 0, "--size must be positive");
        ensure!(
            (0.0..=1.0).contains(&self.get_ratio),
            "--get-ratio must be between 0 and 1"
        );
        let duration_s = match (&self.duration, self.ops) {
            (Some(d), _) => Some(parse_duration(d)?),
            (None, Some(_)) => None,
            (None, None) => Some(if self.quick { 2.0 } else { 10.0 }),
        };
        if let Some(d) = duration_s {
            ensure!(d > 0.0, "--duration must be positive");
        }
        if let Some(n) = self.ops {
            ensure!(n > 0, "--ops must be positive");
        }
        let warmup_s = match &self.warmup {
            Some(w) => parse_duration(w)?,
            None if self.quick => 0.0,
            None => 1.0,
        };
        let objects = self.objects.unwrap_or(if self.quick { 100 } else { 1000 });
        ensure!(
            objects > 0 || !self.workload.iter().any(|w| w.needs_objects()),
            "--objects must be positive for get and mixed"
        );
        railstore_store::check_bucket_name(&self.bucket)
            .map_err(|e| anyhow::anyhow!("--bucket: {e}"))?;
        Ok(Plan {
            workloads: self.workload.clone(),
            size_bytes,
            size: human_bytes(size_bytes),
            clients: self.clients,
            duration_s,
            ops: self.ops,
            warmup_s,
            objects,
            get_ratio: self.get_ratio,
            rounds: self.rounds,
            bucket: self.bucket.clone(),
            prefix: format!("s3bench-{:08x}", rand::thread_rng().gen::<u32>()),
            seed: self.seed,
        })
    }

    /// Whether the human-readable output goes to stderr (JSON goes to stdout).
    fn human_to_stderr(&self) -> bool {
        self.json.as_deref() == Some(Path::new("-"))
    }

    fn say(&self, line: &str) {
        if self.human_to_stderr() {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The S3 client

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
struct Resolved {
    addr: SocketAddr,
    host: http::HeaderValue,
    region: String,
    access_key: String,
    secret_key: String,
}

impl Endpoint {
    async fn resolve(&self) -> Result<Arc<Resolved>> {
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
fn uri_encode(out: &mut String, s: &str, keep_slash: bool) {
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
fn amz_date(unix_s: u64) -> String {
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
struct Signer {
    access_key: String,
    secret_key: String,
    region: String,
    /// (unix second, its x-amz-date).
    now: (u64, String),
    /// (YYYYMMDD, signing key).
    key: (String, [u8; 32]),
}

impl Signer {
    fn new(access_key: &str, secret_key: &str, region: &str) -> Signer {
        Signer {
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
            region: region.to_string(),
            now: (u64::MAX, String::new()),
            key: (String::new(), [0; 32]),
        }
    }

    fn date_now(&mut self) -> String {
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
    fn authorization(
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
struct Reply {
    status: StatusCode,
    /// Body bytes received.
    bytes: u64,
    /// Time from sending to the response head, ns.
    ttfb_ns: u64,
    /// The start of the body of a non-2xx answer.
    error_body: String,
}

/// One client's connection: opened on first use, reopened after a transport error.
struct S3Client {
    ep: Arc<Resolved>,
    signer: Signer,
    conn: Option<Conn>,
}

const PAYLOAD_UNSIGNED: &str = "UNSIGNED-PAYLOAD";
const ERROR_BODY_BYTES_MAX: usize = 2048;
/// How long an answer may still take to arrive once the server has closed the connection.
const CLOSED_ANSWER_WAIT: Duration = Duration::from_secs(1);

impl S3Client {
    fn new(ep: Arc<Resolved>) -> S3Client {
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
    async fn request(&mut self, method: Method, path: &str, body: Bytes) -> Result<Reply, String> {
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

fn status_error(method: &str, path: &str, r: &Reply) -> String {
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

// ---------------------------------------------------------------------------------------------
// Clients: S3 or the store itself

/// One operation done: body bytes moved and, for reads, the time to the first byte.
struct Done {
    bytes: u64,
    ttfb_ns: Option<u64>,
}

enum Client {
    S3(Box<S3Client>),
    Store(Store),
}

/// Where a run sends its operations.
#[derive(Clone)]
enum Target {
    S3(Arc<Resolved>),
    Store(Store),
}

impl Target {
    fn client(&self) -> Client {
        match self {
            Target::S3(ep) => Client::S3(Box::new(S3Client::new(ep.clone()))),
            Target::Store(s) => Client::Store(s.clone()),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Target::S3(_) => "s3",
            Target::Store(_) => "store",
        }
    }
}

impl Client {
    async fn put(&mut self, bucket: &str, key: &str, data: &Bytes) -> Result<Done, String> {
        match self {
            Client::S3(c) => {
                let path = format!("/{bucket}/{key}");
                let r = c.request(Method::PUT, &path, data.clone()).await?;
                if !r.status.is_success() {
                    return Err(status_error("PUT", &path, &r));
                }
                Ok(Done {
                    bytes: data.len() as u64,
                    ttfb_ns: None,
                })
            }
            Client::Store(s) => {
                s.put_object(bucket, key, body_from(data.clone()), PutOptions::default())
                    .await
                    .map_err(|e| format!("put {bucket}/{key}: {e}"))?;
                Ok(Done {
                    bytes: data.len() as u64,
                    ttfb_ns: None,
                })
            }
        }
    }

    async fn get(&mut self, bucket: &str, key: &str, size: u64) -> Result<Done, String> {
        let (bytes, ttfb_ns) = match self {
            Client::S3(c) => {
                let path = format!("/{bucket}/{key}");
                let r = c.request(Method::GET, &path, Bytes::new()).await?;
                if !r.status.is_success() {
                    return Err(status_error("GET", &path, &r));
                }
                (r.bytes, r.ttfb_ns)
            }
            Client::Store(s) => {
                use futures_util::StreamExt;
                let t0 = Instant::now();
                let mut got = s
                    .get_object(bucket, key, None)
                    .await
                    .map_err(|e| format!("get {bucket}/{key}: {e}"))?;
                let ttfb = t0.elapsed().as_nanos() as u64;
                let mut n = 0u64;
                while let Some(piece) = got.body.next().await {
                    n += piece
                        .map_err(|e| format!("get {bucket}/{key}: reading: {e}"))?
                        .len() as u64;
                }
                (n, ttfb)
            }
        };
        if bytes != size {
            return Err(format!(
                "get {bucket}/{key}: {bytes} bytes instead of {size}"
            ));
        }
        Ok(Done {
            bytes,
            ttfb_ns: Some(ttfb_ns),
        })
    }

    async fn delete(&mut self, bucket: &str, key: &str) -> Result<(), String> {
        match self {
            Client::S3(c) => {
                let path = format!("/{bucket}/{key}");
                let r = c.request(Method::DELETE, &path, Bytes::new()).await?;
                if !r.status.is_success() {
                    return Err(status_error("DELETE", &path, &r));
                }
            }
            Client::Store(s) => {
                s.delete_object(bucket, key)
                    .await
                    .map_err(|e| format!("delete {bucket}/{key}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Creates the bucket; one that exists already (ours) is fine.
    async fn create_bucket(&mut self, bucket: &str) -> Result<(), String> {
        match self {
            Client::S3(c) => {
                let path = format!("/{bucket}");
                let r = c.request(Method::PUT, &path, Bytes::new()).await?;
                if r.status.is_success()
                    || (r.status == StatusCode::CONFLICT
                        && r.error_body.contains("BucketAlreadyOwnedByYou"))
                {
                    Ok(())
                } else {
                    Err(status_error("PUT", &path, &r))
                }
            }
            Client::Store(s) => s
                .create_bucket(bucket)
                .await
                .map(|_| ())
                .map_err(|e| format!("creating bucket {bucket}: {e}")),
        }
    }
}

fn object_key(prefix: &str, i: u64) -> String {
    format!("{prefix}/obj/{i:08}")
}

fn put_key(prefix: &str, target: &str, round: usize, client: usize, seq: u64) -> String {
    format!("{prefix}/put-{target}-{round}/{client:03}/{seq:010}")
}

// ---------------------------------------------------------------------------------------------
// Running

const PUT: usize = 0;
const GET: usize = 1;
const KIND_NAMES: [&str; 2] = ["put", "get"];

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

/// (operations, bytes) of each kind.
type PerKind = [(u64, u64); 2];

/// What one client did in a run.
struct Tally {
    lat: [Histogram<u64>; 2],
    ttfb: [Histogram<u64>; 2],
    ops: [u64; 2],
    bytes: [u64; 2],
    errors: [u64; 2],
    /// Per second of the measured window.
    series: Vec<PerKind>,
    /// PUT keys this client made (`put` workload), for cleanup.
    put_keys: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            lat: [hist(), hist()],
            ttfb: [hist(), hist()],
            ops: [0; 2],
            bytes: [0; 2],
            errors: [0; 2],
            series: Vec::new(),
            put_keys: 0,
        }
    }

    fn add(&mut self, o: &Tally) {
        for k in 0..2 {
            self.lat[k].add(&o.lat[k]).ok();
            self.ttfb[k].add(&o.ttfb[k]).ok();
            self.ops[k] += o.ops[k];
            self.bytes[k] += o.bytes[k];
            self.errors[k] += o.errors[k];
        }
        if self.series.len() < o.series.len() {
            self.series.resize(o.series.len(), [(0, 0); 2]);
        }
        for (a, b) in self.series.iter_mut().zip(&o.series) {
            for k in 0..2 {
                a[k].0 += b[k].0;
                a[k].1 += b[k].1;
            }
        }
    }
}

/// What every client of a run shares.
struct RunCtx {
    workload: Workload,
    plan: Plan,
    data: Bytes,
    target: &'static str,
    round: usize,
    measure_start: Instant,
    deadline: Option<Instant>,
    tickets: AtomicU64,
    first_error: Mutex<Option<String>>,
    bar: ProgressBar,
}

impl RunCtx {
    fn error(&self, e: String) {
        let mut first = self.first_error.lock().expect("not poisoned");
        if first.is_none() {
            *first = Some(e);
        }
    }
}

async fn drive(ctx: Arc<RunCtx>, mut client: Client, index: usize) -> Tally {
    let mut t = Tally::new();
    let mut rng = ChaCha8Rng::seed_from_u64(
        ctx.plan
            .seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(index as u64 + 1),
    );
    let p = &ctx.plan;
    loop {
        let t0 = Instant::now();
        if ctx.deadline.is_some_and(|d| t0 >= d) {
            break;
        }
        let measured = t0 >= ctx.measure_start;
        if measured {
            if let Some(n) = p.ops {
                if ctx.tickets.fetch_add(1, Ordering::Relaxed) >= n {
                    break;
                }
            }
        }
        let kind = match ctx.workload {
            Workload::Put => PUT,
            Workload::Get => GET,
            Workload::Mixed => {
                if rng.gen::<f64>() < p.get_ratio {
                    GET
                } else {
                    PUT
                }
            }
        };
        let key = if ctx.workload == Workload::Put {
            t.put_keys += 1;
            put_key(&p.prefix, ctx.target, ctx.round, index, t.put_keys - 1)
        } else {
            object_key(&p.prefix, rng.gen_range(0..p.objects))
        };
        let r = if kind == PUT {
            client.put(&p.bucket, &key, &ctx.data).await
        } else {
            client.get(&p.bucket, &key, p.size_bytes).await
        };
        let t1 = Instant::now();
        match r {
            Err(e) => {
                t.errors[kind] += 1;
                ctx.error(e);
            }
            Ok(done) if measured => {
                let ns = (t1 - t0).as_nanos() as u64;
                t.lat[kind].saturating_record(ns.max(1));
                if let Some(f) = done.ttfb_ns {
                    t.ttfb[kind].saturating_record(f.max(1));
                }
                t.ops[kind] += 1;
                t.bytes[kind] += done.bytes;
                let sec = (t1 - ctx.measure_start).as_secs() as usize;
                if t.series.len() <= sec {
                    t.series.resize(sec + 1, [(0, 0); 2]);
                }
                t.series[sec][kind].0 += 1;
                t.series[sec][kind].1 += done.bytes;
                ctx.bar.inc(1);
            }
            Ok(_) => {}
        }
    }
    t
}

/// Latency percentiles of one operation kind, µs.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Option<Latency> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Latency {
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
            mean_us: h.mean() / 1000.0,
        })
    }
}

/// One operation kind of one run.
#[derive(Debug, Clone, Serialize)]
pub struct KindResult {
    /// `put` or `get`.
    pub kind: String,
    /// Measured operations.
    pub ops: u64,
    /// Body bytes moved.
    pub bytes: u64,
    /// Failed operations (warmup included).
    pub errors: u64,
    /// Operations per second.
    pub ops_per_s: f64,
    /// Body megabytes (10^6 B) per second.
    pub mb_per_s: f64,
    /// Body MiB per second.
    pub mib_per_s: f64,
    /// Request to last byte of the answer.
    pub latency: Option<Latency>,
    /// Request to the answer's head (S3) or to `get_object`'s return (store); reads only.
    pub ttfb: Option<Latency>,
    /// ops_per_s as a percentage of the store baseline's same kind in the same workload and
    /// round (S3 rows with a baseline only).
    pub pct_of_store: Option<f64>,
}

/// One second of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// End of the interval, seconds since the measured window began.
    pub t_s: f64,
    /// Operations per second in it.
    pub ops_per_s: f64,
    /// Megabytes (10^6 B) per second in it.
    pub mb_per_s: f64,
    /// PUTs completed in it.
    pub puts: u64,
    /// GETs completed in it.
    pub gets: u64,
}

/// One workload against one target.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// `s3` (through HTTP) or `store` (the in-process baseline).
    pub target: String,
    /// The workload.
    pub workload: Workload,
    /// Which of `--rounds` (from 0).
    pub round: usize,
    /// Measured seconds: from the end of the warmup until the last client finished.
    pub elapsed_s: f64,
    /// Measured operations.
    pub ops: u64,
    /// Body bytes moved.
    pub bytes: u64,
    /// Operations per second.
    pub ops_per_s: f64,
    /// Megabytes (10^6 B) per second.
    pub mb_per_s: f64,
    /// Failed operations (warmup included).
    pub errors: u64,
    /// The first failure.
    pub first_error: Option<String>,
    /// Process CPU seconds (user + system, all threads: clients, server, store) in the
    /// measured window.
    pub cpu_s: f64,
    /// cpu_s per measured operation, µs.
    pub cpu_us_per_op: f64,
    /// cpu_s / elapsed_s / CPUs, %: how busy the machine's CPUs were with this process.
    pub cpu_busy_pct: f64,
    /// Per operation kind (`put`, `get`; only kinds the workload does).
    pub kinds: Vec<KindResult>,
    /// Throughput per second.
    pub series: Vec<Second>,
}

/// S3 against the store, per workload and kind.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The workload.
    pub workload: Workload,
    /// `put` or `get`.
    pub kind: String,
    /// Through S3.
    pub s3_ops_per_s: f64,
    /// The store directly.
    pub store_ops_per_s: f64,
    /// Through S3, MB/s.
    pub s3_mb_per_s: f64,
    /// The store directly, MB/s.
    pub store_mb_per_s: f64,
    /// s3 / store, %.
    pub pct_of_store: f64,
    /// Process CPU per operation through S3 (clients, HTTP, s3s, store), µs; the whole run
    /// when the workload mixes kinds.
    pub s3_cpu_us_per_op: f64,
    /// Process CPU per operation against the store (clients, store), µs.
    pub store_cpu_us_per_op: f64,
}

/// Where the load went: filled in by the caller (the binary).
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    /// The endpoint URL.
    pub endpoint: String,
    /// The server runs in this process on the same runtime as the clients.
    pub in_process: bool,
    /// The store under the server, in words (in-process only).
    pub store: Option<String>,
    /// tokio worker threads of the runtime (clients, and the server when in-process).
    pub threads: usize,
}

/// The whole report (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct S3Report {
    /// CPU model and count.
    pub machine: String,
    /// CPUs available.
    pub cpus: usize,
    /// Where the load went.
    pub setup: Setup,
    /// What every run did.
    pub plan: Plan,
    /// The store baseline ran.
    pub baseline: bool,
    /// Runs in order (for each workload and round: S3, then the store baseline).
    pub runs: Vec<RunResult>,
    /// S3 as a percentage of the store, per workload and kind.
    pub comparison: Vec<Comparison>,
    /// Failed operations over all runs.
    pub errors: u64,
}

fn result_of(
    target: &str,
    workload: Workload,
    round: usize,
    tally: &Tally,
    elapsed_s: f64,
    cpu_s: f64,
) -> RunResult {
    let mb = |b: u64| b as f64 / 1e6 / elapsed_s;
    let kinds: Vec<usize> = match workload {
        Workload::Put => vec![PUT],
        Workload::Get => vec![GET],
        Workload::Mixed => vec![PUT, GET],
    };
    let kinds = kinds
        .into_iter()
        .map(|k| KindResult {
            kind: KIND_NAMES[k].to_string(),
            ops: tally.ops[k],
            bytes: tally.bytes[k],
            errors: tally.errors[k],
            ops_per_s: tally.ops[k] as f64 / elapsed_s,
            mb_per_s: mb(tally.bytes[k]),
            mib_per_s: tally.bytes[k] as f64 / (1u64 << 20) as f64 / elapsed_s,
            latency: Latency::of(&tally.lat[k]),
            ttfb: Latency::of(&tally.ttfb[k]),
            pct_of_store: None,
        })
        .collect();
    // Whole seconds; the stragglers finishing after the last whole second (a run with a
    // duration ends with a few in-flight operations) join that second rather than make a
    // sliver of their own with a meaningless rate.
    let mut buckets: Vec<(f64, f64, PerKind)> = Vec::new();
    for (i, s) in tally.series.iter().enumerate() {
        let start = i as f64;
        let end = ((i + 1) as f64).min(elapsed_s.max(start + 1e-3));
        match buckets.last_mut() {
            Some(last) if end - start < 1.0 => {
                last.1 = end;
                for (a, b) in last.2.iter_mut().zip(s) {
                    a.0 += b.0;
                    a.1 += b.1;
                }
            }
            _ => buckets.push((start, end, *s)),
        }
    }
    let series = buckets
        .iter()
        .map(|(start, end, s)| {
            let width = end - start;
            Second {
                t_s: *end,
                ops_per_s: (s[0].0 + s[1].0) as f64 / width,
                mb_per_s: (s[0].1 + s[1].1) as f64 / 1e6 / width,
                puts: s[PUT].0,
                gets: s[GET].0,
            }
        })
        .collect();
    let ops = tally.ops[0] + tally.ops[1];
    let bytes = tally.bytes[0] + tally.bytes[1];
    RunResult {
        target: target.to_string(),
        workload,
        round,
        elapsed_s,
        ops,
        bytes,
        ops_per_s: ops as f64 / elapsed_s,
        mb_per_s: mb(bytes),
        errors: tally.errors[0] + tally.errors[1],
        first_error: None,
        cpu_s,
        cpu_us_per_op: if ops > 0 {
            cpu_s * 1e6 / ops as f64
        } else {
            0.0
        },
        cpu_busy_pct: 100.0 * cpu_s / elapsed_s / cpus() as f64,
        kinds,
        series,
    }
}

/// Object contents: one random buffer every PUT sends (the store neither compresses nor
/// deduplicates).
fn object_data(size: u64, seed: u64) -> Bytes {
    let mut v = vec![0u8; size as usize];
    ChaCha8Rng::seed_from_u64(seed ^ 0x5eed).fill(&mut v[..]);
    Bytes::from(v)
}

/// Runs one workload against one target with every client; returns the result and the PUT
/// keys per client.
async fn run_one(
    args: &LoadArgs,
    plan: &Plan,
    target: &Target,
    workload: Workload,
    round: usize,
    data: &Bytes,
) -> Result<(RunResult, Vec<u64>)> {
    let what = if plan.rounds > 1 {
        format!("{} {} {}", target.name(), workload.name(), round + 1)
    } else {
        format!("{} {}", target.name(), workload.name())
    };
    let progress = bar(args.quiet, plan.ops, &what);
    let start = Instant::now();
    let measure_start = start + Duration::from_secs_f64(plan.warmup_s);
    let ctx = Arc::new(RunCtx {
        workload,
        plan: plan.clone(),
        data: data.clone(),
        target: target.name(),
        round,
        measure_start,
        deadline: plan
            .duration_s
            .map(|d| measure_start + Duration::from_secs_f64(d)),
        tickets: AtomicU64::new(0),
        first_error: Mutex::new(None),
        bar: progress.clone(),
    });
    let cpu_start = tokio::spawn(async move {
        tokio::time::sleep_until(measure_start.into()).await;
        process_cpu_seconds()
    });
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..plan.clients {
        let fut = drive(ctx.clone(), target.client(), i);
        tasks.spawn(async move { (i, fut.await) });
    }
    let mut tally = Tally::new();
    let mut put_keys = vec![0u64; plan.clients];
    while let Some(r) = tasks.join_next().await {
        let (i, t) = r.context("a benchmark client panicked")?;
        tally.add(&t);
        put_keys[i] = t.put_keys;
    }
    let elapsed = measure_start.elapsed().as_secs_f64().max(1e-9);
    let cpu_s = process_cpu_seconds() - cpu_start.await.context("the CPU meter task")?;
    progress.finish_and_clear();
    let mut r = result_of(target.name(), workload, round, &tally, elapsed, cpu_s);
    r.first_error = ctx.first_error.lock().expect("not poisoned").take();
    Ok((r, put_keys))
}

/// Runs `f(client, i)` for i in 0..n with `clients` tasks; stops at the first error.
async fn for_each_key<F, Fut>(
    target: &Target,
    clients: usize,
    n: u64,
    label: &str,
    quiet: bool,
    f: F,
) -> Result<()>
where
    F: Fn(Client, u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = (Client, Result<(), String>)> + Send,
{
    let progress = bar(quiet, Some(n), label);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients.min(n.max(1) as usize) {
        let (next, f, progress) = (next.clone(), f.clone(), progress.clone());
        let mut client = target.client();
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok(());
                }
                let (c, r) = f(client, i).await;
                client = c;
                r?;
                progress.inc(1);
            }
        });
    }
    let mut first: Option<String> = None;
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r.context("a benchmark client panicked")? {
            next.store(n, Ordering::Relaxed);
            first.get_or_insert(e);
        }
    }
    progress.finish_and_clear();
    match first {
        Some(e) => bail!("{label}: {e}"),
        None => Ok(()),
    }
}

/// Creates the plan's bucket through `s3`.
async fn make_bucket(s3: &Target, plan: &Plan) -> Result<()> {
    s3.client()
        .create_bucket(&plan.bucket)
        .await
        .map_err(|e| anyhow::anyhow!(e))
}

/// Stores the plan's objects: through `store` when it is the store behind the endpoint, in
/// this process (quicker, and not what is measured), else through `s3`.
async fn preload_via(
    args: &LoadArgs,
    plan: &Plan,
    s3: &Target,
    store: Option<&Store>,
    data: &Bytes,
) -> Result<()> {
    let via = match store {
        Some(s) => Target::Store(s.clone()),
        None => s3.clone(),
    };
    preload(args, plan, &via, data).await
}

async fn preload(args: &LoadArgs, plan: &Plan, target: &Target, data: &Bytes) -> Result<()> {
    let (bucket, prefix, data) = (plan.bucket.clone(), plan.prefix.clone(), data.clone());
    for_each_key(
        target,
        plan.clients,
        plan.objects,
        "preload",
        args.quiet,
        move |mut c, i| {
            let (bucket, key, data) = (bucket.clone(), object_key(&prefix, i), data.clone());
            async move {
                let r = c.put(&bucket, &key, &data).await.map(|_| ());
                (c, r)
            }
        },
    )
    .await
}

/// Deletes the objects a run against an external endpoint made.
async fn cleanup(
    args: &LoadArgs,
    plan: &Plan,
    target: &Target,
    preloaded: bool,
    put_keys: &[(usize, Vec<u64>)],
) -> Result<()> {
    let mut keys: Vec<String> = Vec::new();
    if preloaded {
        keys.extend((0..plan.objects).map(|i| object_key(&plan.prefix, i)));
    }
    for (round, per_client) in put_keys {
        for (c, &n) in per_client.iter().enumerate() {
            keys.extend((0..n).map(|s| put_key(&plan.prefix, target.name(), *round, c, s)));
        }
    }
    let keys = Arc::new(keys);
    let bucket = plan.bucket.clone();
    let n = keys.len() as u64;
    for_each_key(
        target,
        plan.clients,
        n,
        "cleanup",
        args.quiet,
        move |mut c, i| {
            let (bucket, keys) = (bucket.clone(), keys.clone());
            async move {
                let r = c.delete(&bucket, &keys[i as usize]).await;
                (c, r)
            }
        },
    )
    .await
}

/// Writes every buffer of read/write separation out, so each run starts from the same state.
async fn settle(store: Option<&Store>) -> Result<()> {
    if let Some(r) = store.and_then(|s| s.rails()) {
        r.drain()
            .await
            .context("draining the separation buffers between runs")?;
    }
    Ok(())
}

/// Runs every workload of `args` through the S3 endpoint and, when `store` is the store
/// behind it (in this process) and the baseline is not switched off, against the store
/// directly. Prints the table as runs finish.
pub async fn measure(
    args: &LoadArgs,
    setup: Setup,
    endpoint: &Endpoint,
    store: Option<&Store>,
) -> Result<S3Report> {
    let plan = args.plan()?;
    let s3 = Target::S3(endpoint.resolve().await?);
    let baseline = store
        .filter(|_| !args.no_baseline)
        .cloned()
        .map(Target::Store);
    let report_head = describe(&plan, &setup, baseline.is_some());
    for line in report_head.lines() {
        args.say(line);
    }
    args.say(&table_header());
    make_bucket(&s3, &plan).await?;
    let data = object_data(plan.size_bytes, plan.seed);
    let mut runs = Vec::new();
    let mut preloaded = false;
    let mut s3_put_keys = Vec::new();
    for &w in &plan.workloads {
        if w.needs_objects() && !preloaded {
            preload_via(args, &plan, &s3, store, &data).await?;
            preloaded = true;
        }
        for round in 0..plan.rounds {
            settle(store).await?;
            let (mut r, keys) = run_one(args, &plan, &s3, w, round, &data).await?;
            if w == Workload::Put {
                s3_put_keys.push((round, keys));
            }
            let base = match &baseline {
                Some(t) => {
                    settle(store).await?;
                    Some(run_one(args, &plan, t, w, round, &data).await?.0)
                }
                None => None,
            };
            // Each S3 run against the store run of its round.
            if let Some(b) = &base {
                for k in &mut r.kinds {
                    k.pct_of_store = b
                        .kinds
                        .iter()
                        .find(|x| x.kind == k.kind && x.ops_per_s > 0.0)
                        .map(|x| 100.0 * k.ops_per_s / x.ops_per_s);
                }
            }
            print_run(args, &r);
            runs.push(r);
            if let Some(b) = base {
                print_run(args, &b);
                runs.push(b);
            }
        }
    }
    if store.is_none() && !args.keep_objects {
        cleanup(args, &plan, &s3, preloaded, &s3_put_keys).await?;
    }
    let comparison = compare(&plan, &runs);
    let errors = runs.iter().map(|r| r.errors).sum();
    Ok(S3Report {
        machine: machine_description(),
        cpus: cpus(),
        setup,
        plan,
        baseline: baseline.is_some(),
        runs,
        comparison,
        errors,
    })
}

fn print_run(args: &LoadArgs, r: &RunResult) {
    for line in table_lines(r) {
        args.say(&line);
    }
    if let Some(e) = &r.first_error {
        args.say(&format!("  first error: {e}"));
    }
}

/// One target's runs of one workload, summed over the rounds.
struct Totals {
    /// (kind, operations, bytes).
    kinds: Vec<(String, u64, u64)>,
    elapsed_s: f64,
    ops: u64,
    cpu_s: f64,
}

impl Totals {
    fn of(runs: &[RunResult], target: &str, w: Workload) -> Option<Totals> {
        let mine: Vec<&RunResult> = runs
            .iter()
            .filter(|r| r.target == target && r.workload == w)
            .collect();
        if mine.is_empty() {
            return None;
        }
        let mut kinds: Vec<(String, u64, u64)> = Vec::new();
        for r in &mine {
            for k in &r.kinds {
                match kinds.iter_mut().find(|x| x.0 == k.kind) {
                    Some(x) => {
                        x.1 += k.ops;
                        x.2 += k.bytes;
                    }
                    None => kinds.push((k.kind.clone(), k.ops, k.bytes)),
                }
            }
        }
        Some(Totals {
            kinds,
            elapsed_s: mine.iter().map(|r| r.elapsed_s).sum(),
            ops: mine.iter().map(|r| r.ops).sum(),
            cpu_s: mine.iter().map(|r| r.cpu_s).sum(),
        })
    }

    fn cpu_us_per_op(&self) -> f64 {
        if self.ops > 0 {
            self.cpu_s * 1e6 / self.ops as f64
        } else {
            0.0
        }
    }
}

/// S3 against the store per workload and kind, over all rounds (total operations / total
/// measured time).
fn compare(plan: &Plan, runs: &[RunResult]) -> Vec<Comparison> {
    let mut out = Vec::new();
    for &w in &plan.workloads {
        let (Some(s3), Some(st)) = (Totals::of(runs, "s3", w), Totals::of(runs, "store", w)) else {
            continue;
        };
        for (kind, ops, bytes) in &s3.kinds {
            let Some((_, sops, sbytes)) = st.kinds.iter().find(|x| &x.0 == kind) else {
                continue;
            };
            let (rate, srate) = (*ops as f64 / s3.elapsed_s, *sops as f64 / st.elapsed_s);
            out.push(Comparison {
                workload: w,
                kind: kind.clone(),
                s3_ops_per_s: rate,
                store_ops_per_s: srate,
                s3_mb_per_s: *bytes as f64 / 1e6 / s3.elapsed_s,
                store_mb_per_s: *sbytes as f64 / 1e6 / st.elapsed_s,
                pct_of_store: if srate > 0.0 {
                    100.0 * rate / srate
                } else {
                    0.0
                },
                s3_cpu_us_per_op: s3.cpu_us_per_op(),
                store_cpu_us_per_op: st.cpu_us_per_op(),
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reports

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub use crate::harness::machine_description;

fn describe(plan: &Plan, setup: &Setup, baseline: bool) -> String {
    let amount = match (plan.ops, plan.duration_s) {
        (Some(n), _) => format!("{n} operations"),
        (None, Some(s)) => format!("{s} s"),
        (None, None) => "nothing".into(),
    };
    let mut s = format!(
        "s3 bench: {} objects of {}, {} clients (one HTTP/1.1 connection each, SigV4, \
         UNSIGNED-PAYLOAD), {amount} per run after {} s warmup{}{}\n",
        plan.workloads
            .iter()
            .map(|w| match w {
                Workload::Mixed => format!("mixed ({:.0} % get)", plan.get_ratio * 100.0),
                w => w.name().to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        plan.size,
        plan.clients,
        plan.warmup_s,
        if plan.workloads.iter().any(|w| w.needs_objects()) {
            format!("; {} objects stored first for reads", plan.objects)
        } else {
            String::new()
        },
        if plan.rounds > 1 {
            format!("; {} rounds, S3 and store alternating", plan.rounds)
        } else {
            String::new()
        }
    );
    if setup.in_process {
        let _ = writeln!(
            s,
            "server: railstore's S3 endpoint in this process at {} over {}",
            setup.endpoint,
            setup.store.as_deref().unwrap_or("the store")
        );
        let _ = writeln!(
            s,
            "clients and server share one tokio runtime of {} worker thread(s) on {}: the \
             load generator's own CPU time is part of what is measured",
            setup.threads,
            machine_description()
        );
    } else {
        let _ = writeln!(
            s,
            "server: {} (external; no store baseline); clients on {} tokio thread(s), {}",
            setup.endpoint,
            setup.threads,
            machine_description()
        );
    }
    if baseline {
        s.push_str(
            "`store` rows: the same workload, clients and objects against the Store in \
             process (no HTTP); `% store` = S3 ops/s / store ops/s",
        );
    } else {
        s.push_str("no store baseline");
    }
    s
}

fn table_header() -> String {
    format!(
        "{:<6} {:<6} {:<4} {:>9} {:>10} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "target",
        "load",
        "op",
        "ops",
        "ops/s",
        "MB/s",
        "% store",
        "p50 us",
        "p90 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "cpu us/op",
        "errors"
    )
}

/// p50, p90, p99, p99.9 and max in µs, as the tables show a kind's latency (0 where none).
fn latency_table_us(l: Option<&Latency>) -> [f64; 5] {
    l.map_or([0.0; 5], |x| {
        [x.p50_us, x.p90_us, x.p99_us, x.p999_us, x.max_us]
    })
}

/// `% store` as the tables show it.
fn pct_cell(pct_of_store: Option<f64>) -> String {
    pct_of_store.map_or("-".into(), |p| format!("{p:.1}"))
}

/// The cells naming a run (target, workload, round), joined by `sep`.
fn run_cells(r: &RunResult, sep: &str) -> String {
    format!("{}{sep}{}{sep}{}", r.target, r.workload.name(), r.round)
}

fn table_lines(r: &RunResult) -> Vec<String> {
    r.kinds
        .iter()
        .map(|k| {
            let latency: Vec<String> = latency_table_us(k.latency.as_ref())
                .iter()
                .map(|v| format!("{v:>9.0}"))
                .collect();
            format!(
                "{:<6} {:<6} {:<4} {:>9} {:>10.0} {:>9.1} {:>8} {} {:>9.0} {:>7}",
                r.target,
                r.workload.name(),
                k.kind,
                k.ops,
                k.ops_per_s,
                k.mb_per_s,
                pct_cell(k.pct_of_store),
                latency.join(" "),
                r.cpu_us_per_op,
                k.errors
            )
        })
        .collect()
}

/// The CSV form: one row per run and operation kind.
pub fn results_csv(report: &S3Report) -> String {
    let mut s = String::from(
        "target,workload,round,kind,size_bytes,clients,elapsed_s,ops,bytes,ops_per_s,mb_per_s,\
         pct_of_store,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,ttfb_p50_us,ttfb_p99_us,\
         run_cpu_s,run_cpu_us_per_op,errors\n",
    );
    for r in &report.runs {
        for k in &r.kinds {
            // Empty where the kind has no such latency.
            let cell = |lat: &Option<Latency>, f: fn(&Latency) -> f64| {
                lat.as_ref()
                    .map_or(String::new(), |x| format!("{:.1}", f(x)))
            };
            let l = |f| cell(&k.latency, f);
            let t = |f| cell(&k.ttfb, f);
            let _ = writeln!(
                s,
                "{},{},{},{},{:.4},{},{},{:.2},{:.3},{},{},{},{},{},{},{},{},{},{:.4},{:.1},{}",
                run_cells(r, ","),
                k.kind,
                report.plan.size_bytes,
                report.plan.clients,
                r.elapsed_s,
                k.ops,
                k.bytes,
                k.ops_per_s,
                k.mb_per_s,
                k.pct_of_store.map_or(String::new(), |p| format!("{p:.2}")),
                l(|x| x.p50_us),
                l(|x| x.p90_us),
                l(|x| x.p99_us),
                l(|x| x.p999_us),
                l(|x| x.max_us),
                l(|x| x.mean_us),
                t(|x| x.p50_us),
                t(|x| x.p99_us),
                r.cpu_s,
                r.cpu_us_per_op,
                k.errors
            );
        }
    }
    s
}

/// The per-second series as CSV.
pub fn series_csv(report: &S3Report) -> String {
    let mut s = String::from("target,workload,round,t_s,ops_per_s,mb_per_s,puts,gets\n");
    for r in &report.runs {
        for x in &r.series {
            let _ = writeln!(
                s,
                "{},{:.3},{:.2},{:.3},{},{}",
                run_cells(r, ","),
                x.t_s,
                x.ops_per_s,
                x.mb_per_s,
                x.puts,
                x.gets
            );
        }
    }
    s
}

/// The Markdown summary.
pub fn summary_md(report: &S3Report) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## s3 bench results\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(s, "- machine: {}", report.machine);
    for line in describe(&report.plan, &report.setup, report.baseline).lines() {
        let _ = writeln!(s, "- {line}");
    }
    let _ = writeln!(
        s,
        "\nLatency is from sending the request to the last byte of the answer. MB = 10^6 B. \
         Errors count every non-2xx answer, transport error and short read, warmup included. \
         CPU µs/op is the whole process's CPU time (clients, HTTP, s3s, store; user + system) \
         per operation of the run. `% store` compares an S3 run with the store run of its round; \
         the comparison below uses all rounds (total operations / total measured time).\n"
    );
    let _ = writeln!(
        s,
        "| target | workload | round | op | ops | ops/s | MB/s | % store | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | CPU µs/op | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &report.runs {
        for k in &r.kinds {
            let latency: Vec<String> = latency_table_us(k.latency.as_ref())
                .iter()
                .map(|v| format!("{v:.0}"))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} | {:.1} | {} | {} | {:.0} | {} |",
                run_cells(r, " | "),
                k.kind,
                k.ops,
                k.ops_per_s,
                k.mb_per_s,
                pct_cell(k.pct_of_store),
                latency.join(" | "),
                r.cpu_us_per_op,
                k.errors
            );
        }
    }
    if !report.comparison.is_empty() {
        let _ = writeln!(
            s,
            "\n| workload | op | S3 ops/s | store ops/s | S3 MB/s | store MB/s | S3 % of store | S3 CPU µs/op | store CPU µs/op |\n\
             |---|---|---|---|---|---|---|---|---|"
        );
        for c in &report.comparison {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} |",
                c.workload.name(),
                c.kind,
                c.s3_ops_per_s,
                c.store_ops_per_s,
                c.s3_mb_per_s,
                c.store_mb_per_s,
                c.pct_of_store,
                c.s3_cpu_us_per_op,
                c.store_cpu_us_per_op
            );
        }
    }
    for r in report.runs.iter().filter(|r| r.first_error.is_some()) {
        let _ = writeln!(
            s,
            "\nfirst error of {} {} (round {}): `{}`",
            r.target,
            r.workload.name(),
            r.round,
            r.first_error.as_deref().unwrap_or_default()
        );
    }
    s
}

fn plot(report: &S3Report, dir: &Path) -> Result<Vec<PathBuf>> {
    let series = report
        .runs
        .iter()
        .map(|r| Series {
            name: if report.plan.rounds > 1 {
                format!("{} {} #{}", r.target, r.workload.name(), r.round + 1)
            } else {
                format!("{} {}", r.target, r.workload.name())
            },
            points: r.series.iter().map(|x| (x.t_s, x.ops_per_s)).collect(),
        })
        .collect();
    Chart {
        title: &format!(
            "S3 and store throughput per second ({} objects, {} clients)",
            report.plan.size, report.plan.clients
        ),
        x_label: "seconds into the measured window",
        y_label: "operations/s",
        x_axis: XAxis::Linear,
        series,
    }
    .write(dir, "per_second")
}

fn write_file(path: &Path, body: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))
}

/// Prints the comparison and writes `--json` and `--out`.
pub fn write_report(args: &LoadArgs, report: &S3Report) -> Result<()> {
    for c in &report.comparison {
        args.say(&format!(
            "{} {}: S3 {:.0} ops/s ({:.1} MB/s) = {:.1} % of the store's {:.0} ops/s ({:.1} MB/s); \
             process CPU per operation {:.0} us through S3, {:.0} us direct",
            c.workload.name(),
            c.kind,
            c.s3_ops_per_s,
            c.s3_mb_per_s,
            c.pct_of_store,
            c.store_ops_per_s,
            c.store_mb_per_s,
            c.s3_cpu_us_per_op,
            c.store_cpu_us_per_op
        ));
    }
    if report.errors > 0 {
        args.say(&format!("{} operations failed", report.errors));
    }
    let json = serde_json::to_string_pretty(report)?;
    match args.json.as_deref() {
        Some(p) if p == Path::new("-") => println!("{json}"),
        Some(p) => write_file(p, &json)?,
        None => {}
    }
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let mut written = Vec::new();
        for (name, body) in [
            ("results.json", json.clone()),
            ("results.csv", results_csv(report)),
            ("series.csv", series_csv(report)),
            ("summary.md", summary_md(report)),
        ] {
            let p = out.join(name);
            write_file(&p, &body)?;
            written.push(p);
        }
        if !args.no_plots {
            match plot(report, out) {
                Ok(files) => written.extend(files),
                Err(e) => args.say(&format!("plot skipped: {e:#}")),
            }
        }
        args.say("wrote:");
        for p in written {
            args.say(&format!("  {}", p.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("10s").unwrap(), 10.0);
        assert_eq!(parse_duration("10").unwrap(), 10.0);
        assert_eq!(parse_duration("500ms").unwrap(), 0.5);
        assert_eq!(parse_duration("2m").unwrap(), 120.0);
        assert_eq!(parse_duration("1.5s").unwrap(), 1.5);
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(951_782_400 + 3661), "20000229T010101Z");
        assert_eq!(amz_date(4_107_542_399), "21000228T235959Z");
    }

    #[test]
    fn uri_encoding_keeps_unreserved_characters() {
        let mut s = String::new();
        uri_encode(&mut s, "/b/a b+c~d_e.f-g/ü", true);
        assert_eq!(s, "/b/a%20b%2Bc~d_e.f-g/%C3%BC");
        let mut q = String::new();
        uri_encode(&mut q, "a/b", false);
        assert_eq!(q, "a%2Fb");
    }

    /// The "GET Object" example of the AWS Signature V4 documentation for S3 (header-based
    /// authentication), signed with this module's signer.
    #[test]
    fn signatures_match_the_aws_example() {
        let mut s = Signer::new(
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "us-east-1",
        );
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let auth = s.authorization(
            "GET",
            "/test.txt",
            &[],
            &[
                ("host", "examplebucket.s3.amazonaws.com"),
                ("range", "bytes=0-9"),
                ("x-amz-content-sha256", empty),
                ("x-amz-date", "20130524T000000Z"),
            ],
            empty,
            "20130524T000000Z",
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn the_last_partial_second_joins_the_one_before() {
        let mut t = Tally::new();
        t.series = vec![[(0, 0), (10, 40)], [(0, 0), (20, 80)], [(0, 0), (3, 12)]];
        t.ops[GET] = 33;
        t.bytes[GET] = 132;
        let r = result_of("s3", Workload::Get, 0, &t, 2.05, 1.0);
        assert_eq!(r.series.len(), 2);
        assert_eq!(r.series[1].gets, 23);
        assert!((r.series[1].t_s - 2.05).abs() < 1e-9);
        assert!((r.series[1].ops_per_s - 23.0 / 1.05).abs() < 1e-9);
        assert!((r.series[0].ops_per_s - 10.0).abs() < 1e-9);
        assert!((r.cpu_us_per_op - 1e6 / 33.0).abs() < 1e-6);
        assert_eq!(r.kinds.len(), 1);
    }

    #[test]
    fn plans_resolve_defaults_and_quick() {
        let cli = Cli::parse_from(["x"]);
        let p = cli.load.plan().unwrap();
        assert_eq!(p.workloads, vec![Workload::Put, Workload::Get]);
        assert_eq!(p.size_bytes, 1 << 20);
        assert_eq!((p.clients, p.duration_s, p.warmup_s), (16, Some(10.0), 1.0));
        assert_eq!(p.objects, 1000);
        let cli = Cli::parse_from([
            "x",
            "--quick",
            "--workload",
            "mixed",
            "--size",
            "4KiB",
            "--json",
        ]);
        let p = cli.load.plan().unwrap();
        assert_eq!((p.duration_s, p.warmup_s, p.objects), (Some(2.0), 0.0, 100));
        assert_eq!(p.size_bytes, 4096);
        assert!(cli.load.human_to_stderr());
        let cli = Cli::parse_from(["x", "--ops", "50", "--json", "r.json"]);
        let p = cli.load.plan().unwrap();
        assert_eq!((p.duration_s, p.ops), (None, Some(50)));
        assert!(!cli.load.human_to_stderr());
        assert!(Cli::try_parse_from(["x", "--ops", "5", "--duration", "1s"]).is_err());
        let bad = Cli::parse_from(["x", "--get-ratio", "1.5"]);
        assert!(bad.load.plan().is_err());
    }

    /// The whole loop against the store alone (the S3 side is exercised by the binary's test).
    #[test]
    fn store_runs_count_operations() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let mut cfg = railstore_store::StoreConfig {
                data_dir: dir.path().to_path_buf(),
                ..Default::default()
            };
            cfg.devices.kind = railstore_store::DeviceKind::Mem;
            cfg.devices.capacity_bytes = 256 << 20;
            let store = Store::open(cfg).await.unwrap();
            let args = LoadArgs {
                workload: vec![Workload::Put, Workload::Mixed],
                size: "4KiB".into(),
                clients: 4,
                ops: Some(200),
                warmup: Some("0s".into()),
                objects: Some(20),
                ..LoadArgs::default()
            };
            let plan = args.plan().unwrap();
            let target = Target::Store(store.clone());
            let data = object_data(plan.size_bytes, 1);
            let mut c = target.client();
            c.create_bucket(&plan.bucket).await.unwrap();
            preload(&args, &plan, &target, &data).await.unwrap();
            let (r, keys) = run_one(&args, &plan, &target, Workload::Put, 0, &data)
                .await
                .unwrap();
            assert_eq!(r.ops, 200);
            assert_eq!(r.errors, 0, "{:?}", r.first_error);
            assert_eq!(keys.iter().sum::<u64>(), 200);
            let (r, _) = run_one(&args, &plan, &target, Workload::Mixed, 0, &data)
                .await
                .unwrap();
            assert_eq!(r.ops, 200);
            assert_eq!(r.errors, 0, "{:?}", r.first_error);
            assert_eq!(r.kinds.len(), 2);
            assert_eq!(r.kinds.iter().map(|k| k.ops).sum::<u64>(), 200);
            assert_eq!(r.bytes, 200 * 4096);
            store.shutdown().await.unwrap();
        });
    }
}
