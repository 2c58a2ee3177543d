"""Calling a user's handler: a coroutine function is awaited on the loop, a plain function
runs on a thread (so a slow one never stalls the other requests), both under a deadline.

A plain function that outlives its deadline keeps its thread until it returns (a thread
cannot be cancelled); the request is answered at the deadline all the same.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["HandlerTimeout", "call_handler", "describe"]


class HandlerTimeout(TimeoutError):
    """The handler did not return within its deadline."""


def describe(handler: Callable[..., Any]) -> str:
    """``module.qualname`` of a handler, for messages that must name it."""
    module = getattr(handler, "__module__", None) or "?"
    name = getattr(handler, "__qualname__", None) or repr(handler)
    return f"{module}.{name}"


async def call_handler(handler: Callable[..., Any], *args: Any, timeout: float) -> Any:
    """`handler(*args)` within `timeout` seconds, or `HandlerTimeout`."""
    try:
        async with asyncio.timeout(timeout):
            if inspect.iscoroutinefunction(handler):
                return await handler(*args)
            result = await asyncio.to_thread(handler, *args)
            if inspect.isawaitable(result):  # a callable object whose __call__ is async
                return await result
            return result
    except TimeoutError:
        raise HandlerTimeout(f"{describe(handler)} did not return within {timeout:g} s") from None
