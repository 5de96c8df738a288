//! `pycage bench`: whole-run figures on this machine, each beside its floor
//! measured in the same invocation.
//!
//! Shared machines are noisy, so a figure alone says little; its ratio to
//! a floor sampled in the same loop (interleaved: floor, run, floor, run)
//! survives load that comes and goes. Floors:
//!
//! - `python -I -c pass` and `python -I -c "import asyncio, json"`, the
//!   real interpreter binary (never a shim), spawned with a scrubbed
//!   environment and waited for: what a fresh interpreter per run costs;
//! - one JSON line echoed by a Python child over a pipe (decoded and
//!   re-encoded with `json`): the floor of a binding call's round trip.
//!
//! Rows: trivial-run latency (p50/p95/p99) for every spawn mode and
//! isolation this machine can run, one run at a time, 20 ms apart; runs per second at concurrency 1, 2, 4
//! and 16 through the zygote; a trivial cell in a warm session; a binding
//! call's round trip; `asyncio.gather` throughput; the host's RSS and the
//! private memory of an idle pooled child.
//!
//! `--plot PYTHON` measures showing a matplotlib chart instead
//! ([`plot`]).
//!
//! A run that fails is left out of the figures and counted for its case
//! (which row, how many of how many tries), with its first failure in
//! words (`timeout: the wall-clock budget ...`); the report is printed
//! whatever failed, and the command then exits 1.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use pycage_protocol::JsonBuilder;
use pycage_runtime::{Binding, Isolation, Namespace, RunRequest, Runtime, RuntimeConfig, SpawnMode};

use crate::output;

mod plot;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Interleaved iterations per latency row (zygote rows take 10 runs each).
    #[arg(long, value_name = "N", default_value_t = 30)]
    iterations: usize,
    /// Python interpreter (CPython >= 3.10); default: `python3` on PATH.
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// Also draw the latency figures as an SVG bar chart (the README's).
    #[arg(long, value_name = "FILE.svg")]
    svg: Option<PathBuf>,
    /// Wall-clock budget of each run, in milliseconds (default: a run's 60000).
    #[arg(long, value_name = "N")]
    wall_ms: Option<u64>,
    /// Instead: what bringing this virtual environment costs (it needs
    /// numpy and pandas): a fresh `import numpy, pandas` run with
    /// `--preload` and without, a PEP 723 dependency's first and later
    /// runs, idle pooled children's private memory.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["python", "svg"])]
    venv: Option<PathBuf>,
    /// Instead: a run that shows a 640x480 matplotlib line plot, beside the
    /// same plot rendered by a plain python with matplotlib imported. PATH
    /// is a Python that has matplotlib (a `venv --copies`' bin/python).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["python", "svg", "venv"])]
    plot: Option<PathBuf>,
}

/// Failed tries per case: how many of how many, and the first failure in
/// words. Cases keep the order they first appeared in.
#[derive(Debug, Default)]
struct Failures(Vec<Tally>);

#[derive(Debug)]
struct Tally {
    case: String,
    tried: usize,
    failed: usize,
    first: Option<String>,
}

impl Failures {
    fn tally(&mut self, case: &str) -> &mut Tally {
        if let Some(i) = self.0.iter().position(|t| t.case == case) {
            return &mut self.0[i];
        }
        self.0.push(Tally { case: case.to_owned(), tried: 0, failed: 0, first: None });
        let last = self.0.len() - 1;
        &mut self.0[last]
    }

    /// Counts one try of `case`; returns its value when it succeeded.
    fn note<T>(&mut self, case: &str, outcome: Result<T, String>) -> Option<T> {
        let t = self.tally(case);
        t.tried += 1;
        match outcome {
            Ok(v) => Some(v),
            Err(why) => {
                t.failed += 1;
                t.first.get_or_insert(why);
                None
            }
        }
    }

    /// `n` tries of `case`, of which `errors` failed.
    fn note_many(&mut self, case: &str, n: usize, errors: Vec<String>) {
        let t = self.tally(case);
        t.tried += n;
        t.failed += errors.len();
        if t.first.is_none() {
            t.first = errors.into_iter().next();
        }
    }

    fn any(&self) -> bool {
        self.0.iter().any(|t| t.failed > 0)
    }

    fn failed(&self) -> impl Iterator<Item = &Tally> {
        self.0.iter().filter(|t| t.failed > 0)
    }

    /// The report's "failed runs" lines (none when every run succeeded).
    fn text(&self) -> Vec<String> {
        if !self.any() {
            return Vec::new();
        }
        let mut l = vec![String::new(), "failed runs (left out of the figures above)".into()];
        for t in self.failed() {
            let first = t.first.as_deref().unwrap_or("");
            l.push(format!("  {}: {} of {} failed; first: {first}", t.case, t.failed, t.tried));
        }
        l
    }

    /// The report's `"failures"` member: one object per failing case.
    fn json(&self, b: &mut JsonBuilder) -> Result<(), pycage_protocol::BuildError> {
        b.key("failures")?;
        b.begin_array()?;
        for t in self.failed() {
            b.begin_object()?;
            b.key("case")?;
            b.string(&t.case)?;
            b.key("tried")?;
            b.number(&t.tried.to_string())?;
            b.key("failed")?;
            b.number(&t.failed.to_string())?;
            b.key("first")?;
            b.string(t.first.as_deref().unwrap_or(""))?;
            b.end()?;
        }
        b.end()
    }
}

/// A run's failure in words: `kind: message`.
fn in_words(e: &pycage_runtime::RunFailure) -> String {
    format!("{}: {}", e.kind, e.message)
}

/// Latency samples and their summary.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples(Vec<Duration>);

impl Samples {
    pub(crate) fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn quantile(&self, q: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).copied().unwrap_or_default()
    }

    pub(crate) fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Pause before each latency sample.
const LATENCY_GAP: Duration = Duration::from_millis(20);
/// The longest a measurement waits for its runtime to be idle (pool full,
/// settled runs reaped) before it goes on regardless.
const IDLE_WAIT: Duration = Duration::from_secs(10);

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Variant {
    spawn: SpawnMode,
    isolation: Isolation,
    runtime: Runtime,
    samples: Samples,
}

impl Variant {
    fn label(&self) -> String {
        format!("{} / {}", self.spawn.as_str(), self.isolation.as_str())
    }
}

/// One floor process: spawned, waited for, timed.
pub(crate) fn floor_run(python: &Path, code: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let status = Command::new(python)
        .args(["-I", "-B", "-c", code])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", python.display()))?;
    anyhow::ensure!(status.success(), "{} -c {code:?} failed: {status}", python.display());
    Ok(t.elapsed())
}

const ECHO_CHILD: &str = "import sys, json\nr = sys.stdin.buffer\nw = sys.stdout\nfor line in r:\n    w.write(json.dumps(json.loads(line), separators=(',', ':')) + '\\n')\n    w.flush()\n";

/// Mean round trip of `n` JSON lines echoed by a Python child over a pipe.
fn pipe_round_trip(python: &Path, n: u32) -> anyhow::Result<Duration> {
    let mut child = Command::new(python)
        .args(["-I", "-B", "-c", ECHO_CHILD])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the pipe echo child")?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        anyhow::bail!("the pipe echo child has no stdio")
    };
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    // One warm-up trip: the child's start is not part of the floor.
    writeln!(stdin, "{{\"type\":\"call\",\"id\":0,\"args\":0}}")?;
    stdout.read_line(&mut line)?;
    let t = Instant::now();
    for i in 0..n {
        line.clear();
        writeln!(stdin, "{{\"type\":\"call\",\"id\":{i},\"global\":\"tools\",\"name\":\"echo\",\"args\":{i}}}")?;
        stdout.read_line(&mut line)?;
    }
    let elapsed = t.elapsed();
    drop(stdin);
    child.wait()?;
    Ok(elapsed / n)
}

fn echo_tools() -> Namespace {
    Namespace::new("tools").with_function("echo", Binding::new(|a| async move { Ok(a) }))
}

/// One trivial run, timed; a failure in words.
async fn trivial(runtime: &Runtime) -> Result<Duration, String> {
    let t = Instant::now();
    let r = runtime.run(RunRequest::new("return 1")).await.map_err(|e| e.to_string())?;
    let d = t.elapsed();
    match &r.error {
        None => Ok(d),
        Some(e) => Err(in_words(e)),
    }
}

/// The integer a program returned, as nanoseconds.
async fn timed_inside(runtime: &Runtime, program: &str) -> Result<Duration, String> {
    let r = runtime.run(RunRequest::new(program).with_namespace(echo_tools())).await.map_err(|e| e.to_string())?;
    if let Some(e) = &r.error {
        return Err(in_words(e));
    }
    let ns = r.value.as_ref().and_then(|v| v.root().as_number()).and_then(|n| n.as_u64()).unwrap_or(0);
    Ok(Duration::from_nanos(ns))
}

/// Runs per second with `concurrency` runs in flight, `total` tries: the
/// rate of runs that succeeded, and the failures in words.
async fn throughput(runtime: &Runtime, concurrency: usize, total: usize) -> (f64, Vec<String>) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
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
    (ok as f64 / t.elapsed().as_secs_f64(), errors)
}

/// CPU time (user + system) of this process, of its reaped children, and
/// of each of `others` (the zygote, the shell helper) with the children it
/// reaped: everything a run costs, on every side (host, sandbox shells,
/// zygote, the run's process).
fn cpu_now(others: &[Option<u32>]) -> Duration {
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    let usage = |who: libc::c_int| {
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a live local of the right type; getrusage only
        // writes through the pointer.
        if unsafe { libc::getrusage(who, &mut u) } != 0 {
            return Duration::ZERO;
        }
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    let host = usage(libc::RUSAGE_SELF) + usage(libc::RUSAGE_CHILDREN);
    let other = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the name: utime(11) stime(12) cutime(13) cstime(14), in ticks.
        let ticks: u64 = (11..=14).filter_map(|i| fields.get(i)?.parse::<u64>().ok()).sum();
        let per_second = rustix::param::clock_ticks_per_second().max(1);
        Some(Duration::from_nanos(ticks.saturating_mul(1_000_000_000 / per_second)))
    };
    host + others.iter().flatten().filter_map(|&pid| other(pid)).sum::<Duration>()
}

/// Back-to-back trivial runs, one at a time (the pool cannot keep up: its
/// refill is on the loop's path): their latencies, and the CPU each run
/// cost on every side, when the zygote was the same throughout.
async fn closed_loop(runtime: &Runtime, n: usize) -> (Samples, Option<Duration>, Vec<String>) {
    let zygote = runtime.zygote_pid();
    // The helper has started by now (the pool's shells), and serves on.
    let helper = runtime.shell_helper_pid();
    let before = cpu_now(&[zygote, helper]);
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
    let after = cpu_now(&[zygote, helper]);
    let same_zygote = runtime.zygote_pid() == zygote && runtime.shell_helper_pid() == helper;
    let per_run = (same_zygote && n > 0).then(|| (after.saturating_sub(before)) / n as u32);
    (samples, per_run, errors)
}

/// `Private_Clean + Private_Dirty` of a process, in KiB.
pub(crate) fn private_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some(field("Private_Clean:")? + field("Private_Dirty:")?)
}

fn rss_kib(pid: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The idle children a zygote holds (its children, read from /proc).
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|t| t.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

impl BenchArgs {
    /// Whether output (misuse included) is JSON.
    pub fn json(&self) -> bool {
        self.json
    }
}

pub fn main(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::tokio_runtime()?;
    // Runs wait on their child's socket on this thread (`pycage_runtime::block_on`).
    pycage_runtime::block_on(rt.handle(), bench(args))
}

async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(venv) = args.venv {
        return crate::bench_env::bench(venv, args.iterations, args.json).await;
    }
    if let Some(python) = args.plot {
        return plot::bench(python, args.iterations, args.wall_ms, args.json).await;
    }
    let iterations = args.iterations.max(3);
    let mut variants = Vec::new();
    let mut unavailable = Vec::new();
    let mut failures = Failures::default();
    for isolation in [Isolation::Process, Isolation::Sandbox] {
        for spawn in [SpawnMode::Zygote, SpawnMode::Exec] {
            let mut config = RuntimeConfig {
                python: args.python.clone(),
                isolation,
                spawn,
                shell_helper: crate::shell_helper(),
                ..RuntimeConfig::default()
            };
            if let Some(ms) = args.wall_ms {
                config.wall_time = Duration::from_millis(ms);
            }
            match Runtime::new(config) {
                Ok(runtime) => {
                    let (effective, why) = runtime.spawn_mode();
                    if effective != spawn {
                        unavailable.push((
                            format!("{} / {}", spawn.as_str(), isolation.as_str()),
                            why.unwrap_or("").to_owned(),
                        ));
                        runtime.shutdown().await;
                        continue;
                    }
                    variants.push(Variant { spawn, isolation, runtime, samples: Samples::default() });
                }
                Err(e) => unavailable.push((format!("{} / {}", spawn.as_str(), isolation.as_str()), e.to_string())),
            }
        }
    }
    let Some(python) = variants.first().map(|v| v.runtime.interpreter().executable.clone()) else {
        anyhow::bail!("no configuration can run here: {unavailable:?}")
    };

    // Warm up: the zygotes start, caches fill.
    for v in &variants {
        for _ in 0..3 {
            let outcome = trivial(&v.runtime).await;
            failures.note(&format!("warm-up, {}", v.label()), outcome);
        }
    }
    let (mut floor_pass, mut floor_import) = (Samples::default(), Samples::default());
    let floor = |code: &str| floor_run(&python, code).map_err(|e| format!("{e:#}"));
    for _ in 0..iterations {
        if let Some(d) = failures.note("floor: python -I -c pass", floor("pass")) {
            floor_pass.push(d);
        }
        if let Some(d) = failures.note("floor: python -I -c \"import asyncio, json\"", floor("import asyncio, json")) {
            floor_import.push(d);
        }
        for v in &mut variants {
            let reps = if v.spawn == SpawnMode::Zygote { 10 } else { 1 };
            for _ in 0..reps {
                // One run at a time, a little apart, as an agent sends them
                // (the pool refills between runs); back-to-back runs are
                // the throughput rows below. The gap after the pool is
                // full lets its newest child finish warming up.
                v.runtime.wait_idle(IDLE_WAIT).await;
                tokio::time::sleep(LATENCY_GAP).await;
                let outcome = trivial(&v.runtime).await;
                if let Some(d) = failures.note(&format!("trivial run, {}", v.label()), outcome) {
                    v.samples.push(d);
                }
            }
        }
    }

    // Throughput, calls and memory through the zygote (process isolation
    // first: it is the one every machine has).
    let zygote_rows: Vec<&Variant> = variants.iter().filter(|v| v.spawn == SpawnMode::Zygote).collect();
    let mut loops = Vec::new();
    for v in &zygote_rows {
        let n = (iterations * 10).max(200);
        let (samples, cpu, errors) = closed_loop(&v.runtime, n).await;
        failures.note_many(&format!("closed loop, {}", v.label()), n, errors);
        loops.push((v.label(), samples, cpu));
    }
    let mut rates = Vec::new();
    for v in &zygote_rows {
        for c in [1usize, 2, 4, 16] {
            let total = (iterations * 10).max(100);
            let (rate, errors) = throughput(&v.runtime, c, total).await;
            failures.note_many(&format!("runs per second, {}, concurrency {c}", v.label()), total, errors);
            rates.push((v.label(), c, rate));
        }
    }
    let Some(call_runtime) = zygote_rows.first().or(variants.first().as_ref()).map(|v| &v.runtime) else {
        anyhow::bail!("no configuration can run here")
    };
    let calls = 1000u32;
    let seq = format!(
        "import time\nfor i in range(100):\n    await tools.echo(i)\nt = time.perf_counter_ns()\nfor i in range({calls}):\n    await tools.echo(i)\nreturn time.perf_counter_ns() - t"
    );
    let (mut call, mut pipe) = (Samples::default(), Samples::default());
    for _ in 0..(iterations / 3).max(5) {
        if let Some(d) = failures.note("binding call round trip", timed_inside(call_runtime, &seq).await) {
            call.push(d / calls);
        }
        let trip = pipe_round_trip(&python, calls).map_err(|e| format!("{e:#}"));
        if let Some(d) = failures.note("floor: JSON line echoed over a pipe", trip) {
            pipe.push(d);
        }
    }
    let gather = "import asyncio, time\nt = time.perf_counter_ns()\nawait asyncio.gather(*[tools.echo(i) for i in range(1000)])\nreturn time.perf_counter_ns() - t";
    let mut gathered = Samples::default();
    for _ in 0..(iterations / 3).max(5) {
        if let Some(d) = failures.note("asyncio.gather of 1,000 calls", timed_inside(call_runtime, gather).await) {
            gathered.push(d / 1000);
        }
    }
    // A trivial cell in a warm session: no fork, no import, the child waits.
    // A cell that fails ends its session; the next cell opens a new one.
    let mut cells = Vec::new();
    for v in &zygote_rows {
        let case = format!("session cell, {}", v.label());
        let mut samples = Samples::default();
        let mut session = None;
        for _ in 0..(iterations * 20).max(100) {
            if session.is_none() {
                let opened = open_session(&v.runtime).await;
                session = failures.note(&format!("session start, {}", v.label()), opened);
                if session.is_none() {
                    continue;
                }
            }
            let Some(s) = &session else { continue };
            let t = Instant::now();
            let outcome = match s.run("x = x + 1\nx").await {
                Ok(r) => match &r.error {
                    None => Ok(t.elapsed()),
                    Some(e) => Err(in_words(e)),
                },
                Err(e) => Err(e.to_string()),
            };
            match failures.note(&case, outcome) {
                Some(d) => samples.push(d),
                None => {
                    if let Some(s) = session.take() {
                        s.close().await;
                    }
                }
            }
        }
        if let Some(s) = session {
            s.close().await;
        }
        cells.push((v.label(), samples));
    }
    let host_rss = rss_kib("self").unwrap_or(0);
    let mut child_private = Vec::new();
    let mut zygote_private = None;
    if let Some(row) = zygote_rows.first() {
        // Let the pool refill, then measure the zygote and its idle children.
        row.runtime.wait_idle(IDLE_WAIT).await;
    }
    if let Some(z) = zygote_rows.first().and_then(|v| v.runtime.zygote_pid()) {
        zygote_private = private_kib(z);
        child_private = children_of(z).into_iter().filter_map(private_kib).collect();
    }
    child_private.sort();
    let child_private_median = child_private.get(child_private.len() / 2).copied();

    let report = Report {
        python: python.clone(),
        iterations,
        floor_pass,
        floor_import,
        variants: &variants,
        unavailable: &unavailable,
        rates: &rates,
        loops: &loops,
        cells: &cells,
        call,
        pipe,
        gathered,
        host_rss,
        zygote_private,
        child_private_median,
        failures: &failures,
    };
    if let Some(path) = &args.svg {
        std::fs::write(path, report.svg()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        output::stdout_line(&report.json()).context("cannot write the report")?;
    } else {
        output::stdout_lines(report.text().iter().map(String::as_str)).context("cannot write the report")?;
    }
    for v in variants {
        v.runtime.shutdown().await;
    }
    if failures.any() {
        let cases = failures.failed().count();
        output::stderr_line(&format!(
            "pycage bench: runs failed in {cases} case(s) (see \"failed runs\"); their figures count only the runs that succeeded"
        ));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// A session with `x = 0` set, ready for the cell loop.
async fn open_session(runtime: &Runtime) -> Result<pycage_runtime::Session, String> {
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

struct Report<'a> {
    python: PathBuf,
    iterations: usize,
    floor_pass: Samples,
    floor_import: Samples,
    variants: &'a [Variant],
    unavailable: &'a [(String, String)],
    rates: &'a [(String, usize, f64)],
    /// Closed-loop latency and CPU per run, per zygote variant.
    loops: &'a [(String, Samples, Option<Duration>)],
    cells: &'a [(String, Samples)],
    call: Samples,
    pipe: Samples,
    gathered: Samples,
    host_rss: u64,
    zygote_private: Option<u64>,
    child_private_median: Option<u64>,
    failures: &'a Failures,
}

/// What a row without a single successful run shows instead of figures.
const NONE_SUCCEEDED: &str = "no run succeeded";

/// `a / b` of two medians, when both have samples.
fn ratio(a: &Samples, b: &Samples) -> Option<f64> {
    (!a.is_empty() && !b.is_empty()).then(|| a.p50().as_secs_f64() / b.p50().as_secs_f64())
}

fn or_dash(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".to_owned(), |x| format!("{x:.digits$}"))
}

impl Report<'_> {
    fn text(&self) -> Vec<String> {
        let mut l = Vec::new();
        let floor = &self.floor_import;
        l.push(format!(
            "pycage bench: {} interleaved iterations, interpreter {}",
            self.iterations,
            self.python.display()
        ));
        l.push(String::new());
        l.push("floors (median)".into());
        let row = |s: &Samples, f: &dyn Fn(Duration) -> String| {
            if s.is_empty() {
                NONE_SUCCEEDED.to_owned()
            } else {
                f(s.p50())
            }
        };
        l.push(format!(
            "  python -I -c pass                       {}",
            row(&self.floor_pass, &|d| format!("{:>9.2} ms", ms(d)))
        ));
        l.push(format!(
            "  python -I -c \"import asyncio, json\"     {}",
            row(floor, &|d| format!("{:>9.2} ms", ms(d)))
        ));
        l.push(format!(
            "  JSON line echoed over a pipe            {}",
            row(&self.pipe, &|d| format!("{:>9.1} us", us(d)))
        ));
        l.push(String::new());
        l.push("trivial run (return 1)       p50        p95        p99    p50 / import floor".into());
        for v in self.variants {
            if v.samples.is_empty() {
                l.push(format!("  {:<22} {NONE_SUCCEEDED}", v.label()));
                continue;
            }
            l.push(format!(
                "  {:<22} {:>7.2} ms {:>7.2} ms {:>7.2} ms    {}",
                v.label(),
                ms(v.samples.p50()),
                ms(v.samples.quantile(0.95)),
                ms(v.samples.quantile(0.99)),
                or_dash(ratio(&v.samples, floor), 3)
            ));
        }
        if let (Some(p), Some(s)) =
            (self.find(SpawnMode::Zygote, Isolation::Process), self.find(SpawnMode::Zygote, Isolation::Sandbox))
        {
            if let Some(r) = ratio(&s.samples, &p.samples) {
                l.push(format!("  zygote sandbox / process: {r:.2}"));
            }
        }
        for (label, why) in self.unavailable {
            l.push(format!("  {label:<22} unavailable: {why}"));
        }
        l.push(String::new());
        l.push(
            "trivial run, closed loop (back to back)   p50        p99    CPU per run (host + zygote + child)".into(),
        );
        for (label, s, cpu) in self.loops {
            if s.is_empty() {
                l.push(format!("  {label:<22} {NONE_SUCCEEDED}"));
                continue;
            }
            let cpu = cpu.map_or_else(|| "-".to_owned(), |c| format!("{:.2} ms", ms(c)));
            l.push(format!("  {:<22} {:>16.2} ms {:>7.2} ms    {cpu}", label, ms(s.p50()), ms(s.quantile(0.99))));
        }
        l.push(String::new());
        l.push("runs per second (zygote; runs that succeeded)".into());
        for (label, c, rate) in self.rates {
            l.push(format!("  {label:<22} concurrency {c:>2}: {rate:>8.0} runs/s"));
        }
        l.push(String::new());
        l.push("session cell (x = x + 1; x), warm session   p50        p95        p99    p50 / pipe floor".into());
        for (label, s) in self.cells {
            if s.is_empty() {
                l.push(format!("  {label:<22} {NONE_SUCCEEDED}"));
                continue;
            }
            l.push(format!(
                "  {:<22} {:>14.3} ms {:>7.3} ms {:>7.3} ms    {}",
                label,
                ms(s.p50()),
                ms(s.quantile(0.95)),
                ms(s.quantile(0.99)),
                or_dash(ratio(s, &self.pipe), 1)
            ));
        }
        l.push(String::new());
        if self.call.is_empty() {
            l.push(format!("binding call round trip: {NONE_SUCCEEDED}"));
        } else {
            l.push(format!(
                "binding call round trip: {:.1} us; pipe floor {}; ratio {}",
                us(self.call.p50()),
                row(&self.pipe, &|d| format!("{:.1} us", us(d))),
                or_dash(ratio(&self.call, &self.pipe), 2)
            ));
        }
        l.push(format!(
            "asyncio.gather of 1,000 calls: {}",
            row(&self.gathered, &|d| format!("{:.0} calls/s", 1.0 / d.as_secs_f64()))
        ));
        l.push(String::new());
        l.push(format!("host RSS: {} KiB", self.host_rss));
        if let Some(z) = self.zygote_private {
            l.push(format!("zygote private memory: {z} KiB"));
        }
        if let Some(c) = self.child_private_median {
            l.push(format!("idle pooled child private memory (median): {c} KiB"));
        }
        l.extend(self.failures.text());
        l
    }

    /// Medians as a bar chart, floors in grey (rows without a successful
    /// run are left out).
    fn svg(&self) -> String {
        use crate::chart::Bar;
        let mut bars = Vec::new();
        let mut bar = |label: String, s: &Samples, floor: bool| {
            if !s.is_empty() {
                bars.push(Bar { label, ms: ms(s.p50()), floor });
            }
        };
        bar("python -I -c pass".into(), &self.floor_pass, true);
        bar("python -I -c \"import asyncio, json\"".into(), &self.floor_import, true);
        for v in self.variants {
            bar(format!("trivial run, {}", v.label()), &v.samples, false);
        }
        for (label, cell) in self.cells {
            bar(format!("session cell, {label}"), cell, false);
        }
        crate::chart::svg("pycage: a trivial run, p50 (log scale; grey: interpreter start)", &bars)
    }

    fn find(&self, spawn: SpawnMode, isolation: Isolation) -> Option<&Variant> {
        self.variants.iter().find(|v| v.spawn == spawn && v.isolation == isolation)
    }

    /// The report as JSON; a figure of a row without a successful run is
    /// `null`.
    fn json(&self) -> String {
        let mut b = JsonBuilder::new();
        let built = (|| -> Result<(), pycage_protocol::BuildError> {
            let num = |b: &mut JsonBuilder, key: &str, x: Option<f64>| -> Result<(), pycage_protocol::BuildError> {
                b.key(key)?;
                match x {
                    Some(x) if x.is_finite() => b.f64((x * 1000.0).round() / 1000.0),
                    _ => b.null(),
                }
            };
            let p50 = |s: &Samples| (!s.is_empty()).then(|| s.p50());
            let q = |s: &Samples, q: f64| (!s.is_empty()).then(|| s.quantile(q));
            b.begin_object()?;
            b.key("python")?;
            b.string(&self.python.to_string_lossy())?;
            b.key("iterations")?;
            b.number(&self.iterations.to_string())?;
            b.key("floors")?;
            b.begin_object()?;
            num(&mut b, "pythonPassMs", p50(&self.floor_pass).map(ms))?;
            num(&mut b, "pythonImportAsyncioJsonMs", p50(&self.floor_import).map(ms))?;
            num(&mut b, "pipeRoundTripUs", p50(&self.pipe).map(us))?;
            b.end()?;
            b.key("closedLoop")?;
            b.begin_array()?;
            for (label, s, cpu) in self.loops {
                b.begin_object()?;
                b.key("variant")?;
                b.string(label)?;
                num(&mut b, "p50Ms", p50(s).map(ms))?;
                num(&mut b, "p99Ms", q(s, 0.99).map(ms))?;
                num(&mut b, "cpuPerRunMs", cpu.map(ms))?;
                b.end()?;
            }
            b.end()?;
            b.key("trivialRun")?;
            b.begin_array()?;
            for v in self.variants {
                b.begin_object()?;
                b.key("spawn")?;
                b.string(v.spawn.as_str())?;
                b.key("isolation")?;
                b.string(v.isolation.as_str())?;
                num(&mut b, "p50Ms", p50(&v.samples).map(ms))?;
                num(&mut b, "p95Ms", q(&v.samples, 0.95).map(ms))?;
                num(&mut b, "p99Ms", q(&v.samples, 0.99).map(ms))?;
                num(&mut b, "ratioToImportFloor", ratio(&v.samples, &self.floor_import))?;
                b.key("samples")?;
                b.number(&v.samples.0.len().to_string())?;
                b.end()?;
            }
            b.end()?;
            b.key("unavailable")?;
            b.begin_array()?;
            for (label, why) in self.unavailable {
                b.begin_object()?;
                b.key("variant")?;
                b.string(label)?;
                b.key("reason")?;
                b.string(why)?;
                b.end()?;
            }
            b.end()?;
            b.key("runsPerSecond")?;
            b.begin_array()?;
            for (label, c, rate) in self.rates {
                b.begin_object()?;
                b.key("variant")?;
                b.string(label)?;
                b.key("concurrency")?;
                b.number(&c.to_string())?;
                num(&mut b, "runsPerSecond", Some(*rate))?;
                b.end()?;
            }
            b.end()?;
            b.key("sessionCell")?;
            b.begin_array()?;
            for (label, cell) in self.cells {
                b.begin_object()?;
                b.key("variant")?;
                b.string(label)?;
                num(&mut b, "p50Ms", p50(cell).map(ms))?;
                num(&mut b, "p95Ms", q(cell, 0.95).map(ms))?;
                num(&mut b, "p99Ms", q(cell, 0.99).map(ms))?;
                num(&mut b, "ratioToPipeFloor", ratio(cell, &self.pipe))?;
                b.end()?;
            }
            b.end()?;
            b.key("call")?;
            b.begin_object()?;
            num(&mut b, "roundTripUs", p50(&self.call).map(us))?;
            num(&mut b, "pipeFloorUs", p50(&self.pipe).map(us))?;
            num(&mut b, "ratio", ratio(&self.call, &self.pipe))?;
            num(&mut b, "gatherCallsPerSecond", p50(&self.gathered).map(|d| 1.0 / d.as_secs_f64()))?;
            b.end()?;
            b.key("memoryKiB")?;
            b.begin_object()?;
            b.key("hostRss")?;
            b.number(&self.host_rss.to_string())?;
            for (key, value) in
                [("zygotePrivate", self.zygote_private), ("idleChildPrivate", self.child_private_median)]
            {
                if let Some(v) = value {
                    b.key(key)?;
                    b.number(&v.to_string())?;
                }
            }
            b.end()?;
            self.failures.json(&mut b)?;
            b.end()
        })();
        match built.and_then(|()| b.finish()) {
            Ok(v) => v.to_canonical_string(),
            Err(e) => format!("{{\"error\":\"could not build the report: {e}\"}}"),
        }
    }
}
