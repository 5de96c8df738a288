//! Sandbox shells built by the shell helper (`RuntimeConfig::shell_helper`):
//! runs work as with shells forked by the host (the hostile suite runs once
//! more that way), a helper that dies fails only the runs whose shells it
//! held and is replaced, and nothing it started outlives the runtime. This
//! process is the subreaper of everything it starts, so a shell orphaned by
//! its helper would show up here as a leftover.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use pycage_runtime::*;
use tokio::sync::mpsc;

mod common;

fn helper() -> std::ffi::OsString {
    common::shell_helper_program()
}

fn config() -> RuntimeConfig {
    RuntimeConfig {
        isolation: Isolation::Sandbox,
        spawn: SpawnMode::Zygote,
        shell_helper: Some(vec![helper()]),
        python: std::env::var_os("PYCAGE_TEST_PYTHON").map(Into::into),
        ..RuntimeConfig::default()
    }
}

/// The runtime's helper: its pid, checked to be this process's live child
/// running the helper binary. (Not found by scanning this process's
/// children for that binary: a shell's init, a fork of the helper, is
/// adopted by this subreaper once its supervisor dies, until its PID
/// namespace is torn down.)
fn helper_of(rt: &Runtime) -> i32 {
    let pid = rt.shell_helper_pid().expect("a helper runs") as i32;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let parent = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(1).unwrap();
    assert_eq!(parent, std::process::id().to_string(), "the helper is this process's child");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/exe")).unwrap(), std::path::Path::new(&helper()));
    pid
}

/// The pids of `pid`'s live children.
fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Nothing this process started is left. A shell's init outlives its
/// supervisor an instant: it waits for every process of its namespace to
/// be reaped, and `live_children` reaps those this process adopted.
async fn no_process_left() {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !common::live_children(|_| false).is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(common::live_children(|_| false), Vec::<String>::new());
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One test: each part looks at every child of this process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_helper() {
    common::become_subreaper();
    the_helper_serves_only_a_runtime();
    shells_come_from_the_helper_and_shutdown_leaves_no_process().await;
    one_spare_shell_waits_beside_a_full_pool().await;
    ended_shells_inits_are_the_helpers_to_reap().await;
    without_a_helper_an_ended_shells_init_is_its_supervisors_to_reap().await;
    a_killed_helper_fails_its_runs_and_is_replaced().await;
    a_helper_that_never_serves_is_given_up().await;
}

/// Runs starting while the pool is still filling, through the helper:
/// their shells are the helper's children, not this process's; shutdown
/// aborts the runs and ends the helper, which kills and reaps every shell.
async fn shells_come_from_the_helper_and_shutdown_leaves_no_process() {
    let rt = Runtime::new(config()).unwrap();
    let runs = common::sleeping_runs(&rt, 3).await;
    let helper = helper_of(&rt);
    assert!(children_of(helper).len() >= 3, "the runs' shells are the helper's children");
    rt.shutdown().await;
    no_process_left().await;
    for r in runs {
        assert_eq!(r.await.unwrap().error.unwrap().kind, FailureKind::Abort);
    }
}

/// Each idle child of a full pool holds its shell, and one more shell waits
/// for the next refill's child (built while the zygote forked the last
/// one): exactly one, however many runs went by, and none after shutdown.
async fn one_spare_shell_waits_beside_a_full_pool() {
    let rt = Runtime::new(RuntimeConfig { pool_size: 2, ..config() }).unwrap();
    for i in 0..6 {
        assert_eq!(common::value(&common::run(&rt, &format!("{i} + 1")).await), (i + 1).to_string());
    }
    assert!(rt.wait_idle(Duration::from_secs(60)).await, "the pool refilled");
    let helper = helper_of(&rt);
    // Ended runs' shells are the helper's until it reaps them (it looks
    // every 200 ms).
    wait_for("two pooled shells and a spare", || children_of(helper).len() == 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(children_of(helper).len(), 3, "no shell is built beyond the spare");
    rt.shutdown().await;
    no_process_left().await;
    // Without a pool, nothing is built ahead of demand: a run's shell
    // holds a uid lease, of which a root host may have few.
    let rt = Runtime::new(RuntimeConfig { pool_size: 0, ..config() }).unwrap();
    for _ in 0..3 {
        assert_eq!(common::value(&common::run(&rt, "1 + 1").await), "2");
    }
    assert!(rt.wait_idle(Duration::from_secs(60)).await);
    let helper = helper_of(&rt);
    wait_for("the ended runs' shells reaped", || children_of(helper).is_empty()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(children_of(helper), Vec::<i32>::new(), "no shell is built ahead without a pool");
    rt.shutdown().await;
    no_process_left().await;
}

/// This process's children that live in a nested PID namespace (a
/// shell's init is PID 1 of its run's), zombies included: read from
/// `/proc`, nothing reaped.
fn adopted_inits() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let parent = stat.rsplit_once(')').map(|x| x.1).unwrap_or("").split_whitespace().nth(1);
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let nested =
            status.lines().find_map(|l| l.strip_prefix("NSpid:")).is_some_and(|ids| ids.split_whitespace().count() > 1);
        if parent == Some(me.as_str()) && nested {
            out.push(stat);
        }
    }
    out
}

/// Each ended run's shell, and each shell dropped unused (a zygote's
/// switch drops its idle children, every third run here), is killed
/// whole, its supervisor and its init at once; the init outlives its
/// parent an instant and goes to the nearest subreaper. That is the
/// helper, which reaps it: not this process (a subreaper too), and not a
/// host that is PID 1, which would keep a zombie per shell.
async fn ended_shells_inits_are_the_helpers_to_reap() {
    let rt = Runtime::new(RuntimeConfig { pool_size: 1, zygote_max_runs: 3, ..config() }).unwrap();
    for i in 0..8 {
        assert_eq!(common::value(&common::run(&rt, &format!("{i} * 2")).await), (i * 2).to_string());
    }
    assert!(rt.wait_idle(Duration::from_secs(60)).await, "the pool refilled");
    let helper = helper_of(&rt);
    // The ended shells are gone from the helper (it looks every 200 ms):
    // one pooled, one spare.
    wait_for("the ended runs' shells reaped", || children_of(helper).len() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(adopted_inits(), Vec::<String>::new(), "an ended shell's init came to this process");
    rt.shutdown().await;
    no_process_left().await;
}

/// Without a helper the host forks each shell, and ends it through its
/// init: its supervisor (this process's child) reaps it and exits, so no
/// init comes to this process, whose runs ended normally, by timeout or
/// by a crash of the program, and whose idle children and their shells
/// were dropped at each zygote's switch (every third run).
async fn without_a_helper_an_ended_shells_init_is_its_supervisors_to_reap() {
    let config = RuntimeConfig { pool_size: 1, zygote_max_runs: 3, shell_helper: None, ..config() };
    let rt = Runtime::new(config).unwrap();
    for i in 0..6 {
        assert_eq!(common::value(&common::run(&rt, &format!("{i} * 2")).await), (i * 2).to_string());
    }
    let wall = RunLimits { wall_time: Some(Duration::from_millis(300)), ..RunLimits::default() };
    let slow = RunRequest::new("import time\ntime.sleep(60)").with_limits(wall);
    assert_eq!(rt.run(slow).await.unwrap().error.unwrap().kind, FailureKind::Timeout);
    let crash = common::run(&rt, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)").await;
    assert!(crash.error.is_some(), "{crash:?}");
    assert!(rt.wait_idle(Duration::from_secs(60)).await, "the pool refilled");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(adopted_inits(), Vec::<String>::new(), "an ended shell's init came to this process");
    rt.shutdown().await;
    no_process_left().await;
}

/// SIGKILL to the helper takes its shells, and so the running program,
/// with it: that run settles as `worker-exit`, and the next run gets a
/// shell from a new helper.
async fn a_killed_helper_fails_its_runs_and_is_replaced() {
    let rt = Runtime::new(RuntimeConfig { pool_size: 1, ..config() }).unwrap();
    assert_eq!(common::value(&common::run(&rt, "1 + 1").await), "2");
    let (tx, mut rx) = mpsc::channel(64);
    let running = {
        let rt = rt.clone();
        tokio::spawn(async move {
            rt.run_with_events(RunRequest::new("print('up', flush=True)\nimport time\ntime.sleep(3600)"), tx)
                .await
                .unwrap()
        })
    };
    loop {
        match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.unwrap() {
            Some(RunEvent::Log(_)) => break,
            Some(_) => {}
            None => panic!("the run ended before it logged"),
        }
    }
    let first = helper_of(&rt);
    // This process's own child (the runtime started it), not reaped yet.
    let pid = rustix::process::Pid::from_raw(first).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(60), running).await.unwrap().unwrap();
    assert_eq!(common::failure(&r).0, FailureKind::WorkerExit, "{r:?}");
    // The pool's idle child lost its shell too; the next run must not.
    for _ in 0..3 {
        assert_eq!(common::value(&common::run(&rt, "2 + 2").await), "4");
    }
    wait_for("a new helper", || rt.shell_helper_pid().is_some_and(|p| p as i32 != first)).await;
    helper_of(&rt);
    rt.shutdown().await;
    no_process_left().await;
}

/// A helper command that is not a helper (a missing program, one that
/// exits at once) fails before its first shell: the runtime gives it up
/// and forks its shells itself, and runs work as without one.
async fn a_helper_that_never_serves_is_given_up() {
    for argv in [vec!["/nonexistent/pycage-shell-helper"], vec!["/bin/false"]] {
        let config = RuntimeConfig { shell_helper: Some(argv.iter().map(Into::into).collect()), ..config() };
        let rt = Runtime::new(config).unwrap();
        for _ in 0..3 {
            assert_eq!(common::value(&common::run(&rt, "1 + 1").await), "2", "{argv:?}");
        }
        assert_eq!(rt.shell_helper_pid(), None, "{argv:?}");
        rt.shutdown().await;
        no_process_left().await;
    }
}

/// Started by anything but a runtime (no socket on fd 3), the helper
/// refuses to serve, and says why.
fn the_helper_serves_only_a_runtime() {
    let out = std::process::Command::new(helper()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fd 3 is not a pycage runtime's socket"), "{stderr}");
}
