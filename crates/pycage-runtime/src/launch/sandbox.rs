//! Sandboxed runs' processes: what every one sees of the host (decided once),
//! and each run's sandbox, prepared (a uid lease on a root host, a cgroup
//! when one is delegated) and entered by an exec'd interpreter or, as a
//! shell, joined by a zygote's child.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::RuntimeConfig;
use crate::error::RuntimeError;
use crate::interpreter::Interpreter;
use crate::launch::helper::ShellHelper;
use crate::launch::pool::Shell;
use crate::launch::site::{self, CgroupGuard, RunSite, SandboxLayout};
use crate::launch::spawn::{Guard, PreExec, SpawnError, SpawnSpec, Worker};
use crate::process::Reaper;

/// The sandbox half of a launcher (see the module docs).
pub(crate) struct Sandboxes {
    config: Arc<RuntimeConfig>,
    /// What every sandboxed run sees of the host.
    layout: SandboxLayout,
    /// A cgroup v2 subtree delegated to pycage, if any: each sandboxed run
    /// gets a child of it with its budgets.
    cgroup: Option<pycage_sandbox::cgroup::Cgroup>,
    /// Names run cgroups.
    next_cgroup: AtomicU64,
    /// The runtime's owner id (run cgroups are named after it).
    owner: String,
    reaper: Arc<Reaper>,
    /// Builds the shells when the configuration names a helper.
    helper: Option<ShellHelper>,
    /// On a host that is not root, for the zygote path: the user namespace
    /// the zygotes live in and every shell's user namespace is a child of
    /// (`pycage_sandbox::zygote_user_namespace`), so that a zygote forks its
    /// children straight into their run's PID namespace.
    zygote_userns: Option<Arc<OwnedFd>>,
}

impl Sandboxes {
    /// Checks every layer, decides what a sandboxed run sees of the host,
    /// and finds a delegated cgroup v2 subtree if there is one.
    pub(crate) fn new(
        config: Arc<RuntimeConfig>,
        interp: &Interpreter,
        bootstrap: &Path,
        packages: &Path,
        owner: String,
        reaper: Arc<Reaper>,
        for_zygote: bool,
    ) -> Result<Sandboxes, RuntimeError> {
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
        let layout = SandboxLayout::new(&config, interp, bootstrap, packages)?;
        let helper = config.shell_helper.clone().map(|argv| ShellHelper::new(argv, Arc::clone(&reaper)));
        let zygote_userns = if for_zygote && !rustix::process::geteuid().is_root() {
            let userns = pycage_sandbox::zygote_user_namespace().map_err(|e| RuntimeError::SandboxUnavailable {
                layers: "user namespace".to_owned(),
                reasons: e.to_string(),
            })?;
            Some(Arc::new(userns))
        } else {
            None
        };
        Ok(Sandboxes {
            config,
            layout,
            cgroup: avail.cgroup,
            next_cgroup: AtomicU64::new(0),
            owner,
            reaper,
            helper,
            zygote_userns,
        })
    }

    /// The environment of a sandboxed zygote child, as the sandbox shows paths.
    pub(crate) fn shell_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("HOME".to_owned(), pycage_sandbox::WORK_DIR.to_owned()),
            ("TMPDIR".to_owned(), pycage_sandbox::TMP_DIR.to_owned()),
            ("PATH".to_owned(), crate::process::run_path(&self.layout.python)),
        ];
        env.extend(
            self.layout.env.iter().map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned())),
        );
        env
    }

    /// The user namespace zygotes are started in, if they need their own.
    pub(crate) fn zygote_userns(&self) -> Option<Arc<OwnedFd>> {
        self.zygote_userns.clone()
    }

    /// What every sandboxed run sees of the host.
    pub(crate) fn view(&self) -> site::SandboxView {
        self.layout.view()
    }

    /// Host path prefixes and where the sandbox shows them.
    pub(crate) fn remaps(&self) -> Vec<(String, String)> {
        self.layout
            .remapped
            .iter()
            .map(|r| (r.host.to_string_lossy().into_owned(), r.inside.to_string_lossy().into_owned()))
            .collect()
    }

    /// A sandbox shell for a zygote's child to join: the run built exactly
    /// as for an exec'd run, its init stopped before the program (see
    /// `Prepared::into_shell`). Call it on the spawner thread.
    pub(crate) fn shell(&self) -> Result<Shell, SpawnError> {
        if let Some(helper) = self.helper.as_ref().filter(|h| h.in_use()) {
            match self.shell_from(helper) {
                // Given up (it never built a shell): the host forks them.
                Err(SpawnError::ShellHelper(_)) if !helper.in_use() => {}
                other => return other,
            }
        }
        let (mut prepared, guards) = self.prepare(&[])?;
        if let Some(userns) = &self.zygote_userns {
            prepared.join_zygote_user_namespace(userns.try_clone().map_err(SpawnError::Channel)?);
        }
        let prepared = Arc::new(prepared.into_shell());
        // Nothing is exec'd: the supervisor and init never return from the
        // hook, and `spawn` returns once both have closed every descriptor,
        // after their handoffs.
        let supervisor = self.spawn_prepared(&prepared, guards)?;
        let (handoff, join) = prepared.take_shell()?;
        Ok(Shell { supervisor, handoff, join, plan: prepared.join_plan() })
    }

    /// The shell helper's pid, while one runs.
    pub(crate) fn shell_helper_pid(&self) -> Option<i32> {
        self.helper.as_ref().and_then(ShellHelper::pid)
    }

    /// Ends the shell helper, if one runs (see `ShellHelper::close`).
    pub(crate) fn close_helper(&self) {
        if let Some(helper) = &self.helper {
            helper.close();
        }
    }

    /// A shell the helper builds; the host keeps the run's lease and
    /// cgroup with the supervisor.
    fn shell_from(&self, helper: &ShellHelper) -> Result<Shell, SpawnError> {
        let (policy, mut guards) = self.policy(&[])?;
        let plan = crate::launch::helper::join_plan(&policy)?;
        let procs = match &self.cgroup {
            Some(parent) => {
                let (guard, procs) = self.run_cgroup(parent)?;
                guards.push(Box::new(guard));
                Some(procs)
            }
            None => None,
        };
        let remote = helper.shell(&policy, procs, self.zygote_userns.as_deref().map(AsFd::as_fd))?;
        let supervisor = Worker::from_helper(remote.pid, remote.pidfd, guards)?;
        Ok(Shell { supervisor, handoff: remote.handoff, join: remote.join, plan })
    }

    /// A new interpreter in its own sandbox, with `inputs` in its working
    /// directory.
    pub(crate) fn spawn(&self, inputs: &[site::Input]) -> Result<(Worker, RunSite), SpawnError> {
        let (prepared, guards) = self.prepare(inputs)?;
        let prepared = Arc::new(prepared);
        let worker = self.spawn_prepared(&prepared, guards)?;
        Ok((worker, RunSite::sandboxed(&prepared)))
    }

    /// The sandbox policy of one run (leasing its uid on a root host, with
    /// `inputs` shown in its working directory), prepared, and what the
    /// run's process must keep until it is reaped.
    fn prepare(&self, inputs: &[site::Input]) -> Result<(pycage_sandbox::Prepared, Vec<Guard>), SpawnError> {
        let (policy, mut guards) = self.policy(inputs)?;
        let mut prepared = pycage_sandbox::Prepared::new(&policy)?;
        if let Some(parent) = &self.cgroup {
            let (guard, procs) = self.run_cgroup(parent)?;
            guards.push(Box::new(guard));
            prepared.join_cgroup(procs);
        }
        Ok((prepared, guards))
    }

    /// The sandbox policy of one run (leasing its uid on a root host, with
    /// `inputs` shown in its working directory), and the lease to keep.
    fn policy(&self, inputs: &[site::Input]) -> Result<(pycage_sandbox::SandboxPolicy, Vec<Guard>), SpawnError> {
        let config = &self.config;
        let mut guards: Vec<Guard> = Vec::new();
        let host_ids = if rustix::process::geteuid().is_root() {
            let dir = config.uid_lease_dir.clone().unwrap_or_else(|| PathBuf::from(crate::lease::DEFAULT_LEASE_DIR));
            let lease = crate::lease::lease_uid(&dir, config.sandbox_uid_base, config.sandbox_uid_count)?;
            let ids = pycage_sandbox::HostIds { uid: lease.uid(), gid: lease.uid() };
            guards.push(Box::new(lease));
            Some(ids)
        } else {
            None
        };
        let mut remapped = self.layout.remapped.clone();
        remapped.extend(RunSite::input_remaps(inputs));
        let policy = pycage_sandbox::SandboxPolicy {
            read_only: self.layout.read_only.clone(),
            remapped,
            devices: pycage_sandbox::default_devices(),
            host_ids,
            max_processes: config.max_processes,
            max_file_bytes: config.max_file_bytes,
            max_open_files: config.max_open_files,
            disk_bytes: config.disk_bytes,
            sysv_shm_bytes: config.sysv_shm_bytes,
            egress_port: self.layout.egress_port,
        };
        Ok((policy, guards))
    }

    /// Creates the run's cgroup under the delegated `parent`, with the run's
    /// budgets as kernel limits, and opens its `cgroup.procs`, which the
    /// sandbox's supervisor joins first thing.
    fn run_cgroup(&self, parent: &pycage_sandbox::cgroup::Cgroup) -> Result<(CgroupGuard, OwnedFd), SpawnError> {
        use pycage_sandbox::cgroup::{CgroupLimits, RealCgroupFs, RunCgroup};
        let config = &self.config;
        let n = self.next_cgroup.fetch_add(1, Ordering::Relaxed);
        let name = format!("pycage-{}-{n}", self.owner);
        let limits = CgroupLimits {
            // The tmpfs's pages are charged to the run's cgroup too.
            memory_bytes: config.address_space_bytes.saturating_add(config.disk_bytes),
            max_processes: config.max_processes.saturating_add(2),
            cpu_max: None,
        };
        let run = RunCgroup::create(&RealCgroupFs, parent, &name, &limits).map_err(SpawnError::Cgroup)?;
        let guard = CgroupGuard(run);
        let procs = std::fs::OpenOptions::new().write(true).open(guard.0.procs_file()).map_err(SpawnError::Cgroup)?;
        Ok((guard, procs.into()))
    }

    /// Forks a sandboxed run (or a shell): the interpreter as the sandbox
    /// shows it, entered through `prepared`'s hook.
    fn spawn_prepared(
        &self,
        prepared: &Arc<pycage_sandbox::Prepared>,
        guards: Vec<Guard>,
    ) -> Result<Worker, SpawnError> {
        let hook: Arc<dyn PreExec> = Arc::new(SandboxHook(Arc::clone(prepared)));
        Worker::spawn(SpawnSpec {
            python: &self.layout.python,
            bootstrap_dir: &self.layout.bootstrap,
            preload: &self.config.preload,
            home: Path::new(pycage_sandbox::WORK_DIR),
            tmp: Path::new(pycage_sandbox::TMP_DIR),
            cwd: None,
            env: &self.layout.env,
            run_dir: None,
            guards,
            pre_exec: Some(hook),
            reaper: Arc::clone(&self.reaper),
        })
    }
}

/// The sandbox hook: enters every layer between fork and exec.
pub(crate) struct SandboxHook(pub(crate) Arc<pycage_sandbox::Prepared>);

impl PreExec for SandboxHook {
    unsafe fn pre_exec(&self) -> std::io::Result<()> {
        // SAFETY: called between fork and exec, which is what `enter` requires.
        unsafe { self.0.enter() }
    }

    fn explain(&self, e: std::io::Error) -> SpawnError {
        SpawnError::Sandbox(self.0.explain_spawn_error(e))
    }
}
