//! The store's configuration: which devices, which redundancy, whether and how reads and writes
//! are separated, and how objects are cut. [`StoreConfig::default`] is the embedded default;
//! [`StoreConfig::from_toml`] reads the file `railstore init` writes ([`EXAMPLE_TOML`]).

use crate::error::{Result, StoreError};
use railstore_redundancy::{ManagerConfig, Mechanism, Policy};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// What each device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The log-structured `file` device: a folder, a file or a block device.
    File,
    /// A simulated SSD (real-time clock) keeping its data in a `file` device, so its
    /// garbage-collection stalls show up and separation can be watched on one disk.
    Sim,
    /// Memory only: everything is lost at exit (tests, demos).
    Mem,
}

/// The devices of the array.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicesConfig {
    /// What each device is.
    pub kind: DeviceKind,
    /// How many (ignored when `paths` is given).
    pub count: usize,
    /// Files or block devices to use instead of folders under `data_dir/devices`.
    pub paths: Vec<PathBuf>,
    /// Bytes each device may hold.
    pub capacity_bytes: u64,
    /// O_DIRECT for `file` devices (falls back to buffered I/O where refused).
    pub direct_io: bool,
}

/// Read/write separation (see `rails`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeparationConfig {
    /// Frame length T.
    pub frame: Duration,
    /// Colours serving reads at once (at least the k of the widest erasure code); with
    /// `adaptive`, the fewest.
    pub window: usize,
    /// With `adaptive`, the most colours serving reads at once; `None`: the group width less
    /// two (two writer colours, so a guard never leaves the writes without one), or `window`
    /// if that is more.
    pub window_max: Option<usize>,
    /// The window follows the load each frame (Rails §4.3.1: as wide as the writes and the
    /// buffers allow, down to `window`), and each buffer's bound follows its device's measured
    /// write rate by the Rails rule, at most `write_buffer_bytes_max` (docs/rails.md).
    pub adaptive: bool,
    /// How long before joining the window a device stops taking writes.
    pub guard: Duration,
    /// Bound of each device's write buffer.
    pub write_buffer_bytes_max: u64,
    /// Write to a reader when its buffer is full instead of making writers wait.
    pub partial_when_full: bool,
    /// Journal copies of each buffered write, on distinct devices; `None`: the policy's
    /// tolerance + 1, which keeps that tolerance through a power failure. Fewer trade that
    /// guarantee for journal writes.
    pub journal_copies: Option<usize>,
}

impl SeparationConfig {
    /// Journal copies of each buffered write for a policy that tolerates `tolerance` losses.
    pub fn copies(&self, tolerance: usize) -> usize {
        self.journal_copies.unwrap_or(tolerance + 1).max(1)
    }

    /// Writer colours a window must leave: two, so that a guard never leaves the writes
    /// without one, and enough for every buffered write's journal copies on writers other
    /// than its own device (a write short of them waits a frame for new writers).
    fn writer_colours(&self, width: usize, devices: usize, tolerance: usize) -> usize {
        let per_colour = (devices / width.max(1)).max(1);
        self.copies(tolerance).div_ceil(per_colour).max(2)
    }

    /// The widest window in groups of `width` colours over `devices` devices.
    pub fn window_max_in(&self, width: usize, devices: usize, tolerance: usize) -> usize {
        if !self.adaptive {
            return self.window;
        }
        self.window_max
            .unwrap_or(width.saturating_sub(self.writer_colours(width, devices, tolerance)))
            .max(self.window)
    }
}

/// Online repair: how a device that lost its data is noticed, and how hard a rebuild while
/// serving may push the devices (docs/admin.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RepairConfig {
    /// How often each device's files are checked; a device whose folder or files vanished or
    /// shrank is taken out of service. Zero: never.
    pub watch_interval: Duration,
    /// Objects rebuilt (or scrubbed) at once while serving (foreground requests keep the rest
    /// of each device's queue).
    pub concurrency: usize,
    /// Most bytes per second such a rebuild (or a scrub) writes; `None`: no limit.
    pub write_bytes_per_s_max: Option<u64>,
    /// Time from the end of one complete scrub to the start of the next while serving; zero:
    /// no scheduled scrubs.
    pub scrub_interval: Duration,
}

impl RepairConfig {
    /// The throttle of a rebuild or scrub while serving.
    pub fn options(&self) -> railstore_redundancy::RepairOptions {
        railstore_redundancy::RepairOptions {
            concurrency: self.concurrency,
            write_bytes_per_s_max: self.write_bytes_per_s_max,
        }
    }
}

impl Default for RepairConfig {
    fn default() -> Self {
        RepairConfig {
            watch_interval: Duration::from_secs(2),
            concurrency: 6,
            write_bytes_per_s_max: None,
            scrub_interval: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Everything `Store::open` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// The data folder: devices (unless `paths` say otherwise), the layout, the credentials.
    pub data_dir: PathBuf,
    /// The devices.
    pub devices: DevicesConfig,
    /// Mechanisms and layout (the `redundancy` crate's configuration).
    pub manager: ManagerConfig,
    /// Read/write separation; `None` runs without it.
    pub separation: Option<SeparationConfig>,
    /// Bodies up to this size are stored inside the object's record: one manager object per
    /// S3 object. Larger bodies are cut into chunks.
    pub inline_bytes_max: u64,
    /// Size of the chunks larger bodies are cut into (each a manager object).
    pub chunk_bytes: u64,
    /// Smallest multipart part other than the last (S3: 5 MiB).
    pub part_bytes_min: u64,
    /// Largest object (S3: 5 TiB).
    pub object_bytes_max: u64,
    /// Online repair.
    pub repair: RepairConfig,
}

/// How long a device operation may take before the store gives up on it (a read error, or the
/// device out of service for a write), unless `[redundancy] device_op_timeout_ms` says.
pub const DEVICE_OP_TIMEOUT: Duration = Duration::from_secs(30);

/// The data folder when none is given.
pub const DEFAULT_DATA_DIR: &str = "./railstore-data";

impl Default for StoreConfig {
    /// The embedded default: 6 `file` devices in `./railstore-data`, RS(3,3) with read/write
    /// separation (3 of 6 colours read), hybrid policy: rep3 up to 4 KiB, pack3+3 up to 64 KiB,
    /// split3+3 above (`docs/store.md` says why).
    fn default() -> Self {
        let mech = |s| Mechanism::parse(s).expect("a valid mechanism");
        StoreConfig {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            devices: DevicesConfig {
                kind: DeviceKind::File,
                count: 6,
                paths: Vec::new(),
                capacity_bytes: 16 << 30,
                direct_io: true,
            },
            manager: ManagerConfig {
                policy: Policy::Hybrid {
                    rules: vec![(4 << 10, mech("rep3")), (64 << 10, mech("pack3+3"))],
                    rest: mech("split3+3"),
                },
                faults: railstore_redundancy::FaultPolicy {
                    op_timeout: Some(DEVICE_OP_TIMEOUT),
                    ..Default::default()
                },
                ..ManagerConfig::default()
            },
            separation: Some(SeparationConfig {
                frame: Duration::from_secs(2),
                window: 3,
                window_max: None,
                adaptive: true,
                guard: Duration::from_millis(50),
                write_buffer_bytes_max: 256 << 20,
                partial_when_full: true,
                journal_copies: None,
            }),
            inline_bytes_max: 64 << 10,
            chunk_bytes: 8 << 20,
            part_bytes_min: 5 << 20,
            object_bytes_max: 5 << 40,
            repair: RepairConfig::default(),
        }
    }
}

/// The commented configuration `railstore init` writes; every value is the default.
pub const EXAMPLE_TOML: &str = r#"# railstore configuration. Every value shown is the default; delete what you do not change.

# The data folder: devices (unless [devices].paths names others), the placement layout and
# the access keys.
data_dir = "./railstore-data"

[server]
# Where the S3 endpoint listens.
listen = "127.0.0.1:9000"
# Region the S3 endpoint answers for (clients sign requests for it).
region = "us-east-1"
# Access key pair; when absent, one is generated at first start and kept in
# <data_dir>/credentials.toml (mode 0600; the log names the access key, never the secret).
# access_key = "..."
# secret_key = "..."
# That key pair's user: its canonical id (what ACLs, policies and listings name; it owns
# every bucket made before buckets had owners), display name and email (for ACL grants).
user_id = "railstore"
# display_name = "railstore"
# email = "ops@example.org"
# More users, each with its own key pair, buckets and objects (docs/s3.md, "Users and ACLs"):
# [[server.users]]
# id = "alice"
# display_name = "Alice"
# email = "alice@example.org"
# access_key = "..."
# secret_key = "..."
# Limits against hostile or broken clients (docs/s3.md says what happens past each).
# Connections served at once; more wait until one closes.
connections_max = 512
# Time to send a request's head; also how long an idle keep-alive connection stays open.
header_read_timeout_ms = 30000
# Time a request body may send nothing, or a client may read nothing of a response.
body_idle_timeout_ms = 60000
# Bytes of a browser-form POST read to find its fields (POST uploads are refused).
post_form_bytes_max = 65536
# Accept AWS Signature Version 2 (replayable, compared in variable time).
sigv2 = false
# Bearer token that GET /metrics and GET /status require; without one they are open.
# operator_token = "..."
# Bearer token of the admin API (/admin/v1/..., railstore device and repair); default: one
# made at first start in <data_dir>/admin-token (mode 0600).
# admin_token = "..."
# The master key of SSE-S3 and KMS objects (64 hex digits), made at first start. Back it up
# apart from the devices: without it those objects cannot be read. Default:
# <data_dir>/sse-master.key.
# sse_master_key_file = "/etc/railstore/sse-master.key"
# Seconds between passes of the lifecycle worker, which deletes objects and aborts uploads
# that buckets' lifecycle rules expire (0: none).
lifecycle_interval_s = 3600
# Where volumes are exported over NBD (docs/volumes.md): loopback only (no TLS yet). Default:
# 127.0.0.1:10809, the NBD port (left off with a warning when another server holds it).
# nbd_listen = "127.0.0.1:10809"
# The NBD Unix socket. Default: <data_dir>/nbd.sock.
# nbd_socket = "/run/railstore/nbd.sock"

[devices]
# file: log-structured devices (folders under <data_dir>/devices, or the paths below);
# sim: simulated SSDs that keep their data in file devices, to watch separation at work;
# mem: memory only, lost at exit.
kind = "file"
count = 6
# paths = ["/dev/nvme1n1", "/dev/nvme2n1"]   # files or block devices instead of folders
capacity_bytes = 17179869184
direct_io = true

[redundancy]
# standalone (one mechanism: mechanism = "split3+3") or hybrid (by object size).
# Mechanisms: hash, rep<r>, split<k>+<m>, pack<k>+<m> (append :vandermonde for that code).
mode = "hybrid"
pack_wait_ms = 2
# A device operation that takes longer fails: a read is decoded around, a write takes the
# device out of service (until rebuilt), so a hung device does not stall the array.
device_op_timeout_ms = 30000
# Read errors a device may give in a minute before it is taken out of service; below that a
# failed read is decoded around and the piece rewritten.
read_errors_max = 16
# Erasure-coding engine: auto (the fastest this CPU runs) or a name (avx512-gfni, avx2, ...).
ec_engine = "auto"
# Code shards of at least ec_offload_min_shard_bytes on the GPU (large objects), the rest on
# the CPU; the store refuses to start when the GPU cannot be used.
# ec_offload = "cuda"
# ec_offload_min_shard_bytes = 262144
[[redundancy.hybrid]]
max_bytes = 4096
mechanism = "rep3"
[[redundancy.hybrid]]
max_bytes = 65536
mechanism = "pack3+3"
[[redundancy.hybrid]]
mechanism = "split3+3"

[separation]
# Read/write separation (Flash on Rails / eRails): at any time `window` colours serve reads
# and the others take writes; the window moves by one colour every frame.
enabled = true
frame_ms = 2000
window = 3
# The window follows the load (as wide as the writes and buffers allow, from `window` up to
# `window_max`), and each device's buffer bound follows its measured write rate (Rails rule),
# at most `write_buffer_bytes_max`. Left out, `window_max` leaves two writer colours and
# writers enough for the journal copies: 3 here (six devices, 3 copies), 4 with twelve.
adaptive = true
# window_max = 3
guard_ms = 50
write_buffer_bytes_max = 268435456
# Write to a reader when its buffer is full instead of making writers wait (partial
# separation, Rails §4.3.1: writes keep their rate, reads on that device see them).
partial_when_full = true
# Journal copies of each buffered write, on distinct devices. Left out: the policy's tolerance
# + 1 (3 here), so a power failure plus that many lost devices loses nothing acknowledged.
# journal_copies = 3

[objects]
# Bodies up to this size live in the object's record; larger ones are cut into chunks.
inline_bytes_max = 65536
chunk_bytes = 8388608
# Smallest multipart part other than the last.
part_bytes_min = 5242880
object_bytes_max = 5497558138880

[repair]
# Milliseconds between checks of each device's files: a device whose folder or files vanish or
# shrink under the server is taken out of service (0: never check).
watch_interval_ms = 2000
# A rebuild while serving (railstore device replace): objects rebuilt at once, and the most
# bytes per second it writes (0: no limit).
concurrency = 6
write_bytes_per_s_max = 0
# Seconds from the end of one complete scrub (every object verified, damage repaired; its
# report in <data_dir>/scrub-report.json) to the start of the next (0: none scheduled).
scrub_interval_s = 604800
"#;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    devices: Option<DevicesSection>,
    redundancy: Option<toml::Table>,
    separation: Option<SeparationSection>,
    objects: Option<ObjectsSection>,
    repair: Option<RepairSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RepairSection {
    watch_interval_ms: Option<u64>,
    concurrency: Option<usize>,
    write_bytes_per_s_max: Option<u64>,
    scrub_interval_s: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DevicesSection {
    kind: Option<DeviceKind>,
    count: Option<usize>,
    paths: Option<Vec<PathBuf>>,
    capacity_bytes: Option<u64>,
    direct_io: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeparationSection {
    enabled: Option<bool>,
    frame_ms: Option<u64>,
    window: Option<usize>,
    window_max: Option<usize>,
    adaptive: Option<bool>,
    guard_ms: Option<u64>,
    write_buffer_bytes_max: Option<u64>,
    partial_when_full: Option<bool>,
    journal_copies: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectsSection {
    inline_bytes_max: Option<u64>,
    chunk_bytes: Option<u64>,
    part_bytes_min: Option<u64>,
    object_bytes_max: Option<u64>,
}

impl StoreConfig {
    /// Reads a configuration file's text (without its `[server]` table, which belongs to the
    /// server: pass it in `table` form via [`StoreConfig::from_table`] if the file has one).
    pub fn from_toml(text: &str) -> Result<StoreConfig> {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| StoreError::Config(e.message().to_string()))?;
        StoreConfig::from_table(table)
    }

    /// Reads a parsed configuration; missing values take the defaults.
    pub fn from_table(table: toml::Table) -> Result<StoreConfig> {
        let f: FileConfig = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| StoreError::Config(e.message().to_string()))?;
        let mut c = StoreConfig::default();
        if let Some(d) = f.data_dir {
            c.data_dir = d;
        }
        if let Some(d) = f.devices {
            c.devices.kind = d.kind.unwrap_or(c.devices.kind);
            c.devices.count = d.count.unwrap_or(c.devices.count);
            c.devices.paths = d.paths.unwrap_or_default();
            c.devices.capacity_bytes = d.capacity_bytes.unwrap_or(c.devices.capacity_bytes);
            c.devices.direct_io = d.direct_io.unwrap_or(c.devices.direct_io);
        }
        if let Some(r) = f.redundancy {
            let text = toml::to_string(&r).map_err(|e| StoreError::Config(e.to_string()))?;
            c.manager = ManagerConfig::from_toml(&text)
                .map_err(|e| StoreError::Config(format!("[redundancy]: {e}")))?;
            c.manager.faults.op_timeout = c.manager.faults.op_timeout.or(Some(DEVICE_OP_TIMEOUT));
        }
        if let Some(s) = f.separation {
            let base = c.separation.expect("the default separates");
            c.separation = if s.enabled.unwrap_or(true) {
                Some(SeparationConfig {
                    frame: s.frame_ms.map_or(base.frame, Duration::from_millis),
                    window: s.window.unwrap_or(base.window),
                    window_max: s.window_max.or(base.window_max),
                    adaptive: s.adaptive.unwrap_or(base.adaptive),
                    guard: s.guard_ms.map_or(base.guard, Duration::from_millis),
                    write_buffer_bytes_max: s
                        .write_buffer_bytes_max
                        .unwrap_or(base.write_buffer_bytes_max),
                    partial_when_full: s.partial_when_full.unwrap_or(base.partial_when_full),
                    journal_copies: s.journal_copies.or(base.journal_copies),
                })
            } else {
                None
            };
        }
        if let Some(o) = f.objects {
            c.inline_bytes_max = o.inline_bytes_max.unwrap_or(c.inline_bytes_max);
            c.chunk_bytes = o.chunk_bytes.unwrap_or(c.chunk_bytes);
            c.part_bytes_min = o.part_bytes_min.unwrap_or(c.part_bytes_min);
            c.object_bytes_max = o.object_bytes_max.unwrap_or(c.object_bytes_max);
        }
        if let Some(r) = f.repair {
            let base = c.repair;
            c.repair = RepairConfig {
                watch_interval: r
                    .watch_interval_ms
                    .map_or(base.watch_interval, Duration::from_millis),
                concurrency: r.concurrency.unwrap_or(base.concurrency),
                write_bytes_per_s_max: match r.write_bytes_per_s_max {
                    Some(0) => None,
                    Some(n) => Some(n),
                    None => base.write_bytes_per_s_max,
                },
                scrub_interval: r
                    .scrub_interval_s
                    .map_or(base.scrub_interval, Duration::from_secs),
            };
        }
        c.validate()?;
        Ok(c)
    }

    /// Devices in the array.
    pub fn device_count(&self) -> usize {
        if self.devices.paths.is_empty() {
            self.devices.count
        } else {
            self.devices.paths.len()
        }
    }

    /// Device losses every object of the policy survives.
    pub fn tolerance(&self) -> usize {
        self.manager
            .policy
            .mechanisms()
            .iter()
            .map(|m| m.tolerance())
            .min()
            .unwrap_or(0)
    }

    /// Checks what can be checked without opening anything.
    pub fn validate(&self) -> Result<()> {
        let n = self.device_count();
        let width = self.manager.width();
        if n < width {
            return Err(StoreError::Config(format!(
                "{n} devices; the redundancy configuration needs groups of {width}"
            )));
        }
        if self.chunk_bytes == 0 || self.chunk_bytes > self.manager.object_bytes_max {
            return Err(StoreError::Config(format!(
                "chunk_bytes must be 1 to {} (the largest manager object)",
                self.manager.object_bytes_max
            )));
        }
        if self.repair.concurrency == 0 {
            return Err(StoreError::Config(
                "[repair] concurrency must be at least 1".into(),
            ));
        }
        if self.inline_bytes_max > self.chunk_bytes {
            return Err(StoreError::Config(
                "inline_bytes_max must not exceed chunk_bytes".into(),
            ));
        }
        if let Some(s) = &self.separation {
            let widest_k = self
                .manager
                .policy
                .mechanisms()
                .iter()
                .map(|m| match *m {
                    Mechanism::Split { k, .. } | Mechanism::Pack { k, .. } => k as usize,
                    _ => 1,
                })
                .max()
                .unwrap_or(1);
            if s.window < widest_k || s.window >= width {
                return Err(StoreError::Config(format!(
                    "separation window {} must be at least the largest k ({widest_k}) and \
                     below the group width ({width})",
                    s.window
                )));
            }
            if let Some(max) = s.window_max.filter(|_| s.adaptive) {
                let writers = s.writer_colours(width, n, self.tolerance());
                if max < s.window || max + writers > width {
                    return Err(StoreError::Config(format!(
                        "separation window_max {max} must be at least window ({}) and leave \
                         {writers} of the {width} colours writing (two, and enough devices for \
                         the {} journal copies of each buffered write)",
                        s.window,
                        s.copies(self.tolerance())
                    )));
                }
            }
            // Every window position must hold enough pieces of every mechanism on readers
            // (one copy, a packed member's home or pointer, k shards), or reads go to writers.
            // Hashing keeps one piece: its reads go wherever that piece is.
            let order = self.manager.piece_order;
            for m in self.manager.policy.mechanisms() {
                let need = match m {
                    Mechanism::Hash => continue,
                    Mechanism::Split { k, .. } => k as usize,
                    Mechanism::Replicate { .. } | Mechanism::Pack { .. } => 1,
                };
                let pieces = m.pieces().min(width);
                let enough = |w: usize| {
                    railstore_placement::min_pieces_in_window(order, width, pieces, w) >= need
                };
                if !enough(s.window) {
                    let least = (s.window..width).find(|&w| enough(w));
                    return Err(StoreError::Config(format!(
                        "separation window {} leaves window positions where readers hold fewer \
                         than {need} pieces of {m} in groups of {width}{}",
                        s.window,
                        least.map_or(String::new(), |w| format!(": a window of {w} is needed"))
                    )));
                }
            }
            if s.frame < railstore_rails::ScheduleConfig::FRAME_MIN {
                return Err(StoreError::Config(format!(
                    "frame_ms must be at least {}",
                    railstore_rails::ScheduleConfig::FRAME_MIN.as_millis()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_is_the_default() {
        let mut table: toml::Table = toml::from_str(EXAMPLE_TOML).unwrap();
        table.remove("server");
        assert_eq!(
            StoreConfig::from_table(table).unwrap(),
            StoreConfig::default()
        );
    }

    #[test]
    fn bad_values_are_refused_with_their_reason() {
        let e = StoreConfig::from_toml("[separation]\nwindow = 1\n").unwrap_err();
        assert!(e.to_string().contains("window 1"), "{e}");
        let e = StoreConfig::from_toml("[devices]\ncount = 4\n").unwrap_err();
        assert!(e.to_string().contains("groups of 6"), "{e}");
        let e = StoreConfig::from_toml("[devices]\ncolour = 4\n").unwrap_err();
        assert!(e.to_string().contains("colour"), "{e}");
        let e = StoreConfig::from_toml("[redundancy]\nmode = \"sideways\"\n").unwrap_err();
        assert!(e.to_string().contains("[redundancy]"), "{e}");
        // Two copies 4 colours apart in groups of 8: a window of 3 can miss both.
        let narrow = "[devices]\ncount = 8\n[redundancy]\nmode = \"standalone\"\n\
                      mechanism = \"rep2\"\nlayout_width = 8\n[separation]\nwindow = 3\n";
        let e = StoreConfig::from_toml(narrow).unwrap_err();
        assert!(e.to_string().contains("a window of 4 is needed"), "{e}");
        StoreConfig::from_toml(&narrow.replace("window = 3", "window = 4")).unwrap();
    }

    #[test]
    fn the_widest_window_leaves_writers_for_the_journal_copies() {
        let c = StoreConfig::default();
        let s = c.separation.unwrap();
        // Six devices, 3 copies: three writer colours, so the window stays at 3.
        assert_eq!(s.window_max_in(6, 6, c.tolerance()), 3);
        // Twelve: two devices per colour, two writer colours hold the copies.
        assert_eq!(s.window_max_in(6, 12, c.tolerance()), 4);
        // One copy: two writer colours all the same (a guard must leave one).
        let one = SeparationConfig {
            journal_copies: Some(1),
            ..s
        };
        assert_eq!(one.window_max_in(6, 6, c.tolerance()), 4);
        let fixed = SeparationConfig {
            adaptive: false,
            ..one
        };
        assert_eq!(fixed.window_max_in(6, 6, c.tolerance()), 3);
        let e = StoreConfig::from_toml(
            "[separation]
window_max = 4
",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("leave 3 of the 6 colours writing"),
            "{e}"
        );
        let c = StoreConfig::from_toml(
            "[devices]
count = 12
[separation]
window_max = 4
",
        )
        .unwrap();
        assert_eq!(c.separation.unwrap().window_max, Some(4));
        let e = StoreConfig::from_toml(
            "[separation]
window = 3
window_max = 2
",
        )
        .unwrap_err();
        assert!(e.to_string().contains("at least window (3)"), "{e}");
    }

    #[test]
    fn separation_can_be_turned_off() {
        let c = StoreConfig::from_toml("[separation]\nenabled = false\n").unwrap();
        assert_eq!(c.separation, None);
    }
}
