//! The study's report: a table per point, CSV and JSON, a Markdown summary with the paper's
//! published numbers beside ours, and the plots of the paper's one-node figures.

use super::paper::{self, Metric};
use super::study::{Pattern, Plan, Row};
use crate::harness::{machine_description, OutputArgs};
use crate::plot::{human_bytes, Chart, Series, XAxis};
use anyhow::Result;
use serde::Serialize;
use std::fmt::Write as _;

/// One of the paper's numbers beside the same ratio measured here.
#[derive(Debug, Clone, Serialize)]
pub struct Beside {
    pub source: &'static str,
    pub mechanism: String,
    pub pattern: Pattern,
    pub metric: Metric,
    pub form: String,
    pub paper: f64,
    pub railstore: f64,
}

/// Everything the study measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Which benchmark: `ceph-study` (one machine) or `cluster` (across nodes).
    pub title: &'static str,
    pub command: String,
    pub machine: String,
    pub store: String,
    pub plan: Plan,
    pub rows: Vec<Row>,
    pub beside_paper: Vec<Beside>,
}

impl Report {
    pub(super) fn new(title: &'static str, plan: Plan, store: String, rows: Vec<Row>) -> Report {
        let beside_paper = paper::published()
            .iter()
            .filter_map(|p| {
                Some(Beside {
                    source: p.source,
                    mechanism: p.mechanism.to_string(),
                    pattern: p.pattern,
                    metric: p.metric,
                    form: p.form.label(),
                    paper: p.value,
                    railstore: p.form.ours(&rows, p.mechanism, p.pattern, p.metric)?,
                })
            })
            .collect();
        Report {
            title,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine: machine_description(),
            store,
            plan,
            rows,
            beside_paper,
        }
    }

    /// Writes `--json` and `--out` (results.json, results.csv, summary.md, the plots).
    pub fn write(&self, output: &OutputArgs) -> Result<()> {
        let json = serde_json::to_string_pretty(self)?;
        let files = [
            ("results.json", json.clone()),
            ("results.csv", self.csv()),
            ("summary.md", self.summary()),
        ];
        let mut written = output.write(&json, &files)?;
        if let (Some(out), false) = (&output.out, output.no_plots) {
            match self.plots(out) {
                Ok(p) => written.extend(p),
                Err(e) => output.say(&format!("plots skipped: {e:#}")),
            }
        }
        match (&output.out, written.len()) {
            (Some(out), n) if n > 0 => output.say(&format!("wrote {n} files to {}", out.display())),
            _ => {}
        }
        Ok(())
    }

    fn csv(&self) -> String {
        let mut s = String::from(
            "mechanism,pattern,request_bytes,generator,seconds,ops,bytes,errors,iops,mb_per_s,\
             lat_mean_us,lat_p50_us,lat_p99_us,lat_p999_us,cpu_user_s_per_gb,cpu_system_s_per_gb,\
             context_switches_per_mb,device_read_per_byte,device_write_per_byte,\
             disk_read_per_byte,disk_write_per_byte,network_per_byte,socket_per_byte\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{},{},{},{},{:.3},{},{},{},{:.1},{:.2},{:.1},{:.1},{:.1},{:.1},{:.4},{:.4},{:.2},{:.3},{:.3},{},{},{},{}",
                r.mechanism,
                r.pattern.name(),
                r.request_bytes,
                r.generator,
                r.seconds,
                r.ops,
                r.bytes,
                r.errors,
                r.iops,
                r.mb_per_s,
                r.lat_mean_us,
                r.lat_p50_us,
                r.lat_p99_us,
                r.lat_p999_us,
                r.cpu_user_s_per_gb,
                r.cpu_system_s_per_gb,
                r.context_switches_per_mb,
                r.device_read_per_byte,
                r.device_write_per_byte,
                opt(r.disk_read_per_byte),
                opt(r.disk_write_per_byte),
                opt(r.network_per_byte),
                opt(r.socket_per_byte)
            );
        }
        s
    }

    /// Whether the rows count the cluster network.
    fn across_nodes(&self) -> bool {
        self.rows.iter().any(|r| r.network_per_byte.is_some())
    }

    fn summary(&self) -> String {
        let p = &self.plan;
        let mut s = String::new();
        let _ = writeln!(s, "## {} results\n", self.title);
        let _ = writeln!(s, "- command: `{}`", self.command);
        let _ = writeln!(s, "- machine: {}", self.machine);
        let _ = writeln!(
            s,
            "- store: {}; volumes of {} in {} objects; generator {} over NBD on loopback TCP, \
             iodepth {}, {} s per point",
            self.store,
            human_bytes(p.volume_bytes),
            human_bytes(p.object_bytes),
            p.generator,
            p.iodepth,
            p.runtime_s
        );
        let _ = writeln!(
            s,
            "- CPU and context switches: the server process's (getrusage) per GB / MB the \
             client moved; dev: pieces read and written (headers and the rails journal \
             included, the store's counters) per byte the client moved; disk: what the \
             process read and wrote at the block layer (/proc/self/io) per byte{}\n",
            if self.across_nodes() {
                "; net: gRPC message bytes between the serving node and the others (both \
                 ways) per byte, and socket: the same on the nodes' connections with HTTP/2 \
                 framing"
            } else {
                ""
            }
        );
        let net = self.across_nodes();
        let _ = writeln!(
            s,
            "| mechanism | pattern | request | MB/s | IOPS | p50 us | p99 us | p99.9 us | \
             CPU user s/GB | CPU sys s/GB | cs/MB | dev read/B | dev write/B | disk read/B | \
             disk write/B |{}",
            if net { " net/B | socket/B |" } else { "" }
        );
        let _ = writeln!(
            s,
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- \
             | --- |{}",
            if net { " --- | --- |" } else { "" }
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | \
                 {:.2} | {:.2} | {} | {} |{}",
                r.mechanism,
                r.pattern.name(),
                human_bytes(r.request_bytes),
                r.mb_per_s,
                r.iops,
                r.lat_p50_us,
                r.lat_p99_us,
                r.lat_p999_us,
                r.cpu_user_s_per_gb,
                r.cpu_system_s_per_gb,
                r.context_switches_per_mb,
                r.device_read_per_byte,
                r.device_write_per_byte,
                opt(r.disk_read_per_byte),
                opt(r.disk_write_per_byte),
                if net {
                    format!(
                        " {} | {} |",
                        opt(r.network_per_byte),
                        opt(r.socket_per_byte)
                    )
                } else {
                    String::new()
                }
            );
        }
        if !self.beside_paper.is_empty() {
            let _ = writeln!(
                s,
                "\n### Beside the paper's published numbers\n\n{}\n",
                paper::SETUP
            );
            let _ = writeln!(
                s,
                "| source | mechanism | pattern | metric | as | paper | railstore |"
            );
            let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
            for b in &self.beside_paper {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {:.2} | {:.2} |",
                    b.source,
                    b.mechanism,
                    b.pattern.name(),
                    b.metric.label(),
                    b.form,
                    b.paper,
                    b.railstore
                );
            }
        }
        s
    }

    /// One plot per pattern and metric: the metric against the request size, a line per
    /// mechanism (the paper's Figs. 5-17 that apply to one node).
    fn plots(&self, out: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        let mut files = Vec::new();
        let mut metrics = vec![
            Metric::MbPerS,
            Metric::LatP99Us,
            Metric::CpuSPerGb,
            Metric::ContextSwitchesPerMb,
            Metric::DeviceWritePerByte,
            Metric::DeviceReadPerByte,
        ];
        if self.across_nodes() {
            metrics.push(Metric::NetworkPerByte);
        }
        for &pattern in &self.plan.patterns {
            for &metric in &metrics {
                let series: Vec<Series> = self
                    .plan
                    .mechanisms
                    .iter()
                    .map(|m| Series {
                        name: m.clone(),
                        points: self
                            .rows
                            .iter()
                            .filter(|r| &r.mechanism == m && r.pattern == pattern)
                            .map(|r| (r.request_bytes as f64, metric.of(r)))
                            .collect(),
                    })
                    .collect();
                let title = format!("{} {}", pattern.name(), metric.label());
                let chart = Chart {
                    title: &title,
                    x_label: "request size",
                    y_label: metric.label(),
                    x_axis: XAxis::Bytes,
                    series,
                };
                files.extend(chart.write(out, &format!("{}-{}", metric.stem(), pattern.name()))?);
            }
        }
        Ok(files)
    }
}

/// A ratio, or `-` where it is unknown.
fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}
