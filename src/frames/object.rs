//! One object decoded: its metadata read (`meta`), and its bytes edited only where asked,
//! `managedFields` cut out and `apiVersion` and `kind` written in, at the positions the
//! parse found them.

use serde_json::value::RawValue;

use super::meta::read_meta;
use super::raw::{first_byte, is_null, is_object, plain_string, MetaRaw, TopRaw};
use super::{Error, Meta, Object, Options};

pub(super) fn decode_raw_object(
    json: &[u8],
    options: Options<'_>,
    named: bool,
) -> Result<Object, Error> {
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
