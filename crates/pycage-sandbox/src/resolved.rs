//! What a policy fixes for every run of it ([`Resolved`]: its mount plan,
//! every path and value the sandbox's processes use, preformatted, the
//! seccomp program, the confinement's steps, its exposed paths opened for their
//! Landlock rules). Built in the parent, once per run or once per policy
//! ([`crate::Preparations`]); the run's own parts and the steps the forked
//! processes take are [`crate::prepared`]'s.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::ABI;
use rustix::process::{Pid, Resource};

use crate::error::SandboxError;
use crate::join::{confine_steps, network, run_limits, ConfineStep};
use crate::landlock_rules::{self, handled_abi, kernel_landlock, PathRule};
use crate::limits::{RUN_TCP_RMEM, RUN_TCP_WMEM, SYSV_SEM_LIMITS, SYSV_SHM_SEGMENTS};
use crate::plan::{
    in_run_disk, MountKind, MountPlan, NodeKind, SandboxPolicy, DISK_DIRS, FIXED_DIRS, PROC_DIR, WORK_DIR,
};
use crate::seccomp::{self, Filters};
use crate::sys;

/// Size of the tmpfs that becomes the new root: directories, mount points,
/// symlinks and the generated `/etc` files.
pub(crate) const ROOT_TMPFS_BYTES: usize = 1024 * 1024;

/// `MOUNT_ATTR_*` for each bind kind: (attributes, recursive).
pub(crate) fn attributes(kind: MountKind) -> (u64, bool) {
    match kind {
        MountKind::ReadOnly => (sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV, true),
        MountKind::Device => (sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC, false),
    }
}

/// Where the new root is assembled, in the child's private mount namespace
/// (a tmpfs is mounted over the host's `/tmp` there; the host never sees it).
pub(crate) const STAGING: &str = "/tmp";

/// The file holding the run's `boot_id`, in the new root's `/proc`
/// directory: procfs is mounted over it, which hides it from everything
/// but the clone of it mounted at [`BOOT_ID_PATH`].
pub(crate) const BOOT_ID_SOURCE: &str = "boot_id";
/// Where the kernel shows its boot id, under `/proc`.
pub(crate) const BOOT_ID_PATH: &str = "sys/kernel/random/boot_id";

/// One bind mount, ready for the child.
#[derive(Debug)]
pub(crate) struct BindOp {
    pub(crate) source: CString,
    pub(crate) target: CString,
    pub(crate) create: Option<NodeKind>,
    pub(crate) attr_set: u64,
    pub(crate) recursive: bool,
    /// Outside the run's tmpfs: a root template has it.
    pub(crate) in_template: bool,
}

/// One symlink, ready for the child.
#[derive(Debug)]
pub(crate) struct SymlinkOp {
    pub(crate) target_text: CString,
    pub(crate) link: CString,
    pub(crate) in_template: bool,
}

/// One generated file, ready for the child.
#[derive(Debug)]
pub(crate) struct FileOp {
    pub(crate) path: CString,
    pub(crate) contents: &'static [u8],
    pub(crate) in_template: bool,
}

/// One directory of the new root, ready for the child.
#[derive(Debug)]
pub(crate) struct DirOp {
    pub(crate) path: CString,
    pub(crate) in_template: bool,
}

/// One directory of the run's tmpfs: where it is made (the tmpfs is
/// staged on the new root's `/proc`), its mount point, its mode.
#[derive(Debug)]
pub(crate) struct DiskDirOp {
    pub(crate) staged: CString,
    pub(crate) target: CString,
    pub(crate) mode: u32,
}

/// What a policy fixes for every run of it, on an unchanged file system:
/// its plan, every path and value the child uses, preformatted, and the
/// seccomp program. Built once per run by [`Prepared::new`](crate::Prepared::new), or once
/// per policy by [`Preparations`](crate::Preparations), and never changed after.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) plan: Arc<MountPlan>,
    /// The plan's part a root template holds, on a root host (the only
    /// one templates serve).
    pub(crate) template_part: Option<MountPlan>,
    pub(crate) root_host: bool,
    pub(crate) host_pid: Pid,
    pub(crate) staging: CString,
    pub(crate) root_tmpfs_data: CString,
    pub(crate) fixed_dirs: Vec<CString>,
    pub(crate) disk_tmpfs_data: CString,
    pub(crate) disk_dirs: Vec<DiskDirOp>,
    pub(crate) dirs: Vec<DirOp>,
    pub(crate) binds: Vec<BindOp>,
    pub(crate) symlinks: Vec<SymlinkOp>,
    pub(crate) files: Vec<FileOp>,
    pub(crate) staged_proc: CString,
    pub(crate) staged_proc_sys: CString,
    pub(crate) staged_work: CString,
    pub(crate) landlock_dirs: [(&'static CStr, LandlockGrant); 6],
    pub(crate) ipc_limits: [(&'static CStr, Vec<u8>); 5],
    /// With egress: the network namespace's TCP buffer sizes.
    pub(crate) net_limits: [(&'static CStr, &'static [u8]); 2],
    pub(crate) limits: [(Resource, u64); 7],
    /// Where the run's `boot_id` is written (under `/proc` of the new
    /// root, hidden once procfs is mounted there).
    pub(crate) staged_boot_id: CString,
    pub(crate) staged_proc_boot_id: CString,
    pub(crate) landlock_abi: ABI,
    /// Every exposed host path, opened for its Landlock rule: each run's
    /// ruleset is made from these (an open, an `fstat` and a close per
    /// path, about 35 us a shell in the helper, when opened per run).
    /// While the resolution is kept they name what the paths name: its
    /// plan holds only while each path is the very file it was
    /// ([`Preparations`](crate::Preparations) checks the descriptors against that once).
    pub(crate) path_rules: Vec<PathRule>,
    pub(crate) filters: Filters,
    /// Steps 16-18 ([`crate::confine`]).
    pub(crate) confine: Vec<ConfineStep>,
    /// Where the supervisor listens for egress, inside the run.
    pub(crate) egress: Option<std::net::SocketAddrV4>,
}

/// Which Landlock rights a directory of the new root gets.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LandlockGrant {
    /// List directories.
    List,
    /// Read files and list directories.
    Read,
    /// Everything.
    All,
}

impl Resolved {
    /// Resolve `policy` on its `plan`: every string the child needs, the
    /// seccomp program, the confinement's steps. Fails if Landlock is too old
    /// or a path of the policy is invalid.
    pub(crate) fn new(policy: &SandboxPolicy, plan: Arc<MountPlan>) -> Result<Resolved, SandboxError> {
        let (root_host, _, _) = run_ids(policy)?;

        let kernel = kernel_landlock();
        let landlock_abi = handled_abi(kernel).ok_or_else(|| SandboxError::LandlockUnavailable {
            found: kernel.to_string(),
            required: landlock_rules::MIN_ABI as u32,
        })?;
        let filters = seccomp::compile_native(network(policy))?;
        let staging = Path::new(STAGING);
        let staged = |path: &Path| -> Result<CString, SandboxError> {
            cstring(&staging.join(path.strip_prefix("/").unwrap_or(path)))
        };
        let fixed_dirs = FIXED_DIRS.iter().map(|d| staged(Path::new(d))).collect::<Result<Vec<_>, _>>()?;
        let disk_dirs = DISK_DIRS
            .iter()
            .map(|(dir, mode)| {
                // "work", "tmp", "shm": one directory of the run's tmpfs
                // each, which is staged on the new root's `/proc`.
                let name = Path::new(dir).file_name().unwrap_or_default();
                Ok(DiskDirOp {
                    staged: staged(&Path::new(PROC_DIR).join(name))?,
                    target: staged(Path::new(dir))?,
                    mode: *mode,
                })
            })
            .collect::<Result<Vec<_>, SandboxError>>()?;
        let dirs = plan
            .dirs
            .iter()
            .map(|d| Ok(DirOp { path: staged(d)?, in_template: !in_run_disk(d) }))
            .collect::<Result<Vec<_>, SandboxError>>()?;
        let binds = plan
            .binds
            .iter()
            .map(|b| {
                let (attr_set, recursive) = attributes(b.kind);
                Ok(BindOp {
                    source: cstring(&b.source)?,
                    target: staged(&b.target)?,
                    create: b.create_mount_point.then_some(b.node),
                    attr_set,
                    recursive,
                    in_template: !in_run_disk(&b.target),
                })
            })
            .collect::<Result<Vec<_>, SandboxError>>()?;
        let symlinks = plan
            .symlinks
            .iter()
            .map(|l| {
                Ok(SymlinkOp {
                    target_text: cstring(&l.target)?,
                    link: staged(&l.path)?,
                    in_template: !in_run_disk(&l.path),
                })
            })
            .collect::<Result<Vec<_>, SandboxError>>()?;
        let files = plan
            .files
            .iter()
            .map(|f| {
                Ok(FileOp {
                    path: staged(&f.path)?,
                    contents: f.contents.as_bytes(),
                    in_template: !in_run_disk(&f.path),
                })
            })
            .collect::<Result<Vec<_>, SandboxError>>()?;
        let options = |text: String| {
            CString::new(text).map_err(|_| SandboxError::NulInPath { path: PathBuf::from("tmpfs options") })
        };
        let page = rustix::param::page_size() as u64;
        let shm_pages = policy.sysv_shm_bytes.div_ceil(page);

        let limits = run_limits(policy);
        Ok(Resolved {
            template_part: root_host.then(|| plan.template_part()),
            root_host,
            host_pid: rustix::process::getpid(),
            staging: cstring(staging)?,
            root_tmpfs_data: options(format!("mode=0755,size={ROOT_TMPFS_BYTES},nr_inodes={}", plan.tmpfs_inodes()))?,
            fixed_dirs,
            disk_tmpfs_data: options(format!(
                "mode=0755,size={},nr_inodes={}",
                policy.disk_bytes,
                policy.disk_inodes()
            ))?,
            disk_dirs,
            dirs,
            binds,
            symlinks,
            files,
            staged_proc: staged(Path::new(PROC_DIR))?,
            staged_proc_sys: staged(&Path::new(PROC_DIR).join("sys"))?,
            staged_work: staged(Path::new(WORK_DIR))?,
            landlock_dirs: [
                (c"/", LandlockGrant::List),
                (c"/etc", LandlockGrant::Read),
                (c"/proc", LandlockGrant::Read),
                (c"/work", LandlockGrant::All),
                (c"/tmp", LandlockGrant::All),
                (c"/dev/shm", LandlockGrant::All),
            ],
            ipc_limits: [
                (c"/proc/sys/kernel/shmmax", policy.sysv_shm_bytes.to_string().into_bytes()),
                (c"/proc/sys/kernel/shmall", shm_pages.to_string().into_bytes()),
                (c"/proc/sys/kernel/shmmni", SYSV_SHM_SEGMENTS.to_string().into_bytes()),
                (c"/proc/sys/kernel/sem", SYSV_SEM_LIMITS.as_bytes().to_vec()),
                // A segment ends with its creator (or its last detach), so
                // a run's end frees its shared memory even where its IPC
                // namespace serves later runs (`Prepared::outer_network_namespace`).
                (c"/proc/sys/kernel/shm_rmid_forced", b"1".to_vec()),
            ],
            net_limits: [
                (c"/proc/sys/net/ipv4/tcp_rmem", RUN_TCP_RMEM.as_bytes()),
                (c"/proc/sys/net/ipv4/tcp_wmem", RUN_TCP_WMEM.as_bytes()),
            ],
            limits,
            staged_boot_id: staged(&Path::new(PROC_DIR).join(BOOT_ID_SOURCE))?,
            staged_proc_boot_id: staged(&Path::new(PROC_DIR).join(BOOT_ID_PATH))?,
            landlock_abi,
            path_rules: {
                // Descriptors kept in this process must land above 3 (see
                // the function).
                crate::sys::occupy_low_fds();
                landlock_rules::open_plan_rules(&plan, landlock_abi)?
            },
            confine: confine_steps(&limits, &filters),
            filters,
            egress: policy.egress_port.map(|port| std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port)),
            plan,
        })
    }
}

/// Whether the host is root, and the run's host uid and gid: the policy's
/// on a root host (which must give them), the caller's own otherwise.
pub(crate) fn run_ids(policy: &SandboxPolicy) -> Result<(bool, u32, u32), SandboxError> {
    let euid = rustix::process::geteuid().as_raw();
    match (euid == 0, policy.host_ids) {
        (true, Some(ids)) => Ok((true, ids.uid, ids.gid)),
        (true, None) => Err(SandboxError::NoRunIds),
        (false, None) => Ok((false, euid, rustix::process::getegid().as_raw())),
        (false, Some(ids)) => Err(SandboxError::RunIdsNeedRoot { uid: ids.uid, euid }),
    }
}

pub(crate) fn cstring(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| SandboxError::NulInPath { path: path.to_path_buf() })
}
