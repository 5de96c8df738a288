//! The fd-3 wire's one table: every frame shape, who sends it, and each
//! field's name, type and presence (`docs/protocol.md`).
//!
//! [`FRAME_FIELDS`] is the single hand-written declaration of the frames.
//! The host's encoders and validator are unit-tested against it, and the
//! child's side is generated from it: [`crate::python_wire_module`] writes
//! `python/pycage/_wire.py` (per-frame encoders for what the child sends,
//! key-exact checkers for what the host sends), which the child uses for
//! every frame. `tests/mirror.rs` fails when the checked-in module differs
//! from the generator's output, and runs the module against the host's
//! encoders and validator.

/// Who puts a frame on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    Host,
    Child,
}

/// What a field holds on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// The frame's `type`: exactly this string. Only top-level frames have one.
    Tag(&'static str),
    /// A string.
    Str,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A non-negative integer.
    Uint,
    /// `true` or `false`.
    Bool,
    /// Exactly this boolean: a variant's discriminant (`reply.ok`), or a flag
    /// that is present only when true (`log.truncated`).
    Const(bool),
    /// Any JSON value.
    Json,
    /// A list of strings.
    StrList,
    /// An object whose values are strings.
    StrMap,
    /// An object with any members (any JSON values).
    Object,
    /// An object of the named shape.
    Shape(&'static str),
    /// A list of objects of the named shape.
    ShapeList(&'static str),
}

/// One wire field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub ty: FieldType,
    pub required: bool,
}

/// One frame shape: a top-level frame (it has a [`FieldType::Tag`]) or an
/// object nested in one. Shapes that share a tag are variants of one frame
/// (`reply-ok`, `reply-error`), told apart by a [`FieldType::Const`] field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameFields {
    /// The shape's name (the mirror's key; `_wire.py` derives its function
    /// names from it).
    pub frame: &'static str,
    pub sender: Sender,
    /// One line for the generated module's docs.
    pub doc: &'static str,
    /// In wire order: encoders write them in this order.
    pub fields: &'static [Field],
}

impl FrameFields {
    /// The `type` this shape carries, when it is a top-level frame.
    pub fn tag(&self) -> Option<&'static str> {
        self.fields.iter().find_map(|f| match f.ty {
            FieldType::Tag(t) => Some(t),
            _ => None,
        })
    }

    /// Names of the required fields, in wire order.
    pub fn required(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.fields.iter().filter(|f| f.required).map(|f| f.name)
    }

    /// Names of the optional fields, in wire order.
    pub fn optional(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.fields.iter().filter(|f| !f.required).map(|f| f.name)
    }
}

const fn req(name: &'static str, ty: FieldType) -> Field {
    Field { name, ty, required: true }
}

const fn opt(name: &'static str, ty: FieldType) -> Field {
    Field { name, ty, required: false }
}

use FieldType::{Bool, Const, Json, Object, OneOf, Shape, ShapeList, Str, StrList, StrMap, Tag, Uint};

/// The log line both ledgers emit once when their byte budget is exhausted:
/// these two pieces around the budget in bytes.
pub const LOG_TRUNCATION_MARKER: [&str; 2] = ["[pycage] log capture truncated at ", " bytes"];

/// The `text/plain` of the display both display ledgers emit once when
/// their byte budget is exhausted: these two pieces around the budget in
/// bytes.
pub const DISPLAY_TRUNCATION_MARKER: [&str; 2] = ["[pycage] display output truncated at ", " bytes"];

/// The kinds a child may report in `done.error` (`ChildErrorKind`'s wire
/// spellings).
pub const DONE_ERROR_KINDS: &[&str] = &["exception", "invalid-output", "output-limit"];

/// Every frame shape on the wire, host→child first.
pub const FRAME_FIELDS: &[FrameFields] = &[
    FrameFields {
        frame: "boot",
        sender: Sender::Host,
        doc: "First host frame: limits (0 = unset) and namespaces; session: keep serving runs.",
        fields: &[
            req("type", Tag("boot")),
            req("cpuSeconds", Uint),
            req("addressSpaceBytes", Uint),
            req("maxLogBytes", Uint),
            req("maxValueBytes", Uint),
            req("maxDisplayBytes", Uint),
            req("namespaces", ShapeList("namespace")),
            opt("session", Bool),
            opt("output", Bool),
        ],
    },
    FrameFields {
        frame: "namespace",
        sender: Sender::Host,
        doc: "One entry of boot.namespaces: a global, its member names, their docs.",
        fields: &[
            req("global", Str),
            req("names", StrList),
            opt("errorClass", Shape("errorClass")),
            opt("doc", Str),
            opt("docs", StrMap),
        ],
    },
    FrameFields {
        frame: "errorClass",
        sender: Sender::Host,
        doc: "namespace.errorClass: the class failed calls raise, and its member-name attribute.",
        fields: &[req("name", Str), req("memberNameProperty", Str)],
    },
    FrameFields {
        frame: "run",
        sender: Sender::Host,
        doc: "The program; in a session, the run's own budgets; sysPath: the run's package directories; \
              seed: random's seed (a durable run's).",
        fields: &[
            req("type", Tag("run")),
            req("program", Str),
            opt("cpuSeconds", Uint),
            opt("maxLogBytes", Uint),
            opt("maxValueBytes", Uint),
            opt("maxDisplayBytes", Uint),
            opt("sysPath", StrList),
            opt("seed", Uint),
        ],
    },
    FrameFields {
        frame: "reply-ok",
        sender: Sender::Host,
        doc: "A binding call that succeeded.",
        fields: &[req("type", Tag("reply")), req("id", Uint), req("ok", Const(true)), req("value", Json)],
    },
    FrameFields {
        frame: "reply-error",
        sender: Sender::Host,
        doc: "A binding call that failed; the program sees an exception.",
        fields: &[req("type", Tag("reply")), req("id", Uint), req("ok", Const(false)), req("message", Str)],
    },
    FrameFields {
        frame: "boot-ack",
        sender: Sender::Child,
        doc: "Limits are applied; ready for run.",
        fields: &[req("type", Tag("boot-ack"))],
    },
    FrameFields {
        frame: "call",
        sender: Sender::Child,
        doc: "A binding call; args is present even when null.",
        fields: &[req("type", Tag("call")), req("id", Uint), req("global", Str), req("name", Str), req("args", Json)],
    },
    FrameFields {
        frame: "log",
        sender: Sender::Child,
        doc: "Captured program output; truncated only on the ledger's marker.",
        fields: &[req("type", Tag("log")), req("text", Str), opt("truncated", Const(true))],
    },
    FrameFields {
        frame: "display",
        sender: Sender::Child,
        doc: "Rich output: MIME type to text (base64 if binary); truncated: the ledger's marker.",
        fields: &[
            req("type", Tag("display")),
            req("data", StrMap),
            opt("metadata", Object),
            opt("truncated", Const(true)),
        ],
    },
    FrameFields {
        frame: "done",
        sender: Sender::Child,
        doc: "The run settled: a value, no value, or an error (never both).",
        fields: &[req("type", Tag("done")), opt("value", Json), opt("error", Shape("done-error"))],
    },
    FrameFields {
        frame: "done-error",
        sender: Sender::Child,
        doc: "done.error: what failed and the message.",
        fields: &[req("kind", OneOf(DONE_ERROR_KINDS)), req("message", Str)],
    },
];

/// Looks up a frame shape by name.
pub fn frame_fields(frame: &str) -> Option<&'static FrameFields> {
    FRAME_FIELDS.iter().find(|f| f.frame == frame)
}
