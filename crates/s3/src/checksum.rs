//! Flexible checksums (CRC32, CRC32C, CRC64NVME, SHA-1, SHA-256): which ones a request
//! carries (headers, an aws-chunked trailer, or only an algorithm to compute), checking them
//! while the body streams, and composing a multipart object's checksum from its parts'.

use crate::errors::invalid_request;
use bytes::Bytes;
use futures_util::Stream;
use http::HeaderMap;
use railstore_store::StoreError;
use s3s::crypto::Checksum as _;
use s3s::dto::StreamingBlob;
use s3s::{S3Error, S3ErrorCode, S3Result, TrailingHeaders};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// A checksum algorithm S3 knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Crc32,
        Algorithm::Crc32c,
        Algorithm::Crc64Nvme,
        Algorithm::Sha1,
        Algorithm::Sha256,
    ];

    /// The name S3 uses (`CRC32`, …), also the key in the store's checksum maps.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "CRC32",
            Algorithm::Crc32c => "CRC32C",
            Algorithm::Crc64Nvme => "CRC64NVME",
            Algorithm::Sha1 => "SHA1",
            Algorithm::Sha256 => "SHA256",
        }
    }

    pub fn parse(s: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
    }

    /// The request and response header carrying its value.
    pub fn header(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "x-amz-checksum-crc32",
            Algorithm::Crc32c => "x-amz-checksum-crc32c",
            Algorithm::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Algorithm::Sha1 => "x-amz-checksum-sha1",
            Algorithm::Sha256 => "x-amz-checksum-sha256",
        }
    }

    fn from_header(h: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.header().eq_ignore_ascii_case(h.trim()))
    }

    /// Bytes of a digest.
    pub fn len(self) -> usize {
        match self {
            Algorithm::Crc32 | Algorithm::Crc32c => 4,
            Algorithm::Crc64Nvme => 8,
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
        }
    }

    fn crc(self) -> Option<crc_fast::CrcAlgorithm> {
        match self {
            Algorithm::Crc32 => Some(crc_fast::CrcAlgorithm::Crc32IsoHdlc),
            Algorithm::Crc32c => Some(crc_fast::CrcAlgorithm::Crc32Iscsi),
            Algorithm::Crc64Nvme => Some(crc_fast::CrcAlgorithm::Crc64Nvme),
            Algorithm::Sha1 | Algorithm::Sha256 => None,
        }
    }

    /// Whether a multipart object may carry a full-object checksum of this kind (CRCs can be
    /// combined; hashes cannot).
    pub fn combinable(self) -> bool {
        self.crc().is_some()
    }
}

/// A running digest.
pub(crate) enum Hasher {
    Crc32(s3s::crypto::Crc32),
    Crc32c(s3s::crypto::Crc32c),
    Crc64Nvme(s3s::crypto::Crc64Nvme),
    Sha1(s3s::crypto::Sha1),
    Sha256(s3s::crypto::Sha256),
}

impl Hasher {
    pub fn new(a: Algorithm) -> Hasher {
        match a {
            Algorithm::Crc32 => Hasher::Crc32(s3s::crypto::Crc32::new()),
            Algorithm::Crc32c => Hasher::Crc32c(s3s::crypto::Crc32c::new()),
            Algorithm::Crc64Nvme => Hasher::Crc64Nvme(s3s::crypto::Crc64Nvme::new()),
            Algorithm::Sha1 => Hasher::Sha1(s3s::crypto::Sha1::new()),
            Algorithm::Sha256 => Hasher::Sha256(s3s::crypto::Sha256::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Crc32(h) => h.update(data),
            Hasher::Crc32c(h) => h.update(data),
            Hasher::Crc64Nvme(h) => h.update(data),
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
        }
    }

    pub fn finalize(self) -> Vec<u8> {
        match self {
            Hasher::Crc32(h) => h.finalize().to_vec(),
            Hasher::Crc32c(h) => h.finalize().to_vec(),
            Hasher::Crc64Nvme(h) => h.finalize().to_vec(),
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

/// The digest of `data`.
#[cfg(test)]
pub(crate) fn digest(a: Algorithm, data: &[u8]) -> Vec<u8> {
    let mut h = Hasher::new(a);
    h.update(data);
    h.finalize()
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64_simd::STANDARD.encode_to_string(bytes)
}

pub(crate) fn unb64(s: &str) -> Option<Vec<u8>> {
    base64_simd::STANDARD.decode_to_vec(s.trim()).ok()
}

/// Decodes a checksum value as a client sent it; `None` when it is not base64 of the right
/// length.
pub(crate) fn decode_value(a: Algorithm, s: &str) -> Option<Vec<u8>> {
    unb64(s).filter(|v| v.len() == a.len())
}

fn invalid_value(a: Algorithm) -> S3Error {
    invalid_request(format!("Value for {} header is invalid.", a.header()))
}

/// What a request says about the checksum of its body.
#[derive(Debug, Default, Clone)]
pub(crate) struct Plan {
    /// Values given in headers, decoded.
    pub known: Vec<(Algorithm, Vec<u8>)>,
    /// An algorithm whose value arrives in the aws-chunked trailer.
    pub trailer: Option<Algorithm>,
    /// An algorithm to compute and store although the client sent no value for it.
    pub computed: Option<Algorithm>,
}

impl Plan {
    /// Reads the checksum headers of a put or part upload. `values` are the
    /// `x-amz-checksum-*` headers as s3s parsed them, `declared` the
    /// `x-amz-sdk-checksum-algorithm` header, `required` the algorithm the multipart upload
    /// was created with (its parts must carry it; the server computes it when they do not).
    pub fn from_request(
        values: [(Algorithm, Option<&String>); 5],
        declared: Option<&str>,
        required: Option<Algorithm>,
        headers: &HeaderMap,
        trailers: Option<&TrailingHeaders>,
    ) -> S3Result<Plan> {
        let mut plan = Plan::default();
        for (a, v) in values {
            if let Some(v) = v {
                let raw = decode_value(a, v).ok_or_else(|| invalid_value(a))?;
                plan.known.push((a, raw));
            }
        }
        if trailers.is_some() {
            if let Some(t) = headers.get("x-amz-trailer").and_then(|v| v.to_str().ok()) {
                let algs: Vec<Algorithm> =
                    t.split(',').filter_map(Algorithm::from_header).collect();
                if algs.len() > 1 {
                    return Err(multiple());
                }
                plan.trailer = algs.first().copied();
            }
        }
        let given = plan.known.len() + usize::from(plan.trailer.is_some());
        if given > 1 {
            return Err(multiple());
        }
        let sent = plan.known.first().map(|(a, _)| *a).or(plan.trailer);
        if let Some(d) = declared {
            let d = Algorithm::parse(d).ok_or_else(|| {
                invalid_request("Value for x-amz-sdk-checksum-algorithm header is invalid.")
            })?;
            match sent {
                Some(s) if s != d => {
                    return Err(invalid_request(format!(
                        "Value for x-amz-sdk-checksum-algorithm header is invalid: {} was \
                         declared but {} sent.",
                        d.name(),
                        s.name()
                    )))
                }
                Some(_) => {}
                None => plan.computed = Some(d),
            }
        }
        if let Some(r) = required {
            match sent.or(plan.computed) {
                Some(s) if s != r => {
                    return Err(invalid_request(format!(
                        "Checksum Type mismatch occurred, expected checksum Type: {}, actual \
                         checksum Type: {}",
                        r.name().to_ascii_lowercase(),
                        s.name().to_ascii_lowercase()
                    )))
                }
                Some(_) => {}
                None => plan.computed = Some(r),
            }
        }
        Ok(plan)
    }

    /// Whether some value becomes known only once the whole body has been read.
    pub fn has_late_values(&self) -> bool {
        self.trailer.is_some() || self.computed.is_some()
    }

    /// The values known before the body is read, by algorithm name.
    pub fn early_values(&self) -> BTreeMap<String, String> {
        self.known
            .iter()
            .map(|(a, v)| (a.name().to_string(), b64(v)))
            .collect()
    }

    fn algorithms(&self) -> Vec<Algorithm> {
        let mut v: Vec<Algorithm> = self.known.iter().map(|(a, _)| *a).collect();
        v.extend(self.trailer);
        v.extend(self.computed);
        v.sort();
        v.dedup();
        v
    }
}

fn multiple() -> S3Error {
    invalid_request(
        "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
    )
}

/// Checks a body against its [`Plan`] while it streams.
pub(crate) struct Verifier {
    plan: Plan,
    hashers: Vec<(Algorithm, Hasher)>,
    trailers: Option<TrailingHeaders>,
}

impl Verifier {
    pub fn new(plan: Plan, trailers: Option<TrailingHeaders>) -> Verifier {
        let hashers = plan
            .algorithms()
            .into_iter()
            .map(|a| (a, Hasher::new(a)))
            .collect();
        Verifier {
            plan,
            hashers,
            trailers,
        }
    }

    fn update(&mut self, data: &[u8]) {
        for (_, h) in &mut self.hashers {
            h.update(data);
        }
    }

    /// Compares what was computed with what was sent; returns the values (by algorithm
    /// name, base64), or what did not match.
    fn finish(self) -> Result<BTreeMap<String, String>, String> {
        let mut out = BTreeMap::new();
        for (a, h) in self.hashers {
            let got = h.finalize();
            if let Some((_, want)) = self.plan.known.iter().find(|(k, _)| *k == a) {
                if *want != got {
                    return Err(format!(
                        "The {} you specified did not match the calculated checksum.",
                        a.name()
                    ));
                }
            }
            if self.plan.trailer == Some(a) {
                let sent = self
                    .trailers
                    .as_ref()
                    .and_then(|t| t.read(|m| m.get(a.header()).cloned()))
                    .flatten();
                let sent = sent
                    .as_ref()
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| decode_value(a, v));
                match sent {
                    None => {
                        return Err(format!(
                            "The trailing {} is missing or malformed.",
                            a.header()
                        ))
                    }
                    Some(want) if want != got => {
                        return Err(format!(
                            "The {} you specified did not match the calculated checksum.",
                            a.name()
                        ))
                    }
                    Some(_) => {}
                }
            }
            out.insert(a.name().to_string(), b64(&got));
        }
        Ok(out)
    }
}

/// Where a body stream leaves what it learnt: the checksum values once the body has been read
/// and checked, or the S3 error its failure should produce (the store only sees a
/// `StoreError`).
#[derive(Clone, Default)]
pub(crate) struct Outcome(Arc<Mutex<OutcomeInner>>);

#[derive(Default)]
struct OutcomeInner {
    values: Option<BTreeMap<String, String>>,
    fault: Option<(S3ErrorCode, u16, String)>,
}

impl Outcome {
    /// The checksum values, once the body was read to its end and matched.
    pub fn values(&self) -> Option<BTreeMap<String, String>> {
        self.0.lock().unwrap().values.clone()
    }

    /// The S3 error for a failed body, if the failure was the body's.
    pub fn fault(&self) -> Option<S3Error> {
        let g = self.0.lock().unwrap();
        g.fault.as_ref().map(|(code, status, msg)| {
            let mut e = S3Error::with_message(code.clone(), msg.clone());
            if let Ok(s) = http::StatusCode::from_u16(*status) {
                e.set_status_code(s);
            }
            e
        })
    }

    /// Turns a store error from an operation that read this body into the S3 error to send.
    pub fn error(&self, e: StoreError) -> S3Error {
        match (&e, self.fault()) {
            (StoreError::Body(_) | StoreError::BadDigest(_), Some(f)) => f,
            _ => crate::errors::store_error(e),
        }
    }
}

/// Classifies an error of the request body stream as s3s reports it (its error types are
/// private, so by their text).
fn classify(e: &(dyn std::error::Error + 'static)) -> (S3ErrorCode, u16, String) {
    let text = e.to_string();
    if text.contains("Sha256Mismatch") {
        (
            S3ErrorCode::from_bytes(b"XAmzContentSHA256Mismatch").expect("a code"),
            400,
            "The provided 'x-amz-content-sha256' header does not match what was computed.".into(),
        )
    } else if text.contains(crate::guard::BODY_IDLE_MARKER) {
        (
            S3ErrorCode::RequestTimeout,
            400,
            "Your socket connection to the server was not read from or written to within the \
             timeout period."
                .into(),
        )
    } else if text.contains("SignatureMismatch") {
        (
            S3ErrorCode::SignatureDoesNotMatch,
            403,
            "The chunk signature does not match.".into(),
        )
    } else {
        (
            S3ErrorCode::IncompleteBody,
            400,
            format!("The request body could not be read: {text}"),
        )
    }
}

/// The request body as the store reads it: every piece passes through the [`Verifier`]; a
/// mismatch at the end becomes a final `Err(BadDigest)`, so the store keeps nothing.
pub(crate) struct Verified {
    blob: Option<StreamingBlob>,
    verifier: Option<Verifier>,
    outcome: Outcome,
}

impl Verified {
    pub fn new(blob: Option<StreamingBlob>, verifier: Verifier, outcome: Outcome) -> Verified {
        Verified {
            blob,
            verifier: Some(verifier),
            outcome,
        }
    }

    fn fail(
        &mut self,
        fault: (S3ErrorCode, u16, String),
        e: StoreError,
    ) -> Poll<Option<Result<Bytes, StoreError>>> {
        self.blob = None;
        self.verifier = None;
        self.outcome.0.lock().unwrap().fault = Some(fault);
        Poll::Ready(Some(Err(e)))
    }
}

impl Stream for Verified {
    type Item = Result<Bytes, StoreError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(verifier) = this.verifier.as_mut() else {
            return Poll::Ready(None);
        };
        let next = match this.blob.as_mut() {
            Some(b) => match Pin::new(b).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(n) => n,
            },
            None => None,
        };
        match next {
            Some(Ok(bytes)) => {
                verifier.update(&bytes);
                Poll::Ready(Some(Ok(bytes)))
            }
            Some(Err(e)) => {
                let fault = classify(e.as_ref());
                let msg = fault.2.clone();
                this.fail(fault, StoreError::Body(msg))
            }
            None => {
                this.blob = None;
                let verifier = this.verifier.take().expect("checked above");
                match verifier.finish() {
                    Ok(values) => {
                        this.outcome.0.lock().unwrap().values = Some(values);
                        Poll::Ready(None)
                    }
                    Err(msg) => this.fail(
                        (S3ErrorCode::BadDigest, 400, msg.clone()),
                        StoreError::BadDigest(msg),
                    ),
                }
            }
        }
    }
}

/// The checksum of a multipart object from its parts' (raw values and sizes, in order):
/// `FULL_OBJECT` combines CRCs into the checksum of the whole body; `COMPOSITE` is the
/// checksum of the concatenated part checksums, suffixed `-N`, as S3 computes them.
pub(crate) fn compose(a: Algorithm, full_object: bool, parts: &[(Vec<u8>, u64)]) -> Option<String> {
    if parts.is_empty() {
        return None;
    }
    if full_object {
        let crc = a.crc()?;
        let as_u64 = |raw: &[u8]| raw.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let mut acc = as_u64(&parts[0].0);
        for (raw, size) in &parts[1..] {
            acc = crc_fast::checksum_combine(crc, acc, as_u64(raw), *size);
        }
        let bytes = acc.to_be_bytes();
        return Some(b64(&bytes[8 - a.len()..]));
    }
    let mut h = Hasher::new(a);
    for (raw, _) in parts {
        h.update(raw);
    }
    Some(format!("{}-{}", b64(&h.finalize()), parts.len()))
}

/// `COMPOSITE` or `FULL_OBJECT`, from a stored value.
pub(crate) fn checksum_type(value: &str) -> &'static str {
    if value.contains('-') {
        s3s::dto::ChecksumType::COMPOSITE
    } else {
        s3s::dto::ChecksumType::FULL_OBJECT
    }
}

/// The value of one algorithm in a stored map.
pub(crate) fn stored(map: &BTreeMap<String, String>, a: Algorithm) -> Option<String> {
    map.get(a.name()).filter(|v| !v.is_empty()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(v: &[u8]) -> String {
        v.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn digests_match_the_reference_check_values() {
        // The "check" values of the CRC catalogue, and the SHA test vectors.
        let data = b"123456789";
        assert_eq!(hex(&digest(Algorithm::Crc32, data)), "cbf43926");
        assert_eq!(hex(&digest(Algorithm::Crc32c, data)), "e3069283");
        assert_eq!(hex(&digest(Algorithm::Crc64Nvme, data)), "ae8b14860a799888");
        assert_eq!(
            hex(&digest(Algorithm::Sha1, b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&digest(Algorithm::Sha256, b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn full_object_composition_is_the_checksum_of_the_whole_body() {
        let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let cuts = [0usize, 40_000, 40_001, 99_000, 100_000];
        for a in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme] {
            let parts: Vec<(Vec<u8>, u64)> = cuts
                .windows(2)
                .map(|w| (digest(a, &body[w[0]..w[1]]), (w[1] - w[0]) as u64))
                .collect();
            assert_eq!(
                compose(a, true, &parts),
                Some(b64(&digest(a, &body))),
                "{a:?}"
            );
        }
        assert_eq!(compose(Algorithm::Sha256, true, &[(vec![0; 32], 1)]), None);
    }

    #[test]
    fn composite_checksums_follow_s3() {
        let p1 = digest(Algorithm::Sha256, b"part one");
        let p2 = digest(Algorithm::Sha256, b"part two");
        let mut both = p1.clone();
        both.extend_from_slice(&p2);
        let want = format!("{}-2", b64(&digest(Algorithm::Sha256, &both)));
        assert_eq!(
            compose(Algorithm::Sha256, false, &[(p1, 8), (p2, 8)]),
            Some(want.clone())
        );
        assert_eq!(checksum_type(&want), "COMPOSITE");
        assert_eq!(checksum_type("AAAAAA=="), "FULL_OBJECT");
    }

    #[test]
    fn plans_refuse_contradictions() {
        let h = HeaderMap::new();
        let v = b64(&digest(Algorithm::Crc32, b"x"));
        let none = [
            (Algorithm::Crc32, None),
            (Algorithm::Crc32c, None),
            (Algorithm::Crc64Nvme, None),
            (Algorithm::Sha1, None),
            (Algorithm::Sha256, None),
        ];
        let mut one = none;
        one[0].1 = Some(&v);
        let p = Plan::from_request(one, Some("crc32"), None, &h, None).unwrap();
        assert_eq!(p.known.len(), 1);
        assert!(!p.has_late_values());
        let mut two = one;
        two[1].1 = Some(&v);
        assert!(Plan::from_request(two, None, None, &h, None).is_err());
        assert!(Plan::from_request(one, Some("SHA256"), None, &h, None).is_err());
        let bad = "not base64".to_string();
        let mut b = none;
        b[0].1 = Some(&bad);
        assert!(Plan::from_request(b, None, None, &h, None).is_err());
        let p = Plan::from_request(none, Some("SHA1"), None, &h, None).unwrap();
        assert_eq!(p.computed, Some(Algorithm::Sha1));
        let p = Plan::from_request(none, None, Some(Algorithm::Crc32c), &h, None).unwrap();
        assert_eq!(p.computed, Some(Algorithm::Crc32c));
        assert!(Plan::from_request(one, None, Some(Algorithm::Crc32c), &h, None).is_err());
    }
}
