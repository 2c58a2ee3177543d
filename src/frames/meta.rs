//! The metadata fastctl reads of an object, checked as the Python checks did: its name and
//! namespace, uid, resourceVersion, generation, labels and annotations (maps of strings),
//! finalizers and the controller owner; and the labels of an object kept as JSON.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::raw::{is_falsy, is_null, plain_string, MetaRaw, OwnerRaw, StringField, TopRaw};
use super::{Error, Meta, Owner, INITIAL_EVENTS_END};

pub(super) fn read_meta(
    raw: &MetaRaw<'_>,
    named: bool,
    lenient: bool,
    meta: &mut Meta,
) -> Result<(), Error> {
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

pub(super) fn read_checked(raw: &MetaRaw<'_>, meta: &mut Meta) -> Result<(), Error> {
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
pub(super) fn lenient_owners(raw: &RawValue) -> Vec<Owner> {
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

pub(super) fn owner_refs(raw: &RawValue) -> Option<Vec<Owner>> {
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
pub(super) struct IgnoredString;

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
pub(super) type MapRead = (Vec<(String, String)>, Option<String>);

/// A map of strings (`null`: empty): its pairs, or only the value of `wanted` when given
/// (the rest checked and dropped, so a large annotation is never copied).
pub(super) fn string_map(
    raw: &RawValue,
    key: &str,
    wanted: Option<&str>,
) -> Result<MapRead, Error> {
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
pub(super) struct StrValue<'a>(std::borrow::Cow<'a, str>);

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
