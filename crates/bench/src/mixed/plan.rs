//! The plan: everything one invocation does, derived from its options.

use anyhow::{bail, ensure, Result};
use railstore_device::sim::{precondition, virtual_time_runtime, VIRTUAL_TIME_DILATION};
use railstore_device::{Device, Limits, MemConfig, MemDevice, SimDevice};
use railstore_placement::{Layout, LayoutSpec};
use railstore_rails::write_bound;
use railstore_redundancy::{ManagerConfig, Mechanism, Policy};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::device::sim_config;
use crate::plot::human_bytes;

use super::*;

// ---------------------------------------------------------------------------------------------
// The plan

/// Everything one invocation does, derived from the options.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) preset: Preset,
    pub(super) mechanism: Mechanism,
    pub(super) devices: usize,
    /// Colours (the group width n).
    pub(super) colours: usize,
    /// Colours in the read window (k for splitting, 1 for replication).
    pub(super) window: usize,
    /// Device bytes written per user byte.
    pub(super) write_factor: f64,
    pub(super) request_bytes: usize,
    pub(super) read_streams: usize,
    pub(super) write_streams: usize,
    /// Writes allowed per read dispatched (None: as fast as they go).
    pub(super) writes_per_read: Option<f64>,
    pub(super) read_share: Option<f64>,
    pub(super) duration_s: f64,
    pub(super) frame_s: f64,
    pub(super) guard_s: f64,
    pub(super) durability: DurabilityArg,
    pub(super) device_bytes: u64,
    pub(super) buffer_bytes: u64,
    pub(super) filler_fraction: f64,
    pub(super) data_fraction: f64,
    pub(super) write_set: f64,
    pub(super) objects: u64,
    /// Bytes one piece occupies on a device (header included, rounded to 4 KiB units).
    pub(super) piece_device_bytes: u64,
    /// Simulated seconds of the write-only measurement of w.
    pub(super) w_measure_s: f64,
    pub(super) clock: Clock,
    /// tokio time per simulated time.
    pub(super) dilation: u64,
    pub(super) seed: u64,
    pub(super) cold_cache: bool,
    pub(super) trace: Option<Arc<Trace>>,
    /// erails-decode: which reads this run issues (None: uniform over the read set).
    pub(super) decode_variant: Option<DecodeVariant>,
    /// erails-decode in virtual time: the decode CPU time each decoding read is charged.
    pub(super) decode_cost: Option<Arc<DecodeCalibration>>,
    /// Modelled decoding cores.
    pub(super) decode_threads: usize,
}

/// Length of one time bucket (simulated), for the series and the IOPS CDF.
pub(super) const BUCKET_S: f64 = 0.1;
/// Buffer and role samples, simulated seconds apart.
pub(super) const SAMPLE_S: f64 = 0.1;
pub(super) const UNIT_BYTES: u64 = 4096;

/// Bytes the manager stores for a piece of `payload` bytes (`redundancy::format`): from 16 KiB
/// on, a shard of whole 4 KiB units behind a header with their checksums (when the device's
/// values have room for it, as they do for the requests planned here).
fn piece_bytes(payload: u64) -> u64 {
    use railstore_redundancy::format::{
        unit_header_bytes, PIECE_HEADER_BYTES, PIECE_UNITS_MIN_PAYLOAD, PIECE_UNIT_BYTES,
    };
    if payload >= PIECE_UNITS_MIN_PAYLOAD as u64 {
        let units = payload.next_multiple_of(PIECE_UNIT_BYTES as u64);
        units + unit_header_bytes(units as usize) as u64
    } else {
        payload + PIECE_HEADER_BYTES as u64
    }
}

/// The plan of `args`; `k` picks erails-decode's array (ignored by the other presets).
pub(super) fn plan_of(args: &MixedBenchArgs, k: usize) -> Result<Plan> {
    let q = args.quick;
    let decode = args.preset == Preset::ErailsDecode;
    let (devices, mech, request, rs, ws, share) = match args.preset {
        Preset::Rails2 => (2, "rep2".to_string(), 256 << 10, 2, 2, None),
        Preset::ErailsK3 => (6, "split3+3".into(), 128 << 10, 4, 4, Some(0.75)),
        Preset::ErailsK5 => (10, "split5+5".into(), 128 << 10, 4, 4, Some(0.75)),
        Preset::Groups12 => (12, "split3+3".into(), 128 << 10, 8, 8, Some(0.75)),
        // Reads only; enough in flight that the readers' channels, not the streams, set the
        // pace (each read keeps one shard read queued on every reader).
        Preset::ErailsDecode => (2 * k, format!("split{k}+{k}"), 128 << 10, 64, 0, None),
        Preset::Serve => bail!("the serve preset runs through the railstore binary's S3 endpoint"),
    };
    ensure!(
        !decode || args.trace.is_none(),
        "erails-decode measures decoding on synthetic reads; --trace goes with the other presets"
    );
    let mechanism = Mechanism::parse(&mech).map_err(|e| anyhow::anyhow!("{e}"))?;
    let colours = mechanism.width();
    let (window, write_factor) = match mechanism {
        Mechanism::Split { k, m, .. } => (k as usize, (k + m) as f64 / k as f64),
        Mechanism::Replicate { r } => (1, r as f64),
        other => bail!("{other}: the mixed benchmark covers replication and splitting"),
    };
    let request_bytes = args.request_bytes.unwrap_or(request);
    ensure!(request_bytes > 0, "--request-bytes must be positive");
    let read_share = match args.read_share.or(share) {
        Some(s) if s > 0.0 && s < 1.0 => Some(s),
        Some(s) if s == 0.0 || s == 1.0 => None,
        Some(s) => bail!("--read-share {s} must lie in [0, 1]"),
        None => None,
    };
    let duration_s = args.duration.unwrap_or(match (decode, q) {
        (true, true) => 1.0,
        (true, false) => 4.0,
        (false, true) => 3.0,
        (false, false) => 20.0,
    });
    let frame_s = args.frame.unwrap_or(if q { 0.5 } else { 2.0 });
    ensure!(duration_s > 0.0, "--duration must be positive");
    ensure!(
        args.guard_ms >= 0.0 && args.guard_ms / 1000.0 < frame_s,
        "--guard-ms must be shorter than the frame"
    );
    let device_bytes = args.device_mib.unwrap_or(if q { 64 } else { 1024 }) << 20;
    let buffer_bytes = args.buffer_mib.unwrap_or(if q { 8 } else { 128 }) << 20;
    ensure!(
        args.write_set > 0.0 && args.write_set < 1.0,
        "--write-set must lie strictly between 0 and 1"
    );
    ensure!(
        (0.0..0.9).contains(&args.filler_fraction)
            && args.data_fraction > 0.0
            && args.filler_fraction + args.data_fraction <= 0.9,
        "filler and data fractions must be positive and leave at least 10 % of each SSD free"
    );
    let trace = match &args.trace {
        Some(p) => Some(Arc::new(Trace::load(
            p,
            args.trace_format,
            args.trace_block.unwrap_or(64 << 10).max(512),
            args.trace_speed,
            args.trace_qd,
        )?)),
        None => None,
    };
    let request_bytes = trace.as_ref().map_or(request_bytes, |t| t.block_bytes);
    let shard = match mechanism {
        Mechanism::Split { k, .. } => request_bytes.div_ceil(k as usize) as u64,
        _ => request_bytes as u64,
    };
    let piece_device_bytes = piece_bytes(shard).div_ceil(UNIT_BYTES) * UNIT_BYTES;
    // Each object puts one piece on `colours` of the `devices` devices.
    let budget = args.data_fraction * device_bytes as f64 * devices as f64 / colours as f64;
    let mut objects = (budget / piece_device_bytes as f64) as u64;
    if let Some(t) = &trace {
        objects = objects.min(t.distinct_blocks.max(1));
    }
    ensure!(
        objects >= 16,
        "the data set holds only {objects} objects: raise --device-mib or --data-fraction"
    );
    Ok(Plan {
        preset: args.preset,
        mechanism,
        devices,
        colours,
        window,
        write_factor,
        request_bytes,
        read_streams: args.read_streams.unwrap_or(rs).max(1),
        write_streams: if decode {
            0
        } else {
            args.write_streams.unwrap_or(ws)
        },
        writes_per_read: read_share.map(|s| (1.0 - s) / s),
        read_share,
        duration_s,
        frame_s,
        guard_s: args.guard_ms / 1000.0,
        durability: args.durability,
        device_bytes,
        buffer_bytes,
        filler_fraction: args.filler_fraction,
        data_fraction: args.data_fraction,
        write_set: args.write_set,
        objects,
        piece_device_bytes,
        w_measure_s: if q { 0.2 } else { 1.0 },
        clock: args.clock,
        dilation: match args.clock {
            Clock::Virtual => VIRTUAL_TIME_DILATION,
            Clock::Real => 1,
        },
        seed: args.seed,
        cold_cache: args.cold_cache,
        trace,
        decode_variant: None,
        decode_cost: None,
        decode_threads: args.decode_threads,
    })
}

impl Plan {
    /// tokio duration of `s` simulated seconds.
    pub(super) fn dur(&self, s: f64) -> Duration {
        Duration::from_secs_f64(s * self.dilation as f64)
    }

    /// Simulated nanoseconds in a tokio duration.
    pub(super) fn sim_ns(&self, d: Duration) -> u64 {
        (d.as_nanos() / self.dilation as u128) as u64
    }

    /// Objects the read streams read: the first `1 - write_set` of them. Writes overwrite the
    /// rest, so no read is answered from a write buffer (the worst case Flash on Rails §4.4
    /// measured; such reads would also take no simulated time).
    pub(super) fn read_objects(&self) -> u64 {
        if self.trace.is_some() || self.preset == Preset::ErailsDecode {
            self.objects
        } else {
            ((self.objects as f64 * (1.0 - self.write_set)) as u64).clamp(1, self.objects - 1)
        }
    }

    /// User writes that fill one device's write buffer (its pieces plus the buffer's
    /// per-entry charge; a device gets `colours / devices` of the pieces).
    pub(super) fn buffer_writes(&self) -> usize {
        let entry = self.piece_device_bytes + 64 + 32;
        (self.buffer_bytes / entry) as usize * self.devices / self.colours
    }

    pub(super) fn readers_writers(&self) -> (usize, usize) {
        (self.window, self.colours - self.window)
    }

    /// eRails §4's bound k m w / (k + m), for each of the N / n disjoint sets of colours'
    /// devices (groups-12 has two devices per colour).
    pub(super) fn write_bound_bps(&self, w: f64) -> f64 {
        let (k, m) = self.readers_writers();
        write_bound(k, m, w) * (self.devices / self.colours) as f64
    }

    /// What the buffers allow: a device buffers the writes addressed to it for the `window`
    /// frames it reads, so q W / N x window x T <= buffer.
    pub(super) fn buffer_bound_bps(&self) -> f64 {
        self.devices as f64 * self.buffer_bytes as f64
            / (self.write_factor * self.window as f64 * self.frame_s)
    }

    pub(super) fn runtime(&self) -> Result<tokio::runtime::Runtime> {
        Ok(match self.clock {
            Clock::Virtual => virtual_time_runtime()?,
            Clock::Real => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
                .enable_all()
                .build()?,
        })
    }

    pub(super) fn manager_config(&self) -> ManagerConfig {
        ManagerConfig {
            policy: Policy::Standalone(self.mechanism),
            ..ManagerConfig::default()
        }
    }

    /// Colour of every device, from the layout the manager will derive.
    pub(super) fn colours_of(&self) -> Result<Vec<usize>> {
        let config = self.manager_config();
        let layout = Layout::new(LayoutSpec {
            devices: self.devices,
            width: self.colours,
            rounds: if self.devices == self.colours {
                1
            } else {
                config.layout_rounds
            },
            seed: config.layout_seed,
            version: 1,
        })?;
        Ok((0..self.devices).map(|d| layout.colour_of(d)).collect())
    }

    pub(super) fn sim_device(&self) -> Result<Arc<SimDevice>> {
        let limits = Limits {
            value_bytes_max: (self.request_bytes + 4096).max(Limits::default().value_bytes_max),
            ..Limits::default()
        };
        let inner: Arc<dyn Device> = Arc::new(SparseFiller {
            mem: MemDevice::new(MemConfig {
                capacity_bytes: u64::MAX / 4,
                limits,
                queue_depth_max: 1 << 16,
            })?,
            filler: Mutex::new(std::collections::HashMap::new()),
        });
        let cfg = sim_config(
            self.device_bytes,
            self.clock == Clock::Virtual,
            VIRTUAL_TIME_DILATION,
        );
        Ok(Arc::new(SimDevice::new(inner, cfg)?))
    }

    /// Fills and overwrites filler on a fresh simulated SSD (4 KiB values; 8-byte keys that
    /// never meet the manager's tagged keys).
    pub(super) async fn precondition(&self, sim: &Arc<SimDevice>, salt: u64) -> Result<()> {
        let keys = (self.filler_fraction * self.device_bytes as f64 / UNIT_BYTES as f64) as u64;
        if keys > 0 {
            precondition(
                sim.clone(),
                keys,
                UNIT_BYTES as usize,
                2 * keys,
                32,
                self.seed ^ salt.wrapping_mul(0x9E37_79B9),
            )
            .await?;
        }
        Ok(())
    }

    pub(super) fn describe(&self) -> String {
        let mut s = String::new();
        let (k, m) = self.readers_writers();
        let _ = writeln!(
            s,
            "preset {}: {} simulated SSDs of {} (default TLC model), {} in {} colour classes, \
             window of {k} reader colour(s) and {m} writer colour(s), frame T = {} s, guard {} ms, \
             buffered writes kept in {}",
            self.preset.name(),
            self.devices,
            human_bytes(self.device_bytes),
            self.mechanism,
            self.colours,
            self.frame_s,
            self.guard_s * 1000.0,
            match self.durability {
                DurabilityArg::Journal => "a journal on writers",
                DurabilityArg::Memory => "memory",
            }
        );
        match &self.trace {
            Some(t) => {
                let _ = writeln!(
                    s,
                    "workload: trace {} ({} requests, {:.1} % reads, {:.1} s at speed x{}), \
                     offsets mapped to {} keys of {} ({} distinct blocks{}), open loop, at \
                     most {} reads and as many writes outstanding; a write \
                     stores its blocks whole, a read reads its byte range",
                    t.path.display(),
                    t.ops.len(),
                    t.read_pct(),
                    t.span_s(),
                    t.speed,
                    self.objects,
                    human_bytes(t.block_bytes as u64),
                    t.distinct_blocks,
                    if t.distinct_blocks > self.objects {
                        ", folded onto the keys by modulo"
                    } else {
                        ""
                    },
                    t.qd
                );
            }
            None if self.preset == Preset::ErailsDecode => {
                let _ = writeln!(
                    s,
                    "workload: {} objects of {} (data set {}), read-only, {} read request(s) in \
                     flight (closed loop); the k devices in the window serve every read. \
                     no-decode reads keys whose k data shards all lie on the window's colours \
                     (their rotation equals the window's start, 1 key in {}); decode reads the \
                     others, so every read rebuilds at least one data shard from parity",
                    self.objects,
                    human_bytes(self.request_bytes as u64),
                    human_bytes(self.objects * self.request_bytes as u64),
                    self.read_streams,
                    self.colours,
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "workload: {} objects of {} (data set {}; reads address the first {} at \
                     random, writes overwrite the other {} in shuffled passes), {} read and {} \
                     write request(s) in flight (closed loop), {}",
                    self.objects,
                    human_bytes(self.request_bytes as u64),
                    human_bytes(self.objects * self.request_bytes as u64),
                    self.read_objects(),
                    self.objects - self.read_objects(),
                    self.read_streams,
                    self.write_streams,
                    match self.read_share {
                        Some(r) => format!("reads and writes dispatched {:.2} : {:.2}", r, 1.0 - r),
                        None => "both streams as fast as they go".into(),
                    }
                );
            }
        }
        let _ = writeln!(
            s,
            "each mode: fresh SSDs; filler {:.0} % of each SSD (filled, then overwritten twice at \
             random), data set {:.0} %, {}, {} s measured from a frame boundary; seed {}; write \
             buffers {} per device",
            self.filler_fraction * 100.0,
            self.data_fraction * 100.0,
            if self.cold_cache {
                "metadata cache cold"
            } else {
                "every key read once first (metadata cache warm)"
            },
            self.duration_s,
            self.seed,
            human_bytes(self.buffer_bytes)
        );
        let write_set = (self.objects - self.read_objects()) as usize;
        if self.trace.is_none()
            && self.write_streams > 0
            && write_set < 2 * (self.buffer_writes() + self.write_streams)
        {
            let _ = writeln!(
                s,
                "note: the write set ({write_set} objects) is less than twice what one device's \
                 buffer holds ({} writes): some overwrites will coalesce in the buffers (fewer \
                 device writes than the worst case); raise --write-set or --device-mib",
                self.buffer_writes()
            );
        }
        let _ = write!(
            s,
            "clock: {}",
            match (self.clock, self.preset) {
                (Clock::Virtual, Preset::ErailsDecode) if self.decode_threads == 0 => {
                    "virtual (paused tokio clock); --decode-threads 0: decoding, like all CPU \
                     work, costs no simulated time (a control)"
                        .into()
                }
                (Clock::Virtual, Preset::ErailsDecode) => format!(
                    "virtual (paused tokio clock); a read that decodes then holds one of {} \
                     modelled decoding core(s) for the CPU time its decode took on this machine \
                     (measured before the run, thread CPU time, the manager's codec); other CPU \
                     work costs no simulated time",
                    self.decode_threads
                ),
                (Clock::Virtual, _) => "virtual (paused tokio clock; CPU time of coding and \
                                        copies costs no simulated time)"
                    .into(),
                (Clock::Real, _) => "real (CPU time counts, decoding included; simulated \
                                     delays under 1 ms round up to tokio's 1 ms timer tick)"
                    .into(),
            }
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_plan_their_arrays() {
        let p = plan_of(&MixedBenchArgs::new(Preset::Groups12), 0).unwrap();
        assert_eq!((p.devices, p.colours, p.window), (12, 6, 3));
        let colours = p.colours_of().unwrap();
        assert_eq!(colours, (0..12).map(|d| d % 6).collect::<Vec<_>>());
        let r = plan_of(&MixedBenchArgs::new(Preset::Rails2), 0).unwrap();
        assert_eq!((r.window, r.colours, r.write_factor), (1, 2, 2.0));
        // Rails: one reader, one writer: w / 2; groups-12: two sets of k = m = 3: 2 x 1.5 w.
        assert_eq!(r.write_bound_bps(100.0), 50.0);
        assert_eq!(p.write_bound_bps(100.0), 300.0);
        let k3 = plan_of(&MixedBenchArgs::new(Preset::ErailsK3), 0).unwrap();
        assert_eq!(k3.writes_per_read, Some(1.0 / 3.0));
        // 128 KiB over k = 3: 43 691 B shards, rounded up to 11 whole units (docs/format.md),
        // and their 512-byte header with the unit table -> 12 units.
        assert_eq!(k3.piece_device_bytes, 12 * 4096);
        // erails-decode: 2k devices, k readers, no writes, every object readable.
        let d = plan_of(&MixedBenchArgs::new(Preset::ErailsDecode), 4).unwrap();
        assert_eq!((d.devices, d.colours, d.window), (8, 8, 4));
        assert_eq!((d.write_streams, d.read_objects()), (0, d.objects));
    }
}
