"""What a client may send: its rate limit and its retry policy, kept on the client.

A client-side rate limit keeps one process from flooding its API server, whatever its
reconciles do (a reconcile that writes on every run and so triggers itself, a relist of
every object at once); client-go has one per REST config (QPS and burst). fastctl keeps it
per `ApiClient`: every request that client sends takes a token before it goes
(`fastctl.kube._http.request`), so a Manager's controllers, which share the Manager's
client, share its limit. A watch takes one token when it opens, none per event. The
Manager's leader elector and shard member send their Lease requests on clients of their
own, which no limit holds (a renewal that waited behind the reconciles' traffic could cost
the lease).

No limit is set unless asked for (`set_rate_limit`, ``Manager(rate_limit=...)``,
``fastctl run --qps/--burst``; a standalone `Controller` runs under its client's);
docs/kubernetes.md says why.
The time each request waited for its token is counted in
``rest_client_rate_limiter_duration_seconds`` (client-go's name).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kubernetes_asyncio.client import ApiClient

from fastctl._clock import monotonic
from fastctl._rate import RateLimit, TokenBucket
from fastctl.kube._call_retry import DEFAULT_RETRY_POLICY, RetryPolicy
from fastctl.kube._request_metrics import REQUESTS

__all__ = [
    "limit_clients",
    "rate_limit_of",
    "retry_policy_of",
    "set_rate_limit",
    "set_retry_policy",
    "throttle",
]

_BUCKET = "_fastctl_rate_bucket"
_POLICY = "_fastctl_retry_policy"


def set_rate_limit(client: ApiClient, limit: RateLimit | None) -> None:
    """Hold every request `client` sends from now on to `limit` (``None``: no limit). A
    client given the limit it has already keeps its bucket (and the tokens it spent)."""
    if limit is not None and not isinstance(limit, RateLimit):
        raise TypeError(f"limit must be a fastctl.RateLimit or None, got {type(limit).__name__}")
    current: TokenBucket | None = getattr(client, _BUCKET, None)
    if current is not None and current.limit == limit:
        return
    setattr(client, _BUCKET, None if limit is None else TokenBucket(limit))


def limit_clients(clients: Iterable[ApiClient], limit: RateLimit | None) -> None:
    """A Manager's `rate_limit`: each of `clients` (its own and its controllers', once
    each) held to `limit`, one bucket a client (a cluster); ``None``: left as they are."""
    if limit is None:
        return
    for client in {id(c): c for c in clients}.values():
        set_rate_limit(client, limit)


def rate_limit_of(client: ApiClient) -> RateLimit | None:
    """The rate limit `client`'s requests are held to (``None``: none)."""
    bucket: TokenBucket | None = getattr(client, _BUCKET, None)
    return None if bucket is None else bucket.limit


def set_retry_policy(client: ApiClient, policy: RetryPolicy) -> None:
    """Retry `client`'s object calls with `policy` (``RetryPolicy(retries=0)``: never)."""
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"policy must be a fastctl.kube.RetryPolicy, got {type(policy).__name__}")
    setattr(client, _POLICY, policy)


def retry_policy_of(client: ApiClient) -> RetryPolicy:
    """The retry policy of `client`'s object calls (`DEFAULT_RETRY_POLICY` unless set)."""
    policy: RetryPolicy = getattr(client, _POLICY, DEFAULT_RETRY_POLICY)
    return policy


async def throttle(client: ApiClient, method: str, server: str) -> None:
    """Wait for `client`'s rate limit to let one more request go (at once without one)."""
    bucket: TokenBucket | None = getattr(client, _BUCKET, None)
    if bucket is None:
        return
    wait = bucket.reserve(monotonic())
    REQUESTS.record_throttle(method, server, wait)
    if wait > 0:
        await asyncio.sleep(wait)
