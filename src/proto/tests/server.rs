//! The streams the API server sent, as protobuf and as JSON: the same lines.

use super::*;

// -- what the API server sent ----------------------------------------------------------------

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
