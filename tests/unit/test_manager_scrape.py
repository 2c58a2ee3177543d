"""A running Manager scraped over HTTP (no API server: the watches and the Lease are
faked): `/metrics` while reconciles are blocked and keys are queued, waiting and dirty, each
series with its known value; `/readyz` of a leader and of a warm standby before and after
their caches sync, and `leader_election_master_status` telling them apart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastctl import Action
from fastctl.kube._watcher import EventKind, ObjectEvent, WatchEvent
from fastctl.runtime.controller import Controller, _environment, _run
from fastctl.runtime.leader import LeaderElection
from fastctl.runtime.manager import Manager, ServerOptions

from .fake_lease import LeaseStore
from .test_controller_relist import WIDGET, Feed, client, listing, until, widget
from .test_manager_drain import elect_on, manager_client


class Feeds:
    """Each watch the controllers open gets a feed of its own; `on_error` is the watcher's
    callback, so a test can report retried errors as the watcher would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.feeds: list[Feed] = []
        self.on_error: list[Callable[[BaseException], None]] = []

        def watcher(*args: Any, on_error: Any = None, **kw: Any) -> AsyncIterator[WatchEvent]:
            feed = Feed()
            self.feeds.append(feed)
            self.on_error.append(on_error)
            return feed.events()

        monkeypatch.setattr(_environment, "watcher", watcher)

        monkeypatch.setattr(_run, "watcher", watcher)

    def push(self, *events: WatchEvent) -> None:
        for feed in self.feeds:
            feed.push(*events)


async def scrape(mgr: Manager, path: str) -> tuple[int, str]:
    """GET `path` from the server that serves it: the metrics one, the probe one."""
    server = mgr.metrics_server if path == "/metrics" else mgr.health
    assert server is not None
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{server.port}{path}") as resp,
    ):
        return resp.status, await resp.text()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def until_async(check: Callable[[], bool], what: str) -> None:
    """Wait in loop turns and short sleeps (the HTTP server needs real I/O)."""
    for _ in range(2000):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


@contextlib.asynccontextmanager
async def running(mgr: Manager) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(mgr.run())
    try:
        await until_async(
            lambda: mgr.metrics_server is not None and mgr.metrics_server.port != 0, "/metrics"
        )
        yield task
    finally:
        mgr.shutdown()
        await asyncio.wait_for(task, 10)


async def test_metrics_of_a_busy_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two reconciles blocked (one of them dirty), two keys ready behind them, one waiting
    for its requeue, two watch errors retried."""
    feeds = Feeds(monkeypatch)
    release = asyncio.Event()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
        if obj["metadata"]["name"] == "w":
            return Action.requeue(1000)
        await release.wait()
        return None

    ctl = Controller(client(), WIDGET, reconcile, name="widgets", concurrency=2)
    mgr = Manager(
        manager_client(),
        drain_timeout=0,
        servers=ServerOptions(
            metrics_port=0, metrics_host="127.0.0.1", metrics_secure=False, probe_port=None
        ),
    )
    mgr.add(ctl)
    async with running(mgr):
        await until(lambda: len(feeds.feeds) == 1, "the watch")
        feeds.push(*listing(widget("w", 0)))
        await until(lambda: ctl.scheduler.stats()["waiting"] == 1, "w requeued")
        for name in ("a", "b", "c", "d"):  # a, b run; c, d wait for a slot
            feeds.push(ObjectEvent(EventKind.APPLY, widget(name, 1)))
        await until(lambda: ctl.scheduler.in_flight == 2, "a and b running")
        feeds.push(ObjectEvent(EventKind.APPLY, widget("a", 2)))  # a dirty
        for _ in range(2):
            feeds.on_error[0](ConnectionError("reset"))
        await until(lambda: ctl.scheduler.stats()["dirty"] == 1, "a dirty")
        await asyncio.sleep(0.01)  # a and b have been running for a while
        status, text = await scrape(mgr, "/metrics")
        release.set()
    assert status == 200
    got = samples(text)
    queue = frozenset({("name", "widgets"), ("controller", "widgets")})
    ctl_label = frozenset({("controller", "widgets")})
    assert got[("workqueue_depth", queue)] == 2  # c and d: ready keys only
    assert got[("workqueue_delayed_items", queue)] == 1  # w
    assert got[("workqueue_queue_duration_seconds_count", queue)] == 3  # w, a, b popped
    assert got[("workqueue_unfinished_work_seconds", queue)] > 0
    assert got[("workqueue_longest_running_processor_seconds", queue)] > 0
    assert (
        got[("workqueue_unfinished_work_seconds", queue)]
        >= got[("workqueue_longest_running_processor_seconds", queue)]
    )
    assert got[("controller_runtime_max_concurrent_reconciles", ctl_label)] == 2
    assert got[("controller_runtime_active_workers", ctl_label)] == 2
    assert got[("fastctl_watch_errors_total", ctl_label)] == 2


def _election(identity: str) -> LeaderElection:
    # Real time: a renew deadline of 0.3 s passed on a loaded machine and the leader lost
    # its term mid-test. The hand-over below is a release (shutdown), not an expiry, so long
    # terms cost nothing; the short retry period keeps the standby's claim quick.
    return LeaderElection(
        "l", identity=identity, lease_duration=10.0, renew_deadline=5.0, retry_period=0.05
    )


async def test_readyz_and_master_status_of_a_leader_and_a_standby(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both are unready until their caches sync, then both are ready: a standby's cache is
    warm, so it is ready while it does not lead. The gauge says which one leads, and follows
    a hand-over."""
    feeds = Feeds(monkeypatch)
    elect_on(LeaseStore(), monkeypatch)
    done: dict[str, list[str]] = {"a": [], "b": []}

    def manager(identity: str) -> Manager:
        async def reconcile(obj: dict[str, Any], ctx: Any) -> Action | None:
            done[identity].append(obj["metadata"]["name"])
            return None

        ctl = Controller(client(), WIDGET, reconcile, name="widgets")
        return Manager(
            manager_client(),
            leader_election=_election(identity),
            servers=ServerOptions(
                metrics_port=0,
                metrics_host="127.0.0.1",
                metrics_secure=False,
                probe_port=0,
                probe_host="127.0.0.1",
            ),
        ).add(ctl)

    def master(text: str) -> float:
        return samples(text)[("leader_election_master_status", frozenset({("name", "l")}))]

    a, b = manager("a"), manager("b")
    async with running(a):
        await until_async(lambda: a.is_leader, "a to lead")
        async with running(b) as b_task:
            await until_async(lambda: len(feeds.feeds) == 2, "both watches")
            for mgr in (a, b):
                assert (await scrape(mgr, "/readyz"))[0] == 503
            assert master((await scrape(a, "/metrics"))[1]) == 1
            assert master((await scrape(b, "/metrics"))[1]) == 0
            feeds.push(*listing(widget("x", 0)))
            await until_async(lambda: a.is_ready() and b.is_ready(), "caches synced")
            await until_async(lambda: done["a"] == ["x"], "the leader's reconcile")
            for mgr in (a, b):
                assert (await scrape(mgr, "/readyz"))[0] == 200
            assert master((await scrape(b, "/metrics"))[1]) == 0
            assert done["b"] == []
            a.shutdown()  # releases the Lease: b takes over
            await until_async(lambda: b.is_leader and done["b"] == ["x"], "b to take over")
            assert master((await scrape(b, "/metrics"))[1]) == 1
            assert not b_task.done()
