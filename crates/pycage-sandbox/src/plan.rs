//! The policy and the pure mount plan.
//!
//! [`MountPlan::build`] turns a [`SandboxPolicy`] into the exact list of
//! directories, symlinks, generated files and bind mounts the child creates
//! in its new root. It reads the host file system only through the small
//! [`HostFs`] trait, so every rule below is unit-tested against a fake file
//! system.
//!
//! # The root the program sees
//!
//! ```text
//! /                 read-only tmpfs: only what is listed here
//! /usr /bin ...     the host's system directories, read-only (host symlinks such as
//!                   /bin -> usr/bin and /lib -> usr/lib recreated: merged /usr works)
//! /opt/python       e.g. the interpreter's prefix, when the runtime remaps it (Remap)
//! /etc              generated: passwd, group, hostname, hosts, nsswitch.conf; plus the
//!                   host's ld.so.cache and localtime, read-only
//! /dev              null, zero, random, urandom (bind mounts), fd/stdin/stdout/stderr links
//! /proc             procfs of the run's own PID namespace (/proc/sys read-only)
//! /work /tmp /dev/shm   one size-capped tmpfs per run (WORK_DIR is the cwd, TMP_DIR HOME;
//!                   /work/out starts empty: the host may copy it out afterwards)
//! ```
//!
//! # Rules
//!
//! - Every host path must be absolute. `.` components are dropped and `..`
//!   is resolved against the real parent, as the kernel does.
//! - A [`SandboxPolicy::read_only`] path is exposed at its own path.
//!   Symlinks met while resolving it are recreated verbatim in the new root
//!   (`/lib -> usr/lib`), and the bind is made at the real path, so the path
//!   resolves inside as it does on the host. A read-only path that does not
//!   exist is skipped and recorded in [`MountPlan::skipped`].
//! - A [`Remap`] exposes a host path read-only at another path inside (the
//!   interpreter's prefix at a neutral path, the bootstrap, run inputs under
//!   [`WORK_DIR`]). It must exist, and it may not lie inside another
//!   exposed path (its mount point could not be created there).
//! - One target has one source and one kind; anything else is a
//!   [`SandboxError::Conflict`].
//! - A same-path read-only entry nested inside another one is dropped (it is
//!   already exposed). A device inside a read-only directory is kept and
//!   mounted on top.
//! - The fixed layout is reserved: no entry may be `/`, one of
//!   [`FIXED_DIRS`], an ancestor of one, inside [`PROC_DIR`], or a
//!   generated file ([`SandboxError::Reserved`]). Entries *inside* the
//!   run's tmpfs directories (`/work`, `/tmp`, `/dev/shm`) or inside `/etc`
//!   are allowed: their mount points are created there. Host symlinks at
//!   reserved paths (a host whose `/tmp` is a link) are not recreated.
//! - Directories of the new root that are not mount points are created with
//!   mode 0755.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::error::SandboxError;

/// Most directories or symlinks (each) a plan may hold.
pub const MAX_MOUNT_ENTRIES: usize = 4096;

/// Most bind mounts a plan may hold. The child holds one descriptor per
/// bind (a detached clone of the source) while it builds the root.
pub const MAX_BINDS: usize = 256;

/// Most symlinks followed while resolving one path, as the kernel's
/// `MAXSYMLINKS`.
pub const MAX_SYMLINK_HOPS: usize = 40;

/// The run's working directory inside the sandbox (its `HOME` is [`TMP_DIR`]).
pub const WORK_DIR: &str = "/work";
/// The run's temporary directory inside the sandbox (`TMPDIR`, and `HOME`).
pub const TMP_DIR: &str = "/tmp";
/// POSIX shared memory (`multiprocessing`'s semaphores live here).
pub const SHM_DIR: &str = "/dev/shm";
/// Where the run's procfs is mounted.
pub const PROC_DIR: &str = "/proc";
/// The hostname inside the sandbox.
pub const HOSTNAME: &str = "pycage";
/// The uid the program runs as inside the sandbox (never 0).
pub const INSIDE_UID: u32 = 1000;
/// The gid the program runs as inside the sandbox.
pub const INSIDE_GID: u32 = 1000;
/// The user name of [`INSIDE_UID`] in the generated `/etc/passwd`.
pub const USER_NAME: &str = "pycage";

/// Directories of the fixed layout. The child creates them before anything
/// else; the run's tmpfs is mounted on `/work`, `/tmp` and `/dev/shm`.
pub const FIXED_DIRS: [&str; 6] = ["/dev", SHM_DIR, "/etc", PROC_DIR, TMP_DIR, WORK_DIR];

/// Made by the child in the working directory when the request collects
/// output (`boot.output`): the host copies what the program leaves here to
/// the caller's output directory. Without one there is no `out/`.
pub const OUTPUT_DIR: &str = "/work/out";

/// The run's tmpfs directories: `(mount point, mode)`.
pub const DISK_DIRS: [(&str, u32); 3] = [(WORK_DIR, 0o700), (TMP_DIR, 0o1777), (SHM_DIR, 0o1777)];

/// Files the sandbox writes into `/etc`. Nothing of the host's users,
/// groups or name service is copied.
pub const GENERATED_FILES: [(&str, &str); 5] = [
    (
        "/etc/passwd",
        "root:x:0:0:root:/root:/usr/sbin/nologin\npycage:x:1000:1000:pycage:/work:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    ),
    ("/etc/group", "root:x:0:\npycage:x:1000:\nnogroup:x:65534:\n"),
    ("/etc/hostname", "pycage\n"),
    ("/etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tpycage\n"),
    ("/etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\n"),
];

/// Symlinks every root gets, whatever the host has.
pub const FIXED_SYMLINKS: [(&str, &str); 4] = [
    ("/dev/fd", "/proc/self/fd"),
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
];

/// A host path exposed read-only at another path inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remap {
    /// The host path (resolved by the plan).
    pub host: PathBuf,
    /// Where it appears inside: absolute, without `.` or `..`.
    pub inside: PathBuf,
}

/// The unprivileged host ids a run is mapped to on a root host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostIds {
    /// Host uid, not 0, unique to the run.
    pub uid: u32,
    /// Host gid, not 0.
    pub gid: u32,
}

/// What the child may see and do. Built by the runtime for each run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Host files and directories exposed read-only at the same path (`/usr`,
    /// `/bin`, `/lib`, `/etc/ld.so.cache`, `--allow-read` paths, ...).
    /// Missing entries are skipped.
    pub read_only: Vec<PathBuf>,
    /// Host paths exposed read-only at another path inside.
    pub remapped: Vec<Remap>,
    /// Character devices bind-mounted read-write (`/dev/null`, `/dev/zero`,
    /// `/dev/urandom`, `/dev/random`); see [`crate::default_devices`].
    pub devices: Vec<PathBuf>,
    /// On a root host, the unprivileged host ids the run is mapped to (one
    /// per run). `None` when the host is not root: the run is then mapped
    /// to the caller's own ids, through an unprivileged user namespace.
    pub host_ids: Option<HostIds>,
    /// Most processes and threads of the run at once (`RLIMIT_NPROC`,
    /// counted per user namespace, so per run).
    pub max_processes: u64,
    /// `RLIMIT_FSIZE`: the largest file the child may write, in bytes.
    pub max_file_bytes: u64,
    /// `RLIMIT_NOFILE`: one more than the highest file descriptor number.
    pub max_open_files: u64,
    /// Size of the run's tmpfs, shared by `/work`, `/tmp` and `/dev/shm`.
    /// Its inode count is capped at one per [`BYTES_PER_INODE`].
    pub disk_bytes: u64,
    /// SysV shared memory of the run's IPC namespace, in bytes
    /// (`kernel.shmall`, and `kernel.shmmax` per segment).
    pub sysv_shm_bytes: u64,
    /// Egress through the host: `Some(port)` brings the run's `lo` up, has
    /// the supervisor listen on `127.0.0.1:port` inside the run's network
    /// namespace and hand that socket to the host ([`crate::Handoff::egress`]),
    /// and lets the program make TCP sockets (`AF_INET`, `SOCK_STREAM`):
    /// with no route but loopback, the host's listener is all it can reach.
    /// `None` (the default): no interface is up and only `AF_UNIX` sockets
    /// can be made.
    pub egress_port: Option<u16>,
}

/// The run's tmpfs gets one inode per this many bytes of `disk_bytes`
/// (at least [`MIN_DISK_INODES`]): empty files and directories cost kernel
/// memory but no tmpfs blocks, so their number needs its own cap.
pub const BYTES_PER_INODE: u64 = 8192;
/// The smallest inode cap of the run's tmpfs.
pub const MIN_DISK_INODES: u64 = 1024;

impl SandboxPolicy {
    /// `nr_inodes` of the run's tmpfs.
    pub fn disk_inodes(&self) -> u64 {
        disk_inodes(self.disk_bytes)
    }
}

/// `nr_inodes` of a run's tmpfs of `disk_bytes`.
pub fn disk_inodes(disk_bytes: u64) -> u64 {
    (disk_bytes / BYTES_PER_INODE).max(MIN_DISK_INODES)
}

/// How a bind mount is exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MountKind {
    /// Read-only, nosuid, nodev, recursively.
    ReadOnly,
    /// A device node: read-write, nosuid, noexec.
    Device,
}

impl MountKind {
    fn label(self) -> &'static str {
        match self {
            MountKind::ReadOnly => "read-only",
            MountKind::Device => "a device",
        }
    }
}

/// What sits at a bind mount's target: a directory or a non-directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A directory; its mount point is a directory.
    Dir,
    /// Anything else (regular file, device); its mount point is an empty file.
    File,
}

/// Whether `path` lies in the run's own tmpfs (`/work`, `/tmp`, `/dev/shm`),
/// which every run makes afresh (never in a [`crate::RootTemplates`]
/// template).
pub(crate) fn in_run_disk(path: &Path) -> bool {
    DISK_DIRS.iter().any(|(dir, _)| path.starts_with(dir))
}

/// One bind mount of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The resolved (symlink-free) host path.
    pub source: PathBuf,
    /// Where it is mounted inside.
    pub target: PathBuf,
    /// How it is exposed.
    pub kind: MountKind,
    /// Directory or not.
    pub node: NodeKind,
    /// Whether the child creates the mount point. False when the target
    /// lies inside an earlier same-path bind, where it already exists.
    pub create_mount_point: bool,
}

/// A symlink created in the new root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symlink {
    /// Where the link is.
    pub path: PathBuf,
    /// Its target, verbatim (relative targets stay relative).
    pub target: PathBuf,
}

/// A file the child writes into the new root (mode 0644).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedFile {
    /// Where.
    pub path: PathBuf,
    /// Its whole content.
    pub contents: &'static str,
}

/// The resolved plan for the child's new root, on top of the fixed layout
/// ([`FIXED_DIRS`], the run's tmpfs, `/proc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlan {
    /// Directories to create (mode 0755), parents first, after the fixed
    /// layout: those under `/work`, `/tmp` or `/dev/shm` land in the run's
    /// tmpfs.
    pub dirs: Vec<PathBuf>,
    /// Symlinks to create.
    pub symlinks: Vec<Symlink>,
    /// Files to write.
    pub files: Vec<GeneratedFile>,
    /// Bind mounts, parents before anything nested in them.
    pub binds: Vec<Bind>,
    /// Read-only paths of the policy that do not exist on the host.
    pub skipped: Vec<PathBuf>,
}

/// A file-system entry as seen by `lstat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory.
    Dir,
    /// A regular file (or a FIFO or socket: bound like a file).
    File,
    /// A character device.
    CharDevice,
    /// A symlink with this target.
    Symlink(PathBuf),
}

/// The host file system as the planner sees it.
pub trait HostFs {
    /// `lstat` the path (no symlink following on the last component).
    fn entry(&self, path: &Path) -> io::Result<Entry>;

    /// [`HostFs::entry`] with the identity of what is there, where the file
    /// system gives one: a kept plan holds only while every path it was
    /// made from is the very same file ([`Plans`]).
    fn identified_entry(&self, path: &Path) -> io::Result<(Entry, Option<FileId>)> {
        self.entry(path).map(|entry| (entry, None))
    }
}

/// A file's device and inode numbers.
pub type FileId = (u64, u64);

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl HostFs for RealFs {
    fn entry(&self, path: &Path) -> io::Result<Entry> {
        self.identified_entry(path).map(|(entry, _)| entry)
    }

    fn identified_entry(&self, path: &Path) -> io::Result<(Entry, Option<FileId>)> {
        let meta = std::fs::symlink_metadata(path)?;
        let file_type = meta.file_type();
        let entry = if file_type.is_symlink() {
            Entry::Symlink(std::fs::read_link(path)?)
        } else if file_type.is_dir() {
            Entry::Dir
        } else if file_type.is_char_device() {
            Entry::CharDevice
        } else {
            Entry::File
        };
        Ok((entry, Some((meta.dev(), meta.ino()))))
    }
}

/// A path resolved to its real location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The symlink-free absolute path.
    pub(crate) real: PathBuf,
    /// What is there.
    pub(crate) entry: Entry,
    /// Every symlink crossed on the way, in order.
    pub(crate) links: Vec<Symlink>,
}

/// Resolve `path` component by component, recording the symlinks crossed.
pub(crate) fn resolve(fs: &dyn HostFs, path: &Path) -> io::Result<Resolved> {
    if !path.is_absolute() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "path is not absolute"));
    }
    // Components still to walk, in reverse so the next one is at the end.
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, path);
    let mut current = PathBuf::from("/");
    let mut links = Vec::new();
    let mut entry = Entry::Dir;
    let mut hops = 0usize;
    while let Some(name) = pending.pop() {
        if name == ".." {
            current.pop();
            entry = Entry::Dir;
            continue;
        }
        if !matches!(entry, Entry::Dir) {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        let candidate = current.join(&name);
        match fs.entry(&candidate)? {
            Entry::Symlink(target) => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                links.push(Symlink { path: candidate, target: target.clone() });
                if target.is_absolute() {
                    current = PathBuf::from("/");
                }
                push_components(&mut pending, &target);
                entry = Entry::Dir;
            }
            found => {
                current = candidate;
                entry = found;
            }
        }
    }
    Ok(Resolved { real: current, entry, links })
}

/// Push the normal and `..` components of `path` onto `pending` so that the
/// first component is popped first.
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let names: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    pending.extend(names.into_iter().rev());
}

/// One resolved entry before nesting rules apply.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Planned {
    source: PathBuf,
    kind: MountKind,
    node: NodeKind,
    /// Exposed at its own (resolved) path.
    same_path: bool,
}

/// Whether `path` is reserved by the fixed layout: `/`, a fixed directory
/// or an ancestor of one, anything inside `/proc`, or a generated file.
fn is_reserved(path: &Path) -> bool {
    path == Path::new("/")
        || FIXED_DIRS.iter().any(|fixed| Path::new(fixed).starts_with(path))
        || path.starts_with(PROC_DIR)
        || GENERATED_FILES.iter().any(|(file, _)| Path::new(file) == path)
        || FIXED_SYMLINKS.iter().any(|(link, _)| Path::new(link) == path)
}

impl MountPlan {
    /// The part of the plan a root template holds (see
    /// [`crate::RootTemplates`]): everything outside the run's tmpfs.
    pub(crate) fn template_part(&self) -> MountPlan {
        MountPlan {
            dirs: self.dirs.iter().filter(|d| !in_run_disk(d)).cloned().collect(),
            symlinks: self.symlinks.iter().filter(|l| !in_run_disk(&l.path)).cloned().collect(),
            files: self.files.iter().filter(|f| !in_run_disk(&f.path)).cloned().collect(),
            binds: self.binds.iter().filter(|b| !in_run_disk(&b.target)).cloned().collect(),
            skipped: Vec::new(),
        }
    }

    /// Resolve the policy against `fs` and lay out the new root.
    pub fn build(policy: &SandboxPolicy, fs: &dyn HostFs) -> Result<MountPlan, SandboxError> {
        check_ids(policy)?;
        let hosts = policy.read_only.iter().chain(policy.remapped.iter().map(|r| &r.host)).chain(&policy.devices);
        for path in hosts {
            check_given(path)?;
        }
        for remap in &policy.remapped {
            check_inside(&remap.inside)?;
        }

        let mut entries: BTreeMap<PathBuf, Planned> = BTreeMap::new();
        let mut links: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
        let mut skipped = Vec::new();
        let mut insert = |target: PathBuf, planned: Planned| -> Result<(), SandboxError> {
            match entries.get(&target) {
                Some(existing) if *existing == planned => Ok(()),
                Some(existing) => Err(SandboxError::Conflict {
                    path: target,
                    first: existing.kind.label(),
                    second: if existing.kind == planned.kind { "another source" } else { planned.kind.label() },
                }),
                None => {
                    entries.insert(target, planned);
                    Ok(())
                }
            }
        };

        for path in &policy.read_only {
            let resolved = match resolve(fs, path) {
                Ok(resolved) => resolved,
                Err(err) if is_missing(&err) => {
                    skipped.push(path.clone());
                    continue;
                }
                Err(source) => return Err(SandboxError::Resolve { path: path.clone(), source }),
            };
            let node = node_of(&resolved.entry);
            for link in resolved.links {
                links.insert(link.path, link.target);
            }
            let real = exposable(path, resolved.real)?;
            insert(real.clone(), Planned { source: real, kind: MountKind::ReadOnly, node, same_path: true })?;
        }
        for remap in &policy.remapped {
            let resolved = resolve(fs, &remap.host)
                .map_err(|source| SandboxError::Resolve { path: remap.host.clone(), source })?;
            let node = node_of(&resolved.entry);
            let real = exposable(&remap.host, resolved.real)?;
            let planned = Planned { source: real, kind: MountKind::ReadOnly, node, same_path: false };
            insert(remap.inside.clone(), planned)?;
        }
        for path in &policy.devices {
            let resolved = resolve(fs, path).map_err(|source| SandboxError::Resolve { path: path.clone(), source })?;
            if resolved.entry != Entry::CharDevice {
                return Err(SandboxError::NotADevice { path: path.clone() });
            }
            let real = resolved.real;
            insert(
                real.clone(),
                Planned { source: real, kind: MountKind::Device, node: NodeKind::File, same_path: true },
            )?;
        }
        if let Some(target) = entries.keys().find(|target| is_reserved(target)) {
            return Err(SandboxError::Reserved { path: target.clone() });
        }

        // Same-path read-only entries inside another one are already exposed.
        let kept: Vec<(PathBuf, Planned)> = entries
            .iter()
            .filter(|(target, planned)| {
                !(planned.kind == MountKind::ReadOnly
                    && planned.same_path
                    && nearest_ancestor(&entries, target)
                        .is_some_and(|(_, a)| a.kind == MountKind::ReadOnly && a.same_path))
            })
            .map(|(target, planned)| (target.clone(), planned.clone()))
            .collect();

        let covering = |path: &Path| kept.iter().find(|(b, _)| path != b && path.starts_with(b));
        let mut binds = Vec::with_capacity(kept.len());
        for (target, planned) in &kept {
            let create_mount_point = match covering(target) {
                None => true,
                // The source lies inside the covering bind's source too, so
                // the mount point already exists in it.
                Some((_, outer)) if planned.same_path && outer.same_path => false,
                Some((outer, _)) => {
                    return Err(SandboxError::Nested { path: target.clone(), outer: outer.clone() });
                }
            };
            binds.push(Bind {
                source: planned.source.clone(),
                target: target.clone(),
                kind: planned.kind,
                node: planned.node,
                create_mount_point,
            });
        }
        if binds.len() > MAX_BINDS {
            return Err(SandboxError::TooManyPaths { count: binds.len(), limit: MAX_BINDS });
        }

        let mut symlinks: Vec<Symlink> = links
            .into_iter()
            .filter(|(path, _)| covering(path).is_none() && !is_reserved(path) && !path.starts_with(PROC_DIR))
            .map(|(path, target)| Symlink { path, target })
            .collect();
        for link in &symlinks {
            if kept.iter().any(|(b, _)| b == &link.path) {
                return Err(SandboxError::Conflict { path: link.path.clone(), first: "a symlink", second: "a mount" });
            }
        }
        symlinks.extend(
            FIXED_SYMLINKS
                .iter()
                .map(|(path, target)| Symlink { path: PathBuf::from(path), target: PathBuf::from(target) }),
        );
        let files: Vec<GeneratedFile> = GENERATED_FILES
            .iter()
            .map(|(path, contents)| GeneratedFile { path: PathBuf::from(path), contents })
            .collect();

        let mut dirs: Vec<PathBuf> = Vec::new();
        let leaves = binds
            .iter()
            .filter(|b| b.create_mount_point)
            .map(|b| b.target.as_path())
            .chain(symlinks.iter().map(|l| l.path.as_path()))
            .chain(files.iter().map(|f| f.path.as_path()));
        for leaf in leaves {
            for ancestor in leaf.ancestors().skip(1) {
                if ancestor != Path::new("/") && !FIXED_DIRS.iter().any(|fixed| Path::new(fixed) == ancestor) {
                    dirs.push(ancestor.to_path_buf());
                }
            }
        }
        dirs.sort();
        dirs.dedup();
        for dir in &dirs {
            if symlinks.iter().any(|l| &l.path == dir) {
                return Err(SandboxError::Conflict { path: dir.clone(), first: "a symlink", second: "a directory" });
            }
        }
        let count = dirs.len().max(symlinks.len());
        if count > MAX_MOUNT_ENTRIES {
            return Err(SandboxError::TooManyPaths { count, limit: MAX_MOUNT_ENTRIES });
        }
        Ok(MountPlan { dirs, symlinks, files, binds, skipped })
    }

    /// Inodes the new root's tmpfs needs, with headroom.
    pub(crate) fn tmpfs_inodes(&self) -> usize {
        self.dirs.len() + self.symlinks.len() + self.binds.len() + self.files.len() + FIXED_DIRS.len() + 64
    }
}

/// What one [`HostFs::entry`] call answered, comparable: the entry, or the
/// error's errno and kind.
type Answer = Result<(Entry, Option<FileId>), (Option<i32>, io::ErrorKind)>;

fn answer(result: &io::Result<(Entry, Option<FileId>)>) -> Answer {
    match result {
        Ok(found) => Ok(found.clone()),
        Err(err) => Err((err.raw_os_error(), err.kind())),
    }
}

/// A [`HostFs`] that records every question and answer of another.
struct Recording<'a> {
    fs: &'a dyn HostFs,
    seen: std::cell::RefCell<Vec<(PathBuf, Answer)>>,
}

impl HostFs for Recording<'_> {
    fn entry(&self, path: &Path) -> io::Result<Entry> {
        let result = self.fs.identified_entry(path);
        let got = answer(&result);
        let mut seen = self.seen.borrow_mut();
        // A build asks about some paths many times (`/etc` and `/usr` six
        // to eight times for the default policy): the replay asks each
        // question once. A second, different answer (the path changed
        // during the build) is kept too, so no replay can match both and
        // the plan is built again.
        if !seen.iter().any(|(p, was)| p == path && *was == got) {
            seen.push((path.to_path_buf(), got));
        }
        result.map(|(entry, _)| entry)
    }
}

/// Plans a shell helper keeps (one per policy it saw last); the oldest goes.
const MAX_KEPT_PLANS: usize = 4;

/// One kept plan: what it was built from, every answer of the file system
/// it depends on, and the plan.
#[derive(Debug)]
struct KeptPlan {
    read_only: Vec<PathBuf>,
    remapped: Vec<Remap>,
    devices: Vec<PathBuf>,
    seen: Vec<(PathBuf, Answer)>,
    /// Shared with every shell built from it (see
    /// [`crate::Preparations`]): one plan, not a copy per shell.
    plan: Arc<MountPlan>,
}

/// Mount plans kept between shells of the same policy.
///
/// Building a plan is mostly path arithmetic in user space (resolving,
/// nesting, reserved paths: about 0.1 ms for the default paths), the same
/// for every shell of a policy. A plan is a function of the policy's paths
/// and of what `lstat`/`readlink` answer for each path component on the way,
/// so a kept plan is still the plan if the file system gives each of those
/// questions the answer it gave then: [`Plans::plan`] asks them again (the
/// system calls of a build without its arithmetic) and builds afresh on any
/// difference (a symlink retargeted, a directory that became a file or
/// vanished, a skipped path that appeared). Which inode a path names is not
/// a question the plan asks: the Landlock ruleset (opened from the paths
/// for every run) and [`crate::RootTemplates`] check that.
#[derive(Debug, Default)]
pub struct Plans {
    kept: Vec<KeptPlan>,
    built: u64,
}

impl Plans {
    /// No plans kept yet.
    pub fn new() -> Plans {
        Plans::default()
    }

    /// The plan of `policy` on the real file system: [`MountPlan::build`]'s,
    /// kept from an earlier call if every answer it depends on is the same.
    pub fn plan(&mut self, policy: &SandboxPolicy) -> Result<Arc<MountPlan>, SandboxError> {
        self.plan_on(policy, &RealFs)
    }

    /// How many plans were built (not kept) so far.
    pub fn built(&self) -> u64 {
        self.built
    }

    /// The identity `path` had when the kept `plan` was made, if it was
    /// asked about then and answered once, with one.
    pub fn identity(&self, plan: &Arc<MountPlan>, path: &Path) -> Option<FileId> {
        let kept = self.kept.iter().find(|kept| Arc::ptr_eq(&kept.plan, plan))?;
        let mut answers = kept.seen.iter().filter(|(seen, _)| seen == path);
        match (answers.next(), answers.next()) {
            (Some((_, Ok((_, id)))), None) => *id,
            _ => None,
        }
    }

    fn plan_on(&mut self, policy: &SandboxPolicy, fs: &dyn HostFs) -> Result<Arc<MountPlan>, SandboxError> {
        let found = self.kept.iter().position(|kept| {
            kept.read_only == policy.read_only && kept.remapped == policy.remapped && kept.devices == policy.devices
        });
        if let Some(index) = found {
            let holds = self
                .kept
                .get(index)
                .is_some_and(|kept| kept.seen.iter().all(|(path, was)| answer(&fs.identified_entry(path)) == *was));
            match self.kept.get(index) {
                // The one check a build makes that is not about paths.
                Some(kept) if holds => return check_ids(policy).map(|()| Arc::clone(&kept.plan)),
                _ => {
                    self.kept.remove(index);
                }
            }
        }
        let recording = Recording { fs, seen: std::cell::RefCell::new(Vec::new()) };
        let plan = Arc::new(MountPlan::build(policy, &recording)?);
        self.built += 1;
        if self.kept.len() >= MAX_KEPT_PLANS {
            self.kept.remove(0);
        }
        self.kept.push(KeptPlan {
            read_only: policy.read_only.clone(),
            remapped: policy.remapped.clone(),
            devices: policy.devices.clone(),
            seen: recording.seen.into_inner(),
            plan: Arc::clone(&plan),
        });
        Ok(plan)
    }
}

/// A run's host ids, if given, must not be root's.
fn check_ids(policy: &SandboxPolicy) -> Result<(), SandboxError> {
    match policy.host_ids {
        Some(ids) if ids.uid == 0 || ids.gid == 0 => Err(SandboxError::PrivilegedId { uid: ids.uid, gid: ids.gid }),
        _ => Ok(()),
    }
}

fn node_of(entry: &Entry) -> NodeKind {
    match entry {
        Entry::Dir => NodeKind::Dir,
        Entry::File | Entry::CharDevice | Entry::Symlink(_) => NodeKind::File,
    }
}

/// The resolved path, unless it is the host root.
fn exposable(given: &Path, real: PathBuf) -> Result<PathBuf, SandboxError> {
    if real == Path::new("/") {
        return Err(SandboxError::ExposesRoot { path: given.to_path_buf() });
    }
    Ok(real)
}

/// The deepest entry strictly above `path`.
fn nearest_ancestor<'a>(entries: &'a BTreeMap<PathBuf, Planned>, path: &Path) -> Option<(&'a PathBuf, &'a Planned)> {
    path.ancestors().skip(1).find_map(|ancestor| entries.get_key_value(ancestor))
}

fn is_missing(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::NotFound || err.raw_os_error() == Some(libc::ENOTDIR)
}

fn check_given(path: &Path) -> Result<(), SandboxError> {
    if !path.is_absolute() {
        return Err(SandboxError::RelativePath { path: path.to_path_buf() });
    }
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(SandboxError::NulInPath { path: path.to_path_buf() });
    }
    Ok(())
}

/// An inside path: absolute, only normal components, not `/`.
fn check_inside(path: &Path) -> Result<(), SandboxError> {
    check_given(path)?;
    // `Path::components` hides `.`; look at the raw segments.
    let normal = path.as_os_str().as_bytes().split(|b| *b == b'/').all(|segment| segment != b"." && segment != b"..");
    if !normal || path == Path::new("/") {
        return Err(SandboxError::BadInsidePath { path: path.to_path_buf() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A fake host file system: absolute path -> entry. Parents are implied
    /// directories.
    #[derive(Default)]
    struct FakeFs(HashMap<PathBuf, Entry>);

    impl FakeFs {
        fn with(mut self, path: &str, entry: Entry) -> Self {
            self.0.insert(PathBuf::from(path), entry);
            self
        }
        fn dir(self, path: &str) -> Self {
            self.with(path, Entry::Dir)
        }
        fn file(self, path: &str) -> Self {
            self.with(path, Entry::File)
        }
        fn link(self, path: &str, target: &str) -> Self {
            self.with(path, Entry::Symlink(PathBuf::from(target)))
        }
        fn dev(self, path: &str) -> Self {
            self.with(path, Entry::CharDevice)
        }
    }

    /// Counts the questions asked of another [`HostFs`].
    struct Counting<'a>(&'a dyn HostFs, std::cell::Cell<usize>);

    impl HostFs for Counting<'_> {
        fn entry(&self, path: &Path) -> io::Result<Entry> {
            self.1.set(self.1.get() + 1);
            self.0.entry(path)
        }
    }

    impl HostFs for FakeFs {
        fn entry(&self, path: &Path) -> io::Result<Entry> {
            if let Some(entry) = self.0.get(path) {
                return Ok(entry.clone());
            }
            // A path is an implied directory if something lies under it.
            if self.0.keys().any(|k| k != path && k.starts_with(path)) {
                return Ok(Entry::Dir);
            }
            Err(io::Error::from(io::ErrorKind::NotFound))
        }
    }

    fn debian() -> FakeFs {
        FakeFs::default()
            .dir("/usr/bin")
            .dir("/usr/lib/x86_64-linux-gnu")
            .dir("/usr/lib64")
            .file("/usr/lib64/ld-linux-x86-64.so.2")
            .link("/bin", "usr/bin")
            .link("/lib", "usr/lib")
            .link("/lib64", "usr/lib64")
            .file("/etc/ld.so.cache")
            .link("/etc/localtime", "/usr/share/zoneinfo/Etc/UTC")
            .file("/usr/share/zoneinfo/Etc/UTC")
            .dir("/root/.pyenv/versions/3.11.7/lib/python3.11")
            .dir("/tmp/pycage-bootstrap-x/pycage")
            .dir("/home/u/data")
            .file("/home/u/notes.txt")
            .dev("/dev/null")
            .dev("/dev/urandom")
    }

    fn policy(read_only: &[&str], remapped: &[(&str, &str)]) -> SandboxPolicy {
        SandboxPolicy {
            read_only: read_only.iter().map(PathBuf::from).collect(),
            remapped: remapped
                .iter()
                .map(|(host, inside)| Remap { host: PathBuf::from(host), inside: PathBuf::from(inside) })
                .collect(),
            devices: vec![PathBuf::from("/dev/null"), PathBuf::from("/dev/urandom")],
            host_ids: Some(HostIds { uid: 1000, gid: 1000 }),
            max_processes: 16,
            max_file_bytes: 1 << 20,
            max_open_files: 64,
            disk_bytes: 64 << 20,
            sysv_shm_bytes: 1 << 20,
            egress_port: None,
        }
    }

    fn bind(source: &str, target: &str, kind: MountKind, node: NodeKind, create: bool) -> Bind {
        Bind { source: PathBuf::from(source), target: PathBuf::from(target), kind, node, create_mount_point: create }
    }

    fn ro(path: &str, node: NodeKind) -> Bind {
        bind(path, path, MountKind::ReadOnly, node, true)
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    fn link(path: &str, target: &str) -> Symlink {
        Symlink { path: PathBuf::from(path), target: PathBuf::from(target) }
    }

    fn fixed_links() -> Vec<Symlink> {
        FIXED_SYMLINKS.iter().map(|(p, t)| link(p, t)).collect()
    }

    #[test]
    fn typical_python_policy_plans_the_whole_root() {
        let plan = MountPlan::build(
            &policy(
                &["/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc/ld.so.cache", "/etc/localtime"],
                &[
                    ("/root/.pyenv/versions/3.11.7", "/opt/python"),
                    ("/tmp/pycage-bootstrap-x", "/opt/pycage"),
                    ("/home/u/data", "/work/data"),
                    ("/home/u/notes.txt", "/work/notes.txt"),
                ],
            ),
            &debian(),
        )
        .unwrap();
        let mut symlinks = vec![
            link("/bin", "usr/bin"),
            link("/etc/localtime", "/usr/share/zoneinfo/Etc/UTC"),
            link("/lib", "usr/lib"),
            link("/lib64", "usr/lib64"),
        ];
        symlinks.extend(fixed_links());
        assert_eq!(
            plan,
            MountPlan {
                dirs: paths(&["/opt"]),
                symlinks,
                files: GENERATED_FILES
                    .iter()
                    .map(|(path, contents)| GeneratedFile { path: PathBuf::from(path), contents })
                    .collect(),
                binds: vec![
                    bind("/dev/null", "/dev/null", MountKind::Device, NodeKind::File, true),
                    bind("/dev/urandom", "/dev/urandom", MountKind::Device, NodeKind::File, true),
                    ro("/etc/ld.so.cache", NodeKind::File),
                    bind("/root/.pyenv/versions/3.11.7", "/opt/pycage", MountKind::ReadOnly, NodeKind::Dir, true)
                        .with_source("/tmp/pycage-bootstrap-x"),
                    bind("/root/.pyenv/versions/3.11.7", "/opt/python", MountKind::ReadOnly, NodeKind::Dir, true),
                    ro("/usr", NodeKind::Dir),
                    bind("/home/u/data", "/work/data", MountKind::ReadOnly, NodeKind::Dir, true),
                    bind("/home/u/notes.txt", "/work/notes.txt", MountKind::ReadOnly, NodeKind::File, true),
                ],
                skipped: paths(&["/sbin"]),
            }
        );
        // Nothing of /root or /home is created in the new root.
        assert!(plan.dirs.iter().all(|d| !d.starts_with("/root") && !d.starts_with("/home")));
    }

    impl Bind {
        fn with_source(mut self, source: &str) -> Bind {
            self.source = PathBuf::from(source);
            self
        }
    }

    #[test]
    fn resolve_follows_relative_and_absolute_links_and_dotdot() {
        let fs = debian().link("/opt/py", "../root/.pyenv/versions/3.11.7");
        let resolved = resolve(&fs, Path::new("/opt/./py/lib/../lib/python3.11")).unwrap();
        assert_eq!(
            resolved,
            Resolved {
                real: PathBuf::from("/root/.pyenv/versions/3.11.7/lib/python3.11"),
                entry: Entry::Dir,
                links: vec![link("/opt/py", "../root/.pyenv/versions/3.11.7")],
            }
        );
    }

    #[test]
    fn resolve_stops_symlink_loops() {
        let fs = FakeFs::default().link("/a", "/b").link("/b", "/a");
        let err = resolve(&fs, Path::new("/a/x")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
    }

    #[test]
    fn resolve_rejects_walking_through_a_file() {
        let err = resolve(&debian(), Path::new("/etc/ld.so.cache/x")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR));
    }

    #[test]
    fn nested_read_only_is_dropped_device_is_kept_on_top() {
        let fs = debian().dev("/usr/share/dev0");
        let mut p = policy(&["/usr", "/usr/lib", "/lib/x86_64-linux-gnu"], &[]);
        p.devices.push(PathBuf::from("/usr/share/dev0"));
        let plan = MountPlan::build(&p, &fs).unwrap();
        assert_eq!(
            plan.binds.iter().filter(|b| b.target.starts_with("/usr")).cloned().collect::<Vec<_>>(),
            vec![
                ro("/usr", NodeKind::Dir),
                bind("/usr/share/dev0", "/usr/share/dev0", MountKind::Device, NodeKind::File, false)
            ]
        );
        // /lib/x86_64-linux-gnu resolved through the /lib link into /usr.
        assert!(plan.symlinks.contains(&link("/lib", "usr/lib")));
    }

    #[test]
    fn symlinks_inside_a_bind_are_not_recreated() {
        let fs = debian().link("/usr/lib/libpython.so", "libpython.so.1").file("/usr/lib/libpython.so.1");
        let plan = MountPlan::build(&policy(&["/usr", "/usr/lib/libpython.so"], &[]), &fs).unwrap();
        assert_eq!(plan.symlinks, fixed_links());
    }

    #[test]
    fn duplicates_collapse_and_dotdot_follows_the_kernel() {
        // "/lib/.." is the parent of the real "/usr/lib": "/usr", as the kernel resolves it.
        let plan = MountPlan::build(&policy(&["/usr", "/usr/", "/usr/.", "/lib/.."], &[]), &debian()).unwrap();
        assert_eq!(plan.binds.iter().filter(|b| b.target == Path::new("/usr")).count(), 1);
        let err = MountPlan::build(&policy(&["/usr/.."], &[]), &debian()).unwrap_err();
        assert!(matches!(err, SandboxError::ExposesRoot { .. }), "{err}");
        let err = MountPlan::build(&policy(&[], &[("/usr/..", "/opt/root")]), &debian()).unwrap_err();
        assert!(matches!(err, SandboxError::ExposesRoot { .. }), "{err}");
    }

    #[test]
    fn one_target_one_source() {
        let err =
            MountPlan::build(&policy(&[], &[("/usr", "/opt/x"), ("/home/u/data", "/opt/x")]), &debian()).unwrap_err();
        assert!(matches!(err, SandboxError::Conflict { ref path, .. } if path == Path::new("/opt/x")), "{err}");
        // The same remap twice is one bind.
        let plan = MountPlan::build(&policy(&[], &[("/usr", "/opt/x"), ("/usr/", "/opt/x")]), &debian()).unwrap();
        assert_eq!(plan.binds.iter().filter(|b| b.target == Path::new("/opt/x")).count(), 1);
    }

    #[test]
    fn the_fixed_layout_is_reserved() {
        let fs = debian().dir("/proc/1").dir("/tmp/x").dir("/etc/ssl").dir("/var/lib");
        for read_only in ["/tmp", "/proc/1", "/etc", "/dev"] {
            let err = MountPlan::build(&policy(&[read_only], &[]), &fs).unwrap_err();
            assert!(matches!(err, SandboxError::Reserved { .. }), "{read_only}: {err}");
        }
        for inside in ["/work", "/etc/passwd", "/proc/x", "/dev/fd", "/dev/shm"] {
            let err = MountPlan::build(&policy(&[], &[("/usr", inside)]), &fs).unwrap_err();
            assert!(matches!(err, SandboxError::Reserved { .. }), "{inside}: {err}");
        }
        // Inside the run's tmpfs or /etc is fine: the mount point is created there.
        let plan = MountPlan::build(&policy(&["/tmp/x", "/etc/ssl"], &[("/var/lib", "/work/a/b")]), &fs).unwrap();
        assert!(plan.binds.contains(&ro("/tmp/x", NodeKind::Dir)));
        assert!(plan.binds.contains(&ro("/etc/ssl", NodeKind::Dir)));
        assert!(plan.dirs.contains(&PathBuf::from("/work/a")));
    }

    #[test]
    fn host_links_at_reserved_paths_are_not_recreated() {
        let fs = debian().link("/tmp", "/private/tmp").dir("/private/tmp/x");
        let plan = MountPlan::build(&policy(&["/tmp/x"], &[]), &fs).unwrap();
        assert!(plan.binds.contains(&ro("/private/tmp/x", NodeKind::Dir)));
        assert_eq!(plan.symlinks, fixed_links());
    }

    #[test]
    fn a_remap_cannot_go_inside_another_mount() {
        let err = MountPlan::build(&policy(&["/usr"], &[("/home/u/data", "/usr/data")]), &debian()).unwrap_err();
        assert!(
            matches!(err, SandboxError::Nested { ref path, ref outer }
            if path == Path::new("/usr/data") && outer == Path::new("/usr")),
            "{err}"
        );
    }

    #[test]
    fn policy_errors() {
        let fs = debian();
        let p = policy(&["usr"], &[]);
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::RelativePath { .. })));
        let mut p = policy(&[], &[]);
        p.host_ids = Some(HostIds { uid: 0, gid: 5 });
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::PrivilegedId { uid: 0, .. })));
        p.host_ids = None;
        assert!(MountPlan::build(&p, &fs).is_ok(), "rootless: no host ids");
        let p = policy(&[], &[("/home/u/missing", "/work/m")]);
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::Resolve { .. })));
        let mut p = policy(&[], &[]);
        p.devices = vec![PathBuf::from("/etc/ld.so.cache")];
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::NotADevice { .. })));
        let p = policy(&[], &[("/usr", "opt/x")]);
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::RelativePath { .. })));
        for inside in ["/opt/../x", "/opt/./x", "/"] {
            let p = policy(&[], &[("/usr", inside)]);
            assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::BadInsidePath { .. })), "{inside}");
        }
        let p = policy(&[std::str::from_utf8(b"/us\0r").unwrap()], &[]);
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::NulInPath { .. })));
    }

    #[test]
    fn too_many_binds() {
        let mut fs = debian();
        let mut p = policy(&[], &[]);
        for i in 0..=MAX_BINDS {
            fs = fs.file(&format!("/data/f{i}"));
            p.remapped.push(Remap {
                host: PathBuf::from(format!("/data/f{i}")),
                inside: PathBuf::from(format!("/work/f{i}")),
            });
        }
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::TooManyPaths { .. })));
    }

    #[test]
    fn disk_inodes_scale_with_the_budget() {
        let mut p = policy(&[], &[]);
        p.disk_bytes = 256 << 20;
        assert_eq!(p.disk_inodes(), 32768);
        p.disk_bytes = 1 << 20;
        assert_eq!(p.disk_inodes(), MIN_DISK_INODES);
    }

    #[test]
    fn a_kept_plan_serves_while_every_answer_holds() {
        let fs = |lib_target: &str| {
            FakeFs::default()
                .dir("/usr/lib")
                .link("/lib", lib_target)
                .dir("/usr/lib64")
                .dev("/dev/null")
                .dev("/dev/urandom")
                .dir("/opt/py")
        };
        let mut p = policy(&["/lib", "/usr", "/srv/missing"], &[("/opt/py", "/opt/python")]);
        let mut plans = Plans::new();
        let first = plans.plan_on(&p, &fs("usr/lib")).unwrap();
        assert_eq!(*first, MountPlan::build(&p, &fs("usr/lib")).unwrap());
        // Another run of the policy: other host ids, the same plan, kept.
        p.host_ids = Some(HostIds { uid: 2000, gid: 2000 });
        // The very plan: shells of a policy share it, and what is built
        // from it (`Preparations` keys on it).
        assert!(Arc::ptr_eq(&plans.plan_on(&p, &fs("usr/lib")).unwrap(), &first));
        assert_eq!(plans.built(), 1);
        // Ids are still checked on a kept plan.
        p.host_ids = Some(HostIds { uid: 0, gid: 2000 });
        assert!(matches!(plans.plan_on(&p, &fs("usr/lib")), Err(SandboxError::PrivilegedId { .. })));
        p.host_ids = Some(HostIds { uid: 2000, gid: 2000 });
        // A symlink retargeted: built again, and what a build gives.
        let moved = plans.plan_on(&p, &fs("usr/lib64")).unwrap();
        assert_eq!(plans.built(), 2);
        assert_eq!(*moved, MountPlan::build(&p, &fs("usr/lib64")).unwrap());
        assert_ne!(moved, first);
        // A skipped path that appeared since.
        let appeared = fs("usr/lib64").dir("/srv/missing");
        let with_srv = plans.plan_on(&p, &appeared).unwrap();
        assert_eq!(plans.built(), 3);
        assert!(with_srv.binds.iter().any(|b| b.target == Path::new("/srv/missing")), "{with_srv:?}");
        // A directory that became a file.
        let changed = FakeFs::default()
            .dir("/usr/lib")
            .link("/lib", "usr/lib64")
            .file("/usr/lib64")
            .dev("/dev/null")
            .dev("/dev/urandom")
            .dir("/opt/py")
            .dir("/srv/missing");
        let file_plan = plans.plan_on(&p, &changed).unwrap();
        assert_eq!(plans.built(), 4);
        assert_eq!(*file_plan, MountPlan::build(&p, &changed).unwrap());
        // A replay asks each distinct question once, fewer than a build.
        let building = Counting(&changed, std::cell::Cell::new(0));
        MountPlan::build(&p, &building).unwrap();
        let replaying = Counting(&changed, std::cell::Cell::new(0));
        assert_eq!(plans.plan_on(&p, &replaying).unwrap(), file_plan);
        assert_eq!(plans.built(), 4);
        let kept = plans.kept.iter().find(|k| k.read_only == p.read_only).unwrap();
        let distinct: std::collections::HashSet<&PathBuf> = kept.seen.iter().map(|(path, _)| path).collect();
        assert_eq!(replaying.1.get(), distinct.len());
        assert!(replaying.1.get() < building.1.get(), "{} {}", replaying.1.get(), building.1.get());
        // Another policy gets its own plan; the first is still kept.
        let other = policy(&["/usr"], &[("/opt/py", "/opt/python")]);
        plans.plan_on(&other, &changed).unwrap();
        plans.plan_on(&p, &changed).unwrap();
        assert_eq!(plans.built(), 5);
    }
}
