//! The batched GPU API (cargo feature `cuda`): many stripes per launch, pinned host memory,
//! streams that overlap transfers with kernels, and data that already lives on the GPU.
//! `Engine::Cuda` through a [`crate::Codec`] codes one call at a time; this is the way to code
//! at the GPU's speed.
//!
//! Layout: a batch of `stripes` stripes of `len`-byte shards, `len` a multiple of
//! [`SHARD_ALIGN`]; inputs stored stripe after stripe, each stripe its `cols` input shards one
//! after another, and outputs likewise with `rows` shards per stripe. The matrix is any
//! [`Tables`]: a codec's [`crate::Codec::encode_tables`] to encode, or
//! [`crate::Codec::recovery_tables`] to decode.
//!
//! Every call returns once its work is done, so no buffer is in use by the GPU after a call.

use crate::engine::cuda::{self, pinned, Gpu, Layout, WORD_BYTES};
use crate::{EcError, Tables};
use cudarc::driver::{result, CudaSlice, CudaStream, DevicePtr, DriverError, PinnedHostSlice};
use std::sync::Arc;

/// Shard lengths in a batch are multiples of this many bytes (the kernel's word).
pub const SHARD_ALIGN: usize = WORD_BYTES;

fn gpu() -> Result<&'static Gpu, EcError> {
    cuda::gpu().map_err(|why| EcError::GpuUnavailable(why.to_string()))
}

fn driver(e: DriverError) -> EcError {
    EcError::Gpu(e.to_string())
}

/// Makes the GPU's context current on this thread, for the raw driver calls (copies) that
/// act on it.
fn bind() -> Result<(), EcError> {
    gpu()?.ctx.bind_to_thread().map_err(driver)
}

/// The GPU's description (name, compute capability, memory, driver), or why there is none.
pub fn describe() -> Result<String, EcError> {
    Ok(gpu()?.description.clone())
}

/// The kernel's PTX for a virtual architecture such as `compute_90`, compiled by NVRTC; needs
/// NVRTC but no GPU, so machines without one can still check the kernel builds.
pub fn compile_kernel(arch: &str) -> Result<String, EcError> {
    cuda::compile(arch)
        .map(|p| p.to_src())
        .map_err(EcError::GpuUnavailable)
}

/// A queue of GPU work; what is queued on one stream runs in order.
pub struct Stream(Arc<CudaStream>);

impl Stream {
    pub fn new() -> Result<Stream, EcError> {
        Ok(Stream(gpu()?.ctx.new_stream().map_err(driver)?))
    }

    fn sync(&self) -> Result<(), EcError> {
        self.0.synchronize().map_err(driver)
    }
}

/// Memory on the GPU.
pub struct DeviceBuffer(CudaSlice<u8>);

impl DeviceBuffer {
    pub fn zeroed(stream: &Stream, len: usize) -> Result<DeviceBuffer, EcError> {
        let b = stream.0.alloc_zeros(len.max(1)).map_err(driver)?;
        stream.sync()?;
        Ok(DeviceBuffer(b))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    fn ptr(&self, stream: &Stream) -> u64 {
        self.0.device_ptr(&stream.0).0
    }
}

/// Page-locked host memory: the GPU copies it at full bus speed, while it computes.
pub struct PinnedBuffer(PinnedHostSlice<u8>);

impl PinnedBuffer {
    pub fn zeroed(len: usize) -> Result<PinnedBuffer, EcError> {
        let mut b = PinnedBuffer(pinned(&gpu()?.ctx, len).map_err(driver)?);
        b.as_mut_slice().fill(0);
        Ok(b)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // Every call of this module waits for its copies, so there is nothing to wait for.
        self.0
            .as_slice()
            .expect("no GPU work is pending on this buffer")
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.0
            .as_mut_slice()
            .expect("no GPU work is pending on this buffer")
    }
}

fn check_range(what: &str, have: usize, off: usize, len: usize) -> Result<(), EcError> {
    match off.checked_add(len) {
        Some(end) if end <= have => Ok(()),
        _ => Err(EcError::Gpu(format!(
            "{what}: {len} bytes at {off} do not fit a buffer of {have}"
        ))),
    }
}

/// Copies `len` bytes host to GPU and waits for the copy.
pub fn copy_to_device(
    stream: &Stream,
    src: &PinnedBuffer,
    dst: &mut DeviceBuffer,
    len: usize,
) -> Result<(), EcError> {
    check_range("copy to device", src.len().min(dst.len()), 0, len)?;
    bind()?;
    // SAFETY: both ranges checked; the wait below keeps `src` in use only during the call.
    unsafe {
        result::memcpy_htod_async(
            dst.ptr(stream),
            &src.as_slice()[..len],
            stream.0.cu_stream(),
        )
    }
    .map_err(driver)?;
    stream.sync()
}

/// Copies `len` bytes GPU to host and waits for the copy.
pub fn copy_to_host(
    stream: &Stream,
    src: &DeviceBuffer,
    dst: &mut PinnedBuffer,
    len: usize,
) -> Result<(), EcError> {
    check_range("copy to host", src.len().min(dst.len()), 0, len)?;
    bind()?;
    let ptr = src.ptr(stream);
    // SAFETY: as above.
    unsafe { result::memcpy_dtoh_async(&mut dst.as_mut_slice()[..len], ptr, stream.0.cu_stream()) }
        .map_err(driver)?;
    stream.sync()
}

fn check_shard_len(len: usize) -> Result<(), EcError> {
    if len == 0 || !len.is_multiple_of(SHARD_ALIGN) {
        return Err(EcError::Gpu(format!(
            "batched shards must be a positive multiple of {SHARD_ALIGN} bytes, not {len}"
        )));
    }
    Ok(())
}

/// A coding matrix on the GPU.
pub struct DeviceMatrix {
    tables: CudaSlice<u8>,
    rows: usize,
    cols: usize,
}

impl DeviceMatrix {
    pub fn new(stream: &Stream, t: &Tables) -> Result<DeviceMatrix, EcError> {
        let bytes: Vec<u8> = t.nibbles.iter().flatten().copied().collect();
        let tables = stream.0.clone_htod(&bytes).map_err(driver)?;
        stream.sync()?;
        Ok(DeviceMatrix {
            tables,
            rows: t.rows(),
            cols: t.cols(),
        })
    }

    fn layout(&self, stripes: usize, len: usize) -> Result<Layout, EcError> {
        check_shard_len(len)?;
        Ok(Layout {
            pitch: len,
            in_stripe: self.cols * len,
            out_stripe: self.rows * len,
            stripes,
        })
    }

    /// Bytes of input and of output per stripe.
    pub fn stripe_bytes(&self, len: usize) -> (usize, usize) {
        (self.cols * len, self.rows * len)
    }

    /// Codes `stripes` stripes already on the GPU, `repeat` times over (for timing: the
    /// launches queue back to back), and waits for them.
    pub fn apply_device(
        &self,
        stream: &Stream,
        input: &DeviceBuffer,
        output: &mut DeviceBuffer,
        stripes: usize,
        len: usize,
        repeat: usize,
    ) -> Result<(), EcError> {
        let layout = self.layout(stripes, len)?;
        let (i, o) = self.stripe_bytes(len);
        check_range("batch input", input.len(), 0, i * stripes)?;
        check_range("batch output", output.len(), 0, o * stripes)?;
        let g = gpu()?;
        let (t, a, b) = (
            self.tables.device_ptr(&stream.0).0,
            input.ptr(stream),
            output.ptr(stream),
        );
        for _ in 0..repeat {
            // SAFETY: the buffers hold the layout (checked) and stay borrowed until the wait.
            unsafe { g.launch(&stream.0, t, self.rows, self.cols, a, b, layout, false) }
                .map_err(driver)?;
        }
        stream.sync()
    }
}

/// Host-to-host coding of batches in pinned memory: the batch is cut into chunks that take
/// turns on `lanes` streams, each chunk copied in, coded and copied out, so one chunk's
/// transfers overlap others' kernels and the bus runs both ways at once.
pub struct HostPipeline {
    matrix: DeviceMatrix,
    len: usize,
    chunk_stripes: usize,
    lanes: Vec<(Stream, DeviceBuffer, DeviceBuffer)>,
}

impl HostPipeline {
    pub fn new(
        t: &Tables,
        len: usize,
        chunk_stripes: usize,
        lanes: usize,
    ) -> Result<HostPipeline, EcError> {
        check_shard_len(len)?;
        let chunk_stripes = chunk_stripes.max(1);
        let (i, o) = (t.cols() * len, t.rows() * len);
        let mut out = Vec::new();
        for _ in 0..lanes.max(1) {
            let s = Stream::new()?;
            let din = DeviceBuffer::zeroed(&s, i * chunk_stripes)?;
            let dout = DeviceBuffer::zeroed(&s, o * chunk_stripes)?;
            out.push((s, din, dout));
        }
        let matrix = DeviceMatrix::new(&out[0].0, t)?;
        Ok(HostPipeline {
            matrix,
            len,
            chunk_stripes,
            lanes: out,
        })
    }

    /// Codes `stripes` stripes from `input` into `output` and waits for all of it.
    pub fn apply(
        &mut self,
        input: &PinnedBuffer,
        output: &mut PinnedBuffer,
        stripes: usize,
    ) -> Result<(), EcError> {
        let (i, o) = self.matrix.stripe_bytes(self.len);
        check_range("pipeline input", input.len(), 0, i * stripes)?;
        check_range("pipeline output", output.len(), 0, o * stripes)?;
        let g = gpu()?;
        bind()?;
        let src = input.as_slice();
        let dst = output.as_mut_slice();
        let mut queued = Ok(());
        let mut s0 = 0;
        let mut lane = 0;
        while s0 < stripes && queued.is_ok() {
            let n = (stripes - s0).min(self.chunk_stripes);
            let (stream, din, dout) = &self.lanes[lane];
            let layout = self.matrix.layout(n, self.len)?;
            let t = self.matrix.tables.device_ptr(&stream.0).0;
            let (a, b) = (din.ptr(stream), dout.ptr(stream));
            // SAFETY: chunk ranges lie inside the checked buffers and are disjoint between
            // chunks; every stream is waited for below before the borrows end.
            queued = unsafe {
                result::memcpy_htod_async(a, &src[s0 * i..(s0 + n) * i], stream.0.cu_stream())
                    .and_then(|_| {
                        g.launch(
                            &stream.0,
                            t,
                            self.matrix.rows,
                            self.matrix.cols,
                            a,
                            b,
                            layout,
                            false,
                        )
                    })
                    .and_then(|_| {
                        result::memcpy_dtoh_async(
                            &mut dst[s0 * o..(s0 + n) * o],
                            b,
                            stream.0.cu_stream(),
                        )
                    })
            };
            s0 += n;
            lane = (lane + 1) % self.lanes.len();
        }
        // Wait for every lane even after an error: nothing may still use the buffers.
        let mut waited = Ok(());
        for (stream, _, _) in &self.lanes {
            if let Err(e) = stream.sync() {
                waited = Err(e);
            }
        }
        queued.map_err(driver)?;
        waited
    }
}
