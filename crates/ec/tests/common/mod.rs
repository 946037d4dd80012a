//! Helpers shared by the ec test binaries.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// `count` shards of `len` random bytes.
pub fn random_shards(rng: &mut ChaCha8Rng, count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let mut v = vec![0u8; len];
            rng.fill(&mut v[..]);
            v
        })
        .collect()
}
