//! One pass: a frame decoded to what its JSON line decodes to, without that parse.

use super::*;

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
