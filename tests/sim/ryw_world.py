"""The world of reading one's own writes: one real `Controller` whose reconciles create a
child of their widget when the cache shows none (by ``generateName``, so a stale cache makes
a second one), delete the extra children the cache shows, and write the widget's status,
behind watches that show each write only some seconds later.

- The controller caches its children (``owns(..., cache=True)``) and reads them there; the
  read-your-writes guard is on (`ReadYourWrites`, with the schedule's bound).
- Each reconcile records what its caches showed when it started (the widget's version, the
  children of its namespace and their versions) and what its writes were answered with
  (`RywRecord.views`, `RywRecord.wrote`), for `ryw_invariants`.
- Scripts make reconciles requeue at once (a follow-up before the watch shows the writes),
  fail after writing, or take a while; the other writers (the schedule) change widgets,
  delete children, slow the watches down or speed them up, break a watch (a relist) and
  take the server down.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl import Action, Controller, ReadYourWrites
from fastctl.kube import create, delete, patch
from fastctl.runtime._children import RelatedCache
from fastctl.testing import VirtualTimeLoop, run_virtual

from .apiserver import ApiServer, ServerConfig
from .record import Record
from .world import (
    CHILD,
    SETTLE,
    SPIN_LIMIT,
    START,
    WIDGET,
    Outcome,
    SimError,
    SimScheduler,
    stop_and_record,
)
from .writes_world import _wired

NAMESPACE = "a"
CTL = "ryw"
REQUEUE = 0.1
"""A requeue's delay: shorter than every watch delay the schedules draw."""


@dataclass(frozen=True)
class ROp:
    """One step of a schedule, `delay` virtual seconds after the previous one.

    Kinds: ``put``/``delete`` (widget `index`, by another writer); ``delete_child`` (the
    first child of widget `index`, by another writer); ``watch_delay`` (the watches show
    writes `arg` s late from now on); ``relist`` (the watch of `plural` breaks and comes back
    to a 410); ``outage`` (`arg` s)."""

    delay: float
    kind: str
    index: int = 0
    arg: float = 0.0
    plural: str = "children"


@dataclass(frozen=True)
class RywSchedule:
    """Everything one run does; Hypothesis generates these."""

    objects: int = 2
    ops: tuple[ROp, ...] = ()
    scripts: tuple[tuple[Outcome, ...], ...] = ()
    concurrency: int = 2
    max_wait: float = 3.0
    server: ServerConfig = field(default_factory=lambda: ServerConfig(watch_delay=1.0))
    seed: int = 0


@dataclass(frozen=True)
class View:
    """What the caches showed as a reconcile started: its widget's version, and every
    cached child of the namespace with its version."""

    widget: int
    children: dict[str, int]


@dataclass(frozen=True)
class Write:
    """A write a reconcile made and was answered for: `kind` create, delete or status."""

    plural: str
    name: str
    rv: int
    kind: str


@dataclass
class RywRecord(Record):
    """`Record`, plus each run's view (by its index in `runs`) and answered writes, and
    when each child was deleted on the server."""

    views: dict[int, View] = field(default_factory=dict)
    wrote: dict[int, list[Write]] = field(default_factory=lambda: defaultdict(list))
    deleted_at: dict[str, float] = field(default_factory=dict)
    created: int = 0


class _Reconciler:
    def __init__(
        self, record: RywRecord, schedule: RywSchedule, client: ApiClient, cache: RelatedCache
    ) -> None:
        self.record = record
        self.scripts = schedule.scripts
        self.client = client
        self.cache = cache
        self.count: dict[str, int] = defaultdict(int)

    async def __call__(self, obj: dict[str, Any], ctx: Any) -> Action | None:
        meta = obj["metadata"]
        name = meta["name"]
        key = f"{NAMESPACE}/{name}"
        index = int(name[1:])
        n = self.count[key]
        self.count[key] = n + 1
        script = self.scripts[index] if index < len(self.scripts) else ()
        outcome = script[n] if n < len(script) else Outcome("ok", 0.1)
        record = self.record
        run = record.start(CTL, key, str(meta["resourceVersion"]), outcome.kind, thread=False)
        run_index = len(record.runs) - 1
        children = {
            str(c["metadata"]["name"]): int(c["metadata"]["resourceVersion"])
            for c in self.cache.store.list(NAMESPACE)
        }
        record.views[run_index] = View(int(meta["resourceVersion"]), children)
        owned = sorted(str(c["metadata"]["name"]) for c in self.cache.owned_by(obj))
        try:
            await asyncio.sleep(outcome.duration)
            await self._write(obj, owned, record.wrote[run_index])
        finally:
            record.end(run)
        if outcome.kind == "requeue":
            return Action.requeue(REQUEUE)
        if outcome.kind == "error":
            raise SimError(f"scripted failure of {key}")
        return None

    async def _write(self, obj: dict[str, Any], owned: list[str], wrote: list[Write]) -> None:
        """One child, as the cache showed them; the widget's status: each write recorded
        once answered (a failed one is not: it changed nothing)."""
        name = obj["metadata"]["name"]
        log = self.record.log
        try:
            if not owned:
                owner = {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "name": name,
                    "uid": obj["metadata"]["uid"],
                    "controller": True,
                }
                child = {
                    "apiVersion": "example.com/v1",
                    "kind": "Child",
                    "metadata": {"generateName": f"{name}-", "ownerReferences": [owner]},
                    "spec": {"gen": 1},
                }
                made = await create(self.client, CHILD, child, namespace=NAMESPACE)
                wrote.append(_write("create", made))
                self.record.created += 1
                log.append(f"{self.record.now:.2f} {name} created {made['metadata']['name']}")
            for extra in owned[1:]:
                gone = await delete(self.client, CHILD, extra, namespace=NAMESPACE)
                if gone is not None:
                    wrote.append(_write("delete", gone))
                    log.append(f"{self.record.now:.2f} {name} deleted {extra}")
            status = {"status": {"children": len(owned)}}
            answer = await patch(
                self.client, WIDGET, name, status, namespace=NAMESPACE, subresource="status"
            )
            wrote.append(_write("status", answer))
        except Exception as exc:  # the server is down, or the object gone: no more writes
            log.append(f"{self.record.now:.2f} {name}: a write failed: {exc!r:.80}")


def _write(kind: str, answer: dict[str, Any]) -> Write:
    meta = answer["metadata"]
    plural = "widgets" if kind == "status" else "children"
    return Write(plural, str(meta["name"]), int(meta["resourceVersion"]), kind)


def _apply(op: ROp, server: ApiServer) -> None:
    kind = op.kind
    if kind == "put":
        server.put("widgets", f"w{op.index}", namespace=NAMESPACE)
    elif kind == "delete":
        server.delete("widgets", f"w{op.index}", namespace=NAMESPACE)
    elif kind == "delete_child":
        owner = f"w{op.index}"
        for (plural, key), obj in sorted(server.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if plural == "children" and any(r["name"] == owner for r in refs):
                server.delete("children", key.split("/")[1], namespace=NAMESPACE)
                break
    elif kind == "watch_delay":
        server.watch_delay = op.arg
        server.record.log.append(f"{server.now:.2f} watches now {op.arg} s late")
    elif kind == "relist":
        server.break_watch(op.plural)
    elif kind == "outage":
        server.outage(op.arg, compact=False)
    else:  # pragma: no cover
        raise ValueError(f"unknown op {kind!r}")


async def _simulate(schedule: RywSchedule, record: RywRecord, guard: bool) -> None:
    random.seed(schedule.seed)
    loop = asyncio.get_running_loop()
    server = ApiServer(record, schedule.server)
    for i in range(schedule.objects):
        server.put("widgets", f"w{i}", namespace=NAMESPACE)
    with _wired(server):
        client = ApiClient(Configuration(host="http://sim.invalid"))
        options = ReadYourWrites(enabled=guard, max_wait=schedule.max_wait)
        ctl = Controller(
            client,
            WIDGET,
            lambda obj, ctx: None,  # replaced below, once the cache exists
            name=CTL,
            concurrency=schedule.concurrency,
            scheduler=SimScheduler(CTL, record, schedule.concurrency),
            read_your_writes=options,
        )
        ctl.owns(CHILD, cache=True)
        ctl.reconcile = _Reconciler(record, schedule, client, ctl.cache(CHILD))

        async def consume() -> None:
            async for _ in ctl.stream():
                pass

        task = loop.create_task(consume())
        task.add_done_callback(lambda _: setattr(record, "stopped", loop.time()))
        last = loop.time()
        for op in schedule.ops:
            await asyncio.sleep(op.delay)
            _apply(op, server)
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
        for entry in server.history:
            if entry.resource == "children" and entry.etype == "DELETED":
                record.deleted_at[str(entry.obj["metadata"]["name"])] = entry.at
    await client.close()


def simulate(schedule: RywSchedule, *, guard: bool = True) -> RywRecord:
    """Run `schedule` on a fresh virtual loop (the guard on, unless told); what happened."""
    record = RywRecord()

    async def main() -> None:
        record.clock = VirtualTimeLoop.current().time
        await _simulate(schedule, record, guard)

    fastctl_log = logging.getLogger("fastctl")
    level = fastctl_log.level
    fastctl_log.setLevel(logging.CRITICAL)
    try:
        run_virtual(main(), start=START, spin_limit=SPIN_LIMIT, thread_grace=0)
    finally:
        fastctl_log.setLevel(level)
    return record


__all__ = ["CTL", "NAMESPACE", "ROp", "RywRecord", "RywSchedule", "View", "Write", "simulate"]
