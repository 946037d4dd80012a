//! `railstore bench rebuild`: a failed device rebuilt onto a fresh one, timed against a
//! RAID-style full copy (KVMD §4.3, Fig. 12).

use super::*;

/// Options of `railstore bench rebuild`.
#[derive(Debug, Clone, clap::Args)]
pub struct RebuildBenchArgs {
    /// Mechanisms to rebuild, a comma list (anything `--mechanism` of `bench kv` takes except
    /// `none` and `hash`, which keep no redundancy).
    #[arg(long, value_delimiter = ',', default_value = "rep3,pack4+2,split4+2")]
    pub mechanism: Vec<String>,
    /// Manager configuration (TOML) for `--mechanism hybrid`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Device backend.
    #[arg(long, value_enum, default_value = "file")]
    pub backend: Backend,
    /// Devices in the array.
    #[arg(long, default_value_t = 6)]
    pub devices: usize,
    /// Folder for the file devices; a temporary folder when not given.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Objects written before device 0 fails (a second run uses half as many).
    #[arg(long, default_value_t = 20_000)]
    pub objects: u64,
    /// Bytes per value.
    #[arg(long, default_value = "4KiB")]
    pub value_size: String,
    /// Mixed value sizes with weights (as in `bench kv`).
    #[arg(long)]
    pub value_mix: Option<String>,
    /// Capacity of each device; the RAID-style baseline rewrites this much.
    #[arg(long, default_value = "1GiB")]
    pub device_capacity: String,
    /// Objects or sets the rebuild repairs at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// tokio worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Writes in flight while loading.
    #[arg(long, default_value_t = 32)]
    pub qd: usize,
    /// How long packing waits for k objects (ms).
    #[arg(long)]
    pub pack_wait_ms: Option<f64>,
    /// Buffered I/O instead of O_DIRECT for `file` (the devices and the baseline copy).
    #[arg(long)]
    pub buffered: bool,
    /// Keep the device folders.
    #[arg(long)]
    pub keep: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A small run for tests: at most 1000 objects, devices of at most 32 MiB.
    #[arg(long)]
    pub quick: bool,
    /// Where the rows go: `--json` is their JSON array.
    #[command(flatten)]
    pub output: OutputArgs,
}

impl Default for RebuildBenchArgs {
    fn default() -> Self {
        RebuildBenchArgs {
            mechanism: vec!["rep3".into(), "pack4+2".into(), "split4+2".into()],
            config: None,
            backend: Backend::File,
            devices: 6,
            path: None,
            objects: 20_000,
            value_size: "4KiB".into(),
            value_mix: None,
            device_capacity: "1GiB".into(),
            concurrency: 16,
            threads: 2,
            qd: 32,
            pack_wait_ms: None,
            buffered: false,
            keep: false,
            seed: 1,
            quick: false,
            output: OutputArgs {
                quiet: true,
                ..OutputArgs::default()
            },
        }
    }
}

/// One rebuild measurement.
#[derive(Debug, Clone, Serialize)]
pub struct RebuildRow {
    /// Mechanism (or `hybrid`).
    pub mechanism: String,
    /// Device backend.
    pub backend: Backend,
    /// Devices in the array.
    pub devices: usize,
    /// Objects stored before the failure.
    pub objects: u64,
    /// User value bytes stored.
    pub user_bytes: u64,
    /// Bytes the failed device held (its live keys, values and per-record metadata).
    pub live_bytes: u64,
    /// Keys the failed device held.
    pub keys_before: u64,
    /// Keys on the replacement after the rebuild (equal to `keys_before` when complete).
    pub keys_after: u64,
    /// Seconds from the start of the rebuild until the replacement is synced (virtual for sim).
    pub rebuild_s: f64,
    /// Bytes stored on the replacement (keys and values) per second, MB (10^6 B)/s.
    pub rebuild_mb_per_s: f64,
    /// Key and value bytes stored on the replacement.
    pub replacement_bytes: u64,
    /// Value bytes read from the surviving devices during the rebuild.
    pub survivor_bytes_read: u64,
    /// Objects the rebuild checked.
    pub objects_checked: u64,
    /// Objects that needed a piece rewritten.
    pub objects_repaired: u64,
    /// Packing sets checked.
    pub sets_checked: u64,
    /// Packing sets with a piece rewritten.
    pub sets_repaired: u64,
    /// Segments rebuilt by decoding.
    pub decodes: u64,
    /// Process CPU seconds during the rebuild.
    pub cpu_s: f64,
    /// Capacity of each device, bytes.
    pub device_capacity: u64,
    /// Seconds the RAID-style baseline took to rewrite a whole device's capacity.
    pub full_copy_s: f64,
    /// Its rate, MB (10^6 B)/s.
    pub full_copy_mb_per_s: f64,
    /// What the baseline measured.
    pub full_copy_method: String,
    /// full_copy_s / rebuild_s.
    pub speedup_vs_full_copy: f64,
}

/// The RAID-style baseline: what rebuilding a device costs when every byte of its capacity
/// is regenerated, whatever it holds.
#[derive(Debug, Clone)]
pub(super) struct FullCopy {
    pub(super) bytes: u64,
    pub(super) seconds: f64,
    pub(super) method: String,
}

/// Copies a file of `capacity` bytes to a new file on the same file system, 1 MiB at a time
/// with O_DIRECT (or buffered, with the source's cached pages dropped first), and syncs it: a
/// RAID-1 resync of one device, which is the least a RAID rebuild does (RAID-5/6 also read k
/// survivors and decode). Preparing the source is not timed.
pub(super) fn full_copy_file(
    dir: &Path,
    capacity: u64,
    direct: bool,
    b: &ProgressBar,
) -> Result<FullCopy> {
    const CHUNK: usize = 1 << 20;
    let capacity = capacity.div_ceil(CHUNK as u64) * CHUNK as u64;
    std::fs::create_dir_all(dir)?;
    let src = dir.join("raid-baseline-source");
    let dst = dir.join("raid-baseline-replacement");
    let result = (|| -> Result<FullCopy> {
        let mut buf = AlignedBuf::new(CHUNK);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        rng.fill(&mut buf[..]);
        {
            let mut f = std::fs::File::create(&src)
                .with_context(|| format!("creating {}", src.display()))?;
            for _ in 0..capacity / CHUNK as u64 {
                f.write_all(&buf)?;
            }
            f.sync_all()?;
            drop_cache(&f);
        }
        let open = |direct: bool| -> std::io::Result<(std::fs::File, std::fs::File)> {
            use std::os::unix::fs::OpenOptionsExt;
            let flags = if direct { libc::O_DIRECT } else { 0 };
            let r = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(&src)?;
            let w = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(flags)
                .open(&dst)?;
            Ok((r, w))
        };
        let copy = |direct: bool, buf: &mut AlignedBuf| -> std::io::Result<f64> {
            let (mut r, mut w) = open(direct)?;
            let t = std::time::Instant::now();
            loop {
                let mut n = 0;
                while n < CHUNK {
                    match r.read(&mut buf[n..])? {
                        0 => break,
                        k => n += k,
                    }
                }
                if n == 0 {
                    break;
                }
                w.write_all(&buf[..n])?;
                b.inc(n as u64);
                if n < CHUNK {
                    break;
                }
            }
            w.sync_all()?;
            Ok(t.elapsed().as_secs_f64())
        };
        let (seconds, method) = match direct.then(|| copy(true, &mut buf)) {
            Some(Ok(s)) => (
                s,
                "copy of a device-sized file with O_DIRECT, 1 MiB at a time, synced",
            ),
            _ => {
                b.set_position(0);
                (
                    copy(false, &mut buf)?,
                    "copy of a device-sized file, buffered (source pages dropped first), 1 MiB at a time, synced",
                )
            }
        };
        Ok(FullCopy {
            bytes: capacity,
            seconds,
            method: method.into(),
        })
    })();
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&dst);
    result
}

pub(super) fn drop_cache(f: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise only advises the kernel about a valid, open descriptor.
    unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// For `mem` and `sim`: stores `capacity` bytes as 1 MiB values (8 in flight) on a fresh
/// device of the same backend, in its own clock: the replacement's side of a RAID rebuild.
pub(super) async fn full_copy_device(
    spec: &DevSpec,
    capacity: u64,
    dilation: u64,
    b: &ProgressBar,
) -> Result<FullCopy> {
    const CHUNK: usize = 1 << 20;
    let chunks = capacity.div_ceil(CHUNK as u64);
    // Room for the keys and per-entry metadata on top of the data.
    let spec = DevSpec {
        capacity_bytes: chunks * (CHUNK as u64 + 4096),
        sim_logical_bytes: chunks * (CHUNK as u64 + 4096),
        ..spec.clone()
    };
    let dev = spec.build(None)?.0;
    let next = Arc::new(AtomicU64::new(0));
    let value: Arc<[u8]> = {
        let mut v = vec![0u8; CHUNK];
        ChaCha8Rng::seed_from_u64(7).fill(&mut v[..]);
        v.into()
    };
    let t = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (dev, next, value, b) = (dev.clone(), next.clone(), value.clone(), b.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= chunks {
                    return Ok::<(), anyhow::Error>(());
                }
                dev.store(&i.to_be_bytes(), &value, StoreMode::Upsert)
                    .await?;
                b.inc(CHUNK as u64);
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("copy task panicked")??;
    }
    dev.sync().await?;
    Ok(FullCopy {
        bytes: chunks * CHUNK as u64,
        seconds: t.elapsed().as_secs_f64() / dilation as f64,
        method: format!(
            "{} MiB stored as 1 MiB values on a fresh {} device, 8 in flight (the write side only)",
            chunks,
            backend_name(spec.backend)
        ),
    })
}

/// Runs `railstore bench rebuild` and returns its rows without printing anything but progress.
pub fn measure_rebuild(args: &RebuildBenchArgs) -> Result<Vec<RebuildRow>> {
    rebuild_rows(args, false)
}

pub(super) fn rebuild_rows(args: &RebuildBenchArgs, print: bool) -> Result<Vec<RebuildRow>> {
    ensure!(args.objects >= 2, "--objects must be at least 2");
    let dilation = if args.backend == Backend::Sim {
        VIRTUAL_TIME_DILATION
    } else {
        1
    };
    let schemes = schemes(
        &args.mechanism,
        args.config.as_deref(),
        args.pack_wait_ms,
        args.devices,
        dilation,
    )?;
    for s in &schemes {
        let unprotected = match &s.config {
            None => true,
            Some(c) => c.policy.mechanisms().iter().any(|m| m.tolerance() == 0),
        };
        ensure!(
            !unprotected,
            "{}: a mechanism without redundancy cannot be rebuilt",
            s.name
        );
    }
    let sizes = Sizes::parse(&args.value_size, args.value_mix.as_deref())?;
    let mut objects = args.objects;
    let mut capacity = parse_bytes(&args.device_capacity)?;
    if args.quick {
        objects = objects.min(1000);
        capacity = capacity.min(32 << 20);
    }
    let spec = DevSpec {
        backend: args.backend,
        value_bytes_max: sizes.max() + 4096,
        capacity_bytes: capacity,
        queue_depth_max: (args.qd * 2).max(64),
        buffered: args.buffered,
        sim_logical_bytes: capacity,
    };
    let rt = build_runtime(args.backend, args.threads)?;
    let place = Place::new(args.backend, args.path.as_deref(), "rebuild")?;
    let result = (|| -> Result<Vec<RebuildRow>> {
        if print {
            args.output.say(&format!(
                "rebuild bench: {} devices ({}), {} and {} objects of {}, device capacity {}",
                args.devices,
                match args.backend {
                    Backend::Sim => "sim, virtual time",
                    b => backend_name(b),
                },
                objects,
                objects / 2,
                sizes.text,
                human_bytes(capacity)
            ));
        }
        let b = bar(args.output.quiet, Some(capacity), "full-device copy");
        let copy = match place.folder("raid-baseline") {
            Some(dir) if args.backend == Backend::File => {
                let r = full_copy_file(&dir, capacity, !args.buffered, &b);
                let _ = std::fs::remove_dir_all(&dir);
                r?
            }
            _ => rt.block_on(full_copy_device(&spec, capacity, dilation, &b))?,
        };
        b.finish_and_clear();
        if print {
            args.output.say(&format!(
                "RAID-style baseline: {} in {:.2} s ({:.0} MB/s): {}",
                human_bytes(copy.bytes),
                copy.seconds,
                copy.bytes as f64 / copy.seconds / 1e6,
                copy.method
            ));
            args.output.say(&rebuild_header());
        }
        let mut rows = Vec::new();
        for (n, scheme) in schemes.iter().enumerate() {
            for count in [objects, objects / 2] {
                let folder = place.folder(&format!("rebuild-{n}-{}-{count}", scheme.name));
                let array = Array::build(&spec, args.devices, folder.clone())?;
                let r = rt.block_on(rebuild_once(
                    args,
                    &spec,
                    scheme,
                    &sizes,
                    count,
                    dilation,
                    array,
                    folder.as_deref(),
                    &copy,
                ));
                let (row, array) = r.with_context(|| format!("mechanism {}", scheme.name))?;
                array.remove(args.keep);
                if print {
                    args.output.say(&rebuild_line(&row));
                }
                rows.push(row);
            }
        }
        Ok(rows)
    })();
    drop(rt);
    place.finish(args.keep, &args.output);
    result
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn rebuild_once(
    args: &RebuildBenchArgs,
    spec: &DevSpec,
    scheme: &Scheme,
    sizes: &Sizes,
    objects: u64,
    dilation: u64,
    mut array: Array,
    folder: Option<&Path>,
    copy: &FullCopy,
) -> Result<(RebuildRow, Array)> {
    let config = scheme.config.clone().expect("checked: a manager scheme");
    let manager = open_manager(array.devices(), config).await?;
    let ctx = Arc::new(Ctx {
        target: Target::Kvmd(manager.clone()),
        sizes: sizes.clone(),
        seed: args.seed,
        dilation,
    });
    let tasks = args.qd.max(1);
    let workers: Vec<Worker> = (0..tasks)
        .map(|t| Worker::new(t, tasks, args.seed, sizes.max()))
        .collect();
    let b = bar(
        args.output.quiet,
        Some(objects),
        &format!("{} load", scheme.name),
    );
    let (_, tally, _) = run_phase(&ctx, workers, Plan::Load { objects }, None, &b)
        .await
        .context("loading (raise --device-capacity if a device is full)")?;
    b.finish_and_clear();
    drop(ctx);
    let failed = array.metered[0].info().await?;
    // Device 0 fails: nothing more reaches it, and it is dropped once replaced.
    manager.devices().mark_failed(0);
    let replacement_dir = folder.map(|f| f.join("dev0-replacement"));
    let (fresh, _) = spec.build(replacement_dir.as_deref())?;
    let fresh = Arc::new(MeteredDevice::new(fresh));
    array.metered[0] = fresh.clone();
    let survivors0 = DevTotals::of(&array.metered[1..]);
    let dec0 = manager.devices().counters.decodes.load(Ordering::Relaxed);
    let progress = Arc::new(RepairProgress::default());
    let b = bar(
        args.output.quiet,
        Some(0),
        &format!("{} rebuild", scheme.name),
    );
    let ticker = {
        let (p, b) = (progress.clone(), b.clone());
        tokio::spawn(async move {
            loop {
                b.set_length(p.items_total.load(Ordering::Relaxed));
                b.set_position(p.items_done.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100) * dilation as u32).await;
            }
        })
    };
    let use0 = Usage::now();
    let t = tokio::time::Instant::now();
    let report = manager
        .rebuild(
            0,
            fresh.clone(),
            RepairOptions {
                concurrency: args.concurrency.max(1),
                write_bytes_per_s_max: None,
            },
            progress.clone(),
        )
        .await;
    let synced = manager.sync().await;
    let rebuild_s = t.elapsed().as_secs_f64() / dilation as f64;
    let use1 = Usage::now();
    ticker.abort();
    b.finish_and_clear();
    let report = report?;
    synced?;
    ensure!(
        report.objects_lost.is_empty() && report.sets_lost == 0,
        "rebuild lost {} objects and {} sets",
        report.objects_lost.len(),
        report.sets_lost
    );
    let after = fresh.info().await?;
    let survivors = DevTotals::of(&array.metered[1..]).since(&survivors0);
    let replacement_bytes = fresh.stats(OpKind::Store).bytes_in;
    let decodes = manager.devices().counters.decodes.load(Ordering::Relaxed) - dec0;
    drop(manager);
    Ok((
        RebuildRow {
            mechanism: scheme.name.clone(),
            backend: args.backend,
            devices: args.devices,
            objects,
            user_bytes: tally.user_written,
            live_bytes: failed.live_bytes,
            keys_before: failed.key_count,
            keys_after: after.key_count,
            rebuild_s,
            rebuild_mb_per_s: replacement_bytes as f64 / rebuild_s.max(1e-9) / 1e6,
            replacement_bytes,
            survivor_bytes_read: survivors.bytes_read,
            objects_checked: report.objects,
            objects_repaired: report.objects_repaired,
            sets_checked: report.sets,
            sets_repaired: report.sets_repaired,
            decodes,
            cpu_s: use1.cpu_s - use0.cpu_s,
            device_capacity: spec.capacity_bytes,
            full_copy_s: copy.seconds,
            full_copy_mb_per_s: copy.bytes as f64 / copy.seconds.max(1e-9) / 1e6,
            full_copy_method: copy.method.clone(),
            speedup_vs_full_copy: copy.seconds / rebuild_s.max(1e-9),
        },
        array,
    ))
}

pub(super) fn rebuild_header() -> String {
    format!(
        "{:<10} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8}",
        "mechanism",
        "objects",
        "user MB",
        "live MB",
        "keys",
        "rebuild s",
        "MB/s",
        "copy s",
        "speedup"
    )
}

pub(super) fn rebuild_line(r: &RebuildRow) -> String {
    format!(
        "{:<10} {:>8} {:>9.1} {:>9.1} {:>8} {:>9.3} {:>9.1} {:>9.3} {:>7.1}x",
        r.mechanism,
        r.objects,
        r.user_bytes as f64 / 1e6,
        r.live_bytes as f64 / 1e6,
        r.keys_after,
        r.rebuild_s,
        r.rebuild_mb_per_s,
        r.full_copy_s,
        r.speedup_vs_full_copy
    )
}

/// The CSV form of the rebuild rows.
pub fn rebuild_csv(rows: &[RebuildRow]) -> String {
    let mut s = String::from(
        "mechanism,backend,devices,objects,user_bytes,live_bytes,keys_before,keys_after,\
         rebuild_s,rebuild_mb_per_s,replacement_bytes,survivor_bytes_read,objects_checked,\
         objects_repaired,sets_checked,sets_repaired,decodes,cpu_s,device_capacity,full_copy_s,\
         full_copy_mb_per_s,speedup_vs_full_copy\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.4},{:.2},{},{},{},{},{},{},{},{:.4},{},{:.4},{:.2},{:.2}",
            r.mechanism,
            backend_name(r.backend),
            r.devices,
            r.objects,
            r.user_bytes,
            r.live_bytes,
            r.keys_before,
            r.keys_after,
            r.rebuild_s,
            r.rebuild_mb_per_s,
            r.replacement_bytes,
            r.survivor_bytes_read,
            r.objects_checked,
            r.objects_repaired,
            r.sets_checked,
            r.sets_repaired,
            r.decodes,
            r.cpu_s,
            r.device_capacity,
            r.full_copy_s,
            r.full_copy_mb_per_s,
            r.speedup_vs_full_copy
        );
    }
    s
}

pub(super) fn rebuild_summary(args: &RebuildBenchArgs, rows: &[RebuildRow]) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## rebuild bench results\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(s, "- machine: {}", machine_description());
    if let Some(r) = rows.first() {
        let _ = writeln!(
            s,
            "- {} {} devices of {}; device 0 fails after the objects are written and is \
             rebuilt onto a fresh device with `Manager::rebuild` ({} objects or sets at once); \
             the time runs until the replacement is synced",
            r.devices,
            backend_name(r.backend),
            human_bytes(r.device_capacity),
            args.concurrency
        );
        let _ = writeln!(
            s,
            "- RAID-style baseline ({}): {} in {:.3} s ({:.0} MB/s)",
            r.full_copy_method,
            human_bytes(r.device_capacity),
            r.full_copy_s,
            r.full_copy_mb_per_s
        );
    }
    let _ = writeln!(
        s,
        "\n| mechanism | objects | user MB | live MB on failed device | keys before / after | rebuild s | MB/s | full copy s | speedup |\n\
         |---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.1} | {} / {} | {:.3} | {:.1} | {:.3} | {:.1}x |",
            r.mechanism,
            r.objects,
            r.user_bytes as f64 / 1e6,
            r.live_bytes as f64 / 1e6,
            r.keys_before,
            r.keys_after,
            r.rebuild_s,
            r.rebuild_mb_per_s,
            r.full_copy_s,
            r.speedup_vs_full_copy
        );
    }
    let _ = writeln!(
        s,
        "\nRebuild time with half the objects, as a fraction of the time with all of them \
         (1/2 when the time follows live data):\n"
    );
    let mut seen: Vec<&str> = Vec::new();
    for r in rows {
        if seen.contains(&r.mechanism.as_str()) {
            continue;
        }
        seen.push(&r.mechanism);
        let mine: Vec<&RebuildRow> = rows.iter().filter(|x| x.mechanism == r.mechanism).collect();
        if let (Some(full), Some(half)) = (
            mine.iter().max_by_key(|x| x.objects),
            mine.iter().min_by_key(|x| x.objects),
        ) {
            if full.objects > half.objects {
                let _ = writeln!(
                    s,
                    "- {}: {:.2} ({} → {} objects)",
                    r.mechanism,
                    half.rebuild_s / full.rebuild_s.max(1e-9),
                    full.objects,
                    half.objects
                );
            }
        }
    }
    s
}

pub(super) fn rebuild_plot(rows: &[RebuildRow], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut mechs: Vec<String> = Vec::new();
    let mut counts: Vec<u64> = Vec::new();
    for r in rows {
        if !mechs.contains(&r.mechanism) {
            mechs.push(r.mechanism.clone());
        }
        if !counts.contains(&r.objects) {
            counts.push(r.objects);
        }
    }
    let mut categories = mechs.clone();
    categories.push("full copy".into());
    let mut series: Vec<(String, Vec<f64>)> = counts
        .iter()
        .map(|&c| {
            let mut v: Vec<f64> = mechs
                .iter()
                .map(|m| {
                    rows.iter()
                        .find(|r| &r.mechanism == m && r.objects == c)
                        .map_or(0.0, |r| r.rebuild_s)
                })
                .collect();
            v.push(0.0);
            (format!("{c} objects"), v)
        })
        .collect();
    let mut copy = vec![0.0; mechs.len()];
    copy.push(rows.first().map_or(0.0, |r| r.full_copy_s));
    series.push((
        format!(
            "RAID-style copy of {}",
            human_bytes(rows.first().map_or(0, |r| r.device_capacity))
        ),
        copy,
    ));
    write_panels(
        dir,
        "rebuild_time",
        &[Panel {
            title: "Rebuild of one failed device: KVMD (live data) vs full-capacity copy".into(),
            y_label: "seconds".into(),
            categories,
            series,
            lollipop: None,
        }],
    )
}

/// Runs `railstore bench rebuild`: prints the baseline and one line per rebuild, writes `--json`
/// and `--out`.
pub fn run_rebuild(args: &RebuildBenchArgs) -> Result<()> {
    let rows = rebuild_rows(args, true)?;
    let json = serde_json::to_string_pretty(&rows)?;
    let files = [
        ("results.json", json.clone()),
        ("results.csv", rebuild_csv(&rows)),
        ("summary.md", rebuild_summary(args, &rows)),
    ];
    let written = args.output.write(&json, &files)?;
    args.output
        .plot_and_list(written, |out| rebuild_plot(&rows, out));
    Ok(())
}
