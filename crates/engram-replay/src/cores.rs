//! `--cores N`: pins the whole process to N cores, so a many-core machine
//! can show the few-core picture (and the reverse question can be asked).
//!
//! Linux: `sched_setaffinity` on every thread the process has (threads
//! started later inherit the mask), to the first N of the cores it may run
//! on. Call it before the benchmark starts any thread. macOS has no
//! affinity API (`thread_policy_set` affinity tags are hints that group
//! threads, they do not bind them to cores), so there it is an error.

use engram::{Error, Result};

/// Pins the process to `n` cores; returns the core ids chosen.
pub fn pin_process(n: usize) -> Result<Vec<usize>> {
    if n == 0 {
        return Err(Error::InvalidArgument("--cores must be at least 1".into()));
    }
    pin(n)
}

#[cfg(target_os = "linux")]
fn pin(n: usize) -> Result<Vec<usize>> {
    let err = |what: &str| {
        Error::InvalidArgument(format!(
            "--cores {n}: {what}: {}",
            std::io::Error::last_os_error()
        ))
    };
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls fill or read it.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `allowed` is a writable cpu_set_t of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
        return Err(err("sched_getaffinity"));
    }
    let cores: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: c < CPU_SETSIZE, inside the set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
        .collect();
    if n > cores.len() {
        return Err(Error::InvalidArgument(format!(
            "--cores {n}: this process may run on only {} cores ({cores:?})",
            cores.len()
        )));
    }
    let chosen = cores[..n].to_vec();
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in &chosen {
        // SAFETY: c came from 0..CPU_SETSIZE, inside the set.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // Every thread that exists already (a tokenizer or allocator may have
    // started some), then new ones inherit the calling thread's mask.
    let tasks =
        std::fs::read_dir("/proc/self/task").map_err(|e| Error::io("/proc/self/task", e))?;
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // SAFETY: plain syscall with a valid set.
        if unsafe { libc::sched_setaffinity(tid, size, &set) } != 0 {
            // A thread that ended meanwhile is gone: nothing to pin.
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH) {
                return Err(err("sched_setaffinity"));
            }
        }
    }
    Ok(chosen)
}

#[cfg(not(target_os = "linux"))]
fn pin(n: usize) -> Result<Vec<usize>> {
    Err(Error::InvalidArgument(format!(
        "--cores {n}: this platform has no API to pin a process to cores (macOS affinity \
         tags only group threads); run without --cores"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_cores_is_an_error() {
        let e = pin_process(0).unwrap_err();
        assert!(e.to_string().contains("--cores"), "{e}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn more_cores_than_allowed_is_an_error_naming_the_count() {
        let e = pin_process(1 << 20).unwrap_err();
        assert!(e.to_string().contains("may run on only"), "{e}");
    }
}
