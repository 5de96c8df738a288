//! `pycage bench --venv VENV`: what bringing an environment costs, each
//! figure beside its floor from the same invocation.
//!
//! - a fresh run of `import numpy, pandas; return int(numpy.arange(10).sum())`
//!   through the zygote, with `--preload numpy,pandas` and without, in each
//!   isolation, interleaved; the floor is the same imports in a fresh
//!   `python -I` of the venv (what a run costs without a zygote);
//! - a program declaring a PEP 723 dependency (`tabulate`): its first run
//!   (the host installs it into an empty cache) and later runs (found in
//!   the cache), beside `return 1` in the same runtime;
//! - the private memory (`Private_Clean + Private_Dirty`) of idle pooled
//!   children with the preload and without (in the sandbox, the joining
//!   process and the program's together), and of each zygote.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use pycage_protocol::JsonBuilder;
use pycage_runtime::{Isolation, RunRequest, Runtime, RuntimeConfig, SpawnMode};

use crate::bench::measure::{children_of, floor_run, ms, private_kib, Samples};
use crate::output;

/// The program of the preload rows.
pub const NUMPY_PANDAS: &str = "import numpy, pandas\nreturn int(numpy.arange(10).sum())";

/// A program that declares one dependency (PEP 723).
const DECLARED: &str = "# /// script\n# dependencies = [\"tabulate==0.9.0\"]\n# ///\nimport tabulate\n\
                        return tabulate.tabulate([[1, 2]])";

/// Pause before each latency sample (the pool refills between runs).
const GAP: Duration = Duration::from_millis(20);

struct Row {
    label: String,
    samples: Samples,
    failed: Vec<String>,
}

impl Row {
    fn new(label: String) -> Row {
        Row { label, samples: Samples::default(), failed: Vec::new() }
    }

    async fn sample(&mut self, rt: &Runtime, program: &str) {
        let t = Instant::now();
        match rt.run(RunRequest::new(program)).await {
            Ok(r) => match r.error {
                None => self.samples.push(t.elapsed()),
                Some(e) => self.failed.push(format!("{}: {}", e.kind, e.message)),
            },
            Err(e) => self.failed.push(e.to_string()),
        }
    }
}

fn config(venv: &Path, isolation: Isolation, preload: bool, cache: Option<&Path>) -> RuntimeConfig {
    RuntimeConfig {
        venv: Some(venv.to_path_buf()),
        isolation,
        spawn: SpawnMode::Zygote,
        preload: if preload { vec!["numpy".into(), "pandas".into()] } else { Vec::new() },
        cache_dir: cache.map(Path::to_path_buf).or_else(pycage_runtime::default_cache_dir),
        wall_time: Duration::from_secs(120),
        shell_helper: crate::common::shell_helper(),
        ..RuntimeConfig::default()
    }
}

/// Private memory of a zygote's idle children, in KiB (a sandboxed child
/// is the joining process and the program it forked).
fn idle_children_kib(zygote: u32) -> Vec<u64> {
    let mut out: Vec<u64> = children_of(zygote)
        .into_iter()
        .filter_map(|c| {
            let own = private_kib(c)?;
            Some(own + children_of(c).into_iter().filter_map(private_kib).sum::<u64>())
        })
        .collect();
    out.sort();
    out
}

struct Memory {
    label: String,
    zygote: Option<u64>,
    children: Vec<u64>,
}

pub async fn bench(venv: PathBuf, iterations: usize, json: bool) -> anyhow::Result<std::process::ExitCode> {
    let venv = std::path::absolute(&venv).context("--venv")?;
    let python = venv.join("bin/python");
    let iterations = iterations.max(5);
    let mut rows: Vec<Row> = Vec::new();
    let mut memory = Vec::new();
    let mut runtimes = Vec::new();
    for isolation in [Isolation::Process, Isolation::Sandbox] {
        for preload in [true, false] {
            let label =
                format!("{}, {}", isolation.as_str(), if preload { "--preload numpy,pandas" } else { "no preload" });
            let rt = Runtime::new(config(&venv, isolation, preload, None))
                .map_err(|e| anyhow::anyhow!("{label}: {}", e.explain(&crate::common::CliSpelling)))?;
            runtimes.push((label, rt));
        }
    }
    // Warm-up: zygotes started, pools filled.
    for (_, rt) in &runtimes {
        for _ in 0..2 {
            let _ = rt.run(RunRequest::new(NUMPY_PANDAS)).await;
        }
    }
    let mut floor_pass = Samples::default();
    let mut floor_import = Samples::default();
    for (label, _) in &runtimes {
        rows.push(Row::new(label.clone()));
    }
    for i in 0..iterations {
        floor_pass.push(floor_run(&python, "pass")?);
        floor_import.push(floor_run(&python, "import numpy, pandas")?);
        for ((_, rt), row) in runtimes.iter().zip(rows.iter_mut()) {
            // Without the preload a run costs the imports: a third as many.
            if !row.label.ends_with("no preload") || i % 3 == 0 {
                tokio::time::sleep(GAP).await;
                row.sample(rt, NUMPY_PANDAS).await;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (label, rt) in &runtimes {
        let zygote = rt.zygote_pid();
        memory.push(Memory {
            label: label.clone(),
            zygote: zygote.and_then(private_kib),
            children: zygote.map(idle_children_kib).unwrap_or_default(),
        });
    }
    for (_, rt) in runtimes {
        rt.shutdown().await;
    }

    // Declared packages: an empty cache, then the same requirements again.
    let cache = tempfile::Builder::new().prefix("pycage-bench-packages-").tempdir()?;
    std::fs::set_permissions(cache.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    // A program's declarations are refused unless the caller allows them:
    // this runtime allows the one package its program declares.
    let declared = RuntimeConfig {
        allow_packages: vec!["tabulate".into()],
        ..config(&venv, Isolation::Sandbox, false, Some(cache.path()))
    };
    let rt = Runtime::new(declared).map_err(|e| anyhow::anyhow!("{}", e.explain(&crate::common::CliSpelling)))?;
    let _ = rt.run(RunRequest::new("return 1")).await;
    let mut first = Row::new("first run (installs into an empty cache)".into());
    first.sample(&rt, DECLARED).await;
    let mut again = Row::new("later runs (found in the cache)".into());
    let mut trivial = Row::new("floor: return 1, same runtime".into());
    for _ in 0..iterations {
        tokio::time::sleep(GAP).await;
        again.sample(&rt, DECLARED).await;
        tokio::time::sleep(GAP).await;
        trivial.sample(&rt, "return 1").await;
    }
    rt.shutdown().await;
    let packages = [first, again, trivial];

    let failed: Vec<(&str, &String)> =
        rows.iter().chain(&packages).flat_map(|r| r.failed.iter().map(move |f| (r.label.as_str(), f))).collect();
    if json {
        output::stdout_line(&report_json(&python, &floor_pass, &floor_import, &rows, &packages, &memory))?;
    } else {
        let mut l = vec![format!("pycage bench --venv {}: {iterations} interleaved iterations", venv.display())];
        l.push(String::new());
        l.push(format!("floor: {} -I -c pass             {:>9.2} ms", python.display(), ms(floor_pass.p50())));
        l.push(format!(
            "floor: {} -I -c \"import numpy, pandas\"  {:>9.2} ms",
            python.display(),
            ms(floor_import.p50())
        ));
        l.push(String::new());
        l.push(format!("fresh run: {}", NUMPY_PANDAS.replace('\n', "; ")));
        l.push("  zygote                                   p50        p95    runs   p50 / import floor".into());
        for r in &rows {
            l.push(line(r, &floor_import));
        }
        l.push(String::new());
        l.push("a PEP 723 dependency (tabulate), sandbox, zygote".into());
        for r in &packages {
            l.push(line(r, &packages[2].samples));
        }
        l.push(String::new());
        l.push("private memory (Private_Clean + Private_Dirty), KiB".into());
        for m in &memory {
            l.push(format!(
                "  {:<38} zygote {:>7}   idle children {:?}",
                m.label,
                m.zygote.map_or("-".into(), |z| z.to_string()),
                m.children
            ));
        }
        for (label, why) in &failed {
            l.push(format!("FAILED {label}: {why}"));
        }
        output::stdout_lines(l.iter().map(String::as_str))?;
    }
    Ok(if failed.is_empty() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::from(1) })
}

fn line(r: &Row, floor: &Samples) -> String {
    if r.samples.is_empty() {
        return format!("  {:<38} no run succeeded", r.label);
    }
    let ratio = if floor.is_empty() { f64::NAN } else { r.samples.p50().as_secs_f64() / floor.p50().as_secs_f64() };
    format!(
        "  {:<38} {:>7.2} ms {:>7.2} ms {:>6}   {:.3}",
        r.label,
        ms(r.samples.p50()),
        ms(r.samples.quantile(0.95)),
        r.samples.len(),
        ratio
    )
}

fn report_json(
    python: &Path,
    floor_pass: &Samples,
    floor_import: &Samples,
    rows: &[Row],
    packages: &[Row],
    memory: &[Memory],
) -> String {
    let mut b = JsonBuilder::new();
    let built = (|| -> Result<(), pycage_protocol::BuildError> {
        let num = |b: &mut JsonBuilder, key: &str, s: &Samples, q: f64| -> Result<(), pycage_protocol::BuildError> {
            b.key(key)?;
            if s.is_empty() {
                b.null()
            } else {
                b.f64((ms(s.quantile(q)) * 1000.0).round() / 1000.0)
            }
        };
        b.begin_object()?;
        b.key("python")?;
        b.string(&python.to_string_lossy())?;
        b.key("floors")?;
        b.begin_object()?;
        num(&mut b, "pythonPassMs", floor_pass, 0.5)?;
        num(&mut b, "pythonImportNumpyPandasMs", floor_import, 0.5)?;
        b.end()?;
        for (key, list) in [("freshRun", rows), ("declaredPackages", packages)] {
            b.key(key)?;
            b.begin_array()?;
            for r in list {
                b.begin_object()?;
                b.key("case")?;
                b.string(&r.label)?;
                num(&mut b, "p50Ms", &r.samples, 0.5)?;
                num(&mut b, "p95Ms", &r.samples, 0.95)?;
                b.key("runs")?;
                b.number(&r.samples.len().to_string())?;
                b.key("failed")?;
                b.number(&r.failed.len().to_string())?;
                b.end()?;
            }
            b.end()?;
        }
        b.key("privateMemoryKiB")?;
        b.begin_array()?;
        for m in memory {
            b.begin_object()?;
            b.key("case")?;
            b.string(&m.label)?;
            b.key("zygote")?;
            match m.zygote {
                Some(z) => b.number(&z.to_string())?,
                None => b.null()?,
            }
            b.key("idleChildren")?;
            b.begin_array()?;
            for c in &m.children {
                b.number(&c.to_string())?;
            }
            b.end()?;
            b.end()?;
        }
        b.end()?;
        b.end()
    })();
    match built.and_then(|()| b.finish()) {
        Ok(v) => v.to_canonical_string(),
        Err(e) => format!("{{\"error\":\"could not build the report: {e}\"}}"),
    }
}
