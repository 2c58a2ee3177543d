//! The protobuf wire format: a message's fields in wire order, and their values.

use std::borrow::Cow;

use super::err;
use crate::frames::Error;

/// One field's value as on the wire.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one message, in wire order.
pub(super) struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Fields<'a> {
    pub(super) fn of(buf: &'a [u8], what: &'static str) -> Self {
        Fields { buf, pos: 0, what }
    }

    pub(super) fn varint(&mut self) -> Result<u64, Error> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.buf.get(self.pos) else {
                return err(format!("truncated varint in {}", self.what));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        err(format!("varint longer than 10 bytes in {}", self.what))
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        match self.pos.checked_add(n).filter(|&end| end <= self.buf.len()) {
            Some(end) => {
                let bytes = &self.buf[self.pos..end];
                self.pos = end;
                Ok(bytes)
            }
            None => err(format!("truncated field in {}", self.what)),
        }
    }

    /// The next field (number, value), or None at the end of the message.
    pub(super) fn next_field(&mut self) -> Result<Option<(u64, Wire<'a>)>, Error> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let n = usize::try_from(self.varint()?).unwrap_or(usize::MAX);
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            other => return err(format!("wire type {other} in {}", self.what)),
        };
        if number == 0 {
            return err(format!("field number 0 in {}", self.what));
        }
        Ok(Some((number, value)))
    }

    pub(super) fn unknown<T>(&self, number: u64) -> Result<T, Error> {
        err(format!("unknown field {number} in {}", self.what))
    }
}

pub(super) fn bytes_of<'a>(value: Wire<'a>, what: &str) -> Result<&'a [u8], Error> {
    match value {
        Wire::Bytes(b) => Ok(b),
        _ => err(format!("{what} is not length-delimited")),
    }
}

pub(super) fn varint_of(value: Wire<'_>, what: &str) -> Result<u64, Error> {
    match value {
        Wire::Varint(v) => Ok(v),
        _ => err(format!("{what} is not a varint")),
    }
}

/// A proto string as Go's JSON encoder writes it: invalid UTF-8 replaced.
pub(super) fn text(bytes: &[u8]) -> Cow<'_, str> {
    // The check alone first: valid text (all of it, in practice) is borrowed at its speed.
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}
