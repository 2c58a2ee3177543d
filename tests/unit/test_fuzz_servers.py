"""Fuzzed HTTP requests to the metrics server (TLS, behind the token review) and the probe
server (plain HTTP): whatever bytes a client sends, each server answers with an HTTP status
or closes the connection, in bounded time, and keeps serving; ``/metrics`` answers 200
only to the token the (fake) API server says may read it."""

from __future__ import annotations

import asyncio
import functools
import re
import ssl
import tempfile
from pathlib import Path

import aiohttp
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter

from fastctl._tls import ServingCertificate
from fastctl.runtime import _health
from fastctl.runtime._health import HealthServer

from .fuzzing import fuzz_settings
from .test_metrics_auth import FakeApi, metrics_server

STATUS_LINE = re.compile(rb"HTTP/\d(?:\.\d)? (\d{3}) ")  # aiohttp echoes the asked version
READER = "reader-token"  # the one token FakeApi allows


@functools.cache
def certificate() -> ServingCertificate:
    """One self-signed certificate for every example (key generation is the slow part)."""
    return ServingCertificate.self_signed(
        Path(tempfile.mkdtemp(prefix="fastctl-fuzz-")), ["127.0.0.1"], purpose="metrics"
    )


TEXT = st.text(st.characters(min_codepoint=1, max_codepoint=0x7F), max_size=12)
AUTHORIZATION = st.sampled_from(
    [
        f"Bearer {READER}",
        f"bearer   {READER} ",
        "Bearer other-token",
        "Bearer",
        "Basic cmVhZGVyOnRva2Vu",
        READER,
        "Bearer " + "x" * 9000,
        f"Bearer {READER}\x00",
    ]
) | TEXT.map(lambda t: "Bearer " + t)
HEADER = st.one_of(
    st.tuples(st.just("Authorization"), AUTHORIZATION),
    st.tuples(st.sampled_from(["Content-Length", "Transfer-Encoding"]), TEXT | st.just("-1")),
    st.tuples(st.just("Transfer-Encoding"), st.just("chunked")),
    st.tuples(st.sampled_from(["Host", "Connection", "Expect", "X-A"]), TEXT),
    st.tuples(TEXT, TEXT),
)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """Raw request bytes: mostly a request line and headers, wrong in places, sometimes
    cut short or plain binary."""
    method = draw(st.sampled_from(["GET", "GET", "HEAD", "POST", "OPTIONS", "G\x7fT"]) | TEXT)
    path = draw(
        st.sampled_from(
            ["/metrics", "/healthz", "/readyz", "/metrics?x=1", "//metrics", "/%2e/metrics", "*"]
        )
        | TEXT.map(lambda t: "/" + t)
        | st.just("/" + "a" * 20000)
    )
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", ""]))
    lines = [f"{method} {path} {version}".rstrip()]
    lines += [f"{name}: {value}" for name, value in draw(st.lists(HEADER, max_size=4))]
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
    raw += draw(st.binary(max_size=40))
    shape = draw(st.sampled_from(["whole"] * 6 + ["cut", "binary", "lf-only"]))
    if shape == "cut":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif shape == "binary":
        raw = draw(st.binary(min_size=1, max_size=200))
    elif shape == "lf-only":
        raw = raw.replace(b"\r\n", b"\n")
    return raw


async def exchange(target: str, raw: bytes) -> None:
    registry = CollectorRegistry()
    Counter("scraped_things", "a sample", registry=registry).inc()
    metrics, trust = metrics_server(certificate(), registry)
    probes = HealthServer(0, host="127.0.0.1", metrics=False)
    async with metrics, probes:
        port = probes.port if target == "probes" else metrics.port
        tls = trust if target == "metrics" else None
        async with asyncio.timeout(20):  # a hang guard, not a timing assertion
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
            try:
                writer.write(raw)
                await writer.drain()
                if tls is None:
                    writer.write_eof()  # the server sees the end: a cut request must not hang
                line = await reader.readline()
            except (ConnectionError, ssl.SSLError):
                line = b""  # refused mid-way (a TLS port spoken to in plain text)
            finally:
                writer.close()
        if line:
            match = STATUS_LINE.match(line)
            assert match is not None, line
            assert target != "plain-to-tls", "the TLS port answered plain HTTP"
            path = raw.split(b" ", 2)[1] if raw.count(b" ") >= 2 else b""
            if match.group(1) == b"200" and path.split(b"?")[0] == b"/metrics":
                assert READER.encode() in raw, raw
        # Both servers still serve.
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{probes.port}/healthz") as resp:
                assert resp.status == 200
            url = f"https://127.0.0.1:{metrics.port}/metrics"
            headers = {"Authorization": f"Bearer {READER}"}
            async with http.get(url, ssl=trust, headers=headers) as resp:
                assert resp.status == 200


AUTHORIZED = f"GET /metrics HTTP/1.1\r\nAuthorization: Bearer {READER}\r\n\r\n".encode()


@fuzz_settings(100)
@given(target=st.sampled_from(["metrics", "probes", "plain-to-tls"]), raw=requests())
@example(target="metrics", raw=AUTHORIZED.replace(READER.encode(), b"other-token"))
@example(target="metrics", raw=AUTHORIZED)
@example(target="metrics", raw=b"GET /metrics HTTP/1.1\r\nHost: x")  # never finished
@example(target="probes", raw=b"")  # a connection that says nothing
@example(target="probes", raw=b"GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nab")
@example(target="plain-to-tls", raw=b"GET /metrics HTTP/1.1\r\n\r\n")
@example(target="metrics", raw=b"GET /metrics HTTP/2.0\r\n\r\n")
def test_fuzzed_requests(target: str, raw: bytes) -> None:
    with pytest.MonkeyPatch.context() as patch:
        FakeApi(patch)
        patch.setattr(_health, "IDLE_TIMEOUT", 0.5)  # so a silent client costs little here
        asyncio.run(exchange(target, raw))
