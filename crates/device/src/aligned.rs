//! Heap buffers aligned for O_DIRECT.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Alignment of every O_DIRECT buffer, file offset and transfer length. 4 KiB satisfies both
/// 512-byte and 4 KiB logical-block devices.
pub const ALIGN_BYTES: usize = 4096;

/// Rounds `n` up to a multiple of [`ALIGN_BYTES`].
pub fn align_up(n: u64) -> u64 {
    n.div_ceil(ALIGN_BYTES as u64) * ALIGN_BYTES as u64
}

/// Rounds `n` down to a multiple of [`ALIGN_BYTES`].
pub fn align_down(n: u64) -> u64 {
    n / ALIGN_BYTES as u64 * ALIGN_BYTES as u64
}

/// A zero-initialised, fixed-capacity byte buffer whose start is aligned to [`ALIGN_BYTES`].
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>; no interior mutability.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only permit reads of initialised bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `cap` bytes rounded up to the alignment (at least one block).
    pub fn new(cap: usize) -> Self {
        let cap = (align_up(cap as u64) as usize).max(ALIGN_BYTES);
        let layout = Layout::from_size_align(cap, ALIGN_BYTES).expect("aligned buffer layout");
        // SAFETY: layout has non-zero size; a null return is handled below.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, cap }
    }

    /// Capacity in bytes (a multiple of the alignment).
    pub fn capacity(&self) -> usize {
        self.cap
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to cap bytes allocated (and zero-initialised) in new(), alive
        // until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.cap, ALIGN_BYTES).expect("aligned buffer layout");
        // SAFETY: ptr was allocated in new() with exactly this layout and is freed once.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut b = AlignedBuf::new(5000);
        assert_eq!(b.capacity(), 8192);
        assert_eq!(b.as_ptr() as usize % ALIGN_BYTES, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[8191] = 7;
        assert_eq!(b[8191], 7);
        assert_eq!(align_up(1), 4096);
        assert_eq!(align_down(4097), 4096);
    }
}
