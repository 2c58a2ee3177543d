"""Admission throughput and latency: fastctl's `WebhookServer` against a bare aiohttp
handler doing the same work, over the same TLS, with the same JSON library.

    python benches/webhook/bench.py [--requests 4000] [--concurrency 1 16 64]

Each server runs in its own process (one core for the server, one for the load; the two
servers take turns, run by run, so that a change in the machine's load falls on both), on
loopback, with one self-signed certificate. The work is a validating webhook's: parse the
AdmissionReview, look at ``object.data``, answer allowed or denied (one review in ten is
denied, with a message), echo the ``uid``. The bare handler does exactly that and no more;
fastctl adds what it guarantees (its review parsing and checks, the handler called under a
deadline, the metrics, the body limit and request timeout).

The load: `concurrency` clients, each on its own keep-alive connection, each sending its
next review as soon as the last is answered, `--requests` in all per point after a warm-up.
It prints one JSON line per (server, concurrency) with admissions/s, p50 and p99 latency in
milliseconds, and the server process's CPU time per admission (user + system, from
``/proc``: on a shared machine it moves far less than throughput, and it counts the
server's work alone, where admissions/s also counts the load generator's), then a table of
fastctl's figures relative to the bare handler's. With ``--out FILE`` the lines go to FILE
too.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing
import os
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from fastctl.kube import Resource
from fastctl.webhook import (
    AdmissionRequest,
    Allow,
    Deny,
    ServingCertificate,
    Webhooks,
    WebhookServer,
)

CONFIGMAP = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)
NAME = "cm.validate.bench.fastctl.dev"
PATH = f"/validate/{NAME}"


def _verdict(data: dict[str, Any]) -> str | None:
    """The work of both servers: the denial message, or None to allow."""
    return "bad is not allowed" if "bad" in data else None


def _fastctl(cert: ServingCertificate, port: int) -> WebhookServer:
    hooks = Webhooks()

    @hooks.validating(CONFIGMAP, name=NAME)
    async def check(request: AdmissionRequest) -> Allow | Deny:
        message = _verdict((request.object or {}).get("data") or {})
        return Deny(message) if message else Allow()

    return WebhookServer(hooks, cert, port=port, host="127.0.0.1", reload_interval=0)


async def _bare(request: web.Request) -> web.Response:
    review = orjson.loads(await request.read())
    req = review["request"]
    message = _verdict((req.get("object") or {}).get("data") or {})
    response: dict[str, Any] = {"uid": req["uid"], "allowed": message is None}
    if message:
        response["status"] = {"code": 403, "message": message}
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _serve(kind: str, cert_dir: str, port: int, ready: Any) -> None:
    """The server process: serve until killed."""

    async def main() -> None:
        cert = ServingCertificate.from_files(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
        if kind == "fastctl":
            server = _fastctl(cert, port)
            await server.start()
        else:
            app = web.Application()
            app.router.add_post(PATH, _bare)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port, ssl_context=cert.ssl_context).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def _review(i: int) -> bytes:
    data = {"bad": "1"} if i % 10 == 0 else {"greeting": "hello", "size": str(i)}
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "operation": "CREATE",
        "namespace": "bench",
        "name": f"cm-{i}",
        "userInfo": {"username": "bench"},
        "object": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": "bench"},
            "data": data,
        },
    }
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _load(
    url: str, context: ssl.SSLContext, clients: int, total: int, cpu: Callable[[], float]
) -> dict[str, float]:
    bodies = [_review(i) for i in range(256)]
    latencies: list[float] = []
    sent = 0

    async def client(session: aiohttp.ClientSession, record: bool, count: int) -> None:
        nonlocal sent
        while sent < count:
            sent += 1
            body = bodies[sent % len(bodies)]
            started = time.perf_counter()
            async with session.post(url, data=body) as resp:
                answer = await resp.read()
            if resp.status != 200 or b'"response"' not in answer:
                raise RuntimeError(f"bad answer {resp.status}: {answer[:200]!r}")
            if record:
                latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(ssl=context, limit=clients)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        warm = max(200, clients * 10)
        await asyncio.gather(*(client(session, False, warm) for _ in range(clients)))
        sent = 0
        cpu_before, started = cpu(), time.perf_counter()
        await asyncio.gather(*(client(session, True, total) for _ in range(clients)))
        elapsed = time.perf_counter() - started
        server_cpu = cpu() - cpu_before
    latencies.sort()
    return {
        "admissions_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "server_cpu_us_per_admission": server_cpu / len(latencies) * 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000, help="reviews per point")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--repeat", type=int, default=3, help="runs per point (median kept)")
    parser.add_argument("--out", type=Path, help="also write the JSON lines here")
    args = parser.parse_args()
    cert_dir = tempfile.mkdtemp(prefix="fastctl-webhook-bench-")
    made = ServingCertificate.self_signed(Path(cert_dir) / "made", ["127.0.0.1"])
    (Path(cert_dir) / "tls.crt").write_bytes(made.cert_file.read_bytes())
    (Path(cert_dir) / "tls.key").write_bytes(made.key_file.read_bytes())
    assert made.ca_bundle is not None
    context = ssl.create_default_context(cadata=made.ca_bundle.decode())
    kinds = {"bare-aiohttp": 18443, "fastctl": 18444}
    servers = {}
    for kind, port in kinds.items():
        ready = multiprocessing.Event()
        servers[kind] = multiprocessing.Process(target=_serve, args=(kind, cert_dir, port, ready))
        servers[kind].start()
        if not ready.wait(30):
            raise RuntimeError(f"{kind} server did not start")
    results: dict[tuple[str, int], dict[str, float]] = {}
    lines = []
    try:
        for clients in args.concurrency:
            # Alternate the two servers run by run: a change in the machine's load then
            # falls on both rather than on whichever ran second.
            runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
            for _ in range(args.repeat):
                for kind, port in kinds.items():
                    pid = servers[kind].pid
                    assert pid is not None
                    url = f"https://127.0.0.1:{port}{PATH}"
                    cpu = functools.partial(_cpu_seconds, pid)
                    runs[kind].append(asyncio.run(_load(url, context, clients, args.requests, cpu)))
            for kind, done in runs.items():
                point = {k: statistics.median(r[k] for r in done) for k in done[0]}
                results[(kind, clients)] = point
                rounded = {k: round(v, 3) for k, v in point.items()}
                line = {"server": kind, "concurrency": clients, **rounded}
                lines.append(line)
                print(json.dumps(line), flush=True)
    finally:
        for process in servers.values():
            process.kill()
            process.join()
    if args.out:
        args.out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    print(
        "\nconcurrency  fastctl/bare admissions/s  p50 ratio  p99 ratio  server CPU ratio",
        file=sys.stderr,
    )
    for clients in args.concurrency:
        f, b = results[("fastctl", clients)], results[("bare-aiohttp", clients)]
        print(
            f"{clients:>11}  {f['admissions_per_s'] / b['admissions_per_s']:>25.2f}  "
            f"{f['p50_ms'] / b['p50_ms']:>9.2f}  {f['p99_ms'] / b['p99_ms']:>9.2f}  "
            f"{f['server_cpu_us_per_admission'] / b['server_cpu_us_per_admission']:>16.2f}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
