"""An operator run locally as its ServiceAccount, under the Role ``fastctl manifests`` derives.

The test operator (``tests/kube/operators/scoped.py``) applies a Secret per labelled
ConfigMap and declares ``needs(verbs={SECRET: ("create", "patch")})``. Its ServiceAccount,
Role and RoleBinding from ``fastctl manifests`` are created; ``fastctl control-plane
kubeconfig --service-account`` mints a token for the ServiceAccount and writes a
kubeconfig. With it: the server sees the ServiceAccount; what the Role grants succeeds and
what it does not (deleting the Secret, reading a ConfigMap, another namespace) is refused
with 403; ``fastctl run`` with that kubeconfig converges a ConfigMap with no 403.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml  # type: ignore[import-untyped]

from fastctl.kube import ApiError, Resource, apply, delete, get
from fastctl.kube._http import request_json
from fastctl.testing import ControlPlane

from .conftest import make_client

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]

OPERATOR = f"{Path(__file__).parent / 'operators' / 'scoped.py'}:make"
NAME = "scoped"
SECRET = Resource("v1", "Secret")
CONFIGMAP = Resource("v1", "ConfigMap")


def fastctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastctl.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def admin(cp: ControlPlane, method: str, path: str, body: Any = None) -> Any:
    status, answer = cp.api_request(method, path, body)
    assert status < 300, f"{method} {path}: HTTP {status}: {answer}"
    return answer


def install_rbac(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    """The ServiceAccount, Role and RoleBinding of ``fastctl manifests``; returns the Role."""
    printed = fastctl("manifests", OPERATOR, "--namespace", namespace, "--name", NAME)
    assert printed.returncode == 0, printed.stderr
    objects = {doc["kind"]: doc for doc in yaml.safe_load_all(printed.stdout) if doc}
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    admin(cp, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", objects["ServiceAccount"])
    admin(cp, "POST", f"{rbac}/roles", objects["Role"])
    admin(cp, "POST", f"{rbac}/rolebindings", objects["RoleBinding"])
    role: dict[str, Any] = objects["Role"]
    return role


def allowed(cp: ControlPlane, namespace: str, resource: str, verb: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{NAME}",
            "resourceAttributes": {"namespace": namespace, "resource": resource, "verb": verb},
        },
    }
    answer = admin(cp, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


async def wait_for(check: Any, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def minted(namespace: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return fastctl(
        "control-plane",
        "kubeconfig",
        "--service-account",
        f"{namespace}/{NAME}",
        "--out",
        str(out),
        *extra,
    )


async def test_an_operator_runs_locally_as_its_service_account(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    role = install_rbac(control_plane, namespace)
    secrets = [r for r in role["rules"] if r["resources"] == ["secrets"]]
    assert [sorted(r["verbs"]) for r in secrets] == [["create", "list", "patch", "watch"]]
    await wait_for(lambda: allowed(control_plane, namespace, "secrets", "patch"), "the Role")

    out = tmp_path / "operator.kubeconfig"
    made = minted(namespace, out, "--kubeconfig", str(control_plane.kubeconfig))
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == f"export KUBECONFIG={out}"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600

    async with await make_client(out) as api:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        path = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
        who = await request_json(api, "POST", path, body=orjson.dumps(review))
        assert who["status"]["userInfo"]["username"] == (
            f"system:serviceaccount:{namespace}:{NAME}"
        )
        # Inside the Role: apply a Secret, list the ConfigMaps.
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "inside", "namespace": namespace},
            "stringData": {"k": "v"},
        }
        await apply(api, SECRET, secret, field_manager="test")
        listed = await request_json(api, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert listed["kind"] == "ConfigMapList"
        # Outside: delete the Secret, get one ConfigMap, anything in another namespace.
        outside = [
            delete(api, SECRET, "inside", namespace=namespace),
            get(api, CONFIGMAP, "any", namespace=namespace),
            request_json(api, "GET", "/api/v1/namespaces/default/configmaps"),
        ]
        for call in outside:
            with pytest.raises(ApiError) as refused:
                await call
            assert refused.value.status == 403, refused.value
            assert f"system:serviceaccount:{namespace}:{NAME}" in str(refused.value)

    await asyncio.to_thread(run_operator, control_plane, namespace, out, tmp_path)


def run_operator(cp: ControlPlane, namespace: str, kubeconfig: Path, tmp: Path) -> None:
    """``fastctl run`` as the ServiceAccount applies the Secret of a labelled ConfigMap."""
    log = tmp / "operator.log"
    command = [sys.executable, "-m", "fastctl.cli", "run", OPERATOR]
    command += ["--kubeconfig", str(kubeconfig), "--namespace", namespace]
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [*command, "--metrics-port", "0", "--probe-port", "0"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": ""},
        )
    try:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "tenant", "labels": {"app.fastctl.dev/scoped": "yes"}},
        }
        admin(cp, "POST", f"/api/v1/namespaces/{namespace}/configmaps", body)
        path = f"/api/v1/namespaces/{namespace}/secrets/tenant-credentials"

        deadline = time.monotonic() + 60
        while cp.api_request("GET", path)[0] != 200:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no Secret yet: {log.read_text()}"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    output = log.read_text()
    assert "forbidden" not in output.lower(), output  # a 403's reason and message


def test_a_missing_service_account_is_one_clear_line(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    out = tmp_path / "none.kubeconfig"
    made = minted(namespace, out, "--kubeconfig", str(control_plane.kubeconfig))
    assert made.returncode == 1
    assert made.stderr.strip() == (
        f"fastctl: error: ServiceAccount {namespace}/{NAME} does not exist: apply the "
        "ServiceAccount, Role and RoleBinding of `fastctl manifests` first"
    )
    assert not out.exists()
