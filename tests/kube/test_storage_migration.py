"""Storage-version migration on the real API server, checked in etcd itself.

A CRD with objects stored as v1alpha1 gets v1 as its storage version, with a conversion
webhook served from this process. What the API server stored is read from etcd directly
(its v3 JSON gateway on the control plane's client URL: ``POST /v3/kv/range`` over the
prefix ``/registry/<group>/<plural>/``; each value is the JSON the server wrote, with the
``apiVersion`` it encoded), never through the API server, which would convert it.

- 2,000 objects, migrated: every one stored as v1, ``status.storedVersions == ["v1"]``,
  objects changed during the run keep their change, and v1alpha1 can then be removed
  from the CRD (refused before);
- ``fastctl migrate`` killed half way: ``storedVersions`` untouched, a run again finishes,
  rewriting exactly the objects the first run had not;
- the conversion webhook down: the run stops with an error naming it, nothing changed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import sys
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import RateLimit, StorageMigration, StorageMigrationError
from fastctl.errors import ApiError
from fastctl.kube import Resource, create, get, patch
from fastctl.kube._http import request_json
from fastctl.kube._storage_migration import MigrationProgress, storage_version_hash
from fastctl.testing import ControlPlane
from fastctl.webhook import ServingCertificate, Webhooks, WebhookServer, install

from .conftest import GROUP, install_crd

pytestmark = pytest.mark.kube

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
FAST = RateLimit(qps=2000.0, burst=200)


def _crd(plural: str, storage: str, versions: tuple[str, ...] = ("v1alpha1", "v1")) -> Any:
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
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": plural[:-1].title()},
            "versions": [
                {"name": v, "served": True, "storage": v == storage, "schema": schema}
                for v in versions
            ],
        },
    }


@dataclass
class Migrant:
    """One CRD of the test, its objects created at v1alpha1 and its storage now v1."""

    cp: ControlPlane
    plural: str
    namespace: str
    server: WebhookServer
    count: int

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def kind(self) -> str:
        return self.plural[:-1].title()

    @property
    def v1(self) -> Resource:
        return Resource(f"{GROUP}/v1", self.kind, plural=self.plural, namespaced=True)

    def stored_versions(self) -> list[str]:
        status, crd = self.cp.api_request("GET", f"{CRD_PATH}/{self.name}")
        assert status == 200, crd
        return list(crd["status"]["storedVersions"])

    def etcd_versions(self) -> Counter[str]:
        """apiVersion -> objects, as etcd holds them (not through the API server)."""
        prefix = f"/registry/{GROUP}/{self.plural}/".encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        body = json.dumps(
            {"key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(end).decode()}
        ).encode()
        request = urllib.request.Request(f"{self.cp.etcd_url}/v3/kv/range", data=body)
        with urllib.request.urlopen(request, timeout=30) as answer:
            found = json.loads(answer.read())
        values = [json.loads(base64.b64decode(kv["value"])) for kv in found.get("kvs") or ()]
        return Counter(value["apiVersion"] for value in values)

    def remove_v1alpha1(self) -> tuple[int, Any]:
        """PUT the CRD without v1alpha1 in spec.versions: (status, answer)."""
        status, crd = self.cp.api_request("GET", f"{CRD_PATH}/{self.name}")
        assert status == 200
        crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] != "v1alpha1"]
        return self.cp.api_request("PUT", f"{CRD_PATH}/{self.name}", crd)


async def _eventually(probe: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(600):
        if await probe():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: never happened")


@pytest.fixture
async def migrant(
    client: ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> AsyncIterator[Callable[[str, int], Awaitable[Migrant]]]:
    """``await migrant(plural, count)``: the CRD `plural` with `count` objects stored as
    v1alpha1 (``spec.count``), a conversion webhook to v1 (``spec.replicas``) served from
    this process, and the storage version switched to v1; deleted after the test."""
    made: list[Migrant] = []

    async def make(plural: str, count: int) -> Migrant:
        name = f"{plural}.{GROUP}"
        await asyncio.to_thread(install_crd, control_plane, _crd(plural, "v1alpha1"))
        hooks = Webhooks()
        converter = hooks.conversion(name)

        @converter.converts("v1alpha1", "v1")
        def up(obj: dict[str, Any]) -> dict[str, Any]:
            obj["spec"] = {"replicas": obj["spec"].get("count")}
            return obj

        @converter.converts("v1", "v1alpha1")
        def down(obj: dict[str, Any]) -> dict[str, Any]:
            obj["spec"] = {"count": obj["spec"].get("replicas")}
            return obj

        cert = ServingCertificate.self_signed(tmp_path / plural, ["127.0.0.1"])
        server = WebhookServer(hooks, cert, port=0, host="127.0.0.1")
        await server.start()
        made.append(Migrant(control_plane, plural, namespace, server, count))
        await install(client, hooks, f"migrate-{plural}", url=server.url, ca_bundle=cert.ca_bundle)
        old = Resource(f"{GROUP}/v1alpha1", plural[:-1].title(), plural=plural, namespaced=True)
        gate = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            body = {"metadata": {"name": f"m{i:04d}", "namespace": namespace}, "spec": {"count": i}}
            async with gate:
                for _ in range(50):  # the conversion change re-creates the storage: 429s
                    try:
                        await create(client, old, body)
                        return
                    except ApiError as exc:
                        if exc.status != 429:
                            raise
                        await asyncio.sleep(0.1)

        await asyncio.gather(*(one(i) for i in range(count)))
        status, crd = control_plane.api_request("GET", f"{CRD_PATH}/{name}")
        for version in crd["spec"]["versions"]:
            version["storage"] = version["name"] == "v1"
        status, answer = control_plane.api_request("PUT", f"{CRD_PATH}/{name}", crd)
        assert status == 200, answer
        assert answer["status"]["storedVersions"] == ["v1alpha1", "v1"]
        expected = storage_version_hash(GROUP, "v1", plural[:-1].title())

        async def stores_v1() -> bool:
            found = await request_json(client, "GET", f"/apis/{GROUP}/v1")
            entry = [r for r in found["resources"] if r["name"] == plural]
            return bool(entry) and entry[0].get("storageVersionHash") == expected

        await _eventually(stores_v1, "the API server storing at v1")
        return made[-1]

    yield make
    for m in made:
        await m.server.stop()
        await asyncio.to_thread(control_plane.api_request, "DELETE", f"{CRD_PATH}/{m.name}")


async def test_2000_objects_are_stored_as_v1_and_v1alpha1_can_then_be_removed(
    client: ApiClient, migrant: Callable[[str, int], Awaitable[Migrant]]
) -> None:
    m = await migrant("migrants", 2000)
    assert m.etcd_versions() == {f"{GROUP}/v1alpha1": 2000}
    status, refused = await asyncio.to_thread(m.remove_v1alpha1)
    assert status == 422
    assert "storedVersions" in refused["message"]

    # Objects of the last page changed while the first is being written: listed at their
    # old version (the pages are one snapshot), their writes meet a conflict.
    changed = [f"m{i:04d}" for i in range(1990, 1995)]

    async def change_some(state: MigrationProgress) -> None:
        if state.pages == 1:
            for name in changed:
                await patch(client, m.v1, name, {"spec": {"replicas": -1}}, namespace=m.namespace)

    migration = StorageMigration(
        client, m.name, rate=FAST, page_size=500, concurrency=16, progress=change_some
    )
    result = await migration.run()
    print(f"\nmigrated 2000 objects: {result.summary()}")
    assert m.etcd_versions() == {f"{GROUP}/v1": 2000}
    assert m.stored_versions() == ["v1"]
    for name in changed:
        got = await get(client, m.v1, name, namespace=m.namespace)
        assert got["spec"] == {"replicas": -1}, "the change made during the migration is kept"
    assert result.conflicts == len(changed)
    # The changed ones were re-encoded by that change: the run found them current.
    assert (result.rewritten, result.current, result.gone) == (1995, 5, 0)
    assert result.listed == 2000
    assert result.pages == 4

    status, answer = await asyncio.to_thread(m.remove_v1alpha1)
    assert status == 200, answer
    assert [v["name"] for v in answer["spec"]["versions"]] == ["v1"]


_PROGRESS = re.compile(r": (\d+) objects \((\d+) rewritten, (\d+) already at v1")


async def _fastctl_migrate(
    cp: ControlPlane, name: str, *, kill_at: int | None = None
) -> tuple[int, list[str]]:
    """Run ``fastctl migrate NAME`` (100 writes a second, pages of 100); with `kill_at`,
    SIGKILL it once it reports that many objects. (exit status, its stderr lines)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fastctl.cli", "migrate", name,
        "--kubeconfig", str(cp.kubeconfig), "--qps", "100", "--page-size", "100",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    lines: list[str] = []
    try:
        async for raw in process.stderr:
            line = raw.decode().rstrip()
            lines.append(line)
            found = _PROGRESS.search(line)
            if kill_at is not None and found and int(found.group(1)) >= kill_at:
                process.send_signal(signal.SIGKILL)
                break
        return await asyncio.wait_for(process.wait(), 120), lines
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_killed_migration_runs_again_and_finishes(
    control_plane: ControlPlane, migrant: Callable[[str, int], Awaitable[Migrant]]
) -> None:
    m = await migrant("resumers", 600)
    code, lines = await _fastctl_migrate(control_plane, m.name, kill_at=300)
    assert code == -signal.SIGKILL, lines
    assert m.stored_versions() == ["v1alpha1", "v1"], "a killed run changed nothing there"
    half = m.etcd_versions()
    done = half[f"{GROUP}/v1"]
    assert 300 <= done < 600, half
    assert half[f"{GROUP}/v1alpha1"] == 600 - done, half

    code, lines = await _fastctl_migrate(control_plane, m.name)
    assert code == 0, lines
    last = [found for line in lines if (found := _PROGRESS.search(line))][-1]
    written, rewritten, current = (int(g) for g in last.groups())
    assert (written, rewritten, current) == (600, 600 - done, done), lines
    assert lines[-1].endswith("done, storedVersions ['v1alpha1', 'v1'] -> [v1]")
    assert m.etcd_versions() == {f"{GROUP}/v1": 600}
    assert m.stored_versions() == ["v1"]


async def test_with_the_conversion_webhook_down_it_stops_naming_it_and_changes_nothing(
    client: ApiClient, migrant: Callable[[str, int], Awaitable[Migrant]]
) -> None:
    m = await migrant("strandeds", 40)
    await m.server.stop()
    with pytest.raises(StorageMigrationError) as failed:
        await StorageMigration(client, m.name, rate=FAST).run()
    text = str(failed.value)
    assert "the conversion webhook failed" in text
    assert f"conversion webhook for {GROUP}/v1alpha1, Kind=Stranded failed" in text
    assert "storedVersions left at ['v1alpha1', 'v1']" in text
    assert m.stored_versions() == ["v1alpha1", "v1"]
    assert m.etcd_versions() == {f"{GROUP}/v1alpha1": 40}
