//! The runs `pycage bench` times: trivial runs one at a time and in a
//! closed loop, runs at a given concurrency, timed binding calls, sessions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pycage_runtime::{Binding, Namespace, RunRequest, Runtime};

use crate::bench::failures::in_words;
use crate::bench::measure::{busy, CpuSplit, Samples};

/// Pause before each latency sample.
pub(crate) const LATENCY_GAP: Duration = Duration::from_millis(20);
/// The longest a measurement waits for its runtime to be idle (pool full,
/// settled runs reaped) before it goes on regardless.
pub(crate) const IDLE_WAIT: Duration = Duration::from_secs(10);

pub(crate) fn echo_tools() -> Namespace {
    Namespace::new("tools").with_function("echo", Binding::new(|a| async move { Ok(a) }))
}

/// One trivial run, timed; a failure in words.
pub(crate) async fn trivial(runtime: &Runtime) -> Result<Duration, String> {
    let t = Instant::now();
    let r = runtime.run(RunRequest::new("return 1")).await.map_err(|e| e.to_string())?;
    let d = t.elapsed();
    match &r.error {
        None => Ok(d),
        Some(e) => Err(in_words(e)),
    }
}

/// The integer a program returned, as nanoseconds.
pub(crate) async fn timed_inside(runtime: &Runtime, program: &str) -> Result<Duration, String> {
    let r = runtime.run(RunRequest::new(program).with_namespace(echo_tools())).await.map_err(|e| e.to_string())?;
    if let Some(e) = &r.error {
        return Err(in_words(e));
    }
    let ns = r.value.as_ref().and_then(|v| v.root().as_number()).and_then(|n| n.as_u64()).unwrap_or(0);
    Ok(Duration::from_nanos(ns))
}

/// What a stretch of runs at one concurrency did: blocks of it add up
/// ([`Throughput::plus`]).
#[derive(Debug, Default)]
pub(crate) struct Throughput {
    /// Runs that succeeded.
    pub ok: usize,
    /// Seconds the runs took, in all.
    pub wall: f64,
    /// The machine's busy CPU meanwhile, in core-seconds.
    pub busy: f64,
    /// The failures, in words.
    pub errors: Vec<String>,
}

impl Throughput {
    pub(crate) fn plus(mut self, other: Throughput) -> Throughput {
        self.ok += other.ok;
        self.wall += other.wall;
        self.busy += other.busy;
        self.errors.extend(other.errors);
        self
    }

    /// Runs that succeeded, per second.
    pub(crate) fn rate(&self) -> f64 {
        self.ok as f64 / self.wall.max(1e-9)
    }

    /// The share of the machine's cores that were busy (0 to 1: below 1,
    /// runs waited on something other than the CPU).
    pub(crate) fn cores_busy(&self) -> f64 {
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        (self.busy / (self.wall * cores).max(1e-9)).min(1.0)
    }
}

/// `total` tries with `concurrency` runs in flight.
pub(crate) async fn throughput(runtime: &Runtime, concurrency: usize, total: usize) -> Throughput {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let busy_before = busy();
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let runtime = runtime.clone();
        let next = next.clone();
        tasks.spawn(async move {
            let (mut ok, mut errors) = (0usize, Vec::new());
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                match trivial(&runtime).await {
                    Ok(_) => ok += 1,
                    Err(e) => errors.push(e),
                }
            }
            (ok, errors)
        });
    }
    let (mut ok, mut errors) = (0usize, Vec::new());
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok((n, e)) => {
                ok += n;
                errors.extend(e);
            }
            Err(e) => errors.push(format!("a bench task failed: {e}")),
        }
    }
    let wall = t.elapsed().as_secs_f64();
    Throughput { ok, wall, busy: busy().saturating_sub(busy_before).as_secs_f64(), errors }
}

/// Back-to-back trivial runs, one at a time (the pool cannot keep up: its
/// refill is on the loop's path): their latencies, and the CPU they cost
/// together on every side (`None` if the zygote or the shell helper was
/// replaced meanwhile: the figures would miss a process).
pub(crate) async fn closed_loop(runtime: &Runtime, n: usize) -> (Samples, Option<CpuSplit>, Vec<String>) {
    let zygote = runtime.zygote_pid();
    // The helper has started by now (the pool's shells), and serves on.
    let helper = runtime.shell_helper_pid();
    runtime.wait_idle(IDLE_WAIT).await;
    let before = CpuSplit::now(zygote, helper);
    let mut samples = Samples::default();
    let mut errors = Vec::new();
    for _ in 0..n {
        match trivial(runtime).await {
            Ok(d) => samples.push(d),
            Err(e) => errors.push(e),
        }
    }
    // Let the last refill and reaps finish: they belong to these runs.
    runtime.wait_idle(IDLE_WAIT).await;
    let after = CpuSplit::now(zygote, helper);
    let same_zygote = runtime.zygote_pid() == zygote && runtime.shell_helper_pid() == helper;
    let spent = (same_zygote && n > 0).then(|| after.per_run(&before, 1));
    (samples, spent, errors)
}

/// A session with `x = 0` set, ready for the cell loop.
pub(crate) async fn open_session(runtime: &Runtime) -> Result<pycage_runtime::Session, String> {
    let session = runtime.session(pycage_runtime::SessionOptions::default()).map_err(|e| e.to_string())?;
    let first = session.run("x = 0").await;
    let failed = match &first {
        Ok(r) => r.error.as_ref().map(in_words),
        Err(e) => Some(e.to_string()),
    };
    match failed {
        None => Ok(session),
        Some(why) => {
            session.close().await;
            Err(why)
        }
    }
}
