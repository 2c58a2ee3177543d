"""Which failed object calls are sent again, and after how long: `RetryPolicy`, `Safety`.

An overloaded API server sheds load with 429 (API priority and fairness, the in-flight
limits, a server shutting down), and an aggregated API or a load balancer in front of the
server answers 503 while it has no backend; a connection can be reset under any request.
The object calls (`get`, `list`, `create`, `apply`, `apply_status`, `patch`, `delete`) send
such a request again, with capped, jittered exponential backoff, where that is safe, and
honour the server's ``Retry-After`` (the header, and a Status body's
``details.retryAfterSeconds``).

Whether it is safe depends on what the failure says about the first attempt:

- **429**: the request was refused before it was handled (priority and fairness rejects
  it in the filter chain, before any handler; the in-flight limit and a shutting-down
  server do the same). Nothing was applied: retried for every call.
- **503 with a Retry-After**: the server says it did not serve the request and when to
  come back (client-go retries exactly these, for every verb). Retried for every call.
- **503 without one, and a connection reset after the request went out** (the server or a
  proxy dropped it, or the answer was cut short): the first attempt may have been applied.
  Retried only for a call that gives the same result when applied twice (`Safety.IDEMPOTENT`).
- **No connection at all** (refused, no route, DNS): nothing was sent. Retried for every
  call. A TLS failure (an unverified certificate) is not: it will fail again.
- Everything else (other 4xx and 5xx, timeouts) is the caller's: a 500 may come from an
  admission webhook that ran, a 504 says the write may still be in progress, and a
  timeout has used the call's own budget.

Which calls are `Safety.IDEMPOTENT`: `get` and `list` (reads); `apply` and `apply_status`
(the same intent applied twice leaves the same object); `delete` (a second DELETE of a
deleted object is a 404, which ``missing_ok`` turns into ``None``; with
``missing_ok=False`` the caller sees that 404); a merge `patch` (it sets values: a second
application changes nothing); a JSON `patch` with an operation on
``/metadata/resourceVersion`` (a ``test`` or ``replace``), and a strategic merge `patch`
whose body carries ``metadata.resourceVersion``: a second application is refused (409 or
422), never applied. A ``test`` of another field does not count: the first application
may have left that field as it was.
Not idempotent, so sent once after a reset: `create` (with ``generateName`` a second POST
makes a second object; with a name it would answer 409 AlreadyExists for the object the
first one made), and any other JSON or strategic merge patch (a JSON patch that appends to
a list appends twice).

A precondition fastctl adds itself (`fastctl.kube._writes`, while own writes are filtered)
does not make a patch idempotent: a refused condition is dropped and the patch sent again
as written, which after a reset would apply it twice.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import Enum

import aiohttp

from fastctl.errors import ApiError

__all__ = ["DEFAULT_RETRY_POLICY", "RetryPolicy", "Safety", "retry_delay"]


class Safety(Enum):
    """What may be assumed of a call that failed after it was sent."""

    REJECTED_ONLY = "rejected-only"
    """Applying it twice may differ from applying it once: retried only when the server
    did not handle it (429, 503 with Retry-After, no connection)."""
    IDEMPOTENT = "idempotent"
    """Applying it twice is applying it once: also retried after a 503 or a reset."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an object call is retried (see the module docstring for which failures).

    The n-th retry waits ``min(maximum, initial * 2**(n-1)) * U(1 - jitter, 1 + jitter)``
    seconds, or what the server asked for (``Retry-After``, times ``U(1, 1 + jitter)`` so
    that the callers it turned away do not all come back in the same instant) if that is
    longer. A server that asks for more than `max_retry_after` seconds is not waited for:
    the call fails with its answer, and the reconcile's own retry (the scheduler's backoff,
    under the controller's ``requeue_limit``) takes over. A value (frozen, comparable)."""

    retries: int = 5
    """Retries after the first attempt (0: none)."""
    initial: float = 0.25
    """The first retry's backoff, in seconds."""
    maximum: float = 8.0
    """The longest backoff, in seconds."""
    jitter: float = 0.2
    """The backoff's spread: a factor in [1 - jitter, 1 + jitter]."""
    max_retry_after: float = 60.0
    """The longest ``Retry-After`` waited for, in seconds."""

    def __post_init__(self) -> None:
        retries = self.retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        for name in ("initial", "maximum", "max_retry_after"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        jitter = self.jitter
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter < 1:
            raise ValueError(f"jitter must be a number in [0, 1), got {jitter!r}")

    def backoff(self, retry: int) -> float:
        """The backoff before retry number `retry` (1 for the first), jittered."""
        base = min(self.maximum, self.initial * 2.0 ** min(retry - 1, 64))
        return base * random.uniform(1.0 - self.jitter, 1.0 + self.jitter)


DEFAULT_RETRY_POLICY = RetryPolicy()
"""What a client without its own policy (`fastctl.kube.set_retry_policy`) retries with:
five retries, 0.25 s doubling to 8 s, so about 8 s of backoff in all before a call that
keeps failing without a Retry-After gives up."""


def retry_delay(
    policy: RetryPolicy, safety: Safety, retry: int, failure: BaseException
) -> float | None:
    """The seconds to wait before retry number `retry` (1 for the first) of a call of
    `safety` that failed with `failure` (an `ApiError`, or what the connection raised), or
    ``None``: do not retry, raise it."""
    if retry > policy.retries:
        return None
    retry_after: float | None = None
    if isinstance(failure, ApiError):
        retry_after = failure.retry_after
        if failure.status == 429 or (failure.status == 503 and retry_after is not None):
            pass  # refused before it was handled
        elif failure.status == 503 and safety is Safety.IDEMPOTENT:
            pass
        else:
            return None
    elif not _retryable_connection_error(failure, safety):
        return None
    delay = policy.backoff(retry)
    if retry_after is not None:
        if retry_after > policy.max_retry_after:
            return None
        delay = max(delay, retry_after * random.uniform(1.0, 1.0 + policy.jitter))
    return delay


def _retryable_connection_error(exc: BaseException, safety: Safety) -> bool:
    """Whether a call that raised `exc` without an answer may be sent again."""
    if isinstance(exc, TimeoutError):  # aiohttp's timeouts too: the call's budget is spent
        return False
    if isinstance(exc, aiohttp.ClientSSLError):  # a certificate will not verify next time
        return False
    if isinstance(exc, aiohttp.ClientConnectorError):
        return True  # no connection: nothing was sent
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return safety is Safety.IDEMPOTENT
    if isinstance(exc, aiohttp.ClientOSError | ConnectionError):
        return safety is Safety.IDEMPOTENT  # reset, broken pipe: maybe after it was sent
    return False
