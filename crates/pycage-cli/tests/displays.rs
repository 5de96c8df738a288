//! Rich output end to end: a matplotlib plot comes back as `image/png`
//! through `pycage run --json`, readable `pycage run --output`, `pycage
//! repl`, and `pycage mcp` (driven by the official MCP Python SDK client,
//! which must receive an image content block that decodes to a PNG of the
//! figure's size), in both isolations; the display budget holds against
//! the child's ledger and against frames forged on fd 3.
//!
//! The plots run in the data-science venv `.ci/data-venv.sh` installs
//! (matplotlib from PyPI, pinned); without it each test prints why and
//! passes, unless `PYCAGE_REQUIRE_ALL_TESTS=1`. The MCP test also needs
//! `.ci/mcp-deps.sh` (`tests/mcp/mod.rs`).

#[allow(dead_code)] // the MCP tests use the rest
#[path = "mcp/mod.rs"]
mod deps;
mod support;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{json, Value};
use support::{assert_exit, pycage, stderr, stdout};

/// The venv `.ci/data-venv.sh` made: `$PYCAGE_DATA_VENV`, default
/// `<workspace>/target/data-venv`. Missing: panics when
/// `PYCAGE_REQUIRE_ALL_TESTS=1`, else prints why and gives `None`.
fn data_venv() -> Option<PathBuf> {
    let venv = match std::env::var_os("PYCAGE_DATA_VENV") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/data-venv"),
    };
    let venv = venv.canonicalize().unwrap_or(venv);
    if venv.join("bin/python").exists() {
        return Some(venv);
    }
    let why = format!("the data-science venv is not installed in {} (run .ci/data-venv.sh)", venv.display());
    if std::env::var("PYCAGE_REQUIRE_ALL_TESTS").as_deref() == Ok("1") {
        panic!("PYCAGE_REQUIRE_ALL_TESTS=1 and {why}");
    }
    #[allow(clippy::print_stderr)] // the test harness shows it: why this test did nothing
    {
        eprintln!("skipped: {why}");
    }
    None
}

/// `--python VENV/bin/python --allow-read VENV`.
fn venv_args(venv: &Path) -> Vec<String> {
    vec![
        "--python".into(),
        venv.join("bin/python").display().to_string(),
        "--allow-read".into(),
        venv.display().to_string(),
    ]
}

/// A 640x480 line plot shown with `plt.show()`, a 300x200 figure left open
/// (shown when the run ends), a text display between them.
const PLOT: &str = "import matplotlib.pyplot as plt\n\
    fig = plt.figure(figsize=(6.4, 4.8), dpi=100)\n\
    plt.plot([0, 1, 2, 3], [1, 4, 2, 5])\n\
    plt.title('pycage')\n\
    plt.show()\n\
    display('between')\n\
    plt.figure(figsize=(3, 2), dpi=100)\n\
    plt.plot([3, 1])\n\
    print('drawn')\n\
    return len(plt.get_fignums())";

/// Width and height from a PNG's header; panics when it is not a PNG.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), "not a PNG: {:?}", &png[..png.len().min(16)]);
    let be = |i: usize| u32::from_be_bytes(png[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

fn b64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(text).unwrap()
}

/// The displays of a run's `--json` result as checked by [`check_plot`].
#[track_caller]
fn check_plot(v: &Value, what: &str) {
    assert_eq!(v["value"], json!(1), "{what}: the figure left open is counted before the end: {v}");
    // (Sandboxed, matplotlib's first font scan runs fc-list, which may
    // complain on stderr that the host's /etc/fonts is not there.)
    assert!(v["logs"].as_array().unwrap().contains(&json!("drawn")), "{what}: {v}");
    let displays = v["displays"].as_array().unwrap_or_else(|| panic!("{what}: no displays: {v}"));
    assert_eq!(displays.len(), 3, "{what}");
    let first = &displays[0];
    assert_eq!(png_size(&b64(first["data"]["image/png"].as_str().unwrap())), (640, 480), "{what}");
    assert_eq!(first["metadata"], json!({"image/png": {"width": 640, "height": 480}}), "{what}");
    assert!(first["data"]["text/plain"].as_str().unwrap().starts_with("<Figure size 640x480"), "{what}");
    assert_eq!(displays[1], json!({"data": {"text/plain": "'between'"}, "metadata": {}}), "{what}");
    assert_eq!(png_size(&b64(displays[2]["data"]["image/png"].as_str().unwrap())), (300, 200), "{what}");
}

#[test]
fn a_plot_comes_back_as_png_through_run_json_in_both_isolations() {
    let Some(venv) = data_venv() else { return };
    for isolation in ["process", "sandbox"] {
        let dir = tempfile::tempdir().unwrap();
        let o = pycage(dir.path())
            .args(["run", "--isolation", isolation, "--json", "-c", PLOT])
            .args(venv_args(&venv))
            .output()
            .unwrap();
        assert_exit(&o, 0);
        check_plot(&serde_json::from_str(&stdout(&o)).unwrap(), isolation);
    }
}

#[test]
fn readable_output_prints_a_line_per_display_and_writes_files() {
    let Some(venv) = data_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    // The program's own out/display-2.txt is not display 2's name: display
    // files are named after their run.
    let program = format!("open('out/display-2.txt', 'w').write('mine')\n{PLOT}");
    let o = pycage(dir.path())
        .args(["run", "--isolation", "process", "--output", "got", "-c", &program])
        .args(venv_args(&venv))
        .output()
        .unwrap();
    assert_exit(&o, 0);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("Fontconfig")).collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].starts_with("[display 1] image/png 640x480, "), "{out}");
    assert!(lines[0].ends_with(" KiB: <Figure size 640x480 with 1 Axes>"), "{out}");
    assert_eq!(lines[1], "[display 2] text/plain, 9 bytes: 'between'");
    assert_eq!(lines[2], "drawn");
    assert!(lines[3].starts_with("[display 3] image/png 300x200, "), "{out}");
    assert_eq!(lines[4], "1");
    let got = dir.path().join("got");
    let err = stderr(&o);
    // `pycage: display 1 written to got/<run id>-display-1.png`
    let written: Vec<&str> = err
        .lines()
        .filter_map(|l| l.strip_prefix("pycage: display "))
        .filter_map(|l| l.split_once(" written to got/"))
        .map(|(_, f)| f)
        .collect();
    assert_eq!(written.len(), 3, "{err}");
    let run_id = written[0].strip_suffix("-display-1.png").unwrap();
    assert_eq!(
        written,
        [format!("{run_id}-display-1.png"), format!("{run_id}-display-2.txt"), format!("{run_id}-display-3.png")]
    );
    assert_eq!(png_size(&std::fs::read(got.join(written[0])).unwrap()), (640, 480));
    assert_eq!(std::fs::read_to_string(got.join(written[1])).unwrap(), "'between'");
    assert_eq!(png_size(&std::fs::read(got.join(written[2])).unwrap()), (300, 200));
    assert_eq!(std::fs::read_to_string(got.join("display-2.txt")).unwrap(), "mine");
    assert!(!err.contains("not written"), "{err}");
}

#[test]
fn the_repl_names_the_file_of_each_display() {
    let Some(venv) = data_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cells = "import matplotlib.pyplot as plt\n\
        _ = plt.plot([1, 2, 3])\n\
        display({'a': 1})\n";
    let mut child = pycage(dir.path())
        .args(["repl", "--isolation", "sandbox", "--displays", "shown"])
        .args(venv_args(&venv))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(cells.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_exit(&o, 0);
    let shown = dir.path().join("shown");
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("Fontconfig")).collect();
    // The figure of cell 2 is shown at the end of that cell.
    assert!(lines[0].starts_with("[display 1] image/png 640x480, "), "{out}");
    assert!(lines[0].ends_with(" -> shown/display-1.png: <Figure size 640x480 with 1 Axes>"), "{out}");
    assert_eq!(lines[1], "[display 2] text/plain, 8 bytes -> shown/display-2.txt: {'a': 1}");
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(png_size(&std::fs::read(shown.join("display-1.png")).unwrap()), (640, 480));
    assert_eq!(std::fs::read_to_string(shown.join("display-2.txt")).unwrap(), "{'a': 1}");
}

/// The budget: the child's ledger (a display that does not fit is
/// replaced by one marker, later ones dropped, the run goes on), and the
/// host's own, against display frames a program writes on fd 3 itself.
#[test]
fn the_display_budget_holds_on_both_sides() {
    for isolation in ["process", "sandbox"] {
        let dir = tempfile::tempdir().unwrap();
        // {"type":"display","data":{"text/plain":"'xxx...'"}} is 45 bytes plus
        // the x's (1,045: the third is over 3,000 for the child), and the
        // host charges 256 more a display (2,602 for two).
        let program = "for i in range(3):\n    display('x' * 1000)\nreturn 'done'";
        let o = pycage(dir.path())
            .args(["run", "--isolation", isolation, "--json", "--max-display-bytes", "3000", "-c", program])
            .output()
            .unwrap();
        assert_exit(&o, 0);
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["value"], json!("done"));
        let texts: Vec<&str> =
            v["displays"].as_array().unwrap().iter().map(|d| d["data"]["text/plain"].as_str().unwrap()).collect();
        assert_eq!(texts.len(), 3, "{isolation}: {v}");
        assert_eq!(texts[2], "[pycage] display output truncated at 3000 bytes", "{isolation}");

        // Forged frames skip the child's ledger; the host's stops them.
        let forged = "import os\n\
            line = b'{\"type\":\"display\",\"data\":{\"image/png\":\"' + b'A' * 200 + b'\"}}\\n'\n\
            for i in range(5):\n    os.write(3, line)\n\
            display('after the host stopped')\n\
            return 'survived'";
        let o = pycage(dir.path())
            .args(["run", "--isolation", isolation, "--json", "--max-display-bytes", "1200", "-c", forged])
            .output()
            .unwrap();
        assert_exit(&o, 0);
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["value"], json!("survived"), "{isolation}: {v}");
        let displays = v["displays"].as_array().unwrap();
        // Each forged frame is 237 bytes, 493 with the host's charge.
        assert_eq!(displays.len(), 3, "two forged frames fit in 1200 bytes, then the marker: {v}");
        assert_eq!(displays[2]["data"], json!({"text/plain": "[pycage] display output truncated at 1200 bytes"}));
    }
}

/// `pycage mcp`'s `run_python`: the official MCP Python SDK client gets an
/// image content block per figure, decoding to a PNG of the figure's size;
/// text displays as text; `structuredContent` has the displays' metadata
/// and not their data.
#[test]
fn mcp_returns_figures_as_image_content() {
    let Some(venv) = data_venv() else { return };
    let Some(d) = deps::Deps::find() else { return };
    for isolation in ["process", "sandbox"] {
        let python = venv.join("bin/python").display().to_string();
        let venv_dir = venv.display().to_string();
        let argv = [
            env!("CARGO_BIN_EXE_pycage"),
            "mcp",
            "--isolation",
            isolation,
            "--python",
            &python,
            "--allow-read",
            &venv_dir,
        ];
        let steps = [
            json!({"op": "call", "tool": "run_python", "args": {"code": PLOT}}),
            json!({"op": "call", "tool": "run_python", "args": {"code": "class T:\n    def _repr_markdown_(self): return '**bold**'\n    def _repr_html_(self): return '<b>bold</b>'\ndisplay(T())"}}),
        ];
        let r = d.drive(&json!({"server": {"command": argv}, "steps": steps}), &[]);
        let plot = &r[0];
        assert_eq!(plot["isError"], json!(false), "{isolation}: {plot}");
        let blocks = plot["blocks"].as_array().unwrap();
        let images: Vec<&Value> = blocks.iter().filter(|b| b["type"] == "image").collect();
        assert_eq!(images.len(), 2, "{isolation}: {blocks:?}");
        assert_eq!(images[0]["mimeType"], "image/png");
        assert_eq!(png_size(&b64(images[0]["data"].as_str().unwrap())), (640, 480), "{isolation}");
        assert_eq!(png_size(&b64(images[1]["data"].as_str().unwrap())), (300, 200), "{isolation}");
        let structured = &plot["structured"];
        assert_eq!(structured["value"], json!(1));
        assert!(structured["logs"].as_array().unwrap().contains(&json!("drawn")), "{structured}");
        assert_eq!(
            structured["displays"],
            json!([
                {"types": ["image/png", "text/plain"], "shown_as": "image/png", "metadata": {"image/png": {"width": 640, "height": 480}}},
                {"types": ["text/plain"], "shown_as": "text/plain", "metadata": {}},
                {"types": ["image/png", "text/plain"], "shown_as": "image/png", "metadata": {"image/png": {"width": 300, "height": 200}}},
            ]),
            "{isolation}"
        );
        // The text content: the result's JSON (without image data), then 'between'.
        let text = plot["text"].as_str().unwrap();
        assert!(!text.contains("iVBOR"), "no image data in the text: {text}");
        assert!(text.ends_with("'between'"), "{text}");
        let md = &r[1];
        assert!(md["text"].as_str().unwrap().ends_with("**bold**"), "markdown first: {md}");
        assert_eq!(md["structured"]["displays"][0]["shown_as"], "text/markdown");
    }
}
