"""The watcher's fallbacks and retries (docs/kubernetes.md, "The watcher") against a
scripted API server, on a virtual clock: each request the watcher makes is answered by the
next step of the test's script, and the test checks the requests and the events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import sys
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from fastctl.errors import ApiError, WatchError
from fastctl.kube import _watcher
from fastctl.kube._resource import Resource
from fastctl.kube._watcher import (
    INITIAL_EVENTS_END,
    Backoff,
    MetadataOnlyUnsupported,
    ObjectEvent,
    WatchConfig,
    WatchEvent,
    watcher,
)
from fastctl.testing import run_virtual

from .test_controller_relist import client

CM = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
Query = dict[str, Any]


class _Content:
    def __init__(self, lines: list[bytes]) -> None:
        self._lines = list(lines)

    async def readany(self) -> bytes:
        await asyncio.sleep(0)
        return self._lines.pop(0) if self._lines else b""


class Response:
    """What `request` returns: a status, a body (a list) or the lines of a watch stream."""

    def __init__(self, status: int, body: Any = None, lines: list[bytes] | None = None) -> None:
        self.status = status
        self._body = orjson.dumps(body) if body is not None else b""
        self.content = _Content(lines or [])

    async def read(self) -> bytes:
        return self._body

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def obj(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


def page(names: list[str], *, cont: str | None = None, rv: int = 10) -> Response:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
    return Response(200, {"items": [obj(n, rv) for n in names], "metadata": meta})


def status(code: int, reason: str = "Failure") -> Response:
    return Response(code, {"kind": "Status", "code": code, "reason": reason, "message": reason})


def frame(etype: str, o: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": etype, "object": o}) + b"\n"


def end_of_initial_events(rv: int, *, annotated: bool = True) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if annotated:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return frame("BOOKMARK", {"metadata": meta})


def stream(*lines: bytes) -> Response:
    return Response(200, lines=list(lines))


class ScriptOver(Exception):
    """The script has nothing more to answer: the watcher does not retry this, it ends."""


class Server:
    """Answers the watcher's requests from `script(query)`, recording (time, query); when
    the script has nothing more to say (None), the run ends."""

    def __init__(self, script: Callable[[Query], Response | None]) -> None:
        self.script = script
        self.requests: list[tuple[float, Query]] = []

    async def request(self, client: Any, method: str, path: str, **kw: Any) -> Response:
        query = {k: v for k, v in kw["query"].items() if v is not None}
        self.requests.append((asyncio.get_running_loop().time(), query))
        answer = self.script(query)
        if answer is None:
            raise ScriptOver
        return answer

    def kinds(self) -> list[str]:
        """'stream' (streaming list), 'list' (with `limit`), 'list-whole', 'watch'."""
        out = []
        for _, q in self.requests:
            if q.get("sendInitialEvents"):
                out.append("stream")
            elif q.get("watch"):
                out.append("watch")
            else:
                out.append("list" if "limit" in q else "list-whole")
        return out


def run(
    server: Server,
    monkeypatch: pytest.MonkeyPatch,
    *,
    events: int = 1000,
    **options: Any,
) -> list[WatchEvent]:
    """Run a watcher against `server` until it has yielded `events` events or the script
    is over. `options` are the watcher's keywords and the fields of its `WatchConfig`."""
    fields = {field.name for field in dataclasses.fields(WatchConfig)}
    config = WatchConfig(**{k: v for k, v in options.items() if k in fields})
    options = {k: v for k, v in options.items() if k not in fields}
    monkeypatch.setattr(_watcher, "request", server.request)
    options.setdefault("backoff", Backoff(jitter=0.0))
    got: list[WatchEvent] = []

    async def main() -> None:
        gen = watcher(client(), CM, namespace="ns", config=config, **options)
        try:
            async for event in gen:
                got.append(event)
                if len(got) == events:
                    break
        except ScriptOver:
            pass
        await gen.aclose()  # type: ignore[attr-defined]

    run_virtual(main())
    return got


def framing(events: list[WatchEvent]) -> list[str]:
    return [
        f"{e.kind.name} {e.obj['metadata']['name']}" if isinstance(e, ObjectEvent) else e.kind.name
        for e in events
    ]


def test_an_expired_continue_token_restarts_the_list_in_one_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def script(q: Query) -> Response | None:
        if "continue" not in q and "limit" in q:
            return page(["a", "b"], cont="c1")
        if q.get("continue") == "c1":
            return status(410, "Expired")
        if "limit" not in q and not q.get("watch"):
            return page(["a", "b", "c"])
        return None

    server = Server(script)
    got = run(server, monkeypatch, events=8, streaming_list=False, page_size=2)
    assert framing(got) == [
        *("INIT", "INIT_APPLY a", "INIT_APPLY b"),
        *("INIT", "INIT_APPLY a", "INIT_APPLY b", "INIT_APPLY c", "INIT_DONE"),
    ]
    assert server.kinds() == ["list", "list", "list-whole"]
    assert server.requests[1][1]["continue"] == "c1"
    assert server.requests[1][0] == server.requests[2][0]  # at once: no backoff


def test_a_list_broken_half_way_starts_over_with_a_new_init(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = [True]

    def script(q: Query) -> Response | None:
        if q.get("watch"):
            return None
        if "continue" not in q:
            return page(["a", "b"], cont="c1")
        if broken.pop() if broken else False:
            return status(500, "InternalError")
        return page(["c"])

    server = Server(script)
    got = run(server, monkeypatch, events=8, streaming_list=False, page_size=2)
    assert framing(got) == [
        *("INIT", "INIT_APPLY a", "INIT_APPLY b"),
        *("INIT", "INIT_APPLY a", "INIT_APPLY b", "INIT_APPLY c", "INIT_DONE"),
    ]
    assert server.kinds() == ["list", "list", "list", "list"]
    assert "continue" not in server.requests[2][1]  # from the first page again
    assert server.requests[2][0] - server.requests[1][0] == 0.5  # after a backoff


@pytest.mark.parametrize(
    "refusal",
    [
        # Made anew for each run: a stream's lines are used up as they are read.
        lambda: status(400, "BadRequest"),
        lambda: stream(frame("ADDED", obj("a", 5)), end_of_initial_events(5, annotated=False)),
    ],
    ids=["4xx", "ignored"],
)
def test_a_forced_streaming_list_never_falls_back(
    monkeypatch: pytest.MonkeyPatch, refusal: Callable[[], Response]
) -> None:
    def script(q: Query) -> Response | None:
        if q.get("sendInitialEvents"):
            return refusal()
        return None if q.get("watch") else page(["a"])

    server = Server(script)
    with pytest.raises(WatchError, match="streaming list failed"):
        run(server, monkeypatch, events=10, streaming_list=True)
    assert server.kinds() == ["stream"]


@pytest.mark.parametrize("code", [403, 429])
def test_403_and_429_retry_the_streaming_list_and_never_fall_back(
    monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    refusals = [status(code), status(code)]
    errors: list[BaseException] = []

    def script(q: Query) -> Response | None:
        if q.get("sendInitialEvents"):
            if refusals:
                return refusals.pop()
            return stream(frame("ADDED", obj("a", 5)), end_of_initial_events(5))
        return None

    server = Server(script)
    got = run(server, monkeypatch, events=3, on_error=errors.append)
    assert framing(got) == ["INIT", "INIT_APPLY a", "INIT_DONE"]
    assert server.kinds() == ["stream", "stream", "stream"]
    assert [e.status for e in errors if isinstance(e, ApiError)] == [code, code]


@pytest.mark.parametrize(
    "first",
    [end_of_initial_events(5, annotated=False), frame("MODIFIED", obj("a", 5))],
    ids=["bookmark-without-annotation", "not-added"],
)
def test_a_server_that_ignores_send_initial_events_gets_paginated_lists_for_good(
    monkeypatch: pytest.MonkeyPatch, first: bytes
) -> None:
    watches = [stream(frame("ERROR", {"kind": "Status", "code": 410, "message": "gone"}))]
    streams = [1]

    def script(q: Query) -> Response | None:
        if q.get("sendInitialEvents"):
            if not streams:
                return None  # a second streaming attempt: the script ends the run
            streams.pop()
            return stream(frame("ADDED", obj("a", 4)), first)
        if q.get("watch"):
            return watches.pop() if watches else None
        return page(["a"])

    server = Server(script)
    got = run(server, monkeypatch, events=7)
    # the streaming attempt's INIT and object, then the list; after the 410, a list again
    assert framing(got) == [
        *("INIT", "INIT_APPLY a"),
        *("INIT", "INIT_APPLY a", "INIT_DONE"),
        *("INIT", "INIT_APPLY a"),
    ]
    assert server.kinds()[:4] == ["stream", "list", "watch", "list"]


def watch_gaps(answers: list[Response], monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds between a paginated watcher's watch requests (on the virtual clock)
    while the watches get `answers` in turn, then nothing."""

    def script(q: Query) -> Response | None:
        if q.get("watch") and not q.get("sendInitialEvents"):
            return answers.pop(0) if answers else None
        if q.get("sendInitialEvents"):
            return status(404)  # not supported: paginate
        return page(["a"])

    server = Server(script)
    run(server, monkeypatch)
    kinds = server.kinds()
    watches = [at for (at, _), kind in zip(server.requests, kinds, strict=True) if kind == "watch"]
    return [round(b - a, 9) for a, b in itertools.pairwise(watches)]


def test_errors_back_off_exponentially_and_an_accepted_watch_resets_the_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three failed watches wait 0.5, 1 and 2 s; the watch that delivers an event after
    them resets the backoff, so the next failure waits 0.5 s again. An empty watch that
    ends at once is a failure too: it waits, longer each time (no busy loop, and no
    fixed-rate reconnects against a server or proxy that keeps closing it)."""
    answers = [
        status(500),
        status(500),
        status(500),
        stream(frame("ADDED", obj("b", 11))),
        status(500),
        stream(),
        stream(),
    ]

    gaps = watch_gaps(answers, monkeypatch)
    assert gaps[:3] == [0.5, 1.0, 2.0]
    assert gaps[4] == 0.5  # the failure after an accepted watch: reset
    assert gaps[5:] == [1.0, 2.0]  # empty watches: never a busy loop, and backing off


def test_an_on_error_callback_that_raises_does_not_end_the_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failures = [status(500), status(503)]
    calls: list[BaseException] = []

    def on_error(exc: BaseException) -> None:
        calls.append(exc)
        raise RuntimeError("a broken metrics hook")

    def script(q: Query) -> Response | None:
        if q.get("sendInitialEvents"):
            return failures.pop() if failures else stream(end_of_initial_events(5))
        return None

    server = Server(script)
    got = run(server, monkeypatch, events=2, on_error=on_error)
    assert framing(got) == ["INIT", "INIT_DONE"]
    assert len(calls) == 2


def test_listed_objects_get_their_type_lose_managed_fields_and_pagination_resumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A paginated list's objects get the resource's apiVersion and kind and lose their
    managedFields; after a list restarted in one piece (an expired continue token), the
    next relist is paginated again, and the watch starts at the list's version."""
    item = {**obj("a", 10), "metadata": {**obj("a", 10)["metadata"], "managedFields": [{}]}}
    gone = Response(200, lines=[frame("ERROR", {"kind": "Status", "code": 410})])
    answers: list[Response] = [
        page(["x"], cont="c1"),
        status(410, "Expired"),
        Response(200, {"items": [item], "metadata": {"resourceVersion": "12"}}),
        gone,
        page(["b"], rv=15),
    ]

    def script(q: Query) -> Response | None:
        return answers.pop(0) if answers else None

    server = Server(script)
    got = run(
        server, monkeypatch, events=20, streaming_list=False, page_size=1, strip_managed_fields=True
    )
    objs = [e.obj for e in got if isinstance(e, ObjectEvent)]
    listed = [o for o in objs if o["metadata"]["name"] == "a"]
    assert listed == [
        {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "10"}}
        | {"apiVersion": "v1", "kind": "ConfigMap"}
    ]
    assert server.kinds() == ["list", "list", "list-whole", "watch", "list", "watch"]
    assert server.requests[3][1]["resourceVersion"] == "12"
    assert server.requests[4][1]["limit"] == 1
    assert server.requests[5][1]["resourceVersion"] == "15"


def test_without_a_page_size_every_list_is_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = Response(200, lines=[frame("ERROR", {"kind": "Status", "code": 410})])
    answers = [page(["a"]), gone, page(["a"])]
    server = Server(lambda q: answers.pop(0) if answers else None)
    run(server, monkeypatch, events=20, streaming_list=False, page_size=0)
    assert server.kinds() == ["list-whole", "watch", "list-whole", "watch"]


@pytest.mark.parametrize(
    ("streaming", "answers", "verb"),
    [
        (False, [status(403, "Forbidden")], "list"),
        (True, [status(403, "Forbidden")], "list+watch (streaming list)"),
        (False, [page(["a"]), status(403, "Forbidden")], "watch"),
    ],
    ids=["list", "streaming-list", "watch"],
)
def test_a_refusal_names_what_was_refused_and_the_rbac_to_check(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    streaming: bool,
    answers: list[Response],
    verb: str,
) -> None:
    script = list(answers)
    server = Server(lambda q: script.pop(0) if script else None)
    errors: list[BaseException] = []
    run(server, monkeypatch, events=20, streaming_list=streaming, on_error=errors.append)
    assert [type(e).__name__ for e in errors] == ["ApiError"]
    (line,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert line.getMessage() == (
        f"watcher[configmaps.v1/ns]: forbidden to {verb} configmaps.v1 in namespace 'ns' "
        "(check the controller's RBAC): Forbidden; retrying in 0.5 s"
    )


def test_a_failed_request_or_stream_is_logged_as_a_warning_with_what_failed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    answers = [status(500, "InternalError"), page(["a"]), Response(200, lines=[b"{not json\n"])]
    server = Server(lambda q: answers.pop(0) if answers else None)
    run(server, monkeypatch, events=20, streaming_list=False)
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert lines[0].startswith("watcher[configmaps.v1/ns]: list failed: ")
    assert lines[0].endswith("; retrying in 0.5 s")
    assert "InternalError" in lines[0]
    assert lines[1].startswith("watcher[configmaps.v1/ns]: watch failed: WatchStreamError: ")
    assert lines[1].endswith("; retrying in 0.5 s")  # the list's success reset the backoff


def metadata_page(kind: str, item_kind: str) -> Response:
    item = {**obj("a", 5), "kind": item_kind, "apiVersion": "meta.k8s.io/v1"}
    return Response(200, {"kind": kind, "items": [item], "metadata": {"resourceVersion": "5"}})


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (metadata_page("ConfigMapList", "ConfigMap"), "it answered with a 'ConfigMapList' list"),
        (
            metadata_page("PartialObjectMetadataList", "ConfigMap"),
            "it answered with a 'ConfigMap', not PartialObjectMetadata",
        ),
    ],
    ids=["full-list", "full-object"],
)
def test_a_server_that_answers_metadata_only_with_full_objects_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, answer: Response, message: str
) -> None:
    answers = [answer]
    server = Server(lambda q: answers.pop(0) if answers else None)
    with pytest.raises(MetadataOnlyUnsupported) as refused:
        run(server, monkeypatch, streaming_list=False, metadata_only=True)
    assert str(refused.value) == (
        "watcher[configmaps.v1/ns]: the API server does not serve configmaps.v1 as metadata "
        f"only (PartialObjectMetadata): {message}; watch it with full objects instead"
    )


def test_a_metadata_only_list_gives_its_objects_the_resources_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = [metadata_page("PartialObjectMetadataList", "PartialObjectMetadata")]
    server = Server(lambda q: answers.pop(0) if answers else None)
    got = run(server, monkeypatch, streaming_list=False, metadata_only=True)
    (listed,) = [e.obj for e in got if isinstance(e, ObjectEvent)]
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "ConfigMap")


def test_a_streaming_list_and_the_watches_after_it_ask_for_exactly_this(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = [
        stream(frame("ADDED", obj("a", 5)), end_of_initial_events(5)),
        stream(frame("MODIFIED", obj("a", 6))),
    ]
    server = Server(lambda q: answers.pop(0) if answers else None)
    run(server, monkeypatch, events=20, timeout_seconds=290)
    watch = {"watch": True, "allowWatchBookmarks": True, "timeoutSeconds": 290}
    assert [q for _, q in server.requests] == [
        {**watch, "sendInitialEvents": True, "resourceVersionMatch": "NotOlderThan"},
        {**watch, "resourceVersion": "5"},
        {**watch, "resourceVersion": "6"},  # resumed where the last event left off
    ]


def test_a_410_answer_to_a_watch_relists_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [page(["a"]), status(410, "Expired"), page(["b"], rv=20)]
    server = Server(lambda q: answers.pop(0) if answers else None)
    got = run(server, monkeypatch, events=20, streaming_list=False)
    assert framing(got)[-3:] == ["INIT", "INIT_APPLY b", "INIT_DONE"]
    assert server.kinds()[:3] == ["list", "watch", "list"]
    assert server.requests[2][0] == server.requests[1][0]  # no backoff: the version is gone


@pytest.mark.parametrize(
    ("resource", "shown"),
    [
        (CM, "b'{\"password\": no\\n'"),
        (Resource("v1", "Secret", plural="secrets", namespaced=True), "16 bytes"),
    ],
    ids=["configmap", "secret"],
)
def test_a_malformed_line_is_logged_with_its_text_except_for_secrets(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    resource: Resource,
    shown: str,
) -> None:
    answers = [page(["a"]), Response(200, lines=[b'{"password": no\n'])]
    server = Server(lambda q: answers.pop(0) if answers else None)
    monkeypatch.setattr(sys.modules[__name__], "CM", resource)
    run(server, monkeypatch, events=20, streaming_list=False)
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    kind = resource.plural
    assert line.startswith(f"watcher[{kind}.v1/ns]: malformed watch line: ")
    assert line.endswith(f": {shown}; resuming from resourceVersion 10")
    assert ("password" in line) == (kind == "configmaps")
