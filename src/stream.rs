//! A watch response's body as it comes off the socket: the HTTP/1.1 framing undone and
//! the complete frames decoded, in one call per read.
//!
//! The lean transport hands every read of a watch connection here as it is (`WatchBody::
//! feed`): chunked transfer coding (a chunk, or its size line, may be split anywhere
//! between reads), a ``Content-Length`` body, or one that lasts until the server closes.
//! The body's bytes go to the one frame decoder there is (`frames::decode_lines` for JSON
//! lines, `proto::decode_frames` for protobuf frames), and what follows the last complete
//! frame waits for the next read. Python then sees a list of decoded frames per read, not
//! a read, a split and a call per line.

use crate::frames::{self, Error, Lines, Options};
use crate::proto;

/// How the body's end is known (from the answer's head).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// ``Transfer-Encoding: chunked``: ends with a chunk of size 0 and the trailers.
    Chunked,
    /// ``Content-Length``: this many bytes.
    Length(usize),
    /// Neither: the body lasts until the server closes the connection.
    UntilClose,
}

/// Where the chunked decoding is between reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading a chunk's size line (kept in `WatchBody::line` until its newline).
    Size,
    /// Inside a chunk's data, this many bytes still to come.
    Data(usize),
    /// After a chunk's data: its CRLF (``true``: the CR was read).
    End(bool),
    /// After the last chunk: trailer lines up to an empty one.
    Trailers,
}

/// A chunk size line or a trailer line longer than this is refused.
const MAX_CONTROL_LINE: usize = 8192;

/// One watch response's body (see the module documentation).
#[derive(Debug)]
pub struct WatchBody {
    framing: Framing,
    chunk: Chunk,
    /// A chunk size or trailer line not complete yet.
    line: Vec<u8>,
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
        WatchBody {
            framing,
            chunk: Chunk::Size,
            line: Vec::new(),
            body: Vec::new(),
            protobuf,
            max_line,
            done: framing == Framing::Length(0),
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
        self.unframe(data)?;
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

    /// Move the body's bytes of `data` to `body`, following the framing.
    fn unframe(&mut self, mut data: &[u8]) -> Result<(), Error> {
        if self.done {
            self.overrun |= !data.is_empty();
            return Ok(());
        }
        match self.framing {
            Framing::UntilClose => self.body.extend_from_slice(data),
            Framing::Length(left) => {
                let take = left.min(data.len());
                self.body.extend_from_slice(&data[..take]);
                self.framing = Framing::Length(left - take);
                self.done = take == left;
                self.overrun = take < data.len();
            }
            Framing::Chunked => {
                while !data.is_empty() && !self.done {
                    data = self.chunked(data)?;
                }
                self.overrun = !data.is_empty();
            }
        }
        Ok(())
    }

    /// Read what `data` holds of the current step of the chunked coding; the rest.
    fn chunked<'d>(&mut self, data: &'d [u8]) -> Result<&'d [u8], Error> {
        match self.chunk {
            Chunk::Data(left) => {
                let take = left.min(data.len());
                self.body.extend_from_slice(&data[..take]);
                self.chunk = if take == left {
                    Chunk::End(false)
                } else {
                    Chunk::Data(left - take)
                };
                Ok(&data[take..])
            }
            Chunk::End(cr) => {
                let expected = if cr { b'\n' } else { b'\r' };
                if data[0] != expected {
                    return Err(Error("a chunk does not end with CRLF".into()));
                }
                self.chunk = if cr { Chunk::Size } else { Chunk::End(true) };
                Ok(&data[1..])
            }
            Chunk::Size | Chunk::Trailers => {
                let Some(end) = data.iter().position(|&b| b == b'\n') else {
                    self.control_line(data)?;
                    return Ok(&[]);
                };
                self.control_line(&data[..end])?;
                let line = std::mem::take(&mut self.line);
                let line = line.strip_suffix(b"\r").unwrap_or(&line);
                if self.chunk == Chunk::Trailers {
                    self.done = line.is_empty();
                } else {
                    let size = chunk_size(line)?;
                    self.chunk = if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    };
                }
                Ok(&data[end + 1..])
            }
        }
    }

    fn control_line(&mut self, part: &[u8]) -> Result<(), Error> {
        self.line.extend_from_slice(part);
        if self.line.len() > MAX_CONTROL_LINE {
            return Err(Error("a chunk size line is too long".into()));
        }
        Ok(())
    }
}

/// A chunk size line's size (hexadecimal, before any ``;`` extension).
fn chunk_size(line: &[u8]) -> Result<usize, Error> {
    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
    let digits = digits.trim_ascii();
    let bad = || {
        Error(format!(
            "bad chunk size line {:?}",
            String::from_utf8_lossy(line)
        ))
    };
    if digits.is_empty() || digits.len() > 15 {
        return Err(bad());
    }
    let text = std::str::from_utf8(digits).map_err(|_| bad())?;
    usize::from_str_radix(text, 16).map_err(|_| bad())
}

#[cfg(test)]
mod tests;
