//! A run's displays on a terminal and as files: the one-line summary
//! readable output prints for each (`[display 1] image/png 640x480, 21 KB`),
//! and the file each becomes under `pycage run --output DIR` and in
//! `pycage repl`.
//!
//! A display is written as one file, of its richest MIME type
//! ([`Display::primary_mime`]): base64 types decoded, text as it is. The
//! name comes from pycage (a number and the type's extension), never from
//! the program; a file is created new (`O_EXCL`, so an existing file or
//! symlink of that name is never written through) and an existing name is
//! an error the caller reports.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use pycage_runtime::Display;

/// The file extension of a MIME type (`bin` when unknown).
pub fn extension(mime: &str) -> &'static str {
    match mime.split(';').next().unwrap_or(mime).trim() {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "application/pdf" => "pdf",
        "text/html" => "html",
        "text/markdown" => "md",
        "text/latex" => "tex",
        "application/json" => "json",
        "application/javascript" => "js",
        m if m.starts_with("text/") => "txt",
        m if m.ends_with("+json") => "json",
        _ => "bin",
    }
}

/// The pixel size of an image display: its metadata's `width`/`height` for
/// the type, else a PNG's own header.
fn pixel_size(d: &Display, mime: &str) -> Option<(u64, u64)> {
    let meta = d.metadata.as_ref().and_then(|m| m.root().get(mime));
    let dim = |k: &str| meta.and_then(|m| m.get(k)).and_then(|v| v.as_number()).and_then(|n| n.as_u64());
    if let (Some(w), Some(h)) = (dim("width"), dim("height")) {
        return Some((w, h));
    }
    if mime != "image/png" {
        return None;
    }
    // 8 bytes of signature, the IHDR chunk's length and type, then width
    // and height: 24 bytes are 32 base64 characters.
    let head = d.get(mime)?.get(..32)?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(head).ok()?;
    let w = u32::from_be_bytes(bytes.get(16..20)?.try_into().ok()?);
    let h = u32::from_be_bytes(bytes.get(20..24)?.try_into().ok()?);
    Some((u64::from(w), u64::from(h)))
}

/// Bytes of the content as a file (base64 decoded: three quarters of it,
/// less the padding).
fn content_len(mime: &str, text: &str) -> usize {
    if Display::is_base64(mime) {
        let text = text.trim_end();
        let pad = text.bytes().rev().take(2).filter(|&b| b == b'=').count();
        (text.len() / 4 * 3).saturating_sub(pad)
    } else {
        text.len()
    }
}

fn human_bytes(n: usize) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
    }
}

/// `[display N] <type>[ WxH], <size>[: <first line of its text/plain>]`:
/// text is cut to 100 characters (the caller escapes it for a terminal).
pub fn summary(n: usize, d: &Display) -> String {
    summary_with_file(n, d, None)
}

/// [`summary`], naming the file the display was written to after its size
/// (`, 21.3 KiB -> /tmp/d/display-1.png: <Figure ...>`).
pub fn summary_with_file(n: usize, d: &Display, file: Option<&Path>) -> String {
    let Some(mime) = d.primary_mime() else { return format!("[display {n}] (empty)") };
    let text = d.get(mime).unwrap_or_default();
    let mut line = format!("[display {n}] {mime}");
    if let Some((w, h)) = pixel_size(d, mime) {
        line.push_str(&format!(" {w}x{h}"));
    }
    line.push_str(&format!(", {}", human_bytes(content_len(mime, text))));
    if let Some(path) = file {
        line.push_str(&format!(" -> {}", path.display()));
    }
    if let Some(plain) = d.get("text/plain") {
        let first = plain.lines().next().unwrap_or_default();
        let cut: String = first.chars().take(100).collect();
        let more = if cut.len() < plain.len() { " ..." } else { "" };
        line.push_str(&format!(": {cut}{more}"));
    }
    line
}

/// A name for one `pycage run`'s display files that no other run's has:
/// the UTC time to the second (so a directory's files sort by run) and 24
/// random bits (so runs in the same second differ, and a program cannot
/// guess the name), `20261101T153012Z-3f9a1c`.
pub fn run_id() -> String {
    use std::hash::BuildHasher as _;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    // std's hasher keys come from the OS's random source, fresh per
    // process; the time and pid only spread them further.
    let random = std::collections::hash_map::RandomState::new().hash_one((now.as_nanos(), std::process::id()));
    format!("{}-{:06x}", utc_stamp(now.as_secs()), random & 0xff_ffff)
}

/// `YYYYMMDDTHHMMSSZ` of a Unix time (the civil calendar from a day count:
/// Howard Hinnant's `civil_from_days`).
fn utc_stamp(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// The stem of display `n`'s file in a run named `run_id`.
pub fn file_stem(run_id: &str, n: usize) -> String {
    format!("{run_id}-display-{n}")
}

/// Writes display `d` as `dir/<stem>.<ext>` (see the module docs); returns the path.
pub fn write_file(dir: &Path, stem: &str, d: &Display) -> Result<PathBuf, String> {
    write_file_sized(dir, stem, d).map(|(path, _)| path)
}

/// [`write_file`], also returning the bytes written.
pub fn write_file_sized(dir: &Path, stem: &str, d: &Display) -> Result<(PathBuf, u64), String> {
    let mime = d.primary_mime().ok_or("the display is empty")?;
    let text = d.get(mime).unwrap_or_default();
    let bytes = if Display::is_base64(mime) {
        base64::engine::general_purpose::STANDARD
            .decode(text.trim_end())
            .map_err(|e| format!("its {mime} is not base64: {e}"))?
    } else {
        text.as_bytes().to_vec()
    };
    let path = dir.join(format!("{stem}.{}", extension(mime)));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    file.write_all(&bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok((path, bytes.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pycage_runtime::JsonValue;

    fn png(w: u32, h: u32) -> String {
        let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        bytes.extend_from_slice(&w.to_be_bytes());
        bytes.extend_from_slice(&h.to_be_bytes());
        bytes.extend_from_slice(&[8, 6, 0, 0, 0]);
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn summaries() {
        let fig = Display {
            data: vec![("image/png".into(), png(640, 480)), ("text/plain".into(), "<Figure size 640x480>".into())],
            metadata: None,
        };
        assert_eq!(summary(1, &fig), "[display 1] image/png 640x480, 29 bytes: <Figure size 640x480>");
        let with_meta = Display {
            data: vec![("image/png".into(), png(1, 1))],
            metadata: Some(JsonValue::parse(br#"{"image/png":{"width":3,"height":2}}"#).unwrap()),
        };
        assert_eq!(summary(2, &with_meta), "[display 2] image/png 3x2, 29 bytes");
        let text = Display { data: vec![("text/plain".into(), "a\nb".into())], metadata: None };
        assert_eq!(summary(3, &text), "[display 3] text/plain, 3 bytes: a ...");
        let html = Display { data: vec![("text/html".into(), "x".repeat(2048))], metadata: None };
        assert_eq!(summary(4, &html), "[display 4] text/html, 2.0 KiB");
        assert_eq!(
            summary_with_file(5, &text, Some(Path::new("/d/display-5.txt"))),
            "[display 5] text/plain, 3 bytes -> /d/display-5.txt: a ..."
        );
    }

    #[test]
    fn run_ids_name_the_utc_second_and_differ_within_it() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400), "20000229T000000Z");
        assert_eq!(utc_stamp(1_793_532_612), "20261101T113012Z");
        assert_eq!(utc_stamp(4_107_542_399), "21000228T235959Z");
        let ids: std::collections::BTreeSet<String> = (0..64).map(|_| run_id()).collect();
        assert!(ids.len() >= 63, "{ids:?}");
        let id = ids.first().unwrap();
        assert_eq!(id.len(), "20261101T151012Z-3f9a1c".len(), "{id}");
        assert_eq!(file_stem(id, 3), format!("{id}-display-3"));
    }

    #[test]
    fn files_are_decoded_created_new_and_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let fig = Display { data: vec![("image/png".into(), png(2, 3))], metadata: None };
        let path = write_file(dir.path(), "display-1", &fig).unwrap();
        assert_eq!(path, dir.path().join("display-1.png"));
        assert!(std::fs::read(&path).unwrap().starts_with(b"\x89PNG"));
        assert!(write_file(dir.path(), "display-1", &fig).unwrap_err().contains("cannot create"));
        std::os::unix::fs::symlink("/etc/passwd-not-written", dir.path().join("display-2.md")).unwrap();
        let md = Display { data: vec![("text/markdown".into(), "# hi".into())], metadata: None };
        assert!(write_file(dir.path(), "display-2", &md).is_err(), "a symlink is never written through");
        assert_eq!(std::fs::read_to_string(write_file(dir.path(), "display-3", &md).unwrap()).unwrap(), "# hi");
        let bad = Display { data: vec![("image/png".into(), "%%%".into())], metadata: None };
        assert!(write_file(dir.path(), "display-4", &bad).unwrap_err().contains("not base64"));
        assert_eq!(extension("image/svg+xml"), "svg");
        assert_eq!(extension("application/vnd.vegalite.v5+json"), "json");
        assert_eq!(extension("application/x-thing"), "bin");
    }
}
