//! One mode on fresh SSDs, and the measured device write rate.

use crate::progress::bar;
use anyhow::{ensure, Context, Result};
use futures_util::future::join_all;
use railstore_device::{Device, ReadRange, SimDevice, StoreMode};
use railstore_rails::{DeviceCounters, Durability, RailsConfig, ScheduleConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use railstore_store::array::{assemble, pass_through};

use super::*;

/// One mode on fresh SSDs: precondition, load the data set through a manager on the bare
/// SSDs, wrap them with rails (separation on or off) under a second manager, read every key
/// once, then measure from the next frame boundary.
pub(super) async fn run_mode(plan: &Plan, mode: Mode, quiet: bool) -> Result<RunReport> {
    let sims: Vec<Arc<SimDevice>> = (0..plan.devices)
        .map(|_| plan.sim_device())
        .collect::<Result<_>>()?;
    let label = |what: &str| format!("{} {}: {what}", plan.preset.name(), mode.name());
    // 1. Filler, all SSDs at once.
    let p = bar(quiet, None, &label("precondition"));
    join_all(
        sims.iter()
            .enumerate()
            .map(|(d, s)| plan.precondition(s, d as u64 + 1)),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<()>>>()?;
    p.finish_and_clear();
    // 2. The data set through a manager on the bare SSDs.
    let raw: Vec<Arc<dyn Device>> = sims.iter().map(|s| s.clone() as Arc<dyn Device>).collect();
    let config = plan.manager_config();
    {
        let loader = assemble(
            raw.clone(),
            pass_through(plan.colours),
            config.clone(),
            &[],
            None,
        )
        .await?
        .manager;
        let p = bar(quiet, Some(plan.objects), &label("load"));
        let seed = plan.seed;
        let size = plan.request_bytes;
        let m = loader.clone();
        for_each_id(plan.objects, 16, &p, move |i| {
            let m = m.clone();
            async move {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ i.wrapping_mul(0x2545_F491));
                let mut v = vec![0u8; size];
                rng.fill(&mut v[..]);
                m.put(&object_key(i), &v, StoreMode::Upsert, None).await?;
                Ok(())
            }
        })
        .await?;
        loader.sync().await?;
        p.finish_and_clear();
    }
    for s in &sims {
        s.drain().await;
    }
    // 3. Separation over probes over the SSDs.
    let probes: Vec<Arc<Probe>> = raw
        .iter()
        .enumerate()
        .map(|(d, s)| Arc::new(Probe::new(s.clone(), d)))
        .collect();
    let colour_of = plan.colours_of()?;
    let schedule = ScheduleConfig {
        colours: plan.colours,
        frame: plan.dur(plan.frame_s),
        window_min: plan.window,
        window_max: plan.window,
        guard: plan.dur(plan.guard_s),
    };
    let rails_cfg = RailsConfig {
        separation: mode != Mode::Mixed,
        write_buffer_bytes_max: plan.buffer_bytes,
        durability: match plan.durability {
            DurabilityArg::Journal => Durability::Journal,
            DurabilityArg::Memory => Durability::Memory,
        },
        ..RailsConfig::new(schedule)
    };
    let array = assemble(
        probes
            .iter()
            .map(|p| p.clone() as Arc<dyn Device>)
            .collect(),
        rails_cfg,
        config,
        &[],
        None,
    )
    .await?;
    let (rails, manager) = (array.rails, array.manager);
    for p in &probes {
        let _ = p.rails.set(Arc::downgrade(&rails));
    }
    // 4. Warm the metadata cache: one read of every key (not measured).
    if !plan.cold_cache {
        let p = bar(quiet, Some(plan.objects), &label("warm-up"));
        let m = manager.clone();
        for_each_id(plan.objects, 16, &p, move |i| {
            let m = m.clone();
            async move {
                m.get(&object_key(i), ReadRange::ALL).await?;
                Ok(())
            }
        })
        .await?;
        p.finish_and_clear();
    }
    // erails-decode picks keys by where their data shards lie.
    let mut by_rotation = Vec::new();
    if plan.decode_variant.is_some() {
        by_rotation = vec![Vec::new(); plan.colours];
        for i in 0..plan.read_objects() {
            by_rotation[manager.layout().place(&object_key(i)).rotation()].push(i);
        }
        ensure!(
            by_rotation.iter().all(|keys| !keys.is_empty()),
            "some rotation holds no key of the {} objects: raise --device-mib",
            plan.read_objects()
        );
    }
    let mut colour_device = vec![0; plan.colours];
    for (d, &c) in colour_of.iter().enumerate().rev() {
        colour_device[c] = d;
    }
    // 5. Start on a frame boundary.
    let frame_ns = plan.dur(plan.frame_s).as_nanos() as u64;
    let into = rails.now_ns() % frame_ns;
    if into > 0 {
        tokio::time::sleep(Duration::from_nanos(frame_ns - into)).await;
    }
    let sim0 = sum_sim(&sims);
    let rails0 = rails_totals(&rails, plan.devices);
    let probe0: (u64, u64) = probe_totals(&probes);
    let decodes0 = manager.devices().counters.decodes.load(Ordering::Relaxed);
    let wall = std::time::Instant::now();
    let cpu = crate::meter::process_cpu_seconds();
    let start = Instant::now();
    let deadline = start + plan.dur(plan.duration_s);
    let n_buckets = (plan.duration_s / BUCKET_S).ceil() as usize;
    let ctx = Arc::new(Ctx {
        plan: plan.clone(),
        manager: manager.clone(),
        start,
        deadline,
        stop: AtomicBool::new(false),
        reads_dispatched: AtomicU64::new(0),
        writes_dispatched: AtomicU64::new(0),
        gate: Notify::new(),
        tally: Mutex::new(Tally::new(n_buckets)),
        writes: Mutex::new(WriteOrder::new(
            plan.read_objects(),
            plan.objects,
            plan.buffer_writes() + plan.write_streams,
            plan.seed,
        )),
        rails: rails.clone(),
        colour_device,
        by_rotation,
        decoders: Semaphore::new(plan.decode_threads.max(1)),
        decoding_reads: AtomicU64::new(0),
        charged_ns: AtomicU64::new(0),
        trace_pending: Default::default(),
    });
    let progress = bar(
        quiet,
        Some((plan.duration_s * 1000.0) as u64),
        &label("simulated ms"),
    );
    // The sampler: roles and buffers, and the progress bar.
    let sampler = {
        let (rails, ctx, progress) = (rails.clone(), ctx.clone(), progress.clone());
        let step = plan.dur(SAMPLE_S);
        let n = plan.devices;
        tokio::spawn(async move {
            let mut out = Vec::new();
            let mut at = start;
            while at <= deadline {
                tokio::time::sleep_until(at).await;
                let snap = rails.snapshot();
                let t_s = ctx.plan.sim_ns(at - start) as f64 / 1e9;
                let counter = |f: fn(&DeviceCounters) -> &AtomicU64| {
                    (0..n)
                        .map(|d| f(&rails.counters(d)).load(Ordering::Relaxed))
                        .collect()
                };
                out.push(Sample {
                    t_s,
                    roles: snap.iter().map(|s| s.role).collect(),
                    buffer_bytes: snap.iter().map(|s| s.buffer_bytes).collect(),
                    flushed_bytes: counter(|c| &c.flushed_bytes),
                    buffer_reads: counter(|c| &c.buffer_reads),
                    decodes: ctx
                        .manager
                        .devices()
                        .counters
                        .decodes
                        .load(Ordering::Relaxed),
                    partial_frames: rails.partial_frames(),
                });
                debug_assert_eq!(snap.len(), n);
                progress.set_position((t_s * 1000.0) as u64);
                at += step;
            }
            out
        })
    };
    let mut readers = tokio::task::JoinSet::new();
    let mut writers = tokio::task::JoinSet::new();
    match &plan.trace {
        Some(trace) => {
            readers.spawn(replay(ctx.clone(), trace.clone(), mode != Mode::ReadOnly));
        }
        None => {
            for s in 0..plan.read_streams {
                readers.spawn(read_stream(ctx.clone(), s));
            }
            if mode != Mode::ReadOnly {
                for s in 0..plan.write_streams {
                    writers.spawn(write_stream(ctx.clone(), s));
                }
            }
        }
    }
    tokio::time::sleep_until(deadline).await;
    ctx.stop.store(true, Ordering::Relaxed);
    ctx.gate.notify_waiters();
    // Reads in flight finish (their latency counts); writes waiting for buffer room are
    // abandoned: the measurement is over.
    while let Some(r) = readers.join_next().await {
        r.context("a read stream panicked")??;
    }
    let grace = Instant::now() + plan.dur(0.05);
    while !writers.is_empty() {
        tokio::select! {
            r = writers.join_next() => {
                if let Some(r) = r {
                    r.context("a write stream panicked")??;
                }
            }
            _ = tokio::time::sleep_until(grace) => {
                writers.abort_all();
                while writers.join_next().await.is_some() {}
            }
        }
    }
    let samples = sampler.await.context("the sampler panicked")?;
    progress.finish_and_clear();
    let wall_s = wall.elapsed().as_secs_f64();
    let cpu_s = crate::meter::process_cpu_seconds() - cpu;
    let sim1 = sum_sim(&sims);
    let rails1 = rails_totals(&rails, plan.devices);
    let probe1 = probe_totals(&probes);
    let decodes = manager.devices().counters.decodes.load(Ordering::Relaxed) - decodes0;
    let charged_ns = ctx.charged_ns.load(Ordering::Relaxed);
    let tally = std::mem::replace(&mut *ctx.tally.lock().expect("tally lock"), Tally::new(0));
    let reads: u64 = tally.buckets.iter().map(|b| b.reads).sum();
    let writes: u64 = tally.buckets.iter().map(|b| b.writes).sum();
    let read_bytes: u64 = tally.buckets.iter().map(|b| b.read_bytes).sum();
    let write_bytes: u64 = tally.buckets.iter().map(|b| b.write_bytes).sum();
    let host = sim1.host_pages_programmed - sim0.host_pages_programmed;
    let gc_pages = sim1.gc_pages_programmed - sim0.gc_pages_programmed;
    let d = |i: usize| rails1[i] - rails0[i];
    Ok(RunReport {
        mode,
        read_p50_us: percentile_us(&tally.read, 0.5),
        read_p99_us: percentile_us(&tally.read, 0.99),
        read_p999_us: percentile_us(&tally.read, 0.999),
        read_p9999_us: percentile_us(&tally.read, 0.9999),
        read_max_us: tally.read.max() as f64 / 1000.0,
        read_mean_us: tally.read.mean() / 1000.0,
        write_p50_us: percentile_us(&tally.write, 0.5),
        write_p99_us: percentile_us(&tally.write, 0.99),
        write_p999_us: percentile_us(&tally.write, 0.999),
        write_max_us: tally.write.max() as f64 / 1000.0,
        reads,
        writes,
        read_mbps: read_bytes as f64 / plan.duration_s / 1e6,
        write_mbps: write_bytes as f64 / plan.duration_s / 1e6,
        read_iops: reads as f64 / plan.duration_s,
        reads_over_1ms: tally.reads_over_1ms,
        reads_over_10ms: tally.reads_over_10ms,
        write_pct_of_bound: 0.0,
        buffer_bytes_max: samples
            .iter()
            .flat_map(|s| s.buffer_bytes.iter().copied())
            .max()
            .unwrap_or(0),
        buffered_ops: d(0),
        direct_ops: d(1),
        flushed_bytes: d(2),
        buffer_reads: d(3),
        backpressure_waits: d(4),
        // Buffered in, minus flushed out, minus growth of what is still buffered.
        coalesced_ops: (d(0) + rails0[6]).saturating_sub(d(5) + rails1[6]),
        device_reads_in_window: probe1.0 - probe0.0,
        device_reads_outside_window: probe1.1 - probe0.1,
        decodes,
        gc_runs: sim1.gc_runs - sim0.gc_runs,
        gc_busy_die_ms: (sim1.gc_busy_ns - sim0.gc_busy_ns) as f64 / 1e6,
        ssd_write_amplification: if host == 0 {
            1.0
        } else {
            (host + gc_pages) as f64 / host as f64
        },
        ssd_pages_per_read: {
            let device_reads = (probe1.0 + probe1.1) - (probe0.0 + probe0.1);
            (sim1.pages_read - sim0.pages_read) as f64 / device_reads.max(1) as f64
        },
        wall_s,
        cpu_s,
        k: plan.decode_variant.map(|_| plan.window),
        variant: plan.decode_variant,
        decoding_reads: plan
            .decode_variant
            .map(|_| ctx.decoding_reads.load(Ordering::Relaxed)),
        decode_charged_ms: plan.decode_variant.map(|_| charged_ns as f64 / 1e6),
        decode_busy_pct: plan.decode_variant.map(|_| {
            charged_ns as f64 / (plan.duration_s * 1e9 * plan.decode_threads.max(1) as f64) * 100.0
        }),
        trace_reads_abandoned: plan
            .trace
            .as_ref()
            .map(|_| ctx.trace_pending[0].load(Ordering::Relaxed)),
        trace_writes_abandoned: plan
            .trace
            .as_ref()
            .map(|_| ctx.trace_pending[1].load(Ordering::Relaxed)),
        buckets: tally.buckets,
        samples,
    })
}

pub(super) fn probe_totals(probes: &[Arc<Probe>]) -> (u64, u64) {
    probes.iter().fold((0, 0), |(a, b), p| {
        (
            a + p.reads_in_window.load(Ordering::Relaxed),
            b + p.reads_outside.load(Ordering::Relaxed),
        )
    })
}

/// w: one fresh SSD, preconditioned like the array's, then piece-sized values written in key
/// order over a region the size of the data set's share, 32 in flight, for `w_measure_s`.
pub(super) async fn measure_w(plan: &Plan) -> Result<f64> {
    let sim = plan.sim_device()?;
    plan.precondition(&sim, 0).await?;
    sim.drain().await;
    let piece = (plan.piece_device_bytes - UNIT_BYTES / 2) as usize;
    let region =
        ((plan.data_fraction * plan.device_bytes as f64) as u64 / plan.piece_device_bytes).max(1);
    let value: Arc<[u8]> = vec![0x5au8; piece].into();
    let next = Arc::new(AtomicU64::new(0));
    let written = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + plan.dur(plan.w_measure_s);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let (sim, value, next, written) =
            (sim.clone(), value.clone(), next.clone(), written.clone());
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed) % region;
                let key = format!("w{i:010}");
                sim.store(key.as_bytes(), &value, StoreMode::Upsert).await?;
                if Instant::now() <= deadline {
                    written.fetch_add(value.len() as u64, Ordering::Relaxed);
                }
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a w task panicked")??;
    }
    Ok(written.load(Ordering::Relaxed) as f64 / plan.w_measure_s)
}
