//! pycage's host supervisor: run a model-written Python program in a fresh
//! CPython process, serve its binding calls, enforce budgets, and report
//! every outcome as a [`RunResult`].
//!
//! ```no_run
//! use pycage_runtime::{Binding, BindingError, Namespace, RunRequest, Runtime, RuntimeConfig};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = Runtime::new(RuntimeConfig::default())?;
//! let tools = Namespace::new("tools").with_function(
//!     "double",
//!     Binding::new(|args| async move {
//!         let n = args.root().as_number().and_then(|n| n.as_i64()).ok_or_else(|| BindingError::new("want an int"))?;
//!         Ok((n * 2).into())
//!     }),
//! );
//! let result = runtime.run(RunRequest::new("return await tools.double(21)").with_namespace(tools)).await?;
//! assert_eq!(result.value.unwrap().to_string(), "42");
//! runtime.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Errors: `Err` or a failed run
//!
//! - Building a [`Runtime`] fails with [`RuntimeError`] when the
//!   configuration, the interpreter or a requested isolation layer cannot
//!   work: nothing is ever run with less than was asked.
//! - [`Runtime::run`] returns `Err` ([`MisuseError`]) only for the caller's
//!   misuse: bindings that break the name rules, or a run after shutdown.
//! - Everything else is a [`RunResult`] with `error` set, host-side failures
//!   included: a child that cannot be started (its [`SpawnError`], with the
//!   sandbox step and errno when a sandbox step failed, becomes the message
//!   of a `worker-exit`), a zygote that died (`worker-exit` for the runs it
//!   took with it; the next run gets a new zygote), a wall-clock deadline, a
//!   cancel or a shutdown (`timeout`, `abort`).
//!
//! # Layers
//!
//! [`config`] (validated budgets), [`interpreter`] (resolving and probing
//! CPython once; the probe cache), [`names`] (the portable identifier
//! rules), `spawn` (fork/exec, fd 3, kill and reap), `zygote` and `pool`
//! (the fork server and the children forked ahead of demand), `run` (a
//! sans-I/O protocol machine and its driver) and [`ledger`] (logs). The
//! Python side is embedded from `python/pycage/`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod bindings;
mod channel;
pub mod cleanup;
pub mod config;
pub mod files;
pub mod interpreter;
pub mod lease;
pub mod ledger;
pub mod names;
mod pool;
mod probe_cache;
mod run;
mod runtime;
mod session;
mod site;
mod spawn;
pub mod watchdog;
mod zygote;

pub use bindings::{Binding, BindingError, BindingFuture, ErrorClass, Namespace};
pub use cleanup::CleanupFailure;
pub use config::{ConfigError, Isolation, RuntimeConfig, SpawnMode};
pub use files::{CopiedFile, CopyReport, SkipKind, Skipped};
pub use interpreter::{Interpreter, InterpreterError};
pub use names::NameError;
pub use probe_cache::default_cache_dir;
pub use pycage_protocol::JsonValue;
pub use runtime::{MisuseError, RunRequest, Runtime, RuntimeError};
pub use session::{Session, SessionError, SessionOptions, SessionRun};
pub use site::{BOOTSTRAP_DIR, INTERPRETER_DIR, OUTPUT_DIR_NAME};
pub use spawn::SpawnError;
pub use tokio_util::sync::CancellationToken;
pub use zygote::ZygoteError;

/// Why a run failed. The kinds are orthogonal (`docs/semantics.md`, "Outcomes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The program raised, or failed to compile.
    Exception,
    /// A wall-clock or CPU budget expired (the message says which).
    Timeout,
    /// The caller cancelled, or the runtime shut down.
    Abort,
    /// The process died without settling.
    WorkerExit,
    /// The return value is not JSON that can cross losslessly.
    InvalidOutput,
    /// A value, line or control-traffic budget was exceeded.
    OutputLimit,
}

impl FailureKind {
    /// The wire / JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Exception => "exception",
            FailureKind::Timeout => "timeout",
            FailureKind::Abort => "abort",
            FailureKind::WorkerExit => "worker-exit",
            FailureKind::InvalidOutput => "invalid-output",
            FailureKind::OutputLimit => "output-limit",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed run's kind and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFailure {
    pub kind: FailureKind,
    pub message: String,
}

/// Every outcome of a run. When `error` is set, `value` is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunResult {
    /// The program's value: its top-level `return`, or else its final
    /// expression statement unless that is `None`; `None` when it has none.
    pub value: Option<JsonValue>,
    /// Output lines, without trailing newlines: Python-level output (sent as
    /// `log` frames) in the order written, raw fd 1/fd 2 output in the order
    /// written, and the two channels interleaved in arrival order.
    pub logs: Vec<String>,
    pub error: Option<RunFailure>,
    /// Frames from the child that failed validation and were dropped.
    pub dropped_frames: u64,
    /// What was copied from the run's `out/` directory, when the request
    /// named an output directory ([`RunRequest::output_dir`]).
    pub output: Option<CopyReport>,
}

impl RunResult {
    pub(crate) fn failed(kind: FailureKind, message: String, logs: Vec<String>) -> Self {
        RunResult { logs, error: Some(RunFailure { kind, message }), ..RunResult::default() }
    }

    /// The result as one JSON object: `value` (absent when none), `logs`,
    /// `output` (only when an output directory was requested: `files`
    /// `[{path, bytes}]`, `skipped` `[{path, reason, kind}]` (`kind`:
    /// `excluded`, `limit` or `failed`, see [`SkipKind`]), `bytes`,
    /// `truncated`, `complete`: nothing but excluded entries was skipped), `error` `{kind, message}` (absent on success).
    pub fn to_json(&self) -> JsonValue {
        let mut b = pycage_protocol::JsonBuilder::new();
        // Each step is valid by construction; errors are impossible here.
        let _ = (|| -> Result<(), pycage_protocol::BuildError> {
            b.begin_object()?;
            if let Some(v) = &self.value {
                b.key("value")?;
                b.value(v.root())?;
            }
            b.key("logs")?;
            b.begin_array()?;
            for l in &self.logs {
                b.string(l)?;
            }
            b.end()?;
            if let Some(output) = &self.output {
                b.key("output")?;
                output.write_json(&mut b)?;
            }
            if let Some(e) = &self.error {
                b.key("error")?;
                b.begin_object()?;
                b.key("kind")?;
                b.string(e.kind.as_str())?;
                b.key("message")?;
                b.string(&e.message)?;
                b.end()?;
            }
            b.end()
        })();
        b.finish().unwrap_or_else(|_| JsonValue::null())
    }
}

/// What a run reports while it is in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEvent {
    /// One complete log line.
    Log(String),
    /// The program called a binding.
    Call { id: u64, global: String, name: String, args: JsonValue },
    /// A call finished: `error` is the rejection message, if any.
    CallFinished { id: u64, error: Option<String> },
}
