//! The canonical encoding and its meter.
//!
//! Canonical = the compact form of ECMAScript's `JSON.stringify`: no
//! whitespace; in strings only `"`, `\` and U+0000–U+001F are escaped (`\b \f
//! \n \r \t` where they exist, otherwise `\u00XX` in lowercase hex); every
//! other character is raw UTF-8; numbers are their exact text. Both sides use
//! it for frames and for the value budget.
//!
//! The writer is an iterative walk over the tape with an explicit stack. The
//! meter needs no stack: the canonical length is a sum over nodes (a scalar's
//! text, a string's escaped length plus its quotes, a container's brackets
//! and separators), so it is one linear pass that stops as soon as the sum
//! crosses the budget, including in the middle of a long string, and never
//! builds an escaped copy of anything. Both use the same escape table, and
//! property tests and the fuzz target check that the meter equals the
//! written length at every budget.
//!
//! Strings are scanned eight bytes at a time ([`plain_run_len`]) for the
//! bytes that need escaping; the parser uses the same scan, since a string's
//! raw text ends at exactly those bytes.

use std::fmt;

use crate::json::{JsonValue, Node, ValueRef};

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
pub(crate) fn hex(nibble: u8) -> u8 {
    HEX.get(usize::from(nibble & 15)).copied().unwrap_or(b'0')
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Flags (in bit 7 of the byte) the bytes of `x` below `n` (`n <= 0x80`).
/// The lowest flagged byte is always a real match; borrows can only flag
/// bytes above it, which never matters because callers want the first one.
#[inline]
fn bytes_below(x: u64, n: u8) -> u64 {
    x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS
}

/// Length of the leading run of `b` that needs no escaping, i.e. up to the
/// first `"`, `\` or control byte (U+0000–U+001F), or `b.len()`. Checks
/// eight bytes per step.
#[inline]
pub(crate) fn plain_run_len(b: &[u8]) -> usize {
    let mut words = b.chunks_exact(8);
    let mut i = 0;
    for w in &mut words {
        // `chunks_exact` yields 8 bytes; the fallback (a NUL) would only stop early.
        let x = u64::from_le_bytes(<[u8; 8]>::try_from(w).unwrap_or([0; 8]));
        let stop = bytes_below(x, 0x20)
            | bytes_below(x ^ (ONES * u64::from(b'"')), 1)
            | bytes_below(x ^ (ONES * u64::from(b'\\')), 1);
        if stop != 0 {
            return i + (stop.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    let tail = words.remainder();
    i + tail.iter().position(|&c| escape_class(c) != 0).unwrap_or(tail.len())
}

/// Appends `s` as a canonical JSON string literal (quotes included).
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    let mut b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    loop {
        let (run, rest) = b.split_at_checked(plain_run_len(b)).unwrap_or((b, &[]));
        out.extend_from_slice(run);
        let Some((&c, tail)) = rest.split_first() else { break };
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
        b = tail;
    }
    out.push(b'"');
}

/// Extra bytes escaping adds to `b` (1 for `\n`-style escapes, 5 for `\u00XX`).
fn escape_extra(mut b: &[u8]) -> usize {
    let mut extra = 0usize;
    loop {
        let Some((&c, tail)) = b.get(plain_run_len(b)..).and_then(<[u8]>::split_first) else {
            return extra;
        };
        extra = extra.saturating_add(if escape_class(c) == 1 { 1 } else { 5 });
        b = tail;
    }
}

/// Strings are metered in chunks so a huge string stops near the budget.
const METER_CHUNK: usize = 4096;

/// Canonical length of a string literal with raw text `b`, if at most `left`.
fn string_len_within(b: &[u8], left: usize) -> Option<usize> {
    let mut n = b.len().checked_add(2)?;
    if n > left {
        return None;
    }
    for chunk in b.chunks(METER_CHUNK) {
        n = n.saturating_add(escape_extra(chunk));
        if n > left {
            return None;
        }
    }
    Some(n)
}

#[derive(Clone, Copy)]
struct Open {
    /// Direct child nodes still to come (keys count for objects).
    remaining: u64,
    object: bool,
}

pub(crate) fn write_canonical(root: ValueRef<'_>, out: &mut Vec<u8>) {
    let value = root.value();
    let start = root.index();
    let nodes = value.nodes.get(start..start + root.span()).unwrap_or_default();
    let text = &value.text;
    let mut stack: Vec<Open> = Vec::new();
    for node in nodes {
        match *node {
            Node::Null => out.extend_from_slice(b"null"),
            Node::True => out.extend_from_slice(b"true"),
            Node::False => out.extend_from_slice(b"false"),
            Node::Number { start, len } => {
                let s = start as usize;
                out.extend_from_slice(text.as_bytes().get(s..s + len as usize).unwrap_or_default());
            }
            Node::String { start, len } => {
                let s = start as usize;
                write_json_string(out, text.get(s..s + len as usize).unwrap_or_default());
            }
            Node::Array { len: 0, .. } => out.extend_from_slice(b"[]"),
            Node::Object { len: 0, .. } => out.extend_from_slice(b"{}"),
            Node::Array { len, .. } => {
                out.push(b'[');
                stack.push(Open { remaining: u64::from(len), object: false });
                continue;
            }
            Node::Object { len, .. } => {
                out.push(b'{');
                stack.push(Open { remaining: 2 * u64::from(len), object: true });
                continue;
            }
        }
        // A child is complete: write the separator after it, or close every
        // container it completes. In an object an odd count still to come
        // means a key was just written.
        while let Some(top) = stack.last_mut() {
            top.remaining = top.remaining.saturating_sub(1);
            if top.remaining > 0 {
                out.push(if top.object && top.remaining % 2 == 1 { b':' } else { b',' });
                break;
            }
            out.push(if top.object { b'}' } else { b']' });
            stack.pop();
        }
    }
}

pub(crate) fn canonical_len_within(root: ValueRef<'_>, budget: usize) -> Option<usize> {
    let value = root.value();
    let start = root.index();
    let nodes = value.nodes.get(start..start + root.span()).unwrap_or_default();
    let text = value.text.as_bytes();
    let mut used = 0usize;
    for node in nodes {
        let cost = match *node {
            Node::Null | Node::True => 4,
            Node::False => 5,
            Node::Number { len, .. } => len as usize,
            Node::String { start, len } => {
                let s = start as usize;
                string_len_within(text.get(s..s + len as usize).unwrap_or_default(), budget - used)?
            }
            // Brackets, commas between elements.
            Node::Array { len, .. } => 1 + (len as usize).max(1),
            // Brackets, a colon per member, commas between members.
            Node::Object { len, .. } => 1 + (2 * len as usize).max(1),
        };
        used = used.saturating_add(cost);
        if used > budget {
            return None;
        }
    }
    Some(used)
}

/// Byte length of `s` as a canonical JSON string literal, quotes included.
pub fn json_string_len(s: &str) -> usize {
    s.len().saturating_add(2).saturating_add(escape_extra(s.as_bytes()))
}

impl JsonValue {
    /// The canonical (compact `JSON.stringify`) encoding, appended to `out`.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        write_canonical(self.root(), out);
    }

    /// The canonical encoding as a `String`.
    pub fn to_canonical_string(&self) -> String {
        let mut out = Vec::with_capacity(self.text.len() + self.nodes.len() * 2);
        self.write_canonical(&mut out);
        // The encoder writes only UTF-8 text and ASCII punctuation.
        String::from_utf8(out).unwrap_or_default()
    }

    /// Exact byte length of the canonical encoding, or `None` as soon as it
    /// exceeds `budget`. Never materializes escaped strings.
    pub fn canonical_len_within(&self, budget: usize) -> Option<usize> {
        canonical_len_within(self.root(), budget)
    }
}

impl fmt::Debug for ValueRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Vec::new();
        write_canonical(*self, &mut out);
        f.write_str(&String::from_utf8_lossy(&out))
    }
}

impl fmt::Debug for JsonValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.root(), f)
    }
}

impl fmt::Display for JsonValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_canonical_string())
    }
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
    fn plain_run_len_matches_a_byte_loop() {
        let naive = |b: &[u8]| b.iter().position(|&c| escape_class(c) != 0).unwrap_or(b.len());
        // Every byte value at every position of a 19-byte buffer, with
        // neighbours that stress the borrows of the word-at-a-time test.
        for fill in [b'a', 0x80, 0xff, 0x20, 0x21, 0x5d, 0x1f + 1] {
            for pos in 0..19 {
                for c in 0..=255u8 {
                    let mut b = [fill; 19];
                    b[pos] = c;
                    assert_eq!(plain_run_len(&b), naive(&b), "fill {fill:#x} byte {c:#x} at {pos}");
                    assert_eq!(plain_run_len(&b[pos..]), naive(&b[pos..]));
                }
            }
        }
        assert_eq!(plain_run_len(b""), 0);
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
