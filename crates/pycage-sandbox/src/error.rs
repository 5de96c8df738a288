//! Typed errors. Each variant names the layer that failed and what the caller
//! does next; none of them is ever "run with less isolation".

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a sandbox could not be prepared or entered.
///
/// Every variant is a refusal to run: the caller reports it (a misuse error
/// for policy problems, an environment error for missing kernel features) and
/// never falls back to a weaker sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The policy names a relative path. Pass absolute paths; the sandbox
    /// exposes host paths by their absolute path.
    #[error("sandbox policy: {path:?} is not an absolute path; pass absolute paths")]
    RelativePath {
        /// The offending path as given.
        path: PathBuf,
    },
    /// A path contains a NUL byte and cannot be handed to the kernel.
    #[error("sandbox policy: {path:?} contains a NUL byte")]
    NulInPath {
        /// The offending path as given.
        path: PathBuf,
    },
    /// The policy asks for host uid or gid 0. A run must have an
    /// unprivileged host id; allocate one per run.
    #[error("sandbox policy: uid {uid} / gid {gid}: the child must run as a non-zero (unprivileged) uid and gid")]
    PrivilegedId {
        /// Requested uid.
        uid: u32,
        /// Requested gid.
        gid: u32,
    },
    /// A path inside the sandbox is not absolute and normal (it has `.` or
    /// `..` components, or is `/`).
    #[error("sandbox policy: inside path {path:?} must be absolute, without `.` or `..`, and not `/`")]
    BadInsidePath {
        /// The offending path as given.
        path: PathBuf,
    },
    /// An entry targets the sandbox's fixed layout (`/`, `/proc`, `/tmp`,
    /// `/work`, `/dev`, `/dev/shm`, `/etc`, or a generated `/etc` file).
    #[error("sandbox policy: {path:?} is part of the sandbox's own layout (/proc, /tmp, /work, /dev, /dev/shm, /etc and its generated files); expose something inside it instead")]
    Reserved {
        /// The target inside the sandbox.
        path: PathBuf,
    },
    /// A remapped entry would be mounted inside another exposed path, where
    /// its mount point cannot be created.
    #[error(
        "sandbox policy: {path:?} would be mounted inside {outer:?}, which is exposed read-only; choose another place"
    )]
    Nested {
        /// The target inside the sandbox.
        path: PathBuf,
        /// The exposed path it lies in.
        outer: PathBuf,
    },
    /// The policy would expose `/` itself, which defeats the private root.
    #[error("sandbox policy: exposing {path:?} would expose the whole host root; list the directories the child needs instead")]
    ExposesRoot {
        /// The path that resolved to `/`.
        path: PathBuf,
    },
    /// One resolved path is listed with two different access kinds
    /// (read-only and read-write, or a device and a directory).
    #[error("sandbox policy: {path:?} is listed both as {first} and as {second}; list it once")]
    Conflict {
        /// The resolved path.
        path: PathBuf,
        /// The first kind it was listed as.
        first: &'static str,
        /// The second kind it was listed as.
        second: &'static str,
    },
    /// A path of the policy could not be resolved on the host (other than a
    /// missing read-only path, which is skipped and recorded in the plan).
    #[error("mount layer: cannot resolve {path:?}: {source}")]
    Resolve {
        /// The path as given.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// An entry of `devices` is not a character device.
    #[error("mount layer: device {path:?} is not a character device; list only device nodes such as /dev/null")]
    NotADevice {
        /// The path as given.
        path: PathBuf,
    },
    /// The policy lists more paths than the sandbox plans for.
    #[error("sandbox policy: {count} mount entries exceed the limit of {limit}")]
    TooManyPaths {
        /// Entries after resolution.
        count: usize,
        /// [`crate::MAX_MOUNT_ENTRIES`].
        limit: usize,
    },
    /// The host is root but the policy names no per-run host ids: a root
    /// host must give every run its own unprivileged uid.
    #[error("sandbox policy: the host is root, so the policy must give the run its own unprivileged host uid and gid (host_ids)")]
    NoRunIds,
    /// The policy names host ids, but only root can switch to them.
    #[error("sandbox policy: host_ids (uid {uid}) need a root host; this process has euid {euid}, and runs as its own uid (leave host_ids empty)")]
    RunIdsNeedRoot {
        /// The requested uid.
        uid: u32,
        /// The effective uid of the caller.
        euid: u32,
    },
    /// The kernel's Landlock is missing or older than the sandbox requires.
    #[error("landlock layer: kernel reports {found}; pycage needs Landlock ABI {required} or newer (Linux 6.2+ with landlock in the `lsm=` list)")]
    LandlockUnavailable {
        /// What the kernel reported (an ABI version or the reason it has none).
        found: String,
        /// The minimum ABI.
        required: u32,
    },
    /// Building the Landlock ruleset failed.
    #[error("landlock layer: cannot build the ruleset: {0}")]
    Landlock(#[source] landlock::RulesetError),
    /// Opening a path for a Landlock rule failed.
    #[error("landlock layer: cannot open {path:?} for a rule: {source}")]
    LandlockPath {
        /// The resolved path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: landlock::PathFdError,
    },
    /// The seccomp filter does not compile for this architecture.
    #[error("seccomp layer: cannot compile the filter: {0}")]
    Seccomp(#[source] seccompiler::BackendError),
    /// A rule of the seccomp policy cannot be expressed (a constant of
    /// this crate, so a bug caught by its tests).
    #[error("seccomp layer: cannot compile the filter: {0}")]
    SeccompPolicy(&'static str),
    /// This CPU architecture has no seccomp filter in pycage.
    #[error("seccomp layer: architecture {arch} is not supported (x86_64 and aarch64 are)")]
    UnsupportedArch {
        /// `std::env::consts::ARCH`.
        arch: &'static str,
    },
    /// A pipe or file descriptor the parent prepares could not be created.
    #[error("sandbox: cannot create the diagnostics pipe: {0}")]
    Pipe(#[source] io::Error),

    /// The run's `boot_id` could not be drawn.
    #[error("sandbox: cannot draw the run's boot_id (getrandom): {0}")]
    Random(#[source] io::Error),
    /// A step in the forked child failed; the spawn failed with it.
    #[error(transparent)]
    Child(#[from] ChildFailure),
    /// The spawn failed for a reason the sandbox did not record (for example
    /// the interpreter could not be executed).
    #[error("spawn failed: {0}")]
    Spawn(#[source] io::Error),
    /// The user namespace a zygote lives in (see
    /// [`crate::zygote_user_namespace`]) could not be made.
    #[error("sandbox: cannot make the zygote's user namespace: {what}: {source}")]
    ZygoteUserNamespace {
        /// The step that failed.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// A step of [`crate::Prepared::enter`], recorded when it fails.
///
/// The forked child can only hand an errno back through `std`'s spawn error;
/// the step (and the path it concerned) travel through a side pipe so the
/// parent can say which layer failed. See
/// [`crate::Prepared::take_child_failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Step {
    /// Joining the run's cgroup (writing `0` to its `cgroup.procs`).
    JoinCgroup = 1,
    /// Opening `/proc/self` before the namespaces change.
    OpenProcSelf,
    /// Raising a hard rlimit (root host only) so the program can be given it.
    RaiseHardLimit,
    /// Cloning a path to expose (`open_tree(OPEN_TREE_CLONE)`).
    CloneMount,
    /// Setting read-only/nosuid/nodev on a clone (`mount_setattr`).
    SealMount,
    /// `setgroups([])` (root host only).
    SetGroups,
    /// `setresgid` to the run's host gid (root host only).
    SetGid,
    /// `setresuid` to the run's host uid (root host only).
    SetUid,
    /// `prctl(PR_SET_DUMPABLE)`.
    SetDumpable,
    /// `unshare(CLONE_NEWUSER)`: the run's user namespace.
    UnshareUser,
    /// Writing `deny` to `/proc/self/setgroups`.
    DenySetgroups,
    /// Writing `/proc/self/uid_map`.
    WriteUidMap,
    /// Writing `/proc/self/gid_map`.
    WriteGidMap,
    /// `prctl(PR_SET_PDEATHSIG)`.
    DeathSignal,
    /// `unshare(CLONE_NEWNS | NEWPID | NEWUTS)`, with `NEWNET | NEWIPC`
    /// unless they were made before ([`Step::UnshareNetwork`]).
    UnshareNamespaces,
    /// Making `/` recursively private in the new mount namespace.
    MakeRootPrivate,
    /// Mounting the tmpfs that becomes the new root.
    MountTmpfs,
    /// Creating a directory of the fixed layout.
    CreateLayout,
    /// Mounting the run's size-capped tmpfs.
    MountDisk,
    /// Creating `work`, `tmp` or `shm` in the run's tmpfs.
    CreateDiskDir,
    /// Bind-mounting a directory of the run's tmpfs.
    BindDiskDir,
    /// Creating a directory in the new root.
    CreateDir,
    /// Creating a mount point (directory or empty file) in the new root.
    CreateMountPoint,
    /// Attaching a clone at its target (`move_mount`).
    AttachMount,
    /// Creating a symlink in the new root.
    CreateSymlink,
    /// Writing a generated file (`/etc/passwd`, ...).
    WriteFile,
    /// `sethostname` in the run's UTS namespace.
    SetHostname,
    /// Writing an IPC limit (`kernel.shmmax`, ...) of the run's IPC namespace.
    LimitIpc,
    /// Making the new root's tmpfs read-only.
    RemountRootReadOnly,
    /// Opening the run's working directory for the host.
    OpenWorkDir,
    /// Opening a pidfd on the supervisor before the fork.
    OpenSupervisorPidfd,
    /// Creating the pipe the init process reports the program's exit on.
    StatusPipe,
    /// Forking the namespace's init process.
    Fork,
    /// The supervisor died before the init process armed its death signal.
    SupervisorGone,
    /// Mounting `/proc` of the run's PID namespace.
    MountProc,
    /// Making `/proc/sys` read-only.
    ProtectProcSys,
    /// `pivot_root` into the new root.
    PivotRoot,
    /// Detaching the old root.
    DetachOldRoot,
    /// `chdir` into the working directory.
    EnterRunDir,
    /// Adding a Landlock rule for the new root (`/`, `/etc`, `/proc`, `/work`, `/tmp`, `/dev/shm`).
    LandlockRule,
    /// Forking the program's process.
    ForkProgram,
    /// Setting an rlimit in the program's process.
    SetLimit,
    /// `unshare(CLONE_NEWUSER)` for the program (uid 1000 inside).
    UnshareProgramUser,
    /// Writing the program's uid/gid maps.
    WriteProgramMaps,
    /// Marking descriptors above fd 3 close-on-exec.
    CloseInheritedFds,
    /// Dropping every capability (bounding, ambient, permitted).
    DropCapabilities,
    /// `prctl(PR_SET_NO_NEW_PRIVS)`.
    NoNewPrivs,
    /// `landlock_restrict_self`.
    Landlock,
    /// Landlock did not report the ruleset as fully enforced.
    LandlockNotEnforced,
    /// Installing a seccomp filter.
    Seccomp,
    /// A shell's init handing its namespaces, root and ruleset to the host.
    JoinHandoff,
    /// Bringing the run's `lo` up (egress only).
    LoopbackUp,
    /// Creating, binding or listening on the egress socket inside the run.
    EgressListen,
    /// Writing a limit of the run's network namespace (`net.ipv4.tcp_rmem`,
    /// `tcp_wmem`; egress only).
    LimitNetwork,
    /// Opening the `NETLINK_SOCK_DIAG` socket the host counts the run's
    /// socket buffers through.
    OpenSockDiag,
    /// Mounting the run's own `boot_id` over the host's.
    MaskBootId,
    /// `unshare(CLONE_NEWCGROUP)` for the program.
    UnshareProgramCgroup,
    /// Joining the user namespace of the runtime's zygote before making the
    /// run's (a host that is not root: the zygote can then fork its children
    /// straight into the run's PID namespace).
    JoinZygoteUser,
    /// Making the run's network and IPC namespaces before its user
    /// namespace, so that the run holds no capability over them and they
    /// can serve later runs ([`crate::Prepared::outer_network_namespace`]).
    UnshareNetwork,
    /// Joining the network namespace of an earlier run, all of whose
    /// processes are gone ([`crate::Prepared::outer_network_namespace`]).
    JoinNetwork,
    /// Cloning the root template (`open_tree` of a detached tree, Linux
    /// 6.15+; [`crate::RootTemplates`]).
    CloneTemplate,
    /// Attaching the clone of the root template as the new root (`move_mount`).
    AttachTemplate,
    /// Joining the IPC namespace of an earlier run, made outside its user
    /// namespace with its network namespace
    /// ([`crate::Prepared::outer_network_namespace`]).
    JoinIpc,
    /// Removing the SysV objects an earlier run left in the IPC namespace
    /// joined ([`Step::JoinIpc`]).
    CleanIpc,
    /// A segment an earlier run left in the IPC namespace joined is still
    /// attached somewhere: the namespace serves no later run.
    IpcInUse,
}

impl Step {
    /// All steps, in the order of their wire codes: the order
    /// [`crate::Prepared::enter`] runs them, except the steps added later,
    /// which are appended so that the codes of the others stay
    /// ([`Step::JoinZygoteUser`], [`Step::UnshareNetwork`],
    /// [`Step::JoinNetwork`], [`Step::JoinIpc`], [`Step::CleanIpc`] and
    /// [`Step::IpcInUse`] run before [`Step::UnshareUser`], and so may
    /// [`Step::LimitIpc`]).
    pub const ALL: [Step; 65] = [
        Step::JoinCgroup,
        Step::OpenProcSelf,
        Step::RaiseHardLimit,
        Step::CloneMount,
        Step::SealMount,
        Step::SetGroups,
        Step::SetGid,
        Step::SetUid,
        Step::SetDumpable,
        Step::UnshareUser,
        Step::DenySetgroups,
        Step::WriteUidMap,
        Step::WriteGidMap,
        Step::DeathSignal,
        Step::UnshareNamespaces,
        Step::MakeRootPrivate,
        Step::MountTmpfs,
        Step::CreateLayout,
        Step::MountDisk,
        Step::CreateDiskDir,
        Step::BindDiskDir,
        Step::CreateDir,
        Step::CreateMountPoint,
        Step::AttachMount,
        Step::CreateSymlink,
        Step::WriteFile,
        Step::SetHostname,
        Step::LimitIpc,
        Step::LimitNetwork,
        Step::LoopbackUp,
        Step::EgressListen,
        Step::OpenSockDiag,
        Step::RemountRootReadOnly,
        Step::OpenWorkDir,
        Step::OpenSupervisorPidfd,
        Step::StatusPipe,
        Step::Fork,
        Step::SupervisorGone,
        Step::MountProc,
        Step::MaskBootId,
        Step::ProtectProcSys,
        Step::PivotRoot,
        Step::DetachOldRoot,
        Step::EnterRunDir,
        Step::LandlockRule,
        Step::ForkProgram,
        Step::SetLimit,
        Step::UnshareProgramCgroup,
        Step::UnshareProgramUser,
        Step::WriteProgramMaps,
        Step::CloseInheritedFds,
        Step::DropCapabilities,
        Step::NoNewPrivs,
        Step::Landlock,
        Step::LandlockNotEnforced,
        Step::Seccomp,
        Step::JoinHandoff,
        Step::JoinZygoteUser,
        Step::UnshareNetwork,
        Step::JoinNetwork,
        Step::CloneTemplate,
        Step::AttachTemplate,
        Step::JoinIpc,
        Step::CleanIpc,
        Step::IpcInUse,
    ];

    /// Whether this step joins (or cleans) the namespaces an earlier run
    /// left ([`crate::Prepared::outer_network_namespace`]): its failure
    /// says that recycling them does not work on this host. Not
    /// [`Step::IpcInUse`], which says only that one namespace is not clean.
    pub fn joins_an_earlier_run(self) -> bool {
        matches!(self, Step::JoinNetwork | Step::JoinIpc | Step::CleanIpc)
    }

    /// The wire code of this step on the diagnostics pipe.
    pub(crate) fn code(self) -> u8 {
        self as u8
    }

    /// The step with this wire code.
    pub(crate) fn from_code(code: u8) -> Option<Step> {
        Step::ALL.into_iter().find(|step| step.code() == code)
    }

    /// The isolation layer this step belongs to.
    pub fn layer(self) -> &'static str {
        match self {
            Step::JoinCgroup => "cgroup v2",
            Step::OpenProcSelf => "user namespace",
            Step::RaiseHardLimit => "rlimits",
            Step::CloneMount => "mount namespace",
            Step::SealMount => "mount namespace",
            Step::SetGroups => "host uid",
            Step::SetGid => "host uid",
            Step::SetUid => "host uid",
            Step::SetDumpable => "host uid",
            Step::UnshareUser => "user namespace",
            Step::JoinZygoteUser => "user namespace",
            Step::DenySetgroups => "user namespace",
            Step::WriteUidMap => "user namespace",
            Step::WriteGidMap => "user namespace",
            Step::DeathSignal => "supervisor",
            Step::UnshareNamespaces => "pid/net/ipc/uts/mount namespaces",
            Step::MakeRootPrivate => "mount namespace",
            Step::MountTmpfs => "mount namespace",
            Step::CreateLayout => "mount namespace",
            Step::MountDisk => "mount namespace",
            Step::CreateDiskDir => "mount namespace",
            Step::BindDiskDir => "mount namespace",
            Step::CreateDir => "mount namespace",
            Step::CreateMountPoint => "mount namespace",
            Step::AttachMount => "mount namespace",
            Step::CreateSymlink => "mount namespace",
            Step::WriteFile => "mount namespace",
            Step::SetHostname => "uts namespace",
            Step::LimitIpc => "ipc namespace",
            Step::RemountRootReadOnly => "mount namespace",
            Step::OpenWorkDir => "mount namespace",
            Step::OpenSupervisorPidfd => "supervisor",
            Step::StatusPipe => "supervisor",
            Step::Fork => "supervisor",
            Step::SupervisorGone => "supervisor",
            Step::MountProc => "proc",
            Step::ProtectProcSys => "proc",
            Step::PivotRoot => "mount namespace",
            Step::DetachOldRoot => "mount namespace",
            Step::EnterRunDir => "mount namespace",
            Step::LandlockRule => "landlock",
            Step::ForkProgram => "supervisor",
            Step::SetLimit => "rlimits",
            Step::UnshareProgramUser => "user namespace",
            Step::WriteProgramMaps => "user namespace",
            Step::CloseInheritedFds => "file descriptors",
            Step::DropCapabilities => "capabilities",
            Step::NoNewPrivs => "no_new_privs",
            Step::Landlock => "landlock",
            Step::LandlockNotEnforced => "landlock",
            Step::Seccomp => "seccomp",
            Step::JoinHandoff => "supervisor",
            Step::LoopbackUp => "network namespace",
            Step::EgressListen => "network namespace",
            Step::LimitNetwork => "network namespace",
            Step::OpenSockDiag => "network namespace",
            Step::MaskBootId => "proc",
            Step::UnshareProgramCgroup => "cgroup namespace",
            Step::UnshareNetwork => "network namespace",
            Step::JoinNetwork => "network namespace",
            Step::JoinIpc | Step::CleanIpc | Step::IpcInUse => "ipc namespace",
            Step::CloneTemplate | Step::AttachTemplate => "mount namespace",
        }
    }

    /// What the step does, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Step::JoinCgroup => "joining the run's cgroup (cgroup.procs)",
            Step::OpenProcSelf => "opening /proc/self",
            Step::RaiseHardLimit => "raising a hard rlimit",
            Step::CloneMount => "cloning a path to expose (open_tree)",
            Step::SealMount => "setting mount attributes (mount_setattr, Linux 5.12+)",
            Step::SetGroups => "setgroups([])",
            Step::SetGid => "setresgid",
            Step::SetUid => "setresuid",
            Step::SetDumpable => "prctl(PR_SET_DUMPABLE)",
            Step::UnshareUser => "unshare(CLONE_NEWUSER)",
            Step::JoinZygoteUser => "setns into the zygote's user namespace",
            Step::DenySetgroups => "writing /proc/self/setgroups",
            Step::WriteUidMap => "writing /proc/self/uid_map",
            Step::WriteGidMap => "writing /proc/self/gid_map",
            Step::DeathSignal => "prctl(PR_SET_PDEATHSIG)",
            Step::UnshareNamespaces => {
                "unshare(CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWUTS, and CLONE_NEWNET|CLONE_NEWIPC unless made before)"
            }
            Step::MakeRootPrivate => "making / recursively private",
            Step::MountTmpfs => "mounting the tmpfs for the new root",
            Step::CreateLayout => "creating a directory of the fixed layout",
            Step::MountDisk => "mounting the run's tmpfs",
            Step::CreateDiskDir => "creating a directory in the run's tmpfs",
            Step::BindDiskDir => "bind-mounting a directory of the run's tmpfs",
            Step::CreateDir => "creating a directory in the new root",
            Step::CreateMountPoint => "creating a mount point in the new root",
            Step::AttachMount => "attaching a mount (move_mount)",
            Step::CreateSymlink => "creating a symlink in the new root",
            Step::WriteFile => "writing a generated file",
            Step::SetHostname => "sethostname",
            Step::LimitIpc => "writing an IPC namespace limit",
            Step::RemountRootReadOnly => "making the new root read-only",
            Step::OpenWorkDir => "opening the run's working directory",
            Step::OpenSupervisorPidfd => "pidfd_open on the supervisor",
            Step::StatusPipe => "creating the status pipe",
            Step::Fork => "fork of the init process",
            Step::SupervisorGone => "checking the supervisor is alive",
            Step::MountProc => "mounting /proc (needs an unobstructed /proc on the host)",
            Step::ProtectProcSys => "making /proc/sys read-only",
            Step::PivotRoot => "pivot_root",
            Step::DetachOldRoot => "detaching the old root",
            Step::EnterRunDir => "entering the working directory",
            Step::LandlockRule => "adding a Landlock rule for the new root",
            Step::ForkProgram => "fork of the program process",
            Step::SetLimit => "setrlimit",
            Step::UnshareProgramUser => "unshare(CLONE_NEWUSER) for the program",
            Step::WriteProgramMaps => "writing the program's uid/gid maps",
            Step::CloseInheritedFds => "marking fds above 3 close-on-exec",
            Step::DropCapabilities => "dropping every capability",
            Step::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
            Step::Landlock => "landlock_restrict_self",
            Step::LandlockNotEnforced => "checking Landlock reports the ruleset fully enforced",
            Step::Seccomp => "installing the seccomp filter",
            Step::JoinHandoff => "sending the run's namespaces to the host (shell mode)",
            Step::LoopbackUp => "bringing the run's lo up (SIOCSIFFLAGS)",
            Step::EgressListen => "listening on the egress address inside the run",
            Step::LimitNetwork => "writing a network namespace limit (net.ipv4.tcp_rmem/tcp_wmem)",
            Step::OpenSockDiag => "opening a NETLINK_SOCK_DIAG socket inside the run",
            Step::MaskBootId => "mounting the run's boot_id over /proc/sys/kernel/random/boot_id",
            Step::UnshareProgramCgroup => "unshare(CLONE_NEWCGROUP) for the program",
            Step::UnshareNetwork => "unshare(CLONE_NEWNET | CLONE_NEWIPC) outside the run's user namespace",
            Step::JoinNetwork => "setns into the network namespace an earlier run left",
            Step::JoinIpc => "setns into the IPC namespace an earlier run left",
            Step::CleanIpc => "removing the SysV objects an earlier run left",
            Step::IpcInUse => "an earlier run's SysV segment is still attached (this namespace is dropped)",
            Step::CloneTemplate => "cloning the root template (open_tree of a detached mount, Linux 6.15+)",
            Step::AttachTemplate => "attaching the root template's clone (move_mount)",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.describe(), self.layer())
    }
}

/// A failure inside the forked child, as recorded on the diagnostics pipe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sandbox setup failed in the child while {step}{}: {}", .path.as_ref().map(|p| format!(" for {p:?}")).unwrap_or_default(), io::Error::from_raw_os_error(*.errno))]
pub struct ChildFailure {
    /// The step that failed.
    pub step: Step,
    /// The path the step concerned, for mount steps.
    pub path: Option<PathBuf>,
    /// The errno the step failed with.
    pub errno: i32,
}
/// A step failure inside the child.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failure {
    pub(crate) step: Step,
    pub(crate) index: u16,
    pub(crate) errno: i32,
}

impl Failure {
    pub(crate) fn new(step: Step, errno: i32) -> Failure {
        Failure { step, index: 0, errno }
    }
    pub(crate) fn at(step: Step, index: usize, errno: i32) -> Failure {
        Failure { step, index: u16::try_from(index).unwrap_or(u16::MAX), errno }
    }
}

/// `map_err` helper for rustix results.
pub(crate) fn at(step: Step) -> impl Fn(rustix::io::Errno) -> Failure {
    move |errno| Failure::new(step, errno.raw_os_error())
}

/// `map_err` helper for rustix results of the `index`-th entry of a list.
pub(crate) fn at_entry(step: Step, index: usize) -> impl Fn(rustix::io::Errno) -> Failure {
    move |errno| Failure::at(step, index, errno.raw_os_error())
}

/// The errno at the bottom of an error chain, or `fallback`.
pub(crate) fn errno_of(err: &(dyn std::error::Error + 'static), fallback: i32) -> i32 {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(errno) = e.downcast_ref::<io::Error>().and_then(io::Error::raw_os_error) {
            return errno;
        }
        current = e.source();
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_round_trips_its_code() {
        for step in Step::ALL {
            assert_eq!(Step::from_code(step.code()), Some(step));
        }
        assert_eq!(Step::from_code(0), None);
    }
}
