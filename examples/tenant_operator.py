"""A Tenant operator: one custom resource that owns five kinds, with generated credentials.

A ``Tenant`` (``tenancy.example.com/v1``, namespaced) asks for a place to work::

    apiVersion: tenancy.example.com/v1
    kind: Tenant
    metadata: {name: acme, namespace: shop}
    spec:
      tier: standard                       # or premium: only tenant-admins may ask for it
      members: [alice, bob]                # users bound to the tenant's Role
      settings: {region: eu-west-1}        # rendered into the tenant's ConfigMap

The operator gives it, each with a controller owner reference (`owner_reference`), so a
change to any of them triggers the Tenant again and is put right:

- ConfigMap ``acme-settings``: the settings;
- Secret ``acme-credentials``: a username (``acme-app``) and a password generated once,
  then kept (a Secret never rewritten; deleted by someone, it is generated anew);
- ServiceAccount ``acme``, Role ``acme`` and RoleBinding ``acme``: the tenant's workloads
  (the ServiceAccount), its owner and its members may read their Tenant and the namespace's
  ConfigMaps.

It reports ``Ready`` (`set_condition`: the transition time moves only when the status
does) and, when a write fails, ``Ready=False`` with the error, which fastctl scrubs of
Secret values before it stores it. A finalizer revokes access at once when a Tenant is
deleted: it deletes the RoleBinding and the credentials, and leaves the rest to the
garbage collector (through the owner references).

Two webhooks guard Tenants: a defaulting one fills ``spec.owner`` with the creating user,
and a validating one lets only members of ``tenant-admins`` ask for the premium tier. The
validating one judges what a request changes, not the whole object: the operator's own
writes (adding and removing its finalizer) pass through it too, and it is no admin.

What the controller sends, per kind, is declared with `needs`, so the Role that ``fastctl
manifests`` writes grants exactly that: for the Secrets ``create`` and ``delete`` but no
``patch`` (never rewritten), for the ConfigMap, ServiceAccount and Role ``create`` and
``patch`` but no ``delete`` (the garbage collector's job). A Role the operator writes may
grant only what the operator holds itself (the API server refuses an escalation), so the
tenant's Role grants a part of the operator's own rights: ``get`` of its Tenant (the
finalizer's) and ``list``/``watch`` of ConfigMaps (the watch's).

Run it against a local control plane, with its webhooks (``--webhook-managed`` certifies
them and installs their configurations, pointing at this process)::

    eval "$(fastctl control-plane up)"
    fastctl crd examples/tenant_operator.py:make | kubectl apply -f -
    fastctl run examples/tenant_operator.py:make --webhook-managed tenant-operator

Or as its ServiceAccount, under the Role that ``fastctl manifests
examples/tenant_operator.py:make --namespace shop --create-namespace`` writes: apply its
CustomResourceDefinition, Namespace, ServiceAccount, Role and RoleBinding (a local control
plane runs no Deployment, has no cert-manager and cannot reach the webhook Service), then::

    fastctl control-plane kubeconfig --service-account shop/tenant-operator --out op.kubeconfig
    fastctl run examples/tenant_operator.py:make --namespace shop --kubeconfig op.kubeconfig \
        --no-webhooks

``tests/kube/test_tenant_operator.py`` does that with the webhooks too: it serves them from
a certificate it issues for 127.0.0.1 (``--webhook-cert-dir``) and installs the generated
configurations pointing at the process.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes_asyncio.client import ApiClient
from pydantic import Field

from fastctl import Action, Controller, generation_changed
from fastctl.deploy import needs
from fastctl.kube import (
    ApiError,
    Condition,
    CustomResource,
    KubeModel,
    PrinterColumn,
    Recorder,
    Resource,
    apply,
    apply_status,
    create,
    delete,
    finalizer,
    owner_reference,
    set_condition,
)
from fastctl.runtime import RelatedCache
from fastctl.webhook import AdmissionRequest, Allow, Deny, Webhooks

GROUP = "tenancy.example.com"
FIELD_MANAGER = "tenant-operator"
FINALIZER = f"{GROUP}/revoke-access"
ADMINS = "tenant-admins"
"""The group whose members may ask for the premium tier."""


class TenantSpec(KubeModel):
    """What a tenant gets."""

    tier: Literal["standard", "premium"] = "standard"
    owner: str | None = Field(
        default=None, description="Who asked for it: filled in by the defaulting webhook."
    )
    members: list[str] = Field(default_factory=list, description="Users bound to its Role.")
    settings: dict[str, str] = Field(
        default_factory=dict, description="The values of its ConfigMap."
    )


class TenantStatus(KubeModel):
    """What the operator last made."""

    observed_generation: int | None = None
    service_account: str | None = None
    credentials: str | None = Field(default=None, description="The Secret of its password.")
    conditions: list[Condition] = Field(default_factory=list)


class Tenant(
    CustomResource,
    group=GROUP,
    version="v1",
    printer_columns=[
        PrinterColumn("Tier", ".spec.tier"),
        PrinterColumn("Ready", '.status.conditions[?(@.type=="Ready")].status'),
    ],
):
    """A tenant: its ServiceAccount, access, settings and credentials."""

    spec: TenantSpec = Field(default_factory=TenantSpec)
    status: TenantStatus | None = None


CRDS = [Tenant]
TENANT = Tenant.resource()
CONFIGMAP = Resource("v1", "ConfigMap")
SECRET = Resource("v1", "Secret")
SERVICEACCOUNT = Resource("v1", "ServiceAccount")
ROLE = Resource("rbac.authorization.k8s.io/v1", "Role")
ROLEBINDING = Resource("rbac.authorization.k8s.io/v1", "RoleBinding")


# -- what a Tenant is made of (pure functions of the Tenant) --------------------------------


def _meta(tenant: Tenant, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": tenant.metadata.namespace,
        "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER, "tenant": tenant_name(tenant)},
        "ownerReferences": [owner_reference(tenant)],
    }


def tenant_name(tenant: Tenant) -> str:
    return tenant.metadata.name or ""


def secret_name(tenant: Tenant) -> str:
    return f"{tenant_name(tenant)}-credentials"


def subjects(tenant: Tenant) -> list[dict[str, str]]:
    """Who the RoleBinding binds: the tenant's ServiceAccount, its owner and its members."""
    account = {"kind": "ServiceAccount", "name": tenant_name(tenant)}
    bound = [{**account, "namespace": str(tenant.metadata.namespace)}]
    users = [tenant.spec.owner] if tenant.spec.owner else []
    for user in [*users, *tenant.spec.members]:
        subject = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}
        if subject not in bound:
            bound.append(subject)
    return bound


def children(tenant: Tenant) -> list[tuple[Resource, dict[str, Any]]]:
    """The objects applied on every reconcile (the Secret is not among them: it is created
    once, `credentials`)."""
    name = tenant_name(tenant)
    role_rules = [
        # Only rights the operator holds itself: RBAC refuses to let it grant more.
        {"apiGroups": [GROUP], "resources": [TENANT.plural], "resourceNames": [name],
         "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
    ]  # fmt: skip
    return [
        (CONFIGMAP, {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": _meta(tenant, f"{name}-settings"),
                     "data": dict(tenant.spec.settings)}),
        (SERVICEACCOUNT, {"apiVersion": "v1", "kind": "ServiceAccount",
                          "metadata": _meta(tenant, name)}),
        (ROLE, {"apiVersion": ROLE.api_version, "kind": "Role", "metadata": _meta(tenant, name),
                "rules": role_rules}),
        (ROLEBINDING, {"apiVersion": ROLEBINDING.api_version, "kind": "RoleBinding",
                       "metadata": _meta(tenant, name),
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                   "name": name},
                       "subjects": subjects(tenant)}),
    ]  # fmt: skip


def credentials(tenant: Tenant, password: str) -> dict[str, Any]:
    """The tenant's Secret, with `password`. fastctl redacts every value of a Secret it has
    read from the texts it prints and the status it writes, so no value here is a name
    that other texts need: a username equal to the Tenant's name would blank the name
    from the operator's logs and Events of any process that read the Secret."""
    username = f"{tenant_name(tenant)}-app"
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(tenant, secret_name(tenant)),
        "stringData": {"username": username, "password": password},
    }


def new_password() -> str:
    return secrets.token_urlsafe(24)


def next_status(tenant: Tenant, ready: Condition) -> TenantStatus | None:
    """The status to write with the `ready` condition, or ``None`` when the stored one
    says it already (a write would change nothing, and trigger nobody)."""
    generation = tenant.metadata.generation or 0
    old = tenant.status or TenantStatus()
    conditions = list(old.conditions)  # a copy: the cached list stays as it is
    changed = set_condition(conditions, ready, generation=generation)
    status = TenantStatus(
        observed_generation=generation,
        service_account=tenant_name(tenant),
        credentials=secret_name(tenant),
        conditions=conditions,
    )
    same = (
        old.observed_generation == status.observed_generation
        and old.service_account == status.service_account
        and old.credentials == status.credentials
    )
    return None if same and not changed else status


# -- the reconcile ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Context:
    """The client, the Event recorder and the cache of the Secrets (metadata only: the
    operator never holds a password in memory after it created it)."""

    client: ApiClient
    recorder: Recorder
    secrets: RelatedCache


class CredentialsTaken(Exception):
    """A Secret of the credentials' name exists and is not this Tenant's."""


async def reconcile(tenant: Tenant, ctx: Context) -> Action | None:
    """Provision the Tenant; revoke its access when it is deleted."""
    return await finalizer(
        ctx.client,
        TENANT,
        tenant,
        FINALIZER,
        apply=lambda t: provision(t, ctx),
        cleanup=lambda t: revoke(t, ctx),
    )


async def provision(tenant: Tenant, ctx: Context) -> Action | None:
    try:
        for resource, body in children(tenant):
            await apply(ctx.client, resource, body, field_manager=FIELD_MANAGER)
        generated = await ensure_credentials(tenant, ctx)
    except (ApiError, CredentialsTaken) as exc:
        failed = Condition(
            type="Ready", status="False", reason=type(exc).__name__, message=str(exc)
        )
        await write_status(tenant, ctx, failed)
        raise  # the error policy retries, and a Warning Event says why
    if generated:
        await ctx.recorder.publish(
            tenant, reason="CredentialsGenerated", note=f"generated Secret {secret_name(tenant)}"
        )
    ready = Condition(type="Ready", status="True", reason="Provisioned", message="")
    await write_status(tenant, ctx, ready)
    return None


async def ensure_credentials(tenant: Tenant, ctx: Context) -> bool:
    """Create the Secret unless the cache holds it (owned by this Tenant); True if created.
    A Secret is created, never applied: a password once given is kept."""
    name = secret_name(tenant)
    if any(s["metadata"]["name"] == name for s in ctx.secrets.owned_by(tenant)):
        return False
    try:
        body = credentials(tenant, new_password())
        await create(ctx.client, SECRET, body, field_manager=FIELD_MANAGER)
    except ApiError as exc:
        if exc.status != 409:
            raise
        raise CredentialsTaken(
            f"Secret {name} exists and is not owned by Tenant {tenant_name(tenant)}"
        ) from None
    return True


async def write_status(tenant: Tenant, ctx: Context, ready: Condition) -> None:
    status = next_status(tenant, ready)
    if status is not None:
        await apply_status(ctx.client, TENANT, tenant, status=status, field_manager=FIELD_MANAGER)


async def revoke(tenant: Tenant, ctx: Context) -> Action | None:
    """Take the tenant's access away now; the owner references take care of the rest."""
    namespace = tenant.metadata.namespace
    await delete(ctx.client, ROLEBINDING, tenant_name(tenant), namespace=namespace)
    await delete(ctx.client, SECRET, secret_name(tenant), namespace=namespace)
    return None


def make(client: ApiClient, namespace: str | None = None) -> Controller:
    """The Tenant controller (``fastctl run examples/tenant_operator.py:make``)."""
    recorder = Recorder(client, FIELD_MANAGER)
    ctl = Controller(
        client,
        Tenant,
        reconcile,
        namespace=namespace,
        name="tenant",
        recorder=recorder,
        event_filter=generation_changed,  # spec changes; not our status and finalizer writes
        ignore_own_writes=True,  # a child changed by someone else still triggers
    )
    for kind in (CONFIGMAP, SERVICEACCOUNT, ROLE, ROLEBINDING):
        ctl.owns(kind)
    ctl.owns(SECRET, cache=True, metadata_only=True)
    ctl.context = Context(client, recorder, ctl.cache(SECRET))
    return needs(
        ctl,
        verbs={
            CONFIGMAP: ("create", "patch"),  # applied; the garbage collector deletes
            SERVICEACCOUNT: ("create", "patch"),
            ROLE: ("create", "patch"),
            ROLEBINDING: ("create", "patch", "delete"),  # deleted by the finalizer
            SECRET: ("create", "delete"),  # created once, never rewritten
        },
    )


# -- webhooks --------------------------------------------------------------------------------

WEBHOOKS = Webhooks()
VALIDATE = f"tenants.validate.{GROUP}"
DEFAULT = f"tenants.default.{GROUP}"


@WEBHOOKS.validating(TENANT, name=VALIDATE)
def validate(request: AdmissionRequest) -> Allow | Deny:
    """Only tenant-admins may ask for the premium tier. Judged only when the request changes
    the tier: the operator's finalizer writes carry the tier unchanged, and pass."""
    tenant = Tenant.model_validate(request.object)
    if request.old_object is not None:
        old = Tenant.model_validate(request.old_object)
        if old.spec.tier == tenant.spec.tier:
            return Allow()
    if tenant.spec.tier == "premium" and ADMINS not in request.user_info.get("groups", ()):
        return Deny(f"only members of {ADMINS} may ask for the premium tier")
    return Allow()


@WEBHOOKS.mutating(TENANT, name=DEFAULT, operations=["CREATE"])
def default(request: AdmissionRequest) -> dict[str, Any]:
    """Fill ``spec.owner`` with the creating user, which no schema default can know."""
    obj = request.object
    assert obj is not None  # CREATE only
    spec = obj.setdefault("spec", {})
    if not spec.get("owner"):
        spec["owner"] = str(request.user_info.get("username") or "unknown")
    return obj
