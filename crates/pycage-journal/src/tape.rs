//! One run's side of durability, without I/O: what it records while live,
//! and how a resumed run is matched against its journal.
//!
//! A run's calls get *positions* in the order the host receives them. A
//! live run records each call (its name and the digest of its arguments)
//! and each reply when it is written to the program, so the journal holds
//! the interleaving of calls and replies the program saw. When a call
//! suspends the run, no further call starts (later ones are neither started
//! nor recorded, and start live after a resume), replies are no longer
//! written, and calls already running are waited for: their replies are
//! recorded, to be delivered after the suspension point on replay.
//!
//! A resumed run walks the recorded events with a cursor. At a recorded
//! call the cursor waits for the program's next call, which must be the
//! same function with arguments of the same digest, or the run diverges;
//! at a recorded reply it answers at once ([`Due::Reply`]), in the recorded
//! order. When the cursor reaches the end, the pending call gets the
//! caller's answer, calls recorded without a reply start live
//! ([`Due::Start`]), and the run is live ([`Due::Live`]): from there on it
//! records again, after the old events, so a second suspension's journal
//! extends the first. Until then no binding is called, so nothing runs
//! against live bindings after a divergence.
//!
//! A session's earlier cell is replayed *closed* ([`Tape::replay_cell`]):
//! it has no pending call, and once its recorded events are used up it
//! never goes live: another call diverges, and a call recorded without a
//! reply (the cell ended without awaiting it) is never answered or
//! started. A cell that ran to its end gives its record for the session's
//! next journal ([`Tape::into_cell`]).

use std::collections::{HashMap, HashSet, VecDeque};

use pycage_protocol::{json_string_len, JsonValue};

use crate::digest::{args_digest, Digest};
use crate::error::JournalError;
use crate::format::{Budgets, Cell, Delivered, Event, Journal, Pending, Reply, Seeds, Spent};

/// What a run is, for its journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub program: String,
    pub bindings: Digest,
    pub binding_names: Vec<String>,
    pub budgets: Budgets,
    pub seeds: Seeds,
}

/// What to do with a call the program issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnCall {
    /// Start the binding (the call is recorded).
    Live,
    /// The journal answers it: its reply comes from [`Tape::next_due`].
    Replayed,
    /// Recorded without a reply: it starts live when the replay is over.
    Deferred,
    /// The run is suspending: not started, not recorded.
    Refused,
    /// The program took another path: the run ends as `diverged` with
    /// this message, and the call is not started.
    Diverged(String),
}

/// What the run must do now, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Write this reply to call `id` (a recorded one, or the pending
    /// call's answer).
    Reply { id: u64, reply: Reply },
    /// Start call `id`, which was recorded without a reply.
    Start { id: u64 },
    /// The replay is over: the run is live from here on.
    Live,
}

/// A suspension the tape refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuspendError {
    #[error(
        "the run's journal is over its {max}-byte budget (max_journal_bytes): raise it, or make fewer or smaller \
         binding calls before a call that needs approval"
    )]
    OverBudget { max: u64 },
    /// A second suspension while the run is already suspending.
    #[error("the run is already suspending")]
    AlreadySuspending,
}

/// What a resumed run's caller says the journal must match.
pub struct Given<'a> {
    /// The program the caller means, if it names one.
    pub program: Option<&'a str>,
    pub bindings: Digest,
    pub binding_names: &'a [String],
}

/// See the module docs.
#[derive(Debug)]
pub struct Tape {
    meta: Meta,
    events: Vec<Event>,
    /// Size of the journal so far, as [`Journal::seal`] would write it (an
    /// estimate within a few bytes per event).
    bytes: u64,
    max_bytes: u64,
    /// Over `max_bytes`: nothing more is recorded, and the run cannot
    /// suspend.
    over: bool,
    /// Positions handed out.
    issued: u64,
    /// Child call id → position.
    positions: HashMap<u64, u64>,
    replay: Option<Replay>,
    due: VecDeque<Due>,
    suspension: Option<Pending>,
    before: (Delivered, Spent, u64),
    /// A closed replay is over: every further call diverges.
    closed: bool,
}

#[derive(Debug)]
struct Replay {
    cursor: usize,
    end: usize,
    /// The pending call and its answer; `None` for a closed replay.
    pending: Option<(u64, Reply)>,
    /// Positions with a recorded reply.
    answered: HashSet<u64>,
    /// Position → child call id, for the calls matched so far.
    ids: HashMap<u64, u64>,
    deferred: Vec<u64>,
}

/// Bytes a string takes in the payload, quotes and comma included.
fn str_bytes(s: &str) -> u64 {
    json_string_len(s) as u64 + 3
}

impl Tape {
    /// A live run's tape, recording at most `max_bytes` of journal.
    pub fn new(meta: Meta, max_bytes: u64) -> Tape {
        let names: u64 = meta.binding_names.iter().map(|n| str_bytes(n)).sum();
        let bytes = 512 + str_bytes(&meta.program) + names;
        Tape {
            over: bytes > max_bytes,
            meta,
            events: Vec::new(),
            bytes,
            max_bytes,
            issued: 0,
            positions: HashMap::new(),
            replay: None,
            due: VecDeque::new(),
            suspension: None,
            before: Default::default(),
            closed: false,
        }
    }

    /// A closed replay of a session's earlier cell (see the module docs):
    /// `meta` is the cell's, `events` its record.
    pub fn replay_cell(meta: Meta, events: Vec<Event>, max_bytes: u64) -> Tape {
        let answered = answered(&events);
        let replay =
            Replay { cursor: 0, end: events.len(), pending: None, answered, ids: HashMap::new(), deferred: Vec::new() };
        let mut tape = Tape::new(meta, max_bytes);
        tape.events = events;
        tape.replay = Some(replay);
        tape.advance();
        tape
    }

    /// The record of a cell that ran to its end, for its session's later
    /// journals: `None` when it is over the journal budget (its session
    /// can no longer suspend) or still replaying.
    pub fn into_cell(self) -> Option<Cell> {
        if self.over || self.replay.is_some() || self.suspension.is_some() {
            return None;
        }
        Some(Cell { program: self.meta.program, random: self.meta.seeds.random, events: self.events })
    }

    /// Bytes of journal recorded so far (an estimate within a few bytes
    /// per event).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// A resumed run's tape: `journal` (opened and verified) replayed, its
    /// pending call answered with `answer`. Refused when `given` does not
    /// match the journal.
    pub fn resume(journal: Journal, given: Given<'_>, answer: Reply, max_bytes: u64) -> Result<Tape, JournalError> {
        if given.program.is_some_and(|p| p != journal.program) {
            return Err(JournalError::OtherProgram);
        }
        if given.bindings != journal.bindings {
            return Err(JournalError::Bindings {
                recorded: journal.bindings,
                given: given.bindings,
                detail: bindings_difference(&journal.binding_names, given.binding_names),
            });
        }
        let bytes = journal.payload_len() as u64;
        let Journal {
            program,
            bindings,
            binding_names,
            budgets,
            seeds,
            events,
            pending,
            delivered,
            spent,
            suspensions,
            session: _,
        } = journal;
        let answered = answered(&events);
        let replay = Replay {
            cursor: 0,
            end: events.len(),
            pending: Some((pending.position, answer)),
            answered,
            ids: HashMap::new(),
            deferred: Vec::new(),
        };
        let mut tape = Tape {
            meta: Meta { program, bindings, binding_names, budgets, seeds },
            events,
            bytes,
            max_bytes,
            over: false,
            issued: 0,
            positions: HashMap::new(),
            replay: Some(replay),
            due: VecDeque::new(),
            suspension: None,
            before: (delivered, spent, suspensions),
            closed: false,
        };
        tape.advance();
        Ok(tape)
    }

    /// The run's program, seeds and budgets.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// Output and budgets the run had used before this resume (zero for a
    /// live run).
    pub fn delivered_before(&self) -> Delivered {
        self.before.0
    }

    /// What the run had spent before this resume.
    pub fn spent_before(&self) -> Spent {
        self.before.1
    }

    /// Whether the run is replaying its journal (not live yet).
    pub fn replaying(&self) -> bool {
        self.replay.is_some()
    }

    /// Whether a call has suspended the run.
    pub fn suspending(&self) -> bool {
        self.suspension.is_some()
    }

    /// The program issued call `id` (see [`OnCall`]).
    pub fn on_call(&mut self, id: u64, global: &str, name: &str, args: &JsonValue) -> OnCall {
        if self.suspension.is_some() {
            return OnCall::Refused;
        }
        let position = self.issued;
        if self.closed {
            return OnCall::Diverged(diverged_call(position, None, global, name, args, &args_digest(args)));
        }
        if let Some(replay) = &mut self.replay {
            let digest = args_digest(args);
            let recorded = self.events.get(replay.cursor);
            let matches = matches!(recorded, Some(Event::Issue { global: g, name: n, args: d })
                if g == global && n == name && *d == digest);
            if !matches {
                return OnCall::Diverged(diverged_call(position, recorded, global, name, args, &digest));
            }
            replay.cursor += 1;
            replay.ids.insert(position, id);
            let pending = replay.pending.as_ref().is_some_and(|(p, _)| *p == position);
            let kind = if pending || replay.answered.contains(&position) {
                OnCall::Replayed
            } else {
                replay.deferred.push(id);
                OnCall::Deferred
            };
            self.issued += 1;
            self.positions.insert(id, position);
            self.advance();
            return kind;
        }
        self.issued += 1;
        // Over the budget nothing is recorded, and no position is needed:
        // the host keeps nothing more per call for the journal.
        if !self.over {
            self.positions.insert(id, position);
            let size = str_bytes(global) + str_bytes(name) + 80;
            let event = Event::Issue { global: global.to_owned(), name: name.to_owned(), args: args_digest(args) };
            self.record(event, size);
        }
        OnCall::Live
    }

    /// The next thing due (see [`Due`]).
    pub fn next_due(&mut self) -> Option<Due> {
        self.due.pop_front()
    }

    /// A live call's reply, recorded. Returns whether to write it to the
    /// program (not while the run is suspending).
    pub fn on_reply(&mut self, id: u64, reply: Result<&JsonValue, &str>) -> bool {
        if let (Some(&position), false) = (self.positions.get(&id), self.over) {
            let room = usize::try_from(self.max_bytes.saturating_sub(self.bytes)).unwrap_or(usize::MAX);
            let size = match reply {
                Ok(v) => v.canonical_len_within(room).map(|n| n as u64),
                Err(m) => Some(str_bytes(m)),
            };
            match size {
                Some(size) => {
                    let reply = match reply {
                        Ok(v) => Reply::Ok(v.clone()),
                        Err(m) => Reply::Err(m.to_owned()),
                    };
                    self.record(Event::Deliver { position, reply }, size + 30);
                }
                None => self.overflow(),
            }
        }
        self.suspension.is_none()
    }

    /// Call `id` (issued live, as `global.name` with `args`) suspends the
    /// run: nothing more starts, and replies are no longer written.
    pub fn suspend(
        &mut self,
        id: u64,
        global: &str,
        name: &str,
        args: JsonValue,
        reason: String,
    ) -> Result<(), SuspendError> {
        if self.suspension.is_some() {
            return Err(SuspendError::AlreadySuspending);
        }
        let room = usize::try_from(self.max_bytes.saturating_sub(self.bytes)).unwrap_or(usize::MAX);
        let size = args.canonical_len_within(room).map(|n| n as u64 + str_bytes(&reason));
        let position = self.positions.get(&id).copied();
        match (size, position) {
            (Some(size), Some(position)) if !self.over && self.bytes + size <= self.max_bytes => {
                self.bytes += size;
                self.suspension =
                    Some(Pending { position, global: global.to_owned(), name: name.to_owned(), args, reason });
                Ok(())
            }
            _ => Err(SuspendError::OverBudget { max: self.max_bytes }),
        }
    }

    /// Why the run diverged, if it ended while still replaying: `how` says
    /// how it ended ("returned", "raised ...").
    pub fn diverged_at_end(&self, how: &str) -> Option<String> {
        let replay = self.replay.as_ref()?;
        let next = match self.events.get(replay.cursor) {
            Some(Event::Issue { global, name, .. }) => format!("{global}.{name}"),
            _ => "the rest of the journal".to_owned(),
        };
        Some(format!(
            "the program diverged from its journal: it {how} after {} binding call(s), where the journal records \
             call {} ({next}) next; {HINT}",
            self.issued,
            self.issued + 1,
        ))
    }

    /// The journal of the suspended run (`None` when it did not suspend):
    /// what it delivered and spent in this process, added to what the
    /// journal had.
    pub fn into_journal(self, delivered: Delivered, spent: Spent) -> Option<Journal> {
        let pending = self.suspension?;
        let (d, s, suspensions) = self.before;
        Some(Journal {
            program: self.meta.program,
            bindings: self.meta.bindings,
            binding_names: self.meta.binding_names,
            budgets: self.meta.budgets,
            seeds: self.meta.seeds,
            events: self.events,
            pending,
            delivered: Delivered {
                logs: d.logs.saturating_add(delivered.logs),
                displays: d.displays.saturating_add(delivered.displays),
            },
            spent: Spent {
                wall_ms: s.wall_ms.saturating_add(spent.wall_ms),
                cpu_ms: s.cpu_ms.saturating_add(spent.cpu_ms),
            },
            suspensions: suspensions + 1,
            session: None,
        })
    }

    /// Moves the cursor over recorded replies (queueing them), up to the
    /// next recorded call or the end.
    fn advance(&mut self) {
        let Some(replay) = &mut self.replay else { return };
        while let Some(event) = self.events.get(replay.cursor) {
            match event {
                Event::Issue { .. } => return,
                Event::Deliver { position, reply } => {
                    replay.cursor += 1;
                    if let Some(&id) = replay.ids.get(position) {
                        self.due.push_back(Due::Reply { id, reply: reply.clone() });
                    }
                }
            }
        }
        if replay.cursor < replay.end {
            return;
        }
        let Some(replay) = self.replay.take() else { return };
        let Some((position, answer)) = replay.pending else {
            // A closed replay: nothing goes live, nothing more is answered.
            self.closed = true;
            return;
        };
        if let Some(&id) = replay.ids.get(&position) {
            self.due.push_back(Due::Reply { id, reply: answer.clone() });
        }
        let size = match &answer {
            Reply::Ok(v) => v.canonical_len_within(usize::MAX).unwrap_or(0) as u64,
            Reply::Err(m) => str_bytes(m),
        };
        self.record(Event::Deliver { position, reply: answer }, size + 30);
        self.due.extend(replay.deferred.into_iter().map(|id| Due::Start { id }));
        self.due.push_back(Due::Live);
    }

    fn record(&mut self, event: Event, size: u64) {
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes > self.max_bytes {
            self.overflow();
        } else {
            self.events.push(event);
        }
    }

    /// The journal is over its budget: what it holds is dropped (the run
    /// can no longer suspend, and needs none of it).
    fn overflow(&mut self) {
        self.over = true;
        self.events = Vec::new();
        self.positions = HashMap::new();
    }
}

/// The positions of `events` that have a recorded reply.
fn answered(events: &[Event]) -> HashSet<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Deliver { position, .. } => Some(*position),
            Event::Issue { .. } => None,
        })
        .collect()
}

const HINT: &str = "a resumed program must make the same binding calls, with the same arguments, in the same \
                    order; time, os.urandom and other inputs that are not binding calls are not recorded and must \
                    not change its path (docs/durable.md). Nothing was called after the divergence.";

fn diverged_call(
    position: u64,
    recorded: Option<&Event>,
    global: &str,
    name: &str,
    args: &JsonValue,
    digest: &Digest,
) -> String {
    let mut shown = args.to_string();
    if shown.len() > 200 {
        let mut cut = 200;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push_str("...");
    }
    let called = format!("{global}.{name}({shown})");
    let n = position + 1;
    match recorded {
        Some(Event::Issue { global: g, name: n2, args: d }) if g == global && n2 == name => format!(
            "the program diverged from its journal at binding call {n}: the journal records {g}.{n2} with \
             arguments of digest {}, the program called {called} (digest {}); {HINT}",
            d.short(),
            digest.short()
        ),
        Some(Event::Issue { global: g, name: n2, args: d }) => format!(
            "the program diverged from its journal at binding call {n}: the journal records {g}.{n2} (arguments \
             of digest {}), the program called {called}; {HINT}",
            d.short()
        ),
        _ => format!(
            "the program diverged from its journal at binding call {n}: the journal records no call there, the \
             program called {called}; {HINT}"
        ),
    }
}

/// What differs between two lists of binding names, for a message.
fn bindings_difference(recorded: &[String], given: &[String]) -> String {
    let recorded_set: HashSet<&String> = recorded.iter().collect();
    let given_set: HashSet<&String> = given.iter().collect();
    let mut missing: Vec<&str> = recorded.iter().filter(|n| !given_set.contains(n)).map(String::as_str).collect();
    let mut extra: Vec<&str> = given.iter().filter(|n| !recorded_set.contains(n)).map(String::as_str).collect();
    missing.sort_unstable();
    extra.sort_unstable();
    let list = |names: &[&str]| {
        let mut s = names.iter().take(8).copied().collect::<Vec<_>>().join(", ");
        if names.len() > 8 {
            s.push_str(&format!(" and {} more", names.len() - 8));
        }
        s
    };
    match (missing.is_empty(), extra.is_empty()) {
        (true, true) => "the same names, with other docs, schemas or error classes".to_owned(),
        (false, true) => format!("{} missing", list(&missing)),
        (true, false) => format!("{} not in the journal", list(&extra)),
        (false, false) => format!("{} missing, {} not in the journal", list(&missing), list(&extra)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            program: "p".into(),
            bindings: Digest([1; 32]),
            binding_names: vec!["t.a".into(), "t.b".into()],
            budgets: Budgets::default(),
            seeds: Seeds::default(),
        }
    }

    fn v(text: &str) -> JsonValue {
        JsonValue::parse(text.as_bytes()).unwrap()
    }

    fn given(names: &[String]) -> Given<'_> {
        Given { program: None, bindings: Digest([1; 32]), binding_names: names }
    }

    /// A live run: a (0) and b (1) start; b replies; a replies; c (2,
    /// approval) suspends; a late d is refused.
    fn suspended() -> Journal {
        let mut t = Tape::new(meta(), 1 << 20);
        assert_eq!(t.on_call(10, "t", "a", &v("1")), OnCall::Live);
        assert_eq!(t.on_call(11, "t", "b", &v("2")), OnCall::Live);
        assert!(t.on_reply(11, Ok(&v("\"B\""))));
        assert!(t.on_reply(10, Err("no")));
        assert_eq!(t.on_call(12, "t", "c", &v("{\"x\":3}")), OnCall::Live);
        t.suspend(12, "t", "c", v("{\"x\":3}"), "approval required".into()).unwrap();
        assert_eq!(t.on_call(13, "t", "d", &v("4")), OnCall::Refused);
        t.into_journal(Delivered { logs: 2, displays: 0 }, Spent { wall_ms: 5, cpu_ms: 7 }).unwrap()
    }

    #[test]
    fn a_replay_answers_in_the_recorded_order_then_goes_live() {
        let j = suspended();
        assert_eq!(j.pending.position, 2);
        let names = meta().binding_names;
        let mut t = Tape::resume(j, given(&names), Reply::Ok(v("\"paid\"")), 1 << 20).unwrap();
        assert!(t.replaying());
        assert_eq!(t.delivered_before(), Delivered { logs: 2, displays: 0 });
        // New ids: the child numbers its calls as it likes.
        assert_eq!(t.on_call(1, "t", "a", &v("1")), OnCall::Replayed);
        assert_eq!(t.next_due(), None, "b's reply came before a's, after b was issued");
        assert_eq!(t.on_call(2, "t", "b", &v("2")), OnCall::Replayed);
        assert_eq!(t.next_due(), Some(Due::Reply { id: 2, reply: Reply::Ok(v("\"B\"")) }));
        assert_eq!(t.next_due(), Some(Due::Reply { id: 1, reply: Reply::Err("no".into()) }));
        assert_eq!(t.next_due(), None);
        assert_eq!(t.on_call(3, "t", "c", &v("{\"x\":3}")), OnCall::Replayed);
        assert_eq!(t.next_due(), Some(Due::Reply { id: 3, reply: Reply::Ok(v("\"paid\"")) }));
        assert_eq!(t.next_due(), Some(Due::Live));
        assert!(!t.replaying());
        // Live again: d is a new call at position 3, and may suspend again.
        assert_eq!(t.on_call(4, "t", "d", &v("4")), OnCall::Live);
        t.suspend(4, "t", "d", v("4"), "again".into()).unwrap();
        let j2 = t.into_journal(Delivered { logs: 1, displays: 1 }, Spent { wall_ms: 1, cpu_ms: 1 }).unwrap();
        assert_eq!(j2.pending.position, 3);
        assert_eq!(j2.suspensions, 2);
        assert_eq!(j2.delivered, Delivered { logs: 3, displays: 1 });
        assert_eq!(j2.spent, Spent { wall_ms: 6, cpu_ms: 8 });
        assert_eq!(j2.events.len(), 7, "the old five, c's answer, d");
        assert_eq!(j2.events[5], Event::Deliver { position: 2, reply: Reply::Ok(v("\"paid\"")) });
    }

    #[test]
    fn a_closed_replay_answers_its_cell_and_never_goes_live() {
        // A cell: a (0) answered, b (1) never awaited.
        let mut t = Tape::new(meta(), 1 << 20);
        t.on_call(1, "t", "a", &v("1"));
        assert!(t.on_reply(1, Ok(&v("\"A\""))));
        t.on_call(2, "t", "b", &v("2"));
        let cell = t.into_cell().unwrap();
        assert_eq!(cell.events.len(), 3);
        let mut t = Tape::replay_cell(meta(), cell.events.clone(), 1 << 20);
        assert!(t.replaying());
        assert_eq!(t.on_call(5, "t", "a", &v("1")), OnCall::Replayed);
        assert_eq!(t.next_due(), Some(Due::Reply { id: 5, reply: Reply::Ok(v("\"A\"")) }));
        assert_eq!(t.on_call(6, "t", "b", &v("2")), OnCall::Deferred);
        assert_eq!(t.next_due(), None, "b is neither answered nor started");
        assert!(!t.replaying());
        assert_eq!(t.diverged_at_end("returned"), None);
        let OnCall::Diverged(m) = t.on_call(7, "t", "a", &v("1")) else { panic!() };
        assert!(m.contains("at binding call 3: the journal records no call there"), "{m}");
        // Ended early: diverged.
        let mut t = Tape::replay_cell(meta(), cell.events, 1 << 20);
        t.on_call(5, "t", "a", &v("1"));
        assert!(t.diverged_at_end("returned").is_some());
        // A tape over its budget, or suspended, gives no cell.
        let mut t = Tape::new(meta(), 600);
        t.on_call(1, "t", "a", &v("1"));
        assert!(t.on_reply(1, Ok(&JsonValue::string(&"x".repeat(700)).unwrap())));
        assert_eq!(t.into_cell(), None);
    }

    #[test]
    fn another_call_name_args_or_an_early_end_diverge() {
        let names = meta().binding_names;
        let resume = || Tape::resume(suspended(), given(&names), Reply::Err("denied".into()), 1 << 20).unwrap();
        let mut t = resume();
        let OnCall::Diverged(m) = t.on_call(1, "t", "b", &v("2")) else { panic!() };
        assert!(
            m.starts_with("the program diverged from its journal at binding call 1: the journal records t.a"),
            "{m}"
        );
        assert!(m.contains("the program called t.b(2)"), "{m}");
        let mut t = resume();
        let OnCall::Diverged(m) = t.on_call(1, "t", "a", &v("[1]")) else { panic!() };
        assert!(m.contains("records t.a with arguments of digest"), "{m}");
        let mut t = resume();
        t.on_call(1, "t", "a", &v("1"));
        let m = t.diverged_at_end("returned").unwrap();
        assert!(m.contains("it returned after 1 binding call(s), where the journal records call 2 (t.b) next"), "{m}");
    }

    #[test]
    fn a_call_recorded_without_reply_starts_live_after_the_replay() {
        let mut t = Tape::new(meta(), 1 << 20);
        t.on_call(1, "t", "a", &v("1"));
        t.on_call(2, "t", "b", &v("2"));
        t.suspend(1, "t", "a", v("1"), "r".into()).unwrap();
        // b suspends too while the run waits for it: left unanswered.
        assert_eq!(t.suspend(2, "t", "b", v("2"), "r".into()), Err(SuspendError::AlreadySuspending));
        let j = t.into_journal(Delivered::default(), Spent::default()).unwrap();
        let names = meta().binding_names;
        let mut t = Tape::resume(j, given(&names), Reply::Ok(v("0")), 1 << 20).unwrap();
        assert_eq!(t.on_call(7, "t", "a", &v("1")), OnCall::Replayed);
        assert_eq!(t.on_call(8, "t", "b", &v("2")), OnCall::Deferred);
        assert_eq!(t.next_due(), Some(Due::Reply { id: 7, reply: Reply::Ok(v("0")) }));
        assert_eq!(t.next_due(), Some(Due::Start { id: 8 }));
        assert_eq!(t.next_due(), Some(Due::Live));
    }

    #[test]
    fn the_budget_stops_recording_and_suspension() {
        let mut t = Tape::new(meta(), 2000);
        t.on_call(1, "t", "a", &v("1"));
        let big = JsonValue::string(&"x".repeat(3000)).unwrap();
        assert!(t.on_reply(1, Ok(&big)));
        t.on_call(2, "t", "b", &v("2"));
        assert_eq!(t.suspend(2, "t", "b", v("2"), "r".into()), Err(SuspendError::OverBudget { max: 2000 }));
        assert!(t.events.is_empty(), "what was recorded is dropped");
    }

    #[test]
    fn other_bindings_and_programs_are_refused() {
        let j = suspended();
        let names: Vec<String> = vec!["t.a".into(), "t.z".into()];
        let e = Tape::resume(
            j.clone(),
            Given { program: None, bindings: Digest([2; 32]), binding_names: &names },
            Reply::Ok(v("1")),
            1 << 20,
        )
        .unwrap_err();
        assert!(e.to_string().contains("t.b missing, t.z not in the journal"), "{e}");
        let same = meta().binding_names;
        let e = Tape::resume(
            j,
            Given { program: Some("q"), bindings: Digest([1; 32]), binding_names: &same },
            Reply::Ok(v("1")),
            1 << 20,
        )
        .unwrap_err();
        assert_eq!(e, JournalError::OtherProgram);
    }
}
