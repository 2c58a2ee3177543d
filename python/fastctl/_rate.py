"""A rate and the token bucket that keeps it: `RateLimit`, `TokenBucket`.

Two things in fastctl are held to a rate: the requests a client sends to its API server
(`fastctl.kube.set_rate_limit`, a Manager's ``rate_limit``), and the reconciles a controller
runs again on its own, without a change (requeues and retries after a failure:
`ApplierConfig.requeue_limit`). Both are a token bucket with `RateLimit.qps` tokens a second
and room for `RateLimit.burst`, as client-go's and controller-runtime's limiters are.

The bucket hands out *reservations* (golang.org/x/time/rate's ``Reserve``): `reserve` takes
one token now, borrowing it from the future when the bucket is empty, and says how long the
caller must wait before it may act. Every caller is given a distinct instant, so however
many wait at once, no window of ``t`` seconds holds more than ``burst + qps * t`` of their
starts. The bucket reads no clock itself: the caller passes the time (the runtime's clock,
`fastctl._clock`, virtual in tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RateLimit", "TokenBucket"]


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `qps` a second on average, and `burst` at once after a quiet spell.

    A value (frozen, comparable): one can serve a Manager and all its controllers. Invalid
    values raise `ValueError` here, at construction."""

    qps: float
    """Tokens a second, > 0."""
    burst: int
    """The most tokens the bucket holds (what may go at once after a quiet spell), >= 1."""

    def __post_init__(self) -> None:
        qps, burst = self.qps, self.burst
        if (
            isinstance(qps, bool)
            or not isinstance(qps, int | float)
            or not math.isfinite(qps)
            or qps <= 0
        ):
            raise ValueError(f"qps must be a finite number > 0, got {qps!r}")
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ValueError(f"burst must be an int >= 1, got {burst!r}")
        object.__setattr__(self, "qps", float(qps))


class TokenBucket:
    """A token bucket of `limit`, full at its first use (see the module docstring)."""

    __slots__ = ("_at", "_tokens", "limit")

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self._tokens = float(limit.burst)
        self._at: float | None = None  # when `_tokens` was last brought up to date

    def reserve(self, now: float) -> float:
        """Take one token at `now`; returns the seconds to wait before using it (0: at
        once). A caller that waits less than that breaks the rate."""
        limit = self.limit
        if self._at is None:
            self._at = now
        elif now > self._at:
            self._tokens = min(float(limit.burst), self._tokens + (now - self._at) * limit.qps)
            self._at = now
        self._tokens -= 1.0
        if self._tokens >= 0.0:
            return 0.0
        return -self._tokens / limit.qps

    def tokens(self, now: float) -> float:
        """The tokens there would be at `now` (negative: reserved ahead), without taking one."""
        if self._at is None:
            return float(self.limit.burst)
        gained = max(0.0, now - self._at) * self.limit.qps
        return min(float(self.limit.burst), self._tokens + gained)
