//! Every way a run's process is made, and nothing about what it runs.
//!
//! - [`spawn`]: one process by exec (`python3 -I` and the bootstrap), with
//!   its fd 3, its pipe and its pidfd; a [`spawn::Worker`] ends and reaps it.
//! - [`sandbox`]: the sandbox of one run (uid lease, cgroup), entered by an
//!   exec'd interpreter or built as a shell for a zygote's child to join.
//! - `pycage_zygote` and [`pool`]: the fork server and the children it forks
//!   ahead of demand; the pool builds shells through [`sandbox::Sandboxes`]
//!   directly, never through a higher layer.
//! - [`site`]: where a run's files are (a host directory, or the sandbox's
//!   tmpfs), its inputs and its output.
//!
//! The [`Launcher`] puts them together for the run sequence
//! (`crate::lifecycle`): [`Launcher::take_worker`] is the one way a run
//! gets a process. Failures are typed ([`spawn::SpawnError`], wrapped in a
//! [`spawn::StartError`] naming the interpreter).
//!
//! # Layers
//!
//! Each module uses only those listed before it: `pool_machine` (the
//! pool's sans-I/O decisions), `spawn` (exec, workers, the spawner
//! thread), `helper` (the shell helper's host side), `site`, `sandbox`,
//! then `pool`. The fork server's host side is the `pycage-zygote` crate.

pub(crate) mod helper;
pub(crate) mod pool;
pub(crate) mod pool_machine;
pub(crate) mod sandbox;
pub(crate) mod site;
pub(crate) mod spawn;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::{Isolation, RuntimeConfig, SpawnMode};
use crate::error::RuntimeError;
use crate::interpreter::Interpreter;
use crate::probe_cache::{self, BootstrapDir, PrepareError};
use pool::{Pool, PoolConfig, Shells};
use pycage_files::cleanup::{CleanupLog, RunDirs};
use pycage_packages::{Declarations, Entry, PackageCache, PackageError, Target};
use pycage_process::Reaper;
use sandbox::Sandboxes;
use site::RunSite;
use spawn::{SpawnError, SpawnSpec, Spawner, StartError, Worker};

/// A run's installed packages, held (leased in the cache) until it
/// settles.
pub(crate) struct RunPackages {
    pub entry: Arc<Entry>,
    /// The program declared them: a sandboxed run then sees this entry
    /// alone in place of the caller's, in a sandbox of its own.
    pub own: bool,
}

/// Longest [`Launcher::close`] waits for killed processes to be reaped.
const REAPER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Makes the processes of one runtime's runs (see the module docs).
pub(crate) struct Launcher {
    config: Arc<RuntimeConfig>,
    interpreter: Interpreter,
    bootstrap: BootstrapDir,
    /// Sandbox isolation's half.
    sandboxes: Option<Arc<Sandboxes>>,
    /// Children forked from a zygote, when runs use one.
    pool: Option<Pool>,
    /// Why runs use `exec` although the configuration asks for a zygote.
    spawn_fallback: Option<String>,
    /// Process isolation's run directories (and this runtime's owner lock).
    run_dirs: Arc<RunDirs>,
    cleanup: Arc<CleanupLog>,
    /// Reaps this runtime's children dropped while dying.
    reaper: Arc<Reaper>,
    /// Runs' declared packages.
    packages: Arc<PackageCache>,
    /// The caller's own packages (`with_packages`), installed at
    /// construction and held for the runtime's life: every sandbox shows
    /// them.
    with_entry: Option<Arc<Entry>>,
    /// The zygote's matplotlib configuration directory, when it preloads
    /// (a font cache built there stays the host's).
    _zygote_home: Option<tempfile::TempDir>,
}

/// A relative interpreter path with a directory in it
/// (`target/venv/bin/python`) names a file from the host's working
/// directory, which the zygote does not start in: made absolute here. A
/// bare name (`python3`) stays a `PATH` lookup.
fn anchored(python: &Path) -> PathBuf {
    if python.is_relative() && python.components().count() > 1 {
        if let Ok(absolute) = std::path::absolute(python) {
            return absolute;
        }
    }
    python.to_path_buf()
}

/// The interpreter a configuration names: `venv`'s `bin/python` (checked
/// to be a virtual environment's), or `python`.
fn interpreter_path(config: &RuntimeConfig) -> Result<Option<PathBuf>, RuntimeError> {
    let Some(venv) = &config.venv else { return Ok(config.python.as_deref().map(anchored)) };
    let problem = |problem: String| RuntimeError::Venv { path: venv.clone(), problem };
    let dir = std::path::absolute(venv).map_err(|e| problem(e.to_string()))?;
    if !dir.is_dir() {
        return Err(problem("no such directory".into()));
    }
    if !dir.join("pyvenv.cfg").is_file() {
        return Err(problem("not a virtual environment (it has no pyvenv.cfg)".into()));
    }
    for python in ["python", "python3"].iter().map(|name| dir.join("bin").join(name)) {
        match std::fs::metadata(&python) {
            Ok(_) => return Ok(Some(python)),
            // Neither the file nor a link: the next name.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::fs::symlink_metadata(&python).is_err() => {}
            // A link to a base interpreter this user cannot reach, or that
            // is gone: say which, as `--python` would.
            Err(e) => {
                let target = std::fs::canonicalize(&python)
                    .ok()
                    .or_else(|| link_chain_end(&python))
                    .map(|t| format!(" (a link to {})", t.display()))
                    .unwrap_or_default();
                return Err(problem(format!(
                    "cannot run {}{target}: {e}; a venv's base interpreter must be one this user can run",
                    python.display()
                )));
            }
        }
    }
    Err(problem("it has no bin/python".into()))
}

/// Where a chain of symbolic links from `path` ends, as far as it can be
/// read (a link into a directory this user cannot search ends there).
fn link_chain_end(path: &std::path::Path) -> Option<PathBuf> {
    let mut at = path.to_path_buf();
    // The kernel's own bound on links followed.
    for _ in 0..40 {
        let Ok(next) = std::fs::read_link(&at) else { break };
        at = match at.parent() {
            Some(parent) => parent.join(next),
            None => next,
        };
    }
    (at != path).then_some(at)
}

impl Launcher {
    /// Probes the interpreter, installs the bootstrap, checks the sandbox's
    /// layers and starts the zygote's pool (when runs use one).
    pub(crate) fn new(
        config: Arc<RuntimeConfig>,
        builder: Option<Arc<dyn pycage_packages::Builder>>,
    ) -> Result<Launcher, RuntimeError> {
        let python = interpreter_path(&config)?;
        let (interpreter, bootstrap) =
            probe_cache::prepare(python.as_deref(), config.cache_dir.as_deref(), &config.preload).map_err(
                |e| match e {
                    PrepareError::Interpreter(e) => RuntimeError::Interpreter(e),
                    PrepareError::Write(e) => RuntimeError::Bootstrap(e),
                    PrepareError::Import { python, stderr } => RuntimeError::BootstrapImport { python, stderr },
                    PrepareError::Preload(failure) => RuntimeError::Preload(failure),
                },
            )?;
        if let (Some(venv), None) = (&config.venv, &interpreter.venv) {
            return Err(RuntimeError::Venv {
                path: venv.clone(),
                problem: format!("{} does not run as a virtual environment", interpreter.executable.display()),
            });
        }
        let target = Target {
            python: interpreter.executable.clone(),
            version: interpreter.version,
            abi: interpreter.abi.clone(),
        };
        let declarations = match (config.allow_any_package, config.allow_packages.is_empty()) {
            (true, _) => Declarations::Any,
            (false, true) => Declarations::Refused,
            (false, false) => Declarations::Allowed(config.allow_packages.clone()),
        };
        let mut packages = PackageCache::new(
            config.cache_dir.as_deref(),
            &target,
            &config.with_packages,
            declarations,
            config.install_timeout,
            config.package_cache_bytes,
        )
        .map_err(RuntimeError::Packages)?;
        if let Some(builder) = builder {
            packages.set_builder(builder);
        }
        // The caller's own requirements: installed now, so that a bad one
        // fails here and no run pays for them.
        let with_entry = match packages.with_request() {
            Some(request) => {
                Some(Arc::new(packages.ensure(&request, &AtomicBool::new(false)).map_err(RuntimeError::Packages)?))
            }
            None => None,
        };
        let packages = Arc::new(packages);
        // Directories left by pycage processes that died without cleaning
        // up are swept here; this runtime's own are named for its lock.
        let cleanup = Arc::new(CleanupLog::default());
        let parent = config.run_dir_parent.clone().unwrap_or_else(std::env::temp_dir);
        let run_dirs = Arc::new(RunDirs::new(parent, Arc::clone(&cleanup)).map_err(RuntimeError::RunDirs)?);
        let reaper = Arc::new(Reaper::new());
        let spawn_fallback = match (config.spawn, &interpreter.zygote_error) {
            (SpawnMode::Exec, _) => None,
            (SpawnMode::Zygote, Some(e)) => Some(format!("the zygote cannot run on this interpreter: {e}")),
            (SpawnMode::Zygote, None) => None,
        };
        let use_zygote = config.spawn == SpawnMode::Zygote && spawn_fallback.is_none();
        let sandboxes = match config.isolation {
            Isolation::Process => None,
            Isolation::Sandbox => Some(Arc::new(Sandboxes::new(
                Arc::clone(&config),
                &interpreter,
                bootstrap.path(),
                with_entry.as_deref().map(Entry::path),
                run_dirs.owner_id().to_owned(),
                Arc::clone(&reaper),
                use_zygote,
            )?)),
        };
        let shells = match &sandboxes {
            Some(sandboxes) if use_zygote => Some(Shells {
                sandboxes: Arc::clone(sandboxes),
                spawner: Arc::new(Spawner::new().map_err(RuntimeError::Spawner)?),
                env: sandboxes.shell_env(),
                remaps: sandboxes.remaps(),
            }),
            _ => None,
        };
        let zygote_home = if use_zygote && !config.preload.is_empty() {
            Some(tempfile::Builder::new().prefix("pycage-zygote-").tempdir().map_err(RuntimeError::Bootstrap)?)
        } else {
            None
        };
        let mut zygote_env = Vec::new();
        if let Some(home) = &zygote_home {
            zygote_env.push(("MPLCONFIGDIR".to_owned(), home.path().join("matplotlib").to_string_lossy().into_owned()));
        }
        if let Some(sandboxes) = sandboxes.as_ref().filter(|_| use_zygote) {
            // The zygote's children are sandboxed: before its first fork the
            // zygote shows this command line, the sandbox's view, instead of
            // the host's paths (the interpreter under a home directory, the
            // bootstrap in the host's cache).
            let argv = sandboxes.inside_argv("pycage.zygote");
            let mut json = Vec::new();
            json.push(b'[');
            for (i, arg) in argv.iter().enumerate() {
                if i > 0 {
                    json.push(b',');
                }
                pycage_protocol::write_json_string(&mut json, arg);
            }
            json.push(b']');
            zygote_env.push(("PYCAGE_ARGV".to_owned(), String::from_utf8_lossy(&json).into_owned()));
            // `0` keeps the zygote's sandboxed children to the Python join
            // (`python/pycage/confine.py`): for comparison, and in case the
            // native library misbehaves on some system.
            if let Some(choice) = std::env::var_os("PYCAGE_NATIVE_JOIN") {
                zygote_env.push(("PYCAGE_NATIVE_JOIN".to_owned(), choice.to_string_lossy().into_owned()));
            }
        }
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let pool = use_zygote.then(|| {
            Pool::new(PoolConfig {
                python: interpreter.executable.clone(),
                bootstrap_dir: bootstrap.path().to_path_buf(),
                preload: config.preload.clone(),
                zygote_env,
                size: config.pool_size,
                cores,
                zygote_max_runs: config.zygote_max_runs,
                zygote_max_age: config.zygote_max_age,
                run_dirs: Arc::clone(&run_dirs),
                rlimits: Vec::new(),
                shells,
                hash_seeds: config.journal_key.is_some(),
            })
        });
        Ok(Launcher {
            config,
            interpreter,
            bootstrap,
            sandboxes,
            pool,
            spawn_fallback,
            run_dirs,
            cleanup,
            reaper,
            packages,
            with_entry,
            _zygote_home: zygote_home,
        })
    }

    /// The run's packages (the caller's `with_packages` and what `program`
    /// declares), installed now unless the cache has them; `None` when the
    /// run needs none. A cancel or stop kills the installer.
    pub(crate) async fn packages(
        &self,
        program: &str,
        cancel: &CancellationToken,
        stop: &CancellationToken,
    ) -> Result<Option<RunPackages>, PackageError> {
        let Some(request) = self.packages.request(program)? else { return Ok(None) };
        if !request.declared {
            if let Some(entry) = &self.with_entry {
                return Ok(Some(RunPackages { entry: Arc::clone(entry), own: false }));
            }
        }
        let cache = Arc::clone(&self.packages);
        let flag = Arc::new(AtomicBool::new(false));
        let task_flag = Arc::clone(&flag);
        let mut task = tokio::task::spawn_blocking(move || cache.ensure(&request, &task_flag));
        let installed = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            _ = stop.cancelled() => None,
            done = &mut task => Some(done),
        };
        let entry = match installed {
            Some(done) => done.map_err(|e| PackageError::Install {
                installer: "the installer thread",
                requirements: String::new(),
                output: e.to_string(),
            })??,
            None => {
                // The installer is killed before the run settles.
                flag.store(true, Ordering::Release);
                let _ = task.await;
                return Err(PackageError::Cancelled);
            }
        };
        Ok(Some(RunPackages { entry: Arc::new(entry), own: true }))
    }

    /// The host directory of the packages every run gets (the caller's
    /// `with_packages`), if any.
    pub(crate) fn with_entry_path(&self) -> Option<PathBuf> {
        self.with_entry.as_ref().map(|e| e.path().to_path_buf())
    }

    /// Where a run's process sees `packages`: its `run.sysPath`.
    pub(crate) fn packages_inside(&self, packages: &RunPackages) -> String {
        match &self.sandboxes {
            Some(_) => pycage_packages::PACKAGES_DIR.to_owned(),
            None => packages.entry.path().to_string_lossy().into_owned(),
        }
    }

    /// The probed interpreter.
    pub(crate) fn bootstrap_dir(&self) -> &Path {
        self.bootstrap.path()
    }

    pub(crate) fn interpreter(&self) -> &Interpreter {
        &self.interpreter
    }

    /// How runs are spawned in fact: the configured mode, or `Exec` with
    /// the reason when the zygote cannot be used.
    pub(crate) fn spawn_mode(&self) -> (SpawnMode, Option<&str>) {
        match &self.spawn_fallback {
            Some(reason) => (SpawnMode::Exec, Some(reason)),
            None => (self.config.spawn, None),
        }
    }

    /// Directories that could not be removed.
    pub(crate) fn cleanup(&self) -> &CleanupLog {
        &self.cleanup
    }

    /// The pid of the zygote serving runs now, if there is one.
    pub(crate) fn zygote_pid(&self) -> Option<i32> {
        self.pool.as_ref().and_then(Pool::zygote_pid)
    }

    pub(crate) fn shell_helper_pid(&self) -> Option<i32> {
        self.sandboxes.as_ref().and_then(|s| s.shell_helper_pid())
    }

    /// What a sandboxed run sees of the host.
    pub(crate) fn sandbox_view(&self) -> Option<site::SandboxView> {
        self.sandboxes.as_ref().map(|s| s.view())
    }

    /// The package cache's host directory.
    pub(crate) fn package_root(&self) -> &Path {
        self.packages.root()
    }

    /// Whether runs are sandboxed.
    pub(crate) fn sandboxed(&self) -> bool {
        self.sandboxes.is_some()
    }

    /// Tops the zygote's pool up after a run (off the run's critical path);
    /// `runs_in_flight` (this one included) decides whether the new
    /// children warm up ([`pool::Pool::refill_after_run`]).
    pub(crate) fn refill(&self, runs_in_flight: usize) {
        if let Some(pool) = &self.pool {
            pool.refill_after_run(runs_in_flight);
        }
    }

    /// [`Launcher::refill`], made when the returned [`pool::Refill`] is
    /// used (`None` without a pool).
    pub(crate) fn refill_later(&self, runs_in_flight: usize) -> Option<pool::Refill> {
        let pool = self.pool.as_ref()?;
        Some(pool.refill_later(runs_in_flight))
    }

    /// A child ready for `boot` with `inputs` in its working directory, and
    /// where its files are. A run that needs an interpreter of a given hash
    /// seed (a durable run's resume) gets one of its own, by exec.
    pub(crate) async fn take_worker(
        &self,
        inputs: &[site::Input],
        packages: Option<&RunPackages>,
        hash_seed: Option<u32>,
    ) -> Result<(Worker, RunSite), StartError> {
        let failed = |source: SpawnError| StartError { python: self.interpreter.executable.clone(), source };
        // A sandboxed child is built ahead of demand, before its inputs and
        // packages are known; a sandboxed run with inputs, or with packages
        // of its own (which it alone may see), gets its own interpreter.
        let own = packages.filter(|p| p.own).map(|p| p.entry.path());
        // Small inputs are copied into a pooled run's own tmpfs; big ones
        // are shown read-only in a sandbox of the run's own.
        let pooled_inputs = self.sandboxes.is_none() || inputs.is_empty() || {
            let inputs = inputs.to_vec();
            tokio::task::spawn_blocking(move || site::inputs_fit_a_pooled_run(&inputs)).await.unwrap_or(false)
        };
        let pool = self
            .pool
            .as_ref()
            .filter(|_| (pooled_inputs && own.is_none()) || self.sandboxes.is_none())
            .filter(|_| hash_seed.is_none());
        let (worker, site) = match pool {
            Some(pool) => match pool.take().await.map_err(failed)? {
                (worker, Some(handoff)) if inputs.is_empty() => (worker, RunSite::Sandbox(Some(handoff))),
                (worker, Some(handoff)) => {
                    // The run's `/work`, through the descriptor its sandbox
                    // handed over (`O_PATH`): a directory to copy into.
                    let work = rustix::fs::openat(
                        &handoff.work_dir,
                        c".",
                        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
                        rustix::fs::Mode::empty(),
                    )
                    .map_err(|e| failed(SpawnError::Inputs(format!("could not open the run's /work: {e}"))))?;
                    let inputs = inputs.to_vec();
                    let copy = move || {
                        let into = || site::copy_inputs_into(std::os::fd::AsFd::as_fd(&work), &inputs);
                        // A root host's run has a uid of its own: what is
                        // made in its tmpfs must be that uid's.
                        match rustix::fs::fstat(&work) {
                            Ok(st) if st.st_uid != rustix::process::geteuid().as_raw() => {
                                pycage_sandbox::as_fs_ids(st.st_uid, st.st_gid, into)
                                    .unwrap_or_else(|| Err("could not take the run's uid to copy its inputs".into()))
                            }
                            _ => into(),
                        }
                    };
                    tokio::task::spawn_blocking(copy)
                        .await
                        .map_err(|e| failed(SpawnError::Inputs(e.to_string())))?
                        .map_err(|e| failed(SpawnError::Inputs(e)))?;
                    (worker, RunSite::Sandbox(Some(handoff)))
                }
                (worker, None) => {
                    let Some(dir) = worker.run_dir().cloned() else {
                        return Err(failed(SpawnError::Channel(std::io::Error::other(
                            "the sandbox handed nothing over",
                        ))));
                    };
                    // Copying inputs is blocking file work of any size, for
                    // the blocking pool; without inputs there is none, and
                    // the hop (a wake-up of a pool thread and one of this
                    // thread, ~0.1-0.2 ms) would be on every run's path.
                    if !inputs.is_empty() {
                        let path = dir.work();
                        let inputs = inputs.to_vec();
                        tokio::task::spawn_blocking(move || site::copy_inputs(&path, &inputs))
                            .await
                            .map_err(|e| failed(SpawnError::Inputs(e.to_string())))?
                            .map_err(|e| failed(SpawnError::Inputs(e)))?;
                    }
                    (worker, RunSite::Host(dir))
                }
            },
            None => self.spawn_worker(inputs, own, hash_seed).map_err(failed)?,
        };
        Ok((worker, site))
    }

    /// Starts the child of one run by exec: its directory (process
    /// isolation) or its sandbox, with `inputs` in its working directory.
    fn spawn_worker(
        &self,
        inputs: &[site::Input],
        packages: Option<&Path>,
        hash_seed: Option<u32>,
    ) -> Result<(Worker, RunSite), SpawnError> {
        // A runtime with a journal key knows every run's hash seed.
        let hash_seed =
            hash_seed.or_else(|| self.config.journal_key.is_some().then(|| pycage_process::random_u64() as u32));
        if let Some(sandboxes) = &self.sandboxes {
            return sandboxes.spawn(inputs, packages, hash_seed);
        }
        let dir = Arc::new(self.run_dirs.create().map_err(SpawnError::RunDir)?);
        let work = dir.work();
        site::copy_inputs(&work, inputs).map_err(SpawnError::Inputs)?;
        // HOME and the temporary directory are the run's directory, which
        // holds its working directory: nothing of theirs shows in `.`.
        let path = dir.path().to_path_buf();
        let env = site::python_env(&path);
        let worker = Worker::spawn(SpawnSpec {
            python: &self.interpreter.executable,
            bootstrap_dir: self.bootstrap.path(),
            preload: &self.config.preload,
            home: &path,
            tmp: &path,
            cwd: Some(&work),
            env: &env,
            run_dir: Some(Arc::clone(&dir)),
            guards: Vec::new(),
            pre_exec: None,
            reaper: Arc::clone(&self.reaper),
            hash_seed,
        })?;
        Ok((worker, RunSite::Host(dir)))
    }

    /// Whether nothing the launcher does between runs is pending: the pool
    /// is full, every killed process is reaped and every run directory
    /// removed (see `Runtime::wait_idle`).
    pub(crate) fn is_idle(&self) -> bool {
        self.pool.as_ref().is_none_or(Pool::is_full)
            && self.sandboxes.as_ref().is_none_or(|s| !s.spare_pending())
            && self.reaper.idle()
            && self.run_dirs.all_removed()
    }

    /// Retires the pool's zygotes and waits until they exit, then (bounded:
    /// a process stuck in the kernel must not hang it) until every killed
    /// process is reaped and every run directory removed. Runs must be
    /// settled first.
    pub(crate) async fn close(&self) {
        if let Some(pool) = &self.pool {
            pool.close().await;
        }
        // No shell is wanted any more: the helper kills and reaps what it
        // still has, and exits.
        if let Some(sandboxes) = self.sandboxes.clone() {
            sandboxes.close_spare();
            let _ = tokio::task::spawn_blocking(move || sandboxes.close_helper()).await;
        }
        // Processes dropped rather than stopped (a sandbox shell's
        // supervisor, a child killed on drop) were sent SIGKILL and handed
        // to the reaper thread; a process tearing down its namespaces can
        // take a while to die.
        let bound = tokio::time::Instant::now() + REAPER_WAIT;
        while !self.reaper.idle() && tokio::time::Instant::now() < bound {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        // Run directories are removed on the blocking pool: wait for them.
        self.run_dirs.removed().await;
    }
}
