"""fastctl's OTLP export to a plain ``http://`` collector, POSTed from the extension
(`fastctl._otlp_http`): what reaches a receiver, over how many connections, and where the
exporter's own transport is kept."""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from fastctl._otel import provider_from_environment
from fastctl._otlp import OtlpExport
from fastctl._otlp_http import RawTransport, raw_transport

pytestmark = pytest.mark.timeout(60)


@dataclass
class Received:
    requests: list[tuple[str, dict[str, str], bytes, int]] = field(default_factory=list)
    connections: int = 0
    close_after_first: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def receiver() -> Iterator[tuple[str, Received]]:
    got = Received()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            with got.lock:
                got.connections += 1
                self.connection_number = got.connections

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with got.lock:
                got.requests.append(
                    (
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        self.connection_number,
                    )
                )
                close = got.close_after_first and len(got.requests) == 1
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


def spans_of(body: bytes) -> list[str]:
    request = ExportTraceServiceRequest.FromString(body)
    return [s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def export_of(provider: Any) -> OtlpExport:
    (export,) = provider._active_span_processor._span_processors
    assert isinstance(export, OtlpExport)
    return export


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_batches_reach_an_http_collector_with_the_exporters_headers_on_one_connection(
    receiver: tuple[str, Received], monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    url, got = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team-a")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
    provider = provider_from_environment()
    export = export_of(provider)
    tracer = provider.get_tracer("test")
    try:
        tracer.start_span("first").end()
        assert export.force_flush()
        tracer.start_span("second").end()
        assert export.force_flush()
    finally:
        provider.shutdown()
    assert [(path, n) for path, _, _, n in got.requests] == [("/v1/traces", 1), ("/v1/traces", 1)]
    bodies = [gzip.decompress(b) if compression == "gzip" else b for _, _, b, _ in got.requests]
    assert [spans_of(b) for b in bodies] == [["first"], ["second"]]
    headers = got.requests[0][1]
    assert headers["x-tenant"] == "team-a"
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["host"] == url.removeprefix("http://")
    assert headers.get("content-encoding") == (None if compression == "none" else "gzip")


def test_a_connection_the_collector_closed_is_opened_again(
    receiver: tuple[str, Received], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, got = receiver
    got.close_after_first = True
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{url}/custom/path?x=1")
    provider = provider_from_environment()
    export = export_of(provider)
    tracer = provider.get_tracer("test")
    try:
        for name in ("one", "two", "three"):
            tracer.start_span(name).end()
            assert export.force_flush()
    finally:
        provider.shutdown()
    assert [(path, n) for path, _, _, n in got.requests] == [
        ("/custom/path?x=1", 1),
        ("/custom/path?x=1", 2),
        ("/custom/path?x=1", 2),
    ]


def test_no_collector_is_a_failed_export_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens there now
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.2")
    provider = provider_from_environment()
    export = export_of(provider)
    try:
        provider.get_tracer("test").start_span("lost").end()
        assert not export.force_flush()
    finally:
        provider.shutdown()


def transport_for(url: str) -> Any:
    exporter = OTLPSpanExporter(endpoint=url)
    raw_transport(exporter._client)
    transport = exporter._client._transport
    exporter.shutdown()  # type: ignore[no-untyped-call]
    return transport


def test_only_a_plain_http_endpoint_without_a_proxy_is_sent_from_the_extension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(transport_for("http://collector:4318/v1/traces"), RawTransport)
    assert not isinstance(transport_for("https://collector:4318/v1/traces"), RawTransport)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert not isinstance(transport_for("http://collector:4318/v1/traces"), RawTransport)
    monkeypatch.setenv("NO_PROXY", "collector")
    assert isinstance(transport_for("http://collector:4318/v1/traces"), RawTransport)
