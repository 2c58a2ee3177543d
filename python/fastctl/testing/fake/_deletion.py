"""A fake API server's deletion: preconditions, finalizers and ``deletionTimestamp``, a
namespace's objects deleted with it, and the garbage collector (dependents deleted when
their last owner goes, orphaned on request)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastctl.testing.fake._clone import clone
from fastctl.testing.fake._kinds import Kind
from fastctl.testing.fake._reads import Reads
from fastctl.testing.fake._requests import Fail
from fastctl.testing.fake._state import key_of, wall_stamp

__all__ = ["Deletion"]


class Deletion(Reads):
    """DELETE and the garbage collector."""

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any],
    ) -> dict[str, Any]:
        """DELETE: at once, or (with finalizers) marked with a ``deletionTimestamp``."""
        old = self._get(kind, namespace, name)
        pre = options.get("preconditions") or {}
        meta = old["metadata"]
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise Fail(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {pre['uid']}, "
                f"UID in object meta: {meta.get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise Fail(
                409,
                "Conflict",
                "Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}",
            )
        self._at_admission(kind, old, None)
        policy = options.get("propagationPolicy") or "Background"
        if policy == "Orphan":
            self._orphan(meta.get("uid"))
        if kind.key == "namespaces":
            for (res, key), obj in sorted(self.objects.items()):
                if key.startswith(f"{name}/"):
                    dep = self._kind_by_key(res)
                    if dep is not None and (res, key) in self.objects:
                        self.delete(dep, name, obj["metadata"]["name"], {})
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return old
            new = clone(old)
            new["metadata"]["deletionTimestamp"] = wall_stamp()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if kind.generation:
                new["metadata"]["generation"] = int(meta.get("generation") or 0) + 1
            if kind.key == "namespaces":
                new["status"] = {"phase": "Terminating"}
            return self._commit(kind, new, "MODIFIED")
        return self._remove(kind, clone(old))

    def _remove(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        gone = self._commit(kind, obj, "DELETED")
        if self.garbage_collection:
            self._collect(gone["metadata"].get("uid"))
        return gone

    def _dependents(self, uid: str | None) -> list[tuple[Kind, dict[str, Any]]]:
        out = []
        for (res, _), obj in sorted(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or ()
            if any(ref.get("uid") == uid for ref in refs):
                kind = self._kind_by_key(res)
                if kind is not None:
                    out.append((kind, obj))
        return out

    def _orphan(self, uid: str | None) -> None:
        for kind, obj in self._dependents(uid):
            new = clone(obj)
            refs = [r for r in new["metadata"]["ownerReferences"] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                del new["metadata"]["ownerReferences"]
            self._commit(kind, new, "MODIFIED")

    def _collect(self, uid: str | None) -> None:
        """The garbage collector: a dependent whose owners are all gone is deleted; one
        that keeps another owner loses the reference."""
        if not uid:
            return
        live = {o["metadata"].get("uid") for o in self.objects.values()}
        for kind, obj in self._dependents(uid):
            key = (kind.key, key_of(obj["metadata"].get("namespace"), obj["metadata"]["name"]))
            if key not in self.objects:
                continue
            refs = obj["metadata"].get("ownerReferences") or ()
            if any(r.get("uid") in live for r in refs if r.get("uid") != uid):
                new = clone(obj)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                self._commit(kind, new, "MODIFIED")
            else:
                meta = obj["metadata"]
                self.delete(kind, meta.get("namespace"), meta["name"], {})
