//! Page-cache control per platform.
//!
//! | | Linux | macOS |
//! | --- | --- | --- |
//! | bypass the cache | `O_DIRECT` at open (aligned reads) | `F_NOCACHE` |
//! | random access, no read-ahead | `POSIX_FADV_RANDOM` | `F_RDAHEAD` off |
//! | front-to-back reads (hot-row files) | `POSIX_FADV_SEQUENTIAL` | the default read-ahead |
//! | read-ahead hint for a range | `POSIX_FADV_WILLNEED` | `F_RDADVISE` |
//! | evict a file (`--cold`) | `fsync` + `POSIX_FADV_DONTNEED` | nothing to do for `F_NOCACHE` readers; see [`evict`] |

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Extra `open` flags for cache-bypassing reads (`O_DIRECT` on Linux; macOS
/// sets `F_NOCACHE` after opening instead).
#[cfg(target_os = "linux")]
pub const DIRECT_OPEN_FLAGS: i32 = libc::O_DIRECT;
/// Extra `open` flags for cache-bypassing reads (`O_DIRECT` on Linux; macOS
/// sets `F_NOCACHE` after opening instead).
#[cfg(not(target_os = "linux"))]
pub const DIRECT_OPEN_FLAGS: i32 = 0;

/// fcntl-style return: -1 and errno on failure (only fcntl users call it).
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn check(ret: libc::c_int) -> io::Result<()> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `posix_fadvise` returns the error number instead of setting errno.
#[cfg(target_os = "linux")]
fn check_advise(ret: libc::c_int) -> io::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(ret))
    }
}

/// Tells the kernel `file` is read at random offsets, so it does not read
/// ahead around each row.
pub fn advise_random(file: &File) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscall on a valid descriptor.
        check_advise(unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM)
        })
    }
    #[cfg(target_os = "macos")]
    {
        // SAFETY: plain fcntl on a valid descriptor.
        check(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_RDAHEAD, 0) })
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = file;
        Ok(())
    }
}

/// Tells the kernel `file` is read front to back, so it reads ahead
/// further (Linux doubles its window; macOS keeps read-ahead on, its
/// default). Advisory.
pub fn advise_sequential(file: &File) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscall on a valid descriptor.
        check_advise(unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL)
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        Ok(())
    }
}

/// Makes reads of `file` bypass the page cache where that is a per-file
/// switch (macOS `F_NOCACHE`); on Linux bypass is `O_DIRECT` at open and
/// this does nothing.
pub fn set_nocache(file: &File) -> io::Result<()> {
    #[cfg(target_os = "macos")]
    {
        // SAFETY: plain fcntl on a valid descriptor.
        check(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_NOCACHE, 1) })
    }
    #[cfg(not(target_os = "macos"))]
    {
        let _ = file;
        Ok(())
    }
}

/// Asks the kernel to start reading `[offset, offset + len)` of `file` into
/// the cache (for hints: rows likely needed soon). Advisory; errors are
/// returned but callers may ignore them.
pub fn advise_willneed(file: &File, offset: u64, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscall on a valid descriptor.
        check_advise(unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            )
        })
    }
    #[cfg(target_os = "macos")]
    {
        let advice = libc::radvisory {
            ra_offset: offset as libc::off_t,
            ra_count: len.min(i32::MAX as u64) as libc::c_int,
        };
        // SAFETY: F_RDADVISE reads one radvisory struct we own.
        check(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_RDADVISE, &advice) })
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = (file, offset, len);
        Ok(())
    }
}

/// Evicts `file` from the page cache as far as the platform allows, and
/// says what was done.
///
/// Linux: `fsync` (dirty pages cannot be dropped) then
/// `POSIX_FADV_DONTNEED` over the whole file; clean pages not mapped by
/// anyone are dropped. macOS has no unprivileged per-file eviction; readers
/// opened with `F_NOCACHE` (direct mode) do not use cached pages for
/// reads that miss, so cold numbers there need direct mode (or `purge`).
pub fn evict(file: &File) -> io::Result<&'static str> {
    #[cfg(target_os = "linux")]
    {
        // fsync needs a writable descriptor on some file systems; a failure
        // only means dirty pages (if any) stay, which DONTNEED reports.
        let _ = file.sync_all();
        // SAFETY: plain syscall on a valid descriptor.
        check_advise(unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
        })?;
        Ok("fsync + POSIX_FADV_DONTNEED")
    }
    #[cfg(target_os = "macos")]
    {
        set_nocache(file)?;
        Ok("F_NOCACHE set (macOS cannot evict a file's cached pages without root; use direct mode or `sudo purge`)")
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = file;
        Ok("no page-cache control on this platform")
    }
}
