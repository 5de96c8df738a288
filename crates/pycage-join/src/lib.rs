//! The native part of a sandboxed zygote child: its join of the run's
//! sandbox shell and its confinement, as one call of a shared library.
//!
//! A sandboxed run forked from a zygote joins the namespaces and root the
//! host built, then applies the host's ordered confinement list
//! (`python/pycage/confine.py` says what each step is). Done in Python,
//! that join cost 0.6-1.2 ms of CPU in every sandboxed child, most of it
//! the interpreter's (bytecode, `ctypes` conversions, the copy-on-write
//! faults of what they touch). This library takes the same steps in the
//! same order in one call: 0.3-0.37 ms, most of it the kernel's (the
//! seccomp install alone is about 0.1 ms). It is ours because the caller
//! is a forked CPython, which can load a C-callable library but not link
//! a crate; no crate runs such a list.
//!
//! The zygote loads it once (Python's `ctypes`), compiles the join and the
//! confinement list into a flat program of operations once per list, and
//! before each fork writes that spawn's descriptors and ids into the
//! program's slots ([`Op`], four 64-bit words each): the kernel's own numbers
//! (namespace types, resource and `prctl` numbers, descriptors) and the
//! addresses of buffers the zygote built (map lines, the seccomp program),
//! which the forked child inherits at the same addresses. The child calls
//! [`pycage_join_run`], which only executes the program: every decision
//! (what to join, which limits, which filter) was the host's, and the
//! policy lives in Rust (pycage-sandbox's `confine` module). An operation
//! this library does not know fails the call; the Python join is the
//! fallback where the library is missing.
//!
//! Raw `libc` calls, not `rustix`'s typed ones: the operations carry the
//! kernel's numbers as the host chose them, and a typed wrapper would only
//! map them back. Nothing here allocates, and nothing panics: the caller
//! is a forked child of a Python process, between fork and the run.

#![cfg_attr(not(test), no_std)]

use core::ffi::{c_char, c_int, c_long, c_void};

// The C library by name (a DT_NEEDED entry): without std nothing else
// asks for it, and the symbols below would resolve only because the
// loading process happens to have it.
#[cfg(not(test))]
#[link(name = "c")]
extern "C" {}

/// A panic (there is none to reach: every conversion is checked) ends the
/// child as a failed setup would, without unwinding into Python.
#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: _exit ends the process; no state of it is used after.
    unsafe { libc::_exit(127) }
}

/// The program format's version: the [`Op`] codes, [`OP_WORDS`] and
/// [`SLOT_SHIFT`]. `confine.py` compiles for one version
/// (`_NATIVE_ABI`) and refuses a library of another, so a mismatch of
/// the two joins in Python instead of running the wrong steps.
pub const ABI: u32 = 1;

/// [`ABI`], for the loader's check.
#[no_mangle]
pub extern "C" fn pycage_join_abi() -> u32 {
    ABI
}

/// Words per operation: its code and three arguments.
pub const OP_WORDS: usize = 4;

/// The operations, by code (word 0 of an operation; `confine.py`'s
/// `_NATIVE_*` constants mirror them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Op {
    /// `setns(a, b)`: descriptor `a`, namespace type `b`.
    Setns = 1,
    /// `setgroups(0, NULL)`, `setresgid(b, b, b)`, `setresuid(a, a, a)`.
    HostIds = 2,
    /// `fchdir(a)`, then `chroot(".")`.
    EnterRoot = 3,
    /// `close(a)`.
    Close = 4,
    /// `prctl(a, b, 0, 0, 0)`: an option with one small argument.
    Prctl = 5,
    /// Fails with `ESRCH` when descriptor `a` (a pidfd of the zygote)
    /// polls readable: the zygote died.
    ParentAlive = 6,
    /// Resource `a`'s soft and hard limits to `b`, never above its hard
    /// limit (which only root could raise).
    Limit = 7,
    /// `unshare(a)`.
    Unshare = 8,
    /// Opens the NUL-terminated path at address `a` write-only and writes
    /// the `c` bytes at address `b` in one `write` (a map file takes one).
    WriteFile = 9,
    /// Closes every descriptor from `a` up, except `b` (`u64::MAX`: none).
    CloseFrom = 10,
    /// Drops bounding-set capabilities `0..=a`; with `b` nonzero (the
    /// kernel's last capability unknown), an `EINVAL` is accepted. Then
    /// clears the ambient set and `capset`s every set empty.
    DropCaps = 11,
    /// `landlock_restrict_self(a, 0)`, then `close(a)`.
    Landlock = 12,
    /// `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, a)`: `a` is the
    /// address of a `sock_fprog`.
    Seccomp = 13,
}

impl Op {
    /// Every operation, in code order (code 1 first).
    const ALL: [Op; 13] = [
        Op::Setns,
        Op::HostIds,
        Op::EnterRoot,
        Op::Close,
        Op::Prctl,
        Op::ParentAlive,
        Op::Limit,
        Op::Unshare,
        Op::WriteFile,
        Op::CloseFrom,
        Op::DropCaps,
        Op::Landlock,
        Op::Seccomp,
    ];

    fn from_code(code: u64) -> Option<Op> {
        let index = usize::try_from(code.checked_sub(1)?).ok()?;
        Op::ALL.get(index).copied()
    }
}

/// Bit `SLOT_SHIFT + i` of an operation's code word says that its
/// argument `i` (0 to 2) is not the value itself but an index into the
/// call's `values`: a program is compiled once, and each spawn gives only
/// its own descriptors and ids.
pub const SLOT_SHIFT: u32 = 8;

/// Runs the program of `words` 64-bit words at `ops` (whole operations),
/// in order, stopping at the first that fails, with the `nvalues` words at
/// `values` for its slot arguments ([`SLOT_SHIFT`]). Returns -1 when every
/// operation succeeded, else the failing operation's index, with its
/// `errno` in `*errno_out` (`EINVAL` for an unknown operation or a slot
/// past `values`); -2 with `EINVAL` for a program that is not whole
/// operations, before anything ran.
///
/// # Safety
///
/// `ops` points at `words` readable words and `values` at `nvalues` (or is
/// null with none); `errno_out` at a writable `c_int`; the addresses in
/// [`Op::WriteFile`] and [`Op::Seccomp`] operations are valid for what
/// those operations read. The calling process is single-threaded (a
/// forked child): the credential calls change only the calling thread.
#[no_mangle]
pub unsafe extern "C" fn pycage_join_run(
    ops: *const u64,
    words: usize,
    values: *const u64,
    nvalues: usize,
    errno_out: *mut c_int,
) -> i64 {
    let malformed = ops.is_null() || (values.is_null() && nvalues > 0) || !words.is_multiple_of(OP_WORDS);
    if malformed || errno_out.is_null() {
        if !errno_out.is_null() {
            // SAFETY: the caller's writable c_int.
            unsafe { *errno_out = libc::EINVAL };
        }
        return -2;
    }
    // SAFETY: the caller's `words` readable words at `ops`.
    let program = unsafe { core::slice::from_raw_parts(ops, words) };
    let values = if nvalues == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's `nvalues` readable words at `values`.
        unsafe { core::slice::from_raw_parts(values, nvalues) }
    };
    match run(program, values) {
        Ok(()) => -1,
        Err((index, errno)) => {
            // SAFETY: the caller's writable c_int.
            unsafe { *errno_out = errno };
            i64::try_from(index).unwrap_or(i64::MAX)
        }
    }
}

/// Runs every operation of `program` in order: the first failure's
/// (index, errno).
fn run(program: &[u64], values: &[u64]) -> Result<(), (usize, c_int)> {
    for (index, op) in program.chunks_exact(OP_WORDS).enumerate() {
        let (code, slots) = (op[0] & ((1 << SLOT_SHIFT) - 1), op[0] >> SLOT_SHIFT);
        let arg = |i: usize| match slots >> i & 1 {
            0 => Ok(op[1 + i]),
            _ => usize::try_from(op[1 + i]).ok().and_then(|at| values.get(at).copied()).ok_or(libc::EINVAL),
        };
        let result = match (Op::from_code(code), slots >> 3) {
            (Some(op), 0) => arg(0).and_then(|a| {
                let (b, c) = (arg(1)?, arg(2)?);
                // SAFETY: the caller vouches for the addresses of its
                // program (`pycage_join_run`'s contract).
                unsafe { execute(op, a, b, c) }
            }),
            _ => Err(libc::EINVAL),
        };
        result.map_err(|errno| (index, errno))?;
    }
    Ok(())
}

fn errno() -> c_int {
    // SAFETY: glibc's thread-local errno, valid for the calling thread.
    unsafe { *libc::__errno_location() }
}

/// A libc return value: 0 or more is success, -1 failure with errno.
fn check(ret: c_long) -> Result<(), c_int> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// An argument that must be a descriptor.
fn fd(word: u64) -> Result<c_int, c_int> {
    c_int::try_from(word).map_err(|_| libc::EBADF)
}

/// One operation.
///
/// # Safety
///
/// For [`Op::WriteFile`], `a` is the address of a NUL-terminated path and
/// `b` of `c` readable bytes; for [`Op::Seccomp`], `a` is the address of a
/// `sock_fprog` whose filter is readable. The process is single-threaded.
unsafe fn execute(op: Op, a: u64, b: u64, c: u64) -> Result<(), c_int> {
    match op {
        Op::Setns => {
            let nstype = c_int::try_from(b).map_err(|_| libc::EINVAL)?;
            // SAFETY: setns takes a descriptor and a flag; nothing of this
            // process's memory.
            check(unsafe { libc::setns(fd(a)?, nstype) }.into())
        }
        Op::HostIds => {
            let uid = libc::uid_t::try_from(a).map_err(|_| libc::EINVAL)?;
            let gid = libc::gid_t::try_from(b).map_err(|_| libc::EINVAL)?;
            // SAFETY: an empty group list (a null pointer with size 0 is
            // what setgroups(2) takes for none), then integer ids.
            unsafe {
                check(libc::setgroups(0, core::ptr::null()).into())?;
                check(libc::setresgid(gid, gid, gid).into())?;
                check(libc::setresuid(uid, uid, uid).into())
            }
        }
        Op::EnterRoot => {
            // SAFETY: a descriptor, then a static NUL-terminated path.
            unsafe {
                check(libc::fchdir(fd(a)?).into())?;
                check(libc::chroot(c".".as_ptr()).into())
            }
        }
        // SAFETY: closes a descriptor the host handed to this child for
        // the join; nothing in this process uses it after.
        Op::Close => check(unsafe { libc::close(fd(a)?) }.into()),
        Op::Prctl => {
            let option = c_int::try_from(a).map_err(|_| libc::EINVAL)?;
            prctl(option, b)
        }
        Op::ParentAlive => {
            let mut poll = libc::pollfd { fd: fd(a)?, events: libc::POLLIN, revents: 0 };
            // SAFETY: one pollfd on this stack frame, timeout 0.
            let ready = unsafe { libc::poll(&mut poll, 1, 0) };
            match ready {
                0 => Ok(()),
                1.. => Err(libc::ESRCH),
                _ => Err(errno()),
            }
        }
        Op::Limit => limit(a, b),
        Op::Unshare => {
            let flags = c_int::try_from(a).map_err(|_| libc::EINVAL)?;
            // SAFETY: unshare takes flags only; the process is single-threaded.
            check(unsafe { libc::unshare(flags) }.into())
        }
        Op::WriteFile => {
            let len = usize::try_from(c).map_err(|_| libc::EINVAL)?;
            // SAFETY: the caller's NUL-terminated path at `a`.
            let file = unsafe { libc::open(a as usize as *const c_char, libc::O_WRONLY | libc::O_CLOEXEC) };
            check(file.into())?;
            // SAFETY: the caller's `len` readable bytes at `b`.
            let written = unsafe { libc::write(file, b as usize as *const c_void, len) };
            let result = match usize::try_from(written) {
                Ok(n) if n == len => Ok(()),
                Ok(_) => Err(libc::EIO),
                Err(_) => Err(errno()),
            };
            // SAFETY: the descriptor opened above, used by nothing else.
            unsafe { libc::close(file) };
            result
        }
        Op::CloseFrom => close_from(a, b),
        Op::DropCaps => drop_caps(a, b != 0),
        Op::Landlock => {
            let ruleset = fd(a)?;
            // SAFETY: landlock_restrict_self takes a descriptor and flags.
            check(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset as c_long, 0 as c_long) })?;
            // SAFETY: the ruleset descriptor, used up by the call above.
            check(unsafe { libc::close(ruleset) }.into())
        }
        Op::Seccomp => {
            // SAFETY: the caller's sock_fprog at `a`, whose filter the
            // kernel copies; it keeps no pointer into this process.
            check(
                unsafe {
                    libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                        a as usize as *const libc::sock_fprog,
                    )
                }
                .into(),
            )
        }
    }
}

/// `prctl(option, arg, 0, 0, 0)`: for options whose arguments are all
/// integers (PDEATHSIG, DUMPABLE, NO_NEW_PRIVS, CAPBSET_DROP, CAP_AMBIENT).
fn prctl(option: c_int, arg: u64) -> Result<(), c_int> {
    let zero: libc::c_ulong = 0;
    // SAFETY: integer arguments only: the kernel reads no memory of this
    // process for these options.
    check(unsafe { libc::prctl(option, arg as libc::c_ulong, zero, zero, zero) }.into())
}

/// Resource `resource`'s soft and hard limits to `value`, or to its hard
/// limit where that is lower.
fn limit(resource: u64, value: u64) -> Result<(), c_int> {
    let resource = c_long::try_from(resource).map_err(|_| libc::EINVAL)?;
    let mut old = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
    // The raw syscall: the C library's prlimit64 types its resource
    // differently on glibc and musl. Pid 0 is the calling process.
    // SAFETY: reads the limits into `old`, on this stack frame.
    check(unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0 as c_long,
            resource,
            core::ptr::null::<libc::rlimit64>(),
            &mut old as *mut libc::rlimit64,
        )
    })?;
    let value = value.min(old.rlim_max);
    let new = libc::rlimit64 { rlim_cur: value, rlim_max: value };
    // SAFETY: sets them from `new`, on this stack frame.
    check(unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0 as c_long,
            resource,
            &new as *const libc::rlimit64,
            core::ptr::null_mut::<libc::rlimit64>(),
        )
    })
}

/// Closes every descriptor from `first` up but `keep` (`u64::MAX`: none).
fn close_from(first: u64, keep: u64) -> Result<(), c_int> {
    let first = u32::try_from(first).map_err(|_| libc::EBADF)?;
    match u32::try_from(keep) {
        Ok(keep) if keep >= first => {
            if keep > first {
                close_range(first, keep - 1)?;
            }
            if keep < u32::MAX {
                close_range(keep + 1, u32::MAX)?;
            }
            Ok(())
        }
        _ => close_range(first, u32::MAX),
    }
}

/// Closes descriptors `low..=high`: `close_range`, or where that is
/// missing (before Linux 5.9) or refused (a container's seccomp profile)
/// one `close` per number below the descriptor limit, as CPython's
/// `os.closerange` does.
fn close_range(low: u32, high: u32) -> Result<(), c_int> {
    // SAFETY: closes descriptors only; the caller holds none of them past
    // this step (its join's descriptors are closed already).
    match check(unsafe { libc::syscall(libc::SYS_close_range, low as c_long, high as c_long, 0 as c_long) }) {
        Err(libc::ENOSYS | libc::EPERM) => {}
        done => return done,
    }
    let mut limit = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: reads the descriptor limit into `limit`, on this stack frame.
    let nofile = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0 as c_long,
            libc::RLIMIT_NOFILE as c_long,
            core::ptr::null::<libc::rlimit64>(),
            &mut limit as *mut libc::rlimit64,
        )
    };
    check(nofile)?;
    let end = u32::try_from(limit.rlim_cur).unwrap_or(u32::MAX).min(high.saturating_add(1));
    for fd in low..end {
        // SAFETY: as above; a number that is not open fails with EBADF,
        // which is what closing it should leave.
        unsafe { libc::close(fd as c_int) };
    }
    Ok(())
}

/// No capabilities left in any set: the bounding set `0..=last` (each an
/// `EINVAL`-free drop unless `guessed`), the ambient set, then effective,
/// permitted and inheritable through `capset`.
fn drop_caps(last: u64, guessed: bool) -> Result<(), c_int> {
    if last > 63 {
        return Err(libc::EINVAL);
    }
    for cap in 0..=last {
        match prctl(libc::PR_CAPBSET_DROP, cap) {
            Err(libc::EINVAL) if guessed => {}
            result => result?,
        }
    }
    prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as u64)?;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: capset reads a v3 header and two data records, both on this
    // stack frame (libc's crate has no capset: the raw syscall).
    check(unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(program: &[u64]) -> (i64, c_int) {
        let mut errno = 0;
        // SAFETY: a whole program on this frame with no address operations.
        let ret = unsafe { pycage_join_run(program.as_ptr(), program.len(), std::ptr::null(), 0, &mut errno) };
        (ret, errno)
    }

    #[test]
    fn an_empty_program_succeeds() {
        assert_eq!(call(&[]).0, -1);
    }

    #[test]
    fn a_program_of_partial_operations_runs_nothing() {
        assert_eq!(call(&[Op::Close as u64, 1000, 0]), (-2, libc::EINVAL));
    }

    #[test]
    fn a_slot_argument_reads_the_calls_values() {
        let mut fds = [0; 2];
        // SAFETY: a pipe into `fds`.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: one byte from this frame into the pipe's write end.
        assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
        let with_slot = Op::ParentAlive as u64 | 1 << SLOT_SHIFT;
        // Slot 1 of the values is the pipe's readable end: it polls readable.
        let program = [with_slot, 1, 0, 0];
        let values = [u64::MAX, fds[0] as u64];
        let mut errno = 0;
        // SAFETY: a whole program and two values on this frame.
        let ret = unsafe { pycage_join_run(program.as_ptr(), 4, values.as_ptr(), 2, &mut errno) };
        assert_eq!((ret, errno), (0, libc::ESRCH));
        // A slot past the values, and a slot bit past the three arguments.
        // SAFETY: as above.
        let ret = unsafe { pycage_join_run([with_slot, 2, 0, 0].as_ptr(), 4, values.as_ptr(), 2, &mut errno) };
        assert_eq!((ret, errno), (0, libc::EINVAL));
        let past = Op::ParentAlive as u64 | 1 << (SLOT_SHIFT + 3);
        // SAFETY: as above.
        let ret = unsafe { pycage_join_run([past, fds[0] as u64, 0, 0].as_ptr(), 4, values.as_ptr(), 2, &mut errno) };
        assert_eq!((ret, errno), (0, libc::EINVAL));
        for fd in fds {
            // SAFETY: the pipe's own descriptors.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn an_unknown_operation_fails_at_its_index() {
        let mut fds = [0; 2];
        // SAFETY: a pipe into `fds`.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // A first operation that succeeds (an empty pipe polls unreadable),
        // then code 99, then a third that is never reached.
        let program = [Op::ParentAlive as u64, fds[0] as u64, 0, 0, 99, 0, 0, 0, Op::Close as u64, 900_000, 0, 0];
        assert_eq!(call(&program), (1, libc::EINVAL));
        assert_eq!(call(&[0, 0, 0, 0]), (0, libc::EINVAL));
        for fd in fds {
            // SAFETY: the pipe's own descriptors.
            unsafe { libc::close(fd) };
        }
    }

    /// Runs `CloseFrom(first, keep)` in a forked child holding the
    /// descriptors `open`: which of them are still open after.
    fn open_after_close_from(open: &[c_int], first: u64, keep: u64) -> u64 {
        let mut report = [0; 2];
        // SAFETY: a pipe into `report`.
        assert_eq!(unsafe { libc::pipe(report.as_mut_ptr()) }, 0);
        // SAFETY: the child makes only system calls (no allocation, no
        // lock) before `_exit`: safe after fork in a threaded test process.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // The report's write end at a number below every tested one.
            // SAFETY: descriptors of this child only.
            unsafe { libc::dup2(report[1], 3) };
            for &fd in open {
                // SAFETY: as above.
                unsafe { libc::dup2(3, fd) };
            }
            let program = [Op::CloseFrom as u64, first, keep, 0];
            let mut errno = 0;
            // SAFETY: a whole program on this frame.
            let ret = unsafe { pycage_join_run(program.as_ptr(), 4, std::ptr::null(), 0, &mut errno) };
            let mut mask: u64 = if ret == -1 { 0 } else { 1 << 63 };
            for (i, &fd) in open.iter().enumerate() {
                // SAFETY: F_GETFD reads a descriptor's flags.
                if unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
                    mask |= 1 << i;
                }
            }
            // SAFETY: eight bytes from this frame, then the child ends.
            unsafe {
                libc::write(3, (&mask as *const u64).cast(), 8);
                libc::_exit(0)
            }
        }
        // SAFETY: the parent's copy of the write end.
        unsafe { libc::close(report[1]) };
        let mut mask = 0u64;
        // SAFETY: eight bytes into `mask`, then the child is reaped.
        unsafe {
            assert_eq!(libc::read(report[0], (&mut mask as *mut u64).cast(), 8), 8);
            libc::close(report[0]);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        assert_eq!(mask >> 63, 0, "CloseFrom failed");
        mask
    }

    #[test]
    fn close_from_closes_from_its_first_number_up_but_the_one_kept() {
        let open = [400, 401, 402, 403, 900];
        // Bits of `open` still open afterwards.
        assert_eq!(open_after_close_from(&open, 401, u64::MAX), 0b00001);
        assert_eq!(open_after_close_from(&open, 401, 402), 0b00101);
        assert_eq!(open_after_close_from(&open, 401, 401), 0b00011);
        // A kept number below the first is no exception: all go.
        assert_eq!(open_after_close_from(&open, 401, 400), 0b00001);
        assert_eq!(open_after_close_from(&open, 401, 900), 0b10001);
    }

    #[test]
    fn the_first_failure_stops_the_program_and_says_its_errno() {
        // Closing a descriptor that is not open (a number far above any
        // this test process holds) fails with EBADF; nothing after runs.
        let program = [Op::Close as u64, 900_000, 0, 0, 99, 0, 0, 0];
        assert_eq!(call(&program), (0, libc::EBADF));
    }

    #[test]
    fn a_living_parent_passes_and_a_readable_descriptor_fails() {
        let mut fds = [0; 2];
        // SAFETY: a pipe into `fds`.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let program = [Op::ParentAlive as u64, fds[0] as u64, 0, 0];
        assert_eq!(call(&program).0, -1);
        // SAFETY: one byte from this frame into the pipe's write end.
        assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
        assert_eq!(call(&program), (0, libc::ESRCH));
        for fd in fds {
            // SAFETY: the pipe's own descriptors.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn every_code_names_its_operation() {
        for code in 1..=13 {
            assert_eq!(Op::from_code(code).map(|op| op as u64), Some(code));
        }
        assert_eq!(Op::from_code(0), None);
        assert_eq!(Op::from_code(14), None);
    }
}
