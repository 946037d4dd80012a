//! `Codec`: a code bound to an engine and a thread count, with the operations the store needs.
//! Every operation works on caller-provided buffers and reduces to one engine call, a matrix
//! times shards, so encode and decode do the same work per byte.

use crate::code::{Code, SHARDS_MAX};
use crate::engine::{Engine, Tables};
use crate::gf::Matrix;
use crate::pool::Pool;
use crate::shard_buf::ShardBuf;
use crate::EcError;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex};

/// Decode matrices kept per erasure pattern before the cache starts evicting.
pub const DECODE_CACHE_ENTRIES_MAX: usize = 1024;

/// Smallest share of a shard worth handing to another thread.
const THREAD_SPLIT_BYTES_MIN: usize = 16 * 1024;

/// Bytes per step of `update_parity`, sized to stay in L1.
const BLOCK_BYTES: usize = 4096;

/// Stack space `verify` recomputes parity into, one column block at a time.
const VERIFY_SCRATCH_BYTES: usize = 16 * 1024;

type ShardMask = [u64; SHARDS_MAX / 64];

/// A multiply-xor hasher for shard masks: SipHash over 64 bytes cost a third of a 4 KiB decode.
#[derive(Default)]
struct MaskHasher(u64);

impl std::hash::Hasher for MaskHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Arrays of u64 arrive here as their bytes; take them eight at a time.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

type MaskHash = std::hash::BuildHasherDefault<MaskHasher>;

/// An erasure pattern: which shards a decode reads and which it rebuilds.
#[derive(Clone, Copy, PartialEq, Eq)]
struct PatternKey {
    survivors: ShardMask,
    wanted: ShardMask,
}

impl std::hash::Hash for PatternKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // One folded word: most codes have fewer than 64 shards, so the other words are zero.
        let fold = self
            .survivors
            .iter()
            .chain(&self.wanted)
            .enumerate()
            .fold(0u64, |h, (i, w)| h ^ w.rotate_left(i as u32 * 8 + 1));
        state.write_u64(fold);
    }
}

/// The bit set of ascending shard indices, built in a register one word at a time: or-ing
/// into the array in memory stalled on store forwarding.
fn mask_of(indices: impl Iterator<Item = usize>) -> ShardMask {
    let mut m = [0u64; SHARDS_MAX / 64];
    let (mut word, mut bits) = (0usize, 0u64);
    for i in indices {
        if i / 64 != word {
            m[word] = bits;
            (word, bits) = (i / 64, 0);
        }
        bits |= 1 << (i % 64);
    }
    m[word] |= bits;
    m
}

/// Up to 256 shard pointers (or indices) on the stack, left uninitialised past `len`: zeroing
/// 2 KiB arrays per call costs a tenth of a 4 KiB decode. One `MaybeUninit` for the whole array
/// (rather than an array of them) keeps LLVM from turning it into a memset.
struct PtrList<P: Copy, const CAP: usize = SHARDS_MAX> {
    buf: MaybeUninit<[P; CAP]>,
    len: usize,
}

/// Runs `$body` with the constant `$cap` set to a list capacity that fits `$n` shards, so the
/// common small codes use small stack lists (LLVM zeroes these lists whatever we ask).
macro_rules! with_list_capacity {
    ($n:expr, |$cap:ident| $body:expr) => {
        if $n <= 32 {
            const $cap: usize = 32;
            $body
        } else {
            const $cap: usize = SHARDS_MAX;
            $body
        }
    };
}

impl<P: Copy, const CAP: usize> PtrList<P, CAP> {
    #[inline(always)]
    fn new() -> Self {
        PtrList {
            buf: MaybeUninit::uninit(),
            len: 0,
        }
    }

    #[inline(always)]
    fn push(&mut self, p: P) {
        assert!(self.len < CAP, "more shards than the list holds");
        // SAFETY: len < CAP, so the write stays inside the array.
        unsafe { self.buf.as_mut_ptr().cast::<P>().add(self.len).write(p) };
        self.len += 1;
    }

    fn as_slice(&self) -> &[P] {
        // SAFETY: the first `len` entries were written by `push`.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast(), self.len) }
    }
}

/// Large calls handed to an offload engine: shards at least `min_shard_bytes` long go there,
/// smaller ones stay on the codec's CPU engine, where a call costs less than a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offload {
    pub engine: Engine,
    pub min_shard_bytes: usize,
}

/// A code, an engine and a thread pool: encode, reconstruct, verify and update parity.
pub struct Codec {
    code: Code,
    engine: Engine,
    offload: Option<Offload>,
    /// m x k: parity from data.
    encode: Tables,
    /// Per data shard, m x 1: its column of the parity matrix, for delta updates.
    deltas: Vec<Tables>,
    /// (survivors used, shards wanted) -> decode matrix.
    decode_cache: Mutex<HashMap<PatternKey, Arc<Tables>, MaskHash>>,
    threads: usize,
    pool: Option<Pool>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("code", &self.code.id())
            .field("k", &self.code.k())
            .field("m", &self.code.m())
            .field("engine", &self.engine)
            .field("offload", &self.offload)
            .field("threads", &self.threads)
            .finish()
    }
}

impl Codec {
    /// A single-threaded codec on the engine `Engine::auto` picks.
    pub fn new(code: Code) -> Result<Codec, EcError> {
        Codec::with_engine(code, Engine::auto()?)
    }

    /// A single-threaded codec on `engine`; an error if the engine cannot run here.
    pub fn with_engine(code: Code, engine: Engine) -> Result<Codec, EcError> {
        engine.check_available()?;
        let encode = Tables::new(&code.parity_matrix());
        let parity = code.parity_matrix();
        let deltas = (0..code.k())
            .map(|c| {
                let col: Vec<u8> = (0..code.m()).map(|r| parity.get(r, c)).collect();
                Tables::new(&Matrix::from_rows(code.m(), 1, col))
            })
            .collect();
        Ok(Codec {
            code,
            engine,
            offload: None,
            encode,
            deltas,
            decode_cache: Mutex::new(HashMap::default()),
            threads: 1,
            pool: None,
        })
    }

    /// Splits large shards into column ranges coded by `threads` threads (eRails Fig. 5): the
    /// calling thread and `threads - 1` workers that spin briefly between calls.
    pub fn with_threads(mut self, threads: usize) -> Result<Codec, EcError> {
        if threads == 0 {
            return Err(EcError::InvalidThreadCount(threads));
        }
        self.pool = if threads > 1 {
            Some(Pool::new(threads).map_err(|e| EcError::ThreadPool(e.to_string()))?)
        } else {
            None
        };
        self.threads = threads;
        Ok(self)
    }

    /// Sends calls on shards of at least `min_shard_bytes` to `engine`, an offload engine; an
    /// error if it cannot run here or does not code away from the CPU.
    pub fn with_offload(
        mut self,
        engine: Engine,
        min_shard_bytes: usize,
    ) -> Result<Codec, EcError> {
        engine.check_available()?;
        if !engine.is_offload() {
            return Err(EcError::NotOffload(engine.name()));
        }
        self.offload = Some(Offload {
            engine,
            min_shard_bytes,
        });
        Ok(self)
    }

    pub fn code(&self) -> &Code {
        &self.code
    }

    /// The engine of calls not offloaded.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    pub fn offload(&self) -> Option<Offload> {
        self.offload
    }

    /// `count` zeroed shards of `len` bytes to code with this codec: page-locked when its calls
    /// on shards of that length go to the GPU, so they are copied without staging.
    pub fn shard_buffers(&self, count: usize, len: usize) -> Vec<ShardBuf> {
        let pinned = self.engine_for(len).is_offload();
        (0..count).map(|_| ShardBuf::zeroed(len, pinned)).collect()
    }

    /// The engine that codes shards of `len` bytes.
    pub fn engine_for(&self, len: usize) -> Engine {
        match self.offload {
            Some(o) if len >= o.min_shard_bytes => o.engine,
            _ => self.engine,
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Computes the m parity shards of k data shards. All shards have one length (any length).
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), EcError> {
        let (k, m) = (self.code.k(), self.code.m());
        check_count("data", k, data.len())?;
        check_count("parity", m, parity.len())?;
        let len = data[0].len();
        check_lengths(
            len,
            data.iter()
                .map(|d| d.len())
                .chain(parity.iter().map(|p| p.len())),
        )?;
        self.encode_unchecked(data, parity, len);
        Ok(())
    }

    /// `encode` on one slice of k + m shards, data first.
    pub fn encode_shards(&self, shards: &mut [&mut [u8]]) -> Result<(), EcError> {
        check_count("total", self.code.n(), shards.len())?;
        let len = shards[0].len();
        check_lengths(len, shards.iter().map(|s| s.len()))?;
        let (data, parity) = shards.split_at_mut(self.code.k());
        self.encode_unchecked(data, parity, len);
        Ok(())
    }

    /// `encode` after the shapes were checked: k data and m parity shards of `len` bytes.
    fn encode_unchecked<D: AsRef<[u8]>>(&self, data: &[D], parity: &mut [&mut [u8]], len: usize) {
        with_list_capacity!(self.code.n(), |CAP| {
            let mut ins = PtrList::<_, CAP>::new();
            let mut outs = PtrList::<_, CAP>::new();
            data.iter().for_each(|d| ins.push(d.as_ref().as_ptr()));
            parity.iter_mut().for_each(|p| outs.push(p.as_mut_ptr()));
            // SAFETY: k inputs and m outputs of `len` bytes; the &mut borrows make the
            // outputs distinct from each other and from the shared inputs.
            unsafe { self.run(&self.encode, ins.as_slice(), outs.as_slice(), len, false) };
        });
    }

    /// Rebuilds every shard whose `present` flag is false, data and parity, from the others.
    /// `shards` holds all k + m buffers of one length; missing ones are overwritten.
    pub fn reconstruct(&self, shards: &mut [&mut [u8]], present: &[bool]) -> Result<(), EcError> {
        self.reconstruct_inner(shards, present, false)
    }

    /// Rebuilds only the missing data shards; missing parity shards are left untouched.
    pub fn reconstruct_data(
        &self,
        shards: &mut [&mut [u8]],
        present: &[bool],
    ) -> Result<(), EcError> {
        self.reconstruct_inner(shards, present, true)
    }

    fn reconstruct_inner(
        &self,
        shards: &mut [&mut [u8]],
        present: &[bool],
        data_only: bool,
    ) -> Result<(), EcError> {
        let (k, n) = (self.code.k(), self.code.n());
        check_count("total", n, shards.len())?;
        check_count("presence flag", n, present.len())?;
        let len = shards[0].len();
        check_lengths(len, shards.iter().map(|s| s.len()))?;
        let limit = if data_only { k } else { n };
        let missing = present.iter().filter(|p| !**p).count();
        if missing > self.code.m() {
            return Err(EcError::TooManyErasures {
                missing,
                m: self.code.m(),
            });
        }
        with_list_capacity!(n, |CAP| {
            let mut wanted = PtrList::<usize, CAP>::new();
            (0..limit)
                .filter(|&i| !present[i])
                .for_each(|i| wanted.push(i));
            if wanted.len == 0 {
                return Ok(());
            }
            let mut survivors = PtrList::<usize, CAP>::new();
            (0..n)
                .filter(|&i| present[i])
                .take(k)
                .for_each(|i| survivors.push(i));
            let (survivors, wanted) = (survivors.as_slice(), wanted.as_slice());
            let tables = self.decode_tables(survivors, wanted);
            let mut ins = PtrList::<_, CAP>::new();
            let mut outs = PtrList::<_, CAP>::new();
            survivors.iter().for_each(|&i| ins.push(shards[i].as_ptr()));
            wanted
                .iter()
                .for_each(|&i| outs.push(shards[i].as_mut_ptr()));
            // SAFETY: survivors and wanted are disjoint index sets of distinct `&mut` buffers,
            // all `len` bytes long.
            unsafe { self.run(&tables, ins.as_slice(), outs.as_slice(), len, false) };
        });
        Ok(())
    }

    /// The matrix that turns the `survivors` into the `wanted` shards, from the cache when it is
    /// there.
    fn decode_tables(&self, survivors: &[usize], wanted: &[usize]) -> Arc<Tables> {
        let key = PatternKey {
            survivors: mask_of(survivors.iter().copied()),
            wanted: mask_of(wanted.iter().copied()),
        };
        let mut cache = self.decode_cache.lock().expect("decode cache poisoned");
        if let Some(t) = cache.get(&key) {
            return t.clone();
        }
        let g = self.code.generator();
        let inverse = g
            .select_rows(survivors)
            .invert()
            .expect("any k rows of an MDS generator are invertible");
        let mut rows = Vec::with_capacity(wanted.len() * self.code.k());
        for &i in wanted {
            if i < self.code.k() {
                rows.extend_from_slice(inverse.row(i));
            } else {
                let one = Matrix::from_rows(1, self.code.k(), g.row(i).to_vec());
                rows.extend_from_slice(one.mul(&inverse).row(0));
            }
        }
        let t = Arc::new(Tables::new(&Matrix::from_rows(
            wanted.len(),
            self.code.k(),
            rows,
        )));
        if cache.len() >= DECODE_CACHE_ENTRIES_MAX {
            // Any victim will do: patterns are few in practice and rebuilding one is cheap.
            if let Some(victim) = cache.keys().next().copied() {
                cache.remove(&victim);
            }
        }
        cache.insert(key, t.clone());
        t
    }

    /// Codes `outputs = t * inputs` with any prepared matrix (from [`Codec::encode_tables`] or
    /// [`Codec::recovery_tables`]): the CPU counterpart of [`crate::gpu`]'s batches.
    pub fn apply_tables(
        &self,
        t: &Tables,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), EcError> {
        check_count("input", t.cols(), inputs.len())?;
        check_count("output", t.rows(), outputs.len())?;
        let len = inputs.first().map_or(0, |s| s.len());
        check_lengths(
            len,
            inputs
                .iter()
                .map(|d| d.len())
                .chain(outputs.iter().map(|p| p.len())),
        )?;
        let ins: Vec<*const u8> = inputs.iter().map(|s| s.as_ptr()).collect();
        let outs: Vec<*mut u8> = outputs.iter_mut().map(|s| s.as_mut_ptr()).collect();
        // SAFETY: counts and lengths checked; the &mut borrows keep outputs distinct from each
        // other and from the shared inputs.
        unsafe { self.run(t, &ins, &outs, len, false) };
        Ok(())
    }

    /// The m x k matrix that turns data into parity, prepared for the engines.
    pub fn encode_tables(&self) -> &Tables {
        &self.encode
    }

    /// The decode matrix for an erasure pattern (`present[i]` says whether shard i survives),
    /// with the survivors it reads and the shards it rebuilds, in that order; for coding with a
    /// batch API such as [`crate::gpu`].
    #[allow(clippy::type_complexity)]
    pub fn recovery_tables(
        &self,
        present: &[bool],
    ) -> Result<(Arc<Tables>, Vec<usize>, Vec<usize>), EcError> {
        let (k, n) = (self.code.k(), self.code.n());
        check_count("presence flag", n, present.len())?;
        let missing = present.iter().filter(|p| !**p).count();
        if missing > self.code.m() {
            return Err(EcError::TooManyErasures {
                missing,
                m: self.code.m(),
            });
        }
        let survivors: Vec<usize> = (0..n).filter(|&i| present[i]).take(k).collect();
        let wanted: Vec<usize> = (0..n).filter(|&i| !present[i]).collect();
        Ok((self.decode_tables(&survivors, &wanted), survivors, wanted))
    }

    /// Number of decode matrices cached now.
    pub fn decode_cache_entries(&self) -> usize {
        self.decode_cache
            .lock()
            .expect("decode cache poisoned")
            .len()
    }

    /// Whether the parity shards match the data shards. `shards` holds k + m shards.
    pub fn verify(&self, shards: &[&[u8]]) -> Result<bool, EcError> {
        let (k, m) = (self.code.k(), self.code.m());
        check_count("total", self.code.n(), shards.len())?;
        let len = shards[0].len();
        check_lengths(len, shards.iter().map(|s| s.len()))?;
        let engine = self.engine_for(len);
        if engine.is_offload() {
            // One call over whole shards: each call to an offload engine pays for transfers.
            let mut parity = vec![vec![0u8; len]; m];
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
            self.encode_unchecked(&shards[..k], &mut outs, len);
            return Ok(parity.iter().zip(&shards[k..]).all(|(a, b)| a[..] == b[..]));
        }
        // Recompute the parity a column block at a time into a stack buffer.
        let mut scratch = [0u8; VERIFY_SCRATCH_BYTES];
        let block = (VERIFY_SCRATCH_BYTES / m / 64 * 64).max(1);
        let mut off = 0;
        while off < len {
            let n = block.min(len - off);
            let mut ins = PtrList::<_>::new();
            let mut outs = PtrList::<_>::new();
            shards[..k].iter().for_each(|s| ins.push(s[off..].as_ptr()));
            scratch
                .chunks_mut(n)
                .take(m)
                .for_each(|s| outs.push(s.as_mut_ptr()));
            // SAFETY: inputs hold at least n bytes past `off`; outputs are disjoint n-byte
            // pieces of `scratch` (m * n <= VERIFY_SCRATCH_BYTES).
            unsafe { engine.apply(&self.encode, ins.as_slice(), outs.as_slice(), n, false) };
            for r in 0..m {
                if scratch[r * n..(r + 1) * n] != shards[k + r][off..off + n] {
                    return Ok(false);
                }
            }
            off += n;
        }
        Ok(true)
    }

    /// Brings the parity up to date after data shard `index` changed from `old` to `new`
    /// without reading the other data shards: parity_r ^= coef(r, index) * (old ^ new).
    pub fn update_parity(
        &self,
        index: usize,
        old: &[u8],
        new: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EcError> {
        let (k, m) = (self.code.k(), self.code.m());
        if index >= k {
            return Err(EcError::ShardIndexOutOfRange { index, k });
        }
        check_count("parity", m, parity.len())?;
        let len = old.len();
        check_lengths(
            len,
            std::iter::once(new.len()).chain(parity.iter().map(|p| p.len())),
        )?;
        let engine = self.engine_for(len);
        if engine.is_offload() {
            // One call over whole shards: each call to an offload engine pays for transfers.
            let delta: Vec<u8> = old.iter().zip(new).map(|(a, b)| a ^ b).collect();
            let outs: Vec<*mut u8> = parity.iter_mut().map(|p| p.as_mut_ptr()).collect();
            // SAFETY: one input and m distinct outputs, all `len` bytes.
            unsafe { engine.apply(&self.deltas[index], &[delta.as_ptr()], &outs, len, true) };
            return Ok(());
        }
        let mut delta = [0u8; BLOCK_BYTES];
        let mut off = 0;
        while off < len {
            let n = BLOCK_BYTES.min(len - off);
            for (d, (a, b)) in delta
                .iter_mut()
                .zip(old[off..off + n].iter().zip(&new[off..]))
            {
                *d = a ^ b;
            }
            let mut outs = PtrList::<_>::new();
            parity
                .iter_mut()
                .for_each(|s| outs.push(s[off..].as_mut_ptr()));
            // SAFETY: one n-byte input on the stack, m distinct outputs with n bytes past `off`.
            unsafe {
                engine.apply(
                    &self.deltas[index],
                    &[delta.as_ptr()],
                    outs.as_slice(),
                    n,
                    true,
                )
            };
            off += n;
        }
        Ok(())
    }

    /// Runs the engine, split into column ranges over the pool when the shards are large.
    ///
    /// # Safety
    /// As `Engine::apply`.
    unsafe fn run(&self, t: &Tables, ins: &[*const u8], outs: &[*mut u8], len: usize, acc: bool) {
        let engine = self.engine_for(len);
        // An offload engine takes whole shards: slices would only add transfers.
        let parts = if engine.is_offload() {
            1
        } else {
            self.threads.min(len / THREAD_SPLIT_BYTES_MIN).max(1)
        };
        match &self.pool {
            Some(pool) if parts > 1 => {
                // Ranges are multiples of 64 bytes so each thread runs the vector body.
                let step = len.div_ceil(parts).div_ceil(64) * 64;
                let job = Job {
                    engine,
                    t,
                    ins,
                    outs,
                    acc,
                };
                pool.run(parts, &|p| job.range(p * step, ((p + 1) * step).min(len)));
            }
            // SAFETY: the caller's contract.
            _ => unsafe { engine.apply(t, ins, outs, len, acc) },
        }
    }
}

/// One engine call to be cut into column ranges.
struct Job<'a> {
    engine: Engine,
    t: &'a Tables,
    ins: &'a [*const u8],
    outs: &'a [*mut u8],
    acc: bool,
}

// SAFETY: threads touch disjoint column ranges of the outputs and only read the inputs.
unsafe impl Sync for Job<'_> {}

impl Job<'_> {
    fn range(&self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        with_list_capacity!(self.ins.len().max(self.outs.len()), |CAP| {
            let mut ins = PtrList::<_, CAP>::new();
            let mut outs = PtrList::<_, CAP>::new();
            // SAFETY: start < end <= len, so the offset pointers stay in their buffers.
            unsafe {
                self.ins.iter().for_each(|p| ins.push(p.add(start)));
                self.outs.iter().for_each(|p| outs.push(p.add(start)));
                self.engine.apply(
                    self.t,
                    ins.as_slice(),
                    outs.as_slice(),
                    end - start,
                    self.acc,
                );
            }
        })
    }
}

fn check_count(what: &'static str, expected: usize, got: usize) -> Result<(), EcError> {
    if expected == got {
        Ok(())
    } else {
        Err(EcError::WrongShardCount {
            what,
            expected,
            got,
        })
    }
}

fn check_lengths(expected: usize, lens: impl Iterator<Item = usize>) -> Result<(), EcError> {
    for (index, got) in lens.enumerate() {
        if got != expected {
            return Err(EcError::UnequalShardLengths {
                expected,
                index,
                got,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offload_takes_shards_from_its_threshold_up() {
        let code = Code::new(crate::CodeId::CauchyRs, 4, 2).unwrap();
        let mut codec = Codec::with_engine(code, Engine::Scalar).unwrap();
        assert_eq!(codec.engine_for(usize::MAX), Engine::Scalar);
        // Set directly: `with_offload` would need the GPU, and the policy does not.
        codec.offload = Some(Offload {
            engine: Engine::Cuda,
            min_shard_bytes: 100,
        });
        assert_eq!(codec.engine_for(0), Engine::Scalar);
        assert_eq!(codec.engine_for(99), Engine::Scalar);
        assert_eq!(codec.engine_for(100), Engine::Cuda);
        assert_eq!(codec.engine(), Engine::Scalar);
        // CPU-coded shards are plain heap memory.
        let small = codec.shard_buffers(6, 99);
        assert_eq!(small.len(), 6);
        assert!(small
            .iter()
            .all(|b| b.len() == 99 && !b.is_pinned() && b.iter().all(|&x| x == 0)));
    }

    #[test]
    fn masks_hold_exactly_their_indices() {
        let idx = [0usize, 5, 63, 64, 130, 255];
        let m = mask_of(idx.iter().copied());
        for i in 0..SHARDS_MAX {
            assert_eq!(m[i / 64] >> (i % 64) & 1 == 1, idx.contains(&i), "bit {i}");
        }
        assert_eq!(mask_of(std::iter::empty()), [0; 4]);
    }
}
