//! The seccomp layer: a deny list, compiled before fork.
//!
//! # Why a deny list
//!
//! The child is CPython plus whatever C extensions its `sys.path` holds, and
//! the program may start subprocesses. An allow list that keeps all of that
//! working is several hundred syscalls long, tracks libc and kernel versions
//! (`clone3`, `rseq`, `statx`, `faccessat2`, `epoll_pwait2`, new `*at2`
//! variants...) and fails closed in ways that look like random `OSError`s to
//! a model. So this filter allows by default and returns `EPERM` for the
//! calls that matter for escaping or attacking the host: non-`AF_UNIX`
//! sockets, `ptrace` and cross-process memory access, every mount and
//! namespace call, `bpf`, keyrings, `perf_event_open`, module and kexec
//! loading, `userfaultfd`, `io_uring`, handle-based opens, clock setting,
//! `personality` and the rest of [`deny_table`].
//!
//! It is not the only layer. Behind it:
//! - the child has no capabilities in any namespace that owns a host
//!   resource, and runs as a per-run uid;
//! - its network namespace has no interface up (not even `lo`), so even an
//!   `AF_INET` socket would reach nothing; Landlock (ABI 4+) also denies TCP
//!   bind and connect;
//! - its mount namespace holds only the exposed paths, read-only except the
//!   run dir, and Landlock enforces the same file access on top;
//! - `no_new_privs`, rlimits, and a PID namespace that dies with its init.
//!
//! Two filters are installed. The first is hand-written: it returns `ENOSYS`
//! for `clone3` (glibc then falls back to `clone`, whose flags a classic BPF
//! filter can inspect, unlike `clone3`'s struct in user memory) and, on
//! x86_64, for every x32-ABI syscall number (bit 30 set), which shares the
//! native audit arch and would otherwise slip past rules keyed on native
//! numbers. The second is built by `seccompiler` from [`deny_table`]; its
//! architecture check kills the process for any non-native arch (32-bit
//! `int 0x80` calls on x86_64).

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::SandboxError;

/// When a syscall of the table is denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Always.
    Always,
    /// When the 32-bit argument `arg` differs from `value` (e.g. a socket
    /// domain other than `AF_UNIX`).
    ArgNotEqual {
        /// Argument index, 0-based.
        arg: u8,
        /// The one allowed value.
        value: u64,
    },
    /// When the 32-bit argument `arg` has any of `bits` set (e.g. namespace
    /// flags of `clone`).
    ArgHasAnyBit {
        /// Argument index, 0-based.
        arg: u8,
        /// Each bit that triggers the denial.
        bits: &'static [u64],
    },
}

/// One denied syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenyRule {
    /// The syscall's name.
    pub name: &'static str,
    /// Its number on the build target.
    pub nr: i64,
    /// When it is denied (with `EPERM`).
    pub when: When,
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
];

/// The x32 ABI marker in syscall numbers on x86_64 (`__X32_SYSCALL_BIT`).
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

macro_rules! always {
    ($($name:ident),* $(,)?) => {
        [$(DenyRule { name: stringify!($name), nr: paste_sys!($name), when: When::Always }),*]
    };
}

macro_rules! paste_sys {
    (ptrace) => {
        libc::SYS_ptrace
    };
    (process_vm_readv) => {
        libc::SYS_process_vm_readv
    };
    (process_vm_writev) => {
        libc::SYS_process_vm_writev
    };
    (pidfd_getfd) => {
        libc::SYS_pidfd_getfd
    };
    (mount) => {
        libc::SYS_mount
    };
    (umount2) => {
        libc::SYS_umount2
    };
    (pivot_root) => {
        libc::SYS_pivot_root
    };
    (chroot) => {
        libc::SYS_chroot
    };
    (fsopen) => {
        libc::SYS_fsopen
    };
    (fsconfig) => {
        libc::SYS_fsconfig
    };
    (fsmount) => {
        libc::SYS_fsmount
    };
    (fspick) => {
        libc::SYS_fspick
    };
    (move_mount) => {
        libc::SYS_move_mount
    };
    (open_tree) => {
        libc::SYS_open_tree
    };
    (mount_setattr) => {
        libc::SYS_mount_setattr
    };
    (unshare) => {
        libc::SYS_unshare
    };
    (setns) => {
        libc::SYS_setns
    };
    (bpf) => {
        libc::SYS_bpf
    };
    (keyctl) => {
        libc::SYS_keyctl
    };
    (add_key) => {
        libc::SYS_add_key
    };
    (request_key) => {
        libc::SYS_request_key
    };
    (perf_event_open) => {
        libc::SYS_perf_event_open
    };
    (kexec_load) => {
        libc::SYS_kexec_load
    };
    (kexec_file_load) => {
        libc::SYS_kexec_file_load
    };
    (init_module) => {
        libc::SYS_init_module
    };
    (finit_module) => {
        libc::SYS_finit_module
    };
    (delete_module) => {
        libc::SYS_delete_module
    };
    (reboot) => {
        libc::SYS_reboot
    };
    (swapon) => {
        libc::SYS_swapon
    };
    (swapoff) => {
        libc::SYS_swapoff
    };
    (userfaultfd) => {
        libc::SYS_userfaultfd
    };
    (io_uring_setup) => {
        libc::SYS_io_uring_setup
    };
    (io_uring_enter) => {
        libc::SYS_io_uring_enter
    };
    (io_uring_register) => {
        libc::SYS_io_uring_register
    };
    (open_by_handle_at) => {
        libc::SYS_open_by_handle_at
    };
    (name_to_handle_at) => {
        libc::SYS_name_to_handle_at
    };
    (acct) => {
        libc::SYS_acct
    };
    (settimeofday) => {
        libc::SYS_settimeofday
    };
    (clock_settime) => {
        libc::SYS_clock_settime
    };
    (clock_adjtime) => {
        libc::SYS_clock_adjtime
    };
    (adjtimex) => {
        libc::SYS_adjtimex
    };
    (personality) => {
        libc::SYS_personality
    };
    (syslog) => {
        libc::SYS_syslog
    };
    (lookup_dcookie) => {
        libc::SYS_lookup_dcookie
    };
    (quotactl) => {
        libc::SYS_quotactl
    };
    (quotactl_fd) => {
        libc::SYS_quotactl_fd
    };
    (vhangup) => {
        libc::SYS_vhangup
    };
    (nfsservctl) => {
        libc::SYS_nfsservctl
    };
    (iopl) => {
        libc::SYS_iopl
    };
    (ioperm) => {
        libc::SYS_ioperm
    };
}

/// Every syscall the filter denies with `EPERM`, for this build target.
///
/// `clone3` and (on x86_64) x32 syscalls are handled by the hand-written
/// pre-filter and return `ENOSYS` instead.
pub fn deny_table() -> Vec<DenyRule> {
    let mut table = vec![
        DenyRule {
            name: "socket",
            nr: libc::SYS_socket,
            when: When::ArgNotEqual { arg: 0, value: libc::AF_UNIX as u64 },
        },
        DenyRule {
            name: "socketpair",
            nr: libc::SYS_socketpair,
            when: When::ArgNotEqual { arg: 0, value: libc::AF_UNIX as u64 },
        },
        DenyRule {
            name: "clone",
            nr: libc::SYS_clone,
            when: When::ArgHasAnyBit { arg: 0, bits: CLONE_NAMESPACE_FLAGS },
        },
    ];
    table.extend(always![
        ptrace,
        process_vm_readv,
        process_vm_writev,
        pidfd_getfd,
        mount,
        umount2,
        pivot_root,
        chroot,
        fsopen,
        fsconfig,
        fsmount,
        fspick,
        move_mount,
        open_tree,
        mount_setattr,
        unshare,
        setns,
        bpf,
        keyctl,
        add_key,
        request_key,
        perf_event_open,
        kexec_load,
        kexec_file_load,
        init_module,
        finit_module,
        delete_module,
        reboot,
        swapon,
        swapoff,
        userfaultfd,
        io_uring_setup,
        io_uring_enter,
        io_uring_register,
        open_by_handle_at,
        name_to_handle_at,
        acct,
        settimeofday,
        clock_settime,
        clock_adjtime,
        adjtimex,
        personality,
        syslog,
        quotactl,
        quotactl_fd,
        vhangup,
    ]);
    #[cfg(target_arch = "x86_64")]
    table.extend(always![lookup_dcookie, nfsservctl, iopl, ioperm]);
    table
}

/// The two compiled filters, installed in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filters {
    /// `clone3` and x32 numbers -> `ENOSYS`; everything else allowed.
    pub prefilter: BpfProgram,
    /// The deny table -> `EPERM`; non-native arch -> kill.
    pub main: BpfProgram,
}

/// The seccompiler target for the build architecture.
pub fn native_arch() -> Result<TargetArch, SandboxError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(TargetArch::x86_64),
        "aarch64" => Ok(TargetArch::aarch64),
        arch => Err(SandboxError::UnsupportedArch { arch }),
    }
}

/// Compile [`deny_table`] for `arch`.
pub fn compile(arch: TargetArch) -> Result<Filters, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for rule in deny_table() {
        let chain = match rule.when {
            When::Always => Vec::new(),
            When::ArgNotEqual { arg, value } => vec![condition_rule(arg, SeccompCmpOp::Ne, value)?],
            When::ArgHasAnyBit { arg, bits } => bits
                .iter()
                .map(|&bit| condition_rule(arg, SeccompCmpOp::MaskedEq(bit), bit))
                .collect::<Result<_, _>>()?,
        };
        rules.insert(rule.nr, chain);
    }
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
        .map_err(SandboxError::Seccomp)?;
    let main: BpfProgram = filter.try_into().map_err(SandboxError::Seccomp)?;
    Ok(Filters { prefilter: prefilter(arch), main })
}

fn condition_rule(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompRule, SandboxError> {
    let condition = SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(SandboxError::Seccomp)?;
    SeccompRule::new(vec![condition]).map_err(SandboxError::Seccomp)
}

// Classic BPF opcodes (linux/bpf_common.h) and seccomp constants.
/// `BPF_LD | BPF_W | BPF_ABS` (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
const NR_CLONE3: u32 = 435;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The hand-written pre-filter. Foreign arches are allowed here and killed
/// by the main filter's arch check.
///
/// ```text
/// 0: ld  arch
/// 1: jeq NATIVE        ? 2 : 5
/// 2: ld  nr
/// 3: jset X32_BIT      ? 6 : 4     (x86_64 only; `jset 0` never jumps)
/// 4: jeq __NR_clone3   ? 6 : 5
/// 5: ret ALLOW
/// 6: ret ERRNO(ENOSYS)
/// ```
pub fn prefilter(arch: TargetArch) -> BpfProgram {
    let (audit_arch, x32_bit) = match arch {
        TargetArch::x86_64 => (AUDIT_ARCH_X86_64, X32_SYSCALL_BIT),
        TargetArch::aarch64 => (AUDIT_ARCH_AARCH64, 0),
        TargetArch::riscv64 => (0xc000_00f3, 0),
    };
    vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        jump(BPF_JMP_JEQ_K, audit_arch, 0, 3),
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
        jump(BPF_JMP_JSET_K, x32_bit, 2, 0),
        jump(BPF_JMP_JEQ_K, NR_CLONE3, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
        stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_the_required_denials_once_each() {
        let table = deny_table();
        let mut names: Vec<&str> = table.iter().map(|r| r.name).collect();
        let required = [
            "socket",
            "socketpair",
            "clone",
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "mount",
            "umount2",
            "pivot_root",
            "bpf",
            "keyctl",
            "add_key",
            "request_key",
            "perf_event_open",
            "unshare",
            "setns",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "reboot",
            "swapon",
            "swapoff",
            "userfaultfd",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "open_by_handle_at",
            "name_to_handle_at",
            "chroot",
            "acct",
            "settimeofday",
            "clock_settime",
            "personality",
            "syslog",
            "quotactl",
            "vhangup",
        ];
        for name in required {
            assert!(names.contains(&name), "{name} missing from the deny table");
        }
        #[cfg(target_arch = "x86_64")]
        for name in ["lookup_dcookie", "nfsservctl", "iopl", "ioperm"] {
            assert!(names.contains(&name), "{name} missing from the deny table");
        }
        let before = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), before, "duplicate names");
        let mut numbers: Vec<i64> = table.iter().map(|r| r.nr).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), before, "duplicate syscall numbers");
        // clone3 is not in the EPERM table: it gets ENOSYS from the pre-filter.
        assert!(!names.contains(&"clone3"));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_numbers_are_the_kernel_abi() {
        let table = deny_table();
        let nr = |name: &str| table.iter().find(|r| r.name == name).unwrap().nr;
        assert_eq!(nr("socket"), 41);
        assert_eq!(nr("socketpair"), 53);
        assert_eq!(nr("clone"), 56);
        assert_eq!(nr("ptrace"), 101);
        assert_eq!(nr("unshare"), 272);
        assert_eq!(nr("io_uring_setup"), 425);
        assert_eq!(libc::SYS_clone3, i64::from(NR_CLONE3));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn filters_compile_for_x86_64() {
        let filters = compile(TargetArch::x86_64).unwrap();
        // seccompiler's arch check comes first and kills on a foreign arch.
        assert_eq!(filters.main[0], stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH));
        assert_eq!(filters.main[1], jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0));
        assert_eq!(filters.main[2], stmt(BPF_RET_K, 0x8000_0000));
        // The default is allow, a match returns EPERM.
        assert_eq!(filters.main.last(), Some(&stmt(BPF_RET_K, SECCOMP_RET_ALLOW)));
        assert!(filters.main.contains(&stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::EPERM as u32)));
        // The kernel's BPF_MAXINSNS is 4096.
        assert!(filters.main.len() < 4096);
        assert_eq!(filters.prefilter.len(), 7);
    }

    #[test]
    fn prefilter_jumps_land_on_the_right_returns() {
        for arch in [TargetArch::x86_64, TargetArch::aarch64] {
            let prog = prefilter(arch);
            let target = |at: usize, offset: u8| at + 1 + usize::from(offset);
            // Foreign arch -> allow (the main filter kills it).
            assert_eq!(prog[target(1, prog[1].jf)], stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
            // x32 bit -> ENOSYS; clone3 -> ENOSYS; else allow.
            let enosys = stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
            assert_eq!(prog[target(3, prog[3].jt)], enosys);
            assert_eq!(prog[target(4, prog[4].jt)], enosys);
            assert_eq!(prog[target(4, prog[4].jf)], stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
        }
    }
}
