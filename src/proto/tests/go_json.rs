//! Hand-built messages written as Go's `encoding/json` writes them.

use super::*;

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
