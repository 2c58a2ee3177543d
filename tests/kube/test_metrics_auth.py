"""/metrics on the real API server: HTTPS, TokenReview and SubjectAccessReview.

A ServiceAccount bound to the metrics-reader ClusterRole that ``fastctl manifests`` writes
gets the metrics; no token is 401; a token of a ServiceAccount without the role is 403;
plain HTTP is refused unless the Manager serves it on purpose (``metrics_secure=False``,
``--metrics-insecure``). The probes answer in plain HTTP, without a token, throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.deploy import DeployOptions
from fastctl.deploy._manifests import metrics_rbac
from fastctl.kube._resource import Resource
from fastctl.runtime._metrics_auth import MetricsAuthorizer
from fastctl.runtime.controller import Controller
from fastctl.runtime.manager import Manager, ServerOptions
from fastctl.testing import ControlPlane

pytestmark = pytest.mark.kube


async def admin(cp: ControlPlane, method: str, path: str, body: Any = None) -> Any:
    status, answer = await asyncio.to_thread(cp.api_request, method, path, body)
    if status >= 300 and not (method == "DELETE" and status == 404):
        raise AssertionError(f"{method} {path}: HTTP {status}: {answer}")
    return answer


async def service_account_token(cp: ControlPlane, namespace: str, name: str) -> str:
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    await admin(cp, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", sa)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    return str((await admin(cp, "POST", path, request))["status"]["token"])


async def may_get_metrics(cp: ControlPlane, user: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "nonResourceAttributes": {"path": "/metrics", "verb": "get"}},
    }
    answer = await admin(cp, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


@contextlib.asynccontextmanager
async def reader_role(cp: ControlPlane, namespace: str) -> AsyncIterator[str]:
    """The generated metrics-reader ClusterRole, bound to a new ServiceAccount ``reader``;
    yields its token once the authorizer allows it."""
    options = DeployOptions("m:f", namespace, "img", operator_namespace=namespace)
    (reader,) = [o for o in metrics_rbac(options) if o["metadata"]["name"].endswith("-reader")]
    name = reader["metadata"]["name"]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    }
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    token = await service_account_token(cp, namespace, "reader")
    await admin(cp, "POST", f"{rbac}/clusterroles", reader)
    await admin(cp, "POST", f"{rbac}/clusterrolebindings", binding)
    try:
        deadline = time.monotonic() + 30
        while not await may_get_metrics(cp, f"system:serviceaccount:{namespace}:reader"):
            assert time.monotonic() < deadline, "the binding never took effect"
            await asyncio.sleep(0.05)
        yield token
    finally:
        await admin(cp, "DELETE", f"{rbac}/clusterrolebindings/{name}")
        await admin(cp, "DELETE", f"{rbac}/clusterroles/{name}")


@contextlib.asynccontextmanager
async def serving(client: ApiClient, namespace: str, *, secure: bool) -> AsyncIterator[Manager]:
    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        return None

    ctl = Controller(client, Resource("v1", "ConfigMap"), reconcile, namespace=namespace)
    mgr = Manager(
        client,
        servers=ServerOptions(
            metrics_port=0,
            metrics_host="127.0.0.1",
            metrics_secure=secure,
            probe_port=0,
            probe_host="127.0.0.1",
        ),
    ).add(ctl)
    task = asyncio.create_task(mgr.run())
    try:
        deadline = time.monotonic() + 30
        while mgr.metrics_server is None or not mgr.metrics_server.port:
            assert time.monotonic() < deadline, "the servers never started"
            assert not task.done(), "the manager ended"
            await asyncio.sleep(0.02)
        yield mgr
    finally:
        mgr.shutdown()
        await asyncio.wait_for(task, 30)


async def get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, headers=headers, ssl=False) as resp,  # a self-signed certificate
    ):
        return resp.status, await resp.text()


async def test_a_reader_scrapes_others_get_401_or_403_and_plain_http_is_refused(
    control_plane: ControlPlane, client: ApiClient, namespace: str
) -> None:
    nobody = await service_account_token(control_plane, namespace, "nobody")
    async with (
        reader_role(control_plane, namespace) as reader,
        serving(client, namespace, secure=True) as mgr,
    ):
        assert mgr.metrics_server is not None
        assert mgr.health is not None
        metrics = f"https://127.0.0.1:{mgr.metrics_server.port}/metrics"
        status, text = await get(metrics, reader)
        assert status == 200
        assert "workqueue_depth" in text
        assert (await get(metrics))[0] == 401
        assert (await get(metrics, "not-a-token"))[0] == 401
        status, text = await get(metrics, nobody)
        assert status == 403
        assert "workqueue_depth" not in text
        with pytest.raises(aiohttp.ClientError):
            await get(f"http://127.0.0.1:{mgr.metrics_server.port}/metrics", reader)
        for probe in ("/healthz", "/readyz"):  # plain HTTP, no token, on their own port
            url = f"http://127.0.0.1:{mgr.health.port}{probe}"
            deadline = time.monotonic() + 30
            while (await get(url))[0] != 200:
                assert time.monotonic() < deadline, f"{probe} never became 200"
                await asyncio.sleep(0.05)
        authorizer = mgr.metrics_server.authorizer
        assert isinstance(authorizer, MetricsAuthorizer)
        reviews = authorizer.reviews
        for _ in range(20):
            assert (await get(metrics, reader))[0] == 200
        assert authorizer.reviews == reviews  # cached: no review per scrape


async def test_plain_http_only_when_asked_for(client: ApiClient, namespace: str) -> None:
    async with serving(client, namespace, secure=False) as mgr:
        assert mgr.metrics_server is not None
        status, text = await get(f"http://127.0.0.1:{mgr.metrics_server.port}/metrics")
        assert status == 200
        assert "workqueue_depth" in text
