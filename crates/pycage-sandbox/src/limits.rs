//! The sandbox's fixed bounds and exit codes, in one place: what a run's
//! processes inherit, what its kernel objects may hold, and how the
//! supervisor says it lost its run.

/// Exit status of the supervisor when it lost track of the init process
/// (`waitpid` failed with something other than `EINTR`). Not an exit status
/// CPython uses for itself.
pub const SUPERVISOR_LOST_EXIT: i32 = 125;

/// Descriptors the interpreter inherits: stdin, stdout, stderr and the
/// protocol socket on fd 3. Every higher descriptor is marked close-on-exec
/// in the program's process, so a host descriptor opened without
/// `O_CLOEXEC` (by a C library, say) never reaches the program.
pub const INHERITED_FDS: u32 = 4;

/// Extra processes counted against `RLIMIT_NPROC` at the outer user
/// namespace level: the supervisor and the init process.
pub const SANDBOX_PROCESSES: u64 = 2;

/// SysV shared-memory segments a run may hold (`kernel.shmmni`).
pub const SYSV_SHM_SEGMENTS: u64 = 64;

/// SysV semaphore limits of a run (`kernel.sem`: per array, total, per
/// `semop`, arrays).
pub const SYSV_SEM_LIMITS: &str = "32 1024 32 32";

/// Signals a run may have queued at once (`RLIMIT_SIGPENDING`, POSIX
/// timers included). Set before the program's user namespace, which
/// records it as the ceiling of every process in it: a per-run share of
/// the host uid's pending-signal quota, not one per process.
pub const RUN_SIGPENDING: u64 = 1024;

/// Bytes of POSIX message queues a run may create (`RLIMIT_MSGQUEUE`):
/// none (`mq_open` is not provided either).
pub const RUN_MSGQUEUE_BYTES: u64 = 0;

/// Memory a run may lock (`RLIMIT_MEMLOCK`): `mlock`, `SHM_LOCK` (charged
/// per user namespace, so per run) and `MSG_ZEROCOPY` pins (charged to the
/// host uid).
pub const RUN_MEMLOCK_BYTES: u64 = 64 * 1024;

/// TCP buffer sizes of the run's network namespace (`net.ipv4.tcp_rmem`
/// and `tcp_wmem`: minimum, default, most autotuning may grow a buffer
/// to), with egress only: the program's sockets and the host's end of each
/// of its connections to the proxy (accepted in the run's namespace) stay
/// at most this big.
pub const RUN_TCP_RMEM: &str = "4096 131072 262144";
/// See [`RUN_TCP_RMEM`].
pub const RUN_TCP_WMEM: &str = "4096 16384 262144";
