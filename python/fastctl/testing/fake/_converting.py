"""A fake API server's requests at a version other than a CRD's storage one, through its
converter (`fastctl.testing.fake._conversion`): the object converted to the storage
version, served there, the answer converted back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from fastctl.testing.fake._admitting import Admitting
from fastctl.testing.fake._clone import clone
from fastctl.testing.fake._conversion import ConversionFailed
from fastctl.testing.fake._kinds import Kind
from fastctl.testing.fake._patching import patched
from fastctl.testing.fake._requests import Fail, Route, parse_body
from fastctl.testing.fake._state import key_of
from fastctl.testing.fake._wire import Response

__all__ = ["Converting"]


class Converting(Admitting):
    """Requests at a version the CRD does not store, converted both ways."""

    def _converting(self, kind: Kind) -> bool:
        """Whether a request at `kind`'s version goes through the CRD's converter."""
        return self.conversion.converts(kind) and self.storage_of(kind) != kind

    async def _convert(
        self, kind: Kind, objects: list[dict[str, Any]], desired: str
    ) -> list[dict[str, Any]]:
        try:
            return await self.conversion.convert(kind, objects, desired)
        except ConversionFailed as exc:
            raise Fail(500, "InternalError", str(exc)) from None

    async def _converted(
        self,
        route: Route,
        path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
        user: Mapping[str, Any],
    ) -> Response:
        """A request at a version other than the storage one (`fastctl.testing.fake._conversion`):
        its object converted to the storage version, served there, the answer converted back."""
        kind = route.kind
        assert kind is not None
        storage = self.storage_of(kind)
        at_storage = Route(
            route.method,
            route.verb,
            storage,
            route.namespace,
            route.name,
            route.subresource,
            route.query,
        )
        stored_path = path.replace(
            f"/{kind.group}/{kind.version}/", f"/{storage.group}/{storage.version}/", 1
        )
        try:
            if route.verb == "patch":
                return await self._patched_at(route, stored_path, body, content_type, accept, user)
            if route.verb in ("create", "update", "apply"):
                doc = parse_body(body, content_type)
                if isinstance(doc, dict):
                    doc.setdefault("apiVersion", kind.api_version)
                    doc.setdefault("kind", kind.kind)
                    [doc] = await self._convert(kind, [doc], storage.api_version)
                    body = orjson.dumps(doc)
            answer = await self._dispatch(at_storage, stored_path, body, content_type, accept, user)
            if route.verb == "watch" and answer.content is not None:
                stream = answer.content

                async def shown(obj: dict[str, Any]) -> dict[str, Any]:
                    [out] = await self.conversion.convert(kind, [obj], kind.api_version)
                    return out

                stream.convert = shown
                stream.bookmark["apiVersion"] = kind.api_version
                return answer
            return await self._answered_at(kind, answer)
        except Fail as exc:
            return exc.response()

    async def _answered_at(self, kind: Kind, answer: Response) -> Response:
        """`answer` (an object or a list, at the storage version) at `kind`'s version."""
        if answer.status >= 300 or answer.content is not None:
            return answer
        doc = orjson.loads(await answer.read())
        if doc.get("kind") == "Status":
            return answer
        if isinstance(doc.get("items"), list):
            doc["items"] = await self._convert(kind, doc["items"], kind.api_version)
            doc["apiVersion"] = kind.api_version
        else:
            [doc] = await self._convert(kind, [doc], kind.api_version)
        return Response(answer.status, orjson.dumps(doc), headers=answer.headers)

    async def _patched_at(
        self,
        route: Route,
        stored_path: str,
        body: bytes | None,
        content_type: str,
        accept: str | None,
        user: Mapping[str, Any],
    ) -> Response:
        """A merge or JSON patch at another version than the storage one: applied to the
        object converted to the request's version, the result converted back and stored
        (as an update, unless the object changed meanwhile: then again)."""
        kind = route.kind
        assert kind is not None
        assert route.name is not None
        storage = self.storage_of(kind)
        ctype = content_type.split(";")[0].strip()
        doc = parse_body(body, content_type)
        while True:
            current = self._get(storage, route.namespace, route.name)
            version = current["metadata"]["resourceVersion"]
            [shown] = await self._convert(kind, [clone(current)], kind.api_version)
            new = patched(kind, shown, doc, ctype)
            new["metadata"] = {**new.get("metadata", {}), "resourceVersion": version}
            [new] = await self._convert(kind, [new], storage.api_version)
            now = self.objects.get((storage.key, key_of(route.namespace, route.name)))
            if now is not None and now["metadata"]["resourceVersion"] != version:
                continue  # written meanwhile: patch what is there now, as the server retries
            update = Route(
                "PUT",
                "update",
                storage,
                route.namespace,
                route.name,
                route.subresource,
                route.query,
            )
            answer = await self._dispatch(
                update, stored_path, orjson.dumps(new), "application/json", accept, user
            )
            return await self._answered_at(kind, answer)
