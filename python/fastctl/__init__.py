"""fastctl: Kubernetes controllers in Python on a Rust scheduling core.

The main public names are exported here; the full list of what fastctl promises, package by
package, is in docs/contract.md, and tests/unit/test_public_api.py pins it. The package
follows the data path, one layer per folder (docs/architecture.md):

- `fastctl` itself: the Kubernetes-free engine. `types` (refs, actions, triggers), `errors`
  (one hierarchy), the Rust `Scheduler`, the `applier` that runs reconciles on it, `log`.
- `fastctl.kube`: the API layer. Resources, the object API, watcher → reflector → Store,
  Events, finalizers.
- `fastctl.runtime`: Controller (events → triggers → applier), Manager, metrics, health,
  leader election.
- `fastctl.testing`: a real local control plane, pytest fixtures, the scheduler model.
"""

from typing import TYPE_CHECKING, Any

from fastctl._applier import ApplierConfig, applier
from fastctl._core import Scheduler
from fastctl._rate import RateLimit
from fastctl.errors import (
    ApiError,
    DiscoveryError,
    FastctlError,
    InvalidObject,
    KubeconfigError,
    LeadershipLost,
    ReconcileCancelled,
    ReconcileTimeout,
    ResourceNotFound,
    SchemaError,
    StorageMigrationError,
    WatchError,
    WatchStreamError,
)
from fastctl.kube import (
    Discovery,
    EventKind,
    ListFrame,
    Namespaces,
    ObjectEvent,
    PrinterColumn,
    Recorder,
    ResolvedResource,
    Resource,
    Store,
    ValidationRule,
    WatchConfig,
    WatchEvent,
    finalizer,
    load_client,
    reflector,
    watcher,
)
from fastctl.runtime import (
    INITIAL_LIST_PRIORITY,
    Controller,
    LeaderElection,
    LeaderElector,
    Manager,
    Predicate,
    ReadYourWrites,
    ServerOptions,
    Sharding,
    StorageMigration,
    all_of,
    annotations_changed,
    any_of,
    generation_changed,
    labels_changed,
)
from fastctl.types import (
    Action,
    ErrorPolicy,
    Mapper,
    ObjectRef,
    Reconcile,
    ReconcileResult,
    Trigger,
)

if TYPE_CHECKING:
    from fastctl.kube._model import CustomResource, KubeModel


def __getattr__(name: str) -> Any:
    """`CustomResource` and `KubeModel` load pydantic, `__version__` the installed
    metadata: only on first use."""
    if name in ("CustomResource", "KubeModel"):
        from fastctl.kube import _model

        return getattr(_model, name)
    if name == "__version__":
        from fastctl._version import version

        globals()["__version__"] = found = version()
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "INITIAL_LIST_PRIORITY",
    "Action",
    "ApiError",
    "ApplierConfig",
    "Controller",
    "CustomResource",
    "Discovery",
    "DiscoveryError",
    "ErrorPolicy",
    "EventKind",
    "FastctlError",
    "InvalidObject",
    "KubeModel",
    "KubeconfigError",
    "LeaderElection",
    "LeaderElector",
    "LeadershipLost",
    "ListFrame",
    "Manager",
    "Mapper",
    "Namespaces",
    "ObjectEvent",
    "ObjectRef",
    "Predicate",
    "PrinterColumn",
    "RateLimit",
    "ReadYourWrites",
    "Reconcile",
    "ReconcileCancelled",
    "ReconcileResult",
    "ReconcileTimeout",
    "Recorder",
    "ResolvedResource",
    "Resource",
    "ResourceNotFound",
    "Scheduler",
    "SchemaError",
    "ServerOptions",
    "Sharding",
    "StorageMigration",
    "StorageMigrationError",
    "Store",
    "Trigger",
    "ValidationRule",
    "WatchConfig",
    "WatchError",
    "WatchEvent",
    "WatchStreamError",
    "all_of",
    "annotations_changed",
    "any_of",
    "applier",
    "finalizer",
    "generation_changed",
    "labels_changed",
    "load_client",
    "reflector",
    "watcher",
]

__version__: str
"""The version of fastctl: the one in Cargo.toml (see `fastctl._version`); read on first
use (the installed metadata costs imports most processes never need)."""
