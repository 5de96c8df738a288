//! `pycage._native`: the compiled half of the `pycage` Python package.
//!
//! The Python half (`crates/pycage-py/python/pycage/`) owns the public API,
//! argument checking and the asyncio glue; this module owns what must not
//! hold the GIL or must be exact: driving [`pycage_runtime::Runtime`]
//! (`runtime`), calling Python callables as bindings (`calls`) and
//! converting values between JSON and Python (`convert`).
//!
//! # Layers
//!
//! Each module uses only those listed before it (`tests/layers.rs`):
//! `convert`, `errors` (exceptions in the caller's terms), `executor` (the
//! process's tokio runtime), `helper` (which shell helper a runtime
//! starts), `calls` (Python callables as bindings), `drive` (one run,
//! sync or asyncio), `files` (a run's `out/` copied for a transport that
//! brought it), `session`, then `runtime`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod calls;
mod convert;
mod drive;
mod errors;
mod executor;
mod files;
mod helper;
mod runtime;
mod session;

use pyo3::prelude::*;

/// `to_json(value) -> str`: the canonical JSON text of a Python value, as it
/// would cross into a program (raises `ValueError` naming the path of a
/// value that cannot).
#[pyfunction]
fn to_json(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<String> {
    convert::py_to_json(value).map(|v| v.to_canonical_string()).map_err(|e| e.into_pyerr(py, "not JSON"))
}

/// `from_json(text) -> object`: parses JSON exactly (big ints, `-0.0`, any depth).
#[pyfunction]
fn from_json<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let value = pycage_protocol::JsonValue::parse(text.as_bytes())
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("invalid JSON: {e}")))?;
    convert::json_to_py(py, value.root())
}

/// `_serve_shell_helper()`: serves as a runtime's sandbox shell helper on
/// fd 3 until the runtime closes it (see the `helper` module). Only a
/// runtime starts a process that calls it.
#[pyfunction]
fn _serve_shell_helper() -> PyResult<()> {
    pycage_runtime::serve_shell_helper().map_err(Into::into)
}

/// `_shell_helper_kind()`: `"program"` when this module's runtimes start
/// the bundled `pycage-shell-helper` program as their sandbox shell helper,
/// `"interpreter"` when they start this interpreter.
#[pyfunction]
fn _shell_helper_kind() -> &'static str {
    helper::kind()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<runtime::NativeRuntime>()?;
    m.add_class::<drive::RunHandle>()?;
    m.add_class::<drive::RunOutcome>()?;
    m.add_class::<session::NativeSession>()?;
    m.add_class::<calls::Reply>()?;
    m.add_function(wrap_pyfunction!(to_json, m)?)?;
    m.add_function(wrap_pyfunction!(from_json, m)?)?;
    m.add_function(wrap_pyfunction!(_serve_shell_helper, m)?)?;
    m.add_function(wrap_pyfunction!(_shell_helper_kind, m)?)?;
    m.add_function(wrap_pyfunction!(files::_copy_output, m)?)?;
    // The package's version is the workspace's (maturin takes it from Cargo).
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MIN_ADDRESS_SPACE_BYTES", pycage_runtime::config::MIN_ADDRESS_SPACE_BYTES)?;
    Ok(())
}
