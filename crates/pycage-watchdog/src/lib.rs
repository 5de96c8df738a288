//! A host-side view of a whole run's CPU time and memory, for budgets that
//! no per-process rlimit can hold (`RLIMIT_CPU` and `RLIMIT_AS` count one
//! process; a run can be many).
//!
//! [`sample`] finds every process of a run and sums:
//!
//! - CPU: `utime + stime + cutime + cstime` of each live process, from
//!   `/proc/<pid>/stat`. A process that exited and was reaped by another
//!   process of the run is in its reaper's `cutime/cstime`, so nothing the
//!   run spent is lost, and nothing is counted twice (a reaped process is
//!   gone from `/proc`). In the sandbox every orphan is reparented to the
//!   run's init, which reaps it.
//! - Memory: the proportional set size (`Pss`, which includes shared
//!   memory pages, divided among the processes that map them) from
//!   `/proc/<pid>/smaps_rollup`, or `VmRSS` from `/proc/<pid>/status` when
//!   that cannot be read. PSS does not count a page shared by a forked
//!   pool eight times. The samples that only check a budget (a run's
//!   watch, a session between runs: [`sample_with_held`]) read each
//!   process's resident size first, a counter, and PSS, a walk of its page
//!   tables, only when the resident sizes could exceed the budget.
//!
//! [`sample_cpu`] walks the same processes and reads only their `stat`
//! (a session's run edges need the CPU alone).
//!
//! Which processes: [`Scope::PidNamespace`] starts at the run's init
//! process (PID 1 of the run's namespace, `pycage_sandbox::Handoff` gives
//! its host pid) and walks `/proc/<pid>/task/<tid>/children`, keeping a
//! process only while its parent (`/proc/<pid>/stat`) is still the one it
//! was found under, so a pid recycled by an unrelated host process
//! mid-walk is not counted. [`Scope::Descendants`] (process isolation)
//! walks the same way from the run's first process; an orphan
//! (a double-forked daemon, reparented to the host's init) is not found,
//! which is one reason process isolation contains accidents, not attacks.
//!
//! Bounds: at most [`MAX_PROCESSES`] processes per sample (the run's own
//! `RLIMIT_NPROC` is far below), at most [`MAX_READ`] bytes read per proc
//! file, and no allocation that depends on what a process controls beyond
//! that. A process that vanishes mid-sample is skipped, never an error.
//!
//! Memory outside every process (files in the run's tmpfs, detached SysV
//! shared memory) is not in these sums: the tmpfs and the IPC namespace cap
//! it ([`tmpfs_used`] reads the former, for callers that report it).
//!
//! # Kernel memory
//!
//! What a run pins in the kernel is in no process's PSS, so it is counted
//! apart ([`Kernel`]) and added to the memory sum:
//!
//! - socket buffers, exactly: the sandbox hands the host a
//!   `NETLINK_SOCK_DIAG` socket made inside the run's network namespace
//!   ([`SockDiag`]); one dump of its `AF_UNIX` and TCP sockets lists every
//!   socket of the run (held, in flight, or orphaned) with the bytes its
//!   queues hold. A dump is skipped when the namespace's own listing (its
//!   `net/unix`; `net/sockstat`'s TCP count) shows it has none of that
//!   kind. Process isolation shares the host's namespace: there, each
//!   `AF_UNIX` socket a run's process holds is looked up by inode;
//!   TCP and UDP buffers, and sockets in flight, are not counted;
//! - pipes: every distinct pipe a run's process holds, at 16 pages (what
//!   a pipe may hold when `F_SETPIPE_SZ` is refused, as the sandbox's
//!   seccomp does);
//! - epoll registrations, from each epoll descriptor's `fdinfo`;
//! - memfds a process holds, by their allocated blocks (process
//!   isolation; the sandbox does not provide `memfd_create`).
//!
//! Descriptors are read from `/proc/<pid>/fd`. A process whose descriptors
//! cannot be read (made non-dumpable, on a host without root) is counted
//! as if each descriptor its `RLIMIT_NOFILE` allows held a full pipe.
//! Besides memory, a run may hold at most [`MAX_RUN_DESCRIPTORS`]
//! descriptors, [`MAX_RUN_EPOLL_WATCHES`] epoll registrations and a
//! quarter of the host's `fs.pipe-user-pages-soft` in pipes, all its
//! processes together: the last two are per-uid quotas of the host,
//! shared with the caller when pycage is not root. This also bounds the
//! cost of a sample.
//!
//! [`watch`] samples a run every [`PERIOD`] and resolves when a budget is
//! crossed; the runtime then ends the run (`timeout` for CPU, `worker-exit`
//! for memory), so the bound is the budget plus what the run can use in
//! one period.
//!
//! # Layers
//!
//! Each module uses only those listed before it:
//!
//! 1. [`limits`] (every bound, one place), `sync`, [`procfs`] (bounded
//!    reads of `/proc`), `sockets` (`sock_diag` and namespace listings);
//! 2. [`usage`] (scope, usage, budgets), `descriptors` (what descriptors
//!    hold in the kernel);
//! 3. `sample` (one walk of a run), then `watch` (a walk every period).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod descriptors;
pub mod limits;
pub mod procfs;
mod sample;
mod sockets;
mod sync;
pub mod usage;
mod watch;

pub use limits::*;
pub use procfs::{max_run_pipes, rss_of, HeldFiles, ScanCache};
pub use sample::{sample, sample_cpu, sample_cpu_held, sample_with, sample_with_held};
pub use sockets::SockDiag;
pub use usage::{Budget, Exceeded, Kernel, Scope, Usage};
pub use watch::{tmpfs_used, watch, watch_from};

#[cfg(test)]
mod tests;
