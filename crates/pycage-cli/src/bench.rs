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
}

/// Latency samples and their summary.
#[derive(Debug, Clone, Default)]
struct Samples(Vec<Duration>);

impl Samples {
    fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    fn quantile(&self, q: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).copied().unwrap_or_default()
    }

    fn p50(&self) -> Duration {
        self.quantile(0.5)
    }
}

/// Pause before each latency sample.
const LATENCY_GAP: Duration = Duration::from_millis(20);

fn ms(d: Duration) -> f64 {
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
fn floor_run(python: &Path, code: &str) -> anyhow::Result<Duration> {
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

async fn trivial(runtime: &Runtime) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let r = runtime.run(RunRequest::new("return 1")).await?;
    let d = t.elapsed();
    anyhow::ensure!(r.error.is_none(), "a trivial run failed: {:?}", r.error);
    Ok(d)
}

/// The integer a program returned, as nanoseconds.
async fn timed_inside(runtime: &Runtime, program: &str) -> anyhow::Result<Duration> {
    let r = runtime.run(RunRequest::new(program).with_namespace(echo_tools())).await?;
    anyhow::ensure!(r.error.is_none(), "the program failed: {:?}", r.error);
    let ns = r.value.as_ref().and_then(|v| v.root().as_number()).and_then(|n| n.as_u64()).unwrap_or(0);
    Ok(Duration::from_nanos(ns))
}

/// Runs per second with `concurrency` runs in flight, `total` runs.
async fn throughput(runtime: &Runtime, concurrency: usize, total: usize) -> anyhow::Result<f64> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let runtime = runtime.clone();
        let next = next.clone();
        tasks.spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                trivial(&runtime).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(total as f64 / t.elapsed().as_secs_f64())
}

/// `Private_Clean + Private_Dirty` of a process, in KiB.
fn private_kib(pid: u32) -> Option<u64> {
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
fn children_of(pid: u32) -> Vec<u32> {
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
    let rt =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    rt.block_on(bench(args))
}

async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let iterations = args.iterations.max(3);
    let mut variants = Vec::new();
    let mut unavailable = Vec::new();
    for isolation in [Isolation::Process, Isolation::Sandbox] {
        for spawn in [SpawnMode::Zygote, SpawnMode::Exec] {
            let config = RuntimeConfig { python: args.python.clone(), isolation, spawn, ..RuntimeConfig::default() };
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
            trivial(&v.runtime).await?;
        }
    }
    let (mut floor_pass, mut floor_import) = (Samples::default(), Samples::default());
    for _ in 0..iterations {
        floor_pass.push(floor_run(&python, "pass")?);
        floor_import.push(floor_run(&python, "import asyncio, json")?);
        for v in &mut variants {
            let reps = if v.spawn == SpawnMode::Zygote { 10 } else { 1 };
            for _ in 0..reps {
                // One run at a time, a little apart, as an agent sends them
                // (the pool refills between runs); back-to-back runs are
                // the throughput rows below.
                tokio::time::sleep(LATENCY_GAP).await;
                let d = trivial(&v.runtime).await?;
                v.samples.push(d);
            }
        }
    }

    // Throughput, calls and memory through the zygote (process isolation
    // first: it is the one every machine has).
    let zygote_rows: Vec<&Variant> = variants.iter().filter(|v| v.spawn == SpawnMode::Zygote).collect();
    let mut rates = Vec::new();
    for v in &zygote_rows {
        for c in [1usize, 2, 4, 16] {
            let total = (iterations * 10).max(100);
            rates.push((v.label(), c, throughput(&v.runtime, c, total).await?));
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
        call.push(timed_inside(call_runtime, &seq).await? / calls);
        pipe.push(pipe_round_trip(&python, calls)?);
    }
    let gather = "import asyncio, time\nt = time.perf_counter_ns()\nawait asyncio.gather(*[tools.echo(i) for i in range(1000)])\nreturn time.perf_counter_ns() - t";
    let mut gathered = Samples::default();
    for _ in 0..(iterations / 3).max(5) {
        gathered.push(timed_inside(call_runtime, gather).await? / 1000);
    }
    // A trivial cell in a warm session: no fork, no import, the child waits.
    let mut cells = Vec::new();
    for v in &zygote_rows {
        let session = v.runtime.session(pycage_runtime::SessionOptions::default())?;
        let first = session.run("x = 0").await?;
        anyhow::ensure!(first.error.is_none(), "a session cell failed: {:?}", first.error);
        let mut samples = Samples::default();
        for _ in 0..(iterations * 20).max(100) {
            let t = Instant::now();
            let r = session.run("x = x + 1\nx").await?;
            samples.push(t.elapsed());
            anyhow::ensure!(r.error.is_none(), "a session cell failed: {:?}", r.error);
        }
        session.close().await;
        cells.push((v.label(), samples));
    }
    let host_rss = rss_kib("self").unwrap_or(0);
    let mut child_private = Vec::new();
    let mut zygote_private = None;
    if let Some(z) = zygote_rows.first().and_then(|v| v.runtime.zygote_pid()) {
        zygote_private = private_kib(z);
        // Let the pool refill, then measure its idle children.
        tokio::time::sleep(Duration::from_millis(300)).await;
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
        cells: &cells,
        call,
        pipe,
        gathered,
        host_rss,
        zygote_private,
        child_private_median,
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
    Ok(ExitCode::SUCCESS)
}

struct Report<'a> {
    python: PathBuf,
    iterations: usize,
    floor_pass: Samples,
    floor_import: Samples,
    variants: &'a [Variant],
    unavailable: &'a [(String, String)],
    rates: &'a [(String, usize, f64)],
    cells: &'a [(String, Samples)],
    call: Samples,
    pipe: Samples,
    gathered: Samples,
    host_rss: u64,
    zygote_private: Option<u64>,
    child_private_median: Option<u64>,
}

impl Report<'_> {
    fn text(&self) -> Vec<String> {
        let mut l = Vec::new();
        let floor = self.floor_import.p50();
        l.push(format!(
            "pycage bench: {} interleaved iterations, interpreter {}",
            self.iterations,
            self.python.display()
        ));
        l.push(String::new());
        l.push("floors (median)".into());
        l.push(format!("  python -I -c pass                       {:>9.2} ms", ms(self.floor_pass.p50())));
        l.push(format!("  python -I -c \"import asyncio, json\"     {:>9.2} ms", ms(floor)));
        l.push(format!("  JSON line echoed over a pipe            {:>9.1} us", us(self.pipe.p50())));
        l.push(String::new());
        l.push("trivial run (return 1)       p50        p95        p99    p50 / import floor".into());
        for v in self.variants {
            l.push(format!(
                "  {:<22} {:>7.2} ms {:>7.2} ms {:>7.2} ms    {:.3}",
                v.label(),
                ms(v.samples.p50()),
                ms(v.samples.quantile(0.95)),
                ms(v.samples.quantile(0.99)),
                v.samples.p50().as_secs_f64() / floor.as_secs_f64()
            ));
        }
        if let (Some(p), Some(s)) =
            (self.find(SpawnMode::Zygote, Isolation::Process), self.find(SpawnMode::Zygote, Isolation::Sandbox))
        {
            l.push(format!(
                "  zygote sandbox / process: {:.2}",
                s.samples.p50().as_secs_f64() / p.samples.p50().as_secs_f64()
            ));
        }
        for (label, why) in self.unavailable {
            l.push(format!("  {label:<22} unavailable: {why}"));
        }
        l.push(String::new());
        l.push("runs per second (zygote)".into());
        for (label, c, rate) in self.rates {
            l.push(format!("  {label:<22} concurrency {c:>2}: {rate:>8.0} runs/s"));
        }
        l.push(String::new());
        l.push("session cell (x = x + 1; x), warm session   p50        p95        p99    p50 / pipe floor".into());
        for (label, s) in self.cells {
            l.push(format!(
                "  {:<22} {:>14.3} ms {:>7.3} ms {:>7.3} ms    {:.1}",
                label,
                ms(s.p50()),
                ms(s.quantile(0.95)),
                ms(s.quantile(0.99)),
                s.p50().as_secs_f64() / self.pipe.p50().as_secs_f64()
            ));
        }
        l.push(String::new());
        l.push(format!(
            "binding call round trip: {:.1} us; pipe floor {:.1} us; ratio {:.2}",
            us(self.call.p50()),
            us(self.pipe.p50()),
            self.call.p50().as_secs_f64() / self.pipe.p50().as_secs_f64()
        ));
        l.push(format!("asyncio.gather of 1,000 calls: {:.0} calls/s", 1.0 / self.gathered.p50().as_secs_f64()));
        l.push(String::new());
        l.push(format!("host RSS: {} KiB", self.host_rss));
        if let Some(z) = self.zygote_private {
            l.push(format!("zygote private memory: {z} KiB"));
        }
        if let Some(c) = self.child_private_median {
            l.push(format!("idle pooled child private memory (median): {c} KiB"));
        }
        l
    }

    /// Medians as a bar chart, floors in grey.
    fn svg(&self) -> String {
        use crate::chart::Bar;
        let mut bars = vec![
            Bar { label: "python -I -c pass".into(), ms: ms(self.floor_pass.p50()), floor: true },
            Bar { label: "python -I -c \"import asyncio, json\"".into(), ms: ms(self.floor_import.p50()), floor: true },
        ];
        for v in self.variants {
            bars.push(Bar { label: format!("trivial run, {}", v.label()), ms: ms(v.samples.p50()), floor: false });
        }
        for (label, cell) in self.cells {
            bars.push(Bar { label: format!("session cell, {label}"), ms: ms(cell.p50()), floor: false });
        }
        crate::chart::svg("pycage: a trivial run, p50 (log scale; grey: interpreter start)", &bars)
    }

    fn find(&self, spawn: SpawnMode, isolation: Isolation) -> Option<&Variant> {
        self.variants.iter().find(|v| v.spawn == spawn && v.isolation == isolation)
    }

    fn json(&self) -> String {
        let mut b = JsonBuilder::new();
        let built = (|| -> Result<(), pycage_protocol::BuildError> {
            let num = |b: &mut JsonBuilder, key: &str, x: f64| -> Result<(), pycage_protocol::BuildError> {
                b.key(key)?;
                b.f64((x * 1000.0).round() / 1000.0)
            };
            b.begin_object()?;
            b.key("python")?;
            b.string(&self.python.to_string_lossy())?;
            b.key("iterations")?;
            b.number(&self.iterations.to_string())?;
            b.key("floors")?;
            b.begin_object()?;
            num(&mut b, "pythonPassMs", ms(self.floor_pass.p50()))?;
            num(&mut b, "pythonImportAsyncioJsonMs", ms(self.floor_import.p50()))?;
            num(&mut b, "pipeRoundTripUs", us(self.pipe.p50()))?;
            b.end()?;
            b.key("trivialRun")?;
            b.begin_array()?;
            for v in self.variants {
                b.begin_object()?;
                b.key("spawn")?;
                b.string(v.spawn.as_str())?;
                b.key("isolation")?;
                b.string(v.isolation.as_str())?;
                num(&mut b, "p50Ms", ms(v.samples.p50()))?;
                num(&mut b, "p95Ms", ms(v.samples.quantile(0.95)))?;
                num(&mut b, "p99Ms", ms(v.samples.quantile(0.99)))?;
                num(
                    &mut b,
                    "ratioToImportFloor",
                    v.samples.p50().as_secs_f64() / self.floor_import.p50().as_secs_f64(),
                )?;
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
                num(&mut b, "runsPerSecond", *rate)?;
                b.end()?;
            }
            b.end()?;
            b.key("sessionCell")?;
            b.begin_array()?;
            for (label, cell) in self.cells {
                b.begin_object()?;
                b.key("variant")?;
                b.string(label)?;
                num(&mut b, "p50Ms", ms(cell.p50()))?;
                num(&mut b, "p95Ms", ms(cell.quantile(0.95)))?;
                num(&mut b, "p99Ms", ms(cell.quantile(0.99)))?;
                num(&mut b, "ratioToPipeFloor", cell.p50().as_secs_f64() / self.pipe.p50().as_secs_f64())?;
                b.end()?;
            }
            b.end()?;
            b.key("call")?;
            b.begin_object()?;
            num(&mut b, "roundTripUs", us(self.call.p50()))?;
            num(&mut b, "pipeFloorUs", us(self.pipe.p50()))?;
            num(&mut b, "ratio", self.call.p50().as_secs_f64() / self.pipe.p50().as_secs_f64())?;
            num(&mut b, "gatherCallsPerSecond", 1.0 / self.gathered.p50().as_secs_f64())?;
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
            b.end()
        })();
        match built.and_then(|()| b.finish()) {
            Ok(v) => v.to_canonical_string(),
            Err(e) => format!("{{\"error\":\"could not build the report: {e}\"}}"),
        }
    }
}
