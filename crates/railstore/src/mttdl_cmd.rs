//! `railstore mttdl`: the KVMD §5.1 reliability model (eq. 1–2) and the §5.2 Table 4 costs,
//! with numbers, for a list of mechanisms. The model lives in
//! `railstore_redundancy::mttdl`; this file parses options and prints.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use railstore_redundancy::mttdl::{
    evaluate, format_log10, FracRange, Hours, MttdlParams, MttdlRow, MttdlScheme, Repair,
};

/// Options of `railstore mttdl`.
#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("repair").args(["mttr_hours", "repair_rate", "repair_mbps", "rebuild_json"])))]
pub struct MttdlArgs {
    /// Device mean time to failure, hours.
    #[arg(long, default_value_t = 2_000_000.0)]
    pub mttf_hours: f64,
    /// Capacity of one device. KB/MB/GB/TB/PB are powers of 1000 (drive vendors' units),
    /// KiB/MiB/GiB/TiB/PiB and bare K/M/G/T/P powers of 1024; decimals allowed (1.92TB).
    #[arg(long, default_value = "4TB", value_parser = parse_size)]
    pub capacity: f64,
    /// Average user object (value) size O.
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    pub object_size: f64,
    /// Average packing metadata object size M (its keys and value sizes).
    #[arg(long, default_value = "256B", value_parser = parse_size)]
    pub metadata_size: f64,
    /// Devices in the array; every set needs that many distinct devices or fewer.
    #[arg(long, default_value_t = 24)]
    pub devices: u32,
    /// Fraction of the raw capacity that holds valid data (KVMD rebuilds and counts only that).
    #[arg(long, default_value_t = 1.0)]
    pub fill: f64,
    /// Mean time to repair one lost set member (object, chunk; a device for RAID), hours:
    /// mu = 1/MTTR for every mechanism.
    #[arg(long)]
    pub mttr_hours: Option<f64>,
    /// Repair rate mu, set members per hour, for every mechanism.
    #[arg(long)]
    pub repair_rate: Option<f64>,
    /// Measured rebuild throughput, MB/s (10^6 bytes) restored: mu = throughput / bytes per
    /// lost member (object, chunk O/k, object + metadata, whole device for RAID).
    /// The default when no repair option is given: 100.
    #[arg(long)]
    pub repair_mbps: Option<f64>,
    /// Repair rates measured by `railstore bench rebuild --json FILE`: each mechanism takes its
    /// own measured rebuild MB/s (the largest run of it in the file), RAID rows the measured
    /// full-device copy MB/s.
    #[arg(long)]
    pub rebuild_json: Option<PathBuf>,
    /// Mechanisms, comma separated: hash, rep<r>, split<k>+<m>, pack<k>+<m>, raid1x<r>,
    /// raid5x<n>, raid6x<n>.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "hash,rep3,split4+2,pack4+2,split6+3,split10+4,raid1x3,raid6x6"
    )]
    pub mechanisms: Vec<MttdlScheme>,
    /// Also write the rows as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

const DEFAULT_REPAIR_MBPS: f64 = 100.0;

/// Rebuild throughputs read from `railstore bench rebuild --json`.
struct MeasuredRebuilds {
    by_mechanism: std::collections::BTreeMap<String, f64>,
    full_copy_mbps: f64,
}

fn measured_rebuilds(path: &std::path::Path) -> Result<MeasuredRebuilds> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let runs: Vec<serde_json::Value> = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a bench rebuild JSON array", path.display()))?;
    let mut by_mechanism = std::collections::BTreeMap::new();
    let mut best_objects = std::collections::BTreeMap::new();
    let mut full_copy_mbps: f64 = 0.0;
    for r in &runs {
        let field = |k: &str| {
            r.get(k)
                .with_context(|| format!("{}: a run without {k:?}", path.display()))
        };
        let mech = field("mechanism")?.as_str().unwrap_or_default().to_string();
        let objects = field("objects")?.as_u64().unwrap_or(0);
        let mbps = field("rebuild_mb_per_s")?.as_f64().unwrap_or(0.0);
        full_copy_mbps = full_copy_mbps.max(field("full_copy_mb_per_s")?.as_f64().unwrap_or(0.0));
        // The run with the most objects is the least dominated by fixed costs.
        if best_objects.get(&mech).is_none_or(|&o| objects > o) {
            best_objects.insert(mech.clone(), objects);
            by_mechanism.insert(mech, mbps);
        }
    }
    if by_mechanism.is_empty() || full_copy_mbps <= 0.0 {
        bail!("{}: no rebuild runs with throughput", path.display());
    }
    Ok(MeasuredRebuilds {
        by_mechanism,
        full_copy_mbps,
    })
}

/// Parses `4TB`, `1.92TB`, `64KiB`, `4K`, `512`, `256B` into bytes.
pub fn parse_size(s: &str) -> Result<f64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a size like 4TB, 64KiB or 4096"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let mult = match unit.as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "pb" => 1e15,
        "k" | "kib" => 1024f64,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "p" | "pib" => 1024f64.powi(5),
        other => bail!("unknown size unit {other:?} in {s:?} (use B, KB..PB or KiB..PiB)"),
    };
    let bytes = n * mult;
    if !(bytes > 0.0 && bytes.is_finite()) {
        bail!("size {s:?} must be positive");
    }
    Ok(bytes)
}

/// `65536` → `64 KiB`, `4e12` → `4 TB`, `1.92e12` → `1.92 TB`, `65792` → `65.8 kB`.
fn human_bytes(b: f64) -> String {
    if b < 1000.0 {
        return format!("{} B", trim_float(b, 3));
    }
    let largest = |base: f64, units: &[&'static str]| {
        let mut v = b;
        let mut unit = "B";
        for u in units {
            if v / base < 1.0 {
                break;
            }
            v /= base;
            unit = u;
        }
        (v, unit)
    };
    let (v, unit) = largest(1024.0, &["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]);
    if v.fract() == 0.0 && unit != "B" {
        return format!("{v} {unit}");
    }
    let (v, unit) = largest(1000.0, &["kB", "MB", "GB", "TB", "PB", "EB"]);
    if (v * 100.0).fract() == 0.0 {
        return format!("{} {unit}", trim_float(v, 6));
    }
    format!("{} {unit}", trim_float(v, 3))
}

/// Three significant digits without trailing zeros: `4`, `65.8`, `0.333`.
fn trim_float(v: f64, sig: i32) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let decimals = (sig - 1 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn sci(x: f64) -> String {
    format_log10(x.log10())
}

fn hours_and_duration(h: f64) -> String {
    if h < 1.0 / 60.0 {
        format!("{} s", trim_float(h * 3600.0, 3))
    } else if h < 1.0 {
        format!("{} min", trim_float(h * 60.0, 3))
    } else if h < 48.0 {
        format!("{} h", trim_float(h, 3))
    } else if h < 1000.0 * 24.0 {
        format!("{} d", trim_float(h / 24.0, 3))
    } else {
        format!("{} years", sci(h / 8766.0))
    }
}

fn params(args: &MttdlArgs) -> (MttdlParams, String) {
    let (repair, text) = match (args.mttr_hours, args.repair_rate, args.repair_mbps) {
        (Some(h), _, _) => (
            Repair::Rate { per_hour: 1.0 / h },
            format!(
                "MTTR {} h per lost set member: mu = {} /h for every mechanism (RAID: a member is \
                 a device)",
                trim_float(h, 3),
                sci(1.0 / h)
            ),
        ),
        (_, Some(r), _) => (
            Repair::Rate { per_hour: r },
            format!(
                "mu = {} set members/h for every mechanism (RAID: a member is a device)",
                sci(r)
            ),
        ),
        (_, _, mbps) => {
            let mbps = mbps.unwrap_or(DEFAULT_REPAIR_MBPS);
            (
                Repair::Throughput {
                    bytes_per_sec: mbps * 1e6,
                },
                format!(
                    "rebuild throughput {} MB/s{}: mu = throughput x 3600 / bytes per lost member",
                    trim_float(mbps, 4),
                    if args.repair_mbps.is_none() {
                        " (default)"
                    } else {
                        ""
                    }
                ),
            )
        }
    };
    (
        MttdlParams {
            mttf_hours: args.mttf_hours,
            device_capacity: args.capacity,
            devices: args.devices,
            object_size: args.object_size,
            metadata_size: args.metadata_size,
            fill: args.fill,
            repair,
        },
        text,
    )
}

/// Runs `railstore mttdl`: prints the tables, writes the JSON when asked.
pub fn run(args: &MttdlArgs) -> Result<()> {
    if args.mechanisms.is_empty() {
        bail!("--mechanisms is empty");
    }
    let (p, repair_text, rows) = match &args.rebuild_json {
        None => {
            let (p, text) = params(args);
            let rows = evaluate(&p, &args.mechanisms)?;
            (p, text, rows)
        }
        Some(path) => {
            let measured = measured_rebuilds(path)?;
            let base = params(args).0;
            let mut rows = Vec::new();
            let mut parts = Vec::new();
            for scheme in &args.mechanisms {
                let name = scheme.to_string();
                let mbps = if matches!(
                    scheme,
                    MttdlScheme::RaidMirror { .. } | MttdlScheme::RaidParity { .. }
                ) {
                    measured.full_copy_mbps
                } else if matches!(scheme, MttdlScheme::Hashing) {
                    // Nothing to rebuild; the rate does not enter its MTTDL.
                    DEFAULT_REPAIR_MBPS
                } else {
                    *measured.by_mechanism.get(&name).with_context(|| {
                        format!(
                            "{} has no rebuild of {name}; measured: {:?}",
                            path.display(),
                            measured.by_mechanism.keys().collect::<Vec<_>>()
                        )
                    })?
                };
                parts.push(format!("{name} {} MB/s", trim_float(mbps, 4)));
                let pm = MttdlParams {
                    repair: Repair::Throughput {
                        bytes_per_sec: mbps * 1e6,
                    },
                    ..base
                };
                rows.extend(evaluate(&pm, std::slice::from_ref(scheme))?);
            }
            let text = format!(
                "measured rebuild throughput from {}: {}; mu = throughput x 3600 / bytes per \
                 lost member",
                path.display(),
                parts.join(", ")
            );
            (base, text, rows)
        }
    };
    print!("{}", render(&p, &repair_text, &rows));
    if let Some(path) = &args.json {
        std::fs::write(path, to_json(&p, &rows))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}

fn render(p: &MttdlParams, repair_text: &str, rows: &[MttdlRow]) -> String {
    let mut out = String::new();
    let o = &mut out;
    let _ = writeln!(
        o,
        "KVMD reliability model (§5.1, eq. 1-2) and Table 4 (§5.2)"
    );
    let _ = writeln!(
        o,
        "array: {} devices x {}, {}% holding data; device MTTF {} h (lambda = {} /h)",
        p.devices,
        human_bytes(p.device_capacity),
        trim_float(p.fill * 100.0, 3),
        trim_float(p.mttf_hours, 6),
        sci(p.lambda())
    );
    let _ = writeln!(
        o,
        "objects: O = {} average, packing metadata M = {}",
        human_bytes(p.object_size),
        human_bytes(p.metadata_size)
    );
    let _ = writeln!(o, "repair: {repair_text}");
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "MTTDL = MTTDL_set / N_RS (eq. 1); MTTDL_set ~ mu^(f-1) / ((N)_(f-1) lambda^f) (eq. 2) \
         and exact (Markov chain of Fig. 13)"
    );
    let mut t = Table::new(&[
        "mechanism",
        "f",
        "N",
        "member",
        "mu (/h)",
        "N_RS",
        "MTTDL_set eq.2 (h)",
        "MTTDL_set exact (h)",
        "MTTDL eq.2 (years)",
        "MTTDL exact (years)",
    ]);
    for r in rows {
        let member = match (r.scheme, r.repair_unit_bytes) {
            (s, _) if s.is_raid() => "1 device".to_string(),
            (_, Some(u)) => human_bytes(u),
            (_, None) => "-".to_string(),
        };
        let n_rs = if r.scheme == MttdlScheme::Hashing {
            format!("{} dev", trim_float(r.n_rs, 6))
        } else if r.scheme.is_raid() {
            format!("{} grp", trim_float(r.n_rs, 3))
        } else {
            sci(r.n_rs)
        };
        t.row(vec![
            r.scheme.to_string(),
            r.f.to_string(),
            r.set_width.to_string(),
            member,
            r.mu_per_hour.map_or("-".into(), sci),
            n_rs,
            r.set_approx.to_string(),
            r.set_exact.to_string(),
            years(r.mttdl_approx),
            years(r.mttdl_exact),
        ]);
    }
    o.push_str(&t.render());
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Table 4 (standalone mode): writes/reads = user requests per device request, space = user \
         bytes per raw byte"
    );
    let mut t = Table::new(&[
        "mechanism",
        "writes",
        "reads",
        "space",
        "space+meta",
        "bytes written/user byte",
        "rebuild ∝",
        "rebuild/device",
        "rebuild time",
    ]);
    for r in rows {
        let c = &r.costs;
        let wa = if (c.write_amplification.0 - c.write_amplification.1).abs() < 1e-12 {
            trim_float(c.write_amplification.0, 3)
        } else {
            format!(
                "[{}, {}]",
                trim_float(c.write_amplification.0, 3),
                trim_float(c.write_amplification.1, 3)
            )
        };
        let rebuild = match (c.rebuild_units, c.rebuild_bytes) {
            (Some(_), Some(b)) if r.scheme.is_raid() => format!("{} (all)", human_bytes(b)),
            (Some(n), Some(b)) => format!("{} members, {}", sci(n), human_bytes(b)),
            _ => "-".into(),
        };
        t.row(vec![
            r.scheme.to_string(),
            frac(&c.writes),
            frac(&c.reads),
            frac(&c.space),
            trim_float(c.space_with_metadata, 3),
            wa,
            c.rebuild_scale.to_string(),
            rebuild,
            c.rebuild_hours
                .map_or("data lost".into(), hours_and_duration),
        ]);
    }
    o.push_str(&t.render());
    let _ = writeln!(o);
    for r in rows {
        let _ = writeln!(o, "{:<10} {}", r.scheme.to_string(), r.costs.pros_cons);
    }
    out
}

fn years(h: Hours) -> String {
    format_log10(h.log10_years())
}

fn frac(r: &FracRange) -> String {
    if r.lo == r.hi && r.lo.num != r.lo.den {
        format!("{} ({})", r.lo, trim_float(r.lo.value(), 3))
    } else {
        r.to_string()
    }
}

/// A left-aligned text table with two spaces between columns.
struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(head: &[&str]) -> Self {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, r: Vec<String>) {
        self.rows.push(r);
    }

    fn render(&self) -> String {
        let mut w: Vec<usize> = self.head.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            let s: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<width$}", width = w[i]))
                .collect();
            out.push_str(s.join("  ").trim_end());
            out.push('\n');
        };
        line(&self.head);
        line(&w.iter().map(|&n| "-".repeat(n)).collect::<Vec<String>>());
        for r in &self.rows {
            line(r);
        }
        out
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number; `null` when not finite.
fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:e}")
    } else {
        "null".into()
    }
}

fn json_opt(x: Option<f64>) -> String {
    x.map_or("null".into(), json_num)
}

fn json_hours(key: &str, h: Hours) -> String {
    format!(
        "\"{key}_hours\": {}, \"{key}_log10_hours\": {}, \"{key}_years\": {}, \
         \"{key}_log10_years\": {}",
        json_num(h.hours()),
        json_num(h.log10_hours()),
        json_num(h.years()),
        json_num(h.log10_years())
    )
}

fn json_range(r: &FracRange) -> String {
    format!(
        "{{\"lo\": {}, \"hi\": {}, \"text\": {}}}",
        json_num(r.lo.value()),
        json_num(r.hi.value()),
        json_str(&r.to_string())
    )
}

fn to_json(p: &MttdlParams, rows: &[MttdlRow]) -> String {
    let (repair_kind, repair_value) = match p.repair {
        Repair::Rate { per_hour } => ("objects_per_hour", per_hour),
        Repair::Throughput { bytes_per_sec } => ("bytes_per_sec", bytes_per_sec),
    };
    let mut out = String::new();
    let _ = writeln!(out, "{{");
    let _ = writeln!(
        out,
        "  \"params\": {{\"mttf_hours\": {}, \"device_capacity_bytes\": {}, \"devices\": {}, \
         \"object_size_bytes\": {}, \"metadata_size_bytes\": {}, \"fill\": {}, \"repair\": \
         {{\"{repair_kind}\": {}}}}},",
        json_num(p.mttf_hours),
        json_num(p.device_capacity),
        p.devices,
        json_num(p.object_size),
        json_num(p.metadata_size),
        json_num(p.fill),
        json_num(repair_value)
    );
    let _ = writeln!(out, "  \"rows\": [");
    for (i, r) in rows.iter().enumerate() {
        let c = &r.costs;
        let _ = write!(
            out,
            "    {{\"mechanism\": {}, \"f\": {}, \"objects_per_set\": {}, \
             \"repair_unit_bytes\": {}, \"mu_per_hour\": {}, \"n_rs\": {}, {}, {}, {}, {}, \
             \"table4\": {{\"writes\": {}, \"reads\": {}, \"space\": {}, \
             \"space_with_metadata\": {}, \"write_amplification\": [{}, {}], \
             \"rebuild_scales_with\": {}, \"rebuild_bytes\": {}, \"rebuild_members\": {}, \
             \"rebuild_hours\": {}, \"pros_cons\": {}}}}}",
            json_str(&r.scheme.to_string()),
            r.f,
            r.set_width,
            json_opt(r.repair_unit_bytes),
            json_opt(r.mu_per_hour),
            json_num(r.n_rs),
            json_hours("mttdl_set_approx", r.set_approx),
            json_hours("mttdl_set_exact", r.set_exact),
            json_hours("mttdl_approx", r.mttdl_approx),
            json_hours("mttdl_exact", r.mttdl_exact),
            json_range(&c.writes),
            json_range(&c.reads),
            json_range(&c.space),
            json_num(c.space_with_metadata),
            json_num(c.write_amplification.0),
            json_num(c.write_amplification.1),
            json_str(&c.rebuild_scale.to_string()),
            json_opt(c.rebuild_bytes),
            json_opt(c.rebuild_units),
            json_opt(c.rebuild_hours),
            json_str(c.pros_cons),
        );
        let _ = writeln!(out, "{}", if i + 1 < rows.len() { "," } else { "" });
    }
    let _ = writeln!(out, "  ]");
    let _ = writeln!(out, "}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4TB").unwrap(), 4e12);
        assert_eq!(parse_size("1.92TB").unwrap(), 1.92e12);
        assert_eq!(parse_size("64KiB").unwrap(), 65536.0);
        assert_eq!(parse_size("4K").unwrap(), 4096.0);
        assert_eq!(parse_size("512").unwrap(), 512.0);
        assert_eq!(parse_size("256 B").unwrap(), 256.0);
        assert_eq!(parse_size("1tib").unwrap(), 1024f64.powi(4));
        for bad in ["", "TB", "4XB", "0", "-1KB", "1..2KB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn human() {
        assert_eq!(human_bytes(65536.0), "64 KiB");
        assert_eq!(human_bytes(16384.0), "16 KiB");
        assert_eq!(human_bytes(4e12), "4 TB");
        assert_eq!(human_bytes(1.92e12), "1.92 TB");
        assert_eq!(human_bytes(1024f64.powi(4)), "1 TiB");
        assert_eq!(human_bytes(65792.0), "65.8 kB");
        assert_eq!(human_bytes(256.0), "256 B");
        assert_eq!(trim_float(1.0 / 3.0, 3), "0.333");
        assert_eq!(trim_float(2_000_000.0, 6), "2000000");
        assert_eq!(hours_and_duration(11.111), "11.1 h");
        assert_eq!(hours_and_duration(0.5), "30 min");
        assert_eq!(hours_and_duration(72.0), "3 d");
        assert_eq!(hours_and_duration(8766e6), "1.00e6 years");
    }

    #[test]
    fn json_is_plain() {
        assert_eq!(json_num(3.0), "3e0");
        assert_eq!(json_num(f64::INFINITY), "null");
        assert_eq!(json_str("a\"b\n"), "\"a\\\"b\\u000a\"");
    }
}
