//! `pycage._native.NativeRuntime`: a [`pycage_runtime::Runtime`] driven from
//! Python, synchronously (the GIL released while the run is in flight) or
//! from asyncio (the result delivered to the caller's loop).
//!
//! Every runtime of a process shares one multi-threaded tokio runtime. Runs
//! stream their events to Python in batches: on the calling thread for
//! `run`, on the caller's loop for `start`. A sync run on the main thread
//! polls for signals, so Ctrl-C aborts the run and raises
//! `KeyboardInterrupt` once the child is reaped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pycage_runtime::{
    Answer, CancellationToken, ErrorClass, Isolation, MisuseError, Namespace, Resume, RunRequest, Runtime,
    RuntimeConfig, RuntimeError, SessionOptions, SpawnMode,
};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::calls::{binding, Site};
use crate::drive::{self, RunErr, RunHandle};
use crate::errors::{error, misuse, python_name};
use crate::executor::tokio_runtime;
use crate::session::NativeSession;

/// How the Python package spells a setting in messages.
struct PythonSpelling;

impl pycage_runtime::Spelling for PythonSpelling {
    fn setting(&self, setting: pycage_runtime::Setting) -> &'static str {
        match setting {
            pycage_runtime::Setting::Python => "pycage.Runtime(python=...)",
            pycage_runtime::Setting::ProcessIsolation => "pycage.Runtime(isolation=\"process\")",
            pycage_runtime::Setting::AllowRead => "allow_read",
            pycage_runtime::Setting::Venv => "pycage.Runtime(venv=...)",
            pycage_runtime::Setting::Preload => "preload",
            pycage_runtime::Setting::WithPackages => "with_packages",
            pycage_runtime::Setting::Ty => "pycage.Runtime(ty=...)",
        }
    }
}

fn start_error(py: Python<'_>, e: RuntimeError) -> PyErr {
    let message = e.explain(&PythonSpelling);
    match e {
        RuntimeError::Config(c) => {
            error(py, "ConfigError", format!("invalid pycage.Runtime argument: {} {}", python_name(c.field), c.problem))
        }
        RuntimeError::Interpreter(_) | RuntimeError::BootstrapImport { .. } => error(py, "InterpreterError", message),
        RuntimeError::SandboxUnavailable { .. } => error(py, "SandboxUnavailableError", message),
        RuntimeError::SandboxPolicy(_)
        | RuntimeError::AllowRead(_)
        | RuntimeError::Venv { .. }
        | RuntimeError::Preload(_)
        | RuntimeError::Packages(_)
        | RuntimeError::TypeCheck(_) => error(py, "ConfigError", message),
        RuntimeError::Bootstrap(_) | RuntimeError::RunDirs(_) | RuntimeError::Spawner(_) => {
            error(py, "PycageError", message)
        }
    }
}

pub fn seconds(py: Python<'_>, name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        error(
            py,
            "ConfigError",
            // The lower bound of each field is `RuntimeConfig::validate`'s to state.
            format!("invalid pycage.Runtime argument: {name} must be a finite number of seconds, got {value}"),
        )
    })
}

/// One namespace as Python hands it over: `(global, [(name, func,
/// is_async, help)], error_class, doc)`; `help` and `doc` are what
/// `help(<global>.<name>)` and `help(<global>)` show in the program.
pub type NamespaceSpec = (String, Vec<(String, Py<PyAny>, bool, String)>, Option<(String, String)>, String);

/// The request of `program` with `namespaces`, whose calls go through the
/// Python `site` (read only when there are namespaces: a plain run passes
/// `None` and makes no Python object for it).
fn request(program: String, namespaces: Vec<NamespaceSpec>, site: &Bound<'_, PyAny>) -> PyResult<RunRequest> {
    let mut request = RunRequest::new(program);
    if namespaces.is_empty() {
        return Ok(request);
    }
    let py = site.py();
    let site = Arc::new(Site::from_py(site)?);
    for (global, members, error_class, doc) in namespaces {
        let mut ns = Namespace::new(global.clone()).with_doc(doc);
        for (name, func, is_async, help) in members {
            let label = format!("{global}.{name}");
            // `pycage.approval(f)` marks its wrapper; strictly `True`, so
            // that an object answering every attribute is not taken for one.
            let approval =
                func.bind(py).getattr("__pycage_approval__").is_ok_and(|v| v.is(&*pyo3::types::PyBool::new(py, true)));
            ns = ns.with_member_doc(name.clone(), help);
            let b = binding(label, func, is_async, site.clone());
            ns = ns.with_function(name, if approval { b.requiring_approval() } else { b });
        }
        if let Some((name, member_name_property)) = error_class {
            ns = ns.with_error_class(ErrorClass { name, member_name_property });
        }
        request = request.with_namespace(ns);
    }
    Ok(request)
}

/// What one run asks besides its program: its own budgets (by config
/// field), host paths the program reads (read-only, in its working
/// directory under their base names), and where its `out/` is copied.
#[derive(Debug, Default)]
pub struct RunOptions {
    limits: Option<HashMap<String, u64>>,
    inputs: Option<Vec<PathBuf>>,
    output_dir: Option<PathBuf>,
    type_check: Option<bool>,
    /// A durable run's resume: its journal and the pending call's answer.
    resume: Option<Resume>,
}

/// What Python passes to resume a run: `(journal, approved, value or
/// message)`.
pub type ResumeSpec = (Vec<u8>, bool, Py<PyAny>);

fn resume_of(py: Python<'_>, spec: Option<ResumeSpec>) -> PyResult<Option<Resume>> {
    let Some((journal, approved, answer)) = spec else { return Ok(None) };
    let answer = if approved {
        let value = crate::convert::py_to_json(answer.bind(py))
            .map_err(|e| error(py, "PycageError", format!("the reply cannot cross as JSON: {}", e.message(py))))?;
        Answer::Reply(value)
    } else {
        Answer::Deny(answer.bind(py).extract::<String>()?)
    };
    Ok(Some(Resume { journal, answer }))
}

/// A session's options as Python gives them.
fn session_options(
    py: Python<'_>,
    namespaces: Vec<NamespaceSpec>,
    site: &Bound<'_, PyAny>,
    idle_timeout_seconds: Option<f64>,
    max_lifetime_seconds: Option<f64>,
    address_space_bytes: Option<u64>,
) -> PyResult<SessionOptions> {
    let bindings = request(String::new(), namespaces, site)?.bindings;
    let mut options = SessionOptions { bindings, memory_bytes: address_space_bytes, ..SessionOptions::default() };
    if let Some(s) = idle_timeout_seconds {
        options.idle_timeout = seconds(py, "idle_timeout_seconds", s)?;
    }
    if let Some(s) = max_lifetime_seconds {
        options.max_lifetime = seconds(py, "max_lifetime_seconds", s)?;
    }
    Ok(options)
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

    /// `program` prepared for the shared tokio runtime (its events sent when
    /// `events`), and the token that cancels it.
    fn launch(
        &self,
        py: Python<'_>,
        program: String,
        namespaces: Vec<NamespaceSpec>,
        site: &Bound<'_, PyAny>,
        events: bool,
        options: RunOptions,
    ) -> PyResult<(Arc<tokio::runtime::Runtime>, drive::Prepared, CancellationToken)> {
        let runtime = self.runtime(py)?;
        let token = CancellationToken::new();
        let mut run_limits = pycage_runtime::RunLimits::default();
        for (field, value) in options.limits.unwrap_or_default() {
            match field.as_str() {
                "wall_time" => run_limits.wall_time = Some(Duration::from_millis(value)),
                "cpu_seconds" => run_limits.cpu_seconds = Some(value),
                "address_space_bytes" => run_limits.memory_bytes = Some(value),
                other => return Err(error(py, "ConfigError", format!("{other} cannot be set for one run"))),
            }
        }
        let mut req = request(program, namespaces, site)?.with_cancel(token.clone()).with_limits(run_limits);
        req.inputs = options.inputs.unwrap_or_default();
        req.output_dir = options.output_dir;
        req.type_check = options.type_check;
        req.resume = options.resume;
        pycage_runtime::names::check_bindings(&req.bindings).map_err(|e| misuse(py, MisuseError::Names(e)))?;
        let rt = tokio_runtime(py)?;
        let capacity = events.then(|| runtime.config().max_buffered_events);
        let run = drive::prepare(capacity, move |events| async move {
            match events {
                Some(tx) => runtime.run_with_events(req, tx).await,
                None => runtime.run(req).await,
            }
            .map_err(RunErr::Misuse)
        });
        Ok((rt, run, token))
    }
}

#[pymethods]
impl NativeRuntime {
    #[new]
    #[pyo3(signature = (*, python=None, isolation=None, allow_read=None, run_dir_parent=None, spawn=None,
        cache_dir=None, probe_cache=true, allow_net=None, budgets=None, venv=None, preload=None,
        with_packages=None, allow_packages=None, allow_any_package=false, allow_builds=false, type_check=false, ty=None,
        journal_key=None))]
    #[allow(clippy::too_many_arguments)] // a pymethod: Python passes them by name
    fn new(
        py: Python<'_>,
        python: Option<PathBuf>,
        isolation: Option<&str>,
        allow_read: Option<Vec<PathBuf>>,
        run_dir_parent: Option<PathBuf>,
        spawn: Option<&str>,
        cache_dir: Option<PathBuf>,
        probe_cache: bool,
        allow_net: Option<Vec<String>>,
        budgets: Option<HashMap<String, u64>>,
        venv: Option<PathBuf>,
        preload: Option<Vec<String>>,
        with_packages: Option<Vec<String>>,
        allow_packages: Option<Vec<String>>,
        allow_any_package: bool,
        allow_builds: bool,
        type_check: bool,
        ty: Option<PathBuf>,
        journal_key: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let cache_dir = if probe_cache { cache_dir.or_else(pycage_runtime::default_cache_dir) } else { None };
        let mut c = RuntimeConfig {
            python,
            venv,
            preload: preload.unwrap_or_default(),
            with_packages: with_packages.unwrap_or_default(),
            allow_packages: allow_packages.unwrap_or_default(),
            allow_any_package,
            allow_builds,
            run_dir_parent,
            cache_dir,
            type_check,
            ty,
            ..RuntimeConfig::default()
        };
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
        // Budgets by config field, in the field's unit (the budgets table;
        // `pycage._budgets` checked them in Python first).
        for (field, value) in budgets.unwrap_or_default() {
            let row = pycage_runtime::budgets::row(&field)
                .ok_or_else(|| error(py, "ConfigError", format!("invalid pycage.Runtime budget {field:?}")))?;
            row.set(&mut c, value);
        }
        c.allow_read = allow_read.unwrap_or_default();
        if let Some(key) = journal_key {
            let key = pycage_runtime::JournalKey::new(key)
                .map_err(|e| error(py, "ConfigError", format!("invalid pycage.Runtime argument: journal_key: {e}")))?;
            c.journal_key = Some(key);
        }
        for rule in allow_net.unwrap_or_default() {
            let parsed = rule.parse::<pycage_runtime::NetRule>().map_err(|e| {
                error(py, "ConfigError", format!("invalid pycage.Runtime argument: allow_net item {e}"))
            })?;
            c.allow_net.push(parsed);
        }
        // Only sandboxed runs have shells: a process runtime installs and
        // starts no helper.
        if matches!(c.isolation, Isolation::Sandbox) {
            c.shell_helper = crate::helper::argv(py);
        }
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
        d.set_item("allow_read", c.allow_read.clone())?;
        d.set_item("run_dir_parent", c.run_dir_parent.clone())?;
        d.set_item("spawn", c.spawn.as_str())?;
        d.set_item("cache_dir", c.cache_dir.clone())?;
        d.set_item("allow_net", c.allow_net.iter().map(ToString::to_string).collect::<Vec<_>>())?;
        d.set_item("venv", inner.interpreter().venv.clone())?;
        d.set_item("preload", c.preload.clone())?;
        d.set_item("with_packages", c.with_packages.clone())?;
        d.set_item("allow_packages", c.allow_packages.clone())?;
        d.set_item("allow_any_package", c.allow_any_package)?;
        d.set_item("allow_builds", c.allow_builds)?;
        d.set_item("type_check", c.type_check)?;
        d.set_item("ty", inner.type_checker().map(std::path::Path::to_path_buf))?;
        // Every budget under its keyword, in the keyword's unit.
        for row in pycage_runtime::budgets::BUDGETS {
            let Some((keyword, unit)) = row.python else { continue };
            let value = row.get(c);
            if unit == pycage_runtime::budgets::Unit::Seconds {
                let secs = (value as f64) * (row.unit.scale() as f64) / 1000.0;
                d.set_item(keyword, secs)?;
            } else {
                d.set_item(keyword, value * row.unit.scale() / unit.scale())?;
            }
        }
        Ok(d.into_any())
    }

    /// The interpreter's version, `(major, minor, micro)`.
    #[getter]
    fn python_version(&self, py: Python<'_>) -> PyResult<(u64, u64, u64)> {
        Ok(self.inner(py)?.interpreter().version)
    }

    /// Checks the name rules of a binding list without running anything.
    fn check(&self, py: Python<'_>, namespaces: Vec<NamespaceSpec>, site: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = request(String::new(), namespaces, site)?;
        pycage_runtime::names::check_bindings(&r.bindings).map_err(|e| misuse(py, MisuseError::Names(e)))
    }

    /// Runs a program to settlement with the GIL released; returns
    /// `drive::result_parts`' tuple. `inputs` and `output_dir` are
    /// `RunRequest`'s.
    /// `on_event(batch)` runs on this thread. An exception from it, or a
    /// signal handler's (when `poll_signals`), aborts the run and is raised
    /// once the run has settled.
    #[pyo3(signature = (program, namespaces, site, on_event=None, poll_signals=false, limits=None, inputs=None,
        output_dir=None, type_check=None, resume=None))]
    #[allow(clippy::too_many_arguments)] // a pymethod: Python passes them by name
    fn run<'py>(
        &self,
        py: Python<'py>,
        program: String,
        namespaces: Vec<NamespaceSpec>,
        site: &Bound<'py, PyAny>,
        on_event: Option<Py<PyAny>>,
        poll_signals: bool,
        limits: Option<HashMap<String, u64>>,
        inputs: Option<Vec<PathBuf>>,
        output_dir: Option<PathBuf>,
        type_check: Option<bool>,
        resume: Option<ResumeSpec>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let options = RunOptions { limits, inputs, output_dir, type_check, resume: resume_of(py, resume)? };
        let (rt, run, token) = self.launch(py, program, namespaces, site, on_event.is_some(), options)?;
        drive::wait_blocking(py, &rt, run, token, on_event, poll_signals)
    }

    /// Starts a program on the shared tokio runtime and returns at once.
    /// Event batches go to `event_loop.call_soon_threadsafe(on_event, batch)`,
    /// then the [`RunOutcome`] to `event_loop.call_soon_threadsafe(on_done, outcome)`.
    #[pyo3(signature = (program, namespaces, site, event_loop, on_done, on_event=None, limits=None, inputs=None,
        output_dir=None, type_check=None, resume=None))]
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
        limits: Option<HashMap<String, u64>>,
        inputs: Option<Vec<PathBuf>>,
        output_dir: Option<PathBuf>,
        type_check: Option<bool>,
        resume: Option<ResumeSpec>,
    ) -> PyResult<RunHandle> {
        let options = RunOptions { limits, inputs, output_dir, type_check, resume: resume_of(py, resume)? };
        let (rt, run, token) = self.launch(py, program, namespaces, site, on_event.is_some(), options)?;
        drive::deliver_to_loop(&rt, run, event_loop, on_done, on_event);
        Ok(RunHandle { token })
    }

    /// Opens a session: one child whose `__main__` globals live across its
    /// runs, with these bindings for its whole life.
    #[pyo3(signature = (namespaces, site, idle_timeout_seconds=None, max_lifetime_seconds=None, address_space_bytes=None))]
    fn session(
        &self,
        py: Python<'_>,
        namespaces: Vec<NamespaceSpec>,
        site: &Bound<'_, PyAny>,
        idle_timeout_seconds: Option<f64>,
        max_lifetime_seconds: Option<f64>,
        address_space_bytes: Option<u64>,
    ) -> PyResult<NativeSession> {
        let runtime = self.runtime(py)?;
        let options =
            session_options(py, namespaces, site, idle_timeout_seconds, max_lifetime_seconds, address_space_bytes)?;
        let rt = tokio_runtime(py)?;
        // The session's watchdog is a task of this runtime.
        let _entered = rt.enter();
        let session = runtime.session(options).map_err(|e| misuse(py, e))?;
        Ok(NativeSession::new(session))
    }

    /// Resumes a session whose cell suspended (`Runtime::resume_session`),
    /// driven on this thread with the GIL released, like `run`: the new
    /// session and the suspended cell's result parts.
    #[pyo3(signature = (namespaces, site, resume, idle_timeout_seconds=None, max_lifetime_seconds=None,
        address_space_bytes=None, poll_signals=false))]
    #[allow(clippy::too_many_arguments)] // a pymethod: Python passes them by name
    fn resume_session<'py>(
        &self,
        py: Python<'py>,
        namespaces: Vec<NamespaceSpec>,
        site: &Bound<'_, PyAny>,
        resume: ResumeSpec,
        idle_timeout_seconds: Option<f64>,
        max_lifetime_seconds: Option<f64>,
        address_space_bytes: Option<u64>,
        poll_signals: bool,
    ) -> PyResult<(NativeSession, Bound<'py, PyTuple>)> {
        let runtime = self.runtime(py)?;
        let options =
            session_options(py, namespaces, site, idle_timeout_seconds, max_lifetime_seconds, address_space_bytes)?;
        let Some(Resume { journal, answer }) = resume_of(py, Some(resume))? else {
            return Err(error(py, "PycageError", "no journal to resume".into()));
        };
        let rt = tokio_runtime(py)?;
        let _entered = rt.enter();
        // The session comes back beside the result, through this slot.
        let slot = Arc::new(std::sync::Mutex::new(None));
        let filled = Arc::clone(&slot);
        // On the runtime's workers, not this thread: the session's process
        // outlives this call, and `PR_SET_PDEATHSIG` would kill it with
        // the thread that forked it (an executor's thread exits when idle).
        let resumed = rt.spawn(async move {
            let (session, result) = runtime.resume_session(&journal, answer, options).await.map_err(RunErr::Session)?;
            if let Ok(mut slot) = filled.lock() {
                *slot = Some(session);
            }
            Ok(result)
        });
        let run =
            drive::prepare(
                None,
                move |_| async move { resumed.await.unwrap_or_else(|e| Err(RunErr::Task(e.to_string()))) },
            );
        let parts = drive::wait_blocking(py, &rt, run, CancellationToken::new(), None, poll_signals)?;
        let session = slot.lock().ok().and_then(|mut s| s.take());
        let session = session.ok_or_else(|| error(py, "PycageError", "the resumed session is gone".into()))?;
        Ok((NativeSession::new(session), parts))
    }

    /// For benchmarks/head_to_head.py: runs `program` (no bindings) the way
    /// `pycage bench` does, driven from Rust on this thread with the GIL
    /// released, and returns the seconds from the request to the
    /// `RunResult` (no Python object made): the floor of `run`'s own path,
    /// measured in the same process. Raises if the run did not return.
    fn _bench_run(&self, py: Python<'_>, program: String) -> PyResult<f64> {
        let runtime = self.runtime(py)?;
        let rt = tokio_runtime(py)?;
        let (took, outcome) = py.detach(|| {
            pycage_runtime::block_on(rt.handle(), async move {
                let t = std::time::Instant::now();
                let outcome = runtime.run(RunRequest::new(program)).await;
                (t.elapsed(), outcome)
            })
        });
        match outcome {
            Ok(r) if r.error.is_none() => Ok(took.as_secs_f64()),
            Ok(r) => Err(error(py, "PycageError", format!("the benchmark run failed: {:?}", r.error))),
            Err(e) => Err(misuse(py, e)),
        }
    }

    /// Waits (the GIL released) until the runtime is idle: no run in flight,
    /// every settled run's process reaped and its directory removed, the
    /// zygote's pool full (`Runtime::wait_idle`). False when that did not
    /// happen within `timeout` seconds.
    fn wait_idle(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        let timeout = seconds(py, "timeout", timeout)?;
        let runtime = self.runtime(py)?;
        let rt = tokio_runtime(py)?;
        Ok(py.detach(|| pycage_runtime::block_on(rt.handle(), runtime.wait_idle(timeout))))
    }

    /// Aborts every run in flight and returns once each child has exited
    /// and been reaped (the GIL released meanwhile). Later runs raise
    /// `RuntimeClosedError`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let runtime = self.runtime(py)?;
        let rt = tokio_runtime(py)?;
        py.detach(|| pycage_runtime::block_on(rt.handle(), runtime.shutdown()));
        Ok(())
    }
}
