"""Traces that say why a reconcile ran: a small operator with tracing on, against a cluster.

    pip install 'fastctl[otel]'
    eval "$(.venv/bin/fastctl control-plane up)"      # or any cluster in $KUBECONFIG
    .venv/bin/python examples/tracing.py

The operator copies each ConfigMap labelled ``tracing-example=source`` into an owned
ConfigMap ``<name>-copy``. The script creates a source, waits for its copy, then edits the
copy as a person would, and the operator puts it back. Every span is printed as it ends:
the reconcile of the source linked to the list at start (``relist``), then to the edit of
its copy (``owned_child``, with the edit's resourceVersion), with the requests each run made
beneath it. With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set (``http://localhost:4318``, a
collector or Jaeger), the spans are sent there too, by OTLP.

The Manager is given a `TracerProvider` of the script's own (to print the spans); in an
operator, ``Manager(client, tracing=True)`` or ``fastctl run --tracing`` build one from the
``OTEL_*`` variables (docs/tracing.md).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource as OtelResource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from fastctl import Controller, Manager, Resource, load_client
from fastctl.kube import apply, create, delete, get, owner_reference, patch

CONFIGMAP = Resource("v1", "ConfigMap")
NAMESPACE = "default"
LABEL = "tracing-example"


class PrintSpans(SpanExporter):
    """One line per span: its name, what it is about, and for a reconcile, its links."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            attrs = dict(span.attributes or {})
            ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
            about = attrs.get("fastctl.object") or attrs.get("url.path", "")
            line = f"{span.name:28} {about!s:32} {ms:7.2f} ms"
            if span.name.startswith("reconcile"):
                line += (
                    f"  attempt={attrs.get('fastctl.reconcile.attempt')}"
                    f" outcome={attrs.get('fastctl.reconcile.outcome')}"
                )
                for link in span.links:
                    why = dict(link.attributes or {})
                    line += (
                        f"\n    linked: {why.get('fastctl.trigger.reason')}"
                        f" {why.get('fastctl.watch.kind', '')}"
                        f" {why.get('fastctl.watch.object', '')}"
                        f" rv={why.get('k8s.resource_version', '-')}"
                    )
            elif span.parent is not None:
                line = "  └─ " + line + f"  code={attrs.get('http.response.status_code')}"
            print(line, flush=True)
        return SpanExportResult.SUCCESS


def is_source(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return (new["metadata"].get("labels") or {}).get(LABEL) == "source"


def copy_of(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{meta['name']}-copy",
            "namespace": meta["namespace"],
            "ownerReferences": [owner_reference(obj)],
        },
        "data": obj.get("data") or {},
    }


async def main() -> None:
    provider = TracerProvider(resource=OtelResource.create({"service.name": "tracing-example"}))
    provider.add_span_processor(SimpleSpanProcessor(PrintSpans()))
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))

    client = await load_client()
    copied = asyncio.Event()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        if not is_source(obj, obj):
            return  # a copy, or another ConfigMap (an event filter passes creations)
        await apply(client, CONFIGMAP, copy_of(obj), field_manager="tracing-example")
        copied.set()

    # The sources are picked by an event filter, not a label selector: the copies are
    # ConfigMaps too, and the owned watch (one watch of ConfigMaps) must see them.
    ctl = Controller(
        client, CONFIGMAP, reconcile, namespace=NAMESPACE, event_filter=is_source, name="copier"
    ).owns(CONFIGMAP)
    manager = Manager(client, tracing=provider, metrics_port=None, probe_port=None)
    manager.add(ctl)
    source = {
        "metadata": {"name": "greeting", "namespace": NAMESPACE, "labels": {LABEL: "source"}},
        "data": {"text": "hello"},
    }
    for name in ("greeting", "greeting-copy"):  # from a run before
        await delete(client, CONFIGMAP, name, namespace=NAMESPACE)
    await create(client, CONFIGMAP, source)
    running = asyncio.create_task(manager.run())

    async def next_copy() -> None:
        """Wait for the operator's next copy (or for the operator to stop: an error)."""
        waiting = asyncio.create_task(copied.wait())
        await asyncio.wait({waiting, running}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if running.done():
            raise RuntimeError(f"the operator stopped: {running.exception()!r}")
        copied.clear()

    try:
        await next_copy()
        print("-- editing greeting-copy by hand; the operator puts it back", flush=True)
        await patch(
            client, CONFIGMAP, "greeting-copy", {"data": {"text": "bye"}}, namespace=NAMESPACE
        )
        while (await get(client, CONFIGMAP, "greeting-copy", namespace=NAMESPACE))["data"][
            "text"
        ] != "hello":
            await next_copy()
    finally:
        manager.shutdown()
        await running
        for name in ("greeting", "greeting-copy"):
            await delete(client, CONFIGMAP, name, namespace=NAMESPACE)
        await client.close()
        provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
