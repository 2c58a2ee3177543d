"""A fake API server's writes through a module's admission webhooks
(`fastctl.testing.fake._admission`): computed up to where they would be stored, admitted,
then computed again and stored as admitted, from the start if the object changed
meanwhile."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fastctl.testing.fake._admission import Denied
from fastctl.testing.fake._clone import clone
from fastctl.testing.fake._kinds import Kind
from fastctl.testing.fake._requests import Fail, Route
from fastctl.testing.fake._routing import Routing
from fastctl.testing.fake._state import key_of
from fastctl.testing.fake._wire import Response, status_body
from fastctl.testing.fake._writes import SERVER_SET

if TYPE_CHECKING:
    from fastctl.webhook._review import Operation

__all__ = ["Admitting"]


class _Paused(Exception):
    """A write stopped where it would be stored: its object goes to admission first."""

    def __init__(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        super().__init__("paused for admission")
        self.old, self.new = clone(old), clone(new)


class _Changed(Exception):
    """The object changed while the webhooks looked at it: admission starts again."""


def _comparable(obj: Mapping[str, Any] | None) -> Any:
    """`obj` without what a second computation of the same write draws anew (a uid, a
    generated name, timestamps)."""
    if obj is None:
        return None
    meta = dict(obj.get("metadata") or {})
    for key in ("uid", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    if meta.get("generateName"):
        meta.pop("name", None)
    return {**obj, "metadata": meta}


def _store(
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    admitted: dict[str, Any] | None,
    subresource: str | None,
    kind: Kind,
    now_old: dict[str, Any] | None,
    now_new: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """The hook of a write's second computation: the admitted object, if the write
    computes the same as when the webhooks were asked (`_Changed` otherwise)."""
    if _comparable(now_old) != _comparable(old) or _comparable(now_new) != _comparable(new):
        raise _Changed
    if now_new is None or admitted is None:
        return now_new
    return _as_admitted(kind, now_new, admitted, subresource)


def _as_admitted(
    kind: Kind, stored: dict[str, Any], admitted: dict[str, Any], subresource: str | None
) -> dict[str, Any]:
    """What the webhooks admitted, with what only the server sets kept from `stored`."""
    out = clone(admitted)
    meta = {k: v for k, v in (out.get("metadata") or {}).items() if k not in SERVER_SET}
    meta.update({k: stored["metadata"][k] for k in SERVER_SET if k in stored["metadata"]})
    out["metadata"] = meta
    out["apiVersion"], out["kind"] = stored["apiVersion"], stored["kind"]
    if kind.status and subresource is None:
        out.pop("status", None)
        if "status" in stored:
            out["status"] = clone(stored["status"])
    return out


class Admitting(Routing):
    """Requests answered through the admission webhooks their rules name."""

    async def _dispatch(
        self,
        route: Route,
        path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
        user: Mapping[str, Any],
    ) -> Response:
        """The answer to a routed request: through the admission webhooks when their rules
        name it, else at once."""
        if route.kind is not None and self.admission.rules_name(
            route.kind, route.verb, route.subresource
        ):
            return await self._admitted(route, path, body, content_type, accept, user)
        try:
            return self._answer(route, path, body, content_type, accept)
        except Fail as exc:
            return exc.response()

    async def _admitted(
        self,
        route: Route,
        path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
        user: Mapping[str, Any],
    ) -> Response:
        """A write through the admission webhooks: computed up to where it would be
        stored, admitted (`fastctl.testing.fake._admission`), then computed again and
        stored as admitted; again from the start if the object changed meanwhile."""
        kind = route.kind
        assert kind is not None
        while True:
            self._hook = self._pause
            try:
                return self._answer(route, path, body, content_type, accept)  # not a write
            except _Paused as paused:
                old, new = paused.old, paused.new
            except Fail as exc:
                return exc.response()
            finally:
                self._hook = None
            operation: Operation = (
                "DELETE" if new is None else "CREATE" if old is None else "UPDATE"
            )
            namespace = ((new or old or {}).get("metadata") or {}).get("namespace")
            labels = None
            if kind.namespaced:
                ns = self.objects.get(("namespaces", key_of(None, str(namespace))))
                labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
            try:
                admitted = await self.admission.admit(
                    kind,
                    operation,
                    old,
                    new,
                    user=user,
                    namespace_labels=labels,
                    validate=lambda obj: self._validated(kind, obj),
                )
            except Denied as exc:
                return Response(exc.code, status_body(exc.code, exc.reason, exc.message))
            except Fail as exc:
                return exc.response()

            self._hook = functools.partial(_store, old, new, admitted, route.subresource)
            try:
                return self._answer(route, path, body, content_type, accept)
            except _Changed:
                continue
            except Fail as exc:
                return exc.response()
            finally:
                self._hook = None

    @staticmethod
    def _pause(_: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        raise _Paused(old, new)
