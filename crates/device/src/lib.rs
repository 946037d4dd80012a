//! Key-value devices (DESIGN §3.2).
//!
//! A [`Device`] is shaped like a key-value SSD (the SNIA KV API): store with
//! upsert/update-only/insert-only modes, retrieve with an offset, delete, batch exist, prefix
//! iteration, info and sync, all asynchronous with a bounded queue depth per device. Upper layers
//! hold devices as `Arc<dyn Device>`.
//!
//! Backends:
//! - [`mem::MemDevice`]: in memory (tests, and the data keeper inside `sim`);
//! - [`file::FileDevice`]: a log-structured store in a directory of segment files or in one
//!   preallocated file or raw block device, O_DIRECT, checksummed records, reads through
//!   io_uring, group commit, checkpoint + log replay, compaction (format in `docs/format.md`);
//! - [`sim::SimDevice`]: an SSD timing model (dies, channels, page read/program, block erase,
//!   write buffer, over-provisioning, greedy garbage collection) around any inner device; its
//!   delays are tokio timers, so it runs in real time or, under a paused clock
//!   ([`sim::virtual_time_runtime`], [`sim::VIRTUAL_TIME_DILATION`]), in virtual time;
//! - [`faulty::FaultyDevice`]: injects fail-stop, transient errors, bit flips, latency spikes
//!   and crashes that drop unsynced writes;
//! - [`metered::MeteredDevice`]: counts operations and bytes and records latency histograms;
//! - [`retry::RetryingDevice`]: retries operations that failed transiently;
//! - [`slot::DeviceSlot`]: a place in an array whose device is swapped by an online replace.

#![warn(missing_docs)]

pub mod aligned;
pub mod api;
pub mod conformance;
pub mod error;
pub mod fasthash;
pub mod faulty;
pub mod fence;
pub mod file;
pub mod format;
pub mod mem;
pub mod memory;
pub mod metered;
pub mod purpose;
pub mod retry;
pub mod sim;
pub mod slot;
mod uring;

pub use api::{
    iterate_all, CompactStats, Device, DeviceInfo, IterBatch, IterEntry, IterRequest, Limits,
    QueueGate, ReadRange, Retrieved, StoreMode,
};
pub use bytes::Bytes;
pub use error::{DeviceError, Result};
pub use faulty::{FaultConfig, FaultyDevice};
pub use fence::Fence;
pub use file::{
    BulkReads, CompactionPolicy, FileConfig, FileDevice, FileLayout, RecoveryReport, SegmentExtent,
};
pub use mem::{MemConfig, MemDevice};
pub use metered::{MeteredDevice, OpKind, OpStats};
pub use retry::RetryingDevice;
pub use sim::{SimConfig, SimDevice, SimStats};
pub use slot::DeviceSlot;

/// Entry points shared by the fuzz targets (`fuzz/`) and the stable random-bytes tests, so CI
/// exercises the same code the fuzzer does.
pub mod fuzzing {
    use crate::format::{
        decode_checkpoint, decode_checkpoint_region, decode_header, decode_record,
        decode_slot_header, decode_superblock, encode_superblock, find_intact_record,
        newer_intact_records, scan_records, Superblock,
    };
    use crate::{Device, FileConfig, FileDevice, FileLayout, Limits, ReadRange};

    /// Runs every parser of on-disk bytes over `data`, checking their invariants.
    pub fn parse_everything(data: &[u8]) {
        if let Ok(r) = decode_record(data) {
            let h = decode_header(data).expect("a valid record has a valid header");
            assert_eq!(r.header, h);
            assert!(r.header.record_len() <= data.len());
        }
        let mut prev_end = 0;
        let mut prev_seq = 0;
        let end = scan_records(data, 0, 0, |off, r| {
            assert_eq!(off, prev_end, "records are contiguous");
            assert!(r.header.seq > prev_seq, "sequence numbers rise");
            prev_end = off + r.header.record_len();
            prev_seq = r.header.seq;
        });
        assert_eq!(end.end, prev_end);
        if let Some(at) = find_intact_record(data, end.end) {
            assert!(at > end.end && decode_record(&data[at..]).is_ok());
        }
        if let Some(c) = decode_checkpoint(data) {
            assert_eq!(
                crate::format::encode_checkpoint(&c),
                data,
                "checkpoints round-trip"
            );
        }
        if let Some((first, end)) = newer_intact_records(data, 0, 0) {
            assert!(first > 0 && first < end && end <= data.len());
        }
        // The single-file layout's metadata (device id taken from the bytes, so that the
        // checks past it are reached).
        if let Some(sb) = decode_superblock(data) {
            assert_eq!(
                encode_superblock(&sb)[..92],
                data[..92],
                "superblocks round-trip"
            );
            let planned =
                Superblock::plan(sb.total_bytes, sb.segment_bytes, sb.device_id, sb.seq_base);
            assert_eq!(planned, Some(sb));
        }
        let device_id = data
            .get(8..16)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let (id, seal) = decode_slot_header(data, device_id, 1 << 20);
        if let Some(s) = seal {
            assert!(id.is_some_and(|i| i.segment == s.segment) && s.end <= 1 << 20);
        }
        if let Some((generation, c)) = decode_checkpoint_region(data, device_id) {
            assert!(generation > 0 && c.len() + 64 <= data.len());
        }
    }

    /// Settings that open the single-file fixture (`tests/fixtures/single-file`).
    pub fn image_config() -> FileConfig {
        FileConfig {
            capacity_bytes: 4 * (16 << 10),
            limits: Limits {
                key_bytes_min: 1,
                key_bytes_max: 16,
                value_bytes_max: 6000,
            },
            segment_bytes: 16 << 10,
            write_buffer_bytes: 16 << 10,
            flush_bytes: 8 << 10,
            layout: FileLayout::SingleFile,
            direct_io: false,
            ..Default::default()
        }
    }

    /// Opens `data` as a single-file device image ([`image_config`]): opening never panics
    /// (it may refuse the image), and every key an opened device lists reads back or is
    /// reported corrupt, never as other bytes.
    pub fn open_arbitrary_image(data: &[u8]) {
        let dir = tempfile_dir();
        let path = dir.join("device.img");
        std::fs::write(&path, data).expect("write image");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let Ok(dev) = FileDevice::open(&path, image_config()) else {
                return;
            };
            read_all(&dev).await;
            dev.close_blocking().ok();
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    async fn read_all(dev: &FileDevice) {
        let keys = crate::iterate_all(dev, b"", false).await.expect("iterate");
        for e in keys {
            // A key may point at a record the checkpoint claims but the log lacks: that
            // is reported as corrupt, never returned as data.
            match dev.retrieve(&e.key, ReadRange::ALL).await {
                Ok(_)
                | Err(crate::DeviceError::Corrupt { .. })
                | Err(crate::DeviceError::Io { .. }) => {}
                Err(other) => panic!("unexpected error {other}"),
            }
        }
    }

    /// Splits `data` (a little-endian u16 checkpoint length, the checkpoint, then the segment)
    /// into a checkpoint and a segment file, opens a device on them, and reads every key it
    /// reports: recovery must never fail or hand out unchecked bytes.
    pub fn open_arbitrary(data: &[u8]) {
        let (len, rest) = data.split_at(data.len().min(2));
        let ckpt_len = len.iter().rev().fold(0usize, |a, &b| a << 8 | b as usize);
        let (ckpt, seg) = rest.split_at(ckpt_len.min(rest.len()));
        let dir = tempfile_dir();
        std::fs::write(dir.join("seg-0000000001.log"), seg).expect("write segment");
        if !ckpt.is_empty() {
            std::fs::write(dir.join("checkpoint"), ckpt).expect("write checkpoint");
        }
        let cfg = FileConfig {
            direct_io: false,
            ..Default::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let dev = FileDevice::open(&dir, cfg).expect("recovery opens any bytes");
            read_all(&dev).await;
            dev.close_blocking().ok();
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "railstore-fuzz-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }
}
