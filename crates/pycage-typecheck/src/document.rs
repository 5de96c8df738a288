//! The text ty checks, and a session's history.
//!
//! The program is checked as a module, as it runs (its names are module
//! globals), after one line that imports the run's globals from the stub
//! module, and, in a session, after the cells that ran before it. ty
//! reports top-level `await` and `return` as errors of a module; those are
//! pycage's script semantics and the report drops them (`crate::report`).
//! A cell joins the history with its top-level `return`s made into
//! assignments (`return x` ends that cell only, so the code after it in the
//! history must stay reachable), and a PEP 723 `# /// script` block is
//! blanked (comments for the installer, never configuration for ty).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Most bytes of cells a session's history keeps; past it the oldest cells
/// are forgotten, and a name the checker cannot find is then a warning,
/// not an error (it may come from a forgotten cell).
pub const MAX_HISTORY_BYTES: usize = 4 * 1024 * 1024;

/// What a top-level `return x` of a cell in the history becomes.
const RETURN_VALUE: &str = "__pycage_value__ =";

/// A session's cells so far, as the checker sees them: cheap to clone
/// (clones share it). The caller adds every cell that ran, checked or not
/// ([`History::push`]); a failed check adds nothing.
#[derive(Debug, Clone)]
pub struct History {
    pub(crate) inner: Arc<Mutex<HistoryState>>,
}

#[derive(Debug, Default)]
pub(crate) struct HistoryState {
    /// Names its document (unique in this process).
    pub id: u64,
    pub cells: Vec<Cell>,
    pub bytes: usize,
    /// Cells were forgotten to stay within [`MAX_HISTORY_BYTES`].
    pub forgot: bool,
    /// The document this history is open as: (server generation, version).
    pub open: Option<(u64, i32)>,
}

/// One cell that ran: its text, and whether it is ready for the history
/// (top-level `return`s rewritten); a cell that ran unchecked is analysed
/// at the next check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub(crate) text: String,
    pub(crate) analysed: bool,
}

impl Cell {
    /// A cell that ran without a check.
    pub fn unchecked(program: &str) -> Cell {
        Cell { text: blank_script_block(program), analysed: false }
    }
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    /// An empty history.
    pub fn new() -> History {
        static IDS: AtomicU64 = AtomicU64::new(1);
        let state = HistoryState { id: IDS.fetch_add(1, Ordering::Relaxed), ..HistoryState::default() };
        History { inner: Arc::new(Mutex::new(state)) }
    }

    /// Adds a cell that ran (its run reached the program, whatever its
    /// outcome: what it defined before failing exists).
    pub fn push(&self, cell: Cell) {
        let mut s = self.lock();
        s.bytes += cell.text.len();
        s.cells.push(cell);
        while s.bytes > MAX_HISTORY_BYTES && !s.cells.is_empty() {
            let gone = s.cells.remove(0);
            s.bytes -= gone.text.len();
            s.forgot = true;
        }
    }

    /// How many cells it holds.
    pub fn len(&self) -> usize {
        self.lock().cells.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HistoryState> {
        // A panic elsewhere while holding it leaves plain data behind.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl HistoryState {
    /// The history as one text, each cell ending with a newline.
    pub fn text(&self) -> String {
        let mut out = String::with_capacity(self.bytes + self.cells.len());
        for c in &self.cells {
            out.push_str(&c.text);
            if !c.text.ends_with(['\n', '\r']) {
                out.push('\n');
            }
        }
        out
    }
}

/// The line that gives the program its globals.
pub(crate) fn import_line(module: &str, names: &[String]) -> String {
    format!("from {module} import {}  # pycage's globals\n", names.join(", "))
}

/// `program` with its PEP 723 block (`# /// script` ... `# ///`) blanked
/// to bare `#` lines: the same lines, nothing for ty to read.
pub(crate) fn blank_script_block(program: &str) -> String {
    if !program.contains("# ///") {
        return program.to_owned();
    }
    let mut out = String::with_capacity(program.len());
    let mut inside = false;
    for (line, ending) in split_lines(program) {
        let t = line.trim_end();
        if inside && t.starts_with('#') {
            out.push('#');
            inside = t != "# ///";
        } else if !inside && t.starts_with("# /// ") {
            out.push('#');
            inside = true;
        } else {
            out.push_str(line);
            inside = false;
        }
        out.push_str(ending);
    }
    out
}

/// The lines of `text` with their endings (`\r\n`, `\r` or `\n`, as
/// Python and the language server both count them; the last may be "").
pub(crate) fn split_lines(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let end = match bytes.get(i) {
            Some(b'\n') => i + 1,
            Some(b'\r') if bytes.get(i + 1) == Some(&b'\n') => i + 2,
            Some(b'\r') => i + 1,
            _ => {
                i += 1;
                continue;
            }
        };
        out.push((text.get(start..i).unwrap_or(""), text.get(i..end).unwrap_or("")));
        start = end;
        i = end;
    }
    if start < text.len() {
        out.push((text.get(start..).unwrap_or(""), ""));
    }
    out
}

/// How many line breaks `text` has.
pub(crate) fn line_breaks(text: &str) -> u32 {
    let n = split_lines(text).iter().filter(|(_, end)| !end.is_empty()).count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `cell` with each top-level `return` (at `(line, column)` in characters,
/// 0-based; `bare` when it returns nothing) made into a statement that
/// goes on: `pass`, or an assignment of its value.
pub(crate) fn rewrite_returns(cell: &str, returns: &[(u32, u32, bool)]) -> String {
    if returns.is_empty() {
        return cell.to_owned();
    }
    let mut out = String::with_capacity(cell.len() + returns.len() * 16);
    for (n, (line, ending)) in split_lines(cell).into_iter().enumerate() {
        let here: Vec<&(u32, u32, bool)> =
            returns.iter().filter(|(l, _, _)| usize::try_from(*l).is_ok_and(|l| l == n)).collect();
        if here.is_empty() {
            out.push_str(line);
        } else {
            let mut rest = line;
            let mut consumed = 0usize;
            let mut columns: Vec<&&(u32, u32, bool)> = here.iter().collect();
            columns.sort_by_key(|r| r.1);
            for (_, col, bare) in columns.into_iter().map(|r| **r) {
                let col = usize::try_from(col).unwrap_or(usize::MAX);
                let Some(offset) = col.checked_sub(consumed) else { continue };
                let Some((byte, _)) = rest.char_indices().nth(offset).or(Some((rest.len(), ' '))) else { continue };
                let (before, after) = rest.split_at(byte.min(rest.len()));
                let Some(after) = after.strip_prefix("return") else { continue };
                out.push_str(before);
                out.push_str(if bare { "pass" } else { RETURN_VALUE });
                consumed = col + "return".len();
                rest = after;
            }
            out.push_str(rest);
        }
        out.push_str(ending);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_as_python_counts_them() {
        assert_eq!(split_lines("a\r\nb\rc\nd"), [("a", "\r\n"), ("b", "\r"), ("c", "\n"), ("d", "")]);
        assert_eq!(line_breaks("a\r\nb\rc\nd"), 3);
        assert_eq!(line_breaks(""), 0);
    }

    #[test]
    fn a_script_block_is_blanked_line_for_line() {
        let p = "# /// script\n# dependencies = [\"x\"]\n# [tool.ty.environment]\n# ///\nimport x\n# note\n";
        assert_eq!(blank_script_block(p), "#\n#\n#\n#\nimport x\n# note\n");
    }

    #[test]
    fn top_level_returns_become_statements_that_go_on() {
        let cell = "x = 1\nif x:\n    return x, 2\nreturn\ny = 'é'; return y\n";
        let out = rewrite_returns(cell, &[(2, 4, false), (3, 0, true), (4, 9, false)]);
        assert_eq!(out, "x = 1\nif x:\n    __pycage_value__ = x, 2\npass\ny = 'é'; __pycage_value__ = y\n");
    }

    #[test]
    fn a_history_forgets_its_oldest_cells_past_its_budget() {
        let h = History::new();
        h.push(Cell { text: "a = 1\n".repeat(MAX_HISTORY_BYTES / 6), analysed: true });
        h.push(Cell { text: "b = 1\n".into(), analysed: true });
        let s = h.lock();
        assert_eq!(s.cells.len(), 1);
        assert!(s.forgot);
    }
}
