//! Shutdown with sandboxed runs in flight leaves no live process behind:
//! the runs' children, their sandbox shells and the pool's. One test in its
//! own binary, so this process's children are only these runs'.

use pycage_runtime::*;

mod common;

/// This process's children that are not zombies: `pid state` for each.
fn live_children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.get(1) == Some(&me.as_str()) && fields.first() != Some(&"Z") {
            out.push(format!("{} {}", e.file_name().to_string_lossy(), fields.first().unwrap_or(&"?")));
        }
    }
    out
}

/// The contract: `shutdown` returns once every process it started is gone,
/// in sandbox isolation too, where each run and each pooled child has a
/// shell (a supervisor and the run's init, this process's children) and
/// the pool is still building shells when the runs start. Shells dropped
/// rather than stopped are reaped by the reaper thread, which shutdown
/// waits for; runs aborted by shutdown start no refill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_sandboxed_runs_in_flight_leaves_no_process() {
    for round in 0..3 {
        let rt = Runtime::new(RuntimeConfig { isolation: Isolation::Sandbox, ..RuntimeConfig::default() }).unwrap();
        // No run first: the pool is still building its shells when the
        // runs start, and when shutdown comes.
        let runs = common::sleeping_runs(&rt, 4).await;
        assert!(live_children().len() >= 4, "round {round}: the runs' shells are this process's children");
        rt.shutdown().await;
        assert_eq!(live_children(), Vec::<String>::new(), "round {round}");
        for r in runs {
            assert_eq!(r.await.unwrap().error.unwrap().kind, FailureKind::Abort);
        }
    }
}
