//! Fuzz target: the host's whole inbound path for child→host bytes.
//!
//! Input layout: `[cap, chunk_a, chunk_b, stream...]`.
//! - `cap` picks the per-line cap (small caps exercise `Oversized`);
//! - `chunk_a`/`chunk_b` are the chunk sizes the stream is fed in
//!   (alternating), the way a socket delivers arbitrary splits;
//! - `stream` is what the child wrote on fd 3.
//!
//! Checked for every input:
//! - the splitter's events equal "split on `\n`, cap each line", whatever the
//!   chunking, and `FrameReader` over a chunked reader agrees;
//! - every line: `validate_child_frame` never panics, agrees with
//!   `JsonValue::parse` on whether the line is JSON, and agrees with
//!   `serde_json` on acceptance when the value is shallow enough for it;
//! - a frame's `done.value` / `call.args`: the meter equals the encoded
//!   length, stops one byte under it, and the encoding parses back to the
//!   same value;
//! - the rebuilt frame's encoding validates to the same frame and encodes to
//!   the same bytes.
#![no_main]

use std::io::{self, Read};

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/pycage-protocol/tests/support/mod.rs"]
mod support;
use support::{ev, has_key, Ev, SERDE_NUMBER_TOKEN};
use pycage_protocol::{
    meter_value, parse_child_frame, ChildFrame, FrameError, FrameReader, JsonValue, LineEvent, LineSplitter,
};



/// serde_json's parser refuses nesting past 128; compare only below that.
const SERDE_DEPTH: usize = 120;



fn check_value(v: &JsonValue) {
    let enc = v.to_canonical_string();
    let n = enc.len();
    assert_eq!(meter_value(v, u64::MAX), Some(n));
    assert_eq!(meter_value(v, n as u64), Some(n));
    assert_eq!(v.canonical_len_within(n.saturating_sub(1)), if n == 0 { Some(0) } else { None });
    assert_eq!(v.canonical_len_within(n / 2), if n / 2 >= n { Some(n) } else { None });
    let back = JsonValue::parse(enc.as_bytes()).expect("canonical encoding parses");
    assert_eq!(&back, v, "canonical encoding parses back to the same value");
    assert_eq!(&v.root().to_owned(), v);
}

fn check_line(line: &[u8]) {
    let parsed = JsonValue::parse(line);
    if let Ok(v) = &parsed {
        check_value(v);
        if v.depth() <= SERDE_DEPTH && !has_key(v.root(), SERDE_NUMBER_TOKEN) {
            assert!(
                serde_json::from_slice::<serde_json::Value>(line).is_ok(),
                "we accept, serde_json refuses: {:?}",
                String::from_utf8_lossy(line)
            );
        }
    } else {
        assert!(
            serde_json::from_slice::<serde_json::Value>(line).is_err(),
            "we refuse ({:?}), serde_json accepts: {:?}",
            parsed,
            String::from_utf8_lossy(line)
        );
    }
    match parse_child_frame(line) {
        Ok(frame) => {
            assert!(parsed.is_ok());
            match &frame {
                ChildFrame::Done { value: Some(v), .. }
                | ChildFrame::Call { args: v, .. }
                | ChildFrame::Display { metadata: Some(v), .. } => check_value(v),
                ChildFrame::Done { value: None, .. }
                | ChildFrame::BootAck
                | ChildFrame::Log { .. }
                | ChildFrame::Display { metadata: None, .. } => {}
            }
            let mut out = Vec::new();
            frame.encode(&mut out);
            let again = parse_child_frame(&out).expect("a rebuilt frame validates");
            assert_eq!(again, frame, "a rebuilt frame validates to itself");
            let mut out2 = Vec::new();
            again.encode(&mut out2);
            assert_eq!(out, out2);
        }
        Err(FrameError::Json(e)) => assert_eq!(parsed.err(), Some(e)),
        Err(_) => assert!(parsed.is_ok()),
    }
}

/// A reader that hands out `a`, `b`, `a`, ... bytes per call.
struct Chunked<'a> {
    data: &'a [u8],
    sizes: [usize; 2],
    i: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.sizes[self.i % 2].min(buf.len()).min(self.data.len());
        self.i += 1;
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    let (hdr, stream) = data.split_at(data.len().min(3));
    let cap = match hdr.first() {
        Some(&c) if c < 64 => usize::from(c) * 4,
        _ => 1 << 20,
    };
    let sizes = [hdr.get(1).map_or(1, |&b| usize::from(b) + 1), hdr.get(2).map_or(1, |&b| usize::from(b) + 1)];

    // The splitter, fed in alternating chunk sizes.
    let mut s = LineSplitter::new(cap);
    let mut events = Vec::new();
    let mut rest = stream;
    let mut i = 0;
    while !rest.is_empty() {
        let (mut chunk, tail) = rest.split_at(sizes[i % 2].min(rest.len()));
        rest = tail;
        i += 1;
        while !chunk.is_empty() {
            let (used, e) = s.feed(chunk);
            assert!(used > 0 && used <= chunk.len());
            if let Some(e) = e {
                if let LineEvent::Line(l) = &e {
                    assert!(l.len() <= cap);
                    check_line(l);
                }
                events.push(ev(e));
            }
            assert!(s.buffered() <= cap);
            chunk = &chunk[used..];
        }
    }
    assert_eq!(s.total_bytes(), stream.len() as u64);
    if let Some(e) = s.finish() {
        if let LineEvent::Line(l) = &e {
            check_line(l);
        }
        events.push(ev(e));
    }

    // The reference model.
    let mut parts: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    if parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    let model: Vec<Ev> =
        parts.into_iter().map(|p| if p.len() > cap { Ev::Over } else { Ev::Line(p.to_vec()) }).collect();
    assert_eq!(events, model);

    // FrameReader over a reader with the same splits.
    let mut r = FrameReader::new(Chunked { data: stream, sizes, i: 0 }, cap);
    let mut read = Vec::new();
    while let Some(e) = r.next_event().expect("in-memory reads do not fail") {
        read.push(ev(e));
    }
    assert_eq!(read, events);
});
