//! The HTTP server: one listener, HTTP/1.1 (hyper), `/metrics` and `/status` answered here,
//! everything else handed to s3s with SigV4 authentication. The limits against hostile
//! clients ([`Limits`], [`crate::guard`]) apply before s3s sees a request.

use crate::cors;
use crate::guard::{self, IdleBody, IdleWrites};
use crate::latency::{self, LatencyHistory};
use crate::service::RailS3;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use railstore_store::Store;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::HttpError;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// How the S3 endpoint listens and whom it lets in.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// Address to listen on (port 0 picks a free one; see [`Server::local_addr`]).
    pub listen: SocketAddr,
    /// The region clients sign for (`us-east-1` by default in most tools).
    pub region: String,
    /// The main user's access key.
    pub access_key: String,
    /// Its secret.
    pub secret_key: String,
    /// The main user's canonical id (owner of every bucket made before buckets had owners).
    pub user_id: String,
    /// The main user's display name.
    pub display_name: String,
    /// The main user's email, for ACL grants by address.
    pub email: Option<String>,
    /// The other users, each with its own key pair ([`crate::User`]).
    pub users: Vec<crate::User>,
    /// Base domain for virtual-hosted-style requests (`bucket.<domain>`); path style always
    /// works.
    pub domain: Option<String>,
    /// What one client may make the server hold, and for how long.
    pub limits: Limits,
    /// Accept AWS Signature Version 2 (`Authorization: AWS key:signature`, or the
    /// `AWSAccessKeyId`/`Signature`/`Expires` query). Off by default: such requests get 403
    /// `AccessDenied`. s3s checks Version 2 with a comparison that is not constant-time and,
    /// in the header form, without looking at the date, so a captured request can be replayed.
    pub sigv2: bool,
    /// When set, `GET /metrics` and `GET /status` require `Authorization: Bearer <token>`
    /// (others get 401). When `None` they are open to anyone who can reach the listener.
    pub operator_token: Option<String>,
    /// The bearer token of the admin API (`/admin/v1/…`, [`crate::admin`]); `None` turns the
    /// API off.
    pub admin_token: Option<String>,
    /// The master key of SSE-S3 and KMS ([`crate::Keyring::load_or_create`]); without one they are
    /// refused (SSE-C needs none).
    pub keyring: crate::Keyring,
}

/// Limits on what one client can make the server hold. Every one has a default
/// ([`Limits::default`]); docs/s3.md has the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once. Past it, new connections wait in the kernel's listen
    /// backlog until one closes.
    pub connections_max: usize,
    /// How long a client may take to send a request's head, and how long an idle keep-alive
    /// connection stays open. Past it, the connection is closed.
    pub header_read_timeout: Duration,
    /// How long a request body may send nothing while the server waits for it (400
    /// `RequestTimeout`, connection closed), and how long a client may read nothing of a
    /// response (connection closed).
    pub body_idle_timeout: Duration,
    /// Bytes of a browser-form POST read to find its fields (the file that follows is never
    /// read: POST uploads are not supported). Past it, 400 `MaxPostPreDataLengthExceeded`.
    pub post_form_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections_max: CONNECTIONS_MAX,
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_idle_timeout: BODY_IDLE_TIMEOUT,
            post_form_bytes_max: POST_FORM_BYTES_MAX,
        }
    }
}

impl Default for S3Config {
    /// 127.0.0.1:9000, `us-east-1`, default limits, SigV2 off, operator endpoints open, and no
    /// key pair (which [`s3_service`] refuses: set one).
    fn default() -> Self {
        S3Config {
            listen: "127.0.0.1:9000".parse().expect("a valid address"),
            region: "us-east-1".into(),
            access_key: String::new(),
            secret_key: String::new(),
            user_id: crate::users::MAIN_ID.to_string(),
            display_name: crate::users::MAIN_ID.to_string(),
            email: None,
            users: Vec::new(),
            domain: None,
            limits: Limits::default(),
            sigv2: false,
            operator_token: None,
            admin_token: None,
            keyring: crate::Keyring::default(),
        }
    }
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("listen", &self.listen)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .field("user_id", &self.user_id)
            .field("display_name", &self.display_name)
            .field("email", &self.email)
            .field("users", &self.users)
            .field("domain", &self.domain)
            .field("limits", &self.limits)
            .field("sigv2", &self.sigv2)
            .field(
                "operator_token",
                &self.operator_token.as_ref().map(|_| "<hidden>"),
            )
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<hidden>"),
            )
            .field("keyring", &self.keyring)
            .finish()
    }
}

impl S3Config {
    /// Every user: the main one (its key pair and identity), then the others.
    pub fn users(&self) -> Result<crate::Users, ServeError> {
        let main = crate::User {
            id: self.user_id.clone(),
            display_name: self.display_name.clone(),
            email: self.email.clone(),
            access_key: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
        };
        let all = std::iter::once(main)
            .chain(self.users.iter().cloned())
            .collect();
        crate::Users::new(all).map_err(ServeError::Config)
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
/// How long a client may take to send a request's head (default of
/// [`Limits::header_read_timeout`]).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once (default of [`Limits::connections_max`]). Each takes a file
/// descriptor.
pub const CONNECTIONS_MAX: usize = 512;
/// How long a body may stall (default of [`Limits::body_idle_timeout`]).
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of a POST form read to find its fields (default of
/// [`Limits::post_form_bytes_max`]).
pub const POST_FORM_BYTES_MAX: usize = 64 << 10;
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
    let l = &cfg.limits;
    if l.connections_max == 0 {
        return Err(ServeError::Config(
            "connections_max must be at least 1".into(),
        ));
    }
    if l.header_read_timeout.is_zero() || l.body_idle_timeout.is_zero() {
        return Err(ServeError::Config(
            "header_read_timeout and body_idle_timeout must be above zero".into(),
        ));
    }
    if l.post_form_bytes_max < 1024 {
        return Err(ServeError::Config(
            "post_form_bytes_max must be at least 1024".into(),
        ));
    }
    if cfg
        .operator_token
        .as_deref()
        .is_some_and(|t| t.trim().is_empty())
    {
        return Err(ServeError::Config(
            "the operator token must not be empty".into(),
        ));
    }
    if cfg
        .admin_token
        .as_deref()
        .is_some_and(|t| t.trim().len() < 16)
    {
        return Err(ServeError::Config(
            "the admin token must be at least 16 characters".into(),
        ));
    }
    let users = cfg.users()?;
    let access_store = store.clone();
    let mut builder = S3ServiceBuilder::new(
        RailS3::new(store, cfg.region.clone())
            .with_keyring(cfg.keyring.clone())
            .with_users(users.clone()),
    );
    // s3s never sees a POST form (the router answers those), but should one get through,
    // these bound what it buffers.
    let mut s3s_config = s3s::config::S3Config::default();
    s3s_config.form_max_fields_size = l.post_form_bytes_max;
    s3s_config.form_max_field_size = l.post_form_bytes_max;
    s3s_config.post_object_max_file_size = 0;
    builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        s3s_config,
    ))));
    builder.set_auth(users.clone());
    builder.set_access(crate::access::Access {
        store: access_store,
        region: cfg.region.clone(),
        users,
    });
    if let Some(d) = &cfg.domain {
        let host = s3s::host::SingleDomain::new(d)
            .map_err(|e| ServeError::Config(format!("domain {d:?}: {e}")))?;
        builder.set_host(host);
    }
    Ok(builder.build())
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
        router: Arc::new(Router {
            s3,
            rail: RailS3::new(store.clone(), cfg.region.clone())
                .with_keyring(cfg.keyring.clone())
                .with_users(cfg.users()?),
            store,
            limits: cfg.limits,
            sigv2: cfg.sigv2,
            operator_token: cfg.operator_token,
            admin_token: cfg.admin_token,
            domain: cfg.domain,
            latency: LatencyHistory::default(),
            volumes: None,
        }),
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
    /// Serves the admin API's volume operations from `volumes`.
    pub fn with_volumes(mut self, volumes: Arc<railstore_volume::Volumes>) -> Server {
        Arc::get_mut(&mut self.router)
            .expect("not serving yet")
            .volumes = Some(volumes);
        self
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes; see [`serve`].
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        tracing::info!("listening on http://{}", self.addr);
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        let connections_max = self.router.limits.connections_max;
        let slots = Arc::new(Semaphore::new(connections_max));
        let full = AtomicBool::new(false);
        // A connection is accepted only with a slot in hand: past the limit, clients wait in
        // the listen backlog.
        let mut slot: Option<OwnedSemaphorePermit> = None;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                permit = next_slot(&slots, &full, connections_max), if slot.is_none() => {
                    slot = Some(permit);
                }
                accepted = self.listener.accept(), if slot.is_some() => match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        let permit = slot.take().expect("accepting only with a slot");
                        conns.spawn(connection(
                            stream,
                            peer,
                            self.router.clone(),
                            stop_rx.clone(),
                            permit,
                        ));
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

/// A connection slot; warns once each time the limit is reached.
async fn next_slot(slots: &Arc<Semaphore>, full: &AtomicBool, max: usize) -> OwnedSemaphorePermit {
    if let Ok(p) = slots.clone().try_acquire_owned() {
        full.store(false, Ordering::Relaxed);
        return p;
    }
    if !full.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            connections_max = max,
            "connection limit reached: new connections wait until one closes"
        );
    }
    slots
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed")
}

/// The address a request came from (its connection's peer), in the request's extensions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub SocketAddr);

async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Arc<Router>,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let limits = router.limits.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let router = router.clone();
        // Policies' `aws:SourceIp` is the TCP peer (policy/condition.rs).
        req.extensions_mut().insert(PeerAddr(peer));
        async move { router.route(req).await }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(REQUEST_HEAD_BYTES_MAX)
        .max_headers(REQUEST_HEADERS_MAX)
        .keep_alive(true);
    let io = IdleWrites::new(stream, limits.body_idle_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
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

/// Answers the operator endpoints, refuses what s3s must not see, and hands the rest to s3s.
struct Router {
    s3: S3Service,
    /// The handlers, for the forms the router answers itself (POST Object).
    rail: RailS3,
    store: Store,
    limits: Limits,
    sigv2: bool,
    operator_token: Option<String>,
    admin_token: Option<String>,
    /// For virtual-hosted-style bucket names (CORS reads them before s3s).
    domain: Option<String>,
    /// S3 requests' latency per second, for the console.
    latency: LatencyHistory,
    /// The store's volumes, for the admin API.
    volumes: Option<Arc<railstore_volume::Volumes>>,
}

impl Router {
    async fn route(&self, req: Request<Incoming>) -> Result<Response<s3s::Body>, HttpError> {
        let id = crate::request_id::next();
        let mut resp = self.answer(req).await?;
        crate::request_id::stamp(&mut resp, &id);
        Ok(resp)
    }

    async fn answer(&self, req: Request<Incoming>) -> Result<Response<s3s::Body>, HttpError> {
        let idle = self.limits.body_idle_timeout;
        let req = req.map(|b| IdleBody::new(b, idle));
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
        // Browsers send preflights unauthenticated; s3s would refuse them.
        if req.method() == Method::OPTIONS {
            let bucket = cors::bucket_of(req.uri(), req.headers(), self.domain.as_deref());
            return Ok(
                match cors::preflight(&self.store, bucket.as_deref(), req.headers()) {
                    cors::Preflight::Allowed(h) => {
                        let mut resp = plain(StatusCode::OK, "text/plain", Bytes::new());
                        resp.headers_mut().extend(h);
                        resp
                    }
                    cors::Preflight::Refused(status, why) => {
                        let code = if status == StatusCode::FORBIDDEN {
                            "AccessForbidden"
                        } else {
                            "BadRequest"
                        };
                        xml_error(status, code, why)
                    }
                },
            );
        }
        // A request with an Origin gets the bucket's CORS headers, whatever its answer.
        let cors = req.headers().contains_key(http::header::ORIGIN).then(|| {
            let bucket = cors::bucket_of(req.uri(), req.headers(), self.domain.as_deref());
            (req.method().clone(), req.headers().clone(), bucket)
        });
        let mut resp = self.dispatch(req).await?;
        if let Some((method, headers, bucket)) = cors {
            cors::decorate(
                &self.store,
                bucket.as_deref(),
                &method,
                &headers,
                resp.headers_mut(),
            );
        }
        Ok(resp)
    }

    /// Everything but preflights: the operator endpoints, the refusals, then s3s.
    async fn dispatch(
        &self,
        req: Request<IdleBody<Incoming>>,
    ) -> Result<Response<s3s::Body>, HttpError> {
        if req.method() == Method::GET
            && !is_signed(&req)
            && matches!(req.uri().path(), "/metrics" | "/status")
        {
            if let Some(token) = &self.operator_token {
                if !guard::bearer_matches(req.headers(), token) {
                    let mut resp = plain(
                        StatusCode::UNAUTHORIZED,
                        "text/plain; charset=utf-8",
                        Bytes::from_static(
                            b"this endpoint needs Authorization: Bearer <operator token>\n",
                        ),
                    );
                    resp.headers_mut().insert(
                        http::header::WWW_AUTHENTICATE,
                        http::HeaderValue::from_static("Bearer realm=\"railstore\""),
                    );
                    return Ok(resp);
                }
            }
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
        if req.uri().path().starts_with(crate::admin::PREFIX) && !is_signed(&req) {
            // The console's files are public (the data they show is not); everything else is
            // authenticated by the admin token. No body is read.
            let resp = match crate::console::asset(req.method(), req.uri().path()) {
                Some(resp) => resp,
                None => {
                    let admin = crate::admin::Admin {
                        store: &self.store,
                        token: self.admin_token.as_deref(),
                        latency: &self.latency,
                        volumes: self.volumes.as_deref(),
                    };
                    admin.answer(&req).await
                }
            };
            return Ok(resp.map(s3s::Body::from));
        }
        let timed = latency::Kind::of(req.method()).map(|kind| (kind, Instant::now()));
        let resp = self.s3_request(req).await;
        if let (Some((kind, started)), Ok(_)) = (timed, &resp) {
            self.latency.record(kind, started.elapsed());
        }
        resp
    }

    /// An S3 request: the refusals before s3s, the forms answered here, then s3s.
    async fn s3_request(
        &self,
        req: Request<IdleBody<Incoming>>,
    ) -> Result<Response<s3s::Body>, HttpError> {
        if !self.sigv2 && guard::is_sigv2(&req) {
            return Ok(closing(xml_error(
                StatusCode::FORBIDDEN,
                "AccessDenied",
                "AWS Signature Version 2 is disabled on this server: sign requests with \
                 Signature Version 4 (or set [server] sigv2 = true).",
            )));
        }
        if let Some(why) = guard::presigned_expiry_refusal(&req) {
            // Before s3s, and before any body byte is read.
            return Ok(closing(xml_error(
                StatusCode::FORBIDDEN,
                "AuthorizationQueryParametersError",
                &why,
            )));
        }
        if guard::is_form_post(&req) {
            return Ok(self.form_post(req).await);
        }
        let attributes = crate::attributes::is_get_object_attributes(req.method(), req.uri());
        let resp = self.s3.call(req.map(s3s::Body::http_body)).await?;
        if attributes {
            return Ok(crate::attributes::unquote_etag(resp).await);
        }
        Ok(resp)
    }

    /// A browser-form POST (POST Object), answered here: s3s would buffer its file, up to
    /// 5 GB, before it checks who sent it (see `post`). The connection closes after the
    /// answer, so nothing after the file (or, when refused, the file) is read.
    async fn form_post(&self, req: Request<IdleBody<Incoming>>) -> Response<s3s::Body> {
        let (parts, body) = req.into_parts();
        let Some(bucket) = cors::bucket_of(&parts.uri, &parts.headers, self.domain.as_deref())
        else {
            return closing(xml_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "POST uploads go to a bucket.",
            ));
        };
        let answer = crate::post::post_object(
            &self.rail,
            &bucket,
            parts.headers.get(http::header::CONTENT_TYPE),
            body,
            self.limits.post_form_bytes_max,
        )
        .await;
        let mut resp = Response::new(s3s::Body::from(answer.body));
        *resp.status_mut() = answer.status;
        *resp.headers_mut() = answer.headers;
        closing(resp)
    }
}

/// `GET /metrics` could also be ListObjects on a bucket named `metrics`: a signed request is
/// that, an unsigned one (or one with a bearer token) the operator endpoint.
fn is_signed<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .any(|v| guard::bearer(v.as_bytes()).is_none())
        || guard::query_keys(req.uri().query().unwrap_or_default()).any(|k| {
            k.eq_ignore_ascii_case("X-Amz-Signature") || k.eq_ignore_ascii_case("Signature")
        })
}

/// Marks a response after which the connection closes, so the rest of a request body is not
/// read.
fn closing(mut resp: Response<s3s::Body>) -> Response<s3s::Body> {
    resp.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    resp
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
