//! [`probe`]: which layers this machine supports, with reasons.
//!
//! Namespaces are probed the way [`crate::Prepared::enter`] uses them, in a
//! forked throwaway child: as root it unshares a mount namespace, checks
//! `mount_setattr`, drops to `nobody`, creates a user namespace and writes
//! its maps, then unshares the PID, network, IPC and UTS namespaces one by
//! one. The child reports one errno per check over a pipe and exits.

use std::io::Read;
use std::os::fd::AsFd;

use rustix::fs::{Mode, OFlags};
use rustix::process::DumpableBehavior;
use rustix::thread::UnshareFlags;

use crate::landlock_rules::{self, handled_abi, kernel_landlock, KernelLandlock};
use crate::sys;

/// Support for one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// Whether pycage can use the layer here.
    pub supported: bool,
    /// Why (or why not), in words.
    pub reason: String,
}

impl Layer {
    fn yes(reason: impl Into<String>) -> Layer {
        Layer { supported: true, reason: reason.into() }
    }
    fn no(reason: impl Into<String>) -> Layer {
        Layer { supported: false, reason: reason.into() }
    }
}

/// What [`probe`] found, one field per layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// Running as real root (the sandbox builds its root and switches uid as root).
    pub root: Layer,
    /// An unprivileged uid can create a user namespace and map itself.
    pub user_namespace: Layer,
    /// PID namespace.
    pub pid_namespace: Layer,
    /// Network namespace.
    pub net_namespace: Layer,
    /// Mount namespace, with `mount_setattr` (Linux 5.12+).
    pub mount_namespace: Layer,
    /// IPC namespace.
    pub ipc_namespace: Layer,
    /// UTS namespace.
    pub uts_namespace: Layer,
    /// Landlock with an ABI the sandbox accepts.
    pub landlock: Layer,
    /// The Landlock ABI the kernel reports, if any.
    pub landlock_abi: Option<u32>,
    /// seccomp filters with `SECCOMP_RET_ERRNO`.
    pub seccomp: Layer,
    /// `PR_SET_NO_NEW_PRIVS`.
    pub no_new_privs: Layer,
    /// cgroup v2 memory/pids limits (never applied by this crate).
    pub cgroup_v2: Layer,
}

impl Availability {
    /// Every layer with a stable name, in display order.
    pub fn layers(&self) -> [(&'static str, &Layer); 11] {
        [
            ("root", &self.root),
            ("user-namespace", &self.user_namespace),
            ("pid-namespace", &self.pid_namespace),
            ("net-namespace", &self.net_namespace),
            ("mount-namespace", &self.mount_namespace),
            ("ipc-namespace", &self.ipc_namespace),
            ("uts-namespace", &self.uts_namespace),
            ("landlock", &self.landlock),
            ("seccomp", &self.seccomp),
            ("no-new-privs", &self.no_new_privs),
            ("cgroup-v2", &self.cgroup_v2),
        ]
    }

    /// The layers [`crate::Prepared`] needs that are missing here. Empty
    /// means the sandbox can run. (cgroup v2 is not needed.)
    pub fn missing(&self) -> Vec<&'static str> {
        self.layers()
            .into_iter()
            .filter(|(name, layer)| *name != "cgroup-v2" && !layer.supported)
            .map(|(name, _)| name)
            .collect()
    }
}

/// Probe every layer on this machine.
pub fn probe() -> Availability {
    let euid = rustix::process::geteuid().as_raw();
    let root = if euid == 0 {
        Layer::yes("running as root (euid 0)")
    } else {
        Layer::no(format!(
            "running as euid {euid}: the sandbox needs root to build the private root and switch to a per-run uid"
        ))
    };
    let ns = probe_namespaces(euid == 0);
    let kernel = kernel_landlock();
    let landlock_abi = match kernel {
        KernelLandlock::Abi(v) => u32::try_from(v).ok(),
        KernelLandlock::NotEnabled | KernelLandlock::NotImplemented | KernelLandlock::Error(_) => None,
    };
    let landlock = match handled_abi(kernel) {
        Some(abi) => Layer::yes(format!("{kernel}; pycage handles the rights of ABI {}", abi as u32)),
        None => Layer::no(format!("{kernel}; pycage needs ABI {} or newer", landlock_rules::MIN_ABI as u32)),
    };
    Availability {
        root,
        user_namespace: ns.user,
        pid_namespace: ns.pid,
        net_namespace: ns.net,
        mount_namespace: ns.mount,
        ipc_namespace: ns.ipc,
        uts_namespace: ns.uts,
        landlock,
        landlock_abi,
        seccomp: probe_seccomp(),
        no_new_privs: probe_no_new_privs(),
        cgroup_v2: probe_cgroup(),
    }
}

fn probe_seccomp() -> Layer {
    // SAFETY: PR_GET_SECCOMP takes no pointers.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode < 0 {
        return Layer::no(format!("prctl(PR_GET_SECCOMP) failed: {}", std::io::Error::last_os_error()));
    }
    let action: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO
                                   // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 from the pointer, which
                                   // points at a live local.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            2u32, // SECCOMP_GET_ACTION_AVAIL
            0u32,
            &action as *const u32,
        )
    };
    if ret != 0 {
        return Layer::no(format!(
            "seccomp filters with SECCOMP_RET_ERRNO are unavailable: {}",
            std::io::Error::last_os_error()
        ));
    }
    let already = if mode == 2 { " (this process is already filtered; filters stack)" } else { "" };
    Layer::yes(format!("seccomp filter mode available{already}"))
}

fn probe_no_new_privs() -> Layer {
    // SAFETY: PR_GET_NO_NEW_PRIVS takes no pointers.
    let ret = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    if ret < 0 {
        Layer::no(format!("prctl(PR_GET_NO_NEW_PRIVS) failed: {}", std::io::Error::last_os_error()))
    } else {
        Layer::yes("PR_SET_NO_NEW_PRIVS available")
    }
}

fn probe_cgroup() -> Layer {
    let unified = std::fs::read_to_string("/proc/self/cgroup")
        .map(|text| text.lines().any(|line| line.starts_with("0::")))
        .unwrap_or(false);
    let hierarchy =
        if unified { "a cgroup v2 hierarchy is mounted" } else { "no cgroup v2 hierarchy for this process" };
    Layer::no(format!(
        "not delegated: {hierarchy}, but no memory/pids controllers are delegated to pycage; RLIMIT_AS and RLIMIT_NPROC stand in"
    ))
}

/// Indices of the namespace checks in the probe child's report.
const CHECK_MOUNT: usize = 0;
const CHECK_MOUNT_SETATTR: usize = 1;
const CHECK_DROP: usize = 2;
const CHECK_USER: usize = 3;
const CHECK_USER_MAP: usize = 4;
const CHECK_PID: usize = 5;
const CHECK_NET: usize = 6;
const CHECK_IPC: usize = 7;
const CHECK_UTS: usize = 8;
const CHECKS: usize = 9;
/// "Not attempted" in the report.
const SKIPPED: i32 = -1;
/// The uid/gid the probe drops to (`nobody`).
const PROBE_ID: u32 = 65_534;

struct Namespaces {
    user: Layer,
    pid: Layer,
    net: Layer,
    mount: Layer,
    ipc: Layer,
    uts: Layer,
}

fn probe_namespaces(as_root: bool) -> Namespaces {
    let report = run_probe_child(as_root);
    let describe = |errno: i32| std::io::Error::from_raw_os_error(errno).to_string();
    let unavailable = |reason: String| Namespaces {
        user: Layer::no(reason.clone()),
        pid: Layer::no(reason.clone()),
        net: Layer::no(reason.clone()),
        mount: Layer::no(reason.clone()),
        ipc: Layer::no(reason.clone()),
        uts: Layer::no(reason),
    };
    let report = match report {
        Ok(report) => report,
        Err(err) => return unavailable(format!("probe child failed: {err}")),
    };
    let mount = match (report[CHECK_MOUNT], report[CHECK_MOUNT_SETATTR]) {
        (0, 0) => Layer::yes("unshare(CLONE_NEWNS) and mount_setattr work as root"),
        (0, errno) => Layer::no(format!("mount_setattr (Linux 5.12+) unavailable: {}", describe(errno))),
        (errno, _) if !as_root => Layer::no(format!("unshare(CLONE_NEWNS) needs root here: {}", describe(errno))),
        (errno, _) => Layer::no(format!("unshare(CLONE_NEWNS) failed: {}", describe(errno))),
    };
    let who = if as_root { format!("uid {PROBE_ID}") } else { "the current uid".to_string() };
    let user = match (report[CHECK_DROP], report[CHECK_USER], report[CHECK_USER_MAP]) {
        (errno, _, _) if errno > 0 => Layer::no(format!(
            "could not drop to uid {PROBE_ID}: {}",
            describe(errno)
        )),
        (_, 0, 0) => Layer::yes(format!(
            "{who} can create a user namespace and map itself"
        )),
        (_, 0, errno) => Layer::no(format!(
            "{who} created a user namespace but could not write its uid/gid map: {}",
            describe(errno)
        )),
        (_, errno, _) => Layer::no(format!(
            "{who} cannot create a user namespace (check kernel.unprivileged_userns_clone, user.max_user_namespaces, AppArmor's restrict_unprivileged_userns): {}",
            describe(errno)
        )),
    };
    let inner = |check: usize, name: &str| match report[check] {
        0 => Layer::yes(format!("unshare({name}) works inside the user namespace")),
        SKIPPED => Layer::no(format!("not tried: {name} is created inside the user namespace, which is unavailable")),
        errno => Layer::no(format!("unshare({name}) failed: {}", describe(errno))),
    };
    Namespaces {
        user,
        pid: inner(CHECK_PID, "CLONE_NEWPID"),
        net: inner(CHECK_NET, "CLONE_NEWNET"),
        mount,
        ipc: inner(CHECK_IPC, "CLONE_NEWIPC"),
        uts: inner(CHECK_UTS, "CLONE_NEWUTS"),
    }
}

/// Fork a child that runs the checks and writes `CHECKS` errnos (0 = ok,
/// -1 = skipped) to a pipe.
fn run_probe_child(as_root: bool) -> std::io::Result<[i32; CHECKS]> {
    let (read_end, write_end) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // SAFETY: the child below only makes syscalls (no allocation, no locks)
    // and leaves with `_exit`, so forking a possibly multi-threaded process
    // is sound.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        let report = probe_checks(as_root);
        let mut bytes = [0u8; CHECKS * 4];
        for (chunk, errno) in bytes.chunks_exact_mut(4).zip(report) {
            chunk.copy_from_slice(&errno.to_le_bytes());
        }
        let _ = rustix::io::write(&write_end, &bytes);
        // SAFETY: leaving the forked child without running any destructor
        // or atexit handler of the parent's copy.
        unsafe { libc::_exit(0) };
    }
    drop(write_end);
    let mut bytes = Vec::with_capacity(CHECKS * 4);
    let read = std::fs::File::from(read_end).read_to_end(&mut bytes);
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a live c_int.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
    read?;
    if bytes.len() != CHECKS * 4 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the probe child died before reporting"));
    }
    let mut report = [SKIPPED; CHECKS];
    for (slot, chunk) in report.iter_mut().zip(bytes.chunks_exact(4)) {
        *slot = i32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    Ok(report)
}

/// The checks, in the forked probe child. Syscalls only.
fn probe_checks(as_root: bool) -> [i32; CHECKS] {
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    let mut report = [SKIPPED; CHECKS];
    let proc_self = rustix::fs::open(c"/proc/self", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty());
    // SAFETY: the forked probe child is single-threaded.
    report[CHECK_MOUNT] = match unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) } {
        Ok(()) => 0,
        Err(e) => errno(e),
    };
    if report[CHECK_MOUNT] == 0 {
        // Private first, so nothing below could propagate to the host.
        report[CHECK_MOUNT_SETATTR] = match rustix::mount::mount_change(
            c"/",
            rustix::mount::MountPropagationFlags::REC | rustix::mount::MountPropagationFlags::PRIVATE,
        ) {
            // A no-op attribute change: exercises the syscall only.
            Ok(()) => match sys::mount_setattr(c"/", false, 0) {
                Ok(()) => 0,
                Err(e) => e,
            },
            Err(e) => errno(e),
        };
    }
    if as_root {
        let id_gid = rustix::process::Gid::from_raw(PROBE_ID);
        let id_uid = rustix::process::Uid::from_raw(PROBE_ID);
        let dropped = rustix::thread::set_thread_groups(&[])
            .and_then(|()| rustix::thread::set_thread_res_gid(id_gid, id_gid, id_gid))
            .and_then(|()| rustix::thread::set_thread_res_uid(id_uid, id_uid, id_uid))
            .and_then(|()| rustix::process::set_dumpable_behavior(DumpableBehavior::Dumpable));
        report[CHECK_DROP] = match dropped {
            Ok(()) => 0,
            Err(e) => errno(e),
        };
        if report[CHECK_DROP] != 0 {
            return report;
        }
    }
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    // SAFETY: single-threaded probe child.
    report[CHECK_USER] = match unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) } {
        Ok(()) => 0,
        Err(e) => errno(e),
    };
    if report[CHECK_USER] != 0 {
        return report;
    }
    report[CHECK_USER_MAP] = match &proc_self {
        Ok(dir) => write_map(dir.as_fd(), c"setgroups", b"deny\n")
            .and_then(|()| write_map(dir.as_fd(), c"uid_map", &map_line(uid)))
            .and_then(|()| write_map(dir.as_fd(), c"gid_map", &map_line(gid)))
            .map_or_else(errno, |()| 0),
        Err(e) => errno(*e),
    };
    for (check, flag) in [
        (CHECK_PID, UnshareFlags::NEWPID),
        (CHECK_NET, UnshareFlags::NEWNET),
        (CHECK_IPC, UnshareFlags::NEWIPC),
        (CHECK_UTS, UnshareFlags::NEWUTS),
    ] {
        // SAFETY: single-threaded probe child.
        report[check] = match unsafe { rustix::thread::unshare_unsafe(flag) } {
            Ok(()) => 0,
            Err(e) => errno(e),
        };
    }
    report
}

fn write_map(dir: std::os::fd::BorrowedFd<'_>, name: &std::ffi::CStr, line: &[u8]) -> rustix::io::Result<()> {
    let file = rustix::fs::openat(dir, name, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::io::write(&file, line).map(|_| ())
}

/// `"<id> <id> 1\n"` in a stack buffer (the probe child must not allocate).
fn map_line(id: u32) -> MapLine {
    let mut digits = [0u8; 10];
    let mut n = id;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut line = MapLine { bytes: [0u8; 24], len: 0 };
    for _ in 0..2 {
        for i in (0..len).rev() {
            line.push(digits[i]);
        }
        line.push(b' ');
    }
    line.push(b'1');
    line.push(b'\n');
    line
}

struct MapLine {
    bytes: [u8; 24],
    len: usize,
}

impl MapLine {
    fn push(&mut self, byte: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = byte;
            self.len += 1;
        }
    }
}

impl std::ops::Deref for MapLine {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_lines() {
        assert_eq!(&*map_line(0), b"0 0 1\n");
        assert_eq!(&*map_line(65_534), b"65534 65534 1\n");
        assert_eq!(&*map_line(u32::MAX), b"4294967295 4294967295 1\n");
    }
}
