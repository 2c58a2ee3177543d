"""A fake API server's reads: discovery, get, and lists (consistent snapshots, paged with
``limit`` and ``continue``) and watches (streamed initial events, resumed from a version,
410 Gone before the compaction point), filtered by namespace, selectors and shard ranges."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from fastctl.runtime.sharding._slots import fnv1a_64
from fastctl.testing.fake._kinds import Kind
from fastctl.testing.fake._requests import Fail, not_found
from fastctl.testing.fake._selectors import SelectorError, field_selector, label_selector
from fastctl.testing.fake._state import ServerState, key_of
from fastctl.testing.fake._wire import Keep, Response, WatchStream

__all__ = ["Reads", "metadata_only", "shard_filter"]

_SHARD_RANGE = re.compile(
    r"shardRange\(object\.metadata\.(uid|namespace), '0x([0-9a-f]+)', '0x([0-9a-f]+)'\)"
)


def shard_filter(selector: str | None) -> Keep | None:
    """The objects a ``shardSelector`` selects (FNV-1a-64 of the field in one of its
    ``[start, end)`` ranges), as a server with sharded lists and watches applies it."""
    if not selector:
        return None
    ranges = [(f, int(lo, 16), int(hi, 16)) for f, lo, hi in _SHARD_RANGE.findall(selector)]

    def keep(obj: Mapping[str, Any]) -> bool:
        meta = obj["metadata"]
        return any(lo <= fnv1a_64(str(meta.get(f) or "")) < hi for f, lo, hi in ranges)

    return keep


class Reads(ServerState):
    """Discovery, get, list and watch."""

    def _shown(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as served at `kind`'s version."""
        if obj.get("apiVersion") == kind.api_version:
            return obj
        return {**obj, "apiVersion": kind.api_version}

    def _discovery(self, path: str) -> dict[str, Any]:
        parts = [p for p in path.strip("/").split("/") if p]
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"]}
        if parts == ["version"]:
            return {"major": "1", "minor": "36", "gitVersion": "v1.36.0-fake"}
        if parts == ["apis"]:
            groups: dict[str, list[str]] = {}
            for k in self.kinds.values():
                if k.group and k.version not in groups.setdefault(k.group, []):
                    groups[k.group].append(k.version)
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                        "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                    }
                    for g, vs in sorted(groups.items())
                ],
            }
        if parts[:1] == ["api"] and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            raise Fail(404, "NotFound", "the server could not find the requested resource")
        served = [k for k in self.kinds.values() if (k.group, k.version) == (group, version)]
        if not served:
            raise Fail(404, "NotFound", "the server could not find the requested resource")
        gv = f"{group}/{version}" if group else version
        resources = [e for k in served for e in k.discovery()]
        return {"kind": "APIResourceList", "groupVersion": gv, "resources": resources}

    def _get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        found = self.objects.get((kind.key, key_of(namespace, name)))
        if found is None:
            raise not_found(kind, name)
        return found

    def _filters(
        self, q: Mapping[str, str], namespace: str | None
    ) -> tuple[Keep | None, Keep | None]:
        """(`keep`: namespace and shard ranges, which never change for an object;
        `selector`: labels and fields, which may)."""
        try:
            labels = label_selector(q.get("labelSelector"))
            fields = field_selector(q.get("fieldSelector"))
        except SelectorError as exc:
            raise Fail(400, "BadRequest", str(exc)) from None
        shards = shard_filter(q.get("shardSelector"))
        selector: Keep | None = None
        if labels is not None or fields is not None:

            def selector(obj: Mapping[str, Any]) -> bool:
                return (labels is None or labels(obj)) and (fields is None or fields(obj))

        return shards, selector

    def _list(
        self, kind: Kind, namespace: str | None, q: Mapping[str, str], meta_only: bool
    ) -> Response:
        keep, selector = self._filters(q, namespace)
        token = q.get("continue")
        if token:
            try:
                snap, offset_s = token.split(":")
                rv, offset = int(snap), int(offset_s)
            except ValueError:
                raise Fail(400, "BadRequest", "invalid continue token") from None
            if rv <= self.compacted.get(kind.key, -1):
                raise Fail(410, "Expired", "the provided continue parameter is too old")
        else:
            rv, offset = self.rv, 0
            wanted = q.get("resourceVersion")
            if wanted and q.get("resourceVersionMatch") == "Exact":
                rv = int(wanted)
                if rv <= self.compacted.get(kind.key, -1):
                    raise Fail(410, "Expired", f"too old resource version: {rv}")
        state = self._snapshot(kind.key, rv)
        items = [
            state[k]
            for k in sorted(state)
            if (namespace is None or state[k]["metadata"].get("namespace") == namespace)
            and (keep is None or keep(state[k]))
            and (selector is None or selector(state[k]))
        ]
        limit = int(q.get("limit") or 0)
        size = min(limit, self.page_size) if limit else len(items)
        page = items[offset : offset + size]
        more = offset + size < len(items)
        meta: dict[str, Any] = {
            "resourceVersion": str(rv),
            "continue": f"{rv}:{offset + size}" if more else "",
        }
        if more:
            meta["remainingItemCount"] = len(items) - offset - size
        else:
            del meta["continue"]
        if keep is not None:
            meta["shardInfo"] = {"selector": q.get("shardSelector")}
        shown = [self._shown(kind, obj) for obj in page]
        if meta_only:
            doc = {
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
                "items": [metadata_only(obj) for obj in shown],
            }
        else:
            doc = {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": meta,
                "items": shown,
            }
        return Response(200, orjson.dumps(doc))

    def _watch(
        self, kind: Kind, namespace: str | None, q: Mapping[str, str], meta_only: bool
    ) -> Response:
        keep, selector = self._filters(q, namespace)
        deadline = self.now() + float(q.get("timeoutSeconds") or 1800)
        bookmark = {"kind": kind.kind, "apiVersion": kind.api_version}
        project = metadata_only if meta_only else None
        since_s = q.get("resourceVersion") or ""
        initial: list[dict[str, Any]] | None = None
        if q.get("sendInitialEvents") in ("true", "1"):
            if not self.streaming:
                raise Fail(400, "BadRequest", "sendInitialEvents is not supported")
            since, initial = self.rv, []
        elif since_s in ("", "0"):
            since, initial = self.rv, []
            bookmark = {}
        else:
            since = int(since_s)
            if since <= self.compacted.get(kind.key, -1):
                raise Fail(410, "Expired", f"too old resource version: {since}")
        present: set[str] = set()
        if initial is not None or selector is not None:
            state = self._snapshot(kind.key, since)
            for k in sorted(state):
                obj = state[k]
                if namespace is not None and obj["metadata"].get("namespace") != namespace:
                    continue
                if (keep is None or keep(obj)) and (selector is None or selector(obj)):
                    present.add(k)
                    if initial is not None:
                        initial.append(self._shown(kind, obj))
        stream = WatchStream(
            self,
            kind.key,
            since,
            initial,
            deadline,
            namespace=namespace,
            keep=keep,
            selector=selector,
            present=present,
            bookmark=bookmark,
            project=project,
        )
        if initial is not None and not bookmark:
            stream.bookmark_pending = False
        self.streams.add(stream)
        return Response(200, b"", stream, self._release)


def metadata_only(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": obj["metadata"],
    }
