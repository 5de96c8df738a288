//! Command-binding slots are shared fairly: one run gathering a thousand
//! calls to a slow command cannot starve another run's single call.

use std::time::Duration;

use pycage_bindings::Bindings;
use pycage_runtime::{CancellationToken, FailureKind, Isolation, RunEvent, RunRequest, Runtime, RuntimeConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gathering_run_does_not_starve_another_runs_command() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bindings.toml");
    std::fs::write(
        &file,
        r#"
[[namespace]]
global = "tools"
[namespace.functions]
slow = { command = ["sh", "-c", "sleep 2; cat"] }
quick = { command = ["cat"] }
"#,
    )
    .unwrap();
    let bindings = Bindings::load(&file).await.unwrap();
    let config = RuntimeConfig {
        isolation: Isolation::Process,
        wall_time: Duration::from_secs(120),
        ..RuntimeConfig::default()
    };
    let rt = Runtime::new(config).unwrap();

    // Run A: a thousand slow calls at once.
    let cancel_a = CancellationToken::new();
    let request = RunRequest {
        program: "import asyncio\nr = await asyncio.gather(*(tools.slow(i=i) for i in range(1000)))\nreturn len(r)"
            .into(),
        bindings: bindings.namespaces.clone(),
        cancel: Some(cancel_a.clone()),
        ..RunRequest::default()
    };
    let (tx, mut rx) = rt.event_channel();
    let rt_a = rt.clone();
    let a = tokio::spawn(async move { rt_a.run_with_events(request, tx).await });
    // Wait until A has made enough calls to hold every slot it may hold.
    let mut calls = 0;
    while calls < 64 {
        match rx.recv().await {
            Some(RunEvent::Call { .. }) => calls += 1,
            Some(_) => {}
            None => panic!("run A ended early"),
        }
    }
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });

    // Run B: one quick call. It gets a slot while A still waits for its
    // first slow calls to finish (they sleep 2 s each).
    let request = RunRequest {
        program: "return await tools.quick(x=1)".into(),
        bindings: bindings.namespaces.clone(),
        ..RunRequest::default()
    };
    let b = rt.run(request).await.unwrap();
    assert!(b.error.is_none(), "{b:?}");
    assert_eq!(b.value.unwrap().to_canonical_string(), r#"{"x":1}"#);
    assert!(!a.is_finished(), "B finished while A's gather was still in flight");

    cancel_a.cancel();
    let a = a.await.unwrap().unwrap();
    assert_eq!(a.error.unwrap().kind, FailureKind::Abort);
    drain.await.unwrap();
    rt.shutdown().await;
    bindings.close().await;
}
