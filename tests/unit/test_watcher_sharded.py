"""The watcher with a shard selector, against the scripted server of
`test_watcher_fallbacks`: the selector goes on every request, and the client-side filter
applies exactly when the list response does not echo ``metadata.shardInfo``."""

from __future__ import annotations

from typing import Any

import pytest

from .test_watcher_fallbacks import Query, Response, Server, frame, framing, obj, run, stream

SELECTOR = "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')"


def keep(o: dict[str, Any]) -> bool:
    """The stand-in client-side filter: this shard holds ``a`` and ``c``."""
    return bool(o["metadata"]["name"] in {"a", "c"})


def script(sharded: bool) -> Server:
    def answer(q: Query) -> Response | None:
        if q.get("watch"):
            if q.get("resourceVersion") != "10":
                return None
            return stream(frame("ADDED", obj("b", 11)), frame("MODIFIED", obj("c", 12)))
        meta: dict[str, Any] = {"resourceVersion": "10"}
        if sharded:
            meta["shardInfo"] = {"selector": q["shardSelector"]}
        # A sharding server returns only its shard; one that ignores the selector, all.
        names = ["a", "c"] if sharded else ["a", "b", "c"]
        return Response(200, {"items": [obj(n, 10) for n in names], "metadata": meta})

    return Server(answer)


@pytest.mark.parametrize("sharded", [True, False], ids=["server-shards", "client-filters"])
def test_both_paths_give_the_same_events(monkeypatch: pytest.MonkeyPatch, sharded: bool) -> None:
    server = script(sharded)
    got = run(server, monkeypatch, shard_selector=SELECTOR, shard_filter=keep)
    expected = ["INIT", "INIT_APPLY a", "INIT_APPLY c", "INIT_DONE", "APPLY c"]
    if sharded:  # the server sharded the list, so it shards the watch: nothing dropped
        expected.insert(4, "APPLY b")
    assert framing(got) == expected
    assert server.requests
    assert all(q.get("shardSelector") == SELECTOR for _, q in server.requests)
    assert not any(q.get("sendInitialEvents") for _, q in server.requests)


def test_an_empty_selector_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="empty"):
        run(script(True), monkeypatch, shard_selector="", shard_filter=keep)
