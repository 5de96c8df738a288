//! Driving one run (of a runtime or of a session) to Python.
//!
//! A blocking run ([`wait_blocking`]) is driven on the calling thread, with
//! the GIL released, until it settles or until Python code has to run on
//! that thread (an event batch, a signal check): then the run is handed to
//! the runtime's workers first, so that no Python code ever stalls it (its
//! wall clock, its watchdog, its binding replies). A run without events
//! that settles between two signal checks thus never changes threads; a
//! spawned run would cost a wake-up of a worker to start it and one of the
//! caller to end it, each a scheduling latency on a loaded machine.
//! Signal checks follow one shared tick ([`SignalTicks`]) rather than a
//! timer per run: registering a timer wakes the worker parked in the
//! reactor, one more wake-up per run.
//! A `start()`ed run is spawned on the workers and handed to an asyncio
//! loop ([`deliver_to_loop`]). Events stream in batches: on the calling
//! thread, or on the loop.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use pycage_runtime::{CancellationToken, MisuseError, RunEvent, RunResult, SessionError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::convert::json_to_py;
use crate::errors::{error, misuse};

/// How often a blocking run on the main thread checks for signals.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// How many ticks the signal tick goes on for without a run waiting for
/// it (10 s): runs a few seconds apart find it running.
const IDLE_TICKS: u32 = 100;

/// The signal tick of the blocking runs on the main thread: one task of
/// the runtime notifies every [`SIGNAL_POLL`] while such a run is in
/// flight, and for [`IDLE_TICKS`] after the last one.
pub struct SignalTicks {
    notify: tokio::sync::Notify,
    /// Runs waiting for ticks, and whether the ticking task is running.
    state: Mutex<(usize, bool)>,
}

/// A blocking run's registration with [`SignalTicks`]: the tick keeps
/// going while it lives.
struct Ticking(Arc<SignalTicks>);

impl Drop for Ticking {
    fn drop(&mut self) {
        if let Ok(mut state) = self.0.state.lock() {
            state.0 = state.0.saturating_sub(1);
        }
    }
}

impl SignalTicks {
    /// This process's ticks (a forked child, whose runtime is a new one,
    /// starts its own).
    fn get() -> Arc<SignalTicks> {
        static TICKS: Mutex<Option<(u32, Arc<SignalTicks>)>> = Mutex::new(None);
        static FALLBACK: OnceLock<Arc<SignalTicks>> = OnceLock::new();
        let pid = std::process::id();
        let Ok(mut slot) = TICKS.lock() else {
            return Arc::clone(FALLBACK.get_or_init(SignalTicks::new));
        };
        match slot.as_ref() {
            Some((owner, ticks)) if *owner == pid => Arc::clone(ticks),
            _ => {
                let ticks = SignalTicks::new();
                *slot = Some((pid, Arc::clone(&ticks)));
                ticks
            }
        }
    }

    fn new() -> Arc<SignalTicks> {
        Arc::new(SignalTicks { notify: tokio::sync::Notify::new(), state: Mutex::new((0, false)) })
    }

    /// Registers a run; starts the ticking task on the current runtime
    /// if it is not running.
    fn register(self: &Arc<Self>) -> Ticking {
        let start = match self.state.lock() {
            Ok(mut state) => {
                state.0 += 1;
                !std::mem::replace(&mut state.1, true)
            }
            Err(_) => false,
        };
        if start {
            let ticks = Arc::clone(self);
            tokio::runtime::Handle::current().spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + SIGNAL_POLL, SIGNAL_POLL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut idle = 0;
                loop {
                    tick.tick().await;
                    ticks.notify.notify_waiters();
                    let Ok(mut state) = ticks.state.lock() else { return };
                    idle = if state.0 == 0 { idle + 1 } else { 0 };
                    if idle >= IDLE_TICKS {
                        state.1 = false;
                        return;
                    }
                }
            });
        }
        Ticking(Arc::clone(self))
    }
}

/// Why a run produced no result.
pub enum RunErr {
    Misuse(MisuseError),
    Session(SessionError),
    /// The run panicked (a bug): reported, never hung on.
    Task(String),
}

impl RunErr {
    fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self {
            RunErr::Misuse(e) | RunErr::Session(SessionError::Misuse(e)) => misuse(py, e),
            RunErr::Session(SessionError::Ended(why)) => {
                error(py, "SessionEndedError", format!("the session has ended: {why}; open a new one"))
            }
            RunErr::Task(why) => error(py, "PycageError", format!("the run's task failed: {why}")),
        }
    }
}

pub type Outcome = Result<RunResult, RunErr>;

type RunFuture = Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>;

/// A run not started yet and the receiver of its events (closed when the
/// run is over; never fed when `events` is `None`).
pub struct Prepared {
    run: RunFuture,
    rx: mpsc::Receiver<RunEvent>,
}

/// Prepares `make(events_sender)`; nothing runs until it is driven.
pub fn prepare<F, Fut>(events: Option<usize>, make: F) -> Prepared
where
    F: FnOnce(Option<mpsc::Sender<RunEvent>>) -> Fut,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    // A channel of the runtime's `max_buffered_events` (a closed one of 1
    // without events).
    let (tx, rx) = mpsc::channel(events.unwrap_or(1));
    Prepared { run: Box::pin(make(events.map(|_| tx))), rx }
}

/// Where a blocking run is being driven.
enum Driving {
    /// Polled by the calling thread.
    Here(RunFuture),
    /// Handed to the runtime's workers.
    Workers(JoinHandle<Outcome>),
    /// Settled (its outcome taken).
    Done,
}

impl Driving {
    /// Hands a run still driven here to the runtime's workers (the
    /// current runtime: this is called inside its `block_on`).
    fn hand_off(&mut self) {
        if matches!(self, Driving::Here(_)) {
            // This thread must not wait on the run's socket any more.
            pycage_runtime::forget_wait_hint();
            if let Driving::Here(run) = std::mem::replace(self, Driving::Done) {
                *self = Driving::Workers(tokio::runtime::Handle::current().spawn(run));
            }
        }
    }
}

impl Future for Driving {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let polled = match &mut *self {
            // A panic in the run is reported as a spawned task's would be
            // (the future is not polled again).
            Driving::Here(run) => match std::panic::catch_unwind(AssertUnwindSafe(|| run.as_mut().poll(cx))) {
                Ok(p) => p,
                Err(panic) => Poll::Ready(Err(RunErr::Task(panic_message(panic.as_ref())))),
            },
            Driving::Workers(join) => Pin::new(join).poll(cx).map(joined),
            Driving::Done => Poll::Ready(Err(RunErr::Task("the run was polled after it settled".into()))),
        };
        if polled.is_ready() {
            *self = Driving::Done;
        }
        polled
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => format!("panicked: {s}"),
        (None, Some(s)) => format!("panicked: {s}"),
        (None, None) => "panicked".into(),
    }
}

/// Events as Python tuples: `("log", line)`, `("call", id, global, name,
/// args)`, `("finished", id, error_or_None)`, `("display", data, metadata)`
/// (see [`display_parts`]).
fn event_batch<'py>(py: Python<'py>, events: Vec<RunEvent>) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for ev in events {
        let item = match ev {
            RunEvent::Log(line) => ("log", line).into_pyobject(py)?.into_any(),
            RunEvent::Call { id, global, name, args } => {
                ("call", id, global, name, json_to_py(py, args.root())?).into_pyobject(py)?.into_any()
            }
            RunEvent::CallFinished { id, error } => ("finished", id, error).into_pyobject(py)?.into_any(),
            RunEvent::Display(d) => {
                let (data, metadata) = display_parts(py, &d)?;
                ("display", data, metadata).into_pyobject(py)?.into_any()
            }
        };
        list.append(item)?;
    }
    Ok(list)
}

/// Everything queued now, after `first`.
fn drain(first: RunEvent, rx: &mut mpsc::Receiver<RunEvent>) -> Vec<RunEvent> {
    let mut batch = vec![first];
    while let Ok(ev) = rx.try_recv() {
        batch.push(ev);
    }
    batch
}

fn joined(r: Result<Outcome, tokio::task::JoinError>) -> Outcome {
    r.unwrap_or_else(|e| Err(RunErr::Task(e.to_string())))
}

type DisplayParts<'py> = (Vec<(String, String)>, Bound<'py, PyAny>);

/// A display as `(data, metadata)`: `[(mime, text), ...]` in the order
/// sent, and the metadata as a dict (`{}` when none).
fn display_parts<'py>(py: Python<'py>, d: &pycage_runtime::Display) -> PyResult<DisplayParts<'py>> {
    let metadata = match &d.metadata {
        Some(m) => json_to_py(py, m.root())?,
        None => pyo3::types::PyDict::new(py).into_any(),
    };
    Ok((d.data.clone(), metadata))
}

/// What was copied to the output directory, when one was asked for
/// (`None` otherwise): [`copy_parts`].
fn output_parts<'py>(py: Python<'py>, r: &RunResult) -> PyResult<Bound<'py, PyAny>> {
    match &r.output {
        Some(o) => copy_parts(py, o),
        None => Ok(py.None().into_bound(py)),
    }
}

/// A copy's report: `([(path, bytes)], [(path, reason, kind)], bytes,
/// truncated)`.
pub fn copy_parts<'py>(py: Python<'py>, o: &pycage_runtime::CopyReport) -> PyResult<Bound<'py, PyAny>> {
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let files: Vec<(String, u64)> = o.files.iter().map(|f| (path(&f.path), f.bytes)).collect();
    let skipped: Vec<(String, String, &str)> =
        o.skipped.iter().map(|s| (path(&s.path), s.reason.clone(), s.kind.as_str())).collect();
    Ok((files, skipped, o.bytes, o.truncated).into_pyobject(py)?.into_any())
}

/// `(has_value, value, logs, error_kind, error_message, dropped_frames,
/// displays, output, suspension)`: `displays` a list of [`display_parts`],
/// `output` [`output_parts`], `suspension` `(global, name, args, reason,
/// journal)` or `None`.
pub fn result_parts<'py>(py: Python<'py>, r: &RunResult) -> PyResult<Bound<'py, PyTuple>> {
    let value = match &r.value {
        Some(v) => json_to_py(py, v.root())?,
        None => py.None().into_bound(py),
    };
    let (kind, message) = match &r.error {
        Some(e) => (Some(e.kind.as_str()), Some(e.message.as_str())),
        None => (None, None),
    };
    let displays = PyList::empty(py);
    for d in &r.displays {
        displays.append(display_parts(py, d)?)?;
    }
    let output = output_parts(py, r)?;
    let suspension = match &r.suspension {
        Some(s) => {
            let journal = pyo3::types::PyBytes::new(py, &s.journal);
            let args = json_to_py(py, s.call.args.root())?;
            (s.call.global.as_str(), s.call.name.as_str(), args, s.reason.as_str(), journal)
                .into_pyobject(py)?
                .into_any()
        }
        None => py.None().into_bound(py),
    };
    let parts = (
        r.value.is_some(),
        value,
        r.logs.clone(),
        kind,
        message,
        r.dropped_frames,
        displays,
        output,
        r.diagnostics.clone(),
    );
    // One more than the tuple conversions pyo3 has: the suspension appended.
    let tuple = parts.into_pyobject(py)?;
    let mut items: Vec<Bound<'py, PyAny>> = tuple.iter().collect();
    items.push(suspension);
    PyTuple::new(py, items)
}

/// The next signal tick (never, without ticks).
fn next_tick(ticks: Option<&SignalTicks>) -> Pin<Box<dyn Future<Output = ()> + '_>> {
    match ticks {
        Some(t) => Box::pin(t.notify.notified()),
        None => Box::pin(std::future::pending()),
    }
}

/// Drives a run to settlement with the GIL released (see the module docs)
/// and returns its parts. `on_event(batch)` runs on this thread. An
/// exception from it, or from a signal handler (when `poll_signals`),
/// cancels `token` and is raised once the run has settled.
pub fn wait_blocking<'py>(
    py: Python<'py>,
    rt: &tokio::runtime::Runtime,
    run: Prepared,
    token: CancellationToken,
    on_event: Option<Py<PyAny>>,
    poll_signals: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let Prepared { run, mut rx } = run;
    let (result, raised) = py.detach(|| {
        pycage_runtime::block_on(rt.handle(), async move {
            let mut run = Driving::Here(run);
            let ticks = poll_signals.then(SignalTicks::get);
            let _ticking = ticks.as_ref().map(SignalTicks::register);
            let mut tick = next_tick(ticks.as_deref());
            let mut raised: Option<PyErr> = None;
            let deliver = |batch: Vec<RunEvent>, raised: &mut Option<PyErr>| {
                if raised.is_some() {
                    return;
                }
                if let Some(cb) = &on_event {
                    let r = Python::attach(|py| event_batch(py, batch).and_then(|b| cb.call1(py, (b,)).map(drop)));
                    if let Err(e) = r {
                        *raised = Some(e);
                        token.cancel();
                    }
                }
            };
            let result = loop {
                tokio::select! {
                    biased;
                    Some(ev) = rx.recv() => {
                        // Python code runs next, on this thread.
                        run.hand_off();
                        deliver(drain(ev, &mut rx), &mut raised);
                    }
                    r = &mut run => break r,
                    _ = &mut tick, if poll_signals && raised.is_none() => {
                        tick = next_tick(ticks.as_deref());
                        run.hand_off();
                        if let Err(e) = Python::attach(|py| py.check_signals()) {
                            raised = Some(e);
                            token.cancel();
                        }
                    }
                }
            };
            // The run's sender is gone: deliver what is still queued.
            while let Some(ev) = rx.recv().await {
                deliver(drain(ev, &mut rx), &mut raised);
            }
            (result, raised)
        })
    });
    if let Some(e) = raised {
        return Err(e);
    }
    match result {
        Ok(r) => result_parts(py, &r),
        Err(e) => Err(e.into_pyerr(py)),
    }
}

/// Spawns a run on the runtime's workers and hands it to an asyncio loop:
/// event batches go to
/// `event_loop.call_soon_threadsafe(on_event, batch)`, then the
/// [`RunOutcome`] to `event_loop.call_soon_threadsafe(on_done, outcome)`.
pub fn deliver_to_loop(
    rt: &tokio::runtime::Runtime,
    run: Prepared,
    event_loop: Py<PyAny>,
    on_done: Py<PyAny>,
    on_event: Option<Py<PyAny>>,
) {
    let Prepared { run, mut rx } = run;
    let join = rt.spawn(run);
    let event_loop = Arc::new(event_loop);
    rt.spawn(async move {
        tokio::pin!(join);
        let deliver = |batch: Vec<RunEvent>| {
            if let Some(cb) = &on_event {
                Python::try_attach(|py| {
                    if let Ok(b) = event_batch(py, batch) {
                        let _ = event_loop.call_method1(py, "call_soon_threadsafe", (cb, b));
                    }
                });
            }
        };
        let result = loop {
            tokio::select! {
                biased;
                Some(ev) = rx.recv() => deliver(drain(ev, &mut rx)),
                r = &mut join => break joined(r),
            }
        };
        while let Some(ev) = rx.recv().await {
            deliver(drain(ev, &mut rx));
        }
        Python::try_attach(|py| {
            if let Ok(outcome) = Py::new(py, RunOutcome { result: Mutex::new(Some(result)) }) {
                // A closed loop raises; nobody is waiting then.
                let _ = event_loop.call_method1(py, "call_soon_threadsafe", (on_done, outcome));
            }
        });
    });
}

/// A finished `start()`ed run, handed to the loop's `on_done`.
#[pyclass(frozen, module = "pycage._native")]
pub struct RunOutcome {
    result: Mutex<Option<Outcome>>,
}

#[pymethods]
impl RunOutcome {
    /// The result as a tuple (see `NativeRuntime.run`), or the error raised.
    fn parts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let taken = self.result.lock().ok().and_then(|mut r| r.take());
        match taken {
            Some(Ok(r)) => result_parts(py, &r),
            Some(Err(e)) => Err(e.into_pyerr(py)),
            None => Err(error(py, "PycageError", "the outcome was already taken".into())),
        }
    }
}

/// Cancels a `start()`ed run: it settles as `abort`.
#[pyclass(frozen, module = "pycage._native")]
pub struct RunHandle {
    pub(crate) token: CancellationToken,
}

#[pymethods]
impl RunHandle {
    fn cancel(&self) {
        self.token.cancel();
    }
}
