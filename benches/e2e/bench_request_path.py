"""The client's CPU per status patch: fastctl's `patch` against a bare aiohttp request.

One command (about 20 s; ``--loop uvloop`` for uvloop's loop)::

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/e2e/bench_request_path.py

A child process serves ``PATCH`` on plain HTTP (aiohttp's web server, a fixed ~1 KiB
Widget as the answer, as the API server answers a status patch); this process sends
``--requests`` merge patches, ``--concurrency`` at a time, once through
`fastctl.kube.patch` (an `ApiClient` from a kubeconfig, so the request path an operator
has: kubernetes-asyncio's session and configuration, fastctl's headers, auth, timeouts, the
answer parsed, the write observed) and once as the raw loop does it (``session.patch`` on
a plain `aiohttp.ClientSession`, the answer read, not parsed). Rounds alternate; the
figure is this process's CPU (``time.process_time``) per request, median of the rounds,
and the ratio fastctl / raw. The server's CPU is not in it.

``--tls`` serves HTTPS instead (a certificate for 127.0.0.1 from a CA of the run, which both
clients verify, as an API server's): the difference to a plain run is what TLS costs the
client per request. ``--concurrency 1`` sends one request at a time, as an operator whose
changes arrive apart does: every answer is then a wake-up of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson

ANSWER = orjson.dumps(
    {
        "apiVersion": "demo.fastctl.dev/v1",
        "kind": "Widget",
        "metadata": {
            "name": "w-00001",
            "namespace": "bench",
            "uid": "0d0c3a8e-6f0a-4d7a-9d59-6c2f0e3c3a11",
            "resourceVersion": "123456",
            "generation": 2,
            "creationTimestamp": "2026-12-03T09:17:00Z",
            "managedFields": [
                {
                    "manager": "bench",
                    "operation": "Update",
                    "apiVersion": "demo.fastctl.dev/v1",
                    "time": "2026-12-03T09:17:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {".": {}, "f:data": {".": {}, "f:a": {}, "f:b": {}}}},
                }
            ],
        },
        "spec": {"data": {"a": "1", "b": "2", "c": "3"}},
        "status": {"observedGeneration": 2},
    }
)

SERVER = """
import ssl, sys
from aiohttp import web
answer = sys.stdin.buffer.read()
async def patch(request):
    await request.read()
    return web.Response(body=answer, content_type="application/json")
context = None
if len(sys.argv) > 2:  # HTTPS: the certificate and key files
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(sys.argv[2], sys.argv[3])
app = web.Application()
app.router.add_route("PATCH", "/{tail:.*}", patch)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None,
            ssl_context=context)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _wait_up(url: str, context: ssl.SSLContext | None) -> None:
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=context or True)
    ) as session:
        for _ in range(200):
            try:
                async with session.patch(url + "/up", data=b"{}") as resp:
                    await resp.read()
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"the bench server at {url} did not start")


async def _cpu_per_request(send: Callable[[int], Awaitable[None]], n: int, conc: int) -> float:
    """This process's CPU seconds per request over `n` requests, `conc` at a time."""
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            await send(i)

    cpu = time.process_time()
    await asyncio.gather(*(worker() for _ in range(conc)))
    return (time.process_time() - cpu) / n


def _kubeconfig(url: str, directory: Path, ca: Path | None) -> Path:
    path = directory / "kubeconfig"
    authority = f", certificate-authority: '{ca}'" if ca is not None else ""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{url}'{authority}}}}}]\n"
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return path


async def main_async(args: argparse.Namespace) -> dict[str, float]:
    from fastctl.kube import load_client, patch
    from fastctl.kube._resource import ResolvedResource

    port = _free_port()
    tmp = tempfile.TemporaryDirectory()
    ca_file, context, tls_args = None, None, []
    if args.tls:  # HTTPS with a certificate for 127.0.0.1, verified by both clients
        from fastctl._pki import CertificateAuthority

        ca = CertificateAuthority(Path(tmp.name), name="bench-ca")
        served = ca.issue("server", "bench", server_names=["127.0.0.1"])
        ca_file, tls_args = ca.cert_file, [str(served.cert), str(served.key)]
        context = ssl.create_default_context(cafile=str(ca_file))
    url = f"{'https' if args.tls else 'http'}://127.0.0.1:{port}"
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVER, str(port), *tls_args,
        stdin=asyncio.subprocess.PIPE, env=dict(os.environ),
    )  # fmt: skip
    assert server.stdin is not None
    server.stdin.write(ANSWER)
    server.stdin.close()
    try:
        await _wait_up(url, context)
        client = await load_client(_kubeconfig(url, Path(tmp.name), ca_file))
        widgets = ResolvedResource("demo.fastctl.dev", "v1", "Widget", "widgets", True)
        body = {"status": {"observedGeneration": 2, "items": 3}}
        base = f"{url}/apis/demo.fastctl.dev/v1/namespaces/bench/widgets"
        raw = aiohttp.ClientSession(
            headers={"Accept": "application/json"},
            connector=aiohttp.TCPConnector(ssl=context or True),
        )

        async def with_fastctl(i: int) -> None:
            name = f"w-{i:05d}"
            await patch(client, widgets, name, body, namespace="bench", subresource="status")

        async def with_raw(i: int) -> None:
            async with raw.patch(
                f"{base}/w-{i:05d}/status",
                data=orjson.dumps(body),
                headers={"Content-Type": "application/merge-patch+json"},
            ) as resp:
                await resp.read()

        figures: dict[str, list[float]] = {"fastctl": [], "raw": []}
        await _cpu_per_request(with_fastctl, 500, args.concurrency)  # warm both up
        await _cpu_per_request(with_raw, 500, args.concurrency)
        for _ in range(args.rounds):
            for name, send in (("fastctl", with_fastctl), ("raw", with_raw)):
                figures[name].append(await _cpu_per_request(send, args.requests, args.concurrency))
        await raw.close()
        await client.close()
    finally:
        server.terminate()
        await server.wait()
        tmp.cleanup()
    out = {f"{k}_us": statistics.median(v) * 1e6 for k, v in figures.items()}
    out["ratio"] = out["fastctl_us"] / out["raw_us"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="per round and client")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--tls", action="store_true", help="HTTPS, as an API server answers")
    args = parser.parse_args()
    if min(args.requests, args.rounds, args.concurrency) < 1:
        parser.error("--requests, --rounds and --concurrency must be at least 1")
    if args.loop == "uvloop":
        import uvloop

        out = uvloop.run(main_async(args))
    else:
        out = asyncio.run(main_async(args))
    print(
        f"client CPU per status patch: fastctl {out['fastctl_us']:.0f} µs, "
        f"raw aiohttp {out['raw_us']:.0f} µs, ratio {out['ratio']:.2f} ({args.loop}"
        f"{', HTTPS' if args.tls else ''}, {args.concurrency} at a time)"
    )


if __name__ == "__main__":
    main()
