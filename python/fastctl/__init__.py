"""fastctl: Kubernetes controllers in Python on a Rust scheduling core.

The names exported here are the public contract (see docs/ and DESIGN.md).
"""

from fastctl._core import Scheduler
from fastctl.types import Action, ObjectRef, ReconcileResult, Trigger

__all__ = ["Action", "ObjectRef", "ReconcileResult", "Scheduler", "Trigger"]
