//! Code definitions: which generator matrix turns k data shards into m parity shards.

use crate::gf::{self, Matrix};
use crate::EcError;

/// Largest number of shards (data + parity) a code over GF(2^8) may have.
pub const SHARDS_MAX: usize = 256;

/// Stable identifier of a code family, stored in object headers: never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum CodeId {
    /// Systematic Reed-Solomon with a Cauchy parity matrix, entry (i, j) = 1 / (i xor j) for
    /// parity row i in k..k+m and data column j; the same matrix as ISA-L's
    /// `gf_gen_cauchy1_matrix`. The default.
    CauchyRs = 1,
    /// Systematic Reed-Solomon derived from an extended Vandermonde matrix, normalised so the
    /// first parity row and first parity column are all ones; the same matrix as Jerasure's
    /// `reed_sol_vandermonde_coding_matrix` for w = 8.
    VandermondeRs = 2,
}

impl CodeId {
    /// All code families, in id order.
    pub const ALL: [CodeId; 2] = [CodeId::CauchyRs, CodeId::VandermondeRs];

    /// The byte stored on disk.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// Parses a stored byte.
    pub fn from_u8(b: u8) -> Result<Self, EcError> {
        match b {
            1 => Ok(CodeId::CauchyRs),
            2 => Ok(CodeId::VandermondeRs),
            other => Err(EcError::UnknownCode(other)),
        }
    }

    /// Short name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CodeId::CauchyRs => "cauchy",
            CodeId::VandermondeRs => "vandermonde",
        }
    }
}

impl std::str::FromStr for CodeId {
    type Err = EcError;
    fn from_str(s: &str) -> Result<Self, EcError> {
        CodeId::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| EcError::UnknownCodeName(s.to_string()))
    }
}

/// A systematic code: k data shards, m parity shards, and the (k+m) x k generator matrix whose
/// top k rows are the identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Code {
    id: CodeId,
    k: usize,
    m: usize,
    generator: Matrix,
}

impl Code {
    /// Builds code `id` with `k` data and `m` parity shards; needs k >= 1, m >= 1, k + m <= 256.
    pub fn new(id: CodeId, k: usize, m: usize) -> Result<Self, EcError> {
        if k == 0 || m == 0 || k + m > SHARDS_MAX {
            return Err(EcError::InvalidParameters { k, m });
        }
        let generator = match id {
            CodeId::CauchyRs => cauchy1(k, m),
            CodeId::VandermondeRs => vandermonde_systematic(k, m),
        };
        debug_assert!((0..k).all(|r| (0..k).all(|c| generator.get(r, c) == u8::from(r == c))));
        Ok(Code {
            id,
            k,
            m,
            generator,
        })
    }

    pub fn id(&self) -> CodeId {
        self.id
    }

    /// Number of data shards.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of parity shards.
    pub fn m(&self) -> usize {
        self.m
    }

    /// k + m.
    pub fn n(&self) -> usize {
        self.k + self.m
    }

    /// The full (k+m) x k generator matrix.
    pub fn generator(&self) -> &Matrix {
        &self.generator
    }

    /// The m x k parity part of the generator.
    pub fn parity_matrix(&self) -> Matrix {
        let rows: Vec<usize> = (self.k..self.n()).collect();
        self.generator.select_rows(&rows)
    }
}

/// Identity on top, then 1 / (i xor j) for rows i = k..n and columns j = 0..k.
fn cauchy1(k: usize, m: usize) -> Matrix {
    let n = k + m;
    let mut g = Matrix::zero(n, k);
    for i in 0..k {
        g.set(i, i, 1);
    }
    for i in k..n {
        for j in 0..k {
            // i >= k > j, so i xor j is never zero; i < 256 keeps it a field element.
            g.set(i, j, gf::inv((i ^ j) as u8));
        }
    }
    g
}

/// The extended Vandermonde matrix (rows: e_0, then (i^0, i^1, ..) for i = 1..n-2, then e_{k-1}),
/// made systematic by column operations and then normalised so parity row k and parity column 0
/// are all ones. Column operations and row/column scaling keep every k x k submatrix invertible.
fn vandermonde_systematic(k: usize, m: usize) -> Matrix {
    let n = k + m;
    let mut d = Matrix::zero(n, k);
    d.set(0, 0, 1);
    if n > 1 {
        d.set(n - 1, k - 1, 1);
    }
    for i in 1..n.saturating_sub(1) {
        for j in 0..k {
            d.set(i, j, gf::pow(i as u8, j));
        }
    }
    // Reduce the top k x k block to the identity, one column at a time.
    for i in 1..k {
        let pivot = (i..n)
            .find(|&r| d.get(r, i) != 0)
            .expect("extended Vandermonde matrices always have a pivot");
        if pivot != i {
            d.swap_rows(pivot, i);
        }
        let p = d.get(i, i);
        if p != 1 {
            let f = gf::inv(p);
            for r in 0..n {
                d.set(r, i, gf::mul(d.get(r, i), f));
            }
        }
        for j in 0..k {
            let e = d.get(i, j);
            if j != i && e != 0 {
                for r in 0..n {
                    let v = d.get(r, j) ^ gf::mul(e, d.get(r, i));
                    d.set(r, j, v);
                }
            }
        }
    }
    // Make parity row k all ones by scaling parity columns.
    for j in 0..k {
        let e = d.get(k, j);
        if e != 1 {
            let f = gf::inv(e);
            for r in k..n {
                d.set(r, j, gf::mul(d.get(r, j), f));
            }
        }
    }
    // Make parity column 0 all ones by scaling the remaining parity rows.
    for r in k + 1..n {
        let e = d.get(r, 0);
        if e != 1 {
            d.scale_row(r, gf::inv(e));
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_k_subsets_invertible(code: &Code) {
        // Exhaustive for small n: every choice of k rows must invert (the MDS property).
        let n = code.n();
        let k = code.k();
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != k {
                continue;
            }
            let rows: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
            assert!(
                code.generator().select_rows(&rows).invert().is_some(),
                "{:?} k={} m={} rows {rows:?} singular",
                code.id(),
                code.k(),
                code.m()
            );
        }
    }

    #[test]
    fn small_codes_are_mds() {
        for id in CodeId::ALL {
            for k in 1..=8 {
                for m in 1..=(12 - k).min(6) {
                    all_k_subsets_invertible(&Code::new(id, k, m).unwrap());
                }
            }
        }
    }

    #[test]
    fn cauchy_matches_isal_definition() {
        let c = Code::new(CodeId::CauchyRs, 4, 2).unwrap();
        // 1/(4^0), 1/(4^1), ... computed by hand from the definition.
        for (i, j) in [(4usize, 0usize), (4, 3), (5, 1)] {
            assert_eq!(c.generator().get(i, j), gf::inv((i ^ j) as u8));
        }
    }

    #[test]
    fn vandermonde_is_normalised_like_jerasure() {
        for (k, m) in [(3, 2), (6, 3), (10, 4), (17, 3)] {
            let c = Code::new(CodeId::VandermondeRs, k, m).unwrap();
            assert!(
                c.generator().row(k).iter().all(|&v| v == 1),
                "first parity row is ones"
            );
            assert!(
                (k..k + m).all(|r| c.generator().get(r, 0) == 1),
                "first parity column is ones"
            );
        }
    }

    #[test]
    fn largest_codes_build() {
        for id in CodeId::ALL {
            for (k, m) in [(255, 1), (1, 255), (128, 128), (200, 56)] {
                let c = Code::new(id, k, m).unwrap();
                assert_eq!(c.generator().rows(), 256);
            }
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        for (k, m) in [(0, 1), (1, 0), (200, 57), (256, 1)] {
            assert!(matches!(
                Code::new(CodeId::CauchyRs, k, m),
                Err(EcError::InvalidParameters { .. })
            ));
        }
        assert!(CodeId::from_u8(0).is_err());
        assert_eq!(CodeId::from_u8(2).unwrap(), CodeId::VandermondeRs);
        assert_eq!("cauchy".parse::<CodeId>().unwrap(), CodeId::CauchyRs);
    }
}
