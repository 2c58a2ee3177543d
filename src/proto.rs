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

use crate::frames::{Error, Frame, Lines, Object, Options};

/// The prefix of every protobuf-encoded object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The media type to ask for (`Accept`) and that the server answers with.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

fn err<T>(message: impl Into<String>) -> Result<T, Error> {
    Err(Error(message.into()))
}

mod json;
mod messages;
mod wire;

use json::push_str;
use messages::{push_data_object, push_status};
use wire::{bytes_of, text, Fields};

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
