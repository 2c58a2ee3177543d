"""The Manager in production conditions, on the real API server: leader election between
processes (kill -9 and graceful hand-over), /metrics after a known workload, SIGTERM drain."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Action, Controller, LeaderElection, LeadershipLost, Manager, Resource
from fastctl.kube._http import ApiError, request_json
from fastctl.runtime import ServerOptions
from fastctl.testing.control_plane import ControlPlane

from .faultproxy import FaultProxy

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

OPERATOR = str(Path(__file__).parent / "operators" / "recording.py") + ":make"
LEASE = ("--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.3")


async def create_configmaps(client: ApiClient, namespace: str, names: list[str]) -> None:
    for name in names:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        await request_json(
            client, "POST", f"/api/v1/namespaces/{namespace}/configmaps", body=orjson.dumps(body)
        )


async def steal_lease(client: ApiClient, namespace: str, name: str) -> None:
    """Another writer takes the lease (a long one), as a successor would."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    for _ in range(10):
        lease = await request_json(client, "GET", path)
        lease["spec"]["holderIdentity"] = "intruder"
        lease["spec"]["leaseDurationSeconds"] = 60
        try:
            await request_json(client, "PUT", path, body=orjson.dumps(lease))
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
    raise AssertionError("could not take the lease")


class Operator:
    """One `fastctl run` process of the recording operator."""

    def __init__(
        self, cp: ControlPlane, namespace: str, record: Path, identity: str, *extra: str, **env: str
    ) -> None:
        self.identity = identity
        self.log = record.with_name(f"{identity}.log")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fastctl.cli",
                "run",
                OPERATOR,
                "--kubeconfig",
                str(cp.kubeconfig),
                "--namespace",
                namespace,
                "--metrics-port",
                "0",
                "--probe-port",
                "0",
                *extra,
            ],
            env={
                **os.environ,
                "RECORD_FILE": str(record),
                "RECORD_IDENTITY": identity,
                **env,
            },
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def operators() -> Iterator[list[Operator]]:
    started: list[Operator] = []
    yield started
    for op in started:
        op.stop()


def read_record(record: Path) -> list[tuple[str, str, str, float]]:
    if not record.exists():
        return []
    rows = []
    for line in record.read_text().splitlines():
        kind, identity, key, at = line.split()
        rows.append((kind, identity, key, float(at)))
    return rows


def intervals(record: Path) -> dict[str, tuple[float, float]]:
    """Per identity: the first start and the last end of any reconcile."""
    spans: dict[str, tuple[float, float]] = {}
    for _kind, identity, _, at in read_record(record):
        first, last = spans.get(identity, (at, at))
        spans[identity] = (min(first, at), max(last, at))
    return spans


async def wait_until(check: Any, limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit} s waiting for {what}")
        await asyncio.sleep(0.05)


async def lease_of(client: ApiClient, namespace: str) -> dict[str, Any]:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/recording-test"
    lease: dict[str, Any] = await request_json(client, "GET", path)
    return lease


def micro_seconds(micro_time: str) -> float:
    """A Lease MicroTime as seconds since the epoch."""
    parsed = datetime.datetime.strptime(micro_time, "%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


def reconciled_by(record: Path, identity: str, since: float = 0.0) -> bool:
    return any(i == identity and at >= since for k, i, _, at in read_record(record) if k == "S")


async def test_leader_election_between_processes(
    control_plane: ControlPlane,
    client: ApiClient,
    namespace: str,
    tmp_path: Path,
    operators: list[Operator],
) -> None:
    await create_configmaps(client, namespace, [f"cm-{i}" for i in range(5)])
    record = tmp_path / "record.txt"
    election = ("--leader-elect", "recording-test", "--lease-namespace", namespace, *LEASE)
    env = {"REQUEUE_AFTER": "0.1", "RECONCILE_SECONDS": "0.02"}

    a = Operator(control_plane, namespace, record, "a", *election, **env)
    operators.append(a)
    await wait_until(lambda: reconciled_by(record, "a"), 60, "a to lead and reconcile")
    b = Operator(control_plane, namespace, record, "b", *election, **env)
    operators.append(b)
    await asyncio.sleep(4)  # b is up, its cache synced, but a holds the lease
    assert b.proc.poll() is None, "the standby did not start"
    assert not reconciled_by(record, "b"), "a follower reconciled"
    held = (await lease_of(client, namespace))["spec"]

    # kill -9 the leader: b takes over once the lease (3 s) has expired, not before.
    killed_at = time.time()
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(10)
    left = (await lease_of(client, namespace))["spec"]
    # Not released (that would clear the holder and shorten the lease): it must expire.
    assert left["holderIdentity"] == held["holderIdentity"] != ""
    assert left["leaseDurationSeconds"] == 3
    await wait_until(lambda: reconciled_by(record, "b"), 3 + 5, "b to take over after kill -9")
    spans = intervals(record)
    taken = (await lease_of(client, namespace))["spec"]
    assert taken["holderIdentity"] not in ("", held["holderIdentity"])
    assert taken["leaseTransitions"] == held["leaseTransitions"] + 1
    # Safety, no slack: a's last renewal was written with renewTime before it was sent, and
    # b waits a full lease duration from when it saw it (one machine, one wall clock).
    assert spans["b"][0] >= micro_seconds(left["renewTime"]) + 3
    takeover = spans["b"][0] - killed_at
    assert takeover < 3 + 2, f"takeover took {takeover:.1f} s"  # liveness: slack allowed
    # The killed process recorded each reconcile's start and end as it ran: none of its
    # reconciles overlaps b's.
    assert spans["a"][1] < spans["b"][0], "a and b reconciled in the same interval"

    # Graceful hand-over: SIGTERM b, c (a follower) takes over within a few seconds.
    c = Operator(control_plane, namespace, record, "c", *election, **env)
    operators.append(c)
    await asyncio.sleep(4)
    assert not reconciled_by(record, "c")
    stopped_at = time.time()
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(30) == 0
    await wait_until(lambda: reconciled_by(record, "c"), 10, "c to take over after SIGTERM")
    spans = intervals(record)
    assert spans["c"][0] - stopped_at < 3, "a released lease should be taken over at once"
    assert spans["b"][1] <= spans["c"][0], "b and c reconciled in the same interval"


async def test_sigterm_drains_running_reconciles_and_exits_zero(
    control_plane: ControlPlane,
    client: ApiClient,
    namespace: str,
    tmp_path: Path,
    operators: list[Operator],
) -> None:
    names = [f"slow-{i}" for i in range(12)]
    await create_configmaps(client, namespace, names)
    record = tmp_path / "record.txt"
    # concurrency 8 (the operator's default): 8 start, 4 wait; each reconcile takes 2 s.
    op = Operator(control_plane, namespace, record, "d", RECONCILE_SECONDS="2")
    operators.append(op)
    await wait_until(
        lambda: sum(k == "S" for k, *_ in read_record(record)) >= 8, 60, "8 reconciles running"
    )
    term_at = time.time()
    op.proc.send_signal(signal.SIGTERM)
    assert op.proc.wait(30) == 0, op.log.read_text()
    rows = read_record(record)
    starts = [(key, at) for kind, _, key, at in rows if kind == "S"]
    ends = {key for kind, _, key, _ in rows if kind == "E"}
    assert len(starts) == 8
    assert {key for key, _ in starts} == ends, "a running reconcile did not finish"
    assert all(at < term_at for _, at in starts), "a reconcile started after SIGTERM"
    assert "Traceback" not in op.log.read_text()


async def test_metrics_after_a_known_workload(
    control_plane: ControlPlane, client: ApiClient, namespace: str
) -> None:
    names = [f"ok-{i}" for i in range(6)] + [f"fail-{i}" for i in range(3)]
    await create_configmaps(client, namespace, names)
    failed: set[str] = set()
    done: set[str] = set()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        name = obj["metadata"]["name"]
        if name.startswith("fail-") and name not in failed:
            failed.add(name)
            raise RuntimeError("first attempt fails")
        done.add(name)
        return None

    ctl = Controller(client, Resource("v1", "ConfigMap"), reconcile, namespace=namespace, name="cm")
    mgr = Manager(
        client, servers=ServerOptions(metrics_port=0, metrics_secure=False, probe_port=0)
    ).add(ctl)
    task = asyncio.create_task(mgr.run())
    try:
        await wait_until(lambda: done == set(names), 60, "workload done")
        await wait_until(lambda: ctl.scheduler.in_flight == 0, 10, "idle")
        assert mgr.health is not None
        assert mgr.metrics_server is not None
        base = f"http://127.0.0.1:{mgr.health.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{mgr.metrics_server.port}/metrics") as resp:
                assert resp.status == 200
                text = await resp.text()
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 200
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 200
    finally:
        mgr.shutdown()
        await asyncio.wait_for(task, 30)
    series = parse_metrics(text)
    assert series['controller_runtime_reconcile_total{controller="cm",result="success"}'] == 9
    assert series['controller_runtime_reconcile_total{controller="cm",result="error"}'] == 3
    assert series['controller_runtime_reconcile_errors_total{controller="cm"}'] == 3
    assert series['workqueue_retries_total{controller="cm",name="cm"}'] == 3
    assert series['workqueue_depth{controller="cm",name="cm"}'] == 0
    assert series['workqueue_adds_total{controller="cm",name="cm"}'] >= 9
    assert series['controller_runtime_active_workers{controller="cm"}'] == 0
    assert series['controller_runtime_reconcile_time_seconds_count{controller="cm"}'] == 12
    assert series['workqueue_work_duration_seconds_count{controller="cm",name="cm"}'] == 12


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


def test_leader_election_config_is_exported() -> None:
    config = LeaderElection("x", namespace="y")
    assert config.lease_duration > config.renew_deadline > config.retry_period


async def test_controllers_of_one_manager_share_one_watch_and_cache(
    control_plane: ControlPlane, client: ApiClient, namespace: str
) -> None:
    await create_configmaps(client, namespace, ["shared"])
    seen: dict[str, set[str]] = {"first": set(), "second": set()}
    both = asyncio.Event()

    def reconciler(name: str) -> Any:
        async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
            seen[name].add(obj["metadata"]["name"])
            if all(seen.values()):
                both.set()
            await asyncio.wait_for(both.wait(), 30)  # rule 3: both inside at the same time

        return reconcile

    cm = Resource("v1", "ConfigMap")
    first = Controller(client, cm, reconciler("first"), namespace=namespace, name="first")
    second = Controller(client, cm, reconciler("second"), namespace=namespace, name="second")
    mgr = Manager(client, metrics_port=None, probe_port=None).add(first).add(second)
    task = asyncio.create_task(mgr.run())
    try:
        await asyncio.wait_for(both.wait(), 60)
        assert first.store is second.store
        assert len(first.store) == 1
    finally:
        mgr.shutdown()
        await asyncio.wait_for(task, 30)


async def test_two_controllers_with_one_name_are_refused(client: ApiClient) -> None:
    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    cm = Resource("v1", "ConfigMap")
    mgr = Manager(client, metrics_port=None, probe_port=None).add(Controller(client, cm, reconcile))
    with pytest.raises(ValueError, match="two controllers named 'configmap'"):
        mgr.add(Controller(client, cm, reconcile))


async def test_a_lost_lease_cancels_running_reconciles_at_once(
    control_plane: ControlPlane, client: ApiClient, namespace: str
) -> None:
    await create_configmaps(client, namespace, ["busy"])
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    election = LeaderElection(
        "lost-lease", namespace=namespace, lease_duration=3, renew_deadline=2, retry_period=0.3
    )
    ctl = Controller(client, Resource("v1", "ConfigMap"), reconcile, namespace=namespace)
    mgr = Manager(
        client, leader_election=election, metrics_port=None, probe_port=None, drain_timeout=30
    ).add(ctl)
    task = asyncio.create_task(mgr.run())
    await asyncio.wait_for(started.wait(), 60)
    # Another writer takes the lease: at its next renewal the manager must stop, and must not
    # give the running reconcile its 30 s drain timeout.
    await steal_lease(client, namespace, "lost-lease")
    taken_at = time.monotonic()
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(task, 20)
    assert cancelled.is_set()
    assert time.monotonic() - taken_at < 10, "the reconcile was drained, not cancelled"


async def _probe(port: int, path: str) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}{path}") as resp,
    ):
        return resp.status


async def test_readyz_is_503_until_the_caches_sync(
    proxied: ApiClient, proxy: FaultProxy, namespace: str
) -> None:
    """The initial list fails (503 from the proxy) until the test heals it: meanwhile the
    replica is live but not ready."""
    proxy.fail(
        503,
        times=10_000,
        match=lambda method, path: method == "GET" and "/configmaps" in path,
    )

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    ctl = Controller(proxied, Resource("v1", "ConfigMap"), reconcile, namespace=namespace)
    mgr = Manager(proxied, metrics_port=None, probe_port=0).add(ctl)
    task = asyncio.create_task(mgr.run())
    try:
        await wait_until(lambda: mgr.health is not None and mgr.health.port, 30, "health up")
        assert mgr.health is not None
        port = mgr.health.port
        await wait_until(
            lambda: sum("/configmaps" in p for _, p in proxy.requests) >= 2, 30, "a retry"
        )
        assert await _probe(port, "/readyz") == 503
        assert await _probe(port, "/healthz") == 200
        proxy.heal()
        await wait_until(lambda: mgr.is_ready(), 60, "caches synced")
        assert await _probe(port, "/readyz") == 200
    finally:
        mgr.shutdown()
        await asyncio.wait_for(task, 30)


async def test_healthz_is_503_once_a_controller_died(client: ApiClient, namespace: str) -> None:
    """One controller's trigger source fails, which kills that controller; while the other
    drains its running reconcile, /healthz says the replica is not live."""
    await create_configmaps(client, namespace, ["one"])
    running = asyncio.Event()
    release = asyncio.Event()

    async def slow(obj: dict[str, Any], ctx: Any) -> None:
        running.set()
        await release.wait()

    async def quick(obj: dict[str, Any], ctx: Any) -> None:
        return None

    async def failing() -> Any:
        await running.wait()
        raise RuntimeError("the trigger source broke")
        yield  # an async generator

    cm = Resource("v1", "ConfigMap")
    mgr = (
        Manager(client, metrics_port=None, probe_port=0, drain_timeout=60)
        .add(Controller(client, cm, slow, namespace=namespace, name="slow"))
        .add(
            Controller(client, cm, quick, namespace=namespace, name="dies").reconcile_all_on(
                failing()
            )
        )
    )
    task = asyncio.create_task(mgr.run())
    try:
        await asyncio.wait_for(running.wait(), 30)
        assert mgr.health is not None
        port = mgr.health.port
        await wait_until(lambda: mgr._failed is not None, 30, "the controller died")
        assert await _probe(port, "/healthz") == 503
    finally:
        release.set()
        with pytest.raises(RuntimeError, match="the trigger source broke"):
            await asyncio.wait_for(task, 30)
