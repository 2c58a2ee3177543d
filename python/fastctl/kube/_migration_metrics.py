"""Counts of what storage-version migrations did, for the ``fastctl_storage_migration_*``
metrics.

A migration (`fastctl.kube._storage_migration`) runs in the kube layer, which registers no
metric itself; it records here, per CRD, and the runtime's collector reads the totals when
Prometheus scrapes (a Manager registers it). Per process, like the request totals
(`fastctl.kube._request_metrics`): a command line run and a Manager's runnable count alike.
"""

from __future__ import annotations

import threading

__all__ = ["MIGRATIONS", "MigrationTotals"]


class MigrationTotals:
    """Objects by result and runs by outcome, per CRD; which CRDs are being migrated."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], int] = {}
        self._runs: dict[tuple[str, str], int] = {}
        self._running: dict[str, int] = {}

    def object(self, crd: str, result: str) -> None:
        """One object of `crd` handled: ``rewritten``, ``current``, ``gone``, or a
        ``conflict`` (a write refused, the object read again)."""
        with self._lock:
            self._objects[(crd, result)] = self._objects.get((crd, result), 0) + 1

    def begin(self, crd: str) -> None:
        with self._lock:
            self._running[crd] = self._running.get(crd, 0) + 1

    def finished(self, crd: str, outcome: str) -> None:
        """A run of `crd` ended: ``migrated``, ``nothing_to_do``, ``failed`` or ``stopped``
        (cancelled). Every outcome but ``nothing_to_do`` follows a `begin`."""
        with self._lock:
            self._runs[(crd, outcome)] = self._runs.get((crd, outcome), 0) + 1
            if outcome != "nothing_to_do":
                self._running[crd] = max(0, self._running.get(crd, 0) - 1)

    def objects(self) -> dict[tuple[str, str], int]:
        """(crd, result) -> objects, a copy."""
        with self._lock:
            return dict(self._objects)

    def runs(self) -> dict[tuple[str, str], int]:
        """(crd, outcome) -> runs, a copy."""
        with self._lock:
            return dict(self._runs)

    def running(self) -> dict[str, int]:
        """crd -> runs in progress, a copy (every CRD ever begun, 0 when none runs)."""
        with self._lock:
            return dict(self._running)


MIGRATIONS = MigrationTotals()
"""The process's totals: `fastctl.kube._storage_migration` records into it."""
