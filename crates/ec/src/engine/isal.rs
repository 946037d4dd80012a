//! Intel ISA-L's erasure coder through FFI (Debian's `libisal-dev`), behind the `isal` feature:
//! an independent implementation to cross-check against and a baseline for benchmarks. Its
//! tables come from its own `ec_init_tables`, so it shares nothing with our engines but the
//! coefficient matrix.

use super::Tables;
use crate::gf::Matrix;
use std::os::raw::{c_int, c_uchar};

#[link(name = "isal")]
unsafe extern "C" {
    fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
    fn ec_encode_data(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *mut c_uchar,
        data: *mut *mut c_uchar,
        coding: *mut *mut c_uchar,
    );
    fn ec_encode_data_update(
        len: c_int,
        k: c_int,
        rows: c_int,
        vec_i: c_int,
        gftbls: *mut c_uchar,
        data: *mut c_uchar,
        coding: *mut *mut c_uchar,
    );
    fn gf_gen_cauchy1_matrix(a: *mut c_uchar, m: c_int, k: c_int);
}

/// ISA-L's expanded tables for `m` (32 bytes per coefficient).
pub(crate) fn init_tables(m: &Matrix) -> Vec<u8> {
    let mut coefs = m.as_bytes().to_vec();
    let mut out = vec![0u8; 32 * coefs.len()];
    if !coefs.is_empty() {
        // SAFETY: `coefs` holds rows * cols bytes and `out` 32 bytes for each of them, as the
        // ISA-L documentation of ec_init_tables requires.
        unsafe {
            ec_init_tables(
                m.cols() as c_int,
                m.rows() as c_int,
                coefs.as_mut_ptr(),
                out.as_mut_ptr(),
            )
        };
    }
    out
}

/// ISA-L's own `gf_gen_cauchy1_matrix` for `n` = k + m rows: the reference for our Cauchy code.
pub fn isal_cauchy1_matrix(k: usize, m: usize) -> Vec<u8> {
    let n = k + m;
    let mut a = vec![0u8; n * k];
    // SAFETY: `a` holds n * k bytes, the size ISA-L writes.
    unsafe { gf_gen_cauchy1_matrix(a.as_mut_ptr(), n as c_int, k as c_int) };
    a
}

/// # Safety
/// `Engine::apply`'s contract; `len` fits in a C int.
pub(crate) unsafe fn apply(
    t: &Tables,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    len: usize,
    accumulate: bool,
) {
    let mut outs = [std::ptr::null_mut::<u8>(); crate::code::SHARDS_MAX];
    outs[..outputs.len()].copy_from_slice(outputs);
    let len = c_int::try_from(len).expect("ISA-L takes lengths below 2 GiB");
    let tables = t.isal.as_ptr() as *mut c_uchar;
    if accumulate {
        for (c, &inp) in inputs.iter().enumerate() {
            // SAFETY: ISA-L only reads the tables and the input, and writes `rows` outputs of
            // `len` bytes, which the caller guarantees.
            unsafe {
                ec_encode_data_update(
                    len,
                    t.cols() as c_int,
                    t.rows() as c_int,
                    c as c_int,
                    tables,
                    inp as *mut c_uchar,
                    outs.as_mut_ptr(),
                )
            };
        }
    } else {
        let mut ins = [std::ptr::null_mut::<u8>(); crate::code::SHARDS_MAX];
        for (d, &s) in ins.iter_mut().zip(inputs) {
            *d = s as *mut u8;
        }
        // SAFETY: as above; ISA-L does not write through the input pointers.
        unsafe {
            ec_encode_data(
                len,
                t.cols() as c_int,
                t.rows() as c_int,
                tables,
                ins.as_mut_ptr(),
                outs.as_mut_ptr(),
            )
        };
    }
}
