//! The messages of ConfigMaps, Secrets and Status (`metav1.ObjectMeta`, owner references,
//! managed fields, `metav1.Status`), each written as the API server's JSON of it.

use super::json::{
    map_pairs, push_bool, push_int, push_map, push_str, push_time, push_time_value, time_of,
    write_map, Obj,
};
use super::wire::{bytes_of, text, varint_of, Fields};
use crate::frames::{Error, Meta, Owner, INITIAL_EVENTS_END};

/// Text as an owned string, `None` when empty (`omitempty`: the JSON has no such field).
pub(super) fn owned(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty()).then(|| text(bytes).into_owned())
}

/// `metav1.ObjectMeta`, in the field order of its Go struct (`managedFields` left out when
/// `strip_managed`), and what `frames::Meta` holds of it: the same values the JSON decoder
/// reads from the JSON written here.
pub(super) fn push_object_meta(
    out: &mut Vec<u8>,
    bytes: &[u8],
    strip_managed: bool,
) -> Result<Meta, Error> {
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
pub(super) fn push_owner(out: &mut Vec<u8>, bytes: &[u8]) -> Result<Owner, Error> {
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
pub(super) fn push_managed_fields_entry(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
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
pub(super) fn push_data_object(
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
pub(super) fn push_status(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
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

pub(super) fn push_list_meta(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
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

pub(super) fn push_status_details(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
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
