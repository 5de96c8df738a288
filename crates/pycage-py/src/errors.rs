//! The package's exceptions as the compiled half raises them: an instance
//! of a `pycage.errors` class, with the message in the caller's terms
//! (Python keywords, not Rust field names).

use pycage_runtime::MisuseError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// An instance of an exception class of `pycage.errors`.
pub fn error(py: Python<'_>, class: &str, message: String) -> PyErr {
    match py.import("pycage.errors").and_then(|m| m.getattr(class)).and_then(|c| Ok(c.cast_into::<PyType>()?)) {
        Ok(ty) => PyErr::from_type(ty, message),
        Err(e) => e,
    }
}

pub fn misuse(py: Python<'_>, e: MisuseError) -> PyErr {
    match e {
        MisuseError::Names(n) => error(py, "InvalidBindingsError", format!("invalid bindings: {n}")),
        MisuseError::ShutDown => error(
            py,
            "RuntimeClosedError",
            "the runtime is closed; create a new pycage.Runtime to run more programs".into(),
        ),
        MisuseError::Input(m) => error(py, "PycageError", format!("invalid input: {m}")),
        MisuseError::TypeCheck(e) => error(py, "ConfigError", e.to_string()),
        MisuseError::Limits(e) => {
            error(py, "PycageError", format!("invalid run limits: {} {}", python_name(e.field), e.problem))
        }
        MisuseError::NoJournalKey(what) => error(
            py,
            "ConfigError",
            format!(
                "{what} needs a journal key, and the runtime has none: pass pycage.Runtime(journal_key=...) of at \
                 least 16 bytes, or set PYCAGE_JOURNAL_KEY"
            ),
        ),
        MisuseError::Journal(e) => error(py, "JournalError", format!("cannot resume: {e}")),
    }
}

/// The Python keyword for a `RuntimeConfig` field.
pub(crate) fn python_name(field: &str) -> &str {
    match field {
        "wall_time" => "wall_seconds",
        "grace" => "grace_seconds",
        "max_processes/max_open_files" => "max_processes / max_open_files",
        "zygote_max_runs/zygote_max_age" => "zygote_max_runs / zygote_max_age_seconds",
        "install_timeout" => "install_seconds",
        other => other,
    }
}
