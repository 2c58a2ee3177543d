"""Writes through an API server that throttles half of them, on the real kube-apiserver
(`throttled_writes`): 150 objects changed twice during an 8 s outage in which a proxy
answers every other write with 429 and ``Retry-After: 1``. Every object converges after the
outage, the last reconcile of each saw its final value, and the operator's requests during
the outage, counted at the proxy, stay within its client-side rate limit (20 a second,
bursts of 30). The full-size run (1,000 objects, 30 s) is ``benches/throttled_writes.py``
(docs/benchmarks.md): too slow for the suite.

The proxy counts arrivals on its own clock, a moment after the client let each request go
(connection set-up, the event loop's turns on a loaded machine), so a window of the
proxy's may catch a few more requests than the client's bucket let go in a window of the
same length: the bound checked is the limit's over the window plus a quarter of a second
(5 requests at 20 a second). Without the limit the operator sends well over that (a round
of 150 changes makes 150 writes within a second, and their retries)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl import RateLimit

from .faultproxy import FaultProxy
from .throttled_writes import throttled_writes

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

LIMIT = RateLimit(qps=20.0, burst=30)
JITTER = 0.25
"""Seconds by which the proxy's arrivals may lag the client's sends (see the docstring)."""


async def test_throttled_writes_converge_within_the_rate_limit(
    client: ApiClient, proxy: FaultProxy, namespace: str
) -> None:
    outcome = await throttled_writes(
        client, proxy, namespace, objects=150, rounds=2, outage=8.0, limit=LIMIT
    )
    print(f"\n{outcome}")
    assert outcome.converged
    assert outcome.last_seen_stale == []
    assert outcome.throttled > 0  # the outage happened: writes were refused
    assert outcome.retries.get("429 PATCH", 0) > 0  # and retried
    assert outcome.most_in_1s <= outcome.bound(1.0 + JITTER)
    assert outcome.most_in_5s <= outcome.bound(5.0 + JITTER)
