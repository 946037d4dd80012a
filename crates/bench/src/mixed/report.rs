//! What one mode measured, and the report of a whole run.

use hdrhistogram::Histogram;
use railstore_device::{SimDevice, SimStats};
use railstore_rails::{Rails, Role};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::*;

/// One sample of every device's role and buffer, and of the counters that change with roles
/// (cumulative since the mode's start, so rates are differences between samples).
#[derive(Debug, Clone)]
pub(super) struct Sample {
    pub(super) t_s: f64,
    pub(super) roles: Vec<Role>,
    pub(super) buffer_bytes: Vec<u64>,
    /// Per device: bytes flushed from its buffer, and reads its buffer answered.
    pub(super) flushed_bytes: Vec<u64>,
    pub(super) buffer_reads: Vec<u64>,
    /// The array: segments decoded, and frames that separated only partially.
    pub(super) decodes: u64,
    pub(super) partial_frames: u64,
}

/// The result of one mode.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// `separated`, `mixed` or `read-only`.
    pub mode: Mode,
    /// Read latency percentiles, simulated µs.
    pub read_p50_us: f64,
    /// 99th percentile.
    pub read_p99_us: f64,
    /// 99.9th percentile.
    pub read_p999_us: f64,
    /// 99.99th percentile.
    pub read_p9999_us: f64,
    /// Slowest read.
    pub read_max_us: f64,
    /// Mean read latency.
    pub read_mean_us: f64,
    /// Write latency percentiles, µs (0 without writes).
    pub write_p50_us: f64,
    /// 99th percentile.
    pub write_p99_us: f64,
    /// 99.9th percentile.
    pub write_p999_us: f64,
    /// Slowest write that completed (writes still waiting for buffer room at the end are not
    /// counted).
    pub write_max_us: f64,
    /// Reads completed in the measured time.
    pub reads: u64,
    /// Writes completed in the measured time.
    pub writes: u64,
    /// User read MB/s (10^6 B).
    pub read_mbps: f64,
    /// User write MB/s.
    pub write_mbps: f64,
    /// Reads per second.
    pub read_iops: f64,
    /// Reads slower than 1 ms.
    pub reads_over_1ms: u64,
    /// Reads slower than 10 ms.
    pub reads_over_10ms: u64,
    /// Write MB/s as a percentage of the eRails bound k m w / (k + m).
    pub write_pct_of_bound: f64,
    /// Most bytes buffered on one device at a sample.
    pub buffer_bytes_max: u64,
    /// Writes buffered because their device was reading (or guarding, or flushing).
    pub buffered_ops: u64,
    /// Writes sent straight to a writer.
    pub direct_ops: u64,
    /// Bytes flushed from buffers.
    pub flushed_bytes: u64,
    /// Device reads answered from a buffer.
    pub buffer_reads: u64,
    /// Times a write waited for buffer room.
    pub backpressure_waits: u64,
    /// Buffered writes replaced by a newer write of the same piece before being flushed.
    pub coalesced_ops: u64,
    /// Device reads that reached a device in the read window.
    pub device_reads_in_window: u64,
    /// Device reads that reached a device outside it (writer or guard); meaningful only with
    /// separation on.
    pub device_reads_outside_window: u64,
    /// Segments rebuilt by decoding.
    pub decodes: u64,
    /// Garbage-collection runs on the SSDs during the measured time.
    pub gc_runs: u64,
    /// Die-milliseconds spent in garbage collection (summed over dies and SSDs).
    pub gc_busy_die_ms: f64,
    /// SSD write amplification during the measured time.
    pub ssd_write_amplification: f64,
    /// Flash pages read per device read that reached an SSD (GC relocations can spread a
    /// value over more pages).
    pub ssd_pages_per_read: f64,
    /// Wall-clock seconds of the measured phase.
    pub wall_s: f64,
    /// Process CPU seconds of the measured phase (coding, copies, the simulation itself).
    pub cpu_s: f64,
    /// erails-decode: readers (k; m = k).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<usize>,
    /// erails-decode: `no-decode` or `decode`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<DecodeVariant>,
    /// erails-decode: reads whose window shards leave out a data shard, as the bench predicts
    /// them from the placement and the window (the manager's `decodes` count the real ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoding_reads: Option<u64>,
    /// erails-decode: simulated ms of decoding charged (0 in real time, where it costs itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_charged_ms: Option<f64>,
    /// erails-decode: charged decoding time over what the modelled cores offer in the
    /// measured time, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_busy_pct: Option<f64>,
    /// Trace replay: reads that arrived in the measured time but had not completed 50
    /// simulated ms after it (abandoned; their latency is in no percentile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_reads_abandoned: Option<u64>,
    /// Trace replay: writes abandoned likewise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_writes_abandoned: Option<u64>,
    #[serde(skip)]
    pub(super) buckets: Vec<Bucket>,
    #[serde(skip)]
    pub(super) samples: Vec<Sample>,
}

/// The report of one invocation (the `--json` object).
#[derive(Debug, Clone, Serialize)]
pub struct MixedReport {
    /// The preset.
    pub preset: Preset,
    /// Mechanism of every object.
    pub mechanism: String,
    /// Simulated SSDs.
    pub devices: usize,
    /// Colour classes (group width).
    pub colours: usize,
    /// Reader colours (k).
    pub readers: usize,
    /// Writer colours (m).
    pub writers: usize,
    /// Request size.
    pub request_bytes: usize,
    /// Objects in the data set.
    pub objects: u64,
    /// Closed-loop read requests in flight.
    pub read_streams: usize,
    /// Closed-loop write requests in flight.
    pub write_streams: usize,
    /// Share of dispatches that are reads (null: as fast as they go).
    pub read_share: Option<f64>,
    /// The trace replayed, if any.
    pub trace: Option<String>,
    /// The clock.
    pub clock: Clock,
    /// Whether CPU time costs simulated time (false in virtual time).
    pub cpu_time_charged: bool,
    /// Simulated seconds measured per mode.
    pub duration_s: f64,
    /// Frame T.
    pub frame_s: f64,
    /// Guard before joining the window.
    pub guard_ms: f64,
    /// What a buffered write waited for.
    pub durability: DurabilityArg,
    /// Logical bytes of each SSD.
    pub device_bytes: u64,
    /// Write buffer bound of each device.
    pub buffer_bytes: u64,
    /// Seed.
    pub seed: u64,
    /// w: one SSD's sequential write MB/s (preconditioned, piece-sized values, 32 in flight).
    pub w_mbps: f64,
    /// eRails §4's bound on user writes, k m w / (k + m) per set of n devices.
    pub write_bound_mbps: f64,
    /// What the write buffers allow: N x buffer / (q x window x T).
    pub buffer_bound_mbps: f64,
    /// erails-decode: modelled decoding cores (virtual time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_threads: Option<usize>,
    /// erails-decode: how decoding time reaches the clock, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_charge: Option<String>,
    /// erails-decode: the decode CPU time measured for each k before its runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_calibration: Option<Vec<DecodeCalibration>>,
    /// One entry per mode (erails-decode: per k and variant, all `read-only`; the top-level
    /// array fields then describe the largest k).
    pub runs: Vec<RunReport>,
    /// What ran, on what, in words.
    #[serde(skip)]
    pub description: String,
}

pub(super) fn percentile_us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(q) as f64 / 1000.0
    }
}

pub(super) fn sum_sim(sims: &[Arc<SimDevice>]) -> SimStats {
    sims.iter().fold(SimStats::default(), |a, s| {
        let b = s.stats();
        SimStats {
            host_pages_programmed: a.host_pages_programmed + b.host_pages_programmed,
            gc_pages_programmed: a.gc_pages_programmed + b.gc_pages_programmed,
            pages_read: a.pages_read + b.pages_read,
            blocks_erased: a.blocks_erased + b.blocks_erased,
            gc_runs: a.gc_runs + b.gc_runs,
            gc_busy_ns: a.gc_busy_ns + b.gc_busy_ns,
            buffer_stalls: a.buffer_stalls + b.buffer_stalls,
        }
    })
}

/// Sums of the rails counters: buffered, direct, flushed bytes, buffer reads, back-pressure
/// waits, flushed ops, and keys buffered now.
pub(super) fn rails_totals(rails: &Rails, n: usize) -> [u64; 7] {
    let mut t = [0u64; 7];
    for d in 0..n {
        let c = rails.counters(d);
        t[0] += c.buffered_ops.load(Ordering::Relaxed);
        t[1] += c.direct_ops.load(Ordering::Relaxed);
        t[2] += c.flushed_bytes.load(Ordering::Relaxed);
        t[3] += c.buffer_reads.load(Ordering::Relaxed);
        t[4] += c.backpressure_waits.load(Ordering::Relaxed);
        t[5] += c.flushed_ops.load(Ordering::Relaxed);
    }
    t[6] = rails.snapshot().iter().map(|s| s.buffer_keys as u64).sum();
    t
}
