"""fastctl: Kubernetes controllers in Python on a Rust scheduling core.

The names exported here are the public contract (see docs/ and DESIGN.md).
"""

from fastctl._core import Scheduler
from fastctl.runner import DEFAULT_CONCURRENCY, ReconcileCancelled, ReconcileTimeout, applier
from fastctl.types import Action, ObjectRef, ReconcileResult, Trigger

__all__ = [
    "DEFAULT_CONCURRENCY",
    "Action",
    "ObjectRef",
    "ReconcileCancelled",
    "ReconcileResult",
    "ReconcileTimeout",
    "Scheduler",
    "Trigger",
    "applier",
]
