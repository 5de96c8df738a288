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
//! future is pending it waits in `poll(2)` on two descriptors: an eventfd
//! its waker writes, and the child's socket when the run said it waits
//! for it ([`wait_for`]). The run's socket is then not registered with
//! the reactor at all (`channel::Channel::Plain`): the child's writes wake
//! the caller and nothing else. A run that a worker thread polls instead
//! (an `async` caller, or a blocking one that handed the run over) finds
//! [`caller_polls`] false and registers it.
//!
//! The socket is named by a thread-local hint that the run sets while this
//! thread polls it, and that is read between two polls only: the run,
//! suspended, owns the socket until it is polled again by this thread. A
//! caller that moves the future to another thread clears the hint first
//! ([`forget_wait_hint`]).

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
    /// What the future polled last on this thread waits for: a descriptor
    /// and its `PollFlags` bits, or `(-1, 0)`.
    static WAIT: Cell<(RawFd, u16)> = const { Cell::new((-1, 0)) };
    /// This thread's waker, kept for its next [`block_on`]; `None` while
    /// one uses it (a nested call makes its own).
    static SPARE: RefCell<Option<Arc<EventfdWaker>>> = const { RefCell::new(None) };
}

/// Whether the future is being polled by a [`block_on`] caller, which waits
/// on what [`wait_for`] names: a run may then leave its socket unregistered.
pub(crate) fn caller_polls() -> bool {
    CALLER.with(Cell::get)
}

/// Notes, for the [`block_on`] caller polling on this thread, that the run
/// waits for `fd` to be readable (`read`) and/or writable (`write`). The
/// descriptor must stay open until the future is polled again.
pub(crate) fn wait_for(fd: BorrowedFd<'_>, read: bool, write: bool) {
    let mut flags = PollFlags::empty();
    if read {
        flags |= PollFlags::IN;
    }
    if write {
        flags |= PollFlags::OUT;
    }
    WAIT.with(|cell| {
        let (noted, noted_flags) = cell.get();
        if noted == fd.as_raw_fd() {
            flags |= PollFlags::from_bits_truncate(noted_flags);
        }
        cell.set((fd.as_raw_fd(), flags.bits()));
    });
}

/// Forgets what a run polled on this thread waits for. Call it before the
/// run's future moves to another thread (a tokio task): its socket is not
/// this thread's to wait on any more.
pub fn forget_wait_hint() {
    WAIT.with(|cell| cell.set((-1, 0)));
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

/// Gives the thread's waker back for its next [`block_on`], and restores
/// what an outer call on this thread (this one nested in its poll) had
/// noted.
struct Restore {
    waker: Option<Arc<EventfdWaker>>,
    caller: bool,
    wait: (RawFd, u16),
}

impl Restore {
    fn take(waker: Arc<EventfdWaker>) -> Restore {
        Restore { waker: Some(waker), caller: CALLER.with(Cell::get), wait: WAIT.with(Cell::get) }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        CALLER.with(|c| c.set(self.caller));
        WAIT.with(|w| w.set(self.wait));
        if let Some(waker) = self.waker.take() {
            if !self.caller {
                SPARE.with(|slot| *slot.borrow_mut() = Some(waker));
            }
        }
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
/// with its limits. Like it, this must not be called from within an async
/// context; a call nested in the poll of another (from a callback) works,
/// with its own eventfd.
pub fn block_on<F: Future>(handle: &tokio::runtime::Handle, future: F) -> F::Output {
    if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return handle.block_on(future);
    }
    // A nested call (from a callback run inside the outer poll) gets its
    // own eventfd: sharing one, it would take the outer caller's wake-ups.
    let spare = SPARE.with(|slot| slot.borrow_mut().take()).or_else(EventfdWaker::new);
    let Some(state) = spare else {
        return handle.block_on(future);
    };
    let _entered = handle.enter();
    let waker = Waker::from(Arc::clone(&state));
    let _restore = Restore::take(Arc::clone(&state));
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
        let (fd, flags) = WAIT.with(Cell::get);
        forget_wait_hint();
        wait(state.fd.as_fd(), fd, PollFlags::from_bits_truncate(flags));
    }
}

/// Waits until the eventfd, or `hint` for `flags`, is ready (or a signal
/// interrupts), then empties the eventfd.
fn wait(eventfd: BorrowedFd<'_>, hint: RawFd, flags: PollFlags) {
    // SAFETY: `hint` was noted while this thread polled the future, by the
    // run that owns the descriptor; the future is suspended until this
    // thread polls it again (after this call), so the descriptor stays
    // open. A future moved to another thread cleared the hint first.
    let socket = (hint >= 0 && !flags.is_empty()).then(|| unsafe { BorrowedFd::borrow_raw(hint) });
    let mut fds = [PollFd::new(&eventfd, PollFlags::IN), PollFd::new(&eventfd, PollFlags::IN)];
    let count = match &socket {
        Some(socket) => {
            fds[1] = PollFd::new(socket, flags);
            2
        }
        None => 1,
    };
    // EINTR (a signal for the caller's thread) and spurious returns only
    // make the caller poll the future once more.
    let _ = rustix::event::poll(fds.get_mut(..count).unwrap_or_default(), None);
    let mut counter = [0u8; 8];
    let _ = rustix::io::read(eventfd, &mut counter);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        assert_eq!(WAIT.with(Cell::get), (-1, 0), "no hint outlives the call");
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
                            wait_for(ours.as_fd(), true, false);
                            Poll::Pending
                        }
                    }
                }),
            );
            drop(writer.join().unwrap());
            assert_eq!(got, b"done");
            assert!(polls >= 2);
        });
    }

    #[test]
    fn a_nested_call_takes_none_of_the_outer_callers_wake_ups() {
        within_a_minute(|| {
            let rt = runtime();
            let handle = rt.handle().clone();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            // Fires while the nested call below waits: the wake-up is the
            // outer future's, and must reach it.
            rt.spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let _ = tx.send(());
            });
            let mut rx = Box::pin(rx);
            let mut nested = false;
            block_on(
                rt.handle(),
                std::future::poll_fn(move |cx| {
                    if let Poll::Ready(sent) = rx.as_mut().poll(cx) {
                        sent.unwrap();
                        return Poll::Ready(());
                    }
                    if !nested {
                        nested = true;
                        let inner = block_on(&handle, async {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            7
                        });
                        assert_eq!(inner, 7);
                        assert!(caller_polls(), "the outer poll goes on after the nested call");
                    }
                    Poll::Pending
                }),
            );
        });
    }

    #[test]
    fn hints_merge_per_descriptor_and_are_forgotten() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        wait_for(a.as_fd(), true, false);
        wait_for(a.as_fd(), false, true);
        assert_eq!(WAIT.with(Cell::get), (a.as_raw_fd(), (PollFlags::IN | PollFlags::OUT).bits()));
        wait_for(b.as_fd(), true, false);
        assert_eq!(WAIT.with(Cell::get), (b.as_raw_fd(), PollFlags::IN.bits()));
        forget_wait_hint();
        assert_eq!(WAIT.with(Cell::get), (-1, 0));
    }

    #[test]
    fn a_current_thread_runtime_is_driven_by_tokio_itself() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let out = block_on(rt.handle(), async { caller_polls() });
        assert!(!out, "tokio's own block_on polls it");
    }
}
