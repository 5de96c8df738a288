//! The journal: what it holds ([`Journal`]) and its signed bytes.
//!
//! ```text
//! MAGIC (8 bytes) | format version (u32, big-endian) | payload | HMAC-SHA256 tag (32 bytes)
//! ```
//!
//! The payload is one canonical JSON object (the wire's encoding, so that
//! binding replies keep their exact text); the tag covers the header and
//! the payload. [`Journal::open`] checks, in this order and before anything
//! is parsed: the size against the caller's budget, the header, the version
//! and the tag; then it parses the payload and checks that its events make
//! sense (every reply follows its call, at most one reply per call, the
//! pending call issued and unanswered). Parsing is iterative
//! (`pycage_protocol`'s parser), so no journal can exhaust the stack.

use pycage_protocol::{write_json_string, JsonValue, ValueRef};

use crate::digest::Digest;
use crate::error::JournalError;
use crate::key::JournalKey;

/// The format this version writes and reads. A change of what the payload
/// means bumps it: an older journal is refused, clearly, instead of being
/// replayed by rules it was not made under. Version 2 added a session's
/// earlier cells (`session`): a version-1 reader would have replayed a
/// session's last cell alone.
pub const FORMAT_VERSION: u32 = 2;

const MAGIC: &[u8; 8] = b"pycagej\n";
const HEADER: usize = MAGIC.len() + 4;
const TAG: usize = 32;

/// A run's budgets, as they were when it started: a resume runs under these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budgets {
    pub wall_ms: u64,
    pub cpu_seconds: u64,
    pub memory_bytes: u64,
}

/// What makes a replay take the recorded path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seeds {
    /// The interpreter's string-hash seed (`PYTHONHASHSEED`): set and
    /// `str`-keyed hash order. `None` when the run's interpreter had a
    /// random one (a replay then gets a random one too).
    pub hash: Option<u32>,
    /// The seed of `random` (and of numpy's global generator when loaded).
    pub random: u64,
}

/// What a run had used when it suspended (all its suspensions together):
/// a resume's budgets count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Spent {
    pub wall_ms: u64,
    pub cpu_ms: u64,
}

/// How much output the caller has been given already: a resumed run
/// delivers only what comes after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Delivered {
    pub logs: u64,
    pub displays: u64,
}

/// A binding call's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Ok(JsonValue),
    /// The binding's refusal (the program's exception message).
    Err(String),
}

/// One thing that happened on a run's channel, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The program issued a call; its position is the number of calls
    /// issued before it.
    Issue { global: String, name: String, args: Digest },
    /// The reply to the call at `position` was written to the program.
    Deliver { position: u64, reply: Reply },
}

/// The call the run is suspended at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub position: u64,
    pub global: String,
    pub name: String,
    pub args: JsonValue,
    /// Why: `approval required`, or what the binding said.
    pub reason: String,
}

/// A session's cell that ran to its end before the suspended one: what
/// its replay needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub program: String,
    /// The seed of `random` the cell ran with.
    pub random: u64,
    /// Its calls and replies, positions counted within the cell.
    pub events: Vec<Event>,
}

impl Cell {
    /// Bytes the cell takes in a journal's payload (within a few).
    pub fn payload_len(&self) -> usize {
        let mut out = Vec::new();
        write_cell(&mut out, self);
        out.len() + 1
    }
}

/// Everything a suspended run's resume needs (see the crate docs).
///
/// A suspended session cell's journal is the cell's, as a run's would be
/// (`program`, `events`, `pending` and the budgets are the cell's), with
/// the session's earlier cells in `session`, in the order they ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    pub program: String,
    /// The bindings' digest, and their names (`global.name`) for messages.
    pub bindings: Digest,
    pub binding_names: Vec<String>,
    pub budgets: Budgets,
    pub seeds: Seeds,
    pub events: Vec<Event>,
    pub pending: Pending,
    pub delivered: Delivered,
    pub spent: Spent,
    /// How many times the run has suspended, this time included.
    pub suspensions: u64,
    /// A session cell's journal: the cells the session ran before it
    /// (`None`: a one-shot run's journal).
    pub session: Option<Vec<Cell>>,
}

impl Journal {
    /// The journal's bytes, signed with `key`.
    pub fn seal(&self, key: &JournalKey) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.program.len() + 256 + TAG);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
        self.write_payload(&mut out);
        let tag = key.sign(&[&out]);
        out.extend_from_slice(&tag);
        out
    }

    /// The journal in `bytes`, checked (see the module docs). `max_bytes`
    /// is the caller's journal budget.
    pub fn open(bytes: &[u8], key: &JournalKey, max_bytes: u64) -> Result<Journal, JournalError> {
        if bytes.len() as u64 > max_bytes {
            return Err(JournalError::TooLarge { bytes: bytes.len() as u64, max: max_bytes });
        }
        if bytes.len() < HEADER + TAG || bytes.get(..MAGIC.len()) != Some(MAGIC.as_slice()) {
            return Err(JournalError::NotAJournal);
        }
        let version = bytes
            .get(MAGIC.len()..HEADER)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes)
            .ok_or(JournalError::NotAJournal)?;
        if version != FORMAT_VERSION {
            return Err(JournalError::Version { found: version, reads: FORMAT_VERSION });
        }
        let (signed, tag) = bytes.split_at(bytes.len() - TAG);
        if !key.verify(&[signed], tag) {
            return Err(JournalError::Signature);
        }
        Journal::read_checked(signed.get(HEADER..).unwrap_or_default())
    }

    /// [`Journal::open`]'s checks of a payload, without its header and tag:
    /// for the fuzz target, which cannot sign what it makes up. Never a
    /// way to read an unsigned journal in pycage itself.
    #[cfg(feature = "fuzzing")]
    pub fn open_unsigned_payload(payload: &[u8]) -> Result<Journal, JournalError> {
        Journal::read_checked(payload)
    }

    fn read_checked(payload: &[u8]) -> Result<Journal, JournalError> {
        let value = JsonValue::parse(payload).map_err(|e| JournalError::Malformed(e.to_string()))?;
        let journal = read_payload(value.root()).ok_or_else(|| malformed("a field is missing or of the wrong type"))?;
        journal.check()?;
        Ok(journal)
    }

    /// The payload's size in bytes as [`Journal::seal`] writes it, without
    /// the header and tag.
    pub fn payload_len(&self) -> usize {
        let mut out = Vec::new();
        self.write_payload(&mut out);
        out.len()
    }

    fn write_payload(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"program\":");
        write_json_string(out, &self.program);
        out.extend_from_slice(b",\"bindings\":");
        write_json_string(out, &self.bindings.to_hex());
        out.extend_from_slice(b",\"binding_names\":[");
        for (i, name) in self.binding_names.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json_string(out, name);
        }
        let b = &self.budgets;
        push_fmt(
            out,
            format_args!(
                "],\"budgets\":{{\"wall_ms\":{},\"cpu_seconds\":{},\"memory_bytes\":{}}}",
                b.wall_ms, b.cpu_seconds, b.memory_bytes
            ),
        );
        match self.seeds.hash {
            Some(h) => push_fmt(out, format_args!(",\"seeds\":{{\"hash\":{h},")),
            None => out.extend_from_slice(b",\"seeds\":{\"hash\":null,"),
        }
        push_fmt(out, format_args!("\"random\":{}}},\"events\":[", self.seeds.random));
        for (i, event) in self.events.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_event(out, event);
        }
        let p = &self.pending;
        push_fmt(out, format_args!("],\"pending\":{{\"position\":{},\"reason\":", p.position));
        write_json_string(out, &p.reason);
        out.extend_from_slice(b",\"args\":");
        p.args.write_canonical(out);
        let (d, s) = (&self.delivered, &self.spent);
        push_fmt(
            out,
            format_args!(
                "}},\"delivered\":{{\"logs\":{},\"displays\":{}}},\"spent\":{{\"wall_ms\":{},\"cpu_ms\":{}}},\
                 \"suspensions\":{}",
                d.logs, d.displays, s.wall_ms, s.cpu_ms, self.suspensions
            ),
        );
        match &self.session {
            None => out.extend_from_slice(b",\"session\":null}"),
            Some(cells) => {
                out.extend_from_slice(b",\"session\":[");
                for (i, cell) in cells.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_cell(out, cell);
                }
                out.extend_from_slice(b"]}");
            }
        }
    }

    /// The invariants [`crate::tape::Tape`] relies on when it replays.
    fn check(&self) -> Result<(), JournalError> {
        for cell in self.session.iter().flatten() {
            check_events(&cell.events)?;
        }
        let issued = check_events(&self.events)?;
        let p = &self.pending;
        match usize::try_from(p.position).ok().and_then(|i| issued.get(i)) {
            Some((g, n, false)) if *g == p.global && *n == p.name => Ok(()),
            _ => Err(malformed("the pending call is not an unanswered call of the journal")),
        }
    }
}

/// The calls of `events` (name, answered), checking that every reply
/// follows its call and answers it once.
fn check_events(events: &[Event]) -> Result<Vec<(&str, &str, bool)>, JournalError> {
    let mut issued: Vec<(&str, &str, bool)> = Vec::new();
    for event in events {
        match event {
            Event::Issue { global, name, .. } => issued.push((global, name, false)),
            Event::Deliver { position, .. } => {
                let slot = usize::try_from(*position).ok().and_then(|p| issued.get_mut(p));
                match slot {
                    Some((_, _, answered @ false)) => *answered = true,
                    Some(_) => return Err(malformed(&format!("call {position} is answered twice"))),
                    None => return Err(malformed(&format!("a reply to call {position} before it was made"))),
                }
            }
        }
    }
    Ok(issued)
}

fn write_cell(out: &mut Vec<u8>, cell: &Cell) {
    out.extend_from_slice(b"{\"program\":");
    write_json_string(out, &cell.program);
    push_fmt(out, format_args!(",\"random\":{},\"events\":[", cell.random));
    for (i, event) in cell.events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_event(out, event);
    }
    out.extend_from_slice(b"]}");
}

fn read_events(array: ValueRef<'_>) -> Option<Vec<Event>> {
    let mut events = Vec::new();
    for item in array.as_array()? {
        let mut parts = item.as_array()?;
        let tag = parts.next()?.as_str()?;
        let event = match tag {
            "call" => Event::Issue {
                global: str_of(parts.next())?,
                name: str_of(parts.next())?,
                args: Digest::from_hex(parts.next()?.as_str()?)?,
            },
            "ok" => Event::Deliver { position: u64_of(parts.next())?, reply: Reply::Ok(parts.next()?.to_owned()) },
            "error" => Event::Deliver { position: u64_of(parts.next())?, reply: Reply::Err(str_of(parts.next())?) },
            _ => return None,
        };
        if parts.next().is_some() {
            return None;
        }
        events.push(event);
    }
    Some(events)
}

fn read_session(value: ValueRef<'_>) -> Option<Option<Vec<Cell>>> {
    if value.is_null() {
        return Some(None);
    }
    let mut cells = Vec::new();
    for cell in value.as_array()? {
        cells.push(Cell {
            program: str_of(cell.get("program"))?,
            random: u64_of(cell.get("random"))?,
            events: read_events(cell.get("events")?)?,
        });
    }
    Some(Some(cells))
}

fn malformed(what: &str) -> JournalError {
    JournalError::Malformed(what.to_owned())
}

fn push_fmt(out: &mut Vec<u8>, args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    // Writing to a Vec cannot fail.
    let _ = out.write_fmt(args);
}

fn write_event(out: &mut Vec<u8>, event: &Event) {
    match event {
        Event::Issue { global, name, args } => {
            out.extend_from_slice(b"[\"call\",");
            write_json_string(out, global);
            out.push(b',');
            write_json_string(out, name);
            out.push(b',');
            write_json_string(out, &args.to_hex());
        }
        Event::Deliver { position, reply: Reply::Ok(value) } => {
            push_fmt(out, format_args!("[\"ok\",{position},"));
            value.write_canonical(out);
        }
        Event::Deliver { position, reply: Reply::Err(message) } => {
            push_fmt(out, format_args!("[\"error\",{position},"));
            write_json_string(out, message);
        }
    }
    out.push(b']');
}

fn u64_of(v: Option<ValueRef<'_>>) -> Option<u64> {
    v?.as_number()?.as_u64()
}

fn str_of(v: Option<ValueRef<'_>>) -> Option<String> {
    v?.as_str().map(str::to_owned)
}

fn read_payload(root: ValueRef<'_>) -> Option<Journal> {
    let budgets = root.get("budgets")?;
    let seeds = root.get("seeds")?;
    let hash = match seeds.get("hash")? {
        h if h.is_null() => None,
        h => Some(u32::try_from(h.as_number()?.as_u64()?).ok()?),
    };
    let events = read_events(root.get("events")?)?;
    let pending = root.get("pending")?;
    let position = u64_of(pending.get("position"))?;
    let (global, name) = events
        .iter()
        .filter_map(|e| match e {
            Event::Issue { global, name, .. } => Some((global.clone(), name.clone())),
            Event::Deliver { .. } => None,
        })
        .nth(usize::try_from(position).ok()?)?;
    let delivered = root.get("delivered")?;
    let spent = root.get("spent")?;
    let mut binding_names = Vec::new();
    for name in root.get("binding_names")?.as_array()? {
        binding_names.push(name.as_str()?.to_owned());
    }
    Some(Journal {
        program: str_of(root.get("program"))?,
        bindings: Digest::from_hex(root.get("bindings")?.as_str()?)?,
        binding_names,
        budgets: Budgets {
            wall_ms: u64_of(budgets.get("wall_ms"))?,
            cpu_seconds: u64_of(budgets.get("cpu_seconds"))?,
            memory_bytes: u64_of(budgets.get("memory_bytes"))?,
        },
        seeds: Seeds { hash, random: u64_of(seeds.get("random"))? },
        events,
        pending: Pending {
            position,
            global,
            name,
            args: pending.get("args")?.to_owned(),
            reason: str_of(pending.get("reason"))?,
        },
        delivered: Delivered { logs: u64_of(delivered.get("logs"))?, displays: u64_of(delivered.get("displays"))? },
        spent: Spent { wall_ms: u64_of(spent.get("wall_ms"))?, cpu_ms: u64_of(spent.get("cpu_ms"))? },
        suspensions: u64_of(root.get("suspensions"))?,
        session: read_session(root.get("session")?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::args_digest;

    fn key() -> JournalKey {
        JournalKey::new("test key of sixteen+ bytes").unwrap()
    }

    pub(crate) fn sample() -> Journal {
        let args = JsonValue::parse(br#"{"amount":12.50,"to":"ACME"}"#).unwrap();
        Journal {
            program: "x = await tools.lookup()\nreturn await tools.pay(x)\n\"\u{1}\"".into(),
            bindings: Digest([7; 32]),
            binding_names: vec!["tools.lookup".into(), "tools.pay".into()],
            budgets: Budgets { wall_ms: 60_000, cpu_seconds: 30, memory_bytes: 1 << 29 },
            seeds: Seeds { hash: Some(4_000_000_000), random: u64::MAX },
            events: vec![
                Event::Issue { global: "tools".into(), name: "lookup".into(), args: args_digest(&JsonValue::null()) },
                Event::Issue { global: "tools".into(), name: "nope".into(), args: args_digest(&JsonValue::null()) },
                Event::Deliver { position: 1, reply: Reply::Err("no \"such\" binding".into()) },
                Event::Deliver { position: 0, reply: Reply::Ok(JsonValue::parse(b"[1e400,-0.0,2]").unwrap()) },
                Event::Issue { global: "tools".into(), name: "pay".into(), args: args_digest(&args) },
            ],
            pending: Pending {
                position: 2,
                global: "tools".into(),
                name: "pay".into(),
                args,
                reason: "approval required".into(),
            },
            delivered: Delivered { logs: 3, displays: 1 },
            spent: Spent { wall_ms: 1234, cpu_ms: 800 },
            suspensions: 1,
            session: None,
        }
    }

    #[test]
    fn seal_then_open_gives_the_same_journal_with_exact_numbers() {
        let j = sample();
        let bytes = j.seal(&key());
        assert_eq!(bytes.len(), HEADER + j.payload_len() + TAG);
        let back = Journal::open(&bytes, &key(), u64::MAX).unwrap();
        assert_eq!(back, j);
        match &back.events[3] {
            Event::Deliver { reply: Reply::Ok(v), .. } => assert_eq!(v.to_string(), "[1e400,-0.0,2]"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_session_journal_keeps_its_earlier_cells_in_order() {
        let mut j = sample();
        let first = Cell {
            program: "x = await tools.lookup()".into(),
            random: 9,
            events: vec![
                Event::Issue { global: "tools".into(), name: "lookup".into(), args: args_digest(&JsonValue::null()) },
                Event::Deliver { position: 0, reply: Reply::Ok(JsonValue::parse(b"40").unwrap()) },
            ],
        };
        let second = Cell { program: "y = 2".into(), random: 0, events: Vec::new() };
        j.session = Some(vec![first.clone(), second]);
        let bytes = j.seal(&key());
        assert_eq!(bytes.len(), HEADER + j.payload_len() + TAG);
        assert_eq!(Journal::open(&bytes, &key(), u64::MAX).unwrap(), j);
        assert!(first.payload_len() > first.program.len() + 64);
        // A cell's events are checked as a run's are.
        let mut bad = first;
        bad.events.swap(0, 1);
        j.session = Some(vec![bad]);
        let e = Journal::open(&j.seal(&key()), &key(), u64::MAX).unwrap_err();
        assert_eq!(e, JournalError::Malformed("a reply to call 0 before it was made".into()));
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let bytes = sample().seal(&key());
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            let e = Journal::open(&bad, &key(), u64::MAX).unwrap_err();
            let expected = match i {
                0..8 => JournalError::NotAJournal,
                8..12 => JournalError::Version {
                    found: u32::from_be_bytes(bad[8..12].try_into().unwrap()),
                    reads: FORMAT_VERSION,
                },
                _ => JournalError::Signature,
            };
            assert_eq!(e, expected, "byte {i}");
        }
    }

    #[test]
    fn other_key_old_version_truncation_and_size_are_refused() {
        let bytes = sample().seal(&key());
        let other = JournalKey::new("another key, also long").unwrap();
        assert_eq!(Journal::open(&bytes, &other, u64::MAX), Err(JournalError::Signature));
        let mut old = bytes.clone();
        old[8..12].copy_from_slice(&0u32.to_be_bytes());
        let e = Journal::open(&old, &key(), u64::MAX).unwrap_err();
        assert_eq!(e, JournalError::Version { found: 0, reads: 2 });
        assert!(e.to_string().contains("format version 0; this pycage reads version 2"), "{e}");
        assert_eq!(Journal::open(&bytes[..bytes.len() - 1], &key(), u64::MAX), Err(JournalError::Signature));
        assert_eq!(Journal::open(&bytes[..20], &key(), u64::MAX), Err(JournalError::NotAJournal));
        assert_eq!(Journal::open(b"", &key(), u64::MAX), Err(JournalError::NotAJournal));
        let max = bytes.len() as u64 - 1;
        assert_eq!(Journal::open(&bytes, &key(), max), Err(JournalError::TooLarge { bytes: bytes.len() as u64, max }));
    }

    #[test]
    fn signed_nonsense_is_malformed_not_a_panic() {
        let k = key();
        let seal = |payload: &[u8]| {
            let mut out = MAGIC.to_vec();
            out.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
            out.extend_from_slice(payload);
            let tag = k.sign(&[&out]);
            out.extend_from_slice(&tag);
            out
        };
        for payload in [&b"{}"[..], b"[", b"null", &"[".repeat(100_000).into_bytes()] {
            assert!(matches!(Journal::open(&seal(payload), &k, u64::MAX), Err(JournalError::Malformed(_))));
        }
        // Well-formed JSON whose events do not add up.
        let mut j = sample();
        j.events.swap(1, 2);
        let e = Journal::open(&j.seal(&k), &k, u64::MAX).unwrap_err();
        assert_eq!(e, JournalError::Malformed("a reply to call 1 before it was made".into()));
        let mut j = sample();
        j.pending.position = 0;
        j.pending.name = "lookup".into();
        let e = Journal::open(&j.seal(&k), &k, u64::MAX).unwrap_err();
        assert!(matches!(e, JournalError::Malformed(m) if m.contains("pending")));
    }
}
