//! Validation of child→host frames: parse, check, and rebuild field by field.
//!
//! The program owns fd 3 as much as the bootstrap does, so every line is
//! hostile. A line becomes a [`ChildFrame`] only through [`parse_child_frame`],
//! which builds the frame from the fields it knows: unknown fields never ride
//! along, and junk is an error the caller drops (and counts) — never a panic.
//!
//! Rules (`docs/protocol.md`, "The host trusts nothing"), including these
//! decisions:
//! - the line is one JSON object; a UTF-8 BOM or invalid UTF-8 is junk;
//! - a frame that repeats one of its own field names is junk (which copy is
//!   meant would be ambiguous); duplicate keys nested inside `args` or
//!   `value` are carried as they are;
//! - `call.id` is an integer token (`0|[1-9][0-9]*`: no sign, fraction or
//!   exponent) in `0..=2^53-1`; `call.global` and `call.name` are strings;
//!   `call.args` must be present (it may be `null`);
//! - `log.text` is a string; `log.truncated` counts only when literally
//!   `true` — any other value is read as false and the frame is kept;
//! - `done.value` is any JSON; `done.error`, when present, is an object with a
//!   known `kind` and a string `message` (`"error": null` is junk, since the
//!   honest child omits the field);
//! - `display.data` is an object of strings whose keys (MIME types) are
//!   unique; `display.metadata`, when present, is an object (any members);
//!   `display.truncated` counts only when literally `true`, as for `log`;
//! - `boot-ack` carries nothing but its type.

use crate::frames::{ChildError, ChildErrorKind, ChildFrame, MAX_CALL_ID};
use crate::json::{JsonValue, ValueRef};
use crate::parse::ParseError;

/// Why a line was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("not JSON: {0}")]
    Json(#[from] ParseError),
    #[error("not a JSON object")]
    NotObject,
    #[error("missing or non-string \"type\"")]
    NoType,
    #[error("unknown frame type")]
    UnknownType,
    #[error("field {0:?} appears more than once")]
    DuplicateField(&'static str),
    #[error("missing field {0:?}")]
    Missing(&'static str),
    #[error("field {0:?} has the wrong type")]
    WrongType(&'static str),
    #[error("call id is not an integer token in 0..=2^53-1")]
    BadId,
    #[error("done.error.kind is not exception, invalid-output or output-limit")]
    BadKind,
    #[error("display.data names a MIME type more than once")]
    DuplicateMime,
}

/// Fields any child frame may use; everything else is ignored.
const KNOWN: [&str; 11] =
    ["type", "id", "global", "name", "args", "text", "truncated", "value", "error", "data", "metadata"];

/// Validates and rebuilds one line (without its `\n`). `None` = drop it.
pub fn validate_child_frame(line: &[u8]) -> Option<ChildFrame> {
    parse_child_frame(line).ok()
}

/// Like [`validate_child_frame`], with the reason a line was dropped.
pub fn parse_child_frame(line: &[u8]) -> Result<ChildFrame, FrameError> {
    let v = JsonValue::parse(line)?;
    let members = v.root().as_object().ok_or(FrameError::NotObject)?;
    let mut slots: [Option<ValueRef<'_>>; KNOWN.len()] = [None; KNOWN.len()];
    for (k, val) in members {
        if let Some(i) = KNOWN.iter().position(|n| *n == k) {
            let slot = slots.get_mut(i).ok_or(FrameError::NotObject)?;
            if slot.is_some() {
                return Err(FrameError::DuplicateField(KNOWN.get(i).copied().unwrap_or("?")));
            }
            *slot = Some(val);
        }
    }
    let field = |name: &'static str| -> Option<ValueRef<'_>> {
        KNOWN.iter().position(|n| *n == name).and_then(|i| slots.get(i).copied().flatten())
    };
    let string = |name: &'static str| -> Result<String, FrameError> {
        field(name).ok_or(FrameError::Missing(name))?.as_str().map(str::to_owned).ok_or(FrameError::WrongType(name))
    };
    let ty = field("type").and_then(|t| t.as_str()).ok_or(FrameError::NoType)?;
    match ty {
        "boot-ack" => Ok(ChildFrame::BootAck),
        "call" => {
            let id = field("id").ok_or(FrameError::Missing("id"))?;
            let id = id
                .as_number()
                .filter(|n| n.is_integer_token() && !n.as_str().starts_with('-'))
                .and_then(|n| n.as_u64())
                .filter(|&n| n <= MAX_CALL_ID)
                .ok_or(FrameError::BadId)?;
            let global = string("global")?;
            let name = string("name")?;
            let args = field("args").ok_or(FrameError::Missing("args"))?.to_owned();
            Ok(ChildFrame::Call { id, global, name, args })
        }
        "log" => {
            let text = string("text")?;
            let truncated = field("truncated").and_then(|t| t.as_bool()) == Some(true);
            Ok(ChildFrame::Log { text, truncated })
        }
        "display" => {
            let data = field("data").ok_or(FrameError::Missing("data"))?;
            let mut entries: Vec<(String, String)> = Vec::new();
            // A hostile line may name many keys: a set, not a scan per key.
            let mut seen = std::collections::HashSet::new();
            for (mime, text) in data.as_object().ok_or(FrameError::WrongType("data"))? {
                let text = text.as_str().ok_or(FrameError::WrongType("data"))?;
                if !seen.insert(mime) {
                    return Err(FrameError::DuplicateMime);
                }
                entries.push((mime.to_owned(), text.to_owned()));
            }
            let metadata = match field("metadata") {
                None => None,
                Some(m) if m.as_object().is_some() => Some(m.to_owned()),
                Some(_) => return Err(FrameError::WrongType("metadata")),
            };
            let truncated = field("truncated").and_then(|t| t.as_bool()) == Some(true);
            Ok(ChildFrame::Display { data: entries, metadata, truncated })
        }
        "done" => {
            let value = field("value").map(|v| v.to_owned());
            let error = match field("error") {
                None => None,
                Some(e) => Some(done_error(e)?),
            };
            Ok(ChildFrame::Done { value, error })
        }
        _ => Err(FrameError::UnknownType),
    }
}

fn done_error(e: ValueRef<'_>) -> Result<ChildError, FrameError> {
    let mut kind = None;
    let mut message = None;
    for (k, v) in e.as_object().ok_or(FrameError::WrongType("error"))? {
        let slot = match k {
            "kind" => &mut kind,
            "message" => &mut message,
            _ => continue,
        };
        if slot.is_some() {
            return Err(FrameError::DuplicateField(if k == "kind" { "kind" } else { "message" }));
        }
        *slot = Some(v);
    }
    let kind = kind
        .ok_or(FrameError::Missing("kind"))?
        .as_str()
        .and_then(ChildErrorKind::from_wire)
        .ok_or(FrameError::BadKind)?;
    let message =
        message.ok_or(FrameError::Missing("message"))?.as_str().ok_or(FrameError::WrongType("message"))?.to_owned();
    Ok(ChildError { kind, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> ChildFrame {
        parse_child_frame(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"))
    }
    fn bad(line: &[u8]) -> FrameError {
        parse_child_frame(line).expect_err(&String::from_utf8_lossy(line))
    }
    fn reencode(f: &ChildFrame) -> String {
        let mut out = Vec::new();
        f.encode(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn boot_ack() {
        assert_eq!(ok(r#"{"type":"boot-ack"}"#), ChildFrame::BootAck);
        assert_eq!(reencode(&ok(r#"{"type":"boot-ack","evil":[1,2]}"#)), r#"{"type":"boot-ack"}"#);
    }

    #[test]
    fn unknown_fields_never_ride_along() {
        let f = ok(r#"{"x":1,"type":"call","id":3,"global":"t","name":"n","args":{"a":[1.50]},"__proto__":{}}"#);
        assert_eq!(reencode(&f), r#"{"type":"call","id":3,"global":"t","name":"n","args":{"a":[1.50]}}"#);
    }

    #[test]
    fn call_rules() {
        assert!(matches!(
            ok(r#"{"type":"call","id":0,"global":"t","name":"","args":null}"#),
            ChildFrame::Call { id: 0, .. }
        ));
        assert!(matches!(
            ok(r#"{"type":"call","id":9007199254740991,"global":"t","name":"n","args":1}"#),
            ChildFrame::Call { id: MAX_CALL_ID, .. }
        ));
        let call = |id: &str| format!(r#"{{"type":"call","id":{id},"global":"t","name":"n","args":null}}"#);
        for id in [
            "9007199254740992",
            "-1",
            "1.0",
            "1e0",
            "-0",
            "\"1\"",
            "null",
            "true",
            "[1]",
            "1.5",
            "99999999999999999999999",
        ] {
            assert_eq!(bad(call(id).as_bytes()), FrameError::BadId, "{id}");
        }
        assert_eq!(bad(br#"{"type":"call","global":"t","name":"n","args":1}"#), FrameError::Missing("id"));
        assert_eq!(bad(br#"{"type":"call","id":1,"global":"t","name":"n"}"#), FrameError::Missing("args"));
        assert_eq!(bad(br#"{"type":"call","id":1,"name":"n","args":1}"#), FrameError::Missing("global"));
        assert_eq!(bad(br#"{"type":"call","id":1,"global":3,"name":"n","args":1}"#), FrameError::WrongType("global"));
        assert_eq!(bad(br#"{"type":"call","id":1,"global":"t","name":null,"args":1}"#), FrameError::WrongType("name"));
        assert_eq!(
            bad(br#"{"type":"call","id":1,"id":2,"global":"t","name":"n","args":1}"#),
            FrameError::DuplicateField("id")
        );
    }

    #[test]
    fn log_rules() {
        assert_eq!(ok(r#"{"type":"log","text":"hi"}"#), ChildFrame::Log { text: "hi".into(), truncated: false });
        assert_eq!(
            ok(r#"{"type":"log","text":"hi","truncated":true}"#),
            ChildFrame::Log { text: "hi".into(), truncated: true }
        );
        for t in ["false", "\"true\"", "1", "null", "[true]", "{}"] {
            let line = format!(r#"{{"type":"log","text":"x","truncated":{t}}}"#);
            assert_eq!(ok(&line), ChildFrame::Log { text: "x".into(), truncated: false }, "{t}");
        }
        assert_eq!(bad(br#"{"type":"log"}"#), FrameError::Missing("text"));
        assert_eq!(bad(br#"{"type":"log","text":["x"]}"#), FrameError::WrongType("text"));
        assert_eq!(bad(br#"{"type":"log","text":"a","text":"b"}"#), FrameError::DuplicateField("text"));
    }

    #[test]
    fn done_rules() {
        assert_eq!(ok(r#"{"type":"done"}"#), ChildFrame::Done { value: None, error: None });
        assert_eq!(
            ok(r#"{"type":"done","value":null}"#),
            ChildFrame::Done { value: Some(JsonValue::null()), error: None }
        );
        let forged = ok(r#"{"type":"done","value":1,"error":{"kind":"exception","message":"m","extra":1}}"#);
        assert_eq!(reencode(&forged), r#"{"type":"done","value":1,"error":{"kind":"exception","message":"m"}}"#);
        for kind in ["exception", "invalid-output", "output-limit"] {
            let line = format!(r#"{{"type":"done","error":{{"kind":"{kind}","message":""}}}}"#);
            assert!(matches!(ok(&line), ChildFrame::Done { error: Some(_), .. }));
        }
        for kind in ["\"timeout\"", "\"abort\"", "\"worker-exit\"", "\"Exception\"", "1", "null"] {
            let line = format!(r#"{{"type":"done","error":{{"kind":{kind},"message":""}}}}"#);
            assert_eq!(bad(line.as_bytes()), FrameError::BadKind, "{kind}");
        }
        assert_eq!(bad(br#"{"type":"done","error":null}"#), FrameError::WrongType("error"));
        assert_eq!(bad(br#"{"type":"done","error":"boom"}"#), FrameError::WrongType("error"));
        assert_eq!(bad(br#"{"type":"done","error":{"kind":"exception"}}"#), FrameError::Missing("message"));
        assert_eq!(bad(br#"{"type":"done","error":{"message":"m"}}"#), FrameError::Missing("kind"));
        assert_eq!(
            bad(br#"{"type":"done","error":{"kind":"exception","message":5}}"#),
            FrameError::WrongType("message")
        );
        assert_eq!(
            bad(br#"{"type":"done","error":{"kind":"exception","kind":"exception","message":""}}"#),
            FrameError::DuplicateField("kind")
        );
        assert_eq!(bad(br#"{"type":"done","value":1,"value":2}"#), FrameError::DuplicateField("value"));
    }

    #[test]
    fn display_rules() {
        assert_eq!(
            ok(r#"{"type":"display","data":{"text/plain":"x","image/png":"iVBO"}}"#),
            ChildFrame::Display {
                data: vec![("text/plain".into(), "x".into()), ("image/png".into(), "iVBO".into())],
                metadata: None,
                truncated: false
            }
        );
        let full = ok(r#"{"type":"display","evil":1,"data":{},"metadata":{"a":[1,{"b":null}]},"truncated":true}"#);
        assert_eq!(reencode(&full), r#"{"type":"display","data":{},"metadata":{"a":[1,{"b":null}]},"truncated":true}"#);
        for t in ["false", "\"true\"", "1", "null"] {
            let line = format!(r#"{{"type":"display","data":{{}},"truncated":{t}}}"#);
            assert!(matches!(ok(&line), ChildFrame::Display { truncated: false, .. }), "{t}");
        }
        assert_eq!(bad(br#"{"type":"display"}"#), FrameError::Missing("data"));
        for data in ["[]", "\"x\"", "null", r#"{"a":1}"#, r#"{"a":"b","c":{}}"#, r#"{"a":null}"#] {
            let line = format!(r#"{{"type":"display","data":{data}}}"#);
            assert_eq!(bad(line.as_bytes()), FrameError::WrongType("data"), "{data}");
        }
        for metadata in ["[]", "\"x\"", "null", "1", "true"] {
            let line = format!(r#"{{"type":"display","data":{{}},"metadata":{metadata}}}"#);
            assert_eq!(bad(line.as_bytes()), FrameError::WrongType("metadata"), "{metadata}");
        }
        assert_eq!(bad(br#"{"type":"display","data":{"a":"1","a":"2"}}"#), FrameError::DuplicateMime);
        assert_eq!(bad(br#"{"type":"display","data":{},"data":{}}"#), FrameError::DuplicateField("data"));
    }

    #[test]
    fn junk() {
        assert!(matches!(bad(b""), FrameError::Json(_)));
        assert!(matches!(bad(b"\xEF\xBB\xBF{\"type\":\"boot-ack\"}"), FrameError::Json(_)));
        assert!(matches!(bad(b"{\"type\":\"boot-ack\"} x"), FrameError::Json(_)));
        assert!(matches!(bad(b"{\"type\":\"log\",\"text\":\"\xff\"}"), FrameError::Json(_)));
        assert!(matches!(bad(b"{\"type\":\"log\",\"text\":\"\\ud800\"}"), FrameError::Json(_)));
        assert!(matches!(bad(b"{\"type\":\"done\",\"value\":NaN}"), FrameError::Json(_)));
        assert!(matches!(bad(b"{\"type\":\"done\",\"value\":Infinity}"), FrameError::Json(_)));
        assert_eq!(bad(b"[]"), FrameError::NotObject);
        assert_eq!(bad(b"\"type\""), FrameError::NotObject);
        assert_eq!(bad(b"{}"), FrameError::NoType);
        assert_eq!(bad(b"{\"type\":1}"), FrameError::NoType);
        assert_eq!(bad(b"{\"type\":\"reply\"}"), FrameError::UnknownType);
        assert_eq!(bad(b"{\"type\":\"boot\"}"), FrameError::UnknownType);
        assert_eq!(bad(b"{\"type\":\"boot-ack\",\"type\":\"done\"}"), FrameError::DuplicateField("type"));
        assert_eq!(validate_child_frame(b"{\"type\":\"boot-ack\"}\r"), Some(ChildFrame::BootAck));
    }
}
