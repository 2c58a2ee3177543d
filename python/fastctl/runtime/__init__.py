"""The runtime: the `Controller` (watch events → triggers → the applier), the watch a
Manager shares between controllers, the `Manager` itself, its metrics and health server,
and leader election (`fastctl.runtime.leader`). Public names are re-exported here; the
modules behind them are private.
"""

from fastctl.runtime._controller import INITIAL_LIST_PRIORITY, Controller
from fastctl.runtime._inspect import ObjectInspection, QueueSummary, ReasonCount
from fastctl.runtime._manager import Manager
from fastctl.runtime.leader import LeaderElection, LeaderElector

__all__ = [
    "INITIAL_LIST_PRIORITY",
    "Controller",
    "LeaderElection",
    "LeaderElector",
    "Manager",
    "ObjectInspection",
    "QueueSummary",
    "ReasonCount",
]
