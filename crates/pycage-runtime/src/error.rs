//! The runtime's errors, and how each interface spells what to change.
//!
//! Errors are typed to the edge: every failure has its own variant with
//! its `#[source]`, and a message that tells the reader what to do names a
//! *setting* ([`Setting`]), never an interface's spelling of it. The
//! library's `Display` speaks library terms ([`RustSpelling`]:
//! `RuntimeConfig::python`); the CLI and the Python package call
//! [`RuntimeError::explain`] with their own [`Spelling`] (`--python`,
//! `python=`), so no interface rewrites another's text.

use std::path::PathBuf;

use crate::config::ConfigError;
use crate::interpreter::InterpreterError;
use crate::names::NameError;
pub use crate::spelling::{RustSpelling, Setting, Spelling};

/// A path given to expose read-only to sandboxed runs that cannot be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} {}: {problem}", RustSpelling.setting(Setting::AllowRead), path.display())]
pub struct AllowReadError {
    pub path: PathBuf,
    pub problem: String,
}

/// Why a runtime could not be built. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Interpreter(#[from] InterpreterError),
    #[error("could not write the bootstrap files to a temporary directory: {0}")]
    Bootstrap(#[source] std::io::Error),
    #[error("the bootstrap does not import in {python}: {stderr}")]
    BootstrapImport { python: PathBuf, stderr: String },
    #[error("{}", sandbox_unavailable(layers, reasons, &RustSpelling))]
    SandboxUnavailable { layers: String, reasons: String },
    #[error("the sandbox policy is invalid: {0}")]
    SandboxPolicy(#[from] pycage_sandbox::SandboxError),
    #[error(transparent)]
    AllowRead(#[from] AllowReadError),
    #[error("could not set up the run directories: {0}")]
    RunDirs(#[source] std::io::Error),
    #[error("could not start the spawner thread: {0}")]
    Spawner(#[source] std::io::Error),
    /// The virtual environment (`RuntimeConfig::venv`) is not one.
    #[error("{}", venv_problem(path, problem, &RustSpelling))]
    Venv { path: PathBuf, problem: String },
    /// A module of `RuntimeConfig::preload` does not import, or leaves a
    /// thread running.
    #[error("{}", preload_problem(.0, &RustSpelling))]
    Preload(crate::interpreter::PreloadFailure),
    /// `RuntimeConfig::type_check` is on and ty cannot be found.
    #[error("{}", type_check_problem(.0, &RustSpelling))]
    TypeCheck(pycage_typecheck::LocateError),
    /// The caller's `RuntimeConfig::with_packages` could not be installed.
    #[error("{}", packages_problem(.0, &RustSpelling))]
    Packages(pycage_packages::PackageError),
}

fn venv_problem(path: &std::path::Path, problem: &str, spelling: &dyn Spelling) -> String {
    format!("{} {}: {problem}", spelling.setting(Setting::Venv), path.display())
}

fn preload_problem(failure: &crate::interpreter::PreloadFailure, spelling: &dyn Spelling) -> String {
    let hint = if failure.why.starts_with("ModuleNotFoundError") {
        format!(
            " (install it into the interpreter's environment, or give one that has it with {})",
            spelling.setting(Setting::Venv)
        )
    } else {
        String::new()
    };
    format!("{} {}: {}{hint}", spelling.setting(Setting::Preload), failure.module, failure.why)
}

fn type_check_problem(e: &pycage_typecheck::LocateError, spelling: &dyn Spelling) -> String {
    let install = format!("`pip install ty=={}`", pycage_typecheck::TESTED_TY_VERSION);
    match e {
        pycage_typecheck::LocateError::Configured(path) => format!(
            "{} {} is not an executable file: install ty with {install}, or name another",
            spelling.setting(Setting::Ty),
            path.display()
        ),
        pycage_typecheck::LocateError::NotFound(dir) => format!(
            "type checking needs ty, which was found neither beside the interpreter ({}) nor on PATH: install it \
             with {install} into the interpreter's venv (or anywhere on PATH), or name the binary with {}",
            dir.display(),
            spelling.setting(Setting::Ty)
        ),
    }
}

fn packages_problem(e: &pycage_packages::PackageError, spelling: &dyn Spelling) -> String {
    format!("{}: {e}", spelling.setting(Setting::WithPackages))
}

fn sandbox_unavailable(layers: &str, reasons: &str, spelling: &dyn Spelling) -> String {
    format!(
        "sandbox isolation needs {layers} on this machine, and it is missing: {reasons}. \
         Run `pycage doctor` for details, or choose process isolation ({}) if you accept running without the sandbox",
        spelling.setting(Setting::ProcessIsolation)
    )
}

impl RuntimeError {
    /// The message, with settings spelled as `spelling` names them.
    pub fn explain(&self, spelling: &dyn Spelling) -> String {
        match self {
            RuntimeError::Interpreter(e) => e.explain(spelling),
            RuntimeError::SandboxUnavailable { layers, reasons } => sandbox_unavailable(layers, reasons, spelling),
            RuntimeError::AllowRead(e) => {
                format!("{} {}: {}", spelling.setting(Setting::AllowRead), e.path.display(), e.problem)
            }
            RuntimeError::Venv { path, problem } => venv_problem(path, problem, spelling),
            RuntimeError::Preload(failure) => preload_problem(failure, spelling),
            RuntimeError::Packages(e) => packages_problem(e, spelling),
            RuntimeError::TypeCheck(e) => type_check_problem(e, spelling),
            other => other.to_string(),
        }
    }
}

/// Caller misuse: the only `Err` a run returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MisuseError {
    #[error("invalid bindings: {0}")]
    Names(#[from] NameError),
    #[error("the runtime was shut down; create a new one to run more programs")]
    ShutDown,
    #[error("invalid input: {0}")]
    Input(String),
    /// A run's own budget ([`crate::RunLimits`]) the runtime would refuse.
    #[error("invalid run limits: {0}")]
    Limits(#[from] ConfigError),
    /// A run that could suspend (its bindings need approval), or a resume,
    /// on a runtime without a journal key.
    #[error(
        "{0} needs a journal key, and the runtime has none: set one of at least 16 bytes \
         (RuntimeConfig::journal_key; journal_key= in Python; PYCAGE_JOURNAL_KEY for the pycage CLI)"
    )]
    NoJournalKey(&'static str),
    /// A journal a resume refuses (before any program runs).
    #[error("cannot resume: {0}")]
    Journal(#[from] pycage_journal::JournalError),
    /// A type check was asked for and ty cannot be found.
    #[error(transparent)]
    TypeCheck(#[from] pycage_typecheck::LocateError),
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Cli;
    impl Spelling for Cli {
        fn setting(&self, setting: Setting) -> &'static str {
            match setting {
                Setting::Python => "--python",
                Setting::ProcessIsolation => "--isolation process",
                Setting::AllowRead => "--allow-read",
                Setting::Venv => "--venv",
                Setting::Preload => "--preload",
                Setting::WithPackages => "--with",
                Setting::Ty => "--ty",
            }
        }
    }

    #[test]
    fn each_interface_spells_its_own_settings() {
        let e = RuntimeError::SandboxUnavailable { layers: "landlock".into(), reasons: "off".into() };
        assert!(e.to_string().contains("(RuntimeConfig::isolation = Isolation::Process)"), "{e}");
        assert!(e.explain(&Cli).contains("(--isolation process)"), "{}", e.explain(&Cli));
        let e = RuntimeError::AllowRead(AllowReadError { path: "/nope".into(), problem: "no such file".into() });
        assert_eq!(e.to_string(), "RuntimeConfig::allow_read /nope: no such file");
        assert_eq!(e.explain(&Cli), "--allow-read /nope: no such file");
        let e = RuntimeError::Interpreter(InterpreterError::NotFound);
        assert!(!e.to_string().contains("--"), "{e}");
        assert!(e.explain(&Cli).contains("--python"), "{}", e.explain(&Cli));
    }
}
