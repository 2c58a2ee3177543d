//! The protobuf decoder's tests: the shared streams and a small encoder for hand-built
//! messages here, the tests by concern in `tests/`.

mod go_json;
mod malformed;
mod one_pass;
mod server;

use super::json::{push_base64, push_time};
use super::*;
use crate::frames::{self, Frame};

// Streams the API server (kube-apiserver v1.36.3) sent for the same ConfigMap and Secret,
// as protobuf and as JSON: the JSON lines are what the decoder must write, byte for byte.
const CONFIGMAPS_PB: &[u8] = include_bytes!("testdata/configmaps.pb");
const CONFIGMAPS_JSON: &[u8] = include_bytes!("testdata/configmaps.json");
const SECRETS_PB: &[u8] = include_bytes!("testdata/secrets.pb");
const SECRETS_JSON: &[u8] = include_bytes!("testdata/secrets.json");

// -- a small encoder for hand-built messages ------------------------------------------------

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes_field(out: &mut Vec<u8>, number: u64, value: &[u8]) {
    varint(out, number << 3 | 2);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

fn varint_field(out: &mut Vec<u8>, number: u64, value: u64) {
    varint(out, number << 3);
    varint(out, value);
}

fn msg(parts: &[(u64, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (number, value) in parts {
        bytes_field(&mut out, *number, value);
    }
    out
}

fn entry(key: &str, value: &[u8]) -> Vec<u8> {
    msg(&[(1, key.as_bytes()), (2, value)])
}

fn time(seconds: u64) -> Vec<u8> {
    let mut out = Vec::new();
    varint_field(&mut out, 1, seconds);
    out
}

fn unknown(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = msg(&[(1, api_version.as_bytes()), (2, kind.as_bytes())]);
    let mut out = MAGIC.to_vec();
    out.extend(msg(&[(1, &type_meta), (2, raw), (3, b""), (4, b"")]));
    out
}

fn event(etype: &str, object: &[u8]) -> Vec<u8> {
    msg(&[(1, etype.as_bytes()), (2, &msg(&[(1, object)]))])
}

fn framed(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(&(f.len() as u32).to_be_bytes());
        out.extend_from_slice(f);
    }
    out
}

fn json_of(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).expect("JSON")
}

/// A ConfigMap with every metadata field set, hand-built.
fn full_configmap() -> Vec<u8> {
    let owner = {
        let mut o = msg(&[(1, b"Widget"), (3, b"w"), (4, b"o-1"), (5, b"x.dev/v1")]);
        varint_field(&mut o, 6, 1);
        varint_field(&mut o, 7, 0);
        o
    };
    let managed = msg(&[
        (1, b"kubectl"),
        (2, b"Apply"),
        (3, b"v1"),
        (4, &time(1_764_936_000)),
        (6, b"FieldsV1"),
        (7, &msg(&[(1, br#"{"f:data":{"f:k":{}}}"#)])),
    ]);
    let mut meta = msg(&[
        (1, b"web"),
        (2, b"web-"),
        (3, b"ns"),
        (4, b""),
        (5, b"u-1"),
        (6, b"42"),
    ]);
    varint_field(&mut meta, 7, 3);
    meta.extend(msg(&[(8, &time(0)), (9, &time(951_782_400))]));
    varint_field(&mut meta, 10, 30);
    meta.extend(msg(&[
        (11, &entry("tier", b"front")),
        (11, &entry("app", b"web")),
        (12, &entry("note", "<a & \"b\">\n\u{2028}".as_bytes())),
        (13, &owner),
        (14, b"x.dev/first"),
        (14, b"x.dev/second"),
        (17, &managed),
    ]));
    let mut cm = msg(&[
        (1, &meta),
        (2, &entry("k", b"v")),
        (3, &entry("b", &[0, 1, 2, 255])),
        (3, &entry("a", b"xy")),
    ]);
    varint_field(&mut cm, 4, 1);
    cm
}

const FULL_CONFIGMAP_JSON: &str = concat!(
    r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"web","generateName":"web-","#,
    r#""namespace":"ns","uid":"u-1","resourceVersion":"42","generation":3,"#,
    r#""creationTimestamp":"1970-01-01T00:00:00Z","deletionTimestamp":"2000-02-29T00:00:00Z","#,
    r#""deletionGracePeriodSeconds":30,"labels":{"app":"web","tier":"front"},"#,
    r#""annotations":{"note":"\u003ca \u0026 \"b\"\u003e\n\u2028"},"#,
    r#""ownerReferences":[{"apiVersion":"x.dev/v1","kind":"Widget","name":"w","uid":"o-1","#,
    r#""controller":true,"blockOwnerDeletion":false}],"#,
    r#""finalizers":["x.dev/first","x.dev/second"],"#,
    r#""managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"v1","#,
    r#""time":"2025-12-05T12:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:k":{}}}}]},"#,
    r#""immutable":true,"data":{"k":"v"},"binaryData":{"a":"eHk=","b":"AAEC/w=="}}"#
);

// -- the frames and lines of a stream ------------------------------------------------------

fn lines_of(json: &[u8]) -> Vec<&[u8]> {
    json.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect()
}

fn frames_of(stream: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        let n = u32::from_be_bytes(stream[at..at + 4].try_into().unwrap()) as usize;
        out.push(&stream[at + 4..at + 4 + n]);
        at += 4 + n;
    }
    out
}
