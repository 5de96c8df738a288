//! No run can stop the others by stopping the zygote. In process isolation
//! a run shares the zygote's uid and can signal it; a zygote that stops
//! answering while a request waits is detected, killed and replaced, and
//! the runs waiting on it are served by its successor, each within its own
//! wall clock. (Sandboxed runs cannot see or signal the zygote: another
//! uid, another PID namespace; the hostile suite checks that.)
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use pycage_runtime::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_stops_its_zygote_does_not_stop_the_others() {
    let config = RuntimeConfig {
        isolation: Isolation::Process,
        spawn: SpawnMode::Zygote,
        pool_size: 1,
        wall_time: Duration::from_secs(5),
        ..RuntimeConfig::default()
    };
    let rt = Runtime::new(config).unwrap();
    let first = rt.zygote_pid();
    let r = rt
        .run(RunRequest::new("import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nreturn os.getppid()"))
        .await
        .unwrap();
    assert!(r.error.is_none(), "{r:?}");
    let stopped = r.value.unwrap().to_canonical_string();
    assert_eq!(Some(stopped.parse::<u32>().unwrap()), first.or(rt.zygote_pid()), "it stopped the serving zygote");
    // Every later run needs a fork from a zygote (the pool holds one child):
    // each settles with its value, inside a bound far below a hang.
    for i in 0..5 {
        let r = tokio::time::timeout(Duration::from_secs(30), rt.run(RunRequest::new(format!("return {i}"))))
            .await
            .expect("a run hung behind the stopped zygote")
            .unwrap();
        assert!(r.error.is_none(), "run {i}: {r:?}");
        assert_eq!(r.value.unwrap().to_canonical_string(), i.to_string());
    }
    let now = rt.zygote_pid().unwrap();
    assert_ne!(now.to_string(), stopped, "the stopped zygote was replaced");
    rt.shutdown().await;
    // The stopped zygote was killed by the host, not left stopped.
    assert!(std::fs::read_to_string(format!("/proc/{stopped}/stat")).map_or(true, |s| !s.contains(") T ")));
}
