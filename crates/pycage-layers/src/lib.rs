//! Holds a crate's modules to the layers its docs declare.
//!
//! A crate's `lib.rs` (and any module with children of its own) lists its
//! modules under a `# Layers` heading of its module docs, lowest first:
//! every module named there in backticks (`` `sync` `` or
//! ``[`config`]``), in order. A module may use only modules named before
//! it in the list of their nearest common parent; so the import graph has
//! no circles, and the list is the map a reader needs. [`check`] reads
//! every module's non-test code, finds each path through `crate::` (or
//! `super::`) to another module, and reports:
//!
//! - an upward import: a module using one listed after it, or its own
//!   parent (whose code comes after all of its children);
//! - an import from the crate root (`crate::Thing` that is not a module):
//!   a module names the module it takes from, so the graph is the truth;
//! - a module missing from its parent's list.
//!
//! Each crate calls it from a test (`tests/layers.rs`); a failure names
//! both modules and the line. This is a reader of Rust's `use` syntax, not
//! a parser: it strips comments and the `#[cfg(test)]` module at the end of
//! a file, and reads `crate::`/`super::` paths, braces included.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The module that imports, as a path (`launch::pool`).
    pub from: String,
    /// What it imports (`launch::sandbox`, or the root item).
    pub to: String,
    /// The file and line.
    pub at: String,
    pub why: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: `{}` uses `{}`: {}", self.at, self.from, self.to, self.why)
    }
}

/// The modules of a crate: path (`a::b`, "" for the root) to file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(rel) = path.strip_prefix(src) else { continue };
            if rel.starts_with("bin") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let mut parts: Vec<String> =
                rel.with_extension("").iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                parts.pop();
            }
            // Test modules in files of their own.
            if parts.last().map(String::as_str) == Some("tests") {
                continue;
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The code of a file without comments and without its trailing
/// `#[cfg(test)]` module.
fn code(text: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let all: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < all.len() {
        let line = all[i].trim_start();
        if line.starts_with("#[cfg(test)]") && all.get(i + 1).is_some_and(|n| n.trim_start().starts_with("mod ")) {
            break;
        }
        let cut = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        lines.push((i + 1, cut.to_owned()));
        i += 1;
    }
    lines
}

/// `lines` with each `crate::`/`super::` brace group that spans lines
/// (`use crate::{` and its items below) joined onto its first line, so
/// that every item of the group is seen with its prefix. A group left open
/// (a malformed file) takes at most 256 lines.
fn join_groups(lines: Vec<(usize, String)>) -> Vec<(usize, String)> {
    let open_in = |text: &str| -> i64 {
        let from = [text.find("crate::"), text.find("super::")].into_iter().flatten().min();
        from.map_or(0, |at| text[at..].chars().map(|c| i64::from(c == '{') - i64::from(c == '}')).sum())
    };
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open: Option<(i64, usize)> = None;
    for (no, line) in lines {
        match (&mut open, out.last_mut()) {
            (Some((depth, joined)), Some(last)) => {
                last.1.push(' ');
                last.1.push_str(&line);
                *depth += line.chars().map(|c| i64::from(c == '{') - i64::from(c == '}')).sum::<i64>();
                *joined += 1;
                if *depth <= 0 || *joined >= 256 {
                    open = None;
                }
            }
            _ => {
                let depth = open_in(&line);
                out.push((no, line));
                open = (depth > 0).then_some((depth, 0));
            }
        }
    }
    out
}

/// The layer list of a module file: backticked names under `# Layers` in
/// its `//!` docs, in order of first appearance.
fn layer_list(text: &str) -> Option<Vec<String>> {
    let docs: Vec<&str> = text.lines().map_while(|l| l.trim_start().strip_prefix("//!")).collect();
    let start = docs.iter().position(|l| l.trim() == "# Layers")?;
    let mut names = Vec::new();
    for line in docs.iter().skip(start + 1).take_while(|l| !l.trim_start().starts_with("# ")) {
        let mut rest = *line;
        while let Some(open) = rest.find('`') {
            let after = &rest[open + 1..];
            let Some(close) = after.find('`') else { break };
            let name = &after[..close];
            let identifier = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if identifier && !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
            rest = &after[close + 1..];
        }
    }
    Some(names)
}

/// Every `crate::...` or `super::...` path in `line`, braces expanded, as
/// absolute segment lists.
fn paths(line: &str, module: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let word_start =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == '_' || bytes[i - 1] == ':');
        let rest: String = bytes[i..].iter().collect();
        let base: Option<(Vec<String>, usize)> = if word_start && rest.starts_with("crate::") {
            Some((Vec::new(), 7))
        } else if word_start && rest.starts_with("super::") {
            let mut base: Vec<String> = module.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
            let mut len = 0;
            let mut r = rest.as_str();
            while let Some(next) = r.strip_prefix("super::") {
                base.pop();
                len += 7;
                r = next;
            }
            Some((base, len))
        } else {
            None
        };
        let Some((base, skip)) = base else {
            i += 1;
            continue;
        };
        let (found, used) = expand(&bytes[i + skip..], base);
        out.extend(found);
        i += skip + used.max(1);
    }
    out
}

/// The paths of a `use` tree starting at `s`, prefixed with `base`, and
/// how many characters it took.
fn expand(s: &[char], base: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let mut i = 0;
    let mut path = base;
    loop {
        let start = i;
        while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '_') {
            i += 1;
        }
        let segment: String = s[start..i].iter().collect();
        if !segment.is_empty() && segment != "self" {
            path.push(segment);
        }
        let group = s.get(i) == Some(&'{');
        if group || (s.get(i) == Some(&':') && s.get(i + 1) == Some(&':')) {
            if !group {
                i += 2;
            }
            if s.get(i) == Some(&'{') {
                // A group: each item is a tree of its own.
                i += 1;
                let mut out = Vec::new();
                loop {
                    while i < s.len() && (s[i] == ' ' || s[i] == ',') {
                        i += 1;
                    }
                    if i >= s.len() || s[i] == '}' {
                        i += 1;
                        break;
                    }
                    let (found, used) = expand(&s[i..], path.clone());
                    out.extend(found);
                    i += used.max(1);
                }
                return (out, i);
            }
            continue;
        }
        return (vec![path], i);
    }
}

/// Checks the crate whose manifest directory is `manifest_dir` (see the
/// crate docs); every violation, empty when the crate keeps its layers.
pub fn check(manifest_dir: &Path) -> Vec<Violation> {
    let src = manifest_dir.join("src");
    let mods = modules(&src);
    let mut lists: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut violations = Vec::new();
    for (module, file) in &mods {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if let Some(list) = layer_list(&text) {
            lists.insert(module.clone(), list);
        }
    }
    let children = |parent: &str| -> BTreeSet<String> {
        mods.keys()
            .filter(|m| !m.is_empty())
            .filter_map(|m| {
                let (p, name) = m.rsplit_once("::").unwrap_or(("", m));
                (p == parent).then(|| name.to_owned())
            })
            .collect()
    };
    // Every child of a module with a list is in it.
    for (parent, list) in &lists {
        for child in children(parent) {
            if !list.contains(&child) {
                let at = mods.get(parent).map(|f| f.display().to_string()).unwrap_or_default();
                violations.push(Violation {
                    from: parent.clone(),
                    to: child.clone(),
                    at,
                    why: "this module is not in the `# Layers` list of its parent's docs".into(),
                });
            }
        }
    }
    let rank = |parent: &str, child: &str| -> Option<usize> { lists.get(parent)?.iter().position(|c| c == child) };
    for (module, file) in &mods {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let mine: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        let mut seen = BTreeSet::new();
        for (line_no, line) in join_groups(code(&text)) {
            for path in paths(&line, module) {
                // The longest prefix that is a module.
                let target = (0..=path.len())
                    .rev()
                    .map(|k| path[..k].join("::"))
                    .find(|p| mods.contains_key(p))
                    .unwrap_or_default();
                let theirs: Vec<&str> = target.split("::").filter(|s| !s.is_empty()).collect();
                let at = format!("{}:{line_no}", file.display());
                if target.is_empty() {
                    // An item of the crate root.
                    let item = path.first().cloned().unwrap_or_default();
                    if !mods.is_empty() && !mine.is_empty() && seen.insert(format!("root:{item}")) {
                        violations.push(Violation {
                            from: module.clone(),
                            to: format!("crate::{item}"),
                            at,
                            why: "import it from the module that defines it, not from the crate root".into(),
                        });
                    }
                    continue;
                }
                if target == *module || theirs.starts_with(&mine) {
                    // Itself, or its own children.
                    continue;
                }
                if !seen.insert(target.clone()) {
                    continue;
                }
                if mine.starts_with(&theirs) {
                    violations.push(Violation {
                        from: module.clone(),
                        to: target.clone(),
                        at,
                        why: "a module may not use its own parent (the parent uses its children)".into(),
                    });
                    continue;
                }
                let common = mine.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
                let parent = mine[..common].join("::");
                let (a, b) = (mine[common], theirs[common]);
                match (rank(&parent, a), rank(&parent, b)) {
                    (Some(ra), Some(rb)) if rb < ra => {}
                    (Some(_), Some(_)) => violations.push(Violation {
                        from: module.clone(),
                        to: target.clone(),
                        at,
                        why: format!(
                            "the `# Layers` list of `{}` puts `{b}` after `{a}`: an upward import",
                            if parent.is_empty() { "the crate root" } else { &parent }
                        ),
                    }),
                    _ => violations.push(Violation {
                        from: module.clone(),
                        to: target.clone(),
                        at,
                        why: format!(
                            "`{}` has no `# Layers` list naming `{a}` and `{b}`",
                            if parent.is_empty() { "the crate root" } else { &parent }
                        ),
                    }),
                }
            }
        }
    }
    violations
}

/// [`check`], as a test: panics with every violation, one a line.
pub fn assert_layers(manifest_dir: &str) {
    let violations = check(Path::new(manifest_dir));
    let text: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert!(text.is_empty(), "module layers broken in {manifest_dir}:\n{}", text.join("\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile_free::Dir {
        let dir = tempfile_free::Dir::new();
        for (path, text) in files {
            let p = dir.0.join("src").join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    /// A scratch directory removed on drop (this crate has no dependencies).
    mod tempfile_free {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicUsize, Ordering};
                static N: AtomicUsize = AtomicUsize::new(0);
                let p = std::env::temp_dir().join(format!(
                    "pycage-layers-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    const LIB: &str = "//! A crate.\n//!\n//! # Layers\n//!\n//! 1. `low` and [`mid`];\n//! 2. `high`.\nmod low;\nmod mid;\nmod high;\n";

    #[test]
    fn downward_imports_pass_and_upward_ones_name_both_modules() {
        let ok = tree(&[
            ("lib.rs", LIB),
            ("low.rs", "pub fn f() {}\n"),
            ("mid.rs", "use crate::low::f;\n"),
            ("high.rs", "use crate::{low, mid::{self}};\nfn g() { crate::low::f() }\n"),
        ]);
        assert_eq!(check(&ok.0), vec![]);
        let bad = tree(&[
            ("lib.rs", LIB),
            ("low.rs", "use crate::{high::X};\n"),
            ("mid.rs", "// crate::high is fine in a comment\nfn f() { let _ = crate::high::Y; }\n"),
            ("high.rs", "\n#[cfg(test)]\nmod tests {\n    use crate::high;\n}\n"),
        ]);
        let v = check(&bad.0);
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!((v[0].from.as_str(), v[0].to.as_str()), ("low", "high"));
        assert!(v[0].to_string().contains("puts `high` after `low`"), "{}", v[0]);
        assert!(v[0].at.ends_with("low.rs:1"), "{}", v[0].at);
        assert_eq!((v[1].from.as_str(), v[1].to.as_str()), ("mid", "high"));
    }

    #[test]
    fn a_group_over_several_lines_is_read_whole() {
        let bad = tree(&[
            ("lib.rs", LIB),
            ("low.rs", "use crate::{\n    mid::{\n        A,\n    },\n    high::{self, X},\n};\nfn f() {}\n"),
            ("mid.rs", "use crate::{\n    low,\n};\n"),
            ("high.rs", ""),
        ]);
        let v = check(&bad.0);
        let pairs: Vec<(&str, &str)> = v.iter().map(|v| (v.from.as_str(), v.to.as_str())).collect();
        assert_eq!(pairs, [("low", "mid"), ("low", "high")], "{v:?}");
        assert!(v.iter().all(|v| v.at.ends_with("low.rs:1")), "{v:?}");
    }

    #[test]
    fn root_items_parents_and_unlisted_modules_are_refused() {
        let lib = format!("{LIB}mod extra;\npub struct Thing;\n");
        let bad = tree(&[
            ("lib.rs", &lib),
            ("low.rs", "use crate::Thing;\n"),
            ("mid.rs", ""),
            ("high.rs", "mod inner;\n"),
            ("high/inner.rs", "use super::super::low;\nuse super::X;\n"),
            ("extra.rs", ""),
        ]);
        let v: Vec<String> = check(&bad.0).iter().map(ToString::to_string).collect();
        assert!(v.iter().any(|m| m.contains("`extra`") && m.contains("not in the `# Layers` list")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("`low` uses `crate::Thing`")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("`high::inner` uses `high`") && m.contains("own parent")), "{v:?}");
        assert!(!v.iter().any(|m| m.contains("`high::inner` uses `low`")), "super::super::low is downward: {v:?}");
    }
}
