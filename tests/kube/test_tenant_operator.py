"""The example Tenant operator (examples/tenant_operator.py) run as a user would run it.

``fastctl manifests`` renders it (``--metrics-insecure``: plain-HTTP ``/metrics``); its CRD,
ServiceAccount, Role and RoleBinding are applied as they are; ``fastctl control-plane
kubeconfig --service-account`` mints its kubeconfig; and the generated Deployment's command
line, with its ports and certificate mount mapped to this machine (as in
test_deployment_webhooks.py), runs under ``fastctl run`` with that kubeconfig, with leader
election on its Lease. The test plays cert-manager: it issues the serving certificate into
the mounted directory and installs the generated webhook configurations pointing at the
process (``https://127.0.0.1:PORT``: the API server here cannot reach a Service).

Through the Tenants' lives the operator converges each one (five children with its
controller owner reference, ``Ready`` with the generation, the finalizer), keeps the
generated password over a spec change, revokes access (RoleBinding and Secret deleted) when
a Tenant is deleted, and the webhooks default the owner and let only tenant-admins ask for
the premium tier, while the operator's own finalizer writes on a premium Tenant pass. It
never receives a 403: its ``/metrics`` has no ``rest_client_requests_total`` series with
``code="403"``, and its log has no "forbidden".

A second run, in this process, counts the Role's rules: as its ServiceAccount, with the same
Role, through a Tenant's life in which someone deletes its Secret (generated again: the
``CredentialsGenerated`` Event repeats, a patch of its series) and another writer changes
its finalizers as the operator adds its own (test_rbac.py's ``conflicts``: the ``get`` of
the finalizer's retry), every verb the Role grants is used, and none is refused.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl._tls import ServingCertificate
from fastctl.deploy._webhooks import CERT_DIR
from fastctl.kube import ApiError, Resource, create, delete, get, patch
from fastctl.runtime import LeaderElection, Manager
from fastctl.testing import ControlPlane

from .conftest import make_client
from .test_deployment_webhooks import configurations, free_port, one
from .test_rbac import Grant, Sent, conflicts, grants_of, sent, wait_for  # noqa: F401  (fixtures; conflicts is autouse)

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
TARGET = "examples/tenant_operator.py:make"
NAME = "tenant-operator"
FASTCTL = str(Path(sys.executable).parent / "fastctl")
PORT_FLAGS = ("--metrics-port", "--probe-port", "--webhook-port")


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
TENANT: Resource = tenants.TENANT


def fastctl(*args: str) -> str:
    done = subprocess.run(
        [FASTCTL, *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def render(namespace: str) -> list[dict[str, Any]]:
    out = fastctl("manifests", TARGET, "--namespace", namespace, "--metrics-insecure")
    return [d for d in yaml.safe_load_all(out) if d]


def admin(cp: ControlPlane, method: str, path: str, body: Any = None) -> Any:
    status, answer = cp.api_request(method, path, body)
    assert status < 300, f"{method} {path}: HTTP {status}: {answer}"
    return answer


def install(cp: ControlPlane, docs: list[dict[str, Any]], namespace: str) -> None:
    """The CRD (once per session), the ServiceAccount, Role and RoleBinding, as rendered;
    returns once the authorizer applies the Role."""
    crd = one(docs, "CustomResourceDefinition")
    status, body = cp.api_request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
    )
    assert status in (201, 409), body
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    admin(
        cp, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", one(docs, "ServiceAccount")
    )
    admin(cp, "POST", f"{rbac}/roles", one(docs, "Role"))
    admin(cp, "POST", f"{rbac}/rolebindings", one(docs, "RoleBinding"))
    deadline = time.monotonic() + 60
    while True:
        served = cp.api_request("GET", f"/apis/{TENANT.api_version}")
        if served[0] == 200 and allowed(cp, namespace, "patch", "tenants/status"):
            return
        assert time.monotonic() < deadline, f"CRD or Role not in effect: {served}"
        time.sleep(0.2)


def allowed(cp: ControlPlane, namespace: str, verb: str, resource: str) -> bool:
    plural, _, sub = resource.partition("/")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{NAME}",
            "resourceAttributes": {"namespace": namespace, "group": tenants.GROUP,
                                   "resource": plural, "subresource": sub, "verb": verb},
        },
    }  # fmt: skip
    answer = admin(cp, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


def command_line(
    docs: list[dict[str, Any]], cert_dir: Path, kubeconfig: Path
) -> tuple[list[str], dict[str, int]]:
    """The Deployment's arguments with free local ports, the mounted certificate directory
    mapped to `cert_dir`, and the ServiceAccount's kubeconfig."""
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = list(container["args"])
    assert args[:2] == ["run", TARGET]
    assert "--metrics-insecure" in args
    ports: dict[str, int] = {}
    for flag in PORT_FLAGS:
        ports[flag] = free_port()
        args[args.index(flag) + 1] = str(ports[flag])
    i = args.index("--webhook-cert-dir")
    assert args[i + 1] == CERT_DIR
    args[i + 1] = str(cert_dir)
    return [*args, "--kubeconfig", str(kubeconfig)], ports


@contextlib.contextmanager
def running(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "KUBECONFIG": ""}  # only --kubeconfig: the ServiceAccount's
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [FASTCTL, *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except OSError as exc:
        return 0, str(exc)


class Operator:
    """The running process: its log, and waits that fail at once if it exits."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path, ports: dict[str, int]) -> None:
        self.proc, self.log, self.ports = proc, log, ports

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    async def until(self, check: Callable[[], Awaitable[Any]], what: str) -> Any:
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, f"the operator exited: {self.tail()}"
            log = self.log.read_text(errors="replace")
            assert "forbidden" not in log.lower(), f"a 403 (while waiting for {what}): {log}"
            try:
                value = await check()
            except ApiError as exc:
                if exc.status != 404:
                    raise
                value = None
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.tail()}"
            await asyncio.sleep(0.1)

    def metrics(self) -> str:
        status, text = http_get(self.ports["--metrics-port"], "/metrics")
        assert status == 200, text
        return text


def tenant(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": TENANT.api_version,
        "kind": "Tenant",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def dry_run(cp: ControlPlane, namespace: str, body: dict[str, Any]) -> tuple[int, Any]:
    path = f"/apis/{TENANT.api_version}/namespaces/{namespace}/tenants?dryRun=All"
    return cp.api_request("POST", path, body)


async def webhooks_loaded(cp: ControlPlane, namespace: str, op: Operator) -> None:
    """Wait (with dry runs: nothing stored) until the API server calls both webhooks."""

    async def refused() -> bool:
        status, answer = dry_run(cp, namespace, tenant("probe", namespace, tier="premium"))
        return status == 403 and tenants.ADMINS in str(answer)

    async def defaulted() -> bool:
        status, answer = dry_run(cp, namespace, tenant("probe", namespace))
        return status == 201 and answer["spec"].get("owner") == "fastctl-admin"

    await op.until(refused, "the validating webhook")
    await op.until(defaulted, "the defaulting webhook")


CHILDREN = {
    "ConfigMap": (tenants.CONFIGMAP, "{}-settings"),
    "Secret": (tenants.SECRET, "{}-credentials"),
    "ServiceAccount": (tenants.SERVICEACCOUNT, "{}"),
    "Role": (tenants.ROLE, "{}"),
    "RoleBinding": (tenants.ROLEBINDING, "{}"),
}


async def converged(
    client: ApiClient, op: Operator, namespace: str, name: str, generation: int
) -> dict[str, Any]:
    """Wait until Tenant `name` is Ready at `generation`; check its finalizer and its five
    children's controller owner reference; the Tenant."""

    async def ready() -> Any:
        obj = await get(client, TENANT, name, namespace=namespace)
        status = obj.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        good = conditions.get("Ready", {})
        if good.get("status") == "True" and good.get("observedGeneration") == generation:
            return obj
        return None

    obj: dict[str, Any] = await op.until(ready, f"Tenant {name} Ready at {generation}")
    assert tenants.FINALIZER in obj["metadata"]["finalizers"]
    assert obj["status"]["observedGeneration"] == generation
    assert obj["status"]["credentials"] == f"{name}-credentials"
    for kind, (resource, pattern) in CHILDREN.items():
        child = await get(client, resource, pattern.format(name), namespace=namespace)
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


async def test_the_tenant_operator_converges_as_its_service_account(
    control_plane: ControlPlane, client: ApiClient, namespace: str, tmp_path: Path
) -> None:
    docs = render(namespace)
    await asyncio.to_thread(install, control_plane, docs, namespace)
    kubeconfig = tmp_path / "operator.kubeconfig"
    await asyncio.to_thread(
        fastctl, "control-plane", "kubeconfig", "--service-account", f"{namespace}/{NAME}",
        "--out", str(kubeconfig), "--kubeconfig", str(control_plane.kubeconfig),
    )  # fmt: skip
    issued = ServingCertificate.self_signed(tmp_path / "issuer", ["127.0.0.1"])
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    shutil.copy(issued.cert_file, mounted / "tls.crt")
    shutil.copy(issued.key_file, mounted / "tls.key")
    assert issued.ca_bundle is not None
    args, ports = command_line(docs, mounted, kubeconfig)
    alice_group = await admit_tenant_admins(control_plane, namespace)

    log = tmp_path / "operator.log"
    with running(args, log) as proc:
        op = Operator(proc, log, ports)
        await op.until(lambda: ready_probe(ports["--probe-port"]), "/readyz")
        url = f"https://127.0.0.1:{ports['--webhook-port']}"
        async with configurations(client, docs, url, issued.ca_bundle):
            await webhooks_loaded(control_plane, namespace, op)
            await lifecycle(control_plane, client, op, namespace, alice_group)
        metrics = op.metrics()
    requests = re.findall(r"^rest_client_requests_total\{([^}]*)\} (\S+)$", metrics, re.M)
    codes = {re.search(r'code="([^"]*)"', labels)[1] for labels, _ in requests}  # type: ignore[index]
    assert "403" not in codes, requests
    assert {"200", "201"} <= codes, requests
    assert "forbidden" not in log.read_text().lower(), op.tail()


async def ready_probe(port: int) -> bool:
    status, _ = await asyncio.to_thread(http_get, port, "/readyz")
    return status == 200


async def admit_tenant_admins(cp: ControlPlane, namespace: str) -> ApiClient:
    """A client for user alice in group tenant-admins, who may create and delete Tenants
    in `namespace`."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "tenant-admins"},
        "rules": [{"apiGroups": [tenants.GROUP], "resources": ["tenants"],
                   "verbs": ["create", "get", "delete"]}],
    }  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "tenant-admins"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "tenant-admins"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": tenants.ADMINS}],
    }  # fmt: skip
    await asyncio.to_thread(admin, cp, "POST", f"{rbac}/roles", role)
    await asyncio.to_thread(admin, cp, "POST", f"{rbac}/rolebindings", binding)
    return await make_client(cp.user_kubeconfig("alice", [tenants.ADMINS]))


async def lifecycle(
    cp: ControlPlane, client: ApiClient, op: Operator, namespace: str, alice: ApiClient
) -> None:
    async with alice:
        # A standard Tenant by the admin: the owner defaulted, five children, Ready.
        body = tenant("acme", namespace, members=["bob"], settings={"region": "eu"})
        made = await create(client, TENANT, body)
        assert made["spec"]["owner"] == "fastctl-admin"
        await converged(client, op, namespace, "acme", 1)
        binding = await get(client, tenants.ROLEBINDING, "acme", namespace=namespace)
        assert [s["name"] for s in binding["subjects"]] == ["acme", "fastctl-admin", "bob"]
        secret = await get(client, tenants.SECRET, "acme-credentials", namespace=namespace)
        password = password_of(secret)
        assert len(password) >= 24

        # A spec change: the ConfigMap follows, the password stays.
        change = {"spec": {"settings": {"region": "us"}}}
        await patch(client, TENANT, "acme", change, namespace=namespace)
        await converged(client, op, namespace, "acme", 2)
        settings = await get(client, tenants.CONFIGMAP, "acme-settings", namespace=namespace)
        assert settings["data"] == {"region": "us"}
        kept = await get(client, tenants.SECRET, "acme-credentials", namespace=namespace)
        assert password_of(kept) == password
        assert kept["metadata"]["resourceVersion"] == secret["metadata"]["resourceVersion"]

        # The premium tier: refused to the admin, on create and on change.
        with pytest.raises(ApiError) as refused:
            await create(client, TENANT, tenant("big", namespace, tier="premium"))
        assert refused.value.status == 403
        assert tenants.ADMINS in str(refused.value)
        with pytest.raises(ApiError) as refused:
            await patch(client, TENANT, "acme", {"spec": {"tier": "premium"}}, namespace=namespace)
        assert refused.value.status == 403
        assert tenants.ADMINS in str(refused.value)

        # Admitted to alice; the operator's finalizer writes on it pass the validating
        # webhook (they do not change the tier), so it converges and is deleted.
        made = await create(alice, TENANT, tenant("vip", namespace, tier="premium"))
        assert made["spec"]["owner"] == "alice"
        await converged(client, op, namespace, "vip", 1)

        # Deleted: access revoked (RoleBinding and Secret), then the Tenant goes.
        await delete(client, TENANT, "acme", namespace=namespace)
        await delete(alice, TENANT, "vip", namespace=namespace)
        for name in ("acme", "vip"):
            for resource, child in ((TENANT, name), (tenants.ROLEBINDING, name),
                                    (tenants.SECRET, f"{name}-credentials")):  # fmt: skip

                async def gone(resource: Resource = resource, child: str = child) -> bool:
                    try:
                        await get(client, resource, child, namespace=namespace)
                    except ApiError as exc:
                        return exc.status == 404
                    return False

                await op.until(gone, f"{resource.kind} {child} deleted")


# -- every rule used -------------------------------------------------------------------------


def mint(cp: ControlPlane, namespace: str) -> str:
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{NAME}/token"
    return str(admin(cp, "POST", path, request)["status"]["token"])


@contextlib.asynccontextmanager
async def in_process(cp: ControlPlane, namespace: str, token: str) -> AsyncIterator[None]:
    """The operator as `fastctl run` builds it from the Deployment's flags (leader election
    on its Lease), in this process, as the ServiceAccount; its watches list with a
    paginated list (the one request of the ``list`` verb; this server would stream)."""
    cfg = Configuration(host=cp.server, api_key={"BearerToken": token})
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    cfg.ssl_ca_cert = str(cp.ca_file)
    async with ApiClient(cfg) as api:
        election = LeaderElection(
            NAME, namespace=namespace, lease_duration=3.0, renew_deadline=2.0, retry_period=0.2
        )
        manager = Manager(api, leader_election=election, metrics_port=None, probe_port=None)
        ctl = tenants.make(api, namespace=namespace)
        ctl.watch_config = replace(ctl.watch_config, streaming_list=False)
        manager.add(ctl)
        task = asyncio.create_task(manager.run())
        try:
            yield
        finally:
            manager.shutdown()
            await asyncio.wait_for(task, 60)


async def test_every_rule_of_the_tenant_role_is_used(
    control_plane: ControlPlane,
    client: ApiClient,
    namespace: str,
    sent: tuple[set[str], list[Sent]],  # noqa: F811
    conflicts: list[str],  # noqa: F811
) -> None:
    tokens, log = sent
    docs = render(namespace)
    await asyncio.to_thread(install, control_plane, docs, namespace)
    tokens.add(token := await asyncio.to_thread(mint, control_plane, namespace))
    granted = grants_of(one(docs, "Role"))

    def refused() -> list[Sent]:
        return [s for s in log if s.status == 403]

    def used(grant: Grant) -> bool:  # authorized: any answer but a 403 (the Lease's 404)
        return any(s.grant == grant and s.status != 403 for s in log)

    async def until(check: Callable[[], Awaitable[Any]], what: str) -> Any:
        async def done() -> Any:
            assert not refused(), refused()
            try:
                return await check()
            except ApiError as exc:
                if exc.status == 404:
                    return None
                raise

        try:
            await wait_for(done, what, 60)
        except AssertionError as exc:
            sent = [
                (s.method, s.path.rsplit("/", 2)[-2:], s.status)
                for s in log
                if s.grant[1] != "leases"
            ]
            raise AssertionError(f"{exc}; the operator's last requests: {sent}") from None

    async def ready(generation: int) -> bool:
        obj = await get(client, TENANT, "acme", namespace=namespace)
        return (obj.get("status") or {}).get("observedGeneration") == generation

    async def password() -> str:
        secret = await get(client, tenants.SECRET, "acme-credentials", namespace=namespace)
        return password_of(secret)

    async def repeated() -> bool:
        path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        items = (await asyncio.to_thread(admin, control_plane, "GET", path))["items"]
        generated = [e for e in items if e["reason"] == "CredentialsGenerated"]
        return any(((e.get("series") or {}).get("count") or 1) >= 2 for e in generated)

    async with in_process(control_plane, namespace, token):
        await create(client, TENANT, tenant("acme", namespace, settings={"a": "1"}))
        await until(lambda: ready(1), "Tenant acme Ready")
        first = await password()
        await delete(client, tenants.SECRET, "acme-credentials", namespace=namespace)

        async def regenerated() -> bool:
            return await password() != first

        await until(regenerated, "the credentials generated again")
        await until(repeated, "the repeated CredentialsGenerated Event")
        await patch(client, TENANT, "acme", {"spec": {"settings": {"a": "2"}}}, namespace=namespace)
        await until(lambda: ready(2), "Tenant acme Ready at generation 2")
        await delete(client, TENANT, "acme", namespace=namespace)

        async def released() -> bool:
            obj = await get(client, TENANT, "acme", namespace=namespace)
            return tenants.FINALIZER not in obj["metadata"].get("finalizers", [])

        await until(released, "the finalizer's cleanup")
        # The other writer lets go too (its finalizer, added by `conflicts`).
        let_go = {"metadata": {"finalizers": None}}
        await patch(client, TENANT, "acme", let_go, namespace=namespace)
        lease_renewed = ("coordination.k8s.io", "leases", "update")
        await until(lambda: asyncio.sleep(0, used(lease_renewed)), "a renewal of the Lease")
    assert not refused(), refused()
    assert conflicts, "no conflict was forced on the finalizer's path"
    unused = sorted(g for g in granted if not used(g))
    assert unused == [], f"granted, never used: {unused}"
