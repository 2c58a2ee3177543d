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

// -- what the API server sent ----------------------------------------------------------------

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

#[test]
fn the_servers_protobuf_frames_become_its_json_lines_byte_for_byte() {
    for (pb, json) in [(CONFIGMAPS_PB, CONFIGMAPS_JSON), (SECRETS_PB, SECRETS_JSON)] {
        let frames = frames_of(pb);
        let lines = lines_of(json);
        assert_eq!(frames.len(), lines.len());
        for (frame, line) in frames.iter().zip(lines) {
            let got = watch_line(frame).unwrap();
            assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(line));
        }
    }
}

#[test]
fn a_stream_decodes_to_the_frames_of_its_json() {
    for (pb, json) in [(CONFIGMAPS_PB, CONFIGMAPS_JSON), (SECRETS_PB, SECRETS_JSON)] {
        let opts = Options {
            strip_managed_fields: true,
            ..Options::default()
        };
        let from_pb = decode_frames(pb, opts, 1 << 20);
        let from_json = frames::decode_lines(json, opts, 1 << 20);
        assert_eq!(from_pb.error, None);
        assert_eq!(from_pb.used, pb.len());
        assert_eq!(from_pb.frames, from_json.frames);
        let Frame::Object(etype, bookmark) = &from_pb.frames[1] else {
            panic!("no bookmark")
        };
        assert_eq!(etype, "BOOKMARK");
        assert!(bookmark.meta.initial_events_end);
    }
}

// -- hand-built bytes ------------------------------------------------------------------------

#[test]
fn every_field_of_a_configmap_is_written_as_go_writes_it() {
    let got = object_json(&unknown("v1", "ConfigMap", &full_configmap())).unwrap();
    assert_eq!(String::from_utf8(got).unwrap(), FULL_CONFIGMAP_JSON);
    json_of(FULL_CONFIGMAP_JSON.as_bytes());
}

#[test]
fn a_secret_has_base64_data_its_type_and_immutable() {
    let meta = msg(&[(1, b"s"), (3, b"ns")]);
    let mut secret = msg(&[
        (1, &meta),
        (2, &entry("token", b"hi!?")),
        (2, &entry("empty", b"")),
        (4, &entry("plain", b"text")),
        (3, b"kubernetes.io/tls"),
    ]);
    varint_field(&mut secret, 5, 0);
    let got = object_json(&unknown("v1", "Secret", &secret)).unwrap();
    assert_eq!(
        String::from_utf8(got).unwrap(),
        concat!(
            r#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","namespace":"ns"},"#,
            r#""immutable":false,"data":{"empty":"","token":"aGkhPw=="},"#,
            r#""stringData":{"plain":"text"},"type":"kubernetes.io/tls"}"#
        )
    );
}

#[test]
fn map_keys_are_sorted_and_the_last_of_equal_keys_wins() {
    let cm = msg(&[
        (1, &msg(&[(1, b"m")])),
        (2, &entry("b", b"1")),
        (2, &entry("a", b"2")),
        (2, &entry("b", b"3")),
    ]);
    let got = object_json(&unknown("v1", "ConfigMap", &cm)).unwrap();
    assert!(String::from_utf8(got)
        .unwrap()
        .ends_with(r#""data":{"a":"2","b":"3"}}"#));
}

#[test]
fn an_error_event_carries_the_status_as_json() {
    let details = msg(&[
        (1, b"x"),
        (4, &msg(&[(1, b"FieldValueInvalid"), (3, b"spec")])),
    ]);
    let mut status = msg(&[
        (1, b""),
        (2, b"Failure"),
        (3, b"too old resource version: 1 (5)"),
        (4, b"Expired"),
        (5, &details),
    ]);
    varint_field(&mut status, 6, 410);
    let stream = framed(&[event("ERROR", &unknown("v1", "Status", &status))]);
    let lines = decode_frames(&stream, Options::default(), 1 << 20);
    assert_eq!(lines.error, None);
    let [Frame::Error(json)] = lines.frames.as_slice() else {
        panic!("not one error frame: {:?}", lines.frames)
    };
    assert_eq!(
        String::from_utf8_lossy(json),
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
            r#""message":"too old resource version: 1 (5)","reason":"Expired","#,
            r#""details":{"name":"x","causes":[{"reason":"FieldValueInvalid","field":"spec"}]},"#,
            r#""code":410}"#
        )
    );
}

#[test]
fn times_are_rfc3339_in_utc() {
    for (seconds, want) in [
        (0i64, "1970-01-01T00:00:00Z"),
        (951_782_400, "2000-02-29T00:00:00Z"),
        (1_764_936_061, "2025-12-05T12:01:01Z"),
        (-1, "1969-12-31T23:59:59Z"),
        (253_402_300_799, "9999-12-31T23:59:59Z"),
    ] {
        let mut out = Vec::new();
        push_time(&mut out, seconds).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), format!("\"{want}\""));
    }
    assert!(push_time(&mut Vec::new(), 253_402_300_800).is_err());
}

#[test]
fn base64_pads_as_go_does() {
    for (bytes, want) in [
        (&b""[..], ""),
        (b"f", "Zg=="),
        (b"fo", "Zm8="),
        (b"foo", "Zm9v"),
        (b"foob", "Zm9vYg=="),
        (&[0xfb, 0xff][..], "+/8="),
    ] {
        let mut out = Vec::new();
        push_base64(&mut out, bytes);
        assert_eq!(String::from_utf8(out).unwrap(), format!("\"{want}\""));
    }
}

#[test]
fn strings_escape_as_go_does() {
    let mut out = Vec::new();
    push_str(&mut out, "a\"\\\u{1}\u{8}\u{c}\t<é>\u{2029}");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#""a\"\\\u0001\b\f\t\u003cé\u003e\u2029""#
    );
}

#[test]
fn only_the_line_separators_among_three_byte_characters_are_escaped() {
    // 0xE2 starts U+2028/U+2029 and also these, which Go writes as they are.
    let mut out = Vec::new();
    push_str(&mut out, "€…\u{2028}x\u{2027}\u{202a}⁂\u{2029}");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "\"€…\\u2028x\u{2027}\u{202a}⁂\\u2029\""
    );
}

// -- streams and malformed input --------------------------------------------------------------

#[test]
fn an_incomplete_frame_is_left_for_the_next_read() {
    let cm = unknown("v1", "ConfigMap", &msg(&[(1, &msg(&[(1, b"a")]))]));
    let stream = framed(&[event("ADDED", &cm), event("MODIFIED", &cm)]);
    let first = stream.len() - (stream.len() - 4) / 2 - 2;
    for cut in [0, 3, first, stream.len() - 1] {
        let lines = decode_frames(&stream[..cut], Options::default(), 1 << 20);
        assert_eq!(lines.error, None);
        assert!(lines.used <= cut);
        let rest = decode_frames(&stream[lines.used..], Options::default(), 1 << 20);
        assert_eq!(lines.frames.len() + rest.frames.len(), 2, "cut at {cut}");
    }
}

fn error_of(stream: &[u8]) -> String {
    let lines = decode_frames(stream, Options::default(), 1 << 10);
    lines.error.expect("an error").0 .0
}

#[test]
fn malformed_frames_say_what_is_wrong() {
    let cm = |raw: &[u8]| framed(&[event("ADDED", &unknown("v1", "ConfigMap", raw))]);
    let named = msg(&[(1, &msg(&[(1, b"a")]))]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (framed(&[vec![0x0a, 0x85]]), "truncated"),
        (
            framed(&[vec![0x0a, 0x05, b'A']]),
            "truncated field in WatchEvent",
        ),
        (framed(&[vec![0x0b]]), "wire type 3 in WatchEvent"),
        (
            framed(&[msg(&[(1, b"ADDED")])]),
            "without a type or an object",
        ),
        (
            framed(&[event("ADDED", &named)]),
            "without the k8s magic prefix",
        ),
        (
            framed(&[event("ADDED", &unknown("apps/v1", "Deployment", b""))]),
            "apps/v1 Deployment is not decoded here",
        ),
        (
            cm(&msg(&[(1, &msg(&[(1, b"a"), (15, b"x")]))])),
            "unknown field 15 in ObjectMeta",
        ),
        (cm(&msg(&[(9, b"x")])), "unknown field 9 in ConfigMap"),
        (
            cm(&msg(&[(1, &msg(&[(1, b"a"), (8, &[0x08, 0xff])]))])),
            "truncated varint in Time",
        ),
        (
            cm(&msg(&[(
                1,
                &msg(&[(1, b"a"), (17, &msg(&[(7, &msg(&[(1, b"{nope")]))]))]),
            )])),
            "fieldsV1 is not JSON",
        ),
        (cm(&msg(&[(1, &msg(&[(3, b"ns")]))])), "metadata.name"),
        (framed(&[vec![0; 2000]]), "over 1024"),
    ];
    for (stream, want) in cases {
        let got = error_of(&stream);
        assert!(got.contains(want), "{got:?} does not say {want:?}");
    }
}

#[test]
fn the_frames_before_a_malformed_one_are_kept() {
    let good = event(
        "ADDED",
        &unknown("v1", "ConfigMap", &msg(&[(1, &msg(&[(1, b"a")]))])),
    );
    let stream = framed(&[good.clone(), b"\x0b".to_vec(), good]);
    let lines = decode_frames(&stream, Options::default(), 1 << 20);
    assert_eq!(lines.frames.len(), 1);
    assert_eq!(lines.error.unwrap().1, b"\x0b");
}

// -- one pass: the frame decoded without its JSON parsed -------------------------------------

/// The frame as the JSON decoder gives it from the JSON line the server would have sent.
fn through_json(frame: &[u8], options: Options<'_>) -> Result<Frame, Error> {
    crate::frames::decode_frame(&watch_line(frame)?, options)
}

fn option_sets() -> Vec<Options<'static>> {
    let strip = Options {
        strip_managed_fields: true,
        ..Options::default()
    };
    let replace = Options {
        identity: Some(("x.dev/v2", "Thing")),
        replace_identity: true,
        ..strip
    };
    let fill = Options {
        identity: Some(("x.dev/v2", "Thing")),
        ..Options::default()
    };
    vec![Options::default(), strip, replace, fill]
}

#[test]
fn every_frame_decodes_in_one_pass_to_what_its_json_line_decodes_to() {
    let full = event("MODIFIED", &unknown("v1", "ConfigMap", &full_configmap()));
    let mut frames: Vec<Vec<u8>> = vec![full];
    for pb in [CONFIGMAPS_PB, SECRETS_PB] {
        frames.extend(frames_of(pb).into_iter().map(<[u8]>::to_vec));
    }
    for options in option_sets() {
        for frame in &frames {
            let direct = watch_frame(frame, options).unwrap();
            assert_eq!(direct, through_json(frame, options).unwrap(), "{options:?}");
        }
    }
    // What the full ConfigMap's metadata holds, read from the message.
    let Frame::Object(etype, object) = watch_frame(&frames[0], Options::default()).unwrap() else {
        panic!("not an object")
    };
    assert_eq!(etype, "MODIFIED");
    let meta = &object.meta;
    assert_eq!(
        (
            meta.name.as_str(),
            meta.namespace.as_deref(),
            meta.uid.as_deref()
        ),
        ("web", Some("ns"), Some("u-1"))
    );
    assert_eq!(
        (meta.resource_version.as_deref(), meta.generation),
        (Some("42"), Some(3))
    );
    assert_eq!(
        meta.deletion_timestamp.as_deref(),
        Some("2000-02-29T00:00:00Z")
    );
    let labels = [("app", "web"), ("tier", "front")].map(|(k, v)| (k.into(), v.into()));
    assert_eq!(meta.labels, labels);
    assert_eq!(meta.controller_uid(), Some("o-1"));
}

#[test]
fn one_pass_metadata_edges_match_the_json_decoders() {
    let bookmark = |value: &[u8]| {
        let meta = msg(&[(6, b"77"), (12, &entry("k8s.io/initial-events-end", value))]);
        event("BOOKMARK", &unknown("v1", "ConfigMap", &msg(&[(1, &meta)])))
    };
    let mut zero_deletion = msg(&[(1, b"z"), (9, b"")]);
    varint_field(&mut zero_deletion, 7, 0);
    let owner = |controller: u64| {
        let mut o = msg(&[(1, b"K"), (3, b"n"), (4, b"o-2"), (5, b"v1")]);
        varint_field(&mut o, 6, controller);
        o
    };
    let frames = [
        bookmark(b"true"),
        bookmark(b"false"),
        event(
            "ADDED",
            &unknown("v1", "ConfigMap", &msg(&[(1, &zero_deletion)])),
        ),
        event(
            "ADDED",
            &unknown(
                "v1",
                "ConfigMap",
                &msg(&[(
                    1,
                    &msg(&[
                        (1, b"d"),
                        (11, &entry("a", b"1")),
                        (11, &entry("a", b"2")),
                        (13, &owner(0)),
                        (13, &owner(1)),
                    ]),
                )]),
            ),
        ),
        event(
            "DELETED",
            &unknown("v1", "Secret", &msg(&[(1, &msg(&[(1, b"s")]))])),
        ),
    ];
    for options in option_sets() {
        for frame in &frames {
            let direct = watch_frame(frame, options).unwrap();
            assert_eq!(direct, through_json(frame, options).unwrap());
        }
    }
    let end = |frame: &[u8]| match watch_frame(frame, Options::default()).unwrap() {
        Frame::Object(_, object) => object.meta.initial_events_end,
        Frame::Error(_) => panic!("not an object"),
    };
    assert!(end(&frames[0]));
    assert!(!end(&frames[1]));
}

#[test]
fn one_pass_refuses_what_the_json_decoder_refuses() {
    let nameless = event(
        "ADDED",
        &unknown("v1", "ConfigMap", &msg(&[(1, &msg(&[(3, b"ns")]))])),
    );
    let status_added = event("ADDED", &unknown("v1", "Status", &msg(&[(2, b"Failure")])));
    for (frame, want) in [
        (nameless, "metadata.name is missing"),
        (status_added, "a Status in a ADDED event"),
        (vec![0x0b], "malformed protobuf watch frame: wire type 3"),
    ] {
        let got = watch_frame(&frame, Options::default()).unwrap_err().0;
        assert!(got.contains(want), "{got:?} does not say {want:?}");
    }
}

#[test]
fn each_kept_object_holds_its_json_at_its_size() {
    // The cache keeps these bytes as long as the object lives: a buffer with room to spare
    // freed beside each one fragments the heap (RSS per cached object rose by a third).
    let full = event("ADDED", &unknown("v1", "ConfigMap", &full_configmap()));
    let mut stream = framed(&[full.clone(), full]);
    stream.extend_from_slice(CONFIGMAPS_PB);
    let lines = decode_frames(&stream, Options::default(), 1 << 20);
    assert_eq!(lines.error, None);
    assert_eq!(lines.frames.len(), 4);
    for frame in lines.frames {
        let Frame::Object(_, object) = frame else {
            panic!("not an object")
        };
        assert_eq!(object.json.capacity(), object.json.len());
    }
}
