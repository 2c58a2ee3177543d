"""The Manager: controllers, leader election, sharding, servers and shutdown, as one
process. Public: `Manager`, `ServerOptions`; the rest is how it is put together."""

from fastctl.runtime.manager._manager import Manager
from fastctl.runtime.manager._servers import ServerOptions

__all__ = ["Manager", "ServerOptions"]
