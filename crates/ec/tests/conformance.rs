//! The conformance suite every engine must pass, each engine forced in turn and compared with
//! the scalar oracle (and with ISA-L when the `isal` feature is built).

mod common;
use common::random_shards;
use proptest::prelude::*;
use railstore_ec::{Code, CodeId, Codec, EcError, Engine};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|s| &s[..]).collect()
}

fn muts(v: &mut [Vec<u8>]) -> Vec<&mut [u8]> {
    v.iter_mut().map(|s| &mut s[..]).collect()
}

/// Checks one engine on one code and length: encode against the oracle, every operation's
/// result, and a random erasure pattern.
fn check_engine(engine: Engine, id: CodeId, k: usize, m: usize, len: usize, seed: u64) {
    let ctx = format!("engine={engine} code={id:?} k={k} m={m} len={len} seed={seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let code = Code::new(id, k, m).unwrap();
    let oracle = Codec::with_engine(code.clone(), Engine::Scalar).unwrap();
    let codec = Codec::with_engine(code, engine).unwrap();
    let data = random_shards(&mut rng, k, len);

    let mut want = vec![vec![0u8; len]; m];
    oracle.encode(&refs(&data), &mut muts(&mut want)).unwrap();
    // Start from garbage so an engine that forgets to overwrite is caught.
    let mut parity = random_shards(&mut rng, m, len);
    codec.encode(&refs(&data), &mut muts(&mut parity)).unwrap();
    assert_eq!(parity, want, "encode differs from the oracle: {ctx}");

    let mut all: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
    assert!(
        codec.verify(&refs(&all)).unwrap(),
        "verify rejects good shards: {ctx}"
    );
    if len > 0 {
        let victim = rng.gen_range(0..k + m);
        let byte = rng.gen_range(0..len);
        all[victim][byte] ^= 1 << rng.gen_range(0..8);
        assert!(
            !codec.verify(&refs(&all)).unwrap(),
            "verify accepts a flipped bit: {ctx}"
        );
        all[victim][byte] = if victim < k {
            data[victim][byte]
        } else {
            parity[victim - k][byte]
        };
    }

    // A random erasure pattern of 1..=m shards, data and parity alike.
    let lost = rng.gen_range(1..=m);
    let mut present = vec![true; k + m];
    let mut erased = 0;
    while erased < lost {
        let i = rng.gen_range(0..k + m);
        if present[i] {
            present[i] = false;
            erased += 1;
        }
    }
    let mut damaged = all.clone();
    for (s, p) in damaged.iter_mut().zip(&present) {
        if !p {
            rng.fill(&mut s[..]);
        }
    }
    let mut data_only = damaged.clone();
    codec
        .reconstruct(&mut muts(&mut damaged), &present)
        .unwrap();
    assert_eq!(damaged, all, "reconstruct of {present:?} is wrong: {ctx}");
    codec
        .reconstruct_data(&mut muts(&mut data_only), &present)
        .unwrap();
    for i in 0..k + m {
        if i < k || present[i] {
            assert_eq!(data_only[i], all[i], "reconstruct_data shard {i}: {ctx}");
        } else {
            assert_ne!(
                data_only[i], all[i],
                "reconstruct_data touched missing parity {i}: {ctx}"
            );
        }
    }

    // Delta update of one data shard equals a full re-encode.
    let index = rng.gen_range(0..k);
    let new = random_shards(&mut rng, 1, len).remove(0);
    let mut updated = parity.clone();
    codec
        .update_parity(index, &data[index], &new, &mut muts(&mut updated))
        .unwrap();
    let mut data2 = data.clone();
    data2[index] = new;
    let mut want2 = vec![vec![0u8; len]; m];
    oracle.encode(&refs(&data2), &mut muts(&mut want2)).unwrap();
    assert_eq!(
        updated, want2,
        "update_parity differs from re-encode: {ctx}"
    );
}

fn lengths() -> impl Strategy<Value = usize> {
    prop_oneof![
        1usize..=260,
        Just(4096),
        Just(4095),
        257usize..=20_000,
        Just(65_536 + 13),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_engine_matches_the_oracle(
        k in 1usize..=20,
        m in 1usize..=10,
        len in lengths(),
        vandermonde in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let id = if vandermonde { CodeId::VandermondeRs } else { CodeId::CauchyRs };
        for engine in Engine::available() {
            check_engine(engine, id, k, m, len, seed);
        }
    }

    #[test]
    fn arbitrary_bytes_round_trip(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        railstore_ec::check::reconstruct_roundtrip(&bytes);
    }
}

#[test]
fn paper_configurations_at_large_and_odd_lengths() {
    for engine in Engine::available() {
        for (k, m) in [(3, 2), (6, 3), (10, 4), (17, 3)] {
            for len in [1, 63, 64, 65, 127, 1 << 20] {
                check_engine(engine, CodeId::CauchyRs, k, m, len, (k * 100 + m) as u64);
            }
        }
    }
}

#[test]
fn wide_codes_with_many_outputs() {
    // More outputs than any engine keeps in registers, and more inputs than a group.
    for engine in Engine::available() {
        for (k, m) in [(200, 56), (1, 255), (255, 1), (40, 30)] {
            check_engine(engine, CodeId::CauchyRs, k, m, 333, 7);
            check_engine(engine, CodeId::VandermondeRs, k, m, 97, 8);
        }
    }
}

#[test]
fn empty_shards_are_fine() {
    for engine in Engine::available() {
        check_engine(engine, CodeId::CauchyRs, 4, 2, 0, 1);
    }
}

#[test]
fn threads_give_the_same_bytes() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    for engine in Engine::available() {
        let code = Code::new(CodeId::CauchyRs, 6, 3).unwrap();
        let one = Codec::with_engine(code.clone(), engine).unwrap();
        let many = Codec::with_engine(code, engine)
            .unwrap()
            .with_threads(3)
            .unwrap();
        for len in [100_000, 1 << 20, (1 << 20) + 7] {
            let data = random_shards(&mut rng, 6, len);
            let mut a = vec![vec![0u8; len]; 3];
            let mut b = vec![vec![1u8; len]; 3];
            one.encode(&refs(&data), &mut muts(&mut a)).unwrap();
            many.encode(&refs(&data), &mut muts(&mut b)).unwrap();
            assert_eq!(a, b, "{engine} len={len}");
            let mut all: Vec<Vec<u8>> = data.iter().chain(&a).cloned().collect();
            let expect = all.clone();
            let present = [false, true, true, false, true, true, true, true, false];
            for (s, p) in all.iter_mut().zip(present) {
                if !p {
                    s.fill(0);
                }
            }
            many.reconstruct(&mut muts(&mut all), &present).unwrap();
            assert_eq!(all, expect, "{engine} threaded reconstruct len={len}");
        }
    }
}

#[test]
fn decode_matrices_are_cached_per_pattern() {
    let codec = Codec::new(Code::new(CodeId::CauchyRs, 4, 2).unwrap()).unwrap();
    let mut shards = vec![vec![3u8; 64]; 6];
    codec.encode_shards(&mut muts(&mut shards)).unwrap();
    let p1 = [false, true, true, true, true, true];
    let p2 = [true, false, true, false, true, true];
    for _ in 0..3 {
        codec.reconstruct(&mut muts(&mut shards), &p1).unwrap();
        codec.reconstruct(&mut muts(&mut shards), &p2).unwrap();
    }
    assert_eq!(codec.decode_cache_entries(), 2);
}

#[test]
fn generator_matrices_match_isal_and_jerasure() {
    // Parity rows printed by ISA-L 2.30's gf_gen_cauchy1_matrix and Jerasure 2.0's
    // reed_sol_vandermonde_coding_matrix(k, m, 8).
    let cases: [(usize, usize, &[u8], &[u8]); 3] = [
        (3, 2, &[244, 142, 1, 71, 167, 122], &[1, 1, 1, 1, 245, 244]),
        (
            6,
            3,
            &[
                122, 186, 71, 167, 142, 244, 186, 122, 167, 71, 244, 142, 173, 157, 221, 152, 61,
                170,
            ],
            &[
                1, 1, 1, 1, 1, 1, 1, 225, 151, 172, 82, 200, 1, 123, 245, 143, 244, 142,
            ],
        ),
        (
            10,
            4,
            &[
                221, 152, 173, 157, 93, 150, 61, 170, 142, 244, 152, 221, 157, 173, 150, 93, 170,
                61, 244, 142, 61, 170, 93, 150, 173, 157, 221, 152, 71, 167, 170, 61, 150, 93, 157,
                173, 152, 221, 167, 71,
            ],
            &[
                1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 147, 138, 73, 93, 161, 103, 58, 99, 178, 1, 103,
                156, 151, 123, 187, 166, 175, 244, 83, 1, 220, 166, 123, 82, 143, 245, 40, 167,
                122,
            ],
        ),
    ];
    for (k, m, cauchy, van) in cases {
        let c = Code::new(CodeId::CauchyRs, k, m).unwrap();
        assert_eq!(c.parity_matrix().as_bytes(), cauchy, "cauchy k={k} m={m}");
        let v = Code::new(CodeId::VandermondeRs, k, m).unwrap();
        assert_eq!(v.parity_matrix().as_bytes(), van, "vandermonde k={k} m={m}");
    }
}

#[cfg(feature = "isal")]
#[test]
fn cauchy_matches_isal_for_many_shapes() {
    for k in 1..=30 {
        for m in 1..=8 {
            let ours = Code::new(CodeId::CauchyRs, k, m).unwrap();
            assert_eq!(
                ours.generator().as_bytes(),
                &railstore_ec::isal_cauchy1_matrix(k, m)[..],
                "k={k} m={m}"
            );
        }
    }
    assert!(Engine::available().contains(&Engine::Isal));
}

#[test]
fn bad_input_gets_clear_errors_and_changes_nothing() {
    let codec = Codec::new(Code::new(CodeId::CauchyRs, 4, 2).unwrap()).unwrap();
    let data = vec![vec![1u8; 10]; 4];
    let mut parity = vec![vec![9u8; 10]; 2];
    assert!(matches!(
        codec.encode(&refs(&data[..3]), &mut muts(&mut parity)),
        Err(EcError::WrongShardCount {
            what: "data",
            expected: 4,
            got: 3
        })
    ));
    let mut short = vec![vec![9u8; 10], vec![9u8; 9]];
    assert!(matches!(
        codec.encode(&refs(&data), &mut muts(&mut short)),
        Err(EcError::UnequalShardLengths {
            expected: 10,
            index: 5,
            got: 9
        })
    ));
    assert_eq!(
        short,
        vec![vec![9u8; 10], vec![9u8; 9]],
        "failed encode wrote nothing"
    );

    let mut shards = vec![vec![7u8; 10]; 6];
    let before = shards.clone();
    let err = codec
        .reconstruct(
            &mut muts(&mut shards),
            &[false, false, false, true, true, true],
        )
        .unwrap_err();
    assert_eq!(err, EcError::TooManyErasures { missing: 3, m: 2 });
    assert!(err.to_string().contains("at most 2"));
    assert_eq!(shards, before, "failed reconstruct wrote nothing");
    assert!(matches!(
        codec.reconstruct(&mut muts(&mut shards), &[true; 5]),
        Err(EcError::WrongShardCount { .. })
    ));
    assert!(matches!(
        codec.update_parity(4, &[0; 10], &[1; 10], &mut muts(&mut parity)),
        Err(EcError::ShardIndexOutOfRange { index: 4, k: 4 })
    ));
    assert!(matches!(
        codec.update_parity(0, &[0; 10], &[1; 9], &mut muts(&mut parity)),
        Err(EcError::UnequalShardLengths { .. })
    ));
    assert!(matches!(
        Codec::new(Code::new(CodeId::CauchyRs, 4, 2).unwrap())
            .unwrap()
            .with_threads(0),
        Err(EcError::InvalidThreadCount(0))
    ));
    assert!(matches!(
        Engine::from_name("avx1024"),
        Err(EcError::UnknownEngine(_))
    ));
}

#[test]
fn prepared_matrices_code_like_the_codec_and_refuse_bad_shapes() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let codec = Codec::new(Code::new(CodeId::CauchyRs, 5, 3).unwrap()).unwrap();
    let data = random_shards(&mut rng, 5, 1000);
    let mut want = vec![vec![0u8; 1000]; 3];
    codec.encode(&refs(&data), &mut muts(&mut want)).unwrap();
    let mut got = random_shards(&mut rng, 3, 1000);
    codec
        .apply_tables(codec.encode_tables(), &refs(&data), &mut muts(&mut got))
        .unwrap();
    assert_eq!(got, want);

    // Rebuild shards 1 and 6 from the survivors the recovery matrix names.
    let all: Vec<Vec<u8>> = data.iter().chain(&want).cloned().collect();
    let present = [true, false, true, true, true, true, false, true];
    let (t, survivors, wanted) = codec.recovery_tables(&present).unwrap();
    assert_eq!(wanted, vec![1, 6]);
    assert_eq!(survivors.len(), 5);
    assert!(survivors.iter().all(|&i| present[i]));
    let ins: Vec<&[u8]> = survivors.iter().map(|&i| &all[i][..]).collect();
    let mut rebuilt = vec![vec![0u8; 1000]; 2];
    codec
        .apply_tables(&t, &ins, &mut muts(&mut rebuilt))
        .unwrap();
    assert_eq!(rebuilt[0], all[1]);
    assert_eq!(rebuilt[1], all[6]);

    let before = got.clone();
    assert!(matches!(
        codec.apply_tables(
            codec.encode_tables(),
            &refs(&data[..4]),
            &mut muts(&mut got)
        ),
        Err(EcError::WrongShardCount {
            what: "input",
            expected: 5,
            got: 4
        })
    ));
    let mut short = vec![vec![0u8; 1000], vec![0u8; 1000], vec![0u8; 999]];
    assert!(matches!(
        codec.apply_tables(codec.encode_tables(), &refs(&data), &mut muts(&mut short)),
        Err(EcError::UnequalShardLengths { .. })
    ));
    assert_eq!(got, before, "a refused call wrote nothing");
    assert!(matches!(
        codec.recovery_tables(&[false, false, false, false, true, true, true, true]),
        Err(EcError::TooManyErasures { missing: 4, m: 3 })
    ));
}
