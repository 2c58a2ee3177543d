//! Watch frames and list pages decoded once, in plain Rust (no Python).
//!
//! The API server sends each object as JSON. fastctl needs a few fields of its metadata on
//! every event (the key, uid, resourceVersion, the controller owner, labels for the
//! indexes), and the object itself only when someone reads it. So a frame is parsed here
//! once: its JSON is validated, the metadata fastctl reads is checked and extracted, and the
//! object is kept as bytes, with `managedFields` cut out of them when asked (nothing else of
//! the object is rewritten). An error names what is wrong, as the Python checks did
//! (`metadata.name is missing or not a string`), and never panics.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

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

#[derive(Deserialize)]
struct FrameRaw<'a> {
    #[serde(rename = "type", borrow, default)]
    etype: Option<&'a RawValue>,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct TopRaw<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct MetaRaw<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    namespace: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uid: Option<&'a RawValue>,
    #[serde(rename = "resourceVersion", borrow, default)]
    resource_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    generation: Option<&'a RawValue>,
    #[serde(rename = "deletionTimestamp", borrow, default)]
    deletion_timestamp: Option<&'a RawValue>,
    #[serde(borrow, default)]
    labels: Option<&'a RawValue>,
    #[serde(borrow, default)]
    annotations: Option<&'a RawValue>,
    #[serde(borrow, default)]
    finalizers: Option<&'a RawValue>,
    #[serde(rename = "ownerReferences", borrow, default)]
    owner_references: Option<&'a RawValue>,
    #[serde(rename = "managedFields", borrow, default)]
    managed_fields: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct OwnerRaw<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    controller: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ListRaw<'a> {
    #[serde(borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow, default)]
    items: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ListMetaRaw<'a> {
    #[serde(rename = "continue", borrow, default)]
    continue_token: Option<&'a RawValue>,
    #[serde(rename = "resourceVersion", borrow, default)]
    resource_version: Option<&'a RawValue>,
    #[serde(rename = "shardInfo", borrow, default)]
    shard_info: Option<&'a RawValue>,
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

fn parse_object<'a, T: Deserialize<'a>>(data: &'a [u8], what: &str) -> Result<T, Error> {
    if first_byte(data) != Some(b'{') {
        // Name a syntax error first (as a JSON parser would), else the wrong type.
        serde_json::from_slice::<IgnoredAny>(data)
            .map_err(|e| Error(format!("malformed {what}: {e}")))?;
        return Err(Error(format!("malformed {what}: not a JSON object")));
    }
    serde_json::from_slice(data).map_err(|e| Error(format!("malformed {what}: {e}")))
}

fn first_byte(data: &[u8]) -> Option<u8> {
    data.iter().copied().find(|b| !b.is_ascii_whitespace())
}

fn is_object(raw: &RawValue) -> bool {
    raw.get().as_bytes().first() == Some(&b'{')
}

fn is_null(raw: &RawValue) -> bool {
    raw.get() == "null"
}

/// Python's falsiness of a JSON value: null, false, 0, "", [] and {}.
fn is_falsy(raw: &RawValue) -> bool {
    let s = raw.get();
    match s.as_bytes().first() {
        Some(b'n') | Some(b'f') => true,
        Some(b'"') => s.len() == 2,
        Some(b'[') | Some(b'{') => s[1..s.len() - 1].trim().is_empty(),
        Some(b'-') | Some(b'0'..=b'9') => s.parse::<f64>().map(|v| v == 0.0).unwrap_or(false),
        _ => false,
    }
}

/// A JSON string's value (`Ok(None)` for null or absent), or `Err(())` for another type.
fn plain_string(raw: Option<&RawValue>) -> Result<Option<String>, ()> {
    let Some(raw) = raw else { return Ok(None) };
    let s = raw.get();
    match s.as_bytes().first() {
        Some(b'n') => Ok(None),
        Some(b'"') if !s.contains('\\') => Ok(Some(s[1..s.len() - 1].to_owned())),
        Some(b'"') => serde_json::from_str::<String>(s).map(Some).map_err(|_| ()),
        _ => Err(()),
    }
}

trait StringField {
    fn field(self, key: &str) -> Result<Option<String>, Error>;
}

impl StringField for Option<&RawValue> {
    fn field(self, key: &str) -> Result<Option<String>, Error> {
        plain_string(self).map_err(|()| Error(format!("metadata.{key} is not a string")))
    }
}

fn decode_raw_object(json: &[u8], options: Options<'_>, named: bool) -> Result<Object, Error> {
    let top: TopRaw<'_> =
        serde_json::from_slice(json).map_err(|e| Error(format!("value is malformed: {e}")))?;
    let mut meta = Meta::default();
    let mut cut: Option<(usize, usize)> = None;
    match top.metadata {
        None if !named => {}
        Some(m) if !named && is_null(m) => {}
        Some(m) if is_object(m) => {
            let raw: MetaRaw<'_> = serde_json::from_str(m.get())
                .map_err(|e| Error(format!("metadata is malformed: {e}")))?;
            read_meta(&raw, named, options.lenient, &mut meta)?;
            if options.strip_managed_fields {
                if let Some(fields) = raw.managed_fields {
                    cut = member_span(json, fields, "managedFields");
                }
            }
        }
        _ => return Err(Error("metadata is not an object".into())),
    }
    let api_version = top
        .api_version
        .and_then(|r| plain_string(Some(r)).ok().flatten());
    let kind = top.kind.and_then(|r| plain_string(Some(r)).ok().flatten());
    let mut edits: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    if let Some((start, end)) = cut {
        edits.push((start, end, Vec::new()));
    }
    if let Some((want_version, want_kind)) = options.identity {
        let mut missing = Vec::new();
        for (raw, key, value) in [
            (top.api_version, "apiVersion", want_version),
            (top.kind, "kind", want_kind),
        ] {
            let text = serde_json::to_string(value).expect("a str serializes");
            match raw {
                Some(r) if options.replace_identity || is_null(r) => {
                    let start = offset_in(json, r);
                    edits.push((start, start + r.get().len(), text.into_bytes()));
                }
                Some(_) => {}
                None => missing.push(format!("\"{key}\":{text}")),
            }
        }
        if !missing.is_empty() {
            let brace = json.iter().position(|&b| b == b'{').unwrap_or(0) + 1;
            let empty = first_byte(&json[brace..]) == Some(b'}');
            let mut text = missing.join(",");
            if !empty {
                text.push(',');
            }
            edits.push((brace, brace, text.into_bytes()));
        }
    }
    let json = if edits.is_empty() {
        json.to_vec()
    } else {
        edits.sort_by_key(|e| e.0);
        let mut out = Vec::with_capacity(json.len() + 64);
        let mut at = 0;
        for (start, end, text) in edits {
            out.extend_from_slice(&json[at..start]);
            out.extend_from_slice(&text);
            at = end;
        }
        out.extend_from_slice(&json[at..]);
        out
    };
    Ok(Object {
        json,
        meta,
        api_version,
        kind,
    })
}

fn read_meta(raw: &MetaRaw<'_>, named: bool, lenient: bool, meta: &mut Meta) -> Result<(), Error> {
    let name = raw.name.field("name");
    match name {
        Ok(Some(n)) if !n.is_empty() => meta.name = n,
        Ok(_) if !named => {}
        _ => return Err(Error("metadata.name is missing or not a string".into())),
    }
    let checked = read_checked(raw, meta);
    if lenient {
        if checked.is_err() {
            // Keep what reads cleanly; the rest is absent.
            let owners = raw.owner_references.map(lenient_owners).unwrap_or_default();
            *meta = Meta {
                name: std::mem::take(&mut meta.name),
                namespace: raw.namespace.field("namespace").ok().flatten(),
                uid: raw.uid.field("uid").ok().flatten(),
                resource_version: raw.resource_version.field("rv").ok().flatten(),
                generation: meta.generation,
                deletion_timestamp: raw.deletion_timestamp.field("dt").ok().flatten(),
                labels: raw
                    .labels
                    .and_then(|l| string_map(l, "labels", None).ok())
                    .map(|(pairs, _)| pairs)
                    .unwrap_or_default(),
                owners,
                initial_events_end: false,
            };
        }
        return Ok(());
    }
    checked
}

fn read_checked(raw: &MetaRaw<'_>, meta: &mut Meta) -> Result<(), Error> {
    meta.namespace = raw.namespace.field("namespace")?;
    meta.uid = raw.uid.field("uid")?;
    meta.resource_version = raw.resource_version.field("resourceVersion")?;
    meta.deletion_timestamp = raw.deletion_timestamp.field("deletionTimestamp")?;
    meta.generation = raw
        .generation
        .and_then(|g| serde_json::from_str::<i64>(g.get()).ok());
    if let Some(labels) = raw.labels {
        meta.labels = string_map(labels, "labels", None)?.0;
    }
    if let Some(annotations) = raw.annotations {
        let (_, end) = string_map(annotations, "annotations", Some(INITIAL_EVENTS_END))?;
        meta.initial_events_end = end.as_deref() == Some("true");
    }
    if let Some(finalizers) = raw.finalizers.filter(|f| !is_null(f)) {
        serde_json::from_str::<Vec<IgnoredString>>(finalizers.get())
            .map_err(|_| Error("metadata.finalizers is not a list of strings".into()))?;
    }
    if let Some(owners) = raw.owner_references.filter(|o| !is_null(o)) {
        meta.owners = owner_refs(owners).ok_or_else(|| {
            Error("metadata.ownerReferences is not a list of owner references".into())
        })?;
    }
    Ok(())
}

/// Owner references as Python reads them: whatever is not a string is empty.
fn lenient_owners(raw: &RawValue) -> Vec<Owner> {
    let items: Vec<OwnerRaw<'_>> = serde_json::from_str(raw.get()).unwrap_or_default();
    let text = |r: Option<&RawValue>| plain_string(r).ok().flatten().unwrap_or_default();
    items
        .into_iter()
        .map(|o| Owner {
            api_version: text(o.api_version),
            kind: text(o.kind),
            name: text(o.name),
            uid: text(o.uid),
            controller: o.controller.is_some_and(|c| !is_falsy(c)),
        })
        .collect()
}

fn owner_refs(raw: &RawValue) -> Option<Vec<Owner>> {
    let items: Vec<OwnerRaw<'_>> = serde_json::from_str(raw.get()).ok()?;
    if raw.get().as_bytes().first() != Some(&b'[') {
        return None;
    }
    items
        .into_iter()
        .map(|o| {
            Some(Owner {
                api_version: plain_string(o.api_version).ok()??,
                kind: plain_string(o.kind).ok()??,
                name: plain_string(o.name).ok()??,
                uid: plain_string(o.uid).ok()??,
                controller: o.controller.is_some_and(|c| !is_falsy(c)),
            })
        })
        .collect()
}

/// A JSON string, checked and dropped.
struct IgnoredString;

impl<'de> Deserialize<'de> for IgnoredString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IgnoredString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<IgnoredString, E> {
                Ok(IgnoredString)
            }
        }
        d.deserialize_str(V)
    }
}

/// A map's pairs, and the value of the one key asked for.
type MapRead = (Vec<(String, String)>, Option<String>);

/// A map of strings (`null`: empty): its pairs, or only the value of `wanted` when given
/// (the rest checked and dropped, so a large annotation is never copied).
fn string_map(raw: &RawValue, key: &str, wanted: Option<&str>) -> Result<MapRead, Error> {
    struct MapVisitor<'w> {
        wanted: Option<&'w str>,
    }
    impl<'de> Visitor<'de> for MapVisitor<'_> {
        type Value = MapRead;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok((Vec::new(), None))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut pairs = Vec::new();
            let mut found = None;
            while let Some(k) = map.next_key::<StrValue<'de>>()? {
                let v = map.next_value::<StrValue<'de>>()?;
                match self.wanted {
                    None => pairs.push((k.0.into_owned(), v.0.into_owned())),
                    Some(w) if k.0 == w => found = Some(v.0.into_owned()),
                    Some(_) => {}
                }
            }
            Ok((pairs, found))
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_any(MapVisitor { wanted })
        .map_err(|_| Error(format!("metadata.{key} is not a map of strings")))
}

/// A string, borrowed from the input when it has no escapes.
struct StrValue<'a>(std::borrow::Cow<'a, str>);

impl<'de> Deserialize<'de> for StrValue<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrValue<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<StrValue<'de>, E> {
                Ok(StrValue(s.into()))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<StrValue<'de>, E> {
                Ok(StrValue(s.to_owned().into()))
            }
        }
        d.deserialize_str(V)
    }
}

/// Where `raw` starts in `json` (it was parsed out of it).
fn offset_in(json: &[u8], raw: &RawValue) -> usize {
    raw.get().as_ptr() as usize - json.as_ptr() as usize
}

/// The bytes to cut to remove the member `"key": raw` from its object, with the comma that
/// separates it from a neighbour; `None` if the key is not spelled plainly before the value
/// (an escaped key: the member is then kept, which is correct, only larger).
fn member_span(json: &[u8], raw: &RawValue, key: &str) -> Option<(usize, usize)> {
    let start = offset_in(json, raw);
    let end = start + raw.get().len();
    let mut i = start;
    i = skip_ws_back(json, i);
    if i == 0 || json[i - 1] != b':' {
        return None;
    }
    i = skip_ws_back(json, i - 1);
    let quoted = key.len() + 2;
    if i < quoted || &json[i - quoted + 1..i - 1] != key.as_bytes() || json[i - 1] != b'"' {
        return None;
    }
    let key_start = i - quoted;
    if json[key_start] != b'"' {
        return None;
    }
    let before = skip_ws_back(json, key_start);
    if before > 0 && json[before - 1] == b',' {
        return Some((before - 1, end));
    }
    // The first member: cut through the comma after it, if any.
    let mut after = end;
    while after < json.len() && json[after].is_ascii_whitespace() {
        after += 1;
    }
    if after < json.len() && json[after] == b',' {
        return Some((key_start, after + 1));
    }
    Some((key_start, end))
}

fn skip_ws_back(json: &[u8], mut i: usize) -> usize {
    while i > 0 && json[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    i
}

/// The value of label `key` of an object kept as JSON (`None`: no such label, or JSON this
/// module did not produce).
pub fn label_of(json: &[u8], key: &str) -> Option<String> {
    let top: TopRaw<'_> = serde_json::from_slice(json).ok()?;
    #[derive(Deserialize)]
    struct Labels<'a> {
        #[serde(borrow, default)]
        labels: Option<&'a RawValue>,
    }
    let meta: Labels<'_> = serde_json::from_str(top.metadata?.get()).ok()?;
    string_map(meta.labels?, "labels", Some(key)).ok()?.1
}

/// Every label of an object kept as JSON.
pub fn labels_of(json: &[u8]) -> Vec<(String, String)> {
    let Ok(top) = serde_json::from_slice::<TopRaw<'_>>(json) else {
        return Vec::new();
    };
    #[derive(Deserialize)]
    struct Labels<'a> {
        #[serde(borrow, default)]
        labels: Option<&'a RawValue>,
    }
    top.metadata
        .and_then(|m| serde_json::from_str::<Labels<'_>>(m.get()).ok())
        .and_then(|m| m.labels)
        .and_then(|l| string_map(l, "labels", None).ok())
        .map(|(pairs, _)| pairs)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
