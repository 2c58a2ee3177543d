"""Stand-ins: a module's names that import the real module when first called.

Some modules fastctl needs import, as they load, a module they use only on a path fastctl
never takes: kubernetes-asyncio's ``ApiClient`` module imports dateutil's parser (for a
model's dates) and multiprocessing's thread pool (for the generated API's ``async_req``);
its kubeconfig loader imports its OpenID token refresher, whose class evaluates an aiohttp
annotation as it is made (all of aiohttp), for a kubeconfig with an OIDC user. A stand-in
takes such a module's place in ``sys.modules`` while the importing module loads
(`import_with_stand_ins`; it leaves afterwards, so any later import is the real one): the
names the importer takes from it (``from dateutil.parser import parse``) are callables that
import the real module then and call the real name; any other name imports it and is the
real module's.
The real module, once imported, replaces the stand-in in ``sys.modules``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import threading
import types
from collections.abc import Callable, Mapping

__all__ = ["import_with_stand_ins", "stand_in"]

_LOCK = threading.RLock()
"""Held while a stand-in is put in place, taken away, or replaced by its real module."""


def stand_in(name: str, callables: tuple[str, ...]) -> types.ModuleType:
    """A stand-in for the module `name` whose `callables` call the real module's."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)

    def real() -> types.ModuleType:
        with _LOCK:
            if sys.modules.get(name) is module:
                del sys.modules[name]
            return importlib.import_module(name)

    def __getattr__(attr: str) -> object:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(real(), attr)

    def calling(attr: str) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            return getattr(real(), attr)(*args, **kwargs)

        call.__name__ = call.__qualname__ = attr
        return call

    for attr in callables:
        setattr(module, attr, calling(attr))
    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def import_with_stand_ins(name: str, stand_ins: Mapping[str, tuple[str, ...]]) -> types.ModuleType:
    """Import the module `name` with a stand-in for each module of `stand_ins` not imported
    yet; the stand-ins leave ``sys.modules`` after it (the names it took from them stay
    its own)."""
    if not stand_ins or name in sys.modules:
        return importlib.import_module(name)
    placed: dict[str, types.ModuleType] = {}
    with _LOCK:
        for other, callables in stand_ins.items():
            if other not in sys.modules:
                placed[other] = sys.modules[other] = stand_in(other, callables)
    try:
        return importlib.import_module(name)
    finally:
        with _LOCK:
            for other, module in placed.items():
                if sys.modules.get(other) is module:
                    del sys.modules[other]
