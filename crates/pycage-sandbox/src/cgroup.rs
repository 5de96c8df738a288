//! cgroup v2: find a subtree delegated to pycage, and give a run its own
//! cgroup with run-wide limits (`memory.max`, `memory.swap.max`,
//! `pids.max`, `cpu.max`) and CPU time read from `cpu.stat`.
//!
//! pycage only ever writes into a cgroup it was given: [`detect`] accepts
//! the calling process's own cgroup v2 directory when the memory, pids and
//! cpu controllers are available there and the directory, its
//! `cgroup.subtree_control` and `cgroup.procs` are writable by the caller
//! (systemd's `Delegate=yes`, or root on a pure cgroup v2 host). A hybrid
//! host whose controllers belong to cgroup v1 (as the machine this was
//! written on: its memory controller is a v1 hierarchy owned by the host)
//! is reported, never touched.
//!
//! Everything goes through the small [`CgroupFs`] trait, so detection and
//! the run cgroup's file protocol are unit-tested against a fake file
//! system. Without a delegated cgroup the budgets are enforced by other
//! means (size-capped tmpfs, IPC namespace limits, rlimits, the runtime's
//! watchdog); `pycage doctor` says which.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The controllers a run cgroup needs.
pub const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// The file system as cgroup code sees it. Paths are absolute.
pub trait CgroupFs {
    /// The whole content of a (small) file.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Write `value` to a cgroup control file.
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    /// Whether the caller may write `path` (`access(W_OK)`).
    fn writable(&self, path: &Path) -> bool;
    /// Create a directory (a child cgroup).
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    /// Remove an empty directory (a dead child cgroup).
    fn rmdir(&self, path: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealCgroupFs;

/// Most bytes read from one cgroup or proc file.
const MAX_FILE_BYTES: u64 = 64 * 1024;

impl CgroupFs for RealCgroupFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(path)?.take(MAX_FILE_BYTES).read_to_string(&mut text)?;
        Ok(text)
    }
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        use std::io::Write;
        // One write per value: the kernel parses each write as a whole.
        std::fs::OpenOptions::new().write(true).open(path)?.write_all(value.as_bytes())
    }
    fn writable(&self, path: &Path) -> bool {
        rustix::fs::access(path, rustix::fs::Access::WRITE_OK).is_ok()
    }
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }
}

/// A cgroup v2 directory delegated to this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// The directory run cgroups are created in.
    pub path: PathBuf,
}

/// Why no delegated cgroup v2 subtree is usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotDelegated {
    /// `/proc/self/cgroup` has no `0::` line.
    #[error("this process is in no cgroup v2 hierarchy")]
    NoUnifiedHierarchy,
    /// No cgroup2 file system is mounted.
    #[error("no cgroup2 file system is mounted")]
    NotMounted,
    /// The controllers are not available in this process's cgroup.
    #[error("the cgroup v2 directory {path} offers controllers [{available}], not {missing}{v1}")]
    MissingControllers {
        /// The process's cgroup v2 directory.
        path: PathBuf,
        /// What `cgroup.controllers` lists.
        available: String,
        /// The needed controllers it lacks.
        missing: String,
        /// A note when the controllers belong to a cgroup v1 hierarchy.
        v1: String,
    },
    /// The directory is not writable by this process: not delegated.
    #[error("{path} is not writable by this process: not delegated to it (systemd: Delegate=yes)")]
    NotWritable {
        /// The process's cgroup v2 directory.
        path: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {message}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The error.
        message: String,
    },
}

/// Find this process's cgroup v2 directory and check it is delegated.
pub fn detect(fs: &dyn CgroupFs) -> Result<Cgroup, NotDelegated> {
    let read = |path: &Path| {
        fs.read(path).map_err(|e| NotDelegated::Unreadable { path: path.to_path_buf(), message: e.to_string() })
    };
    let membership = read(Path::new("/proc/self/cgroup"))?;
    let relative = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or(NotDelegated::NoUnifiedHierarchy)?
        .trim()
        .to_string();
    let v1_controllers: Vec<&str> = membership
        .lines()
        .filter(|line| !line.starts_with("0::"))
        .filter_map(|line| line.split(':').nth(1))
        .flat_map(|list| list.split(','))
        .filter(|c| CONTROLLERS.contains(c))
        .collect();
    let mountinfo = read(Path::new("/proc/self/mountinfo"))?;
    let (mount_root, mount_point) = mountinfo
        .lines()
        .filter_map(parse_mountinfo_line)
        .find(|m| m.fstype == "cgroup2")
        .map(|m| (m.root, m.mount_point))
        .ok_or(NotDelegated::NotMounted)?;
    let within = Path::new(&relative).strip_prefix(&mount_root).unwrap_or(Path::new(&relative));
    let within = within.strip_prefix("/").unwrap_or(within);
    let path =
        if within.as_os_str().is_empty() { PathBuf::from(&mount_point) } else { Path::new(&mount_point).join(within) };
    let available = read(&path.join("cgroup.controllers"))?;
    let offered: Vec<&str> = available.split_whitespace().collect();
    let missing: Vec<&str> = CONTROLLERS.iter().copied().filter(|c| !offered.contains(c)).collect();
    if !missing.is_empty() {
        let v1 = if v1_controllers.is_empty() {
            String::new()
        } else {
            format!(" ({} belong to a cgroup v1 hierarchy of the host)", v1_controllers.join(", "))
        };
        return Err(NotDelegated::MissingControllers {
            path,
            available: offered.join(" "),
            missing: missing.join(", "),
            v1,
        });
    }
    if !fs.writable(&path)
        || !fs.writable(&path.join("cgroup.subtree_control"))
        || !fs.writable(&path.join("cgroup.procs"))
    {
        return Err(NotDelegated::NotWritable { path });
    }
    Ok(Cgroup { path })
}

struct MountInfo {
    root: String,
    mount_point: String,
    fstype: String,
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`.
fn parse_mountinfo_line(line: &str) -> Option<MountInfo> {
    let (before, after) = line.split_once(" - ")?;
    let mut fields = before.split(' ');
    let root = fields.nth(3)?;
    let mount_point = fields.next()?;
    let fstype = after.split(' ').next()?;
    Some(MountInfo { root: unescape(root), mount_point: unescape(mount_point), fstype: fstype.to_string() })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes.get(i..i + 4) {
            Some([b'\\', a, b, c]) if [a, b, c].iter().all(|d| (b'0'..=b'7').contains(d)) => {
                out.push((a - b'0') * 64 + (b - b'0') * 8 + (c - b'0'));
                i += 4;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Check a detected cgroup can hold run cgroups: create a child with the
/// controllers enabled, and remove it. This fails (`EBUSY`) when the
/// delegated cgroup itself holds processes, pycage's own among them (the
/// kernel's "no internal processes" rule): pycage must then run in a leaf of
/// its delegated subtree.
pub fn check_usable(fs: &dyn CgroupFs, cgroup: &Cgroup) -> Result<(), String> {
    let name = format!("pycage-probe-{}", std::process::id());
    let limits = CgroupLimits { memory_bytes: 64 << 20, max_processes: 8, cpu_max: None };
    let run = RunCgroup::create(fs, cgroup, &name, &limits).map_err(|e| {
        format!(
            "{} is delegated, but a child cgroup with the memory, pids and cpu controllers cannot be made in it ({e}); \
             run pycage in a leaf cgroup of the delegated subtree",
            cgroup.path.display()
        )
    })?;
    fs.rmdir(run.path()).map_err(|e| format!("cannot remove the probe cgroup {}: {e}", run.path().display()))
}

/// Run-wide limits of a run cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimits {
    /// `memory.max`: every process and tmpfs page of the run together.
    pub memory_bytes: u64,
    /// `pids.max`.
    pub max_processes: u64,
    /// `cpu.max` as `(quota, period)` in microseconds; `None` is no cap on
    /// the rate (the CPU budget is then a total, read from `cpu.stat`).
    pub cpu_max: Option<(u64, u64)>,
}

/// One run's cgroup, a child of a delegated [`Cgroup`].
#[derive(Debug)]
pub struct RunCgroup {
    path: PathBuf,
}

impl RunCgroup {
    /// Create `<parent>/<name>` with `limits`. The controllers are enabled
    /// in the parent's `cgroup.subtree_control` first (which the kernel
    /// refuses with `EBUSY` while the parent itself holds processes: run
    /// pycage in a leaf of its delegated subtree).
    pub fn create(fs: &dyn CgroupFs, parent: &Cgroup, name: &str, limits: &CgroupLimits) -> io::Result<RunCgroup> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a run cgroup name is one plain path component"));
        }
        let enabled = fs.read(&parent.path.join("cgroup.subtree_control"))?;
        let enabled: Vec<&str> = enabled.split_whitespace().collect();
        let wanted: Vec<String> =
            CONTROLLERS.iter().filter(|c| !enabled.contains(c)).map(|c| format!("+{c}")).collect();
        if !wanted.is_empty() {
            fs.write(&parent.path.join("cgroup.subtree_control"), &wanted.join(" "))?;
        }
        let path = parent.path.join(name);
        fs.mkdir(&path)?;
        let run = RunCgroup { path };
        let configured = (|| {
            fs.write(&run.path.join("memory.max"), &limits.memory_bytes.to_string())?;
            fs.write(&run.path.join("memory.swap.max"), "0")?;
            fs.write(&run.path.join("pids.max"), &limits.max_processes.to_string())?;
            let cpu = match limits.cpu_max {
                Some((quota, period)) => format!("{quota} {period}"),
                None => "max 100000".to_string(),
            };
            fs.write(&run.path.join("cpu.max"), &cpu)
        })();
        if let Err(e) = configured {
            let _ = fs.rmdir(&run.path);
            return Err(e);
        }
        Ok(run)
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its `cgroup.procs`: a process joins by writing `0` to it (open it in
    /// the host, write from the forked child before anything else).
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// CPU time of every process that ever ran in the cgroup.
    pub fn cpu_usage(&self, fs: &dyn CgroupFs) -> io::Result<Duration> {
        let stat = fs.read(&self.path.join("cpu.stat"))?;
        stat.lines()
            .find_map(|line| line.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_micros)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "cpu.stat has no usage_usec"))
    }

    /// Memory charged to the cgroup now (`memory.current`).
    pub fn memory_current(&self, fs: &dyn CgroupFs) -> io::Result<u64> {
        fs.read(&self.path.join("memory.current"))?
            .trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "memory.current is not a number"))
    }

    /// How many times the memory limit made the kernel kill a process
    /// (`memory.events` `oom_kill`).
    pub fn oom_kills(&self, fs: &dyn CgroupFs) -> io::Result<u64> {
        let events = fs.read(&self.path.join("memory.events"))?;
        Ok(events
            .lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0))
    }

    /// Kill every process in the cgroup (`cgroup.kill`, Linux 5.14+) and
    /// remove it. `rmdir` fails with `EBUSY` until the kernel has reaped
    /// the processes, so callers retry after the run's processes are gone.
    pub fn kill_and_remove(&self, fs: &dyn CgroupFs) -> io::Result<()> {
        let _ = fs.write(&self.path.join("cgroup.kill"), "1");
        fs.rmdir(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::{BTreeMap, BTreeSet};

    /// An in-memory cgroup file system: files with contents, writable paths.
    #[derive(Default)]
    struct FakeFs {
        files: RefCell<BTreeMap<PathBuf, String>>,
        dirs: RefCell<BTreeSet<PathBuf>>,
        writable: BTreeSet<PathBuf>,
        writes: RefCell<Vec<(PathBuf, String)>>,
    }

    impl FakeFs {
        fn file(self, path: &str, content: &str) -> Self {
            self.files.borrow_mut().insert(PathBuf::from(path), content.to_string());
            self
        }
        fn writable(mut self, path: &str) -> Self {
            self.writable.insert(PathBuf::from(path));
            self
        }
    }

    impl CgroupFs for FakeFs {
        fn read(&self, path: &Path) -> io::Result<String> {
            self.files.borrow().get(path).cloned().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn write(&self, path: &Path, value: &str) -> io::Result<()> {
            let dir_made = path.parent().is_some_and(|p| self.dirs.borrow().contains(p));
            if !self.writable.contains(path) && !dir_made {
                return Err(io::Error::from(io::ErrorKind::PermissionDenied));
            }
            self.writes.borrow_mut().push((path.to_path_buf(), value.to_string()));
            self.files.borrow_mut().insert(path.to_path_buf(), value.to_string());
            Ok(())
        }
        fn writable(&self, path: &Path) -> bool {
            self.writable.contains(path)
        }
        fn mkdir(&self, path: &Path) -> io::Result<()> {
            if !path.parent().is_some_and(|p| self.writable.contains(p)) {
                return Err(io::Error::from(io::ErrorKind::PermissionDenied));
            }
            self.dirs.borrow_mut().insert(path.to_path_buf());
            Ok(())
        }
        fn rmdir(&self, path: &Path) -> io::Result<()> {
            self.dirs.borrow_mut().remove(path);
            Ok(())
        }
    }

    /// This machine's layout: v1 memory/cpu/pids, an empty unified hierarchy.
    fn hybrid() -> FakeFs {
        FakeFs::default()
            .file("/proc/self/cgroup", "8:pids:/\n4:memory:/process_api/9aed\n1:cpu:/\n0::/\n")
            .file(
                "/proc/self/mountinfo",
                "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                 40 25 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
            )
            .file("/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n")
    }

    /// A systemd service with Delegate=yes on a pure cgroup v2 host.
    fn delegated() -> FakeFs {
        let dir = "/sys/fs/cgroup/system.slice/pycage.service";
        FakeFs::default()
            .file("/proc/self/cgroup", "0::/system.slice/pycage.service\n")
            .file("/proc/self/mountinfo", "25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
            .file(&format!("{dir}/cgroup.controllers"), "cpuset cpu io memory pids\n")
            .file(&format!("{dir}/cgroup.subtree_control"), "memory\n")
            .writable(dir)
            .writable(&format!("{dir}/cgroup.subtree_control"))
            .writable(&format!("{dir}/cgroup.procs"))
    }

    #[test]
    fn a_hybrid_host_with_v1_controllers_is_not_delegated() {
        let err = detect(&hybrid()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the cgroup v2 directory /sys/fs/cgroup/unified offers controllers [hugetlb], not memory, pids, cpu \
             (pids, memory, cpu belong to a cgroup v1 hierarchy of the host)"
        );
    }

    #[test]
    fn a_delegated_service_cgroup_is_found() {
        assert_eq!(
            detect(&delegated()).unwrap(),
            Cgroup { path: PathBuf::from("/sys/fs/cgroup/system.slice/pycage.service") }
        );
    }

    #[test]
    fn not_writable_or_not_mounted_or_no_hierarchy() {
        let mut fs = delegated();
        fs.writable.clear();
        assert!(matches!(detect(&fs), Err(NotDelegated::NotWritable { .. })));
        let fs = FakeFs::default()
            .file("/proc/self/cgroup", "0::/\n")
            .file("/proc/self/mountinfo", "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
        assert_eq!(detect(&fs), Err(NotDelegated::NotMounted));
        let fs = FakeFs::default().file("/proc/self/cgroup", "4:memory:/\n").file("/proc/self/mountinfo", "");
        assert_eq!(detect(&fs), Err(NotDelegated::NoUnifiedHierarchy));
        assert!(matches!(detect(&FakeFs::default()), Err(NotDelegated::Unreadable { .. })));
    }

    #[test]
    fn a_nested_mount_root_and_escapes_resolve() {
        let fs = FakeFs::default()
            .file("/proc/self/cgroup", "0::/user.slice/a b\n")
            .file("/proc/self/mountinfo", "25 1 0:22 /user.slice /mnt/cg\\040x rw - cgroup2 cgroup2 rw\n")
            .file("/mnt/cg x/a b/cgroup.controllers", "memory pids cpu")
            .writable("/mnt/cg x/a b")
            .writable("/mnt/cg x/a b/cgroup.subtree_control")
            .writable("/mnt/cg x/a b/cgroup.procs");
        assert_eq!(detect(&fs).unwrap().path, PathBuf::from("/mnt/cg x/a b"));
    }

    #[test]
    fn a_delegated_cgroup_must_take_a_child() {
        let fs = delegated();
        assert_eq!(check_usable(&fs, &detect(&fs).unwrap()), Ok(()));
        // The same cgroup, but its subtree_control refuses (EBUSY in the
        // kernel; here not writable): reported with what to do.
        let mut fs = delegated();
        fs.writable.remove(Path::new("/sys/fs/cgroup/system.slice/pycage.service/cgroup.subtree_control"));
        let cgroup = Cgroup { path: PathBuf::from("/sys/fs/cgroup/system.slice/pycage.service") };
        let err = check_usable(&fs, &cgroup).unwrap_err();
        assert!(err.contains("run pycage in a leaf cgroup"), "{err}");
    }

    #[test]
    fn a_run_cgroup_gets_its_limits_and_reports_usage() {
        let fs = delegated();
        let parent = detect(&fs).unwrap();
        let limits = CgroupLimits { memory_bytes: 256 << 20, max_processes: 64, cpu_max: Some((50_000, 100_000)) };
        let run = RunCgroup::create(&fs, &parent, "run-1", &limits).unwrap();
        let dir = parent.path.join("run-1");
        assert_eq!(run.path(), dir);
        assert_eq!(
            fs.writes.borrow().clone(),
            vec![
                (parent.path.join("cgroup.subtree_control"), "+pids +cpu".to_string()),
                (dir.join("memory.max"), "268435456".to_string()),
                (dir.join("memory.swap.max"), "0".to_string()),
                (dir.join("pids.max"), "64".to_string()),
                (dir.join("cpu.max"), "50000 100000".to_string()),
            ]
        );
        assert_eq!(run.procs_file(), dir.join("cgroup.procs"));
        fs.files.borrow_mut().insert(dir.join("cpu.stat"), "usage_usec 1500000\nuser_usec 1000000\n".into());
        fs.files.borrow_mut().insert(dir.join("memory.current"), "1048576\n".into());
        fs.files.borrow_mut().insert(dir.join("memory.events"), "low 0\nmax 3\noom 1\noom_kill 1\n".into());
        assert_eq!(run.cpu_usage(&fs).unwrap(), Duration::from_millis(1500));
        assert_eq!(run.memory_current(&fs).unwrap(), 1 << 20);
        assert_eq!(run.oom_kills(&fs).unwrap(), 1);
        run.kill_and_remove(&fs).unwrap();
        assert_eq!(fs.writes.borrow().last(), Some(&(dir.join("cgroup.kill"), "1".to_string())));
        assert!(RunCgroup::create(&fs, &parent, "../x", &limits).is_err());
    }
}
