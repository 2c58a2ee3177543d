//! An OTLP trace export (`ExportTraceServiceRequest`, protobuf) written straight into bytes.
//!
//! The OpenTelemetry SDK's encoder builds a protobuf message object per span, attribute and
//! value before serialising them (about 32 µs of CPU per span in Python); fastctl's export
//! (`fastctl._otlp`) writes the same fields, in the same order, into one buffer. The
//! `Writer` knows the wire format only; which message holds which field is in the names of
//! the field constants below (opentelemetry-proto's `trace.proto`, `common.proto`,
//! `resource.proto`, `trace_service.proto`). A nested message is written in place and its
//! length put in front of it when it ends (`Writer::end`), so nothing is built twice.
//!
//! What the SDK leaves out is left out here too: proto3 fields at their default (an empty
//! string, a zero count) are not written, except the members of `AnyValue`'s one-of (a
//! set member is written whatever its value) and message fields that are set (a span's
//! `status`, a key-value's `value`), written even when empty.

/// Field numbers, by message.
pub mod field {
    pub const REQUEST_RESOURCE_SPANS: u32 = 1;
    pub const RESOURCE_SPANS_RESOURCE: u32 = 1;
    pub const RESOURCE_SPANS_SCOPE_SPANS: u32 = 2;
    pub const RESOURCE_SPANS_SCHEMA_URL: u32 = 3;
    pub const RESOURCE_ATTRIBUTES: u32 = 1;
    pub const SCOPE_SPANS_SCOPE: u32 = 1;
    pub const SCOPE_SPANS_SPANS: u32 = 2;
    pub const SCOPE_SPANS_SCHEMA_URL: u32 = 3;
    pub const SCOPE_NAME: u32 = 1;
    pub const SCOPE_VERSION: u32 = 2;
    pub const SCOPE_ATTRIBUTES: u32 = 3;
    pub const SPAN_TRACE_ID: u32 = 1;
    pub const SPAN_SPAN_ID: u32 = 2;
    pub const SPAN_TRACE_STATE: u32 = 3;
    pub const SPAN_PARENT_SPAN_ID: u32 = 4;
    pub const SPAN_NAME: u32 = 5;
    pub const SPAN_KIND: u32 = 6;
    pub const SPAN_START: u32 = 7;
    pub const SPAN_END: u32 = 8;
    pub const SPAN_ATTRIBUTES: u32 = 9;
    pub const SPAN_DROPPED_ATTRIBUTES: u32 = 10;
    pub const SPAN_EVENTS: u32 = 11;
    pub const SPAN_DROPPED_EVENTS: u32 = 12;
    pub const SPAN_LINKS: u32 = 13;
    pub const SPAN_DROPPED_LINKS: u32 = 14;
    pub const SPAN_STATUS: u32 = 15;
    pub const SPAN_FLAGS: u32 = 16;
    pub const EVENT_TIME: u32 = 1;
    pub const EVENT_NAME: u32 = 2;
    pub const EVENT_ATTRIBUTES: u32 = 3;
    pub const EVENT_DROPPED_ATTRIBUTES: u32 = 4;
    pub const LINK_TRACE_ID: u32 = 1;
    pub const LINK_SPAN_ID: u32 = 2;
    pub const LINK_ATTRIBUTES: u32 = 4;
    pub const LINK_DROPPED_ATTRIBUTES: u32 = 5;
    pub const LINK_FLAGS: u32 = 6;
    pub const STATUS_MESSAGE: u32 = 2;
    pub const STATUS_CODE: u32 = 3;
    pub const KEY_VALUE_KEY: u32 = 1;
    pub const KEY_VALUE_VALUE: u32 = 2;
    pub const ANY_STRING: u32 = 1;
    pub const ANY_BOOL: u32 = 2;
    pub const ANY_INT: u32 = 3;
    pub const ANY_DOUBLE: u32 = 4;
    pub const ANY_ARRAY: u32 = 5;
    pub const ANY_KVLIST: u32 = 6;
    pub const ANY_BYTES: u32 = 7;
    pub const ARRAY_VALUES: u32 = 1;
    pub const KVLIST_VALUES: u32 = 1;
}

/// `SpanFlags`: the span's (or link's) context says whether its parent is remote...
pub const FLAGS_HAS_IS_REMOTE: u32 = 0x100;
/// ...and it is.
pub const FLAGS_IS_REMOTE: u32 = 0x200;

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// A protobuf writer into one growing buffer.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

/// Where a nested message began (`Writer::begin`): its content starts at `content`.
#[must_use]
pub struct Open {
    content: usize,
}

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            buf: Vec::with_capacity(capacity),
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// How much is written: a mark to go back to (`truncate`) when a value turns out not
    /// to be encodable (the SDK then leaves the whole attribute out).
    pub fn mark(&self) -> usize {
        self.buf.len()
    }

    pub fn truncate(&mut self, mark: usize) {
        self.buf.truncate(mark);
    }

    /// Bytes written elsewhere, as they are (spans written one by one, put in their
    /// `ScopeSpans` when they leave).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Forget the first `n` bytes written (what was taken from the front).
    pub fn drain_front(&mut self, n: usize) {
        self.buf.drain(..n);
    }

    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.buf.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.buf.push(value as u8);
    }

    fn tag(&mut self, field: u32, wire: u32) {
        self.varint(u64::from(field << 3 | wire));
    }

    /// A varint field, written even when zero (a one-of member).
    pub fn uint_always(&mut self, field: u32, value: u64) {
        self.tag(field, VARINT);
        self.varint(value);
    }

    /// A varint field (a count, an enum), left out when zero.
    pub fn uint(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.uint_always(field, value);
        }
    }

    /// An `int64` one-of member (a negative one takes ten bytes, as protobuf says).
    pub fn int64_always(&mut self, field: u32, value: i64) {
        self.uint_always(field, value as u64);
    }

    pub fn bool_always(&mut self, field: u32, value: bool) {
        self.uint_always(field, u64::from(value));
    }

    pub fn double_always(&mut self, field: u32, value: f64) {
        self.tag(field, FIXED64);
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    /// A `fixed64` field (a time in nanoseconds), left out when zero.
    pub fn fixed64(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.tag(field, FIXED64);
            self.buf.extend_from_slice(&value.to_le_bytes());
        }
    }

    /// A `fixed32` field (span flags), left out when zero.
    pub fn fixed32(&mut self, field: u32, value: u32) {
        if value != 0 {
            self.tag(field, FIXED32);
            self.buf.extend_from_slice(&value.to_le_bytes());
        }
    }

    /// A `bytes` or `string` field written even when empty (a one-of member).
    pub fn bytes_always(&mut self, field: u32, value: &[u8]) {
        self.tag(field, LEN);
        self.varint(value.len() as u64);
        self.buf.extend_from_slice(value);
    }

    /// A `bytes` or `string` field, left out when empty.
    pub fn bytes(&mut self, field: u32, value: &[u8]) {
        if !value.is_empty() {
            self.bytes_always(field, value);
        }
    }

    pub fn str(&mut self, field: u32, value: &str) {
        self.bytes(field, value.as_bytes());
    }

    /// A trace id: 16 bytes, big-endian.
    pub fn trace_id(&mut self, field: u32, id: u128) {
        self.bytes_always(field, &id.to_be_bytes());
    }

    /// A span id: 8 bytes, big-endian.
    pub fn span_id(&mut self, field: u32, id: u64) {
        self.bytes_always(field, &id.to_be_bytes());
    }

    /// Start a nested message in `field`; `end` closes it.
    pub fn begin(&mut self, field: u32) -> Open {
        self.tag(field, LEN);
        Open {
            content: self.buf.len(),
        }
    }

    /// Close a nested message: its length goes in front of its content.
    pub fn end(&mut self, open: Open) {
        let start = open.content;
        let len = self.buf.len() - start;
        let mut prefix = [0u8; 10];
        let mut n = 0;
        let mut value = len as u64;
        while value >= 0x80 {
            prefix[n] = (value as u8) | 0x80;
            value >>= 7;
            n += 1;
        }
        prefix[n] = value as u8;
        n += 1;
        let old = self.buf.len();
        self.buf.resize(old + n, 0);
        self.buf.copy_within(start..old, start + n);
        self.buf[start..start + n].copy_from_slice(&prefix[..n]);
    }

    /// `KeyValue{key, value: AnyValue{string_value}}` in `field`, the common attribute.
    pub fn string_attribute(&mut self, field: u32, key: &str, value: &str) {
        let kv = self.begin(field);
        self.str(field::KEY_VALUE_KEY, key);
        let any = self.begin(field::KEY_VALUE_VALUE);
        self.bytes_always(field::ANY_STRING, value.as_bytes());
        self.end(any);
        self.end(kv);
    }
}

/// A span's flags as the SDK's encoder writes them: whether its parent (or, for a link,
/// the linked context) is remote is known, and whether it is.
pub fn span_flags(remote: bool) -> u32 {
    if remote {
        FLAGS_HAS_IS_REMOTE | FLAGS_IS_REMOTE
    } else {
        FLAGS_HAS_IS_REMOTE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_fields_and_defaults() {
        let mut w = Writer::new();
        w.uint(3, 0); // a zero count: left out
        w.uint(3, 2);
        w.uint_always(2, 0); // a one-of member: written
        w.int64_always(3, -1);
        assert_eq!(
            w.as_bytes(),
            &[
                0x18, 0x02, 0x10, 0x00, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                0x01
            ]
        );
    }

    #[test]
    fn fixed_fields_little_endian() {
        let mut w = Writer::new();
        w.fixed64(7, 0x0102_0304_0506_0708);
        w.fixed32(16, 0x100);
        w.fixed64(8, 0);
        w.double_always(4, 1.5);
        let mut want = vec![
            0x39, 8, 7, 6, 5, 4, 3, 2, 1, 0x85, 0x01, 0x00, 0x01, 0, 0, 0x21,
        ];
        want.extend_from_slice(&1.5f64.to_le_bytes());
        assert_eq!(w.as_bytes(), &want[..]);
    }

    #[test]
    fn ids_are_big_endian_and_fixed_length() {
        let mut w = Writer::new();
        w.trace_id(1, 1);
        w.span_id(2, 0x0a0b);
        let mut want = vec![0x0a, 16];
        want.extend_from_slice(&[0; 15]);
        want.push(1);
        want.extend_from_slice(&[0x12, 8, 0, 0, 0, 0, 0, 0, 0x0a, 0x0b]);
        assert_eq!(w.as_bytes(), &want[..]);
    }

    #[test]
    fn nested_messages_get_their_length_in_front() {
        let mut w = Writer::new();
        w.string_attribute(9, "a", "bc");
        // KeyValue{key: "a", value: AnyValue{string_value: "bc"}}
        assert_eq!(
            w.as_bytes(),
            &[0x4a, 0x09, 0x0a, 0x01, b'a', 0x12, 0x04, 0x0a, 0x02, b'b', b'c']
        );
    }

    #[test]
    fn an_empty_set_message_is_written() {
        let mut w = Writer::new();
        let status = w.begin(field::SPAN_STATUS);
        w.str(field::STATUS_MESSAGE, "");
        w.uint(field::STATUS_CODE, 0);
        w.end(status);
        assert_eq!(w.as_bytes(), &[0x7a, 0x00]);
    }

    #[test]
    fn a_long_nested_message_takes_a_two_byte_length() {
        let mut w = Writer::new();
        let open = w.begin(1);
        w.bytes(2, &[7u8; 200]);
        w.end(open);
        let bytes = w.as_bytes();
        // content: tag, length 200 (two bytes), 200 bytes = 203 = 0xcb 0x01
        assert_eq!(&bytes[..5], &[0x0a, 0xcb, 0x01, 0x12, 0xc8]);
        assert_eq!(bytes.len(), 3 + 203);
        assert!(bytes[6..].iter().all(|b| *b == 7));
    }

    #[test]
    fn truncate_drops_a_half_written_attribute() {
        let mut w = Writer::new();
        w.string_attribute(9, "k", "v");
        let mark = w.mark();
        let kv = w.begin(9);
        w.str(1, "bad");
        drop(kv);
        w.truncate(mark);
        assert_eq!(w.as_bytes().len(), mark);
    }

    #[test]
    fn spans_written_apart_join_a_message_as_they_are() {
        let mut spans = Writer::new();
        spans.string_attribute(2, "a", "b");
        let first = spans.mark();
        spans.string_attribute(2, "c", "d");
        let mut whole = Writer::new();
        let open = whole.begin(1);
        whole.raw(&spans.as_bytes()[..first]);
        whole.end(open);
        spans.drain_front(first);
        let mut alone = Writer::new();
        alone.string_attribute(2, "c", "d");
        assert_eq!(spans.as_bytes(), alone.as_bytes());
        let mut want = Writer::new();
        let open = want.begin(1);
        want.string_attribute(2, "a", "b");
        want.end(open);
        assert_eq!(whole.as_bytes(), want.as_bytes());
    }

    #[test]
    fn flags_say_whether_the_parent_is_remote() {
        assert_eq!(span_flags(false), 0x100);
        assert_eq!(span_flags(true), 0x300);
    }
}
