//! What README.md states that a test can check: the token tables (also in
//! examples/code-mode/README.md) are the ones `cargo run -q -p pycage-cli
//! --example token_savings` prints today, counted here with the example's
//! own code against the real warehouse server; the layout names each path
//! once, and each exists; the Quick start's example prints what the README
//! shows; the command block's files exist and its `# prints` lines print
//! that; `--version` names the distribution; the Speed section's figures
//! are BENCHMARKS.md's; docs/cli.md names every flag of `pycage run`. (The
//! wheel's commands run in crates/pycage-py/tests/test_wheel.py, against
//! the built wheel.)
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

/// `pycage --version` names the Python distribution that ships the command
/// and its version, as pyproject.toml builds it and as the README says.
#[test]
fn version_names_the_distribution_pyproject_builds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let pyproject = std::fs::read_to_string(root.join("pyproject.toml")).unwrap();
    let project = pyproject.split("\n[project]\n").nth(1).expect("a [project] table");
    let name = project
        .lines()
        .find_map(|l| l.strip_prefix("name = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("[project] name");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pycage")).arg("--version").output().unwrap();
    assert!(out.status.success());
    let line = format!("{name} {}\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), line);
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains(&format!("`pip install {name}`")), "the README names the distribution {name}");
    assert!(readme.contains(&format!("`{}`", line.trim_end())), "the README shows `pycage --version`'s line: {line}");
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap()
}

/// The first code block after `marker` in the README, and what follows it.
fn block_after<'a>(readme: &'a str, marker: &str) -> (&'a str, &'a str) {
    let rest = readme.split_once(marker).unwrap_or_else(|| panic!("README: no {marker:?}")).1;
    let rest = rest.split_once("```").expect("a code block").1;
    let rest = rest.split_once('\n').expect("a fenced block").1;
    rest.split_once("```").expect("the block's end")
}

/// A command line's words: split on spaces, single quotes kept together
/// (what the README's lines use).
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let (mut word, mut quoted, mut started) = (String::new(), false, false);
    for c in line.chars() {
        match c {
            '\'' => (quoted, started) = (!quoted, true),
            ' ' if !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            c => (word.push(c), started = true).1,
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// The Quick start's first command (`cargo run -p pycage-cli -- run ...`:
/// without `-q`, so the first build shows its progress) prints what the
/// README shows.
#[test]
fn quick_start_example_prints_what_the_readme_shows() {
    let readme = readme();
    let (commands, _) = block_after(&readme, "From a fresh clone, two commands:");
    let line = commands.lines().find(|l| l.starts_with("cargo run")).expect("the cargo run line");
    let (cargo, args) = line.split_once(" -- ").unwrap();
    assert_eq!(cargo, "cargo run -p pycage-cli", "the Quick start's build shows progress: no -q");
    let (shown, _) = block_after(&readme, "The first command prints the program's logs and its return value:");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_pycage")).args(words(args)).current_dir(&root).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), shown);
}

/// The `pycage` command block: each file a line names exists (`--bindings
/// examples/bindings.toml`), `stubs` works on it, and each line commented
/// `# prints X` (or with a JSON result) prints that.
#[test]
fn command_block_names_files_that_exist_and_prints_what_it_says() {
    let readme = readme();
    let (block, _) = block_after(&readme, "## The `pycage` command");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut checked = 0;
    for line in block.lines().filter(|l| l.starts_with("pycage ")) {
        let (command, comment) = line.split_once("  #").map_or((line, ""), |(c, m)| (c.trim_end(), m.trim()));
        let argv = words(command);
        for pair in argv.windows(2).filter(|w| w[0] == "--bindings") {
            assert!(root.join(&pair[1]).is_file(), "README: `{line}` names {}, which does not exist", pair[1]);
        }
        let expected = match comment.strip_prefix("prints ") {
            Some(value) => format!("{}\n", value.split(':').next().unwrap()),
            None if comment.starts_with('{') => format!("{comment}\n"),
            None if argv[1] == "stubs" => String::new(),
            None => continue,
        };
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pycage"))
            .args(&argv[1..])
            .args(if argv[1] == "run" { &["--isolation", "process"][..] } else { &[] })
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(out.status.success(), "`{line}`: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        if expected.is_empty() {
            assert!(stdout.contains("class ToolError"), "`{line}` printed {stdout}");
        } else {
            assert_eq!(stdout, expected, "`{line}`");
        }
        checked += 1;
    }
    assert!(checked >= 4, "{checked} lines checked");
}

/// The text between `<!-- speed:begin -->` and `<!-- speed:end -->`, markers
/// included.
fn speed_block<'a>(doc: &'a str, name: &str) -> &'a str {
    let (begin, end) = ("<!-- speed:begin -->", "<!-- speed:end -->");
    let from = doc.find(begin).unwrap_or_else(|| panic!("{name}: no {begin}"));
    let to = doc[from..].find(end).unwrap_or_else(|| panic!("{name}: no {end} after {begin}")) + from + end.len();
    assert!(doc[to..].find(begin).is_none(), "{name}: a second {begin}");
    &doc[from..to]
}

/// The figures a text states: numbers followed by a unit (`0.57 ms`,
/// `1.3-1.7 ms`, `372 MiB`), as written.
fn figures(text: &str) -> Vec<String> {
    const UNITS: [&str; 8] = ["ms", "µs", "us", "s", "MiB", "GiB", "KiB", "%"];
    let mut out = Vec::new();
    let words: Vec<&str> = text.split_whitespace().collect();
    for pair in words.windows(2) {
        let number = pair[0].trim_start_matches(|c: char| !c.is_ascii_digit());
        let unit = pair[1].trim_end_matches(|c: char| ",.;:)".contains(c));
        let is_number = !number.is_empty() && number.chars().all(|c| c.is_ascii_digit() || ".,-/".contains(c));
        if is_number && UNITS.contains(&unit) {
            out.push(format!("{number} {unit}"));
        }
    }
    out
}

/// The README's Speed figures are BENCHMARKS.md's: the section quotes the
/// block BENCHMARKS.md marks (`benchmarks/run.sh runs` prints it anew), and
/// states no other figure that BENCHMARKS.md lacks.
#[test]
fn speed_figures_are_the_ones_in_benchmarks_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = readme();
    let benchmarks = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap();
    let speed = readme.split("\n## Speed\n").nth(1).expect("README: a Speed section");
    let speed = speed.split("\n## ").next().unwrap_or(speed);
    let ours = speed_block(speed, "README.md's Speed section");
    let theirs = speed_block(&benchmarks, "BENCHMARKS.md");
    assert_eq!(
        ours, theirs,
        "README.md's Speed block differs from BENCHMARKS.md's: copy BENCHMARKS.md's block (benchmarks/run.sh runs prints it)"
    );
    assert!(figures(ours).len() >= 4, "the block states figures: {:?}", figures(ours));
    for figure in figures(speed) {
        assert!(
            benchmarks.contains(&figure),
            "README.md's Speed section states {figure:?}, which BENCHMARKS.md does not"
        );
    }
}

/// docs/cli.md, the flag reference, names every flag `pycage run --help`
/// lists, so a new flag cannot ship undocumented.
#[test]
fn cli_doc_names_every_flag_of_pycage_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/cli.md")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pycage")).args(["run", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let flags: Vec<&str> = help
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .filter_map(|l| l.split([' ', '<', ',']).next())
        .filter(|f| *f != "help")
        .collect();
    assert!(flags.len() >= 20, "{flags:?}");
    for flag in flags {
        assert!(
            doc.contains(&format!("`--{flag}")),
            "docs/cli.md does not name --{flag}, which `pycage run --help` lists"
        );
    }
}
