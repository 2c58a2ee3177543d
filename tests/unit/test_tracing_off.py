"""Tracing off costs nothing: a process that imports fastctl and runs a controller (its
watch events, its reconcile, an API request, a log record) never imports OpenTelemetry,
whether the ``otel`` extra is installed or not; without it, asking for tracing says which
extra to install.

Each case runs in a fresh interpreter, since this one may have imported OpenTelemetry
for the other tracing tests. "Not installed" is a finder that refuses every
``opentelemetry`` module and records that something asked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fastctl

SCRIPT = r"""
import asyncio, importlib.abc, logging, sys

asked = []
if sys.argv[1] == "missing":
    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                asked.append(name)
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Refuse())

import fastctl, fastctl.cli.run, fastctl.runtime, fastctl.tracing, fastctl.webhook
from kubernetes_asyncio.client import ApiClient, Configuration
from fastctl import Controller, Manager, Resource
from fastctl.kube import _http
from fastctl.kube._watcher import EventKind, ListFrame, ObjectEvent
from fastctl.log import ObjectContextFilter
from fastctl.runtime.controller import _environment

WIDGET = Resource("example.com/v1", "Widget", plural="widgets", namespaced=True)
OBJ = {"apiVersion": "example.com/v1", "kind": "Widget",
       "metadata": {"name": "a", "namespace": "default", "uid": "u", "resourceVersion": "1"}}


async def events(*_, **__):
    yield ListFrame(EventKind.INIT)
    yield ObjectEvent(EventKind.INIT_APPLY, OBJ)
    yield ListFrame(EventKind.INIT_DONE)
    await asyncio.Event().wait()


class Response:
    status = 200


class Session:
    async def request(self, method, url, **kwargs):
        return Response()


_environment.watcher = events
records = []
handler = logging.Handler()
handler.addFilter(ObjectContextFilter())
handler.emit = records.append
logging.getLogger("probe").addHandler(handler)
logging.getLogger("probe").setLevel(logging.INFO)


async def main():
    client = ApiClient(Configuration(host="https://api.example"))
    client.rest_client.pool_manager = Session()
    done = asyncio.Event()

    async def reconcile(obj, ctx):
        await _http.request(client, "GET", "/api/v1/namespaces/default/configmaps/x")
        logging.getLogger("probe").info("reconciled")
        done.set()

    ctl = Controller(client, WIDGET, reconcile)
    task = asyncio.create_task(ctl.run(handle_signals=False))
    await done.wait()
    ctl.shutdown()
    await task
    assert records[0].trace_id == "-", records[0].__dict__
    print("asked", asked)
    if sys.argv[1] == "missing":  # asks for the SDK (only to say it is missing)
        try:
            Manager(client, tracing=True)
        except ImportError as exc:
            assert "fastctl[otel]" in str(exc), exc
        else:
            raise AssertionError("Manager(tracing=True) without the extra")


asyncio.run(main())
assert not fastctl.tracing.is_enabled()
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print("loaded", loaded)
"""


@pytest.mark.parametrize("extra", ["installed", "missing"])
def test_a_controller_without_tracing_never_imports_opentelemetry(extra: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(fastctl.__file__).parents[1])}
    env.pop("OTEL_SDK_DISABLED", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, extra],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["asked []", "loaded []"], done.stdout
