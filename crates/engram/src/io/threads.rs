//! How the engine's reader threads are scheduled by the OS.
//!
//! Why it matters: a reader's work is a few microseconds of CPU between
//! waits (a wake-up, a few `pread`s or page-cache copies, a publish), but
//! the forward pass blocks on it. When the runtime's own threads keep every
//! core busy (a CPU runtime, or other processes on a small machine), a
//! reader that has just been woken may sit in the run queue for
//! milliseconds before it gets a core; see `docs/bench.md` ("Reader
//! scheduling") for the measurements behind the default.

/// The scheduling class given to every reader thread (the prefetch pool's
/// prefill and decode threads, the pread pool's workers and the io_uring
/// engine's thread) as it starts.
///
/// Every class is best effort: a class the process may not take (no
/// `CAP_SYS_NICE`, an `RLIMIT_RTPRIO` of 0) falls back to the next weaker
/// one, down to [`ReaderSched::Normal`], and never fails the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReaderSched {
    /// Linux `SCHED_BATCH`: waking a reader never preempts the running
    /// thread (the forward pass that woke it keeps its core); the reader
    /// runs when a core frees up. With other processes keeping the cores
    /// busy, that is after their time slice, at every read's completion:
    /// measured, a cold 8K prefill stalled 0.2-5.1 s against 0.0-0.2 s for
    /// [`ReaderSched::Normal`] (docs/bench.md, "The readers' class under
    /// other processes' load").
    Batch,
    /// The OS default (`SCHED_OTHER`, nice 0 on Linux) and the default
    /// here: a woken reader may preempt a thread that has run longer than
    /// it, so a reader that slept on its I/O gets a core soon after the I/O
    /// completes, whoever else is busy.
    #[default]
    Normal,
    /// `SCHED_OTHER` at nice -10 on Linux (needs `CAP_SYS_NICE` or an
    /// `RLIMIT_NICE` that allows it); `QOS_CLASS_USER_INTERACTIVE` on macOS.
    /// A woken reader is preferred over nice-0 threads of its scheduling
    /// group, the runtime's compute threads among them.
    Raised,
    /// Linux `SCHED_FIFO` priority 1 (needs `CAP_SYS_NICE` or an
    /// `RLIMIT_RTPRIO` of at least 1), else [`ReaderSched::Raised`]: a
    /// woken reader preempts any ordinary thread at once. Safe for readers
    /// because each runs for microseconds and then blocks (the kernel's
    /// real-time throttling bounds the worst case); macOS as `Raised`.
    Realtime,
}

impl ReaderSched {
    /// Parses the names `batch`, `normal`, `raised` and `realtime`
    /// (the values of `ENGRAM_READERS`).
    pub fn parse(name: &str) -> Option<ReaderSched> {
        match name.trim() {
            "batch" => Some(ReaderSched::Batch),
            "normal" => Some(ReaderSched::Normal),
            "raised" => Some(ReaderSched::Raised),
            "realtime" => Some(ReaderSched::Realtime),
            _ => None,
        }
    }

    /// The name [`ReaderSched::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            ReaderSched::Batch => "batch",
            ReaderSched::Normal => "normal",
            ReaderSched::Raised => "raised",
            ReaderSched::Realtime => "realtime",
        }
    }

    /// This class, with [`ReaderSched::Realtime`] lowered to
    /// [`ReaderSched::Raised`]: for threads that also serve low-priority
    /// work (hints), which a real-time thread would finish before a
    /// real-time decode reader of the same priority got the core.
    pub fn below_realtime(self) -> ReaderSched {
        match self {
            ReaderSched::Realtime => ReaderSched::Raised,
            other => other,
        }
    }

    /// Puts the calling thread in this class (best effort: see the type)
    /// and returns the class it got.
    pub fn apply_to_current_thread(self) -> ReaderSched {
        apply(self)
    }
}

/// Puts the calling thread in the class of threads that do speculative
/// work (the prefetch pool's hint threads), best effort: Linux
/// `SCHED_BATCH`, whose wake-up never preempts the running thread, so the
/// thread that queued the work keeps its core, and which still gets its
/// fair share of a busy CPU; macOS `QOS_CLASS_UTILITY`, below the
/// runtime's threads.
pub(crate) fn apply_hint_class() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: a plain syscall on the calling thread (pid 0) with a
        // valid parameter block; a refusal leaves the class as it was.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    }
    #[cfg(target_os = "macos")]
    {
        // SAFETY: sets the calling thread's QoS class; no pointers. A
        // refusal leaves the class as it was.
        unsafe { libc::pthread_set_qos_class_self_np(libc::qos_class_t::QOS_CLASS_UTILITY, 0) };
    }
}

/// Nice value of [`ReaderSched::Raised`] on Linux.
#[cfg(target_os = "linux")]
const RAISED_NICE: libc::c_int = -10;

#[cfg(target_os = "linux")]
fn apply(class: ReaderSched) -> ReaderSched {
    let set = |policy: libc::c_int, priority: libc::c_int| {
        let param = libc::sched_param {
            sched_priority: priority,
        };
        // SAFETY: a plain syscall on the calling thread (pid 0) with a
        // valid parameter block.
        unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
    };
    // The thread's nice value: `setpriority` with who = 0 applies to the
    // calling thread on Linux (threads are tasks).
    let nice = |value: libc::c_int| {
        // SAFETY: a plain syscall on the calling thread.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, value) == 0 }
    };
    match class {
        ReaderSched::Realtime if set(libc::SCHED_FIFO, 1) => ReaderSched::Realtime,
        ReaderSched::Realtime | ReaderSched::Raised
            if set(libc::SCHED_OTHER, 0) && nice(RAISED_NICE) =>
        {
            ReaderSched::Raised
        }
        ReaderSched::Batch if set(libc::SCHED_BATCH, 0) => ReaderSched::Batch,
        _ => {
            // The default class: undo whatever an earlier try changed.
            set(libc::SCHED_OTHER, 0);
            ReaderSched::Normal
        }
    }
}

#[cfg(target_os = "macos")]
fn apply(class: ReaderSched) -> ReaderSched {
    match class {
        ReaderSched::Raised | ReaderSched::Realtime => {
            // SAFETY: sets the calling thread's QoS class; no pointers.
            let ok = unsafe {
                libc::pthread_set_qos_class_self_np(
                    libc::qos_class_t::QOS_CLASS_USER_INTERACTIVE,
                    0,
                )
            } == 0;
            if ok {
                ReaderSched::Raised
            } else {
                ReaderSched::Normal
            }
        }
        // No batch class on macOS: the default it is.
        ReaderSched::Batch | ReaderSched::Normal => ReaderSched::Normal,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn apply(_class: ReaderSched) -> ReaderSched {
    ReaderSched::Normal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_is_none() {
        for class in [
            ReaderSched::Batch,
            ReaderSched::Normal,
            ReaderSched::Raised,
            ReaderSched::Realtime,
        ] {
            assert_eq!(ReaderSched::parse(class.name()), Some(class));
        }
        assert_eq!(ReaderSched::parse("fifo"), None);
        assert_eq!(ReaderSched::Realtime.below_realtime(), ReaderSched::Raised);
        assert_eq!(ReaderSched::Batch.below_realtime(), ReaderSched::Batch);
    }

    #[test]
    fn every_class_applies_or_falls_back_on_a_thread_of_its_own() {
        for class in [
            ReaderSched::Batch,
            ReaderSched::Normal,
            ReaderSched::Raised,
            ReaderSched::Realtime,
        ] {
            let got = std::thread::spawn(move || class.apply_to_current_thread())
                .join()
                .unwrap();
            // Never stronger than asked (fallbacks only go down).
            let rank = |c: ReaderSched| match c {
                ReaderSched::Batch | ReaderSched::Normal => 0,
                ReaderSched::Raised => 1,
                ReaderSched::Realtime => 2,
            };
            assert!(rank(got) <= rank(class), "{class:?} gave {got:?}");
            if class == ReaderSched::Normal {
                assert_eq!(got, ReaderSched::Normal);
            }
        }
    }
}
