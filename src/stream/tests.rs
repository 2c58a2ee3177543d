use super::*;
use crate::frames::Frame;

const CM: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web","namespace":"default","resourceVersion":"42"},"data":{"k":"v"}}"#;
const CONFIGMAPS_PB: &[u8] = include_bytes!("../proto/testdata/configmaps.pb");
const CONFIGMAPS_JSON: &[u8] = include_bytes!("../proto/testdata/configmaps.json");

fn line(etype: &str, rv: u32) -> String {
    let object = CM.replace(r#""42""#, &format!(r#""{rv}""#));
    format!("{{\"type\":\"{etype}\",\"object\":{object}}}\n")
}

/// `body` in chunked coding, cut into chunks of `size` bytes, with the last chunk and a
/// trailer.
fn chunked(body: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for part in body.chunks(size) {
        out.extend_from_slice(format!("{:x};ext=1\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    out
}

fn versions(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .map(|f| match f {
            Frame::Object(_, o) => o.meta.resource_version.clone().unwrap_or_default(),
            Frame::Error(_) => "ERROR".into(),
        })
        .collect()
}

/// Feed `wire` in reads cut at `cuts`; the frames' resourceVersions and whether it ended.
fn feed_cut(body: &mut WatchBody, wire: &[u8], cuts: &[usize]) -> (Vec<String>, bool) {
    let mut got = Vec::new();
    let mut start = 0;
    let mut done = false;
    for &end in cuts.iter().chain([wire.len()].iter()) {
        let fed = body.feed(&wire[start..end], Options::default()).unwrap();
        assert_eq!(fed.lines.error, None);
        got.extend(versions(&fed.lines.frames));
        done = fed.done;
        start = end;
    }
    (got, done)
}

fn three_lines() -> String {
    format!(
        "{}\n{}{}",
        line("ADDED", 1),
        line("MODIFIED", 2),
        line("DELETED", 3)
    )
}

#[test]
fn a_chunked_stream_cut_anywhere_gives_the_same_frames() {
    let text = three_lines();
    for size in [1, 7, 50, text.len()] {
        let wire = chunked(text.as_bytes(), size);
        for cut in 0..=wire.len() {
            let mut body = WatchBody::new(Framing::Chunked, false, 1 << 20);
            let (got, done) = feed_cut(&mut body, &wire, &[cut]);
            assert_eq!(got, ["1", "2", "3"], "chunks of {size}, cut at {cut}");
            assert!(done && !body.overrun && body.pending() == 0);
        }
    }
}

#[test]
fn a_chunked_stream_read_a_byte_at_a_time_gives_the_same_frames() {
    let text = three_lines();
    let wire = chunked(text.as_bytes(), 13);
    let mut body = WatchBody::new(Framing::Chunked, false, 1 << 20);
    let cuts: Vec<usize> = (1..wire.len()).collect();
    let (got, done) = feed_cut(&mut body, &wire, &cuts);
    assert_eq!(got, ["1", "2", "3"]);
    assert!(done);
}

#[test]
fn a_line_is_decoded_once_its_last_chunk_arrives() {
    let first = line("ADDED", 1);
    let wire = chunked(first.as_bytes(), 40);
    let mut body = WatchBody::new(Framing::Chunked, false, 1 << 20);
    let half = wire.len() / 2;
    let fed = body.feed(&wire[..half], Options::default()).unwrap();
    assert!(fed.lines.frames.is_empty() && !fed.done);
    assert!(body.pending() > 0, "the line's start is kept");
    let fed = body.feed(&wire[half..], Options::default()).unwrap();
    assert_eq!(versions(&fed.lines.frames), ["1"]);
}

#[test]
fn an_unfinished_chunked_stream_is_not_done_and_keeps_its_partial_line() {
    let text = three_lines();
    let wire = chunked(text.as_bytes(), 100);
    let cut = wire.len() - 30; // inside the last line's data
    let mut body = WatchBody::new(Framing::Chunked, false, 1 << 20);
    let (got, done) = feed_cut(&mut body, &wire[..cut], &[]);
    assert!(!done);
    assert_eq!(got, ["1", "2"]);
    assert!(body.pending() > 0);
}

#[test]
fn a_length_body_ends_at_its_length_and_notices_bytes_after_it() {
    let text = three_lines();
    let mut wire = text.clone().into_bytes();
    wire.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    let mut body = WatchBody::new(Framing::Length(text.len()), false, 1 << 20);
    let (got, done) = feed_cut(&mut body, &wire, &[5, 200]);
    assert_eq!(got, ["1", "2", "3"]);
    assert!(done && body.overrun);
}

#[test]
fn a_body_until_close_is_never_done_by_itself() {
    let text = three_lines();
    let mut body = WatchBody::new(Framing::UntilClose, false, 1 << 20);
    let (got, done) = feed_cut(&mut body, text.as_bytes(), &[3, 150]);
    assert_eq!(got, ["1", "2", "3"]);
    assert!(!done && !body.overrun);
}

#[test]
fn bytes_after_the_last_chunk_are_an_overrun() {
    let mut wire = chunked(line("ADDED", 1).as_bytes(), 1000);
    wire.extend_from_slice(b"5\r\nhello\r\n");
    let mut body = WatchBody::new(Framing::Chunked, false, 1 << 20);
    let (got, done) = feed_cut(&mut body, &wire, &[]);
    assert_eq!(got, ["1"]);
    assert!(done && body.overrun);
}

#[test]
fn a_bad_chunk_size_or_end_is_an_error() {
    for wire in [
        &b"zz\r\nhello\r\n"[..],
        b"\r\nhello\r\n",
        b"5\r\nhelloXX",
        b"5\r\nhello\rX",
        b"ffffffffffffffffff\r\n",
    ] {
        let mut body = WatchBody::new(Framing::Chunked, false, 1 << 20);
        let error = body.feed(wire, Options::default()).unwrap_err();
        assert!(error.0.contains("chunk"), "{error} for {wire:?}");
    }
    let mut body = WatchBody::new(Framing::Chunked, false, 1 << 20);
    let error = body.feed(&[b'1'; MAX_CONTROL_LINE + 1], Options::default());
    assert!(error.unwrap_err().0.contains("too long"));
}

#[test]
fn a_malformed_line_ends_the_frames_of_a_read() {
    let text = format!("{}{{\"type\":1}}\n{}", line("ADDED", 1), line("ADDED", 2));
    let wire = chunked(text.as_bytes(), 1000);
    let mut body = WatchBody::new(Framing::Chunked, false, 1 << 20);
    let fed = body.feed(&wire, Options::default()).unwrap();
    assert_eq!(versions(&fed.lines.frames), ["1"]);
    let (error, bad) = fed.lines.error.expect("the second line is malformed");
    assert!(error.0.contains("malformed watch line"), "{error}");
    assert_eq!(bad, b"{\"type\":1}\n");
}

#[test]
fn a_line_longer_than_the_limit_is_an_error_before_its_end_arrives() {
    let first = line("ADDED", 1);
    let mut body = WatchBody::new(Framing::UntilClose, false, 20);
    let fed = body
        .feed(&first.as_bytes()[..30], Options::default())
        .unwrap();
    let (error, _) = fed.lines.error.expect("too long");
    assert_eq!(error.0, "watch line longer than 20 bytes");
    let mut body = WatchBody::new(Framing::UntilClose, false, 30);
    let fed = body
        .feed(&first.as_bytes()[..30], Options::default())
        .unwrap();
    assert_eq!(
        fed.lines.error, None,
        "exactly the limit, and no newline yet"
    );
}

#[test]
fn a_protobuf_stream_in_chunks_gives_the_frames_of_its_json() {
    let expected = frames::decode_lines(CONFIGMAPS_JSON, Options::default(), 1 << 20).frames;
    let wire = chunked(CONFIGMAPS_PB, 37);
    for cut in (0..wire.len()).step_by(11) {
        let mut body = WatchBody::new(Framing::Chunked, true, 1 << 20);
        let mut got = Vec::new();
        for part in [&wire[..cut], &wire[cut..]] {
            let fed = body.feed(part, Options::default()).unwrap();
            assert_eq!(fed.lines.error, None);
            got.extend(fed.lines.frames);
        }
        assert_eq!(got, expected, "cut at {cut}");
        assert!(body.done && body.pending() == 0);
    }
}

#[test]
fn a_protobuf_frame_over_the_limit_is_an_error_from_its_header() {
    let mut body = WatchBody::new(Framing::UntilClose, true, 100);
    let fed = body.feed(&[0, 0, 1, 0, 1, 2], Options::default()).unwrap();
    let (error, _) = fed.lines.error.expect("too long");
    assert!(error.0.contains("over 100"), "{error}");
}
