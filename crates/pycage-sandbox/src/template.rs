//! [`RootTemplates`]: the read-only part of a sandbox's root, built once
//! per policy by the shell helper and cloned whole by each shell.
//!
//! Every shell used to build its root from nothing: a tmpfs, the fixed
//! layout, the plan's directories, a mount point, a clone (`open_tree`), a
//! seal (`mount_setattr`) and an attach (`move_mount`) per exposed path, the
//! symlinks and the generated `/etc` files: 100-odd system calls and path
//! walks, the same for every run of a policy. A template is that tree built
//! once as a detached mount tree (a tmpfs from `fsmount`, the exposed paths'
//! sealed clones moved onto it, then the tmpfs made read-only); a shell then
//! takes it in one `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)` and one
//! `move_mount` ([`crate::Prepared`]'s step 3 and 8).
//!
//! # What stays per run
//!
//! Only the read-only skeleton is shared. Everything under the run's tmpfs
//! directories (`/work`, `/tmp`, `/dev/shm`: the run's disk, and any entry
//! of the plan inside them, such as a run's input files), `/proc` and the
//! run's `boot_id` are made by each shell as before. The clone is the
//! shell's own copy of every mount (a recursive clone copies each one), so
//! no run sees another's mounts; the one thing runs share is the template's
//! tmpfs, which is mounted read-only in every clone, holds only files
//! owned by the host's root (so not writable by a run's uid even through a
//! writable mount), and is never mounted writable anywhere. A side effect
//! on what a program sees: the root's own directories and generated files
//! belong to the host's root, which a run's user namespace shows as
//! `nobody` (65534), where a root a shell built itself belonged to the
//! run's own uid.
//!
//! # Where it applies
//!
//! On a root host only, in the shell helper: cloning a detached tree needs
//! `CAP_SYS_ADMIN` over the mount namespace it was made in (Linux 6.15+
//! clones a detached tree only from there), and a shell is root there only
//! until it drops to the run's uid (step 3). Without root, or on a kernel
//! that refuses a step of the build, shells build their roots as before.
//!
//! # Kept current
//!
//! A template holds the inodes its paths had when it was built. Each shell
//! compares its plan (rebuilt from the paths every time) with the
//! template's, and `lstat`s every exposed path against the inode the
//! template bound: a directory replaced since (a venv made again) or a
//! `ld.so.cache` rewritten gets a new template, never a stale inode (which
//! the shell's Landlock ruleset, opened from the paths, would refuse).
//! The recursive clones also hold the mounts below the exposed paths as
//! they were: any change to the helper's mount table (a `poll` on
//! `/proc/self/mountinfo` reports it) drops every template, so a file
//! system mounted or unmounted under an exposed path shows in the next
//! run, and an unmounted one is not kept alive by the helper.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use rustix::fs::{Mode, OFlags};
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, OpenTreeFlags};

use crate::plan::{MountPlan, NodeKind, FIXED_DIRS};
use crate::prepared::{template_clone_flags, Prepared};
use crate::resolved::{attributes, ROOT_TMPFS_BYTES};
use crate::sys;

/// Templates a helper keeps (one per policy it saw last); the oldest goes.
const MAX_TEMPLATES: usize = 4;

/// One template: the detached tree, the plan part it was built from, and
/// the inode each exposed path had.
#[derive(Debug)]
struct RootTemplate {
    part: MountPlan,
    tree: Arc<OwnedFd>,
    /// `(source, st_dev, st_ino)` of each bind, as bound.
    sources: Vec<(PathBuf, u64, u64)>,
    /// The kept plan under which the exposed paths were last found to name
    /// what the template bound ([`RootTemplate::is_current_for`]).
    current_for: Weak<MountPlan>,
}

/// Why a template could not be built.
#[derive(Debug)]
enum BuildError {
    /// The kernel refuses a step every build needs (no detached mounts
    /// onto detached mounts, no clone of a detached tree): never again.
    Unsupported(io::Error),
    /// Something of this policy (a path gone meanwhile): try next time.
    Policy(io::Error),
}

impl RootTemplate {
    /// [`RootTemplate::is_current`], asked once per kept plan: a kept plan
    /// holds only while every path it was made from is the very file it was
    /// (its replay checks that for each shell, before the template is
    /// attached), and the template's mounts keep the inodes it bound alive,
    /// so no other file can take their numbers. Once the paths named them
    /// under a plan, they do for as long as that plan holds. (An `lstat` of
    /// each exposed path per shell, about 17 us, in the helper.)
    fn is_current_for(&mut self, plan: &Arc<MountPlan>) -> bool {
        if std::ptr::eq(self.current_for.as_ptr(), Arc::as_ptr(plan)) {
            return true;
        }
        let current = self.is_current();
        if current {
            self.current_for = Arc::downgrade(plan);
        }
        current
    }

    /// Whether every exposed path still names the inode the template bound.
    fn is_current(&self) -> bool {
        self.sources.iter().all(|(path, dev, ino)| match rustix::fs::lstat(path) {
            Ok(stat) => stat.st_dev == *dev && stat.st_ino == *ino,
            Err(_) => false,
        })
    }

    fn build(part: MountPlan) -> Result<RootTemplate, BuildError> {
        let unsupported = |e: rustix::io::Errno| BuildError::Unsupported(e.into());
        let fs = rustix::mount::fsopen(c"tmpfs", FsOpenFlags::FSOPEN_CLOEXEC).map_err(unsupported)?;
        let options = [
            ("mode", "0755".to_owned()),
            ("size", ROOT_TMPFS_BYTES.to_string()),
            ("nr_inodes", part.tmpfs_inodes().to_string()),
        ];
        for (key, value) in &options {
            rustix::mount::fsconfig_set_string(&fs, *key, value.as_str()).map_err(unsupported)?;
        }
        rustix::mount::fsconfig_create(&fs).map_err(unsupported)?;
        let tree = rustix::mount::fsmount(
            &fs,
            FsMountFlags::FSMOUNT_CLOEXEC,
            MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
        )
        .map_err(unsupported)?;
        // Modes as given: the helper's umask must not narrow them.
        let umask = rustix::process::umask(Mode::empty());
        let sources = populate(&tree, &part);
        rustix::process::umask(umask);
        let sources = sources?;
        sys::mount_setattr_fd(tree.as_fd(), false, sys::MOUNT_ATTR_RDONLY)
            .map_err(|errno| BuildError::Unsupported(io::Error::from_raw_os_error(errno)))?;
        // What every shell will do with it, once here: a kernel that
        // cannot clone a detached tree fails now, not in a shell.
        rustix::mount::open_tree(&tree, c"", template_clone_flags()).map_err(unsupported)?;
        Ok(RootTemplate { part, tree: Arc::new(tree), sources, current_for: Weak::new() })
    }
}

/// `path` relative to the template's root.
fn relative(path: &Path) -> Result<CString, BuildError> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| BuildError::Policy(io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a path")))
}

/// The fixed layout, the plan part's directories, binds, symlinks and
/// files, in the order a shell made them; returns the binds' inodes.
fn populate(tree: &OwnedFd, part: &MountPlan) -> Result<Vec<(PathBuf, u64, u64)>, BuildError> {
    let policy = |e: rustix::io::Errno| BuildError::Policy(e.into());
    let dir_mode = Mode::from_raw_mode(0o755);
    for dir in FIXED_DIRS.iter().map(Path::new).chain(part.dirs.iter().map(PathBuf::as_path)) {
        rustix::fs::mkdirat(tree, relative(dir)?.as_c_str(), dir_mode).map_err(policy)?;
    }
    let mut sources = Vec::with_capacity(part.binds.len());
    for bind in &part.binds {
        let (attr_set, recursive) = attributes(bind.kind);
        let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
        if recursive {
            flags |= OpenTreeFlags::AT_RECURSIVE;
        }
        let clone = rustix::mount::open_tree(rustix::fs::CWD, &bind.source, flags).map_err(policy)?;
        sys::mount_setattr_fd(clone.as_fd(), recursive, attr_set)
            .map_err(|errno| BuildError::Policy(io::Error::from_raw_os_error(errno)))?;
        let stat = rustix::fs::fstat(&clone).map_err(policy)?;
        sources.push((bind.source.clone(), stat.st_dev, stat.st_ino));
        let target = relative(&bind.target)?;
        if bind.create_mount_point {
            match bind.node {
                NodeKind::Dir => rustix::fs::mkdirat(tree, target.as_c_str(), dir_mode).map_err(policy)?,
                NodeKind::File => {
                    rustix::fs::openat(
                        tree,
                        target.as_c_str(),
                        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                        Mode::from_raw_mode(0o644),
                    )
                    .map_err(policy)?;
                }
            }
        }
        // A detached mount onto a detached tree: Linux 6.15+.
        rustix::mount::move_mount(&clone, c"", tree, target.as_c_str(), MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
            .map_err(|e| BuildError::Unsupported(e.into()))?;
    }
    for link in &part.symlinks {
        let target = CString::new(link.target.as_os_str().as_bytes())
            .map_err(|_| BuildError::Policy(io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a link")))?;
        rustix::fs::symlinkat(target.as_c_str(), tree, relative(&link.path)?.as_c_str()).map_err(policy)?;
    }
    for file in &part.files {
        let fd = rustix::fs::openat(
            tree,
            relative(&file.path)?.as_c_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(policy)?;
        let mut data = file.contents.as_bytes();
        while !data.is_empty() {
            match rustix::io::write(&fd, data) {
                Ok(0) => return Err(BuildError::Policy(io::Error::from(io::ErrorKind::WriteZero))),
                Ok(n) => data = data.get(n..).unwrap_or_default(),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(policy(e)),
            }
        }
    }
    Ok(sources)
}

/// A shell helper's root templates, one per recent policy (see the module
/// docs). Single-threaded: the helper builds one shell at a time.
#[derive(Debug, Default)]
pub struct RootTemplates {
    templates: Vec<RootTemplate>,
    /// Why the kernel refused a build: shells build their roots themselves.
    unsupported: Option<io::Error>,
    /// Why the last build for a policy failed.
    failed: Option<io::Error>,
    /// `/proc/self/mountinfo`, opened before the first build: `poll`
    /// reports a change of the mount table since the last `poll`.
    mounts: Option<OwnedFd>,
    built: u64,
}

impl RootTemplates {
    /// No templates yet.
    pub fn new() -> RootTemplates {
        RootTemplates::default()
    }

    /// Gives `prepared` the current template of its plan, building one
    /// (or a new one, if a path changed since) as needed. Returns false,
    /// and leaves `prepared` building its root itself, where templates do
    /// not apply (a host that is not root, a kernel before 6.15) or this
    /// build failed.
    pub fn attach(&mut self, prepared: &mut Prepared) -> bool {
        if self.unsupported.is_some() {
            return false;
        }
        let Some(part) = prepared.template_part() else {
            return false;
        };
        if self.mount_table_changed() {
            self.templates.clear();
        }
        let found = self.templates.iter().position(|t| t.part == *part);
        let index = match found {
            Some(index) if self.templates.get_mut(index).is_some_and(|t| t.is_current_for(prepared.plan_arc())) => {
                index
            }
            found => {
                if let Some(stale) = found {
                    // Dropped first: its clones hold the old inodes.
                    self.templates.remove(stale);
                }
                match RootTemplate::build(part.clone()) {
                    Ok(template) => {
                        self.built += 1;
                        if self.templates.len() >= MAX_TEMPLATES {
                            self.templates.remove(0);
                        }
                        self.templates.push(template);
                        self.templates.len() - 1
                    }
                    Err(BuildError::Unsupported(e)) => {
                        self.unsupported = Some(e);
                        return false;
                    }
                    Err(BuildError::Policy(e)) => {
                        self.failed = Some(e);
                        return false;
                    }
                }
            }
        };
        match self.templates.get(index) {
            Some(template) => {
                prepared.use_template(Arc::clone(&template.tree));
                true
            }
            None => false,
        }
    }

    /// Whether the helper's mount table changed since the last call (true
    /// the first time, and whenever it cannot tell).
    fn mount_table_changed(&mut self) -> bool {
        let Some(mounts) = &self.mounts else {
            // Opening records the table's state: changes count from here.
            self.mounts =
                rustix::fs::open(c"/proc/self/mountinfo", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok();
            return true;
        };
        let mut poll = [rustix::event::PollFd::new(mounts, rustix::event::PollFlags::PRI)];
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        match rustix::event::poll(&mut poll, Some(&zero)) {
            Ok(_) => poll
                .iter()
                .any(|p| p.revents().intersects(rustix::event::PollFlags::PRI | rustix::event::PollFlags::ERR)),
            Err(_) => true,
        }
    }

    /// How many templates were built so far (a rebuilt one counts again).
    pub fn built(&self) -> u64 {
        self.built
    }

    /// Why templates are off for good here (the kernel refused a step every
    /// build needs), if they are.
    pub fn unsupported(&self) -> Option<&io::Error> {
        self.unsupported.as_ref()
    }

    /// Why the last build that failed for its policy's paths failed.
    pub fn last_failure(&self) -> Option<&io::Error> {
        self.failed.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Bind, GeneratedFile, MountKind, Symlink};

    #[test]
    fn the_run_disk_stays_out_of_the_template() {
        let bind = |target: &str| Bind {
            source: PathBuf::from("/srv/x"),
            target: PathBuf::from(target),
            kind: MountKind::ReadOnly,
            node: NodeKind::Dir,
            create_mount_point: true,
        };
        let plan = MountPlan {
            dirs: vec![PathBuf::from("/opt"), PathBuf::from("/work/in"), PathBuf::from("/tmpfoo")],
            symlinks: vec![Symlink { path: PathBuf::from("/tmp/l"), target: PathBuf::from("x") }],
            files: vec![GeneratedFile { path: PathBuf::from("/etc/passwd"), contents: "" }],
            binds: vec![bind("/usr"), bind("/work/in/data"), bind("/dev/shm/x"), bind("/devx")],
            skipped: vec![PathBuf::from("/nope")],
        };
        let part = plan.template_part();
        assert_eq!(part.dirs, vec![PathBuf::from("/opt"), PathBuf::from("/tmpfoo")]);
        assert!(part.symlinks.is_empty());
        assert_eq!(part.files.len(), 1);
        let targets: Vec<_> = part.binds.iter().map(|b| b.target.clone()).collect();
        assert_eq!(targets, vec![PathBuf::from("/usr"), PathBuf::from("/devx")]);
        assert!(part.skipped.is_empty());
    }
}
