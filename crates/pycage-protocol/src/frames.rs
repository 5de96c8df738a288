//! The frame vocabulary of the fd-3 wire protocol (`docs/protocol.md`), with
//! encoders and the field table.
//!
//! Host→child frames ([`BootFrame`], [`RunFrame`], [`ReplyFrame`]) are built by
//! the host and encoded here. Child→host frames ([`ChildFrame`]) only come out
//! of [`crate::validate_child_frame`], rebuilt field by field, and can be
//! re-encoded (for transcripts and `pycage frames validate`).
//!
//! [`crate::FRAME_FIELDS`] declares every frame's fields once. Unit tests
//! check these encoders against it; the child's side is generated from it
//! (`crate::python_wire_module`).

use crate::encode::write_json_string;
use crate::json::JsonValue;
#[cfg(test)]
use crate::table::frame_fields;
use crate::table::{DISPLAY_TRUNCATION_MARKER, LOG_TRUNCATION_MARKER};

/// The child's protocol file descriptor.
pub const PROTOCOL_FD: i32 = 3;

/// The log line both ledgers emit once when their byte budget is exhausted.
/// The child's `log_truncation_marker` is generated from the same pieces
/// ([`LOG_TRUNCATION_MARKER`]).
pub fn log_truncation_marker(max_bytes: u64) -> String {
    let [head, tail] = LOG_TRUNCATION_MARKER;
    format!("{head}{max_bytes}{tail}")
}

/// The `text/plain` of the display that marks where a `max_bytes` display
/// ledger ran out (the child's `display_truncation_marker` is generated from
/// the same pieces, [`DISPLAY_TRUNCATION_MARKER`]).
pub fn display_truncation_marker(max_bytes: u64) -> String {
    let [head, tail] = DISPLAY_TRUNCATION_MARKER;
    format!("{head}{max_bytes}{tail}")
}

/// Largest `call.id` an honest child issues (2^53 - 1, the largest integer a
/// double holds exactly, so an id survives any JSON implementation).
pub const MAX_CALL_ID: u64 = (1 << 53) - 1;

/// Small writer for compact JSON objects with fields in a fixed order
/// (the fd-3 frames here, the zygote messages in [`crate::zygote`]).
pub(crate) struct Obj<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Obj<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Obj { out, first: true }
    }
    pub(crate) fn key(&mut self, k: &str) -> &mut Vec<u8> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        write_json_string(self.out, k);
        self.out.push(b':');
        self.out
    }
    pub(crate) fn str(&mut self, k: &str, v: &str) {
        write_json_string(self.key(k), v);
    }
    pub(crate) fn u64(&mut self, k: &str, v: u64) {
        let s = v.to_string();
        self.key(k).extend_from_slice(s.as_bytes());
    }
    pub(crate) fn str_list(&mut self, k: &str, v: &[String]) {
        let out = self.key(k);
        out.push(b'[');
        for (i, item) in v.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json_string(out, item);
        }
        out.push(b']');
    }
    pub(crate) fn bool(&mut self, k: &str, v: bool) {
        self.key(k).extend_from_slice(if v { b"true" } else { b"false" });
    }
    pub(crate) fn value(&mut self, k: &str, v: &JsonValue) {
        v.write_canonical(self.key(k));
    }
    pub(crate) fn end(self) -> &'a mut Vec<u8> {
        self.out.push(b'}');
        self.out
    }
}

/// `errorClass` of a namespace entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorClassEntry {
    pub name: String,
    pub member_name_property: String,
}

/// One namespace in `boot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceEntry {
    pub global: String,
    pub names: Vec<String>,
    pub error_class: Option<ErrorClassEntry>,
    /// `doc`: what `help(<global>)` shows; on the wire only when set.
    pub doc: Option<String>,
    /// `docs`: member name → what `help(<global>.<member>)` shows, as one
    /// JSON object; on the wire only when non-empty. Names not in `names`
    /// are ignored by the child.
    pub docs: Vec<(String, String)>,
}

/// `boot`: the first frame; limits and namespaces. A zero limit means "not set".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootFrame {
    pub cpu_seconds: u64,
    pub address_space_bytes: u64,
    pub max_log_bytes: u64,
    pub max_value_bytes: u64,
    pub max_display_bytes: u64,
    pub namespaces: Vec<NamespaceEntry>,
    /// The child is a session: after each `done` it waits for another
    /// `run` in the same module globals (`session: true` on the wire; absent
    /// for a one-shot child).
    pub session: bool,
    /// The request collects an output directory: the child makes `out/` in
    /// its working directory before the program starts (`output: true` on
    /// the wire; absent otherwise, and then there is no `out/`).
    pub output: bool,
}

impl BootFrame {
    /// Appends the frame as one line (with its `\n`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut o = Obj::new(out);
        o.str("type", "boot");
        o.u64("cpuSeconds", self.cpu_seconds);
        o.u64("addressSpaceBytes", self.address_space_bytes);
        o.u64("maxLogBytes", self.max_log_bytes);
        o.u64("maxValueBytes", self.max_value_bytes);
        o.u64("maxDisplayBytes", self.max_display_bytes);
        let nsout = o.key("namespaces");
        nsout.push(b'[');
        for (i, ns) in self.namespaces.iter().enumerate() {
            if i > 0 {
                nsout.push(b',');
            }
            let mut n = Obj::new(nsout);
            n.str("global", &ns.global);
            let names = n.key("names");
            names.push(b'[');
            for (j, name) in ns.names.iter().enumerate() {
                if j > 0 {
                    names.push(b',');
                }
                write_json_string(names, name);
            }
            names.push(b']');
            if let Some(ec) = &ns.error_class {
                let ecout = n.key("errorClass");
                let mut e = Obj::new(ecout);
                e.str("name", &ec.name);
                e.str("memberNameProperty", &ec.member_name_property);
                e.end();
            }
            if let Some(doc) = &ns.doc {
                n.str("doc", doc);
            }
            if !ns.docs.is_empty() {
                let mut d = Obj::new(n.key("docs"));
                for (name, text) in &ns.docs {
                    d.str(name, text);
                }
                d.end();
            }
            n.end();
        }
        nsout.push(b']');
        if self.session {
            o.bool("session", true);
        }
        if self.output {
            o.bool("output", true);
        }
        o.end().push(b'\n');
    }
}

/// The budgets of one run of a session, replacing `boot`'s for that run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunBudgets {
    /// CPU seconds this run may use, counted from its start.
    pub cpu_seconds: u64,
    pub max_log_bytes: u64,
    pub max_value_bytes: u64,
    pub max_display_bytes: u64,
}

/// `run`: the program. It may follow `boot` at once (the child reads it
/// after applying `boot`), and, in a session, each `done`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFrame {
    pub program: String,
    /// A session run's own budgets; `None` uses `boot`'s.
    pub budgets: Option<RunBudgets>,
    /// Directories the host installed the run's packages into (its
    /// declared dependencies), as the child sees them: put on `sys.path`
    /// ahead of the interpreter's site-packages. Sent only when non-empty.
    pub sys_path: Vec<String>,
    /// The seed of `random` (and numpy's global generator, when loaded)
    /// for this run: a durable run's, so that its replay draws the same
    /// numbers. `None`: the child's own (fresh) seeds.
    pub seed: Option<u64>,
}

impl RunFrame {
    /// Appends the frame as one line.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut o = Obj::new(out);
        o.str("type", "run");
        o.str("program", &self.program);
        if let Some(b) = &self.budgets {
            o.u64("cpuSeconds", b.cpu_seconds);
            o.u64("maxLogBytes", b.max_log_bytes);
            o.u64("maxValueBytes", b.max_value_bytes);
            o.u64("maxDisplayBytes", b.max_display_bytes);
        }
        if !self.sys_path.is_empty() {
            o.str_list("sysPath", &self.sys_path);
        }
        if let Some(seed) = self.seed {
            o.u64("seed", seed);
        }
        o.end().push(b'\n');
    }
}

/// `reply`: the outcome of one `call`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyFrame {
    Ok { id: u64, value: JsonValue },
    Err { id: u64, message: String },
}

impl ReplyFrame {
    /// Appends the frame as one line.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut o = Obj::new(out);
        o.str("type", "reply");
        match self {
            ReplyFrame::Ok { id, value } => {
                o.u64("id", *id);
                o.bool("ok", true);
                o.value("value", value);
            }
            ReplyFrame::Err { id, message } => {
                o.u64("id", *id);
                o.bool("ok", false);
                o.str("message", message);
            }
        }
        o.end().push(b'\n');
    }
}

/// The three failure kinds a child may report in `done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChildErrorKind {
    Exception,
    InvalidOutput,
    OutputLimit,
}

impl ChildErrorKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildErrorKind::Exception => "exception",
            ChildErrorKind::InvalidOutput => "invalid-output",
            ChildErrorKind::OutputLimit => "output-limit",
        }
    }

    /// Parses the wire spelling.
    pub fn from_wire(s: &str) -> Option<Self> {
        match s {
            "exception" => Some(ChildErrorKind::Exception),
            "invalid-output" => Some(ChildErrorKind::InvalidOutput),
            "output-limit" => Some(ChildErrorKind::OutputLimit),
            _ => None,
        }
    }
}

/// `done.error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildError {
    pub kind: ChildErrorKind,
    pub message: String,
}

/// A validated, rebuilt child→host frame. Match it exhaustively: a new kind
/// must fail to compile until every consumer handles it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildFrame {
    BootAck,
    Call {
        id: u64,
        global: String,
        name: String,
        args: JsonValue,
    },
    Log {
        text: String,
        truncated: bool,
    },
    /// Rich output: MIME type → text, in the order sent (keys unique);
    /// `metadata` is an object when present. `truncated` marks the
    /// child's display-ledger marker (trusted for stopping only).
    Display {
        data: Vec<(String, String)>,
        metadata: Option<JsonValue>,
        truncated: bool,
    },
    /// A forged `done` may carry both; consumers treat `error` first.
    Done {
        value: Option<JsonValue>,
        error: Option<ChildError>,
    },
}

impl ChildFrame {
    /// The frame's `type` on the wire.
    pub fn type_name(&self) -> &'static str {
        match self {
            ChildFrame::BootAck => "boot-ack",
            ChildFrame::Call { .. } => "call",
            ChildFrame::Log { .. } => "log",
            ChildFrame::Display { .. } => "display",
            ChildFrame::Done { .. } => "done",
        }
    }

    /// Appends the rebuilt frame as compact JSON (no newline). Optional fields
    /// appear only when set; `truncated` only when true.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut o = Obj::new(out);
        o.str("type", self.type_name());
        match self {
            ChildFrame::BootAck => {}
            ChildFrame::Call { id, global, name, args } => {
                o.u64("id", *id);
                o.str("global", global);
                o.str("name", name);
                o.value("args", args);
            }
            ChildFrame::Log { text, truncated } => {
                o.str("text", text);
                if *truncated {
                    o.bool("truncated", true);
                }
            }
            ChildFrame::Display { data, metadata, truncated } => {
                let mut d = Obj::new(o.key("data"));
                for (mime, text) in data {
                    d.str(mime, text);
                }
                d.end();
                if let Some(m) = metadata {
                    o.value("metadata", m);
                }
                if *truncated {
                    o.bool("truncated", true);
                }
            }
            ChildFrame::Done { value, error } => {
                if let Some(v) = value {
                    o.value("value", v);
                }
                if let Some(e) = error {
                    let out = o.key("error");
                    let mut eo = Obj::new(out);
                    eo.str("kind", e.kind.as_str());
                    eo.str("message", &e.message);
                    eo.end();
                }
            }
        }
        o.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn keys(line: &[u8]) -> BTreeSet<String> {
        let v = JsonValue::parse(line).unwrap();
        v.root().as_object().unwrap().map(|(k, _)| k.to_owned()).collect()
    }

    fn expect(frame: &str, with_optional: bool) -> BTreeSet<String> {
        let f = frame_fields(frame).unwrap();
        let mut s: BTreeSet<String> = f.required().map(|s| s.to_string()).collect();
        if with_optional {
            s.extend(f.optional().map(|s| s.to_string()));
        }
        s
    }

    #[test]
    fn host_encoders_agree_with_table() {
        let ns = |ec: bool| NamespaceEntry {
            global: "tools".into(),
            names: vec!["a".into(), "my-tool".into(), "".into()],
            error_class: ec.then(|| ErrorClassEntry { name: "ToolError".into(), member_name_property: "tool".into() }),
            doc: ec.then(|| "the tools".into()),
            docs: if ec { vec![("a".into(), "A.\n".into()), ("my-tool".into(), "\"x\"".into())] } else { vec![] },
        };
        let boot = BootFrame {
            cpu_seconds: 30,
            address_space_bytes: 1 << 29,
            max_log_bytes: 65536,
            max_value_bytes: 1 << 20,
            max_display_bytes: 1 << 23,
            namespaces: vec![ns(false), ns(true)],
            session: true,
            output: true,
        };
        let mut out = Vec::new();
        boot.encode(&mut out);
        assert_eq!(out.last(), Some(&b'\n'));
        assert_eq!(keys(&out), expect("boot", true));
        let v = JsonValue::parse(&out).unwrap();
        let nss: Vec<_> = v.root().get("namespaces").unwrap().as_array().unwrap().collect();
        let nk = |i: usize| -> BTreeSet<String> { nss[i].as_object().unwrap().map(|(k, _)| k.to_owned()).collect() };
        assert_eq!(nk(0), expect("namespace", false));
        assert_eq!(nk(1), expect("namespace", true));
        let ec: BTreeSet<String> =
            nss[1].get("errorClass").unwrap().as_object().unwrap().map(|(k, _)| k.to_owned()).collect();
        assert_eq!(ec, expect("errorClass", true));
        let docs: Vec<(String, String)> = nss[1]
            .get("docs")
            .unwrap()
            .as_object()
            .unwrap()
            .map(|(k, v)| (k.to_owned(), v.as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(docs, vec![("a".to_string(), "A.\n".to_string()), ("my-tool".to_string(), "\"x\"".to_string())]);

        let mut out = Vec::new();
        RunFrame { program: "return 1".into(), budgets: None, sys_path: Vec::new(), seed: None }.encode(&mut out);
        assert_eq!(keys(&out), expect("run", false));
        let mut out = Vec::new();
        let budgets = RunBudgets { cpu_seconds: 1, max_log_bytes: 2, max_value_bytes: 3, max_display_bytes: 4 };
        RunFrame {
            program: "return 1".into(),
            budgets: Some(budgets),
            sys_path: vec!["/opt/pycage-packages/x".into()],
            seed: Some(u64::MAX),
        }
        .encode(&mut out);
        assert_eq!(keys(&out), expect("run", true));
        let mut out = Vec::new();
        ReplyFrame::Ok { id: 7, value: JsonValue::null() }.encode(&mut out);
        assert_eq!(keys(&out), expect("reply-ok", true));
        assert_eq!(out, b"{\"type\":\"reply\",\"id\":7,\"ok\":true,\"value\":null}\n");
        let mut out = Vec::new();
        ReplyFrame::Err { id: 7, message: "no".into() }.encode(&mut out);
        assert_eq!(keys(&out), expect("reply-error", true));
    }

    #[test]
    fn child_encoders_agree_with_table() {
        let enc = |f: &ChildFrame| {
            let mut out = Vec::new();
            f.encode(&mut out);
            out
        };
        assert_eq!(keys(&enc(&ChildFrame::BootAck)), expect("boot-ack", true));
        let call = ChildFrame::Call { id: 1, global: "g".into(), name: "n".into(), args: JsonValue::null() };
        assert_eq!(keys(&enc(&call)), expect("call", true));
        let log = |t| ChildFrame::Log { text: "x".into(), truncated: t };
        assert_eq!(keys(&enc(&log(false))), expect("log", false));
        assert_eq!(keys(&enc(&log(true))), expect("log", true));
        let display = |full: bool| ChildFrame::Display {
            data: vec![("text/plain".into(), "x".into()), ("image/png".into(), "iVBO".into())],
            metadata: full.then(|| JsonValue::parse(b"{\"image/png\":{\"width\":1}}").unwrap()),
            truncated: full,
        };
        assert_eq!(keys(&enc(&display(false))), expect("display", false));
        assert_eq!(keys(&enc(&display(true))), expect("display", true));
        assert_eq!(
            enc(&display(true)),
            br#"{"type":"display","data":{"text/plain":"x","image/png":"iVBO"},"metadata":{"image/png":{"width":1}},"truncated":true}"#
        );
        let done = ChildFrame::Done {
            value: Some(JsonValue::null()),
            error: Some(ChildError { kind: ChildErrorKind::Exception, message: "m".into() }),
        };
        let out = enc(&done);
        assert_eq!(keys(&out), expect("done", true));
        let v = JsonValue::parse(&out).unwrap();
        let ek: BTreeSet<String> =
            v.root().get("error").unwrap().as_object().unwrap().map(|(k, _)| k.to_owned()).collect();
        assert_eq!(ek, expect("done-error", true));
        assert_eq!(keys(&enc(&ChildFrame::Done { value: None, error: None })), expect("done", false));
    }

    #[test]
    fn marker_text() {
        assert_eq!(log_truncation_marker(65536), "[pycage] log capture truncated at 65536 bytes");
        assert_eq!(display_truncation_marker(10), "[pycage] display output truncated at 10 bytes");
    }

    #[test]
    fn kinds_round_trip() {
        for k in [ChildErrorKind::Exception, ChildErrorKind::InvalidOutput, ChildErrorKind::OutputLimit] {
            assert_eq!(ChildErrorKind::from_wire(k.as_str()), Some(k));
        }
        assert_eq!(ChildErrorKind::from_wire("timeout"), None);
        let kinds = [ChildErrorKind::Exception, ChildErrorKind::InvalidOutput, ChildErrorKind::OutputLimit];
        assert_eq!(kinds.map(ChildErrorKind::as_str), crate::DONE_ERROR_KINDS);
    }
}
