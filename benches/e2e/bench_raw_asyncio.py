"""The Widget operator as a raw asyncio loop, no framework: the floor for a Python process.

The same work as the other bench operators (`bench_operators.status_for`, one merge patch of
the ``status`` subresource per new generation) on the HTTP client fastctl uses (aiohttp,
requests as orjson bytes), with only what any correct operator needs:

- **list, then watch** from the list's resourceVersion (``allowWatchBookmarks``, a server-side
  ``timeoutSeconds``); a watch that ends resumes from the last resourceVersion seen, a 410
  Gone lists again;
- **a work queue**: the newest object of each name, a set of queued names (a name queued
  twice is handled once), a set of names in flight (a change that arrives while its name is
  in flight is handled again after it), and `--concurrency` workers.

No cache beyond the newest object of each name, no retries beyond a requeue on a failed
patch, no metrics, no logging on the hot path: whatever a framework costs above this is its
own overhead. Run by the driver like the other operators (``--server/--ca/--cert/--key``,
the admin client certificate, as kopf logs in)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import ssl
import sys
import time
from typing import Any

import aiohttp
import orjson
from bench_operators import GROUP, status_for
from common import emit, run_on_chosen_loop

WATCH_TIMEOUT = 300
"""Seconds the server keeps a watch open before it ends it (the watch then resumes)."""

RETRY_DELAY = 0.1
"""Seconds before a name whose patch failed is queued again."""


class Gone(Exception):
    """410: the resourceVersion is too old; list again."""


class RawOperator:
    """List, watch, queue, patch: the whole operator."""

    def __init__(self, session: aiohttp.ClientSession, base: str, concurrency: int) -> None:
        self.session = session
        self.base = base  # .../namespaces/<ns>/widgets
        self.concurrency = concurrency
        self.latest: dict[str, dict[str, Any]] = {}
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.queued: set[str] = set()
        self.in_flight: set[str] = set()
        self.dirty: set[str] = set()
        self.rv = ""

    def changed(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.latest[name] = obj
        self.schedule(name)

    def schedule(self, name: str) -> None:
        if name in self.queued:
            return  # its worker will read the newest object
        if name in self.in_flight:
            self.dirty.add(name)
            return
        self.queued.add(name)
        self.queue.put_nowait(name)

    async def worker(self) -> None:
        while True:
            name = await self.queue.get()
            self.queued.discard(name)
            self.in_flight.add(name)
            try:
                await self.handle(name)
            except (aiohttp.ClientError, TimeoutError, OSError) as err:
                print(f"patch {name}: {err!r}", file=sys.stderr, flush=True)
                asyncio.get_running_loop().call_later(RETRY_DELAY, self.schedule, name)
            finally:
                self.in_flight.discard(name)
            if name in self.dirty:
                self.dirty.discard(name)
                self.schedule(name)

    async def handle(self, name: str) -> None:
        obj = self.latest.get(name)
        if obj is None:
            return  # deleted
        status = status_for(obj)
        if status is None:
            return
        async with self.session.patch(
            f"{self.base}/{name}/status",
            data=orjson.dumps({"status": status}),
            headers={"Content-Type": "application/merge-patch+json"},
        ) as resp:
            body = await resp.read()
            if resp.status >= 300:
                raise aiohttp.ClientError(f"{resp.status}: {body[:200]!r}")

    async def list(self) -> None:
        async with self.session.get(self.base) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"list: {resp.status}: {body[:200]!r}")
        doc = orjson.loads(body)
        self.rv = doc["metadata"]["resourceVersion"]
        names = set()
        for obj in doc["items"]:
            names.add(obj["metadata"]["name"])
            self.changed(obj)
        for gone in set(self.latest) - names:
            del self.latest[gone]

    async def watch(self) -> None:
        params = {
            "watch": "1",
            "resourceVersion": self.rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_read=WATCH_TIMEOUT + 30)
        async with self.session.get(self.base, params=params, timeout=timeout) as resp:
            if resp.status == 410:
                raise Gone()
            if resp.status != 200:
                raise RuntimeError(f"watch: {resp.status}: {(await resp.read())[:200]!r}")
            async for line in resp.content:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(f"watch error: {obj}")
                self.rv = obj["metadata"]["resourceVersion"]
                if kind in ("ADDED", "MODIFIED"):
                    self.changed(obj)
                elif kind == "DELETED":
                    self.latest.pop(obj["metadata"]["name"], None)

    async def run(self) -> None:
        workers = [asyncio.create_task(self.worker()) for _ in range(self.concurrency)]
        try:
            await self.list()
            while True:
                try:
                    await self.watch()
                except Gone:
                    await self.list()
                except (aiohttp.ClientError, TimeoutError, OSError) as err:
                    print(f"watch: {err!r}; resuming", file=sys.stderr, flush=True)
                    await asyncio.sleep(RETRY_DELAY)
        finally:
            for task in workers:
                task.cancel()


async def main_async(args: argparse.Namespace) -> None:
    tls = ssl.create_default_context(cafile=args.ca)
    tls.load_cert_chain(args.cert, args.key)
    base = f"{args.server}/apis/{GROUP}/v1/namespaces/{args.namespace}/widgets"
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=tls),
        headers={"Accept": "application/json"},
        read_bufsize=1 << 20,
    ) as session:
        task = asyncio.create_task(RawOperator(session, base, args.concurrency).run())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--server", required=True, help="the API server URL")
    parser.add_argument("--ca", required=True, help="the CA certificate file")
    parser.add_argument("--cert", required=True, help="the client certificate file")
    parser.add_argument("--key", required=True, help="the client key file")
    parser.add_argument("--kubeconfig", help="ignored: the certificate flags say it all")
    args = parser.parse_args()
    if args.concurrency < 1:
        parser.error(f"--concurrency must be at least 1, not {args.concurrency}")
    emit({"started": time.monotonic()})
    run_on_chosen_loop(main_async(args))  # FASTCTL_LOOP, as the operators beside it


if __name__ == "__main__":
    main()
