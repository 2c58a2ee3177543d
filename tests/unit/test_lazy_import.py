"""`import fastctl` defers kubernetes-asyncio's generated API, and the package stays whole.

Each check runs in a fresh interpreter: this test process imported both long ago.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any


def _run(code: str, env: dict[str, str] | None = None) -> Any:
    """Run `code` in a fresh interpreter; it prints one JSON document, returned here."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


GENERATED = """
def generated():
    import sys
    prefixes = ("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api.")
    return sum(m.startswith(prefixes) for m in sys.modules)
"""


def test_fastctl_and_its_client_load_without_the_generated_api() -> None:
    got = _run(
        GENERATED
        + """
import json, fastctl, fastctl.runtime, fastctl.webhook, fastctl.kube._client
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.api_client import ApiClient as Real
print(json.dumps({"generated": generated(), "same": ApiClient is Real}))
"""
    )
    assert got == {"generated": 0, "same": True}


def test_any_other_name_loads_the_whole_package_then() -> None:
    got = _run(
        GENERATED
        + """
import asyncio, json, fastctl
import kubernetes_asyncio
from kubernetes_asyncio import client, watch
before = generated()

async def meta_name():
    async with client.ApiClient() as api:  # deserialising reaches the models package
        return api._ApiClient__deserialize({"name": "w"}, "V1ObjectMeta").name

print(json.dumps({
    "before": before,
    "pod": client.V1Pod.__name__,
    "core": client.CoreV1Api.__name__,
    "watch": watch.Watch.__name__,
    "version": kubernetes_asyncio.__version__,
    "meta": asyncio.run(meta_name()),
    "after": generated() > 500,
}))
"""
    )
    assert got == {
        "before": 0,
        "pod": "V1Pod",
        "core": "CoreV1Api",
        "watch": "Watch",
        "version": got["version"],
        "meta": "w",
        "after": True,
    }
    assert got["version"][0].isdigit()


def test_a_missing_name_is_still_an_attribute_error() -> None:
    got = _run(
        """
import json, fastctl, kubernetes_asyncio.client as client
try:
    client.NoSuchApi
except AttributeError as exc:
    print(json.dumps(str(exc)))
"""
    )
    assert "NoSuchApi" in got


def test_a_package_imported_before_fastctl_is_left_alone() -> None:
    got = _run(
        """
import json, sys, kubernetes_asyncio
import fastctl
from fastctl.kube._lazy_import import is_deferred
print(json.dumps([is_deferred(sys.modules[n]) for n in
                  ("kubernetes_asyncio", "kubernetes_asyncio.client")]))
"""
    )
    assert got == [False, False]


def test_the_eager_switch_defers_nothing() -> None:
    code = (
        GENERATED
        + """
import json, fastctl
print(json.dumps(generated() > 500))
"""
    )
    assert _run(code, {"FASTCTL_EAGER_IMPORT": "1"}) is True
    assert _run(code, {"FASTCTL_EAGER_IMPORT": "0"}) is False
