//! Locks that survive a panic elsewhere: a zygote's waiters and children
//! hold their invariants between statements, so a poisoned lock gives its
//! guard back instead of leaving a child unreaped.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, recovering the guard of a poisoned lock.
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
