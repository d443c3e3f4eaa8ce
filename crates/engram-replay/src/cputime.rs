//! CPU time of the process and of the calling thread, for the CPU cost a
//! schedule adds outside the compute model.

use std::time::Duration;

/// User + system CPU time of the whole process so far (every thread).
pub fn process() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

/// CPU time of the calling thread so far.
pub fn thread() -> Duration {
    // SAFETY: clock_gettime fills the struct we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec.max(0) as u64, 0) + Duration::from_micros(t.tv_usec.max(0) as u64)
}

/// Runs `f`, adding the calling thread's CPU time spent in it to `total`.
pub fn charged<T>(total: &mut Duration, f: impl FnOnce() -> T) -> T {
    let before = thread();
    let out = f();
    *total += thread().saturating_sub(before);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_work_shows_in_both_clocks_and_sleep_in_neither() {
        let (p0, mut spent) = (process(), Duration::ZERO);
        let sum = charged(&mut spent, || {
            // Spin until this thread has 40 ms of CPU (or 10 s passed: a
            // machine this busy fails the assertion instead of hanging).
            let (started, cpu) = (std::time::Instant::now(), thread());
            let mut x = 0u64;
            while thread() - cpu < Duration::from_millis(40)
                && started.elapsed() < Duration::from_secs(10)
            {
                for _ in 0..1000 {
                    x = x.wrapping_mul(31).wrapping_add(7);
                }
            }
            x
        });
        std::hint::black_box(sum);
        assert!(spent >= Duration::from_millis(40), "{spent:?}");
        assert!(process() - p0 >= Duration::from_millis(40));
        let mut slept = Duration::ZERO;
        charged(&mut slept, || std::thread::sleep(Duration::from_millis(50)));
        assert!(slept < Duration::from_millis(20), "{slept:?}");
    }
}
