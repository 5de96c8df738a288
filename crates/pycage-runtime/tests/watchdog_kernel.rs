//! The watchdog's count of what a run holds in the kernel, against a real
//! process holding it: socket buffers (looked up by inode, as in process
//! isolation), pipes, epoll registrations, memfds, and the descriptor count.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use pycage_runtime::watchdog::{self, Scope};

/// A python3 holding what `setup` makes, until its stdin closes.
fn holder(setup: &str) -> (std::process::Child, String) {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(format!("import os, select, socket, sys\n{setup}\nprint(report, flush=True)\nsys.stdin.read()"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    (child, line.trim().to_string())
}

fn sample(child: &std::process::Child) -> watchdog::Usage {
    let root = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    watchdog::sample(Scope::Descendants { root })
}

#[test]
fn socket_buffers_are_counted() {
    let (mut child, report) = holder(
        "keep = []\nsent = 0\nfor i in range(8):\n    a, b = socket.socketpair()\n    a.setblocking(False)\n    keep.append((a, b))\n    try:\n        while True:\n            sent += a.send(b'x' * 65536)\n    except BlockingIOError:\n        pass\nreport = sent",
    );
    let sent: u64 = report.parse().unwrap();
    let usage = sample(&child);
    drop(child.stdin.take());
    child.wait().unwrap();
    assert!(usage.kernel.socket_bytes >= sent, "{usage:?} for {sent} bytes sent");
    assert!(usage.kernel.socket_bytes < 2 * sent + (1 << 20), "{usage:?} for {sent} bytes sent");
    assert!(usage.memory_bytes >= usage.kernel.socket_bytes);
}

#[test]
fn pipes_epoll_registrations_and_memfds_are_counted() {
    let (mut child, report) = holder(
        "pipes = [os.pipe() for _ in range(10)]\n\
         dups = [os.dup(pipes[0][0]) for _ in range(5)]\n\
         eps = [select.epoll() for _ in range(3)]\n\
         for ep in eps:\n    for r, w in pipes:\n        ep.register(r, select.EPOLLIN)\n\
         m = os.memfd_create('held')\n\
         os.write(m, b'x' * (3 << 20))\n\
         fds = os.listdir('/proc/self/fd')\n\
         links = set(os.readlink(f'/proc/self/fd/{n}') for n in fds if os.path.exists(f'/proc/self/fd/{n}'))\n\
         report = f\"{len(fds)} {len([l for l in links if l.startswith('pipe:')])}\"",
    );
    let (listed, pipes) = report.split_once(' ').unwrap();
    let (listed, pipes): (u64, u64) = (listed.parse().unwrap(), pipes.parse().unwrap());
    let usage = sample(&child);
    drop(child.stdin.take());
    child.wait().unwrap();
    let k = usage.kernel;
    // Ten pipes of the program (dups are one pipe), and what it inherited.
    assert!(pipes >= 12);
    assert_eq!(k.pipes, pipes, "{usage:?}");
    assert_eq!(k.epoll_watches, 30, "{usage:?}");
    assert!(k.memfd_bytes >= 3 << 20 && k.memfd_bytes < 4 << 20, "{usage:?}");
    // listdir's own descriptor was open while it listed.
    assert_eq!(k.descriptors, listed - 1, "{usage:?}");
    assert_eq!(k.hidden, 0);
    let page = rustix::param::page_size() as u64;
    assert!(
        usage.memory_bytes >= pipes * watchdog::PIPE_PAGES * page + 30 * watchdog::EPOLL_WATCH_BYTES + (3 << 20),
        "{usage:?}"
    );
}

#[test]
fn a_run_over_the_descriptor_cap_is_over_budget() {
    let cap = watchdog::MAX_RUN_DESCRIPTORS;
    let (mut child, _) = holder(&format!(
        "import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, ({n}, {n}))\nkeep = [os.open('/dev/null', os.O_RDONLY) for _ in range({cap})]\nreport = 1",
        n = cap + 64
    ));
    let usage = sample(&child);
    drop(child.stdin.take());
    child.wait().unwrap();
    assert_eq!(usage.kernel.descriptors, cap + 1, "the walk stops past the cap");
    let budget = watchdog::Budget::UNLIMITED;
    match usage.check(&budget) {
        Some(exceeded @ watchdog::Exceeded::Objects { what: "descriptors", .. }) => assert!(
            exceeded.message().starts_with("the run's processes together held more than the 4096 descriptors"),
            "{}",
            exceeded.message()
        ),
        other => panic!("{other:?}"),
    }
}
