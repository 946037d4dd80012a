//! Erasure coding for railstore (DESIGN §3.1): systematic Reed-Solomon over GF(2^8).
//!
//! One code, many engines: the generator matrix ([`Code`], identified on disk by [`CodeId`])
//! fixes the bytes; the [`Engine`] (scalar oracle, SSSE3, AVX2, AVX2+GFNI, AVX-512+GFNI, NEON,
//! optional ISA-L, an NVIDIA GPU with the `cuda` feature) only decides how fast they are
//! computed. [`Codec`] binds a code to an engine
//! and a thread count and offers encode, reconstruct (any pattern of up to m missing shards),
//! reconstruct-data-only, verify and parity delta update, all on caller-provided buffers.
//! Shards may have any length and any alignment (no call fails for alignment);
//! 64-byte-aligned buffers run fastest (a split cache line costs a second load).
//!
//! ```
//! use railstore_ec::{Code, CodeId, Codec};
//! let codec = Codec::new(Code::new(CodeId::CauchyRs, 4, 2)?)?;
//! let data: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 1000]).collect();
//! let mut shards: Vec<Vec<u8>> = data.clone();
//! shards.resize(6, vec![0; 1000]);
//! let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| &mut s[..]).collect();
//! codec.encode_shards(&mut refs)?;
//! // Lose a data shard and a parity shard, then rebuild them.
//! refs[1].fill(0);
//! refs[5].fill(0);
//! codec.reconstruct(&mut refs, &[true, false, true, true, true, false])?;
//! assert_eq!(&refs[1][..], &data[1][..]);
//! # Ok::<(), railstore_ec::EcError>(())
//! ```

pub mod bench;
pub mod check;
mod code;
mod codec;
mod engine;
pub mod gf;
#[cfg(feature = "cuda")]
pub mod gpu;
mod pool;
mod shard_buf;

pub use code::{Code, CodeId, SHARDS_MAX};
pub use codec::{Codec, Offload, DECODE_CACHE_ENTRIES_MAX};
pub use engine::{
    gpu_call_counts, gpu_calls, gpu_description, gpu_fallbacks, gpu_unavailable_reason, Engine,
    Tables, ENGINE_ENV,
};
pub use shard_buf::ShardBuf;

#[cfg(feature = "isal")]
pub use engine::isal_cauchy1_matrix;

/// Everything that can go wrong in erasure coding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EcError {
    #[error("invalid code parameters k={k} m={m}: need k >= 1, m >= 1 and k + m <= 256")]
    InvalidParameters { k: usize, m: usize },
    #[error("unknown code id {0} in stored data")]
    UnknownCode(u8),
    #[error("unknown code name {0:?} (known: cauchy, vandermonde)")]
    UnknownCodeName(String),
    #[error("unknown engine {0:?} (known: scalar, ssse3, avx2, avx2-gfni, avx512-gfni, neon, isal, cuda, auto)")]
    UnknownEngine(String),
    #[error("engine {0} is not available on this CPU or build")]
    EngineUnavailable(&'static str),
    #[error("engine cuda is not available: {0}")]
    GpuUnavailable(String),
    #[error("engine {0} codes on the CPU; an offload engine is one that does not (cuda)")]
    NotOffload(&'static str),
    #[error("GPU error: {0}")]
    Gpu(String),
    #[error("expected {expected} {what} shards, got {got}")]
    WrongShardCount {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("shard {index} is {got} bytes long, expected {expected} like the first")]
    UnequalShardLengths {
        expected: usize,
        index: usize,
        got: usize,
    },
    #[error("{missing} shards are missing but the code tolerates at most {m}")]
    TooManyErasures { missing: usize, m: usize },
    #[error("data shard index {index} is out of range for k={k}")]
    ShardIndexOutOfRange { index: usize, k: usize },
    #[error("thread count must be at least 1, got {0}")]
    InvalidThreadCount(usize),
    #[error("could not start the coding thread pool: {0}")]
    ThreadPool(String),
}
