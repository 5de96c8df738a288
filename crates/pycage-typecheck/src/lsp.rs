//! The language-server protocol's framing, sans I/O: `Content-Length`
//! headers, then a JSON body ([`encode`], [`Decoder`]).
//!
//! ty is a host tool, but what it writes quotes the program it checks
//! (types of literals, names), so its output is read like any other: a
//! header is at most [`MAX_HEADER_BYTES`], a body at most
//! [`MAX_BODY_BYTES`], checked before the body is buffered; anything else
//! is a [`FrameError`] and the server is dropped.

/// Longest header block (`Content-Length: ...\r\n...\r\n\r\n`).
pub const MAX_HEADER_BYTES: usize = 4096;

/// Largest message body. A diagnostics answer for a program of many errors
/// is the largest message ty sends; each diagnostic is a few hundred bytes,
/// so this is far above any honest answer and still bounds the memory one
/// message can take.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// Why the server's output cannot be read any further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a message header is longer than {MAX_HEADER_BYTES} bytes")]
    HeaderTooLong,
    #[error("a message header has no valid Content-Length")]
    NoLength,
    #[error("a message of {0} bytes is over the {MAX_BODY_BYTES}-byte limit")]
    TooLarge(usize),
}

/// One message, framed.
pub fn encode(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// Splits a byte stream into message bodies.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already handed out (compacted when it grows).
    start: usize,
    /// The body length of the message whose header was read.
    want: Option<usize>,
}

impl Decoder {
    /// Adds bytes read from the server.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete body, if one is in.
    pub fn next_body(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            let pending = self.buf.get(self.start..).unwrap_or_default();
            match self.want {
                Some(len) => {
                    if pending.len() < len {
                        return Ok(None);
                    }
                    let body = pending.get(..len).unwrap_or_default().to_vec();
                    self.start += len;
                    self.want = None;
                    return Ok(Some(body));
                }
                None => {
                    let Some(end) = find_blank_line(pending) else {
                        if pending.len() > MAX_HEADER_BYTES {
                            return Err(FrameError::HeaderTooLong);
                        }
                        return Ok(None);
                    };
                    if end > MAX_HEADER_BYTES {
                        return Err(FrameError::HeaderTooLong);
                    }
                    let len = content_length(pending.get(..end).unwrap_or_default())?;
                    if len > MAX_BODY_BYTES {
                        return Err(FrameError::TooLarge(len));
                    }
                    self.start += end + 4;
                    self.want = Some(len);
                }
            }
        }
    }
}

/// Where the header's `\r\n\r\n` starts.
fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).take(MAX_HEADER_BYTES + 1).position(|w| w == b"\r\n\r\n")
}

fn content_length(header: &[u8]) -> Result<usize, FrameError> {
    let text = std::str::from_utf8(header).map_err(|_| FrameError::NoLength)?;
    for line in text.split("\r\n") {
        let Some((name, value)) = line.split_once(':') else { continue };
        if name.trim().eq_ignore_ascii_case("content-length") {
            return value.trim().parse().map_err(|_| FrameError::NoLength);
        }
    }
    Err(FrameError::NoLength)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_come_out_whole_whatever_the_chunks() {
        let mut stream = encode(b"{\"a\":1}");
        stream.extend(b"Content-Type: x\r\ncontent-length: 2\r\n\r\n{}");
        for chunk in [1, 2, 3, 7, stream.len()] {
            let mut d = Decoder::default();
            let mut out = Vec::new();
            for piece in stream.chunks(chunk) {
                d.push(piece);
                while let Some(b) = d.next_body().unwrap() {
                    out.push(b);
                }
            }
            assert_eq!(out, vec![b"{\"a\":1}".to_vec(), b"{}".to_vec()], "chunks of {chunk}");
        }
    }

    #[test]
    fn oversized_and_malformed_headers_are_errors() {
        let mut d = Decoder::default();
        d.push(format!("Content-Length: {}\r\n\r\n", MAX_BODY_BYTES + 1).as_bytes());
        assert_eq!(d.next_body(), Err(FrameError::TooLarge(MAX_BODY_BYTES + 1)));
        let mut d = Decoder::default();
        d.push(&vec![b'x'; MAX_HEADER_BYTES + 10]);
        assert_eq!(d.next_body(), Err(FrameError::HeaderTooLong));
        let mut d = Decoder::default();
        d.push(b"Content-Length: many\r\n\r\n");
        assert_eq!(d.next_body(), Err(FrameError::NoLength));
    }
}
