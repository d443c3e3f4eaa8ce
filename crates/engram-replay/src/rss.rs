//! Peak resident memory of this process, resettable between schedules
//! where the platform allows it.

/// Resets the peak-RSS high-water mark to the current RSS (Linux: writes
/// `5` to `/proc/self/clear_refs`). Returns false where that is not
/// possible (macOS, or a kernel that refuses): the peak then covers the
/// whole process so far.
///
/// With glibc, memory the previous schedules freed is first handed back to
/// the kernel (`malloc_trim`): freed chunks in the arenas of their
/// (joined) threads otherwise stay resident and are counted in every later
/// schedule's peak (measured: a `--repeat 3` corpus run's peaks rose from
/// 150 to 460 MiB, whatever the schedule).
pub fn reset_peak() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
    #[cfg(target_os = "linux")]
    {
        std::fs::write("/proc/self/clear_refs", "5").is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Peak resident set size in bytes since the last successful
/// [`reset_peak`] (or process start), if the platform reports it.
pub fn peak_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
    #[cfg(not(target_os = "linux"))]
    {
        // SAFETY: getrusage fills the struct we pass.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
            return None;
        }
        // macOS reports ru_maxrss in bytes (Linux would be KiB).
        u64::try_from(usage.ru_maxrss).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_follows_a_large_allocation() {
        let before = peak_bytes().expect("this platform reports peak RSS");
        let mut block = vec![0u8; 64 << 20];
        // Touch every page so it is resident.
        for page in block.chunks_mut(4096) {
            page[0] = 1;
        }
        let after = peak_bytes().unwrap();
        assert!(after >= before + (48 << 20), "{before} -> {after}");
        drop(block);
        if reset_peak() {
            let reset = peak_bytes().unwrap();
            assert!(reset + (32 << 20) <= after, "{after} -> {reset}");
        }
    }
}
