"""Leader election against the real API server: acquire, renew, hand over, and stop in time
when partitioned, with short timings (lease 2 s, renew deadline 1.5 s, retry 0.25 s). Every
test records each elector's terms the way a Manager acts on them (start at `wait_leading`,
stop at `wait_lost`) and checks that no two terms overlap."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.kube._http import ApiError, request_json
from fastctl.runtime.leader import LeaderElection, LeaderElector
from fastctl.runtime.leader._rules import LeaseRecord, micro_time, next_record
from fastctl.testing import ControlPlane

FAST: dict[str, Any] = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.25}
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")

SLACK = 0.5
"""Scheduling latency allowed on a loaded, shared machine. Only liveness bounds (how soon
something happens) get it; safety bounds (never before the lease expired) never do."""


# -- against the real API server ------------------------------------------------------

ClientFactory = Callable[..., Awaitable[ApiClient]]


@pytest.fixture
async def clients(control_plane: ControlPlane) -> AsyncIterator[ClientFactory]:
    """Make API clients (optionally to another address, e.g. a proxy); closed afterwards."""
    made: list[ApiClient] = []

    async def make(host: str | None = None) -> ApiClient:
        cfg = Configuration()
        await kube_config.load_kube_config(
            config_file=str(control_plane.kubeconfig), client_configuration=cfg
        )
        if host is not None:
            cfg.host = host
        client = ApiClient(cfg)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


@dataclass
class Terms:
    """Each elector's terms as (identity, start, end), recorded the way a Manager acts:
    start when `wait_leading` returns, end when `wait_lost` does."""

    log: list[tuple[str, float, float]] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    tenures: list[tuple[str, float, float]] = field(default_factory=list)
    """The electors' own tenures, exactly: from the answer that started one to its end (its
    deadline, or the moment it was ended sooner); bounds on these need no slack."""

    def follow(self, elector: LeaderElector) -> None:
        lose = elector._lose

        def recording_lose(reason: str, *, level: int = logging.WARNING) -> None:
            tenure = elector._tenure
            if tenure is not None:
                end = min(tenure.deadline, time.monotonic())
                self.tenures.append((elector.identity, tenure.started_at, end))
            lose(reason, level=level)

        elector._lose = recording_lose  # type: ignore[method-assign]

        async def follow() -> None:
            while True:
                term = await elector.wait_leading()
                start = time.monotonic()
                try:
                    await elector.wait_lost(term)
                finally:
                    self.log.append((elector.identity, start, time.monotonic()))

        self.tasks.append(asyncio.create_task(follow()))

    def of(self, identity: str) -> list[tuple[float, float]]:
        return [(start, end) for who, start, end in self.log if who == identity]

    def tenure(self, identity: str, index: int = 0) -> tuple[float, float]:
        return [(start, end) for who, start, end in self.tenures if who == identity][index]

    def assert_no_overlap(self) -> None:
        for record in (self.log, self.tenures):
            ordered = sorted(record, key=lambda term: term[1])
            for (who, _, end), (next_who, start, _) in itertools.pairwise(ordered):
                assert start >= end, f"{next_who} led from {start} before {who} stopped at {end}"

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@pytest.fixture
async def terms() -> AsyncIterator[Terms]:
    recorded = Terms()
    yield recorded
    await recorded.close()
    recorded.assert_no_overlap()


def _config(namespace: str, identity: str, **overrides: float) -> LeaderElection:
    return LeaderElection(
        "fastctl-test", namespace=namespace, identity=identity, **FAST | overrides
    )


async def _lease(client: ApiClient, namespace: str) -> dict[str, Any]:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/fastctl-test"
    lease: dict[str, Any] = await request_json(client, "GET", path)
    return lease


async def _elector(
    clients: ClientFactory, terms: Terms, namespace: str, identity: str, host: str | None = None
) -> LeaderElector:
    elector = LeaderElector(await clients(host), _config(namespace, identity))
    terms.follow(elector)
    return elector


async def _pair(
    clients: ClientFactory, terms: Terms, namespace: str, *, a_host: str | None = None
) -> tuple[LeaderElector, LeaderElector]:
    """Electors "a" (optionally through `a_host`) and "b" for one lease, both followed."""
    a = await _elector(clients, terms, namespace, "a", a_host)
    return a, await _elector(clients, terms, namespace, "b")


@contextlib.asynccontextmanager
async def _running(elector: LeaderElector) -> AsyncIterator[asyncio.Task[None]]:
    """Run `elector` in the background for the duration of the block."""
    task = asyncio.create_task(elector.run())
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@contextlib.asynccontextmanager
async def _leading(elector: LeaderElector) -> AsyncIterator[asyncio.Task[None]]:
    """Run `elector` until it leads, so that a candidate started next finds it leading."""
    async with _running(elector) as task:
        await asyncio.wait_for(elector.wait_leading(), 10)
        yield task


@pytest.mark.kube
async def test_acquires_an_absent_lease_and_renews_it(
    clients: ClientFactory, terms: Terms, namespace: str
) -> None:
    a = await _elector(clients, terms, namespace, "a")
    async with _leading(a):
        assert await a.wait_leading() == 1  # the first term; returns at once
        assert a.is_leader
        assert a.leader == "a"
        first = (await _lease(await clients(), namespace))["spec"]
        assert first["holderIdentity"] == "a"
        assert first["leaseDurationSeconds"] == 2
        assert first["leaseTransitions"] == 0
        assert MICRO_TIME.match(first["acquireTime"])
        assert MICRO_TIME.match(first["renewTime"])
        await asyncio.sleep(0.6)
        later = (await _lease(await clients(), namespace))["spec"]
        assert later["acquireTime"] == first["acquireTime"]
        assert later["renewTime"] > first["renewTime"]
        assert a.is_leader


@pytest.mark.kube
async def test_a_second_candidate_waits_while_the_leader_renews(
    clients: ClientFactory, terms: Terms, namespace: str
) -> None:
    a, b = await _pair(clients, terms, namespace)
    async with _leading(a), _running(b):
        await asyncio.sleep(2.5 * a.config.lease_duration)
        assert a.is_leader
        assert not b.is_leader
        assert b.leader == "a"
    assert terms.of("b") == []
    assert len(terms.of("a")) == 1


@pytest.mark.kube
async def test_a_killed_leader_is_replaced_after_the_lease_duration(
    clients: ClientFactory, terms: Terms, namespace: str
) -> None:
    a, b = await _pair(clients, terms, namespace)
    async with _leading(a) as a_run, _running(b):
        await asyncio.sleep(0.5)  # b has seen a's lease
        assert not b.is_leader
        # Cancelled without release(), as kill -9 would leave it: a stops at once, and the
        # lease still names it.
        until = a.leading_until
        assert until is not None
        last_renewal_sent = until - a.config.renew_deadline
        killed_before = time.monotonic()
        a_run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await a_run
        killed_at = time.monotonic()
        assert not a.is_leader
        await asyncio.wait_for(b.wait_leading(), 10)
        b_led_at = time.monotonic()
    config = a.config
    # b waits a full lease duration from the moment it saw a's last renewal, which it can
    # only have seen after a sent it; it wakes at the expiry, so not much later.
    assert b_led_at >= last_renewal_sent + config.lease_duration
    a_end = terms.tenure("a")[1]
    assert killed_before <= a_end <= killed_at  # cancelling run() ended it at once
    # Safety on the tenures themselves, no slack: b started a full lease duration after a's
    # last renewal was sent, so lease_duration - renew_deadline after a's deadline.
    assert terms.tenure("b")[0] >= last_renewal_sent + config.lease_duration
    assert b_led_at - killed_at <= config.lease_duration + 1.2 * config.retry_period + 2 * SLACK
    spec = (await _lease(await clients(), namespace))["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1


@pytest.mark.kube
async def test_release_lets_a_successor_take_over_within_a_retry_period(
    clients: ClientFactory, terms: Terms, namespace: str
) -> None:
    a, b = await _pair(clients, terms, namespace)
    async with _leading(a) as a_run, _running(b):
        await asyncio.sleep(0.5)
        released_at = time.monotonic()
        assert await a.release()
        assert not a.is_leader
        await asyncio.wait_for(a_run, 2)  # release() ends run()
        await asyncio.wait_for(b.wait_leading(), 5)
        took = time.monotonic() - released_at
    assert took < a.config.retry_period * 1.2 + 2 * SLACK
    spec = (await _lease(await clients(), namespace))["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert terms.of("a")[0][1] <= terms.of("b")[0][0]


class _Proxy:
    """A TCP proxy to the API server that can be frozen: bytes stop flowing both ways and
    new connections hang, as with a network partition (requests neither fail nor answer)."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("https://").rsplit(":", 1)
        self._target = (host, int(port))
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> _Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"https://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def freeze(self) -> None:
        self._flowing.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers.append(up_writer)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._tasks.add(task)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        sink.close()


@pytest.mark.kube
async def test_a_partitioned_leader_stops_before_the_lease_can_expire_for_others(
    clients: ClientFactory, terms: Terms, namespace: str, control_plane: ControlPlane
) -> None:
    async with _Proxy(control_plane.server) as proxy:
        a, b = await _pair(clients, terms, namespace, a_host=proxy.url)
        async with _leading(a), _running(b):
            await asyncio.sleep(0.5)
            until = a.leading_until
            assert until is not None
            proxy.freeze()
            frozen_at = time.monotonic()
            await asyncio.wait_for(a.wait_lost(), 5)
            a_lost_at = time.monotonic()
            await asyncio.wait_for(b.wait_leading(), 10)
            b_led_at = time.monotonic()
    config = a.config
    # a counts from its last renewal that got through, which was sent before the freeze.
    # (The slack here and below is for a loaded machine waking this test late.)
    assert a_lost_at - frozen_at <= config.renew_deadline + SLACK
    # b counts a full lease duration from when it saw that renewal (or a later one), which
    # it can only have seen after a sent it...
    assert b_led_at >= until - config.renew_deadline + config.lease_duration
    # ...so between a stopping and b starting lies lease_duration - renew_deadline (0.5 s).
    # The tenures themselves, exactly (safety: no slack).
    margin = config.lease_duration - config.renew_deadline
    a_end, b_start = terms.tenure("a")[1], terms.tenure("b")[0]
    assert b_start - a_end >= margin, (a_end, b_start)


@pytest.mark.kube
async def test_a_leader_whose_lease_is_taken_reports_the_loss_at_its_next_renewal(
    clients: ClientFactory, terms: Terms, namespace: str
) -> None:
    a = await _elector(clients, terms, namespace, "a")
    admin = await clients()
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/fastctl-test"
    async with _leading(a):
        while True:  # a foreign writer takes the lease (retrying on a's renewals)
            lease = await _lease(admin, namespace)
            record = next_record(LeaseRecord.from_lease(lease), "intruder", 2, micro_time())
            body = {**lease, "spec": record.to_spec()}
            sent_at = time.monotonic()  # a can only see the write after this
            try:
                await request_json(admin, "PUT", path, body=orjson.dumps(body))
                break
            except ApiError as exc:
                if exc.status != 409:
                    raise
        taken_at = time.monotonic()
        await asyncio.wait_for(a.wait_lost(), 5)
        noticed = time.monotonic() - taken_at
        assert noticed < a.config.retry_period + SLACK  # its next renewal, not its deadline
        assert a.leader == "intruder"
        # The intruder never renews: a takes the lease back once it expired on a's clock.
        assert await asyncio.wait_for(a.wait_leading(), 10) == 2
    # Safety, no slack: the foreign record's 2 s counted from no earlier than its sending.
    assert terms.tenure("a", 1)[0] - sent_at >= 2.0
    spec = (await _lease(admin, namespace))["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("a", 2)


@pytest.mark.kube
async def test_a_stopped_api_server_ends_leadership_within_the_renew_deadline(
    clients: ClientFactory, terms: Terms, namespace: str, control_plane: ControlPlane
) -> None:
    a, b = await _pair(clients, terms, namespace)
    async with _leading(a), _running(b):
        await asyncio.sleep(0.5)
        stopping_at = time.monotonic()
        stop = asyncio.create_task(control_plane.stop_apiserver())
        await asyncio.wait_for(a.wait_lost(), 5)
        assert time.monotonic() - stopping_at <= a.config.renew_deadline + SLACK
        await stop
        await control_plane.start_apiserver()
        # Someone leads again once the server is back (a, whose lease it still is, or b).
        await asyncio.wait_for(_either_leads(a, b), 20)


async def _either_leads(*electors: LeaderElector) -> None:
    waits = [asyncio.ensure_future(e.wait_leading()) for e in electors]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
