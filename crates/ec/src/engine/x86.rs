//! x86-64 engines. Each walks the shards in vector-wide column steps and keeps a group of up to
//! G outputs in registers, so every input byte is loaded once per group and every output byte
//! stored once: the work per byte is the same for encode and decode.
//!
//! Inputs, outputs and lengths may have any alignment (unaligned loads and stores).

// The kernels index several parallel arrays (accumulators, inputs, coefficients) by one row or
// vector number inside const-sized loops that the compiler unrolls; iterators would hide that.
#![allow(clippy::needless_range_loop)]

use super::{scalar, Tables};
use std::arch::x86_64::*;

/// Calls the kernel for consecutive groups of at most `$max` output rows over bytes
/// `$start..$end`. When the rows need more than one group, the columns are cut into blocks so
/// every group after the first reads its inputs from L1 rather than from L2 or memory.
macro_rules! for_row_groups {
    ($t:expr, $max:literal, $len:expr, |$r0:ident, $g:ident, $start:ident, $end:ident| $call:expr) => {{
        let rows = $t.rows();
        let block = if rows <= $max {
            $len
        } else {
            column_block($t.cols())
        };
        let mut $start = 0;
        while $start < $len {
            let $end = ($start + block).min($len);
            let mut $r0 = 0;
            while $r0 < rows {
                let $g = (rows - $r0).min($max);
                $call;
                $r0 += $g;
            }
            $start = $end;
        }
    }};
}

/// Bytes per column block: the inputs of one block fill about 16 KiB, half of L1D.
fn column_block(cols: usize) -> usize {
    ((16 * 1024 / cols.max(1)) / 256 * 256).max(256)
}

// ---------------------------------------------------------------- AVX-512 + GFNI

/// # Safety
/// `Engine::apply`'s contract; the CPU has AVX-512F, AVX-512BW and GFNI.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(crate) unsafe fn avx512_gfni(
    t: &Tables,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    len: usize,
    acc: bool,
) {
    for_row_groups!(t, 4, len, |r0, g, start, end| {
        let outs = &outputs[r0..r0 + g];
        // SAFETY: forwarded contract.
        unsafe {
            match g {
                1 => gfni512_group::<1>(t, r0, inputs, outs, start, end, acc),
                2 => gfni512_group::<2>(t, r0, inputs, outs, start, end, acc),
                3 => gfni512_group::<3>(t, r0, inputs, outs, start, end, acc),
                _ => gfni512_group::<4>(t, r0, inputs, outs, start, end, acc),
            }
        }
    })
}

#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
unsafe fn gfni512_group<const G: usize>(
    t: &Tables,
    r0: usize,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    start: usize,
    end: usize,
    acc: bool,
) {
    // Four outputs by four vectors: 16 accumulators, and each broadcast coefficient serves four
    // vectors. Measured on Zen 4, this beats eight outputs by two vectors even though more
    // outputs then need another (L1-resident, see `for_row_groups`) pass over the inputs.
    // SAFETY: forwarded contract.
    let off = unsafe { gfni512_steps::<G, 4>(t, r0, inputs, outputs, start, end, acc) };
    // SAFETY: forwarded contract.
    unsafe { gfni512_tail::<G>(t, r0, inputs, outputs, off, end, acc) }
}

/// Full steps of U vectors; returns where they stopped.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
unsafe fn gfni512_steps<const G: usize, const U: usize>(
    t: &Tables,
    r0: usize,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    start: usize,
    end: usize,
    acc: bool,
) -> usize {
    let cols = t.cols();
    let mats = &t.affine[r0 * cols..(r0 + G) * cols];
    let step = 64 * U;
    let mut off = start;
    while off + step <= end {
        let mut a = [[_mm512_setzero_si512(); U]; G];
        // Columns two at a time: one three-way xor (VPTERNLOGQ) adds both products, a third
        // fewer vector instructions than an xor per product.
        let mut c = 0;
        while c + 2 <= cols {
            let (p0, p1) = (inputs[c], inputs[c + 1]);
            let mut x0 = [_mm512_setzero_si512(); U];
            let mut x1 = [_mm512_setzero_si512(); U];
            for u in 0..U {
                // SAFETY: off + step <= end <= len and inputs are valid for len bytes.
                unsafe {
                    x0[u] = _mm512_loadu_si512(p0.add(off + 64 * u).cast());
                    x1[u] = _mm512_loadu_si512(p1.add(off + 64 * u).cast());
                }
            }
            for r in 0..G {
                let m0 = _mm512_set1_epi64(mats[r * cols + c] as i64);
                let m1 = _mm512_set1_epi64(mats[r * cols + c + 1] as i64);
                for u in 0..U {
                    a[r][u] = _mm512_ternarylogic_epi64::<0x96>(
                        a[r][u],
                        _mm512_gf2p8affine_epi64_epi8::<0>(x0[u], m0),
                        _mm512_gf2p8affine_epi64_epi8::<0>(x1[u], m1),
                    );
                }
            }
            c += 2;
        }
        if c < cols {
            let inp = inputs[c];
            let mut x = [_mm512_setzero_si512(); U];
            for (u, xu) in x.iter_mut().enumerate() {
                // SAFETY: as above.
                *xu = unsafe { _mm512_loadu_si512(inp.add(off + 64 * u).cast()) };
            }
            for r in 0..G {
                let m = _mm512_set1_epi64(mats[r * cols + c] as i64);
                for u in 0..U {
                    a[r][u] =
                        _mm512_xor_si512(a[r][u], _mm512_gf2p8affine_epi64_epi8::<0>(x[u], m));
                }
            }
        }
        for r in 0..G {
            for u in 0..U {
                // SAFETY: as above, for outputs.
                unsafe {
                    let p = outputs[r].add(off + 64 * u);
                    if acc {
                        a[r][u] = _mm512_xor_si512(a[r][u], _mm512_loadu_si512(p.cast()));
                    }
                    _mm512_storeu_si512(p.cast(), a[r][u]);
                }
            }
        }
        off += step;
    }
    off
}

/// The last bytes from `off` to `end`, one vector at a time, the final one masked so no byte
/// past `end` is touched.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
unsafe fn gfni512_tail<const G: usize>(
    t: &Tables,
    r0: usize,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    mut off: usize,
    end: usize,
    acc: bool,
) {
    let cols = t.cols();
    let mats = &t.affine[r0 * cols..(r0 + G) * cols];
    while off < end {
        let n = (end - off).min(64);
        let mask: __mmask64 = if n == 64 { !0 } else { (1u64 << n) - 1 };
        let mut a = [_mm512_setzero_si512(); G];
        for (c, &inp) in inputs.iter().enumerate() {
            // SAFETY: masked lanes beyond `len` are neither read nor faulted.
            let x = unsafe { _mm512_maskz_loadu_epi8(mask, inp.add(off).cast()) };
            for r in 0..G {
                let m = _mm512_set1_epi64(mats[r * cols + c] as i64);
                a[r] = _mm512_xor_si512(a[r], _mm512_gf2p8affine_epi64_epi8::<0>(x, m));
            }
        }
        for r in 0..G {
            // SAFETY: masked, as above.
            unsafe {
                let p = outputs[r].add(off);
                if acc {
                    a[r] = _mm512_xor_si512(a[r], _mm512_maskz_loadu_epi8(mask, p.cast()));
                }
                _mm512_mask_storeu_epi8(p.cast(), mask, a[r]);
            }
        }
        off += n;
    }
}

// ---------------------------------------------------------------- AVX2 + GFNI

/// # Safety
/// `Engine::apply`'s contract; the CPU has AVX2 and GFNI.
#[target_feature(enable = "avx2,gfni")]
pub(crate) unsafe fn avx2_gfni(
    t: &Tables,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    len: usize,
    acc: bool,
) {
    let body = len / 32 * 32;
    // Three outputs by four vectors: 12 of the 16 ymm registers hold accumulators.
    for_row_groups!(t, 3, body, |r0, g, start, end| {
        let outs = &outputs[r0..r0 + g];
        // SAFETY: forwarded contract.
        unsafe {
            let off = match g {
                1 => gfni256_group::<1, 4>(t, r0, inputs, outs, start, end, acc),
                2 => gfni256_group::<2, 4>(t, r0, inputs, outs, start, end, acc),
                _ => gfni256_group::<3, 4>(t, r0, inputs, outs, start, end, acc),
            };
            match g {
                1 => gfni256_group::<1, 1>(t, r0, inputs, outs, off, end, acc),
                2 => gfni256_group::<2, 1>(t, r0, inputs, outs, off, end, acc),
                _ => gfni256_group::<3, 1>(t, r0, inputs, outs, off, end, acc),
            };
        }
    });
    // SAFETY: forwarded contract.
    unsafe { scalar::apply_range(t, inputs, outputs, body, len, acc) };
}

/// Steps of U vectors from `start` while a whole step fits before `end`; returns where it
/// stopped.
#[target_feature(enable = "avx2,gfni")]
#[inline]
unsafe fn gfni256_group<const G: usize, const U: usize>(
    t: &Tables,
    r0: usize,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    start: usize,
    end: usize,
    acc: bool,
) -> usize {
    let cols = t.cols();
    let mats = &t.affine[r0 * cols..(r0 + G) * cols];
    let step = 32 * U;
    let mut off = start;
    while off + step <= end {
        let mut a = [[_mm256_setzero_si256(); U]; G];
        for (c, &inp) in inputs.iter().enumerate() {
            let mut x = [_mm256_setzero_si256(); U];
            for u in 0..U {
                // SAFETY: off + step <= end <= len.
                x[u] = unsafe { _mm256_loadu_si256(inp.add(off + 32 * u).cast()) };
            }
            for r in 0..G {
                let m = _mm256_set1_epi64x(mats[r * cols + c] as i64);
                for u in 0..U {
                    a[r][u] =
                        _mm256_xor_si256(a[r][u], _mm256_gf2p8affine_epi64_epi8::<0>(x[u], m));
                }
            }
        }
        for r in 0..G {
            for u in 0..U {
                // SAFETY: as above, for outputs.
                unsafe {
                    let p = outputs[r].add(off + 32 * u).cast();
                    if acc {
                        a[r][u] = _mm256_xor_si256(a[r][u], _mm256_loadu_si256(p));
                    }
                    _mm256_storeu_si256(p, a[r][u]);
                }
            }
        }
        off += step;
    }
    off
}

// ---------------------------------------------------------------- AVX2 nibble tables

/// # Safety
/// `Engine::apply`'s contract; the CPU has AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn avx2(
    t: &Tables,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    len: usize,
    acc: bool,
) {
    let body = len / 32 * 32;
    for_row_groups!(t, 4, body, |r0, g, start, end| {
        let outs = &outputs[r0..r0 + g];
        // SAFETY: forwarded contract.
        unsafe {
            match g {
                1 => nib256_group::<1>(t, r0, inputs, outs, start, end, acc),
                2 => nib256_group::<2>(t, r0, inputs, outs, start, end, acc),
                3 => nib256_group::<3>(t, r0, inputs, outs, start, end, acc),
                _ => nib256_group::<4>(t, r0, inputs, outs, start, end, acc),
            }
        }
    });
    // SAFETY: forwarded contract.
    unsafe { scalar::apply_range(t, inputs, outputs, body, len, acc) };
}

#[target_feature(enable = "avx2")]
#[inline]
unsafe fn nib256_group<const G: usize>(
    t: &Tables,
    r0: usize,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    start: usize,
    end: usize,
    acc: bool,
) {
    let cols = t.cols();
    let tabs = &t.nibbles[r0 * cols..(r0 + G) * cols];
    let low = _mm256_set1_epi8(0x0f);
    let mut off = start;
    while off < end {
        let mut a = [_mm256_setzero_si256(); G];
        for (c, &inp) in inputs.iter().enumerate() {
            // SAFETY: off + 32 <= end <= len.
            let x = unsafe { _mm256_loadu_si256(inp.add(off).cast()) };
            let lo = _mm256_and_si256(x, low);
            let hi = _mm256_and_si256(_mm256_srli_epi64::<4>(x), low);
            for r in 0..G {
                let tab = &tabs[r * cols + c];
                // SAFETY: each table is 32 bytes: low half at 0, high half at 16.
                let (tl, th) = unsafe {
                    (
                        _mm256_broadcastsi128_si256(_mm_loadu_si128(tab.as_ptr().cast())),
                        _mm256_broadcastsi128_si256(_mm_loadu_si128(tab.as_ptr().add(16).cast())),
                    )
                };
                let p = _mm256_xor_si256(_mm256_shuffle_epi8(tl, lo), _mm256_shuffle_epi8(th, hi));
                a[r] = _mm256_xor_si256(a[r], p);
            }
        }
        for r in 0..G {
            // SAFETY: as above, for outputs.
            unsafe {
                let p = outputs[r].add(off).cast();
                if acc {
                    a[r] = _mm256_xor_si256(a[r], _mm256_loadu_si256(p));
                }
                _mm256_storeu_si256(p, a[r]);
            }
        }
        off += 32;
    }
}

// ---------------------------------------------------------------- SSSE3 nibble tables

/// # Safety
/// `Engine::apply`'s contract; the CPU has SSSE3.
#[target_feature(enable = "ssse3")]
pub(crate) unsafe fn ssse3(
    t: &Tables,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    len: usize,
    acc: bool,
) {
    let body = len / 16 * 16;
    for_row_groups!(t, 4, body, |r0, g, start, end| {
        let outs = &outputs[r0..r0 + g];
        // SAFETY: forwarded contract.
        unsafe {
            match g {
                1 => nib128_group::<1>(t, r0, inputs, outs, start, end, acc),
                2 => nib128_group::<2>(t, r0, inputs, outs, start, end, acc),
                3 => nib128_group::<3>(t, r0, inputs, outs, start, end, acc),
                _ => nib128_group::<4>(t, r0, inputs, outs, start, end, acc),
            }
        }
    });
    // SAFETY: forwarded contract.
    unsafe { scalar::apply_range(t, inputs, outputs, body, len, acc) };
}

#[target_feature(enable = "ssse3")]
#[inline]
unsafe fn nib128_group<const G: usize>(
    t: &Tables,
    r0: usize,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    start: usize,
    end: usize,
    acc: bool,
) {
    let cols = t.cols();
    let tabs = &t.nibbles[r0 * cols..(r0 + G) * cols];
    let low = _mm_set1_epi8(0x0f);
    let mut off = start;
    while off < end {
        let mut a = [_mm_setzero_si128(); G];
        for (c, &inp) in inputs.iter().enumerate() {
            // SAFETY: off + 16 <= end <= len.
            let x = unsafe { _mm_loadu_si128(inp.add(off).cast()) };
            let lo = _mm_and_si128(x, low);
            let hi = _mm_and_si128(_mm_srli_epi64::<4>(x), low);
            for r in 0..G {
                let tab = &tabs[r * cols + c];
                // SAFETY: each table is 32 bytes.
                let (tl, th) = unsafe {
                    (
                        _mm_loadu_si128(tab.as_ptr().cast()),
                        _mm_loadu_si128(tab.as_ptr().add(16).cast()),
                    )
                };
                let p = _mm_xor_si128(_mm_shuffle_epi8(tl, lo), _mm_shuffle_epi8(th, hi));
                a[r] = _mm_xor_si128(a[r], p);
            }
        }
        for r in 0..G {
            // SAFETY: as above, for outputs.
            unsafe {
                let p = outputs[r].add(off).cast();
                if acc {
                    a[r] = _mm_xor_si128(a[r], _mm_loadu_si128(p));
                }
                _mm_storeu_si128(p, a[r]);
            }
        }
        off += 16;
    }
}
