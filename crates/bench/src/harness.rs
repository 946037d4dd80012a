//! What every benchmark shares: the machine description at the head of each report, where the
//! results go (`--out`, `--json`, `--no-plots`, `--quiet`), and the process's resource usage
//! (CPU split into user and system time, context switches). Benchmarks move onto it one at a
//! time (issue 17 part 5); `ceph_study` is the first built on it.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The CPU model and count, for reports.
pub fn machine_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(str::trim)
        .unwrap_or("unknown CPU");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cpus} CPUs")
}

/// Where a benchmark's results go.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OutputArgs {
    /// Folder for results.json, results.csv, summary.md and the plots.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the report as JSON: to stdout with a bare `--json` (the table then goes to
    /// stderr), or to the file named.
    #[arg(long, num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// Skip the plots.
    #[arg(long)]
    pub no_plots: bool,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

impl OutputArgs {
    /// Whether stdout carries the JSON report (human lines then go to stderr).
    pub fn json_on_stdout(&self) -> bool {
        self.json.as_deref() == Some(Path::new("-"))
    }

    /// Prints a line for people: to stdout, or stderr when stdout carries JSON.
    pub fn say(&self, line: &str) {
        if self.json_on_stdout() {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// Writes the JSON report where `--json` says, and the named files under `--out`; returns
    /// the files written.
    pub fn write(&self, json: &str, files: &[(&str, String)]) -> Result<Vec<PathBuf>> {
        let mut written = Vec::new();
        match self.json.as_deref() {
            Some(p) if p == Path::new("-") => println!("{json}"),
            Some(p) => {
                write_file(p, json)?;
                written.push(p.to_path_buf());
            }
            None => {}
        }
        if let Some(out) = &self.out {
            for (name, body) in files {
                let p = out.join(name);
                write_file(&p, body)?;
                written.push(p);
            }
        }
        Ok(written)
    }

    /// Of the files `write` returned, those under `--out` (the `--json` file was named by hand).
    pub fn under_out(&self, mut written: Vec<PathBuf>) -> Vec<PathBuf> {
        if let (Some(json), Some(out)) = (self.json.as_deref(), self.out.as_deref()) {
            written.retain(|p| p != json || p.starts_with(out));
        }
        written
    }

    /// After `write`: draws the plots under `--out` unless `--no-plots`, then lists the files
    /// there. A plot that fails is said and skipped: the numbers are already written.
    pub fn plot_and_list(
        &self,
        written: Vec<PathBuf>,
        plot: impl FnOnce(&Path) -> Result<Vec<PathBuf>>,
    ) {
        let Some(out) = &self.out else {
            return;
        };
        let mut written = self.under_out(written);
        if !self.no_plots {
            match plot(out) {
                Ok(files) => written.extend(files),
                Err(e) => self.say(&format!("plot skipped: {e:#}")),
            }
        }
        self.say("wrote:");
        for p in written {
            self.say(&format!("  {}", p.display()));
        }
    }
}

/// Writes a file, making its folder first.
pub fn write_file(path: &Path, body: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))
}

/// CPU time and context switches, of the process or of one thread (`getrusage`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Seconds in user mode.
    pub user_s: f64,
    /// Seconds in the kernel.
    pub system_s: f64,
    /// Voluntary and involuntary context switches.
    pub context_switches: u64,
}

impl Usage {
    /// The whole process, all threads.
    pub fn process() -> Usage {
        rusage(libc::RUSAGE_SELF)
    }

    /// The calling thread.
    pub fn thread() -> Usage {
        rusage(libc::RUSAGE_THREAD)
    }

    /// What was used since `earlier`.
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            user_s: (self.user_s - earlier.user_s).max(0.0),
            system_s: (self.system_s - earlier.system_s).max(0.0),
            context_switches: self
                .context_switches
                .saturating_sub(earlier.context_switches),
        }
    }

    /// This usage less another's (a client measured apart from the process it runs in).
    pub fn minus(&self, other: &Usage) -> Usage {
        self.since(other)
    }
}

/// Bytes this process has made the storage layer read and write so far (`/proc/self/io`
/// `read_bytes` and `write_bytes`: what reached the block devices, page cache hits not
/// counted); `None` where the kernel does not say.
pub fn process_disk_bytes() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
    };
    Some((field("read_bytes:")?, field("write_bytes:")?))
}

fn rusage(who: libc::c_int) -> Usage {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage through a valid pointer.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return Usage::default();
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Usage {
        user_s: secs(ru.ru_utime),
        system_s: secs(ru.ru_stime),
        context_switches: (ru.ru_nvcsw + ru.ru_nivcsw).max(0) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_grows_with_work_and_subtracts() {
        let a = Usage::thread();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let d = Usage::thread().since(&a);
        assert!(d.user_s + d.system_s > 0.01, "{d:?}");
        assert_eq!(d.minus(&d), Usage::default());
        if let Some((r, w)) = process_disk_bytes() {
            // Counters only grow.
            let (r2, w2) = process_disk_bytes().unwrap();
            assert!(r2 >= r && w2 >= w);
        }
        let p = Usage::process();
        assert!(p.user_s + p.system_s >= d.user_s + d.system_s - 0.001);
    }

    #[test]
    fn the_json_file_comes_first_and_is_not_under_out() {
        let dir = tempfile::tempdir().unwrap();
        let output = OutputArgs {
            json: Some(dir.path().join("r.json")),
            out: Some(dir.path().join("out")),
            ..OutputArgs::default()
        };
        assert!(!output.json_on_stdout());
        let written = output.write("{}", &[("a.csv", "x\n".into())]).unwrap();
        assert_eq!(
            written,
            [dir.path().join("r.json"), dir.path().join("out/a.csv")]
        );
        assert_eq!(output.under_out(written), [dir.path().join("out/a.csv")]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("r.json")).unwrap(),
            "{}"
        );
        let stdout = OutputArgs {
            json: Some("-".into()),
            ..OutputArgs::default()
        };
        assert!(stdout.json_on_stdout());
        assert_eq!(
            stdout.under_out(vec![PathBuf::from("x")]),
            [PathBuf::from("x")]
        );
    }
}
