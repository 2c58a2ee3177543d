"""Controllers: the builder (`Controller`), its frozen spec, the environment a run is
given, and the run itself. Only `Controller` is public; the rest is how it is put together
(docs/architecture.md)."""

from fastctl.runtime._triggers import INITIAL_LIST_PRIORITY
from fastctl.runtime.controller._controller import Controller
from fastctl.runtime.controller._environment import Environment, ShardAssignment
from fastctl.runtime.controller._spec import ControllerSpec, WatchUse

__all__ = [
    "INITIAL_LIST_PRIORITY",
    "Controller",
    "ControllerSpec",
    "Environment",
    "ShardAssignment",
    "WatchUse",
]
