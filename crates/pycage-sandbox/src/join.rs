//! What a process forked elsewhere needs to join a sandbox built for it:
//! what the supervisor and init hand the host ([`Handoff`], [`Join`]), and
//! what the program does to itself on the way in ([`JoinPlan`]).

use std::os::fd::OwnedFd;

use rustix::process::{Pid, Resource};

pub use pycage_protocol::zygote::ConfineStep;

use crate::error::SandboxError;
use crate::limits::{RUN_MEMLOCK_BYTES, RUN_MSGQUEUE_BYTES, RUN_SIGPENDING, SANDBOX_PROCESSES};
use crate::plan::{SandboxPolicy, INSIDE_GID, INSIDE_UID};
use crate::seccomp::{self, Filters};

/// What the supervisor hands the host once the sandbox is built.
#[derive(Debug)]
pub struct Handoff {
    /// The host pid of the run's init process (PID 1 of its PID namespace):
    /// every process of the run is a descendant of it.
    pub init_pid: Pid,
    /// An `O_PATH` descriptor of the run's working directory (`/work`
    /// inside). It keeps the run's tmpfs alive after the run ends, until it
    /// is closed: the host reads the run's output through it.
    pub work_dir: OwnedFd,
    /// With egress ([`SandboxPolicy::egress_port`]): a TCP socket listening
    /// on `127.0.0.1:<port>` inside the run's network namespace. What the
    /// host accepts on it are the program's connections to that address.
    pub egress: Option<OwnedFd>,
    /// A `NETLINK_SOCK_DIAG` socket made inside the run's network
    /// namespace: a dump through it lists every socket of the run (and
    /// only those), with the memory its buffers hold. `None` on a kernel
    /// without `sock_diag`.
    pub sock_diag: Option<OwnedFd>,
}

/// What a shell's init hands the host once the run's root is complete: what
/// a process forked elsewhere (a zygote's child) needs to join the run.
#[derive(Debug)]
pub struct Join {
    /// The run's user namespace ("userns1"); joined first of all but the
    /// network and IPC namespaces.
    pub user_ns: OwnedFd,
    /// Its mount namespace (the run's root is pivoted in it).
    pub mount_ns: OwnedFd,
    /// Its PID namespace: the zygote forks the program into it.
    pub pid_ns: OwnedFd,
    /// Its network namespace (a downed `lo` only). Joined first: it may be
    /// owned outside the run's user namespace
    /// (`Prepared::outer_network_namespace`).
    pub net_ns: OwnedFd,
    /// Its IPC namespace (SysV limits set). Joined right after the network
    /// namespace, with which it may have been made outside the run's user
    /// namespace.
    pub ipc_ns: OwnedFd,
    /// Its UTS namespace (hostname `pycage`).
    pub uts_ns: OwnedFd,
    /// The run's root directory (`O_PATH`): `fchdir` + `chroot(".")` there.
    pub root: OwnedFd,
    /// The Landlock ruleset with every rule of the run: the program
    /// restricts itself with it.
    pub ruleset: OwnedFd,
}

/// What a program process that joins a shell does to itself (see
/// [`crate::prepared::Prepared::join_plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinPlan {
    /// On a root host, the run's leased host uid and gid: the program drops
    /// to them before it joins (the run's user namespace maps only them).
    pub host_ids: Option<(u32, u32)>,
    /// Steps 16-18, the same list [`crate::prepared::Prepared::enter`] runs (see [`crate::confine`]).
    pub confine: Vec<ConfineStep>,
}

impl JoinPlan {
    /// The plan [`crate::prepared::Prepared::join_plan`] gives for `policy`, without building
    /// the sandbox. Hosts do not use it: the side that builds a shell sends
    /// its own `join_plan()` with it, so the plan cannot drift from the
    /// shell. Kept as the reference the tests compare a sent plan with.
    pub fn for_policy(policy: &SandboxPolicy) -> Result<JoinPlan, SandboxError> {
        let host_ids = match (rustix::process::geteuid().is_root(), policy.host_ids) {
            (true, Some(ids)) => Some((ids.uid, ids.gid)),
            (true, None) => return Err(SandboxError::NoRunIds),
            (false, None) => None,
            (false, Some(ids)) => {
                return Err(SandboxError::RunIdsNeedRoot { uid: ids.uid, euid: rustix::process::geteuid().as_raw() })
            }
        };
        let filters = seccomp::compile_native(network(policy))?;
        Ok(JoinPlan { host_ids, confine: confine_steps(&run_limits(policy), &filters) })
    }
}

/// The rlimits of a run's processes (step 16), soft = hard.
pub(crate) fn run_limits(policy: &SandboxPolicy) -> [(Resource, u64); 7] {
    [
        (Resource::Nproc, policy.max_processes.saturating_add(SANDBOX_PROCESSES)),
        (Resource::Fsize, policy.max_file_bytes),
        (Resource::Nofile, policy.max_open_files),
        (Resource::Core, 0),
        (Resource::Sigpending, RUN_SIGPENDING),
        (Resource::Msgqueue, RUN_MSGQUEUE_BYTES),
        (Resource::Memlock, RUN_MEMLOCK_BYTES),
    ]
}

/// What the program may do on the network, by the policy's egress.
pub(crate) fn network(policy: &SandboxPolicy) -> seccomp::Network {
    match policy.egress_port {
        Some(_) => seccomp::Network::LoopbackTcp,
        None => seccomp::Network::None,
    }
}

/// Steps 16-18 for a run with `limits` under `filters`.
pub(crate) fn confine_steps(limits: &[(Resource, u64)], filters: &Filters) -> Vec<ConfineStep> {
    crate::confine::build(
        limits,
        format!("{INSIDE_UID} 0 1\n").as_bytes(),
        format!("{INSIDE_GID} 0 1\n").as_bytes(),
        filters,
    )
}
