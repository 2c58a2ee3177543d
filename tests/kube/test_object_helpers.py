"""The operator helpers on the real API server: a reconcile that writes an error quoting a
Secret's value into a condition stores none of it; conditions are a list-map each writer
owns its own items of; a CEL rule on a ``default_factory`` field holds for an object that
omits the field; `list` pages and selects; an owner reference is accepted as made."""

from __future__ import annotations

import base64
import secrets
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient
from pydantic import Field

from fastctl import _redact
from fastctl.demo.widgets import install_crd
from fastctl.kube import (
    ApiError,
    Condition,
    CustomResource,
    KubeModel,
    Resource,
    ValidationRule,
    apply_status,
    create,
    get,
    owner_reference,
    patch,
    set_condition,
)
from fastctl.kube import list as list_objects
from fastctl.kube._http import request_json
from fastctl.runtime.controller import Controller

pytestmark = pytest.mark.kube

GROUP = "helpers.fastctl.dev"
SECRET = Resource("v1", "Secret")
CONFIGMAP = Resource("v1", "ConfigMap")


class DatabaseStatus(KubeModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)


class DatabaseSpec(KubeModel):
    secret: str


class Database(CustomResource, group=GROUP, version="v1"):
    """A database whose password is in a Secret."""

    spec: DatabaseSpec
    status: DatabaseStatus | None = None


class TeamSpec(
    KubeModel, rules=[ValidationRule("self.members.size() <= 3", message="at most 3 members")]
):
    members: list[str] = Field(default_factory=list)


class Team(CustomResource, group=GROUP, version="v1"):
    spec: TeamSpec = Field(default_factory=TeamSpec)


class DriverError(Exception):
    """What a database driver raises: it quotes the connection string, password and all."""


async def _connect(password: str) -> None:
    raise DriverError(f"FATAL: password authentication failed for 'app:{password}@db:5432'")


async def test_an_error_quoting_a_secret_is_stored_in_the_status_without_it(
    client: ApiClient, namespace: str
) -> None:
    await install_crd(client, Database.crd())
    value = f"Pw-{secrets.token_hex(12)}"
    encoded = base64.b64encode(value.encode()).decode()
    await create(
        client,
        SECRET,
        {"metadata": {"name": "db"}, "data": {"password": encoded}},
        namespace=namespace,
    )
    _redact._forget_all()  # only what the reconcile reads is known
    await create(
        client,
        Database.resource(),
        {"metadata": {"name": "db"}, "spec": {"secret": "db"}},
        namespace=namespace,
    )

    async def reconcile(db: Database, ctx: Any) -> None:
        ns = db.metadata.namespace
        secret = await get(client, SECRET, db.spec.secret, namespace=ns)
        password = base64.b64decode(secret["data"]["password"]).decode()
        try:
            await _connect(password)
        except DriverError as exc:
            conditions = list(db.status.conditions) if db.status else []
            failed = Condition(
                type="Ready", status="False", reason="ConnectFailed", message=str(exc)
            )
            set_condition(conditions, failed, generation=db.metadata.generation)
            status = DatabaseStatus(
                observed_generation=db.metadata.generation, conditions=conditions
            )
            await apply_status(
                client, Database.resource(), db, status=status, field_manager="db-operator"
            )
            # the other way to write a status: a merge patch of the subresource
            await patch(
                client,
                Database.resource(),
                "db",
                namespace=ns,
                body={"status": {"lastError": f"{exc!r} ({encoded})"}},
                subresource="status",
            )

    ctl = Controller(client, Database, reconcile, namespace=namespace)
    try:
        async for result in ctl.stream():
            assert result.error is None, result.error
            break
    finally:
        ctl.shutdown()
    stored = await request_json(
        client, "GET", f"/apis/{GROUP}/v1/namespaces/{namespace}/databases/db"
    )
    text = orjson.dumps(stored).decode()
    (ready,) = stored["status"]["conditions"]
    assert ready["message"].startswith("FATAL: password authentication failed for 'app:")
    assert "<redacted>" in ready["message"]
    assert "<redacted>" in stored["status"].get("lastError", "<redacted>")
    assert value not in text
    assert encoded not in text
    _redact._forget_all()


async def test_conditions_are_a_list_map_each_writer_owns_its_items_of(
    client: ApiClient, namespace: str
) -> None:
    await install_crd(client, Database.crd())
    created = await create(
        client,
        Database.resource(),
        {"metadata": {"name": "lm"}, "spec": {"secret": "x"}},
        namespace=namespace,
    )
    for manager, kind in (("first", "Ready"), ("second", "Synced")):
        conditions: list[Condition] = []
        set_condition(
            conditions,
            Condition(type=kind, status="True", reason="Done"),
            generation=created["metadata"]["generation"],
        )
        await apply_status(
            client,
            Database.resource(),
            created,
            field_manager=manager,
            status=DatabaseStatus(conditions=conditions),
        )
    stored = Database.model_validate(
        await get(client, Database.resource(), "lm", namespace=namespace)
    )
    assert stored.status is not None
    assert sorted(c.type for c in stored.status.conditions) == ["Ready", "Synced"]
    assert all(c.observed_generation == 1 for c in stored.status.conditions)
    same = {
        "type": "Ready",
        "status": "True",
        "reason": "A",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    with pytest.raises(ApiError, match="Duplicate value"):  # the server enforces the key
        await patch(
            client,
            Database.resource(),
            "lm",
            namespace=namespace,
            body={"status": {"conditions": [same, same]}},
            subresource="status",
        )


async def test_a_cel_rule_on_a_default_factory_field_holds_when_it_is_omitted(
    client: ApiClient, namespace: str
) -> None:
    await install_crd(client, Team.crd())
    created = await create(
        client, Team.resource(), {"metadata": {"name": "empty"}, "spec": {}}, namespace=namespace
    )
    assert created["spec"] == {"members": []}  # the server filled the default in
    bare = await create(
        client, Team.resource(), {"metadata": {"name": "bare"}}, namespace=namespace
    )
    assert bare["spec"] == {"members": []}
    with pytest.raises(ApiError, match="at most 3 members"):  # the rule is still checked
        await create(
            client,
            Team.resource(),
            {"metadata": {"name": "big"}, "spec": {"members": list("abcd")}},
            namespace=namespace,
        )


async def test_list_selects_and_pages(client: ApiClient, namespace: str) -> None:
    for i in range(5):
        labels = {"app": "web"} if i < 4 else {"app": "db"}
        await create(
            client,
            CONFIGMAP,
            {"metadata": {"name": f"cm{i}", "labels": labels}},
            namespace=namespace,
        )
    web = await list_objects(
        client, CONFIGMAP, namespace=namespace, label_selector="app=web", limit=1
    )
    assert sorted(o["metadata"]["name"] for o in web["items"]) == ["cm0", "cm1", "cm2", "cm3"]
    assert "continue" not in web["metadata"]
    assert all(o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" for o in web["items"])
    page = await list_objects(
        client, CONFIGMAP, namespace=namespace, label_selector="app", limit=2, all_pages=False
    )
    assert len(page["items"]) == 2
    assert page["metadata"]["continue"]
    rest = await list_objects(
        client,
        CONFIGMAP,
        namespace=namespace,
        label_selector="app",
        limit=2,
        continue_=page["metadata"]["continue"],
    )
    names = [o["metadata"]["name"] for o in page["items"] + rest["items"]]
    assert sorted(names) == [f"cm{i}" for i in range(5)]
    one = await list_objects(
        client, CONFIGMAP, namespace=namespace, field_selector="metadata.name=cm4"
    )
    assert [o["metadata"]["labels"] for o in one["items"]] == [{"app": "db"}]


async def test_an_owner_reference_is_accepted_as_made(client: ApiClient, namespace: str) -> None:
    await install_crd(client, Team.crd())
    team = Team.model_validate(
        await create(client, Team.resource(), {"metadata": {"name": "owner"}}, namespace=namespace)
    )
    child = await create(
        client,
        CONFIGMAP,
        {"metadata": {"name": "child", "ownerReferences": [owner_reference(team)]}},
        namespace=namespace,
    )
    (ref,) = child["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Team",
        "name": "owner",
        "uid": team.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
