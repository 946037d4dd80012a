//! The HTTP server: one listener, HTTP/1.1 (hyper), `/metrics` and `/status` answered here,
//! everything else handed to s3s with SigV4 authentication.

use crate::service::RailS3;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use railstore_store::Store;
use s3s::auth::{S3Auth, SecretKey};
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::HttpError;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How the S3 endpoint listens and whom it lets in.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// Address to listen on (port 0 picks a free one; see [`Server::local_addr`]).
    pub listen: SocketAddr,
    /// The region clients sign for (`us-east-1` by default in most tools).
    pub region: String,
    /// The one access key accepted.
    pub access_key: String,
    /// Its secret.
    pub secret_key: String,
    /// Base domain for virtual-hosted-style requests (`bucket.<domain>`); path style always
    /// works.
    pub domain: Option<String>,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("listen", &self.listen)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .field("domain", &self.domain)
            .finish()
    }
}

/// What can keep the server from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration cannot work.
    #[error("S3 server configuration: {0}")]
    Config(String),
    /// Binding or accepting failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Bytes of request line plus headers read at all: hyper answers a bare 431 beyond (and this
/// bounds its read buffer).
pub const REQUEST_HEAD_BYTES_MAX: usize = 64 << 10;
/// Bytes of headers (names, values, separators) accepted; above, S3's
/// `RequestHeaderSectionTooLarge`. S3 itself takes 8 KiB; user metadata is limited to 2 KiB.
pub const REQUEST_HEADER_BYTES_MAX: usize = 16 << 10;
/// Headers accepted in one request.
pub const REQUEST_HEADERS_MAX: usize = 200;
/// How long a client may take to send a request's head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long open connections get to finish after shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Builds the s3s service for `store`: SigV4 with the configured key pair (header or
/// presigned URL; anonymous requests are refused with `AccessDenied`), virtual hosts under
/// `domain` when given.
pub fn s3_service(store: Store, cfg: &S3Config) -> Result<S3Service, ServeError> {
    if cfg.access_key.is_empty() || cfg.secret_key.is_empty() {
        return Err(ServeError::Config(
            "an access key and a secret key are required".into(),
        ));
    }
    if cfg.region.is_empty() {
        return Err(ServeError::Config("the region must not be empty".into()));
    }
    let mut builder = S3ServiceBuilder::new(RailS3::new(store, cfg.region.clone()));
    builder.set_auth(OneKey {
        access_key: cfg.access_key.clone(),
        secret_key: SecretKey::from(cfg.secret_key.as_str()),
    });
    if let Some(d) = &cfg.domain {
        let host = s3s::host::SingleDomain::new(d)
            .map_err(|e| ServeError::Config(format!("domain {d:?}: {e}")))?;
        builder.set_host(host);
    }
    Ok(builder.build())
}

/// The one key pair the server accepts.
struct OneKey {
    access_key: String,
    secret_key: SecretKey,
}

#[async_trait::async_trait]
impl S3Auth for OneKey {
    async fn get_secret_key(&self, access_key: &str) -> s3s::S3Result<SecretKey> {
        if access_key == self.access_key {
            Ok(self.secret_key.clone())
        } else {
            Err(s3s::S3Error::with_message(
                s3s::S3ErrorCode::InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records.",
            ))
        }
    }
}

/// A bound server, not yet serving.
pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    router: Arc<Router>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

/// Binds the listener (port 0 picks a free port) and builds the service.
pub async fn bind(store: Store, cfg: S3Config) -> Result<Server, ServeError> {
    let s3 = s3_service(store.clone(), &cfg)?;
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| ServeError::Io {
            what: format!("binding {}", cfg.listen),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Io {
        what: "reading the bound address".into(),
        source,
    })?;
    Ok(Server {
        listener,
        addr,
        router: Arc::new(Router { s3, store }),
    })
}

/// Binds, serves until `shutdown` completes, lets open connections finish (up to
/// [`SHUTDOWN_GRACE`]) and returns. The caller then shuts the store down.
pub async fn serve(
    store: Store,
    cfg: S3Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    bind(store, cfg).await?.serve(shutdown).await
}

impl Server {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes; see [`serve`].
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        tracing::info!("listening on http://{}", self.addr);
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        conns.spawn(connection(stream, peer, self.router.clone(), stop_rx.clone()));
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: wait, do not spin.
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        tracing::info!(
            connections = conns.len(),
            "shutting down the S3 endpoint: no new connections"
        );
        drop(self.listener);
        let _ = stop_tx.send(true);
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while conns.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                connections = conns.len(),
                "connections still open after the grace period are cut"
            );
            conns.shutdown().await;
        }
        Ok(())
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Arc<Router>,
    mut stop: watch::Receiver<bool>,
) {
    let service = hyper::service::service_fn(move |req| {
        let router = router.clone();
        async move { router.route(req).await }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(REQUEST_HEAD_BYTES_MAX)
        .max_headers(REQUEST_HEADERS_MAX)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            changed = stop.changed(), if !stopping => {
                stopping = true;
                if changed.is_err() || *stop.borrow() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Answers the unauthenticated operator endpoints and hands the rest to s3s.
struct Router {
    s3: S3Service,
    store: Store,
}

impl Router {
    async fn route(&self, req: Request<Incoming>) -> Result<Response<s3s::Body>, HttpError> {
        let header_bytes: usize = req
            .headers()
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum();
        if header_bytes > REQUEST_HEADER_BYTES_MAX {
            return Ok(xml_error(
                StatusCode::BAD_REQUEST,
                "RequestHeaderSectionTooLarge",
                &format!(
                    "Your request header section exceeds the maximum allowed size \
                     ({header_bytes} > {REQUEST_HEADER_BYTES_MAX} bytes)."
                ),
            ));
        }
        if req.method() == Method::GET && !is_signed(&req) {
            match req.uri().path() {
                "/metrics" => {
                    let text = self.store.metrics_text().await;
                    return Ok(plain(
                        StatusCode::OK,
                        "text/plain; version=0.0.4; charset=utf-8",
                        text.into(),
                    ));
                }
                "/status" => {
                    let status = self.store.status().await;
                    let json = serde_json::to_vec_pretty(&status).unwrap_or_default();
                    return Ok(plain(StatusCode::OK, "application/json", json.into()));
                }
                _ => {}
            }
        }
        self.s3.call(req.map(s3s::Body::from)).await
    }
}

/// `GET /metrics` could also be ListObjects on a bucket named `metrics`: a signed request is
/// that, an unsigned one the operator endpoint.
fn is_signed<B>(req: &Request<B>) -> bool {
    req.headers().contains_key(http::header::AUTHORIZATION)
        || req.uri().query().is_some_and(|q| {
            q.split('&').any(|kv| {
                let k = kv.split('=').next().unwrap_or_default();
                k.eq_ignore_ascii_case("X-Amz-Signature") || k == "Signature"
            })
        })
}

/// An S3 error document, for the errors answered before s3s sees the request.
fn xml_error(status: StatusCode, code: &str, message: &str) -> Response<s3s::Body> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    plain(status, "application/xml", body.into())
}

fn plain(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<s3s::Body> {
    let mut resp = Response::new(s3s::Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    resp
}
