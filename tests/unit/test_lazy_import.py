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

import pytest


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


RACE = """
import json, sys, threading
import fastctl
from fastctl.kube import _lazy_import

if FALLBACK:  # the lock used where the import system's own is not found
    _lazy_import._module_lock = None
THREADS = 8
barrier = threading.Barrier(THREADS)
failures = []

def first_use(i):
    barrier.wait()  # every thread asks at once: the package's first real load is shared
    try:
        if i % 2:
            from kubernetes_asyncio.client import CoreV1Api, V1Pod
            names = (CoreV1Api.__name__, V1Pod.__name__)
        else:
            import kubernetes_asyncio.client as client
            names = (client.CoreV1Api.__name__, client.V1Pod.__name__)
        assert names == ("CoreV1Api", "V1Pod"), names
    except BaseException as exc:
        failures.append(repr(exc))

threads = [threading.Thread(target=first_use, args=(i,)) for i in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(failures))
"""


@pytest.mark.parametrize("fallback", [False, True], ids=["import-lock", "fallback-lock"])
def test_threads_that_load_the_package_at_once_all_get_it(fallback: bool) -> None:
    # Several rounds, each a fresh interpreter, so the load is really the first each time.
    failures = [_run(f"FALLBACK = {fallback}\n" + RACE) for _ in range(4)]
    assert failures == [[]] * 4


FAILING_FIRST_LOAD = """
import importlib.abc, json, sys
import fastctl
import kubernetes_asyncio.client as client
from fastctl.kube._lazy_import import is_deferred

BROKEN = "kubernetes_asyncio.client.api.well_known_api"  # the __init__'s first import

class Broken(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == BROKEN:
            raise ImportError("the disk went away")
        return None

sys.meta_path.insert(0, Broken())
try:
    client.CoreV1Api
except ImportError as exc:
    first = str(exc)
half_built = "__version__" in vars(client)  # the __init__'s first line ran
deferred = is_deferred(client)
sys.meta_path.pop(0)
print(json.dumps({
    "first": first,
    "half_built": half_built,
    "deferred": deferred,
    "retry": client.CoreV1Api.__name__,
    "pod": client.V1Pod.__name__,
    "whole": not is_deferred(client),
}))
"""


def test_a_failed_first_load_leaves_the_package_deferred_and_the_next_one_tries_again() -> None:
    got = _run(FAILING_FIRST_LOAD)
    assert got == {
        "first": "the disk went away",
        "half_built": False,
        "deferred": True,
        "retry": "CoreV1Api",
        "pod": "V1Pod",
        "whole": True,
    }


def test_a_submodule_that_reads_the_packages_version_imports_while_it_is_deferred() -> None:
    """``kubernetes_asyncio.dynamic`` asks the package for ``__version__`` while it loads: a
    literal of the package's ``__init__`` is served without running it (running it there
    re-imported the half-loaded submodule: a circular ImportError)."""
    got = _run(
        GENERATED
        + """
import json, fastctl, kubernetes_asyncio
from fastctl.kube._lazy_import import is_deferred
from kubernetes_asyncio.dynamic import DynamicClient
from importlib.metadata import version
print(json.dumps({
    "client": DynamicClient.__module__,
    "version": kubernetes_asyncio.__version__ == version("kubernetes_asyncio"),
    "deferred": is_deferred(kubernetes_asyncio),
}))
"""
    )
    assert got == {"client": "kubernetes_asyncio.dynamic.client", "version": True, "deferred": True}
