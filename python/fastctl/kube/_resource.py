"""Naming Kubernetes resources, and resolving the names through discovery.

A `Resource` is what an operator author writes: ``Resource("v1", "ConfigMap")`` or
``Resource("example.com/v1", "Widget")``. It is a value (frozen, hashable) with no client
attached, so it can be a module constant. Before fastctl can build a URL it needs the plural
and the scope; `Resource.resolve` (or a shared `Discovery`) asks the API server's discovery
endpoint once per group/version and returns a `ResolvedResource` with URL builders.

Discovery is the only source of truth for CRDs, whose plural is whatever the CRD says, and
it is where an unknown kind is caught: `ResourceNotFound` names the kind and group/version
and says whether the group/version is served at all (a CRD not installed) or merely lacks
the kind (a typo). When both `plural` and `namespaced` are given, discovery is skipped: the
resource resolves offline, which suits clusters where discovery is restricted, and an
unknown resource then shows up as a 404 on the first list instead.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar
from urllib.parse import quote as _quote

from kubernetes_asyncio.client import ApiClient

from fastctl.errors import ApiError, ResourceNotFound
from fastctl.kube._http import request_json
from fastctl.types import ObjectRef

__all__ = ["Discovery", "ResolvedResource", "Resource", "ResourceNotFound"]


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


@dataclass(frozen=True, slots=True)
class Resource:
    """A Kubernetes resource by ``apiVersion`` and ``kind``; `plural` and `namespaced`
    come from discovery unless given."""

    api_version: str
    kind: str
    _: KW_ONLY
    plural: str | None = None
    namespaced: bool | None = None

    def __post_init__(self) -> None:
        api_version, kind = self.api_version, self.kind
        if (
            not isinstance(api_version, str)
            or api_version.count("/") > 1
            or not _split_api_version(api_version)[1]
        ):
            raise ValueError(f"api_version must be 'v1' or 'group/version', got {api_version!r}")
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"kind must be a non-empty str, got {kind!r}")
        if self.plural is not None and (not isinstance(self.plural, str) or not self.plural):
            raise ValueError(f"plural must be a non-empty str or None, got {self.plural!r}")

    @property
    def group(self) -> str:
        """The API group (``""`` for the core group)."""
        return _split_api_version(self.api_version)[0]

    @property
    def version(self) -> str:
        """The API version within the group (``"v1"``)."""
        return _split_api_version(self.api_version)[1]

    async def resolve(
        self, client: ApiClient, *, discovery: Discovery | None = None
    ) -> ResolvedResource:
        """Plural, scope and verbs from discovery (cached per client); `ResourceNotFound`
        if the server does not serve this kind."""
        return await (discovery or Discovery.for_client(client)).resolve(self)

    def __str__(self) -> str:
        return f"{self.kind}.{self.api_version}"


@dataclass(frozen=True, slots=True)
class ResolvedResource:
    """A resource with everything needed to address it: group, version, plural, scope.

    The path builders return paths relative to the server (the client's host is prefixed
    by the transport). For a namespaced resource, ``namespace=None`` in `collection_path`
    means all namespaces; a cluster-scoped resource rejects a namespace.
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: frozenset[str] | None = None
    subresources: frozenset[str] | None = None
    """`verbs` and `subresources` as discovery lists them; ``None`` when resolved offline."""

    @property
    def api_version(self) -> str:
        """``"group/version"``, or just the version for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> Resource:
        """The unresolved `Resource` this was resolved from (plural and scope filled in)."""
        return Resource(self.api_version, self.kind, plural=self.plural, namespaced=self.namespaced)

    @property
    def has_status(self) -> bool:
        """Whether the ``status`` subresource exists (assumed when resolved offline)."""
        return self.subresources is None or "status" in self.subresources

    def _prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        """The list/watch/create path: one namespace, or all of them (``None``)."""
        if namespace is None:
            return f"{self._prefix()}/{self.plural}"
        if not self.namespaced:
            raise ValueError(f"{self.kind} is cluster-scoped: no namespace {namespace!r}")
        return f"{self._prefix()}/namespaces/{_segment(namespace)}/{self.plural}"

    def object_path(
        self, name: str, namespace: str | None = None, *, subresource: str | None = None
    ) -> str:
        """The get/patch/delete path of one object, or of its `subresource` (``"status"``)."""
        if not name:
            raise ValueError(f"{self.kind}: an object path needs a name")
        if self.namespaced and namespace is None:
            raise ValueError(f"{self.kind} is namespaced: {name!r} needs a namespace")
        base = self.collection_path(namespace if self.namespaced else None)
        path = f"{base}/{_segment(name)}"
        return f"{path}/{subresource}" if subresource else path

    def status_path(self, name: str, namespace: str | None = None) -> str:
        """The path of the object's ``status`` subresource."""
        return self.object_path(name, namespace, subresource="status")

    def path_of(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> str:
        """The object path of a parsed object (its ``metadata.name``/``namespace``)."""
        ref = ObjectRef.from_object(obj)
        return self.object_path(ref.name, ref.namespace, subresource=subresource)

    def __str__(self) -> str:
        return f"{self.plural}.{self.api_version}"


_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]+").fullmatch
"""A path segment that quoting leaves as it is: every name the API server accepts."""


def _segment(value: str) -> str:
    """`value` as one path segment (``/`` and everything else reserved quoted): a name or
    namespace as it is, the common case, without the quoting's per-character work."""
    return value if _UNRESERVED(value) else _quote(value, safe="")


class Discovery:
    """A discovery cache for one client: one request per group/version, then lookups.

    A kind that is missing from a cached group/version triggers one refresh before
    `ResourceNotFound`, so a CRD version added after the first lookup is still found.
    Failures are not cached: a CRD installed later resolves on the next call.

    Each `Resource` resolves once: the same `ResolvedResource` comes back for it until its
    group/version is invalidated or refreshed. A reconcile that writes through a
    `Resource` then pays one dictionary lookup per write, not a match over the group's
    entries, and the read-your-writes guard finds the write's kind by identity.
    """

    _shared: ClassVar[weakref.WeakKeyDictionary[ApiClient, Discovery]] = weakref.WeakKeyDictionary()

    def __init__(self, client: ApiClient) -> None:
        self._client = client
        self._groups: dict[str, list[dict[str, Any]]] = {}
        self._resolved: dict[Resource, ResolvedResource] = {}

    @classmethod
    def for_client(cls, client: ApiClient) -> Discovery:
        """The cache shared by everything that uses `client` (kept while the client lives)."""
        disc = cls._shared.get(client)
        if disc is None:
            disc = cls._shared[client] = cls(client)
        return disc

    def invalidate(self, api_version: str | None = None) -> None:
        """Forget one group/version (or everything), e.g. after installing a CRD."""
        if api_version is None:
            self._groups.clear()
            self._resolved.clear()
        else:
            self._groups.pop(api_version, None)
            self._forget_resolved(api_version)

    def _forget_resolved(self, api_version: str) -> None:
        """Drop the resolutions of `api_version`'s resources (its list was replaced)."""
        for resource in [r for r in self._resolved if r.api_version == api_version]:
            del self._resolved[resource]

    async def api_resources(
        self, api_version: str, *, refresh: bool = False
    ) -> list[dict[str, Any]]:
        """The ``APIResourceList.resources`` of a group/version (raises `ApiError`)."""
        cached = None if refresh else self._groups.get(api_version)
        if cached is not None:
            return cached
        self._forget_resolved(api_version)
        group, version = _split_api_version(api_version)
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        doc = await request_json(self._client, "GET", path)
        resources: list[dict[str, Any]] = list(doc.get("resources") or [])
        self._groups[api_version] = resources
        return resources

    async def resolve(self, resource: Resource) -> ResolvedResource:
        """Resolve `resource`; offline when both plural and scope were given."""
        known = self._resolved.get(resource)
        if known is not None:
            return known
        if resource.plural is not None and resource.namespaced is not None:
            known = self._resolved[resource] = ResolvedResource(
                resource.group,
                resource.version,
                resource.kind,
                resource.plural,
                resource.namespaced,
            )
            return known
        for refresh in (False, True):
            try:
                entries = await self.api_resources(resource.api_version, refresh=refresh)
            except ApiError as exc:
                if exc.status == 404:
                    raise ResourceNotFound(
                        resource,
                        f"the API server does not serve {resource.api_version} "
                        "(is the CRD installed and established?)",
                    ) from None
                raise
            found = _match(resource, entries)
            if found is not None:
                self._resolved[resource] = found
                return found
        kinds = sorted({e.get("kind", "") for e in entries if "/" not in e.get("name", "/")})
        raise ResourceNotFound(
            resource, f"{resource.api_version} has no such kind (it serves: {', '.join(kinds)})"
        )


def _match(resource: Resource, entries: list[dict[str, Any]]) -> ResolvedResource | None:
    """The entry for `resource`: by plural when given, else by kind (exact, then any case,
    then the plural or singular name, so ``Resource("v1", "configmaps")`` works too)."""
    top = [e for e in entries if "/" not in e.get("name", "/")]
    want = resource.kind
    if resource.plural is not None:
        candidates = [e for e in top if e.get("name") == resource.plural]
    else:
        candidates = (
            [e for e in top if e.get("kind") == want]
            or [e for e in top if str(e.get("kind", "")).lower() == want.lower()]
            or [e for e in top if want in (e.get("name"), e.get("singularName"))]
        )
    if not candidates:
        return None
    entry = candidates[0]
    plural = entry["name"]
    subresources = frozenset(
        e["name"].split("/", 1)[1] for e in entries if e.get("name", "").startswith(plural + "/")
    )
    namespaced = bool(entry.get("namespaced"))
    if resource.namespaced is not None:
        namespaced = resource.namespaced
    return ResolvedResource(
        resource.group,
        resource.version,
        str(entry.get("kind") or resource.kind),
        plural,
        namespaced,
        frozenset(entry.get("verbs") or ()),
        subresources,
    )
