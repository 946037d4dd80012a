//! Tables, CSV files, plots and summaries of a report.

use anyhow::Result;
use railstore_rails::Role;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::plot::{human_bytes, Chart, Series, XAxis};

use super::*;

// ---------------------------------------------------------------------------------------------
// Output

pub(super) fn table_header() -> String {
    format!(
        "{:<10} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>7} {:>10} {:>8} {:>7}",
        "mode",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "p99.99µs",
        ">1ms",
        ">10ms",
        "read MB/s",
        "write MB/s",
        "% bound",
        "buf max",
        "off-win",
        "wall s"
    )
}

pub(super) fn table_line(r: &RunReport) -> String {
    format!(
        "{:<10} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>8} {:>9.1} {:>9.1} {:>7.1} {:>10} {:>8} {:>7.1}",
        r.mode.name(),
        r.read_p50_us,
        r.read_p99_us,
        r.read_p999_us,
        r.read_p9999_us,
        r.reads_over_1ms,
        r.reads_over_10ms,
        r.read_mbps,
        r.write_mbps,
        r.write_pct_of_bound,
        human_bytes(r.buffer_bytes_max),
        if r.mode == Mode::Mixed {
            "-".to_string()
        } else {
            r.device_reads_outside_window.to_string()
        },
        r.wall_s
    )
}

pub(super) fn decode_table_header() -> String {
    format!(
        "{:<3} {:<10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7}",
        "k",
        "variant",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "read MB/s",
        "decodes",
        "predicted",
        "charge ms",
        "busy %",
        "wall s"
    )
}

pub(super) fn decode_table_line(r: &RunReport) -> String {
    format!(
        "{:<3} {:<10} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>9} {:>9.1} {:>8.1} {:>7.1}",
        r.k.unwrap_or(0),
        r.variant.map_or("-", DecodeVariant::name),
        r.read_p50_us,
        r.read_p99_us,
        r.read_p999_us,
        r.read_mbps,
        r.decodes,
        r.decoding_reads.unwrap_or(0),
        r.decode_charged_ms.unwrap_or(0.0),
        r.decode_busy_pct.unwrap_or(0.0),
        r.wall_s
    )
}

impl RunReport {
    /// The run's name in the CSV series and plots: the mode, or `k3-decode` in erails-decode.
    pub fn label(&self) -> String {
        match (self.k, self.variant) {
            (Some(k), Some(v)) => format!("k{k}-{}", v.name()),
            _ => self.mode.name().to_string(),
        }
    }
}

/// erails-decode: one line per k and variant.
pub fn decode_csv(report: &MixedReport) -> String {
    let mut s = String::from(
        "k,variant,read_mbps,read_p50_us,read_p99_us,read_p999_us,reads,decodes,\
         decoding_reads,decode_charged_ms,decode_busy_pct\n",
    );
    for r in &report.runs {
        let _ = writeln!(
            s,
            "{},{},{:.1},{:.1},{:.1},{:.1},{},{},{},{:.1},{:.1}",
            r.k.unwrap_or(0),
            r.variant.map_or("-", DecodeVariant::name),
            r.read_mbps,
            r.read_p50_us,
            r.read_p99_us,
            r.read_p999_us,
            r.reads,
            r.decodes,
            r.decoding_reads.unwrap_or(0),
            r.decode_charged_ms.unwrap_or(0.0),
            r.decode_busy_pct.unwrap_or(0.0)
        );
    }
    s
}

/// Per-second read and write MB/s and read IOPS of every mode.
pub fn series_csv(report: &MixedReport) -> String {
    let mut s = String::from("mode,second,read_mbps,write_mbps,read_iops,write_iops\n");
    let per_s = (1.0 / BUCKET_S).round() as usize;
    for r in &report.runs {
        for (i, chunk) in r.buckets.chunks(per_s).enumerate() {
            let secs = chunk.len() as f64 * BUCKET_S;
            let sum = |f: fn(&Bucket) -> u64| chunk.iter().map(f).sum::<u64>() as f64 / secs;
            let _ = writeln!(
                s,
                "{},{},{:.3},{:.3},{:.1},{:.1}",
                r.label(),
                i,
                sum(|b| b.read_bytes) / 1e6,
                sum(|b| b.write_bytes) / 1e6,
                sum(|b| b.reads),
                sum(|b| b.writes)
            );
        }
    }
    s
}

/// Every device's role and buffer at every sample of every mode.
pub fn buffer_csv(report: &MixedReport) -> String {
    let mut s = String::from(
        "mode,time_s,device,role,buffer_bytes,flushed_bytes,buffer_reads,decodes,partial_frames\n",
    );
    for r in &report.runs {
        for smp in &r.samples {
            for (d, role) in smp.roles.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "{},{:.3},{d},{},{},{},{},{},{}",
                    r.label(),
                    smp.t_s,
                    match role {
                        Role::Reader => "reader",
                        Role::Writer => "writer",
                        Role::Guard => "guard",
                    },
                    smp.buffer_bytes[d],
                    smp.flushed_bytes[d],
                    smp.buffer_reads[d],
                    smp.decodes,
                    smp.partial_frames,
                );
            }
        }
    }
    s
}

/// Read IOPS of every 100 ms interval, sorted: (IOPS, fraction of intervals at or below).
pub(super) fn iops_cdf(r: &RunReport) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = r
        .buckets
        .iter()
        .map(|b| b.reads as f64 / BUCKET_S)
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.into_iter()
        .enumerate()
        .map(|(i, x)| (x, (i + 1) as f64 / n))
        .collect()
}

/// The read IOPS CDF of every mode.
pub fn iops_cdf_csv(report: &MixedReport) -> String {
    let mut s = String::from("mode,read_iops,fraction\n");
    for r in &report.runs {
        for (x, f) in iops_cdf(r) {
            let _ = writeln!(s, "{},{x:.1},{f:.4}", r.label());
        }
    }
    s
}

/// erails-decode: read MB/s against k, both variants, and what the modelled cores can decode.
pub(super) fn decode_plot(report: &MixedReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let line = |v: DecodeVariant| -> Vec<(f64, f64)> {
        report
            .runs
            .iter()
            .filter(|r| r.variant == Some(v))
            .map(|r| (r.k.unwrap_or(0) as f64, r.read_mbps))
            .collect()
    };
    let threads = report.decode_threads.unwrap_or(1);
    let mut series = vec![
        Series {
            name: "no decoding (data shards in the window)".into(),
            points: line(DecodeVariant::NoDecode),
        },
        Series {
            name: if threads == 0 {
                "decoding (not charged)".into()
            } else {
                format!("decoding ({threads} decode thread(s))")
            },
            points: line(DecodeVariant::Decode),
        },
    ];
    if report.clock == Clock::Virtual && threads > 0 {
        series.push(Series {
            name: format!("decode capacity of {threads} thread(s)"),
            points: report
                .decode_calibration
                .iter()
                .flatten()
                .map(|c| (c.k as f64, c.decode_mbps_one_thread * threads as f64))
                .collect(),
        });
    }
    Chart {
        title: &format!(
            "erails-decode: read throughput against k (k = m, {} reads)",
            human_bytes(report.request_bytes as u64)
        ),
        x_label: "k (readers; 2k devices)",
        y_label: "read MB/s",
        x_axis: XAxis::Linear,
        series,
    }
    .write(dir, "read_vs_k")
}

pub(super) fn plots(report: &MixedReport, dir: &Path) -> Result<Vec<PathBuf>> {
    if report.preset == Preset::ErailsDecode {
        return decode_plot(report, dir);
    }
    let mut files = Vec::new();
    let per_s = (1.0 / BUCKET_S).round() as usize;
    let per_second = |r: &RunReport, f: fn(&Bucket) -> u64| -> Vec<(f64, f64)> {
        r.buckets
            .chunks(per_s)
            .enumerate()
            .map(|(i, c)| {
                let secs = c.len() as f64 * BUCKET_S;
                (i as f64, c.iter().map(f).sum::<u64>() as f64 / secs / 1e6)
            })
            .collect()
    };
    let title = format!(
        "{} ({}, {} devices): throughput per second",
        report.preset.name(),
        report.mechanism,
        report.devices
    );
    let mut series = Vec::new();
    for r in &report.runs {
        series.push(Series {
            name: format!("{} reads", r.label()),
            points: per_second(r, |b| b.read_bytes),
        });
        if r.writes > 0 {
            series.push(Series {
                name: format!("{} writes", r.label()),
                points: per_second(r, |b| b.write_bytes),
            });
        }
    }
    files.extend(
        Chart {
            title: &title,
            x_label: "simulated second",
            y_label: "MB/s",
            x_axis: XAxis::Linear,
            series,
        }
        .write(dir, "throughput")?,
    );
    if let Some(r) = report.runs.iter().find(|r| r.mode == Mode::Separated) {
        let title = format!(
            "{}: write buffer per device (separated)",
            report.preset.name()
        );
        let series = (0..report.devices)
            .map(|d| Series {
                name: format!("device {d}"),
                points: r
                    .samples
                    .iter()
                    .map(|s| (s.t_s, s.buffer_bytes[d] as f64 / (1 << 20) as f64))
                    .collect(),
            })
            .collect();
        files.extend(
            Chart {
                title: &title,
                x_label: "simulated second",
                y_label: "MiB buffered",
                x_axis: XAxis::Linear,
                series,
            }
            .write(dir, "buffer")?,
        );
    }
    let title = format!(
        "{}: CDF of read IOPS per {} ms",
        report.preset.name(),
        BUCKET_S * 1000.0
    );
    let series = report
        .runs
        .iter()
        .map(|r| Series {
            name: r.label(),
            points: iops_cdf(r),
        })
        .collect();
    files.extend(
        Chart {
            title: &title,
            x_label: "read IOPS",
            y_label: "fraction of intervals",
            x_axis: XAxis::Linear,
            series,
        }
        .write(dir, "iops_cdf")?,
    );
    Ok(files)
}

/// erails-decode's Markdown summary: read MB/s per k and variant, and the decode costs.
pub(super) fn decode_summary(report: &MixedReport) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## mixed bench: erails-decode\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    for line in report.description.lines() {
        let _ = writeln!(s, "- {line}");
    }
    if let Some(c) = &report.decode_charge {
        let _ = writeln!(s, "- decoding: {c}");
    }
    let _ = writeln!(
        s,
        "\n| k | devices | variant | read MB/s | vs no-decode | read p50 µs | p99 µs | p99.9 µs \
         | reads | decodes | decoding reads | decode charged ms | decode busy % | wall s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &report.runs {
        let base = report
            .runs
            .iter()
            .find(|b| b.k == r.k && b.variant == Some(DecodeVariant::NoDecode))
            .map_or(0.0, |b| b.read_mbps);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {:.1} | {:.1} \
             | {:.1} |",
            r.k.unwrap_or(0),
            2 * r.k.unwrap_or(0),
            r.variant.map_or("-", DecodeVariant::name),
            r.read_mbps,
            if base > 0.0 {
                format!("{:.1} %", r.read_mbps / base * 100.0)
            } else {
                "-".into()
            },
            r.read_p50_us,
            r.read_p99_us,
            r.read_p999_us,
            r.reads,
            r.decodes,
            r.decoding_reads.unwrap_or(0),
            r.decode_charged_ms.unwrap_or(0.0),
            r.decode_busy_pct.unwrap_or(0.0),
            r.wall_s
        );
    }
    let _ = writeln!(
        s,
        "\nDecode CPU time measured before the runs (median of batches, thread CPU time), by the \
         first shard s of the window's run of k shards (s = 0: the data shards):\n\n\
         | k | shard bytes | engine | decode µs for s = 1 .. 2k-1 | one thread MB/s |\n\
         |---|---|---|---|---|"
    );
    for c in report.decode_calibration.iter().flatten() {
        let us: Vec<String> = c.decode_us_by_first_shard[1..]
            .iter()
            .map(|u| format!("{u:.1}"))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} |",
            c.k,
            c.shard_bytes,
            c.engine,
            us.join(", "),
            c.decode_mbps_one_thread
        );
    }
    let _ = writeln!(
        s,
        "\n`decodes`: segments the manager rebuilt from parity (its counter); `decoding reads`: \
         reads the bench expected to decode from the placement and the window (the two agree \
         when the variants do what they say). `decode busy %`: charged decode time over the \
         modelled cores' time. The top-level JSON fields (devices, write bound) describe the \
         largest k."
    );
    s
}

/// The Markdown summary: what ran, on what, and the table.
pub fn summary(report: &MixedReport) -> String {
    if report.preset == Preset::ErailsDecode {
        return decode_summary(report);
    }
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## mixed bench: {}\n", report.preset.name());
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    for line in report.description.lines() {
        let _ = writeln!(s, "- {line}");
    }
    let _ = writeln!(
        s,
        "- w = {:.0} MB/s (one SSD, sequential piece-sized writes, preconditioned); eRails bound \
         k m w / (k + m) = {:.0} MB/s; the buffers allow {:.0} MB/s\n",
        report.w_mbps, report.write_bound_mbps, report.buffer_bound_mbps
    );
    let _ = writeln!(
        s,
        "| mode | read p50 µs | p99 µs | p99.9 µs | p99.99 µs | reads > 1 ms | > 10 ms | read MB/s \
         | write MB/s | % of bound | write p99 µs | write max µs | buffer max | coalesced \
         | reads outside window | GC runs | decodes | wall s | CPU s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &report.runs {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} \
             | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            r.mode.name(),
            r.read_p50_us,
            r.read_p99_us,
            r.read_p999_us,
            r.read_p9999_us,
            r.reads_over_1ms,
            r.reads_over_10ms,
            r.read_mbps,
            r.write_mbps,
            r.write_pct_of_bound,
            r.write_p99_us,
            r.write_max_us,
            human_bytes(r.buffer_bytes_max),
            r.coalesced_ops,
            if r.mode == Mode::Mixed {
                "-".to_string()
            } else {
                r.device_reads_outside_window.to_string()
            },
            r.gc_runs,
            r.decodes,
            r.wall_s,
            r.cpu_s
        );
    }
    if report.trace.is_some() {
        let left: Vec<String> = report
            .runs
            .iter()
            .map(|r| {
                format!(
                    "{} {} reads, {} writes",
                    r.label(),
                    r.trace_reads_abandoned.unwrap_or(0),
                    r.trace_writes_abandoned.unwrap_or(0)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "\nTrace requests still unfinished 50 simulated ms after the measured time (abandoned; \
             in no percentile): {}. Trace latencies count from each request's arrival in the \
             trace (open loop).",
            left.join("; ")
        );
    }
    let _ = writeln!(
        s,
        "\nLatencies are simulated time from dispatch to completion (closed loop). `% of bound` \
         is write MB/s over the eRails bound. `coalesced`: buffered writes replaced by a newer \
         write of the same piece before their flush (the worst case has none). `reads outside \
         window`: device reads that reached a writer or guarding device (separation on). \
         `decodes`: segments rebuilt from parity. `CPU s`: process CPU time of the measured \
         phase{}.",
        if report.cpu_time_charged {
            ""
        } else {
            ", which costs no simulated time"
        }
    );
    s
}
