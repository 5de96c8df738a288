//! Files into and out of a `run_python` call.
//!
//! In: the call's `files` argument, `{name: text | {"base64": data}}`, is
//! checked (count, bytes per file and in total, safe names) and written to a
//! private temporary directory (mode 0700) that lives as long as the call;
//! each file becomes one of the run's inputs ([`RunRequest::inputs`]), so
//! the program reads it read-only in its working directory under its name.
//!
//! Out: the run copies what the program left in `out/` to a directory
//! ([`RunRequest::output_dir`]): a private temporary one, whose files are
//! returned in the result as embedded resources (text when the bytes are
//! UTF-8 without NUL, else a base64 blob) up to a byte cap; or, when the
//! server has an output directory, a fresh unguessable subdirectory of it,
//! whose files are returned as resource links (`file://` URIs on the
//! server's host). A file that does not fit the cap is listed as skipped,
//! never cut.
//!
//! [`RunRequest::inputs`]: pycage_runtime::RunRequest::inputs
//! [`RunRequest::output_dir`]: pycage_runtime::RunRequest::output_dir

use std::path::{Path, PathBuf};

use base64::Engine;
use pycage_runtime::{CopyReport, Skipped, OUTPUT_DIR_NAME};
use rmcp::model::{ContentBlock, Resource, ResourceContents};
use serde_json::Value;

/// Limits of the `files` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// Files per call.
    pub max_files: usize,
    /// Bytes of one file (decoded).
    pub max_file_bytes: u64,
    /// Bytes of all files of one call (decoded).
    pub max_total_bytes: u64,
}

/// Longest file name, in bytes (the usual file system limit).
const MAX_NAME: usize = 255;

/// The call's input files, written and ready to be the run's inputs.
#[derive(Debug)]
pub(crate) struct Inputs {
    /// Removed on drop, with the files.
    _dir: tempfile::TempDir,
    pub paths: Vec<PathBuf>,
}

/// Why a file name is refused, if it is.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!("a file name is 1 to {MAX_NAME} bytes"));
    }
    if name == "." || name == ".." || name.contains("..") {
        return Err(format!("file name {name:?}: `..` is not allowed"));
    }
    if name.contains('/') {
        return Err(format!("file name {name:?}: a name, not a path (no `/`)"));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("file name {name:?}: no control characters (NUL, newline, ...)"));
    }
    if let Some(c) = name.chars().find(|c| invisible(*c)) {
        return Err(format!(
            "file name {name:?}: no invisible format characters (U+{:04X}; bidi controls, zero-width characters, \
             line separators: they make a name read as another)",
            u32::from(c)
        ));
    }
    if name == OUTPUT_DIR_NAME {
        return Err(format!("file name {name:?}: `{OUTPUT_DIR_NAME}` is where the program leaves its output"));
    }
    Ok(())
}

/// Whether `c` is a format character (Unicode category Cf: bidi
/// embeddings, overrides, isolates and marks, zero-width characters, the
/// byte order mark, tags, ...) or a line or paragraph separator.
fn invisible(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory};
    matches!(
        get_general_category(c),
        GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
    )
}

/// The decoded bytes of one `files` value, within `max` bytes.
fn decode(name: &str, value: &Value, max: u64) -> Result<Vec<u8>, String> {
    let too_big = |n: u64| format!("file {name:?}: {n} bytes, over the limit of {max} bytes per file");
    match value {
        Value::String(text) => {
            if text.len() as u64 > max {
                return Err(too_big(text.len() as u64));
            }
            Ok(text.as_bytes().to_vec())
        }
        Value::Object(o) if o.len() == 1 => {
            let Some(Value::String(data)) = o.get("base64") else {
                return Err(format!("file {name:?}: give text, or {{\"base64\": \"...\"}}"));
            };
            // Decoded size, known before decoding anything.
            let at_most = (data.len() as u64).div_ceil(4) * 3;
            if at_most > max.saturating_add(2) {
                return Err(too_big(at_most));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data.trim_end())
                .map_err(|e| format!("file {name:?}: not base64: {e}"))?;
            if bytes.len() as u64 > max {
                return Err(too_big(bytes.len() as u64));
            }
            Ok(bytes)
        }
        _ => Err(format!("file {name:?}: give text, or {{\"base64\": \"...\"}}")),
    }
}

/// Checks and writes the `files` argument (see the module docs). `None`
/// when there are none.
pub(crate) fn write_inputs(files: &Value, limits: InputLimits) -> Result<Option<Inputs>, String> {
    let Value::Object(files) = files else {
        return Err("`files` is an object: {\"name\": \"text\" or {\"base64\": \"...\"}}".into());
    };
    if files.is_empty() {
        return Ok(None);
    }
    if files.len() > limits.max_files {
        return Err(format!("{} files, over the limit of {} per call", files.len(), limits.max_files));
    }
    let mut decoded = Vec::with_capacity(files.len());
    let mut total = 0u64;
    for (name, value) in files {
        check_name(name)?;
        let bytes = decode(name, value, limits.max_file_bytes)?;
        total = total.saturating_add(bytes.len() as u64);
        if total > limits.max_total_bytes {
            return Err(format!("the files pass the limit of {} bytes per call", limits.max_total_bytes));
        }
        decoded.push((name, bytes));
    }
    let dir =
        private_dir("pycage-mcp-in-").tempdir().map_err(|e| format!("cannot store the files on the server: {e}"))?;
    let mut paths = Vec::with_capacity(decoded.len());
    for (name, bytes) in decoded {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).map_err(|e| format!("cannot store file {name:?} on the server: {e}"))?;
        paths.push(path);
    }
    Ok(Some(Inputs { _dir: dir, paths }))
}

/// A builder of directories only their owner can enter.
fn private_dir(prefix: &str) -> tempfile::Builder<'_, '_> {
    use std::os::unix::fs::PermissionsExt;
    let mut b = tempfile::Builder::new();
    b.prefix(prefix).permissions(std::fs::Permissions::from_mode(0o700));
    b
}

/// Where a run's `out/` goes.
#[derive(Debug)]
pub(crate) enum OutputDir {
    /// A private temporary directory: files come back embedded.
    Embedded(tempfile::TempDir),
    /// A subdirectory of the server's output directory: files come back as links.
    Linked(PathBuf),
}

impl OutputDir {
    /// A fresh one: under `server_dir` when the server has one.
    pub(crate) fn new(server_dir: Option<&Path>) -> Result<OutputDir, String> {
        match server_dir {
            None => private_dir("pycage-mcp-out-")
                .tempdir()
                .map(OutputDir::Embedded)
                .map_err(|e| format!("cannot make room for the output on the server: {e}")),
            Some(base) => private_dir("run-")
                .rand_bytes(16)
                .tempdir_in(base)
                // Kept: the links point into it.
                .map(|d| OutputDir::Linked(d.keep()))
                .map_err(|e| format!("cannot make room for the output on the server: {e}")),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            OutputDir::Embedded(d) => d.path(),
            OutputDir::Linked(p) => p,
        }
    }
}

/// A MIME type by file extension (the common ones a program writes).
fn mime_type(path: &Path) -> &'static str {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("txt" | "log") => "text/plain",
        Some("csv") => "text/csv",
        Some("tsv") => "text/tab-separated-values",
        Some("json") => "application/json",
        Some("jsonl" | "ndjson") => "application/jsonl",
        Some("md") => "text/markdown",
        Some("html" | "htm") => "text/html",
        Some("xml") => "application/xml",
        Some("svg") => "image/svg+xml",
        Some("py") => "text/x-python",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("pdf") => "application/pdf",
        Some("zip") => "application/zip",
        Some("parquet") => "application/vnd.apache.parquet",
        _ => "application/octet-stream",
    }
}

/// `s` percent-encoded for a URI path: everything but unreserved
/// characters and `/`.
fn uri_path(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The content blocks for what a run left in `out/`, and the report with
/// files that were not returned moved to `skipped`.
pub(crate) fn output_blocks(
    dir: &OutputDir,
    mut report: CopyReport,
    max_embedded: u64,
) -> (Vec<ContentBlock>, CopyReport) {
    use std::os::unix::ffi::OsStrExt;
    let mut blocks = Vec::new();
    let mut kept = Vec::with_capacity(report.files.len());
    let mut embedded = 0u64;
    for file in std::mem::take(&mut report.files) {
        let shown = file.path.to_string_lossy().into_owned();
        let mime = mime_type(&file.path);
        match dir {
            OutputDir::Linked(base) => {
                let full = base.join(&file.path);
                let uri = format!("file://{}", uri_path(full.as_os_str().as_bytes()));
                blocks.push(ContentBlock::resource_link(
                    Resource::new(uri, shown).with_mime_type(mime).with_size(file.bytes),
                ));
                kept.push(file);
            }
            OutputDir::Embedded(base) => {
                if embedded.saturating_add(file.bytes) > max_embedded {
                    report.truncated = true;
                    report.skipped.push(Skipped {
                        path: file.path,
                        reason: format!(
                            "{} bytes would pass the limit of {max_embedded} bytes returned per call: not returned",
                            file.bytes
                        ),
                        kind: pycage_runtime::SkipKind::Limit,
                    });
                    continue;
                }
                let bytes = match read_at_most(&base.path().join(&file.path), max_embedded - embedded) {
                    Ok(b) => b,
                    Err(e) => {
                        report.skipped.push(Skipped {
                            path: file.path,
                            reason: format!("not returned: {e}"),
                            kind: pycage_runtime::SkipKind::Failed,
                        });
                        continue;
                    }
                };
                embedded += bytes.len() as u64;
                let uri = format!("pycage://{OUTPUT_DIR_NAME}/{}", uri_path(file.path.as_os_str().as_bytes()));
                let contents = match String::from_utf8(bytes) {
                    Ok(text) if !text.contains('\0') => ResourceContents::text(text, uri),
                    Ok(text) => {
                        ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(text.as_bytes()), uri)
                    }
                    Err(e) => {
                        ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(e.as_bytes()), uri)
                    }
                };
                blocks.push(ContentBlock::resource(contents.with_mime_type(mime)));
                kept.push(file);
            }
        }
    }
    report.files = kept;
    report.bytes = report.files.iter().map(|f| f.bytes).sum();
    (blocks, report)
}

/// A file of our own copy, read whole but never past `max` bytes.
fn read_at_most(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::other("it grew past the limit of bytes returned per call"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: InputLimits = InputLimits { max_files: 3, max_file_bytes: 10, max_total_bytes: 15 };

    #[test]
    fn names_must_be_plain() {
        for bad in ["", ".", "..", "a/b", "/etc", "x..y", "a\0b", "a\nb", "out", &"n".repeat(256)] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        // Format characters and separators: bidi override, isolates and
        // marks, zero-width space and joiner, BOM, soft hyphen, Arabic
        // letter mark, a tag, line and paragraph separators.
        for c in [
            '\u{202e}',
            '\u{202a}',
            '\u{2066}',
            '\u{2069}',
            '\u{200e}',
            '\u{200f}',
            '\u{200b}',
            '\u{200d}',
            '\u{feff}',
            '\u{ad}',
            '\u{61c}',
            '\u{e0041}',
            '\u{2028}',
            '\u{2029}',
        ] {
            let name = format!("report{c}txt.exe");
            let e = check_name(&name).unwrap_err();
            assert!(e.contains(&format!("U+{:04X}", u32::from(c))) && e.contains("format characters"), "{e}");
        }
        for good in ["data.csv", ".hidden", "a b", "ünï.txt", "-x"] {
            assert!(check_name(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn inputs_are_bounded_and_written_privately() {
        let err = |v: Value| write_inputs(&v, LIMITS).unwrap_err();
        assert!(err(json!({"a": "x", "b": "x", "c": "x", "d": "x"})).contains("over the limit of 3"));
        assert!(err(json!({"a": "x".repeat(11)})).contains("11 bytes"));
        assert!(err(json!({"a": {"base64": "A".repeat(400)}})).contains("per file"));
        assert!(err(json!({"a": "x".repeat(10), "b": "y".repeat(6)})).contains("15 bytes per call"));
        assert!(err(json!({"a": {"base64": "%%%"}})).contains("not base64"));
        assert!(err(json!({"a": {"b64": "AA=="}})).contains("give text"));
        assert!(err(json!({"a": 5})).contains("give text"));
        assert!(err(json!(["a"])).contains("is an object"));
        assert!(err(json!({"../a": "x"})).contains("`..`"));
        assert!(write_inputs(&json!({}), LIMITS).unwrap().is_none());

        let inputs = write_inputs(&json!({"t.txt": "héllo", "b.bin": {"base64": "AAH/"}}), LIMITS).unwrap().unwrap();
        let mut read: Vec<(String, Vec<u8>)> = inputs
            .paths
            .iter()
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(p).unwrap()))
            .collect();
        read.sort();
        assert_eq!(read, [("b.bin".into(), vec![0, 1, 255]), ("t.txt".into(), "héllo".as_bytes().to_vec())]);
        let dir = inputs.paths[0].parent().unwrap().to_path_buf();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        drop(inputs);
        assert!(!dir.exists(), "removed with the call");
    }

    #[test]
    fn outputs_embed_text_and_blobs_under_the_cap() {
        let out = OutputDir::new(None).unwrap();
        std::fs::create_dir(out.path().join("sub")).unwrap();
        std::fs::write(out.path().join("a.txt"), "hi").unwrap();
        std::fs::write(out.path().join("sub/p q.png"), [0x89, b'P', b'N', b'G', 0]).unwrap();
        std::fs::write(out.path().join("big.csv"), "x".repeat(100)).unwrap();
        let report = CopyReport {
            files: vec![
                pycage_runtime::CopiedFile { path: "a.txt".into(), bytes: 2 },
                pycage_runtime::CopiedFile { path: "big.csv".into(), bytes: 100 },
                pycage_runtime::CopiedFile { path: "sub/p q.png".into(), bytes: 5 },
            ],
            bytes: 107,
            ..CopyReport::default()
        };
        let (blocks, report) = output_blocks(&out, report, 10);
        let blocks: Vec<Value> = blocks.iter().map(|b| serde_json::to_value(b).unwrap()).collect();
        assert_eq!(
            blocks,
            [
                json!({"type": "resource", "resource": {"uri": "pycage://out/a.txt", "mimeType": "text/plain", "text": "hi"}}),
                json!({"type": "resource", "resource": {"uri": "pycage://out/sub/p%20q.png", "mimeType": "image/png", "blob": "iVBORwA="}}),
            ]
        );
        assert_eq!(report.files.len(), 2);
        assert_eq!(report.bytes, 7);
        assert!(report.truncated);
        assert_eq!(report.skipped[0].path, PathBuf::from("big.csv"));
    }

    #[test]
    fn outputs_under_a_server_directory_are_links() {
        let base = tempfile::tempdir().unwrap();
        let out = OutputDir::new(Some(base.path())).unwrap();
        let name = out.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("run-") && name.len() == 4 + 16, "{name}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(out.path()).unwrap().permissions().mode() & 0o777, 0o700);
        let report = CopyReport {
            files: vec![pycage_runtime::CopiedFile { path: "r.json".into(), bytes: 4000 }],
            bytes: 4000,
            ..CopyReport::default()
        };
        let (blocks, report) = output_blocks(&out, report, 10);
        let link = serde_json::to_value(&blocks[0]).unwrap();
        assert_eq!(link["type"], json!("resource_link"));
        assert_eq!(link["uri"], json!(format!("file://{}/r.json", out.path().display())));
        assert_eq!((link["mimeType"].clone(), link["size"].clone()), (json!("application/json"), json!(4000)));
        assert_eq!(report.files.len(), 1, "the embed cap does not apply to links");
    }
}
