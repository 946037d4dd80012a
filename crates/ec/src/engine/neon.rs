//! The aarch64 NEON engine: 16-byte TBL lookups in nibble tables.

use super::{scalar, Tables};
use std::arch::aarch64::*;

/// # Safety
/// `Engine::apply`'s contract; the CPU has NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn neon(
    t: &Tables,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    len: usize,
    acc: bool,
) {
    let body = len / 16 * 16;
    let cols = t.cols();
    let low = vdupq_n_u8(0x0f);
    for (r, &out) in outputs.iter().enumerate() {
        let tabs = &t.nibbles[r * cols..(r + 1) * cols];
        let mut off = 0;
        while off < body {
            // SAFETY: off + 16 <= body <= len for every pointer.
            unsafe {
                let mut a = if acc {
                    vld1q_u8(out.add(off))
                } else {
                    vdupq_n_u8(0)
                };
                for (c, &inp) in inputs.iter().enumerate() {
                    let x = vld1q_u8(inp.add(off));
                    let tl = vld1q_u8(tabs[c].as_ptr());
                    let th = vld1q_u8(tabs[c].as_ptr().add(16));
                    let p = veorq_u8(
                        vqtbl1q_u8(tl, vandq_u8(x, low)),
                        vqtbl1q_u8(th, vshrq_n_u8::<4>(x)),
                    );
                    a = veorq_u8(a, p);
                }
                vst1q_u8(out.add(off), a);
            }
            off += 16;
        }
    }
    // SAFETY: forwarded contract.
    unsafe { scalar::apply_range(t, inputs, outputs, body, len, acc) };
}
