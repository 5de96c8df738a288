//! The report of `pycage bench`: text, JSON and the SVG chart.

use std::path::PathBuf;
use std::time::Duration;

use pycage_protocol::JsonBuilder;
use pycage_runtime::{Isolation, SpawnMode};

use crate::bench::failures::Failures;
use crate::bench::measure::{ms, or_dash, ratio, us, CpuSplit, Samples, NONE_SUCCEEDED};

pub(crate) struct Variant {
    pub(crate) spawn: SpawnMode,
    pub(crate) isolation: Isolation,
    pub(crate) runtime: pycage_runtime::Runtime,
    pub(crate) samples: Samples,
}

impl Variant {
    pub(crate) fn label(&self) -> String {
        format!("{} / {}", self.spawn.as_str(), self.isolation.as_str())
    }
}

pub(crate) struct Report<'a> {
    pub(crate) python: PathBuf,
    pub(crate) iterations: usize,
    pub(crate) floor_pass: Samples,
    pub(crate) floor_import: Samples,
    pub(crate) variants: &'a [Variant],
    pub(crate) unavailable: &'a [(String, String)],
    pub(crate) rates: &'a [(String, usize, f64, f64)],
    /// Closed-loop latency and CPU per run, per zygote variant.
    pub(crate) loops: &'a [(String, Samples, Option<CpuSplit>)],
    /// Whole-machine CPU per spawn of the kernel's namespace set, of the
    /// same with the program's confinement (the kernel's floor for what a
    /// sandbox adds to a run), and of CPython's fork and exit with the
    /// zygote's imports.
    pub(crate) namespace_floor: Option<Duration>,
    pub(crate) sandbox_floor: Option<Duration>,
    pub(crate) fork_floor: Option<Duration>,
    pub(crate) cells: &'a [(String, Samples)],
    pub(crate) call: Samples,
    pub(crate) pipe: Samples,
    pub(crate) gathered: Samples,
    pub(crate) host_rss: u64,
    pub(crate) zygote_private: Option<u64>,
    pub(crate) child_private_median: Option<u64>,
    pub(crate) failures: &'a Failures,
}

impl Report<'_> {
    pub(crate) fn text(&self) -> Vec<String> {
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
        l.push("trivial run, closed loop (back to back)   p50        p99".into());
        for (label, s, _) in self.loops {
            if s.is_empty() {
                l.push(format!("  {label:<22} {NONE_SUCCEEDED}"));
                continue;
            }
            l.push(format!("  {:<22} {:>16.2} ms {:>7.2} ms", label, ms(s.p50()), ms(s.quantile(0.99))));
        }
        l.push(String::new());
        l.push("CPU per run, closed loop     machine   (host   shells  zygote  child)".into());
        for (label, _, cpu) in self.loops {
            match cpu {
                None => l.push(format!("  {label:<22} -")),
                Some(c) => l.push(format!(
                    "  {label:<22} {:>7.2} ms ({:.2}   {:.2}    {:.2}    {:.2})",
                    ms(c.machine),
                    ms(c.host),
                    ms(c.shells),
                    ms(c.zygote),
                    ms(c.children)
                )),
            }
        }
        let floor = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), |d| format!("{:.3} ms", ms(d)));
        l.push(format!(
            "  floors: the namespace set {}, with the program's confinement {}, CPython fork + exit with the zygote's imports {}",
            floor(self.namespace_floor),
            floor(self.sandbox_floor),
            floor(self.fork_floor)
        ));
        if let (Some((_, _, Some(p))), Some((_, _, Some(s)))) = (
            self.loops.iter().find(|(l, _, _)| l.ends_with("process")),
            self.loops.iter().find(|(l, _, _)| l.ends_with("sandbox")),
        ) {
            l.push(format!(
                "  sandbox - process: {:.2} ms per run (its floor, namespaces and confinement: {}); process / fork floor: {}",
                ms(s.machine.saturating_sub(p.machine)),
                floor(self.sandbox_floor),
                or_dash(self.fork_floor.map(|f| p.machine.as_secs_f64() / f.as_secs_f64().max(1e-9)), 2)
            ));
        }
        l.push(String::new());
        l.push("runs per second (zygote; runs that succeeded), and the machine's cores busy meanwhile".into());
        for (label, c, rate, busy) in self.rates {
            l.push(format!(
                "  {label:<22} concurrency {c:>2}: {rate:>8.0} runs/s   cores busy {:>3.0} %",
                busy * 100.0
            ));
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
    pub(crate) fn svg(&self) -> String {
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
    pub(crate) fn json(&self) -> String {
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
            num(&mut b, "namespaceSetCpuMs", self.namespace_floor.map(ms))?;
            num(&mut b, "sandboxFloorCpuMs", self.sandbox_floor.map(ms))?;
            num(&mut b, "cpythonForkCpuMs", self.fork_floor.map(ms))?;
            b.end()?;
            b.key("closedLoop")?;
            b.begin_array()?;
            for (label, s, cpu) in self.loops {
                b.begin_object()?;
                b.key("variant")?;
                b.string(label)?;
                num(&mut b, "p50Ms", p50(s).map(ms))?;
                num(&mut b, "p99Ms", q(s, 0.99).map(ms))?;
                num(&mut b, "cpuPerRunMs", cpu.map(|c| ms(c.machine)))?;
                b.key("cpuPerRun")?;
                match cpu {
                    None => b.null()?,
                    Some(c) => {
                        b.begin_object()?;
                        num(&mut b, "machineMs", Some(ms(c.machine)))?;
                        num(&mut b, "processesMs", Some(ms(c.processes())))?;
                        num(&mut b, "hostMs", Some(ms(c.host)))?;
                        num(&mut b, "shellsMs", Some(ms(c.shells)))?;
                        num(&mut b, "zygoteMs", Some(ms(c.zygote)))?;
                        num(&mut b, "childMs", Some(ms(c.children)))?;
                        b.end()?;
                    }
                }
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
            for (label, c, rate, busy) in self.rates {
                b.begin_object()?;
                b.key("variant")?;
                b.string(label)?;
                b.key("concurrency")?;
                b.number(&c.to_string())?;
                num(&mut b, "runsPerSecond", Some(*rate))?;
                num(&mut b, "coresBusy", Some(*busy))?;
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
