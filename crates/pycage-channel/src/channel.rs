//! Reading the child's fd 3 without letting it stall the host.
//!
//! fd 3 is a Unix socket, and the program owns its end: it can send
//! descriptors (`socket.send_fds`), credentials or any other ancillary data
//! with its frames. A plain `read` on the host's end leaves such messages'
//! control data behind and can stop at each message boundary; the host
//! must instead keep reading the bytes, close every descriptor that
//! arrives, and never act on any of it.
//!
//! [`read`] does exactly that with `recvmsg` and a control buffer on the
//! stack: received descriptors (`SCM_RIGHTS`, installed close-on-exec) are
//! dropped, which closes them; credentials (`SCM_CREDENTIALS`) and unknown
//! control messages are ignored. When the buffer is too small
//! (`MSG_CTRUNC`) the kernel itself discards, and closes, what did not
//! fit. The bytes are the frames, and go on to the line splitter as
//! before.
//!
//! [`write_now`] is the host's side of writing: the frames go out the
//! moment a run has them, whatever tokio has seen of the socket yet.
//!
//! [`Channel`] is a run's end of fd 3, watched by the reactor or by a
//! blocking caller's own thread (`blocking`).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags};
use tokio::io::Interest;
use tokio::net::UnixStream;

/// Control buffer: room for one message of `SCM_RIGHTS` with 64
/// descriptors and one `SCM_CREDENTIALS`; anything beyond is truncated
/// and closed by the kernel.
const CONTROL_SPACE: usize = rustix::cmsg_space!(ScmRights(64), ScmCredentials(1));

/// What one read brought besides bytes, for diagnostics and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// Descriptors received and closed.
    pub descriptors: usize,
    /// Other control messages ignored (credentials, unknown kinds).
    pub other: usize,
    /// The kernel truncated the control data (and closed what did not fit).
    pub truncated: bool,
}

/// Read the next bytes of `stream` into `buf`, dropping any ancillary
/// data. `Ok(0)` is end of stream.
pub async fn read(stream: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
    read_counting(stream, buf).await.map(|(n, _)| n)
}

/// [`read`], also saying what was dropped.
pub async fn read_counting(stream: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Dropped)> {
    loop {
        stream.readable().await?;
        match stream.try_io(Interest::READABLE, || recv_dropping_control(stream, buf)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            result => return result,
        }
    }
}

/// Read what `stream` holds right now, without waiting and whatever
/// tokio last saw of its readiness (`WouldBlock` when it holds nothing).
/// For the moment the child is known to have exited: every write it made
/// is in the socket already, but its readiness may not be observed yet.
pub fn read_now(stream: &impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    recv_dropping_control(stream, buf).map(|(n, _)| n)
}

/// Write what `stream` takes of `data` now, without waiting. Unlike
/// `try_write`, this tries the socket even when tokio has not seen it
/// writable yet: a socket registered for this run (a pooled child's) has
/// no readiness until the reactor's next turn, and waiting for it cost
/// every run a hand-off to a worker thread and back before its first
/// frame went out. `WouldBlock` only when the socket is full, and then
/// tokio's readiness is cleared too, so `writable()` waits for room.
pub fn write_now(stream: &UnixStream, data: &[u8]) -> io::Result<usize> {
    match send_now(stream.as_fd(), data) {
        Ok(n) => Ok(n),
        Err(rustix::io::Errno::AGAIN) => stream.try_write(data),
        Err(e) => Err(io::Error::from_raw_os_error(e.raw_os_error())),
    }
}

/// One `send` of what `fd` takes now, without waiting (and no `SIGPIPE`
/// when the child closed its end).
fn send_now(fd: BorrowedFd<'_>, data: &[u8]) -> rustix::io::Result<usize> {
    rustix::net::send(fd, data, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)
}

/// Kernel memory held for what was written to `stream` and not yet read by
/// its peer (`SIOCOUTQ`: for a Unix stream socket, the true size of the
/// buffers queued at the peer, not a byte count; zero exactly when the
/// peer has read everything). The host learns from it whether the program
/// has read its replies: there is no other signal, and none is trusted
/// from the child.
pub fn unread_by_peer(stream: &impl AsFd) -> io::Result<usize> {
    // SIOCOUTQ has TIOCOUTQ's number; the kernel writes one int.
    const SIOCOUTQ: rustix::ioctl::Opcode = libc::TIOCOUTQ as rustix::ioctl::Opcode;
    // SAFETY: SIOCOUTQ on a socket takes a pointer to one `c_int`, which
    // `Getter` provides and reads back; the descriptor is borrowed for the call.
    let queued = unsafe { rustix::ioctl::ioctl(stream.as_fd(), rustix::ioctl::Getter::<SIOCOUTQ, libc::c_int>::new()) }
        .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))?;
    Ok(usize::try_from(queued).unwrap_or(0))
}

fn recv_dropping_control(stream: &impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Dropped)> {
    let mut space = [MaybeUninit::<u8>::uninit(); CONTROL_SPACE];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg =
        rustix::net::recvmsg(stream.as_fd(), &mut iov, &mut control, RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC)
            .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))?;
    let mut dropped = Dropped { truncated: msg.flags.contains(rustix::net::ReturnFlags::CTRUNC), ..Dropped::default() };
    for message in control.drain() {
        match message {
            RecvAncillaryMessage::ScmRights(fds) => {
                // Each OwnedFd closes on drop.
                dropped.descriptors += fds.count();
            }
            _ => dropped.other += 1,
        }
    }
    Ok((msg.bytes, dropped))
}

/// The host's end of a child's fd 3, watched by tokio's reactor or by the
/// caller's own thread.
///
/// A [`crate::blocking::block_on`] caller that polls the run waits on the
/// socket with `poll(2)` itself, and the socket is then not registered
/// with the reactor at all (`Plain`): a registered socket wakes a worker
/// thread when it is registered (it is writable), each time the child
/// reads from it, and when the child's `done` arrives, all on the run's
/// critical path (see `blocking`). Polled by a worker thread instead, the
/// run registers it (`Reactor`). A run checks which at each turn of its
/// loop ([`Channel::for_this_thread`]), so a blocking caller that hands
/// the run to a worker mid-way, or a session whose cells come from both
/// kinds of caller, switches between the two.
#[derive(Debug)]
pub enum Channel {
    /// Not registered: only a `block_on` caller waits on it.
    Plain(std::os::unix::net::UnixStream),
    /// Registered with the current runtime's reactor.
    Reactor(UnixStream),
}

/// What a [`Channel::read`] got.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// This many bytes.
    Bytes(usize),
    /// End of stream, or an error reading it.
    End,
    /// Nothing: the run is polled by a thread that does not wait on a
    /// `Plain` channel; the run's loop registers it and reads again.
    Retry,
}

impl Channel {
    /// A socket in non-blocking mode, not registered yet.
    pub fn new(stream: std::os::unix::net::UnixStream) -> Channel {
        Channel::Plain(stream)
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Channel::Plain(s) => s.as_fd(),
            Channel::Reactor(s) => s.as_fd(),
        }
    }

    /// This channel as the thread polling the run needs it: `Plain` for a
    /// `block_on` caller, `Reactor` for anyone else. Registering needs a
    /// runtime's context.
    pub fn for_this_thread(self) -> io::Result<Channel> {
        match (self, crate::blocking::caller_polls()) {
            (Channel::Reactor(s), true) => Ok(Channel::Plain(s.into_std()?)),
            (Channel::Plain(s), false) => Ok(Channel::Reactor(UnixStream::from_std(s)?)),
            (channel, _) => Ok(channel),
        }
    }

    /// [`write_now`] for either kind.
    pub fn write_now(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            Channel::Plain(s) => send_now(s.as_fd(), data).map_err(|e| io::Error::from_raw_os_error(e.raw_os_error())),
            Channel::Reactor(s) => write_now(s, data),
        }
    }

    /// The next bytes (see [`read`]); a `Plain` channel notes for the
    /// caller that the run waits for them.
    pub async fn read(&self, buf: &mut [u8]) -> Received {
        let received = |r: io::Result<usize>| match r {
            Ok(0) | Err(_) => Received::End,
            Ok(n) => Received::Bytes(n),
        };
        match self {
            Channel::Reactor(s) => received(read(s, buf).await),
            Channel::Plain(s) => {
                let noted = crate::blocking::Noted::new(s.as_fd());
                std::future::poll_fn(|_| match read_now(s, buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if !crate::blocking::caller_polls() {
                            return std::task::Poll::Ready(Received::Retry);
                        }
                        crate::blocking::wait_for(&noted, true, false);
                        std::task::Poll::Pending
                    }
                    r => std::task::Poll::Ready(received(r)),
                })
                .await
            }
        }
    }

    /// Resolves when the socket may take more (for a `Plain` one: once the
    /// caller was woken, by it or by anything else; the write that follows
    /// says whether it did).
    pub async fn writable(&self) -> io::Result<()> {
        match self {
            Channel::Reactor(s) => s.writable().await,
            Channel::Plain(s) => {
                let noted = crate::blocking::Noted::new(s.as_fd());
                let mut asked = false;
                std::future::poll_fn(|_| {
                    if asked || !crate::blocking::caller_polls() {
                        return std::task::Poll::Ready(Ok(()));
                    }
                    asked = true;
                    crate::blocking::wait_for(&noted, false, true);
                    std::task::Poll::Pending
                })
                .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::io::Write;
    use std::path::Path;

    /// Descriptors of this process open on `path` (tests run in parallel,
    /// so count only our own file).
    fn open_on(path: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|target| target == path))
            .count()
    }

    fn send_with_fds(sock: &std::os::unix::net::UnixStream, data: &[u8], path: &Path, count: usize) {
        let files: Vec<std::fs::File> = (0..count).map(|_| std::fs::File::open(path).unwrap()).collect();
        let fds: Vec<std::os::fd::BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(count))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg(sock, &[io::IoSlice::new(data)], &mut control, SendFlags::empty()).unwrap();
    }

    #[tokio::test]
    async fn unread_bytes_are_what_the_peer_has_not_read() {
        let (theirs, ours) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let host = UnixStream::from_std(ours).unwrap();
        assert_eq!(unread_by_peer(&host).unwrap(), 0);
        assert_eq!(rustix::io::write(host.as_fd(), b"0123456789").unwrap(), 10);
        // Memory of the queued buffer: at least the bytes.
        assert!(unread_by_peer(&host).unwrap() >= 10);
        let mut buf = [0u8; 4];
        let mut theirs = theirs;
        std::io::Read::read_exact(&mut theirs, &mut buf).unwrap();
        assert!(unread_by_peer(&host).unwrap() > 0, "part of the buffer is unread");
        std::io::Read::read_exact(&mut theirs, &mut buf[..3]).unwrap();
        std::io::Read::read_exact(&mut theirs, &mut buf[..3]).unwrap();
        assert_eq!(unread_by_peer(&host).unwrap(), 0, "all read");
    }

    #[tokio::test]
    async fn descriptors_are_closed_and_bytes_keep_flowing() {
        // The path only: the temp file's own descriptor is closed.
        let marker = tempfile::NamedTempFile::new().unwrap().into_temp_path();
        let path = marker.canonicalize().unwrap();
        let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        theirs.set_nonblocking(true).unwrap();
        let host = UnixStream::from_std(theirs).unwrap();
        ours.write_all(b"one\n").unwrap();
        send_with_fds(&ours, b"two\n", &path, 3);
        // More descriptors than the control buffer holds: truncated, and
        // the kernel closes the rest.
        send_with_fds(&ours, b"three\n", &path, 200);
        ours.write_all(b"four\n").unwrap();
        drop(ours);
        assert_eq!(open_on(&path), 0, "in flight, not installed yet");
        let mut all = Vec::new();
        let mut buf = [0u8; 64];
        let mut total = Dropped::default();
        loop {
            let (n, dropped) = read_counting(&host, &mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            total.descriptors += dropped.descriptors;
            total.truncated |= dropped.truncated;
        }
        assert_eq!(all, b"one\ntwo\nthree\nfour\n");
        // 3, and as many of the 200 as the control buffer holds (at least
        // 64); the kernel closed the others and said so.
        assert!((3 + 64..3 + 200).contains(&total.descriptors), "{}", total.descriptors);
        assert!(total.truncated);
        assert_eq!(open_on(&path), 0, "every received descriptor was closed");
    }

    /// A socket registered a moment ago takes the frames at once; a full
    /// one says so, and then waits for room rather than spinning on stale
    /// readiness.
    #[tokio::test]
    async fn frames_go_out_before_tokio_has_seen_the_socket_and_a_full_one_waits() {
        use std::io::Read;
        let (mut theirs, ours) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let host = UnixStream::from_std(ours).unwrap();
        assert_eq!(write_now(&host, b"boot\nrun\n").unwrap(), 9);
        let mut buf = [0u8; 9];
        theirs.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"boot\nrun\n");

        let chunk = [b'x'; 4096];
        let mut queued = 0usize;
        let full = loop {
            match write_now(&host, &chunk) {
                Ok(n) => queued += n,
                Err(e) => break e,
            }
        };
        assert_eq!(full.kind(), io::ErrorKind::WouldBlock, "{full}");
        let short = std::time::Duration::from_millis(100);
        assert!(tokio::time::timeout(short, host.writable()).await.is_err(), "no room yet, so not writable");
        let reader = std::thread::spawn(move || {
            let mut sink = vec![0u8; queued];
            theirs.read_exact(&mut sink).unwrap();
            theirs
        });
        tokio::time::timeout(std::time::Duration::from_secs(10), host.writable()).await.unwrap().unwrap();
        assert!(write_now(&host, b"done\n").is_ok());
        drop(reader.join().unwrap());
    }

    /// The bug this module fixes: with every message queued before the
    /// first read, a plain `read` returns one descriptor-carrying message,
    /// tokio takes the short read for "drained", and the rest is never read.
    #[tokio::test]
    async fn a_plain_read_stalls_where_this_reader_does_not() {
        use tokio::io::AsyncReadExt;
        let marker = tempfile::NamedTempFile::new().unwrap().into_temp_path();
        let queue = |sock: &std::os::unix::net::UnixStream| {
            for i in 0..5 {
                send_with_fds(sock, format!("frame {i}\n").as_bytes(), &marker, 2);
            }
        };
        let mut buf = [0u8; 4096];

        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        queue(&ours);
        theirs.set_nonblocking(true).unwrap();
        let mut plain = UnixStream::from_std(theirs).unwrap();
        assert_eq!(plain.read(&mut buf).await.unwrap(), 8, "one message per read");
        let stalled = tokio::time::timeout(std::time::Duration::from_millis(300), plain.read(&mut buf)).await;
        assert!(stalled.is_err(), "the control: a plain read no longer stalls here");

        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        queue(&ours);
        drop(ours);
        theirs.set_nonblocking(true).unwrap();
        let host = UnixStream::from_std(theirs).unwrap();
        let mut all = Vec::new();
        loop {
            let n =
                tokio::time::timeout(std::time::Duration::from_secs(10), read(&host, &mut buf)).await.unwrap().unwrap();
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        assert_eq!(all, b"frame 0\nframe 1\nframe 2\nframe 3\nframe 4\n");
    }
}
