//! What the host holds for a hostile run is bounded: a program that floods
//! raw `call` frames and never reads a reply starts at most
//! `max_calls_in_flight` binding calls, settles within its wall clock, and
//! the host's memory stays flat; a queued run cancelled before it starts
//! settles at once. Each case runs in both isolations and both spawn modes.
//!
//! One test per binary process, run one case at a time: the host's RSS is
//! this process's, so nothing else may allocate meanwhile.

// The figures go to stderr for the closing notes and BENCHMARKS.md.
#![allow(clippy::print_stderr)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pycage_runtime::*;

/// The bound this test states for host memory growth under the flood.
const RSS_BOUND: u64 = 16 << 20;
const CAP: usize = 64;
const FLOOD: &str = r#"
import os
os.set_blocking(3, True)
frame = '{"type":"call","id":%d,"global":"tools","name":"count","args":{}}\n'
print("flooding", flush=True)
for i in range(200000):
    os.write(3, (frame % i).encode())
"#;

fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

fn combos() -> Vec<(Isolation, SpawnMode)> {
    let mut out = vec![(Isolation::Process, SpawnMode::Zygote), (Isolation::Process, SpawnMode::Exec)];
    if pycage_sandbox::probe().missing().is_empty() {
        out.push((Isolation::Sandbox, SpawnMode::Zygote));
        out.push((Isolation::Sandbox, SpawnMode::Exec));
    } else if std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_some() {
        panic!("the sandbox is unavailable here: {:?}", pycage_sandbox::probe().missing());
    }
    out
}

#[test]
fn hostile_runs_cannot_make_the_host_hold_or_start_work_without_bound() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for (isolation, spawn) in combos() {
        rt.block_on(call_flood(isolation, spawn));
        rt.block_on(queued_cancel(isolation, spawn));
    }
}

async fn call_flood(isolation: Isolation, spawn: SpawnMode) {
    let label = format!("{isolation:?}/{spawn:?}");
    let config = RuntimeConfig {
        isolation,
        spawn,
        wall_time: Duration::from_secs(8),
        max_calls_in_flight: CAP,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::new(config).unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&started);
    let ns = Namespace::new("tools").with_function(
        "count",
        Binding::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(JsonValue::null()) }
        }),
    );
    // Warm up (the pool, the zygote), then measure from here.
    let warm = rt.run(RunRequest::new("return 1")).await.unwrap();
    assert!(warm.error.is_none(), "{label}: {warm:?}");
    let before = rss();
    let peak = Arc::new(AtomicU64::new(before));
    let stop = tokio_util::sync::CancellationToken::new();
    let sampler = {
        let (peak, stop) = (Arc::clone(&peak), stop.clone());
        std::thread::spawn(move || {
            while !stop.is_cancelled() {
                peak.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let result = rt.run(RunRequest::new(FLOOD).with_namespace(ns)).await.unwrap();
    stop.cancel();
    sampler.join().unwrap();
    let grew = peak.load(Ordering::Relaxed).saturating_sub(before);
    let error = result.error.as_ref().unwrap_or_else(|| panic!("{label}: the flood succeeded: {result:?}"));
    assert_eq!(error.kind, FailureKind::Timeout, "{label}: {error:?}");
    assert!(error.message.contains("wall-clock"), "{label}: {}", error.message);
    assert_eq!(result.logs.first().map(String::as_str), Some("flooding"), "{label}: logs before the attack are kept");
    let calls = started.load(Ordering::SeqCst);
    assert!((1..=CAP).contains(&calls), "{label}: the binding ran {calls} times, the cap is {CAP}");
    assert!(grew < RSS_BOUND, "{label}: host RSS grew by {} MiB under the flood", grew >> 20);
    eprintln!("{label}: flood settled as {}; binding ran {calls} times; host RSS +{} KiB", error.kind, grew >> 10);
    rt.shutdown().await;
}

/// A run queued behind `max_concurrent_runs` and cancelled settles as
/// `abort` at once, and gives its place up.
async fn queued_cancel(isolation: Isolation, spawn: SpawnMode) {
    let label = format!("{isolation:?}/{spawn:?}");
    let config = RuntimeConfig { isolation, spawn, max_concurrent_runs: 1, ..RuntimeConfig::default() };
    let rt = Runtime::new(config).unwrap();
    let (tx, mut rx) = rt.event_channel();
    let holder = {
        let rt = rt.clone();
        tokio::spawn(async move {
            rt.run_with_events(RunRequest::new("print('up', flush=True)\nimport time\ntime.sleep(30)"), tx).await
        })
    };
    while !matches!(rx.recv().await, Some(RunEvent::Log(l)) if l == "up") {}
    // The only place is taken: this run waits in the queue.
    let cancel = CancellationToken::new();
    let queued = {
        let rt = rt.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { rt.run(RunRequest::new("return 2").with_cancel(cancel)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!queued.is_finished(), "{label}: the second run was admitted");
    let start = std::time::Instant::now();
    cancel.cancel();
    let r = queued.await.unwrap().unwrap();
    let took = start.elapsed();
    assert_eq!(r.error.as_ref().map(|e| e.kind), Some(FailureKind::Abort), "{label}: {r:?}");
    assert!(!holder.is_finished(), "{label}: the cancel settled while the holder still runs");
    eprintln!("{label}: a queued cancel settled in {} us", took.as_micros());
    rt.shutdown().await;
    let held = holder.await.unwrap().unwrap();
    assert_eq!(held.error.map(|e| e.kind), Some(FailureKind::Abort));
}
