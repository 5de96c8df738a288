//! The [`Runtime`]: construction (probe, bootstrap files), runs, shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bindings::Namespace;
use crate::cleanup::{CleanupFailure, CleanupLog, RunDirs};
use crate::config::{ConfigError, Isolation, RuntimeConfig, SpawnMode};
use crate::interpreter::{Interpreter, InterpreterError};
use crate::names::{self, NameError};
use crate::pool::{Pool, PoolConfig, Shell, Shells};
use crate::probe_cache::{self, BootstrapDir, PrepareError};
use crate::session::{Session, SessionOptions};
use crate::site::{self, RunSite, SandboxLayout};
use crate::spawn::{Guard, PreExec, SpawnError, SpawnSpec, Spawner, Worker};
use crate::{run, FailureKind, RunEvent, RunResult};

/// The Python package shipped inside the binary.
pub(crate) const PYTHON_FILES: &[(&str, &str)] = &[
    ("__init__.py", include_str!("../../../python/pycage/__init__.py")),
    ("_private.py", include_str!("../../../python/pycage/_private.py")),
    ("_wire.py", include_str!("../../../python/pycage/_wire.py")),
    ("encoder.py", include_str!("../../../python/pycage/encoder.py")),
    ("decoder.py", include_str!("../../../python/pycage/decoder.py")),
    ("channel.py", include_str!("../../../python/pycage/channel.py")),
    ("logs.py", include_str!("../../../python/pycage/logs.py")),
    ("namespaces.py", include_str!("../../../python/pycage/namespaces.py")),
    ("signals.py", include_str!("../../../python/pycage/signals.py")),
    ("runner.py", include_str!("../../../python/pycage/runner.py")),
    ("outcome.py", include_str!("../../../python/pycage/outcome.py")),
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
    #[error("{0}")]
    AllowRead(String),
    #[error("could not set up the run directories: {0}")]
    RunDirs(std::io::Error),
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
    /// Children forked from a zygote, when runs use one.
    pool: Option<Pool>,
    /// Why runs use `exec` although the configuration asks for a zygote.
    spawn_fallback: Option<String>,
    /// FIFO admission of runs (`max_concurrent_runs`).
    admission: tokio::sync::Semaphore,
    /// What every sandboxed run sees of the host.
    layout: Option<SandboxLayout>,
    /// A cgroup v2 subtree delegated to pycage, if any: each sandboxed run
    /// gets a child of it with its budgets.
    cgroup: Option<pycage_sandbox::cgroup::Cgroup>,
    /// Names run cgroups.
    next_cgroup: std::sync::atomic::AtomicU64,
    /// Process isolation's run directories (and this runtime's owner lock).
    run_dirs: Arc<RunDirs>,
    cleanup: Arc<CleanupLog>,
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
        let (layout, cgroup) = match config.isolation {
            Isolation::Process => (None, None),
            Isolation::Sandbox => {
                let (layout, cgroup) = sandbox_layout(&config, &interpreter, bootstrap.path())?;
                (Some(layout), cgroup)
            }
        };
        // Directories left by pycage processes that died without cleaning
        // up are swept here; this runtime's own are named for its lock.
        let cleanup = Arc::new(CleanupLog::default());
        let parent = config.run_dir_parent.clone().unwrap_or_else(std::env::temp_dir);
        let run_dirs = Arc::new(RunDirs::new(parent, Arc::clone(&cleanup)).map_err(RuntimeError::RunDirs)?);
        let spawn_fallback = match (config.spawn, &interpreter.zygote_error) {
            (SpawnMode::Exec, _) => None,
            (SpawnMode::Zygote, Some(e)) => Some(format!("the zygote cannot run on this interpreter: {e}")),
            (SpawnMode::Zygote, None) => None,
        };
        let use_zygote = config.spawn == SpawnMode::Zygote && spawn_fallback.is_none();
        let spawner = match &layout {
            Some(_) if use_zygote => Some(Arc::new(Spawner::new().map_err(RuntimeError::Bootstrap)?)),
            _ => None,
        };
        Ok(Runtime {
            shared: Arc::new_cyclic(|me: &std::sync::Weak<Shared>| Shared {
                pool: use_zygote.then(|| {
                    Pool::new(PoolConfig {
                        python: interpreter.executable.clone(),
                        bootstrap_dir: bootstrap.path().to_path_buf(),
                        size: config.pool_size,
                        zygote_max_runs: config.zygote_max_runs,
                        zygote_max_age: config.zygote_max_age,
                        run_dirs: Arc::clone(&run_dirs),
                        rlimits: Vec::new(),
                        shells: layout.as_ref().zip(spawner.as_ref()).map(|(layout, spawner)| {
                            let me = me.clone();
                            Shells {
                                make: Arc::new(move || match me.upgrade() {
                                    Some(shared) => Runtime { shared }.spawn_shell(),
                                    None => Err(SpawnError::Channel(std::io::Error::other("the runtime is gone"))),
                                }),
                                spawner: Arc::clone(spawner),
                                env: shell_env(layout),
                                remaps: layout
                                    .remapped
                                    .iter()
                                    .map(|r| {
                                        (r.host.to_string_lossy().into_owned(), r.inside.to_string_lossy().into_owned())
                                    })
                                    .collect(),
                            }
                        }),
                    })
                }),
                spawn_fallback,
                admission: tokio::sync::Semaphore::new(config.max_concurrent_runs),
                layout,
                cgroup,
                next_cgroup: std::sync::atomic::AtomicU64::new(0),
                run_dirs,
                cleanup,
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

    /// Directories pycage created and could not remove since the last
    /// call (each was also logged with `tracing::warn!`). A run's files are
    /// removed when it settles; a failure never fails the run, so it is
    /// reported here.
    pub fn cleanup_failures(&self) -> Vec<CleanupFailure> {
        self.shared.cleanup.drain()
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

    /// Tops the zygote's pool up after a run (off the run's critical path);
    /// not once shutdown has begun (the children would be killed unused).
    pub(crate) fn refill_pool(&self) {
        if self.shared.shutdown.is_cancelled() {
            return;
        }
        if let Some(pool) = &self.shared.pool {
            pool.refill_after_run();
        }
    }

    /// A child ready for `boot`, or why none could be started.
    pub(crate) async fn take_worker(&self) -> Result<Worker, String> {
        self.take_worker_with(&[]).await.map(|(worker, _)| worker)
    }

    /// A child ready for `boot` with `inputs` in its working directory, and
    /// where its files are.
    async fn take_worker_with(&self, inputs: &[site::Input]) -> Result<(Worker, RunSite), String> {
        let failed = |e: &dyn std::fmt::Display| {
            format!("could not start {}: {e}", self.shared.interpreter.executable.display())
        };
        // A sandboxed child is built ahead of demand, before its inputs are
        // known; a sandboxed run with inputs gets its own interpreter.
        let pool = self.shared.pool.as_ref().filter(|_| inputs.is_empty() || self.shared.layout.is_none());
        let (worker, site) = match pool {
            Some(pool) => match pool.take().await.map_err(|e| failed(&e))? {
                (worker, Some(handoff)) => (worker, RunSite::Sandbox(Some(handoff))),
                (worker, None) => {
                    let Some(dir) = worker.run_dir().cloned() else {
                        return Err(failed(&"the sandbox handed nothing over"));
                    };
                    site::copy_inputs(dir.path(), inputs).map_err(|e| failed(&e))?;
                    (worker, RunSite::Host(dir))
                }
            },
            None => self.spawn_worker(inputs).map_err(|e| failed(&e))?,
        };
        Ok((worker, site))
    }

    async fn run_inner(
        &self,
        request: RunRequest,
        events: Option<mpsc::UnboundedSender<RunEvent>>,
    ) -> Result<RunResult, MisuseError> {
        names::check_bindings(&request.bindings)?;
        let inputs = site::resolve_inputs(&request.inputs).map_err(MisuseError::Input)?;
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
        let (mut worker, run_site) = match self.take_worker_with(&inputs).await {
            Ok(w) => w,
            Err(message) => return Ok(RunResult::failed(FailureKind::WorkerExit, message, Vec::new())),
        };
        let scope = match run_site.init_pid() {
            Some(init) => Some(crate::watchdog::Scope::PidNamespace {
                init,
                // A zygote's child joined the namespace from outside.
                joined: worker.is_zygote_child().then(|| worker.pid()).flatten(),
            }),
            None if shared.layout.is_none() => worker.pid().map(|root| crate::watchdog::Scope::Descendants { root }),
            None => None,
        };
        let budget = crate::watchdog::Budget {
            cpu: std::time::Duration::from_secs(shared.config.cpu_seconds),
            memory_bytes: shared.config.address_space_bytes,
        };
        let inputs = run::RunInputs {
            config: &shared.config,
            cancel: request.cancel.unwrap_or_default(),
            shutdown: shared.shutdown.clone(),
            events,
            deadline,
            budget: crate::watchdog::budget_watch(scope, budget),
        };
        let Some(dest) = &request.output_dir else {
            let result = run::execute_once(worker, request.program, request.bindings, inputs, &shared.tracker).await;
            self.refill_pool();
            return Ok(result);
        };
        // The output is copied once every process of the run is gone, so
        // what is copied is what the run left.
        let m = run::RunMachine::new(
            &shared.config,
            run::Opening::OneShot,
            request.program,
            request.bindings,
            inputs.events.is_some(),
        );
        let (mut result, _) = run::execute(&mut worker, m, inputs).await;
        worker.stop(shared.config.grace).await;
        drop(worker);
        let dest = site::absolute(dest).unwrap_or_else(|_| dest.clone());
        result.output = Some(run_site.collect_output(&dest, shared.config.max_output_bytes));
        self.refill_pool();
        Ok(result)
    }

    /// A sandbox shell for a zygote's child to join: the run built exactly
    /// as for an exec'd run, its init stopped before the program (see
    /// `Prepared::into_shell`). Call it on the spawner thread.
    fn spawn_shell(&self) -> Result<Shell, SpawnError> {
        let shared = &self.shared;
        let Some(layout) = &shared.layout else {
            return Err(SpawnError::Channel(std::io::Error::other("a shell needs sandbox isolation")));
        };
        let (prepared, guards) = self.prepare_sandbox(layout, &[])?;
        let prepared = Arc::new(prepared.into_shell());
        // Nothing is exec'd: the supervisor and init never return from the
        // hook, and `spawn` returns once both have closed every descriptor,
        // after their handoffs.
        let supervisor = spawn_sandboxed(layout, &prepared, guards)?;
        let handoff = prepared.take_handoff();
        let join = prepared.take_join().ok_or_else(|| {
            SpawnError::Sandbox(prepared.take_child_failure().map(pycage_sandbox::SandboxError::Child).unwrap_or_else(
                || pycage_sandbox::SandboxError::Spawn(std::io::Error::other("the shell handed nothing over")),
            ))
        })?;
        Ok(Shell { supervisor, handoff, join, plan: prepared.program_plan() })
    }

    /// The sandbox policy of one run (leasing its uid on a root host, with
    /// `inputs` shown in its working directory), prepared, and what the
    /// run's process must keep until it is reaped.
    fn prepare_sandbox(
        &self,
        layout: &SandboxLayout,
        inputs: &[site::Input],
    ) -> Result<(pycage_sandbox::Prepared, Vec<Guard>), SpawnError> {
        let config = &self.shared.config;
        let mut guards: Vec<Guard> = Vec::new();
        let host_ids = if rustix::process::geteuid().is_root() {
            let dir = config.uid_lease_dir.clone().unwrap_or_else(|| PathBuf::from(crate::lease::DEFAULT_LEASE_DIR));
            let lease = crate::lease::lease_uid(&dir, config.sandbox_uid_base, config.sandbox_uid_count)
                .map_err(|e| SpawnError::RunDir(std::io::Error::other(e.to_string())))?;
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
        let mut prepared = pycage_sandbox::Prepared::new(&policy)?;
        if let Some(parent) = &self.shared.cgroup {
            guards.push(Box::new(self.join_run_cgroup(parent, &mut prepared)?));
        }
        Ok((prepared, guards))
    }

    /// Starts the child of one run by exec: its directory (process
    /// isolation) or its sandbox, with `inputs` in its working directory.
    fn spawn_worker(&self, inputs: &[site::Input]) -> Result<(Worker, RunSite), SpawnError> {
        let shared = &self.shared;
        let Some(layout) = &shared.layout else {
            let dir = Arc::new(shared.run_dirs.create().map_err(SpawnError::RunDir)?);
            site::copy_inputs(dir.path(), inputs).map_err(|e| SpawnError::RunDir(std::io::Error::other(e)))?;
            let path = dir.path().to_path_buf();
            let worker = Worker::spawn(SpawnSpec {
                python: &shared.interpreter.executable,
                bootstrap_dir: shared.bootstrap.path(),
                home: &path,
                tmp: &path,
                cwd: Some(&path),
                env: &[],
                run_dir: Some(Arc::clone(&dir)),
                guards: Vec::new(),
                pre_exec: None,
            })?;
            return Ok((worker, RunSite::Host(dir)));
        };
        let (prepared, guards) = self.prepare_sandbox(layout, inputs)?;
        let prepared = Arc::new(prepared);
        let worker = spawn_sandboxed(layout, &prepared, guards)?;
        Ok((worker, RunSite::sandboxed(&prepared)))
    }

    /// Creates the run's cgroup under the delegated `parent`, with the run's
    /// budgets as kernel limits, and has the sandbox join it first thing.
    fn join_run_cgroup(
        &self,
        parent: &pycage_sandbox::cgroup::Cgroup,
        prepared: &mut pycage_sandbox::Prepared,
    ) -> Result<site::CgroupGuard, SpawnError> {
        use pycage_sandbox::cgroup::{CgroupLimits, RealCgroupFs, RunCgroup};
        let config = &self.shared.config;
        let n = self.shared.next_cgroup.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("pycage-{}-{n}", self.shared.run_dirs.owner_id());
        let limits = CgroupLimits {
            // The tmpfs's pages are charged to the run's cgroup too.
            memory_bytes: config.address_space_bytes.saturating_add(config.disk_bytes),
            max_processes: config.max_processes.saturating_add(2),
            cpu_max: None,
        };
        let run = RunCgroup::create(&RealCgroupFs, parent, &name, &limits).map_err(SpawnError::Cgroup)?;
        let guard = site::CgroupGuard(run);
        let procs = std::fs::OpenOptions::new().write(true).open(guard.0.procs_file()).map_err(SpawnError::Cgroup)?;
        prepared.join_cgroup(procs.into());
        Ok(guard)
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
        // Processes dropped rather than stopped (a sandbox shell's
        // supervisor, a child killed on drop) were sent SIGKILL and handed
        // to the reaper thread; a process tearing down its namespaces can
        // take a while to die. Shutdown returns once they are reaped, or
        // after a bound: a process stuck in the kernel must not hang it.
        let bound = Instant::now() + REAPER_WAIT;
        while !crate::spawn::reaper::idle() && Instant::now() < bound {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }
}

/// Longest [`Runtime::shutdown`] waits for killed processes to be reaped.
const REAPER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The sandbox hook: enters every layer between fork and exec.
struct SandboxHook(Arc<pycage_sandbox::Prepared>);

impl PreExec for SandboxHook {
    unsafe fn pre_exec(&self) -> std::io::Result<()> {
        // SAFETY: called between fork and exec, which is what `enter` requires.
        unsafe { self.0.enter() }
    }

    fn explain(&self, e: std::io::Error) -> SpawnError {
        SpawnError::Sandbox(self.0.explain_spawn_error(e))
    }
}

/// Checks every layer, decides what a sandboxed run sees of the host, and
/// finds a delegated cgroup v2 subtree if there is one.
fn sandbox_layout(
    config: &RuntimeConfig,
    interp: &Interpreter,
    bootstrap: &Path,
) -> Result<(SandboxLayout, Option<pycage_sandbox::cgroup::Cgroup>), RuntimeError> {
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
    let layout = SandboxLayout::new(config, interp, bootstrap).map_err(RuntimeError::AllowRead)?;
    Ok((layout, avail.cgroup))
}

/// Forks a sandboxed run (or a shell): the interpreter as the sandbox shows
/// it, entered through `prepared`'s hook.
fn spawn_sandboxed(
    layout: &SandboxLayout,
    prepared: &Arc<pycage_sandbox::Prepared>,
    guards: Vec<Guard>,
) -> Result<Worker, SpawnError> {
    let hook: Arc<dyn PreExec> = Arc::new(SandboxHook(Arc::clone(prepared)));
    Worker::spawn(SpawnSpec {
        python: &layout.python,
        bootstrap_dir: &layout.bootstrap,
        home: Path::new(pycage_sandbox::WORK_DIR),
        tmp: Path::new(pycage_sandbox::TMP_DIR),
        cwd: None,
        env: &layout.env,
        run_dir: None,
        guards,
        pre_exec: Some(hook),
    })
}

/// The environment of a sandboxed zygote child, as the sandbox shows paths.
fn shell_env(layout: &SandboxLayout) -> Vec<(String, String)> {
    let mut env = vec![
        ("HOME".to_owned(), pycage_sandbox::WORK_DIR.to_owned()),
        ("TMPDIR".to_owned(), pycage_sandbox::TMP_DIR.to_owned()),
    ];
    env.extend(layout.env.iter().map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned())));
    env
}
