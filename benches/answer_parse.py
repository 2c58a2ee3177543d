"""The lean transport's CPU to read one answer, in isolation: `Connection.send` and
`data_received` with an API server's answer to a status patch (its usual headers and a
Widget of about 800 bytes), on a transport that writes nothing. Run it with each tree's
``PYTHONPATH`` to compare the Python framing with the extension's:

    PYTHONPATH=/work/main/python python benches/answer_parse.py
    PYTHONPATH=python python benches/answer_parse.py

``--split`` gives the answer in two reads (the head, then the body), ``--chunked`` a
chunked body."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from types import SimpleNamespace
from typing import cast

import orjson

from fastctl.kube._http1 import Connection
from fastctl.kube._transport import Pool


class _Wire:
    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def answer(chunked: bool) -> bytes:
    body = orjson.dumps(
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {
                "name": "widget-00042",
                "namespace": "bench",
                "uid": "0b6f1c64-6c5e-4f7e-9a55-0d5b8c3c9f10",
                "resourceVersion": "123456",
                "generation": 3,
                "creationTimestamp": "2026-12-05T18:00:00Z",
                "labels": {"app": "widgets", "tier": "bench"},
            },
            "spec": {"size": 3, "colour": "blue", "note": "x" * 300},
            "status": {"observedGeneration": 3, "ready": True, "message": "reconciled"},
        }
    )
    head = (
        "HTTP/1.1 200 OK\r\n"
        "Audit-Id: 6e0f3c0a-2f0b-4d7e-8b61-3a4f1d2c9e77\r\n"
        "Cache-Control: no-cache, private\r\n"
        "Content-Type: application/json\r\n"
        "X-Kubernetes-Pf-Flowschema-Uid: 1c0c6bde-6b5d-4e59-9d1e-7f4c2a8b3d10\r\n"
        "X-Kubernetes-Pf-Prioritylevel-Uid: 8a1f5e2c-4b3d-4c6a-9e7f-2d1b0a9c8e76\r\n"
        "Date: Sat, 05 Dec 2026 18:00:00 GMT\r\n"
    )
    if chunked:
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + (
            f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
        )
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def rounds(count: int, repeat: int, split: bool, chunked: bool) -> list[float]:
    loop = asyncio.get_running_loop()
    pool = cast(Pool, SimpleNamespace(clock=time.perf_counter, lost=lambda conn: None))
    conn = Connection(pool)
    conn.connection_made(cast(asyncio.Transport, _Wire()))
    data = answer(chunked)
    at = data.find(b"\r\n\r\n") + 4
    reads = [data[:at], data[at:]] if split else [data]
    request = b"PATCH /x HTTP/1.1\r\n\r\n"
    results = []
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(count):
            waiter = loop.create_future()
            conn.send(request, waiter, False)
            for read in reads:
                conn.data_received(read)
            conn.waiter = None
        results.append((time.process_time() - started) / count * 1e9)
        assert waiter.result() is None
        assert (conn.status, conn.keep_alive) == (200, True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="answers per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--split", action="store_true", help="the head and body in two reads")
    parser.add_argument("--chunked", action="store_true", help="a chunked body")
    args = parser.parse_args()
    times = asyncio.run(rounds(args.count, args.rounds, args.split, args.chunked))
    kind = ("chunked" if args.chunked else "by length") + (", 2 reads" if args.split else "")
    print(f"ns per answer ({kind}): median {statistics.median(times):.0f}, "
          f"min {min(times):.0f} ({len(answer(args.chunked))} bytes)")  # fmt: skip


if __name__ == "__main__":
    main()
