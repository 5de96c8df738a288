//! Sessions: one child that stays alive across runs and keeps its module
//! globals, like a notebook kernel.
//!
//! A [`Session`] holds one child (taken from the pool, or spawned) booted
//! with `session: true`: after each `done` it waits for the next `run` in
//! the same `__main__` globals and the same working directory. Runs of one
//! session are serialized, and each goes through the same run sequence as
//! a one-shot run (`crate::lifecycle`), which keeps the process: each has
//! the runtime's wall-clock, CPU, log and value budgets of its own (CPU
//! counted from the run's start, so a long session never dies of the sum
//! of its runs), watched run-wide: the CPU of every process of the session
//! and the memory they hold together, as for any run.
//!
//! Between runs the session is watched too: its processes may use at most
//! [`SessionOptions::idle_cpu`] of CPU in total while no run is in flight
//! (a thread left spinning by a run cannot burn a core until the idle
//! timeout) and hold at most the memory budget. The session's CPU is
//! sampled once per run, at its end (on the blocking pool, off the runs'
//! critical path), and every half second between runs. A gap between
//! runs counts as CPU between runs from the run's end to the last sample
//! before the next run; that sample is also the next run's CPU baseline,
//! so what the processes used after it counts against that run's CPU
//! budget. Every CPU second is counted against one budget or the other
//! (cells sent back to back included), and a run's start costs no sample.
//! The session has an idle
//! timeout, a maximum lifetime and a memory budget (for every run, and
//! between runs).
//!
//! A run that ends without `done` (its wall clock or CPU budget ran out, it
//! was cancelled, its process died, it went over a protocol budget) takes
//! the child with it: that run reports its outcome as usual, and the session
//! is over. Every later run fails at once with [`SessionError::Ended`],
//! which says why. Python code cannot be interrupted safely in the middle,
//! so a run that overstays is ended, not paused.
//!
//! Closing a session, dropping it, or shutting the runtime down kills its
//! processes; [`Session::close`] and [`crate::Runtime::shutdown`] return
//! once they are reaped.
//!
//! On a runtime with a journal key, a session records each cell that ran
//! to its end (its program, seed, calls and replies: `crate::durable`),
//! so that a cell's call that needs approval suspends it as it would a
//! run: the cell settles as `suspended`, its journal holds the earlier
//! cells in order, and the session is over (like a session whose run
//! overstayed). [`crate::Runtime::resume_session`] opens a new session,
//! replays the earlier cells in it (their calls answered from the
//! journal, their results and output dropped), then resumes the
//! suspended cell; the new session goes on recording.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::bindings::Namespace;
use crate::config::RuntimeConfig;
use crate::durable::{Durable, SessionCells, SessionResume};
use crate::error::MisuseError;
use crate::lifecycle::Core;
use crate::lifecycle::{self, Keep, Kept, Plan};
use crate::outcome::{FailureKind, RunEvent, RunFailure, RunResult};
use crate::request::{Answer, RunLimits};
use crate::run::ChildAfter;
use crate::sync::lock;

/// How a session is made.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The namespaces every run of the session sees (fixed for its life).
    pub bindings: Vec<Namespace>,
    /// The session ends after this long without a run.
    pub idle_timeout: Duration,
    /// ... and this long after it was opened, whatever it does (a run in
    /// flight then finishes first, within its own wall-clock budget).
    pub max_lifetime: Duration,
    /// Memory budget of the session's processes together (`RLIMIT_AS` of
    /// each, and the run-wide watch, during runs and between them); `None`
    /// takes the runtime's `address_space_bytes`.
    pub memory_bytes: Option<u64>,
    /// CPU the session's processes may use, in total over its life, while
    /// no run is in flight (threads or children a run left behind). Over
    /// it the session ends.
    pub idle_cpu: Duration,
    /// On a runtime with a journal key, record the session's cells so
    /// that a cell's call that needs approval suspends it (`docs/durable.md`,
    /// "Sessions"). Off, such a call fails in the program, saying why, and
    /// nothing is recorded. On by default.
    pub durable: bool,
}

/// Default of [`SessionOptions::idle_cpu`].
pub const DEFAULT_IDLE_CPU: Duration = Duration::from_secs(2);

/// How often a session is sampled between runs.
const IDLE_SAMPLE: Duration = Duration::from_millis(500);

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            bindings: Vec::new(),
            idle_timeout: Duration::from_secs(600),
            max_lifetime: Duration::from_secs(3600),
            memory_bytes: None,
            idle_cpu: DEFAULT_IDLE_CPU,
            durable: true,
        }
    }
}

impl SessionOptions {
    /// Adds a namespace.
    pub fn with_namespace(mut self, ns: Namespace) -> Self {
        self.bindings.push(ns);
        self
    }
}

/// Why a session cannot run a program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The session is over; the message says why (its process died, a run
    /// overstayed its budget, it was idle or old enough, it was closed).
    #[error("the session has ended: {0}")]
    Ended(String),
    /// The runtime was shut down, or the session's options are invalid.
    #[error(transparent)]
    Misuse(#[from] MisuseError),
}

/// One program for a session.
#[derive(Debug, Clone, Default)]
pub struct SessionRun {
    pub program: String,
    /// Cancelling it settles the run as `abort` (and ends the session, if
    /// the run had started).
    pub cancel: Option<CancellationToken>,
    /// This run's own budgets (wall clock, CPU; a memory override is
    /// refused: the session's memory budget is fixed when it opens).
    pub limits: RunLimits,
    /// Type-check the cell first, as one program with the cells that ran
    /// before it (`Some(true)`), or not; `None` follows
    /// `RuntimeConfig::type_check`.
    pub type_check: Option<bool>,
}

impl SessionRun {
    /// A run of `program`.
    pub fn new(program: impl Into<String>) -> Self {
        SessionRun { program: program.into(), ..SessionRun::default() }
    }

    /// Sets the cancel token.
    pub fn with_cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Sets this run's own budgets.
    pub fn with_limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Type-checks the cell first, or not ([`SessionRun::type_check`]).
    pub fn with_type_check(mut self, on: bool) -> Self {
        self.type_check = Some(on);
        self
    }
}

struct State {
    kept: Option<Kept>,
    runs: u64,
    /// The last run's end sample while it is still being taken: the next
    /// run's CPU baseline if it starts before the sample is in.
    end_sample: Option<lifecycle::Baseline>,
    /// The cells that ran, for the type check (when there is a checker).
    history: Option<pycage_typecheck::History>,
    /// The cells that ran to their end, for a suspended cell's journal:
    /// `None` when the session does not record (no key, not durable, or
    /// its cells went over the journal budget).
    journal: Option<SessionCells>,
}

struct Inner {
    runtime: Arc<Core>,
    config: Arc<RuntimeConfig>,
    bindings: Vec<Namespace>,
    /// The bindings' digest, for the journal (a durable session's).
    digest: Option<(pycage_journal::Digest, Vec<String>)>,
    options: SessionOptions,
    opened: Instant,
    state: tokio::sync::Mutex<State>,
    /// Why the session ended; set once.
    ended: Mutex<Option<String>>,
    last_used: Mutex<Instant>,
    /// CPU of the session's processes at its runs' ends and between runs.
    edges: Arc<Mutex<Edges>>,
    /// Cancelled by `close` and by the runtime's shutdown (a child token):
    /// a run in flight or queued is aborted and the watchdog ends the session.
    closing: CancellationToken,
    /// Cancelled when the session is dropped, so the watchdog stops.
    _dropped: tokio_util::sync::DropGuard,
    /// Resolves when the watchdog has ended the session and reaped its child.
    watchdog_done: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

/// See the module docs. Cheap to clone: clones share the session.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("ended", &self.ended()).finish_non_exhaustive()
    }
}

impl Session {
    pub(crate) fn open(runtime: Arc<Core>, options: SessionOptions) -> Result<Session, MisuseError> {
        crate::names::check_bindings(&options.bindings)?;
        if runtime.is_shut_down() {
            return Err(MisuseError::ShutDown);
        }
        let config = RunLimits { memory_bytes: options.memory_bytes, ..RunLimits::default() }.apply(&runtime.config)?;
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let dropped = CancellationToken::new();
        let now = Instant::now();
        let durable = options.durable && runtime.config.journal_key.is_some();
        let inner = Arc::new(Inner {
            digest: durable.then(|| crate::durable::bindings_digest(&options.bindings)),
            bindings: options.bindings.clone(),
            runtime: Arc::clone(&runtime),
            config,
            options,
            opened: now,
            state: tokio::sync::Mutex::new(State {
                kept: None,
                runs: 0,
                end_sample: None,
                history: runtime.checks.available().then(pycage_typecheck::History::new),
                journal: durable.then(SessionCells::default),
            }),
            ended: Mutex::new(None),
            last_used: Mutex::new(now),
            edges: Arc::default(),
            closing: runtime.shutdown_token().child_token(),
            _dropped: dropped.clone().drop_guard(),
            watchdog_done: Mutex::new(Some(done_rx)),
        });
        runtime.background().spawn(watchdog(Arc::downgrade(&inner), dropped, done_tx));
        Ok(Session { inner })
    }

    /// The budgets of the session's runs (the runtime's, with the
    /// session's memory budget).
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// A channel for [`Session::run_with`]'s events, of the configured size.
    pub fn event_channel(&self) -> (mpsc::Sender<RunEvent>, mpsc::Receiver<RunEvent>) {
        mpsc::channel(self.inner.config.max_buffered_events)
    }

    /// Why the session ended, if it has.
    pub fn ended(&self) -> Option<String> {
        lock(&self.inner.ended).clone()
    }

    /// Runs `program` in the session's globals.
    pub async fn run(&self, program: impl Into<String>) -> Result<RunResult, SessionError> {
        self.run_inner(SessionRun::new(program), None).await
    }

    /// Like [`Session::run`], with a cancel token, the run's own budgets
    /// and streamed events (a bounded channel: see
    /// [`crate::Runtime::run_with_events`]).
    pub async fn run_with(
        &self,
        request: SessionRun,
        events: Option<mpsc::Sender<RunEvent>>,
    ) -> Result<RunResult, SessionError> {
        self.run_inner(request, events).await
    }

    async fn run_inner(
        &self,
        request: SessionRun,
        events: Option<mpsc::Sender<RunEvent>>,
    ) -> Result<RunResult, SessionError> {
        let inner = &self.inner;
        let runtime = &inner.runtime;
        if runtime.is_shut_down() {
            return Err(MisuseError::ShutDown.into());
        }
        if request.limits.memory_bytes.is_some() {
            return Err(SessionError::Misuse(MisuseError::Limits(crate::config::ConfigError {
                field: "memory_bytes",
                problem: "cannot change within a session: set SessionOptions::memory_bytes when opening it".into(),
            })));
        }
        let config = request.limits.apply(&inner.config).map_err(MisuseError::from)?;
        let type_check = runtime.checks.wanted(request.type_check, &config)?;
        // Runs of one session are serialized; a close does not wait here.
        let mut state = tokio::select! {
            state = inner.state.lock() => state,
            _ = inner.closing.cancelled() => {
                return Err(SessionError::Ended(self.ended().unwrap_or_else(|| CLOSED.to_owned())));
            }
        };
        if let Some(reason) = self.ended() {
            return Err(SessionError::Ended(reason));
        }
        if inner.opened.elapsed() >= inner.options.max_lifetime {
            let reason = format!("it reached its maximum lifetime of {} s", inner.options.max_lifetime.as_secs());
            inner.end(&mut state, reason.clone()).await;
            return Err(SessionError::Ended(reason));
        }
        let durable = inner.live_durable(state.journal.as_ref());
        let cell = CellRun { program: request.program, cancel: request.cancel, events, config, type_check, durable };
        Ok(self.run_cell(&mut state, cell, None).await)
    }

    /// Runs one cell on the session's process, with the state held, and
    /// keeps the session's books: its runs, its process, why it ended, its
    /// cells' record. `replayed` is a replayed earlier cell's own record,
    /// kept instead of the replay's.
    async fn run_cell(&self, state: &mut State, cell: CellRun, replayed: Option<pycage_journal::Cell>) -> RunResult {
        let inner = &self.inner;
        let runtime = &inner.runtime;
        let CellRun { program, cancel, events, config, type_check, durable } = cell;
        let plan = Plan {
            program,
            bindings: inner.bindings.clone(),
            cancel: cancel.unwrap_or_default(),
            stop: inner.closing.clone(),
            events,
            inputs: Vec::new(),
            output_dir: None,
            transcript: None,
            config,
            durable,
            type_check,
            history: state.history.clone(),
        };
        let first = state.runs == 0;
        let run_index = state.runs;
        let baseline = match state.kept.as_ref().and_then(|k| k.scope(runtime.sandboxed())) {
            Some(_) => inner.baseline(run_index, state.end_sample.take()),
            None => None,
        };
        // The idle clock stops while a run is in flight (the watchdog sees
        // the state held) and starts again when it ends.
        *lock(&inner.last_used) = Instant::now();
        let outcome = lifecycle::run(runtime, plan, Keep::Session { kept: &mut state.kept, first, baseline }).await;
        *lock(&inner.last_used) = Instant::now();
        if outcome.took_worker {
            // This session took a pooled child: replace it, between runs.
            runtime.refill_pool();
        }
        if outcome.ran {
            state.runs += 1;
            lock(&inner.edges).ran(run_index);
        }
        let result = outcome.result;
        match (outcome.ran, outcome.after) {
            (true, ChildAfter::Finished) => {
                if let Some(kept) = state.kept.as_ref() {
                    if let Some(scope) = kept.scope(runtime.sandboxed()) {
                        state.end_sample = Some(inner.sample_end(scope, Arc::clone(&kept.held), run_index));
                    }
                }
                // The cell joins the record; one that could not be
                // recorded whole ends the record (no journal would be).
                let record = replayed.or(outcome.cell);
                let max = inner.config.max_journal_bytes;
                let kept = match (state.journal.as_mut(), record) {
                    (Some(journal), Some(record)) => journal.push(record, max),
                    (_, _) => false,
                };
                if !kept {
                    state.journal = None;
                }
            }
            (true, ChildAfter::Gone) => {
                state.kept = None;
                let why = match &result.error {
                    Some(e) => format!("its last run ended as {}: {}", e.kind, e.message),
                    None => "its process exited".to_owned(),
                };
                inner.set_ended(why);
            }
            (false, _) if outcome.took_worker && state.kept.is_none() => {
                if let Some(e) = &result.error {
                    if e.kind == crate::outcome::FailureKind::WorkerExit {
                        inner.set_ended(format!("its process could not be started: {}", e.message));
                    }
                }
            }
            (false, _) => {}
        }
        result
    }

    /// A new session resuming a suspended cell's journal (see
    /// [`crate::Runtime::resume_session`]).
    pub(crate) async fn resume(
        runtime: Arc<Core>,
        journal: &[u8],
        answer: Answer,
        options: SessionOptions,
    ) -> Result<(Session, RunResult), SessionError> {
        crate::names::check_bindings(&options.bindings).map_err(MisuseError::from)?;
        let prepared = crate::durable::prepare_session(&runtime.config, &options.bindings, journal, answer)?;
        let options = SessionOptions { durable: true, ..options };
        let session = Session::open(runtime, options)?;
        let result = session.replay(prepared).await?;
        Ok((session, result))
    }

    /// Replays a suspended session's earlier cells in order, then resumes
    /// its suspended cell: that cell's result. A replay that does not run
    /// to its end (a divergence, a budget, a process that died) ends the
    /// session, and its result, named, is the resume's.
    async fn replay(&self, prepared: SessionResume) -> Result<RunResult, SessionError> {
        let inner = &self.inner;
        let mut state = tokio::select! {
            state = inner.state.lock() => state,
            _ = inner.closing.cancelled() => {
                return Err(SessionError::Ended(self.ended().unwrap_or_else(|| CLOSED.to_owned())));
            }
        };
        let total = prepared.cells.len();
        for (i, record) in prepared.cells.iter().enumerate() {
            let durable = Some(prepared.replay(&inner.config, record));
            let cell = CellRun {
                program: record.program.clone(),
                cancel: None,
                events: None,
                config: Arc::clone(&inner.config),
                type_check: false,
                durable,
            };
            let result = self.run_cell(&mut state, cell, Some(record.clone())).await;
            if self.ended().is_some() || matches!(&result.error, Some(e) if e.kind == FailureKind::Diverged) {
                inner.end(&mut state, format!("the replay of its cell {} of {total} did not finish", i + 1)).await;
                return Ok(replay_failed(result, i + 1, total));
            }
        }
        let config = prepared.limits.apply(&inner.config).map_err(MisuseError::from)?;
        let SessionResume { key, last, .. } = prepared;
        let session = state.journal.clone();
        let cell = CellRun {
            program: last.meta().program.clone(),
            cancel: None,
            events: None,
            config,
            type_check: false,
            durable: Some(Durable::Resumed { key, tape: Box::new(last), session }),
        };
        Ok(self.run_cell(&mut state, cell, None).await)
    }

    /// Ends the session and waits until its process is reaped. Later runs
    /// fail with [`SessionError::Ended`]. Never waits for a run to be
    /// admitted: a queued run is aborted.
    pub async fn close(&self) {
        self.inner.closing.cancel();
        let rx = lock(&self.inner.watchdog_done).take();
        if let Some(rx) = rx {
            let _ = rx.await;
        }
    }
}

const CLOSED: &str = "it was closed, or the runtime was shut down";

/// One cell as [`Session::run_cell`] runs it.
struct CellRun {
    program: String,
    cancel: Option<CancellationToken>,
    events: Option<mpsc::Sender<RunEvent>>,
    config: Arc<RuntimeConfig>,
    type_check: bool,
    durable: Option<Durable>,
}

/// The result of a resume whose replay of earlier cell `n` of `total`
/// did not run to its end: its failure, saying so (a divergence stays
/// `diverged`); its output is dropped, as every replayed cell's is.
fn replay_failed(result: RunResult, n: usize, total: usize) -> RunResult {
    let (kind, message) = match result.error {
        Some(e) => (e.kind, e.message),
        None => (FailureKind::WorkerExit, "its process ended".to_owned()),
    };
    let message = format!("the session's earlier cell {n} of {total} did not replay to its end: {message}");
    RunResult { error: Some(RunFailure { kind, message }), ..RunResult::default() }
}

impl Inner {
    /// Samples the session's CPU at the end of run `run`, off the critical
    /// path and whatever becomes of the next run (a detached blocking
    /// task): the end is recorded, and the sample is also sent on the
    /// returned channel (the next run's CPU baseline, should it start
    /// before the sample is in).
    fn sample_end(
        &self,
        scope: pycage_watchdog::Scope,
        held: Arc<pycage_watchdog::HeldFiles>,
        run: u64,
    ) -> lifecycle::Baseline {
        let (edges, cache) = (Arc::clone(&self.edges), self.runtime.scan_cache());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sampled = tokio::task::spawn_blocking(move || {
            let cpu = pycage_watchdog::sample_cpu_held(scope, &cache, &held);
            lock(&edges).ended(run, cpu);
            let _ = tx.send(cpu);
        });
        drop(sampled);
        rx
    }

    /// Run `run`'s CPU baseline: the last sample since the previous run
    /// ended, or that run's end sample once it is in (`pending`). `None`
    /// when there is neither (the run's watch samples then).
    fn baseline(&self, run: u64, pending: Option<lifecycle::Baseline>) -> Option<lifecycle::Baseline> {
        match lock(&self.edges).baseline(run) {
            Some(cpu) => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let _ = tx.send(cpu);
                Some(rx)
            }
            None => pending,
        }
    }

    /// A new cell's durability: it records when the session does.
    fn live_durable(&self, journal: Option<&SessionCells>) -> Option<Durable> {
        let (key, digest) = (self.runtime.config.journal_key.as_ref()?, self.digest.as_ref()?);
        let session = journal?.clone();
        Some(Durable::Live { key: key.clone(), bindings: digest.clone(), session: Some(session) })
    }

    fn set_ended(&self, reason: String) {
        lock(&self.ended).get_or_insert(reason);
    }

    /// Ends the session: its child is stopped and reaped.
    async fn end(&self, state: &mut State, reason: String) {
        self.set_ended(reason);
        if let Some(mut kept) = state.kept.take() {
            let _ = kept.worker.stop(self.config.grace).await;
        }
    }
}

/// The session's CPU at its runs' ends and between runs (see the module
/// docs). End samples land whenever their blocking task runs: one that
/// comes after the next run has run opens no gap (that gap's CPU was the
/// next run's).
#[derive(Debug, Default)]
struct Edges {
    /// The gap after the last run that ended, while no later run has run.
    gap: Option<Gap>,
    /// The last run that ran.
    ran: Option<u64>,
    /// CPU used in closed gaps.
    idle: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Gap {
    /// The run it follows.
    after: u64,
    /// The session's CPU at that run's end.
    end: Duration,
    /// ... and at the latest sample since.
    latest: Duration,
}

impl Edges {
    /// Run `run` ended with the session's processes at `cpu`.
    fn ended(&mut self, run: u64, cpu: Duration) {
        if self.ran.is_some_and(|ran| ran > run) {
            return;
        }
        self.gap = Some(Gap { after: run, end: cpu, latest: cpu });
    }

    /// A sample between runs, with `runs` runs done.
    fn sampled(&mut self, runs: u64, cpu: Duration) {
        if let Some(gap) = self.gap.as_mut().filter(|g| g.after + 1 == runs) {
            gap.latest = gap.latest.max(cpu);
        }
    }

    /// Run `run`'s CPU baseline: the latest sample of the gap before it,
    /// if that gap's end sample is in.
    fn baseline(&self, run: u64) -> Option<Duration> {
        self.gap.filter(|g| g.after + 1 == run).map(|g| g.latest)
    }

    /// Run `run` ran: the gap before it closes at its latest sample.
    fn ran(&mut self, run: u64) {
        if let Some(gap) = self.gap.take_if(|g| g.after < run) {
            self.idle += gap.latest.saturating_sub(gap.end);
        }
        self.ran = Some(self.ran.map_or(run, |r| r.max(run)));
    }

    /// CPU between runs so far, given the session's CPU `now` with `runs`
    /// runs done: the closed gaps, and the open one since the last run's
    /// end (once its end sample is in).
    fn idle_at(&self, runs: u64, now: Duration) -> Duration {
        match self.gap {
            Some(gap) if gap.after + 1 == runs => self.idle + now.saturating_sub(gap.end),
            _ => self.idle,
        }
    }
}

/// Why a sample between runs ends the session, if it does.
fn over_idle_budget(idle: Duration, memory_now: u64, options: &SessionOptions, memory: u64) -> Option<String> {
    if idle > options.idle_cpu {
        return Some(format!(
            "its processes used {:.1} s of CPU between runs, over its budget of {:.1} s",
            idle.as_secs_f64(),
            options.idle_cpu.as_secs_f64()
        ));
    }
    if memory_now > memory {
        return Some(format!(
            "its processes held {} MiB between runs, over its memory budget of {} MiB",
            memory_now >> 20,
            memory >> 20
        ));
    }
    None
}

/// Ends the session when it has been idle too long, is too old, is closed,
/// the runtime shuts down, or its processes go over their budgets between
/// runs; then reaps its child. Holds the session only while it acts: a
/// dropped session's child is killed by its `Worker`'s drop, and `dropped`
/// stops this task.
async fn watchdog(session: Weak<Inner>, dropped: CancellationToken, done: tokio::sync::oneshot::Sender<()>) {
    loop {
        let (closing, wake_at) = {
            let Some(inner) = session.upgrade() else { break };
            if lock(&inner.ended).is_some() && inner.state.try_lock().is_ok_and(|s| s.kept.is_none()) {
                break; // a run already ended it and reaped its child
            }
            let last = *lock(&inner.last_used);
            let wake_at = (last + inner.options.idle_timeout)
                .min(inner.opened + inner.options.max_lifetime)
                .min(Instant::now() + IDLE_SAMPLE);
            (inner.closing.clone(), wake_at)
        };
        let closed = tokio::select! {
            _ = dropped.cancelled() => break,
            _ = closing.cancelled() => true,
            _ = tokio::time::sleep_until(wake_at) => false,
        };
        let Some(inner) = session.upgrade() else { break };
        let now = Instant::now();
        let last = *lock(&inner.last_used);
        let idle_since = |last: Instant| Instant::now() >= last + inner.options.idle_timeout;
        let mut idle = false;
        let reason = if closed {
            CLOSED.to_owned()
        } else if now >= inner.opened + inner.options.max_lifetime {
            format!("it reached its maximum lifetime of {} s", inner.options.max_lifetime.as_secs())
        } else if now >= last + inner.options.idle_timeout {
            // A run in flight holds the state: the session is busy, not idle
            // (the run's end restarts the idle clock).
            if inner.state.try_lock().is_err() {
                continue;
            }
            idle = true;
            format!("it was idle for {} s", inner.options.idle_timeout.as_secs())
        } else {
            // Between runs (no run holds the state): sample its processes.
            let scoped = inner.state.try_lock().ok().and_then(|s| {
                let kept = s.kept.as_ref()?;
                kept.scope(inner.runtime.sandboxed()).map(|sc| (sc, Arc::clone(&kept.held), s.runs))
            });
            let Some((scope, held, runs)) = scoped else { continue };
            let (cache, ceiling) = (inner.runtime.scan_cache(), inner.config.address_space_bytes);
            let sampled = move || pycage_watchdog::sample_with_held(scope, &cache, &held, ceiling);
            let usage = tokio::task::spawn_blocking(sampled).await;
            let Ok(usage) = usage else { continue };
            // A run that started meanwhile counts its own CPU (it holds the
            // state: no run starts while the sample is recorded).
            let Ok(now_state) = inner.state.try_lock() else { continue };
            if now_state.runs != runs {
                continue;
            }
            let idle = {
                let mut edges = lock(&inner.edges);
                edges.sampled(runs, usage.cpu);
                edges.idle_at(runs, usage.cpu)
            };
            drop(now_state);
            match over_idle_budget(idle, usage.memory_bytes, &inner.options, inner.config.address_space_bytes) {
                Some(reason) => reason,
                None => continue,
            }
        };
        // A run in flight settles first: close and shutdown abort it, its
        // own budgets bound it otherwise.
        let mut state = inner.state.lock().await;
        if idle && !idle_since(*lock(&inner.last_used)) {
            continue; // a run started and ended since the check: not idle
        }
        inner.end(&mut state, reason).await;
        break;
    }
    let _ = done.send(());
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn gaps_between_runs_add_up_whatever_order_the_samples_land_in() {
        let mut e = Edges::default();
        e.ran(0);
        // Run 0 ends at 100 ms of CPU; an idle sample sees 150, another 300.
        e.ended(0, MS(100));
        assert_eq!(e.idle_at(1, MS(150)), MS(50), "the open gap counts before the next run starts");
        e.sampled(1, MS(150));
        e.sampled(1, MS(300));
        // Run 1's baseline is the gap's last sample; the gap closes when it ran.
        assert_eq!(e.baseline(1), Some(MS(300)));
        e.ran(1);
        assert_eq!(e.idle, MS(200));
        // Run 2 starts before run 1's end sample is in: no baseline here
        // (it waits for that sample), and the late sample opens no gap.
        assert_eq!(e.baseline(2), None);
        e.ran(2);
        e.ended(1, MS(500));
        assert_eq!(e.idle_at(3, MS(5000)), MS(200), "the gap before run 2 was run 2's");
        // Run 2's end; between runs after it, closed gaps plus the open one.
        e.ended(2, MS(1000));
        assert_eq!(e.idle_at(3, MS(1250)), MS(200 + 250));
    }

    #[test]
    fn a_late_end_sample_still_opens_the_gap_of_a_run_in_flight() {
        let mut e = Edges::default();
        e.ran(0);
        // Run 1 started (waiting for run 0's end sample); the sample lands.
        assert_eq!(e.baseline(1), None);
        e.ended(0, MS(40));
        e.ran(1);
        assert_eq!(e.idle, Duration::ZERO, "nothing was sampled between the runs");
        assert!(e.gap.is_none());
    }

    #[test]
    fn a_run_that_did_not_run_leaves_the_gap_open() {
        let mut e = Edges::default();
        e.ran(0);
        e.ended(0, MS(10));
        // An attempt at run 1 takes its baseline and never runs: the gap
        // is still open, and still counted between runs.
        assert_eq!(e.baseline(1), Some(MS(10)));
        e.sampled(1, MS(70));
        assert_eq!(e.idle_at(1, MS(90)), MS(80));
        assert_eq!(e.baseline(1), Some(MS(70)));
        e.ran(1);
        assert_eq!(e.idle, MS(60));
    }

    #[test]
    fn the_first_run_has_no_gap_before_it() {
        let mut e = Edges::default();
        assert_eq!(e.baseline(0), None);
        e.ran(0);
        e.ended(0, MS(60));
        assert_eq!(e.idle, Duration::ZERO);
        assert_eq!(e.idle_at(1, MS(60)), Duration::ZERO);
    }
}
