//! The devices of one measured array, metered, and the process's CPU and context-switch
//! counters read around each phase.

use super::*;

/// How to build each device of an array.
#[derive(Debug, Clone)]
pub(super) struct DevSpec {
    pub(super) backend: Backend,
    /// Largest value a device accepts.
    pub(super) value_bytes_max: usize,
    /// Capacity of each device.
    pub(super) capacity_bytes: u64,
    /// Operations in flight per device.
    pub(super) queue_depth_max: usize,
    pub(super) buffered: bool,
    /// Logical size of each simulated SSD.
    pub(super) sim_logical_bytes: u64,
}

impl DevSpec {
    pub(super) fn build(&self, dir: Option<&Path>) -> Result<(Arc<dyn Device>, Option<bool>)> {
        let limits = Limits {
            value_bytes_max: self.value_bytes_max.max(Limits::default().value_bytes_max),
            ..Limits::default()
        };
        Ok(match self.backend {
            Backend::Mem => (
                Arc::new(MemDevice::new(MemConfig {
                    capacity_bytes: self.capacity_bytes,
                    limits,
                    queue_depth_max: self.queue_depth_max,
                })?),
                None,
            ),
            Backend::File => {
                let dir = dir.context("a file device needs a folder")?;
                let buffer = (4 * (limits.value_bytes_max + 8192))
                    .max(FileConfig::default().write_buffer_bytes);
                let dev = FileDevice::open(
                    dir,
                    FileConfig {
                        capacity_bytes: self.capacity_bytes,
                        limits,
                        queue_depth_max: self.queue_depth_max,
                        write_buffer_bytes: buffer,
                        segment_bytes: (64u64 << 20).max(2 * buffer as u64),
                        compaction: CompactionPolicy::Auto {
                            dead_ratio_min: 0.5,
                        },
                        direct_io: !self.buffered,
                        ..Default::default()
                    },
                )
                .with_context(|| format!("opening a file device in {}", dir.display()))?;
                let direct = dev.direct_io();
                (Arc::new(dev), Some(direct))
            }
            Backend::Sim => {
                let inner: Arc<dyn Device> = Arc::new(MemDevice::new(MemConfig {
                    capacity_bytes: u64::MAX / 4,
                    limits,
                    queue_depth_max: 1 << 16,
                })?);
                let cfg = SimConfig {
                    queue_depth_max: self
                        .queue_depth_max
                        .max(SimConfig::default().queue_depth_max),
                    ..sim_config(self.sim_logical_bytes, true, VIRTUAL_TIME_DILATION)
                };
                (Arc::new(SimDevice::new(inner, cfg)?), None)
            }
        })
    }
}

/// The devices of one run, metered, and the folder that holds them.
pub(super) struct Array {
    pub(super) metered: Vec<Arc<MeteredDevice>>,
    pub(super) direct_io: Option<bool>,
    pub(super) folder: Option<PathBuf>,
}

/// Marks folders this benchmark created, so a rerun may clear what a crashed run left.
pub(super) const MARKER: &str = ".railstore-bench";

pub(super) fn fresh_folder(dir: &Path) -> Result<()> {
    if dir.exists() {
        ensure!(
            dir.join(MARKER).exists(),
            "{} exists and was not made by railstore bench; remove it or pick another --path",
            dir.display()
        );
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(
        dir.join(MARKER),
        b"made by railstore bench; safe to delete\n",
    )?;
    Ok(())
}

impl Array {
    pub(super) fn build(spec: &DevSpec, n: usize, folder: Option<PathBuf>) -> Result<Array> {
        if let Some(f) = &folder {
            fresh_folder(f)?;
        }
        let mut metered = Vec::with_capacity(n);
        let mut direct_io = None;
        for i in 0..n {
            let dir = folder.as_ref().map(|f| f.join(format!("dev{i}")));
            let (dev, direct) = spec.build(dir.as_deref())?;
            direct_io = direct_io.or(direct);
            metered.push(Arc::new(MeteredDevice::new(dev)));
        }
        Ok(Array {
            metered,
            direct_io,
            folder,
        })
    }

    pub(super) fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.metered
            .iter()
            .map(|m| m.clone() as Arc<dyn Device>)
            .collect()
    }

    /// Drops the devices (file devices flush and close) and removes the folder.
    pub(super) fn remove(self, keep: bool) {
        let Array {
            metered, folder, ..
        } = self;
        drop(metered);
        if let (Some(f), false) = (folder, keep) {
            let _ = std::fs::remove_dir_all(f);
        }
    }
}

/// Device operation totals over an array.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct DevTotals {
    pub(super) stores: u64,
    pub(super) bytes_written: u64,
    pub(super) retrieves: u64,
    pub(super) bytes_read: u64,
    pub(super) deletes: u64,
}

impl DevTotals {
    pub(super) fn of<'a>(devs: impl IntoIterator<Item = &'a Arc<MeteredDevice>>) -> DevTotals {
        let mut t = DevTotals::default();
        for d in devs {
            for s in d.snapshot() {
                match s.kind {
                    OpKind::Store => {
                        t.stores += s.ops;
                        t.bytes_written += s.bytes_in;
                    }
                    OpKind::Retrieve => {
                        t.retrieves += s.ops;
                        t.bytes_read += s.bytes_out;
                    }
                    OpKind::Iterate => t.bytes_read += s.bytes_out,
                    OpKind::Delete => t.deletes += s.ops,
                    _ => {}
                }
            }
        }
        t
    }

    pub(super) fn since(&self, b: &DevTotals) -> DevTotals {
        DevTotals {
            stores: self.stores - b.stores,
            bytes_written: self.bytes_written - b.bytes_written,
            retrieves: self.retrieves - b.retrieves,
            bytes_read: self.bytes_read - b.bytes_read,
            deletes: self.deletes - b.deletes,
        }
    }
}

/// Process CPU time and context switches (`getrusage`, all threads).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Usage {
    pub(super) cpu_s: f64,
    pub(super) ctx_switches: u64,
}

impl Usage {
    pub(super) fn now() -> Usage {
        // SAFETY: rusage is plain old data, for which all-zero bytes are a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes one rusage through a valid, exclusive pointer.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return Usage::default();
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        Usage {
            cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
            ctx_switches: (ru.ru_nvcsw + ru.ru_nivcsw).max(0) as u64,
        }
    }
}
