"""The runtime: the `Controller` (watch events → triggers → the applier), the watch a
Manager shares between controllers, the `Manager` itself, its metrics and health server,
leader election (`fastctl.runtime.leader`), sharding (`fastctl.runtime.sharding`) and the
storage-version migration of a CRD (`StorageMigration`).
Public names are re-exported here; the modules behind them are private.
"""

from fastctl.runtime._children import RelatedCache
from fastctl.runtime._filters import (
    Predicate,
    all_of,
    annotations_changed,
    any_of,
    generation_changed,
    labels_changed,
)
from fastctl.runtime._inspect import ObjectInspection, QueueSummary, ReasonCount
from fastctl.runtime._read_your_writes import ReadYourWrites
from fastctl.runtime._storage_migration import StorageMigration
from fastctl.runtime.controller import INITIAL_LIST_PRIORITY, Controller
from fastctl.runtime.leader import LeaderElection, LeaderElector
from fastctl.runtime.manager import Manager, ServerOptions
from fastctl.runtime.sharding import Sharding

__all__ = [
    "INITIAL_LIST_PRIORITY",
    "Controller",
    "LeaderElection",
    "LeaderElector",
    "Manager",
    "ObjectInspection",
    "Predicate",
    "QueueSummary",
    "ReadYourWrites",
    "ReasonCount",
    "RelatedCache",
    "ServerOptions",
    "Sharding",
    "StorageMigration",
    "all_of",
    "annotations_changed",
    "any_of",
    "generation_changed",
    "labels_changed",
]
