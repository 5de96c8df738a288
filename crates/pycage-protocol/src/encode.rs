//! The canonical encoding and its meter.
//!
//! Canonical = the compact form of ECMAScript's `JSON.stringify`: no
//! whitespace; in strings only `"`, `\` and U+0000–U+001F are escaped (`\b \f
//! \n \r \t` where they exist, otherwise `\u00XX` in lowercase hex); every
//! other character is raw UTF-8; numbers are their exact text. Both sides use
//! it for frames and for the value budget.
//!
//! Writing and metering share one iterative walk over the tape ([`walk`]), so
//! the meter cannot drift from the writer: a property test checks that the
//! meter equals the written length for every budget. The meter stops as soon
//! as the budget is crossed, including in the middle of a long string, and
//! never builds an escaped copy of anything.

use crate::json::{Node, ValueRef};

/// Escape class of every byte: 0 = raw, 1 = two-byte escape, 2 = `\u00XX`.
// Indexing in a const initializer is checked at compile time.
#[allow(clippy::indexing_slicing)]
static ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = 2;
        i += 1;
    }
    t[0x08] = 1;
    t[0x09] = 1;
    t[0x0a] = 1;
    t[0x0c] = 1;
    t[0x0d] = 1;
    t[b'"' as usize] = 1;
    t[b'\\' as usize] = 1;
    t
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Escape class of a byte (a table lookup the compiler proves in bounds).
#[inline]
fn escape_class(c: u8) -> u8 {
    ESCAPE.get(usize::from(c)).copied().unwrap_or(0)
}

#[inline]
fn hex(nibble: u8) -> u8 {
    HEX.get(usize::from(nibble & 15)).copied().unwrap_or(b'0')
}

/// Receives the canonical encoding piece by piece.
trait Sink {
    /// Returns false to stop the walk.
    fn raw(&mut self, bytes: &[u8]) -> bool;
    fn string(&mut self, s: &str) -> bool;
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Sink for Writer<'_> {
    #[inline]
    fn raw(&mut self, bytes: &[u8]) -> bool {
        self.0.extend_from_slice(bytes);
        true
    }
    fn string(&mut self, s: &str) -> bool {
        write_json_string(self.0, s);
        true
    }
}

/// Appends `s` as a canonical JSON string literal (quotes included).
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    let mut run = 0;
    for (i, &c) in b.iter().enumerate() {
        let class = escape_class(c);
        if class == 0 {
            continue;
        }
        out.extend_from_slice(b.get(run..i).unwrap_or_default());
        run = i + 1;
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.extend_from_slice(&[b'\\', b'u', b'0', b'0', hex(c >> 4), hex(c)]),
        }
    }
    out.extend_from_slice(b.get(run..).unwrap_or_default());
    out.push(b'"');
}

struct Meter {
    used: usize,
    budget: usize,
}

/// Strings are metered in chunks so a huge string stops near the budget.
const METER_CHUNK: usize = 4096;

impl Sink for Meter {
    #[inline]
    fn raw(&mut self, bytes: &[u8]) -> bool {
        self.used += bytes.len();
        self.used <= self.budget
    }
    fn string(&mut self, s: &str) -> bool {
        self.used += 2;
        for chunk in s.as_bytes().chunks(METER_CHUNK) {
            let mut n = chunk.len();
            for &c in chunk {
                n += match escape_class(c) {
                    0 => 0,
                    1 => 1,
                    _ => 5,
                };
            }
            self.used += n;
            if self.used > self.budget {
                return false;
            }
        }
        self.used <= self.budget
    }
}

#[derive(Clone, Copy)]
struct Open {
    /// Direct child nodes still to come (keys count for objects).
    remaining: u64,
    /// Direct child nodes written so far.
    written: u64,
    object: bool,
}

/// The one walk behind writing and metering. Returns false if the sink stopped it.
fn walk(root: ValueRef<'_>, sink: &mut impl Sink) -> bool {
    let value = root.value();
    let start = root.index();
    let end = start + root.span();
    let nodes = value.nodes.get(start..end).unwrap_or_default();
    let text = &value.text;
    let mut stack: Vec<Open> = Vec::new();
    for node in nodes {
        if let Some(top) = stack.last_mut() {
            let sep: &[u8] = if top.object && top.written % 2 == 1 {
                b":"
            } else if top.written > 0 {
                b","
            } else {
                b""
            };
            if !sep.is_empty() && !sink.raw(sep) {
                return false;
            }
        }
        let ok = match *node {
            Node::Null => sink.raw(b"null"),
            Node::True => sink.raw(b"true"),
            Node::False => sink.raw(b"false"),
            Node::Number { start, len } => {
                let s = start as usize;
                sink.raw(text.as_bytes().get(s..s + len as usize).unwrap_or_default())
            }
            Node::String { start, len } => {
                let s = start as usize;
                sink.string(text.get(s..s + len as usize).unwrap_or_default())
            }
            Node::Array { len, .. } => {
                if len == 0 {
                    sink.raw(b"[]")
                } else {
                    stack.push(Open { remaining: u64::from(len), written: 0, object: false });
                    if !sink.raw(b"[") {
                        return false;
                    }
                    continue;
                }
            }
            Node::Object { len, .. } => {
                if len == 0 {
                    sink.raw(b"{}")
                } else {
                    stack.push(Open { remaining: 2 * u64::from(len), written: 0, object: true });
                    if !sink.raw(b"{") {
                        return false;
                    }
                    continue;
                }
            }
        };
        if !ok {
            return false;
        }
        // A child is complete: close every container it completes.
        while let Some(top) = stack.last_mut() {
            top.written += 1;
            top.remaining -= 1;
            if top.remaining > 0 {
                break;
            }
            let close: &[u8] = if top.object { b"}" } else { b"]" };
            stack.pop();
            if !sink.raw(close) {
                return false;
            }
        }
    }
    true
}

pub(crate) fn write_canonical(root: ValueRef<'_>, out: &mut Vec<u8>) {
    walk(root, &mut Writer(out));
}

pub(crate) fn canonical_len_within(root: ValueRef<'_>, budget: usize) -> Option<usize> {
    let mut m = Meter { used: 0, budget };
    if walk(root, &mut m) && m.used <= budget {
        Some(m.used)
    } else {
        None
    }
}

/// Byte length of `s` as a canonical JSON string literal, quotes included.
pub fn json_string_len(s: &str) -> usize {
    let mut m = Meter { used: 0, budget: usize::MAX };
    m.string(s);
    m.used
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_escapes_match_json_stringify() {
        let mut out = Vec::new();
        write_json_string(&mut out, "a\"b\\c\u{0}\u{1f}\u{7f}é\u{2028}\n\t\r\u{8}\u{c}/");
        assert_eq!(String::from_utf8(out).unwrap(), "\"a\\\"b\\\\c\\u0000\\u001f\u{7f}é\u{2028}\\n\\t\\r\\b\\f/\"");
        assert_eq!(json_string_len("a\u{0}\n"), 2 + 1 + 6 + 2);
    }

    #[test]
    fn meter_stops_at_budget() {
        let v = crate::JsonValue::parse(br#"{"a":[1,2,3],"b":"xyz"}"#).unwrap();
        let n = v.to_canonical_string().len();
        assert_eq!(v.canonical_len_within(n), Some(n));
        assert_eq!(v.canonical_len_within(n - 1), None);
        assert_eq!(v.canonical_len_within(0), None);
        let big = crate::JsonValue::string(&"x".repeat(1 << 20)).unwrap();
        assert_eq!(big.canonical_len_within(10), None);
        assert_eq!(big.canonical_len_within(usize::MAX), Some((1 << 20) + 2));
    }
}
