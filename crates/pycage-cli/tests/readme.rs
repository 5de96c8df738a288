//! What README.md states that a test can check: the token tables (also in
//! examples/code-mode/README.md) are the ones `cargo run -q -p pycage-cli
//! --example token_savings` prints today, counted here with the example's
//! own code against the real warehouse server; the layout names each path
//! once, and each exists.
#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../examples/token_savings/counts.rs"]
mod counts;

use std::path::Path;

#[test]
fn token_tables_in_the_docs_are_current() {
    let savings = counts::measure();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (doc, table) in
        [("README.md", savings.readme_table()), ("examples/code-mode/README.md", savings.code_mode_table())]
    {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        assert!(
            text.contains(&table),
            "{doc} does not carry the table the example prints today; replace it with:\n\n{table}"
        );
    }
}

#[test]
fn readme_layout_names_each_path_once_and_each_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let layout = readme.split("## Layout").nth(1).expect("a Layout section");
    let block = layout.split("```").nth(1).expect("a code block in the Layout section");
    let mut seen = std::collections::BTreeSet::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let path = line.split_whitespace().next().unwrap();
        assert!(seen.insert(path.to_owned()), "the layout lists {path} twice");
        assert!(root.join(path).exists(), "the layout lists {path}, which does not exist");
    }
    assert!(seen.len() >= 10, "{seen:?}");
}
