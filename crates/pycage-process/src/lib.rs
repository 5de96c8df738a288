//! Small, safe wrappers around processes: signalling and inspecting them,
//! reaping them (`wait4`, and a runtime's reaper thread), and what a forked
//! child does before exec (its fd 3, close-on-exec, death signal). The leaf
//! every module that makes or ends a process uses.
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
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::{Pid, Signal};

/// Signals a run's process group when `leader_is_ours` (see the module
/// docs); otherwise only the leader, through `pidfd`.
pub fn kill_run_group(leader: i32, pidfd: &OwnedFd, leader_is_ours: bool) {
    signal_run_group(leader, pidfd, leader_is_ours, Signal::KILL);
}

/// [`kill_run_group`] with any signal.
pub fn signal_run_group(leader: i32, pidfd: &OwnedFd, leader_is_ours: bool, sig: Signal) {
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
pub fn has_exited(pidfd: &impl AsFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(pidfd, rustix::event::PollFlags::IN)];
    let now = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    matches!(rustix::event::poll(&mut fds, Some(&now)), Ok(n) if n > 0)
}

/// The state letter of `/proc/<pid>/stat` (`R`, `S`, `D`, `T` stopped,
/// `t` traced, `Z` zombie, ...), if the process exists.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name may hold spaces and parentheses: the state follows the last `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().next()?.chars().next()
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    pub status: ExitStatus,
    /// User plus system CPU time of the child (and its reaped descendants).
    pub cpu: Duration,
}

/// `PATH` of a run's process: the interpreter's own directory first (so
/// `python3` and `subprocess.run(["python3", ...])` mean the run's
/// interpreter, as `sys.executable` does), then the system's.
pub fn run_path(python: &Path) -> String {
    const SYSTEM: &str = "/usr/local/bin:/usr/bin:/bin";
    match python.parent().and_then(Path::to_str) {
        Some(dir) if !dir.is_empty() && !dir.contains(':') => format!("{dir}:{SYSTEM}"),
        _ => SYSTEM.to_owned(),
    }
}

/// The `-c` program that puts `bootstrap_dir` on `sys.path` and runs
/// `module.main()` (`pycage.bootstrap` or `pycage.zygote`).
pub fn loader(bootstrap_dir: &Path, module: &str) -> String {
    let mut quoted = Vec::new();
    pycage_protocol::write_json_string(&mut quoted, &bootstrap_dir.to_string_lossy());
    format!("import sys; sys.path.insert(0, {}); from {module} import main; main()", String::from_utf8_lossy(&quoted))
}

/// The arguments and `-c` program of an interpreter that runs `module`
/// from `bootstrap_dir`, after `lead` (`-S`, `-B`): `-I` (isolated mode),
/// or, with a known hash seed, what `-I` does by hand, since it also makes
/// the interpreter ignore `PYTHONHASHSEED`: `-s` (no user site), no
/// current directory on `sys.path`, and the seed's variable dropped before
/// anything else runs (it is not the program's). The caller sets
/// `PYTHONHASHSEED` and clears the rest of the environment either way.
pub fn interpreter_args(lead: &[&str], bootstrap_dir: &Path, module: &str, hash_seed: Option<u32>) -> Vec<String> {
    let mut args = vec![if hash_seed.is_some() { "-s" } else { "-I" }.to_owned()];
    args.extend(lead.iter().map(|a| (*a).to_owned()));
    args.push("-c".to_owned());
    let load = loader(bootstrap_dir, module);
    args.push(match hash_seed {
        Some(_) => format!(
            "import sys, os; sys.path[:1] == [''] and sys.path.pop(0); os.environ.pop('PYTHONHASHSEED', None); {load}"
        ),
        None => load,
    });
    args
}

/// A random number from the kernel (zero when it has none to give: a seed
/// is not a secret).
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty());
    u64::from_ne_bytes(buf)
}

/// Makes the calling thread a background thread for the scheduler:
/// `SCHED_BATCH`, so that waking it never preempts the thread that woke it
/// (a run's caller that asked for a refill and still has a result to
/// return, a program that wrote a frame). It still gets its fair share of
/// CPU; it only waits for the running thread's turn to end instead of
/// cutting it short. Any thread may do this; a failure leaves the thread as
/// it was.
///
/// The policy is inherited across `fork` (`SCHED_RESET_ON_FORK` resets
/// only the real-time ones), which suits pycage's own processes (the shell
/// helper, sandbox shells): what runs a program resets it
/// ([`ordinary_scheduling`]).
pub fn run_in_background() {
    set_policy(libc::SCHED_BATCH);
}

/// Back to `SCHED_OTHER`: for a process that runs programs (a zygote, an
/// exec'd child), whichever thread started it. Async-signal-safe (one
/// system call), for a `pre_exec` hook.
pub fn ordinary_scheduling() {
    set_policy(libc::SCHED_OTHER);
}

fn set_policy(policy: libc::c_int) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler(0, ...)` changes the calling thread's
    // policy only; `param` is a valid, initialized struct that the kernel
    // reads and does not keep. Unprivileged callers may switch between
    // SCHED_OTHER and SCHED_BATCH at priority 0.
    unsafe {
        libc::sched_setscheduler(0, policy, &param);
    }
}

/// One runtime's thread that reaps children nobody waits for anymore (a
/// worker dropped while its child was still dying, or ending: a sandbox
/// shell's supervisor reaping its killed init, [`Reaper::adopt_ending`]). Each
/// runtime has its own, so one runtime's shutdown never waits on another's
/// children.
pub struct Reaper {
    tx: std::sync::Mutex<Option<std::sync::mpsc::Sender<Adopted>>>,
    /// Children handed over and not reaped yet.
    pending: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Default for Reaper {
    fn default() -> Reaper {
        Reaper::new()
    }
}

impl Reaper {
    /// A reaper; its thread starts with the first child handed over.
    pub fn new() -> Reaper {
        Reaper { tx: std::sync::Mutex::new(None), pending: std::sync::Arc::default() }
    }

    /// Reaps `pid` (already sent SIGKILL) in the background.
    pub fn adopt(&self, pid: i32) {
        self.hand_over(Adopted::Killed(pid));
    }

    /// Reaps `pid`, which `pidfd` names and which is expected to exit by
    /// itself (a sandbox shell's supervisor whose init was killed: it
    /// reaps the init, then exits), in the background; its process group
    /// is killed if it has not exited within `grace`.
    pub fn adopt_ending(&self, pid: i32, pidfd: OwnedFd, grace: Duration) {
        self.hand_over(Adopted::Ending { pid, pidfd, grace });
    }

    fn hand_over(&self, child: Adopted) {
        use std::sync::atomic::Ordering;
        let mut tx = lock(&self.tx);
        if tx.is_none() {
            let (sender, rx) = std::sync::mpsc::channel::<Adopted>();
            let pending = std::sync::Arc::clone(&self.pending);
            let spawned = std::thread::Builder::new().name("pycage-reaper".into()).spawn(move || {
                for child in rx {
                    // Blocks only this thread, until the child is gone.
                    child.reap();
                    pending.fetch_sub(1, Ordering::AcqRel);
                }
            });
            if spawned.is_err() {
                // No thread: the zombie stays until the host exits; nothing
                // better can be done without blocking the caller.
                return;
            }
            *tx = Some(sender);
        }
        if let Some(sender) = tx.as_ref() {
            self.pending.fetch_add(1, Ordering::AcqRel);
            if sender.send(child).is_err() {
                self.pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Whether every child handed over has been reaped.
    pub fn idle(&self) -> bool {
        self.pending.load(std::sync::atomic::Ordering::Acquire) == 0
    }
}

/// A child handed to a [`Reaper`].
enum Adopted {
    /// Sent SIGKILL: it dies at once.
    Killed(i32),
    /// Exits by itself; its group is killed after `grace`.
    Ending { pid: i32, pidfd: OwnedFd, grace: Duration },
}

impl Adopted {
    fn reap(self) {
        match self {
            Adopted::Killed(pid) => {
                let _ = wait4(pid, 0);
            }
            Adopted::Ending { pid, pidfd, grace } => {
                if !wait_readable(&pidfd, grace) {
                    // Not reaped yet (this thread reaps it), so its pid
                    // still names it and its group.
                    if let Some(leader) = Pid::from_raw(pid) {
                        let _ = rustix::process::kill_process_group(leader, Signal::KILL);
                    }
                }
                let _ = wait4(pid, 0);
            }
        }
    }
}

/// Whether `fd` became readable `within` (a pidfd: its process exited).
fn wait_readable(fd: &OwnedFd, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout = rustix::event::Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut poll = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
        match rustix::event::poll(&mut poll, Some(&timeout)) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

/// `wait4` on `pid`: `Some` once reaped. With `WNOHANG`, `None` while it
/// still runs; `ECHILD` (someone else reaped it, which should not happen)
/// reads as a kill.
pub fn wait4(pid: i32, flags: libc::c_int) -> Option<Exit> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to live locals of the right types; wait4
        // only writes through them.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if r == pid {
            let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
            return Some(Exit { status: ExitStatus::from_raw(status), cpu: tv(usage.ru_utime) + tv(usage.ru_stime) });
        }
        if r == 0 {
            return None;
        }
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return Some(Exit { status: ExitStatus::from_raw(libc::SIGKILL), cpu: Duration::ZERO });
    }
}

/// Blocking `wait4` for a child known to be dead or dying (a dedicated
/// thread's use only).
pub fn wait4_blocking(pid: i32) -> Option<Exit> {
    wait4(pid, 0)
}

/// A readable description of a wait status.
pub fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(sig) = status.signal() {
        format!("was killed by signal {sig} ({})", signal_name(sig))
    } else {
        format!("ended with wait status {status}")
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGBUS => "SIGBUS",
        libc::SIGINT => "SIGINT",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Locks `mutex`, recovering the guard of a poisoned lock: the reaper's
/// list holds its invariants between statements, and reaping must go on.
fn lock<T: ?Sized>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_thread_is_batch_and_a_program_it_starts_is_not() {
        fn policy_of_a_child(pre_exec: bool) -> String {
            let mut cmd = std::process::Command::new("python3");
            cmd.args(["-I", "-c", "import os; print(os.sched_getscheduler(0))"]);
            if pre_exec {
                // SAFETY: one system call in the forked child.
                unsafe {
                    std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                        ordinary_scheduling();
                        Ok(())
                    });
                }
            }
            String::from_utf8_lossy(&cmd.output().unwrap().stdout).trim().to_string()
        }
        std::thread::spawn(|| {
            // SAFETY: no arguments but the calling thread (0).
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
            run_in_background();
            // SAFETY: as above.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_BATCH);
            // Inherited by what it starts, unless that resets it.
            assert_eq!(policy_of_a_child(false), libc::SCHED_BATCH.to_string());
            assert_eq!(policy_of_a_child(true), libc::SCHED_OTHER.to_string());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn state_and_exit_of_a_child() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let pidfd =
            rustix::process::pidfd_open(Pid::from_raw(pid).unwrap(), rustix::process::PidfdFlags::empty()).unwrap();
        // Running, sleeping, or in the middle of its exec on a loaded machine.
        assert!(matches!(state(pid), Some(c) if !matches!(c, 'T' | 't' | 'Z' | 'X')), "{:?}", state(pid));
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

    /// A child handed over as ending is reaped once it exits by itself,
    /// or killed (its group: it leads one) and reaped after the grace.
    #[test]
    fn an_ending_child_is_reaped_or_killed_after_its_grace() {
        use std::os::unix::process::CommandExt;
        let reaper = Reaper::new();
        let spawn = |seconds: &str| {
            // Reaped by the reaper, not through this handle.
            #[allow(clippy::zombie_processes)]
            let child = std::process::Command::new("sleep").arg(seconds).process_group(0).spawn().unwrap();
            let pid = child.id() as i32;
            let pidfd =
                rustix::process::pidfd_open(Pid::from_raw(pid).unwrap(), rustix::process::PidfdFlags::empty()).unwrap();
            (pid, pidfd)
        };
        let started = std::time::Instant::now();
        let (quick, quick_fd) = spawn("0.1");
        reaper.adopt_ending(quick, quick_fd, Duration::from_secs(60));
        let (stuck, stuck_fd) = spawn("60");
        reaper.adopt_ending(stuck, stuck_fd, Duration::from_millis(200));
        while !reaper.idle() {
            assert!(started.elapsed() < Duration::from_secs(30), "not reaped");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Both reaped (no zombie left: the pids name nothing of ours).
        assert_eq!(state(quick), None);
        assert_eq!(state(stuck), None);
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
