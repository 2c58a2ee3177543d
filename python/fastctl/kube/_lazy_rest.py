"""An `ApiClient` whose aiohttp session is made when something first needs it.

kubernetes-asyncio's ``ApiClient`` makes its REST client at once, and that client opens an
aiohttp session: the first use of ``aiohttp.ClientSession`` imports the whole of aiohttp
(its client, its server-side helpers, the default TLS contexts it makes at import), about
0.1 s of CPU. fastctl's object calls and watches do not go through that session: they go
over its own transport (`fastctl.kube._transport`), which needs only the configuration's
TLS settings. So `new_client` (what `load_client` returns) runs the installed
``ApiClient.__init__`` as it is, with `LazyRest` in place of its REST client: it holds
what the transport reads (the TLS context, built from the configuration as
kubernetes-asyncio builds it and as early, so a bad certificate file fails as before; the
proxy; the connection limit), and makes kubernetes-asyncio's own REST client, session and
all, at the first use of anything else (``pool_manager``, ``request``, the generated API's
``GET``...): a list read page by page, a fake cluster's session swapped in, a typed API
call. Assigning ``pool_manager`` replaces the session as it does on the real client.
"""

from __future__ import annotations

import ssl
import types
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

__all__ = ["ApiClient", "LazyRest", "new_client"]


class LazyRest:
    """kubernetes-asyncio's ``RESTClientObject`` until its session is needed."""

    def __init__(self, configuration: Configuration, pools_size: int = 4, maxsize: Any = None):
        self._configuration = configuration
        self._real: Any = None
        self.replaced = False  # a session assigned from outside (``pool_manager = ...``)
        self.trust_env = True  # kubernetes-asyncio's default; `load_client` may turn it off
        self.maxsize: int = maxsize or configuration.connection_pool_maxsize
        # As ``RESTClientObject.__init__`` sets them, at the same time.
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
        if not configuration.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if configuration.disable_strict_ssl_verification:
            context.verify_flags &= ~ssl.VERIFY_X509_STRICT
        self.ssl_context = context
        self.server_hostname = configuration.tls_server_name
        self.proxy = configuration.proxy
        self.proxy_headers = configuration.proxy_headers

    @property
    def made(self) -> bool:
        """Whether kubernetes-asyncio's REST client (and its session) exists yet."""
        return self._real is not None

    def real(self) -> Any:
        """kubernetes-asyncio's REST client, made now if it was not."""
        if self._real is None:
            from kubernetes_asyncio.client import rest

            real = rest.RESTClientObject(self._configuration, maxsize=self.maxsize)
            if not self.trust_env and hasattr(real.pool_manager, "_trust_env"):
                real.pool_manager._trust_env = False
            self._real = real
        return self._real

    @property
    def pool_manager(self) -> Any:
        return self.real().pool_manager

    @pool_manager.setter
    def pool_manager(self, session: Any) -> None:
        self.real().pool_manager = session
        self.replaced = True

    async def close(self) -> None:
        if self._real is not None:
            await self._real.close()

    def __getattr__(self, name: str) -> Any:
        """Anything else (``request``, ``GET``...) is the real REST client's."""
        if name.startswith("__") or name in ("_real", "_configuration"):
            raise AttributeError(name)
        return getattr(self.real(), name)


def new_client(configuration: Configuration) -> ApiClient:
    """``ApiClient(configuration)`` with a `LazyRest`: the installed ``__init__`` runs
    unchanged, its name ``rest`` (the REST client's module) read from a namespace that
    holds `LazyRest`. An ``__init__`` of another shape (a closure, no ``rest``) gets the
    plain ``ApiClient``: the session is made at once, as before."""
    init: Any = ApiClient.__init__
    code = getattr(init, "__code__", None)
    if code is None or init.__closure__ or "rest" not in code.co_names:
        return ApiClient(configuration)
    namespace = dict(init.__globals__)
    namespace["rest"] = types.SimpleNamespace(RESTClientObject=LazyRest)
    lazy_init = types.FunctionType(code, namespace, init.__name__, init.__defaults__)
    lazy_init.__kwdefaults__ = init.__kwdefaults__
    client = ApiClient.__new__(ApiClient)
    lazy_init(client, configuration)
    return client
