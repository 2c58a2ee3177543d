use super::*;

/// Feed `answer` in reads of `size` bytes; the reads' results, `More`s left out.
fn read_in(reader: &mut Reader, answer: &[u8], size: usize) -> Result<Vec<Read>, Error> {
    let mut out = Vec::new();
    for part in answer.chunks(size) {
        match reader.feed(part)? {
            Read::More => {}
            read => out.push(read),
        }
    }
    Ok(out)
}

/// The one answer `answer` gives, read whole and split at every size.
fn whole(answer: &[u8], no_body: bool) -> (Head, Vec<u8>) {
    let mut first = None;
    for size in 1..=answer.len() {
        let mut reader = Reader::default();
        reader.expect(no_body, false);
        let mut reads = read_in(&mut reader, answer, size).unwrap();
        assert_eq!(reads.len(), 1, "size {size}");
        assert_eq!(reader.phase(), Phase::Done, "size {size}");
        let Read::Answer(head, body) = reads.remove(0) else {
            panic!("not an answer at size {size}");
        };
        match &first {
            None => first = Some((head, body)),
            Some(seen) => assert_eq!(seen, &(head, body), "size {size}"),
        }
    }
    first.unwrap()
}

#[test]
fn a_length_body_read_whole_however_split() {
    let answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCONTENT-length: 7\r\nX-Note: content-length: 1\r\n\r\n{\"a\":1}";
    let (head, body) = whole(answer, false);
    assert_eq!(head.status, 200);
    assert_eq!(head.reason, b"OK");
    assert_eq!(
        head.lines,
        b"Content-Type: application/json\r\nCONTENT-length: 7\r\nX-Note: content-length: 1"
    );
    assert!(head.keep_alive);
    assert_eq!(head.framing, Framing::Length(7));
    assert_eq!(body, b"{\"a\":1}");
}

#[test]
fn a_chunked_body_with_extensions_and_trailers() {
    let answer = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: Chunked\r\n\r\n3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";
    let (head, body) = whole(answer, false);
    assert_eq!((head.status, head.framing), (201, Framing::Chunked));
    assert_eq!(body, b"abc0123456789");
    assert!(head.keep_alive);
}

#[test]
fn no_body_for_204_304_and_head_whatever_the_length_says() {
    for (answer, no_body) in [
        (&b"HTTP/1.1 204 No Content\r\nDate: x\r\n\r\n"[..], false),
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 40\r\n\r\n",
            false,
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n", true),
    ] {
        let (head, body) = whole(answer, no_body);
        assert!(body.is_empty());
        assert!(head.keep_alive, "{:?}", String::from_utf8_lossy(answer));
    }
}

#[test]
fn bytes_after_the_answer_make_it_not_reusable() {
    for answer in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokX"[..],
        b"HTTP/1.1 204 No Content\r\n\r\nX",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nX",
    ] {
        let mut reader = Reader::default();
        reader.expect(false, false);
        let Ok(Read::Answer(head, _)) = reader.feed(answer) else {
            panic!("no answer");
        };
        assert!(!head.keep_alive, "{:?}", String::from_utf8_lossy(answer));
    }
}

#[test]
fn close_and_http_1_0_are_not_kept_unless_asked() {
    let cases: [(&[u8], bool); 4] = [
        (
            b"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n",
            false,
        ),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            true,
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true),
    ];
    for (answer, kept) in cases {
        let (head, _) = whole(answer, false);
        assert_eq!(
            head.keep_alive,
            kept,
            "{:?}",
            String::from_utf8_lossy(answer)
        );
    }
}

#[test]
fn a_body_without_length_ends_with_the_connection_after_a_1xx() {
    let mut reader = Reader::default();
    reader.expect(false, false);
    let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\npart one, ";
    assert_eq!(read_in(&mut reader, answer, 5).unwrap(), vec![]);
    assert_eq!(reader.phase(), Phase::UntilClose);
    assert_eq!(reader.feed(b"part two").unwrap(), Read::More);
    let Some(Read::Answer(head, body)) = reader.close() else {
        panic!("no answer at the close");
    };
    assert_eq!((head.status, head.keep_alive), (200, false));
    assert_eq!(body, b"part one, part two");
    assert_eq!(reader.phase(), Phase::Done);
    assert_eq!(reader.close(), None);
}

#[test]
fn an_answer_cut_short_is_not_complete_at_the_close() {
    let mut reader = Reader::default();
    reader.expect(false, false);
    assert_eq!(
        reader
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc")
            .unwrap(),
        Read::More
    );
    assert_eq!(reader.phase(), Phase::Length);
    assert_eq!(reader.close(), None);
}

#[test]
fn a_watch_200_is_given_at_its_head_with_the_body_read_so_far() {
    let mut reader = Reader::default();
    reader.expect(false, true);
    let read = reader
        .feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}\n")
        .unwrap();
    let Read::Stream(head, rest) = read else {
        panic!("not a stream: {read:?}");
    };
    assert_eq!(head.framing, Framing::Chunked);
    assert_eq!(rest, b"5\r\n{}\n");
    assert_eq!(reader.phase(), Phase::Done);
    // anything else than a 200 is read whole
    reader.expect(false, true);
    let (status, body) = match reader
        .feed(b"HTTP/1.1 410 Gone\r\nContent-Length: 2\r\n\r\n{}")
        .unwrap()
    {
        Read::Answer(head, body) => (head.status, body),
        read => panic!("not an answer: {read:?}"),
    };
    assert_eq!((status, &body[..]), (410, &b"{}"[..]));
}

#[test]
fn the_content_encoding_is_given_lowered() {
    let (head, body) = whole(
        b"HTTP/1.1 200 OK\r\nContent-Encoding:  GZip \r\nContent-Length: 3\r\n\r\nxyz",
        false,
    );
    assert_eq!((&head.encoding[..], &body[..]), (&b"gzip"[..], &b"xyz"[..]));
}

#[test]
fn a_reader_serves_answer_after_answer() {
    let mut reader = Reader::default();
    for n in 0..3 {
        reader.expect(false, false);
        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{n}");
        let reads = read_in(&mut reader, answer.as_bytes(), 7).unwrap();
        assert_eq!(reads.len(), 1);
    }
}

#[test]
fn malformed_answers_say_what_is_wrong() {
    let cases: [(&[u8], &str); 7] = [
        (
            b"HTTP/2 200 OK\r\n\r\n",
            "bad status line \"HTTP/2 200 OK\"",
        ),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "bad status line"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n",
            "negative Content-Length",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3a\r\n\r\n",
            "bad Content-Length \" 3a\"",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "bad chunk size line \"zz\"",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc",
            "a chunk does not end with CRLF",
        ),
        (b"garbage\r\n\r\n", "bad status line \"garbage\""),
    ];
    for (answer, message) in cases {
        let mut reader = Reader::default();
        reader.expect(false, false);
        let error = read_in(&mut reader, answer, 3).unwrap_err();
        assert!(error.0.starts_with(message), "{:?}: {}", message, error.0);
    }
    let mut reader = Reader::default();
    reader.expect(false, false);
    let long = vec![b'x'; MAX_HEAD + 1];
    assert_eq!(
        reader.feed(&long).unwrap_err().0,
        "the answer's head is too long"
    );
    let mut reader = Reader::default();
    assert!(reader.feed(b"HTTP/1.1 200 OK\r\n\r\n").is_err()); // nothing awaited
}
