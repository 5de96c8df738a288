//! Helpers shared by the protocol crate's tests, its codec bench
//! (`#[path]`-included) and the fuzz target: one copy of each.
#![allow(dead_code)]

use pycage_protocol::{Kind, LineEvent, ValueRef};

/// xorshift64*: deterministic pseudo-random numbers without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// An owned [`LineEvent`], for comparing event sequences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Line(Vec<u8>),
    Over,
}

pub fn ev(e: LineEvent<'_>) -> Ev {
    match e {
        LineEvent::Line(l) => Ev::Line(l.to_vec()),
        LineEvent::Oversized => Ev::Over,
    }
}

/// serde_json's spelling of a number token: lower-case `e`, explicit sign.
pub fn serde_number_text(n: &str) -> String {
    match n.find(['e', 'E']) {
        None => n.to_owned(),
        Some(i) => {
            let (mant, exp) = n.split_at(i);
            let exp = exp.get(1..).unwrap_or_default();
            let sign = if exp.starts_with(['+', '-']) { "" } else { "+" };
            format!("{mant}e{sign}{exp}")
        }
    }
}

/// With `arbitrary_precision`, serde_json reads an object with this key as a
/// number (`{"$serde_json::private::Number":"1e999"}` is the number 1e999,
/// and any other value under the key is an error). It is ordinary JSON to
/// us, so comparisons with serde_json skip values that contain it.
pub const SERDE_NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Whether any object in `v` has `key`. Recursive: only for values shallow
/// enough for serde_json (at most 128 deep).
pub fn has_key(v: ValueRef<'_>, key: &str) -> bool {
    match v.kind() {
        Kind::Array(mut it) => it.any(|x| has_key(x, key)),
        Kind::Object(mut it) => it.any(|(k, x)| k == key || has_key(x, key)),
        Kind::Null | Kind::Bool(_) | Kind::Number(_) | Kind::String(_) => false,
    }
}
