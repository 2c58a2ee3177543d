"""The watcher's frame handling without a server: resourceVersion tracking, the streaming
list's end marker, errors and their classification."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.kube._http import ApiError, request
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._watcher import (
    INITIAL_EVENTS_END,
    Backoff,
    EventKind,
    ListFrame,
    ObjectEvent,
    WatchConfig,
    WatchStreamError,
    _Gone,
    _Listing,
    _State,
    _StreamingListUnsupported,
    _Watcher,
)
from fastctl.kube._wire import decode_watch_line
from fastctl.types import ObjectRef

CM = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)


def make(*, strip: bool = False) -> _Watcher:
    return _Watcher(
        ApiClient.__new__(ApiClient),  # never used: no request is made
        CM,
        "ns",
        WatchConfig(strip_managed_fields=strip),
        Backoff(),
        None,
    )


def obj(name: str, rv: str, **meta: Any) -> dict[str, Any]:
    return {"kind": "ConfigMap", "metadata": {"name": name, "resourceVersion": rv, **meta}}


def bookmark(rv: str, end: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return {"kind": "ConfigMap", "metadata": meta}


def test_streaming_list_frames() -> None:
    w = make()
    first = w._event("ADDED", obj("a", "5"))
    assert first is not None
    assert first.kind is EventKind.INIT_APPLY
    assert w.state.rv is None  # initial events carry no usable position
    done = w._event("BOOKMARK", bookmark("9", end=True))
    assert done is not None
    assert done.kind is EventKind.INIT_DONE
    assert w.state.rv == "9"


def test_servers_that_ignore_send_initial_events_are_detected() -> None:
    w = make()
    with pytest.raises(_StreamingListUnsupported):
        w._event("BOOKMARK", bookmark("9"))
    with pytest.raises(_StreamingListUnsupported):
        w._event("MODIFIED", obj("a", "5"))


def test_watch_frames_track_the_resource_version() -> None:
    w = make()
    w.state.rv = "10"
    added = w._event("ADDED", obj("a", "11"))
    assert added is not None
    assert added.kind is EventKind.APPLY
    assert w.state.rv == "11"
    assert w._event("BOOKMARK", bookmark("15")) is None
    assert w.state.rv == "15"
    deleted = w._event("DELETED", obj("a", "16"))
    assert deleted is not None
    assert deleted.kind is EventKind.DELETE
    assert w.state.rv == "16"
    assert w._event("SOMETHING", obj("a", "17")) is None


def test_error_frames() -> None:
    w = make()
    w.state.rv = "3"
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    with pytest.raises(_Gone, match="too old"):
        w._event("ERROR", gone)
    internal = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "boom"}
    with pytest.raises(ApiError) as info:
        w._event("ERROR", internal)
    assert info.value.status == 500
    assert str(info.value) == "WATCH /api/v1/namespaces/ns/configmaps: 500 InternalError: boom"


def test_strip_managed_fields() -> None:
    w = make(strip=True)
    w.state.rv = "1"
    event = w._event("MODIFIED", obj("a", "2", managedFields=[{"manager": "x"}]))
    assert isinstance(event, ObjectEvent)
    assert "managedFields" not in event.obj["metadata"]


async def test_unconfigured_client_is_a_clear_error() -> None:
    async with ApiClient(Configuration(host="")) as client:
        with pytest.raises(ValueError, match="no host"):
            await request(client, "GET", "/api")


def test_an_event_carries_an_object_exactly_when_its_kind_does() -> None:
    """`ObjectEvent` is the kinds with an object, `ListFrame` the list's frames: a kind on
    the wrong class, or an object event without its object, is refused when it is made."""
    assert ObjectEvent(EventKind.APPLY, {"metadata": {}}).obj == {"metadata": {}}
    assert ListFrame(EventKind.INIT_DONE).kind is EventKind.INIT_DONE
    for kind in (EventKind.INIT, EventKind.INIT_DONE):
        with pytest.raises(ValueError, match="INIT_APPLY, APPLY or DELETE"):
            ObjectEvent(kind, {})  # type: ignore[arg-type]
    for kind in (EventKind.INIT_APPLY, EventKind.APPLY, EventKind.DELETE):
        with pytest.raises(ValueError, match="INIT or INIT_DONE"):
            ListFrame(kind)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="carries a dict, not NoneType"):
            ObjectEvent(kind, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("streaming_list", "page_size", "listing", "fallback"),
    [
        (None, 500, _Listing.STREAMING, _Listing.PAGES),
        (True, 500, _Listing.STREAMING_ONLY, _Listing.PAGES),
        (False, 500, _Listing.PAGES, _Listing.PAGES),
        (None, 0, _Listing.STREAMING, _Listing.WHOLE),
        (False, 0, _Listing.WHOLE, _Listing.WHOLE),
    ],
)
def test_the_state_starts_from_the_config(
    streaming_list: bool | None, page_size: int, listing: _Listing, fallback: _Listing
) -> None:
    state = _State.start(WatchConfig(streaming_list=streaming_list, page_size=page_size))
    assert (state.listing, state.fallback, state.rv) == (listing, fallback, None)
    assert state.needs_list


def test_the_state_moves_only_by_its_transitions() -> None:
    """Every change of a watcher's state, in the order a watcher meets them."""
    state = _State.start(WatchConfig())
    assert state.verb() == "list+watch (streaming list)"
    assert state.streaming_refused()  # refused: paginated lists from now on
    assert (state.listing, state.verb()) == (_Listing.PAGES, "list")
    state.continue_expired()  # the next list in one piece ...
    assert state.listing is _Listing.WHOLE_ONCE
    state.listed("7")  # ... and pages again once it is complete
    assert (state.listing, state.rv, state.needs_list) == (_Listing.PAGES, "7", False)
    assert state.verb() == "watch"
    state.advanced("9")
    assert state.rv == "9"
    state.gone()
    assert state.needs_list  # rv is None again
    forced = _State.start(WatchConfig(streaming_list=True))
    assert not forced.streaming_refused()  # forced: no fallback, nothing changes
    assert forced.listing is _Listing.STREAMING_ONLY
    forced.without_streaming()  # sharded: only a list says whether the server sharded
    assert (forced.listing, forced.streams) == (_Listing.PAGES, False)


def test_an_end_marker_without_a_resource_version_is_a_stream_error() -> None:
    """The end of a streaming list is where the watch goes on: without a resourceVersion
    there is nowhere to go, so the connection is retried (the list starts over)."""
    w = make()
    with pytest.raises(WatchStreamError, match="has no resourceVersion"):
        w._event("BOOKMARK", {"metadata": {"annotations": {INITIAL_EVENTS_END: "true"}}})
    assert w.state.needs_list


def test_an_events_reference_and_metadata_view_are_made_once() -> None:
    """Every consumer of an event (the store, the triggers of each controller a shared
    watch feeds, the owner mapper) asks for its reference and its metadata: one of each
    per event, the same whoever asks; the view is the parsed object once there is one."""
    obj = {"metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "7"}}
    line = orjson.dumps({"type": "MODIFIED", "object": obj})
    _, item = decode_watch_line(line, strip_managed_fields=False)
    assert not isinstance(item, bytes)
    event = ObjectEvent._of_item(EventKind.APPLY, item)
    ref = event._ref()
    assert ref == ObjectRef("a", "ns")
    assert event._ref() is ref
    slim = event._slim()
    assert slim == {"metadata": obj["metadata"]}
    assert event._slim() is slim
    assert event._meta() is slim["metadata"]
    assert event.obj == obj
    assert event._slim() is event.obj  # parsed now: the object itself
    plain = ObjectEvent(EventKind.APPLY, obj)
    assert plain._ref() is plain._ref()
    assert plain._ref() == ref
