//! What a program asks for: its PEP 723 `# /// script` block and the
//! requirement strings in it, checked as data.
//!
//! A requirement is a PEP 508 name with extras, version specifiers and
//! markers (`tabulate`, `rich[jupyter]>=13; python_version >= "3.10"`).
//! Direct references (`name @ https://...`, `file:` paths), options
//! (`--index-url`) and anything else an installer would read as more than
//! a requirement are refused: a program must not make the host fetch a
//! URL of its choosing or read a host file. A name that reads as an archive
//! (`pkg-1.0.tar.gz`), which an installer would take for a local file, is
//! refused too (and the installer runs in an empty directory besides).

use crate::error::PackageError;

/// Longest requirement string accepted.
pub const MAX_REQUIREMENT: usize = 512;
/// Most requirements one run may declare.
pub const MAX_REQUIREMENTS: usize = 64;
/// Largest `# /// script` block read.
const MAX_BLOCK: usize = 64 * 1024;
/// Deepest bracket nesting of a block handed to the TOML parser (which
/// recurses on it); a dependency list needs two.
const MAX_BLOCK_NESTING: usize = 16;
/// What an installer reads as a local archive or wheel, not a name.
const ARCHIVE_SUFFIXES: [&str; 7] = [".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz"];

/// One checked requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// As given, trimmed.
    pub text: String,
    /// The project name, PEP 503-normalized.
    pub name: String,
    /// Its extras (`rich[jupyter]`), normalized.
    pub extras: Vec<String>,
}

impl Requirement {
    /// Checks `text` (see the module docs); the message says what is wrong.
    pub fn parse(text: &str) -> Result<Requirement, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("an empty requirement".into());
        }
        if text.len() > MAX_REQUIREMENT {
            return Err(format!("a requirement longer than {MAX_REQUIREMENT} bytes"));
        }
        let name_end =
            text.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))).unwrap_or(text.len());
        let name = &text[..name_end];
        if !is_project_name(name) {
            return Err(format!("{text:?} does not start with a package name"));
        }
        let lower = name.to_ascii_lowercase();
        if ARCHIVE_SUFFIXES.iter().any(|s| lower.ends_with(s)) {
            return Err(format!("{text:?} names a file, not a package: only package names are accepted"));
        }
        let rest = &text[name_end..];
        if let Some(bad) = rest.chars().find(|&c| {
            !(c.is_ascii_alphanumeric()
                || matches!(c, ' ' | '\t' | '<' | '>' | '=' | '!' | '~' | '.' | ',' | '*' | '+' | '_' | '-')
                || matches!(c, ';' | '\'' | '"' | '(' | ')' | '[' | ']'))
        }) {
            let why = match bad {
                '@' | '/' | ':' | '\\' => "direct references (URLs and paths) are not accepted",
                _ => "only a name, extras, version specifiers and markers are accepted",
            };
            return Err(format!("{text:?}: {bad:?} is not allowed in a requirement: {why}"));
        }
        let extras = rest
            .trim_start()
            .strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .map(|(list, _)| list.split(',').map(|e| normalize(e.trim())).filter(|e| !e.is_empty()).collect())
            .unwrap_or_default();
        Ok(Requirement { text: text.to_owned(), name: normalize(name), extras })
    }
}

/// Whether `name` is a PEP 508 project name.
pub fn is_project_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// PEP 503 normalization: lower case, each run of `-`, `_`, `.` one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The `dependencies` of the program's PEP 723 `# /// script` block, if it
/// has one.
pub fn script_dependencies(program: &str) -> Result<Vec<Requirement>, PackageError> {
    let Some(block) = script_block(program)? else { return Ok(Vec::new()) };
    let invalid = |m: String| PackageError::Invalid(format!("the program's `# /// script` block: {m}"));
    let mut depth = 0usize;
    for c in block.chars() {
        match c {
            '[' | '{' => {
                depth += 1;
                if depth > MAX_BLOCK_NESTING {
                    return Err(invalid(format!("nested deeper than {MAX_BLOCK_NESTING}")));
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let table: toml::Table = block.parse().map_err(|e: toml::de::Error| invalid(e.message().to_owned()))?;
    let Some(deps) = table.get("dependencies") else { return Ok(Vec::new()) };
    let toml::Value::Array(items) = deps else {
        return Err(invalid("`dependencies` must be an array of strings".into()));
    };
    if items.len() > MAX_REQUIREMENTS {
        return Err(invalid(format!("more than {MAX_REQUIREMENTS} dependencies")));
    }
    items
        .iter()
        .map(|item| match item {
            toml::Value::String(s) => Requirement::parse(s).map_err(&invalid),
            _ => Err(invalid("`dependencies` must be an array of strings".into())),
        })
        .collect()
}

/// The line that opens a PEP 723 `script` block.
const SCRIPT_START: &str = "# /// script";

/// The TOML inside the program's one `# /// script` block (PEP 723's
/// reference regular expression, line by line: after `# /// script`, a
/// run of `#` and `# ...` lines, closed by its last `# ///`).
fn script_block(program: &str) -> Result<Option<String>, PackageError> {
    let invalid = |m: &str| PackageError::Invalid(format!("the program's `# /// script` block {m}"));
    // A block starts at a line that is exactly this: most programs have
    // none, and are not split into lines for every run.
    if !program.contains(SCRIPT_START) {
        return Ok(None);
    }
    let lines: Vec<&str> = program.lines().collect();
    let mut found: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        if lines.get(i).copied() != Some(SCRIPT_START) {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while let Some(line) = lines.get(end) {
            if *line == "#" || line.starts_with("# ") {
                end += 1;
            } else {
                break;
            }
        }
        let Some(close) = (start..end).rev().find(|&j| lines.get(j).copied() == Some("# ///")) else {
            return Err(invalid("is not closed by a `# ///` line"));
        };
        if found.is_some() {
            return Err(invalid("appears twice (PEP 723 allows one)"));
        }
        let mut text = String::new();
        for line in lines.get(start..close).unwrap_or_default() {
            text.push_str(line.strip_prefix("# ").unwrap_or(""));
            text.push('\n');
            if text.len() > MAX_BLOCK {
                return Err(invalid(&format!("is larger than {MAX_BLOCK} bytes")));
            }
        }
        found = Some(text);
        i = close + 1;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_names_specifiers_and_markers_only() {
        for ok in ["tabulate", "tabulate==0.9.0", "Rich[jupyter] >= 13, <14", "a.b_c-d; python_version >= \"3.10\""] {
            Requirement::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(Requirement::parse("Foo__Bar.baz>=1").unwrap().name, "foo-bar-baz");
        for bad in [
            "",
            "--index-url=https://evil.example",
            "-r /etc/passwd",
            "pkg @ https://evil.example/pkg.whl",
            "pkg @ file:///etc/passwd",
            "./local-dir",
            "/abs/path.whl",
            "pkg; os_name == 'posix' \\",
            "pkg\n--extra-index-url x",
            "pkg #comment",
            "_private",
        ] {
            assert!(Requirement::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let e = Requirement::parse("x @ https://h/x.whl").unwrap_err();
        assert!(e.contains("direct references"), "{e}");
    }

    #[test]
    fn pep_723_blocks() {
        let program = "# /// script\n# requires-python = \">=3.10\"\n# dependencies = [\n#   \"tabulate\",\n#   \"rich>=13\",\n# ]\n# ///\nimport tabulate\n";
        let deps = script_dependencies(program).unwrap();
        assert_eq!(deps.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(), ["tabulate", "rich>=13"]);
        assert!(script_dependencies("import os\n# /// other\n# x = 1\n# ///\n").unwrap().is_empty());
        assert!(script_dependencies("# /// script\n# ///\nreturn 1").unwrap().is_empty());
        let twice = "# /// script\n# dependencies = []\n# ///\nx = 1\n# /// script\n# ///\n";
        assert!(script_dependencies(twice).unwrap_err().to_string().contains("twice"));
        let open = "# /// script\n# dependencies = []\nx = 1\n";
        assert!(script_dependencies(open).unwrap_err().to_string().contains("not closed"));
        let bad_toml = "# /// script\n# dependencies = [\n# ///\n";
        assert!(script_dependencies(bad_toml).is_err());
        let not_strings = "# /// script\n# dependencies = [1]\n# ///\n";
        assert!(script_dependencies(not_strings).unwrap_err().to_string().contains("array of strings"));
        let deep = format!("# /// script\n# x = {}{}\n# ///\n", "[".repeat(1000), "]".repeat(1000));
        assert!(script_dependencies(&deep).unwrap_err().to_string().contains("nested deeper"));
        // Dotted keys nest tables too, without a bracket: the parser's own
        // recursion limit refuses them.
        let dotted = format!("# /// script\n# {}x = 1\n# ///\n", "a.".repeat(30_000));
        let e = script_dependencies(&dotted).unwrap_err().to_string();
        assert!(e.contains("recursion limit"), "{e}");
        let huge = format!("# /// script\n# x = \"{}\"\n# ///\n", "a".repeat(100_000));
        assert!(script_dependencies(&huge).unwrap_err().to_string().contains("larger than"));
        let url = "# /// script\n# dependencies = [\"x @ file:///etc/passwd\"]\n# ///\n";
        assert!(script_dependencies(url).unwrap_err().to_string().contains("direct references"));
        let crlf = "# /// script\r\n# dependencies = [\"tabulate\"]\r\n# ///\r\n";
        assert_eq!(script_dependencies(crlf).unwrap().len(), 1);
        // Only a line that is exactly the opening opens a block.
        for not_a_block in [
            "x = '# /// script'\n# dependencies = [\"tabulate\"]\n# ///\n",
            "  # /// script\n# dependencies = [\"tabulate\"]\n# ///\n",
            "# /// scripts\n# dependencies = [\"tabulate\"]\n# ///\n",
            "return 1 + 1",
        ] {
            assert!(script_dependencies(not_a_block).unwrap().is_empty(), "{not_a_block:?}");
        }
    }

    #[test]
    fn names_that_read_as_files_and_extras() {
        for bad in ["h4local-1.0.tar.gz", "pkg.whl", "x.ZIP", "a-1.tgz"] {
            let e = Requirement::parse(bad).unwrap_err();
            assert!(e.contains("names a file"), "{bad}: {e}");
        }
        let r = Requirement::parse("Tabulate [WideChars, x_y] >= 0.9").unwrap();
        assert_eq!((r.name.as_str(), r.extras.clone()), ("tabulate", vec!["widechars".to_owned(), "x-y".to_owned()]));
    }
}
