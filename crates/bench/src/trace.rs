//! Block traces (`../shared/traces/README.md`): reading the three formats there into one list
//! of requests, and writing requests in the FlashNet/Heimdall format, the one a volume's own
//! requests are recorded in. `bench mixed` maps them onto keys; `bench volume-trace` replays
//! them onto a volume at their offsets.

use anyhow::{ensure, Context, Result};
use std::io::BufRead;
use std::path::Path;

/// Formats of the traces in `/work/shared/traces`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// MQSim / DiskSim ASCII: `arrival_ns device lba(512 B) size(sectors) type(1 read)`.
    Mqsim,
    /// FlashNet/Heimdall: `timestamp_ms device offset_bytes size_bytes op(1 read)`.
    Heimdall,
    /// libCacheSim CSV: `version,time,op,size,lbn` (op 28 read, 2a write; time in seconds).
    Cloudphysics,
}

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRequest {
    /// Arrival in nanoseconds on the trace's clock (not yet from its start).
    pub at_ns: f64,
    /// The trace's device number.
    pub device: u64,
    /// Byte offset.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    pub write: bool,
}

/// Reads a trace (gzip'ed when its name ends in `.gz`); the format is guessed from the first
/// line unless given. Requests come back in arrival order; other SCSI commands of the
/// CloudPhysics format are skipped.
pub fn read_requests(path: &Path, format: Option<TraceFormat>) -> Result<Vec<TraceRequest>> {
    let reader: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "gz") {
        let out = std::process::Command::new("gzip")
            .arg("-dc")
            .arg(path)
            .output()
            .with_context(|| format!("running gzip -dc {}", path.display()))?;
        ensure!(
            out.status.success(),
            "gzip -dc {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Box::new(std::io::Cursor::new(out.stdout))
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
        ))
    };
    let mut format = format;
    let mut raw = Vec::new();
    for (no, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if format.is_none() {
            format = Some(if line.starts_with("version,") || line.contains(',') {
                TraceFormat::Cloudphysics
            } else if line
                .split_whitespace()
                .next()
                .is_some_and(|t| t.contains('.'))
            {
                TraceFormat::Heimdall
            } else {
                TraceFormat::Mqsim
            });
        }
        if line.starts_with("version,") {
            continue;
        }
        let bad = || anyhow::anyhow!("{} line {}: cannot parse {line:?}", path.display(), no + 1);
        let f: Vec<&str> = match format {
            Some(TraceFormat::Cloudphysics) => line.split(',').map(str::trim).collect(),
            _ => line.split_whitespace().collect(),
        };
        if f.len() < 5 {
            return Err(bad());
        }
        let num = |s: &str| s.parse::<f64>().map_err(|_| bad());
        let int = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let (at_ns, device, offset, len, write) = match format.expect("set above") {
            TraceFormat::Mqsim => (
                num(f[0])?,
                int(f[1])?,
                int(f[2])? * 512,
                int(f[3])? * 512,
                int(f[4])? == 0,
            ),
            TraceFormat::Heimdall => (
                num(f[0])? * 1e6,
                int(f[1])?,
                int(f[2])?,
                int(f[3])?,
                int(f[4])? == 0,
            ),
            TraceFormat::Cloudphysics => {
                let op = u64::from_str_radix(f[2], 16).map_err(|_| bad())?;
                let write = match op {
                    0x28 | 0x08 | 0x88 | 0xa8 => false,
                    0x2a | 0x0a | 0x8a | 0xaa => true,
                    _ => continue,
                };
                (num(f[1])? * 1e9, 0, int(f[4])? * 512, int(f[3])?, write)
            }
        };
        raw.push(TraceRequest {
            at_ns,
            device,
            offset,
            len,
            write,
        });
    }
    ensure!(!raw.is_empty(), "{} holds no requests", path.display());
    raw.sort_by(|a, b| a.at_ns.total_cmp(&b.at_ns));
    Ok(raw)
}

/// One request as a line of the FlashNet/Heimdall format (milliseconds with three decimals).
pub fn heimdall_line(r: &TraceRequest) -> String {
    format!(
        "{:.3} {} {} {} {}",
        r.at_ns / 1e6,
        r.device,
        r.offset,
        r.len,
        if r.write { 0 } else { 1 }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_reads_and_heimdall_lines_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("m.trace", "200 1 8 8 0\n100 0 8 16 1\n", TraceFormat::Mqsim),
            (
                "h.trace",
                "0.125 0 4096 8192 1\n1.5 0 0 512 0\n",
                TraceFormat::Heimdall,
            ),
            (
                "c.csv",
                "version,time,op,size,lbn\n1,2,28,4096,8\n1,3,35,0,0\n1,1,2a,512,0\n",
                TraceFormat::Cloudphysics,
            ),
        ];
        for (name, body, format) in cases {
            let p = dir.path().join(name);
            std::fs::write(&p, body).unwrap();
            let guessed = read_requests(&p, None).unwrap();
            assert_eq!(guessed, read_requests(&p, Some(format)).unwrap(), "{name}");
            assert_eq!(guessed.len(), 2, "{name}: {guessed:?}");
            assert!(guessed[0].at_ns <= guessed[1].at_ns, "{name}: not in order");
            // Written as Heimdall lines, the same requests read back.
            let back = dir.path().join(format!("{name}.heimdall"));
            let lines: Vec<String> = guessed.iter().map(heimdall_line).collect();
            std::fs::write(&back, lines.join("\n")).unwrap();
            let again = read_requests(&back, Some(TraceFormat::Heimdall)).unwrap();
            for (a, b) in guessed.iter().zip(&again) {
                assert!((a.at_ns - b.at_ns).abs() < 1e3, "{name}: {a:?} {b:?}");
                assert_eq!((a.offset, a.len, a.write), (b.offset, b.len, b.write));
            }
        }
        let m = read_requests(&dir.path().join("m.trace"), None).unwrap();
        assert_eq!((m[0].offset, m[0].len, m[0].write), (4096, 8192, false));
        let bad = dir.path().join("bad.trace");
        std::fs::write(&bad, "1 2 3\n").unwrap();
        assert!(read_requests(&bad, None).is_err());
    }
}
