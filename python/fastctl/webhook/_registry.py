"""`Webhooks`: the admission webhooks and CRD converters one server serves.

Registration is a decorator per webhook::

    hooks = Webhooks()

    @hooks.validating(CONFIGMAP, name="configmaps.validate.example.com")
    async def check(request: AdmissionRequest) -> Allow | Deny: ...

    @hooks.mutating(CONFIGMAP, name="configmaps.default.example.com", operations=["CREATE"])
    def default(request: AdmissionRequest) -> dict: ...

    widgets = hooks.conversion("widgets.example.com", hub="v2")

    @widgets.converts("v1", "v2")
    def up(obj: dict) -> dict: ...

Each webhook has its own path (``/validate/<name>``, ``/mutate/<name>``,
``/convert/<crd>``), which the generated webhook configurations point at, so the server
never guesses which handler a request is for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, Unpack

from fastctl.kube._resource import ResolvedResource, Resource
from fastctl.webhook._admission import (
    AdmissionHandler,
    AdmissionWebhook,
    FailurePolicy,
    SideEffects,
)
from fastctl.webhook._conversion import Converter
from fastctl.webhook._review import Operation

__all__ = ["AdmissionOptions", "Webhooks"]

AnyResource = Resource | ResolvedResource


class AdmissionOptions(TypedDict, total=False):
    """How the API server calls a webhook, field by field as in the webhook configuration."""

    operations: Sequence[Operation]
    """Default ``("CREATE", "UPDATE")``."""
    failure_policy: FailurePolicy
    """What the API server does when the webhook cannot be called: ``"Fail"`` (default,
    refuse the request) or ``"Ignore"`` (admit it)."""
    timeout_seconds: int
    """1..30, default 10; the handler gets 80 % of it."""
    side_effects: SideEffects
    """``"None"`` (default) or ``"NoneOnDryRun"``."""
    namespace_selector: Mapping[str, Any] | None
    object_selector: Mapping[str, Any] | None


class Webhooks:
    """A set of admission webhooks and converters, each at its own path."""

    def __init__(self) -> None:
        self.admission: list[AdmissionWebhook] = []
        self.converters: list[Converter] = []

    def validating(
        self,
        resources: AnyResource | Sequence[AnyResource],
        *,
        name: str,
        **options: Unpack[AdmissionOptions],
    ) -> Callable[[AdmissionHandler], AdmissionHandler]:
        """Decorator: the handler admits (`Allow`) or refuses (`Deny`) matching requests."""
        return self._register(False, resources, name, options)

    def mutating(
        self,
        resources: AnyResource | Sequence[AnyResource],
        *,
        name: str,
        **options: Unpack[AdmissionOptions],
    ) -> Callable[[AdmissionHandler], AdmissionHandler]:
        """Decorator: the handler returns the object as it should be stored (fastctl sends
        the JSON Patch from the request's object to it), or `Deny`."""
        return self._register(True, resources, name, options)

    def conversion(self, crd: str, *, hub: str | None = None, timeout: float = 25.0) -> Converter:
        """The converter of CRD `crd` (``<plural>.<group>``); register its functions with
        ``@converter.converts(from_version, to_version)``."""
        if any(c.crd == crd for c in self.converters):
            raise ValueError(f"a converter for {crd} is already registered")
        converter = Converter(crd, hub=hub, timeout=timeout)
        self.converters.append(converter)
        return converter

    def _register(
        self,
        mutating: bool,
        resources: AnyResource | Sequence[AnyResource],
        name: str,
        options: AdmissionOptions,
    ) -> Callable[[AdmissionHandler], AdmissionHandler]:
        listed = [resources] if isinstance(resources, Resource | ResolvedResource) else resources
        if any(w.name == name for w in self.admission):
            raise ValueError(f"a webhook named {name!r} is already registered")
        settings: dict[str, Any] = dict(options)
        operations: list[Operation] = list(settings.pop("operations", ("CREATE", "UPDATE")))

        def register(handler: AdmissionHandler) -> AdmissionHandler:
            webhook = AdmissionWebhook.make(
                name, handler, list(listed), operations, mutating=mutating, **settings
            )
            self.admission.append(webhook)
            return handler

        return register
