//! A server over an in-memory store on 127.0.0.1:0, the official SDK pointed at it, and a
//! bare HTTP/1.1 client for what the SDK will not send.

use aws_sdk_s3::config::http::HttpRequest;
use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, ConfigBag, Credentials, Intercept, Region, RequestChecksumCalculation,
    RuntimeComponents,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::Client;
use railstore_s3::S3Config;
use railstore_store::{DeviceKind, DevicesConfig, SeparationConfig, Store, StoreConfig};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

pub const ACCESS_KEY: &str = "AKIDRAILSTORETEST";
pub const SECRET_KEY: &str = "railstore/test/secret/key/0123456789abcdef";
pub const REGION: &str = "us-east-1";

pub struct TestServer {
    pub addr: SocketAddr,
    pub store: Store,
    pub client: Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), railstore_s3::ServeError>>>,
}

/// A store of 6 memory devices with the default policy (rep3 / pack3+3 / split3+3), without
/// read/write separation.
pub async fn start() -> TestServer {
    start_with(false).await
}

pub async fn start_with(separation: bool) -> TestServer {
    start_configured(separation, |_| {}).await
}

/// As [`start`], with the endpoint's configuration changed by `tweak` first.
pub async fn start_configured(separation: bool, tweak: impl FnOnce(&mut S3Config)) -> TestServer {
    let config = StoreConfig {
        devices: DevicesConfig {
            kind: DeviceKind::Mem,
            count: 6,
            paths: Vec::new(),
            capacity_bytes: 1 << 30,
            direct_io: false,
        },
        separation: separation.then_some(SeparationConfig {
            frame: Duration::from_millis(500),
            window: 3,
            window_max: None,
            adaptive: true,
            guard: Duration::from_millis(20),
            write_buffer_bytes_max: 256 << 20,
            partial_when_full: false,
            journal_copies: None,
        }),
        ..StoreConfig::default()
    };
    let store = Store::open(config).await.expect("opening the store");
    let mut s3 = S3Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        region: REGION.into(),
        access_key: ACCESS_KEY.into(),
        secret_key: SECRET_KEY.into(),
        ..S3Config::default()
    };
    tweak(&mut s3);
    let server = railstore_s3::bind(store.clone(), s3)
        .await
        .expect("binding");
    let addr = server.local_addr();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async move {
        let _ = rx.await;
    }));
    TestServer {
        addr,
        store,
        client: client(
            addr,
            ACCESS_KEY,
            SECRET_KEY,
            RequestChecksumCalculation::WhenSupported,
        ),
        stop: Some(tx),
        task: Some(task),
    }
}

impl TestServer {
    /// Stops serving, then shuts the store down; both must succeed.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task
            .take()
            .unwrap()
            .await
            .expect("server task")
            .expect("serve returns Ok");
        self.store.shutdown().await.expect("store shutdown");
    }

    pub fn client_with(&self, checksums: RequestChecksumCalculation) -> Client {
        client(self.addr, ACCESS_KEY, SECRET_KEY, checksums)
    }

    /// Creates a bucket and returns its name.
    pub async fn bucket(&self, name: &str) -> String {
        self.client
            .create_bucket()
            .bucket(name)
            .send()
            .await
            .expect("create bucket");
        name.to_string()
    }

    pub async fn put(&self, bucket: &str, key: &str, body: impl Into<Vec<u8>>) -> String {
        let out = self
            .client
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(body.into().into())
            .send()
            .await
            .unwrap_or_else(|e| panic!("put {key}: {}", describe(&e)));
        out.e_tag.expect("an ETag")
    }

    pub async fn get(&self, bucket: &str, key: &str) -> Vec<u8> {
        let out = self
            .client
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("get {key}: {}", describe(&e)));
        out.body.collect().await.unwrap().into_bytes().to_vec()
    }

    /// A bare request; returns status, headers (lower-case names) and body.
    pub async fn raw(&self, request: &[u8]) -> Raw {
        raw(self.addr, request).await
    }

    /// Sends a request signed with SigV4 (header auth) for `payload` (how the body is
    /// signed); `headers` are signed too. Returns the response as [`Raw`].
    pub async fn signed(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(&str, String)],
        body: &[u8],
        payload: aws_sigv4::http_request::SignableBody<'_>,
    ) -> Raw {
        let head = self.signed_head(method, path_and_query, headers, body.len() as u64, payload);
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        self.raw(&bytes).await
    }

    /// The head of a request signed as [`TestServer::signed`] signs it, for a body of
    /// `body_len` bytes sent separately; it ends with `connection: close` and the blank line.
    pub fn signed_head(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(&str, String)],
        body_len: u64,
        payload: aws_sigv4::http_request::SignableBody<'_>,
    ) -> String {
        use aws_sigv4::http_request::{
            sign, PayloadChecksumKind, SignableRequest, SigningSettings,
        };
        let host = self.addr.to_string();
        let mut all: Vec<(&str, &str)> = vec![("host", host.as_str())];
        all.extend(headers.iter().map(|(k, v)| (*k, v.as_str())));
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let identity = Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "test").into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(REGION)
            .name("s3")
            .time(std::time::SystemTime::now())
            .settings(settings)
            .build()
            .unwrap()
            .into();
        let uri = format!("http://{host}{path_and_query}");
        let signable = SignableRequest::new(method, uri, all.iter().copied(), payload).unwrap();
        let (instructions, _) = sign(signable, &params).unwrap().into_parts();
        let mut req = format!("{method} {path_and_query} HTTP/1.1\r\n");
        for (k, v) in &all {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        for (k, v) in instructions.headers() {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str(&format!(
            "content-length: {body_len}\r\nconnection: close\r\n\r\n"
        ));
        req
    }

    /// A GET of a presigned URL for the object: the response as [`Raw`].
    pub async fn presigned_get(&self, bucket: &str, key: &str) -> Raw {
        self.presigned_get_with(bucket, key, "").await
    }

    /// As [`TestServer::presigned_get`], with more (unsigned) header lines, each ending in
    /// `\r\n`.
    pub async fn presigned_get_with(&self, bucket: &str, key: &str, extra: &str) -> Raw {
        let p = self
            .client
            .get_object()
            .bucket(bucket)
            .key(key)
            .presigned(
                aws_sdk_s3::presigning::PresigningConfig::expires_in(Duration::from_secs(300))
                    .unwrap(),
            )
            .await
            .unwrap();
        let uri: http::Uri = p.uri().parse().unwrap();
        let req = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\n{extra}Connection: close\r\n\r\n",
            uri.path_and_query().unwrap(),
            uri.authority().unwrap()
        );
        self.raw(req.as_bytes()).await
    }
}

/// Methods that start a request on one object, its bucket and key set, for a test to add to
/// and send: `s.put_request(&b, "k").body(…).send()`.
macro_rules! object_requests {
    ($($method:ident: $operation:ident -> $builder:ty;)*) => {
        impl TestServer {
            $(
                pub fn $method(&self, bucket: impl Into<String>, key: impl Into<String>) -> $builder {
                    self.client.$operation().bucket(bucket).key(key)
                }
            )*
        }
    };
}

object_requests! {
    put_request: put_object -> aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder;
    get_request: get_object -> aws_sdk_s3::operation::get_object::builders::GetObjectFluentBuilder;
    head_request: head_object -> aws_sdk_s3::operation::head_object::builders::HeadObjectFluentBuilder;
    copy_request: copy_object -> aws_sdk_s3::operation::copy_object::builders::CopyObjectFluentBuilder;
    create_upload_request: create_multipart_upload -> aws_sdk_s3::operation::create_multipart_upload::builders::CreateMultipartUploadFluentBuilder;
    upload_part_request: upload_part -> aws_sdk_s3::operation::upload_part::builders::UploadPartFluentBuilder;
    complete_request: complete_multipart_upload -> aws_sdk_s3::operation::complete_multipart_upload::builders::CompleteMultipartUploadFluentBuilder;
}

/// Methods that start a request on one bucket, as [`object_requests`] on one object.
macro_rules! bucket_requests {
    ($($method:ident: $operation:ident -> $builder:ty;)*) => {
        impl TestServer {
            $(
                pub fn $method(&self, bucket: impl Into<String>) -> $builder {
                    self.client.$operation().bucket(bucket)
                }
            )*
        }
    };
}

bucket_requests! {
    list_v2_request: list_objects_v2 -> aws_sdk_s3::operation::list_objects_v2::builders::ListObjectsV2FluentBuilder;
    list_v1_request: list_objects -> aws_sdk_s3::operation::list_objects::builders::ListObjectsFluentBuilder;
    list_versions_request: list_object_versions -> aws_sdk_s3::operation::list_object_versions::builders::ListObjectVersionsFluentBuilder;
}

pub fn client(
    addr: SocketAddr,
    access_key: &str,
    secret_key: &str,
    checksums: RequestChecksumCalculation,
) -> Client {
    client_in(addr, access_key, secret_key, checksums, REGION)
}

/// As [`client`], signing for `region`.
pub fn client_in(
    addr: SocketAddr,
    access_key: &str,
    secret_key: &str,
    checksums: RequestChecksumCalculation,
    region: &'static str,
) -> Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .endpoint_url(format!("http://{addr}"))
        .force_path_style(true)
        .credentials_provider(Credentials::new(access_key, secret_key, None, None, "test"))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .retry_config(RetryConfig::disabled())
        .request_checksum_calculation(checksums)
        .build();
    Client::from_conf(conf)
}

/// The S3 error code of a failed SDK call.
pub fn code<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> Option<String> {
    match e {
        SdkError::ServiceError(s) => s.err().code().map(str::to_string),
        _ => None,
    }
}

/// The HTTP status of a failed SDK call.
pub fn status<E>(e: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

pub fn describe<E: std::fmt::Debug, R: std::fmt::Debug>(e: &SdkError<E, R>) -> String {
    format!("{e:?}")
}

/// Deterministic bytes, different for every `seed`.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A CompleteMultipartUpload body listing `(part number, ETag)`s.
pub fn completed(parts: &[(i32, String)]) -> aws_sdk_s3::types::CompletedMultipartUpload {
    aws_sdk_s3::types::CompletedMultipartUpload::builder()
        .set_parts(Some(
            parts
                .iter()
                .map(|(n, e)| {
                    aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(*n)
                        .e_tag(e)
                        .build()
                })
                .collect(),
        ))
        .build()
}

pub fn md5_hex(data: &[u8]) -> String {
    use s3s::crypto::Checksum;
    s3s::crypto::Md5::checksum(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn b64(bytes: &[u8]) -> String {
    base64_simd::STANDARD.encode_to_string(bytes)
}

/// An interceptor that changes the request after it was signed (to send what a broken or
/// malicious client would).
#[derive(Clone)]
pub struct AfterSigning(pub Arc<dyn Fn(&mut HttpRequest) + Send + Sync>);

impl std::fmt::Debug for AfterSigning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterSigning")
    }
}

impl Intercept for AfterSigning {
    fn name(&self) -> &'static str {
        "AfterSigning"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        (self.0)(context.request_mut());
        Ok(())
    }
}

/// Records the headers of the requests it sees.
#[derive(Clone, Debug, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<Headers>>>);

/// Header names (lower case) and values of one request.
pub type Headers = Vec<(String, String)>;

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "Recorder"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let h = context
            .request()
            .headers()
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        self.0.lock().unwrap().push(h);
        Ok(())
    }
}

impl Recorder {
    pub fn header(&self, name: &str) -> Option<String> {
        let g = self.0.lock().unwrap();
        g.last()?
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `request` as is (it should say `Connection: close`) and reads the whole response.
pub async fn raw(addr: SocketAddr, request: &[u8]) -> Raw {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut buf = Vec::new();
    // The server may answer and close before reading everything we sent.
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf)).await;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(&buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = buf[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let size_text = String::from_utf8_lossy(&rest[..eol]);
            let size =
                usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
            rest = &rest[eol + 2 + size + 2..];
        }
        body = out;
    }
    Raw {
        status,
        headers,
        body,
    }
}

/// HMAC-SHA1 (RFC 2104), for Signature Version 2.
pub fn hmac_sha1(key: &[u8], msg: &[u8]) -> Vec<u8> {
    use s3s::crypto::{Checksum, Sha1};
    let mut k = if key.len() > 64 {
        Sha1::checksum(key).as_ref().to_vec()
    } else {
        key.to_vec()
    };
    k.resize(64, 0);
    let pad = |x: u8| k.iter().map(|b| b ^ x).collect::<Vec<u8>>();
    let mut inner = Sha1::new();
    inner.update(&pad(0x36));
    inner.update(msg);
    let inner = inner.finalize();
    let mut outer = Sha1::new();
    outer.update(&pad(0x5c));
    outer.update(inner.as_ref());
    outer.finalize().as_ref().to_vec()
}
