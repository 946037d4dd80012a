//! What describes a volume (its record, stored as an object of its own) and where its data
//! objects live in the manager's key space.
//!
//! Keys (all under [`TAG_VOLUME`], which the store leaves alone):
//! - `L m <name>`: the volume's record, JSON ([`VolumeMeta`]);
//! - `L d <id: 8 bytes BE> <index: 8 bytes BE>`: object `index` of the volume whose id is `id`.
//!   Data is named by id, not by name, so a volume deleted and created again under the same name
//!   never meets the old one's objects.

use crate::error::{Result, VolumeError};
use railstore_redundancy::Mechanism;
use railstore_store::TAG_VOLUME;
use serde::{Deserialize, Serialize};

/// Default object size: 4 MiB, like an RBD image's.
pub const OBJECT_BYTES_DEFAULT: u64 = 4 << 20;
/// Smallest object size (one 4 KiB block).
pub const OBJECT_BYTES_MIN: u64 = 4096;
/// Largest object size.
pub const OBJECT_BYTES_MAX: u64 = 64 << 20;
/// Largest volume (the NBD size field is 64-bit; this keeps object indices far from overflow).
pub const VOLUME_BYTES_MAX: u64 = 1 << 50;
/// Longest volume name.
pub const NAME_BYTES_MAX: usize = 64;

/// A volume's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMeta {
    pub name: String,
    /// Names its data objects (see the module docs).
    pub id: u64,
    /// Bytes the block device has.
    pub size: u64,
    /// Bytes per object; the volume is striped over objects of this size.
    pub object_bytes: u64,
    /// The mechanism of every object, as `Mechanism::parse` reads it; `None`: the store's
    /// policy chooses by size (hybrid).
    pub mechanism: Option<String>,
}

/// What `create` is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    pub name: String,
    pub size: u64,
    pub object_bytes: u64,
    pub mechanism: Option<Mechanism>,
}

impl VolumeSpec {
    /// A volume of `size` bytes with the default object size and the store's policy.
    pub fn new(name: &str, size: u64) -> VolumeSpec {
        VolumeSpec {
            name: name.to_string(),
            size,
            object_bytes: OBJECT_BYTES_DEFAULT,
            mechanism: None,
        }
    }

    /// Checks everything a volume needs of its inputs.
    pub fn check(&self) -> Result<()> {
        check_name(&self.name)?;
        check_size(self.size)?;
        let o = self.object_bytes;
        if !(OBJECT_BYTES_MIN..=OBJECT_BYTES_MAX).contains(&o) || !o.is_power_of_two() {
            return Err(VolumeError::Invalid(format!(
                "object size {o} B: a power of two from {OBJECT_BYTES_MIN} B to {} MiB",
                OBJECT_BYTES_MAX >> 20
            )));
        }
        Ok(())
    }
}

/// Checks a volume name: 1 to 64 letters, digits, `.`, `_` or `-`, not starting with `.`.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(VolumeError::Invalid(format!(
            "volume name {name:?}: 1 to {NAME_BYTES_MAX} letters, digits, '.', '_' or '-', \
             not starting with '.'"
        )))
    }
}

/// Checks a volume size: a positive multiple of 512 B, at most [`VOLUME_BYTES_MAX`].
pub fn check_size(size: u64) -> Result<()> {
    if size == 0 || !size.is_multiple_of(512) || size > VOLUME_BYTES_MAX {
        return Err(VolumeError::Invalid(format!(
            "volume size {size} B: a positive multiple of 512 B, at most {} TiB",
            VOLUME_BYTES_MAX >> 40
        )));
    }
    Ok(())
}

/// Parses a size: `4096`, `4K`, `4KiB`, `64M`, `1G`, `2T` (binary units).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || VolumeError::Invalid(format!("{s:?} is not a size like 4096, 4K or 1GiB"));
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// Parses a mechanism argument: `hybrid` (the store's policy) or one `Mechanism::parse` reads.
pub fn parse_mechanism(s: &str) -> Result<Option<Mechanism>> {
    if s.eq_ignore_ascii_case("hybrid") {
        return Ok(None);
    }
    Mechanism::parse(s)
        .map(Some)
        .map_err(|e| VolumeError::Invalid(e.to_string()))
}

/// Key of the record of volume `name`.
pub fn meta_key(name: &str) -> Vec<u8> {
    [&[TAG_VOLUME, b'm'][..], name.as_bytes()].concat()
}

/// Prefix of every volume record.
pub fn meta_prefix() -> Vec<u8> {
    vec![TAG_VOLUME, b'm']
}

/// Prefix of every data object of every volume.
pub fn data_prefix() -> Vec<u8> {
    vec![TAG_VOLUME, b'd']
}

/// Prefix of the data objects of the volume with `id`.
pub fn volume_data_prefix(id: u64) -> Vec<u8> {
    [&data_prefix()[..], &id.to_be_bytes()].concat()
}

/// Key of object `index` of the volume with `id`.
pub fn data_key(id: u64, index: u64) -> Vec<u8> {
    [&volume_data_prefix(id)[..], &index.to_be_bytes()].concat()
}

/// The volume id and object index a data key names.
pub fn parse_data_key(key: &[u8]) -> Option<(u64, u64)> {
    let rest = key.strip_prefix(&data_prefix()[..])?;
    if rest.len() != 16 {
        return None;
    }
    let id = u64::from_be_bytes(rest[..8].try_into().ok()?);
    let index = u64::from_be_bytes(rest[8..].try_into().ok()?);
    Some((id, index))
}

impl VolumeMeta {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a volume record serialises")
    }

    /// Reads a record stored under `key`.
    pub fn decode(key: &[u8], bytes: &[u8]) -> Result<VolumeMeta> {
        let corrupt = |why: String| VolumeError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            why,
        };
        let meta: VolumeMeta = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        if meta_key(&meta.name) != key {
            return Err(corrupt(format!("it names the volume {:?}", meta.name)));
        }
        Ok(meta)
    }

    /// The mechanism of the volume's objects (`None`: the store's policy).
    pub fn mechanism(&self) -> Result<Option<Mechanism>> {
        self.mechanism.as_deref().map_or(Ok(None), parse_mechanism)
    }

    /// Objects the volume spans.
    pub fn objects(&self) -> u64 {
        self.size.div_ceil(self.object_bytes)
    }

    /// Bytes of object `index` within the volume (the last one may be short).
    pub fn object_len(&self, index: u64) -> u64 {
        self.size
            .saturating_sub(index * self.object_bytes)
            .min(self.object_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sizes_and_keys() {
        assert!(check_name("vm-disk_1.img").is_ok());
        for bad in ["", ".hidden", "a/b", "sp ace", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("512").unwrap(), 512);
        assert!(parse_size("1X").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert!(check_size(1000).is_err());
        assert!(check_size(0).is_err());
        let k = data_key(7, 9);
        assert_eq!(parse_data_key(&k), Some((7, 9)));
        assert_eq!(parse_data_key(&meta_key("x")), None);
        assert!(parse_mechanism("hybrid").unwrap().is_none());
        assert!(parse_mechanism("split4+2").unwrap().is_some());
        assert!(parse_mechanism("raid5").is_err());
    }

    #[test]
    fn records_round_trip_and_name_their_key() {
        let m = VolumeMeta {
            name: "v".into(),
            id: 3,
            size: 10 << 20,
            object_bytes: 4 << 20,
            mechanism: Some("rep3".into()),
        };
        assert_eq!(VolumeMeta::decode(&meta_key("v"), &m.encode()).unwrap(), m);
        assert!(VolumeMeta::decode(&meta_key("w"), &m.encode()).is_err());
        assert_eq!(m.objects(), 3);
        assert_eq!(m.object_len(2), 2 << 20);
        assert_eq!(m.object_len(3), 0);
    }
}
