//! The order of a program's output across its two channels: `print` goes
//! out as `log` frames on fd 3 while the raw fd 1/2 pipe is empty, and a
//! subprocess writes to that pipe. A line printed before a subprocess
//! starts must come before the subprocess's output in the logs, in a fresh
//! run and in a session cell, also while the machine is busy (the host then
//! sees the pipe's readiness before the socket's).

mod common;
use common::*;
use pycage_runtime::*;
use std::process::{Child, Command, Stdio};

/// Prints `p{i}` and has a shell echo `s{i}`, `n` times.
fn program(n: usize) -> String {
    format!("import os\nfor i in range({n}):\n    print(f'p{{i}}')\n    os.system(f'echo s{{i}}')\nreturn 1")
}

fn expected(n: usize) -> Vec<String> {
    (0..n).flat_map(|i| [format!("p{i}"), format!("s{i}")]).collect()
}

/// Busy loops, more than the cores of a small machine, killed when dropped
/// (only the processes this test started).
struct Load(Vec<Child>);

impl Load {
    fn start(n: usize) -> Load {
        let spin = || {
            Command::new("python3")
                .args(["-c", "while True: pass"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("python3 for a busy loop")
        };
        Load((0..n).map(|_| spin()).collect())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the program `rounds` times fresh and `rounds` times as cells of
/// one session, `copies` at once; returns every misordered output.
async fn misordered(rt: &Runtime, n: usize, rounds: usize, copies: usize) -> Vec<String> {
    let program = program(n);
    let mut tasks = Vec::new();
    for _ in 0..copies {
        let rt = rt.clone();
        let program = program.clone();
        tasks.push(tokio::spawn(async move {
            let mut outputs = Vec::new();
            for _ in 0..rounds {
                let r = run(&rt, &program).await;
                assert_eq!(value(&r), "1");
                outputs.push(r.logs);
            }
            let s = rt.session(SessionOptions::default()).unwrap();
            for _ in 0..rounds {
                let r = s.run(&program).await.unwrap();
                assert_eq!(value(&r), "1");
                outputs.push(r.logs);
            }
            s.close().await;
            outputs
        }));
    }
    let want = expected(n);
    let mut wrong = Vec::new();
    for t in tasks {
        for (i, logs) in t.await.unwrap().into_iter().enumerate() {
            if logs != want {
                wrong.push(format!(
                    "{}: {}",
                    if i < rounds { "a fresh run" } else { "a session cell" },
                    logs.join(" ")
                ));
            }
        }
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_come_before_a_later_subprocess_output() {
    let rt = runtime();
    let wrong = misordered(&rt, 20, 3, 1).await;
    assert!(wrong.is_empty(), "{} misordered, first {:?}", wrong.len(), wrong.first());
    rt.shutdown().await;
}

/// Process isolation, and the sandbox where it runs (it must, under
/// `PYCAGE_REQUIRE_ALL_TESTS`): the same run loop reads both.
fn isolations() -> Vec<Isolation> {
    if pycage_sandbox::probe().missing().is_empty() {
        vec![Isolation::Process, Isolation::Sandbox]
    } else {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
        vec![Isolation::Process]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_come_before_a_later_subprocess_output_on_a_busy_machine() {
    let _load = Load::start(3);
    for isolation in isolations() {
        let rt = runtime_with(|c| {
            c.isolation = isolation;
            // As `nobody` (below): an interpreter that user can read.
            c.python = std::env::var_os("PYCAGE_TEST_PYTHON").map(std::path::PathBuf::from);
        });
        let wrong = misordered(&rt, 40, 16, 2).await;
        assert!(wrong.is_empty(), "{isolation:?}: {} of 64 misordered, first {:?}", wrong.len(), wrong.first());
        rt.shutdown().await;
    }
}

#[test]
fn prints_come_before_a_later_subprocess_output_on_a_busy_machine_as_an_unprivileged_user() {
    rerun_as_nobody("prints_come_before_a_later_subprocess_output_on_a_busy_machine");
}

/// The long form (`cargo test -p pycage-runtime --test log_order -- --ignored`):
/// 240 outputs under load; before the host took fd 3's frames ahead of each
/// read of the pipe (see `RawPipe::holds_bytes`), 9 to 16 of them were out
/// of order on a 2-core machine, and the busy test above failed about four
/// times in five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn prints_come_before_a_later_subprocess_output_240_times() {
    let _load = Load::start(3);
    for isolation in isolations() {
        let rt = runtime_with(|c| c.isolation = isolation);
        let wrong = misordered(&rt, 40, 60, 2).await;
        assert!(wrong.is_empty(), "{isolation:?}: {} of 240 misordered, first {:?}", wrong.len(), wrong.first());
        rt.shutdown().await;
    }
}
