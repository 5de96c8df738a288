//! A run's sockets: the `sock_diag` socket inside its network namespace,
//! the namespace's own listings that say when a dump would find nothing,
//! and the netlink exchange itself.

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use crate::procfs::*;

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
    pub(crate) fn socket_bytes_seen_by(&self, member: Option<i32>) -> u64 {
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
pub(crate) fn unix_listing_empty(pid: i32) -> bool {
    read_proc(&format!("/proc/{pid}/net/unix")).is_some_and(|text| listing_is_header_only(&text))
}

pub(crate) fn listing_is_header_only(text: &str) -> bool {
    text.ends_with('\n') && text.matches('\n').count() == 1
}

/// The IPv4 TCP sockets hashed in `pid`'s network namespace
/// (`/proc/<pid>/net/sockstat`, `TCP: inuse N`): every socket that may
/// hold buffers (connected, listening, orphaned and closing) is hashed.
pub(crate) fn tcp_in_use(pid: i32) -> Option<u64> {
    sockstat_tcp_in_use(&read_proc(&format!("/proc/{pid}/net/sockstat"))?)
}

pub(crate) fn sockstat_tcp_in_use(text: &str) -> Option<u64> {
    let fields = text.lines().find_map(|l| l.strip_prefix("TCP: inuse "))?;
    fields.split_whitespace().next()?.parse().ok()
}

/// Bytes queued in the `AF_UNIX` sockets with these inodes, looked up one
/// by one in this process's network namespace (process isolation).
pub(crate) fn unix_sockets_by_inode(inodes: &HashSet<u64>) -> u64 {
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
pub(crate) mod diag {
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
                        if !*dump || sockets >= crate::limits::MAX_DIAG_SOCKETS {
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
