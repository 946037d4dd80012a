//! Page-locked shard buffers kept for reuse. A call whose shards all lie in them is copied by the
//! GPU straight from and into them (`Gpu::apply_direct`), with no staging copy on the CPU; that
//! copy cost more CPU than coding the shards (docs/benchmarks/ec-gpu.md). Allocating page-locked
//! memory takes milliseconds, hence the pool.

use super::{gpu, pinned};
use cudarc::driver::PinnedHostSlice;
use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

/// Smallest buffer the pool hands out; lengths are rounded up to powers of two from here.
const CLASS_BYTES_MIN: usize = 64 << 10;
/// Largest buffer the pool hands out; longer shards live on the heap (and are staged).
const CLASS_BYTES_MAX: usize = 64 << 20;
/// Free page-locked bytes the pool keeps; buffers returned beyond this are freed.
const RETAINED_BYTES_MAX: usize = 512 << 20;

struct Free {
    by_class: HashMap<usize, Vec<PinnedHostSlice<u8>>>,
    bytes: usize,
}

static FREE: Mutex<Option<Free>> = Mutex::new(None);

/// [start, end) of every buffer the pool allocated and has not freed.
static RANGES: RwLock<Vec<(usize, usize)>> = RwLock::new(Vec::new());

/// A pool buffer; goes back to the pool when dropped.
pub(crate) struct PooledPinned {
    slice: Option<PinnedHostSlice<u8>>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is owned by this value alone; the pointer is into memory it keeps alive.
unsafe impl Send for PooledPinned {}
// SAFETY: shared access only reads through `as_slice`.
unsafe impl Sync for PooledPinned {}

impl PooledPinned {
    /// A zeroed buffer of `len` bytes, or `None` where there is no GPU, the length is outside
    /// the pool's classes or the driver refuses the memory.
    pub(crate) fn take(len: usize) -> Option<PooledPinned> {
        if len == 0 || len > CLASS_BYTES_MAX {
            return None;
        }
        let class = len.next_power_of_two().max(CLASS_BYTES_MIN);
        let reused = FREE.lock().ok().and_then(|mut free| {
            let free = free.as_mut()?;
            let b = free.by_class.get_mut(&class)?.pop()?;
            free.bytes -= class;
            Some(b)
        });
        let mut slice = match reused {
            Some(b) => b,
            None => {
                let g = gpu().ok()?;
                let mut b = pinned(&g.ctx, class).ok()?;
                let start = b.as_mut_slice().ok()?.as_mut_ptr() as usize;
                RANGES.write().ok()?.push((start, start + class));
                b
            }
        };
        let ptr = slice.as_mut_slice().ok()?.as_mut_ptr();
        // SAFETY: the buffer holds `class` >= len bytes and no GPU work uses it now.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Some(PooledPinned {
            slice: Some(slice),
            ptr,
            len,
        })
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points at `len` initialised bytes the slice keeps alive.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PooledPinned {
    fn drop(&mut self) {
        let Some(slice) = self.slice.take() else {
            return;
        };
        let class = slice.len();
        if let Ok(mut free) = FREE.lock() {
            let free = free.get_or_insert_with(|| Free {
                by_class: HashMap::new(),
                bytes: 0,
            });
            if free.bytes + class <= RETAINED_BYTES_MAX {
                free.bytes += class;
                free.by_class.entry(class).or_default().push(slice);
                return;
            }
        }
        if let Ok(mut ranges) = RANGES.write() {
            let start = self.ptr as usize;
            ranges.retain(|&(s, _)| s != start);
        }
        drop(slice);
    }
}

/// Whether `len` bytes from every pointer lie inside one pool buffer each.
pub(crate) fn all_pinned(inputs: &[*const u8], outputs: &[*mut u8], len: usize) -> bool {
    let Ok(ranges) = RANGES.read() else {
        return false;
    };
    if ranges.is_empty() {
        return false;
    }
    let inside = |p: usize| {
        ranges
            .iter()
            .any(|&(s, e)| p >= s && p.checked_add(len).is_some_and(|end| end <= e))
    };
    inputs.iter().all(|&p| inside(p as usize)) && outputs.iter().all(|&p| inside(p as usize))
}
