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

// ---------------------------------------------------------------------------------------------
// The single-file layout: one preallocated file or block device (docs/format.md).

/// Bytes of one on-disk metadata block of the single-file layout (superblock copy, slot header).
pub const META_BLOCK_BYTES: u64 = 4096;
/// First eight bytes of a superblock copy.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"RSDEVSB1";
/// Superblock format version written by this code.
pub const SUPERBLOCK_VERSION: u32 = 1;
/// Byte offsets of the two superblock copies.
pub const SUPERBLOCK_OFFSETS: [u64; 2] = [0, META_BLOCK_BYTES];
/// Byte offset of the first checkpoint region.
pub const CHECKPOINT_REGIONS_OFFSET: u64 = 2 * META_BLOCK_BYTES;
/// Bytes of a superblock before its CRC.
const SUPERBLOCK_CRC_AT: usize = 88;
/// First eight bytes of a slot's identity sector.
pub const SLOT_MAGIC: [u8; 8] = *b"RSSLOT01";
/// First eight bytes of a slot's seal sector.
pub const SEAL_MAGIC: [u8; 8] = *b"RSSEAL01";
/// Offset of the seal sector in the slot header block.
pub const SEAL_OFFSET: usize = 512;
/// First eight bytes of a checkpoint region's header.
pub const CKPT_REGION_MAGIC: [u8; 8] = *b"RSCKREG1";
/// Bytes of a checkpoint region's header; the checkpoint follows it.
pub const CKPT_REGION_HEADER_BYTES: usize = 64;
/// Fewest segment slots a single-file device may have: one being appended to, one kept for
/// compaction, and room to work.
pub const SLOTS_MIN: u64 = 4;

/// The superblock of a single-file device: its geometry, fixed when it is formatted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Random id chosen at format; slot headers and checkpoint regions carry it, so that
    /// metadata left by an earlier format of the same space is never taken for this one's.
    pub device_id: u64,
    /// Bytes of the file or block device the geometry was computed for.
    pub total_bytes: u64,
    /// Log bytes per segment (the `segment_bytes` the device was formatted with).
    pub segment_bytes: u64,
    /// Bytes per slot: a 4 KiB header block, then `segment_bytes` rounded up to 4 KiB.
    pub slot_bytes: u64,
    /// Number of slots.
    pub slot_count: u64,
    /// Bytes of each of the two checkpoint regions (a multiple of 4 KiB).
    pub checkpoint_region_bytes: u64,
    /// Byte offset of slot 0 (after the two checkpoint regions).
    pub slots_offset: u64,
    /// Sequence number of the device's first record (the wall clock in nanoseconds at format
    /// time, so records of an earlier format of the same space have lower ones).
    pub seq_base: u64,
}

impl Superblock {
    /// Byte offset of checkpoint region `r` (0 or 1).
    pub fn checkpoint_region_offset(&self, r: usize) -> u64 {
        CHECKPOINT_REGIONS_OFFSET + r as u64 * self.checkpoint_region_bytes
    }

    /// Byte offset of slot `i`'s header block; its log bytes start one block later.
    pub fn slot_offset(&self, i: u64) -> u64 {
        self.slots_offset + i * self.slot_bytes
    }

    /// Log bytes a slot holds (`segment_bytes` rounded up to 4 KiB).
    pub fn slot_data_bytes(&self) -> u64 {
        self.slot_bytes - META_BLOCK_BYTES
    }

    /// The geometry for `total_bytes` of space and segments of `segment_bytes`, or `None` if
    /// fewer than [`SLOTS_MIN`] slots fit. Each checkpoint region gets 1/128 of the space (at
    /// least 64 KiB).
    pub fn plan(
        total_bytes: u64,
        segment_bytes: u64,
        device_id: u64,
        seq_base: u64,
    ) -> Option<Superblock> {
        let b = META_BLOCK_BYTES;
        let slot_bytes = b.checked_add(segment_bytes.checked_next_multiple_of(b)?)?;
        let region = (total_bytes / 128).next_multiple_of(b).max(64 << 10);
        let slots_offset = CHECKPOINT_REGIONS_OFFSET + 2 * region;
        let slot_count = total_bytes.checked_sub(slots_offset)? / slot_bytes;
        (segment_bytes > 0 && slot_count >= SLOTS_MIN && slot_count <= u32::MAX as u64).then_some(
            Superblock {
                device_id,
                total_bytes,
                segment_bytes,
                slot_bytes,
                slot_count,
                checkpoint_region_bytes: region,
                slots_offset,
                seq_base,
            },
        )
    }

    /// Bytes of space [`Superblock::plan`] needs for at least `slots` slots.
    pub fn bytes_for_slots(slots: u64, segment_bytes: u64) -> Option<u64> {
        let b = META_BLOCK_BYTES;
        let area = slots.checked_mul(b + segment_bytes.checked_next_multiple_of(b)?)?;
        // A region of area/64 (or 64 KiB) is at least the 1/128 of the total `plan` gives it.
        let region = (area / 64).next_multiple_of(b).max(64 << 10);
        area.checked_add(CHECKPOINT_REGIONS_OFFSET + 2 * region)
    }
}

/// Serialises a superblock into one 4 KiB block.
pub fn encode_superblock(s: &Superblock) -> [u8; META_BLOCK_BYTES as usize] {
    let mut b = [0u8; META_BLOCK_BYTES as usize];
    b[0..8].copy_from_slice(&SUPERBLOCK_MAGIC);
    b[8..12].copy_from_slice(&SUPERBLOCK_VERSION.to_le_bytes());
    let fields = [
        s.device_id,
        s.total_bytes,
        s.segment_bytes,
        s.slot_bytes,
        s.slot_count,
        CHECKPOINT_REGIONS_OFFSET,
        s.checkpoint_region_bytes,
        s.slots_offset,
        s.seq_base,
    ];
    for (i, f) in fields.iter().enumerate() {
        b[16 + 8 * i..24 + 8 * i].copy_from_slice(&f.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b[..SUPERBLOCK_CRC_AT]);
    b[SUPERBLOCK_CRC_AT..SUPERBLOCK_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Parses and checks a superblock copy: magic, version, CRC, and a geometry that holds
/// together (the one [`Superblock::plan`] computes). `None` if anything is wrong.
pub fn decode_superblock(b: &[u8]) -> Option<Superblock> {
    if b.len() < SUPERBLOCK_CRC_AT + 4
        || b[0..8] != SUPERBLOCK_MAGIC
        || crc32c::crc32c(&b[..SUPERBLOCK_CRC_AT]) != u32_at(b, SUPERBLOCK_CRC_AT)
        || u32_at(b, 8) != SUPERBLOCK_VERSION
        || u32_at(b, 12) != 0
        || u64_at(b, 56) != CHECKPOINT_REGIONS_OFFSET
    {
        return None;
    }
    let s = Superblock {
        device_id: u64_at(b, 16),
        total_bytes: u64_at(b, 24),
        segment_bytes: u64_at(b, 32),
        slot_bytes: u64_at(b, 40),
        slot_count: u64_at(b, 48),
        checkpoint_region_bytes: u64_at(b, 64),
        slots_offset: u64_at(b, 72),
        seq_base: u64_at(b, 80),
    };
    let planned = Superblock::plan(s.total_bytes, s.segment_bytes, s.device_id, s.seq_base)?;
    (planned == s && s.seq_base >= 1 && s.seq_base <= CHECKPOINT_SEQ_MAX / 2).then_some(s)
}

/// A slot's identity sector: which segment the slot holds. A slot whose identity does not
/// decode (zeros, damage, another format's device id) is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotIdentity {
    /// Device id from the superblock.
    pub device_id: u64,
    /// Segment id (>= 1).
    pub segment: u64,
    /// Every record of this segment has a sequence number at least this; older bytes left in
    /// the slot by an earlier segment have lower ones and are never read as this segment's.
    pub start_seq: u64,
}

/// A slot's seal sector: the segment is complete and its log ends at `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotSeal {
    /// Device id from the superblock.
    pub device_id: u64,
    /// Segment id; must equal the identity's.
    pub segment: u64,
    /// Log bytes in the segment.
    pub end: u64,
}

fn sector(magic: &[u8; 8], fields: [u64; 3]) -> [u8; 36] {
    let mut b = [0u8; 36];
    b[0..8].copy_from_slice(magic);
    for (i, f) in fields.iter().enumerate() {
        b[8 + 8 * i..16 + 8 * i].copy_from_slice(&f.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b[..32]);
    b[32..36].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode_sector(b: &[u8], magic: &[u8; 8]) -> Option<[u64; 3]> {
    if b.len() < 36 || b[0..8] != *magic || crc32c::crc32c(&b[..32]) != u32_at(b, 32) {
        return None;
    }
    Some([u64_at(b, 8), u64_at(b, 16), u64_at(b, 24)])
}

/// Serialises a slot header block: the identity at byte 0 and, if sealed, the seal at byte
/// [`SEAL_OFFSET`]; zeros elsewhere. `None` gives the block of a free slot (all zeros).
pub fn encode_slot_header(
    id: Option<&SlotIdentity>,
    seal: Option<&SlotSeal>,
) -> [u8; META_BLOCK_BYTES as usize] {
    let mut b = [0u8; META_BLOCK_BYTES as usize];
    if let Some(i) = id {
        b[..36].copy_from_slice(&sector(&SLOT_MAGIC, [i.device_id, i.segment, i.start_seq]));
    }
    if let Some(s) = seal {
        b[SEAL_OFFSET..SEAL_OFFSET + 36]
            .copy_from_slice(&sector(&SEAL_MAGIC, [s.device_id, s.segment, s.end]));
    }
    b
}

/// Parses a slot header block: the identity if it is intact, carries `device_id` and a segment
/// id >= 1 (else the slot is free), and the seal if it is intact and names the same device and
/// segment with an end of at most `data_bytes`.
pub fn decode_slot_header(
    b: &[u8],
    device_id: u64,
    data_bytes: u64,
) -> (Option<SlotIdentity>, Option<SlotSeal>) {
    let Some([dev, segment, start_seq]) = decode_sector(b, &SLOT_MAGIC) else {
        return (None, None);
    };
    if dev != device_id || segment == 0 || start_seq == 0 || start_seq > CHECKPOINT_SEQ_MAX {
        return (None, None);
    }
    let id = SlotIdentity {
        device_id,
        segment,
        start_seq,
    };
    let seal = b
        .get(SEAL_OFFSET..)
        .and_then(|s| decode_sector(s, &SEAL_MAGIC))
        .filter(|&[d, s, end]| d == device_id && s == segment && end <= data_bytes)
        .map(|[_, _, end]| SlotSeal {
            device_id,
            segment,
            end,
        });
    (Some(id), seal)
}

/// Writes a checkpoint region's 64-byte header for a checkpoint of `len` bytes.
pub fn encode_checkpoint_region_header(
    device_id: u64,
    generation: u64,
    len: u64,
) -> [u8; CKPT_REGION_HEADER_BYTES] {
    let mut b = [0u8; CKPT_REGION_HEADER_BYTES];
    b[..36].copy_from_slice(&sector(&CKPT_REGION_MAGIC, [device_id, generation, len]));
    b
}

/// Parses a checkpoint region: `(generation, checkpoint bytes)` if its header is intact, names
/// `device_id`, and the checkpoint fits in the region. The checkpoint itself is checked by
/// [`decode_checkpoint`].
pub fn decode_checkpoint_region(b: &[u8], device_id: u64) -> Option<(u64, &[u8])> {
    let [dev, generation, len] = decode_sector(b, &CKPT_REGION_MAGIC)?;
    if dev != device_id
        || generation == 0
        || b[36..CKPT_REGION_HEADER_BYTES.min(b.len())]
            .iter()
            .any(|&x| x != 0)
    {
        return None;
    }
    let end = (CKPT_REGION_HEADER_BYTES as u64).checked_add(len)?;
    let end = usize::try_from(end).ok().filter(|&e| e <= b.len())?;
    Some((generation, &b[CKPT_REGION_HEADER_BYTES..end]))
}

/// The first offset after `from` where an intact record newer than `seq_min` starts, and the
/// end of the last such record: what a cut at `from` would lose that is not a leftover of an
/// older tail or of an earlier segment in the same slot.
pub fn newer_intact_records(bytes: &[u8], from: usize, seq_min: u64) -> Option<(usize, usize)> {
    let mut found: Option<(usize, usize)> = None;
    let mut at = from;
    while let Some(next) = find_intact_record(bytes, at) {
        let r = decode_record(&bytes[next..]).expect("intact");
        if r.header.seq > seq_min {
            let end = next + r.header.record_len();
            found = Some(match found {
                Some((first, last)) => (first, last.max(end)),
                None => (next, end),
            });
        }
        at = next;
    }
    found
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

    #[test]
    fn single_file_geometry_holds_together() {
        for seg in [4096u64, 16 << 10, 64 << 10, 5000, 64 << 20, 1 << 30] {
            for slots in [SLOTS_MIN, 5, 17, 1000] {
                let bytes = Superblock::bytes_for_slots(slots, seg).unwrap();
                let sb = Superblock::plan(bytes, seg, 7, 1).unwrap();
                assert!(sb.slot_count >= slots, "{seg} {slots}: {sb:?}");
                assert_eq!(sb.slot_bytes % META_BLOCK_BYTES, 0);
                assert!(sb.slot_data_bytes() >= seg);
                assert!(sb.slot_offset(sb.slot_count) <= bytes);
                assert_eq!(sb.slots_offset, sb.checkpoint_region_offset(2));
            }
            let too_small = Superblock::bytes_for_slots(SLOTS_MIN, seg).unwrap() - 4096;
            let planned = Superblock::plan(too_small, seg, 7, 1);
            assert!(planned.is_none_or(|p| p.slot_count >= SLOTS_MIN));
        }
        assert_eq!(Superblock::plan(1 << 20, 1 << 20, 7, 1), None);
    }

    #[test]
    fn superblock_round_trip_and_checks() {
        let sb = Superblock::plan(100 << 20, 1 << 20, 0xABCD, 1_700_000_000_000_000_000).unwrap();
        let b = encode_superblock(&sb);
        assert_eq!(decode_superblock(&b), Some(sb));
        for i in 0..SUPERBLOCK_CRC_AT + 4 {
            let mut bad = b;
            bad[i] ^= 1;
            assert_eq!(decode_superblock(&bad), None, "flip at {i}");
        }
        // A geometry that does not follow from total and segment size, even with a right CRC.
        let off = Superblock {
            slot_count: sb.slot_count + 1,
            ..sb
        };
        assert_eq!(decode_superblock(&encode_superblock(&off)), None);
        let seq = Superblock { seq_base: 0, ..sb };
        assert_eq!(decode_superblock(&encode_superblock(&seq)), None);
    }

    #[test]
    fn slot_headers_and_checkpoint_regions() {
        let id = SlotIdentity {
            device_id: 9,
            segment: 3,
            start_seq: 77,
        };
        let seal = SlotSeal {
            device_id: 9,
            segment: 3,
            end: 4000,
        };
        let b = encode_slot_header(Some(&id), Some(&seal));
        assert_eq!(decode_slot_header(&b, 9, 4096), (Some(id), Some(seal)));
        assert_eq!(
            decode_slot_header(&b, 8, 4096),
            (None, None),
            "other device"
        );
        assert_eq!(
            decode_slot_header(&b, 9, 3999),
            (Some(id), None),
            "end past the slot"
        );
        let open = encode_slot_header(Some(&id), None);
        assert_eq!(decode_slot_header(&open, 9, 4096), (Some(id), None));
        // Adding the seal leaves the identity sector's bytes as they were.
        assert_eq!(open[..SEAL_OFFSET], b[..SEAL_OFFSET]);
        assert!(encode_slot_header(None, None).iter().all(|&x| x == 0));
        let other = SlotSeal { segment: 4, ..seal };
        let b = encode_slot_header(Some(&id), Some(&other));
        assert_eq!(
            decode_slot_header(&b, 9, 4096),
            (Some(id), None),
            "seal of another"
        );
        let mut torn = encode_slot_header(Some(&id), Some(&seal));
        torn[SEAL_OFFSET + 30] ^= 1;
        assert_eq!(decode_slot_header(&torn, 9, 4096), (Some(id), None));

        let mut region = encode_checkpoint_region_header(9, 2, 5).to_vec();
        region.extend_from_slice(b"abcde");
        assert_eq!(
            decode_checkpoint_region(&region, 9),
            Some((2, &b"abcde"[..]))
        );
        assert_eq!(decode_checkpoint_region(&region, 1), None);
        assert_eq!(
            decode_checkpoint_region(&region[..68], 9),
            None,
            "past the region"
        );
        region[40] = 1;
        assert_eq!(decode_checkpoint_region(&region, 9), None, "reserved bytes");
    }

    #[test]
    fn newer_records_behind_a_cut() {
        let mut log = vec![0u8; 1024];
        let a = record_len(1, 10);
        let b = record_len(1, 20);
        encode_record(&mut log, RecordKind::Put, 5, b"a", &[1; 10], 0);
        encode_record(&mut log[a..], RecordKind::Put, 9, b"b", &[2; 20], 0);
        encode_record(&mut log[a + b..], RecordKind::Put, 7, b"c", &[3; 4], 0);
        let c = record_len(1, 4);
        assert_eq!(newer_intact_records(&log, 0, 0), Some((a, a + b + c)));
        assert_eq!(newer_intact_records(&log, 0, 7), Some((a, a + b)));
        assert_eq!(newer_intact_records(&log, 0, 9), None);
        assert_eq!(newer_intact_records(&log, a, 0), Some((a + b, a + b + c)));
    }
}
