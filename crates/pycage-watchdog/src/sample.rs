//! One sample of a run: the walk over its processes and what it sums.

use std::time::Duration;

use crate::limits::*;

use crate::descriptors::*;
use crate::procfs::*;
use crate::usage::*;

/// Sum a run's CPU time and memory now. See the module docs. Blocking:
/// it reads `/proc` (call it off async worker threads).
pub fn sample(scope: Scope) -> Usage {
    sample_with(scope, &ScanCache::default())
}

/// [`sample`], sharing `cache`'s scan of `/proc` with other runs.
pub fn sample_with(scope: Scope, cache: &ScanCache) -> Usage {
    walk(scope, cache, Detail::Full, None)
}

/// The run's CPU time alone, as [`sample_with`] counts it. What a
/// session's run edges need: it reads one `stat` per process, where a full
/// sample also reads every process's `smaps_rollup` and descriptors and
/// dumps the run's sockets (a session cell took three such samples, all for
/// their CPU).
pub fn sample_cpu(scope: Scope, cache: &ScanCache) -> Duration {
    walk(scope, cache, Detail::Cpu, None).cpu
}

/// [`sample_cpu`], reading the scope's first processes through `held`.
pub fn sample_cpu_held(scope: Scope, cache: &ScanCache, held: &HeldFiles) -> Duration {
    walk(scope, cache, Detail::Cpu, Some(held)).cpu
}

/// [`sample_with`], reading the scope's first processes through `held`,
/// for a check against a memory budget of `ceiling` bytes: the processes'
/// resident sizes (`/proc/<pid>/statm`, a counter the kernel keeps) are
/// read first, and their proportional sizes (`smaps_rollup`, a walk of
/// every page table: about 0.35 ms for one idle CPython child, per sample)
/// only when the resident sizes together, with the kernel's counting slack
/// (`rss_slack`) and what the run holds in the kernel, could exceed the
/// ceiling. A page counts in PSS at most as much as in RSS, so the check's
/// answer is the same; `memory_bytes` is then that upper bound, not PSS.
pub fn sample_with_held(scope: Scope, cache: &ScanCache, held: &HeldFiles, ceiling: u64) -> Usage {
    walk(scope, cache, Detail::Bounded(ceiling), Some(held))
}

/// What a sample reads besides each process's `stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detail {
    /// Nothing: CPU and the process count only.
    Cpu,
    /// Memory, descriptors and (sandboxed) the run's sockets too.
    Full,
    /// [`Detail::Full`], memory exact only where it could exceed this
    /// ceiling (see [`sample_with_held`]).
    Bounded(u64),
}

pub(crate) fn walk(scope: Scope, cache: &ScanCache, detail: Detail, held: Option<&HeldFiles>) -> Usage {
    let full = detail != Detail::Cpu;
    let ceiling = match detail {
        Detail::Bounded(ceiling) => Some(ceiling),
        _ => None,
    };
    let ticks_per_second = rustix::param::clock_ticks_per_second().max(1);
    let mut usage = Usage::default();
    let mut ticks = 0u64;
    // Against a ceiling: resident sizes and their slack first, and the
    // processes whose PSS to read should they not do.
    let (mut resident, mut counted) = (0u64, Vec::new());
    let page = rustix::param::page_size() as u64;
    let mut count = |pid: i32, stat: &str, usage: &mut Usage, ticks: &mut u64| {
        if let Some((_, t)) = parse_stat(stat) {
            *ticks = ticks.saturating_add(t);
            if ceiling.is_some() {
                // Threads unknown: the slack of as many as a run may have processes.
                let slack = rss_slack(stat_threads(stat).unwrap_or(MAX_PROCESSES as u64)).saturating_mul(page);
                // Unreadable: as if it held the whole ceiling (PSS decides).
                let rss = rss_of(pid).unwrap_or(u64::MAX);
                resident = resident.saturating_add(rss).saturating_add(slack);
                counted.push(pid);
            } else if full {
                usage.memory_bytes = usage.memory_bytes.saturating_add(memory_of(pid).unwrap_or(0));
            }
            usage.processes += 1;
        }
    };
    // The root whose memory is not the program's: pycage's own reaper (a
    // copy of the host).
    let (root, program, skip_root_memory, sockets) = match &scope {
        Scope::PidNamespace { init, program, sockets } => {
            (init.as_raw_nonzero().get(), program.map(|p| p.as_raw_nonzero().get()), true, sockets.clone())
        }
        Scope::Descendants { root } => (root.as_raw_nonzero().get(), None, false, None),
    };
    // Without the run's own network namespace, its sockets are found
    // through its descriptors.
    let mut descriptors = Descriptors::new(sockets.is_none());
    let children = Children::new(cache);
    // (pid, the parent it was found under)
    let mut queue = vec![(root, None)];
    queue.extend(program.map(|p| (p, None)));
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
        // A first process may be read through held files.
        let read = held.filter(|_| parent.is_none()).and_then(|h| h.read(pid));
        let (stat, held_children) = match read {
            Some(r) => (r.stat, r.children),
            None => match read_proc(&format!("/proc/{pid}/stat")) {
                Some(stat) => (stat, None),
                None => continue,
            },
        };
        // A pid that exited and was recycled since its parent was read has
        // another parent now: not the run's.
        let ppid = stat_fields(&stat).and_then(|f| f.get(1).and_then(|p| p.parse::<i32>().ok()));
        if parent.is_some() && ppid != parent {
            continue;
        }
        if skip_root_memory && pid == root {
            // pycage's own reaper: its CPU is what it reaped, its memory
            // (a copy of the host's) is not the program's.
            if let Some((_, t)) = parse_stat(&stat) {
                ticks = ticks.saturating_add(t);
            }
        } else {
            count(pid, &stat, &mut usage, &mut ticks);
            if full {
                descriptors.visit(pid);
            }
        }
        found.clear();
        match held_children {
            Some(held) => found.extend(held),
            None => children.of(pid, &mut found),
        }
        queue.extend(found.iter().map(|&child| (child, Some(pid))));
    }
    usage.cpu = Duration::from_nanos(ticks.saturating_mul(1_000_000_000 / ticks_per_second));
    if !full {
        return usage;
    }
    let mut kernel = descriptors.finish();
    if let Some(diag) = sockets {
        // The run's init is in the namespace.
        kernel.socket_bytes = diag.socket_bytes_seen_by(Some(root));
    }
    usage.kernel = kernel;
    if let Some(ceiling) = ceiling {
        usage.memory_bytes = if resident.saturating_add(kernel.bytes()) <= ceiling {
            resident
        } else {
            counted.iter().map(|&pid| memory_of(pid).unwrap_or(0)).fold(0u64, u64::saturating_add)
        };
    }
    usage.memory_bytes = usage.memory_bytes.saturating_add(kernel.bytes());
    usage
}
