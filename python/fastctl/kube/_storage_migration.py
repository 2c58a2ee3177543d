"""Storage-version migration: every object of a custom resource rewritten at the CRD's
storage version, then ``status.storedVersions`` cut down to that version alone.

Why: the API server encodes an object at the storage version only when it writes it, so
after a CRD's storage version changes the objects already in etcd stay encoded in the old
one, and the CRD keeps that version in ``status.storedVersions``; while it is listed
there the version cannot be removed from ``spec.versions``. `migrate_storage` does what
kube-storage-version-migrator does, for one CRD, from the operator's own process:

1. read the CRD: its storage version ``S`` and its ``status.storedVersions``; nothing to
   do when they are ``[S]``. Check that the API server stores at ``S`` already: discovery's
   ``storageVersionHash`` of the resource is the hash of ``group/S/kind`` (a CRD change
   reaches the server's handlers a moment after it is written; absent on servers that do
   not publish it, and then not checked);
2. list the objects at ``S`` in pages (``limit``/``continue``: one snapshot), and write
   each one back unchanged: a JSON merge patch ``{"metadata": {"resourceVersion": RV}}``,
   RV the version listed. The patch names no field, so it cannot write a stale body over a
   change made meanwhile; the server decodes the object, converts it to ``S`` (through the
   conversion webhook when it is stored in another version), applies the empty change and
   encodes it at ``S``. When the bytes are those already stored (an object stored at ``S``)
   the server skips the write and answers the same ``resourceVersion``: such an object
   counts as *current*, one that gets a new version as *rewritten*. The version is a
   precondition: a 409 means another writer changed the object after the list, so it is
   read again and patched at its new version (counted in *conflicts*), which keeps the
   other writer's change and still proves the object re-encoded. A 404 means it was
   deleted: nothing to migrate (*gone*). Writes are paced by a `RateLimit` and at most
   `concurrency` are in flight;
3. read the CRD again: if its storage version is still ``S`` (same UID), patch its status
   subresource to ``storedVersions: [S]`` with the CRD's ``resourceVersion`` as a
   precondition (a 409: read again and check again).

Why ``[S]`` is then true: every object that existed at the list's snapshot was written by
the server at ``S`` after step 1 saw the server store at ``S`` (or was deleted), and an
object created or changed after the snapshot was written by a server that stored at ``S``
already. The one window left is a write that an API server began under the old storage
before it picked up the CRD change and committed after the snapshot (each server drains
those when it swaps storage; with several API servers, let the change reach them all
before migrating). A change of the storage version during the run stops it at step 3.

Killed at any point (a crash, a lost Lease, ``kill -9``), a run leaves
``status.storedVersions`` as it was, since step 3 is its last write and each object write
is complete or absent. The next run starts over from step 1, and is correct for the same
reason as the first: what the killed run rewrote is stored at ``S`` and unchanged, so the
server skips those writes (they cost one request each and no etcd write) and the run
counts them as *current*. Nothing is recorded between runs, so nothing can be stale.

Any other failure of a write stops the run with `StorageMigrationError` naming the CRD, the
object and the server's message, and ``storedVersions`` untouched. The usual one is the
conversion webhook not answering: the server cannot decode an object stored in the old
version, so it answers 500 ``conversion webhook for <group/version, Kind> failed``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl._clock import monotonic
from fastctl._rate import RateLimit, TokenBucket
from fastctl.errors import ApiError, StorageMigrationError
from fastctl.kube._call_retry import Safety
from fastctl.kube._http import request_json
from fastctl.kube._list import list_objects
from fastctl.kube._migration_metrics import MIGRATIONS
from fastctl.kube._objects import get, patch
from fastctl.kube._resource import ResolvedResource

__all__ = [
    "CRD",
    "DEFAULT_RATE",
    "FIELD_MANAGER",
    "MigrationProgress",
    "Progress",
    "migrate_storage",
    "storage_version_hash",
]

log = logging.getLogger("fastctl.migration")

CRD = ResolvedResource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False
)
FIELD_MANAGER = "fastctl-storage-migration"
DEFAULT_RATE = RateLimit(qps=100.0, burst=100)
"""Object writes a second by default: one a request, each decoded (and converted) and
encoded by the API server; a tenth of client-go's default for a whole controller's 1,000."""
_CONFLICT_RETRIES = 10
_STATUS_RETRIES = 5

Progress = Callable[["MigrationProgress"], Awaitable[None] | None]


@dataclass(slots=True)
class MigrationProgress:
    """What one run of `migrate_storage` did so far (and, at its end, in all)."""

    crd: str
    storage_version: str = ""
    stored_versions: tuple[str, ...] = ()
    """``status.storedVersions`` as the run found it."""
    listed: int = 0
    """Objects listed so far (every object is written once it is listed)."""
    rewritten: int = 0
    """Objects the server wrote again: they were stored in another version (or changed)."""
    current: int = 0
    """Objects already stored at the storage version: the server skipped the write."""
    gone: int = 0
    """Objects deleted between the list and their write."""
    conflicts: int = 0
    """Writes refused because another writer changed the object first (read again)."""
    pages: int = 0
    seconds: float = 0.0
    done: bool = False
    """``status.storedVersions`` is the storage version alone (set, or found so)."""
    started: float = field(default=0.0, repr=False)

    @property
    def written(self) -> int:
        """Objects handled: rewritten, current or gone."""
        return self.rewritten + self.current + self.gone

    @property
    def rate(self) -> float:
        """Objects handled a second so far."""
        return self.written / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        """One line, for logs and the command line."""
        return (
            f"{self.crd}: {self.written} objects ({self.rewritten} rewritten, {self.current} "
            f"already at {self.storage_version}, {self.gone} gone, {self.conflicts} "
            f"conflicts) in {self.seconds:.1f} s, {self.rate:.0f}/s"
        )


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """Discovery's ``storageVersionHash`` of a resource stored as ``group/version, kind``
    (the API server's own formula: the first 8 bytes of SHA-256, base64)."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode("ascii")


@dataclass(frozen=True, slots=True)
class _Plan:
    crd: str
    uid: str
    storage: str
    stored: tuple[str, ...]
    resource: ResolvedResource


def _plan(crd: Mapping[str, Any]) -> _Plan:
    name = crd["metadata"]["name"]
    spec = crd.get("spec") or {}
    storage = [v["name"] for v in spec.get("versions") or () if v.get("storage")]
    if len(storage) != 1:
        raise StorageMigrationError(f"{name}: no single storage version in spec.versions")
    names = spec.get("names") or {}
    resource = ResolvedResource(
        spec["group"],
        storage[0],
        names["kind"],
        names["plural"],
        spec.get("scope", "Namespaced") == "Namespaced",
    )
    stored = tuple((crd.get("status") or {}).get("storedVersions") or ())
    return _Plan(name, crd["metadata"].get("uid", ""), storage[0], stored, resource)


async def migrate_storage(
    client: ApiClient,
    crd_name: str,
    *,
    rate: RateLimit = DEFAULT_RATE,
    page_size: int = 500,
    concurrency: int = 8,
    progress: Progress | None = None,
) -> MigrationProgress:
    """Migrate CRD `crd_name` (``<plural>.<group>``) to its storage version (see the module
    docstring); returns what was done. `progress` is called after every page (and may be
    a coroutine function). `StorageMigrationError` when the run cannot finish: the
    CRD's ``status.storedVersions`` is then as it was."""
    if page_size <= 0 or concurrency <= 0:
        raise ValueError("page_size and concurrency must be positive")
    state = MigrationProgress(crd_name, started=monotonic())
    plan = _plan(await _read_crd(client, crd_name))
    state.storage_version, state.stored_versions = plan.storage, plan.stored
    if plan.stored == (plan.storage,):
        state.done = True
        MIGRATIONS.finished(crd_name, "nothing_to_do")
        return state
    await _check_served(client, crd_name, plan)
    log.info(
        "%s: migrating every object to %s (storedVersions %s)",
        crd_name,
        plan.storage,
        list(plan.stored),
    )
    MIGRATIONS.begin(crd_name)
    try:
        await _rewrite_all(client, plan, state, rate, page_size, concurrency, progress)
        await _set_stored_versions(client, crd_name, plan)
    except BaseException as exc:
        MIGRATIONS.finished(crd_name, "failed" if isinstance(exc, Exception) else "stopped")
        raise
    state.done = True
    state.seconds = monotonic() - state.started
    MIGRATIONS.finished(crd_name, "migrated")
    log.info("%s; storedVersions %s -> [%s]", state.summary(), list(plan.stored), plan.storage)
    return state


async def _read_crd(client: ApiClient, crd_name: str) -> dict[str, Any]:
    try:
        return await get(client, CRD, crd_name)
    except ApiError as exc:
        raise StorageMigrationError(f"{crd_name}: cannot read the CRD: {exc}") from exc


async def _check_served(client: ApiClient, crd_name: str, plan: _Plan) -> None:
    """The API server stores at the storage version already (its discovery says so)."""
    res = plan.resource
    try:
        found = await request_json(
            client, "GET", f"/apis/{res.group}/{res.version}", retry=Safety.IDEMPOTENT
        )
    except ApiError as exc:
        raise StorageMigrationError(
            f"{crd_name}: {res.group}/{res.version} is not served yet: {exc}"
        ) from exc
    entry = next((r for r in found.get("resources") or () if r.get("name") == res.plural), None)
    published = (entry or {}).get("storageVersionHash")
    expected = storage_version_hash(res.group, plan.storage, res.kind)
    if published and published != expected:
        raise StorageMigrationError(
            f"{crd_name}: the API server does not store at {plan.storage} yet (discovery's "
            f"storageVersionHash is {published}, not {expected}); try again once it has "
            "picked up the CRD change"
        )


async def _rewrite_all(
    client: ApiClient,
    plan: _Plan,
    state: MigrationProgress,
    rate: RateLimit,
    page_size: int,
    concurrency: int,
    progress: Progress | None,
) -> None:
    bucket = TokenBucket(rate)
    token: str | None = None
    while True:
        page = await _page(client, plan, page_size, token)
        items = page.get("items") or []
        state.listed += len(items)
        todo = iter(items)

        async def worker(todo: Iterator[dict[str, Any]]) -> None:
            for item in todo:  # the workers share one iterator: each item goes once
                wait = bucket.reserve(monotonic())
                if wait > 0:
                    await asyncio.sleep(wait)
                await _rewrite(client, plan, state, item)

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(concurrency, len(items))):
                    group.create_task(worker(todo))
        except BaseExceptionGroup as failed:  # the first failure; the others were cancelled
            first = failed.exceptions[0]
            raise first  # noqa: B904 (its own cause, the server's answer, is kept)
        state.pages += 1
        state.seconds = monotonic() - state.started
        log.info("%s", state.summary())
        if progress is not None:
            called = progress(state)
            if inspect.isawaitable(called):
                await called
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return


async def _page(
    client: ApiClient, plan: _Plan, page_size: int, token: str | None
) -> dict[str, Any]:
    try:
        return await list_objects(
            client, plan.resource, limit=page_size, continue_=token, all_pages=False
        )
    except ApiError as exc:
        if exc.status == 410 and token is not None:
            # The snapshot expired (a page took minutes): the server's Status carries a
            # token that goes on from the same key at the current version, which is as
            # good for us: what it skips was listed, what it adds is newer.
            fresh = ((exc.body or {}).get("metadata") or {}).get("continue")
            if fresh:
                return await _page(client, plan, page_size, fresh)
        raise StorageMigrationError(
            f"{plan.crd}: listing the objects at {plan.storage} failed{_cause(exc)}: {exc}; "
            f"status.storedVersions left at {list(plan.stored)}"
        ) from exc


async def _rewrite(
    client: ApiClient, plan: _Plan, state: MigrationProgress, item: Mapping[str, Any]
) -> None:
    """Write one object back unchanged at the storage version (see the module docstring)."""
    meta = item["metadata"]
    name, namespace = meta["name"], meta.get("namespace")
    version = meta["resourceVersion"]
    where = f"{namespace}/{name}" if namespace else name
    for _ in range(_CONFLICT_RETRIES):
        try:
            written = await patch(
                client,
                plan.resource,
                name,
                {"metadata": {"resourceVersion": version}},
                namespace=namespace,
                field_manager=FIELD_MANAGER,
            )
        except ApiError as exc:
            if exc.status == 404:
                state.gone += 1
                MIGRATIONS.object(plan.crd, "gone")
                return
            if exc.status != 409:
                raise _write_failed(plan, where, exc) from exc
            state.conflicts += 1
            MIGRATIONS.object(plan.crd, "conflict")
            try:
                fresh = await get(client, plan.resource, name, namespace=namespace)
            except ApiError as again:
                if again.status == 404:
                    state.gone += 1
                    MIGRATIONS.object(plan.crd, "gone")
                    return
                raise _write_failed(plan, where, again) from again
            version = fresh["metadata"]["resourceVersion"]
            continue
        result = "current" if written["metadata"]["resourceVersion"] == version else "rewritten"
        if result == "current":
            state.current += 1
        else:
            state.rewritten += 1
        MIGRATIONS.object(plan.crd, result)
        return
    raise StorageMigrationError(
        f"{plan.crd}: {where} changed {_CONFLICT_RETRIES} times while being "
        "migrated; storedVersions left unchanged"
    )


def _cause(exc: ApiError) -> str:
    """What the server's answer says went wrong, when it is the conversion webhook (its
    message names the webhook's URL and why it failed)."""
    return " (the conversion webhook failed)" if "conversion webhook" in exc.message else ""


def _write_failed(plan: _Plan, where: str, exc: ApiError) -> StorageMigrationError:
    return StorageMigrationError(
        f"{plan.crd}: rewriting {where} at {plan.storage} failed{_cause(exc)}: {exc}; "
        f"status.storedVersions left at {list(plan.stored)}"
    )


async def _set_stored_versions(client: ApiClient, crd_name: str, plan: _Plan) -> None:
    """``status.storedVersions: [S]``, if the CRD is the one migrated and still stores at S."""
    for _ in range(_STATUS_RETRIES):
        crd = await _read_crd(client, crd_name)
        now_plan = _plan(crd)
        if now_plan.uid != plan.uid or now_plan.storage != plan.storage:
            raise StorageMigrationError(
                f"{crd_name}: the CRD changed during the migration (storage version "
                f"{now_plan.storage}, was {plan.storage}); storedVersions left unchanged"
            )
        body = {
            "metadata": {"resourceVersion": crd["metadata"]["resourceVersion"]},
            "status": {"storedVersions": [plan.storage]},
        }
        try:
            await patch(client, CRD, crd_name, body, subresource="status")
        except ApiError as exc:
            if exc.status == 409:
                continue
            raise StorageMigrationError(
                f"{crd_name}: setting status.storedVersions failed: {exc}"
            ) from exc
        return
    raise StorageMigrationError(f"{crd_name}: the CRD kept changing; storedVersions unchanged")
