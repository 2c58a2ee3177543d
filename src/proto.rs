//! Protobuf watch streams of ConfigMaps and Secrets, turned into the JSON the API server
//! sends for the same events, in plain Rust (no Python).
//!
//! The API server encodes protobuf faster than JSON: a streaming list of 100,000 ConfigMaps
//! reaches a client in less than half the time (docs/benchmarks.md). fastctl's cache holds
//! each object as its JSON bytes with parsed metadata (`frames`), so a protobuf frame's
//! object is written here as the JSON the server would have sent (the same fields, in the
//! order and with the escaping of Go's `encoding/json`), and the metadata `frames::Meta`
//! holds is read from the message in the same pass (`watch_frame`): the `Frame` is the one
//! `frames::decode_frame` makes of the JSON line (`watch_line`, tested equal), without that
//! JSON being parsed, and nothing downstream changes.
//!
//! The wire (`k8s.io/apimachinery` `runtime/serializer/protobuf`, `k8s.io/api/core/v1` and
//! `apimachinery/pkg/apis/meta/v1` `generated.proto`): a watch body is length-prefixed
//! frames (a 4-byte big-endian length), each a `metav1.WatchEvent {type 1, object 2 =
//! RawExtension {raw 1}}` without a wrapper; its `raw` is the magic `k8s\0` and a
//! `runtime.Unknown {typeMeta 1 {apiVersion 1, kind 2}, raw 2, contentEncoding 3,
//! contentType 4}` whose `raw` is the object's message. Only `v1` ConfigMap, Secret and
//! Status (an `ERROR` event) are known here; anything else, a field this decoder does not
//! know (a newer server's) or malformed bytes is an error that says what it met, never a
//! guess: the watcher then watches the resource as JSON.

use std::borrow::Cow;

use crate::frames::{Error, Frame, Lines, Meta, Object, Options, Owner, INITIAL_EVENTS_END};

/// The prefix of every protobuf-encoded object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The media type to ask for (`Accept`) and that the server answers with.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

fn err<T>(message: impl Into<String>) -> Result<T, Error> {
    Err(Error(message.into()))
}

// -- the wire ------------------------------------------------------------------------------

/// One field's value as on the wire.
#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one message, in wire order.
struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Fields<'a> {
    fn of(buf: &'a [u8], what: &'static str) -> Self {
        Fields { buf, pos: 0, what }
    }

    fn varint(&mut self) -> Result<u64, Error> {
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

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
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
    fn next_field(&mut self) -> Result<Option<(u64, Wire<'a>)>, Error> {
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

    fn unknown<T>(&self, number: u64) -> Result<T, Error> {
        err(format!("unknown field {number} in {}", self.what))
    }
}

fn bytes_of<'a>(value: Wire<'a>, what: &str) -> Result<&'a [u8], Error> {
    match value {
        Wire::Bytes(b) => Ok(b),
        _ => err(format!("{what} is not length-delimited")),
    }
}

fn varint_of(value: Wire<'_>, what: &str) -> Result<u64, Error> {
    match value {
        Wire::Varint(v) => Ok(v),
        _ => err(format!("{what} is not a varint")),
    }
}

/// A proto string as Go's JSON encoder writes it: invalid UTF-8 replaced.
fn text(bytes: &[u8]) -> Cow<'_, str> {
    // The check alone first: valid text (all of it, in practice) is borrowed at its speed.
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

// -- JSON as Go writes it ------------------------------------------------------------------

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A JSON string with `encoding/json`'s escaping (HTML characters and U+2028/9 too).
fn push_str(out: &mut Vec<u8>, s: &str) {
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
const ATTENTION: [bool; 256] = {
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
fn push_base64(out: &mut Vec<u8>, bytes: &[u8]) {
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
struct Obj<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'o> Obj<'o> {
    fn open(out: &'o mut Vec<u8>) -> Self {
        out.push(b'{');
        Obj { out, first: true }
    }
    fn key(&mut self, key: &str) -> &mut Vec<u8> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        push_str(self.out, key);
        self.out.push(b':');
        self.out
    }
    /// `key: "value"` unless `value` is empty (`omitempty`).
    fn string(&mut self, key: &str, value: &str) {
        if !value.is_empty() {
            let out = self.key(key);
            push_str(out, value);
        }
    }
    fn raw(&mut self, key: &str, value: &[u8]) {
        self.key(key).extend_from_slice(value);
    }
    fn close(self) {
        self.out.push(b'}');
    }
}

/// `metav1.Time` as JSON: RFC 3339 in UTC, whole seconds (`2006-01-02T15:04:05Z`).
fn push_time(out: &mut Vec<u8>, seconds: i64) -> Result<(), Error> {
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
fn time_of(bytes: &[u8]) -> Result<Option<i64>, Error> {
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
fn push_time_value(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
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
fn map_pairs<'a>(entries: &[&'a [u8]], what: &'static str) -> Result<Pairs<'a>, Error> {
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
type Pairs<'a> = Vec<(Cow<'a, str>, &'a [u8])>;

/// A map as Go writes it (`map_pairs`), omitted when empty.
fn write_map(obj: &mut Obj<'_>, key: &str, pairs: &Pairs<'_>, binary: bool) {
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
fn push_map(
    obj: &mut Obj<'_>,
    key: &str,
    entries: &[&[u8]],
    binary: bool,
    what: &'static str,
) -> Result<(), Error> {
    write_map(obj, key, &map_pairs(entries, what)?, binary);
    Ok(())
}

fn push_bool(obj: &mut Obj<'_>, key: &str, value: u64) {
    obj.raw(key, if value != 0 { b"true" } else { b"false" });
}

fn push_int(obj: &mut Obj<'_>, key: &str, value: i64) {
    obj.raw(key, value.to_string().as_bytes());
}

// -- the messages --------------------------------------------------------------------------

/// Text as an owned string, `None` when empty (`omitempty`: the JSON has no such field).
fn owned(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty()).then(|| text(bytes).into_owned())
}

/// `metav1.ObjectMeta`, in the field order of its Go struct (`managedFields` left out when
/// `strip_managed`), and what `frames::Meta` holds of it: the same values the JSON decoder
/// reads from the JSON written here.
fn push_object_meta(out: &mut Vec<u8>, bytes: &[u8], strip_managed: bool) -> Result<Meta, Error> {
    const STRINGS: [&str; 6] = [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
    ];
    let mut strings: [&[u8]; 6] = [b""; 6];
    let mut generation = 0i64;
    let (mut created, mut deleted): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    let mut grace: Option<i64> = None;
    let (mut labels, mut annotations) = (Vec::new(), Vec::new());
    let (mut owners, mut finalizers, mut managed) = (Vec::new(), Vec::new(), Vec::new());
    let mut fields = Fields::of(bytes, "ObjectMeta");
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1..=6 => strings[number as usize - 1] = bytes_of(value, STRINGS[number as usize - 1])?,
            7 => generation = varint_of(value, "generation")? as i64,
            8 => created = Some(bytes_of(value, "creationTimestamp")?),
            9 => deleted = Some(bytes_of(value, "deletionTimestamp")?),
            10 => grace = Some(varint_of(value, "deletionGracePeriodSeconds")? as i64),
            11 => labels.push(bytes_of(value, "labels")?),
            12 => annotations.push(bytes_of(value, "annotations")?),
            13 => owners.push(bytes_of(value, "ownerReferences")?),
            14 => finalizers.push(bytes_of(value, "finalizers")?),
            17 => managed.push(bytes_of(value, "managedFields")?),
            n => return fields.unknown(n),
        }
    }
    let mut meta = Meta {
        name: text(strings[0]).into_owned(),
        namespace: owned(strings[2]),
        uid: owned(strings[4]),
        resource_version: owned(strings[5]),
        generation: (generation != 0).then_some(generation),
        ..Meta::default()
    };
    let mut obj = Obj::open(out);
    for (key, value) in STRINGS.iter().zip(strings) {
        obj.string(key, &text(value));
    }
    if generation != 0 {
        push_int(&mut obj, "generation", generation);
    }
    if let Some(seconds) = created.map(time_of).transpose()?.flatten() {
        push_time(obj.key("creationTimestamp"), seconds)?;
    }
    if let Some(bytes) = deleted {
        let out = obj.key("deletionTimestamp");
        let start = out.len();
        push_time_value(out, bytes)?;
        if out[start] == b'"' {
            let stamp = &out[start + 1..out.len() - 1];
            meta.deletion_timestamp = Some(String::from_utf8_lossy(stamp).into_owned());
        }
    }
    if let Some(grace) = grace {
        push_int(&mut obj, "deletionGracePeriodSeconds", grace);
    }
    let labels = map_pairs(&labels, "a label")?;
    write_map(&mut obj, "labels", &labels, false);
    meta.labels = labels
        .iter()
        .map(|(k, v)| (k.clone().into_owned(), text(v).into_owned()))
        .collect();
    let annotations = map_pairs(&annotations, "an annotation")?;
    write_map(&mut obj, "annotations", &annotations, false);
    meta.initial_events_end = annotations
        .iter()
        .any(|(k, v)| k == INITIAL_EVENTS_END && *v == b"true");
    if !owners.is_empty() {
        let out = obj.key("ownerReferences");
        out.push(b'[');
        for (i, owner) in owners.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            meta.owners.push(push_owner(out, owner)?);
        }
        out.push(b']');
    }
    if !finalizers.is_empty() {
        let out = obj.key("finalizers");
        out.push(b'[');
        for (i, finalizer) in finalizers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_str(out, &text(finalizer));
        }
        out.push(b']');
    }
    if !managed.is_empty() && !strip_managed {
        let out = obj.key("managedFields");
        out.push(b'[');
        for (i, entry) in managed.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_managed_fields_entry(out, entry)?;
        }
        out.push(b']');
    }
    obj.close();
    Ok(meta)
}

/// `metav1.OwnerReference`: apiVersion, kind, name and uid always (no `omitempty`).
fn push_owner(out: &mut Vec<u8>, bytes: &[u8]) -> Result<Owner, Error> {
    let (mut api_version, mut kind, mut name, mut uid): (&[u8], &[u8], &[u8], &[u8]) =
        (b"", b"", b"", b"");
    let (mut controller, mut block) = (None, None);
    let mut fields = Fields::of(bytes, "OwnerReference");
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1 => kind = bytes_of(value, "kind")?,
            3 => name = bytes_of(value, "name")?,
            4 => uid = bytes_of(value, "uid")?,
            5 => api_version = bytes_of(value, "apiVersion")?,
            6 => controller = Some(varint_of(value, "controller")?),
            7 => block = Some(varint_of(value, "blockOwnerDeletion")?),
            n => return fields.unknown(n),
        }
    }
    let mut obj = Obj::open(out);
    for (key, value) in [
        ("apiVersion", api_version),
        ("kind", kind),
        ("name", name),
        ("uid", uid),
    ] {
        push_str(obj.key(key), &text(value));
    }
    if let Some(v) = controller {
        push_bool(&mut obj, "controller", v);
    }
    if let Some(v) = block {
        push_bool(&mut obj, "blockOwnerDeletion", v);
    }
    obj.close();
    Ok(Owner {
        api_version: text(api_version).into_owned(),
        kind: text(kind).into_owned(),
        name: text(name).into_owned(),
        uid: text(uid).into_owned(),
        controller: controller.is_some_and(|v| v != 0),
    })
}

/// `metav1.ManagedFieldsEntry`; `fieldsV1` is JSON on the wire and is kept as it is.
fn push_managed_fields_entry(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
    let (mut manager, mut operation, mut api_version): (&[u8], &[u8], &[u8]) = (b"", b"", b"");
    let (mut fields_type, mut subresource): (&[u8], &[u8]) = (b"", b"");
    let (mut time, mut fields_v1): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    let mut fields = Fields::of(bytes, "ManagedFieldsEntry");
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1 => manager = bytes_of(value, "manager")?,
            2 => operation = bytes_of(value, "operation")?,
            3 => api_version = bytes_of(value, "apiVersion")?,
            4 => time = Some(bytes_of(value, "time")?),
            6 => fields_type = bytes_of(value, "fieldsType")?,
            7 => fields_v1 = Some(bytes_of(value, "fieldsV1")?),
            8 => subresource = bytes_of(value, "subresource")?,
            n => return fields.unknown(n),
        }
    }
    let mut obj = Obj::open(out);
    obj.string("manager", &text(manager));
    obj.string("operation", &text(operation));
    obj.string("apiVersion", &text(api_version));
    if let Some(bytes) = time {
        push_time_value(obj.key("time"), bytes)?;
    }
    obj.string("fieldsType", &text(fields_type));
    if let Some(bytes) = fields_v1 {
        let mut inner = Fields::of(bytes, "FieldsV1");
        let mut raw: &[u8] = b"";
        while let Some((number, value)) = inner.next_field()? {
            match number {
                1 => raw = bytes_of(value, "FieldsV1.Raw")?,
                n => return inner.unknown(n),
            }
        }
        if raw.is_empty() {
            obj.raw("fieldsV1", b"null");
        } else {
            serde_json::from_slice::<&serde_json::value::RawValue>(raw)
                .map_err(|e| Error(format!("fieldsV1 is not JSON: {e}")))?;
            obj.raw("fieldsV1", raw);
        }
    }
    obj.string("subresource", &text(subresource));
    obj.close();
    Ok(())
}

/// `v1.ConfigMap` or `v1.Secret` (`secret`): kind, apiVersion (`identity`), metadata, then
/// the body; what `frames::Meta` holds of its metadata.
fn push_data_object(
    out: &mut Vec<u8>,
    identity: (&str, &str),
    bytes: &[u8],
    secret: bool,
    strip_managed: bool,
) -> Result<Meta, Error> {
    let what = if secret { "Secret" } else { "ConfigMap" };
    let mut meta: &[u8] = b"";
    let mut immutable = None;
    let (mut data, mut other) = (Vec::new(), Vec::new());
    let mut secret_type: &[u8] = b"";
    let mut fields = Fields::of(bytes, what);
    while let Some((number, value)) = fields.next_field()? {
        match (number, secret) {
            (1, _) => meta = bytes_of(value, "metadata")?,
            (2, _) => data.push(bytes_of(value, "data")?),
            (3, false) => other.push(bytes_of(value, "binaryData")?),
            (4, false) | (5, true) => immutable = Some(varint_of(value, "immutable")?),
            (4, true) => other.push(bytes_of(value, "stringData")?),
            (3, true) => secret_type = bytes_of(value, "type")?,
            (n, _) => return fields.unknown(n),
        }
    }
    let mut obj = Obj::open(out);
    obj.string("kind", identity.1);
    obj.string("apiVersion", identity.0);
    let meta = push_object_meta(obj.key("metadata"), meta, strip_managed)?;
    if let Some(v) = immutable {
        push_bool(&mut obj, "immutable", v);
    }
    if secret {
        push_map(&mut obj, "data", &data, true, "a data entry")?;
        push_map(&mut obj, "stringData", &other, false, "a stringData entry")?;
        obj.string("type", &text(secret_type));
    } else {
        push_map(&mut obj, "data", &data, false, "a data entry")?;
        push_map(&mut obj, "binaryData", &other, true, "a binaryData entry")?;
    }
    obj.close();
    Ok(meta)
}

/// `metav1.Status` (the object of an `ERROR` event).
fn push_status(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
    let (mut list_meta, mut details): (&[u8], Option<&[u8]>) = (b"", None);
    let (mut status, mut message, mut reason): (&[u8], &[u8], &[u8]) = (b"", b"", b"");
    let mut code = 0i64;
    let mut fields = Fields::of(bytes, "Status");
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1 => list_meta = bytes_of(value, "metadata")?,
            2 => status = bytes_of(value, "status")?,
            3 => message = bytes_of(value, "message")?,
            4 => reason = bytes_of(value, "reason")?,
            5 => details = Some(bytes_of(value, "details")?),
            6 => code = i64::from(varint_of(value, "code")? as i32),
            n => return fields.unknown(n),
        }
    }
    let mut obj = Obj::open(out);
    obj.string("kind", "Status");
    obj.string("apiVersion", "v1");
    push_list_meta(obj.key("metadata"), list_meta)?;
    obj.string("status", &text(status));
    obj.string("message", &text(message));
    obj.string("reason", &text(reason));
    if let Some(bytes) = details {
        push_status_details(obj.key("details"), bytes)?;
    }
    if code != 0 {
        push_int(&mut obj, "code", code);
    }
    obj.close();
    Ok(())
}

fn push_list_meta(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
    let (mut self_link, mut rv, mut cont): (&[u8], &[u8], &[u8]) = (b"", b"", b"");
    let mut remaining = None;
    let mut fields = Fields::of(bytes, "ListMeta");
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1 => self_link = bytes_of(value, "selfLink")?,
            2 => rv = bytes_of(value, "resourceVersion")?,
            3 => cont = bytes_of(value, "continue")?,
            4 => remaining = Some(varint_of(value, "remainingItemCount")? as i64),
            n => return fields.unknown(n),
        }
    }
    let mut obj = Obj::open(out);
    obj.string("selfLink", &text(self_link));
    obj.string("resourceVersion", &text(rv));
    obj.string("continue", &text(cont));
    if let Some(n) = remaining {
        push_int(&mut obj, "remainingItemCount", n);
    }
    obj.close();
    Ok(())
}

fn push_status_details(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
    let mut strings: [&[u8]; 4] = [b""; 4]; // name, group, kind, uid
    let mut causes = Vec::new();
    let mut retry = 0i64;
    let mut fields = Fields::of(bytes, "StatusDetails");
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1..=3 => strings[number as usize - 1] = bytes_of(value, "StatusDetails")?,
            6 => strings[3] = bytes_of(value, "uid")?,
            4 => causes.push(bytes_of(value, "causes")?),
            5 => retry = i64::from(varint_of(value, "retryAfterSeconds")? as i32),
            n => return fields.unknown(n),
        }
    }
    let mut obj = Obj::open(out);
    for (key, value) in ["name", "group", "kind", "uid"].iter().zip(strings) {
        obj.string(key, &text(value));
    }
    if !causes.is_empty() {
        let out = obj.key("causes");
        out.push(b'[');
        for (i, cause) in causes.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let mut parts: [&[u8]; 3] = [b""; 3]; // reason, message, field
            let mut fields = Fields::of(cause, "StatusCause");
            while let Some((number, value)) = fields.next_field()? {
                match number {
                    1..=3 => parts[number as usize - 1] = bytes_of(value, "StatusCause")?,
                    n => return fields.unknown(n),
                }
            }
            let mut cause_obj = Obj::open(out);
            for (key, value) in ["reason", "message", "field"].iter().zip(parts) {
                cause_obj.string(key, &text(value));
            }
            cause_obj.close();
        }
        out.push(b']');
    }
    if retry != 0 {
        push_int(&mut obj, "retryAfterSeconds", retry);
    }
    obj.close();
    Ok(())
}

// -- objects, events, streams --------------------------------------------------------------

/// A protobuf-encoded object's `apiVersion`, `kind` and message.
type Typed<'a> = (&'a [u8], &'a [u8], &'a [u8]);

/// A protobuf-encoded object (the magic, then a `runtime.Unknown`): its `apiVersion`, its
/// `kind` and its message.
fn unknown_of(encoded: &[u8]) -> Result<Typed<'_>, Error> {
    let Some(unknown) = encoded.strip_prefix(MAGIC) else {
        return err("protobuf object without the k8s magic prefix");
    };
    let (mut api_version, mut kind, mut raw): (&[u8], &[u8], &[u8]) = (b"", b"", b"");
    let mut fields = Fields::of(unknown, "Unknown");
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1 => {
                let mut type_meta = Fields::of(bytes_of(value, "typeMeta")?, "TypeMeta");
                while let Some((number, value)) = type_meta.next_field()? {
                    match number {
                        1 => api_version = bytes_of(value, "apiVersion")?,
                        2 => kind = bytes_of(value, "kind")?,
                        n => return type_meta.unknown(n),
                    }
                }
            }
            2 => raw = bytes_of(value, "raw")?,
            3 | 4 => {
                let v = bytes_of(value, "contentEncoding/contentType")?;
                if !v.is_empty() && v != CONTENT_TYPE.as_bytes() {
                    return err(format!("protobuf object in {:?}", text(v)));
                }
            }
            n => return fields.unknown(n),
        }
    }
    Ok((api_version, kind, raw))
}

/// What one object message is: the kinds decoded here.
enum Known {
    ConfigMap,
    Secret,
    Status,
}

fn known(api_version: &[u8], kind: &[u8]) -> Result<Known, Error> {
    match (api_version, kind) {
        (b"v1", b"ConfigMap") => Ok(Known::ConfigMap),
        (b"v1", b"Secret") => Ok(Known::Secret),
        (b"v1", b"Status") => Ok(Known::Status),
        _ => err(format!(
            "protobuf object {} {} is not decoded here",
            text(api_version),
            text(kind)
        )),
    }
}

/// One protobuf-encoded object (the magic, then a `runtime.Unknown`) as the API server's
/// JSON of it.
pub fn object_json(encoded: &[u8]) -> Result<Vec<u8>, Error> {
    let (api_version, kind, raw) = unknown_of(encoded)?;
    let mut out = Vec::with_capacity(raw.len() * 3 / 2 + 64);
    let identity = (&*text(api_version), &*text(kind));
    match known(api_version, kind)? {
        Known::ConfigMap => drop(push_data_object(&mut out, identity, raw, false, false)?),
        Known::Secret => drop(push_data_object(&mut out, identity, raw, true, false)?),
        Known::Status => push_status(&mut out, raw)?,
    }
    Ok(out)
}

/// A `metav1.WatchEvent`: its type and its object's encoded bytes.
fn event_of(frame: &[u8]) -> Result<(&[u8], &[u8]), Error> {
    let (mut etype, mut object): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    let mut fields = Fields::of(frame, "WatchEvent");
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1 => etype = Some(bytes_of(value, "type")?),
            2 => {
                let mut raw_ext = Fields::of(bytes_of(value, "object")?, "RawExtension");
                while let Some((number, value)) = raw_ext.next_field()? {
                    match number {
                        1 => object = Some(bytes_of(value, "raw")?),
                        n => return raw_ext.unknown(n),
                    }
                }
            }
            n => return fields.unknown(n),
        }
    }
    match (etype, object) {
        (Some(etype), Some(object)) => Ok((etype, object)),
        _ => err("watch event without a type or an object"),
    }
}

/// One frame of a protobuf watch stream (a `metav1.WatchEvent`) as the JSON watch line the
/// API server would have sent (without its newline).
pub fn watch_line(frame: &[u8]) -> Result<Vec<u8>, Error> {
    let (etype, object) = event_of(frame)?;
    let json = object_json(object)?;
    let mut line = Vec::with_capacity(json.len() + 32);
    line.extend_from_slice(b"{\"type\":");
    push_str(&mut line, &text(etype));
    line.extend_from_slice(b",\"object\":");
    line.extend_from_slice(&json);
    line.push(b'}');
    Ok(line)
}

/// One frame of a protobuf watch stream decoded as `frames::decode_frame` decodes the JSON
/// line the server would have sent for it (`watch_line`), in one pass: the object's JSON is
/// written and its metadata read from the message itself, so no JSON is parsed. The
/// `Frame` is the same (a test holds the two paths equal on the server's own frames); so
/// are the refusals that concern a watch: no name on an object that needs one.
pub fn watch_frame(frame: &[u8], options: Options<'_>) -> Result<Frame, Error> {
    watch_frame_in(frame, options, &mut Vec::new())
}

/// `watch_frame`, its JSON written in `scratch` (cleared first) and copied out at its size:
/// the object's bytes are kept (in the cache) as long as it lives, and a buffer with room
/// to spare, freed beside each one kept, fragments the heap (RSS per cached object rose by
/// a third when each frame had its own).
fn watch_frame_in(
    frame: &[u8],
    options: Options<'_>,
    scratch: &mut Vec<u8>,
) -> Result<Frame, Error> {
    let malformed = |Error(p): Error| Error(format!("malformed protobuf watch frame: {p}"));
    let (etype, object) = event_of(frame).map_err(malformed)?;
    let etype = text(etype).into_owned();
    let (api_version, kind, raw) = unknown_of(object).map_err(malformed)?;
    let what = known(api_version, kind).map_err(malformed)?;
    scratch.clear();
    let json = scratch;
    let (api_version, kind) = (text(api_version), text(kind));
    let identity = match options.identity {
        Some(given) if options.replace_identity => given,
        _ => (&*api_version, &*kind),
    };
    let strip = options.strip_managed_fields;
    let meta = match what {
        Known::Status if etype == "ERROR" => {
            push_status(json, raw).map_err(malformed)?;
            return Ok(Frame::Error(json.to_vec()));
        }
        Known::Status => return Err(malformed(Error(format!("a Status in a {etype} event")))),
        Known::ConfigMap => push_data_object(json, identity, raw, false, strip),
        Known::Secret => push_data_object(json, identity, raw, true, strip),
    }
    .map_err(malformed)?;
    if etype == "ERROR" {
        return Ok(Frame::Error(json.to_vec()));
    }
    if meta.name.is_empty() && etype != "BOOKMARK" {
        return Err(Error(
            "malformed watch line: the object's metadata.name is missing or not a string".into(),
        ));
    }
    Ok(Frame::Object(
        etype,
        Box::new(Object {
            json: json.to_vec(),
            meta,
            api_version: Some(api_version.into_owned()),
            kind: Some(kind.into_owned()),
        }),
    ))
}

/// Every complete frame at the start of a protobuf watch stream's buffer, decoded as
/// `frames::decode_lines` decodes JSON lines (the same `Lines`: the frames, the bytes
/// used, the first frame that cannot be used with what is wrong with it). A frame longer
/// than `max_frame` bytes is an error; an incomplete one is left for the next read.
pub fn decode_frames(buffer: &[u8], options: Options<'_>, max_frame: usize) -> Lines {
    let mut lines = Lines {
        frames: Vec::new(),
        used: 0,
        error: None,
    };
    let mut scratch = Vec::with_capacity(4096);
    while let Some(header) = buffer.get(lines.used..lines.used + 4) {
        let size = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if size > max_frame {
            let problem = format!("protobuf watch frame of {size} bytes, over {max_frame}");
            lines.error = Some((Error(problem), header.to_vec()));
            break;
        }
        let start = lines.used + 4;
        let Some(frame) = buffer.get(start..start + size) else {
            break;
        };
        lines.used = start + size;
        match watch_frame_in(frame, options, &mut scratch) {
            Ok(frame) => lines.frames.push(frame),
            Err(error) => {
                lines.error = Some((error, frame.to_vec()));
                break;
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests;
