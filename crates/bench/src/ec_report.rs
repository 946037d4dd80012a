//! `railstore ec-bench`'s reports: the CSV, the Markdown summary (railstore's pick, its ratios
//! to ISA-L and klauspost, the k = m sweep, the offload section) and the plots (EC-Bench Figs
//! 2-6, eRails Figs 4-5).

use crate::ec::{machine_description, EcBenchArgs, Plan, Row};
use crate::plot::{human_bytes, Chart, Series, XAxis};
use anyhow::{Context, Result};
use railstore_ec::Engine;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The GPU and its transfer ceilings, for the summary.
pub(crate) struct GpuSummary {
    pub description: String,
    pub h2d_gbps: f64,
    pub d2h_gbps: f64,
}

/// The CSV form of the rows: one header line, one line per row.
pub fn to_csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "engine,op,code,k,m,w,chunk,threads,data_size,repeats,ops,data_gbps,thr_mbps,\
         norm_thr_mbps,lat_mean_us,lat_p50_us,lat_p99_us,cycles_per_s,l1d_misses_per_s,cpu_s_per_s\n",
    );
    let opt = |v: Option<f64>| v.map(|x| format!("{x:.0}")).unwrap_or_default();
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{:.4},{:.2},{:.2},{:.3},{:.3},{:.3},{},{},{:.4}",
            r.engine,
            r.op,
            r.code,
            r.k,
            r.m,
            r.w,
            r.chunk,
            r.threads,
            r.data_size,
            r.repeats,
            r.ops,
            r.data_gbps,
            r.thr_mbps,
            r.norm_thr_mbps,
            r.lat_mean_us,
            r.lat_p50_us,
            r.lat_p99_us,
            opt(r.cycles_per_s),
            opt(r.l1d_misses_per_s),
            r.cpu_s_per_s
        );
    }
    s
}

pub(crate) fn write_outputs(
    args: &EcBenchArgs,
    plan: &Plan,
    rows: &[Row],
    counters_missing: Option<&str>,
    gpu: Option<&GpuSummary>,
) -> Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let json = serde_json::to_string_pretty(rows)?;
    let csv = to_csv(rows);
    let mut written = Vec::new();
    for (path, body) in [
        (Some(args.out.join("results.json")), &json),
        (args.json.clone(), &json),
        (Some(args.out.join("results.csv")), &csv),
        (args.csv.clone(), &csv),
    ] {
        if let Some(p) = path {
            std::fs::write(&p, body).with_context(|| format!("writing {}", p.display()))?;
            written.push(p);
        }
    }
    let mut summary = summary_markdown(plan, rows, counters_missing);
    summary.push_str(&against_markdown(rows, "klauspost"));
    if let Some(g) = gpu {
        summary.push_str(&offload_markdown(g, rows));
    }
    let summary_path = args.out.join("summary.md");
    std::fs::write(&summary_path, &summary)?;
    written.push(summary_path);
    println!("\n{summary}");
    if !args.no_plots {
        match plots(rows, &args.out) {
            Ok(files) => written.extend(files),
            Err(e) => println!("plots skipped: {e:#}"),
        }
    }
    println!("wrote:");
    for p in written {
        println!("  {}", p.display());
    }
    Ok(())
}

/// Markdown: the command, the machine, railstore's pick, its ratios to ISA-L and the k = m sweep.
fn summary_markdown(plan: &Plan, rows: &[Row], counters_missing: Option<&str>) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## ec-bench results\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(s, "- machine: {}", machine_description());
    let _ = writeln!(
        s,
        "- data set D = {} per point (at least one block), {} repeats, medians reported",
        human_bytes(plan.data_size as u64),
        plan.repeat
    );
    if let Some(why) = counters_missing {
        let _ = writeln!(s, "- hardware counters unavailable: {why}");
    }
    let best = Engine::detect().name();
    let by_key = |engine: &str| -> BTreeMap<(String, usize, usize, usize, usize), f64> {
        rows.iter()
            .filter(|r| r.engine == engine)
            .map(|r| ((r.op.clone(), r.k, r.m, r.chunk, r.threads), r.data_gbps))
            .collect()
    };
    let ours = by_key(best);
    let isal = by_key("isal");
    if !isal.is_empty() && !ours.is_empty() {
        let _ = writeln!(
            s,
            "\n### {best} (railstore's pick) against ISA-L, user-data GB/s\n\n\
             | op | code | chunk | threads | {best} | isal | ratio |\n|---|---|---|---|---|---|---|"
        );
        for (key, g) in &ours {
            if let Some(i) = isal.get(key) {
                let _ = writeln!(
                    s,
                    "| {} | RS({},{}) | {} | {} | {:.2} | {:.2} | {:.2}x |",
                    key.0,
                    key.1,
                    key.2,
                    human_bytes(key.3 as u64),
                    key.4,
                    g,
                    i,
                    g / i
                );
            }
        }
    }
    let picked: Vec<&Row> = rows.iter().filter(|r| r.engine == best).collect();
    if !picked.is_empty() {
        let _ = writeln!(
            s,
            "\n### {best} (railstore's pick)\n\n\
             | op | code | chunk | threads | GB/s | Thr MB/s | norm MB/s | p50 us | p99 us |\n\
             |---|---|---|---|---|---|---|---|---|"
        );
        for r in picked {
            let _ = writeln!(
                s,
                "| {} | RS({},{}) | {} | {} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} |",
                r.op,
                r.k,
                r.m,
                human_bytes(r.chunk as u64),
                r.threads,
                r.data_gbps,
                r.thr_mbps,
                r.norm_thr_mbps,
                r.lat_p50_us,
                r.lat_p99_us
            );
        }
    }
    let km: Vec<&Row> = rows
        .iter()
        .filter(|r| r.k == r.m && r.chunk == 256 << 10 && r.engine == best)
        .collect();
    if !km.is_empty() {
        let _ = writeln!(
            s,
            "\n### eRails k = m sweep, 256 KiB chunks, {best}, user-data GB/s\n\n\
             | op | k = m | 1 thread | 2 threads | speed-up |\n|---|---|---|---|---|"
        );
        let mut seen = BTreeMap::new();
        for r in &km {
            seen.entry((r.op.clone(), r.k))
                .or_insert_with(BTreeMap::new)
                .insert(r.threads, r.data_gbps);
        }
        for ((op, k), t) in seen {
            let one = t.get(&1).copied();
            let two = t.get(&2).copied();
            let fmt = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}"));
            let up = match (one, two) {
                (Some(a), Some(b)) => format!("{:.2}x", b / a),
                _ => "-".into(),
            };
            let _ = writeln!(s, "| {op} | {k} | {} | {} | {up} |", fmt(one), fmt(two));
        }
    }
    s
}

/// railstore's pick against another coder timed in the same run, point by point (one thread).
fn against_markdown(rows: &[Row], other: &str) -> String {
    let ours = Engine::detect().name();
    let mut s = String::new();
    let pairs: Vec<(&Row, &Row)> = rows
        .iter()
        .filter(|r| r.engine == other)
        .filter_map(|o| {
            rows.iter()
                .find(|r| {
                    r.engine == ours
                        && r.threads == 1
                        && r.op == o.op
                        && r.k == o.k
                        && r.m == o.m
                        && r.chunk == o.chunk
                })
                .map(|r| (r, o))
        })
        .collect();
    if pairs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\n### {ours} (railstore's pick) against {other}, one thread, user-data GB/s\n\n\
         | op | code | chunk | {ours} | {other} | ratio |\n|---|---|---|---|---|---|"
    );
    for (r, o) in pairs {
        let _ = writeln!(
            s,
            "| {} | RS({},{}) | {} | {:.2} | {:.2} | {:.2}x |",
            r.op,
            r.k,
            r.m,
            human_bytes(r.chunk as u64),
            r.data_gbps,
            o.data_gbps,
            r.data_gbps / o.data_gbps
        );
    }
    s
}

/// The offload section: each GPU row beside the CPU engine coding the same batch on every core
/// (like for like: same data set, same layout, data in host memory), and where offload wins.
fn offload_markdown(g: &GpuSummary, rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n### Offload coder (cuda) against the CPU engines of this run\n\n\
         - GPU: {}\n- pinned copy ceilings: host-to-device {:.1} GB/s, device-to-host {:.1} GB/s\n\
         - `cuda-kernel`: data on the GPU, kernels only; `cuda-h2h`: host to host through \
         pinned memory, pipelined over streams; `*-batch`: the CPU engine coding the same batch \
         in host memory on every core, whole stripes per thread; `cuda` (table above): one \
         stripe per call through the codec\n",
        g.description, g.h2d_gbps, g.d2h_gbps
    );
    let _ = writeln!(
        s,
        "| op | code | chunk | batch | kernel GB/s | h2h GB/s | h2h / H2D | host CPU s per GB \
         (h2h) | CPU batch GB/s (engine x threads) | CPU s per GB (CPU batch) | h2h / CPU | \
         kernel / CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let same = |r: &Row, h: &Row| r.op == h.op && r.k == h.k && r.m == h.m && r.chunk == h.chunk;
    // Per (op, k, m): the chunks at which host-to-host, and device-resident, coding win.
    type Wins = (Vec<usize>, Vec<usize>);
    let mut wins: BTreeMap<(String, usize, usize), Wins> = BTreeMap::new();
    for h in rows.iter().filter(|r| r.engine == "cuda-h2h") {
        let kernel = rows
            .iter()
            .find(|r| r.engine == "cuda-kernel" && same(r, h));
        let cpu = rows
            .iter()
            .find(|r| r.engine.ends_with("-batch") && same(r, h));
        let (Some(kernel), Some(cpu)) = (kernel, cpu) else {
            continue;
        };
        let w = wins.entry((h.op.clone(), h.k, h.m)).or_default();
        if h.data_gbps > cpu.data_gbps {
            w.0.push(h.chunk);
        }
        if kernel.data_gbps > cpu.data_gbps {
            w.1.push(h.chunk);
        }
        let _ = writeln!(
            s,
            "| {} | RS({},{}) | {} | {} | {:.1} | {:.1} | {:.0}% | {:.3} | {:.1} ({} x{}) | {:.3} | \
             {:.2}x | {:.1}x |",
            h.op,
            h.k,
            h.m,
            human_bytes(h.chunk as u64),
            human_bytes(h.data_size as u64),
            kernel.data_gbps,
            h.data_gbps,
            100.0 * h.data_gbps / g.h2d_gbps,
            h.cpu_s_per_s / h.data_gbps.max(1e-9),
            cpu.data_gbps,
            cpu.engine.trim_end_matches("-batch"),
            cpu.threads,
            cpu.cpu_s_per_s / cpu.data_gbps.max(1e-9),
            h.data_gbps / cpu.data_gbps,
            kernel.data_gbps / cpu.data_gbps
        );
    }
    let list = |v: &[usize]| {
        if v.is_empty() {
            "none in this sweep".to_string()
        } else {
            v.iter()
                .map(|&c| human_bytes(c as u64))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let _ = writeln!(
        s,
        "\nCrossover: the chunk sizes at which the GPU beats every CPU core on the same batch\n"
    );
    for ((op, k, m), (h2h, kernel)) in wins {
        let _ = writeln!(
            s,
            "- {op} RS({k},{m}): host to host at {}; data already on the GPU at {}",
            list(&h2h),
            list(&kernel)
        );
    }
    s
}

fn plots(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let engines: Vec<String> = {
        let mut e: Vec<String> = rows.iter().map(|r| r.engine.clone()).collect();
        e.dedup();
        e.sort();
        e.dedup();
        e
    };
    // One line per engine and thread count (the CPU engines threaded over every core are what
    // an offload coder must beat).
    let lines: Vec<(String, usize)> = {
        let mut l: Vec<(String, usize)> = rows
            .iter()
            .filter(|r| r.k != r.m || r.chunk != 256 << 10)
            .map(|r| (r.engine.clone(), r.threads))
            .collect();
        l.sort();
        l.dedup();
        l
    };
    let line_name = |e: &str, t: usize| {
        if t == 1 {
            e.to_string()
        } else {
            format!("{e} x{t}")
        }
    };
    let configs: Vec<(usize, usize)> = {
        let mut c: Vec<(usize, usize)> = rows
            .iter()
            .filter(|r| r.k != r.m || r.chunk != 256 << 10)
            .map(|r| (r.k, r.m))
            .collect();
        c.sort();
        c.dedup();
        c
    };
    for op in ["encode", "decode"] {
        // EC-Bench Fig. 2-5: throughput against chunk size, one chart per configuration.
        for &(k, m) in &configs {
            let series: Vec<Series> = lines
                .iter()
                .map(|(e, t)| Series {
                    name: line_name(e, *t),
                    points: rows
                        .iter()
                        .filter(|r| {
                            r.op == op && r.k == k && r.m == m && r.engine == *e && r.threads == *t
                        })
                        .map(|r| (r.chunk as f64, r.data_gbps))
                        .collect(),
                })
                .filter(|s| s.points.len() > 1)
                .collect();
            if series.is_empty() {
                continue;
            }
            let title = format!("{op} RS({k},{m}): user-data throughput against chunk size");
            files.extend(
                Chart {
                    title: &title,
                    x_label: "chunk size",
                    y_label: "GB/s of user data",
                    x_axis: XAxis::Bytes,
                    series,
                }
                .write(dir, &format!("{op}-rs{k}-{m}-chunk"))?,
            );
        }
        // EC-Bench Fig. 6: normalized throughput per configuration (best chunk per engine).
        let labels: Vec<String> = configs
            .iter()
            .map(|(k, m)| format!("RS({k},{m})"))
            .collect();
        let series: Vec<Series> = lines
            .iter()
            .map(|(e, t)| Series {
                name: line_name(e, *t),
                points: configs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &(k, m))| {
                        rows.iter()
                            .filter(|r| {
                                r.op == op
                                    && r.k == k
                                    && r.m == m
                                    && r.engine == *e
                                    && r.threads == *t
                            })
                            .map(|r| r.norm_thr_mbps)
                            .reduce(f64::max)
                            .map(|v| (i as f64, v))
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if configs.len() > 1 && !series.is_empty() {
            let title = format!("{op}: normalized throughput per configuration (best chunk)");
            files.extend(
                Chart {
                    title: &title,
                    x_label: "configuration",
                    y_label: "normalized throughput, MB/s",
                    x_axis: XAxis::Categories(labels),
                    series,
                }
                .write(dir, &format!("{op}-normalized"))?,
            );
        }
        // eRails Fig. 4 and 5: k = m sweep against k, per engine and per thread count.
        let km = |r: &&Row| r.op == op && r.k == r.m && r.chunk == 256 << 10;
        let mut series: Vec<Series> = Vec::new();
        for e in &engines {
            let mut threads: Vec<usize> = rows
                .iter()
                .filter(km)
                .filter(|r| r.engine == *e)
                .map(|r| r.threads)
                .collect();
            threads.sort();
            threads.dedup();
            for t in threads {
                series.push(Series {
                    name: format!("{e}, {t} thread{}", if t == 1 { "" } else { "s" }),
                    points: rows
                        .iter()
                        .filter(km)
                        .filter(|r| r.engine == *e && r.threads == t)
                        .map(|r| (r.k as f64, r.data_gbps))
                        .collect(),
                });
            }
        }
        series.retain(|s| s.points.len() > 1);
        if !series.is_empty() {
            let title = format!("{op} RS(k,k), 256 KiB chunks: throughput against k and threads");
            files.extend(
                Chart {
                    title: &title,
                    x_label: "k = m",
                    y_label: "GB/s of user data",
                    x_axis: XAxis::Linear,
                    series,
                }
                .write(dir, &format!("{op}-k-equals-m"))?,
            );
        }
    }
    Ok(files)
}
