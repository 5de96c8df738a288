//! Property tests for the protocol codec (proptest).
//!
//! The generator builds a JSON value as a tree ([`G`]) and renders it twice:
//! as a whitespace-laden input with randomly chosen escapes (`\u00e9`,
//! `\uD83D\uDE00`, `\/`, upper- and lower-case hex) and as the canonical
//! compact `JSON.stringify` text, computed here independently of the crate's
//! encoder. The properties:
//!
//! - (a) parse(input) encodes to the expected canonical text, and parsing
//!   that text gives an identical tape (`==`);
//! - (b) `canonical_len_within(b)` is `Some(len)` exactly when `b >= len`,
//!   for every budget around `len` (sampled for big values, including the
//!   meter's 4 KiB string-chunk boundaries);
//! - (c) arbitrary bytes (and mutated valid frames) never panic the parser,
//!   the validator, the splitter or the reader;
//! - (d) the splitter gives the same events for every chunking of an input,
//!   and they match a plain reference model of "split on `\n`, cap each line";
//! - (e) `to_owned` of every subtree encodes to that subtree's canonical
//!   text, equals a fresh parse of it, and appears in the parent's encoding;
//! - (f) `from_serde(to_serde(v)) == v` for values with unique keys (modulo
//!   serde_json's key order, see [`serde_preserves_order`]).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use std::fmt::Write as _;
use std::io::{self, Read};

mod support;

use proptest::prelude::*;
use pycage_protocol::{
    json_string_len, meter_value, validate_child_frame, write_json_string, ChildFrame, FrameReader, JsonValue, Kind,
    LineSplitter, ValueRef,
};
use support::{ev, serde_number_text, Ev, Rng};

// ---------------------------------------------------------------------------
// The generator.

/// One string: each char with a selector for how the input spells it.
type GStr = Vec<(char, u8)>;

#[derive(Debug, Clone)]
enum G {
    Null,
    Bool(bool),
    Num(String),
    Str(GStr),
    Arr(Vec<G>),
    Obj(Vec<(GStr, G)>),
}

fn arb_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => any::<char>(),
        3 => proptest::char::range('a', 'z'),
        2 => proptest::char::range('\u{0}', '\u{1f}'),
        1 => prop::sample::select(vec!['"', '\\', '/', '\u{7f}', 'é', '\u{2028}', '\u{fffd}', '😀', '\u{10ffff}', '\u{e000}']),
    ]
}

fn arb_gstr(max: usize) -> impl Strategy<Value = GStr> {
    prop::collection::vec((arb_char(), any::<u8>()), 0..max)
}

fn arb_number() -> impl Strategy<Value = String> {
    prop_oneof![
        "-?(0|[1-9][0-9]{0,40})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?",
        prop::sample::select(vec![
            "0",
            "-0",
            "-0.0",
            "-0.0e+10",
            "1E5",
            "1e-0",
            "0e0",
            "123456789012345678901234567890",
            "-9223372036854775808",
            "18446744073709551616",
            "1.7976931348623157e308",
            "5e-324",
            "1e400",
        ])
        .prop_map(str::to_owned),
    ]
}

fn arb_leaf() -> impl Strategy<Value = G> {
    prop_oneof![
        1 => Just(G::Null),
        1 => any::<bool>().prop_map(G::Bool),
        3 => arb_number().prop_map(G::Num),
        3 => arb_gstr(12).prop_map(G::Str),
    ]
}

fn arb_g() -> impl Strategy<Value = G> {
    arb_leaf().prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(G::Arr),
            prop::collection::vec((arb_gstr(6), inner), 0..8).prop_map(G::Obj),
        ]
    })
}

/// A value with some long strings full of escapes: crosses the meter's
/// 4 KiB chunks and exercises the string fast paths.
fn arb_big() -> impl Strategy<Value = G> {
    let long = prop::collection::vec((arb_char(), any::<u8>()), 0..12_000).prop_map(G::Str);
    prop::collection::vec(prop_oneof![long, arb_leaf()], 1..4).prop_map(G::Arr)
}

/// A small deterministic generator for whitespace choices.
/// Whitespace choices for generated inputs.
trait Ws {
    fn ws(&mut self, out: &mut String);
}

impl Ws for Rng {
    fn ws(&mut self, out: &mut String) {
        let r = self.next();
        if r & 3 != 0 {
            return;
        }
        for i in 0..(r >> 8) % 4 {
            out.push([' ', '\t', '\n', '\r'][((r >> (16 + 2 * i)) % 4) as usize]);
        }
    }
}

fn canon_str(s: &GStr, out: &mut String) {
    out.push('"');
    for &(c, _) in s {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).unwrap(),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn unicode_escape(c: char, upper: bool, out: &mut String) {
    let mut units = [0u16; 2];
    for u in c.encode_utf16(&mut units) {
        if upper {
            write!(out, "\\u{:04X}", u).unwrap();
        } else {
            write!(out, "\\u{:04x}", u).unwrap();
        }
    }
}

fn input_str(s: &GStr, out: &mut String) {
    out.push('"');
    for &(c, sel) in s {
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            _ => None,
        };
        let must_escape = matches!(c, '"' | '\\') || (c as u32) < 0x20;
        match (sel % 4, short) {
            (0, _) if !must_escape => out.push(c),
            (0 | 1, Some(e)) => out.push_str(e),
            (1, None) if !must_escape => out.push(c),
            (0..=2, _) => unicode_escape(c, false, out),
            _ => unicode_escape(c, true, out),
        }
    }
    out.push('"');
}

impl G {
    fn canonical(&self) -> String {
        let mut out = String::new();
        self.write_canonical(&mut out);
        out
    }

    fn write_canonical(&self, out: &mut String) {
        match self {
            G::Null => out.push_str("null"),
            G::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            G::Num(n) => out.push_str(n),
            G::Str(s) => canon_str(s, out),
            G::Arr(xs) => {
                out.push('[');
                for (i, x) in xs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    x.write_canonical(out);
                }
                out.push(']');
            }
            G::Obj(ms) => {
                out.push('{');
                for (i, (k, v)) in ms.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canon_str(k, out);
                    out.push(':');
                    v.write_canonical(out);
                }
                out.push('}');
            }
        }
    }

    fn input(&self, seed: u64) -> String {
        let mut rng = Rng(seed | 1);
        let mut out = String::new();
        rng.ws(&mut out);
        self.write_input(&mut rng, &mut out);
        rng.ws(&mut out);
        out
    }

    fn write_input(&self, rng: &mut Rng, out: &mut String) {
        match self {
            G::Null | G::Bool(_) | G::Num(_) => self.write_canonical(out),
            G::Str(s) => input_str(s, out),
            G::Arr(xs) => {
                out.push('[');
                rng.ws(out);
                for (i, x) in xs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                        rng.ws(out);
                    }
                    x.write_input(rng, out);
                    rng.ws(out);
                }
                out.push(']');
            }
            G::Obj(ms) => {
                out.push('{');
                rng.ws(out);
                for (i, (k, v)) in ms.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                        rng.ws(out);
                    }
                    input_str(k, out);
                    rng.ws(out);
                    out.push(':');
                    rng.ws(out);
                    v.write_input(rng, out);
                    rng.ws(out);
                }
                out.push('}');
            }
        }
    }

    /// Drops later members whose key repeats an earlier one, everywhere.
    fn dedup_keys(&mut self) {
        match self {
            G::Arr(xs) => xs.iter_mut().for_each(G::dedup_keys),
            G::Obj(ms) => {
                let mut seen = std::collections::HashSet::new();
                ms.retain(|(k, _)| seen.insert(key_text(k)));
                ms.iter_mut().for_each(|(_, v)| v.dedup_keys());
            }
            _ => {}
        }
    }

    /// Respells exponents as serde_json's `arbitrary_precision` parser
    /// stores them (`1E5` -> `1e+5`): the same number, different text.
    fn serde_numbers(&mut self) {
        match self {
            G::Arr(xs) => xs.iter_mut().for_each(G::serde_numbers),
            G::Obj(ms) => ms.iter_mut().for_each(|(_, v)| v.serde_numbers()),
            G::Num(n) => *n = serde_number_text(n),
            _ => {}
        }
    }

    /// Sorts object members by key, everywhere (serde_json's BTreeMap order).
    fn sort_keys(&mut self) {
        match self {
            G::Arr(xs) => xs.iter_mut().for_each(G::sort_keys),
            G::Obj(ms) => {
                ms.sort_by_key(|(k, _)| key_text(k));
                ms.iter_mut().for_each(|(_, v)| v.sort_keys());
            }
            _ => {}
        }
    }
}

fn key_text(k: &GStr) -> String {
    k.iter().map(|&(c, _)| c).collect()
}

fn parse(s: &str) -> JsonValue {
    JsonValue::parse(s.as_bytes()).unwrap_or_else(|e| panic!("{e}: {s:?}"))
}

/// Whether this build's `serde_json::Map` keeps insertion order (the
/// `preserve_order` feature may be switched on by another crate through
/// feature unification); without it, maps are sorted by key.
fn serde_preserves_order() -> bool {
    let mut m = serde_json::Map::new();
    m.insert("b".into(), serde_json::Value::Null);
    m.insert("a".into(), serde_json::Value::Null);
    m.keys().next().map(String::as_str) == Some("b")
}

// ---------------------------------------------------------------------------
// (a) canonical round trip and (e) subtrees.

/// Walks `v` beside `g`, checking every subtree's copy.
fn check_subtrees(g: &G, v: ValueRef<'_>, parent_text: &str) {
    let want = g.canonical();
    let owned = v.to_owned();
    assert_eq!(owned.to_canonical_string(), want);
    assert_eq!(format!("{v:?}"), want, "ValueRef Debug is the subtree's canonical text");
    assert_eq!(owned, parse(&want), "to_owned rebases text like a fresh parse");
    assert_eq!(owned.node_count(), v.span());
    assert!(parent_text.contains(&want));
    match (g, v.kind()) {
        (G::Arr(xs), Kind::Array(it)) => {
            assert_eq!(it.len(), xs.len());
            for (x, r) in xs.iter().zip(it) {
                check_subtrees(x, r, &want);
            }
        }
        (G::Obj(ms), Kind::Object(it)) => {
            assert_eq!(it.len(), ms.len());
            for ((k, x), (rk, r)) in ms.iter().zip(it) {
                assert_eq!(key_text(k), rk);
                check_subtrees(x, r, &want);
            }
        }
        (G::Null, Kind::Null) => {}
        (G::Bool(b), Kind::Bool(c)) => assert_eq!(*b, c),
        (G::Num(n), Kind::Number(m)) => assert_eq!(n, m.as_str()),
        (G::Str(s), Kind::String(t)) => assert_eq!(key_text(s), t),
        (g, k) => panic!("shape mismatch: {g:?} vs {k:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_parse_encodes_to_canonical(g in arb_g(), seed in any::<u64>()) {
        let input = g.input(seed);
        let want = g.canonical();
        let v = parse(&input);
        prop_assert_eq!(v.to_canonical_string(), want.clone());
        let mut buf = b"prefix".to_vec();
        v.write_canonical(&mut buf);
        prop_assert_eq!(&buf[6..], want.as_bytes());
        let again = parse(&want);
        prop_assert_eq!(&again, &v);
        prop_assert_eq!(again.to_canonical_string(), want);
    }

    #[test]
    fn e_subtree_copies_encode_like_their_part(g in arb_g(), seed in any::<u64>()) {
        let v = parse(&g.input(seed));
        let text = v.to_canonical_string();
        check_subtrees(&g, v.root(), &text);
    }

    #[test]
    fn b_meter_is_exact_at_every_budget(g in arb_g()) {
        let v = parse(&g.canonical());
        let len = v.to_canonical_string().len();
        for b in 0..=len + 2 {
            prop_assert_eq!(v.canonical_len_within(b), (b >= len).then_some(len), "budget {}", b);
        }
        prop_assert_eq!(v.canonical_len_within(usize::MAX), Some(len));
        prop_assert_eq!(meter_value(&v, u64::MAX), Some(len));
        prop_assert_eq!(meter_value(&v, len as u64), Some(len));
        if len > 0 {
            prop_assert_eq!(meter_value(&v, len as u64 - 1), None);
        }
    }

    #[test]
    fn f_serde_round_trip(mut g in arb_g()) {
        g.dedup_keys();
        let v = parse(&g.canonical());
        let s = v.to_serde().unwrap();
        let back = JsonValue::from_serde(&s).unwrap();
        // serde_json respells exponents (see `serde_numbers`): the value is
        // the same number, so compare against that spelling.
        g.serde_numbers();
        if !serde_preserves_order() {
            g.sort_keys();
        }
        // (When neither changes anything, this is `back == v`.)
        prop_assert_eq!(back, parse(&g.canonical()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_b_big_values(g in arb_big(), seed in any::<u64>(), picks in prop::collection::vec(any::<u64>(), 64)) {
        let v = parse(&g.input(seed));
        let want = g.canonical();
        prop_assert_eq!(v.to_canonical_string(), want.clone());
        let len = want.len();
        let mut budgets: Vec<usize> = vec![0, 1, len.saturating_sub(1), len, len + 1, usize::MAX];
        budgets.extend(picks.iter().map(|p| (*p as usize) % (len + 2)));
        // Around the meter's string chunks (4096 bytes of raw text each).
        for k in 1usize..4 {
            for d in 0..3 {
                budgets.push((4096 * k + d).saturating_sub(1));
            }
        }
        for b in budgets {
            prop_assert_eq!(v.canonical_len_within(b), (b >= len).then_some(len), "budget {}", b);
        }
        if let G::Arr(xs) = &g {
            for x in xs {
                if let G::Str(s) = x {
                    let text = key_text(s);
                    let mut out = Vec::new();
                    write_json_string(&mut out, &text);
                    prop_assert_eq!(json_string_len(&text), out.len());
                    prop_assert_eq!(out, x.canonical().into_bytes());
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// (c) no panics on junk, (d) splitter chunking.

/// Feeds `input` in chunks of the given sizes (cycled; 0 counts as 1).
fn split_chunked(input: &[u8], cap: usize, chunks: &[usize]) -> Vec<Ev> {
    let mut s = LineSplitter::new(cap);
    let mut out = Vec::new();
    let mut rest = input;
    let mut i = 0;
    while !rest.is_empty() {
        let n = if chunks.is_empty() { rest.len() } else { chunks[i % chunks.len()].max(1).min(rest.len()) };
        i += 1;
        let (mut chunk, tail) = rest.split_at(n);
        rest = tail;
        while !chunk.is_empty() {
            let (used, e) = s.feed(chunk);
            assert!(used > 0 && used <= chunk.len(), "feed took {used} of {}", chunk.len());
            if let Some(e) = e {
                out.push(ev(e));
            }
            assert!(s.buffered() <= cap);
            chunk = &chunk[used..];
        }
    }
    assert_eq!(s.total_bytes(), input.len() as u64);
    if let Some(e) = s.finish() {
        out.push(ev(e));
    }
    assert_eq!(s.finish(), None);
    out
}

/// The reference: split on `\n`; a line over the cap is `Over`; a final
/// unterminated line counts if it is not empty.
fn split_model(input: &[u8], cap: usize) -> Vec<Ev> {
    let mut parts: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    if parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts.into_iter().map(|p| if p.len() > cap { Ev::Over } else { Ev::Line(p.to_vec()) }).collect()
}

/// A reader that returns the given chunk sizes (cycled); 0 = `Interrupted`.
struct Chunked<'a> {
    data: &'a [u8],
    chunks: Vec<usize>,
    i: usize,
    interrupted: bool,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let c = if self.chunks.is_empty() { usize::MAX } else { self.chunks[self.i % self.chunks.len()] };
        self.i += 1;
        // One interruption at a time, so an all-zero list still makes progress.
        if c == 0 && !self.data.is_empty() && !self.interrupted {
            self.interrupted = true;
            return Err(io::Error::from(io::ErrorKind::Interrupted));
        }
        self.interrupted = false;
        let n = c.max(1).min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fn read_all(input: &[u8], cap: usize, chunks: Vec<usize>) -> Vec<Ev> {
    let mut r = FrameReader::new(Chunked { data: input, chunks, i: 0, interrupted: false }, cap);
    let mut out = Vec::new();
    while let Some(e) = r.next_event().unwrap() {
        out.push(ev(e));
    }
    assert_eq!(r.total_bytes(), input.len() as u64);
    out
}

/// Bytes with plenty of newlines and JSON punctuation.
fn arb_stream() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            3 => Just(b'\n'),
            6 => prop::sample::select(b"ab{}[]\":,0\\ \r".to_vec()),
            1 => any::<u8>(),
        ],
        0..400,
    )
}

/// Applies byte edits (overwrite, insert, delete) to `s`.
fn mutate(mut s: Vec<u8>, edits: &[(u16, u8, u8)]) -> Vec<u8> {
    for &(at, op, b) in edits {
        if s.is_empty() {
            s.push(b);
            continue;
        }
        let at = usize::from(at) % s.len();
        match op % 3 {
            0 => s[at] = b,
            1 => s.insert(at, b),
            _ => {
                s.remove(at);
            }
        }
    }
    s
}

/// Frames around a generated value, to mutate.
fn frame_text(g: &G, seed: u64, which: u8) -> String {
    let v = g.input(seed);
    match which % 5 {
        0 => format!(r#"{{"type":"done","value":{v}}}"#),
        1 => format!(r#"{{"type":"call","id":{},"global":"g","name":"n","args":{v}}}"#, seed % 100),
        2 => format!(r#"{{"type":"log","text":"x","truncated":{v}}}"#),
        3 => format!(r#"{{"type":"done","value":{v},"error":{{"kind":"exception","message":"m"}}}}"#),
        _ => format!(r#"{{"type":"boot-ack","x":{v}}}"#),
    }
}

/// Everything a host does with a line; must never panic.
fn exercise(line: &[u8]) {
    let _ = JsonValue::parse(line).map(|v| {
        let n = v.to_canonical_string().len();
        assert_eq!(v.canonical_len_within(usize::MAX), Some(n));
        let _ = v.depth();
    });
    if let Some(f) = validate_child_frame(line) {
        let mut out = Vec::new();
        f.encode(&mut out);
        assert_eq!(validate_child_frame(&out).as_ref(), Some(&f), "rebuilt frame validates to itself");
        if let ChildFrame::Done { value: Some(v), .. } | ChildFrame::Call { args: v, .. } = &f {
            let n = v.to_canonical_string().len();
            assert_eq!(meter_value(v, u64::MAX), Some(n));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn c_arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), cap in 0usize..64, chunks in prop::collection::vec(0usize..40, 0..6)) {
        exercise(&bytes);
        for line in bytes.split(|&b| b == b'\n') {
            exercise(line);
        }
        let a = split_chunked(&bytes, cap, &chunks);
        prop_assert_eq!(read_all(&bytes, cap, chunks), a);
    }

    #[test]
    fn c_mutated_frames_never_panic(g in arb_g(), seed in any::<u64>(), which in any::<u8>(), edits in prop::collection::vec(any::<(u16, u8, u8)>(), 0..4)) {
        let line = frame_text(&g, seed, which).into_bytes();
        exercise(&line);
        let m = mutate(line, &edits);
        exercise(&m);
    }

    #[test]
    fn d_chunking_does_not_change_events(input in arb_stream(), cap in 0usize..48, chunks in prop::collection::vec(0usize..50, 1..8)) {
        let whole = split_chunked(&input, cap, &[]);
        prop_assert_eq!(&whole, &split_model(&input, cap));
        prop_assert_eq!(&split_chunked(&input, cap, &chunks), &whole);
        prop_assert_eq!(&split_chunked(&input, cap, &[1]), &whole);
        prop_assert_eq!(&read_all(&input, cap, chunks), &whole);
    }
}

#[test]
fn generator_sanity() {
    // The hand-written canonical text agrees with the crate on a fixed case.
    let g = G::Obj(vec![(
        vec![('k', 0)],
        G::Arr(vec![
            G::Str(vec![('\u{1}', 0), ('é', 2), ('😀', 3), ('/', 0), ('"', 1), ('\n', 2)]),
            G::Num("-0.0e+10".into()),
        ]),
    )]);
    let input = g.input(7);
    assert!(input.contains("\\u00e9") && input.contains("\\uD83D\\uDE00") && input.contains("\\u000a"), "{input}");
    assert_eq!(parse(&input).to_canonical_string(), "{\"k\":[\"\\u0001é😀/\\\"\\n\",-0.0e+10]}");
}
