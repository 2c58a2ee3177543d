use super::*;

const CM: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web","namespace":"default","uid":"u-1","resourceVersion":"42","generation":3,"labels":{"app":"web","tier":"front"},"annotations":{"a":"b"},"finalizers":["f"],"ownerReferences":[{"apiVersion":"x/v1","kind":"W","name":"w","uid":"o-1","controller":true}],"managedFields":[{"manager":"m","fieldsV1":{"f:data":{}}}]},"data":{"k":"v"}}"#;

fn frame(etype: &str, object: &str) -> String {
    format!(r#"{{"type":"{etype}","object":{object}}}"#)
}

fn plain() -> Options<'static> {
    Options::default()
}

fn strip() -> Options<'static> {
    Options {
        strip_managed_fields: true,
        ..Options::default()
    }
}

fn object_of(frame: Frame) -> (String, Object) {
    match frame {
        Frame::Object(t, o) => (t, *o),
        Frame::Error(_) => panic!("not an object frame"),
    }
}

fn reparsed(json: &[u8]) -> serde_json::Value {
    serde_json::from_slice(json).expect("the kept bytes are JSON")
}

#[test]
fn a_frame_gives_its_type_metadata_and_bytes() {
    let (etype, obj) = object_of(decode_frame(frame("MODIFIED", CM).as_bytes(), plain()).unwrap());
    assert_eq!(etype, "MODIFIED");
    let m = &obj.meta;
    assert_eq!(m.name, "web");
    assert_eq!(m.namespace.as_deref(), Some("default"));
    assert_eq!(m.uid.as_deref(), Some("u-1"));
    assert_eq!(m.resource_version.as_deref(), Some("42"));
    assert_eq!(m.generation, Some(3));
    assert_eq!(m.deletion_timestamp, None);
    assert_eq!(
        m.labels,
        vec![
            ("app".into(), "web".into()),
            ("tier".into(), "front".into())
        ]
    );
    assert_eq!(m.controller_uid(), Some("o-1"));
    assert_eq!(m.owners[0].kind, "W");
    assert_eq!(obj.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(obj.json, CM.as_bytes());
}

#[test]
fn managed_fields_are_cut_and_the_rest_kept() {
    let (_, obj) = object_of(decode_frame(frame("ADDED", CM).as_bytes(), strip()).unwrap());
    let mut want = reparsed(CM.as_bytes());
    want["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    assert_eq!(reparsed(&obj.json), want);
    // First member, only member, and whitespace around it.
    for (input, kept) in [
        (
            r#"{"metadata":{"managedFields":[1],"name":"a"}}"#,
            r#"{"metadata":{"name":"a"}}"#,
        ),
        (
            r#"{"metadata":{"name":"a","managedFields":[]}}"#,
            r#"{"metadata":{"name":"a"}}"#,
        ),
        (
            r#"{"metadata": { "name" : "a" ,  "managedFields" : [ {} ] } }"#,
            r#"{"metadata": { "name" : "a"  } }"#,
        ),
    ] {
        let obj = decode_object(input.as_bytes(), strip()).unwrap();
        assert_eq!(std::str::from_utf8(&obj.json).unwrap(), kept);
    }
    let only = decode_object(
        br#"{"metadata":{"managedFields":null}}"#,
        Options {
            strip_managed_fields: true,
            ..Options::default()
        },
    );
    // Unnamed objects are refused where a name is needed.
    assert!(only.is_err());
}

#[test]
fn list_items_get_their_identity_and_the_page_its_metadata() {
    let page = r#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"9","continue":"c"},"items":[{"metadata":{"name":"a"}},{}]}"#;
    let err = decode_list(page.as_bytes(), plain()).unwrap_err();
    assert_eq!(
        err.0,
        "malformed list response: an item's metadata is not an object"
    );
    let page = r#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"9","continue":"c","shardInfo":{}},"items":[{"metadata":{"name":"a"}},{"kind":"Other","metadata":{"name":"b"}}]}"#;
    let options = Options {
        identity: Some(("v1", "ConfigMap")),
        ..Options::default()
    };
    let list = decode_list(page.as_bytes(), options).unwrap();
    assert_eq!(list.kind.as_deref(), Some("ConfigMapList"));
    assert_eq!(list.continue_token.as_deref(), Some("c"));
    assert_eq!(list.resource_version.as_deref(), Some("9"));
    assert!(list.shard_info);
    let first = reparsed(&list.items[0].json);
    assert_eq!(first["apiVersion"], "v1");
    assert_eq!(first["kind"], "ConfigMap");
    let second = reparsed(&list.items[1].json);
    assert_eq!(second["kind"], "Other", "an item's own kind is kept");
    let empty = decode_list(br#"{"items":null,"metadata":{}}"#, plain()).unwrap();
    assert!(empty.items.is_empty());
}

#[test]
fn metadata_only_objects_get_the_resource_identity() {
    let input =
        r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a"}}"#;
    let options = Options {
        identity: Some(("apps/v1", "Deployment")),
        replace_identity: true,
        ..Options::default()
    };
    let obj = decode_object(input.as_bytes(), options).unwrap();
    assert_eq!(obj.kind.as_deref(), Some("PartialObjectMetadata"));
    let kept = reparsed(&obj.json);
    assert_eq!(kept["kind"], "Deployment");
    assert_eq!(kept["apiVersion"], "apps/v1");
}

#[test]
fn escaped_strings_are_decoded() {
    let input = r#"{"metadata":{"name":"a\u0062","labels":{"k\"":"v\n"}}}"#;
    let obj = decode_object(input.as_bytes(), plain()).unwrap();
    assert_eq!(obj.meta.name, "ab");
    assert_eq!(obj.meta.labels, vec![("k\"".into(), "v\n".into())]);
    assert_eq!(label_of(&obj.json, "k\""), Some("v\n".into()));
    assert_eq!(labels_of(&obj.json).len(), 1);
}

#[test]
fn bookmarks_need_no_name_and_errors_keep_their_status() {
    let bookmark = frame(
        "BOOKMARK",
        r#"{"kind":"ConfigMap","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}"#,
    );
    let (_, obj) = object_of(decode_frame(bookmark.as_bytes(), plain()).unwrap());
    assert!(obj.meta.initial_events_end);
    assert_eq!(obj.meta.resource_version.as_deref(), Some("7"));
    let error = frame("ERROR", r#"{"kind":"Status","code":410}"#);
    assert_eq!(
        decode_frame(error.as_bytes(), plain()).unwrap(),
        Frame::Error(br#"{"kind":"Status","code":410}"#.to_vec())
    );
}

#[test]
fn malformed_frames_name_the_problem() {
    let cases: &[(&str, &str)] = &[
        ("", "malformed watch line: EOF while parsing a value"),
        ("{\"type\":", "malformed watch line: EOF while parsing"),
        ("[1]", "malformed watch line: not a JSON object"),
        (
            "{\"type\":\"ADDED\"}",
            "type or object missing or of the wrong type",
        ),
        (
            "{\"type\":1,\"object\":{}}",
            "type or object missing or of the wrong type",
        ),
        (
            "{\"type\":\"ADDED\",\"object\":[]}",
            "type or object missing or of the wrong type",
        ),
        (
            r#"{"type":"ADDED","object":{}}"#,
            "the object's metadata is not an object",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":5}}}"#,
            "the object's metadata.name is missing or not a string",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":""}}}"#,
            "metadata.name is missing or not a string",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","namespace":1}}}"#,
            "metadata.namespace is not a string",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":7}}}"#,
            "metadata.resourceVersion is not a string",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","labels":{"k":1}}}}"#,
            "metadata.labels is not a map of strings",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","labels":[]}}}"#,
            "metadata.labels is not a map of strings",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","annotations":{"k":null}}}}"#,
            "metadata.annotations is not a map of strings",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","finalizers":[1]}}}"#,
            "metadata.finalizers is not a list of strings",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","ownerReferences":[{"uid":"u"}]}}}"#,
            "metadata.ownerReferences is not a list of owner references",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","ownerReferences":{}}}}"#,
            "metadata.ownerReferences is not a list of owner references",
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}} trailing"#,
            "malformed watch line: trailing characters",
        ),
        ("\u{0}\u{1}", "malformed watch line: expected value"),
    ];
    for (line, want) in cases {
        let err = decode_frame(line.as_bytes(), plain()).unwrap_err();
        assert!(
            err.0.contains(want),
            "{line:?}: got {:?}, want it to contain {want:?}",
            err.0
        );
    }
    // Invalid UTF-8 is an error, not a panic.
    let bad = b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"\xff\"}}}";
    assert!(decode_frame(bad, plain()).is_err());
}

#[test]
fn malformed_lists_name_the_problem() {
    for (page, want) in [
        ("[]", "malformed list response: not a JSON object"),
        (
            r#"{"items":{"a":1}}"#,
            "items or metadata of the wrong type",
        ),
        (r#"{"metadata":[1]}"#, "items or metadata of the wrong type"),
        (r#"{"items":{},"metadata":[]}"#, "EMPTY"),
        (
            r#"{"metadata":{"continue":5}}"#,
            "malformed list response: metadata.continue is not a string",
        ),
        (
            r#"{"items":[5]}"#,
            "malformed list response: an item's value is not an object",
        ),
        (
            r#"{"items":[{"metadata":{"name":"a","uid":3}}]}"#,
            "malformed list response: an item's metadata.uid is not a string",
        ),
    ] {
        if want == "EMPTY" {
            // Falsy items and metadata read as none, as Python's `or` did.
            assert!(decode_list(page.as_bytes(), plain())
                .unwrap()
                .items
                .is_empty());
            continue;
        }
        let err = decode_list(page.as_bytes(), plain()).unwrap_err();
        assert!(err.0.contains(want), "{page}: got {:?}", err.0);
    }
}

#[test]
fn controller_uid_is_the_first_truthy_controller() {
    let input = r#"{"metadata":{"name":"a","ownerReferences":[
        {"apiVersion":"v","kind":"K","name":"n","uid":"u1","controller":false},
        {"apiVersion":"v","kind":"K","name":"n","uid":"u2"},
        {"apiVersion":"v","kind":"K","name":"n","uid":"u3","controller":true},
        {"apiVersion":"v","kind":"K","name":"n","uid":"u4","controller":true}]}}"#;
    let obj = decode_object(input.as_bytes(), plain()).unwrap();
    assert_eq!(obj.meta.controller_uid(), Some("u3"));
    assert_eq!(obj.meta.owners.len(), 4);
}

#[test]
fn lenient_objects_need_only_a_name() {
    let input = r#"{"metadata":{"name":"a","uid":"u","ownerReferences":[{"uid":"f","controller":false},{"uid":"o","controller":true}],"labels":{"k":1}}}"#;
    assert!(decode_object(input.as_bytes(), plain()).is_err());
    let lenient = Options {
        lenient: true,
        ..Options::default()
    };
    let obj = decode_object(input.as_bytes(), lenient).unwrap();
    assert_eq!(obj.meta.uid.as_deref(), Some("u"));
    assert_eq!(obj.meta.controller_uid(), Some("o"));
    assert!(obj.meta.labels.is_empty());
    let unnamed = decode_object(br#"{"metadata":{}}"#, lenient).unwrap_err();
    assert!(unnamed.0.contains("metadata.name"), "{unnamed}");
}

#[test]
fn lines_are_decoded_up_to_the_last_newline_and_blank_ones_skipped() {
    let a = frame("ADDED", CM);
    let b = frame("MODIFIED", CM);
    let buffer = format!("{a}\n \r\n{b}\n{}", &a[..20]);
    let lines = decode_lines(buffer.as_bytes(), strip(), usize::MAX);
    let types: Vec<String> = lines.frames.into_iter().map(|f| object_of(f).0).collect();
    assert_eq!(types, ["ADDED", "MODIFIED"]);
    assert_eq!(lines.used, buffer.len() - 20);
    assert_eq!(lines.error, None);
}

#[test]
fn a_malformed_line_ends_the_lines_read_with_what_is_wrong_and_the_line() {
    let a = frame("ADDED", CM);
    let bad = r#"{"type":"ADDED","object":{"metadata":{}}}"#;
    let buffer = format!("{a}\n{bad}\n{a}\n");
    let lines = decode_lines(buffer.as_bytes(), plain(), usize::MAX);
    assert_eq!(lines.frames.len(), 1);
    let (error, line) = lines.error.expect("the second line is malformed");
    assert!(error.0.contains("metadata.name"), "{error}");
    assert_eq!(line, format!("{bad}\n").into_bytes());
}

#[test]
fn no_newline_reads_nothing() {
    let lines = decode_lines(frame("ADDED", CM).as_bytes(), plain(), usize::MAX);
    assert_eq!((lines.frames.len(), lines.used, lines.error), (0, 0, None));
}

#[test]
fn a_line_over_the_limit_is_an_error_even_when_complete() {
    let a = frame("ADDED", CM);
    let buffer = format!("{a}\n{a}\n");
    let lines = decode_lines(buffer.as_bytes(), plain(), a.len() + 1);
    assert_eq!(lines.frames.len(), 2);
    let lines = decode_lines(buffer.as_bytes(), plain(), a.len());
    assert_eq!(lines.frames.len(), 0);
    let (error, _) = lines.error.expect("the first line is too long");
    assert_eq!(error.0, format!("watch line longer than {} bytes", a.len()));
}
