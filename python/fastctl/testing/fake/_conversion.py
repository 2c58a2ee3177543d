"""Conversion webhooks on a fake cluster: a module's converters (`Webhooks.conversion`)
called in process, where a real API server calls them over HTTPS.

A custom resource with more than one version is stored at its CRD's storage version. A
request at another version is converted as a real server with ``strategy: Webhook``
converts it: the object a create, an update or an apply sends is converted to the storage
version before it is stored; what a get, a list, a watch or a write answers is converted to
the version asked for; a merge or JSON patch is applied to the object at the version of the
request (converted there and back). Each conversion is a ``ConversionReview`` handed to
`Converter.review`, the code the webhook server runs, so what it answers (the converted
objects, a failure, a function that raised) is what a real server would get; as a real
server does, the answer's metadata is put back but for labels and annotations, and an
object already at the version asked for is not sent.

A CRD whose converter is not registered with the fake is served as with ``strategy:
None``: the object is relabelled with the version asked for, nothing else changes. A
registered converter stands for the CRD's ``spec.conversion`` pointing at it, as
``fastctl run --webhook-managed`` installs it. Writes made without a request
(`FakeCluster.create`, ...) are stored as given, converted by nobody.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from fastctl.testing.fake._clone import clone
from fastctl.testing.fake._kinds import Kind

if TYPE_CHECKING:
    from fastctl.webhook._conversion import Converter
    from fastctl.webhook._registry import Webhooks

__all__ = ["Conversion", "ConversionFailed"]

_KEPT = ("labels", "annotations")
"""The metadata a conversion may change (the server restores the rest)."""


class ConversionFailed(Exception):
    """The conversion webhook failed, or answered something the server cannot use."""


class Conversion:
    """The converters a fake cluster calls (see the module docstring)."""

    def __init__(self) -> None:
        self.converters: dict[str, Converter] = {}
        self._uids = itertools.count(1)

    def add(self, webhooks: Webhooks) -> None:
        """Call the converters of `webhooks` too (one per CRD: a later one replaces)."""
        for converter in webhooks.converters:
            self.converters[converter.crd] = converter

    def converts(self, kind: Kind) -> bool:
        """Whether the CRD of `kind` has a converter here."""
        return kind.key in self.converters

    async def convert(
        self, kind: Kind, objects: list[dict[str, Any]], desired: str
    ) -> list[dict[str, Any]]:
        """`objects` at apiVersion `desired`, through one review for those not there yet."""
        converter = self.converters[kind.key]
        sent = [obj for obj in objects if obj.get("apiVersion") != desired]
        if not sent:
            return objects
        review = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": f"fake-conversion-{next(self._uids)}",
                "desiredAPIVersion": desired,
                "objects": sent,
            },
        }
        answer = await converter.review(orjson.dumps(review))
        response: Mapping[str, Any] = answer.get("response") or {}
        result = response.get("result") or {}
        what = f"conversion webhook for {kind.group}/{kind.version}, Kind={kind.kind}"
        if result.get("status") != "Success":
            raise ConversionFailed(f"{what} failed: {result.get('message') or 'no message'}")
        converted = response.get("convertedObjects")
        if not isinstance(converted, list) or len(converted) != len(sent):
            raise ConversionFailed(
                f"{what} failed: expected {len(sent)} converted objects, "
                f"got {len(converted) if isinstance(converted, list) else converted!r}"
            )
        out = iter(converted)
        return [
            obj if obj.get("apiVersion") == desired else _checked(obj, next(out), desired, what)
            for obj in objects
        ]


def _checked(original: dict[str, Any], converted: Any, desired: str, what: str) -> dict[str, Any]:
    """`converted` as the server keeps it: at `desired`, its metadata the original's but for
    labels and annotations."""
    if not isinstance(converted, dict) or converted.get("apiVersion") != desired:
        shown = converted.get("apiVersion") if isinstance(converted, dict) else converted
        raise ConversionFailed(
            f"{what} failed: converted object has apiVersion {shown!r}, expected {desired!r}"
        )
    if converted.get("kind") != original.get("kind"):
        raise ConversionFailed(
            f"{what} failed: converted object has kind {converted.get('kind')!r}, "
            f"expected {original.get('kind')!r}"
        )
    meta = clone(dict(original.get("metadata") or {}))
    given = converted.get("metadata") or {}
    for key in _KEPT:
        if given.get(key):
            meta[key] = given[key]
        else:
            meta.pop(key, None)
    return {**converted, "metadata": meta}
