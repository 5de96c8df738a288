//! The host's side of pycage's zygote: a trusted, single-threaded CPython
//! process that has imported everything a run needs, never runs model
//! code, and forks one child per run (see `python/pycage/zygote.py`).
//!
//! [`supervisor`] starts a zygote, speaks its wire (`pycage_protocol::zygote`)
//! on a `SOCK_SEQPACKET` pair, routes each answer to its waiter, and ends
//! and reaps it; [`machine`] holds its decisions (request ids, answers
//! routed once, deadlines, what makes a zygote broken) as a pure state
//! machine, unit-tested without processes or clocks; `spec` says what a
//! child is set up with and encodes its `spawn` message, naming a join plan
//! the zygote already holds. The runtime's pool asks for children through
//! it.
//!
//! # Layers
//!
//! Each module uses only those listed before it (`tests/layers.rs`):
//! `sync`, [`machine`], `spec`, then [`supervisor`].
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod machine;
mod spec;
pub mod supervisor;
mod sync;

pub use spec::{ChildSpec, JoinSpec};
pub use supervisor::{SpawnOrder, SpawnReply, Spawned, Zygote, ZygoteError, ZygoteSpec, MAX_PACKET};
