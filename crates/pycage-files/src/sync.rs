//! Locks that survive a panic elsewhere: the list of failed removals
//! holds its invariants between statements, so a poisoned lock gives its
//! guard back instead of losing what failed.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, recovering the guard of a poisoned lock.
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
