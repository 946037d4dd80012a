//! Line charts as PNG and SVG. Text needs a TrueType font, found on the system at run time;
//! without one the charts are skipped with a clear message rather than drawn without labels.

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// Where Debian and most distributions keep a plain sans-serif font.
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers a system font with plotters once; the error says what to install.
pub fn ensure_font() -> Result<()> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let path = FONT_PATHS
            .iter()
            .find(|p| Path::new(p).exists())
            .ok_or_else(|| {
                "no TrueType font found for plot labels (install fonts-dejavu-core)".to_string()
            })?;
        let bytes = std::fs::read(path).map_err(|e| format!("reading {path}: {e}"))?;
        // Plotters keeps the font for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{path} is not a usable font"))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// Line colours that stay distinct on white.
const COLORS: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(0, 0, 0),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(0, 0, 128),
];

/// One named line of (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// How the x axis reads.
pub enum XAxis {
    /// Values are byte counts, drawn on a log2 scale with KiB/MiB labels.
    Bytes,
    /// Plain numbers.
    Linear,
    /// Category i is drawn at x = i with the given label.
    Categories(Vec<String>),
}

/// A line chart to be written as `<stem>.png` and `<stem>.svg`.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x_axis: XAxis,
    pub series: Vec<Series>,
}

impl Chart<'_> {
    /// Writes both files; returns their paths.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<Vec<std::path::PathBuf>> {
        ensure_font()?;
        let png = dir.join(format!("{stem}.png"));
        let svg = dir.join(format!("{stem}.svg"));
        self.draw(BitMapBackend::new(&png, (1000, 620)).into_drawing_area())
            .with_context(|| format!("drawing {}", png.display()))?;
        self.draw(SVGBackend::new(&svg, (1000, 620)).into_drawing_area())
            .with_context(|| format!("drawing {}", svg.display()))?;
        Ok(vec![png, svg])
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, plotters::coord::Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e:?}");
        root.fill(&WHITE).map_err(err)?;
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0));
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1));
        let to_x = |x: f64| match self.x_axis {
            XAxis::Bytes => x.max(1.0).log2(),
            _ => x,
        };
        let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| {
            (a.min(to_x(x)), b.max(to_x(x)))
        });
        let y1 = ys.fold(0.0f64, f64::max);
        let (x0, x1) = if x0 > x1 {
            (0.0, 1.0)
        } else {
            (x0 - 0.3, x1 + 0.3)
        };
        let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.1 };
        let mut chart = ChartBuilder::on(&root)
            .caption(self.title, ("sans-serif", 24))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, 0.0..y1)
            .map_err(err)?;
        let fmt_x = |x: &f64| match &self.x_axis {
            XAxis::Bytes => human_bytes(2f64.powf(x.round()) as u64),
            XAxis::Linear => format!("{x}"),
            XAxis::Categories(c) => {
                let i = x.round();
                if (x - i).abs() < 0.01 && i >= 0.0 {
                    c.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
        };
        let x_labels = match &self.x_axis {
            XAxis::Categories(c) => c.len() * 4 + 1,
            XAxis::Bytes => ((x1 - x0) as usize + 1).min(14),
            XAxis::Linear => 12,
        };
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .x_labels(x_labels)
            .x_label_formatter(&fmt_x)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        for (i, s) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()].to_rgba();
            let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (to_x(x), y)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            // Throughput rises with chunk size and falls with k: keep the legend off the lines.
            .position(match self.x_axis {
                XAxis::Linear => SeriesLabelPosition::UpperRight,
                _ => SeriesLabelPosition::UpperLeft,
            })
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
        Ok(())
    }
}

/// 1536 -> "1.5KiB", 65536 -> "64KiB".
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v}{}", UNITS[u])
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

/// Parses "4096", "4K", "4KiB", "64M", "1G" (binary units).
pub fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a size like 4096, 4K or 64MiB"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => anyhow::bail!("unknown size unit {other:?} in {s:?} (use B, K, M or G)"),
    };
    n.checked_mul(mult)
        .with_context(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("4K").unwrap(), 4096);
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1g").unwrap(), 1 << 30);
        assert!(parse_bytes("4X").is_err());
        assert!(parse_bytes("").is_err());
        assert_eq!(human_bytes(65536), "64KiB");
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(1), "1B");
    }

    #[test]
    fn charts_are_written_when_a_font_exists() {
        if ensure_font().is_err() {
            // The message itself is the behaviour under test on font-less machines.
            assert!(ensure_font()
                .unwrap_err()
                .to_string()
                .contains("fonts-dejavu-core"));
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let chart = Chart {
            title: "t",
            x_label: "x",
            y_label: "y",
            x_axis: XAxis::Bytes,
            series: vec![Series {
                name: "a".into(),
                points: vec![(1024.0, 1.0), (4096.0, 3.0)],
            }],
        };
        let files = chart.write(dir.path(), "c").unwrap();
        let png = std::fs::read(&files[0]).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let svg = std::fs::read_to_string(&files[1]).unwrap();
        assert!(svg.contains("<svg") && svg.contains("4KiB"));
    }
}
