"""fastctl: Kubernetes controllers in Python on a Rust scheduling core.

The names exported here are the public contract (see docs/ and DESIGN.md).
"""

from fastctl._core import Scheduler
from fastctl._http import ApiError
from fastctl.client import KubeconfigError, load_client
from fastctl.controller import Controller
from fastctl.events import Recorder
from fastctl.finalizer import finalizer
from fastctl.leader import LeaderElection, LeaderElector
from fastctl.manager import LeadershipLost, Manager
from fastctl.resource import Discovery, ResolvedResource, Resource, ResourceNotFound
from fastctl.runner import DEFAULT_CONCURRENCY, ReconcileCancelled, ReconcileTimeout, applier
from fastctl.store import Store, reflector
from fastctl.types import Action, ObjectRef, ReconcileResult, Trigger
from fastctl.watcher import EventKind, WatchEvent, watcher

__all__ = [
    "DEFAULT_CONCURRENCY",
    "Action",
    "ApiError",
    "Controller",
    "Discovery",
    "EventKind",
    "KubeconfigError",
    "LeaderElection",
    "LeaderElector",
    "LeadershipLost",
    "Manager",
    "ObjectRef",
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
    "WatchEvent",
    "applier",
    "finalizer",
    "load_client",
    "reflector",
    "watcher",
]
