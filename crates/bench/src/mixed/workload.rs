//! The measured load: the shared context, the read and write streams and their tallies.

use anyhow::{ensure, Context, Result};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use railstore_device::{ReadRange, StoreMode};
use railstore_rails::{Rails, Role};
use railstore_redundancy::Manager;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::*;

// ---------------------------------------------------------------------------------------------
// Measurement

pub(super) fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Bucket {
    pub(super) reads: u64,
    pub(super) read_bytes: u64,
    pub(super) writes: u64,
    pub(super) write_bytes: u64,
}

/// What the streams record, shared.
pub(super) struct Tally {
    pub(super) read: Histogram<u64>,
    pub(super) write: Histogram<u64>,
    pub(super) reads_over_1ms: u64,
    pub(super) reads_over_10ms: u64,
    pub(super) buckets: Vec<Bucket>,
}

impl Tally {
    pub(super) fn new(buckets: usize) -> Tally {
        Tally {
            read: hist(),
            write: hist(),
            reads_over_1ms: 0,
            reads_over_10ms: 0,
            buckets: vec![Bucket::default(); buckets],
        }
    }
}

/// What every stream shares in one mode.
pub(super) struct Ctx {
    pub(super) plan: Plan,
    pub(super) manager: Manager,
    pub(super) start: Instant,
    pub(super) deadline: Instant,
    pub(super) stop: AtomicBool,
    pub(super) reads_dispatched: AtomicU64,
    pub(super) writes_dispatched: AtomicU64,
    pub(super) gate: Notify,
    pub(super) tally: Mutex<Tally>,
    pub(super) writes: Mutex<WriteOrder>,
    pub(super) rails: Arc<Rails>,
    /// One device of each colour (index = colour).
    pub(super) colour_device: Vec<usize>,
    /// erails-decode: the read set's keys by rotation (shard 0's colour).
    pub(super) by_rotation: Vec<Vec<u64>>,
    /// erails-decode: the modelled decoding cores.
    pub(super) decoders: Semaphore,
    /// erails-decode: reads whose shards in the window leave out a data shard (so the manager
    /// must decode), and the simulated ns of decoding charged for them.
    pub(super) decoding_reads: AtomicU64,
    pub(super) charged_ns: AtomicU64,
    /// Trace replay: reads and writes arrived but not completed.
    pub(super) trace_pending: [AtomicU64; 2],
}

/// The order of overwrites: passes over the write set, each a fresh shuffle (so the SSDs see
/// scattered overwrites), in which the last `recent` keys of a pass stay out of the first
/// `recent` places of the next. Two writes of a key are then always more than `recent` writes
/// apart; with `recent` at least the writes that fill one device's buffer, a buffered piece is
/// flushed before its key comes round again: no write coalesces in a buffer (the worst case).
pub(super) struct WriteOrder {
    pub(super) keys: Vec<u64>,
    pub(super) next: usize,
    pub(super) recent: usize,
    pub(super) rng: ChaCha8Rng,
}

impl WriteOrder {
    pub(super) fn new(first: u64, end: u64, recent: usize, seed: u64) -> WriteOrder {
        let keys: Vec<u64> = (first..end).collect();
        WriteOrder {
            recent: recent.min(keys.len() / 2),
            keys,
            next: usize::MAX,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5752_4954),
        }
    }

    pub(super) fn next(&mut self) -> u64 {
        let n = self.keys.len();
        if self.next >= n {
            use rand::seq::SliceRandom;
            let first_pass = self.next == usize::MAX;
            let last: std::collections::HashSet<u64> =
                self.keys[n - self.recent..].iter().copied().collect();
            self.keys.shuffle(&mut self.rng);
            if !first_pass {
                for i in 0..self.recent {
                    while last.contains(&self.keys[i]) {
                        let j = self.rng.gen_range(self.recent..n);
                        if !last.contains(&self.keys[j]) {
                            self.keys.swap(i, j);
                        }
                    }
                }
            }
            self.next = 0;
        }
        self.next += 1;
        self.keys[self.next - 1]
    }
}

impl Ctx {
    pub(super) fn record(&self, write: bool, t0: Instant, bytes: u64) {
        let now = Instant::now();
        let ns = self.plan.sim_ns(now - t0).max(1);
        let bucket = (self.plan.sim_ns(now.saturating_duration_since(self.start)) as f64
            / 1e9
            / BUCKET_S) as usize;
        let mut t = self.tally.lock().expect("tally lock");
        if write {
            t.write.saturating_record(ns);
        } else {
            t.read.saturating_record(ns);
            t.reads_over_1ms += (ns > 1_000_000) as u64;
            t.reads_over_10ms += (ns > 10_000_000) as u64;
        }
        if now <= self.deadline {
            if let Some(b) = t.buckets.get_mut(bucket) {
                if write {
                    b.writes += 1;
                    b.write_bytes += bytes;
                } else {
                    b.reads += 1;
                    b.read_bytes += bytes;
                }
            }
        }
    }

    pub(super) fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    /// The first colour of the read window now (the window is a run of colours, mod n).
    pub(super) fn window_start(&self) -> usize {
        let n = self.plan.colours;
        let reading: Vec<bool> = self
            .colour_device
            .iter()
            .map(|&d| self.rails.role(d) == Role::Reader)
            .collect();
        (0..n)
            .find(|&c| reading[c] && !reading[(c + n - 1) % n])
            .unwrap_or(0)
    }

    /// The next key to read, and for erails-decode the first shard index of the run of
    /// shards the window holds for it (0: the k data shards, no decoding).
    pub(super) fn pick_read(&self, rng: &mut ChaCha8Rng) -> (u64, Option<usize>) {
        let Some(variant) = self.plan.decode_variant else {
            return (rng.gen_range(0..self.plan.read_objects()), None);
        };
        let n = self.plan.colours;
        let w = self.window_start();
        let rotation = match variant {
            DecodeVariant::NoDecode => w,
            DecodeVariant::Decode => (w + rng.gen_range(1..n)) % n,
        };
        let keys = &self.by_rotation[rotation];
        // Both variants read about objects / n distinct keys at a time, spread over the whole
        // load order: a smaller hot set loads an SSD's dies less evenly, and keys loaded
        // together lie together on flash (the first keys of each rotation read 4-5 %
        // faster at k = 6), either of which would tilt the comparison.
        let i = match variant {
            DecodeVariant::NoDecode => rng.gen_range(0..keys.len()),
            DecodeVariant::Decode => {
                let hot = keys.len().div_ceil(n - 1);
                (rng.gen_range(0..hot) * (n - 1)).min(keys.len() - 1)
            }
        };
        // Shard i lives on colour (i + rotation) mod n, so the window's first colour w holds
        // shard (w - rotation) mod n and the next k - 1 colours the shards after it.
        (keys[i], Some((w + n - rotation) % n))
    }

    /// Holds a modelled decoding core for the decode's CPU time (erails-decode, virtual time).
    pub(super) async fn charge_decode(&self, first_shard: usize) {
        let Some(cost) = &self.plan.decode_cost else {
            return;
        };
        let ns = cost.decode_ns(first_shard);
        if ns == 0 {
            return;
        }
        let _core = self.decoders.acquire().await.expect("decoders never close");
        tokio::time::sleep(self.plan.dur(ns as f64 / 1e9)).await;
        self.charged_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

pub(super) fn object_key(i: u64) -> Vec<u8> {
    format!("obj{i:010}").into_bytes()
}

pub(super) async fn read_stream(ctx: Arc<Ctx>, s: usize) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(ctx.plan.seed.wrapping_mul(7919) ^ (s as u64) << 20);
    while !ctx.done() {
        let (i, first_shard) = ctx.pick_read(&mut rng);
        let key = object_key(i);
        ctx.reads_dispatched.fetch_add(1, Ordering::Relaxed);
        ctx.gate.notify_waiters();
        let t0 = Instant::now();
        let (v, _) = ctx
            .manager
            .get(&key, ReadRange::ALL)
            .await
            .with_context(|| format!("reading {}", String::from_utf8_lossy(&key)))?;
        ensure!(
            v.len() == ctx.plan.request_bytes,
            "read {} B of {}, expected {}",
            v.len(),
            String::from_utf8_lossy(&key),
            ctx.plan.request_bytes
        );
        if let Some(first) = first_shard.filter(|&f| f != 0) {
            ctx.decoding_reads.fetch_add(1, Ordering::Relaxed);
            ctx.charge_decode(first).await;
        }
        ctx.record(false, t0, v.len() as u64);
        if Instant::now() == t0 {
            // Served without touching a device (write buffers hold every piece): costs no
            // simulated time, so pause a simulated microsecond rather than spin at one instant.
            tokio::time::sleep(ctx.plan.dur(1e-6)).await;
        }
        tokio::task::yield_now().await;
    }
    Ok(())
}

pub(super) async fn write_stream(ctx: Arc<Ctx>, s: usize) -> Result<()> {
    let mut rng =
        ChaCha8Rng::seed_from_u64(ctx.plan.seed.wrapping_mul(104_729) ^ (s as u64) << 24 ^ 1);
    let mut value = vec![0u8; ctx.plan.request_bytes];
    rng.fill(&mut value[..]);
    let mut n = 0u64;
    loop {
        if let Some(ratio) = ctx.plan.writes_per_read {
            // The dispatch ratio: at most `ratio` writes per read dispatched so far.
            loop {
                let wake = ctx.gate.notified();
                let reads = ctx.reads_dispatched.load(Ordering::Relaxed) as f64;
                let writes = ctx.writes_dispatched.load(Ordering::Relaxed) as f64;
                if ctx.done() || writes < reads * ratio {
                    break;
                }
                wake.await;
            }
        }
        if ctx.done() {
            return Ok(());
        }
        ctx.writes_dispatched.fetch_add(1, Ordering::Relaxed);
        let key = object_key(ctx.writes.lock().expect("write order").next());
        n += 1;
        let stamp = (s as u64) << 48 | n;
        let len = value.len().min(8);
        value[..len].copy_from_slice(&stamp.to_le_bytes()[..len]);
        let t0 = Instant::now();
        ctx.manager
            .put(&key, &value, StoreMode::Upsert, None)
            .await
            .with_context(|| format!("writing {}", String::from_utf8_lossy(&key)))?;
        ctx.record(true, t0, value.len() as u64);
        if Instant::now() == t0 {
            tokio::time::sleep(ctx.plan.dur(1e-6)).await;
        }
        tokio::task::yield_now().await;
    }
}

/// Runs `jobs` tasks over the ids 0..count, each doing `f(id)`.
pub(super) async fn for_each_id<F, Fut>(
    count: u64,
    jobs: usize,
    progress: &ProgressBar,
    f: F,
) -> Result<()>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..jobs.max(1) {
        let (f, next, progress) = (f.clone(), next.clone(), progress.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                f(i).await?;
                progress.inc(1);
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a load task panicked")??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrites_of_a_key_stay_more_than_recent_writes_apart() {
        let mut w = WriteOrder::new(100, 200, 40, 7);
        let mut last = std::collections::HashMap::new();
        for i in 0..5000usize {
            let k = w.next();
            assert!((100..200).contains(&k));
            if let Some(prev) = last.insert(k, i) {
                assert!(i - prev > 40, "key {k} at {prev} and {i}");
            }
        }
        assert_eq!(last.len(), 100);
    }
}
