"""Sharding on the real API server: the ``ShardedListAndWatch`` gate and its
``shardSelector``, the member Leases, and the client-side fallback agreeing with the server
object by object."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.errors import ApiError
from fastctl.kube._http import request_json
from fastctl.runtime.sharding._member_api import ShardLeaseClient, member_lease
from fastctl.runtime.sharding._rules import SLOTS_ANNOTATION, parse_slots
from fastctl.runtime.sharding._slots import fnv1a_64, shard_selector, slot_of
from fastctl.testing import ControlPlane

from .conftest import make_configmap

pytestmark = pytest.mark.kube

SLOTS = 8


@pytest.fixture
def sharded_namespace(sharded_control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace on the sharded control plane."""
    name = f"shard-{secrets.token_hex(3)}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    status, answer = sharded_control_plane.api_request("POST", "/api/v1/namespaces", body)
    assert status == 201, answer
    yield name
    sharded_control_plane.api_request("DELETE", f"/api/v1/namespaces/{name}")


async def _list(api: ApiClient, namespace: str, selector: str | None) -> dict[str, Any]:
    query = {"shardSelector": selector} if selector else None
    answer = await request_json(
        api, "GET", f"/api/v1/namespaces/{namespace}/configmaps", query=query
    )
    assert isinstance(answer, dict)
    return answer


def _slot(obj: dict[str, Any]) -> int:
    return slot_of(fnv1a_64(obj["metadata"]["uid"]), SLOTS)


async def test_server_shards_like_the_client(
    sharded_client: ApiClient, sharded_namespace: str
) -> None:
    """With the gate on, a list with the selector of some slots returns exactly the objects
    the client-side hash puts in those slots, and echoes the selector in
    ``metadata.shardInfo``."""
    for i in range(60):
        await make_configmap(sharded_client, sharded_namespace, f"cm-{i}")
    everything = (await _list(sharded_client, sharded_namespace, None))["items"]
    assert len(everything) >= 60
    for owned in ({0, 1, 2, 3}, {1, 5, 6}, {7}):
        selector = shard_selector(owned, SLOTS)
        answer = await _list(sharded_client, sharded_namespace, selector)
        assert answer["metadata"]["shardInfo"] == {"selector": selector}
        got = {o["metadata"]["uid"] for o in answer["items"]}
        want = {o["metadata"]["uid"] for o in everything if _slot(o) in owned}
        assert got == want
        assert 0 < len(got) < len(everything)


async def test_gate_off_ignores_the_selector(client: ApiClient, namespace: str) -> None:
    """Without the gate the server returns everything and no ``shardInfo``: the signal
    for the client-side fallback."""
    for i in range(5):
        await make_configmap(client, namespace, f"cm-{i}")
    answer = await _list(client, namespace, shard_selector({0}, SLOTS))
    assert "shardInfo" not in answer["metadata"]
    assert len(answer["items"]) >= 5


async def test_member_leases_on_the_server(
    sharded_client: ApiClient, sharded_namespace: str
) -> None:
    """Create, renew with published slots, list the group (only the group), and a write
    from a stale copy (someone wrote behind the member's back) is a 409."""
    leases = ShardLeaseClient(sharded_client, sharded_namespace, "g", 10.0)
    other = ShardLeaseClient(sharded_client, sharded_namespace, "other", 10.0)
    first = await leases.write(None, member_lease("g-a", "g", "a", 15, frozenset()))
    await other.write(None, member_lease("other-x", "other", "x", 15, frozenset({1})))
    assert first["spec"]["holderIdentity"] == "a"
    renewed = await leases.write(first, member_lease("g-a", "g", "a", 15, frozenset({0, 1, 5})))
    assert renewed["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    assert renewed["spec"]["renewTime"] >= first["spec"]["renewTime"]
    await leases.write(None, member_lease("g-b", "g", "b", 15, frozenset({2})))
    listed = {
        lease["metadata"]["name"]: parse_slots(
            lease["metadata"]["annotations"][SLOTS_ANNOTATION], SLOTS
        )
        for lease in await leases.list()
    }
    assert listed == {"g-a": frozenset({0, 1, 5}), "g-b": frozenset({2})}
    # A stolen write: someone else replaced the Lease; the member's copy is now stale.
    stolen = await request_json(
        sharded_client,
        "PUT",
        f"/apis/coordination.k8s.io/v1/namespaces/{sharded_namespace}/leases/g-a",
        body=orjson.dumps({**renewed, "spec": {**renewed["spec"], "holderIdentity": "thief"}}),
    )
    assert stolen["spec"]["holderIdentity"] == "thief"
    with pytest.raises(ApiError) as caught:
        await leases.write(renewed, member_lease("g-a", "g", "a", 15, frozenset({0})))
    assert caught.value.status == 409
    # Deletion is preconditioned too: from the stale copy it does nothing.
    await leases.delete(renewed)
    assert {lease["metadata"]["name"] for lease in await leases.list()} == {"g-a", "g-b"}
    await leases.delete(stolen)
    assert {lease["metadata"]["name"] for lease in await leases.list()} == {"g-b"}
