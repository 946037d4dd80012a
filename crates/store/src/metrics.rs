//! Counters, the Prometheus text the server exposes at `/metrics`, and the status report
//! `railstore status` prints.

use crate::store::Store;
use railstore_rails::Role;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Operation counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Objects stored (single and multipart).
    pub puts: AtomicU64,
    /// Object reads.
    pub gets: AtomicU64,
    /// Object descriptions.
    pub heads: AtomicU64,
    /// Object deletes.
    pub deletes: AtomicU64,
    /// Listings.
    pub lists: AtomicU64,
    /// Multipart parts stored.
    pub parts: AtomicU64,
    /// Buckets created.
    pub buckets_created: AtomicU64,
    /// Body bytes received.
    pub bytes_in: AtomicU64,
    /// Body bytes sent.
    pub bytes_out: AtomicU64,
}

/// One device as `railstore status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// Position in the array.
    pub index: usize,
    /// Where it lives (`None` for memory).
    pub path: Option<String>,
    /// Its colour in the layout.
    pub colour: usize,
    /// `reader`, `writer` or `guard` under separation; `none` without.
    pub role: String,
    /// Bytes waiting in its separation buffer.
    pub buffer_bytes: u64,
    /// Capacity.
    pub capacity_bytes: u64,
    /// Bytes in use (live and dead).
    pub used_bytes: u64,
    /// Bytes of live keys and values (the rest of `used_bytes` is dead space that compaction
    /// reclaims).
    #[serde(default)]
    pub live_bytes: u64,
    /// Keys it holds.
    pub keys: u64,
    /// Serving reads and writes; false once it failed, and while it is rebuilt.
    pub healthy: bool,
    /// Why it is not, when it is not.
    pub error: Option<String>,
    /// The state the array records for it (`ok`, `failed`, `rebuilding`); `None` for memory
    /// devices.
    #[serde(default)]
    pub recorded: Option<crate::identity::DeviceHealth>,
}

/// Read/write separation's window as `railstore status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WindowStatus {
    /// Colours on the ring (the group width).
    pub colours: usize,
    /// Colours serving reads now.
    pub size: usize,
    /// Frame length.
    pub frame_ms: u64,
    /// Frames so far whose writes needed more writers than separation leaves.
    pub partial_frames: u64,
    /// Reads serving read requests that reached a device outside the window, since start.
    pub off_window_reads: u64,
    /// Reads by writes, deletes and background work that did, since start.
    pub off_window_other_reads: u64,
    /// The window follows the load (and the buffers the device rate).
    #[serde(default)]
    pub adaptive: bool,
    /// The fewest and most colours the window may have (the most: what the load may ask for,
    /// or the window widened past a failed device, whichever is more).
    #[serde(default)]
    pub size_range: (usize, usize),
    /// Device bytes/s written in the last frame (every piece and journal record).
    #[serde(default)]
    pub write_bytes_per_s: u64,
    /// Device bytes/s the writers of the current window absorb (measured device write rate
    /// x writer devices); `None` until a device's rate is measured.
    #[serde(default)]
    pub write_bound_bytes_per_s: Option<u64>,
    /// One device's write rate, measured by its flusher (mean of the healthy devices).
    #[serde(default)]
    pub device_write_bytes_per_s: Option<u64>,
    /// What the Rails rule asks of each buffer at the widest window.
    #[serde(default)]
    pub buffer_bytes_needed: Option<u64>,
    /// Each buffer's bound now (the largest).
    #[serde(default)]
    pub buffer_bytes_max: u64,
}

/// The whole store as `railstore status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreStatus {
    /// The data folder.
    pub data_dir: String,
    /// The policy, e.g. `hybrid: rep3 <= 4096, pack3+3 <= 65536, split3+3`.
    pub policy: String,
    /// Separation on.
    pub separation: bool,
    /// The read window, under separation.
    #[serde(default)]
    pub window: Option<WindowStatus>,
    /// The array's id and epoch (starts so far); `None` for memory devices.
    #[serde(default)]
    pub array: Option<(String, u64)>,
    /// Devices.
    pub devices: Vec<DeviceStatus>,
    /// Buckets.
    pub buckets: usize,
    /// Objects.
    pub objects: u64,
    /// Bytes of all objects.
    pub object_bytes: u64,
    /// Multipart uploads in progress.
    pub uploads: usize,
    /// The rebuild or scrub running, or the last one since the server started.
    #[serde(default)]
    pub repair: Option<crate::background::RepairStatus>,
    /// The last scrub's report (kept in the data folder).
    #[serde(default)]
    pub last_scrub: Option<crate::scrubber::ScrubRecord>,
    /// The objects at risk while devices are out of service (`None` while all serve).
    #[serde(default)]
    pub at_risk: Option<crate::risk::RiskReport>,
    /// The index: `loaded`, `loading` (after a clean start it loads while the store serves;
    /// until then the counts above cover only what it has) or `failed: why`.
    #[serde(default)]
    pub index: String,
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Reader => "reader",
        Role::Writer => "writer",
        Role::Guard => "guard",
    }
}

impl Store {
    /// The status of the store and each device.
    pub async fn status(&self) -> StoreStatus {
        let inner = &self.inner;
        let snaps = inner.rails.as_ref().map(|r| r.snapshot());
        let layout = inner.manager.layout();
        let mut devices = Vec::new();
        for (i, o) in inner.devices.all().iter().enumerate() {
            let o = o.lock().unwrap().clone();
            let info = o.device.info().await;
            let failed = !inner.manager.devices().readable(i);
            let recorded = inner.identity.as_ref().map(|id| id.health(i));
            let snap = snaps.as_ref().and_then(|s| s.get(i).cloned());
            devices.push(DeviceStatus {
                index: i,
                path: o.path.as_ref().map(|p| p.display().to_string()),
                colour: layout.colour_of(i),
                role: snap
                    .as_ref()
                    .map_or("none", |s| role_name(s.role))
                    .to_string(),
                buffer_bytes: snap.as_ref().map_or(0, |s| s.buffer_bytes),
                capacity_bytes: info.as_ref().map_or(0, |i| i.capacity_bytes),
                used_bytes: info.as_ref().map_or(0, |i| i.used_bytes),
                live_bytes: info.as_ref().map_or(0, |i| i.live_bytes),
                keys: info.as_ref().map_or(0, |i| i.key_count),
                healthy: !failed && info.is_ok(),
                error: match (&recorded, info) {
                    (Some((_, Some(why))), _) => Some(why.clone()),
                    (_, Err(e)) => Some(e.to_string()),
                    _ => None,
                },
                recorded: recorded.map(|(h, _)| h),
            });
        }
        let risk = self.objects_at_risk();
        let st = inner.state.read().unwrap();
        StoreStatus {
            data_dir: inner.config.data_dir.display().to_string(),
            policy: policy_text(&inner.manager.config().policy),
            separation: inner.rails.is_some(),
            window: inner.rails.as_ref().map(|r| {
                let sum = |f: &dyn Fn(&railstore_rails::DeviceCounters) -> &AtomicU64| {
                    (0..r.device_count())
                        .map(|d| f(&r.counters(d)).load(Ordering::Relaxed))
                        .sum()
                };
                let load = r.load();
                WindowStatus {
                    colours: r.config().schedule.colours,
                    size: r.window_size(),
                    frame_ms: r.config().schedule.frame.as_millis() as u64,
                    partial_frames: r.partial_frames(),
                    off_window_reads: sum(&|c| &c.off_window_reads),
                    off_window_other_reads: sum(&|c| &c.off_window_other_reads),
                    adaptive: r.config().adaptive.is_some(),
                    size_range: (
                        r.config().schedule.window_min,
                        r.config().schedule.window_max,
                    ),
                    write_bytes_per_s: load.write_bytes_per_s as u64,
                    write_bound_bytes_per_s: load.write_bound_bytes_per_s.map(|b| b as u64),
                    device_write_bytes_per_s: load.device_write_bytes_per_s.map(|b| b as u64),
                    buffer_bytes_needed: load.buffer_bytes_needed,
                    buffer_bytes_max: load.buffer_bytes_max,
                }
            }),
            array: inner
                .identity
                .as_ref()
                .map(|id| (id.array_id(), id.epoch())),
            devices,
            buckets: st.buckets.len(),
            objects: st.buckets.values().map(|b| b.objects.len() as u64).sum(),
            object_bytes: st
                .buckets
                .values()
                .flat_map(|b| b.objects.values())
                .map(|e| e.info.size)
                .sum(),
            uploads: st.buckets.values().map(|b| b.uploads.len()).sum(),
            repair: self.repair_status(),
            last_scrub: self.last_scrub(),
            at_risk: (!risk.devices_out.is_empty()).then_some(risk),
            index: match inner.warmup.state() {
                crate::warmup::IndexState::Ready => "loaded".into(),
                crate::warmup::IndexState::Loading => "loading".into(),
                crate::warmup::IndexState::Failed(why) => format!("failed: {why}"),
            },
        }
    }

    /// Everything measurable, in Prometheus text format.
    pub async fn metrics_text(&self) -> String {
        let status = self.status().await;
        let m = &self.inner.metrics;
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, u64)]| {
            let _ = writeln!(out, "# HELP railstore_{name} {help}");
            let _ = writeln!(out, "# TYPE railstore_{name} {kind}");
            for (labels, v) in samples {
                let _ = writeln!(out, "railstore_{name}{labels} {v}");
            }
        };
        let one = |v: &AtomicU64| vec![(String::new(), v.load(Ordering::Relaxed))];
        metric("puts_total", "counter", "Objects stored.", &one(&m.puts));
        metric("gets_total", "counter", "Object reads.", &one(&m.gets));
        metric(
            "heads_total",
            "counter",
            "Object descriptions.",
            &one(&m.heads),
        );
        metric(
            "deletes_total",
            "counter",
            "Object deletes.",
            &one(&m.deletes),
        );
        metric("lists_total", "counter", "Listings.", &one(&m.lists));
        metric(
            "parts_total",
            "counter",
            "Multipart parts stored.",
            &one(&m.parts),
        );
        metric(
            "received_bytes_total",
            "counter",
            "Body bytes received.",
            &one(&m.bytes_in),
        );
        metric(
            "sent_bytes_total",
            "counter",
            "Body bytes sent.",
            &one(&m.bytes_out),
        );
        metric(
            "index_loaded",
            "gauge",
            "1 once the index has loaded (after a clean start it loads while serving).",
            &[(String::new(), u64::from(status.index == "loaded"))],
        );
        metric(
            "buckets",
            "gauge",
            "Buckets.",
            &[(String::new(), status.buckets as u64)],
        );
        metric(
            "objects",
            "gauge",
            "Objects.",
            &[(String::new(), status.objects)],
        );
        metric(
            "object_bytes",
            "gauge",
            "Bytes of all objects.",
            &[(String::new(), status.object_bytes)],
        );
        let io = &self.inner.manager.devices().counters;
        metric(
            "device_stores_total",
            "counter",
            "Pieces stored on devices.",
            &one(&io.stores),
        );
        metric(
            "device_retrieves_total",
            "counter",
            "Pieces read from devices.",
            &one(&io.retrieves),
        );
        metric(
            "device_store_bytes_total",
            "counter",
            "Bytes of pieces (headers included) stored on devices: with the bytes written to the \
             store, the write amplification of the mechanisms (separation's journal is counted \
             apart).",
            &one(&io.store_bytes),
        );
        metric(
            "device_retrieve_bytes_total",
            "counter",
            "Bytes of pieces read from devices.",
            &one(&io.retrieve_bytes),
        );
        metric(
            "decodes_total",
            "counter",
            "Reads that decoded from parity.",
            &one(&io.decodes),
        );
        metric(
            "repairs_total",
            "counter",
            "Pieces rewritten by repair.",
            &one(&io.repairs),
        );
        metric(
            "pack_sets_total",
            "counter",
            "Packing sets written.",
            &one(&io.pack_sets),
        );
        metric(
            "pack_members_total",
            "counter",
            "Objects' segments packed into those sets (members per set: how full they close).",
            &one(&io.pack_members),
        );
        let gpu = |v: u64| vec![(String::new(), v)];
        metric(
            "ec_gpu_calls_total",
            "counter",
            "Erasure-coding calls the GPU completed (`ec_offload`, or `ec_engine = \"cuda\"`).",
            &gpu(railstore_ec::gpu_calls()),
        );
        metric(
            "ec_gpu_direct_calls_total",
            "counter",
            "GPU coding calls copied straight from pinned shards (no staging copy).",
            &gpu(railstore_ec::gpu_call_counts().1),
        );
        metric(
            "ec_gpu_fallbacks_total",
            "counter",
            "Erasure-coding calls the GPU failed, which the CPU coded instead.",
            &gpu(railstore_ec::gpu_fallbacks().0),
        );
        let per_device = |f: &dyn Fn(&DeviceStatus) -> u64| -> Vec<(String, u64)> {
            status
                .devices
                .iter()
                .map(|d| {
                    (
                        format!("{{device=\"{}\",role=\"{}\"}}", d.index, d.role),
                        f(d),
                    )
                })
                .collect()
        };
        metric(
            "device_healthy",
            "gauge",
            "1 while the device serves.",
            &per_device(&|d| d.healthy as u64),
        );
        metric(
            "device_buffer_bytes",
            "gauge",
            "Bytes waiting in the separation buffer.",
            &per_device(&|d| d.buffer_bytes),
        );
        metric(
            "device_used_bytes",
            "gauge",
            "Bytes in use on the device.",
            &per_device(&|d| d.used_bytes),
        );
        metric(
            "device_live_bytes",
            "gauge",
            "Bytes of live keys and values on the device (used less dead space).",
            &per_device(&|d| d.live_bytes),
        );
        metric(
            "device_capacity_bytes",
            "gauge",
            "Device capacity.",
            &per_device(&|d| d.capacity_bytes),
        );
        let risk = status.at_risk.clone().unwrap_or_default();
        metric(
            "objects_at_risk",
            "gauge",
            "Objects with pieces on devices out of service.",
            &[(String::new(), risk.objects_at_risk)],
        );
        metric(
            "objects_without_redundancy",
            "gauge",
            "Objects at risk with no redundancy left.",
            &[(String::new(), risk.objects_without_redundancy)],
        );
        metric(
            "objects_unreadable",
            "gauge",
            "Objects with more pieces out than their mechanism tolerates.",
            &[(String::new(), risk.objects_unreadable)],
        );
        let repair = status.repair.as_ref();
        let rebuild = |f: &dyn Fn(&crate::background::RepairStatus) -> u64| {
            vec![(String::new(), repair.map_or(0, f))]
        };
        metric(
            "rebuild_running",
            "gauge",
            "1 while a device is rebuilt online.",
            &rebuild(&|r| r.running as u64),
        );
        metric(
            "rebuild_items",
            "gauge",
            "Objects and sets the current (or last) rebuild checks.",
            &rebuild(&|r| r.items_total),
        );
        metric(
            "rebuild_items_done",
            "gauge",
            "Objects and sets it has checked.",
            &rebuild(&|r| r.items_done),
        );
        metric(
            "rebuild_bytes_done",
            "gauge",
            "Bytes it has written.",
            &rebuild(&|r| r.bytes_done),
        );
        if let Some(r) = &self.inner.rails {
            let c = |f: &dyn Fn(usize) -> u64| -> Vec<(String, u64)> {
                (0..status.devices.len())
                    .map(|d| (format!("{{device=\"{d}\"}}"), f(d)))
                    .collect()
            };
            type Counter = fn(&railstore_rails::DeviceCounters) -> &AtomicU64;
            let counters: [(&str, &str, Counter); 18] = [
                (
                    "rails_off_window_reads_total",
                    "Reads serving read requests that reached the device while it was not a reader (writer, guard, rebuilding).",
                    |c| &c.off_window_reads,
                ),
                (
                    "rails_off_window_other_reads_total",
                    "Reads by writes, deletes and background work that reached the device while it was not a reader.",
                    |c| &c.off_window_other_reads,
                ),
                (
                    "rails_buffered_ops_total",
                    "Writes buffered for a reader.",
                    |c| &c.buffered_ops,
                ),
                (
                    "rails_direct_ops_total",
                    "Writes sent straight to a writer.",
                    |c| &c.direct_ops,
                ),
                ("rails_flushed_ops_total", "Buffered writes flushed.", |c| {
                    &c.flushed_ops
                }),
                (
                    "rails_flushed_bytes_total",
                    "Value bytes flushed from buffers.",
                    |c| &c.flushed_bytes,
                ),
                (
                    "rails_partial_ops_total",
                    "Writes sent to a reader whose buffer was full.",
                    |c| &c.partial_ops,
                ),
                (
                    "rails_buffer_reads_total",
                    "Reads answered from a write buffer.",
                    |c| &c.buffer_reads,
                ),
                (
                    "rails_backpressure_waits_total",
                    "Times a write waited for buffer or journal room.",
                    |c| &c.backpressure_waits,
                ),
                (
                    "rails_paced_waits_total",
                    "Times a write waited for its share of a reader's stint.",
                    |c| &c.paced_waits,
                ),
                (
                    "rails_paced_nanoseconds_total",
                    "Time writes waited for their share of a stint.",
                    |c| &c.paced_ns,
                ),
                (
                    "rails_switch_read_waits_total",
                    "Times the device turned writer and let reads in flight finish first.",
                    |c| &c.switch_read_waits,
                ),
                (
                    "rails_switch_read_wait_nanoseconds_total",
                    "Time those waits lasted.",
                    |c| &c.switch_read_wait_ns,
                ),
                (
                    "rails_journal_records_total",
                    "Journal records written for this device's writes.",
                    |c| &c.journal_records,
                ),
                (
                    "rails_journal_bytes_total",
                    "Bytes of those journal records.",
                    |c| &c.journal_bytes,
                ),
                (
                    "rails_journal_waits_total",
                    "Times a write waited for a writer to journal on.",
                    |c| &c.journal_waits,
                ),
                (
                    "rails_compactions_total",
                    "Compaction passes run while a writer.",
                    |c| &c.compactions,
                ),
                (
                    "rails_watermarks_total",
                    "Journal watermarks stored (flusher checkpoints).",
                    |c| &c.watermarks,
                ),
            ];
            for (name, help, counter) in counters {
                metric(
                    name,
                    "counter",
                    help,
                    &c(&|d| counter(&r.counters(d)).load(Ordering::Relaxed)),
                );
            }
            let journal = r.snapshot();
            metric(
                "rails_journal_held_bytes",
                "gauge",
                "Bytes of journal records kept for this device's writes.",
                &c(&|d| journal[d].journal_bytes),
            );
            metric(
                "rails_window_size",
                "gauge",
                "Colours serving reads now.",
                &[(String::new(), r.window_size() as u64)],
            );
            let load = r.load();
            let gauges = [
                (
                    "rails_write_bytes_per_second",
                    "Device bytes written per second in the last frame (pieces and journal).",
                    Some(load.write_bytes_per_s),
                ),
                (
                    "rails_write_bound_bytes_per_second",
                    "Device bytes per second the writers of the current window absorb.",
                    load.write_bound_bytes_per_s,
                ),
                (
                    "rails_device_write_bytes_per_second",
                    "One device's write rate as the flushers measured it.",
                    load.device_write_bytes_per_s,
                ),
            ];
            for (name, help, value) in gauges {
                if let Some(v) = value {
                    metric(name, "gauge", help, &[(String::new(), v as u64)]);
                }
            }
            metric(
                "rails_buffer_bytes_max",
                "gauge",
                "This device's write buffer bound now.",
                &c(&|d| journal[d].buffer_bytes_max),
            );
            metric(
                "rails_partial_frames_total",
                "counter",
                "Frames whose writes needed more writers than separation leaves.",
                &[(String::new(), r.partial_frames())],
            );
        }
        out
    }
}

/// A policy in words.
pub fn policy_text(p: &railstore_redundancy::Policy) -> String {
    match p {
        railstore_redundancy::Policy::Standalone(m) => format!("standalone: {m}"),
        railstore_redundancy::Policy::Hybrid { rules, rest } => {
            let mut s = String::from("hybrid: ");
            for (max, m) in rules {
                let _ = write!(s, "{m} <= {max} B, ");
            }
            let _ = write!(s, "{rest} above");
            s
        }
    }
}
