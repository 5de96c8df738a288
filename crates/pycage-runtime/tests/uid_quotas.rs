//! A sandboxed run takes only its share of the host uid's kernel quotas.
//! Without root, runs have the caller's uid, and pending signals, pipe
//! pages (`fs.pipe-user-pages-soft`), inotify instances, POSIX message
//! queue bytes, user namespaces and locked memory are counted per uid: a
//! run that took them all would starve the caller. A program takes as
//! much of each as it may and holds it; meanwhile this process (the
//! caller) keeps using each one, and none of its attempts may fail. Runs
//! through the zygote and through exec; as root the runs have their own
//! uid, so the test runs again as `nobody`, where they share the caller's.
#![allow(clippy::unwrap_used, clippy::panic)]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pycage_runtime::*;

/// Four children each queue real-time signals to themselves until refused
/// and hold 60 pipes; inotify, message queues, a user namespace and 1 MiB
/// of locked memory are asked for too.
const TAKE_ALL: &str = "import ctypes, errno, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
def err():
    return errno.errorcode.get(ctypes.get_errno(), 'none')
sig = signal.SIGRTMIN + 3
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
class Info(ctypes.Structure):
    _fields_ = [('signo', ctypes.c_int), ('errno', ctypes.c_int), ('code', ctypes.c_int), ('pad', ctypes.c_byte * 116)]
r, w = os.pipe()
for i in range(4):
    if os.fork() == 0:
        pipes = [os.pipe() for _ in range(60)]
        n, info = 0, Info(sig, 0, -1)
        while n < 200000 and libc.syscall(129, os.getpid(), sig, ctypes.byref(info)) == 0:
            n += 1
        os.write(w, b'%d\\n' % n)
        signal.pause()
data = b''
while data.count(b'\\n') < 4:
    data += os.read(r, 64)
signals = sum(int(n) for n in data.split())
ctypes.set_errno(0)
inotify = err() if libc.inotify_init1(0) < 0 else 'created'
ctypes.set_errno(0)
mqueue = err() if libc.mq_open(b'/pycage', 0o102, 0o600, None) < 0 else 'created'
ctypes.set_errno(0)
userns = err() if libc.unshare(0x10000000) else 'created'
buf = ctypes.create_string_buffer(1 << 20)
ctypes.set_errno(0)
locked = err() if libc.mlock(buf, 1 << 20) else 'locked'
print('holding', flush=True)
time.sleep(2)
return [signals <= 1024, inotify, mqueue, userns, locked]";

/// What the caller could not do while the run held its share.
fn caller_uses_its_quotas(stop: &AtomicBool) -> Vec<String> {
    let mut failures = Vec::new();
    let sig = libc::SIGRTMIN() + 5;
    // SAFETY: a zeroed sigset is valid to fill; this thread's mask only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let mut note = |what: String| {
        if !failures.contains(&what) {
            failures.push(what);
        }
    };
    while !stop.load(Ordering::Relaxed) {
        // A queued signal to this thread, then taken back.
        // SAFETY: plain syscalls on this thread's own ids and a zeroed siginfo.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            info.si_signo = sig;
            info.si_code = -1;
            let queued = libc::syscall(libc::SYS_rt_tgsigqueueinfo, libc::getpid(), libc::gettid(), sig, &info);
            if queued != 0 {
                note(format!("rt_tgsigqueueinfo: {}", std::io::Error::last_os_error()));
            } else {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig);
                let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
            }
        }
        // A pipe of full size (past the uid's pipe-user-pages-soft, new
        // pipes get two pages).
        match rustix::pipe::pipe() {
            Ok((r, _w)) => match rustix::pipe::fcntl_getpipe_size(&r) {
                Ok(size) if size >= 65536 => {}
                other => note(format!("pipe size {other:?}")),
            },
            Err(e) => note(format!("pipe: {e}")),
        }
        // SAFETY: inotify_init1 makes a descriptor, closed at once.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        if fd < 0 {
            note(format!("inotify_init1: {}", std::io::Error::last_os_error()));
        } else {
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
        }
        let mut page = vec![0u8; 64 * 1024];
        // SAFETY: locks and unlocks this buffer only.
        unsafe {
            if libc::mlock(page.as_mut_ptr().cast(), page.len()) != 0 {
                note(format!("mlock: {}", std::io::Error::last_os_error()));
            } else {
                libc::munlock(page.as_mut_ptr().cast(), page.len());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    failures
}

async fn take_all(spawn: SpawnMode) -> (RunResult, Vec<String>) {
    let python = std::env::var_os("PYCAGE_TEST_PYTHON").map(std::path::PathBuf::from);
    let rt = Runtime::new(RuntimeConfig {
        isolation: Isolation::Sandbox,
        spawn,
        python,
        wall_time: Duration::from_secs(60),
        sandbox_uid_base: 2_400_000,
        sandbox_uid_count: 10_000,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let caller = std::thread::spawn(move || caller_uses_its_quotas(&flag));
    let r = rt.run(RunRequest::new(TAKE_ALL)).await.unwrap();
    stop.store(true, Ordering::Relaxed);
    let failures = caller.join().unwrap();
    rt.shutdown().await;
    (r, failures)
}

#[test]
fn a_run_takes_only_its_share_of_the_uids_quotas() {
    if !pycage_sandbox::probe().missing().is_empty() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for spawn in [SpawnMode::Zygote, SpawnMode::Exec] {
        let (r, failures) = rt.block_on(take_all(spawn));
        assert_eq!(r.logs, ["holding"], "{spawn:?}: {r:?}");
        assert_eq!(
            r.value.as_ref().map(JsonValue::to_canonical_string).as_deref(),
            Some("[true,\"ENOSYS\",\"ENOSYS\",\"EPERM\",\"ENOMEM\"]"),
            "{spawn:?}: {r:?}"
        );
        assert_eq!(failures, Vec::<String>::new(), "{spawn:?}: the caller was starved");
    }
}

/// As root, again as `nobody`: the runs then share the caller's uid.
#[test]
fn a_run_takes_only_its_share_of_the_uids_quotas_as_an_unprivileged_user() {
    common::rerun_as_nobody("a_run_takes_only_its_share_of_the_uids_quotas");
}
