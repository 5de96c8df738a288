//! The run's protocol state, without I/O: bytes and events in; bytes to
//! write, calls to start, events to stream and the outcome out.
//!
//! The driver (`super::execute`) owns the sockets, the clock and the child
//! process; this machine owns every rule about what the child may say:
//! line and control budgets, frame validation (one path for every line,
//! the last unterminated one at EOF included), call dispatch with each id
//! answered at most once, the log and display ledgers, and the first
//! `done` settling the run. Because it does no I/O, its unit tests reach what end-to-end tests
//! reach only by luck: a forged `done` with calls in flight, duplicate and
//! late replies, a child that never reads what we write.
//!
//! What the host holds for a run is bounded here too. A call is *in
//! flight* from its `call` frame until the program has read its reply
//! (the driver reports when the child has read everything written so far,
//! the one thing the kernel tells exactly, see [`RunMachine::child_read_to`]);
//! at most `max_calls_in_flight` are, and while more than
//! `max_unread_reply_bytes` of replies wait (queued here, or held by the
//! kernel for the child) no call starts either. A call frame over either budget is *held*: the machine
//! stops taking input after it ([`RunMachine::receive`] says how much it
//! took), so the driver stops reading fd 3 until the program has read
//! replies. A well-behaved child keeps under the call budget by itself;
//! one that floods calls and never reads stalls itself, and no binding
//! runs more than `max_calls_in_flight` times for it.
//!
//! A durable run (a runtime with a journal key) also drives a
//! `pycage_journal::Tape`: every call and reply is recorded; a call that
//! needs approval, or whose binding asks to suspend, suspends the run
//! (nothing more starts, calls already running are waited for, and the run
//! settles as `suspended` with its sealed journal). A resumed run answers
//! recorded calls from the tape without calling bindings, settles as
//! `diverged` when the program takes another path, and skips the logs and
//! displays its caller already had.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use pycage_protocol::{
    meter_value, validate_child_frame, BootFrame, ChildError, ChildErrorKind, ChildFrame, ErrorClassEntry, JsonValue,
    LineEvent, LineSplitter, NamespaceEntry, ReplyFrame, RunBudgets, RunFrame,
};

use crate::bindings::{Binding, BindingError, Namespace};
use crate::config::RuntimeConfig;
use crate::display::DisplayLedger;
use crate::durable::Recording;
use crate::outcome::{FailureKind, PendingCall, RunEvent, RunFailure, RunResult, Suspension};
use pycage_journal::{Delivered, Due, OnCall, Reply, Spent, SuspendError};
use pycage_protocol::ledger::{LogLedger, Source};

/// Why the run stopped taking input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The child's first `done`.
    Done { value: Option<JsonValue>, error: Option<ChildError> },
    /// The host settled it: a budget, a cancel, a protocol violation.
    Fail(FailureKind, String),
    /// fd 3 reached EOF, or the child exited, before any `done`.
    Ended,
    /// A call suspended the run, and the calls before it have finished.
    Suspended,
}

/// How a run starts on its child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// A fresh child serving one run: `boot`, then `run`.
    OneShot,
    /// A fresh session child: `boot` with `session: true`, then `run` with
    /// the run's own budgets.
    SessionFirst,
    /// A later run of a session: `run` with its budgets, nothing else.
    SessionNext,
}

/// A binding call the driver must start; its result goes back through
/// [`RunMachine::call_finished`].
pub(crate) struct StartCall {
    pub id: u64,
    pub binding: Binding,
    pub args: JsonValue,
}

/// How the child process ended, as the driver observed it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildEnd {
    /// The wait status.
    pub status: std::process::ExitStatus,
    /// CPU time of the child and its reaped descendants.
    pub cpu: Duration,
    /// Whether it exited by itself (rather than being stopped by the host).
    pub by_itself: bool,
}

/// The budgets the machine enforces (copied from the configuration).
#[derive(Debug, Clone, Copy)]
struct Budgets {
    max_control_bytes: u64,
    max_value_bytes: u64,
    cpu_seconds: u64,
    max_calls_in_flight: usize,
    max_unread_reply_bytes: u64,
}

/// A call frame that arrived while the run was at a budget of what the
/// host holds; it starts once the program has read enough replies.
struct HeldCall {
    id: u64,
    global: String,
    name: String,
    args: JsonValue,
}

pub(crate) struct RunMachine {
    budgets: Budgets,
    splitter: LineSplitter,
    ledger: LogLedger,
    displays: DisplayLedger,
    /// Encoded frames for fd 3; `out[out_sent..]` is not written yet.
    out: Vec<u8>,
    out_sent: usize,
    /// Bytes ever written to fd 3 (the position of `out[out_sent]` in the
    /// channel's byte stream).
    written_total: u64,
    /// How far into that stream the child is known to have read.
    child_read: u64,
    /// Kernel memory held for what the child has not read (last reported).
    kernel_queued: u64,
    /// Where each reply the child has not finished reading ends, in order.
    unread_replies: VecDeque<u64>,
    /// A call over a budget, waiting for the child to read (see module docs).
    held: Option<HeldCall>,
    /// The child is gone: calls that still arrive are not started.
    child_gone: bool,
    table: BTreeMap<(String, String), Binding>,
    /// Every call id the child used: a repeat is dropped, never re-dispatched.
    seen_ids: HashSet<u64>,
    /// Calls started and not yet answered: a reply is written only for these.
    in_flight: HashSet<u64>,
    calls: VecDeque<StartCall>,
    /// `None` when nobody listens: no event is built.
    events: Option<VecDeque<RunEvent>>,
    dropped_frames: u64,
    settled: Option<Settled>,
    durable: Option<Durable>,
}

/// What some runs have besides their program and bindings.
#[derive(Default)]
pub(crate) struct Extras {
    /// The directories of the run's packages (`run.sysPath`, as the child
    /// sees them).
    pub sys_path: Vec<String>,
    /// A durable run's recording (a runtime with a journal key).
    pub durable: Option<Recording>,
}

/// A durable run's state in the machine (see the module docs).
struct Durable {
    rec: Recording,
    /// Live calls in flight, kept to name a call that suspends the run.
    calls: HashMap<u64, HeldCall>,
    /// Calls the journal recorded without a reply: started when the replay is over.
    deferred: HashMap<u64, HeldCall>,
    /// The replay just ended (the driver switches to the live budgets).
    replay_over: bool,
    /// Log lines and displays seen, against those the caller already had.
    lines_seen: u64,
    displays_seen: u64,
    /// How long the live part of the run took (set by the driver at the end).
    wall: Duration,
    /// The child's CPU when the run went live (zero unless resumed).
    cpu_base: Duration,
}

impl RunMachine {
    /// A machine whose first output is `boot` for these bindings, followed
    /// at once by `run`: the child applies `boot` (limits, namespaces) and
    /// answers `boot-ack` before it reads `run`, so waiting for the ack
    /// would only add a round trip to every run.
    #[cfg(test)]
    pub(crate) fn new(
        config: &RuntimeConfig,
        opening: Opening,
        program: String,
        bindings: Vec<Namespace>,
        streaming: bool,
        output: bool,
    ) -> Self {
        Self::with_extras(config, opening, program, Extras::default(), bindings, streaming, output)
    }

    /// `RunMachine::new` (the tests' constructor), with the directories of the run's packages and
    /// its durable recording.
    pub(crate) fn with_extras(
        config: &RuntimeConfig,
        opening: Opening,
        program: String,
        extras: Extras,
        bindings: Vec<Namespace>,
        streaming: bool,
        output: bool,
    ) -> Self {
        let Extras { sys_path, durable } = extras;
        let session = opening != Opening::OneShot;
        let mut boot = BootFrame {
            cpu_seconds: config.cpu_seconds,
            address_space_bytes: config.address_space_limit(),
            max_log_bytes: config.max_log_bytes,
            max_value_bytes: config.max_value_bytes,
            max_display_bytes: config.display_budget(),
            namespaces: Vec::with_capacity(bindings.len()),
            session,
            output,
        };
        let mut table = BTreeMap::new();
        for ns in bindings {
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
                let b = if ns.approval.contains(&name) { b.requiring_approval() } else { b };
                table.insert((ns.global.clone(), name), b);
            }
        }
        let mut out = Vec::with_capacity(4096 + program.len());
        if opening != Opening::SessionNext {
            boot.encode(&mut out);
        }
        let budgets = session.then_some(RunBudgets {
            cpu_seconds: config.cpu_seconds,
            max_log_bytes: config.max_log_bytes,
            max_value_bytes: config.max_value_bytes,
            max_display_bytes: config.display_budget(),
        });
        let seed = durable.as_ref().map(|d| d.tape.meta().seeds.random);
        RunFrame { program, budgets, sys_path, seed }.encode(&mut out);
        RunMachine {
            budgets: Budgets {
                max_control_bytes: config.max_control_bytes,
                max_value_bytes: config.max_value_bytes,
                cpu_seconds: config.cpu_seconds,
                max_calls_in_flight: config.max_calls_in_flight,
                max_unread_reply_bytes: config.max_unread_reply_bytes,
            },
            splitter: LineSplitter::new(config.max_line_bytes),
            ledger: LogLedger::new(config.max_log_bytes),
            displays: DisplayLedger::new(config.display_budget()),
            out,
            out_sent: 0,
            written_total: 0,
            child_read: 0,
            kernel_queued: 0,
            unread_replies: VecDeque::new(),
            held: None,
            child_gone: false,
            table,
            seen_ids: HashSet::new(),
            in_flight: HashSet::new(),
            calls: VecDeque::new(),
            events: streaming.then(VecDeque::new),
            dropped_frames: 0,
            settled: None,
            durable: durable.map(|rec| Durable {
                rec,
                calls: HashMap::new(),
                deferred: HashMap::new(),
                replay_over: false,
                lines_seen: 0,
                displays_seen: 0,
                wall: Duration::ZERO,
                cpu_base: Duration::ZERO,
            }),
        }
    }

    /// The outcome, once settled. Input after that is ignored.
    pub(crate) fn settled(&self) -> Option<&Settled> {
        self.settled.as_ref()
    }

    /// Settles the run unless it already is (the first cause wins).
    pub(crate) fn settle(&mut self, kind: FailureKind, message: String) {
        if self.settled.is_none() {
            self.settled = Some(Settled::Fail(kind, message));
        }
    }

    /// Bytes of fd 3 from the child; returns how many were taken. Input
    /// stops after a held call (see module docs): the driver keeps the
    /// rest and offers it again once [`Self::wants_input`] says so.
    pub(crate) fn receive(&mut self, data: &[u8]) -> usize {
        let mut taken = 0;
        while taken < data.len() && self.settled.is_none() && self.held.is_none() {
            let (used, event) = self.splitter.feed(data.get(taken..).unwrap_or_default());
            taken += used;
            match event {
                None => {}
                Some(LineEvent::Oversized) => {
                    let cap = self.splitter.max_line_bytes();
                    self.settle(
                        FailureKind::OutputLimit,
                        format!("a protocol line on fd 3 exceeded the {cap}-byte line cap"),
                    );
                }
                Some(LineEvent::Line(line)) => {
                    let frame = validate_child_frame(line);
                    self.frame(frame);
                }
            }
        }
        if self.settled.is_none() && self.splitter.total_bytes() > self.budgets.max_control_bytes {
            let cap = self.budgets.max_control_bytes;
            self.settle(
                FailureKind::OutputLimit,
                format!("the program sent more than {cap} bytes of protocol traffic on fd 3"),
            );
        }
        // Once settled, the rest is ignored: report it taken.
        if self.settled.is_some() {
            return data.len();
        }
        taken
    }

    /// Whether the machine takes more input from fd 3 (false while a call
    /// is held, or once settled).
    pub(crate) fn wants_input(&self) -> bool {
        self.settled.is_none() && self.held.is_none()
    }

    /// Whether a call is held until the program reads replies: the driver
    /// then checks, now and then, how far the child has read.
    pub(crate) fn waiting_for_child_to_read(&self) -> bool {
        self.held.is_some() && self.settled.is_none()
    }

    /// What the kernel holds for the child (memory of the unread buffers);
    /// zero means the child has read everything written so far.
    pub(crate) fn kernel_queued(&mut self, bytes: u64) {
        self.kernel_queued = bytes;
        if bytes == 0 {
            self.child_read_to(self.written_total);
        } else {
            self.release_held();
        }
    }

    /// The child has read the channel's byte stream up to `offset`. Replies
    /// read in full leave flight; a held call starts when the budgets allow.
    pub(crate) fn child_read_to(&mut self, offset: u64) {
        self.child_read = self.child_read.max(offset.min(self.written_total));
        while self.unread_replies.front().is_some_and(|&end| end <= self.child_read) {
            self.unread_replies.pop_front();
        }
        self.release_held();
    }

    /// Whether replies are unread, so the driver should ask the kernel how
    /// far the child has read before offering input.
    pub(crate) fn has_unread_replies(&self) -> bool {
        !self.unread_replies.is_empty()
    }

    /// Bytes written to fd 3 so far (for [`Self::child_read_to`]).
    #[cfg(test)]
    pub(crate) fn written_total(&self) -> u64 {
        self.written_total
    }

    /// Calls in flight: started and unanswered, or answered and unread.
    pub(crate) fn calls_in_flight(&self) -> usize {
        self.in_flight.len() + self.unread_replies.len()
    }

    /// What unread replies hold: queued here, or in the kernel for the child.
    fn unread_reply_bytes(&self) -> u64 {
        ((self.out.len() - self.out_sent) as u64).saturating_add(self.kernel_queued)
    }

    fn over_budget(&self) -> bool {
        self.calls_in_flight() >= self.budgets.max_calls_in_flight
            || self.unread_reply_bytes() > self.budgets.max_unread_reply_bytes
    }

    fn release_held(&mut self) {
        if self.held.is_some() && !self.over_budget() {
            if let Some(HeldCall { id, global, name, args }) = self.held.take() {
                self.dispatch_call(id, global, name, args);
            }
        }
    }

    /// The child is exiting or gone: calls that still arrive (while its
    /// last frames are drained) are not started, a held one is dropped,
    /// and input is no longer held back.
    pub(crate) fn child_gone(&mut self) {
        self.child_gone = true;
        if self.held.take().is_some() {
            self.dropped_frames += 1;
        }
    }

    /// fd 3 reached EOF: a final unterminated line can still be a frame.
    pub(crate) fn receive_eof(&mut self) {
        if self.settled.is_some() {
            return;
        }
        if let Some(LineEvent::Line(line)) = self.splitter.finish() {
            let frame = validate_child_frame(line);
            self.frame(frame);
        }
        if self.settled.is_none() {
            self.settled = Some(Settled::Ended);
        }
    }

    /// The child exited (the driver saw it) before settling the run.
    pub(crate) fn child_exited(&mut self) {
        if self.settled.is_none() {
            self.settled = Some(Settled::Ended);
        }
    }

    /// Bytes of the child's raw fd 1 / fd 2. Taken after settlement too:
    /// output written before the end is still drained into the logs.
    pub(crate) fn receive_raw(&mut self, data: &[u8]) {
        self.ledger.push(Source::Raw, data);
        self.stream_lines();
    }

    /// One line, validated or not (`None`): the single dispatch path.
    fn frame(&mut self, frame: Option<ChildFrame>) {
        let Some(frame) = frame else {
            self.dropped_frames += 1;
            return;
        };
        match frame {
            // `run` went out with `boot`; the ack tells nothing new.
            ChildFrame::BootAck => {}
            ChildFrame::Call { id, global, name, args } => {
                if !self.seen_ids.insert(id) || self.child_gone {
                    self.dropped_frames += 1;
                    return;
                }
                if self.over_budget() {
                    self.held = Some(HeldCall { id, global, name, args });
                    return;
                }
                self.dispatch_call(id, global, name, args);
            }
            ChildFrame::Log { text, truncated } => {
                if truncated {
                    self.ledger.truncate();
                } else {
                    self.ledger.push(Source::Frames, text.as_bytes());
                }
                self.stream_lines();
            }
            display @ ChildFrame::Display { .. } => {
                let kept = self.displays.push(display);
                // A resumed run's caller had its first displays already.
                let skip = match (&mut self.durable, &kept) {
                    (Some(d), Some(_)) => {
                        d.displays_seen += 1;
                        d.displays_seen <= d.rec.tape.delivered_before().displays
                    }
                    _ => false,
                };
                if let (Some(events), Some(d), false) = (&mut self.events, kept, skip) {
                    events.push_back(RunEvent::Display(d.clone()));
                }
            }
            ChildFrame::Done { value, error } => {
                let how = match &error {
                    None => "returned".to_owned(),
                    Some(e) => format!("ended ({}: {})", e.kind.as_str(), e.message.lines().next().unwrap_or("")),
                };
                match self.durable.as_ref().and_then(|d| d.rec.tape.diverged_at_end(&how)) {
                    Some(message) => self.settle(FailureKind::Diverged, message),
                    None => self.settled = Some(Settled::Done { value, error }),
                }
            }
        }
    }

    /// Starts a call (see [`Self::start_live`]), unless a durable run's tape
    /// says otherwise: replayed calls are answered from the journal,
    /// nothing starts while the run is suspending, and a divergence ends it.
    fn dispatch_call(&mut self, id: u64, global: String, name: String, args: JsonValue) {
        let Some(d) = &mut self.durable else { return self.start_live(id, global, name, args) };
        match d.rec.tape.on_call(id, &global, &name, &args) {
            OnCall::Live => self.start_live(id, global, name, args),
            OnCall::Replayed => {
                self.in_flight.insert(id);
                self.pump();
            }
            OnCall::Deferred => {
                d.deferred.insert(id, HeldCall { id, global, name, args });
                self.in_flight.insert(id);
                self.pump();
            }
            OnCall::Refused => {}
            OnCall::Diverged(message) => self.settle(FailureKind::Diverged, message),
        }
    }

    /// Starts a call (or answers it at once when the binding is unknown,
    /// or suspends the run when it needs approval).
    fn start_live(&mut self, id: u64, global: String, name: String, args: JsonValue) {
        let binding = self.table.get(&(global.clone(), name.clone())).cloned();
        if let Some(events) = &mut self.events {
            events.push_back(RunEvent::Call { id, global: global.clone(), name: name.clone(), args: args.clone() });
        }
        self.in_flight.insert(id);
        match binding {
            Some(b) if b.requires_approval() => self.suspend(id, global, name, args, "approval required".into()),
            Some(binding) => {
                if let Some(d) = &mut self.durable {
                    d.calls.insert(id, HeldCall { id, global, name, args: args.clone() });
                }
                self.calls.push_back(StartCall { id, binding, args })
            }
            None => {
                let message = format!("{global}.{name} is not a binding of this run");
                self.call_finished(id, Err(BindingError::new(message)));
            }
        }
    }

    /// Call `id` suspends the run (see the module docs). Without a tape
    /// (no journal key, or a session) the call fails instead, saying why.
    fn suspend(&mut self, id: u64, global: String, name: String, args: JsonValue, reason: String) {
        let Some(d) = &mut self.durable else {
            let message = format!("{global}.{name} was not run: {}", cannot_suspend(&reason));
            return self.call_finished(id, Err(BindingError::new(message)));
        };
        self.in_flight.remove(&id);
        match d.rec.tape.suspend(id, &global, &name, args, reason) {
            Ok(()) => {
                // A call held over a budget came after: it never starts.
                self.held = None;
                self.check_suspended();
            }
            Err(e @ SuspendError::OverBudget { .. }) => self.settle(FailureKind::OutputLimit, e.to_string()),
            // Left unanswered: it starts again, live, after a resume.
            Err(SuspendError::AlreadySuspending) => self.check_suspended(),
        }
    }

    /// A suspending run settles once no call it started is running.
    fn check_suspended(&mut self) {
        let suspending = self.durable.as_ref().is_some_and(|d| d.rec.tape.suspending());
        if suspending && self.settled.is_none() && self.in_flight.is_empty() {
            self.settled = Some(Settled::Suspended);
        }
    }

    /// Does what a durable run's tape says is due: recorded replies, in
    /// their order; at the replay's end, the pending call's answer, the
    /// calls recorded without a reply, and the switch to live budgets.
    fn pump(&mut self) {
        while let Some(due) = self.durable.as_mut().and_then(|d| d.rec.tape.next_due()) {
            match due {
                Due::Reply { id, reply } => {
                    if self.in_flight.remove(&id) {
                        self.write_reply(id, reply_result(reply));
                    }
                }
                Due::Start { id } => {
                    if let Some(call) = self.durable.as_mut().and_then(|d| d.deferred.remove(&id)) {
                        self.in_flight.remove(&id);
                        self.start_live(call.id, call.global, call.name, call.args);
                    }
                }
                Due::Live => {
                    if let Some(d) = &mut self.durable {
                        d.replay_over = true;
                    }
                }
            }
        }
    }

    /// Whether a resumed run's replay has just ended (once): the driver
    /// then counts the run's wall clock and CPU again.
    pub(crate) fn take_replay_over(&mut self) -> bool {
        self.durable.as_mut().is_some_and(|d| std::mem::take(&mut d.replay_over))
    }

    /// What the run's live part took (a durable run's journal adds it up):
    /// `wall` since it went live, and CPU from `cpu_base` (the child's CPU
    /// when it went live) to the child's end.
    /// Without a sample at the replay's end (the run suspended before the
    /// watch took it), the replay is taken to have spent what it replayed.
    pub(crate) fn live_clock(&mut self, wall: Duration, cpu_base: Option<Duration>) {
        if let Some(d) = &mut self.durable {
            let replayed = d.rec.tape.spent_before().cpu_ms;
            d.wall = wall;
            d.cpu_base = cpu_base.unwrap_or(Duration::from_millis(replayed));
        }
    }

    fn stream_lines(&mut self) {
        if let Some(events) = &mut self.events {
            for line in self.ledger.take_new() {
                // A resumed run's caller had its first lines already.
                if let Some(d) = &mut self.durable {
                    d.lines_seen += 1;
                    if d.lines_seen <= d.rec.tape.delivered_before().logs {
                        continue;
                    }
                }
                events.push_back(RunEvent::Log(line.clone()));
            }
        }
    }

    /// Ends the partial lines of every source (the run is over) and streams them.
    pub(crate) fn flush_logs(&mut self) {
        self.ledger.finish();
        self.stream_lines();
    }

    /// The next call to start.
    pub(crate) fn next_call(&mut self) -> Option<StartCall> {
        self.calls.pop_front()
    }

    /// A call's result. Written as a `reply` only if the call is in flight
    /// and the run is not settled: each id is answered at most once.
    pub(crate) fn call_finished(&mut self, id: u64, mut result: Result<JsonValue, BindingError>) {
        if !self.in_flight.contains(&id) || self.settled.is_some() {
            return;
        }
        let call = self.durable.as_mut().and_then(|d| d.calls.remove(&id));
        if let Err(e) = &result {
            if e.is_suspend() {
                match call {
                    Some(c) => return self.suspend(id, c.global, c.name, c.args, e.message.clone()),
                    None => result = Err(BindingError::new(cannot_suspend(&e.message))),
                }
            }
        }
        self.in_flight.remove(&id);
        let write = match &mut self.durable {
            Some(d) => d.rec.tape.on_reply(id, result.as_ref().map_err(|e| e.message.as_str())),
            None => true,
        };
        let error = result.as_ref().err().map(|e| e.message.clone());
        if write {
            self.write_reply(id, result.map_err(|e| e.message));
        }
        if let Some(events) = &mut self.events {
            events.push_back(RunEvent::CallFinished { id, error });
        }
        self.check_suspended();
    }

    /// Queues a `reply` to call `id`.
    fn write_reply(&mut self, id: u64, result: Result<JsonValue, String>) {
        match result {
            Ok(value) => ReplyFrame::Ok { id, value }.encode(&mut self.out),
            Err(message) => ReplyFrame::Err { id, message }.encode(&mut self.out),
        }
        let end = self.written_total + (self.out.len() - self.out_sent) as u64;
        self.unread_replies.push_back(end);
    }

    /// A streamed event the consumer had no room for: first in line again.
    pub(crate) fn unshift_event(&mut self, event: RunEvent) {
        if let Some(events) = &mut self.events {
            events.push_front(event);
        }
    }

    /// Whether events wait for the consumer.
    pub(crate) fn has_events(&self) -> bool {
        self.events.as_ref().is_some_and(|e| !e.is_empty())
    }

    /// The consumer went away: stop building events.
    pub(crate) fn stop_streaming(&mut self) {
        self.events = None;
    }

    /// The next event for the caller.
    pub(crate) fn next_event(&mut self) -> Option<RunEvent> {
        self.events.as_mut().and_then(VecDeque::pop_front)
    }

    /// What is waiting to be written to fd 3 (empty once settled).
    pub(crate) fn pending_output(&self) -> &[u8] {
        if self.settled.is_some() {
            return &[];
        }
        self.out.get(self.out_sent..).unwrap_or_default()
    }

    /// `n` bytes of [`Self::pending_output`] were written.
    pub(crate) fn wrote(&mut self, n: usize) {
        let n = n.min(self.out.len() - self.out_sent);
        self.written_total += n as u64;
        self.out_sent += n;
        if self.out_sent == self.out.len() {
            self.out.clear();
            self.out_sent = 0;
        } else if self.out_sent > self.out.len() / 2 {
            // Compact now and then: amortized O(1) per byte, however slowly
            // the child reads.
            self.out.drain(..self.out_sent);
            self.out_sent = 0;
        }
    }

    /// Frames dropped so far (invalid, or a repeated call id).
    #[cfg(test)]
    pub(crate) fn dropped_frames(&self) -> u64 {
        self.dropped_frames
    }

    /// The result. `end` is how the child ended (needed when it ended
    /// without `done`); logs get their partial lines flushed.
    pub(crate) fn finish(self, end: Option<ChildEnd>) -> RunResult {
        self.finish_cell(end).0
    }

    /// [`Self::finish`], and the run's record as a session's cell when it
    /// ran to its end (`done`) with a tape that kept everything (see
    /// `pycage_journal::Tape::into_cell`).
    pub(crate) fn finish_cell(mut self, end: Option<ChildEnd>) -> (RunResult, Option<pycage_journal::Cell>) {
        self.ledger.finish();
        let settled = self.settled.take().unwrap_or(Settled::Ended);
        let mut logs = self.ledger.into_lines();
        let mut displays = self.displays.into_displays();
        let mut durable = self.durable.take();
        if let Some(d) = &durable {
            // What a resumed run's caller had already.
            let had = d.rec.tape.delivered_before();
            logs.drain(..usize::try_from(had.logs).unwrap_or(usize::MAX).min(logs.len()));
            displays.drain(..usize::try_from(had.displays).unwrap_or(usize::MAX).min(displays.len()));
        }
        let failed = |kind, message| RunResult::failed(kind, message, Vec::new());
        let cell = match &settled {
            Settled::Done { .. } => durable.take().and_then(|d| d.rec.tape.into_cell()),
            _ => None,
        };
        let mut result = match settled {
            Settled::Done { error: Some(e), .. } => failed(
                match e.kind {
                    ChildErrorKind::Exception => FailureKind::Exception,
                    ChildErrorKind::InvalidOutput => FailureKind::InvalidOutput,
                    ChildErrorKind::OutputLimit => FailureKind::OutputLimit,
                },
                e.message,
            ),
            Settled::Done { value: Some(v), error: None } => match meter_value(&v, self.budgets.max_value_bytes) {
                Some(_) => RunResult { value: Some(v), ..RunResult::default() },
                None => failed(
                    FailureKind::OutputLimit,
                    format!("the return value is over the {}-byte value budget", self.budgets.max_value_bytes),
                ),
            },
            Settled::Done { value: None, error: None } => RunResult::default(),
            Settled::Fail(kind, message) => failed(kind, message),
            Settled::Ended => {
                let RunFailure { kind, message } = classify_end(self.budgets.cpu_seconds, end);
                failed(kind, message)
            }
            Settled::Suspended => match durable {
                Some(d) => {
                    let delivered = Delivered { logs: logs.len() as u64, displays: displays.len() as u64 };
                    let ms = |t: Duration| u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
                    let cpu = end.map_or(Duration::ZERO, |e| e.cpu.saturating_sub(d.cpu_base));
                    let spent = Spent { wall_ms: ms(d.wall), cpu_ms: ms(cpu) };
                    suspended(d, delivered, spent)
                }
                None => failed(FailureKind::WorkerExit, "the run suspended without a journal".into()),
            },
        };
        result.logs = logs;
        result.displays = displays;
        result.dropped_frames = self.dropped_frames;
        result.abandoned_calls = self.in_flight.len() as u64;
        (result, cell)
    }
}

/// What a call that would suspend the run becomes in a run that cannot.
fn cannot_suspend(reason: &str) -> String {
    format!(
        "{reason}: the call would suspend the run, and this run cannot suspend (a durable run needs a journal key \
         on the runtime; a session suspends only when opened with SessionOptions::durable on, the default, and while \
         its cells fit max_journal_bytes)"
    )
}

fn reply_result(reply: Reply) -> Result<JsonValue, String> {
    match reply {
        Reply::Ok(v) => Ok(v),
        Reply::Err(m) => Err(m),
    }
}

/// The result of a suspended run: its journal sealed, unless it is over
/// the journal budget.
fn suspended(d: Durable, delivered: Delivered, spent: Spent) -> RunResult {
    let Durable { rec, .. } = d;
    let failed = |kind, message| RunResult::failed(kind, message, Vec::new());
    let Some(mut journal) = rec.tape.into_journal(delivered, spent) else {
        return failed(FailureKind::WorkerExit, "the run suspended without a pending call".into());
    };
    journal.session = rec.session.map(|cells| cells.to_vec());
    let bytes = journal.seal(&rec.key);
    if bytes.len() as u64 > rec.max_bytes {
        return failed(FailureKind::OutputLimit, SuspendError::OverBudget { max: rec.max_bytes }.to_string());
    }
    let pycage_journal::Pending { global, name, args, reason, .. } = journal.pending;
    let message = match journal.session {
        None => format!("the run is suspended at {global}.{name}: {reason} (resume it with its journal)"),
        Some(_) => format!(
            "the session's cell is suspended at {global}.{name}: {reason}; the session has ended (resume it with \
             the journal as a new session, which replays its cells)"
        ),
    };
    RunResult {
        error: Some(RunFailure { kind: FailureKind::Suspended, message }),
        suspension: Some(Suspension { call: PendingCall { global, name, args }, reason, journal: bytes }),
        ..RunResult::default()
    }
}

/// A child that ended without `done`: a CPU-budget kill is a `timeout`,
/// anything else is `worker-exit`.
fn classify_end(cpu_seconds: u64, end: Option<ChildEnd>) -> RunFailure {
    use std::os::unix::process::ExitStatusExt;
    let Some(end) = end else {
        return RunFailure {
            kind: FailureKind::WorkerExit,
            message: "the Python process ended without finishing the run".into(),
        };
    };
    let sig = end.status.signal();
    let cpu_kill =
        sig == Some(libc::SIGXCPU) || (sig == Some(libc::SIGKILL) && end.cpu >= Duration::from_secs(cpu_seconds));
    if cpu_kill {
        return RunFailure {
            kind: FailureKind::Timeout,
            message: format!("the CPU budget of {cpu_seconds} s was exceeded ({:.1} s used)", end.cpu.as_secs_f64()),
        };
    }
    let how = pycage_process::describe_status(end.status);
    let message = if end.by_itself {
        format!("the Python process {how} before finishing the run")
    } else {
        format!(
            "the Python process closed its protocol channel (fd 3) without finishing the run and was stopped; it {how}"
        )
    };
    RunFailure { kind: FailureKind::WorkerExit, message }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn config() -> RuntimeConfig {
        RuntimeConfig { max_line_bytes: 1024, max_control_bytes: 8192, max_log_bytes: 64, ..RuntimeConfig::default() }
    }

    fn echo_ns() -> Namespace {
        Namespace::new("tools").with_function("echo", Binding::new(|a| async move { Ok(a) }))
    }

    fn machine(streaming: bool) -> RunMachine {
        RunMachine::new(&config(), Opening::OneShot, "return 1".into(), vec![echo_ns()], streaming, false)
    }

    /// The frames waiting on fd 3, as lines; marks them written.
    fn drain(m: &mut RunMachine) -> Vec<String> {
        let text = String::from_utf8(m.pending_output().to_vec()).unwrap();
        let n = m.pending_output().len();
        m.wrote(n);
        text.lines().map(str::to_owned).collect()
    }

    fn call(id: u64) -> String {
        format!(r#"{{"type":"call","id":{id},"global":"tools","name":"echo","args":[{id}]}}"#) + "\n"
    }

    fn booted() -> RunMachine {
        let mut m = machine(true);
        let out = drain(&mut m);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].starts_with(r#"{"type":"boot","#), "{out:?}");
        assert_eq!(out[1], r#"{"type":"run","program":"return 1"}"#);
        m.receive(b"{\"type\":\"boot-ack\"}\n");
        m
    }

    #[test]
    fn boot_and_run_go_out_together_and_acks_send_nothing() {
        let mut m = booted();
        m.receive(b"{\"type\":\"boot-ack\"}\n");
        assert!(m.pending_output().is_empty(), "a second boot-ack sends nothing");
    }

    #[test]
    fn session_runs_carry_budgets_and_only_the_first_boots() {
        let c = config();
        let mut first = RunMachine::new(&c, Opening::SessionFirst, "x = 1".into(), vec![echo_ns()], false, false);
        let out = drain(&mut first);
        assert_eq!(out.len(), 2);
        assert!(out[0].ends_with(r#","session":true}"#), "{}", out[0]);
        assert!(
            out[1].starts_with(r#"{"type":"run","program":"x = 1","cpuSeconds":30,"maxLogBytes":64,"#),
            "{}",
            out[1]
        );
        let mut next = RunMachine::new(&c, Opening::SessionNext, "x".into(), vec![echo_ns()], false, false);
        let out = drain(&mut next);
        assert_eq!(out.len(), 1);
        assert!(out[0].starts_with(r#"{"type":"run","program":"x","#), "{}", out[0]);
    }

    #[test]
    fn each_call_id_is_answered_once() {
        let mut m = booted();
        m.receive(call(7).as_bytes());
        m.receive(call(7).as_bytes()); // a repeat: dropped, not dispatched
        let started = m.next_call().unwrap();
        assert_eq!(started.id, 7);
        assert!(m.next_call().is_none());
        assert_eq!(m.dropped_frames(), 1);
        m.call_finished(7, Ok(JsonValue::parse(b"[7]").unwrap()));
        m.call_finished(7, Ok(JsonValue::parse(b"[8]").unwrap())); // late duplicate result
        m.call_finished(99, Ok(JsonValue::null())); // never called
        assert_eq!(drain(&mut m), [r#"{"type":"reply","id":7,"ok":true,"value":[7]}"#]);
        // Even after the reply, the id stays used.
        m.receive(call(7).as_bytes());
        assert!(m.next_call().is_none());
        assert_eq!(m.dropped_frames(), 2);
    }

    #[test]
    fn unknown_binding_is_rejected_at_once() {
        let mut m = booted();
        m.receive(b"{\"type\":\"call\",\"id\":1,\"global\":\"tools\",\"name\":\"nope\",\"args\":null}\n");
        assert!(m.next_call().is_none());
        assert_eq!(
            drain(&mut m),
            [r#"{"type":"reply","id":1,"ok":false,"message":"tools.nope is not a binding of this run"}"#]
        );
        // Answered, but in flight until the child has read the reply.
        assert_eq!(m.calls_in_flight(), 1);
        m.child_read_to(m.written_total());
        assert_eq!(m.calls_in_flight(), 0);
    }

    #[test]
    fn forged_done_with_calls_in_flight_settles_and_silences_replies() {
        let mut m = booted();
        m.receive(call(1).as_bytes());
        m.receive(call(2).as_bytes());
        assert_eq!(m.calls_in_flight(), 2);
        // A forged done carrying both value and error: the error wins.
        m.receive(br#"{"type":"done","value":1,"error":{"kind":"exception","message":"forged"}}"#);
        m.receive(b"\n");
        assert!(matches!(m.settled(), Some(Settled::Done { .. })));
        m.call_finished(1, Ok(JsonValue::null()));
        assert!(m.pending_output().is_empty(), "no reply after settlement");
        // Everything after the first done is ignored.
        m.receive(b"{\"type\":\"done\",\"value\":2}\n");
        m.receive(call(3).as_bytes());
        assert!(m.next_call().is_some_and(|c| c.id == 1));
        assert!(m.next_call().is_some_and(|c| c.id == 2));
        assert!(m.next_call().is_none());
        let r = m.finish(None);
        let e = r.error.unwrap();
        assert_eq!((e.kind, e.message.as_str()), (FailureKind::Exception, "forged"));
        assert!(r.value.is_none());
    }

    #[test]
    fn write_backpressure_keeps_order_and_compacts() {
        let mut m = booted();
        for id in 0..50 {
            m.receive(call(id).as_bytes());
        }
        while let Some(c) = m.next_call() {
            m.call_finished(c.id, Ok(c.args));
        }
        // The child reads a few bytes at a time.
        let mut written = Vec::new();
        loop {
            let pending = m.pending_output();
            if pending.is_empty() {
                break;
            }
            let n = pending.len().min(7);
            written.extend_from_slice(&pending[..n]);
            m.wrote(n);
            // What was written is dropped from the front once it is half
            // the buffer: the dead prefix never grows past that.
            assert!(m.out_sent <= m.out.len() / 2 + 7, "buffer compacted: {} of {} sent", m.out_sent, m.out.len());
        }
        let text = String::from_utf8(written).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 50);
        for (id, line) in lines.iter().enumerate() {
            assert_eq!(*line, format!(r#"{{"type":"reply","id":{id},"ok":true,"value":[{id}]}}"#));
        }
    }

    fn limited(calls: usize, unread: u64) -> RunMachine {
        let c = RuntimeConfig { max_calls_in_flight: calls, max_unread_reply_bytes: unread, ..config() };
        let mut m = RunMachine::new(&c, Opening::OneShot, "return 1".into(), vec![echo_ns()], false, false);
        drain(&mut m);
        m.kernel_queued(0);
        m
    }

    #[test]
    fn a_call_flood_starts_at_most_the_in_flight_budget() {
        let mut m = limited(4, 1 << 20);
        let flood: String = (0..10).map(call).collect();
        let taken = m.receive(flood.as_bytes());
        // Input stops right after the fifth call, which is held.
        assert_eq!(taken, (0..5).map(|id| call(id).len()).sum::<usize>());
        assert!(!m.wants_input() && m.waiting_for_child_to_read());
        let started: Vec<u64> = std::iter::from_fn(|| m.next_call()).map(|c| c.id).collect();
        assert_eq!(started, [0, 1, 2, 3]);
        // Answered, written, but not read by the child: still in flight.
        for id in 0..4 {
            m.call_finished(id, Ok(JsonValue::null()));
        }
        drain(&mut m);
        m.kernel_queued(512);
        assert_eq!(m.calls_in_flight(), 4);
        assert!(m.next_call().is_none(), "nothing starts while the child has not read");
        // The child read everything: the held call starts, input resumes.
        m.kernel_queued(0);
        assert_eq!(m.next_call().map(|c| c.id), Some(4));
        assert!(m.wants_input());
        // Call 4 runs: three more start, the fourth (8) is held.
        assert_eq!(m.receive(&flood.as_bytes()[taken..]), (5..9).map(|id| call(id).len()).sum::<usize>());
        assert_eq!(std::iter::from_fn(|| m.next_call()).count(), 3);
        assert!(!m.wants_input());
    }

    #[test]
    fn unread_reply_bytes_hold_new_calls() {
        let mut m = limited(100, 300);
        m.receive(call(1).as_bytes());
        let c = m.next_call().unwrap();
        // A big reply the child does not take (it stays queued here).
        let big = JsonValue::parse(format!("\"{}\"", "x".repeat(1000)).as_bytes()).unwrap();
        m.call_finished(c.id, Ok(big));
        m.receive(call(2).as_bytes());
        assert!(m.next_call().is_none(), "held: over the unread-reply budget");
        assert!(!m.wants_input());
        drain(&mut m);
        m.kernel_queued(4096);
        assert!(m.next_call().is_none(), "the kernel holds it now: still unread");
        m.kernel_queued(0);
        assert_eq!(m.next_call().map(|c| c.id), Some(2));
    }

    #[test]
    fn calls_after_the_child_is_gone_never_start() {
        let mut m = limited(1, 1 << 20);
        let two = call(1) + &call(2);
        m.receive(two.as_bytes());
        assert!(m.next_call().is_some());
        assert!(!m.wants_input(), "call 2 is held");
        m.child_gone();
        assert!(m.wants_input());
        m.receive(call(3).as_bytes());
        assert!(m.next_call().is_none(), "neither the held call nor a later one starts");
        assert_eq!(m.dropped_frames(), 2);
    }

    #[test]
    fn events_the_consumer_has_no_room_for_wait_in_order() {
        let mut m = booted();
        m.receive(b"{\"type\":\"log\",\"text\":\"a\\nb\\n\"}\n");
        let first = m.next_event().unwrap();
        assert_eq!(first, RunEvent::Log("a".into()));
        m.unshift_event(first);
        assert!(m.has_events());
        let all: Vec<_> = std::iter::from_fn(|| m.next_event()).collect();
        assert_eq!(all, [RunEvent::Log("a".into()), RunEvent::Log("b".into())]);
        m.stop_streaming();
        m.receive(b"{\"type\":\"log\",\"text\":\"c\\n\"}\n");
        assert!(!m.has_events());
    }

    #[test]
    fn oversized_line_and_control_budget_settle_as_output_limit() {
        let mut m = booted();
        m.receive(&vec![b'x'; 2000]);
        assert!(matches!(m.settled(), Some(Settled::Fail(FailureKind::OutputLimit, msg)) if msg.contains("line cap")));
        let mut m = booted();
        for _ in 0..1000 {
            m.receive(b"{\"junk\":1}\n");
        }
        assert!(
            matches!(m.settled(), Some(Settled::Fail(FailureKind::OutputLimit, msg)) if msg.contains("protocol traffic"))
        );
        assert!(m.dropped_frames() > 100);
    }

    #[test]
    fn unterminated_last_line_is_a_frame_at_eof() {
        let mut m = booted();
        m.receive(b"{\"type\":\"log\",\"text\":\"hi\\n\"}\n{\"type\":\"done\",\"value\":5}");
        assert!(m.settled().is_none());
        m.receive_eof();
        let r = m.finish(None);
        assert_eq!(r.value.unwrap().to_string(), "5");
        assert_eq!(r.logs, ["hi"]);
    }

    #[test]
    fn eof_without_done_is_worker_exit_and_cpu_kill_is_timeout() {
        let mut m = booted();
        m.receive(b"{\"type\":\"log\",\"text\":\"partial\"}\n");
        m.receive_eof();
        let end = ChildEnd { status: std::process::ExitStatus::from_raw(3 << 8), cpu: Duration::ZERO, by_itself: true };
        let r = m.finish(Some(end));
        let e = r.error.unwrap();
        assert_eq!(e.kind, FailureKind::WorkerExit);
        assert!(e.message.contains("exited with status 3"), "{}", e.message);
        assert_eq!(r.logs, ["partial"]);

        let mut m = booted();
        m.child_exited();
        let end = ChildEnd {
            status: std::process::ExitStatus::from_raw(libc::SIGKILL),
            cpu: Duration::from_secs(31),
            by_itself: false,
        };
        let e = m.finish(Some(end)).error.unwrap();
        assert_eq!(e.kind, FailureKind::Timeout);
        assert!(e.message.contains("CPU budget"), "{}", e.message);
    }

    #[test]
    fn first_settlement_wins_and_logs_survive() {
        let mut m = booted();
        m.receive(b"{\"type\":\"log\",\"text\":\"before\\n\"}\n");
        m.settle(FailureKind::Timeout, "wall".into());
        m.settle(FailureKind::Abort, "cancel".into());
        m.receive(b"{\"type\":\"done\",\"value\":1}\n");
        m.receive_raw(b"raw tail");
        let r = m.finish(None);
        let e = r.error.unwrap();
        assert_eq!((e.kind, e.message.as_str()), (FailureKind::Timeout, "wall"));
        assert_eq!(r.logs, ["before", "raw tail"]);
    }

    #[test]
    fn value_over_budget_is_output_limit() {
        let mut c = config();
        c.max_value_bytes = 4;
        let mut m = RunMachine::new(&c, Opening::OneShot, "x".into(), Vec::new(), false, false);
        m.receive(b"{\"type\":\"done\",\"value\":\"abcdef\"}\n");
        assert_eq!(m.finish(None).error.unwrap().kind, FailureKind::OutputLimit);
    }

    #[test]
    fn displays_are_kept_in_order_streamed_and_metered() {
        // "a" (44 bytes) and the image (100) fit, each with the ledger's
        // charge; "b" (44) does not.
        let charge = crate::display::DISPLAY_CHARGE;
        let c = RuntimeConfig { max_display_bytes: 44 + 100 + 2 * charge + 43, ..config() };
        assert_eq!(c.max_display_bytes, 699);
        let mut m = RunMachine::new(&c, Opening::OneShot, "x".into(), Vec::new(), true, false);
        let boot = drain(&mut m);
        assert!(boot[0].contains(r#""maxDisplayBytes":699,"#), "{}", boot[0]);
        let display = |t: &str| format!(r#"{{"type":"display","data":{{"text/plain":"{t}"}}}}"#) + "\n";
        m.receive(display("a").as_bytes());
        m.receive(b"{\"type\":\"log\",\"text\":\"between\\n\"}\n");
        m.receive(
            br#"{"type":"display","data":{"image/png":"iVBO","text/plain":"P"},"metadata":{"image/png":{"width":2}}}"#,
        );
        m.receive(b"\n");
        m.receive(display("b").as_bytes());
        m.receive(display("c").as_bytes());
        m.receive(br#"{"type":"display","data":{"a":"1","a":"2"}}"#);
        m.receive(b"\n{\"type\":\"done\",\"value\":1}\n");
        let events: Vec<_> = std::iter::from_fn(|| m.next_event()).collect();
        let r = m.finish(None);
        assert_eq!(r.dropped_frames, 1, "the duplicate MIME type");
        let texts: Vec<_> = r.displays.iter().map(|d| d.get("text/plain").unwrap_or("").to_owned()).collect();
        assert_eq!(texts, ["a", "P", "[pycage] display output truncated at 699 bytes"]);
        assert_eq!(r.displays[1].get("image/png"), Some("iVBO"));
        assert_eq!(r.displays[1].metadata.as_ref().unwrap().to_string(), r#"{"image/png":{"width":2}}"#);
        let streamed: Vec<_> = events
            .into_iter()
            .map(|e| match e {
                RunEvent::Display(d) => format!("display {}", d.get("text/plain").unwrap_or("")),
                RunEvent::Log(l) => format!("log {l}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            streamed,
            ["display a", "log between", "display P", "display [pycage] display output truncated at 699 bytes"]
        );
        let json = r.to_json().to_string();
        assert!(json.contains(r#""displays":[{"data":{"text/plain":"a"},"metadata":{}},"#), "{json}");
    }

    #[test]
    fn events_only_when_streaming() {
        let mut m = machine(false);
        m.receive(b"{\"type\":\"boot-ack\"}\n");
        m.receive(b"{\"type\":\"log\",\"text\":\"x\\n\"}\n");
        m.receive(call(1).as_bytes());
        assert!(m.next_event().is_none());
        let mut m = booted();
        m.receive(b"{\"type\":\"log\",\"text\":\"x\\n\"}\n");
        m.receive(call(1).as_bytes());
        let c = m.next_call().unwrap();
        m.call_finished(c.id, Err(BindingError::new("no")));
        let events: Vec<_> = std::iter::from_fn(|| m.next_event()).collect();
        assert_eq!(events[0], RunEvent::Log("x".into()));
        assert!(matches!(&events[1], RunEvent::Call { id: 1, .. }));
        assert_eq!(events[2], RunEvent::CallFinished { id: 1, error: Some("no".into()) });
    }
}
