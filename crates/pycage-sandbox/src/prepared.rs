//! [`Prepared`]: everything the forked child needs, built in the parent, and
//! [`Prepared::enter`], the syscalls the child makes.
//!
//! # Processes
//!
//! ```text
//! host (root, tokio)            parent: Prepared::new, Command::spawn
//!  └─ C  supervisor             forked by std; runs enter(); never execs
//!      └─ G  interpreter        PID 1 of a new PID namespace; enter() returns
//!                               Ok here and std execs python3 -I
//! ```
//!
//! # Order of steps, and why
//!
//! In C, as real root:
//! 1. Reset every signal disposition to `SIG_DFL`: C inherits the host's
//!    handlers (tokio installs SIGCHLD/SIGTERM handlers), and a handled
//!    SIGTERM would not kill C when the host signals the process group.
//! 2. Raise hard rlimits that the policy asks above the current hard limit
//!    (only root can); G lowers soft and hard to the policy later.
//! 3. Open `/proc/self` (an `O_PATH` directory fd) while the host's `/proc`
//!    is still reachable: step 9 needs it after the old root is gone, and the
//!    new root has no `/proc`.
//! 4. `unshare(CLONE_NEWNS)`, make `/` recursively private, mount a tmpfs on
//!    the staging dir, create the directories (0755) and mount points, bind
//!    every path (source and target at the same absolute path), set
//!    read-only/nosuid/nodev with `mount_setattr(AT_RECURSIVE)` (which also
//!    covers submounts and keeps every flag it does not set, such as
//!    `noexec`), recreate the symlinks, then make the tmpfs itself
//!    read-only. This must happen as real root: the per-run uid cannot even
//!    traverse `/root` (mode 0700) to reach the interpreter.
//! 5. Add the "read-dir beneath the new root" Landlock rule, on the tmpfs
//!    root's inode (it exists only now).
//! 6. `pivot_root(".", ".")` from inside the staging dir, detach the old root
//!    (`MNT_DETACH`), `chdir` to the run dir. pivot_root needs
//!    `CAP_SYS_ADMIN` over the mount namespace, which is owned by the initial
//!    user namespace: it has to come before the privilege drop.
//! 7. `setgroups([])`, `setresgid`, `setresuid`: every capability in the
//!    initial user namespace is gone from here on. The mount namespace
//!    belongs to that namespace, so nothing below can mount or unmount.
//! 8. `PR_SET_DUMPABLE` 1: the uid change made C non-dumpable, which makes
//!    its `/proc/<pid>` files root-owned and unwritable to the new uid.
//! 9. `unshare(CLONE_NEWUSER)` as the unprivileged uid, then write `deny` to
//!    `setgroups`, `<uid> <uid> 1` to `uid_map`, `<gid> <gid> 1` to `gid_map`
//!    through the fd from step 3. The maps must be opened after the unshare
//!    (the kernel binds an open map file to the opener's namespace), and an
//!    unprivileged writer may map exactly its own ids. Dumpable goes back
//!    to 0. The kernel clears `PR_SET_PDEATHSIG` on every credential change,
//!    so C re-arms it here, with the credentials final, and re-checks that
//!    its parent is still the host.
//! 10. `unshare(CLONE_NEWPID | NEWNET | NEWIPC | NEWUTS)`: C holds every
//!     capability in its new user namespace, which then owns these
//!     namespaces. Nothing outside is reachable through them: the new net
//!     namespace has only a downed `lo`.
//! 11. Open a pidfd on C itself, then `fork`.
//!
//! In G (PID 1 of the new PID namespace):
//! 12. `PR_SET_PDEATHSIG = SIGKILL`, then check C is still alive by polling
//!     the pidfd. (`getppid()` cannot be used: C lives outside G's PID
//!     namespace, so it reads 0 whether C is alive or not.)
//! 13. Mark every fd from [`INHERITED_FDS`] (4) up close-on-exec: only
//!     stdio and fd 3 reach the program, whatever the host leaked.
//! 14. `PR_SET_NO_NEW_PRIVS`, then `landlock_restrict_self` with the ruleset
//!     C added its root rule to in step 5 (a dup of the fd the parent's
//!     `Prepared` holds: one kernel ruleset, which is why a `Prepared` serves
//!     exactly one spawn); anything but "fully enforced" is an error.
//! 15. rlimits: NPROC (policy + 1 for C, which shares the uid), FSIZE,
//!     NOFILE, CORE = 0, each soft = hard.
//! 16. seccomp, last, so none of the calls above is filtered. Return Ok:
//!     std execs the interpreter. On exec, G's capabilities in its user
//!     namespace are dropped (its uid there is not 0).
//!
//! C after the fork closes every fd it holds (std's CLOEXEC error pipe
//! among them: `spawn()` waits until every holder has closed it; stdio and
//! fd 3 too, so the host sees EOF as soon as G is gone), waits for G, and
//! exits mirroring G: `_exit(code)`, or re-raises G's fatal signal on itself
//! with the default disposition. When C dies first (the host signals the
//! process group), G gets SIGKILL from its death signal, and the kernel
//! kills every other process of the PID namespace with it, including
//! `setsid` or double-forked daemons.
//!
//! # PID 1 and signals
//!
//! The kernel delivers to a PID namespace's init only the signals it has a
//! handler for, when they come from inside the namespace. So the program's
//! `os.kill(os.getpid(), signal.SIGKILL)` does nothing, and a default-action
//! signal such as SIGXCPU (the `RLIMIT_CPU` soft limit) or SIGTERM sent from
//! inside is ignored. SIGKILL and SIGSTOP from an ancestor namespace (the
//! host, C's death signal, the `RLIMIT_CPU` hard limit) and synchronous
//! faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE) still kill it, and are mirrored.
//!
//! # Allocation after fork
//!
//! Every path is a `CString` built in [`Prepared::new`], both BPF programs
//! are compiled there, and the uid/gid map lines are preformatted. The
//! child-side code makes syscalls only: rustix with `&CStr` arguments (no
//! conversion), Landlock's `try_clone`/`add_rule`/`restrict_self` (fd
//! operations and syscalls on plain structs), seccompiler's `apply_filter`
//! (a `sock_fprog` on the stack). Errors are `Copy` values and raw errnos;
//! the diagnostics record is an 8-byte array. Nothing in `enter` allocates
//! on its success or failure paths.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{AccessFs, PathBeneath, RulesetCreated, RulesetCreatedAttr, RulesetStatus, ABI};
use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};
use rustix::pipe::PipeFlags;
use rustix::process::{DumpableBehavior, Resource, Rlimit, Signal};
use rustix::thread::UnshareFlags;

use crate::error::{ChildFailure, SandboxError, Step};
use crate::landlock_rules::{self, handled_abi, kernel_landlock};
use crate::plan::{MountKind, MountPlan, NodeKind, RealFs, SandboxPolicy};
use crate::seccomp::{self, Filters};
use crate::sys;

/// Exit status of the supervisor when it lost track of the interpreter
/// (`waitpid` failed with something other than `EINTR`). Not an exit status
/// CPython uses for itself.
pub const SUPERVISOR_LOST_EXIT: i32 = 125;

/// Descriptors the interpreter inherits: stdin, stdout, stderr and the
/// protocol socket on fd 3. Every higher descriptor is marked close-on-exec
/// in the interpreter process, so a host descriptor opened without
/// `O_CLOEXEC` (by a C library, say) never reaches the program.
pub const INHERITED_FDS: u32 = 4;

/// Size of the tmpfs that becomes the new root: it holds only empty
/// directories, empty mount-point files and symlinks.
const TMPFS_BYTES: usize = 64 * 1024;

/// The diagnostics record: step, pad, 16-bit index, 32-bit errno.
const RECORD_LEN: usize = 8;

/// One bind mount, ready for the child.
#[derive(Debug)]
struct BindOp {
    source: CString,
    target: CString,
    create: Option<NodeKind>,
    recursive: bool,
    attr_set: u64,
}

/// One symlink, ready for the child.
#[derive(Debug)]
struct SymlinkOp {
    target_text: CString,
    link: CString,
}

/// A step failure inside the child.
#[derive(Debug, Clone, Copy)]
struct Failure {
    step: Step,
    index: u16,
    errno: i32,
}

impl Failure {
    fn new(step: Step, errno: i32) -> Failure {
        Failure { step, index: 0, errno }
    }
}

/// `map_err` helper for rustix results.
fn at(step: Step) -> impl Fn(rustix::io::Errno) -> Failure {
    move |errno| Failure::new(step, errno.raw_os_error())
}

/// `map_err` helper for rustix results of the `index`-th plan entry.
fn at_entry(step: Step, index: usize) -> impl Fn(rustix::io::Errno) -> Failure {
    let index = u16::try_from(index).unwrap_or(u16::MAX);
    move |errno| Failure { step, index, errno: errno.raw_os_error() }
}

/// The errno at the bottom of an error chain, or `fallback`.
fn errno_of(err: &(dyn std::error::Error + 'static), fallback: i32) -> i32 {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(errno) = e.downcast_ref::<io::Error>().and_then(io::Error::raw_os_error) {
            return errno;
        }
        current = e.source();
    }
    fallback
}

/// A sandbox ready to be entered by one forked child.
///
/// Build one per run with [`Prepared::new`] (in the parent, before
/// spawning), share it with the `pre_exec` closure (it is `Send + Sync`;
/// wrap it in an `Arc`), and call [`Prepared::enter`] there.
#[derive(Debug)]
pub struct Prepared {
    plan: MountPlan,
    staging: CString,
    tmpfs_data: CString,
    dirs: Vec<CString>,
    binds: Vec<BindOp>,
    symlinks: Vec<SymlinkOp>,
    run_dir: CString,
    uid: u32,
    gid: u32,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    limits: [(Resource, u64); 4],
    landlock_abi: ABI,
    ruleset: RulesetCreated,
    filters: Filters,
    diag_read: OwnedFd,
    diag_write: OwnedFd,
    /// The host's pid: C's parent, re-checked after the death signal is re-armed.
    host_pid: rustix::process::Pid,
}

impl Prepared {
    /// Resolve the policy, build the Landlock ruleset, compile the seccomp
    /// filters and precompute every string the child needs.
    ///
    /// Fails if the host is not root, Landlock is too old, a path is
    /// invalid, or the staging dir is not an empty directory.
    pub fn new(policy: &SandboxPolicy) -> Result<Prepared, SandboxError> {
        let euid = rustix::process::geteuid().as_raw();
        if euid != 0 {
            return Err(SandboxError::NotRoot { euid });
        }
        let plan = MountPlan::build(policy, &RealFs)?;
        let staging = check_staging(&policy.staging_dir, &plan)?;

        let kernel = kernel_landlock();
        let landlock_abi = handled_abi(kernel).ok_or_else(|| SandboxError::LandlockUnavailable {
            found: kernel.to_string(),
            required: landlock_rules::MIN_ABI as u32,
        })?;
        let ruleset = landlock_rules::build_ruleset(&plan, landlock_abi)?;
        let filters = seccomp::compile(seccomp::native_arch()?)?;
        let (diag_read, diag_write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
            .map_err(|e| SandboxError::Pipe(e.into()))?;

        let staged = |path: &Path| -> Result<CString, SandboxError> {
            let relative = path.strip_prefix("/").unwrap_or(path);
            cstring(&staging.join(relative))
        };
        let dirs = plan.dirs.iter().map(|d| staged(d)).collect::<Result<Vec<_>, _>>()?;
        let binds = plan
            .binds
            .iter()
            .map(|b| {
                let (recursive, attr_set) = match b.kind {
                    MountKind::ReadOnly => {
                        (true, sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV)
                    }
                    MountKind::ReadWrite => (true, sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV),
                    MountKind::Device => (false, sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC),
                };
                Ok(BindOp {
                    source: cstring(&b.path)?,
                    target: staged(&b.path)?,
                    create: b.create_mount_point.then_some(b.node),
                    recursive,
                    attr_set,
                })
            })
            .collect::<Result<Vec<_>, SandboxError>>()?;
        let symlinks = plan
            .symlinks
            .iter()
            .map(|l| Ok(SymlinkOp { target_text: cstring(&l.target)?, link: staged(&l.path)? }))
            .collect::<Result<Vec<_>, SandboxError>>()?;
        let tmpfs_data = CString::new(format!("mode=0755,size={TMPFS_BYTES},nr_inodes={}", plan.tmpfs_inodes()))
            .map_err(|_| SandboxError::NulInPath { path: PathBuf::from("tmpfs options") })?;

        Ok(Prepared {
            host_pid: rustix::process::getpid(),
            staging: cstring(&staging)?,
            tmpfs_data,
            dirs,
            binds,
            symlinks,
            run_dir: cstring(&plan.run_dir)?,
            uid: policy.uid,
            gid: policy.gid,
            uid_map: format!("{0} {0} 1\n", policy.uid).into_bytes(),
            gid_map: format!("{0} {0} 1\n", policy.gid).into_bytes(),
            limits: [
                (Resource::Nproc, policy.max_processes.saturating_add(1)),
                (Resource::Fsize, policy.max_file_bytes),
                (Resource::Nofile, policy.max_open_files),
                (Resource::Core, 0),
            ],
            landlock_abi,
            ruleset,
            filters,
            diag_read,
            diag_write,
            plan,
        })
    }

    /// The resolved mount plan (for `pycage doctor` and diagnostics).
    pub fn plan(&self) -> &MountPlan {
        &self.plan
    }

    /// The Landlock ABI whose rights the ruleset handles.
    pub fn landlock_abi(&self) -> u32 {
        self.landlock_abi as u32
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
            Step::CreateDir => self.plan.dirs.get(index).cloned(),
            Step::CreateMountPoint | Step::BindMount | Step::SetMountAttributes => {
                self.plan.binds.get(index).map(|b| b.path.clone())
            }
            Step::CreateSymlink => self.plan.symlinks.get(index).map(|l| l.path.clone()),
            Step::EnterRunDir => Some(self.plan.run_dir.clone()),
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
    /// execs the interpreter, which runs as PID 1 of a new PID namespace;
    /// the process std forked stays behind as its supervisor and never
    /// returns from this call. See the module docs for every step.
    ///
    /// Do not combine with `Command::uid`, `Command::gid` or `Command::chroot`:
    /// std applies them before `pre_exec`, and the sandbox needs root to build
    /// the new root. `Command::current_dir` is applied first and then
    /// replaced: the child starts in the run directory.
    ///
    /// # Safety
    ///
    /// Call only in a child forked from the process that built `self`,
    /// between `fork` and `exec`, while it is single-threaded (as in
    /// `CommandExt::pre_exec`). It changes namespaces, credentials and the
    /// root of the calling process.
    pub unsafe fn enter(&self) -> io::Result<()> {
        // SAFETY: the caller guarantees a single-threaded forked child, which
        // is what `steps` requires.
        match unsafe { self.steps() } {
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

    /// # Safety
    ///
    /// Single-threaded forked child only.
    unsafe fn steps(&self) -> Result<(), Failure> {
        sys::reset_signal_dispositions();
        self.raise_hard_limits()?;
        let proc_self =
            rustix::fs::open(c"/proc/self", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(at(Step::OpenProcSelf))?;

        // SAFETY: CLONE_NEWNS only; the process is single-threaded, so no
        // other thread can observe the change.
        unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }.map_err(at(Step::UnshareMount))?;
        rustix::mount::mount_change(c"/", MountPropagationFlags::REC | MountPropagationFlags::PRIVATE)
            .map_err(at(Step::MakeRootPrivate))?;
        let old_umask = rustix::process::umask(Mode::empty());
        let ruleset = self.build_root()?;
        rustix::process::umask(old_umask);
        self.pivot()?;

        rustix::thread::set_thread_groups(&[]).map_err(at(Step::SetGroups))?;
        let gid = rustix::process::Gid::from_raw(self.gid);
        rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(at(Step::SetGid))?;
        let uid = rustix::process::Uid::from_raw(self.uid);
        rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(at(Step::SetUid))?;

        rustix::process::set_dumpable_behavior(DumpableBehavior::Dumpable).map_err(at(Step::SetDumpable))?;
        // SAFETY: CLONE_NEWUSER on a single-threaded process.
        unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) }.map_err(at(Step::UnshareUser))?;
        write_proc(&proc_self, c"setgroups", b"deny\n", Step::DenySetgroups)?;
        write_proc(&proc_self, c"uid_map", &self.uid_map, Step::WriteUidMap)?;
        write_proc(&proc_self, c"gid_map", &self.gid_map, Step::WriteGidMap)?;
        drop(proc_self);
        rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable).map_err(at(Step::SetDumpable))?;
        // Every credential change above (setresuid, the new user namespace)
        // cleared the death signal the runtime armed before `enter`: arm it
        // again, now that the credentials are final, and make sure the host
        // did not die in between (the signal would never come).
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(at(Step::DeathSignal))?;
        if rustix::process::getppid() != Some(self.host_pid) {
            // SAFETY: _exit is async-signal-safe; the host is gone.
            unsafe { libc::_exit(SUPERVISOR_LOST_EXIT) };
        }

        // SAFETY: namespace flags only (no CLONE_FILES/CLONE_FS sharing
        // changes visible to other threads: there are none).
        unsafe {
            rustix::thread::unshare_unsafe(
                UnshareFlags::NEWPID | UnshareFlags::NEWNET | UnshareFlags::NEWIPC | UnshareFlags::NEWUTS,
            )
        }
        .map_err(at(Step::UnshareNamespaces))?;

        let supervisor = rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty())
            .map_err(at(Step::OpenSupervisorPidfd))?;

        // SAFETY: the process is single-threaded, so the child is a complete
        // copy; both sides only make syscalls afterwards.
        match unsafe { sys::fork() } {
            Err(errno) => Err(Failure::new(Step::Fork, errno)),
            Ok(0) => self.finish_interpreter(supervisor, ruleset),
            // SAFETY: `interpreter` is our only child; after the fork this
            // process only waits for it and exits.
            Ok(interpreter) => unsafe { sys::supervise(interpreter) },
        }
    }

    fn raise_hard_limits(&self) -> Result<(), Failure> {
        for (resource, value) in self.limits {
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

    /// Populate the tmpfs. Returns the ruleset with the new-root rule added.
    fn build_root(&self) -> Result<RulesetCreated, Failure> {
        rustix::mount::mount(
            c"tmpfs",
            self.staging.as_c_str(),
            c"tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            self.tmpfs_data.as_c_str(),
        )
        .map_err(at(Step::MountTmpfs))?;
        for (index, dir) in self.dirs.iter().enumerate() {
            rustix::fs::mkdir(dir.as_c_str(), Mode::from_raw_mode(0o755)).map_err(at_entry(Step::CreateDir, index))?;
        }
        for (index, bind) in self.binds.iter().enumerate() {
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
            if bind.recursive {
                rustix::mount::mount_bind_recursive(bind.source.as_c_str(), bind.target.as_c_str())
            } else {
                rustix::mount::mount_bind(bind.source.as_c_str(), bind.target.as_c_str())
            }
            .map_err(at_entry(Step::BindMount, index))?;
            sys::mount_setattr(&bind.target, bind.recursive, bind.attr_set).map_err(|errno| Failure {
                step: Step::SetMountAttributes,
                index: u16::try_from(index).unwrap_or(u16::MAX),
                errno,
            })?;
        }
        for (index, link) in self.symlinks.iter().enumerate() {
            rustix::fs::symlink(link.target_text.as_c_str(), link.link.as_c_str())
                .map_err(at_entry(Step::CreateSymlink, index))?;
        }

        let root = rustix::fs::open(
            self.staging.as_c_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(at(Step::LandlockRootRule))?;
        let ruleset = self
            .ruleset
            .try_clone()
            .map_err(|e| Failure::new(Step::LandlockRootRule, e.raw_os_error().unwrap_or(libc::EBADF)))?
            .add_rule(PathBeneath::new(root.as_fd(), AccessFs::ReadDir))
            .map_err(|e| Failure::new(Step::LandlockRootRule, errno_of(&e, libc::EINVAL)))?;
        drop(root);

        sys::mount_setattr(&self.staging, false, sys::MOUNT_ATTR_RDONLY)
            .map_err(|errno| Failure::new(Step::RemountRootReadOnly, errno))?;
        Ok(ruleset)
    }

    fn pivot(&self) -> Result<(), Failure> {
        rustix::process::chdir(self.staging.as_c_str()).map_err(at(Step::PivotRoot))?;
        rustix::process::pivot_root(c".", c".").map_err(at(Step::PivotRoot))?;
        rustix::mount::unmount(c".", UnmountFlags::DETACH).map_err(at(Step::DetachOldRoot))?;
        rustix::process::chdir(c"/").map_err(at(Step::EnterRunDir))?;
        rustix::process::chdir(self.run_dir.as_c_str()).map_err(at(Step::EnterRunDir))?;
        Ok(())
    }

    /// G: the interpreter process, PID 1 of the new PID namespace.
    fn finish_interpreter(&self, supervisor: OwnedFd, ruleset: RulesetCreated) -> Result<(), Failure> {
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(at(Step::DeathSignal))?;
        match sys::poll_readable(supervisor.as_raw_fd()) {
            Ok(false) => {}
            Ok(true) => return Err(Failure::new(Step::SupervisorGone, libc::ESRCH)),
            Err(errno) => return Err(Failure::new(Step::SupervisorGone, errno)),
        }
        drop(supervisor);
        sys::cloexec_from(INHERITED_FDS).map_err(|errno| Failure::new(Step::CloseInheritedFds, errno))?;

        rustix::thread::set_no_new_privs(true).map_err(at(Step::NoNewPrivs))?;
        let status = ruleset.restrict_self().map_err(|e| Failure::new(Step::Landlock, errno_of(&e, libc::EPERM)))?;
        if status.ruleset != RulesetStatus::FullyEnforced {
            return Err(Failure::new(Step::LandlockNotEnforced, libc::EOPNOTSUPP));
        }

        for (index, (resource, value)) in self.limits.into_iter().enumerate() {
            rustix::process::setrlimit(resource, Rlimit { current: Some(value), maximum: Some(value) })
                .map_err(at_entry(Step::SetLimit, index))?;
        }

        seccomp::install(&self.filters).map_err(|errno| Failure::new(Step::Seccomp, errno))?;
        Ok(())
    }
}

/// Write `data` in one `write` to `/proc/self/<name>` through `proc_self`.
fn write_proc(proc_self: &OwnedFd, name: &std::ffi::CStr, data: &[u8], step: Step) -> Result<(), Failure> {
    let file =
        rustix::fs::openat(proc_self, name, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty()).map_err(at(step))?;
    let written = rustix::io::write(&file, data).map_err(at(step))?;
    if written != data.len() {
        return Err(Failure::new(step, libc::EIO));
    }
    Ok(())
}

fn cstring(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| SandboxError::NulInPath { path: path.to_path_buf() })
}

/// Resolve and check the staging dir: an existing, empty directory that is
/// not inside (and does not contain) an exposed path.
fn check_staging(given: &Path, plan: &MountPlan) -> Result<PathBuf, SandboxError> {
    let problem = |problem: &'static str| SandboxError::StagingDir { path: given.to_path_buf(), problem };
    let staging = std::fs::canonicalize(given).map_err(|_| problem("does not exist"))?;
    if !staging.is_dir() {
        return Err(problem("is not a directory"));
    }
    let mut entries = std::fs::read_dir(&staging).map_err(|_| problem("cannot be read"))?;
    if entries.next().is_some() {
        return Err(problem("is not empty"));
    }
    if staging == Path::new("/") {
        return Err(problem("is the host root"));
    }
    for bind in &plan.binds {
        if staging.starts_with(&bind.path) || bind.path.starts_with(&staging) {
            return Err(problem("overlaps an exposed path"));
        }
    }
    Ok(staging)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepared_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Prepared>();
    }

    #[test]
    fn every_step_round_trips_its_code() {
        for step in Step::ALL {
            assert_eq!(Step::from_code(step.code()), Some(step));
        }
        assert_eq!(Step::from_code(0), None);
    }
}
