//! Sandbox shells built by a small helper process instead of the host.
//!
//! A sandbox shell is a fork. Forked from the host, it costs what the host
//! is: its page tables are copied (twice: the supervisor, then its init),
//! it runs copy-on-write against the host's heap, and its exit unmaps a
//! host-sized copy. Beside an agent's 372 MiB of Python objects that made
//! sandboxed runs three times slower (`BENCHMARKS.md`, "A large host").
//! With [`crate::RuntimeConfig::shell_helper`] set, a helper process is
//! exec'd once per runtime (lazily, on the spawner thread, dying with it)
//! and forks the zygote path's shells from its own small address space.
//!
//! The helper is the host's own code in another process, not the child's:
//! it never runs a program. Host and helper speak over a `SOCK_SEQPACKET`
//! pair (the helper's fd 3), one request and one reply at a time:
//!
//! - request: `shl1`, the host's build (a length byte and [`BUILD`]), a
//!   flags byte (bit 0: the run cgroup's `cgroup.procs` descriptor rides
//!   along; bit 1: so does the zygote's user namespace, which the shell
//!   joins first, after the cgroup's if both; bit 2: the run's network
//!   namespace is made outside its user namespace,
//!   `Prepared::outer_network_namespace`; bit 3: with bit 2, the network
//!   namespace of an earlier run rides along, last, to be joined instead),
//!   then the run's
//!   [`SandboxPolicy`] (encoded here, length-prefixed; [`decode_policy`]
//!   checks every length);
//! - reply: `ok01`, the supervisor's pid and its init's pid (little endian
//!   `i32`), a flags byte (bit 0: a handoff, bit 1: its `sock_diag`
//!   socket, bit 2: its egress listener), carrying the supervisor's pidfd,
//!   the handoff's descriptors and the eight [`Join`] descriptors; or
//!   `err1` and the error's text; or `ern1` and an errno (little endian
//!   `i32`) when joining the earlier run's network namespace failed (the
//!   host then stops recycling them, and nothing else does); or `ver1` and
//!   the helper's build, when
//!   it is not the host's (a package upgraded under a running host: its
//!   helper would be the new one), and the helper is then given up.
//!
//! The host computes the program's own steps itself
//! ([`JoinPlan::for_policy`]), so nothing of the plan crosses. It keeps
//! the run's uid lease and cgroup, and holds the supervisor through its
//! pidfd only ([`Worker::from_helper`]): it signals the supervisor alone,
//! through the pidfd (never a pid the helper may have reaped), and the
//! supervisor's death takes the shell's init, and with it the run's PID
//! namespace, by their death signals. The helper reaps its shells as they
//! exit; at end of file (the runtime's shutdown) it kills and reaps every
//! shell it still has, then exits. A helper that dies takes its shells with
//! it (their death signal), and so every run and pooled child that used
//! them; the next shell starts a new helper. A helper that cannot start, or
//! fails before it built its first shell (a host whose `sys.executable` is
//! not a Python, say), is given up: shells are then forked by the host, as
//! without one, and a warning says why.
//!
//! [`Worker::from_helper`]: crate::launch::spawn::Worker::from_helper

use std::ffi::OsString;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pycage_sandbox::{ChildFailure, Handoff, HostIds, Join, JoinPlan, Remap, SandboxError, SandboxPolicy, Step};
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
const REPLY_ERR_JOIN_NET: [u8; 4] = *b"ern1";
const REPLY_BUILD: [u8; 4] = *b"ver1";
/// Host and helper must be one build: this crate's version and the
/// protocol's revision.
const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), "/shell-helper-3");
/// The request carries the run cgroup's `cgroup.procs`.
const WITH_CGROUP: u8 = 1;
/// The request carries the zygote's user namespace.
const WITH_ZYGOTE_USERNS: u8 = 2;
/// The run's network namespace is made outside its user namespace.
const WITH_OUTER_NET: u8 = 4;
/// ... and is this one, an earlier run's (its descriptor rides along).
const WITH_NET_NS: u8 = 8;
const WITH_HANDOFF: u8 = 1;
const WITH_SOCK_DIAG: u8 = 2;
const WITH_EGRESS: u8 = 4;
/// The largest request: a policy is a few paths; `--allow-read` may add
/// hundreds, not thousands.
const MAX_REQUEST: usize = 128 * 1024;
/// The largest reply (an error's text is cut to fit).
const MAX_REPLY: usize = 4096;
/// Descriptors a reply carries at most: the pidfd, three of the handoff,
/// eight of the join.
const MAX_REPLY_FDS: usize = 12;
/// How long the host waits for a shell. One takes milliseconds; a helper
/// that has not answered in this long is broken, and is replaced (its
/// shells, and the runs using them, end with it).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the helper reaps its shells that have exited, while it has any.
const REAP_EVERY: Duration = Duration::from_millis(200);
/// How long a helper told to end may take to kill and reap its shells
/// before it is killed.
const END_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a shell's network namespace comes from
/// (`Prepared::outer_network_namespace`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ShellNetwork<'a> {
    /// Made with the run's other namespaces, owned by its user namespace.
    Inside,
    /// Made before the run's user namespace, outside it.
    Outside,
    /// An earlier run's, made [`ShellNetwork::Outside`], joined.
    Join(BorrowedFd<'a>),
}

/// A shell the helper built: its supervisor (the helper's child) and what
/// its supervisor and init handed over.
pub(crate) struct RemoteShell {
    pub pid: i32,
    pub pidfd: OwnedFd,
    pub handoff: Option<Handoff>,
    pub join: Join,
}

/// The host's side: starts the helper when the first shell is wanted and
/// again after one failed.
pub(crate) struct ShellHelper {
    argv: Vec<OsString>,
    state: Mutex<State>,
    /// The running helper's pid, or 0 (read without the lock, which a
    /// request holds).
    pid: AtomicI32,
    reaper: Arc<Reaper>,
}

#[derive(Default)]
struct State {
    conn: Option<Conn>,
    /// The runtime is shutting down: no helper starts any more.
    closed: bool,
    /// A helper has built a shell: failures now restart it rather than
    /// give it up.
    served: bool,
    /// Given up (see the module docs): the host forks shells itself.
    given_up: bool,
}

/// A running helper: the host's end of its socket, and its pid.
struct Conn {
    sock: OwnedFd,
    pid: i32,
    /// Names the helper until it is reaped.
    pidfd: OwnedFd,
    reaper: Arc<Reaper>,
}

impl Drop for Conn {
    /// Closing the socket ends the helper, which kills and reaps its shells
    /// first. Waits for that (milliseconds): the helper dies with the
    /// spawner thread, which may end right after this, and a helper killed
    /// before it reaped would leave its shells to whoever adopts orphans.
    fn drop(&mut self) {
        let _ = rustix::net::shutdown(&self.sock, rustix::net::Shutdown::Both);
        let deadline = std::time::Instant::now() + END_TIMEOUT;
        while !crate::process::has_exited(&self.pidfd) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let mut fds = [rustix::event::PollFd::new(&self.pidfd, rustix::event::PollFlags::IN)];
            let timeout =
                rustix::event::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
        }
        if crate::process::wait4(self.pid, libc::WNOHANG).is_none() {
            let _ = rustix::process::pidfd_send_signal(&self.pidfd, Signal::KILL);
            self.reaper.adopt(self.pid);
        }
    }
}

impl ShellHelper {
    pub(crate) fn new(argv: Vec<OsString>, reaper: Arc<Reaper>) -> ShellHelper {
        ShellHelper { argv, state: Mutex::new(State::default()), pid: AtomicI32::new(0), reaper }
    }

    /// Whether shells come from the helper (it has not been given up).
    pub(crate) fn in_use(&self) -> bool {
        !crate::sync::lock(&self.state).given_up
    }

    /// A shell for `policy`, in the run cgroup whose `cgroup.procs` is
    /// `cgroup` if there is one, its user namespace a child of `userns` if
    /// given (`Prepared::join_zygote_user_namespace`), its network
    /// namespace from `network`. Call it on the
    /// spawner thread: a helper started here dies with the thread that
    /// started it. After an error, [`ShellHelper::in_use`] says whether the
    /// helper was given up.
    pub(crate) fn shell(
        &self,
        policy: &SandboxPolicy,
        cgroup: Option<OwnedFd>,
        userns: Option<BorrowedFd<'_>>,
        network: ShellNetwork<'_>,
    ) -> Result<RemoteShell, SpawnError> {
        let mut request = Vec::with_capacity(256);
        request.extend_from_slice(&REQUEST_TAG);
        request.push(BUILD.len() as u8);
        request.extend_from_slice(BUILD.as_bytes());
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        let (net_flags, net_ns) = match network {
            ShellNetwork::Inside => (0, None),
            ShellNetwork::Outside => (WITH_OUTER_NET, None),
            ShellNetwork::Join(fd) => (WITH_OUTER_NET | WITH_NET_NS, Some(fd)),
        };
        request.push(flag(cgroup.is_some(), WITH_CGROUP) | flag(userns.is_some(), WITH_ZYGOTE_USERNS) | net_flags);
        encode_policy(policy, &mut request);
        if request.len() > MAX_REQUEST {
            return Err(helper_error(format!("the sandbox policy is too large ({} bytes)", request.len())));
        }
        let fds: Vec<_> = cgroup.iter().map(|fd| fd.as_fd()).chain(userns).chain(net_ns).collect();
        let mut state = crate::sync::lock(&self.state);
        if state.closed {
            return Err(helper_error("the runtime is shutting down".to_owned()));
        }
        // A helper that died since the last shell fails the send: start
        // another one once. One that fails while building does not get a
        // second request (it may fail the same way).
        for attempt in 0..2 {
            let live = match state.conn.take() {
                Some(c) => c,
                None => match self.start() {
                    Ok(c) => c,
                    Err(e) => return Err(self.failed(&mut state, e)),
                },
            };
            self.pid.store(live.pid, Ordering::Relaxed);
            match send(&live.sock, &request, &fds) {
                Ok(()) => {}
                Err(_) if attempt == 0 => {
                    self.drop_conn(live);
                    continue;
                }
                Err(e) => {
                    self.drop_conn(live);
                    return Err(self.failed(&mut state, helper_error(format!("could not reach it: {e}"))));
                }
            }
            return match receive_reply(&live.sock) {
                Ok(shell) => {
                    state.served = true;
                    state.conn = Some(live);
                    Ok(shell)
                }
                Err(Failure::Refused(message)) => {
                    state.conn = Some(live);
                    Err(SpawnError::Sandbox(pycage_sandbox::SandboxError::Spawn(io::Error::other(format!(
                        "the shell helper could not build the sandbox: {message}"
                    )))))
                }
                Err(Failure::JoinNetwork(errno)) => {
                    state.conn = Some(live);
                    Err(SpawnError::Sandbox(SandboxError::Child(ChildFailure {
                        step: Step::JoinNetwork,
                        path: None,
                        errno,
                    })))
                }
                Err(Failure::Broken(message)) => {
                    self.drop_conn(live);
                    Err(self.failed(&mut state, helper_error(message)))
                }
                Err(Failure::OtherBuild(theirs)) => {
                    self.drop_conn(live);
                    // Every helper started from this command would be
                    // that build: give it up even if one served before.
                    state.served = false;
                    let message = format!("it is build {theirs:?}, this runtime {BUILD:?}");
                    Err(self.failed(&mut state, helper_error(message)))
                }
            };
        }
        Err(self.failed(&mut state, helper_error("it exited twice in a row".to_owned())))
    }

    /// A helper failed: given up if none has built a shell yet.
    fn failed(&self, state: &mut State, e: SpawnError) -> SpawnError {
        if !state.served {
            state.given_up = true;
            tracing::warn!(
                helper = ?self.argv,
                "pycage: the sandbox shell helper failed before its first shell ({e}); \
                 this runtime's sandbox shells are forked by the host instead"
            );
        }
        e
    }

    fn drop_conn(&self, conn: Conn) {
        self.pid.store(0, Ordering::Relaxed);
        drop(conn);
    }

    /// The running helper's pid.
    pub(crate) fn pid(&self) -> Option<i32> {
        Some(self.pid.load(Ordering::Relaxed)).filter(|&p| p > 0)
    }

    /// Ends the helper, if one runs: it kills and reaps its shells, and is
    /// reaped. Blocks for that (milliseconds). No helper starts afterwards.
    pub(crate) fn close(&self) {
        let conn = {
            let mut state = crate::sync::lock(&self.state);
            state.closed = true;
            state.conn.take()
        };
        if let Some(conn) = conn {
            self.drop_conn(conn);
        }
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
#[derive(Debug, PartialEq)]
enum Failure {
    /// The helper is gone or spoke nonsense: it must be replaced.
    Broken(String),
    /// The helper could not build this shell, and said why.
    Refused(String),
    /// The shell could not join the network namespace it was given (errno).
    JoinNetwork(i32),
    /// The helper is another build (named): no helper from its command will do.
    OtherBuild(String),
}

fn send(sock: &OwnedFd, data: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_REPLY_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors"));
    }
    let sent = loop {
        match rustix::net::sendmsg(sock, &[IoSlice::new(data)], &mut control, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
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
    parse_reply(data, fds)
}

fn parse_reply(data: &[u8], fds: Vec<OwnedFd>) -> Result<RemoteShell, Failure> {
    if let Some(text) = data.strip_prefix(&REPLY_ERR) {
        return Err(Failure::Refused(String::from_utf8_lossy(text).into_owned()));
    }
    if let Some(errno) = data.strip_prefix(&REPLY_ERR_JOIN_NET) {
        let errno = <[u8; 4]>::try_from(errno).map_err(|_| Failure::Broken("its answer was malformed".to_owned()))?;
        return Err(Failure::JoinNetwork(i32::from_le_bytes(errno)));
    }
    if let Some(theirs) = data.strip_prefix(&REPLY_BUILD) {
        return Err(Failure::OtherBuild(String::from_utf8_lossy(theirs).into_owned()));
    }
    parse_ok(data, fds).ok_or_else(|| Failure::Broken("its answer was malformed".to_owned()))
}

/// A positive pid (a negative one would name a process group to `kill`).
fn positive(raw: i32) -> Option<Pid> {
    if raw > 0 {
        Pid::from_raw(raw)
    } else {
        None
    }
}

fn parse_ok(data: &[u8], fds: Vec<OwnedFd>) -> Option<RemoteShell> {
    let rest = data.strip_prefix(&REPLY_OK)?;
    let [s0, s1, s2, s3, i0, i1, i2, i3, flags] = <[u8; 9]>::try_from(rest).ok()?;
    let pid = i32::from_le_bytes([s0, s1, s2, s3]);
    positive(pid)?;
    let with = |bit: u8| flags & bit != 0;
    let handoff_fds = 1 + usize::from(with(WITH_SOCK_DIAG)) + usize::from(with(WITH_EGRESS));
    let expected = 1 + usize::from(with(WITH_HANDOFF)) * handoff_fds + 8;
    if fds.len() != expected {
        return None;
    }
    let mut fds = fds.into_iter();
    let pidfd = fds.next()?;
    let handoff = match with(WITH_HANDOFF) {
        true => Some(Handoff {
            init_pid: positive(i32::from_le_bytes([i0, i1, i2, i3]))?,
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
    Some(RemoteShell { pid, pidfd, handoff, join })
}

/// The helper's main loop on its fd 3, which must be a `SOCK_SEQPACKET`
/// socket (what the host passes): anything else is refused, not used.
pub(crate) fn serve_fd3() -> io::Result<()> {
    let sock = crate::process::take_fd3()
        .filter(|fd| rustix::net::sockopt::socket_type(fd) == Ok(SocketType::SEQPACKET))
        .ok_or_else(|| io::Error::other("fd 3 is not a pycage runtime's socket: only a runtime starts the helper"))?;
    serve(sock)
}

/// The helper's main loop on `sock` (its fd 3): serves requests until the
/// host closes its end, then kills and reaps every shell it still has.
pub(crate) fn serve(sock: OwnedFd) -> io::Result<()> {
    // Shells must stay this process's to reap (an inherited SIG_IGN would
    // have the kernel reap them, and std's spawn wait for nothing).
    crate::process::default_sigchld();
    let mut shells: Vec<Pid> = Vec::new();
    let mut buf = vec![0u8; MAX_REQUEST];
    let result = loop {
        shells.retain(|&pid| matches!(rustix::process::waitpid(Some(pid), WaitOptions::NOHANG), Ok(None)));
        let mut poll = [rustix::event::PollFd::new(&sock, rustix::event::PollFlags::IN)];
        // Wake up to reap only while there are shells to reap.
        let every = rustix::event::Timespec { tv_sec: 0, tv_nsec: REAP_EVERY.as_nanos() as i64 };
        match rustix::event::poll(&mut poll, (!shells.is_empty()).then_some(&every)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => break Err(e.into()),
        }
        let (len, mut fds) = match receive(&sock, &mut buf, RecvFlags::DONTWAIT) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => break Err(e),
        };
        if len == 0 {
            break Ok(());
        }
        let reply = match same_build(&buf[..len]) {
            Err(reply) => (reply, Vec::new()),
            Ok(body) => match build(body, &mut fds) {
                Ok((pid, shell)) => {
                    shells.push(pid);
                    encode_ok(pid, shell)
                }
                Err(Refusal::JoinNetwork(errno)) => {
                    ([REPLY_ERR_JOIN_NET.as_slice(), &errno.to_le_bytes()].concat(), Vec::new())
                }
                Err(Refusal::Other(message)) => {
                    let mut data = REPLY_ERR.to_vec();
                    let text = message.as_bytes();
                    data.extend_from_slice(&text[..text.len().min(MAX_REPLY - REPLY_ERR.len())]);
                    (data, Vec::new())
                }
            },
        };
        let borrowed: Vec<_> = reply.1.iter().map(|fd| fd.as_fd()).collect();
        if let Err(e) = send(&sock, &reply.0, &borrowed) {
            break Err(e);
        }
    };
    // The host has gone: no shell outlives the helper's answer to that.
    for pid in shells {
        kill_and_reap(pid);
    }
    result
}

/// The request after its tag and build, or the reply that refuses it: an
/// error for something that is not a request, `ver1` and this helper's
/// build for another build's request.
fn same_build(request: &[u8]) -> Result<&[u8], Vec<u8>> {
    let refuse = |text: &str| [REPLY_ERR.as_slice(), text.as_bytes()].concat();
    let body = request.strip_prefix(&REQUEST_TAG).ok_or_else(|| refuse("not a shell request"))?;
    let (&len, rest) = body.split_first().ok_or_else(|| refuse("an empty request"))?;
    let len = usize::from(len);
    if rest.len() < len {
        return Err(refuse("a request cut short"));
    }
    let (theirs, body) = rest.split_at(len);
    if theirs != BUILD.as_bytes() {
        return Err([REPLY_BUILD.as_slice(), BUILD.as_bytes()].concat());
    }
    Ok(body)
}

/// Why the helper built no shell.
enum Refusal {
    /// The shell could not join the network namespace it was given (errno).
    JoinNetwork(i32),
    Other(String),
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Refusal {
        Refusal::Other(message.to_owned())
    }
}

impl From<SandboxError> for Refusal {
    fn from(e: SandboxError) -> Refusal {
        match e {
            SandboxError::Child(ChildFailure { step: Step::JoinNetwork, errno, .. }) => Refusal::JoinNetwork(errno),
            e => Refusal::Other(e.to_string()),
        }
    }
}

/// Builds the shell a request (after its tag and build) asks for: its
/// supervisor's pid and what it handed over, or why not.
fn build(body: &[u8], fds: &mut Vec<OwnedFd>) -> Result<(Pid, RemoteShell), Refusal> {
    let (&flags, policy) = body.split_first().ok_or("an empty request")?;
    let policy = decode_policy(policy).ok_or("a malformed sandbox policy")?;
    let (with_cgroup, with_userns) = (flags & WITH_CGROUP != 0, flags & WITH_ZYGOTE_USERNS != 0);
    let (outer_net, with_net_ns) = (flags & WITH_OUTER_NET != 0, flags & WITH_NET_NS != 0);
    if flags & !(WITH_CGROUP | WITH_ZYGOTE_USERNS | WITH_OUTER_NET | WITH_NET_NS) != 0
        || (with_net_ns && !outer_net)
        || fds.len() != usize::from(with_cgroup) + usize::from(with_userns) + usize::from(with_net_ns)
    {
        return Err("the request's descriptors do not match it".into());
    }
    let net_ns = if with_net_ns { fds.pop() } else { None };
    let userns = if with_userns { fds.pop() } else { None };
    let cgroup = if with_cgroup { fds.pop() } else { None };
    let mut prepared = pycage_sandbox::Prepared::new(&policy)?;
    if let Some(procs) = cgroup {
        prepared.join_cgroup(procs);
    }
    if let Some(userns) = userns {
        prepared.join_zygote_user_namespace(userns);
    }
    // The host recycles the namespace: it must be outside the run's.
    if outer_net && !prepared.outer_network_namespace(net_ns) {
        return Err("this run's network namespace cannot be made outside its user namespace".into());
    }
    let prepared = Arc::new(prepared.into_shell());
    let raw = spawn::fork_shell(&prepared).map_err(|e| match e {
        SpawnError::Sandbox(e) => Refusal::from(e),
        e => Refusal::Other(e.to_string()),
    })?;
    let pid = Pid::from_raw(raw).ok_or("the shell has pid 0")?;
    let shell = (|| {
        // Our child, not reaped yet: the pidfd names it.
        let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty())
            .map_err(|e| Refusal::Other(format!("pidfd_open: {e}")))?;
        let (handoff, join) = prepared.take_shell()?;
        Ok(RemoteShell { pid: raw, pidfd, handoff, join })
    })();
    match shell {
        Ok(shell) => Ok((pid, shell)),
        Err(message) => {
            kill_and_reap(pid);
            Err(message)
        }
    }
}

fn encode_ok(pid: Pid, shell: RemoteShell) -> (Vec<u8>, Vec<OwnedFd>) {
    let mut data = REPLY_OK.to_vec();
    data.extend_from_slice(&pid.as_raw_nonzero().get().to_le_bytes());
    let mut fds = vec![shell.pidfd];
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

    /// A helper of another build answers with its build, which the host
    /// reads as a reason to give the helper up, not to retry it.
    #[test]
    fn builds_must_match() {
        let request = |build: &[u8]| [REQUEST_TAG.as_slice(), &[build.len() as u8], build, &[0, 1, 2]].concat();
        assert_eq!(same_build(&request(BUILD.as_bytes())), Ok([0u8, 1, 2].as_slice()));
        let reply = same_build(&request(b"0.0.9/shell-helper-1")).unwrap_err();
        assert_eq!(parse_reply(&reply, Vec::new()).err(), Some(Failure::OtherBuild(BUILD.to_owned())));
        // Not a request, or one cut inside its build: refused, not a build.
        for bad in [&b"xxxx"[..], &REQUEST_TAG[..], &[REQUEST_TAG.as_slice(), &[200, 1]].concat()[..]] {
            let reply = same_build(bad).unwrap_err();
            assert!(matches!(parse_reply(&reply, Vec::new()), Err(Failure::Refused(_))), "{bad:?}");
        }
    }

    /// A failed join of the given network namespace is told apart from
    /// every other failure: only it turns the host's recycling off.
    #[test]
    fn a_failed_network_join_is_its_own_reply() {
        let join = SandboxError::Child(ChildFailure { step: Step::JoinNetwork, path: None, errno: 22 });
        let Refusal::JoinNetwork(errno) = Refusal::from(join) else { panic!("not a network join") };
        let reply = [REPLY_ERR_JOIN_NET.as_slice(), &errno.to_le_bytes()].concat();
        assert_eq!(parse_reply(&reply, Vec::new()).err(), Some(Failure::JoinNetwork(22)));
        let other = SandboxError::Child(ChildFailure { step: Step::UnshareUser, path: None, errno: 1 });
        assert!(matches!(Refusal::from(other), Refusal::Other(m) if m.contains("Operation not permitted")));
        // Cut short or too long: malformed, not a refusal.
        for bad in [&reply[..6], &[reply.as_slice(), &[0]].concat()[..]] {
            assert!(matches!(parse_reply(bad, Vec::new()), Err(Failure::Broken(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_huge_count_allocates_nothing() {
        let mut data = u32::MAX.to_le_bytes().to_vec();
        data.extend_from_slice(&[0; 16]);
        assert_eq!(decode_policy(&data), None);
    }
}
