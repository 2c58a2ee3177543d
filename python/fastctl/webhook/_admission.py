"""One admission webhook: its registration (what it matches and how the API server should
call it) and how it answers a request.

Whatever the handler does, the API server gets an AdmissionReview back: a handler that
raises, times out, or returns the wrong type is a denial whose message names the handler
and what went wrong (and is logged with its traceback), never an HTTP 500 without a body.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from fastctl._redact import remember, scrub
from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.log import RedactingFilter
from fastctl.webhook._call import HandlerTimeout, call_handler, describe
from fastctl.webhook._jsonpatch import diff
from fastctl.webhook._review import (
    OPERATIONS,
    AdmissionRequest,
    Allow,
    Deny,
    Operation,
    admission_review,
)

__all__ = [
    "AdmissionHandler",
    "AdmissionWebhook",
    "FailurePolicy",
    "SideEffects",
    "Verdict",
]

log = logging.getLogger("fastctl.webhook")
log.addFilter(RedactingFilter())  # a handler's traceback may quote the object under review

Verdict = Allow | Deny
AdmissionHandler = Callable[[AdmissionRequest], Any | Awaitable[Any]]
"""``handler(request)``, sync or async: a validating one returns `Allow` or `Deny`; a
mutating one returns the object to store (a dict), `Allow` (with ``object=`` to change it)
or `Deny`."""
FailurePolicy = Literal["Fail", "Ignore"]
SideEffects = Literal["None", "NoneOnDryRun"]


def _rule_resource(resource: Resource | ResolvedResource) -> tuple[str, str, str]:
    """(group, version, plural): a webhook rule names resources by plural, so an unresolved
    `Resource` must say it (``Resource("v1", "ConfigMap", plural="configmaps")``)."""
    if isinstance(resource, ResolvedResource):
        return resource.group, resource.version, resource.plural
    if not isinstance(resource, Resource):
        raise TypeError(f"expected a fastctl Resource, got {type(resource).__name__}")
    if resource.plural is None:
        raise ValueError(
            f"{resource}: a webhook rule names the resource by its plural; give plural= "
            "(webhook configurations are written before any discovery)"
        )
    return resource.group, resource.version, resource.plural


@dataclass(frozen=True)
class AdmissionWebhook:
    """A validating or mutating webhook, as registered with `Webhooks`."""

    name: str
    """Its name in the webhook configuration: a fully qualified name (``a.b.c``)."""
    mutating: bool
    handler: AdmissionHandler
    resources: tuple[tuple[str, str, str], ...]
    operations: tuple[Operation, ...]
    failure_policy: FailurePolicy = "Fail"
    timeout_seconds: int = 10
    side_effects: SideEffects = "None"
    namespace_selector: Mapping[str, Any] | None = None
    object_selector: Mapping[str, Any] | None = None

    @classmethod
    def make(
        cls,
        name: str,
        handler: AdmissionHandler,
        resources: Sequence[Resource | ResolvedResource],
        operations: Sequence[Operation],
        *,
        mutating: bool,
        **options: Any,
    ) -> AdmissionWebhook:
        if name.count(".") < 2:
            raise ValueError(f"webhook name {name!r} must be fully qualified, like a.example.com")
        if not callable(handler):
            raise TypeError(f"webhook {name!r}: the handler {handler!r} is not callable")
        unknown = [op for op in operations if op not in OPERATIONS]
        if unknown or not operations:
            raise ValueError(f"webhook {name!r}: operations must be some of {OPERATIONS}")
        timeout = options.get("timeout_seconds", 10)
        if not 1 <= timeout <= 30:
            raise ValueError(f"webhook {name!r}: timeout_seconds must be 1..30 (the API's range)")
        rules = tuple(_rule_resource(r) for r in resources)
        return cls(name, mutating, handler, rules, tuple(operations), **options)

    @property
    def path(self) -> str:
        """Where the server serves it: ``/mutate/<name>`` or ``/validate/<name>``."""
        return f"/{'mutate' if self.mutating else 'validate'}/{self.name}"

    @property
    def deadline(self) -> float:
        """The handler's time: 80 % of ``timeoutSeconds``, so that fastctl's answer (a
        denial naming the slow handler) reaches the API server before it gives up."""
        return self.timeout_seconds * 0.8

    async def review(self, request: AdmissionRequest) -> dict[str, Any]:
        """The AdmissionReview answer to `request`."""
        original = request.object
        for obj in (original, request.old_object):  # a Secret under review: never echoed
            remember(obj)
        if self.mutating and original is not None:
            # The handler may edit the object in place: diff against an untouched copy.
            request = replace(request, object=copy.deepcopy(original))
        try:
            result = await call_handler(self.handler, request, timeout=self.deadline)
        except HandlerTimeout as exc:
            log.error("webhook %s: %s", self.name, exc)
            return admission_review(request.uid, Deny(f"webhook {self.name}: {exc}", code=504))
        except Exception as exc:
            log.exception("webhook %s: handler %s raised", self.name, describe(self.handler))
            message = scrub(f"webhook {self.name}: {describe(self.handler)} raised {exc!r}")
            return admission_review(request.uid, Deny(message, code=500))
        verdict = self._verdict(result)
        if isinstance(verdict, str):
            log.error("webhook %s: %s", self.name, verdict)
            return admission_review(request.uid, Deny(verdict, code=500))
        patch = []
        if isinstance(verdict, Allow) and verdict.object is not None and original is not None:
            patch = diff(original, verdict.object)
        return admission_review(request.uid, verdict, patch)

    def _verdict(self, result: Any) -> Verdict | str:
        """The verdict `result` means, or the error message when it means none."""
        if isinstance(result, Deny):
            return result
        if isinstance(result, Allow):
            if result.object is not None and not self.mutating:
                return self._wrong("an Allow with object= (only a mutating webhook changes it)")
            return result
        if self.mutating and isinstance(result, dict):
            return Allow(object=result)
        expected = "a dict, Allow or Deny" if self.mutating else "Allow or Deny"
        return self._wrong(f"{type(result).__name__}, expected {expected}")

    def _wrong(self, what: str) -> str:
        return f"webhook {self.name}: handler {describe(self.handler)} returned {what}"
