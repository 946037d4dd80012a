//! What the reliability manager stores on each device: device keys (a one-byte namespace tag in
//! front of the user key) and values (a versioned, checksummed header in front of the payload).
//! Byte by byte in `docs/format.md`. Pure functions, so they can be fuzzed.

/// First four bytes of every value the manager stores: "RSOB".
pub const PIECE_MAGIC: [u8; 4] = *b"RSOB";
/// Header format version of a piece with one checksum over header and payload.
pub const PIECE_VERSION: u8 = 1;
/// Header format version of a piece with a checksum per unit of its payload (a unit table),
/// so part of the payload can be read and checked without the rest.
pub const PIECE_VERSION_UNITS: u8 = 2;
/// Bytes of the piece header, CRC included (version 1; version 2 adds its unit table).
pub const PIECE_HEADER_BYTES: usize = 52;
/// Bytes of payload one unit checksum covers (version 2; the last unit may be shorter).
pub const PIECE_UNIT_BYTES: usize = 4096;
/// Payloads shorter than this keep version 1: their whole payload is about one device read.
pub const PIECE_UNITS_MIN_PAYLOAD: usize = 16 * 1024;
/// Bytes a device key adds to a user key: the tag and, for later segments, the version and the
/// segment number.
pub const KEY_OVERHEAD_BYTES: usize = 13;

/// Device-key tag of segment 0 of an object (its copy, shard, packed member or pointer).
pub const TAG_OBJECT: u8 = b'o';
/// Device-key tag of segment 1 and later of an object.
pub const TAG_SEGMENT: u8 = b's';
/// Device-key tag of a packing set's parity piece.
pub const TAG_PARITY: u8 = b'p';
/// Device-key tag of a packing set's descriptor copy.
pub const TAG_SET: u8 = b'm';
/// Device-key tag of a packed member that was overwritten or deleted but still belongs to its set.
pub const TAG_DEAD: u8 = b'x';

/// What one stored piece is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PieceKind {
    /// The only copy (Hashing).
    Hashed = 1,
    /// One of r identical copies (Replication).
    Copy = 2,
    /// One data or parity shard of a segment (Splitting).
    Shard = 3,
    /// A whole segment stored on its own device as a member of a packing set.
    Member = 4,
    /// Where a packed segment's set is, kept on other devices so a lost member can be found.
    Pointer = 5,
    /// A packing set's parity.
    Parity = 6,
    /// A packing set's descriptor (member list).
    SetDescriptor = 7,
}

impl PieceKind {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => PieceKind::Hashed,
            2 => PieceKind::Copy,
            3 => PieceKind::Shard,
            4 => PieceKind::Member,
            5 => PieceKind::Pointer,
            6 => PieceKind::Parity,
            7 => PieceKind::SetDescriptor,
            _ => return None,
        })
    }
}

/// The header in front of every stored value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceHeader {
    /// What the piece is.
    pub kind: PieceKind,
    /// Erasure code id (`railstore_ec::CodeId`), 0 for copies.
    pub code: u8,
    /// k for Splitting/Packing, r for Replication, 1 for Hashing.
    pub k: u8,
    /// m for Splitting/Packing, 0 otherwise.
    pub m: u8,
    /// Copy index, shard index, member slot or parity index.
    pub index: u8,
    /// Which segment of the object (0 for sets).
    pub segment: u32,
    /// How many segments the object has (0 for sets).
    pub segment_count: u32,
    /// Length of the whole user object in bytes (for a segment's pieces: of the object, not the segment).
    pub object_len: u64,
    /// Object version: larger is newer; every piece of one write carries the same version.
    pub version: u64,
    /// Packing set id (0 when not packed).
    pub set: u64,
    /// Payload bytes after the header.
    pub payload_len: u32,
}

/// Why bytes are not a valid piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PieceError {
    /// Fewer bytes than a header.
    #[error("shorter than a piece header")]
    Short,
    /// The magic bytes are wrong.
    #[error("bad magic")]
    Magic,
    /// A format version this code does not read.
    #[error("unknown format version")]
    Version,
    /// An unknown piece kind.
    #[error("unknown piece kind")]
    Kind,
    /// The payload length disagrees with the bytes present.
    #[error("payload length mismatch")]
    Length,
    /// The CRC32C does not match.
    #[error("checksum mismatch")]
    Checksum,
}

/// Bytes of a version 2 header for a payload of `payload_len`: the fields, the unit table, its
/// CRC, and zeros up to a multiple of 512, so that with the value on a 512-byte boundary (as the
/// `file` device puts values) a unit is read with exactly its own sectors.
pub fn unit_header_bytes(payload_len: usize) -> usize {
    table_end(payload_len).next_multiple_of(512)
}

/// Where a version 2 header's CRC ends: the fields, the table, the CRC.
fn table_end(payload_len: usize) -> usize {
    PIECE_HEADER_BYTES + 4 * payload_len.div_ceil(PIECE_UNIT_BYTES)
}

/// Whether every unit of `units` (the payload from unit `first` on, whole units but perhaps
/// the payload's last) matches its checksum in `table`.
pub fn units_match(table: &[u32], first: usize, units: &[u8]) -> bool {
    let count = units.len().div_ceil(PIECE_UNIT_BYTES);
    first + count <= table.len()
        && units
            .chunks(PIECE_UNIT_BYTES)
            .zip(&table[first..])
            .all(|(u, &crc)| crc32c::crc32c(u) == crc)
}

impl PieceHeader {
    /// Serialises the header and payload into one value, CRC included (version 1).
    pub fn encode(&self, payload: &[u8]) -> Vec<u8> {
        self.encode_as(payload, false)
    }

    /// Serialises the header, a checksum per [`PIECE_UNIT_BYTES`] of payload and the payload
    /// into one value (version 2): any whole units of it can be read and checked alone.
    pub fn encode_units(&self, payload: &[u8]) -> Vec<u8> {
        self.encode_as(payload, true)
    }

    fn encode_as(&self, payload: &[u8], units: bool) -> Vec<u8> {
        debug_assert_eq!(self.payload_len as usize, payload.len());
        let header = if units {
            unit_header_bytes(payload.len())
        } else {
            PIECE_HEADER_BYTES
        };
        let mut v = Vec::with_capacity(header + payload.len());
        v.extend_from_slice(&PIECE_MAGIC);
        v.push(if units {
            PIECE_VERSION_UNITS
        } else {
            PIECE_VERSION
        });
        v.push(self.kind as u8);
        v.push(self.code);
        v.push(self.k);
        v.push(self.m);
        v.push(self.index);
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&self.segment.to_le_bytes());
        v.extend_from_slice(&self.segment_count.to_le_bytes());
        v.extend_from_slice(&self.object_len.to_le_bytes());
        v.extend_from_slice(&self.version.to_le_bytes());
        v.extend_from_slice(&self.set.to_le_bytes());
        v.extend_from_slice(&self.payload_len.to_le_bytes());
        debug_assert_eq!(v.len(), PIECE_HEADER_BYTES - 4);
        let crc = if units {
            for unit in payload.chunks(PIECE_UNIT_BYTES) {
                v.extend_from_slice(&crc32c::crc32c(unit).to_le_bytes());
            }
            crc32c::crc32c(&v)
        } else {
            crc32c::crc32c_append(crc32c::crc32c(&v), payload)
        };
        v.extend_from_slice(&crc.to_le_bytes());
        v.resize(header, 0);
        v.extend_from_slice(payload);
        v
    }

    /// Parses and checks a stored value; returns the header and the payload.
    pub fn decode(bytes: &[u8]) -> Result<(PieceHeader, &[u8]), PieceError> {
        let h = Self::decode_unchecked(bytes)?;
        if bytes[4] == PIECE_VERSION_UNITS {
            let (h, table) = Self::decode_table(bytes)?;
            let payload = &bytes[unit_header_bytes(h.payload_len as usize)..];
            if payload.len() != h.payload_len as usize {
                return Err(PieceError::Length);
            }
            if !units_match(&table, 0, payload) {
                return Err(PieceError::Checksum);
            }
            return Ok((h, payload));
        }
        let payload = &bytes[PIECE_HEADER_BYTES..];
        if payload.len() != h.payload_len as usize {
            return Err(PieceError::Length);
        }
        let stored = u32::from_le_bytes(bytes[48..52].try_into().unwrap());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..48]), payload);
        if crc != stored {
            return Err(PieceError::Checksum);
        }
        Ok((h, payload))
    }

    /// Parses and checks the header and unit table of a version 2 piece from its first bytes
    /// (at least [`unit_header_bytes`] of its payload length); the payload is not checked.
    /// A version 1 piece is [`PieceError::Version`].
    pub fn decode_table(bytes: &[u8]) -> Result<(PieceHeader, Vec<u32>), PieceError> {
        let h = Self::decode_unchecked(bytes)?;
        if bytes[4] != PIECE_VERSION_UNITS {
            return Err(PieceError::Version);
        }
        let header = unit_header_bytes(h.payload_len as usize);
        if bytes.len() < header {
            return Err(PieceError::Short);
        }
        let end = table_end(h.payload_len as usize);
        let stored = u32::from_le_bytes(bytes[end - 4..end].try_into().unwrap());
        if crc32c::crc32c(&bytes[..end - 4]) != stored || bytes[end..header].iter().any(|&b| b != 0)
        {
            return Err(PieceError::Checksum);
        }
        let table = bytes[48..end - 4]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        Ok((h, table))
    }

    /// Parses the header fields without checking the CRC (which needs the whole payload).
    pub fn decode_unchecked(bytes: &[u8]) -> Result<PieceHeader, PieceError> {
        if bytes.len() < PIECE_HEADER_BYTES {
            return Err(PieceError::Short);
        }
        if bytes[0..4] != PIECE_MAGIC {
            return Err(PieceError::Magic);
        }
        if bytes[4] != PIECE_VERSION && bytes[4] != PIECE_VERSION_UNITS {
            return Err(PieceError::Version);
        }
        let kind = PieceKind::from_u8(bytes[5]).ok_or(PieceError::Kind)?;
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
        Ok(PieceHeader {
            kind,
            code: bytes[6],
            k: bytes[7],
            m: bytes[8],
            index: bytes[9],
            segment: u32_at(12),
            segment_count: u32_at(16),
            object_len: u64_at(20),
            version: u64_at(28),
            set: u64_at(36),
            payload_len: u32_at(44),
        })
    }
}

/// The device key of one segment of a user object. Segment 0 has one key per object; later
/// segments have one per version, so a new version never overwrites the old one's segments
/// (an interrupted overwrite leaves the old version whole).
pub fn segment_key(user_key: &[u8], segment: u32, version: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + KEY_OVERHEAD_BYTES);
    if segment == 0 {
        k.push(TAG_OBJECT);
        k.extend_from_slice(user_key);
    } else {
        k.push(TAG_SEGMENT);
        k.extend_from_slice(user_key);
        k.extend_from_slice(&version.to_be_bytes());
        k.extend_from_slice(&segment.to_be_bytes());
    }
    k
}

/// The device key of a *staged* segment 0 of `version`: the key of a later segment with
/// segment number 0. An overwrite that could otherwise leave neither version readable after a
/// crash (fewer than 2k - 1 positions in service) stores the new pieces here, durably, before
/// it overwrites segment 0 in place.
pub fn staged_key(user_key: &[u8], version: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + KEY_OVERHEAD_BYTES);
    k.push(TAG_SEGMENT);
    k.extend_from_slice(user_key);
    k.extend_from_slice(&version.to_be_bytes());
    k.extend_from_slice(&0u32.to_be_bytes());
    k
}

/// The device key of a packing set's piece (`TAG_PARITY`, `TAG_SET` or `TAG_DEAD`).
pub fn set_key(tag: u8, set: u64, index: u8) -> Vec<u8> {
    let mut k = Vec::with_capacity(10);
    k.push(tag);
    k.extend_from_slice(&set.to_be_bytes());
    if tag != TAG_SET {
        k.push(index);
    }
    k
}

/// What a device key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceKey {
    /// A segment of a user object.
    Segment {
        /// The user key.
        user_key: Vec<u8>,
        /// The segment number.
        segment: u32,
        /// The object version (0 for segment 0, whose key has none).
        version: u64,
    },
    /// A staged segment 0 of one version of a user object ([`staged_key`]).
    Staged {
        /// The user key.
        user_key: Vec<u8>,
        /// The version staged.
        version: u64,
    },
    /// A piece of a packing set.
    Set {
        /// `TAG_PARITY`, `TAG_SET` or `TAG_DEAD`.
        tag: u8,
        /// The set id.
        set: u64,
        /// Parity index or member slot (0 for descriptors).
        index: u8,
    },
}

/// Parses a device key written by this crate; `None` for keys it did not write.
pub fn parse_device_key(key: &[u8]) -> Option<DeviceKey> {
    let (&tag, rest) = key.split_first()?;
    match tag {
        TAG_OBJECT if !rest.is_empty() => Some(DeviceKey::Segment {
            user_key: rest.to_vec(),
            segment: 0,
            version: 0,
        }),
        TAG_SEGMENT if rest.len() > 12 => {
            let (user_key, tail) = rest.split_at(rest.len() - 12);
            let version = u64::from_be_bytes(tail[..8].try_into().unwrap());
            let segment = u32::from_be_bytes(tail[8..].try_into().unwrap());
            Some(if segment == 0 {
                DeviceKey::Staged {
                    user_key: user_key.to_vec(),
                    version,
                }
            } else {
                DeviceKey::Segment {
                    user_key: user_key.to_vec(),
                    segment,
                    version,
                }
            })
        }
        TAG_PARITY | TAG_DEAD if rest.len() == 9 => Some(DeviceKey::Set {
            tag,
            set: u64::from_be_bytes(rest[..8].try_into().unwrap()),
            index: rest[8],
        }),
        TAG_SET if rest.len() == 8 => Some(DeviceKey::Set {
            tag,
            set: u64::from_be_bytes(rest.try_into().unwrap()),
            index: 0,
        }),
        _ => None,
    }
}

/// One member of a packing set, as its descriptor records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetMember {
    /// The member's user key.
    pub user_key: Vec<u8>,
    /// Which segment of that object.
    pub segment: u32,
    /// The object version packed.
    pub version: u64,
    /// Bytes of the member's payload (the segment).
    pub len: u32,
    /// The device holding it.
    pub device: u16,
}

/// A packing set: ck members on distinct devices coded into m parity pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetDescriptor {
    /// Erasure code id.
    pub code: u8,
    /// The code's k (ck <= k members; missing ones are virtual zero pieces).
    pub k: u8,
    /// Parity pieces.
    pub m: u8,
    /// Members in slot order.
    pub members: Vec<SetMember>,
    /// Devices holding parity 0..m.
    pub parity_devices: Vec<u16>,
    /// Devices holding a copy of this descriptor.
    pub descriptor_devices: Vec<u16>,
}

impl SetDescriptor {
    /// Longest member: the parity length.
    pub fn parity_len(&self) -> usize {
        self.members
            .iter()
            .map(|m| m.len as usize)
            .max()
            .unwrap_or(0)
    }

    /// Serialises the descriptor (the payload of a `SetDescriptor` piece).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![
            self.code,
            self.k,
            self.m,
            self.members.len() as u8,
            self.parity_devices.len() as u8,
            self.descriptor_devices.len() as u8,
        ];
        for m in &self.members {
            v.push(m.user_key.len() as u8);
            v.extend_from_slice(&m.user_key);
            v.extend_from_slice(&m.segment.to_le_bytes());
            v.extend_from_slice(&m.version.to_le_bytes());
            v.extend_from_slice(&m.len.to_le_bytes());
            v.extend_from_slice(&m.device.to_le_bytes());
        }
        for d in self.parity_devices.iter().chain(&self.descriptor_devices) {
            v.extend_from_slice(&d.to_le_bytes());
        }
        v
    }

    /// Parses a descriptor payload.
    pub fn decode(b: &[u8]) -> Option<SetDescriptor> {
        let mut r = Reader { b, at: 0 };
        let code = r.u8()?;
        let k = r.u8()?;
        let m = r.u8()?;
        let members_n = r.u8()? as usize;
        let parity_n = r.u8()? as usize;
        let desc_n = r.u8()? as usize;
        let mut members = Vec::with_capacity(members_n);
        for _ in 0..members_n {
            let klen = r.u8()? as usize;
            let user_key = r.bytes(klen)?.to_vec();
            members.push(SetMember {
                user_key,
                segment: u32::from_le_bytes(r.bytes(4)?.try_into().ok()?),
                version: u64::from_le_bytes(r.bytes(8)?.try_into().ok()?),
                len: u32::from_le_bytes(r.bytes(4)?.try_into().ok()?),
                device: u16::from_le_bytes(r.bytes(2)?.try_into().ok()?),
            });
        }
        let mut devs = Vec::with_capacity(parity_n + desc_n);
        for _ in 0..parity_n + desc_n {
            devs.push(u16::from_le_bytes(r.bytes(2)?.try_into().ok()?));
        }
        if r.at != b.len() || members_n == 0 || members_n > k as usize || parity_n != m as usize {
            return None;
        }
        let descriptor_devices = devs.split_off(parity_n);
        Some(SetDescriptor {
            code,
            k,
            m,
            members,
            parity_devices: devs,
            descriptor_devices,
        })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // The parsers see bytes straight from devices: any input is an answer, never a panic.
        #[test]
        fn parsers_take_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = PieceHeader::decode(&bytes);
            let _ = SetDescriptor::decode(&bytes);
            let _ = parse_device_key(&bytes);
            if bytes.len() > PIECE_HEADER_BYTES {
                let mut fixed = bytes.clone();
                fixed[..4].copy_from_slice(&PIECE_MAGIC);
                fixed[4] = PIECE_VERSION;
                let _ = PieceHeader::decode(&fixed);
                fixed[4] = PIECE_VERSION_UNITS;
                let _ = PieceHeader::decode(&fixed);
                let _ = PieceHeader::decode_table(&fixed);
                let _ = SetDescriptor::decode(&fixed[PIECE_HEADER_BYTES..]);
            }
        }
    }

    fn header() -> PieceHeader {
        PieceHeader {
            kind: PieceKind::Shard,
            code: 1,
            k: 4,
            m: 2,
            index: 5,
            segment: 3,
            segment_count: 7,
            object_len: 12_345_678,
            version: 99,
            set: 0,
            payload_len: 5,
        }
    }

    #[test]
    fn piece_round_trips_and_detects_any_flipped_bit() {
        let v = header().encode(b"hello");
        assert_eq!(v.len(), PIECE_HEADER_BYTES + 5);
        let (h, p) = PieceHeader::decode(&v).unwrap();
        assert_eq!(h, header());
        assert_eq!(p, b"hello");
        for bit in 0..v.len() * 8 {
            let mut bad = v.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                PieceHeader::decode(&bad).is_err(),
                "bit {bit} flip accepted"
            );
        }
        assert_eq!(PieceHeader::decode(&v[..40]), Err(PieceError::Short));
        assert_eq!(
            PieceHeader::decode(&v[..v.len() - 1]),
            Err(PieceError::Length)
        );
    }

    #[test]
    fn unit_pieces_round_trip_and_check_each_unit_alone() {
        let payload: Vec<u8> = (0..3 * PIECE_UNIT_BYTES + 100).map(|i| i as u8).collect();
        let h = PieceHeader {
            payload_len: payload.len() as u32,
            ..header()
        };
        let v = h.encode_units(&payload);
        let hlen = unit_header_bytes(payload.len());
        assert_eq!(
            hlen, 512,
            "fields, 4 CRCs and the header's CRC, padded to 512"
        );
        assert_eq!(v.len(), hlen + payload.len());
        let (back, p) = PieceHeader::decode(&v).unwrap();
        assert_eq!((back, p), (h, &payload[..]));
        let (back, table) = PieceHeader::decode_table(&v[..hlen]).unwrap();
        assert_eq!((back, table.len()), (h, 4));
        assert_eq!(
            PieceHeader::decode_table(&v[..hlen - 1]),
            Err(PieceError::Short)
        );
        // Units 1 and 2 alone, and the short last unit alone.
        let units = &v[hlen + PIECE_UNIT_BYTES..hlen + 3 * PIECE_UNIT_BYTES];
        assert!(units_match(&table, 1, units));
        assert!(units_match(&table, 3, &v[hlen + 3 * PIECE_UNIT_BYTES..]));
        assert!(
            !units_match(&table, 2, units),
            "units checked against the wrong slots"
        );
        assert!(
            !units_match(&table, 3, units),
            "more units than the table holds"
        );
        // Every flipped bit (padding included): the whole decode fails; the header's check or
        // the unit's fails.
        for bit in (0..v.len() * 8).step_by(7).chain(8 * 100..8 * 101) {
            let mut bad = v.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                PieceHeader::decode(&bad).is_err(),
                "bit {bit} flip accepted"
            );
            let at = bit / 8;
            if at < hlen {
                assert!(
                    PieceHeader::decode_table(&bad[..hlen]).is_err(),
                    "header bit {bit}"
                );
            } else {
                let u = (at - hlen) / PIECE_UNIT_BYTES;
                let lo = hlen + u * PIECE_UNIT_BYTES;
                let hi = (lo + PIECE_UNIT_BYTES).min(bad.len());
                assert!(!units_match(&table, u, &bad[lo..hi]), "unit bit {bit}");
            }
        }
        // A version 1 piece has no table.
        let old = h.encode(&payload);
        assert_eq!(PieceHeader::decode_table(&old), Err(PieceError::Version));
        assert_eq!(PieceHeader::decode(&old).unwrap().1, &payload[..]);
    }

    #[test]
    fn device_keys_round_trip() {
        assert_eq!(
            parse_device_key(&segment_key(b"a/b", 0, 9)),
            Some(DeviceKey::Segment {
                user_key: b"a/b".to_vec(),
                segment: 0,
                version: 0
            })
        );
        assert_eq!(
            parse_device_key(&segment_key(b"a/b", 70_000, 9)),
            Some(DeviceKey::Segment {
                user_key: b"a/b".to_vec(),
                segment: 70_000,
                version: 9
            })
        );
        assert_eq!(
            parse_device_key(&staged_key(b"a/b", 9)),
            Some(DeviceKey::Staged {
                user_key: b"a/b".to_vec(),
                version: 9
            })
        );
        for tag in [TAG_PARITY, TAG_DEAD, TAG_SET] {
            let idx = if tag == TAG_SET { 0 } else { 3 };
            assert_eq!(
                parse_device_key(&set_key(tag, 0xdead_beef, idx)),
                Some(DeviceKey::Set {
                    tag,
                    set: 0xdead_beef,
                    index: idx
                })
            );
        }
        assert_eq!(parse_device_key(b"zzz"), None);
        assert_eq!(parse_device_key(b"o"), None);
    }

    #[test]
    fn descriptor_round_trips_and_rejects_truncation() {
        let d = SetDescriptor {
            code: 1,
            k: 4,
            m: 2,
            members: vec![
                SetMember {
                    user_key: b"k1".to_vec(),
                    segment: 0,
                    version: 5,
                    len: 4096,
                    device: 0,
                },
                SetMember {
                    user_key: b"key-two".to_vec(),
                    segment: 2,
                    version: 6,
                    len: 100,
                    device: 3,
                },
            ],
            parity_devices: vec![4, 5],
            descriptor_devices: vec![4, 5, 0],
        };
        let b = d.encode();
        assert_eq!(SetDescriptor::decode(&b), Some(d.clone()));
        assert_eq!(d.parity_len(), 4096);
        for cut in 0..b.len() {
            assert_eq!(SetDescriptor::decode(&b[..cut]), None);
        }
    }
}
