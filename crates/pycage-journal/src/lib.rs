//! Durable runs: the journal a suspended run leaves, and the replay that
//! resumes it in a fresh process, on this machine or another.
//!
//! A CPython process cannot be serialized, but everything that enters a
//! pycage program from outside crosses its protocol channel as a binding
//! call and its reply. A run that suspends (at a call that needs approval,
//! or one whose binding says so) leaves a [`Journal`]: the program, the
//! digest of its bindings, its budgets, the seeds that make a replay take
//! the same path, every call in order with the digest of its arguments,
//! every reply in the order it was delivered, how much output the caller
//! has already had, what the run spent, and the pending call. Resuming
//! runs the program again in a fresh process and answers every recorded
//! call from the journal ([`Tape`]); a program that takes another path
//! is stopped before anything live is called. A session's cell that
//! suspends leaves the same journal, holding the session's earlier cells
//! too ([`Cell`]): a resume replays them, closed, before the cell.
//!
//! The journal is opaque bytes signed with HMAC-SHA256 under the caller's
//! [`JournalKey`]: altered bytes, another key, another format version or
//! a journal over the caller's size budget are refused ([`JournalError`])
//! before any program runs.
//!
//! This crate does no I/O and knows nothing of processes: the runtime
//! (`pycage-runtime`) drives a [`Tape`] from its run machine.
//!
//! # Layers
//!
//! Each module uses only those listed before it (`tests/layers.rs`):
//!
//! 1. `digest` (SHA-256 of arguments and bindings), `error`, `key` (the
//!    caller's key and its HMAC);
//! 2. `format` (the journal's contents and signed bytes);
//! 3. `tape` (recording a live run, replaying a resumed one).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic))]

mod digest;
mod error;
mod format;
mod key;
mod tape;

pub use digest::{args_digest, BindingsDigest, Digest};
pub use error::{JournalError, KeyError};
pub use format::{Budgets, Cell, Delivered, Event, Journal, Pending, Reply, Seeds, Spent, FORMAT_VERSION};
pub use key::{JournalKey, KEY_ENV, MIN_KEY_BYTES};
pub use tape::{Due, Given, Meta, OnCall, SuspendError, Tape};

/// Default budget of a journal's size (16 MiB): what a run may record of
/// its calls and replies to be able to suspend, and the largest journal a
/// resume reads.
pub const DEFAULT_MAX_JOURNAL_BYTES: u64 = 16 * 1024 * 1024;
