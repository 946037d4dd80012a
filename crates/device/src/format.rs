//! The `file` backend's on-disk format: records and checkpoints. Byte by byte in
//! `docs/format.md`. Everything here is pure (bytes in, values out) so it can be fuzzed.

/// First four bytes of every record: "RSRD".
pub const RECORD_MAGIC: [u8; 4] = *b"RSRD";
/// Record format version written by this code.
pub const RECORD_VERSION: u8 = 1;
/// Bytes of a record header.
pub const RECORD_HEADER_BYTES: usize = 32;
/// Largest value the format can describe; devices limit values far below this.
pub const FORMAT_VALUE_BYTES_MAX: u32 = 1 << 30;
/// First eight bytes of a checkpoint file.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"RSCKPT01";
/// Checkpoint format version written by this code.
pub const CHECKPOINT_VERSION: u32 = 1;
/// Bytes of the fixed checkpoint header.
pub const CHECKPOINT_HEADER_BYTES: usize = 64;
/// Values at least this long start on a [`VALUE_ALIGN_BYTES`] boundary in the log.
pub const VALUE_ALIGN_MIN_BYTES: usize = 4096;
/// Alignment of long values: the logical block of most devices, the finest O_DIRECT transfer.
/// A 4 KiB value then reads with one 4 KiB transfer instead of the 4.5–5 KiB that cover its
/// header too, at the cost of at most 511 bytes of padding.
pub const VALUE_ALIGN_BYTES: u64 = 512;

/// What a record says about its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// The key now has the record's value.
    Put = 1,
    /// The key is deleted (a tombstone; no value bytes).
    Delete = 2,
}

/// A parsed record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Put or delete.
    pub kind: RecordKind,
    /// Sequence number; strictly increasing along the log.
    pub seq: u64,
    /// Key length in bytes.
    pub key_len: u16,
    /// Value length in bytes.
    pub value_len: u32,
    /// Zero bytes between key and value (aligning a long value).
    pub pad: u16,
    /// CRC32C of header bytes 0..24, the key and the value.
    pub body_crc: u32,
}

impl RecordHeader {
    /// Total bytes of header, key, padding and value.
    pub fn record_len(&self) -> usize {
        RECORD_HEADER_BYTES + self.key_len as usize + self.pad as usize + self.value_len as usize
    }
}

/// Why bytes are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than the header or the record needs.
    Short,
    /// The magic is wrong (also: zero padding, the end of a log).
    Magic,
    /// An unknown format version.
    Version,
    /// An unknown record kind.
    Kind,
    /// The header checksum does not match.
    HeaderCrc,
    /// A length field is impossible (zero key, value on a delete, beyond the format maximum).
    Length,
    /// The key or value bytes do not match the body checksum.
    BodyCrc,
}

impl RecordError {
    /// A short description for errors and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordError::Short => "record truncated",
            RecordError::Magic => "bad record magic",
            RecordError::Version => "unknown record version",
            RecordError::Kind => "unknown record kind",
            RecordError::HeaderCrc => "record header checksum mismatch",
            RecordError::Length => "impossible record length",
            RecordError::BodyCrc => "record body checksum mismatch",
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Length of the record that encodes `key` and `value` without padding.
pub fn record_len(key_len: usize, value_len: usize) -> usize {
    RECORD_HEADER_BYTES + key_len + value_len
}

/// Padding for a record written at log offset `offset`: long values start on a
/// [`VALUE_ALIGN_BYTES`] boundary, others follow their key directly.
pub fn value_pad(offset: u64, key_len: usize, value_len: usize) -> u16 {
    if value_len < VALUE_ALIGN_MIN_BYTES {
        return 0;
    }
    let value_at = offset + (RECORD_HEADER_BYTES + key_len) as u64;
    ((VALUE_ALIGN_BYTES - value_at % VALUE_ALIGN_BYTES) % VALUE_ALIGN_BYTES) as u16
}

/// The first 24 header bytes (what `body_crc` covers before key and value).
pub fn header_prefix(
    kind: RecordKind,
    seq: u64,
    key_len: u16,
    value_len: u32,
    pad: u16,
) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&RECORD_MAGIC);
    h[4] = RECORD_VERSION;
    h[5] = kind as u8;
    h[6..8].copy_from_slice(&key_len.to_le_bytes());
    h[8..12].copy_from_slice(&value_len.to_le_bytes());
    h[12..14].copy_from_slice(&pad.to_le_bytes());
    h[16..24].copy_from_slice(&seq.to_le_bytes());
    h
}

/// CRC32C a record carries for `key` and `value`.
pub fn body_crc(prefix: &[u8; 24], key: &[u8], value: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(prefix), key), value)
}

/// Writes one record into `out` (exactly `record_len(key.len(), value.len()) + pad` bytes) and
/// returns its body CRC. A delete carries no value and no padding.
pub fn encode_record(
    out: &mut [u8],
    kind: RecordKind,
    seq: u64,
    key: &[u8],
    value: &[u8],
    pad: u16,
) -> u32 {
    debug_assert!(key.len() <= u16::MAX as usize && value.len() <= FORMAT_VALUE_BYTES_MAX as usize);
    debug_assert!(kind == RecordKind::Put || (value.is_empty() && pad == 0));
    let (h, rest) = out.split_at_mut(RECORD_HEADER_BYTES);
    let prefix = header_prefix(kind, seq, key.len() as u16, value.len() as u32, pad);
    h[0..24].copy_from_slice(&prefix);
    rest[..key.len()].copy_from_slice(key);
    let at = key.len() + pad as usize;
    rest[key.len()..at].fill(0);
    rest[at..at + value.len()].copy_from_slice(value);
    let crc = body_crc(&prefix, key, value);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    let hcrc = crc32c::crc32c(&h[0..28]);
    h[28..32].copy_from_slice(&hcrc.to_le_bytes());
    crc
}

/// Parses and checks a record header (not the body) at the start of `b`.
pub fn decode_header(b: &[u8]) -> Result<RecordHeader, RecordError> {
    if b.len() < RECORD_HEADER_BYTES {
        return Err(RecordError::Short);
    }
    if b[0..4] != RECORD_MAGIC {
        return Err(RecordError::Magic);
    }
    if crc32c::crc32c(&b[0..28]) != u32_at(b, 28) {
        return Err(RecordError::HeaderCrc);
    }
    if b[4] != RECORD_VERSION {
        return Err(RecordError::Version);
    }
    let kind = match b[5] {
        1 => RecordKind::Put,
        2 => RecordKind::Delete,
        _ => return Err(RecordError::Kind),
    };
    let key_len = u16_at(b, 6);
    let value_len = u32_at(b, 8);
    let pad = u16_at(b, 12);
    let reserved = u16_at(b, 14);
    if key_len == 0
        || value_len > FORMAT_VALUE_BYTES_MAX
        || (kind == RecordKind::Delete && value_len != 0)
        || pad as u64 >= VALUE_ALIGN_BYTES
        || (pad != 0 && (value_len as usize) < VALUE_ALIGN_MIN_BYTES)
        || reserved != 0
    {
        return Err(RecordError::Length);
    }
    Ok(RecordHeader {
        kind,
        seq: u64_at(b, 16),
        key_len,
        value_len,
        pad,
        body_crc: u32_at(b, 24),
    })
}

/// A whole, checked record borrowed from a byte slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The header.
    pub header: RecordHeader,
    /// The key bytes.
    pub key: &'a [u8],
    /// The value bytes (empty for a delete).
    pub value: &'a [u8],
}

/// Parses and fully checks (both checksums) the record at the start of `b`.
pub fn decode_record(b: &[u8]) -> Result<RecordRef<'_>, RecordError> {
    let header = decode_header(b)?;
    let len = header.record_len();
    if b.len() < len {
        return Err(RecordError::Short);
    }
    let key_end = RECORD_HEADER_BYTES + header.key_len as usize;
    let key = &b[RECORD_HEADER_BYTES..key_end];
    let value_at = key_end + header.pad as usize;
    let value = &b[value_at..len];
    if b[key_end..value_at].iter().any(|&x| x != 0) {
        return Err(RecordError::Length);
    }
    let prefix: &[u8; 24] = b[0..24].try_into().expect("24 bytes");
    if body_crc(prefix, key, value) != header.body_crc {
        return Err(RecordError::BodyCrc);
    }
    Ok(RecordRef { header, key, value })
}

/// How a scan of a segment's bytes ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanEnd {
    /// Offset just past the last valid record: the log's logical end.
    pub end: usize,
    /// Highest sequence number seen (or the starting one).
    pub last_seq: u64,
    /// Bytes after `end` are not all zero: a torn or corrupt tail.
    pub garbage_after: bool,
    /// Why the scan stopped when garbage follows.
    pub stop: Option<RecordError>,
}

/// Walks records from `start`, calling `f(offset, record)` for each valid one, and stops at the
/// first invalid record or the first whose sequence number is not above the previous (left over
/// from an older, overwritten tail).
pub fn scan_records(
    bytes: &[u8],
    start: usize,
    mut last_seq: u64,
    mut f: impl FnMut(usize, RecordRef<'_>),
) -> ScanEnd {
    let mut at = start.min(bytes.len());
    let mut stop = None;
    while at < bytes.len() {
        match decode_record(&bytes[at..]) {
            Ok(r) if r.header.seq > last_seq => {
                last_seq = r.header.seq;
                let len = r.header.record_len();
                f(at, r);
                at += len;
            }
            Ok(_) => {
                stop = Some(RecordError::Length);
                break;
            }
            Err(e) => {
                stop = Some(e);
                break;
            }
        }
    }
    let garbage_after = bytes[at..].iter().any(|&b| b != 0);
    ScanEnd {
        end: at,
        last_seq,
        garbage_after,
        stop: if garbage_after { stop } else { None },
    }
}

/// Offset of the first intact record (header and body checksums good) that starts after
/// `from`, if any. Recovery asks before it cuts a log at `from`: a torn write leaves none, a
/// damaged record in the middle of the log leaves the records behind it intact.
pub fn find_intact_record(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from.checked_add(1)?;
    while at + RECORD_HEADER_BYTES <= bytes.len() {
        let next = bytes[at..]
            .windows(RECORD_MAGIC.len())
            .position(|w| w == RECORD_MAGIC)?;
        at += next;
        if decode_record(&bytes[at..]).is_ok() {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// Where the index says a key's newest record lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Segment id.
    pub segment: u64,
    /// Byte offset of the record in its segment.
    pub offset: u64,
    /// Key length (the record's length follows from key and value lengths).
    pub key_len: u16,
    /// Value length.
    pub value_len: u32,
    /// Padding between key and value.
    pub pad: u16,
    /// Record sequence number.
    pub seq: u64,
    /// The record's body CRC, so a read can fetch and verify the value alone.
    pub body_crc: u32,
}

impl Loc {
    /// Bytes of the whole record.
    pub fn record_len(&self) -> u64 {
        (record_len(self.key_len as usize, self.value_len as usize) + self.pad as usize) as u64
    }

    /// Log offset of the value.
    pub fn value_offset(&self) -> u64 {
        self.offset + (RECORD_HEADER_BYTES + self.key_len as usize + self.pad as usize) as u64
    }

    /// The location of a record read from the log at `offset` of `segment`.
    pub fn of(segment: u64, offset: u64, h: &RecordHeader) -> Loc {
        Loc {
            segment,
            offset,
            key_len: h.key_len,
            value_len: h.value_len,
            pad: h.pad,
            seq: h.seq,
            body_crc: h.body_crc,
        }
    }
}

/// A checkpoint: the index as of `seq`, and where replay of the log resumes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// Highest sequence number the checkpoint reflects.
    pub seq: u64,
    /// Segment where replay starts (or the next existing one, if compacted away).
    pub replay_segment: u64,
    /// Offset in `replay_segment` where replay starts.
    pub replay_offset: u64,
    /// Live keys and their locations.
    pub entries: Vec<(Vec<u8>, Loc)>,
    /// Tombstones that must outlive compaction: key, segment, offset, seq.
    pub tombstones: Vec<(Vec<u8>, Loc)>,
}

/// Highest `seq` a checkpoint may hold (2^63 - 1; no log gets near it), so that sequence
/// arithmetic on it never overflows.
pub const CHECKPOINT_SEQ_MAX: u64 = u64::MAX >> 1;

/// Bytes per checkpoint entry besides the key.
const CKPT_ENTRY_FIXED_BYTES: usize = 2 + 8 + 8 + 4 + 8 + 2 + 4;

/// Serialises a checkpoint.
pub fn encode_checkpoint(c: &Checkpoint) -> Vec<u8> {
    let body: usize = c
        .entries
        .iter()
        .chain(&c.tombstones)
        .map(|(k, _)| CKPT_ENTRY_FIXED_BYTES + k.len())
        .sum();
    let mut out = Vec::with_capacity(CHECKPOINT_HEADER_BYTES + body + 4);
    out.extend_from_slice(&CHECKPOINT_MAGIC);
    out.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&c.seq.to_le_bytes());
    out.extend_from_slice(&c.replay_segment.to_le_bytes());
    out.extend_from_slice(&c.replay_offset.to_le_bytes());
    out.extend_from_slice(&(c.entries.len() as u64).to_le_bytes());
    out.extend_from_slice(&(c.tombstones.len() as u64).to_le_bytes());
    out.extend_from_slice(&[0u8; 8]);
    for (k, l) in c.entries.iter().chain(&c.tombstones) {
        out.extend_from_slice(&(k.len() as u16).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&l.segment.to_le_bytes());
        out.extend_from_slice(&l.offset.to_le_bytes());
        out.extend_from_slice(&l.value_len.to_le_bytes());
        out.extend_from_slice(&l.seq.to_le_bytes());
        out.extend_from_slice(&l.pad.to_le_bytes());
        out.extend_from_slice(&l.body_crc.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Parses and checks a checkpoint; `None` when anything is wrong (the caller then replays the
/// whole log): magic, version, CRC, counts, lengths, trailing bytes, and contents no correct
/// checkpoint holds (`seq` above [`CHECKPOINT_SEQ_MAX`], an entry newer than `seq` or whose
/// record would end past `u64::MAX`, a tombstone with a value). Never panics, whatever the
/// bytes.
pub fn decode_checkpoint(b: &[u8]) -> Option<Checkpoint> {
    if b.len() < CHECKPOINT_HEADER_BYTES + 4 || b[0..8] != CHECKPOINT_MAGIC {
        return None;
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body) != u32_at(crc, 0) || u32_at(b, 8) != CHECKPOINT_VERSION {
        return None;
    }
    let seq = u64_at(b, 16);
    if seq > CHECKPOINT_SEQ_MAX {
        return None;
    }
    let entries_n = u64_at(b, 40);
    let tombs_n = u64_at(b, 48);
    let mut at = CHECKPOINT_HEADER_BYTES;
    let mut read = |n: u64, tombstones: bool| -> Option<Vec<(Vec<u8>, Loc)>> {
        // Each entry takes at least this many bytes, so bogus counts fail before allocating.
        if n > (body.len() / (CKPT_ENTRY_FIXED_BYTES + 1)) as u64 {
            return None;
        }
        let mut v = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let key_len = u16_at(body.get(at..at + 2)?, 0) as usize;
            let e = body.get(at + 2..at + 2 + key_len + CKPT_ENTRY_FIXED_BYTES - 2)?;
            let key = e[..key_len].to_vec();
            let f = &e[key_len..];
            let value_len = u32_at(f, 16);
            let pad = u16_at(f, 28);
            if key_len == 0 || value_len > FORMAT_VALUE_BYTES_MAX || pad as u64 >= VALUE_ALIGN_BYTES
            {
                return None;
            }
            let loc = Loc {
                segment: u64_at(f, 0),
                offset: u64_at(f, 8),
                key_len: key_len as u16,
                value_len,
                pad,
                seq: u64_at(f, 20),
                body_crc: u32_at(f, 30),
            };
            // Contents no correct checkpoint holds: a record ending past u64::MAX, one newer
            // than the checkpoint, a tombstone with a value.
            if loc.offset.checked_add(loc.record_len()).is_none()
                || loc.seq > seq
                || (tombstones && (value_len != 0 || pad != 0))
            {
                return None;
            }
            v.push((key, loc));
            at += key_len + CKPT_ENTRY_FIXED_BYTES;
        }
        Some(v)
    };
    let entries = read(entries_n, false)?;
    let tombstones = read(tombs_n, true)?;
    if at != body.len() {
        return None;
    }
    Some(Checkpoint {
        seq,
        replay_segment: u64_at(b, 24),
        replay_offset: u64_at(b, 32),
        entries,
        tombstones,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_checks() {
        let mut buf = vec![0u8; record_len(3, 5) + 10];
        encode_record(&mut buf, RecordKind::Put, 7, b"abc", b"hello", 0);
        let r = decode_record(&buf).unwrap();
        assert_eq!(
            (r.key, r.value, r.header.seq),
            (&b"abc"[..], &b"hello"[..], 7)
        );
        for i in 0..record_len(3, 5) {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(
                decode_record(&bad).is_err(),
                "flip at byte {i} not detected"
            );
        }
        assert_eq!(decode_record(&buf[..20]), Err(RecordError::Short));
        assert_eq!(
            decode_record(&buf[..record_len(3, 5) - 1]),
            Err(RecordError::Short)
        );
    }

    #[test]
    fn scan_stops_at_torn_tail_and_old_seq() {
        let mut log = vec![0u8; 4096];
        let a = record_len(1, 10);
        encode_record(&mut log, RecordKind::Put, 1, b"a", &[1; 10], 0);
        encode_record(&mut log[a..], RecordKind::Delete, 2, b"b", &[], 0);
        let b = record_len(1, 0);
        // An older record after them: left from an earlier tail, must not be applied.
        encode_record(&mut log[a + b..], RecordKind::Put, 1, b"c", &[3; 4], 0);
        let mut seen = vec![];
        let end = scan_records(&log, 0, 0, |off, r| seen.push((off, r.key.to_vec())));
        assert_eq!(seen, vec![(0, b"a".to_vec()), (a, b"b".to_vec())]);
        assert_eq!(end.end, a + b);
        assert!(end.garbage_after);
        let clean = scan_records(&log[..a + b], 0, 0, |_, _| {});
        assert!(!clean.garbage_after);
    }

    #[test]
    fn long_values_are_aligned_and_padding_checked() {
        let value = vec![7u8; 5000];
        let pad = value_pad(100, 3, value.len());
        assert_eq!((100 + 32 + 3 + pad as u64) % VALUE_ALIGN_BYTES, 0);
        assert_eq!(value_pad(100, 3, 4095), 0);
        let mut buf = vec![0u8; record_len(3, 5000) + pad as usize];
        let crc = encode_record(&mut buf, RecordKind::Put, 1, b"key", &value, pad);
        let r = decode_record(&buf).unwrap();
        assert_eq!(
            (r.value, r.header.pad, r.header.body_crc),
            (&value[..], pad, crc)
        );
        let loc = Loc::of(0, 100, &r.header);
        assert_eq!(
            &buf[(loc.value_offset() - 100) as usize..][..5000],
            &value[..]
        );
        buf[32 + 3] = 1; // a non-zero padding byte
        assert_eq!(decode_record(&buf), Err(RecordError::Length));
    }

    #[test]
    fn intact_records_are_found_behind_damage() {
        let mut log = vec![0u8; 1024];
        let a = record_len(1, 10);
        let b = record_len(2, 20);
        encode_record(&mut log, RecordKind::Put, 1, b"a", &[1; 10], 0);
        encode_record(&mut log[a..], RecordKind::Put, 2, b"bb", &[2; 20], 0);
        encode_record(&mut log[a + b..], RecordKind::Delete, 3, b"a", &[], 0);
        assert_eq!(find_intact_record(&log, 0), Some(a));
        assert_eq!(find_intact_record(&log, a), Some(a + b));
        assert_eq!(find_intact_record(&log, a + b), None);
        log[a + 40] ^= 1; // damage b's value: c behind it is still intact
        let scan = scan_records(&log, 0, 0, |_, _| {});
        assert_eq!(scan.end, a);
        assert_eq!(find_intact_record(&log, scan.end), Some(a + b));
        log[a + b + 3] ^= 1; // and c's magic: nothing intact is left
        assert_eq!(find_intact_record(&log, scan.end), None);
        assert_eq!(find_intact_record(&log[..3], 0), None);
        assert_eq!(find_intact_record(&log, usize::MAX), None);
    }

    #[test]
    fn checkpoints_with_impossible_contents_are_rejected() {
        let l = Loc {
            segment: 1,
            offset: 0,
            key_len: 1,
            value_len: 5,
            pad: 0,
            seq: 4,
            body_crc: 0,
        };
        let good = Checkpoint {
            seq: 9,
            replay_segment: 1,
            replay_offset: 100,
            entries: vec![(b"a".to_vec(), l)],
            tombstones: vec![(b"b".to_vec(), Loc { value_len: 0, ..l })],
        };
        assert!(decode_checkpoint(&encode_checkpoint(&good)).is_some());
        let bad = |f: &dyn Fn(&mut Checkpoint)| {
            let mut c = good.clone();
            f(&mut c);
            decode_checkpoint(&encode_checkpoint(&c))
        };
        assert_eq!(bad(&|c| c.entries[0].1.offset = u64::MAX - 37), None);
        assert!(bad(&|c| c.entries[0].1.offset = u64::MAX - 38).is_some());
        assert_eq!(bad(&|c| c.tombstones[0].1.offset = u64::MAX), None);
        assert_eq!(bad(&|c| c.seq = CHECKPOINT_SEQ_MAX + 1), None);
        assert!(bad(&|c| c.seq = CHECKPOINT_SEQ_MAX).is_some());
        assert_eq!(bad(&|c| c.entries[0].1.seq = 10), None);
        assert_eq!(bad(&|c| c.tombstones[0].1.value_len = 1), None);
    }

    #[test]
    fn checkpoint_round_trip() {
        let l = Loc {
            segment: 3,
            offset: 4096,
            key_len: 2,
            value_len: 9,
            pad: 0,
            seq: 11,
            body_crc: 5,
        };
        let c = Checkpoint {
            seq: 11,
            replay_segment: 3,
            replay_offset: 8192,
            entries: vec![(b"k1".to_vec(), l)],
            tombstones: vec![(b"k2".to_vec(), Loc { value_len: 0, ..l })],
        };
        let b = encode_checkpoint(&c);
        assert_eq!(decode_checkpoint(&b), Some(c));
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert_eq!(decode_checkpoint(&bad), None, "flip at {i}");
        }
    }
}
