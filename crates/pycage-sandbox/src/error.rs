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
    /// exposes each one at the same absolute path inside the new root.
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
    /// `read_write` is empty: its first entry is the run directory, the
    /// child's working directory.
    #[error("sandbox policy: read_write is empty; its first entry must be the run directory")]
    NoRunDir,
    /// The run directory (`read_write[0]`) is not a directory.
    #[error("sandbox policy: run directory {path:?} is not a directory")]
    RunDirNotDirectory {
        /// The run directory, resolved.
        path: PathBuf,
    },
    /// The policy asks for uid or gid 0. The child must run as an
    /// unprivileged host id; allocate one per run.
    #[error("sandbox policy: uid {uid} / gid {gid}: the child must run as a non-zero (unprivileged) uid and gid")]
    PrivilegedId {
        /// Requested uid.
        uid: u32,
        /// Requested gid.
        gid: u32,
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
    /// The staging directory is unusable. The runtime creates an empty
    /// directory (mode 0700) for each run and passes it here.
    #[error("mount layer: staging directory {path:?} {problem}; create an empty directory per run")]
    StagingDir {
        /// The staging directory as given.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The sandbox is entered as real root: it bind-mounts host paths and
    /// switches to the per-run uid. Run the host as root, or use `process`
    /// isolation.
    #[error("sandbox: the host must run as root (euid 0) to build the private root and switch to a per-run uid; current euid is {euid}")]
    NotRoot {
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
    /// This CPU architecture has no seccomp filter in pycage.
    #[error("seccomp layer: architecture {arch} is not supported (x86_64 and aarch64 are)")]
    UnsupportedArch {
        /// `std::env::consts::ARCH`.
        arch: &'static str,
    },
    /// A pipe or file descriptor the parent prepares could not be created.
    #[error("sandbox: cannot create the diagnostics pipe: {0}")]
    Pipe(#[source] io::Error),
    /// A step in the forked child failed; the spawn failed with it.
    #[error(transparent)]
    Child(#[from] ChildFailure),
    /// The spawn failed for a reason the sandbox did not record (for example
    /// the interpreter could not be executed).
    #[error("spawn failed: {0}")]
    Spawn(#[source] io::Error),
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
    /// `unshare(CLONE_NEWNS)` as root.
    UnshareMount = 1,
    /// Making `/` recursively private in the new mount namespace.
    MakeRootPrivate,
    /// Mounting the tmpfs that becomes the new root.
    MountTmpfs,
    /// Creating a directory in the new root.
    CreateDir,
    /// Creating a mount point (directory or empty file) in the new root.
    CreateMountPoint,
    /// Bind-mounting a host path.
    BindMount,
    /// Setting read-only/nosuid/nodev on a bind mount (`mount_setattr`).
    SetMountAttributes,
    /// Recreating a host symlink in the new root.
    CreateSymlink,
    /// Adding the "list directories of the new root" Landlock rule.
    LandlockRootRule,
    /// Making the tmpfs root read-only.
    RemountRootReadOnly,
    /// Opening `/proc/self` before the old root goes away.
    OpenProcSelf,
    /// `pivot_root` into the new root.
    PivotRoot,
    /// Detaching the old root.
    DetachOldRoot,
    /// `chdir` into the run directory.
    EnterRunDir,
    /// Raising a hard rlimit (as root) so the child can set it.
    RaiseHardLimit,
    /// `setgroups([])`.
    SetGroups,
    /// `setresgid`.
    SetGid,
    /// `setresuid`.
    SetUid,
    /// `prctl(PR_SET_DUMPABLE)`.
    SetDumpable,
    /// `unshare(CLONE_NEWUSER)` as the unprivileged uid.
    UnshareUser,
    /// Writing `deny` to `/proc/self/setgroups`.
    DenySetgroups,
    /// Writing `/proc/self/uid_map`.
    WriteUidMap,
    /// Writing `/proc/self/gid_map`.
    WriteGidMap,
    /// `unshare(CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)`.
    UnshareNamespaces,
    /// Opening a pidfd on the supervisor before the fork.
    OpenSupervisorPidfd,
    /// Forking the namespace's init (the interpreter).
    Fork,
    /// `prctl(PR_SET_PDEATHSIG, SIGKILL)` in the interpreter process.
    DeathSignal,
    /// The supervisor died before the interpreter armed its death signal.
    SupervisorGone,
    /// Marking descriptors above fd 3 close-on-exec.
    CloseInheritedFds,
    /// `prctl(PR_SET_NO_NEW_PRIVS)`.
    NoNewPrivs,
    /// `landlock_restrict_self`.
    Landlock,
    /// Landlock did not report the ruleset as fully enforced.
    LandlockNotEnforced,
    /// Setting an rlimit in the interpreter process.
    SetLimit,
    /// Installing a seccomp filter.
    Seccomp,
}

impl Step {
    /// All steps, roughly in the order [`crate::Prepared::enter`] runs them
    /// (the module docs of `prepared` give the exact order).
    pub const ALL: [Step; 34] = [
        Step::UnshareMount,
        Step::MakeRootPrivate,
        Step::MountTmpfs,
        Step::CreateDir,
        Step::CreateMountPoint,
        Step::BindMount,
        Step::SetMountAttributes,
        Step::CreateSymlink,
        Step::LandlockRootRule,
        Step::RemountRootReadOnly,
        Step::OpenProcSelf,
        Step::PivotRoot,
        Step::DetachOldRoot,
        Step::EnterRunDir,
        Step::RaiseHardLimit,
        Step::SetGroups,
        Step::SetGid,
        Step::SetUid,
        Step::SetDumpable,
        Step::UnshareUser,
        Step::DenySetgroups,
        Step::WriteUidMap,
        Step::WriteGidMap,
        Step::UnshareNamespaces,
        Step::OpenSupervisorPidfd,
        Step::Fork,
        Step::DeathSignal,
        Step::SupervisorGone,
        Step::CloseInheritedFds,
        Step::NoNewPrivs,
        Step::Landlock,
        Step::LandlockNotEnforced,
        Step::SetLimit,
        Step::Seccomp,
    ];

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
            Step::UnshareMount
            | Step::MakeRootPrivate
            | Step::MountTmpfs
            | Step::CreateDir
            | Step::CreateMountPoint
            | Step::BindMount
            | Step::SetMountAttributes
            | Step::CreateSymlink
            | Step::RemountRootReadOnly
            | Step::OpenProcSelf
            | Step::PivotRoot
            | Step::DetachOldRoot
            | Step::EnterRunDir => "mount namespace",
            Step::RaiseHardLimit | Step::SetLimit => "rlimits",
            Step::SetGroups | Step::SetGid | Step::SetUid | Step::SetDumpable => "privilege drop",
            Step::UnshareUser | Step::DenySetgroups | Step::WriteUidMap | Step::WriteGidMap => "user namespace",
            Step::UnshareNamespaces => "pid/net/ipc/uts namespaces",
            Step::OpenSupervisorPidfd | Step::Fork | Step::DeathSignal | Step::SupervisorGone => "supervisor",
            Step::CloseInheritedFds => "file descriptors",
            Step::NoNewPrivs => "no_new_privs",
            Step::LandlockRootRule | Step::Landlock | Step::LandlockNotEnforced => "landlock",
            Step::Seccomp => "seccomp",
        }
    }

    /// What the step does, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Step::UnshareMount => "unshare(CLONE_NEWNS)",
            Step::MakeRootPrivate => "making / recursively private",
            Step::MountTmpfs => "mounting the tmpfs for the new root",
            Step::CreateDir => "creating a directory in the new root",
            Step::CreateMountPoint => "creating a mount point in the new root",
            Step::BindMount => "bind-mounting",
            Step::SetMountAttributes => "setting mount attributes (mount_setattr, Linux 5.12+)",
            Step::CreateSymlink => "recreating a symlink in the new root",
            Step::LandlockRootRule => "adding the Landlock rule for the new root",
            Step::RemountRootReadOnly => "making the new root read-only",
            Step::OpenProcSelf => "opening /proc/self",
            Step::PivotRoot => "pivot_root",
            Step::DetachOldRoot => "detaching the old root",
            Step::EnterRunDir => "entering the run directory",
            Step::RaiseHardLimit => "raising a hard rlimit",
            Step::SetGroups => "setgroups([])",
            Step::SetGid => "setresgid",
            Step::SetUid => "setresuid",
            Step::SetDumpable => "prctl(PR_SET_DUMPABLE)",
            Step::UnshareUser => "unshare(CLONE_NEWUSER) as the run uid",
            Step::DenySetgroups => "writing /proc/self/setgroups",
            Step::WriteUidMap => "writing /proc/self/uid_map",
            Step::WriteGidMap => "writing /proc/self/gid_map",
            Step::UnshareNamespaces => "unshare(CLONE_NEWPID|CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWUTS)",
            Step::OpenSupervisorPidfd => "pidfd_open on the supervisor",
            Step::Fork => "fork of the interpreter process",
            Step::DeathSignal => "prctl(PR_SET_PDEATHSIG)",
            Step::SupervisorGone => "checking the supervisor is alive",
            Step::CloseInheritedFds => "marking fds above 3 close-on-exec",
            Step::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
            Step::Landlock => "landlock_restrict_self",
            Step::LandlockNotEnforced => "checking Landlock reports the ruleset fully enforced",
            Step::SetLimit => "setrlimit",
            Step::Seccomp => "installing the seccomp filter",
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
