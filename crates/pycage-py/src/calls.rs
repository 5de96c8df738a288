//! Python callables as pycage bindings.
//!
//! A program's call arrives on a tokio worker with its JSON arguments. An
//! arguments object becomes keyword arguments, any other value one
//! positional argument. Then:
//!
//! - a sync callable runs on tokio's blocking pool (a thread pool that grows
//!   with demand), in a copy of the caller's `contextvars` context, so a
//!   slow or blocking binding never stalls the supervisor or an event loop;
//! - an async callable is started on the run's event loop (the caller's
//!   loop for `arun`, a private loop thread for `run`) with
//!   `call_soon_threadsafe(..., context=ctx)`; the task's done callback
//!   converts its result on the loop thread and sends it through a oneshot.
//!
//! When the run settles first (timeout, abort, the program finished without
//! awaiting), the runtime drops the call's future; dropping it cancels the
//! Python task, so no binding keeps running for a run that is over.
//! (pyo3-async-runtimes' `into_future_with_locals` leaves the task running
//! when its future is dropped, which is why this bridge is our own.)
//!
//! Everything a binding raises (`SystemExit` and `KeyboardInterrupt`
//! included) rejects the call with the exception's message; a result that is
//! not JSON rejects it with the path of the offending value. Nothing a
//! binding does reaches the host's control flow.

use std::sync::{Arc, Mutex};

use pycage_protocol::JsonValue;
use pycage_runtime::{Binding, BindingError, CallContext};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use tokio::sync::oneshot;

use crate::convert::{json_to_py, py_to_json};

/// The per-run Python side of the bridge (built by `pycage._runtime`).
pub struct Site {
    /// `call_sync(func, args, kwargs)`: runs the callable in a context copy;
    /// awaits an awaitable result on the run's loop.
    call_sync: Py<PyAny>,
    /// `call_async(func, args, kwargs, reply)`: schedules the call on the loop.
    call_async: Py<PyAny>,
    /// `cancel(reply)`: cancels the reply's task on the loop.
    cancel: Py<PyAny>,
}

impl Site {
    /// Reads the three callables from the Python site object.
    pub fn from_py(site: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Site {
            call_sync: site.getattr("call_sync")?.unbind(),
            call_async: site.getattr("call_async")?.unbind(),
            cancel: site.getattr("cancel")?.unbind(),
        })
    }
}

type CallResult = Result<JsonValue, BindingError>;

/// A call's way back from the event loop: the done callback resolves or
/// rejects it exactly once.
#[pyclass(frozen, module = "pycage._native")]
pub struct Reply {
    label: String,
    tx: Mutex<Option<oneshot::Sender<CallResult>>>,
    task: Mutex<Option<Py<PyAny>>>,
}

impl Reply {
    fn send(&self, result: CallResult) {
        if let Some(tx) = self.tx.lock().ok().and_then(|mut tx| tx.take()) {
            let _ = tx.send(result);
        }
    }
}

#[pymethods]
impl Reply {
    /// Sends the binding's result (converted to JSON now, on the loop thread).
    fn resolve(&self, value: &Bound<'_, PyAny>) {
        self.send(result_to_json(&self.label, value));
    }

    /// Rejects the call with this message.
    fn reject(&self, message: String) {
        self.send(Err(BindingError::new(message)));
    }

    /// Rejects the call with what `exc` raised (a `pycage.Suspend`
    /// suspends the run instead).
    fn fail(&self, exc: &Bound<'_, PyAny>) {
        let err = PyErr::from_value(exc.clone());
        self.send(Err(binding_error(exc.py(), &err)));
    }

    /// The asyncio task running the call, kept so the call can be cancelled.
    #[getter]
    fn task(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.task.lock().ok().and_then(|t| t.as_ref().map(|t| t.clone_ref(py)))
    }

    #[setter]
    fn set_task(&self, task: Py<PyAny>) {
        if let Ok(mut slot) = self.task.lock() {
            *slot = Some(task);
        }
    }
}

/// What a binding's exception becomes: a suspension when it is a
/// `pycage.Suspend` (its class says so with `__pycage_suspend__`), a
/// refusal with its message otherwise.
pub fn binding_error(py: Python<'_>, err: &PyErr) -> BindingError {
    let value = err.value(py);
    let suspends = value.getattr("__pycage_suspend__").is_ok_and(|v| v.is(&*pyo3::types::PyBool::new(py, true)));
    if suspends {
        BindingError::suspend(exception_message(py, err))
    } else {
        BindingError::new(exception_message(py, err))
    }
}

/// A binding's message for an exception: `str(exc)`, or the type's name
/// when that is empty or fails.
pub fn exception_message(py: Python<'_>, err: &PyErr) -> String {
    let value = err.value(py);
    match value.str() {
        Ok(s) if !s.to_string().is_empty() => s.to_string(),
        _ => value.get_type().qualname().map(|n| n.to_string()).unwrap_or_else(|_| "exception".into()),
    }
}

fn result_to_json(label: &str, value: &Bound<'_, PyAny>) -> CallResult {
    py_to_json(value).map_err(|e| {
        BindingError::new(format!("{label} returned a value that cannot cross as JSON: {}", e.message(value.py())))
    })
}

fn split_args<'py>(py: Python<'py>, args: &JsonValue) -> PyResult<(Bound<'py, PyTuple>, Option<Bound<'py, PyDict>>)> {
    let value = json_to_py(py, args.root())?;
    match value.cast_into::<PyDict>() {
        Ok(kwargs) => Ok((PyTuple::empty(py), Some(kwargs))),
        Err(e) => Ok((PyTuple::new(py, [e.into_inner()])?, None)),
    }
}

const GONE: &str = "the host's Python interpreter is shutting down";

/// Wraps one Python callable as a [`Binding`].
pub fn binding(label: String, func: Py<PyAny>, is_async: bool, site: Arc<Site>) -> Binding {
    let func = Arc::new(func);
    let label = Arc::new(label);
    Binding::with_context(move |args: JsonValue, cx: CallContext| {
        let (func, site, label) = (func.clone(), site.clone(), label.clone());
        async move {
            if is_async {
                call_async(label.as_str(), &func, &site, args).await
            } else {
                call_sync(label, func, site, args, cx).await
            }
        }
    })
}

/// Aborts a blocking task that has not started when its call is dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A sync callable on tokio's blocking pool. It never starts once the run
/// has settled: a call still queued for a thread then is aborted, and one
/// whose thread comes just after the settle sees `cx.settled` and returns
/// without calling Python.
async fn call_sync(
    label: Arc<String>,
    func: Arc<Py<PyAny>>,
    site: Arc<Site>,
    args: JsonValue,
    cx: CallContext,
) -> CallResult {
    let settled = cx.settled.clone();
    let handle = tokio::task::spawn_blocking(move || {
        if settled.is_cancelled() {
            return Err(BindingError::new("the run has ended"));
        }
        Python::try_attach(|py| {
            let (a, kw) = split_args(py, &args).map_err(|e| BindingError::new(exception_message(py, &e)))?;
            match site.call_sync.call1(py, (func.as_ref(), a, kw)) {
                Ok(result) => result_to_json(&label, result.bind(py)),
                Err(e) => Err(binding_error(py, &e)),
            }
        })
        .unwrap_or_else(|| Err(BindingError::new(GONE)))
    });
    let _abort = AbortOnDrop(handle.abort_handle());
    let joined = handle.await;
    joined.unwrap_or_else(|e| Err(BindingError::new(format!("the binding's thread failed: {e}"))))
}

/// Cancels the call's task when the call's future is dropped unfinished.
struct CancelOnDrop<'a> {
    site: &'a Site,
    reply: Option<Py<Reply>>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(reply) = self.reply.take() {
            Python::try_attach(|py| {
                let _ = self.site.cancel.call1(py, (reply,));
            });
        }
    }
}

async fn call_async(label: &str, func: &Py<PyAny>, site: &Site, args: JsonValue) -> CallResult {
    let (tx, rx) = oneshot::channel();
    let started = Python::try_attach(|py| {
        let schedule = || -> PyResult<Py<Reply>> {
            let (a, kw) = split_args(py, &args)?;
            let reply =
                Py::new(py, Reply { label: label.to_owned(), tx: Mutex::new(Some(tx)), task: Mutex::new(None) })?;
            site.call_async.call1(py, (func, a, kw, reply.clone_ref(py)))?;
            Ok(reply)
        };
        schedule().map_err(|e| BindingError::new(exception_message(py, &e)))
    });
    let reply = started.unwrap_or_else(|| Err(BindingError::new(GONE)))?;
    let mut guard = CancelOnDrop { site, reply: Some(reply) };
    let result = rx.await;
    guard.reply = None;
    result.unwrap_or_else(|_| Err(BindingError::new(format!("{label}: the event loop dropped the call"))))
}
