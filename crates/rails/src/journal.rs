//! The journal of buffered writes (Flash on Rails §4.2.3, DESIGN §3.5): what its records and
//! watermarks look like on a device. Pure encoding and decoding; `separated` writes, syncs,
//! replays and deletes them.
//!
//! Every key starting with [`RESERVED_KEY_BYTE`] (0xFF) belongs to rails: the layer above never
//! sees or writes one (the reliability manager's keys start with `o`, `s`, `p`, `m` or `x`).
//!
//! - A journal record, on a writer-role device: key `FF 'j' target:u32be tag:u64be` (14 B), so
//!   one target's records list in tag order; value `header | key | value | crc`.
//! - A watermark, on the target device itself: key `FF 'w' device:u32be` (6 B); value `header |
//!   crc`, the header's tag W saying that every journal record of the device up to W is done
//!   with: its write, or a later write to the same key, is durably on the device. Recovery
//!   replays only records above W.
//!
//! The 24-byte header, little-endian: version (1 B, = 1), kind (1 B: 1 store, 2 delete,
//! 3 watermark), key length (u16), value length (u32), target device (u32), tag (u64), four zero
//! bytes. The trailing CRC32C (u32) covers header, key and value, so a record that does not
//! match its key, a torn record, or a flipped bit is refused, never replayed.

use crate::buffer::Pending;
use railstore_device::DeviceError;

/// First byte of every key rails keeps for itself.
pub const RESERVED_KEY_BYTE: u8 = 0xFF;
/// Prefix of journal record keys.
pub const JOURNAL_KEY_PREFIX: [u8; 2] = [RESERVED_KEY_BYTE, b'j'];
/// Prefix of watermark keys.
pub const WATERMARK_KEY_PREFIX: [u8; 2] = [RESERVED_KEY_BYTE, b'w'];
/// The key of the array identity record the array opener (`store`) keeps on each raw device;
/// rails never writes it and hides it like its own keys.
pub const IDENTITY_KEY: [u8; 2] = [RESERVED_KEY_BYTE, b'i'];
/// Length of a journal record key.
pub const JOURNAL_KEY_BYTES: usize = 14;
/// Length of a watermark key.
pub const WATERMARK_KEY_BYTES: usize = 6;
/// Bytes a journal record adds to the key and value it carries (header and checksum).
pub const RECORD_OVERHEAD_BYTES: usize = HEADER_BYTES + 4;

const HEADER_BYTES: usize = 24;
const VERSION: u8 = 1;
const KIND_STORE: u8 = 1;
const KIND_DELETE: u8 = 2;
const KIND_WATERMARK: u8 = 3;

/// Whether `key` is one of rails' own (journal, watermark, or any later use of the prefix).
pub fn is_reserved(key: &[u8]) -> bool {
    key.first() == Some(&RESERVED_KEY_BYTE)
}

/// The key of target `target`'s journal record `tag`.
pub fn record_key(target: u32, tag: u64) -> [u8; JOURNAL_KEY_BYTES] {
    let mut k = [0u8; JOURNAL_KEY_BYTES];
    k[..2].copy_from_slice(&JOURNAL_KEY_PREFIX);
    k[2..6].copy_from_slice(&target.to_be_bytes());
    k[6..].copy_from_slice(&tag.to_be_bytes());
    k
}

/// `(target, tag)` of a journal record key.
pub fn parse_record_key(key: &[u8]) -> Option<(u32, u64)> {
    if key.len() != JOURNAL_KEY_BYTES || key[..2] != JOURNAL_KEY_PREFIX {
        return None;
    }
    Some((
        u32::from_be_bytes(key[2..6].try_into().ok()?),
        u64::from_be_bytes(key[6..].try_into().ok()?),
    ))
}

/// The key of device `device`'s watermark.
pub fn watermark_key(device: u32) -> [u8; WATERMARK_KEY_BYTES] {
    let mut k = [0u8; WATERMARK_KEY_BYTES];
    k[..2].copy_from_slice(&WATERMARK_KEY_PREFIX);
    k[2..].copy_from_slice(&device.to_be_bytes());
    k
}

/// The device a watermark key names.
pub fn parse_watermark_key(key: &[u8]) -> Option<u32> {
    if key.len() != WATERMARK_KEY_BYTES || key[..2] != WATERMARK_KEY_PREFIX {
        return None;
    }
    Some(u32::from_be_bytes(key[2..].try_into().ok()?))
}

/// Bytes of the journal record of `op` on a key of `key_len` bytes.
pub fn record_bytes(key_len: usize, op: &Pending) -> usize {
    RECORD_OVERHEAD_BYTES
        + key_len
        + match op {
            Pending::Store(v) => v.len(),
            Pending::Delete => 0,
        }
}

/// A decoded journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The device the operation is for.
    pub target: u32,
    /// Its journal sequence number on that device.
    pub tag: u64,
    /// The key it writes.
    pub key: Vec<u8>,
    /// What it does.
    pub op: Pending,
}

fn header(kind: u8, key_len: usize, value_len: usize, target: u32, tag: u64) -> [u8; 24] {
    let mut h = [0u8; HEADER_BYTES];
    h[0] = VERSION;
    h[1] = kind;
    h[2..4].copy_from_slice(&(key_len as u16).to_le_bytes());
    h[4..8].copy_from_slice(&(value_len as u32).to_le_bytes());
    h[8..12].copy_from_slice(&target.to_le_bytes());
    h[12..20].copy_from_slice(&tag.to_le_bytes());
    h
}

fn crc(h: &[u8; HEADER_BYTES], key: &[u8], value: &[u8]) -> u32 {
    railstore_device::format::body_crc(h, key, value)
}

/// The value of the journal record for `op` on `key`, for device `target`, tag `tag`. Keys
/// are at most 65535 bytes and values at most 4 GiB (device limits are far below).
pub fn encode_record(target: u32, tag: u64, key: &[u8], op: &Pending) -> Vec<u8> {
    let (kind, value): (u8, &[u8]) = match op {
        Pending::Store(v) => (KIND_STORE, v),
        Pending::Delete => (KIND_DELETE, &[]),
    };
    let h = header(kind, key.len(), value.len(), target, tag);
    let mut out = Vec::with_capacity(RECORD_OVERHEAD_BYTES + key.len() + value.len());
    out.extend_from_slice(&h);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out.extend_from_slice(&crc(&h, key, value).to_le_bytes());
    out
}

fn corrupt(location: String, reason: &'static str) -> DeviceError {
    DeviceError::Corrupt { location, reason }
}

/// Splits a record or watermark value into header fields and body, checking length and CRC.
fn open(bytes: &[u8], location: &dyn Fn() -> String) -> Result<(u8, u32, u64, usize), DeviceError> {
    if bytes.len() < RECORD_OVERHEAD_BYTES {
        return Err(corrupt(location(), "journal value shorter than its header"));
    }
    let h: [u8; HEADER_BYTES] = bytes[..HEADER_BYTES].try_into().expect("24 bytes");
    if h[0] != VERSION {
        return Err(corrupt(location(), "unknown journal format version"));
    }
    let key_len = u16::from_le_bytes([h[2], h[3]]) as usize;
    let value_len = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes")) as usize;
    if bytes.len() != RECORD_OVERHEAD_BYTES + key_len + value_len || h[20..] != [0; 4] {
        return Err(corrupt(
            location(),
            "journal value length disagrees with its header",
        ));
    }
    let body_end = HEADER_BYTES + key_len + value_len;
    let stored = u32::from_le_bytes(bytes[body_end..].try_into().expect("4 bytes"));
    if crc(
        &h,
        &bytes[HEADER_BYTES..HEADER_BYTES + key_len],
        &bytes[HEADER_BYTES + key_len..body_end],
    ) != stored
    {
        return Err(corrupt(location(), "journal checksum mismatch"));
    }
    let target = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    let tag = u64::from_le_bytes(h[12..20].try_into().expect("8 bytes"));
    Ok((h[1], target, tag, key_len))
}

/// Decodes the value of the journal record stored under `key`; refuses one whose checksum
/// fails or whose header names another target or tag than its key.
pub fn decode_record(key: &[u8], bytes: &[u8]) -> Result<Record, DeviceError> {
    let location = || format!("journal record {key:02x?}");
    let (target, tag) =
        parse_record_key(key).ok_or_else(|| corrupt(location(), "not a journal record key"))?;
    let (kind, t, g, key_len) = open(bytes, &location)?;
    if (t, g) != (target, tag) {
        return Err(corrupt(
            location(),
            "journal record stored under another key",
        ));
    }
    let user_key = bytes[HEADER_BYTES..HEADER_BYTES + key_len].to_vec();
    let value = &bytes[HEADER_BYTES + key_len..bytes.len() - 4];
    let op = match kind {
        KIND_STORE => Pending::Store(value.to_vec()),
        KIND_DELETE if value.is_empty() => Pending::Delete,
        _ => return Err(corrupt(location(), "unknown journal record kind")),
    };
    if user_key.is_empty() || is_reserved(&user_key) {
        return Err(corrupt(
            location(),
            "journal record for a reserved or empty key",
        ));
    }
    Ok(Record {
        target,
        tag,
        key: user_key,
        op,
    })
}

/// The value of device `device`'s watermark at `tag`.
pub fn encode_watermark(device: u32, tag: u64) -> Vec<u8> {
    let h = header(KIND_WATERMARK, 0, 0, device, tag);
    let mut out = h.to_vec();
    out.extend_from_slice(&crc(&h, &[], &[]).to_le_bytes());
    out
}

/// `(device, tag)` of a watermark value.
pub fn decode_watermark(bytes: &[u8]) -> Result<(u32, u64), DeviceError> {
    let location = || "journal watermark".to_string();
    let (kind, device, tag, key_len) = open(bytes, &location)?;
    if kind != KIND_WATERMARK || key_len != 0 || bytes.len() != RECORD_OVERHEAD_BYTES {
        return Err(corrupt(location(), "not a watermark"));
    }
    Ok((device, tag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn records_round_trip_and_refuse_damage() {
        let k = record_key(3, 77);
        assert_eq!(parse_record_key(&k), Some((3, 77)));
        assert!(is_reserved(&k) && is_reserved(&watermark_key(1)));
        assert!(!is_reserved(b"o1") && !is_reserved(b""));
        for op in [Pending::Store(b"value".to_vec()), Pending::Delete] {
            let v = encode_record(3, 77, b"okey", &op);
            assert_eq!(v.len(), record_bytes(4, &op));
            let r = decode_record(&k, &v).unwrap();
            assert_eq!(
                (r.target, r.tag, r.key.as_slice(), r.op),
                (3, 77, &b"okey"[..], op)
            );
            for i in 0..v.len() {
                let mut bad = v.clone();
                bad[i] ^= 0x10;
                assert!(decode_record(&k, &bad).is_err(), "flip at {i} accepted");
            }
            assert!(decode_record(&record_key(3, 78), &v).is_err());
            assert!(decode_record(&k, &v[..v.len() - 1]).is_err());
        }
        // Ordering of keys is tag order within one target.
        assert!(
            record_key(1, 255) < record_key(1, 256) && record_key(1, u64::MAX) < record_key(2, 0)
        );
        let w = encode_watermark(5, 1234);
        assert_eq!(decode_watermark(&w).unwrap(), (5, 1234));
        assert_eq!(parse_watermark_key(&watermark_key(5)), Some(5));
        assert!(decode_watermark(&encode_record(5, 1, b"k", &Pending::Delete)).is_err());
    }

    proptest! {
        /// Any bytes: decoding never panics, and what it accepts re-encodes to the same bytes.
        #[test]
        fn decoding_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..80), tag in 0u64..4) {
            let key = record_key(1, tag);
            if let Ok(r) = decode_record(&key, &bytes) {
                prop_assert_eq!(encode_record(r.target, r.tag, &r.key, &r.op), bytes.clone());
            }
            if let Ok((d, t)) = decode_watermark(&bytes) {
                prop_assert_eq!(encode_watermark(d, t), bytes);
            }
        }
    }
}
