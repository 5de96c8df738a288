//! Files generated from the budgets table are up to date: the Python
//! package's `pycage/_budgets.py` and the budgets table of
//! `docs/semantics.md` (between its `budgets:begin` and `budgets:end`
//! markers). `PYCAGE_BLESS=1` rewrites them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use pycage_runtime::budgets;

const BEGIN: &str = "<!-- budgets:begin (generated from crates/pycage-runtime/src/budgets.rs) -->\n";
const END: &str = "<!-- budgets:end -->\n";

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn bless() -> bool {
    std::env::var_os("PYCAGE_BLESS").is_some()
}

#[test]
fn the_python_budgets_module_is_generated_from_the_table() {
    let path = root().join("crates/pycage-py/python/pycage/_budgets.py");
    let want = budgets::python_module();
    if bless() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is out of date: run PYCAGE_BLESS=1 cargo test -p pycage-runtime --test generated",
        path.display()
    );
}

#[test]
fn the_docs_budget_table_is_generated_from_the_table() {
    let path = root().join("docs/semantics.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (start, end) = match (text.find(BEGIN), text.find(END)) {
        (Some(s), Some(e)) if s < e => (s + BEGIN.len(), e),
        _ => panic!("{} has no {BEGIN:?} ... {END:?} block", path.display()),
    };
    let want = budgets::markdown_table();
    if bless() {
        let mut new = text.clone();
        new.replace_range(start..end, &want);
        std::fs::write(&path, new).unwrap();
        return;
    }
    assert!(
        text[start..end] == want,
        "the budgets table of {} is out of date: run PYCAGE_BLESS=1 cargo test -p pycage-runtime --test generated",
        path.display()
    );
}
