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

Two more packages are deferred the same way, for the same reason: a controller's path to
its first reconcile does not need them. ``aiohttp``'s ``__init__`` imports its whole client
and server and makes its default TLS contexts (about 0.1 s of CPU), while fastctl's object
calls and watches go over its own transport, which only raises and classifies aiohttp's
client errors: those come from their own light module (``aiohttp.client_exceptions``), and
the first use of any other name (``aiohttp.ClientSession``: a list read page by page, a
session a user opens) runs the real ``__init__``. ``urllib3``, which kubernetes-asyncio's
``Configuration`` imports for one helper (HTTP basic auth), loads at that helper's first use.
``prometheus_client``'s ``__init__`` (its exposition, the process collectors it registers
in its global registry) runs when a Manager registers those collectors or a metrics server
starts; fastctl's collectors take their classes from its light submodules before that.

That first use may come from several threads at once, and the real ``__init__`` takes a while
(it imports hundreds of modules, setting the package's names one by one). So it runs under
the import system's own lock for the package (the one a normal ``import`` holds while a
module initialises): a thread that meets a name not set yet waits until the ``__init__`` has
finished, instead of seeing a half-filled package. As with a normal import, a thread whose
wait would close a cycle (it holds the import of a module that the ``__init__`` is waiting
for) does not wait: it gets the name if it is already set, else the ``AttributeError`` of a
partially initialised module. A ``__init__`` that fails leaves the package as it was before
it ran, still deferred: the next use runs it again (as a failed import leaves nothing in
``sys.modules`` to be found the next time).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Callable, Mapping
from importlib import _bootstrap
from typing import TYPE_CHECKING, Any

from fastctl.kube._stand_ins import import_with_stand_ins

if TYPE_CHECKING:
    from importlib.abc import Loader

__all__ = ["EAGER_ENV", "LAZY_PACKAGES", "STAND_INS", "install", "is_deferred", "stand_ins_for"]

_AIOHTTP_ERRORS = (
    "ClientError",
    "ClientConnectionError",
    "ClientConnectionResetError",
    "ClientOSError",
    "ClientConnectorError",
    "ClientProxyConnectionError",
    "ClientSSLError",
    "ClientConnectorDNSError",
    "ClientConnectorSSLError",
    "ClientConnectorCertificateError",
    "ConnectionTimeoutError",
    "SocketTimeoutError",
    "ServerConnectionError",
    "ServerTimeoutError",
    "ServerDisconnectedError",
    "ServerFingerprintMismatch",
    "ClientResponseError",
    "ClientHttpProxyError",
    "ContentTypeError",
    "ClientPayloadError",
    "InvalidURL",
    "InvalidUrlClientError",
)
"""aiohttp's client errors, which fastctl's own transport raises and its retries classify:
their module (``aiohttp.client_exceptions``) is light, the package's ``__init__`` is not."""

LAZY_PACKAGES: Mapping[str, Mapping[str, str]] = {
    "kubernetes_asyncio": {},
    "kubernetes_asyncio.client": {"ApiClient": "api_client", "Configuration": "configuration"},
    "kubernetes_asyncio.client.models": {},
    "aiohttp": dict.fromkeys(_AIOHTTP_ERRORS, "client_exceptions"),
    "urllib3": {},
    "prometheus_client": {"CollectorRegistry": "registry", "Metric": "metrics_core"},
}
"""Each package deferred, with the names it serves from one light submodule each (any
other name runs the package's real ``__init__``). A package imported before fastctl (and
the packages beneath it) is left as it is."""


STAND_INS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "kubernetes_asyncio.client.api_client": {
        "dateutil.parser": ("parse",),
        "multiprocessing.pool": ("ThreadPool",),
    },
    "kubernetes_asyncio.config": {"kubernetes_asyncio.config.openid": ("OpenIDRequestor",)},
}
"""Modules fastctl imports (``ApiClient``'s, served above; the kubeconfig loaders, which
`load_client` imports), with the modules they import for a name they call only on a path
fastctl does not take (a model's date deserialised, the thread pool of the generated API's
``async_req``, the OpenID token refresher of an OIDC user, which loads all of aiohttp):
imported with stand-ins for those (`fastctl.kube._stand_ins`, `stand_ins_for`)."""


def stand_ins_for(name: str) -> Mapping[str, tuple[str, ...]]:
    """The stand-ins to import the module `name` with (none if `EAGER_ENV` is set)."""
    return {} if _eager() else STAND_INS.get(name, {})


def _eager() -> bool:
    return os.environ.get(EAGER_ENV, "") not in ("", "0")


EAGER_ENV = "FASTCTL_EAGER_IMPORT"
"""Set (to anything but empty or ``0``), fastctl defers nothing: the escape hatch for code
that relies on kubernetes-asyncio's package being whole from the start."""


_module_lock: Callable[[str], contextlib.AbstractContextManager[Any]] | None = getattr(
    _bootstrap, "_ModuleLockManager", None
)
"""The import system's per-module lock (with its deadlock detection), as a context manager."""

_DEADLOCK: tuple[type[BaseException], ...] = tuple(
    error for error in (getattr(_bootstrap, "_DeadlockError", None),) if error is not None
)
"""What taking `_module_lock` raises instead of waiting when the wait would close a cycle."""

_FALLBACK_LOCK = threading.RLock()
"""The lock of every package's ``__init__`` if the import system's is not found (it is a
private name): correct, without the deadlock detection."""

_loading: set[str] = set()
"""The packages whose real ``__init__`` is running (in the thread holding their lock)."""


def _lock(name: str) -> contextlib.AbstractContextManager[Any]:
    return _module_lock(name) if _module_lock is not None else _FALLBACK_LOCK


def install() -> None:
    """Defer the packages of `LAZY_PACKAGES` (parents first), unless already imported or
    `EAGER_ENV` asks not to."""
    if _eager():
        return
    imported = {name.partition(".")[0] for name in LAZY_PACKAGES if name in sys.modules}
    for name, light in LAZY_PACKAGES.items():
        if name.partition(".")[0] not in imported:
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
            submodule = f"{name}.{light[attr]}"
            value = getattr(import_with_stand_ins(submodule, stand_ins_for(submodule)), attr)
            setattr(module, attr, value)
            return value
        constants = _constants(spec.origin)
        if attr in constants:
            setattr(module, attr, constants[attr])
            return constants[attr]
        lock = _lock(name)
        try:
            lock.__enter__()
        except _DEADLOCK:  # the __init__'s thread waits for this one: do not wait for it
            return _partial(module, attr)
        try:
            return _load(module, loader, __getattr__, attr)
        finally:
            lock.__exit__(None, None, None)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    _HOOKS[name] = __getattr__
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


@functools.cache
def _constants(origin: str | None) -> dict[str, object]:
    """The names a package's ``__init__`` sets to a plain literal (``__version__ = "36.1.0"``),
    read from its source without running it.

    Its own submodules ask for these while the package is deferred
    (``kubernetes_asyncio.dynamic`` imports ``from kubernetes_asyncio import __version__``):
    running the whole ``__init__`` then would import that submodule again while it is half
    initialised, a circular import that a normal import order never meets.
    """
    if origin is None:
        return {}
    try:
        with open(origin, encoding="utf-8") as source:
            tree = ast.parse(source.read(), origin)
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
                found[target.id] = node.value.value
    return found


def _load(
    module: types.ModuleType, loader: Loader, hook: Callable[[str], object], attr: str
) -> object:
    """`attr` of the whole package, running its real ``__init__`` if no thread has yet (the
    caller holds the package's lock)."""
    namespace = vars(module)
    if namespace.get("__getattr__") is not hook:  # loaded while this thread waited
        return getattr(module, attr)
    if module.__name__ in _loading:  # asked by the ``__init__`` itself, in this thread
        return _partial(module, attr)
    before = dict(namespace)
    _loading.add(module.__name__)
    try:
        loader.exec_module(module)
    except BaseException:
        namespace.clear()  # as it was: still deferred, and the next use tries again
        namespace.update(before)
        raise
    finally:
        _loading.discard(module.__name__)
    if namespace.get("__getattr__") is hook:  # the package's own, if it has one, stays
        del namespace["__getattr__"]
    return getattr(module, attr)


def _partial(module: types.ModuleType, attr: str) -> object:
    """`attr` of a package whose ``__init__`` is still running: set already, or the error
    Python gives for a partially initialised module."""
    try:
        return vars(module)[attr]
    except KeyError:
        raise AttributeError(
            f"partially initialized module {module.__name__!r} has no attribute {attr!r} "
            "(its __init__ is still running)",
            name=attr,
            obj=module,
        ) from None


_HOOKS: dict[str, Callable[[str], object]] = {}
"""The ``__getattr__`` each deferred package was given (its real ``__init__`` may define
its own: aiohttp's does)."""


def is_deferred(module: types.ModuleType) -> bool:
    """Whether `module`'s real ``__init__`` has not run yet."""
    hook = _HOOKS.get(module.__name__)
    return hook is not None and vars(module).get("__getattr__") is hook


install()
