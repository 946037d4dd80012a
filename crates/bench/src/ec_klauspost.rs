//! `ec-bench --against klauspost`: klauspost/reedsolomon (Go, AVX-512+GFNI where present)
//! timed the same way as railstore's engines, in the same run. The Go program (`klauspost/`
//! beside this file, embedded here) is built on first use with the machine's Go, which fetches
//! the module from the Go module proxy; without Go the comparison is skipped with the reason.
//! `RAILSTORE_KLAUSPOST_BIN` names a program built elsewhere instead (for machines without Go).

use crate::ec::{median, Measurement, Point, Row};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

const MAIN_GO: &str = include_str!("../klauspost/main.go");
const GO_MOD: &str = include_str!("../klauspost/go.mod");
const GO_SUM: &str = include_str!("../klauspost/go.sum");

/// The built Go program.
pub struct Klauspost {
    binary: PathBuf,
}

#[derive(serde::Deserialize)]
struct Output {
    version: String,
    rates_gbps: Vec<f64>,
    ops: u64,
    lat_ns_mean_p50_p99: [f64; 3],
    coding_s: f64,
    cpu_s: f64,
}

impl Klauspost {
    /// Builds the program under `dir`; an error says why it cannot (no Go, no module).
    pub fn build(dir: &Path) -> Result<Klauspost> {
        // A machine without Go (the GPU machine) runs a program built elsewhere.
        if let Some(prebuilt) = std::env::var_os("RAILSTORE_KLAUSPOST_BIN") {
            let binary = std::path::absolute(prebuilt)?;
            if !binary.is_file() {
                bail!("RAILSTORE_KLAUSPOST_BIN={}: no such file", binary.display());
            }
            return Ok(Klauspost { binary });
        }
        let go = Command::new("go").arg("version").output();
        match go {
            Ok(o) if o.status.success() => {}
            _ => bail!("Go is not installed (the `go` command was not found)"),
        }
        let src = dir.join("klauspost-src");
        std::fs::create_dir_all(&src)?;
        for (name, body) in [("main.go", MAIN_GO), ("go.mod", GO_MOD), ("go.sum", GO_SUM)] {
            std::fs::write(src.join(name), body)?;
        }
        // Absolute: `go build` runs in the source folder, and a relative `-o` would land there.
        let binary = std::path::absolute(dir.join("klauspost-bench"))?;
        let out = Command::new("go")
            .args(["build", "-o"])
            .arg(&binary)
            .arg(".")
            .current_dir(&src)
            .output()
            .context("running go build")?;
        if !out.status.success() {
            bail!(
                "go build of the klauspost program failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(Klauspost { binary })
    }

    /// One point: klauspost's Cauchy code (the same matrix family as railstore's default) with
    /// one goroutine, one stripe in cache.
    pub fn measure(&self, p: &Point, seed: u64) -> Result<(Row, String)> {
        let (k, m, chunk) = (p.k, p.m, p.chunk);
        let out = Command::new(&self.binary)
            .args(["-k", &k.to_string(), "-m", &m.to_string()])
            .args(["-chunk", &chunk.to_string(), "-op", p.op.name()])
            .args(["-repeat", &p.repeat.to_string()])
            .args([
                "-min-time",
                &p.min_time_s.to_string(),
                "-seed",
                &seed.to_string(),
            ])
            .output()
            .context("running the klauspost program")?;
        if !out.status.success() {
            bail!(
                "the klauspost program failed at RS({k},{m}) {chunk} B: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let o: Output = serde_json::from_slice(&out.stdout)
            .context("reading the klauspost program's output")?;
        let mut rates = o.rates_gbps;
        let data_gbps = median(&mut rates);
        let row = p.row(
            "klauspost",
            Measurement {
                data_gbps,
                lat_us: o.lat_ns_mean_p50_p99.map(|ns| ns / 1e3),
                ops: o.ops,
                threads: 1,
                data_size: k * chunk,
                cpu_s_per_s: o.cpu_s / o.coding_s.max(1e-9),
            },
        );
        Ok((row, o.version))
    }
}

/// Pins this process (and the programs it starts) to one CPU, as klauspost's and ISA-L's own
/// benchmarks are run for single-core figures.
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid, CPU_SET stays in its bounds for cpu < CPU_SETSIZE
    // (checked), and sched_setaffinity only reads the set.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            bail!("--pin {cpu}: no such CPU");
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            bail!("--pin {cpu}: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}
