//! Never signal a stranger: a run's process group is signalled only while
//! its first process is provably unreaped. The test recreates a pid recycle
//! deterministically, in a PID namespace it owns (it re-runs itself there
//! as PID 1 with `unshare --pid --fork --mount-proc`):
//!
//! 1. a run starts in process isolation through the zygote and reports its
//!    pid; the host's run future is then left unpolled;
//! 2. the test kills its runtime's zygote: the run's process dies of its
//!    death signal and, orphaned, is reaped by the test (init here);
//! 3. the test sets `ns_last_pid` so that the next process it starts, an
//!    innocent `sleep` in a process group of its own, takes the dead run's
//!    pid as its pid and its process group id;
//! 4. the run future is polled again: the host settles the run and ends
//!    its process. Before the fix it killed the run's process group by id,
//!    which is now the innocent's; the innocent must live.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::os::unix::process::CommandExt;
use std::time::Duration;

use pycage_runtime::*;

const INNER: &str = "PYCAGE_NO_STRANGER_INNER";

#[test]
fn a_recycled_pid_is_never_signalled() {
    if std::env::var_os(INNER).is_some() {
        return inner();
    }
    if !rustix::process::geteuid().is_root() {
        // A PID namespace of our own and `ns_last_pid` need root here.
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "a_recycled_pid_is_never_signalled", "--nocapture", "--test-threads", "1"])
        .env(INNER, "1")
        .output()
        .expect("unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "in a PID namespace:\n{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}\n{stderr}");
}

fn reap(pid: i32) {
    let pid = rustix::process::Pid::from_raw(pid).unwrap();
    for _ in 0..1000 {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG) {
            Ok(Some(_)) => return,
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            // Not ours yet: it is reparented to init once the zygote is gone.
            Err(rustix::io::Errno::CHILD) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("waitpid({pid:?}): {e}"),
        }
    }
    panic!("{pid:?} was never reaped");
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

fn inner() {
    assert_eq!(std::process::id(), 1, "runs as the namespace's init");
    // One thread: the run's future is polled only when the test says so.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let config = RuntimeConfig {
            isolation: Isolation::Process,
            spawn: SpawnMode::Zygote,
            pool_size: 0,
            wall_time: Duration::from_secs(60),
            ..RuntimeConfig::default()
        };
        let runtime = Runtime::new(config).unwrap();
        let (tx, mut rx) = runtime.event_channel();
        let program = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)";
        let mut run = Box::pin(runtime.run_with_events(RunRequest::new(program), tx));
        // 1. Until the run reports its pid.
        let leader: i32 = loop {
            tokio::select! {
                ev = rx.recv() => if let Some(RunEvent::Log(line)) = ev { break line.parse().unwrap() },
                r = &mut run => panic!("the run ended early: {r:?}"),
            }
        };
        // 2. Its zygote dies (the test's own runtime's), the run's process
        //    with it; init (this test) reaps the orphan.
        let zygote = runtime.zygote_pid().unwrap() as i32;
        rustix::process::kill_process(rustix::process::Pid::from_raw(zygote).unwrap(), rustix::process::Signal::KILL)
            .unwrap();
        reap(leader);
        assert!(!alive(leader));
        // 3. The next pid is the dead run's: an innocent takes it, as the
        //    leader of its own process group.
        std::fs::write("/proc/sys/kernel/ns_last_pid", (leader - 1).to_string()).unwrap();
        let mut innocent = std::process::Command::new("sleep").arg("60").process_group(0).spawn().unwrap();
        assert_eq!(innocent.id() as i32, leader, "the innocent took the dead run's pid");
        // 4. The host settles the run and ends its process.
        let r = tokio::time::timeout(Duration::from_secs(30), &mut run).await.unwrap().unwrap();
        assert_eq!(r.error.as_ref().map(|e| e.kind), Some(FailureKind::WorkerExit), "{r:?}");
        runtime.shutdown().await;
        std::thread::sleep(Duration::from_millis(100));
        assert!(alive(leader), "the host signalled a process group that was no longer the run's");
        innocent.kill().unwrap();
        innocent.wait().unwrap();
    });
}
