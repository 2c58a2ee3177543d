"""fastctl: Kubernetes controllers in Python on a Rust scheduling core.

Every public name is exported here (and pinned by a test: names are added, never removed).
The package follows the data path, one layer per folder (docs/architecture.md):

- `fastctl` itself: the Kubernetes-free engine. `types` (refs, actions, triggers), `errors`
  (one hierarchy), the Rust `Scheduler`, the `applier` that runs reconciles on it, `log`.
- `fastctl.kube`: the API layer. Resources, the object API, watcher → reflector → Store,
  Events, finalizers.
- `fastctl.runtime`: Controller (events → triggers → applier), Manager, metrics, health,
  leader election.
- `fastctl.testing`: a real local control plane, pytest fixtures, the scheduler model.
"""

from fastctl._applier import DEFAULT_CONCURRENCY, ApplierConfig, applier
from fastctl._core import Scheduler
from fastctl._version import version as _installed_version
from fastctl.errors import (
    ApiError,
    FastctlError,
    KubeconfigError,
    LeadershipLost,
    ReconcileCancelled,
    ReconcileTimeout,
    ResourceNotFound,
    WatchError,
    WatchStreamError,
)
from fastctl.kube import (
    Discovery,
    EventKind,
    Recorder,
    ResolvedResource,
    Resource,
    Store,
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

__all__ = [
    "DEFAULT_CONCURRENCY",
    "INITIAL_LIST_PRIORITY",
    "Action",
    "ApiError",
    "ApplierConfig",
    "Controller",
    "Discovery",
    "ErrorPolicy",
    "EventKind",
    "FastctlError",
    "KubeconfigError",
    "LeaderElection",
    "LeaderElector",
    "LeadershipLost",
    "Manager",
    "Mapper",
    "ObjectRef",
    "Reconcile",
    "ReconcileCancelled",
    "ReconcileResult",
    "ReconcileTimeout",
    "Recorder",
    "ResolvedResource",
    "Resource",
    "ResourceNotFound",
    "Scheduler",
    "Store",
    "Trigger",
    "WatchConfig",
    "WatchError",
    "WatchEvent",
    "WatchStreamError",
    "applier",
    "finalizer",
    "load_client",
    "reflector",
    "watcher",
]

__version__: str = _installed_version()
"""The version of fastctl: the one in Cargo.toml (see `fastctl._version`)."""
