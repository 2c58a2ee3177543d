"""Controllers: the builder (`Controller`), its frozen spec, the environment a run is
given, and the run itself. Only `Controller` is public; the rest is how it is put together
(docs/architecture.md)."""

from fastctl.runtime._triggers import INITIAL_LIST_PRIORITY
from fastctl.runtime.controller._controller import Controller

__all__ = ["INITIAL_LIST_PRIORITY", "Controller"]
