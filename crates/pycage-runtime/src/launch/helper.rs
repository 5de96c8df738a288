//! Sandbox shells built by a small helper process instead of the host.
//!
//! A sandbox shell is a fork. Forked from the host, it costs what the host
//! is: its page tables are copied (twice: the supervisor, then its init),
//! it runs copy-on-write against the host's heap, and its exit unmaps a
//! host-sized copy. Beside an agent's 372 MiB of Python objects that made
//! sandboxed runs three times slower (`BENCHMARKS.md`, "A large host").
//! With [`crate::RuntimeConfig::shell_helper`] set, a helper process is
//! exec'd once per runtime (lazily, on the spawner thread, dying with it)
//! and forks every shell from its own small address space.
//!
//! The helper is the host's own code in another process, not the child's:
//! it never runs a program. Host and helper speak over a `SOCK_SEQPACKET`
//! pair (the helper's fd 3), one request and one reply at a time:
//!
//! - request: `shl1`, a flags byte (bit 0: the run cgroup's `cgroup.procs`
//!   descriptor rides along), then the run's [`SandboxPolicy`] (encoded
//!   here, length-prefixed; [`decode_policy`] checks every length);
//! - reply: `ok01`, the supervisor's pid and its init's pid (little endian
//!   `i32`), a flags byte (bit 0: a handoff, bit 1: its `sock_diag`
//!   socket, bit 2: its egress listener), carrying the supervisor's pidfd,
//!   the shell's hold (below), the handoff's descriptors and the eight
//!   [`Join`] descriptors; or `err1` and the error's text.
//!
//! The host computes the program's own steps itself
//! ([`JoinPlan::for_policy`]), so nothing of the plan crosses. It keeps
//! the run's uid lease and cgroup, and the shell's *hold*: the write end of
//! a pipe whose read end the helper polls. The helper reaps a shell's
//! supervisor only once the host has closed its hold, so while the host
//! holds it the supervisor's pid (and process group id) names that shell
//! and nothing else, and the host signals the whole group as it does a
//! shell it forked itself ([`Worker::from_helper`]). When a hold closes,
//! the helper kills the shell's group and reaps it. At end of file it
//! kills and reaps every shell it still has, then exits. A helper that
//! dies takes its shells with it (their death signal); the next shell
//! starts a new one.

use std::ffi::OsString;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pycage_sandbox::{Handoff, HostIds, Join, JoinPlan, Remap, SandboxPolicy};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketFlags, SocketType,
};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use crate::launch::spawn::{self, SpawnError};
use crate::process::Reaper;

const REQUEST_TAG: [u8; 4] = *b"shl1";
const REPLY_OK: [u8; 4] = *b"ok01";
const REPLY_ERR: [u8; 4] = *b"err1";
/// The request carries the run cgroup's `cgroup.procs`.
const WITH_CGROUP: u8 = 1;
const WITH_HANDOFF: u8 = 1;
const WITH_SOCK_DIAG: u8 = 2;
const WITH_EGRESS: u8 = 4;
/// The largest request: a policy is a few paths; `--allow-read` may add
/// hundreds, not thousands.
const MAX_REQUEST: usize = 128 * 1024;
/// The largest reply (an error's text is cut to fit).
const MAX_REPLY: usize = 4096;
/// Descriptors a reply carries at most: the pidfd, the hold, three of the
/// handoff, eight of the join.
const MAX_REPLY_FDS: usize = 13;
/// How long the host waits for a shell. One takes milliseconds; a helper
/// that has not answered in this long is broken, and is replaced.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often an idle helper reaps its shells that have exited.
const REAP_EVERY: Duration = Duration::from_millis(500);

/// A shell the helper built: its supervisor (the helper's child) and what
/// its supervisor and init handed over.
pub(crate) struct RemoteShell {
    pub pid: i32,
    pub pidfd: OwnedFd,
    /// While this is open, the helper does not reap the supervisor.
    pub hold: OwnedFd,
    pub handoff: Option<Handoff>,
    pub join: Join,
}

/// The host's side: starts the helper when the first shell is wanted and
/// again after one failed.
pub(crate) struct ShellHelper {
    argv: Vec<OsString>,
    conn: Mutex<Option<Conn>>,
    reaper: Arc<Reaper>,
}

/// A running helper: the host's end of its socket, and its pid.
struct Conn {
    sock: OwnedFd,
    pid: i32,
    /// Names the helper until it is reaped.
    pidfd: OwnedFd,
    reaper: Arc<Reaper>,
}

/// How long a helper told to end may take to kill and reap its shells.
const END_TIMEOUT: Duration = Duration::from_secs(5);

impl Drop for Conn {
    /// Closing the socket ends the helper, which kills and reaps its shells
    /// first. Waits for that (milliseconds): the helper dies with the
    /// spawner thread, which may end right after this, and a helper killed
    /// before it reaped would leave its shells to whoever adopts orphans.
    fn drop(&mut self) {
        let _ = rustix::net::shutdown(&self.sock, rustix::net::Shutdown::Both);
        let mut fds = [rustix::event::PollFd::new(&self.pidfd, rustix::event::PollFlags::IN)];
        let timeout = rustix::event::Timespec { tv_sec: END_TIMEOUT.as_secs() as i64, tv_nsec: 0 };
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
        if crate::process::wait4(self.pid, libc::WNOHANG).is_none() {
            let _ = rustix::process::pidfd_send_signal(&self.pidfd, Signal::KILL);
            self.reaper.adopt(self.pid);
        }
    }
}

impl ShellHelper {
    pub(crate) fn new(argv: Vec<OsString>, reaper: Arc<Reaper>) -> ShellHelper {
        ShellHelper { argv, conn: Mutex::new(None), reaper }
    }

    /// A shell for `policy`, in the run cgroup whose `cgroup.procs` is
    /// `cgroup` if there is one. Call it on the spawner thread: a helper
    /// started here dies with the thread that started it.
    pub(crate) fn shell(&self, policy: &SandboxPolicy, cgroup: Option<OwnedFd>) -> Result<RemoteShell, SpawnError> {
        let mut request = Vec::with_capacity(256);
        request.extend_from_slice(&REQUEST_TAG);
        request.push(if cgroup.is_some() { WITH_CGROUP } else { 0 });
        encode_policy(policy, &mut request);
        if request.len() > MAX_REQUEST {
            return Err(helper_error(format!("the sandbox policy is too large ({} bytes)", request.len())));
        }
        let fds: Vec<_> = cgroup.iter().map(|fd| fd.as_fd()).collect();
        let mut conn = crate::sync::lock(&self.conn);
        // A helper that died since the last shell fails the send: start
        // another one once. One that fails while building does not get a
        // second request (it may fail the same way).
        for attempt in 0..2 {
            let live = match conn.take() {
                Some(c) => c,
                None => self.start()?,
            };
            match send(&live.sock, &request, &fds) {
                Ok(()) => {}
                Err(_) if attempt == 0 => continue,
                Err(e) => return Err(helper_error(format!("could not reach it: {e}"))),
            }
            let reply = receive_reply(&live.sock);
            let dead = matches!(reply, Err(Failure::Broken(_)));
            if !dead {
                *conn = Some(live);
            }
            return reply.map_err(|f| match f {
                Failure::Broken(message) => helper_error(message),
                Failure::Refused(message) => SpawnError::Sandbox(pycage_sandbox::SandboxError::Spawn(
                    io::Error::other(format!("the shell helper could not build the sandbox: {message}")),
                )),
            });
        }
        Err(helper_error("it exited twice in a row".to_owned()))
    }

    /// The running helper's pid.
    pub(crate) fn pid(&self) -> Option<i32> {
        crate::sync::lock(&self.conn).as_ref().map(|c| c.pid)
    }

    /// Ends the helper, if one runs: it kills and reaps its shells, and is
    /// reaped. Blocks for that (milliseconds); the next shell would start
    /// another helper.
    pub(crate) fn close(&self) {
        let conn = crate::sync::lock(&self.conn).take();
        drop(conn);
    }

    fn start(&self) -> Result<Conn, SpawnError> {
        let (host, helper) =
            rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
                .map_err(|e| SpawnError::Channel(e.into()))?;
        let timeout = Some(REPLY_TIMEOUT);
        rustix::net::sockopt::set_socket_timeout(&host, rustix::net::sockopt::Timeout::Recv, timeout)
            .and_then(|()| {
                rustix::net::sockopt::set_socket_timeout(&host, rustix::net::sockopt::Timeout::Send, timeout)
            })
            .map_err(|e| SpawnError::Channel(e.into()))?;
        let pid = spawn::start_helper(&self.argv, helper)
            .map_err(|e| helper_error(format!("could not start {:?}: {e}", self.argv)))?;
        let p = Pid::from_raw(pid).ok_or_else(|| helper_error("it has pid 0".to_owned()))?;
        let pidfd = match rustix::process::pidfd_open(p, PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                // Our child, unreaped: its pid still names it.
                let _ = rustix::process::kill_process(p, Signal::KILL);
                self.reaper.adopt(pid);
                return Err(helper_error(format!("could not watch it: {e}")));
            }
        };
        Ok(Conn { sock: host, pid, pidfd, reaper: Arc::clone(&self.reaper) })
    }
}

fn helper_error(message: String) -> SpawnError {
    SpawnError::ShellHelper(message)
}

/// Why a reply brought no shell.
enum Failure {
    /// The helper is gone or spoke nonsense: it must be replaced.
    Broken(String),
    /// The helper could not build this shell, and said why.
    Refused(String),
}

fn send(sock: &OwnedFd, data: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_REPLY_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors"));
    }
    let sent = rustix::net::sendmsg(sock, &[IoSlice::new(data)], &mut control, SendFlags::NOSIGNAL)?;
    if sent != data.len() {
        return Err(io::Error::other("short send"));
    }
    Ok(())
}

/// One message and the descriptors it carried (closed on drop unless used).
fn receive(sock: &OwnedFd, buf: &mut [u8], flags: RecvFlags) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_REPLY_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = loop {
        match rustix::net::recvmsg(sock, &mut [IoSliceMut::new(buf)], &mut control, flags | RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if received.flags.intersects(rustix::net::ReturnFlags::TRUNC | rustix::net::ReturnFlags::CTRUNC) {
        return Err(io::Error::other("a message was cut short"));
    }
    Ok((received.bytes, fds))
}

fn receive_reply(sock: &OwnedFd) -> Result<RemoteShell, Failure> {
    let mut buf = [0u8; MAX_REPLY];
    let (len, fds) =
        receive(sock, &mut buf, RecvFlags::empty()).map_err(|e| Failure::Broken(format!("no answer: {e}")))?;
    let data = &buf[..len];
    if len == 0 {
        return Err(Failure::Broken("it exited".to_owned()));
    }
    if let Some(text) = data.strip_prefix(&REPLY_ERR) {
        return Err(Failure::Refused(String::from_utf8_lossy(text).into_owned()));
    }
    parse_ok(data, fds).ok_or_else(|| Failure::Broken("its answer was malformed".to_owned()))
}

fn parse_ok(data: &[u8], fds: Vec<OwnedFd>) -> Option<RemoteShell> {
    let rest = data.strip_prefix(&REPLY_OK)?;
    let [s0, s1, s2, s3, i0, i1, i2, i3, flags] = <[u8; 9]>::try_from(rest).ok()?;
    let pid = i32::from_le_bytes([s0, s1, s2, s3]);
    Pid::from_raw(pid)?;
    let with = |bit: u8| flags & bit != 0;
    let handoff_fds = 1 + usize::from(with(WITH_SOCK_DIAG)) + usize::from(with(WITH_EGRESS));
    let expected = 2 + usize::from(with(WITH_HANDOFF)) * handoff_fds + 8;
    if fds.len() != expected {
        return None;
    }
    let mut fds = fds.into_iter();
    let pidfd = fds.next()?;
    let hold = fds.next()?;
    let handoff = match with(WITH_HANDOFF) {
        true => Some(Handoff {
            init_pid: Pid::from_raw(i32::from_le_bytes([i0, i1, i2, i3]))?,
            work_dir: fds.next()?,
            sock_diag: if with(WITH_SOCK_DIAG) { Some(fds.next()?) } else { None },
            egress: if with(WITH_EGRESS) { Some(fds.next()?) } else { None },
        }),
        false => None,
    };
    let join = Join {
        user_ns: fds.next()?,
        mount_ns: fds.next()?,
        pid_ns: fds.next()?,
        net_ns: fds.next()?,
        ipc_ns: fds.next()?,
        uts_ns: fds.next()?,
        root: fds.next()?,
        ruleset: fds.next()?,
    };
    Some(RemoteShell { pid, pidfd, hold, handoff, join })
}

/// The helper's main loop on its fd 3, which must be a `SOCK_SEQPACKET`
/// socket (what the host passes): anything else is refused, not used.
pub(crate) fn serve_fd3() -> io::Result<()> {
    let raw = pycage_protocol::PROTOCOL_FD;
    // SAFETY: only borrowed for the check below, which fails cleanly
    // (EBADF, ENOTSOCK) if fd 3 is not open or not a socket.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
    match rustix::net::sockopt::socket_type(borrowed) {
        Ok(SocketType::SEQPACKET) => {}
        _ => return Err(io::Error::other("fd 3 is not a pycage runtime's socket: only a runtime starts the helper")),
    }
    // SAFETY: fd 3 is open (checked above) and was installed by the host
    // for this process alone; nothing else in it owns or closes fd 3.
    let sock = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    serve(sock)
}

/// A shell the helper built: its supervisor, and the read end of the
/// host's hold on it (`None` once the host let go).
struct Held {
    pid: Pid,
    hold: Option<OwnedFd>,
}

/// The helper's main loop on `sock` (its fd 3): serves requests until the
/// host closes its end, then kills and reaps every shell it still has.
pub(crate) fn serve(sock: OwnedFd) -> io::Result<()> {
    let mut shells: Vec<Held> = Vec::new();
    let mut buf = vec![0u8; MAX_REQUEST];
    let result = loop {
        let (request, released) = {
            let mut poll = vec![rustix::event::PollFd::new(&sock, rustix::event::PollFlags::IN)];
            let held: Vec<usize> = (0..shells.len()).filter(|&i| shells[i].hold.is_some()).collect();
            poll.extend(
                held.iter()
                    .filter_map(|&i| shells[i].hold.as_ref())
                    .map(|fd| rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)),
            );
            let every = rustix::event::Timespec { tv_sec: 0, tv_nsec: REAP_EVERY.as_nanos() as i64 };
            match rustix::event::poll(&mut poll, Some(&every)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => break Err(e.into()),
            }
            // A hold's read end reports the host's close as HUP (or IN).
            let released: Vec<usize> =
                held.iter().zip(&poll[1..]).filter(|(_, p)| !p.revents().is_empty()).map(|(&i, _)| i).collect();
            (!poll[0].revents().is_empty(), released)
        };
        for i in released {
            // Unreaped (we reap only released shells): its group id is its.
            let _ = rustix::process::kill_process_group(shells[i].pid, Signal::KILL);
            shells[i].hold = None;
        }
        shells.retain(|s| {
            s.hold.is_some() || matches!(rustix::process::waitpid(Some(s.pid), WaitOptions::NOHANG), Ok(None))
        });
        if !request {
            continue;
        }
        let (len, mut fds) = match receive(&sock, &mut buf, RecvFlags::DONTWAIT) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => break Err(e),
        };
        if len == 0 {
            break Ok(());
        }
        let reply = match build(&buf[..len], &mut fds) {
            Ok((pid, hold, shell)) => {
                shells.push(Held { pid, hold: Some(hold) });
                encode_ok(pid, shell)
            }
            Err(message) => {
                let mut data = REPLY_ERR.to_vec();
                let text = message.as_bytes();
                data.extend_from_slice(&text[..text.len().min(MAX_REPLY - REPLY_ERR.len())]);
                (data, Vec::new())
            }
        };
        let borrowed: Vec<_> = reply.1.iter().map(|fd| fd.as_fd()).collect();
        if let Err(e) = send(&sock, &reply.0, &borrowed) {
            break Err(e);
        }
    };
    // The host has gone: no shell outlives the helper's answer to that.
    for shell in shells {
        kill_and_reap(shell.pid);
    }
    result
}

/// Builds the shell a request asks for: its supervisor's pid and what it
/// handed over, or the error's text.
fn build(request: &[u8], fds: &mut Vec<OwnedFd>) -> Result<(Pid, OwnedFd, RemoteShell), String> {
    let body = request.strip_prefix(&REQUEST_TAG).ok_or("not a shell request")?;
    let (&flags, policy) = body.split_first().ok_or("an empty request")?;
    let policy = decode_policy(policy).ok_or("a malformed sandbox policy")?;
    let cgroup = match (flags & WITH_CGROUP != 0, fds.len()) {
        (true, 1) => fds.pop(),
        (false, 0) => None,
        _ => return Err("the request's descriptors do not match it".to_owned()),
    };
    let mut prepared = pycage_sandbox::Prepared::new(&policy).map_err(|e| e.to_string())?;
    if let Some(procs) = cgroup {
        prepared.join_cgroup(procs);
    }
    let prepared = Arc::new(prepared.into_shell());
    let raw = spawn::fork_shell(&prepared).map_err(|e| e.to_string())?;
    let pid = Pid::from_raw(raw).ok_or("the shell has pid 0")?;
    let shell = (|| {
        let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).map_err(|e| format!("pidfd_open: {e}"))?;
        let (kept, hold) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
        let handoff = prepared.take_handoff();
        let join = prepared.take_join().ok_or_else(|| match prepared.take_child_failure() {
            Some(failure) => pycage_sandbox::SandboxError::Child(failure).to_string(),
            None => "the shell handed nothing over".to_owned(),
        })?;
        Ok((kept, RemoteShell { pid: raw, pidfd, hold, handoff, join }))
    })();
    match shell {
        Ok((kept, shell)) => Ok((pid, kept, shell)),
        Err(message) => {
            kill_and_reap(pid);
            Err(message)
        }
    }
}

fn encode_ok(pid: Pid, shell: RemoteShell) -> (Vec<u8>, Vec<OwnedFd>) {
    let mut data = REPLY_OK.to_vec();
    data.extend_from_slice(&pid.as_raw_nonzero().get().to_le_bytes());
    let mut fds = vec![shell.pidfd, shell.hold];
    let mut flags = 0;
    let mut init = 0i32;
    if let Some(h) = shell.handoff {
        flags |= WITH_HANDOFF;
        init = h.init_pid.as_raw_nonzero().get();
        fds.push(h.work_dir);
        if let Some(fd) = h.sock_diag {
            flags |= WITH_SOCK_DIAG;
            fds.push(fd);
        }
        if let Some(fd) = h.egress {
            flags |= WITH_EGRESS;
            fds.push(fd);
        }
    }
    data.extend_from_slice(&init.to_le_bytes());
    data.push(flags);
    let j = shell.join;
    fds.extend([j.user_ns, j.mount_ns, j.pid_ns, j.net_ns, j.ipc_ns, j.uts_ns, j.root, j.ruleset]);
    (data, fds)
}

/// Kills a shell (its supervisor's whole group: the supervisor and its
/// init) and reaps the supervisor.
fn kill_and_reap(pid: Pid) {
    // Our child, not reaped: its pid and group id name it.
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    while let Err(rustix::io::Errno::INTR) = rustix::process::waitpid(Some(pid), WaitOptions::empty()) {}
}

/// Appends `policy`: every path and number, each path as a `u32` length and
/// its bytes, each list as a `u32` count.
pub(crate) fn encode_policy(policy: &SandboxPolicy, out: &mut Vec<u8>) {
    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    fn paths(out: &mut Vec<u8>, list: &[PathBuf]) {
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        for p in list {
            bytes(out, p.as_os_str().as_bytes());
        }
    }
    paths(out, &policy.read_only);
    out.extend_from_slice(&(policy.remapped.len() as u32).to_le_bytes());
    for r in &policy.remapped {
        bytes(out, r.host.as_os_str().as_bytes());
        bytes(out, r.inside.as_os_str().as_bytes());
    }
    paths(out, &policy.devices);
    match policy.host_ids {
        Some(ids) => {
            out.push(1);
            out.extend_from_slice(&ids.uid.to_le_bytes());
            out.extend_from_slice(&ids.gid.to_le_bytes());
        }
        None => out.push(0),
    }
    for n in
        [policy.max_processes, policy.max_file_bytes, policy.max_open_files, policy.disk_bytes, policy.sysv_shm_bytes]
    {
        out.extend_from_slice(&n.to_le_bytes());
    }
    match policy.egress_port {
        Some(port) => {
            out.push(1);
            out.extend_from_slice(&port.to_le_bytes());
        }
        None => out.push(0),
    }
}

/// The policy [`encode_policy`] wrote, or `None` for anything else (a
/// count or length past the end, trailing bytes).
pub(crate) fn decode_policy(data: &[u8]) -> Option<SandboxPolicy> {
    struct Reader<'a>(&'a [u8]);
    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            if self.0.len() < n {
                return None;
            }
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Some(head)
        }
        fn u8(&mut self) -> Option<u8> {
            self.take(1).map(|b| b[0])
        }
        fn u32(&mut self) -> Option<u32> {
            self.take(4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes)
        }
        fn u64(&mut self) -> Option<u64> {
            self.take(8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
        }
        fn path(&mut self) -> Option<PathBuf> {
            let len = usize::try_from(self.u32()?).ok()?;
            Some(PathBuf::from(OsString::from_vec(self.take(len)?.to_vec())))
        }
        /// A count of items at least `min` bytes each: never more than the
        /// bytes left could hold, so no count allocates past the input.
        fn count(&mut self, min: usize) -> Option<usize> {
            let n = usize::try_from(self.u32()?).ok()?;
            (n <= self.0.len() / min).then_some(n)
        }
        fn paths(&mut self) -> Option<Vec<PathBuf>> {
            let n = self.count(4)?;
            (0..n).map(|_| self.path()).collect()
        }
    }
    let mut r = Reader(data);
    let read_only = r.paths()?;
    let n = r.count(8)?;
    let remapped = (0..n).map(|_| Some(Remap { host: r.path()?, inside: r.path()? })).collect::<Option<Vec<_>>>()?;
    let devices = r.paths()?;
    let host_ids = match r.u8()? {
        0 => None,
        1 => Some(HostIds { uid: r.u32()?, gid: r.u32()? }),
        _ => return None,
    };
    let policy = SandboxPolicy {
        read_only,
        remapped,
        devices,
        host_ids,
        max_processes: r.u64()?,
        max_file_bytes: r.u64()?,
        max_open_files: r.u64()?,
        disk_bytes: r.u64()?,
        sysv_shm_bytes: r.u64()?,
        egress_port: match r.u8()? {
            0 => None,
            1 => Some(u16::from_le_bytes(r.take(2)?.try_into().ok()?)),
            _ => return None,
        },
    };
    r.0.is_empty().then_some(policy)
}

/// The program's steps for a shell the helper builds for `policy`.
pub(crate) fn join_plan(policy: &SandboxPolicy) -> Result<JoinPlan, SpawnError> {
    JoinPlan::for_policy(policy).map_err(SpawnError::Sandbox)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn path() -> impl Strategy<Value = PathBuf> {
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(|b| PathBuf::from(OsString::from_vec(b)))
    }

    fn policy() -> impl Strategy<Value = SandboxPolicy> {
        (
            proptest::collection::vec(path(), 0..6),
            proptest::collection::vec((path(), path()), 0..4),
            proptest::collection::vec(path(), 0..4),
            proptest::option::of((any::<u32>(), any::<u32>())),
            any::<[u64; 5]>(),
            proptest::option::of(any::<u16>()),
        )
            .prop_map(|(read_only, remaps, devices, ids, n, egress_port)| SandboxPolicy {
                read_only,
                remapped: remaps.into_iter().map(|(host, inside)| Remap { host, inside }).collect(),
                devices,
                host_ids: ids.map(|(uid, gid)| HostIds { uid, gid }),
                max_processes: n[0],
                max_file_bytes: n[1],
                max_open_files: n[2],
                disk_bytes: n[3],
                sysv_shm_bytes: n[4],
                egress_port,
            })
    }

    proptest! {
        #[test]
        fn policies_round_trip(p in policy()) {
            let mut out = Vec::new();
            encode_policy(&p, &mut out);
            prop_assert_eq!(decode_policy(&out), Some(p));
        }

        #[test]
        fn a_cut_or_padded_policy_is_refused(p in policy(), cut in any::<prop::sample::Index>()) {
            let mut out = Vec::new();
            encode_policy(&p, &mut out);
            let at = cut.index(out.len());
            prop_assert_eq!(decode_policy(&out[..at]), None);
            out.push(0);
            prop_assert_eq!(decode_policy(&out), None);
        }

        #[test]
        fn any_bytes_decode_without_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_policy(&data);
        }
    }

    #[test]
    fn a_huge_count_allocates_nothing() {
        let mut data = u32::MAX.to_le_bytes().to_vec();
        data.extend_from_slice(&[0; 16]);
        assert_eq!(decode_policy(&data), None);
    }
}
