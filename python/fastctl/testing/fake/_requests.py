"""A fake API server's requests: one routed (`Route`), recorded (`RecordedRequest`),
refused on purpose (`Fault`) or answered with an error (`Fail`, and the 404 and 409 every
write can answer); bodies and query values as the server reads them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from fastctl.testing.fake._kinds import Kind
from fastctl.testing.fake._wire import Response, status_body

__all__ = [
    "Fail",
    "Fault",
    "Hook",
    "RecordedRequest",
    "Route",
    "conflict",
    "not_found",
    "parse_body",
    "query_value",
]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server answered (or refused)."""

    method: str
    path: str
    verb: str
    """``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``apply``,
    ``delete``, or ``discovery``."""
    resource: str
    """The resource's plural (``widgets``; ``""`` for discovery)."""
    namespace: str | None
    name: str | None
    subresource: str | None
    query: Mapping[str, str]
    body: Any
    status: int
    """The HTTP status answered (0: refused, the server being down)."""
    at: float
    """The event loop's time."""

    @property
    def field_manager(self) -> str | None:
        return self.query.get("fieldManager")


@dataclass
class Fault:
    """Requests answered with an error instead: the next `times` that match."""

    status: int
    reason: str
    message: str
    times: int
    verb: str | None = None
    resource: str | None = None
    name: str | None = None
    namespace: str | None = None
    retry_after: int | None = None

    def matches(self, req: Route) -> bool:
        return (
            self.times > 0
            and self.verb in (None, req.verb)
            and self.resource in (None, req.kind.plural if req.kind else "")
            and self.name in (None, req.name)
            and self.namespace in (None, req.namespace)
        )


class Fail(Exception):
    """An error answer."""

    def __init__(
        self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = dict(details or {})

    def response(self) -> Response:
        extra = {"details": self.details} if self.details else {}
        return Response(self.code, status_body(self.code, self.reason, self.message, **extra))


@dataclass
class Route:
    method: str
    verb: str
    kind: Kind | None
    namespace: str | None
    name: str | None
    subresource: str | None
    query: dict[str, str]


Hook = Callable[["Kind", dict[str, Any] | None, dict[str, Any] | None], dict[str, Any] | None]
"""Called with (kind, old, new) where a write is about to be stored: the object to store."""


def query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_body(body: bytes | None, content_type: str) -> Any:
    if not body:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    if "yaml" in content_type:
        import yaml  # type: ignore[import-untyped]

        try:
            return yaml.safe_load(body)
        except yaml.YAMLError as exc:
            raise Fail(400, "BadRequest", f"invalid YAML: {exc}") from None
    raise Fail(400, "BadRequest", "the request body is not valid JSON")


def not_found(kind: Kind, name: str) -> Fail:
    what = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    return Fail(
        404,
        "NotFound",
        f'{what} "{name}" not found',
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def conflict(kind: Kind, name: str) -> Fail:
    what = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    return Fail(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        {"name": name, "group": kind.group, "kind": kind.plural},
    )
