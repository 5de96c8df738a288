//! Driving one run: the I/O around [`machine::RunMachine`].
//!
//! The driver owns the child's channels (fd 3, the raw fd 1/2 pipe), the
//! binding tasks, the deadline, cancellation and the child process; every
//! protocol rule lives in the machine. One `select!` loop feeds the machine
//! what arrives and does what it asks (write, start calls, stream events);
//! when the machine settles, the driver ends the child, drains the raw pipe
//! and lets the machine build the [`RunResult`].

pub(crate) mod machine;

use std::os::fd::BorrowedFd;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use pycage_protocol::JsonValue;
use tokio::io::Interest;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::bindings::{BindingError, CallContext, RunId};
use crate::config::RuntimeConfig;
use crate::launch::spawn::Worker;
use crate::outcome::{FailureKind, RunEvent, RunResult};
use machine::{ChildEnd, Settled};
pub(crate) use machine::{Extras, Opening, RunMachine};
use pycage_channel::channel::{Channel, Received};
use pycage_process::Exit;

/// A run's budget watch, as the run loop awaits it: the failure to settle
/// with. Pending forever when there is nothing to watch.
pub(crate) type BudgetWatch =
    std::pin::Pin<Box<dyn std::future::Future<Output = (crate::outcome::FailureKind, String)> + Send>>;

/// Read buffer for each of fd 3 and the raw output pipe, at most ...
const READ_BUF: usize = 64 * 1024;

/// ... and at first: most runs read a few hundred bytes, and zeroing two
/// buffers of the largest size cost every run (a session cell too) more
/// than its reads.
const FIRST_READ_BUF: usize = 4 * 1024;

/// Doubles `buf` (up to [`READ_BUF`]) after a read of `n` bytes filled it.
fn grow_after(buf: &mut Vec<u8>, n: usize) {
    if n == buf.len() && buf.len() < READ_BUF {
        buf.resize((buf.len() * 2).min(READ_BUF), 0);
    }
}

/// Longest the raw pipe is drained after the run settled.
const DRAIN_LIMIT: Duration = Duration::from_millis(200);

/// How often the driver asks the kernel how far the child has read, while
/// a call is held until it reads (see `machine`'s module docs).
const READ_PROGRESS_POLL: Duration = Duration::from_millis(1);

pub(crate) struct RunInputs<'a> {
    pub config: &'a RuntimeConfig,
    /// Names the run to its bindings ([`CallContext`]).
    pub run: RunId,
    pub cancel: CancellationToken,
    /// Cancelled when the runtime shuts down (or a session's run is closed).
    pub shutdown: CancellationToken,
    /// Why `shutdown` stopped the run, asked when it did.
    pub stopped: &'a (dyn Fn() -> &'static str + Sync),
    pub events: Option<mpsc::Sender<RunEvent>>,
    pub deadline: Instant,
    /// Resolves when a run-wide budget is crossed (the watchdog).
    pub budget: BudgetWatch,
    /// Where the child's fd-3 bytes are copied as received, if anywhere.
    pub transcript: Option<Transcript>,
    /// A resumed durable run: its budgets count from the replay's end.
    pub resumed: Option<Resumed>,
}

/// How a resumed run switches to its live budgets when its replay is over.
pub(crate) struct Resumed {
    /// The wall clock left: the journal's budget less what it spent.
    pub wall_left: Duration,
    /// Told when the replay is over (the run's watch counts CPU from then).
    pub replay_over: tokio::sync::oneshot::Sender<()>,
    /// The child's CPU at the replay's end, as the watch sampled it.
    pub cpu_base: Arc<OnceLock<Duration>>,
}

/// A copy of everything the child writes on fd 3, as received, for
/// `pycage frames validate`. Written by a blocking thread; the run never
/// waits for it: chunks the writer has no room for (over 1,024 unwritten
/// chunks, 64 MiB at most) are dropped and counted.
pub(crate) struct Transcript {
    tx: mpsc::Sender<Vec<u8>>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Transcript {
    /// Writes to `file` until the run's driver drops its `Transcript`;
    /// `done` resolves when everything was written (or the write failed).
    pub(crate) fn to_file(file: std::fs::File) -> (Transcript, tokio::task::JoinHandle<std::io::Result<u64>>) {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(1024);
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let writer = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut out = std::io::BufWriter::new(file);
            while let Some(chunk) = rx.blocking_recv() {
                out.write_all(&chunk)?;
            }
            out.flush()?;
            Ok(0)
        });
        (Transcript { tx, dropped }, writer)
    }

    fn record(&self, bytes: &[u8]) {
        if self.tx.try_send(bytes.to_vec()).is_err() {
            self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// What became of the child when the run settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildAfter {
    /// It sent `done` and is still there: a session child waits for its
    /// next `run`; a one-shot child is about to exit and must be stopped.
    Finished,
    /// It was stopped, or it died, and has been reaped.
    Gone,
}

/// The child's raw fd 1 and fd 2 (one pipe), read until EOF.
struct RawPipe {
    rx: Option<tokio::net::unix::pipe::Receiver>,
    buf: Vec<u8>,
}

impl RawPipe {
    fn new(rx: Option<tokio::net::unix::pipe::Receiver>) -> Self {
        RawPipe { rx, buf: vec![0; FIRST_READ_BUF] }
    }

    fn closed(&self) -> bool {
        self.rx.is_none()
    }

    /// What the pipe holds now, without waiting. (A plain non-blocking
    /// `read`: tokio's `try_read` answers `WouldBlock` without asking the
    /// kernel until its reactor has seen the pipe become readable.)
    fn drain_now(&mut self, m: &mut RunMachine) {
        while let Some(rx) = &self.rx {
            match rustix::io::read(rx, &mut self.buf) {
                Ok(n) if n > 0 => {
                    m.receive_raw(self.buf.get(..n).unwrap_or_default());
                    grow_after(&mut self.buf, n);
                }
                Err(rustix::io::Errno::AGAIN) => return,
                Err(rustix::io::Errno::INTR) => {}
                Ok(_) | Err(_) => self.rx = None,
            }
        }
    }

    /// Resolves when tokio saw the pipe readable (possibly stale:
    /// [`RawPipe::holds_bytes`] says) or closed (true). Never resolves while
    /// the pipe is closed here, so a `select!` arm on it goes quiet.
    async fn ready(&self) -> bool {
        match &self.rx {
            // An error is the next read's to report.
            Some(rx) => rx.ready(Interest::READABLE).await.map_or(true, |r| r.is_read_closed()),
            None => std::future::pending().await,
        }
    }

    /// Whether the pipe holds bytes now, by `FIONREAD` rather than tokio's
    /// readiness (cleared when it holds none), which is what orders the logs.
    /// The child sends a `print` as frames only while this pipe is empty,
    /// so from the moment it holds bytes until the host reads them no frame
    /// is sent, and every frame sent before those bytes is in fd 3 already:
    /// taking fd 3 after this check and before the read puts each such
    /// frame ahead of them. Under load, with the pipe read as soon as tokio
    /// saw it readable, 9 to 16 of 240 outputs of a print-then-`os.system`
    /// loop had a printed line after later subprocess output (tokio had not
    /// seen fd 3 readable yet); taking fd 3 just before the read, without
    /// the check, left a window in which a preempted host missed a frame
    /// sent meanwhile (26 to 39 of 240).
    fn holds_bytes(&self) -> bool {
        let Some(rx) = &self.rx else { return false };
        rx.try_io(|| match rustix::io::ioctl_fionread(rx) {
            Ok(0) => Err(std::io::ErrorKind::WouldBlock.into()),
            // Bytes, or an error the read reports.
            Ok(_) | Err(_) => Ok(()),
        })
        .is_ok()
    }

    /// One read of what the pipe holds now, into the machine; EOF or an
    /// error closes it, and finding it empty clears tokio's readiness.
    fn take(&mut self, m: &mut RunMachine) {
        let Some(rx) = &self.rx else { return };
        match rx.try_read(&mut self.buf) {
            Ok(n) if n > 0 => {
                m.receive_raw(self.buf.get(..n).unwrap_or_default());
                grow_after(&mut self.buf, n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Ok(_) | Err(_) => self.rx = None,
        }
    }
}

/// Takes what fd 3 holds right now, and no more (a child that keeps
/// writing cannot hold the driver here), into the machine while it takes
/// input: without waiting, and whatever tokio last saw of its readiness.
/// For the exited child's last frames (`done`), and before each read of
/// the raw pipe (see [`RawPipe::holds_bytes`]).
fn take_frames_now(inbox: &mut Inbox, m: &mut RunMachine, sock: &Channel, transcript: Option<&Transcript>) {
    inbox.feed(m);
    // At least one read: `FIONREAD` says 0 at EOF too, which a read sees
    // (and a final unterminated line can still be a frame).
    let mut left = rustix::io::ioctl_fionread(sock.fd()).unwrap_or(0).max(1);
    while left > 0 && inbox.is_empty() && m.wants_input() {
        match pycage_channel::channel::read_now(&sock.fd(), &mut inbox.buf) {
            Ok(0) => m.receive_eof(),
            Ok(n) => {
                left = left.saturating_sub(n as u64);
                inbox.from = 0;
                inbox.len = n;
                if let Some(t) = transcript {
                    t.record(inbox.buf.get(..n).unwrap_or_default());
                }
                inbox.feed(m);
                grow_after(&mut inbox.buf, n);
            }
            // An error is the next read's to report.
            Err(_) => break,
        }
    }
}

/// Starts what the machine asks: a call ready on its first poll is answered
/// inline (no task, no wakeup); the rest run as tasks.
fn start_calls(m: &mut RunMachine, tasks: &mut JoinSet<(u64, Result<JsonValue, BindingError>)>, cx: &CallContext) {
    while let Some(call) = m.next_call() {
        let mut fut = call.binding.call(call.args, cx.clone());
        let mut waker_cx = std::task::Context::from_waker(std::task::Waker::noop());
        match fut.as_mut().poll(&mut waker_cx) {
            std::task::Poll::Ready(result) => m.call_finished(call.id, result),
            std::task::Poll::Pending => {
                let id = call.id;
                tasks.spawn(async move { (id, fut.await) });
            }
        }
    }
}

/// Hands the consumer what it has room for; the rest waits in the machine
/// (the driver then reads nothing more until there is room).
fn forward_events(m: &mut RunMachine, events: &mut Option<mpsc::Sender<RunEvent>>) {
    let Some(tx) = events else { return };
    while let Some(ev) = m.next_event() {
        match tx.try_send(ev) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) => {
                m.unshift_event(ev);
                return;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                // Nobody listens any more: stop building events.
                m.stop_streaming();
                *events = None;
                return;
            }
        }
    }
}

/// Room for one event, once the consumer takes one; `None` when the
/// consumer is gone. Pends forever without a consumer.
async fn event_room(events: &Option<mpsc::Sender<RunEvent>>) -> Option<mpsc::Permit<'_, RunEvent>> {
    match events {
        Some(tx) => tx.reserve().await.ok(),
        None => std::future::pending().await,
    }
}

/// Tells the machine what the kernel holds for the child (zero: it has
/// read everything written to fd 3).
fn update_read_progress(m: &mut RunMachine, sock: BorrowedFd<'_>) {
    if m.has_unread_replies() || m.waiting_for_child_to_read() {
        if let Ok(queued) = pycage_channel::channel::unread_by_peer(&sock) {
            m.kernel_queued(queued as u64);
        }
    }
}

/// Input read from fd 3 that the machine has not taken yet (it stops after
/// a held call): at most one read's worth.
struct Inbox {
    buf: Vec<u8>,
    /// `buf[from..len]` is not taken yet.
    from: usize,
    len: usize,
}

impl Inbox {
    fn is_empty(&self) -> bool {
        self.from >= self.len
    }

    /// Offers what is left to the machine.
    fn feed(&mut self, m: &mut RunMachine) {
        if !self.is_empty() && m.wants_input() {
            let taken = m.receive(self.buf.get(self.from..self.len).unwrap_or_default());
            self.from += taken;
        }
    }
}

/// Hands the consumer the run's last events, waiting for room (bounded: a
/// consumer that stopped reading without dropping its receiver would hold
/// the result back; after [`FINAL_EVENTS_WAIT`] the rest is dropped).
async fn finish_events(m: &mut RunMachine, events: &mut Option<mpsc::Sender<RunEvent>>) {
    let until = Instant::now() + FINAL_EVENTS_WAIT;
    while let Some(ev) = m.next_event() {
        let Some(tx) = events.as_ref() else { return };
        match tokio::time::timeout_at(until, tx.send(ev)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return,
        }
    }
}

/// Longest the result waits for a streaming consumer to take the last events.
const FINAL_EVENTS_WAIT: Duration = Duration::from_secs(5);

/// A run's record as a session's cell, when it ran to its end (see
/// [`RunMachine::finish_cell`]).
pub(crate) type CellRecord = Option<pycage_journal::Cell>;

/// Drives one run on `worker` until the machine settles.
pub(crate) async fn execute(
    worker: &mut Worker,
    mut m: RunMachine,
    inputs: RunInputs<'_>,
) -> (RunResult, ChildAfter, CellRecord) {
    let config = inputs.config;
    let Some(sock) = worker.sock.take() else {
        let r = RunResult::failed(FailureKind::WorkerExit, "the worker has no protocol channel".into(), Vec::new());
        return (r, ChildAfter::Gone, None);
    };
    let cx = CallContext { run: inputs.run, settled: CancellationToken::new() };
    // Whatever happens below, calls still queued outside their futures
    // (threads, processes) learn that nobody will read their replies.
    let _settled = cx.settled.clone().drop_guard();
    let mut tasks = JoinSet::new();
    let mut inbox = Inbox { buf: vec![0u8; FIRST_READ_BUF], from: 0, len: 0 };
    let mut raw = RawPipe::new(worker.output.take());
    let mut write_failed = false;
    let mut budget = inputs.budget;
    let mut events = inputs.events;
    // A durable run counts wall time from its start, or from the end of
    // its replay when resumed (and its deadline moves there).
    let mut deadline = inputs.deadline;
    let mut live_since = inputs.deadline.checked_sub(config.wall_time).unwrap_or_else(Instant::now);
    let mut resumed = inputs.resumed;
    let mut cpu_base = None;

    let mut channel = Some(sock);
    while m.settled().is_none() {
        // Watched by this thread's blocking caller, or by the reactor.
        let sock = match channel.take().map(Channel::for_this_thread) {
            Some(Ok(sock)) => channel.insert(sock),
            _ => {
                m.settle(FailureKind::WorkerExit, "the host could not watch the protocol channel".into());
                break;
            }
        };
        update_read_progress(&mut m, sock.fd());
        inbox.feed(&mut m);
        if m.take_replay_over() {
            if let Some(r) = resumed.take() {
                live_since = Instant::now();
                deadline = live_since + r.wall_left;
                cpu_base = Some(r.cpu_base);
                let _ = r.replay_over.send(());
            }
        }
        start_calls(&mut m, &mut tasks, &cx);
        // Write what the socket takes now; the rest waits for writability.
        while !write_failed && !m.pending_output().is_empty() {
            match sock.write_now(m.pending_output()) {
                Ok(n) => m.wrote(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // The child closed its end: nothing more can be sent; its
                // exit or EOF settles the run.
                Err(_) => write_failed = true,
            }
        }
        forward_events(&mut m, &mut events);
        if m.settled().is_some() {
            break;
        }
        let want_write = !write_failed && !m.pending_output().is_empty();
        // Input is read only when the machine takes it and the consumer
        // keeps up: a slow consumer or a child over a budget of what the
        // host holds stops the reading, not the host's memory.
        let backlog = m.has_events();
        let want_read = m.wants_input() && inbox.is_empty() && !backlog;
        let poll_progress = m.waiting_for_child_to_read();
        let mut consumer_gone = false;
        tokio::select! {
            biased;
            _ = inputs.cancel.cancelled() => m.settle(FailureKind::Abort, "the run was cancelled by the caller".into()),
            _ = inputs.shutdown.cancelled() => m.settle(FailureKind::Abort, (inputs.stopped)().into()),
            _ = tokio::time::sleep_until(deadline) => m.settle(
                FailureKind::Timeout,
                format!("the wall-clock budget of {} ms was exceeded", config.wall_time.as_millis()),
            ),
            (kind, message) = &mut budget => m.settle(kind, message),
            // Descriptors and other control data the program sends with its
            // frames are closed and ignored (see `pycage_channel::channel`).
            r = sock.read(&mut inbox.buf), if want_read => match r {
                Received::Bytes(n) => {
                    inbox.from = 0;
                    inbox.len = n;
                    if let Some(t) = &inputs.transcript {
                        t.record(inbox.buf.get(..n).unwrap_or_default());
                    }
                    grow_after(&mut inbox.buf, n);
                }
                Received::End => m.receive_eof(),
                // Polled by a worker thread now: registered next turn.
                Received::Retry => {}
            },
            closed = raw.ready(), if !backlog => {
                if closed || raw.holds_bytes() {
                    take_frames_now(&mut inbox, &mut m, sock, inputs.transcript.as_ref());
                    raw.take(&mut m);
                }
            }
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                if let Ok((id, result)) = joined {
                    m.call_finished(id, result);
                }
            }
            r = sock.writable(), if want_write => {
                if r.is_err() {
                    write_failed = true;
                }
            }
            permit = event_room(&events), if backlog => match (permit, m.next_event()) {
                (Some(permit), Some(ev)) => permit.send(ev),
                (None, _) => consumer_gone = true,
                (Some(_), None) => {}
            },
            _ = tokio::time::sleep(READ_PROGRESS_POLL), if poll_progress => {}
            _ = worker.exited() => {
                // Its last frames (`done`) may be in fd 3 although their
                // readiness was not seen before the exit: take them first.
                // Calls among them are not started (nobody would read the
                // reply), and none is held back any more.
                m.child_gone();
                take_frames_now(&mut inbox, &mut m, sock, inputs.transcript.as_ref());
                m.child_exited();
            }
        }
        if consumer_gone {
            m.stop_streaming();
            events = None;
        }
    }
    // In-flight calls are abandoned: their replies would never be read.
    // Work a binding queued outside its future (a thread, a process) learns
    // it first, so nothing starts from here on.
    cx.settled.cancel();
    tasks.abort_all();
    m.live_clock(live_since.elapsed(), cpu_base.and_then(|c| c.get().copied()));

    if let Some(Settled::Done { .. }) = m.settled() {
        // The outcome is known. Whatever the child wrote to fd 1/2 before
        // sending `done` is in the pipe already (its writes completed
        // first), so take it without waiting for EOF. The channels stay
        // with the worker for a session's next run.
        raw.drain_now(&mut m);
        worker.sock = channel;
        worker.output = raw.rx.take();
        m.flush_logs();
        finish_events(&mut m, &mut events).await;
        let (result, cell) = m.finish_cell(None);
        return (result, ChildAfter::Finished, cell);
    }
    drop(channel);

    // Without `done`, the outcome depends on how the child ended: it gets
    // `grace` to exit by itself when it already closed fd 3 / exited;
    // otherwise it is stopped now.
    let (exit, by_itself): (Exit, bool) = match m.settled() {
        Some(Settled::Ended) => {
            if tokio::time::timeout(config.grace, worker.exited()).await.is_ok() {
                (worker.kill_and_reap().await, true)
            } else {
                (worker.stop(config.grace).await, false)
            }
        }
        Some(Settled::Fail(..) | Settled::Done { .. } | Settled::Suspended) | None => {
            (worker.stop(config.grace).await, false)
        }
    };
    // Drain what the pipe still holds: output written before the end.
    let drain_until = Instant::now() + config.grace.min(DRAIN_LIMIT);
    while !raw.closed() {
        tokio::select! {
            _ = tokio::time::sleep_until(drain_until) => break,
            _ = raw.ready() => raw.take(&mut m),
        }
    }
    m.flush_logs();
    finish_events(&mut m, &mut events).await;
    (m.finish(Some(ChildEnd { status: exit.status, cpu: exit.cpu, by_itself })), ChildAfter::Gone, None)
}
