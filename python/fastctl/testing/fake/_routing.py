"""A fake API server's routes: a request's path and method read as the verb, kind,
namespace, name and subresource it names, and answered by the server's operations."""

from __future__ import annotations

from urllib.parse import unquote

import orjson

from fastctl.testing.fake._patching import Patches
from fastctl.testing.fake._requests import Fail, Route, parse_body
from fastctl.testing.fake._wire import Response

__all__ = ["Routing"]


class Routing(Patches):
    """A request routed, and answered at once (admission and conversion come on top)."""

    def _route(self, method: str, path: str, q: dict[str, str]) -> Route:
        parts = [unquote(p) for p in path.strip("/").split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return Route(method, "discovery", None, None, None, None, q)
        if not rest:
            return Route(method, "discovery", None, None, None, None, q)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            probe = self.kinds.get((group, version, rest[2]))
            if probe is not None and probe.namespaced:
                namespace, rest = rest[1], rest[2:]
        kind = self.kinds.get((group, version, rest[0]))
        if kind is None or len(rest) > 3:
            raise Fail(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and not (sub == "status" and kind.status):
            raise Fail(404, "NotFound", "the server could not find the requested resource")
        if name is None:
            verb = {"GET": "watch" if q.get("watch") in ("true", "1") else "list", "POST": "create"}
        else:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        if method not in verb:
            raise Fail(405, "MethodNotAllowed", f"the server does not allow {method} here")
        return Route(method, verb[method], kind, namespace, name, sub, q)

    def _answer(
        self,
        route: Route,
        path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
    ) -> Response:
        if route.kind is None:
            return Response(200, orjson.dumps(self._discovery(path)))
        kind, q = route.kind, route.query
        meta_only = bool(accept and "as=PartialObjectMetadata" in accept)
        if route.verb == "list":
            return self._list(kind, route.namespace, q, meta_only)
        if route.verb == "watch":
            return self._watch(kind, route.namespace, q, meta_only)
        doc = parse_body(body, content_type)
        assert route.name is not None or route.verb == "create"
        if route.verb == "create":
            if route.subresource is not None:
                raise Fail(405, "MethodNotAllowed", "create of a subresource")
            obj = self.create(kind, route.namespace, doc, q.get("fieldManager"))
            return Response(201, orjson.dumps(self._shown(kind, obj)))
        name = str(route.name)
        if route.verb == "get":
            return Response(
                200, orjson.dumps(self._shown(kind, self._get(kind, route.namespace, name)))
            )
        if route.verb == "delete":
            out = self.delete(kind, route.namespace, name, doc if isinstance(doc, dict) else {})
            return Response(200, orjson.dumps(self._shown(kind, out)))
        if route.verb == "update":
            if not isinstance(doc, dict):
                raise Fail(400, "BadRequest", "the body of an update is an object")
            obj = self.update(
                kind, route.namespace, name, doc, route.subresource, q.get("fieldManager")
            )
            return Response(200, orjson.dumps(self._shown(kind, obj)))
        status, obj = self.patch(
            kind, route.namespace, name, doc, content_type, route.subresource, q
        )
        return Response(status, orjson.dumps(self._shown(kind, obj)))
