"""`ApiError` built from a failed response: a Status body in full, anything else cut short
(a proxy's HTML page must not fill a log line)."""

from __future__ import annotations

import orjson

from fastctl.kube._http import ApiError, error_from_response


def test_a_status_body_gives_its_reason_and_whole_message() -> None:
    message = "x" * 1000
    status = {"kind": "Status", "code": 409, "reason": "Conflict", "message": message}
    err = error_from_response(409, orjson.dumps(status), method="PUT", path="/p")
    assert (err.status, err.reason, err.message) == (409, "Conflict", message)
    assert err.body == status
    assert str(err) == f"PUT /p: 409 Conflict: {message}"


def test_any_other_body_is_cut_to_300_bytes_and_never_breaks_on_a_character() -> None:
    page = b"<html>" + "\u00e9".encode() * 1000 + b"</html>"  # 2-byte characters
    err = error_from_response(502, page, method="GET", path="/api")
    assert isinstance(err, ApiError)
    assert (err.status, err.reason, err.body) == (502, "Bad Gateway", None)
    assert err.message == page[:300].decode("utf-8", "replace").strip()
    assert len(err.message.encode()) <= 300 + 2  # a cut character becomes one U+FFFD
    assert str(err).startswith("GET /api: 502 Bad Gateway: <html>")


def test_an_empty_body_or_unknown_code_still_reads_well() -> None:
    err = error_from_response(599, b"", method="GET", path="/x")
    assert str(err) == "GET /x: 599 Error"
