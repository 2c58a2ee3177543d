"""Admission webhooks on a fake cluster: a module's `fastctl.webhook.Webhooks` called in
process, where a real API server would call them over HTTPS.

A write (create, update, patch, apply, delete) of a resource a registered webhook's rules
name is first computed as the server would store it, without storing it; the mutating
webhooks then see it (each one the result of the previous one, in registration order) and
their JSON Patches are applied; the result is checked against the kind's schema again; the
validating webhooks see that; and only then is it stored. A refusal is the answer the API
server gives: the handler's code (403 unless it says otherwise) and ``admission webhook
"<name>" denied the request: <message>``. Each handler is called through
`AdmissionWebhook.review`, the code the webhook server runs, so what it answers (a patch, a
denial, a handler that raised or timed out) is what a real server would get.

What decides whether a webhook is called, as in its configuration: the rule's group,
version and plural (the main resource only: a write of the status subresource is not
sent), its operations (an apply or a patch that creates the object is a CREATE), its
namespace selector (the labels of the object's Namespace) and object selector (the labels
of the new or the old object). A request at another version than the rule's is not sent (a
real server's ``matchPolicy: Equivalent`` would convert it first), unless the CRD has a
converter on the fake: then the write is admitted at the storage version it is converted to.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from fastctl.testing.fake._clone import clone
from fastctl.testing.fake._kinds import Kind
from fastctl.testing.fake._patches import JsonPatchError, json_patch

if TYPE_CHECKING:
    from fastctl.webhook._admission import AdmissionWebhook
    from fastctl.webhook._registry import Webhooks
    from fastctl.webhook._review import Operation

__all__ = ["ADMIN", "Admission", "Denied", "selects"]

ADMIN: Mapping[str, Any] = {
    "username": "fastctl-admin",
    "groups": ["system:masters", "system:authenticated"],
}
"""Who a fake cluster's client is unless it says otherwise: the user of `ControlPlane`'s
admin kubeconfig."""

VERB_OPERATIONS: Mapping[str, Operation] = {
    "create": "CREATE",
    "update": "UPDATE",
    "patch": "UPDATE",
    "apply": "UPDATE",
    "delete": "DELETE",
}


class Denied(Exception):
    """A webhook refused the request (or its answer could not be used)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a ``LabelSelector`` (``matchLabels`` and ``matchExpressions``) selects
    `labels`; an empty or absent selector selects everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, op = expression.get("key"), expression.get("operator")
        values = list(expression.get("values") or ())
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    if obj is None:
        return {}
    return (obj.get("metadata") or {}).get("labels") or {}


class Admission:
    """The admission webhooks a fake cluster calls (see the module docstring)."""

    def __init__(self) -> None:
        self.webhooks: list[AdmissionWebhook] = []
        self._uids = itertools.count(1)

    def add(self, webhooks: Webhooks) -> None:
        """Call the admission webhooks of `webhooks` too (after those added before)."""
        self.webhooks.extend(webhooks.admission)

    def rules_name(self, kind: Kind, verb: str, subresource: str | None) -> bool:
        """Whether any webhook's rules name this request (before its object is known)."""
        operation = VERB_OPERATIONS.get(verb)
        if operation is None or subresource is not None:
            return False
        ops: set[str] = {operation, "CREATE"} if verb in ("apply", "patch") else {operation}
        return any(
            (kind.group, kind.version, kind.plural) in w.resources and ops & set(w.operations)
            for w in self.webhooks
        )

    def _called(
        self,
        kind: Kind,
        operation: Operation,
        namespace_labels: Mapping[str, str] | None,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
        mutating: bool,
    ) -> list[AdmissionWebhook]:
        return [
            w
            for w in self.webhooks
            if w.mutating == mutating
            and (kind.group, kind.version, kind.plural) in w.resources
            and operation in w.operations
            and (namespace_labels is None or selects(w.namespace_selector, namespace_labels))
            and (
                selects(w.object_selector, _labels(new))
                or (old is not None and selects(w.object_selector, _labels(old)))
            )
        ]

    async def admit(
        self,
        kind: Kind,
        operation: Operation,
        old: dict[str, Any] | None,
        new: dict[str, Any] | None,
        *,
        user: Mapping[str, Any],
        namespace_labels: Mapping[str, str] | None,
        validate: Any,
    ) -> dict[str, Any] | None:
        """`new` as the mutating webhooks leave it, checked by `validate` (the schema) and
        admitted by the validating ones; `Denied` if one refuses."""
        for webhook in self._called(kind, operation, namespace_labels, old, new, True):
            response = await self._review(webhook, kind, operation, old, new, user)
            patch = response.get("patch")
            if patch and new is not None:
                try:
                    ops = orjson.loads(base64.b64decode(patch))
                    new = json_patch(new, ops)
                except (ValueError, JsonPatchError) as exc:
                    raise Denied(
                        500,
                        "InternalError",
                        f'admission webhook "{webhook.name}" returned a patch that does not '
                        f"apply: {exc}",
                    ) from None
        if new is not None:
            new = validate(new)
        for webhook in self._called(kind, operation, namespace_labels, old, new, False):
            await self._review(webhook, kind, operation, old, new, user)
        return new

    async def _review(
        self,
        webhook: AdmissionWebhook,
        kind: Kind,
        operation: Operation,
        old: dict[str, Any] | None,
        new: dict[str, Any] | None,
        user: Mapping[str, Any],
    ) -> Mapping[str, Any]:
        """The webhook's answer (its ``response``); `Denied` when it refuses."""
        from fastctl.webhook._review import AdmissionRequest  # only with webhooks

        shown = new if new is not None else old
        meta = (shown or {}).get("metadata") or {}
        raw: dict[str, Any] = {
            "uid": f"fake-admission-{next(self._uids)}",
            "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
            "resource": {"group": kind.group, "version": kind.version, "resource": kind.plural},
            "name": meta.get("name") or "",
            "namespace": meta.get("namespace") or "",
            "operation": operation,
            "userInfo": clone(dict(user)),
            "object": clone(new),
            "oldObject": clone(old),
            "dryRun": False,
        }
        request = AdmissionRequest(
            uid=raw["uid"],
            operation=operation,
            kind=raw["kind"],
            resource=raw["resource"],
            name=raw["name"],
            namespace=raw["namespace"],
            object=raw["object"],
            old_object=raw["oldObject"],
            user_info=raw["userInfo"],
            dry_run=False,
            options={},
            raw=raw,
        )
        review = await webhook.review(request)
        response: Mapping[str, Any] = review["response"]
        if not response.get("allowed"):
            status = response.get("status") or {}
            code = int(status.get("code") or 400)
            if not 400 <= code <= 599:
                code = 400
            message = status.get("message") or "without explanation"
            raise Denied(
                code,
                str(status.get("reason") or ""),
                f'admission webhook "{webhook.name}" denied the request: {message}',
            )
        return response
