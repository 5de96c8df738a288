//! The program's own final steps (16-18 in [`crate::prepared`]): one
//! typed, ordered list, built here, and its executor for the exec path.
//!
//! [`Prepared::new`](crate::Prepared::new) builds the list once
//! (`build`); policy and order live here only. The exec path runs it in
//! the forked program process (`apply`); a zygote's child receives the
//! same list over the zygote's control socket and runs it through a table
//! of one-operation functions that refuses any step it does not know
//! (`python/pycage/confine.py`). A conformance test runs one program through
//! both paths and compares what it sees of itself.
//!
//! `apply` runs between fork and exec of a multi-threaded host: every
//! step makes syscalls on data built before the fork (map lines, filter
//! bytes), and nothing allocates.

use std::ffi::CStr;

use landlock::{RulesetCreated, RulesetStatus};
pub use pycage_protocol::zygote::{ConfineStep, Rlimit};
use rustix::fs::{Mode, OFlags};
use rustix::process::{Resource, Signal};

use crate::error::{Failure, Step};
use crate::limits::INHERITED_FDS;
use crate::seccomp::Filters;

/// The program's steps: death signal, limits (soft = hard), a cgroup
/// namespace, a nested user namespace mapping `uid_map`/`gid_map`, no
/// descriptor above fd 3, then the descriptor limit, no capabilities,
/// `no_new_privs`, Landlock, seccomp last.
pub(crate) fn build(limits: &[(Resource, u64)], uid_map: &[u8], gid_map: &[u8], filters: &Filters) -> Vec<ConfineStep> {
    let mut steps = vec![ConfineStep::DeathSignal];
    let limit = |&(resource, value): &(Resource, u64)| {
        wire_resource(resource).map(|resource| ConfineStep::Limit { resource, value })
    };
    // Before the nested user namespace: it records its creator's
    // RLIMIT_NPROC, RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE and RLIMIT_MEMLOCK
    // as the ceilings of everything counted in it, so they bound the
    // whole run, not one process.
    steps.extend(limits.iter().filter(|(r, _)| *r != Resource::Nofile).filter_map(limit));
    steps.extend([
        // Still root of the run's user namespace (CAP_SYS_ADMIN there):
        // the cgroup namespace is rooted at this process's cgroup, and
        // the program's `/proc/self/cgroup` reads `0::/`.
        ConfineStep::UnshareCgroup,
        ConfineStep::UnshareUser,
        ConfineStep::Dumpable,
        ConfineStep::IdMaps {
            uid_map: String::from_utf8_lossy(uid_map).into_owned(),
            gid_map: String::from_utf8_lossy(gid_map).into_owned(),
        },
        // The credential change cleared it.
        ConfineStep::DeathSignal,
        ConfineStep::CloseFds,
    ]);
    // After the inherited descriptors are gone (a zygote's child) or
    // marked close-on-exec (the exec path), and after the maps' files were
    // opened: a child forked from a host holding hundreds of descriptors
    // has no free number below the limit, and opening `/proc/self` failed
    // with EMFILE under ordinary load.
    steps.extend(limits.iter().filter(|(r, _)| *r == Resource::Nofile).filter_map(limit));
    steps.extend([ConfineStep::DropCaps, ConfineStep::NoNewPrivs, ConfineStep::Landlock]);
    steps.extend(filters.to_bytes().into_iter().map(|filter| ConfineStep::Seccomp { filter }));
    steps
}

fn wire_resource(r: Resource) -> Option<Rlimit> {
    match r {
        Resource::Nproc => Some(Rlimit::Nproc),
        Resource::Fsize => Some(Rlimit::Fsize),
        Resource::Nofile => Some(Rlimit::Nofile),
        Resource::Core => Some(Rlimit::Core),
        Resource::Sigpending => Some(Rlimit::Sigpending),
        Resource::Msgqueue => Some(Rlimit::Msgqueue),
        Resource::Memlock => Some(Rlimit::Memlock),
        _ => None,
    }
}

fn host_resource(r: Rlimit) -> Resource {
    match r {
        Rlimit::Nproc => Resource::Nproc,
        Rlimit::Fsize => Resource::Fsize,
        Rlimit::Nofile => Resource::Nofile,
        Rlimit::Core => Resource::Core,
        Rlimit::Sigpending => Resource::Sigpending,
        Rlimit::Msgqueue => Resource::Msgqueue,
        Rlimit::Memlock => Resource::Memlock,
    }
}

fn at(step: Step) -> impl Fn(rustix::io::Errno) -> Failure {
    move |e| Failure::new(step, e.raw_os_error())
}

/// Runs `steps` in the program's process (the exec path). `ruleset` is
/// used, and dropped, by the Landlock step; descriptors above fd 3 are
/// marked close-on-exec (exec follows). `Ok` means: exec now.
pub(crate) fn apply(steps: &[ConfineStep], ruleset: RulesetCreated) -> Result<(), Failure> {
    let mut ruleset = Some(ruleset);
    let mut limit_index = 0usize;
    for step in steps {
        match step {
            ConfineStep::DeathSignal => {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(at(Step::DeathSignal))?
            }
            ConfineStep::Limit { resource, value } => {
                let resource = host_resource(*resource);
                // Without root the hard limit cannot be raised: stay below it.
                let value = rustix::process::getrlimit(resource).maximum.map_or(*value, |max| max.min(*value));
                let limit = rustix::process::Rlimit { current: Some(value), maximum: Some(value) };
                rustix::process::setrlimit(resource, limit)
                    .map_err(|e| Failure::at(Step::SetLimit, limit_index, e.raw_os_error()))?;
                limit_index += 1;
            }
            ConfineStep::UnshareCgroup => {
                // SAFETY: CLONE_NEWCGROUP on the single-threaded forked child.
                unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWCGROUP) }
                    .map_err(at(Step::UnshareProgramCgroup))?
            }
            ConfineStep::UnshareUser => {
                // SAFETY: CLONE_NEWUSER on the single-threaded forked child.
                unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWUSER) }
                    .map_err(at(Step::UnshareProgramUser))?
            }
            ConfineStep::Dumpable => {
                rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable)
                    .map_err(at(Step::SetDumpable))?
            }
            ConfineStep::IdMaps { uid_map, gid_map } => {
                let proc_self =
                    rustix::fs::open(c"/proc/self", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                        .map_err(at(Step::WriteProgramMaps))?;
                let write_map = |name: &CStr, data: &[u8]| {
                    crate::sys::write_map(std::os::fd::AsFd::as_fd(&proc_self), name, data)
                        .map_err(|errno| Failure::new(Step::WriteProgramMaps, errno))
                };
                write_map(c"setgroups", b"deny\n")?;
                write_map(c"uid_map", uid_map.as_bytes())?;
                write_map(c"gid_map", gid_map.as_bytes())?;
            }
            ConfineStep::CloseFds => {
                crate::sys::cloexec_from(INHERITED_FDS).map_err(|errno| Failure::new(Step::CloseInheritedFds, errno))?
            }
            ConfineStep::DropCaps => {
                crate::sys::drop_capabilities().map_err(|errno| Failure::new(Step::DropCapabilities, errno))?
            }
            ConfineStep::NoNewPrivs => rustix::thread::set_no_new_privs(true).map_err(at(Step::NoNewPrivs))?,
            ConfineStep::Landlock => {
                let created = ruleset.take().ok_or(Failure::new(Step::Landlock, libc::EBADF))?;
                let status = created
                    .restrict_self()
                    .map_err(|e| Failure::new(Step::Landlock, crate::error::errno_of(&e, libc::EPERM)))?;
                if status.ruleset != RulesetStatus::FullyEnforced {
                    return Err(Failure::new(Step::LandlockNotEnforced, libc::EOPNOTSUPP));
                }
            }
            ConfineStep::Seccomp { filter } => {
                crate::sys::install_seccomp(filter).map_err(|errno| Failure::new(Step::Seccomp, errno))?
            }
        }
    }
    if ruleset.is_some() {
        // A list without its Landlock step is not a sandbox.
        return Err(Failure::new(Step::Landlock, libc::EINVAL));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_is_ordered_as_the_sandbox_requires() {
        let filters = crate::seccomp::compile(crate::seccomp::native_arch().unwrap()).unwrap();
        let limits = [
            (Resource::Nproc, 66),
            (Resource::Fsize, 1),
            (Resource::Nofile, 256),
            (Resource::Core, 0),
            (Resource::Sigpending, 1024),
            (Resource::Msgqueue, 0),
            (Resource::Memlock, 65536),
        ];
        let steps = build(&limits, b"1000 0 1\n", b"1000 0 1\n", &filters);
        let ops: Vec<&str> = steps.iter().map(ConfineStep::op).collect();
        assert_eq!(
            ops,
            [
                "death-signal",
                "limit",
                "limit",
                "limit",
                "limit",
                "limit",
                "limit",
                "unshare-cgroup",
                "unshare-user",
                "dumpable",
                "id-maps",
                "death-signal",
                "close-fds",
                "limit",
                "drop-caps",
                "no-new-privs",
                "landlock",
                "seccomp"
            ]
        );
        assert_eq!(steps[1], ConfineStep::Limit { resource: Rlimit::Nproc, value: 66 });
        assert_eq!(steps[4], ConfineStep::Limit { resource: Rlimit::Sigpending, value: 1024 });
        // The descriptor limit once the inherited descriptors are gone.
        assert_eq!(steps[13], ConfineStep::Limit { resource: Rlimit::Nofile, value: 256 });
        // The whole seccomp policy is one program, installed last.
        assert_eq!(steps[17], ConfineStep::Seccomp { filter: filters.to_bytes()[0].clone() });
    }
}
