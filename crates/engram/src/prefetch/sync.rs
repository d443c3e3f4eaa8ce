//! The synchronization primitives the scheduler's publish/wait protocol uses,
//! behind one seam so the `loom` model checker can replace them.
//!
//! In normal builds [`Futex`] is a `std` `AtomicU32` whose waiters block in
//! the kernel on the word itself through `atomic-wait` (futex on Linux,
//! `__ulock_wait` on macOS): a waiter sleeps until a publisher changes the
//! word and wakes it; nothing polls on a timer. Under `--cfg loom` the word is
//! a loom atomic and the sleep is modelled with a loom mutex and condition
//! variable, which gives the same contract (the value check and the sleep are
//! atomic with respect to a wake) so loom can explore every interleaving.

#[cfg(loom)]
pub(crate) use loom::sync::{atomic::AtomicU32, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{atomic::AtomicU32, Mutex, MutexGuard};

pub(crate) use std::sync::atomic::Ordering;

/// A 32-bit word that threads can block on until it changes.
pub(crate) struct Futex {
    word: AtomicU32,
    #[cfg(loom)]
    sleepers: loom::sync::Mutex<()>,
    #[cfg(loom)]
    wakeup: loom::sync::Condvar,
}

impl Futex {
    /// A word holding `value`.
    pub(crate) fn new(value: u32) -> Futex {
        Futex {
            word: AtomicU32::new(value),
            #[cfg(loom)]
            sleepers: loom::sync::Mutex::new(()),
            #[cfg(loom)]
            wakeup: loom::sync::Condvar::new(),
        }
    }

    /// Loads the word.
    pub(crate) fn load(&self, order: Ordering) -> u32 {
        self.word.load(order)
    }

    /// Compare-and-exchange on the word (weak: may fail spuriously).
    pub(crate) fn compare_exchange_weak(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32> {
        self.word
            .compare_exchange_weak(current, new, success, failure)
    }

    /// Bitwise-or into the word.
    pub(crate) fn fetch_or(&self, bits: u32, order: Ordering) -> u32 {
        self.word.fetch_or(bits, order)
    }

    /// Bitwise-and into the word.
    pub(crate) fn fetch_and(&self, bits: u32, order: Ordering) -> u32 {
        self.word.fetch_and(bits, order)
    }

    /// Adds to the word.
    pub(crate) fn fetch_add(&self, value: u32, order: Ordering) -> u32 {
        self.word.fetch_add(value, order)
    }

    /// Subtracts from the word.
    pub(crate) fn fetch_sub(&self, value: u32, order: Ordering) -> u32 {
        self.word.fetch_sub(value, order)
    }

    /// Blocks while the word equals `expected`. May return spuriously: the
    /// caller re-checks its condition in a loop.
    #[cfg(not(loom))]
    pub(crate) fn wait(&self, expected: u32) {
        atomic_wait::wait(&self.word, expected);
    }

    /// Wakes every thread blocked in [`Futex::wait`]. Call after changing the
    /// word.
    #[cfg(not(loom))]
    pub(crate) fn wake_all(&self) {
        atomic_wait::wake_all(&self.word);
    }

    /// Loom model of the futex wait: the check and the sleep happen under the
    /// lock a waker also takes, so a wake cannot fall between them.
    #[cfg(loom)]
    pub(crate) fn wait(&self, expected: u32) {
        let guard = self.sleepers.lock().unwrap();
        if self.word.load(Ordering::SeqCst) == expected {
            drop(self.wakeup.wait(guard).unwrap());
        }
    }

    /// Loom model of the futex wake.
    #[cfg(loom)]
    pub(crate) fn wake_all(&self) {
        drop(self.sleepers.lock().unwrap());
        self.wakeup.notify_all();
    }
}

/// Locks `mutex`, recovering the data if a thread panicked while holding it:
/// the scheduler's protected state stays consistent at every unlock point, so
/// a poisoned lock carries no torn state.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// [`lock`] for the `std` mutexes of the engine proper (which loom does not
/// model: only the publish/wait protocol is checked under loom).
pub(crate) fn lock_std<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// `T` alone on its cache line (128 bytes: Apple's M-series line, and two
/// x86 lines, which its adjacent-line prefetcher fetches as a pair), for
/// state one thread writes and another reads: a neighbour's stores then
/// never take the line away from its readers.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct CacheLine<T>(pub(crate) T);

impl<T> std::ops::Deref for CacheLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
