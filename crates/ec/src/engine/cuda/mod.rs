//! The offload engine (cargo feature `cuda`): the one primitive every engine implements, on an
//! NVIDIA GPU through cudarc. The driver and NVRTC are loaded at run time, so the build needs no
//! CUDA toolkit and a machine without a GPU only sees the engine as unavailable, with the reason.
//! The kernel (`kernel.cu`) is compiled by NVRTC for the GPU found, once per process.
//!
//! Two ways in: `Engine::apply` (any shards in ordinary memory, one call at a time through
//! pinned staging buffers, so every codec operation runs unchanged; shards from the pinned pool,
//! `Codec::shard_buffers`, are copied directly), and the batched API of [`crate::gpu`] (many
//! stripes per launch, streams, data already on the GPU).

use super::{Engine, Tables};
use cudarc::driver::{
    result, sys, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DriverError,
    LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

mod pinned_pool;
pub(crate) use pinned_pool::PooledPinned;

const SOURCE: &str = include_str!("kernel.cu");

/// The kernel codes 16-byte words; shards on the GPU are padded to whole words.
pub(crate) const WORD_BYTES: usize = 16;
const BLOCK_THREADS: u32 = 256;
/// Outputs one launch computes per thread (the kernel's largest template instance).
const ROWS_PER_LAUNCH: usize = 4;
/// Threads (one per word of a stripe) one launch runs at most: the kernel indexes them with 32
/// bits.
const WORDS_PER_LAUNCH: usize = 1 << 31;

/// The GPU the engine runs on, with its compiled kernels.
pub(crate) struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    kernels: Vec<CudaFunction>,
    pub(crate) description: String,
    /// `Engine::apply`'s buffers and stream: one call at a time.
    staging: Mutex<Option<Staging>>,
}

static GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();

/// The GPU, opened on first use, or why there is none.
pub(crate) fn gpu() -> Result<&'static Gpu, &'static str> {
    GPU.get_or_init(|| {
        std::panic::catch_unwind(open)
            .unwrap_or_else(|_| Err("loading the CUDA libraries panicked".to_string()))
    })
    .as_ref()
    .map_err(String::as_str)
}

/// Where CUDA toolkits usually keep NVRTC, for machines where it is not on the loader's path.
fn nvrtc_candidates() -> Vec<std::path::PathBuf> {
    let mut roots: Vec<std::path::PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(Into::into))
        .collect();
    roots.push("/usr/local/cuda".into());
    let mut out = Vec::new();
    for root in roots {
        for dir in ["lib64", "lib", "targets/x86_64-linux/lib"] {
            out.push(root.join(dir).join("libnvrtc.so.13"));
        }
    }
    out
}

/// Finds NVRTC: on the loader's path, or where toolkits keep it.
fn find_nvrtc() -> Result<(), String> {
    // SAFETY (both probes): they only try to load the library.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Ok(());
    }
    // Loading it by path makes the loader's later lookup by name find it.
    for path in nvrtc_candidates() {
        // SAFETY: NVRTC's initialisers have no preconditions.
        if let Ok(lib) = unsafe { libloading::Library::new(&path) } {
            std::mem::forget(lib);
            break;
        }
    }
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(
            "NVRTC (libnvrtc.so.13) was not found: put the CUDA toolkit's lib64 on \
             LD_LIBRARY_PATH or set CUDA_HOME"
                .to_string(),
        )
    }
}

/// The kernel's PTX for a virtual architecture such as `compute_90`. Needs NVRTC, not a GPU.
pub(crate) fn compile(arch: &str) -> Result<cudarc::nvrtc::Ptx, String> {
    find_nvrtc()?;
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}")],
        ..Default::default()
    };
    std::panic::catch_unwind(|| compile_ptx_with_opts(SOURCE, opts))
        .map_err(|_| "NVRTC panicked".to_string())?
        .map_err(|e| format!("NVRTC could not compile the kernel: {e:?}"))
}

fn open() -> Result<Gpu, String> {
    // SAFETY: only tries to load the library.
    if !unsafe { sys::is_culib_present() } {
        return Err("no NVIDIA driver (libcuda.so was not found)".to_string());
    }
    let count = CudaContext::device_count().map_err(|e| format!("no GPU found ({e})"))?;
    if count < 1 {
        return Err("no GPU found (the NVIDIA driver reports none)".to_string());
    }
    find_nvrtc()?;
    let fail = |what: &str, e: DriverError| format!("{what}: {e}");
    let ctx = CudaContext::new(0).map_err(|e| fail("could not open GPU 0", e))?;
    // SAFETY: every buffer of this module is used on one stream, or ordered by explicit
    // synchronisation, so cudarc's per-buffer events are not needed.
    unsafe { ctx.disable_event_tracking() };
    // The host sleeps rather than spins while it waits, so the CPU time measured for the
    // offload engine is the work it really costs the host.
    ctx.set_blocking_synchronize()
        .map_err(|e| fail("could not set blocking synchronisation", e))?;
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| fail("could not read the compute capability", e))?;
    let ptx = compile(&format!("compute_{major}{minor}"))?;
    let module = ctx
        .load_module(ptx)
        .map_err(|e| fail("the driver could not load the kernel", e))?;
    let kernels = (1..=ROWS_PER_LAUNCH)
        .map(|r| module.load_function(&format!("gf_apply_r{r}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail("kernel missing from the module", e))?;
    let name = ctx.name().unwrap_or_else(|_| "unknown GPU".to_string());
    let memory = ctx.total_mem().unwrap_or(0) as f64 / (1u64 << 30) as f64;
    let mut driver = 0i32;
    // SAFETY: writes one int.
    let _ = unsafe { sys::cuDriverGetVersion(&mut driver) };
    Ok(Gpu {
        description: format!(
            "{name}, compute {major}.{minor}, {memory:.0} GiB, CUDA driver {}.{}",
            driver / 1000,
            driver % 1000 / 10
        ),
        ctx,
        kernels,
        staging: Mutex::new(None),
    })
}

/// Shards laid out for a launch: `stripes` stripes, shard `i` of stripe `s` at
/// `base + s * stripe_bytes + i * pitch`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub pitch: usize,
    pub in_stripe: usize,
    pub out_stripe: usize,
    pub stripes: usize,
}

impl Layout {
    /// One stripe of `cols` inputs and `rows` outputs, each `pitch` bytes apart.
    fn one_stripe(cols: usize, rows: usize, pitch: usize) -> Layout {
        Layout {
            pitch,
            in_stripe: cols * pitch,
            out_stripe: rows * pitch,
            stripes: 1,
        }
    }
}

impl Gpu {
    /// Queues `out (^)= tables * in` for every stripe of `layout` on `stream`. `tables` is the
    /// device copy of a `rows` x `cols` matrix's nibble tables.
    ///
    /// # Safety
    /// The pointers are device memory holding what `layout` describes; outputs do not overlap
    /// inputs; pitch and strides are multiples of `WORD_BYTES`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn launch(
        &self,
        stream: &CudaStream,
        tables: sys::CUdeviceptr,
        rows: usize,
        cols: usize,
        input: sys::CUdeviceptr,
        output: sys::CUdeviceptr,
        layout: Layout,
        accumulate: bool,
    ) -> Result<(), DriverError> {
        let words = layout.pitch / WORD_BYTES;
        let in_words = (layout.in_stripe / WORD_BYTES) as u64;
        let out_words = (layout.out_stripe / WORD_BYTES) as u64;
        // The kernel indexes (stripe, word) with 32 bits.
        let per_launch = (WORDS_PER_LAUNCH / words.max(1)).max(1);
        let (cols_arg, acc_arg, pitch_arg) = (cols as i32, accumulate as i32, words as u32);
        let mut row0 = 0;
        while row0 < rows {
            let r = (rows - row0).min(ROWS_PER_LAUNCH);
            let mut s0 = 0;
            while s0 < layout.stripes {
                let n = (layout.stripes - s0).min(per_launch);
                let threads = (n * words) as u64;
                let cfg = LaunchConfig {
                    grid_dim: (threads.div_ceil(BLOCK_THREADS as u64) as u32, 1, 1),
                    block_dim: (BLOCK_THREADS, 1, 1),
                    shared_mem_bytes: (r * cols * 32) as u32,
                };
                let inp = input + (s0 * layout.in_stripe) as u64;
                let out = output + (s0 * layout.out_stripe) as u64;
                let (row0_arg, stripes_arg) = (row0 as i32, n as u32);
                let mut b = stream.launch_builder(&self.kernels[r - 1]);
                b.arg(&inp)
                    .arg(&out)
                    .arg(&tables)
                    .arg(&cols_arg)
                    .arg(&row0_arg)
                    .arg(&pitch_arg)
                    .arg(&stripes_arg)
                    .arg(&in_words)
                    .arg(&out_words)
                    .arg(&acc_arg);
                // SAFETY: the arguments match the kernel's signature; the caller vouches for
                // the memory.
                unsafe { b.launch(cfg) }?;
                s0 += n;
            }
            row0 += r;
        }
        Ok(())
    }

    /// The device copy of `t`'s nibble tables, made on first use and kept with the tables.
    pub(crate) fn tables<'t>(
        &self,
        t: &'t Tables,
        stream: &Arc<CudaStream>,
    ) -> Result<&'t CudaSlice<u8>, DriverError> {
        if let Some(d) = t.device.0.get() {
            return Ok(d);
        }
        let bytes: Vec<u8> = t.nibbles.iter().flatten().copied().collect();
        let d = stream.clone_htod(&bytes)?;
        stream.synchronize()?;
        Ok(t.device.0.get_or_init(|| d))
    }
}

/// Device copies of a matrix's tables, kept beside the host tables.
#[derive(Default)]
pub(crate) struct DeviceTables(OnceLock<CudaSlice<u8>>);

impl std::fmt::Debug for DeviceTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "DeviceTables(on the GPU)"
        } else {
            "DeviceTables(not yet copied)"
        })
    }
}

/// Pinned host buffers and device buffers for `Engine::apply`, grown as calls need.
struct Staging {
    stream: Arc<CudaStream>,
    host_in: PinnedHostSlice<u8>,
    host_out: PinnedHostSlice<u8>,
    dev_in: CudaSlice<u8>,
    dev_out: CudaSlice<u8>,
}

impl Staging {
    fn new(ctx: &Arc<CudaContext>) -> Result<Staging, DriverError> {
        let stream = ctx.new_stream()?;
        Ok(Staging {
            host_in: pinned(ctx, WORD_BYTES)?,
            host_out: pinned(ctx, WORD_BYTES)?,
            dev_in: stream.alloc_zeros(WORD_BYTES)?,
            dev_out: stream.alloc_zeros(WORD_BYTES)?,
            stream,
        })
    }

    /// Device buffers of at least `inp` and `out` bytes (the direct path needs no host ones).
    fn reserve_device(&mut self, inp: usize, out: usize) -> Result<(), DriverError> {
        if self.dev_in.len() < inp {
            self.dev_in = self.stream.alloc_zeros(inp.next_power_of_two())?;
        }
        if self.dev_out.len() < out {
            self.dev_out = self.stream.alloc_zeros(out.next_power_of_two())?;
        }
        Ok(())
    }

    fn reserve(
        &mut self,
        ctx: &Arc<CudaContext>,
        inp: usize,
        out: usize,
    ) -> Result<(), DriverError> {
        if self.host_in.len() < inp {
            self.host_in = pinned(ctx, inp.next_power_of_two())?;
        }
        if self.host_out.len() < out {
            self.host_out = pinned(ctx, out.next_power_of_two())?;
        }
        self.reserve_device(inp, out)
    }
}

/// Page-locked host memory the GPU copies at full speed (not write-combined: the host reads it
/// back).
pub(crate) fn pinned(
    ctx: &Arc<CudaContext>,
    len: usize,
) -> Result<PinnedHostSlice<u8>, DriverError> {
    // SAFETY: the bytes are uninitialised until written; every user writes before reading,
    // and u8 has no invalid values.
    unsafe { ctx.alloc_pinned_with_flags::<u8>(len.max(1), 0) }
}

static CALLS: AtomicU64 = AtomicU64::new(0);
static DIRECT_CALLS: AtomicU64 = AtomicU64::new(0);
static FALLBACKS: AtomicU64 = AtomicU64::new(0);
static LAST_FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// Calls the GPU completed, and how many of them copied pinned shards directly.
pub(crate) fn calls() -> (u64, u64) {
    (
        CALLS.load(Ordering::Relaxed),
        DIRECT_CALLS.load(Ordering::Relaxed),
    )
}

/// Calls the GPU could not complete, which the CPU engine computed instead, and the last
/// reason.
pub(crate) fn fallbacks() -> (u64, Option<String>) {
    (
        FALLBACKS.load(Ordering::Relaxed),
        LAST_FAILURE.lock().map(|g| g.clone()).unwrap_or(None),
    )
}

/// `Engine::apply` on the GPU: the shards are gathered into pinned memory, copied over, coded
/// and copied back. A call the GPU fails is computed by the CPU engine instead (and counted),
/// so a driver error costs speed, never bytes.
///
/// # Safety
/// `Engine::apply`'s contract.
pub(crate) unsafe fn apply(
    t: &Tables,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    len: usize,
    accumulate: bool,
) {
    let mut direct = false;
    let result = match gpu() {
        // SAFETY: the caller's contract.
        // Only a call that overwrites its outputs goes direct: a failed direct copy may leave
        // them half written, which the CPU's recomputation then overwrites; an accumulating
        // call needs them intact.
        Ok(g) if !accumulate && pinned_pool::all_pinned(inputs, outputs, len) => {
            direct = true;
            // SAFETY: the caller's contract, and every shard is pinned.
            unsafe { g.apply_direct(t, inputs, outputs, len) }
        }
        Ok(g) => unsafe { g.apply_staged(t, inputs, outputs, len, accumulate) },
        Err(why) => Err(why.to_string()),
    };
    match result {
        Ok(()) => {
            CALLS.fetch_add(1, Ordering::Relaxed);
            if direct {
                DIRECT_CALLS.fetch_add(1, Ordering::Relaxed);
            }
        }
        Err(why) => {
            FALLBACKS.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut last) = LAST_FAILURE.lock() {
                *last = Some(why);
            }
            // SAFETY: the caller's contract; outputs were not touched by the failed call.
            unsafe { Engine::detect().apply(t, inputs, outputs, len, accumulate) };
        }
    }
}

impl Gpu {
    /// The per-call buffers and stream, made on first use, locked for one call; the calling
    /// thread bound to the context, which the raw driver calls act on.
    fn staging(&self) -> Result<std::sync::MutexGuard<'_, Option<Staging>>, String> {
        let err = |e: DriverError| format!("CUDA: {e}");
        self.ctx.bind_to_thread().map_err(err)?;
        let mut guard = self
            .staging
            .lock()
            .map_err(|_| "staging lock poisoned".to_string())?;
        if guard.is_none() {
            *guard = Some(Staging::new(&self.ctx).map_err(err)?);
        }
        Ok(guard)
    }

    /// `out[r] = sum_c t[r][c] * in[c]` with the GPU copying each shard from and into pinned
    /// memory itself.
    ///
    /// # Safety
    /// `Engine::apply`'s contract, every shard in pinned memory (`pinned_pool::all_pinned`).
    unsafe fn apply_direct(
        &self,
        t: &Tables,
        inputs: &[*const u8],
        outputs: &[*mut u8],
        len: usize,
    ) -> Result<(), String> {
        let err = |e: DriverError| format!("CUDA: {e}");
        let pitch = len.div_ceil(WORD_BYTES) * WORD_BYTES;
        let (cols, rows) = (inputs.len(), outputs.len());
        let mut guard = self.staging()?;
        let st = guard.as_mut().expect("made by staging()");
        st.reserve_device(cols * pitch, rows * pitch).map_err(err)?;
        let stream = st.stream.clone();
        let tables = self.tables(t, &stream).map_err(err)?;
        let (tables_ptr, _) = tables.device_ptr(&stream);
        let (in_ptr, _) = st.dev_in.device_ptr(&stream);
        let (out_ptr, _) = st.dev_out.device_ptr(&stream);
        let layout = Layout::one_stripe(cols, rows, pitch);
        // SAFETY: each shard holds `len` bytes of pinned memory (the caller's contract) that
        // outlives the synchronisation below; the device buffers hold the layout. The padding
        // past `len` in each device row holds whatever was there: it only reaches the outputs'
        // padding, which is not copied back.
        unsafe {
            for (c, &p) in inputs.iter().enumerate() {
                let src = std::slice::from_raw_parts(p, len);
                result::memcpy_htod_async(in_ptr + (c * pitch) as u64, src, stream.cu_stream())
                    .map_err(err)?;
            }
            self.launch(
                &stream, tables_ptr, rows, cols, in_ptr, out_ptr, layout, false,
            )
            .map_err(err)?;
            for (r, &p) in outputs.iter().enumerate() {
                let dst = std::slice::from_raw_parts_mut(p, len);
                result::memcpy_dtoh_async(dst, out_ptr + (r * pitch) as u64, stream.cu_stream())
                    .map_err(err)?;
            }
        }
        stream.synchronize().map_err(err)
    }

    /// # Safety
    /// `Engine::apply`'s contract. Outputs are written only once the GPU succeeded.
    unsafe fn apply_staged(
        &self,
        t: &Tables,
        inputs: &[*const u8],
        outputs: &[*mut u8],
        len: usize,
        accumulate: bool,
    ) -> Result<(), String> {
        let err = |e: DriverError| format!("CUDA: {e}");
        let pitch = len.div_ceil(WORD_BYTES) * WORD_BYTES;
        let (cols, rows) = (inputs.len(), outputs.len());
        let mut guard = self.staging()?;
        let st = guard.as_mut().expect("made by staging()");
        st.reserve(&self.ctx, cols * pitch, rows * pitch)
            .map_err(err)?;
        let host_in = st.host_in.as_mut_slice().map_err(err)?;
        for (c, &p) in inputs.iter().enumerate() {
            // SAFETY: each input holds `len` bytes (the caller's contract); the staging buffer
            // holds cols * pitch.
            unsafe { std::ptr::copy_nonoverlapping(p, host_in[c * pitch..].as_mut_ptr(), len) };
        }
        let host_out = st.host_out.as_mut_slice().map_err(err)?;
        if accumulate {
            for (r, &p) in outputs.iter().enumerate() {
                // SAFETY: as above, for the outputs.
                unsafe {
                    std::ptr::copy_nonoverlapping(p, host_out[r * pitch..].as_mut_ptr(), len)
                };
            }
        }
        let stream = st.stream.clone();
        let tables = self.tables(t, &stream).map_err(err)?;
        let (tables_ptr, _) = tables.device_ptr(&stream);
        let (in_ptr, _) = st.dev_in.device_ptr(&stream);
        let (out_ptr, _) = st.dev_out.device_ptr(&stream);
        let layout = Layout::one_stripe(cols, rows, pitch);
        // SAFETY: the device buffers hold the layout (reserve); host buffers are pinned and
        // outlive the synchronisation below.
        unsafe {
            result::memcpy_htod_async(in_ptr, &host_in[..cols * pitch], stream.cu_stream())
                .map_err(err)?;
            if accumulate {
                result::memcpy_htod_async(out_ptr, &host_out[..rows * pitch], stream.cu_stream())
                    .map_err(err)?;
            }
            self.launch(
                &stream, tables_ptr, rows, cols, in_ptr, out_ptr, layout, accumulate,
            )
            .map_err(err)?;
            result::memcpy_dtoh_async(&mut host_out[..rows * pitch], out_ptr, stream.cu_stream())
                .map_err(err)?;
        }
        stream.synchronize().map_err(err)?;
        for (r, &p) in outputs.iter().enumerate() {
            // SAFETY: each output holds `len` bytes (the caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(host_out[r * pitch..].as_ptr(), p, len) };
        }
        Ok(())
    }
}
