//! A self-check driven by arbitrary bytes, shared by the fuzz target and the tests: the bytes
//! pick a code, an engine, a shard length, data and an erasure pattern; encoding, losing the
//! chosen shards and reconstructing must give back every shard exactly, and asking for more
//! erasures than the code tolerates must fail cleanly.

use crate::{Code, CodeId, Codec, EcError, Engine};

/// Runs the round trip described by `input`; panics when the coder is wrong.
pub fn reconstruct_roundtrip(input: &[u8]) {
    let [a, b, c, d, e, rest @ ..] = input else {
        return;
    };
    let k = 1 + (*a as usize % 24);
    let m = 1 + (*b as usize % 8);
    let id = if c & 1 == 0 {
        CodeId::CauchyRs
    } else {
        CodeId::VandermondeRs
    };
    let engines = Engine::available();
    let engine = engines[*d as usize % engines.len()];
    let len = 1 + (*e as usize % 300);
    let code = Code::new(id, k, m).expect("k <= 24, m <= 8 is a valid code");
    let codec = Codec::with_engine(code, engine).expect("listed as available");
    let oracle = Codec::with_engine(codec.code().clone(), Engine::Scalar).expect("always there");

    let n = k + m;
    let mut shards: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            (0..len)
                .map(|j| {
                    rest.get((i * len + j) % rest.len().max(1))
                        .copied()
                        .unwrap_or(0)
                        ^ i as u8
                })
                .collect()
        })
        .collect();
    {
        let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| &mut s[..]).collect();
        codec.encode_shards(&mut refs).expect("shapes are right");
    }
    let mut expected = shards.clone();
    {
        let mut refs: Vec<&mut [u8]> = expected.iter_mut().map(|s| &mut s[..]).collect();
        oracle.encode_shards(&mut refs).expect("shapes are right");
    }
    assert_eq!(
        shards, expected,
        "{engine} encode differs from the scalar oracle"
    );

    // The erasure pattern: one bit of the input per shard, cycling over the tail.
    let present: Vec<bool> = (0..n)
        .map(|i| {
            rest.get(i % rest.len().max(1))
                .is_none_or(|x| x >> (i % 8) & 1 == 0)
        })
        .collect();
    let missing = present.iter().filter(|p| !**p).count();
    let mut damaged = shards.clone();
    for (s, p) in damaged.iter_mut().zip(&present) {
        if !p {
            s.fill(0xA5);
        }
    }
    let mut refs: Vec<&mut [u8]> = damaged.iter_mut().map(|s| &mut s[..]).collect();
    match codec.reconstruct(&mut refs, &present) {
        Ok(()) => {
            assert!(missing <= m, "reconstructed {missing} erasures with m={m}");
            assert_eq!(damaged, shards, "{engine} reconstruct is wrong");
        }
        Err(EcError::TooManyErasures { .. }) => assert!(missing > m),
        Err(other) => panic!("unexpected error {other}"),
    }
}
