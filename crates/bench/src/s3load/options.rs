//! What `railstore bench s3` is asked to do: workloads, arguments, the plan.

use super::*;

/// What the clients do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// New objects.
    Put,
    /// Reads of objects stored beforehand.
    Get,
    /// Reads (`--get-ratio`) and overwrites of objects stored beforehand.
    Mixed,
}

impl Workload {
    pub(super) fn name(self) -> &'static str {
        match self {
            Workload::Put => "put",
            Workload::Get => "get",
            Workload::Mixed => "mixed",
        }
    }

    pub(super) fn needs_objects(self) -> bool {
        self != Workload::Put
    }
}

/// The load of `railstore bench s3` (the binary adds where the server and store come from).
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Workloads, run in this order, a comma list: `put` (each operation a new object), `get`
    /// (random reads of `--objects` objects stored first, unmeasured), `mixed` (`--get-ratio`
    /// reads, the rest overwrites of those objects).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "put,get")]
    pub workload: Vec<Workload>,
    /// Object size (`4096`, `4KiB`, `1MiB`), or a range `MIN-MAX` (`1KiB-8MiB`): each object's
    /// size then drawn log-uniformly from it, fixed per object by the seed (an overwrite keeps
    /// its object's size, so every GET knows the length to expect).
    #[arg(long, default_value = "1MiB")]
    pub size: String,
    /// Concurrent clients (tasks), each with its own connection.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Measured time per run (`10s`, `500ms`, `2m`; a bare number is seconds). Default 10 s
    /// (2 s with `--quick`).
    #[arg(long, conflicts_with = "ops")]
    pub duration: Option<String>,
    /// Measured operations per run, instead of a duration.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Unmeasured time at the start of each run. Default 1 s (none with `--quick`).
    #[arg(long)]
    pub warmup: Option<String>,
    /// Objects stored before `get` and `mixed` runs. Default 1000 (100 with `--quick`).
    #[arg(long)]
    pub objects: Option<u64>,
    /// Share of reads in `mixed`.
    #[arg(long, default_value_t = 0.7)]
    pub get_ratio: f64,
    /// Runs of each workload per target, S3 and store alternating (on a busy machine the
    /// comparison then sees the same disturbances on both sides).
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Bucket (created if missing).
    #[arg(long, default_value = "railstore-bench")]
    pub bucket: String,
    /// Skip the in-process store baseline.
    #[arg(long)]
    pub no_baseline: bool,
    /// Leave the objects on an external endpoint (by default they are deleted at the end).
    #[arg(long)]
    pub keep_objects: bool,
    /// Random seed (which objects are read, which operations a mixed run does).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A short run for tests and smoke checks: 2 s per run, no warmup, 100 objects.
    #[arg(long)]
    pub quick: bool,
    /// Where the report goes (`--out` also gets series.csv).
    #[command(flatten)]
    pub output: OutputArgs,
}

impl Default for LoadArgs {
    fn default() -> Self {
        LoadArgs {
            workload: vec![Workload::Put, Workload::Get],
            size: "1MiB".into(),
            clients: 16,
            duration: None,
            ops: None,
            warmup: None,
            objects: None,
            get_ratio: 0.7,
            rounds: 1,
            bucket: "railstore-bench".into(),
            no_baseline: false,
            keep_objects: false,
            seed: 1,
            quick: false,
            output: OutputArgs {
                quiet: true,
                ..OutputArgs::default()
            },
        }
    }
}

/// Parses `10s`, `1.5s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<f64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a duration like 10s, 500ms or 2m"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => bail!("unknown duration unit {other:?} in {s:?} (use ms, s, m or h)"),
    };
    let secs = v * mult;
    ensure!(
        secs.is_finite() && secs >= 0.0,
        "{s:?} is not a usable duration"
    );
    Ok(secs)
}

/// `--size`: one size, or `MIN-MAX`.
fn parse_size_range(s: &str) -> Result<(u64, u64)> {
    let (min, max) = match s.split_once('-') {
        Some((a, b)) => (parse_bytes(a.trim())?, parse_bytes(b.trim())?),
        None => {
            let n = parse_bytes(s)?;
            (n, n)
        }
    };
    ensure!(min > 0, "--size must be positive");
    ensure!(
        min <= max,
        "--size {s:?}: the range's minimum is above its maximum"
    );
    ensure!(
        min == max || max <= 1 << 30,
        "--size {s:?}: a range up to 1 GiB (one buffer holds the largest object)"
    );
    Ok((min, max))
}

/// The options resolved: what every run does.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Workloads in order.
    pub workloads: Vec<Workload>,
    /// Object size in bytes (the smallest, with a range).
    pub size_bytes: u64,
    /// The largest object size in bytes (`size_bytes` unless a range was given).
    pub size_max_bytes: u64,
    /// Object size as written (`1MiB`, `1KiB-8MiB`).
    pub size: String,
    /// Client tasks.
    pub clients: usize,
    /// Measured seconds per run (unless `ops`).
    pub duration_s: Option<f64>,
    /// Measured operations per run.
    pub ops: Option<u64>,
    /// Unmeasured seconds at the start of each run.
    pub warmup_s: f64,
    /// Objects stored before `get` and `mixed`.
    pub objects: u64,
    /// Share of reads in `mixed`.
    pub get_ratio: f64,
    /// Runs of each workload per target.
    pub rounds: usize,
    /// Bucket.
    pub bucket: String,
    /// Key prefix of this invocation (random, so runs against one endpoint never collide).
    pub prefix: String,
    /// Seed.
    pub seed: u64,
}

impl Plan {
    /// The size of object `id`: `size_bytes`, or with a range a log-uniform draw fixed by the
    /// seed and the id.
    pub fn size_of(&self, id: u64) -> u64 {
        if self.size_max_bytes <= self.size_bytes {
            return self.size_bytes;
        }
        // splitmix64 of (seed, id): the same id has the same size in every run and client.
        let mut z = self.seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let u = (z >> 11) as f64 / (1u64 << 53) as f64;
        let (lo, hi) = (
            (self.size_bytes as f64).ln(),
            (self.size_max_bytes as f64).ln(),
        );
        ((lo + u * (hi - lo)).exp().round() as u64).clamp(self.size_bytes, self.size_max_bytes)
    }
}

impl LoadArgs {
    /// Checks and resolves the options.
    pub fn plan(&self) -> Result<Plan> {
        ensure!(!self.workload.is_empty(), "no workload given");
        ensure!(self.clients > 0, "--clients must be at least 1");
        ensure!(self.rounds > 0, "--rounds must be at least 1");
        let (size_bytes, size_max_bytes) = parse_size_range(&self.size)?;
        ensure!(
            (0.0..=1.0).contains(&self.get_ratio),
            "--get-ratio must be between 0 and 1"
        );
        let duration_s = match (&self.duration, self.ops) {
            (Some(d), _) => Some(parse_duration(d)?),
            (None, Some(_)) => None,
            (None, None) => Some(if self.quick { 2.0 } else { 10.0 }),
        };
        if let Some(d) = duration_s {
            ensure!(d > 0.0, "--duration must be positive");
        }
        if let Some(n) = self.ops {
            ensure!(n > 0, "--ops must be positive");
        }
        let warmup_s = match &self.warmup {
            Some(w) => parse_duration(w)?,
            None if self.quick => 0.0,
            None => 1.0,
        };
        let objects = self.objects.unwrap_or(if self.quick { 100 } else { 1000 });
        ensure!(
            objects > 0 || !self.workload.iter().any(|w| w.needs_objects()),
            "--objects must be positive for get and mixed"
        );
        railstore_store::check_bucket_name(&self.bucket)
            .map_err(|e| anyhow::anyhow!("--bucket: {e}"))?;
        Ok(Plan {
            workloads: self.workload.clone(),
            size_bytes,
            size_max_bytes,
            size: if size_max_bytes > size_bytes {
                format!(
                    "{}-{}",
                    human_bytes(size_bytes),
                    human_bytes(size_max_bytes)
                )
            } else {
                human_bytes(size_bytes)
            },
            clients: self.clients,
            duration_s,
            ops: self.ops,
            warmup_s,
            objects,
            get_ratio: self.get_ratio,
            rounds: self.rounds,
            bucket: self.bucket.clone(),
            prefix: format!("s3bench-{:08x}", rand::thread_rng().gen::<u32>()),
            seed: self.seed,
        })
    }
}
