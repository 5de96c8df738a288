//! `pycage bench --plot PYTHON`: what showing a chart costs. A run makes a
//! 640x480 line plot (200 points) with matplotlib and shows it
//! (`plt.show()`, one `image/png` display back in the result), beside the
//! floor of the same plot rendered to PNG by a plain `python -c` that has
//! matplotlib already imported, measured in the same loop (interleaved).
//!
//! Rows: a fresh run (it imports matplotlib itself) and a cell of a warm
//! session (matplotlib imported by an earlier cell), zygote spawn, in each
//! isolation this machine can run; a second floor is a whole `python -c`
//! that imports matplotlib and renders the plot, with its font cache warm.
//! Every run's display is checked: one `image/png` of 640x480.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine as _;
use pycage_protocol::JsonBuilder;
use pycage_runtime::{Isolation, RunRequest, RunResult, Runtime, RuntimeConfig, SessionOptions, SpawnMode};

use crate::bench::failures::{in_words, Failures};
use crate::bench::measure::{ms, or_dash, ratio, Samples, NONE_SUCCEEDED};
use crate::output;

/// The data and the figure, the same everywhere: `plt` is imported.
const PLOT: &str = "xs = list(range(200))\nys = [(i * 37) % 101 for i in xs]\nplt.figure(figsize=(6.4, 4.8), dpi=100)\nplt.plot(xs, ys)\n";

/// The warm floor's child: matplotlib imported once, then one plot per
/// input line, rendered to PNG bytes as pycage's backend renders a figure
/// (`print_figure` at the figure's dpi), answered with the PNG's length.
fn warm_child() -> String {
    format!(
        "import io, sys\nimport matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\nfor _ in sys.stdin:\n{}    buf = io.BytesIO()\n    plt.gcf().canvas.print_figure(buf, format='png', dpi=100)\n    plt.close('all')\n    sys.stdout.write(str(len(buf.getvalue())) + '\\n')\n    sys.stdout.flush()\n",
        indent(PLOT)
    )
}

/// The cold floor: a whole interpreter that imports matplotlib and renders
/// the plot once.
fn cold_program() -> String {
    format!(
        "import io\nimport matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n{PLOT}buf = io.BytesIO()\nplt.gcf().canvas.print_figure(buf, format='png', dpi=100)\n"
    )
}

/// A fresh run: imports matplotlib, plots, shows.
fn run_program() -> String {
    format!("import matplotlib.pyplot as plt\n{PLOT}plt.show()\n")
}

/// A session cell after `import matplotlib.pyplot as plt`: plots, shows.
fn cell_program() -> String {
    format!("{PLOT}plt.show()\n")
}

fn indent(code: &str) -> String {
    code.lines().map(|l| format!("    {l}\n")).collect()
}

/// A plain interpreter with a private matplotlib config directory (its
/// font cache kept across floor processes) and nothing else of ours.
fn floor_command(python: &Path, config_dir: &Path, code: &str) -> Command {
    let mut c = Command::new(python);
    c.args(["-I", "-B", "-c", code]).env_clear().env("MPLCONFIGDIR", config_dir).stderr(Stdio::null());
    c
}

/// The warm floor's process.
struct WarmFloor {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl WarmFloor {
    fn start(python: &Path, config_dir: &Path) -> anyhow::Result<Self> {
        let mut child = floor_command(python, config_dir, &warm_child())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", python.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            anyhow::bail!("the floor's python has no stdio")
        };
        let mut floor = WarmFloor { child, stdin, stdout: BufReader::new(stdout) };
        // The first plot warms matplotlib's caches; it is not a sample.
        floor.plot()?;
        Ok(floor)
    }

    /// One plot rendered, timed from the request to the answer.
    fn plot(&mut self) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.stdin.write_all(b"\n")?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        let d = t.elapsed();
        let bytes: usize = line.trim().parse().with_context(|| format!("the floor's python answered {line:?}"))?;
        anyhow::ensure!(bytes > 0, "the floor's python rendered an empty PNG");
        Ok(d)
    }
}

impl Drop for WarmFloor {
    fn drop(&mut self) {
        // Its stdin closes with it and its loop ends; reap it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One whole `python -c` that imports matplotlib and renders the plot.
fn cold_floor(python: &Path, config_dir: &Path) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let status = floor_command(python, config_dir, &cold_program())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", python.display()))?;
    anyhow::ensure!(status.success(), "python -c (import matplotlib, render) failed: {status}");
    Ok(t.elapsed())
}

/// Whether a settled run showed exactly one 640x480 PNG; a failure in words.
fn one_chart(r: &RunResult) -> Result<(), String> {
    if let Some(e) = &r.error {
        return Err(in_words(e));
    }
    let [d] = r.displays.as_slice() else {
        return Err(format!("{} displays, not one", r.displays.len()));
    };
    let png = d.get("image/png").ok_or("the display has no image/png")?;
    let head = png.get(..32).ok_or("the PNG is too short")?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(head).map_err(|e| format!("not base64: {e}"))?;
    let size = bytes.get(16..24).map(|b| (&b[..4], &b[4..]));
    match size {
        Some((w, h)) if w == 640u32.to_be_bytes() && h == 480u32.to_be_bytes() => Ok(()),
        _ => Err("the PNG is not 640x480".into()),
    }
}

/// A fresh run, timed from request to result.
async fn fresh(runtime: &Runtime) -> Result<Duration, String> {
    let t = Instant::now();
    let r = runtime.run(RunRequest::new(run_program())).await.map_err(|e| e.to_string())?;
    let d = t.elapsed();
    one_chart(&r).map(|()| d)
}

/// A session whose first cell imported pyplot.
async fn open_session(runtime: &Runtime) -> Result<pycage_runtime::Session, String> {
    let session = runtime.session(SessionOptions::default()).map_err(|e| e.to_string())?;
    let failed = match session.run("import matplotlib.pyplot as plt").await {
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

/// What the zygote of a preloaded row imports before it forks.
const PRELOAD: &str = "matplotlib.pyplot";

/// One isolation's runtime (with or without the preload) and its rows.
struct Row {
    isolation: Isolation,
    /// The zygote imported [`PRELOAD`]: fresh runs only (a session's
    /// cells are the same with it).
    preloaded: bool,
    runtime: Runtime,
    fresh: Samples,
    cells: Samples,
    session: Option<pycage_runtime::Session>,
}

impl Row {
    fn label(&self) -> String {
        if self.preloaded {
            format!("{} + preload", self.isolation.as_str())
        } else {
            self.isolation.as_str().to_owned()
        }
    }

    /// One session cell, timed; a cell that fails ends its session and the
    /// next one opens another.
    async fn cell(&mut self, failures: &mut Failures) {
        if self.session.is_none() {
            let opened = open_session(&self.runtime).await;
            self.session = failures.note(&format!("plot: session start, zygote / {}", self.label()), opened);
        }
        let Some(s) = &self.session else { return };
        let t = Instant::now();
        let outcome = match s.run(cell_program()).await {
            Ok(r) => one_chart(&r).map(|()| t.elapsed()),
            Err(e) => Err(e.to_string()),
        };
        match failures.note(&format!("plot: session cell, zygote / {}", self.label()), outcome) {
            Some(d) => self.cells.push(d),
            None => {
                if let Some(s) = self.session.take() {
                    s.close().await;
                }
            }
        }
    }
}

/// The interpreter's `sys.prefix` (its venv), checking that it has
/// matplotlib.
fn prefix_of(python: &Path) -> anyhow::Result<PathBuf> {
    let out = Command::new(python)
        .args(["-I", "-B", "-c", "import sys, matplotlib; sys.stdout.write(sys.prefix)"])
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} cannot import matplotlib (--plot needs a Python that has it, e.g. a venv made with `python3 -m venv --copies`)",
        python.display()
    );
    Ok(PathBuf::from(String::from_utf8(out.stdout).context("sys.prefix is not UTF-8")?))
}

pub(super) async fn bench(
    python: PathBuf,
    iterations: usize,
    wall_ms: Option<u64>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let prefix = prefix_of(&python)?;
    let n = (iterations / 2).max(5);
    let mut failures = Failures::default();
    let mut rows = Vec::new();
    let mut unavailable = Vec::new();
    let variants = [Isolation::Process, Isolation::Sandbox].into_iter().flat_map(|i| [(i, false), (i, true)]);
    for (isolation, preloaded) in variants {
        let mut config = RuntimeConfig {
            python: Some(python.clone()),
            isolation,
            spawn: SpawnMode::Zygote,
            allow_read: vec![prefix.clone()],
            preload: if preloaded { vec![PRELOAD.to_owned()] } else { Vec::new() },
            shell_helper: crate::common::shell_helper(),
            ..RuntimeConfig::default()
        };
        if let Some(ms) = wall_ms {
            config.wall_time = Duration::from_millis(ms);
        }
        match Runtime::new(config) {
            Ok(runtime) => {
                let (effective, why) = runtime.spawn_mode();
                if effective != SpawnMode::Zygote {
                    unavailable.push((isolation.as_str(), why.unwrap_or("").to_owned()));
                    runtime.shutdown().await;
                    continue;
                }
                rows.push(Row {
                    isolation,
                    preloaded,
                    runtime,
                    fresh: Samples::default(),
                    cells: Samples::default(),
                    session: None,
                });
            }
            Err(e) => unavailable.push((isolation.as_str(), e.to_string())),
        }
    }
    let config_dir =
        tempfile::Builder::new().prefix("pycage-bench-mpl-").tempdir().context("cannot make a temporary directory")?;
    let mut warm = WarmFloor::start(&python, config_dir.path())?;
    let (mut warm_floor, mut cold) = (Samples::default(), Samples::default());
    // Warm-up: the zygotes start, the sessions import pyplot.
    for row in &mut rows {
        let outcome = fresh(&row.runtime).await;
        failures.note(&format!("plot: warm-up, zygote / {}", row.label()), outcome);
        if !row.preloaded {
            row.cell(&mut failures).await;
            row.cells = Samples::default();
        }
    }
    failures.note(
        "plot floor: python -c, import matplotlib and render",
        cold_floor(&python, config_dir.path()).map_err(|e| format!("{e:#}")),
    );
    for _ in 0..n {
        if let Some(d) = failures.note("plot floor: warm python, render", warm.plot().map_err(|e| format!("{e:#}"))) {
            warm_floor.push(d);
        }
        let c = cold_floor(&python, config_dir.path()).map_err(|e| format!("{e:#}"));
        if let Some(d) = failures.note("plot floor: python -c, import matplotlib and render", c) {
            cold.push(d);
        }
        for row in &mut rows {
            let outcome = fresh(&row.runtime).await;
            if let Some(d) = failures.note(&format!("plot: fresh run, zygote / {}", row.label()), outcome) {
                row.fresh.push(d);
            }
            if !row.preloaded {
                row.cell(&mut failures).await;
            }
        }
    }
    drop(warm);
    let report = PlotReport {
        python: &python,
        n,
        warm: &warm_floor,
        cold: &cold,
        rows: &rows,
        unavailable: &unavailable,
        failures: &failures,
    };
    if json {
        output::stdout_line(&report.json()).context("cannot write the report")?;
    } else {
        output::stdout_lines(report.text().iter().map(String::as_str)).context("cannot write the report")?;
    }
    for row in rows {
        if let Some(s) = row.session {
            s.close().await;
        }
        row.runtime.shutdown().await;
    }
    if failures.any() {
        output::stderr_line(
            "pycage bench --plot: runs failed (see \"failed runs\"); their figures count only the runs that succeeded",
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

struct PlotReport<'a> {
    python: &'a Path,
    n: usize,
    warm: &'a Samples,
    cold: &'a Samples,
    rows: &'a [Row],
    unavailable: &'a [(&'static str, String)],
    failures: &'a Failures,
}

impl PlotReport<'_> {
    /// `(label, samples)` of every run row.
    fn run_rows(&self) -> Vec<(String, &Samples)> {
        let mut out = Vec::new();
        for row in self.rows {
            out.push((format!("fresh run, zygote / {}", row.label()), &row.fresh));
        }
        for row in self.rows.iter().filter(|r| !r.preloaded) {
            out.push((format!("session cell, zygote / {}", row.label()), &row.cells));
        }
        out
    }

    fn text(&self) -> Vec<String> {
        let mut l = vec![
            format!(
                "pycage bench --plot: a 640x480 line plot (200 points) shown as image/png; {} interleaved iterations, interpreter {}",
                self.n,
                self.python.display()
            ),
            String::new(),
            "floors (median)".into(),
        ];
        let p50 =
            |s: &Samples| if s.is_empty() { NONE_SUCCEEDED.to_owned() } else { format!("{:>9.2} ms", ms(s.p50())) };
        l.push(format!("  render in a python with matplotlib imported     {}", p50(self.warm)));
        l.push(format!("  python -c: import matplotlib, render            {}", p50(self.cold)));
        l.push(String::new());
        l.push(
            "plot shown by a run                            p50        p95    p50 / render floor    p50 / python -c floor"
                .into(),
        );
        for (label, s) in self.run_rows() {
            if s.is_empty() {
                l.push(format!("  {label:<40} {NONE_SUCCEEDED}"));
                continue;
            }
            l.push(format!(
                "  {label:<40} {:>7.2} ms {:>7.2} ms    {:>17}    {:>21}",
                ms(s.p50()),
                ms(s.quantile(0.95)),
                or_dash(ratio(s, self.warm), 2),
                or_dash(ratio(s, self.cold), 2)
            ));
        }
        for (label, why) in self.unavailable {
            l.push(format!("  zygote / {label}: unavailable: {why}"));
        }
        l.extend(self.failures.text());
        l
    }

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
            let p50 = |s: &Samples| (!s.is_empty()).then(|| ms(s.p50()));
            b.begin_object()?;
            b.key("python")?;
            b.string(&self.python.to_string_lossy())?;
            b.key("iterations")?;
            b.number(&self.n.to_string())?;
            b.key("floors")?;
            b.begin_object()?;
            num(&mut b, "renderWarmMs", p50(self.warm))?;
            num(&mut b, "importAndRenderMs", p50(self.cold))?;
            b.end()?;
            b.key("rows")?;
            b.begin_array()?;
            for (label, s) in self.run_rows() {
                b.begin_object()?;
                b.key("row")?;
                b.string(&label)?;
                num(&mut b, "p50Ms", p50(s))?;
                num(&mut b, "p95Ms", (!s.is_empty()).then(|| ms(s.quantile(0.95))))?;
                num(&mut b, "ratioToRenderFloor", ratio(s, self.warm))?;
                num(&mut b, "ratioToImportAndRenderFloor", ratio(s, self.cold))?;
                b.end()?;
            }
            b.end()?;
            b.key("unavailable")?;
            b.begin_array()?;
            for (label, why) in self.unavailable {
                b.begin_object()?;
                b.key("isolation")?;
                b.string(label)?;
                b.key("reason")?;
                b.string(why)?;
                b.end()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program is Python that compiles (python3 on PATH), and they
    /// all draw the same figure.
    #[test]
    fn the_programs_compile_and_plot_the_same_figure() {
        let programs = [warm_child(), cold_program(), run_program(), cell_program()];
        let check = "import sys\nfor p in sys.argv[1:]:\n    compile(p, '<bench>', 'exec')";
        let out = Command::new("python3").args(["-I", "-c", check]).args(&programs).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        for program in &programs {
            assert!(program.contains("plt.figure(figsize=(6.4, 4.8), dpi=100)"), "{program}");
            assert!(program.contains("plt.plot(xs, ys)"), "{program}");
        }
    }
}
