"""Writes through a throttled API server: the scenario `test_throttled_writes.py` runs small
and `benches/throttled_writes.py` runs at full size.

An operator (a Manager with a client-side rate limit, one controller) copies each source
ConfigMap's ``data.value`` into an output ConfigMap with server-side apply. It watches
both (one label), so that its read-your-writes guard sees each output it wrote land in its
cache: a write outside the watch would hold the source's next reconcile for the guard's
whole bound. It talks to
the API server through `FaultProxy`, which for `outage` seconds answers every other write
with 429 and ``Retry-After: 1`` (API priority and fairness turning a flow away), while the
test changes every source object `rounds` times, directly (not through the proxy). Then
the proxy forwards everything again, and the scenario waits until every output shows its
source's final value.

What it measures, for the caller to assert or print: whether every object converged, the
value each object's last reconcile saw (it must be the final one: no object is left
reconciled on an older state), and the operator's requests as the proxy counted them
during the outage, the most in any window of 1 s and of 5 s, against the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl import Controller, Manager, RateLimit, Resource
from fastctl.kube import apply, create, patch
from fastctl.kube._http import request_json
from fastctl.kube._request_metrics import REQUESTS

from .faultproxy import FaultProxy

CONFIGMAPS = Resource("v1", "ConfigMap")
LABEL = "throttle-test"


@dataclass
class Outcome:
    objects: int
    rounds: int
    outage: float
    limit: RateLimit
    converged: bool = False
    converged_after: float = 0.0
    """Seconds from the end of the outage until every output showed its final value."""
    last_seen_stale: list[str] = field(default_factory=list)
    """Objects whose last reconcile did not see their final value."""
    outage_requests: int = 0
    most_in_1s: int = 0
    most_in_5s: int = 0
    throttled: int = 0
    """Writes the proxy refused with 429."""
    retries: dict[str, int] = field(default_factory=dict)
    """The operator's retries by code and verb (``rest_client_request_retries_total``)."""
    requeue_holds: int = 0
    reconciles: int = 0
    errors: int = 0

    def bound(self, window: float) -> float:
        """What the limit lets through in any `window` seconds."""
        return self.limit.burst + self.limit.qps * window


def most_in_any_window(times: list[float], window: float) -> int:
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] < t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


async def _bounded(calls: list[Any], at_once: int = 32) -> None:
    gate = asyncio.Semaphore(at_once)

    async def one(call: Any) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(c) for c in calls))


async def _wait(check: Any, limit: float, what: str) -> float:
    began = time.monotonic()
    while not await check():
        if time.monotonic() - began > limit:
            raise AssertionError(f"timed out after {limit:.0f} s waiting for {what}")
        await asyncio.sleep(0.25)
    return time.monotonic() - began


async def throttled_writes(
    admin: ApiClient,
    proxy: FaultProxy,
    namespace: str,
    *,
    objects: int,
    rounds: int,
    outage: float,
    limit: RateLimit,
    converge_within: float = 300.0,
) -> Outcome:
    """Run the scenario of the module docstring; see `Outcome` for what comes back."""
    outcome = Outcome(objects, rounds, outage, limit)
    names = [f"src-{i}" for i in range(objects)]
    await _bounded(
        [
            create(
                admin,
                CONFIGMAPS,
                {
                    "metadata": {"name": n, "namespace": namespace, "labels": {LABEL: "src"}},
                    "data": {"value": "0"},
                },
            )
            for n in names
        ]
    )
    seen: dict[str, str] = {}
    proxied = ApiClient(Configuration(host=proxy.url))

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        name = obj["metadata"]["name"]
        if not name.startswith("src-"):
            return  # an output: cached (its label), so that the guard sees our writes land
        value = (obj.get("data") or {}).get("value", "")
        seen[name] = value
        out = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "out-" + name.removeprefix("src-"),
                "namespace": namespace,
                "labels": {LABEL: "out"},
            },
            "data": {"value": value},
        }
        await apply(proxied, CONFIGMAPS, out, field_manager="throttle-test")

    ctl = Controller(proxied, CONFIGMAPS, reconcile, namespace=namespace, label_selector=LABEL)
    manager = Manager(proxied, metrics_port=None, probe_port=None, rate_limit=limit).add(ctl)
    host = proxy.url.removeprefix("http://")
    retries_before = {k: v for k, v in REQUESTS.retries().items() if k[2] == host}
    outputs = f"/api/v1/namespaces/{namespace}/configmaps"

    async def all_show(value_of: dict[str, str]) -> bool:
        listed = await request_json(admin, "GET", outputs)
        got = {
            cm["metadata"]["name"]: (cm.get("data") or {}).get("value")
            for cm in listed["items"]
            if cm["metadata"]["name"].startswith("out-")
        }
        return all(got.get("out-" + n.removeprefix("src-")) == v for n, v in value_of.items())

    task = asyncio.create_task(manager.run())
    try:
        await _wait(
            lambda: all_show(dict.fromkeys(names, "0")), converge_within, "the first copies"
        )
        loop = asyncio.get_running_loop()
        began = loop.time()
        first = len(proxy.arrivals)
        proxy.throttle_writes(every=2, retry_after=1)
        for r in range(1, rounds + 1):
            await _bounded(
                [
                    patch(admin, CONFIGMAPS, n, {"data": {"value": str(r)}}, namespace=namespace)
                    for n in names
                ]
            )
            await asyncio.sleep(max(0.0, began + r * outage / rounds - loop.time()))
        proxy.unthrottle()
        ended = loop.time()
        during = [t for t in proxy.arrivals[first:] if began <= t <= ended]
        outcome.outage_requests = len(during)
        outcome.most_in_1s = most_in_any_window(during, 1.0)
        outcome.most_in_5s = most_in_any_window(during, 5.0)
        outcome.throttled = proxy.throttled
        final = dict.fromkeys(names, str(rounds))
        outcome.converged_after = await _wait(
            lambda: all_show(final), converge_within, "every copy to show its final value"
        )
        outcome.converged = True
        await asyncio.sleep(1.0)  # nothing older may come after
        outcome.last_seen_stale = sorted(n for n in names if seen.get(n) != str(rounds))
    finally:
        manager.shutdown()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 30)
        await proxied.close()
    outcome.retries = {
        f"{code} {verb}": n - retries_before.get((code, verb, h), 0)
        for (code, verb, h), n in REQUESTS.retries().items()
        if h == host and n > retries_before.get((code, verb, h), 0)
    }
    outcome.requeue_holds = ctl.counters.requeue_holds
    outcome.reconciles = ctl.counters.success + ctl.counters.error
    outcome.errors = ctl.counters.error
    return outcome
