"""Two sharded Managers in one process on the real API server: they split the objects by
the rendezvous assignment, never reconcile one object at once, and one takes everything
over when the other leaves. Once with the server sharding (the feature gate on), once with
the client-side fallback (gate off): the same objects go to the same replica. And with
leader election beside the sharding: a controller added with ``sharded=False`` runs on
the leader only while the sharded one splits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, Manager, Resource
from fastctl.kube._http import request_json
from fastctl.runtime.leader import LeaderElection
from fastctl.runtime.sharding import Sharding
from fastctl.runtime.sharding._assignment import assign
from fastctl.runtime.sharding._gate import ShardGate

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

SLOTS = 16
FALLBACK = "the server does not shard lists; filtering on the client"
CM = Resource("v1", "ConfigMap")
Row = tuple[str, str, str, float, float]  # identity, uid, resourceVersion, start, end


def sharding(namespace: str, identity: str) -> Sharding:
    return Sharding(
        "rec",
        namespace=namespace,
        identity=identity,
        slots=SLOTS,
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.3,
    )


def manager(
    client: ApiClient,
    namespace: str,
    identity: str,
    rows: list[Row],
    leader_election: LeaderElection | None = None,
) -> Manager:
    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(0.02)
        meta = obj["metadata"]
        rows.append((identity, meta["uid"], meta["resourceVersion"], start, loop.time()))

    mgr = Manager(
        client,
        sharding=sharding(namespace, identity),
        leader_election=leader_election,
        metrics_port=None,
        probe_port=None,
    )
    mgr.add(Controller(client, CM, reconcile, namespace=namespace, name="rec"))
    return mgr


def overlaps(rows: list[Row]) -> list[tuple[Row, Row]]:
    """Two reconciles of one object on two replicas at once."""
    by_uid: dict[str, list[Row]] = {}
    for row in rows:
        by_uid.setdefault(row[1], []).append(row)
    bad = []
    for spans in by_uid.values():
        spans.sort(key=lambda r: r[3])
        latest = spans[0]  # the span that ends last among those started so far
        for row in spans[1:]:
            if row[3] < latest[4] and row[0] != latest[0]:
                bad.append((latest, row))
            if row[4] > latest[4]:
                latest = row
    return bad


async def wait_for(check: Any, limit: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {limit} s waiting for {what}")
        await asyncio.sleep(0.05)


async def put_configmaps(
    client: ApiClient, namespace: str, count: int, version: str
) -> dict[str, dict[str, Any]]:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    made = {}
    for i in range(count):
        body = {"metadata": {"name": f"cm-{i}"}, "data": {"v": version}}
        got = await request_json(
            client,
            "PATCH",
            f"{path}/cm-{i}",
            query={"fieldManager": "test", "force": "true"},
            body=orjson.dumps({"apiVersion": "v1", "kind": "ConfigMap", **body}),
            content_type="application/apply-patch+yaml",
        )
        made[got["metadata"]["uid"]] = got
    return made


async def stop(a: Manager, b: Manager, runs: list[asyncio.Task[None]]) -> None:
    for m in (a, b):
        m.shutdown()
    for run in runs:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(run, 30)


async def split_and_take_over(client: ApiClient, namespace: str) -> list[Manager]:
    rows: list[Row] = []
    objects = await put_configmaps(client, namespace, 40, "1")
    a, b = manager(client, namespace, "a", rows), manager(client, namespace, "b", rows)
    runs = [asyncio.create_task(m.run()) for m in (a, b)]
    try:
        await wait_for(lambda: a.is_ready() and b.is_ready(), 30, "both settled")
        owner = {}
        share = assign(["a", "b"], SLOTS)
        gate = ShardGate(a.member, "uid", SLOTS)  # type: ignore[arg-type]
        for uid in objects:
            owner[uid] = next(m for m, slots in share.items() if gate.slot_of(uid) in slots)
        assert set(owner.values()) == {"a", "b"}
        objects = await put_configmaps(client, namespace, 40, "2")

        def reconciled_by_owner() -> bool:
            done = {(r[1], r[2]): r[0] for r in rows}
            return all(
                done.get((uid, o["metadata"]["resourceVersion"])) == owner[uid]
                for uid, o in objects.items()
            )

        await wait_for(reconciled_by_owner, 30, "every change reconciled by its owner")
        settled_at = asyncio.get_running_loop().time()
        # After the settling, each object is reconciled only by its owner.
        late = [r for r in rows if r[3] > settled_at and r[0] != owner[r[1]]]
        b.shutdown()
        await asyncio.wait_for(runs[1], 30)
        objects = await put_configmaps(client, namespace, 40, "3")

        def all_by_a() -> bool:
            done = {(r[1], r[2]) for r in rows if r[0] == "a"}
            return all(
                (uid, o["metadata"]["resourceVersion"]) in done for uid, o in objects.items()
            )

        await wait_for(all_by_a, 30, "a reconciles everything once b left")
        assert late == []
        assert overlaps(rows) == []
        return [a, b]
    finally:
        await stop(a, b, runs)


async def test_two_managers_split_with_the_server_sharding(
    sharded_client: ApiClient, sharded_control_plane: Any, caplog: pytest.LogCaptureFixture
) -> None:
    status, answer = sharded_control_plane.api_request(
        "POST", "/api/v1/namespaces", {"metadata": {"name": "shard-mgr"}}
    )
    assert status in (201, 409), answer
    with caplog.at_level(logging.INFO, "fastctl.watcher"):
        await split_and_take_over(sharded_client, "shard-mgr")
    assert FALLBACK not in caplog.text


async def test_two_managers_split_with_the_client_fallback(
    client: ApiClient, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "fastctl.watcher"):
        await split_and_take_over(client, namespace)
    assert FALLBACK in caplog.text


async def test_an_unsharded_controller_runs_on_the_leader_only(
    client: ApiClient, namespace: str
) -> None:
    """Two replicas, each a Manager with sharding and leader election and two controllers
    of ConfigMaps: ``all`` (``sharded=False``) reconciles every object on one replica, the
    leader; ``rec`` splits them by the rendezvous assignment."""
    rows: dict[str, list[Row]] = {"all": [], "rec": []}

    def replica(identity: str) -> Manager:
        election = LeaderElection(
            "mixed",
            namespace=namespace,
            identity=identity,
            lease_duration=3,
            renew_deadline=2,
            retry_period=0.3,
        )
        mgr = manager(client, namespace, identity, rows["rec"], election)

        async def everything(obj: dict[str, Any], ctx: Any) -> None:
            now = asyncio.get_running_loop().time()
            meta = obj["metadata"]
            rows["all"].append((identity, meta["uid"], meta["resourceVersion"], now, now))

        ctl = Controller(client, CM, everything, namespace=namespace, name="all")
        return mgr.add(ctl, sharded=False)

    objects = await put_configmaps(client, namespace, 20, "1")
    a, b = replica("a"), replica("b")
    runs = [asyncio.create_task(m.run()) for m in (a, b)]
    try:
        share = assign(["a", "b"], SLOTS)
        await wait_for(lambda: a.is_ready() and b.is_ready(), 30, "both settled")
        await wait_for(lambda: a.is_leader or b.is_leader, 30, "a leader")
        leader = "a" if a.is_leader else "b"
        objects = await put_configmaps(client, namespace, 20, "2")
        gate = ShardGate(a.member, "uid", SLOTS)  # type: ignore[arg-type]
        owner = {
            uid: next(m for m, slots in share.items() if gate.slot_of(uid) in slots)
            for uid in objects
        }
        assert set(owner.values()) == {"a", "b"}

        def done(name: str, by: dict[str, str]) -> bool:
            seen = {(r[1], r[2]): r[0] for r in rows[name]}
            return all(
                seen.get((uid, o["metadata"]["resourceVersion"])) == by[uid]
                for uid, o in objects.items()
            )

        await wait_for(lambda: done("rec", owner), 20, "every change reconciled by its owner")
        await wait_for(
            lambda: done("all", dict.fromkeys(objects, leader)), 20, "the leader reconciles all"
        )
        assert {r[0] for r in rows["all"]} == {leader}  # never on the other replica
        assert {r[0] for r in rows["rec"]} == {"a", "b"}
        assert overlaps(rows["rec"]) == []
    finally:
        await stop(a, b, runs)
