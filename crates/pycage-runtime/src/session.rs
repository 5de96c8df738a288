//! Sessions: one child that stays alive across runs and keeps its module
//! globals, like a notebook kernel.
//!
//! A [`Session`] holds one child (taken from the pool, or spawned) booted
//! with `session: true`: after each `done` it waits for the next `run` in
//! the same `__main__` globals and the same working directory. Runs of one
//! session are serialized; each has the runtime's wall-clock, CPU, log and
//! value budgets of its own (CPU counted from the run's start, so a long
//! session never dies of the sum of its runs). The session has an idle
//! timeout, a maximum lifetime and a memory budget (`RLIMIT_AS` of its
//! child, for its whole life).
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

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::bindings::Namespace;
use crate::config::RuntimeConfig;
use crate::run::machine::RunMachine;
use crate::run::{self, ChildAfter, Opening};
use crate::runtime::{MisuseError, Runtime};
use crate::spawn::Worker;
use crate::{FailureKind, RunEvent, RunResult};

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
    /// `RLIMIT_AS` of the session's process; `None` takes the runtime's
    /// `address_space_bytes`.
    pub memory_bytes: Option<u64>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            bindings: Vec::new(),
            idle_timeout: Duration::from_secs(600),
            max_lifetime: Duration::from_secs(3600),
            memory_bytes: None,
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
    /// Cancelling it settles the run as `abort` (and ends the session).
    pub cancel: Option<CancellationToken>,
}

impl SessionRun {
    /// A run of `program`.
    pub fn new(program: impl Into<String>) -> Self {
        SessionRun { program: program.into(), cancel: None }
    }

    /// Sets the cancel token.
    pub fn with_cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

struct State {
    worker: Option<Worker>,
    runs: u64,
}

struct Inner {
    runtime: Runtime,
    config: RuntimeConfig,
    bindings: Vec<Namespace>,
    options: SessionOptions,
    opened: Instant,
    state: tokio::sync::Mutex<State>,
    /// Why the session ended; set once.
    ended: Mutex<Option<String>>,
    last_used: Mutex<Instant>,
    /// Cancelled by `close` and by the runtime's shutdown (a child token):
    /// a run in flight is aborted and the watchdog ends the session.
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
    pub(crate) fn open(runtime: Runtime, options: SessionOptions) -> Result<Session, MisuseError> {
        crate::names::check_bindings(&options.bindings)?;
        if runtime.is_shut_down() {
            return Err(MisuseError::ShutDown);
        }
        let mut config = runtime.config().clone();
        if let Some(bytes) = options.memory_bytes {
            config.address_space_bytes = bytes;
        }
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let dropped = CancellationToken::new();
        let now = Instant::now();
        let inner = Arc::new(Inner {
            bindings: options.bindings.clone(),
            runtime: runtime.clone(),
            config,
            options,
            opened: now,
            state: tokio::sync::Mutex::new(State { worker: None, runs: 0 }),
            ended: Mutex::new(None),
            last_used: Mutex::new(now),
            closing: runtime.shutdown_token().child_token(),
            _dropped: dropped.clone().drop_guard(),
            watchdog_done: Mutex::new(Some(done_rx)),
        });
        runtime.background().spawn(watchdog(Arc::downgrade(&inner), dropped, done_tx));
        Ok(Session { inner })
    }

    /// Why the session ended, if it has.
    pub fn ended(&self) -> Option<String> {
        self.inner.ended.lock().ok().and_then(|e| e.clone())
    }

    /// Runs `program` in the session's globals.
    pub async fn run(&self, program: impl Into<String>) -> Result<RunResult, SessionError> {
        self.run_inner(SessionRun::new(program), None).await
    }

    /// Like [`Session::run`], with a cancel token and streamed events.
    pub async fn run_with(
        &self,
        request: SessionRun,
        events: Option<mpsc::UnboundedSender<RunEvent>>,
    ) -> Result<RunResult, SessionError> {
        self.run_inner(request, events).await
    }

    async fn run_inner(
        &self,
        request: SessionRun,
        events: Option<mpsc::UnboundedSender<RunEvent>>,
    ) -> Result<RunResult, SessionError> {
        let inner = &self.inner;
        let runtime = &inner.runtime;
        if runtime.is_shut_down() {
            return Err(MisuseError::ShutDown.into());
        }
        let _token = runtime.background().token();
        let mut state = inner.state.lock().await;
        if let Some(reason) = self.ended() {
            return Err(SessionError::Ended(reason));
        }
        if inner.opened.elapsed() >= inner.options.max_lifetime {
            let reason = format!("it reached its maximum lifetime of {} s", inner.options.max_lifetime.as_secs());
            inner.end(&mut state, reason.clone()).await;
            return Err(SessionError::Ended(reason));
        }
        let Some(_permit) = runtime.admit().await else {
            return Err(MisuseError::ShutDown.into());
        };
        let deadline = Instant::now() + inner.config.wall_time;
        let opening = if state.runs == 0 { Opening::SessionFirst } else { Opening::SessionNext };
        if state.worker.is_none() {
            match runtime.take_worker().await {
                Ok(w) => state.worker = Some(w),
                Err(message) => {
                    inner.set_ended(format!("its process could not be started: {message}"));
                    return Ok(RunResult::failed(FailureKind::WorkerExit, message, Vec::new()));
                }
            }
        }
        state.runs += 1;
        let state = &mut *state;
        let Some(worker) = state.worker.as_mut() else {
            return Err(SessionError::Ended("it has no process".into()));
        };
        let machine =
            RunMachine::new(&inner.config, opening, request.program, inner.bindings.clone(), events.is_some());
        let (result, after) = run::execute(
            worker,
            machine,
            run::RunInputs {
                config: &inner.config,
                cancel: request.cancel.unwrap_or_default(),
                shutdown: inner.closing.clone(),
                events,
                deadline,
                // A session's CPU budget is per run (soft RLIMIT_CPU from
                // each run's start); the run-wide watchdog is not applied.
                budget: crate::watchdog::budget_watch(None, crate::watchdog::Budget::UNLIMITED),
            },
        )
        .await;
        if let Ok(mut last) = inner.last_used.lock() {
            *last = Instant::now();
        }
        if opening == Opening::SessionFirst {
            // This session took a pooled child: replace it, between runs.
            runtime.refill_pool();
        }
        if after == ChildAfter::Gone {
            state.worker = None;
            let why = match &result.error {
                Some(e) => format!("its last run ended as {}: {}", e.kind, e.message),
                None => "its process exited".to_owned(),
            };
            inner.set_ended(why);
        }
        Ok(result)
    }

    /// Ends the session and waits until its process is reaped. Later runs
    /// fail with [`SessionError::Ended`].
    pub async fn close(&self) {
        self.inner.closing.cancel();
        let rx = self.inner.watchdog_done.lock().ok().and_then(|mut d| d.take());
        if let Some(rx) = rx {
            let _ = rx.await;
        }
    }
}

impl Inner {
    fn set_ended(&self, reason: String) {
        if let Ok(mut ended) = self.ended.lock() {
            ended.get_or_insert(reason);
        }
    }

    /// Ends the session: its child is stopped and reaped.
    async fn end(&self, state: &mut State, reason: String) {
        self.set_ended(reason);
        if let Some(mut worker) = state.worker.take() {
            let _ = worker.stop(self.config.grace).await;
        }
    }
}

/// Ends the session when it has been idle too long, is too old, is closed,
/// or the runtime shuts down; then reaps its child. Holds the session only
/// while it acts: a dropped session's child is killed by its `Worker`'s
/// drop, and `dropped` stops this task.
async fn watchdog(session: Weak<Inner>, dropped: CancellationToken, done: tokio::sync::oneshot::Sender<()>) {
    loop {
        let (closing, wake_at) = {
            let Some(inner) = session.upgrade() else { break };
            if inner.ended.lock().map(|e| e.is_some()).unwrap_or(true)
                && inner.state.try_lock().is_ok_and(|s| s.worker.is_none())
            {
                break; // a run already ended it and reaped its child
            }
            let last = inner.last_used.lock().map(|l| *l).unwrap_or_else(|_| Instant::now());
            let wake_at = (last + inner.options.idle_timeout).min(inner.opened + inner.options.max_lifetime);
            (inner.closing.clone(), wake_at)
        };
        let closed = tokio::select! {
            _ = dropped.cancelled() => break,
            _ = closing.cancelled() => true,
            _ = tokio::time::sleep_until(wake_at) => false,
        };
        let Some(inner) = session.upgrade() else { break };
        let now = Instant::now();
        let last = inner.last_used.lock().map(|l| *l).unwrap_or(now);
        let reason = if closed {
            "it was closed, or the runtime was shut down".to_owned()
        } else if now >= inner.opened + inner.options.max_lifetime {
            format!("it reached its maximum lifetime of {} s", inner.options.max_lifetime.as_secs())
        } else if now >= last + inner.options.idle_timeout {
            format!("it was idle for {} s", inner.options.idle_timeout.as_secs())
        } else {
            continue; // used meanwhile: sleep again
        };
        // A run in flight settles first: close and shutdown abort it, its
        // own budgets bound it otherwise.
        let mut state = inner.state.lock().await;
        inner.end(&mut state, reason).await;
        break;
    }
    let _ = done.send(());
}
