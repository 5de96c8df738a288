//! Conversions between [`JsonValue`] and `serde_json::Value` (feature
//! `serde`), for embedders that already speak serde. The tape stays the
//! source of truth: `serde_json::Value` parses and drops recursively and,
//! without `arbitrary_precision`, cannot hold every JSON number.

use std::sync::OnceLock;

use crate::json::{BuildError, JsonBuilder, JsonValue, Kind, ValueRef};
use crate::number::Number;

/// Deepest value [`JsonValue::to_serde`] converts: `serde_json::Value` drops
/// recursively, so deeper values would risk the caller's stack. Matches
/// `serde_json`'s own parser limit.
pub const SERDE_MAX_DEPTH: usize = 128;

/// Why a conversion to `serde_json::Value` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToSerdeError {
    #[error("value is {0} levels deep; serde_json::Value conversion stops at {SERDE_MAX_DEPTH}")]
    TooDeep(usize),
    #[error("number {0} is not representable by serde_json")]
    Number(String),
}

impl JsonValue {
    /// Converts to `serde_json::Value`. Numbers keep their value exactly or
    /// the conversion is refused: with serde_json's `arbitrary_precision`
    /// feature every number converts; without it, a number converts when it
    /// is an `i64`, a `u64` or exactly an `f64`. serde_json
    /// may re-spell numbers (`1E5` becomes `1e+5`); objects follow serde_json's
    /// map semantics (keys sorted, the last of duplicate keys kept). Refuses
    /// values deeper than [`SERDE_MAX_DEPTH`]. Use the tape itself when the
    /// exact text matters.
    pub fn to_serde(&self) -> Result<serde_json::Value, ToSerdeError> {
        let depth = self.depth();
        if depth > SERDE_MAX_DEPTH {
            return Err(ToSerdeError::TooDeep(depth));
        }
        to_serde_bounded(self.root())
    }

    /// Converts from `serde_json::Value`, iteratively.
    pub fn from_serde(v: &serde_json::Value) -> Result<Self, BuildError> {
        enum It<'a> {
            Arr(std::slice::Iter<'a, serde_json::Value>),
            Obj(serde_json::map::Iter<'a>),
        }
        let mut b = JsonBuilder::new();
        let mut stack: Vec<It<'_>> = Vec::new();
        let mut next = Some(v);
        loop {
            if let Some(v) = next.take() {
                match v {
                    serde_json::Value::Null => b.null()?,
                    serde_json::Value::Bool(x) => b.bool(*x)?,
                    serde_json::Value::Number(n) => b.number(&n.to_string())?,
                    serde_json::Value::String(s) => b.string(s)?,
                    serde_json::Value::Array(a) => {
                        b.begin_array()?;
                        stack.push(It::Arr(a.iter()));
                    }
                    serde_json::Value::Object(o) => {
                        b.begin_object()?;
                        stack.push(It::Obj(o.iter()));
                    }
                }
            }
            match stack.last_mut() {
                None => break,
                Some(It::Arr(it)) => match it.next() {
                    Some(v) => next = Some(v),
                    None => {
                        stack.pop();
                        b.end()?;
                    }
                },
                Some(It::Obj(it)) => match it.next() {
                    Some((k, v)) => {
                        b.key(k)?;
                        next = Some(v);
                    }
                    None => {
                        stack.pop();
                        b.end()?;
                    }
                },
            }
        }
        b.finish()
    }
}

// Recursion here is bounded by SERDE_MAX_DEPTH, checked by the caller.
fn to_serde_bounded(v: ValueRef<'_>) -> Result<serde_json::Value, ToSerdeError> {
    Ok(match v.kind() {
        Kind::Null => serde_json::Value::Null,
        Kind::Bool(b) => serde_json::Value::Bool(b),
        Kind::Number(n) => {
            serde_json::Value::Number(to_serde_number(n).ok_or_else(|| ToSerdeError::Number(n.as_str().to_owned()))?)
        }
        Kind::String(s) => serde_json::Value::String(s.to_owned()),
        Kind::Array(it) => serde_json::Value::Array(it.map(to_serde_bounded).collect::<Result<_, _>>()?),
        Kind::Object(it) => {
            let mut m = serde_json::Map::new();
            for (k, v) in it {
                m.insert(k.to_owned(), to_serde_bounded(v)?);
            }
            serde_json::Value::Object(m)
        }
    })
}

/// Whether the serde_json in this build keeps number text
/// (`arbitrary_precision`, a feature another crate may turn on).
fn serde_keeps_number_text() -> bool {
    static KEEPS: OnceLock<bool> = OnceLock::new();
    *KEEPS.get_or_init(|| {
        const PROBE: &str = "18446744073709551616";
        PROBE.parse::<serde_json::Number>().map(|n| n.to_string() == PROBE).unwrap_or(false)
    })
}

/// The exact serde_json number for `n`, or `None` when this build of
/// serde_json cannot hold it without rounding.
fn to_serde_number(n: Number<'_>) -> Option<serde_json::Number> {
    if serde_keeps_number_text() {
        return n.as_str().parse().ok();
    }
    if let Some(i) = n.as_i64() {
        return Some(i.into());
    }
    if let Some(u) = n.as_u64() {
        return Some(u.into());
    }
    n.as_f64().and_then(serde_json::Number::from_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_round_trip_keeps_numbers_exact() {
        let src = br#"{"big":123456789012345678901234567890,"f":1.10,"e":-0.0,"s":"\u00e9\n","a":[[],{}]}"#;
        let v = JsonValue::parse(src).unwrap();
        let s = v.to_serde().unwrap();
        assert_eq!(s["big"].to_string(), "123456789012345678901234567890");
        let back = JsonValue::from_serde(&s).unwrap();
        assert_eq!(back.root().get("f").unwrap().as_number().unwrap().as_str(), "1.10");
        assert_eq!(back.root().get("e").unwrap().as_number().unwrap().as_str(), "-0.0");
    }

    #[test]
    fn to_serde_refuses_deep_values() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let v = JsonValue::parse(deep.as_bytes()).unwrap();
        assert_eq!(v.depth(), 200);
        assert_eq!(v.to_serde(), Err(ToSerdeError::TooDeep(200)));
    }

    #[test]
    fn numbers_convert_exactly_or_not_at_all() {
        for text in ["0", "-1", "18446744073709551615", "-9223372036854775808", "2.5", "-0.0", "1e300"] {
            let v = JsonValue::parse(text.as_bytes()).unwrap();
            let back = JsonValue::from_serde(&v.to_serde().unwrap()).unwrap();
            let (a, b) = (v.root().as_number().unwrap(), back.root().as_number().unwrap());
            assert_eq!(a.as_f64(), b.as_f64(), "{text}");
        }
        // This test build turns on arbitrary_precision, so big numbers convert.
        assert!(serde_keeps_number_text());
        let big = Number::new("123456789012345678901234567890").unwrap();
        assert_eq!(to_serde_number(big).unwrap().to_string(), "123456789012345678901234567890");
    }
}
