"""How fast the API server serves the same ConfigMaps as JSON and as protobuf::

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/e2e/wire_encodings.py 100000 5

One control plane holding the scale benchmark's ConfigMaps (`run_scale.Run.create_up_to`:
the same objects, managedFields cleared), then, rounds alternating the order of the two
encodings (JSON then protobuf, protobuf then JSON), a plain list and a streaming list
(``watch=true&sendInitialEvents=true``, read until its ``k8s.io/initial-events-end``
bookmark) as each, read to the end by an aiohttp client that does nothing with the bytes:
what the server's encoding and sending cost, without any client's decoding. Prints each
request's seconds and bytes and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import sys
import time

import aiohttp
from run_scale import ETCD_QUOTA, NAMESPACE, Run

from fastctl import Resource, load_client
from fastctl.kube import create
from fastctl.testing import ControlPlane

JSON = "application/json"
PROTOBUF = "application/vnd.kubernetes.protobuf"
END = b"k8s.io/initial-events-end"
STREAM = "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"


async def timed_get(
    session: aiohttp.ClientSession, url: str, accept: str, stream: bool
) -> tuple[float, int]:
    """Seconds from the request to the last byte wanted, and the bytes read."""
    t0 = time.perf_counter()
    size, tail = 0, b""
    async with session.get(url, headers={"Accept": accept}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {await resp.text()}")
        async for chunk in resp.content.iter_any():
            size += len(chunk)
            if stream:
                seen = tail + chunk
                if END in seen:
                    break
                tail = seen[-64:]
    return time.perf_counter() - t0, size


async def main(count: int, rounds: int) -> None:
    async with ControlPlane(etcd_args=[f"--quota-backend-bytes={ETCD_QUOTA}"]) as cp:
        client = await load_client(str(cp.kubeconfig))
        await create(client, Resource("v1", "Namespace"), {"metadata": {"name": NAMESPACE}})
        run = Run(cp, client, argparse.Namespace())
        await run.resolve()
        await run.create_up_to(count)
        await client.close()
        context = ssl.create_default_context(cafile=str(cp.ca_file))
        context.load_cert_chain(str(cp.admin_cert_file), str(cp.admin_key_file))
        base = f"{cp.server}/api/v1/namespaces/{NAMESPACE}/configmaps"
        urls = {"list": base, "streaming list": base + STREAM + "&allowWatchBookmarks=true"}
        times: dict[tuple[str, str], list[float]] = {}
        sizes: dict[tuple[str, str], int] = {}
        connector = aiohttp.TCPConnector(ssl=context)
        async with aiohttp.ClientSession(connector=connector, read_bufsize=1 << 20) as session:
            for what, url in urls.items():  # warm-up: the server's caches, the connection
                for accept in (JSON, PROTOBUF):
                    await timed_get(session, url, accept, what != "list")
            for round_ in range(rounds):
                order = [("JSON", JSON), ("protobuf", PROTOBUF)]
                if round_ % 2:
                    order.reverse()
                for what, url in urls.items():
                    for name, accept in order:
                        seconds, size = await timed_get(session, url, accept, what != "list")
                        times.setdefault((what, name), []).append(seconds)
                        sizes[(what, name)] = size
                        print(f"round {round_ + 1} {what} {name}: {seconds:.3f} s, {size:,} B")
        for what in urls:
            json_s = statistics.median(times[(what, "JSON")])
            proto_s = statistics.median(times[(what, "protobuf")])
            for name in ("JSON", "protobuf"):
                runs = ", ".join(f"{t:.2f}" for t in times[(what, name)])
                print(
                    f"{what}, {name}: median {statistics.median(times[(what, name)]):.3f} s "
                    f"({runs}), {sizes[(what, name)]:,} bytes"
                )
            print(f"{what}: JSON / protobuf = {json_s / proto_s:.2f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
