//! ec-bench's offload rows (EC-Bench's "offload coder"): the cuda engine measured the ways an
//! offload coder can be used, beside the CPU engines of the same run.
//! - `cuda-kernel`: data already on the GPU (device-resident), kernels only;
//! - `cuda-h2h`: host to host through pinned memory, the batch cut into chunks that overlap
//!   their copies with other chunks' kernels on several streams;
//! - `cuda` (measured by the main loop): one stripe per call through `Codec`, as the store
//!   would call any engine: the latency of a single offloaded operation.
//!
//! The transfer ceilings (pinned host-to-device and device-to-host copy bandwidth) are measured
//! once per run: `cuda-h2h` cannot beat the host-to-device one.

use crate::ec::{latency_summary, median, Measurement, Point, Row};
use crate::meter::CpuMeter;
use anyhow::{Context, Result};
use railstore_ec::bench::Op;
use railstore_ec::gpu::{
    copy_to_device, copy_to_host, DeviceBuffer, DeviceMatrix, HostPipeline, PinnedBuffer, Stream,
    SHARD_ALIGN,
};
use railstore_ec::{Code, CodeId, Codec, Engine, Tables};
use std::sync::Arc;
use std::time::Instant;

/// Bytes of input each pipeline chunk carries: large enough that a copy runs at bus speed,
/// small enough that several are in flight.
const PIPELINE_CHUNK_BYTES: usize = 8 << 20;
/// Streams the host pipeline rotates over.
const PIPELINE_LANES: usize = 4;
/// Bytes each copy-bandwidth measurement moves.
const CEILING_BYTES: usize = 256 << 20;

/// Pinned copy bandwidth, GB/s: the ceiling of any host-to-host offload.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Ceilings {
    pub h2d_gbps: f64,
    pub d2h_gbps: f64,
}

/// Buffers shared by every point of a run, sized for the largest.
pub struct Offload {
    stream: Stream,
    data_size: usize,
    host_in: PinnedBuffer,
    host_out: PinnedBuffer,
    dev_in: DeviceBuffer,
    dev_out: DeviceBuffer,
    pub ceilings: Ceilings,
    pub description: String,
}

fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

impl Offload {
    /// Opens the GPU, fills `data_size` bytes of input and measures the copy ceilings.
    pub fn new(data_size: usize, max_out_ratio: f64) -> Result<Offload> {
        let description = railstore_ec::gpu::describe()?;
        let stream = Stream::new()?;
        let out_size = ((data_size as f64 * max_out_ratio) as usize).max(CEILING_BYTES);
        let in_size = data_size.max(CEILING_BYTES);
        let mut host_in = PinnedBuffer::zeroed(in_size)?;
        fill(host_in.as_mut_slice(), 7);
        let host_out = PinnedBuffer::zeroed(out_size)?;
        let mut dev_in = DeviceBuffer::zeroed(&stream, in_size)?;
        let dev_out = DeviceBuffer::zeroed(&stream, out_size)?;
        let mut h2d = Vec::new();
        let mut d2h = Vec::new();
        let mut back = PinnedBuffer::zeroed(CEILING_BYTES)?;
        for _ in 0..5 {
            let t = Instant::now();
            copy_to_device(&stream, &host_in, &mut dev_in, CEILING_BYTES)?;
            h2d.push(CEILING_BYTES as f64 / t.elapsed().as_secs_f64() / 1e9);
            let t = Instant::now();
            copy_to_host(&stream, &dev_in, &mut back, CEILING_BYTES)?;
            d2h.push(CEILING_BYTES as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        // The copy came back unchanged: the ceilings measured real transfers.
        anyhow::ensure!(
            back.as_slice() == &host_in.as_slice()[..CEILING_BYTES],
            "a host-device-host round trip changed the bytes"
        );
        Ok(Offload {
            stream,
            data_size,
            host_in,
            host_out,
            dev_in,
            dev_out,
            ceilings: Ceilings {
                h2d_gbps: median(&mut h2d),
                d2h_gbps: median(&mut d2h),
            },
            description,
        })
    }

    /// The matrix a point codes with: parity from data, or the rebuild of m lost shards (a
    /// seeded pattern, the same for every stripe, as after a device failure).
    fn tables(code: CodeId, k: usize, m: usize, op: Op, seed: u64) -> Result<Arc<Tables>> {
        let codec = Codec::with_engine(Code::new(code, k, m)?, Engine::Scalar)?;
        match op {
            Op::Encode => Ok(Arc::new(Tables::new(&codec.code().parity_matrix()))),
            Op::Decode => {
                let mut present = vec![true; k + m];
                let mut x = seed;
                let mut lost = 0;
                while lost < m {
                    x = x
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let i = (x >> 33) as usize % (k + m);
                    if present[i] {
                        present[i] = false;
                        lost += 1;
                    }
                }
                Ok(codec.recovery_tables(&present)?.0)
            }
        }
    }

    /// Measures one point both ways; None when the chunk is not a whole number of the
    /// kernel's words.
    pub fn measure(
        &mut self,
        p: &Point,
        meter: &mut CpuMeter,
        cpu_engine: Engine,
        cpu_threads: usize,
    ) -> Result<Option<[Row; 3]>> {
        let Point {
            code,
            op,
            k,
            m,
            chunk,
            repeat,
            min_time_s,
        } = *p;
        if !chunk.is_multiple_of(SHARD_ALIGN) {
            return Ok(None);
        }
        let tables = Self::tables(code, k, m, op, 1)?;
        let (cols, rows) = (tables.cols(), tables.rows());
        let stripes = (self.data_size / (cols * chunk)).max(1);
        let user = (k * chunk * stripes) as f64;
        anyhow::ensure!(
            cols * chunk * stripes <= self.host_in.len()
                && rows * chunk * stripes <= self.host_out.len(),
            "offload buffers too small for RS({k},{m}) at {chunk} B"
        );
        let matrix = DeviceMatrix::new(&self.stream, &tables)?;
        let mut pipe = HostPipeline::new(
            &tables,
            chunk,
            (PIPELINE_CHUNK_BYTES / (cols * chunk)).max(1),
            PIPELINE_LANES,
        )?;

        // Device-resident: as many back-to-back launches as fill the minimum time.
        let (stream, din, dout) = (&self.stream, &self.dev_in, &mut self.dev_out);
        let mut launch = |n: usize| matrix.apply_device(stream, din, dout, stripes, chunk, n);
        launch(1)?;
        let t = Instant::now();
        launch(1)?;
        let once = t.elapsed().as_secs_f64().max(1e-7);
        let launches = ((min_time_s / once).ceil() as usize).clamp(3, 100_000);
        let mut kernel = Sample::default();
        for _ in 0..repeat {
            let before = meter.read();
            let t = Instant::now();
            launch(launches)?;
            let s = t.elapsed().as_secs_f64();
            kernel.add(user * launches as f64 / s, s / launches as f64, launches, s);
            kernel.cpu_s += meter.read().since(&before).cpu_s;
        }

        // Host to host, pinned, pipelined.
        let (input, output) = (&self.host_in, &mut self.host_out);
        pipe.apply(input, output, stripes)?;
        let h2h = Sample::passes(repeat, min_time_s, user, meter, || {
            pipe.apply(input, output, stripes).context("host pipeline")
        })?;
        // The same batch in host memory, coded by the CPU engine on every core, each thread
        // taking whole stripes: the like-for-like baseline of `cuda-h2h`.
        let cpu = Codec::with_engine(Code::new(code, k, m)?, cpu_engine)?;
        let (input, output) = (&self.host_in, &mut self.host_out);
        let batch = Sample::passes(repeat, min_time_s, user, meter, || {
            cpu_batch(&cpu, &tables, input, output, chunk, stripes, cpu_threads)
        })?;
        let row = |engine: &str, s: &mut Sample| s.row(engine, p, stripes);
        let (mut h2h, mut batch) = (h2h, batch);
        let mut cpu_row = row(&format!("{cpu_engine}-batch"), &mut batch);
        cpu_row.threads = cpu_threads;
        Ok(Some([
            row("cuda-kernel", &mut kernel),
            row("cuda-h2h", &mut h2h),
            cpu_row,
        ]))
    }
}

/// Codes `stripes` stripes of `input` into `output` on `threads` threads, each a contiguous run
/// of whole stripes.
fn cpu_batch(
    codec: &Codec,
    tables: &Tables,
    input: &PinnedBuffer,
    output: &mut PinnedBuffer,
    chunk: usize,
    stripes: usize,
    threads: usize,
) -> Result<()> {
    let (cols, rows) = (tables.cols(), tables.rows());
    let per = stripes.div_ceil(threads.max(1));
    let src = &input.as_slice()[..cols * chunk * stripes];
    let dst = &mut output.as_mut_slice()[..rows * chunk * stripes];
    std::thread::scope(|scope| {
        let jobs: Vec<_> = src
            .chunks(per * cols * chunk)
            .zip(dst.chunks_mut(per * rows * chunk))
            .map(|(src, dst)| {
                scope.spawn(move || -> Result<()> {
                    for (s, d) in src.chunks(cols * chunk).zip(dst.chunks_mut(rows * chunk)) {
                        let ins: Vec<&[u8]> = s.chunks(chunk).collect();
                        let mut outs: Vec<&mut [u8]> = d.chunks_mut(chunk).collect();
                        codec.apply_tables(tables, &ins, &mut outs)?;
                    }
                    Ok(())
                })
            })
            .collect();
        jobs.into_iter()
            .try_for_each(|j| j.join().expect("coding thread panicked"))
    })
}

#[derive(Default)]
struct Sample {
    rates: Vec<f64>,
    lat_s: Vec<f64>,
    ops: u64,
    secs: f64,
    cpu_s: f64,
}

impl Sample {
    /// `repeat` measurements, each of whole passes over the batch (at least 3, and at least
    /// `min_time_s`); `user` bytes of user data per pass.
    fn passes(
        repeat: usize,
        min_time_s: f64,
        user: f64,
        meter: &mut CpuMeter,
        mut pass: impl FnMut() -> Result<()>,
    ) -> Result<Sample> {
        let mut out = Sample::default();
        for _ in 0..repeat {
            let before = meter.read();
            let (mut n, start) = (0usize, Instant::now());
            while n < 3 || start.elapsed().as_secs_f64() < min_time_s {
                let t = Instant::now();
                pass()?;
                out.lat_s.push(t.elapsed().as_secs_f64());
                n += 1;
            }
            let s = start.elapsed().as_secs_f64();
            out.rates.push(user * n as f64 / s);
            out.ops += n as u64;
            out.secs += s;
            out.cpu_s += meter.read().since(&before).cpu_s;
        }
        Ok(out)
    }

    fn add(&mut self, rate: f64, lat_s: f64, ops: usize, secs: f64) {
        self.rates.push(rate);
        self.lat_s.push(lat_s);
        self.ops += ops as u64;
        self.secs += secs;
    }

    fn row(&mut self, engine: &str, p: &Point, stripes: usize) -> Row {
        p.row(
            engine,
            Measurement {
                data_gbps: median(&mut self.rates) / 1e9,
                lat_us: latency_summary(&mut self.lat_s, 1e6),
                ops: self.ops,
                threads: 1,
                data_size: p.k * p.chunk * stripes,
                cpu_s_per_s: self.cpu_s / self.secs.max(1e-9),
            },
        )
    }
}
