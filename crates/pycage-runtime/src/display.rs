//! A run's rich output: [`Display`] (one MIME bundle and its metadata, as
//! `display()` or a matplotlib figure made it) and the host's display
//! ledger, which meters them against `max_display_bytes`.
//!
//! The ledger mirrors the log ledger (`pycage_protocol::ledger`): both sides keep one.
//! A display's size is the byte length of its `display` frame as the host
//! re-encodes it (its line without the newline; what an honest child sends,
//! byte for byte). Capture stops at the first display that does not fit,
//! or at the child's marker frame (`display` with `truncated: true`), which
//! is trusted for *stopping* only: the host adds its own marker display
//! (`text/plain` [`pycage_protocol::display_truncation_marker`]), exactly
//! once. That display and every later one are dropped; the run goes on.
//!
//! The host also charges each display [`DISPLAY_CHARGE`] bytes for holding
//! it (a `Display`, its vectors and strings, and its event when streamed):
//! a quarter of a million empty displays fit the default 8 MiB of frames
//! and held 85-115 MiB of host memory. So the host may stop before an
//! honest child's ledger runs out (only with displays of a few hundred
//! bytes); its marker is then the result's, and the child's later frames
//! are dropped.

use pycage_protocol::{display_truncation_marker, json_string_len, BuildError, ChildFrame, JsonBuilder, JsonValue};

/// What the host's ledger adds to each display's frame length: about what
/// keeping a small display costs in host memory.
pub const DISPLAY_CHARGE: u64 = 256;

/// One display of a run: a MIME bundle, as IPython's `display()` makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Display {
    /// MIME type → content, in the order the child sent them (each type
    /// once). Text types are text; binary types (`image/png`,
    /// `image/jpeg`, ...: see [`Display::is_base64`]) are base64; JSON types
    /// (`application/json`, `*+json`) are JSON text.
    pub data: Vec<(String, String)>,
    /// The display's metadata object (IPython's: per MIME type, e.g.
    /// `{"image/png": {"width": 640, "height": 480}}`); `None` when the
    /// program gave none. Always an object when set.
    pub metadata: Option<JsonValue>,
}

impl Display {
    /// The content of one MIME type.
    pub fn get(&self, mime: &str) -> Option<&str> {
        self.data.iter().find(|(m, _)| m == mime).map(|(_, t)| t.as_str())
    }

    /// Whether content of `mime` is carried as base64: everything but text
    /// (`text/*`), JSON (`application/json`, `*+json`), JavaScript and
    /// SVG (`image/svg+xml` is XML text), as in Jupyter's notebook format.
    pub fn is_base64(mime: &str) -> bool {
        let mime = mime.split(';').next().unwrap_or(mime).trim();
        !(mime.starts_with("text/")
            || mime == "application/json"
            || mime.ends_with("+json")
            || mime == "application/javascript"
            || mime == "image/svg+xml")
    }

    /// Whether content of `mime` is JSON text.
    pub fn is_json(mime: &str) -> bool {
        let mime = mime.split(';').next().unwrap_or(mime).trim();
        mime == "application/json" || mime.ends_with("+json")
    }

    /// The richest MIME type present, in IPython's order of preference
    /// (images, then HTML, markdown, JSON, text): what a one-line summary
    /// names.
    pub fn primary_mime(&self) -> Option<&str> {
        const PREFERENCE: [&str; 8] = [
            "image/png",
            "image/jpeg",
            "image/svg+xml",
            "text/html",
            "text/markdown",
            "text/latex",
            "application/json",
            "text/plain",
        ];
        PREFERENCE
            .iter()
            .find(|m| self.get(m).is_some())
            .copied()
            .or_else(|| self.data.first().map(|(m, _)| m.as_str()))
    }

    /// Appends `{"data": {mime: text, ...}, "metadata": {...}}` (metadata
    /// `{}` when there is none).
    pub fn write_json(&self, b: &mut JsonBuilder) -> Result<(), BuildError> {
        b.begin_object()?;
        b.key("data")?;
        b.begin_object()?;
        for (mime, text) in &self.data {
            b.key(mime)?;
            b.string(text)?;
        }
        b.end()?;
        b.key("metadata")?;
        match &self.metadata {
            Some(m) => b.value(m.root())?,
            None => {
                b.begin_object()?;
                b.end()?;
            }
        }
        b.end()
    }

    /// Byte length of the display's `display` frame as the host encodes
    /// it (without the newline), counted without building it.
    pub fn frame_len(&self) -> u64 {
        // {"type":"display","data":{ ... }}
        let mut n = r#"{"type":"display","data":{}}"#.len();
        for (i, (mime, text)) in self.data.iter().enumerate() {
            n = n.saturating_add(usize::from(i > 0) + json_string_len(mime) + 1 + json_string_len(text));
        }
        if let Some(m) = &self.metadata {
            let len = m.canonical_len_within(usize::MAX).unwrap_or(usize::MAX);
            n = n.saturating_add(r#","metadata":"#.len()).saturating_add(len);
        }
        n as u64
    }

    /// The display as one JSON object ([`Display::write_json`]).
    pub fn to_json(&self) -> JsonValue {
        let mut b = JsonBuilder::new();
        match self.write_json(&mut b).and_then(|()| b.finish()) {
            Ok(v) => v,
            // Unreachable: each step is valid by construction.
            Err(_) => JsonValue::null(),
        }
    }
}

/// The host's display ledger (see the module docs).
#[derive(Debug)]
pub(crate) struct DisplayLedger {
    displays: Vec<Display>,
    used: u64,
    max_bytes: u64,
    stopped: bool,
}

impl DisplayLedger {
    pub(crate) fn new(max_bytes: u64) -> Self {
        DisplayLedger { displays: Vec::new(), used: 0, max_bytes, stopped: false }
    }

    /// Takes one validated `display` frame; returns the display to stream,
    /// if one was kept (the frame itself, or the host's marker).
    pub(crate) fn push(&mut self, frame: ChildFrame) -> Option<&Display> {
        let ChildFrame::Display { data, metadata, truncated } = frame else {
            return None;
        };
        if self.stopped {
            return None;
        }
        if truncated {
            return self.truncate();
        }
        let display = Display { data, metadata };
        let size = display.frame_len().saturating_add(DISPLAY_CHARGE);
        if size > self.max_bytes.saturating_sub(self.used) {
            return self.truncate();
        }
        self.used += size;
        self.displays.push(display);
        self.displays.last()
    }

    /// Stops capture with the marker display (once).
    fn truncate(&mut self) -> Option<&Display> {
        if self.stopped {
            return None;
        }
        self.stopped = true;
        self.displays.push(Display {
            data: vec![("text/plain".into(), display_truncation_marker(self.max_bytes))],
            metadata: None,
        });
        self.displays.last()
    }

    pub(crate) fn into_displays(self) -> Vec<Display> {
        self.displays
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(text: &str, truncated: bool) -> ChildFrame {
        ChildFrame::Display { data: vec![("text/plain".into(), text.into())], metadata: None, truncated }
    }

    /// `{"type":"display","data":{"text/plain":"..."}}` is 43 bytes plus the
    /// text, and the ledger charges [`DISPLAY_CHARGE`] more.
    const ENVELOPE: u64 = 43 + DISPLAY_CHARGE;

    #[test]
    fn meters_the_encoded_frame_and_stops_at_the_first_that_does_not_fit() {
        let budget = 2 * ENVELOPE + 3;
        let mut l = DisplayLedger::new(budget);
        assert!(l.push(frame("a", false)).is_some());
        assert!(l.push(frame("bc", false)).is_some(), "exactly at the budget");
        let marker = l.push(frame("", false)).cloned().unwrap();
        let text = format!("[pycage] display output truncated at {budget} bytes");
        assert_eq!(marker.get("text/plain"), Some(text.as_str()));
        assert!(l.push(frame("", false)).is_none(), "capture stopped");
        assert!(l.push(frame("", true)).is_none(), "one marker");
        let texts: Vec<_> = l.into_displays().iter().map(|d| d.get("text/plain").unwrap().to_owned()).collect();
        assert_eq!(texts, ["a".to_owned(), "bc".to_owned(), text]);
    }

    #[test]
    fn many_tiny_displays_are_charged_what_holding_them_costs() {
        // 8 MiB of empty displays' frames would be 240,000 displays; with
        // the charge, about 28,000 (each held costs the host ~300 bytes).
        let budget = 8 << 20;
        let mut l = DisplayLedger::new(budget);
        let mut kept = 0u64;
        while l.push(frame("", false)).is_some_and(|d| d.get("text/plain") == Some("")) {
            kept += 1;
        }
        assert_eq!(kept, budget / ENVELOPE);
    }

    #[test]
    fn the_childs_marker_stops_capture_with_the_hosts_text() {
        let mut l = DisplayLedger::new(1000);
        l.push(frame("kept", false));
        let marker = l.push(frame("forged text", true)).cloned().unwrap();
        assert_eq!(marker.get("text/plain"), Some("[pycage] display output truncated at 1000 bytes"));
        assert!(l.push(frame("after", false)).is_none());
        assert_eq!(l.into_displays().len(), 2);
    }

    #[test]
    fn a_zero_budget_keeps_only_the_marker() {
        let mut l = DisplayLedger::new(0);
        l.push(frame("x", false));
        let d = l.into_displays();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].get("text/plain"), Some("[pycage] display output truncated at 0 bytes"));
    }

    #[test]
    fn frame_len_is_the_encoded_length() {
        let meta = JsonValue::parse("{\"é\":[1.50,\"\\n\",{}]}".as_bytes()).unwrap();
        for (data, metadata) in [
            (vec![], None),
            (vec![("text/plain".to_owned(), "a\"b\u{1}é".to_owned())], None),
            (vec![("a".into(), "".into()), ("image/png".into(), "iVBO".into())], Some(meta)),
        ] {
            let d = Display { data: data.clone(), metadata: metadata.clone() };
            let mut out = Vec::new();
            ChildFrame::Display { data, metadata, truncated: false }.encode(&mut out);
            assert_eq!(d.frame_len(), out.len() as u64, "{}", String::from_utf8_lossy(&out));
        }
    }

    #[test]
    fn mime_kinds_and_json() {
        assert!(Display::is_base64("image/png"));
        assert!(Display::is_base64("application/pdf"));
        assert!(!Display::is_base64("image/svg+xml"));
        assert!(!Display::is_base64("text/html; charset=utf-8"));
        assert!(!Display::is_base64("application/vnd.vegalite.v5+json"));
        assert!(Display::is_json("application/json"));
        let d = Display {
            data: vec![("text/plain".into(), "<Figure>".into()), ("image/png".into(), "iVBO".into())],
            metadata: Some(JsonValue::parse(br#"{"image/png":{"width":640,"height":480}}"#).unwrap()),
        };
        assert_eq!(d.primary_mime(), Some("image/png"));
        assert_eq!(
            d.to_json().to_string(),
            r#"{"data":{"text/plain":"<Figure>","image/png":"iVBO"},"metadata":{"image/png":{"width":640,"height":480}}}"#
        );
        let bare = Display { data: vec![("text/plain".into(), "x".into())], metadata: None };
        assert_eq!(bare.to_json().to_string(), r#"{"data":{"text/plain":"x"},"metadata":{}}"#);
    }
}
