"""The sharding end-to-end run, shared by ``tests/kube/test_sharding_e2e.py`` (short) and
``benches/sharding/run.py`` (long): ``fastctl run --shard-group`` replicas of the recording
operator (``operators/sharded.py``) on a few hundred ConfigMaps that a writer keeps
changing; replicas join, leave on SIGTERM and die on SIGKILL; then the records are checked.

- **overlap**: never two reconciles of one object at once across replicas (the soak's
  check, `benches/soak/checks.py`, on the same record format);
- **lost**: every object's final resourceVersion was seen by a reconcile;
- **assignment**: in a quiet stretch, every reconcile ran on the replica whose member Lease
  publishes the object's slot (object by object; the same whether the server or the
  client filters);
- **share**: each replica's part of the watch events in that stretch
  (``fastctl_shard_events_received_total``) is its part of the objects (the writer picks
  objects uniformly), and that is about ``1/N``.

Self-contained (no package-relative imports), so the bench imports it by path too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl.kube._http import request_json
from fastctl.runtime.sharding._rules import SLOTS_ANNOTATION, parse_slots
from fastctl.runtime.sharding._slots import fnv1a_64, slot_of
from fastctl.testing import ControlPlane

HERE = Path(__file__).resolve().parent
OPERATOR = str(HERE / "operators" / "sharded.py") + ":make"
GROUP = "e2e"
JOINED = re.compile(r"shard group \S+: joining as '([^']+)'")


def soak_checks() -> ModuleType:
    """The soak's record checks (`intervals`, `overlaps`), loaded by path."""
    path = HERE.parent.parent / "benches" / "soak" / "checks.py"
    spec = importlib.util.spec_from_file_location("fastctl_soak_checks", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Replica:
    """One ``fastctl run --shard-group`` process."""

    name: str
    proc: subprocess.Popen[bytes]
    record: Path
    log: Path
    port: int
    """Its ``/metrics``, in plain HTTP (``--metrics-insecure``: the test scrapes it)."""
    probe_port: int
    """Its ``/healthz`` and ``/readyz``."""
    ended: float | None = None  # monotonic time it was seen to end

    @property
    def identity(self) -> str | None:
        """Its member identity, from its log (``joining as ...``)."""
        found = JOINED.search(self.log.read_text(errors="replace")) if self.log.exists() else None
        return found.group(1) if found else None

    async def metric(self, name: str) -> float:
        url = f"http://127.0.0.1:{self.port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            text = await resp.text()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name + "{") or line.startswith(name + " ")
        )

    async def ready(self) -> bool:
        url = f"http://127.0.0.1:{self.probe_port}/readyz"
        try:
            async with aiohttp.ClientSession() as session, session.get(url) as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False


@dataclass
class Cluster:
    """The replicas of one run, and the writer that keeps the objects changing."""

    cp: ControlPlane
    client: ApiClient
    namespace: str
    directory: Path
    slots: int = 256
    work: float = 0.1
    lease: tuple[float, float, float] = (3.0, 2.0, 0.3)
    """The member Leases' duration, renew deadline and retry period, in seconds."""
    operator: str = OPERATOR
    """What the replicas run: the recording ConfigMap operator, or another one that records
    its reconciles the same way (the demo's ``fastctl.demo.widgets:make_controller``)."""
    replicas: dict[str, Replica] = field(default_factory=dict)
    writes: int = 0

    def start(self, name: str) -> Replica:
        record = self.directory / f"{name}.jsonl"
        log = self.directory / f"{name}.log"
        port, probe_port = free_port(), free_port()
        argv = [
            sys.executable,
            "-m",
            "fastctl.cli",
            "run",
            self.operator,
            "--kubeconfig",
            str(self.cp.kubeconfig),
            "--namespace",
            self.namespace,
            "--shard-group",
            GROUP,
            "--shard-slots",
            str(self.slots),
            "--concurrency",
            "64",
            "--lease-namespace",
            self.namespace,
            "--lease-duration",
            str(self.lease[0]),
            "--renew-deadline",
            str(self.lease[1]),
            "--retry-period",
            str(self.lease[2]),
            "--metrics-port",
            str(port),
            "--metrics-insecure",
            "--probe-port",
            str(probe_port),
        ]
        env = {
            **os.environ,
            "RECORD_FILE": str(record),
            "FASTCTL_DEMO_RECORD": str(record),  # the demo operator's name for it
            "RECONCILE_SECONDS": str(self.work),
        }
        proc = subprocess.Popen(argv, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        replica = Replica(name, proc, record, log, port, probe_port)
        self.replicas[name] = replica
        return replica

    def live(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.proc.poll() is None]

    def stop(self, name: str, sig: signal.Signals) -> int:
        replica = self.replicas[name]
        replica.proc.send_signal(sig)
        code = replica.proc.wait(60)
        replica.ended = time.monotonic()
        return code

    def kill_all(self) -> None:
        for replica in self.replicas.values():
            if replica.proc.poll() is None:
                replica.proc.kill()
                replica.proc.wait(10)
                replica.ended = time.monotonic()

    # -- the objects ------------------------------------------------------------------

    @property
    def _path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps"

    async def create(self, count: int) -> None:
        async def one(i: int) -> None:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}}
            await request_json(self.client, "POST", self._path, body=orjson.dumps(body))

        for start in range(0, count, 20):
            await asyncio.gather(*(one(i) for i in range(start, min(count, start + 20))))

    async def write(self, count: int, rate: float, stop: asyncio.Event) -> None:
        """Change random objects at `rate` per second until `stop`."""
        while not stop.is_set():
            name = f"cm-{random.randrange(count)}"
            patch = {"data": {"n": str(self.writes)}}
            await request_json(
                self.client,
                "PATCH",
                f"{self._path}/{name}",
                body=orjson.dumps(patch),
                content_type="application/merge-patch+json",
            )
            self.writes += 1
            await asyncio.sleep(1 / rate)

    async def objects(self) -> list[dict[str, Any]]:
        answer = await request_json(self.client, "GET", self._path)
        return [o for o in answer["items"] if o["metadata"]["name"].startswith("cm-")]

    async def published(self) -> dict[str, frozenset[int]]:
        """Each member's published slots, by identity (holders only)."""
        answer = await request_json(
            self.client,
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
            query={"labelSelector": f"sharding.fastctl.dev/group={GROUP}"},
        )
        out = {}
        for lease in answer["items"]:
            holder = lease["spec"].get("holderIdentity")
            if holder:
                text = (lease["metadata"].get("annotations") or {}).get(SLOTS_ANNOTATION)
                out[holder] = parse_slots(text, self.slots)
        return out

    # -- waiting ------------------------------------------------------------------------

    async def settled(self, limit: float) -> None:
        """Every live replica ready, and the published slots a partition of all slots."""
        deadline = time.monotonic() + limit
        while True:
            ready = all([await r.ready() for r in self.live()])
            published = await self.published()
            live_ids = {r.identity for r in self.live()}
            parts = [published.get(i or "", frozenset()) for i in live_ids]
            partition = sum(len(p) for p in parts) == self.slots and set().union(*parts) == set(
                range(self.slots)
            )
            served = (
                sum([await r.metric("fastctl_shard_slots_served") for r in self.live()])
                if ready
                else 0
            )
            if ready and partition and set(published) <= live_ids and served == self.slots:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"not settled after {limit} s: published {published}")
            await asyncio.sleep(0.2)

    # -- the checks ---------------------------------------------------------------------

    def records(self) -> dict[str, list[dict[str, Any]]]:
        out = {}
        for name, replica in self.replicas.items():
            lines = replica.record.read_text().splitlines() if replica.record.exists() else []
            out[name] = [json.loads(line) for line in lines]
        return out

    def overlaps(self) -> list[dict[str, Any]]:
        checks = soak_checks()
        now = time.monotonic()
        spans = []
        for name, recs in self.records().items():
            ended = self.replicas[name].ended or now
            spans.extend(checks.intervals(name, recs, ended))
        found: list[dict[str, Any]] = checks.overlaps(spans)
        return found

    def unseen(self, objects: list[dict[str, Any]]) -> list[str]:
        """Objects whose final resourceVersion no reconcile started with."""
        seen = {
            (r["uid"], int(r["rv"]))
            for recs in self.records().values()
            for r in recs
            if r["ev"] == "start"
        }
        return [
            o["metadata"]["name"]
            for o in objects
            if not any(
                uid == o["metadata"]["uid"] and rv >= int(o["metadata"]["resourceVersion"])
                for uid, rv in seen
            )
        ]

    async def wait_all_seen(self, limit: float) -> list[dict[str, Any]]:
        objects = await self.objects()
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if not self.unseen(objects):
                break
            await asyncio.sleep(0.2)
        return objects

    def first_reconciles(self, since: float) -> dict[str, float]:
        """Each object's first reconcile start at or after `since` (monotonic), by uid."""
        first: dict[str, float] = {}
        for recs in self.records().values():
            for r in recs:
                if r["ev"] == "start" and r["mono"] >= since:
                    first[r["uid"]] = min(first.get(r["uid"], math.inf), r["mono"])
        return first

    def misplaced(
        self, since: float, until: float, published: dict[str, frozenset[int]]
    ) -> list[str]:
        """Reconciles started in ``[since, until)`` on a replica that does not publish the
        object's slot."""
        identities = {name: r.identity for name, r in self.replicas.items()}
        bad = []
        for name, recs in self.records().items():
            mine = published.get(identities[name] or "", frozenset())
            for r in recs:
                if r["ev"] == "start" and since <= r["mono"] < until:
                    slot = slot_of(fnv1a_64(r["uid"]), self.slots)
                    if slot not in mine:
                        bad.append(f"{name} reconciled {r['key']} (slot {slot})")
        return bad


async def steady_window(cluster: Cluster, seconds: float) -> dict[str, Any]:
    """A quiet stretch (no membership change) under writes: the replicas that reconciled
    outside their published slots, and each replica's share of the objects received."""
    live = cluster.live()
    published = await cluster.published()
    before = {r.name: await r.metric("fastctl_shard_events_received_total") for r in live}
    since = time.monotonic()
    await asyncio.sleep(seconds)
    until = time.monotonic()
    after = {r.name: await r.metric("fastctl_shard_events_received_total") for r in live}
    assert await cluster.published() == published, "membership changed in the window"
    received = {name: after[name] - before[name] for name in before}
    total = sum(received.values()) or 1.0
    records = cluster.records()
    uids = [o["metadata"]["uid"] for o in await cluster.objects()]
    return {
        "reconciles": {
            r.name: sum(1 for x in records[r.name] if x["ev"] == "start" and since <= x["mono"])
            for r in live
        },
        "misplaced": cluster.misplaced(since, until, published),
        "share": {name: n / total for name, n in received.items()},
        "received": received,
        "slots": {r.name: len(published.get(r.identity or "", ())) for r in live},
        # The writer picks objects uniformly: each replica's expected part of the events
        # is its part of the objects.
        "expected": {
            r.name: sum(
                slot_of(fnv1a_64(uid), cluster.slots) in published.get(r.identity or "", ())
                for uid in uids
            )
            / len(uids)
            for r in live
        },
    }
