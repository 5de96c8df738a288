//! [`Prepared`]: everything the forked child needs, built in the parent, and
//! [`Prepared::enter`], the syscalls the child makes.
//!
//! One code path serves every host: the sandbox needs no privilege of its
//! own. It builds its namespaces from an unprivileged user namespace, the
//! way bubblewrap and Chromium's namespace sandbox do. A root host first
//! drops to a per-run unprivileged uid, so runs are never root anywhere.
//!
//! # Processes
//!
//! ```text
//! host (tokio)                 Prepared::new, Command::spawn
//!  └─ C  supervisor            forked by std; runs enter(); never execs. In the
//!     │                        run's user namespace (uid 0 there = the run's host uid)
//!     └─ G  init               PID 1 of the run's PID namespace; reaps; never execs
//!         └─ P  program        PID 2; enter() returns Ok here and std execs
//!                              python3 -I, as uid 1000 of a nested user namespace
//! ```
//!
//! # Order of steps, and why
//!
//! In C:
//! 1. Reset every signal disposition to `SIG_DFL` (tokio's handlers would
//!    make C survive the host's SIGTERM to the group). With a delegated
//!    cgroup ([`Prepared::join_cgroup`]), join it: every later process of
//!    the run starts inside it.
//! 2. Open `/proc/self` (an `O_PATH` fd) for the map files of step 5.
//! 3. On a root host only: raise the hard rlimits the policy asks for,
//!    clone every path to expose (`open_tree(OPEN_TREE_CLONE)`: detached
//!    mounts, taken while root can still traverse `/root` to reach a pyenv
//!    interpreter) and seal them read-only/nosuid/nodev, then
//!    `setgroups([])`, `setresgid`, `setresuid` to the run's host ids and
//!    make C dumpable again (the uid change cleared it, which would make
//!    its `/proc/self` map files root-owned). With a root template
//!    ([`crate::RootTemplates`], the shell helper's, root hosts only),
//!    clone it whole instead (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`
//!    of the detached tree: only from the mount namespace it was made in,
//!    which C is still in), and only the paths inside the run's tmpfs
//!    directories one by one.
//! 4. `unshare(CLONE_NEWUSER)`: the run's user namespace, "userns1". For a
//!    zygote's shell on a host that is not root, C first joins the zygote's
//!    user namespace ([`Prepared::join_zygote_user_namespace`]), where the
//!    host's ids are 0: userns1 is then its child, and step 5 maps 0 to 0.
//! 5. Write `deny` to `setgroups` and map uid/gid 0 to the host ids
//!    (`0 <host uid> 1`): an unprivileged writer may map exactly its own
//!    ids. C now holds every capability in userns1 and none outside.
//!    The kernel clears `PR_SET_PDEATHSIG` on a uid change, so C re-arms it
//!    and re-checks its parent is still the host.
//! 6. `unshare(NEWNS | NEWPID | NEWNET | NEWIPC | NEWUTS)`: userns1 owns
//!    them all. The network namespace has only a downed `lo`.
//! 7. Without root: clone and seal the paths to expose now (step 3 did it
//!    on a root host), from the copy of the host's mounts the new mount
//!    namespace starts with.
//! 8. Make `/` recursively private. Mount the new root's tmpfs over `/tmp`
//!    (inside this mount namespace only: the host never sees it), create
//!    the fixed layout, mount the run's size-capped tmpfs on the new
//!    root's `/proc` directory, write the run's random `boot_id` at its
//!    top and bind its `work`, `tmp` and `shm` directories at `/work`,
//!    `/tmp` and `/dev/shm` (procfs is mounted over it in step 12, which
//!    hides it: unmounting it would cost an expedited RCU grace period),
//!    create the plan's directories, attach every clone (`move_mount`),
//!    create the symlinks and write the generated `/etc` files.
//!    With a template, attach its clone at `/tmp` instead: it holds the
//!    fixed layout, the directories, binds, symlinks and generated files
//!    outside the run's tmpfs, read-only. The run's tmpfs is staged on
//!    its `/proc` directory the same way. Then only the plan's entries
//!    inside `/work`, `/tmp` and `/dev/shm` are made.
//! 9. `sethostname`, and the IPC namespace's SysV limits (`kernel.shmmax`,
//!    `shmall`, `shmmni`, `sem`): C is the root of the user namespace that
//!    owns the IPC namespace, the only writer the kernel allows. With
//!    egress ([`SandboxPolicy::egress_port`]), cap the namespace's TCP
//!    buffers ([`crate::limits::RUN_TCP_RMEM`], [`crate::limits::RUN_TCP_WMEM`]), bring `lo` up and listen on
//!    `127.0.0.1:<port>` (a TCP socket of the run's network namespace,
//!    which has no other route): C holds `CAP_NET_ADMIN` over it, and a
//!    socket stays in the namespace it was made in, so the host accepts
//!    the program's connections on it with no process in between.
//! 10. Open a `NETLINK_SOCK_DIAG` socket inside the network namespace (a
//!     dump through it lists every socket of the run with its queued
//!     bytes: the host's watchdog counts them in the run's memory), make
//!     the new root's tmpfs read-only, open the working directory
//!     (`O_PATH`) for the host, open a pidfd on itself, the status pipe and
//!     the "go" pipe, and fork G (which closes the egress listener at once).
//!     A shell's G ([`Prepared::into_shell`], entered through
//!     [`crate::fork::fork_shell`]) is cloned instead, sharing C's memory
//!     on a stack of its own (`clone(CLONE_VM)`, [`sys::clone_vm`]): C only
//!     waits from its handoff on, and G never forks, so one address space
//!     is copied and torn down per shell instead of two. G's memory is
//!     then C's: it becomes not dumpable for both in step 15, and a
//!     failure of G's steps is written to the forker's report pipe by G
//!     itself (it cannot return through C's stack).
//!     Ignore SIGTERM (the host's stop signal reaches C the instant the
//!     program's death closes fd 3, and C must live to report that death).
//!     Send G's pid, the working-directory fd, the `sock_diag` socket and
//!     the egress listener to the host (`SCM_RIGHTS`), then tell G to go on
//!     (so the program's exec, which ends the host's `spawn()`, always
//!     follows the handoff), close every other fd, wait for G, and exit the
//!     way the program did (G reports its wait status on the status pipe).
//!
//! In G (PID 1 of the new PID namespace, still root of userns1):
//! 11. `PR_SET_PDEATHSIG = SIGKILL`, then check C is alive by polling its
//!     pidfd (`getppid()` reads 0 across the PID namespace boundary), and
//!     wait for C's "go".
//! 12. Clone the run's `boot_id` file (`open_tree`), mount `/proc` over
//!     the run's staged tmpfs (only a process inside the PID namespace
//!     can mount its procfs, and only while the host's `/proc` is still
//!     visible in the mount namespace), with `hidepid=invisible`, mount
//!     the clone over
//!     `/proc/sys/kernel/random/boot_id` (the host's names the host's boot
//!     to every run), and make `/proc/sys` read-only (its IPC entries are
//!     writable by userns1's root, which shares the program's host uid).
//! 13. `pivot_root` into the new root, detach the old one, enter `/work`.
//! 14. Add Landlock rules for what exists only now: `/` (list), `/etc` and
//!     `/proc` (read), `/work`, `/tmp`, `/dev/shm` (everything).
//! 15. Fork P. G then becomes non-dumpable (so the program, whose host uid
//!     is the same, can neither see, trace nor read it; `hidepid=invisible`
//!     hides it), closes every fd but the status pipe, drops the
//!     capabilities it holds (not the bounding set: G never execs) and
//!     reaps children until P exits.
//!
//! In P (PID 2):
//! 16. `PR_SET_PDEATHSIG = SIGKILL`; rlimits: NPROC (`max_processes` + 2:
//!     C and G are counted at the outer level), FSIZE, CORE = 0,
//!     SIGPENDING ([`RUN_SIGPENDING`]), MSGQUEUE (0), MEMLOCK
//!     ([`RUN_MEMLOCK_BYTES`]), soft = hard. Set before step 17, because a
//!     new user namespace records its creator's `RLIMIT_NPROC`,
//!     `SIGPENDING`, `MSGQUEUE` and `MEMLOCK` as the ceilings of everything
//!     counted in it: they bound the whole run, the host uid's share.
//!     Then `unshare(CLONE_NEWCGROUP)` (still root of userns1): the
//!     program's `/proc/self/cgroup` shows `/`, no host path.
//! 17. `unshare(CLONE_NEWUSER)` and map uid/gid 1000 to userns1's 0: the
//!     program is uid 1000, owns no namespace, and loses every capability
//!     at exec. Its `RLIMIT_NPROC` counts the processes of this user
//!     namespace only, so it is a per-run limit even without root.
//! 18. Mark every fd from [`crate::limits::INHERITED_FDS`] (4) up close-on-exec; then
//!     RLIMIT_NOFILE (after the maps' files were opened: a child of a host
//!     holding hundreds of descriptors has no free number below it); drop
//!     the bounding, ambient and permitted capabilities; `PR_SET_NO_NEW_PRIVS`;
//!     `landlock_restrict_self` (anything but "fully enforced" fails);
//!     seccomp, last. Return `Ok`: std execs the interpreter.
//!
//! # Signals
//!
//! The program is PID 2, not init: `os.kill(os.getpid(), SIGKILL)` kills it
//! as anywhere else. When P exits, G reports and exits, and the kernel
//! kills every other process of the PID namespace (`setsid` daemons
//! included). When the host signals the process group, C dies and G gets
//! SIGKILL from its death signal, with the same effect.
//!
//! # Allocation after fork
//!
//! Every path is a `CString` built in [`Prepared::new`] (or once per
//! policy, by [`crate::Preparations`]: `resolved.rs`), the seccomp program
//! is compiled there, and every map line, sysctl value and generated file
//! is preformatted. The child-side code makes syscalls only: rustix with
//! `&CStr` arguments, Landlock's `try_clone`/`add_rule`/`restrict_self`,
//! `sys::install_seccomp` (a `sock_fprog` on the stack), `sendmsg`
//! with a stack control buffer. Clone fds live in a fixed array on the
//! stack ([`crate::MAX_BINDS`] entries). Errors are `Copy` values and raw
//! errnos; the diagnostics record is an 8-byte array.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{Access, AccessFs, PathBeneath, RulesetCreated, RulesetCreatedAttr};
use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use rustix::pipe::PipeFlags;
use rustix::process::{DumpableBehavior, Pid, Rlimit, Signal};
use rustix::thread::UnshareFlags;

use crate::error::{at, at_entry, errno_of, ChildFailure, Failure, SandboxError, Step};
use crate::join::{Handoff, Join, JoinPlan};
use crate::landlock_rules;
use crate::limits::SUPERVISOR_LOST_EXIT;
use crate::plan::Plans;
use crate::plan::{
    MountPlan, NodeKind, RealFs, SandboxPolicy, DISK_DIRS, FIXED_DIRS, HOSTNAME, MAX_BINDS, PROC_DIR, WORK_DIR,
};
use crate::resolved::{run_ids, LandlockGrant, Resolved, BOOT_ID_PATH};
use crate::seccomp::Filters;
use crate::sys;

/// The diagnostics record: step, pad, 16-bit index, 32-bit errno.
const RECORD_LEN: usize = 8;

/// The handoff message C sends the host: G's pid (little endian), a tag
/// and a flags byte ([`HANDOFF_SOCK_DIAG`]).
const HANDOFF_LEN: usize = 9;
/// The handoff carries the run's `NETLINK_SOCK_DIAG` socket.
const HANDOFF_SOCK_DIAG: u8 = 1;

/// Connections to the egress listener the kernel queues before the host
/// accepts them (more wait in `connect`).
const EGRESS_BACKLOG: i32 = 128;
const HANDOFF_TAG: [u8; 4] = *b"pycg";

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
const JOIN_FDS: usize = 8;
const JOIN_TAG: [u8; 4] = *b"join";

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
    resolved: Arc<Resolved>,
    /// The run's own, below: its `boot_id`, its Landlock ruleset (the
    /// init adds the run's new root to it), its descriptors.
    boot_id: [u8; 37],
    /// The run's host ids: leased per run on a root host.
    host_uid: u32,
    host_gid: u32,
    /// The run's user namespace's maps when the supervisor makes it from
    /// the host's (see [`Prepared::outer_maps`]).
    outer_uid_map: Vec<u8>,
    outer_gid_map: Vec<u8>,
    ruleset: RulesetCreated,
    diag_read: OwnedFd,
    diag_write: OwnedFd,
    handoff_read: OwnedFd,
    handoff_write: OwnedFd,
    /// The run's `cgroup.procs`, opened for writing by the host.
    cgroup_procs: Option<OwnedFd>,
    /// The zygote's user namespace, which the supervisor joins before it
    /// makes the run's ([`Prepared::join_zygote_user_namespace`]).
    zygote_userns: Option<OwnedFd>,
    /// Where the run's network namespace comes from
    /// ([`Prepared::outer_network_namespace`]).
    network: NetworkNamespace,
    /// Shell mode: the init process stops before the program and hands the
    /// run to the host (see [`Prepared::into_shell`]).
    shell: bool,
    /// The root's read-only skeleton, built once for the policy
    /// ([`crate::RootTemplates`]): cloned whole in step 3 instead of built.
    template: Option<Arc<OwnedFd>>,
}

/// The maps of a run's user namespace made from the zygote's, where the
/// host's ids are 0 ([`Prepared::join_zygote_user_namespace`]).
const ZYGOTE_MAP: &[u8] = b"0 0 1\n";

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

/// Where a run's network namespace comes from.
#[derive(Debug)]
enum NetworkNamespace {
    /// Made with the run's other namespaces, inside (and owned by) its user
    /// namespace.
    Inside,
    /// Made before the run's user namespace, so owned by the one the
    /// supervisor is in then (the host's on a root host, the zygote's).
    Outside,
    /// This namespace, which an earlier run's shell made [`Outside`]:
    /// joined before the run's user namespace is made.
    ///
    /// [`Outside`]: NetworkNamespace::Outside
    Join(OwnedFd),
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

    /// Give the run a network namespace that it holds no capability over,
    /// so that it can serve later runs: the supervisor makes it (or joins
    /// `reuse`, made so for an earlier run) before it makes the run's user
    /// namespace, as root on a root host and in the zygote's user namespace
    /// otherwise ([`Prepared::join_zygote_user_namespace`] first).
    ///
    /// The run can then change nothing of it (its interfaces, routes,
    /// sysctls: each needs a capability in the namespace's owner), and,
    /// with sockets limited to `AF_UNIX`, leaves nothing in it but sockets,
    /// which end with their last holder. So once every process of a run is
    /// gone and the namespace lists no socket (one in flight in an
    /// `SCM_RIGHTS` message, or waiting in a listener outside, outlives its
    /// process), the namespace is as a new one is, and another run may have it
    /// instead of a new one, which costs the kernel 1.3-1.7 ms of CPU to
    /// make and tear down. Returns false, and changes nothing, for a run
    /// with egress (the supervisor brings the run's loopback up and
    /// listens on it: the namespace must be the run's own), or a host that
    /// is not root without the zygote's user namespace (it could not make
    /// a network namespace outside the run's user namespace).
    pub fn outer_network_namespace(&mut self, reuse: Option<OwnedFd>) -> bool {
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
    fn outer_maps(&self) -> (&[u8], &[u8]) {
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

    /// Enter the sandbox. Called from `pre_exec` in the forked child, after
    /// the runtime's own `pre_exec` (fd 3, process group). On `Ok` the caller
    /// execs the interpreter, which runs as PID 2 of a new PID namespace;
    /// the process std forked stays behind as its supervisor and never
    /// returns from this call. See the module docs for every step.
    ///
    /// Do not combine with `Command::uid`, `Command::gid`, `Command::chroot`
    /// or `Command::current_dir`: the program starts in [`WORK_DIR`], and the
    /// program path and environment must name paths as the sandbox shows
    /// them.
    ///
    /// # Safety
    ///
    /// Call only in a child forked from the process that built `self`,
    /// between `fork` and `exec`, while it is single-threaded (as in
    /// `CommandExt::pre_exec`). It changes namespaces, credentials and the
    /// root of the calling process.
    pub unsafe fn enter(&self) -> io::Result<()> {
        // SAFETY: the caller guarantees a single-threaded forked child, which
        // is what `supervisor` requires.
        match unsafe { self.supervisor(None) } {
            Ok(()) => Ok(()),
            Err(failure) => {
                self.record(failure);
                Err(io::Error::from_raw_os_error(failure.errno))
            }
        }
    }

    /// [`Prepared::enter`] for a shell ([`Prepared::into_shell`]), whose
    /// forker reads the errno of a failed step on `report`: the init process
    /// then shares the supervisor's memory ([`sys::clone_vm`]), and writes
    /// its own failure there, since it cannot return through the
    /// supervisor's stack.
    ///
    /// # Safety
    ///
    /// As [`Prepared::enter`].
    pub(crate) unsafe fn enter_shell(&self, report: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: as in `enter`.
        match unsafe { self.supervisor(Some(report.as_raw_fd())) } {
            Ok(()) => Ok(()),
            Err(failure) => {
                self.record(failure);
                Err(io::Error::from_raw_os_error(failure.errno))
            }
        }
    }

    fn record(&self, failure: Failure) {
        let [i0, i1] = failure.index.to_le_bytes();
        let [e0, e1, e2, e3] = failure.errno.to_le_bytes();
        let record: [u8; RECORD_LEN] = [failure.step.code(), 0, i0, i1, e0, e1, e2, e3];
        // A full pipe (nobody reads the diagnostics) only loses the record.
        let _ = rustix::io::write(&self.diag_write, &record);
    }

    /// C: steps 1-10. Returns only on failure (or, through G and P, with
    /// `Ok` in the program's process). With `report` (a shell's), G shares
    /// C's memory and reports its own failure there.
    ///
    /// # Safety
    ///
    /// Single-threaded forked child only.
    unsafe fn supervisor(&self, report: Option<libc::c_int>) -> Result<(), Failure> {
        sys::reset_signal_dispositions();
        if let Some(procs) = &self.cgroup_procs {
            // "0": the writing process; one write, as the kernel parses it.
            write_all(procs, b"0").map_err(|errno| Failure::new(Step::JoinCgroup, errno))?;
        }
        let proc_self =
            rustix::fs::open(c"/proc/self", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(at(Step::OpenProcSelf))?;
        let mut clones: [Option<OwnedFd>; MAX_BINDS] = [const { None }; MAX_BINDS];
        let mut template = None;
        if self.resolved.root_host {
            self.raise_hard_limits()?;
            if let Some(tree) = &self.template {
                // Still in the mount namespace the template was made in,
                // and still root: the only place a detached tree clones.
                template = Some(
                    rustix::mount::open_tree(tree.as_fd(), c"", template_clone_flags())
                        .map_err(at(Step::CloneTemplate))?,
                );
            }
            self.clone_sources(&mut clones)?;
            // As root: the namespace is then owned by the host's user
            // namespace, where the run holds nothing.
            self.enter_outer_network()?;
            rustix::thread::set_thread_groups(&[]).map_err(at(Step::SetGroups))?;
            let gid = rustix::process::Gid::from_raw(self.host_gid);
            rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(at(Step::SetGid))?;
            let uid = rustix::process::Uid::from_raw(self.host_uid);
            rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(at(Step::SetUid))?;
            rustix::process::set_dumpable_behavior(DumpableBehavior::Dumpable).map_err(at(Step::SetDumpable))?;
        }

        if let Some(userns) = &self.zygote_userns {
            // The owner of the zygote's namespace, joining it: every
            // capability there, none outside (see `zygote_userns`).
            rustix::thread::move_into_link_name_space(userns.as_fd(), Some(rustix::thread::LinkNameSpaceType::User))
                .map_err(at(Step::JoinZygoteUser))?;
            self.enter_outer_network()?;
        }
        // SAFETY: CLONE_NEWUSER on a single-threaded process.
        unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) }.map_err(at(Step::UnshareUser))?;
        write_at(&proc_self, c"setgroups", b"deny\n", Step::DenySetgroups)?;
        let (uid_map, gid_map) = self.outer_maps();
        write_at(&proc_self, c"uid_map", uid_map, Step::WriteUidMap)?;
        write_at(&proc_self, c"gid_map", gid_map, Step::WriteGidMap)?;
        drop(proc_self);
        // The uid change cleared the death signal the runtime armed before
        // `enter` (and the user namespace may have): arm it again, and make
        // sure the host did not die in between (the signal would never come).
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(at(Step::DeathSignal))?;
        if rustix::process::getppid() != Some(self.resolved.host_pid) {
            // SAFETY: _exit is async-signal-safe; the host is gone.
            unsafe { libc::_exit(SUPERVISOR_LOST_EXIT) };
        }

        let mut namespaces = UnshareFlags::NEWNS | UnshareFlags::NEWPID | UnshareFlags::NEWIPC | UnshareFlags::NEWUTS;
        if matches!(self.network, NetworkNamespace::Inside) {
            namespaces |= UnshareFlags::NEWNET;
        }
        // SAFETY: namespace flags only, on a single-threaded process.
        unsafe { rustix::thread::unshare_unsafe(namespaces) }.map_err(at(Step::UnshareNamespaces))?;
        if !self.resolved.root_host {
            self.clone_sources(&mut clones)?;
        }
        rustix::mount::mount_change(c"/", MountPropagationFlags::REC | MountPropagationFlags::PRIVATE)
            .map_err(at(Step::MakeRootPrivate))?;
        let old_umask = rustix::process::umask(Mode::empty());
        self.build_root(&mut clones, template)?;
        rustix::process::umask(old_umask);

        rustix::system::sethostname(HOSTNAME.as_bytes()).map_err(at(Step::SetHostname))?;
        for (index, (path, value)) in self.resolved.ipc_limits.iter().enumerate() {
            let file = rustix::fs::open(*path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
                .map_err(at_entry(Step::LimitIpc, index))?;
            write_all(&file, value).map_err(|errno| Failure::at(Step::LimitIpc, index, errno))?;
        }
        let egress = self.listen_for_egress()?;
        // No sock_diag in this kernel costs the host its count of the
        // run's socket buffers, not the run.
        let sock_diag = rustix::net::socket_with(
            AddressFamily::NETLINK,
            rustix::net::SocketType::RAW,
            rustix::net::SocketFlags::CLOEXEC,
            Some(rustix::net::netlink::SOCK_DIAG),
        )
        .ok();
        sys::mount_setattr(&self.resolved.staging, false, sys::MOUNT_ATTR_RDONLY)
            .map_err(|errno| Failure::new(Step::RemountRootReadOnly, errno))?;
        let work_dir = rustix::fs::open(
            self.resolved.staged_work.as_c_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(at(Step::OpenWorkDir))?;

        let supervisor = rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty())
            .map_err(at(Step::OpenSupervisorPidfd))?;
        let (status_read, status_write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(at(Step::StatusPipe))?;
        let (go_read, go_write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(at(Step::StatusPipe))?;

        let split = match report.filter(|_| self.shell) {
            // A shell's G never forks the program: it may share C's memory
            // (one address space to copy and tear down, not two).
            Some(report) => {
                let start = InitStart {
                    prepared: self,
                    supervisor: supervisor.as_raw_fd(),
                    status_write: status_write.as_raw_fd(),
                    go: go_read.as_raw_fd(),
                    report,
                    not_its: [
                        status_read.as_raw_fd(),
                        work_dir.as_raw_fd(),
                        egress.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                        sock_diag.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                        go_write.as_raw_fd(),
                    ],
                };
                // SAFETY: single-threaded; `start_init` is written for it.
                unsafe { start_init(start) }
            }
            // SAFETY: the process is single-threaded, so the child is a
            // complete copy; both sides only make syscalls afterwards.
            None => unsafe { sys::fork() },
        };
        match split {
            Err(errno) => Err(Failure::new(Step::Fork, errno)),
            Ok(0) => {
                drop(status_read);
                drop(work_dir);
                drop(egress);
                drop(sock_diag);
                drop(go_write);
                self.init(supervisor, status_write, go_read)
            }
            Ok(init) => {
                // Before G may go on (so before the program exists): from
                // now on only the program's end or SIGKILL ends C.
                sys::ignore_sigterm();
                self.send_handoff(
                    init,
                    work_dir.as_fd(),
                    sock_diag.as_ref().map(AsFd::as_fd),
                    egress.as_ref().map(AsFd::as_fd),
                );
                // Only now may G go on: the program's exec (which ends the
                // host's `spawn()`) then always follows the handoff.
                let _ = rustix::io::write(&go_write, b"g");
                // SAFETY: `init` is our only child; after the fork this
                // process only waits for it and exits.
                unsafe { sys::supervise(init, status_read.as_raw_fd()) }
            }
        }
    }

    /// The run's network namespace, when it is made (or joined) outside the
    /// run's user namespace ([`Prepared::outer_network_namespace`]).
    fn enter_outer_network(&self) -> Result<(), Failure> {
        match &self.network {
            NetworkNamespace::Inside => Ok(()),
            NetworkNamespace::Outside => {
                // SAFETY: CLONE_NEWNET on a single-threaded process.
                unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }.map_err(at(Step::UnshareNetwork))
            }
            NetworkNamespace::Join(fd) => {
                rustix::thread::move_into_link_name_space(fd.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
                    .map_err(at(Step::JoinNetwork))
            }
        }
    }

    fn raise_hard_limits(&self) -> Result<(), Failure> {
        for (resource, value) in self.resolved.limits {
            let current = rustix::process::getrlimit(resource);
            if let Some(max) = current.maximum {
                if max < value {
                    rustix::process::setrlimit(resource, Rlimit { current: current.current, maximum: Some(value) })
                        .map_err(at(Step::RaiseHardLimit))?;
                }
            }
        }
        Ok(())
    }

    /// Clone every bind source as a detached mount and seal it.
    fn clone_sources(&self, clones: &mut [Option<OwnedFd>; MAX_BINDS]) -> Result<(), Failure> {
        for (index, (bind, slot)) in self.resolved.binds.iter().zip(clones.iter_mut()).enumerate() {
            if bind.in_template && self.template.is_some() {
                continue;
            }
            let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
            if bind.recursive {
                flags |= OpenTreeFlags::AT_RECURSIVE;
            }
            let fd = rustix::mount::open_tree(rustix::fs::CWD, bind.source.as_c_str(), flags)
                .map_err(at_entry(Step::CloneMount, index))?;
            sys::mount_setattr_fd(fd.as_fd(), bind.recursive, bind.attr_set)
                .map_err(|errno| Failure::at(Step::SealMount, index, errno))?;
            *slot = Some(fd);
        }
        Ok(())
    }

    /// Step 8: the new root, in the tmpfs mounted over [`STAGING`], or
    /// the clone of the root template (`template`) attached there.
    fn build_root(&self, clones: &mut [Option<OwnedFd>; MAX_BINDS], template: Option<OwnedFd>) -> Result<(), Failure> {
        match template {
            Some(tree) => self.attach_template(&tree)?,
            None => self.build_skeleton()?,
        }
        let from_template = self.template.is_some();
        for (index, dir) in self.resolved.dirs.iter().enumerate() {
            if dir.in_template && from_template {
                continue;
            }
            rustix::fs::mkdir(dir.path.as_c_str(), Mode::from_raw_mode(0o755))
                .map_err(at_entry(Step::CreateDir, index))?;
        }
        for (index, (bind, slot)) in self.resolved.binds.iter().zip(clones.iter_mut()).enumerate() {
            if bind.in_template && from_template {
                continue;
            }
            match bind.create {
                Some(NodeKind::Dir) => {
                    rustix::fs::mkdir(bind.target.as_c_str(), Mode::from_raw_mode(0o755))
                        .map_err(at_entry(Step::CreateMountPoint, index))?;
                }
                Some(NodeKind::File) => {
                    rustix::fs::open(
                        bind.target.as_c_str(),
                        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                        Mode::from_raw_mode(0o644),
                    )
                    .map_err(at_entry(Step::CreateMountPoint, index))?;
                }
                None => {}
            }
            let Some(clone) = slot.take() else {
                return Err(Failure::at(Step::AttachMount, index, libc::EBADF));
            };
            rustix::mount::move_mount(
                clone.as_fd(),
                c"",
                rustix::fs::CWD,
                bind.target.as_c_str(),
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )
            .map_err(at_entry(Step::AttachMount, index))?;
        }
        for (index, link) in self.resolved.symlinks.iter().enumerate() {
            if link.in_template && from_template {
                continue;
            }
            rustix::fs::symlink(link.target_text.as_c_str(), link.link.as_c_str())
                .map_err(at_entry(Step::CreateSymlink, index))?;
        }
        for (index, file) in self.resolved.files.iter().enumerate() {
            if file.in_template && from_template {
                continue;
            }
            let fd = rustix::fs::open(
                file.path.as_c_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map_err(at_entry(Step::WriteFile, index))?;
            write_all(&fd, file.contents).map_err(|errno| Failure::at(Step::WriteFile, index, errno))?;
        }
        Ok(())
    }

    /// Step 8 without a template: the root's tmpfs, its fixed layout, and
    /// the run's tmpfs staged ([`Prepared::stage_disk`]).
    fn build_skeleton(&self) -> Result<(), Failure> {
        rustix::mount::mount(
            c"tmpfs",
            self.resolved.staging.as_c_str(),
            c"tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            self.resolved.root_tmpfs_data.as_c_str(),
        )
        .map_err(at(Step::MountTmpfs))?;
        for (index, dir) in self.resolved.fixed_dirs.iter().enumerate() {
            rustix::fs::mkdir(dir.as_c_str(), Mode::from_raw_mode(0o755))
                .map_err(at_entry(Step::CreateLayout, index))?;
        }
        self.stage_disk()
    }

    /// Step 8 with a template: its clone attached at [`STAGING`], and the
    /// run's tmpfs staged ([`Prepared::stage_disk`]).
    fn attach_template(&self, tree: &OwnedFd) -> Result<(), Failure> {
        rustix::mount::move_mount(
            tree.as_fd(),
            c"",
            rustix::fs::CWD,
            self.resolved.staging.as_c_str(),
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
        .map_err(at(Step::AttachTemplate))?;
        self.stage_disk()
    }

    /// The run's tmpfs, mounted on the new root's `/proc` directory (a
    /// template's root is read-only; any root has that directory): the
    /// run's `boot_id` at its top, and its `work`, `tmp` and `shm`
    /// directories, bound where they belong. It stays mounted there: G
    /// mounts procfs over it (step 12), which hides it for good (the
    /// program holds no capability over the mount namespace, and a mount
    /// namespace it could make would get the two locked together).
    /// Unmounting it instead cost a grace period of RCU, expedited (an
    /// interrupt to every CPU), per run.
    fn stage_disk(&self) -> Result<(), Failure> {
        rustix::mount::mount(
            c"tmpfs",
            self.resolved.staged_proc.as_c_str(),
            c"tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            self.resolved.disk_tmpfs_data.as_c_str(),
        )
        .map_err(at(Step::MountDisk))?;
        self.write_boot_id()?;
        for (index, dir) in self.resolved.disk_dirs.iter().enumerate() {
            rustix::fs::mkdir(dir.staged.as_c_str(), Mode::from_raw_mode(dir.mode))
                .map_err(at_entry(Step::CreateDiskDir, index))?;
            rustix::mount::mount_bind(dir.staged.as_c_str(), dir.target.as_c_str())
                .map_err(at_entry(Step::BindDiskDir, index))?;
        }
        Ok(())
    }

    /// The run's `boot_id`, at `/proc/boot_id` of the staged root (G
    /// clones it before procfs covers it).
    fn write_boot_id(&self) -> Result<(), Failure> {
        let boot_id = rustix::fs::open(
            self.resolved.staged_boot_id.as_c_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o444),
        )
        .map_err(at(Step::MaskBootId))?;
        write_all(&boot_id, &self.boot_id).map_err(|errno| Failure::new(Step::MaskBootId, errno))
    }

    /// Step 9, with egress: `lo` up, and a TCP socket listening on the
    /// policy's loopback address, for the host. Made before G is forked
    /// (which closes its copy at once) so that a failure is a step of
    /// the spawn, with its errno.
    fn listen_for_egress(&self) -> Result<Option<OwnedFd>, Failure> {
        let Some(address) = self.resolved.egress else { return Ok(None) };
        for (index, (path, value)) in self.resolved.net_limits.iter().enumerate() {
            let file = rustix::fs::open(*path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
                .map_err(at_entry(Step::LimitNetwork, index))?;
            write_all(&file, value).map_err(|errno| Failure::at(Step::LimitNetwork, index, errno))?;
        }
        let socket = rustix::net::socket_with(
            AddressFamily::INET,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(at(Step::EgressListen))?;
        sys::loopback_up(socket.as_fd()).map_err(|errno| Failure::new(Step::LoopbackUp, errno))?;
        rustix::net::bind(&socket, &address).map_err(at(Step::EgressListen))?;
        rustix::net::listen(&socket, EGRESS_BACKLOG).map_err(at(Step::EgressListen))?;
        Ok(Some(socket))
    }

    /// Tell the host G's pid and hand it the working directory (and the
    /// egress listener). Failing to send only costs the host its view of
    /// the run's files and processes (and the program its egress: the
    /// listener closes with this process's descriptors).
    fn send_handoff(
        &self,
        init: libc::pid_t,
        work_dir: BorrowedFd<'_>,
        sock_diag: Option<BorrowedFd<'_>>,
        egress: Option<BorrowedFd<'_>>,
    ) {
        let [p0, p1, p2, p3] = init.to_le_bytes();
        let [t0, t1, t2, t3] = HANDOFF_TAG;
        let flags = if sock_diag.is_some() { HANDOFF_SOCK_DIAG } else { 0 };
        let data = [p0, p1, p2, p3, t0, t1, t2, t3, flags];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        // In order: the working directory, the sock_diag socket, the
        // egress listener; the flags and the policy say which are there.
        let mut list = [work_dir; 3];
        let mut count = 1;
        for fd in [sock_diag, egress].into_iter().flatten() {
            if let Some(slot) = list.get_mut(count) {
                *slot = fd;
                count += 1;
            }
        }
        let fds = list.get(..count).unwrap_or_default();
        if control.push(SendAncillaryMessage::ScmRights(fds)) {
            let _ = rustix::net::sendmsg(
                &self.handoff_write,
                &[io::IoSlice::new(&data)],
                &mut control,
                SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
            );
        }
    }

    /// Shell mode: hand the host the run's namespaces, its root and the
    /// finished ruleset (see [`Join`]).
    fn send_join(&self, ruleset: BorrowedFd<'_>) -> Result<(), Failure> {
        let mut opened: [Option<OwnedFd>; JOIN_FDS - 1] = [const { None }; JOIN_FDS - 1];
        let names: [&CStr; 6] = [
            c"/proc/self/ns/user",
            c"/proc/self/ns/mnt",
            c"/proc/self/ns/pid",
            c"/proc/self/ns/net",
            c"/proc/self/ns/ipc",
            c"/proc/self/ns/uts",
        ];
        // Through this process's own pidfd where the kernel has the
        // requests (6.11): each name opened under `/proc/self/ns` made a
        // procfs inode and dentry in this fresh process, about 8 us apiece
        // with their teardown. A kernel without them answers the first
        // request with an error, and the rest come from `/proc`.
        let mut own = rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty()).ok();
        for (index, ((slot, name), request)) in
            opened.iter_mut().zip(names).zip(sys::PIDFD_GET_JOIN_NAMESPACES).enumerate()
        {
            let through_pidfd = own.as_ref().and_then(|pidfd| sys::pidfd_namespace(pidfd.as_fd(), request).ok());
            if through_pidfd.is_none() {
                own = None;
            }
            *slot = Some(match through_pidfd {
                Some(fd) => fd,
                None => rustix::fs::open(name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
                    .map_err(at_entry(Step::JoinHandoff, index))?,
            });
        }
        drop(own);
        if let Some(slot) = opened.last_mut() {
            *slot = Some(
                rustix::fs::open(c"/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                    .map_err(at_entry(Step::JoinHandoff, 6))?,
            );
        }
        let mut fds: [Option<BorrowedFd<'_>>; JOIN_FDS] = [None; JOIN_FDS];
        for (slot, fd) in fds.iter_mut().zip(opened.iter()) {
            *slot = fd.as_ref().map(AsFd::as_fd);
        }
        if let Some(last) = fds.last_mut() {
            *last = Some(ruleset);
        }
        let mut list: [BorrowedFd<'_>; JOIN_FDS] = [ruleset; JOIN_FDS];
        for (slot, fd) in list.iter_mut().zip(fds) {
            *slot = fd.ok_or(Failure::new(Step::JoinHandoff, libc::EBADF))?;
        }
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(JOIN_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&list)) {
            return Err(Failure::new(Step::JoinHandoff, libc::ENOBUFS));
        }
        rustix::net::sendmsg(
            &self.handoff_write,
            &[io::IoSlice::new(&JOIN_TAG)],
            &mut control,
            SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
        )
        .map_err(at(Step::JoinHandoff))?;
        Ok(())
    }

    /// G: steps 11-15. Returns only on failure, or in P.
    fn init(&self, supervisor: OwnedFd, status_write: OwnedFd, go: OwnedFd) -> Result<(), Failure> {
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(at(Step::DeathSignal))?;
        match sys::poll_readable(supervisor.as_raw_fd()) {
            Ok(false) => {}
            Ok(true) => return Err(Failure::new(Step::SupervisorGone, libc::ESRCH)),
            Err(errno) => return Err(Failure::new(Step::SupervisorGone, errno)),
        }
        drop(supervisor);
        // Wait for C's handoff to the host; EOF means C died.
        let mut byte = [0u8; 1];
        loop {
            match rustix::io::read(&go, &mut byte) {
                Ok(1) => break,
                Ok(_) => return Err(Failure::new(Step::SupervisorGone, libc::ESRCH)),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(Failure::new(Step::SupervisorGone, e.raw_os_error())),
            }
        }
        drop(go);

        // The run's boot_id, cloned before procfs covers the file.
        let boot_id = rustix::mount::open_tree(
            rustix::fs::CWD,
            self.resolved.staged_boot_id.as_c_str(),
            OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .map_err(at(Step::MaskBootId))?;
        sys::mount_setattr_fd(
            boot_id.as_fd(),
            false,
            sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOEXEC,
        )
        .map_err(|errno| Failure::new(Step::MaskBootId, errno))?;
        rustix::mount::mount(
            c"proc",
            self.resolved.staged_proc.as_c_str(),
            c"proc",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            c"hidepid=invisible",
        )
        .map_err(at(Step::MountProc))?;
        rustix::mount::mount_bind(self.resolved.staged_proc_sys.as_c_str(), self.resolved.staged_proc_sys.as_c_str())
            .map_err(at(Step::ProtectProcSys))?;
        // The host's boot_id names the host's boot to anything that reads
        // it (and tells runs of one host apart from another's): each run
        // reads its own.
        rustix::mount::move_mount(
            boot_id.as_fd(),
            c"",
            rustix::fs::CWD,
            self.resolved.staged_proc_boot_id.as_c_str(),
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
        .map_err(at(Step::MaskBootId))?;
        drop(boot_id);
        sys::mount_setattr(&self.resolved.staged_proc_sys, true, sys::MOUNT_ATTR_RDONLY)
            .map_err(|errno| Failure::new(Step::ProtectProcSys, errno))?;

        rustix::process::chdir(self.resolved.staging.as_c_str()).map_err(at(Step::PivotRoot))?;
        rustix::process::pivot_root(c".", c".").map_err(at(Step::PivotRoot))?;
        rustix::mount::unmount(c".", UnmountFlags::DETACH).map_err(at(Step::DetachOldRoot))?;
        rustix::process::chdir(c"/").map_err(at(Step::EnterRunDir))?;
        rustix::process::chdir(c"/work").map_err(at(Step::EnterRunDir))?;

        let mut ruleset = self
            .ruleset
            .try_clone()
            .map_err(|e| Failure::new(Step::LandlockRule, e.raw_os_error().unwrap_or(libc::EBADF)))?;
        for (index, (path, grant)) in self.resolved.landlock_dirs.iter().enumerate() {
            let dir = rustix::fs::open(*path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(at_entry(Step::LandlockRule, index))?;
            let access = match grant {
                LandlockGrant::List => AccessFs::ReadDir.into(),
                LandlockGrant::Read => AccessFs::ReadFile | AccessFs::ReadDir,
                LandlockGrant::All => AccessFs::from_all(self.resolved.landlock_abi),
            };
            ruleset = ruleset
                .add_rule(PathBeneath::new(dir.as_fd(), access))
                .map_err(|e| Failure::at(Step::LandlockRule, index, errno_of(&e, libc::EINVAL)))?;
        }

        if self.shell {
            drop(status_write);
            let ruleset: Option<OwnedFd> = ruleset.into();
            let ruleset = ruleset.ok_or(Failure::new(Step::JoinHandoff, libc::EBADF))?;
            self.send_join(ruleset.as_fd())?;
            // Nothing of the run may trace, read or see this process.
            let _ = rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable);
            // SAFETY: single-threaded; it only reaps from now on.
            unsafe { sys::reap_forever() }
        }

        // SAFETY: the process is single-threaded, so the child is a complete
        // copy; both sides only make syscalls afterwards.
        match unsafe { sys::fork() } {
            Err(errno) => Err(Failure::new(Step::ForkProgram, errno)),
            Ok(0) => {
                drop(status_write);
                self.program(ruleset)
            }
            Ok(program) => {
                // Before this the program's process had to stay dumpable:
                // it writes its own uid map. From now on nothing of the run
                // may trace, read or even see this process.
                let _ = rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable);
                // SAFETY: `program` is our child and this process is
                // single-threaded; it only reaps from now on.
                unsafe { sys::reap_as_init(program, status_write.as_raw_fd()) }
            }
        }
    }

    /// P: steps 16-18 (the [`crate::confine`] list). `Ok` means: exec the
    /// interpreter now.
    fn program(&self, ruleset: RulesetCreated) -> Result<(), Failure> {
        crate::confine::apply(&self.resolved.confine, ruleset)
    }
}

/// What a shell's G starts from when it shares C's memory: the
/// descriptors are numbers in G's own copy of C's file table.
struct InitStart {
    prepared: *const Prepared,
    supervisor: libc::c_int,
    status_write: libc::c_int,
    go: libc::c_int,
    /// Where G writes the errno of a failed step (the shell's forker reads it).
    report: libc::c_int,
    /// C's own descriptors, which G closes (-1: none).
    not_its: [libc::c_int; 5],
}

/// The bytes of G's stack: its steps touch two pages of it (8 KiB
/// resident in a shell's G, read from its `smaps`); the rest is headroom
/// that costs nothing until touched.
const INIT_STACK_BYTES: usize = 256 * 1024;

/// Clone G onto a stack of its own, sharing C's memory ([`sys::clone_vm`]).
/// `start` is copied to the bottom of that stack, which C never touches, so
/// G reads it while C goes on. Returns G's pid in C (G never returns here).
///
/// # Safety
///
/// C, single-threaded, right before its handoff: from the clone on, C only
/// makes syscalls without `errno` or the allocator until it exits
/// (`send_handoff`, the "go" write, [`sys::supervise`]), and G allocates
/// nothing before C's "go" (it only waits for it).
unsafe fn start_init(start: InitStart) -> Result<libc::pid_t, i32> {
    let (low, top) = sys::child_stack(INIT_STACK_BYTES)?;
    let slot = low.cast::<InitStart>();
    // SAFETY: `low` is page-aligned (so aligned for `InitStart`), at least
    // INIT_STACK_BYTES long, and no reference names it; the stack grows down
    // from `top`, far above these bytes.
    unsafe { slot.write(start) };
    // SAFETY: `top` tops a stack nothing else uses, `slot` holds what
    // `init_entry` reads and is never freed, and `init_entry` never returns.
    unsafe { sys::clone_vm(init_entry, top, slot.cast()) }
}

/// G's first frame when it shares C's memory: its steps as after a fork,
/// then, on failure, the record and the report the fork's return path
/// would have written.
extern "C" fn init_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `start_init` passes the `InitStart` it wrote at the bottom of
    // this process's stack; it is read once, here.
    let start = unsafe { arg.cast::<InitStart>().read() };
    for fd in start.not_its.into_iter().filter(|fd| *fd >= 0) {
        // SAFETY: C's descriptor in this process's own file table; nothing
        // here uses it (C's `OwnedFd`s close their own copies).
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    // SAFETY: C never drops or moves its `Prepared` (it only exits), and
    // this process shares C's memory.
    let prepared = unsafe { &*start.prepared };
    // SAFETY: G's own copies of the descriptors C made for it, each owned
    // here alone.
    let (supervisor, status_write, go) = unsafe {
        (
            OwnedFd::from_raw_fd(start.supervisor),
            OwnedFd::from_raw_fd(start.status_write),
            OwnedFd::from_raw_fd(start.go),
        )
    };
    let failure = match prepared.init(supervisor, status_write, go) {
        Err(failure) => failure,
        // A shell's G never returns `Ok` (it reaps until killed).
        Ok(()) => Failure::new(Step::Fork, libc::EINVAL),
    };
    prepared.record(failure);
    // SAFETY: G's own copy of the forker's report pipe, open until exit.
    let report = unsafe { BorrowedFd::borrow_raw(start.report) };
    let _ = rustix::io::write(report, &failure.errno.to_le_bytes());
    // SAFETY: ends G without running exit handlers or destructors.
    unsafe { libc::_exit(127) }
}

/// Write all of `data` to `fd` (short writes continue).
fn write_all(fd: &OwnedFd, mut data: &[u8]) -> Result<(), i32> {
    while !data.is_empty() {
        match rustix::io::write(fd, data) {
            Ok(0) => return Err(libc::EIO),
            Ok(n) => data = data.get(n..).unwrap_or_default(),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.raw_os_error()),
        }
    }
    Ok(())
}

/// Write `data` in one `write` to `<dir>/<name>` (a `/proc/self` map file:
/// the kernel takes a map in one write only).
fn write_at(dir: &OwnedFd, name: &CStr, data: &[u8], step: Step) -> Result<(), Failure> {
    let file = rustix::fs::openat(dir, name, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty()).map_err(at(step))?;
    let written = rustix::io::write(&file, data).map_err(at(step))?;
    if written != data.len() {
        return Err(Failure::new(step, libc::EIO));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::landlock_rules::PathRule;
    use crate::plan::{SHM_DIR, TMP_DIR};
    use crate::resolved::STAGING;
    use crate::Preparations;

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

    #[test]
    fn every_step_round_trips_its_code() {
        for step in Step::ALL {
            assert_eq!(Step::from_code(step.code()), Some(step));
        }
        assert_eq!(Step::from_code(0), None);
    }

    #[test]
    fn the_landlock_dirs_are_the_fixed_layout() {
        let dirs = ["/", "/etc", PROC_DIR, WORK_DIR, TMP_DIR, SHM_DIR];
        let listed = [c"/", c"/etc", c"/proc", c"/work", c"/tmp", c"/dev/shm"];
        for (dir, listed) in dirs.iter().zip(listed) {
            assert_eq!(listed.to_str().unwrap(), *dir);
        }
        assert_eq!(STAGING, TMP_DIR, "the staging mount point must exist on every host");
    }
}
