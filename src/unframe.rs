//! An HTTP/1.1 body's framing undone as its bytes arrive: chunked transfer coding (a chunk,
//! or its size line, may be split anywhere between reads), a ``Content-Length`` body, or
//! one that lasts until the server closes. The one decoder of the chunked coding: a watch's
//! body (`stream::WatchBody`) and a whole answer's (`http1::Reader`) both go through it.

use crate::frames::Error;

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
    /// Reading a chunk's size line (kept in `Unframer::line` until its newline).
    Size,
    /// Inside a chunk's data, this many bytes still to come.
    Data(usize),
    /// After a chunk's data: its CRLF (``true``: the CR was read).
    End(bool),
    /// After the last chunk: trailer lines up to an empty one.
    Trailers,
}

/// A chunk size line or a trailer line longer than this is refused.
pub const MAX_CONTROL_LINE: usize = 8192;

/// One body's framing, read by read.
#[derive(Debug)]
pub struct Unframer {
    framing: Framing,
    chunk: Chunk,
    /// A chunk size or trailer line not complete yet.
    line: Vec<u8>,
    /// The body is complete (the last chunk and trailers, or the length, were read).
    pub done: bool,
    /// Bytes came after the body's end: the connection is out of step.
    pub overrun: bool,
}

impl Unframer {
    pub fn new(framing: Framing) -> Self {
        Unframer {
            framing,
            chunk: Chunk::Size,
            line: Vec::new(),
            done: framing == Framing::Length(0),
            overrun: false,
        }
    }

    /// Whether the body ends only when the connection does.
    pub fn until_close(&self) -> bool {
        self.framing == Framing::UntilClose
    }

    /// Append the body's bytes of `data` to `body`, following the framing. A framing
    /// error (a bad chunk size, a chunk not ended by CRLF, a control line too long) is an
    /// `Err`: the connection cannot be read further.
    pub fn unframe(&mut self, mut data: &[u8], body: &mut Vec<u8>) -> Result<(), Error> {
        if self.done {
            self.overrun |= !data.is_empty();
            return Ok(());
        }
        match self.framing {
            Framing::UntilClose => body.extend_from_slice(data),
            Framing::Length(left) => {
                let take = left.min(data.len());
                body.extend_from_slice(&data[..take]);
                self.framing = Framing::Length(left - take);
                self.done = take == left;
                self.overrun = take < data.len();
            }
            Framing::Chunked => {
                while !data.is_empty() && !self.done {
                    data = self.chunked(data, body)?;
                }
                self.overrun = !data.is_empty();
            }
        }
        Ok(())
    }

    /// Read what `data` holds of the current step of the chunked coding; the rest.
    fn chunked<'d>(&mut self, data: &'d [u8], body: &mut Vec<u8>) -> Result<&'d [u8], Error> {
        match self.chunk {
            Chunk::Data(left) => {
                let take = left.min(data.len());
                body.extend_from_slice(&data[..take]);
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
