"""The storage-version migration's logic on the fake cluster (`fastctl.kube._storage_migration`):
every object of every page written with a precondition and nothing else, conflicts read
again, deleted objects skipped, the rate kept, ``status.storedVersions`` patched last and
only after a complete pass, a failed write stopping the run with the server's message; and
the Manager starting a runnable that needs leader election only once it leads.

The fake cluster stores no encoding, so every write here is one the server skips (the
objects count as *current*); that writes re-encode, and what etcd holds afterwards, is
shown on the real API server (tests/kube/test_storage_migration.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fastctl import RateLimit, StorageMigration, StorageMigrationError
from fastctl.kube._migration_metrics import MigrationTotals
from fastctl.kube._storage_migration import MigrationProgress, storage_version_hash
from fastctl.runtime._storage_migration import StorageMigrationCollector
from fastctl.testing import FakeCluster, RecordedRequest, run_virtual, virtual_time

GROUP = "migrate.fastctl.dev"
CRD_NAME = f"things.{GROUP}"
FAST = RateLimit(qps=1e6, burst=1_000_000)


def thing_crd(storage: str) -> dict[str, Any]:
    schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            },
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [
                {"name": v, "served": True, "storage": v == storage, "schema": schema}
                for v in ("v1alpha1", "v1")
            ],
        },
    }


def thing(name: str, namespace: str = "default", n: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Thing",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"n": n},
    }


async def switched(count: int) -> FakeCluster:
    """A fake cluster with `count` Things created at v1alpha1, then storage switched to v1."""
    cluster = FakeCluster(thing_crd("v1alpha1"), namespaces=("default", "other"))
    for i in range(count):
        cluster.create(thing(f"t{i:02d}", "default" if i % 3 else "other"))
    cluster.install(thing_crd("v1"))
    assert stored_versions(cluster) == ["v1alpha1", "v1"]
    return cluster


def stored_versions(cluster: FakeCluster) -> list[str]:
    crd = cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD_NAME)
    assert crd is not None
    return list(crd["status"]["storedVersions"])


def object_writes(cluster: FakeCluster) -> list[RecordedRequest]:
    return [r for r in cluster.requests_of("patch", "things") if r.status == 200]


def status_writes(cluster: FakeCluster) -> list[RecordedRequest]:
    return [
        r
        for r in cluster.requests_of("patch", "customresourcedefinitions")
        if r.subresource == "status"
    ]


@virtual_time
async def test_every_object_of_every_page_is_written_before_stored_versions_is_set() -> None:
    cluster = await switched(23)
    pages: list[int] = []

    def progress(state: MigrationProgress) -> None:
        pages.append(state.listed)
        assert stored_versions(cluster) == ["v1alpha1", "v1"], "not before the last page"

    async with cluster:
        result = await StorageMigration(
            cluster.client(), CRD_NAME, rate=FAST, page_size=5, progress=progress
        ).run()
    assert pages == [5, 10, 15, 20, 23]
    writes = object_writes(cluster)
    assert sorted((w.namespace, w.name) for w in writes) == sorted(
        ("default" if i % 3 else "other", f"t{i:02d}") for i in range(23)
    )
    for w in writes:  # nothing but the listed version, as a precondition, at v1
        assert w.body == {"metadata": {"resourceVersion": w.body["metadata"]["resourceVersion"]}}
        assert "/v1/" in w.path
    (status,) = status_writes(cluster)
    assert status.body["status"] == {"storedVersions": ["v1"]}
    assert status.body["metadata"]["resourceVersion"], "conditional on the CRD read"
    assert status.at >= max(w.at for w in writes)
    assert cluster.requests.index(status) > max(cluster.requests.index(w) for w in writes)
    assert stored_versions(cluster) == ["v1"]
    assert (result.listed, result.current, result.rewritten, result.gone) == (23, 23, 0, 0)
    assert result.done
    assert result.pages == 5
    assert result.stored_versions == ("v1alpha1", "v1")
    assert result.storage_version == "v1"


@virtual_time
async def test_a_conflict_is_read_again_and_written_at_the_new_version() -> None:
    cluster = await switched(4)
    cluster.conflict(verb="patch", resource="things", name="t02", times=2)
    async with cluster:
        result = await StorageMigration(cluster.client(), CRD_NAME, rate=FAST).run()
    assert result.conflicts == 2
    assert [r.verb for r in cluster.requests_of(resource="things", name="t02")] == [
        "patch",
        "get",
        "patch",
        "get",
        "patch",
    ]
    assert result.current == 4
    assert stored_versions(cluster) == ["v1"]


@virtual_time
async def test_an_object_changed_after_the_list_keeps_its_change() -> None:
    """The pages are one snapshot: an object changed after the first page is listed at its
    old version, so its write is refused (409), read again and written at the new one. The
    patch never carries a field, so the other writer's change stays."""
    cluster = await switched(6)
    last = ("other", "t03")  # the last key in list order (namespace/name)

    def change_the_last_object(state: MigrationProgress) -> None:
        if state.pages == 1:
            current = cluster.get(f"{GROUP}/v1", "Thing", last[1], last[0])
            assert current is not None
            cluster.update({**current, "spec": {"n": 99}})

    async with cluster:
        result = await StorageMigration(
            cluster.client(), CRD_NAME, rate=FAST, page_size=3, progress=change_the_last_object
        ).run()
    got = cluster.get(f"{GROUP}/v1", "Thing", last[1], last[0])
    assert got is not None
    assert got["spec"] == {"n": 99}
    assert result.conflicts == 1
    assert [r.status for r in cluster.requests_of("patch", "things", name=last[1])] == [409, 200]
    assert stored_versions(cluster) == ["v1"]


@virtual_time
async def test_an_object_deleted_meanwhile_is_skipped() -> None:
    cluster = await switched(5)
    cluster.fail(404, verb="patch", resource="things", name="t03")
    async with cluster:
        result = await StorageMigration(cluster.client(), CRD_NAME, rate=FAST).run()
    assert (result.gone, result.current) == (1, 4)
    assert stored_versions(cluster) == ["v1"]


@virtual_time
async def test_a_failed_write_stops_the_run_naming_the_webhook_and_keeps_stored_versions() -> None:
    cluster = await switched(12)
    message = (
        f"conversion webhook for {GROUP}/v1alpha1, Kind=Thing failed: Post "
        '"https://127.0.0.1:9443/convert/things": connect: connection refused'
    )
    cluster.fail(500, verb="patch", resource="things", name="t07", message=message)
    async with cluster:
        with pytest.raises(StorageMigrationError) as failed:
            await StorageMigration(cluster.client(), CRD_NAME, rate=FAST, page_size=4).run()
    text = str(failed.value)
    assert "the conversion webhook failed" in text
    assert "connection refused" in text
    assert "/t07" in text
    assert CRD_NAME in text
    assert "storedVersions left at ['v1alpha1', 'v1']" in text
    assert status_writes(cluster) == []
    assert stored_versions(cluster) == ["v1alpha1", "v1"]


@virtual_time
async def test_a_migrated_crd_is_not_listed() -> None:
    cluster = FakeCluster(thing_crd("v1"))
    cluster.create({**thing("a"), "apiVersion": f"{GROUP}/v1"})
    async with cluster:
        result = await StorageMigration(cluster.client(), CRD_NAME).run()
    assert result.done
    assert result.listed == 0
    assert cluster.requests_of("list", "things") == []
    assert status_writes(cluster) == []


def test_the_writes_keep_the_rate() -> None:
    """30 writes at 10 a second with a burst of 1: the last starts 2.9 s after the first."""

    async def main() -> tuple[float, float]:
        cluster = await switched(30)
        async with cluster:
            await StorageMigration(
                cluster.client(), CRD_NAME, rate=RateLimit(10, 1), concurrency=8
            ).run()
        times = [w.at for w in object_writes(cluster)]
        return min(times), max(times)

    first, last = run_virtual(main())
    assert last - first == pytest.approx(2.9, abs=0.05)


def test_the_storage_version_hash_is_the_api_servers() -> None:
    # What kube-apiserver v1.36 published for this kind stored at v1 (and at v1alpha1).
    assert storage_version_hash("exp.fastctl.dev", "v1", "Thing") == "JCl522PIWOU="
    assert storage_version_hash("exp.fastctl.dev", "v1alpha1", "Thing") == "d8iZ1X5l21A="


@virtual_time
async def test_a_server_not_storing_at_the_new_version_yet_is_not_migrated() -> None:
    cluster = await switched(2)
    real = cluster.server._discovery

    def stale(path: str) -> dict[str, Any]:
        found = real(path)
        for entry in found.get("resources") or ():
            entry["storageVersionHash"] = storage_version_hash(GROUP, "v1alpha1", "Thing")
        return found

    cluster.server._discovery = stale  # type: ignore[method-assign]
    async with cluster:
        with pytest.raises(StorageMigrationError, match="does not store at v1 yet"):
            await StorageMigration(cluster.client(), CRD_NAME, rate=FAST).run()
    assert object_writes(cluster) == []
    assert stored_versions(cluster) == ["v1alpha1", "v1"]


def test_the_metrics_count_objects_and_runs() -> None:
    totals = MigrationTotals()
    totals.begin("a.b")
    for result in ("rewritten", "rewritten", "current"):
        totals.object("a.b", result)
    totals.finished("a.b", "migrated")
    families = {m.name: m for m in StorageMigrationCollector(totals).collect()}
    samples = {
        (s.name, tuple(sorted(s.labels.values()))): s.value
        for m in families.values()
        for s in m.samples
    }
    assert samples[("fastctl_storage_migration_objects_total", ("a.b", "rewritten"))] == 2
    assert samples[("fastctl_storage_migration_objects_total", ("a.b", "current"))] == 1
    assert samples[("fastctl_storage_migration_runs_total", ("a.b", "migrated"))] == 1
    assert samples[("fastctl_storage_migration_running", ("a.b",))] == 0


def test_a_crd_is_named_by_name_object_or_model() -> None:
    from fastctl.runtime._storage_migration import crd_name_of

    assert crd_name_of(CRD_NAME) == CRD_NAME
    assert crd_name_of(thing_crd("v1")) == CRD_NAME
    with pytest.raises(ValueError, match="not a CRD name"):
        crd_name_of("things")


@virtual_time
async def test_as_a_runnable_it_retries_until_the_crd_is_migrated() -> None:
    cluster = await switched(3)
    cluster.fail(500, verb="patch", resource="things", name="t01", message="conversion webhook")
    async with cluster:
        migration = StorageMigration(cluster.client(), CRD_NAME, rate=FAST)
        assert migration.need_leader_election()
        await migration.start()
        result = await asyncio.wait_for(migration.wait(), 60)
        await migration.stop()
    assert result.done
    assert stored_versions(cluster) == ["v1"]
    failed = [r for r in cluster.requests_of("patch", "things") if r.status == 500]
    assert len(failed) == 1, "the first run failed, the second finished"


def test_the_command_takes_an_operator_models_or_crd_names() -> None:
    from fastctl.cli import CliError
    from fastctl.cli.migrate import crd_names

    names = crd_names(
        ["fastctl.demo.widgets:make_controller", CRD_NAME, "fastctl.demo.widgets:Widget"]
    )
    assert names == ["widgets.demo.fastctl.dev", CRD_NAME]
    with pytest.raises(CliError, match="expected module:attr or a CRD name"):
        crd_names(["things"])
