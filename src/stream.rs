//! A watch response's body as it comes off the socket: the HTTP/1.1 framing undone and
//! the complete frames decoded, in one call per read.
//!
//! The lean transport hands every read of a watch connection here as it is (`WatchBody::
//! feed`): chunked transfer coding (a chunk, or its size line, may be split anywhere
//! between reads), a ``Content-Length`` body, or one that lasts until the server closes
//! (undone by `unframe::Unframer`, which whole answers, `http1::Reader`, share).
//! The body's bytes go to the one frame decoder there is (`frames::decode_lines` for JSON
//! lines, `proto::decode_frames` for protobuf frames), and what follows the last complete
//! frame waits for the next read. Python then sees a list of decoded frames per read, not
//! a read, a split and a call per line.

use crate::frames::{self, Error, Lines, Options};
use crate::proto;
pub use crate::unframe::Framing;
use crate::unframe::Unframer;
#[cfg(test)]
use crate::unframe::MAX_CONTROL_LINE;

/// One watch response's body (see the module documentation).
#[derive(Debug)]
pub struct WatchBody {
    framing: Unframer,
    /// The body's bytes not decoded yet (the start of a frame).
    body: Vec<u8>,
    protobuf: bool,
    max_line: usize,
    /// The body is complete (the last chunk and trailers, or the length, were read).
    pub done: bool,
    /// Bytes came after the body's end: the connection is out of step.
    pub overrun: bool,
}

/// What one `WatchBody::feed` read.
#[derive(Debug)]
pub struct Fed {
    /// The frames completed by the read, and the first malformed one, as the decoders
    /// give them (`used` is of no further interest).
    pub lines: Lines,
    /// The body is complete.
    pub done: bool,
}

impl WatchBody {
    /// A body framed as `framing`, of JSON lines or (`protobuf`) length-prefixed protobuf
    /// frames; a frame longer than `max_line` bytes is an error.
    pub fn new(framing: Framing, protobuf: bool, max_line: usize) -> Self {
        let framing = Unframer::new(framing);
        WatchBody {
            done: framing.done,
            framing,
            body: Vec::new(),
            protobuf,
            max_line,
            overrun: false,
        }
    }

    /// The bytes of a frame begun and not complete (a body that ends with some was cut).
    pub fn pending(&self) -> usize {
        self.body.len()
    }

    /// Take one read's bytes: the framing undone, every frame they complete decoded.
    /// A framing error (a bad chunk size, a chunk not ended by CRLF) is an `Err`: the
    /// connection cannot be read further. A malformed or too long frame is the `Lines`'s
    /// `error`, after the frames before it; nothing is read after one.
    pub fn feed(&mut self, data: &[u8], options: Options<'_>) -> Result<Fed, Error> {
        let before = self.body.len();
        self.framing.unframe(data, &mut self.body)?;
        (self.done, self.overrun) = (self.framing.done, self.framing.overrun);
        let mut lines = Lines {
            frames: Vec::new(),
            used: 0,
            error: None,
        };
        if self.has_frame(before) {
            lines = if self.protobuf {
                proto::decode_frames(&self.body, options, self.max_line)
            } else {
                frames::decode_lines(&self.body, options, self.max_line)
            };
            if lines.error.is_some() {
                self.body.clear();
            } else {
                self.body.drain(..lines.used);
            }
        }
        let limit = self
            .max_line
            .saturating_add(if self.protobuf { 4 } else { 0 });
        if lines.error.is_none() && self.body.len() > limit {
            let unit = if self.protobuf {
                "protobuf watch frame"
            } else {
                "watch line"
            };
            let problem = format!("{unit} longer than {} bytes", self.max_line);
            let start = self.body[..self.body.len().min(200)].to_vec();
            lines.error = Some((Error(problem), start));
            self.body.clear();
        }
        Ok(Fed {
            lines,
            done: self.done,
        })
    }

    /// Whether the body (of which the bytes from `before` are new) holds a complete frame.
    fn has_frame(&self, before: usize) -> bool {
        if self.protobuf {
            let Some(header) = self.body.get(..4) else {
                return false;
            };
            let size = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
            size > self.max_line || self.body.len() - 4 >= size
        } else {
            self.body[before..].contains(&b'\n')
        }
    }
}

#[cfg(test)]
mod tests;
