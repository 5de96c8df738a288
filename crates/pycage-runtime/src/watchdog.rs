//! A host-side view of a whole run's CPU time and memory, for budgets that
//! no per-process rlimit can hold (`RLIMIT_CPU` and `RLIMIT_AS` count one
//! process; a run can be many).
//!
//! [`sample`] finds every process of a run and sums:
//!
//! - CPU: `utime + stime + cutime + cstime` of each live process, from
//!   `/proc/<pid>/stat`. A process that exited and was reaped by another
//!   process of the run is in its reaper's `cutime/cstime`, so nothing the
//!   run spent is lost, and nothing is counted twice (a reaped process is
//!   gone from `/proc`). In the sandbox every orphan is reparented to the
//!   run's init, which reaps it.
//! - Memory: the proportional set size (`Pss`, which includes shared
//!   memory pages, divided among the processes that map them) from
//!   `/proc/<pid>/smaps_rollup`, or `VmRSS` from `/proc/<pid>/status` when
//!   that cannot be read. PSS does not count a page shared by a forked
//!   pool eight times.
//!
//! Which processes: [`Scope::PidNamespace`] starts at the run's init
//! process (PID 1 of the run's namespace, [`pycage_sandbox::Handoff`] gives
//! its host pid) and walks `/proc/<pid>/task/<tid>/children`, keeping a
//! process only while its parent (`/proc/<pid>/stat`) is still the one it
//! was found under, so a pid recycled by an unrelated host process
//! mid-walk is not counted. [`Scope::Descendants`] (process isolation)
//! walks the same way from the run's first process; an orphan
//! (a double-forked daemon, reparented to the host's init) is not found,
//! which is one reason process isolation contains accidents, not attacks.
//!
//! Bounds: at most [`MAX_PROCESSES`] processes per sample (the run's own
//! `RLIMIT_NPROC` is far below), at most [`MAX_READ`] bytes read per proc
//! file, and no allocation that depends on what a process controls beyond
//! that. A process that vanishes mid-sample is skipped, never an error.
//!
//! Memory outside every process (files in the run's tmpfs, detached SysV
//! shared memory) is not in these sums: the tmpfs and the IPC namespace cap
//! it ([`tmpfs_used`] reads the former, for callers that report it).
//!
//! [`watch`] samples a run every [`PERIOD`] and resolves when a budget is
//! crossed; the runtime then ends the run (`timeout` for CPU, `worker-exit`
//! for memory), so the bound is the budget plus what the run can use in
//! one period.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::time::Duration;

use rustix::process::Pid;

/// Most processes one sample visits.
pub const MAX_PROCESSES: usize = 4096;

/// Most bytes read from one proc file.
pub const MAX_READ: usize = 16 * 1024;

/// Which processes make up a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The run's PID namespace, given the host pid of its init process.
    PidNamespace {
        /// Host pid of PID 1 of the run's namespace.
        init: Pid,
        /// A zygote's child that joined the namespace from outside: the
        /// program is its child (born in the namespace), not the init's.
        joined: Option<Pid>,
    },
    /// `root` and its descendants (process isolation: `root` is the run's
    /// first process).
    Descendants {
        /// The run's first process.
        root: Pid,
    },
}

/// One sample of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time of every process of the run, live or reaped by the run.
    pub cpu: Duration,
    /// Proportional set size of every live process, in bytes.
    pub memory_bytes: u64,
    /// Live processes found.
    pub processes: usize,
    /// [`MAX_PROCESSES`] stopped the walk.
    pub truncated: bool,
}

/// The run-wide budgets a [`Usage`] is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Total CPU time.
    pub cpu: Duration,
    /// Total memory of the run's processes.
    pub memory_bytes: u64,
}

impl Budget {
    /// No budget (nothing is ever exceeded).
    pub const UNLIMITED: Budget = Budget { cpu: Duration::MAX, memory_bytes: u64::MAX };
}

/// A budget a sample went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// The run used more CPU time than its budget: settle as `timeout`.
    Cpu {
        /// Used so far.
        used: Duration,
        /// The budget.
        budget: Duration,
    },
    /// The run's processes hold more memory than its budget: end the run,
    /// `worker-exit`.
    Memory {
        /// Held now.
        used: u64,
        /// The budget.
        budget: u64,
    },
}

impl Exceeded {
    /// The run failure message, naming the budget.
    pub fn message(&self) -> String {
        match self {
            Exceeded::Cpu { used, budget } => format!(
                "the CPU budget of {} s was exceeded by the run's processes together ({:.1} s used)",
                budget.as_secs_f64(),
                used.as_secs_f64()
            ),
            Exceeded::Memory { used, budget } => format!(
                "the memory budget of {} MiB was exceeded by the run's processes together ({} MiB held); the run was ended",
                budget >> 20,
                used >> 20
            ),
        }
    }
}

impl Usage {
    /// The first budget this sample exceeds, CPU first.
    pub fn check(&self, budget: &Budget) -> Option<Exceeded> {
        if self.cpu > budget.cpu {
            return Some(Exceeded::Cpu { used: self.cpu, budget: budget.cpu });
        }
        if self.memory_bytes > budget.memory_bytes {
            return Some(Exceeded::Memory { used: self.memory_bytes, budget: budget.memory_bytes });
        }
        None
    }
}

/// Read at most [`MAX_READ`] bytes of a proc file; `None` if it is gone or
/// unreadable (a process that exited, or one we may not inspect).
fn read_proc(path: &str) -> Option<String> {
    let file = File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_READ as u64).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The fields of `/proc/<pid>/stat` after the command name, which may hold
/// spaces and parentheses: everything after the last `)`.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// `(process group, utime + stime + cutime + cstime in ticks)`.
fn parse_stat(stat: &str) -> Option<(i32, u64)> {
    let fields = stat_fields(stat)?;
    // After the name: state(0) ppid(1) pgrp(2) ... utime(11) stime(12) cutime(13) cstime(14).
    let pgrp = fields.get(2)?.parse().ok()?;
    let mut ticks = 0u64;
    for index in 11..=14 {
        // cutime/cstime are signed in the kernel's type, never negative.
        let value: i64 = fields.get(index)?.parse().ok()?;
        ticks = ticks.saturating_add(u64::try_from(value).unwrap_or(0));
    }
    Some((pgrp, ticks))
}

/// A `Key:   1234 kB` line's value in bytes.
fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        let kb: u64 = value.split_whitespace().next()?.parse().ok()?;
        Some(kb.saturating_mul(1024))
    })
}

/// Memory of one process: PSS, else RSS.
fn memory_of(pid: i32) -> Option<u64> {
    if let Some(rollup) = read_proc(&format!("/proc/{pid}/smaps_rollup")) {
        if let Some(pss) = kb_field(&rollup, "Pss") {
            return Some(pss);
        }
    }
    kb_field(&read_proc(&format!("/proc/{pid}/status"))?, "VmRSS")
}

/// How children are found: the kernel's per-task `children` files
/// (`CONFIG_PROC_CHILDREN`), or a scan of every `/proc/<pid>/stat`, shared
/// by every run's watchdog and redone at most every half [`PERIOD`] (a
/// process younger than that may be missed by one sample).
enum Children {
    Files,
    Scanned(ParentIndex),
}

/// `(parent, child)` pairs of one scan of `/proc`, sorted by parent.
type ParentIndex = std::sync::Arc<Vec<(i32, i32)>>;

/// A scan of `/proc` shared by the runs of one runtime (taken at most once
/// per half period, however many runs are sampled), for kernels without
/// `/proc/<pid>/task/<tid>/children`.
#[derive(Default)]
pub struct ScanCache(std::sync::Mutex<Option<(std::time::Instant, ParentIndex)>>);

fn scan_parents() -> Vec<(i32, i32)> {
    let mut pairs = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
            let Some(stat) = read_proc(&format!("/proc/{pid}/stat")) else { continue };
            if let Some(ppid) = stat_fields(&stat).and_then(|f| f.get(1).and_then(|p| p.parse::<i32>().ok())) {
                pairs.push((ppid, pid));
            }
        }
    }
    pairs.sort_unstable();
    pairs
}

impl Children {
    fn new(root: i32, cache: &ScanCache) -> Children {
        if std::path::Path::new(&format!("/proc/{root}/task/{root}/children")).exists() {
            return Children::Files;
        }
        let fresh = PERIOD / 2;
        // A poisoned cache is still a cache: a panic elsewhere must not
        // stop the sampling that bounds every run.
        let mut cached = crate::sync::lock(&cache.0);
        if let Some((taken, pairs)) = cached.as_ref() {
            if taken.elapsed() < fresh {
                return Children::Scanned(std::sync::Arc::clone(pairs));
            }
        }
        let pairs = std::sync::Arc::new(scan_parents());
        *cached = Some((std::time::Instant::now(), std::sync::Arc::clone(&pairs)));
        Children::Scanned(pairs)
    }

    /// Append the children of `pid` to `out`.
    fn of(&self, pid: i32, out: &mut Vec<i32>) {
        match self {
            Children::Files => {
                let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
                for task in tasks.flatten().take(MAX_PROCESSES) {
                    let Some(tid) = task.file_name().to_str().map(str::to_owned) else { continue };
                    if let Some(children) = read_proc(&format!("/proc/{pid}/task/{tid}/children")) {
                        out.extend(children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
                    }
                }
            }
            Children::Scanned(pairs) => {
                let start = pairs.partition_point(|(parent, _)| *parent < pid);
                out.extend(pairs.iter().skip(start).take_while(|(parent, _)| *parent == pid).map(|(_, child)| *child));
            }
        }
    }
}

/// Sum a run's CPU time and memory now. See the module docs. Blocking:
/// it reads `/proc` (call it off async worker threads).
pub fn sample(scope: Scope) -> Usage {
    sample_with(scope, &ScanCache::default())
}

/// [`sample`], sharing `cache`'s scan of `/proc` with other runs.
pub fn sample_with(scope: Scope, cache: &ScanCache) -> Usage {
    let ticks_per_second = rustix::param::clock_ticks_per_second().max(1);
    let mut usage = Usage::default();
    let mut ticks = 0u64;
    let count = |pid: i32, stat: &str, usage: &mut Usage, ticks: &mut u64| {
        if let Some((_, t)) = parse_stat(stat) {
            *ticks = ticks.saturating_add(t);
            usage.memory_bytes = usage.memory_bytes.saturating_add(memory_of(pid).unwrap_or(0));
            usage.processes += 1;
        }
    };
    // Roots whose memory is not the program's: pycage's own reaper (a copy
    // of the host), the zygote child that joined (a copy of the zygote).
    let (root, joined, skip_root_memory) = match scope {
        Scope::PidNamespace { init, joined } => {
            (init.as_raw_nonzero().get(), joined.map(|j| j.as_raw_nonzero().get()), true)
        }
        Scope::Descendants { root } => (root.as_raw_nonzero().get(), None, false),
    };
    let children = Children::new(root, cache);
    // (pid, the parent it was found under)
    let mut queue = vec![(root, None)];
    queue.extend(joined.map(|j| (j, None)));
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    while let Some((pid, parent)) = queue.pop() {
        if !seen.insert(pid) {
            continue;
        }
        if seen.len() > MAX_PROCESSES {
            usage.truncated = true;
            break;
        }
        let Some(stat) = read_proc(&format!("/proc/{pid}/stat")) else { continue };
        // A pid that exited and was recycled since its parent was read has
        // another parent now: not the run's.
        let ppid = stat_fields(&stat).and_then(|f| f.get(1).and_then(|p| p.parse::<i32>().ok()));
        if parent.is_some() && ppid != parent {
            continue;
        }
        if skip_root_memory && (pid == root || Some(pid) == joined) {
            // pycage's own reaper: its CPU is what it reaped, its memory
            // (a copy of the host's) is not the program's.
            if let Some((_, t)) = parse_stat(&stat) {
                ticks = ticks.saturating_add(t);
            }
        } else {
            count(pid, &stat, &mut usage, &mut ticks);
        }
        found.clear();
        children.of(pid, &mut found);
        queue.extend(found.iter().map(|&child| (child, Some(pid))));
    }
    usage.cpu = Duration::from_nanos(ticks.saturating_mul(1_000_000_000 / ticks_per_second));
    usage
}

/// How often a run is sampled. A run shorter than this is never sampled.
pub const PERIOD: Duration = Duration::from_millis(100);

/// Sample `scope` every `period` (the first time after one period) until
/// a budget is exceeded, and say which. Each sample reads `/proc` on
/// tokio's blocking pool, never on an async worker thread.
pub async fn watch(scope: Scope, budget: Budget, period: Duration) -> Exceeded {
    watch_from(scope, budget, period, Duration::ZERO, std::sync::Arc::new(ScanCache::default())).await
}

/// [`watch`] with CPU counted from `cpu_baseline` (what the processes had
/// used before: a session's earlier runs) and a shared scan cache.
pub async fn watch_from(
    scope: Scope,
    budget: Budget,
    period: Duration,
    cpu_baseline: Duration,
    cache: std::sync::Arc<ScanCache>,
) -> Exceeded {
    let start = tokio::time::Instant::now() + period;
    let mut ticks = tokio::time::interval_at(start, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        let cache = std::sync::Arc::clone(&cache);
        let Ok(mut usage) = tokio::task::spawn_blocking(move || sample_with(scope, &cache)).await else {
            continue;
        };
        usage.cpu = usage.cpu.saturating_sub(cpu_baseline);
        if let Some(exceeded) = usage.check(&budget) {
            return exceeded;
        }
    }
}

/// A run's budget watch, as the run loop awaits it: the failure to settle
/// with. Pending forever when there is nothing to watch.
pub(crate) type BudgetWatch =
    std::pin::Pin<Box<dyn std::future::Future<Output = (crate::outcome::FailureKind, String)> + Send>>;

/// The run loop's view of [`watch_from`].
pub(crate) fn budget_watch(
    scope: Option<Scope>,
    budget: Budget,
    cpu_baseline: Duration,
    cache: std::sync::Arc<ScanCache>,
) -> BudgetWatch {
    Box::pin(async move {
        let Some(scope) = scope else { return std::future::pending().await };
        let exceeded = watch_from(scope, budget, PERIOD, cpu_baseline, cache).await;
        let kind = match exceeded {
            Exceeded::Cpu { .. } => crate::outcome::FailureKind::Timeout,
            Exceeded::Memory { .. } => crate::outcome::FailureKind::WorkerExit,
        };
        (kind, exceeded.message())
    })
}

/// Bytes in use in the tmpfs holding `dir` (the run's `/work`, `/tmp` and
/// `/dev/shm`: memory no process's PSS shows).
pub fn tmpfs_used(dir: impl AsFd) -> io::Result<u64> {
    let stat = rustix::fs::fstatvfs(dir).map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))?;
    Ok(stat.f_blocks.saturating_sub(stat.f_bfree).saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_hostile_names_parse() {
        let stat = "1234 (a) b) (c) S 1 777 777 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0 100 0 0";
        assert_eq!(parse_stat(stat), Some((777, 310)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn kb_fields() {
        let text = "Rss:     2048 kB\nPss:      1024 kB\nPss_Shmem:  12 kB\n";
        assert_eq!(kb_field(text, "Pss"), Some(1 << 20));
        assert_eq!(kb_field(text, "Rss"), Some(2 << 20));
        assert_eq!(kb_field(text, "Swap"), None);
    }

    #[test]
    fn budgets_name_what_was_exceeded() {
        let budget = Budget { cpu: Duration::from_secs(2), memory_bytes: 128 << 20 };
        let usage = Usage { cpu: Duration::from_millis(2500), memory_bytes: 1, processes: 3, truncated: false };
        let exceeded = usage.check(&budget).unwrap();
        assert_eq!(
            exceeded.message(),
            "the CPU budget of 2 s was exceeded by the run's processes together (2.5 s used)"
        );
        let usage = Usage { cpu: Duration::ZERO, memory_bytes: 300 << 20, processes: 12, truncated: false };
        assert_eq!(
            usage.check(&budget).unwrap().message(),
            "the memory budget of 128 MiB was exceeded by the run's processes together (300 MiB held); the run was ended"
        );
        assert_eq!(Usage::default().check(&budget), None);
    }

    #[test]
    fn a_vanished_scope_is_empty_not_an_error() {
        // The highest pid number is never live.
        let gone = Pid::from_raw(i32::MAX).unwrap();
        assert_eq!(sample(Scope::PidNamespace { init: gone, joined: None }), Usage::default());
        assert_eq!(sample(Scope::Descendants { root: gone }), Usage::default());
    }
}
