//! Spawning one child and ending it: the only module with `unsafe`.
//!
//! A [`Worker`] is a started `python3 -I` running the bootstrap, blocked on
//! its `boot` frame: it can be started before its request is known (a warm
//! pool or, later, a fork server hand out the same thing). Its parts:
//!
//! - fd 3 is one end of a Unix socketpair, installed with `dup2` between fork
//!   and exec; fd 0 is `/dev/null`; fd 1 and 2 are the same pipe, so raw
//!   writes to either arrive at the host in the order they were made;
//! - a scrubbed environment, the run's directory as cwd and `HOME`, its own
//!   process group, and `PR_SET_PDEATHSIG`
//!   with a `getppid` re-check so a dying host takes the child with it;
//! - a pidfd, so the host learns of the exit without reaping: the group is
//!   killed while the child is a zombie (its pid, and so the group id,
//!   cannot be reused yet), and only then is the child reaped with `wait4`,
//!   which also reports its CPU time.
//!
//! Dropping a `Worker` always kills the group and reaps the child: no
//! zombie, no orphan, no fd or directory left behind.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked exits, not the
//! process. Workers are spawned from the run's own future, i.e. on a tokio
//! worker thread (alive as long as the tokio runtime) or the caller's thread
//! for a current-thread runtime; never from `spawn_blocking` threads, which
//! exit when idle and would take their children with them.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, PidfdFlags, Signal};
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// Work done in the forked child right before exec (e.g. entering the sandbox).
pub(crate) trait PreExec: Send + Sync + 'static {
    /// # Safety
    /// Runs between fork and exec in a copy of a multi-threaded process:
    /// only async-signal-safe work is allowed.
    unsafe fn pre_exec(&self) -> io::Result<()>;

    /// Turns a spawn error into a message naming what failed in the child.
    fn explain(&self, e: io::Error) -> String {
        e.to_string()
    }
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exit {
    pub status: ExitStatus,
    /// User plus system CPU time of the child (and its reaped descendants).
    pub cpu: Duration,
}

pub(crate) struct Worker {
    child: Child,
    pidfd: AsyncFd<OwnedFd>,
    pub sock: Option<tokio::net::UnixStream>,
    /// The read end of the one pipe that is both the child's fd 1 and fd 2.
    pub output: Option<pipe::Receiver>,
    exit: Option<Exit>,
    /// Dropped after the child is reaped: the run directory (removed), a
    /// uid lease (released), ...
    _guards: Vec<Guard>,
}

/// Something a worker keeps until its child is reaped.
pub(crate) type Guard = Box<dyn std::any::Any + Send + Sync>;

/// What to start. Paths are as the child sees them.
pub(crate) struct SpawnSpec<'a> {
    pub python: &'a Path,
    pub bootstrap_dir: &'a Path,
    /// `HOME`.
    pub home: &'a Path,
    /// `TMPDIR`.
    pub tmp: &'a Path,
    /// The working directory to enter before exec; `None` when the
    /// `pre_exec` hook sets its own (the sandbox).
    pub cwd: Option<&'a Path>,
    /// Extra environment.
    pub env: &'a [(std::ffi::OsString, std::ffi::OsString)],
    pub guards: Vec<Guard>,
    pub pre_exec: Option<std::sync::Arc<dyn PreExec>>,
}

fn loader(bootstrap_dir: &Path) -> String {
    let mut quoted = Vec::new();
    pycage_protocol::write_json_string(&mut quoted, &bootstrap_dir.to_string_lossy());
    format!(
        "import sys; sys.path.insert(0, {}); from pycage.bootstrap import main; main()",
        String::from_utf8_lossy(&quoted)
    )
}

impl Worker {
    pub(crate) fn spawn(spec: SpawnSpec<'_>) -> io::Result<Worker> {
        let (host_end, child_end) = UnixStream::pair()?;
        // One pipe for fd 1 and fd 2: raw writes to either keep their order.
        let (out_rx, out_tx) = std::io::pipe()?;
        let child_fd = child_end.as_raw_fd();
        let parent = rustix::process::getpid();
        let mut cmd = Command::new(spec.python);
        cmd.args(["-I", "-B", "-c", &loader(spec.bootstrap_dir)])
            .env_clear()
            .env("HOME", spec.home)
            .env("TMPDIR", spec.tmp)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .envs(spec.env.iter().map(|(k, v)| (k, v)));
        if let Some(cwd) = spec.cwd {
            cmd.current_dir(cwd);
        }
        cmd.stdin(Stdio::null()).stdout(out_tx.try_clone()?).stderr(out_tx).process_group(0);
        let extra = spec.pre_exec;
        let hook = extra.clone();
        // SAFETY: the closure runs in the forked child before exec and makes
        // only async-signal-safe calls (dup2, fcntl, prctl, getppid, _exit)
        // plus the PreExec hook, whose contract requires the same.
        unsafe {
            cmd.pre_exec(move || {
                install_fd3(child_fd)?;
                die_with_parent(parent)?;
                if let Some(hook) = &hook {
                    hook.pre_exec()?;
                }
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Err(match &extra {
                    Some(h) => io::Error::new(e.kind(), h.explain(e)),
                    None => e,
                })
            }
        };
        drop(child_end);
        let pid = Pid::from_raw(child.id() as i32).ok_or_else(|| io::Error::other("child has pid 0"))?;
        let pidfd = match register_pidfd(pid) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        host_end.set_nonblocking(true)?;
        let sock = tokio::net::UnixStream::from_std(host_end)?;
        // The write ends were moved into `cmd`: drop it so only the child
        // holds them, or EOF would never come.
        drop(cmd);
        let output = Some(pipe::Receiver::from_owned_fd(OwnedFd::from(out_rx))?);
        Ok(Worker { child, pidfd, sock: Some(sock), output, exit: None, _guards: spec.guards })
    }

    pub(crate) fn pid(&self) -> Option<Pid> {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Signals the whole process group (no-op once reaped).
    pub(crate) fn signal_group(&self, sig: Signal) {
        if self.exit.is_none() {
            if let Some(pid) = self.pid() {
                let _ = rustix::process::kill_process_group(pid, sig);
            }
        }
    }

    /// Resolves when the child has exited (it stays a zombie until reaped).
    pub(crate) async fn exited(&self) {
        if self.exit.is_some() {
            return;
        }
        loop {
            match self.pidfd.readable().await {
                // A pidfd stays readable once the process has exited.
                Ok(_guard) => return,
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    /// Kills what is left of the group and reaps the child. Call after
    /// `exited` resolved, or to force an end (it sends SIGKILL first).
    pub(crate) fn reap(&mut self) -> Exit {
        if let Some(e) = self.exit {
            return e;
        }
        // The child is a zombie or still running: either way its pid still
        // names this group, so no other process can be hit.
        self.signal_group(Signal::KILL);
        let exit = wait4(self.child.id() as i32);
        self.exit = Some(exit);
        exit
    }

    /// Ends the child: SIGTERM to the group, `grace`, SIGKILL; then reaps.
    pub(crate) async fn stop(&mut self, grace: Duration) -> Exit {
        if self.exit.is_none() {
            let ended = tokio::time::timeout(Duration::ZERO, self.exited()).await.is_ok();
            if !ended {
                self.signal_group(Signal::TERM);
                let _ = tokio::time::timeout(grace, self.exited()).await;
            }
        }
        self.reap()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.reap();
    }
}

fn register_pidfd(pid: Pid) -> io::Result<AsyncFd<OwnedFd>> {
    let fd = rustix::process::pidfd_open(pid, PidfdFlags::NONBLOCK)?;
    // SAFETY: the AsyncFd owns this OwnedFd, which stays open and names the
    // same pidfd until the AsyncFd is dropped.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| io::Error::other(e.to_string()))
}

fn wait4(pid: i32) -> Exit {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to live locals of the right types; wait4
        // only writes through them.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
            return Exit { status: ExitStatus::from_raw(status), cpu: tv(usage.ru_utime) + tv(usage.ru_stime) };
        }
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        // ECHILD: someone else reaped it (should not happen); report a kill.
        return Exit { status: ExitStatus::from_raw(libc::SIGKILL), cpu: Duration::ZERO };
    }
}

/// Makes `fd` the child's fd 3, inheritable across exec.
fn install_fd3(fd: i32) -> io::Result<()> {
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

/// `PR_SET_PDEATHSIG(SIGKILL)`, then checks the parent did not die before
/// the call took effect (the signal would never come).
fn die_with_parent(parent: Pid) -> io::Result<()> {
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

/// A readable description of a wait status.
pub(crate) fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(sig) = status.signal() {
        format!("was killed by signal {sig} ({})", signal_name(sig))
    } else {
        format!("ended with wait status {status}")
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGBUS => "SIGBUS",
        libc::SIGINT => "SIGINT",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}
