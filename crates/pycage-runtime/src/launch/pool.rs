//! Children forked ahead of demand, and the zygote's life cycle.
//!
//! The pool keeps up to `pool_size` children that a zygote has forked and
//! set up, each blocked reading its `boot` frame, each with its own run
//! directory and channels. A run takes one (a few microseconds); once the
//! run has settled a refill is requested (a replacement's fork and warm-up
//! during the run would take a core from it; a one-shot run's child is
//! reaped first, [`Refill`]), and the zygote's supervisor
//! thread puts the new child into the idle list when the zygote answers,
//! so neither the interpreter start nor the fork is on a run's critical
//! path. When the list is empty, the run asks the zygote directly (one
//! fork) and asks for a refill. No refill is requested once the runtime
//! shuts down.
//!
//! Runs back to back drain the pool faster than it refills, and then the
//! order of the work decides the tail. A refill keeps at most one fewer
//! spawn in flight than the machine has cores (the rest is asked for as
//! each spawn's child arrives), so a run that finds the pool empty never queues
//! behind, or shares every core with, a batch of replacements; within
//! [`DRY_SPELL`] of such a run the replacements are forked cold (they
//! are taken soon after their fork), and a run that finds the pool empty
//! then waits for a spawn already on its way, which is ahead of a fork of
//! its own in every queue, rather than fork one more. Measured in
//! `docs/perf-log.md` ("The tail of a closed loop: a capped, cold refill").
//! Sandboxed, one shell is kept built for the next spawn a run waits for
//! (its own fork, or a cold refill's; `launch::sandbox`'s `Spare`), so
//! such a spawn waits for the zygote's fork and not for a shell before
//! it; a refill job builds the next one once the zygote has its order.
//!
//! A child warms up (runs a run's common path once, taking its
//! copy-on-write faults) before it waits for its `boot`: that takes the
//! faults off the latency of a run that finds it idle, but costs about
//! 270 page faults (1.5-2 ms of CPU) that a trivial run would not take.
//! So a child is forked cold when warming it would only take CPU from
//! runs: when a run is already waiting for it (the direct fork), when the
//! host's runs in flight are at least the cores, and for [`DRY_SPELL`]
//! after a run that came back to back with the one before
//! ([`BACK_TO_BACK`]) while such a loop keeps the cores busy by itself
//! (see [`Pool::refill_after_run`]). Runs with a gap between them find
//! children that warmed up in the gap.
//!
//! Zygote life cycle: every child of one zygote shares its hash seed and
//! address-space layout, so a zygote is replaced once it has forked
//! `zygote_max_runs` children or is `zygote_max_age` old. Its successor is
//! started in the background, and the switch happens once the successor
//! says it is ready; until then the old zygote keeps serving, so the bound
//! can be exceeded by the runs of one interpreter start. At the switch the
//! old zygote's idle children are discarded; its running children finish
//! their runs, and it exits when the last one is reaped. A zygote that died
//! is replaced at once (runs then wait for the new one's start).
//!
//! Those decisions are made by a [`PoolMachine`] (`super::pool_machine`,
//! unit-tested without processes or clocks) under the pool's lock; this
//! module is its driver: it starts the zygotes the machine asks for, makes
//! each child's host side off the caller's thread, and kills what the
//! machine hands back outside the lock.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

pub(crate) use crate::launch::pool_machine::Warmth;
use crate::launch::pool_machine::{Limits, PoolMachine, PooledChild, ZygoteView};
#[cfg(doc)]
use crate::launch::pool_machine::{BACK_TO_BACK, DRY_SPELL};
use crate::launch::spawn::{Channels, SpawnError, Spawner, Worker};
use crate::sync::lock;
use pycage_files::cleanup::{RunDir, RunDirs};
use pycage_zygote::{ChildSpec, JoinSpec, SpawnOrder, Spawned, Zygote, ZygoteError, ZygoteSpec};

/// How the pool builds children.
pub(crate) struct PoolConfig {
    pub python: PathBuf,
    pub bootstrap_dir: PathBuf,
    /// Modules every zygote imports before it forks.
    pub preload: Vec<String>,
    /// The zygote's own extra environment.
    pub zygote_env: Vec<(String, String)>,
    pub size: usize,
    /// The cores this process may use (affinity and cgroup quota, read
    /// once): a refill keeps one of them free of replacements
    /// ([`Limits::in_flight_for`]), and whether replacements warm up
    /// depends on them ([`Pool::refill_after_run`]).
    pub cores: usize,
    pub zygote_max_runs: u64,
    pub zygote_max_age: std::time::Duration,
    /// Makes each child's run directory.
    pub run_dirs: Arc<RunDirs>,
    /// rlimits every child gets before its run (`(name, soft, hard)`).
    pub rlimits: Vec<(&'static str, u64, u64)>,
    /// Sandbox isolation: each child joins a shell made by this.
    pub shells: Option<Shells>,
    /// Whether each zygote gets a hash seed pycage chose (and knows).
    pub hash_seeds: bool,
}

/// How sandboxed children get their shells.
pub(crate) struct Shells {
    /// Builds them (on `spawner`).
    pub sandboxes: Arc<crate::launch::sandbox::Sandboxes>,
    /// The thread shells are forked from (see [`Spawner`]).
    pub spawner: Arc<Spawner>,
    /// The environment a sandboxed child gets (`HOME`, `TMPDIR`, the
    /// interpreter's library path), as the sandbox shows paths.
    pub env: Vec<(String, String)>,
    /// Host prefixes and where the sandbox shows them.
    pub remaps: Vec<(String, String)>,
}

/// Host-side resources of a child: kept while it is being forked and while
/// it waits in the pool.
struct HostSide {
    zygote: Zygote,
    sock: UnixStream,
    output_rx: OwnedFd,
    /// Process isolation: the run's host directory.
    run_dir: Option<RunDir>,
    /// Sandbox isolation: the shell's supervisor and handoff.
    shell: Option<(Worker, Option<pycage_sandbox::Handoff>)>,
}

/// A child ordered for the pool, with its host side, until the zygote
/// answers (on its supervisor thread).
struct Order {
    host: HostSide,
    pool: Weak<Inner>,
}

impl SpawnOrder for Order {
    fn spawned(self: Box<Self>, child: Spawned) {
        let Order { host, pool } = *self;
        let idle = Idle(Some((host, child)));
        match pool.upgrade() {
            Some(pool) => pool.child_ready(idle),
            // The pool is gone: the child is killed and reaped.
            None => drop(idle),
        }
    }

    fn failed(self: Box<Self>, _error: ZygoteError) {
        if let Some(pool) = self.pool.upgrade() {
            pool.child_failed();
        }
    }
}

/// A forked child not handed to a run yet. Dropping it kills it and has
/// its zygote reap it.
struct Idle(Option<(HostSide, Spawned)>);

impl PooledChild for Idle {
    type Zygote = Zygote;

    fn zygote(&self) -> Option<&Zygote> {
        self.0.as_ref().map(|(host, _)| &host.zygote)
    }

    /// Its zygote and the child live, and so does its shell (a shell dies
    /// with the shell helper that forked it).
    fn usable(&self) -> bool {
        self.0.as_ref().is_some_and(|(host, spawned)| {
            !host.zygote.is_dead()
                && !pycage_process::has_exited(&spawned.pidfd)
                && host.shell.as_ref().is_none_or(|(supervisor, _)| !supervisor.has_exited())
        })
    }
}

impl Idle {
    /// The child as a worker, and (sandboxed) what its shell handed over.
    fn into_worker(mut self) -> Result<(Worker, Option<pycage_sandbox::Handoff>), SpawnError> {
        let (host, spawned) = self.0.take().ok_or(SpawnError::Zygote(ZygoteError::Gone(String::new())))?;
        let (companion, handoff) = match host.shell {
            Some((supervisor, handoff)) => (Some(supervisor), handoff),
            None => (None, None),
        };
        let worker = Worker::from_zygote(host.zygote, spawned, host.sock, host.output_rx, host.run_dir, companion)?;
        Ok((worker, handoff))
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        if let Some((host, spawned)) = self.0.take() {
            // A dead zygote's children may have been reaped by another
            // process already: then only the pidfd still names this one.
            pycage_process::kill_run_group(spawned.pid, &spawned.pidfd, host.zygote.holds_children());
            host.zygote.reap_later(spawned.id);
        }
    }
}

/// The machine reads a zygote as its supervisor last saw it.
impl ZygoteView for Zygote {
    fn same(&self, other: &Zygote) -> bool {
        Zygote::same(self, other)
    }
    fn is_dead(&self) -> bool {
        Zygote::is_dead(self)
    }
    fn is_ready(&self) -> bool {
        Zygote::is_ready(self)
    }
    fn spawns(&self) -> u64 {
        Zygote::spawns(self)
    }
    fn started(&self) -> Instant {
        Zygote::started(self)
    }
    fn reaped_all(&self) -> bool {
        Zygote::reaped_all(self)
    }
}

type Machine = PoolMachine<Zygote, Idle>;

struct Inner {
    config: PoolConfig,
    state: Mutex<Machine>,
    me: Weak<Inner>,
    /// The runtime the first refill ran on: a refill the cap held back is
    /// asked for when a spawn settles, on the zygote's supervisor thread,
    /// which has none of its own (a shell registers with one).
    tokio: OnceLock<tokio::runtime::Handle>,
    /// The warmth of the latest refill asked for, for what the cap held
    /// back (cold: the host's runs keep every core busy).
    cold: AtomicBool,
    /// A refill's spawn has settled: wakes a run waiting for one.
    settled: tokio::sync::Notify,
}

/// What a run that finds no idle child does.
enum Dry {
    /// Wait for a spawn in flight.
    Wait,
    /// Fork a child of its own.
    Fork,
}

/// How long a run waits for a spawn in flight before it forks its own: a
/// cold child takes a few milliseconds; this bounds a zygote that stalls.
const WAIT_FOR_SPAWN: std::time::Duration = std::time::Duration::from_millis(250);

/// A run counted as waiting for a spawn in flight, until dropped (also
/// when the run's future is).
struct Waiting<'a>(&'a Inner);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).stop_waiting();
    }
}

/// A refill whose warmth was decided when a run settled, asked for later
/// by [`Refill::now`]: the task that stops a one-shot run's child calls it
/// once the child is reaped, so the run's caller wakes one thread (that
/// task's) instead of two, and the replacement's fork does not overlap the
/// old child's exit.
pub(crate) struct Refill {
    inner: Arc<Inner>,
    warmth: Warmth,
}

impl Refill {
    pub(crate) fn now(self) {
        self.inner.refill(self.warmth);
    }
}

/// See the module docs.
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// Starts the first zygote and fills the pool in the background.
    pub(crate) fn new(config: PoolConfig) -> Pool {
        let limits = Limits {
            size: config.size,
            max_runs: config.zygote_max_runs,
            max_age: config.zygote_max_age,
            in_flight: Limits::in_flight_for(config.cores),
        };
        let state = Mutex::new(PoolMachine::new(limits));
        let inner = Arc::new_cyclic(|me| Inner {
            config,
            state,
            me: me.clone(),
            tokio: OnceLock::new(),
            cold: AtomicBool::new(false),
            settled: tokio::sync::Notify::new(),
        });
        inner.refill(Warmth::Warm);
        Pool { inner }
    }

    /// A child ready for its `boot` frame, and (sandboxed) what its shell
    /// handed over. Needs a tokio runtime.
    pub(crate) async fn take(&self) -> Result<(Worker, Option<pycage_sandbox::Handoff>), SpawnError> {
        // One retry: a zygote that died between the check and the fork is
        // replaced, and the second one answers or its error is returned.
        for attempt in 0..2 {
            let mut taken = self.inner.take_idle(true);
            if let Err(Dry::Wait) = taken {
                // A cold spawn on its way is ahead of a fork of our own in
                // every queue: take it (or whatever settles first). Bounded,
                // in case the zygote stalls without dying.
                let waiting = Waiting(&self.inner);
                let _ = tokio::time::timeout(WAIT_FOR_SPAWN, self.inner.settled.notified()).await;
                drop(waiting);
                taken = self.inner.take_idle(false);
            }
            if let Ok(idle) = taken {
                // The replacement is forked (and warms up) after this run,
                // not during it: on a small machine its warm-up would take a
                // core from the run (see `refill_after_run`).
                return idle.into_worker();
            }
            // The pool ran dry: runs come faster than children are made,
            // so the next ones are taken soon after their fork, and this
            // run waits for its own child: a warm-up would be on a run's
            // critical path, and take more faults than the run saves.
            self.inner.refill(Warmth::Cold);
            let zygote = self.inner.current()?;
            let (host, fds, spec) = match &self.inner.config.shells {
                None => self.inner.host_side(&zygote, Warmth::Cold, None)?,
                Some(shells) => {
                    // Nothing is built ahead of demand without a pool.
                    let spare = (self.inner.config.size > 0).then(|| shells.sandboxes.spare_order());
                    let made = match shells.sandboxes.take_spare() {
                        // Built already: nothing to fork on the spawner
                        // thread, which may be busy with a refill's shell.
                        Some(shell) => self.inner.host_side(&zygote, Warmth::Cold, Some(shell)),
                        None => {
                            let inner = Arc::clone(&self.inner);
                            let z = zygote.clone();
                            shells.spawner.run(move || inner.host_side(&z, Warmth::Cold, None)).await.ok_or_else(
                                || SpawnError::Channel(std::io::Error::other("the spawner thread is gone")),
                            )?
                        }
                    };
                    // The next spare, for the next run in a hurry.
                    if let Some(spare) = spare {
                        shells.spawner.submit(move || spare.build());
                    }
                    made?
                }
            };
            match zygote.spawn(spec, fds).await {
                Ok(spawned) => return Idle(Some((host, spawned))).into_worker(),
                Err(ZygoteError::Gone(_)) if attempt == 0 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SpawnError::Zygote(ZygoteError::Gone(String::new())))
    }

    /// Tops the pool up again; called when a run has settled, so the fork
    /// and warm-up of its replacement happen between runs. Cheap: it asks
    /// the zygote (or the spawner thread) and returns. `runs_in_flight`
    /// (the settled run included) decides whether the replacements warm
    /// up: not when they are at least the cores ([`Warmth::for_load`]),
    /// and not in a loop of runs back to back that keeps every core busy
    /// ([`Warmth::loop_fills`]; see the module docs).
    pub(crate) fn refill_after_run(&self, runs_in_flight: usize) {
        let warmth = self.inner.run_settled(runs_in_flight);
        self.inner.refill(warmth);
    }

    /// [`Pool::refill_after_run`], to be called later, from another task.
    pub(crate) fn refill_later(&self, runs_in_flight: usize) -> Refill {
        let warmth = self.inner.run_settled(runs_in_flight);
        Refill { inner: Arc::clone(&self.inner), warmth }
    }

    /// Whether the pool holds its full size of idle children of a ready
    /// zygote with no spawn or reap pending (or is closed). Asks for a refill when
    /// it does not, so that a caller waiting on it sees it fill.
    pub(crate) fn is_full(&self) -> bool {
        let full = lock(&self.inner.state).is_full();
        if !full {
            self.inner.refill(Warmth::Warm);
        }
        full
    }

    /// The current zygote's pid, if one runs (for tests and diagnostics).
    pub(crate) fn zygote_pid(&self) -> Option<i32> {
        lock(&self.inner.state).current().map(Zygote::pid).filter(|&p| p > 0)
    }

    /// Discards idle children, retires every zygote and waits until each
    /// has exited. Runs must be settled first.
    pub(crate) async fn close(&self) {
        // Never skipped: shutdown must retire every zygote, whatever
        // panicked while holding this lock before.
        let (idle, zygotes) = lock(&self.inner.state).close();
        drop(idle);
        for zygote in zygotes {
            zygote.finished().await;
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let (idle, zygotes) = lock(&self.inner.state).close();
        // Killed and reaped outside the lock.
        drop(zygotes);
        drop(idle);
    }
}

impl Inner {
    fn start_zygote(&self) -> Result<Zygote, ZygoteError> {
        Zygote::start(ZygoteSpec {
            python: self.config.python.clone(),
            bootstrap_dir: self.config.bootstrap_dir.clone(),
            preload: self.config.preload.clone(),
            env: self.config.zygote_env.clone(),
            userns: self.config.shells.as_ref().and_then(|s| s.sandboxes.zygote_userns()),
            hash_seed: self.config.hash_seeds.then(|| pycage_process::random_u64() as u32),
        })
    }

    /// The machine's upkeep (see [`PoolMachine::maintain`]): starts the
    /// zygote it asks for. Called with the state locked; `unwanted` is
    /// dropped by the caller once the lock is released.
    fn maintain(&self, machine: &mut Machine, unwanted: &mut Vec<Idle>) -> Result<(), ZygoteError> {
        if let Some(start) = machine.maintain(Instant::now(), unwanted) {
            machine.started(start, self.start_zygote()?);
        }
        Ok(())
    }

    fn current(&self) -> Result<Zygote, SpawnError> {
        let mut unwanted = Vec::new();
        let current = {
            let mut machine = lock(&self.state);
            if machine.is_closed() {
                return Err(ZygoteError::Gone("the runtime is shutting down".into()).into());
            }
            self.maintain(&mut machine, &mut unwanted)
                .map_err(SpawnError::from)
                .and_then(|()| machine.current().cloned().ok_or_else(|| ZygoteError::Gone(String::new()).into()))
        };
        // Killed and reaped outside the lock.
        drop(unwanted);
        current
    }

    /// A run settled with `runs_in_flight` (itself included): noted for
    /// the next run's start, and the warmth its replacements are asked
    /// with.
    fn run_settled(&self, runs_in_flight: usize) -> Warmth {
        let cores = self.config.cores;
        lock(&self.state).run_settled(Instant::now(), Warmth::loop_fills(runs_in_flight, cores));
        Warmth::for_load(runs_in_flight, cores)
    }

    /// The oldest usable idle child; else whether to wait for a spawn in
    /// flight (only when `may_wait`, see [`PoolMachine::ran_dry`]). Notes
    /// the run's start ([`PoolMachine::run_started`]).
    fn take_idle(&self, may_wait: bool) -> Result<Idle, Dry> {
        let mut unwanted = Vec::new();
        let taken = {
            let mut machine = lock(&self.state);
            let _ = self.maintain(&mut machine, &mut unwanted);
            let now = Instant::now();
            machine.run_started(now);
            match machine.take(&mut unwanted) {
                Some(idle) => Ok(idle),
                None if machine.ran_dry(now, may_wait) => Err(Dry::Wait),
                None => Err(Dry::Fork),
            }
        };
        // Killed and reaped outside the lock.
        drop(unwanted);
        taken
    }

    /// Requests spawns until idle plus pending reaches the pool size. Only
    /// the count is taken under the lock; each child's host side (a run
    /// directory on the blocking pool, or a sandbox shell on the spawner
    /// thread) is made outside it, and off the calling thread.
    fn refill(&self, warmth: Warmth) {
        self.cold.store(warmth == Warmth::Cold, Ordering::Relaxed);
        let shells = self.config.shells.as_ref();
        // Shells are forked on the spawner thread, and must register with a
        // tokio runtime: without one (at construction), the pool fills at
        // the first run instead.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                self.tokio.get_or_init(|| handle);
            }
            Err(_) if shells.is_some() => return,
            Err(_) => {}
        }
        let mut unwanted = Vec::new();
        let order = {
            let mut machine = lock(&self.state);
            if machine.is_closed() || self.maintain(&mut machine, &mut unwanted).is_err() {
                None
            } else {
                let warmth = machine.warmth(warmth, Instant::now());
                machine.refill().map(|(zygote, wanted)| (zygote, wanted, warmth))
            }
        };
        drop(unwanted);
        let Some((zygote, wanted, warmth)) = order else { return };
        for _ in 0..wanted {
            let Some(inner) = self.me.upgrade() else { return };
            let z = zygote.clone();
            let job = move || {
                if lock(&inner.state).is_closed() {
                    // Closed while this waited: nothing to build and kill.
                    inner.child_failed();
                    return;
                }
                // Ordered before the fork is, so that the pool is never
                // full (`Runtime::wait_idle`) while the spare is still due.
                let spare = inner.config.shells.as_ref().map(|s| s.sandboxes.spare_order());
                // A cold spawn is one a run may wait for: it takes the
                // spare shell; a warm one builds its own, and leaves the
                // spare to a run that finds the pool empty.
                let shell = match &inner.config.shells {
                    Some(shells) if warmth == Warmth::Cold => shells.sandboxes.take_spare(),
                    _ => None,
                };
                match inner.host_side(&z, warmth, shell) {
                    Ok((host, fds, spec)) => {
                        let order = Box::new(Order { host, pool: Weak::clone(&inner.me) });
                        if !z.spawn_into(spec, fds, order) {
                            inner.child_failed();
                        }
                    }
                    Err(_) => inner.child_failed(),
                }
                // The next spawn's shell, built while the zygote forks this
                // one's child.
                if let Some(spare) = spare.filter(|_| !lock(&inner.state).is_closed()) {
                    spare.build();
                }
            };
            match shells {
                Some(shells) => {
                    if !shells.spawner.submit(job) {
                        self.child_failed();
                    }
                }
                // Without shells, a child's host side is still file-system
                // work (its run directory: a `mkdir`, ~0.1 ms on ext4) and
                // a socketpair and pipe: on the blocking pool, off this
                // thread, which is most often a run's caller, just before
                // it returns the run's result.
                None => match tokio::runtime::Handle::try_current() {
                    Ok(handle) => drop(handle.spawn_blocking(job)),
                    Err(_) => job(),
                },
            }
        }
    }

    /// Everything the host keeps of a child, the descriptors the child gets
    /// and how it sets itself up. Sandboxed, the child joins `shell`, or
    /// else a shell this forks: call it on the spawner thread then.
    fn host_side(
        &self,
        zygote: &Zygote,
        warmth: Warmth,
        shell: Option<crate::launch::sandbox::Shell>,
    ) -> Result<(HostSide, Vec<OwnedFd>, ChildSpec), SpawnError> {
        let cold = warmth == Warmth::Cold;
        let ch = Channels::new()?;
        let mut fds = vec![OwnedFd::from(ch.child), OwnedFd::from(ch.output_tx)];
        let Some(shells) = &self.config.shells else {
            let run_dir = self.config.run_dirs.create().map_err(SpawnError::RunDir)?;
            let dir = run_dir.path().to_string_lossy().into_owned();
            let mut env = vec![
                ("HOME".into(), dir.clone()),
                ("TMPDIR".into(), dir),
                ("PATH".into(), pycage_process::run_path(&self.config.python)),
            ];
            env.extend(
                crate::launch::site::python_env(run_dir.path())
                    .into_iter()
                    .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned())),
            );
            // HOME and the temporary directory are the run's directory,
            // which holds its working directory: nothing of theirs shows in `.`.
            let spec = ChildSpec { cwd: run_dir.work(), env, rlimits: self.config.rlimits.clone(), join: None, cold };
            let host = HostSide {
                zygote: zygote.clone(),
                sock: ch.host,
                output_rx: OwnedFd::from(ch.output_rx),
                run_dir: Some(run_dir),
                shell: None,
            };
            return Ok((host, fds, spec));
        };
        let shell = match shell {
            Some(shell) => shell,
            None => shells.sandboxes.shell()?,
        };
        let crate::launch::sandbox::Shell { supervisor, handoff, join, plan } = shell;
        let pycage_sandbox::Join { user_ns, mount_ns, pid_ns, net_ns, ipc_ns, uts_ns, root, ruleset } = join;
        fds.extend([user_ns, mount_ns, pid_ns, net_ns, ipc_ns, uts_ns, root, ruleset]);
        let spec = ChildSpec {
            cwd: PathBuf::from(pycage_sandbox::WORK_DIR),
            env: Vec::new(),
            rlimits: Vec::new(),
            join: Some(JoinSpec { plan, remaps: shells.remaps.clone(), env: shells.env.clone() }),
            cold,
        };
        let host = HostSide {
            zygote: zygote.clone(),
            sock: ch.host,
            output_rx: OwnedFd::from(ch.output_rx),
            run_dir: None,
            shell: Some((supervisor, handoff)),
        };
        Ok((host, fds, spec))
    }

    /// A refill's child is ready: kept, or killed and reaped (outside the
    /// lock) when the pool no longer wants it. Then what the cap on spawns
    /// in flight held back is asked for (with the latest refill's warmth).
    fn child_ready(&self, idle: Idle) {
        let (unwanted, awaited) = {
            let mut machine = lock(&self.state);
            (machine.child_ready(idle), machine.awaited())
        };
        drop(unwanted);
        self.wake_a_waiter(awaited);
        let warmth = if self.cold.load(Ordering::Relaxed) { Warmth::Cold } else { Warmth::Warm };
        match (tokio::runtime::Handle::try_current(), self.tokio.get()) {
            (Err(_), Some(handle)) => {
                let _entered = handle.enter();
                self.refill(warmth);
            }
            _ => self.refill(warmth),
        }
    }

    /// A refill's spawn failed. What the cap held back waits for the next
    /// refill (a run's, or a caller waiting for a full pool): asking again
    /// from here would retry a failing zygote in a loop.
    fn child_failed(&self) {
        let awaited = {
            let mut machine = lock(&self.state);
            machine.child_failed();
            machine.awaited()
        };
        self.wake_a_waiter(awaited);
    }

    /// Wakes one run waiting for a spawn, if one is (a wake-up stored
    /// with no run waiting would send the next run that waits straight to
    /// a fork of its own).
    fn wake_a_waiter(&self, awaited: bool) {
        if awaited {
            self.settled.notify_one();
        }
    }
}
