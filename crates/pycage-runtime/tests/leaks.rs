//! After every kind of outcome: no leftover processes, fds or run dirs.
//! One test in its own binary, so /proc/self reflects only these runs.
mod common;

use std::time::Duration;

use common::*;
use pycage_runtime::*;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// This process's live children: with it the subreaper of everything it
/// starts, every process a run leaves behind is one of them.
fn children_of_self() -> Vec<String> {
    live_children(|_| false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_leftover_processes_fds_or_dirs() {
    become_subreaper();
    let parent = tempfile::tempdir().unwrap();
    // Before the runtime: its zygote, pool and their channels must all be
    // closed again after shutdown.
    let fds_before = open_fds();
    let rt = runtime_with(|c| {
        c.run_dir_parent = Some(parent.path().to_path_buf());
        c.wall_time = Duration::from_secs(3);
        c.max_line_bytes = 4096;
    });
    run(&rt, "return 1").await;
    let programs = [
        "return 1",
        "1/0",
        "while True: pass",
        "import os\nos._exit(1)",
        "import os\nos.close(3)\nimport time\ntime.sleep(30)",
        "import os\nos.write(3, b'x' * 100000)\nimport time\ntime.sleep(30)",
        "import subprocess\nsubprocess.Popen(['sleep', '31'])\nreturn 1",
        "import os\nif os.fork() == 0:\n    os.execvp('sleep', ['sleep', '32'])\nreturn 2",
        // (A setsid'd double-fork daemon escapes process isolation, as
        // documented; the sandbox's PID namespace ends it: hostile.rs.)
        "return (1,)",
        "print('x' * 100000)",
    ];
    for p in programs {
        let r = run(&rt, p).await;
        assert!(r.error.is_some() || r.value.is_some(), "{p}: {r:?}");
    }
    let token = CancellationToken::new();
    let rt2 = rt.clone();
    let t2 = token.clone();
    let (tx, mut events) = rt.event_channel();
    let request = RunRequest::new("print('in flight', flush=True)\nimport time\ntime.sleep(30)").with_cancel(t2);
    let h = tokio::spawn(async move { rt2.run_with_events(request, tx).await });
    // Cancelled once in flight (its log line says so), not after a guess.
    while !matches!(events.recv().await, Some(RunEvent::Log(_)) | None) {}
    token.cancel();
    assert_eq!(h.await.unwrap().unwrap().error.unwrap().kind, FailureKind::Abort);

    let zygote_pid = rt.zygote_pid();
    assert!(zygote_pid.is_some(), "process isolation runs through a zygote by default");
    rt.shutdown().await;
    // A process of a run's PID namespace gets its SIGKILL when the
    // namespace's init dies, and is gone once it has been scheduled to die
    // (and reaped by this subreaper, see `live_children`): on a loaded
    // machine that can be an instant after shutdown returns.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !children_of_self().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(children_of_self(), Vec::<String>::new());
    // The check can fail: an orphan started here, as the programs above
    // left theirs, is seen.
    let status = std::process::Command::new("sh").args(["-c", "sleep 34 &"]).status().unwrap();
    assert!(status.success());
    let orphans = children_of_self();
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    let orphan: i32 = orphans[0].split_whitespace().next().unwrap().parse().unwrap();
    // Ours (it was re-parented to this subreaper): stopped and reaped here.
    let orphan = rustix::process::Pid::from_raw(orphan).unwrap();
    rustix::process::kill_process(orphan, rustix::process::Signal::KILL).unwrap();
    rustix::process::waitpid(Some(orphan), rustix::process::WaitOptions::empty()).unwrap();
    assert_eq!(rt.cleanup_failures(), Vec::new());
    // The runtime's own lock goes with it.
    drop(rt);
    assert_eq!(open_fds(), fds_before);
    // The zygote is gone too.
    if let Some(pid) = zygote_pid {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "zygote {pid} survived shutdown");
    }
    let runs: Vec<_> = std::fs::read_dir(parent.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("pycage-run-")))
        .collect();
    assert!(runs.is_empty(), "{runs:?}");
    let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "the owner lock goes with the runtime: {left:?}");
}
