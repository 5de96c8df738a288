//! The portable-identifier rules of DESIGN.md §1, checked before anything
//! is spawned. A binding list that passes is valid for any code runtime,
//! whatever its language, so the rules include ECMAScript's reserved words
//! as well as Python's (soft keywords included).

use crate::bindings::Namespace;

/// Globals the bootstrap owns in the program's namespace.
pub const RUNTIME_GLOBALS: &[&str] = &["console", "__dsh_main__", "__builtins__", "__name__", "__debug__"];

/// Python keywords and soft keywords.
const PYTHON_RESERVED: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield", "match", "case", "type", "_",
];

/// ECMAScript reserved words, strict-mode reserved words and literals.
const ECMASCRIPT_RESERVED: &[&str] = &[
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "new",
    "null",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "let",
    "static",
    "implements",
    "interface",
    "package",
    "private",
    "protected",
    "public",
    "arguments",
    "eval",
    "undefined",
    "NaN",
    "Infinity",
];

/// Member names an error class's member-name property may not take: they
/// are the exception's own attributes.
const FORBIDDEN_MEMBER_PROPERTIES: &[&str] = &["name", "message", "stack", "args", "with_traceback", "add_note"];

/// A broken name rule; the message says which name and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{what} {name:?} is not an identifier: it must match [A-Za-z_][A-Za-z0-9_]*")]
    NotIdentifier { what: &'static str, name: String },
    #[error("{what} {name:?} is a reserved word in Python or ECMAScript")]
    Reserved { what: &'static str, name: String },
    #[error("{what} {name:?} is a global the runtime owns")]
    RuntimeOwned { what: &'static str, name: String },
    #[error("the global {name:?} is injected twice (namespace globals and error class names must be distinct)")]
    Duplicate { name: String },
    #[error("member_name_property {name:?} of error class {class:?} is not allowed: {why}")]
    MemberProperty { class: String, name: String, why: &'static str },
}

fn is_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'A'..=b'Z' | b'a'..=b'z' | b'_'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn check_global(what: &'static str, name: &str) -> Result<(), NameError> {
    if !is_identifier(name) {
        return Err(NameError::NotIdentifier { what, name: name.to_owned() });
    }
    if PYTHON_RESERVED.contains(&name) || ECMASCRIPT_RESERVED.contains(&name) {
        return Err(NameError::Reserved { what, name: name.to_owned() });
    }
    if RUNTIME_GLOBALS.contains(&name) {
        return Err(NameError::RuntimeOwned { what, name: name.to_owned() });
    }
    Ok(())
}

/// Checks a whole binding list.
pub fn check_bindings(namespaces: &[Namespace]) -> Result<(), NameError> {
    let mut seen: Vec<&str> = Vec::new();
    for ns in namespaces {
        check_global("namespace global", &ns.global)?;
        if seen.contains(&ns.global.as_str()) {
            return Err(NameError::Duplicate { name: ns.global.clone() });
        }
        seen.push(&ns.global);
        if let Some(ec) = &ns.error_class {
            check_global("error class name", &ec.name)?;
            if seen.contains(&ec.name.as_str()) {
                return Err(NameError::Duplicate { name: ec.name.clone() });
            }
            seen.push(&ec.name);
            let p = ec.member_name_property.as_str();
            let why = if p.is_empty() {
                Some("it is empty")
            } else if FORBIDDEN_MEMBER_PROPERTIES.contains(&p) {
                Some("it is an attribute every exception already has")
            } else if p.len() > 4 && p.starts_with("__") && p.ends_with("__") {
                Some("dunder names are reserved by Python")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(NameError::MemberProperty { class: ec.name.clone(), name: p.to_owned(), why });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::{ErrorClass, Namespace};

    fn ns(global: &str) -> Namespace {
        Namespace::new(global)
    }

    fn with_class(global: &str, class: &str, prop: &str) -> Namespace {
        Namespace::new(global).with_error_class(ErrorClass { name: class.into(), member_name_property: prop.into() })
    }

    #[test]
    fn accepts_portable_names() {
        check_bindings(&[ns("tools"), ns("_x1"), with_class("db", "DbError", "tool"), with_class("h", "E", "my prop")])
            .unwrap();
        check_bindings(&[with_class("t", "E", "__x"), with_class("u", "F", "____")]).unwrap();
    }

    #[test]
    fn rejects_each_rule() {
        let e = |v: Vec<Namespace>| check_bindings(&v).unwrap_err();
        assert!(matches!(e(vec![ns("1x")]), NameError::NotIdentifier { .. }));
        assert!(matches!(e(vec![ns("my-tools")]), NameError::NotIdentifier { .. }));
        assert!(matches!(e(vec![ns("")]), NameError::NotIdentifier { .. }));
        assert!(matches!(e(vec![ns("tóols")]), NameError::NotIdentifier { .. }));
        for r in ["match", "type", "_", "class", "None", "function", "let", "typeof", "undefined"] {
            assert!(matches!(e(vec![ns(r)]), NameError::Reserved { .. }), "{r}");
        }
        for r in RUNTIME_GLOBALS {
            assert!(matches!(e(vec![ns(r)]), NameError::RuntimeOwned { .. }), "{r}");
        }
        assert!(matches!(e(vec![ns("a"), ns("a")]), NameError::Duplicate { .. }));
        assert!(matches!(e(vec![with_class("a", "a", "p")]), NameError::Duplicate { .. }));
        assert!(matches!(e(vec![with_class("a", "E", "p"), with_class("b", "E", "p")]), NameError::Duplicate { .. }));
        assert!(matches!(e(vec![with_class("a", "E", "p"), ns("E")]), NameError::Duplicate { .. }));
        assert!(matches!(e(vec![with_class("a", "class", "p")]), NameError::Reserved { .. }));
        for p in ["", "name", "message", "stack", "args", "with_traceback", "add_note", "__init__", "__x__"] {
            assert!(matches!(e(vec![with_class("a", "E", p)]), NameError::MemberProperty { .. }), "{p:?}");
        }
    }
}
