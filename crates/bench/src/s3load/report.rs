//! The load generator's reports: the terminal table, CSV, the Markdown summary and the plots.

use super::*;

pub(super) fn table_header() -> String {
    format!(
        "{:<6} {:<6} {:<4} {:>9} {:>10} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "target",
        "load",
        "op",
        "ops",
        "ops/s",
        "MB/s",
        "% store",
        "p50 us",
        "p90 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "cpu us/op",
        "errors"
    )
}

/// p50, p90, p99, p99.9 and max in µs, as the tables show a kind's latency (0 where none).
fn latency_table_us(l: Option<&Latency>) -> [f64; 5] {
    l.map_or([0.0; 5], |x| {
        [x.p50_us, x.p90_us, x.p99_us, x.p999_us, x.max_us]
    })
}

/// `% store` as the tables show it.
fn pct_cell(pct_of_store: Option<f64>) -> String {
    pct_of_store.map_or("-".into(), |p| format!("{p:.1}"))
}

/// The cells naming a run (target, workload, round), joined by `sep`.
fn run_cells(r: &RunResult, sep: &str) -> String {
    format!("{}{sep}{}{sep}{}", r.target, r.workload.name(), r.round)
}

pub(super) fn table_lines(r: &RunResult) -> Vec<String> {
    r.kinds
        .iter()
        .map(|k| {
            let latency: Vec<String> = latency_table_us(k.latency.as_ref())
                .iter()
                .map(|v| format!("{v:>9.0}"))
                .collect();
            format!(
                "{:<6} {:<6} {:<4} {:>9} {:>10.0} {:>9.1} {:>8} {} {:>9.0} {:>7}",
                r.target,
                r.workload.name(),
                k.kind,
                k.ops,
                k.ops_per_s,
                k.mb_per_s,
                pct_cell(k.pct_of_store),
                latency.join(" "),
                r.cpu_us_per_op,
                k.errors
            )
        })
        .collect()
}

/// The CSV form: one row per run and operation kind.
pub fn results_csv(report: &S3Report) -> String {
    let mut s = String::from(
        "target,workload,round,kind,size_bytes,clients,elapsed_s,ops,bytes,ops_per_s,mb_per_s,\
         pct_of_store,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,ttfb_p50_us,ttfb_p99_us,\
         run_cpu_s,run_cpu_us_per_op,errors\n",
    );
    for r in &report.runs {
        for k in &r.kinds {
            // Empty where the kind has no such latency.
            let cell = |lat: &Option<Latency>, f: fn(&Latency) -> f64| {
                lat.as_ref()
                    .map_or(String::new(), |x| format!("{:.1}", f(x)))
            };
            let l = |f| cell(&k.latency, f);
            let t = |f| cell(&k.ttfb, f);
            let _ = writeln!(
                s,
                "{},{},{},{},{:.4},{},{},{:.2},{:.3},{},{},{},{},{},{},{},{},{},{:.4},{:.1},{}",
                run_cells(r, ","),
                k.kind,
                report.plan.size_bytes,
                report.plan.clients,
                r.elapsed_s,
                k.ops,
                k.bytes,
                k.ops_per_s,
                k.mb_per_s,
                k.pct_of_store.map_or(String::new(), |p| format!("{p:.2}")),
                l(|x| x.p50_us),
                l(|x| x.p90_us),
                l(|x| x.p99_us),
                l(|x| x.p999_us),
                l(|x| x.max_us),
                l(|x| x.mean_us),
                t(|x| x.p50_us),
                t(|x| x.p99_us),
                r.cpu_s,
                r.cpu_us_per_op,
                k.errors
            );
        }
    }
    s
}

/// The per-second series as CSV.
pub fn series_csv(report: &S3Report) -> String {
    let mut s = String::from("target,workload,round,t_s,ops_per_s,mb_per_s,puts,gets\n");
    for r in &report.runs {
        for x in &r.series {
            let _ = writeln!(
                s,
                "{},{:.3},{:.2},{:.3},{},{}",
                run_cells(r, ","),
                x.t_s,
                x.ops_per_s,
                x.mb_per_s,
                x.puts,
                x.gets
            );
        }
    }
    s
}

/// The Markdown summary.
pub fn summary_md(report: &S3Report) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## s3 bench results\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(s, "- machine: {}", report.machine);
    for line in describe(&report.plan, &report.setup, report.baseline).lines() {
        let _ = writeln!(s, "- {line}");
    }
    let _ = writeln!(
        s,
        "\nLatency is from sending the request to the last byte of the answer. MB = 10^6 B. \
         Errors count every non-2xx answer, transport error and short read, warmup included. \
         CPU µs/op is the whole process's CPU time (clients, HTTP, s3s, store; user + system) \
         per operation of the run. `% store` compares an S3 run with the store run of its round; \
         the comparison below uses all rounds (total operations / total measured time).\n"
    );
    let _ = writeln!(
        s,
        "| target | workload | round | op | ops | ops/s | MB/s | % store | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | CPU µs/op | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &report.runs {
        for k in &r.kinds {
            let latency: Vec<String> = latency_table_us(k.latency.as_ref())
                .iter()
                .map(|v| format!("{v:.0}"))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} | {:.1} | {} | {} | {:.0} | {} |",
                run_cells(r, " | "),
                k.kind,
                k.ops,
                k.ops_per_s,
                k.mb_per_s,
                pct_cell(k.pct_of_store),
                latency.join(" | "),
                r.cpu_us_per_op,
                k.errors
            );
        }
    }
    if !report.comparison.is_empty() {
        let _ = writeln!(
            s,
            "\n| workload | op | S3 ops/s | store ops/s | S3 MB/s | store MB/s | S3 % of store | S3 CPU µs/op | store CPU µs/op |\n\
             |---|---|---|---|---|---|---|---|---|"
        );
        for c in &report.comparison {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} |",
                c.workload.name(),
                c.kind,
                c.s3_ops_per_s,
                c.store_ops_per_s,
                c.s3_mb_per_s,
                c.store_mb_per_s,
                c.pct_of_store,
                c.s3_cpu_us_per_op,
                c.store_cpu_us_per_op
            );
        }
    }
    for r in report.runs.iter().filter(|r| r.first_error.is_some()) {
        let _ = writeln!(
            s,
            "\nfirst error of {} {} (round {}): `{}`",
            r.target,
            r.workload.name(),
            r.round,
            r.first_error.as_deref().unwrap_or_default()
        );
    }
    s
}

fn plot(report: &S3Report, dir: &Path) -> Result<Vec<PathBuf>> {
    let series = report
        .runs
        .iter()
        .map(|r| Series {
            name: if report.plan.rounds > 1 {
                format!("{} {} #{}", r.target, r.workload.name(), r.round + 1)
            } else {
                format!("{} {}", r.target, r.workload.name())
            },
            points: r.series.iter().map(|x| (x.t_s, x.ops_per_s)).collect(),
        })
        .collect();
    Chart {
        title: &format!(
            "S3 and store throughput per second ({} objects, {} clients)",
            report.plan.size, report.plan.clients
        ),
        x_label: "seconds into the measured window",
        y_label: "operations/s",
        x_axis: XAxis::Linear,
        series,
    }
    .write(dir, "per_second")
}

/// Prints the comparison and writes `--json` and `--out`.
pub fn write_report(args: &LoadArgs, report: &S3Report) -> Result<()> {
    let output = &args.output;
    for c in &report.comparison {
        output.say(&format!(
            "{} {}: S3 {:.0} ops/s ({:.1} MB/s) = {:.1} % of the store's {:.0} ops/s ({:.1} MB/s); \
             process CPU per operation {:.0} us through S3, {:.0} us direct",
            c.workload.name(),
            c.kind,
            c.s3_ops_per_s,
            c.s3_mb_per_s,
            c.pct_of_store,
            c.store_ops_per_s,
            c.store_mb_per_s,
            c.s3_cpu_us_per_op,
            c.store_cpu_us_per_op
        ));
    }
    if report.errors > 0 {
        output.say(&format!("{} operations failed", report.errors));
    }
    let json = serde_json::to_string_pretty(report)?;
    let files = [
        ("results.json", json.clone()),
        ("results.csv", results_csv(report)),
        ("series.csv", series_csv(report)),
        ("summary.md", summary_md(report)),
    ];
    let written = output.write(&json, &files)?;
    output.plot_and_list(written, |out| plot(report, out));
    Ok(())
}
