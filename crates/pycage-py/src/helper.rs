//! The sandbox shell helper a runtime starts: the `pycage-shell-helper`
//! program embedded in this module (feature `bundled-shell-helper`, see
//! `build.rs`), installed once into the user's pycage cache and run from
//! there; else this interpreter, loading only this module.
//!
//! Every sandbox shell is two forks of the helper (the shell's supervisor
//! and the run's PID 1), and a fork and an exit cost in proportion to the
//! forked process's memory: the program holds about 0.8 MiB of its own,
//! an interpreter about 3.5 MiB (BENCHMARKS.md, "Where a sandbox shell's
//! CPU goes"). The program and this module come from one build, which the
//! helper protocol checks on every request.

use std::ffi::OsString;
use std::path::PathBuf;

use pyo3::prelude::*;

#[cfg(feature = "bundled-shell-helper")]
static BUNDLED: Option<&[u8]> = Some(include_bytes!(env!("PYCAGE_BUNDLED_SHELL_HELPER")));
#[cfg(not(feature = "bundled-shell-helper"))]
static BUNDLED: Option<&[u8]> = None;

/// Which helper a runtime of this module starts: `"program"` (the bundled
/// one, installed), or `"interpreter"`.
pub fn kind() -> &'static str {
    if usable().is_some() {
        "program"
    } else {
        "interpreter"
    }
}

/// The helper's argv (`RuntimeConfig::shell_helper`), or `None` when
/// neither the program nor this interpreter can serve (the runtime then
/// forks the shells itself).
pub fn argv(py: Python<'_>) -> Option<Vec<OsString>> {
    match usable() {
        Some(program) => Some(vec![program.into()]),
        None => interpreter(py),
    }
}

/// The bundled program as installed in the cache, while it is still there:
/// a cache cleaned since the install leaves the interpreter (a helper that
/// cannot start would leave the runtime forking the shells itself).
fn usable() -> Option<&'static std::path::Path> {
    BUNDLED.and_then(pycage_runtime::installed_shell_helper)
}

/// This interpreter, loading only this extension module (not the package,
/// nor `site`), as the helper: about 11 MiB. `None` when the interpreter or
/// the module's file is unknown; a `sys.executable` that is not a Python
/// (an embedded one) fails the helper's start, and the runtime then forks
/// the shells itself.
fn interpreter(py: Python<'_>) -> Option<Vec<OsString>> {
    const CODE: &str = "import sys, importlib.util as u\n\
        s = u.spec_from_file_location('pycage._native', sys.argv[1])\n\
        m = u.module_from_spec(s)\n\
        s.loader.exec_module(m)\n\
        m._serve_shell_helper()\n";
    let executable: PathBuf = py.import("sys").ok()?.getattr("executable").ok()?.extract().ok()?;
    let module: PathBuf = py.import("pycage._native").ok()?.getattr("__file__").ok()?.extract().ok()?;
    if executable.as_os_str().is_empty() || !module.is_absolute() {
        return None;
    }
    Some(vec![executable.into(), "-I".into(), "-S".into(), "-c".into(), CODE.into(), module.into()])
}
