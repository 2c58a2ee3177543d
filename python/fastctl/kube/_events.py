"""Publishing Kubernetes Events (``events.k8s.io/v1``) about the objects a controller manages.

Events are what ``kubectl describe`` and ``kubectl events`` show a user: the controller's
account of what it did (``Normal``) or what went wrong (``Warning``). A `Recorder` is made
once per controller and shared by its reconciles::

    recorder = Recorder(client, "example.com/widget-controller", socket.gethostname())
    await recorder.publish(widget, reason="Rendered", note="3 ConfigMaps up to date")

Repeats are folded the way client-go folds them: the same event (same object, type,
reason, action and note) published again within six minutes increments the first one's
``series.count`` and ``lastObservedTime`` with a PATCH instead of creating a new object, so
a reconcile loop that reports the same thing every few seconds does not flood etcd. The
memory of recent events is bounded (`cache_size`). Publishes of the same event at once (a
few quick retries of one failing object) wait for each other, so the first one's Event
exists before the next one looks for it: one Event and its series, never one Event each.

Event objects live in the namespace of the object they are about; events about
cluster-scoped objects go to ``default``, as client-go and kube-rs do.

A failed publish raises `ApiError` (missing RBAC for ``events.k8s.io`` ``create``/``patch``
is the usual cause): wrap it if an event must never fail a reconcile.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl._redact import scrub
from fastctl.kube._http import ApiError, request_json
from fastctl.kube._objects import as_json

__all__ = ["Recorder"]

Obj = dict[str, Any]
EventType = Literal["Normal", "Warning"]
_SERIES_WINDOW = 6 * 60.0  # client-go's isomorphic-event window
_NOTE_MAX = 1024  # bytes, the API server's limit on `note`
_FIELD_MAX = 128  # reason, action, reportingInstance


def _micro_time(ts: float | None = None) -> str:
    """A Kubernetes MicroTime: RFC 3339 in UTC with microseconds."""
    moment = datetime.datetime.fromtimestamp(ts if ts is not None else time.time(), datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _truncate(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


def object_reference(obj: Mapping[str, Any] | Any) -> Obj:
    """The ``ObjectReference`` of a parsed object or a `CustomResource` instance (what an
    Event's ``regarding`` holds)."""
    obj = as_json(obj)
    meta = obj.get("metadata") or {}
    ref: Obj = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: v for k, v in ref.items() if v}


@dataclass(slots=True)
class _Seen:
    namespace: str
    name: str
    count: int
    last: float


@dataclass(slots=True)
class _Turn:
    """The publishes of one event under way: they take turns (`Recorder._turns`)."""

    lock: asyncio.Lock
    users: int = 0


class Recorder:
    """Publishes events for one controller instance (see the module doc)."""

    def __init__(
        self,
        client: ApiClient,
        reporting_controller: str,
        reporting_instance: str | None = None,
        *,
        cache_size: int = 4096,
    ) -> None:
        if not reporting_controller:
            raise ValueError("reporting_controller must name the controller")
        self.client = client
        self.reporting_controller = reporting_controller
        self.reporting_instance = _truncate(
            reporting_instance or os.uname().nodename or reporting_controller, _FIELD_MAX
        )
        self.cache_size = cache_size
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._turns: dict[tuple[str, ...], _Turn] = {}
        """Per event being published: its lock, held while it is created or bumped."""

    async def publish(
        self,
        obj: Mapping[str, Any] | Any,
        *,
        type: EventType = "Normal",
        reason: str,
        note: str = "",
        action: str | None = None,
        related: Mapping[str, Any] | None = None,
    ) -> Obj:
        """Publish (or fold into a series) an event about `obj`; returns the Event object.

        `reason` is a short CamelCase machine-readable cause (``"Rendered"``), `note` the
        human sentence (cut to 1 kB), `action` what the controller did or tried
        (``"Apply"``; defaults to `reason`), `related` an optional second object. Secret
        values that `note` or `action` quote are replaced by ``<redacted>`` (Events are
        readable by anyone who may list them in the namespace).
        """
        if type not in ("Normal", "Warning"):
            raise ValueError(f"event type must be 'Normal' or 'Warning', got {type!r}")
        if not reason:
            raise ValueError("an event needs a reason")
        regarding = object_reference(obj)
        if not regarding.get("name") or not regarding.get("kind"):
            raise ValueError("an event must regard an object with kind and metadata.name")
        reason = _truncate(scrub(reason), _FIELD_MAX)
        action = _truncate(scrub(action or reason), _FIELD_MAX)
        note = _truncate(scrub(note), _NOTE_MAX)
        namespace = str(regarding.get("namespace") or "default")
        key = (
            str(regarding.get("uid") or ""),
            str(regarding["kind"]),
            namespace,
            str(regarding["name"]),
            type,
            reason,
            action,
            note,
        )
        turn = self._turns.get(key)
        if turn is None:
            turn = self._turns[key] = _Turn(asyncio.Lock())
        turn.users += 1
        try:
            async with turn.lock:
                return await self._publish(
                    key, regarding, namespace, type, reason, action, note, related
                )
        finally:
            turn.users -= 1
            if not turn.users:
                del self._turns[key]

    async def _publish(
        self,
        key: tuple[str, ...],
        regarding: Obj,
        namespace: str,
        type: EventType,
        reason: str,
        action: str,
        note: str,
        related: Mapping[str, Any] | None,
    ) -> Obj:
        """Bump the series of `key`, or create its Event (the caller holds its turn)."""
        now = time.time()
        seen = self._seen.get(key)
        if seen is not None and now - seen.last < _SERIES_WINDOW:
            updated = await self._bump(seen, now)
            if updated is not None:
                return updated
        event: Obj = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": f"{str(regarding['name'])[:200]}.{time.time_ns():x}",
                "namespace": namespace,
            },
            "eventTime": _micro_time(now),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": action,
            "reason": reason,
            "type": type,
            "note": note,
            "regarding": regarding,
        }
        if related is not None:
            event["related"] = object_reference(related)
        created: Obj = await request_json(
            self.client,
            "POST",
            f"/apis/events.k8s.io/v1/namespaces/{quote(namespace, safe='')}/events",
            body=orjson.dumps(event),
        )
        self._remember(key, _Seen(namespace, created["metadata"]["name"], 1, now))
        return created

    async def _bump(self, seen: _Seen, now: float) -> Obj | None:
        """Count one more occurrence on the existing event; None if it has expired."""
        path = (
            f"/apis/events.k8s.io/v1/namespaces/{quote(seen.namespace, safe='')}"
            f"/events/{quote(seen.name, safe='')}"
        )
        body = {"series": {"count": seen.count + 1, "lastObservedTime": _micro_time(now)}}
        try:
            updated: Obj = await request_json(
                self.client,
                "PATCH",
                path,
                body=orjson.dumps(body),
                content_type="application/merge-patch+json",
            )
        except ApiError as exc:
            if exc.status == 404:  # events expire (kube-apiserver's --event-ttl)
                return None
            raise
        seen.count += 1
        seen.last = now
        return updated

    def _remember(self, key: tuple[str, ...], seen: _Seen) -> None:
        self._seen[key] = seen
        self._seen.move_to_end(key)
        while len(self._seen) > self.cache_size:
            self._seen.popitem(last=False)
