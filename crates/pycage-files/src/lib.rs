//! pycage's run directories and the files that cross a run's boundary.
//!
//! Files reach a run only as inputs the caller names (copied in, read-only)
//! and leave it only through the output directory the caller names
//! (bounded; symlinks and special files never followed, nothing
//! overwritten). A run's directory is removed when the run settles,
//! whatever the program left in it (depth, links, permissions), and a
//! removal that fails is reported, never silent.
//!
//! # Layers
//!
//! Each module uses only those listed before it:
//!
//! 1. `sync` (locks that survive a panic elsewhere);
//! 2. [`cleanup`] (run directories: made private, removed without
//!    following links, failures kept);
//! 3. [`copy`] (inputs in, `out/` out).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod cleanup;
pub mod copy;
mod sync;
