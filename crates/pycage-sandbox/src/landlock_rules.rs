//! The Landlock layer: which access each exposed path gets, and the ruleset
//! built from it in the parent.
//!
//! The ruleset handles every file-system right of the ABI it targets, so
//! anything not granted below is denied: read-only paths get
//! execute/read-file/read-dir, devices get read/write/truncate/ioctl; the
//! child adds the rules for what exists only in the new root (`/work`,
//! `/tmp`, `/dev/shm` get everything, `/etc` and `/proc` read, `/` list).
//! With ABI 4+ TCP bind and connect are handled with no rule (denied), but
//! for connecting to the egress proxy's port when the run has egress; and
//! with ABI 6+ abstract-unix-socket and signal scoping confine the child to
//! its own domain.
//!
//! The targeted ABI is the kernel's, capped at [`TARGET_ABI`] (the newest
//! ABI this code is tested against) and never below [`MIN_ABI`] (file
//! truncation control, Linux 6.2). The ruleset is created with
//! `CompatLevel::HardRequirement`, so every right it handles is enforced or
//! creation fails in the parent; the child then requires `restrict_self` to
//! report `FullyEnforced`.
//!
//! Rules are attached to inodes, not path strings, so the rules built from
//! the host paths apply unchanged to the same inodes bind-mounted into the
//! child's new root. The child adds one more rule, read-dir beneath its
//! tmpfs root (see [`crate::Prepared::enter`]): directory listings then work
//! across the new root, which holds only what was exposed.
//!
//! The host paths are opened once per resolution of a policy
//! ([`PathRule`], kept by [`crate::Preparations`] while its plan holds,
//! that is while every path is the file the plan found), and each run's
//! ruleset is made from those descriptors.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};

use crate::error::SandboxError;
use crate::plan::{FileId, MountKind, MountPlan, NodeKind};

/// The newest Landlock ABI whose rights this crate handles.
pub const TARGET_ABI: ABI = ABI::V6;
/// The oldest Landlock ABI the sandbox accepts.
pub const MIN_ABI: ABI = ABI::V3;
const MIN_ABI_NUMBER: i32 = 3;
const TARGET_ABI_NUMBER: i32 = 6;

/// What the kernel says about Landlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelLandlock {
    /// Landlock is enabled with this ABI version.
    Abi(i32),
    /// Built in but not enabled at boot (`EOPNOTSUPP`).
    NotEnabled,
    /// Not built into the kernel (`ENOSYS`).
    NotImplemented,
    /// Some other errno.
    Error(i32),
}

impl std::fmt::Display for KernelLandlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelLandlock::Abi(v) => write!(f, "Landlock ABI {v}"),
            KernelLandlock::NotEnabled => write!(f, "Landlock built in but not enabled at boot"),
            KernelLandlock::NotImplemented => write!(f, "no Landlock in this kernel"),
            KernelLandlock::Error(errno) => {
                write!(f, "Landlock query failed: {}", std::io::Error::from_raw_os_error(*errno))
            }
        }
    }
}

/// Ask the kernel for its Landlock ABI version.
pub fn kernel_landlock() -> KernelLandlock {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag the
    // kernel only returns the ABI version; it reads and writes no memory.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret >= 0 {
        return KernelLandlock::Abi(i32::try_from(ret).unwrap_or(i32::MAX));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => KernelLandlock::NotEnabled,
        Some(libc::ENOSYS) => KernelLandlock::NotImplemented,
        Some(errno) => KernelLandlock::Error(errno),
        None => KernelLandlock::Error(0),
    }
}

/// The ABI the ruleset targets for this kernel, or `None` if it is too old.
pub fn handled_abi(kernel: KernelLandlock) -> Option<ABI> {
    match kernel {
        KernelLandlock::Abi(v) if v >= MIN_ABI_NUMBER => Some(ABI::from(v.min(TARGET_ABI_NUMBER))),
        KernelLandlock::Abi(_)
        | KernelLandlock::NotEnabled
        | KernelLandlock::NotImplemented
        | KernelLandlock::Error(_) => None,
    }
}

/// The rights granted beneath a bind of `kind` and `node` type.
pub fn access_for(kind: MountKind, node: NodeKind, abi: ABI) -> BitFlags<AccessFs> {
    let file_only = AccessFs::from_file(abi);
    let granted = match kind {
        MountKind::ReadOnly => AccessFs::from_read(abi),
        MountKind::Device => AccessFs::from_file(abi) & !AccessFs::Execute,
    };
    match node {
        NodeKind::Dir => granted,
        NodeKind::File => granted & file_only,
    }
}

/// One Landlock rule of an exposed host path: the path opened (`O_PATH`,
/// close-on-exec) and the rights it gets.
#[derive(Debug)]
pub(crate) struct PathRule {
    pub(crate) path: PathBuf,
    fd: PathFd,
    access: BitFlags<AccessFs>,
}

impl PathRule {
    /// The device and inode the rule's descriptor names.
    pub(crate) fn identity(&self) -> Option<FileId> {
        let stat = rustix::fs::fstat(&self.fd).ok()?;
        Some((stat.st_dev, stat.st_ino))
    }
}

/// Opens every exposed host path of `plan` for its rule (the host side
/// does this: the shell has left the host's file system when it builds its
/// own rules).
pub(crate) fn open_plan_rules(plan: &MountPlan, abi: ABI) -> Result<Vec<PathRule>, SandboxError> {
    open_rules(plan.binds.iter().map(|b| (b.source.as_path(), b.kind, b.node)), abi)
}

/// [`open_plan_rules`] for a list of host paths, each with how it is exposed.
pub(crate) fn open_rules<'a>(
    binds: impl IntoIterator<Item = (&'a Path, MountKind, NodeKind)>,
    abi: ABI,
) -> Result<Vec<PathRule>, SandboxError> {
    binds
        .into_iter()
        .map(|(path, kind, node)| {
            let fd =
                PathFd::new(path).map_err(|source| SandboxError::LandlockPath { path: path.to_path_buf(), source })?;
            Ok(PathRule { path: path.to_path_buf(), fd, access: access_for(kind, node, abi) })
        })
        .collect()
}

/// A run's ruleset with `rules` (which outlive it: a kept resolution's
/// rules serve every run of it). With `egress_port` (and ABI 4+), TCP
/// connections to that port are allowed, to any address: the run's
/// network namespace has only its loopback.
pub(crate) fn ruleset_with(
    rules: &[PathRule],
    abi: ABI,
    egress_port: Option<u16>,
) -> Result<RulesetCreated, SandboxError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(SandboxError::Landlock)?;
    if abi >= ABI::V4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi)).map_err(SandboxError::Landlock)?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(SandboxError::Landlock)?;
    }
    let mut created = ruleset.create().map_err(SandboxError::Landlock)?;
    if let (Some(port), true) = (egress_port, abi >= ABI::V4) {
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp)).map_err(SandboxError::Landlock)?;
    }
    for rule in rules {
        created = created.add_rule(PathBeneath::new(rule.fd.as_fd(), rule.access)).map_err(SandboxError::Landlock)?;
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_selection() {
        assert_eq!(handled_abi(KernelLandlock::Abi(7)), Some(ABI::V6));
        assert_eq!(handled_abi(KernelLandlock::Abi(6)), Some(ABI::V6));
        assert_eq!(handled_abi(KernelLandlock::Abi(4)), Some(ABI::V4));
        assert_eq!(handled_abi(KernelLandlock::Abi(3)), Some(ABI::V3));
        assert_eq!(handled_abi(KernelLandlock::Abi(2)), None);
        assert_eq!(handled_abi(KernelLandlock::NotEnabled), None);
        assert_eq!(handled_abi(KernelLandlock::NotImplemented), None);
        assert_eq!(ABI::from(MIN_ABI_NUMBER), MIN_ABI);
        assert_eq!(ABI::from(TARGET_ABI_NUMBER), TARGET_ABI);
    }

    #[test]
    fn access_per_kind() {
        let abi = ABI::V6;
        assert_eq!(
            access_for(MountKind::ReadOnly, NodeKind::Dir, abi),
            AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir
        );
        assert_eq!(access_for(MountKind::ReadOnly, NodeKind::File, abi), AccessFs::Execute | AccessFs::ReadFile);
        assert_eq!(
            access_for(MountKind::Device, NodeKind::File, abi),
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
        );
        // Read-only never carries a write right.
        assert!((access_for(MountKind::ReadOnly, NodeKind::Dir, abi) & AccessFs::from_write(abi)).is_empty());
    }
}
