//! [`Prepared`] and [`Preparations`]: everything a run's sandbox needs,
//! built in the parent before the fork (paths as C strings, the Landlock
//! ruleset, the seccomp program, every map line and generated file, the
//! pipes and sockets the forked processes report on), and what the host
//! reads back after `spawn()`: the supervisor's handoff, a shell's join,
//! a recorded failure. The forked processes' steps are the parent
//! module's.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::RulesetCreated;
use rustix::mount::OpenTreeFlags;
use rustix::net::{AddressFamily, RecvAncillaryBuffer, RecvFlags};
use rustix::pipe::PipeFlags;
use rustix::process::Pid;

use crate::error::{ChildFailure, SandboxError, Step};
use crate::join::{Handoff, Join, JoinPlan};
use crate::landlock_rules;
use crate::plan::Plans;
use crate::plan::{MountPlan, RealFs, SandboxPolicy, DISK_DIRS, FIXED_DIRS, PROC_DIR, WORK_DIR};
use crate::resolved::{run_ids, Resolved, BOOT_ID_PATH};
use crate::seccomp::Filters;

/// The diagnostics record: step, pad, 16-bit index, 32-bit errno.
pub(super) const RECORD_LEN: usize = 8;

/// The handoff message C sends the host: G's pid (little endian), a tag
/// and a flags byte ([`HANDOFF_SOCK_DIAG`]).
pub(super) const HANDOFF_LEN: usize = 9;
/// The handoff carries the run's `NETLINK_SOCK_DIAG` socket.
pub(super) const HANDOFF_SOCK_DIAG: u8 = 1;

/// Connections to the egress listener the kernel queues before the host
/// accepts them (more wait in `connect`).
pub(super) const EGRESS_BACKLOG: i32 = 128;
pub(super) const HANDOFF_TAG: [u8; 4] = *b"pycg";

/// A random (version 4) UUID and a newline, as the kernel formats
/// `boot_id`: the run's own, so no two runs (and not the host) share one.
fn random_boot_id() -> Result<[u8; 37], SandboxError> {
    let mut raw = [0u8; 16];
    let filled = rustix::rand::getrandom(&mut raw, rustix::rand::GetRandomFlags::empty())
        .map_err(|e| SandboxError::Random(e.into()))?;
    if filled != raw.len() {
        return Err(SandboxError::Random(io::Error::from(io::ErrorKind::UnexpectedEof)));
    }
    raw[6] = (raw[6] & 0x0f) | 0x40;
    raw[8] = (raw[8] & 0x3f) | 0x80;
    let mut text = [b'\n'; 37];
    let digits = b"0123456789abcdef";
    let mut at = 0;
    for (index, byte) in raw.iter().enumerate() {
        if matches!(index, 4 | 6 | 8 | 10) {
            text[at] = b'-';
            at += 1;
        }
        text[at] = digits[usize::from(byte >> 4)];
        text[at + 1] = digits[usize::from(byte & 0x0f)];
        at += 2;
    }
    Ok(text)
}

/// How a shell clones a root template (and its build checks that it can):
/// the whole detached tree, every mount of it.
pub(crate) fn template_clone_flags() -> OpenTreeFlags {
    OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_RECURSIVE
        | OpenTreeFlags::AT_EMPTY_PATH
}

/// Number of descriptors a [`Join`] carries, in its field order.
pub(super) const JOIN_FDS: usize = 8;
pub(super) const JOIN_TAG: [u8; 4] = *b"join";

/// A sandbox ready to be entered by one forked child.
///
/// Build one per run with [`Prepared::new`] (in the parent, before
/// spawning), share it with the `pre_exec` closure (it is `Send + Sync`;
/// wrap it in an `Arc`), and call [`Prepared::enter`] there. A builder of
/// many runs of a few policies keeps what a policy fixes between them with
/// [`crate::Preparations`].
#[derive(Debug)]
pub struct Prepared {
    /// What the policy fixes: the same for every run of it.
    pub(super) resolved: Arc<Resolved>,
    /// The run's own, below: its `boot_id`, its Landlock ruleset (the
    /// init adds the run's new root to it), its descriptors.
    pub(super) boot_id: [u8; 37],
    /// The run's host ids: leased per run on a root host.
    pub(super) host_uid: u32,
    pub(super) host_gid: u32,
    /// The run's user namespace's maps when the supervisor makes it from
    /// the host's (see [`Prepared::outer_maps`]).
    pub(super) outer_uid_map: Vec<u8>,
    pub(super) outer_gid_map: Vec<u8>,
    pub(super) ruleset: RulesetCreated,
    pub(super) diag_read: OwnedFd,
    pub(super) diag_write: OwnedFd,
    pub(super) handoff_read: OwnedFd,
    pub(super) handoff_write: OwnedFd,
    /// The run's `cgroup.procs`, opened for writing by the host.
    pub(super) cgroup_procs: Option<OwnedFd>,
    /// The zygote's user namespace, which the supervisor joins before it
    /// makes the run's ([`Prepared::join_zygote_user_namespace`]).
    pub(super) zygote_userns: Option<OwnedFd>,
    /// Where the run's network namespace comes from
    /// ([`Prepared::outer_network_namespace`]).
    pub(super) network: NetworkNamespace,
    /// Shell mode: the init process stops before the program and hands the
    /// run to the host (see [`Prepared::into_shell`]).
    pub(super) shell: bool,
    /// The root's read-only skeleton, built once for the policy
    /// ([`crate::RootTemplates`]): cloned whole in step 3 instead of built.
    pub(super) template: Option<Arc<OwnedFd>>,
}

/// The maps of a run's user namespace made from the zygote's, where the
/// host's ids are 0 ([`Prepared::join_zygote_user_namespace`]).
pub(super) const ZYGOTE_MAP: &[u8] = b"0 0 1\n";

/// Whether runs of `a` and `b` share what a policy fixes: everything but
/// the host ids, which a root host leases per run (and whose presence,
/// root or not, [`run_ids`] checks per run).
fn fix_the_same(a: &SandboxPolicy, b: &SandboxPolicy) -> bool {
    // Every field named: a new one must be placed on one side or the other.
    let SandboxPolicy {
        read_only,
        remapped,
        devices,
        host_ids: _,
        max_processes,
        max_file_bytes,
        max_open_files,
        disk_bytes,
        sysv_shm_bytes,
        egress_port,
    } = a;
    *read_only == b.read_only
        && *remapped == b.remapped
        && *devices == b.devices
        && *max_processes == b.max_processes
        && *max_file_bytes == b.max_file_bytes
        && *max_open_files == b.max_open_files
        && *disk_bytes == b.disk_bytes
        && *sysv_shm_bytes == b.sysv_shm_bytes
        && *egress_port == b.egress_port
}

/// How many policies [`Preparations`] keeps what they fix for.
const MAX_KEPT_RESOLVED: usize = 4;

/// [`Prepared`]s for many runs of a few policies (a shell helper's): what
/// a policy fixes is resolved once and shared by every run of it while
/// its plan holds ([`crate::Plans`] checks that against the file system
/// for every run); only the run's own parts are made per run.
///
/// A shell helper builds a shell every half millisecond: copying the plan,
/// making its few hundred strings and copying the BPF program for each,
/// and freeing them after, cost about 0.04 of its 0.35 ms per shell, and
/// the frees dirtied pages the next shell's fork had write-protected (36
/// copy-on-write faults per shell, 25 since).
#[derive(Debug, Default)]
pub struct Preparations {
    plans: Plans,
    kept: Vec<(SandboxPolicy, Arc<Resolved>)>,
    resolved: u64,
}

impl Preparations {
    /// Nothing kept yet.
    pub fn new() -> Preparations {
        Preparations::default()
    }

    /// A [`Prepared`] for one run of `policy`, as [`Prepared::new`] would
    /// make it.
    pub fn prepare(&mut self, policy: &SandboxPolicy) -> Result<Prepared, SandboxError> {
        let plan = self.plans.plan(policy)?;
        let found =
            self.kept.iter().find(|(kept, resolved)| Arc::ptr_eq(&resolved.plan, &plan) && fix_the_same(kept, policy));
        let resolved = match found {
            Some((_, resolved)) => Arc::clone(resolved),
            None => {
                let resolved = Arc::new(Resolved::new(policy, Arc::clone(&plan))?);
                self.resolved += 1;
                // Its rules' descriptors must name what the plan's paths
                // named when it was made (the plan's replay holds the paths
                // to that from now on); a path that changed in between
                // serves this run only, and the next replay makes a new plan.
                let same_files = resolved
                    .path_rules
                    .iter()
                    .all(|rule| rule.identity().is_some_and(|id| self.plans.identity(&plan, &rule.path) == Some(id)));
                if !same_files {
                    return Prepared::with_resolved(resolved, policy);
                }
                // A policy's earlier resolution has a plan that no longer holds.
                self.kept.retain(|(kept, _)| !fix_the_same(kept, policy));
                if self.kept.len() >= MAX_KEPT_RESOLVED {
                    self.kept.remove(0);
                }
                self.kept.push((policy.clone(), Arc::clone(&resolved)));
                resolved
            }
        };
        Prepared::with_resolved(resolved, policy)
    }

    /// How many times a policy was resolved (not kept) so far.
    pub fn resolved(&self) -> u64 {
        self.resolved
    }
}

/// Where a run's network and IPC namespaces come from.
#[derive(Debug)]
pub(super) enum NetworkNamespace {
    /// Made with the run's other namespaces, inside (and owned by) its user
    /// namespace.
    Inside,
    /// Made before the run's user namespace, so owned by the one the
    /// supervisor is in then (the host's on a root host, the zygote's).
    Outside,
    /// These namespaces, which an earlier run's shell made [`Outside`]:
    /// joined before the run's user namespace is made.
    ///
    /// [`Outside`]: NetworkNamespace::Outside
    Join(OuterNamespaces),
}

/// The network and IPC namespaces of an earlier run, made outside its user
/// namespace ([`Prepared::outer_network_namespace`]), for a later run to
/// join.
#[derive(Debug)]
pub struct OuterNamespaces {
    /// The network namespace (`/proc/<pid>/ns/net`, or a shell's
    /// [`crate::Join::net_ns`]).
    pub net: OwnedFd,
    /// The IPC namespace made with it ([`crate::Join::ipc_ns`]).
    pub ipc: OwnedFd,
}

impl Prepared {
    /// Resolve the policy, build the Landlock ruleset, compile the seccomp
    /// filters and precompute every string the child needs.
    ///
    /// Fails if Landlock is too old or a path of the policy is invalid.
    /// Works for any user: without root, the run is mapped to the caller's
    /// own ids ([`SandboxPolicy::host_ids`] must then be `None`).
    pub fn new(policy: &SandboxPolicy) -> Result<Prepared, SandboxError> {
        run_ids(policy)?;
        let plan = MountPlan::build(policy, &RealFs)?;
        Prepared::with_resolved(Arc::new(Resolved::new(policy, Arc::new(plan))?), policy)
    }

    /// One run of `policy`, resolved as `resolved`: its own host ids,
    /// `boot_id`, Landlock ruleset and descriptors.
    pub(crate) fn with_resolved(resolved: Arc<Resolved>, policy: &SandboxPolicy) -> Result<Prepared, SandboxError> {
        let (_, host_uid, host_gid) = run_ids(policy)?;
        // Every descriptor made below must land above 3 (see the function).
        crate::sys::occupy_low_fds();
        let egress_port = resolved.egress.map(|address| address.port());
        let ruleset = landlock_rules::ruleset_with(&resolved.path_rules, resolved.landlock_abi, egress_port)?;
        let (diag_read, diag_write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
            .map_err(|e| SandboxError::Pipe(e.into()))?;
        let (handoff_read, handoff_write) = rustix::net::socketpair(
            AddressFamily::UNIX,
            rustix::net::SocketType::DGRAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| SandboxError::Pipe(e.into()))?;
        Ok(Prepared {
            resolved,
            boot_id: random_boot_id()?,
            host_uid,
            host_gid,
            outer_uid_map: format!("0 {host_uid} 1\n").into_bytes(),
            outer_gid_map: format!("0 {host_gid} 1\n").into_bytes(),
            ruleset,
            diag_read,
            diag_write,
            handoff_read,
            handoff_write,
            shell: false,
            template: None,
            cgroup_procs: None,
            zygote_userns: None,
            network: NetworkNamespace::Inside,
        })
    }

    /// Put the run in a cgroup: `procs` is that cgroup's `cgroup.procs`,
    /// opened for writing by the host (the kernel checks the opener's
    /// rights). The supervisor joins it before anything else, so every
    /// process of the run is in it from the start.
    pub fn join_cgroup(&mut self, procs: OwnedFd) {
        self.cgroup_procs = Some(procs);
    }

    /// Make the run's user namespace a child of the zygote's (`userns`,
    /// from [`crate::zygote_user_namespace`]): the supervisor joins it
    /// first, where the host's ids are 0, so the run's namespace maps uid
    /// and gid 0 to 0 of it. A zygote in `userns` then holds every
    /// capability over the run's namespaces. Ignored on a root host, whose
    /// zygote holds them anyway and whose runs are leased other ids.
    pub fn join_zygote_user_namespace(&mut self, userns: OwnedFd) {
        if self.resolved.root_host {
            return;
        }
        self.zygote_userns = Some(userns);
    }

    /// Give the run a network namespace and an IPC namespace that it holds
    /// no capability over, so that they can serve later runs: the
    /// supervisor makes them (writing the IPC namespace's limits) or joins
    /// `reuse`, made so for an earlier run, before it makes the run's user
    /// namespace, as root on a root host and in the zygote's user namespace
    /// otherwise ([`Prepared::join_zygote_user_namespace`] first).
    ///
    /// The run can then change nothing of them (interfaces, routes,
    /// sysctls: each needs a capability in the namespace's owner; the
    /// SysV limits, whose files it cannot write: `/proc/sys` is read-only
    /// to it, for Landlock too). With sockets limited to `AF_UNIX`, it leaves nothing in the
    /// network namespace but sockets, which end with their last holder. So
    /// once every process of a run is gone and the namespace lists no
    /// socket (one in flight in an `SCM_RIGHTS` message, or waiting in a
    /// listener outside, outlives its process), the namespace is as a new
    /// one is, and another run may have it instead of a new one, which
    /// costs the kernel 1.3-1.7 ms of CPU to make and tear down.
    ///
    /// In the IPC namespace a run can leave only SysV shared memory and
    /// semaphores (message queues, POSIX ones included, are not provided).
    /// `kernel.shm_rmid_forced` is set in it, so a segment ends with its
    /// creator's exit or, attached then, its last detach: once every
    /// process of the run is gone, so is its shared memory. The supervisor
    /// that joins the namespace for the next run removes every SysV object
    /// in it before anything of that run exists, and fails
    /// ([`crate::Step::IpcInUse`]) if a segment is still attached somewhere
    /// (one the ended run mapped, held a moment longer by another process):
    /// that namespace is then given up. What a later run can still learn is
    /// the namespace's id counters: how many objects earlier runs made.
    /// Making, limiting and tearing down an IPC namespace costs the kernel
    /// about 0.1 ms of CPU per run, joining a kept one 0.01 ms (`docs/perf-log.md`).
    ///
    /// Returns false, and changes nothing, for a run with egress (the
    /// supervisor brings the run's loopback up and listens on it: the
    /// namespace must be the run's own), or a host that is not root without
    /// the zygote's user namespace (it could not make a namespace outside
    /// the run's user namespace).
    pub fn outer_network_namespace(&mut self, reuse: Option<OuterNamespaces>) -> bool {
        if self.resolved.egress.is_some() || !(self.resolved.root_host || self.zygote_userns.is_some()) {
            return false;
        }
        self.network = match reuse {
            Some(fd) => NetworkNamespace::Join(fd),
            None => NetworkNamespace::Outside,
        };
        true
    }

    /// The plan's part a root template of this run holds, if one may
    /// serve it: on a root host only (see [`crate::RootTemplates`]).
    pub(crate) fn template_part(&self) -> Option<&MountPlan> {
        self.resolved.template_part.as_ref()
    }

    /// The uid and gid maps the supervisor writes for the run's user
    /// namespace (step 5): its host ids, or 0 of the zygote's namespace.
    pub(super) fn outer_maps(&self) -> (&[u8], &[u8]) {
        match self.zygote_userns {
            Some(_) => (ZYGOTE_MAP, ZYGOTE_MAP),
            None => (&self.outer_uid_map, &self.outer_gid_map),
        }
    }

    /// Clone `tree` (a [`crate::RootTemplates`] template of this plan) as
    /// the new root's read-only part, instead of building it.
    pub(crate) fn use_template(&mut self, tree: Arc<OwnedFd>) {
        if self.resolved.root_host {
            self.template = Some(tree);
        }
    }

    /// Whether the run's root is cloned from a template.
    pub fn uses_template(&self) -> bool {
        self.template.is_some()
    }

    /// The resolved mount plan (for `pycage doctor` and diagnostics).
    pub fn plan(&self) -> &MountPlan {
        &self.resolved.plan
    }

    /// The plan as shared (kept by [`crate::Preparations`], or this run's own).
    pub(crate) fn plan_arc(&self) -> &Arc<MountPlan> {
        &self.resolved.plan
    }

    /// The Landlock ABI whose rights the ruleset handles.
    pub fn landlock_abi(&self) -> u32 {
        self.resolved.landlock_abi as u32
    }

    /// The host uid the run's processes have (the per-run uid on a root
    /// host, the caller's own otherwise).
    pub fn host_uid(&self) -> u32 {
        self.host_uid
    }

    /// Where the program reaches the egress proxy, inside the run
    /// (`127.0.0.1:<port>`), when the policy asked for egress.
    pub fn egress_address(&self) -> Option<std::net::SocketAddrV4> {
        self.resolved.egress
    }

    /// The seccomp program the program runs under.
    pub fn filters(&self) -> &Filters {
        &self.resolved.filters
    }

    /// What the supervisor sent once the sandbox was built: the init
    /// process's host pid and the working directory. Always there once
    /// `spawn()` succeeded (the program is exec'd only after the handoff);
    /// `None` before, or once taken. Never blocks.
    pub fn take_handoff(&self) -> Option<Handoff> {
        let mut data = [0u8; HANDOFF_LEN];
        let (bytes, fds) = self.receive_handoff(&mut data)?;
        let [p0, p1, p2, p3, t0, t1, t2, t3, flags] = data;
        if bytes != HANDOFF_LEN || [t0, t1, t2, t3] != HANDOFF_TAG {
            return None;
        }
        let init_pid = Pid::from_raw(i32::from_le_bytes([p0, p1, p2, p3]))?;
        let mut fds = fds.into_iter();
        let work_dir = fds.next()?;
        let sock_diag = match flags & HANDOFF_SOCK_DIAG {
            0 => None,
            _ => Some(fds.next()?),
        };
        let egress = match self.resolved.egress {
            Some(_) => Some(fds.next()?),
            None => None,
        };
        Some(Handoff { init_pid, work_dir, egress, sock_diag })
    }

    /// One message of the handoff socket, without blocking: its length and
    /// the descriptors it carried (closed by drop unless used).
    fn receive_handoff(&self, data: &mut [u8]) -> Option<(usize, Vec<OwnedFd>)> {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(JOIN_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [io::IoSliceMut::new(data)];
        let received = rustix::net::recvmsg(
            &self.handoff_read,
            &mut iov,
            &mut control,
            RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
        )
        .ok()?;
        let mut fds = Vec::new();
        for message in control.drain() {
            if let rustix::net::RecvAncillaryMessage::ScmRights(received_fds) = message {
                fds.extend(received_fds);
            }
        }
        Some((received.bytes, fds))
    }

    /// Shell mode: [`Prepared::enter`] builds the run exactly as usual (the
    /// supervisor, the run's namespaces and root, its init process, the
    /// Landlock rules), but the init process does not fork the program: it
    /// hands the host a [`Join`] and stays the run's PID 1, reaping, until
    /// the host kills the supervisor. Nothing execs: the fork
    /// ([`crate::fork::fork_shell`]) returns once both processes have
    /// closed every descriptor, after the handoffs. The
    /// program then comes from a process forked elsewhere (a zygote's child),
    /// which joins the namespaces, enters the root, and applies the
    /// program's own steps (16-18) itself.
    pub fn into_shell(mut self) -> Prepared {
        self.shell = true;
        self
    }

    /// What the program's process applies to itself after joining a shell
    /// (steps 16-18): the very list [`Prepared::enter`] runs, as data a
    /// process that is not this one (a zygote's child, in Python) runs.
    pub fn join_plan(&self) -> JoinPlan {
        JoinPlan {
            host_ids: self.resolved.root_host.then_some((self.host_uid, self.host_gid)),
            confine: self.resolved.confine.clone(),
        }
    }

    /// What a shell's init handed over (see [`Prepared::into_shell`]);
    /// `None` before, once taken, or if it could not be sent. Never blocks.
    pub fn take_join(&self) -> Option<Join> {
        let mut data = [0u8; 4];
        let (bytes, fds) = self.receive_handoff(&mut data)?;
        if bytes != data.len() || data != JOIN_TAG || fds.len() != JOIN_FDS {
            return None;
        }
        let mut fds = fds.into_iter();
        let mut next = || fds.next();
        Some(Join {
            user_ns: next()?,
            mount_ns: next()?,
            pid_ns: next()?,
            net_ns: next()?,
            ipc_ns: next()?,
            uts_ns: next()?,
            root: next()?,
            ruleset: next()?,
        })
    }

    /// What a shell handed over once `spawn()` returned: the supervisor's
    /// handoff (if it sent one) and the init's [`Join`], or why there is
    /// no join (the child's recorded failure, else [`SandboxError::Spawn`]).
    pub fn take_shell(&self) -> Result<(Option<Handoff>, Join), SandboxError> {
        let handoff = self.take_handoff();
        let join = self.take_join().ok_or_else(|| match self.take_child_failure() {
            Some(failure) => SandboxError::Child(failure),
            None => SandboxError::Spawn(io::Error::other("the shell handed nothing over")),
        })?;
        Ok((handoff, join))
    }

    /// The failure the child recorded, if `enter` failed in a spawn that
    /// used this `Prepared`. Each failure is returned once.
    pub fn take_child_failure(&self) -> Option<ChildFailure> {
        let mut record = [0u8; RECORD_LEN];
        match rustix::io::read(&self.diag_read, &mut record) {
            Ok(RECORD_LEN) => {}
            Ok(_) | Err(_) => return None,
        }
        let [code, _, i0, i1, e0, e1, e2, e3] = record;
        let step = Step::from_code(code)?;
        let index = usize::from(u16::from_le_bytes([i0, i1]));
        let errno = i32::from_le_bytes([e0, e1, e2, e3]);
        let path = match step {
            Step::CreateLayout => FIXED_DIRS.get(index).map(PathBuf::from),
            Step::CloneTemplate | Step::AttachTemplate => Some(PathBuf::from("/")),
            Step::CreateDiskDir | Step::BindDiskDir => DISK_DIRS.get(index).map(|(d, _)| PathBuf::from(d)),
            Step::CreateDir => self.resolved.plan.dirs.get(index).cloned(),
            Step::CloneMount | Step::SealMount => self.resolved.plan.binds.get(index).map(|b| b.source.clone()),
            Step::CreateMountPoint | Step::AttachMount => self.resolved.plan.binds.get(index).map(|b| b.target.clone()),
            Step::CreateSymlink => self.resolved.plan.symlinks.get(index).map(|l| l.path.clone()),
            Step::WriteFile => self.resolved.plan.files.get(index).map(|f| f.path.clone()),
            Step::LimitIpc => {
                self.resolved.ipc_limits.get(index).map(|(p, _)| PathBuf::from(p.to_string_lossy().as_ref()))
            }
            Step::LandlockRule => {
                self.resolved.landlock_dirs.get(index).map(|(p, _)| PathBuf::from(p.to_string_lossy().as_ref()))
            }
            Step::EnterRunDir => Some(PathBuf::from(WORK_DIR)),
            Step::MountProc | Step::ProtectProcSys => Some(PathBuf::from(PROC_DIR)),
            Step::MaskBootId => Some(Path::new(PROC_DIR).join(BOOT_ID_PATH)),
            Step::LimitNetwork => {
                self.resolved.net_limits.get(index).map(|(p, _)| PathBuf::from(p.to_string_lossy().as_ref()))
            }
            _ => None,
        };
        Some(ChildFailure { step, path, errno })
    }

    /// Turn the error of a failed `spawn()` into the typed sandbox error:
    /// the recorded child failure if there is one, else
    /// [`SandboxError::Spawn`] (for example the interpreter could not be
    /// executed).
    pub fn explain_spawn_error(&self, err: io::Error) -> SandboxError {
        match self.take_child_failure() {
            Some(failure) => SandboxError::Child(failure),
            None => SandboxError::Spawn(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::landlock_rules::PathRule;
    use std::os::fd::AsRawFd;

    #[test]
    fn prepared_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Prepared>();
    }

    /// A policy exposing `path` alone, for runs of uid `uid` on a root host.
    fn policy_of(path: &Path, uid: u32) -> SandboxPolicy {
        SandboxPolicy {
            read_only: vec![path.to_path_buf()],
            remapped: Vec::new(),
            devices: Vec::new(),
            host_ids: rustix::process::geteuid().is_root().then_some(crate::HostIds { uid, gid: uid }),
            max_processes: 16,
            max_file_bytes: 1 << 20,
            max_open_files: 64,
            disk_bytes: 1 << 20,
            sysv_shm_bytes: 1 << 20,
            egress_port: None,
        }
    }

    #[test]
    fn runs_of_a_policy_share_what_it_fixes_until_its_plan_changes() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("pycage-preparations-{}", std::process::id()));
        let exposed = dir.join("exposed");
        std::fs::create_dir_all(&exposed).unwrap();
        let policy = policy_of(&exposed, 2000);
        let mut preparations = Preparations::new();
        let first = preparations.prepare(&policy).expect("Landlock and the policy's paths");
        // Another run of it, leased other ids on a root host: shared.
        let second = preparations.prepare(&policy_of(&exposed, 2001)).unwrap();
        assert!(Arc::ptr_eq(&first.resolved, &second.resolved));
        assert_eq!(preparations.resolved(), 1);
        // Each run its own: boot id, host ids, descriptors.
        assert_ne!(first.boot_id, second.boot_id);
        assert_ne!(first.handoff_read.as_raw_fd(), second.handoff_read.as_raw_fd());
        if first.resolved.root_host {
            assert_eq!((first.host_uid, second.host_uid), (2000, 2001));
            assert_eq!(second.outer_maps(), (&b"0 2001 1\n"[..], &b"0 2001 1\n"[..]));
        }
        // What a run of it fixes is what `Prepared::new` makes.
        let fresh = Prepared::new(&policy).unwrap();
        assert_eq!(first.plan(), fresh.plan());
        assert_eq!(first.join_plan(), fresh.join_plan());
        assert_eq!(first.resolved.disk_tmpfs_data, fresh.resolved.disk_tmpfs_data);
        // Another limit: resolved on its own, the first still kept.
        let mut bigger = policy.clone();
        bigger.disk_bytes *= 2;
        let other = preparations.prepare(&bigger).unwrap();
        assert!(!Arc::ptr_eq(&first.resolved, &other.resolved));
        assert_ne!(first.resolved.disk_tmpfs_data, other.resolved.disk_tmpfs_data);
        assert!(Arc::ptr_eq(&preparations.prepare(&policy).unwrap().resolved, &first.resolved));
        assert_eq!(preparations.resolved(), 2);
        // The exposed directory made again (a directory still, another
        // file): a new plan and resolution, whose rule names the new one.
        // (The kept rule holds the old inode, so its number is not reused.)
        let rule_of = |prepared: &Prepared| {
            prepared.resolved.path_rules.iter().find(|rule| rule.path == exposed).and_then(PathRule::identity)
        };
        std::fs::remove_dir(&exposed).unwrap();
        std::fs::create_dir(&exposed).unwrap();
        let remade = preparations.prepare(&policy).unwrap();
        assert_eq!(preparations.resolved(), 3);
        assert!(!Arc::ptr_eq(&first.resolved, &remade.resolved));
        let now = std::fs::metadata(&exposed).unwrap();
        assert_eq!(rule_of(&remade), Some((now.dev(), now.ino())));
        assert_ne!(rule_of(&first), rule_of(&remade));
        assert!(Arc::ptr_eq(&preparations.prepare(&policy).unwrap().resolved, &remade.resolved));
        // The exposed directory became a file: a new plan, resolved again,
        // and the stale resolution dropped.
        std::fs::remove_dir(&exposed).unwrap();
        std::fs::write(&exposed, b"").unwrap();
        let changed = preparations.prepare(&policy).unwrap();
        assert_eq!(preparations.resolved(), 4);
        assert!(!Arc::ptr_eq(&first.resolved, &changed.resolved));
        assert_eq!(changed.plan(), Prepared::new(&policy).unwrap().plan());
        assert_ne!(changed.plan(), first.plan());
        assert_eq!(preparations.kept.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
