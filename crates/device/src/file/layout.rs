//! Where a `file` device's bytes live. Two layouts (byte by byte in `docs/format.md`):
//!
//! - a directory: one file per segment (`seg-NNNNNNNNNN.log`), a `checkpoint` file replaced
//!   by rename, a `LOCK` file;
//! - one preallocated regular file or raw block device: a superblock (twice), two checkpoint
//!   regions written in turn, and fixed-size segment slots, each with a header block that says
//!   which segment it holds (or that it is free) and, once sealed, where the segment ends.
//!
//! The log code (`file.rs`) sees a segment only as a descriptor and the offset of the
//! segment's byte 0 in it ([`SegIo`]), so record writing, reading, recovery and compaction are
//! the same for both; what differs (listing, creating, sealing and freeing segments, reading
//! and writing checkpoints, cutting a torn tail) is here.

use crate::aligned::{align_up, AlignedBuf, ALIGN_BYTES};
use crate::error::{DeviceError, Result};
use crate::format::{
    decode_checkpoint_region, decode_slot_header, decode_superblock,
    encode_checkpoint_region_header, encode_slot_header, encode_superblock, SlotIdentity, SlotSeal,
    Superblock, CKPT_REGION_HEADER_BYTES, META_BLOCK_BYTES, SLOTS_MIN, SUPERBLOCK_OFFSETS,
};
use crate::{FileConfig, FileLayout};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Name of the checkpoint file in a device directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// Name of the lock file that keeps two processes from opening one device directory.
pub const LOCK_FILE: &str = "LOCK";

/// Where segment `N` lives for reads and writes: its bytes are `file` from `base` on, at most
/// `cap` of them.
#[derive(Clone)]
pub(crate) struct SegIo {
    pub file: Arc<File>,
    /// File offset of the segment's byte 0.
    pub base: u64,
    /// Bytes the segment may span (`u64::MAX` for a file of its own).
    pub cap: u64,
}

/// How a segment is named on disk.
#[derive(Clone, Debug)]
pub(crate) enum SegPlace {
    /// A file of its own in the device directory.
    File(PathBuf),
    /// A slot of the single-file layout, and the identity written in its header.
    Slot { index: u32, start_seq: u64 },
}

/// A segment's bytes read on open.
pub(crate) enum SegBytes {
    Vec(Vec<u8>),
    /// The first `len` bytes of an aligned buffer.
    Aligned(AlignedBuf, usize),
}

impl std::ops::Deref for SegBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            SegBytes::Vec(v) => v,
            SegBytes::Aligned(b, len) => &b[..*len],
        }
    }
}

/// A segment found on open.
pub(crate) struct Found {
    pub id: u64,
    pub io: SegIo,
    pub place: SegPlace,
    /// Bytes of log known without a scan: the file's length (directory) or the end recorded
    /// when the segment was sealed (slot). `None`: a slot never sealed, whose end a scan finds.
    pub end: Option<u64>,
    /// Every record of the segment has a higher sequence number (0 for a directory).
    pub floor: u64,
}

/// Holds the device's lock until dropped.
pub(crate) enum DeviceLock {
    /// The directory's `LOCK` file (closing it releases the flock).
    Dir(#[allow(dead_code)] File),
    /// The device file itself, shared with the segments: released explicitly.
    Single(Arc<File>),
}

impl Drop for DeviceLock {
    fn drop(&mut self) {
        if let DeviceLock::Single(f) = self {
            // SAFETY: flock on a valid, owned descriptor has no memory effects.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}

fn flock(file: &File, what: &'static str) -> Result<()> {
    // SAFETY: flock on a valid, owned descriptor has no memory effects.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(DeviceError::io(what, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The device's storage: a directory or one file.
pub(crate) enum Layout {
    Dir(PathBuf),
    Single(Single),
}

/// The single-file layout's open state.
pub(crate) struct Single {
    pub path: PathBuf,
    pub file: Arc<File>,
    pub sb: Superblock,
    /// A block device (else a regular file).
    pub block_device: bool,
    /// Where cut tails are copied (see `FileConfig::aside_dir`).
    aside_dir: Option<PathBuf>,
    /// (generation of the next checkpoint, region it goes to).
    next_checkpoint: Mutex<(u64, usize)>,
    /// Whether a superblock copy was rewritten on open.
    pub superblock_repaired: bool,
}

/// What `Layout::open` decided and found.
pub(crate) struct Opened {
    pub layout: Layout,
    pub lock: DeviceLock,
    /// O_DIRECT in use, and the read alignment it needs.
    pub direct: Option<u64>,
}

/// `_IOR(0x12, 114, size_t)`: the size of a block device in bytes.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
))]
const BLKGETSIZE64: u64 = 0x4008_1272;
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
)))]
const BLKGETSIZE64: u64 = 0x8008_1272;

fn block_device_bytes(file: &File) -> std::io::Result<u64> {
    let mut bytes = 0u64;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is valid for it.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut bytes as *mut u64) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(bytes)
}

pub(crate) fn open_file(path: &Path, direct: bool, create: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if create {
        // Only the owner reads a device's data.
        o.create_new(true).mode(0o600);
    }
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| DeviceError::io("fsync directory", e))
}

/// Whether the directory's file system accepts O_DIRECT, and the smallest alignment it accepts
/// for reads: 512 B (most block devices' logical block) or 4 KiB. Reading a packed record needs
/// the aligned range that covers it, so a finer alignment reads fewer extra bytes (a 4 KiB value
/// spans two 4 KiB blocks but usually only nine or ten 512 B ones).
fn probe_direct(dir: &Path) -> Option<u64> {
    let path = dir.join(".direct-probe");
    let _ = std::fs::remove_file(&path);
    let r = (|| -> std::io::Result<u64> {
        let f = open_file(&path, true, true)?;
        let buf = AlignedBuf::new(ALIGN_BYTES);
        f.write_all_at(&buf, 0)?;
        let mut back = AlignedBuf::new(ALIGN_BYTES);
        f.read_at(&mut back, 0)?;
        Ok(read_align_of(&f))
    })();
    let _ = std::fs::remove_file(&path);
    r.ok()
}

/// 512 if an O_DIRECT read of 512 bytes at offset 512 works, else 4096.
fn read_align_of(f: &File) -> u64 {
    let mut back = AlignedBuf::new(ALIGN_BYTES);
    if f.read_at(&mut back[..512], 512).is_ok() {
        512
    } else {
        ALIGN_BYTES as u64
    }
}

/// Reads `len` bytes at `offset` into a buffer covering whole `align`-byte blocks. Returns the
/// buffer and where the requested bytes start in it.
pub(crate) fn read_aligned(
    file: &File,
    offset: u64,
    len: usize,
    align: u64,
) -> std::io::Result<(AlignedBuf, usize)> {
    let mut buf = AlignedBuf::new(aligned_span(offset, len, align));
    let at = read_aligned_into(file, offset, len, align, &mut buf)?;
    Ok((buf, at))
}

/// The bytes of the whole `align`-byte blocks that cover `len` bytes at `offset`.
pub(crate) fn aligned_span(offset: u64, len: usize, align: u64) -> usize {
    let start = offset / align * align;
    let end = (offset + len as u64).div_ceil(align) * align;
    (end - start) as usize
}

/// [`read_aligned`] into `buf`, which holds at least [`aligned_span`] bytes (a buffer reused
/// for many reads). Returns where the requested bytes start in it.
pub(crate) fn read_aligned_into(
    file: &File,
    offset: u64,
    len: usize,
    align: u64,
    buf: &mut AlignedBuf,
) -> std::io::Result<usize> {
    let start = offset / align * align;
    let span = aligned_span(offset, len, align);
    assert!(buf.len() >= span, "read buffer too small");
    let want = (offset + len as u64 - start) as usize;
    let mut got = 0usize;
    while got < want {
        // Whole aligned tail of the buffer: O_DIRECT needs aligned length and offset.
        let n = file.read_at(&mut buf[got..span], start + got as u64)?;
        if n == 0 || !((got + n) as u64).is_multiple_of(align) && got + n < want {
            // A short read not on a block boundary can only be the file's end.
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "record past end of file",
            ));
        }
        got += n;
    }
    Ok((offset - start) as usize)
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("seg-{id:010}.log"))
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("seg-")?.strip_suffix(".log")?;
    if digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn config_error(path: &Path, what: impl std::fmt::Display) -> DeviceError {
    DeviceError::Config(format!("{}: {what}", path.display()))
}

fn open_direct_or_not(path: &Path, want_direct: bool) -> Result<(File, bool)> {
    if want_direct {
        match open_file(path, true, false) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %path.display(), "file system refuses O_DIRECT; using buffered I/O");
            }
            Err(e) => return Err(DeviceError::io("open device file", e)),
        }
    }
    let f = open_file(path, false, false).map_err(|e| DeviceError::io("open device file", e))?;
    Ok((f, false))
}

/// Allocates `bytes` for a regular file (`fallocate`, or `set_len` where unsupported).
fn preallocate(file: &File, bytes: u64) -> Result<()> {
    match allocate(file, 0, bytes) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => file
            .set_len(bytes)
            .map_err(|e| DeviceError::io("size device file", e)),
        Err(e) => Err(DeviceError::io("preallocate device file", e)),
    }
}

/// Allocates `len` bytes of `file` from `offset` (zeros where nothing was written), growing
/// the file to cover them.
pub(crate) fn allocate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: fallocate on a valid, owned descriptor has no memory effects.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            0,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Wall-clock nanoseconds: the first sequence number of a new single-file device.
fn seq_base_now() -> u64 {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    ns.clamp(1, crate::format::CHECKPOINT_SEQ_MAX / 4)
}

impl Layout {
    /// Opens (creating or formatting if needed) the storage at `path` as `config.layout` says,
    /// and takes its lock. For the single-file layout, `config`'s segment size and capacity are
    /// replaced by the device's.
    pub(crate) fn open(path: &Path, config: &mut FileConfig) -> Result<Opened> {
        let meta = match std::fs::metadata(path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(DeviceError::io("stat device path", e)),
        };
        let kind = meta.as_ref().map(|m| m.file_type());
        let is_dir = kind.is_some_and(|k| k.is_dir());
        let is_single = kind.is_some_and(|k| k.is_file() || k.is_block_device());
        if kind.is_some() && !is_dir && !is_single {
            return Err(config_error(
                path,
                "neither a directory, a regular file nor a block device",
            ));
        }
        match config.layout {
            FileLayout::Directory if is_single => Err(config_error(
                path,
                "is a file or block device, but the directory layout was asked for",
            )),
            FileLayout::SingleFile if is_dir => Err(config_error(
                path,
                "is a directory, but the single-file layout was asked for",
            )),
            FileLayout::SingleFile => Self::open_single(path, config, kind.is_none()),
            FileLayout::Auto if is_single => Self::open_single(path, config, false),
            FileLayout::Auto | FileLayout::Directory => Self::open_dir(path, config),
        }
    }

    fn open_dir(dir: &Path, config: &FileConfig) -> Result<Opened> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| DeviceError::io("create device directory", e))?;
        let lock_file = OpenOptions::new()
            .mode(0o600)
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .map_err(|e| DeviceError::io("open lock file", e))?;
        flock(&lock_file, "lock device directory")?;
        let direct = if config.direct_io {
            probe_direct(dir)
        } else {
            None
        };
        if config.direct_io && direct.is_none() {
            tracing::warn!(dir = %dir.display(), "file system refuses O_DIRECT; using buffered I/O");
        }
        Ok(Opened {
            layout: Layout::Dir(dir.to_path_buf()),
            lock: DeviceLock::Dir(lock_file),
            direct,
        })
    }

    fn open_single(path: &Path, config: &mut FileConfig, create: bool) -> Result<Opened> {
        let wanted_slots = config.capacity_bytes / config.segment_bytes;
        let new_bytes = || {
            Superblock::bytes_for_slots(wanted_slots.max(SLOTS_MIN), config.segment_bytes)
                .ok_or_else(|| config_error(path, "capacity_bytes too large"))
        };
        if create {
            // Created without O_DIRECT (some file systems refuse it after creating the file).
            let f = open_file(path, false, true)
                .map_err(|e| DeviceError::io("create device file", e))?;
            if wanted_slots < SLOTS_MIN {
                drop(f);
                let _ = std::fs::remove_file(path);
                return Err(too_small(path, config.capacity_bytes, config.segment_bytes));
            }
            preallocate(&f, new_bytes()?).inspect_err(|_| {
                let _ = std::fs::remove_file(path);
            })?;
            f.sync_all()
                .map_err(|e| DeviceError::io("create device file", e))?;
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        let (file, direct) = open_direct_or_not(path, config.direct_io)?;
        flock(&file, "lock device file")?;
        let meta = file
            .metadata()
            .map_err(|e| DeviceError::io("stat device file", e))?;
        let block_device = meta.file_type().is_block_device();
        let mut bytes = if block_device {
            block_device_bytes(&file).map_err(|e| DeviceError::io("BLKGETSIZE64", e))?
        } else {
            meta.len()
        };
        if bytes == 0 && !block_device {
            // An empty regular file: grown to the configured capacity.
            if wanted_slots < SLOTS_MIN {
                return Err(too_small(path, config.capacity_bytes, config.segment_bytes));
            }
            bytes = new_bytes()?;
            preallocate(&file, bytes)?;
            file.sync_all()
                .map_err(|e| DeviceError::io("size device file", e))?;
        }
        let read_align = if direct {
            read_align_of(&file)
        } else {
            ALIGN_BYTES as u64
        };
        let io = |e| DeviceError::io("read superblock", e);
        let head_len = 2 * META_BLOCK_BYTES as usize;
        if bytes < head_len as u64 {
            return Err(too_small(path, bytes, config.segment_bytes));
        }
        let (head, _) = read_aligned(&file, 0, head_len, ALIGN_BYTES as u64).map_err(io)?;
        let copies = SUPERBLOCK_OFFSETS
            .map(|o| decode_superblock(&head[o as usize..o as usize + META_BLOCK_BYTES as usize]));
        let mut superblock_repaired = false;
        let sb = match copies {
            [Some(a), _] | [None, Some(a)] => {
                // A copy that does not decode (a torn write, damage) is rewritten from the other.
                if let Some(bad) = copies.iter().position(|c| c.is_none()) {
                    tracing::warn!(path = %path.display(), copy = bad, "superblock copy damaged; rewritten from the other");
                    write_block(&file, SUPERBLOCK_OFFSETS[bad], &encode_superblock(&a))
                        .and_then(|()| file.sync_data())
                        .map_err(|e| DeviceError::io("repair superblock", e))?;
                    superblock_repaired = true;
                }
                a
            }
            [None, None] if head.iter().all(|&b| b == 0) => {
                let sb = Superblock::plan(
                    bytes,
                    config.segment_bytes,
                    rand::random::<u64>() | 1,
                    seq_base_now(),
                )
                .ok_or_else(|| too_small(path, bytes, config.segment_bytes))?;
                let block = encode_superblock(&sb);
                let mut both = AlignedBuf::new(head_len);
                both[..block.len()].copy_from_slice(&block);
                both[block.len()..2 * block.len()].copy_from_slice(&block);
                file.write_all_at(&both, 0)
                    .and_then(|()| file.sync_data())
                    .map_err(|e| DeviceError::io("write superblock", e))?;
                tracing::info!(path = %path.display(), slots = sb.slot_count, segment_bytes = sb.segment_bytes, "formatted single-file device");
                sb
            }
            [None, None] => {
                return Err(config_error(
                    path,
                    "holds no valid railstore superblock and its first 8 KiB are not zero: \
                     refusing to format it (zero them to format, e.g. \
                     dd if=/dev/zero bs=4096 count=2 conv=notrunc of=PATH)",
                ))
            }
        };
        if bytes < sb.total_bytes {
            return Err(config_error(
                path,
                format!(
                    "is {bytes} B but its superblock describes {} B",
                    sb.total_bytes
                ),
            ));
        }
        if sb.segment_bytes != config.segment_bytes {
            tracing::info!(path = %path.display(), device = sb.segment_bytes, config = config.segment_bytes, "using the device's segment size");
            config.segment_bytes = sb.segment_bytes;
            config.validate().map_err(|e| {
                config_error(
                    path,
                    format!("the device's segments do not fit the limits: {e}"),
                )
            })?;
        }
        config.capacity_bytes = config.capacity_bytes.min(sb.slot_count * sb.segment_bytes);
        let file = Arc::new(file);
        let single = Single {
            path: path.to_path_buf(),
            file: file.clone(),
            sb,
            block_device,
            aside_dir: config.aside_dir.clone(),
            next_checkpoint: Mutex::new((1, 0)),
            superblock_repaired,
        };
        Ok(Opened {
            layout: Layout::Single(single),
            lock: DeviceLock::Single(file),
            direct: direct.then_some(read_align),
        })
    }

    /// The directory or device file.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Layout::Dir(d) => d,
            Layout::Single(s) => &s.path,
        }
    }

    pub(crate) fn single(&self) -> Option<&Single> {
        match self {
            Layout::Single(s) => Some(s),
            Layout::Dir(_) => None,
        }
    }

    /// The segments on disk in id order, and the free slots (lowest last).
    pub(crate) fn list(&self, direct: bool) -> Result<(Vec<Found>, Vec<u32>)> {
        match self {
            Layout::Dir(dir) => {
                let mut ids = Vec::new();
                for e in std::fs::read_dir(dir)
                    .map_err(|e| DeviceError::io("list device directory", e))?
                {
                    let e = e.map_err(|e| DeviceError::io("list device directory", e))?;
                    if let Some(id) = e.file_name().to_str().and_then(parse_segment_name) {
                        ids.push(id);
                    }
                }
                ids.sort_unstable();
                let mut found = Vec::with_capacity(ids.len());
                for id in ids {
                    let path = segment_path(dir, id);
                    let file = open_file(&path, direct, false)
                        .map_err(|e| DeviceError::io("open segment", e))?;
                    let len = file
                        .metadata()
                        .map_err(|e| DeviceError::io("stat segment", e))?
                        .len();
                    found.push(Found {
                        id,
                        io: SegIo {
                            file: Arc::new(file),
                            base: 0,
                            cap: u64::MAX,
                        },
                        place: SegPlace::File(path),
                        end: Some(len),
                        floor: 0,
                    });
                }
                Ok((found, Vec::new()))
            }
            Layout::Single(s) => {
                let sb = &s.sb;
                let mut found = Vec::new();
                let mut free = Vec::new();
                let mut hdr = AlignedBuf::new(META_BLOCK_BYTES as usize);
                for i in 0..sb.slot_count {
                    s.file
                        .read_exact_at(&mut hdr, sb.slot_offset(i))
                        .map_err(|e| DeviceError::io("read slot header", e))?;
                    match decode_slot_header(&hdr, sb.device_id, sb.slot_data_bytes()) {
                        (Some(id), seal) => found.push(Found {
                            id: id.segment,
                            io: s.slot_io(i as u32),
                            place: SegPlace::Slot {
                                index: i as u32,
                                start_seq: id.start_seq,
                            },
                            end: seal.map(|s| s.end),
                            floor: id.start_seq - 1,
                        }),
                        (None, _) => free.push(i as u32),
                    }
                }
                found.sort_by_key(|f| f.id);
                if let Some(w) = found.windows(2).find(|w| w[0].id == w[1].id) {
                    return Err(DeviceError::Corrupt {
                        location: format!("{} segment {}", s.path.display(), w[0].id),
                        reason: "two slots hold the same segment",
                    });
                }
                free.reverse();
                Ok((found, free))
            }
        }
    }

    /// Bytes `0..len` of a segment (`None`: all it holds).
    pub(crate) fn read_segment(&self, f: &Found, len: Option<u64>) -> Result<SegBytes> {
        let io = |e| DeviceError::io("read segment", e);
        match &f.place {
            SegPlace::File(path) => {
                let mut b = std::fs::read(path).map_err(io)?;
                if let Some(len) = len {
                    b.truncate(len as usize);
                }
                Ok(SegBytes::Vec(b))
            }
            SegPlace::Slot { .. } => {
                let len = len.unwrap_or(f.io.cap).min(f.io.cap) as usize;
                // The slot's log starts on a block boundary: no offset into the buffer.
                let (buf, _) =
                    read_aligned(&f.io.file, f.io.base, len, ALIGN_BYTES as u64).map_err(io)?;
                Ok(SegBytes::Aligned(buf, len))
            }
        }
    }

    /// Candidate checkpoints, newest first, each with the region it is in (0 for the file).
    /// The caller says which one it relies on with [`Layout::checkpoint_in_use`].
    pub(crate) fn read_checkpoints(&self) -> Vec<(usize, Vec<u8>)> {
        match self {
            Layout::Dir(dir) => std::fs::read(dir.join(CHECKPOINT_FILE))
                .map(|b| vec![(0, b)])
                .unwrap_or_default(),
            Layout::Single(s) => {
                let mut found = Vec::new();
                for r in 0..2 {
                    let len = s.sb.checkpoint_region_bytes as usize;
                    let Ok((buf, _)) = read_aligned(
                        &s.file,
                        s.sb.checkpoint_region_offset(r),
                        len,
                        ALIGN_BYTES as u64,
                    ) else {
                        tracing::warn!(region = r, "checkpoint region unreadable");
                        continue;
                    };
                    if let Some((generation, bytes)) =
                        decode_checkpoint_region(&buf[..len], s.sb.device_id)
                    {
                        found.push((generation, r, bytes.to_vec()));
                    }
                }
                found.sort_by_key(|(g, _, _)| std::cmp::Reverse(*g));
                // Generations keep rising past any region header seen, torn or not.
                let (g, r) = found.first().map_or((0, 1), |(g, r, _)| (*g, *r));
                *s.next_checkpoint.lock().unwrap_or_else(|e| e.into_inner()) = (g + 1, 1 - r);
                found.into_iter().map(|(_, r, b)| (r, b)).collect()
            }
        }
    }

    /// Recovery relies on the checkpoint in `region` (`None`: on none): the next checkpoint
    /// goes to the other region, so that a torn write of it leaves this one to fall back to.
    pub(crate) fn checkpoint_in_use(&self, region: Option<usize>) {
        if let (Layout::Single(s), Some(r)) = (self, region) {
            s.next_checkpoint
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .1 = 1 - r;
        }
    }

    /// Durably replaces the checkpoint. Returns false (with a warning) if it does not fit.
    pub(crate) fn write_checkpoint(&self, bytes: &[u8]) -> Result<bool> {
        let io = |e| DeviceError::io("write checkpoint", e);
        match self {
            Layout::Dir(dir) => {
                let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
                {
                    let f = OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .mode(0o600)
                        .open(&tmp)
                        .map_err(io)?;
                    f.write_all_at(bytes, 0).map_err(io)?;
                    f.sync_all().map_err(io)?;
                }
                std::fs::rename(&tmp, dir.join(CHECKPOINT_FILE)).map_err(io)?;
                sync_dir(dir)?;
                Ok(true)
            }
            Layout::Single(s) => {
                let mut next = s.next_checkpoint.lock().unwrap_or_else(|e| e.into_inner());
                let (generation, region) = *next;
                let need = CKPT_REGION_HEADER_BYTES + bytes.len();
                if need as u64 > s.sb.checkpoint_region_bytes {
                    tracing::warn!(
                        bytes = need,
                        region_bytes = s.sb.checkpoint_region_bytes,
                        "checkpoint larger than its region; not written (open replays more log)"
                    );
                    return Ok(false);
                }
                let mut buf = AlignedBuf::new(need);
                buf[..CKPT_REGION_HEADER_BYTES].copy_from_slice(&encode_checkpoint_region_header(
                    s.sb.device_id,
                    generation,
                    bytes.len() as u64,
                ));
                buf[CKPT_REGION_HEADER_BYTES..need].copy_from_slice(bytes);
                let len = align_up(need as u64) as usize;
                // Into the region not holding the newest checkpoint: a torn write leaves that
                // one to fall back to.
                s.file
                    .write_all_at(&buf[..len], s.sb.checkpoint_region_offset(region))
                    .and_then(|()| s.file.sync_data())
                    .map_err(io)?;
                *next = (generation + 1, 1 - region);
                Ok(true)
            }
        }
    }

    /// Creates segment `id`, whose records will have sequence numbers from `start_seq` on. The
    /// single-file layout takes a slot from `free`, keeping `keep` slots for others (compaction),
    /// and writes the slot's identity; `Ok(None)`: no slot to take.
    pub(crate) fn create_segment(
        &self,
        free: &mut Vec<u32>,
        keep: usize,
        id: u64,
        start_seq: u64,
        direct: bool,
    ) -> Result<Option<(SegIo, SegPlace)>> {
        match self {
            Layout::Dir(dir) => {
                let path = segment_path(dir, id);
                let file = open_file(&path, direct, true)
                    .map_err(|e| DeviceError::io("create segment", e))?;
                Ok(Some((
                    SegIo {
                        file: Arc::new(file),
                        base: 0,
                        cap: u64::MAX,
                    },
                    SegPlace::File(path),
                )))
            }
            Layout::Single(s) => {
                if free.len() <= keep {
                    return Ok(None);
                }
                let index = *free.last().expect("checked");
                // Not synced here: the flusher's fdatasync when the previous segment is sealed
                // (before any record of this one is written) covers it.
                s.write_slot_header(index, Some((id, start_seq)), None)
                    .map_err(|e| DeviceError::io("write slot header", e))?;
                free.pop();
                Ok(Some((
                    s.slot_io(index),
                    SegPlace::Slot { index, start_seq },
                )))
            }
        }
    }

    /// Makes a sealed segment durable: its bytes up to `end`, and (slot) the seal in its header.
    pub(crate) fn seal(&self, io: &SegIo, place: &SegPlace, id: u64, end: u64) -> Result<()> {
        match (self, place) {
            (Layout::Single(s), SegPlace::Slot { index, start_seq }) => {
                s.write_slot_header(*index, Some((id, *start_seq)), Some(end))
                    .map_err(|e| DeviceError::io("write slot seal", e))?;
                io.file
                    .sync_data()
                    .map_err(|e| DeviceError::io("fdatasync sealed segment", e))
            }
            (_, _) => {
                // A file allocated ahead of its writes (`Shared::allocate_ahead`) is cut back to
                // its written blocks: a sealed segment file ends where its log does.
                let written = align_up(end);
                let len = io
                    .file
                    .metadata()
                    .map_err(|e| DeviceError::io("stat sealed segment", e))?
                    .len();
                if len > written {
                    io.file
                        .set_len(written)
                        .map_err(|e| DeviceError::io("truncate sealed segment", e))?;
                }
                io.file
                    .sync_data()
                    .map_err(|e| DeviceError::io("fdatasync sealed segment", e))?;
                sync_dir(self.path())
            }
        }
    }

    /// Deletes a segment whose live records were durably copied; a slot becomes free (its
    /// header zeroed) and the caller returns it to the free list.
    pub(crate) fn free_segment(&self, place: &SegPlace) -> Result<()> {
        match (self, place) {
            (Layout::Single(s), SegPlace::Slot { index, .. }) => s
                .write_slot_header(*index, None, None)
                .and_then(|()| s.file.sync_data())
                .map_err(|e| DeviceError::io("free slot", e)),
            (_, SegPlace::File(path)) => {
                std::fs::remove_file(path).map_err(|e| DeviceError::io("remove segment", e))?;
                sync_dir(self.path())
            }
            (Layout::Dir(_), SegPlace::Slot { .. }) => unreachable!("slots only in one file"),
        }
    }

    /// After recovery cut the last segment at `end` (`bytes` are its bytes from 0): a file is
    /// truncated there. A slot keeps its bytes (later appends overwrite them) except that
    /// `zero_to`, the end of intact records behind the cut, are zeroed so they can never be
    /// replayed after new records.
    pub(crate) fn cut_tail(&self, f: &Found, bytes: &[u8], end: u64, zero_to: u64) -> Result<()> {
        let io = |e| DeviceError::io("truncate torn tail", e);
        match &f.place {
            SegPlace::File(_) => {
                f.io.file.set_len(end).map_err(io)?;
                f.io.file.sync_all().map_err(io)
            }
            SegPlace::Slot { .. } => {
                if zero_to <= end {
                    return Ok(());
                }
                let from = crate::aligned::align_down(end);
                let to = align_up(zero_to).min(f.io.cap);
                let mut buf = AlignedBuf::new((to - from) as usize);
                let keep = (end - from) as usize;
                buf[..keep].copy_from_slice(&bytes[from as usize..end as usize]);
                f.io.file
                    .write_all_at(&buf[..(to - from) as usize], f.io.base + from)
                    .and_then(|()| f.io.file.sync_data())
                    .map_err(io)
            }
        }
    }

    /// Where a copy of the tail cut from segment `f` at `offset` goes: a new file in the
    /// device directory (`seg-NNNNNNNNNN.log.corrupt-<offset>`) or, for the single-file
    /// layout, in `FileConfig::aside_dir` or the device file's directory
    /// (`<file name>.corrupt-<segment>-<offset>`).
    pub(crate) fn aside_path(&self, f: &Found, offset: u64) -> Result<(PathBuf, String)> {
        match (&f.place, self) {
            (SegPlace::File(path), _) => {
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .expect("segment names are ASCII");
                let dir = path.parent().expect("segments live in a directory");
                Ok((dir.to_path_buf(), format!("{name}.corrupt-{offset}")))
            }
            (_, Layout::Single(s)) => {
                let dir = match (&s.aside_dir, s.block_device) {
                    (Some(d), _) => d.clone(),
                    (None, false) => s
                        .path
                        .parent()
                        .filter(|p| !p.as_os_str().is_empty())
                        .unwrap_or(Path::new("."))
                        .to_path_buf(),
                    (None, true) => {
                        return Err(DeviceError::Corrupt {
                            location: format!(
                                "{} segment {} offset {offset}",
                                s.path.display(),
                                f.id
                            ),
                            reason: "intact records lie behind a corrupt one; set \
                                     FileConfig::aside_dir to copy them aside and open",
                        })
                    }
                };
                let name = s
                    .path
                    .file_name()
                    .map_or("device".into(), |n| n.to_string_lossy().into_owned());
                Ok((dir, format!("{name}.corrupt-{}-{offset}", f.id)))
            }
            (SegPlace::Slot { .. }, Layout::Dir(_)) => unreachable!("slots only in one file"),
        }
    }
}

impl Single {
    fn slot_io(&self, index: u32) -> SegIo {
        SegIo {
            file: self.file.clone(),
            base: self.sb.slot_offset(index as u64) + META_BLOCK_BYTES,
            cap: self.sb.slot_data_bytes(),
        }
    }

    /// Writes slot `index`'s header block: identity `(segment, start_seq)` and seal `end`, or
    /// zeros (free). Rewriting it to add the seal leaves the identity sector's bytes as they
    /// were, so a torn rewrite cannot lose the identity.
    fn write_slot_header(
        &self,
        index: u32,
        id: Option<(u64, u64)>,
        seal: Option<u64>,
    ) -> std::io::Result<()> {
        let device_id = self.sb.device_id;
        let id = id.map(|(segment, start_seq)| SlotIdentity {
            device_id,
            segment,
            start_seq,
        });
        let seal = seal.zip(id).map(|(end, i)| SlotSeal {
            device_id,
            segment: i.segment,
            end,
        });
        write_block(
            &self.file,
            self.sb.slot_offset(index as u64),
            &encode_slot_header(id.as_ref(), seal.as_ref()),
        )
    }
}

fn write_block(file: &File, at: u64, block: &[u8]) -> std::io::Result<()> {
    let mut buf = AlignedBuf::new(block.len());
    buf[..block.len()].copy_from_slice(block);
    file.write_all_at(&buf[..block.len()], at)
}

fn too_small(path: &Path, bytes: u64, segment_bytes: u64) -> DeviceError {
    let need = Superblock::bytes_for_slots(SLOTS_MIN, segment_bytes).unwrap_or(u64::MAX);
    config_error(
        path,
        format!(
            "{bytes} B is too small for the single-file layout: it needs at least {SLOTS_MIN} \
             segment slots of {segment_bytes} B ({need} B with its metadata)"
        ),
    )
}
