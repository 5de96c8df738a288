//! Reading `/proc`: bounded reads of a process's `stat`, `status` and
//! `smaps_rollup`, the parent index the walk finds children through, and
//! proc files held open across a watch's samples.

use std::fs::File;
use std::io::Read;
use std::sync::Mutex;

use crate::limits::*;

/// Read at most [`MAX_READ`] bytes of a proc file; `None` if it is gone or
/// unreadable (a process that exited, or one we may not inspect).
pub(crate) fn read_proc(path: &str) -> Option<String> {
    let file = File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_READ as u64).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The fields of `/proc/<pid>/stat` after the command name, which may hold
/// spaces and parentheses: everything after the last `)`.
pub(crate) fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// `(process group, utime + stime + cutime + cstime in ticks)`.
pub(crate) fn parse_stat(stat: &str) -> Option<(i32, u64)> {
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
pub(crate) fn stat_threads(stat: &str) -> Option<u64> {
    // After the name: ... priority(15) nice(16) num_threads(17).
    stat_fields(stat)?.get(17)?.parse().ok()
}

/// A `Key:   1234 kB` line's value in bytes.
pub(crate) fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        let kb: u64 = value.split_whitespace().next()?.parse().ok()?;
        Some(kb.saturating_mul(1024))
    })
}

/// Memory of one process: PSS, else RSS.
pub(crate) fn memory_of(pid: i32) -> Option<u64> {
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
pub(crate) enum Children {
    Files,
    Scanned(ParentIndex),
}

/// `(parent, child)` pairs of one scan of `/proc`, sorted by parent.
pub(crate) type ParentIndex = std::sync::Arc<Vec<(i32, i32)>>;

/// A scan of `/proc` shared by the runs of one runtime (taken at most once
/// per half period, however many runs are sampled), for kernels without
/// `/proc/<pid>/task/<tid>/children`.
#[derive(Default)]
pub struct ScanCache(std::sync::Mutex<Option<(std::time::Instant, ParentIndex)>>);

pub(crate) fn scan_parents() -> Vec<(i32, i32)> {
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
    pub(crate) fn new(cache: &ScanCache) -> Children {
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
    pub(crate) fn of(&self, pid: i32, out: &mut Vec<i32>) {
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

/// Pages by which one process's resident size (`statm`) may read low:
/// the kernel sums its three resident counters (file, anonymous, shmem)
/// per CPU and folds a CPU's share in only past a batch
/// (`percpu_counter_batch`, `max(32, 2 * CPUs)`), and kernels before 6.2
/// kept up to 64 events per thread unfolded.
pub(crate) fn rss_slack(threads: u64) -> u64 {
    static PER_PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let per_process = *PER_PROCESS.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64).max(possible_cpus());
        3 * (2 * cpus).max(32) * cpus
    });
    per_process.saturating_add(threads.saturating_mul(64))
}

/// CPUs the kernel may bring online (`/sys/devices/system/cpu/possible`,
/// e.g. `0-63`), which is what its per-CPU counters span.
pub(crate) fn possible_cpus() -> u64 {
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

/// Resident bytes of one process (`statm`'s second field, in pages):
/// one small read, an upper bound of what the process holds alone (its
/// shared pages are counted whole).
pub fn rss_of(pid: i32) -> Option<u64> {
    let statm = read_proc(&format!("/proc/{pid}/statm"))?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages.saturating_mul(rustix::param::page_size() as u64))
}

/// Most processes whose files one [`HeldFiles`] holds (a scope has one or
/// two first processes).
pub(crate) const MAX_HELD: usize = 4;

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
/// recycled pid is never read through it. At most `MAX_HELD` processes'
/// files are held (two descriptors each).
#[derive(Debug, Default)]
pub struct HeldFiles(pub(crate) Mutex<Vec<Held>>);

#[derive(Debug)]
pub(crate) struct Held {
    pid: i32,
    stat: File,
    /// The main thread's `children`.
    children: File,
}

/// A held process's `stat`, and its children when it has one thread.
pub(crate) struct HeldRead {
    pub(crate) stat: String,
    pub(crate) children: Option<Vec<i32>>,
}

impl HeldFiles {
    /// `None` when `pid`'s files cannot be held or read (the caller then
    /// reads by path, as for any other process).
    pub(crate) fn read(&self, pid: i32) -> Option<HeldRead> {
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
    pub(crate) fn read(&self) -> Option<HeldRead> {
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
pub(crate) fn pread_to_end(file: &File, line: bool) -> Option<String> {
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
