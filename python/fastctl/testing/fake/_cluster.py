"""`FakeCluster`: an in-memory Kubernetes API server for an operator's tests.

Its clients are real `kubernetes_asyncio` ``ApiClient``s whose host names the fake
(``http://fake-1.cluster.invalid``); fastctl's HTTP layer answers their requests from memory
(`fastctl.kube._in_memory`), so `fastctl.kube` calls, watches, `Controller`, `Manager`,
leader election and sharding run on it unchanged, on any event loop, and on a
`VirtualTimeLoop` with no real time passing at all.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fastctl._clock import monotonic
from fastctl.kube._in_memory import SESSIONS
from fastctl.testing.fake._clone import clone
from fastctl.testing.fake._kinds import Kind
from fastctl.testing.fake._requests import Fail, Fault, RecordedRequest
from fastctl.testing.fake._server import DEFAULT_NAMESPACES, FakeApiServer
from fastctl.testing.fake._wire import Response

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from fastctl.kube._model import CustomResource
    from fastctl.webhook import Webhooks

__all__ = ["FakeCluster", "FakeClusterError"]

_HOSTS = itertools.count(1)


class FakeClusterError(RuntimeError):
    """A fake cluster's own call refused (the server's error, as `ApiError` would say)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason = status, reason


class _Session:
    """What `fastctl.kube._http.request` calls in place of an ``aiohttp`` session."""

    def __init__(self, server: FakeApiServer, user: Mapping[str, Any] | None = None) -> None:
        self.server, self.user = server, user

    async def request(self, method: str, url: str, **kwargs: Any) -> Response:
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        headers: Mapping[str, str] = kwargs.get("headers") or {}
        data = kwargs.get("data")
        return await self.server.request(
            method,
            path,
            query=kwargs.get("params"),
            body=data if isinstance(data, bytes) or data is None else bytes(data),
            content_type=headers.get("Content-Type", "application/json"),
            accept=headers.get("Accept"),
            user=self.user,
        )


def _ref(obj: Any) -> dict[str, Any]:
    """A plain object from a dict or a model instance."""
    if isinstance(obj, Mapping):
        return clone(dict(obj))
    dump = getattr(obj, "model_dump", None)
    if dump is None:
        raise TypeError(f"expected an object (a dict or a model), got {type(obj).__name__}")
    out: dict[str, Any] = dump(mode="json", by_alias=True, exclude_none=True)
    return out


class _NoNetwork:
    """What fastctl's HTTP layer reads of an ``ApiClient``'s REST client, for a client whose
    requests never leave the process: no proxy, no TLS server name, no session."""

    proxy = None
    proxy_headers = None
    server_hostname = None
    pool_manager = None

    async def close(self) -> None:
        """Nothing to close."""


def _in_process_client(configuration: Any) -> ApiClient:
    """An ``ApiClient`` of a fake cluster: the one kubernetes_asyncio makes, less its REST
    client's TLS context and connection pool. Those are never used (fastctl's HTTP layer
    sends a fake host's requests to the fake), and building the TLS context loads the
    system's CA bundle: about 20 ms for every client, a fifth of a test's time for 100
    Widgets on the fake."""
    from kubernetes_asyncio.client import ApiClient

    client: ApiClient = ApiClient.__new__(ApiClient)
    client.configuration = configuration
    client.pool_threads = 1
    client.rest_client = _NoNetwork()  # type: ignore[assignment]
    client.default_headers = {}
    client.cookie = None  # type: ignore[assignment]
    client.user_agent = "OpenAPI-Generator/33.3.0+snapshot/python"
    client.client_side_validation = configuration.client_side_validation
    return client


class FakeCluster:
    """An in-memory API server, and clients that talk to it (see the module docstring).

    ``FakeCluster(Widget)`` installs the CRD of each model (or CRD object) given, as an
    operator's install step would: its objects are then checked against the generated
    schema (unknown fields pruned, defaults filled in, 422 on an invalid object).

    `webhooks` (a module's ``WEBHOOKS``, a `fastctl.webhook.Webhooks`; more with
    `add_webhooks`) are the admission webhooks the server calls, in process, on the writes
    their rules name, as a real one calls them over HTTPS (mutating first, then
    validating; a refusal is the request's error); the operator's own writes pass through
    them too. Writes made here (`create`, `update`, ...) are not sent to them, as a write
    to etcd is not: write through a `client` to see them answer.

    `garbage_collection` deletes the dependents of a deleted owner (its
    ``ownerReferences``), as a cluster's controller-manager does; `ControlPlane` runs no
    controller-manager, so pass False for the same behaviour as there. `streaming` False
    makes it an older server that refuses ``sendInitialEvents`` (lists are then paginated,
    `page_size` objects a page at most).
    """

    def __init__(
        self,
        *crds: type[CustomResource] | Mapping[str, Any],
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
        garbage_collection: bool = True,
        streaming: bool = True,
        page_size: int = 500,
        webhooks: Webhooks | None = None,
    ) -> None:
        self.server = FakeApiServer(
            namespaces=namespaces,
            garbage_collection=garbage_collection,
            streaming=streaming,
            page_size=page_size,
        )
        self.host = f"http://fake-{next(_HOSTS)}.cluster.invalid"
        SESSIONS[self.host] = _Session(self.server)
        self._hosts = [self.host]
        self._clients: list[ApiClient] = []
        self.install(*crds)
        if webhooks is not None:
            self.add_webhooks(webhooks)

    def add_webhooks(self, webhooks: Webhooks) -> None:
        """Call the admission webhooks of `webhooks` (a `fastctl.webhook.Webhooks`) too,
        after those given before, and its converters on requests at a version other than
        the storage one (`fastctl.testing.fake._conversion`)."""
        self.server.admission.add(webhooks)
        self.server.conversion.add(webhooks)

    # -- clients -----------------------------------------------------------------------

    def client(self, user: str | None = None, groups: tuple[str, ...] = ()) -> ApiClient:
        """A new client of this cluster (call it within the event loop; `close` closes
        every client made here). Its requests come from the admin of `ControlPlane`'s
        kubeconfig (``fastctl-admin``, in ``system:masters``), or from `user` in `groups`
        (with ``system:authenticated``): who the admission webhooks see asking. The fake
        authorizes every request all the same."""
        from kubernetes_asyncio.client import Configuration

        host = self.host
        if user is not None:
            host = self.host.replace(".cluster.invalid", f"-u{len(self._hosts)}.cluster.invalid")
            info = {"username": user, "groups": [*groups, "system:authenticated"]}
            SESSIONS[host] = _Session(self.server, info)
            self._hosts.append(host)
        client = _in_process_client(Configuration(host=host))
        self._clients.append(client)
        return client

    async def close(self) -> None:
        """Close the clients made here and stop serving (open watches end)."""
        clients, self._clients = self._clients, []
        for client in clients:
            await client.close()
        self.forget()

    def forget(self) -> None:
        """Stop serving (open watches end, requests go nowhere), without closing clients:
        for a caller outside the event loop the clients ran on."""
        self.server.cut_streams()
        for host in self._hosts:
            SESSIONS.pop(host, None)

    async def __aenter__(self) -> FakeCluster:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- state, without a request -------------------------------------------------------

    def install(self, *crds: type[CustomResource] | Mapping[str, Any]) -> None:
        """Create (or replace) CRDs: objects, or `CustomResource` models (their CRD)."""
        kind = self._kind("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        for crd in crds:
            doc = dict(crd) if isinstance(crd, Mapping) else crd.crd()
            name = doc["metadata"]["name"]
            existing = self.get(kind.api_version, kind.kind, name)
            try:
                if existing is None:
                    self.server.create(kind, None, doc, "fake-cluster")
                else:
                    version = existing["metadata"]["resourceVersion"]
                    body = {**doc, "metadata": {**doc["metadata"], "resourceVersion": version}}
                    self.server.update(kind, None, name, body, None, "fake-cluster")
            except Fail as exc:
                raise FakeClusterError(exc.code, exc.reason, exc.message) from None

    def _kind(self, api_version: str, kind: str) -> Kind:
        found = self.server.kind_of(api_version, kind)
        if found is None:
            raise FakeClusterError(
                404, "NotFound", f"no kind {kind} in {api_version} (is its CRD installed?)"
            )
        return found

    def _call(self, fn: Any) -> Any:
        try:
            return fn()
        except Fail as exc:
            raise FakeClusterError(exc.code, exc.reason, exc.message) from None

    def create(self, obj: Any, *, field_manager: str = "test") -> dict[str, Any]:
        """Create an object at once, as another writer than the operator would (no
        request is recorded). A dict, or an instance of a `CustomResource` model."""
        doc = _ref(obj)
        kind = self._kind(doc.get("apiVersion", ""), doc.get("kind", ""))
        ns = (doc.get("metadata") or {}).get("namespace")
        if kind.namespaced and not ns:
            ns = "default"
        return clone(self._call(lambda: self.server.create(kind, ns, doc, field_manager)))

    def update(self, obj: Any, *, field_manager: str = "test") -> dict[str, Any]:
        """Replace an object at once (its ``resourceVersion``, when given, must be the
        current one); a change of its ``status`` goes through `update_status`."""
        doc = _ref(obj)
        kind, ns, name = self._where(doc)
        return clone(
            self._call(lambda: self.server.update(kind, ns, name, doc, None, field_manager))
        )

    def update_status(self, obj: Any, *, field_manager: str = "test") -> dict[str, Any]:
        """Replace an object's status at once (the status subresource)."""
        doc = _ref(obj)
        kind, ns, name = self._where(doc)
        sub = "status" if kind.status else None
        return clone(
            self._call(lambda: self.server.update(kind, ns, name, doc, sub, field_manager))
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete an object at once (marked for deletion while it has finalizers)."""
        k = self._kind(api_version, kind)
        ns = (namespace or "default") if k.namespaced else None
        self._call(lambda: self.server.delete(k, ns, name, {}))

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The object as stored now (a copy), or None."""
        k = self.server.kind_of(api_version, kind)
        if k is None:
            return None
        ns = (namespace or "default") if k.namespaced else ""
        found = self.server.objects.get((k.key, f"{ns}/{name}"))
        return clone(found) if found is not None else None

    def objects(
        self, api_version: str, kind: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects of a kind (in one namespace, or all), by namespace and name."""
        k = self.server.kind_of(api_version, kind)
        if k is None:
            return []
        return [
            clone(obj)
            for (res, key), obj in sorted(self.server.objects.items())
            if res == k.key and (namespace is None or key.split("/")[0] == namespace)
        ]

    def _where(self, doc: Mapping[str, Any]) -> tuple[Kind, str | None, str]:
        kind = self._kind(doc.get("apiVersion", ""), doc.get("kind", ""))
        meta = doc.get("metadata") or {}
        ns = (meta.get("namespace") or "default") if kind.namespaced else None
        return kind, ns, str(meta.get("name") or "")

    # -- what happened -----------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request answered so far, in order."""
        return self.server.requests

    def requests_of(
        self, verb: str | None = None, resource: str | None = None, *, name: str | None = None
    ) -> list[RecordedRequest]:
        """The requests of one verb (``patch``, ``apply``, ``create``, ...) and/or one
        resource (its plural), and/or for one object."""
        return [
            r
            for r in self.server.requests
            if verb in (None, r.verb) and resource in (None, r.resource) and name in (None, r.name)
        ]

    # -- faults ------------------------------------------------------------------------

    def fail(
        self,
        status: int = 429,
        *,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
        namespace: str | None = None,
        times: int = 1,
        retry_after: int | None = None,
        reason: str | None = None,
        message: str = "injected by the fake cluster",
    ) -> None:
        """Answer the next `times` matching requests with `status` (429: Too Many
        Requests, with `retry_after` seconds; 409: a conflict; 500, 503, ...) instead."""
        reasons = {
            409: "Conflict",
            429: "TooManyRequests",
            500: "InternalError",
            503: "ServiceUnavailable",
            404: "NotFound",
            403: "Forbidden",
        }
        self.server.faults.append(
            Fault(
                status,
                reason or reasons.get(status, "Failure"),
                message,
                times,
                verb,
                resource,
                name,
                namespace,
                retry_after,
            )
        )

    def conflict(
        self,
        *,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
        times: int = 1,
    ) -> None:
        """The next matching writes get 409 Conflict, as if another writer had won."""
        self.fail(
            409,
            verb=verb,
            resource=resource,
            name=name,
            times=times,
            message="the object has been modified; please apply your changes to the latest "
            "version and try again",
        )

    def outage(self, seconds: float | None = None) -> None:
        """The server goes down: open watches break and every request fails (a refused
        connection) for `seconds` of the loop's time, or until `recover`."""
        if seconds is None:
            self.server.down = True
        else:
            self.server.down_until = max(self.server.down_until, monotonic() + seconds)
        self.server.cut_streams()

    def recover(self) -> None:
        """End an outage."""
        self.server.down = False
        self.server.down_until = 0.0

    def expire_watches(self, resource: str | None = None) -> None:
        """Compact the history (of one resource, by plural, or all) and break its
        watches: each watch resumes from a version too old and gets 410 Gone, and the
        watcher relists."""
        self.server.compact(resource)
        self.server.cut_streams(None if resource is None else self._key(resource))

    def _key(self, plural: str) -> str:
        for kind in self.server.kinds.values():
            if plural in (kind.plural, kind.key):
                return kind.key
        return plural

    def slow_writes(self, seconds: float) -> None:
        """Writes take `seconds` of the loop's time before they are applied (0: none)."""
        self.server.write_latency = seconds
