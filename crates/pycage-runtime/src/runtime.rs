//! The [`Runtime`]: construction (probe, bootstrap files), runs, shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bindings::Namespace;
use crate::config::{ConfigError, Isolation, RuntimeConfig, SpawnMode};
use crate::interpreter::{Interpreter, InterpreterError};
use crate::names::{self, NameError};
use crate::pool::{Pool, PoolConfig};
use crate::probe_cache::{self, BootstrapDir, PrepareError};
use crate::session::{Session, SessionOptions};
use crate::spawn::{PreExec, SpawnError, SpawnSpec, Worker};
use crate::{run, FailureKind, RunEvent, RunResult};

/// The Python package shipped inside the binary.
pub(crate) const PYTHON_FILES: &[(&str, &str)] = &[
    ("__init__.py", include_str!("../../../python/pycage/__init__.py")),
    ("protocol.py", include_str!("../../../python/pycage/protocol.py")),
    ("bootstrap.py", include_str!("../../../python/pycage/bootstrap.py")),
    ("script.py", include_str!("../../../python/pycage/script.py")),
    ("zygote.py", include_str!("../../../python/pycage/zygote.py")),
];

/// Why a runtime could not be built. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Interpreter(#[from] InterpreterError),
    #[error("could not write the bootstrap files to a temporary directory: {0}")]
    Bootstrap(std::io::Error),
    #[error("the bootstrap does not import in {python}: {stderr}")]
    BootstrapImport { python: PathBuf, stderr: String },
    #[error(
        "sandbox isolation needs {layers} on this machine, and it is missing: {reasons}. \
         Run `pycage doctor` for details, or choose process isolation (--isolation process / Isolation::Process) \
         if you accept running without the sandbox"
    )]
    SandboxUnavailable { layers: String, reasons: String },
    #[error("the sandbox policy is invalid: {0}")]
    SandboxPolicy(#[from] pycage_sandbox::SandboxError),
}

/// Caller misuse: the only `Err` a run returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MisuseError {
    #[error("invalid bindings: {0}")]
    Names(#[from] NameError),
    #[error("the runtime was shut down; create a new one to run more programs")]
    ShutDown,
}

/// One program and its bindings.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub program: String,
    pub bindings: Vec<Namespace>,
    /// Cancelling it settles the run as `abort`, keeping logs so far.
    pub cancel: Option<CancellationToken>,
}

impl RunRequest {
    /// A request with no bindings.
    pub fn new(program: impl Into<String>) -> Self {
        RunRequest { program: program.into(), bindings: Vec::new(), cancel: None }
    }

    /// Adds a namespace.
    pub fn with_namespace(mut self, ns: Namespace) -> Self {
        self.bindings.push(ns);
        self
    }

    /// Sets the cancel token.
    pub fn with_cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

struct Shared {
    config: RuntimeConfig,
    /// Children forked from a zygote, when runs use one.
    pool: Option<Pool>,
    /// Why runs use `exec` although the configuration asks for a zygote.
    spawn_fallback: Option<String>,
    /// FIFO admission of runs (`max_concurrent_runs`).
    admission: tokio::sync::Semaphore,
    /// Read-only paths of every sandboxed run (system, interpreter, bootstrap, --allow-read).
    sandbox_read_only: Vec<PathBuf>,
    next_uid: std::sync::atomic::AtomicU32,
    interpreter: Interpreter,
    bootstrap: BootstrapDir,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

/// Runs programs; cheap to clone (clones share children and shutdown).
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

impl Runtime {
    /// Validates the configuration, probes the interpreter and installs the
    /// bootstrap. Fails here, not at the first run, when something is wrong.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        config.validate()?;
        let (interpreter, bootstrap) = probe_cache::prepare(config.python.as_deref(), config.cache_dir.as_deref())
            .map_err(|e| match e {
                PrepareError::Interpreter(e) => RuntimeError::Interpreter(e),
                PrepareError::Write(e) => RuntimeError::Bootstrap(e),
                PrepareError::Import { python, stderr } => RuntimeError::BootstrapImport { python, stderr },
            })?;
        let sandbox_read_only = match config.isolation {
            Isolation::Process => Vec::new(),
            Isolation::Sandbox => sandbox_paths(&config, &interpreter, bootstrap.path())?,
        };
        let spawn_fallback = match (config.spawn, config.isolation, &interpreter.zygote_error) {
            (SpawnMode::Exec, _, _) => None,
            (SpawnMode::Zygote, _, Some(e)) => Some(format!("the zygote cannot run on this interpreter: {e}")),
            (SpawnMode::Zygote, Isolation::Sandbox, None) => {
                Some("sandbox isolation does not run through the zygote yet".to_owned())
            }
            (SpawnMode::Zygote, Isolation::Process, None) => None,
        };
        let pool = (config.spawn == SpawnMode::Zygote && spawn_fallback.is_none()).then(|| {
            Pool::new(PoolConfig {
                python: interpreter.executable.clone(),
                bootstrap_dir: bootstrap.path().to_path_buf(),
                size: config.pool_size,
                zygote_max_runs: config.zygote_max_runs,
                zygote_max_age: config.zygote_max_age,
                run_dir_parent: config.run_dir_parent.clone(),
                rlimits: Vec::new(),
            })
        });
        Ok(Runtime {
            shared: Arc::new(Shared {
                pool,
                spawn_fallback,
                admission: tokio::sync::Semaphore::new(config.max_concurrent_runs),
                sandbox_read_only,
                next_uid: std::sync::atomic::AtomicU32::new(0),
                config,
                interpreter,
                bootstrap,
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
            }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    /// The probed interpreter.
    pub fn interpreter(&self) -> &Interpreter {
        &self.shared.interpreter
    }

    /// How runs are spawned in fact: the configured mode, or `Exec` with
    /// the reason when the zygote cannot be used.
    pub fn spawn_mode(&self) -> (SpawnMode, Option<&str>) {
        match &self.shared.spawn_fallback {
            Some(reason) => (SpawnMode::Exec, Some(reason)),
            None => (self.shared.config.spawn, None),
        }
    }

    /// The pid of the zygote serving runs now, if there is one.
    pub fn zygote_pid(&self) -> Option<u32> {
        self.shared.pool.as_ref().and_then(Pool::zygote_pid).and_then(|p| u32::try_from(p).ok())
    }

    /// Runs one program. `Err` only for misuse; every program outcome is `Ok`.
    pub async fn run(&self, request: RunRequest) -> Result<RunResult, MisuseError> {
        self.run_inner(request, None).await
    }

    /// Like [`Runtime::run`], streaming [`RunEvent`]s while the run is in flight.
    pub async fn run_with_events(
        &self,
        request: RunRequest,
        events: mpsc::UnboundedSender<RunEvent>,
    ) -> Result<RunResult, MisuseError> {
        self.run_inner(request, Some(events)).await
    }

    /// Opens a session: one process that keeps its globals across runs.
    /// `Err` for misuse (bindings that break the name rules, a shut-down
    /// runtime). Its process is started at its first run.
    pub fn session(&self, options: SessionOptions) -> Result<Session, MisuseError> {
        Session::open(self.clone(), options)
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shared.shutdown.is_cancelled() || self.shared.tracker.is_closed()
    }

    pub(crate) fn shutdown_token(&self) -> CancellationToken {
        self.shared.shutdown.clone()
    }

    /// Tasks shutdown waits for.
    pub(crate) fn background(&self) -> &TaskTracker {
        &self.shared.tracker
    }

    /// A place among the runs in flight (FIFO); `None` once shut down.
    pub(crate) async fn admit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        tokio::select! {
            permit = self.shared.admission.acquire() => permit.ok(),
            _ = self.shared.shutdown.cancelled() => None,
        }
    }

    /// A child ready for `boot`, or why none could be started.
    pub(crate) async fn take_worker(&self) -> Result<Worker, String> {
        let spawned = match &self.shared.pool {
            Some(pool) => pool.take().await,
            None => self.spawn_worker(),
        };
        spawned.map_err(|e| format!("could not start {}: {e}", self.shared.interpreter.executable.display()))
    }

    async fn run_inner(
        &self,
        request: RunRequest,
        events: Option<mpsc::UnboundedSender<RunEvent>>,
    ) -> Result<RunResult, MisuseError> {
        names::check_bindings(&request.bindings)?;
        let shared = &self.shared;
        if shared.shutdown.is_cancelled() || shared.tracker.is_closed() {
            return Err(MisuseError::ShutDown);
        }
        // Held until the run (and its child) is settled; shutdown waits on it.
        let _token = shared.tracker.token();
        // FIFO admission; shutdown releases the queue (as an abort).
        let Some(_permit) = self.admit().await else {
            return Ok(RunResult::failed(FailureKind::Abort, "the runtime was shut down".into(), Vec::new()));
        };
        let deadline = Instant::now() + shared.config.wall_time;
        let worker = match self.take_worker().await {
            Ok(w) => w,
            Err(message) => return Ok(RunResult::failed(FailureKind::WorkerExit, message, Vec::new())),
        };
        let result = run::execute_once(
            worker,
            request.program,
            request.bindings,
            run::RunInputs {
                config: &shared.config,
                cancel: request.cancel.unwrap_or_default(),
                shutdown: shared.shutdown.clone(),
                events,
                deadline,
            },
            &shared.tracker,
        )
        .await;
        Ok(result)
    }

    fn spawn_worker(&self) -> Result<Worker, SpawnError> {
        let shared = &self.shared;
        let config = &shared.config;
        let mut builder = tempfile::Builder::new();
        builder.prefix("pycage-run-");
        let run_dir = match &config.run_dir_parent {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        }
        .map_err(SpawnError::RunDir)?;
        let (pre_exec, staging): (Option<Box<dyn PreExec>>, Option<tempfile::TempDir>) = match config.isolation {
            Isolation::Process => (None, None),
            Isolation::Sandbox => {
                let n = shared.next_uid.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % config.sandbox_uid_count;
                let uid = config.sandbox_uid_base + n;
                rustix::fs::chown(
                    run_dir.path(),
                    Some(rustix::fs::Uid::from_raw(uid)),
                    Some(rustix::fs::Gid::from_raw(uid)),
                )
                .map_err(|e| SpawnError::RunDirOwner { uid, source: e.into() })?;
                let staging = tempfile::Builder::new().prefix("pycage-root-").tempdir().map_err(SpawnError::RunDir)?;
                let policy = pycage_sandbox::SandboxPolicy {
                    read_only: shared.sandbox_read_only.clone(),
                    read_write: vec![run_dir.path().to_path_buf()],
                    devices: pycage_sandbox::default_devices(),
                    uid,
                    gid: uid,
                    max_processes: config.max_processes,
                    max_file_bytes: config.max_file_bytes,
                    max_open_files: config.max_open_files,
                    staging_dir: staging.path().to_path_buf(),
                };
                let prepared = pycage_sandbox::Prepared::new(&policy)?;
                (Some(Box::new(SandboxHook(prepared))), Some(staging))
            }
        };
        Worker::spawn(SpawnSpec {
            python: &shared.interpreter.executable,
            bootstrap_dir: shared.bootstrap.path(),
            run_dir,
            staging,
            pre_exec,
        })
    }

    /// Settles every in-flight run as `abort` and returns once each child
    /// has exited and been reaped. Later runs fail with [`MisuseError::ShutDown`].
    pub async fn shutdown(&self) {
        self.shared.tracker.close();
        self.shared.shutdown.cancel();
        self.shared.tracker.wait().await;
        if let Some(pool) = &self.shared.pool {
            pool.close().await;
        }
    }
}

/// The sandbox hook: enters every layer between fork and exec.
struct SandboxHook(pycage_sandbox::Prepared);

impl PreExec for SandboxHook {
    unsafe fn pre_exec(&self) -> std::io::Result<()> {
        // SAFETY: called between fork and exec, which is what `enter` requires.
        unsafe { self.0.enter() }
    }

    fn explain(&self, e: std::io::Error) -> SpawnError {
        SpawnError::Sandbox(self.0.explain_spawn_error(e))
    }
}

/// Checks every layer and collects the read-only view of a sandboxed run.
fn sandbox_paths(config: &RuntimeConfig, interp: &Interpreter, bootstrap: &Path) -> Result<Vec<PathBuf>, RuntimeError> {
    let avail = pycage_sandbox::probe();
    let missing = avail.missing();
    if !missing.is_empty() {
        let reasons: Vec<String> = avail
            .layers()
            .iter()
            .filter(|(name, _)| missing.contains(name))
            .map(|(name, layer)| format!("{name} ({})", layer.reason))
            .collect();
        return Err(RuntimeError::SandboxUnavailable { layers: missing.join(", "), reasons: reasons.join("; ") });
    }
    let mut paths = pycage_sandbox::default_read_only_paths();
    let mut add = |p: &Path| {
        if p.is_absolute() && p.exists() && !paths.iter().any(|q| p.starts_with(q)) {
            paths.retain(|q| !q.starts_with(p));
            paths.push(p.to_path_buf());
        }
    };
    for p in &interp.prefixes {
        add(p);
    }
    for p in &interp.sys_path {
        add(p);
    }
    if let Some(dir) = interp.executable.parent() {
        add(dir);
    }
    add(bootstrap);
    for p in &config.allow_read {
        if !p.is_absolute() || !p.exists() {
            return Err(RuntimeError::SandboxPolicy(pycage_sandbox::SandboxError::Resolve {
                path: p.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "--allow-read paths must exist and be absolute",
                ),
            }));
        }
        add(p);
    }
    Ok(paths)
}
