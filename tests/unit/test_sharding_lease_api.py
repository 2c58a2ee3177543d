"""A shard member's requests on the wire (`ShardLeaseClient`), with the HTTP layer replaced
by a recorder that answers as scripted: the group's list (a quorum read by label), the
create and the preconditioned replace of its own Lease, the preconditioned delete of a dead
member's, and the answers that are not what they should be."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.errors import ApiError
from fastctl.runtime.sharding import Sharding, _member_api
from fastctl.runtime.sharding._member import ShardMember
from fastctl.runtime.sharding._member_api import ShardLeaseClient, member_lease
from fastctl.runtime.sharding._rules import GROUP_LABEL, SLOTS_ANNOTATION

COLLECTION = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"


class Wire:
    """Records each request; answers with `answer` (or raises it, an exception)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answer: Any = {}
        self.client = object()
        monkeypatch.setattr(_member_api, "request_json", self.request_json)

    async def request_json(self, client: Any, method: str, path: str, **kw: Any) -> Any:
        assert client is self.client
        body = kw.pop("body", None)
        self.requests.append(
            {"method": method, "path": path, "body": orjson.loads(body) if body else None, **kw}
        )
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def leases(self) -> ShardLeaseClient:
        return ShardLeaseClient(self.client, "ops", "grp", 4.5)  # type: ignore[arg-type]


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    return Wire(monkeypatch)


def test_a_member_lease_names_its_group_slots_holder_and_duration() -> None:
    lease = member_lease("grp-a", "grp", "a", 15, frozenset({0, 1, 2, 5}))
    assert lease["apiVersion"] == "coordination.k8s.io/v1"
    assert lease["kind"] == "Lease"
    assert lease["metadata"] == {
        "name": "grp-a",
        "labels": {GROUP_LABEL: "grp"},
        "annotations": {SLOTS_ANNOTATION: "0-2,5"},
    }
    spec = lease["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("a", 15)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", spec["renewTime"])


async def test_the_group_is_listed_by_its_label_and_only_leases_are_kept(wire: Wire) -> None:
    wire.answer = {"items": [{"metadata": {"name": "grp-a"}}, "junk", 3]}
    assert await wire.leases().list() == [{"metadata": {"name": "grp-a"}}]
    assert wire.requests == [
        {
            "method": "GET",
            "path": COLLECTION,
            "body": None,
            "query": {"labelSelector": f"{GROUP_LABEL}=grp"},
            "request_timeout": 4.5,
        }
    ]


@pytest.mark.parametrize("answer", [{"items": "no"}, {}, ["not", "a", "list"]])
async def test_a_list_answer_that_is_not_a_lease_list_is_a_bad_response(
    wire: Wire, answer: Any
) -> None:
    wire.answer = answer
    with pytest.raises(ApiError) as bad:
        await wire.leases().list()
    assert (bad.value.status, bad.value.reason, bad.value.message) == (
        0,
        "BadResponse",
        "not a LeaseList",
    )
    assert bad.value.method == "GET"


async def test_a_new_lease_is_posted_and_an_existing_one_replaced_on_its_version(
    wire: Wire,
) -> None:
    body = member_lease("grp-a", "grp", "a", 15, frozenset({1}))
    wire.answer = {"metadata": {"name": "grp-a", "resourceVersion": "7"}}
    assert await wire.leases().write(None, body) == wire.answer
    current = {"metadata": {"name": "grp-a", "resourceVersion": "7"}}
    await wire.leases().write(current, body)
    created, replaced = wire.requests
    assert (created["method"], created["path"], created["body"]) == ("POST", COLLECTION, body)
    assert created["request_timeout"] == 4.5
    assert (replaced["method"], replaced["path"]) == ("PUT", f"{COLLECTION}/grp-a")
    assert replaced["body"]["metadata"] == {**body["metadata"], "resourceVersion": "7"}
    assert replaced["body"]["spec"] == body["spec"]
    assert replaced["request_timeout"] == 4.5
    assert "resourceVersion" not in body["metadata"]  # the caller's body is left as it was


@pytest.mark.parametrize("current", [None, {"metadata": {"resourceVersion": "7"}}])
async def test_a_write_answer_that_is_not_a_lease_is_a_bad_response(
    wire: Wire, current: dict[str, Any] | None
) -> None:
    wire.answer = ["not a lease"]
    body = member_lease("grp-a", "grp", "a", 15, frozenset())
    with pytest.raises(ApiError) as bad:
        await wire.leases().write(current, body)
    method = "POST" if current is None else "PUT"
    path = COLLECTION if current is None else f"{COLLECTION}/grp-a"
    assert (bad.value.status, bad.value.reason, bad.value.message) == (
        0,
        "BadResponse",
        "not a Lease",
    )
    assert (bad.value.method, bad.value.path) == (method, path)


async def test_a_dead_members_lease_is_deleted_only_as_it_was_read(wire: Wire) -> None:
    await wire.leases().delete({"metadata": {"name": "grp-b", "resourceVersion": "9"}})
    assert wire.requests == [
        {
            "method": "DELETE",
            "path": f"{COLLECTION}/grp-b",
            "body": {"preconditions": {"resourceVersion": "9"}},
            "request_timeout": 4.5,
        }
    ]


@pytest.mark.parametrize("status", [404, 409])
async def test_a_lease_gone_or_written_since_is_left_alone(wire: Wire, status: int) -> None:
    wire.answer = ApiError(status, "Gone", "gone", method="DELETE")
    await wire.leases().delete({"metadata": {"name": "grp-b", "resourceVersion": "9"}})


async def test_any_other_failure_of_a_delete_is_raised(wire: Wire) -> None:
    wire.answer = ApiError(500, "InternalError", "boom", method="DELETE")
    with pytest.raises(ApiError, match="boom"):
        await wire.leases().delete({"metadata": {"name": "grp-b", "resourceVersion": "9"}})


async def test_a_member_made_from_an_api_client_uses_its_namespace_and_renew_deadline(
    wire: Wire,
) -> None:
    """Given an API client (as a Manager gives it), a member reaches its group's Leases in
    the configured namespace, and each request may take the renew deadline and no more."""
    async with ApiClient(Configuration(host="http://127.0.0.1:9")) as client:
        wire.client = client
        config = Sharding("grp", namespace="ops", identity="a", renew_deadline=4.5)
        member = ShardMember(client, config)
        wire.answer = {"metadata": {"name": config.lease_name, "resourceVersion": "1"}}
        assert await member.leave() is True
    [request] = wire.requests
    assert (request["method"], request["path"]) == ("POST", COLLECTION)
    assert request["request_timeout"] == 4.5
