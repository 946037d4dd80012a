//! CPU measurement around a benchmark: hardware counters (cycles, L1D read misses) through
//! `perf_event_open` where the kernel and hypervisor allow it, and process CPU time always.
//! Where counters are missing the report says so; it never invents a number.

use perf_event::events::{Cache, CacheId, CacheOp, CacheResult, Hardware};
use perf_event::{Builder, Counter};

/// Counters opened for this process and the threads it starts afterwards.
pub struct CpuMeter {
    counters: Option<(Counter, Counter)>,
    unavailable: Option<String>,
}

/// What one measured span cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuSample {
    /// CPU cycles, when counters work.
    pub cycles: Option<u64>,
    /// L1 data-cache read misses, when counters work.
    pub l1d_misses: Option<u64>,
    /// Process CPU seconds (user + system, all threads).
    pub cpu_s: f64,
}

impl CpuMeter {
    /// Opens the counters; open them before starting worker threads so they are counted too.
    pub fn new() -> CpuMeter {
        let open = || -> std::io::Result<(Counter, Counter)> {
            let cycles = Builder::new(Hardware::CPU_CYCLES).inherit(true).build()?;
            let misses = Builder::new(Cache {
                which: CacheId::L1D,
                operation: CacheOp::READ,
                result: CacheResult::MISS,
            })
            .inherit(true)
            .build()?;
            Ok((cycles, misses))
        };
        match open() {
            Ok(mut c) => {
                let enabled = c.0.enable().and_then(|_| c.1.enable());
                match enabled {
                    Ok(()) => CpuMeter {
                        counters: Some(c),
                        unavailable: None,
                    },
                    Err(e) => CpuMeter::without(format!("perf_event enable failed: {e}")),
                }
            }
            Err(e) => CpuMeter::without(format!("perf_event_open failed: {e}")),
        }
    }

    fn without(reason: String) -> CpuMeter {
        CpuMeter {
            counters: None,
            unavailable: Some(reason),
        }
    }

    /// Why hardware counters are not reported, if they are not.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// The running totals now; subtract two readings for a span.
    pub fn read(&mut self) -> CpuSample {
        let (cycles, l1d_misses) = match &mut self.counters {
            Some((c, m)) => (c.read().ok(), m.read().ok()),
            None => (None, None),
        };
        CpuSample {
            cycles,
            l1d_misses,
            cpu_s: process_cpu_seconds(),
        }
    }
}

impl Default for CpuMeter {
    fn default() -> Self {
        CpuMeter::new()
    }
}

impl CpuSample {
    /// `self - earlier`.
    pub fn since(&self, earlier: &CpuSample) -> CpuSample {
        let diff = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        CpuSample {
            cycles: diff(self.cycles, earlier.cycles),
            l1d_misses: diff(self.l1d_misses, earlier.l1d_misses),
            cpu_s: self.cpu_s - earlier.cpu_s,
        }
    }

    /// `self + other`.
    pub fn plus(&self, other: &CpuSample) -> CpuSample {
        let sum = |a: Option<u64>, b: Option<u64>| Some(a? + b?);
        CpuSample {
            cycles: sum(self.cycles, other.cycles),
            l1d_misses: sum(self.l1d_misses, other.l1d_misses),
            cpu_s: self.cpu_s + other.cpu_s,
        }
    }
}

/// CPU time of the whole process, all threads, in seconds.
pub fn process_cpu_seconds() -> f64 {
    cpu_seconds(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time of the calling thread, in seconds: unlike wall time it does not grow while other
/// processes hold the core.
pub fn thread_cpu_seconds() -> f64 {
    cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Seconds on a CPU-time clock (0 where it cannot be read).
fn cpu_seconds(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_with_work() {
        let mut meter = CpuMeter::new();
        let a = meter.read();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let d = meter.read().since(&a);
        assert!(d.cpu_s > 0.0, "process CPU time did not advance");
        // Either counters report cycles or the meter says why it cannot.
        assert!(d.cycles.is_some() || meter.unavailable().is_some());
    }
}
