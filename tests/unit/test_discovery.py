"""`Discovery` without an API server: its GETs are scripted. It caches what it found, refreshes
once for a kind it does not know, and never caches a failure."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.errors import ApiError, ResourceNotFound
from fastctl.kube import _resource
from fastctl.kube._resource import Discovery, Resource

WIDGETS = {"name": "widgets", "kind": "Widget", "namespaced": True, "verbs": ["get"]}
GADGETS = {"name": "gadgets", "kind": "Gadget", "namespaced": False, "verbs": ["get"]}


class _Server:
    """Answers each discovery GET with the next scripted answer (an error is raised)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *answers: Any) -> None:
        self.answers = list(answers)
        self.paths: list[str] = []
        monkeypatch.setattr(_resource, "request_json", self.request_json)

    async def request_json(self, client: ApiClient, method: str, path: str) -> Any:
        self.paths.append(path)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return {"resources": answer}


def _discovery() -> Discovery:
    return Discovery(cast(ApiClient, object()))


async def test_a_group_is_fetched_once_then_served_from_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = _Server(monkeypatch, [WIDGETS, GADGETS])
    disc = _discovery()
    widget = await disc.resolve(Resource("example.com/v1", "Widget"))
    gadget = await disc.resolve(Resource("example.com/v1", "Gadget"))
    assert (widget.plural, widget.namespaced, gadget.plural, gadget.namespaced) == (
        "widgets",
        True,
        "gadgets",
        False,
    )
    assert server.paths == ["/apis/example.com/v1"]


async def test_an_unknown_kind_refreshes_once_and_finds_a_kind_added_since(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = _Server(monkeypatch, [WIDGETS], [WIDGETS, GADGETS], [WIDGETS, GADGETS])
    disc = _discovery()
    await disc.resolve(Resource("example.com/v1", "Widget"))
    gadget = await disc.resolve(Resource("example.com/v1", "Gadget"))  # one refresh
    assert gadget.plural == "gadgets"
    assert len(server.paths) == 2
    with pytest.raises(ResourceNotFound, match=r"no such kind \(it serves: Gadget, Widget\)"):
        await disc.resolve(Resource("example.com/v1", "Gizmo"))  # one refresh, then no
    assert len(server.paths) == 3


@pytest.mark.parametrize(
    ("failure", "raised"),
    [
        (ApiError(404, "NotFound", "not found"), ResourceNotFound),  # CRD not installed yet
        (ApiError(503, "ServiceUnavailable", "try later"), ApiError),
    ],
)
async def test_a_failure_is_not_cached(
    monkeypatch: pytest.MonkeyPatch, failure: ApiError, raised: type[Exception]
) -> None:
    server = _Server(monkeypatch, failure, [WIDGETS])
    disc = _discovery()
    with pytest.raises(raised):
        await disc.resolve(Resource("example.com/v1", "Widget"))
    widget = await disc.resolve(Resource("example.com/v1", "Widget"))  # asks again
    assert widget.plural == "widgets"
    assert len(server.paths) == 2


async def test_a_resource_resolves_once_to_the_same_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reconcile writing through a `Resource` gets one `ResolvedResource` back each time,
    so the write path's lookups by identity hit; the group's entries are not matched again."""
    _Server(monkeypatch, [WIDGETS])
    disc = _discovery()
    widget = Resource("example.com/v1", "Widget")
    first = await disc.resolve(widget)
    monkeypatch.setattr(_resource, "_match", None)  # a second match would fail
    assert await disc.resolve(widget) is first
    assert await disc.resolve(Resource("example.com/v1", "Widget")) is first  # an equal one
    offline = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
    assert await disc.resolve(offline) is await disc.resolve(offline)


@pytest.mark.parametrize("scope", ["group", "all", "refresh"])
async def test_invalidating_or_refreshing_a_group_resolves_its_resources_again(
    monkeypatch: pytest.MonkeyPatch, scope: str
) -> None:
    """A CRD whose scope changed is seen after `invalidate` or a refreshed list."""
    server = _Server(monkeypatch, [WIDGETS], [{**WIDGETS, "namespaced": False}])
    disc = _discovery()
    widget = Resource("example.com/v1", "Widget")
    assert (await disc.resolve(widget)).namespaced is True
    if scope == "group":
        disc.invalidate("example.com/v1")
    elif scope == "all":
        disc.invalidate()
    else:
        await disc.api_resources("example.com/v1", refresh=True)
    assert (await disc.resolve(widget)).namespaced is False
    assert len(server.paths) == 2


async def test_invalidating_another_group_keeps_a_resolution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _Server(monkeypatch, [WIDGETS])
    disc = _discovery()
    widget = Resource("example.com/v1", "Widget")
    first = await disc.resolve(widget)
    disc.invalidate("other.example.com/v1")
    assert await disc.resolve(widget) is first
