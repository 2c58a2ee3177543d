"""Why a key is queued: the trigger reasons merged into its pending run, kept per key.

The scheduler de-duplicates triggers, so once ten events have folded into one pending run
nothing says which they were. `ReasonLog` keeps that answer, for `Controller.inspect` and
the ``/debug/queue`` endpoint, at a bounded cost:

- each key keeps at most `MAX_REASONS` distinct reasons (``"Widget changed"``, ``"owned
  ConfigMap changed (web-config)"``, ``"requeue"``, ``"error retry"``, ``"list"``...), each
  with a count and the times it was first and last seen; past that the least recently seen
  one is dropped (and counted in ``dropped``);
- when a run starts its reasons move to ``running`` (what the running reconcile answers),
  and pending starts empty again: what arrives meanwhile is what the follow-up run is for;
- when a run ends with nothing to follow (no requeue, no backoff, no trigger meanwhile) the
  key is dropped, as the scheduler drops its record: the log never holds more keys than the
  scheduler does;
- a failed run keeps its error, the exception's type and message, whole (scrubbed of
  remembered secret values, `fastctl._redact.scrub`), until a run succeeds or the key is
  dropped. Whole because the end of a message is often what says what to fix (a 403 for an
  RBAC escalation names the missing permission last); `MAX_ERROR` only bounds a
  pathological one.

Only names and reason texts are kept, never an object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastctl._clock import monotonic
from fastctl._redact import scrub

__all__ = ["MAX_ERROR", "MAX_REASONS", "KeyReasons", "Reason", "ReasonLog", "error_text"]

MAX_REASONS = 5
"""Distinct reasons kept per key and per run."""

MAX_ERROR = 16_384
"""Characters of an error's text kept (type name included): no real error is cut (an API
server's messages are a few hundred characters, a long RBAC refusal a few thousand); the
bound is against a message that quotes a whole object, since one is kept per failing key."""


@dataclass(slots=True)
class Reason:
    """One kind of trigger merged into a run: how often, first and last (on the runtime's
    clock, `fastctl._clock`)."""

    reason: str
    count: int
    first: float
    last: float


@dataclass(slots=True)
class KeyReasons:
    """What the log holds for one key."""

    pending: dict[str, Reason]
    running: dict[str, Reason] | None = None
    """The reasons of the run in flight (None: none in flight)."""
    started: float | None = None
    dropped: int = 0
    """Reasons dropped from `pending` past `MAX_REASONS`."""
    error: str | None = None
    """The latest failed run's error (cleared by a success)."""
    error_at: float | None = None


def error_text(error: BaseException) -> str:
    """``Type: message``, scrubbed of remembered secret values (cut only past `MAX_ERROR`)."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    text = scrub(text)
    if len(text) > MAX_ERROR:
        text = text[: MAX_ERROR - 1] + "…"
    return text


class ReasonLog:
    """Per-key reasons for the applier's scheduler (see the module docstring).

    The applier calls `queued` for each trigger and requeue, `started` when a run starts,
    `finished` when it ends and `dropped` when a key leaves without a run; readers call
    `get`. All calls come from the event loop's thread.
    """

    __slots__ = ("_clock", "_keys", "default_reason")

    def __init__(
        self, default_reason: str = "changed", *, clock: Callable[[], float] = monotonic
    ) -> None:
        self.default_reason = default_reason
        """The reason of a trigger that gives none (a bare ObjectRef: a primary change)."""
        self._clock = clock
        self._keys: dict[str, KeyReasons] = {}

    def __len__(self) -> int:
        """Keys with an entry."""
        return len(self._keys)

    def get(self, key: str) -> KeyReasons | None:
        return self._keys.get(key)

    def queued(self, key: str, reason: str | None) -> None:
        """A trigger (or a requeue) merged into `key`'s pending run."""
        now = self._clock()
        entry = self._keys.get(key)
        if entry is None:
            entry = self._keys[key] = KeyReasons({})
        text = reason or self.default_reason
        pending = entry.pending
        seen = pending.pop(text, None)
        if seen is None:
            if len(pending) >= MAX_REASONS:
                del pending[next(iter(pending))]  # the least recently seen
                entry.dropped += 1
            pending[text] = Reason(text, 1, now, now)
        else:
            seen.count += 1
            seen.last = now
            pending[text] = seen  # most recently seen last

    def started(self, key: str) -> None:
        """`key`'s run starts: its pending reasons become the running ones."""
        entry = self._keys.get(key)
        if entry is None:  # queued by someone else (another applier on the scheduler)
            entry = self._keys[key] = KeyReasons({})
        entry.running = entry.pending
        entry.started = self._clock()
        entry.pending = {}
        entry.dropped = 0

    def finished(
        self, key: str, *, error: BaseException | None, requeue: str | None, again: bool
    ) -> None:
        """`key`'s run ended with `error`; `requeue` is the reason it was queued again (a
        requeue or an error retry), None if it was not; `again` says whether the scheduler
        still holds the key (a requeue, a backoff, or a trigger that came meanwhile)."""
        entry = self._keys.get(key)
        if entry is None:
            return
        if not again:
            del self._keys[key]
            return
        entry.running = None
        entry.started = None
        if error is None:
            entry.error = entry.error_at = None
        else:
            entry.error = error_text(error)
            entry.error_at = self._clock()
        if requeue is not None:
            self.queued(key, requeue)

    def dropped(self, key: str) -> None:
        """`key` left the scheduler without a run (its object is gone from the cache)."""
        self._keys.pop(key, None)
