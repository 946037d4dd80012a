//! Arithmetic in GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), the field used by
//! ISA-L and Jerasure for w = 8, so codes built here agree byte for byte with theirs.

/// The reducing polynomial, with the x^8 term.
pub const POLY: u16 = 0x11D;

const fn build_exp_log() -> ([u8; 512], [u8; 256]) {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    // Doubling the exp table lets mul skip the `mod 255`.
    let mut j = 255;
    while j < 512 {
        exp[j] = exp[j - 255];
        j += 1;
    }
    (exp, log)
}

const EXP_LOG: ([u8; 512], [u8; 256]) = build_exp_log();
static EXP: [u8; 512] = EXP_LOG.0;
static LOG: [u8; 256] = EXP_LOG.1;

/// Product of `a` and `b`.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Multiplicative inverse of `a`; `a` must not be zero.
#[inline]
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "zero has no inverse in GF(2^8)");
    EXP[255 - LOG[a as usize] as usize]
}

/// `a / b`; `b` must not be zero.
#[inline]
pub fn div(a: u8, b: u8) -> u8 {
    mul(a, inv(b))
}

/// `a` raised to the power `n` (with 0^0 = 1).
pub fn pow(a: u8, n: usize) -> u8 {
    if n == 0 {
        return 1;
    }
    if a == 0 {
        return 0;
    }
    EXP[(LOG[a as usize] as usize * n) % 255]
}

/// Product of `a` and `b` by shift-and-add, independent of the log tables: it builds the scalar
/// engine's table, and the tests check the log tables against it.
pub const fn mul_slow(a: u8, b: u8) -> u8 {
    let (mut a, mut b) = (a as u16, b);
    let mut p: u16 = 0;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        a <<= 1;
        if a & 0x100 != 0 {
            a ^= POLY;
        }
        b >>= 1;
    }
    p as u8
}

/// A row-major matrix over GF(2^8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl Matrix {
    /// The all-zero `rows` x `cols` matrix.
    pub fn zero(rows: usize, cols: usize) -> Self {
        Matrix {
            rows,
            cols,
            data: vec![0; rows * cols],
        }
    }

    /// The `n` x `n` identity.
    pub fn identity(n: usize) -> Self {
        let mut m = Self::zero(n, n);
        for i in 0..n {
            m.set(i, i, 1);
        }
        m
    }

    /// Builds a matrix from row-major bytes.
    pub fn from_rows(rows: usize, cols: usize, data: Vec<u8>) -> Self {
        assert_eq!(data.len(), rows * cols, "matrix data has the wrong length");
        Matrix { rows, cols, data }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    #[inline]
    pub fn get(&self, r: usize, c: usize) -> u8 {
        self.data[r * self.cols + c]
    }

    #[inline]
    pub fn set(&mut self, r: usize, c: usize, v: u8) {
        self.data[r * self.cols + c] = v;
    }

    /// Row `r` as a slice.
    pub fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// All entries, row-major.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// A new matrix made of the given rows of `self`, in that order.
    pub fn select_rows(&self, rows: &[usize]) -> Matrix {
        let mut data = Vec::with_capacity(rows.len() * self.cols);
        for &r in rows {
            data.extend_from_slice(self.row(r));
        }
        Matrix::from_rows(rows.len(), self.cols, data)
    }

    /// `self * other`.
    pub fn mul(&self, other: &Matrix) -> Matrix {
        assert_eq!(self.cols, other.rows, "matrix shapes do not chain");
        let mut out = Matrix::zero(self.rows, other.cols);
        for r in 0..self.rows {
            for i in 0..self.cols {
                let a = self.get(r, i);
                if a == 0 {
                    continue;
                }
                for c in 0..other.cols {
                    let v = out.get(r, c) ^ mul(a, other.get(i, c));
                    out.set(r, c, v);
                }
            }
        }
        out
    }

    /// The inverse by Gauss-Jordan elimination, or `None` when the matrix is singular.
    pub fn invert(&self) -> Option<Matrix> {
        assert_eq!(self.rows, self.cols, "only square matrices invert");
        let n = self.rows;
        let mut a = self.clone();
        let mut b = Matrix::identity(n);
        for col in 0..n {
            let pivot = (col..n).find(|&r| a.get(r, col) != 0)?;
            if pivot != col {
                a.swap_rows(pivot, col);
                b.swap_rows(pivot, col);
            }
            let scale = inv(a.get(col, col));
            a.scale_row(col, scale);
            b.scale_row(col, scale);
            for r in 0..n {
                let f = a.get(r, col);
                if r != col && f != 0 {
                    a.add_scaled_row(r, col, f);
                    b.add_scaled_row(r, col, f);
                }
            }
        }
        Some(b)
    }

    pub(crate) fn swap_rows(&mut self, x: usize, y: usize) {
        for c in 0..self.cols {
            self.data.swap(x * self.cols + c, y * self.cols + c);
        }
    }

    pub(crate) fn scale_row(&mut self, r: usize, f: u8) {
        for c in 0..self.cols {
            let v = mul(self.get(r, c), f);
            self.set(r, c, v);
        }
    }

    /// row[dst] ^= f * row[src]
    fn add_scaled_row(&mut self, dst: usize, src: usize, f: u8) {
        for c in 0..self.cols {
            let v = self.get(dst, c) ^ mul(f, self.get(src, c));
            self.set(dst, c, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_agree_with_shift_and_add() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn field_axioms() {
        for a in 0..=255u8 {
            assert_eq!(mul(a, 1), a, "one is the identity");
            assert_eq!(mul(a, 0), 0, "zero annihilates");
            assert_eq!(a ^ a, 0, "addition is xor, every element its own negative");
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1, "inverse of {a}");
                assert_eq!(div(a, a), 1);
            }
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul(b, a), "commutativity");
                for c in [0u8, 1, 2, 3, 29, 142, 255] {
                    assert_eq!(mul(mul(a, b), c), mul(a, mul(b, c)), "associativity");
                    assert_eq!(mul(a, b ^ c), mul(a, b) ^ mul(a, c), "distributivity");
                }
            }
        }
    }

    #[test]
    fn two_generates_the_multiplicative_group() {
        let mut seen = [false; 256];
        for n in 0..255 {
            let x = pow(2, n);
            assert!(!seen[x as usize], "2^{n} repeats");
            seen[x as usize] = true;
        }
        assert!(!seen[0]);
        assert_eq!(pow(2, 255), 1);
        assert_eq!(pow(0, 0), 1);
        assert_eq!(pow(0, 3), 0);
    }

    #[test]
    fn inverse_times_matrix_is_identity() {
        let m = Matrix::from_rows(3, 3, vec![1, 2, 3, 4, 5, 6, 7, 8, 10]);
        let i = m.invert().expect("invertible");
        assert_eq!(m.mul(&i), Matrix::identity(3));
        assert_eq!(i.mul(&m), Matrix::identity(3));
    }

    #[test]
    fn singular_matrix_does_not_invert() {
        // Row 2 = row 0 + row 1 (xor), so the rows are dependent.
        let m = Matrix::from_rows(3, 3, vec![1, 2, 3, 4, 5, 6, 1 ^ 4, 2 ^ 5, 3 ^ 6]);
        assert!(m.invert().is_none());
    }
}
