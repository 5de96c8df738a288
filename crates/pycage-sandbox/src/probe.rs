//! [`probe`]: which layers this machine supports, with reasons and what to
//! do about a missing one.
//!
//! Namespaces are probed the way [`crate::Prepared::enter`] uses them, in a
//! forked throwaway child: as root it first drops to `nobody`; then it
//! creates a user namespace and maps itself, unshares the mount, PID,
//! network, IPC and UTS namespaces, checks `mount_setattr`, forks into the
//! new PID namespace, mounts a procfs there and creates the program's
//! nested user namespace. The child reports one errno per check over a
//! pipe and exits.
//!
//! When user namespaces are unavailable, [`diagnose_user_namespace`] reads
//! the knobs that disable them (`kernel.unprivileged_userns_clone`,
//! `user.max_user_namespaces`, AppArmor's
//! `kernel.apparmor_restrict_unprivileged_userns`) and says which one to
//! change.

use std::io::Read;
use std::os::fd::AsFd;

use rustix::fs::{Mode, OFlags};
use rustix::process::DumpableBehavior;
use rustix::thread::UnshareFlags;

use crate::cgroup::{self, Cgroup};
use crate::landlock_rules::{self, handled_abi, kernel_landlock, KernelLandlock};
use crate::sys;

/// Support for one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// Whether pycage can use the layer here.
    pub supported: bool,
    /// Why (or why not), in words, and what to do when it is missing.
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
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    /// Who the runs are: a per-run uid on a root host, the caller's own uid
    /// otherwise. Always supported; informational.
    pub identity: Layer,
    /// The current uid can create a user namespace and map itself.
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
    /// A procfs of the run's PID namespace can be mounted.
    pub proc: Layer,
    /// The program's nested user namespace (uid 1000 inside).
    pub nested_user_namespace: Layer,
    /// Landlock with an ABI the sandbox accepts.
    pub landlock: Layer,
    /// The Landlock ABI the kernel reports, if any.
    pub landlock_abi: Option<u32>,
    /// seccomp filters with `SECCOMP_RET_ERRNO`.
    pub seccomp: Layer,
    /// `PR_SET_NO_NEW_PRIVS`.
    pub no_new_privs: Layer,
    /// A delegated cgroup v2 subtree with the memory, pids and cpu
    /// controllers (optional: budgets have other enforcers without it).
    pub cgroup_v2: Layer,
    /// The delegated cgroup, when there is one.
    pub cgroup: Option<Cgroup>,
}

impl Availability {
    /// Every layer with a stable name, in display order.
    pub fn layers(&self) -> [(&'static str, &Layer); 13] {
        [
            ("identity", &self.identity),
            ("user-namespace", &self.user_namespace),
            ("pid-namespace", &self.pid_namespace),
            ("net-namespace", &self.net_namespace),
            ("mount-namespace", &self.mount_namespace),
            ("ipc-namespace", &self.ipc_namespace),
            ("uts-namespace", &self.uts_namespace),
            ("proc", &self.proc),
            ("nested-user-namespace", &self.nested_user_namespace),
            ("landlock", &self.landlock),
            ("seccomp", &self.seccomp),
            ("no-new-privs", &self.no_new_privs),
            ("cgroup-v2", &self.cgroup_v2),
        ]
    }

    /// The layers [`crate::Prepared`] needs that are missing here. Empty
    /// means the sandbox can run. (cgroup v2 is optional.)
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
    let identity = if euid == 0 {
        Layer::yes("root host: every run gets its own unprivileged host uid, and is uid 1000 inside")
    } else {
        Layer::yes(format!(
            "uid {euid}: runs are mapped to it through an unprivileged user namespace, and are uid 1000 inside"
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
        None => Layer::no(format!(
            "{kernel}; pycage needs ABI {} or newer: Linux 6.2+, with `landlock` in the kernel's `lsm=` boot parameter",
            landlock_rules::MIN_ABI as u32
        )),
    };
    let cgroup = cgroup::detect(&cgroup::RealCgroupFs);
    let cgroup_v2 = match &cgroup {
        Ok(found) => {
            Layer::yes(format!("delegated and writable: {} (memory, pids and cpu controllers)", found.path.display()))
        }
        Err(why) => Layer::no(format!("not used: {why}")),
    };
    Availability {
        identity,
        user_namespace: ns.user,
        pid_namespace: ns.pid,
        net_namespace: ns.net,
        mount_namespace: ns.mount,
        ipc_namespace: ns.ipc,
        uts_namespace: ns.uts,
        proc: ns.proc,
        nested_user_namespace: ns.nested,
        landlock,
        landlock_abi,
        seccomp: probe_seccomp(),
        no_new_privs: probe_no_new_privs(),
        cgroup_v2,
        cgroup: cgroup.ok(),
    }
}

fn probe_seccomp() -> Layer {
    // SAFETY: PR_GET_SECCOMP takes no pointers.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode < 0 {
        return Layer::no(format!(
            "prctl(PR_GET_SECCOMP) failed: {}; the kernel needs CONFIG_SECCOMP_FILTER",
            std::io::Error::last_os_error()
        ));
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
            "seccomp filters with SECCOMP_RET_ERRNO are unavailable: {}; the kernel needs CONFIG_SECCOMP_FILTER",
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

/// Why an unprivileged user namespace could not be created, and what to do:
/// `read` returns the content of a `/proc/sys` file (path relative to
/// `/proc/sys`), `errno` is what `unshare(CLONE_NEWUSER)` failed with.
pub fn diagnose_user_namespace(read: &dyn Fn(&str) -> Option<String>, errno: i32) -> String {
    let value = |name: &str| read(name).map(|v| v.trim().to_string());
    let mut causes = Vec::new();
    if value("kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        causes.push(
            "kernel.unprivileged_userns_clone is 0 (Debian/Ubuntu kernels): run `sysctl -w kernel.unprivileged_userns_clone=1` (and persist it in /etc/sysctl.d)",
        );
    }
    if value("user/max_user_namespaces").as_deref() == Some("0") {
        causes.push("user.max_user_namespaces is 0: run `sysctl -w user.max_user_namespaces=15000` (and persist it)");
    }
    if value("kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        causes.push(
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu 23.10+): give pycage an AppArmor profile with the `userns,` rule, or set the sysctl to 0",
        );
    }
    let error = std::io::Error::from_raw_os_error(errno);
    if causes.is_empty() {
        let hint = match errno {
            libc::EPERM => "a container's seccomp profile or a security module may forbid unshare(CLONE_NEWUSER): run pycage outside the container, or allow the call (Docker: --security-opt seccomp=unconfined)",
            libc::ENOSPC => "the user namespace limit is reached: raise user.max_user_namespaces",
            libc::EINVAL => "the kernel has no user namespaces (CONFIG_USER_NS=n)",
            libc::EUSERS => "user namespaces are nested too deeply here",
            _ => "check the kernel's user namespace support",
        };
        format!("unshare(CLONE_NEWUSER) failed: {error}; {hint}")
    } else {
        format!("unshare(CLONE_NEWUSER) failed: {error}; {}", causes.join("; "))
    }
}

fn read_sysctl(name: &str) -> Option<String> {
    std::fs::read_to_string(std::path::Path::new("/proc/sys").join(name)).ok()
}

/// Indices of the checks in the probe child's report.
const CHECK_DROP: usize = 0;
const CHECK_USER: usize = 1;
const CHECK_USER_MAP: usize = 2;
const CHECK_PID: usize = 3;
const CHECK_NET: usize = 4;
const CHECK_IPC: usize = 5;
const CHECK_UTS: usize = 6;
const CHECK_MOUNT: usize = 7;
const CHECK_MOUNT_SETATTR: usize = 8;
const CHECK_PROC: usize = 9;
const CHECK_NESTED: usize = 10;
const CHECKS: usize = 11;
/// "Not attempted" in the report.
const SKIPPED: i32 = -1;
/// The uid/gid the probe drops to on a root host (`nobody`).
const PROBE_ID: u32 = 65_534;

struct Namespaces {
    user: Layer,
    pid: Layer,
    net: Layer,
    mount: Layer,
    ipc: Layer,
    uts: Layer,
    proc: Layer,
    nested: Layer,
}

fn probe_namespaces(as_root: bool) -> Namespaces {
    let describe = |errno: i32| std::io::Error::from_raw_os_error(errno).to_string();
    let report = match run_probe_child(as_root) {
        Ok(report) => report,
        Err(err) => {
            let reason = format!("probe child failed: {err}");
            let no = || Layer::no(reason.clone());
            return Namespaces {
                user: no(),
                pid: no(),
                net: no(),
                mount: no(),
                ipc: no(),
                uts: no(),
                proc: no(),
                nested: no(),
            };
        }
    };
    // As root, each run gets an unprivileged host uid of its own: the probe
    // checks one such uid, not root.
    let who = if as_root {
        format!("uid {PROBE_ID} (as root, runs get unprivileged uids of their own; this one stands in for them)")
    } else {
        "the current uid".to_string()
    };
    let not_tried = |what: &str| Layer::no(format!("not tried: {what} needs the user namespace, which is unavailable"));
    let user = match (report[CHECK_DROP], report[CHECK_USER], report[CHECK_USER_MAP]) {
        (errno, _, _) if errno > 0 => Layer::no(format!("could not drop to uid {PROBE_ID}: {}", describe(errno))),
        (_, 0, 0) => Layer::yes(format!("{who} can create a user namespace and map itself")),
        (_, 0, errno) => Layer::no(format!(
            "{who} created a user namespace but could not write its uid/gid map: {}",
            describe(errno)
        )),
        (_, errno, _) => Layer::no(diagnose_user_namespace(&read_sysctl, errno)),
    };
    let user_ok = user.supported;
    let inner = |check: usize, name: &str| match report[check] {
        0 => Layer::yes(format!("unshare({name}) works inside the user namespace")),
        SKIPPED => not_tried(name),
        errno => Layer::no(format!("unshare({name}) failed: {}", describe(errno))),
    };
    let mount = match (report[CHECK_MOUNT], report[CHECK_MOUNT_SETATTR]) {
        (0, 0) => Layer::yes("unshare(CLONE_NEWNS) and mount_setattr work inside the user namespace"),
        (0, errno) => Layer::no(format!("mount_setattr (Linux 5.12+) unavailable: {}", describe(errno))),
        (SKIPPED, _) => not_tried("CLONE_NEWNS"),
        (errno, _) => Layer::no(format!("unshare(CLONE_NEWNS) failed: {}", describe(errno))),
    };
    let proc = match report[CHECK_PROC] {
        0 => Layer::yes("a procfs of the run's PID namespace can be mounted"),
        SKIPPED if !user_ok => not_tried("mounting /proc"),
        SKIPPED => Layer::no("not tried: the PID or mount namespace is unavailable"),
        errno => Layer::no(format!(
            "mounting a procfs in the run's PID namespace failed: {}; the kernel refuses it when parts of the host's /proc are hidden by over-mounts (as in most containers): run pycage where /proc is fully visible (Docker: --security-opt systempaths=unconfined)",
            describe(errno)
        )),
    };
    let nested = match report[CHECK_NESTED] {
        0 => Layer::yes("the program's nested user namespace (uid 1000) can be created"),
        SKIPPED if !user_ok => not_tried("the nested user namespace"),
        SKIPPED => Layer::no("not tried: the PID or mount namespace is unavailable"),
        errno => Layer::no(format!(
            "a nested user namespace could not be created: {} (user.max_user_namespaces too low?)",
            describe(errno)
        )),
    };
    Namespaces {
        user,
        pid: inner(CHECK_PID, "CLONE_NEWPID"),
        net: inner(CHECK_NET, "CLONE_NEWNET"),
        mount,
        ipc: inner(CHECK_IPC, "CLONE_NEWIPC"),
        uts: inner(CHECK_UTS, "CLONE_NEWUTS"),
        proc,
        nested,
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
    let result = |r: rustix::io::Result<()>| r.map_or_else(errno, |()| 0);
    let mut report = [SKIPPED; CHECKS];
    report[CHECK_DROP] = 0;
    if as_root {
        let id_gid = rustix::process::Gid::from_raw(PROBE_ID);
        let id_uid = rustix::process::Uid::from_raw(PROBE_ID);
        report[CHECK_DROP] = result(
            rustix::thread::set_thread_groups(&[])
                .and_then(|()| rustix::thread::set_thread_res_gid(id_gid, id_gid, id_gid))
                .and_then(|()| rustix::thread::set_thread_res_uid(id_uid, id_uid, id_uid))
                .and_then(|()| rustix::process::set_dumpable_behavior(DumpableBehavior::Dumpable)),
        );
        if report[CHECK_DROP] != 0 {
            return report;
        }
    }
    let proc_self = rustix::fs::open(c"/proc/self", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty());
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    // SAFETY: single-threaded probe child.
    report[CHECK_USER] = result(unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) });
    if report[CHECK_USER] != 0 {
        return report;
    }
    report[CHECK_USER_MAP] = match &proc_self {
        Ok(dir) => result(
            write_file(dir.as_fd(), c"setgroups", b"deny\n")
                .and_then(|()| write_file(dir.as_fd(), c"uid_map", &map_line(0, uid)))
                .and_then(|()| write_file(dir.as_fd(), c"gid_map", &map_line(0, gid))),
        ),
        Err(e) => errno(*e),
    };
    for (check, flag) in [
        (CHECK_PID, UnshareFlags::NEWPID),
        (CHECK_NET, UnshareFlags::NEWNET),
        (CHECK_IPC, UnshareFlags::NEWIPC),
        (CHECK_UTS, UnshareFlags::NEWUTS),
        (CHECK_MOUNT, UnshareFlags::NEWNS),
    ] {
        // SAFETY: single-threaded probe child.
        report[check] = result(unsafe { rustix::thread::unshare_unsafe(flag) });
    }
    if report[CHECK_MOUNT] != 0 {
        return report;
    }
    // Private first, so nothing below could propagate to the host.
    report[CHECK_MOUNT_SETATTR] = match rustix::mount::mount_change(
        c"/",
        rustix::mount::MountPropagationFlags::REC | rustix::mount::MountPropagationFlags::PRIVATE,
    ) {
        // A no-op attribute change: exercises the syscall only.
        Ok(()) => sys::mount_setattr(c"/", false, 0).map_or_else(|e| e, |()| 0),
        Err(e) => errno(e),
    };
    if report[CHECK_PID] != 0 {
        return report;
    }
    let staged = rustix::mount::mount(
        c"tmpfs",
        c"/tmp",
        c"tmpfs",
        rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
        c"size=65536",
    )
    .and_then(|()| rustix::fs::mkdir(c"/tmp/proc", Mode::from_raw_mode(0o755)));
    if let Err(e) = staged {
        report[CHECK_PROC] = errno(e);
        return report;
    }
    // The first child of the new PID namespace mounts its procfs and makes
    // the nested user namespace, reporting through its exit status.
    // SAFETY: single-threaded probe child; the grandchild only makes
    // syscalls and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let proc = rustix::mount::mount(
            c"proc",
            c"/tmp/proc",
            c"proc",
            rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV | rustix::mount::MountFlags::NOEXEC,
            c"hidepid=invisible",
        );
        let code = match proc {
            Err(e) => 1 + e.raw_os_error().clamp(0, 126),
            // SAFETY: single-threaded.
            Ok(()) => match unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) } {
                Err(e) => 128 + e.raw_os_error().clamp(0, 126),
                Ok(()) => 0,
            },
        };
        // SAFETY: leaving the forked grandchild.
        unsafe { libc::_exit(code) };
    }
    if pid < 0 {
        report[CHECK_PROC] = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EAGAIN);
        return report;
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a live c_int.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 255 };
    match code {
        0 => {
            report[CHECK_PROC] = 0;
            report[CHECK_NESTED] = 0;
        }
        1..=127 => report[CHECK_PROC] = code - 1,
        128..=254 => {
            report[CHECK_PROC] = 0;
            report[CHECK_NESTED] = code - 128;
        }
        _ => report[CHECK_PROC] = libc::ECHILD,
    }
    report
}

fn write_file(dir: std::os::fd::BorrowedFd<'_>, name: &std::ffi::CStr, line: &[u8]) -> rustix::io::Result<()> {
    let file = rustix::fs::openat(dir, name, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::io::write(&file, line).map(|_| ())
}

/// `"<inside> <outside> 1\n"` in a stack buffer (the probe child must not
/// allocate).
fn map_line(inside: u32, outside: u32) -> MapLine {
    let mut line = MapLine { bytes: [0u8; 24], len: 0 };
    for id in [inside, outside] {
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
        assert_eq!(&*map_line(0, 0), b"0 0 1\n");
        assert_eq!(&*map_line(0, 65_534), b"0 65534 1\n");
        assert_eq!(&*map_line(u32::MAX, u32::MAX), b"4294967295 4294967295 1\n");
    }

    fn sysctls(values: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| values.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn user_namespace_diagnosis_names_the_knob() {
        let d = diagnose_user_namespace(&sysctls(&[("kernel/unprivileged_userns_clone", "0\n")]), libc::EPERM);
        assert!(d.contains("kernel.unprivileged_userns_clone is 0") && d.contains("sysctl -w"), "{d}");
        let d = diagnose_user_namespace(&sysctls(&[("user/max_user_namespaces", "0")]), libc::ENOSPC);
        assert!(d.contains("user.max_user_namespaces is 0"), "{d}");
        let d = diagnose_user_namespace(
            &sysctls(&[("kernel/apparmor_restrict_unprivileged_userns", "1"), ("user/max_user_namespaces", "100")]),
            libc::EACCES,
        );
        assert!(d.contains("AppArmor") && d.contains("userns,") && !d.contains("max_user_namespaces is"), "{d}");
        let d = diagnose_user_namespace(&sysctls(&[]), libc::EPERM);
        assert!(d.contains("seccomp profile"), "{d}");
        let d = diagnose_user_namespace(&sysctls(&[("kernel/unprivileged_userns_clone", "1")]), libc::EINVAL);
        assert!(d.contains("CONFIG_USER_NS"), "{d}");
    }
}
