"""A fake API server's patches: merge (strategic taken as merge), JSON patch, and
server-side apply with its field managers and conflicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastctl.testing.fake._clone import clone
from fastctl.testing.fake._kinds import Kind
from fastctl.testing.fake._managed_fields import own, owned_part, owners_of
from fastctl.testing.fake._patches import (
    ApplyConflict,
    JsonPatchError,
    fields_of,
    iter_conflicts,
    json_patch,
    merge_patch,
    merged,
    overlaps,
    without,
)
from fastctl.testing.fake._requests import Fail, conflict, not_found
from fastctl.testing.fake._state import key_of
from fastctl.testing.fake._writes import Writes

__all__ = ["Patches", "patched"]


class Patches(Writes):
    """PATCH: merge, JSON patch and server-side apply."""

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        doc: Any,
        content_type: str,
        subresource: str | None,
        q: Mapping[str, str],
    ) -> tuple[int, dict[str, Any]]:
        """PATCH: merge (or strategic, taken as merge), JSON patch, or apply."""
        manager = q.get("fieldManager")
        ctype = content_type.split(";")[0].strip()
        if ctype == "application/apply-patch+yaml":
            return self.apply(
                kind, namespace, name, doc, subresource, manager, q.get("force") == "true"
            )
        old = self._get(kind, namespace, name)
        new = patched(kind, clone(old), doc, ctype)
        return 200, self._write(kind, old, new, subresource, manager or "unknown", "Update", None)

    def apply(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        doc: Any,
        subresource: str | None,
        manager: str | None,
        force: bool,
    ) -> tuple[int, dict[str, Any]]:
        """Server-side apply (see `fastctl.testing.fake._patches`)."""
        if not manager:
            raise Fail(422, "Invalid", "fieldManager is required for apply requests")
        if not isinstance(doc, dict):
            raise Fail(400, "BadRequest", "an apply body is an object")
        meta = doc.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise Fail(
                400, "BadRequest", "the name of the object does not match the name in the URL"
            )
        applied = clone(doc)
        old = self.objects.get((kind.key, key_of(namespace, name)))
        if old is None:
            if subresource is not None:
                raise not_found(kind, name)
            created = self.create(
                kind, namespace, {**applied, "metadata": {**meta, "name": name}}, None
            )
            fresh = clone(created)
            fresh["metadata"]["managedFields"] = []
            mine = fields_of(owned_part(applied, None))
            own(fresh, manager, "Apply", mine, None)
            self.objects[(kind.key, key_of(namespace, name))]["metadata"]["managedFields"] = fresh[
                "metadata"
            ]["managedFields"]
            return 201, self.objects[(kind.key, key_of(namespace, name))]
        wanted = meta.get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise conflict(kind, name)
        part = owned_part(applied, subresource if kind.status else None)
        mine = fields_of(part)
        owners = owners_of(old, subresource)
        before = owners.pop((manager, "Apply"), set())
        others = {m: f for (m, _), f in owners.items() if m != manager}
        conflicts = list(iter_conflicts(old, part, mine, others))
        if conflicts and not force:
            err = ApplyConflict(conflicts)
            raise Fail(
                409,
                "Conflict",
                str(err),
                {
                    "causes": [
                        {
                            "reason": "FieldManagerConflict",
                            "message": f'conflict with "{m}"',
                            "field": "." + ".".join(p),
                        }
                        for m, p in conflicts
                    ]
                },
            )
        new = merged(clone(old), part)
        for path in sorted(before - mine, key=len, reverse=True):
            if not any(overlaps(path, f) for fs in others.values() for f in fs):
                without(new, path)
        new["metadata"] = {**new["metadata"], "resourceVersion": old["metadata"]["resourceVersion"]}
        return 200, self._write(kind, old, new, subresource, manager, "Apply", mine)


def patched(kind: Kind, current: dict[str, Any], doc: Any, ctype: str) -> dict[str, Any]:
    """`current` (a copy, changed in place) with a merge or JSON patch applied."""
    if ctype == "application/json-patch+json":
        if not isinstance(doc, list):
            raise Fail(400, "BadRequest", "a JSON patch is a list of operations")
        try:
            out: dict[str, Any] = json_patch(current, doc)
        except JsonPatchError as exc:
            raise Fail(422, "Invalid", str(exc)) from None
        return out
    if ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        if ctype.startswith("application/strategic") and kind.schema is not None:
            raise Fail(
                415,
                "UnsupportedMediaType",
                "strategic merge patch is not supported for custom resources",
            )
        if not isinstance(doc, dict):
            raise Fail(400, "BadRequest", "a merge patch is an object")
        patched: dict[str, Any] = merge_patch(current, doc)
        return patched
    raise Fail(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format: {ctype}",
    )
