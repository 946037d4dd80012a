//! Block traces replayed as reads and writes of the data set's keys.

use anyhow::{ensure, Context, Result};
use futures_util::future::join_all;
use railstore_device::{ReadRange, StoreMode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::*;

// ---------------------------------------------------------------------------------------------
// Trace replay

#[derive(Debug, Clone, Copy)]
pub(super) struct TraceOp {
    /// Arrival, simulated ns from the trace's start (already divided by the speed).
    pub(super) at_ns: u64,
    pub(super) write: bool,
    /// Where its blocks' dense ids (before folding onto the keys) start in
    /// `Trace::block_ids`; the byte range starts `offset` into the first block.
    pub(super) ids: usize,
    pub(super) offset: u64,
    pub(super) len: u64,
}

#[derive(Debug)]
pub(super) struct Trace {
    pub(super) path: PathBuf,
    pub(super) ops: Vec<TraceOp>,
    /// The dense ids of every request's blocks, request after request.
    pub(super) block_ids: Vec<u64>,
    pub(super) block_bytes: usize,
    pub(super) distinct_blocks: u64,
    pub(super) speed: f64,
    pub(super) qd: usize,
}

impl Trace {
    pub(super) fn load(
        path: &Path,
        format: Option<TraceFormat>,
        block_bytes: usize,
        speed: f64,
        qd: usize,
    ) -> Result<Trace> {
        ensure!(speed > 0.0, "--trace-speed must be positive");
        let raw = crate::trace::read_requests(path, format)?;
        let t0 = raw[0].at_ns;
        let bb = block_bytes as u64;
        let mut ids: std::collections::HashMap<(u64, u64), u64> = Default::default();
        let mut ops = Vec::with_capacity(raw.len());
        let mut block_ids = Vec::with_capacity(raw.len());
        for r in raw {
            let (t, dev, off, len, write) = (r.at_ns, r.device, r.offset, r.len.max(1), r.write);
            let first = off / bb;
            let last = (off + len - 1) / bb;
            // Dense ids by first touch. Each block keeps its own: a request that spans a block
            // seen before and a new one has ids that need not be consecutive.
            let at = block_ids.len();
            for b in first..=last {
                let next = ids.len() as u64;
                block_ids.push(*ids.entry((dev, b)).or_insert(next));
            }
            ops.push(TraceOp {
                at_ns: ((t - t0) / speed) as u64,
                write,
                ids: at,
                offset: off % bb,
                len,
            });
        }
        Ok(Trace {
            path: path.to_path_buf(),
            distinct_blocks: ids.len() as u64,
            ops,
            block_ids,
            block_bytes,
            speed,
            qd,
        })
    }

    /// The dense ids of `op`'s blocks, in offset order.
    pub(super) fn blocks(&self, op: &TraceOp) -> &[u64] {
        let n = (op.offset + op.len).div_ceil(self.block_bytes as u64) as usize;
        &self.block_ids[op.ids..op.ids + n]
    }

    pub(super) fn read_pct(&self) -> f64 {
        100.0 * self.ops.iter().filter(|o| !o.write).count() as f64 / self.ops.len() as f64
    }

    pub(super) fn span_s(&self) -> f64 {
        self.ops.last().map_or(0.0, |o| o.at_ns as f64 / 1e9)
    }
}

/// Replays the trace open loop (looping it until the deadline); a request's latency counts
/// from its arrival and covers every block it touches.
pub(super) async fn replay(ctx: Arc<Ctx>, trace: Arc<Trace>, writes: bool) -> Result<()> {
    // Reads and writes queue apart: with one shared limit, writes that separation throttles
    // (paced or waiting for buffer room) fill every slot and the reads' latency would measure
    // the write throttle, not the devices.
    let slots = [
        Arc::new(Semaphore::new(trace.qd.max(1))),
        Arc::new(Semaphore::new(trace.qd.max(1))),
    ];
    let span = trace.ops.last().map_or(0, |o| o.at_ns) + 1_000_000;
    let bb = trace.block_bytes as u64;
    let objects = ctx.plan.objects;
    let mut tasks = tokio::task::JoinSet::new();
    let mut value = vec![0u8; trace.block_bytes];
    ChaCha8Rng::seed_from_u64(ctx.plan.seed).fill(&mut value[..]);
    let value: Arc<[u8]> = value.into();
    'outer: for round in 0u64.. {
        for op in &trace.ops {
            if op.write && !writes {
                continue;
            }
            let at = ctx.start + ctx.plan.dur((round * span + op.at_ns) as f64 / 1e9);
            if at >= ctx.deadline {
                break 'outer;
            }
            tokio::time::sleep_until(at).await;
            let (ctx2, slots, op, value) = (
                ctx.clone(),
                slots[op.write as usize].clone(),
                *op,
                value.clone(),
            );
            let trace = trace.clone();
            ctx.trace_pending[op.write as usize].fetch_add(1, Ordering::Relaxed);
            tasks.spawn(async move {
                let _slot = slots.acquire_owned().await.expect("semaphore open");
                let parts = trace.blocks(&op).iter().enumerate().map(|(j, &id)| {
                    let j = j as u64;
                    let key = object_key(id % objects);
                    let lo = if j == 0 { op.offset } else { 0 };
                    let hi = ((op.offset + op.len) - j * bb).min(bb);
                    let (m, value) = (ctx2.manager.clone(), value.clone());
                    async move {
                        if op.write {
                            m.put(&key, &value, StoreMode::Upsert, None).await?;
                        } else {
                            m.get(
                                &key,
                                ReadRange {
                                    offset: lo,
                                    len: Some(hi - lo),
                                },
                            )
                            .await?;
                        }
                        Ok::<(), anyhow::Error>(())
                    }
                });
                for r in join_all(parts).await {
                    r?;
                }
                ctx2.record(op.write, at, op.len);
                ctx2.trace_pending[op.write as usize].fetch_sub(1, Ordering::Relaxed);
                Ok::<(), anyhow::Error>(())
            });
            while let Some(r) = tasks.try_join_next() {
                r.context("a trace request panicked")??;
            }
        }
        if trace.ops.iter().all(|o| o.write && !writes) {
            break;
        }
    }
    // Requests still waiting past the deadline are abandoned with the writes; the report
    // counts them (`trace_pending`), as their latency never reaches the percentiles.
    let grace = Instant::now() + ctx.plan.dur(0.05);
    while !tasks.is_empty() {
        tokio::select! {
            r = tasks.join_next() => {
                if let Some(r) = r {
                    r.context("a trace request panicked")??;
                }
            }
            _ = tokio::time::sleep_until(grace) => {
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_parse_in_every_format() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("m.trace", "100 0 8 16 1\n200 1 8 8 0\n", TraceFormat::Mqsim),
            (
                "h.trace",
                "0.000 0 4096 8192 0\n1.500 0 0 4096 1\n",
                TraceFormat::Heimdall,
            ),
            (
                "c.csv",
                "version,time,op,size,lbn\n1,10,2a,512,8\n1,12,28,1024,8\n1,13,12,512,8\n",
                TraceFormat::Cloudphysics,
            ),
        ];
        for (name, body, _) in cases {
            let p = dir.path().join(name);
            std::fs::write(&p, body).unwrap();
            let t = Trace::load(&p, None, 4096, 1.0, 8).unwrap();
            assert_eq!(t.ops.len(), 2, "{name}: {t:?}");
            assert_eq!(t.ops[0].at_ns, 0, "{name}");
        }
        let t = Trace::load(&dir.path().join("h.trace"), None, 4096, 2.0, 8).unwrap();
        // 8 KiB at 4 KiB spans blocks 1 and 2; then block 0: three distinct blocks.
        assert_eq!(t.distinct_blocks, 3);
        assert_eq!(t.ops[1].at_ns, 750_000);
        assert!(t.ops[0].write && !t.ops[1].write);
        assert_eq!(t.blocks(&t.ops[0]), [0, 1]);
        assert_eq!(t.blocks(&t.ops[1]), [2]);
    }

    #[test]
    fn a_request_over_a_known_and_a_new_block_keeps_each_blocks_id() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.trace");
        // Block 1, then block 0, then blocks 1 and 2 (id 0 and a new id 2: not consecutive),
        // then 100 bytes inside block 2 from byte 4000, which reach into block 3.
        std::fs::write(
            &p,
            "0.000 0 4096 4096 0\n1.000 0 0 4096 1\n2.000 0 4096 8192 1\n\
             3.000 0 12192 200 1\n",
        )
        .unwrap();
        let t = Trace::load(&p, None, 4096, 1.0, 8).unwrap();
        let ids: Vec<&[u64]> = t.ops.iter().map(|o| t.blocks(o)).collect();
        assert_eq!(ids, [&[0][..], &[1], &[0, 2], &[2, 3]]);
        assert_eq!(t.distinct_blocks, 4);
        assert_eq!((t.ops[3].offset, t.ops[3].len), (4000, 200));
    }
}
