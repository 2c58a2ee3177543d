"""Cached children: memory per cached child (full objects against metadata only), reconcile
time with cached reads against a LIST per reconcile, and the requests the demo saves.

    python benches/children/run.py                     # about 2 minutes on 2 cores
    python benches/children/run.py --owners 200 --children 5

It starts its own control plane and creates ``--owners`` ServiceAccounts ("owners"), each
with ``--children`` ConfigMaps (three keys of ~100 bytes, a label and a controller owner
reference), 10,000 children by default. Then:

1. **memory**: a fresh subprocess per mode (``--rounds`` each, alternating) lists and
   watches the ConfigMaps into a `Store` (what ``owns(..., cache=True)`` does) and reports
   the growth of traced Python memory (tracemalloc) and of RSS, per cached child;
2. **reconcile**: a Controller over the owners reconciles each once (the initial list),
   reading its children from the cache (``cache.owned_by(obj)``) or with a LIST by label
   selector (what an uncached client does); medians of the reconcile durations and the
   wall time of the whole pass;
3. **demo**: the Widget operator (`fastctl.demo.widgets`) over ``--widgets`` Widgets,
   created then all changed, with and without its ConfigMap cache; the requests it sends,
   by verb and resource.

Prints one JSON document (also written to ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl.kube._objects import create
from fastctl.kube._resource import Resource
from fastctl.kube._store import Store, reflector
from fastctl.kube._watcher import EventKind, WatchConfig, watcher
from fastctl.runtime.controller import Controller

CONFIGMAP = Resource("v1", "ConfigMap")
OWNER = Resource("v1", "ServiceAccount")
NAMESPACE = "children-bench"
HERE = Path(__file__).resolve().parent


async def make_client(kubeconfig: str) -> ApiClient:
    cfg = Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return ApiClient(cfg)


async def populate(client: ApiClient, owners: int, children: int) -> None:
    """The owners, then their children, 32 creates at a time."""
    await create(client, Resource("v1", "Namespace"), {"metadata": {"name": NAMESPACE}})
    gate = asyncio.Semaphore(32)
    uids: dict[str, str] = {}

    async def owner(i: int) -> None:
        async with gate:
            made = await create(
                client, OWNER, {"metadata": {"name": f"owner-{i:04}"}}, namespace=NAMESPACE
            )
            uids[made["metadata"]["name"]] = made["metadata"]["uid"]

    async def child(i: int, j: int) -> None:
        name = f"owner-{i:04}"
        body = {
            "metadata": {
                "name": f"{name}-{j:02}",
                "labels": {"owner": name},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ServiceAccount",
                        "name": name,
                        "uid": uids[name],
                        "controller": True,
                    }
                ],
            },
            "data": {f"key-{k}": f"value {k} of {name}-{j:02} ".ljust(100, "x") for k in range(3)},
        }
        async with gate:
            await create(client, CONFIGMAP, body, namespace=NAMESPACE)

    await asyncio.gather(*(owner(i) for i in range(owners)))
    await asyncio.gather(*(child(i, j) for i in range(owners) for j in range(children)))


# -- 1. memory, in a subprocess per measurement ---------------------------------------------


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


async def measure_memory(kubeconfig: str, metadata_only: bool) -> dict[str, float]:
    import gc
    import tracemalloc

    client = await make_client(kubeconfig)
    store = Store()
    gc.collect()
    rss0 = rss_kib()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    events = watcher(
        client,
        CONFIGMAP,
        namespace=NAMESPACE,
        config=WatchConfig(strip_managed_fields=True, metadata_only=metadata_only),
    )
    async for event in reflector(store, events):
        if event.kind is EventKind.INIT_DONE:
            break
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    rss = rss_kib() - rss0
    await client.close()
    n = len(store)
    return {
        "objects": n,
        "traced_bytes_per_object": traced / n,
        "rss_bytes_per_object": rss * 1024 / n,
    }


def memory(kubeconfig: str, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"full": [], "metadata_only": []}
    for _ in range(rounds):
        for mode in runs:
            out = subprocess.run(
                [sys.executable, __file__, "--measure-memory", mode, "--kubeconfig", kubeconfig],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            runs[mode].append(json.loads(out))
    result: dict[str, Any] = {}
    for mode, measured in runs.items():
        result[mode] = {
            "objects": measured[0]["objects"],
            "traced_bytes_per_object": statistics.median(
                m["traced_bytes_per_object"] for m in measured
            ),
            "rss_bytes_per_object": statistics.median(m["rss_bytes_per_object"] for m in measured),
        }
    for key in ("traced_bytes_per_object", "rss_bytes_per_object"):
        result[f"{key}_ratio_full_over_metadata"] = (
            result["full"][key] / result["metadata_only"][key]
        )
    return result


# -- 2. reconcile time ----------------------------------------------------------------------


async def reconcile_pass(client: ApiClient, owners: int, cached: bool) -> dict[str, float]:
    """One reconcile of every owner (the initial list), reading its children one way."""
    seen: list[int] = []

    async def from_cache(obj: dict[str, Any], ctx: Any) -> None:
        seen.append(len(ctl.cache(CONFIGMAP).owned_by(obj)))

    async def from_server(obj: dict[str, Any], ctx: Any) -> None:
        from fastctl.kube._http import request_json

        listed = await request_json(
            client,
            "GET",
            f"/api/v1/namespaces/{NAMESPACE}/configmaps",
            query={"labelSelector": f"owner={obj['metadata']['name']}"},
        )
        seen.append(len(listed["items"]))

    ctl = Controller(
        client, OWNER, from_cache if cached else from_server, namespace=NAMESPACE, concurrency=32
    )
    ctl.owns(CONFIGMAP, cache=cached)
    durations: list[float] = []
    started: float | None = None
    finished = 0.0
    async for result in ctl.stream():
        if started is None:
            started = time.monotonic() - result.duration
        if result.error is not None:
            raise result.error
        durations.append(result.duration)
        if len(durations) == owners:
            finished = time.monotonic()
            ctl.shutdown()  # the reconciles already running still finish: not counted
    assert started is not None
    durations = durations[:owners]
    return {
        "reconciles": len(durations),
        "children_seen_median": statistics.median(seen),
        "median_ms": statistics.median(durations) * 1e3,
        "pass_s": finished - started,
    }


async def reconcile_times(client: ApiClient, owners: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "get": await reconcile_pass(client, owners, False),
        "cached": await reconcile_pass(client, owners, True),
    }
    out["median_ratio_get_over_cached"] = out["get"]["median_ms"] / out["cached"]["median_ms"]
    out["pass_ratio_get_over_cached"] = out["get"]["pass_s"] / out["cached"]["pass_s"]
    return out


# -- 3. the demo's requests -------------------------------------------------------------------


async def demo_requests(client: ApiClient, widgets_n: int, cache: bool) -> dict[str, int]:
    from fastctl.demo import widgets
    from fastctl.kube import _events, _http, _objects
    from fastctl.kube._objects import patch

    namespace = f"demo-{'cached' if cache else 'uncached'}"
    await create(client, Resource("v1", "Namespace"), {"metadata": {"name": namespace}})
    await widgets.install_crd(client)
    counts: Counter[str] = Counter()
    real = _http.request_json

    async def counting(c: ApiClient, method: str, path: str, **kw: Any) -> Any:
        counts[f"{method} {what(path)}"] += 1
        return await real(c, method, path, **kw)

    for module in (_objects, _events):
        setattr(module, "request_json", counting)  # noqa: B010 (the name is not exported)
    ctl = widgets.make_controller(client, namespace=namespace, cache=cache)
    task = asyncio.create_task(ctl.run(handle_signals=False))
    try:
        names = [f"w-{i:04}" for i in range(widgets_n)]
        for name in names:
            body = orjson.dumps(widgets.widget(name, namespace, {"greeting": "hi {name}"}))
            await real(
                client,
                "POST",
                f"/apis/{widgets.GROUP}/v1/namespaces/{namespace}/widgets",
                body=body,
            )
        await ready(ctl, widgets_n, 1)
        for name in names:
            await patch(
                client,
                widgets.WIDGET,
                name,
                {"spec": {"data": {"greeting": "again {name}"}}},
                namespace=namespace,
            )
        await ready(ctl, widgets_n, 2)
        await asyncio.sleep(2.0)  # the trailing reconciles of the status writes
    finally:
        ctl.shutdown()
        await task
        for module in (_objects, _events):
            setattr(module, "request_json", real)  # noqa: B010
    return dict(sorted(counts.items()))


def what(path: str) -> str:
    """The resource a request path names (``configmaps``, ``widgets/status``)."""
    parts = path.split("?")[0].strip("/").split("/")
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        rest = parts[parts.index("namespaces") + 2 :]
        return rest[0] + ("/" + rest[2] if len(rest) > 2 else "")
    return parts[-1]


async def ready(ctl: Controller, n: int, generation: int) -> None:
    def ok(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return (
            status.get("observedGeneration") == generation
            and obj["metadata"].get("generation") == generation
        )

    deadline = time.monotonic() + 300
    while sum(ok(o) for o in ctl.store.values()) < n:
        if time.monotonic() > deadline:
            raise TimeoutError("the Widgets did not become ready")
        await asyncio.sleep(0.1)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from fastctl.testing.binaries import ensure_binaries
    from fastctl.testing.control_plane import ControlPlane

    plane = ControlPlane(binaries=ensure_binaries(build=False)).start()
    try:
        kubeconfig = str(plane.kubeconfig)
        client = await make_client(kubeconfig)
        t0 = time.monotonic()
        await populate(client, args.owners, args.children)
        result: dict[str, Any] = {
            "owners": args.owners,
            "children": args.owners * args.children,
            "populate_s": time.monotonic() - t0,
        }
        result["memory"] = await asyncio.to_thread(memory, kubeconfig, args.rounds)
        result["reconcile"] = await reconcile_times(client, args.owners)
        result["demo"] = {
            "widgets": args.widgets,
            "uncached": await demo_requests(client, args.widgets, cache=False),
            "cached": await demo_requests(client, args.widgets, cache=True),
        }
        await client.close()
        return result
    finally:
        plane.stop()


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--children", type=int, default=10, help="ConfigMaps per owner")
    parser.add_argument("--rounds", type=int, default=3, help="memory measurements per mode")
    parser.add_argument("--widgets", type=int, default=100, help="Widgets of the demo case")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "children.json")
    parser.add_argument(
        "--measure-memory", choices=["full", "metadata_only"], help=argparse.SUPPRESS
    )
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_memory:
        out = asyncio.run(measure_memory(args.kubeconfig, args.measure_memory == "metadata_only"))
        print(json.dumps(out))
        return
    result = asyncio.run(main(args))
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    cli()
