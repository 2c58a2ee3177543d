"""The Kubernetes API layer: resources and discovery, the object API, the watcher, the
store it fills, Events and finalizers. Public names are re-exported here; the modules
behind them are private (`_watcher`, `_store`, ...), so a name never hides a module.

The data path starts here: ``watcher`` (list + watch) → ``reflector`` → ``Store`` (the
cache every reconcile reads); `fastctl.runtime` turns those events into triggers.
"""

from fastctl.errors import ApiError, KubeconfigError, ResourceNotFound
from fastctl.kube._client import load_client
from fastctl.kube._events import Recorder
from fastctl.kube._finalizer import add_finalizer, finalizer, remove_finalizer
from fastctl.kube._objects import (
    PatchType,
    apply,
    apply_status,
    create,
    delete,
    get,
    patch,
    resolved,
)
from fastctl.kube._resource import Discovery, ResolvedResource, Resource
from fastctl.kube._store import Store, controller_uid, reflector
from fastctl.kube._watcher import Backoff, EventKind, WatchConfig, WatchEvent, watcher

__all__ = [
    "ApiError",
    "Backoff",
    "Discovery",
    "EventKind",
    "KubeconfigError",
    "PatchType",
    "Recorder",
    "ResolvedResource",
    "Resource",
    "ResourceNotFound",
    "Store",
    "WatchConfig",
    "WatchEvent",
    "add_finalizer",
    "apply",
    "apply_status",
    "controller_uid",
    "create",
    "delete",
    "finalizer",
    "get",
    "load_client",
    "patch",
    "reflector",
    "remove_finalizer",
    "resolved",
    "watcher",
]
