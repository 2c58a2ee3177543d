"""The world of writes and related objects: one real `Controller` over widgets of the same
names in several namespaces, whose reconciles write their widget's status through fastctl's
object API (`fastctl.kube._objects.patch`), while other writers change the widgets and move
related objects between them.

- The controller watches every namespace, owns children (``ownerReferences``) and watches
  pointers (``spec.target`` names a widget: a mapper), optionally with
  ``ignore_own_writes=True``.
- A reconcile ends by writing its widget's status (a JSON merge patch of ``/status``):
  ``status.observed`` is the generation it saw, so a reconcile of a generation that was
  already recorded writes nothing new, a no-op the server answers with the object as it is.
  Scripts may make a reconcile requeue, fail or skip the write instead.
- Other writers (the schedule): a new generation of a widget at any time, or exactly while
  a controller's write to it is in flight (`ApiServer.race`); children created, moved to
  another owner and deleted; pointers created, pointed elsewhere and deleted; watches that
  break and come back to a 410 (a relist), outages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

import fastctl.kube._http as http_module
import fastctl.kube._watcher as watcher_module
from fastctl import Action, ApplierConfig, Controller, ObjectRef, Resource
from fastctl.kube import patch
from fastctl.testing import VirtualTimeLoop, run_virtual

from .apiserver import ApiServer, ServerConfig
from .record import Record
from .tls import rest_module, ssl_once
from .world import (
    CHILD,
    SETTLE,
    SPIN_LIMIT,
    START,
    WIDGET,
    Outcome,
    SimError,
    SimScheduler,
    patched,
    stop_and_record,
)

POINTER = Resource("example.com/v1", "Pointer", plural="pointers", namespaced=True)
NAMESPACES = ("a", "b", "c")
CTL = "writer"


@dataclass(frozen=True)
class WOp:
    """One step of a schedule, `delay` virtual seconds after the previous one, on object
    `index` of namespace `namespace` (``w<index>``, ``c<index>``, ``p<index>``).

    Kinds: ``put``/``delete`` (a widget, by another writer); ``race`` (another writer
    changes the widget during the controller's next write to it); ``burst`` (every widget
    re-triggered); ``put_child`` (child `index`, controlled by widget `target`: created or
    moved), ``delete_child``; ``put_pointer`` (pointer `index` at widget `target`, or at
    nothing if `target` < 0), ``delete_pointer``; ``relist`` (the watch of `plural` breaks
    and comes back to a 410); ``outage`` (`arg` s, compacted if `flag`)."""

    delay: float
    kind: str
    namespace: int = 0
    index: int = 0
    target: int = -1
    arg: float = 0.0
    plural: str = "widgets"
    flag: bool = False


@dataclass(frozen=True)
class WritesSchedule:
    """Everything one run does; Hypothesis generates these."""

    namespaces: int = 2
    objects: int = 2
    ops: tuple[WOp, ...] = ()
    scripts: tuple[tuple[Outcome, ...], ...] = ()
    ignore_own_writes: bool = True
    concurrency: int = 2
    server: ServerConfig = field(default_factory=ServerConfig)
    seed: int = 0


@dataclass
class WritesRecord(Record):
    """`Record`, plus the versions the controller's writes were answered with."""

    answers: list[tuple[float, str, int]] = field(default_factory=list)


def _pointer_targets(obj: dict[str, Any]) -> list[ObjectRef]:
    target = (obj.get("spec") or {}).get("target")
    return [ObjectRef(str(target), obj["metadata"]["namespace"])] if target else []


class _Reconciler:
    """Each reconcile of a widget sleeps as its script says, then writes its status."""

    def __init__(self, record: WritesRecord, schedule: WritesSchedule, client: ApiClient) -> None:
        self.record = record
        self.scripts = schedule.scripts
        self.client = client
        self.count: dict[str, int] = defaultdict(int)

    async def __call__(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        index = int(meta["name"][1:])
        n = self.count[key]
        self.count[key] = n + 1
        script = self.scripts[index] if index < len(self.scripts) else ()
        outcome = script[n] if n < len(script) else Outcome("ok", 0.1)
        run = self.record.start(CTL, key, str(meta["resourceVersion"]), outcome.kind, thread=False)
        try:
            await asyncio.sleep(outcome.duration)
            if outcome.kind in ("ok", "requeue"):
                status = {"observed": obj["spec"]["gen"]}
                answer = await patch(
                    self.client,
                    WIDGET,
                    meta["name"],
                    {"status": status},
                    namespace=meta["namespace"],
                    subresource="status",
                )
                rv = int(answer["metadata"]["resourceVersion"])
                self.record.answers.append((self.record.now, key, rv))
                self.record.log.append(f"{self.record.now:.2f} {key}: write answered rv={rv}")
        finally:
            self.record.end(run)
        if outcome.kind == "requeue":
            return Action.requeue(1.0)
        if outcome.kind == "error":
            raise SimError(f"scripted failure of {key}")
        return None


@contextlib.contextmanager
def _wired(server: ApiServer) -> Iterator[None]:
    """Point the watchers and fastctl's HTTP layer (every JSON request, the object API's
    writes among them) at the in-memory server."""
    patches: list[tuple[Any, str, Any]] = [
        (watcher_module, "request", server.request),
        (http_module, "request", server.request),
        (rest_module, "ssl", ssl_once()),
    ]
    with patched(patches):
        yield


async def _bursts(queue: asyncio.Queue[None]) -> AsyncIterator[None]:
    while True:
        await queue.get()
        yield None


def _apply(op: WOp, server: ApiServer, bursts: asyncio.Queue[None]) -> None:
    ns = NAMESPACES[op.namespace]
    kind = op.kind
    target = f"w{op.target}" if op.target >= 0 else None
    if kind == "put":
        server.put("widgets", f"w{op.index}", namespace=ns)
    elif kind == "delete":
        server.delete("widgets", f"w{op.index}", namespace=ns)
    elif kind == "race":
        server.race(f"{ns}/w{op.index}")
    elif kind == "burst":
        bursts.put_nowait(None)
    elif kind == "put_child":
        server.put("children", f"c{op.index}", owner=target, namespace=ns)
    elif kind == "delete_child":
        server.delete("children", f"c{op.index}", namespace=ns)
    elif kind == "put_pointer":
        server.put("pointers", f"p{op.index}", target=target or "", namespace=ns)
    elif kind == "delete_pointer":
        server.delete("pointers", f"p{op.index}", namespace=ns)
    elif kind == "relist":
        server.break_watch(op.plural)
    elif kind == "outage":
        server.outage(op.arg, compact=op.flag)
    else:  # pragma: no cover
        raise ValueError(f"unknown op {kind!r}")


async def _simulate(schedule: WritesSchedule, record: WritesRecord) -> None:
    random.seed(schedule.seed)
    loop = asyncio.get_running_loop()
    server = ApiServer(record, schedule.server)
    for ns in NAMESPACES[: schedule.namespaces]:
        for i in range(schedule.objects):
            server.put("widgets", f"w{i}", namespace=ns)
    bursts: asyncio.Queue[None] = asyncio.Queue()
    with _wired(server):
        client = ApiClient(Configuration(host="http://sim.invalid"))
        ctl = Controller(
            client,
            WIDGET,
            _Reconciler(record, schedule, client),
            name=CTL,
            # The simulation judges the writes and the scheduling, not Events.
            config=ApplierConfig(concurrency=schedule.concurrency, failure_events=False),
            scheduler=SimScheduler(CTL, record, schedule.concurrency),
            ignore_own_writes=schedule.ignore_own_writes,
        )
        ctl.owns(CHILD)
        ctl.watches(POINTER, _pointer_targets)
        ctl.reconcile_all_on(_bursts(bursts))

        async def consume() -> None:
            async for _ in ctl.stream():
                pass

        task = loop.create_task(consume())
        task.add_done_callback(lambda _: setattr(record, "stopped", loop.time()))
        last = loop.time()
        for op in schedule.ops:
            await asyncio.sleep(op.delay)
            _apply(op, server, bursts)
            last = max(last, loop.time(), server.down_until)
        await asyncio.sleep(max(0.0, last - loop.time()) + SETTLE)
        record.settled_at = loop.time()
        record.quiet_from = last
        record.in_flight_at_settle[CTL] = ctl.scheduler.in_flight
        record.running_at_settle[CTL] = sum(1 for r in record.runs if r.end is None)
        record.settled_running = not task.done()
        record.stop_asked = loop.time()
        await stop_and_record(record, task, ctl.shutdown, 30.0)
        record.in_flight_at_end[CTL] = ctl.scheduler.in_flight
    await client.close()


def simulate(schedule: WritesSchedule) -> WritesRecord:
    """Run `schedule` on a fresh virtual loop; return what happened."""
    record = WritesRecord()

    async def main() -> None:
        record.clock = VirtualTimeLoop.current().time
        await _simulate(schedule, record)

    fastctl_log = logging.getLogger("fastctl")
    level = fastctl_log.level
    fastctl_log.setLevel(logging.CRITICAL)
    try:
        run_virtual(main(), start=START, spin_limit=SPIN_LIMIT, thread_grace=0)
    finally:
        fastctl_log.setLevel(level)
    return record


__all__ = ["NAMESPACES", "WOp", "WritesRecord", "WritesSchedule", "simulate"]
