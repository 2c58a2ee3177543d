"""Listing objects: `list_objects`, exported as ``fastctl.kube.list``.

A reconcile should read the objects its controller watches from the cache
(``owns(..., cache=True)``); a list is for what no watch holds: a one-off lookup, a CLI, a
migration. It is paged, as client-go's pager does, so that a large collection never comes
back as one unbounded answer: ``limit`` objects a request (500 by default), following the
``continue`` token to the end unless asked for one page. Every page of one list is served
at the first page's resourceVersion, so the pages are one consistent snapshot. When the
token of a list followed to the end expires meanwhile (410 Gone, about five minutes after
the first page, on a slow reader or a large collection), the list starts over as one
unpaged request, as client-go's pager does (``FullListIfExpired``): a paged snapshot cannot
be resumed at a newer version, and a whole new answer is still one consistent snapshot. A
caller's own token (``continue_=``) or a single page (``all_pages=False``) that expires is an
`ApiError` with status 410: only the caller knows where it started. A page is asked again
after a 429, a 503 or a reset (`fastctl.kube._call_retry`).

The result is the API server's own List object (``items``, ``metadata.resourceVersion``,
``metadata.continue`` when more pages are left), with each item's ``apiVersion`` and
``kind`` filled in (list answers leave them out) and, for a kind with sensitive fields
(Secrets), their values remembered for scrubbing, as `fastctl.kube.get` does.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl._redact import is_sensitive, remember
from fastctl.errors import ApiError
from fastctl.kube._call_retry import Safety
from fastctl.kube._http import request_json
from fastctl.kube._objects import resolved
from fastctl.kube._resource import ResolvedResource, Resource

__all__ = ["PAGE_SIZE", "list_objects"]

PAGE_SIZE = 500
"""Objects per request by default: client-go's pager's page size."""


async def list_objects(
    client: ApiClient,
    resource: Resource | ResolvedResource,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    limit: int | None = PAGE_SIZE,
    continue_: str | None = None,
    all_pages: bool = True,
) -> dict[str, Any]:
    """List the objects of `resource` in `namespace` (every namespace when ``None``; a
    cluster-scoped resource takes none) that match `label_selector` (``"app=web,tier!=db"``) and
    `field_selector` (``"metadata.name=a"``, ``"status.phase=Running"``).

    `limit` objects per request (``None``: the whole collection in one answer); all pages by
    default, joined into one List. With ``all_pages=False``, one page: the List's
    ``metadata.continue`` (absent on the last page) is the `continue_` of the next call."""
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be positive (or None for no paging), got {limit}")
    res = await resolved(client, resource)
    path = res.collection_path(namespace)
    query: dict[str, str | int | bool | None] = {
        "labelSelector": label_selector or None,
        "fieldSelector": field_selector or None,
        "limit": limit,
    }
    token = continue_
    first: dict[str, Any] | None = None
    items: list[dict[str, Any]] = []
    while True:
        try:
            page: dict[str, Any] = await request_json(
                client, "GET", path, query={**query, "continue": token}, retry=Safety.IDEMPOTENT
            )
        except ApiError as err:
            if not (err.status == 410 and all_pages and first is not None and continue_ is None):
                raise
            # Our own token expired mid-way: start over in one request (see the module doc).
            query["limit"], token, first, items = None, None, None, []
            continue
        first = first or page
        for item in page.get("items") or ():
            item.setdefault("apiVersion", res.api_version)
            item.setdefault("kind", res.kind)
            if is_sensitive(res.kind):
                remember(item)
            items.append(item)
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None or not all_pages:
            break
    meta = dict(first.get("metadata") or {})
    meta.pop("remainingItemCount", None)
    meta.pop("continue", None)
    if token is not None:
        meta["continue"] = token
        remaining = (page.get("metadata") or {}).get("remainingItemCount")
        if remaining is not None:
            meta["remainingItemCount"] = remaining
    return {
        "apiVersion": first.get("apiVersion") or res.api_version,
        "kind": first.get("kind") or f"{res.kind}List",
        "metadata": meta,
        "items": items,
    }
