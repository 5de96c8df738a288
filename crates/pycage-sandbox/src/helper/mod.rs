//! The sandbox shell helper's server: a small process that forks sandbox
//! shells from its own small address space instead of the host's.
//!
//! A sandbox shell is a fork. Forked from the host, it costs what the host
//! is: its page tables are copied (twice: the supervisor, then its init),
//! it runs copy-on-write against the host's heap, and its exit unmaps a
//! host-sized copy. Beside an agent's 372 MiB of Python objects that made
//! sandboxed runs three times slower. So a runtime may exec a helper once
//! (lazily, dying with the runtime's spawner thread) and have it fork the
//! shells: the `pycage-shell-helper` program of this crate, or any binary
//! that calls [`serve_fd3`] early in `main` (the `pycage` CLI does, for
//! its first argument `__shell-helper`).
//!
//! The helper is the host's own code in another process, not the child's:
//! it never runs a program. It speaks [`wire`]'s protocol on its fd 3, one
//! request and one reply at a time, and builds each shell with
//! [`Prepared`](crate::Prepared): the plan of what a program joining the shell does to
//! itself comes back in the reply, derived by the builder alone. It reaps
//! its shells as they exit, and their inits (it is their subreaper: a
//! shell's init outlives its killed supervisor an instant); at end of
//! file (the runtime's shutdown) it kills and reaps every shell it still
//! has, then exits. A helper that
//! dies takes its shells with it (their death signal).
//!
//! The host's side (starting the helper, replacing one that died, giving
//! up on one that never worked) is the runtime's: it holds the reaper.

pub mod wire;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use rustix::net::{RecvFlags, SocketType};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use crate::prepared::{OuterNamespaces, Preparations};
use crate::template::RootTemplates;
use wire::{Refusal, RemoteShell, MAX_REQUEST, WITH_CGROUP, WITH_NET_NS, WITH_OUTER_NET, WITH_ZYGOTE_USERNS};

/// How often the helper reaps its shells that have exited, while it has any.
const REAP_EVERY: Duration = Duration::from_millis(200);

/// The helper's main loop on its fd 3, which must be a `SOCK_SEQPACKET`
/// socket (what the host passes): anything else is refused, not used.
pub fn serve_fd3() -> io::Result<()> {
    let sock = crate::fork::take_fd3()
        .filter(|fd| rustix::net::sockopt::socket_type(fd) == Ok(SocketType::SEQPACKET))
        .ok_or_else(|| io::Error::other("fd 3 is not a pycage runtime's socket: only a runtime starts the helper"))?;
    serve(sock)
}

/// The helper's main loop on `sock` (its fd 3): serves requests until the
/// host closes its end, then kills and reaps every shell it still has.
pub fn serve(sock: OwnedFd) -> io::Result<()> {
    // Shells must stay this process's to reap (an inherited SIG_IGN would
    // have the kernel reap them, and std's spawn wait for nothing).
    crate::fork::default_sigchld();
    // A shell ends with its whole group killed: its supervisor and its
    // init die together, and the init, whose parent is the supervisor, is
    // handed to the nearest subreaper above it. Without one that is the
    // host's PID 1, and a host that is PID 1 itself (a container's
    // entrypoint without an init) would keep one zombie per run. So this
    // process takes them, and reaps them with its shells. (Any nonzero
    // argument sets the attribute.)
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let mut shells: Vec<Pid> = Vec::new();
    let mut templates = RootTemplates::new();
    let mut preparations = Preparations::new();
    let mut buf = vec![0u8; MAX_REQUEST];
    let result = loop {
        let children = reap_exited(&mut shells);
        let mut poll = [rustix::event::PollFd::new(&sock, rustix::event::PollFlags::IN)];
        // Wake up to reap only while there are children to reap.
        let every = rustix::event::Timespec { tv_sec: 0, tv_nsec: REAP_EVERY.as_nanos() as i64 };
        match rustix::event::poll(&mut poll, children.then_some(&every)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => break Err(e.into()),
        }
        let (len, mut fds) = match wire::receive(&sock, &mut buf, RecvFlags::DONTWAIT) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => break Err(e),
        };
        if len == 0 {
            break Ok(());
        }
        let (data, reply_fds) = match wire::same_build(buf.get(..len).unwrap_or_default()) {
            Err(reply) => (reply, Vec::new()),
            Ok(body) => match build(body, &mut fds, &mut preparations, &mut templates) {
                Ok((pid, shell)) => {
                    shells.push(pid);
                    wire::encode_ok(pid, shell)
                }
                Err(refusal) => (refusal.reply(), Vec::new()),
            },
        };
        if let Err(e) = wire::send(&sock, &data, &wire::borrowed(&reply_fds)) {
            break Err(e);
        }
    };
    // The host has gone: no shell outlives the helper's answer to that.
    for pid in std::mem::take(&mut shells) {
        kill_and_reap(pid);
    }
    // Their inits, adopted as each supervisor died: killed with their
    // group, each exits once every process of its PID namespace is reaped
    // (a zygote's child is its zygote's to reap), so wait a bounded time.
    let deadline = std::time::Instant::now() + ORPHANS_GRACE;
    while reap_exited(&mut shells) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    result
}

/// How long the helper waits, once its host has gone, for the shells'
/// inits it adopted to exit.
const ORPHANS_GRACE: Duration = Duration::from_secs(2);

/// Reaps every child that has exited (shells' supervisors, and the inits
/// this process adopted), dropping reaped supervisors from `shells`.
/// Whether any child is left.
fn reap_exited(shells: &mut Vec<Pid>) -> bool {
    loop {
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some((pid, _))) => shells.retain(|&shell| shell != pid),
            Ok(None) => return true,
            Err(rustix::io::Errno::INTR) => {}
            // ECHILD: no child at all.
            Err(_) => return false,
        }
    }
}

/// Builds the shell a request (after its tag and build) asks for: its
/// supervisor's pid and what it handed over, or why not.
fn build(
    body: &[u8],
    fds: &mut Vec<OwnedFd>,
    preparations: &mut Preparations,
    templates: &mut RootTemplates,
) -> Result<(Pid, RemoteShell), Refusal> {
    let (&flags, policy) = body.split_first().ok_or("an empty request")?;
    let policy = wire::decode_policy(policy).ok_or("a malformed sandbox policy")?;
    let (with_cgroup, with_userns) = (flags & WITH_CGROUP != 0, flags & WITH_ZYGOTE_USERNS != 0);
    let (outer_net, with_net_ns) = (flags & WITH_OUTER_NET != 0, flags & WITH_NET_NS != 0);
    if flags & !(WITH_CGROUP | WITH_ZYGOTE_USERNS | WITH_OUTER_NET | WITH_NET_NS) != 0
        || (with_net_ns && !outer_net)
        || fds.len() != usize::from(with_cgroup) + usize::from(with_userns) + 2 * usize::from(with_net_ns)
    {
        return Err("the request's descriptors do not match it".into());
    }
    let earlier = match with_net_ns {
        true => fds.pop().zip(fds.pop()).map(|(ipc, net)| OuterNamespaces { net, ipc }),
        false => None,
    };
    let userns = if with_userns { fds.pop() } else { None };
    let cgroup = if with_cgroup { fds.pop() } else { None };
    // The plan, what it fixes, and the root's read-only part (root hosts),
    // built once per policy and checked against the file system for every
    // shell.
    let mut prepared = preparations.prepare(&policy)?;
    templates.attach(&mut prepared);
    if let Some(procs) = cgroup {
        prepared.join_cgroup(procs);
    }
    if let Some(userns) = userns {
        prepared.join_zygote_user_namespace(userns);
    }
    // The host recycles the namespace: it must be outside the run's.
    if outer_net && !prepared.outer_network_namespace(earlier) {
        return Err("this run's network namespace cannot be made outside its user namespace".into());
    }
    let prepared = Arc::new(prepared.into_shell());
    let raw = crate::fork::fork_shell(&prepared)?;
    let pid = Pid::from_raw(raw).ok_or("the shell has pid 0")?;
    let shell = (|| {
        // Our child, not reaped yet: the pidfd names it.
        let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty())
            .map_err(|e| Refusal::Other(format!("pidfd_open: {e}")))?;
        let (handoff, join) = prepared.take_shell()?;
        Ok(RemoteShell { pid: raw, pidfd, handoff, join, plan: prepared.join_plan() })
    })();
    match shell {
        Ok(shell) => Ok((pid, shell)),
        Err(message) => {
            kill_and_reap(pid);
            Err(message)
        }
    }
}

/// Kills a shell (its supervisor's whole group: the supervisor and its
/// init) and reaps the supervisor.
fn kill_and_reap(pid: Pid) {
    // Our child, not reaped: its pid and group id name it.
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    while let Err(rustix::io::Errno::INTR) = rustix::process::waitpid(Some(pid), WaitOptions::empty()) {}
}
