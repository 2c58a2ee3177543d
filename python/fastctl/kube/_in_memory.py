"""In-process API servers, by the host their clients name.

A test's fake cluster (`fastctl.testing.FakeCluster`) registers itself here under a host
of its own (``http://fake-1.cluster.invalid``); `fastctl.kube._http.request` sends a request
whose client names such a host to it instead of onto the network. Everything above that
one call (the object API, the watcher, the Lease clients, every client a Manager makes from
a configuration) runs as it does against a real server, with nothing patched.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["SESSIONS", "InMemorySession"]


class InMemorySession(Protocol):
    """The part of ``aiohttp.ClientSession`` that fastctl's HTTP layer calls."""

    async def request(self, method: str, url: str, **kwargs: Any) -> Any: ...


SESSIONS: dict[str, InMemorySession] = {}
"""The in-process servers, by host (scheme and authority, as a client's configuration
names it)."""
