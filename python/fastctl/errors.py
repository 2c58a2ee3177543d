"""Every exception fastctl raises on purpose, in one hierarchy.

Catch `FastctlError` to handle anything fastctl reports; catch the leaves for one cause.
Some leaves also derive from the built-in exception users already catch for that cause
(`LookupError`, `TimeoutError`, `RuntimeError`), so existing handlers keep working::

    FastctlError
    ├── ApiError                  the API server answered with a non-2xx status
    ├── ResourceNotFound          (also LookupError) a kind the server does not serve
    ├── DiscoveryError            discovery refused for good (401, 403): not retried
    ├── KubeconfigError           no usable cluster configuration
    ├── WatchError                a watch that cannot go on (e.g. forced streaming refused)
    │   └── WatchStreamError      a malformed or truncated stream (resumed internally)
    ├── ReconcileTimeout          (also TimeoutError) a reconcile ran past its timeout
    ├── ReconcileCancelled        a reconcile was cancelled from inside, not by fastctl
    ├── LeadershipLost            (also RuntimeError) this replica lost its Lease
    ├── InvalidObject             (also ValueError) a cached object its model rejects
    ├── SchemaError               (also TypeError) a model no CRD schema can express
    └── StorageMigrationError     a storage-version migration that could not finish

Errors of bad *arguments* stay the built-in `TypeError`/`ValueError`/`KeyError`, as
everywhere in Python: they name a programming mistake, not a runtime condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from fastctl._redact import scrub, scrub_tree

if TYPE_CHECKING:
    from fastctl.kube._resource import Resource

__all__ = [
    "ApiError",
    "DiscoveryError",
    "FastctlError",
    "InvalidObject",
    "KubeconfigError",
    "LeadershipLost",
    "ReconcileCancelled",
    "ReconcileTimeout",
    "ResourceNotFound",
    "SchemaError",
    "StorageMigrationError",
    "WatchError",
    "WatchStreamError",
]


class FastctlError(Exception):
    """The base of every exception fastctl raises on purpose."""


class ApiError(FastctlError):
    """The API server answered with a non-2xx status.

    `status` is the HTTP code, `reason` the Status ``reason`` (``"NotFound"``, ``"Conflict"``,
    ``"Forbidden"``, ``"Expired"`` …, or the HTTP phrase when the body is not a Status),
    `message` the server's human message, `method`/`path` the request that failed and
    `body` the parsed Status (``None`` if the body was not JSON). A server that echoes a
    Secret's value in its message (``Invalid value: "..."``) has it replaced by
    ``<redacted>`` in `message` and `body` (`fastctl.log.mark_sensitive`).
    """

    status: int
    reason: str
    message: str
    method: str
    path: str
    body: dict[str, Any] | None

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        method: str = "",
        path: str = "",
        body: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = scrub(message)
        self.method = method
        self.path = path
        self.body = scrub_tree(body)
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        msg = f": {self.message}" if self.message else ""
        return f"{where}{self.status} {self.reason}{msg}"

    retry_after_header: float | None = None
    """The seconds of the answer's ``Retry-After`` header, when it had one (set by the
    request that got the answer; a Status alone has no headers)."""

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked us to wait: the longer of the Status body's
        ``details.retryAfterSeconds`` and the ``Retry-After`` header, if either is there."""
        header = self.retry_after_header
        details = (self.body or {}).get("details")
        if not isinstance(details, Mapping):  # no details, or a Status from a broken server
            return header
        value = details.get("retryAfterSeconds")
        body = float(value) if isinstance(value, int | float) and value > 0 else None
        if body is None or header is None:
            return body if header is None else header
        return max(body, header)

    @classmethod
    def from_status(
        cls, status_obj: Mapping[str, Any], *, method: str = "", path: str = "", code: int = 0
    ) -> ApiError:
        """Build from a Kubernetes ``Status`` object (a response body or a watch ERROR)."""
        status = status_obj.get("code")
        return cls(
            status if isinstance(status, int) and not isinstance(status, bool) else code,
            str(status_obj.get("reason") or "") or http_phrase(code),
            str(status_obj.get("message") or ""),
            method=method,
            path=path,
            body=dict(status_obj),
        )


def http_phrase(code: int) -> str:
    """The standard phrase of an HTTP status code (``"Not Found"``), or ``"Error"``."""
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return "Error"


class ResourceNotFound(FastctlError, LookupError):
    """The API server does not serve this kind (or its group/version) at all."""

    def __init__(self, resource: Resource, detail: str) -> None:
        self.resource = resource
        self.detail = detail
        super().__init__(f"unknown resource {resource.kind} ({resource.api_version}): {detail}")


class DiscoveryError(FastctlError):
    """Discovery was refused for good (401, 403, another 4xx): retrying cannot help."""

    def __init__(self, resource: Resource, error: ApiError) -> None:
        self.resource = resource
        self.error = error
        hint = {
            401: "the credentials were rejected (check the kubeconfig or the token)",
            403: "forbidden (check the RBAC of the operator's service account)",
        }.get(error.status, "the API server refused it")
        super().__init__(
            f"cannot resolve {resource.kind} ({resource.api_version}): "
            f"{error.method or 'GET'} {error.path} (discovery) failed with {error.status} "
            f"{error.reason}: {hint}"
        )


class KubeconfigError(FastctlError):
    """No usable cluster configuration (unreadable kubeconfig, and not in a cluster)."""


class WatchError(FastctlError):
    """A watch that cannot go on as asked (e.g. a forced streaming list the server refused);
    it ends the watcher instead of being retried."""


class WatchStreamError(WatchError):
    """The watch stream was unusable (a malformed or truncated line); resumed internally."""


class ReconcileTimeout(FastctlError, TimeoutError):
    """A reconcile ran longer than the applier's `timeout` and was cancelled."""

    def __init__(self, key: str, timeout: float | None) -> None:
        super().__init__(f"reconcile of {key} exceeded its timeout of {timeout} s")
        self.key = key
        self.timeout = timeout


class ReconcileCancelled(FastctlError):
    """A reconcile was cancelled from inside (not by the applier): treated as an error."""

    def __init__(self, key: str) -> None:
        super().__init__(f"reconcile of {key} was cancelled")
        self.key = key


class LeadershipLost(FastctlError, RuntimeError):
    """This replica was leader and could not renew its lease: it stopped reconciling."""


class InvalidObject(FastctlError, ValueError):
    """An object in the cache does not validate against the model of a typed controller:
    its reconcile fails with this error (the error policy applies) and the other objects
    keep reconciling. `key` is the object, `errors` the validator's one-line reasons."""

    def __init__(self, key: str, model: str, errors: list[str]) -> None:
        errors = [scrub(error) for error in errors]  # a validator may quote the input
        super().__init__(f"{key} is not a valid {model}: {'; '.join(errors)}")
        self.key = key
        self.model = model
        self.errors = errors


class SchemaError(FastctlError, TypeError):
    """A model that no structural CRD schema can express (a union of two object types, a
    recursive model, a tuple...): `path` is the field (``spec.items[]``), `rule` what
    structural schemas require there."""

    def __init__(self, model: str, path: str, rule: str) -> None:
        super().__init__(f"{model}: field {path or '(root)'}: {rule}")
        self.model = model
        self.path = path
        self.rule = rule


class StorageMigrationError(FastctlError):
    """A storage-version migration could not finish (`fastctl.runtime.StorageMigration`):
    a write the API server refused (its conversion webhook not answering, most often), a
    CRD that changed meanwhile. The message names the CRD, the object and the cause; the
    CRD's ``status.storedVersions`` was left as it was."""
