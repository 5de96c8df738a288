use std::io;

use rustix::process::Pid;
use std::time::Duration;

use crate::procfs::*;
use crate::sample::*;
use crate::sockets::*;
use crate::usage::*;

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
    assert_eq!(exceeded.message(), "the CPU budget of 2 s was exceeded by the run's processes together (2.5 s used)");
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
