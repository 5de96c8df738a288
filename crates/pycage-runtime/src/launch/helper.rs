//! The host's side of the sandbox shell helper
//! ([`pycage_sandbox::helper`]: why a helper, and its wire): starts it
//! when the first shell is wanted, replaces one that died, gives up on one
//! that never worked, and ends it with the runtime.
//!
//! With [`crate::RuntimeConfig::shell_helper`] set, the helper is exec'd
//! once per runtime (lazily, on the spawner thread, dying with it) and
//! forks the zygote path's shells. The host keeps the run's uid lease and
//! cgroup, and holds the supervisor through its pidfd only
//! ([`Worker::from_helper`]): it signals the supervisor alone, through the
//! pidfd (never a pid the helper may have reaped), and the supervisor's
//! death takes the shell's init, and with it the run's PID namespace, by
//! their death signals. What a program joining the shell does to itself
//! (its `JoinPlan`) comes back with the shell: only the helper derives it.
//! A helper that dies takes its shells with it, and so every run and pooled
//! child that used them; the next shell starts a new helper. A helper that
//! cannot start, or fails before it built its first shell (a host whose
//! `sys.executable` is not a Python, say), is given up: shells are then
//! forked by the host, as without one, and a warning says why. A helper of
//! another build (a package upgraded under a running host) is given up too.
//!
//! [`Worker::from_helper`]: crate::launch::spawn::Worker::from_helper

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pycage_sandbox::helper::wire::{self, Failure, RemoteShell, ShellNetwork, BUILD};
use pycage_sandbox::{ChildFailure, SandboxError, SandboxPolicy, Step};
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::launch::spawn::{self, SpawnError};
use pycage_process::Reaper;

/// How long the host waits for a shell. One takes milliseconds; a helper
/// that has not answered in this long is broken, and is replaced (its
/// shells, and the runs using them, end with it).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a helper told to end may take to kill and reap its shells
/// before it is killed.
const END_TIMEOUT: Duration = Duration::from_secs(5);

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
        while !pycage_process::has_exited(&self.pidfd) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let mut fds = [rustix::event::PollFd::new(&self.pidfd, rustix::event::PollFlags::IN)];
            let timeout =
                rustix::event::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
        }
        if pycage_process::wait4(self.pid, libc::WNOHANG).is_none() {
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
        let (request, fds) =
            wire::request(policy, cgroup.as_ref().map(|fd| fd.as_fd()), userns, network).map_err(helper_error)?;
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
            match wire::send(&live.sock, &request, &fds) {
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
            return match wire::receive_reply(&live.sock) {
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
