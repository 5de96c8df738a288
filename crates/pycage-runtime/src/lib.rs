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
//! A host that waits for runs on a thread of its own, outside async code,
//! drives them with [`block_on`] (with a multi-thread runtime's handle)
//! rather than tokio's: the thread then waits on the child's socket
//! itself, and a run's reply wakes it directly instead of waking a worker
//! thread that wakes it in turn.
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
//! Each module uses only those listed before it (no module imports a
//! higher one, and none imports from the crate root; `tests/layers.rs`
//! checks it):
//!
//! 1. Leaves: `sync` (locks that survive a panic elsewhere), `spelling`,
//!    `bindings`, [`config`] (validated settings), [`names`]
//!    (the portable identifier rules), `display` (rich output and its
//!    ledger), `outcome` (results, failure kinds, events).
//! 2. [`budgets`] (the budgets table over `config`), [`interpreter`] and
//!    `probe_cache` (resolving and probing CPython once, with the preload;
//!    the embedded bootstrap), `helper_program` (an embedded shell helper,
//!    installed in the cache), `error`, `request` (what a caller asks of a
//!    run), `durable` (what a durable run records or replays, checked
//!    before anything is spawned).
//! 3. `launch`: every way a run's process is made (exec, exec into a
//!    sandbox, the zygote, its pool and the sandbox shells its children
//!    join), with typed errors.
//! 4. `run`: a sans-I/O protocol machine and the driver around it; `check`:
//!    the type check before a run (`pycage-typecheck`), as a run's outcome.
//! 5. `lifecycle`: the one run sequence (admission, a worker, execution,
//!    settling, output, refill) and the `Core` every run of a runtime
//!    shares; then `build`: packages without a wheel built in a sandboxed
//!    run of a `Core` of their own (`RuntimeConfig::allow_builds`).
//! 6. `session` and `runtime`: the public API, handles on one `Core`.
//!
//! What stands alone is in crates of its own, re-exported here under the
//! names it had: the watchdog (`pycage-watchdog`, as [`watchdog`]), the
//! egress proxy and its rules (`pycage-egress`, as [`net`]), package
//! installation (`pycage-packages`, as [`packages`]), run directories and
//! file copies (`pycage-files`, as [`cleanup`] and [`files`]), the type
//! check (`pycage-typecheck`, as [`typecheck`]), uid leases
//! (`pycage-sandbox`, as [`lease`]), the log ledger
//! (`pycage-protocol`, as [`ledger`]) and durable runs' journals
//! (`pycage-journal`, as [`journal`]); processes (signals without
//! strangers, pidfds, `wait4`, the reaper: `pycage-process`), the
//! zygote's host side (`pycage-zygote`) and the host's end of fd 3
//! (reading it, and a blocking caller that waits on it itself:
//! `pycage-channel`) are crates of their own too.
//!
//! The Python side is embedded from `python/pycage/`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod bindings;
pub mod budgets;
mod build;
mod check;
/// Run directories (the `pycage-files` crate).
pub use pycage_files::cleanup;
pub mod config;
mod display;
mod durable;
mod error;
mod helper_program;
/// Inputs in and `out/` out (the `pycage-files` crate).
pub use pycage_files::copy as files;
pub mod interpreter;
mod launch;
/// The log ledger both sides keep (the `pycage-protocol` crate).
pub use pycage_protocol::ledger;
/// Per-run host uids on a root host (the `pycage-sandbox` crate).
pub use pycage_sandbox::lease;
mod lifecycle;
pub mod names;
/// The egress allow-list and network report (the `pycage-egress` crate).
pub use pycage_egress as net;
mod outcome;
/// Durable runs' journals (the `pycage-journal` crate).
pub use pycage_journal as journal;
/// A run's declared packages (the `pycage-packages` crate).
pub use pycage_packages as packages;
mod probe_cache;
mod request;
mod run;
mod runtime;
mod session;
mod spelling;
mod sync;
/// The type check before a run (the `pycage-typecheck` crate).
pub use pycage_typecheck as typecheck;
/// Run-wide CPU and memory (the `pycage-watchdog` crate).
pub use pycage_watchdog as watchdog;

pub use bindings::{Binding, BindingError, BindingFuture, CallContext, ErrorClass, Namespace, RunId};
pub use config::{ConfigError, Isolation, RuntimeConfig, SpawnMode};
pub use display::Display;
pub use error::{AllowReadError, RuntimeError};
pub use interpreter::{Interpreter, InterpreterError, PreloadFailure};
pub use launch::site::{BOOTSTRAP_DIR, INTERPRETER_DIR, OUTPUT_DIR_NAME};
pub use pycage_channel::blocking::{block_on, forget_wait_hint};
pub use pycage_files::cleanup::CleanupFailure;
pub use pycage_files::copy::{CopiedFile, CopyReport, SkipKind, Skipped};

/// Serves as the sandbox shell helper of a runtime in another process
/// ([`RuntimeConfig::shell_helper`]): builds the shells it asks for on
/// fd 3 until it closes its end, then returns. Call it early in `main`
/// when the process was started as the helper (the `pycage` CLI checks its
/// first argument for `__shell-helper`), before any thread is started:
///
/// ```no_run
/// if std::env::args().nth(1).as_deref() == Some("__shell-helper") {
///     std::process::exit(match pycage_runtime::serve_shell_helper() {
///         Ok(()) => 0,
///         Err(_) => 1,
///     });
/// }
/// let config = pycage_runtime::RuntimeConfig {
///     // This very binary, even if the file on disk was replaced since.
///     shell_helper: Some(vec!["/proc/self/exe".into(), "__shell-helper".into()]),
///     ..Default::default()
/// };
/// ```
pub fn serve_shell_helper() -> std::io::Result<()> {
    pycage_sandbox::helper::serve_fd3()
}
pub use helper_program::installed_shell_helper;
pub use launch::spawn::{SpawnError, StartError};
pub use names::NameError;
pub use outcome::{FailureKind, PendingCall, RunEvent, RunFailure, RunResult, Suspension};
pub use packages::{PackageError, PACKAGES_DIR};
pub use probe_cache::default_cache_dir;
pub use pycage_egress::{Connection, NetBudget, NetHost, NetRule, NetRuleError, NetworkReport};
pub use pycage_journal::{JournalError, JournalKey};
pub use pycage_process::run_in_background;
pub use pycage_protocol::JsonValue;
pub use pycage_zygote::ZygoteError;
pub use request::{Answer, Resume};
pub use runtime::{MisuseError, RunLimits, RunRequest, Runtime, SandboxView};
pub use session::{Session, SessionError, SessionOptions, SessionRun};
pub use spelling::{RustSpelling, Setting, Spelling};
pub use tokio_util::sync::CancellationToken;
