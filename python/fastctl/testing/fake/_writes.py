"""A fake API server's creates and updates: names (``generateName``), namespaces, what
the server sets and keeps, ``metadata.generation``, optimistic concurrency, the status
subresource, finalizers of an object being deleted, the defaults of built-in kinds, a
custom resource checked against its CRD's schema, and a CRD installing its kinds."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from fastctl.testing.fake._clone import clone
from fastctl.testing.fake._deletion import Deletion
from fastctl.testing.fake._kinds import CRD_KIND, Kind, kinds_of_crd
from fastctl.testing.fake._managed_fields import changed_fields, own, owned_part
from fastctl.testing.fake._patches import Path, fields_of
from fastctl.testing.fake._requests import Fail, conflict
from fastctl.testing.fake._state import key_of, wall_stamp
from fastctl.testing.fake._validation import check

__all__ = ["SERVER_SET", "Writes", "generation_body"]

SERVER_SET = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "name",
    "namespace",
    "resourceVersion",
)
"""The metadata a webhook's patch cannot change (the server keeps its own)."""


class Writes(Deletion):
    """Create and update (PUT), and the write every change ends in."""

    def _check_namespace(self, kind: Kind, namespace: str | None) -> None:
        if not kind.namespaced:
            return
        if not namespace:
            raise Fail(400, "BadRequest", "the namespace of the object is missing")
        ns = self.objects.get(("namespaces", key_of(None, namespace)))
        if ns is None:
            raise Fail(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )

    def _validated(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        if kind.schema is None:
            return obj
        out, problems = check(obj, kind.schema)
        if problems:
            name = obj["metadata"].get("name", "")
            shown = ", ".join(f"{path}: {message}" for path, message in problems)
            raise Fail(
                422,
                "Invalid",
                f'{kind.kind}.{kind.group} "{name}" is invalid: {shown}',
                {
                    "name": name,
                    "group": kind.group,
                    "kind": kind.kind,
                    "causes": [
                        {"reason": "FieldValueInvalid", "message": m, "field": p}
                        for p, m in problems
                    ],
                },
            )
        return out

    def create(
        self,
        kind: Kind,
        namespace: str | None,
        doc: Any,
        manager: str | None = None,
    ) -> dict[str, Any]:
        """Create an object (409 if it exists)."""
        if not isinstance(doc, dict):
            raise Fail(400, "BadRequest", "the body of a create is an object")
        obj = clone(doc)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise Fail(400, "BadRequest", "metadata is not an object")
        if kind.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise Fail(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request",
                )
            namespace = namespace or body_ns
        else:
            namespace = None
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise Fail(422, "Invalid", "name or generateName is required")
            name = f"{prefix}{_suffix(next(self._names))}"
        self._check_namespace(kind, namespace)
        if (kind.key, key_of(namespace, name)) in self.objects:
            raise Fail(
                409,
                "AlreadyExists",
                f'{kind.plural}{"." + kind.group if kind.group else ""} "{name}" already exists',
                {"name": name, "group": kind.group, "kind": kind.plural},
            )
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        meta = {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}
        meta["name"] = name
        if namespace:
            meta["namespace"] = namespace
        meta["uid"] = _uid(next(self._uids))
        meta["creationTimestamp"] = wall_stamp()
        if kind.generation:
            meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        obj["metadata"] = meta
        if kind.status:
            obj.pop("status", None)
        obj = self._validated(kind, self._defaulted(kind, obj))
        admitted = self._at_admission(kind, None, obj)
        assert admitted is not None
        obj = admitted
        own(obj, manager or "unknown", "Update", fields_of(owned_part(obj, None)), None)
        obj = self._commit(kind, obj, "ADDED")
        if kind is CRD_KIND or kind.key == CRD_KIND.key:
            self._install(obj)
        return obj

    def _defaulted(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """What the server fills in for some built-in kinds."""
        if kind.key == "namespaces":
            meta = obj["metadata"]
            meta["labels"] = {
                **(meta.get("labels") or {}),
                "kubernetes.io/metadata.name": meta["name"],
            }
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        elif kind.key == "secrets":
            data = dict(obj.get("data") or {})
            for k, v in (obj.pop("stringData", None) or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            if data:
                obj["data"] = data
            obj.setdefault("type", "Opaque")
        return obj

    def _install(self, crd: dict[str, Any]) -> None:
        """A CRD object creates (or changes) the kinds it defines, established at once."""
        for kind in kinds_of_crd(crd):
            self.add_kind(kind)
        names = (crd.get("spec") or {}).get("names") or {}
        crd = clone(crd)
        # As the API server keeps it: every version objects may be stored in, the storage
        # version added on each change, the others removed only by a status write.
        stored = list((crd.get("status") or {}).get("storedVersions") or ())
        for v in (crd.get("spec") or {}).get("versions") or ():
            if v.get("storage") and v["name"] not in stored:
                stored.append(v["name"])
        crd["status"] = {
            "acceptedNames": names,
            "storedVersions": stored,
            "conditions": [
                {"type": t, "status": "True", "reason": r, "lastTransitionTime": wall_stamp()}
                for t, r in (
                    ("NamesAccepted", "NoConflicts"),
                    ("Established", "InitialNamesAccepted"),
                )
            ],
        }
        self._commit(CRD_KIND, crd, "MODIFIED")

    def _put_namespace(self, name: str) -> None:
        kind = self.kinds[("", "v1", "namespaces")]
        self.create(kind, None, {"metadata": {"name": name}}, "fake-cluster")

    def update(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        doc: dict[str, Any],
        subresource: str | None,
        manager: str | None,
    ) -> dict[str, Any]:
        """PUT: replace the object (or its status)."""
        old = self._get(kind, namespace, name)
        wanted = (doc.get("metadata") or {}).get("resourceVersion")
        new = clone(doc)
        new.setdefault("metadata", {})
        if not wanted:
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self._write(kind, old, new, subresource, manager or "unknown", "Update", None)

    def _write(
        self,
        kind: Kind,
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str | None,
        manager: str,
        operation: str,
        applied: set[Path] | None,
    ) -> dict[str, Any]:
        """Store `new` in place of `old`: precondition, the status subresource's split,
        server-set fields kept, generation, schema, managed fields, finalizers."""
        old_meta = old["metadata"]
        new_meta = new.get("metadata")
        if not isinstance(new_meta, dict):
            raise Fail(400, "BadRequest", "metadata is not an object")
        wanted = new_meta.get("resourceVersion")
        if wanted is not None and str(wanted) != old_meta["resourceVersion"]:
            raise conflict(kind, old_meta["name"])
        if new_meta.get("name", old_meta["name"]) != old_meta["name"]:
            raise Fail(
                400, "BadRequest", "the name of the object does not match the name in the URL"
            )
        if kind.status and subresource == "status":
            status = new.get("status")
            new = clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif kind.status:
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                new["status"] = clone(old["status"])
        kept = {k: old_meta[k] for k in SERVER_SET if k in old_meta}
        meta = {k: v for k, v in new["metadata"].items() if k not in kept}
        new["metadata"] = {**meta, **kept}
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        if old_meta.get("deletionTimestamp"):
            added = set(new["metadata"].get("finalizers") or ()) - set(
                old_meta.get("finalizers") or ()
            )
            if added:
                raise Fail(
                    422,
                    "Invalid",
                    f'{kind.kind} "{old_meta["name"]}" is invalid: metadata.finalizers: Forbidden: '
                    "no new finalizers can be added if the object is being deleted",
                )
        new = self._validated(kind, self._defaulted(kind, new) if kind.key == "secrets" else new)
        admitted = self._at_admission(kind, old, new)
        assert admitted is not None
        new = admitted
        if generation_body(new, kind) != generation_body(old, kind) and kind.generation:
            new["metadata"]["generation"] = int(old_meta.get("generation") or 0) + 1
        if new == old:
            return old  # a no-op: no new version, no event
        sub = subresource if kind.status else None
        changed = applied if applied is not None else changed_fields(old, new, sub)
        own(new, manager, operation, changed, sub, replace=applied is not None)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._remove(kind, new)
        obj = self._commit(kind, new, "MODIFIED")
        if kind.key == CRD_KIND.key:
            self._install(obj)
        return obj


def generation_body(obj: Mapping[str, Any], kind: Kind) -> dict[str, Any]:
    """What a change of bumps ``generation``: all but metadata (and status, when it is a
    subresource)."""
    skip = {"metadata", "status"} if kind.status else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


def _suffix(n: int) -> str:
    """A generated name's five characters, from a counter (each name once, in order)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    out = ""
    for _ in range(5):
        n, r = divmod(n, len(alphabet))
        out = alphabet[r] + out
    return out


def _uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012x}"
