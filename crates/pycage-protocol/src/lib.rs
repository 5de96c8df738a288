//! pycage's wire protocol between the host and its CPython child (fd 3).
//!
//! This crate owns everything the host needs to talk to the child without
//! trusting it, and nothing else: it is synchronous, does no I/O beyond
//! `std::io::Read`, has no async runtime, and forbids `unsafe`.
//!
//! - [`JsonValue`]: an exact, depth-unbounded JSON value on a flat tape
//!   (see [`json`] for why it is not `serde_json::Value`), its iterative
//!   parser, the canonical encoding and the value meter.
//! - [`LineSplitter`] / [`FrameReader`]: JSON-lines with a per-line byte cap
//!   that never buffers an over-cap line.
//! - [`validate_child_frame`]: child→host lines to rebuilt [`ChildFrame`]s.
//! - [`FRAME_FIELDS`], the one table of the frames, and the host→child
//!   frames' encoders, [`PROTOCOL_FD`] and [`log_truncation_marker`].
//! - [`python_wire_module`]: the child's `python/pycage/_wire.py`, generated
//!   from the table (encoders for what the child sends, key-exact checkers
//!   for what the host sends).
//! - [`limits`]: the default caps, shared by the runtime and the CLI.
//!
//! Nothing reachable from child data recurses or panics: parsing,
//! validation, encoding, metering, subtree copies and drops are loops over
//! flat buffers.
//!
//! # Layers
//!
//! Each module uses only those listed before it (`tests/layers.rs`):
//!
//! 1. [`number`] (exact number text), [`json`] (the value and its
//!    builder), `encode` (the canonical encoding and the meter), `parse`;
//! 2. `reader` (JSON lines), `table` (the frame table), `serde`;
//! 3. `frames` (the host→child encoders), `validate` (child→host frames
//!    rebuilt), `python` (the generated child module), [`zygote`] (the
//!    zygote's wire), [`ledger`] (the log ledger both sides keep).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic))]

mod encode;
mod frames;
pub mod json;
pub mod ledger;
pub mod number;
mod parse;
mod python;
mod reader;
#[cfg(feature = "serde")]
mod serde;
mod table;
mod validate;
pub mod zygote;

pub use encode::{json_string_len, write_json_string};
pub use frames::{
    display_truncation_marker, log_truncation_marker, BootFrame, ChildError, ChildErrorKind, ChildFrame,
    ErrorClassEntry, NamespaceEntry, ReplyFrame, RunBudgets, RunFrame, MAX_CALL_ID, PROTOCOL_FD,
};
pub use json::{ArrayIter, BuildError, JsonBuilder, JsonValue, Kind, ObjectIter, ValueRef};
pub use number::Number;
pub use parse::{ParseError, ParseErrorKind};
pub use python::{python_name, python_wire_module, python_wire_module_for, PYTHON_WIRE_PATH};
pub use reader::{FrameReader, LineEvent, LineSplitter, READ_CHUNK};
#[cfg(feature = "serde")]
pub use serde::{ToSerdeError, SERDE_MAX_DEPTH};
pub use table::{
    frame_fields, Field, FieldType, FrameFields, Sender, DISPLAY_TRUNCATION_MARKER, DONE_ERROR_KINDS, FRAME_FIELDS,
    LOG_TRUNCATION_MARKER,
};
pub use validate::{parse_child_frame, validate_child_frame, FrameError};

/// Default caps. The runtime's configuration starts from these; every one is
/// overridable there.
pub mod limits {
    /// Longest child→host line (8 MiB): room for a `done` carrying the
    /// default 1 MiB value at worst-case 6× escaping, or a large binding
    /// argument, while keeping the reader's worst-case memory small.
    pub const DEFAULT_MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
    /// Total child→host bytes per run (64 MiB): eight full lines; stops a
    /// program that floods fd 3 with small junk frames.
    pub const DEFAULT_MAX_CONTROL_BYTES: u64 = 64 * 1024 * 1024;
    /// Log ledger (64 KiB), both sides.
    pub const DEFAULT_MAX_LOG_BYTES: u64 = 64 * 1024;
    /// Canonical size of the completion value (1 MiB).
    pub const DEFAULT_MAX_VALUE_BYTES: u64 = 1024 * 1024;
    /// Display ledger (8 MiB per run), both sides: the encoded `display`
    /// frames of a run together.
    pub const DEFAULT_MAX_DISPLAY_BYTES: u64 = 8 * 1024 * 1024;
}

/// Checks a completion value against the value budget: its exact canonical
/// size, or `None` when it is over. Every number in a [`JsonValue`] is a JSON
/// number token by construction (the parser and [`JsonBuilder`] refuse
/// anything else), so this is the whole "is it JSON that can cross" check on
/// the host side.
pub fn meter_value(value: &JsonValue, budget: u64) -> Option<usize> {
    value.canonical_len_within(usize::try_from(budget).unwrap_or(usize::MAX))
}
