"""Resource names, path builders, errors and backoff: the pure parts of the Kubernetes layer."""

from __future__ import annotations

import orjson
import pytest

from fastctl.kube._http import ApiError, error_from_response
from fastctl.kube._resource import ResolvedResource, Resource, _match
from fastctl.kube._watcher import Backoff

CM = ResolvedResource("", "v1", "ConfigMap", "configmaps", True)
NS = ResolvedResource("", "v1", "Namespace", "namespaces", False)
WIDGET = ResolvedResource("example.com", "v1", "Widget", "widgets", True)


def test_resource_is_a_hashable_value() -> None:
    a = Resource("example.com/v1", "Widget")
    assert a == Resource("example.com/v1", "Widget")
    assert len({a, Resource("example.com/v1", "Widget")}) == 1
    assert (a.group, a.version) == ("example.com", "v1")
    assert (Resource("v1", "Pod").group, Resource("v1", "Pod").version) == ("", "v1")
    with pytest.raises(AttributeError):
        a.kind = "Other"  # type: ignore[misc]


@pytest.mark.parametrize("bad", ["", "a/b/c", "example.com/"])
def test_resource_rejects_bad_api_versions(bad: str) -> None:
    with pytest.raises(ValueError, match="api_version"):
        Resource(bad, "Widget")


def test_resource_needs_a_kind_and_keyword_options() -> None:
    with pytest.raises(ValueError, match="kind"):
        Resource("v1", "")
    with pytest.raises(TypeError):
        Resource("v1", "ConfigMap", "configmaps")  # type: ignore[call-arg]


def test_paths() -> None:
    assert CM.collection_path() == "/api/v1/configmaps"
    assert CM.collection_path("ns") == "/api/v1/namespaces/ns/configmaps"
    assert CM.object_path("a", "ns") == "/api/v1/namespaces/ns/configmaps/a"
    assert WIDGET.status_path("w", "ns") == "/apis/example.com/v1/namespaces/ns/widgets/w/status"
    assert NS.object_path("kube-system") == "/api/v1/namespaces/kube-system"
    obj = {"metadata": {"name": "w", "namespace": "ns"}}
    assert WIDGET.path_of(obj, subresource="status").endswith("/namespaces/ns/widgets/w/status")
    assert WIDGET.api_version == "example.com/v1"
    assert CM.api_version == "v1"


def test_a_name_is_one_path_segment() -> None:
    """A name or namespace of unreserved characters goes in as it is, any other is quoted
    whole, ``/`` included. Broken once: the fast path taken for every name (red: the
    slash and the space go in raw)."""
    assert CM.object_path("a-b.c_d~9", "ns-1") == "/api/v1/namespaces/ns-1/configmaps/a-b.c_d~9"
    assert CM.object_path("a/b c", "n s") == "/api/v1/namespaces/n%20s/configmaps/a%2Fb%20c"
    assert CM.object_path("é", "ns") == "/api/v1/namespaces/ns/configmaps/%C3%A9"


def test_paths_enforce_scope() -> None:
    with pytest.raises(ValueError, match="namespaced"):
        CM.object_path("a")
    with pytest.raises(ValueError, match="cluster-scoped"):
        NS.collection_path("ns")
    assert NS.object_path("x", "ignored-for-cluster-scoped") == "/api/v1/namespaces/x"


DISCOVERY = [
    {"name": "widgets", "singularName": "widget", "namespaced": True, "kind": "Widget",
     "verbs": ["get", "list", "watch", "patch"]},
    {"name": "widgets/status", "namespaced": True, "kind": "Widget", "verbs": ["get", "patch"]},
    {"name": "gadgets", "singularName": "gadget", "namespaced": False, "kind": "Gadget",
     "verbs": ["list"]},
]  # fmt: skip


def test_match_by_kind_plural_and_singular() -> None:
    for kind in ("Widget", "widget", "widgets"):
        found = _match(Resource("example.com/v1", kind), DISCOVERY)
        assert found is not None
        assert found.plural == "widgets"
        assert found.namespaced
        assert found.subresources == frozenset({"status"})
        assert found.has_status
    gadget = _match(Resource("example.com/v1", "Gadget"), DISCOVERY)
    assert gadget is not None
    assert not gadget.namespaced
    assert not gadget.has_status
    assert _match(Resource("example.com/v1", "Nope"), DISCOVERY) is None
    by_plural = _match(Resource("example.com/v1", "Anything", plural="gadgets"), DISCOVERY)
    assert by_plural is not None
    assert by_plural.kind == "Gadget"


def test_api_error_is_one_clear_line() -> None:
    body = orjson.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "reason": "Forbidden",
            "code": 403,
            "message": 'configmaps is forbidden: User "bob" cannot list resource "configmaps"',
        }
    )
    err = error_from_response(403, body, method="GET", path="/api/v1/configmaps")
    assert str(err) == (
        'GET /api/v1/configmaps: 403 Forbidden: configmaps is forbidden: User "bob" cannot '
        'list resource "configmaps"'
    )
    assert (err.status, err.reason) == (403, "Forbidden")
    plain = error_from_response(502, b"<html>bad gateway</html>", method="GET", path="/x")
    assert str(plain) == "GET /x: 502 Bad Gateway: <html>bad gateway</html>"
    assert isinstance(plain, ApiError)
    assert plain.body is None


def test_retry_after() -> None:
    body = {"kind": "Status", "code": 429, "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": 3}}  # fmt: skip
    assert ApiError.from_status(body).retry_after == 3.0
    assert ApiError(500, "x", "y").retry_after is None


def test_backoff_grows_with_jitter_caps_and_resets() -> None:
    b = Backoff(initial=1.0, factor=2.0, maximum=8.0, jitter=0.2)
    delays = [b.next_delay() for _ in range(6)]
    for delay, base in zip(delays, [1, 2, 4, 8, 8, 8], strict=True):
        assert 0.8 * base <= delay <= 1.2 * base
    b.reset()
    assert 0.8 <= b.next_delay() <= 1.2
    many = Backoff()
    for _ in range(10_000):  # no overflow, ever
        assert many.next_delay() <= 30.0 * 1.2
