//! The host's log ledger: one ordered list of lines from three sources.
//!
//! Sources are the child's `log` frames (its Python-level stdout and
//! stderr), and the raw pipe that is both its fd 1 and fd 2 (C extensions,
//! `os.write`). Each source keeps its own partial line, so a raw write cannot
//! split a line printed through Python; a line enters `lines` when its
//! newline arrives, so lines appear in the order they were completed. Order
//! is exact within a source; across the two it is arrival order, which the
//! child and the host's run loop make the order of writing (the protocol
//! docs, "Logs").
//!
//! The ledger counts every accepted byte against `max_bytes`. Capture stops
//! at the first of: the host's own count running out, or the child's marker
//! frame (`log` with `truncated: true`), which is trusted for *stopping* —
//! a program that forges it only silences itself — and never for text: the
//! host writes its own marker line. Exactly one marker line appears.

use crate::frames::log_truncation_marker;

/// Where a piece of log text came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Frames = 0,
    /// The child's fd 1 and fd 2, one pipe.
    Raw = 1,
}

/// See the module docs.
#[derive(Debug)]
pub struct LogLedger {
    lines: Vec<String>,
    partial: [Vec<u8>; 2],
    used: u64,
    max_bytes: u64,
    stopped: bool,
    /// Lines not yet handed to `take_new`.
    fresh: usize,
}

impl LogLedger {
    /// An empty ledger with a `max_bytes` budget.
    pub fn new(max_bytes: u64) -> Self {
        LogLedger { lines: Vec::new(), partial: Default::default(), used: 0, max_bytes, stopped: false, fresh: 0 }
    }

    /// Whether capture has stopped.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Accepts bytes from a source, up to the budget.
    pub fn push(&mut self, source: Source, bytes: &[u8]) {
        if self.stopped {
            return;
        }
        let room = self.max_bytes.saturating_sub(self.used);
        let over = bytes.len() as u64 > room;
        let mut take = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if over && source == Source::Frames {
            // Frame text is UTF-8: cut at a character boundary.
            while take > 0 && bytes.get(take).is_some_and(|b| (b & 0xC0) == 0x80) {
                take -= 1;
            }
        }
        let accepted = bytes.get(..take).unwrap_or_default();
        self.used += take as u64;
        let mut rest = accepted;
        let [frames, raw] = &mut self.partial;
        let part = match source {
            Source::Frames => frames,
            Source::Raw => raw,
        };
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            part.extend_from_slice(rest.get(..i).unwrap_or_default());
            let line = std::mem::take(part);
            self.lines.push(String::from_utf8_lossy(&line).into_owned());
            rest = rest.get(i + 1..).unwrap_or_default();
        }
        part.extend_from_slice(rest);
        if over {
            self.truncate();
        }
    }

    /// Stops capture with the marker line (idempotent).
    pub fn truncate(&mut self) {
        if self.stopped {
            return;
        }
        self.flush_partials();
        self.lines.push(log_truncation_marker(self.max_bytes));
        self.stopped = true;
    }

    fn flush_partials(&mut self) {
        for part in &mut self.partial {
            if !part.is_empty() {
                let line = std::mem::take(part);
                self.lines.push(String::from_utf8_lossy(&line).into_owned());
            }
        }
    }

    /// Lines completed since the last call (for streaming events).
    pub fn take_new(&mut self) -> &[String] {
        let start = self.fresh;
        self.fresh = self.lines.len();
        self.lines.get(start..).unwrap_or_default()
    }

    /// Flushes partial lines (when the run settles).
    pub fn finish(&mut self) {
        if !self.stopped {
            self.flush_partials();
        }
    }

    /// All lines.
    pub fn into_lines(self) -> Vec<String> {
        self.lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaves_by_completion_and_keeps_partials_apart() {
        let mut l = LogLedger::new(1000);
        l.push(Source::Frames, b"hel");
        l.push(Source::Raw, b"raw\n");
        l.push(Source::Frames, b"lo\nwor");
        l.push(Source::Raw, b"err");
        l.finish();
        assert_eq!(l.into_lines(), vec!["raw", "hello", "wor", "err"]);
    }

    #[test]
    fn exactly_one_marker_host_budget() {
        let mut l = LogLedger::new(10);
        l.push(Source::Raw, b"12345\n");
        l.push(Source::Frames, b"abcdefgh\n");
        l.push(Source::Frames, b"more\n");
        l.truncate();
        l.finish();
        assert_eq!(l.into_lines(), vec!["12345", "abcd", "[pycage] log capture truncated at 10 bytes"]);
    }

    #[test]
    fn child_marker_stops_capture() {
        let mut l = LogLedger::new(100);
        l.push(Source::Frames, b"a\npartial");
        l.truncate();
        l.push(Source::Raw, b"after\n");
        l.finish();
        assert_eq!(l.into_lines(), vec!["a", "partial", "[pycage] log capture truncated at 100 bytes"]);
    }

    #[test]
    fn cuts_frame_text_at_char_boundary() {
        let mut l = LogLedger::new(3);
        l.push(Source::Frames, "aé€".as_bytes());
        l.finish();
        assert_eq!(l.into_lines(), vec!["aé", "[pycage] log capture truncated at 3 bytes"]);
    }

    #[test]
    fn take_new_streams_each_line_once() {
        let mut l = LogLedger::new(100);
        l.push(Source::Raw, b"a\nb\n");
        assert_eq!(l.take_new(), ["a", "b"]);
        assert!(l.take_new().is_empty());
        l.push(Source::Raw, b"c\n");
        assert_eq!(l.take_new(), ["c"]);
    }
}
