"""Sharding end to end (the harness: `sharding_e2e`): ``fastctl run --shard-group``
replicas on 200 ConfigMaps under continuous changes; a fourth joins, one leaves on
SIGTERM, one dies on SIGKILL. No object is ever reconciled by two replicas at once, every
final version is reconciled, in quiet stretches each object is reconciled by the replica
publishing its slot and each replica receives about 1/N of the objects. The long variant,
and the same with the client-side filter (the server without ``ShardedListAndWatch``):
``benches/sharding/run.py`` (``--gate off``); the fallback's assignment, object by object,
is checked here by ``test_sharding_manager.py``."""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.testing import ControlPlane

from .sharding_e2e import Cluster, steady_window

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]

OBJECTS = 200
RATE = 40.0  # writes per second


@pytest.fixture
def e2e_namespace(sharded_control_plane: ControlPlane) -> Iterator[str]:
    name = f"shard-e2e-{int(time.time() * 1000) % 100000}"
    status, answer = sharded_control_plane.api_request(
        "POST", "/api/v1/namespaces", {"metadata": {"name": name}}
    )
    assert status == 201, answer
    yield name
    sharded_control_plane.api_request("DELETE", f"/api/v1/namespaces/{name}")


@contextlib.asynccontextmanager
async def writing(cluster: Cluster) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(cluster.write(OBJECTS, RATE, stop))
    try:
        yield
    finally:
        stop.set()
        await task


def check_window(window: dict[str, Any], replicas: int) -> None:
    print(window)  # shown with -s, and on failure
    assert window["misplaced"] == [], window["misplaced"]
    assert all(n > 0 for n in window["reconciles"].values()), window
    share = window["share"]
    assert isinstance(share, dict)
    assert len(share) == replicas
    events = sum(window["received"].values())
    assert events >= 30, window  # the tolerance below widens as the count falls
    for name, part in share.items():
        expected = window["expected"][name]
        assert 0.5 / replicas < expected < 1.6 / replicas, f"{name}'s objects: {window}"
        # Four standard deviations of the binomial count of `events` picks, at least 0.1.
        allowed = max(0.1, 4 * math.sqrt(expected * (1 - expected) / events))
        assert abs(part - expected) < allowed, f"{name} received {part:.0%}: {window}"


async def test_replicas_join_leave_and_die_without_overlap(
    sharded_control_plane: ControlPlane,
    sharded_client: ApiClient,
    e2e_namespace: str,
    tmp_path: Path,
) -> None:
    cluster = Cluster(sharded_control_plane, sharded_client, e2e_namespace, tmp_path, work=1.5)
    try:
        await cluster.create(OBJECTS)
        async with writing(cluster):
            for name in ("a", "b", "c"):
                cluster.start(name)
            await cluster.settled(40)
            check_window(await steady_window(cluster, 3), 3)
            cluster.start("d")
            await cluster.settled(20)
            check_window(await steady_window(cluster, 3), 4)
            assert cluster.stop("a", signal.SIGTERM) == 0
            await cluster.settled(20)
            cluster.stop("b", signal.SIGKILL)
            await cluster.settled(20)  # after b's Lease expired (3 s)
            check_window(await steady_window(cluster, 2), 2)
        objects = await cluster.wait_all_seen(20)
        assert cluster.unseen(objects) == []
        assert cluster.overlaps() == []
        assert cluster.writes > 100
        # The server sharded every list (and so its watches: the shares above count events).
        logs = [r.log.read_text() for r in cluster.replicas.values()]
        assert not any("filtering on the client" in text for text in logs)
    finally:
        cluster.kill_all()
