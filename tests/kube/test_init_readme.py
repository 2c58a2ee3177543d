"""``fastctl init demo-op`` as a user meets it: in a fresh directory and a fresh virtualenv
(no site packages of this checkout, no PYTHONPATH), the two commands of the project's
README, as written (``pip install -e '.[test]'`` takes fastctl from a wheel directory
through ``PIP_FIND_LINKS``, as the README says, and the rest from the package index), then
``fastctl run`` of the generated module against this session's control plane, its webhooks
served by that process (``--webhook-managed``), until a generated object is reconciled.

The wheel is this checkout's, for this version, in ``dist/`` (``FASTCTL_WHEEL_DIR`` names
another directory): ``scripts/build-wheels x86_64-unknown-linux-gnu`` makes it, and
``.ci/run`` does before the tests. Without it the test is skipped here, and fails in CI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastctl.cli import main
from fastctl.testing import ControlPlane

from .test_deployment_webhooks import free_port

pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
GROUP = "demo-op.example.com"
PLURAL = f"demoops.{GROUP}"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def wheel_dir() -> Path:
    """The directory holding this version's fastctl wheel (skip, or fail in CI, without)."""
    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    where = Path(os.environ.get("FASTCTL_WHEEL_DIR") or ROOT / "dist")
    if list(where.glob(f"fastctl-{version}-cp311-abi3-manylinux*_x86_64*.whl")):
        return where
    why = (
        f"no fastctl {version} wheel in {where}: scripts/build-wheels x86_64-unknown-linux-gnu "
        "makes it (.ci/run does, before the tests)"
    )
    if os.environ.get("CI"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def readme_commands(readme: str) -> list[str]:
    """The commands of the README's first shell block: how to install and test."""
    block = re.search(r"```sh\n(.*?)```", readme, re.DOTALL)
    assert block is not None, readme
    return [line for line in block.group(1).splitlines() if line.strip()]


def until(
    check: Callable[[], Any],
    what: str,
    operator: subprocess.Popen[bytes],
    log: Path,
    limit: float = 120.0,
) -> Any:
    """`check()`'s first true value, polled while the operator runs."""
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        if operator.poll() is not None:
            raise AssertionError(
                f"{what}: the operator exited ({operator.returncode}):\n" + log.read_text()[-4000:]
            )
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: not within {limit:.0f} s; the operator said:\n" + log.read_text()[-4000:]
            )
        time.sleep(0.2)


def test_the_readme_installs_tests_and_runs_the_new_project(
    tmp_path: Path, control_plane: ControlPlane, namespace: str
) -> None:
    wheels = wheel_dir()
    project = tmp_path / "demo-op"
    assert main(["init", "demo-op", "--directory", str(project)]) == 0
    commands = readme_commands((project / "README.md").read_text())
    assert commands == ["python -m pip install -e '.[test]'", "python -m pytest"]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PATH=f"{venv / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        PIP_FIND_LINKS=str(wheels),  # fastctl's wheel; everything else from the index
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        FASTCTL_NO_BUILD="1",  # the project's own control plane: this machine's binaries
    )
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command], cwd=project, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{command}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert "5 passed" in done.stdout, done.stdout  # the last command: the project's tests
    shown = subprocess.run(
        ["python", "-c", "import fastctl; print(fastctl.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.startswith(str(venv)), shown  # the wheel's fastctl, not this checkout's

    crd = subprocess.run(
        ["fastctl", "crd", "demo_op.operator:DemoOp", "--json"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    status, answer = control_plane.api_request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json.loads(crd)
    )
    assert status in (201, 409), answer
    hooks = f"demo-op-{namespace}"
    log = tmp_path / "operator.log"
    with log.open("w") as out:
        operator = subprocess.Popen(
            [
                "fastctl",
                "run",
                "demo_op.operator:make",
                "--kubeconfig",
                str(control_plane.kubeconfig),
                "--webhook-managed",
                hooks,
                "--webhook-host",
                "127.0.0.1",
                "--webhook-port",
                str(free_port()),
                "--metrics-port",
                "0",
                "--probe-port",
                "0",
            ],
            cwd=project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"/apis/{GROUP}/v1/namespaces/{namespace}/demoops"

        def installed() -> bool:
            return all(
                control_plane.api_request("GET", f"{ADMISSION}/{kind}/{hooks}")[0] == 200
                for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
            )

        until(installed, "the webhook configurations installed", operator, log)

        def demo(name: str, **data: str) -> dict[str, Any]:
            return {
                "apiVersion": f"{GROUP}/v1",
                "kind": "DemoOp",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"data": data},
            }

        status, answer = control_plane.api_request("POST", base, demo("hello", greeting="hi"))
        assert status == 201, answer
        created_by = answer["metadata"]["annotations"][f"{GROUP}/created-by"]
        assert created_by == "fastctl-admin"  # the defaulting webhook, served by the operator
        status, answer = control_plane.api_request("POST", base, demo("bad", **{"a/b": "x"}))
        assert status == 403, answer  # the validating webhook
        assert "spec.data keys must be" in answer["message"]

        def reconciled() -> bool:
            status, child = control_plane.api_request(
                "GET", f"/api/v1/namespaces/{namespace}/configmaps/hello"
            )
            _, obj = control_plane.api_request("GET", f"{base}/hello")
            conditions = (obj.get("status") or {}).get("conditions") or []
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            return status == 200 and child.get("data") == {"greeting": "hi"} and ready

        until(reconciled, "the DemoOp rendered and Ready", operator, log)
    finally:
        operator.terminate()
        try:
            operator.wait(timeout=60)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            control_plane.api_request(
                "DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/{hooks}"
            )
        control_plane.api_request(
            "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}"
        )
