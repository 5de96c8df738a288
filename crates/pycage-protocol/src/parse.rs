//! The JSON parser: bytes to a [`JsonValue`] tape, iteratively.
//!
//! One pass over the input after a whole-input UTF-8 check (the standard
//! library's validator is vectorized, and checking once lets string runs be
//! copied without re-validating them). Open containers live on an explicit
//! stack of `(node index, child count)`, so depth costs 8 bytes of heap per
//! level and no stack. String contents are scanned eight bytes at a time for
//! the bytes that end a raw run (`"`, `\` and control characters), and the
//! tape is sized once from the input length, so it never regrows. Decisions
//! where RFC 8259 leaves room:
//!
//! - whitespace (space, tab, LF, CR) is allowed around tokens; a UTF-8 BOM is
//!   not whitespace and is refused;
//! - a `\u` escape of a lone surrogate is refused (it cannot be UTF-8, and the
//!   honest child never sends one); a valid surrogate pair decodes to its
//!   character;
//! - duplicate object keys are kept in order (the tape is a faithful record of
//!   what was sent); lookups take the last one, as `JSON.parse` does;
//! - numbers must match the RFC grammar exactly (`NaN`, `Infinity`, `01`,
//!   `1.`, `+1` are errors) and are stored as their exact text.

use crate::json::{JsonValue, Node, MAX_VALUE_BUFFER};

/// Where and why parsing failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at byte {offset}")]
pub struct ParseError {
    pub kind: ParseErrorKind,
    pub offset: usize,
}

/// Why parsing failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    #[error("input is not valid UTF-8")]
    InvalidUtf8,
    #[error("unexpected end of input")]
    UnexpectedEnd,
    #[error("unexpected byte")]
    UnexpectedByte,
    #[error("invalid number")]
    InvalidNumber,
    #[error("invalid escape sequence")]
    InvalidEscape,
    #[error("lone surrogate in \\u escape")]
    LoneSurrogate,
    #[error("unescaped control character in string")]
    ControlCharacter,
    #[error("trailing characters after the value")]
    TrailingCharacters,
    #[error("value larger than 4 GiB of tape or text")]
    TooLarge,
}

/// One open container: 8 bytes of heap per level of depth.
#[derive(Clone, Copy)]
struct Open {
    /// Its node's index in the tape (a tape has at most `u32::MAX` nodes).
    index: u32,
    /// Values completed so far, with [`OBJECT`] set for an object. The count
    /// never reaches bit 31: `n` children take at least `2n - 1` input bytes
    /// and the input is at most `u32::MAX` bytes.
    tagged: u32,
}

/// Marks an object in [`Open::tagged`].
const OBJECT: u32 = 1 << 31;

impl Open {
    #[inline]
    fn is_object(self) -> bool {
        self.tagged & OBJECT != 0
    }

    #[inline]
    fn count(self) -> u32 {
        self.tagged & !OBJECT
    }
}

struct Parser<'a> {
    src: &'a str,
    b: &'a [u8],
    pos: usize,
    out: JsonValue,
}

pub(crate) fn parse(input: &[u8]) -> Result<JsonValue, ParseError> {
    let src = std::str::from_utf8(input)
        .map_err(|e| ParseError { kind: ParseErrorKind::InvalidUtf8, offset: e.valid_up_to() })?;
    if input.len() > MAX_VALUE_BUFFER {
        return Err(ParseError { kind: ParseErrorKind::TooLarge, offset: 0 });
    }
    let mut p = Parser {
        src,
        b: input,
        pos: 0,
        out: JsonValue {
            // Upper bounds, so the buffers never regrow (each regrowth copies
            // the tape and page-faults it in again): every node but the root
            // follows a byte of its own (`[`, `{`, `,` or `:`) and takes at
            // least one more, so there are at most `(len + 1) / 2` nodes; unescaped
            // text is never longer than the input. Only pages actually
            // written are touched, and the excess is handed back below.
            nodes: Vec::with_capacity(input.len() / 2 + 1),
            text: String::with_capacity(input.len()),
        },
    };
    p.run()?;
    p.out.nodes.shrink_to_fit();
    p.out.text.shrink_to_fit();
    Ok(p.out)
}

impl Parser<'_> {
    fn err<T>(&self, kind: ParseErrorKind) -> Result<T, ParseError> {
        Err(ParseError { kind, offset: self.pos })
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn run(&mut self) -> Result<(), ParseError> {
        let mut stack: Vec<Open> = Vec::new();
        'value: loop {
            self.skip_ws();
            // Parse one value; containers open and jump back here.
            match self.peek() {
                None => return self.err(ParseErrorKind::UnexpectedEnd),
                Some(b'{') => {
                    self.pos += 1;
                    let index = self.out.nodes.len() as u32;
                    self.out.nodes.push(Node::Object { len: 0, skip: 0 });
                    stack.push(Open { index, tagged: OBJECT });
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                    } else {
                        self.key()?;
                        continue 'value;
                    }
                    // Empty object: close it below.
                    self.close(&mut stack);
                }
                Some(b'[') => {
                    self.pos += 1;
                    let index = self.out.nodes.len() as u32;
                    self.out.nodes.push(Node::Array { len: 0, skip: 0 });
                    stack.push(Open { index, tagged: 0 });
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        self.close(&mut stack);
                    } else {
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    let (start, len) = self.string()?;
                    self.out.nodes.push(Node::String { start, len });
                }
                Some(b't') => self.literal(b"true", Node::True)?,
                Some(b'f') => self.literal(b"false", Node::False)?,
                Some(b'n') => self.literal(b"null", Node::Null)?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(_) => return self.err(ParseErrorKind::UnexpectedByte),
            }
            // A value is complete: attach it, then find what follows.
            loop {
                let Some(top) = stack.last_mut() else {
                    self.skip_ws();
                    if self.pos != self.b.len() {
                        return self.err(ParseErrorKind::TrailingCharacters);
                    }
                    if self.out.nodes.len() > MAX_VALUE_BUFFER {
                        return self.err(ParseErrorKind::TooLarge);
                    }
                    return Ok(());
                };
                top.tagged += 1;
                let object = top.is_object();
                self.skip_ws();
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        if object {
                            self.skip_ws();
                            self.key()?;
                        }
                        continue 'value;
                    }
                    Some(b'}') if object => {
                        self.pos += 1;
                        self.close(&mut stack);
                    }
                    Some(b']') if !object => {
                        self.pos += 1;
                        self.close(&mut stack);
                    }
                    None => return self.err(ParseErrorKind::UnexpectedEnd),
                    Some(_) => return self.err(ParseErrorKind::UnexpectedByte),
                }
            }
        }
    }

    /// Pops the innermost container and patches its node. The caller's
    /// completion loop then attaches it to its parent.
    fn close(&mut self, stack: &mut Vec<Open>) {
        if let Some(open) = stack.pop() {
            let index = open.index as usize;
            let skip = (self.out.nodes.len() - index - 1) as u32;
            let len = open.count();
            if let Some(n) = self.out.nodes.get_mut(index) {
                *n = if open.is_object() { Node::Object { len, skip } } else { Node::Array { len, skip } };
            }
        }
        // An empty container closed right after opening is "a complete
        // value" for the completion loop, which runs next in `run`; a
        // container closed inside the completion loop loops again there.
    }

    /// An object key and its colon.
    fn key(&mut self) -> Result<(), ParseError> {
        if self.peek() != Some(b'"') {
            return match self.peek() {
                None => self.err(ParseErrorKind::UnexpectedEnd),
                Some(_) => self.err(ParseErrorKind::UnexpectedByte),
            };
        }
        let (start, len) = self.string()?;
        self.out.nodes.push(Node::String { start, len });
        self.skip_ws();
        match self.peek() {
            Some(b':') => {
                self.pos += 1;
                Ok(())
            }
            None => self.err(ParseErrorKind::UnexpectedEnd),
            Some(_) => self.err(ParseErrorKind::UnexpectedByte),
        }
    }

    fn literal(&mut self, word: &[u8], node: Node) -> Result<(), ParseError> {
        let end = self.pos + word.len();
        match self.b.get(self.pos..end) {
            Some(s) if s == word => {
                self.pos = end;
                self.out.nodes.push(node);
                Ok(())
            }
            _ => self.err(ParseErrorKind::UnexpectedByte),
        }
    }

    fn number(&mut self) -> Result<(), ParseError> {
        let Some(end) = crate::number::scan_number(self.b, self.pos) else {
            return self.err(ParseErrorKind::InvalidNumber);
        };
        let start = self.out.text.len();
        let tok = self.src.get(self.pos..end).unwrap_or_default();
        self.out.text.push_str(tok);
        self.pos = end;
        self.out.nodes.push(Node::Number { start: start as u32, len: tok.len() as u32 });
        Ok(())
    }

    /// A string at `self.pos` (the opening quote); appends its unescaped
    /// text and returns its range in `text`.
    fn string(&mut self) -> Result<(u32, u32), ParseError> {
        self.pos += 1;
        let start = self.out.text.len();
        loop {
            let run = self.pos;
            let rest = self.b.get(run..).unwrap_or_default();
            self.pos = run + crate::encode::plain_run_len(rest);
            // Run boundaries sit on ASCII bytes, so this slice is on char boundaries.
            self.out.text.push_str(self.src.get(run..self.pos).unwrap_or_default());
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => self.escape()?,
                Some(_) => return self.err(ParseErrorKind::ControlCharacter),
                None => return self.err(ParseErrorKind::UnexpectedEnd),
            }
        }
        let len = self.out.text.len() - start;
        if self.out.text.len() > MAX_VALUE_BUFFER {
            return self.err(ParseErrorKind::TooLarge);
        }
        Ok((start as u32, len as u32))
    }

    fn escape(&mut self) -> Result<(), ParseError> {
        // self.pos is at the backslash.
        let c = match self.b.get(self.pos + 1) {
            None => return self.err(ParseErrorKind::UnexpectedEnd),
            Some(&c) => c,
        };
        let simple = match c {
            b'"' => Some('"'),
            b'\\' => Some('\\'),
            b'/' => Some('/'),
            b'b' => Some('\u{8}'),
            b'f' => Some('\u{c}'),
            b'n' => Some('\n'),
            b'r' => Some('\r'),
            b't' => Some('\t'),
            b'u' => None,
            _ => {
                self.pos += 1;
                return self.err(ParseErrorKind::InvalidEscape);
            }
        };
        if let Some(ch) = simple {
            self.out.text.push(ch);
            self.pos += 2;
            return Ok(());
        }
        let hi = self.hex4(self.pos + 2)?;
        self.pos += 6;
        let code = match hi {
            0xD800..=0xDBFF => {
                if self.b.get(self.pos) != Some(&b'\\') || self.b.get(self.pos + 1) != Some(&b'u') {
                    return self.err(ParseErrorKind::LoneSurrogate);
                }
                let lo = self.hex4(self.pos + 2)?;
                if !(0xDC00..=0xDFFF).contains(&lo) {
                    return self.err(ParseErrorKind::LoneSurrogate);
                }
                self.pos += 6;
                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
            }
            0xDC00..=0xDFFF => return self.err(ParseErrorKind::LoneSurrogate),
            _ => hi,
        };
        match char::from_u32(code) {
            Some(ch) => {
                self.out.text.push(ch);
                Ok(())
            }
            None => self.err(ParseErrorKind::InvalidEscape),
        }
    }

    fn hex4(&self, at: usize) -> Result<u32, ParseError> {
        let Some(digits) = self.b.get(at..at + 4) else {
            return Err(ParseError { kind: ParseErrorKind::UnexpectedEnd, offset: self.b.len() });
        };
        let mut v = 0u32;
        for (i, &d) in digits.iter().enumerate() {
            let x = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return Err(ParseError { kind: ParseErrorKind::InvalidEscape, offset: at + i }),
            };
            v = (v << 4) | u32::from(x);
        }
        Ok(v)
    }
}

impl JsonValue {
    /// Parses one JSON text (RFC 8259; leading and trailing whitespace allowed).
    /// Iterative: any depth parses in constant stack space.
    pub fn parse(input: &[u8]) -> Result<Self, ParseError> {
        parse(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(s: &[u8]) -> ParseErrorKind {
        parse(s).unwrap_err().kind
    }

    #[test]
    fn parses_and_reencodes() {
        let cases: &[(&str, &str)] = &[
            ("null", "null"),
            (" true ", "true"),
            ("[1, 2 ,3]", "[1,2,3]"),
            ("{}", "{}"),
            ("[]", "[]"),
            ("[[],{},[[]]]", "[[],{},[[]]]"),
            (r#"{"a" : [ {"b":null} ] , "c":"d"}"#, r#"{"a":[{"b":null}],"c":"d"}"#),
            (r#""\u00e9\/\b\f\n\r\t\u0001\u001F""#, "\"é/\\b\\f\\n\\r\\t\\u0001\\u001f\""),
            (r#""\ud83d\ude00""#, "\"😀\""),
            ("-0.0e+10", "-0.0e+10"),
            ("1E5", "1E5"),
            ("\"\u{7f}\u{2028}\"", "\"\u{7f}\u{2028}\""),
        ];
        for (src, want) in cases {
            let v = parse(src.as_bytes()).unwrap();
            assert_eq!(v.to_canonical_string(), *want, "{src}");
        }
    }

    #[test]
    fn rejects_junk() {
        assert_eq!(kind(b""), ParseErrorKind::UnexpectedEnd);
        assert_eq!(kind(b"   "), ParseErrorKind::UnexpectedEnd);
        assert_eq!(kind(b"\xEF\xBB\xBF{}"), ParseErrorKind::UnexpectedByte, "BOM");
        assert_eq!(kind(b"\xff"), ParseErrorKind::InvalidUtf8);
        assert_eq!(kind(b"[1,]"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"[1 2]"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"{\"a\" 1}"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"{\"a\":1,}"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"{1:1}"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"[1}"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"{\"a\":1]"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"[[[]]"), ParseErrorKind::UnexpectedEnd);
        assert_eq!(kind(b"{} {}"), ParseErrorKind::TrailingCharacters);
        assert_eq!(kind(b"NaN"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"-Infinity"), ParseErrorKind::InvalidNumber);
        assert_eq!(kind(b"[01]"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"1."), ParseErrorKind::InvalidNumber);
        assert_eq!(kind(b"tru"), ParseErrorKind::UnexpectedByte);
        assert_eq!(kind(b"\"abc"), ParseErrorKind::UnexpectedEnd);
        assert_eq!(kind(b"\"a\nb\""), ParseErrorKind::ControlCharacter);
        assert_eq!(kind(b"\"\\x\""), ParseErrorKind::InvalidEscape);
        assert_eq!(kind(b"\"\\u12g4\""), ParseErrorKind::InvalidEscape);
        assert_eq!(kind(b"\"\\u12"), ParseErrorKind::UnexpectedEnd);
        assert_eq!(kind(b"\"\\ud800\""), ParseErrorKind::LoneSurrogate);
        assert_eq!(kind(b"\"\\udc00\""), ParseErrorKind::LoneSurrogate);
        assert_eq!(kind(b"\"\\ud800\\u0041\""), ParseErrorKind::LoneSurrogate);
    }

    #[test]
    fn deep_array_on_small_stack() {
        let handle = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let n = 1_000_000;
                let mut src = Vec::with_capacity(2 * n);
                src.resize(n, b'[');
                src.resize(2 * n, b']');
                let v = parse(&src).unwrap();
                assert_eq!(v.node_count(), n);
                assert_eq!(v.depth(), n);
                let mut out = Vec::new();
                v.write_canonical(&mut out);
                assert_eq!(out, src);
                assert_eq!(v.canonical_len_within(usize::MAX), Some(2 * n));
                let copy = v.root().to_owned();
                assert_eq!(copy, v);
                drop(v);
                drop(copy);
            })
            .unwrap();
        handle.join().unwrap();
    }
}
