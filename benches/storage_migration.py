"""Storage-version migration on the real API server: how fast ``fastctl migrate`` rewrites
objects stored in an old version, and what a run again costs once they are rewritten.

Each round makes a fresh CRD with ``--objects`` objects stored as v1alpha1, switches its
storage to v1 (the conversion webhook served from this process, as an operator serves
it), then alternates:

- A: ``fastctl migrate`` (a child process, as a user runs it): every object decoded through
  the webhook, re-encoded and stored as v1;
- B: ``status.storedVersions`` set back to both versions and ``fastctl migrate`` again: every
  object already v1, so each write is one the server skips (what a run after a kill pays
  for what the killed run had done).

Prints one JSON line per run and the medians of each. The rate is the command's own
(objects handled over its run, from its last progress line).

    .venv/bin/python benches/storage_migration.py [--objects 2000] [--rounds 3] [--qps 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastctl.kube import Resource, create, load_client
from fastctl.kube._http import request_json
from fastctl.kube._storage_migration import storage_version_hash
from fastctl.testing import ControlPlane
from fastctl.webhook import ServingCertificate, Webhooks, WebhookServer, install

GROUP = "bench.fastctl.dev"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
LINE = re.compile(r": (\d+) objects \((\d+) rewritten, (\d+) already at v1.* in ([\d.]+) s")


def crd(plural: str) -> dict[str, Any]:
    schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            },
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": plural[:-1].title()},
            "versions": [
                {"name": v, "served": True, "storage": v == "v1alpha1", "schema": schema}
                for v in ("v1alpha1", "v1")
            ],
        },
    }


async def prepared(cp: ControlPlane, client: Any, plural: str, count: int) -> str:
    name = f"{plural}.{GROUP}"
    old = Resource(f"{GROUP}/v1alpha1", plural[:-1].title(), plural=plural, namespaced=True)
    gate = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        failure: Exception | None = None
        async with gate:
            for _ in range(100):
                try:
                    await create(client, old, {"metadata": {"name": f"i{i:05d}",
                                 "namespace": "default"}, "spec": {"count": i}})  # fmt: skip
                    return
                except Exception as exc:  # not served yet, or its storage re-created: 404/429
                    failure = exc
                    await asyncio.sleep(0.2)
            raise RuntimeError(f"could not create i{i}: {failure}")

    await asyncio.gather(*(one(i) for i in range(count)))
    _, current = cp.api_request("GET", f"{CRDS}/{name}")
    for version in current["spec"]["versions"]:
        version["storage"] = version["name"] == "v1"
    status, body = cp.api_request("PUT", f"{CRDS}/{name}", current)
    assert status == 200, body
    expected = storage_version_hash(GROUP, "v1", plural[:-1].title())
    for _ in range(600):
        found = await request_json(client, "GET", f"/apis/{GROUP}/v1")
        if any(r.get("storageVersionHash") == expected for r in found["resources"]):
            return name
        await asyncio.sleep(0.1)
    raise RuntimeError("the API server never stored at v1")


async def migrate(cp: ControlPlane, name: str, qps: float) -> dict[str, Any]:
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fastctl.cli", "migrate", name, "--kubeconfig", str(cp.kubeconfig),
        "--qps", str(qps), stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await process.communicate()
    wall = time.perf_counter() - started
    lines = err.decode().splitlines()
    assert process.returncode == 0, lines
    found = [m for line in lines if (m := LINE.search(line))][-1]
    objects, rewritten, current, seconds = found.groups()
    return {
        "objects": int(objects),
        "rewritten": int(rewritten),
        "current": int(current),
        "seconds": float(seconds),
        "per_second": round(int(objects) / float(seconds), 1),
        "command_wall_seconds": round(wall, 2),
    }


async def main(args: argparse.Namespace) -> None:
    hooks = Webhooks()
    for round_ in range(args.rounds):  # before the server starts: its routes are fixed then
        converter = hooks.conversion(f"item{round_}s.{GROUP}")
        converter.add("v1alpha1", "v1", lambda o: {**o, "spec": {"n": o["spec"]["count"]}})
        converter.add("v1", "v1alpha1", lambda o: {**o, "spec": {"count": o["spec"]["n"]}})
    async with ControlPlane() as cp:
        client = await load_client(str(cp.kubeconfig))
        cert = ServingCertificate.self_signed(Path(tempfile.mkdtemp()), ["127.0.0.1"])
        server = WebhookServer(hooks, cert, port=0, host="127.0.0.1")
        await server.start()
        runs: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
        for round_ in range(args.rounds):  # every CRD first: install patches each of them
            status, body = cp.api_request("POST", CRDS, crd(f"item{round_}s"))
            assert status == 201, body
        await install(client, hooks, "bench", url=server.url, ca_bundle=cert.ca_bundle)
        try:
            for round_ in range(args.rounds):
                plural = f"item{round_}s"
                name = await prepared(cp, client, plural, args.objects)
                a = await migrate(cp, name, args.qps)
                runs["A"].append(a)
                print(json.dumps({"run": "A rewrite", "round": round_, **a}), flush=True)
                status, body = cp.api_request(
                    "PATCH", f"{CRDS}/{name}/status",
                    {"status": {"storedVersions": ["v1alpha1", "v1"]}},
                    content_type="application/merge-patch+json",
                )  # fmt: skip
                assert status == 200, body
                b = await migrate(cp, name, args.qps)
                runs["B"].append(b)
                print(json.dumps({"run": "B already v1", "round": round_, **b}), flush=True)
        finally:
            await server.stop()
            await client.close()
    summary = {
        key: {
            "median_seconds": statistics.median(r["seconds"] for r in values),
            "median_per_second": statistics.median(r["per_second"] for r in values),
        }
        for key, values in runs.items()
    }
    summary["ratio_A_over_B_seconds"] = round(
        summary["A"]["median_seconds"] / summary["B"]["median_seconds"], 2
    )
    print(json.dumps({"objects": args.objects, "qps": args.qps, **summary}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--qps", type=float, default=2000.0)
    asyncio.run(main(parser.parse_args()))
