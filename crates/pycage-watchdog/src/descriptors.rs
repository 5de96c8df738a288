//! What a run's descriptors hold in the kernel: pipes, epoll
//! registrations, memfds and sockets, read from `/proc/<pid>/fd`.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};

use crate::limits::*;

use crate::procfs::*;
use crate::sockets::*;
use crate::usage::*;

/// The descriptors of a run's processes, as one sample reads them (see
/// the module docs).
pub(crate) struct Descriptors {
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
    pub(crate) fn new(sockets_by_inode: bool) -> Descriptors {
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

    pub(crate) fn visit(&mut self, pid: i32) {
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

    pub(crate) fn finish(mut self) -> Kernel {
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
pub(crate) fn bracketed_inode(target: &[u8], prefix: &[u8]) -> Option<u64> {
    let digits = target.strip_prefix(prefix)?.strip_suffix(b"]")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}
