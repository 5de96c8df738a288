//! Thin wrappers over the few syscalls rustix does not cover (or covers
//! only in forms unsuited to a forked child). Each returns a raw errno.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `MOUNT_ATTR_RDONLY` (linux/mount.h).
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
/// `MOUNT_ATTR_NOSUID`.
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
/// `MOUNT_ATTR_NODEV`.
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
/// `MOUNT_ATTR_NOEXEC`.
pub(crate) const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;

/// `struct mount_attr` (`MOUNT_ATTR_SIZE_VER0`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MountAttr {
    pub(crate) attr_set: u64,
    pub(crate) attr_clr: u64,
    pub(crate) propagation: u64,
    pub(crate) userns_fd: u64,
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL)
}

/// `mount_setattr(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW [| AT_RECURSIVE], {set})`:
/// set flags on the mount at `path` (and every mount below it when
/// `recursive`), leaving every other flag as it is.
pub(crate) fn mount_setattr(path: &CStr, recursive: bool, set: u64) -> Result<(), i32> {
    mount_setattr_at(libc::AT_FDCWD, path, libc::AT_SYMLINK_NOFOLLOW as libc::c_uint, recursive, set)
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH [| AT_RECURSIVE], {set})`: the same
/// on the mount (for example a detached clone) that `fd` refers to.
pub(crate) fn mount_setattr_fd(fd: BorrowedFd<'_>, recursive: bool, set: u64) -> Result<(), i32> {
    mount_setattr_at(fd.as_raw_fd(), c"", libc::AT_EMPTY_PATH as libc::c_uint, recursive, set)
}

fn mount_setattr_at(
    dirfd: libc::c_int,
    path: &CStr,
    mut flags: libc::c_uint,
    recursive: bool,
    set: u64,
) -> Result<(), i32> {
    let attr = MountAttr { attr_set: set, ..MountAttr::default() };
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `path` is a valid NUL-terminated string and `attr` a live,
    // correctly sized `struct mount_attr`; the kernel copies both in and
    // keeps no pointer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// `PIDFD_GET_USER_NAMESPACE` and its siblings (linux/pidfd.h, Linux 6.11):
/// `_IO(0xFF, n)`, in the order a join hands the namespaces over (user,
/// mount, PID, network, IPC, UTS).
pub(crate) const PIDFD_GET_JOIN_NAMESPACES: [libc::c_ulong; 6] = [0xFF09, 0xFF03, 0xFF05, 0xFF04, 0xFF02, 0xFF0A];

/// `ioctl(pidfd, request)` for a `PIDFD_GET_*_NAMESPACE` request: a
/// descriptor of that namespace of the process `pidfd` refers to (for
/// PID, the namespace it lives in, as `/proc/<pid>/ns/pid` gives). Unlike
/// opening `/proc/self/ns/<kind>`, no path walk and no procfs inode, which
/// a freshly forked process makes for every name it opens there.
pub(crate) fn pidfd_namespace(pidfd: BorrowedFd<'_>, request: libc::c_ulong) -> Result<OwnedFd, i32> {
    // SAFETY: these requests take no argument and return a new descriptor
    // or -1; nothing is read from or written to this process's memory.
    let ret = unsafe { libc::ioctl(pidfd.as_raw_fd(), request as _, 0) };
    if ret < 0 {
        return Err(last_errno());
    }
    // SAFETY: on success the ioctl returned a descriptor that is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(ret) })
}

/// Installs one seccomp filter given as its `sock_filter` array's bytes
/// (native endianness, 8 bytes per instruction), with `PR_SET_SECCOMP`.
pub(crate) fn install_seccomp(filter: &[u8]) -> Result<(), i32> {
    const SOCK_FILTER_BYTES: usize = 8;
    if filter.is_empty() || !filter.len().is_multiple_of(SOCK_FILTER_BYTES) {
        return Err(libc::EINVAL);
    }
    let len = u16::try_from(filter.len() / SOCK_FILTER_BYTES).map_err(|_| libc::EINVAL)?;
    let prog = libc::sock_fprog { len, filter: filter.as_ptr() as *mut libc::sock_filter };
    // SAFETY: `prog` points at `len` whole sock_filter records that live
    // for the call; the kernel copies them (copy_from_user takes any
    // alignment) and keeps no pointer. The other arguments are integers.
    let ret = unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) };
    if ret == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Bring the network namespace's `lo` up (`SIOCGIFFLAGS`, then
/// `SIOCSIFFLAGS` with `IFF_UP`), through any socket of that namespace.
/// Needs `CAP_NET_ADMIN` over the namespace.
pub(crate) fn loopback_up(socket: BorrowedFd<'_>) -> Result<(), i32> {
    // SAFETY: `ifreq` is plain old data (a name array and a union of
    // integers and plain structs); all zeroes is a valid value of it.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: the kernel reads the name and writes the flags of a live,
    // correctly sized `ifreq`, and keeps no pointer to it.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut request as *mut libc::ifreq) } != 0 {
        return Err(last_errno());
    }
    // SAFETY: SIOCGIFFLAGS filled the union's `ifru_flags` member.
    let flags = unsafe { request.ifr_ifru.ifru_flags };
    request.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: as above; the kernel reads the name and the flags.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS as _, &request as *const libc::ifreq) } != 0 {
        return Err(last_errno());
    }
    Ok(())
}

/// Drop every capability of the calling thread: the bounding set, the
/// ambient set, and the effective, permitted and inheritable sets.
pub(crate) fn drop_capabilities() -> Result<(), i32> {
    // Capability numbers past the kernel's last one fail with EINVAL.
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes integers only.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if ret != 0 {
            let errno = last_errno();
            if errno != libc::EINVAL {
                return Err(errno);
            }
        }
    }
    drop_held_capabilities()
}

/// Drop the capabilities the calling thread holds: the ambient, effective,
/// permitted and inheritable sets, two credential commits. Not the
/// bounding set, which only bounds what an `execve` grants: for a process
/// that never execs (a shell's init), dropping it would be 41 more
/// commits per shell, each new credentials and an RCU free, for nothing.
pub(crate) fn drop_held_capabilities() -> Result<(), i32> {
    rustix::thread::clear_ambient_capability_set().map_err(|e| e.raw_os_error())?;
    let none = rustix::thread::CapabilitySets {
        effective: rustix::thread::CapabilitySet::empty(),
        permitted: rustix::thread::CapabilitySet::empty(),
        inheritable: rustix::thread::CapabilitySet::empty(),
    };
    rustix::thread::set_capabilities(None, none).map_err(|e| e.raw_os_error())
}

/// Reset every catchable signal to `SIG_DFL` and unblock all signals.
///
/// Errors are ignored: glibc refuses its two internal signals, and a signal
/// that cannot be reset cannot carry a host handler either.
pub(crate) fn reset_signal_dispositions() {
    for signal in 1..=libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL has no memory-safety requirements.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
    // SAFETY: `set` is a live sigset_t initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// `fork()`. Returns the child's pid in the parent and 0 in the child.
///
/// # Safety
///
/// Either the calling process is single-threaded (a forked child), so the
/// new child is a consistent copy, or the child makes only
/// async-signal-safe calls (raw syscalls, no allocation, no lock) before it
/// execs or `_exit`s, as after a fork of a multi-threaded host.
pub(crate) unsafe fn fork() -> Result<libc::pid_t, i32> {
    // SAFETY: the caller upholds one of the two conditions above.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        Err(last_errno())
    } else {
        Ok(pid)
    }
}

/// A stack for a child that shares this address space ([`clone_vm`]): a
/// private anonymous mapping of `bytes` with a guard page below it. It is
/// never unmapped: it goes with the address space. Returns the mapping's
/// lowest usable address (above the guard page) and its top.
pub(crate) fn child_stack(bytes: usize) -> Result<(*mut u8, *mut u8), i32> {
    let page = rustix::param::page_size();
    let len = bytes.div_ceil(page) * page + page;
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses;
    // no Rust reference names it yet.
    let base = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::STACK | rustix::mm::MapFlags::NORESERVE,
        )
    }
    .map_err(|e| e.raw_os_error())?;
    // SAFETY: the first page of the mapping just made, which nothing uses.
    unsafe { rustix::mm::mprotect(base, page, rustix::mm::MprotectFlags::empty()) }.map_err(|e| e.raw_os_error())?;
    let base = base.cast::<u8>();
    // SAFETY: both offsets stay within the mapping of `len` bytes.
    Ok(unsafe { (base.add(page), base.add(len)) })
}

/// `clone(CLONE_VM | SIGCHLD)`: a child process (its own pid, file table,
/// signal handlers and credentials, an ordinary child to `waitpid`) that
/// shares this process's memory and runs `entry(arg)` on `stack_top`. One
/// address space is set up and torn down instead of two. Returns the
/// child's pid.
///
/// # Safety
///
/// `stack_top` is the top of a stack nothing else uses ([`child_stack`]),
/// `arg` is what `entry` expects and stays valid while the child needs it,
/// and `entry` never returns. The two processes share the C library's
/// thread state (its `errno`, its allocator's thread cache): while both
/// run, at most one of them may allocate, and neither may read `errno`
/// after a call the other could be failing at the same time (use rustix,
/// which never touches `errno`).
pub(crate) unsafe fn clone_vm(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack_top: *mut u8,
    arg: *mut libc::c_void,
) -> Result<libc::pid_t, i32> {
    // SAFETY: the caller upholds the contract above; the C library's
    // wrapper switches the child to `stack_top` before it calls `entry`.
    let pid = unsafe { libc::clone(entry, stack_top.cast(), libc::CLONE_VM | libc::SIGCHLD, arg) };
    if pid < 0 {
        Err(last_errno())
    } else {
        Ok(pid)
    }
}
/// Writes `data` in one `write` to `<dir>/<name>`: a `/proc/<pid>` map file
/// (`uid_map`, `gid_map`, `setgroups`), which the kernel takes in one write
/// only. A short write is `EIO`.
pub(crate) fn write_map(dir: BorrowedFd<'_>, name: &CStr, data: &[u8]) -> Result<(), i32> {
    let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC;
    let file = rustix::fs::openat(dir, name, flags, rustix::fs::Mode::empty()).map_err(|e| e.raw_os_error())?;
    match rustix::io::write(&file, data) {
        Ok(written) if written == data.len() => Ok(()),
        Ok(_) => Err(libc::EIO),
        Err(e) => Err(e.raw_os_error()),
    }
}

/// A kind of SysV object, as [`remove_sysv_objects`] walks it.
#[derive(Debug, Clone, Copy)]
enum Sysv {
    Shm,
    Sem,
    Msg,
}

/// Big enough for what any `*ctl` below writes: `shmid64_ds`, 112 bytes on
/// x86_64 and aarch64, the largest.
type CtlBuffer = [u64; 32];

impl Sysv {
    /// Its `*_INFO` and `*_STAT_ANY` commands (linux/shm.h, sem.h, msg.h),
    /// and which `int` of the `*_INFO` record counts the objects in use
    /// (`shm_info.used_ids`, `seminfo.semusz`, `msginfo.msgpool`).
    fn commands(self) -> (libc::c_int, libc::c_int, usize) {
        match self {
            Sysv::Shm => (14, 15, 0),
            Sysv::Sem => (19, 20, 7),
            Sysv::Msg => (12, 13, 0),
        }
    }

    /// `shmctl`/`semctl`/`msgctl` as raw syscalls: the C library's wrappers
    /// before glibc 2.28 drop the buffer of a command they do not know,
    /// `*_STAT_ANY` among them.
    fn ctl(self, id: libc::c_int, cmd: libc::c_int, buf: Option<&mut CtlBuffer>) -> Result<libc::c_int, i32> {
        let buf = buf.map_or(std::ptr::null_mut(), |b| b.as_mut_ptr());
        // SAFETY: each call writes at most one of the records the command
        // names, all smaller than `CtlBuffer`, or nothing (IPC_RMID, null).
        let ret = unsafe {
            match self {
                Sysv::Shm => libc::syscall(libc::SYS_shmctl, id, cmd, buf),
                Sysv::Sem => libc::syscall(libc::SYS_semctl, id, 0, cmd, buf),
                Sysv::Msg => libc::syscall(libc::SYS_msgctl, id, cmd, buf),
            }
        };
        if ret < 0 {
            return Err(last_errno());
        }
        Ok(ret as libc::c_int)
    }

    /// The highest index in use (0 when none is) and how many objects are.
    fn in_use(self) -> Result<(libc::c_int, libc::c_int), i32> {
        let (info, _, count) = self.commands();
        let mut buf: CtlBuffer = [0; 32];
        let max = self.ctl(0, info, Some(&mut buf))?;
        let ints = buf.as_ptr().cast::<libc::c_int>();
        // SAFETY: `count` (0 or 7) is inside the 64 ints of `buf`, which
        // is aligned for them.
        Ok((max, unsafe { *ints.add(count) }))
    }
}

/// Removes every SysV object of the caller's IPC namespace: shared-memory
/// segments, semaphore arrays and message queues (runs get no message
/// queues; a sweep costs one call). The caller needs `CAP_SYS_ADMIN` over
/// the namespace's owner (`IPC_RMID` of another user's object). An object
/// removed meanwhile is no error. `Ok(false)`: a segment is left, still
/// attached somewhere (removed, it ends at its last detach; until then a
/// process of the namespace may still attach it by its id).
pub(crate) fn remove_sysv_objects() -> Result<bool, i32> {
    let mut clean = true;
    for kind in [Sysv::Shm, Sysv::Sem, Sysv::Msg] {
        let (max, used) = kind.in_use()?;
        if used == 0 {
            continue;
        }
        let (_, stat_any, _) = kind.commands();
        for index in 0..=max {
            let mut buf: CtlBuffer = [0; 32];
            // By index, not id: the id of the object there.
            let id = match kind.ctl(index, stat_any, Some(&mut buf)) {
                Ok(id) => id,
                Err(libc::EINVAL) => continue, // no object at this index
                Err(errno) => return Err(errno),
            };
            match kind.ctl(id, libc::IPC_RMID, None) {
                Ok(_) | Err(libc::EINVAL) | Err(libc::EIDRM) => {}
                Err(errno) => return Err(errno),
            }
        }
        clean &= kind.in_use()?.1 == 0;
    }
    Ok(clean)
}

/// `poll` one fd for readability without blocking.
pub(crate) fn poll_readable(fd: libc::c_int) -> Result<bool, i32> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: `pfd` is one live pollfd and the count is 1.
        let ret = unsafe { libc::poll(&mut pfd, 1, 0) };
        if ret >= 0 {
            return Ok(ret > 0 && pfd.revents != 0);
        }
        let errno = last_errno();
        if errno != libc::EINTR {
            return Err(errno);
        }
    }
}

/// Set `FD_CLOEXEC` on every descriptor numbered `first` or above, so only
/// the ones below survive `exec`.
pub(crate) fn cloexec_from(first: u32) -> Result<(), i32> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on
    // descriptors; nothing is closed and no memory is passed.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    // No fallback: every kernel with the Landlock ABI the sandbox requires
    // (6.2+) has CLOSE_RANGE_CLOEXEC (5.11+), and a loop up to the soft
    // limit could miss a descriptor above it. Failing closed is the point.
    if ret == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Ignore `SIGTERM` in the calling process. For the process that waits for
/// the program and exits the way it did: the host stops a run by SIGTERM to
/// its whole group once the program closed fd 3, and the program's own
/// death closes fd 3 an instant before this process can mirror it. Dying of
/// that SIGTERM would report the host's signal instead of the program's
/// end. The program gets the same SIGTERM; SIGKILL still ends this process.
pub(crate) fn ignore_sigterm() {
    // SAFETY: sets one signal's disposition of this process to SIG_IGN;
    // no handler code and no memory are involved.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
}

/// Close every file descriptor of the calling process except `keep`.
fn close_all_fds_but(keep: libc::c_int) {
    // close_range exists on every kernel the sandbox accepts (see
    // `cloexec_from`); the caller holds nothing else the program could use.
    // SAFETY: close_range only closes descriptors; the caller owns all of
    // them and uses none but `keep` afterwards.
    unsafe {
        if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
    }
}

/// Wait for `pid` (retrying on EINTR). `None` if it is not our child.
/// Through rustix, which never touches `errno`: a shell's init may share
/// this process's memory, `errno` included ([`clone_vm`]).
fn wait_for(pid: libc::pid_t) -> Option<libc::c_int> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => return Some(status.as_raw()),
            Err(rustix::io::Errno::INTR) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Leave the way `status` (a wait status) says: `_exit` with its code, or
/// die of its signal with the default disposition.
fn exit_like(status: libc::c_int) -> ! {
    if libc::WIFEXITED(status) {
        // SAFETY: _exit is always safe to call; it does not return.
        unsafe { libc::_exit(libc::WEXITSTATUS(status)) };
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // No core file: this process is a fork of the host, so the dump of
        // a program's SIGSEGV, SIGABRT or SIGXCPU re-raised here would be
        // the host's whole address space.
        let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: setting a resource limit and the dumpable flag of this
        // process, resetting one disposition, unblocking it and signalling
        // ourselves; none touches memory we do not own (`no_core` is a live
        // local read by setrlimit).
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
        // Only reached if the signal did not terminate us.
        // SAFETY: as above.
        unsafe { libc::_exit(128 + signal) };
    }
    // SAFETY: as above.
    unsafe { libc::_exit(crate::limits::SUPERVISOR_LOST_EXIT) }
}

/// The supervisor's life after the fork: close every fd but the status
/// pipe, wait for the init process, and exit the way the program did (the
/// init process reports the program's wait status on `status_read`; it
/// cannot die of a signal sent to itself, being PID 1). Never returns.
///
/// # Safety
///
/// `init` must be a child of the calling process, and the calling process
/// must own every fd it holds (it closes them all).
pub(crate) unsafe fn supervise(init: libc::pid_t, status_read: libc::c_int) -> ! {
    close_all_fds_but(status_read);
    let Some(init_status) = wait_for(init) else {
        // SAFETY: _exit is always safe to call.
        unsafe { libc::_exit(crate::limits::SUPERVISOR_LOST_EXIT) }
    };
    let mut bytes = [0u8; 4];
    // Every writer is gone (the init process exited, the program exec'd or
    // died), so this read returns at once.
    // SAFETY: reading into a live local buffer of the given length.
    let n = unsafe { libc::read(status_read, bytes.as_mut_ptr().cast(), bytes.len()) };
    if n == 4 {
        exit_like(libc::c_int::from_ne_bytes(bytes))
    }
    exit_like(init_status)
}

/// The init process's life after it forked the program: close every fd but
/// the status pipe, drop every capability, reap every child (orphans are
/// reparented here), and when the program exits, report its wait status
/// and exit. The kernel then kills whatever is left of the PID namespace.
///
/// # Safety
///
/// `program` must be a child of the calling process, which must be
/// single-threaded and own every fd it holds.
pub(crate) unsafe fn reap_as_init(program: libc::pid_t, status_write: libc::c_int) -> ! {
    close_all_fds_but(status_write);
    // Nothing is left to do with privileges; failing to drop them changes
    // nothing the program can reach (it cannot signal, trace or read us).
    // This process never execs: its bounding set bounds nothing.
    let _ = drop_held_capabilities();
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a live c_int the kernel writes to.
        let ret = unsafe { libc::waitpid(-1, &mut status, 0) };
        if ret == program {
            let bytes = status.to_ne_bytes();
            // SAFETY: writing a live local buffer of the given length.
            unsafe { libc::write(status_write, bytes.as_ptr().cast(), bytes.len()) };
            // SAFETY: _exit is always safe to call.
            unsafe { libc::_exit(0) };
        }
        if ret < 0 && last_errno() != libc::EINTR {
            // SAFETY: as above.
            unsafe { libc::_exit(crate::limits::SUPERVISOR_LOST_EXIT) };
        }
    }
}

/// A shell's init process after its handoff: close every fd, drop every
/// capability, and reap whatever the PID namespace leaves it (the
/// program's orphans; the program itself is the zygote's child and is
/// reaped there) until the host kills the
/// supervisor, whose death signal then takes this process and the whole
/// namespace with it. Never returns.
///
/// # Safety
///
/// The calling process must be single-threaded and own every fd it holds.
pub(crate) unsafe fn reap_forever() -> ! {
    // SAFETY: close_range only closes descriptors; this process uses none
    // of them from now on.
    unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) };
    // This process never execs: its bounding set bounds nothing.
    let _ = drop_held_capabilities();
    // Through rustix, which never touches `errno`: this process may share
    // its supervisor's memory, `errno` included ([`clone_vm`]).
    loop {
        if let Err(rustix::io::Errno::CHILD) = rustix::process::wait(rustix::process::WaitOptions::empty()) {
            // No child yet (or any more): a joined process or an orphan may
            // be reparented here later; look again in a while.
            let pause = rustix::thread::Timespec { tv_sec: 0, tv_nsec: 100_000_000 };
            let _ = rustix::thread::nanosleep(&pause);
        }
    }
}
/// Make sure descriptors 0 to 3 are open in this process (each free one
/// gets `/dev/null`, close-on-exec, kept open for good).
///
/// Between fork and exec, the child's stdio and the protocol socket are
/// installed with `dup2` onto 0-3: a descriptor the sandbox (or the spawn
/// code) made earlier and that the kernel numbered 0-3, because the host
/// had one of them closed (a Python host without fd 3, a daemon without
/// stdin), would be silently replaced there. Filling the holes first makes
/// every later descriptor land above 3.
pub fn occupy_low_fds() {
    for fd in 0..crate::limits::INHERITED_FDS as i32 {
        // SAFETY: F_GETFD only reads the descriptor's flags.
        let free = unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0;
        if !free {
            continue;
        }
        match rustix::fs::open(
            c"/dev/null",
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) {
            // The lowest free number is `fd`: keep it occupied for good.
            Ok(placeholder) if std::os::fd::AsRawFd::as_raw_fd(&placeholder) == fd => {
                std::mem::forget(placeholder);
            }
            // Another thread took the slot meanwhile: it is occupied anyway.
            Ok(_) | Err(_) => {}
        }
    }
}
/// Runs `f` with this thread's file-system ids set to `uid` and `gid`
/// (`setfsuid`/`setfsgid`, which act on the calling thread only), then
/// restores them. For a root host writing into a run's tmpfs: files made
/// there must be owned by an id the run's user namespace maps (the run's
/// own), or the kernel refuses them (`EOVERFLOW`). The change of ids
/// clears the thread's file-system capabilities; `CAP_DAC_OVERRIDE` and
/// `CAP_DAC_READ_SEARCH` are raised again for `f`, so that it still reads
/// what root may (an MCP client's input files, kept 0700). `None` when the
/// ids could not be set (not root): `f` did not run.
pub fn as_fs_ids<R>(uid: u32, gid: u32, f: impl FnOnce() -> R) -> Option<R> {
    use rustix::thread::{capabilities, set_capabilities, CapabilitySet};
    let set = |nr: libc::c_long, id: u32| {
        // SAFETY: setfsuid/setfsgid take an integer and change only the
        // calling thread's file-system ids; no memory is passed.
        unsafe { libc::syscall(nr, id as libc::c_long) as u32 }
    };
    let read = |nr: libc::c_long| {
        // SAFETY: as above; -1 (an invalid id) changes nothing and returns
        // the current id.
        unsafe { libc::syscall(nr, -1 as libc::c_long) as u32 }
    };
    let saved = capabilities(None).ok()?;
    let (old_uid, old_gid) = (read(libc::SYS_setfsuid), read(libc::SYS_setfsgid));
    set(libc::SYS_setfsgid, gid);
    set(libc::SYS_setfsuid, uid);
    let mut out = None;
    if read(libc::SYS_setfsuid) == uid && read(libc::SYS_setfsgid) == gid {
        let wanted = (CapabilitySet::DAC_OVERRIDE | CapabilitySet::DAC_READ_SEARCH) & saved.permitted;
        let mut raised = saved;
        raised.effective |= wanted;
        if set_capabilities(None, raised).is_ok() {
            out = Some(f());
        }
    }
    set(libc::SYS_setfsuid, old_uid);
    set(libc::SYS_setfsgid, old_gid);
    let _ = set_capabilities(None, saved);
    out
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// In an IPC namespace of its own (`shm_rmid_forced` 0, as a new one
    /// has it: segments stay), a child leaves segments (one attached, one
    /// keyed), semaphore arrays and a message queue, with a gap in the
    /// indexes; every one of them goes.
    #[test]
    fn every_sysv_object_of_the_namespace_is_removed() {
        // SAFETY: the child makes only syscalls (no allocation: the test
        // process has other threads) and ends with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: plain syscalls in the forked child; `_exit` ends it.
            unsafe {
                let step = |ok: bool, code: i32| {
                    if !ok {
                        libc::_exit(code)
                    }
                };
                step(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWIPC) == 0, 10);
                let attached = libc::shmget(libc::IPC_PRIVATE, 4096, 0o600);
                step(attached >= 0, 11);
                let address = libc::shmat(attached, std::ptr::null(), 0);
                step(address as isize != -1, 12);
                let gone = libc::shmget(libc::IPC_PRIVATE, 4096, 0o600);
                step(libc::shmget(0x5059, 8192, libc::IPC_CREAT) >= 0, 13); // mode 0: no one may read it
                step(libc::shmctl(gone, libc::IPC_RMID, std::ptr::null_mut()) == 0, 14);
                step(libc::semget(libc::IPC_PRIVATE, 2, 0o600) >= 0, 15);
                step(libc::semget(0x5059, 1, libc::IPC_CREAT) >= 0, 16);
                step(libc::msgget(libc::IPC_PRIVATE, 0o600) >= 0, 17);
                let counts = || [Sysv::Shm, Sysv::Sem, Sysv::Msg].map(|k| k.in_use().map_or(-1, |(_, n)| n));
                step(counts() == [2, 2, 1], 18);
                // The attached segment waits for its detach, marked: not
                // clean yet.
                step(remove_sysv_objects() == Ok(false), 19);
                let [shm, sem, msg] = counts();
                step(shm == 1, 20);
                step(sem == 0, 25);
                step(msg == 0, 26);
                let mut buf: CtlBuffer = [0; 32];
                step(Sysv::Shm.ctl(0, 15, Some(&mut buf)).is_ok_and(|id| id == attached), 21);
                step(libc::shmdt(address) == 0, 22);
                step(counts() == [0, 0, 0], 23);
                step(remove_sysv_objects() == Ok(true), 24);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "the step that failed");
    }

    #[test]
    fn a_pidfd_names_the_same_namespaces_as_proc() {
        let own = rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty())
            .expect("pidfd_open on this process");
        let names = ["user", "mnt", "pid", "net", "ipc", "uts"];
        for (name, request) in names.into_iter().zip(PIDFD_GET_JOIN_NAMESPACES) {
            let fd = match pidfd_namespace(own.as_fd(), request) {
                Ok(fd) => fd,
                // Before Linux 6.11 the join falls back to `/proc`.
                Err(libc::ENOTTY | libc::EINVAL) => {
                    assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "no PIDFD_GET_*_NAMESPACE here");
                    return;
                }
                Err(errno) => panic!("PIDFD_GET_*_NAMESPACE for {name}: errno {errno}"),
            };
            let got = std::fs::File::from(fd).metadata().expect("fstat");
            let want = std::fs::metadata(format!("/proc/self/ns/{name}")).expect("stat /proc/self/ns");
            assert_eq!((got.dev(), got.ino()), (want.dev(), want.ino()), "{name}");
        }
    }
}
