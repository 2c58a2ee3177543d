//! The JSON of a frame as serde reads it: each member fastctl looks at borrowed as raw JSON
//! (`FrameRaw`, `TopRaw`, `MetaRaw`, `OwnerRaw`, `ListRaw`), and those raw values read as
//! the Python checks read them (a string, null, Python's falsiness).

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::Error;

#[derive(Deserialize)]
pub(super) struct FrameRaw<'a> {
    #[serde(rename = "type", borrow, default)]
    pub(super) etype: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct TopRaw<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    pub(super) api_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) metadata: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct MetaRaw<'a> {
    #[serde(borrow, default)]
    pub(super) name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) namespace: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) uid: Option<&'a RawValue>,
    #[serde(rename = "resourceVersion", borrow, default)]
    pub(super) resource_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) generation: Option<&'a RawValue>,
    #[serde(rename = "deletionTimestamp", borrow, default)]
    pub(super) deletion_timestamp: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) labels: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) annotations: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) finalizers: Option<&'a RawValue>,
    #[serde(rename = "ownerReferences", borrow, default)]
    pub(super) owner_references: Option<&'a RawValue>,
    #[serde(rename = "managedFields", borrow, default)]
    pub(super) managed_fields: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct OwnerRaw<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    pub(super) api_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) uid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) controller: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct ListRaw<'a> {
    #[serde(borrow, default)]
    pub(super) kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) metadata: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) items: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct ListMetaRaw<'a> {
    #[serde(rename = "continue", borrow, default)]
    pub(super) continue_token: Option<&'a RawValue>,
    #[serde(rename = "resourceVersion", borrow, default)]
    pub(super) resource_version: Option<&'a RawValue>,
    #[serde(rename = "shardInfo", borrow, default)]
    pub(super) shard_info: Option<&'a RawValue>,
}

pub(super) fn parse_object<'a, T: Deserialize<'a>>(data: &'a [u8], what: &str) -> Result<T, Error> {
    if first_byte(data) != Some(b'{') {
        // Name a syntax error first (as a JSON parser would), else the wrong type.
        serde_json::from_slice::<IgnoredAny>(data)
            .map_err(|e| Error(format!("malformed {what}: {e}")))?;
        return Err(Error(format!("malformed {what}: not a JSON object")));
    }
    serde_json::from_slice(data).map_err(|e| Error(format!("malformed {what}: {e}")))
}

pub(super) fn first_byte(data: &[u8]) -> Option<u8> {
    data.iter().copied().find(|b| !b.is_ascii_whitespace())
}

pub(super) fn is_object(raw: &RawValue) -> bool {
    raw.get().as_bytes().first() == Some(&b'{')
}

pub(super) fn is_null(raw: &RawValue) -> bool {
    raw.get() == "null"
}

/// Python's falsiness of a JSON value: null, false, 0, "", [] and {}.
pub(super) fn is_falsy(raw: &RawValue) -> bool {
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
pub(super) fn plain_string(raw: Option<&RawValue>) -> Result<Option<String>, ()> {
    let Some(raw) = raw else { return Ok(None) };
    let s = raw.get();
    match s.as_bytes().first() {
        Some(b'n') => Ok(None),
        Some(b'"') if !s.contains('\\') => Ok(Some(s[1..s.len() - 1].to_owned())),
        Some(b'"') => serde_json::from_str::<String>(s).map(Some).map_err(|_| ()),
        _ => Err(()),
    }
}

pub(super) trait StringField {
    fn field(self, key: &str) -> Result<Option<String>, Error>;
}

impl StringField for Option<&RawValue> {
    fn field(self, key: &str) -> Result<Option<String>, Error> {
        plain_string(self).map_err(|()| Error(format!("metadata.{key} is not a string")))
    }
}
