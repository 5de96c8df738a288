//! A run's displays as MCP content: each display becomes one content block
//! after the result's text, in order, and `structuredContent.displays`
//! describes them.
//!
//! - A display with an image a client can show (`image/png`,
//!   `image/jpeg`, `image/gif`, `image/webp`) becomes an image block (its
//!   base64 as it is): a multimodal model sees the chart it asked for. The
//!   data must be strict base64 (RFC 4648, padded, no whitespace) whose
//!   bytes begin with the type's signature; the program wrote it, and a
//!   client may choke on anything else. It is checked in place, a few KiB
//!   at a time, without a copy. Data that fails is not shown as an image:
//!   the display falls through to its text types.
//! - Otherwise its richest text becomes a text block: markdown, then HTML,
//!   LaTeX, JSON, SVG, plain text (a DataFrame's HTML table, the text of a
//!   `display("...")`). A display with none of these gets no block.
//!
//! The display's data never goes into the JSON text or `structuredContent`
//! (an image would cross twice): they carry `displays` `[{types, shown_as,
//! metadata}]` instead, `shown_as` naming the type of its block (absent
//! when it has none).

use pycage_protocol::{BuildError, JsonBuilder, JsonValue};
use pycage_runtime::Display;
use rmcp::model::ContentBlock;

/// Image types MCP clients show.
const IMAGES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
/// Text types, best first for a model reading them.
const TEXTS: [&str; 6] =
    ["text/markdown", "text/html", "text/latex", "application/json", "image/svg+xml", "text/plain"];

/// Base64 characters checked per step (decoded into a buffer on the stack).
const CHUNK: usize = 4096;

/// Whether `data` is strict base64 of an image of type `mime`: see the
/// module docs. Linear in the data, and allocates nothing.
fn is_image(mime: &str, data: &str) -> bool {
    use base64::Engine;
    let bytes = data.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return false;
    }
    let mut buf = [0u8; CHUNK / 4 * 3];
    let mut first = true;
    for chunk in bytes.chunks(CHUNK) {
        // Padding only in the last chunk: the engine refuses it elsewhere
        // inside a chunk, and a chunk ending in `=` must be the last.
        let Ok(n) = base64::engine::general_purpose::STANDARD.decode_slice(chunk, &mut buf) else { return false };
        if first {
            if !has_signature(mime, buf.get(..n).unwrap_or_default()) {
                return false;
            }
            first = false;
        }
        if chunk.last() == Some(&b'=') && chunk.as_ptr_range().end != bytes.as_ptr_range().end {
            return false;
        }
    }
    true
}

/// Whether `head` (the first decoded bytes) starts as a `mime` file does.
fn has_signature(mime: &str, head: &[u8]) -> bool {
    match mime {
        "image/png" => head.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" => head.starts_with(&[0xff, 0xd8, 0xff]),
        "image/gif" => head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a"),
        "image/webp" => head.len() >= 12 && head.starts_with(b"RIFF") && head.get(8..12) == Some(b"WEBP"),
        _ => false,
    }
}

/// The block of one display, and the MIME type it shows.
fn block(d: &Display) -> Option<(ContentBlock, &'static str)> {
    for mime in IMAGES {
        if let Some(data) = d.get(mime).filter(|data| is_image(mime, data)) {
            return Some((ContentBlock::image(data, mime), mime));
        }
    }
    for mime in TEXTS {
        if let Some(text) = d.get(mime) {
            return Some((ContentBlock::text(text), mime));
        }
    }
    None
}

/// The content blocks of `displays`, and their description for the result:
/// `[{types: [mime...], shown_as?, metadata}]`.
pub(crate) fn display_blocks(displays: &[Display]) -> (Vec<ContentBlock>, JsonValue) {
    let mut blocks = Vec::with_capacity(displays.len());
    let mut b = JsonBuilder::new();
    let built = (|| -> Result<(), BuildError> {
        b.begin_array()?;
        for d in displays {
            let shown = block(d).map(|(block, mime)| {
                blocks.push(block);
                mime
            });
            b.begin_object()?;
            b.key("types")?;
            b.begin_array()?;
            for (mime, _) in &d.data {
                b.string(mime)?;
            }
            b.end()?;
            if let Some(mime) = shown {
                b.key("shown_as")?;
                b.string(mime)?;
            }
            b.key("metadata")?;
            match &d.metadata {
                Some(m) => b.value(m.root())?,
                None => {
                    b.begin_object()?;
                    b.end()?;
                }
            }
            b.end()?;
        }
        b.end()
    })();
    let meta = built.and_then(|()| b.finish()).unwrap_or_else(|_| JsonValue::null());
    (blocks, meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn display(data: &[(&str, &str)]) -> Display {
        Display { data: data.iter().map(|(m, t)| (m.to_string(), t.to_string())).collect(), metadata: None }
    }

    /// A PNG's signature and a little more, in base64.
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUg==";

    #[test]
    fn images_as_images_text_as_text() {
        let mut fig = display(&[("text/plain", "<Figure>"), ("image/png", PNG)]);
        fig.metadata = Some(JsonValue::parse(br#"{"image/png":{"width":640,"height":480}}"#).unwrap());
        let frame = display(&[("text/plain", "   a\n0  1"), ("text/html", "<table></table>")]);
        let md = display(&[("text/markdown", "# hi"), ("text/html", "<h1>hi</h1>")]);
        let nothing = display(&[("application/x-thing", "AAEC")]);
        let (blocks, meta) = display_blocks(&[fig, frame, md, nothing]);
        let json: Vec<serde_json::Value> = blocks.iter().map(|b| serde_json::to_value(b).unwrap()).collect();
        assert_eq!(json[0], serde_json::json!({"type": "image", "data": PNG, "mimeType": "image/png"}));
        assert_eq!(json[1], serde_json::json!({"type": "text", "text": "<table></table>"}));
        assert_eq!(json[2], serde_json::json!({"type": "text", "text": "# hi"}));
        assert_eq!(json.len(), 3);
        assert_eq!(
            meta.to_string(),
            r#"[{"types":["text/plain","image/png"],"shown_as":"image/png","metadata":{"image/png":{"width":640,"height":480}}},{"types":["text/plain","text/html"],"shown_as":"text/html","metadata":{}},{"types":["text/markdown","text/html"],"shown_as":"text/markdown","metadata":{}},{"types":["application/x-thing"],"metadata":{}}]"#
        );
    }

    #[test]
    fn image_data_must_be_strict_base64_of_its_type() {
        use base64::Engine;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let png = |len: usize| {
            let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
            v.resize(len, 7);
            v
        };
        for len in [8, 9, 10, 11, 3071, 3072, 3073, 10_000] {
            assert!(is_image("image/png", &b64(&png(len))), "{len} bytes");
        }
        assert!(is_image("image/jpeg", &b64(&[0xff, 0xd8, 0xff, 0xe0, 1])));
        assert!(is_image("image/gif", &b64(b"GIF89a....")));
        assert!(is_image("image/webp", &b64(b"RIFF\0\0\0\0WEBPVP8 ")));
        let good = b64(&png(5000));
        let mut cases: Vec<(String, &str)> = vec![
            ("not base64!".into(), "not base64"),
            ("".into(), "empty"),
            (good[..good.len() - 1].into(), "cut"),
            (format!("{}\n", &good[..good.len() - 4]), "a newline"),
            (format!("{} ", &good[..good.len() - 4]), "a space"),
            (format!("{}-{}", &good[..100], &good[101..]), "base64url"),
            (format!("{}\u{e9}{}", &good[..100], &good[102..]), "not ASCII"),
            (b64(b"GIF89a...."), "another type's bytes"),
            (b64(b"<svg/>"), "text"),
        ];
        // Padding inside the data (two padded blocks back to back), at a
        // chunk's end and not.
        let padded = b64(&png(10));
        cases.push((format!("{padded}{padded}"), "padding inside"));
        let mut at_chunk = b64(&png(CHUNK / 4 * 3 - 1));
        at_chunk.push_str(&b64(&png(10)));
        assert_eq!(&at_chunk[CHUNK - 1..CHUNK], "=");
        cases.push((at_chunk, "padding at a chunk's end"));
        // Non-canonical trailing bits.
        let mut loose = b64(&png(10));
        loose.replace_range(loose.len() - 2..loose.len() - 1, "B");
        cases.push((loose, "trailing bits"));
        for (data, why) in &cases {
            assert!(!is_image("image/png", data), "{why}: accepted");
        }
        // Refused, the display falls back to its text.
        let d = display(&[("text/plain", "<Figure>"), ("image/png", "not base64!")]);
        let (blocks, meta) = display_blocks(&[d]);
        assert_eq!(serde_json::to_value(&blocks[0]).unwrap(), serde_json::json!({"type": "text", "text": "<Figure>"}));
        assert_eq!(meta.to_string(), r#"[{"types":["text/plain","image/png"],"shown_as":"text/plain","metadata":{}}]"#);
        let (blocks, _) = display_blocks(&[display(&[("image/png", "AAAA")])]);
        assert!(blocks.is_empty());
    }
}
