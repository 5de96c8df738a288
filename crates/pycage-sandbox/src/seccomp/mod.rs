//! The seccomp layer: an allow list, compiled before fork.
//!
//! # Policy
//!
//! [`policy`] names every syscall the filter knows and what happens to it:
//!
//! - [`Verdict::Allow`]: what CPython, its standard library (asyncio,
//!   subprocess, multiprocessing, threading, tempfile, sqlite3, ssl, ctypes,
//!   mmap, select/epoll, signal, time, `os.*`) and common C extensions use.
//!   The anchors are Docker's default profile (moby
//!   `profiles/seccomp/default.json`) and Chromium's baseline/renderer
//!   policies; the list is narrower than Docker's where Python does not need
//!   a call (no AIO, POSIX message queues, SysV message queues, `memfd_*`,
//!   NUMA policy changes).
//! - [`Verdict::Eperm`]: the known-dangerous calls (tracing other processes,
//!   every mount and namespace call, `bpf`, keyrings, `perf_event_open`,
//!   module and kexec loading, `userfaultfd`, `io_uring`, `modify_ldt`,
//!   clock setting, handle-based opens, ...) fail with `EPERM`, so a program
//!   gets a `PermissionError` it can report. A [`When`] narrows a denial to
//!   some arguments: sockets other than `AF_UNIX`, `clone` with namespace
//!   flags, `personality` other than the default or a query, the terminal
//!   injection ioctls, and what grows a kernel buffer past its default
//!   size (`SO_SNDBUF`, `SO_RCVBUF` and their `FORCE` forms, `fcntl`'s
//!   `F_SETPIPE_SZ`): socket and pipe buffers are kernel memory in no
//!   process's PSS, so each one keeps the size the kernel gave it.
//! - [`Verdict::Enosys`] and every syscall not listed at all, including
//!   every syscall added to the kernel after this list was written, fail
//!   with `ENOSYS`: the program sees an old kernel, and libraries fall back
//!   (glibc retries `clone3` as `clone`, whose flags a classic BPF filter
//!   can inspect). `memfd_create` is one of them: a memfd's pages are in
//!   neither a process's RSS nor a size-capped tmpfs, so it would escape
//!   every memory budget. So is inotify: its watches and event queues are
//!   kernel memory, and its instance and watch counts are quotas of the
//!   host uid (the caller's, without root).
//!
//! With egress on ([`Network::LoopbackTcp`]), `socket` also takes IPv4
//! TCP (`AF_INET`, `SOCK_STREAM`, protocol 0 or `IPPROTO_TCP`), so the
//! program can reach the egress proxy on its loopback; raw, UDP, IPv6,
//! netlink, packet and every other socket keep failing with `EPERM`.
//!
//! The 32-bit entry points are denied: a syscall made with another audit
//! architecture (`int 0x80` on x86_64, AArch32 on aarch64) kills the
//! process, and x86_64's x32 numbers (bit 30 set) match no rule, so they
//! get `ENOSYS`.
//!
//! # One program
//!
//! The policy compiles to one classic BPF program ([`Filters::program`]):
//! an architecture check, a binary search over the syscall number, a short
//! block per call whose verdict depends on an argument, and three shared
//! returns. The private `bpf` module compiles it and says why it has that
//! shape and what it costs.

use std::collections::BTreeMap;

use seccompiler::{sock_filter, BpfProgram, TargetArch};

use crate::error::SandboxError;
use crate::syscalls::SYSCALLS;

mod bpf;

pub use bpf::When;
use bpf::{Leaf, Test};

/// What the filter does with one syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed.
    Allow,
    /// `EPERM` (when the test holds; allowed otherwise).
    Eperm(When),
    /// `ENOSYS`, as for every syscall the policy does not list. Listed to
    /// document the choice and to test it.
    Enosys,
}

/// The namespace flags `clone` may not carry.
pub const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x0000_0080, // CLONE_NEWTIME (libc lacks it on some targets)
];

/// `personality` arguments that change nothing: `PER_LINUX` and the query
/// `0xffffffff`.
pub const PERSONALITY_DEFAULTS: &[u64] = &[0, 0xffff_ffff];

/// Socket domains allowed for `socket` and `socketpair`.
pub const SOCKET_DOMAINS: &[u64] = &[libc::AF_UNIX as u64];

/// Which sockets the program may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// `AF_UNIX` only: the run has no network.
    #[default]
    None,
    /// `AF_UNIX`, and IPv4 TCP (`AF_INET`, `SOCK_STREAM`, protocol 0 or
    /// `IPPROTO_TCP`, with any of `SOCK_NONBLOCK`/`SOCK_CLOEXEC`): for the
    /// egress proxy on the run's loopback. Nothing else of `AF_INET`.
    LoopbackTcp,
}

/// Socket options that grow a socket's buffers past the size the kernel
/// gave it (`SO_SNDBUF` and `SO_RCVBUF` up to `net.core.wmem_max` and
/// `rmem_max`, twice that in fact; the `FORCE` forms past them). Seccomp
/// cannot read the value (`optval` is a pointer), so setting them at all
/// is refused: every socket keeps the kernel's default size.
pub const SOCKET_BUFFER_OPTIONS: &[u64] =
    &[libc::SO_SNDBUF as u64, libc::SO_RCVBUF as u64, libc::SO_SNDBUFFORCE as u64, libc::SO_RCVBUFFORCE as u64];

/// `fcntl` commands refused: `F_SETPIPE_SZ`, which grows a pipe's buffer
/// from 16 pages up to `fs.pipe-max-size` (1 MiB by default).
pub const DENIED_FCNTLS: &[u64] = &[libc::F_SETPIPE_SZ as u64];

/// `ioctl` requests that inject input into a terminal (`TIOCSTI`) or reach
/// the console driver (`TIOCLINUX`).
#[allow(clippy::unnecessary_cast)] // the request type differs between C libraries
pub const DENIED_IOCTLS: &[u64] = &[libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

/// The x32 ABI marker in syscall numbers on x86_64 (`__X32_SYSCALL_BIT`).
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

macro_rules! verdicts {
    ($verdict:expr; $($name:ident)*) => {
        [$((stringify!($name), $verdict)),*]
    };
}

const ALLOW: Verdict = Verdict::Allow;
const EPERM: Verdict = Verdict::Eperm(When::Always);

/// Reading, writing and polling descriptors.
const FILE_IO: &[(&str, Verdict)] = &verdicts!(ALLOW;
    read write readv writev pread64 pwrite64 preadv preadv2 pwritev pwritev2 lseek
    open openat openat2 creat close close_range dup dup2 dup3 flock
    fsync fdatasync sync syncfs sync_file_range
    ftruncate truncate fallocate fadvise64 readahead copy_file_range sendfile splice tee vmsplice
    pipe pipe2 poll ppoll select pselect6
    epoll_create epoll_create1 epoll_ctl epoll_wait epoll_pwait epoll_pwait2 eventfd eventfd2
);

/// Paths, directories, metadata and extended attributes.
const FILE_META: &[(&str, Verdict)] = &verdicts!(ALLOW;
    stat fstat lstat newfstatat statx statfs fstatfs access faccessat faccessat2
    readlink readlinkat getdents getdents64 getcwd chdir fchdir
    mkdir mkdirat rmdir unlink unlinkat rename renameat renameat2 link linkat symlink symlinkat mknod mknodat
    chmod fchmod fchmodat fchmodat2 chown fchown fchownat lchown umask utime utimes utimensat futimesat
    getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr
    setxattr lsetxattr fsetxattr removexattr lremovexattr fremovexattr
);

/// The process's own memory.
const MEMORY: &[(&str, Verdict)] = &verdicts!(ALLOW;
    brk mmap munmap mprotect mremap madvise msync mincore mlock mlock2 munlock mlockall munlockall membarrier
    pkey_alloc pkey_free pkey_mprotect mseal map_shadow_stack get_mempolicy
);

/// Processes, threads, credentials (only ids already mapped), limits.
const PROCESS: &[(&str, Verdict)] = &verdicts!(ALLOW;
    fork vfork execve execveat exit exit_group wait4 waitid kill tkill tgkill
    getpid getppid gettid getpgid setpgid getpgrp getsid setsid
    getuid geteuid getgid getegid getresuid getresgid getgroups
    setuid setgid setreuid setregid setresuid setresgid setgroups setfsuid setfsgid capget capset
    prctl arch_prctl set_tid_address set_robust_list get_robust_list rseq restart_syscall
    getrlimit setrlimit prlimit64 getrusage times getpriority setpriority uname sysinfo getrandom
    pidfd_open pidfd_send_signal
    sched_getaffinity sched_setaffinity sched_yield sched_getparam sched_setparam sched_getscheduler
    sched_setscheduler sched_get_priority_max sched_get_priority_min sched_rr_get_interval sched_getattr
    sched_setattr getcpu ioprio_get ioprio_set
);

/// Signals, clocks, timers and futexes.
const SIGNALS_TIME: &[(&str, Verdict)] = &verdicts!(ALLOW;
    rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigsuspend rt_sigtimedwait rt_sigqueueinfo
    rt_tgsigqueueinfo sigaltstack signalfd signalfd4 pause alarm getitimer setitimer
    clock_gettime clock_getres clock_nanosleep nanosleep gettimeofday time
    timer_create timer_settime timer_gettime timer_getoverrun timer_delete
    timerfd_create timerfd_settime timerfd_gettime
    futex futex_waitv futex_wake futex_wait futex_requeue
);

/// Sockets (`socket` and `socketpair` themselves are in [`CONDITIONAL`]),
/// SysV shared memory and semaphores (capped by the run's IPC namespace),
/// and calls that only restrict the caller further.
const SOCKETS_IPC: &[(&str, Verdict)] = &verdicts!(ALLOW;
    bind connect listen accept accept4 getsockname getpeername getsockopt
    sendto recvfrom sendmsg recvmsg sendmmsg recvmmsg shutdown
    shmget shmat shmdt shmctl semget semop semtimedop semctl
    seccomp landlock_create_ruleset landlock_add_rule landlock_restrict_self
);

/// Allowed unless an argument test says `EPERM`.
const CONDITIONAL: &[(&str, Verdict)] = &[
    ("socket", Verdict::Eperm(When::ArgNotIn { arg: 0, values: SOCKET_DOMAINS })),
    ("socketpair", Verdict::Eperm(When::ArgNotIn { arg: 0, values: SOCKET_DOMAINS })),
    ("clone", Verdict::Eperm(When::ArgHasAnyBit { arg: 0, bits: CLONE_NAMESPACE_FLAGS })),
    ("personality", Verdict::Eperm(When::ArgNotIn { arg: 0, values: PERSONALITY_DEFAULTS })),
    ("ioctl", Verdict::Eperm(When::ArgIn { arg: 1, values: DENIED_IOCTLS })),
    ("fcntl", Verdict::Eperm(When::ArgIn { arg: 1, values: DENIED_FCNTLS })),
    (
        "setsockopt",
        Verdict::Eperm(When::ArgIsAndArgIn {
            arg: 1,
            value: libc::SOL_SOCKET as u64,
            then_arg: 2,
            values: SOCKET_BUFFER_OPTIONS,
        }),
    ),
];

/// The known-dangerous calls: `EPERM`.
const DANGEROUS: &[(&str, Verdict)] = &verdicts!(EPERM;
    ptrace process_vm_readv process_vm_writev pidfd_getfd kcmp process_madvise
    mount umount2 pivot_root chroot fsopen fsconfig fsmount fspick move_mount open_tree open_tree_attr
    mount_setattr unshare setns sethostname setdomainname
    bpf keyctl add_key request_key perf_event_open userfaultfd fanotify_init
    kexec_load kexec_file_load init_module finit_module delete_module
    io_uring_setup io_uring_enter io_uring_register
    modify_ldt iopl ioperm uselib _sysctl
    acct swapon swapoff reboot settimeofday clock_settime clock_adjtime adjtimex
    name_to_handle_at open_by_handle_at lookup_dcookie quotactl quotactl_fd vhangup syslog
);

/// Not provided (`ENOSYS`, as for anything unlisted): `clone3` (glibc falls
/// back to `clone`), memfds (pages outside every budget), asynchronous I/O,
/// POSIX/SysV message queues and inotify (kernel memory no budget caps, and
/// per-user quotas shared with the caller: inotify instances and watches,
/// message queue bytes; the standard library uses none of them).
const NOT_PROVIDED: &[(&str, Verdict)] = &verdicts!(Verdict::Enosys;
    clone3 memfd_create memfd_secret inotify_init inotify_init1 inotify_add_watch inotify_rm_watch
    io_setup io_submit io_getevents io_pgetevents io_cancel io_destroy
    mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr
    msgget msgsnd msgrcv msgctl nfsservctl
);

/// Every syscall the filter names, and its verdict, grouped. Names missing
/// on an architecture (aarch64 has no `open`, `fork`, `stat`, ...) are
/// skipped there.
pub const POLICY_GROUPS: &[&[(&str, Verdict)]] =
    &[FILE_IO, FILE_META, MEMORY, PROCESS, SIGNALS_TIME, SOCKETS_IPC, CONDITIONAL, DANGEROUS, NOT_PROVIDED];

/// Every `(name, verdict)` of the policy.
pub fn policy() -> impl Iterator<Item = (&'static str, Verdict)> {
    POLICY_GROUPS.iter().flat_map(|group| group.iter().copied())
}

/// The number of syscall `name` on `arch`, if it exists there.
pub fn syscall_number(name: &str, arch: TargetArch) -> Option<u32> {
    let index = SYSCALLS.binary_search_by(|(n, _, _)| n.cmp(&name)).ok()?;
    let (_, x86_64, aarch64) = SYSCALLS.get(index)?;
    match arch {
        TargetArch::x86_64 => *x86_64,
        TargetArch::aarch64 => *aarch64,
        TargetArch::riscv64 => None,
    }
}

/// The verdict for syscall `name` (unlisted names get [`Verdict::Enosys`]).
pub fn verdict(name: &str) -> Verdict {
    policy().find(|(n, _)| *n == name).map_or(Verdict::Enosys, |(_, v)| v)
}

/// The compiled policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filters {
    /// The whole policy as one program (see the module docs).
    pub program: BpfProgram,
}

/// Size of one `struct sock_filter` in bytes.
pub const SOCK_FILTER_BYTES: usize = 8;

impl Filters {
    /// The programs in the order they must be installed (one).
    pub fn in_install_order(&self) -> [&BpfProgram; 1] {
        [&self.program]
    }

    /// Each program, in install order, as its `struct sock_filter` array
    /// in native byte order (`u16 code, u8 jt, u8 jf, u32 k`, 8 bytes
    /// each): the bytes a `struct sock_fprog` points at.
    pub fn to_bytes(&self) -> Vec<Vec<u8>> {
        self.in_install_order().iter().map(|prog| program_to_bytes(prog)).collect()
    }

    /// The inverse of [`Filters::to_bytes`]; `None` if the input is not
    /// one whole `sock_filter` array.
    pub fn from_bytes(bytes: &[Vec<u8>]) -> Option<Filters> {
        let [program] = bytes else { return None };
        Some(Filters { program: program_from_bytes(program)? })
    }
}

fn program_to_bytes(prog: &[sock_filter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prog.len() * SOCK_FILTER_BYTES);
    for ins in prog {
        out.extend_from_slice(&ins.code.to_ne_bytes());
        out.push(ins.jt);
        out.push(ins.jf);
        out.extend_from_slice(&ins.k.to_ne_bytes());
    }
    out
}

fn program_from_bytes(bytes: &[u8]) -> Option<BpfProgram> {
    if !bytes.len().is_multiple_of(SOCK_FILTER_BYTES) {
        return None;
    }
    bytes
        .chunks_exact(SOCK_FILTER_BYTES)
        .map(|c| match *c {
            [c0, c1, jt, jf, k0, k1, k2, k3] => Some(sock_filter {
                code: u16::from_ne_bytes([c0, c1]),
                jt,
                jf,
                k: u32::from_ne_bytes([k0, k1, k2, k3]),
            }),
            _ => None,
        })
        .collect()
}

/// The seccompiler target for the build architecture.
pub fn native_arch() -> Result<TargetArch, SandboxError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(TargetArch::x86_64),
        "aarch64" => Ok(TargetArch::aarch64),
        arch => Err(SandboxError::UnsupportedArch { arch }),
    }
}

/// Compile [`policy`] for `arch`, without network ([`Network::None`]).
pub fn compile(arch: TargetArch) -> Result<Filters, SandboxError> {
    compile_with(arch, Network::None)
}

/// Compile [`policy`] for `arch`, with the sockets `network` allows.
pub fn compile_with(arch: TargetArch, network: Network) -> Result<Filters, SandboxError> {
    let audit_arch = match arch {
        TargetArch::x86_64 => bpf::AUDIT_ARCH_X86_64,
        TargetArch::aarch64 => bpf::AUDIT_ARCH_AARCH64,
        TargetArch::riscv64 => return Err(SandboxError::UnsupportedArch { arch: "riscv64" }),
    };
    // The verdict of every listed number; the rest is ENOSYS.
    let mut leaves: BTreeMap<u32, Leaf> = BTreeMap::new();
    let mut tests: BTreeMap<u32, Test> = BTreeMap::new();
    for (name, verdict) in policy() {
        let Some(nr) = syscall_number(name, arch) else { continue };
        let leaf = match verdict {
            Verdict::Allow => Leaf::Allow,
            Verdict::Eperm(When::Always) => Leaf::Eperm,
            Verdict::Eperm(when) => {
                tests.insert(nr, Test::When(when));
                Leaf::Arguments(nr)
            }
            Verdict::Enosys => Leaf::Enosys,
        };
        leaves.insert(nr, leaf);
    }
    if network == Network::LoopbackTcp {
        if let Some(nr) = syscall_number("socket", arch) {
            tests.insert(nr, Test::LoopbackTcpSocket);
            leaves.insert(nr, Leaf::Arguments(nr));
        }
    }
    // Ranges of one verdict: (first number, verdict), the last open-ended.
    let mut ranges: Vec<(u32, Leaf)> = vec![(0, Leaf::Enosys)];
    let mut next = 0u32;
    for (&nr, &leaf) in &leaves {
        if nr > next && ranges.last().is_some_and(|&(_, l)| l != Leaf::Enosys) {
            ranges.push((next, Leaf::Enosys));
        }
        if ranges.last().is_some_and(|&(_, l)| l != leaf) {
            ranges.push((nr, leaf));
        }
        next = nr.saturating_add(1);
    }
    if ranges.last().is_some_and(|&(_, l)| l != Leaf::Enosys) {
        ranges.push((next, Leaf::Enosys));
    }

    Ok(Filters { program: bpf::program(audit_arch, &ranges, &tests)? })
}

/// [`compile_with`] for this machine's architecture, compiled once per
/// process for each [`Network`]: the policy is a constant table, so every
/// sandbox of a network setting gets the same program, and compiling took ~77 µs of
/// every sandboxed run's host CPU.
pub fn compile_native(network: Network) -> Result<Filters, SandboxError> {
    static CACHE: [std::sync::OnceLock<Filters>; 2] = [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    let slot = &CACHE[match network {
        Network::None => 0,
        Network::LoopbackTcp => 1,
    }];
    if let Some(filters) = slot.get() {
        return Ok(filters.clone());
    }
    let filters = compile_with(native_arch()?, network)?;
    Ok(slot.get_or_init(|| filters).clone())
}

#[cfg(test)]
mod tests {
    use super::bpf::testing::{evaluate, trace};
    use super::bpf::*;
    use super::*;
    use seccompiler::{SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule};

    /// When `socket` fails with `EPERM` under [`Network::LoopbackTcp`] (rules
    /// ORed, conditions ANDed): a domain other than `AF_UNIX` and `AF_INET`; an
    /// `AF_INET` type other than `SOCK_STREAM` (classic BPF has no "masked not
    /// equal", so each other value of the type bits is listed); an `AF_INET`
    /// protocol other than 0 and `IPPROTO_TCP` (`IPPROTO_MPTCP` included).
    fn loopback_tcp_socket_rules() -> Result<Vec<SeccompRule>, SandboxError> {
        let rule = |conditions: Vec<SeccompCondition>| SeccompRule::new(conditions).map_err(SandboxError::Seccomp);
        let condition = |arg: u8, op: SeccompCmpOp, value: u64| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(SandboxError::Seccomp)
        };
        let unix = libc::AF_UNIX as u64;
        let inet = libc::AF_INET as u64;
        let mut rules = vec![rule(vec![condition(0, SeccompCmpOp::Ne, unix)?, condition(0, SeccompCmpOp::Ne, inet)?])?];
        for kind in (0..=SOCKET_TYPE_MASK).filter(|&t| t != libc::SOCK_STREAM as u64) {
            rules.push(rule(vec![
                condition(0, SeccompCmpOp::Eq, inet)?,
                condition(1, SeccompCmpOp::MaskedEq(SOCKET_TYPE_MASK), kind)?,
            ])?);
        }
        rules.push(rule(vec![
            condition(0, SeccompCmpOp::Eq, inet)?,
            condition(2, SeccompCmpOp::Ne, 0)?,
            condition(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
        ])?);
        Ok(rules)
    }

    /// The seccompiler rules (ORed; conditions within one rule ANDed) that
    /// match when `when` holds.
    fn rules_for(when: When) -> Result<Vec<SeccompRule>, SandboxError> {
        let rule = |conditions: Vec<SeccompCondition>| SeccompRule::new(conditions).map_err(SandboxError::Seccomp);
        let condition = |arg: u8, op: SeccompCmpOp, value: u64| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(SandboxError::Seccomp)
        };
        match when {
            When::Always => Ok(Vec::new()),
            When::ArgNotIn { arg, values } => {
                let conditions =
                    values.iter().map(|&v| condition(arg, SeccompCmpOp::Ne, v)).collect::<Result<_, _>>()?;
                Ok(vec![rule(conditions)?])
            }
            When::ArgIn { arg, values } => {
                values.iter().map(|&v| rule(vec![condition(arg, SeccompCmpOp::Eq, v)?])).collect()
            }
            When::ArgHasAnyBit { arg, bits } => {
                bits.iter().map(|&bit| rule(vec![condition(arg, SeccompCmpOp::MaskedEq(bit), bit)?])).collect()
            }
            When::ArgIsAndArgIn { arg, value, then_arg, values } => values
                .iter()
                .map(|&v| {
                    rule(vec![condition(arg, SeccompCmpOp::Eq, value)?, condition(then_arg, SeccompCmpOp::Eq, v)?])
                })
                .collect(),
        }
    }

    /// The policy as seccompiler compiles it, in two filters (allow-list,
    /// then denials): what this module built before the search tree, kept
    /// as the reference the tree must agree with.
    fn reference(arch: TargetArch, network: Network) -> [BpfProgram; 2] {
        let mut allowed: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        let mut denied: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for (name, verdict) in policy() {
            let Some(nr) = syscall_number(name, arch) else { continue };
            let nr = i64::from(nr);
            match verdict {
                Verdict::Allow => {
                    allowed.insert(nr, Vec::new());
                }
                Verdict::Eperm(When::Always) => {
                    denied.insert(nr, Vec::new());
                }
                Verdict::Eperm(when) => {
                    allowed.insert(nr, Vec::new());
                    denied.insert(nr, rules_for(when).unwrap());
                }
                Verdict::Enosys => {}
            }
        }
        if network == Network::LoopbackTcp {
            let nr = syscall_number("socket", arch).unwrap();
            denied.insert(i64::from(nr), loopback_tcp_socket_rules().unwrap());
        }
        let build = |rules, mismatch, matched| {
            BpfProgram::try_from(SeccompFilter::new(rules, mismatch, matched, arch).unwrap()).unwrap()
        };
        [
            build(allowed, SeccompAction::Errno(libc::ENOSYS as u32), SeccompAction::Allow),
            build(denied, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32)),
        ]
    }

    #[test]
    fn every_policy_name_is_a_syscall_listed_once() {
        let mut names: Vec<&str> = policy().map(|(n, _)| n).collect();
        for name in &names {
            assert!(
                syscall_number(name, TargetArch::x86_64).is_some()
                    || syscall_number(name, TargetArch::aarch64).is_some(),
                "{name} is not a syscall on x86_64 or aarch64"
            );
        }
        let before = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), before, "a name is listed twice");
        assert!(SYSCALLS.windows(2).all(|w| w[0].0 < w[1].0), "SYSCALLS must be sorted for binary search");
    }

    #[test]
    fn verdicts_the_issue_names() {
        for name in [
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "mount",
            "umount2",
            "open_tree",
            "open_tree_attr",
            "move_mount",
            "fsopen",
            "fsmount",
            "fspick",
            "fsconfig",
            "mount_setattr",
            "unshare",
            "setns",
            "bpf",
            "keyctl",
            "add_key",
            "request_key",
            "perf_event_open",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "modify_ldt",
            "userfaultfd",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "acct",
            "swapon",
            "swapoff",
            "reboot",
            "settimeofday",
            "clock_settime",
            "adjtimex",
            "pivot_root",
            "chroot",
            "name_to_handle_at",
            "open_by_handle_at",
            "lookup_dcookie",
            "quotactl",
            "vhangup",
            "pidfd_getfd",
        ] {
            assert_eq!(verdict(name), EPERM, "{name}");
        }
        for name in ["clone3", "memfd_create", "listmount", "inotify_init1", "mq_open", "no_such_call"] {
            assert_eq!(verdict(name), Verdict::Enosys, "{name}");
        }
        for name in ["read", "execve", "futex", "mmap", "wait4", "shmget", "semop", "rseq", "statx", "getrandom"] {
            assert_eq!(verdict(name), ALLOW, "{name}");
        }
        assert!(matches!(verdict("socket"), Verdict::Eperm(When::ArgNotIn { arg: 0, .. })));
        assert!(matches!(verdict("clone"), Verdict::Eperm(When::ArgHasAnyBit { arg: 0, .. })));
        assert!(matches!(verdict("personality"), Verdict::Eperm(When::ArgNotIn { arg: 0, .. })));
    }

    /// The generated table agrees with the `libc` crate on this target.
    #[test]
    fn native_numbers_match_libc() {
        let arch = native_arch().unwrap();
        macro_rules! num {
            ($($name:ident = $sys:ident)*) => {$(
                assert_eq!(syscall_number(stringify!($name), arch).map(i64::from), Some(libc::$sys), stringify!($name));
            )*};
        }
        num!(
            read = SYS_read write = SYS_write openat = SYS_openat close = SYS_close clone = SYS_clone clone3 = SYS_clone3
            execve = SYS_execve socket = SYS_socket socketpair = SYS_socketpair ioctl = SYS_ioctl
            ptrace = SYS_ptrace mount = SYS_mount unshare = SYS_unshare setns = SYS_setns bpf = SYS_bpf
            memfd_create = SYS_memfd_create io_uring_setup = SYS_io_uring_setup open_tree = SYS_open_tree
            move_mount = SYS_move_mount fsopen = SYS_fsopen mount_setattr = SYS_mount_setattr
            personality = SYS_personality futex = SYS_futex rseq = SYS_rseq statx = SYS_statx
            faccessat2 = SYS_faccessat2 epoll_pwait2 = SYS_epoll_pwait2 close_range = SYS_close_range
            fchmodat2 = SYS_fchmodat2 mseal = SYS_mseal pidfd_getfd = SYS_pidfd_getfd
            landlock_restrict_self = SYS_landlock_restrict_self shmget = SYS_shmget semtimedop = SYS_semtimedop
            kexec_file_load = SYS_kexec_file_load process_vm_writev = SYS_process_vm_writev
            userfaultfd = SYS_userfaultfd perf_event_open = SYS_perf_event_open getrandom = SYS_getrandom
        );
        #[cfg(target_arch = "x86_64")]
        num!(
            open = SYS_open fork = SYS_fork stat = SYS_stat modify_ldt = SYS_modify_ldt arch_prctl = SYS_arch_prctl
            iopl = SYS_iopl lookup_dcookie = SYS_lookup_dcookie _sysctl = SYS__sysctl
        );
    }

    #[test]
    fn numbers_of_both_architectures() {
        let x = |name| syscall_number(name, TargetArch::x86_64);
        let a = |name| syscall_number(name, TargetArch::aarch64);
        assert_eq!((x("read"), a("read")), (Some(0), Some(63)));
        assert_eq!((x("socket"), a("socket")), (Some(41), Some(198)));
        assert_eq!((x("clone"), a("clone")), (Some(56), Some(220)));
        assert_eq!((x("ptrace"), a("ptrace")), (Some(101), Some(117)));
        assert_eq!((x("open"), a("open")), (Some(2), None));
        assert_eq!((x("modify_ldt"), a("modify_ldt")), (Some(154), None));
        assert_eq!((x("clone3"), a("clone3")), (Some(435), Some(435)));
        assert_eq!((x("open_tree_attr"), a("open_tree_attr")), (Some(467), Some(467)));
        assert_eq!(x("no_such_call"), None);
    }

    fn expect_header(prog: &[sock_filter], audit_arch: u32) {
        // seccompiler's architecture check comes first and kills on a foreign arch.
        assert_eq!(prog[0], sock_filter { code: BPF_LD_W_ABS, jt: 0, jf: 0, k: 4 });
        assert_eq!(prog[1], sock_filter { code: BPF_JEQ_K, jt: 1, jf: 0, k: audit_arch });
        assert_eq!(prog[2], sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_KILL_PROCESS });
    }

    #[test]
    fn the_cached_programs_are_the_compiled_ones() {
        for network in [Network::None, Network::LoopbackTcp] {
            let fresh = compile_with(native_arch().unwrap(), network).unwrap();
            assert_eq!(compile_native(network).unwrap(), fresh);
            assert_eq!(compile_native(network).unwrap(), fresh, "a second call serves the same programs");
        }
        assert_ne!(compile_native(Network::None).unwrap(), compile_native(Network::LoopbackTcp).unwrap());
    }

    #[test]
    fn both_architectures_compile_with_the_right_defaults() {
        for (arch, audit) in [(TargetArch::x86_64, AUDIT_ARCH_X86_64), (TargetArch::aarch64, AUDIT_ARCH_AARCH64)] {
            let filters = compile(arch).unwrap();
            let prog = &filters.program;
            expect_header(prog, audit);
            let ret = |k| sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k };
            // The kernel wants a return last: the three shared returns end
            // the program, and every verdict after the header leaves through
            // them.
            let exits =
                [SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | libc::EPERM as u32, SECCOMP_RET_ERRNO | libc::ENOSYS as u32];
            assert_eq!(prog[prog.len() - 3..], exits.map(ret));
            assert_eq!(prog.iter().filter(|i| i.code == BPF_RET_K).count(), 4, "{arch:?}");
            // Nothing re-dispatches on the number after the tree: each
            // argument block reads arguments only.
            let nodes = prog[4..].iter().take_while(|i| i.code == BPF_JGE_K).count();
            assert!(nodes > 50, "{arch:?}: {nodes} nodes");
            for i in &prog[4 + nodes..] {
                assert!(i.code != BPF_LD_W_ABS || i.k >= SECCOMP_DATA_ARGS, "{arch:?}: {i:?}");
            }
            // The point of the tree: far shorter than the two linear filters.
            let [allow, deny] = reference(arch, Network::None);
            assert!(
                prog.len() * 3 < allow.len() + deny.len(),
                "{} against {} + {}",
                prog.len(),
                allow.len(),
                deny.len()
            );
        }
        assert_ne!(compile(TargetArch::x86_64).unwrap(), compile(TargetArch::aarch64).unwrap());
        assert!(compile(TargetArch::riscv64).is_err());
    }

    /// The kernel's rule for stacked filters: the most restrictive action,
    /// and among equal actions the newest filter's.
    fn stacked(programs: &[&BpfProgram], audit: u32, nr: u32, args: [u64; 6]) -> u32 {
        let action = |r: u32| (r & 0xffff_0000) as i32;
        let mut result = SECCOMP_RET_ALLOW;
        for prog in programs.iter().rev() {
            let r = evaluate(prog, audit, nr, args);
            if action(r) < action(result) {
                result = r;
            }
        }
        result
    }

    /// Argument values the policy's rules look at, and some they do not.
    fn interesting_values() -> Vec<u64> {
        let mut values: Vec<u64> = [0, 1, 2, 3, 6, 10, 17, 255, 262, 0x5401, 0xffff_ffff, u64::MAX, 1 << 32]
            .into_iter()
            .chain(CLONE_NAMESPACE_FLAGS.iter().copied())
            .chain(CLONE_NAMESPACE_FLAGS.iter().map(|f| f | libc::SIGCHLD as u64))
            .chain(PERSONALITY_DEFAULTS.iter().copied())
            .chain([0x0040_0000])
            .chain(SOCKET_DOMAINS.iter().copied())
            .chain([libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK, libc::AF_PACKET].map(|a| a as u64))
            .chain((0..=SOCKET_TYPE_MASK).flat_map(|t| [t, t | (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64]))
            .chain([libc::SOL_SOCKET as u64, libc::IPPROTO_TCP as u64, libc::SO_REUSEADDR as u64])
            .chain(SOCKET_BUFFER_OPTIONS.iter().copied())
            .chain(DENIED_FCNTLS.iter().copied())
            .chain([libc::F_GETPIPE_SZ as u64, libc::F_SETFL as u64])
            .chain(DENIED_IOCTLS.iter().copied())
            .collect();
        values.sort_unstable();
        values.dedup();
        values
    }

    fn outcome(filters: &Filters, arch: TargetArch, audit: u32, name: &str, args: [u64; 6]) -> u32 {
        let nr = syscall_number(name, arch).unwrap();
        outcome_nr(filters, audit, nr, args)
    }

    fn outcome_nr(filters: &Filters, audit: u32, nr: u32, args: [u64; 6]) -> u32 {
        stacked(&filters.in_install_order(), audit, nr, args)
    }

    /// The tree gives what seccompiler's two filters gave together: for
    /// every syscall number (and x32's, and a foreign architecture's) with
    /// no arguments, and for every call with argument rules, with every
    /// interesting value at each argument and in pairs at the first three.
    #[test]
    fn the_tree_says_what_the_two_filters_said() {
        let values = interesting_values();
        for (arch, audit) in [(TargetArch::x86_64, AUDIT_ARCH_X86_64), (TargetArch::aarch64, AUDIT_ARCH_AARCH64)] {
            for network in [Network::None, Network::LoopbackTcp] {
                let tree = compile_with(arch, network).unwrap();
                let [allow, deny] = reference(arch, network);
                let check = |audit: u32, nr: u32, args: [u64; 6]| {
                    let want = stacked(&[&allow, &deny], audit, nr, args);
                    assert_eq!(outcome_nr(&tree, audit, nr, args), want, "{arch:?} {network:?} nr {nr} args {args:?}");
                };
                for nr in (0..1024).chain([X32_SYSCALL_BIT, X32_SYSCALL_BIT | 1, X32_SYSCALL_BIT | 101, u32::MAX]) {
                    check(audit, nr, [0; 6]);
                    check(0x4000_0003, nr, [0; 6]);
                }
                let conditional: Vec<u32> = policy()
                    .filter(|(_, v)| matches!(v, Verdict::Eperm(w) if *w != When::Always))
                    .filter_map(|(name, _)| syscall_number(name, arch))
                    .collect();
                assert!(conditional.len() >= 6, "{conditional:?}");
                for &nr in &conditional {
                    for arg in 0..6 {
                        for &v in &values {
                            let mut args = [0u64; 6];
                            args[arg] = v;
                            check(audit, nr, args);
                        }
                    }
                    for &a in &values {
                        for &b in &values {
                            check(audit, nr, [a, b, 0, 0, 0, 0]);
                            check(audit, nr, [a, 0, b, 0, 0, 0]);
                            check(audit, nr, [0, a, b, 0, 0, 0]);
                        }
                    }
                }
            }
        }
    }

    /// Every call whose verdict depends on no argument is decided without
    /// reading one (so the kernel's action cache takes it) and within a
    /// search's depth, where seccompiler's chain took hundreds of steps.
    #[test]
    fn unconditional_calls_are_decided_in_a_few_steps_from_the_number_alone() {
        for (arch, audit) in [(TargetArch::x86_64, AUDIT_ARCH_X86_64), (TargetArch::aarch64, AUDIT_ARCH_AARCH64)] {
            let tree = compile(arch).unwrap();
            let conditional: Vec<u32> = policy()
                .filter(|(_, v)| matches!(v, Verdict::Eperm(w) if *w != When::Always))
                .filter_map(|(name, _)| syscall_number(name, arch))
                .collect();
            let mut deepest = 0;
            for nr in (0..1024).chain([X32_SYSCALL_BIT | 1, u32::MAX]).filter(|nr| !conditional.contains(nr)) {
                let (_, steps, read_args) = trace(&tree.program, audit, nr, [7; 6]);
                assert!(!read_args, "nr {nr} read an argument");
                deepest = deepest.max(steps);
            }
            assert!(deepest <= 16, "{arch:?}: {deepest} steps");
            let [allow, _] = reference(arch, Network::None);
            let (_, linear, _) = trace(&allow, audit, 1023, [0; 6]);
            assert!(linear > 10 * deepest, "the chain took {linear}");
        }
    }

    #[test]
    fn filters_behave_as_the_policy_says_on_both_architectures() {
        let allow = SECCOMP_RET_ALLOW;
        let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        for (arch, audit) in [(TargetArch::x86_64, AUDIT_ARCH_X86_64), (TargetArch::aarch64, AUDIT_ARCH_AARCH64)] {
            let f = compile(arch).unwrap();
            let o = |name: &str, args: [u64; 6]| outcome(&f, arch, audit, name, args);
            let none = [0u64; 6];
            assert_eq!(o("read", none), allow);
            assert_eq!(o("ptrace", none), eperm);
            assert_eq!(o("open_tree_attr", none), eperm);
            assert_eq!(o("memfd_create", none), enosys);
            assert_eq!(o("clone3", none), enosys);
            assert_eq!(o("listmount", none), enosys);
            assert_eq!(o("socket", [libc::AF_UNIX as u64, 1, 0, 0, 0, 0]), allow);
            assert_eq!(o("socket", [libc::AF_INET as u64, 1, 0, 0, 0, 0]), eperm);
            assert_eq!(o("socket", [libc::AF_NETLINK as u64, 3, 0, 0, 0, 0]), eperm);
            assert_eq!(o("socketpair", [libc::AF_INET6 as u64, 1, 0, 0, 0, 0]), eperm);
            let thread_flags = (libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_FILES | libc::CLONE_SIGHAND) as u64;
            assert_eq!(o("clone", [thread_flags, 0, 0, 0, 0, 0]), allow);
            assert_eq!(o("clone", [libc::SIGCHLD as u64 | libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0]), eperm);
            assert_eq!(o("clone", [0x80, 0, 0, 0, 0, 0]), eperm, "CLONE_NEWTIME");
            assert_eq!(o("personality", [0, 0, 0, 0, 0, 0]), allow);
            assert_eq!(o("personality", [0xffff_ffff, 0, 0, 0, 0, 0]), allow);
            assert_eq!(o("personality", [0x0040_0000, 0, 0, 0, 0, 0]), eperm, "READ_IMPLIES_EXEC");
            assert_eq!(o("ioctl", [0, DENIED_IOCTLS[0], 0, 0, 0, 0]), eperm);
            assert_eq!(o("ioctl", [0, 0x5401, 0, 0, 0, 0]), allow, "TCGETS");
            // Buffers keep the kernel's size: SO_SNDBUF/SO_RCVBUF (and the
            // FORCE forms) at SOL_SOCKET, F_SETPIPE_SZ; the rest is allowed.
            let sol = libc::SOL_SOCKET as u64;
            for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF, libc::SO_SNDBUFFORCE, libc::SO_RCVBUFFORCE] {
                assert_eq!(o("setsockopt", [3, sol, opt as u64, 0, 4, 0]), eperm, "option {opt}");
            }
            assert_eq!(o("setsockopt", [3, sol, libc::SO_REUSEADDR as u64, 0, 4, 0]), allow);
            assert_eq!(o("setsockopt", [3, sol, libc::SO_KEEPALIVE as u64, 0, 4, 0]), allow);
            // The same number at another level is another option (TCP_KEEPCNT).
            assert_eq!(o("setsockopt", [3, libc::IPPROTO_TCP as u64, libc::SO_RCVBUF as u64, 0, 4, 0]), allow);
            assert_eq!(o("fcntl", [3, libc::F_SETPIPE_SZ as u64, 1 << 20, 0, 0, 0]), eperm);
            assert_eq!(o("fcntl", [3, libc::F_GETPIPE_SZ as u64, 0, 0, 0, 0]), allow);
            assert_eq!(o("fcntl", [3, libc::F_SETFL as u64, libc::O_NONBLOCK as u64, 0, 0, 0]), allow);
            assert_eq!(o("fcntl", [3, libc::F_DUPFD_CLOEXEC as u64, 4, 0, 0, 0]), allow);
            assert_eq!(o("inotify_init1", none), enosys);
            assert_eq!(o("inotify_add_watch", none), enosys);
            // A syscall number nobody assigned yet is denied as ENOSYS.
            assert_eq!(outcome_nr(&f, audit, 999, none), enosys);
            // Foreign (32-bit) architectures are killed.
            assert_eq!(outcome_nr(&f, 0x4000_0003, 1, none), SECCOMP_RET_KILL_PROCESS, "i386");
            assert_eq!(outcome_nr(&f, 0x4000_0028, 1, none), SECCOMP_RET_KILL_PROCESS, "arm");
        }
        // x32 numbers (bit 30) share x86_64's audit arch and match no rule.
        let f = compile(TargetArch::x86_64).unwrap();
        assert_eq!(outcome_nr(&f, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT, [0; 6]), enosys, "x32 read");
        assert_eq!(outcome_nr(&f, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 101, [0; 6]), enosys, "x32 ptrace");
    }

    #[test]
    fn loopback_tcp_allows_ipv4_tcp_and_nothing_else_new() {
        let allow = SECCOMP_RET_ALLOW;
        let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let inet = libc::AF_INET as u64;
        let stream = libc::SOCK_STREAM as u64;
        let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64;
        for (arch, audit) in [(TargetArch::x86_64, AUDIT_ARCH_X86_64), (TargetArch::aarch64, AUDIT_ARCH_AARCH64)] {
            let f = compile_with(arch, Network::LoopbackTcp).unwrap();
            let o = |name: &str, args: [u64; 6]| outcome(&f, arch, audit, name, args);
            assert_eq!(o("socket", [inet, stream, 0, 0, 0, 0]), allow);
            assert_eq!(o("socket", [inet, stream | flags, libc::IPPROTO_TCP as u64, 0, 0, 0]), allow);
            assert_eq!(o("socket", [libc::AF_UNIX as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0]), allow);
            assert_eq!(o("socket", [inet, libc::SOCK_DGRAM as u64, 0, 0, 0, 0]), eperm, "UDP");
            assert_eq!(o("socket", [inet, libc::SOCK_RAW as u64, 1, 0, 0, 0]), eperm, "raw ICMP");
            assert_eq!(o("socket", [inet, libc::SOCK_RAW as u64 | flags, 255, 0, 0, 0]), eperm, "raw");
            assert_eq!(o("socket", [inet, libc::SOCK_SEQPACKET as u64, 0, 0, 0, 0]), eperm);
            assert_eq!(o("socket", [inet, 10, 0, 0, 0, 0]), eperm, "SOCK_PACKET");
            assert_eq!(o("socket", [inet, stream, 262, 0, 0, 0]), eperm, "MPTCP");
            assert_eq!(o("socket", [inet, stream, libc::IPPROTO_UDP as u64, 0, 0, 0]), eperm);
            assert_eq!(o("socket", [libc::AF_INET6 as u64, stream, 0, 0, 0, 0]), eperm);
            assert_eq!(o("socket", [libc::AF_NETLINK as u64, 3, 0, 0, 0, 0]), eperm);
            assert_eq!(o("socket", [libc::AF_PACKET as u64, 3, 0, 0, 0, 0]), eperm);
            assert_eq!(o("socketpair", [inet, stream, 0, 0, 0, 0]), eperm);
            // Everything else is the default policy's.
            let default = compile(arch).unwrap();
            for nr in (0..600).filter(|&nr| Some(nr) != syscall_number("socket", arch)) {
                assert_eq!(
                    outcome_nr(&f, audit, nr, [3, 1, 0, 0, 0, 0]),
                    outcome_nr(&default, audit, nr, [3, 1, 0, 0, 0, 0])
                );
            }
            assert_eq!(o("ptrace", [0; 6]), eperm);
        }
    }

    #[test]
    fn bytes_round_trip() {
        for arch in [TargetArch::x86_64, TargetArch::aarch64] {
            let filters = compile(arch).unwrap();
            let bytes = filters.to_bytes();
            assert_eq!(bytes.len(), 1);
            assert_eq!(bytes[0].len(), filters.program.len() * SOCK_FILTER_BYTES);
            assert_eq!(Filters::from_bytes(&bytes), Some(filters.clone()));
            // Native endianness: the first instruction is `ld [4]` (the arch).
            assert_eq!(&bytes[0][..2], &BPF_LD_W_ABS.to_ne_bytes());
            assert_eq!(&bytes[0][4..8], &4u32.to_ne_bytes());
        }
        assert_eq!(Filters::from_bytes(&[vec![0; 7]]), None);
        assert_eq!(Filters::from_bytes(&[vec![0; 8], vec![0; 8]]), None);
    }
}
