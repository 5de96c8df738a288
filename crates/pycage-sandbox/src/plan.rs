//! The policy and the pure mount plan.
//!
//! [`MountPlan::build`] turns a [`SandboxPolicy`] into the exact list of
//! directories, symlinks and bind mounts the child creates in its new root.
//! It reads the host file system only through the small [`HostFs`] trait, so
//! every rule below is unit-tested against a fake file system.
//!
//! Rules:
//! - Every path must be absolute. `.` components are dropped and `..` is
//!   resolved against the real parent, as the kernel does.
//! - Symlinks are resolved component by component. Each symlink met on the
//!   way is recreated verbatim in the new root (`/lib -> usr/lib` on a
//!   merged-`/usr` system), and the bind mount is made at the real path, so a
//!   path resolves inside the sandbox exactly as it does on the host.
//! - A read-only path that does not exist is skipped (an interpreter's
//!   `sys.path` lists a `pythonXY.zip` that usually does not exist) and
//!   recorded in [`MountPlan::skipped`]. A missing read-write path or device
//!   is an error.
//! - One resolved path has one kind; two kinds for the same path is a
//!   [`SandboxError::Conflict`].
//! - An entry nested inside another entry of the same kind is dropped (it is
//!   already exposed with the same access). An entry nested inside an entry of
//!   another kind is kept and mounted on top, after its parent: a read-only
//!   directory inside the read-write run dir stays read-only.
//! - Directories of the new root that are not mount points are created with
//!   mode 0755, so the unprivileged uid can traverse `/root` to reach
//!   `/root/.pyenv/...` while `/root` holds nothing else.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

use crate::SandboxError;

/// Most entries (binds, directories, symlinks, each) a plan may hold. The
/// child reports a failing entry by a 16-bit index, and the tmpfs holding
/// the new root is sized by this count.
pub const MAX_MOUNT_ENTRIES: usize = 4096;

/// Most symlinks followed while resolving one path, as the kernel's
/// `MAXSYMLINKS`.
pub const MAX_SYMLINK_HOPS: usize = 40;

/// What the child may see and do. Built by the runtime for each run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Files and directories exposed read-only at the same absolute path
    /// (interpreter prefix, bootstrap dir, `/usr`, `/lib`, `/lib64`,
    /// `/etc/ld.so.cache`, extra `--allow-read` paths, ...). Missing entries
    /// are skipped.
    pub read_only: Vec<PathBuf>,
    /// Directories (or files) exposed read-write at the same path. The first
    /// entry is the run directory: the child's working directory. The
    /// runtime creates it owned by `uid`, mode 0700.
    pub read_write: Vec<PathBuf>,
    /// Character devices bind-mounted read-write (`/dev/null`, `/dev/zero`,
    /// `/dev/urandom`, `/dev/random`); see [`crate::default_devices`].
    pub devices: Vec<PathBuf>,
    /// The unprivileged host uid the child runs as (one per run).
    pub uid: u32,
    /// The unprivileged host gid the child runs as.
    pub gid: u32,
    /// `RLIMIT_NPROC` for the interpreter and everything it starts. The
    /// sandbox adds one for its own supervisor process, which shares the uid.
    pub max_processes: u64,
    /// `RLIMIT_FSIZE`: the largest file the child may write, in bytes.
    pub max_file_bytes: u64,
    /// `RLIMIT_NOFILE`: one more than the highest file descriptor number.
    pub max_open_files: u64,
    /// An empty directory (mode 0700) created by the runtime for this run,
    /// outside every exposed path (not inside the run dir). A tmpfs is
    /// mounted on it, inside the child's private mount namespace only, and
    /// becomes the child's `/`; the host never sees that mount.
    pub staging_dir: PathBuf,
}

/// How a bind mount is exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MountKind {
    /// Read-only, nosuid, nodev, recursively.
    ReadOnly,
    /// Read-write, nosuid, nodev, recursively.
    ReadWrite,
    /// A device node: read-write, nosuid, noexec.
    Device,
}

impl MountKind {
    fn label(self) -> &'static str {
        match self {
            MountKind::ReadOnly => "read-only",
            MountKind::ReadWrite => "read-write",
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

/// One bind mount of the plan. The source and the target are the same
/// absolute path: the host path outside, the same path in the new root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The resolved (symlink-free) host path.
    pub path: PathBuf,
    /// How it is exposed.
    pub kind: MountKind,
    /// Directory or not.
    pub node: NodeKind,
    /// Whether the child creates the mount point in the tmpfs. False when the
    /// path lies inside an earlier bind mount, where it already exists.
    pub create_mount_point: bool,
}

/// A host symlink recreated in the new root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symlink {
    /// Where the link is.
    pub path: PathBuf,
    /// Its target, verbatim (relative targets stay relative).
    pub target: PathBuf,
}

/// The resolved plan for the child's new root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlan {
    /// Directories created in the tmpfs (mode 0755), parents first.
    pub dirs: Vec<PathBuf>,
    /// Symlinks recreated in the tmpfs.
    pub symlinks: Vec<Symlink>,
    /// Bind mounts, parents before anything nested in them.
    pub binds: Vec<Bind>,
    /// The resolved run directory (the child's working directory).
    pub run_dir: PathBuf,
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
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl HostFs for RealFs {
    fn entry(&self, path: &Path) -> io::Result<Entry> {
        let meta = std::fs::symlink_metadata(path)?;
        let file_type = meta.file_type();
        if file_type.is_symlink() {
            Ok(Entry::Symlink(std::fs::read_link(path)?))
        } else if file_type.is_dir() {
            Ok(Entry::Dir)
        } else if file_type.is_char_device() {
            Ok(Entry::CharDevice)
        } else {
            Ok(Entry::File)
        }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Planned {
    kind: MountKind,
    node: NodeKind,
}

impl MountPlan {
    /// Resolve the policy against `fs` and lay out the new root.
    pub fn build(policy: &SandboxPolicy, fs: &dyn HostFs) -> Result<MountPlan, SandboxError> {
        if policy.uid == 0 || policy.gid == 0 {
            return Err(SandboxError::PrivilegedId { uid: policy.uid, gid: policy.gid });
        }
        if policy.read_write.is_empty() {
            return Err(SandboxError::NoRunDir);
        }
        let all_given = policy
            .read_only
            .iter()
            .chain(&policy.read_write)
            .chain(&policy.devices)
            .chain(std::iter::once(&policy.staging_dir));
        for path in all_given {
            check_given(path)?;
        }

        let mut entries: BTreeMap<PathBuf, Planned> = BTreeMap::new();
        let mut links: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
        let mut skipped = Vec::new();
        let mut run_dir = None;

        let given = policy
            .read_only
            .iter()
            .map(|p| (p, MountKind::ReadOnly, false))
            .chain(policy.read_write.iter().enumerate().map(|(i, p)| (p, MountKind::ReadWrite, i == 0)))
            .chain(policy.devices.iter().map(|p| (p, MountKind::Device, false)));
        for (path, kind, is_run_dir) in given {
            let resolved = match resolve(fs, path) {
                Ok(resolved) => resolved,
                Err(err) if kind == MountKind::ReadOnly && is_missing(&err) => {
                    skipped.push(path.clone());
                    continue;
                }
                Err(source) => return Err(SandboxError::Resolve { path: path.clone(), source }),
            };
            if resolved.real == Path::new("/") {
                return Err(SandboxError::ExposesRoot { path: path.clone() });
            }
            let node = match (&resolved.entry, kind) {
                (Entry::CharDevice, MountKind::Device) => NodeKind::File,
                (_, MountKind::Device) => return Err(SandboxError::NotADevice { path: path.clone() }),
                (Entry::Dir, _) => NodeKind::Dir,
                (Entry::File | Entry::CharDevice | Entry::Symlink(_), _) => NodeKind::File,
            };
            if is_run_dir {
                if node != NodeKind::Dir {
                    return Err(SandboxError::RunDirNotDirectory { path: resolved.real });
                }
                run_dir = Some(resolved.real.clone());
            }
            for link in resolved.links {
                links.insert(link.path, link.target);
            }
            let planned = Planned { kind, node };
            match entries.get(&resolved.real) {
                Some(existing) if existing.kind != kind => {
                    return Err(SandboxError::Conflict {
                        path: resolved.real,
                        first: existing.kind.label(),
                        second: kind.label(),
                    })
                }
                Some(_) => {}
                None => {
                    entries.insert(resolved.real, planned);
                }
            }
        }
        let run_dir = run_dir.ok_or(SandboxError::NoRunDir)?;

        // Drop entries whose nearest enclosing entry has the same kind.
        let kept: Vec<(PathBuf, Planned)> = entries
            .iter()
            .filter(|(path, planned)| {
                planned.kind == MountKind::Device
                    || nearest_ancestor(&entries, path).map(|(_, a)| a.kind) != Some(planned.kind)
            })
            .map(|(path, planned)| (path.clone(), *planned))
            .collect();

        let covered = |path: &Path| kept.iter().any(|(b, _)| path != b && path.starts_with(b));
        let binds: Vec<Bind> = kept
            .iter()
            .map(|(path, planned)| Bind {
                path: path.clone(),
                kind: planned.kind,
                node: planned.node,
                create_mount_point: !covered(path),
            })
            .collect();

        let symlinks: Vec<Symlink> = links
            .into_iter()
            .filter(|(path, _)| !covered(path))
            .map(|(path, target)| Symlink { path, target })
            .collect();
        for link in &symlinks {
            if kept.iter().any(|(b, _)| b == &link.path) {
                return Err(SandboxError::Conflict { path: link.path.clone(), first: "a symlink", second: "a mount" });
            }
        }

        let mut dirs: Vec<PathBuf> = Vec::new();
        let leaves = binds
            .iter()
            .filter(|b| b.create_mount_point)
            .map(|b| b.path.as_path())
            .chain(symlinks.iter().map(|l| l.path.as_path()));
        for leaf in leaves {
            for ancestor in leaf.ancestors().skip(1) {
                if ancestor != Path::new("/") {
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

        let count = dirs.len().max(binds.len()).max(symlinks.len());
        if count > MAX_MOUNT_ENTRIES {
            return Err(SandboxError::TooManyPaths { count, limit: MAX_MOUNT_ENTRIES });
        }
        Ok(MountPlan { dirs, symlinks, binds, run_dir, skipped })
    }

    /// Inodes the new root's tmpfs needs, with headroom.
    pub(crate) fn tmpfs_inodes(&self) -> usize {
        self.dirs.len() + self.symlinks.len() + self.binds.len() + 64
    }
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
            .dir("/usr/lib/x86_64-linux-gnu")
            .dir("/usr/lib64")
            .file("/usr/lib64/ld-linux-x86-64.so.2")
            .link("/lib", "usr/lib")
            .link("/lib64", "usr/lib64")
            .file("/etc/ld.so.cache")
            .link("/etc/localtime", "/usr/share/zoneinfo/Etc/UTC")
            .file("/usr/share/zoneinfo/Etc/UTC")
            .dir("/root/.pyenv/versions/3.11.7/lib/python3.11")
            .dir("/tmp/run")
            .dir("/tmp/stage")
            .dev("/dev/null")
            .dev("/dev/urandom")
    }

    fn policy(read_only: &[&str]) -> SandboxPolicy {
        SandboxPolicy {
            read_only: read_only.iter().map(PathBuf::from).collect(),
            read_write: vec![PathBuf::from("/tmp/run")],
            devices: vec![PathBuf::from("/dev/null"), PathBuf::from("/dev/urandom")],
            uid: 1000,
            gid: 1000,
            max_processes: 16,
            max_file_bytes: 1 << 20,
            max_open_files: 64,
            staging_dir: PathBuf::from("/tmp/stage"),
        }
    }

    fn bind(path: &str, kind: MountKind, node: NodeKind, create: bool) -> Bind {
        Bind { path: PathBuf::from(path), kind, node, create_mount_point: create }
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn typical_python_policy_plans_the_whole_root() {
        let plan = MountPlan::build(
            &policy(&[
                "/usr",
                "/lib",
                "/lib64",
                "/etc/ld.so.cache",
                "/etc/localtime",
                "/root/.pyenv/versions/3.11.7",
                "/root/.pyenv/versions/3.11.7/lib/python3.11",
                "/root/.pyenv/versions/3.11.7/lib/python311.zip",
            ]),
            &debian(),
        )
        .unwrap();
        assert_eq!(
            plan,
            MountPlan {
                dirs: paths(&["/dev", "/etc", "/root", "/root/.pyenv", "/root/.pyenv/versions", "/tmp"]),
                symlinks: vec![
                    Symlink {
                        path: PathBuf::from("/etc/localtime"),
                        target: PathBuf::from("/usr/share/zoneinfo/Etc/UTC"),
                    },
                    Symlink { path: PathBuf::from("/lib"), target: PathBuf::from("usr/lib") },
                    Symlink { path: PathBuf::from("/lib64"), target: PathBuf::from("usr/lib64") },
                ],
                binds: vec![
                    bind("/dev/null", MountKind::Device, NodeKind::File, true),
                    bind("/dev/urandom", MountKind::Device, NodeKind::File, true),
                    bind("/etc/ld.so.cache", MountKind::ReadOnly, NodeKind::File, true),
                    bind("/root/.pyenv/versions/3.11.7", MountKind::ReadOnly, NodeKind::Dir, true),
                    bind("/tmp/run", MountKind::ReadWrite, NodeKind::Dir, true),
                    bind("/usr", MountKind::ReadOnly, NodeKind::Dir, true),
                ],
                run_dir: PathBuf::from("/tmp/run"),
                skipped: paths(&["/root/.pyenv/versions/3.11.7/lib/python311.zip"]),
            }
        );
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
                links: vec![Symlink {
                    path: PathBuf::from("/opt/py"),
                    target: PathBuf::from("../root/.pyenv/versions/3.11.7"),
                }],
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
    fn nested_same_kind_is_dropped_other_kind_is_kept_on_top() {
        let fs = debian().dir("/tmp/run/ro").dir("/usr/share/rw").file("/usr/share/rw/x");
        let mut p = policy(&["/usr", "/usr/lib", "/tmp/run/ro"]);
        p.read_write.push(PathBuf::from("/usr/share/rw"));
        p.read_write.push(PathBuf::from("/usr/share/rw/x"));
        let plan = MountPlan::build(&p, &fs).unwrap();
        assert_eq!(
            plan.binds.iter().filter(|b| b.kind != MountKind::Device).cloned().collect::<Vec<_>>(),
            vec![
                bind("/tmp/run", MountKind::ReadWrite, NodeKind::Dir, true),
                bind("/tmp/run/ro", MountKind::ReadOnly, NodeKind::Dir, false),
                bind("/usr", MountKind::ReadOnly, NodeKind::Dir, true),
                bind("/usr/share/rw", MountKind::ReadWrite, NodeKind::Dir, false),
            ]
        );
        // Nothing inside a bind mount is created in the tmpfs.
        assert_eq!(plan.dirs, paths(&["/dev", "/tmp"]));
    }

    #[test]
    fn symlinks_inside_a_bind_are_not_recreated() {
        let fs = debian().link("/usr/lib/libpython.so", "libpython.so.1").file("/usr/lib/libpython.so.1");
        let plan = MountPlan::build(&policy(&["/usr", "/usr/lib/libpython.so"]), &fs).unwrap();
        assert!(plan.symlinks.is_empty());
    }

    #[test]
    fn duplicates_collapse_and_dotdot_follows_the_kernel() {
        // "/lib/.." is the parent of the real "/usr/lib": "/usr", as the kernel resolves it.
        let plan = MountPlan::build(&policy(&["/usr", "/usr/", "/usr/.", "/lib/.."]), &debian()).unwrap();
        assert_eq!(plan.binds.iter().filter(|b| b.path == Path::new("/usr")).count(), 1);
        let err = MountPlan::build(&policy(&["/usr/.."]), &debian()).unwrap_err();
        assert!(matches!(err, SandboxError::ExposesRoot { .. }));
    }

    #[test]
    fn conflicting_kinds_are_an_error() {
        let err = MountPlan::build(&policy(&["/tmp/run"]), &debian()).unwrap_err();
        assert!(matches!(
            err,
            SandboxError::Conflict { ref path, first: "read-only", second: "read-write" }
                if path == Path::new("/tmp/run")
        ));
    }

    #[test]
    fn policy_errors() {
        let fs = debian();
        let mut p = policy(&["usr"]);
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::RelativePath { .. })));
        p = policy(&[]);
        p.uid = 0;
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::PrivilegedId { uid: 0, .. })));
        p = policy(&[]);
        p.read_write.clear();
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::NoRunDir)));
        p = policy(&[]);
        p.read_write = vec![PathBuf::from("/tmp/missing")];
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::Resolve { .. })));
        p = policy(&[]);
        p.read_write = vec![PathBuf::from("/etc/ld.so.cache")];
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::RunDirNotDirectory { .. })));
        p = policy(&[]);
        p.devices = vec![PathBuf::from("/etc/ld.so.cache")];
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::NotADevice { .. })));
        p = policy(&[]);
        p.read_only = vec![PathBuf::from(std::ffi::OsStr::from_bytes(b"/us\0r"))];
        assert!(matches!(MountPlan::build(&p, &fs), Err(SandboxError::NulInPath { .. })));
    }

    #[test]
    fn run_dir_under_a_symlink_resolves() {
        let fs = debian().link("/var/tmp", "/tmp");
        let mut p = policy(&[]);
        p.read_write = vec![PathBuf::from("/var/tmp/run")];
        let plan = MountPlan::build(&p, &fs).unwrap();
        assert_eq!(plan.run_dir, PathBuf::from("/tmp/run"));
        assert_eq!(plan.symlinks, vec![Symlink { path: PathBuf::from("/var/tmp"), target: PathBuf::from("/tmp") }]);
        assert_eq!(plan.dirs, paths(&["/dev", "/tmp", "/var"]));
    }
}
