//! `pycage._native.NativeSession`: a [`pycage_runtime::Session`] (one child
//! that keeps its `__main__` globals across runs) driven from Python, like
//! a runtime's runs (see [`crate::drive`]).

use pycage_runtime::{CancellationToken, Session, SessionRun};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::drive::{self, RunErr, RunHandle};
use crate::errors::error;
use crate::executor::tokio_runtime;

/// The native session; `pycage.Session` wraps it.
#[pyclass(frozen, module = "pycage._native")]
pub struct NativeSession {
    /// Not dropped in a forked child: its process belongs to the parent.
    inner: Option<Session>,
    pid: u32,
}

impl NativeSession {
    pub fn new(session: Session) -> Self {
        NativeSession { inner: Some(session), pid: std::process::id() }
    }

    fn session(&self, py: Python<'_>) -> PyResult<Session> {
        if std::process::id() != self.pid {
            return Err(error(
                py,
                "PycageError",
                format!("this pycage.Session was opened in process {} and cannot be used after fork()", self.pid),
            ));
        }
        self.inner.clone().ok_or_else(|| error(py, "PycageError", "the session is gone".into()))
    }

    /// `program` prepared for the session on the shared tokio runtime (its
    /// events sent when `events`), and the token that cancels it.
    fn launch(
        &self,
        py: Python<'_>,
        program: String,
        events: bool,
        type_check: Option<bool>,
    ) -> PyResult<(std::sync::Arc<tokio::runtime::Runtime>, drive::Prepared, CancellationToken)> {
        let session = self.session(py)?;
        let token = CancellationToken::new();
        let mut request = SessionRun::new(program).with_cancel(token.clone());
        request.type_check = type_check;
        let rt = tokio_runtime(py)?;
        let capacity = events.then(|| session.config().max_buffered_events);
        let run = drive::prepare(capacity, move |events| async move {
            session.run_with(request, events).await.map_err(RunErr::Session)
        });
        Ok((rt, run, token))
    }
}

impl Drop for NativeSession {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            std::mem::forget(self.inner.take());
        }
    }
}

#[pymethods]
impl NativeSession {
    /// Runs a program in the session, like `NativeRuntime.run`.
    #[pyo3(signature = (program, on_event=None, poll_signals=false, type_check=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        program: String,
        on_event: Option<Py<PyAny>>,
        poll_signals: bool,
        type_check: Option<bool>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (rt, run, token) = self.launch(py, program, on_event.is_some(), type_check)?;
        drive::wait_blocking(py, &rt, run, token, on_event, poll_signals)
    }

    /// Starts a program in the session, like `NativeRuntime.start`.
    #[pyo3(signature = (program, event_loop, on_done, on_event=None, type_check=None))]
    fn start(
        &self,
        py: Python<'_>,
        program: String,
        event_loop: Py<PyAny>,
        on_done: Py<PyAny>,
        on_event: Option<Py<PyAny>>,
        type_check: Option<bool>,
    ) -> PyResult<RunHandle> {
        let (rt, run, token) = self.launch(py, program, on_event.is_some(), type_check)?;
        drive::deliver_to_loop(&rt, run, event_loop, on_done, on_event);
        Ok(RunHandle { token })
    }

    /// Why the session ended, or `None` while it lives.
    #[getter]
    fn ended(&self) -> Option<String> {
        self.inner.as_ref().and_then(|s| s.ended())
    }

    /// Ends the session and returns once its process is reaped (the GIL
    /// released meanwhile).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let session = self.session(py)?;
        let rt = tokio_runtime(py)?;
        py.detach(|| pycage_runtime::block_on(rt.handle(), session.close()));
        Ok(())
    }
}
