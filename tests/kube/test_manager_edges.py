"""The Manager at the edges of leadership, on the real API server: the lease lost or the
elector failing during the graceful drain, and a thread reconcile that outlives it (the
Lease is not released; ``fastctl run`` exits at once)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, LeaderElection, LeadershipLost, Manager, Resource
from fastctl.kube._http import request_json
from fastctl.runtime.leader import LeaderElector
from fastctl.runtime.manager import _manager
from fastctl.testing.control_plane import ControlPlane

from .test_manager import create_configmaps, steal_lease

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

CM = Resource("v1", "ConfigMap")
LEASES = "/apis/coordination.k8s.io/v1/namespaces"


def fast_election(name: str, namespace: str) -> LeaderElection:
    return LeaderElection(
        name, namespace=namespace, lease_duration=3, renew_deadline=2, retry_period=0.3
    )


class Busy:
    """An async reconcile that runs until cancelled, and says when it started and ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(self, obj: dict[str, Any], ctx: Any) -> None:
        self.started.set()
        try:
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


async def draining(
    client: ApiClient, namespace: str, lease: str
) -> tuple[Busy, asyncio.Task[None]]:
    """A leader-elected Manager whose one reconcile runs, after `shutdown()`: it drains,
    with 600 s to do so."""
    await create_configmaps(client, namespace, ["busy"])
    busy = Busy()
    ctl = Controller(client, CM, busy, namespace=namespace)
    mgr = Manager(
        client,
        leader_election=fast_election(lease, namespace),
        metrics_port=None,
        probe_port=None,
        drain_timeout=600,
    ).add(ctl)
    task = asyncio.create_task(mgr.run())
    await asyncio.wait_for(busy.started.wait(), 60)
    mgr.shutdown()
    await asyncio.sleep(0.5)
    assert not busy.cancelled.is_set()  # the drain lets it run...
    return busy, task


async def test_a_lease_lost_during_the_drain_cancels_running_reconciles_at_once(
    client: ApiClient, namespace: str
) -> None:
    busy, task = await draining(client, namespace, "drain-lost")
    await steal_lease(client, namespace, "drain-lost")
    # ...but not past the loss of the lease (noticed at the next renewal).
    await asyncio.wait_for(busy.cancelled.wait(), 20)
    with pytest.raises(LeadershipLost, match="during the graceful drain"):
        await asyncio.wait_for(task, 20)


async def test_an_elector_failing_during_the_drain_cancels_running_reconciles_at_once(
    client: ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash = asyncio.Event()

    class CrashingElector(LeaderElector):
        async def run(self) -> None:
            renewing = asyncio.create_task(super().run())
            await crash.wait()
            renewing.cancel()
            raise RuntimeError("the elector crashed")

    monkeypatch.setattr(_manager, "LeaderElector", CrashingElector)
    busy, task = await draining(client, namespace, "drain-crash")
    crash.set()
    # ...but not past the end of the elector.
    await asyncio.wait_for(busy.cancelled.wait(), 20)
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(task, 20)


async def test_the_lease_is_not_released_while_a_thread_reconcile_may_still_write(
    client: ApiClient, namespace: str
) -> None:
    await create_configmaps(client, namespace, ["busy"])
    started = threading.Event()
    release = threading.Event()

    def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        started.set()
        release.wait(60)

    election = fast_election("thread-alive", namespace)
    ctl = Controller(client, CM, reconcile, namespace=namespace)
    mgr = Manager(
        client, leader_election=election, metrics_port=None, probe_port=None, drain_timeout=0.2
    )
    mgr.add(ctl)
    task = asyncio.create_task(mgr.run())
    try:
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 60)
        mgr.shutdown()  # the drain times out with the thread still running
        await asyncio.wait_for(task, 20)
        lease = await request_json(client, "GET", f"{LEASES}/{namespace}/leases/thread-alive")
        assert lease["spec"]["holderIdentity"] == election.identity  # not released
    finally:
        release.set()


HANGING_OPERATOR = """
import sys
import time

from fastctl import Controller, Resource


def make(client, namespace=None):
    def reconcile(obj, ctx):
        print("reconcile started", file=sys.stderr, flush=True)
        time.sleep(3600)  # a thread that never returns in time

    return Controller(client, Resource("v1", "ConfigMap"), reconcile, namespace=namespace)
"""


def start_hanging_operator(
    cp: ControlPlane, namespace: str, cwd: Path, log: Path
) -> subprocess.Popen[bytes]:
    """``fastctl run`` of HANGING_OPERATOR, leader-elected with a short lease."""
    command = [sys.executable, "-m", "fastctl.cli", "run", "hanging_operator:make"]
    where = ["--kubeconfig", str(cp.kubeconfig), "--namespace", namespace, "--metrics-port", "0"]
    where += ["--probe-port", "0"]
    lease = ["--leader-elect", "hanging", "--lease-namespace", namespace]
    timings = ["--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.3"]
    return subprocess.Popen(
        [*command, *where, *lease, *timings],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


async def test_fastctl_run_exits_3_on_a_lost_lease_without_waiting_for_threads(
    control_plane: ControlPlane, client: ApiClient, namespace: str, tmp_path: Path
) -> None:
    await create_configmaps(client, namespace, ["busy"])
    (tmp_path / "hanging_operator.py").write_text(HANGING_OPERATOR)
    log = tmp_path / "operator.log"
    proc = start_hanging_operator(control_plane, namespace, tmp_path, log)
    try:
        for _ in range(600):
            if "reconcile started" in log.read_text():
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the reconcile never started:\n{log.read_text()}")
        await steal_lease(client, namespace, "hanging")
        code = await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30)
        output = log.read_text()
        assert code == 3, output
        assert "exiting without waiting for them" in output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
