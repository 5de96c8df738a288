//! The shell helper's wire: one request and one reply at a time over a
//! `SOCK_SEQPACKET` pair, descriptors as `SCM_RIGHTS`. Both sides use this
//! module, so the two ends of every message are written in one place.
//!
//! - request: `shl1`, the build (a length byte and [`BUILD`]), a flags byte
//!   (bit 0: the run cgroup's `cgroup.procs` descriptor rides along; bit 1:
//!   so does the zygote's user namespace, which the shell joins first,
//!   after the cgroup's if both; bit 2: the run's network and IPC
//!   namespaces are made outside its user namespace,
//!   `Prepared::outer_network_namespace`; bit 3: with bit 2, the network
//!   and IPC namespaces of an earlier run ride along, last and in that
//!   order, to be joined instead), then the run's [`SandboxPolicy`]
//!   ([`encode_policy`]; [`decode_policy`] checks every length);
//! - reply: `ok02`, the supervisor's pid and its init's pid (little endian
//!   `i32`), a flags byte (bit 0: a handoff, bit 1: its `sock_diag`
//!   socket, bit 2: its egress listener), then the shell's [`JoinPlan`]
//!   ([`encode_plan`]), carrying the supervisor's pidfd, the handoff's
//!   descriptors and the eight [`Join`] descriptors; or `err1` and the
//!   error's text; or `ern1` and an errno (little endian `i32`) when
//!   joining the earlier run's namespaces failed; or `ver1` and the
//!   helper's build, when it is not the host's.
//!
//! The plan comes from the `Prepared` that built the shell: only the side
//! that builds a shell derives what its programs do to themselves.

use std::ffi::OsString;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use pycage_protocol::zygote::{ConfineStep, Rlimit};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use rustix::process::Pid;

use crate::error::{ChildFailure, SandboxError};
use crate::join::{Handoff, Join, JoinPlan};
use crate::plan::{HostIds, Remap, SandboxPolicy};

pub(crate) const REQUEST_TAG: [u8; 4] = *b"shl1";
pub(crate) const REPLY_OK: [u8; 4] = *b"ok02";
pub(crate) const REPLY_ERR: [u8; 4] = *b"err1";
pub(crate) const REPLY_ERR_JOIN_NET: [u8; 4] = *b"ern1";
pub(crate) const REPLY_BUILD: [u8; 4] = *b"ver1";
/// Host and helper must be one build: this crate's version and the
/// protocol's revision.
pub const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), "/shell-helper-5");
/// The request carries the run cgroup's `cgroup.procs`.
pub(crate) const WITH_CGROUP: u8 = 1;
/// The request carries the zygote's user namespace.
pub(crate) const WITH_ZYGOTE_USERNS: u8 = 2;
/// The run's network and IPC namespaces are made outside its user namespace.
pub(crate) const WITH_OUTER_NET: u8 = 4;
/// ... and are these, an earlier run's (their descriptors ride along).
pub(crate) const WITH_NET_NS: u8 = 8;
const WITH_HANDOFF: u8 = 1;
const WITH_SOCK_DIAG: u8 = 2;
const WITH_EGRESS: u8 = 4;
/// The largest request: a policy is a few paths; `--allow-read` may add
/// hundreds, not thousands.
pub const MAX_REQUEST: usize = 128 * 1024;
/// The largest reply: a plan's seccomp filters are a few kilobytes (an
/// error's text is cut to fit).
pub const MAX_REPLY: usize = 64 * 1024;
/// Descriptors a message carries at most: the pidfd, three of the handoff,
/// eight of the join.
pub const MAX_FDS: usize = 12;

/// Where a shell's network and IPC namespaces come from
/// (`Prepared::outer_network_namespace`).
#[derive(Debug, Clone, Copy)]
pub enum ShellNetwork<'a> {
    /// Made with the run's other namespaces, owned by its user namespace.
    Inside,
    /// Made before the run's user namespace, outside it.
    Outside,
    /// An earlier run's, made [`ShellNetwork::Outside`], joined: its
    /// network namespace and its IPC namespace.
    Join { net: BorrowedFd<'a>, ipc: BorrowedFd<'a> },
}

/// A shell the helper built: its supervisor (the helper's child), what its
/// supervisor and init handed over, and what a program joining it does.
#[derive(Debug)]
pub struct RemoteShell {
    pub pid: i32,
    pub pidfd: OwnedFd,
    pub handoff: Option<Handoff>,
    pub join: Join,
    pub plan: JoinPlan,
}

/// Why a reply brought no shell.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// The helper is gone or spoke nonsense: it must be replaced.
    Broken(String),
    /// The helper could not build this shell, and said why.
    Refused(String),
    /// The shell could not join (or clean) the namespaces it was given (errno).
    JoinNetwork(i32),
    /// The helper is another build (named): no helper from its command will do.
    OtherBuild(String),
}

/// A request for a shell for `policy`, and the descriptors it carries, in
/// order (see the module docs).
pub fn request<'a>(
    policy: &SandboxPolicy,
    cgroup: Option<BorrowedFd<'a>>,
    userns: Option<BorrowedFd<'a>>,
    network: ShellNetwork<'a>,
) -> Result<(Vec<u8>, Vec<BorrowedFd<'a>>), String> {
    let mut request = Vec::with_capacity(256);
    request.extend_from_slice(&REQUEST_TAG);
    request.push(BUILD.len() as u8);
    request.extend_from_slice(BUILD.as_bytes());
    let flag = |on: bool, bit: u8| if on { bit } else { 0 };
    let (net_flags, earlier) = match network {
        ShellNetwork::Inside => (0, None),
        ShellNetwork::Outside => (WITH_OUTER_NET, None),
        ShellNetwork::Join { net, ipc } => (WITH_OUTER_NET | WITH_NET_NS, Some([net, ipc])),
    };
    request.push(flag(cgroup.is_some(), WITH_CGROUP) | flag(userns.is_some(), WITH_ZYGOTE_USERNS) | net_flags);
    encode_policy(policy, &mut request);
    if request.len() > MAX_REQUEST {
        return Err(format!("the sandbox policy is too large ({} bytes)", request.len()));
    }
    Ok((request, cgroup.into_iter().chain(userns).chain(earlier.into_iter().flatten()).collect()))
}

/// Sends one message with `fds`.
pub fn send(sock: &OwnedFd, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors"));
    }
    let sent = loop {
        match rustix::net::sendmsg(sock, &[IoSlice::new(data)], &mut control, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    if sent != data.len() {
        return Err(io::Error::other("short send"));
    }
    Ok(())
}

/// One message and the descriptors it carried (closed on drop unless used).
pub fn receive(sock: &OwnedFd, buf: &mut [u8], flags: RecvFlags) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = loop {
        match rustix::net::recvmsg(sock, &mut [IoSliceMut::new(buf)], &mut control, flags | RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if received.flags.intersects(rustix::net::ReturnFlags::TRUNC | rustix::net::ReturnFlags::CTRUNC) {
        return Err(io::Error::other("a message was cut short"));
    }
    Ok((received.bytes, fds))
}

/// Waits for the helper's reply (the socket's receive timeout bounds it).
pub fn receive_reply(sock: &OwnedFd) -> Result<RemoteShell, Failure> {
    let mut buf = vec![0u8; MAX_REPLY];
    let (len, fds) =
        receive(sock, &mut buf, RecvFlags::empty()).map_err(|e| Failure::Broken(format!("no answer: {e}")))?;
    if len == 0 {
        return Err(Failure::Broken("it exited".to_owned()));
    }
    parse_reply(buf.get(..len).unwrap_or_default(), fds)
}

pub(crate) fn parse_reply(data: &[u8], fds: Vec<OwnedFd>) -> Result<RemoteShell, Failure> {
    if let Some(text) = data.strip_prefix(&REPLY_ERR) {
        return Err(Failure::Refused(String::from_utf8_lossy(text).into_owned()));
    }
    if let Some(errno) = data.strip_prefix(&REPLY_ERR_JOIN_NET) {
        let errno = <[u8; 4]>::try_from(errno).map_err(|_| Failure::Broken("its answer was malformed".to_owned()))?;
        return Err(Failure::JoinNetwork(i32::from_le_bytes(errno)));
    }
    if let Some(theirs) = data.strip_prefix(&REPLY_BUILD) {
        return Err(Failure::OtherBuild(String::from_utf8_lossy(theirs).into_owned()));
    }
    parse_ok(data, fds).ok_or_else(|| Failure::Broken("its answer was malformed".to_owned()))
}

/// A positive pid (a negative one would name a process group to `kill`).
fn positive(raw: i32) -> Option<Pid> {
    if raw > 0 {
        Pid::from_raw(raw)
    } else {
        None
    }
}

fn parse_ok(data: &[u8], fds: Vec<OwnedFd>) -> Option<RemoteShell> {
    let rest = data.strip_prefix(&REPLY_OK)?;
    let (head, plan) = rest.split_at_checked(9)?;
    let [s0, s1, s2, s3, i0, i1, i2, i3, flags] = <[u8; 9]>::try_from(head).ok()?;
    let plan = decode_plan(plan)?;
    let pid = i32::from_le_bytes([s0, s1, s2, s3]);
    positive(pid)?;
    let with = |bit: u8| flags & bit != 0;
    let handoff_fds = 1 + usize::from(with(WITH_SOCK_DIAG)) + usize::from(with(WITH_EGRESS));
    let expected = 1 + usize::from(with(WITH_HANDOFF)) * handoff_fds + 8;
    if fds.len() != expected {
        return None;
    }
    let mut fds = fds.into_iter();
    let pidfd = fds.next()?;
    let handoff = match with(WITH_HANDOFF) {
        true => Some(Handoff {
            init_pid: positive(i32::from_le_bytes([i0, i1, i2, i3]))?,
            work_dir: fds.next()?,
            sock_diag: if with(WITH_SOCK_DIAG) { Some(fds.next()?) } else { None },
            egress: if with(WITH_EGRESS) { Some(fds.next()?) } else { None },
        }),
        false => None,
    };
    let join = Join {
        user_ns: fds.next()?,
        mount_ns: fds.next()?,
        pid_ns: fds.next()?,
        net_ns: fds.next()?,
        ipc_ns: fds.next()?,
        uts_ns: fds.next()?,
        root: fds.next()?,
        ruleset: fds.next()?,
    };
    Some(RemoteShell { pid, pidfd, handoff, join, plan })
}

/// The request after its tag and build, or the reply that refuses it: an
/// error for something that is not a request, `ver1` and this helper's
/// build for another build's request.
pub(crate) fn same_build(request: &[u8]) -> Result<&[u8], Vec<u8>> {
    let refuse = |text: &str| [REPLY_ERR.as_slice(), text.as_bytes()].concat();
    let body = request.strip_prefix(&REQUEST_TAG).ok_or_else(|| refuse("not a shell request"))?;
    let (&len, rest) = body.split_first().ok_or_else(|| refuse("an empty request"))?;
    let (theirs, body) = rest.split_at_checked(usize::from(len)).ok_or_else(|| refuse("a request cut short"))?;
    if theirs != BUILD.as_bytes() {
        return Err([REPLY_BUILD.as_slice(), BUILD.as_bytes()].concat());
    }
    Ok(body)
}

/// Why the helper built no shell.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The shell could not join (or clean) the namespaces it was given (errno).
    JoinNetwork(i32),
    Other(String),
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Refusal {
        Refusal::Other(message.to_owned())
    }
}

impl From<SandboxError> for Refusal {
    fn from(e: SandboxError) -> Refusal {
        match e {
            SandboxError::Child(ChildFailure { step, errno, .. }) if step.joins_an_earlier_run() => {
                Refusal::JoinNetwork(errno)
            }
            e => Refusal::Other(e.to_string()),
        }
    }
}

impl Refusal {
    /// The reply that says so.
    pub(crate) fn reply(&self) -> Vec<u8> {
        match self {
            Refusal::JoinNetwork(errno) => [REPLY_ERR_JOIN_NET.as_slice(), &errno.to_le_bytes()].concat(),
            Refusal::Other(message) => {
                let mut data = REPLY_ERR.to_vec();
                let text = message.as_bytes();
                data.extend_from_slice(text.get(..text.len().min(MAX_REPLY - REPLY_ERR.len())).unwrap_or_default());
                data
            }
        }
    }
}

/// The reply for a built shell, and the descriptors it carries.
pub(crate) fn encode_ok(pid: Pid, shell: RemoteShell) -> (Vec<u8>, Vec<OwnedFd>) {
    let mut data = REPLY_OK.to_vec();
    data.extend_from_slice(&pid.as_raw_nonzero().get().to_le_bytes());
    let mut fds = vec![shell.pidfd];
    let mut flags = 0;
    let mut init = 0i32;
    if let Some(h) = shell.handoff {
        flags |= WITH_HANDOFF;
        init = h.init_pid.as_raw_nonzero().get();
        fds.push(h.work_dir);
        if let Some(fd) = h.sock_diag {
            flags |= WITH_SOCK_DIAG;
            fds.push(fd);
        }
        if let Some(fd) = h.egress {
            flags |= WITH_EGRESS;
            fds.push(fd);
        }
    }
    data.extend_from_slice(&init.to_le_bytes());
    data.push(flags);
    encode_plan(&shell.plan, &mut data);
    let j = shell.join;
    fds.extend([j.user_ns, j.mount_ns, j.pid_ns, j.net_ns, j.ipc_ns, j.uts_ns, j.root, j.ruleset]);
    (data, fds)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Appends `policy`: every path and number, each path as a `u32` length and
/// its bytes, each list as a `u32` count.
pub fn encode_policy(policy: &SandboxPolicy, out: &mut Vec<u8>) {
    fn paths(out: &mut Vec<u8>, list: &[PathBuf]) {
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        for p in list {
            put_bytes(out, p.as_os_str().as_bytes());
        }
    }
    paths(out, &policy.read_only);
    out.extend_from_slice(&(policy.remapped.len() as u32).to_le_bytes());
    for r in &policy.remapped {
        put_bytes(out, r.host.as_os_str().as_bytes());
        put_bytes(out, r.inside.as_os_str().as_bytes());
    }
    paths(out, &policy.devices);
    match policy.host_ids {
        Some(ids) => {
            out.push(1);
            out.extend_from_slice(&ids.uid.to_le_bytes());
            out.extend_from_slice(&ids.gid.to_le_bytes());
        }
        None => out.push(0),
    }
    for n in
        [policy.max_processes, policy.max_file_bytes, policy.max_open_files, policy.disk_bytes, policy.sysv_shm_bytes]
    {
        out.extend_from_slice(&n.to_le_bytes());
    }
    match policy.egress_port {
        Some(port) => {
            out.push(1);
            out.extend_from_slice(&port.to_le_bytes());
        }
        None => out.push(0),
    }
}

/// A bounds-checked reader of the codecs' fields.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).and_then(|b| b.first().copied())
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u32()?).ok()?;
        self.take(len)
    }
    fn path(&mut self) -> Option<PathBuf> {
        Some(PathBuf::from(OsString::from_vec(self.bytes()?.to_vec())))
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
    /// A count of items at least `min` bytes each: never more than the
    /// bytes left could hold, so no count allocates past the input.
    fn count(&mut self, min: usize) -> Option<usize> {
        let n = usize::try_from(self.u32()?).ok()?;
        (n <= self.0.len() / min).then_some(n)
    }
    fn paths(&mut self) -> Option<Vec<PathBuf>> {
        let n = self.count(4)?;
        (0..n).map(|_| self.path()).collect()
    }
}

/// The policy [`encode_policy`] wrote, or `None` for anything else (a
/// count or length past the end, trailing bytes).
pub fn decode_policy(data: &[u8]) -> Option<SandboxPolicy> {
    let mut r = Reader(data);
    let read_only = r.paths()?;
    let n = r.count(8)?;
    let remapped = (0..n).map(|_| Some(Remap { host: r.path()?, inside: r.path()? })).collect::<Option<Vec<_>>>()?;
    let devices = r.paths()?;
    let host_ids = match r.u8()? {
        0 => None,
        1 => Some(HostIds { uid: r.u32()?, gid: r.u32()? }),
        _ => return None,
    };
    let policy = SandboxPolicy {
        read_only,
        remapped,
        devices,
        host_ids,
        max_processes: r.u64()?,
        max_file_bytes: r.u64()?,
        max_open_files: r.u64()?,
        disk_bytes: r.u64()?,
        sysv_shm_bytes: r.u64()?,
        egress_port: match r.u8()? {
            0 => None,
            1 => Some(u16::from_le_bytes(r.take(2)?.try_into().ok()?)),
            _ => return None,
        },
    };
    r.0.is_empty().then_some(policy)
}

const RLIMITS: [Rlimit; 7] =
    [Rlimit::Nproc, Rlimit::Fsize, Rlimit::Nofile, Rlimit::Core, Rlimit::Sigpending, Rlimit::Msgqueue, Rlimit::Memlock];

/// Appends `plan`: its host ids, then each step as a tag byte and its
/// fields (see [`decode_plan`]).
pub fn encode_plan(plan: &JoinPlan, out: &mut Vec<u8>) {
    match plan.host_ids {
        Some((uid, gid)) => {
            out.push(1);
            out.extend_from_slice(&uid.to_le_bytes());
            out.extend_from_slice(&gid.to_le_bytes());
        }
        None => out.push(0),
    }
    out.extend_from_slice(&(plan.confine.len() as u32).to_le_bytes());
    for step in &plan.confine {
        match step {
            ConfineStep::DeathSignal => out.push(0),
            ConfineStep::Limit { resource, value } => {
                out.push(1);
                out.push(RLIMITS.iter().position(|r| r == resource).unwrap_or(0) as u8);
                out.extend_from_slice(&value.to_le_bytes());
            }
            ConfineStep::UnshareCgroup => out.push(2),
            ConfineStep::UnshareUser => out.push(3),
            ConfineStep::Dumpable => out.push(4),
            ConfineStep::IdMaps { uid_map, gid_map } => {
                out.push(5);
                put_bytes(out, uid_map.as_bytes());
                put_bytes(out, gid_map.as_bytes());
            }
            ConfineStep::CloseFds => out.push(6),
            ConfineStep::DropCaps => out.push(7),
            ConfineStep::NoNewPrivs => out.push(8),
            ConfineStep::Landlock => out.push(9),
            ConfineStep::Seccomp { filter } => {
                out.push(10);
                put_bytes(out, filter);
            }
        }
    }
}

/// The plan [`encode_plan`] wrote, or `None` for anything else.
pub fn decode_plan(data: &[u8]) -> Option<JoinPlan> {
    let mut r = Reader(data);
    let host_ids = match r.u8()? {
        0 => None,
        1 => Some((r.u32()?, r.u32()?)),
        _ => return None,
    };
    let n = r.count(1)?;
    let mut confine = Vec::with_capacity(n);
    for _ in 0..n {
        confine.push(match r.u8()? {
            0 => ConfineStep::DeathSignal,
            1 => {
                let resource = *RLIMITS.get(usize::from(r.u8()?))?;
                ConfineStep::Limit { resource, value: r.u64()? }
            }
            2 => ConfineStep::UnshareCgroup,
            3 => ConfineStep::UnshareUser,
            4 => ConfineStep::Dumpable,
            5 => ConfineStep::IdMaps { uid_map: r.string()?, gid_map: r.string()? },
            6 => ConfineStep::CloseFds,
            7 => ConfineStep::DropCaps,
            8 => ConfineStep::NoNewPrivs,
            9 => ConfineStep::Landlock,
            10 => ConfineStep::Seccomp { filter: r.bytes()?.to_vec() },
            _ => return None,
        });
    }
    r.0.is_empty().then_some(JoinPlan { host_ids, confine })
}

/// Borrows what a message carries.
pub fn borrowed(fds: &[OwnedFd]) -> Vec<BorrowedFd<'_>> {
    fds.iter().map(|fd| fd.as_fd()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn path() -> impl Strategy<Value = PathBuf> {
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(|b| PathBuf::from(OsString::from_vec(b)))
    }

    fn policy() -> impl Strategy<Value = SandboxPolicy> {
        (
            proptest::collection::vec(path(), 0..6),
            proptest::collection::vec((path(), path()), 0..4),
            proptest::collection::vec(path(), 0..4),
            proptest::option::of((any::<u32>(), any::<u32>())),
            any::<[u64; 5]>(),
            proptest::option::of(any::<u16>()),
        )
            .prop_map(|(read_only, remaps, devices, ids, n, egress_port)| SandboxPolicy {
                read_only,
                remapped: remaps.into_iter().map(|(host, inside)| Remap { host, inside }).collect(),
                devices,
                host_ids: ids.map(|(uid, gid)| HostIds { uid, gid }),
                max_processes: n[0],
                max_file_bytes: n[1],
                max_open_files: n[2],
                disk_bytes: n[3],
                sysv_shm_bytes: n[4],
                egress_port,
            })
    }

    fn step() -> impl Strategy<Value = ConfineStep> {
        prop_oneof![
            Just(ConfineStep::DeathSignal),
            (0..RLIMITS.len(), any::<u64>()).prop_map(|(i, value)| ConfineStep::Limit { resource: RLIMITS[i], value }),
            Just(ConfineStep::UnshareCgroup),
            Just(ConfineStep::UnshareUser),
            Just(ConfineStep::Dumpable),
            (".{0,12}", ".{0,12}").prop_map(|(uid_map, gid_map)| ConfineStep::IdMaps { uid_map, gid_map }),
            Just(ConfineStep::CloseFds),
            Just(ConfineStep::DropCaps),
            Just(ConfineStep::NoNewPrivs),
            Just(ConfineStep::Landlock),
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(|filter| ConfineStep::Seccomp { filter }),
        ]
    }

    fn plan() -> impl Strategy<Value = JoinPlan> {
        (proptest::option::of((any::<u32>(), any::<u32>())), proptest::collection::vec(step(), 0..16))
            .prop_map(|(host_ids, confine)| JoinPlan { host_ids, confine })
    }

    proptest! {
        #[test]
        fn policies_round_trip(p in policy()) {
            let mut out = Vec::new();
            encode_policy(&p, &mut out);
            prop_assert_eq!(decode_policy(&out), Some(p));
        }

        #[test]
        fn a_cut_or_padded_policy_is_refused(p in policy(), cut in any::<prop::sample::Index>()) {
            let mut out = Vec::new();
            encode_policy(&p, &mut out);
            let at = cut.index(out.len());
            prop_assert_eq!(decode_policy(&out[..at]), None);
            out.push(0);
            prop_assert_eq!(decode_policy(&out), None);
        }

        #[test]
        fn plans_round_trip(p in plan()) {
            let mut out = Vec::new();
            encode_plan(&p, &mut out);
            prop_assert_eq!(decode_plan(&out), Some(p));
        }

        #[test]
        fn a_cut_or_padded_plan_is_refused(p in plan(), cut in any::<prop::sample::Index>()) {
            let mut out = Vec::new();
            encode_plan(&p, &mut out);
            let at = cut.index(out.len());
            prop_assert_eq!(decode_plan(&out[..at]), None);
            out.push(0);
            prop_assert_eq!(decode_plan(&out), None);
        }

        #[test]
        fn any_bytes_decode_without_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_policy(&data);
            let _ = decode_plan(&data);
            let _ = parse_reply(&data, Vec::new());
        }
    }

    /// The plan a reply carries is the one the builder derived: a real
    /// policy's plan (rlimits, id maps, seccomp filters) crosses intact.
    #[test]
    fn a_real_plan_round_trips() {
        let root = rustix::process::geteuid().is_root();
        let policy = SandboxPolicy {
            read_only: Vec::new(),
            remapped: Vec::new(),
            devices: Vec::new(),
            host_ids: root.then_some(HostIds { uid: 70_000, gid: 70_000 }),
            max_processes: 64,
            max_file_bytes: 1 << 20,
            max_open_files: 64,
            disk_bytes: 1 << 20,
            sysv_shm_bytes: 0,
            egress_port: None,
        };
        let plan = JoinPlan::for_policy(&policy).unwrap();
        assert!(plan.confine.iter().any(|s| matches!(s, ConfineStep::Seccomp { .. })));
        let mut out = Vec::new();
        encode_plan(&plan, &mut out);
        assert!(out.len() + 64 < MAX_REPLY, "a plan of {} bytes must fit a reply", out.len());
        assert_eq!(decode_plan(&out), Some(plan));
    }

    /// A helper of another build answers with its build, which the host
    /// reads as a reason to give the helper up, not to retry it.
    #[test]
    fn builds_must_match() {
        let request = |build: &[u8]| [REQUEST_TAG.as_slice(), &[build.len() as u8], build, &[0, 1, 2]].concat();
        assert_eq!(same_build(&request(BUILD.as_bytes())), Ok([0u8, 1, 2].as_slice()));
        let reply = same_build(&request(b"0.0.9/shell-helper-1")).unwrap_err();
        assert_eq!(parse_reply(&reply, Vec::new()).err(), Some(Failure::OtherBuild(BUILD.to_owned())));
        // Not a request, or one cut inside its build: refused, not a build.
        for bad in [&b"xxxx"[..], &REQUEST_TAG[..], &[REQUEST_TAG.as_slice(), &[200, 1]].concat()[..]] {
            let reply = same_build(bad).unwrap_err();
            assert!(matches!(parse_reply(&reply, Vec::new()), Err(Failure::Refused(_))), "{bad:?}");
        }
    }

    /// A failed join of the given network and IPC namespaces (or of the
    /// IPC namespace's cleaning) is told apart from every other failure:
    /// only it turns the host's recycling off.
    #[test]
    fn a_failed_network_join_is_its_own_reply() {
        use crate::error::Step;
        for step in [Step::JoinIpc, Step::CleanIpc] {
            let refusal = Refusal::from(SandboxError::Child(ChildFailure { step, path: None, errno: 1 }));
            assert!(matches!(refusal, Refusal::JoinNetwork(1)), "{step:?}");
        }
        let join = SandboxError::Child(ChildFailure { step: Step::JoinNetwork, path: None, errno: 22 });
        let refusal = Refusal::from(join);
        assert!(matches!(refusal, Refusal::JoinNetwork(22)));
        let reply = refusal.reply();
        assert_eq!(parse_reply(&reply, Vec::new()).err(), Some(Failure::JoinNetwork(22)));
        let other = SandboxError::Child(ChildFailure { step: Step::UnshareUser, path: None, errno: 1 });
        assert!(matches!(Refusal::from(other), Refusal::Other(m) if m.contains("Operation not permitted")));
        // Cut short or too long: malformed, not a refusal.
        for bad in [&reply[..6], &[reply.as_slice(), &[0]].concat()[..]] {
            assert!(matches!(parse_reply(bad, Vec::new()), Err(Failure::Broken(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_huge_count_allocates_nothing() {
        let mut data = u32::MAX.to_le_bytes().to_vec();
        data.extend_from_slice(&[0; 16]);
        assert_eq!(decode_policy(&data), None);
        let mut plan = vec![0u8];
        plan.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_plan(&plan), None);
    }
}
