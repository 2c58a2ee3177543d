"""`import fastctl` loads what a controller's first reconcile needs and nothing else: the web
servers (aiohttp's server side), the kubeconfig loaders (PyYAML, dateutil), the typed models
(pydantic), the certificates (cryptography), tracing, and the webhook, deploy, testing and
command-line modules load on first use; and each still works when it is used.

Each check runs in a fresh interpreter: this test process imported all of them long ago.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

DEFERRED = (
    "aiohttp.web",
    "yaml",
    "kubernetes_asyncio.config",
    "pydantic",
    "cryptography",
    "opentelemetry",
    "uvloop",
    "fastctl.webhook",
    "fastctl.deploy",
    "fastctl.testing",
    "fastctl.cli",
    "fastctl.demo",
)


def _run(code: str) -> Any:
    """Run `code` in a fresh interpreter; it prints one JSON document, returned here."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "FASTCTL_EAGER_IMPORT"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


LOADED = f"""
import sys
def loaded():
    return sorted(n for n in {DEFERRED!r} if n in sys.modules)
"""


def test_import_fastctl_loads_none_of_what_waits_for_first_use() -> None:
    got = _run(LOADED + "import json, fastctl, fastctl.runtime\nprint(json.dumps(loaded()))")
    assert got == []


def test_each_loads_when_it_is_used(tmp_path: Path) -> None:
    """A kubeconfig loads the loaders; a server's start aiohttp's server side (it
    is on a free port of loopback); the version the metadata."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    got = _run(
        LOADED
        + f"""
import asyncio, json, fastctl
from fastctl.runtime._health import HealthServer
from fastctl.runtime._debug_queue import DebugQueueServer
steps = {{}}

async def main():
    client = await fastctl.load_client({str(kubeconfig)!r})
    steps["client"] = (client.configuration.host, loaded())
    await client.close()
    server = HealthServer(0, host="127.0.0.1")
    await server.start()
    steps["health"] = loaded()
    await server.stop()

asyncio.run(main())
steps["app"] = type(DebugQueueServer(lambda: []).app()).__name__
steps["version"] = fastctl.__version__
print(json.dumps(steps))
"""
    )
    assert got["client"] == ["https://127.0.0.1:6443", ["kubernetes_asyncio.config", "yaml"]]
    assert "aiohttp.web" in got["health"]
    assert got["app"] == "Application"
    assert got["version"] == __import__("fastctl").__version__


def test_fastctl_run_loads_the_webhook_package_only_for_an_operator_with_webhooks() -> None:
    """What ``fastctl run`` imports to describe its target (`describe`) and the `needs` an
    operator module declares its RBAC with leave the webhook package (its server and
    certificates) and the manifests alone until a module has ``WEBHOOKS``."""
    got = _run(
        """
import json, sys, types
import fastctl.cli.run
from fastctl import Controller, Resource
from fastctl.deploy import needs
from fastctl.deploy._operator import describe

async def reconcile(obj, ctx):
    return None

ctl = Controller(None, Resource("v1", "ConfigMap"), reconcile, name="cms")
module = types.ModuleType("op")
steps = {}
describe(ctl, module)
steps["without"] = [m for m in ("fastctl.webhook", "fastctl.deploy._manifests") if m in sys.modules]
module.WEBHOOKS = "not webhooks"
try:
    describe(ctl, module)
except TypeError as exc:
    steps["refused"] = str(exc)
from fastctl.webhook import Webhooks
module.WEBHOOKS = Webhooks()
steps["with"] = describe(ctl, module).webhooks is module.WEBHOOKS
print(json.dumps(steps))
"""
    )
    assert got == {
        "without": [],
        "refused": "WEBHOOKS must be a fastctl.webhook.Webhooks, not <class 'str'>",
        "with": True,
    }
