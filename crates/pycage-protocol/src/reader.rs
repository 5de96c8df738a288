//! Splitting a hostile byte stream into capped lines.
//!
//! [`LineSplitter`] is the sans-I/O core: feed it whatever bytes arrived and
//! it hands back one event at a time. The async runtime feeds it from its
//! socket; [`FrameReader`] drives it from any `std::io::Read`.
//!
//! Memory is bounded by the cap: a line is buffered only while it is within
//! `max_line_bytes` (its `\n` not counted). The moment a line crosses the cap
//! the splitter emits [`LineEvent::Oversized`] — before the line ends, so a
//! supervisor can kill the writer at once — frees the partial line, and then
//! discards bytes up to the next `\n` without storing them. A 100 MB line
//! with no newline costs the cap plus the read buffer, never 100 MB.
//!
//! A line that arrives whole inside one chunk is lent straight out of that
//! chunk without a copy; only a line split across chunks is assembled.

use std::io::{self, Read};

/// One line-level event.
#[derive(Debug, PartialEq, Eq)]
pub enum LineEvent<'a> {
    /// A complete line within the cap, without its `\n`.
    Line(&'a [u8]),
    /// A line crossed the cap; its bytes are being discarded up to the next
    /// `\n`. Reported once per over-cap line, as soon as the cap is crossed.
    Oversized,
}

/// Where a line produced by `feed_raw` lives.
#[derive(Debug, Clone, Copy)]
enum RawEvent {
    /// `data[..end]`.
    InData(usize),
    /// The assembled `partial` buffer.
    InPartial,
    Oversized,
}

/// Sans-I/O line splitter with a per-line byte cap.
#[derive(Debug)]
pub struct LineSplitter {
    max_line_bytes: usize,
    partial: Vec<u8>,
    /// `partial` holds a line already handed out; clear it before reuse.
    handed_out: bool,
    discarding: bool,
    total: u64,
}

impl LineSplitter {
    /// A splitter that refuses lines longer than `max_line_bytes`.
    pub fn new(max_line_bytes: usize) -> Self {
        LineSplitter { max_line_bytes, partial: Vec::new(), handed_out: false, discarding: false, total: 0 }
    }

    /// The per-line cap.
    pub fn max_line_bytes(&self) -> usize {
        self.max_line_bytes
    }

    /// Bytes consumed so far, newlines and discarded bytes included (for a
    /// run's total control-bytes budget).
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Bytes held for an unfinished line (at most the cap).
    pub fn buffered(&self) -> usize {
        if self.handed_out {
            0
        } else {
            self.partial.len()
        }
    }

    /// Consumes a prefix of `data` and returns how many bytes it took and at
    /// most one event. Call again with the rest until it has taken
    /// everything. Never takes zero bytes from non-empty input.
    pub fn feed<'a>(&'a mut self, data: &'a [u8]) -> (usize, Option<LineEvent<'a>>) {
        let (used, raw) = self.feed_raw(data);
        (used, raw.map(|r| self.resolve(r, data)))
    }

    /// [`LineSplitter::feed`] without borrowing: the event says where the line is.
    fn feed_raw(&mut self, data: &[u8]) -> (usize, Option<RawEvent>) {
        if self.handed_out {
            self.partial.clear();
            self.handed_out = false;
        }
        let newline = data.iter().position(|&b| b == b'\n');
        let (seg, used) = match newline {
            Some(i) => (data.get(..i).unwrap_or_default(), i + 1),
            None => (data, data.len()),
        };
        self.total += used as u64;
        if self.discarding {
            self.discarding = newline.is_none();
            return (used, None);
        }
        if self.partial.len() + seg.len() > self.max_line_bytes {
            // Free the partial line: memory must not stay at the cap while
            // the rest of an over-cap line streams past.
            self.partial = Vec::new();
            self.discarding = newline.is_none();
            return (used, Some(RawEvent::Oversized));
        }
        match newline {
            Some(i) if self.partial.is_empty() => (used, Some(RawEvent::InData(i))),
            Some(_) => {
                self.partial.extend_from_slice(seg);
                self.handed_out = true;
                (used, Some(RawEvent::InPartial))
            }
            None => {
                self.partial.extend_from_slice(seg);
                (used, None)
            }
        }
    }

    fn resolve<'a>(&'a self, raw: RawEvent, data: &'a [u8]) -> LineEvent<'a> {
        match raw {
            RawEvent::InData(end) => LineEvent::Line(data.get(..end).unwrap_or_default()),
            RawEvent::InPartial => LineEvent::Line(&self.partial),
            RawEvent::Oversized => LineEvent::Oversized,
        }
    }

    /// At end of input: the final unterminated line, if any. An over-cap
    /// line in progress was already reported.
    pub fn finish(&mut self) -> Option<LineEvent<'_>> {
        if self.handed_out {
            self.partial.clear();
            self.handed_out = false;
        }
        if self.discarding || self.partial.is_empty() {
            self.discarding = false;
            return None;
        }
        self.handed_out = true;
        Some(LineEvent::Line(&self.partial))
    }
}

/// Size of [`FrameReader`]'s read buffer.
pub const READ_CHUNK: usize = 64 * 1024;

/// Reads capped lines from any byte stream (a file, a pipe, stdin).
pub struct FrameReader<R> {
    inner: R,
    splitter: LineSplitter,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    eof: bool,
}

impl<R: Read> FrameReader<R> {
    /// A reader with the given per-line cap.
    pub fn new(inner: R, max_line_bytes: usize) -> Self {
        FrameReader {
            inner,
            splitter: LineSplitter::new(max_line_bytes),
            buf: vec![0; READ_CHUNK].into_boxed_slice(),
            pos: 0,
            end: 0,
            eof: false,
        }
    }

    /// Total bytes read so far.
    pub fn total_bytes(&self) -> u64 {
        self.splitter.total_bytes()
    }

    /// The next event, or `None` at end of input. Retries reads interrupted
    /// by signals; other I/O errors are returned.
    pub fn next_event(&mut self) -> io::Result<Option<LineEvent<'_>>> {
        loop {
            if self.pos < self.end {
                let start = self.pos;
                let data = self.buf.get(start..self.end).unwrap_or_default();
                let (used, raw) = self.splitter.feed_raw(data);
                self.pos += used;
                if let Some(raw) = raw {
                    let data = self.buf.get(start..self.end).unwrap_or_default();
                    return Ok(Some(self.splitter.resolve(raw, data)));
                }
                continue;
            }
            if self.eof {
                return Ok(self.splitter.finish());
            }
            match self.inner.read(&mut self.buf) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.pos = 0;
                    self.end = n;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Eq)]
    enum Ev {
        Line(Vec<u8>),
        Over,
    }

    fn collect<R: Read>(r: R, cap: usize) -> Vec<Ev> {
        let mut fr = FrameReader::new(r, cap);
        let mut out = Vec::new();
        while let Some(ev) = fr.next_event().unwrap() {
            out.push(match ev {
                LineEvent::Line(l) => Ev::Line(l.to_vec()),
                LineEvent::Oversized => Ev::Over,
            });
        }
        out
    }

    /// Reads one byte per call: every line is split across reads.
    struct OneByte<'a>(&'a [u8]);
    impl Read for OneByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match (self.0.split_first(), buf.first_mut()) {
                (Some((b, rest)), Some(slot)) => {
                    *slot = *b;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }

    fn l(s: &str) -> Ev {
        Ev::Line(s.as_bytes().to_vec())
    }

    #[test]
    fn splits_lines_whole_and_bytewise() {
        let input = b"a\nbb\n\nccc\nlast";
        let want = vec![l("a"), l("bb"), l(""), l("ccc"), l("last")];
        assert_eq!(collect(&input[..], 10), want);
        assert_eq!(collect(OneByte(input), 10), want);
    }

    #[test]
    fn cap_is_inclusive_and_oversize_is_its_own_event() {
        let input = b"12345\n123456\nok\n1234567890123";
        let want = vec![l("12345"), Ev::Over, l("ok"), Ev::Over];
        assert_eq!(collect(&input[..], 5), want);
        assert_eq!(collect(OneByte(input), 5), want);
    }

    #[test]
    fn invalid_utf8_is_passed_through_as_bytes() {
        assert_eq!(collect(&b"\xff\xfe\nx"[..], 10), vec![Ev::Line(vec![0xff, 0xfe]), l("x")]);
    }

    #[test]
    fn huge_line_memory_stays_at_cap() {
        struct Endless(u64);
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(self.0 as usize);
                buf[..n].fill(b'x');
                self.0 -= n as u64;
                Ok(n)
            }
        }
        let mut fr = FrameReader::new(Endless(100 << 20), 1 << 20);
        assert_eq!(fr.next_event().unwrap(), Some(LineEvent::Oversized));
        assert!(fr.splitter.buffered() == 0 && fr.splitter.partial.capacity() == 0);
        assert_eq!(fr.next_event().unwrap(), None);
        assert_eq!(fr.total_bytes(), 100 << 20);
    }

    #[test]
    fn splitter_counts_total_bytes() {
        let mut s = LineSplitter::new(4);
        let mut data: &[u8] = b"ab\ncdefgh\nij";
        let mut events = 0;
        while !data.is_empty() {
            let (used, ev) = s.feed(data);
            assert!(used > 0);
            events += usize::from(ev.is_some());
            data = &data[used..];
        }
        assert_eq!(events, 2);
        assert_eq!(s.total_bytes(), 12);
        assert_eq!(s.finish(), Some(LineEvent::Line(b"ij")));
        assert_eq!(s.finish(), None);
    }
}
