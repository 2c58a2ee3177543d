"""Import only the pieces of kubernetes-asyncio fastctl uses, not its whole generated API.

``import kubernetes_asyncio`` (and so any of its submodules) runs the package's
``__init__``, which imports every generated API class and all ~770 model modules: about
0.4 s of CPU and 30 MB of memory in every process that imports fastctl, for classes
fastctl never touches (it uses the configuration, the kubeconfig loader and the ApiClient's
session; its requests are raw bytes, `fastctl.kube._http`).

`install` (run when this module is imported, as `fastctl.kube` does first) registers the
three heavy packages (``kubernetes_asyncio``, its ``client`` and ``client.models``) in
``sys.modules`` without running their ``__init__``: their submodules import as usual,
``ApiClient`` and ``Configuration`` come from their own modules, and the first use of any
other name (``client.CoreV1Api``, ``client.V1Pod``, ``watch``, ``__version__``, an
ApiClient deserialising into a model) runs the real ``__init__`` then, so code that uses
kubernetes-asyncio's typed API beside fastctl sees the whole package, only later. When
kubernetes-asyncio was imported before fastctl, nothing changes.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Mapping

__all__ = ["EAGER_ENV", "LAZY_PACKAGES", "install", "is_deferred"]

LAZY_PACKAGES: Mapping[str, Mapping[str, str]] = {
    "kubernetes_asyncio": {},
    "kubernetes_asyncio.client": {"ApiClient": "api_client", "Configuration": "configuration"},
    "kubernetes_asyncio.client.models": {},
}
"""Each package deferred, with the names it serves from one light submodule each (any
other name runs the package's real ``__init__``)."""


EAGER_ENV = "FASTCTL_EAGER_IMPORT"
"""Set (to anything but empty or ``0``), fastctl defers nothing: the escape hatch for code
that relies on kubernetes-asyncio's package being whole from the start."""


def install() -> None:
    """Defer the packages of `LAZY_PACKAGES` (parents first), unless already imported or
    `EAGER_ENV` asks not to."""
    if "kubernetes_asyncio" in sys.modules or os.environ.get(EAGER_ENV, "") not in ("", "0"):
        return
    for name, light in LAZY_PACKAGES.items():
        _defer(name, light)


def _defer(name: str, light: Mapping[str, str]) -> None:
    spec = importlib.util.find_spec(name)  # imports the parent: already deferred above
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"fastctl needs the package {name} (pip install kubernetes-asyncio)")
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def __getattr__(attr: str) -> object:
        """A name the package does not have yet: a submodule, a light name, or the rest."""
        if importlib.util.find_spec(f"{name}.{attr}") is not None:
            return importlib.import_module(f"{name}.{attr}")
        if attr in light:
            value = getattr(importlib.import_module(f"{name}.{light[attr]}"), attr)
            setattr(module, attr, value)
            return value
        del module.__getattr__  # once: the real __init__ defines what is left
        loader.exec_module(module)
        return getattr(module, attr)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def is_deferred(module: types.ModuleType) -> bool:
    """Whether `module`'s real ``__init__`` has not run yet (for tests and diagnostics)."""
    return "__getattr__" in vars(module)


install()
