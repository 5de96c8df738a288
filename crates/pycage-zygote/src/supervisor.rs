//! The zygote: one trusted Python fork server, and the thread that supervises it.
//!
//! A zygote is `python3 -I -B` running `pycage.zygote` (see its module docs
//! for the control protocol). It has imported everything a run needs, runs
//! no model code and has no threads; each `spawn` forks one child that sets
//! itself up and serves exactly one run. Forking a warm interpreter costs
//! about a millisecond where starting one costs tens.
//!
//! Each zygote has one dedicated OS thread on the host (not a tokio task):
//!
//! - it spawns the zygote process, so the zygote's `PR_SET_PDEATHSIG` is tied
//!   to a thread that lives exactly as long as the zygote (the signal fires
//!   when the *thread* that forked exits), and a dying host takes the zygote,
//!   and through theirs, every child, with it;
//! - it owns the control socket (`SOCK_SEQPACKET`: one JSON message per
//!   packet, descriptors attached with `SCM_RIGHTS`), writes requests as the
//!   socket takes them and routes each answer to whoever waits for it, so
//!   it works whatever async runtime (or none) the caller uses;
//! - it watches the zygote's pidfd: when the zygote dies, every pending
//!   request fails with the zygote's last diagnostics, and later requests
//!   fail at once. A dead zygote is replaced by the pool, not here.
//!
//! What the thread decides (each request's id, whom an answer goes to,
//! which answers mean the zygote is broken, its deadlines) is a
//! [`ZygoteMachine`]'s (`super::zygote_machine`, unit-tested without
//! processes or clocks); this module is its I/O.
//!
//! The zygote never reaps a child on its own: the host asks (`reap`) once it
//! has killed what is left of the child's process group, so the child's pid
//! (its group id) cannot be reused while the host may still signal it.
//!
//! The zygote is trusted, but its answers are still parsed with bounds:
//! packets over [`MAX_PACKET`] or that do not parse are counted and dropped.

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use pycage_protocol::zygote::{parse_zygote_answer, ZygoteAnswer, ZygoteRequest, MAX_ZYGOTE_PACKET};
use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketFlags, SocketType,
};
use tokio::sync::oneshot;

use crate::machine::{Answered, Check, ZygoteMachine, STOPPED};
use crate::spec::{encode_spawn, ChildSpec, SentPlans};
use crate::sync::lock;
use pycage_process::{self as process, Exit};

/// Largest control packet accepted from the zygote.
pub const MAX_PACKET: usize = MAX_ZYGOTE_PACKET;

/// Most descriptors one control packet carries (a spawn that joins a
/// sandbox shell: two channels and eight join descriptors).
const MAX_SPAWN_FDS: usize = 10;

/// Bytes of the zygote's own stderr kept for error messages.
const DIAGNOSTICS_TAIL: usize = 4096;

/// Why the zygote could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZygoteError {
    /// The zygote process could not be started.
    #[error("the zygote could not be started: {0}")]
    Start(String),
    /// The zygote exited (or was killed); its last diagnostics follow.
    #[error("the zygote exited{}", diagnostics_suffix(.0))]
    Gone(String),
    /// The zygote refused the request (e.g. fork failed).
    #[error("the zygote could not fork a child: {0}")]
    Refused(String),
}

fn diagnostics_suffix(d: &str) -> String {
    if d.is_empty() {
        String::new()
    } else {
        format!(": {d}")
    }
}

/// A forked child, as the zygote reported it.
#[derive(Debug)]
pub struct Spawned {
    pub id: u64,
    pub pid: i32,
    pub pidfd: OwnedFd,
}

/// A caller's wait for a spawn answer. A caller that goes away (its run's
/// deadline, a cancel) may do so after the answer was put in the channel
/// and before it read it: the child is then in the dropped receiver, and
/// nobody would kill or reap it (it would exit once its fd 3 closed and
/// stay a zombie of the zygote for the zygote's life). On drop, the
/// channel is closed (a later answer is discarded by the supervisor) and
/// an answer already in it is killed and reaped here.
struct SpawnWait<'a> {
    rx: oneshot::Receiver<Result<Spawned, ZygoteError>>,
    zygote: &'a Zygote,
    received: bool,
}

impl Drop for SpawnWait<'_> {
    fn drop(&mut self) {
        if self.received {
            return;
        }
        self.rx.close();
        if let Ok(Ok(spawned)) = self.rx.try_recv() {
            pycage_process::kill_run_group(spawned.pid, &spawned.pidfd, self.zygote.holds_children());
            self.zygote.reap_later(spawned.id);
        }
    }
}

/// Where the answer to a spawn goes.
pub enum SpawnReply {
    /// To one waiting caller.
    Caller(oneshot::Sender<Result<Spawned, ZygoteError>>),
    /// To a pool that ordered the child ahead of demand.
    Pool(Box<dyn SpawnOrder>),
}

/// A child ordered by a pool, with what the pool keeps of it (its own
/// type: the zygote never looks inside). Told its outcome once, on the
/// supervisor thread; dropped unanswered only when the request never
/// reached the supervisor ([`Zygote::spawn_into`] then says so).
pub trait SpawnOrder: Send {
    /// The child is forked and set up.
    fn spawned(self: Box<Self>, child: Spawned);
    /// It was not: the order's resources are dropped.
    fn failed(self: Box<Self>, error: ZygoteError);
}

enum Request {
    Spawn { spec: Box<ChildSpec>, fds: Vec<OwnedFd>, reply: SpawnReply },
    Reap { id: u64, reply: Option<oneshot::Sender<Exit>> },
    Quit,
}

struct Shared {
    requests: Mutex<Option<mpsc::Sender<Request>>>,
    wake: OwnedFd,
    /// 0 until the process exists.
    pid: AtomicI32,
    started: Instant,
    spawns: AtomicU64,
    /// Reaps asked for and not answered yet (for `Runtime::wait_idle`).
    reaping: AtomicU64,
    ready: AtomicBool,
    dead: AtomicBool,
    /// A copy of the zygote's pidfd: readable once it has exited. While it
    /// is not, the zygote holds every child it forked unreaped (it reaps
    /// only when asked), so their pids, and process group ids, are ours.
    pidfd: Mutex<Option<OwnedFd>>,
    diagnostics: Mutex<Vec<u8>>,
    /// Resolved when the supervisor thread is done (the zygote reaped).
    finished: Mutex<Option<oneshot::Receiver<()>>>,
}

impl Shared {
    fn send(&self, request: Request) -> bool {
        let reap = matches!(request, Request::Reap { .. });
        if reap {
            // Counted before the supervisor can answer it.
            self.reaping.fetch_add(1, Ordering::AcqRel);
        }
        let sent = lock(&self.requests).as_ref().is_some_and(|tx| tx.send(request).is_ok());
        if reap && !sent {
            self.reaping.fetch_sub(1, Ordering::AcqRel);
        }
        if sent {
            let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        }
        sent
    }

    fn diagnostics(&self) -> String {
        let tail = lock(&self.diagnostics).clone();
        String::from_utf8_lossy(&tail).trim().to_owned()
    }

    fn note(&self, text: &str) {
        let mut d = lock(&self.diagnostics);
        if !d.is_empty() {
            d.extend_from_slice(b"; ");
        }
        d.extend_from_slice(text.as_bytes());
    }
}

/// A running zygote. Cheap to clone; when the last clone is dropped the
/// zygote is asked to quit, and exits once its last child is reaped.
#[derive(Clone)]
pub struct Zygote {
    shared: Arc<Shared>,
    _quit_on_drop: Arc<QuitOnDrop>,
    hash_seed: Option<u32>,
}

struct QuitOnDrop(Arc<Shared>);

impl Drop for QuitOnDrop {
    fn drop(&mut self) {
        self.0.send(Request::Quit);
        *lock(&self.0.requests) = None;
    }
}

/// How to start a zygote.
pub struct ZygoteSpec {
    pub python: PathBuf,
    pub bootstrap_dir: PathBuf,
    /// Modules it imports before it forks (`PYCAGE_PRELOAD`).
    pub preload: Vec<String>,
    /// Extra environment of its own (not its children's).
    pub env: Vec<(String, String)>,
    /// A user namespace to start it in (a sandbox runtime on a host that
    /// is not root: `Sandboxes::zygote_userns`).
    pub userns: Option<Arc<OwnedFd>>,
    /// Its `PYTHONHASHSEED`, which its children share: known when a
    /// durable run's journal must record it (`process::interpreter_args`).
    pub hash_seed: Option<u32>,
}

impl Zygote {
    /// Starts the zygote process on its own supervisor thread. Returns once
    /// the process exists; it is ready for requests at once (they queue
    /// until it has imported everything).
    pub fn start(spec: ZygoteSpec) -> Result<Zygote, ZygoteError> {
        let start_err = |e: io::Error| ZygoteError::Start(e.to_string());
        let hash_seed = spec.hash_seed;
        let wake = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| start_err(e.into()))?;
        let thread_wake = wake.try_clone().map_err(start_err)?;
        let (tx, rx) = mpsc::channel();
        let (finished_tx, finished_rx) = oneshot::channel();
        let shared = Arc::new(Shared {
            requests: Mutex::new(Some(tx)),
            wake,
            pid: AtomicI32::new(0),
            started: Instant::now(),
            spawns: AtomicU64::new(0),
            reaping: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            pidfd: Mutex::new(None),
            diagnostics: Mutex::new(Vec::new()),
            finished: Mutex::new(Some(finished_rx)),
        });
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("pycage-zygote".into())
            .spawn(move || {
                match launch(&spec) {
                    Ok(launched) => {
                        *lock(&thread_shared.pidfd) = launched.pidfd.try_clone().ok();
                        thread_shared.pid.store(launched.pid, Ordering::Release);
                        Supervisor::new(launched, rx, thread_wake, thread_shared).run();
                    }
                    Err(e) => {
                        thread_shared.note(&e.to_string());
                        fail_all(&thread_shared, &rx);
                    }
                }
                let _ = finished_tx.send(());
            })
            .map_err(start_err)?;
        Ok(Zygote { _quit_on_drop: Arc::new(QuitOnDrop(Arc::clone(&shared))), shared, hash_seed })
    }

    /// Its children's hash seed, when pycage chose it.
    pub fn hash_seed(&self) -> Option<u32> {
        self.hash_seed
    }

    /// The zygote's pid.
    pub fn pid(&self) -> i32 {
        self.shared.pid.load(Ordering::Acquire)
    }

    /// Whether both handles name the same zygote.
    pub fn same(&self, other: &Zygote) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Whether the zygote said it is ready (everything imported).
    pub fn is_ready(&self) -> bool {
        self.shared.ready.load(Ordering::Acquire)
    }

    /// Whether the zygote is gone.
    pub fn is_dead(&self) -> bool {
        self.shared.dead.load(Ordering::Acquire)
    }

    /// Whether the zygote provably still holds its children unreaped: it
    /// has not exited (its pidfd says so now, not the supervisor thread's
    /// last look). Only then does a child's pid still name that child and
    /// its process group; otherwise the child may have been reaped by
    /// someone else and its pid recycled, and only its pidfd reaches it.
    pub fn holds_children(&self) -> bool {
        if self.is_dead() {
            return false;
        }
        match lock(&self.shared.pidfd).as_ref() {
            Some(fd) => !pycage_process::has_exited(fd),
            None => false,
        }
    }

    /// Children forked so far.
    pub fn spawns(&self) -> u64 {
        self.shared.spawns.load(Ordering::Relaxed)
    }

    /// When it was started.
    pub fn started(&self) -> Instant {
        self.shared.started
    }

    fn gone(&self) -> ZygoteError {
        ZygoteError::Gone(self.shared.diagnostics())
    }

    /// Asks for a child; `fds` become its fd 3 and its fd 1/fd 2 (then the
    /// join descriptors, when `spec.join` is set).
    pub async fn spawn(&self, spec: ChildSpec, fds: Vec<OwnedFd>) -> Result<Spawned, ZygoteError> {
        let (tx, rx) = oneshot::channel();
        self.shared.spawns.fetch_add(1, Ordering::Relaxed);
        if !self.shared.send(Request::Spawn { spec: Box::new(spec), fds, reply: SpawnReply::Caller(tx) }) {
            return Err(self.gone());
        }
        let mut wait = SpawnWait { rx, zygote: self, received: false };
        let answer = (&mut wait.rx).await;
        // Received: from here the caller owns the child.
        wait.received = true;
        answer.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Asks for a child whose outcome goes to `order`; false (and `order`
    /// dropped unanswered) when the zygote is gone.
    pub fn spawn_into(&self, spec: ChildSpec, fds: Vec<OwnedFd>, order: Box<dyn SpawnOrder>) -> bool {
        self.shared.spawns.fetch_add(1, Ordering::Relaxed);
        self.shared.send(Request::Spawn { spec: Box::new(spec), fds, reply: SpawnReply::Pool(order) })
    }

    /// Reaps child `id` once it has exited; `None` if the zygote is gone
    /// (the child then died with it, and its status is unknown).
    pub async fn reap(&self, id: u64) -> Option<Exit> {
        let (tx, rx) = oneshot::channel();
        if !self.shared.send(Request::Reap { id, reply: Some(tx) }) {
            return None;
        }
        rx.await.ok()
    }

    /// Whether every reap asked for has been answered.
    pub fn reaped_all(&self) -> bool {
        self.shared.reaping.load(Ordering::Acquire) == 0
    }

    /// Asks for child `id` to be reaped, without waiting.
    pub fn reap_later(&self, id: u64) {
        self.shared.send(Request::Reap { id, reply: None });
    }

    /// Waits until the supervisor thread has reaped the zygote (after
    /// `quit`, or after it died). Call after dropping every child.
    pub async fn finished(self) {
        let rx = lock(&self.shared.finished).take();
        drop(self);
        if let Some(rx) = rx {
            let _ = rx.await;
        }
    }
}

/// A zygote process just spawned.
struct Launched {
    pid: i32,
    pidfd: OwnedFd,
    ctl: OwnedFd,
    stderr: OwnedFd,
}

fn launch(spec: &ZygoteSpec) -> Result<Launched, ZygoteError> {
    let err = |what: &str, e: io::Error| ZygoteError::Start(format!("{what}: {e}"));
    let (host, child) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| err("socketpair", e.into()))?;
    // The child end must block: the zygote uses plain blocking calls.
    rustix::io::ioctl_fionbio(&child, false).map_err(|e| err("socketpair", e.into()))?;
    let (diag_rx, diag_tx) = std::io::pipe().map_err(|e| err("pipe", e))?;
    let child_fd = child.as_raw_fd();
    let parent = rustix::process::getpid();
    let mut cmd = Command::new(&spec.python);
    // `-S`: the zygote applies `site` as data (`pycage.sitepaths`): no
    // `.pth` code line or `sitecustomize` runs in it.
    cmd.args(process::interpreter_args(&["-S", "-B"], &spec.bootstrap_dir, "pycage.zygote", spec.hash_seed))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(diag_tx.try_clone().map_err(|e| err("pipe", e))?)
        .stderr(diag_tx)
        // Its own group: a Ctrl-C in the host's terminal does not reach it.
        .process_group(0);
    if !spec.preload.is_empty() {
        cmd.env("PYCAGE_PRELOAD", spec.preload.join(","));
    }
    if let Some(seed) = spec.hash_seed {
        cmd.env("PYTHONHASHSEED", seed.to_string());
    }
    let userns = spec.userns.clone();
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe calls (dup2/fcntl, setns, prctl, getppid,
    // sched_setscheduler, _exit).
    unsafe {
        cmd.pre_exec(move || {
            pycage_sandbox::fork::install_fd3(child_fd)?;
            pycage_sandbox::fork::cloexec_above_fd3();
            // A background process, whatever thread started it: its forks
            // for refills never preempt a run. Its children reset to an
            // ordinary process before they run a program (`pycage.zygote`).
            process::run_in_background();
            if let Some(userns) = &userns {
                // Root of it after exec: it may then enter its children's
                // PID namespaces (see `pycage_sandbox::zygote_user_namespace`).
                rustix::thread::move_into_link_name_space(
                    userns.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::User),
                )?;
            }
            pycage_sandbox::fork::die_with_parent(parent)
        });
    }
    let process = cmd.spawn().map_err(|e| err(&format!("could not execute {}", spec.python.display()), e))?;
    drop(cmd);
    drop(child);
    let pid = process.id() as i32;
    let pidfd = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| ZygoteError::Start("the zygote has pid 0".into()))
        .and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::NONBLOCK)
                .map_err(|e| err("pidfd_open", e.into()))
        })?;
    let stderr = OwnedFd::from(diag_rx);
    rustix::io::ioctl_fionbio(&stderr, true).map_err(|e| err("pipe", e.into()))?;
    Ok(Launched { pid, pidfd, ctl: host, stderr })
}

/// A request written (or being written) to the control socket.
struct Outgoing {
    bytes: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// The supervisor thread's I/O around its [`ZygoteMachine`]: the control
/// socket, the request channel, the pidfd, stderr and the clock.
struct Supervisor {
    launched: Launched,
    requests: mpsc::Receiver<Request>,
    wake: OwnedFd,
    shared: Arc<Shared>,
    outgoing: VecDeque<Outgoing>,
    machine: ZygoteMachine<SpawnReply, oneshot::Sender<Exit>>,
    stderr_open: bool,
    plans: SentPlans,
}

impl Supervisor {
    fn new(launched: Launched, requests: mpsc::Receiver<Request>, wake: OwnedFd, shared: Arc<Shared>) -> Self {
        Supervisor {
            machine: ZygoteMachine::new(shared.started),
            launched,
            requests,
            wake,
            shared,
            outgoing: VecDeque::new(),
            stderr_open: true,
            plans: SentPlans::default(),
        }
    }

    fn run(mut self) {
        loop {
            let want_out = !self.outgoing.is_empty();
            let mut ctl_flags = PollFlags::IN;
            if want_out {
                ctl_flags |= PollFlags::OUT;
            }
            let (ctl_ready, wake_ready, zygote_exited, stderr_ready) = {
                let mut fds = vec![
                    PollFd::new(&self.launched.ctl, ctl_flags),
                    PollFd::new(&self.wake, PollFlags::IN),
                    PollFd::new(&self.launched.pidfd, PollFlags::IN),
                ];
                if self.stderr_open {
                    fds.push(PollFd::new(&self.launched.stderr, PollFlags::IN));
                }
                let timeout = self.machine.next_check(Instant::now()).map(|d| rustix::event::Timespec {
                    tv_sec: d.as_secs() as i64,
                    tv_nsec: i64::from(d.subsec_nanos()),
                });
                if let Err(e) = rustix::event::poll(&mut fds, timeout.as_ref()) {
                    if e == rustix::io::Errno::INTR {
                        continue;
                    }
                    break;
                }
                let r = |i: usize| fds.get(i).map(|f| !f.revents().is_empty()).unwrap_or(false);
                (r(0), r(1), r(2), r(3))
            };
            if wake_ready {
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(&self.wake, &mut buf);
            }
            self.take_requests();
            self.flush();
            if stderr_ready {
                self.read_stderr();
            }
            let ctl_open = if ctl_ready { self.receive() } else { true };
            if zygote_exited || !ctl_open {
                break;
            }
            if let Some(why) = self.unresponsive() {
                self.give_up(&why);
                break;
            }
        }
        self.shutdown();
    }

    /// Why the zygote must be treated as dead although it runs: stopped
    /// while an answer is owed, or silent past its deadline.
    fn unresponsive(&self) -> Option<String> {
        match self.machine.check(Instant::now()) {
            Check::Fine => None,
            Check::GiveUp(why) => Some(why),
            Check::LookIfStopped => {
                matches!(pycage_process::state(self.launched.pid), Some('T' | 't')).then(|| STOPPED.to_owned())
            }
        }
    }

    /// The zygote is alive but useless: record why, and kill it (our own
    /// unreaped child). Its exit then fails every waiter, its children die
    /// by their death signal, and the pool starts a successor.
    fn give_up(&mut self, why: &str) {
        self.shared.note(&format!("the zygote was replaced: {why}"));
        if let Some(pid) = rustix::process::Pid::from_raw(self.launched.pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }

    /// Moves queued requests to the outgoing queue.
    fn take_requests(&mut self) {
        while let Ok(request) = self.requests.try_recv() {
            match request {
                Request::Spawn { spec, fds, reply } => {
                    let id = self.machine.spawn(Instant::now(), reply);
                    let bytes = encode_spawn(id, &spec, &mut self.plans);
                    self.outgoing.push_back(Outgoing { bytes, fds });
                }
                Request::Reap { id, reply } => {
                    self.machine.reap(Instant::now(), id, reply);
                    self.outgoing.push_back(Outgoing { bytes: ZygoteRequest::Reap { id }.encode(), fds: Vec::new() });
                }
                Request::Quit => self.quit(),
            }
        }
    }

    fn quit(&mut self) {
        if self.machine.quit() {
            self.outgoing.push_back(Outgoing { bytes: ZygoteRequest::Quit.encode(), fds: Vec::new() });
        }
    }

    /// Writes what the socket takes now.
    fn flush(&mut self) {
        while let Some(out) = self.outgoing.front() {
            let borrowed: Vec<BorrowedFd<'_>> = out.fds.iter().map(AsFd::as_fd).collect();
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SPAWN_FDS))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !borrowed.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
                // Cannot happen: the space fits every descriptor a spawn sends.
                self.outgoing.pop_front();
                continue;
            }
            match rustix::net::sendmsg(
                &self.launched.ctl,
                &[IoSlice::new(&out.bytes)],
                &mut control,
                SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
            ) {
                Ok(_) => {
                    // The descriptors are the child's now; ours close here.
                    self.outgoing.pop_front();
                }
                Err(rustix::io::Errno::AGAIN) => return,
                Err(rustix::io::Errno::INTR) => {}
                // The zygote is gone; its pidfd tells the loop.
                Err(_) => return,
            }
        }
    }

    /// Reads every packet waiting; false once the zygote closed its end.
    fn receive(&mut self) -> bool {
        let mut buf = vec![0u8; MAX_PACKET];
        loop {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let got = rustix::net::recvmsg(
                &self.launched.ctl,
                &mut [IoSliceMut::new(&mut buf)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
            );
            let msg = match got {
                Ok(m) => m,
                Err(rustix::io::Errno::AGAIN) => return true,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return false,
            };
            let mut fds: Vec<OwnedFd> = Vec::new();
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(rights) = message {
                    fds.extend(rights);
                }
            }
            if msg.bytes == 0 {
                return false;
            }
            if msg.flags.contains(rustix::net::ReturnFlags::TRUNC) {
                self.give_up(&format!("it sent a packet over the {MAX_PACKET}-byte cap"));
                return false;
            }
            let data = buf.get(..msg.bytes).unwrap_or_default();
            match parse_zygote_answer(data) {
                Ok(answer) => {
                    if let Err(why) = self.dispatch(answer, fds) {
                        self.give_up(&why);
                        return false;
                    }
                }
                Err(e) => {
                    // The zygote is trusted: a malformed answer means it is
                    // broken, and every waiter would wait forever.
                    self.give_up(&format!("it sent a malformed answer ({e})"));
                    return false;
                }
            }
        }
    }

    /// Routes one answer; `Err` when it cannot be one of ours.
    fn dispatch(&mut self, answer: ZygoteAnswer, mut fds: Vec<OwnedFd>) -> Result<(), String> {
        let pidfd = if matches!(answer, ZygoteAnswer::Spawned { .. }) { fds.pop() } else { None };
        match self.machine.answer(Instant::now(), answer, pidfd.is_some())? {
            Answered::Ready => self.shared.ready.store(true, Ordering::Release),
            Answered::Spawned { waiter, id, pid } => {
                let pidfd = pidfd.ok_or_else(|| format!("it answered spawn {id} without a pidfd"))?;
                let spawned = Spawned { id, pid, pidfd };
                match waiter {
                    SpawnReply::Caller(tx) => {
                        if let Err(Ok(unwanted)) = tx.send(Ok(spawned)) {
                            // The caller went away: the child is not wanted.
                            self.discard(unwanted);
                        }
                    }
                    SpawnReply::Pool(order) => order.spawned(spawned),
                }
            }
            Answered::Refused { waiter, message } => {
                // The refused spawn may have been the one that carried the
                // plan: the next one sends it again.
                self.plans.forget();
                fail(waiter, ZygoteError::Refused(message));
            }
            Answered::Reaped { waiter, status, cpu_ns } => {
                self.shared.reaping.fetch_sub(1, Ordering::AcqRel);
                if let Some(tx) = waiter {
                    let _ = tx.send(Exit { status: ExitStatus::from_raw(status), cpu: Duration::from_nanos(cpu_ns) });
                }
            }
        }
        Ok(())
    }

    /// A child nobody wants: kill its group and have it reaped.
    fn discard(&mut self, spawned: Spawned) {
        // The zygote just answered and has not been asked to reap it: the
        // child's pid is still its own.
        pycage_process::kill_run_group(spawned.pid, &spawned.pidfd, true);
        let id = spawned.id;
        self.outgoing.push_back(Outgoing { bytes: ZygoteRequest::Reap { id }.encode(), fds: Vec::new() });
        self.shared.reaping.fetch_add(1, Ordering::AcqRel);
        self.machine.reap(Instant::now(), id, None);
        self.flush();
    }

    fn read_stderr(&mut self) {
        let mut buf = [0u8; 4096];
        loop {
            match rustix::io::read(&self.launched.stderr, &mut buf) {
                Ok(0) => {
                    self.stderr_open = false;
                    return;
                }
                Ok(n) => {
                    let mut d = lock(&self.shared.diagnostics);
                    d.extend_from_slice(buf.get(..n).unwrap_or_default());
                    let excess = d.len().saturating_sub(DIAGNOSTICS_TAIL);
                    d.drain(..excess);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }

    /// The zygote exited (or closed its socket): fail everything pending,
    /// make sure it is dead, reap it.
    fn shutdown(mut self) {
        self.shared.dead.store(true, Ordering::Release);
        // Late answers that were already in the socket still count.
        self.receive();
        if self.stderr_open {
            self.read_stderr();
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.launched.pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        // It is dead or dying from SIGKILL: this thread may block on it.
        let _ = process::wait4_blocking(self.launched.pid);
        let gone = ZygoteError::Gone(self.shared.diagnostics());
        // Reap waiters see their sender dropped: status unknown.
        for reply in self.machine.gone() {
            fail(reply, gone.clone());
        }
        fail_all(&self.shared, &self.requests);
    }
}

/// The zygote is gone: refuse every queued request and every later one.
fn fail_all(shared: &Shared, requests: &mpsc::Receiver<Request>) {
    shared.dead.store(true, Ordering::Release);
    // Requests that arrive from now on fail at once: nobody reads them.
    *lock(&shared.requests) = None;
    let gone = ZygoteError::Gone(shared.diagnostics());
    while let Ok(request) = requests.try_recv() {
        if let Request::Spawn { reply, .. } = request {
            fail(reply, gone.clone());
        }
    }
}

fn fail(reply: SpawnReply, error: ZygoteError) {
    match reply {
        SpawnReply::Caller(tx) => {
            let _ = tx.send(Err(error));
        }
        SpawnReply::Pool(order) => order.failed(error),
    }
}
