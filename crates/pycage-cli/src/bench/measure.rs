//! What `pycage bench` measures with and against: latency samples, the
//! floors it runs beside pycage (a fresh interpreter, a pipe round trip),
//! CPU and memory of the processes a run involves.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// Latency samples and their summary.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples(pub(crate) Vec<Duration>);

impl Samples {
    pub(crate) fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
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

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
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
pub(crate) fn pipe_round_trip(python: &Path, n: u32) -> anyhow::Result<Duration> {
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

/// CPU time (user + system) of this process, of its reaped children, and
/// of each of `others` (the zygote, the shell helper) with the children it
/// reaped: everything a run costs, on every side (host, sandbox shells,
/// zygote, the run's process).
pub(crate) fn cpu_now(others: &[Option<u32>]) -> Duration {
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

/// `Private_Clean + Private_Dirty` of a process, in KiB.
pub(crate) fn private_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some(field("Private_Clean:")? + field("Private_Dirty:")?)
}

pub(crate) fn rss_kib(pid: &str) -> Option<u64> {
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

/// What a row without a single successful run shows instead of figures.
pub(crate) const NONE_SUCCEEDED: &str = "no run succeeded";

/// `a / b` of two medians, when both have samples.
pub(crate) fn ratio(a: &Samples, b: &Samples) -> Option<f64> {
    (!a.is_empty() && !b.is_empty()).then(|| a.p50().as_secs_f64() / b.p50().as_secs_f64())
}

pub(crate) fn or_dash(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".to_owned(), |x| format!("{x:.digits$}"))
}

/// The whole machine's busy CPU so far (`/proc/stat`: every state but idle
/// and I/O wait), across cores.
pub(crate) fn busy() -> Duration {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> =
        text.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    let ticks = fields.iter().sum::<u64>().saturating_sub(idle);
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    Duration::from_nanos(ticks.saturating_mul(1_000_000_000 / per_second))
}

/// CPU of each side of a run, summed over a stretch of runs: the host
/// process, the shells (the shell helper and what it reaped), the zygote
/// itself, the runs' processes (what the zygote reaped), and the whole
/// machine (kernel threads included).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuSplit {
    pub(crate) host: Duration,
    pub(crate) shells: Duration,
    pub(crate) zygote: Duration,
    pub(crate) children: Duration,
    pub(crate) machine: Duration,
}

impl CpuSplit {
    /// Now, for a runtime whose zygote and shell helper are these.
    pub(crate) fn now(zygote: Option<u32>, helper: Option<u32>) -> CpuSplit {
        let host = cpu_now(&[]);
        let (z_self, z_children) = zygote.map(process_cpu).unwrap_or_default();
        let (h_self, h_children) = helper.map(process_cpu).unwrap_or_default();
        CpuSplit { host, shells: h_self + h_children, zygote: z_self, children: z_children, machine: busy() }
    }

    /// `self - before`, per run of `n`.
    pub(crate) fn per_run(&self, before: &CpuSplit, n: u32) -> CpuSplit {
        let d = |a: Duration, b: Duration| a.saturating_sub(b) / n.max(1);
        CpuSplit {
            host: d(self.host, before.host),
            shells: d(self.shells, before.shells),
            zygote: d(self.zygote, before.zygote),
            children: d(self.children, before.children),
            machine: d(self.machine, before.machine),
        }
    }

    /// Both together: two spans' CPU (each `after.per_run(&before, 1)`).
    pub(crate) fn plus(&self, other: &CpuSplit) -> CpuSplit {
        CpuSplit {
            host: self.host + other.host,
            shells: self.shells + other.shells,
            zygote: self.zygote + other.zygote,
            children: self.children + other.children,
            machine: self.machine + other.machine,
        }
    }

    /// Host, shells, zygote and children together.
    pub(crate) fn processes(&self) -> Duration {
        self.host + self.shells + self.zygote + self.children
    }
}

/// A process's own CPU and that of the children it reaped.
fn process_cpu(pid: u32) -> (Duration, Duration) {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return Default::default() };
    let Some((_, rest)) = stat.rsplit_once(')') else { return Default::default() };
    let fields: Vec<u64> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    let t =
        |i: usize| Duration::from_nanos(fields.get(i).copied().unwrap_or(0).saturating_mul(1_000_000_000 / per_second));
    // After the name: utime(11) stime(12) cutime(13) cstime(14).
    (t(11) + t(12), t(13) + t(14))
}
