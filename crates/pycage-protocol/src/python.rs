//! The generator of the child's wire module, `python/pycage/_wire.py`.
//!
//! [`python_wire_module`] turns [`FRAME_FIELDS`] into Python: an encoder per
//! shape the child sends and a key-exact checker per shape the host sends.
//! The output is deterministic and already in `ruff format` style, so the
//! checked-in file can be compared byte for byte (`tests/mirror.rs`), and
//! regenerated with `cargo run -p pycage-protocol --example gen-wire` (or
//! `PYCAGE_BLESS=1 cargo test -p pycage-protocol --test mirror`).

use std::fmt::Write as _;

use crate::frames::PROTOCOL_FD;
use crate::table::{
    Field, FieldType, FrameFields, Sender, DISPLAY_TRUNCATION_MARKER, FRAME_FIELDS, LOG_TRUNCATION_MARKER,
};

/// Where the generated module lives, relative to the repository root.
pub const PYTHON_WIRE_PATH: &str = "python/pycage/_wire.py";

/// `python/pycage/_wire.py` for the crate's own table.
pub fn python_wire_module() -> String {
    python_wire_module_for(FRAME_FIELDS)
}

/// The wire module for any table (the mirror test generates one from a
/// drifted table to show that it notices).
pub fn python_wire_module_for(table: &[FrameFields]) -> String {
    let mut g = Gen { out: String::new(), table };
    g.header();
    for shape in table.iter().filter(|s| s.sender == Sender::Child) {
        g.encoder(shape);
    }
    for shape in table.iter().filter(|s| s.sender == Sender::Host) {
        g.checker(shape);
    }
    g.dispatchers();
    g.out
}

struct Gen<'a> {
    out: String,
    table: &'a [FrameFields],
}

/// `boot-ack` → `boot_ack`, `errorClass` → `error_class`.
fn snake(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c == '-' {
            s.push('_');
        } else if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// The Python name the generated module derives from a shape or field name:
/// snake case (`boot-ack` → `boot_ack`, `errorClass` → `error_class`),
/// `_`-suffixed when it is a Python keyword (`global` → `global_`).
/// `encode_<name>` and `check_<name>` are the module's functions.
pub fn python_name(name: &str) -> String {
    param(name)
}

fn param(name: &str) -> String {
    const KEYWORDS: &[&str] = &[
        "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
        "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
        "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
    ];
    let s = snake(name);
    if KEYWORDS.contains(&s.as_str()) {
        s + "_"
    } else {
        s
    }
}

/// A Python string literal in `ruff format`'s preferred quotes: double,
/// unless the text holds double quotes and no single ones.
fn lit(s: &str) -> String {
    let quote = if s.contains('"') && !s.contains('\'') { '\'' } else { '"' };
    let mut out = String::new();
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// A piece of a generated string: literal text, or a Python expression.
enum Piece {
    Text(String),
    Expr(String),
}

/// The Python literal of `pieces`: a plain string when there is no
/// expression, else an f-string (braces doubled, newlines escaped); single
/// quotes when the text holds double quotes, as `ruff format` prefers.
fn string_literal(pieces: &[Piece]) -> String {
    if pieces.iter().all(|p| matches!(p, Piece::Text(_))) {
        let text: String = pieces.iter().map(|p| if let Piece::Text(t) = p { t.as_str() } else { "" }).collect();
        return lit(&text);
    }
    let mut body = String::new();
    for p in pieces {
        match p {
            Piece::Text(t) => {
                body.push_str(&t.replace('{', "{{").replace('}', "}}").replace('\\', "\\\\").replace('\n', "\\n"))
            }
            Piece::Expr(e) => {
                body.push('{');
                body.push_str(e);
                body.push('}');
            }
        }
    }
    let quote = if body.contains('"') && !body.contains('\'') { '\'' } else { '"' };
    format!("f{quote}{body}{quote}")
}

/// A JSON string literal's text (the table's names are plain ASCII, but the
/// canonical escaping is applied anyway).
fn json_str(s: &str) -> String {
    let mut v = Vec::new();
    crate::encode::write_json_string(&mut v, s);
    String::from_utf8_lossy(&v).into_owned()
}

/// `name = (items)` as `ruff format` writes it: on one line when it fits in
/// 120 columns, else one item per line with a trailing comma.
fn tuple_assign(name: &str, items: &[String]) -> String {
    let inner = match items {
        [one] => format!("{one},"),
        _ => items.join(", "),
    };
    let one = format!("{name} = ({inner})");
    if one.len() <= 120 {
        return one;
    }
    let mut s = format!("{name} = (\n");
    for item in items {
        let _ = writeln!(s, "    {item},");
    }
    s.push(')');
    s
}

/// Upper-case constant stem of a shape: `reply-ok` → `REPLY_OK`.
fn upper(name: &str) -> String {
    snake(name).to_ascii_uppercase()
}

/// Breaks `text` into lines of at most `width` characters (at spaces).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn type_doc(ty: FieldType) -> String {
    match ty {
        FieldType::Tag(t) => format!("{t:?}"),
        FieldType::Str => "str".into(),
        FieldType::OneOf(v) => v.join("|"),
        FieldType::Uint => "uint".into(),
        FieldType::Bool => "bool".into(),
        FieldType::Const(b) => (if b { "true" } else { "false" }).into(),
        FieldType::Json => "JSON".into(),
        FieldType::StrList => "[str]".into(),
        FieldType::StrMap => "{str: str}".into(),
        FieldType::Object => "{str: JSON}".into(),
        FieldType::Shape(s) => s.into(),
        FieldType::ShapeList(s) => format!("[{s}]"),
    }
}

fn field_doc(f: &Field) -> String {
    format!("{}{}: {}", f.name, if f.required { "" } else { "?" }, type_doc(f.ty))
}

impl Gen<'_> {
    fn line(&mut self, indent: usize, text: &str) {
        if !text.is_empty() {
            for _ in 0..indent {
                self.out.push_str("    ");
            }
            self.out.push_str(text);
        }
        self.out.push('\n');
    }

    fn header(&mut self) {
        let mut doc = vec![
            "The fd-3 wire's frames, generated from the Rust table: do not edit.".to_string(),
            String::new(),
            "Written by ``cargo run -p pycage-protocol --example gen-wire`` from ``FRAME_FIELDS`` in".into(),
            "``crates/pycage-protocol/src/table.rs``; ``crates/pycage-protocol/tests/mirror.rs`` fails when".into(),
            "this file differs from what the generator writes, and runs it against the host's encoders".into(),
            "and validator (docs/protocol.md).".into(),
            String::new(),
            "``encode_<shape>`` builds what the child sends: a top-level frame as one line of bytes".into(),
            "(newline included), a nested shape as JSON text. ``str`` arguments must be encodable as".into(),
            "UTF-8; a JSON-typed argument is canonical JSON text from the codec. ``check_<shape>``".into(),
            "takes a decoded host frame and returns None when it has exactly its fields, each of its".into(),
            "type, else a message naming what is wrong; ``check_<type>`` picks the variant of a".into(),
            "frame type that has several.".into(),
            String::new(),
            "Shapes (``?``: optional):".into(),
            String::new(),
        ];
        for shape in self.table {
            let who = if shape.sender == Sender::Host { "host" } else { "child" };
            let fields: Vec<String> = shape.fields.iter().map(field_doc).collect();
            let text = format!("* ``{}`` ({who}): {} Fields: {}.", shape.frame, shape.doc, fields.join(", "));
            for (i, l) in wrap(&text, 96).into_iter().enumerate() {
                doc.push(if i == 0 { l } else { format!("  {l}") });
            }
        }
        self.out.push_str("\"\"\"");
        for (i, l) in doc.iter().enumerate() {
            if i > 0 {
                self.out.push('\n');
            }
            self.out.push_str(l);
        }
        self.out.push_str("\n\"\"\"\n\n");
        self.line(0, "from json.encoder import encode_basestring as _quote");
        self.line(0, "");
        self.line(0, "from pycage._private import BUILTINS");
        self.line(0, "");
        self.line(0, "# Functions here resolve builtins in the private copy (see _private).");
        self.line(0, "__builtins__ = BUILTINS");
        self.line(0, "");
        self.line(0, "_int_repr = int.__repr__");
        self.line(0, "");
        self.line(0, "#: The child's end of the duplex channel (a Unix socketpair).");
        self.line(0, &format!("PROTOCOL_FD = {PROTOCOL_FD}"));
        for shape in self.table {
            for f in shape.fields {
                if let FieldType::OneOf(values) = f.ty {
                    let items: Vec<String> = values.iter().map(|v| lit(v)).collect();
                    self.line(0, &format!("#: The values ``{}.{}`` may take.", shape.frame, f.name));
                    self.line(0, &tuple_assign(&format!("{}_{}_VALUES", upper(shape.frame), upper(f.name)), &items));
                }
            }
        }
        self.line(0, "");
        self.line(0, "");
        self.line(0, "def log_truncation_marker(max_bytes):");
        self.line(1, "\"\"\"The log line that marks where a ``max_bytes`` log ledger ran out.\"\"\"");
        self.line(
            1,
            &format!(
                "return {} + _int_repr(max_bytes) + {}",
                lit(LOG_TRUNCATION_MARKER[0]),
                lit(LOG_TRUNCATION_MARKER[1])
            ),
        );
        self.line(0, "");
        self.line(0, "");
        self.line(0, "def display_truncation_marker(max_bytes):");
        self.line(1, "\"\"\"The text of the display that marks where a ``max_bytes`` display ledger ran out.\"\"\"");
        self.line(
            1,
            &format!(
                "return {} + _int_repr(max_bytes) + {}",
                lit(DISPLAY_TRUNCATION_MARKER[0]),
                lit(DISPLAY_TRUNCATION_MARKER[1])
            ),
        );
    }

    fn encoder(&mut self, shape: &FrameFields) {
        let top = shape.tag().is_some();
        let mut params: Vec<String> = Vec::new();
        for f in shape.fields.iter().filter(|f| f.required && !matches!(f.ty, FieldType::Tag(_))) {
            if !matches!(f.ty, FieldType::Const(_)) {
                params.push(param(f.name));
            }
        }
        for f in shape.fields.iter().filter(|f| !f.required) {
            let default = if matches!(f.ty, FieldType::Const(true)) { "False" } else { "None" };
            params.push(format!("{}={default}", param(f.name)));
        }
        self.line(0, "");
        self.line(0, "");
        self.line(0, &format!("def encode_{}({}):", snake(shape.frame), params.join(", ")));
        let kind = if top { "one line" } else { "JSON text" };
        self.line(1, &format!("\"\"\"``{}`` as {kind}: {}\"\"\"", shape.frame, shape.doc));
        // The required part is one f-string (one allocation): literal
        // pieces, braces doubled, and `{expression}`s.
        let mut pieces: Vec<Piece> = vec![Piece::Text("{".into())];
        let mut first = true;
        for f in shape.fields.iter().filter(|f| f.required) {
            pieces.push(Piece::Text(format!("{}{}:", if first { "" } else { "," }, json_str(f.name))));
            first = false;
            match f.ty {
                FieldType::Tag(t) => pieces.push(Piece::Text(json_str(t))),
                FieldType::Const(b) => pieces.push(Piece::Text((if b { "true" } else { "false" }).into())),
                ty => {
                    let p = param(f.name);
                    self.check_one_of(1, shape, f, &p);
                    pieces.push(Piece::Expr(value_expr(ty, &p)));
                }
            }
        }
        let optional: Vec<&Field> = shape.fields.iter().filter(|f| !f.required).collect();
        if optional.is_empty() {
            pieces.push(Piece::Text((if top { "}\n" } else { "}" }).into()));
            self.assign_or_return(&pieces, top, true);
            return;
        }
        self.assign_or_return(&pieces, false, false);
        for f in optional {
            let p = param(f.name);
            let key = format!("{}{}:", if first { "" } else { "," }, json_str(f.name));
            match f.ty {
                FieldType::Const(true) => {
                    self.line(1, &format!("if {p}:"));
                    self.line(2, &format!("s += {}", lit(&format!("{key}true"))));
                }
                ty => {
                    self.line(1, &format!("if {p} is not None:"));
                    self.check_one_of(2, shape, f, &p);
                    self.line(2, &format!("s += {} + {}", lit(&key), value_expr(ty, &p)));
                }
            }
        }
        if top {
            self.line(1, "return (s + \"}\\n\").encode(\"utf-8\")");
        } else {
            self.line(1, "return s + \"}\"");
        }
    }

    /// `return <literal>` (`.encode("utf-8")`d when `encode`), or
    /// `s = <literal>`, as `ruff format` writes it: on one line when it fits
    /// in 120 columns; else in parentheses, the literal on its own line when
    /// it fits there, else as an implicit concatenation of parts that do.
    fn assign_or_return(&mut self, pieces: &[Piece], encode: bool, ret: bool) {
        let head = if ret { "return " } else { "s = " };
        let whole = string_literal(pieces);
        let single = if encode { format!("{head}({whole}).encode(\"utf-8\")") } else { format!("{head}{whole}") };
        if 4 + single.len() <= 120 {
            self.line(1, &single);
            return;
        }
        self.line(1, &format!("{head}("));
        if 8 + whole.len() <= 120 {
            self.line(2, &whole);
        } else {
            let mut part: Vec<Piece> = Vec::new();
            for p in pieces {
                let piece = match p {
                    Piece::Text(t) => Piece::Text(t.clone()),
                    Piece::Expr(e) => Piece::Expr(e.clone()),
                };
                part.push(piece);
                if string_literal(&part).len() > 100 {
                    let last = part.pop();
                    self.line(2, &string_literal(&part));
                    part = last.into_iter().collect();
                }
            }
            if !part.is_empty() {
                self.line(2, &string_literal(&part));
            }
        }
        self.line(1, if encode { ").encode(\"utf-8\")" } else { ")" });
    }

    /// Encoders refuse a value outside a `OneOf` (a bug in the child).
    fn check_one_of(&mut self, i: usize, shape: &FrameFields, f: &Field, p: &str) {
        if let FieldType::OneOf(_) = f.ty {
            let values = format!("{}_{}_VALUES", upper(shape.frame), upper(f.name));
            self.line(i, &format!("if {p} not in {values}:"));
            self.line(
                i + 1,
                &format!("raise ValueError({})", lit(&format!("{}.{} is not a known value", shape.frame, f.name))),
            );
        }
    }

    fn checker(&mut self, shape: &FrameFields) {
        let stem = upper(shape.frame);
        let required: Vec<String> = shape.required().map(lit).collect();
        let optional: Vec<String> = shape.optional().map(lit).collect();
        let has_optional = shape.optional().next().is_some();
        let where_default = shape.tag().unwrap_or(shape.frame);
        self.line(0, "");
        self.line(0, "");
        self.line(0, &tuple_assign(&format!("_{stem}_REQUIRED"), &required));
        if has_optional {
            self.line(0, &format!("_{stem}_REQUIRED_SET = frozenset(_{stem}_REQUIRED)"));
            self.line(0, &tuple_assign(&format!("_{stem}_OPTIONAL"), &optional));
            self.line(0, &format!("_{stem}_KNOWN = frozenset(_{stem}_REQUIRED + _{stem}_OPTIONAL)"));
        } else {
            self.line(0, &format!("_{stem}_KNOWN = frozenset(_{stem}_REQUIRED)"));
        }
        self.line(0, "");
        self.line(0, "");
        self.line(0, &format!("def check_{}(frame, where={}):", snake(shape.frame), lit(where_default)));
        self.line(
            1,
            &format!("\"\"\"None when ``frame`` is a well-formed ``{}``, else the problem.\"\"\"", shape.frame),
        );
        self.line(1, "if type(frame) is not dict:");
        self.line(2, "return where + \" must be an object\"");
        self.line(1, "keys = frame.keys()");
        if has_optional {
            self.line(1, &format!("if not (keys <= _{stem}_KNOWN and keys >= _{stem}_REQUIRED_SET):"));
        } else {
            self.line(1, &format!("if keys != _{stem}_KNOWN:"));
        }
        self.line(2, &format!("return _key_problem(where, keys, _{stem}_REQUIRED, _{stem}_KNOWN)"));
        // A JSON field only has to be present, which the key check covers.
        for f in shape.fields.iter().filter(|f| f.ty != FieldType::Json) {
            let indent = if f.required {
                1
            } else {
                self.line(1, &format!("if {} in frame:", lit(f.name)));
                2
            };
            self.field_check(indent, f);
        }
        self.line(1, "return None");
    }

    fn field_check(&mut self, i: usize, f: &Field) {
        let name = f.name;
        self.line(i, &format!("v = frame[{}]", lit(name)));
        let v = "v";
        let at = |what: &str| format!("return where + {}", lit(&format!(".{name} {what}")));
        match f.ty {
            FieldType::Tag(t) => {
                self.line(i, &format!("if {v} != {}:", lit(t)));
                self.line(i + 1, &at(&format!("must be {t:?}")));
            }
            FieldType::Str => {
                self.line(i, &format!("if type({v}) is not str:"));
                self.line(i + 1, &at("must be a string"));
            }
            FieldType::OneOf(values) => {
                let values: Vec<String> = values.iter().map(|v| lit(v)).collect();
                self.line(i, &format!("if type({v}) is not str or {v} not in ({},):", values.join(", ")));
                self.line(i + 1, &at("is not a known value"));
            }
            FieldType::Uint => {
                self.line(i, &format!("if type({v}) is not int or {v} < 0:"));
                self.line(i + 1, &at("must be a non-negative integer"));
            }
            FieldType::Bool => {
                self.line(i, &format!("if type({v}) is not bool:"));
                self.line(i + 1, &at("must be a boolean"));
            }
            FieldType::Const(b) => {
                self.line(i, &format!("if {v} is not {}:", if b { "True" } else { "False" }));
                self.line(i + 1, &at(&format!("must be {b}")));
            }
            FieldType::Json => {}
            FieldType::StrList => {
                self.line(i, &format!("if type({v}) is not list or not all(type(x) is str for x in {v}):"));
                self.line(i + 1, &at("must be a list of strings"));
            }
            FieldType::StrMap => {
                self.line(i, &format!("if type({v}) is not dict or not all(type(x) is str for x in {v}.values()):"));
                self.line(i + 1, &at("must be an object of strings"));
            }
            FieldType::Object => {
                self.line(i, &format!("if type({v}) is not dict:"));
                self.line(i + 1, &at("must be an object"));
            }
            FieldType::Shape(s) => {
                self.line(i, &format!("problem = check_{}({v}, where + {})", snake(s), lit(&format!(".{name}"))));
                self.line(i, "if problem is not None:");
                self.line(i + 1, "return problem");
            }
            FieldType::ShapeList(s) => {
                self.line(i, &format!("if type({v}) is not list:"));
                self.line(i + 1, &at("must be a list"));
                self.line(i, &format!("for index, item in enumerate({v}):"));
                self.line(i + 1, &format!("problem = check_{}(item, f\"{{where}}.{name}[{{index}}]\")", snake(s)));
                self.line(i + 1, "if problem is not None:");
                self.line(i + 2, "return problem");
            }
        }
    }

    /// `check_<type>` for a frame type with several host shapes, picking
    /// the variant by its `Const` field; and `_key_problem`.
    fn dispatchers(&mut self) {
        let mut tags: Vec<&str> = Vec::new();
        for s in self.table.iter().filter(|s| s.sender == Sender::Host) {
            if let Some(t) = s.tag() {
                if !tags.contains(&t) {
                    tags.push(t);
                }
            }
        }
        for tag in tags {
            let variants: Vec<&FrameFields> =
                self.table.iter().filter(|s| s.sender == Sender::Host && s.tag() == Some(tag)).collect();
            if variants.len() < 2 {
                continue;
            }
            // The field every variant has as a distinct constant.
            let Some(disc) = variants.first().into_iter().flat_map(|v| v.fields.iter()).find(|f| {
                matches!(f.ty, FieldType::Const(_))
                    && variants
                        .iter()
                        .all(|v| v.fields.iter().any(|g| g.name == f.name && matches!(g.ty, FieldType::Const(_))))
            }) else {
                continue;
            };
            self.line(0, "");
            self.line(0, "");
            self.line(0, &format!("def check_{}(frame, where={}):", snake(tag), lit(tag)));
            self.line(
                1,
                &format!("\"\"\"None when ``frame`` is a well-formed ``{tag}`` (any variant), else the problem.\"\"\""),
            );
            // The variant's checker checks everything, the type included;
            // the rest only says why no variant applies.
            self.line(1, &format!("discriminant = frame.get({}) if type(frame) is dict else None", lit(disc.name)));
            for v in &variants {
                let Some(FieldType::Const(b)) = v.fields.iter().find(|g| g.name == disc.name).map(|g| g.ty) else {
                    continue;
                };
                self.line(1, &format!("if discriminant is {}:", if b { "True" } else { "False" }));
                self.line(2, &format!("return check_{}(frame, where)", snake(v.frame)));
            }
            self.line(1, "if type(frame) is not dict:");
            self.line(2, "return where + \" must be an object\"");
            self.line(1, &format!("if frame.get(\"type\") != {}:", lit(tag)));
            self.line(2, &format!("return where + {}", lit(&format!(".type must be {tag:?}"))));
            self.line(
                1,
                &format!("return where + {}", lit(&format!(".{} is not one of the variants' values", disc.name))),
            );
        }
        self.line(0, "");
        self.line(0, "");
        self.line(0, "def _key_problem(where, keys, required, known):");
        self.line(1, "for key in required:");
        self.line(2, "if key not in keys:");
        self.line(3, "return f\"{where}: missing field {key!r}\"");
        self.line(1, "for key in keys:");
        self.line(2, "if key not in known:");
        self.line(3, "return f\"{where}: unknown field {key!r}\"");
        self.line(1, "return where + \": wrong fields\"");
    }
}

/// The Python expression that encodes parameter `p` of type `ty` as JSON text.
fn value_expr(ty: FieldType, p: &str) -> String {
    match ty {
        FieldType::Str | FieldType::OneOf(_) => format!("_quote({p})"),
        FieldType::Uint => format!("_int_repr({p})"),
        FieldType::Bool => format!("(\"true\" if {p} else \"false\")"),
        FieldType::Const(b) => lit(if b { "true" } else { "false" }),
        FieldType::Json | FieldType::Object | FieldType::Shape(_) => p.to_string(),
        FieldType::StrList => format!("\"[\" + \",\".join([_quote(x) for x in {p}]) + \"]\""),
        FieldType::StrMap => {
            format!("\"{{\" + \",\".join([_quote(k) + \":\" + _quote(v) for k, v in {p}.items()]) + \"}}\"")
        }
        FieldType::ShapeList(_) => format!("\"[\" + \",\".join({p}) + \"]\""),
        FieldType::Tag(t) => lit(&json_str(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(snake("boot-ack"), "boot_ack");
        assert_eq!(snake("memberNameProperty"), "member_name_property");
        assert_eq!(param("global"), "global_");
        assert_eq!(lit("{\"type\":"), "'{\"type\":'");
        assert_eq!(lit("}\n"), "\"}\\n\"");
        assert_eq!(lit("it's \"x\""), "\"it's \\\"x\\\"\"");
    }

    #[test]
    fn deterministic() {
        assert_eq!(python_wire_module(), python_wire_module());
    }
}
