//! `bench kv`'s report: the description line, the table, CSV, summary.md and the bar charts
//! (shared with `bench rebuild`).

use super::*;

pub(super) fn describe_kv(args: &KvBenchArgs, plan: &KvPlan) -> String {
    let on = match args.backend {
        Backend::File => format!(
            "{} file devices in {}{}",
            args.devices,
            args.path
                .as_ref()
                .map_or("a temporary folder".into(), |p| p.display().to_string()),
            if args.buffered { " (buffered I/O)" } else { "" }
        ),
        Backend::Mem => format!("{} in-memory devices", args.devices),
        Backend::Sim => format!(
            "{} simulated SSDs in virtual time (CPU figures are real)",
            args.devices
        ),
    };
    let run = match (plan.ops, plan.duration) {
        (Some(n), _) => format!("{n} operations"),
        (None, Some(s)) => format!("{s} s"),
        (None, None) => unreachable!("kv_plan sets one"),
    };
    format!(
        "kv bench on {on}; {} objects of {}, then {run} of {} per run phase; {} tasks, {} thread(s)\n\
         mechanisms: {}",
        plan.objects,
        plan.sizes.text,
        plan.mixes
            .iter()
            .map(|m| m.text.as_str())
            .collect::<Vec<_>>()
            .join(" / "),
        args.qd,
        if args.backend == Backend::Sim {
            1
        } else {
            args.threads.max(1)
        },
        plan.schemes
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

pub(super) fn table_header() -> String {
    format!(
        "{:<16} {:<6} {:>10} {:>9} {:>7} {:>9} {:>9} {:>9} {:>6} {:>6} {:>7} {:>8} {:>8}",
        "mechanism",
        "phase",
        "ops/s",
        "MB/s",
        "% raw",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "w-amp",
        "r-amp",
        "dev-ops",
        "cpu s/GB",
        "csw/MB"
    )
}

pub(super) fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.decimals$}"))
}

pub(super) fn table_line(r: &KvRow) -> String {
    format!(
        "{:<16} {:<6} {:>10.0} {:>9.1} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>6} {:>6} {:>7.2} {:>8} {:>8}",
        r.mechanism,
        r.phase,
        r.ops_per_s,
        r.mb_per_s,
        opt(r.pct_of_raw, 1),
        r.p50_us,
        r.p99_us,
        r.p999_us,
        opt(r.write_amp, 2),
        opt(r.read_amp, 2),
        r.device_ops_per_op,
        opt(r.cpu_s_per_gb, 1),
        opt(r.ctx_switches_per_mb, 1)
    )
}

/// The CSV form of the rows.
pub fn kv_csv(rows: &[KvRow]) -> String {
    let mut s = String::from(
        "mechanism,ec_engine,phase,mix,backend,devices,value_size,qd,threads,objects,ops,elapsed_s,\
         ops_per_s,mb_per_s,pct_of_raw,p50_us,p99_us,p999_us,mean_us,reads,inserts,updates,\
         deletes,user_bytes_written,user_bytes_read,device_bytes_written,device_bytes_read,\
         device_stores,device_retrieves,device_deletes,device_ops_per_op,write_amp,read_amp,\
         cpu_s,cpu_s_per_gb,ctx_switches,ctx_switches_per_mb,decodes,repairs,gpu_calls\n",
    );
    let o = |v: Option<f64>| v.map(|x| format!("{x:.4}")).unwrap_or_default();
    for r in rows {
        let _ = writeln!(
            s,
            "{},\"{}\",{},\"{}\",{},{},\"{}\",{},{},{},{},{:.4},{:.2},{:.3},{},{:.2},{:.2},{:.2},\
             {:.2},{},{},{},{},{},{},{},{},{},{},{},{:.3},{},{},{:.4},{},{},{},{},{},{}",
            r.mechanism,
            r.ec_engine.as_deref().unwrap_or(""),
            r.phase,
            r.mix,
            backend_name(r.backend),
            r.devices,
            r.value_size,
            r.qd,
            r.threads,
            r.objects,
            r.ops,
            r.elapsed_s,
            r.ops_per_s,
            r.mb_per_s,
            o(r.pct_of_raw),
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.mean_us,
            r.reads,
            r.inserts,
            r.updates,
            r.deletes,
            r.user_bytes_written,
            r.user_bytes_read,
            r.device_bytes_written,
            r.device_bytes_read,
            r.device_stores,
            r.device_retrieves,
            r.device_deletes,
            r.device_ops_per_op,
            o(r.write_amp),
            o(r.read_amp),
            r.cpu_s,
            o(r.cpu_s_per_gb),
            r.ctx_switches,
            o(r.ctx_switches_per_mb),
            r.decodes,
            r.repairs,
            r.gpu_calls
        );
    }
    s
}

pub(super) fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::File => "file",
        Backend::Mem => "mem",
        Backend::Sim => "sim",
    }
}

pub(super) use crate::harness::machine_description;

pub(super) fn kv_summary(args: &KvBenchArgs, plan: &KvPlan, rows: &[KvRow]) -> String {
    let mut s = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let _ = writeln!(s, "## kv bench results\n");
    let _ = writeln!(s, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(s, "- machine: {}", machine_description());
    for line in describe_kv(args, plan).lines() {
        let _ = writeln!(s, "- {line}");
    }
    if let Some(d) = rows.first().and_then(|r| r.direct_io) {
        let _ = writeln!(
            s,
            "- file devices use {}",
            if d { "O_DIRECT" } else { "buffered I/O" }
        );
    }
    if plan.schemes.iter().any(|x| x.name == "hybrid") {
        let text = match &args.config {
            Some(p) => std::fs::read_to_string(p).unwrap_or_default(),
            None => DEFAULT_HYBRID_TOML.to_string(),
        };
        let _ = writeln!(s, "- hybrid configuration:\n\n```toml\n{}```", text);
    }
    let _ = writeln!(
        s,
        "\n`none` is the raw devices (each key once, on the device its hash picks). `% raw` is \
         ops/s against `none`'s same phase. `w-amp` = device key+value bytes stored / user value \
         bytes written; `r-amp` = device value bytes returned / user value bytes read (piece \
         headers, parity, packing pointers and set descriptors included). `dev ops/op` counts \
         device stores, retrieves (misses included) and deletes per user operation. CPU is \
         process user+system time (getrusage, all threads) per GB of user data moved; `csw/MB` \
         is voluntary+involuntary context switches per MB moved. Latencies include the wait of \
         packing for a full set.\n"
    );
    let _ = writeln!(
        s,
        "| mechanism | phase | mix | ops/s | MB/s | % raw | p50 µs | p99 µs | p99.9 µs | w-amp | r-amp | dev ops/op | CPU s/GB | csw/MB |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {:.2} | {} | {} |",
            r.mechanism,
            r.phase,
            r.mix,
            r.ops_per_s,
            r.mb_per_s,
            opt(r.pct_of_raw, 1),
            r.p50_us,
            r.p99_us,
            r.p999_us,
            opt(r.write_amp, 2),
            opt(r.read_amp, 2),
            r.device_ops_per_op,
            opt(r.cpu_s_per_gb, 1),
            opt(r.ctx_switches_per_mb, 1)
        );
    }
    s
}

pub(super) fn kv_plot(rows: &[KvRow], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut phases: Vec<String> = Vec::new();
    let mut mechs: Vec<String> = Vec::new();
    for r in rows {
        if !phases.contains(&r.phase) {
            phases.push(r.phase.clone());
        }
        if !mechs.contains(&r.mechanism) {
            mechs.push(r.mechanism.clone());
        }
    }
    let find = |m: &str, p: &str| rows.iter().find(|r| r.mechanism == m && r.phase == p);
    let panels: Vec<Panel> = phases
        .iter()
        .map(|p| {
            let mix = find(&mechs[0], p).map_or(String::new(), |r| r.mix.clone());
            Panel {
                title: format!("{p} ({mix}): throughput (bars) and % of raw (lollipops)"),
                y_label: "ops/s".into(),
                categories: mechs.clone(),
                series: vec![(
                    "ops/s".into(),
                    mechs
                        .iter()
                        .map(|m| find(m, p).map_or(0.0, |r| r.ops_per_s))
                        .collect(),
                )],
                lollipop: Some((
                    "% of raw".into(),
                    mechs
                        .iter()
                        .map(|m| find(m, p).and_then(|r| r.pct_of_raw))
                        .collect(),
                )),
            }
        })
        .collect();
    write_panels(dir, "pct_of_raw", &panels)
}

// ---------------------------------------------------------------------------------------------
// Bar charts with lollipops (KVMD Fig. 9-12 style)

/// One chart: grouped bars per category, and optionally a lollipop per category on a second
/// (percent) axis.
pub(super) struct Panel {
    pub(super) title: String,
    pub(super) y_label: String,
    pub(super) categories: Vec<String>,
    /// (name, one value per category).
    pub(super) series: Vec<(String, Vec<f64>)>,
    /// (name, one percentage per category).
    pub(super) lollipop: Option<(String, Vec<Option<f64>>)>,
}

/// Bar colours (the lollipops are red).
pub(super) const BAR_COLORS: [RGBColor; 5] = [
    RGBColor(107, 174, 214),
    RGBColor(33, 113, 181),
    RGBColor(253, 174, 107),
    RGBColor(116, 196, 118),
    RGBColor(158, 154, 200),
];

/// Writes `<stem>.png` and `<stem>.svg`, the panels stacked.
pub(super) fn write_panels(dir: &Path, stem: &str, panels: &[Panel]) -> Result<Vec<PathBuf>> {
    ensure_font()?;
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    let size = (1000, 420 * panels.len().max(1) as u32);
    draw_panels(BitMapBackend::new(&png, size).into_drawing_area(), panels)
        .with_context(|| format!("drawing {}", png.display()))?;
    draw_panels(SVGBackend::new(&svg, size).into_drawing_area(), panels)
        .with_context(|| format!("drawing {}", svg.display()))?;
    Ok(vec![png, svg])
}

pub(super) fn draw_panels<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    panels: &[Panel],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (area, p) in areas.iter().zip(panels) {
        let n = p.categories.len().max(1);
        let y1 = p
            .series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .fold(0.0f64, f64::max);
        // Headroom above the tallest bar and lollipop for the legend.
        let y1 = if y1 > 0.0 { y1 * 1.3 } else { 1.0 };
        let pct_max = p
            .lollipop
            .iter()
            .flat_map(|l| l.1.iter().flatten().copied())
            .fold(0.0f64, f64::max);
        let y2 = (pct_max * 1.35).max(120.0);
        let x = -0.5f64..(n as f64 - 0.5);
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .right_y_label_area_size(if p.lollipop.is_some() { 60 } else { 10 })
            .build_cartesian_2d(x.clone(), 0.0..y1)
            .map_err(err)?
            .set_secondary_coord(x, 0.0..y2);
        let label = |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 {
                p.categories.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        // Enough decimals to tell ticks about a tenth of the range apart.
        let decimals = (-(y1 / 10.0).log10()).ceil().clamp(0.0, 4.0) as usize;
        let y_fmt = |v: &f64| format!("{v:.decimals$}");
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_labels(n * 4 + 1)
            .x_label_formatter(&label)
            .y_label_formatter(&y_fmt)
            .y_desc(p.y_label.as_str())
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        let groups = p.series.len().max(1) as f64;
        let width = 0.7 / groups;
        for (j, (name, values)) in p.series.iter().enumerate() {
            let color = BAR_COLORS[j % BAR_COLORS.len()].to_rgba();
            let x0 = |i: usize| i as f64 - 0.35 + j as f64 * width;
            chart
                .draw_series(values.iter().enumerate().map(|(i, &v)| {
                    Rectangle::new([(x0(i), 0.0), (x0(i) + width * 0.9, v)], color.filled())
                }))
                .map_err(err)?
                .label(name.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        if let Some((name, pcts)) = &p.lollipop {
            chart
                .configure_secondary_axes()
                .y_desc("% of raw")
                .y_label_formatter(&|v: &f64| format!("{v:.0}"))
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(err)?;
            let red = RGBColor(214, 39, 40);
            chart
                .draw_secondary_series(std::iter::once(PathElement::new(
                    vec![(-0.5, 100.0), (n as f64 - 0.5, 100.0)],
                    RGBColor(160, 160, 160).stroke_width(1),
                )))
                .map_err(err)?;
            let points: Vec<(f64, f64)> = pcts
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.map(|v| (i as f64, v)))
                .collect();
            chart
                .draw_secondary_series(
                    points.iter().map(|&(i, v)| {
                        PathElement::new(vec![(i, 0.0), (i, v)], red.stroke_width(2))
                    }),
                )
                .map_err(err)?
                .label(name.clone())
                .legend(move |(x, y)| Circle::new((x + 6, y), 5, red.filled()));
            chart
                .draw_secondary_series(
                    points
                        .iter()
                        .map(|&(i, v)| Circle::new((i, v), 6, red.filled())),
                )
                .map_err(err)?;
            chart
                .draw_secondary_series(points.iter().map(|&(i, v)| {
                    Text::new(
                        format!("{v:.0}%"),
                        (i + 0.06, v + y2 * 0.02),
                        ("sans-serif", 14).into_font().color(&BLACK),
                    )
                }))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
