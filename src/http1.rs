//! The answers of an HTTP/1.1 connection as its bytes arrive: the lean transport's
//! framing, in one call per read (`Reader::feed`), whether the bytes come off a plain
//! socket or out of the TLS session (`tls::Session`) without passing through Python.
//!
//! One request at a time: `Reader::expect` says an answer is awaited (and whether it is
//! to a ``HEAD``, and whether a 200 is a watch's stream), then each read goes to `feed`
//! until it gives the whole answer: its status, reason, header lines (kept as they came,
//! split only when a caller asks for a header), whether the connection may carry another
//! request, the ``Content-Encoding``, and the body, whose framing (``Content-Length``,
//! chunked, or until the server closes) `unframe::Unframer` undoes, the one chunked decoder
//! there is. Informational answers (1xx) are skipped; 204, 304 and a ``HEAD``'s answer have
//! no body. The head of a watch's 200 is given as soon as it is in, with the bytes of the
//! body that came with it: the watch (`stream::WatchBody`) reads the rest.
//!
//! A malformed answer is an `Err` saying what is wrong; the connection cannot be read
//! further. Bytes after an answer's end make it not reusable (`Head::keep_alive`).

use crate::frames::Error;
use crate::unframe::{Framing, Unframer};

/// The longest answer head accepted (aiohttp's limits are of the same order).
pub const MAX_HEAD: usize = 1 << 20;

/// Where the reader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the head.
    Head,
    /// Reading a body of a known length.
    Length,
    /// Reading a chunked body.
    Chunked,
    /// Reading a body that ends when the server closes (`Reader::close`).
    UntilClose,
    /// No answer awaited.
    Done,
}

/// An answer's head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// The status line's text after the code.
    pub reason: Vec<u8>,
    /// The header lines as they came, CRLF between them (empty when there are none).
    pub lines: Vec<u8>,
    /// The connection can carry another request after this answer.
    pub keep_alive: bool,
    /// ``Content-Encoding``, lowered and trimmed (empty when absent).
    pub encoding: Vec<u8>,
    pub framing: Framing,
}

/// What one `Reader::feed` read.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// The answer is not complete yet.
    More,
    /// A whole answer.
    Answer(Head, Vec<u8>),
    /// The head of a watch's 200, and the bytes of its body read with it.
    Stream(Head, Vec<u8>),
}

/// One connection's answers (see the module documentation).
#[derive(Debug)]
pub struct Reader {
    phase: Phase,
    no_body: bool,
    stream: bool,
    /// The head's bytes while it is not complete.
    buf: Vec<u8>,
    /// The answer's head once read, while its body is not complete.
    head: Option<Head>,
    unframer: Unframer,
    body: Vec<u8>,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            phase: Phase::Done,
            no_body: false,
            stream: false,
            buf: Vec::new(),
            head: None,
            unframer: Unframer::new(Framing::UntilClose),
            body: Vec::new(),
        }
    }
}

impl Reader {
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// A request was sent: its answer is awaited (`no_body`: a ``HEAD``'s; `stream`: a
    /// 200 is a watch's stream).
    pub fn expect(&mut self, no_body: bool, stream: bool) {
        self.phase = Phase::Head;
        self.no_body = no_body;
        self.stream = stream;
        self.buf.clear();
        self.head = None;
        self.body = Vec::new();
    }

    /// Take one read's bytes.
    pub fn feed(&mut self, data: &[u8]) -> Result<Read, Error> {
        match self.phase {
            Phase::Head => self.read_head(data),
            Phase::Done => Err(Error("bytes came while no answer was awaited".into())),
            _ => {
                self.unframer.unframe(data, &mut self.body)?;
                Ok(self.body_read())
            }
        }
    }

    /// The server closed the connection: the answer whose body lasts until then is
    /// complete (`None` for any other: it was cut short, or none was awaited).
    pub fn close(&mut self) -> Option<Read> {
        if self.phase != Phase::UntilClose {
            return None;
        }
        self.phase = Phase::Done;
        let head = self.head.take()?;
        Some(Read::Answer(head, std::mem::take(&mut self.body)))
    }

    fn read_head(&mut self, data: &[u8]) -> Result<Read, Error> {
        let owned: Vec<u8>;
        let (mut rest, mut from): (&[u8], usize) = if self.buf.is_empty() {
            (data, 0)
        } else {
            let from = self.buf.len().saturating_sub(3);
            self.buf.extend_from_slice(data);
            owned = std::mem::take(&mut self.buf);
            (&owned, from)
        };
        loop {
            let Some(end) = find_end(rest, from) else {
                if rest.len() > MAX_HEAD {
                    return Err(Error("the answer's head is too long".into()));
                }
                self.buf = rest.to_vec();
                return Ok(Read::More);
            };
            let head = parse_head(&rest[..end])?;
            rest = &rest[end + 4..];
            from = 0;
            if !(100..200).contains(&head.status) {
                return self.begin_body(head, rest);
            } // informational: the real answer follows
        }
    }

    fn begin_body(&mut self, mut head: Head, rest: &[u8]) -> Result<Read, Error> {
        if self.stream && head.status == 200 && !self.no_body {
            head.keep_alive &= head.framing != Framing::UntilClose;
            self.phase = Phase::Done;
            return Ok(Read::Stream(head, rest.to_vec()));
        }
        if self.no_body || head.status == 204 || head.status == 304 {
            self.phase = Phase::Done;
            head.keep_alive &= rest.is_empty(); // more is out of step
            return Ok(Read::Answer(head, Vec::new()));
        }
        if head.framing == Framing::UntilClose {
            head.keep_alive = false; // the server's close ends the body
        }
        if head.framing == Framing::Length(rest.len()) {
            self.phase = Phase::Done; // the common case: the head and the body in one read
            return Ok(Read::Answer(head, rest.to_vec()));
        }
        self.phase = match head.framing {
            Framing::Length(_) => Phase::Length,
            Framing::Chunked => Phase::Chunked,
            Framing::UntilClose => Phase::UntilClose,
        };
        self.unframer = Unframer::new(head.framing);
        self.body = match head.framing {
            Framing::Length(size) => Vec::with_capacity(size.min(MAX_HEAD)),
            _ => Vec::new(),
        };
        self.head = Some(head);
        self.unframer.unframe(rest, &mut self.body)?;
        Ok(self.body_read())
    }

    fn body_read(&mut self) -> Read {
        if !self.unframer.done {
            return Read::More;
        }
        self.phase = Phase::Done;
        let Some(mut head) = self.head.take() else {
            return Read::More;
        };
        head.keep_alive &= !self.unframer.overrun;
        Read::Answer(head, std::mem::take(&mut self.body))
    }
}

/// Where the blank line ending a head starts in `data`, searching from `from`.
fn find_end(data: &[u8], from: usize) -> Option<usize> {
    data.get(from..)?
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + from)
}

fn bad_status(line: &[u8]) -> Error {
    let start = &line[..line.len().min(40)];
    Error(format!(
        "bad status line {:?}",
        String::from_utf8_lossy(start)
    ))
}

/// An answer's head, without its blank line.
pub fn parse_head(head: &[u8]) -> Result<Head, Error> {
    let (first, lines) = match head.windows(2).position(|w| w == b"\r\n") {
        Some(at) => (&head[..at], &head[at + 2..]),
        None => (head, &b""[..]),
    };
    if !first.starts_with(b"HTTP/1.") || first.len() < 12 {
        return Err(bad_status(first));
    }
    let code = &first[9..12];
    if !code.iter().all(u8::is_ascii_digit) {
        return Err(bad_status(first));
    }
    let status = code.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
    let mut keep_alive = first[7] != b'0'; // HTTP/1.0: closed unless it says keep-alive
    let mut length = None;
    let mut chunked = false;
    let mut encoding = Vec::new();
    for line in CrLfLines(lines) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = trim_blanks(&line[..colon]);
        let value = &line[colon + 1..];
        if name.eq_ignore_ascii_case(b"content-length") {
            length = Some(content_length(value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = contains_lowered(value, b"chunked");
        } else if name.eq_ignore_ascii_case(b"connection") {
            if contains_lowered(value, b"close") {
                keep_alive = false;
            } else if contains_lowered(value, b"keep-alive") {
                keep_alive = true;
            }
        } else if name.eq_ignore_ascii_case(b"content-encoding") {
            encoding = value.trim_ascii().to_ascii_lowercase();
        }
    }
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(length)) => Framing::Length(length),
        (false, None) => Framing::UntilClose,
    };
    Ok(Head {
        status,
        reason: first.get(13..).unwrap_or_default().to_vec(),
        lines: lines.to_vec(),
        keep_alive,
        encoding,
        framing,
    })
}

/// The lines of a head, split at CRLF (as the server sent them).
struct CrLfLines<'a>(&'a [u8]);

impl<'a> Iterator for CrLfLines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.0.is_empty() {
            return None;
        }
        match self.0.windows(2).position(|w| w == b"\r\n") {
            Some(at) => {
                let line = &self.0[..at];
                self.0 = &self.0[at + 2..];
                Some(line)
            }
            None => Some(std::mem::take(&mut self.0)),
        }
    }
}

fn trim_blanks(name: &[u8]) -> &[u8] {
    let start = name.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let end = name.iter().rposition(|b| !matches!(b, b' ' | b'\t'));
    match (start, end) {
        (Some(start), Some(end)) => &name[start..=end],
        _ => &[],
    }
}

fn contains_lowered(value: &[u8], word: &[u8]) -> bool {
    value
        .windows(word.len())
        .any(|w| w.eq_ignore_ascii_case(word))
}

fn content_length(value: &[u8]) -> Result<usize, Error> {
    let digits = value.trim_ascii();
    let bad = || {
        Error(format!(
            "bad Content-Length {:?}",
            String::from_utf8_lossy(&value[..value.len().min(40)])
        ))
    };
    if let Some(negative) = digits.strip_prefix(b"-") {
        if !negative.is_empty() && negative.iter().all(u8::is_ascii_digit) {
            return Err(Error("negative Content-Length".into()));
        }
        return Err(bad());
    }
    let digits = digits.strip_prefix(b"+").unwrap_or(digits);
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    Ok(digits
        .iter()
        .fold(0usize, |n, &d| n * 10 + usize::from(d - b'0')))
}

#[cfg(test)]
mod tests;
