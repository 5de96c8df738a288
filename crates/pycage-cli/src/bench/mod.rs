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
//! isolation this machine can run, one run at a time, 20 ms apart; a
//! closed loop of back-to-back runs with the CPU each costs, the
//! configurations taking turns in [`LOOP_BLOCKS`] blocks; runs per second
//! at concurrency 1, 2, 4 and 16 through the zygote, each concurrency's
//! configurations taking turns in [`RATE_BLOCKS`] blocks (a host whose
//! speed drifts moves both alike); a trivial cell in a warm session;
//! a binding call's round trip; `asyncio.gather` throughput; the host's
//! RSS and the private memory of an idle pooled child.
//!
//! `--plot PYTHON` measures showing a matplotlib chart instead
//! ([`plot`]).
//!
//! # Layers
//!
//! Each module uses only those listed before it: `failures`, `measure`
//! (samples, floors' processes, CPU), `floors`, `runs`, `report`, `env`
//! (`--venv`), `plot` (`--plot`).
//!
//! A run that fails is left out of the figures and counted for its case
//! (which row, how many of how many tries), with its first failure in
//! words (`timeout: the wall-clock budget ...`); the report is printed
//! whatever failed, and the command then exits 1.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use pycage_runtime::{Isolation, Runtime, RuntimeConfig, SpawnMode};

use crate::output;
use failures::{in_words, Failures};
pub(crate) use floors::{serve_ns_floor, NS_FLOOR_ARG};
use measure::{children_of, floor_run, pipe_round_trip, private_kib, rss_kib, CpuSplit, Samples};
use report::{Report, Variant};
use runs::{closed_loop, open_session, throughput, timed_inside, trivial, Throughput, IDLE_WAIT, LATENCY_GAP};

/// How many turns each configuration's closed loop takes: its runs are
/// split into this many blocks, alternated with the other configurations'.
const LOOP_BLOCKS: usize = 4;

/// How many turns each configuration takes at each concurrency of the
/// runs-per-second rows, each of the same number of runs.
const RATE_BLOCKS: usize = 3;

mod env;
mod failures;
mod floors;
mod measure;
mod plot;
mod report;
mod runs;

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
    /// Also draw the latency figures as an SVG bar chart (BENCHMARKS.md's).
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

impl BenchArgs {
    /// Whether output (misuse included) is JSON.
    pub fn json(&self) -> bool {
        self.json
    }
}

pub fn main(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::common::tokio_runtime()?;
    // Runs wait on their child's socket on this thread (`pycage_runtime::block_on`).
    pycage_runtime::block_on(rt.handle(), bench(args))
}

async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(venv) = args.venv {
        return env::bench(venv, args.iterations, args.json).await;
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
                shell_helper: crate::common::shell_helper(),
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
    // The configurations take turns, in blocks, so that what the machine
    // does meanwhile (another tenant, a hypervisor's neighbour) falls on
    // each alike: `sandbox - process` is read from their difference.
    let n = (iterations * 10).max(200);
    let block = n.div_ceil(LOOP_BLOCKS);
    // Per configuration: latencies, CPU of the blocks with one zygote
    // throughout and how many runs those had, errors.
    let mut spans: Vec<(Samples, Option<CpuSplit>, u32, Vec<String>)> =
        zygote_rows.iter().map(|_| (Samples::default(), Some(CpuSplit::default()), 0, Vec::new())).collect();
    for _ in 0..LOOP_BLOCKS {
        for (v, span) in zygote_rows.iter().zip(&mut spans) {
            let (samples, spent, errors) = closed_loop(&v.runtime, block).await;
            span.0.extend(samples);
            span.3.extend(errors);
            match spent {
                Some(spent) => {
                    span.1 = span.1.map(|sum| sum.plus(&spent));
                    span.2 += block as u32;
                }
                // A replaced zygote's CPU is not all there: no CPU figure.
                None => span.1 = None,
            }
        }
    }
    let mut loops = Vec::new();
    for (v, (samples, spent, runs, errors)) in zygote_rows.iter().zip(spans) {
        failures.note_many(&format!("closed loop, {}", v.label()), block * LOOP_BLOCKS, errors);
        let cpu = spent.filter(|_| runs > 0).map(|sum| sum.per_run(&CpuSplit::default(), runs));
        loops.push((v.label(), samples, cpu));
    }
    let mut rates = Vec::new();
    for c in [1usize, 2, 4, 16] {
        // Each concurrency's configurations take turns.
        let total = (iterations * 10).max(100);
        let mut sums: Vec<Throughput> = zygote_rows.iter().map(|_| Throughput::default()).collect();
        for _ in 0..RATE_BLOCKS {
            for (v, sum) in zygote_rows.iter().zip(&mut sums) {
                *sum = std::mem::take(sum).plus(throughput(&v.runtime, c, total).await);
            }
        }
        for (v, sum) in zygote_rows.iter().zip(sums) {
            let (rate, busy) = (sum.rate(), sum.cores_busy());
            failures.note_many(
                &format!("runs per second, {}, concurrency {c}", v.label()),
                total * RATE_BLOCKS,
                sum.errors,
            );
            rates.push((v.label(), c, rate, busy));
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
    // The floors of CPU per run, once the runs are measured (they fork a
    // few hundred processes of their own: `/proc/stat` counts whole clock
    // ticks, 10 ms, so 600 spawns resolve about 0.02 ms per spawn).
    let spawns = (iterations * 20).max(300);
    let binds: Vec<PathBuf> = variants
        .iter()
        .find_map(|v| v.runtime.sandbox_view())
        .map(|view| view.read_only.into_iter().chain(view.remapped.into_iter().map(|(host, _)| host)).collect())
        .unwrap_or_default();
    let sandboxed = variants.iter().any(|v| v.isolation == Isolation::Sandbox);
    let mut namespace_floor = |label: &str, confine: bool| match sandboxed {
        true => failures.note(label, floors::namespace_set(spawns, &binds, confine).map_err(|e| format!("{e:#}"))),
        false => None,
    };
    let sandbox_floor = namespace_floor("floor: namespaces and the program's confinement", true);
    let namespace_floor = namespace_floor("floor: the namespace set", false);
    let bootstrap = variants.first().map(|v| v.runtime.bootstrap_dir().to_path_buf());
    let fork_floor = bootstrap.and_then(|dir| {
        let floor = floors::cpython_fork(&python, &dir, spawns).map_err(|e| format!("{e:#}"));
        failures.note("floor: CPython fork + exit", floor)
    });
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
        namespace_floor,
        sandbox_floor,
        fork_floor,
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
