//! The type check before a run (`RuntimeConfig::type_check`): the
//! runtime's side of `pycage-typecheck`. The checker is made at
//! construction from the probed interpreter and the caller's packages, and
//! starts nothing until the first checked run; ty is looked for then too,
//! so a runtime that checks every run fails at construction without it,
//! and a run that asks for a check fails as misuse.

use std::path::{Path, PathBuf};

use pycage_typecheck::{
    CheckError, CheckRequest, Checked, Checker, CheckerConfig, History, LocateError, NamespaceDecl,
};
use tokio::time::Instant;

use crate::bindings::Namespace;
use crate::config::RuntimeConfig;
use crate::error::{MisuseError, RuntimeError};
use crate::outcome::{FailureKind, RunFailure, RunResult};

/// A runtime's checker, or why it has none.
pub(crate) struct TypeCheck {
    checker: Result<Checker, LocateError>,
}

impl TypeCheck {
    /// The checker of runs on `python` (`(major, minor)`), with
    /// `extra_paths` (the caller's packages) importable.
    pub fn new(
        config: &RuntimeConfig,
        python: &Path,
        version: (u64, u64),
        extra_paths: Vec<PathBuf>,
    ) -> Result<TypeCheck, RuntimeError> {
        let checker = pycage_typecheck::locate::find(config.ty.as_deref(), python).map(|ty| {
            Checker::new(CheckerConfig {
                ty,
                python: python.to_path_buf(),
                python_version: version,
                extra_paths,
                memory_bytes: config.type_check_memory_bytes,
                work_dir_parent: config.run_dir_parent.clone(),
            })
        });
        if let (true, Err(e)) = (config.type_check, &checker) {
            return Err(RuntimeError::TypeCheck(e.clone()));
        }
        Ok(TypeCheck { checker })
    }

    /// Whether a run that asked `asked` is checked; misuse when it is and
    /// there is no ty.
    pub fn wanted(&self, asked: Option<bool>, config: &RuntimeConfig) -> Result<bool, MisuseError> {
        let on = asked.unwrap_or(config.type_check);
        match (&self.checker, on) {
            (Err(e), true) => Err(MisuseError::TypeCheck(e.clone())),
            _ => Ok(on),
        }
    }

    /// Whether runs can be checked (a session then keeps its history).
    pub fn available(&self) -> bool {
        self.checker.is_ok()
    }

    /// The ty binary runs are checked with, if found.
    pub fn ty(&self) -> Option<&Path> {
        self.checker.as_ref().ok().map(|c| c.config().ty.as_path())
    }

    /// Checks `program` before `deadline`: `Ok` with what the run keeps
    /// (its warnings, its cell for a session's history) when it may run,
    /// else the run's result (`type-error`, `timeout`, or `worker-exit`
    /// when the checker itself failed).
    pub async fn check(
        &self,
        program: &str,
        bindings: &[Namespace],
        own_packages: Option<&Path>,
        history: Option<&History>,
        deadline: Instant,
        wall: std::time::Duration,
    ) -> Result<Checked, RunResult> {
        let Ok(checker) = &self.checker else {
            return Err(failed(FailureKind::WorkerExit, "no type checker".into(), Vec::new()));
        };
        let namespaces: Vec<NamespaceDecl> = bindings.iter().map(decl).collect();
        let request = CheckRequest { program, namespaces: &namespaces, own_packages, history };
        match checker.check(request, deadline).await {
            Ok(checked) if checked.report.passed() => Ok(checked),
            Ok(checked) => {
                Err(failed(FailureKind::TypeError, checked.report.message(), checked.report.warning_texts()))
            }
            Err(CheckError::Timeout) => Err(failed(
                FailureKind::Timeout,
                format!(
                    "the wall-clock budget of {} ms was exceeded while the program was type-checked (it did not \
                     start; no binding was called)",
                    wall.as_millis()
                ),
                Vec::new(),
            )),
            Err(CheckError::Checker(why)) => Err(failed(
                FailureKind::WorkerExit,
                format!("the type checker failed, so the program did not start: {why}"),
                Vec::new(),
            )),
        }
    }

    /// Stops the checker's server.
    pub async fn close(&self) {
        if let Ok(c) = &self.checker {
            c.close().await;
        }
    }
}

fn failed(kind: FailureKind, message: String, diagnostics: Vec<String>) -> RunResult {
    RunResult { error: Some(RunFailure { kind, message }), diagnostics, ..RunResult::default() }
}

/// A namespace as the checker sees it.
fn decl(ns: &Namespace) -> NamespaceDecl {
    NamespaceDecl {
        global: ns.global.clone(),
        members: ns.functions.keys().cloned().collect(),
        error_class: ns.error_class.as_ref().map(|c| (c.name.clone(), c.member_name_property.clone())),
        stub: ns.stub.clone(),
    }
}
