//! The name rules of a binding list, checked before anything is spawned
//! (documented in `docs/semantics.md`, "Name rules").
//!
//! A binding list that passes is valid for any code runtime, whatever its
//! language, so the rules include ECMAScript's reserved words as well as
//! Python's (soft keywords included). An injected global may not shadow a
//! Python builtin either: a namespace called `print` or an error class
//! called `ValueError` would silently replace what every program relies on.
//!
//! Every reserved global is listed here, once: [`RUNTIME_GLOBALS`] (mirrored
//! by the bootstrap's `_RESERVED_GLOBALS`) and [`PYTHON_BUILTINS`]. The test
//! `tests/names_mirror.rs` spawns the interpreter and compares both lists
//! with the bootstrap's and with its real `builtins` module.

use crate::bindings::Namespace;

/// Globals the runtime owns: the module globals every program starts with
/// (those of a script read from stdin: `__annotations__` ... `__spec__`),
/// `__debug__`, the builtins the child adds (`display`), and the globals
/// other pycage runtimes own (`console`, `__dsh_main__`), so that one
/// binding list is valid for all of them.
pub const RUNTIME_GLOBALS: &[&str] = &[
    "__annotations__",
    "__builtins__",
    "__cached__",
    "__debug__",
    "__doc__",
    "__dsh_main__",
    "__file__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
    "console",
    "display",
];

/// Every identifier in `dir(builtins)` of CPython 3.10 to 3.13 (with the
/// `site` additions such as `exit` and `help`). A newer interpreter that adds
/// one fails `tests/names_mirror.rs` until it is listed here.
pub const PYTHON_BUILTINS: &[&str] = &[
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BaseExceptionGroup",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "BytesWarning",
    "ChildProcessError",
    "ConnectionAbortedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "DeprecationWarning",
    "EOFError",
    "Ellipsis",
    "EncodingWarning",
    "EnvironmentError",
    "Exception",
    "ExceptionGroup",
    "False",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "None",
    "NotADirectoryError",
    "NotImplemented",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "ProcessLookupError",
    "PythonFinalizationError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "True",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeTranslateError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
    "_IncompleteInputError",
    "__build_class__",
    "__debug__",
    "__doc__",
    "__import__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "copyright",
    "credits",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
];

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
    #[error("{what} {name:?} would shadow the Python builtin {name}; choose another name")]
    ShadowsBuiltin { what: &'static str, name: String },
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
    if PYTHON_BUILTINS.contains(&name) {
        return Err(NameError::ShadowsBuiltin { what, name: name.to_owned() });
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
    fn lists_are_sorted_and_distinct() {
        for list in [RUNTIME_GLOBALS, PYTHON_BUILTINS] {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        }
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
        for b in ["print", "len", "open", "json_", "ValueError", "exit", "help", "__import__", "ExceptionGroup"] {
            let err = check_bindings(&[ns(b)]);
            if b == "json_" {
                assert!(err.is_ok(), "{b}");
            } else {
                assert!(matches!(err, Err(NameError::ShadowsBuiltin { .. })), "{b}: {err:?}");
            }
        }
        assert!(matches!(e(vec![with_class("t", "Exception", "p")]), NameError::ShadowsBuiltin { .. }));
        assert_eq!(
            e(vec![ns("print")]).to_string(),
            "namespace global \"print\" would shadow the Python builtin print; choose another name"
        );
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
