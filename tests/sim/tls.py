"""One TLS context for every API client of a run.

`kubernetes_asyncio`'s REST layer makes a TLS context, loading the system's CA bundle, for
each `ApiClient` it creates: about 20 ms of CPU each. A simulated Manager makes one client
per controller, elector and shard member, so that load was most of a schedule's CPU, for
requests that never use TLS (the simulation answers them in memory). `ssl_once()` is the
`ssl` module as that layer sees it, with `create_default_context` answering one context
made once.
"""

from __future__ import annotations

import ssl
import types

import kubernetes_asyncio.client.rest as rest_module

__all__ = ["rest_module", "ssl_once"]

_CONTEXT = ssl.create_default_context()


def ssl_once() -> types.SimpleNamespace:
    """`ssl`, whose `create_default_context` returns one context made at import."""
    shim = types.SimpleNamespace(**vars(ssl))
    shim.create_default_context = lambda *args, **kwargs: _CONTEXT
    return shim
