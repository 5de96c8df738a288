//! Driving one run: the I/O around [`machine::RunMachine`].
//!
//! The driver owns the child's channels (fd 3, the raw fd 1/2 pipe), the
//! binding tasks, the deadline, cancellation and the child process; every
//! protocol rule lives in the machine. One `select!` loop feeds the machine
//! what arrives and does what it asks (write, start calls, stream events);
//! when the machine settles, the driver ends the child, drains the raw pipe
//! and lets the machine build the [`RunResult`].

pub(crate) mod machine;

use std::time::Duration;

use pycage_protocol::JsonValue;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::bindings::{BindingError, Namespace};
use crate::config::RuntimeConfig;
use crate::spawn::{Exit, Worker};
use crate::{FailureKind, RunEvent, RunResult};
pub(crate) use machine::Opening;
use machine::{ChildEnd, RunMachine, Settled};

/// Read buffer for each of fd 3 and the raw output pipe.
const READ_BUF: usize = 64 * 1024;

/// Longest the raw pipe is drained after the run settled.
const DRAIN_LIMIT: Duration = Duration::from_millis(200);

pub(crate) struct RunInputs<'a> {
    pub config: &'a RuntimeConfig,
    pub cancel: CancellationToken,
    pub shutdown: CancellationToken,
    pub events: Option<mpsc::UnboundedSender<RunEvent>>,
    pub deadline: Instant,
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

/// Runs a one-shot program on `worker`; after `done`, the child is stopped
/// and reaped by a task of `background` (shutdown waits for it), off the
/// run's critical path, and its run directory goes with it after the reap.
pub(crate) async fn execute_once(
    mut worker: Worker,
    program: String,
    bindings: Vec<Namespace>,
    inputs: RunInputs<'_>,
    background: &tokio_util::task::TaskTracker,
) -> RunResult {
    let m = RunMachine::new(inputs.config, Opening::OneShot, program, bindings, inputs.events.is_some());
    let grace = inputs.config.grace;
    let (result, after) = execute(&mut worker, m, inputs).await;
    if after == ChildAfter::Finished {
        background.spawn(async move {
            let _ = worker.stop(grace).await;
            drop(worker);
        });
    }
    result
}

/// The child's raw fd 1 and fd 2 (one pipe), read until EOF.
struct RawPipe {
    rx: Option<tokio::net::unix::pipe::Receiver>,
    buf: Vec<u8>,
}

impl RawPipe {
    fn new(rx: Option<tokio::net::unix::pipe::Receiver>) -> Self {
        RawPipe { rx, buf: vec![0; READ_BUF] }
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
                Ok(n) if n > 0 => m.receive_raw(self.buf.get(..n).unwrap_or_default()),
                Err(rustix::io::Errno::AGAIN) => return,
                Err(rustix::io::Errno::INTR) => {}
                Ok(_) | Err(_) => self.rx = None,
            }
        }
    }

    /// The next chunk (empty once closed: EOF or an error closes it).
    /// Never resolves while closed, so a `select!` arm on it goes quiet.
    async fn read(&mut self) -> &[u8] {
        let Some(rx) = &mut self.rx else { return std::future::pending().await };
        let n = loop {
            if rx.readable().await.is_err() {
                break 0;
            }
            match rx.try_read(&mut self.buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break 0,
            }
        };
        if n == 0 {
            self.rx = None;
        }
        self.buf.get(..n).unwrap_or_default()
    }
}

/// Reads fd 3: `Some(n)` bytes, `None` at EOF or on an error.
async fn read_sock(sock: &tokio::net::UnixStream, buf: &mut [u8]) -> Option<usize> {
    loop {
        sock.readable().await.ok()?;
        match sock.try_read(buf) {
            Ok(0) => return None,
            Ok(n) => return Some(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    }
}

/// Starts what the machine asks: a call ready on its first poll is answered
/// inline (no task, no wakeup); the rest run as tasks.
fn start_calls(m: &mut RunMachine, tasks: &mut JoinSet<(u64, Result<JsonValue, BindingError>)>) {
    while let Some(call) = m.next_call() {
        let mut fut = call.binding.call(call.args);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(result) => m.call_finished(call.id, result),
            std::task::Poll::Pending => {
                let id = call.id;
                tasks.spawn(async move { (id, fut.await) });
            }
        }
    }
}

fn forward_events(m: &mut RunMachine, events: &Option<mpsc::UnboundedSender<RunEvent>>) {
    if let Some(tx) = events {
        while let Some(ev) = m.next_event() {
            let _ = tx.send(ev);
        }
    }
}

/// Drives one run on `worker` until the machine settles.
pub(crate) async fn execute(worker: &mut Worker, mut m: RunMachine, inputs: RunInputs<'_>) -> (RunResult, ChildAfter) {
    let config = inputs.config;
    let Some(sock) = worker.sock.take() else {
        let r = RunResult::failed(FailureKind::WorkerExit, "the worker has no protocol channel".into(), Vec::new());
        return (r, ChildAfter::Gone);
    };
    let mut tasks = JoinSet::new();
    let mut sock_buf = vec![0u8; READ_BUF];
    let mut raw = RawPipe::new(worker.output.take());
    let mut write_failed = false;

    while m.settled().is_none() {
        start_calls(&mut m, &mut tasks);
        // Write what the socket takes now; the rest waits for writability.
        while !write_failed && !m.pending_output().is_empty() {
            match sock.try_write(m.pending_output()) {
                Ok(n) => m.wrote(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // The child closed its end: nothing more can be sent; its
                // exit or EOF settles the run.
                Err(_) => write_failed = true,
            }
        }
        forward_events(&mut m, &inputs.events);
        if m.settled().is_some() {
            break;
        }
        let want_write = !write_failed && !m.pending_output().is_empty();
        tokio::select! {
            biased;
            _ = inputs.cancel.cancelled() => m.settle(FailureKind::Abort, "the run was cancelled by the caller".into()),
            _ = inputs.shutdown.cancelled() => m.settle(FailureKind::Abort, "the runtime was shut down".into()),
            _ = tokio::time::sleep_until(inputs.deadline) => m.settle(
                FailureKind::Timeout,
                format!("the wall-clock budget of {} ms was exceeded", config.wall_time.as_millis()),
            ),
            r = read_sock(&sock, &mut sock_buf) => match r {
                Some(n) => m.receive(sock_buf.get(..n).unwrap_or_default()),
                None => m.receive_eof(),
            },
            chunk = raw.read() => m.receive_raw(chunk),
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
            _ = worker.exited() => m.child_exited(),
        }
    }
    // In-flight calls are abandoned: their replies would never be read.
    tasks.abort_all();

    if let Some(Settled::Done { .. }) = m.settled() {
        // The outcome is known. Whatever the child wrote to fd 1/2 before
        // sending `done` is in the pipe already (its writes completed
        // first), so take it without waiting for EOF. The channels stay
        // with the worker for a session's next run.
        raw.drain_now(&mut m);
        worker.sock = Some(sock);
        worker.output = raw.rx.take();
        m.flush_logs();
        forward_events(&mut m, &inputs.events);
        return (m.finish(None), ChildAfter::Finished);
    }
    drop(sock);

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
        Some(Settled::Fail(..) | Settled::Done { .. }) | None => (worker.stop(config.grace).await, false),
    };
    // Drain what the pipe still holds: output written before the end.
    let drain_until = Instant::now() + config.grace.min(DRAIN_LIMIT);
    while !raw.closed() {
        tokio::select! {
            _ = tokio::time::sleep_until(drain_until) => break,
            chunk = raw.read() => m.receive_raw(chunk),
        }
    }
    m.flush_logs();
    forward_events(&mut m, &inputs.events);
    (m.finish(Some(ChildEnd { status: exit.status, cpu: exit.cpu, by_itself })), ChildAfter::Gone)
}
