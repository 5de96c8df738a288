//! The one run sequence: admission, a worker, inputs, execution, settling,
//! output collection and refill. One-shot runs, runs with an output
//! directory and session runs all go through [`run()`]; a session is a run
//! sequence that keeps its worker ([`Keep::Session`]), not a copy of it.
//!
//! Every wait is raced against the caller's cancel, the stop token (the
//! runtime's shutdown, or a session's closing, which is a child of it) and,
//! once the run has left the queue, its wall-clock deadline:
//!
//! - waiting for a place among the runs in flight (`max_concurrent_runs`):
//!   a run cancelled in the queue settles as `abort` at once and gives its
//!   place up; its wall clock has not started;
//! - its declared packages (`pycage_packages`): found in the cache, or
//!   installed by the host, before the wall clock starts (bounded by
//!   `install_timeout` instead); a failure settles as `dependencies`;
//! - the type check, when the run asks for one (`crate::check`), under the
//!   run's wall clock: errors settle the run as `type-error` before any
//!   process is taken;
//! - waiting for a worker (a pooled child, a fork by the zygote, a sandbox
//!   built for the run): a zygote that does not answer is the pool's
//!   problem, never a reason for a run to outlive its wall clock;
//! - the run itself (the driver in `crate::run`);
//! - stopping the child and copying its output, bounded by the grace
//!   period and the output budget.
//!
//! A one-shot run whose child finished returns at once: one background
//! task stops and reaps the child, then, when no other run is in flight,
//! asks the pool for its replacement ([`crate::launch::pool::Refill`]).
//! Other settled runs ask for it before they return.
//!
//! Every run, one-shot or in a session, is watched run-wide (CPU and
//! memory of all its processes, see [`crate::watchdog`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bindings::{Namespace, RunId};
use crate::check::TypeCheck;
use crate::config::RuntimeConfig;
use crate::durable::Durable;
use crate::error::RuntimeError;
use crate::launch::site::{self, RunSite};
use crate::launch::spawn::Worker;
use crate::launch::Launcher;
use crate::outcome::{FailureKind, RunEvent, RunFailure, RunResult};
use crate::run::{self, BudgetWatch, ChildAfter, Extras, Opening, Resumed, RunMachine};
use pycage_egress::Egress;
use pycage_watchdog::{Budget, Scope};

/// What every run of a runtime shares: its launcher, its admission queue,
/// its shutdown and the tasks shutdown waits for. The public `Runtime` and
/// `Session` are handles on one.
pub(crate) struct Core {
    pub(crate) config: Arc<RuntimeConfig>,
    pub(crate) launcher: Launcher,
    /// FIFO admission of runs (`max_concurrent_runs`).
    admission: tokio::sync::Semaphore,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// Runs in flight and the stops of settled ones (not sessions'
    /// watchdogs): what `Runtime::wait_idle` waits for.
    work: TaskTracker,
    /// This runtime's scan of `/proc` (see `watchdog`), shared by its runs.
    scan: Arc<pycage_watchdog::ScanCache>,
    /// The type check of runs that ask for one.
    pub(crate) checks: TypeCheck,
}

impl Core {
    /// `builder`: where packages without a wheel are built, if the caller
    /// allowed builds (`crate::build`).
    pub(crate) fn new(
        config: RuntimeConfig,
        builder: Option<Arc<dyn pycage_packages::Builder>>,
    ) -> Result<Core, RuntimeError> {
        config.validate()?;
        let config = Arc::new(config);
        let launcher = Launcher::new(Arc::clone(&config), builder)?;
        let interpreter = launcher.interpreter();
        let (major, minor, _) = interpreter.version;
        let extra = launcher.with_entry_path().into_iter().collect();
        let checks = TypeCheck::new(&config, &interpreter.executable, (major, minor), extra)?;
        Ok(Core {
            launcher,
            checks,
            admission: tokio::sync::Semaphore::new(config.max_concurrent_runs),
            config,
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
            work: TaskTracker::new(),
            scan: Arc::new(pycage_watchdog::ScanCache::default()),
        })
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.is_cancelled() || self.tracker.is_closed()
    }

    pub(crate) fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Tasks shutdown waits for.
    pub(crate) fn background(&self) -> &TaskTracker {
        &self.tracker
    }

    pub(crate) fn sandboxed(&self) -> bool {
        self.launcher.sandboxed()
    }

    pub(crate) fn scan_cache(&self) -> Arc<pycage_watchdog::ScanCache> {
        Arc::clone(&self.scan)
    }

    /// Whether no run is in flight, no settled run's process is still
    /// being stopped, and the launcher has nothing pending.
    pub(crate) fn is_idle(&self) -> bool {
        self.work.is_empty() && self.launcher.is_idle()
    }

    /// Tops the zygote's pool up after a run (off the run's critical path);
    /// not once shutdown has begun (the children would be killed unused).
    pub(crate) fn refill_pool(&self) {
        if !self.shutdown.is_cancelled() {
            self.launcher.refill(self.runs_in_flight());
        }
    }

    /// [`Core::refill_pool`], made when the returned refill is used (by the
    /// task that stops the run's child, after it is reaped: see
    /// [`crate::launch::pool::Refill`]).
    fn refill_pool_later(&self) -> Option<crate::launch::pool::Refill> {
        self.launcher.refill_later(self.runs_in_flight())
    }

    /// Runs holding a place among those in flight: the caller's, which
    /// still holds its place, included.
    fn runs_in_flight(&self) -> usize {
        self.config.max_concurrent_runs.saturating_sub(self.admission.available_permits())
    }

    /// Settles every in-flight run as `abort`, waits for their children,
    /// then closes the launcher (zygotes, reaper, run directories).
    pub(crate) async fn shutdown(&self) {
        self.tracker.close();
        self.shutdown.cancel();
        self.tracker.wait().await;
        self.checks.close().await;
        self.launcher.close().await;
    }
}

/// What one run needs, whatever keeps its worker.
pub(crate) struct Plan {
    pub program: String,
    pub bindings: Vec<Namespace>,
    /// The caller's cancel.
    pub cancel: CancellationToken,
    /// The runtime's shutdown, or a session's closing.
    pub stop: CancellationToken,
    pub events: Option<mpsc::Sender<RunEvent>>,
    pub inputs: Vec<site::Input>,
    pub output_dir: Option<PathBuf>,
    /// Where to copy the child's fd-3 bytes, if anywhere.
    pub transcript: Option<PathBuf>,
    /// The budgets of this run: the runtime's, with the request's overrides.
    pub config: Arc<RuntimeConfig>,
    /// Whether the program is type-checked before it runs.
    pub type_check: bool,
    /// A session's cells so far, for the type check (a run that reaches its
    /// program joins it).
    pub history: Option<pycage_typecheck::History>,
    /// A durable run's recording or replay (a runtime with a journal key).
    pub durable: Option<Durable>,
}

/// A session's process between its runs.
pub(crate) struct Kept {
    pub worker: Worker,
    pub site: RunSite,
    /// Its processes' `/proc` files, held for the session's samples.
    pub held: Arc<pycage_watchdog::HeldFiles>,
    /// The packages its sandbox shows (those of the run that made it),
    /// leased for the session's life.
    pub packages: Option<Arc<pycage_packages::Entry>>,
    /// When its memory was last summed over all its processes (see
    /// [`session_memory_check`]).
    pub summed: Option<Instant>,
}

impl Kept {
    /// Which processes make up the session (for its watchdog).
    pub(crate) fn scope(&self, sandboxed: bool) -> Option<Scope> {
        scope_of(&self.worker, &self.site, sandboxed)
    }
}

/// Who keeps the run's worker once it has settled.
pub(crate) enum Keep<'a> {
    /// Nobody: the worker serves this run only.
    OneShot,
    /// A session: its process (taken at its first run), kept after every
    /// run that finished (`done`), gone after any other. `baseline`, when
    /// the session has one, is its processes' CPU at its last sample before
    /// the run (the previous run's end, or a sample between runs): the
    /// run's CPU budget counts from it.
    Session { kept: &'a mut Option<Kept>, first: bool, baseline: Option<Baseline> },
}

/// A session's CPU before a run, sampled off the run's critical path.
pub(crate) type Baseline = tokio::sync::oneshot::Receiver<Duration>;

/// How a run ended, beyond its result.
pub(crate) struct Outcome {
    pub result: RunResult,
    /// Session runs: whether the process is still there for the next run.
    pub after: ChildAfter,
    /// Session runs: whether the run took a fresh process (from the pool).
    pub took_worker: bool,
    /// Whether the program was sent to a process (false: the run ended in
    /// the queue, or while its process was being made).
    pub ran: bool,
    /// A durable session cell that ran to its end: its record.
    pub cell: run::CellRecord,
}

fn settled(kind: FailureKind, message: impl Into<String>) -> Outcome {
    Outcome {
        result: RunResult::failed(kind, message.into(), Vec::new()),
        after: ChildAfter::Gone,
        took_worker: false,
        ran: false,
        cell: None,
    }
}

/// Runs `plan` through the whole sequence (see the module docs).
pub(crate) async fn run(rt: &Core, plan: Plan, keep: Keep<'_>) -> Outcome {
    let Plan {
        program,
        bindings,
        cancel,
        stop,
        events,
        inputs,
        output_dir,
        transcript,
        config,
        type_check,
        history,
        durable,
    } = plan;
    // Held until the run (and its child) is settled; shutdown waits on it.
    let _token = rt.background().token();
    let _busy = rt.work.token();

    // 1. A place among the runs in flight (FIFO), raced against a cancel
    //    and the stop: a run that leaves the queue that way never held one.
    let _permit = tokio::select! {
        biased;
        _ = cancel.cancelled() => {
            return settled(FailureKind::Abort, "the run was cancelled by the caller before it started");
        }
        _ = stop.cancelled() => return settled(FailureKind::Abort, stop_message(rt)),
        permit = rt.admission.acquire() => match permit {
            Ok(p) => p,
            Err(_) => return settled(FailureKind::Abort, stop_message(rt)),
        },
    };
    // 1b. The run's packages, before its wall clock starts: installing is
    //     the host's work, bounded by its own timeout.
    let packages = match rt.launcher.packages(&program, &cancel, &stop).await {
        Ok(packages) => packages,
        Err(pycage_packages::PackageError::Cancelled) if stop.is_cancelled() => {
            return settled(FailureKind::Abort, stop_message(rt));
        }
        Err(pycage_packages::PackageError::Cancelled) => {
            return settled(
                FailureKind::Abort,
                "the run was cancelled by the caller while its packages were installed",
            );
        }
        Err(e) => return settled(FailureKind::Dependencies, e.to_string()),
    };
    if let (Keep::Session { kept: Some(kept), .. }, Some(p)) = (&keep, &packages) {
        // A sandboxed session's process sees the packages of the run that
        // made it, and no other entry.
        let seen = kept.packages.as_ref().map(|e| e.path());
        if p.own && rt.sandboxed() && seen != Some(p.entry.path()) {
            return settled(
                FailureKind::Dependencies,
                "a sandboxed session sees the packages of its first run only: declare this run's packages \
                 in the session's first run (or have the caller add them with with_packages / --with)",
            );
        }
    }
    let sys_path: Vec<String> = packages.iter().map(|p| rt.launcher.packages_inside(p)).collect();
    let deadline = Instant::now() + config.wall_time;
    let wall_exceeded = || format!("the wall-clock budget of {} ms was exceeded", config.wall_time.as_millis());

    // 1c. The type check, under the run's wall clock: a failed one settles
    //     the run before any process is taken.
    let mut checked = None;
    if type_check {
        let own = packages.as_ref().filter(|p| p.own).map(|p| p.entry.path().to_path_buf());
        let check = rt.checks.check(&program, &bindings, own.as_deref(), history.as_ref(), deadline, config.wall_time);
        let answer = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                return settled(FailureKind::Abort, "the run was cancelled by the caller while it was type-checked");
            }
            _ = stop.cancelled() => return settled(FailureKind::Abort, stop_message(rt)),
            answer = check => answer,
        };
        match answer {
            Ok(c) => checked = Some(c),
            Err(result) => {
                return Outcome { result, after: ChildAfter::Gone, took_worker: false, ran: false, cell: None };
            }
        }
    }
    let diagnostics = checked.as_ref().map(|c| c.report.warning_texts()).unwrap_or_default();
    // What joins a session's history once the program was sent.
    let cell = history.as_ref().map(|_| match checked {
        Some(c) => c.cell,
        None => pycage_typecheck::Cell::unchecked(&program),
    });

    // 2. A worker: the session's own, or a new one, raced against the same
    //    and the deadline. A half-made worker is dropped (killed, reaped).
    let (opening, took_worker) = match &keep {
        Keep::OneShot => (Opening::OneShot, true),
        Keep::Session { kept, first, .. } => {
            let opening = if *first { Opening::SessionFirst } else { Opening::SessionNext };
            (opening, kept.is_none())
        }
    };
    let mut fresh = None;
    if took_worker {
        let taken = tokio::select! {
            biased;
            _ = cancel.cancelled() => return settled(FailureKind::Abort, "the run was cancelled by the caller"),
            _ = stop.cancelled() => return settled(FailureKind::Abort, stop_message(rt)),
            _ = tokio::time::sleep_until(deadline) => {
                return settled(FailureKind::Timeout, format!("{} before a process could be started", wall_exceeded()));
            }
            taken = rt.launcher.take_worker(&inputs, packages.as_ref(), durable.as_ref().and_then(Durable::hash_seed)) => taken,
        };
        match taken {
            Ok(w) => fresh = Some(w),
            Err(e) => {
                let mut outcome = settled(FailureKind::WorkerExit, e.to_string());
                outcome.took_worker = true;
                return outcome;
            }
        }
    }
    let (worker, site, session_slot) = match keep {
        Keep::OneShot => match fresh.as_mut() {
            Some((w, s)) => (w, &*s, None),
            None => return settled(FailureKind::WorkerExit, "no process was started for the run"),
        },
        Keep::Session { kept, baseline, .. } => {
            if let Some((worker, site)) = fresh.take() {
                let packages = packages.as_ref().map(|p| Arc::clone(&p.entry));
                *kept = Some(Kept { worker, site, held: Arc::default(), packages, summed: None });
            }
            match kept.as_mut() {
                Some(k) => {
                    let Kept { worker, site, held, summed, .. } = k;
                    (worker, &*site, Some((baseline, Arc::clone(held), summed)))
                }
                None => return settled(FailureKind::WorkerExit, "the session has no process"),
            }
        }
    };

    // 3. Execution, watched run-wide. A session's CPU is counted from the
    //    run's start (its earlier runs are not this run's).
    let sandboxed = rt.sandboxed();
    let scope = scope_of(worker, site, sandboxed);
    let cpu = durable.as_ref().map_or(config.cpu_seconds, |d| d.cpu_budget(&config));
    let budget = Budget { cpu: Duration::from_secs(cpu), memory_bytes: config.address_space_bytes };
    let is_session = session_slot.is_some();
    let recording = durable.map(|d| d.start(&config, &program, worker.hash_seed));
    // A resumed run's budgets count from the end of its replay.
    let resumed = recording.as_ref().filter(|r| r.tape.replaying()).map(|r| {
        let (spent, wall) = (r.tape.spent_before(), r.tape.meta().budgets.wall_ms);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cpu_base = Arc::new(std::sync::OnceLock::new());
        let watch = resumed_watch(
            scope.clone(),
            budget,
            Duration::from_millis(spent.cpu_ms),
            rt.scan_cache(),
            rx,
            Arc::clone(&cpu_base),
        );
        let wall_left = Duration::from_millis(wall.saturating_sub(spent.wall_ms));
        (watch, Resumed { wall_left, replay_over: tx, cpu_base })
    });
    let (resumed_watch, resumed) = resumed.map_or((None, None), |(w, r)| (Some(w), Some(r)));
    let (watch, session_end) = match session_slot {
        None => (
            resumed_watch.unwrap_or_else(|| budget_watch(scope.clone(), budget, Duration::ZERO, rt.scan_cache())),
            None,
        ),
        Some((baseline, held, summed)) => {
            let end = (Arc::clone(&held), summed);
            (session_watch(scope.clone(), budget, baseline, rt.scan_cache(), held), Some(end))
        }
    };
    let machine = RunMachine::with_extras(
        &config,
        opening,
        program,
        Extras { sys_path, durable: recording },
        bindings,
        events.is_some(),
        output_dir.is_some(),
    );
    // With an allow-list, the run's connections are served while it is in
    // flight (a session's, cell by cell), and reported with its result.
    let egress = site.egress_listener().and_then(|listener| {
        match listener.and_then(|l| Egress::start(l, egress_limits(&config))) {
            Ok(egress) => Some(egress),
            Err(e) => {
                tracing::warn!("the run's egress proxy could not start: {e}");
                None
            }
        }
    });
    let (transcript, transcript_written) = match transcript.map(std::fs::File::create) {
        None => (None, None),
        Some(Ok(file)) => {
            let (t, written) = run::Transcript::to_file(file);
            (Some(t), Some(written))
        }
        Some(Err(e)) => {
            return settled(FailureKind::WorkerExit, format!("could not create the transcript file: {e}"));
        }
    };
    let inputs = run::RunInputs {
        config: &config,
        run: RunId::next(),
        cancel,
        shutdown: stop,
        stopped: &|| stop_message(rt),
        events,
        deadline,
        budget: watch,
        transcript,
        resumed,
    };
    let (mut result, after, record) = run::execute(worker, machine, inputs).await;
    result.diagnostics = diagnostics;
    if let (Some(history), Some(cell)) = (&history, cell) {
        history.push(cell);
    }
    if let Some(egress) = egress {
        result.network = Some(egress.finish().await);
    }
    if let Some(written) = transcript_written {
        // The driver dropped its end: the writer finishes what it holds.
        let _ = written.await;
    }

    // 4. Settling. A session keeps a process that finished; everything else
    //    is stopped and reaped (off the critical path when nothing waits
    //    for it), and its output is copied once no process of it is left.
    if let Some((held, summed)) = session_end {
        // A cell shorter than the watch's period is never sampled while it
        // runs: its session's memory is checked as it ends.
        let mut after = after;
        if after == ChildAfter::Finished {
            let program = worker.pid().map(|p| p.as_raw_nonzero().get());
            if let Some(message) = session_memory_check(rt, scope, program, held, summed, budget.memory_bytes).await {
                result.value = None;
                result.error = Some(RunFailure { kind: FailureKind::WorkerExit, message });
                after = ChildAfter::Gone;
            }
        }
        return Outcome { result, after, took_worker, ran: true, cell: record };
    }
    debug_assert!(!is_session);
    let Some((mut worker, site)) = fresh else {
        return Outcome { result, after, took_worker, ran: true, cell: None };
    };
    match &output_dir {
        None if after == ChildAfter::Finished => {
            // One task, one wake-up: it stops the child, then asks for its
            // replacement (a second wake-up on the caller's thread cost it
            // about as much as the spawn). With other runs in flight the
            // replacement is asked for now: they may need it before this
            // child has exited.
            let grace = config.grace;
            let refill = match rt.runs_in_flight() {
                0 | 1 => rt.refill_pool_later(),
                _ => {
                    rt.refill_pool();
                    None
                }
            };
            let shutdown = rt.shutdown_token();
            rt.background().spawn(rt.work.track_future(async move {
                let _ = worker.stop(grace).await;
                drop(worker);
                if let Some(refill) = refill.filter(|_| !shutdown.is_cancelled()) {
                    refill.now();
                }
            }));
            return Outcome { result, after, took_worker, ran: true, cell: None };
        }
        None => {}
        Some(dest) => {
            worker.stop(config.grace).await;
            drop(worker);
            let dest = site::absolute(dest).unwrap_or_else(|_| dest.clone());
            let max = config.max_output_bytes;
            // The copy walks what the program left: blocking file work,
            // on the blocking pool.
            let copied = tokio::task::spawn_blocking(move || site.collect_output(&dest, max)).await;
            result.output = copied.ok();
        }
    }
    rt.refill_pool();
    Outcome { result, after, took_worker, ran: true, cell: None }
}

/// Why a stopped run was stopped.
/// The egress proxy's limits for a run of `config`.
fn egress_limits(config: &RuntimeConfig) -> pycage_egress::Limits {
    pycage_egress::Limits {
        rules: config.allow_net.clone(),
        max_bytes: config.max_net_bytes,
        max_connections: config.max_net_connections,
    }
}

fn stop_message(rt: &Core) -> &'static str {
    if rt.is_shut_down() {
        "the runtime was shut down"
    } else {
        "the session was closed"
    }
}

/// The processes of a run on `worker`: its PID namespace when sandboxed,
/// the child and its descendants otherwise.
fn scope_of(worker: &Worker, site: &RunSite, sandboxed: bool) -> Option<Scope> {
    match site.init_pid() {
        Some(init) => Some(Scope::PidNamespace {
            init,
            // A zygote's child is the program, born in the namespace.
            program: worker.is_zygote_child().then(|| worker.pid()).flatten(),
            sockets: site.sock_diag(),
        }),
        None if !sandboxed => worker.pid().map(|root| Scope::Descendants { root }),
        None => None,
    }
}

/// A session run's watch: CPU counted from what the session's processes
/// had used before the run (the session's last sample before it, else a
/// sample here at its start; either off the run's critical path).
fn session_watch(
    scope: Option<Scope>,
    budget: Budget,
    sampled: Option<Baseline>,
    cache: Arc<pycage_watchdog::ScanCache>,
    held: Arc<pycage_watchdog::HeldFiles>,
) -> BudgetWatch {
    Box::pin(async move {
        let Some(s) = scope.clone() else { return std::future::pending().await };
        let sampled = match sampled {
            Some(rx) => rx.await.ok(),
            None => None,
        };
        let baseline = match sampled {
            Some(cpu) => cpu,
            None => {
                let c = Arc::clone(&cache);
                tokio::task::spawn_blocking(move || pycage_watchdog::sample_cpu_held(s, &c, &held))
                    .await
                    .unwrap_or(Duration::ZERO)
            }
        };
        budget_watch(scope, budget, baseline, cache).await
    })
}

/// A resumed run's watch: memory only while it replays, then CPU too,
/// counted from the child's CPU at the replay's end less what the journal
/// says the run spent before (the replay does not count; what it stands
/// for does). The sample at the replay's end goes to `cpu_base`.
fn resumed_watch(
    scope: Option<Scope>,
    budget: Budget,
    spent_cpu: Duration,
    cache: Arc<pycage_watchdog::ScanCache>,
    replay_over: tokio::sync::oneshot::Receiver<()>,
    cpu_base: Arc<std::sync::OnceLock<Duration>>,
) -> BudgetWatch {
    Box::pin(async move {
        let replaying = Budget { cpu: Duration::MAX, ..budget };
        tokio::select! {
            exceeded = budget_watch(scope.clone(), replaying, Duration::ZERO, Arc::clone(&cache)) => return exceeded,
            over = replay_over => if over.is_err() {
                return std::future::pending().await;
            },
        }
        let Some(s) = scope.clone() else { return std::future::pending().await };
        let c = Arc::clone(&cache);
        let now =
            tokio::task::spawn_blocking(move || pycage_watchdog::sample_cpu(s, &c)).await.unwrap_or(Duration::ZERO);
        let _ = cpu_base.set(now);
        budget_watch(scope, budget, now.saturating_sub(spent_cpu), cache).await
    })
}

/// The run loop's view of [`pycage_watchdog::watch_from`]: the failure to
/// settle with (`timeout` for CPU, `worker-exit` for memory).
pub(crate) fn budget_watch(
    scope: Option<Scope>,
    budget: Budget,
    cpu_baseline: Duration,
    cache: Arc<pycage_watchdog::ScanCache>,
) -> BudgetWatch {
    Box::pin(async move {
        let Some(scope) = scope else { return std::future::pending().await };
        let exceeded = pycage_watchdog::watch_from(scope, budget, pycage_watchdog::PERIOD, cpu_baseline, cache).await;
        let kind = match exceeded {
            pycage_watchdog::Exceeded::Cpu { .. } => FailureKind::Timeout,
            pycage_watchdog::Exceeded::Memory { .. } | pycage_watchdog::Exceeded::Objects { .. } => {
                FailureKind::WorkerExit
            }
        };
        (kind, exceeded.message())
    })
}

/// A session's memory at the end of one of its runs, against `budget`
/// (the run is then over it: its message). Cheap on the cell's path: one
/// `statm` read of the program's process, the whole scope summed (PSS,
/// kernel memory, every process, on the blocking pool) only when that
/// process alone may be over the budget, or when the last sum is older
/// than the watch's period (so that memory held by the session's other
/// processes is found within a period of the session's time too).
async fn session_memory_check(
    rt: &Core,
    scope: Option<Scope>,
    program: Option<i32>,
    held: Arc<pycage_watchdog::HeldFiles>,
    summed: &mut Option<Instant>,
    budget: u64,
) -> Option<String> {
    let scope = scope?;
    let resident = program.and_then(pycage_watchdog::rss_of).unwrap_or(u64::MAX);
    let stale = summed.is_none_or(|at| at.elapsed() >= pycage_watchdog::PERIOD);
    if resident <= budget && !stale {
        return None;
    }
    *summed = Some(Instant::now());
    let cache = rt.scan_cache();
    let usage = tokio::task::spawn_blocking(move || pycage_watchdog::sample_with_held(scope, &cache, &held, budget))
        .await
        .ok()?;
    let exceeded = usage.check(&Budget { cpu: Duration::MAX, memory_bytes: budget })?;
    Some(exceeded.message())
}
