//! What the store keeps in the reliability manager, and under which keys.
//!
//! | manager key | value |
//! |---|---|
//! | `B` + bucket name | bucket record |
//! | `K` + bucket id (u64 BE) + SHA-256(object key) | object record (+ the body when inline) |
//! | `V` + bucket id + SHA-256(object key) + version sequence (u64 BE) | a version that is not the current object: an older one, or a delete marker (see `versions.rs`) |
//! | `D` + chunk id (16 bytes) | a chunk of a body |
//! | `U` + upload id (16 bytes) | multipart upload record |
//! | `P` + upload id + part number (u32 BE) | part record |
//!
//! A record is `RSR1`, a kind byte, the metadata length (u32 LE), the metadata as JSON, then,
//! for an inline object, the body; object records are written in binary instead (`RSR2`,
//! [`compact`]: a quarter of the bytes for a small object) and read in either form. The manager
//! checksums every piece, so no CRC here.
//! Object keys are hashed because S3 keys (up to 1024 bytes) outgrow the manager's keys; the
//! record carries the full key.

use crate::error::{Result, StoreError};
use crate::types::{unix_nanos, ObjectInfo, PartInfo};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::SystemTime;

mod compact;

const MAGIC: &[u8; 4] = b"RSR1";
const HEAD_BYTES: usize = 9;

/// Record kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Bucket = 1,
    Object = 2,
    Upload = 3,
    Part = 4,
}

pub(crate) const TAG_BUCKET: u8 = b'B';
pub(crate) const TAG_OBJECT: u8 = b'K';
pub(crate) const TAG_VERSION: u8 = b'V';
pub(crate) const TAG_CHUNK: u8 = b'D';
pub(crate) const TAG_UPLOAD: u8 = b'U';
pub(crate) const TAG_PART: u8 = b'P';
/// Manager keys of block volumes (crate `railstore-volume`) start with this byte; the store
/// neither reads nor deletes them.
pub const TAG_VOLUME: u8 = b'L';

/// 16 random bytes naming a chunk or an upload.
pub(crate) type Id = [u8; 16];

pub(crate) fn new_id() -> Id {
    crate::ids::random()
}

pub(crate) fn bucket_key(name: &str) -> Vec<u8> {
    [&[TAG_BUCKET], name.as_bytes()].concat()
}

pub(crate) fn object_key(bucket_id: u64, key: &str) -> Vec<u8> {
    let digest = Sha256::digest(key.as_bytes());
    [&[TAG_OBJECT][..], &bucket_id.to_be_bytes(), &digest].concat()
}

pub(crate) fn version_key(bucket_id: u64, key: &str, seq: u64) -> Vec<u8> {
    let mut k = object_key(bucket_id, key);
    k[0] = TAG_VERSION;
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

pub(crate) fn chunk_key(id: &Id) -> Vec<u8> {
    [&[TAG_CHUNK][..], id].concat()
}

pub(crate) fn upload_key(id: &Id) -> Vec<u8> {
    [&[TAG_UPLOAD][..], id].concat()
}

pub(crate) fn part_key(upload: &Id, part: u32) -> Vec<u8> {
    [&[TAG_PART][..], upload, &part.to_be_bytes()].concat()
}

/// The chunk id of a `D` key.
pub(crate) fn chunk_id_of(key: &[u8]) -> Option<Id> {
    key.strip_prefix(&[TAG_CHUNK])?.try_into().ok()
}

/// Upload ids travel as 32 hex digits.
pub(crate) fn parse_upload_id(s: &str) -> Option<Id> {
    let mut id = [0u8; 16];
    hex::decode_to_slice(s, &mut id).ok()?;
    Some(id)
}

/// One chunk of a body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChunkRef {
    #[serde(with = "hex_id")]
    pub id: Id,
    pub len: u64,
}

/// Where an object's bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BodyRef {
    /// After the metadata, in the record itself.
    Inline,
    /// In these chunks, in order.
    Chunks(Vec<ChunkRef>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BucketRecord {
    pub name: String,
    pub id: u64,
    #[serde(with = "unix_nanos")]
    pub created: SystemTime,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ObjectRecord {
    pub bucket_id: u64,
    pub info: ObjectInfo,
    pub body: BodyRef,
    /// The multipart upload that made it, so a repeated completion can be recognised.
    pub upload_id: Option<String>,
    /// Orders the versions of a key: later writes have larger numbers (0 in records written
    /// before versions were kept, older than any other).
    #[serde(default)]
    pub seq: u64,
}

/// What an upload stores for the object it will make.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredOptions {
    pub content_type: Option<String>,
    pub user_metadata: BTreeMap<String, String>,
    pub headers: BTreeMap<String, String>,
    pub mechanism: Option<String>,
    pub checksum_algorithm: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UploadRecord {
    pub bucket_id: u64,
    pub key: String,
    pub upload_id: String,
    #[serde(with = "unix_nanos")]
    pub initiated: SystemTime,
    pub options: StoredOptions,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartRecord {
    pub upload_id: String,
    pub part: PartInfo,
    pub chunks: Vec<ChunkRef>,
    /// Mechanism of its chunks.
    pub mechanism: String,
}

/// Encodes a record: header, metadata, then `body` (empty unless an inline object).
pub(crate) fn encode<T: Serialize>(kind: Kind, meta: &T, body: &[u8]) -> Vec<u8> {
    let json = serde_json::to_vec(meta).expect("records serialise");
    let mut out = Vec::with_capacity(HEAD_BYTES + json.len() + body.len());
    out.extend_from_slice(MAGIC);
    out.push(kind as u8);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(body);
    out
}

/// Decodes a record of `kind`; returns the metadata and the bytes after it.
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(kind: Kind, bytes: &[u8]) -> Result<(T, &[u8])> {
    let bad = |why: &str| StoreError::Corrupt(format!("{kind:?} record: {why}"));
    if bytes.len() < HEAD_BYTES || &bytes[..4] != MAGIC {
        return Err(bad("no RSR1 header"));
    }
    if bytes[4] != kind as u8 {
        return Err(bad(&format!("kind byte {}", bytes[4])));
    }
    let len = u32::from_le_bytes(bytes[5..9].try_into().unwrap()) as usize;
    let json = bytes
        .get(HEAD_BYTES..HEAD_BYTES + len)
        .ok_or_else(|| bad("metadata runs past the end"))?;
    let meta = serde_json::from_slice(json).map_err(|e| bad(&e.to_string()))?;
    Ok((meta, &bytes[HEAD_BYTES + len..]))
}

/// Encodes an object record (binary, `RSR2`) followed by `body` (empty unless inline).
pub(crate) fn encode_object(rec: &ObjectRecord, body: &[u8]) -> Vec<u8> {
    compact::encode(Kind::Object as u8, rec, body)
}

/// Decodes an object record in either form; returns it and the inline body after it.
pub(crate) fn decode_object(bytes: &[u8]) -> Result<(ObjectRecord, &[u8])> {
    if bytes.len() >= 5 && &bytes[..4] == compact::MAGIC {
        if bytes[4] != Kind::Object as u8 {
            return Err(StoreError::Corrupt(format!(
                "Object record: kind byte {}",
                bytes[4]
            )));
        }
        return compact::decode(&bytes[5..])
            .map_err(|why| StoreError::Corrupt(format!("Object record: {why}")));
    }
    decode(Kind::Object, bytes)
}

mod hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(id))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        let s = String::deserialize(d)?;
        let mut id = [0u8; 16];
        hex::decode_to_slice(&s, &mut id).map_err(serde::de::Error::custom)?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ObjectInfo {
        ObjectInfo {
            key: "a/b".into(),
            size: 3,
            etag: "x".into(),
            last_modified: SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(12345),
            content_type: Some("text/plain".into()),
            user_metadata: [("k".to_string(), "v".to_string())].into(),
            headers: BTreeMap::new(),
            checksums: BTreeMap::new(),
            mechanism: "rep3".into(),
            parts: 0,
            part_sizes: Vec::new(),
            part_numbers: Vec::new(),
            part_checksums: Vec::new(),
            part_annotations: Vec::new(),
            version_id: None,
            delete_marker: false,
        }
    }

    #[test]
    fn records_round_trip_with_their_body() {
        let rec = ObjectRecord {
            bucket_id: 7,
            info: info(),
            body: BodyRef::Chunks(vec![ChunkRef {
                id: [9; 16],
                len: 5,
            }]),
            upload_id: None,
            seq: 3,
        };
        let bytes = encode(Kind::Object, &rec, b"abc");
        let (back, body): (ObjectRecord, _) = decode(Kind::Object, &bytes).unwrap();
        assert_eq!(back, rec);
        assert_eq!(body, b"abc");
    }

    #[test]
    fn damaged_records_are_refused() {
        let bytes = encode(Kind::Object, &info(), b"");
        assert!(decode::<ObjectInfo>(Kind::Bucket, &bytes).is_err());
        assert!(decode::<ObjectInfo>(Kind::Object, &bytes[..bytes.len() - 2]).is_err());
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(decode::<ObjectInfo>(Kind::Object, &bad).is_err());
        let mut long = bytes.clone();
        long[5] = 0xff;
        assert!(decode::<ObjectInfo>(Kind::Object, &long).is_err());
    }

    /// Records as the store writes them: plain small objects, and ones with every field set.
    fn object_records() -> Vec<ObjectRecord> {
        let plain = ObjectRecord {
            bucket_id: 1,
            info: ObjectInfo {
                key: "obj/000000012345".into(),
                size: 100,
                etag: "0123456789abcdef0123456789abcdef".into(),
                last_modified: SystemTime::UNIX_EPOCH
                    + std::time::Duration::from_nanos(1_764_000_000_123_456_789),
                mechanism: "rep3".into(),
                ..ObjectInfo::default()
            },
            body: BodyRef::Inline,
            upload_id: None,
            seq: 12345,
        };
        let mut full = plain.clone();
        full.bucket_id = u64::MAX;
        full.seq = 1 << 40;
        full.info = ObjectInfo {
            // Not an MD5 in lowercase hex: kept as text.
            etag: "0123456789ABCDEF0123456789ABCDEF".into(),
            checksums: [("CRC32".to_string(), "AAAAAA==".to_string())].into(),
            parts: 2,
            part_sizes: vec![5 << 20, 3],
            part_numbers: vec![1, 7],
            part_checksums: vec![BTreeMap::new(), [("a".into(), "b".into())].into()],
            part_annotations: vec![String::new(), "x".into()],
            version_id: Some("v1".into()),
            delete_marker: true,
            headers: [("cache-control".to_string(), "no".to_string())].into(),
            ..info()
        };
        full.body = BodyRef::Chunks(vec![
            ChunkRef {
                id: [9; 16],
                len: 5 << 20,
            },
            ChunkRef {
                id: [1; 16],
                len: 3,
            },
        ]);
        full.upload_id = Some("00ff".repeat(8));
        let mut multipart_etag = plain.clone();
        multipart_etag.info.etag = "0123456789abcdef0123456789abcdef-2".into();
        vec![plain, full, multipart_etag]
    }

    #[test]
    fn object_records_round_trip_in_binary_and_json_ones_still_read() {
        for rec in object_records() {
            for body in [&b""[..], b"abc"] {
                let bytes = encode_object(&rec, body);
                assert_eq!(&bytes[..4], b"RSR2");
                let (back, rest) = decode_object(&bytes).unwrap();
                assert_eq!((&back, rest), (&rec, body));
                // Records written before the binary form.
                let json = encode(Kind::Object, &rec, body);
                let (back, rest) = decode_object(&json).unwrap();
                assert_eq!((&back, rest), (&rec, body));
            }
        }
    }

    #[test]
    fn a_small_objects_record_is_a_fraction_of_its_json() {
        let plain = &object_records()[0];
        let binary = encode_object(plain, b"").len();
        let json = encode(Kind::Object, plain, b"").len();
        assert!(binary * 3 < json, "binary {binary} B, JSON {json} B");
    }

    #[test]
    fn damaged_binary_records_are_refused_without_a_panic() {
        for rec in object_records() {
            let bytes = encode_object(&rec, b"");
            // Every cut short of the whole record is refused (an empty body is what follows).
            for cut in 0..bytes.len() {
                assert!(decode_object(&bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut kind = bytes.clone();
            kind[4] = Kind::Bucket as u8;
            assert!(decode_object(&kind).is_err());
            // Every single-byte change either is refused or decodes to something else; none
            // panics.
            for at in 5..bytes.len() {
                let mut bad = bytes.clone();
                bad[at] ^= 0xff;
                if let Ok((back, _)) = decode_object(&bad) {
                    assert_ne!(back, rec, "flipping byte {at} changed nothing");
                }
            }
        }
    }

    #[test]
    fn keys_fit_the_manager_and_do_not_collide_across_buckets() {
        let long = "k".repeat(1024);
        assert_eq!(object_key(1, &long).len(), 41);
        assert_ne!(object_key(1, "a"), object_key(2, "a"));
        assert_eq!(version_key(1, "a", 5)[1..41], object_key(1, "a")[1..]);
        assert!(version_key(1, "a", 5) < version_key(1, "a", 6));
        let id = new_id();
        assert_eq!(chunk_id_of(&chunk_key(&id)), Some(id));
        assert_eq!(parse_upload_id(&hex::encode(id)), Some(id));
        assert_eq!(parse_upload_id("zz"), None);
    }
}
