"""`fastctl.kube.list` against a scripted server: the selectors and the page size go on every
request, the pages are followed to the end (or one is returned with its token), the items
say what they are, and a Secret's values are remembered for scrubbing."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from fastctl import _redact
from fastctl.errors import ApiError
from fastctl.kube import _list
from fastctl.kube import list as list_objects
from fastctl.kube._resource import ResolvedResource

CONFIGMAPS = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
SECRETS = ResolvedResource("", "v1", "Secret", "secrets", True)
NODES = ResolvedResource("", "v1", "Node", "nodes", False)


class Pages:
    """Answers GETs with `count` ConfigMaps, `limit` a page, tokens ``"p<index>"``."""

    def __init__(self, count: int, kind: str = "ConfigMap") -> None:
        self.count, self.kind = count, kind
        self.requests: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, client: Any, method: str, path: str, **kw: Any) -> Any:
        query = dict(kw["query"])
        assert method == "GET"
        self.requests.append((path, query))
        start = int(str(query["continue"])[1:]) if query.get("continue") else 0
        size = int(query["limit"]) if query.get("limit") else self.count
        end = min(start + size, self.count)
        meta: dict[str, Any] = {"resourceVersion": "41"}
        if end < self.count:
            meta["continue"] = f"p{end}"
            meta["remainingItemCount"] = self.count - end
        items = [self.item(i) for i in range(start, end)]
        return {"apiVersion": "v1", "kind": f"{self.kind}List", "metadata": meta, "items": items}

    def item(self, i: int) -> dict[str, Any]:
        meta = {"name": f"o{i}", "namespace": "ns", "uid": f"u{i}"}
        if self.kind == "Secret":
            value = base64.b64encode(f"secret-value-{i}".encode()).decode()
            return {"metadata": meta, "data": {"v": value}}
        return {"metadata": meta, "data": {"i": str(i)}}


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> Pages:
    server = Pages(7)
    monkeypatch.setattr(_list, "request_json", server)
    return server


async def test_every_page_is_followed_and_joined(pages: Pages) -> None:
    got = await list_objects(
        None,  # type: ignore[arg-type]
        CONFIGMAPS,
        namespace="ns",
        label_selector="app=web",
        field_selector="metadata.name!=x",
        limit=3,
    )
    assert [o["metadata"]["name"] for o in got["items"]] == [f"o{i}" for i in range(7)]
    assert got["metadata"] == {"resourceVersion": "41"}  # no token, no count left
    assert got["kind"] == "ConfigMapList"
    assert all(o["apiVersion"] == "v1" and o["kind"] == "ConfigMap" for o in got["items"])
    assert [q.get("continue") for _, q in pages.requests] == [None, "p3", "p6"]
    for path, query in pages.requests:
        assert path == "/api/v1/namespaces/ns/configmaps"
        assert (query["labelSelector"], query["fieldSelector"], query["limit"]) == (
            "app=web",
            "metadata.name!=x",
            3,
        )


async def test_one_page_and_its_token(pages: Pages) -> None:
    first = await list_objects(None, CONFIGMAPS, limit=3, all_pages=False)  # type: ignore[arg-type]
    assert len(first["items"]) == 3
    assert first["metadata"] == {"resourceVersion": "41", "continue": "p3", "remainingItemCount": 4}
    token = first["metadata"]["continue"]
    second = await list_objects(None, CONFIGMAPS, limit=3, continue_=token, all_pages=False)  # type: ignore[arg-type]
    assert [o["metadata"]["name"] for o in second["items"]] == ["o3", "o4", "o5"]
    assert pages.requests[0][0] == "/api/v1/configmaps"  # every namespace


async def test_no_limit_is_one_request(pages: Pages) -> None:
    got = await list_objects(None, CONFIGMAPS, limit=None)  # type: ignore[arg-type]
    assert len(got["items"]) == 7
    assert len(pages.requests) == 1
    assert pages.requests[0][1]["limit"] is None


async def test_bad_arguments_are_refused(pages: Pages) -> None:
    with pytest.raises(ValueError, match="limit must be positive"):
        await list_objects(None, CONFIGMAPS, limit=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cluster-scoped"):
        await list_objects(None, NODES, namespace="ns")  # type: ignore[arg-type]
    assert pages.requests == []


async def test_listed_secrets_are_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    _redact._forget_all()
    monkeypatch.setattr(_list, "request_json", Pages(2, "Secret"))
    try:
        await list_objects(None, SECRETS, namespace="ns")  # type: ignore[arg-type]
        assert _redact.scrub("x secret-value-1 y") == "x <redacted> y"
    finally:
        _redact._forget_all()


class ExpiringPages(Pages):
    """`Pages` whose tokens from ``"p<expire_at>"`` on answer 410 Expired, as an API server
    does some minutes after the first page."""

    def __init__(self, count: int, expire_at: int) -> None:
        super().__init__(count)
        self.expire_at = expire_at

    async def __call__(self, client: Any, method: str, path: str, **kw: Any) -> Any:
        token = kw["query"].get("continue")
        if token and int(str(token)[1:]) >= self.expire_at:
            self.requests.append((path, dict(kw["query"])))
            raise ApiError(410, "Expired", "The provided continue parameter is too old")
        return await super().__call__(client, method, path, **kw)


async def test_an_expired_token_starts_the_list_over_unpaged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = ExpiringPages(7, expire_at=6)
    monkeypatch.setattr(_list, "request_json", server)
    got = await list_objects(None, CONFIGMAPS, limit=3)  # type: ignore[arg-type]
    assert [o["metadata"]["name"] for o in got["items"]] == [f"o{i}" for i in range(7)]
    assert got["metadata"] == {"resourceVersion": "41"}
    # p0, p3, p6 (expired), then the whole collection in one request.
    assert [(q.get("continue"), q["limit"]) for _, q in server.requests] == [
        (None, 3),
        ("p3", 3),
        ("p6", 3),
        (None, None),
    ]


async def test_an_expired_token_of_the_caller_or_of_one_page_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = ExpiringPages(7, expire_at=3)
    monkeypatch.setattr(_list, "request_json", server)
    with pytest.raises(ApiError) as caller_token:
        await list_objects(None, CONFIGMAPS, limit=3, continue_="p3")  # type: ignore[arg-type]
    assert caller_token.value.status == 410
    first = await list_objects(None, CONFIGMAPS, limit=3, all_pages=False)  # type: ignore[arg-type]
    with pytest.raises(ApiError):
        await list_objects(
            None,  # type: ignore[arg-type]
            CONFIGMAPS,
            limit=3,
            continue_=first["metadata"]["continue"],
            all_pages=False,
        )
