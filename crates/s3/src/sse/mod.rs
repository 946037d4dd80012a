//! Server-side encryption (docs/s3.md, "Server-side encryption"): SSE-C (the client's key,
//! never stored; its MD5 is), SSE-S3 (`AES256`) and SSE-KMS (`aws:kms`, a key id per object,
//! each id a key derived from the master key), and bucket default encryption.
//!
//! What the operations use: [`requested`] reads a write's headers into a [`Scheme`],
//! [`Sealed::new`] makes an object's data key and the record of it kept in the object's
//! stored headers, [`Sealed::open`] gets the key back for a read (checking an SSE-C key), and
//! [`Answer`] fills the responses' encryption headers.

mod bucket;
mod cipher;
mod keys;

pub(crate) use bucket::{
    bucket_default, delete_bucket_encryption, get_bucket_encryption, put_bucket_encryption,
};
pub(crate) use cipher::DataKey;
use cipher::{Decrypting, Encrypting, PartMap};
pub use keys::Keyring;

use crate::checksum::{b64, unb64};
use crate::errors::{err, invalid_argument, invalid_request, not_implemented};
use http::{HeaderMap, HeaderName, HeaderValue};
use md5::{Digest, Md5};
use railstore_store::{Body, ObjectInfo, PartOptions, SentMd5};
use s3s::dto::ServerSideEncryption;
use s3s::{S3ErrorCode, S3Result};
use std::collections::BTreeMap;
use zeroize::Zeroizing;

/// The stored headers (never sent to clients) that hold an object's encryption.
const MODE: &str = "x-railstore-sse";
const SEALED_KEY: &str = "x-railstore-sse-sealed-key";
const IV: &str = "x-railstore-sse-iv";
const KMS_KEY_ID: &str = "x-railstore-sse-kms-key-id";
const CUSTOMER_KEY_MD5: &str = "x-railstore-sse-customer-key-md5";

const AES256: &str = ServerSideEncryption::AES256;
const AWS_KMS: &str = ServerSideEncryption::AWS_KMS;
/// The stored mode of SSE-C objects.
const CUSTOMER: &str = "SSE-C";

/// A customer's key (SSE-C), checked against its MD5.
#[derive(Clone)]
pub(crate) struct CustomerKey {
    key: keys::Key,
    /// Base64, as the headers carry it.
    md5: String,
}

/// How a write asks its object to be encrypted.
#[derive(Clone)]
pub(crate) enum Scheme {
    Customer(CustomerKey),
    S3,
    Kms(String),
}

impl Scheme {
    fn mode(&self) -> &'static str {
        match self {
            Scheme::Customer(_) => CUSTOMER,
            Scheme::S3 => AES256,
            Scheme::Kms(_) => AWS_KMS,
        }
    }
}

/// The SSE-C headers of a request: algorithm, key, key MD5.
pub(crate) struct CustomerHeaders<'a> {
    pub algorithm: Option<&'a String>,
    pub key: Option<&'a String>,
    pub key_md5: Option<&'a String>,
}

/// The SSE-C headers of an input: `copy_source` for the copy-source ones.
macro_rules! customer_headers {
    ($input:expr) => {
        $crate::sse::CustomerHeaders {
            algorithm: $input.sse_customer_algorithm.as_ref(),
            key: $input.sse_customer_key.as_ref(),
            key_md5: $input.sse_customer_key_md5.as_ref(),
        }
    };
    ($input:expr, copy_source) => {
        $crate::sse::CustomerHeaders {
            algorithm: $input.copy_source_sse_customer_algorithm.as_ref(),
            key: $input.copy_source_sse_customer_key.as_ref(),
            key_md5: $input.copy_source_sse_customer_key_md5.as_ref(),
        }
    };
}
pub(crate) use customer_headers;

/// The customer key a request gives, if any, checked: AES256, 32 bytes, the MD5 it states.
pub(crate) fn customer(h: CustomerHeaders<'_>) -> S3Result<Option<CustomerKey>> {
    let (algorithm, key) = match (h.algorithm, h.key) {
        (None, None) if h.key_md5.is_none() => return Ok(None),
        (Some(a), Some(k)) => (a, k),
        (Some(_), None) | (None, None) => {
            return Err(invalid_argument(
                "Requests specifying Server Side Encryption with Customer provided keys must \
                 provide an appropriate secret key.",
            ))
        }
        (None, Some(_)) => {
            return Err(invalid_argument(
                "Requests specifying Server Side Encryption with Customer provided keys must \
                 provide a valid encryption algorithm.",
            ))
        }
    };
    if algorithm != AES256 {
        return Err(err(
            S3ErrorCode::InvalidEncryptionAlgorithmError,
            "The encryption request you specified is not valid. The valid value is AES256.",
        ));
    }
    let raw = Zeroizing::new(unb64(key).unwrap_or_default());
    let Ok(bytes) = <[u8; 32]>::try_from(&raw[..]) else {
        return Err(invalid_argument(
            "The secret key was invalid for the specified algorithm.",
        ));
    };
    let md5 = b64(&Md5::digest(bytes));
    if h.key_md5.map(|m| m.trim()) != Some(md5.as_str()) {
        return Err(invalid_argument(
            "The calculated MD5 hash of the key did not match the hash that was provided.",
        ));
    }
    Ok(Some(CustomerKey {
        key: Zeroizing::new(bytes),
        md5,
    }))
}

/// The encryption a write (PutObject, CopyObject's destination, CreateMultipartUpload) asks
/// for, checked; `default` is the bucket's default, applied when the request asks for none.
pub(crate) fn requested(
    sse: Option<&ServerSideEncryption>,
    kms_key_id: Option<&String>,
    c: CustomerHeaders<'_>,
    default: Option<Scheme>,
) -> S3Result<Option<Scheme>> {
    let customer = customer(c)?;
    let kms_key_id = kms_key_id.filter(|k| !k.is_empty()).cloned();
    if let Some(id) = &kms_key_id {
        check_kms_key_id(id)?;
    }
    let scheme = match (sse.map(ServerSideEncryption::as_str), customer, kms_key_id) {
        (None, None, None) => default,
        (None, Some(c), None) => Some(Scheme::Customer(c)),
        (Some(_), Some(_), _) => {
            return Err(invalid_argument(
                "Server Side Encryption with Customer provided key is incompatible with the \
                 encryption method specified",
            ))
        }
        (None, _, Some(_)) | (Some(AES256), _, Some(_)) => {
            return Err(invalid_argument(
                "Server Side Encryption with AWS KMS managed key requires HTTP header \
                 x-amz-server-side-encryption : aws:kms",
            ))
        }
        (Some(AES256), None, None) => Some(Scheme::S3),
        (Some(AWS_KMS), None, Some(id)) => Some(Scheme::Kms(id)),
        (Some(AWS_KMS), None, None) => match default {
            Some(Scheme::Kms(id)) => Some(Scheme::Kms(id)),
            _ => {
                return Err(invalid_argument(
                    "Server Side Encryption with KMS needs a key id \
                     (x-amz-server-side-encryption-aws-kms-key-id): railstore has no default \
                     KMS key",
                ))
            }
        },
        (Some(other), None, _) => {
            return Err(invalid_argument(format!(
                "The encryption method specified is not supported: {other:?}"
            )))
        }
    };
    Ok(scheme)
}

/// A KMS key id is sent back in a response header: printable ASCII only.
pub(crate) fn check_kms_key_id(id: &str) -> S3Result<()> {
    if id.len() > 2048 || !id.chars().all(|c| c.is_ascii_graphic()) {
        return Err(invalid_argument(
            "A KMS key id is printable ASCII, at most 2048 characters",
        ));
    }
    Ok(())
}

/// Refuses a read (GET, HEAD) that names a server-side encryption: reads never choose one.
pub(crate) fn refuse_on_read(headers: &HeaderMap) -> S3Result<()> {
    for name in [
        "x-amz-server-side-encryption",
        "x-amz-server-side-encryption-aws-kms-key-id",
    ] {
        if headers.contains_key(name) {
            return Err(invalid_argument(format!(
                "{name} is not allowed on a read: the object's encryption is its own"
            )));
        }
    }
    Ok(())
}

/// An object's (or upload's) encryption as its stored headers keep it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sealed {
    mode: String,
    sealed_key: Vec<u8>,
    iv: [u8; 16],
    kms_key_id: Option<String>,
    customer_key_md5: Option<String>,
}

impl Sealed {
    /// A new data key for `scheme`: the record to store and the key to encrypt with.
    pub fn new(scheme: &Scheme, ring: &Keyring) -> S3Result<(Sealed, DataKey)> {
        let data = DataKey {
            key: Zeroizing::new(keys::random()),
            iv: keys::random(),
        };
        let kek = kek(scheme, ring)?;
        let mode = scheme.mode().to_string();
        let sealed = Sealed {
            sealed_key: keys::seal(&kek, &data.key, mode.as_bytes()),
            iv: data.iv,
            kms_key_id: match scheme {
                Scheme::Kms(id) => Some(id.clone()),
                _ => None,
            },
            customer_key_md5: match scheme {
                Scheme::Customer(c) => Some(c.md5.clone()),
                _ => None,
            },
            mode,
        };
        Ok((sealed, data))
    }

    /// The encryption recorded in an object's stored headers, if any.
    pub fn from_headers(h: &BTreeMap<String, String>) -> S3Result<Option<Sealed>> {
        let Some(mode) = h.get(MODE) else {
            return Ok(None);
        };
        let broken = || {
            err(
                S3ErrorCode::InternalError,
                "the object's encryption record is damaged",
            )
        };
        let sealed_key = h
            .get(SEALED_KEY)
            .and_then(|v| unb64(v))
            .ok_or_else(broken)?;
        let iv = h
            .get(IV)
            .and_then(|v| unb64(v))
            .and_then(|v| <[u8; 16]>::try_from(v).ok())
            .ok_or_else(broken)?;
        Ok(Some(Sealed {
            mode: mode.clone(),
            sealed_key,
            iv,
            kms_key_id: h.get(KMS_KEY_ID).cloned(),
            customer_key_md5: h.get(CUSTOMER_KEY_MD5).cloned(),
        }))
    }

    /// Adds this record to the headers an object is stored with.
    pub fn to_headers(&self, h: &mut BTreeMap<String, String>) {
        h.insert(MODE.into(), self.mode.clone());
        h.insert(SEALED_KEY.into(), b64(&self.sealed_key));
        h.insert(IV.into(), b64(&self.iv));
        if let Some(id) = &self.kms_key_id {
            h.insert(KMS_KEY_ID.into(), id.clone());
        }
        if let Some(m) = &self.customer_key_md5 {
            h.insert(CUSTOMER_KEY_MD5.into(), m.clone());
        }
    }

    /// The data key, for a request that gives `customer` (its SSE-C key, if any): an SSE-C
    /// object needs its own key, any other refuses one.
    pub fn open(&self, customer: Option<&CustomerKey>, ring: &Keyring) -> S3Result<DataKey> {
        let scheme =
            match (self.mode.as_str(), customer) {
                (CUSTOMER, None) => return Err(invalid_request(
                    "The object was stored using a form of Server Side Encryption. The correct \
                     parameters must be provided to retrieve the object.",
                )),
                (CUSTOMER, Some(c)) => {
                    if self.customer_key_md5.as_deref() != Some(c.md5.as_str()) {
                        return Err(wrong_customer_key());
                    }
                    Scheme::Customer(c.clone())
                }
                (_, Some(_)) => return Err(not_applicable()),
                (AES256, None) => Scheme::S3,
                (AWS_KMS, None) => Scheme::Kms(self.kms_key_id.clone().unwrap_or_default()),
                (other, None) => {
                    return Err(err(
                        S3ErrorCode::InternalError,
                        format!("the object's encryption mode {other:?} is unknown"),
                    ))
                }
            };
        let kek = kek(&scheme, ring)?;
        let key = keys::unseal(&kek, &self.sealed_key, self.mode.as_bytes()).ok_or_else(|| {
            if customer.is_some() {
                wrong_customer_key()
            } else {
                err(
                    S3ErrorCode::InternalError,
                    "the object's data key does not open with this server's master key",
                )
            }
        })?;
        Ok(DataKey { key, iv: self.iv })
    }

    /// Whether it is SSE-C.
    pub fn is_customer(&self) -> bool {
        self.mode == CUSTOMER
    }

    /// What responses say of it.
    pub fn answer(&self) -> Answer {
        match self.mode.as_str() {
            CUSTOMER => Answer {
                customer_algorithm: Some(AES256.to_string()),
                customer_key_md5: self.customer_key_md5.clone(),
                ..Answer::default()
            },
            mode => Answer {
                sse: Some(ServerSideEncryption::from(mode.to_string())),
                kms_key_id: self.kms_key_id.clone(),
                ..Answer::default()
            },
        }
    }
}

/// A request's SSE-C key for an object (or upload) that is not SSE-C.
fn not_applicable() -> s3s::S3Error {
    invalid_request("The encryption parameters are not applicable to this object.")
}

fn wrong_customer_key() -> s3s::S3Error {
    invalid_request(
        "The provided customer key does not match the key the object was encrypted with.",
    )
}

/// Checks that a request's SSE-C key (if any) is the one `sealed` (an upload's encryption,
/// if any) demands: for UploadPart, UploadPartCopy and CompleteMultipartUpload.
pub(crate) fn check_customer(sealed: Option<&Sealed>, given: Option<&CustomerKey>) -> S3Result<()> {
    match (sealed.filter(|s| s.is_customer()), given) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(not_applicable()),
        (Some(_), None) => Err(invalid_request(
            "The upload was started with Server Side Encryption with a customer key: every \
             request of it must give that key.",
        )),
        (Some(s), Some(c)) if s.customer_key_md5.as_deref() == Some(c.md5.as_str()) => Ok(()),
        (Some(_), Some(_)) => Err(wrong_customer_key()),
    }
}

/// The key a scheme's data keys are sealed under.
fn kek(scheme: &Scheme, ring: &Keyring) -> S3Result<keys::Key> {
    let purpose = match scheme {
        Scheme::Customer(c) => return Ok(c.key.clone()),
        Scheme::S3 => "sse-s3".to_string(),
        Scheme::Kms(id) => format!("kms:{id}"),
    };
    ring.derive(&purpose).ok_or_else(|| {
        not_implemented(
            "server-side encryption with server keys (SSE-S3, KMS) needs a master key, and \
             this server has none",
        )
    })
}

/// The encryption headers of a response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    pub sse: Option<ServerSideEncryption>,
    pub kms_key_id: Option<String>,
    pub customer_algorithm: Option<String>,
    pub customer_key_md5: Option<String>,
}

impl Answer {
    /// Of an object or upload with this encryption, if any.
    pub fn of(sealed: Option<&Sealed>) -> Answer {
        sealed.map(Sealed::answer).unwrap_or_default()
    }

    /// As headers, for outputs without fields for them (CompleteMultipartUpload's SSE-C).
    pub fn customer_headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        let mut put = |name: &'static str, v: &Option<String>| {
            if let Some(v) = v.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                h.insert(HeaderName::from_static(name), v);
            }
        };
        put(
            "x-amz-server-side-encryption-customer-algorithm",
            &self.customer_algorithm,
        );
        put(
            "x-amz-server-side-encryption-customer-key-md5",
            &self.customer_key_md5,
        );
        h
    }
}

/// Sets an output's encryption fields from an [`Answer`].
macro_rules! set_sse {
    ($out:expr, $a:expr) => {{
        let a: $crate::sse::Answer = $a;
        $out.server_side_encryption = a.sse;
        $out.ssekms_key_id = a.kms_key_id;
        $out.sse_customer_algorithm = a.customer_algorithm;
        $out.sse_customer_key_md5 = a.customer_key_md5;
    }};
}
pub(crate) use set_sse;

/// The data key of an object (or upload) for a read or a part: `None` when it is stored in
/// the clear, which refuses an SSE-C key.
pub(crate) fn open(
    sealed: Option<&Sealed>,
    customer: Option<&CustomerKey>,
    ring: &Keyring,
) -> S3Result<Option<DataKey>> {
    match (sealed, customer) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(not_applicable()),
        (Some(s), c) => s.open(c, ring).map(Some),
    }
}

/// `body` encrypted under `key` from `iv`, `content_md5` checked against its plaintext, and
/// what its ETag is made from: for SSE-S3 the plaintext's MD5, as AWS; for SSE-C and KMS an
/// HMAC of that MD5 under the data key, which reveals nothing of the plaintext to whoever
/// lacks the key, yet is the same for the same bytes (a part sent again keeps its ETag though
/// each write has its own IV).
pub(crate) fn encrypt(
    body: Body,
    sealed: &Sealed,
    key: &DataKey,
    iv: [u8; 16],
    content_md5: Option<[u8; 16]>,
) -> (Body, SentMd5) {
    let (encrypting, md5) = Encrypting::new(body, key, iv, content_md5);
    let sent = if sealed.mode == AES256 {
        SentMd5::new(move || md5.get())
    } else {
        let data_key = key.key.clone();
        SentMd5::new(move || {
            let plain = md5.get()?;
            let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(&data_key[..])
                .expect("any key size");
            hmac::Mac::update(&mut mac, b"railstore etag ");
            hmac::Mac::update(&mut mac, &plain);
            let out = hmac::Mac::finalize(mac).into_bytes();
            Some(<[u8; 16]>::try_from(&out[..16]).expect("16 of 32 bytes"))
        })
    };
    (Box::pin(encrypting), sent)
}

/// A stored range of an object from byte `start`, decrypted when `key` is given: a
/// single-part object from its IV, a multipart one from each part's.
pub(crate) fn decrypt(
    body: Body,
    key: Option<DataKey>,
    info: &ObjectInfo,
    start: u64,
) -> S3Result<Body> {
    let Some(key) = key else { return Ok(body) };
    let parts = if info.parts == 0 {
        PartMap::single(key.iv)
    } else {
        let ivs: Option<Vec<[u8; 16]>> = info
            .part_annotations
            .iter()
            .map(|a| unb64(a).and_then(|v| <[u8; 16]>::try_from(v).ok()))
            .collect();
        ivs.filter(|ivs| ivs.len() == info.parts as usize)
            .and_then(|ivs| PartMap::multipart(&info.part_sizes, &ivs))
            .ok_or_else(|| {
                err(
                    S3ErrorCode::InternalError,
                    "the encrypted object's part records are damaged",
                )
            })?
    };
    Ok(Box::pin(Decrypting::new(body, key, parts, start)))
}

/// Takes an object's encryption out of its stored headers (a copy gets its own).
pub(crate) fn strip(h: &mut BTreeMap<String, String>) {
    for name in [MODE, SEALED_KEY, IV, KMS_KEY_ID, CUSTOMER_KEY_MD5] {
        h.remove(name);
    }
}

/// The encryption a write to `bucket` gets: what the request asks for, else the bucket's
/// default.
pub(crate) fn for_write(
    s3: &crate::service::RailS3,
    bucket: &str,
    sse: Option<&ServerSideEncryption>,
    kms_key_id: Option<&String>,
    c: CustomerHeaders<'_>,
) -> S3Result<Option<Scheme>> {
    requested(sse, kms_key_id, c, bucket_default(s3, bucket)?)
}

/// [`for_write`] of a write input (PutObject, CopyObject, CreateMultipartUpload): the
/// encryption its headers ask for, else its bucket's default.
macro_rules! write_scheme {
    ($s3:expr, $input:expr) => {
        $crate::sse::for_write(
            $s3,
            &$input.bucket,
            $input.server_side_encryption.as_ref(),
            $input.ssekms_key_id.as_ref(),
            $crate::sse::customer_headers!($input),
        )
    };
}
pub(crate) use write_scheme;

/// A new data key for `scheme`, its record added to `headers` (the object's or upload's).
pub(crate) fn seal_into(
    scheme: &Scheme,
    ring: &Keyring,
    headers: &mut BTreeMap<String, String>,
) -> S3Result<(Sealed, DataKey)> {
    let (sealed, key) = Sealed::new(scheme, ring)?;
    sealed.to_headers(headers);
    Ok((sealed, key))
}

/// A part's body on its way into an upload encrypted as `sealed` (if at all): the request's
/// SSE-C key must be the upload's; the body is encrypted from a new random IV, kept with the
/// part (so a part sent again never reuses a keystream), `content_md5` checked against its
/// plaintext (else by the store, in `options`).
pub(crate) fn part_body(
    body: Body,
    sealed: Option<&Sealed>,
    customer: Option<&CustomerKey>,
    ring: &Keyring,
    content_md5: Option<[u8; 16]>,
    options: &mut PartOptions,
) -> S3Result<Body> {
    check_customer(sealed, customer)?;
    let Some(sealed) = sealed else {
        options.content_md5 = content_md5;
        return Ok(body);
    };
    let key = sealed.open(customer, ring)?;
    let iv: [u8; 16] = keys::random();
    options.annotation = Some(b64(&iv));
    let (body, sent_md5) = encrypt(body, sealed, &key, iv, content_md5);
    options.sent_md5 = Some(sent_md5);
    Ok(body)
}
