//! The scalar engine: one byte at a time through a full multiplication table. Slow and plain on
//! purpose; it is the oracle every other engine is tested against.

use super::Tables;
use crate::gf;

/// MUL[a][b] = a * b.
static MUL: [[u8; 256]; 256] = {
    let mut t = [[0u8; 256]; 256];
    let mut a = 0;
    while a < 256 {
        let mut b = 0;
        while b < 256 {
            t[a][b] = gf::mul_slow(a as u8, b as u8);
            b += 1;
        }
        a += 1;
    }
    t
};

/// The engine contract of `Engine::apply`, restricted to bytes `start..end`; SIMD engines use it
/// for their tails.
///
/// # Safety
/// As `Engine::apply`, with every pointer valid for `end` bytes.
pub(crate) unsafe fn apply_range(
    t: &Tables,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    start: usize,
    end: usize,
    accumulate: bool,
) {
    for (r, &out) in outputs.iter().enumerate() {
        for i in start..end {
            // SAFETY: i < end and every pointer is valid for `end` bytes.
            let mut acc = if accumulate {
                unsafe { *out.add(i) }
            } else {
                0
            };
            for (c, &inp) in inputs.iter().enumerate() {
                acc ^= MUL[t.coef(r, c) as usize][unsafe { *inp.add(i) } as usize];
            }
            unsafe { *out.add(i) = acc };
        }
    }
}
