//! Differential tests against `serde_json` (built with `arbitrary_precision`,
//! so its numbers keep their text too).
//!
//! On every input both parsers must agree on acceptance, with two documented
//! exceptions: serde_json refuses nesting past 128 (we do not), and with
//! `arbitrary_precision` it reads an object keyed `$serde_json::private::Number`
//! as a number (see [`serde_number_token_is_a_serde_json_quirk`]). On accepted
//! input our canonical encoding must equal `serde_json::to_string` once the
//! two known, value-preserving differences are taken out:
//!
//! - serde_json stores an exponent as `e` plus an explicit sign (`1E5` is
//!   `1e+5` to it); we keep the token as sent;
//! - serde_json's map is a `BTreeMap` unless `preserve_order` is on, so its
//!   keys come out sorted; we keep document order. Inputs with duplicate
//!   keys are skipped for the encoding comparison (serde keeps the last one,
//!   we keep all of them).
//!
//! String escaping must match exactly: both write `\"`, `\\`, `\b \f \n \r
//! \t` and `\u00XX` (lower-case hex) for the other control characters, and
//! everything else raw.
//!
//! Also here: a 1,000,000-deep value crossing the public API (validate,
//! meter, encode, drop) on a 256 KiB stack.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use proptest::prelude::*;
use pycage_protocol::{meter_value, validate_child_frame, write_json_string, ChildFrame, JsonValue, Kind, ValueRef};
use support::{has_key, serde_number_text, SERDE_NUMBER_TOKEN};

fn serde_preserves_order() -> bool {
    let mut m = serde_json::Map::new();
    m.insert("b".into(), serde_json::Value::Null);
    m.insert("a".into(), serde_json::Value::Null);
    m.keys().next().map(String::as_str) == Some("b")
}

/// Our value written the way serde_json would write it (numbers respelled,
/// keys sorted unless serde preserves order). Strings go through our own
/// escaper, which is what is being compared. `None` if some object repeats a
/// key. Recursive: only used on shallow test values.
fn serde_style(v: ValueRef<'_>, sort: bool, out: &mut Vec<u8>) -> Option<()> {
    match v.kind() {
        Kind::Null => out.extend_from_slice(b"null"),
        Kind::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        Kind::Number(n) => out.extend_from_slice(serde_number_text(n.as_str()).as_bytes()),
        Kind::String(s) => write_json_string(out, s),
        Kind::Array(it) => {
            out.push(b'[');
            for (i, x) in it.enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_style(x, sort, out)?;
            }
            out.push(b']');
        }
        Kind::Object(it) => {
            let mut members: Vec<(&str, ValueRef<'_>)> = it.collect();
            let n = members.len();
            let mut keys: Vec<&str> = members.iter().map(|(k, _)| *k).collect();
            keys.sort_unstable();
            keys.dedup();
            if keys.len() != n {
                return None;
            }
            if sort {
                members.sort_by_key(|(k, _)| *k);
            }
            out.push(b'{');
            for (i, (k, x)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json_string(out, k);
                out.push(b':');
                serde_style(x, sort, out)?;
            }
            out.push(b'}');
        }
    }
    Some(())
}

/// What happened when both parsers saw `input`.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    BothRefused,
    /// Both accepted and the encodings agree (`true` if compared exactly,
    /// without respelling or sorting).
    Agree {
        exact: bool,
    },
    /// Both accepted; the encodings are not comparable (duplicate keys, or
    /// serde_json's number token).
    Skipped,
    /// We accept and serde_json refuses, for one of the documented reasons.
    TheyRefuse,
}

fn compare(input: &[u8]) -> Outcome {
    let ours = JsonValue::parse(input);
    let theirs = serde_json::from_slice::<serde_json::Value>(input);
    let shown = String::from_utf8_lossy(input);
    match (ours, theirs) {
        (Err(_), Err(_)) => Outcome::BothRefused,
        (Ok(v), Err(e)) => {
            // The allowed differences: serde_json's recursion limit and its number token.
            assert!(
                v.depth() > 128 || has_key(v.root(), SERDE_NUMBER_TOKEN),
                "we accept, serde_json refuses ({e}): {shown:?}"
            );
            Outcome::TheyRefuse
        }
        (Err(e), Ok(_)) => panic!("we refuse ({e}), serde_json accepts: {shown:?}"),
        (Ok(v), Ok(sv)) => {
            let theirs = serde_json::to_string(&sv).unwrap();
            let ours = v.to_canonical_string();
            assert_eq!(v.canonical_len_within(usize::MAX), Some(ours.len()));
            if has_key(v.root(), SERDE_NUMBER_TOKEN) {
                // serde_json turned an object into a number.
                return Outcome::Skipped;
            }
            let mut styled = Vec::new();
            let sort = !serde_preserves_order();
            if serde_style(v.root(), sort, &mut styled).is_none() {
                return Outcome::Skipped;
            }
            assert_eq!(String::from_utf8(styled).unwrap(), theirs, "input {shown:?}");
            Outcome::Agree { exact: ours == theirs }
        }
    }
}

/// Inputs chosen for edge cases in the grammar, escapes, numbers and UTF-8.
const TRICKY: &[&[u8]] = &[
    // Scalars and whitespace.
    b"null",
    b"true",
    b"false",
    b" null ",
    b"\t\n\r null \r\n\t",
    b"nul",
    b"nulll",
    b"True",
    b"NULL",
    b"",
    b" ",
    b"\x0cnull",
    b"null\x0c",
    b"\xc2\xa0null",
    b"\xef\xbb\xbfnull",
    b"null\x00",
    // Numbers.
    b"0",
    b"-0",
    b"-0.0",
    b"0.0",
    b"-0.0e+10",
    b"1E5",
    b"1e5",
    b"1e+5",
    b"1E-5",
    b"1e05",
    b"1.5E+0",
    b"123456789012345678901234567890",
    b"-123456789012345678901234567890.123456789e-999",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"4.9e-324",
    b"1.7976931348623157e308",
    b"0.1",
    b"01",
    b"-01",
    b"00",
    b"1.",
    b".5",
    b"-.5",
    b"+1",
    b"1e",
    b"1e+",
    b"1e-",
    b"1.e5",
    b"-",
    b"--1",
    b"0x10",
    b"1_000",
    b"NaN",
    b"-NaN",
    b"Infinity",
    b"-Infinity",
    b"1.0.0",
    b"1e5e5",
    b"0e",
    b"[1,]",
    b"[-]",
    b"[01]",
    b"[1.]",
    b"[1 2]",
    b"1 2",
    b"[1e1]",
    b"[0E0]",
    b"[-0e-0]",
    // Strings and escapes.
    br#""""#,
    br#""a""#,
    br#""\"\\\/\b\f\n\r\t""#,
    br#""\u0000\u001f\u001F\u007f\u0080""#,
    br#""\u00e9\u00E9""#,
    br#""\ud83d\ude00""#,
    br#""\uD83D\uDE00""#,
    br#""\ud800""#,
    br#""\udc00""#,
    br#""\ud800\u0041""#,
    br#""\ud800\ud800\udc00""#,
    br#""\udbff\udfff""#,
    br#""\ud800x""#,
    br#""\ud800\""#,
    br#""\ud800\n""#,
    br#""\u12""#,
    br#""\u12g4""#,
    br#""\x41""#,
    br#""\a""#,
    br#""\'""#,
    br#""\U0041""#,
    br#""\""#,
    b"\"abc",
    b"\"a\nb\"",
    b"\"a\tb\"",
    b"\"\x00\"",
    b"\"\x1f\"",
    b"\"\x7f\"",
    "\"é😀\u{2028}\u{2029}\u{fffd}\u{10ffff}\"".as_bytes(),
    b"\"\xff\"",
    b"\"\xc3\"",
    b"\"\xed\xa0\x80\"",
    b"\"\xf4\x90\x80\x80\"",
    b"\"\xc0\xaf\"",
    b"\"\xe2\x82\"",
    b"'a'",
    // Containers.
    b"[]",
    b"{}",
    b"[ ]",
    b"{ }",
    b"[[]]",
    b"[[],{}]",
    b"[",
    b"]",
    b"{",
    b"}",
    b"[}",
    b"{]",
    b"[[]",
    b"[]]",
    b"{}}",
    br#"{"a":1}"#,
    br#"{"a" : 1 , "b" : [ 2 , { "c" : null } ] }"#,
    br#"{"a":1,}"#,
    br#"{"a":1"#,
    br#"{"a"}"#,
    br#"{"a":}"#,
    br#"{a:1}"#,
    br#"{1:1}"#,
    br#"{"a":1 "b":2}"#,
    br#"{"a":1,"a":2}"#,
    br#"{"b":1,"a":2}"#,
    br#"{"\u0061":1,"a":2}"#,
    br#"{"":0}"#,
    br#"[1,[2,[3,[4]]]]"#,
    br#"[{"x":[{"y":{}}]}]"#,
    br#"{"type":"done","value":[1,"two",{"3":4.0e0}]}"#,
    b"[] []",
    br#"{"$serde_json::private::Number":12345678}"#,
    br#"[{"$serde_json::private::Number":"1"}]"#,
    b"{}x",
    b"[]\n",
    b"[]\x00",
    b"\n[\n1\n,\n2\n]\n",
];

#[test]
fn tricky_corpus_agrees_with_serde_json() {
    let mut agree = 0;
    let mut exact = 0;
    for input in TRICKY {
        match compare(input) {
            Outcome::Agree { exact: e } => {
                agree += 1;
                exact += usize::from(e);
            }
            Outcome::BothRefused | Outcome::Skipped | Outcome::TheyRefuse => {}
        }
    }
    // Keep the corpus honest: plenty of both outcomes.
    assert!(agree > 40, "{agree}");
    assert!(exact > 30, "{exact}");
}

#[test]
fn serde_json_refuses_depth_we_accept() {
    let n = 10_000;
    let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert_eq!(JsonValue::parse(deep.as_bytes()).unwrap().depth(), n);
    let err = serde_json::from_str::<serde_json::Value>(&deep).unwrap_err();
    assert!(err.to_string().contains("recursion limit"), "{err}");
}

/// Found by the `frames` fuzz target: with `arbitrary_precision`, serde_json
/// decodes an object whose key is `$serde_json::private::Number` as a number
/// (its private encoding of exact numbers), so text a child controls can
/// forge a number or make serde_json refuse valid JSON. To us it is an
/// ordinary object, kept and re-encoded exactly, which is one more reason
/// pycage never parses child data with serde_json.
#[test]
fn serde_number_token_is_a_serde_json_quirk() {
    let forged = br#"{"$serde_json::private::Number":"1e999"}"#;
    let theirs = serde_json::from_slice::<serde_json::Value>(forged).unwrap();
    assert!(theirs.is_number(), "serde_json reads the object as the number {theirs}");
    let ours = JsonValue::parse(forged).unwrap();
    assert!(ours.root().as_object().is_some());
    assert_eq!(ours.to_canonical_string().as_bytes(), forged);
    assert_eq!(compare(forged), Outcome::Skipped);

    let refused = br#"{"$serde_json::private::Number":12345678}"#;
    assert!(serde_json::from_slice::<serde_json::Value>(refused).is_err());
    assert_eq!(JsonValue::parse(refused).unwrap().to_canonical_string().as_bytes(), refused);
    assert_eq!(compare(refused), Outcome::TheyRefuse);

    let line = br#"{"type":"done","value":{"$serde_json::private::Number":12345678}}"#;
    let frame = validate_child_frame(line).unwrap();
    let mut out = Vec::new();
    frame.encode(&mut out);
    assert_eq!(out, line);
}

/// Tokens whose concatenations are sometimes JSON and often nearly so.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    " ",
    "\n",
    "\t",
    "\r",
    "null",
    "true",
    "false",
    "nul",
    "0",
    "-0",
    "1",
    "-",
    "01",
    "1.5",
    "1.",
    ".5",
    "e5",
    "E+5",
    "1e-7",
    "12345678901234567890123",
    "\"a\"",
    "\"\"",
    "\"\\u00e9\"",
    "\"\\ud83d\\ude00\"",
    "\"\\ud800\"",
    "\"\\udc00\"",
    "\"\\n\\t\\\\\\\"\"",
    "\"\\x\"",
    "\"\u{1}\"",
    "\"é\"",
    "\"",
    "\\",
    "\"k\":",
    "\u{0}",
    "\u{c}",
    "NaN",
];

fn arb_soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(TOKENS), 1..24).prop_map(|ts| ts.concat().into_bytes())
}

/// A `serde_json::Value` with unique keys (it is a map) and numbers that
/// serde_json itself spelled.
fn arb_serde() -> impl Strategy<Value = serde_json::Value> {
    let number = "-?(0|[1-9][0-9]{0,30})(\\.[0-9]{1,15})?([eE][+-]?[0-9]{1,3})?"
        .prop_map(|t| serde_json::Value::Number(t.parse().unwrap()));
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        number,
        any::<String>().prop_map(serde_json::Value::String),
        "[\\x00-\\x1f\"\\\\/a-z\u{7f}-\u{3000}]{0,12}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(6, 80, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..8)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Random token soup: same acceptance, same encoding.
    #[test]
    fn token_soup_agrees_with_serde_json(input in arb_soup()) {
        compare(&input);
    }

    /// Byte-level mutations of valid documents: same acceptance.
    #[test]
    fn mutated_documents_agree_with_serde_json(v in arb_serde(), edits in prop::collection::vec(any::<(u16, u8)>(), 1..4)) {
        let mut s = serde_json::to_string_pretty(&v).unwrap().into_bytes();
        for (at, b) in edits {
            let at = usize::from(at) % (s.len() + 1);
            if b % 2 == 0 && at < s.len() {
                s.remove(at);
            } else {
                let alphabet = b"{}[],:\"\\ 0eE-.u\x01\xff";
                s.insert(at, alphabet[usize::from(b) % alphabet.len()]);
            }
        }
        compare(&s);
    }

    /// serde_json's own output, compact or pretty, parses to a value whose
    /// canonical encoding is exactly serde_json's compact output.
    #[test]
    fn serde_output_round_trips_exactly(v in arb_serde()) {
        let compact = serde_json::to_string(&v).unwrap();
        let ours = JsonValue::parse(compact.as_bytes()).unwrap();
        let enc = ours.to_canonical_string();
        if serde_preserves_order() || !compact.contains('{') {
            prop_assert_eq!(&enc, &compact);
        }
        prop_assert_eq!(meter_value(&ours, u64::MAX), Some(compact.len()));
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        prop_assert_eq!(JsonValue::parse(pretty.as_bytes()).unwrap(), ours.clone());
        prop_assert_eq!(compare(compact.as_bytes()), Outcome::Agree { exact: true });
        prop_assert_eq!(JsonValue::from_serde(&v).unwrap(), ours);
    }
}

/// The protocol's promise (`docs/protocol.md`): "a 1,000,000-deep array below
/// the byte budget crosses intact." Parse, validate, meter, re-encode and drop on a 256 KiB stack,
/// through the public API only.
#[test]
fn million_deep_value_crosses_on_a_small_stack() {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let n = 1_000_000;
            let mut line = br#"{"type":"done","value":"#.to_vec();
            line.resize(line.len() + n, b'[');
            line.resize(line.len() + n, b']');
            line.push(b'}');

            let frame = validate_child_frame(&line).expect("a deep done frame validates");
            let ChildFrame::Done { value: Some(v), error: None } = &frame else {
                panic!("not a done frame with a value");
            };
            assert_eq!(v.depth(), n);
            assert_eq!(v.node_count(), n);
            assert_eq!(meter_value(v, u64::MAX), Some(2 * n));
            assert_eq!(meter_value(v, 2 * n as u64 - 1), None);
            assert_eq!(meter_value(v, 1024 * 1024), None, "over the default 1 MiB value budget");

            let mut out = Vec::new();
            frame.encode(&mut out);
            assert_eq!(out, line, "the rebuilt frame is the line itself");
            assert_eq!(validate_child_frame(&out).as_ref(), Some(&frame));
            assert!(v.to_serde().is_err(), "serde conversion refuses, it does not overflow");

            // Objects too, and a call's args.
            let mut obj = br#"{"type":"call","id":1,"global":"g","name":"n","args":"#.to_vec();
            for _ in 0..n / 8 {
                obj.extend_from_slice(br#"{"a":"#);
            }
            obj.push(b'1');
            obj.resize(obj.len() + n / 8, b'}');
            obj.push(b'}');
            let call = validate_child_frame(&obj).expect("a deep call validates");
            let ChildFrame::Call { args, .. } = &call else { panic!("not a call") };
            assert_eq!(args.depth(), n / 8);
            let mut out = Vec::new();
            call.encode(&mut out);
            assert_eq!(out, obj);
            drop(call);
            drop(frame);
        })
        .unwrap()
        .join()
        .unwrap();
}
