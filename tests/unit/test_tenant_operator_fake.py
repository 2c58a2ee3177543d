"""The example Tenant operator (examples/tenant_operator.py) end to end on a fake cluster:
its controller, as ``make`` builds it, and its webhooks (``WEBHOOKS``), called by the fake
API server as a real one calls them. The scenario is the one tests/kube/test_tenant_operator.py
runs on the real control plane (docs/benchmarks.md compares the two):

- a standard Tenant by the admin: the owner defaulted, five children with the Tenant as
  controller owner, the finalizer, ``Ready`` at generation 1;
- a spec change: the ConfigMap follows, the generated password stays (the Secret is not
  rewritten), ``Ready`` at generation 2;
- the premium tier refused to the admin (403, on create and on change), admitted to a
  member of tenant-admins, and the operator's own finalizer writes on it pass;
- deleted: the finalizer revokes access (RoleBinding and Secret deleted), then the Tenants
  go and the garbage collector takes the rest.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from fastctl.kube import ApiError, create, delete, get, patch
from fastctl.testing import FakeCluster, run_until_quiet, virtual_time

from .test_tenant_operator import load_example

tenants = load_example("tenant_operator")
TENANT = tenants.TENANT
NAMESPACE = "shop"
OPERATOR = f"system:serviceaccount:{NAMESPACE}:tenant-operator"
CHILDREN = {
    "ConfigMap": (tenants.CONFIGMAP, "{}-settings"),
    "Secret": (tenants.SECRET, "{}-credentials"),
    "ServiceAccount": (tenants.SERVICEACCOUNT, "{}"),
    "Role": (tenants.ROLE, "{}"),
    "RoleBinding": (tenants.ROLEBINDING, "{}"),
}


def tenant(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": TENANT.api_version,
        "kind": "Tenant",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


async def reconciled(cluster: FakeCluster) -> None:
    """The operator, as ``fastctl run examples/tenant_operator.py:make --namespace shop``
    builds it, as its ServiceAccount, until it is quiet."""
    client = cluster.client(user=OPERATOR, groups=(f"system:serviceaccounts:{NAMESPACE}",))
    await run_until_quiet(tenants.make(client, namespace=NAMESPACE))


def converged(cluster: FakeCluster, name: str, generation: int) -> dict[str, Any]:
    obj = cluster.get(TENANT.api_version, "Tenant", name, NAMESPACE)
    assert obj is not None
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Ready"]["observedGeneration"] == generation
    assert obj["status"]["observedGeneration"] == generation
    assert obj["status"]["credentials"] == f"{name}-credentials"
    assert tenants.FINALIZER in obj["metadata"]["finalizers"]
    for kind, (resource, pattern) in CHILDREN.items():
        child = cluster.get(resource.api_version, kind, pattern.format(name), NAMESPACE)
        assert child is not None, kind
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": TENANT.api_version,
            "kind": "Tenant",
            "name": name,
            "uid": obj["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }, kind
    return obj


def password_of(secret: dict[str, Any]) -> str:
    return base64.b64decode(secret["data"]["password"]).decode()


@virtual_time
async def test_the_tenant_operator_and_its_webhooks_on_a_fake_cluster() -> None:
    async with FakeCluster(tenants.Tenant, webhooks=tenants.WEBHOOKS) as cluster:
        cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        client = cluster.client()
        alice = cluster.client(user="alice", groups=(tenants.ADMINS,))

        # A standard Tenant by the admin: the owner defaulted, five children, Ready.
        body = tenant("acme", members=["bob"], settings={"region": "eu"})
        made = await create(client, TENANT, body)
        assert made["spec"]["owner"] == "fastctl-admin"
        await reconciled(cluster)
        converged(cluster, "acme", 1)
        binding = await get(client, tenants.ROLEBINDING, "acme", namespace=NAMESPACE)
        assert [s["name"] for s in binding["subjects"]] == ["acme", "fastctl-admin", "bob"]
        secret = await get(client, tenants.SECRET, "acme-credentials", namespace=NAMESPACE)
        password = password_of(secret)
        assert len(password) >= 24

        # A spec change: the ConfigMap follows, the password stays.
        change = {"spec": {"settings": {"region": "us"}}}
        await patch(client, TENANT, "acme", change, namespace=NAMESPACE)
        await reconciled(cluster)
        converged(cluster, "acme", 2)
        settings = await get(client, tenants.CONFIGMAP, "acme-settings", namespace=NAMESPACE)
        assert settings["data"] == {"region": "us"}
        kept = await get(client, tenants.SECRET, "acme-credentials", namespace=NAMESPACE)
        assert password_of(kept) == password
        assert kept["metadata"]["resourceVersion"] == secret["metadata"]["resourceVersion"]

        # The premium tier: refused to the admin, on create and on change.
        with pytest.raises(ApiError) as refused:
            await create(client, TENANT, tenant("big", tier="premium"))
        assert refused.value.status == 403
        assert tenants.ADMINS in str(refused.value)
        with pytest.raises(ApiError) as refused:
            await patch(client, TENANT, "acme", {"spec": {"tier": "premium"}}, namespace=NAMESPACE)
        assert refused.value.status == 403
        assert tenants.ADMINS in str(refused.value)

        # Admitted to alice; the operator's finalizer writes on it pass the validating
        # webhook (they do not change the tier), so it converges.
        made = await create(alice, TENANT, tenant("vip", tier="premium"))
        assert made["spec"]["owner"] == "alice"
        await reconciled(cluster)
        converged(cluster, "vip", 1)
        finalizer_writes = [
            r for r in cluster.requests_of("patch", "tenants", name="vip") if r.subresource is None
        ]
        assert finalizer_writes
        assert {r.status for r in finalizer_writes} == {200}

        # Deleted: access revoked (RoleBinding and Secret), then the Tenants go, and the
        # garbage collector deletes the rest.
        await delete(client, TENANT, "acme", namespace=NAMESPACE)
        await delete(alice, TENANT, "vip", namespace=NAMESPACE)
        await reconciled(cluster)
        revoked = [
            str(r.name)
            for r in cluster.requests_of("delete")
            if r.resource in ("rolebindings", "secrets") and r.status == 200
        ]
        assert sorted(revoked) == ["acme", "acme-credentials", "vip", "vip-credentials"]
        assert cluster.objects(TENANT.api_version, "Tenant", NAMESPACE) == []
        for kind, (resource, _) in CHILDREN.items():
            assert cluster.objects(resource.api_version, kind, NAMESPACE) == [], kind
