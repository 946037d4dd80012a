//! Coding engines: interchangeable implementations of one operation, a GF(2^8) matrix times a
//! set of shards. Every engine produces byte-identical output; the engine is a speed choice.

use crate::gf::{self, Matrix};
use crate::EcError;

#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(feature = "isal")]
mod isal;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(feature = "isal")]
pub use isal::isal_cauchy1_matrix;

/// Environment variable that forces the engine `Engine::auto` picks.
pub const ENGINE_ENV: &str = "RAILSTORE_EC_ENGINE";

/// A coding engine. All are always nameable; `is_available` says whether this CPU and build
/// can run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    /// Table-driven, one byte at a time: the permanent test oracle.
    Scalar,
    /// 16-byte PSHUFB nibble tables.
    Ssse3,
    /// 32-byte PSHUFB nibble tables.
    Avx2,
    /// 32-byte GFNI affine multiplies.
    Avx2Gfni,
    /// 64-byte GFNI affine multiplies with masked tails.
    Avx512Gfni,
    /// 16-byte TBL nibble tables on aarch64.
    Neon,
    /// Intel ISA-L through FFI (cargo feature `isal`), for cross-checks and as a baseline.
    Isal,
    /// An NVIDIA GPU through CUDA (cargo feature `cuda`): the offload coder.
    Cuda,
}

impl Engine {
    /// Every engine, fastest-preferred last.
    pub const ALL: [Engine; 8] = [
        Engine::Scalar,
        Engine::Ssse3,
        Engine::Avx2,
        Engine::Avx2Gfni,
        Engine::Avx512Gfni,
        Engine::Neon,
        Engine::Isal,
        Engine::Cuda,
    ];

    /// The name used on the command line and in `RAILSTORE_EC_ENGINE`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Scalar => "scalar",
            Engine::Ssse3 => "ssse3",
            Engine::Avx2 => "avx2",
            Engine::Avx2Gfni => "avx2-gfni",
            Engine::Avx512Gfni => "avx512-gfni",
            Engine::Neon => "neon",
            Engine::Isal => "isal",
            Engine::Cuda => "cuda",
        }
    }

    /// Parses an engine name; `auto` resolves to `Engine::auto()`.
    pub fn from_name(name: &str) -> Result<Engine, EcError> {
        if name == "auto" {
            return Engine::auto();
        }
        Engine::ALL
            .into_iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| EcError::UnknownEngine(name.to_string()))
    }

    /// Whether this build on this CPU can run the engine.
    pub fn is_available(self) -> bool {
        match self {
            Engine::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Engine::Ssse3 => std::arch::is_x86_feature_detected!("ssse3"),
            #[cfg(target_arch = "x86_64")]
            Engine::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Engine::Avx2Gfni => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(target_arch = "x86_64")]
            Engine::Avx512Gfni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(target_arch = "aarch64")]
            Engine::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            Engine::Isal => cfg!(feature = "isal"),
            Engine::Cuda => gpu_unavailable_reason().is_none(),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The engines this build can run here, in `ALL` order.
    pub fn available() -> Vec<Engine> {
        Engine::ALL
            .into_iter()
            .filter(|e| e.is_available())
            .collect()
    }

    /// The engine railstore uses on this machine: `RAILSTORE_EC_ENGINE` if set (an error if that
    /// engine is unknown or unavailable), else the fastest available native engine.
    pub fn auto() -> Result<Engine, EcError> {
        match std::env::var(ENGINE_ENV) {
            Ok(name) if !name.is_empty() && name != "auto" => {
                let e = Engine::from_name(&name)?;
                e.check_available()?;
                Ok(e)
            }
            _ => Ok(Engine::detect()),
        }
    }

    /// The fastest native engine this CPU runs, ignoring the environment.
    pub fn detect() -> Engine {
        [
            Engine::Avx512Gfni,
            Engine::Avx2Gfni,
            Engine::Avx2,
            Engine::Ssse3,
            Engine::Neon,
        ]
        .into_iter()
        .find(|e| e.is_available())
        .unwrap_or(Engine::Scalar)
    }

    /// An error naming the engine when it cannot run here (for `cuda`, with the reason).
    pub fn check_available(self) -> Result<(), EcError> {
        if self == Engine::Cuda {
            return match gpu_unavailable_reason() {
                None => Ok(()),
                Some(why) => Err(EcError::GpuUnavailable(why)),
            };
        }
        if self.is_available() {
            Ok(())
        } else {
            Err(EcError::EngineUnavailable(self.name()))
        }
    }

    /// Whether the engine codes away from the CPU: each call then pays for transfers, so the
    /// codec hands it whole shards rather than cache-sized blocks or thread slices.
    pub fn is_offload(self) -> bool {
        self == Engine::Cuda
    }

    /// `out[r] = sum_c t[r][c] * in[c]` over `len` bytes, or `out[r] ^= ...` when `accumulate`.
    ///
    /// # Safety
    /// `inputs` holds `t.cols()` pointers and `outputs` `t.rows()` pointers, each valid for `len`
    /// bytes; outputs do not overlap each other or any input; the engine is available.
    pub(crate) unsafe fn apply(
        self,
        t: &Tables,
        inputs: &[*const u8],
        outputs: &[*mut u8],
        len: usize,
        accumulate: bool,
    ) {
        debug_assert_eq!(inputs.len(), t.cols());
        debug_assert_eq!(outputs.len(), t.rows());
        debug_assert!(self.is_available());
        if len == 0 {
            return;
        }
        // SAFETY (all arms): the caller's contract, and availability was checked when the codec
        // chose this engine.
        match self {
            #[cfg(target_arch = "x86_64")]
            Engine::Avx512Gfni => unsafe { x86::avx512_gfni(t, inputs, outputs, len, accumulate) },
            #[cfg(target_arch = "x86_64")]
            Engine::Avx2Gfni => unsafe { x86::avx2_gfni(t, inputs, outputs, len, accumulate) },
            #[cfg(target_arch = "x86_64")]
            Engine::Avx2 => unsafe { x86::avx2(t, inputs, outputs, len, accumulate) },
            #[cfg(target_arch = "x86_64")]
            Engine::Ssse3 => unsafe { x86::ssse3(t, inputs, outputs, len, accumulate) },
            #[cfg(target_arch = "aarch64")]
            Engine::Neon => unsafe { neon::neon(t, inputs, outputs, len, accumulate) },
            #[cfg(feature = "isal")]
            Engine::Isal => unsafe { isal::apply(t, inputs, outputs, len, accumulate) },
            #[cfg(feature = "cuda")]
            Engine::Cuda => unsafe { cuda::apply(t, inputs, outputs, len, accumulate) },
            _ => unsafe { scalar::apply_range(t, inputs, outputs, 0, len, accumulate) },
        }
    }
}

/// Why the `cuda` engine cannot run here (no GPU, no driver, a build without the feature), or
/// `None` when it can. The first call opens the GPU and compiles the kernel.
pub fn gpu_unavailable_reason() -> Option<String> {
    #[cfg(feature = "cuda")]
    {
        cuda::gpu().err().map(str::to_string)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Some("this build has no GPU support (cargo feature `cuda`)".to_string())
    }
}

/// The GPU the `cuda` engine uses, described (name, compute capability, memory, driver).
pub fn gpu_description() -> Option<String> {
    #[cfg(feature = "cuda")]
    {
        cuda::gpu().ok().map(|g| g.description.clone())
    }
    #[cfg(not(feature = "cuda"))]
    {
        None
    }
}

/// Calls the `cuda` engine completed on the GPU.
pub fn gpu_calls() -> u64 {
    gpu_call_counts().0
}

/// Calls the `cuda` engine completed on the GPU, and how many of them the GPU copied straight
/// from and into pinned shards ([`crate::Codec::shard_buffers`]) rather than through staging.
pub fn gpu_call_counts() -> (u64, u64) {
    #[cfg(feature = "cuda")]
    {
        cuda::calls()
    }
    #[cfg(not(feature = "cuda"))]
    {
        (0, 0)
    }
}

/// Calls the `cuda` engine could not complete on the GPU, which the CPU engine computed
/// instead, with the last reason.
pub fn gpu_fallbacks() -> (u64, Option<String>) {
    #[cfg(feature = "cuda")]
    {
        cuda::fallbacks()
    }
    #[cfg(not(feature = "cuda"))]
    {
        (0, None)
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A coefficient matrix prepared for every engine: the raw bytes, GFNI affine bit-matrices and
/// PSHUFB/TBL nibble tables. Built once per code or per erasure pattern, then shared.
#[derive(Debug)]
pub struct Tables {
    rows: usize,
    cols: usize,
    coefs: Vec<u8>,
    /// One 8x8 bit matrix per coefficient, in the layout GF2P8AFFINEQB expects.
    affine: Vec<u64>,
    /// Per coefficient: products with 0..16 (low nibble), then with 0x00, 0x10, .. 0xF0.
    pub(crate) nibbles: Vec<[u8; 32]>,
    #[cfg(feature = "isal")]
    isal: Vec<u8>,
    /// The nibble tables' copy on the GPU, made when the `cuda` engine first uses them.
    #[cfg(feature = "cuda")]
    pub(crate) device: cuda::DeviceTables,
}

impl Tables {
    /// Prepares `m` for the engines.
    pub fn new(m: &Matrix) -> Tables {
        let coefs = m.as_bytes().to_vec();
        let affine = coefs.iter().map(|&c| affine_matrix(c)).collect();
        let nibbles = coefs.iter().map(|&c| nibble_tables(c)).collect();
        Tables {
            rows: m.rows(),
            cols: m.cols(),
            #[cfg(feature = "isal")]
            isal: isal::init_tables(m),
            coefs,
            affine,
            nibbles,
            #[cfg(feature = "cuda")]
            device: Default::default(),
        }
    }

    /// Number of outputs.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of inputs.
    pub fn cols(&self) -> usize {
        self.cols
    }

    #[inline]
    pub(crate) fn coef(&self, r: usize, c: usize) -> u8 {
        self.coefs[r * self.cols + c]
    }
}

/// The GF2P8AFFINEQB matrix for multiplication by `c`: byte 7-i holds the row for output bit
/// i, whose bit j is bit i of c * x^j.
pub(crate) fn affine_matrix(c: u8) -> u64 {
    let mut a = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for j in 0..8 {
            if gf::mul(c, 1 << j) & (1 << i) != 0 {
                row |= 1 << j;
            }
        }
        a |= (row as u64) << (8 * (7 - i));
    }
    a
}

fn nibble_tables(c: u8) -> [u8; 32] {
    let mut t = [0u8; 32];
    for x in 0..16u8 {
        t[x as usize] = gf::mul(c, x);
        t[16 + x as usize] = gf::mul(c, x << 4);
    }
    t
}
