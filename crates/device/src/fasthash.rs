//! A small, fast, non-cryptographic hasher for in-memory maps keyed by device keys. Keys come
//! from the layers above, not from untrusted network peers, so HashDoS resistance is not needed
//! and SipHash's cost per lookup is (the simulator's hot path does several lookups per op).

use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hasher over 8-byte words.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl FastHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // Final avalanche so the low bits hashbrown uses depend on every input bit.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
}

/// `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Bytes a [`MapKey`] keeps inline.
pub(crate) const INLINE_KEY_BYTES: usize = 22;

/// A map key that keeps short keys (up to 22 bytes: the benchmarks' 8-byte keys, short names)
/// inside the map's own slot instead of behind a pointer, so a lookup touches one cache line
/// less. Hashes and compares exactly like the `[u8]` it holds, so maps look it up by `&[u8]`.
#[derive(Clone)]
pub(crate) enum MapKey {
    /// Up to [`INLINE_KEY_BYTES`] bytes; `len` of them are the key.
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    /// Longer keys.
    Heap(Box<[u8]>),
}

impl MapKey {
    pub(crate) fn new(key: &[u8]) -> MapKey {
        if key.len() <= INLINE_KEY_BYTES {
            let mut bytes = [0; INLINE_KEY_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            MapKey::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            MapKey::Heap(key.into())
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            MapKey::Inline { len, bytes } => &bytes[..*len as usize],
            MapKey::Heap(b) => b,
        }
    }
}

impl std::borrow::Borrow<[u8]> for MapKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

// Hash and Eq must agree with `[u8]`'s for `Borrow` lookups.
impl std::hash::Hash for MapKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl PartialEq for MapKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for MapKey {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_key_round_trips_and_looks_up_by_slice() {
        let mut m: FastMap<MapKey, usize> = FastMap::default();
        let keys: Vec<Vec<u8>> = (0..40).map(|n| vec![n as u8; n]).collect();
        for (i, k) in keys.iter().enumerate() {
            let mk = MapKey::new(k);
            assert_eq!(mk.as_slice(), &k[..]);
            assert_eq!(
                matches!(mk, MapKey::Inline { .. }),
                k.len() <= INLINE_KEY_BYTES
            );
            m.insert(mk, i);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(m.get(&k[..]), Some(&i));
        }
        assert_eq!(m.get(&[1u8, 2][..]), None);
        assert_eq!(std::mem::size_of::<MapKey>(), 24);
    }
}
