//! A run's displays as MCP content: each display becomes one content block
//! after the result's text, in order, and `structuredContent.displays`
//! describes them.
//!
//! - A display with an image a client can show (`image/png`,
//!   `image/jpeg`, `image/gif`, `image/webp`) becomes an image block (its
//!   base64 as it is): a multimodal model sees the chart it asked for.
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

/// The block of one display, and the MIME type it shows.
fn block(d: &Display) -> Option<(ContentBlock, &'static str)> {
    for mime in IMAGES {
        if let Some(data) = d.get(mime) {
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

    #[test]
    fn images_as_images_text_as_text() {
        let mut fig = display(&[("text/plain", "<Figure>"), ("image/png", "iVBO")]);
        fig.metadata = Some(JsonValue::parse(br#"{"image/png":{"width":640,"height":480}}"#).unwrap());
        let frame = display(&[("text/plain", "   a\n0  1"), ("text/html", "<table></table>")]);
        let md = display(&[("text/markdown", "# hi"), ("text/html", "<h1>hi</h1>")]);
        let nothing = display(&[("application/x-thing", "AAEC")]);
        let (blocks, meta) = display_blocks(&[fig, frame, md, nothing]);
        let json: Vec<serde_json::Value> = blocks.iter().map(|b| serde_json::to_value(b).unwrap()).collect();
        assert_eq!(json[0], serde_json::json!({"type": "image", "data": "iVBO", "mimeType": "image/png"}));
        assert_eq!(json[1], serde_json::json!({"type": "text", "text": "<table></table>"}));
        assert_eq!(json[2], serde_json::json!({"type": "text", "text": "# hi"}));
        assert_eq!(json.len(), 3);
        assert_eq!(
            meta.to_string(),
            r#"[{"types":["text/plain","image/png"],"shown_as":"image/png","metadata":{"image/png":{"width":640,"height":480}}},{"types":["text/plain","text/html"],"shown_as":"text/html","metadata":{}},{"types":["text/markdown","text/html"],"shown_as":"text/markdown","metadata":{}},{"types":["application/x-thing"],"metadata":{}}]"#
        );
    }
}
