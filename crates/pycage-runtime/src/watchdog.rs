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
//!   pool eight times. The samples that only check a budget (a run's
//!   watch, a session between runs: [`sample_with_held`]) read each
//!   process's resident size first, a counter, and PSS, a walk of its page
//!   tables, only when the resident sizes could exceed the budget.
//!
//! [`sample_cpu`] walks the same processes and reads only their `stat`
//! (a session's run edges need the CPU alone).
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
//! # Kernel memory
//!
//! What a run pins in the kernel is in no process's PSS, so it is counted
//! apart ([`Kernel`]) and added to the memory sum:
//!
//! - socket buffers, exactly: the sandbox hands the host a
//!   `NETLINK_SOCK_DIAG` socket made inside the run's network namespace
//!   ([`SockDiag`]); one dump of its `AF_UNIX` and TCP sockets lists every
//!   socket of the run (held, in flight, or orphaned) with the bytes its
//!   queues hold. A dump is skipped when the namespace's own listing (its
//!   `net/unix`; `net/sockstat`'s TCP count) shows it has none of that
//!   kind. Process isolation shares the host's namespace: there, each
//!   `AF_UNIX` socket a run's process holds is looked up by inode;
//!   TCP and UDP buffers, and sockets in flight, are not counted;
//! - pipes: every distinct pipe a run's process holds, at 16 pages (what
//!   a pipe may hold when `F_SETPIPE_SZ` is refused, as the sandbox's
//!   seccomp does);
//! - epoll registrations, from each epoll descriptor's `fdinfo`;
//! - memfds a process holds, by their allocated blocks (process
//!   isolation; the sandbox does not provide `memfd_create`).
//!
//! Descriptors are read from `/proc/<pid>/fd`. A process whose descriptors
//! cannot be read (made non-dumpable, on a host without root) is counted
//! as if each descriptor its `RLIMIT_NOFILE` allows held a full pipe.
//! Besides memory, a run may hold at most [`MAX_RUN_DESCRIPTORS`]
//! descriptors, [`MAX_RUN_EPOLL_WATCHES`] epoll registrations and a
//! quarter of the host's `fs.pipe-user-pages-soft` in pipes, all its
//! processes together: the last two are per-uid quotas of the host,
//! shared with the caller when pycage is not root. This also bounds the
//! cost of a sample.
//!
//! [`watch`] samples a run every [`PERIOD`] and resolves when a budget is
//! crossed; the runtime then ends the run (`timeout` for CPU, `worker-exit`
//! for memory), so the bound is the budget plus what the run can use in
//! one period.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::Pid;

/// Most processes one sample visits.
pub const MAX_PROCESSES: usize = 4096;

/// Most bytes read from one proc file.
pub const MAX_READ: usize = 16 * 1024;

/// Most descriptors a run's processes may hold together.
pub const MAX_RUN_DESCRIPTORS: u64 = 4096;

/// Most epoll registrations a run's processes may hold together (each is
/// kernel memory, and a registration of the host uid's
/// `fs.epoll.max_user_watches`).
pub const MAX_RUN_EPOLL_WATCHES: u64 = 65536;

/// What one epoll registration is counted as: its `epitem` and wait-queue
/// entry with slab overhead (about 200 bytes measured on x86_64).
pub const EPOLL_WATCH_BYTES: u64 = 256;

/// Pages one pipe is counted as: the default (and, with `F_SETPIPE_SZ`
/// refused, the largest) pipe buffer.
pub const PIPE_PAGES: u64 = 16;

/// Most bytes of epoll `fdinfo` read in one sample.
const MAX_FDINFO_BYTES: u64 = 16 << 20;

/// Most sockets one `sock_diag` dump is read for.
const MAX_DIAG_SOCKETS: usize = 1 << 17;

/// A `NETLINK_SOCK_DIAG` socket inside the run's network namespace
/// (`pycage_sandbox::Handoff::sock_diag`): what the watchdog lists the
/// run's sockets through. Samples take turns on it.
#[derive(Debug, Clone)]
pub struct SockDiag(Arc<Mutex<OwnedFd>>);

impl SockDiag {
    /// Wrap the socket the sandbox handed over.
    pub fn new(socket: OwnedFd) -> SockDiag {
        SockDiag(Arc::new(Mutex::new(socket)))
    }
}

impl PartialEq for SockDiag {
    fn eq(&self, other: &SockDiag) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SockDiag {}

/// Which processes make up a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The run's PID namespace, given the host pid of its init process.
    PidNamespace {
        /// Host pid of PID 1 of the run's namespace.
        init: Pid,
        /// A zygote's child, born in the namespace: the program, outside
        /// the init's tree (the zygote is its parent), so walked from too.
        program: Option<Pid>,
        /// The run's network namespace, for its sockets' buffers.
        sockets: Option<SockDiag>,
    },
    /// `root` and its descendants (process isolation: `root` is the run's
    /// first process).
    Descendants {
        /// The run's first process.
        root: Pid,
    },
}

/// What a run holds in the kernel, outside every process's PSS (see the
/// module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kernel {
    /// Bytes queued in the run's sockets (receive, send, forward-allocated,
    /// option and backlog memory).
    pub socket_bytes: u64,
    /// Distinct pipes the run's processes hold.
    pub pipes: u64,
    /// epoll registrations of the run's epoll descriptors.
    pub epoll_watches: u64,
    /// Blocks allocated to memfds the run's processes hold.
    pub memfd_bytes: u64,
    /// Descriptors the run's processes hold.
    pub descriptors: u64,
    /// Processes whose descriptors could not be read (counted at their
    /// `RLIMIT_NOFILE`, each descriptor a full pipe).
    pub hidden: u64,
}

impl Kernel {
    /// The bytes this counts as.
    pub fn bytes(&self) -> u64 {
        let page = rustix::param::page_size() as u64;
        self.socket_bytes
            .saturating_add(self.pipes.saturating_mul(PIPE_PAGES * page))
            .saturating_add(self.epoll_watches.saturating_mul(EPOLL_WATCH_BYTES))
            .saturating_add(self.memfd_bytes)
    }
}

/// One sample of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time of every process of the run, live or reaped by the run.
    pub cpu: Duration,
    /// Proportional set size of every live process, plus what the run
    /// holds in the kernel ([`Kernel::bytes`]), in bytes.
    pub memory_bytes: u64,
    /// The kernel objects and memory in `memory_bytes`.
    pub kernel: Kernel,
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
        /// Of `used`, what the run holds in the kernel.
        kernel: u64,
    },
    /// The run holds more kernel objects of one kind than a run may:
    /// end the run, `worker-exit`.
    Objects {
        /// Which objects ("descriptors", "epoll registrations", "pipes").
        what: &'static str,
        /// Held now (at least).
        used: u64,
        /// Most a run may hold.
        budget: u64,
        /// Processes whose descriptors could not be read, counted at
        /// their `RLIMIT_NOFILE`.
        hidden: u64,
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
            Exceeded::Memory { used, budget, kernel } if *kernel >= 1 << 20 => format!(
                "the memory budget of {} MiB was exceeded by the run's processes together ({} MiB held, {} MiB of it in the kernel: buffers, memfds); the run was ended",
                budget >> 20,
                used >> 20,
                kernel >> 20
            ),
            Exceeded::Memory { used, budget, .. } => format!(
                "the memory budget of {} MiB was exceeded by the run's processes together ({} MiB held); the run was ended",
                budget >> 20,
                used >> 20
            ),
            Exceeded::Objects { what, used, budget, hidden: 0 } => format!(
                "the run's processes together held more than the {budget} {what} a run may hold ({used}); the run was ended"
            ),
            Exceeded::Objects { what, used, budget, hidden } => format!(
                "the run's processes together held more than the {budget} {what} a run may hold ({used}, counting {hidden} process(es) that hide their descriptors at their RLIMIT_NOFILE); the run was ended"
            ),
        }
    }
}

impl Usage {
    /// The first budget this sample exceeds: CPU, then the counts of
    /// kernel objects, then memory.
    pub fn check(&self, budget: &Budget) -> Option<Exceeded> {
        if self.cpu > budget.cpu {
            return Some(Exceeded::Cpu { used: self.cpu, budget: budget.cpu });
        }
        // Counts first: a run over one is over it whatever its memory.
        let k = &self.kernel;
        let objects = [
            ("descriptors", k.descriptors, MAX_RUN_DESCRIPTORS),
            ("epoll registrations", k.epoll_watches, MAX_RUN_EPOLL_WATCHES),
            ("pipes", k.pipes, max_run_pipes()),
        ];
        if let Some((what, used, budget)) = objects.into_iter().find(|(_, used, most)| used > most) {
            return Some(Exceeded::Objects { what, used, budget, hidden: k.hidden });
        }
        (self.memory_bytes > budget.memory_bytes).then(|| Exceeded::Memory {
            used: self.memory_bytes,
            budget: budget.memory_bytes,
            kernel: self.kernel.bytes(),
        })
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

/// `num_threads` of a `/proc/<pid>/stat` line.
fn stat_threads(stat: &str) -> Option<u64> {
    // After the name: ... priority(15) nice(16) num_threads(17).
    stat_fields(stat)?.get(17)?.parse().ok()
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
    fn new(cache: &ScanCache) -> Children {
        // Whether the kernel has them does not change: asked once, not at
        // every sample (a session cell takes two).
        static FILES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *FILES.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists()) {
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
/// ([`rss_slack`]) and what the run holds in the kernel, could exceed the
/// ceiling. A page counts in PSS at most as much as in RSS, so the check's
/// answer is the same; `memory_bytes` is then that upper bound, not PSS.
pub fn sample_with_held(scope: Scope, cache: &ScanCache, held: &HeldFiles, ceiling: u64) -> Usage {
    walk(scope, cache, Detail::Bounded(ceiling), Some(held))
}

/// Pages by which one process's resident size (`statm`) may read low:
/// the kernel sums its three resident counters (file, anonymous, shmem)
/// per CPU and folds a CPU's share in only past a batch
/// (`percpu_counter_batch`, `max(32, 2 * CPUs)`), and kernels before 6.2
/// kept up to 64 events per thread unfolded.
fn rss_slack(threads: u64) -> u64 {
    static PER_PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let per_process = *PER_PROCESS.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64).max(possible_cpus());
        3 * (2 * cpus).max(32) * cpus
    });
    per_process.saturating_add(threads.saturating_mul(64))
}

/// CPUs the kernel may bring online (`/sys/devices/system/cpu/possible`,
/// e.g. `0-63`), which is what its per-CPU counters span.
fn possible_cpus() -> u64 {
    let Some(text) = read_proc("/sys/devices/system/cpu/possible") else { return 1 };
    text.trim()
        .split(',')
        .filter_map(|range| match range.split_once('-') {
            Some((a, b)) => Some(b.parse::<u64>().ok()?.saturating_sub(a.parse().ok()?) + 1),
            None => range.parse::<u64>().ok().map(|_| 1),
        })
        .sum::<u64>()
        .max(1)
}

/// Resident bytes of one process (`statm`'s second field, in pages).
fn rss_of(pid: i32) -> Option<u64> {
    let statm = read_proc(&format!("/proc/{pid}/statm"))?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages.saturating_mul(rustix::param::page_size() as u64))
}

/// Most processes whose files one [`HeldFiles`] holds (a scope has one or
/// two first processes).
const MAX_HELD: usize = 4;

/// The `/proc` files of a scope's first processes (its root; or its init
/// and its program), held open between the samples of a long-lived scope
/// (a session's processes, a run's watch) and read again with `pread`.
///
/// A session samples its processes at every run's end. Opening
/// `/proc/<pid>/stat`, listing `/proc/<pid>/task` and opening each task's
/// `children` file cost about 60 µs of host CPU per cell; two `pread`s of
/// held files cost a fraction of that. A single-threaded process's children
/// are all in its main thread's `children` file (`num_threads` in `stat`
/// says whether it is), so the task list is read only for a process with
/// threads.
///
/// A held file names its process, not its pid: once that process is
/// reaped, reading it fails (`ESRCH`) and the entry is dropped, so a
/// recycled pid is never read through it. At most [`MAX_HELD`] processes'
/// files are held (two descriptors each).
#[derive(Debug, Default)]
pub struct HeldFiles(Mutex<Vec<Held>>);

#[derive(Debug)]
struct Held {
    pid: i32,
    stat: File,
    /// The main thread's `children`.
    children: File,
}

/// A held process's `stat`, and its children when it has one thread.
struct HeldRead {
    stat: String,
    children: Option<Vec<i32>>,
}

impl HeldFiles {
    /// `None` when `pid`'s files cannot be held or read (the caller then
    /// reads by path, as for any other process).
    fn read(&self, pid: i32) -> Option<HeldRead> {
        let mut held = crate::sync::lock(&self.0);
        let index = match held.iter().position(|h| h.pid == pid) {
            Some(i) => i,
            None if held.len() < MAX_HELD => {
                let stat = File::open(format!("/proc/{pid}/stat")).ok()?;
                let children = File::open(format!("/proc/{pid}/task/{pid}/children")).ok()?;
                held.push(Held { pid, stat, children });
                held.len() - 1
            }
            None => return None,
        };
        let read = held[index].read();
        if read.is_none() {
            held.swap_remove(index);
        }
        read
    }
}

impl Held {
    fn read(&self) -> Option<HeldRead> {
        // One record ending in a newline: one read returns all of it.
        let stat = pread_to_end(&self.stat, true)?;
        let children = match stat_threads(&stat) {
            Some(1) => {
                let text = pread_to_end(&self.children, false)?;
                Some(text.split_whitespace().filter_map(|c| c.parse::<i32>().ok()).collect())
            }
            _ => None,
        };
        Some(HeldRead { stat, children })
    }
}

/// A held proc file's contents now (at most [`MAX_READ`] bytes), read
/// from offset 0, which makes the kernel generate it afresh. `line`: the
/// file is one line, complete once a read ends with its newline.
fn pread_to_end(file: &File, line: bool) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1024];
    let mut len = 0;
    loop {
        if len == buf.len() {
            if len >= MAX_READ {
                break;
            }
            buf.resize((len * 2).min(MAX_READ), 0);
        }
        let n = file.read_at(&mut buf[len..], len as u64).ok()?;
        len += n;
        if n == 0 || (line && buf[..len].ends_with(b"\n")) {
            break;
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

/// What a sample reads besides each process's `stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detail {
    /// Nothing: CPU and the process count only.
    Cpu,
    /// Memory, descriptors and (sandboxed) the run's sockets too.
    Full,
    /// [`Detail::Full`], memory exact only where it could exceed this
    /// ceiling (see [`sample_with_held`]).
    Bounded(u64),
}

fn walk(scope: Scope, cache: &ScanCache, detail: Detail, held: Option<&HeldFiles>) -> Usage {
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

/// Most pipes a run may hold: a quarter of the host's
/// `fs.pipe-user-pages-soft` (past which the host uid's new pipes get two
/// pages), none if that is 0 (no limit).
pub fn max_run_pipes() -> u64 {
    static PIPES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PIPES.get_or_init(|| {
        let soft = read_proc("/proc/sys/fs/pipe-user-pages-soft").and_then(|t| t.trim().parse::<u64>().ok());
        match soft {
            Some(0) | None => u64::MAX,
            Some(pages) => pages / 4 / PIPE_PAGES,
        }
    })
}

/// The descriptors of a run's processes, as one sample reads them (see
/// the module docs).
struct Descriptors {
    kernel: Kernel,
    pipes: HashSet<u64>,
    /// Socket inodes to look up one by one (process isolation), or `None`
    /// when the run's network namespace is dumped whole.
    sockets: Option<HashSet<u64>>,
    memfds: HashSet<(u64, u64)>,
    /// Pipes counted for processes whose descriptors could not be read.
    hidden_pipes: u64,
    fdinfo_bytes: u64,
}

impl Descriptors {
    fn new(sockets_by_inode: bool) -> Descriptors {
        Descriptors {
            kernel: Kernel::default(),
            pipes: HashSet::new(),
            sockets: sockets_by_inode.then(HashSet::new),
            memfds: HashSet::new(),
            hidden_pipes: 0,
            fdinfo_bytes: 0,
        }
    }

    /// Past the descriptor cap the run is over it: reading on would only
    /// cost the host.
    fn full(&self) -> bool {
        self.kernel.descriptors > MAX_RUN_DESCRIPTORS
    }

    fn visit(&mut self, pid: i32) {
        if self.full() {
            return;
        }
        let entries = match std::fs::read_dir(format!("/proc/{pid}/fd")) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return self.hidden(pid),
            Err(_) => return,
        };
        for entry in entries.flatten() {
            self.kernel.descriptors += 1;
            if self.full() {
                return;
            }
            let Ok(target) = std::fs::read_link(entry.path()) else { continue };
            let target = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
            if let Some(ino) = bracketed_inode(target, b"pipe:[") {
                self.pipes.insert(ino);
            } else if let Some(ino) = bracketed_inode(target, b"socket:[") {
                if let Some(sockets) = self.sockets.as_mut() {
                    sockets.insert(ino);
                }
            } else if target == b"anon_inode:[eventpoll]" {
                let fd = entry.file_name();
                self.count_epoll(&format!("/proc/{pid}/fdinfo/{}", fd.to_string_lossy()));
            } else if target.starts_with(b"/memfd:") {
                if let Ok(meta) = std::fs::metadata(entry.path()) {
                    use std::os::unix::fs::MetadataExt;
                    if self.memfds.insert((meta.dev(), meta.ino())) {
                        self.kernel.memfd_bytes = self.kernel.memfd_bytes.saturating_add(meta.blocks() * 512);
                    }
                }
            }
        }
    }

    /// A process that may not be inspected (non-dumpable, the host not
    /// root): each descriptor its `RLIMIT_NOFILE` allows counts as held,
    /// and as a full pipe. One that is exiting counts as nothing.
    fn hidden(&mut self, pid: i32) {
        // An exiting process has released its memory map, and /proc then
        // shows it as root's: it hides nothing, its descriptors are going.
        let mapped =
            read_proc(&format!("/proc/{pid}/status")).is_some_and(|s| s.lines().any(|l| l.starts_with("VmSize:")));
        if !mapped {
            return;
        }
        let nofile = read_proc(&format!("/proc/{pid}/limits"))
            .and_then(|limits| {
                let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
                line.trim_start_matches("Max open files").split_whitespace().next()?.parse::<u64>().ok()
            })
            .unwrap_or(MAX_RUN_DESCRIPTORS)
            .min(MAX_RUN_DESCRIPTORS + 1);
        self.kernel.hidden += 1;
        self.kernel.descriptors = self.kernel.descriptors.saturating_add(nofile);
        self.hidden_pipes = self.hidden_pipes.saturating_add(nofile);
    }

    /// Count the `tfd:` lines (one per registration) of an epoll
    /// descriptor's `fdinfo`, within the sample's byte and watch caps.
    fn count_epoll(&mut self, path: &str) {
        use std::io::BufRead;
        let Ok(file) = File::open(path) else { return };
        let left = MAX_FDINFO_BYTES.saturating_sub(self.fdinfo_bytes);
        let mut reader = io::BufReader::new(file.take(left));
        let mut line = Vec::with_capacity(128);
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.fdinfo_bytes += n as u64,
            }
            if line.starts_with(b"tfd:") {
                self.kernel.epoll_watches += 1;
                if self.kernel.epoll_watches > MAX_RUN_EPOLL_WATCHES {
                    break;
                }
            }
        }
    }

    fn finish(mut self) -> Kernel {
        self.kernel.pipes = (self.pipes.len() as u64).saturating_add(self.hidden_pipes);
        if let Some(sockets) = self.sockets.take() {
            if !sockets.is_empty() {
                self.kernel.socket_bytes = unix_sockets_by_inode(&sockets);
            }
        }
        self.kernel
    }
}

/// The number in `prefix<number>]`.
fn bracketed_inode(target: &[u8], prefix: &[u8]) -> Option<u64> {
    let digits = target.strip_prefix(prefix)?.strip_suffix(b"]")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl SockDiag {
    /// Bytes queued in every `AF_UNIX` and TCP socket of the run's network
    /// namespace. What cannot be read counts as nothing (the sample goes on).
    pub fn socket_bytes(&self) -> u64 {
        self.socket_bytes_seen_by(None)
    }

    /// [`SockDiag::socket_bytes`], skipping each dump that `member`'s
    /// `/proc/<member>/net` (a process of the namespace: the run's init)
    /// shows would list nothing. A dump of TCP sockets walks the host's
    /// whole established-connection table whatever the namespace holds
    /// (262,144 buckets on a 24 GiB host: about 2 ms of host CPU), and a
    /// sandboxed session was sampled with one every 0.5 s while idle, a
    /// run every 0.1 s; most runs' namespaces hold no socket at all (those
    /// without egress may make only `AF_UNIX` ones).
    fn socket_bytes_seen_by(&self, member: Option<i32>) -> u64 {
        let (unix, tcp) = match member {
            Some(pid) => (!unix_listing_empty(pid), tcp_in_use(pid) != Some(0)),
            None => (true, true),
        };
        let socket = crate::sync::lock(&self.0);
        let mut total = 0u64;
        if unix {
            let _ = diag::exchange(socket.as_fd(), &diag::unix_request(None), diag::Answer::Unix, &mut total);
        }
        if tcp {
            let request = diag::tcp_request(libc::AF_INET as u8);
            let _ = diag::exchange(socket.as_fd(), &request, diag::Answer::Inet, &mut total);
        }
        total
    }
}

/// Whether `/proc/<pid>/net/unix` lists no socket (its header line alone).
/// The kernel lists there every `AF_UNIX` socket of the namespace, also one
/// waiting to be accepted by a listener outside it. Unreadable: not empty.
fn unix_listing_empty(pid: i32) -> bool {
    read_proc(&format!("/proc/{pid}/net/unix")).is_some_and(|text| listing_is_header_only(&text))
}

fn listing_is_header_only(text: &str) -> bool {
    text.ends_with('\n') && text.matches('\n').count() == 1
}

/// The IPv4 TCP sockets hashed in `pid`'s network namespace
/// (`/proc/<pid>/net/sockstat`, `TCP: inuse N`): every socket that may
/// hold buffers (connected, listening, orphaned and closing) is hashed.
fn tcp_in_use(pid: i32) -> Option<u64> {
    sockstat_tcp_in_use(&read_proc(&format!("/proc/{pid}/net/sockstat"))?)
}

fn sockstat_tcp_in_use(text: &str) -> Option<u64> {
    let fields = text.lines().find_map(|l| l.strip_prefix("TCP: inuse "))?;
    fields.split_whitespace().next()?.parse().ok()
}

/// Bytes queued in the `AF_UNIX` sockets with these inodes, looked up one
/// by one in this process's network namespace (process isolation).
fn unix_sockets_by_inode(inodes: &HashSet<u64>) -> u64 {
    let Ok(socket) = diag::open() else { return 0 };
    let mut total = 0u64;
    for ino in inodes.iter().filter_map(|&ino| u32::try_from(ino).ok()) {
        if diag::exchange(socket.as_fd(), &diag::unix_request(Some(ino)), diag::Answer::Unix, &mut total).is_err() {
            break;
        }
    }
    total
}

/// `sock_diag` over netlink: requests, and the memory of the sockets in
/// the answers. Every message is bounds-checked; anything malformed ends
/// the exchange.
mod diag {
    use std::io;
    use std::os::fd::{BorrowedFd, OwnedFd};
    use std::sync::atomic::{AtomicU32, Ordering};

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const NLM_F_REQUEST: u16 = 1;
    const NLM_F_DUMP: u16 = 0x300;
    const HEADER: usize = 16;
    const UDIAG_SHOW_MEMINFO: u32 = 0x20;
    const UNIX_DIAG_MEMINFO: u16 = 5;
    const INET_DIAG_SKMEMINFO: u16 = 7;
    /// `SK_MEMINFO_*` counted: rmem_alloc, wmem_alloc, fwd_alloc,
    /// wmem_queued, optmem, backlog (not the rcvbuf/sndbuf limits, nor
    /// drops).
    const COUNTED: [usize; 6] = [0, 2, 4, 5, 6, 7];
    /// Longest a reply may take before the exchange is given up.
    const WAIT: rustix::event::Timespec = rustix::event::Timespec { tv_sec: 1, tv_nsec: 0 };

    static SEQ: AtomicU32 = AtomicU32::new(1);

    /// Which message follows the netlink header in an answer.
    #[derive(Clone, Copy)]
    pub(super) enum Answer {
        /// `struct unix_diag_msg` (16 bytes), then attributes.
        Unix,
        /// `struct inet_diag_msg` (72 bytes), then attributes.
        Inet,
    }

    impl Answer {
        fn header(self) -> usize {
            match self {
                Answer::Unix => 16,
                Answer::Inet => 72,
            }
        }
        fn meminfo(self) -> u16 {
            match self {
                Answer::Unix => UNIX_DIAG_MEMINFO,
                Answer::Inet => INET_DIAG_SKMEMINFO,
            }
        }
    }

    pub(super) fn open() -> io::Result<OwnedFd> {
        rustix::net::socket_with(
            rustix::net::AddressFamily::NETLINK,
            rustix::net::SocketType::RAW,
            rustix::net::SocketFlags::CLOEXEC,
            Some(rustix::net::netlink::SOCK_DIAG),
        )
        .map_err(io::Error::from)
    }

    /// `struct unix_diag_req`: every socket (a dump), or the one with
    /// inode `ino`, with its memory.
    pub(super) fn unix_request(ino: Option<u32>) -> (bool, Vec<u8>) {
        let mut req = vec![libc::AF_UNIX as u8, 0, 0, 0];
        req.extend(u32::MAX.to_ne_bytes());
        req.extend(ino.unwrap_or(0).to_ne_bytes());
        req.extend(UDIAG_SHOW_MEMINFO.to_ne_bytes());
        // The cookie: "none" for a lookup by inode.
        let cookie = if ino.is_some() { u32::MAX } else { 0 };
        req.extend(cookie.to_ne_bytes());
        req.extend(cookie.to_ne_bytes());
        (ino.is_none(), req)
    }

    /// `struct inet_diag_req_v2`: every TCP socket of `family`, with its
    /// memory.
    pub(super) fn tcp_request(family: u8) -> (bool, Vec<u8>) {
        let mut req = vec![family, libc::IPPROTO_TCP as u8, 1 << (INET_DIAG_SKMEMINFO - 1), 0];
        req.extend(u32::MAX.to_ne_bytes());
        req.extend([0u8; 48]);
        (true, req)
    }

    /// Send one request and add the memory of every socket in its answer to
    /// `total`, reading at most [`super::MAX_DIAG_SOCKETS`] sockets.
    pub(super) fn exchange(
        socket: BorrowedFd<'_>,
        (dump, body): &(bool, Vec<u8>),
        answer: Answer,
        total: &mut u64,
    ) -> io::Result<()> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let flags = NLM_F_REQUEST | if *dump { NLM_F_DUMP } else { 0 };
        let mut message = Vec::with_capacity(HEADER + body.len());
        message.extend(((HEADER + body.len()) as u32).to_ne_bytes());
        message.extend(SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        message.extend(flags.to_ne_bytes());
        message.extend(seq.to_ne_bytes());
        message.extend(0u32.to_ne_bytes());
        message.extend(body);
        rustix::net::send(socket, &message, rustix::net::SendFlags::empty())?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut sockets = 0usize;
        loop {
            let mut poll = [rustix::event::PollFd::new(&socket, rustix::event::PollFlags::IN)];
            if rustix::event::poll(&mut poll, Some(&WAIT))? == 0 {
                return Err(io::ErrorKind::TimedOut.into());
            }
            let (n, _) = rustix::net::recv(socket, &mut buf[..], rustix::net::RecvFlags::DONTWAIT)?;
            let mut at = 0usize;
            while let Some(head) = buf.get(at..at + HEADER).filter(|_| at + HEADER <= n) {
                let len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]) as usize;
                let kind = u16::from_ne_bytes([head[4], head[5]]);
                let msg_seq = u32::from_ne_bytes([head[8], head[9], head[10], head[11]]);
                let Some(msg) = buf.get(at..at + len).filter(|_| len >= HEADER && at + len <= n) else {
                    return Err(io::ErrorKind::InvalidData.into());
                };
                at += (len + 3) & !3;
                if msg_seq != seq {
                    continue; // an earlier exchange's leftovers
                }
                match kind {
                    NLMSG_DONE | NLMSG_ERROR => return Ok(()),
                    SOCK_DIAG_BY_FAMILY => {
                        *total = total.saturating_add(meminfo(
                            msg.get(HEADER + answer.header()..).unwrap_or_default(),
                            answer.meminfo(),
                        ));
                        sockets += 1;
                        if !*dump || sockets >= super::MAX_DIAG_SOCKETS {
                            return Ok(());
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// The counted `SK_MEMINFO` values in the attribute `kind` of `attrs`.
    fn meminfo(mut attrs: &[u8], kind: u16) -> u64 {
        while attrs.len() >= 4 {
            let len = usize::from(u16::from_ne_bytes([attrs[0], attrs[1]]));
            let attr = u16::from_ne_bytes([attrs[2], attrs[3]]);
            let Some(payload) = attrs.get(4..len).filter(|_| len >= 4) else { return 0 };
            if attr == kind {
                let value = |i: usize| {
                    payload.get(i * 4..i * 4 + 4).map_or(0, |b| u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])))
                };
                return COUNTED.iter().map(|&i| value(i)).sum();
            }
            attrs = attrs.get((len + 3) & !3..).unwrap_or_default();
        }
        0
    }
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
    // Held across the watch's samples (see [`HeldFiles`]).
    let held = std::sync::Arc::new(HeldFiles::default());
    let start = tokio::time::Instant::now() + period;
    let mut ticks = tokio::time::interval_at(start, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        let cache = std::sync::Arc::clone(&cache);
        let (scope, held) = (scope.clone(), std::sync::Arc::clone(&held));
        let sampled = move || sample_with_held(scope, &cache, &held, budget.memory_bytes);
        let Ok(mut usage) = tokio::task::spawn_blocking(sampled).await else {
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
            Exceeded::Memory { .. } | Exceeded::Objects { .. } => crate::outcome::FailureKind::WorkerExit,
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
        assert_eq!(stat_threads(stat), Some(1));
    }

    #[test]
    fn namespace_listings_say_when_a_dump_would_find_nothing() {
        let header = "Num       RefCount Protocol Flags    Type St Inode Path\n";
        assert!(listing_is_header_only(header));
        assert!(!listing_is_header_only(&format!("{header}0000: 00000002 00000000 00010000 0001 01 1234 @x\n")));
        assert!(!listing_is_header_only("Num       RefCount Protocol"), "a cut listing is not empty");
        let sockstat = "sockets: used 5\nTCP: inuse 0 orphan 0 tw 0 alloc 1 mem 0\nUDP: inuse 0 mem 0\n";
        assert_eq!(sockstat_tcp_in_use(sockstat), Some(0));
        assert_eq!(sockstat_tcp_in_use(&sockstat.replace("inuse 0 orphan", "inuse 3 orphan")), Some(3));
        assert_eq!(sockstat_tcp_in_use("sockets: used 5\n"), None);
        // This process's own namespace, read as the watchdog reads a run's.
        let me = std::process::id() as i32;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(tcp_in_use(me).unwrap() >= 1, "a listening socket is hashed");
        drop(listener);
        let (_a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!unix_listing_empty(me));
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
        let usage = Usage { cpu: Duration::from_millis(2500), memory_bytes: 1, processes: 3, ..Usage::default() };
        let exceeded = usage.check(&budget).unwrap();
        assert_eq!(
            exceeded.message(),
            "the CPU budget of 2 s was exceeded by the run's processes together (2.5 s used)"
        );
        let usage = Usage { cpu: Duration::ZERO, memory_bytes: 300 << 20, processes: 12, ..Usage::default() };
        assert_eq!(
            usage.check(&budget).unwrap().message(),
            "the memory budget of 128 MiB was exceeded by the run's processes together (300 MiB held); the run was ended"
        );
        assert_eq!(Usage::default().check(&budget), None);
    }

    /// A process tree in its own process group, started by `program`
    /// (python3), once it has printed `ready`. Killed with its group on drop.
    struct Tree(Option<std::process::Child>);

    impl Tree {
        fn start(program: &str) -> Tree {
            use std::io::BufRead;
            use std::os::unix::process::CommandExt;
            let mut child = std::process::Command::new("python3")
                .args(["-I", "-c", program])
                .stdout(std::process::Stdio::piped())
                .process_group(0)
                .spawn()
                .expect("python3 runs");
            let mut out = io::BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line, "ready\n");
            Tree(Some(child))
        }

        fn pid(&self) -> i32 {
            self.0.as_ref().map_or(0, |c| c.id() as i32)
        }

        fn scope(&self) -> Scope {
            Scope::Descendants { root: Pid::from_raw(self.pid()).unwrap() }
        }

        /// Kill the group and reap its leader (once: its group id may be
        /// reused after that).
        fn end(&mut self) {
            if let Some(mut child) = self.0.take() {
                // SAFETY: signalling the process group this test created,
                // whose leader is not reaped yet.
                assert_eq!(unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) }, 0);
                child.wait().unwrap();
            }
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            self.end();
        }
    }

    /// Children started before `ready`: two from the main thread of a
    /// single-threaded process.
    const TWO_CHILDREN: &str = "import subprocess, time\n\
        kids = [subprocess.Popen(['sleep', '60']) for _ in range(2)]\n\
        print('ready', flush=True)\ntime.sleep(60)";

    #[test]
    fn held_files_find_what_paths_find_and_drop_a_reaped_process() {
        let tree = Tree::start(TWO_CHILDREN);
        let (cache, held) = (ScanCache::default(), HeldFiles::default());
        let by_path = walk(tree.scope(), &cache, Detail::Full, None);
        assert_eq!(by_path.processes, 3, "{by_path:?}");
        for _ in 0..3 {
            let by_held = walk(tree.scope(), &cache, Detail::Full, Some(&held));
            assert_eq!(by_held.processes, 3, "{by_held:?}");
            assert!(by_held.memory_bytes > 0 && by_held.kernel.descriptors > 0, "{by_held:?}");
        }
        assert_eq!(crate::sync::lock(&held.0).len(), 1, "only the first process is held");
        let root = tree.pid();
        let mut tree = tree;
        tree.end();
        // Reaped: the held files read nothing (a recycled pid is not
        // theirs), the entry is dropped, and the path finds nothing either.
        let after = walk(Scope::Descendants { root: Pid::from_raw(root).unwrap() }, &cache, Detail::Cpu, Some(&held));
        assert_eq!(after.processes, 0, "{after:?}");
        assert!(crate::sync::lock(&held.0).is_empty());
    }

    #[test]
    fn against_a_ceiling_resident_sizes_stand_in_for_pss_until_they_could_pass_it() {
        let tree = Tree::start(TWO_CHILDREN);
        let (cache, held) = (ScanCache::default(), HeldFiles::default());
        let exact = walk(tree.scope(), &cache, Detail::Full, None);
        let roomy = walk(tree.scope(), &cache, Detail::Bounded(u64::MAX / 2), Some(&held));
        let tight = walk(tree.scope(), &cache, Detail::Bounded(1), Some(&held));
        assert_eq!((roomy.processes, tight.processes), (3, 3));
        // Resident sizes and their slack bound PSS from above.
        assert!(roomy.memory_bytes > exact.memory_bytes, "{roomy:?} against {exact:?}");
        assert_eq!(roomy.check(&Budget { cpu: Duration::MAX, memory_bytes: u64::MAX / 2 }), None);
        // Past the ceiling, PSS is read. The tree is asleep, but its PSS
        // moves as other processes (tests in parallel) map and unmap the
        // same libraries: near one of two exact readings around it.
        let exact_after = walk(tree.scope(), &cache, Detail::Full, None);
        assert!(tight.memory_bytes < roomy.memory_bytes, "{tight:?} against {roomy:?}");
        let near = |e: &Usage| tight.memory_bytes.abs_diff(e.memory_bytes) < e.memory_bytes / 4;
        assert!(near(&exact) || near(&exact_after), "{tight:?} against {exact:?} and {exact_after:?}");
        let exceeded = tight.check(&Budget { cpu: Duration::MAX, memory_bytes: 1 });
        assert!(matches!(exceeded, Some(Exceeded::Memory { .. })), "{exceeded:?}");
    }

    #[test]
    fn the_counting_slack_spans_every_possible_cpu() {
        assert!(possible_cpus() >= std::thread::available_parallelism().unwrap().get() as u64);
        assert!(rss_slack(1) >= 3 * 32 + 64);
        assert!(rss_slack(10) > rss_slack(1));
    }

    #[test]
    fn held_files_list_every_thread_s_children_once_a_process_has_threads() {
        // The child is forked from a second thread that stays alive: it is
        // in that thread's `children`, not the main thread's.
        let mut tree = Tree::start(
            "import subprocess, threading, time\n\
             forked = threading.Event()\n\
             def fork():\n    subprocess.Popen(['sleep', '60'])\n    forked.set()\n    time.sleep(60)\n\
             threading.Thread(target=fork, daemon=True).start()\n\
             forked.wait()\nprint('ready', flush=True)\ntime.sleep(60)",
        );
        let held = HeldFiles::default();
        let usage = walk(tree.scope(), &ScanCache::default(), Detail::Cpu, Some(&held));
        assert_eq!(usage.processes, 2, "{usage:?}");
        tree.end();
    }

    #[test]
    fn a_vanished_scope_is_empty_not_an_error() {
        // The highest pid number is never live.
        let gone = Pid::from_raw(i32::MAX).unwrap();
        assert_eq!(sample(Scope::PidNamespace { init: gone, program: None, sockets: None }), Usage::default());
        assert_eq!(sample(Scope::Descendants { root: gone }), Usage::default());
    }
}
