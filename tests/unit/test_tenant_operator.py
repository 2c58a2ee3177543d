"""The example Tenant operator's logic without an API server (examples/tenant_operator.py;
its run on the real one is tests/kube/test_tenant_operator.py).

- The Role that ``fastctl manifests`` derives for it is exactly what its reconcile sends,
  kind by kind, and the Role it writes for each tenant grants nothing the operator does not
  hold itself (the API server would refuse that escalation with a 403).
- Every child names its Tenant as controller owner; the RoleBinding binds the tenant's
  ServiceAccount, owner and members once each.
- Ready keeps its transition time over a spec change, a status that says it already is not
  written again, and a failure turns Ready False with the error.
- The credentials are created once: not when the cache holds them, and a taken name is an
  error, not a rewrite; a failed write reports Ready False and is raised to the retries.
- The webhooks: premium only for tenant-admins, judged only when the tier changes (the
  operator's finalizer writes pass); the owner defaulted to the creating user.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.kube import ApiError, Condition, owner_reference

from .test_rbac import by_resource, permissions_of

pytest.importorskip("pydantic")

ROOT = Path(__file__).resolve().parents[2]


def load_example(name: str) -> Any:
    """An example's module, imported from its file (examples/ is not a package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


tenants = load_example("tenant_operator")
GROUP = tenants.GROUP
RBAC = "rbac.authorization.k8s.io"
UID = "0c9f5bde-0000-4000-8000-000000000001"


def tenant(generation: int = 1, status: dict[str, Any] | None = None, **spec: Any) -> Any:
    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Tenant",
        "metadata": {"name": "acme", "namespace": "shop", "uid": UID, "generation": generation},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return tenants.Tenant.model_validate(obj)


@pytest.fixture
async def offline() -> AsyncIterator[ApiClient]:
    async with ApiClient(Configuration(host="")) as api:
        yield api


OPERATOR_ROLE = {
    ("", "configmaps"): ("create", "list", "patch", "watch"),  # applied, GC deletes
    ("", "secrets"): ("create", "delete", "list", "watch"),  # created once, finalizer deletes
    ("", "serviceaccounts"): ("create", "list", "patch", "watch"),
    (RBAC, "roles"): ("create", "list", "patch", "watch"),
    (RBAC, "rolebindings"): ("create", "delete", "list", "patch", "watch"),
    (GROUP, "tenants"): ("get", "list", "patch", "watch"),  # the finalizer's get and patch
    (GROUP, "tenants/status"): ("patch",),
    ("events.k8s.io", "events"): ("create", "patch"),
}


async def test_the_derived_role_is_what_the_reconcile_sends(offline: ApiClient) -> None:
    perms = await permissions_of(tenants.make(offline, namespace="shop"), tenants)
    assert perms.cluster == ()
    assert by_resource(perms.namespaced["shop"]) == OPERATOR_ROLE


def test_the_tenants_role_grants_only_what_the_operator_holds() -> None:
    (role,) = [body for resource, body in tenants.children(tenant()) if body["kind"] == "Role"]
    granted = [
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]
    assert granted  # not vacuous
    beyond = [g for g in granted if g[2] not in OPERATOR_ROLE.get((g[0], g[1]), ())]
    assert beyond == []


def test_every_child_is_controlled_by_its_tenant() -> None:
    obj = tenant(owner="carol", members=["bob"], settings={"region": "eu"})
    made = [body for _, body in tenants.children(obj)] + [tenants.credentials(obj, "pw")]
    assert sorted(body["kind"] for body in made) == [
        "ConfigMap", "Role", "RoleBinding", "Secret", "ServiceAccount",
    ]  # fmt: skip
    for body in made:
        meta = body["metadata"]
        assert meta["namespace"] == "shop"
        assert meta["ownerReferences"] == [owner_reference(obj)]
        assert meta["ownerReferences"][0]["uid"] == UID
        assert meta["ownerReferences"][0]["controller"] is True
    by_kind = {body["kind"]: body for body in made}
    assert by_kind["ConfigMap"]["data"] == {"region": "eu"}
    assert by_kind["Secret"]["stringData"] == {"username": "acme-app", "password": "pw"}
    assert by_kind["RoleBinding"]["roleRef"]["name"] == by_kind["Role"]["metadata"]["name"]


def test_the_binding_names_account_owner_and_members_once() -> None:
    obj = tenant(owner="carol", members=["bob", "carol", "dave"])
    assert tenants.subjects(obj) == [
        {"kind": "ServiceAccount", "name": "acme", "namespace": "shop"},
        {"kind": "User", "apiGroup": RBAC, "name": "carol"},
        {"kind": "User", "apiGroup": RBAC, "name": "bob"},
        {"kind": "User", "apiGroup": RBAC, "name": "dave"},
    ]


READY_SINCE = "2020-01-02T03:04:05Z"


def ready_at(generation: int) -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "serviceAccount": "acme",
        "credentials": "acme-credentials",
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Provisioned", "message": "",
             "observedGeneration": generation, "lastTransitionTime": READY_SINCE},
        ],
    }  # fmt: skip


PROVISIONED = Condition(type="Ready", status="True", reason="Provisioned", message="")


def test_ready_keeps_its_transition_time_over_a_spec_change() -> None:
    status = tenants.next_status(tenant(2, ready_at(1)), PROVISIONED)
    assert status is not None
    assert status.observed_generation == 2
    (ready,) = status.conditions
    assert ready.observed_generation == 2
    assert ready.last_transition_time is not None
    assert ready.last_transition_time == READY_SINCE


def test_a_status_that_says_it_already_is_not_written_again() -> None:
    assert tenants.next_status(tenant(1, ready_at(1)), PROVISIONED) is None


def test_a_failure_turns_ready_false_with_the_error() -> None:
    failed = Condition(type="Ready", status="False", reason="ApiError", message="boom")
    status = tenants.next_status(tenant(1, ready_at(1)), failed)
    assert status is not None
    (ready,) = status.conditions
    assert (ready.status, ready.reason, ready.message) == ("False", "ApiError", "boom")
    assert ready.last_transition_time is not None
    assert ready.last_transition_time != READY_SINCE


class Secrets:
    """The related cache's one method the reconcile reads."""

    def __init__(self, *owned: dict[str, Any]) -> None:
        self.owned = list(owned)

    def owned_by(self, owner: Any) -> list[dict[str, Any]]:
        return self.owned


class Recorder:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def publish(self, obj: Any, *, reason: str, **kw: Any) -> None:
        self.reasons.append(reason)


def context(*owned: dict[str, Any]) -> Any:
    return tenants.Context(client=None, recorder=Recorder(), secrets=Secrets(*owned))


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The bodies the example POSTs (its `create`, replaced)."""
    bodies: list[dict[str, Any]] = []

    async def create(client: Any, resource: Any, body: dict[str, Any], **kw: Any) -> Any:
        bodies.append(body)
        return body

    monkeypatch.setattr(tenants, "create", create)
    return bodies


def test_credentials_in_the_cache_are_kept(created: list[dict[str, Any]]) -> None:
    held = {"metadata": {"name": "acme-credentials", "namespace": "shop"}}
    made = asyncio.run(tenants.ensure_credentials(tenant(), context(held)))
    assert made is False
    assert created == []


def test_missing_credentials_are_generated(created: list[dict[str, Any]]) -> None:
    other = {"metadata": {"name": "something-else", "namespace": "shop"}}
    assert asyncio.run(tenants.ensure_credentials(tenant(), context(other))) is True
    (secret,) = created
    assert secret["metadata"]["name"] == "acme-credentials"
    assert len(secret["stringData"]["password"]) >= 24


def test_a_taken_name_is_an_error_not_a_rewrite(monkeypatch: pytest.MonkeyPatch) -> None:
    async def create(client: Any, resource: Any, body: Any, **kw: Any) -> Any:
        raise ApiError(409, "AlreadyExists", 'secrets "acme-credentials" already exists')

    monkeypatch.setattr(tenants, "create", create)
    with pytest.raises(tenants.CredentialsTaken, match="acme-credentials exists"):
        asyncio.run(tenants.ensure_credentials(tenant(), context()))


def test_a_failed_write_reports_ready_false_and_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    statuses: list[Any] = []

    async def apply(client: Any, resource: Any, body: Any, **kw: Any) -> Any:
        raise ApiError(422, "Invalid", "ConfigMap acme-settings is invalid")

    async def apply_status(client: Any, resource: Any, obj: Any, *, status: Any, **kw: Any) -> Any:
        statuses.append(status)

    monkeypatch.setattr(tenants, "apply", apply)
    monkeypatch.setattr(tenants, "apply_status", apply_status)
    with pytest.raises(ApiError):
        asyncio.run(tenants.provision(tenant(1, ready_at(1)), context()))
    (status,) = statuses
    (ready,) = status.conditions
    assert (ready.status, ready.reason) == ("False", "ApiError")
    assert "acme-settings is invalid" in ready.message


def test_provisioning_applies_creates_and_reports(
    monkeypatch: pytest.MonkeyPatch, created: list[dict[str, Any]]
) -> None:
    applied: list[str] = []
    statuses: list[Any] = []

    async def apply(client: Any, resource: Any, body: Any, **kw: Any) -> Any:
        applied.append(body["kind"])

    async def apply_status(client: Any, resource: Any, obj: Any, *, status: Any, **kw: Any) -> Any:
        statuses.append(status)

    monkeypatch.setattr(tenants, "apply", apply)
    monkeypatch.setattr(tenants, "apply_status", apply_status)
    ctx = context()
    assert asyncio.run(tenants.provision(tenant(), ctx)) is None
    assert applied == ["ConfigMap", "ServiceAccount", "Role", "RoleBinding"]
    assert [body["kind"] for body in created] == ["Secret"]
    assert ctx.recorder.reasons == ["CredentialsGenerated"]
    (status,) = statuses
    assert [(c.type, c.status) for c in status.conditions] == [("Ready", "True")]


# -- webhooks --------------------------------------------------------------------------------

BY_NAME = {w.name: w for w in tenants.WEBHOOKS.admission}


def review(
    name: str,
    obj: dict[str, Any],
    *,
    old: dict[str, Any] | None = None,
    user: str = "bob",
    groups: tuple[str, ...] = (),
) -> dict[str, Any]:
    from fastctl.webhook._review import parse_admission_review

    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "operation": "UPDATE" if old is not None else "CREATE",
        "object": obj,
        "userInfo": {"username": user, "groups": list(groups)},
    }
    if old is not None:
        request["oldObject"] = old
    body = orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )
    answer = asyncio.run(BY_NAME[name].review(parse_admission_review(body)))
    response: dict[str, Any] = answer["response"]
    return response


def as_json(tier: str, finalizers: tuple[str, ...] = ()) -> dict[str, Any]:
    obj: dict[str, Any] = tenant(tier=tier).to_json()
    obj["metadata"]["finalizers"] = list(finalizers)
    return obj


def test_only_tenant_admins_may_ask_for_premium() -> None:
    refused = review(tenants.VALIDATE, as_json("premium"))
    assert refused["allowed"] is False
    assert "only members of tenant-admins" in refused["status"]["message"]
    assert review(tenants.VALIDATE, as_json("premium"), groups=("tenant-admins",))["allowed"]
    assert review(tenants.VALIDATE, as_json("standard"))["allowed"]


def test_a_change_to_premium_is_judged_and_other_updates_pass() -> None:
    raised = review(tenants.VALIDATE, as_json("premium"), old=as_json("standard"))
    assert raised["allowed"] is False
    operator = f"system:serviceaccount:shop:{tenants.FIELD_MANAGER}"
    finalized = as_json("premium", (tenants.FINALIZER,))
    passed = review(tenants.VALIDATE, finalized, old=as_json("premium"), user=operator)
    assert passed["allowed"] is True


def test_the_owner_defaults_to_the_creating_user() -> None:
    import base64

    answer = review(tenants.DEFAULT, as_json("standard"), user="alice")
    patch = orjson.loads(base64.b64decode(answer["patch"]))
    assert patch == [{"op": "add", "path": "/spec/owner", "value": "alice"}]
    given = as_json("standard")
    given["spec"]["owner"] = "carol"
    assert "patch" not in review(tenants.DEFAULT, given, user="alice")
