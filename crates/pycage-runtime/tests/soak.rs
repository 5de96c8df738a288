//! Soak: many runs through one runtime's zygote, mixing every outcome, then
//! no growth in descriptors, processes, run directories or zygotes, and the
//! host's RSS within a stated bound.
//!
//! Ignored by default (it takes about a minute here):
//!
//! ```sh
//! cargo test -p pycage-runtime --test soak -- --ignored --nocapture
//! ```
//!
//! `PYCAGE_SOAK_SEQUENTIAL` and `PYCAGE_SOAK_CONCURRENT` override the run
//! counts (10,000 and 2,000).
#![allow(clippy::print_stdout)] // the soak reports its figures with --nocapture

mod common;

use std::time::{Duration, Instant};

use common::*;
use pycage_runtime::*;

/// Host RSS may grow by at most this much over the soak: allocator caches
/// and tokio's worker state, not per-run leftovers (a leak of even 1 KiB
/// per run would be 12 MB here).
const RSS_GROWTH_BOUND_KIB: u64 = 8 * 1024;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Direct children of this process, and of each of those (zygotes and
/// their children).
fn descendants() -> Vec<u32> {
    let children = |pid: u32| -> Vec<u32> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
                    .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut all = Vec::new();
    let mut todo = children(std::process::id());
    while let Some(pid) = todo.pop() {
        all.push(pid);
        todo.extend(children(pid));
    }
    all
}

fn count(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The program for run `i` and whether it should be cancelled.
fn program(i: usize) -> (&'static str, bool) {
    match i % 100 {
        0 => ("import time\ntime.sleep(10)", true), // cancelled
        1 => ("while True: pass", false),           // wall-clock timeout
        2 => ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", false), // killed
        3 => ("import os\nos._exit(3)", false),     // worker-exit
        4 => ("return (1, {2})", false),            // invalid-output
        5..=19 => ("raise ValueError('soak')", false), // exception
        20..=29 => ("return await tools.echo([1, 'two', 3.5])", false),
        30..=34 => ("print('x' * 100)\nreturn 'logged'", false),
        _ => ("return 1", false),
    }
}

/// The run's outcome: `ok` or the failure kind.
async fn one(rt: &Runtime, i: usize) -> String {
    let (code, cancel) = program(i);
    let token = CancellationToken::new();
    let request = RunRequest::new(code).with_namespace(echo_ns()).with_cancel(token.clone());
    if cancel {
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            token.cancel();
        });
        let r = rt.run(request).await.unwrap();
        canceller.await.unwrap();
        return r.error.map(|e| e.kind.to_string()).unwrap_or_else(|| "ok".into());
    }
    let r = rt.run(request).await.unwrap();
    r.error.map(|e| e.kind.to_string()).unwrap_or_else(|| "ok".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: about a minute; run with --ignored"]
async fn soak_through_the_zygote() {
    let parent = tempfile::tempdir().unwrap();
    let fds_before = open_fds();
    let rt = runtime_with(|c| {
        c.spawn = SpawnMode::Zygote;
        c.run_dir_parent = Some(parent.path().to_path_buf());
        c.wall_time = Duration::from_millis(300);
        c.zygote_max_runs = 3000;
        c.max_concurrent_runs = 16;
    });
    let sequential = count("PYCAGE_SOAK_SEQUENTIAL", 10_000);
    let concurrent = count("PYCAGE_SOAK_CONCURRENT", 2_000);
    // Warm up, then take the baseline RSS.
    for i in 0..200 {
        one(&rt, i).await;
    }
    let rss_before = rss_kib();
    let started = Instant::now();
    let mut kinds = std::collections::BTreeMap::new();
    for i in 0..sequential {
        *kinds.entry(one(&rt, i).await).or_insert(0usize) += 1;
    }
    let seq_time = started.elapsed();
    let started = Instant::now();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let rt = rt.clone();
        let next = next.clone();
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= concurrent {
                    return;
                }
                one(&rt, i).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let conc_time = started.elapsed();
    let rss_after = rss_kib();
    println!(
        "soak: {sequential} sequential runs in {:.1} s, {concurrent} at concurrency 16 in {:.1} s; outcomes {kinds:?}; \
         host RSS {rss_before} -> {rss_after} KiB",
        seq_time.as_secs_f64(),
        conc_time.as_secs_f64()
    );
    for kind in ["ok", "abort", "timeout", "worker-exit", "invalid-output", "exception"] {
        assert!(kinds.contains_key(kind), "no {kind} in {kinds:?}");
    }
    // Settled runs' children are reaped in the background; give it a moment,
    // then only the pool, the zygote and perhaps a retiring one are left.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let alive = descendants();
    assert!(alive.len() <= 2 + rt.config().pool_size + 2, "processes piling up: {alive:?}");
    assert!(rss_after <= rss_before + RSS_GROWTH_BOUND_KIB, "host RSS grew from {rss_before} to {rss_after} KiB");
    // Children of settled runs are reaped in the background; shutdown waits.
    rt.shutdown().await;
    assert_eq!(descendants(), Vec::<u32>::new(), "processes left after shutdown");
    assert_eq!(open_fds(), fds_before, "descriptors leaked");
    let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "run directories left: {} (first {:?})", left.len(), left.first());
}
