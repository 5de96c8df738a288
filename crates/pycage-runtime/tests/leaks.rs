//! After every kind of outcome: no leftover processes, fds or run dirs.
//! One test in its own binary, so /proc/self reflects only these runs.
mod common;

use std::time::Duration;

use common::*;
use pycage_runtime::*;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Processes whose parent is this test process, or whose process group was
/// one of our children's (a grandchild left behind in the group).
fn children_of_self() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) {
            // pid (comm) state ppid ...
            let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
            let fields: Vec<&str> = after.split_whitespace().collect();
            if fields.get(1) == Some(&me.as_str()) {
                out.push(stat);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_leftover_processes_fds_or_dirs() {
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
        "import subprocess\nsubprocess.Popen(['sleep', '31.731'])\nreturn 1",
        "import os\nif os.fork() == 0:\n    os.execvp('sleep', ['sleep', '31.732'])\nreturn 2",
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
    let h = tokio::spawn(async move { rt2.run(RunRequest::new("import time\ntime.sleep(30)").with_cancel(t2)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel();
    assert_eq!(h.await.unwrap().unwrap().error.unwrap().kind, FailureKind::Abort);

    let zygote_pid = rt.zygote_pid();
    assert!(zygote_pid.is_some(), "process isolation runs through a zygote by default");
    rt.shutdown().await;
    assert_eq!(children_of_self(), Vec::<String>::new());
    assert_eq!(processes_with_marker("31.73"), Vec::<String>::new());
    // The scan itself can see such a process (so the check above can fail).
    let mut control = std::process::Command::new("sleep").arg("31.739").spawn().unwrap();
    // (Until it has exec'd, the child still shows this binary's command line.)
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while processes_with_marker("31.73").is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(processes_with_marker("31.73").len(), 1);
    control.kill().unwrap();
    control.wait().unwrap();
    assert_eq!(open_fds(), fds_before);
    // The zygote is gone too.
    if let Some(pid) = zygote_pid {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "zygote {pid} survived shutdown");
    }
    let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "{left:?}");
}
