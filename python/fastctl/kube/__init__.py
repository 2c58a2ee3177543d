"""The Kubernetes API layer: resources and discovery, the object API, the watcher, the
store it fills, Events and finalizers. Public names are re-exported here; the modules
behind them are private (`_watcher`, `_store`, ...), so a name never hides a module.

The data path starts here: ``watcher`` (list + watch) → ``reflector`` → ``Store`` (the
cache every reconcile reads); `fastctl.runtime` turns those events into triggers.
"""

from typing import TYPE_CHECKING, Any

# First, before anything imports kubernetes_asyncio: importing it defers its generated API.
from fastctl.kube import _lazy_import  # noqa: F401

# isort: split

from fastctl._rate import RateLimit
from fastctl.errors import (
    ApiError,
    DiscoveryError,
    InvalidObject,
    KubeconfigError,
    ResourceNotFound,
    SchemaError,
)
from fastctl.kube._call_retry import RetryPolicy
from fastctl.kube._client import load_client
from fastctl.kube._conditions import set_condition
from fastctl.kube._crd_schema import PrinterColumn, ValidationRule
from fastctl.kube._events import Recorder
from fastctl.kube._finalizer import add_finalizer, finalizer, remove_finalizer
from fastctl.kube._list import list_objects as list
from fastctl.kube._namespaces import Namespaces
from fastctl.kube._objects import (
    PatchType,
    apply,
    apply_status,
    create,
    delete,
    get,
    patch,
)
from fastctl.kube._owners import owner_reference
from fastctl.kube._resource import Discovery, ResolvedResource, Resource
from fastctl.kube._retry import Backoff
from fastctl.kube._store import Store, controller_uid, reflector
from fastctl.kube._throttle import set_rate_limit, set_retry_policy
from fastctl.kube._transforms import (
    chain_transforms,
    drop_annotations,
    drop_last_applied,
    drop_managed_fields,
    keep_paths,
)
from fastctl.kube._watcher import (
    EventKind,
    ListFrame,
    MetadataOnlyUnsupported,
    ObjectEvent,
    WatchConfig,
    WatchEvent,
    watcher,
)

if TYPE_CHECKING:
    from fastctl.kube._model import Condition, CustomResource, KubeModel, ObjectMeta, crd

_TYPED = frozenset({"Condition", "CustomResource", "KubeModel", "ObjectMeta", "crd"})
"""Names of `fastctl.kube._model`, the one module that imports pydantic: loaded on first use
(``import fastctl`` works without pydantic; typed resources need the ``typed`` extra)."""


def __getattr__(name: str) -> Any:
    if name in _TYPED:
        from fastctl.kube import _model

        return getattr(_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ApiError",
    "Backoff",
    "Condition",
    "CustomResource",
    "Discovery",
    "DiscoveryError",
    "EventKind",
    "InvalidObject",
    "KubeModel",
    "KubeconfigError",
    "ListFrame",
    "MetadataOnlyUnsupported",
    "Namespaces",
    "ObjectEvent",
    "ObjectMeta",
    "PatchType",
    "PrinterColumn",
    "RateLimit",
    "Recorder",
    "ResolvedResource",
    "Resource",
    "ResourceNotFound",
    "RetryPolicy",
    "SchemaError",
    "Store",
    "ValidationRule",
    "WatchConfig",
    "WatchEvent",
    "add_finalizer",
    "apply",
    "apply_status",
    "chain_transforms",
    "controller_uid",
    "crd",
    "create",
    "delete",
    "drop_annotations",
    "drop_last_applied",
    "drop_managed_fields",
    "finalizer",
    "get",
    "keep_paths",
    "list",
    "load_client",
    "owner_reference",
    "patch",
    "reflector",
    "remove_finalizer",
    "set_condition",
    "set_rate_limit",
    "set_retry_policy",
    "watcher",
]
