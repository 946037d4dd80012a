//! The load: client tasks issuing the phase's operations against raw devices or a manager,
//! timed into histograms.

use super::*;

/// Where user operations go.
pub(super) enum Target {
    /// Raw devices; a key lives on the device its hash picks.
    Raw(Vec<Arc<dyn Device>>),
    /// The reliability manager.
    Kvmd(Manager),
}

impl Target {
    pub(super) fn raw_device(devs: &[Arc<dyn Device>], key: &[u8]) -> usize {
        let mut h = FastHasher::default();
        h.write(key);
        ((h.finish() as u128 * devs.len() as u128) >> 64) as usize
    }

    pub(super) async fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        match self {
            Target::Raw(d) => {
                d[Self::raw_device(d, key)]
                    .store(key, value, StoreMode::Upsert)
                    .await?
            }
            Target::Kvmd(m) => m.put(key, value, StoreMode::Upsert, None).await?,
        }
        Ok(())
    }

    pub(super) async fn get(&self, key: &[u8]) -> Result<Vec<u8>> {
        Ok(match self {
            Target::Raw(d) => d[Self::raw_device(d, key)]
                .retrieve(key, ReadRange::ALL)
                .await?
                .value
                .into(),
            Target::Kvmd(m) => m.get(key, ReadRange::ALL).await?.0,
        })
    }

    pub(super) async fn delete(&self, key: &[u8]) -> Result<bool> {
        Ok(match self {
            Target::Raw(d) => d[Self::raw_device(d, key)].delete(key, false).await?,
            Target::Kvmd(m) => m.delete(key).await?,
        })
    }

    pub(super) async fn sync(&self) -> Result<()> {
        match self {
            Target::Raw(d) => {
                for dev in d {
                    dev.sync().await?;
                }
            }
            Target::Kvmd(m) => m.sync().await?,
        }
        Ok(())
    }

    pub(super) fn counters(&self) -> (u64, u64) {
        match self {
            Target::Raw(_) => (0, 0),
            Target::Kvmd(m) => {
                let c = &m.devices().counters;
                (
                    c.decodes.load(Ordering::Relaxed),
                    c.repairs.load(Ordering::Relaxed),
                )
            }
        }
    }
}

/// What every client task shares.
pub(super) struct Ctx {
    pub(super) target: Target,
    pub(super) sizes: Sizes,
    pub(super) seed: u64,
    /// tokio time per reported time (sim in virtual time).
    pub(super) dilation: u64,
}

pub(super) fn key_of(id: u64) -> [u8; 10] {
    let mut k = [0u8; 10];
    k[..2].copy_from_slice(b"kv");
    k[2..].copy_from_slice(&id.to_be_bytes());
    k
}

/// One client task's own keys: task t of T owns ids t, t + T, t + 2T, ... so tasks never race
/// on a key and each knows which of its keys exist.
pub(super) struct Worker {
    pub(super) step: u64,
    pub(super) live: Vec<u64>,
    pub(super) next_new: u64,
    pub(super) stamp: u64,
    pub(super) rng: ChaCha8Rng,
    pub(super) buf: Vec<u8>,
}

impl Worker {
    pub(super) fn new(t: usize, tasks: usize, seed: u64, max_value: usize) -> Worker {
        let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1_000_003) ^ t as u64);
        let mut buf = vec![0u8; max_value];
        rng.fill(&mut buf[..]);
        Worker {
            step: tasks as u64,
            live: Vec::new(),
            next_new: t as u64,
            stamp: 0,
            rng,
            buf,
        }
    }

    /// The value of `id`: its size, with the id and a write counter in its first 16 bytes.
    pub(super) fn value(&mut self, ctx: &Ctx, id: u64) -> usize {
        let len = ctx.sizes.of(id, ctx.seed);
        self.stamp += 1;
        let mut stamp = [0u8; 16];
        stamp[..8].copy_from_slice(&id.to_le_bytes());
        stamp[8..].copy_from_slice(&self.stamp.to_le_bytes());
        let n = len.min(16);
        self.buf[..n].copy_from_slice(&stamp[..n]);
        len
    }

    pub(super) async fn one(&mut self, ctx: &Ctx, op: usize, tally: &mut Tally) -> Result<()> {
        match op {
            READ => {
                let id = self.live[self.rng.gen_range(0..self.live.len())];
                let v = ctx
                    .target
                    .get(&key_of(id))
                    .await
                    .with_context(|| format!("reading object {id}"))?;
                let want = ctx.sizes.of(id, ctx.seed);
                let n = want.min(8);
                ensure!(
                    v.len() == want && v[..n] == id.to_le_bytes()[..n],
                    "object {id}: read {} B that are not what was written ({want} B)",
                    v.len()
                );
                tally.user_read += v.len() as u64;
            }
            INSERT | UPDATE => {
                let id = if op == INSERT {
                    let id = self.next_new;
                    self.next_new += self.step;
                    id
                } else {
                    self.live[self.rng.gen_range(0..self.live.len())]
                };
                let len = self.value(ctx, id);
                ctx.target
                    .put(&key_of(id), &self.buf[..len])
                    .await
                    .with_context(|| format!("writing object {id}"))?;
                if op == INSERT {
                    self.live.push(id);
                }
                tally.user_written += len as u64;
            }
            _ => {
                let i = self.rng.gen_range(0..self.live.len());
                let id = self.live.swap_remove(i);
                let existed = ctx
                    .target
                    .delete(&key_of(id))
                    .await
                    .with_context(|| format!("deleting object {id}"))?;
                ensure!(existed, "object {id} was missing when deleted");
            }
        }
        Ok(())
    }

    pub(super) async fn drive(
        mut self,
        ctx: Arc<Ctx>,
        plan: Plan,
        issued: Arc<AtomicU64>,
        stop: Arc<AtomicBool>,
        deadline: Option<tokio::time::Instant>,
        bar: ProgressBar,
    ) -> Result<(Worker, Tally)> {
        let mut tally = Tally::new();
        let mut since_tick = 0u64;
        loop {
            let op = match &plan {
                Plan::Load { objects } => {
                    if self.next_new >= *objects {
                        break;
                    }
                    INSERT
                }
                Plan::Run { mix, ops_max } => {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let op = match mix.pick(&mut self.rng) {
                        // No key left to read, update or delete: insert one if the mix
                        // inserts at all, else this task is done (a delete phase ends when
                        // everything is deleted).
                        op if op != INSERT && self.live.is_empty() => {
                            if mix.weights[INSERT] == 0 {
                                break;
                            }
                            INSERT
                        }
                        op => op,
                    };
                    if issued.fetch_add(1, Ordering::Relaxed) >= *ops_max {
                        break;
                    }
                    op
                }
            };
            let t0 = tokio::time::Instant::now();
            self.one(&ctx, op, &mut tally).await?;
            let now = tokio::time::Instant::now();
            let ns = ((now - t0).as_nanos() as u64 / ctx.dilation).max(1);
            tally.hist[op].saturating_record(ns);
            since_tick += 1;
            if since_tick == 64 {
                bar.inc(since_tick);
                since_tick = 0;
            }
            if deadline.is_some_and(|d| now >= d) {
                stop.store(true, Ordering::Relaxed);
            }
        }
        bar.inc(since_tick);
        Ok((self, tally))
    }
}

#[derive(Clone)]
pub(super) enum Plan {
    /// Insert ids below `objects`.
    Load { objects: u64 },
    /// The mix until `ops_max` operations were issued or the deadline passed.
    Run { mix: Mix, ops_max: u64 },
}

pub(super) fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

/// What the client tasks did in one phase.
pub(super) struct Tally {
    pub(super) hist: [Histogram<u64>; 4],
    pub(super) user_written: u64,
    pub(super) user_read: u64,
}

impl Tally {
    pub(super) fn new() -> Tally {
        Tally {
            hist: [hist(), hist(), hist(), hist()],
            user_written: 0,
            user_read: 0,
        }
    }

    pub(super) fn add(&mut self, o: &Tally) {
        for (a, b) in self.hist.iter_mut().zip(&o.hist) {
            a.add(b).ok();
        }
        self.user_written += o.user_written;
        self.user_read += o.user_read;
    }

    pub(super) fn all(&self) -> Histogram<u64> {
        let mut h = hist();
        for x in &self.hist {
            h.add(x).ok();
        }
        h
    }
}

pub(super) fn percentiles(h: &Histogram<u64>) -> Option<Percentiles> {
    if h.is_empty() {
        return None;
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    Some(Percentiles {
        p50_us: us(h.value_at_quantile(0.5)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        p9999_us: us(h.value_at_quantile(0.9999)),
        max_us: us(h.max()),
        mean_us: h.mean() / 1000.0,
    })
}

/// Runs one phase with every worker; returns the workers (their keys), the tally and the
/// elapsed seconds (the closing sync of a phase that wrote included).
pub(super) async fn run_phase(
    ctx: &Arc<Ctx>,
    workers: Vec<Worker>,
    plan: Plan,
    duration_s: Option<f64>,
    bar: &ProgressBar,
) -> Result<(Vec<Worker>, Tally, f64)> {
    let issued = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = tokio::time::Instant::now();
    let deadline =
        duration_s.map(|s| start + Duration::from_secs_f64(s.min(1e7) * ctx.dilation as f64));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, w) in workers.into_iter().enumerate() {
        let fut = w.drive(
            ctx.clone(),
            plan.clone(),
            issued.clone(),
            stop.clone(),
            deadline,
            bar.clone(),
        );
        tasks.spawn(async move { fut.await.map(|(w, t)| (i, w, t)) });
    }
    let mut back = Vec::new();
    let mut tally = Tally::new();
    while let Some(r) = tasks.join_next().await {
        let (i, w, t) = r.context("benchmark task panicked")??;
        tally.add(&t);
        back.push((i, w));
    }
    back.sort_by_key(|(i, _)| *i);
    if tally.hist[INSERT].len() + tally.hist[UPDATE].len() + tally.hist[DELETE].len() > 0 {
        // Writes count once durable, as fio's end_fsync has them.
        ctx.target.sync().await?;
    }
    let elapsed = start.elapsed().as_secs_f64() / ctx.dilation as f64;
    Ok((back.into_iter().map(|(_, w)| w).collect(), tally, elapsed))
}

pub(super) fn build_runtime(backend: Backend, threads: usize) -> Result<tokio::runtime::Runtime> {
    Ok(if backend == Backend::Sim {
        virtual_time_runtime()?
    } else if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    })
}
