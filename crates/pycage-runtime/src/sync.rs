//! Locks that survive a panic elsewhere.
//!
//! A poisoned `std::sync::Mutex` only says that some thread panicked while
//! holding it. Every lock in this crate guards bookkeeping whose invariants
//! hold between statements (lists of children, counters, caches), and the
//! work behind most of them is cleanup that must happen anyway: retiring
//! zygotes, reaping children, ending sessions. So no lock here ever skips
//! its work because it is poisoned; it takes the guard back, as monty's
//! `lock_ignore_poison` does.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, recovering the guard of a poisoned lock.
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_locks() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = std::sync::Arc::clone(&m);
        let _ = std::thread::spawn(move || {
            let _guard = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
