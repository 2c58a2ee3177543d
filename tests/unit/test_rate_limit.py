"""The token bucket (`fastctl._rate`) and a client's rate limit (`fastctl.kube._throttle`):
no window of ``t`` seconds holds more than ``burst + qps * t`` starts, a quiet bucket lets a
burst through at once, and a client's requests wait for their token on the runtime's clock
(virtual here), each wait counted in ``rest_client_rate_limiter_duration_seconds``."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl import RateLimit
from fastctl._rate import TokenBucket
from fastctl.kube import set_rate_limit
from fastctl.kube._http import request_json
from fastctl.kube._request_metrics import REQUESTS
from fastctl.kube._throttle import rate_limit_of
from fastctl.testing import virtual_time


def most_in_any_window(times: list[float], window: float) -> int:
    """The most of `times` inside any closed interval of `window` seconds."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] < t - window - 1e-9:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


@pytest.mark.parametrize(
    ("qps", "burst"), [(0, 1), (-1, 1), (float("inf"), 1), (float("nan"), 1), (1, 0), (1, 1.5)]
)
def test_a_rate_limit_refuses_what_no_bucket_can_keep(qps: float, burst: Any) -> None:
    with pytest.raises(ValueError, match=r"qps|burst"):
        RateLimit(qps, burst)


def test_a_full_bucket_lets_its_burst_go_at_once_and_then_one_per_interval() -> None:
    bucket = TokenBucket(RateLimit(qps=4.0, burst=3))
    waits = [bucket.reserve(10.0) for _ in range(6)]
    assert waits == [0.0, 0.0, 0.0, 0.25, 0.5, 0.75]


def test_a_quiet_bucket_fills_up_to_its_burst_and_no_further() -> None:
    bucket = TokenBucket(RateLimit(qps=2.0, burst=5))
    for _ in range(5):
        bucket.reserve(0.0)
    assert bucket.tokens(1.0) == pytest.approx(2.0)  # 1 s at 2 a second
    assert bucket.tokens(100.0) == 5.0  # never more than the burst
    waits = [bucket.reserve(100.0) for _ in range(6)]
    assert waits == [0.0] * 5 + [0.5]


def test_reserved_starts_never_exceed_burst_plus_rate_in_any_window() -> None:
    limit = RateLimit(qps=10.0, burst=7)
    bucket = TokenBucket(limit)
    starts = []
    now = 0.0
    # Callers arrive in clumps of 40 every 1.3 s; each starts when its reservation says.
    for clump in range(20):
        now = clump * 1.3
        for _ in range(40):
            starts.append(now + bucket.reserve(now))
    for window in (0.0, 0.5, 1.0, 3.0, 10.0):
        assert most_in_any_window(starts, window) <= limit.burst + limit.qps * window + 1e-6
    # And no slower than the rate: 800 starts take (800 - 7) / 10 s after the first.
    assert max(starts) == pytest.approx((800 - limit.burst) / limit.qps)


class _Response:
    status = 200
    headers: ClassVar[dict[str, str]] = {}

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return b"{}"


class _Session:
    """Records when each request was sent (on the loop's clock) instead of sending it."""

    def __init__(self) -> None:
        self.sent: list[float] = []

    async def request(self, method: str, url: str, **kwargs: Any) -> _Response:
        self.sent.append(asyncio.get_running_loop().time())
        return _Response()


def _sent(client: ApiClient) -> list[float]:
    session: _Session = client.rest_client.pool_manager  # type: ignore[assignment]
    return session.sent


@virtual_time
async def test_a_clients_requests_wait_for_their_tokens_and_the_waits_are_counted() -> None:
    api = ApiClient(Configuration(host="https://throttled.example:6443"))
    real = api.rest_client.pool_manager
    api.rest_client.pool_manager = _Session()  # type: ignore[assignment]
    try:
        limit = RateLimit(qps=20.0, burst=30)
        set_rate_limit(api, limit)
        assert rate_limit_of(api) == limit
        before = REQUESTS.throttled().get(("GET", "throttled.example:6443"))
        count_before = sum(before.counts) if before else 0
        await asyncio.gather(*(request_json(api, "GET", f"/api/{i}") for i in range(130)))
        sent = _sent(api)
        assert len(sent) == 130
        for window in (0.0, 1.0, 2.5):
            assert most_in_any_window(sent, window) <= 30 + 20 * window + 1e-6
        assert max(sent) == pytest.approx((130 - 30) / 20.0)  # as fast as the limit allows
        after = REQUESTS.throttled()[("GET", "throttled.example:6443")]
        assert sum(after.counts) - count_before == 130
        waited = after.total - (before.total if before else 0.0)
        assert waited == pytest.approx(sum(sent))  # every request started at 0
    finally:
        await real.close()


@virtual_time
async def test_an_unlimited_client_does_not_wait() -> None:
    api = ApiClient(Configuration(host="https://throttled.example:6443"))
    real = api.rest_client.pool_manager
    api.rest_client.pool_manager = _Session()  # type: ignore[assignment]
    try:
        await asyncio.gather(*(request_json(api, "GET", "/api") for _ in range(50)))
        assert set(_sent(api)) == {0.0}
        set_rate_limit(api, RateLimit(qps=1.0, burst=1))
        set_rate_limit(api, None)
        assert rate_limit_of(api) is None
        await asyncio.gather(*(request_json(api, "GET", "/api") for _ in range(50)))
        assert set(_sent(api)) == {0.0}
    finally:
        await real.close()


@virtual_time
async def test_setting_the_same_limit_again_keeps_the_spent_tokens() -> None:
    api = ApiClient(Configuration(host="https://throttled.example:6443"))
    real = api.rest_client.pool_manager
    api.rest_client.pool_manager = _Session()  # type: ignore[assignment]
    try:
        set_rate_limit(api, RateLimit(qps=1.0, burst=2))
        await asyncio.gather(*(request_json(api, "GET", "/api") for _ in range(2)))
        set_rate_limit(api, RateLimit(qps=1.0, burst=2))  # a second Manager.run, say
        await request_json(api, "GET", "/api")
        assert _sent(api) == [0.0, 0.0, 1.0]
    finally:
        await real.close()


async def test_a_managers_limit_gives_each_client_one_bucket_shared_by_its_controllers() -> None:
    from fastctl.kube._throttle import limit_clients

    own, other = (
        ApiClient(Configuration(host="https://a")),
        ApiClient(Configuration(host="https://b")),
    )
    limit = RateLimit(qps=20.0, burst=30)
    limit_clients([own, own, other, own], limit)  # the Manager's, then its controllers'
    assert rate_limit_of(own) == rate_limit_of(other) == limit
    bucket = own._fastctl_rate_bucket  # type: ignore[attr-defined]
    assert bucket is not other._fastctl_rate_bucket  # type: ignore[attr-defined]
    limit_clients([own], None)  # no rate_limit: the clients keep theirs
    assert own._fastctl_rate_bucket is bucket  # type: ignore[attr-defined]
    await own.close()
    await other.close()
