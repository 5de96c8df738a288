//! [`block_on`]: a run driven on its caller's own thread, which waits on
//! the child's socket itself.
//!
//! A caller that waits for a run on its thread (the Python package's
//! blocking `run()` and session cells, `pycage bench`) used to park in
//! tokio's `block_on` while the reactor, on a worker thread, watched the
//! child's socket: the child's `done` woke the worker, which woke the
//! caller, two wake-ups in a row where one would do. The reactor also
//! woke a worker as the socket was registered for the run (a new socket
//! is writable) and each time the child read its frames (writable again),
//! so a trivial run woke a second core three times while it mattered
//! most. On a VM, waking an idle core costs tens of microseconds.
//!
//! Here the caller polls the future itself, inside the runtime's context
//! (timers, tasks and every other descriptor work as usual: the runtime
//! must be multi-thread, so that its workers drive them), and while the
//! future is pending it waits in `poll(2)` on an eventfd its waker writes
//! and on the child's socket of each run that said it waits for it
//! ([`wait_for`]). The run's socket is then not registered with
//! the reactor at all (`channel::Channel::Plain`): the child's writes wake
//! the caller and nothing else. A run that a worker thread polls instead
//! (an `async` caller, or a blocking one that handed the run over) finds
//! [`caller_polls`] false and registers it.
//!
//! The sockets are named by thread-local hints that the runs set while
//! this thread polls them (one future may drive several runs), that are
//! read between two polls only, and that each run takes back when it
//! stops waiting ([`Noted`]): a run, suspended, owns its socket until it
//! is polled again by this thread or dropped. A caller that moves the
//! future to another thread clears the hints first ([`forget_wait_hint`]).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use rustix::event::{EventfdFlags, PollFd, PollFlags};

thread_local! {
    /// Whether a [`block_on`] on this thread is polling its future now.
    static CALLER: Cell<bool> = const { Cell::new(false) };
    /// What the runs of the future polled last on this thread wait for:
    /// descriptors and their `PollFlags` bits.
    static WAIT: RefCell<Vec<(RawFd, u16)>> = const { RefCell::new(Vec::new()) };
    /// This thread's waker, made by its first [`block_on`].
    static WAKER: RefCell<Option<Arc<EventfdWaker>>> = const { RefCell::new(None) };
}

/// Whether the future is being polled by a [`block_on`] caller, which waits
/// on what [`wait_for`] names: a run may then leave its socket unregistered.
pub fn caller_polls() -> bool {
    CALLER.with(Cell::get)
}

/// Notes, for the [`block_on`] caller polling on this thread, that a run
/// waits for `fd` to be readable (`read`) and/or writable (`write`), until
/// `noted` (made before, and kept while the run waits) is dropped.
pub fn wait_for(noted: &Noted, read: bool, write: bool) {
    let mut flags = PollFlags::empty();
    if read {
        flags |= PollFlags::IN;
    }
    if write {
        flags |= PollFlags::OUT;
    }
    WAIT.with(|cell| {
        let mut hints = cell.borrow_mut();
        match hints.iter_mut().find(|(fd, _)| *fd == noted.0) {
            Some((_, bits)) => *bits |= flags.bits(),
            None => hints.push((noted.0, flags.bits())),
        }
    });
}

/// A run's claim on its socket's hints: dropped when the run stops waiting
/// (its wait completed or was dropped), it takes them back, so no hint
/// outlives the descriptor it names.
pub struct Noted(RawFd);

impl Noted {
    /// For `fd`, which must stay open while this lives.
    pub fn new(fd: BorrowedFd<'_>) -> Noted {
        Noted(fd.as_raw_fd())
    }
}

impl Drop for Noted {
    fn drop(&mut self) {
        WAIT.with(|cell| cell.borrow_mut().retain(|(fd, _)| *fd != self.0));
    }
}

/// Forgets what the runs polled on this thread wait for. Call it before
/// the runs' future moves to another thread (a tokio task): their sockets
/// are not this thread's to wait on any more.
pub fn forget_wait_hint() {
    WAIT.with(|cell| cell.borrow_mut().clear());
}

/// Descriptors a caller waits on, with their `PollFlags` bits.
type Hints = Vec<(RawFd, u16)>;

/// Takes the hints noted on this thread.
fn take_hints() -> Hints {
    WAIT.with(|cell| std::mem::take(&mut *cell.borrow_mut()))
}

/// Wakes the blocked caller: one write to its eventfd.
struct EventfdWaker {
    fd: OwnedFd,
}

impl Wake for EventfdWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Fails only with a full counter (2^64 - 2 wake-ups not taken),
        // which already wakes the caller.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }
}

impl EventfdWaker {
    fn new() -> Option<Arc<EventfdWaker>> {
        let fd = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).ok()?;
        Some(Arc::new(EventfdWaker { fd }))
    }
}

/// Polls one future: notes that this thread's caller polls it, and clears
/// the note (a panic included).
struct Polling;

impl Polling {
    fn start() -> Polling {
        forget_wait_hint();
        CALLER.with(|c| c.set(true));
        Polling
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        CALLER.with(|c| c.set(false));
    }
}

/// Drives `future` to its end on this thread, inside `handle`'s context
/// (see the module docs), and returns its output. `handle` should be a
/// multi-thread runtime's: with a current-thread one (nothing else would
/// drive its reactor), or without an eventfd, this is `handle.block_on`,
/// with its limits.
///
/// Called from within a future that a `block_on` on this thread drives (a
/// callback run inside its poll: the package's `on_log` that starts a
/// run), it drives its own future to its end first; the enclosing future
/// stays suspended in its poll meanwhile, so its runs' sockets stay noted
/// for it, and it is polled again once this returns. A future that waits
/// for the enclosing one's progress never ends there: the package refuses
/// a session's cell inside a cell of the same session before it comes
/// here.
pub fn block_on<F: Future>(handle: &tokio::runtime::Handle, future: F) -> F::Output {
    if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return handle.block_on(future);
    }
    let made = WAKER.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.is_none() {
            *slot = EventfdWaker::new();
        }
        slot.clone()
    });
    let Some(state) = made else {
        return handle.block_on(future);
    };
    let _enclosing = Enclosing::save(&state);
    let _entered = handle.enter();
    let waker = Waker::from(Arc::clone(&state));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        let polled = {
            let _polling = Polling::start();
            future.as_mut().poll(&mut cx)
        };
        if let Poll::Ready(output) = polled {
            return output;
        }
        wait(state.fd.as_fd(), &take_hints());
    }
}

/// What an enclosing [`block_on`] on this thread was doing when a nested
/// one started, put back when the nested one returns (a panic included):
/// the hints its runs had noted so far in the poll that is suspended, and
/// the waker the two share. `None` when this `block_on` is not nested.
struct Enclosing(Option<(Hints, Arc<EventfdWaker>)>);

impl Enclosing {
    fn save(waker: &Arc<EventfdWaker>) -> Enclosing {
        Enclosing(caller_polls().then(|| (take_hints(), Arc::clone(waker))))
    }
}

impl Drop for Enclosing {
    fn drop(&mut self) {
        let Some((hints, waker)) = self.0.take() else {
            return;
        };
        CALLER.with(|c| c.set(true));
        WAIT.with(|cell| *cell.borrow_mut() = hints);
        // The two share this thread's eventfd: a wake-up meant for the
        // enclosing future may have been taken by the nested one's wait.
        waker.wake_by_ref();
    }
}

/// Waits until the eventfd, or a hinted descriptor for its flags, is ready
/// (or a signal interrupts), then empties the eventfd.
fn wait(eventfd: BorrowedFd<'_>, hints: &[(RawFd, u16)]) {
    let borrow = |fd: RawFd| {
        // SAFETY: each hint was noted while this thread polled the future,
        // by a run that owns the descriptor and takes the hint back when it
        // stops waiting (`Noted`); the future is suspended until this
        // thread polls it again (after this call), so the descriptor stays
        // open. A future moved to another thread cleared the hints first.
        unsafe { BorrowedFd::borrow_raw(fd) }
    };
    let mut fds = Vec::with_capacity(1 + hints.len());
    fds.push(PollFd::from_borrowed_fd(eventfd, PollFlags::IN));
    fds.extend(
        hints.iter().map(|&(fd, bits)| PollFd::from_borrowed_fd(borrow(fd), PollFlags::from_bits_truncate(bits))),
    );
    // EINTR (a signal for the caller's thread) and spurious returns only
    // make the caller poll the future once more.
    let _ = rustix::event::poll(&mut fds, None);
    let mut counter = [0u8; 8];
    let _ = rustix::io::read(eventfd, &mut counter);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The hints noted so far on this thread.
    fn hints() -> Vec<(RawFd, u16)> {
        WAIT.with(|cell| cell.borrow().clone())
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
    }

    /// Runs `f` on a thread of its own and fails the test if it has not
    /// returned within a minute (a lost wake-up hangs).
    fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60)).expect("block_on lost a wake-up")
    }

    #[test]
    fn timers_tasks_and_the_reactor_work_for_a_future_polled_on_the_callers_thread() {
        let rt = runtime();
        let caller = std::thread::current().id();
        let out = block_on(rt.handle(), async move {
            assert!(caller_polls());
            tokio::time::sleep(Duration::from_millis(5)).await;
            let task = tokio::spawn(async { (std::thread::current().id(), caller_polls()) });
            let (a, b) = tokio::net::UnixStream::pair().unwrap();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                a.try_write(b"frame").unwrap();
            });
            let mut buf = [0u8; 8];
            b.readable().await.unwrap();
            let n = b.try_read(&mut buf).unwrap();
            (std::thread::current().id(), task.await.unwrap(), buf[..n].to_vec())
        });
        assert_eq!(out.0, caller, "the future is polled on the caller's thread");
        assert_ne!(out.1 .0, caller, "spawned tasks run on the runtime's workers");
        assert!(!out.1 .1, "a worker thread is not a block_on caller");
        assert_eq!(out.2, b"frame");
        assert!(!caller_polls());
        assert!(hints().is_empty(), "no hint outlives the call");
    }

    #[test]
    fn a_socket_the_reactor_never_saw_wakes_the_caller_that_waits_on_it() {
        within_a_minute(|| {
            let rt = runtime();
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
            ours.set_nonblocking(true).unwrap();
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                std::io::Write::write_all(&mut &theirs, b"done").unwrap();
                theirs
            });
            let mut polls = 0;
            let noted = Noted::new(ours.as_fd());
            let got = block_on(
                rt.handle(),
                std::future::poll_fn(|_| {
                    polls += 1;
                    let mut buf = [0u8; 8];
                    match rustix::io::read(&ours, &mut buf) {
                        Ok(n) => Poll::Ready(buf[..n].to_vec()),
                        Err(_) => {
                            // No waker is stored anywhere: only the hint can
                            // wake this future.
                            wait_for(&noted, true, false);
                            Poll::Pending
                        }
                    }
                }),
            );
            drop(noted);
            drop(writer.join().unwrap());
            assert_eq!(got, b"done");
            assert!(polls >= 2);
        });
    }

    #[test]
    fn a_call_from_within_a_driven_future_drives_its_own_and_hands_the_thread_back() {
        within_a_minute(|| {
            let rt = runtime();
            let handle = rt.handle().clone();
            // A socket that never becomes readable (its peer stays open and
            // silent): only the nested call's wake-up can wake the future.
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
            let noted = Noted::new(ours.as_fd());
            let mut polls = 0;
            let outer = block_on(
                rt.handle(),
                std::future::poll_fn(|_| {
                    polls += 1;
                    if polls > 1 {
                        return Poll::Ready(polls);
                    }
                    wait_for(&noted, true, false);
                    let inner = block_on(&handle, async {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        (caller_polls(), hints())
                    });
                    assert_eq!(
                        inner,
                        (true, Vec::new()),
                        "the nested call polls its own future, without the enclosing one's hints"
                    );
                    assert!(caller_polls(), "the enclosing call polls again");
                    assert_eq!(hints(), vec![(ours.as_raw_fd(), PollFlags::IN.bits())], "its hints are back");
                    Poll::Pending
                }),
            );
            drop((noted, theirs));
            assert_eq!(outer, 2, "the enclosing future was polled again");
            assert!(!caller_polls());
            assert!(hints().is_empty());
        });
    }

    #[test]
    fn hints_merge_per_descriptor_and_each_run_takes_its_own_back() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (on_a, on_b) = (Noted::new(a.as_fd()), Noted::new(b.as_fd()));
        wait_for(&on_a, true, false);
        wait_for(&on_a, false, true);
        wait_for(&on_b, true, false);
        let both = (PollFlags::IN | PollFlags::OUT).bits();
        assert_eq!(hints(), vec![(a.as_raw_fd(), both), (b.as_raw_fd(), PollFlags::IN.bits())]);
        drop(on_a);
        assert_eq!(hints(), vec![(b.as_raw_fd(), PollFlags::IN.bits())]);
        forget_wait_hint();
        assert!(hints().is_empty());
        drop(on_b);
        assert!(hints().is_empty());
    }

    #[test]
    fn a_current_thread_runtime_is_driven_by_tokio_itself() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let out = block_on(rt.handle(), async { caller_polls() });
        assert!(!out, "tokio's own block_on polls it");
    }
}
