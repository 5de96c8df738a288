//! The [`Runtime`]: construction and the public API (runs, sessions,
//! shutdown). What a run does is `crate::lifecycle`'s; how its process is
//! made is `crate::launch`'s.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::{RuntimeConfig, SpawnMode};
pub use crate::error::{MisuseError, RuntimeError};
use crate::interpreter::Interpreter;
use crate::launch::site;
pub use crate::launch::site::SandboxView;
use crate::lifecycle::{Core, Keep, Plan};
use crate::names;
use crate::outcome::{RunEvent, RunResult};
pub use crate::request::{RunLimits, RunRequest};
use crate::session::{Session, SessionOptions};
use pycage_files::cleanup::CleanupFailure;

/// Runs programs; cheap to clone (clones share children and shutdown).
#[derive(Clone)]
pub struct Runtime {
    core: Arc<Core>,
}

impl Runtime {
    /// Validates the configuration, probes the interpreter and installs the
    /// bootstrap. Fails here, not at the first run, when something is wrong.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let builder = crate::build::SandboxBuilder::for_runtime(&config);
        Ok(Runtime { core: Arc::new(Core::new(config, builder)?) })
    }

    /// The configuration in force.
    pub fn config(&self) -> &RuntimeConfig {
        &self.core.config
    }

    /// The probed interpreter.
    pub fn interpreter(&self) -> &Interpreter {
        self.core.launcher.interpreter()
    }

    /// The ty binary type checks run with (`RuntimeConfig::ty`, else beside
    /// the interpreter, else on `PATH`), if one was found.
    pub fn type_checker(&self) -> Option<&std::path::Path> {
        self.core.checks.ty()
    }

    /// What a sandboxed run sees of the host (`None` in process isolation).
    pub fn sandbox_view(&self) -> Option<SandboxView> {
        self.core.launcher.sandbox_view()
    }

    /// The host directory of the child's bootstrap package (what the zygote
    /// imports before it forks).
    pub fn bootstrap_dir(&self) -> &std::path::Path {
        self.core.launcher.bootstrap_dir()
    }

    /// The host directory of the package cache (`pycage_packages`).
    pub fn package_cache(&self) -> &std::path::Path {
        self.core.launcher.package_root()
    }

    /// How runs are spawned in fact: the configured mode, or `Exec` with
    /// the reason when the zygote cannot be used.
    pub fn spawn_mode(&self) -> (SpawnMode, Option<&str>) {
        self.core.launcher.spawn_mode()
    }

    /// Directories pycage created and could not remove since the last
    /// call (each was also logged with `tracing::warn!`). A run's files are
    /// removed when it settles; a failure never fails the run, so it is
    /// reported here.
    pub fn cleanup_failures(&self) -> Vec<CleanupFailure> {
        self.core.launcher.cleanup().drain()
    }

    /// The pid of the zygote serving runs now, if there is one.
    pub fn zygote_pid(&self) -> Option<u32> {
        self.core.launcher.zygote_pid().and_then(|p| u32::try_from(p).ok())
    }

    /// The shell helper's pid, while one runs (`RuntimeConfig::shell_helper`;
    /// started with the first sandbox shell): for benchmarks that count its
    /// CPU, and its shells', as the runs' cost.
    pub fn shell_helper_pid(&self) -> Option<u32> {
        self.core.launcher.shell_helper_pid().and_then(|p| u32::try_from(p).ok())
    }

    /// Runs one program. `Err` only for misuse; every program outcome is `Ok`.
    pub async fn run(&self, request: RunRequest) -> Result<RunResult, MisuseError> {
        self.run_inner(request, None).await
    }

    /// Like [`Runtime::run`], streaming [`RunEvent`]s while the run is in
    /// flight. The channel is bounded ([`Runtime::event_channel`] makes
    /// one of the configured size): a consumer that falls behind slows the
    /// run down, within its wall clock, and loses no event.
    pub async fn run_with_events(
        &self,
        request: RunRequest,
        events: mpsc::Sender<RunEvent>,
    ) -> Result<RunResult, MisuseError> {
        self.run_inner(request, Some(events)).await
    }

    /// A channel for [`Runtime::run_with_events`] and
    /// [`Session::run_with`] holding `max_buffered_events` events.
    pub fn event_channel(&self) -> (mpsc::Sender<RunEvent>, mpsc::Receiver<RunEvent>) {
        mpsc::channel(self.core.config.max_buffered_events)
    }

    /// Opens a session: one process that keeps its globals across runs.
    /// `Err` for misuse (bindings that break the name rules, a shut-down
    /// runtime). Its process is started at its first run.
    pub fn session(&self, options: SessionOptions) -> Result<Session, MisuseError> {
        Session::open(Arc::clone(&self.core), options)
    }

    /// Resumes a session whose cell suspended (`docs/durable.md`,
    /// "Sessions"): a new session with `options` (the bindings must be
    /// those the session had) replays the journal's earlier cells, then
    /// the suspended cell, whose pending call gets `answer`. Returns the
    /// new session, which goes on as any (and records, so it may suspend
    /// again), and the suspended cell's result. A journal that does not
    /// open, a one-shot run's journal or other bindings are refused before
    /// anything runs (`MisuseError::Journal` in [`crate::SessionError::Misuse`]).
    pub async fn resume_session(
        &self,
        journal: &[u8],
        answer: crate::request::Answer,
        options: SessionOptions,
    ) -> Result<(Session, RunResult), crate::session::SessionError> {
        Session::resume(Arc::clone(&self.core), journal, answer, options).await
    }

    async fn run_inner(
        &self,
        request: RunRequest,
        events: Option<mpsc::Sender<RunEvent>>,
    ) -> Result<RunResult, MisuseError> {
        names::check_bindings(&request.bindings)?;
        let inputs = site::resolve_inputs(&request.inputs).map_err(MisuseError::Input)?;
        let (mut program, mut limits) = (request.program, request.limits);
        let resuming = request.resume.is_some();
        let durable =
            crate::durable::prepare(&self.core.config, &mut program, &request.bindings, &mut limits, request.resume)?;
        let config = limits.apply(&self.core.config)?;
        // A resumed program is the journal's, checked (or not) when it
        // first ran; checking it again would only cost the resume.
        let asked = if resuming { Some(false) } else { request.type_check };
        let type_check = self.core.checks.wanted(asked, &config)?;
        if self.core.is_shut_down() {
            return Err(MisuseError::ShutDown);
        }
        let plan = Plan {
            program,
            bindings: request.bindings,
            cancel: request.cancel.unwrap_or_default(),
            stop: self.core.shutdown_token(),
            events,
            inputs,
            output_dir: request.output_dir,
            transcript: request.transcript,
            config,
            type_check,
            history: None,
            durable,
        };
        Ok(crate::lifecycle::run(&self.core, plan, Keep::OneShot).await.result)
    }

    /// Waits until the runtime is idle: no run in flight (sessions' runs
    /// included), every settled run's process stopped and reaped and its
    /// directory removed, and the zygote's pool full of ready children.
    /// For tests and benchmarks that must start from a known state instead
    /// of sleeping. `false` when that did not happen within `timeout` (a
    /// zygote that cannot start, a run that does not end).
    pub async fn wait_idle(&self, timeout: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.core.is_idle() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            // Polled: the conditions live in several places (pool, reaper
            // thread, blocking pool), and a millisecond is below any
            // figure this is used to measure.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// Settles every in-flight run as `abort` and returns once each child
    /// has exited and been reaped. Later runs fail with [`MisuseError::ShutDown`].
    pub async fn shutdown(&self) {
        self.core.shutdown().await;
    }
}
