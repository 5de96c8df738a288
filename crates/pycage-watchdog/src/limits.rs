//! Every bound of the watchdog, in one place: what one sample may visit
//! and read, what a run may hold, and how often it is sampled.

use std::time::Duration;

/// Most processes one sample visits.
pub const MAX_PROCESSES: usize = 4096;

/// Most bytes read from one proc file.
pub const MAX_READ: usize = 16 * 1024;

/// Most descriptors a run's processes may hold together.
pub const MAX_RUN_DESCRIPTORS: u64 = 4096;

/// Most epoll registrations a run's processes may hold together (each is
/// kernel memory, and a registration of the host uid's
/// `fs.epoll.max_user_watches`).
pub const MAX_RUN_EPOLL_WATCHES: u64 = 65536;

/// What one epoll registration is counted as: its `epitem` and wait-queue
/// entry with slab overhead (about 200 bytes measured on x86_64).
pub const EPOLL_WATCH_BYTES: u64 = 256;

/// Pages one pipe is counted as: the default (and, with `F_SETPIPE_SZ`
/// refused, the largest) pipe buffer.
pub const PIPE_PAGES: u64 = 16;

/// Most bytes of epoll `fdinfo` read in one sample.
pub const MAX_FDINFO_BYTES: u64 = 16 << 20;

/// Most sockets one `sock_diag` dump is read for.
pub const MAX_DIAG_SOCKETS: usize = 1 << 17;

/// How often a run is sampled. A run shorter than this is never sampled.
pub const PERIOD: Duration = Duration::from_millis(100);
