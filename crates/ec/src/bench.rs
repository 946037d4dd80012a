//! The coder benchmark core of EC-Bench (§3.1): data sets prepared in memory and timed coding
//! operations. Reporting, counters and plots live in the `bench` crate; this part only makes the
//! inputs and times the coder, so anything that embeds the coder can measure it the same way.

use crate::{Code, Codec, EcError};
use std::time::Instant;

/// What each timed operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Encode one block of k chunks into m parity chunks.
    Encode,
    /// Recover one stripe that lost m random chunks (data and parity alike).
    Decode,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Encode => "encode",
            Op::Decode => "decode",
        }
    }
}

/// An in-memory data set of about `data_size` bytes of user data, cut into stripes of k + m
/// chunks. For decoding, each stripe was encoded and then lost m random chunks (zeroed), as in
/// EC-Bench's pre-processing stage; every decode rebuilds them in place.
pub struct DataSet {
    op: Op,
    k: usize,
    m: usize,
    chunk: usize,
    /// Each stripe: k + m chunks, each starting on a 64-byte boundary `stride` bytes apart, as a
    /// storage system's I/O buffers would (ISA-L's own benchmarks align likewise).
    stripes: Vec<Aligned>,
    stride: usize,
    present: Vec<Vec<bool>>,
    next: usize,
}

impl DataSet {
    /// Prepares the data set; the seed fixes the bytes and the erasure patterns.
    pub fn new(
        codec: &Codec,
        op: Op,
        chunk: usize,
        data_size: usize,
        seed: u64,
    ) -> Result<DataSet, EcError> {
        let code: &Code = codec.code();
        let (k, m) = (code.k(), code.m());
        let block = k * chunk;
        let count = data_size.div_ceil(block.max(1)).max(1);
        let mut rng = SplitMix64(seed);
        // A second stream for the erasures keeps the data bytes identical for both ops.
        let mut erasures = SplitMix64(seed ^ 0x5EED_E7A5_0000_0001);
        let stride = chunk.div_ceil(64) * 64;
        let mut stripes = Vec::with_capacity(count);
        let mut present = Vec::with_capacity(count);
        for _ in 0..count {
            let mut s = Aligned::zeroed((k + m) * stride);
            for i in 0..k {
                rng.fill(&mut s.as_mut()[i * stride..i * stride + chunk]);
            }
            let mut p = vec![true; k + m];
            if op == Op::Decode {
                codec.encode_shards(&mut shards_of(s.as_mut(), k + m, chunk, stride))?;
                let mut lost = 0;
                while lost < m {
                    let i = (erasures.next() % (k + m) as u64) as usize;
                    if p[i] {
                        p[i] = false;
                        s.as_mut()[i * stride..i * stride + chunk].fill(0);
                        lost += 1;
                    }
                }
            }
            stripes.push(s);
            present.push(p);
        }
        Ok(DataSet {
            op,
            k,
            m,
            chunk,
            stripes,
            stride,
            present,
            next: 0,
        })
    }

    /// Bytes of user data (k chunks) each operation covers.
    pub fn user_bytes_per_op(&self) -> usize {
        self.k * self.chunk
    }

    /// Number of stripes the operations cycle through.
    pub fn stripes(&self) -> usize {
        self.stripes.len()
    }

    /// Runs one operation on the next stripe and returns the nanoseconds spent coding (the
    /// slice bookkeeping around the call is not timed).
    pub fn run_one(&mut self, codec: &Codec) -> Result<u64, EcError> {
        let i = self.next;
        self.next = (self.next + 1) % self.stripes.len();
        let mut shards = shards_of(
            self.stripes[i].as_mut(),
            self.k + self.m,
            self.chunk,
            self.stride,
        );
        let start = Instant::now();
        match self.op {
            Op::Encode => codec.encode_shards(&mut shards)?,
            Op::Decode => codec.reconstruct(&mut shards, &self.present[i])?,
        }
        Ok(start.elapsed().as_nanos() as u64)
    }
}

/// The `n` chunks of a stripe laid out `stride` bytes apart.
fn shards_of(stripe: &mut [u8], n: usize, chunk: usize, stride: usize) -> Vec<&mut [u8]> {
    let mut out = Vec::with_capacity(n);
    let mut rest = stripe;
    for _ in 0..n {
        let (this, next) = rest.split_at_mut(stride.min(rest.len()));
        out.push(&mut this[..chunk]);
        rest = next;
    }
    out
}

/// A zeroed byte buffer whose start is 64-byte aligned.
struct Aligned {
    raw: Vec<u8>,
    offset: usize,
    len: usize,
}

impl Aligned {
    fn zeroed(len: usize) -> Aligned {
        let raw = vec![0u8; len + 64];
        let offset = raw.as_ptr().align_offset(64);
        Aligned { raw, offset, len }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.offset..self.offset + self.len]
    }
}

impl PartialEq for Aligned {
    fn eq(&self, other: &Self) -> bool {
        self.raw[self.offset..self.offset + self.len]
            == other.raw[other.offset..other.offset + other.len]
    }
}

/// A tiny seeded generator so the data set needs no dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CodeId, Engine};

    #[test]
    fn decode_data_set_recovers_what_encoding_made() {
        let codec =
            Codec::with_engine(Code::new(CodeId::CauchyRs, 4, 2).unwrap(), Engine::Scalar).unwrap();
        let mut enc = DataSet::new(&codec, Op::Encode, 100, 1000, 9).unwrap();
        let mut dec = DataSet::new(&codec, Op::Decode, 100, 1000, 9).unwrap();
        assert_eq!(enc.stripes(), 3);
        assert_eq!(enc.user_bytes_per_op(), 400);
        for _ in 0..3 {
            enc.run_one(&codec).unwrap();
            dec.run_one(&codec).unwrap();
        }
        // Same seed, same data: after decoding, every stripe equals the encoded one.
        assert!(
            enc.stripes == dec.stripes,
            "decoded stripes differ from encoded ones"
        );
        assert!(dec
            .present
            .iter()
            .all(|p| p.iter().filter(|x| !**x).count() == 2));
    }
}
