//! The [`Runtime`]: construction (probe, bootstrap files), runs, shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bindings::Namespace;
use crate::cleanup::{self, CleanupFailure, CleanupLog, Owner, RunDir};
use crate::config::{ConfigError, Isolation, RuntimeConfig};
use crate::interpreter::{self, Interpreter, InterpreterError};
use crate::names::{self, NameError};
use crate::site::{self, RunSite, SandboxLayout};
use crate::spawn::{Guard, PreExec, SpawnSpec, Worker};
use crate::{run, FailureKind, RunEvent, RunResult};

/// The Python package shipped inside the binary.
const PYTHON_FILES: &[(&str, &str)] = &[
    ("__init__.py", include_str!("../../../python/pycage/__init__.py")),
    ("protocol.py", include_str!("../../../python/pycage/protocol.py")),
    ("bootstrap.py", include_str!("../../../python/pycage/bootstrap.py")),
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
    #[error("{0}")]
    AllowRead(String),
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
}

/// One program and its bindings.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub program: String,
    pub bindings: Vec<Namespace>,
    /// Cancelling it settles the run as `abort`, keeping logs so far.
    pub cancel: Option<CancellationToken>,
    /// Host files or directories the program reads: each appears read-only
    /// in its working directory under its base name (relative paths are
    /// taken from the current directory).
    pub inputs: Vec<PathBuf>,
    /// Where to copy what the program leaves in its `out/` directory when
    /// the run settles (created if missing; at most
    /// `RuntimeConfig::max_output_bytes`; symlinks and special files are
    /// never followed or copied). The report is `RunResult::output`.
    pub output_dir: Option<PathBuf>,
}

impl RunRequest {
    /// A request with no bindings.
    pub fn new(program: impl Into<String>) -> Self {
        RunRequest { program: program.into(), ..RunRequest::default() }
    }

    /// Adds an input file or directory.
    pub fn with_input(mut self, path: impl Into<PathBuf>) -> Self {
        self.inputs.push(path.into());
        self
    }

    /// Sets the output directory.
    pub fn with_output_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.output_dir = Some(path.into());
        self
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
    /// What every sandboxed run sees of the host.
    layout: Option<SandboxLayout>,
    interpreter: Interpreter,
    bootstrap: RunDir,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    cleanup: Arc<CleanupLog>,
    /// Dropped after `bootstrap` (fields drop in order): its lock goes last.
    owner: Owner,
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
        let temp = config.run_dir_parent.clone().unwrap_or_else(std::env::temp_dir);
        let parents = vec![temp.clone()];
        // Directories left by pycage processes that died without cleaning up.
        let cleanup = Arc::new(CleanupLog::default());
        for parent in &parents {
            for failure in cleanup::sweep(parent).failed {
                cleanup.record(&failure.path, &std::io::Error::other(failure.error));
            }
        }
        let owner = Owner::new(&parents).map_err(RuntimeError::Bootstrap)?;
        let bootstrap = write_bootstrap(&temp, &owner, Arc::clone(&cleanup)).map_err(RuntimeError::Bootstrap)?;
        let (interpreter, imported) =
            interpreter::probe_with_bootstrap(config.python.as_deref(), Some(bootstrap.path()))?;
        if let Err(stderr) = imported {
            return Err(RuntimeError::BootstrapImport { python: interpreter.executable, stderr });
        }
        share_bytecode(bootstrap.path());
        let layout = match config.isolation {
            Isolation::Process => None,
            Isolation::Sandbox => Some(sandbox_layout(&config, &interpreter, bootstrap.path())?),
        };
        Ok(Runtime {
            shared: Arc::new(Shared {
                layout,
                config,
                interpreter,
                bootstrap,
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
                cleanup,
                owner,
            }),
        })
    }

    /// Directories pycage created and could not remove since the last
    /// call (each was also logged with `tracing::warn!`). A run's files are
    /// removed when it settles; a failure never fails the run, so it is
    /// reported here.
    pub fn cleanup_failures(&self) -> Vec<CleanupFailure> {
        self.shared.cleanup.drain()
    }

    /// The configuration in force.
    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    /// The probed interpreter.
    pub fn interpreter(&self) -> &Interpreter {
        &self.shared.interpreter
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
        let inputs = site::resolve_inputs(&request.inputs).map_err(MisuseError::Input)?;
        let deadline = Instant::now() + shared.config.wall_time;
        let (worker, run_site) = match self.spawn_worker(&inputs) {
            Ok(w) => w,
            Err(e) => {
                return Ok(RunResult::failed(
                    FailureKind::WorkerExit,
                    format!("could not start {}: {e}", shared.interpreter.executable.display()),
                    Vec::new(),
                ))
            }
        };
        let scope = match run_site.init_pid() {
            Some(init) => Some(crate::watchdog::Scope::PidNamespace { init }),
            None if shared.layout.is_none() => worker.pid().map(|root| crate::watchdog::Scope::Descendants { root }),
            None => None,
        };
        let budget = crate::watchdog::Budget {
            cpu: std::time::Duration::from_secs(shared.config.cpu_seconds),
            memory_bytes: shared.config.address_space_bytes,
        };
        let mut result = run::execute(
            worker,
            run::RunInputs {
                config: &shared.config,
                program: request.program,
                bindings: request.bindings,
                cancel: request.cancel.unwrap_or_default(),
                shutdown: shared.shutdown.clone(),
                events,
                deadline,
                budget: crate::watchdog::budget_watch(scope, budget),
            },
        )
        .await;
        if let Some(dest) = &request.output_dir {
            let dest = site::absolute(dest).unwrap_or_else(|_| dest.clone());
            result.output = Some(run_site.collect_output(&dest, shared.config.max_output_bytes));
        }
        Ok(result)
    }

    /// Starts the child of one run: its directory (process isolation) or
    /// its sandbox, with `inputs` in its working directory.
    fn spawn_worker(&self, inputs: &[site::Input]) -> Result<(Worker, RunSite), String> {
        let shared = &self.shared;
        let config = &shared.config;
        let mut guards: Vec<Guard> = Vec::new();
        let Some(layout) = &shared.layout else {
            let run_site = RunSite::host(config, &shared.owner, Arc::clone(&shared.cleanup), inputs)?;
            let RunSite::Host(dir) = &run_site else { return Err("no run directory".into()) };
            let path = dir.path().to_path_buf();
            guards.push(Box::new(Arc::clone(dir)));
            let worker = Worker::spawn(SpawnSpec {
                python: &shared.interpreter.executable,
                bootstrap_dir: shared.bootstrap.path(),
                home: &path,
                tmp: &path,
                cwd: Some(&path),
                env: &[],
                guards,
                pre_exec: None,
            })
            .map_err(|e| e.to_string())?;
            return Ok((worker, run_site));
        };
        let host_ids = if rustix::process::geteuid().is_root() {
            let dir = config.uid_lease_dir.clone().unwrap_or_else(|| PathBuf::from(crate::lease::DEFAULT_LEASE_DIR));
            let lease = crate::lease::lease_uid(&dir, config.sandbox_uid_base, config.sandbox_uid_count)
                .map_err(|e| e.to_string())?;
            let ids = pycage_sandbox::HostIds { uid: lease.uid(), gid: lease.uid() };
            guards.push(Box::new(lease));
            Some(ids)
        } else {
            None
        };
        let mut remapped = layout.remapped.clone();
        remapped.extend(RunSite::input_remaps(inputs));
        let policy = pycage_sandbox::SandboxPolicy {
            read_only: layout.read_only.clone(),
            remapped,
            devices: pycage_sandbox::default_devices(),
            host_ids,
            max_processes: config.max_processes,
            max_file_bytes: config.max_file_bytes,
            max_open_files: config.max_open_files,
            disk_bytes: config.disk_bytes,
            sysv_shm_bytes: config.sysv_shm_bytes,
        };
        let prepared = Arc::new(pycage_sandbox::Prepared::new(&policy).map_err(|e| format!("sandbox: {e}"))?);
        let hook: Arc<dyn PreExec> = Arc::new(SandboxHook(Arc::clone(&prepared)));
        let worker = Worker::spawn(SpawnSpec {
            python: &layout.python,
            bootstrap_dir: &layout.bootstrap,
            home: Path::new(pycage_sandbox::WORK_DIR),
            tmp: Path::new(pycage_sandbox::TMP_DIR),
            cwd: None,
            env: &layout.env,
            guards,
            pre_exec: Some(hook),
        })
        .map_err(|e| e.to_string())?;
        Ok((worker, RunSite::sandboxed(&prepared)))
    }

    /// Settles every in-flight run as `abort` and returns once each child
    /// has exited and been reaped. Later runs fail with [`MisuseError::ShutDown`].
    pub async fn shutdown(&self) {
        self.shared.tracker.close();
        self.shared.shutdown.cancel();
        self.shared.tracker.wait().await;
    }
}

/// The sandbox hook: enters every layer between fork and exec.
struct SandboxHook(Arc<pycage_sandbox::Prepared>);

impl PreExec for SandboxHook {
    unsafe fn pre_exec(&self) -> std::io::Result<()> {
        // SAFETY: called between fork and exec, which is what `enter` requires.
        unsafe { self.0.enter() }
    }

    fn explain(&self, e: std::io::Error) -> String {
        self.0.explain_spawn_error(e).to_string()
    }
}

/// Checks every layer and decides what a sandboxed run sees of the host.
fn sandbox_layout(
    config: &RuntimeConfig,
    interp: &Interpreter,
    bootstrap: &Path,
) -> Result<SandboxLayout, RuntimeError> {
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
    SandboxLayout::new(config, interp, bootstrap).map_err(RuntimeError::AllowRead)
}

fn write_bootstrap(temp: &Path, owner: &Owner, log: Arc<CleanupLog>) -> std::io::Result<RunDir> {
    use std::os::unix::fs::PermissionsExt;
    let dir = RunDir::create(temp, "bootstrap", owner, log)?;
    // Readable by the unprivileged uid a sandboxed child runs as; the
    // content is not secret, and only the host can write it.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    let pkg = dir.path().join("pycage");
    std::fs::create_dir(&pkg)?;
    std::fs::set_permissions(&pkg, std::fs::Permissions::from_mode(0o755))?;
    for (name, text) in PYTHON_FILES {
        let path = pkg.join(name);
        std::fs::write(&path, text)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(dir)
}

/// Lets the sandboxed uid read the bytecode the probe compiled (children
/// run with `-B`, so they read it and never write their own).
fn share_bytecode(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(entries) = std::fs::read_dir(dir.join("pycage").join("__pycache__")) {
        let _ =
            std::fs::set_permissions(dir.join("pycage").join("__pycache__"), std::fs::Permissions::from_mode(0o755));
        for e in entries.flatten() {
            let _ = std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o644));
        }
    }
}
