//! What a process forked by pycage does to itself before it runs
//! anything else (its fd 3, close-on-exec of everything above it, a death
//! signal checked against the parent it was forked from), what a process
//! started that way does with its fd 3, and the fork of a sandbox shell.
//! The runtime's spawn paths and the shell helper both use these; every
//! function that runs in a forked child is async-signal-safe.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::process::Pid;

use crate::error::SandboxError;
use crate::prepared::Prepared;

/// Makes `fd` the child's fd 3, inheritable across exec.
pub fn install_fd3(fd: i32) -> io::Result<()> {
    let target = pycage_protocol::PROTOCOL_FD;
    if fd == target {
        // dup2 onto itself keeps FD_CLOEXEC: clear it instead.
        // SAFETY: fcntl on an fd we own in this (forked) process; async-signal-safe.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(());
    }
    // SAFETY: dup2 is async-signal-safe; both fds are valid in the child, and
    // the new fd 3 is created without FD_CLOEXEC.
    if unsafe { libc::dup2(fd, target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Marks every descriptor above fd 3 close-on-exec, so nothing the host
/// holds without `O_CLOEXEC` (cargo's jobserver pipes, a C library's files)
/// reaches the child. Async-signal-safe; no allocation.
pub fn cloexec_above_fd3() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let first = pycage_protocol::PROTOCOL_FD as libc::c_uint + 1;
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on
    // descriptors; nothing is closed and no memory is passed.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) };
    if ret == 0 {
        return;
    }
    // Kernels before 5.11: one fcntl per descriptor up to the soft limit
    // (capped: a huge limit would make every spawn slow).
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(65_536).min(65_536);
    for fd in first..limit as libc::c_uint {
        // SAFETY: fcntl on a descriptor number that may or may not be open;
        // EBADF is harmless, and setting FD_CLOEXEC changes nothing else.
        unsafe { libc::fcntl(fd as libc::c_int, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// `PR_SET_PDEATHSIG(SIGKILL)`, then checks the parent did not die before
/// the call took effect (the signal would never come).
pub fn die_with_parent(parent: Pid) -> io::Result<()> {
    // SAFETY: prctl with integer arguments is async-signal-safe.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if rustix::process::getppid() != Some(parent) {
        // SAFETY: _exit is async-signal-safe and ends this forked child.
        unsafe { libc::_exit(127) };
    }
    Ok(())
}

/// fd 3, owned by the caller from now on, if it is open: the channel a
/// process started by the host (`install_fd3`) serves on.
pub fn take_fd3() -> Option<OwnedFd> {
    let raw = pycage_protocol::PROTOCOL_FD;
    // SAFETY: borrowed only for `F_GETFD`, which fails cleanly (EBADF) if
    // fd 3 is not open.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
    rustix::io::fcntl_getfd(borrowed).ok()?;
    // SAFETY: fd 3 is open (checked above) and was installed for this
    // process by its starter; nothing else in it owns or closes fd 3.
    Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) })
}

/// Restores SIGCHLD's default disposition in this process: with it
/// ignored (inherited through exec from a host that ignores it), the kernel
/// reaps children by itself, and `wait` finds nothing to report.
pub fn default_sigchld() {
    // SAFETY: `signal` with SIG_DFL installs no handler and touches no
    // memory of this process.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
}

/// In the shell helper: forks a sandbox shell through `prepared`
/// ([`Prepared::enter`]; nothing is exec'd, see [`Prepared::into_shell`]),
/// in its own process group, dying with the helper. `/dev/null` is its fd
/// 0-3 (fd 3 is the helper's socket to the host); the helper's descriptors
/// above 3 are closed by the shell's own steps after its handoff, before
/// any program exists. Returns once the shell has handed its run over; the
/// pid is the caller's child.
pub fn fork_shell(prepared: &Arc<Prepared>) -> Result<i32, SandboxError> {
    let null = std::fs::File::open("/dev/null").map_err(SandboxError::Spawn)?;
    let parent = rustix::process::getpid();
    // The child's errno if its steps fail, else EOF once the shell has
    // closed its copy (it closes every descriptor after its handoffs).
    let (report_read, report_write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| SandboxError::Spawn(e.into()))?;
    // A fork of our own, not `std::process::Command`'s: that opened
    // `/dev/null` three times, built and freed an argument and environment
    // array no exec would read, and its allocations dirtied heap pages the
    // shells still share (each a copy-on-write fault in this process).
    // SAFETY: the child makes only async-signal-safe calls before it ends
    // (`Prepared::enter` is written for that child), so the fork is safe in
    // a multi-threaded caller too.
    match unsafe { crate::sys::fork() } {
        Err(errno) => Err(SandboxError::Spawn(io::Error::from_raw_os_error(errno))),
        Ok(0) => {
            drop(report_read);
            let entered = shell_child(null.as_raw_fd(), parent, prepared, report_write.as_fd());
            let errno = entered.err().and_then(|e| e.raw_os_error()).unwrap_or(libc::EINVAL);
            let _ = rustix::io::write(&report_write, &errno.to_le_bytes());
            // SAFETY: ends this forked child without running the parent's
            // exit handlers or destructors.
            unsafe { libc::_exit(127) }
        }
        Ok(pid) => {
            drop(report_write);
            drop(null);
            match read_report(&report_read) {
                None => Ok(pid),
                Some(errno) => {
                    // The child `_exit`s right after its report: reap it.
                    while let Err(rustix::io::Errno::INTR) = rustix::process::waitpid(
                        rustix::process::Pid::from_raw(pid),
                        rustix::process::WaitOptions::empty(),
                    ) {}
                    Err(prepared.explain_spawn_error(io::Error::from_raw_os_error(errno)))
                }
            }
        }
    }
}

/// In the shell's forked child: its own process group, `/dev/null` as fd
/// 0-3, nothing above fd 3 inherited across an exec, death with the
/// helper, then the shell's steps. Returns only on failure (or in the
/// program's process of an exec'd run, which a shell never has).
fn shell_child(null_fd: i32, parent: Pid, prepared: &Prepared, report: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setpgid and dup2 on descriptors this child holds are
    // async-signal-safe.
    if unsafe { libc::setpgid(0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    for target in 0..=2 {
        // SAFETY: as above.
        if unsafe { libc::dup2(null_fd, target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    install_fd3(null_fd)?;
    cloexec_above_fd3();
    die_with_parent(parent)?;
    // SAFETY: a forked child before any exec, which is what `enter` needs.
    unsafe { prepared.enter_shell(report) }?;
    // `enter` does not return in shell mode but on failure.
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// What the shell's child reported: `None` at EOF (its steps went on and
/// closed the pipe), else the errno it failed with.
fn read_report(report: &OwnedFd) -> Option<i32> {
    let mut bytes = [0u8; 4];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::io::read(report, bytes.get_mut(filled..).unwrap_or_default()) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(errno) => return Some(errno.raw_os_error()),
        }
    }
    match filled {
        0 => None,
        4 => Some(i32::from_le_bytes(bytes)),
        _ => Some(libc::EIO),
    }
}
