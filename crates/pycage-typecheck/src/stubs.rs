//! The globals a program gets, as a stub module the checked text imports:
//! `display()`, every namespace (its typed stub when the caller has one,
//! e.g. from its tools' schemas; otherwise a class whose members take
//! anything) and every error class (with its member-name attribute).

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// One namespace of the run, as the checker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceDecl {
    /// The global's name (`tools`).
    pub global: String,
    /// Its members' names (any strings; those that are not identifiers
    /// are reached with `getattr`, which the checker takes as `Any`).
    pub members: Vec<String>,
    /// `(class name, member-name attribute)` of its error class.
    pub error_class: Option<(String, String)>,
    /// Python text defining `class <global>:` whose members are its
    /// functions (keyword-only `async def`s without `self`, reached on the
    /// class), and the types they use (pycage-bindings'
    /// `NamespaceStub::class_text`). `None`: each member takes any
    /// arguments and returns `Any`.
    pub stub: Option<String>,
}

/// The generated module: its name (unique per text) and text, and the
/// names a program imports from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Module {
    pub name: String,
    pub text: String,
    pub names: Vec<String>,
}

/// `display()` as the child defines it (`python/pycage/display.py`).
const DISPLAY: &str = "def display(\n    *objs: object,\n    include: Any = None,\n    exclude: Any = None,\n    \
     metadata: Any = None,\n    transient: Any = None,\n    display_id: Any = None,\n    raw: bool = False,\n    \
     clear: bool = False,\n    **kwargs: Any,\n) -> None:\n    \"\"\"Shows each object as rich output of the run.\"\"\"\n";

/// The stub module of these namespaces.
pub(crate) fn module(namespaces: &[NamespaceDecl]) -> Module {
    let mut text = String::from(
        "# The globals pycage gives a program (generated for the type check).\n\
         from typing_extensions import Any, Literal, NotRequired, TypedDict, Unpack\n\n",
    );
    text.push_str(DISPLAY);
    let mut names = vec!["display".to_owned()];
    for ns in namespaces {
        text.push('\n');
        if let Some((class, prop)) = &ns.error_class {
            let _ = writeln!(text, "class {class}(Exception):");
            if is_identifier(prop) && !(prop.starts_with("__") && prop.ends_with("__")) {
                let _ = writeln!(text, "    {prop}: str");
            } else {
                text.push_str("    pass\n");
            }
            names.push(class.clone());
        }
        match &ns.stub {
            Some(stub) => {
                text.push_str(stub);
                if !stub.ends_with('\n') {
                    text.push('\n');
                }
            }
            None => {
                let _ = writeln!(text, "class {}:", ns.global);
                let mut any = false;
                for m in ns.members.iter().filter(|m| is_identifier(m)) {
                    let _ = writeln!(
                        text,
                        "    @staticmethod\n    async def {m}(args: Any = None, /, **kwargs: Any) -> Any: ..."
                    );
                    any = true;
                }
                if !any {
                    text.push_str("    pass\n");
                }
            }
        }
        names.push(ns.global.clone());
    }
    let digest = Sha256::digest(text.as_bytes());
    let mut name = String::from("_pycage_globals_");
    for b in digest.iter().take(12) {
        let _ = write!(name, "{b:02x}");
    }
    Module { name, text, names }
}

/// Python's keywords (hard ones: soft keywords are identifiers).
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Whether `s` can be written as a Python name (`ns.s`).
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let Some(first) = chars.next() else { return false };
    (first == '_' || first.is_alphabetic()) && chars.all(|c| c == '_' || c.is_alphanumeric()) && !KEYWORDS.contains(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untyped_namespaces_take_anything_and_error_classes_carry_their_attribute() {
        let m = module(&[NamespaceDecl {
            global: "tools".into(),
            members: vec!["search".into(), "my-tool".into(), "class".into()],
            error_class: Some(("ToolError".into(), "tool".into())),
            stub: None,
        }]);
        assert!(m.text.contains("async def search(args: Any = None, /, **kwargs: Any) -> Any"), "{}", m.text);
        assert!(!m.text.contains("my-tool") && !m.text.contains("def class"), "{}", m.text);
        assert!(m.text.contains("class ToolError(Exception):\n    tool: str\n"), "{}", m.text);
        assert_eq!(m.names, ["display", "ToolError", "tools"]);
        assert!(m.name.starts_with("_pycage_globals_") && m.name.len() == "_pycage_globals_".len() + 24);
    }
}
