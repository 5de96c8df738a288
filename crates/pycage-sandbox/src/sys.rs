//! Thin wrappers over the few syscalls rustix does not cover (or covers
//! only in forms unsuited to a forked child). Each returns a raw errno.

use std::ffi::CStr;

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
    let attr = MountAttr { attr_set: set, ..MountAttr::default() };
    let mut flags = libc::AT_SYMLINK_NOFOLLOW as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `path` is a valid NUL-terminated string and `attr` a live,
    // correctly sized `struct mount_attr`; the kernel copies both in and
    // keeps no pointer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
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
/// The calling process must be single-threaded (a forked child), so the new
/// child is a consistent copy.
pub(crate) unsafe fn fork() -> Result<libc::pid_t, i32> {
    // SAFETY: the caller guarantees a single-threaded process.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        Err(last_errno())
    } else {
        Ok(pid)
    }
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

/// Close every file descriptor of the calling process.
fn close_all_fds() {
    // close_range exists on every kernel the sandbox accepts (see
    // `cloexec_from`); the supervisor holds nothing the program could use.
    // SAFETY: close_range only closes descriptors; the caller owns all of
    // them and uses none afterwards.
    unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) };
}

/// The supervisor's life after the fork: close every fd, wait for the
/// interpreter, exit the way it did. Never returns.
///
/// # Safety
///
/// `interpreter` must be a child of the calling process, and the calling
/// process must own every fd it holds (it closes them all).
pub(crate) unsafe fn supervise(interpreter: libc::pid_t) -> ! {
    close_all_fds();
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a live c_int the kernel writes to.
        let ret = unsafe { libc::waitpid(interpreter, &mut status, 0) };
        if ret == interpreter {
            break;
        }
        if ret < 0 && last_errno() == libc::EINTR {
            continue;
        }
        // SAFETY: _exit is always safe to call; it does not return.
        unsafe { libc::_exit(crate::prepared::SUPERVISOR_LOST_EXIT) };
    }
    if libc::WIFEXITED(status) {
        // SAFETY: as above.
        unsafe { libc::_exit(libc::WEXITSTATUS(status)) };
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: resetting one disposition, unblocking it and signalling
        // ourselves; none touches memory we do not own.
        unsafe {
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
    unsafe { libc::_exit(crate::prepared::SUPERVISOR_LOST_EXIT) }
}
