"""The overall bound on what an applier runs again on its own: `RequeueLimiter`.

Each object's failures back off on their own (the scheduler's per-key exponential backoff,
5 ms doubling to 1,000 s). That bounds one object, not a controller: when the API server
or an admission webhook goes down, every object's reconcile fails at once, and thousands
of independent backoffs add up to a retry storm that starts over each time a backoff
expires. controller-runtime puts an overall token bucket on top of the per-item backoff
(10 a second, bursts of 100: ``DefaultControllerRateLimiter``); this is fastctl's.

Which starts it holds, as controller-runtime's bucket holds what goes through
``AddRateLimited``: a reconcile that runs again because the previous one failed (whatever
delay the scheduler's backoff or the error policy chose: controller-runtime's error path),
or asked to run again at once (``Action.requeue(0)``: its ``Requeue: true``). A requeue
with a delay (``Action.requeue(30)``, its ``RequeueAfter``) keeps its own schedule and is
not held: a controller that checks each of 10,000 objects every minute needs 170 a second,
which is the reconcile's choice, not a storm. Those held take a token when they are about
to start; without one they are put back in the scheduler until their token's time (taking
no slot meanwhile), and then start. A change (a watch event, a relist, a mapped trigger)
never waits here, nor does the follow-up of a reconcile during which a change came: the
bound is on the controller's own retries, not on its work. So in any window of ``t``
seconds at most ``burst + qps * t`` such reconciles start, whatever the number of objects.

The token is taken at the start, not when the retry is decided (controller-runtime's
bucket reserves at the decision), so a retry whose backoff is long spends no token until it
is due. A held retry counts as one more failure of its object (its next backoff doubles),
as a read-your-writes hold does (`fastctl._applier`'s ``put_back``).
"""

from __future__ import annotations

from collections.abc import Callable, Container

from fastctl._rate import RateLimit, TokenBucket

__all__ = ["RequeueLimiter"]


class RequeueLimiter:
    """Which queued keys run again on their own, and the bucket their starts take from."""

    __slots__ = ("_bucket", "_dirty", "_granted", "_on_held", "_requeued")

    def __init__(self, limit: RateLimit, on_held: Callable[[float], None] | None = None) -> None:
        self._bucket = TokenBucket(limit)
        self._requeued: set[str] = set()  # queued by their own previous run only
        self._granted: set[str] = set()  # held once already: their token is reserved
        self._dirty: set[str] = set()  # changed while running: the follow-up is a change's
        self._on_held = on_held

    def changed(self, key: str, running: Container[str]) -> None:
        """A trigger for `key` came (`running`: the keys whose reconcile runs now): its next
        run is a change's."""
        if key in running:
            self._dirty.add(key)
        elif self._requeued:
            self._requeued.discard(key)
            self._granted.discard(key)

    def ended(self, key: str, *, again: bool) -> None:
        """`key`'s reconcile ended; `again`: the scheduler queued it again for a requeue or
        a retry (unless a change during the run queued it already)."""
        if self._dirty and key in self._dirty:
            self._dirty.discard(key)
            again = False
        if again:
            self._requeued.add(key)
        elif self._requeued:
            self._requeued.discard(key)
            self._granted.discard(key)

    def hold(self, key: str, now: float) -> float | None:
        """`key` is about to start at `now`: ``None`` to start it, else the seconds to put
        it back for (it then starts on the token reserved now)."""
        requeued = self._requeued
        if not requeued or key not in requeued:
            return None
        if key in self._granted:
            self._granted.discard(key)
            requeued.discard(key)
            return None
        wait = self._bucket.reserve(now)
        if wait <= 0.0:
            requeued.discard(key)
            return None
        self._granted.add(key)
        if self._on_held is not None:
            self._on_held(wait)
        return wait

    def forget(self, key: str) -> None:
        """`key` will not start (gone from the cache)."""
        self._requeued.discard(key)
        self._granted.discard(key)
        self._dirty.discard(key)

    @property
    def limit(self) -> RateLimit:
        return self._bucket.limit
