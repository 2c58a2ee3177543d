"""The lean transport's connection over TLS done in the extension (rustls).

`TlsConnection` is `fastctl.kube._http1.Connection` on a plain TCP transport with
`fastctl._core.TlsSession` in between: each read is decrypted in one call and each request
encrypted in one call, instead of the SSL protocol's several Python-level calls per read
and write. While an answer is awaited, a read is decrypted and framed in the same call
(`Http1Reader.feed_tls`): the plaintext stays in the extension until the answer is whole.
The pool waits for its handshake (`ready`) before using it.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING

import aiohttp

from fastctl._core import TlsConfig, TlsSession
from fastctl.kube._http1 import _HEAD, _STREAM, Connection

if TYPE_CHECKING:
    from fastctl.kube._transport import Pool

__all__ = ["TlsConnection"]


class TlsConnection(Connection):
    """A `Connection` whose TLS is the extension's: made on a plain TCP transport, ready
    once `ready` is done (the handshake, or its error: ``ssl.SSLCertVerificationError``
    for a refused certificate, ``ssl.SSLError`` else, as Python's `ssl` raises them)."""

    def __init__(self, pool: Pool, config: TlsConfig, server_name: str) -> None:
        super().__init__(pool)
        self.tls = TlsSession(config, server_name)
        self.ready: asyncio.Future[None] = pool.loop.create_future()
        self.handshaken = False

    def send(
        self, data: bytes, waiter: asyncio.Future[None], no_body: bool, stream: float | None = None
    ) -> None:
        super().send(self.tls.encrypt(data), waiter, no_body, stream)

    def close(self) -> None:
        transport = self.transport
        if self.handshaken and transport is not None and not transport.is_closing():
            transport.write(self.tls.close())  # close_notify, as an SSL transport sends
        super().close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.transport.write(self.tls.start())  # type: ignore[union-attr]  # set just now

    def data_received(self, data: bytes) -> None:
        if self.phase == _HEAD and self.waiter is not None and self.handshaken:
            try:  # an answer awaited: decrypted and framed in one call
                answer, out = self.reader.feed_tls(self.tls, data)
            except ssl.SSLError as exc:
                self._tls_failed(exc)
                return
            except ValueError as exc:
                self._malformed(exc)
                return
            if out is not None:
                self.transport.write(out)  # type: ignore[union-attr]
            if answer is not None:
                self._answer(answer)
            elif not self.head_at and self.reader.phase != _HEAD:
                self.head_at = self.pool.clock()  # the head is in, the body is not yet
            return
        try:
            plain, out = self.tls.feed(data)
        except ssl.SSLError as exc:
            self._tls_failed(exc)
            return
        if out is not None:
            self.transport.write(out)  # type: ignore[union-attr]  # data comes after it
        if not self.handshaken:
            if self.tls.handshaking:
                return
            self.handshaken = True
            if not self.ready.done():
                self.ready.set_result(None)
        if plain:  # none for a TLS 1.3 session ticket, read at any time
            Connection.data_received(self, plain)

    def _tls_failed(self, exc: ssl.SSLError) -> None:
        """A refused certificate or a broken session: the handshake's error, or the
        request's or watch's under way, and the connection dropped."""
        if not self.ready.done():
            self.ready.set_exception(exc)
        elif self.phase == _STREAM:
            self.stream.lost(exc)  # type: ignore[union-attr]
        else:
            self._fail(aiohttp.ClientOSError(exc.errno, str(exc)))
        self.keep_alive = False
        self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(
                exc or ConnectionResetError("the server closed the connection in the TLS handshake")
            )
        super().connection_lost(exc)
