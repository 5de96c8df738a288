//! The host's end of a child's fd 3, as I/O only: the protocol's meaning
//! is `pycage-protocol`'s and the run's rules the runtime's.
//!
//! fd 3 is a Unix socket whose other end the program owns, so reading it
//! is a concern of its own: every read drops the descriptors, credentials
//! and other ancillary data a program may send with its frames, a write
//! goes out the moment a run has it, and a caller that waits for a run on
//! its own thread waits on the child's socket itself instead of through
//! the reactor (one wake-up where two would be).
//!
//! # Layers
//!
//! Each module uses only those listed before it (`tests/layers.rs` checks
//! it):
//!
//! 1. [`blocking`]: [`blocking::block_on`], a future driven on its
//!    caller's thread, which waits in `poll(2)` on the sockets of the
//!    runs it drives.
//! 2. [`channel`]: reads and writes on fd 3, and [`channel::Channel`], a
//!    run's end watched by the reactor or by a blocking caller.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod blocking;
pub mod channel;
