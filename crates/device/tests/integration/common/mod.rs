//! Shared helpers for the device tests: the conformance model (in the crate, so that other
//! crates' devices run it too) and the file layouts.

pub use railstore_device::conformance::*;
use railstore_device::*;

/// The two on-disk layouts of the `file` backend, for tests that run on both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A directory of segment files.
    Dir,
    /// One preallocated file (`device.img` in the test directory).
    File,
}

pub const LAYOUTS: [Layout; 2] = [Layout::Dir, Layout::File];

/// Where the device of `layout` lives in test directory `dir`.
pub fn device_path(dir: &std::path::Path, layout: Layout) -> std::path::PathBuf {
    match layout {
        Layout::Dir => dir.to_path_buf(),
        Layout::File => dir.join("device.img"),
    }
}

/// `cfg` asking for `layout` explicitly.
pub fn with_layout(cfg: FileConfig, layout: Layout) -> FileConfig {
    FileConfig {
        layout: match layout {
            Layout::Dir => FileLayout::Directory,
            Layout::File => FileLayout::SingleFile,
        },
        ..cfg
    }
}

/// The superblock of a single-file device image.
pub fn superblock(path: &std::path::Path) -> format::Superblock {
    let head = std::fs::read(path).unwrap();
    format::decode_superblock(&head[..4096]).expect("superblock")
}

/// Removes the device's checkpoints: the file, or both regions zeroed.
pub fn remove_checkpoints(path: &std::path::Path, layout: Layout) {
    match layout {
        Layout::Dir => std::fs::remove_file(path.join("checkpoint")).unwrap(),
        Layout::File => {
            use std::os::unix::fs::FileExt;
            let sb = superblock(path);
            let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            let zeros = vec![0u8; sb.checkpoint_region_bytes as usize];
            for r in 0..2 {
                f.write_all_at(&zeros, sb.checkpoint_region_offset(r))
                    .unwrap();
            }
            f.sync_all().unwrap();
        }
    }
}

/// Reads `len` bytes at `offset` of `path`.
pub fn read_at(path: &std::path::Path, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0u8; len];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut b, offset)
        .unwrap();
    b
}

/// Writes `bytes` at `offset` of `path` (durably).
pub fn write_at(path: &std::path::Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
    f.sync_all().unwrap();
}
