"""The watcher: one resource's objects as a stream of events that survives everything.

``watcher(client, resource)`` lists the objects and then watches them, forever, and turns
every failure the API server or the network can produce into a retry:

- **Initial list.** The streaming list (``sendInitialEvents=true``,
  ``resourceVersionMatch=NotOlderThan``), which the server ends with a bookmark annotated
  ``k8s.io/initial-events-end``, when the server supports it; otherwise (a 4xx for those
  parameters) a paginated list (``limit``/``continue``). Either way it is framed as
  `INIT`, one `INIT_APPLY` per object, `INIT_DONE`. A list that breaks half-way starts over
  with a new `INIT`, so a consumer can drop what it buffered.
- **Watch.** From the list's resourceVersion, with ``allowWatchBookmarks`` (so quiet
  streams still advance the resourceVersion), a server-side ``timeoutSeconds`` (the server
  ends the stream cleanly and we resume at once) and a client read timeout (no byte for
  `read_timeout` seconds means the connection is dead: reconnect; a dead TCP connection
  can otherwise hang forever).
- **410 Gone** (the resourceVersion was compacted away, or the server restarted with a
  fresh cache): list again. The watcher itself does not remember objects; the `Store`
  compares the new list with what it holds and reports objects that vanished meanwhile as
  `DELETE` events (see `fastctl.kube.reflector`), which is where client-go does it too.
- **Connection errors, 5xx, 429** and anything else transient: back off (exponential, with
  0.8-1.2 jitter, capped at 30 s; a 429's ``retryAfterSeconds`` is honoured) and resume
  from the last resourceVersion, so nothing is lost and nothing is replayed twice.
- **A malformed line** is logged and the watch restarts from the last good
  resourceVersion: the server replays everything after it, so no event is lost.
- **403 Forbidden** is logged as an RBAC problem naming the verb and resource, passed to
  `on_error`, and retried with backoff (RBAC can be fixed while the controller runs).
- **400/422** (a malformed selector, say) can never succeed: raised as `ApiError`; so
  can a server URL no request can use (aiohttp's ``InvalidURL``: no host, a port past
  65535), raised as `KubeconfigError` naming it.
- **Metadata only** (`WatchConfig.metadata_only`): lists ask for
  ``PartialObjectMetadataList`` and watches for ``PartialObjectMetadata`` (the ``Accept``
  header), so the server sends each object's ``metadata`` alone; the objects get the
  resource's ``apiVersion``/``kind`` back, so they look like the full ones without their
  body. A server that cannot serve a resource so (a 406, or full objects where metadata
  was asked for, as an aggregated API may answer) raises `MetadataOnlyUnsupported`, naming
  the resource: falling back to full objects would silently cost the memory the caller
  asked to save.
- **Sharded** (``shard_selector``): lists and watches carry ``shardSelector`` (Kubernetes
  v1.36's ``ShardedListAndWatch``) and list page by page, since a list response says
  whether the server applied it (``metadata.shardInfo``). When it did not (the feature is
  off, or an older server ignores the parameter), `shard_filter` keeps on the client only
  the objects the selector would have returned, so both paths give the same objects.
- **Protobuf** (`WatchConfig.protobuf`, on by default): the watches of v1 ConfigMaps and
  Secrets ask for protobuf, which the API server encodes faster than JSON (a streaming
  list of 100,000 ConfigMaps arrives in half the time); the extension turns each frame
  into the JSON the server would have sent (`fastctl._core.decode_proto_frames`), so
  nothing after the reader changes. A frame it cannot read (a field a newer server adds)
  is logged and the watcher watches that resource as JSON from then on.

Frames and list pages are decoded once, in the extension (`fastctl._core.decode_lines`,
``decode_list``), from the raw response bytes, never through kubernetes-asyncio's models:
the type, the object's JSON (without managedFields when stripped) and the metadata fastctl
reads, checked there. A watch stream is read as it arrives, every complete line of what
arrived decoded in one call, not a read and a call per line: on the lean transport, each
read off the socket goes to the extension as it is, chunked coding and all
(`fastctl.kube._watch_stream`); on aiohttp, what its reader buffered (`fastctl.kube._lines`). List
items get their ``apiVersion``/``kind`` filled in (the API server omits them inside
lists), so every object looks the same whichever path it came by. An event parses its
object into a dict only when something reads ``event.obj`` (a transform, secret
redaction, an event filter, a mapper of ``watches``); the store keeps the bytes.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl._clock import monotonic
from fastctl._core import Item, decode_object, decode_proto_object
from fastctl._options import pick
from fastctl._redact import is_sensitive, remember
from fastctl.errors import ApiError, WatchError, WatchStreamError
from fastctl.kube._http import Timeout, error_from_response, request, retry_after_header
from fastctl.kube._kubeconfig_check import invalid_url_error
from fastctl.kube._lines import FrameReader
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.kube._retry import Backoff, resolve_patiently
from fastctl.kube._transforms import Transform, apply_transform
from fastctl.kube._transport import LeanResponse
from fastctl.kube._watch_events import (
    EventKind,
    ListFrame,
    ObjectEvent,
    ObjectKind,
    WatchEvent,
)
from fastctl.kube._watch_stream import LeanStream
from fastctl.kube._wire import Identity, decode_list_page, decode_watch_line, item_of
from fastctl.log import RedactingFilter

__all__ = [
    "Backoff",
    "EventKind",
    "ListFrame",
    "MetadataOnlyUnsupported",
    "ObjectEvent",
    "ObjectKind",
    "WatchConfig",
    "WatchEvent",
    "WatchStreamError",
    "watcher",
]

log = logging.getLogger("fastctl.watcher")
log.addFilter(RedactingFilter())  # its records name objects and errors

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_MAX_LINE = 64 * 1024 * 1024  # far above etcd's 1.5 MiB object limit, even as JSON
_HELD_OPEN = 1.0
"""Seconds after which a watch's stream that sent nothing but keep-alive blank lines, or
nothing at all, counts as a healthy one (it resets the backoff)."""
_FATAL_STATUS = frozenset({400, 405, 406, 415, 422})
_META = ";g=meta.k8s.io;v=v1,application/json"
METADATA_LIST_ACCEPT = f"application/json;as=PartialObjectMetadataList{_META}"
"""The ``Accept`` of a metadata-only list: a ``PartialObjectMetadataList``, else JSON."""
METADATA_WATCH_ACCEPT = f"application/json;as=PartialObjectMetadata{_META}"
"""The ``Accept`` of a metadata-only watch: each event's object a ``PartialObjectMetadata``
(the list type here gets a 406, or an empty stream, from kube-apiserver)."""
PROTOBUF = "application/vnd.kubernetes.protobuf"
PROTOBUF_WATCH_ACCEPT = f"{PROTOBUF}, application/json"
"""The ``Accept`` of a protobuf watch (JSON if the server cannot encode the kind so)."""
PROTOBUF_KINDS = frozenset({("v1", "ConfigMap"), ("v1", "Secret")})
"""The kinds watched as protobuf: the built-in kinds operators cache cluster-wide, whose
messages the extension decodes (custom resources are served only as JSON anyway)."""


class MetadataOnlyUnsupported(WatchError):
    """A metadata-only watch of a resource the server does not serve as metadata only."""


_INIT = ListFrame(EventKind.INIT)
_INIT_DONE = ListFrame(EventKind.INIT_DONE)


class _Gone(Exception):
    """410: the resourceVersion is too old; list again."""


class _StreamingListUnsupported(Exception):
    """The server rejected or ignored ``sendInitialEvents``; use a paginated list."""


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """How a `watcher` lists and watches: every option once, with its default.

    A value (frozen, comparable), so one config can serve many watchers and controllers
    (``watcher(..., config=)``, ``Controller(..., watch_config=)``). Invalid values raise
    `ValueError` here, at construction, not on the first event.
    """

    label_selector: str | None = None
    """Only objects whose labels match (``app=web,tier!=cache``); ``None``: all."""
    field_selector: str | None = None
    """Only objects whose fields match (``metadata.name=x``); ``None``: all."""
    page_size: int = 500
    """The ``limit`` of each page of a paginated list; 0: one unpaginated list."""
    timeout_seconds: int = 290
    """The server-side watch timeout: the server ends the stream cleanly after it, and the
    watcher resumes at once from the last resourceVersion."""
    read_timeout: float = 90.0
    """How long the connection may stay silent before it is presumed dead and reopened.
    The server sends a bookmark every minute or so, so 90 s never fires on a healthy
    stream, while a dead TCP connection (which can otherwise hang forever) is noticed."""
    streaming_list: bool | None = None
    """The streaming initial list (``sendInitialEvents``): True forces it (an error if the
    server refuses), False forbids it (paginated list), ``None`` tries it and falls back."""
    strip_managed_fields: bool | None = None
    """Drop ``metadata.managedFields`` from every object, which often halves a cache's
    memory (reconcilers rarely read it, server-side apply does not need it). ``None``:
    the user's default, which a `Controller` (and `owns`/`watches`) reads as True and a
    bare `watcher` as False; say True or False to decide."""
    metadata_only: bool = False
    """Ask for ``PartialObjectMetadata``: every object is its ``apiVersion``, ``kind`` and
    ``metadata`` alone (names, labels, annotations, owners, versions), no body."""
    transform: Transform | None = None
    """What to keep of each object, applied to every object (listed, watched, deleted)
    before it is yielded, after `strip_managed_fields` (the built-ins:
    `drop_managed_fields`, `drop_last_applied`, `drop_annotations`, `keep_paths`,
    `chain_transforms`). The object's identity (apiVersion, kind, name, namespace, uid,
    resourceVersion) is put back after it."""
    protobuf: bool = True
    """Watch v1 ConfigMaps and Secrets as protobuf, which the API server encodes faster
    than JSON; the objects are the same JSON either way. False: always JSON. Other kinds
    are always JSON (custom resources have no protobuf encoding)."""

    def __post_init__(self) -> None:
        if self.page_size < 0:
            raise ValueError(f"page_size must be >= 0, got {self.page_size}")
        if self.timeout_seconds <= 0 or self.read_timeout <= 0:
            raise ValueError("timeout_seconds and read_timeout must be > 0")
        if self.transform is not None and not callable(self.transform):
            raise TypeError(f"transform must be callable, got {type(self.transform).__name__}")

    def with_default_stripping(self) -> WatchConfig:
        """This config with an unsaid `strip_managed_fields` read as True (a controller's
        caches drop managedFields unless told otherwise)."""
        if self.strip_managed_fields is None:
            return replace(self, strip_managed_fields=True)
        return self


async def watcher(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    config: WatchConfig | None = None,
    backoff: Backoff | None = None,
    on_error: Callable[[BaseException], None] | None = None,
    shard_selector: str | None = None,
    shard_filter: Callable[[dict[str, Any]], bool] | None = None,
) -> AsyncIterator[WatchEvent]:
    """Events of `resource` (in `namespace`, or all namespaces), forever.

    `config` states every option of the list and the watch once (`WatchConfig`, see its
    fields); its common one, `label_selector`, is also a keyword: pass it or `config`, not
    both. `backoff` is the retry
    state (a fresh `Backoff` by default). `on_error` hears every error the watcher retries
    (for metrics, health, tests). A `Resource` is resolved first with `resolve_patiently`:
    discovery is retried while the API server is unreachable; a resource it still does not
    serve after a few lookups raises `ResourceNotFound` before any event.
    `shard_selector` (not empty: an empty selector would mean every object) asks the server
    for one shard; `shard_filter` is the same choice made on the client, applied only when
    the server did not shard the list.
    """
    options = pick(
        config,
        WatchConfig(label_selector=label_selector),
        _DEFAULT_CONFIG,
    )
    if shard_selector == "":
        raise ValueError("shard_selector must not be empty (it would select every object)")
    backoff = backoff or Backoff()
    resolved = (
        resource
        if isinstance(resource, ResolvedResource)
        else await resolve_patiently(client, resource, backoff=backoff, on_error=on_error)
    )
    one = _Watcher(client, resolved, namespace, options, backoff, on_error)
    if shard_selector is not None:
        one.selectors["shardSelector"] = shard_selector
        one.state.without_streaming()  # only a list response says whether it was sharded
        one.shard_filter = shard_filter
    async for event in one.run():
        yield event


_DEFAULT_CONFIG = WatchConfig()


class _Listing(enum.Enum):
    """How a watcher lists, when it has no resourceVersion to watch from."""

    STREAMING = "streaming"
    """A watch with ``sendInitialEvents``; a server that refuses or ignores it moves the
    watcher to its `fallback` for good."""
    STREAMING_ONLY = "streaming only"
    """The same, forced (``streaming_list=True``): a refusal is an error, not a fallback."""
    PAGES = "pages"
    """``limit``/``continue`` pages of `WatchConfig.page_size`."""
    WHOLE = "whole"
    """One unpaginated response (``page_size=0``)."""
    WHOLE_ONCE = "whole once"
    """One unpaginated response, then `PAGES` again: a continue token expired (the list took
    longer than etcd keeps history), so the next list is made in one piece."""


@dataclass(slots=True)
class _State:
    """All a watcher remembers between requests, in one place, changed only by the
    transitions below (`listed`, `advanced`, `gone`, `streaming_refused`,
    `continue_expired`, `without_streaming`; `filtering` by the first page of each list).

    - `rv`: where the next watch starts; ``None``: a (re)list comes first;
    - `listing`: how that (re)list is made;
    - `fallback`: the listing that replaces a refused streaming list (`PAGES`, or `WHOLE`
      with ``page_size=0``);
    - `filtering`: the server ignored ``shardSelector``: the watcher keeps, on the client,
      only the objects of its shard.
    """

    listing: _Listing
    fallback: _Listing
    rv: str | None = None
    filtering: bool = False

    @classmethod
    def start(cls, config: WatchConfig) -> _State:
        fallback = _Listing.PAGES if config.page_size > 0 else _Listing.WHOLE
        if config.streaming_list is None:
            return cls(_Listing.STREAMING, fallback)
        return cls(_Listing.STREAMING_ONLY if config.streaming_list else fallback, fallback)

    @property
    def needs_list(self) -> bool:
        """No position to watch from: the next request lists (a streaming list is a watch
        whose start is the list, so this stays True until its end marker)."""
        return self.rv is None

    @property
    def streams(self) -> bool:
        """Whether the next (re)list is a streaming one."""
        return self.listing in (_Listing.STREAMING, _Listing.STREAMING_ONLY)

    def verb(self) -> str:
        """What the next request does, for the logs."""
        if not self.needs_list:
            return "watch"
        return "list+watch (streaming list)" if self.streams else "list"

    def listed(self, rv: str) -> None:
        """A (re)list is complete at `rv`: watch from there."""
        self.rv = rv
        if self.listing is _Listing.WHOLE_ONCE:
            self.listing = _Listing.PAGES

    def advanced(self, rv: str) -> None:
        """The watch saw `rv` (an event or a bookmark): a reconnection resumes there."""
        self.rv = rv

    def gone(self) -> None:
        """The resourceVersion is gone (410): list again."""
        self.rv = None

    def streaming_refused(self) -> bool:
        """The server refused or ignored the streaming list: use the fallback from now on.
        False (and no change) when the streaming list was forced."""
        if self.listing is _Listing.STREAMING_ONLY:
            return False
        self.listing = self.fallback
        return True

    def continue_expired(self) -> None:
        """A continue token expired: the next list is made in one piece."""
        self.listing = _Listing.WHOLE_ONCE

    def without_streaming(self) -> None:
        """List with the fallback from the start (a sharded watch: only a list response
        says whether the server applied ``shardSelector``)."""
        self.listing = self.fallback


class _Watcher:
    """One watcher: what it watches and how (fixed), and its `state` (`_State`)."""

    def __init__(
        self,
        client: ApiClient,
        resource: ResolvedResource,
        namespace: str | None,
        config: WatchConfig,
        backoff: Backoff,
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.config = config
        self.path = resource.collection_path(namespace)
        self.selectors: dict[str, str | int | bool | None] = {
            "labelSelector": config.label_selector or None,
            "fieldSelector": config.field_selector or None,
        }
        self.state = _State.start(config)
        self.backoff = backoff
        self.on_error = on_error
        self.sensitive = is_sensitive(resource.kind)
        """Objects of this kind hold secrets: remember their values (`fastctl._redact`) and
        never log a line of the stream."""
        self.shard_filter: Callable[[dict[str, Any]], bool] | None = None
        self.protobuf = (
            config.protobuf
            and not config.metadata_only
            and (resource.api_version, resource.kind) in PROTOBUF_KINDS
        )
        """Watches ask for protobuf (until a frame cannot be read: then JSON)."""
        self.plain = config.transform is None and not self.sensitive and not config.metadata_only
        """Objects go as decoded: no transform, no secrets to remember, no metadata-only
        check (`_event`'s fast path)."""

    # -- the loop ---------------------------------------------------------------------

    async def run(self) -> AsyncIterator[WatchEvent]:
        while True:
            try:
                state = self.state
                if state.needs_list and state.streams:
                    try:
                        async for event in self._watch():
                            yield event
                    except _StreamingListUnsupported as exc:
                        if not state.streaming_refused():  # forced: no silent fallback
                            raise WatchError(f"{self}: streaming list failed: {exc}") from None
                        log.info("%s: streaming list unsupported (%s); paginating", self, exc)
                elif state.needs_list:
                    async for event in self._list():
                        yield event
                else:
                    async for event in self._watch():
                        yield event
            except _Gone as exc:
                log.info("%s: %s; listing again", self, exc)
                self.state.gone()
            except ApiError as exc:
                if exc.status == 406 and self.config.metadata_only:
                    raise self._no_metadata(f"406 Not Acceptable: {exc.message}") from None
                if exc.status in _FATAL_STATUS:
                    raise
                await self._retry(exc, retry_after=exc.retry_after)
            except aiohttp.InvalidURL as exc:  # no wait makes the server URL usable
                raise invalid_url_error(self.client, exc) from None
            except (aiohttp.ClientError, TimeoutError, OSError, WatchStreamError) as exc:
                await self._retry(exc)

    async def _retry(self, exc: BaseException, *, retry_after: float | None = None) -> None:
        delay = max(self.backoff.next_delay(), retry_after or 0.0)
        verb = self.state.verb()
        if isinstance(exc, ApiError) and exc.status == 403:
            log.error(
                "%s: forbidden to %s %s (check the controller's RBAC): %s; retrying in %.1f s",
                self,
                verb,
                self._scope(),
                exc.message,
                delay,
            )
        elif isinstance(exc, ApiError):
            log.warning("%s: %s failed: %s; retrying in %.1f s", self, verb, exc, delay)
        else:
            log.warning(
                "%s: %s failed: %s: %s; retrying in %.1f s",
                self,
                verb,
                type(exc).__name__,
                exc,
                delay,
            )
        if self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:
                log.exception("%s: on_error callback failed", self)
        await asyncio.sleep(delay)

    def _scope(self) -> str:
        where = f"in namespace {self.namespace!r}" if self.namespace else "in all namespaces"
        return f"{self.resource} {where}" if self.resource.namespaced else str(self.resource)

    def __str__(self) -> str:
        return f"watcher[{self.resource}{'/' + self.namespace if self.namespace else ''}]"

    def _no_metadata(self, reason: str) -> MetadataOnlyUnsupported:
        return MetadataOnlyUnsupported(
            f"{self}: the API server does not serve {self.resource} as metadata only "
            f"(PartialObjectMetadata): {reason}; watch it with full objects instead"
        )

    def _check_metadata(self, item: Item, expected: str) -> None:
        """A metadata-only object must be what was asked for (it was given the resource's
        ``apiVersion``/``kind`` while decoded: mappers, refs and logs see the real kind)."""
        if item.kind != expected or item.api_version != "meta.k8s.io/v1":
            raise self._no_metadata(f"it answered with a {item.kind!r}, not {expected}")

    def _identity(self, *, listed: bool) -> tuple[Identity, bool]:
        """What identity the decoder gives each object, and whether it writes over the
        object's own: the resource's, over a metadata-only object's; filled into a list's
        items (the API server omits them inside lists)."""
        resource = self.resource
        if self.config.metadata_only:
            return (resource.api_version, resource.kind), True
        if listed:
            return (resource.api_version, resource.kind), False
        return None, False

    def _object_event(self, kind: ObjectKind, item: Item) -> ObjectEvent:
        """The event of one decoded object: secrets remembered (`fastctl._redact`), the
        transform applied (its identity put back, the result decoded again); without a
        transform the object is never parsed here."""
        transform = self.config.transform
        if transform is None and not self.sensitive:
            return ObjectEvent._of_item(kind, item)
        obj = orjson.loads(item.json)
        if self.sensitive:
            remember(obj)
        if transform is not None:
            obj = apply_transform(transform, obj)
            try:
                item = item_of(obj)
            except ValueError as exc:
                raise TypeError(f"{self}: the transform's result is refused: {exc}") from None
        event = ObjectEvent._of_item(kind, item)
        object.__setattr__(event, "_obj", obj)
        return event

    async def _get(
        self, query: dict[str, str | int | bool | None]
    ) -> aiohttp.ClientResponse | LeanResponse | LeanStream:
        """GET the collection; no total timeout (lists can be long, watches are), but a
        read timeout so a silent connection is noticed. Metadata only, a list and a watch
        ask for different types (the list type, or the type of the events' objects)."""
        timeout = Timeout(total=None, sock_connect=30, sock_read=self.config.read_timeout)
        accept = None
        if self.config.metadata_only:
            accept = METADATA_WATCH_ACCEPT if query.get("watch") else METADATA_LIST_ACCEPT
        elif self.protobuf and query.get("watch"):
            accept = PROTOBUF_WATCH_ACCEPT
        return await request(
            self.client, "GET", self.path, query=query, client_timeout=timeout, accept=accept,
            stream=bool(query.get("watch")),
        )  # fmt: skip

    # -- list -------------------------------------------------------------------------

    async def _list(self) -> AsyncIterator[WatchEvent]:
        """A paginated list, framed INIT ... INIT_DONE; sets `rv` when complete. INIT comes
        with the first page, so a list that is refused (403, 5xx) emits nothing."""
        cont: str | None = None
        while True:
            query = {
                **self.selectors,
                "limit": self.config.page_size if self.state.listing is _Listing.PAGES else None,
                "continue": cont,
            }
            async with await self._get(query) as resp:
                assert not isinstance(resp, LeanStream), "a list is not a stream"
                data = await resp.read()
                if resp.status != 200:
                    err = error_from_response(
                        resp.status,
                        data,
                        method="GET",
                        path=self.path,
                        retry_after=retry_after_header(resp),
                    )
                    if err.status == 410 and cont is not None:
                        # The continue token expired (the list took longer than etcd keeps
                        # history): start over, in one piece so it cannot expire again.
                        self.state.continue_expired()
                        raise _Gone(f"list continue token expired ({err.message})")
                    raise err
            identity, replace = self._identity(listed=True)
            first = cont is None
            items, list_kind, next_cont, rv, shard_info = decode_list_page(
                data,
                strip_managed_fields=bool(self.config.strip_managed_fields),
                identity=identity,
                replace=replace,
            )
            if self.config.metadata_only and list_kind != "PartialObjectMetadataList":
                raise self._no_metadata(f"it answered with a {list_kind!r} list")
            if first:
                self._check_sharded(shard_info)
                yield _INIT
            keep = self.shard_filter if self.state.filtering else None
            for item in items:
                if self.config.metadata_only:
                    self._check_metadata(item, "PartialObjectMetadata")
                event = self._object_event(EventKind.INIT_APPLY, item)
                if keep is not None and not keep(event.obj):
                    continue
                yield event
            cont = next_cont or None
            if cont is None:
                if not rv:  # pragma: no cover - every real server sets it
                    raise WatchStreamError("list response without metadata.resourceVersion")
                self.state.listed(rv)
                self.backoff.reset()
                yield _INIT_DONE
                return

    def _check_sharded(self, shard_info: bool) -> None:
        """From a list's first page: did the server apply ``shardSelector`` (the page's
        metadata has ``shardInfo``)?"""
        if "shardSelector" not in self.selectors:
            return
        filtering = not shard_info and self.shard_filter is not None
        if filtering and not self.state.filtering:
            log.info("%s: the server does not shard lists; filtering on the client", self)
        self.state.filtering = filtering

    # -- watch ------------------------------------------------------------------------

    async def _watch(self) -> AsyncIterator[WatchEvent]:
        """One watch connection: from `_State.rv`, or, while the state needs a list, the
        streaming list at its start (until its end marker sets the position).

        Returns when the server ends the stream (its timeout); raises to be retried.
        """
        state = self.state
        query: dict[str, str | int | bool | None] = {
            **self.selectors,
            "watch": True,
            "allowWatchBookmarks": True,
            "timeoutSeconds": self.config.timeout_seconds,
        }
        if state.needs_list:
            query["sendInitialEvents"] = True
            query["resourceVersionMatch"] = "NotOlderThan"
        else:
            query["resourceVersion"] = state.rv
        started = monotonic()
        async with await self._get(query) as resp:
            # An answer made up without a content type (a test's) is JSON.
            protobuf = getattr(resp, "content_type", None) == PROTOBUF
            if resp.status != 200:
                assert not isinstance(resp, LeanStream), "only a 200 is streamed"
                err = error_from_response(
                    resp.status,
                    _status_json(await resp.read()) if protobuf else await resp.read(),
                    method="GET",
                    path=self.path,
                    retry_after=retry_after_header(resp),
                )
                if err.status == 410:
                    raise _Gone(f"resourceVersion {state.rv} is gone ({err.message})")
                if state.needs_list and 400 <= err.status < 500 and err.status not in (403, 429):
                    raise _StreamingListUnsupported(str(err))
                raise err
            if state.needs_list:
                yield _INIT
            proven = False  # the stream proved live: the backoff was reset
            identity, replace = self._identity(listed=False)
            strip = bool(self.config.strip_managed_fields)
            reader: FrameReader | LeanStream
            if isinstance(resp, LeanStream):
                reader = resp.decode(
                    strip=strip, identity=identity, replace=replace, max_line=_MAX_LINE,
                    protobuf=protobuf,
                )  # fmt: skip
            else:
                assert not isinstance(resp, LeanResponse), "a 200 on the lean transport streams"
                reader = FrameReader(
                    resp.content, strip=strip, identity=identity, replace=replace,
                    max_line=_MAX_LINE, protobuf=protobuf,
                )  # fmt: skip
            while True:
                try:
                    batch = await reader.read()
                except TimeoutError:
                    # No byte, not even a bookmark, for read_timeout seconds: presume the
                    # connection dead and reconnect at once (no backoff: nothing failed).
                    log.info("%s: no data for %.0f s; reconnecting", self, self.config.read_timeout)
                    if state.needs_list:
                        raise
                    return
                if batch is None:
                    break
                if (
                    not proven
                    and not state.needs_list
                    and (batch.frames or monotonic() - started >= _HELD_OPEN)
                ):
                    # The success that resets the backoff: a stream that delivers a frame
                    # (an event, a bookmark), or whose keep-alive blank lines (an empty
                    # batch) come after it was held open a while. Not one that sends
                    # blank lines and ends at once, nor one that ends empty (see below).
                    self.backoff.reset()
                    proven = True
                for etype, payload in batch.frames:
                    event = self._event(etype, payload)
                    if event is None:
                        continue
                    if event.kind is EventKind.INIT_DONE:
                        self.backoff.reset()
                        proven = True
                    yield event
                if batch.error is not None:
                    line = batch.line
                    log.error(
                        "%s: %s: %s; resuming from resourceVersion %s",
                        self,
                        batch.error,
                        f"{len(line)} bytes" if self.sensitive else repr(line[:200]),
                        state.rv,
                    )
                    if protobuf:
                        log.warning("%s: watching as JSON from now on", self)
                        self.protobuf = False
                    raise WatchStreamError(batch.error)
        if state.needs_list:
            raise WatchStreamError("watch ended before the initial list was complete")
        if not proven and monotonic() - started < _HELD_OPEN:
            # An empty stream (or one of blank lines) that ends at once would otherwise be
            # a busy loop; and since it did not reset the backoff, a server (or proxy) that
            # keeps doing it is asked less and less often, as after any other failure.
            await asyncio.sleep(self.backoff.next_delay())
        elif not proven:
            self.backoff.reset()  # quiet but held open: a healthy watch of a quiet resource

    def _event(self, etype: str, payload: Item | bytes | dict[str, Any]) -> WatchEvent | None:
        """Turn one decoded watch frame into an event (or None), tracking the
        resourceVersion: the frames of a streaming list while the state needs a list,
        watch events after. (A frame's object already parsed, a dict, is decoded as the
        line would have been.)"""
        state = self.state
        if (
            (etype == "MODIFIED" or etype == "ADDED")
            and payload.__class__ is Item
            and state.rv is not None
            and self.plain
            and not state.filtering
        ):
            # The watch path of nearly every event (the rest below decides the same for
            # it): a decoded object, past the list, nothing to check or transform.
            rv = payload.resource_version
            if rv:
                state.advanced(rv)
            return ObjectEvent._of_item(EventKind.APPLY, payload)
        if isinstance(payload, dict):
            if etype in ("ERROR", "BOOKMARK"):  # a Status; a bookmark needs no name
                identity, replace = self._identity(listed=False)
                line = orjson.dumps({"type": etype, "object": payload})
                etype, payload = decode_watch_line(
                    line, strip_managed_fields=False, identity=identity, replace=replace
                )
            else:
                identity, replace = self._identity(listed=False)
                given = identity if identity is not None else (None, None)
                payload = decode_object(
                    orjson.dumps(payload),
                    bool(self.config.strip_managed_fields),
                    given[0],
                    given[1],
                    replace,
                    lenient=True,
                )
        if not isinstance(payload, Item):  # ERROR: a Status
            status = orjson.loads(payload)
            err = ApiError.from_status(status, method="WATCH", path=self.path)
            if err.status == 410:
                raise _Gone(f"resourceVersion {state.rv} is gone ({err.message})")
            raise err
        item = payload
        rv = item.resource_version
        if etype == "BOOKMARK":
            if state.needs_list:
                if not item.initial_events_end:
                    raise _StreamingListUnsupported("bookmark without initial-events-end")
                if not rv:
                    raise WatchStreamError("the initial-events-end bookmark has no resourceVersion")
                state.listed(rv)
                return _INIT_DONE
            if rv:
                state.advanced(rv)
            return None
        if self.config.metadata_only:
            self._check_metadata(item, "PartialObjectMetadata")
        if state.needs_list:
            if etype != "ADDED":
                raise _StreamingListUnsupported(f"{etype} event before initial-events-end")
            return self._object_event(EventKind.INIT_APPLY, item)
        if rv:
            state.advanced(rv)
        if etype in ("ADDED", "MODIFIED"):
            kind: ObjectKind = EventKind.APPLY
        elif etype == "DELETED":
            kind = EventKind.DELETE
        else:
            log.warning("%s: unknown watch event type %r ignored", self, etype)
            return None
        event = self._object_event(kind, item)
        if state.filtering and self.shard_filter is not None and not self.shard_filter(event.obj):
            return None
        return event


def _status_json(body: bytes) -> bytes:
    """A protobuf error body as the Status JSON it holds (as it is, if it holds none)."""
    try:
        return decode_proto_object(body)
    except ValueError:
        return body
