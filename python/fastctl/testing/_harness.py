"""Running an operator's controllers in a test: until the cluster is quiet, or one
reconcile by hand.

`run_until_quiet` starts controllers (or a `Manager`) and stops them gracefully once they
are quiet: for `quiet` seconds of the loop's clock (on a `VirtualTimeLoop` that wait takes
no real time) no reconcile ended, none is running at the end, and every controller's cache
has its first list. Requests the runtime makes on its own (a leader's Lease renewals, the
watches) do not count, so a Manager that leads is quiet too. A requeue or a debounce due
later than `quiet` is not waited for: choose `quiet` above them. Runnables that are neither
(no scheduler of their own) are quiet when the process sent no request to any API server
for `quiet` seconds (what fastctl's HTTP layer counts for its ``rest_client_*`` metrics).

`reconcile_once` calls a controller's reconcile for one object as the controller would
(the object as the server has it now, the controller's context, a typed model's
instance), without watches or a queue; its caches of related objects stay empty.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from fastctl._clock import monotonic
from fastctl.kube._objects import get
from fastctl.kube._request_metrics import REQUESTS

if TYPE_CHECKING:
    from fastctl.runtime.controller import Controller

__all__ = ["reconcile_once", "run_until_quiet"]


class Runnable(Protocol):
    """A `Controller` or a `Manager`."""

    def shutdown(self) -> None: ...


async def _run(runnable: Any) -> None:
    params = inspect.signature(runnable.run).parameters
    if "handle_signals" in params:
        await runnable.run(handle_signals=False)
    else:
        await runnable.run()


def _sent() -> int:
    """Requests this process has sent so far, to any API server."""
    return sum(REQUESTS.counts().values())


def _controllers(runnables: tuple[Runnable, ...]) -> list[Any]:
    """The controllers among `runnables` (a Manager's own, for a Manager)."""
    found: list[Any] = []
    for runnable in runnables:
        inner = getattr(runnable, "controllers", None)
        for ctl in inner if inner is not None else [runnable]:
            if hasattr(ctl, "scheduler") and hasattr(ctl, "store"):
                found.append(ctl)
    return found


def _activity(controllers: list[Any]) -> int:
    """Triggers queued, reconciles started and ended so far, all controllers together (the
    schedulers' totals); requests sent, without controllers."""
    if not controllers:
        return _sent()
    total = 0
    for ctl in controllers:
        stats = ctl.scheduler.stats(now=monotonic())
        total += stats["adds_total"] + stats["pops_total"] + stats["done_total"]
    return total


def _settled(controllers: list[Any]) -> bool:
    """Every cache has its first list, no reconcile runs and none is ready to."""
    for ctl in controllers:
        stats = ctl.scheduler.stats(now=monotonic())
        if not ctl.store.is_ready or stats["in_flight"] or stats["depth"]:
            return False
    return True


async def run_until_quiet(
    *runnables: Runnable,
    quiet: float = 5.0,
    timeout: float | None = 3600.0,
) -> None:
    """Run `runnables` until they are quiet for `quiet` seconds (see the module docstring),
    then stop them and wait for their graceful end. A runnable that fails raises here;
    `TimeoutError` when they are not quiet within `timeout` seconds."""
    if not runnables:
        raise ValueError("run_until_quiet needs a Controller or a Manager to run")
    tasks = [asyncio.ensure_future(_run(r)) for r in runnables]
    try:
        async with asyncio.timeout(timeout):
            controllers = _controllers(runnables)
            while True:
                seen = _activity(controllers)
                done, _ = await asyncio.wait(
                    tasks, timeout=quiet, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    task.result()  # its error, if it failed
                    raise RuntimeError("a runnable ended before it was quiet")
                if _activity(controllers) == seen and _settled(controllers):
                    break
    finally:
        for runnable in runnables:
            runnable.shutdown()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception):
            raise result


async def reconcile_once(controller: Controller, obj: Any) -> Any:
    """Reconcile one object with `controller`'s reconcile, as the controller would: the
    object (a dict or a model instance, or ``(name, namespace)``) is read from the server
    first, so the reconcile sees what is stored. Returns what the reconcile returns (an
    `Action` or None); its exception propagates."""
    if isinstance(obj, tuple):
        name, namespace = obj
    else:
        meta = obj["metadata"] if isinstance(obj, Mapping) else obj.metadata
        if isinstance(meta, Mapping):
            name, namespace = meta["name"], meta.get("namespace")
        else:
            name, namespace = meta.name, meta.namespace
    current = await get(controller.client, controller.resource, name, namespace=namespace)
    if controller.watch_config.strip_managed_fields:
        current["metadata"].pop("managedFields", None)  # as the controller's cache has it
    result = controller.reconcile(current, controller.context)
    if inspect.isawaitable(result):
        result = await result
    return result
