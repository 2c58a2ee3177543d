"""The Event recorder without an API server: its requests are scripted. A repeated event
becomes a series on the first one; the memory of recent events is bounded by `cache_size`,
the oldest forgotten first."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.kube import _events
from fastctl.kube._events import Recorder


class _Server:
    """Creates Events with numbered names and accepts series PATCHes, noting each request."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.requests: list[tuple[str, str]] = []
        self._names = itertools.count()
        monkeypatch.setattr(_events, "request_json", self.request_json)

    async def request_json(self, client: ApiClient, method: str, path: str, **_: Any) -> Any:
        self.requests.append((method, path.rsplit("/", 1)[-1]))
        if method == "POST":
            return {"metadata": {"name": f"e{next(self._names)}"}}
        return {"metadata": {"name": path.rsplit("/", 1)[-1]}}


def _obj(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "uid": name}}


async def test_the_cache_is_bounded_and_forgets_the_oldest_event_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = _Server(monkeypatch)
    recorder = Recorder(cast(ApiClient, object()), "ctl", "pod", cache_size=2)
    for name in ("a", "b"):
        await recorder.publish(_obj(name), reason="Synced")
    await recorder.publish(_obj("a"), reason="Synced")  # remembered: a series
    assert server.requests[-1] == ("PATCH", "e0")
    await recorder.publish(_obj("c"), reason="Synced")  # the third: "a" is forgotten
    assert len(recorder._seen) == 2
    await recorder.publish(_obj("a"), reason="Synced")  # a new Event, not a series
    assert server.requests[-1] == ("POST", "events")
    await recorder.publish(_obj("c"), reason="Synced")  # still remembered
    assert server.requests[-1] == ("PATCH", "e2")


async def test_a_repeat_after_the_series_window_starts_a_new_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = _Server(monkeypatch)
    now = [1_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])  # the clock the recorder reads
    recorder = Recorder(cast(ApiClient, object()), "ctl", "pod")
    await recorder.publish(_obj("a"), reason="Synced")
    for _ in range(2):  # inside the window, which counts from the last occurrence
        now[0] += _events._SERIES_WINDOW - 0.001
        await recorder.publish(_obj("a"), reason="Synced")
        assert server.requests[-1] == ("PATCH", "e0")
    now[0] += _events._SERIES_WINDOW
    await recorder.publish(_obj("a"), reason="Synced")  # past it: a new Event
    assert [method for method, _ in server.requests] == ["POST", "PATCH", "PATCH", "POST"]


async def test_the_same_event_published_at_once_makes_one_event_and_its_series(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A few quick retries of one failing object publish before the first Event exists:
    they wait for it and fold into its series instead of creating one Event each."""
    server = _Server(monkeypatch)
    answered = server.request_json

    async def slow(client: ApiClient, method: str, path: str, **kw: Any) -> Any:
        await asyncio.sleep(0.01)  # the POST is still in flight when the others come
        return await answered(client, method, path, **kw)

    monkeypatch.setattr(_events, "request_json", slow)
    recorder = Recorder(cast(ApiClient, object()), "ctl", "pod")
    await asyncio.gather(*(recorder.publish(_obj("a"), reason="Failed") for _ in range(3)))
    assert server.requests == [("POST", "events"), ("PATCH", "e0"), ("PATCH", "e0")]
    assert recorder._turns == {}, "no lock is kept once its publishes are done"
