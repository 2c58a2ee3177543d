"""Fuzzed watch streams and list pages: whatever the server (or a proxy in front of it)
sends, the watcher yields well-formed events, retries, or stops with a clear fatal
`ApiError`; it never crashes and never hangs, and the Store it feeds never crashes either.

Frames and pages are mostly right and wrong in one place (`fuzzing.shaped`), plus
truncated lines, bytes that are not JSON and lines longer than the watcher's limit.
"""

from __future__ import annotations

import asyncio
from unittest import mock

import aiohttp
import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient

from fastctl.errors import ApiError, WatchStreamError
from fastctl.kube import _watcher
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._store import Store
from fastctl.kube._watcher import (
    _FATAL_STATUS,
    INITIAL_EVENTS_END,
    Backoff,
    EventKind,
    ListFrame,
    ObjectEvent,
    WatchConfig,
    WatchEvent,
    _Watcher,
)

from .fuzzing import JSON, fuzz_settings, shaped
from .test_watcher_fallbacks import Response

CM = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
MAX_LINE = 4096  # the watcher's line limit, made small so that "huge" is cheap

NAMES = st.text("abc-", min_size=1, max_size=4)
OBJECT = shaped(
    {
        "apiVersion": st.just("v1"),
        "kind": st.just("ConfigMap"),
        "metadata": {
            "name": NAMES,
            "namespace": st.just("ns"),
            "uid": st.sampled_from(["u1", "u2"]),
            "resourceVersion": st.integers(1, 99).map(str),
            "labels": st.dictionaries(st.sampled_from(["app", "tier"]), NAMES, max_size=2),
            "annotations": st.just({INITIAL_EVENTS_END: "true"}),
            "ownerReferences": st.lists(
                st.fixed_dictionaries(
                    {
                        "apiVersion": st.just("v1"),
                        "kind": st.just("ConfigMap"),
                        "name": NAMES,
                        "uid": st.just("o1"),
                        "controller": st.booleans(),
                    }
                ),
                max_size=2,
            ),
            "managedFields": st.just([{"manager": "m"}]),
        },
        "data": JSON,
    }
)
STATUS = shaped(
    {
        "kind": st.just("Status"),
        "code": st.sampled_from([410, 500, 422, 429, 403]),
        "reason": st.text(max_size=8),
        "message": st.text(max_size=20),
        "details": {"retryAfterSeconds": st.integers(-1, 3)},
    }
)
FRAME = shaped(
    {"type": st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "X"]), "object": OBJECT}
) | shaped({"type": st.just("ERROR"), "object": STATUS})


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    """One line of a watch stream: a frame, or a broken one."""
    line = orjson.dumps(draw(FRAME)) + b"\n"
    damage = draw(st.sampled_from(["none"] * 6 + ["cut", "bytes", "huge", "blank"]))
    if damage == "cut":
        return line[: draw(st.integers(0, len(line) - 1))]
    if damage == "bytes":
        return draw(st.binary(max_size=40)) + b"\n"
    if damage == "huge":
        return b'{"type":"ADDED","object":{"x":"' + b"x" * MAX_LINE + b'"}}\n'
    if damage == "blank":
        return b"  \n"
    return line


PAGE = shaped(
    {
        "kind": st.just("ConfigMapList"),
        "metadata": {
            "resourceVersion": st.integers(1, 99).map(str),
            "continue": st.sampled_from(["", "token-2"]) | JSON,
        },
        "items": st.lists(OBJECT, max_size=4),
    }
)


class StreamResponse(Response):
    """A scripted response whose body is raw bytes, also served as a real aiohttp stream
    (so line limits and truncation behave as on a socket)."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self._body = body
        protocol = mock.Mock(_reading_paused=False)
        stream = aiohttp.StreamReader(protocol, 2**16, loop=asyncio.get_running_loop())
        stream.feed_data(body)
        stream.feed_eof()
        self.content = stream  # type: ignore[assignment]


class Done(Exception):
    """Every scripted response was served."""


def drive(mode: str, answers: list[tuple[int, bytes]]) -> list[WatchEvent]:
    """Run one watcher over `answers` (one per request) into a Store; return the events.
    Fails on anything it raises but a fatal `ApiError`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_watcher, "_MAX_LINE", MAX_LINE)
        return asyncio.run(_drive(mode, answers))


async def _drive(mode: str, answers: list[tuple[int, bytes]]) -> list[WatchEvent]:
    watcher = _Watcher(
        mock.Mock(spec=ApiClient),
        CM,
        "ns",
        WatchConfig(strip_managed_fields=True, streaming_list=False if mode == "list" else None),
        Backoff(initial=0.0, jitter=0.0),
        None,
    )
    if mode == "watch":
        watcher.state.rv = "1"
    pending = list(answers)

    async def get(query: object) -> StreamResponse:
        if not pending:
            raise Done
        return StreamResponse(*pending.pop(0))

    retried: list[BaseException] = []

    async def retry(exc: BaseException, *, retry_after: float | None = None) -> None:
        assert isinstance(exc, ApiError | WatchStreamError), exc
        retried.append(exc)

    watcher._get = get  # type: ignore[method-assign,assignment]
    watcher._retry = retry  # type: ignore[method-assign]
    store = Store()
    store.with_label("app", "a")  # index labels, so label changes exercise the index
    events: list[WatchEvent] = []
    try:
        async with asyncio.timeout(30):  # a hang guard, not a timing assertion
            async for event in watcher.run():
                # The kind says which class: a frame has no object, the rest always one.
                frame = event.kind in (EventKind.INIT, EventKind.INIT_DONE)
                assert isinstance(event, ListFrame if frame else ObjectEvent), event
                store.apply(event)
                store.owned_by("o1")
                events.append(event)
    except Done:
        pass
    except ApiError as exc:  # fatal: the request itself is wrong, retrying cannot help
        fatal = exc.status
        assert_fatal(fatal)
    return events


def assert_fatal(status: int) -> None:
    assert status in _FATAL_STATUS, f"status {status} ended the watcher"


def watch_body(frames: list[bytes]) -> bytes:
    return b"".join(frames)


ANSWER_STATUS = st.sampled_from([200] * 5 + [410, 500, 403, 422, 429])


@fuzz_settings(150)
@given(
    mode=st.sampled_from(["watch", "stream"]),
    answers=st.lists(
        st.tuples(ANSWER_STATUS, st.lists(lines(), max_size=6).map(watch_body)),
        min_size=1,
        max_size=3,
    ),
)
@example(
    mode="stream",
    answers=[
        (
            200,
            b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"2"}}}\n'
            b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"3","annotations":'
            b'{"k8s.io/initial-events-end":"true"}}}}\n'
            b'{"type":"MODIFIED","object":{"metadata":{"name":"a","labels":{"app":"a"}}}}\n',
        )
    ],
)
@example(mode="watch", answers=[(200, b'{"type":"ADDED","object":{"metadata":null}}\n')])
@example(mode="watch", answers=[(200, b'{"type":"ADDED","object":{"metadata":{}}}\n')])
@example(mode="watch", answers=[(200, b'{"type":"ERROR","object":{"details":[1]}}\n')])
@example(
    mode="stream",
    answers=[(200, b'{"type":"BOOKMARK","object":{"metadata":{"annotations":[]}}}\n')],
)
@example(mode="watch", answers=[(200, b'{"type":"ADDED","object":{"x":"' + b"x" * 5000 + b'"}}\n')])
def test_fuzzed_watch_streams(mode: str, answers: list[tuple[int, bytes]]) -> None:
    drive(mode, answers)


@fuzz_settings(150)
@given(
    answers=st.lists(
        st.tuples(ANSWER_STATUS, st.one_of(PAGE.map(orjson.dumps), st.binary(max_size=30))),
        min_size=1,
        max_size=3,
    )
)
@example(answers=[(200, b'{"items":[{"metadata":null}],"metadata":{"resourceVersion":"1"}}')])
@example(answers=[(200, b'{"items":[],"metadata":{"continue":7}}')])
@example(answers=[(200, b'{"items":[],"metadata":{"resourceVersion":7}}')])
@example(answers=[(200, b"[1]")])
def test_fuzzed_list_pages(answers: list[tuple[int, bytes]]) -> None:
    events = drive("list", answers)
    # Every list the watcher completes is framed INIT ... INIT_DONE.
    kinds = [event.kind for event in events]
    assert kinds.count(EventKind.INIT_DONE) <= kinds.count(EventKind.INIT)


@pytest.mark.parametrize(
    ("meta", "problem"),
    [
        ({"name": "a", "finalizers": ["x", 1]}, "metadata.finalizers is not a list of strings"),
        ({"name": "a", "labels": {"k": 1}}, "metadata.labels is not a map of strings"),
        ({"name": "a", "ownerReferences": [{"kind": "K"}]}, "metadata.ownerReferences"),
        ({"name": ""}, "metadata.name is missing"),
        ({"name": "a", "uid": 5}, "metadata.uid is not a string"),
    ],
)
def test_metadata_problem_fast_path_rejects_what_the_full_check_names(
    meta: dict[str, object], problem: str
) -> None:
    from fastctl.kube._wire import metadata_problem

    found = metadata_problem({"metadata": meta})
    assert found is not None
    assert found.startswith(problem)
    assert metadata_problem({"metadata": {"name": "a", "labels": {"k": "v"}}}) is None
