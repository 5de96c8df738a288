//! [`Prepared::enter`]: the syscalls the forked child makes to build and
//! enter the sandbox. [`Prepared`] itself, everything it needs built in
//! the parent, and what the host reads back are in `parts`.
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
//!    them all. The network namespace has only a downed `lo`. With
//!    [`Prepared::outer_network_namespace`], the network and IPC
//!    namespaces were made (their IPC limits written) or joined (the SysV
//!    objects an earlier run left removed) before step 4 instead, by the
//!    owner of the namespace C was in then.
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
//!    `shmall`, `shmmni`, `sem`, `shm_rmid_forced`) where step 6 made it:
//!    C is the root of the user namespace that owns the IPC namespace, the
//!    only writer the kernel allows. With
//!    egress ([`crate::SandboxPolicy::egress_port`]), cap the namespace's TCP
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
//!     on a stack of its own (`clone(CLONE_VM)`, `sys::clone_vm`): C only
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
//!     SIGPENDING ([`crate::limits::RUN_SIGPENDING`]), MSGQUEUE (0), MEMLOCK
//!     ([`crate::limits::RUN_MEMLOCK_BYTES`]), soft = hard. Set before step 17, because a
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

use landlock::{Access, AccessFs, PathBeneath, RulesetCreated, RulesetCreatedAttr};
use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags};
use rustix::net::{AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use rustix::pipe::PipeFlags;
use rustix::process::{DumpableBehavior, Rlimit, Signal};
use rustix::thread::UnshareFlags;

use crate::error::{at, at_entry, errno_of, Failure, Step};
use crate::limits::SUPERVISOR_LOST_EXIT;
use crate::plan::{NodeKind, HOSTNAME, MAX_BINDS};
use crate::resolved::LandlockGrant;
use crate::sys;

mod parts;

pub(crate) use parts::template_clone_flags;
use parts::{NetworkNamespace, EGRESS_BACKLOG, HANDOFF_SOCK_DIAG, HANDOFF_TAG, JOIN_FDS, JOIN_TAG, RECORD_LEN};
pub use parts::{OuterNamespaces, Preparations, Prepared};

impl Prepared {
    /// Enter the sandbox. Called from `pre_exec` in the forked child, after
    /// the runtime's own `pre_exec` (fd 3, process group). On `Ok` the caller
    /// execs the interpreter, which runs as PID 2 of a new PID namespace;
    /// the process std forked stays behind as its supervisor and never
    /// returns from this call. See the module docs for every step.
    ///
    /// Do not combine with `Command::uid`, `Command::gid`, `Command::chroot`
    /// or `Command::current_dir`: the program starts in [`crate::WORK_DIR`], and the
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
        sys::write_map(proc_self.as_fd(), c"setgroups", b"deny\n").map_err(|e| Failure::new(Step::DenySetgroups, e))?;
        let (uid_map, gid_map) = self.outer_maps();
        sys::write_map(proc_self.as_fd(), c"uid_map", uid_map).map_err(|e| Failure::new(Step::WriteUidMap, e))?;
        sys::write_map(proc_self.as_fd(), c"gid_map", gid_map).map_err(|e| Failure::new(Step::WriteGidMap, e))?;
        drop(proc_self);
        // The uid change cleared the death signal the runtime armed before
        // `enter` (and the user namespace may have): arm it again, and make
        // sure the host did not die in between (the signal would never come).
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(at(Step::DeathSignal))?;
        if rustix::process::getppid() != Some(self.resolved.host_pid) {
            // SAFETY: _exit is async-signal-safe; the host is gone.
            unsafe { libc::_exit(SUPERVISOR_LOST_EXIT) };
        }

        let mut namespaces = UnshareFlags::NEWNS | UnshareFlags::NEWPID | UnshareFlags::NEWUTS;
        let inside = matches!(self.network, NetworkNamespace::Inside);
        if inside {
            namespaces |= UnshareFlags::NEWNET | UnshareFlags::NEWIPC;
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
        if inside {
            self.limit_ipc()?;
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

    /// The run's network and IPC namespaces, when they are made (or
    /// joined) outside the run's user namespace
    /// ([`Prepared::outer_network_namespace`]).
    fn enter_outer_network(&self) -> Result<(), Failure> {
        match &self.network {
            NetworkNamespace::Inside => Ok(()),
            NetworkNamespace::Outside => {
                // SAFETY: namespace flags only, on a single-threaded process.
                unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET | UnshareFlags::NEWIPC) }
                    .map_err(at(Step::UnshareNetwork))?;
                // The namespace's owner, the only writer of its limits.
                self.limit_ipc()
            }
            NetworkNamespace::Join(earlier) => {
                use rustix::thread::LinkNameSpaceType;
                rustix::thread::move_into_link_name_space(earlier.net.as_fd(), Some(LinkNameSpaceType::Network))
                    .map_err(at(Step::JoinNetwork))?;
                rustix::thread::move_into_link_name_space(
                    earlier.ipc.as_fd(),
                    Some(LinkNameSpaceType::InterProcessCommunication),
                )
                .map_err(at(Step::JoinIpc))?;
                // Nothing of the earlier run reaches this one: its
                // semaphores (its shared memory ended with it, unless a
                // mapping outlived the run's processes for a moment: this
                // namespace then serves no run).
                match sys::remove_sysv_objects() {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(Failure::new(Step::IpcInUse, libc::EBUSY)),
                    Err(errno) => Err(Failure::new(Step::CleanIpc, errno)),
                }
            }
        }
    }

    /// Writes the IPC namespace's limits (step 9), from its owner.
    fn limit_ipc(&self) -> Result<(), Failure> {
        for (index, (path, value)) in self.resolved.ipc_limits.iter().enumerate() {
            let file = rustix::fs::open(*path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
                .map_err(at_entry(Step::LimitIpc, index))?;
            write_all(&file, value).map_err(|errno| Failure::at(Step::LimitIpc, index, errno))?;
        }
        Ok(())
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

    /// Step 8: the new root, in the tmpfs mounted over [`STAGING`](crate::resolved::STAGING), or
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

    /// Step 8 with a template: its clone attached at [`STAGING`](crate::resolved::STAGING), and the
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
    /// finished ruleset (see [`Join`](crate::Join)).
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

#[cfg(test)]
mod tests {
    use crate::plan::{PROC_DIR, SHM_DIR, TMP_DIR, WORK_DIR};
    use crate::resolved::STAGING;

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
