//! Sessions keep the run-wide budgets: a cell is bounded like a plain run
//! (memory and CPU across all the session's processes), and CPU spent
//! between cells counts against the session's own budget.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use pycage_runtime::*;

/// Six children holding 100 MiB each: 600 MiB, over a 256 MiB budget.
const CHILDREN_HOLD_MEMORY: &str = r#"
import os, time
kids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(100 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
time.sleep(10)
return "held"
"#;

/// Two children spinning: 2 s of CPU per second of wall clock.
const CHILDREN_SPIN: &str = r#"
import os, time
for _ in range(2):
    if os.fork() == 0:
        while True:
            pass
time.sleep(20)
return "spun"
"#;

fn isolations() -> Vec<Isolation> {
    let mut out = vec![Isolation::Process];
    if pycage_sandbox::probe().missing().is_empty() {
        out.push(Isolation::Sandbox);
    } else {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_is_bounded_across_all_the_sessions_processes() {
    for isolation in isolations() {
        let config = RuntimeConfig {
            isolation,
            address_space_bytes: 256 << 20,
            cpu_seconds: 2,
            wall_time: Duration::from_secs(30),
            ..RuntimeConfig::default()
        };
        let rt = Runtime::new(config).unwrap();
        let s = rt.session(SessionOptions::default()).unwrap();
        let r = s.run(CHILDREN_HOLD_MEMORY).await.unwrap();
        let e = r.error.as_ref().unwrap_or_else(|| panic!("{isolation:?}: {r:?}"));
        assert_eq!(e.kind, FailureKind::WorkerExit, "{isolation:?}: {e:?}");
        assert!(e.message.contains("memory budget"), "{isolation:?}: {}", e.message);
        assert!(s.ended().is_some());

        let s = rt.session(SessionOptions::default()).unwrap();
        let r = s.run(CHILDREN_SPIN).await.unwrap();
        let e = r.error.as_ref().unwrap_or_else(|| panic!("{isolation:?}: {r:?}"));
        assert_eq!(e.kind, FailureKind::Timeout, "{isolation:?}: {e:?}");
        assert!(e.message.contains("CPU budget"), "{isolation:?}: {}", e.message);
        rt.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_between_cells_ends_the_session() {
    for isolation in isolations() {
        let rt = Runtime::new(RuntimeConfig { isolation, ..RuntimeConfig::default() }).unwrap();
        let options = SessionOptions { idle_cpu: Duration::from_secs(1), ..SessionOptions::default() };
        let s = rt.session(options).unwrap();
        // A cell leaves a thread spinning after its own end.
        let spin = "import threading\ndef spin():\n    while True:\n        pass\nthreading.Thread(target=spin, daemon=True).start()\n1";
        let r = s.run(spin).await.unwrap();
        assert!(r.error.is_none(), "{isolation:?}: {r:?}");
        let mut waited = Duration::ZERO;
        while s.ended().is_none() && waited < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += Duration::from_millis(100);
        }
        let why = s.ended().unwrap_or_else(|| panic!("{isolation:?}: the session kept spinning"));
        assert!(why.contains("of CPU between runs"), "{isolation:?}: {why}");
        let e = s.run("2").await.unwrap_err();
        assert!(matches!(e, SessionError::Ended(_)), "{e:?}");
        rt.shutdown().await;
    }
}

/// Issue 41: cells sent back to back, each shorter than the watch's
/// period, that each keep 24 MiB more in a global: the session ends at the
/// cell that takes it over its 64 MiB budget (before, 20 such cells held
/// 497 MiB with no error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_cells_cannot_outgrow_the_memory_budget() {
    for isolation in isolations() {
        let rt = Runtime::new(RuntimeConfig { isolation, address_space_bytes: 64 << 20, ..RuntimeConfig::default() })
            .unwrap();
        let s = rt.session(SessionOptions::default()).unwrap();
        assert!(s.run("held = []").await.unwrap().error.is_none());
        let mut ended_at = None;
        for cell in 1..=20 {
            let r = s.run("held.append(b'x' * (24 << 20))\nlen(held)").await.unwrap();
            if let Some(e) = &r.error {
                assert_eq!(e.kind, FailureKind::WorkerExit, "{isolation:?}: {e:?}");
                assert!(e.message.contains("memory budget"), "{isolation:?}: {}", e.message);
                assert!(r.value.is_none());
                ended_at = Some(cell);
                break;
            }
        }
        let cell = ended_at.unwrap_or_else(|| panic!("{isolation:?}: 20 cells of 24 MiB fit a 64 MiB budget"));
        assert!(cell <= 3, "{isolation:?}: the session held {} MiB before it ended", cell * 24);
        assert!(s.ended().is_some());
        let next = s.run("1").await;
        assert!(matches!(next, Err(SessionError::Ended(_))), "{isolation:?}: {next:?}");
        rt.shutdown().await;
    }
}
