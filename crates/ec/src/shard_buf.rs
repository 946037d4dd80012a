//! Shard buffers that suit their codec: page-locked memory from a pool when the codec sends
//! shards of that length to the GPU (which then copies them without a staging copy on the CPU),
//! the heap otherwise.

use std::ops::{Deref, DerefMut};

/// A zeroed shard buffer from [`crate::Codec::shard_buffers`].
pub struct ShardBuf(Repr);

enum Repr {
    Heap(Vec<u8>),
    #[cfg(feature = "cuda")]
    Pinned(crate::engine::cuda::PooledPinned),
}

impl ShardBuf {
    /// `len` zeroed bytes, page-locked when `pinned` and the pool can give them.
    pub(crate) fn zeroed(len: usize, pinned: bool) -> ShardBuf {
        #[cfg(feature = "cuda")]
        if pinned {
            if let Some(b) = crate::engine::cuda::PooledPinned::take(len) {
                return ShardBuf(Repr::Pinned(b));
            }
        }
        let _ = pinned;
        ShardBuf(Repr::Heap(vec![0u8; len]))
    }

    /// Whether the buffer is page-locked (the GPU copies it directly).
    pub fn is_pinned(&self) -> bool {
        !matches!(self.0, Repr::Heap(_))
    }
}

impl Deref for ShardBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Heap(v) => v,
            #[cfg(feature = "cuda")]
            Repr::Pinned(p) => p.as_slice(),
        }
    }
}

impl DerefMut for ShardBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Repr::Heap(v) => v,
            #[cfg(feature = "cuda")]
            Repr::Pinned(p) => p.as_mut_slice(),
        }
    }
}
