//! SHA-256 digests of what a journal identifies without keeping: a call's
//! arguments, and the bindings a run was given.
//!
//! Arguments are digested in their canonical JSON encoding (the wire's), so
//! the same value gives the same digest in any process. The bindings digest
//! covers every namespace's global, error class, docs and member names and
//! docs (the docs carry a binding's schema, as its stub shows it); it does
//! not cover which calls need approval, which a caller may change between a
//! suspension and its resume.

use std::fmt;

use pycage_protocol::JsonValue;
use sha2::{Digest as _, Sha256};

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Lowercase hex, all 64 digits.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(hex_digit(b >> 4));
            s.push(hex_digit(b & 15));
        }
        s
    }

    /// The digest of 64 hex digits (either case).
    pub fn from_hex(text: &str) -> Option<Digest> {
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            let hi = hex_value(*pair.first()?)?;
            let lo = hex_value(*pair.get(1)?)?;
            *o = (hi << 4) | lo;
        }
        Some(Digest(out))
    }

    /// The first 12 hex digits, for messages.
    pub fn short(&self) -> String {
        let mut hex = self.to_hex();
        hex.truncate(12);
        hex
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.short())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// The lowercase hex digit of a nibble (0-15).
fn hex_digit(nibble: u8) -> char {
    char::from_digit(u32::from(nibble), 16).unwrap_or('0')
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The digest of a call's arguments (their canonical JSON encoding).
pub fn args_digest(args: &JsonValue) -> Digest {
    let mut text = Vec::new();
    args.write_canonical(&mut text);
    Digest(Sha256::digest(&text).into())
}

/// Builds the digest of a run's bindings: feed every namespace in the
/// run's order, each with its members in name order.
#[derive(Clone, Default)]
pub struct BindingsDigest {
    hasher: Sha256,
    names: Vec<String>,
}

impl BindingsDigest {
    pub fn new() -> Self {
        Self::default()
    }

    /// One namespace: its global, its error class (name and member-name
    /// property) and its doc.
    pub fn namespace(&mut self, global: &str, error_class: Option<(&str, &str)>, doc: Option<&str>) {
        self.field(b'N', global);
        match error_class {
            Some((name, property)) => {
                self.field(b'E', name);
                self.field(b'P', property);
            }
            None => self.field(b'e', ""),
        }
        self.field(if doc.is_some() { b'D' } else { b'd' }, doc.unwrap_or(""));
    }

    /// One member of the namespace fed last, with its doc.
    pub fn member(&mut self, global: &str, name: &str, doc: Option<&str>) {
        self.field(b'M', name);
        self.field(if doc.is_some() { b'D' } else { b'd' }, doc.unwrap_or(""));
        self.names.push(format!("{global}.{name}"));
    }

    /// The digest, and every member as `global.name` in the order fed.
    pub fn finish(self) -> (Digest, Vec<String>) {
        (Digest(self.hasher.finalize().into()), self.names)
    }

    /// A tag and a length-prefixed string: no two different feeds hash
    /// the same bytes.
    fn field(&mut self, tag: u8, text: &str) {
        self.hasher.update([tag]);
        self.hasher.update((text.len() as u64).to_be_bytes());
        self.hasher.update(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_junk() {
        let d = args_digest(&JsonValue::parse(br#"{"a":[1,2.50,"x"]}"#).unwrap());
        assert_eq!(Digest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(Digest::from_hex(&d.to_hex().to_uppercase()), Some(d));
        assert_eq!(Digest::from_hex("zz"), None);
        assert_eq!(Digest::from_hex(&"g".repeat(64)), None);
        assert_eq!(d.short().len(), 12);
    }

    #[test]
    fn args_digest_is_of_the_exact_canonical_text() {
        let a = args_digest(&JsonValue::parse(br#"{ "n" : 1.0 }"#).unwrap());
        let b = args_digest(&JsonValue::parse(br#"{"n":1.0}"#).unwrap());
        let c = args_digest(&JsonValue::parse(br#"{"n":1}"#).unwrap());
        assert_eq!(a, b, "whitespace is not part of the value");
        assert_ne!(a, c, "1.0 and 1 are different numbers on the wire");
    }

    #[test]
    fn bindings_digest_separates_fields() {
        let digest = |feed: &dyn Fn(&mut BindingsDigest)| {
            let mut d = BindingsDigest::new();
            feed(&mut d);
            d.finish()
        };
        let a = digest(&|d| {
            d.namespace("tools", None, None);
            d.member("tools", "ab", None);
        });
        let b = digest(&|d| {
            d.namespace("tool", None, None);
            d.member("tool", "sab", None);
        });
        let c = digest(&|d| {
            d.namespace("tools", None, Some(""));
            d.member("tools", "ab", None);
        });
        assert_ne!(a.0, b.0);
        assert_ne!(a.0, c.0, "an empty doc is not no doc");
        assert_eq!(a.1, ["tools.ab"]);
    }
}
