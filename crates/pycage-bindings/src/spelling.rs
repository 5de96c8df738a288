//! Python spellings of member names.
//!
//! A member name is any string (an MCP tool may be called `get-sum`, `2fa`
//! or `class`), but a model writes `await gh.get_sum(...)`. Each name that
//! cannot be written after a dot gets an identifier spelling, and the
//! namespace carries both: the spelling for the stubs and for code, the
//! original for `getattr(gh, "get-sum")`, so nothing that worked by its own
//! name stops working.
//!
//! The rule, applied in name order so it is deterministic:
//! 1. every character outside `[A-Za-z0-9_]` becomes `_` (ASCII only, so the
//!    spelling is typeable and portable);
//! 2. a leading digit, or an empty result, gets a `_` in front;
//! 3. a Python hard keyword (`class`, `from`, `None`, ...) gets a `_` behind
//!    (soft keywords such as `match` or `type` are valid attribute names);
//! 4. a spelling already taken (by another member's own name or an earlier
//!    spelling) gets `_2`, `_3`, ... behind.

use std::collections::{BTreeMap, BTreeSet};

/// Python's hard keywords (`keyword.kwlist`): not usable after a dot.
const PYTHON_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Whether `name` can be written as `ns.name` (and as a keyword argument).
pub fn is_python_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else { return false };
    (first == '_' || first.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !PYTHON_KEYWORDS.contains(&name)
}

fn base_spelling(name: &str) -> String {
    let mut s: String = name.chars().map(|c| if c == '_' || c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    if PYTHON_KEYWORDS.contains(&s.as_str()) {
        s.push('_');
    }
    s
}

/// The identifier each name is written as, for every name given. Names that
/// are identifiers map to themselves; the others follow the module rule.
pub fn spell_all<'a>(names: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    let names: BTreeSet<&str> = names.into_iter().collect();
    let mut taken: BTreeSet<String> = names.iter().filter(|n| is_python_identifier(n)).map(|n| n.to_string()).collect();
    let mut out = BTreeMap::new();
    for name in names {
        if is_python_identifier(name) {
            out.insert(name.to_string(), name.to_string());
            continue;
        }
        let base = base_spelling(name);
        let mut candidate = base.clone();
        let mut n = 2u32;
        while taken.contains(&candidate) {
            candidate = format!("{base}_{n}");
            n += 1;
        }
        taken.insert(candidate.clone());
        out.insert(name.to_string(), candidate);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for ok in ["a", "_", "get_sum", "A1", "match", "type", "__init__"] {
            assert!(is_python_identifier(ok), "{ok}");
        }
        for bad in ["", "1a", "get-sum", "a b", "class", "None", "é", "a.b"] {
            assert!(!is_python_identifier(bad), "{bad}");
        }
    }

    #[test]
    fn spellings() {
        let got = spell_all(["get-sum", "echo", "2fa", "class", "", "a.b", "café", "from-"]);
        let want: BTreeMap<String, String> = [
            ("get-sum", "get_sum"),
            ("echo", "echo"),
            ("2fa", "_2fa"),
            ("class", "class_"),
            ("", "_"),
            ("a.b", "a_b"),
            ("café", "caf_"),
            ("from-", "from_"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn collisions_get_a_counter() {
        // `get_sum` is a real name, so `get-sum` cannot take it; `get.sum`
        // comes after `get-sum` in name order.
        let got = spell_all(["get_sum", "get-sum", "get.sum", "get_sum_2"]);
        assert_eq!(got["get_sum"], "get_sum");
        assert_eq!(got["get_sum_2"], "get_sum_2");
        assert_eq!(got["get-sum"], "get_sum_3");
        assert_eq!(got["get.sum"], "get_sum_4");
    }
}
