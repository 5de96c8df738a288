//! Sessions: state kept across runs, per-run budgets, how a session ends.
mod common;

use std::time::Duration;

use common::*;
use pycage_runtime::*;

async fn cell(s: &Session, program: &str) -> RunResult {
    s.run(program).await.unwrap()
}

fn pid_alive(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

async fn wait_gone(pid: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pid_alive(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!pid_alive(pid), "session process {pid} still alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_globals_imports_files_and_bindings() {
    let rt = runtime();
    let s = rt.session(SessionOptions::default().with_namespace(echo_ns())).unwrap();
    assert_eq!(value(&cell(&s, "x = 1\ndef double(v):\n    return 2 * v\nimport math").await), "<none>");
    assert_eq!(value(&cell(&s, "x += 1\nx").await), "2");
    assert_eq!(value(&cell(&s, "double(x) + math.floor(2.5)").await), "6");
    assert_eq!(value(&cell(&s, "open('notes.txt', 'w').write('kept')").await), "4");
    assert_eq!(value(&cell(&s, "open('notes.txt').read()").await), "\"kept\"");
    // Top-level await and bindings, in one cell and the next.
    assert_eq!(value(&cell(&s, "y = await tools.echo({'a': x})").await), "<none>");
    assert_eq!(value(&cell(&s, "return y").await), r#"{"a":2}"#);
    // An exception is a run's outcome; the session goes on.
    let r = cell(&s, "1/0").await;
    assert_eq!(failure(&r).0, FailureKind::Exception);
    assert_eq!(value(&cell(&s, "x").await), "2");
    assert!(s.ended().is_none());
    s.close().await;
    assert!(matches!(s.run("x").await, Err(SessionError::Ended(_))));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_has_its_own_cpu_and_log_budgets() {
    let rt = runtime_with(|c| {
        c.cpu_seconds = 1;
        c.max_log_bytes = 100;
        c.wall_time = Duration::from_secs(20);
    });
    let s = rt.session(SessionOptions::default()).unwrap();
    // Three runs of ~0.6 s CPU each: over the budget together, not one by one.
    let spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass\nreturn 'ok'";
    for _ in 0..3 {
        assert_eq!(value(&cell(&s, spin).await), "\"ok\"");
    }
    // The log ledger starts over with each run.
    let r = cell(&s, "print('x' * 300)").await;
    assert_eq!(r.logs.last().map(String::as_str), Some("[pycage] log capture truncated at 100 bytes"));
    let r = cell(&s, "print('fresh')").await;
    assert_eq!(r.logs, ["fresh"]);
    // A run that overspends ends as a CPU timeout, and the session with it.
    let r = cell(&s, "while True:\n    pass").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::Timeout, "{msg}");
    assert!(msg.contains("CPU"), "{msg}");
    match s.run("1").await {
        Err(SessionError::Ended(why)) => assert!(why.contains("timeout"), "{why}"),
        other => panic!("expected an ended session, got {other:?}"),
    }
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_or_a_wall_timeout_ends_the_session() {
    let rt = runtime_with(|c| c.wall_time = Duration::from_millis(1500));
    let s = rt.session(SessionOptions::default()).unwrap();
    let pid = value(&cell(&s, "import os\nos.getpid()").await);
    let r = cell(&s, "print('bye', flush=True)\nos._exit(3)").await;
    assert_eq!(failure(&r).0, FailureKind::WorkerExit);
    assert_eq!(r.logs, ["bye"]);
    match s.run("1").await {
        Err(SessionError::Ended(why)) => assert!(why.contains("worker-exit"), "{why}"),
        other => panic!("expected an ended session, got {other:?}"),
    }
    wait_gone(&pid).await;

    let s = rt.session(SessionOptions::default()).unwrap();
    let pid = value(&cell(&s, "import os\nos.getpid()").await);
    let r = cell(&s, "import time\ntime.sleep(60)").await;
    assert_eq!(failure(&r).0, FailureKind::Timeout);
    assert!(matches!(s.run("1").await, Err(SessionError::Ended(_))));
    wait_gone(&pid).await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires() {
    let rt = runtime();
    let options = SessionOptions { idle_timeout: Duration::from_millis(300), ..SessionOptions::default() };
    let s = rt.session(options).unwrap();
    let pid = value(&cell(&s, "import os\nos.getpid()").await);
    // Ended by its watchdog, with nothing asked of it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while s.ended().is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(s.ended().is_some_and(|why| why.contains("idle")), "{:?}", s.ended());
    match s.run("1").await {
        Err(SessionError::Ended(why)) => assert!(why.contains("idle"), "{why}"),
        other => panic!("expected an expired session, got {other:?}"),
    }
    wait_gone(&pid).await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_not_idle_while_a_run_is_in_flight() {
    // A cell longer than the idle timeout keeps the session (and its
    // globals): the idle clock counts from the end of the last run.
    let rt = runtime();
    let options = SessionOptions { idle_timeout: Duration::from_millis(1000), ..SessionOptions::default() };
    let s = rt.session(options).unwrap();
    assert_eq!(value(&cell(&s, "x = 41").await), "<none>");
    assert_eq!(value(&cell(&s, "import time\ntime.sleep(2.5)\nx += 1").await), "<none>");
    assert_eq!(value(&cell(&s, "x").await), "42");
    s.close().await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_at_once_keep_their_own_state() {
    let rt = runtime();
    let mut handles = Vec::new();
    for i in 0..8 {
        let rt = rt.clone();
        handles.push(tokio::spawn(async move {
            let s = rt.session(SessionOptions::default()).unwrap();
            assert_eq!(value(&cell(&s, &format!("n = {i}")).await), "<none>");
            for _ in 0..3 {
                cell(&s, "n += 10").await;
            }
            let v = value(&cell(&s, "n").await);
            s.close().await;
            v
        }));
    }
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.await.unwrap(), (i + 30).to_string());
    }
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_drop_and_shutdown_leave_no_process() {
    let rt = runtime();
    let s = rt.session(SessionOptions::default()).unwrap();
    let closed = value(&cell(&s, "import os\nos.getpid()").await);
    s.close().await;
    assert!(!pid_alive(&closed), "close returned before the process was reaped");

    let s = rt.session(SessionOptions::default()).unwrap();
    let dropped = value(&cell(&s, "import os\nos.getpid()").await);
    drop(s);
    wait_gone(&dropped).await;

    let s = rt.session(SessionOptions::default()).unwrap();
    let at_shutdown = value(&cell(&s, "import os\nos.getpid()").await);
    rt.shutdown().await;
    assert!(!pid_alive(&at_shutdown), "shutdown returned before the session's process was reaped");
    assert!(matches!(s.run("1").await, Err(SessionError::Misuse(MisuseError::ShutDown))));
}

/// A cell stopped by its session's `close` says so; one stopped by the
/// runtime's shutdown says that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_stopped_by_close_or_by_shutdown_says_which() {
    let rt = runtime();
    let hang = "print('up', flush=True)\nimport time\ntime.sleep(60)";
    for by_close in [true, false] {
        let s = rt.session(SessionOptions::default()).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let stopper = async {
            rx.recv().await.expect("the cell logs before it sleeps");
            if by_close {
                s.close().await;
            } else {
                rt.shutdown().await;
            }
        };
        let (r, ()) = tokio::join!(s.run_with(SessionRun::new(hang), Some(tx)), stopper);
        let r = r.unwrap();
        let (kind, message) = failure(&r);
        assert_eq!(kind, FailureKind::Abort);
        let want = if by_close { "the session was closed" } else { "the runtime was shut down" };
        assert_eq!(message, want);
    }
}
