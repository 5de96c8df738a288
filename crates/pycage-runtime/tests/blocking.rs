//! Runs driven on a blocking caller's thread (`pycage_runtime::block_on`):
//! the child's socket is watched by that thread, not the reactor, and a
//! run or session moves between the two without losing a frame.
mod common;

use std::time::Duration;

use common::*;
use pycage_runtime::*;

/// A multi-thread tokio runtime, its handle, and a pycage runtime made on it.
fn start() -> (tokio::runtime::Runtime, tokio::runtime::Handle, Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let h = rt.handle().clone();
    let runtime = block_on(&h, async { runtime() });
    (rt, h, runtime)
}

#[test]
fn runs_with_calls_logs_budgets_and_cancels_are_the_same_from_a_blocking_caller() {
    let (_rt, h, runtime) = start();
    let r = block_on(&h, run_ns(&runtime, "print('a')\nx = await tools.echo(41)\nreturn x + 1", vec![echo_ns()]));
    assert_eq!(value(&r), "42");
    assert_eq!(r.logs, vec!["a".to_string()]);
    // Many calls at once: the socket is written and read in turns.
    let gather = "import asyncio\nrs = await asyncio.gather(*[tools.echo(i) for i in range(500)])\nreturn sum(rs)";
    assert_eq!(value(&block_on(&h, run_ns(&runtime, gather, vec![echo_ns()]))), "124750");
    // A frame bigger than the socket's buffer, both ways.
    let big = "x = await tools.echo('y' * 3_000_000)\nreturn len(x)";
    assert_eq!(value(&block_on(&h, run_ns(&runtime, big, vec![echo_ns()]))), "3000000");
    let mut req = RunRequest::new("import time\ntime.sleep(30)");
    req.limits.wall_time = Some(Duration::from_millis(300));
    let r = block_on(&h, async { runtime.run(req).await.unwrap() });
    assert_eq!(failure(&r).0, FailureKind::Timeout);
    let cancel = CancellationToken::new();
    let mut req = RunRequest::new("import time\ntime.sleep(30)");
    req.cancel = Some(cancel.clone());
    h.spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let r = block_on(&h, async { runtime.run(req).await.unwrap() });
    assert_eq!(failure(&r).0, FailureKind::Abort);
    // A child that dies without `done`: its end of the socket closes.
    let r = block_on(&h, run(&runtime, "import os\nos._exit(3)"));
    assert_eq!(failure(&r).0, FailureKind::WorkerExit);
    block_on(&h, runtime.shutdown());
}

#[test]
fn a_run_handed_to_a_worker_mid_way_finishes_there() {
    let (_rt, h, runtime) = start();
    let runtime = std::sync::Arc::new(runtime);
    let started = std::sync::Arc::clone(&runtime);
    let r = block_on(&h, async move {
        let mut run = Box::pin(async move {
            run_ns(&started, "import time\ntime.sleep(0.2)\nreturn await tools.echo(7)", vec![echo_ns()]).await
        });
        // Polled here until the child is busy, then moved, as the package
        // does when Python code must run on the caller's thread.
        tokio::select! {
            biased;
            r = &mut run => return r,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        forget_wait_hint();
        tokio::spawn(run).await.unwrap()
    });
    assert_eq!(value(&r), "7");
    block_on(&h, runtime.shutdown());
}

#[test]
fn a_sessions_cells_may_come_from_blocking_and_async_callers_in_turn() {
    let (rt, h, runtime) = start();
    let s = block_on(&h, async { runtime.session(SessionOptions::default().with_namespace(echo_ns())).unwrap() });
    let s = std::sync::Arc::new(s);
    assert_eq!(value(&block_on(&h, async { s.run("x = 0").await.unwrap() })), "<none>");
    for i in 1..=6 {
        let program = "x = await tools.echo(x + 1)\nx";
        let r = if i % 2 == 0 {
            block_on(&h, async { s.run(program).await.unwrap() })
        } else {
            let s = std::sync::Arc::clone(&s);
            rt.block_on(async move { tokio::spawn(async move { s.run(program).await.unwrap() }).await.unwrap() })
        };
        assert_eq!(value(&r), i.to_string());
    }
    block_on(&h, runtime.shutdown());
}

#[test]
fn runs_polled_by_one_future_each_wake_the_caller() {
    let (_rt, h, runtime) = start();
    let started = std::time::Instant::now();
    let quick = block_on(&h, async {
        let mut slow = RunRequest::new("import time\ntime.sleep(20)");
        slow.limits.wall_time = Some(Duration::from_secs(25));
        let slow = runtime.run(slow);
        let quick = run(&runtime, "import time\ntime.sleep(0.2)\nreturn 1");
        // Both runs wait on their sockets from this one thread: the quick
        // one's `done` must wake it, not only the slow one's.
        tokio::select! {
            // The slow run is polled last: its hint must not replace the
            // quick one's.
            biased;
            r = quick => r,
            r = slow => panic!("the slow run ended first: {r:?}"),
        }
    });
    assert_eq!(value(&quick), "1");
    assert!(started.elapsed() < Duration::from_secs(15), "the quick run waited for the slow one");
    block_on(&h, runtime.shutdown());
}
