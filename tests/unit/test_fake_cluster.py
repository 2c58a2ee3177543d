"""`fastctl.testing.FakeCluster`: the in-memory API server answers fastctl's own client as a
real one does. Objects (versions, generation, the status subresource, finalizers, garbage
collection), the patch types (merge, JSON, server-side apply with its conflicts), selectors,
CRD schemas, watches (selectors, 410 and relist, outages, pages), faults and the record of
requests, all through `fastctl.kube` on a virtual clock."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient
from pydantic import Field

from fastctl import (
    Action,
    Controller,
    CustomResource,
    KubeModel,
    LeaderElection,
    Manager,
    Resource,
)
from fastctl.errors import ApiError
from fastctl.kube import (
    ObjectEvent,
    WatchConfig,
    apply,
    apply_status,
    create,
    delete,
    get,
    owner_reference,
    patch,
    watcher,
)
from fastctl.kube import list as list_objects
from fastctl.testing import (
    FakeCluster,
    reconcile_once,
    run_until_quiet,
    run_virtual,
    virtual_time,
)
from fastctl.testing.fake._clone import clone

CM = Resource("v1", "ConfigMap")


class GadgetSpec(KubeModel):
    size: Literal["small", "large"] = "small"
    replicas: int = 1
    data: dict[str, str] = Field(default_factory=dict)


class GadgetStatus(KubeModel):
    observed: int = 0


class Gadget(CustomResource, group="test.fastctl.dev", version="v1"):
    spec: GadgetSpec
    status: GadgetStatus | None = None


GADGET = Gadget.resource()


def gadget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "test.fastctl.dev/v1",
        "kind": "Gadget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": data,
    }


@contextlib.asynccontextmanager
async def cluster_and_client(**kwargs: Any) -> Any:
    async with FakeCluster(Gadget, **kwargs) as cluster:
        yield cluster, cluster.client()


# -- objects -------------------------------------------------------------------------------


@virtual_time
async def test_create_get_and_the_server_set_fields() -> None:
    async with cluster_and_client() as (_cluster, client):
        made = await create(client, GADGET, gadget("a", size="large"))
        meta = made["metadata"]
        assert meta["generation"] == 1
        assert meta["uid"]
        assert meta["creationTimestamp"]
        assert made["spec"] == {"size": "large", "replicas": 1, "data": {}}  # defaults filled
        again = await get(client, GADGET, "a", namespace="default")
        assert again == made
        with pytest.raises(ApiError) as exc:
            await create(client, GADGET, gadget("a"))
        assert (exc.value.status, exc.value.reason) == (409, "AlreadyExists")
        with pytest.raises(ApiError) as missing:
            await get(client, GADGET, "b", namespace="default")
        assert missing.value.status == 404


def test_what_a_caller_holds_is_a_copy_of_what_is_stored() -> None:
    """Objects go in and come out copied (a round trip through JSON, or a deep copy for
    what JSON cannot hold): changing the dict given, or the one got back, changes nothing
    stored."""
    cluster = FakeCluster()
    given: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"a": "1"}},
        "data": {"k": "v"},
    }
    made = cluster.create(given)
    given["data"]["k"] = "changed by the caller"
    given["metadata"]["labels"]["a"] = "2"
    made["data"]["k"] = "changed in the answer"
    stored = cluster.get("v1", "ConfigMap", "c")
    assert stored is not None
    assert stored["data"] == {"k": "v"}
    assert stored["metadata"]["labels"] == {"a": "1"}
    stored["data"]["k"] = "changed in a read"
    assert cluster.get("v1", "ConfigMap", "c")["data"] == {"k": "v"}  # type: ignore[index]
    # Past 64 bits, JSON's round trip refuses a value: the deep copy takes it.
    assert clone({"n": 2**70, "t": (1, 2)}) == {"n": 2**70, "t": (1, 2)}
    inner: dict[str, list[dict[str, int]]] = {"x": [{"y": 2}]}
    copied = clone(inner)
    copied["x"][0]["y"] = 3
    assert inner == {"x": [{"y": 2}]}
    cluster.forget()


@virtual_time
async def test_a_create_in_a_missing_namespace_is_refused() -> None:
    async with cluster_and_client() as (_, client):
        body = {**configmap("x"), "metadata": {"name": "x", "namespace": "nowhere"}}
        with pytest.raises(ApiError) as exc:
            await create(client, CM, body)
        assert exc.value.status == 404


@virtual_time
async def test_generation_follows_the_spec_and_only_the_spec() -> None:
    async with cluster_and_client() as (_, client):
        made = await create(client, GADGET, gadget("a"))
        rv = int(made["metadata"]["resourceVersion"])
        labelled = await patch(
            client, GADGET, "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default"
        )
        assert labelled["metadata"]["generation"] == 1
        assert int(labelled["metadata"]["resourceVersion"]) > rv
        status = await patch(
            client,
            GADGET,
            "a",
            {"status": {"observed": 1}},
            namespace="default",
            subresource="status",
        )
        assert status["metadata"]["generation"] == 1
        changed = await patch(client, GADGET, "a", {"spec": {"replicas": 3}}, namespace="default")
        assert changed["metadata"]["generation"] == 2
        same = await patch(client, GADGET, "a", {"spec": {"replicas": 3}}, namespace="default")
        assert same["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]


@virtual_time
async def test_the_status_subresource_splits_the_object() -> None:
    async with cluster_and_client() as (_, client):
        await create(client, GADGET, {**gadget("a"), "status": {"observed": 9}})
        made = await get(client, GADGET, "a", namespace="default")
        assert "status" not in made  # a create ignores status
        main = await patch(
            client,
            GADGET,
            "a",
            {"spec": {"replicas": 2}, "status": {"observed": 5}},
            namespace="default",
        )
        assert "status" not in main
        sub = await patch(
            client,
            GADGET,
            "a",
            {"spec": {"replicas": 7}, "status": {"observed": 5}},
            namespace="default",
            subresource="status",
        )
        assert sub["status"] == {"observed": 5}
        assert sub["spec"]["replicas"] == 2


@virtual_time
async def test_a_stale_resource_version_is_a_conflict() -> None:
    async with cluster_and_client() as (_, client):
        made = await create(client, GADGET, gadget("a"))
        old = made["metadata"]["resourceVersion"]
        await patch(client, GADGET, "a", {"spec": {"replicas": 2}}, namespace="default")
        with pytest.raises(ApiError) as exc:
            await patch(
                client,
                GADGET,
                "a",
                {"metadata": {"resourceVersion": old}, "spec": {"replicas": 3}},
                namespace="default",
            )
        assert exc.value.status == 409


@virtual_time
async def test_json_patch() -> None:
    async with cluster_and_client() as (_, client):
        await create(client, CM, configmap("c", a="1"))
        ops = [{"op": "add", "path": "/data/b", "value": "2"}, {"op": "remove", "path": "/data/a"}]
        out = await patch(client, CM, "c", ops, namespace="default", patch_type="json")
        assert out["data"] == {"b": "2"}
        with pytest.raises(ApiError) as exc:
            await patch(
                client,
                CM,
                "c",
                [{"op": "test", "path": "/data/b", "value": "9"}],
                namespace="default",
                patch_type="json",
            )
        assert exc.value.status == 422


# -- server-side apply -----------------------------------------------------------------------


@virtual_time
async def test_apply_conflicts_force_and_removal() -> None:
    async with cluster_and_client() as (cluster, client):
        first = await apply(client, CM, configmap("c", a="1", b="2"), field_manager="one")
        assert first["data"] == {"a": "1", "b": "2"}
        assert [r.status for r in cluster.requests_of("apply", "configmaps")] == [201]
        # Another manager's different value for a field "one" owns: 409 unless forced.
        with pytest.raises(ApiError) as exc:
            await apply(client, CM, configmap("c", a="9"), field_manager="two", force=False)
        assert exc.value.status == 409
        assert "one" in str(exc.value)
        # The same value is no conflict: both own it then.
        await apply(client, CM, configmap("c", b="2", d="4"), field_manager="two", force=False)
        forced = await apply(client, CM, configmap("c", a="9", b="2", d="4"), field_manager="two")
        assert forced["data"] == {"a": "9", "b": "2", "d": "4"}
        # "one" applies without b: b stays (two owns it too); without a (now two's): a stays.
        after = await apply(client, CM, configmap("c"), field_manager="one")
        assert after["data"] == {"a": "9", "b": "2", "d": "4"}
        # "two" drops d, which nobody else owns: removed.
        dropped = await apply(client, CM, configmap("c", a="9", b="2"), field_manager="two")
        assert dropped["data"] == {"a": "9", "b": "2"}
        managers = {m["manager"] for m in dropped["metadata"]["managedFields"]}
        assert managers == {"two"}


@virtual_time
async def test_an_update_takes_the_fields_it_changes() -> None:
    async with cluster_and_client() as (_, client):
        await apply(client, CM, configmap("c", a="1"), field_manager="applier")
        edited = await patch(
            client, CM, "c", {"data": {"a": "2"}}, namespace="default", field_manager="editor"
        )
        # The applier's only field went to the editor: its entry is gone.
        taken = {m["manager"]: m["fieldsV1"] for m in edited["metadata"]["managedFields"]}
        assert taken == {"editor": {"f:data": {"f:a": {}}}}
        # The applier no longer owns a: applying without it leaves it alone.
        out = await apply(client, CM, configmap("c", z="0"), field_manager="applier")
        assert out["data"] == {"a": "2", "z": "0"}
        owners = {m["manager"]: m["fieldsV1"] for m in out["metadata"]["managedFields"]}
        assert owners == {
            "editor": {"f:data": {"f:a": {}}},
            "applier": {"f:data": {"f:z": {}}},
        }


@virtual_time
async def test_apply_status_writes_the_status_only() -> None:
    async with cluster_and_client() as (_, client):
        await create(client, GADGET, gadget("a"))
        body = {**gadget("a", replicas=5), "status": {"observed": 1}}
        out = await apply_status(client, GADGET, body, field_manager="op")
        assert out["status"] == {"observed": 1}
        assert out["spec"]["replicas"] == 1


# -- deletion ----------------------------------------------------------------------------------


@virtual_time
async def test_finalizers_hold_a_deletion() -> None:
    async with cluster_and_client() as (_, client):
        body = gadget("a")
        body["metadata"]["finalizers"] = ["test.fastctl.dev/cleanup"]
        await create(client, GADGET, body)
        await delete(client, GADGET, "a", namespace="default")
        held = await get(client, GADGET, "a", namespace="default")
        assert held["metadata"]["deletionTimestamp"]
        assert held["metadata"]["generation"] == 2
        with pytest.raises(ApiError) as exc:
            await patch(
                client, GADGET, "a", {"metadata": {"finalizers": ["a", "b"]}}, namespace="default"
            )
        assert exc.value.status == 422
        await patch(client, GADGET, "a", {"metadata": {"finalizers": None}}, namespace="default")
        with pytest.raises(ApiError) as gone:
            await get(client, GADGET, "a", namespace="default")
        assert gone.value.status == 404


@virtual_time
async def test_garbage_collection_of_dependents() -> None:
    async with cluster_and_client() as (cluster, client):
        owner = await create(client, GADGET, gadget("a"))
        other = await create(client, GADGET, gadget("b"))
        only = {
            **configmap("only"),
            "metadata": {
                "name": "only",
                "namespace": "default",
                "ownerReferences": [owner_reference(owner)],
            },
        }
        shared = {
            **configmap("shared"),
            "metadata": {
                "name": "shared",
                "namespace": "default",
                "ownerReferences": [
                    owner_reference(owner),
                    {**owner_reference(other), "controller": False},
                ],
            },
        }
        await create(client, CM, only)
        await create(client, CM, shared)
        await delete(client, GADGET, "a", namespace="default")
        assert cluster.get("v1", "ConfigMap", "only") is None
        kept = cluster.get("v1", "ConfigMap", "shared")
        assert kept is not None
        assert [r["name"] for r in kept["metadata"]["ownerReferences"]] == ["b"]
        await delete(client, GADGET, "b", namespace="default", propagation_policy="Orphan")
        orphan = cluster.get("v1", "ConfigMap", "shared")
        assert orphan is not None
        assert "ownerReferences" not in orphan["metadata"]


@virtual_time
async def test_without_garbage_collection_dependents_stay() -> None:
    async with cluster_and_client(garbage_collection=False) as (cluster, client):
        owner = await create(client, GADGET, gadget("a"))
        child = {
            **configmap("c"),
            "metadata": {
                "name": "c",
                "namespace": "default",
                "ownerReferences": [owner_reference(owner)],
            },
        }
        await create(client, CM, child)
        await delete(client, GADGET, "a", namespace="default")
        assert cluster.get("v1", "ConfigMap", "c") is not None


# -- selectors and schemas ----------------------------------------------------------------------


@virtual_time
async def test_label_and_field_selectors() -> None:
    async with cluster_and_client() as (cluster, client):
        for name, labels in [("a", {"tier": "web"}), ("b", {"tier": "db"}), ("c", {})]:
            cluster.create(
                {
                    **configmap(name),
                    "metadata": {"name": name, "namespace": "default", "labels": labels},
                }
            )

        async def names(**kw: Any) -> list[str]:
            return [
                o["metadata"]["name"]
                for o in (await list_objects(client, CM, namespace="default", **kw))["items"]
            ]

        assert await names(label_selector="tier=web") == ["a"]
        assert await names(label_selector="tier!=web") == ["b", "c"]
        assert await names(label_selector="tier in (web,db)") == ["a", "b"]
        assert await names(label_selector="tier notin (web)") == ["b", "c"]
        assert await names(label_selector="tier") == ["a", "b"]
        assert await names(label_selector="!tier") == ["c"]
        assert await names(field_selector="metadata.name=b") == ["b"]
        assert await names(field_selector="metadata.name!=b") == ["a", "c"]


@virtual_time
async def test_the_crd_schema_checks_prunes_and_defaults() -> None:
    async with cluster_and_client() as (_, client):
        with pytest.raises(ApiError) as exc:
            await create(client, GADGET, gadget("a", size="huge"))
        assert exc.value.status == 422
        assert "spec.size" in str(exc.value)
        with pytest.raises(ApiError):
            await create(client, GADGET, gadget("b", replicas="many"))
        made = await create(client, GADGET, gadget("c", unknown="x"))
        assert "unknown" not in made["spec"]


# -- watches --------------------------------------------------------------------------------------


class Seen:
    """The events a watch delivered, and a condition to wait for one."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.changed = asyncio.Condition()

    async def watch(self, client: ApiClient, **kw: Any) -> None:
        async for event in watcher(client, CM, namespace="default", **kw):
            if isinstance(event, ObjectEvent):
                async with self.changed:
                    self.events.append((event.kind.value, event.obj["metadata"]["name"]))
                    self.changed.notify_all()

    async def until(self, predicate: Any) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: predicate(self.events))


@virtual_time
async def test_a_watch_with_a_selector_sees_objects_leave_it() -> None:
    async with cluster_and_client() as (cluster, client):
        seen = Seen()
        task = asyncio.create_task(seen.watch(client, label_selector="app=x"))
        cluster.create(
            {
                **configmap("a"),
                "metadata": {"name": "a", "namespace": "default", "labels": {"app": "x"}},
            }
        )
        await seen.until(lambda e: ("init_apply", "a") in e)
        await patch(client, CM, "a", {"metadata": {"labels": {"app": "y"}}}, namespace="default")
        await seen.until(lambda e: ("delete", "a") in e)
        task.cancel()
        assert seen.events == [("init_apply", "a"), ("delete", "a")]


@virtual_time
async def test_expired_watches_relist_and_outages_recover() -> None:
    async with cluster_and_client() as (cluster, client):
        seen = Seen()
        task = asyncio.create_task(seen.watch(client))
        cluster.create(configmap("a"))
        await seen.until(lambda e: ("init_apply", "a") in e)
        cluster.expire_watches("configmaps")
        cluster.create(configmap("b"))
        await seen.until(lambda e: ("init_apply", "b") in e)
        # The resumed watch got 410 and the watcher listed again: b came with a relist.
        assert seen.events == [("init_apply", "a"), ("init_apply", "a"), ("init_apply", "b")]
        assert 410 in [r.status for r in cluster.requests_of("watch", "configmaps")]
        cluster.outage()
        await asyncio.sleep(5)  # virtual: the watcher retries meanwhile
        assert 0 in [r.status for r in cluster.requests_of("watch", "configmaps")]
        cluster.recover()
        cluster.create(configmap("c"))
        await seen.until(lambda e: ("apply", "c") in e)  # resumed: no relist needed
        task.cancel()


@virtual_time
async def test_an_old_server_pages_its_lists() -> None:
    async with cluster_and_client(streaming=False, page_size=2) as (cluster, client):
        for i in range(5):
            cluster.create(configmap(f"c{i}"))
        seen = Seen()
        task = asyncio.create_task(seen.watch(client, config=WatchConfig(page_size=2)))
        await seen.until(lambda e: len(e) == 5)
        task.cancel()
        assert seen.events == [("init_apply", f"c{i}") for i in range(5)]
        lists = cluster.requests_of("list", "configmaps")
        assert [r.query.get("continue", "") != "" for r in lists] == [False, True, True]


# -- faults and the record ------------------------------------------------------------------------


@virtual_time
async def test_chosen_requests_fail() -> None:
    async with cluster_and_client() as (cluster, client):
        await create(client, CM, configmap("c"))
        # A 429 is retried by fastctl's calls after its Retry-After; a 500 is not.
        cluster.fail(429, verb="patch", retry_after=3)
        began = asyncio.get_running_loop().time()
        out = await patch(client, CM, "c", {"data": {"a": "1"}}, namespace="default")
        assert out["data"] == {"a": "1"}
        assert asyncio.get_running_loop().time() - began >= 3
        cluster.fail(500, verb="patch")
        with pytest.raises(ApiError) as exc:
            await patch(client, CM, "c", {"data": {"a": "2"}}, namespace="default")
        assert exc.value.status == 500
        cluster.conflict(resource="configmaps")
        with pytest.raises(ApiError) as conflict:
            await get(client, CM, "c", namespace="default")
        assert conflict.value.status == 409
        out = await patch(client, CM, "c", {"data": {"a": "2"}}, namespace="default")
        assert out["data"] == {"a": "2"}
        verbs = [(r.verb, r.status) for r in cluster.requests if r.resource == "configmaps"]
        assert verbs == [
            ("create", 201),
            ("patch", 429),
            ("patch", 200),
            ("patch", 500),
            ("get", 409),
            ("patch", 200),
        ]


@virtual_time
async def test_a_client_made_from_the_configuration_reaches_the_fake() -> None:
    async with cluster_and_client() as (cluster, client):
        other = ApiClient(client.configuration)  # as a Manager makes its elector's client
        try:
            cluster.create(configmap("c"))
            found = await get(other, CM, "c", namespace="default")
            assert found["metadata"]["name"] == "c"
        finally:
            await other.close()


# -- running a controller -----------------------------------------------------------------------


async def reconcile(obj: Gadget, client: ApiClient) -> Action | None:
    meta = obj.metadata
    name = str(meta.name)
    await apply(
        client,
        CM,
        {
            **configmap(name, size=obj.spec.size),
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "ownerReferences": [owner_reference(obj)],
            },
        },
        field_manager="gadget-operator",
    )
    status = {**gadget(name), "status": {"observed": meta.generation}}
    del status["spec"]
    await apply_status(client, GADGET, status, field_manager="gadget-operator")
    return None


@virtual_time
async def test_run_until_quiet_and_reconcile_once() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.create(gadget("a", size="large"))
        ctl = Controller(client, Gadget, reconcile, context=client).owns(CM)
        await run_until_quiet(ctl)
        child = cluster.get("v1", "ConfigMap", "a")
        assert child is not None
        assert child["data"] == {"size": "large"}
        stored = cluster.get("test.fastctl.dev/v1", "Gadget", "a")
        assert stored is not None
        assert stored["status"] == {"observed": 1}
        # A change made while nothing runs, reconciled by hand.
        changed = cluster.get("test.fastctl.dev/v1", "Gadget", "a")
        assert changed is not None
        changed["spec"]["size"] = "small"
        cluster.update(changed)
        before = len(cluster.requests)
        assert await reconcile_once(ctl, ("a", "default")) is None
        child = cluster.get("v1", "ConfigMap", "a")
        assert child is not None
        assert child["data"] == {"size": "small"}
        assert [r.verb for r in cluster.requests[before:]] == ["get", "apply", "apply"]
        assert asyncio.get_running_loop().time() > 0  # the quiet wait was virtual


@virtual_time
async def test_run_until_quiet_waits_while_requests_go_on() -> None:
    starts: list[float] = []

    async def requeue_three_times(obj: dict[str, Any], client: ApiClient) -> Action | None:
        starts.append(asyncio.get_running_loop().time())
        await get(client, CM, "c", namespace="default")
        return Action.requeue(4) if len(starts) < 4 else None

    async with cluster_and_client() as (cluster, client):
        cluster.create(configmap("c"))
        ctl = Controller(client, CM, requeue_three_times, context=client)
        await run_until_quiet(ctl, quiet=5)
        # Each 5 s window saw a request until the last reconcile: all four ran.
        assert len(starts) == 4
        assert [round(b - a) for a, b in itertools.pairwise(starts)] == [4, 4, 4]


def test_the_fake_cluster_fixture(fake_cluster: FakeCluster) -> None:
    async def main() -> dict[str, Any]:
        client = fake_cluster.client()
        try:
            return await create(client, CM, configmap("c", a="1"))
        finally:
            await client.close()

    made = run_virtual(main())
    assert made["data"] == {"a": "1"}
    assert fake_cluster.get("v1", "ConfigMap", "c") == made


def test_the_example_in_the_docs_passes() -> None:
    """docs/testing.md's fake cluster example, run as the test it is."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
    section = docs.read_text().split("## Testing an operator on a fake cluster", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    # Compiled without this module's __future__ import, as the file a user saves runs.
    exec(compile(code, str(docs), "exec", dont_inherit=True), namespace)
    tests = [test for name, test in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    for test in tests:
        assert callable(test)
        test()


@virtual_time
async def test_a_manager_with_leader_election_runs_on_the_fake() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.create(gadget("a", size="large"))
        election = LeaderElection("gadgets", namespace="default", identity="me")
        manager = Manager(client, leader_election=election, metrics_port=None, probe_port=None)
        manager.add(Controller(client, Gadget, reconcile, context=client).owns(CM))
        await run_until_quiet(manager, quiet=30)
        child = cluster.get("v1", "ConfigMap", "a")
        assert child is not None
        assert child["data"] == {"size": "large"}
        lease = cluster.get("coordination.k8s.io/v1", "Lease", "gadgets")
        assert lease is not None
        assert lease["spec"]["holderIdentity"] in ("me", "")  # released on the way out
        assert cluster.requests_of("create", "leases")


@virtual_time
async def test_run_until_quiet_waits_for_a_running_reconcile() -> None:
    runs: list[int] = []

    async def slow(obj: dict[str, Any], client: ApiClient) -> None:
        runs.append(len(obj["data"]))
        if not obj["data"]:
            await asyncio.sleep(20)  # longer than quiet, and no request meanwhile
            await patch(client, CM, "c", {"data": {"done": "1"}}, namespace="default")

    async with cluster_and_client() as (cluster, client):
        cluster.create(configmap("c"))
        await run_until_quiet(Controller(client, CM, slow, context=client), quiet=5)
        # The patch's own event started a second reconcile: the run was not stopped mid-way.
        assert runs == [0, 1]


@virtual_time
async def test_slow_writes_and_an_outage_for_a_while() -> None:
    loop = asyncio.get_running_loop()
    async with cluster_and_client() as (cluster, client):
        cluster.slow_writes(3)
        start = loop.time()
        await create(client, CM, configmap("c"))
        assert loop.time() - start == 3
        await get(client, CM, "c", namespace="default")  # reads are not slowed
        assert loop.time() - start == 3
        cluster.slow_writes(0)
        cluster.outage(10)
        with pytest.raises(aiohttp.ClientConnectionError):
            await get(client, CM, "c", namespace="default")
        await asyncio.sleep(10)
        found = await get(client, CM, "c", namespace="default")
        assert found["metadata"]["name"] == "c"
