//! From ty's diagnostics to what a model reads: the program's own lines,
//! what pycage allows dropped, errors and warnings apart, bounded.
//!
//! Dropped, because they are pycage's script semantics and not mistakes:
//! `await`, `async for`, `async with` and asynchronous comprehensions
//! outside any function, `return` outside any function and class, and a
//! `from __future__` import after the line pycage puts first. The same
//! outside a function (in a plain `def`, in a class body) are kept: the
//! program would not compile. Downgraded to warnings: an import ty cannot
//! resolve (the module may exist when the program runs, e.g. on a
//! `sys.path` entry the checker does not see; if it does not, the run says
//! so at once); a mistake ty finds in a call into a library that has no
//! type stubs, only annotations in its `.py` sources (pandas): those
//! annotations are often narrower than what the library accepts (ty 0.0.104
//! refuses `pd.DataFrame(a, columns=["x"])`), so they inform and do not
//! block, while libraries with stubs (numpy's `.pyi`, the standard
//! library, the bindings) do; and, when a session's history outgrew
//! [`crate::document::MAX_HISTORY_BYTES`], a name ty cannot find. Upgraded
//! to an error: a coroutine created and never awaited (`tools.save(x=1)`
//! without `await` calls nothing).

use std::fmt::Write as _;

use serde_json::Value;

use crate::document::split_lines;

/// Most lines of a `type-error` message (its first line included); the
/// diagnostics that do not fit are counted in its last line.
pub const MAX_MESSAGE_LINES: usize = 64;
/// Most warnings a result carries.
pub const MAX_WARNINGS: usize = 20;
/// Longest message of one diagnostic, in characters.
pub const MAX_DIAGNOSTIC_CHARS: usize = 400;
/// Longest source line shown, in characters (a window around the column).
const MAX_SOURCE_CHARS: usize = 160;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Blocks the run.
    Error,
    /// Reported with the result; the run goes on.
    Warning,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One diagnostic in the program's own terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// ty's rule (`invalid-argument-type`).
    pub rule: String,
    /// Its message's first line, at most [`MAX_DIAGNOSTIC_CHARS`].
    pub message: String,
    /// 1-based line of the program.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// How many characters it covers on that line (at least 1).
    pub width: u32,
    /// The program's line.
    pub source: String,
}

impl Diagnostic {
    /// ty's concise form with the source line under it:
    ///
    /// ```text
    /// <program>:3:24: error[invalid-argument-type] Argument to function `search` is incorrect: ...
    ///   3 | r = await tools.search(q=3)
    ///     |                        ^
    /// ```
    pub fn render(&self) -> String {
        let mut out = format!(
            "<program>:{}:{}: {}[{}] {}\n",
            self.line,
            self.column,
            self.severity.as_str(),
            self.rule,
            self.message
        );
        let (shown, caret) = window(&self.source, self.column.saturating_sub(1) as usize);
        let number = self.line.to_string();
        let _ = writeln!(out, " {number} | {shown}");
        let width = (self.width as usize).clamp(1, shown.chars().count().saturating_sub(caret).max(1));
        let _ = write!(out, " {} | {}{}", " ".repeat(number.len()), " ".repeat(caret), "^".repeat(width));
        out
    }
}

/// What a check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
}

impl Report {
    /// Whether the program may run.
    pub fn passed(&self) -> bool {
        self.errors.is_empty()
    }

    /// The `type-error` message: a line saying what happened, then the
    /// errors, within [`MAX_MESSAGE_LINES`].
    pub fn message(&self) -> String {
        let n = self.errors.len();
        let mut out = format!(
            "the type check (ty) found {n} error{} and the program did not run (no binding was called); fix {} and run it again:",
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "them" },
        );
        let mut lines = 1;
        for (i, d) in self.errors.iter().enumerate() {
            let text = d.render();
            let more = text.lines().count();
            let left = n - i;
            // Room for this one, and for the count of the rest if any follow.
            if lines + more + usize::from(left > 1) > MAX_MESSAGE_LINES {
                let _ = write!(out, "\n... and {left} more error{}", if left == 1 { "" } else { "s" });
                break;
            }
            out.push('\n');
            out.push_str(&text);
            lines += more;
        }
        out
    }

    /// The warnings, each rendered, at most [`MAX_WARNINGS`] (then a line
    /// that counts the rest).
    pub fn warning_texts(&self) -> Vec<String> {
        let mut out: Vec<String> = self.warnings.iter().take(MAX_WARNINGS).map(Diagnostic::render).collect();
        if self.warnings.len() > MAX_WARNINGS {
            out.push(format!("... and {} more warnings", self.warnings.len() - MAX_WARNINGS));
        }
        out
    }
}

/// A position as the server counts it: line, then column in its encoding.
pub(crate) type Pos = (u32, u32);

/// One diagnostic as the server sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Raw {
    pub start: Pos,
    pub end: Pos,
    /// 1 error, 2 warning, 3 information, 4 hint.
    pub severity: u64,
    pub code: String,
    pub message: String,
    /// It points at a definition in a library's `.py` source (outside the
    /// workspace): annotations, not stubs.
    pub inline_library: bool,
    /// What it says of other places (`Has type ...` under an operand,
    /// `Parameter declared here`), at most [`MAX_RELATED`].
    pub related: Vec<Related>,
}

/// Most related places read per diagnostic.
const MAX_RELATED: usize = 8;

/// One related place of a diagnostic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Related {
    pub uri: String,
    pub start: Pos,
    pub end: Pos,
    pub message: String,
}

/// The diagnostics of a `textDocument/diagnostic` answer; entries that
/// are not well formed are skipped.
pub(crate) fn parse_diagnostics(answer: &Value, workspace_uri: &str) -> Vec<Raw> {
    let items = answer.get("items").and_then(Value::as_array);
    items.into_iter().flatten().filter_map(|d| parse_one(d, workspace_uri)).collect()
}

fn parse_one(d: &Value, workspace_uri: &str) -> Option<Raw> {
    let pos = |p: &Value| -> Option<Pos> {
        let line = u32::try_from(p.get("line")?.as_u64()?).ok()?;
        let character = u32::try_from(p.get("character")?.as_u64()?).ok()?;
        Some((line, character))
    };
    let range = d.get("range")?;
    Some(Raw {
        start: pos(range.get("start")?)?,
        end: pos(range.get("end")?)?,
        severity: d.get("severity").and_then(Value::as_u64).unwrap_or(1),
        code: d.get("code").and_then(Value::as_str).unwrap_or("").chars().take(80).collect(),
        message: d.get("message").and_then(Value::as_str).unwrap_or("").to_owned(),
        inline_library: d.get("relatedInformation").and_then(Value::as_array).is_some_and(|related| {
            related.iter().any(|r| {
                let uri = r.pointer("/location/uri").and_then(Value::as_str).unwrap_or("");
                uri.ends_with(".py") && !uri.starts_with(workspace_uri)
            })
        }),
        related: d
            .get("relatedInformation")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .take(MAX_RELATED)
            .filter_map(|r| {
                let range = r.pointer("/location/range")?;
                Some(Related {
                    uri: r.pointer("/location/uri")?.as_str()?.chars().take(4096).collect(),
                    start: pos(range.get("start")?)?,
                    end: pos(range.get("end")?)?,
                    message: first_line(r.get("message")?.as_str()?),
                })
            })
            .collect(),
    })
}

/// Scopes of a `textDocument/documentSymbol` answer (hierarchical):
/// the ranges of functions and of classes. Walked with a stack.
#[derive(Debug, Default)]
pub(crate) struct Scopes {
    pub functions: Vec<(Pos, Pos)>,
    pub classes: Vec<(Pos, Pos)>,
}

/// Most symbols read from one answer.
const MAX_SYMBOLS: usize = 100_000;

pub(crate) fn parse_scopes(answer: &Value) -> Scopes {
    let mut scopes = Scopes::default();
    let mut stack: Vec<&Value> = answer.as_array().map(|a| a.iter().collect()).unwrap_or_default();
    let mut seen = 0;
    while let Some(sym) = stack.pop() {
        seen += 1;
        if seen > MAX_SYMBOLS {
            break;
        }
        let range = sym.get("range").or_else(|| sym.get("location").and_then(|l| l.get("range")));
        let pos = |p: Option<&Value>| -> Option<Pos> {
            let p = p?;
            Some((u32::try_from(p.get("line")?.as_u64()?).ok()?, u32::try_from(p.get("character")?.as_u64()?).ok()?))
        };
        if let (Some(start), Some(end)) =
            (pos(range.and_then(|r| r.get("start"))), pos(range.and_then(|r| r.get("end"))))
        {
            // SymbolKind: 5 class, 6 method, 9 constructor, 12 function.
            match sym.get("kind").and_then(Value::as_u64) {
                Some(6 | 9 | 12) => scopes.functions.push((start, end)),
                Some(5) => scopes.classes.push((start, end)),
                _ => {}
            }
        }
        if let Some(children) = sym.get("children").and_then(Value::as_array) {
            stack.extend(children.iter());
        }
    }
    scopes
}

/// What a raw diagnostic is to pycage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Allowed {
    /// Not one of the script forms: keep it.
    No,
    /// `await` and friends: allowed outside functions.
    Await,
    /// `return`: allowed outside functions and classes.
    Return,
    /// A `from __future__` import after pycage's first line.
    Future,
}

pub(crate) fn allowed(raw: &Raw) -> Allowed {
    if raw.code != "invalid-syntax" {
        return Allowed::No;
    }
    if raw.message.contains("outside of an asynchronous function") {
        Allowed::Await
    } else if raw.message.starts_with("`return` statement outside of a function") {
        Allowed::Return
    } else if raw.message.contains("__future__ imports must be at the top of the file") {
        Allowed::Future
    } else {
        Allowed::No
    }
}

/// `raw`'s message with what its related places say: the operands' types
/// in the program (`uri` is the checked document's, whose program starts
/// at line `first_line`), and the declaration in the globals module
/// (`module_uri`, `module_text`) of a binding it is about.
pub(crate) fn compose(
    raw: &Raw,
    uri: &str,
    program: &str,
    program_start: u32,
    module: (&str, &str),
    utf16: bool,
) -> String {
    let mut out = first_line_of(&raw.message);
    let mut parts = Vec::new();
    let mut declared = None;
    for r in &raw.related {
        if r.uri == uri && r.start.0 >= program_start && r.start.0 == r.end.0 {
            let source = program_line(program, r.start.0 - program_start);
            let (a, b) = (to_chars(source, r.start.1, utf16) as usize, to_chars(source, r.end.1, utf16) as usize);
            let snippet: String = source.chars().skip(a).take(b.saturating_sub(a).min(80)).collect();
            if !snippet.is_empty() {
                parts.push(format!("`{snippet}`: {}", r.message));
            }
        } else if r.uri == module.0 && declared.is_none() {
            let line = program_line(module.1, r.start.0).trim();
            if line.starts_with("async def ") || line.starts_with("def ") {
                declared = Some(line.trim_end_matches(':').chars().take(300).collect::<String>());
            }
        }
    }
    if !parts.is_empty() {
        let _ = write!(out, " ({})", parts.join("; "));
    }
    if let Some(d) = declared {
        let _ = write!(out, "; it is declared as `{d}`");
    }
    first_line(&out)
}

fn first_line_of(message: &str) -> String {
    message.lines().next().unwrap_or("").trim_end().to_owned()
}

/// Whether `pos` is within one of `ranges`.
pub(crate) fn inside(pos: Pos, ranges: &[(Pos, Pos)]) -> bool {
    ranges.iter().any(|(s, e)| *s <= pos && pos < *e)
}

/// `message`'s first line, bounded.
pub(crate) fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or("").trim_end();
    let mut out: String = line.chars().take(MAX_DIAGNOSTIC_CHARS).collect();
    if line.chars().nth(MAX_DIAGNOSTIC_CHARS).is_some() {
        out.push_str("...");
    }
    out
}

/// A column in the server's encoding (UTF-16 units, or characters) as
/// characters of `line`.
pub(crate) fn to_chars(line: &str, column: u32, utf16: bool) -> u32 {
    if !utf16 {
        return column;
    }
    let mut units = 0u32;
    let mut chars = 0u32;
    for c in line.chars() {
        if units >= column {
            break;
        }
        units += u32::try_from(c.len_utf16()).unwrap_or(1);
        chars += 1;
    }
    chars
}

/// `source` (tabs shown as spaces) cut to a window around character
/// `column`, and where the column is in it.
fn window(source: &str, column: usize) -> (String, usize) {
    let chars: Vec<char> = source.chars().map(|c| if c == '\t' { ' ' } else { c }).collect();
    if chars.len() <= MAX_SOURCE_CHARS {
        return (chars.into_iter().collect(), column.min(chars_len(source)));
    }
    let start = column.saturating_sub(MAX_SOURCE_CHARS / 2).min(chars.len());
    let end = (start + MAX_SOURCE_CHARS).min(chars.len());
    let mut shown = String::new();
    let mut caret = column - start;
    if start > 0 {
        shown.push_str("...");
        caret += 3;
    }
    shown.extend(chars.get(start..end).unwrap_or_default());
    if end < chars.len() {
        shown.push_str("...");
    }
    (shown, caret)
}

fn chars_len(s: &str) -> usize {
    s.chars().count()
}

/// The program's line `n` (0-based), without its ending.
pub(crate) fn program_line(program: &str, n: u32) -> &str {
    split_lines(program).get(n as usize).map_or("", |(l, _)| *l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diag(line: u32, rule: &str) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            rule: rule.into(),
            message: "Operator `+` is not supported".into(),
            line,
            column: 5,
            width: 7,
            source: "n = 1 + \"a\"".into(),
        }
    }

    #[test]
    fn a_diagnostic_shows_its_line_and_where() {
        assert_eq!(
            diag(12, "unsupported-operator").render(),
            "<program>:12:5: error[unsupported-operator] Operator `+` is not supported\n 12 | n = 1 + \"a\"\n    |     ^^^^^^^"
        );
    }

    #[test]
    fn a_message_stays_within_its_lines_and_counts_the_rest() {
        let report = Report { errors: (1..=40).map(|l| diag(l, "x")).collect(), warnings: Vec::new() };
        let message = report.message();
        assert!(message.lines().count() <= MAX_MESSAGE_LINES, "{message}");
        assert!(message.ends_with("... and 20 more errors"), "{message}");
        assert!(message.starts_with("the type check (ty) found 40 errors"), "{message}");
    }

    #[test]
    fn long_lines_are_windowed_around_the_column() {
        let source = format!("{}x{}", "a".repeat(300), "b".repeat(300));
        let (shown, caret) = window(&source, 300);
        assert!(shown.chars().count() <= MAX_SOURCE_CHARS + 6);
        assert_eq!(shown.chars().nth(caret), Some('x'));
    }

    #[test]
    fn utf16_columns_become_characters() {
        assert_eq!(to_chars("a😀b", 3, true), 2);
        assert_eq!(to_chars("a😀b", 2, false), 2);
    }

    #[test]
    fn scopes_are_read_without_recursion() {
        let mut sym = serde_json::json!({"kind": 12, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}}, "children": []});
        for _ in 0..100 {
            sym = serde_json::json!({"kind": 5, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 9, "character": 0}}, "children": [sym]});
        }
        let s = parse_scopes(&serde_json::json!([sym]));
        assert_eq!((s.functions.len(), s.classes.len()), (1, 100));
    }
}
