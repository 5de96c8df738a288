//! Trivial runs beside a heavy cleanup: does removing what one run left
//! (300,000 files) slow the others? Run-directory removal happens on
//! tokio's blocking pool, so the runs beside it should see the CPU it takes
//! on a 2-core machine, not a stalled async worker.
//!
//! `cargo bench -p pycage-runtime --bench cleanup_beside` prints, for
//! trivial runs one at a time (5 ms apart), p50 and p99 without the heavy
//! run (the floor, measured in the same invocation) and while its directory
//! is being removed, and how long the removal took.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use pycage_runtime::*;

const FILES: usize = 300_000;
const HEAVY: &str = r#"
import os
os.mkdir("many")
for i in range(300):
    d = f"many/{i}"
    os.mkdir(d)
    for j in range(1000):
        os.close(os.open(f"{d}/{j}", os.O_CREAT | os.O_WRONLY, 0o600))
return len(os.listdir("many"))
"#;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn trivial_runs(rt: &Runtime, until: impl Fn(usize) -> bool) -> Vec<Duration> {
    let mut out = Vec::new();
    while !until(out.len()) {
        let start = Instant::now();
        let r = rt.run(RunRequest::new("return 1")).await.unwrap();
        out.push(start.elapsed());
        assert!(r.error.is_none(), "{r:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    out.sort();
    out
}

fn report(label: &str, d: &[Duration]) {
    println!(
        "{label:<34} n={:<4} p50 {:>7.3} ms  p99 {:>7.3} ms",
        d.len(),
        percentile(d, 0.5).as_secs_f64() * 1e3,
        percentile(d, 0.99).as_secs_f64() * 1e3
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let temp = tempfile::tempdir().unwrap();
        let config = RuntimeConfig {
            isolation: Isolation::Process,
            run_dir_parent: Some(temp.path().to_path_buf()),
            wall_time: Duration::from_secs(300),
            cpu_seconds: 300,
            ..RuntimeConfig::default()
        };
        let runtime = Runtime::new(config).unwrap();
        trivial_runs(&runtime, |n| n >= 20).await; // warm up
        let floor = trivial_runs(&runtime, |n| n >= 300).await;
        report("trivial runs alone (floor)", &floor);

        let heavy = runtime.run(RunRequest::new(HEAVY)).await.unwrap();
        assert_eq!(heavy.value.map(|v| v.to_canonical_string()), Some("300".into()), "{:?}", heavy.error);
        // The heavy run has settled: its directory is being removed now.
        let removing = Instant::now();
        let left = |dir: &std::path::Path| {
            std::fs::read_dir(dir)
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("pycage-run") && e.path().join("many").exists())
        };
        let parent = temp.path().to_path_buf();
        let beside = trivial_runs(&runtime, |n| n >= 20 && !left(&parent)).await;
        let removal = removing.elapsed();
        report("trivial runs beside the cleanup", &beside);
        println!("removal of {FILES} files took about {:.2} s (trivial runs ran meanwhile)", removal.as_secs_f64());
        runtime.shutdown().await;
    });
}
