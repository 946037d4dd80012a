//! Self-describing bodies: every byte of every version the simulator writes follows from a
//! segment seed, and every 64-byte block of a segment starts with a stamp naming the seed and
//! the block. Any mix of two versions, any stale or shifted piece, is therefore visible, and a
//! wrong body can be explained: [`explain`] finds which segments its bytes came from.

/// Bytes between two stamps.
const BLOCK: usize = 64;
/// Marks a stamp: `RSIM` in ASCII.
const MAGIC: [u8; 4] = *b"RSIM";

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// One segment of a body: `len` bytes generated from `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// What every byte follows from; unique per segment within a run.
    pub seed: u64,
    /// Bytes.
    pub len: usize,
}

/// Appends segment `s`'s bytes to `out`. Block b (64 bytes) starts with `RSIM`, the seed and
/// b as little-endian numbers (16 bytes); the rest is a stream keyed by seed and position.
pub fn append_segment(s: Segment, out: &mut Vec<u8>) {
    let start = out.len();
    out.reserve(s.len);
    let mut block = [0u8; BLOCK];
    let mut b = 0u64;
    while out.len() - start < s.len {
        block[..4].copy_from_slice(&MAGIC);
        block[4..12].copy_from_slice(&s.seed.to_le_bytes());
        block[12..16].copy_from_slice(&(b as u32).to_le_bytes());
        for (i, word) in block[16..].chunks_mut(8).enumerate() {
            let v = splitmix(s.seed ^ (b << 3 | i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
            word.copy_from_slice(&v.to_le_bytes()[..word.len()]);
        }
        let take = (s.len - (out.len() - start)).min(BLOCK);
        out.extend_from_slice(&block[..take]);
        b += 1;
    }
}

/// The body made of `segments`, one after another.
pub fn body(segments: &[Segment]) -> Vec<u8> {
    let mut out = Vec::with_capacity(segments.iter().map(|s| s.len).sum());
    for s in segments {
        append_segment(*s, &mut out);
    }
    out
}

/// A run of bytes of a wrong body traced back to a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// First byte of the run in the body.
    pub start: usize,
    /// One past its last byte.
    pub end: usize,
    /// The segment's seed (0: no stamp found, unknown bytes).
    pub seed: u64,
    /// The segment's block the run starts in.
    pub block: u32,
}

/// Traces `got` back to segments by their stamps: runs of consecutive blocks of one segment.
/// Bytes before the first stamp, or between stamps that do not continue a run, form runs of
/// seed 0.
pub fn explain(got: &[u8]) -> Vec<Origin> {
    let mut out: Vec<Origin> = Vec::new();
    let mut unknown: Option<usize> = None;
    let flush = |out: &mut Vec<Origin>, unknown: &mut Option<usize>, to: usize| {
        if let Some(from) = unknown.take() {
            out.push(Origin {
                start: from,
                end: to,
                seed: 0,
                block: 0,
            });
        }
    };
    let mut i = 0;
    while i < got.len() {
        if i + 16 > got.len() {
            // A last block too short for its stamp: it continues the run before it if its
            // bytes are that stamp's first bytes.
            if let Some(o) = out.last_mut().filter(|o| o.end == i && o.seed != 0) {
                let next = o.block as usize + (i - o.start).div_ceil(BLOCK);
                let mut stamp = [0u8; 16];
                stamp[..4].copy_from_slice(&MAGIC);
                stamp[4..12].copy_from_slice(&o.seed.to_le_bytes());
                stamp[12..].copy_from_slice(&(next as u32).to_le_bytes());
                if got[i..] == stamp[..got.len() - i] {
                    o.end = got.len();
                    break;
                }
            }
        }
        if i + 16 > got.len() || got[i..i + 4] != MAGIC {
            unknown.get_or_insert(i);
            i += 1;
            continue;
        }
        flush(&mut out, &mut unknown, i);
        let seed = u64::from_le_bytes(got[i + 4..i + 12].try_into().unwrap());
        let block = u32::from_le_bytes(got[i + 12..i + 16].try_into().unwrap());
        // A block ends after 64 bytes, or earlier where the next segment's stamp begins.
        let limit = (i + BLOCK).min(got.len());
        let end = (i + 16..limit)
            .find(|&j| j + 4 <= got.len() && got[j..j + 4] == MAGIC)
            .unwrap_or(limit);
        match out.last_mut() {
            Some(o)
                if o.seed == seed
                    && o.end == i
                    && o.block as usize + (i - o.start) / BLOCK == block as usize =>
            {
                o.end = end;
            }
            _ => out.push(Origin {
                start: i,
                end,
                seed,
                block,
            }),
        }
        i = end;
    }
    flush(&mut out, &mut unknown, got.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_deterministic_and_distinct() {
        let a = Segment { seed: 1, len: 1000 };
        let b = Segment { seed: 2, len: 1000 };
        assert_eq!(body(&[a]), body(&[a]));
        assert_ne!(body(&[a]), body(&[b]));
        assert_eq!(body(&[a]).len(), 1000);
        assert_eq!(body(&[Segment { seed: 3, len: 0 }]).len(), 0);
        assert_eq!(body(&[Segment { seed: 3, len: 5 }]).len(), 5);
    }

    #[test]
    fn a_mixed_body_is_explained() {
        let a = Segment { seed: 11, len: 640 };
        let b = Segment { seed: 22, len: 640 };
        let mut mixed = body(&[a]);
        mixed[320..].copy_from_slice(&body(&[b])[320..]);
        let o = explain(&mixed);
        assert_eq!(o.len(), 2, "{o:?}");
        assert_eq!((o[0].seed, o[0].start, o[0].end), (11, 0, 320));
        assert_eq!(
            (o[1].seed, o[1].start, o[1].end, o[1].block),
            (22, 320, 640, 5)
        );
        let two = body(&[Segment { seed: 5, len: 100 }, Segment { seed: 6, len: 70 }]);
        let o = explain(&two);
        assert_eq!(
            o.iter()
                .map(|o| (o.seed, o.start, o.end))
                .collect::<Vec<_>>(),
            [(5, 0, 100), (6, 100, 170)]
        );
        let junk = vec![7u8; 100];
        assert_eq!(explain(&junk)[0].seed, 0);
    }
}
