//! JSON written as Go's `encoding/json` writes it: strings, base64, times, maps, objects.

use std::borrow::Cow;

use super::err;
use super::wire::{bytes_of, text, varint_of, Fields};
use crate::frames::Error;

pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

/// A JSON string with `encoding/json`'s escaping (HTML characters and U+2028/9 too).
pub(super) fn push_str(out: &mut Vec<u8>, s: &str) {
    // Runs of bytes that need no escape are copied whole; a character is looked at only
    // where its first byte may need one (ASCII controls, `"\\<>&`, and 0xE2, which starts
    // U+2028 and U+2029 but also many characters that are written as they are).
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let b = bytes[i];
        if !ATTENTION[b as usize] {
            i += 1;
            continue;
        }
        let line_separator =
            b == 0xE2 && matches!(bytes.get(i + 1..i + 3), Some([0x80, 0xA8 | 0xA9]));
        if b == 0xE2 && !line_separator {
            i += 1;
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        let escaped: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            _ => b"",
        };
        if escaped.is_empty() {
            let n = if line_separator {
                0x2028 + u32::from(bytes[i + 2] - 0xA8)
            } else {
                u32::from(b)
            };
            out.extend_from_slice(b"\\u");
            for shift in [12, 8, 4, 0] {
                out.push(HEX[((n >> shift) & 0xf) as usize]);
            }
        } else {
            out.extend_from_slice(escaped);
        }
        i += if line_separator { 3 } else { 1 };
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The bytes `push_str` looks at: they may start something written escaped.
pub(super) const ATTENTION: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[b'<' as usize] = true;
    table[b'>' as usize] = true;
    table[b'&' as usize] = true;
    table[0xE2] = true;
    table
};

/// Standard base64 with padding, as Go writes `[]byte`.
pub(super) fn push_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    out.push(b'"');
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out.push(b'"');
}

/// A JSON object written field by field, each field's comma and key in place.
pub(super) struct Obj<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'o> Obj<'o> {
    pub(super) fn open(out: &'o mut Vec<u8>) -> Self {
        out.push(b'{');
        Obj { out, first: true }
    }
    pub(super) fn key(&mut self, key: &str) -> &mut Vec<u8> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        push_str(self.out, key);
        self.out.push(b':');
        self.out
    }
    /// `key: "value"` unless `value` is empty (`omitempty`).
    pub(super) fn string(&mut self, key: &str, value: &str) {
        if !value.is_empty() {
            let out = self.key(key);
            push_str(out, value);
        }
    }
    pub(super) fn raw(&mut self, key: &str, value: &[u8]) {
        self.key(key).extend_from_slice(value);
    }
    pub(super) fn close(self) {
        self.out.push(b'}');
    }
}

/// `metav1.Time` as JSON: RFC 3339 in UTC, whole seconds (`2006-01-02T15:04:05Z`).
pub(super) fn push_time(out: &mut Vec<u8>, seconds: i64) -> Result<(), Error> {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if !(0..=9999).contains(&year) {
        return err(format!("timestamp {seconds} is outside years 0-9999"));
    }
    // Written digit by digit: a timestamp in every object, and `format!` cost more than
    // the rest of it.
    let mut stamp = *b"\"0000-00-00T00:00:00Z\"";
    let mut put = |at: usize, width: u32, value: i64| {
        for i in 0..width {
            let digit = value / 10i64.pow(width - 1 - i) % 10;
            stamp[at + i as usize] = b'0' + digit as u8;
        }
    };
    put(1, 4, year);
    put(6, 2, month);
    put(9, 2, day);
    put(12, 2, secs / 3600);
    put(15, 2, secs / 60 % 60);
    put(18, 2, secs % 60);
    out.extend_from_slice(&stamp);
    Ok(())
}

/// A `metav1.Time` message: its seconds, None for the zero time (an empty message; nanos
/// are dropped, as the API server's decoder drops them).
pub(super) fn time_of(bytes: &[u8]) -> Result<Option<i64>, Error> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut fields = Fields::of(bytes, "Time");
    let mut seconds = 0i64;
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1 => seconds = varint_of(value, "Time.seconds")? as i64,
            2 => {
                varint_of(value, "Time.nanos")?;
            }
            n => return fields.unknown(n),
        }
    }
    Ok(Some(seconds))
}

/// A pointer `*metav1.Time`'s value: its time, or `null` for the zero time.
pub(super) fn push_time_value(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
    match time_of(bytes)? {
        Some(seconds) => push_time(out, seconds),
        None => {
            out.extend_from_slice(b"null");
            Ok(())
        }
    }
}

/// The pairs of a `map<string, string>` or `map<string, bytes>` (the entries as on the
/// wire) as Go reads and writes a map: keys sorted, the last of equal keys kept.
pub(super) fn map_pairs<'a>(entries: &[&'a [u8]], what: &'static str) -> Result<Pairs<'a>, Error> {
    let mut pairs: Pairs<'a> = Vec::with_capacity(entries.len());
    for entry in entries {
        let mut fields = Fields::of(entry, what);
        let (mut k, mut v): (&[u8], &[u8]) = (b"", b"");
        while let Some((number, value)) = fields.next_field()? {
            match number {
                1 => k = bytes_of(value, what)?,
                2 => v = bytes_of(value, what)?,
                n => return fields.unknown(n),
            }
        }
        pairs.push((text(k), v));
    }
    // Stable: equal keys stay in wire order, and the last of them is the one kept.
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut kept: Pairs<'a> = Vec::with_capacity(pairs.len());
    for pair in pairs {
        match kept.last_mut() {
            Some(last) if last.0 == pair.0 => *last = pair,
            _ => kept.push(pair),
        }
    }
    Ok(kept)
}

/// A map's keys and values, sorted by key, each key once.
pub(super) type Pairs<'a> = Vec<(Cow<'a, str>, &'a [u8])>;

/// A map as Go writes it (`map_pairs`), omitted when empty.
pub(super) fn write_map(obj: &mut Obj<'_>, key: &str, pairs: &Pairs<'_>, binary: bool) {
    if pairs.is_empty() {
        return;
    }
    let mut map = Obj::open(obj.key(key));
    for (k, v) in pairs {
        let out = map.key(k);
        if binary {
            push_base64(out, v);
        } else {
            push_str(out, &text(v));
        }
    }
    map.close();
}

/// `map_pairs` then `write_map`.
pub(super) fn push_map(
    obj: &mut Obj<'_>,
    key: &str,
    entries: &[&[u8]],
    binary: bool,
    what: &'static str,
) -> Result<(), Error> {
    write_map(obj, key, &map_pairs(entries, what)?, binary);
    Ok(())
}

pub(super) fn push_bool(obj: &mut Obj<'_>, key: &str, value: u64) {
    obj.raw(key, if value != 0 { b"true" } else { b"false" });
}

pub(super) fn push_int(obj: &mut Obj<'_>, key: &str, value: i64) {
    obj.raw(key, value.to_string().as_bytes());
}
