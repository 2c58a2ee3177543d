"""AdmissionReview v1 as the API server sends it, and the verdicts a handler returns.

The request is parsed once into an `AdmissionRequest` (the fields a handler needs, by their
Python names, and `raw` for anything else); the answer is built by `admission_review`,
exactly as ``admission.k8s.io/v1`` wants it: the request's ``uid`` echoed, ``allowed``, a
``status`` with the denial's code and message, ``warnings``, and a JSON Patch as
``patchType: JSONPatch`` with the patch base64-encoded.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

__all__ = [
    "ADMISSION_API_VERSION",
    "AdmissionRequest",
    "Allow",
    "Deny",
    "Operation",
    "ReviewError",
    "admission_review",
    "parse_admission_review",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: tuple[Operation, ...] = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class ReviewError(ValueError):
    """The body is not a review this server can answer (answered with HTTP 400)."""


@dataclass(frozen=True)
class AdmissionRequest:
    """What the API server asks about: `object` (None on DELETE and CONNECT), `old_object`
    (on UPDATE and DELETE), who asks (`user_info`), and `dry_run` (a handler with side
    effects must not act on a dry run)."""

    uid: str
    operation: Operation
    kind: Mapping[str, str]
    """``{"group", "version", "kind"}`` of `object`."""
    resource: Mapping[str, str]
    """``{"group", "version", "resource"}``: the resource being requested."""
    name: str
    namespace: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    user_info: Mapping[str, Any]
    """``{"username", "uid", "groups", "extra"}`` of the requesting user."""
    dry_run: bool
    sub_resource: str = ""
    options: Mapping[str, Any] | None = None
    """The operation's options (``CreateOptions``, ``UpdateOptions``, ``DeleteOptions``)."""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The whole ``request`` object, for fields not named here."""


@dataclass(frozen=True)
class Allow:
    """Admit the request, with `warnings` the client prints (kubectl shows ``Warning: ...``).
    From a mutating handler, `object` is the object to store (fastctl sends the patch)."""

    warnings: Sequence[str] = ()
    object: dict[str, Any] | None = None


@dataclass(frozen=True)
class Deny:
    """Refuse the request: the client sees `message` (and `code`, 403 by default)."""

    message: str
    warnings: Sequence[str] = ()
    code: int = 403
    reason: str | None = None
    """A machine-readable ``status.reason`` (e.g. ``"Invalid"``), if any."""


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ReviewError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def parse_admission_review(body: bytes) -> AdmissionRequest:
    """The request inside an AdmissionReview v1 body, or `ReviewError` saying what is wrong."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"the body is not JSON: {exc}") from None
    review = _mapping(review, "the AdmissionReview")
    if review.get("apiVersion") != ADMISSION_API_VERSION or review.get("kind") != "AdmissionReview":
        raise ReviewError(
            f"expected an {ADMISSION_API_VERSION} AdmissionReview, got "
            f"{review.get('apiVersion')!r} {review.get('kind')!r} (set admissionReviewVersions "
            'to ["v1"])'
        )
    req = _mapping(review.get("request"), "AdmissionReview.request")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("AdmissionReview.request.uid is missing")
    operation = req.get("operation")
    if operation not in OPERATIONS:
        raise ReviewError(f"unknown operation {operation!r}")
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        kind=req.get("kind") or {},
        resource=req.get("resource") or {},
        name=req.get("name") or "",
        namespace=req.get("namespace") or "",
        object=req.get("object"),
        old_object=req.get("oldObject"),
        user_info=req.get("userInfo") or {},
        dry_run=bool(req.get("dryRun")),
        sub_resource=req.get("subResource") or "",
        options=req.get("options"),
        raw=req,
    )


def admission_review(
    uid: str,
    verdict: Allow | Deny,
    patch: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The AdmissionReview v1 answer to request `uid`."""
    response: dict[str, Any] = {"uid": uid, "allowed": isinstance(verdict, Allow)}
    if isinstance(verdict, Deny):
        status: dict[str, Any] = {"code": verdict.code, "message": verdict.message}
        if verdict.reason:
            status["reason"] = verdict.reason
        response["status"] = status
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    if patch and isinstance(verdict, Allow):
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode("ascii")
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}
