"""CRD conversion: plain functions between versions, and the ConversionReview v1 answer.

A `Converter` serves one CustomResourceDefinition. Register a function per direction
(``@converter.converts("v1", "v2")``), or name a hub version and register only the spokes'
functions to and from it: a conversion with no direct function goes through the hub
(``v1 → hub → v3``). Each function takes the object (a dict, a copy it may edit) and
returns the converted one; fastctl sets its ``apiVersion`` to the version asked for.

Typed models plug in here: a function may build a model from the dict and dump the other
version's model (``V2.model_validate(...).model_dump(mode="json")``); the keys stay plain
version names, so nothing here depends on how a version is modelled.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from fastctl.webhook._call import HandlerTimeout, call_handler, describe
from fastctl.webhook._review import ReviewError

__all__ = ["CONVERSION_API_VERSION", "ConversionFunction", "Converter"]

log = logging.getLogger("fastctl.webhook")

CONVERSION_API_VERSION = "apiextensions.k8s.io/v1"

ConversionFunction = Callable[[dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]]


class ConversionError(Exception):
    """One object could not be converted (the whole review fails, with this message)."""


class Converter:
    """The conversion webhook of CRD `crd` (``<plural>.<group>``), served at
    ``/convert/<crd>``. `timeout` bounds each review (the API server waits 30 s)."""

    def __init__(self, crd: str, *, hub: str | None = None, timeout: float = 25.0) -> None:
        if "." not in crd:
            raise ValueError(f"{crd!r} is not a CRD name (<plural>.<group>)")
        self.crd = crd
        self.group = crd.split(".", 1)[1]
        self.hub = hub
        self.timeout = timeout
        self.functions: dict[tuple[str, str], ConversionFunction] = {}

    @property
    def path(self) -> str:
        return f"/convert/{self.crd}"

    def converts(
        self, from_version: str, to_version: str
    ) -> Callable[[ConversionFunction], ConversionFunction]:
        """Decorator: the function converts objects from `from_version` to `to_version`
        (version names such as ``"v1"``, without the group)."""

        def register(function: ConversionFunction) -> ConversionFunction:
            self.add(from_version, to_version, function)
            return function

        return register

    def add(self, from_version: str, to_version: str, function: ConversionFunction) -> None:
        if "/" in from_version or "/" in to_version:
            raise ValueError("give version names (v1), not apiVersions (group/v1)")
        if not callable(function):
            raise TypeError(f"{function!r} is not callable")
        if (from_version, to_version) in self.functions:
            raise ValueError(f"{self.crd}: {from_version} -> {to_version} is registered twice")
        self.functions[(from_version, to_version)] = function

    def route(self, from_version: str, to_version: str) -> list[ConversionFunction]:
        """The functions that take an object from one version to the other, in order."""
        if from_version == to_version:
            return []
        direct = self.functions.get((from_version, to_version))
        if direct is not None:
            return [direct]
        hub = self.hub
        if hub is not None:
            legs = [(from_version, hub), (hub, to_version)]
            steps = [self.functions.get(leg) for leg in legs if leg[0] != leg[1]]
            if all(step is not None for step in steps):
                return [step for step in steps if step is not None]
        hint = f" (nor through the hub {hub})" if hub else ""
        raise ConversionError(
            f"{self.crd}: no conversion from {from_version} to {to_version}{hint}"
        )

    async def convert(self, obj: dict[str, Any], desired: str) -> dict[str, Any]:
        """`obj` converted to apiVersion `desired`."""
        group, _, version = desired.rpartition("/")
        current_group, _, current = str(obj.get("apiVersion", "")).rpartition("/")
        if group != self.group or current_group != self.group:
            raise ConversionError(
                f"{self.crd}: cannot convert {obj.get('apiVersion')!r} to {desired!r} "
                f"(this converter serves group {self.group})"
            )
        result = copy.deepcopy(obj)
        for function in self.route(current, version):
            result = await call_handler(function, result, timeout=self.timeout)
            if not isinstance(result, dict):
                raise ConversionError(
                    f"{self.crd}: {describe(function)} returned {type(result).__name__}, "
                    "expected the converted object (a dict)"
                )
        result["apiVersion"] = desired
        return result

    async def review(self, body: bytes) -> dict[str, Any]:
        """The ConversionReview v1 answer to `body` (`ReviewError` if it is not one)."""
        uid, desired, objects = parse_conversion_review(body)
        try:
            converted = [await self.convert(obj, desired) for obj in objects]
        except ConversionError as exc:
            log.error("conversion %s: %s", self.crd, exc)
            return conversion_review(uid, failure=str(exc))
        except HandlerTimeout as exc:
            log.error("conversion %s: %s", self.crd, exc)
            return conversion_review(uid, failure=f"{self.crd}: {exc}")
        except Exception as exc:
            log.exception("conversion %s: a conversion function raised", self.crd)
            return conversion_review(uid, failure=f"{self.crd}: conversion raised {exc!r}")
        return conversion_review(uid, converted)


def parse_conversion_review(body: bytes) -> tuple[str, str, list[dict[str, Any]]]:
    """(uid, desiredAPIVersion, objects) of a ConversionReview v1 body."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"the body is not JSON: {exc}") from None
    if (
        not isinstance(review, dict)
        or review.get("apiVersion") != CONVERSION_API_VERSION
        or review.get("kind") != "ConversionReview"
    ):
        raise ReviewError(
            f"expected an {CONVERSION_API_VERSION} ConversionReview (set "
            'conversionReviewVersions to ["v1"])'
        )
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise ReviewError("ConversionReview.request.uid is missing")
    desired = request.get("desiredAPIVersion")
    objects = request.get("objects") or []
    if not isinstance(desired, str) or not isinstance(objects, list):
        raise ReviewError("ConversionReview.request needs desiredAPIVersion and objects")
    return request["uid"], desired, objects


def conversion_review(
    uid: str, converted: list[dict[str, Any]] | None = None, *, failure: str | None = None
) -> dict[str, Any]:
    """The ConversionReview v1 answer: the converted objects, or a failure message."""
    response: dict[str, Any] = {"uid": uid}
    if failure is not None:
        response["result"] = {"status": "Failure", "message": failure}
        response["convertedObjects"] = []
    else:
        response["result"] = {"status": "Success"}
        response["convertedObjects"] = converted or []
    return {"apiVersion": CONVERSION_API_VERSION, "kind": "ConversionReview", "response": response}
