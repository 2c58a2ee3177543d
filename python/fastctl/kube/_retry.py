"""Retrying what a controller needs before its first event: backoff, and patient discovery.

A controller resolves its resources through discovery before it can list or watch them, so
an operator started before its API server answers (a node restart, a control plane being
upgraded, a Service IP not routed yet) used to fail right there, with a traceback, although
the watcher behind it survives exactly those failures. `resolve_patiently` gives discovery
the watcher's patience:

- **transient** failures (connection refused or reset, timeouts, 5xx, 429) are retried with
  `Backoff` for as long as they last, each logged once, with its reason and the wait;
- **404** (the group/version is not served, or lacks the kind) is retried a bounded number of
  times (`NOT_FOUND_RETRIES`, about half a minute with the default backoff), since a CRD is
  often installed right after its operator; then `ResourceNotFound` says the resource is not
  served by this API server;
- **401/403** and other 4xx are permanent: raised at once as a `DiscoveryError` that names
  the resource, the verb and the path, since waiting will not fix credentials or RBAC;
- a server URL that no request can use (a port past 65535, no host: aiohttp's
  ``InvalidURL``) is permanent too: a `KubeconfigError` naming the URL, at once, instead of
  a wait for an API server that cannot exist. `load_client` refuses such a URL already; a
  client configured some other way is caught here.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from kubernetes_asyncio.client import ApiClient

from fastctl._clock import monotonic
from fastctl.errors import ApiError, DiscoveryError, ResourceNotFound
from fastctl.kube._kubeconfig_check import invalid_url_error
from fastctl.kube._resource import Discovery, ResolvedResource, Resource

__all__ = ["NOT_FOUND_RETRIES", "Backoff", "DiscoveryError", "is_transient", "resolve_patiently"]

log = logging.getLogger("fastctl.discovery")

NOT_FOUND_RETRIES = 6
"""How many times a resource that discovery does not list is looked up again before
`ResourceNotFound` (with the default `Backoff`: after about 30 s)."""


@dataclass
class Backoff:
    """Exponential backoff with multiplicative jitter: the n-th consecutive failure waits
    ``min(maximum, initial * factor**(n-1)) * U(1 - jitter, 1 + jitter)``.

    Jitter keeps a fleet of controllers from reconnecting in lock-step after an API server
    restart; the cap keeps a long outage from turning into a long wait after it ends.
    """

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0
    jitter: float = 0.2
    failures: int = 0

    def next_delay(self) -> float:
        """Count one failure and return how long to wait before the next attempt."""
        self.failures += 1
        base = min(self.maximum, self.initial * self.factor ** min(self.failures - 1, 64))
        return base * random.uniform(1.0 - self.jitter, 1.0 + self.jitter)

    def reset(self) -> None:
        """A success: the next failure waits `initial` again."""
        self.failures = 0


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` may go away by itself: the network, a timeout, a 5xx or a 429 (never
    a URL no request can use)."""
    if isinstance(exc, ApiError):
        return exc.status == 429 or exc.status >= 500 or exc.status == 0
    if isinstance(exc, aiohttp.InvalidURL):
        return False
    return isinstance(exc, aiohttp.ClientError | OSError | TimeoutError)


async def resolve_patiently(
    client: ApiClient,
    resource: Resource,
    *,
    discovery: Discovery | None = None,
    backoff: Backoff | None = None,
    not_found_retries: int | None = None,
    on_error: Callable[[BaseException], None] | None = None,
) -> ResolvedResource:
    """`Resource.resolve`, retried as the module docstring says. `on_error` hears each
    failure that is retried (a controller counts them in its watch-error metric)."""
    disc = discovery or Discovery.for_client(client)
    backoff = backoff or Backoff()
    budget = NOT_FOUND_RETRIES if not_found_retries is None else not_found_retries
    began = monotonic()
    missing = 0
    while True:
        try:
            resolved = await disc.resolve(resource)
        except ResourceNotFound as exc:
            if missing >= budget:
                if missing == 0:
                    raise
                raise ResourceNotFound(
                    resource,
                    f"not served by this API server (looked up {missing + 1} times over "
                    f"{monotonic() - began:.0f} s): {exc.detail}",
                ) from None
            missing += 1
            failure: BaseException = exc
            reason = exc.detail
        except ApiError as exc:
            if not is_transient(exc):
                raise DiscoveryError(resource, exc) from None
            failure, reason = exc, str(exc)
        except aiohttp.InvalidURL as exc:
            raise invalid_url_error(client, exc) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            failure, reason = exc, f"{type(exc).__name__}: {exc or 'timed out'}"
        else:
            if backoff.failures:
                log.info("resolved %s after %d failed attempt(s)", resource, backoff.failures)
            backoff.reset()
            return resolved
        delay = max(backoff.next_delay(), getattr(failure, "retry_after", None) or 0.0)
        log.warning(
            "cannot resolve %s yet (attempt %d): %s; retrying in %.1f s",
            resource,
            backoff.failures,
            reason,
            delay,
        )
        if on_error is not None:
            try:
                on_error(failure)
            except Exception:
                log.exception("discovery of %s: on_error callback failed", resource)
        await asyncio.sleep(delay)
