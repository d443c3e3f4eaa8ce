//! A fixed byte buffer that one writer and one reader use concurrently in
//! disjoint regions.
//!
//! The prefill ring and the decode step buffers are written by a pool worker
//! while the consumer reads rows published earlier. Rust references cannot
//! express "this range is yours, that range is mine" across threads, so the
//! buffer hands out raw slices and the callers uphold the protocol: a region
//! is written only while no published view covers it, and read only after
//! its [`super::ready::Ready`] count was published (Release) and observed
//! (Acquire).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A buffer of `len` bytes, zero-filled, 8-byte aligned (so decoded f32
/// rows can be viewed in place), shared across threads.
pub(crate) struct RingBuf {
    words: Words,
    len: usize,
    /// End of the highest range handed out for writing: the pages below it
    /// are (or may be) resident, those above it were never touched.
    touched: AtomicUsize,
}

// SAFETY: the buffer is plain bytes (heap or a private mapping the ring
// owns); all access goes through the unsafe methods below, whose callers
// guarantee that concurrent accesses touch disjoint ranges and are ordered
// by the Ready protocol.
unsafe impl Sync for RingBuf {}
// SAFETY: the buffer is an owned allocation of plain bytes with no thread
// affinity; moving it to another thread moves its sole owner.
unsafe impl Send for RingBuf {}

/// Rings at least this large are mapped from the OS rather than taken from
/// the heap.
///
/// Why: a heap allocation of that size is zeroed by a memset whenever the
/// allocator serves it from memory it already holds (glibc does once a
/// process has freed large blocks, raising its mmap threshold up to
/// 32 MiB): an 8K Qwen4-Exp prefill's 10 MiB ring took 5.8 ms to allocate
/// in the bench on the 2-core VM, before the first read was queued. A fresh
/// anonymous mapping is zero and becomes resident page by page as rows are
/// written.
const MAP_AT: usize = 1 << 20;

/// The ring's zeroed memory.
enum Words {
    Heap(Box<[UnsafeCell<u64>]>),
    /// A private anonymous mapping of `bytes` (page aligned, zero-filled).
    #[cfg(all(unix, not(miri)))]
    Mapped {
        ptr: std::ptr::NonNull<u8>,
        bytes: usize,
    },
}

impl Words {
    fn zeroed(len: usize) -> Words {
        #[cfg(all(unix, not(miri)))]
        if len >= MAP_AT {
            // SAFETY: a new private anonymous mapping: no address hint, no
            // file; the result is checked before use.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANON,
                    -1,
                    0,
                )
            };
            if ptr != libc::MAP_FAILED {
                if let Some(ptr) = std::ptr::NonNull::new(ptr as *mut u8) {
                    return Words::Mapped { ptr, bytes: len };
                }
            }
            // No mapping (address space or map count exhausted): the heap.
        }
        let zeroed: Box<[u64]> = vec![0u64; len.div_ceil(8)].into_boxed_slice();
        // SAFETY: `UnsafeCell<u64>` is `repr(transparent)` over `u64`, so
        // the slice's layout, length and alignment are unchanged.
        Words::Heap(unsafe { Box::from_raw(Box::into_raw(zeroed) as *mut [UnsafeCell<u64>]) })
    }

    /// The first byte; the whole buffer may be written through it.
    fn base(&self) -> *mut u8 {
        match self {
            // raw_get keeps the UnsafeCell's permission to write through a
            // shared reference; the pointer's provenance is the whole slice.
            Words::Heap(words) => UnsafeCell::raw_get(words.as_ptr()) as *mut u8,
            #[cfg(all(unix, not(miri)))]
            Words::Mapped { ptr, .. } => ptr.as_ptr(),
        }
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        #[cfg(all(unix, not(miri)))]
        if let Words::Mapped { ptr, bytes } = *self {
            // SAFETY: the mapping made in `zeroed`, unmapped once; no slice
            // of it outlives the ring (they borrow it).
            unsafe { libc::munmap(ptr.as_ptr() as *mut libc::c_void, bytes) };
        }
    }
}

impl RingBuf {
    /// A zeroed buffer of `len` bytes, whose memory becomes resident only
    /// as rows are written (see [`MAP_AT`]).
    pub(crate) fn new(len: usize) -> RingBuf {
        RingBuf {
            words: Words::zeroed(len),
            len,
            touched: AtomicUsize::new(0),
        }
    }

    /// Bytes from the start up to the end of the highest range written so
    /// far: what the ring holds in memory (its pages are zeroed on demand).
    pub(crate) fn touched(&self) -> usize {
        self.touched.load(Ordering::Relaxed)
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Pointer to byte `start` (in bounds: checked by the callers).
    fn byte_ptr(&self, start: usize) -> *mut u8 {
        self.words.base().wrapping_add(start)
    }

    fn check(&self, start: usize, len: usize) {
        assert!(
            start.checked_add(len).is_some_and(|end| end <= self.len()),
            "ring range {start}+{len} outside {} bytes",
            self.len()
        );
    }

    /// A mutable view of `start..start + len`.
    ///
    /// # Safety
    /// No other live slice (shared or mutable) from this buffer may overlap
    /// the range while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, start: usize, len: usize) -> &mut [u8] {
        self.check(start, len);
        self.touched.fetch_max(start + len, Ordering::Relaxed);
        // SAFETY: in bounds (checked), inside one allocation; the caller
        // guarantees exclusivity of the range.
        unsafe { std::slice::from_raw_parts_mut(self.byte_ptr(start), len) }
    }

    /// A shared view of `start..start + len`.
    ///
    /// # Safety
    /// No mutable slice overlapping the range may be live while the returned
    /// slice lives, and the writes to the range must happen-before this call.
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &[u8] {
        self.check(start, len);
        // SAFETY: as above, for shared access.
        unsafe { std::slice::from_raw_parts(self.byte_ptr(start), len) }
    }

    /// A mutable f32 view of `values` values from byte `start`.
    ///
    /// # Safety
    /// As [`RingBuf::slice_mut`] for the bytes covered.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut_f32(&self, start: usize, values: usize) -> &mut [f32] {
        assert!(start % 4 == 0, "f32 view at unaligned byte {start}");
        self.check(start, values * 4);
        self.touched
            .fetch_max(start + values * 4, Ordering::Relaxed);
        // SAFETY: in bounds, 4-aligned (8-aligned base, start % 4 == 0), any
        // bit pattern is a valid f32; exclusivity per the caller.
        unsafe { std::slice::from_raw_parts_mut(self.byte_ptr(start) as *mut f32, values) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::prefetch::ready::Ready;
    use std::sync::Arc;

    /// Meant for miri: a writer fills the two halves of the buffer in turn
    /// while the reader reads the half published before; `written` and
    /// `acked` are the two directions of the protocol. Miri's data-race
    /// detector checks they order the raw-slice accesses.
    #[test]
    fn concurrent_disjoint_write_and_read() {
        let ring = Arc::new(RingBuf::new(64));
        let written = Arc::new(Ready::new());
        let acked = Arc::new(Ready::new());
        let rounds = 6u32;
        let writer = {
            let (ring, written, acked) = (ring.clone(), written.clone(), acked.clone());
            std::thread::spawn(move || {
                for r in 0..rounds {
                    // The half is free once the reader acked round r - 2.
                    acked.wait(r.saturating_sub(1)).unwrap();
                    let half = (r % 2) as usize * 32;
                    // SAFETY: the reader finished with this half (acked) and
                    // reads only the other half until we publish.
                    unsafe { ring.slice_mut(half, 32) }.fill(r as u8 + 1);
                    written.publish(r + 1);
                }
            })
        };
        for r in 0..rounds {
            written.wait(r + 1).unwrap();
            let half = (r % 2) as usize * 32;
            // SAFETY: published (Acquire-observed) and not rewritten before
            // we ack.
            let src = unsafe { ring.slice(half, 32) };
            assert!(src.iter().all(|&b| b == r as u8 + 1));
            acked.publish(r + 1);
        }
        writer.join().unwrap();
    }

    #[test]
    fn a_large_ring_is_zeroed_writable_to_its_last_byte_and_freed() {
        for len in [MAP_AT - 1, MAP_AT, 3 * MAP_AT + 5] {
            let ring = RingBuf::new(len);
            assert_eq!(ring.len(), len);
            // SAFETY: no other slice of the ring is live in this test.
            let all = unsafe { ring.slice(0, len) };
            assert!(all.iter().all(|&b| b == 0), "{len}: not zeroed");
            // SAFETY: as above.
            unsafe { ring.slice_mut(len - 4, 4) }.copy_from_slice(&[1, 2, 3, 4]);
            // SAFETY: as above.
            let f32s = unsafe { ring.slice_mut_f32(0, 2) };
            f32s[1] = 1.5;
            // SAFETY: as above.
            assert_eq!(unsafe { ring.slice(len - 4, 4) }, [1, 2, 3, 4]);
            // SAFETY: as above.
            assert_eq!(unsafe { ring.slice(4, 4) }, 1.5f32.to_ne_bytes());
            assert_eq!(ring.touched(), len);
        }
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_range_panics_not_ub() {
        let ring = RingBuf::new(8);
        // SAFETY: no other slice exists; the call panics before creating one.
        let _ = unsafe { ring.slice(4, 8) };
    }
}
