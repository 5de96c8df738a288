//! Every way a run's process is made, and nothing about what it runs.
//!
//! - [`spawn`]: one process by exec (`python3 -I` and the bootstrap), with
//!   its fd 3, its pipe and its pidfd; a [`spawn::Worker`] ends and reaps it.
//! - [`sandbox`]: the sandbox of one run (uid lease, cgroup), entered by an
//!   exec'd interpreter or built as a shell for a zygote's child to join.
//! - [`zygote`] and [`pool`]: the fork server and the children it forks
//!   ahead of demand; the pool builds shells through [`sandbox::Sandboxes`]
//!   directly, never through a higher layer.
//! - [`site`]: where a run's files are (a host directory, or the sandbox's
//!   tmpfs), its inputs and its output.
//!
//! The [`Launcher`] puts them together for the run sequence
//! (`crate::lifecycle`): [`Launcher::take_worker`] is the one way a run
//! gets a process. Failures are typed ([`spawn::SpawnError`], wrapped in a
//! [`spawn::StartError`] naming the interpreter).

pub(crate) mod pool;
pub(crate) mod sandbox;
pub(crate) mod site;
pub(crate) mod spawn;
pub(crate) mod zygote;

use std::sync::Arc;

use crate::cleanup::{CleanupLog, RunDirs};
use crate::config::{Isolation, RuntimeConfig, SpawnMode};
use crate::error::RuntimeError;
use crate::interpreter::Interpreter;
use crate::probe_cache::{self, BootstrapDir, PrepareError};
use crate::process::Reaper;
use pool::{Pool, PoolConfig, Shells};
use sandbox::Sandboxes;
use site::RunSite;
use spawn::{SpawnError, SpawnSpec, Spawner, StartError, Worker};

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
}

impl Launcher {
    /// Probes the interpreter, installs the bootstrap, checks the sandbox's
    /// layers and starts the zygote's pool (when runs use one).
    pub(crate) fn new(config: Arc<RuntimeConfig>) -> Result<Launcher, RuntimeError> {
        let (interpreter, bootstrap) = probe_cache::prepare(config.python.as_deref(), config.cache_dir.as_deref())
            .map_err(|e| match e {
                PrepareError::Interpreter(e) => RuntimeError::Interpreter(e),
                PrepareError::Write(e) => RuntimeError::Bootstrap(e),
                PrepareError::Import { python, stderr } => RuntimeError::BootstrapImport { python, stderr },
            })?;
        // Directories left by pycage processes that died without cleaning
        // up are swept here; this runtime's own are named for its lock.
        let cleanup = Arc::new(CleanupLog::default());
        let parent = config.run_dir_parent.clone().unwrap_or_else(std::env::temp_dir);
        let run_dirs = Arc::new(RunDirs::new(parent, Arc::clone(&cleanup)).map_err(RuntimeError::RunDirs)?);
        let reaper = Arc::new(Reaper::new());
        let sandboxes = match config.isolation {
            Isolation::Process => None,
            Isolation::Sandbox => Some(Arc::new(Sandboxes::new(
                Arc::clone(&config),
                &interpreter,
                bootstrap.path(),
                run_dirs.owner_id().to_owned(),
                Arc::clone(&reaper),
            )?)),
        };
        let spawn_fallback = match (config.spawn, &interpreter.zygote_error) {
            (SpawnMode::Exec, _) => None,
            (SpawnMode::Zygote, Some(e)) => Some(format!("the zygote cannot run on this interpreter: {e}")),
            (SpawnMode::Zygote, None) => None,
        };
        let use_zygote = config.spawn == SpawnMode::Zygote && spawn_fallback.is_none();
        let shells = match &sandboxes {
            Some(sandboxes) if use_zygote => Some(Shells {
                sandboxes: Arc::clone(sandboxes),
                spawner: Arc::new(Spawner::new().map_err(RuntimeError::Spawner)?),
                env: sandboxes.shell_env(),
                remaps: sandboxes.remaps(),
            }),
            _ => None,
        };
        let pool = use_zygote.then(|| {
            Pool::new(PoolConfig {
                python: interpreter.executable.clone(),
                bootstrap_dir: bootstrap.path().to_path_buf(),
                size: config.pool_size,
                zygote_max_runs: config.zygote_max_runs,
                zygote_max_age: config.zygote_max_age,
                run_dirs: Arc::clone(&run_dirs),
                rlimits: Vec::new(),
                shells,
            })
        });
        Ok(Launcher { config, interpreter, bootstrap, sandboxes, pool, spawn_fallback, run_dirs, cleanup, reaper })
    }

    /// The probed interpreter.
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

    /// Whether runs are sandboxed.
    pub(crate) fn sandboxed(&self) -> bool {
        self.sandboxes.is_some()
    }

    /// Tops the zygote's pool up after a run (off the run's critical path).
    pub(crate) fn refill(&self) {
        if let Some(pool) = &self.pool {
            pool.refill_after_run();
        }
    }

    /// A child ready for `boot` with `inputs` in its working directory, and
    /// where its files are.
    pub(crate) async fn take_worker(&self, inputs: &[site::Input]) -> Result<(Worker, RunSite), StartError> {
        let failed = |source: SpawnError| StartError { python: self.interpreter.executable.clone(), source };
        // A sandboxed child is built ahead of demand, before its inputs are
        // known; a sandboxed run with inputs gets its own interpreter.
        let pool = self.pool.as_ref().filter(|_| inputs.is_empty() || self.sandboxes.is_none());
        let (worker, site) = match pool {
            Some(pool) => match pool.take().await.map_err(failed)? {
                (worker, Some(handoff)) => (worker, RunSite::Sandbox(Some(handoff))),
                (worker, None) => {
                    let Some(dir) = worker.run_dir().cloned() else {
                        return Err(failed(SpawnError::Channel(std::io::Error::other(
                            "the sandbox handed nothing over",
                        ))));
                    };
                    let path = dir.path().to_path_buf();
                    let inputs = inputs.to_vec();
                    // Copying inputs is blocking file work of any size.
                    tokio::task::spawn_blocking(move || site::copy_inputs(&path, &inputs))
                        .await
                        .map_err(|e| failed(SpawnError::Inputs(e.to_string())))?
                        .map_err(|e| failed(SpawnError::Inputs(e)))?;
                    (worker, RunSite::Host(dir))
                }
            },
            None => self.spawn_worker(inputs).map_err(failed)?,
        };
        Ok((worker, site))
    }

    /// Starts the child of one run by exec: its directory (process
    /// isolation) or its sandbox, with `inputs` in its working directory.
    fn spawn_worker(&self, inputs: &[site::Input]) -> Result<(Worker, RunSite), SpawnError> {
        if let Some(sandboxes) = &self.sandboxes {
            return sandboxes.spawn(inputs);
        }
        let dir = Arc::new(self.run_dirs.create().map_err(SpawnError::RunDir)?);
        site::copy_inputs(dir.path(), inputs).map_err(SpawnError::Inputs)?;
        let path = dir.path().to_path_buf();
        let worker = Worker::spawn(SpawnSpec {
            python: &self.interpreter.executable,
            bootstrap_dir: self.bootstrap.path(),
            home: &path,
            tmp: &path,
            cwd: Some(&path),
            env: &[],
            run_dir: Some(Arc::clone(&dir)),
            guards: Vec::new(),
            pre_exec: None,
            reaper: Arc::clone(&self.reaper),
        })?;
        Ok((worker, RunSite::Host(dir)))
    }

    /// Whether nothing the launcher does between runs is pending: the pool
    /// is full, every killed process is reaped and every run directory
    /// removed (see `Runtime::wait_idle`).
    pub(crate) fn is_idle(&self) -> bool {
        self.pool.as_ref().is_none_or(Pool::is_full) && self.reaper.idle() && self.run_dirs.all_removed()
    }

    /// Retires the pool's zygotes and waits until they exit, then (bounded:
    /// a process stuck in the kernel must not hang it) until every killed
    /// process is reaped and every run directory removed. Runs must be
    /// settled first.
    pub(crate) async fn close(&self) {
        if let Some(pool) = &self.pool {
            pool.close().await;
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
