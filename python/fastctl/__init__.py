"""fastctl: Kubernetes controllers in Python on a Rust scheduling core.

The names exported here are the public contract (see docs/ and DESIGN.md).
"""

from fastctl._core import Scheduler
from fastctl._http import ApiError
from fastctl.client import KubeconfigError, load_client
from fastctl.controller import Controller
from fastctl.leader import LeaderElection, LeaderElector
from fastctl.manager import LeadershipLost, Manager
from fastctl.resource import Resource, ResourceNotFound
from fastctl.runner import DEFAULT_CONCURRENCY, ReconcileCancelled, ReconcileTimeout, applier
from fastctl.store import Store
from fastctl.types import Action, ObjectRef, ReconcileResult, Trigger

__all__ = [
    "DEFAULT_CONCURRENCY",
    "Action",
    "ApiError",
    "Controller",
    "KubeconfigError",
    "LeaderElection",
    "LeaderElector",
    "LeadershipLost",
    "Manager",
    "ObjectRef",
    "ReconcileCancelled",
    "ReconcileResult",
    "ReconcileTimeout",
    "Resource",
    "ResourceNotFound",
    "Scheduler",
    "Store",
    "Trigger",
    "applier",
    "load_client",
]
