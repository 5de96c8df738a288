//! The user namespace a runtime's zygote lives in on a host that is not
//! root, so that it can fork each sandboxed child straight into the run's
//! PID namespace.
//!
//! A process enters a PID namespace only by being forked into it. The
//! zygote could do that itself (`setns(CLONE_NEWPID)` before its fork) if
//! it held `CAP_SYS_ADMIN` over the run's user namespace and in its own.
//! An unprivileged zygote in the host's user namespace holds neither, so
//! its child had to join from outside and fork the program a second time,
//! which cost about a third of a sandboxed run's CPU.
//!
//! So each sandbox runtime of an unprivileged host makes one user
//! namespace, "Z", mapping uid and gid 0 to the host's ids (the only
//! mapping an unprivileged process may write). Its zygote is exec'd inside
//! it (root there: full capabilities in Z, none outside it; Z owns no mount,
//! network or PID namespace). Each run's sandbox shell joins Z before it
//! makes the run's user namespace, which is then Z's child, owned by the
//! host uid: a process of Z with that uid has every capability in it
//! ([`crate::Prepared::join_zygote_user_namespace`]). The zygote can then
//! set the run's PID namespace for its next child, and its children can
//! join the run's namespaces, as on a root host.
//!
//! Z lives as long as a descriptor of it: the runtime holds one, its
//! zygotes and shells join it by that descriptor, and a successor zygote
//! joins the same Z, so a shell built for one zygote serves the next.

use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};
use rustix::pipe::PipeFlags;
use rustix::thread::UnshareFlags;

use crate::error::SandboxError;

/// Makes Z (see the module docs) and returns a descriptor of it: a child
/// process unshares a user namespace, this process writes its maps
/// (`0 <euid> 1`, `0 <egid> 1`, `setgroups` denied) and opens it, then the
/// child exits.
pub fn zygote_user_namespace() -> Result<OwnedFd, SandboxError> {
    let fail =
        |what: &'static str| move |e: rustix::io::Errno| SandboxError::ZygoteUserNamespace { what, source: e.into() };
    let (ready_rx, ready_tx) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(fail("pipe"))?;
    let (go_rx, go_tx) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(fail("pipe"))?;
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    // Formatted before the fork: the child allocates nothing.
    let uid_map = format!("0 {uid} 1\n");
    let gid_map = format!("0 {gid} 1\n");
    // SAFETY: the child makes raw syscalls only (rustix's linux_raw
    // backend: unshare, write, read, _exit), which are async-signal-safe,
    // so forking a multi-threaded host is sound.
    let pid = unsafe { crate::sys::fork() }.map_err(|errno| SandboxError::ZygoteUserNamespace {
        what: "fork",
        source: std::io::Error::from_raw_os_error(errno),
    })?;
    if pid == 0 {
        drop(ready_rx);
        drop(go_tx);
        // SAFETY: a single-threaded child (only the forking thread exists).
        // The status byte is 0 or the errno (every errno fits in a byte).
        let status = match unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) } {
            Ok(()) => 0u8,
            Err(e) => u8::try_from(e.raw_os_error()).unwrap_or(u8::MAX).max(1),
        };
        let _ = rustix::io::write(&ready_tx, &[status]);
        let mut byte = [0u8; 1];
        let _ = rustix::io::read(&go_rx, &mut byte);
        // SAFETY: _exit is async-signal-safe; nothing of the parent's runs.
        unsafe { libc::_exit(0) };
    }
    drop(ready_tx);
    drop(go_rx);
    let result = maps_and_namespace(pid, &ready_rx, &uid_map, &gid_map);
    // Whatever happened, let the child exit, and reap it. A byte, not end
    // of file: another thread of this host may fork (and not yet exec) a
    // process holding a copy of `go_tx`, and two runtimes made at once
    // would each wait for the other's copy to close.
    let _ = rustix::io::write(&go_tx, &[0]);
    drop(go_tx);
    if let Some(child) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::waitpid(Some(child), rustix::process::WaitOptions::empty());
    }
    result
}

fn maps_and_namespace(pid: i32, ready: &OwnedFd, uid_map: &str, gid_map: &str) -> Result<OwnedFd, SandboxError> {
    let fail =
        |what: &'static str| move |e: rustix::io::Errno| SandboxError::ZygoteUserNamespace { what, source: e.into() };
    let mut status = [1u8; 1];
    let read = rustix::io::read(ready, &mut status).map_err(fail("waiting for the child"))?;
    if read != 1 {
        return Err(SandboxError::ZygoteUserNamespace {
            what: "unshare(CLONE_NEWUSER)",
            source: std::io::Error::other("the child exited before it made a user namespace"),
        });
    }
    if status[0] != 0 {
        return Err(SandboxError::ZygoteUserNamespace {
            what: "unshare(CLONE_NEWUSER)",
            source: std::io::Error::from_raw_os_error(i32::from(status[0])),
        });
    }
    let proc =
        rustix::fs::open(format!("/proc/{pid}"), OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(fail("opening /proc/<child>"))?;
    for (name, text, what) in [
        ("setgroups", "deny\n", "writing setgroups"),
        ("uid_map", uid_map, "writing uid_map"),
        ("gid_map", gid_map, "writing gid_map"),
    ] {
        let file =
            rustix::fs::openat(&proc, name, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty()).map_err(fail(what))?;
        let written = rustix::io::write(&file, text.as_bytes()).map_err(fail(what))?;
        if written != text.len() {
            return Err(SandboxError::ZygoteUserNamespace { what, source: std::io::Error::other("short write") });
        }
    }
    rustix::fs::openat(&proc, "ns/user", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(fail("opening ns/user"))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn the_namespace_maps_this_process_ids_to_root_and_can_be_joined() {
        let ns = zygote_user_namespace().unwrap();
        // A child of it: joins it, and reads its ids as 0 there.
        let (rx, tx) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC).unwrap();
        // SAFETY: the child makes raw syscalls only, then _exit.
        let pid = unsafe { crate::sys::fork() }.unwrap();
        if pid == 0 {
            let joined =
                rustix::thread::move_into_link_name_space(ns.as_fd(), Some(rustix::thread::LinkNameSpaceType::User))
                    .is_ok();
            let ids = [
                u8::from(joined),
                rustix::process::geteuid().as_raw() as u8,
                rustix::process::getegid().as_raw() as u8,
            ];
            let _ = rustix::io::write(&tx, &ids);
            // SAFETY: async-signal-safe exit of the forked child.
            unsafe { libc::_exit(0) };
        }
        drop(tx);
        let mut ids = [9u8; 3];
        assert_eq!(rustix::io::read(&rx, &mut ids).unwrap(), 3);
        let _ = rustix::process::waitpid(rustix::process::Pid::from_raw(pid), rustix::process::WaitOptions::empty());
        assert_eq!(ids, [1, 0, 0], "joined, as uid 0 and gid 0 of the namespace");
        // It is not this process's own.
        let own = std::fs::read_link("/proc/self/ns/user").unwrap();
        let theirs = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&ns))).unwrap();
        assert_ne!(own, theirs);
    }
}
