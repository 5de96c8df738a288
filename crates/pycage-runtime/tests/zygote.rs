//! Runs through the zygote: per-run guarantees, fork hazards, supervision.
mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use pycage_protocol::ValueRef;
use pycage_runtime::*;

fn zygote_runtime(f: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
    let rt = runtime_with(|c| {
        c.spawn = SpawnMode::Zygote;
        f(c);
    });
    assert_eq!(rt.spawn_mode(), (SpawnMode::Zygote, None));
    rt
}

fn text(v: &ValueRef<'_>) -> String {
    v.to_owned().to_canonical_string()
}

fn threads_of(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_forked_from_a_single_threaded_zygote() {
    let rt = zygote_runtime(|_| {});
    let r =
        run(&rt, "import os\nreturn [os.getppid(), os.getpid(), os.getpgid(0), sorted(os.listdir('/proc/self/fd'))]")
            .await;
    let v = r.value.unwrap();
    let zygote = rt.zygote_pid().unwrap();
    let items: Vec<_> = v.root().as_array().unwrap().collect();
    assert_eq!(items[0].as_number().unwrap().as_u64(), Some(u64::from(zygote)), "parent is the zygote");
    // Its own process group (the host signals the whole group).
    assert_eq!(text(&items[1]), text(&items[2]));
    // Stdio, fd 3 and what the bootstrap's own loop opens: exactly what an
    // exec'd child has, so nothing of the zygote's leaks in.
    let fds = text(&items[3]);
    let exec = runtime_with(|c| c.spawn = SpawnMode::Exec);
    let r = run(&exec, "import os\nreturn sorted(os.listdir('/proc/self/fd'))").await;
    assert_eq!(fds, value(&r));
    exec.shutdown().await;
    assert_eq!(threads_of(zygote), 1, "the zygote never has threads");
    rt.shutdown().await;
}

fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|t| t.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

fn fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// The scheduling policy of `pid` (`/proc/<pid>/stat`, field 41).
fn policy_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces), from field 3 on.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(41 - 3).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zygote_is_a_background_process_and_a_program_is_not() {
    const SCHED_OTHER: u32 = 0;
    const SCHED_BATCH: u32 = 3;
    for isolation in [Isolation::Process, Isolation::Sandbox] {
        let rt = zygote_runtime(|c| c.isolation = isolation);
        // The program runs as an ordinary process.
        let r = run(&rt, "import os\nreturn os.sched_getscheduler(0)").await;
        assert_eq!(value(&r), SCHED_OTHER.to_string(), "{isolation:?}: {r:?}");
        // Its forks for refills never preempt a run: SCHED_BATCH, whichever
        // thread (here an ordinary one) started it.
        assert_eq!(policy_of(rt.zygote_pid().unwrap()), SCHED_BATCH, "{isolation:?}");
        rt.shutdown().await;
    }
}

/// The zygote closes each child's descriptors after the fork: holding them
/// would leak two per run and keep every run's output pipe from EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zygote_holds_no_descriptor_of_its_children() {
    let rt = zygote_runtime(|c| c.pool_size = 0);
    assert_eq!(value(&run(&rt, "return 0").await), "0");
    let zygote = rt.zygote_pid().unwrap();
    // A settled run's child is reaped in the background; until then the
    // zygote holds its pidfd. Count only once it has no child left.
    let settled_fds = || async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !children_of(zygote).is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(children_of(zygote), Vec::<u32>::new());
        fds_of(zygote)
    };
    let before = settled_fds().await;
    for i in 0..10 {
        assert_eq!(value(&run(&rt, &format!("print('x')\nreturn {i}")).await), i.to_string());
    }
    assert_eq!(settled_fds().await, before);
    rt.shutdown().await;
}

/// A child forked while a run waits for it (an empty pool) is cold: it
/// skips the warm-up a pooled child runs while it waits, whose faults
/// would be on the run's critical path. It serves the same runs (its
/// depth bookkeeping is measured instead of announced), and has taken
/// fewer page faults when its program starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_forked_for_a_waiting_run_skips_the_warm_up() {
    const FAULTS: &str = "import resource\nreturn resource.getrusage(resource.RUSAGE_SELF).ru_minflt";
    let cold = zygote_runtime(|c| c.pool_size = 0);
    let programs = [
        ("def f(n):\n    return f(n + 1)\ntry:\n    f(0)\nexcept RecursionError:\n    return 'deep'", "\"deep\""),
        (
            "import asyncio\nasync def main():\n    await asyncio.sleep(0)\n    return 2\nreturn asyncio.run(main())",
            "2",
        ),
        ("import asyncio\nawait asyncio.sleep(0)\nreturn 3", "3"),
    ];
    for (program, expected) in programs {
        assert_eq!(value(&run(&cold, program).await), expected, "{program}");
    }
    let r = run(&cold, "x = 1\nraise ValueError('cold')").await;
    let e = r.error.expect("the run raised");
    assert!(e.message.contains("line 2") && e.message.contains("ValueError: cold"), "{}", e.message);
    let cold_faults: u64 = value(&run(&cold, FAULTS).await).parse().unwrap();
    cold.shutdown().await;

    // A pooled child, filled while nothing runs, warms up first (on a
    // machine with a core to spare for it: see `Warmth::for_load`).
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        return;
    }
    let warm = zygote_runtime(|c| c.pool_size = 1);
    assert!(warm.wait_idle(Duration::from_secs(30)).await, "the pool did not fill");
    let warm_faults: u64 = value(&run(&warm, FAULTS).await).parse().unwrap();
    warm.shutdown().await;
    // The warm-up takes some 270 faults a run like this does not: far
    // more than faults vary between children.
    assert!(cold_faults + 100 < warm_faults, "cold child {cold_faults} faults, warm child {warm_faults}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_child_reseeds_random_and_starts_pristine() {
    // The system interpreter too: with nothing but its start-up modules
    // before the zygote's, a CPython 3.11 zygote forks through the C
    // library and runs the at-fork hooks it recorded (`pycage._forks`).
    for python in [None, Some("/usr/bin/python3")] {
        let rt = zygote_runtime(|c| c.python = python.map(Into::into));
        let mut seen = HashSet::new();
        let mut dirs = HashSet::new();
        for _ in 0..6 {
            let r = run(
                &rt,
                "import random, os, json, sys, threading\n\
                 assert not hasattr(json, 'leak'), 'module state leaked'\n\
                 assert os.listdir('.') == [], os.listdir('.')\n\
                 json.leak = 1\n\
                 open('left-behind', 'w').write('x')\n\
                 t = threading.Thread(target=lambda: None)\n\
                 t.start()\n\
                 t.join()\n\
                 native = sys.modules['pycage._forks']._native is not None\n\
                 return [random.random(), os.getcwd(), os.environ['HOME'] == os.path.dirname(os.getcwd()), native, sys.version_info[:2]]",
            )
            .await;
            let v = value(&r);
            let parsed = JsonValue::parse(v.as_bytes()).unwrap();
            let items: Vec<_> = parsed.root().as_array().unwrap().collect();
            assert!(seen.insert(text(&items[0])), "random repeated across children: {v}");
            assert!(dirs.insert(items[1].as_str().unwrap().to_owned()), "run dir reused: {v}");
            assert_eq!(text(&items[2]), "true");
            if python.is_some() && text(&items[4]) == "[3,11]" {
                assert_eq!(text(&items[3]), "true", "the system CPython 3.11 forks through the C library: {v}");
            }
        }
        rt.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zygote_is_replaced_after_its_run_budget() {
    let rt = zygote_runtime(|c| {
        c.zygote_max_runs = 3;
        c.pool_size = 1;
    });
    assert_eq!(value(&run(&rt, "return 0").await), "0");
    let first = rt.zygote_pid().unwrap();
    let mut zygotes = HashSet::new();
    let mut seeds = HashSet::new();
    // The successor starts once the first is due and takes over once ready.
    for _ in 0..40 {
        let r = run(&rt, "import os\nreturn [os.getppid(), hash('pycage')]").await;
        let v = JsonValue::parse(value(&r).as_bytes()).unwrap();
        let items: Vec<_> = v.root().as_array().unwrap().collect();
        zygotes.insert(text(&items[0]));
        seeds.insert(text(&items[1]));
        if zygotes.len() >= 2 {
            break;
        }
        // Idle means no successor is coming: once the first zygote is due,
        // its successor has taken over when this returns.
        assert!(rt.wait_idle(Duration::from_secs(60)).await, "the pool never settled");
    }
    assert!(zygotes.len() >= 2, "the zygote was never replaced: {zygotes:?}");
    assert_ne!(rt.zygote_pid().unwrap(), first);
    // A new zygote means a new hash seed (str hashing is randomized per process).
    assert!(seeds.len() >= 2, "{seeds:?}");
    // The retired zygote exits once its last child is reaped.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{first}")).exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!std::path::Path::new(&format!("/proc/{first}")).exists(), "retired zygote {first} still runs");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_zygote_fails_runs_in_flight_and_is_replaced() {
    let rt = zygote_runtime(|c| c.pool_size = 0);
    let zygote = rt.zygote_pid();
    // Make sure it is up, then kill it while a run is in flight.
    assert_eq!(value(&run(&rt, "return 1").await), "1");
    let zygote = rt.zygote_pid().or(zygote).unwrap();
    let rt2 = rt.clone();
    let (tx, mut events) = rt.event_channel();
    let program = "print('started', flush=True)\nimport time\ntime.sleep(30)";
    let h = tokio::spawn(async move { rt2.run_with_events(RunRequest::new(program), tx).await.unwrap() });
    // Killed once the run is in flight: its first log line says so.
    loop {
        match events.recv().await.expect("the run ended before it logged") {
            RunEvent::Log(line) if line == "started" => break,
            _ => {}
        }
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(zygote as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), h).await.unwrap().unwrap();
    let (kind, _) = failure(&r);
    assert_eq!(kind, FailureKind::WorkerExit, "{r:?}");
    assert_eq!(r.logs, ["started"]);
    // The next run gets a new zygote.
    assert_eq!(value(&run(&rt, "return 2").await), "2");
    assert_ne!(rt.zygote_pid().unwrap(), zygote);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_end_the_run_as_a_script_expects() {
    let rt = zygote_runtime(|c| {
        c.cpu_seconds = 1;
        c.wall_time = Duration::from_secs(30);
    });
    let r = run(&rt, "import os, signal\nprint('a', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::WorkerExit);
    assert!(msg.contains("SIGKILL"), "{msg}");
    assert_eq!(r.logs, ["a"]);
    let r = run(&rt, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nimport time\ntime.sleep(5)").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::WorkerExit);
    assert!(msg.contains("SIGTERM"), "{msg}");
    // RLIMIT_CPU's SIGXCPU at the soft limit ends it as a CPU timeout.
    let r = run(&rt, "while True: pass").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::Timeout);
    assert!(msg.contains("CPU"), "{msg}");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_wait_in_fifo_order() {
    let rt = zygote_runtime(|c| c.max_concurrent_runs = 1);
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for i in 0..4 {
        let rt = rt.clone();
        let order = order.clone();
        let (queued_tx, queued) = tokio::sync::oneshot::channel();
        handles.push(tokio::spawn(async move {
            let program = format!("import time\ntime.sleep(0.05)\nreturn {i}");
            let mut r = std::pin::pin!(run(&rt, &program));
            // A run takes its place in the queue when it is first polled.
            let first =
                std::future::poll_fn(|cx| std::task::Poll::Ready(std::future::Future::poll(r.as_mut(), cx))).await;
            assert!(first.is_pending(), "run {i} ended at its first poll");
            queued_tx.send(()).unwrap();
            let r = r.await;
            order.lock().unwrap().push(value(&r));
        }));
        // Queue them in a known order: each is queued before the next starts.
        queued.await.unwrap();
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["0", "1", "2", "3"]);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_mode_still_works() {
    let rt = runtime_with(|c| c.spawn = SpawnMode::Exec);
    assert_eq!(rt.spawn_mode(), (SpawnMode::Exec, None));
    assert!(rt.zygote_pid().is_none());
    let r = run(&rt, "import os\nreturn os.getppid()").await;
    assert_eq!(value(&r), std::process::id().to_string());
    rt.shutdown().await;
}

/// `Runtime::wait_idle` returns once the pool is full and nothing of a run
/// is pending, and not while a run is in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_idle_waits_for_a_full_pool_and_settled_runs() {
    let rt = zygote_runtime(|c| c.pool_size = 3);
    assert!(rt.wait_idle(Duration::from_secs(30)).await, "the pool never filled");
    let zygote = rt.zygote_pid().unwrap();
    assert_eq!(children_of(zygote).len(), 3);
    let cancel = tokio_util::sync::CancellationToken::new();
    let (tx, mut events) = rt.event_channel();
    let request =
        RunRequest::new("print('in flight', flush=True)\nimport time\ntime.sleep(60)").with_cancel(cancel.clone());
    let rt2 = rt.clone();
    let h = tokio::spawn(async move { rt2.run_with_events(request, tx).await.unwrap() });
    while !matches!(events.recv().await, Some(RunEvent::Log(_)) | None) {}
    // The run lasts a minute unless cancelled: the wait gives up first.
    assert!(!rt.wait_idle(Duration::from_millis(100)).await, "idle with a run in flight");
    cancel.cancel();
    assert_eq!(h.await.unwrap().error.unwrap().kind, FailureKind::Abort);
    assert!(rt.wait_idle(Duration::from_secs(30)).await, "not idle after the run settled");
    assert_eq!(children_of(zygote).len(), 3, "the pool is full again");
    rt.shutdown().await;
}

/// A one-shot run that finished returns before its child is reaped; the
/// task that reaps it then asks for the replacement: the pool fills again,
/// and the run's child is gone from the zygote's children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_is_replaced_in_the_pool_once_its_child_is_reaped() {
    let rt = zygote_runtime(|c| c.pool_size = 2);
    assert!(rt.wait_idle(Duration::from_secs(30)).await, "the pool never filled");
    let zygote = rt.zygote_pid().unwrap();
    let before = children_of(zygote);
    assert_eq!(before.len(), 2);
    for _ in 0..3 {
        let r = run(&rt, "import os\nreturn os.getpid()").await;
        let pid: u32 = value(&r).parse().unwrap();
        // Not `wait_idle`, which asks for a refill itself: the pool must
        // fill again on its own.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut now = children_of(zygote);
        while (now.len() != 2 || now.contains(&pid)) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
            now = children_of(zygote);
        }
        assert!(!now.contains(&pid), "the run's child {pid} was not reaped");
        assert_eq!(now.len(), 2, "one replacement per finished run: {now:?}");
    }
    rt.shutdown().await;
}

/// Runs that give up early (wall clocks from 1 ms up in steps of 125 µs;
/// an empty pool, 16 at once, so each waits for its own fork): every child
/// the zygote forked for them is killed and reaped, and the runtime gets
/// idle. (The narrowest way to leave one, an answer put in the channel
/// just before its waiter is dropped, is closed by `SpawnWait`; this test
/// checks the outcome and did not hit that window in runs with the guard
/// removed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_that_give_up_while_spawning_leave_no_child() {
    let rt = zygote_runtime(|c| c.pool_size = 0);
    for step in 0..48u64 {
        let wall = Duration::from_micros(1000 + step * 125);
        let runs: Vec<_> = (0..16)
            .map(|_| {
                let rt = rt.clone();
                let limits = RunLimits { wall_time: Some(wall), ..RunLimits::default() };
                tokio::spawn(async move { rt.run(RunRequest::new("return 1").with_limits(limits)).await.unwrap() })
            })
            .collect();
        for h in runs {
            h.await.unwrap();
        }
    }
    assert!(rt.wait_idle(Duration::from_secs(30)).await, "a spawn or reap never settled");
    let zygote = rt.zygote_pid().unwrap();
    assert_eq!(children_of(zygote), Vec::<u32>::new(), "children of the zygote are left");
    rt.shutdown().await;
}

fn pid_ns_of(pid: u32) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap()
}

/// A process's pid in each PID namespace it is in, outermost first
/// (`NSpid` of its status).
fn ns_pids_of(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:")).unwrap();
    line.split_whitespace().map(|p| p.parse().unwrap()).collect()
}

fn user_ns_of(pid: u32) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/user")).unwrap()
}

/// A sandboxed zygote child is forked straight into its run's PID
/// namespace, so it is the program (no second fork): on a root host through
/// the zygote's own privilege, elsewhere because the zygote runs as root of
/// a user namespace of its own, of which every run's is a child. Checked as
/// root, then again as an unprivileged user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxed_programs_are_born_in_their_pid_namespace() {
    let rt = zygote_runtime(|c| c.isolation = Isolation::Sandbox);
    let runs = sleeping_runs(&rt, 1).await;
    let zygote = rt.zygote_pid().unwrap();
    let root = rustix::process::geteuid().is_root();
    let own = std::process::id();
    if root {
        assert_eq!(user_ns_of(zygote), user_ns_of(own), "a root host's zygote needs no user namespace");
    } else {
        assert_ne!(user_ns_of(zygote), user_ns_of(own), "the zygote has its own user namespace");
    }
    let children = children_of(zygote);
    // The sleeping run's child, and any the pool holds: all sandboxed.
    assert!(!children.is_empty());
    for child in &children {
        assert_ne!(pid_ns_of(*child), pid_ns_of(zygote), "born in the run's namespace");
        // One level below the zygote's, and not its namespace's init (the
        // shell's): a process of the run.
        let (child_pids, zygote_pids) = (ns_pids_of(*child), ns_pids_of(zygote));
        assert_eq!(child_pids.len(), zygote_pids.len() + 1, "{child_pids:?} under {zygote_pids:?}");
        assert!(child_pids.last().copied().unwrap() > 1, "{child_pids:?}");
        assert_eq!(children_of(*child), Vec::<u32>::new(), "the child is the program: it forked nothing");
    }
    // The program sees no parent, and is uid 1000 of its own namespace.
    let r = run(&rt, "import os\nreturn [os.getppid(), os.getpid() > 1, os.getuid()]").await;
    assert_eq!(value(&r), "[0,true,1000]");
    // Process isolation never gets a user namespace of its own.
    let process = zygote_runtime(|c| c.isolation = Isolation::Process);
    let r = run(&process, "return 1").await;
    assert_eq!(value(&r), "1");
    assert_eq!(user_ns_of(process.zygote_pid().unwrap()), user_ns_of(own));
    process.shutdown().await;
    rt.shutdown().await;
    for run in runs {
        let _ = run.await;
    }
    if root {
        rerun_as_nobody("sandboxed_programs_are_born_in_their_pid_namespace");
    }
}

/// A sandboxed zygote's successor forks into the same runtime's user
/// namespace (on a host that is not root, the one made for the runtime), so
/// the shells built for the first serve the second's children: runs go on
/// across the swap. Checked as root, then again as an unprivileged user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_zygote_is_replaced_in_the_same_user_namespace() {
    let rt = zygote_runtime(|c| {
        c.isolation = Isolation::Sandbox;
        c.zygote_max_runs = 3;
        c.pool_size = 2;
    });
    assert_eq!(value(&run(&rt, "return 0").await), "0");
    let first = rt.zygote_pid().unwrap();
    let first_ns = user_ns_of(first);
    for _ in 0..40 {
        if rt.zygote_pid() != Some(first) {
            break;
        }
        assert_eq!(value(&run(&rt, "return 1").await), "1");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = rt.zygote_pid().unwrap();
    assert_ne!(second, first, "the zygote was never replaced");
    assert_eq!(user_ns_of(second), first_ns, "the successor shares the runtime's user namespace");
    // Its children are born in their runs' namespaces too (no parent in sight).
    for _ in 0..4 {
        assert_eq!(value(&run(&rt, "import os\nreturn os.getppid()").await), "0");
    }
    rt.shutdown().await;
    if rustix::process::geteuid().is_root() {
        rerun_as_nobody("a_sandboxed_zygote_is_replaced_in_the_same_user_namespace");
    }
}

/// The user namespace that owns `pid`'s network namespace (`NS_GET_USERNS`).
fn net_ns_owner(pid: u32) -> std::path::PathBuf {
    ns_owner(pid, "net").unwrap()
}

/// The user namespace that owns `pid`'s namespace of `kind`
/// (`NS_GET_USERNS`); `None` if the process is gone or a zombie (which has
/// no namespaces but its user namespace).
fn ns_owner(pid: u32, kind: &str) -> Option<std::path::PathBuf> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/{kind}")).ok()?;
    // SAFETY: an ioctl without argument on a descriptor this function owns.
    let owner = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS) };
    assert!(owner >= 0, "NS_GET_USERNS: {}", std::io::Error::last_os_error());
    // SAFETY: the ioctl returned a new descriptor, owned by nothing else.
    let owner = unsafe { OwnedFd::from_raw_fd(owner) };
    Some(std::fs::read_link(format!("/proc/self/fd/{}", owner.as_raw_fd())).unwrap())
}

/// A run that leaves sockets behind it: a cycle of `SCM_RIGHTS` messages
/// keeps an abstract socket bound after every descriptor of it is closed,
/// until the kernel collects the cycle.
const LEAVE_A_SOCKET: &str = "\
import array, socket
s = socket.socket(socket.AF_UNIX)
s.bind(b'\\0pycage-left-behind')
a, b = socket.socketpair()
fds = array.array('i', [s.fileno(), a.fileno(), b.fileno()])
a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
b.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
return 1";

/// The cookie of the run's network namespace (`SO_NETNS_COOKIE`).
const NET_NS_COOKIE: &str = "\
import socket
return socket.socket(socket.AF_UNIX).getsockopt(socket.SOL_SOCKET, 71, 8).hex()";

/// The network namespace of an ended sandboxed run serves later runs: made
/// outside the run's user namespace (owned by the zygote's, or by the
/// host's on a root host), it is nothing the run could change, and it is
/// joined again only once every process of its run is gone and no socket
/// is left in it. With shells the host forks and shells the helper forks;
/// as root, then as an unprivileged user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_runs_network_namespaces_serve_later_runs() {
    for helper in [false, true] {
        // A listener the runs can reach, which never accepts.
        let listen_dir = tempfile::tempdir().unwrap();
        let listen_path = listen_dir.path().join("l.sock");
        let listener = std::os::unix::net::UnixListener::bind(&listen_path).unwrap();
        // Anyone may connect (as to a system bus's socket).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(listen_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&listen_path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let rt = zygote_runtime(|c| {
            c.isolation = Isolation::Sandbox;
            c.pool_size = 1;
            c.allow_read = vec![listen_dir.path().to_path_buf()];
            if helper {
                c.shell_helper = Some(vec![common::shell_helper_program()]);
            }
        });
        let mut seen = HashSet::new();
        let mut reused = false;
        for _ in 0..40 {
            // The namespace's cookie: never reused, as an inode number may be.
            let r = run(&rt, NET_NS_COOKIE).await;
            if !seen.insert(value(&r)) {
                reused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(reused, "no run had an ended run's network namespace (helper: {helper}): {seen:?}");
        assert_eq!(rt.shell_helper_pid().is_some(), helper, "the shells came from the helper: {helper}");
        // A run that connects to the listener leaves a socket in its
        // namespace, held outside it until accepted (a `sock_diag` dump does
        // not list it): no later run gets that namespace.
        let connect = format!(
            "import socket\nsocket.socket(socket.AF_UNIX).connect({:?})\n{}",
            listen_path.to_str().unwrap(),
            NET_NS_COOKIE
        );
        let left = value(&run(&rt, &connect).await);
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_ne!(value(&run(&rt, NET_NS_COOKIE).await), left, "a namespace with a socket left in it was reused");
        }
        drop(listener);
        // Whatever an earlier run left in a namespace, no later run finds it.
        assert_eq!(value(&run(&rt, LEAVE_A_SOCKET).await), "1");
        let bind = "import socket\nsocket.socket(socket.AF_UNIX).bind(b'\\0pycage-left-behind')\nreturn 2";
        for _ in 0..6 {
            assert_eq!(value(&run(&rt, bind).await), "2");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Owned by the zygote's user namespace (the host's on a root host),
        // not by the run's: the run holds no capability over it.
        let runs = sleeping_runs(&rt, 1).await;
        let zygote = rt.zygote_pid().unwrap();
        let children = children_of(zygote);
        assert!(!children.is_empty());
        for child in children {
            assert_eq!(net_ns_owner(child), user_ns_of(zygote), "helper: {helper}");
            assert_ne!(user_ns_of(child), user_ns_of(zygote));
        }
        rt.shutdown().await;
        for run in runs {
            let _ = run.await;
        }
    }
    if rustix::process::geteuid().is_root() {
        rerun_as_nobody("ended_runs_network_namespaces_serve_later_runs");
    }
}

/// A run that lists the SysV objects its IPC namespace holds as it starts,
/// then leaves some behind: a semaphore array and a segment under fixed
/// keys, and a private segment it holds attached as it exits. It returns
/// its network namespace's cookie, its IPC namespace, the lists, whether
/// each object was made, the semaphore array's id (its sequence number
/// counts the arrays made in the namespace before), whether it could
/// write a limit, and two of the namespace's limits.
const LEAVE_SYSV_OBJECTS: &str = "\
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def listed(kind):
    return [line.split()[1] for line in open('/proc/sysvipc/' + kind).read().splitlines()[1:]]
before = [listed('shm'), listed('sem')]
sem = libc.semget(0x50594347, 4, 0o1666)
shm = libc.shmget(0x50594348, 4096, 0o1666)
private = libc.shmget(0, 8192, 0o1600)
attached = libc.shmat(private, None, 0) not in (None, ctypes.c_void_p(-1).value)
cookie = socket.socket(socket.AF_UNIX).getsockopt(socket.SOL_SOCKET, 71, 8).hex()
try:
    open('/proc/sys/kernel/shmmax', 'w').write('1')
    wrote = 'wrote a limit'
except OSError:
    wrote = 'no write'
limits = [open('/proc/sys/kernel/' + k).read().strip() for k in ('shmmax', 'shm_rmid_forced')]
made = repr([sem >= 0, shm >= 0, attached])
return '|'.join([cookie, os.readlink('/proc/self/ns/ipc'), repr(before), made, str(sem), wrote] + limits)";

/// The IPC namespace of an ended sandboxed run serves later runs with its
/// network namespace: made outside the run's user namespace (so its limits
/// are nothing the run can change), and joined again only after the
/// supervisor that joins it has removed every SysV object an earlier run
/// left. No run finds one; the limits are the policy's. With shells the
/// host forks and shells the helper forks; as root, then as an
/// unprivileged user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_runs_ipc_namespaces_serve_later_runs_empty() {
    for helper in [false, true] {
        let rt = zygote_runtime(|c| {
            c.isolation = Isolation::Sandbox;
            c.pool_size = 1;
            c.sysv_shm_bytes = 3 << 20;
            if helper {
                c.shell_helper = Some(vec![common::shell_helper_program()]);
            }
        });
        let mut ipc_of = std::collections::HashMap::new();
        let mut reused = 0;
        for _ in 0..60 {
            let got = value(&run(&rt, LEAVE_SYSV_OBJECTS).await);
            let fields: Vec<&str> = got.trim_matches('"').split('|').collect();
            let [cookie, ipc, before, made, sem, wrote, shmmax, forced] = fields[..] else { panic!("{got}") };
            assert_eq!(before, "[[], []]", "a run found an earlier run's SysV objects (helper: {helper})");
            assert_eq!(made, "[True, True, True]", "{got}");
            assert_eq!(wrote, "no write", "helper: {helper}");
            assert_eq!((shmmax, forced), ("3145728", "1"), "the namespace's limits (helper: {helper})");
            // The same network namespace comes with the same IPC namespace.
            if let Some(earlier) = ipc_of.insert(cookie.to_owned(), ipc.to_owned()) {
                assert_eq!(earlier, ipc, "helper: {helper}");
                // Not a new namespace under a reused inode number: an
                // array was made in it before (a new one's first is 0).
                assert_ne!(sem, "0", "helper: {helper}: {got}");
                reused += 1;
                if reused == 3 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(reused, 3, "runs seldom had an ended run's namespaces (helper: {helper}): {ipc_of:?}");
        assert_eq!(rt.shell_helper_pid().is_some(), helper, "the shells came from the helper: {helper}");
        // Owned by the zygote's user namespace (the host's on a root host),
        // not by the run's.
        let runs = sleeping_runs(&rt, 1).await;
        let zygote = rt.zygote_pid().unwrap();
        // The run's process: the zygote's child that joined a run's user
        // namespace and is alive (another may be a pooled child still on its
        // way in, or an ended run's, unreaped).
        let mut checked = 0;
        for child in children_of(zygote) {
            let joined = std::fs::read_link(format!("/proc/{child}/ns/user")).is_ok_and(|u| u != user_ns_of(zygote));
            if let Some(owner) = ns_owner(child, "ipc").filter(|_| joined) {
                assert_eq!(owner, user_ns_of(zygote), "helper: {helper}");
                checked += 1;
            }
        }
        assert!(checked > 0, "no process of the sleeping run");
        rt.shutdown().await;
        for run in runs {
            let _ = run.await;
        }
    }
    if rustix::process::geteuid().is_root() {
        rerun_as_nobody("ended_runs_ipc_namespaces_serve_later_runs_empty");
    }
}

/// Issue 41: a sandboxed run shows no host path in its command line
/// (`/proc/self/cmdline`, `sys.orig_argv`) or `sys.executable`, whichever
/// way its process was made: by exec, from the zygote, with the shell
/// helper. Here the interpreter lives under `/root` (pyenv) and the
/// bootstrap in the host's cache: neither may show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxed_runs_show_no_host_path_in_their_command_line() {
    if !pycage_sandbox::probe().missing().is_empty() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let program = "import sys\n\
cmd = open('/proc/self/cmdline', 'rb').read().decode('utf-8', 'replace')\n\
return [cmd, ' '.join(sys.orig_argv), sys.executable]";
    let launches: [(&str, SpawnMode, bool); 3] =
        [("exec", SpawnMode::Exec, false), ("zygote", SpawnMode::Zygote, false), ("helper", SpawnMode::Zygote, true)];
    for (name, spawn, helper) in launches {
        let rt = Runtime::new(RuntimeConfig {
            spawn,
            pool_size: 1,
            cache_dir: Some(cache.path().to_path_buf()),
            shell_helper: helper.then(|| vec![common::shell_helper_program()]),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let host_python = rt.interpreter().executable.clone();
        let host_bootstrap = cache.path().to_string_lossy().into_owned();
        let shown = value(&run(&rt, program).await);
        assert!(!shown.contains(&host_bootstrap), "{name}: the host's cache shows: {shown}");
        if host_python.starts_with("/root") || host_python.starts_with("/home") {
            assert!(!shown.contains(&*host_python.to_string_lossy()), "{name}: the host's interpreter shows: {shown}");
            assert!(!shown.contains("/root") && !shown.contains("/home"), "{name}: a home directory shows: {shown}");
        }
        assert!(shown.contains("/opt/pycage"), "{name}: {shown}");
        rt.shutdown().await;
    }
}
