//! Spawning one child and ending it, with the `unsafe` of the fork and
//! exec hooks (other syscalls are behind `crate::process`'s wrappers).
//!
//! A [`Worker`] is a started `python3 -I` running the bootstrap, blocked on
//! its `boot` frame: it can be started before its request is known (a warm
//! pool or, later, a fork server hand out the same thing). Its parts:
//!
//! - fd 3 is one end of a Unix socketpair, installed with `dup2` between fork
//!   and exec; fd 0 is `/dev/null`; fd 1 and 2 are the same pipe, so raw
//!   writes to either arrive at the host in the order they were made;
//! - a scrubbed environment, the run's working directory as cwd and
//!   another directory as `HOME` and `TMPDIR` (in process isolation a
//!   private 0700 host directory and its `work/`; in the sandbox `/tmp`
//!   and `/work`), its own process group, and `PR_SET_PDEATHSIG`
//!   with a `getppid` re-check so a dying host takes the child with it;
//! - a pidfd, so the host learns of the exit without reaping: the group is
//!   killed while the child is a zombie (its pid, and so the group id,
//!   cannot be reused yet), and only then is the child reaped with
//!   `wait4(WNOHANG)`, which also reports its CPU time. No tokio worker
//!   thread ever blocks in a wait: the exit is awaited on the pidfd first.
//!
//! Dropping a `Worker` always kills the group and reaps the child (at once
//! if it is already dead, else on a dedicated reaper thread): no zombie, no
//! orphan, no fd or directory left behind.
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
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustix::process::{Pid, PidfdFlags, Signal};
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use pycage_files::cleanup::RunDir;
use pycage_process::{wait4, Exit, Reaper};
use pycage_sandbox::fork::{cloexec_above_fd3, die_with_parent, install_fd3};
use pycage_zygote::{Spawned, Zygote, ZygoteError};

/// Work done in the forked child right before exec (e.g. entering the sandbox).
pub(crate) trait PreExec: Send + Sync + 'static {
    /// # Safety
    /// Runs between fork and exec in a copy of a multi-threaded process:
    /// only async-signal-safe work is allowed.
    unsafe fn pre_exec(&self) -> io::Result<()>;

    /// Turns a failed spawn into the error naming what failed in the child
    /// (the sandbox's step and errno), if the hook recorded one.
    fn explain(&self, e: io::Error) -> SpawnError {
        SpawnError::Exec(e)
    }
}

/// Why a child could not be started. A run whose child cannot start settles
/// as `worker-exit` with this error's message: the program never ran, and
/// the caller did nothing wrong (misuse is caught before anything is spawned).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The run directory could not be created or prepared.
    #[error("could not prepare the run directory: {0}")]
    RunDir(#[source] io::Error),
    /// The run directory could not be handed to the run's uid.
    #[error("could not hand the run directory to uid {uid}: {source}")]
    RunDirOwner {
        uid: u32,
        #[source]
        source: io::Error,
    },
    /// The sandbox could not be prepared in the parent, or a step of it
    /// failed in the child (the error names the step and errno).
    #[error(transparent)]
    Sandbox(#[from] pycage_sandbox::SandboxError),
    /// The socketpair, pipe or pidfd for the child could not be created.
    #[error("could not set up the child's channels: {0}")]
    Channel(#[source] io::Error),
    /// The interpreter could not be executed.
    #[error("could not execute the interpreter: {0}")]
    Exec(#[source] io::Error),
    /// The zygote could not fork the child.
    #[error(transparent)]
    Zygote(#[from] ZygoteError),
    /// The run's cgroup (under a delegated cgroup v2 subtree) could not be
    /// created or joined.
    #[error("could not set up the run's cgroup: {0}")]
    Cgroup(#[source] io::Error),
    /// No sandbox uid could be leased for the run (root hosts).
    #[error(transparent)]
    Lease(#[from] pycage_sandbox::lease::LeaseError),
    /// The shell helper (`RuntimeConfig::shell_helper`) could not be
    /// started, or stopped answering; the next shell starts another.
    #[error("the sandbox shell helper failed: {0}")]
    ShellHelper(String),
    /// The request's inputs could not be placed in the run's directory.
    #[error("could not copy the run's inputs: {0}")]
    Inputs(String),
}

/// A run's process could not be started: which interpreter, and why. A run
/// settles with it as `worker-exit` (the program never ran).
#[derive(Debug, thiserror::Error)]
#[error("could not start {}: {source}", python.display())]
pub struct StartError {
    /// The interpreter that was to run the program.
    pub python: std::path::PathBuf,
    /// What failed.
    #[source]
    pub source: SpawnError,
}

pub(crate) struct Worker {
    /// The child's pid; it names the child (and its process group) until
    /// the child is reaped.
    pid: i32,
    /// `None` only while `spawn` is still building the worker.
    pidfd: Option<AsyncFd<OwnedFd>>,
    pub sock: Option<pycage_channel::channel::Channel>,
    /// The read end of the one pipe that is both the child's fd 1 and fd 2.
    pub output: Option<pipe::Receiver>,
    exit: Option<Exit>,
    /// Who reaps the child.
    parent: Parent,
    /// The run's host directory (process isolation): removed when the last
    /// holder drops it, after the child is dead.
    run_dir: Option<Arc<RunDir>>,
    /// Another process the run owns: the sandbox shell a zygote's child
    /// joined (its supervisor is this host's child). Stopped and reaped
    /// with this one; its guards (lease, cgroup) go with it.
    companion: Option<Box<Worker>>,
    /// Who reaps the child if it is dropped still dying (exec'd children).
    reaper: Option<Arc<Reaper>>,
    /// A sandbox shell's supervisor: a pidfd of the shell's init (see
    /// [`Worker::end_through_init`]).
    shell_init: Option<OwnedFd>,
    /// The interpreter's `PYTHONHASHSEED`, when pycage set one (a runtime
    /// with a journal key: a durable run's journal records it).
    pub hash_seed: Option<u32>,
    /// Dropped after the child is reaped (a uid lease, ...).
    _guards: Vec<Guard>,
}

/// Something a worker keeps until its child is reaped.
pub(crate) type Guard = Box<dyn std::any::Any + Send + Sync>;

/// The child's parent, which alone can reap it.
enum Parent {
    /// This process (an exec'd child).
    Host,
    /// A zygote, which reaps child `id` when asked.
    Zygote { zygote: Zygote, id: u64 },
    /// The shell helper, which reaps the child when it exits: only its
    /// pidfd names it, and its death takes the rest of its shell.
    Helper,
}

/// What to start. Paths are as the child sees them.
pub(crate) struct SpawnSpec<'a> {
    pub python: &'a Path,
    pub bootstrap_dir: &'a Path,
    /// Modules the child imports before it serves its run
    /// (`pycage.preload`, as the zygote would).
    pub preload: &'a [String],
    /// `HOME`.
    pub home: &'a Path,
    /// `TMPDIR`.
    pub tmp: &'a Path,
    /// The working directory to enter before exec; `None` when the
    /// `pre_exec` hook sets its own (the sandbox).
    pub cwd: Option<&'a Path>,
    /// Extra environment.
    pub env: &'a [(std::ffi::OsString, std::ffi::OsString)],
    pub run_dir: Option<Arc<RunDir>>,
    pub guards: Vec<Guard>,
    pub pre_exec: Option<Arc<dyn PreExec>>,
    /// The runtime's reaper.
    pub reaper: Arc<Reaper>,
    /// `PYTHONHASHSEED` for the interpreter (see `process::interpreter_args`).
    pub hash_seed: Option<u32>,
}

/// Host-side ends of a child's channels, made before it exists.
pub(crate) struct Channels {
    /// Our end of the fd-3 socketpair.
    pub host: UnixStream,
    /// The child's end (its fd 3).
    pub child: UnixStream,
    /// Read end of the fd 1/fd 2 pipe.
    pub output_rx: std::io::PipeReader,
    /// Write end (the child's fd 1 and fd 2).
    pub output_tx: std::io::PipeWriter,
}

impl Channels {
    pub(crate) fn new() -> Result<Channels, SpawnError> {
        // The child's end must not be numbered 0-2, where its stdio goes.
        pycage_sandbox::occupy_low_fds();
        let (host, child) = UnixStream::pair().map_err(SpawnError::Channel)?;
        // One pipe for fd 1 and fd 2: raw writes to either keep their order.
        let (output_rx, output_tx) = std::io::pipe().map_err(SpawnError::Channel)?;
        Ok(Channels { host, child, output_rx, output_tx })
    }
}

impl Worker {
    pub(crate) fn spawn(spec: SpawnSpec<'_>) -> Result<Worker, SpawnError> {
        let Channels { host: host_end, child: child_end, output_rx: out_rx, output_tx: out_tx } = Channels::new()?;
        let child_fd = child_end.as_raw_fd();
        let parent = rustix::process::getpid();
        let entry = if spec.preload.is_empty() { "pycage.bootstrap" } else { "pycage.preload" };
        let mut cmd = Command::new(spec.python);
        cmd.args(pycage_process::interpreter_args(&["-B"], spec.bootstrap_dir, entry, spec.hash_seed))
            .env_clear()
            .env("HOME", spec.home)
            .env("TMPDIR", spec.tmp)
            .env("PATH", pycage_process::run_path(spec.python))
            .env("LANG", "C.UTF-8")
            .envs(spec.env.iter().map(|(k, v)| (k, v)));
        if !spec.preload.is_empty() {
            cmd.env("PYCAGE_PRELOAD", crate::interpreter::preload_argument(spec.preload));
        }
        if let Some(seed) = spec.hash_seed {
            cmd.env("PYTHONHASHSEED", seed.to_string());
        }
        if let Some(cwd) = spec.cwd {
            cmd.current_dir(cwd);
        }
        cmd.stdin(Stdio::null())
            .stdout(out_tx.try_clone().map_err(SpawnError::Channel)?)
            .stderr(out_tx)
            .process_group(0);
        let extra = spec.pre_exec;
        let hook = extra.clone();
        // SAFETY: the closure runs in the forked child before exec and makes
        // only async-signal-safe calls (dup2, fcntl, prctl, getppid,
        // sched_setscheduler, _exit) plus the PreExec hook, whose contract
        // requires the same.
        unsafe {
            cmd.pre_exec(move || {
                install_fd3(child_fd)?;
                cloexec_above_fd3();
                die_with_parent(parent)?;
                // A program is an ordinary process, whatever thread (a
                // background one) started it.
                pycage_process::ordinary_scheduling();
                if let Some(hook) = &hook {
                    hook.pre_exec()?;
                }
                Ok(())
            });
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Err(match &extra {
                    Some(h) => h.explain(e),
                    None => SpawnError::Exec(e),
                })
            }
        };
        drop(child_end);
        // The write ends were moved into `cmd`: drop it so only the child
        // holds them, or EOF would never come.
        drop(cmd);
        // From here on the child runs: any failure must kill and reap it,
        // which dropping the half-built worker does.
        let pid = child.id() as i32;
        let mut worker = Worker::unattached(pid, Parent::Host, spec.guards);
        worker.run_dir = spec.run_dir;
        worker.reaper = Some(spec.reaper);
        worker.hash_seed = spec.hash_seed;
        let pidfd = Pid::from_raw(pid)
            .ok_or_else(|| io::Error::other("child has pid 0"))
            .and_then(|pid| rustix::process::pidfd_open(pid, PidfdFlags::NONBLOCK).map_err(io::Error::from))
            .map_err(SpawnError::Channel)?;
        worker.attach(pidfd, host_end, OwnedFd::from(out_rx))?;
        Ok(worker)
    }

    /// A child a zygote forked, with the host ends of its channels. Needs a
    /// tokio runtime (the channels are registered with it).
    pub(crate) fn from_zygote(
        zygote: Zygote,
        spawned: Spawned,
        host: UnixStream,
        output_rx: OwnedFd,
        run_dir: Option<RunDir>,
        companion: Option<Worker>,
    ) -> Result<Worker, SpawnError> {
        let hash_seed = zygote.hash_seed();
        let mut worker = Worker::unattached(spawned.pid, Parent::Zygote { zygote, id: spawned.id }, Vec::new());
        worker.hash_seed = hash_seed;
        worker.run_dir = run_dir.map(Arc::new);
        worker.companion = companion.map(Box::new);
        rustix::io::ioctl_fionbio(&spawned.pidfd, true).map_err(|e| SpawnError::Channel(e.into()))?;
        worker.attach(spawned.pidfd, host, output_rx)?;
        Ok(worker)
    }

    /// A sandbox shell's supervisor that the shell helper forked: `pidfd`
    /// names it. Needs a tokio runtime (the pidfd is registered with it).
    pub(crate) fn from_helper(pid: i32, pidfd: OwnedFd, guards: Vec<Guard>) -> Result<Worker, SpawnError> {
        // A worker without a pidfd could not signal the shell: on failure,
        // kill it through the pidfd (the helper then reaps it).
        let killer = match pidfd.try_clone() {
            Ok(killer) => killer,
            Err(e) => {
                let _ = rustix::process::pidfd_send_signal(&pidfd, Signal::KILL);
                return Err(SpawnError::Channel(e));
            }
        };
        let mut worker = Worker::unattached(pid, Parent::Helper, guards);
        let watched = rustix::io::ioctl_fionbio(&pidfd, true)
            .map_err(|e| SpawnError::Channel(e.into()))
            .and_then(|()| worker.watch(pidfd));
        match watched {
            Ok(()) => Ok(worker),
            Err(e) => {
                let _ = rustix::process::pidfd_send_signal(&killer, Signal::KILL);
                Err(e)
            }
        }
    }

    /// Keep `guard` until the child is reaped (or this worker dropped).
    pub(crate) fn keep(&mut self, guard: Guard) {
        self._guards.push(guard);
    }

    /// A worker for child `pid` whose pidfd and channels are not attached
    /// yet: dropping it kills and reaps the child as `parent` can.
    fn unattached(pid: i32, parent: Parent, guards: Vec<Guard>) -> Worker {
        Worker {
            pid,
            pidfd: None,
            sock: None,
            output: None,
            exit: None,
            parent,
            run_dir: None,
            companion: None,
            reaper: None,
            shell_init: None,
            hash_seed: None,
            _guards: guards,
        }
    }

    /// A sandbox shell's supervisor that this process forked, whose init
    /// `init` (a pidfd) names: [`Worker::kill_and_reap`] ends the shell by
    /// killing the init first. The supervisor then reaps it and exits.
    /// Killed at once, as a group, both die together, and the init,
    /// outliving its parent an instant, goes to this process's reaper (a
    /// host that is PID 1 itself, a container's entrypoint, kept a zombie
    /// per run). The helper's shells need none: it is their subreaper.
    /// A dropped worker ends the same way, on the runtime's reaper thread.
    pub(crate) fn end_through_init(&mut self, init: OwnedFd) {
        self.shell_init = Some(init);
    }

    fn watch(&mut self, pidfd: OwnedFd) -> Result<(), SpawnError> {
        // SAFETY: the AsyncFd owns this OwnedFd, which stays open and names
        // the same pidfd until the AsyncFd is dropped.
        let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
            .map_err(|e| SpawnError::Channel(io::Error::other(e.to_string())))?;
        self.pidfd = Some(pidfd);
        Ok(())
    }

    fn attach(&mut self, pidfd: OwnedFd, host: UnixStream, output_rx: OwnedFd) -> Result<(), SpawnError> {
        self.watch(pidfd)?;
        host.set_nonblocking(true).map_err(SpawnError::Channel)?;
        // Registered with the reactor only if a worker thread drives the run
        // (`Channel`).
        self.sock = Some(pycage_channel::channel::Channel::new(host));
        self.output = Some(pipe::Receiver::from_owned_fd(output_rx).map_err(SpawnError::Channel)?);
        Ok(())
    }

    pub(crate) fn pid(&self) -> Option<Pid> {
        Pid::from_raw(self.pid)
    }

    /// Whether the child has exited (reaped or not), without waiting.
    pub(crate) fn has_exited(&self) -> bool {
        self.exit.is_some() || self.pidfd.as_ref().is_some_and(|fd| pycage_process::has_exited(fd.get_ref()))
    }

    /// Whether a zygote forked this child.
    pub(crate) fn is_zygote_child(&self) -> bool {
        matches!(self.parent, Parent::Zygote { .. })
    }

    /// The run's host directory, in process isolation.
    pub(crate) fn run_dir(&self) -> Option<&Arc<RunDir>> {
        self.run_dir.as_ref()
    }

    /// Signals the whole process group (no-op once reaped): by its group id
    /// while the child is provably unreaped, else the child alone through
    /// its pidfd (see `crate::process`).
    pub(crate) fn signal_group(&self, sig: Signal) {
        if self.exit.is_some() {
            return;
        }
        let leader_is_ours = match &self.parent {
            // Our own child, not reaped yet (`exit` is unset).
            Parent::Host => true,
            // The zygote reaps only when asked, and it has not been: its
            // child is unreaped while the zygote lives.
            Parent::Zygote { zygote, .. } => zygote.holds_children(),
            // The helper may have reaped it (or died, and init did).
            Parent::Helper => false,
        };
        match &self.pidfd {
            Some(pidfd) => pycage_process::signal_run_group(self.pid, pidfd.get_ref(), leader_is_ours, sig),
            None if leader_is_ours => {
                if let Some(pid) = self.pid() {
                    let _ = rustix::process::kill_process_group(pid, sig);
                }
            }
            None => {}
        }
    }

    /// Resolves when the child has exited (it stays a zombie until reaped).
    pub(crate) async fn exited(&self) {
        if self.exit.is_some() {
            return;
        }
        let Some(pidfd) = &self.pidfd else { return };
        loop {
            match pidfd.readable().await {
                // A pidfd stays readable once the process has exited.
                Ok(_guard) => return,
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    /// Kills what is left of the group, waits (without blocking a thread)
    /// until the child has exited, and reaps it.
    pub(crate) async fn kill_and_reap(&mut self) -> Exit {
        let exit = match self.exit {
            Some(e) => e,
            None => {
                if let Some(init) = self.shell_init.take() {
                    // A shell: its init first, which its supervisor reaps
                    // before it exits (see `end_through_init`); the group
                    // below only if that takes too long.
                    if rustix::process::pidfd_send_signal(&init, Signal::KILL).is_ok() {
                        let _ = tokio::time::timeout(SHELL_END_GRACE, self.exited()).await;
                    }
                }
                // The child is a zombie or still running: either way its pid
                // still names this group, so no other process can be hit.
                self.signal_group(Signal::KILL);
                self.exited().await;
                let exit = match &self.parent {
                    Parent::Host => wait4(self.pid, libc::WNOHANG),
                    Parent::Zygote { zygote, id } => zygote.reap(*id).await,
                    // Reaped by the helper; its status is not ours to know.
                    Parent::Helper => None,
                };
                // `None`: someone else reaped it, or its zygote died (and the
                // child with it, by its death signal); either way it is gone.
                let exit = exit.unwrap_or(Exit { status: ExitStatus::from_raw(libc::SIGKILL), cpu: Duration::ZERO });
                self.exit = Some(exit);
                exit
            }
        };
        if let Some(companion) = self.companion.as_mut() {
            // The sandbox shell: its supervisor's death takes the run's whole
            // PID namespace with it.
            Box::pin(companion.kill_and_reap()).await;
        }
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
        self.kill_and_reap().await
    }
}

/// How long ending a shell waits for its supervisor to reap its killed
/// init and exit, before it kills the supervisor too. The init exits once
/// every process of its namespace is reaped (the run's program, its
/// zygote's to reap, is reaped before its shell is ended).
const SHELL_END_GRACE: Duration = Duration::from_secs(1);

impl Drop for Worker {
    /// Kills the group; reaps the child now if it is already dead, else
    /// hands it to the reaper thread (it dies at once from SIGKILL, but a
    /// drop must not wait for that on an async worker thread).
    fn drop(&mut self) {
        if self.exit.is_some() {
            return;
        }
        if let (Some(init), Parent::Host, Some(reaper), Some(pidfd)) =
            (self.shell_init.take(), &self.parent, &self.reaper, &self.pidfd)
        {
            // A shell this process forked, dropped (see `end_through_init`):
            // its init first; the reaper waits for the supervisor to reap it
            // and exit, and kills its group only after the grace.
            if rustix::process::pidfd_send_signal(&init, Signal::KILL).is_ok() {
                if let Ok(watch) = pidfd.get_ref().try_clone() {
                    reaper.adopt_ending(self.pid, watch, SHELL_END_GRACE);
                    return;
                }
            }
        }
        self.signal_group(Signal::KILL);
        match &self.parent {
            Parent::Host => {
                if wait4(self.pid, libc::WNOHANG).is_none() {
                    match &self.reaper {
                        Some(reaper) => reaper.adopt(self.pid),
                        // Cannot happen (exec'd workers have one); the
                        // child is dying of SIGKILL: wait on this thread.
                        None => {
                            let _ = wait4(self.pid, 0);
                        }
                    }
                }
            }
            Parent::Zygote { zygote, id } => zygote.reap_later(*id),
            Parent::Helper => {}
        }
    }
}

/// Starts the shell helper, `argv`, with `sock` as its fd 3, in its own
/// process group, dying with this process's current thread (the spawner).
/// Returns its pid: this process's child, to reap.
pub(crate) fn start_helper(argv: &[std::ffi::OsString], sock: OwnedFd) -> Result<i32, SpawnError> {
    let (program, args) = argv.split_first().ok_or_else(|| SpawnError::Exec(io::Error::other("empty argv")))?;
    let parent = rustix::process::getpid();
    let fd = sock.as_raw_fd();
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).process_group(0);
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe calls (dup2, fcntl, close_range, prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            install_fd3(fd)?;
            cloexec_above_fd3();
            die_with_parent(parent)
        });
    }
    let child = cmd.spawn().map_err(SpawnError::Exec)?;
    drop(sock);
    Ok(child.id() as i32)
}

/// A long-lived thread that forks sandbox shells. `PR_SET_PDEATHSIG` fires
/// when the *thread* that forked a process exits, so processes that must
/// live as long as the runtime are forked from a thread that does: never
/// from a tokio worker that may be retired, nor a caller's thread (a Python
/// host's, say) that may end first.
pub(crate) struct Spawner {
    jobs: std::sync::Mutex<std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>>,
}

impl Spawner {
    pub(crate) fn new() -> std::io::Result<Spawner> {
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        std::thread::Builder::new().name("pycage-spawner".into()).spawn(move || {
            pycage_process::run_in_background();
            for job in rx {
                job();
            }
        })?;
        Ok(Spawner { jobs: std::sync::Mutex::new(tx) })
    }

    /// Runs `job` on the spawner thread, inside the tokio runtime of the
    /// caller (what it spawns registers with that runtime's reactor).
    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) -> bool {
        let handle = tokio::runtime::Handle::try_current().ok();
        let job = Box::new(move || {
            let _entered = handle.as_ref().map(tokio::runtime::Handle::enter);
            job();
        });
        crate::sync::lock(&self.jobs).send(job).is_ok()
    }

    /// Runs `job` on the spawner thread and waits for its result.
    pub(crate) async fn run<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if !self.submit(move || {
            let _ = tx.send(job());
        }) {
            return None;
        }
        rx.await.ok()
    }
}
