//! JSON numbers as exact decimal text, with checked conversions.
//!
//! A number is kept as the token the sender wrote (`1.10` stays `1.10`,
//! `2**100` stays all 31 digits). Conversions to machine types refuse any
//! result that does not denote the same value as the text: `as_i64`/`as_u64`
//! need an integral value in range (`1e2` and `100.0` are 100), and `as_f64`
//! needs the text and the nearest double's shortest round-trip form to be the
//! same decimal number (`0.1` converts; `0.10000000000000000001`,
//! `9007199254740993` and `1e400` do not).

use std::fmt;

/// A JSON number borrowed from a value: its exact text.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Number<'a> {
    text: &'a str,
}

impl<'a> Number<'a> {
    /// Wraps text already known to be a JSON number token.
    pub(crate) fn new_unchecked(text: &'a str) -> Self {
        Number { text }
    }

    /// Wraps `text` if it is a JSON number token.
    pub fn new(text: &'a str) -> Option<Self> {
        is_json_number(text.as_bytes()).then_some(Number { text })
    }

    /// The exact decimal text, as sent.
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    /// Whether the token has no fraction and no exponent (`-?digits`).
    pub fn is_integer_token(&self) -> bool {
        !self.text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
    }

    /// The value as `i64`, if it is integral and in range.
    pub fn as_i64(&self) -> Option<i64> {
        let d = Decimal::parse(self.text)?;
        let mag = d.integer_magnitude()?;
        if d.negative {
            if mag <= i64::MAX as u128 + 1 {
                Some((mag as i128).checked_neg()? as i64)
            } else {
                None
            }
        } else {
            i64::try_from(mag).ok()
        }
    }

    /// The value as `u64`, if it is integral, non-negative and in range
    /// (`-0` is 0).
    pub fn as_u64(&self) -> Option<u64> {
        let d = Decimal::parse(self.text)?;
        let mag = d.integer_magnitude()?;
        if d.negative && mag != 0 {
            return None;
        }
        u64::try_from(mag).ok()
    }

    /// The value as `f64`, if the nearest double denotes exactly the same
    /// decimal number as the text under shortest round-trip formatting.
    pub fn as_f64(&self) -> Option<f64> {
        let f: f64 = self.text.parse().ok()?;
        if !f.is_finite() {
            return None;
        }
        let ours = Decimal::parse(self.text)?;
        let theirs = Decimal::parse_rust_exp(&format!("{f:e}"))?;
        (ours == theirs).then_some(f)
    }
}

impl fmt::Debug for Number<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

impl fmt::Display for Number<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

/// Whether `b` is exactly one JSON number token:
/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
pub fn is_json_number(b: &[u8]) -> bool {
    scan_number(b, 0) == Some(b.len())
}

/// Scans a number token starting at `pos`; returns the end offset.
pub(crate) fn scan_number(b: &[u8], mut pos: usize) -> Option<usize> {
    let at = |i: usize| b.get(i).copied();
    if at(pos) == Some(b'-') {
        pos += 1;
    }
    match at(pos) {
        Some(b'0') => pos += 1,
        Some(b'1'..=b'9') => {
            pos += 1;
            while matches!(at(pos), Some(b'0'..=b'9')) {
                pos += 1;
            }
        }
        _ => return None,
    }
    if at(pos) == Some(b'.') {
        pos += 1;
        if !matches!(at(pos), Some(b'0'..=b'9')) {
            return None;
        }
        while matches!(at(pos), Some(b'0'..=b'9')) {
            pos += 1;
        }
    }
    if matches!(at(pos), Some(b'e' | b'E')) {
        pos += 1;
        if matches!(at(pos), Some(b'+' | b'-')) {
            pos += 1;
        }
        if !matches!(at(pos), Some(b'0'..=b'9')) {
            return None;
        }
        while matches!(at(pos), Some(b'0'..=b'9')) {
            pos += 1;
        }
    }
    Some(pos)
}

/// Shortest round-trip text of a finite double, as a JSON number token
/// (`1e300`, `-0.0`, `0.1`, `100.0`).
pub(crate) fn f64_text(f: f64) -> String {
    // Rust's Display is shortest round-trip but never uses exponents, which
    // makes 1e300 a 301-digit string; `{:e}` is shortest too and compact.
    let plain = format!("{f:?}");
    let exp = format!("{f:e}");
    if plain.len() <= exp.len() {
        plain
    } else {
        exp
    }
}

/// A decimal in canonical form: `digits × 10^exp`, no leading or trailing
/// zeros in `digits` (zero has no digits). Used only for comparisons.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exp: i64,
}

/// Exponents beyond this are saturated: such numbers never convert anyway.
const EXP_LIMIT: i64 = 1 << 40;

impl Decimal {
    fn parse(text: &str) -> Option<Decimal> {
        let b = text.as_bytes();
        if !is_json_number(b) {
            return None;
        }
        Self::parse_loose(b)
    }

    /// Rust's `{:e}` output, e.g. `1.2345e19`, `-0e0`.
    fn parse_rust_exp(text: &str) -> Option<Decimal> {
        Self::parse_loose(text.as_bytes())
    }

    fn parse_loose(b: &[u8]) -> Option<Decimal> {
        let mut i = 0;
        let negative = b.first() == Some(&b'-');
        if negative {
            i += 1;
        }
        let mut digits = Vec::new();
        let mut exp: i64 = 0;
        let mut seen_dot = false;
        while let Some(&c) = b.get(i) {
            match c {
                b'0'..=b'9' => {
                    if !(digits.is_empty() && c == b'0') {
                        digits.push(c);
                    }
                    if seen_dot {
                        exp -= 1;
                    }
                }
                b'.' => seen_dot = true,
                _ => break,
            }
            i += 1;
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            let mut eneg = false;
            match b.get(i) {
                Some(b'-') => {
                    eneg = true;
                    i += 1;
                }
                Some(b'+') => i += 1,
                _ => {}
            }
            let mut e: i64 = 0;
            while let Some(&c) = b.get(i) {
                if !c.is_ascii_digit() {
                    return None;
                }
                e = (e * 10 + i64::from(c - b'0')).min(EXP_LIMIT);
                i += 1;
            }
            exp += if eneg { -e } else { e };
        }
        while digits.last() == Some(&b'0') {
            digits.pop();
            exp += 1;
        }
        if digits.is_empty() {
            exp = 0;
        }
        Some(Decimal { negative, digits, exp })
    }

    /// |value| as an integer, if integral and below 2^127.
    fn integer_magnitude(&self) -> Option<u128> {
        if self.digits.is_empty() {
            return Some(0);
        }
        if self.exp < 0 || self.digits.len() as i64 + self.exp > 38 {
            return None;
        }
        let mut m: u128 = 0;
        for d in &self.digits {
            m = m.checked_mul(10)?.checked_add(u128::from(d - b'0'))?;
        }
        for _ in 0..self.exp {
            m = m.checked_mul(10)?;
        }
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        for ok in
            ["0", "-0", "1", "-12", "1.5", "0.0", "1e5", "1E+5", "1e-05", "-0.0e0", "123456789012345678901234567890"]
        {
            assert!(is_json_number(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            "-",
            "01",
            "+1",
            "1.",
            ".5",
            "1e",
            "1e+",
            "NaN",
            "Infinity",
            "-Infinity",
            "0x10",
            "1_000",
            " 1",
            "1 ",
            "--1",
            "1.5.5",
        ] {
            assert!(!is_json_number(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn checked_integers() {
        let n = |s| Number::new(s).unwrap();
        assert_eq!(n("9223372036854775807").as_i64(), Some(i64::MAX));
        assert_eq!(n("-9223372036854775808").as_i64(), Some(i64::MIN));
        assert_eq!(n("9223372036854775808").as_i64(), None);
        assert_eq!(n("18446744073709551615").as_u64(), Some(u64::MAX));
        assert_eq!(n("18446744073709551616").as_u64(), None);
        assert_eq!(n("-1").as_u64(), None);
        assert_eq!(n("-0").as_u64(), Some(0));
        assert_eq!(n("1e2").as_i64(), Some(100));
        assert_eq!(n("100.0").as_i64(), Some(100));
        assert_eq!(n("1.5").as_i64(), None);
        assert_eq!(n("1e-2").as_i64(), None);
        assert_eq!(n("1e99999999999999999999").as_i64(), None);
        assert_eq!(n("0e99999999999999999999").as_i64(), Some(0));
    }

    #[test]
    fn checked_floats() {
        let n = |s| Number::new(s).unwrap();
        assert_eq!(n("0.1").as_f64(), Some(0.1));
        assert_eq!(n("1.10").as_f64(), Some(1.1));
        assert_eq!(n("-0.0").as_f64().map(f64::to_bits), Some((-0.0f64).to_bits()));
        assert_eq!(n("9007199254740992").as_f64(), Some(9007199254740992.0));
        assert_eq!(n("9007199254740993").as_f64(), None);
        assert_eq!(n("0.10000000000000000001").as_f64(), None);
        assert_eq!(n("1e400").as_f64(), None);
        assert_eq!(n("1e-400").as_f64(), None);
        assert_eq!(n("1.7976931348623157e308").as_f64(), Some(f64::MAX));
    }

    #[test]
    fn float_text_is_shortest_and_valid() {
        for f in [0.0, -0.0, 0.1, 1e300, 1e-300, 123.456, 1e16, f64::MAX, f64::MIN_POSITIVE, 5e-324] {
            let t = f64_text(f);
            assert!(is_json_number(t.as_bytes()), "{t}");
            assert_eq!(t.parse::<f64>().unwrap().to_bits(), f.to_bits(), "{t}");
        }
        assert_eq!(f64_text(-0.0), "-0.0");
        assert_eq!(f64_text(1e300), "1e300");
    }
}
