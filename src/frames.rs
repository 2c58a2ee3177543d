//! Watch frames and list pages decoded once, in plain Rust (no Python).
//!
//! The API server sends each object as JSON. fastctl needs a few fields of its metadata on
//! every event (the key, uid, resourceVersion, the controller owner, labels for the
//! indexes), and the object itself only when someone reads it. So a frame is parsed here
//! once: its JSON is validated, the metadata fastctl reads is checked and extracted, and the
//! object is kept as bytes, with `managedFields` cut out of them when asked (nothing else of
//! the object is rewritten). An error names what is wrong, as the Python checks did
//! (`metadata.name is missing or not a string`), and never panics.
//!
//! Its parts: the JSON as serde reads it (`raw`), one object decoded (`object`) and its
//! metadata checked (`meta`).

mod meta;
mod object;
mod raw;

use std::fmt;

use serde::de::IgnoredAny;
use serde_json::value::RawValue;

pub use meta::{label_of, labels_of};
use object::decode_raw_object;
use raw::{
    first_byte, is_falsy, is_object, parse_object, plain_string, FrameRaw, ListMetaRaw, ListRaw,
};

/// A frame or page that cannot be used, with what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// The annotation that marks the bookmark ending a streaming list.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// One entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// `controller` is truthy (as Python reads it).
    pub controller: bool,
}

/// The metadata fastctl reads, checked and copied out of the object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// Empty only for an unnamed object (a bookmark).
    pub name: String,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// An integer `generation`, if the object has one.
    pub generation: Option<i64>,
    pub deletion_timestamp: Option<String>,
    pub labels: Vec<(String, String)>,
    pub owners: Vec<Owner>,
    /// The annotation `k8s.io/initial-events-end` is `"true"`.
    pub initial_events_end: bool,
}

impl Meta {
    /// The UID of the first owner reference with `controller` set and a non-empty uid.
    pub fn controller_uid(&self) -> Option<&str> {
        self.owners
            .iter()
            .find(|o| o.controller && !o.uid.is_empty())
            .map(|o| o.uid.as_str())
    }
}

/// One decoded object: its JSON as kept, its metadata, and its own `apiVersion` and `kind`
/// as received (before any identity was filled in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub json: Vec<u8>,
    pub meta: Meta,
    pub api_version: Option<String>,
    pub kind: Option<String>,
}

/// What to do to an object's bytes while decoding it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// Cut `metadata.managedFields` out of the kept JSON.
    pub strip_managed_fields: bool,
    /// An `apiVersion` and `kind` to give the object: filled in where missing (list items
    /// omit them), or written over what it has when `replace_identity` (metadata-only
    /// objects arrive as `meta.k8s.io/v1 PartialObjectMetadata`).
    pub identity: Option<(&'a str, &'a str)>,
    pub replace_identity: bool,
    /// An object made in Python, not received: only `metadata.name` must be right; a
    /// field of another type (an owner reference without `apiVersion`, a label that is
    /// not a string) is read as absent instead of refused.
    pub lenient: bool,
}

/// The type of a watch frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `ERROR`: the raw Status object (only checked to be a JSON object).
    Error(Vec<u8>),
    /// Any other type (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, or unknown), with its
    /// object decoded (a bookmark's needs no name).
    Object(String, Box<Object>),
}

/// A list response: its items, and the list metadata fastctl reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub items: Vec<Object>,
    pub kind: Option<String>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    /// `metadata.shardInfo` is present (the server applied `shardSelector`).
    pub shard_info: bool,
}

/// Decode one watch line (`{"type": ..., "object": {...}}`).
pub fn decode_frame(line: &[u8], options: Options<'_>) -> Result<Frame, Error> {
    let raw: FrameRaw<'_> = parse_object(line, "watch line")?;
    let etype = raw.etype.and_then(|r| plain_string(Some(r)).ok().flatten());
    let object = raw.object.filter(|r| is_object(r));
    let (Some(etype), Some(object)) = (etype, object) else {
        return Err(Error(
            "malformed watch line: type or object missing or of the wrong type".into(),
        ));
    };
    if etype == "ERROR" {
        return Ok(Frame::Error(object.get().as_bytes().to_vec()));
    }
    let named = etype != "BOOKMARK";
    let decoded = decode_raw_object(object.get().as_bytes(), options, named)
        .map_err(|Error(problem)| Error(format!("malformed watch line: the object's {problem}")))?;
    Ok(Frame::Object(etype, Box::new(decoded)))
}

/// The complete lines at the start of a watch stream's buffer, decoded: what
/// `decode_lines` read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    /// The frames of the lines read, in order (blank lines have none).
    pub frames: Vec<Frame>,
    /// How many bytes of the buffer the lines took (through the last newline read).
    pub used: usize,
    /// The first malformed line, with what is wrong with it: the lines after it are not
    /// read (the stream is resumed from the last good resourceVersion instead).
    pub error: Option<(Error, Vec<u8>)>,
}

/// Every complete line (ending in a newline) of `buffer`, decoded as `decode_frame`
/// decodes one; lines of whitespace only are skipped, bytes after the last newline are
/// left for the next read; a line longer than `max_line` bytes (its newline included) is
/// an error. Many lines in one call: a streaming list of 100,000 objects is 100,000 lines,
/// and a call per line, with a read per line before it, costs more than the decoding.
pub fn decode_lines(buffer: &[u8], options: Options<'_>, max_line: usize) -> Lines {
    let mut lines = Lines {
        frames: Vec::new(),
        used: 0,
        error: None,
    };
    while let Some(end) = buffer[lines.used..].iter().position(|&b| b == b'\n') {
        let line = &buffer[lines.used..lines.used + end + 1];
        lines.used += end + 1;
        if line.len() > max_line {
            let problem = format!("watch line longer than {max_line} bytes");
            lines.error = Some((Error(problem), line.to_vec()));
            break;
        }
        if line.iter().all(|b| b" \t\n\r\x0b\x0c".contains(b)) {
            continue;
        }
        match decode_frame(line, options) {
            Ok(frame) => lines.frames.push(frame),
            Err(error) => {
                lines.error = Some((error, line.to_vec()));
                break;
            }
        }
    }
    lines
}

/// Decode one object on its own (an object a transform returned, a dict put in a store).
pub fn decode_object(json: &[u8], options: Options<'_>) -> Result<Object, Error> {
    let start = first_byte(json);
    if start != Some(b'{') {
        serde_json::from_slice::<IgnoredAny>(json)
            .map_err(|e| Error(format!("malformed object: {e}")))?;
        return Err(Error("malformed object: not a JSON object".into()));
    }
    decode_raw_object(json, options, true).map_err(|Error(p)| Error(format!("the object's {p}")))
}

/// Decode a list response: every item (given `options.identity` where it lacks one) and the
/// list's own metadata.
pub fn decode_list(page: &[u8], options: Options<'_>) -> Result<ListPage, Error> {
    let raw: ListRaw<'_> = parse_object(page, "list response")?;
    let wrong = || Error("malformed list response: items or metadata of the wrong type".into());
    let items: Vec<&RawValue> = match raw.items {
        None => Vec::new(),
        Some(r) if is_falsy(r) => Vec::new(),
        Some(r) if first_byte(r.get().as_bytes()) == Some(b'[') => {
            serde_json::from_str(r.get()).map_err(|_| wrong())?
        }
        Some(_) => return Err(wrong()),
    };
    let mut page_meta = ListPage {
        items: Vec::with_capacity(items.len()),
        kind: raw.kind.and_then(|k| plain_string(Some(k)).ok().flatten()),
        continue_token: None,
        resource_version: None,
        shard_info: false,
    };
    match raw.metadata {
        Some(m) if is_falsy(m) => {}
        None => {}
        Some(m) if is_object(m) => {
            let meta: ListMetaRaw<'_> = serde_json::from_str(m.get()).map_err(|_| wrong())?;
            for (value, key, slot) in [
                (
                    meta.continue_token,
                    "continue",
                    &mut page_meta.continue_token,
                ),
                (
                    meta.resource_version,
                    "resourceVersion",
                    &mut page_meta.resource_version,
                ),
            ] {
                *slot = plain_string(value).map_err(|_| {
                    Error(format!(
                        "malformed list response: metadata.{key} is not a string"
                    ))
                })?;
            }
            page_meta.shard_info = meta.shard_info.is_some();
        }
        Some(_) => return Err(wrong()),
    }
    for item in items {
        let bytes = item.get().as_bytes();
        let decoded = if is_object(item) {
            decode_raw_object(bytes, options, true)
        } else {
            Err(Error("value is not an object".into()))
        };
        page_meta.items.push(decoded.map_err(|Error(problem)| {
            Error(format!("malformed list response: an item's {problem}"))
        })?);
    }
    Ok(page_meta)
}

#[cfg(test)]
mod tests;
