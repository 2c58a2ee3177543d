//! Streams cut short and malformed frames: what is kept and what is said.

use super::*;

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
