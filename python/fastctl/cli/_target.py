"""The one declaration of an operator: ``module:attr``, imported and built.

``fastctl run`` and ``fastctl manifests`` read an operator the same way, here: the module
is imported, `attr` is built (a factory is called with the client, and with
``namespace=``/``concurrency=`` when those flags are given), and what comes back, with the
module's ``WEBHOOKS``, ``CRDS`` and ``RBAC``, is described once
(`fastctl.deploy._operator.describe`).
What one command runs is therefore what the other deploys.

A flag the factory cannot take is an error naming it, never dropped: ``--namespace`` for a
factory with no ``namespace`` parameter (or for a target that is already built) would
otherwise run the operator on every namespace while the manifests grant one.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from fastctl.cli import CliError

__all__ = ["FACTORY_FLAGS", "Target", "build", "load"]

FACTORY_FLAGS = ("namespace", "concurrency")
"""Flags passed to a factory as keywords of the same name."""


@dataclass(frozen=True, slots=True)
class Target:
    """``module:attr`` imported: the text, the module and the attribute."""

    spec: str
    module: ModuleType | None
    value: Any


def load(spec: str) -> Target:
    """Import ``module:attr`` (``module`` may also be a path to a .py file)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"expected module:attr, got {spec!r}")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.exists():
            raise CliError(f"cannot import {module_name}: no such file")
        sys.path.insert(0, str(path.parent.resolve()))
        module_name = path.stem
    else:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise CliError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise CliError(f"{module_name} has no attribute {attr!r}") from None
    return Target(spec, module, value)


async def build(target: Target, client: Any, args: argparse.Namespace) -> Any:
    """What `target` builds: a factory's result (awaited if it is a coroutine), or the
    target itself when it is already a Controller, Controllers or a Manager."""
    from fastctl.runtime.controller import Controller
    from fastctl.runtime.manager import Manager

    given = {name: getattr(args, name, None) for name in FACTORY_FLAGS}
    given = {name: value for name, value in given.items() if value is not None}
    value = target.value
    if isinstance(value, Controller | Manager) or (
        not callable(value) and isinstance(value, Iterable)
    ):
        for name in given:
            raise CliError(
                f"--{name}: {target.spec} is already built, so the flag cannot reach it "
                f"(make it a function of the client that takes {name}=)"
            )
        return value
    if not callable(value):
        raise CliError(
            f"{target.spec} is a {type(value).__name__}: expected a Controller, Controllers, "
            "a Manager, or a function of the client that returns one"
        )
    try:
        params = inspect.signature(value).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for name in given:
        if name not in params and not takes_any:
            raise CliError(
                f"--{name}: {target.spec} takes no {name}= parameter, so the flag cannot "
                f"apply (add one to the factory, or drop the flag)"
            )
    result = value(client, **given)
    if inspect.isawaitable(result):
        result = await result
    return result
