//! eRails §6.1: read throughput against k with decoding charged at this machine's CPU cost.

use anyhow::{bail, ensure, Context, Result};
use railstore_redundancy::Mechanism;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::sync::Arc;

use super::*;

/// The CPU cost of the decodes one k's reads need, measured on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeCalibration {
    /// Data shards (readers).
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Bytes of one shard (the object over k).
    pub shard_bytes: usize,
    /// The decoding engine.
    pub engine: String,
    /// CPU µs of one decode by the first shard index s of the k consecutive shards the window
    /// holds (0: the data shards, nothing to decode; s in 1..=k misses s data shards, s > k
    /// misses n - s).
    pub decode_us_by_first_shard: Vec<f64>,
    /// Object MB (10^6 B) decoded per CPU second by one thread, averaged over the decoding
    /// values of s (each equally likely in the `decode` variant).
    pub decode_mbps_one_thread: f64,
}

impl DecodeCalibration {
    /// Simulated ns of the decode for reads whose window run starts at shard `first`.
    pub(super) fn decode_ns(&self, first: usize) -> u64 {
        self.decode_us_by_first_shard
            .get(first)
            .map_or(0, |us| (us * 1000.0).round() as u64)
    }
}

/// Times the decodes of `plan`'s mechanism for every window position, as the manager does them
/// (`Codec::new` on the same code, zeroed buffers for the missing shards, `reconstruct_data`):
/// the median of several batches in thread CPU time, so other processes on the machine do not
/// inflate it.
pub(super) fn calibrate_decode(plan: &Plan) -> Result<DecodeCalibration> {
    use railstore_ec::{Code, Codec};
    let Mechanism::Split { code, k, m } = plan.mechanism else {
        bail!("{}: only split objects decode", plan.mechanism);
    };
    let (k, m) = (k as usize, m as usize);
    let n = k + m;
    let codec = Codec::new(Code::new(code, k, m)?)?;
    let shard = plan.request_bytes.div_ceil(k);
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed ^ 0xDEC0DE);
    let mut shards: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; shard]).collect();
    for s in &mut shards[..k] {
        rng.fill(&mut s[..]);
    }
    {
        let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| s.as_mut_slice()).collect();
        codec.encode_shards(&mut refs)?;
    }
    const BATCH: usize = 32;
    const BATCHES: usize = 11;
    let mut us = vec![0.0; n];
    for (first, cost) in us.iter_mut().enumerate().skip(1) {
        let present: Vec<bool> = (0..n).map(|i| (i + n - first) % n < k).collect();
        let decode_once = |shards: &mut Vec<Vec<u8>>| -> Result<()> {
            let mut bufs: Vec<Vec<u8>> = shards
                .iter_mut()
                .zip(&present)
                .map(|(s, &p)| if p { std::mem::take(s) } else { vec![0; shard] })
                .collect();
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            codec.reconstruct_data(&mut refs, &present)?;
            std::hint::black_box(&bufs);
            for (s, (b, &p)) in shards.iter_mut().zip(bufs.into_iter().zip(&present)) {
                if p {
                    *s = b;
                }
            }
            Ok(())
        };
        // Once untimed: builds the decode matrix (the manager's codec caches it too).
        decode_once(&mut shards)?;
        let mut batches = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let t0 = crate::meter::thread_cpu_seconds();
            for _ in 0..BATCH {
                decode_once(&mut shards)?;
            }
            batches.push((crate::meter::thread_cpu_seconds() - t0) / BATCH as f64);
        }
        batches.sort_by(f64::total_cmp);
        *cost = batches[BATCHES / 2] * 1e6;
    }
    let mean_us = us[1..].iter().sum::<f64>() / (n - 1) as f64;
    Ok(DecodeCalibration {
        k,
        m,
        shard_bytes: shard,
        engine: codec.engine().name().to_string(),
        decode_mbps_one_thread: if mean_us > 0.0 {
            plan.request_bytes as f64 / mean_us
        } else {
            0.0
        },
        decode_us_by_first_shard: us,
    })
}

/// erails-decode: for each k, both variants read-only on fresh devices.
pub(super) fn measure_decode(args: &MixedBenchArgs) -> Result<MixedReport> {
    if let Some(modes) = &args.modes {
        ensure!(
            modes == &[Mode::ReadOnly],
            "erails-decode runs read-only (eRails §6.1 has no writes): drop --modes or give \
             --modes read-only"
        );
    }
    let mut ks = args.ks.clone().unwrap_or(if args.quick {
        vec![2, 3]
    } else {
        vec![2, 3, 4, 5, 6]
    });
    ks.sort_unstable();
    ks.dedup();
    ensure!(
        !ks.is_empty() && ks[0] >= 1 && 2 * ks[ks.len() - 1] <= railstore_ec::SHARDS_MAX,
        "--ks must name values of k from 1 to {}",
        railstore_ec::SHARDS_MAX / 2
    );
    let mut runs = Vec::new();
    let mut calibrations = Vec::new();
    let mut last = None;
    for (i, &k) in ks.iter().enumerate() {
        let mut plan = plan_of(args, k)?;
        let cal = calibrate_decode(&plan)?;
        let output = &args.output;
        if !output.quiet {
            if i == 0 {
                output.say(&plan.describe());
            }
            output.say(&format!(
                "k = {k}: {} devices, split{k}+{k}, {} objects; decode CPU µs by first window \
                 shard {:?} ({} engine, one thread: {:.0} MB/s of objects)",
                plan.devices,
                plan.objects,
                cal.decode_us_by_first_shard
                    .iter()
                    .map(|u| (u * 10.0).round() / 10.0)
                    .collect::<Vec<_>>(),
                cal.engine,
                cal.decode_mbps_one_thread
            ));
            output.say(&decode_table_header());
        }
        if plan.clock == Clock::Virtual && plan.decode_threads > 0 {
            plan.decode_cost = Some(Arc::new(cal.clone()));
        }
        calibrations.push(cal);
        for variant in [DecodeVariant::NoDecode, DecodeVariant::Decode] {
            plan.decode_variant = Some(variant);
            let rt = plan.runtime()?;
            let r = rt
                .block_on(run_mode(&plan, Mode::ReadOnly, output.quiet))
                .with_context(|| format!("erails-decode k = {k} {}", variant.name()))?;
            drop(rt);
            if !output.quiet {
                output.say(&decode_table_line(&r));
            }
            runs.push(r);
        }
        plan.decode_variant = None;
        last = Some(plan);
    }
    let plan = last.expect("at least one k");
    let w = plan.runtime()?.block_on(measure_w(&plan))?;
    let (k, m) = plan.readers_writers();
    Ok(MixedReport {
        preset: plan.preset,
        mechanism: plan.mechanism.to_string(),
        devices: plan.devices,
        colours: plan.colours,
        readers: k,
        writers: m,
        request_bytes: plan.request_bytes,
        objects: plan.objects,
        read_streams: plan.read_streams,
        write_streams: plan.write_streams,
        read_share: None,
        trace: None,
        clock: plan.clock,
        cpu_time_charged: plan.clock == Clock::Real,
        duration_s: plan.duration_s,
        frame_s: plan.frame_s,
        guard_ms: plan.guard_s * 1000.0,
        durability: plan.durability,
        device_bytes: plan.device_bytes,
        buffer_bytes: plan.buffer_bytes,
        seed: plan.seed,
        w_mbps: w / 1e6,
        write_bound_mbps: plan.write_bound_bps(w) / 1e6,
        buffer_bound_mbps: plan.buffer_bound_bps() / 1e6,
        decode_threads: Some(plan.decode_threads),
        decode_charge: Some(match plan.clock {
            Clock::Virtual if plan.decode_threads == 0 => {
                "none (--decode-threads 0): decoding costs no simulated time".into()
            }
            Clock::Virtual => format!(
                "virtual time: each decoding read holds one of {} modelled core(s) for its \
                 decode's measured CPU time (decode_calibration)",
                plan.decode_threads
            ),
            Clock::Real => "real time: decoding costs its own CPU time".into(),
        }),
        decode_calibration: Some(calibrations),
        runs,
        description: format!(
            "values of k: {ks:?} (m = k, 2k devices each; the lines below are for k = {k})\n{}",
            plan.describe()
        ),
    })
}
