//! Sandboxed runs' processes: what every one sees of the host (decided once),
//! and each run's sandbox, prepared (a uid lease on a root host, a cgroup
//! when one is delegated) and entered by an exec'd interpreter or, as a
//! shell, joined by a zygote's child.
//!
//! A shell's network and IPC namespaces outlive its run: made outside the
//! run's user namespace (`Prepared::outer_network_namespace`), the run can
//! leave nothing in the first but sockets and nothing in the second but
//! SysV objects, so once every process of the run is gone, the next shell
//! joins them instead of making its own (removing what SysV objects are
//! left), and keeps them if the network namespace's list of sockets is
//! empty ([`NetNamespaces`]). Making and tearing a network namespace down
//! cost the kernel 1.3-1.7 ms of CPU per run (`BENCHMARKS.md`); an IPC
//! namespace with its limits, about 0.1 ms.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::RuntimeConfig;
use crate::error::RuntimeError;
use crate::interpreter::Interpreter;
use crate::launch::helper::ShellHelper;
use crate::launch::site::{self, CgroupGuard, RunSite, SandboxLayout};
use crate::launch::spawn::{Guard, PreExec, SpawnError, SpawnSpec, Worker};
use pycage_process::Reaper;
use pycage_sandbox::helper::wire::ShellNetwork;

/// A sandbox built by the host for one zygote child to join: its
/// supervisor (this host's child), what its init handed over, and the
/// program's own steps.
pub(crate) struct Shell {
    pub supervisor: Worker,
    pub handoff: Option<pycage_sandbox::Handoff>,
    pub join: pycage_sandbox::Join,
    pub plan: pycage_sandbox::JoinPlan,
}

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
    /// Network namespaces of ended runs, for the next shells.
    nets: Arc<NetNamespaces>,
    /// A shell built ahead of the child that will join it.
    spare: Spare,
    /// What the shells' policy fixes, kept between the shells this host
    /// forks itself (a helper keeps its own).
    preparations: std::sync::Mutex<pycage_sandbox::Preparations>,
}

/// A shell built ahead of the spawn that will need it at once
/// ([`Sandboxes::take_spare`]): a run's own fork when it found the pool
/// empty, or a cold refill's, which a run waits for. Such a spawn then
/// waits for the zygote's fork only, not for a shell before it; a refill
/// job builds the next spare once the zygote has its order
/// ([`Sandboxes::spare_order`]). A shell is the same for every pooled
/// child (no inputs, no packages), and the one child that joins it is its
/// only user: nothing of a run is in it.
#[derive(Default)]
struct Spare {
    shell: std::sync::Mutex<Option<Shell>>,
    /// Spares asked for and not built yet (`Runtime::wait_idle` waits).
    ordered: std::sync::atomic::AtomicUsize,
    /// The runtime is shutting down: no spare is kept any more.
    closed: std::sync::atomic::AtomicBool,
}

/// A spare shell asked for, built by [`SpareOrder::build`]; counted as
/// pending work until dropped.
pub(crate) struct SpareOrder(Arc<Sandboxes>);

impl SpareOrder {
    /// Builds a shell to keep, unless one is kept or the runtime is
    /// closing. Call it on the spawner thread. A shell that cannot be built
    /// is not kept: the next spawn builds its own, and reports why.
    pub(crate) fn build(self) {
        let spare = &self.0.spare;
        if spare.closed.load(Ordering::Relaxed) || crate::sync::lock(&spare.shell).is_some() {
            return;
        }
        let Ok(shell) = self.0.shell() else { return };
        let mut kept = crate::sync::lock(&spare.shell);
        // Closed while it was built: dropped here (its supervisor killed),
        // not kept past the shutdown.
        if !spare.closed.load(Ordering::Relaxed) && kept.is_none() {
            *kept = Some(shell);
        }
    }
}

impl Drop for SpareOrder {
    fn drop(&mut self) {
        self.0.spare.ordered.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Most network namespaces kept for later runs: more than shells are
/// built ahead of runs, and each holds a little kernel memory.
const MAX_SPARE_NETS: usize = 32;

/// Network namespaces (each with its IPC namespace) that shells made
/// outside their runs' user namespaces, given back as their runs end, for
/// later shells to join. Kept per runtime, whose shells all have one
/// policy: an IPC namespace's limits, written when it was made, are the
/// policy's for every run that joins it.
#[derive(Default)]
pub(crate) struct NetNamespaces {
    /// Oldest first.
    spare: std::sync::Mutex<std::collections::VecDeque<SpareNet>>,
    /// Joining one failed: every shell gets a new one.
    disabled: std::sync::atomic::AtomicBool,
}

/// An ended run's network and IPC namespaces.
struct SpareNet {
    net_ns: OwnedFd,
    ipc_ns: OwnedFd,
    /// A pidfd of the run's init. The kernel lets the init of a PID
    /// namespace finish exiting only once every other process of the
    /// namespace is reaped, so once this is readable no process of the run
    /// holds a descriptor.
    init: OwnedFd,
}

impl NetNamespaces {
    /// Namespaces whose run is over, if some are kept.
    fn take(&self) -> Option<pycage_sandbox::OuterNamespaces> {
        if self.disabled.load(Ordering::Relaxed) {
            return None;
        }
        let mut spare = crate::sync::lock(&self.spare);
        let at = spare.iter().position(|s| pycage_process::has_exited(&s.init))?;
        spare.remove(at).map(|s| pycage_sandbox::OuterNamespaces { net: s.net_ns, ipc: s.ipc_ns })
    }

    /// Keep `net`; when full, the oldest goes (one whose init never ends,
    /// an unreaped zombie's, must not hold its place forever).
    fn give(&self, net: SpareNet) {
        if self.disabled.load(Ordering::Relaxed) {
            return;
        }
        let mut spare = crate::sync::lock(&self.spare);
        if spare.len() >= MAX_SPARE_NETS {
            spare.pop_front();
        }
        spare.push_back(net);
    }

    fn disable(&self) {
        self.disabled.store(true, Ordering::Relaxed);
        crate::sync::lock(&self.spare).clear();
    }

    /// How many are kept (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        crate::sync::lock(&self.spare).len()
    }
}

/// Whether a shell failed at joining the namespaces it was given (built
/// here or by the shell helper, which reports those steps apart).
fn joining_network_failed(e: &SpawnError) -> bool {
    matches!(
        e,
        SpawnError::Sandbox(pycage_sandbox::SandboxError::Child(pycage_sandbox::ChildFailure { step, .. }))
            if step.joins_an_earlier_run()
    )
}

/// Kept by a shell's supervisor: gives the run's network namespace back
/// when the supervisor is gone.
struct NetLease {
    nets: Arc<NetNamespaces>,
    net: Option<SpareNet>,
}

impl Drop for NetLease {
    fn drop(&mut self) {
        if let Some(net) = self.net.take() {
            self.nets.give(net);
        }
    }
}

impl Sandboxes {
    /// Checks every layer, decides what a sandboxed run sees of the host,
    /// and finds a delegated cgroup v2 subtree if there is one.
    pub(crate) fn new(
        config: Arc<RuntimeConfig>,
        interp: &Interpreter,
        bootstrap: &Path,
        packages: Option<&Path>,
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
            nets: Arc::default(),
            spare: Spare::default(),
            preparations: std::sync::Mutex::default(),
        })
    }

    /// The environment of a sandboxed zygote child, as the sandbox shows paths.
    pub(crate) fn shell_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("HOME".to_owned(), site::SANDBOX_HOME.to_owned()),
            ("TMPDIR".to_owned(), pycage_sandbox::TMP_DIR.to_owned()),
            ("PATH".to_owned(), pycage_process::run_path(&self.layout.python)),
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

    /// The command line of a process that runs `module` from the bootstrap,
    /// as the sandbox shows its paths: what a zygote's children show as
    /// theirs (`/proc/self/cmdline`, `sys.orig_argv`), not the host's.
    pub(crate) fn inside_argv(&self, module: &str) -> Vec<String> {
        let loader = pycage_process::loader(Path::new(site::BOOTSTRAP_DIR), module);
        let python = self.layout.python.to_string_lossy().into_owned();
        vec![python, "-I".into(), "-S".into(), "-B".into(), "-c".into(), loader]
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
    /// `Prepared::into_shell`), in the network namespace an ended run left
    /// when there is one ([`NetNamespaces`]). Call it on the spawner thread.
    pub(crate) fn shell(&self) -> Result<Shell, SpawnError> {
        if !self.recycles_networks() {
            return self.build_shell(ShellNetwork::Inside);
        }
        if let Some(earlier) = self.nets.take() {
            match self.build_shell(ShellNetwork::Join { net: earlier.net.as_fd(), ipc: earlier.ipc.as_fd() }) {
                Ok(shell) if socket_free(&shell) => return Ok(self.lease_network(shell)),
                // A socket outlived its run (in flight in a message, or
                // waiting in a listener outside the namespace): this
                // namespace serves no other run. Dropping the shell kills it.
                Ok(_) => {}
                Err(e) if joining_network_failed(&e) => {
                    // Each shell would be built twice: stop trying.
                    self.nets.disable();
                    tracing::warn!(
                        "joining an ended run's network and IPC namespaces failed ({e}); each sandboxed run gets new ones"
                    );
                }
                // Something else failed (a fork refused under load, say, or
                // a segment of the ended run still attached: `IpcInUse`):
                // these namespaces are dropped, and a shell with new ones is
                // tried; later shells still join the ones kept.
                Err(_) => {}
            }
        }
        let shell = self.build_shell(ShellNetwork::Outside)?;
        // A new namespace lists nothing; where its list cannot be read, no
        // later shell could check it either, and would be built twice.
        Ok(if socket_free(&shell) { self.lease_network(shell) } else { shell })
    }

    /// The spare shell, if one is kept and alive (see [`Spare`]); any
    /// thread may take it.
    pub(crate) fn take_spare(&self) -> Option<Shell> {
        let kept = crate::sync::lock(&self.spare.shell).take();
        // A shell dies with the helper that built it: a dead one is dropped.
        kept.filter(|shell| !shell.supervisor.has_exited())
    }

    /// Asks for a spare shell, to be built on the spawner thread once the
    /// spawn at hand is on its way (see [`Spare`]). Counted as pending
    /// until built or dropped: [`Sandboxes::spare_pending`].
    pub(crate) fn spare_order(self: &Arc<Self>) -> SpareOrder {
        self.spare.ordered.fetch_add(1, Ordering::Relaxed);
        SpareOrder(Arc::clone(self))
    }

    /// Whether a spare shell is asked for and not built yet.
    pub(crate) fn spare_pending(&self) -> bool {
        self.spare.ordered.load(Ordering::Relaxed) > 0
    }

    /// No spare shell is kept from now on; the one kept is dropped (its
    /// supervisor killed, its init and namespaces with it).
    pub(crate) fn close_spare(&self) {
        self.spare.closed.store(true, Ordering::Relaxed);
        drop(crate::sync::lock(&self.spare.shell).take());
    }

    /// Whether shells make their network namespaces outside their runs'
    /// user namespaces, to give them to later runs: for runs without
    /// egress (whose supervisor configures the namespace), on a root host
    /// or in the zygotes' user namespace.
    fn recycles_networks(&self) -> bool {
        self.layout.egress_port.is_none() && (rustix::process::geteuid().is_root() || self.zygote_userns.is_some())
    }

    /// `shell`, whose network namespace holds no socket, keeping that
    /// namespace for a later run once its supervisor is gone. Unchanged
    /// if there is no sure way to know when the run is over.
    fn lease_network(&self, mut shell: Shell) -> Shell {
        let Some(handoff) = shell.handoff.as_ref() else { return shell };
        let Ok(init) = rustix::process::pidfd_open(handoff.init_pid, rustix::process::PidfdFlags::empty()) else {
            return shell;
        };
        // The pidfd names the run's init only if that pid, now that the
        // pidfd holds it, is PID 1 of a namespace one level down (a helper
        // in another PID namespace would report a pid that means nothing
        // here). `status` says so to any user; `ns/net` needs ptrace
        // rights over the init, which a host that is not root lacks.
        if !is_child_namespace_init(handoff.init_pid) {
            return shell;
        }
        let (Ok(net_ns), Ok(ipc_ns)) = (shell.join.net_ns.try_clone(), shell.join.ipc_ns.try_clone()) else {
            return shell;
        };
        let net = SpareNet { net_ns, ipc_ns, init };
        shell.supervisor.keep(Box::new(NetLease { nets: Arc::clone(&self.nets), net: Some(net) }));
        shell
    }

    fn build_shell(&self, network: ShellNetwork<'_>) -> Result<Shell, SpawnError> {
        if let Some(helper) = self.helper.as_ref().filter(|h| h.in_use()) {
            match self.shell_from(helper, network) {
                // Given up (it never built a shell): the host forks them.
                Err(SpawnError::ShellHelper(_)) if !helper.in_use() => {}
                other => return other,
            }
        }
        let (mut prepared, guards) = self.prepare(&[], None)?;
        if let Some(userns) = &self.zygote_userns {
            prepared.join_zygote_user_namespace(userns.try_clone().map_err(SpawnError::Channel)?);
        }
        let reuse = match network {
            ShellNetwork::Inside => None,
            ShellNetwork::Outside => Some(None),
            ShellNetwork::Join { net, ipc } => Some(Some(pycage_sandbox::OuterNamespaces {
                net: net.try_clone_to_owned().map_err(SpawnError::Channel)?,
                ipc: ipc.try_clone_to_owned().map_err(SpawnError::Channel)?,
            })),
        };
        if let Some(reuse) = reuse {
            if !prepared.outer_network_namespace(reuse) {
                let why = "this run's network namespace cannot be made outside its user namespace";
                return Err(SpawnError::Sandbox(pycage_sandbox::SandboxError::Spawn(std::io::Error::other(why))));
            }
        }
        let prepared = Arc::new(prepared.into_shell());
        // Nothing is exec'd: the supervisor and init never return from the
        // hook, and `spawn` returns once both have closed every descriptor,
        // after their handoffs.
        let supervisor = self.spawn_prepared(&prepared, guards, None)?;
        let (handoff, join) = prepared.take_shell()?;
        // The helper reaps the inits of its shells (their subreaper), and a
        // shell killed whole ends sooner: the one after it, which a run may
        // be waiting for, starts sooner. One this process forked ends
        // through its init, or its init would go to this process's reaper.
        Ok(end_through_init(Shell { supervisor, handoff, join, plan: prepared.join_plan() }))
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
    fn shell_from(&self, helper: &ShellHelper, network: ShellNetwork<'_>) -> Result<Shell, SpawnError> {
        let (policy, mut guards) = self.policy(&[], None)?;
        let procs = match &self.cgroup {
            Some(parent) => {
                let (guard, procs) = self.run_cgroup(parent)?;
                guards.push(Box::new(guard));
                Some(procs)
            }
            None => None,
        };
        let remote = helper.shell(&policy, procs, self.zygote_userns.as_deref().map(AsFd::as_fd), network)?;
        let supervisor = Worker::from_helper(remote.pid, remote.pidfd, guards)?;
        Ok(Shell { supervisor, handoff: remote.handoff, join: remote.join, plan: remote.plan })
    }

    /// A new interpreter in its own sandbox, with `inputs` in its working
    /// directory.
    pub(crate) fn spawn(
        &self,
        inputs: &[site::Input],
        packages: Option<&Path>,
        hash_seed: Option<u32>,
    ) -> Result<(Worker, RunSite), SpawnError> {
        let (prepared, guards) = self.prepare(inputs, packages)?;
        let prepared = Arc::new(prepared);
        let worker = self.spawn_prepared(&prepared, guards, hash_seed)?;
        Ok((worker, RunSite::sandboxed(&prepared)))
    }

    /// The sandbox policy of one run (leasing its uid on a root host, with
    /// `inputs` shown in its working directory), prepared, and what the
    /// run's process must keep until it is reaped.
    fn prepare(
        &self,
        inputs: &[site::Input],
        packages: Option<&Path>,
    ) -> Result<(pycage_sandbox::Prepared, Vec<Guard>), SpawnError> {
        let (policy, mut guards) = self.policy(inputs, packages)?;
        // A shell's policy is every shell's (no inputs, no packages): kept.
        // A run's own inputs and packages make its policy its own.
        let mut prepared = if inputs.is_empty() && packages.is_none() {
            crate::sync::lock(&self.preparations).prepare(&policy)?
        } else {
            pycage_sandbox::Prepared::new(&policy)?
        };
        if let Some(parent) = &self.cgroup {
            let (guard, procs) = self.run_cgroup(parent)?;
            guards.push(Box::new(guard));
            prepared.join_cgroup(procs);
        }
        Ok((prepared, guards))
    }

    /// The sandbox policy of one run (leasing its uid on a root host, with
    /// `inputs` shown in its working directory), and the lease to keep.
    fn policy(
        &self,
        inputs: &[site::Input],
        packages: Option<&Path>,
    ) -> Result<(pycage_sandbox::SandboxPolicy, Vec<Guard>), SpawnError> {
        let config = &self.config;
        let mut guards: Vec<Guard> = Vec::new();
        let host_ids = if rustix::process::geteuid().is_root() {
            let dir =
                config.uid_lease_dir.clone().unwrap_or_else(|| PathBuf::from(pycage_sandbox::lease::DEFAULT_LEASE_DIR));
            let lease = pycage_sandbox::lease::lease_uid(&dir, config.sandbox_uid_base, config.sandbox_uid_count)?;
            let ids = pycage_sandbox::HostIds { uid: lease.uid(), gid: lease.uid() };
            guards.push(Box::new(lease));
            Some(ids)
        } else {
            None
        };
        let mut remapped = self.layout.remapped.clone();
        if let Some(entry) = packages {
            // The run's own packages replace the caller's at the same place.
            let inside = Path::new(pycage_packages::PACKAGES_DIR);
            remapped.retain(|r| r.inside != inside);
            remapped.push(pycage_sandbox::Remap { host: entry.to_path_buf(), inside: inside.to_path_buf() });
        }
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
        hash_seed: Option<u32>,
    ) -> Result<Worker, SpawnError> {
        let hook: Arc<dyn PreExec> = Arc::new(SandboxHook(Arc::clone(prepared)));
        Worker::spawn(SpawnSpec {
            python: &self.layout.python,
            bootstrap_dir: &self.layout.bootstrap,
            preload: &self.config.preload,
            home: Path::new(site::SANDBOX_HOME),
            tmp: Path::new(pycage_sandbox::TMP_DIR),
            cwd: None,
            env: &self.layout.env,
            run_dir: None,
            guards,
            pre_exec: Some(hook),
            reaper: Arc::clone(&self.reaper),
            hash_seed,
        })
    }
}

/// Whether the network namespace of `shell` holds no socket, by the list
/// of its `AF_UNIX` sockets in `/proc/<init>/net/unix` (the run may make no
/// other kind). The kernel lists there every socket of the namespace, also
/// those a `sock_diag` dump skips: one the run connected to a listener
/// outside the namespace, waiting there to be accepted.
fn socket_free(shell: &Shell) -> bool {
    let Some(handoff) = shell.handoff.as_ref() else { return false };
    let path = format!("/proc/{}/net/unix", handoff.init_pid.as_raw_nonzero());
    let Ok(file) = std::fs::File::open(path) else { return false };
    // The header line alone: one line feed, at the end (bounded read).
    let mut listing = Vec::with_capacity(256);
    if std::io::Read::read_to_end(&mut std::io::Read::take(file, 1024), &mut listing).is_err() {
        return false;
    }
    listing.iter().filter(|&&b| b == b'\n').count() == 1 && listing.ends_with(b"\n")
}

/// `shell`, set to end through its init ([`Worker::end_through_init`]):
/// with a pidfd of the init its handoff names, if that pid, now that the
/// pidfd holds it, is PID 1 of a namespace one level down and the
/// supervisor's child (the supervisor reaps its init, and forks nothing
/// else, so that pid names the init until the supervisor exits).
/// Unchanged if either cannot be told.
fn end_through_init(mut shell: Shell) -> Shell {
    let Some(handoff) = shell.handoff.as_ref() else { return shell };
    let Ok(init) = rustix::process::pidfd_open(handoff.init_pid, rustix::process::PidfdFlags::empty()) else {
        return shell;
    };
    if let (Some(parent), Some(supervisor)) = (child_namespace_init(handoff.init_pid), shell.supervisor.pid()) {
        if parent == supervisor {
            shell.supervisor.end_through_init(init);
        }
    }
    shell
}

/// Whether `pid` is PID 1 of a PID namespace one level below this
/// process's (its `NSpid` line: its pid here, then 1).
fn is_child_namespace_init(pid: rustix::process::Pid) -> bool {
    child_namespace_init(pid).is_some()
}

/// If `pid` is PID 1 of a PID namespace one level below this process's,
/// its parent (`PPid`); one read of `/proc/<pid>/status`.
fn child_namespace_init(pid: rustix::process::Pid) -> Option<rustix::process::Pid> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.as_raw_nonzero())).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let pids: Vec<&str> = field("NSpid:")?.split_whitespace().collect();
    if !(pids.len() == 2 && pids[0] == pid.as_raw_nonzero().to_string() && pids[1] == "1") {
        return None;
    }
    rustix::process::Pid::from_raw(field("PPid:")?.trim().parse().ok()?)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spare(init: OwnedFd) -> SpareNet {
        let ns = |kind| std::fs::File::open(format!("/proc/self/ns/{kind}")).unwrap().into();
        SpareNet { net_ns: ns("net"), ipc_ns: ns("ipc"), init }
    }

    /// A namespace is handed out only once its run's init has exited.
    #[test]
    fn a_spare_network_waits_for_its_runs_init() {
        let nets = NetNamespaces::default();
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        let init = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
        nets.give(spare(init));
        assert!(nets.take().is_none(), "its init still runs");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(nets.take().is_some());
        assert_eq!(nets.len(), 0);
    }

    #[test]
    fn spare_networks_are_bounded_and_the_oldest_goes() {
        let nets = NetNamespaces::default();
        let me = || rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty());
        // First, one whose init has exited; then more than fit, whose init
        // (this process) has not.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        let exited = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
        child.wait().unwrap();
        nets.give(spare(exited));
        for _ in 0..MAX_SPARE_NETS {
            nets.give(spare(me().unwrap()));
        }
        assert_eq!(nets.len(), MAX_SPARE_NETS);
        // The exited one was the oldest, and went.
        assert!(nets.take().is_none());
    }

    #[test]
    fn only_a_failed_network_join_turns_recycling_off() {
        use pycage_sandbox::{ChildFailure, SandboxError, Step};
        let failed = |step| SpawnError::Sandbox(SandboxError::Child(ChildFailure { step, path: None, errno: 1 }));
        assert!(joining_network_failed(&failed(Step::JoinNetwork)));
        assert!(joining_network_failed(&failed(Step::JoinIpc)));
        assert!(joining_network_failed(&failed(Step::CleanIpc)));
        // One namespace not clean yet: that one is dropped, no more.
        assert!(!joining_network_failed(&failed(Step::IpcInUse)));
        assert!(!joining_network_failed(&failed(Step::UnshareNetwork)));
        assert!(!joining_network_failed(&failed(Step::UnshareUser)));
        assert!(!joining_network_failed(&SpawnError::Channel(std::io::Error::other("no fork"))));
    }

    #[test]
    fn a_disabled_pool_keeps_nothing() {
        let nets = NetNamespaces::default();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        let init = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
        child.wait().unwrap();
        nets.give(spare(init));
        nets.disable();
        assert_eq!(nets.len(), 0);
        assert!(nets.take().is_none());
    }
}
