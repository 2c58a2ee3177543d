"""The watcher's CPU per watch event, on the lean transport and on aiohttp, one process each.

One command::

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/e2e/bench_watch_stream.py \\
        --events 5000 --rounds 5

A server process sends a watch stream as kube-apiserver does (chunked, one chunk per
event: the initial-events-end bookmark, then `--events` MODIFIED events of small Widgets,
one every `--gap` seconds, so each arrives in a read of its own as in an update burst).
A client process runs fastctl's `watcher` on it and counts its own CPU seconds (user and
system) from the bookmark to the last event. Rounds alternate ``FASTCTL_HTTP=lean`` and
``aiohttp``; the medians and the median of the per-round ratios are printed. Only the
watch path is measured: no store, no reconcile, no requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time

import orjson


def serve(events: int, gap: float) -> None:
    """Answer one watch request on a port printed to stdout, then exit."""
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = b""
    while b"\r\n\r\n" not in head:
        head += conn.recv(65536)

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    def line(etype: str, rv: int, annotations: dict[str, str] | None = None) -> bytes:
        meta = {"name": f"w{rv % 1000}", "namespace": "bench", "resourceVersion": str(rv),
                "uid": f"u-{rv % 1000}", "generation": 2, "labels": {"app": "bench"},
                "annotations": annotations or {}}  # fmt: skip
        obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta,
               "spec": {"size": rv % 7, "color": "blue"}, "status": {"observed": 1}}  # fmt: skip
        return orjson.dumps({"type": etype, "object": obj}) + b"\n"

    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunk(line("BOOKMARK", 1, {"k8s.io/initial-events-end": "true"}))
    )
    for i in range(events):
        conn.sendall(chunk(line("MODIFIED", 2 + i)))
        time.sleep(gap)
    try:
        conn.sendall(b"0\r\n\r\n")
        conn.recv(1)  # until the client closes
    except OSError:
        pass  # it closed first
    conn.close()


async def consume(port: int, events: int) -> float:
    from kubernetes_asyncio.client import ApiClient, Configuration

    from fastctl.kube._resource import ResolvedResource
    from fastctl.kube._watcher import EventKind, WatchConfig, watcher

    client = ApiClient(Configuration(host=f"http://127.0.0.1:{port}"))
    widgets = ResolvedResource("example.com", "v1", "Widget", "widgets", True)
    seen, started = 0, 0.0
    stream = watcher(client, widgets, namespace="bench", config=WatchConfig(protobuf=False))
    async for event in stream:
        if event.kind is EventKind.INIT_DONE:
            started = time.process_time()
        elif event.kind is EventKind.APPLY:
            seen += 1
            if seen == events:
                break
    spent = time.process_time() - started
    await stream.aclose()  # type: ignore[attr-defined]  # an async generator
    await client.close()
    return spent


def run_once(transport: str, events: int, gap: float) -> float:
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--events", str(events), "--gap", str(gap)],
        stdout=subprocess.PIPE,
    )
    assert server.stdout is not None
    port = int(server.stdout.readline())
    env = {**os.environ, "FASTCTL_HTTP": transport}
    out = subprocess.run(
        [sys.executable, __file__, "--consume", str(port), "--events", str(events)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    server.wait()
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--gap", type=float, default=0.0004, help="seconds between events")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--consume", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.events, args.gap)
        return
    if args.consume:
        print(asyncio.run(consume(args.consume, args.events)))
        return
    per: dict[str, list[float]] = {"lean": [], "aiohttp": []}
    for _ in range(args.rounds):
        for transport in per:
            per[transport].append(run_once(transport, args.events, args.gap) / args.events * 1e6)
    ratios = [a / b for a, b in zip(per["lean"], per["aiohttp"], strict=True)]
    for transport, values in per.items():
        print(f"{transport}: {statistics.median(values):.1f} µs CPU per event "
              f"({' '.join(f'{v:.1f}' for v in values)})")  # fmt: skip
    print(f"lean / aiohttp: {statistics.median(ratios):.2f} "
          f"({' '.join(f'{r:.2f}' for r in ratios)})")  # fmt: skip


if __name__ == "__main__":
    main()
