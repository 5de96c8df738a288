//! One run, start to settlement: the supervisor loop.
//!
//! The loop owns the worker and waits on everything at once: fd 3, the raw
//! stdout and stderr pipes, finished binding calls, the child's exit, the
//! wall-clock deadline, the caller's cancel token and runtime shutdown.
//! Outgoing frames are appended to an output buffer and written with
//! non-blocking `try_write`; whatever the socket does not take waits for
//! writability in the same `select!`, so a child that never reads its
//! socket cannot stall the loop (and with it the deadline). A binding whose
//! future is ready on its first poll is answered inline, without a task
//! hop; the others run as tasks in a `JoinSet`.
//!
//! Settlement is the same for every outcome: stop the child (a `done`
//! child gets `grace` to exit on its own), kill what is left of its group,
//! reap it, drain what the pipes still hold (bounded by `grace`), flush the
//! ledger, and drop the worker, which removes the run directory.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use pycage_protocol::{
    meter_value, validate_child_frame, BootFrame, ChildErrorKind, ChildFrame, ErrorClassEntry, JsonValue, LineEvent,
    LineSplitter, NamespaceEntry, ReplyFrame, RunFrame,
};

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::bindings::{Binding, BindingError, Namespace};
use crate::config::RuntimeConfig;
use crate::ledger::{LogLedger, Source};
use crate::spawn::{describe_status, Exit, Worker};
use crate::{FailureKind, RunEvent, RunResult};

/// Read buffer for each of fd 3, stdout and stderr.
const READ_BUF: usize = 64 * 1024;

enum Outcome {
    Done {
        value: Option<JsonValue>,
        error: Option<pycage_protocol::ChildError>,
    },
    Fail(FailureKind, String),
    /// fd 3 closed or the child exited before `done`.
    Ended,
}

pub(crate) struct RunInputs<'a> {
    pub config: &'a RuntimeConfig,
    pub program: String,
    pub bindings: Vec<Namespace>,
    pub cancel: CancellationToken,
    pub shutdown: CancellationToken,
    pub events: Option<mpsc::UnboundedSender<RunEvent>>,
    pub deadline: Instant,
}

struct Session<'a> {
    config: &'a RuntimeConfig,
    ledger: LogLedger,
    events: Option<mpsc::UnboundedSender<RunEvent>>,
    /// Encoded frames for fd 3; `out[out_sent..]` is not written yet.
    out: Vec<u8>,
    out_sent: usize,
    table: BTreeMap<(String, String), Binding>,
    seen_ids: HashSet<u64>,
    calls: JoinSet<(u64, Result<JsonValue, BindingError>)>,
    program: Option<String>,
    dropped_frames: u64,
}

impl Session<'_> {
    fn emit(&self, ev: RunEvent) {
        if let Some(tx) = &self.events {
            let _ = tx.send(ev);
        }
    }

    fn log(&mut self, source: Source, bytes: &[u8]) {
        self.ledger.push(source, bytes);
        self.stream_lines();
    }

    fn stream_lines(&mut self) {
        if let Some(tx) = &self.events {
            for line in self.ledger.take_new() {
                let _ = tx.send(RunEvent::Log(line.clone()));
            }
        }
    }

    /// Handles one validated frame; `Some` settles the run.
    fn frame(&mut self, frame: ChildFrame) -> Option<Outcome> {
        match frame {
            ChildFrame::BootAck => {
                if let Some(program) = self.program.take() {
                    RunFrame { program }.encode(&mut self.out);
                }
                None
            }
            ChildFrame::Call { id, global, name, args } => {
                if !self.seen_ids.insert(id) {
                    self.dropped_frames += 1;
                    return None;
                }
                let binding = self.table.get(&(global.clone(), name.clone())).cloned();
                if self.events.is_some() {
                    self.emit(RunEvent::Call { id, global: global.clone(), name: name.clone(), args: args.clone() });
                }
                match binding {
                    Some(b) => {
                        let mut fut = b.call(args);
                        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                        match fut.as_mut().poll(&mut cx) {
                            std::task::Poll::Ready(result) => self.reply(id, result),
                            std::task::Poll::Pending => {
                                self.calls.spawn(async move { (id, fut.await) });
                            }
                        }
                    }
                    None => {
                        let message = format!("{global}.{name} is not a binding of this run");
                        self.emit(RunEvent::CallFinished { id, error: Some(message.clone()) });
                        ReplyFrame::Err { id, message }.encode(&mut self.out);
                    }
                }
                None
            }
            ChildFrame::Log { text, truncated } => {
                if truncated {
                    self.ledger.truncate();
                    self.stream_lines();
                } else {
                    self.log(Source::Frames, text.as_bytes());
                }
                None
            }
            ChildFrame::Done { value, error } => Some(Outcome::Done { value, error }),
        }
    }

    fn reply(&mut self, id: u64, result: Result<JsonValue, BindingError>) {
        match result {
            Ok(value) => {
                self.emit(RunEvent::CallFinished { id, error: None });
                ReplyFrame::Ok { id, value }.encode(&mut self.out);
            }
            Err(e) => {
                self.emit(RunEvent::CallFinished { id, error: Some(e.message.clone()) });
                ReplyFrame::Err { id, message: e.message }.encode(&mut self.out);
            }
        }
    }
}

/// Feeds a chunk of fd-3 bytes; `Some` settles the run.
fn feed(session: &mut Session<'_>, splitter: &mut LineSplitter, mut data: &[u8]) -> Option<Outcome> {
    while !data.is_empty() {
        let (used, event) = splitter.feed(data);
        data = data.get(used..).unwrap_or_default();
        match event {
            None => {}
            Some(LineEvent::Oversized) => {
                return Some(Outcome::Fail(
                    FailureKind::OutputLimit,
                    format!("a protocol line on fd 3 exceeded the {}-byte line cap", splitter.max_line_bytes()),
                ))
            }
            Some(LineEvent::Line(line)) => match validate_child_frame(line) {
                Some(frame) => {
                    if let Some(o) = session.frame(frame) {
                        return Some(o);
                    }
                }
                None => session.dropped_frames += 1,
            },
        }
    }
    if splitter.total_bytes() > session.config.max_control_bytes {
        return Some(Outcome::Fail(
            FailureKind::OutputLimit,
            format!(
                "the program sent more than {} bytes of protocol traffic on fd 3",
                session.config.max_control_bytes
            ),
        ));
    }
    None
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

    /// Bytes of the next chunk (0 once closed: EOF or an error closes it).
    /// Never resolves while closed, so a `select!` arm on it goes quiet.
    async fn read(&mut self) -> usize {
        let Some(rx) = &mut self.rx else { return std::future::pending().await };
        match rx.read(&mut self.buf).await {
            Ok(n) if n > 0 => n,
            _ => {
                self.rx = None;
                0
            }
        }
    }

    fn chunk(&self, n: usize) -> &[u8] {
        self.buf.get(..n).unwrap_or_default()
    }
}

pub(crate) async fn execute(mut worker: Worker, inputs: RunInputs<'_>) -> RunResult {
    let config = inputs.config;
    let Some(sock) = worker.sock.take() else {
        return RunResult::failed(FailureKind::WorkerExit, "the worker has no protocol channel".into(), Vec::new());
    };
    let (mut rd, wr) = sock.into_split();

    let mut boot = BootFrame {
        cpu_seconds: config.cpu_seconds,
        address_space_bytes: config.address_space_bytes,
        max_log_bytes: config.max_log_bytes,
        max_value_bytes: config.max_value_bytes,
        namespaces: Vec::with_capacity(inputs.bindings.len()),
    };
    let mut table = BTreeMap::new();
    for ns in inputs.bindings {
        boot.namespaces.push(NamespaceEntry {
            global: ns.global.clone(),
            names: ns.functions.keys().cloned().collect(),
            error_class: ns
                .error_class
                .map(|ec| ErrorClassEntry { name: ec.name, member_name_property: ec.member_name_property }),
            doc: ns.doc,
            docs: ns.member_docs.into_iter().collect(),
        });
        for (name, b) in ns.functions {
            table.insert((ns.global.clone(), name), b);
        }
    }
    let mut out = Vec::with_capacity(4096);
    boot.encode(&mut out);

    let mut s = Session {
        config,
        ledger: LogLedger::new(config.max_log_bytes),
        events: inputs.events,
        out,
        out_sent: 0,
        table,
        seen_ids: HashSet::new(),
        calls: JoinSet::new(),
        program: Some(inputs.program),
        dropped_frames: 0,
    };
    let mut splitter = LineSplitter::new(config.max_line_bytes);
    let mut sock_buf = vec![0u8; READ_BUF];
    let mut raw = RawPipe::new(worker.output.take());

    let mut write_failed = false;
    let outcome = loop {
        // Write what the socket takes now; the rest waits for writability.
        while s.out_sent < s.out.len() && !write_failed {
            match wr.try_write(s.out.get(s.out_sent..).unwrap_or_default()) {
                Ok(n) => {
                    s.out_sent += n;
                    if s.out_sent == s.out.len() {
                        s.out.clear();
                        s.out_sent = 0;
                    } else if s.out_sent > s.out.len() / 2 {
                        // Compact now and then: amortized O(1) per byte,
                        // however slowly the child reads.
                        s.out.drain(..s.out_sent);
                        s.out_sent = 0;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // The child closed its end: nothing more can be sent; its
                // exit or EOF settles the run.
                Err(_) => write_failed = true,
            }
        }
        let want_write = s.out_sent < s.out.len() && !write_failed;
        tokio::select! {
            biased;
            _ = inputs.cancel.cancelled() => break Outcome::Fail(FailureKind::Abort, "the run was cancelled by the caller".into()),
            _ = inputs.shutdown.cancelled() => break Outcome::Fail(FailureKind::Abort, "the runtime was shut down".into()),
            _ = tokio::time::sleep_until(inputs.deadline) => break Outcome::Fail(
                FailureKind::Timeout,
                format!("the wall-clock budget of {} ms was exceeded", config.wall_time.as_millis()),
            ),
            r = rd.read(&mut sock_buf) => match r {
                Ok(n) if n > 0 => {
                    if let Some(o) = feed(&mut s, &mut splitter, sock_buf.get(..n).unwrap_or_default()) {
                        break o;
                    }
                }
                _ => {
                    // A final unterminated line can still be a frame.
                    if let Some(LineEvent::Line(line)) = splitter.finish() {
                        match validate_child_frame(line) {
                            Some(f) => if let Some(o) = s.frame(f) { break o; },
                            None => s.dropped_frames += 1,
                        }
                    }
                    break Outcome::Ended;
                }
            },
            n = raw.read() => s.log(Source::Raw, raw.chunk(n)),
            Some(joined) = s.calls.join_next(), if !s.calls.is_empty() => {
                if let Ok((id, result)) = joined {
                    s.reply(id, result);
                }
            }
            r = wr.writable(), if want_write => {
                if r.is_err() {
                    write_failed = true;
                }
            }
            _ = worker.exited() => break Outcome::Ended,
        }
    };

    // Settle: the child gets `grace` to exit by itself only after `done`,
    // or when it already closed fd 3 / exited; otherwise it is stopped now.
    let mut ended_by_itself = false;
    let exit: Exit = match outcome {
        Outcome::Done { .. } | Outcome::Ended => {
            if tokio::time::timeout(config.grace, worker.exited()).await.is_err() {
                worker.stop(config.grace).await
            } else {
                ended_by_itself = true;
                worker.reap()
            }
        }
        Outcome::Fail(..) => worker.stop(config.grace).await,
    };
    s.calls.abort_all();
    // Drain what the pipes still hold: output written before the end.
    let drain_until = Instant::now() + config.grace.min(Duration::from_millis(200));
    loop {
        if raw.closed() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(drain_until) => break,
            n = raw.read() => s.log(Source::Raw, raw.chunk(n)),
        }
    }
    s.ledger.finish();
    s.stream_lines();
    let Session { ledger, dropped_frames, .. } = s;
    let logs = ledger.into_lines();
    drop(worker);

    let mut result = match outcome {
        Outcome::Done { error: Some(e), .. } => RunResult::failed(
            match e.kind {
                ChildErrorKind::Exception => FailureKind::Exception,
                ChildErrorKind::InvalidOutput => FailureKind::InvalidOutput,
                ChildErrorKind::OutputLimit => FailureKind::OutputLimit,
            },
            e.message,
            logs,
        ),
        Outcome::Done { value: Some(v), error: None } => match meter_value(&v, config.max_value_bytes) {
            Some(_) => RunResult { value: Some(v), logs, error: None, dropped_frames: 0 },
            None => RunResult::failed(
                FailureKind::OutputLimit,
                format!("the return value is over the {}-byte value budget", config.max_value_bytes),
                logs,
            ),
        },
        Outcome::Done { value: None, error: None } => RunResult { value: None, logs, error: None, dropped_frames: 0 },
        Outcome::Fail(kind, message) => RunResult::failed(kind, message, logs),
        Outcome::Ended => {
            let (kind, message) = classify_exit(config, exit, ended_by_itself);
            RunResult::failed(kind, message, logs)
        }
    };
    result.dropped_frames = dropped_frames;
    result
}

/// A child that ended without `done`: a CPU-budget kill is a `timeout`,
/// anything else is `worker-exit`.
fn classify_exit(config: &RuntimeConfig, exit: Exit, ended_by_itself: bool) -> (FailureKind, String) {
    let sig = exit.status.signal();
    let cpu_kill = sig == Some(libc::SIGXCPU)
        || (sig == Some(libc::SIGKILL) && exit.cpu >= Duration::from_secs(config.cpu_seconds));
    if cpu_kill {
        return (
            FailureKind::Timeout,
            format!("the CPU budget of {} s was exceeded ({:.1} s used)", config.cpu_seconds, exit.cpu.as_secs_f64()),
        );
    }
    let how = describe_status(exit.status);
    let message = if ended_by_itself {
        format!("the Python process {how} before finishing the run")
    } else {
        format!(
            "the Python process closed its protocol channel (fd 3) without finishing the run and was stopped; it {how}"
        )
    };
    (FailureKind::WorkerExit, message)
}
