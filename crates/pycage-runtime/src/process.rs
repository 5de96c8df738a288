//! Small, safe wrappers for signalling and inspecting processes: the leaf
//! every other module uses to reach a run's processes.
//!
//! # Never signal a stranger
//!
//! A run's processes are reached by its process group (`kill(-pgid)`),
//! whose id is the pid of the run's first process. That id names the
//! run's group only while that process is unreaped: once it is reaped its
//! pid can be recycled (within seconds on a busy host with `pid_max`
//! 32,768), and a new process that calls `setsid` gets it as its group.
//! So [`kill_run_group`] signals the group only when the caller can prove
//! the leader is unreaped (our own child we have not reaped, or a child
//! its zygote still holds: a zygote reaps only when asked, and holds its
//! children while it lives), and otherwise signals the leader alone
//! through its pidfd, which names that process and no other for as long
//! as the descriptor is open. The rest of a sandboxed run is reached
//! through its PID namespace, whose init is the host's own child.

use std::os::fd::{AsFd, OwnedFd};

use rustix::process::{Pid, Signal};

/// Signals a run's process group when `leader_is_ours` (see the module
/// docs); otherwise only the leader, through `pidfd`.
pub(crate) fn kill_run_group(leader: i32, pidfd: &OwnedFd, leader_is_ours: bool) {
    signal_run_group(leader, pidfd, leader_is_ours, Signal::KILL);
}

/// [`kill_run_group`] with any signal.
pub(crate) fn signal_run_group(leader: i32, pidfd: &OwnedFd, leader_is_ours: bool, sig: Signal) {
    match Pid::from_raw(leader) {
        Some(pid) if leader_is_ours => {
            let _ = rustix::process::kill_process_group(pid, sig);
        }
        _ => {
            let _ = rustix::process::pidfd_send_signal(pidfd, sig);
        }
    }
}

/// Whether the process behind `pidfd` has exited (without waiting): a
/// pidfd is readable from the moment its process exits.
pub(crate) fn has_exited(pidfd: &impl AsFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(pidfd, rustix::event::PollFlags::IN)];
    let now = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    matches!(rustix::event::poll(&mut fds, Some(&now)), Ok(n) if n > 0)
}

/// The state letter of `/proc/<pid>/stat` (`R`, `S`, `D`, `T` stopped,
/// `t` traced, `Z` zombie, ...), if the process exists.
pub(crate) fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name may hold spaces and parentheses: the state follows the last `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().next()?.chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_and_exit_of_a_child() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let pidfd =
            rustix::process::pidfd_open(Pid::from_raw(pid).unwrap(), rustix::process::PidfdFlags::empty()).unwrap();
        assert!(matches!(state(pid), Some('S' | 'R')));
        assert!(!has_exited(&pidfd));
        // Not ours to signal by group: the pidfd reaches the child alone.
        signal_run_group(pid, &pidfd, false, Signal::STOP);
        let stopped = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            state(pid) == Some('T')
        });
        assert!(stopped);
        kill_run_group(pid, &pidfd, false);
        child.wait().unwrap();
        assert!(state(pid).is_none() || state(pid) != Some('T'));
    }
}
