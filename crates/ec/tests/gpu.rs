//! The offload engine: the kernel's arithmetic (emulated here, so it is checked on every
//! machine), the kernel's compilation (wherever NVRTC is), and, where a GPU is, the engine
//! against the scalar oracle over every erasure pattern, odd lengths and unaligned buffers,
//! plus the batched API. Without a GPU the GPU parts print why they were skipped.

mod common;
use common::random_shards;
use railstore_ec::gf;
use railstore_ec::{Code, CodeId, Codec, EcError, Engine};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// PTX `prmt.b32` in its default mode: byte i of the result is byte (sel nibble i & 7) of the
/// eight bytes {b, a}, or that byte's sign bit replicated when the nibble's top bit is set.
fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let bytes = ((b as u64) << 32 | a as u64).to_le_bytes();
    let mut out = 0u32;
    for i in 0..4 {
        let s = (sel >> (4 * i)) & 0xF;
        let byte = bytes[(s & 7) as usize];
        let v = if s & 8 != 0 {
            if byte & 0x80 != 0 {
                0xFF
            } else {
                0
            }
        } else {
            byte
        };
        out |= (v as u32) << (8 * i);
    }
    out
}

/// kernel.cu's `prepare` and `mul4`, step for step.
fn mul4_like_the_kernel(coef: u8, x: u32) -> u32 {
    let mut table = [0u8; 32];
    for n in 0..16u8 {
        table[n as usize] = gf::mul(coef, n);
        table[16 + n as usize] = gf::mul(coef, n << 4);
    }
    let w: Vec<u32> = table
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let pack = |v: u32| prmt(v | (v >> 4), 0, 0x4420);
    let sel_lo = pack(x & 0x0707_0707);
    let sel_hi = pack((x >> 4) & 0x0707_0707);
    let top_lo = prmt(x << 4, 0, 0xBA98);
    let top_hi = prmt(x, 0, 0xBA98);
    let l = (prmt(w[0], w[1], sel_lo) & !top_lo) | (prmt(w[2], w[3], sel_lo) & top_lo);
    let h = (prmt(w[4], w[5], sel_hi) & !top_hi) | (prmt(w[6], w[7], sel_hi) & top_hi);
    l ^ h
}

#[test]
fn the_kernels_byte_permute_multiply_is_gf_multiplication() {
    // Every coefficient times every byte value, in every byte position of the word.
    for coef in 0..=255u8 {
        for base in (0..256u32).step_by(4) {
            for rot in 0..4 {
                let bytes = [base, base + 1, base + 2, base + 3].map(|b| b as u8);
                let mut b = bytes;
                b.rotate_left(rot);
                let x = u32::from_le_bytes(b);
                let want = u32::from_le_bytes(b.map(|v| gf::mul(coef, v)));
                assert_eq!(
                    mul4_like_the_kernel(coef, x),
                    want,
                    "coef {coef} word {x:#010x}"
                );
            }
        }
    }
}

#[test]
fn without_a_gpu_the_engine_says_why() {
    match railstore_ec::gpu_unavailable_reason() {
        Some(why) => {
            eprintln!("skipping the cuda engine: {why}");
            assert!(!Engine::Cuda.is_available());
            assert!(!Engine::available().contains(&Engine::Cuda));
            assert_eq!(
                Engine::Cuda.check_available(),
                Err(EcError::GpuUnavailable(why.clone()))
            );
            let code = Code::new(CodeId::CauchyRs, 4, 2).unwrap();
            let err = Codec::with_engine(code.clone(), Engine::Cuda).unwrap_err();
            assert!(err.to_string().contains(&why), "{err}");
            let cpu = Codec::with_engine(code, Engine::detect()).unwrap();
            let err = cpu.with_offload(Engine::Cuda, 0).unwrap_err();
            assert_eq!(err, EcError::GpuUnavailable(why.clone()));
            // The engine is still nameable, and auto never picks it.
            assert_eq!(Engine::from_name("cuda").unwrap(), Engine::Cuda);
            assert_ne!(Engine::detect(), Engine::Cuda);
        }
        None => {
            assert!(Engine::available().contains(&Engine::Cuda));
            eprintln!(
                "cuda engine on {}",
                railstore_ec::gpu_description().unwrap()
            );
        }
    }
}

#[cfg(feature = "cuda")]
#[test]
fn nvrtc_compiles_the_kernel() {
    match railstore_ec::gpu::compile_kernel("compute_90") {
        Ok(ptx) => {
            for r in 1..=4 {
                assert!(
                    ptx.contains(&format!(".entry gf_apply_r{r}")),
                    "r{r} missing"
                );
            }
            assert!(
                ptx.contains("prmt.b32"),
                "the byte permute is not in the PTX"
            );
            assert!(!ptx.contains(".local"), "the kernel spills to local memory");
        }
        Err(EcError::GpuUnavailable(why))
            if why.contains("not found")
                && std::env::var_os("RAILSTORE_REQUIRE_NVRTC").is_none() =>
        {
            eprintln!("skipping the NVRTC compile check: {why}");
        }
        Err(e) => panic!("the kernel does not compile: {e}"),
    }
}

fn gpu_or_skip(what: &str) -> bool {
    match railstore_ec::gpu_unavailable_reason() {
        None => true,
        Some(why) => {
            eprintln!("skipping {what}: {why}");
            false
        }
    }
}

/// Every erasure pattern of 1..=m shards of `k`+`m`, on shards that start `skew` bytes past
/// an allocation's start, rebuilt by the GPU and compared with the original; returns the
/// number of patterns.
fn every_pattern(k: usize, m: usize, len: usize, skew: usize, seed: u64) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let code = Code::new(CodeId::CauchyRs, k, m).unwrap();
    let oracle = Codec::with_engine(code.clone(), Engine::Scalar).unwrap();
    let gpu = Codec::with_engine(code, Engine::Cuda).unwrap();
    let mut store = random_shards(&mut rng, k + m, len + skew);
    {
        let mut refs: Vec<&mut [u8]> = store.iter_mut().map(|s| &mut s[skew..]).collect();
        oracle.encode_shards(&mut refs).unwrap();
    }
    let want: Vec<Vec<u8>> = store.iter().map(|s| s[skew..].to_vec()).collect();
    {
        // The GPU's own encode agrees, and verify accepts it.
        let mut parity: Vec<Vec<u8>> = random_shards(&mut rng, m, len + skew);
        let data: Vec<&[u8]> = store[..k].iter().map(|s| &s[skew..]).collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|s| &mut s[skew..]).collect();
        gpu.encode(&data, &mut outs).unwrap();
        for (r, p) in parity.iter().enumerate() {
            assert_eq!(&p[skew..], &want[k + r][..], "encode k={k} m={m} len={len}");
        }
        let all: Vec<&[u8]> = store.iter().map(|s| &s[skew..]).collect();
        assert!(gpu.verify(&all).unwrap(), "verify k={k} m={m} len={len}");
    }
    let n = k + m;
    let mut patterns = 0;
    for mask in 1u32..(1 << n) {
        if mask.count_ones() as usize > m {
            continue;
        }
        let present: Vec<bool> = (0..n).map(|i| mask & (1 << i) == 0).collect();
        let mut damaged = store.clone();
        for (i, s) in damaged.iter_mut().enumerate() {
            if !present[i] {
                rng.fill(&mut s[skew..]);
            }
        }
        let mut refs: Vec<&mut [u8]> = damaged.iter_mut().map(|s| &mut s[skew..]).collect();
        gpu.reconstruct(&mut refs, &present).unwrap();
        for i in 0..n {
            assert_eq!(
                &damaged[i][skew..],
                &want[i][..],
                "k={k} m={m} len={len} skew={skew} lost {mask:#b}: shard {i}"
            );
        }
        patterns += 1;
    }
    // A delta update equals a re-encode.
    let index = rng.gen_range(0..k);
    let new = random_shards(&mut rng, 1, len).remove(0);
    let mut parity: Vec<Vec<u8>> = want[k..].to_vec();
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|s| &mut s[..]).collect();
    gpu.update_parity(index, &want[index], &new, &mut outs)
        .unwrap();
    let mut data2: Vec<Vec<u8>> = want[..k].to_vec();
    data2[index] = new;
    let mut again = vec![vec![0u8; len]; m];
    let d: Vec<&[u8]> = data2.iter().map(|s| &s[..]).collect();
    let mut o: Vec<&mut [u8]> = again.iter_mut().map(|s| &mut s[..]).collect();
    oracle.encode(&d, &mut o).unwrap();
    assert_eq!(parity, again, "update_parity k={k} m={m} len={len}");
    patterns
}

#[test]
fn the_gpu_rebuilds_every_erasure_pattern() {
    if !gpu_or_skip("GPU conformance") {
        return;
    }
    let mut cases = 0;
    let shapes = [
        (1, 1),
        (2, 1),
        (3, 2),
        (4, 2),
        (6, 3),
        (10, 4),
        (8, 5),
        (12, 4),
    ];
    let lens = [1, 15, 16, 17, 1000, 4096, 65_536 + 13];
    for (i, &(k, m)) in shapes.iter().enumerate() {
        for (j, &len) in lens.iter().enumerate() {
            let skew = (i + j) % 16;
            cases += every_pattern(k, m, len, skew, (i * 100 + j) as u64);
        }
    }
    // Large shards, a few shapes.
    for (k, m) in [(6, 3), (10, 4)] {
        cases += every_pattern(k, m, (1 << 20) + 3, 5, 99);
    }
    eprintln!("GPU conformance: {cases} erasure patterns rebuilt byte-identical to the oracle");
    assert_eq!(
        railstore_ec::gpu_fallbacks().0,
        0,
        "some calls fell back to the CPU"
    );
}

#[cfg(feature = "cuda")]
#[test]
fn the_batched_api_matches_the_oracle() {
    use railstore_ec::gpu::{DeviceBuffer, DeviceMatrix, HostPipeline, PinnedBuffer, Stream};
    if !gpu_or_skip("the batched GPU API") {
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for (k, m, len, stripes) in [(6, 3, 4096, 37), (10, 4, 65_536, 9), (3, 2, 16, 70_000)] {
        let codec =
            Codec::with_engine(Code::new(CodeId::CauchyRs, k, m).unwrap(), Engine::Scalar).unwrap();
        let mut input = PinnedBuffer::zeroed(k * len * stripes).unwrap();
        rng.fill(input.as_mut_slice());
        // The oracle, stripe by stripe.
        let mut want = vec![0u8; m * len * stripes];
        for s in 0..stripes {
            let data: Vec<&[u8]> = input.as_slice()[s * k * len..(s + 1) * k * len]
                .chunks(len)
                .collect();
            let mut outs: Vec<&mut [u8]> = want[s * m * len..(s + 1) * m * len]
                .chunks_mut(len)
                .collect();
            codec.encode(&data, &mut outs).unwrap();
        }
        let ctx = format!("k={k} m={m} len={len} stripes={stripes}");

        let stream = Stream::new().unwrap();
        let matrix = DeviceMatrix::new(&stream, codec.encode_tables()).unwrap();
        let mut din = DeviceBuffer::zeroed(&stream, input.len()).unwrap();
        let mut dout = DeviceBuffer::zeroed(&stream, want.len()).unwrap();
        railstore_ec::gpu::copy_to_device(&stream, &input, &mut din, input.len()).unwrap();
        matrix
            .apply_device(&stream, &din, &mut dout, stripes, len, 2)
            .unwrap();
        let mut back = PinnedBuffer::zeroed(want.len()).unwrap();
        railstore_ec::gpu::copy_to_host(&stream, &dout, &mut back, want.len()).unwrap();
        assert!(back.as_slice() == &want[..], "device-resident {ctx}");

        let mut pipe = HostPipeline::new(codec.encode_tables(), len, 7, 3).unwrap();
        let mut out = PinnedBuffer::zeroed(want.len()).unwrap();
        out.as_mut_slice().fill(0xEE);
        pipe.apply(&input, &mut out, stripes).unwrap();
        assert!(out.as_slice() == &want[..], "host pipeline {ctx}");
    }
    // Shapes the batch refuses, with a reason and no work done.
    let codec =
        Codec::with_engine(Code::new(CodeId::CauchyRs, 4, 2).unwrap(), Engine::Scalar).unwrap();
    assert!(matches!(
        HostPipeline::new(codec.encode_tables(), 100, 1, 1),
        Err(EcError::Gpu(why)) if why.contains("multiple of 16")
    ));
}

#[test]
fn a_cpu_engine_is_not_an_offload_target() {
    let code = Code::new(CodeId::CauchyRs, 4, 2).unwrap();
    let codec = Codec::with_engine(code, Engine::Scalar).unwrap();
    let err = codec.with_offload(Engine::Scalar, 0).unwrap_err();
    assert_eq!(err, EcError::NotOffload("scalar"));
}

/// The store's policy: shards from the threshold up go to the GPU, smaller ones stay on the
/// CPU engine, and both give the oracle's bytes.
#[test]
fn offload_by_shard_length_matches_the_oracle() {
    if !gpu_or_skip("offload by shard length") {
        return;
    }
    let (k, m, min) = (6, 3, 4096);
    let code = Code::new(CodeId::CauchyRs, k, m).unwrap();
    let oracle = Codec::with_engine(code.clone(), Engine::Scalar).unwrap();
    let codec = Codec::with_engine(code, Engine::detect())
        .unwrap()
        .with_offload(Engine::Cuda, min)
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    for len in [1, min - 1, min, 3 * min + 5] {
        let want_engine = if len >= min {
            Engine::Cuda
        } else {
            Engine::detect()
        };
        assert_eq!(codec.engine_for(len), want_engine, "len {len}");
        let data = random_shards(&mut rng, k, len);
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut want = vec![vec![0u8; len]; m];
        let mut got = vec![vec![0u8; len]; m];
        let mut outs: Vec<&mut [u8]> = want.iter_mut().map(|p| &mut p[..]).collect();
        oracle.encode(&refs, &mut outs).unwrap();
        let calls = railstore_ec::gpu_calls();
        let mut outs: Vec<&mut [u8]> = got.iter_mut().map(|p| &mut p[..]).collect();
        codec.encode(&refs, &mut outs).unwrap();
        if len >= min {
            assert!(
                railstore_ec::gpu_calls() > calls,
                "len {len} did not reach the GPU"
            );
        }
        assert_eq!(got, want, "len {len}");

        // The same stripe in the codec's own buffers: pinned from the threshold up, so the GPU
        // copies them directly (encode, then a rebuild of m lost shards).
        let mut shards = codec.shard_buffers(k + m, len);
        assert_eq!(shards[0].is_pinned(), len >= min, "len {len}");
        for (s, d) in shards.iter_mut().zip(&data) {
            s.copy_from_slice(d);
        }
        let (_, direct) = railstore_ec::gpu_call_counts();
        let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| &mut s[..]).collect();
        codec.encode_shards(&mut refs).unwrap();
        for (r, w) in want.iter().enumerate() {
            assert!(
                shards[k + r][..] == w[..],
                "pinned encode len {len} parity {r}"
            );
        }
        let mut present = vec![true; k + m];
        for i in (0..k + m).step_by(2).take(m) {
            present[i] = false;
            shards[i].fill(0xA5);
        }
        let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| &mut s[..]).collect();
        codec.reconstruct(&mut refs, &present).unwrap();
        for (i, d) in data.iter().enumerate() {
            assert!(shards[i][..] == d[..], "pinned rebuild len {len} shard {i}");
        }
        for (r, w) in want.iter().enumerate() {
            assert!(
                shards[k + r][..] == w[..],
                "pinned rebuild len {len} parity {r}"
            );
        }
        if len >= min {
            let (_, now) = railstore_ec::gpu_call_counts();
            assert!(
                now >= direct + 2,
                "len {len}: the pinned shards were staged"
            );
        }
    }
    assert_eq!(railstore_ec::gpu_fallbacks().0, 0);
}
