//! Estimates of the memory a structure holds, for each layer's own accounting (`railstore
//! bench scale`, docs/benchmarks/scale.md). Modelled, not measured: the allocator's rounding
//! and the maps' fill are taken from how glibc and the standard library's maps behave.

/// Bytes the allocator takes for a heap block of `len` bytes: glibc adds an 8-byte header and
/// rounds to 16 bytes, 32 at least; nothing for an empty `Vec` or `String`.
pub fn heap(len: usize) -> u64 {
    if len == 0 {
        0
    } else {
        ((len + 8).div_ceil(16) * 16).max(32) as u64
    }
}

/// One entry of a `BTreeMap` whose key and value take `inline` bytes in a node (their own heap
/// blocks not included): nodes hold up to 11 entries and are about three quarters full after
/// random inserts, and each carries a little bookkeeping.
pub fn btree_entry(inline: usize) -> u64 {
    (inline as u64 * 4).div_ceil(3) + 8
}

/// One entry of a `HashMap` with `inline` bytes of key and value: tables grow by doubling at
/// 7/8 full (so about 0.6 full on average) and keep one control byte per slot.
pub fn hash_entry(inline: usize) -> u64 {
    (inline as u64 + 1) * 5 / 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_follow_the_allocator_and_map_models() {
        assert_eq!(heap(0), 0);
        assert_eq!(heap(1), 32);
        assert_eq!(heap(24), 32);
        assert_eq!(heap(25), 48);
        assert_eq!(btree_entry(24 + 24), 72);
        assert_eq!(hash_entry(59), 100);
    }
}
