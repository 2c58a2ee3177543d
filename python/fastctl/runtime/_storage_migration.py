"""`StorageMigration`: a CRD's storage-version migration, run once or kept by a Manager.

The migration itself is `fastctl.kube._storage_migration` (what it writes, and why it is
correct when killed and run again). Here it becomes something an operator runs:

- ``await StorageMigration(client, Widget).run()``: one run, as ``fastctl migrate`` does;
  `StorageMigrationError` when it cannot finish;
- ``manager.add_runnable(StorageMigration(client, Widget))``: a component of the operator.
  It needs leader election (``need_leader_election()``, as controller-runtime's runnables
  say it), so a Manager with a `LeaderElection` starts it only on the replica that leads,
  once it leads; a lost Lease stops the process and the next leader starts over, which is
  safe (see the kube module). It retries a failed run with backoff (10 s, doubling, up to
  5 min), logging each failure: the conversion webhook it needs may be this very process's
  webhook server, still starting. Once the CRD is migrated it is done until the next start.

Beside the operator's reconciles it is safe: each write names no field and carries the
version it read (a 409 is read again), so a reconcile's change is never undone. Each object
it rewrites comes back to the operator's watches as a change of ``resourceVersion`` alone:
``event_filter=generation_changed`` holds those events back.

Its progress is in the log (``fastctl.migration``, a line per page) and in the metrics a
Manager serves (`StorageMigrationCollector`):

- ``fastctl_storage_migration_objects_total{crd,result}``: ``rewritten``, ``current``
  (already at the storage version), ``gone`` (deleted meanwhile), ``conflict``;
- ``fastctl_storage_migration_runs_total{crd,outcome}``: ``migrated``, ``nothing_to_do``,
  ``failed``, ``stopped``;
- ``fastctl_storage_migration_running{crd}``: 1 while a run is under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes_asyncio.client import ApiClient
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fastctl._rate import RateLimit
from fastctl.kube._migration_metrics import MIGRATIONS, MigrationTotals
from fastctl.kube._retry import Backoff
from fastctl.kube._storage_migration import (
    DEFAULT_RATE,
    MigrationProgress,
    Progress,
    migrate_storage,
)

__all__ = ["StorageMigration", "StorageMigrationCollector"]

log = logging.getLogger("fastctl.migration")


def crd_name_of(crd: Any) -> str:
    """``<plural>.<group>`` of a CRD name, a CRD object, or a model with ``crd()``."""
    if isinstance(crd, str):
        if "." not in crd:
            raise ValueError(f"{crd!r} is not a CRD name (<plural>.<group>)")
        return crd
    if isinstance(crd, Mapping):
        return str(crd["metadata"]["name"])
    make = getattr(crd, "crd", None)
    if callable(make):
        return str(make()["metadata"]["name"])
    raise TypeError(f"expected a CRD name, a CRD or a CustomResource model, got {crd!r}")


class StorageMigration:
    """The storage-version migration of one CRD (see the module docstring).

    `crd`: its name (``widgets.example.com``), the CRD object, or a `CustomResource`
    model. `rate` paces the object writes (100 a second by default); `page_size` objects
    are listed a request, `concurrency` written at once. `progress` is called after every
    page with the run's `MigrationProgress` (its ``summary()`` is one line)."""

    def __init__(
        self,
        client: ApiClient,
        crd: Any,
        *,
        rate: RateLimit = DEFAULT_RATE,
        page_size: int = 500,
        concurrency: int = 8,
        progress: Progress | None = None,
    ) -> None:
        if page_size <= 0 or concurrency <= 0:
            raise ValueError("page_size and concurrency must be positive")
        self.client = client
        self.crd = crd_name_of(crd)
        self.rate = rate
        self.page_size = page_size
        self.concurrency = concurrency
        self.progress = progress
        self.result: MigrationProgress | None = None
        """The run that migrated the CRD (or found it migrated), once there is one."""
        self._task: asyncio.Task[None] | None = None
        self._done = asyncio.Event()

    async def run(self) -> MigrationProgress:
        """One run: the CRD migrated when it returns (`StorageMigrationError` if not)."""
        result = await migrate_storage(
            self.client,
            self.crd,
            rate=self.rate,
            page_size=self.page_size,
            concurrency=self.concurrency,
            progress=self.progress,
        )
        self.result = result
        self._done.set()
        return result

    # -- as a Manager's runnable ----------------------------------------------------------

    def need_leader_election(self) -> bool:
        """A Manager with leader election starts it on the leader only."""
        return True

    async def start(self) -> None:
        """Run in the background until the CRD is migrated, retrying failures."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._keep_trying(), name=f"migrate {self.crd}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait(self) -> MigrationProgress:
        """Until a run has migrated the CRD; its result."""
        await self._done.wait()
        assert self.result is not None
        return self.result

    async def _keep_trying(self) -> None:
        backoff = Backoff(initial=10.0, maximum=300.0)
        while True:
            try:
                await self.run()
                return
            except Exception as exc:  # a webhook not up yet, an API server away: later
                delay = backoff.next_delay()
                log.error("storage migration of %s: %s (next try in %.0f s)", self.crd, exc, delay)
                await asyncio.sleep(delay)


class StorageMigrationCollector(Collector):
    """The ``fastctl_storage_migration_*`` metrics over the process's totals."""

    def __init__(self, totals: MigrationTotals = MIGRATIONS) -> None:
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        objects = CounterMetricFamily(
            "fastctl_storage_migration_objects",
            "Objects a storage-version migration handled, by CRD and result",
            labels=["crd", "result"],
        )
        for (crd, result), count in sorted(self._totals.objects().items()):
            objects.add_metric([crd, result], count)
        runs = CounterMetricFamily(
            "fastctl_storage_migration_runs",
            "Storage-version migration runs, by CRD and outcome",
            labels=["crd", "outcome"],
        )
        for (crd, outcome), count in sorted(self._totals.runs().items()):
            runs.add_metric([crd, outcome], count)
        running = GaugeMetricFamily(
            "fastctl_storage_migration_running",
            "Storage-version migration runs under way, by CRD",
            labels=["crd"],
        )
        for crd, count in sorted(self._totals.running().items()):
            running.add_metric([crd], count)
        yield objects
        yield runs
        yield running
