//! `pycage._native.NativeRuntime`: a [`pycage_runtime::Runtime`] driven from
//! Python, synchronously (the GIL released while the run is in flight) or
//! from asyncio (the result delivered to the caller's loop).
//!
//! Every runtime of a process shares one multi-threaded tokio runtime. Runs
//! stream their events to Python in batches: on the calling thread for
//! `run`, on the caller's loop for `start`. A sync run on the main thread
//! polls for signals, so Ctrl-C aborts the run and raises
//! `KeyboardInterrupt` once the child is reaped.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pycage_runtime::{
    CancellationToken, ErrorClass, Isolation, MisuseError, Namespace, RunEvent, RunRequest, RunResult, Runtime,
    RuntimeConfig, RuntimeError, SpawnMode,
};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyType};
use tokio::sync::mpsc;

use crate::calls::{binding, Site};
use crate::convert::json_to_py;

/// How often a blocking run on the main thread checks for signals.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// The process's tokio runtime, rebuilt in a forked child (whose copy of the
/// parent's runtime has no threads).
static TOKIO: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);

fn tokio_runtime(py: Python<'_>) -> PyResult<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = TOKIO.lock().map_err(|_| error(py, "PycageError", "the tokio runtime lock is poisoned".into()))?;
    if let Some((owner, rt)) = slot.as_ref() {
        if *owner == pid {
            return Ok(rt.clone());
        }
    }
    if let Some((_, inherited)) = slot.take() {
        // Dropping it would wait for worker threads that do not exist here.
        std::mem::forget(inherited);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pycage")
        .build()
        .map_err(|e| error(py, "PycageError", format!("could not start the tokio runtime: {e}")))?;
    let rt = Arc::new(rt);
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}

/// An instance of an exception class of `pycage.errors`.
pub fn error(py: Python<'_>, class: &str, message: String) -> PyErr {
    match py.import("pycage.errors").and_then(|m| m.getattr(class)).and_then(|c| Ok(c.cast_into::<PyType>()?)) {
        Ok(ty) => PyErr::from_type(ty, message),
        Err(e) => e,
    }
}

fn misuse(py: Python<'_>, e: MisuseError) -> PyErr {
    match e {
        MisuseError::Names(n) => error(py, "InvalidBindingsError", format!("invalid bindings: {n}")),
        MisuseError::ShutDown => error(
            py,
            "RuntimeClosedError",
            "the runtime is closed; create a new pycage.Runtime to run more programs".into(),
        ),
    }
}

/// The Python keyword for a `RuntimeConfig` field.
fn python_name(field: &str) -> &str {
    match field {
        "wall_time" => "wall_seconds",
        "grace" => "grace_seconds",
        "max_processes/max_open_files" => "max_processes / max_open_files",
        "zygote_max_runs/zygote_max_age" => "zygote_max_runs / zygote_max_age_seconds",
        other => other,
    }
}

fn start_error(py: Python<'_>, e: RuntimeError) -> PyErr {
    match e {
        RuntimeError::Config(c) => {
            error(py, "ConfigError", format!("invalid pycage.Runtime argument: {} {}", python_name(c.field), c.problem))
        }
        RuntimeError::Interpreter(_) | RuntimeError::BootstrapImport { .. } => {
            error(py, "InterpreterError", e.to_string().replace("(--python / RuntimeConfig::python)", "(python=...)"))
        }
        RuntimeError::SandboxUnavailable { .. } => {
            error(py, "SandboxUnavailableError", format!("{e}. From Python: pycage.Runtime(isolation=\"process\")"))
        }
        RuntimeError::SandboxPolicy(_) => error(py, "ConfigError", e.to_string().replace("--allow-read", "allow_read")),
        RuntimeError::Bootstrap(_) => error(py, "PycageError", e.to_string()),
    }
}

fn seconds(py: Python<'_>, name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        error(
            py,
            "ConfigError",
            format!("invalid pycage.Runtime argument: {name} must be a finite number >= 0, got {value}"),
        )
    })
}

/// One namespace as Python hands it over: `(global, [(name, func, is_async)], error_class)`.
type NamespaceSpec = (String, Vec<(String, Py<PyAny>, bool)>, Option<(String, String)>);

fn request(program: String, namespaces: Vec<NamespaceSpec>, site: Site) -> RunRequest {
    let site = Arc::new(site);
    let mut request = RunRequest::new(program);
    for (global, members, error_class) in namespaces {
        let mut ns = Namespace::new(global.clone());
        for (name, func, is_async) in members {
            let label = format!("{global}.{name}");
            ns = ns.with_function(name, binding(label, func, is_async, site.clone()));
        }
        if let Some((name, member_name_property)) = error_class {
            ns = ns.with_error_class(ErrorClass { name, member_name_property });
        }
        request = request.with_namespace(ns);
    }
    request
}

/// Events as Python tuples: `("log", line)`, `("call", id, global, name,
/// args)`, `("finished", id, error_or_None)`.
fn event_batch<'py>(py: Python<'py>, events: Vec<RunEvent>) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for ev in events {
        let item = match ev {
            RunEvent::Log(line) => ("log", line).into_pyobject(py)?.into_any(),
            RunEvent::Call { id, global, name, args } => {
                ("call", id, global, name, json_to_py(py, args.root())?).into_pyobject(py)?.into_any()
            }
            RunEvent::CallFinished { id, error } => ("finished", id, error).into_pyobject(py)?.into_any(),
        };
        list.append(item)?;
    }
    Ok(list)
}

/// Everything queued now, after `first`.
fn drain(first: RunEvent, rx: &mut mpsc::UnboundedReceiver<RunEvent>) -> Vec<RunEvent> {
    let mut batch = vec![first];
    while let Ok(ev) = rx.try_recv() {
        batch.push(ev);
    }
    batch
}

/// `(has_value, value, logs, error_kind, error_message, dropped_frames)`.
fn result_parts<'py>(py: Python<'py>, r: &RunResult) -> PyResult<Bound<'py, PyTuple>> {
    let value = match &r.value {
        Some(v) => json_to_py(py, v.root())?,
        None => py.None().into_bound(py),
    };
    let (kind, message) = match &r.error {
        Some(e) => (Some(e.kind.as_str()), Some(e.message.as_str())),
        None => (None, None),
    };
    (r.value.is_some(), value, r.logs.clone(), kind, message, r.dropped_frames).into_pyobject(py)
}

/// A finished `start()`ed run, handed to the loop's `on_done`.
#[pyclass(frozen, module = "pycage._native")]
pub struct RunOutcome {
    result: Mutex<Option<Result<RunResult, MisuseError>>>,
}

#[pymethods]
impl RunOutcome {
    /// The result as a tuple (see `NativeRuntime.run`), or the misuse error raised.
    fn parts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let taken = self.result.lock().ok().and_then(|mut r| r.take());
        match taken {
            Some(Ok(r)) => result_parts(py, &r),
            Some(Err(e)) => Err(misuse(py, e)),
            None => Err(error(py, "PycageError", "the outcome was already taken".into())),
        }
    }
}

/// Cancels a `start()`ed run: it settles as `abort`.
#[pyclass(frozen, module = "pycage._native")]
pub struct RunHandle {
    token: CancellationToken,
}

#[pymethods]
impl RunHandle {
    fn cancel(&self) {
        self.token.cancel();
    }
}

/// The native runtime; `pycage.Runtime` wraps it.
#[pyclass(frozen, module = "pycage._native")]
pub struct NativeRuntime {
    /// Not dropped in a forked child: its temporary directories belong to
    /// the parent.
    inner: Option<Runtime>,
    pid: u32,
}

impl Drop for NativeRuntime {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            std::mem::forget(self.inner.take());
        }
    }
}

impl NativeRuntime {
    fn inner(&self, py: Python<'_>) -> PyResult<&Runtime> {
        self.inner.as_ref().ok_or_else(|| error(py, "PycageError", "the runtime is gone".into()))
    }

    fn runtime(&self, py: Python<'_>) -> PyResult<Runtime> {
        if std::process::id() != self.pid {
            return Err(error(
                py,
                "PycageError",
                format!(
                    "this pycage.Runtime was created in process {} and cannot be used after fork(); create a new one in this process",
                    self.pid
                ),
            ));
        }
        Ok(self.inner(py)?.clone())
    }
}

#[pymethods]
impl NativeRuntime {
    #[new]
    #[pyo3(signature = (*, python=None, isolation=None, wall_seconds=None, cpu_seconds=None, address_space_bytes=None,
        max_log_bytes=None, max_value_bytes=None, max_line_bytes=None, max_control_bytes=None, grace_seconds=None,
        allow_read=None, run_dir_parent=None, max_processes=None, max_file_bytes=None, max_open_files=None,
        spawn=None, pool_size=None, max_concurrent_runs=None, zygote_max_runs=None, zygote_max_age_seconds=None,
        cache_dir=None, probe_cache=true))]
    #[allow(clippy::too_many_arguments)] // a pymethod: Python passes them by name
    fn new(
        py: Python<'_>,
        python: Option<PathBuf>,
        isolation: Option<&str>,
        wall_seconds: Option<f64>,
        cpu_seconds: Option<u64>,
        address_space_bytes: Option<u64>,
        max_log_bytes: Option<u64>,
        max_value_bytes: Option<u64>,
        max_line_bytes: Option<usize>,
        max_control_bytes: Option<u64>,
        grace_seconds: Option<f64>,
        allow_read: Option<Vec<PathBuf>>,
        run_dir_parent: Option<PathBuf>,
        max_processes: Option<u64>,
        max_file_bytes: Option<u64>,
        max_open_files: Option<u64>,
        spawn: Option<&str>,
        pool_size: Option<usize>,
        max_concurrent_runs: Option<usize>,
        zygote_max_runs: Option<u64>,
        zygote_max_age_seconds: Option<f64>,
        cache_dir: Option<PathBuf>,
        probe_cache: bool,
    ) -> PyResult<Self> {
        let cache_dir = if probe_cache { cache_dir.or_else(pycage_runtime::default_cache_dir) } else { None };
        let mut c = RuntimeConfig { python, run_dir_parent, cache_dir, ..RuntimeConfig::default() };
        match spawn {
            None | Some("zygote") => c.spawn = SpawnMode::Zygote,
            Some("exec") => c.spawn = SpawnMode::Exec,
            Some(other) => {
                return Err(error(
                    py,
                    "ConfigError",
                    format!("invalid pycage.Runtime argument: spawn must be \"zygote\" or \"exec\", got {other:?}"),
                ))
            }
        }
        if let Some(s) = zygote_max_age_seconds {
            c.zygote_max_age = seconds(py, "zygote_max_age_seconds", s)?;
        }
        c.pool_size = pool_size.unwrap_or(c.pool_size);
        c.max_concurrent_runs = max_concurrent_runs.unwrap_or(c.max_concurrent_runs);
        c.zygote_max_runs = zygote_max_runs.unwrap_or(c.zygote_max_runs);
        match isolation {
            None | Some("sandbox") => c.isolation = Isolation::Sandbox,
            Some("process") => c.isolation = Isolation::Process,
            Some(other) => {
                return Err(error(
                    py,
                    "ConfigError",
                    format!(
                        "invalid pycage.Runtime argument: isolation must be \"sandbox\" or \"process\", got {other:?}"
                    ),
                ))
            }
        }
        if let Some(s) = wall_seconds {
            c.wall_time = seconds(py, "wall_seconds", s)?;
        }
        if let Some(s) = grace_seconds {
            c.grace = seconds(py, "grace_seconds", s)?;
        }
        c.cpu_seconds = cpu_seconds.unwrap_or(c.cpu_seconds);
        c.address_space_bytes = address_space_bytes.unwrap_or(c.address_space_bytes);
        c.max_log_bytes = max_log_bytes.unwrap_or(c.max_log_bytes);
        c.max_value_bytes = max_value_bytes.unwrap_or(c.max_value_bytes);
        c.max_line_bytes = max_line_bytes.unwrap_or(c.max_line_bytes);
        c.max_control_bytes = max_control_bytes.unwrap_or(c.max_control_bytes);
        c.allow_read = allow_read.unwrap_or_default();
        c.max_processes = max_processes.unwrap_or(c.max_processes);
        c.max_file_bytes = max_file_bytes.unwrap_or(c.max_file_bytes);
        c.max_open_files = max_open_files.unwrap_or(c.max_open_files);
        // The probe starts an interpreter: let other Python threads run.
        let runtime = py.detach(|| Runtime::new(c)).map_err(|e| start_error(py, e))?;
        Ok(NativeRuntime { inner: Some(runtime), pid: std::process::id() })
    }

    /// The effective configuration, as the keyword arguments `pycage.Runtime` takes.
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner(py)?;
        let c = inner.config();
        let d = pyo3::types::PyDict::new(py);
        d.set_item("python", inner.interpreter().executable.clone())?;
        d.set_item("isolation", c.isolation.as_str())?;
        d.set_item("wall_seconds", c.wall_time.as_secs_f64())?;
        d.set_item("cpu_seconds", c.cpu_seconds)?;
        d.set_item("address_space_bytes", c.address_space_bytes)?;
        d.set_item("max_log_bytes", c.max_log_bytes)?;
        d.set_item("max_value_bytes", c.max_value_bytes)?;
        d.set_item("max_line_bytes", c.max_line_bytes)?;
        d.set_item("max_control_bytes", c.max_control_bytes)?;
        d.set_item("grace_seconds", c.grace.as_secs_f64())?;
        d.set_item("allow_read", c.allow_read.clone())?;
        d.set_item("run_dir_parent", c.run_dir_parent.clone())?;
        d.set_item("max_processes", c.max_processes)?;
        d.set_item("max_file_bytes", c.max_file_bytes)?;
        d.set_item("max_open_files", c.max_open_files)?;
        d.set_item("spawn", c.spawn.as_str())?;
        d.set_item("pool_size", c.pool_size)?;
        d.set_item("max_concurrent_runs", c.max_concurrent_runs)?;
        d.set_item("zygote_max_runs", c.zygote_max_runs)?;
        d.set_item("zygote_max_age_seconds", c.zygote_max_age.as_secs_f64())?;
        d.set_item("cache_dir", c.cache_dir.clone())?;
        Ok(d.into_any())
    }

    /// The interpreter's version, `(major, minor, micro)`.
    #[getter]
    fn python_version(&self, py: Python<'_>) -> PyResult<(u64, u64, u64)> {
        Ok(self.inner(py)?.interpreter().version)
    }

    /// Checks the name rules of a binding list without running anything.
    fn check(&self, py: Python<'_>, namespaces: Vec<NamespaceSpec>, site: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = request(String::new(), namespaces, Site::from_py(site)?);
        pycage_runtime::names::check_bindings(&r.bindings).map_err(|e| misuse(py, MisuseError::Names(e)))
    }

    /// Runs a program to settlement with the GIL released; returns
    /// `(has_value, value, logs, error_kind, error_message, dropped_frames)`.
    /// `on_event(batch)` runs on this thread. An exception from it, or a
    /// signal handler's (when `poll_signals`), aborts the run and is raised
    /// once the run has settled.
    #[pyo3(signature = (program, namespaces, site, on_event=None, poll_signals=false))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        program: String,
        namespaces: Vec<NamespaceSpec>,
        site: &Bound<'py, PyAny>,
        on_event: Option<Py<PyAny>>,
        poll_signals: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let runtime = self.runtime(py)?;
        let token = CancellationToken::new();
        let req = request(program, namespaces, Site::from_py(site)?).with_cancel(token.clone());
        pycage_runtime::names::check_bindings(&req.bindings).map_err(|e| misuse(py, MisuseError::Names(e)))?;
        let rt = tokio_runtime(py)?;
        // The run itself goes on the runtime's workers, where its socket is
        // polled: a call then costs no hop to and from this thread, which
        // only waits for events and the result.
        let (run, mut rx) = spawn_run(&rt, runtime, req, on_event.is_some());
        let (result, raised) = py.detach(|| {
            rt.block_on(async move {
                tokio::pin!(run);
                let mut tick = tokio::time::interval(SIGNAL_POLL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
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
                        Some(ev) = rx.recv() => deliver(drain(ev, &mut rx), &mut raised),
                        r = &mut run => break r,
                        _ = tick.tick(), if poll_signals && raised.is_none() => {
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
            Ok(Ok(r)) => result_parts(py, &r),
            Ok(Err(e)) => Err(misuse(py, e)),
            Err(e) => Err(error(py, "PycageError", format!("the run's task failed: {e}"))),
        }
    }

    /// Starts a program on the shared tokio runtime and returns at once.
    /// Event batches go to `event_loop.call_soon_threadsafe(on_event, batch)`,
    /// then the [`RunOutcome`] to `event_loop.call_soon_threadsafe(on_done, outcome)`.
    #[pyo3(signature = (program, namespaces, site, event_loop, on_done, on_event=None))]
    #[allow(clippy::too_many_arguments)] // a pymethod: Python passes them by name
    fn start(
        &self,
        py: Python<'_>,
        program: String,
        namespaces: Vec<NamespaceSpec>,
        site: &Bound<'_, PyAny>,
        event_loop: Py<PyAny>,
        on_done: Py<PyAny>,
        on_event: Option<Py<PyAny>>,
    ) -> PyResult<RunHandle> {
        let runtime = self.runtime(py)?;
        let token = CancellationToken::new();
        let req = request(program, namespaces, Site::from_py(site)?).with_cancel(token.clone());
        pycage_runtime::names::check_bindings(&req.bindings).map_err(|e| misuse(py, MisuseError::Names(e)))?;
        let rt = tokio_runtime(py)?;
        let (run, mut rx) = spawn_run(&rt, runtime, req, on_event.is_some());
        rt.spawn(async move {
            tokio::pin!(run);
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
                    r = &mut run => break r,
                }
            };
            while let Some(ev) = rx.recv().await {
                deliver(drain(ev, &mut rx));
            }
            // A panicked run task: report it as a failed run rather than never settling.
            let result = result.unwrap_or_else(|e| {
                Ok(RunResult {
                    value: None,
                    logs: Vec::new(),
                    error: Some(pycage_runtime::RunFailure {
                        kind: pycage_runtime::FailureKind::WorkerExit,
                        message: format!("the run's task failed: {e}"),
                    }),
                    dropped_frames: 0,
                })
            });
            Python::try_attach(|py| {
                if let Ok(outcome) = Py::new(py, RunOutcome { result: Mutex::new(Some(result)) }) {
                    // A closed loop raises; nobody is waiting then.
                    let _ = event_loop.call_method1(py, "call_soon_threadsafe", (on_done, outcome));
                }
            });
        });
        Ok(RunHandle { token })
    }

    /// Aborts every run in flight and returns once each child has exited
    /// and been reaped (the GIL released meanwhile). Later runs raise
    /// `RuntimeClosedError`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let runtime = self.runtime(py)?;
        let rt = tokio_runtime(py)?;
        py.detach(|| rt.block_on(runtime.shutdown()));
        Ok(())
    }
}

type RunJoin = tokio::task::JoinHandle<Result<RunResult, MisuseError>>;

/// Spawns a run on the runtime's workers; its events (when asked for) come
/// through the receiver, which closes when the run is over.
fn spawn_run(
    rt: &tokio::runtime::Runtime,
    runtime: Runtime,
    req: RunRequest,
    events: bool,
) -> (RunJoin, mpsc::UnboundedReceiver<RunEvent>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let join = rt.spawn(async move {
        if events {
            runtime.run_with_events(req, tx).await
        } else {
            drop(tx);
            runtime.run(req).await
        }
    });
    (join, rx)
}
