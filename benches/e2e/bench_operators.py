"""The operators under test, each run as its own process by the driver (`run_all.py`).

Widget operators: the same work in every framework. For each Widget whose
``status.observedGeneration`` differs from ``metadata.generation``, read the spec and write
``status: {observedGeneration, items}`` with one merge patch of the ``status`` subresource;
anything else (the event caused by that very patch) is a no-op.

- ``fastctl``: `fastctl.Controller`, Rust scheduler.
- ``fastctl-model``: the same with the pure-Python scheduler model (`fastctl.testing.model`).
- ``fastctl-no-trust-env``: fastctl with aiohttp's ``trust_env`` forced off (see
  `_no_trust_env`); `fastctl.kube.load_client` already turns it off when no proxy is set,
  so without a proxy variable this mode is ``fastctl``.
- ``fastctl-filtered``: fastctl with ``event_filter=generation_changed``: the echo of the
  operator's own status patch (same generation) triggers no reconcile.
- ``fastctl-no-ryw``: fastctl with its read-your-writes guard off
  (``read_your_writes=ReadYourWrites(enabled=False)``), to measure what the guard costs.
- ``fastctl-no-otel``: ``fastctl`` with the ``otel`` extra hidden (any import of
  OpenTelemetry fails): tracing off, as without the extra.
- ``fastctl-traced``: ``fastctl`` with tracing on (`fastctl.tracing.enable`), every span
  made and handed to a batch processor whose exporter drops it: the span work, not the
  encoding and sending of an OTLP export.
- ``fastctl-otlp``: ``fastctl`` with tracing on as a user turns it on (``fastctl run
  --tracing``: the provider built from the ``OTEL_*`` variables, OTLP over HTTP in
  protobuf), exporting every span to a receiver in a process of its own that answers each
  export with 200 and reads nothing, over one kept-alive HTTP/1.1 connection as a
  collector's receiver does: the operator pays for encoding and sending its spans.
- ``fastctl-sampled``: ``fastctl-otlp`` with ``OTEL_TRACES_SAMPLER=parentbased_traceidratio``
  and ``OTEL_TRACES_SAMPLER_ARG=0.1``: a tenth of the reconciles traced.
- ``kopf``: ``@kopf.on.create`` + ``@kopf.on.update``, with kopf's bookkeeping kept in the
  status (`StatusProgressStorage`, `StatusDiffBaseStorage`), so each change costs kopf one
  status patch, as it costs fastctl; Events posting and cluster scanning off.
- ``kopf-default``: the same handlers with kopf's default storages (progress in
  annotations and status, the diff base in an annotation): two patches per change.
- ``kopf-event``: ``@kopf.on.event`` with the handler's own generation check: no
  persistence at all, the least kopf can do.
- ``kopf-limited``: ``kopf`` with ``settings.queueing.worker_limit = --concurrency``.

ConfigMap controllers, fastctl only:

- ``cm-record``: a no-op reconcile that records when each ConfigMap was first reconciled.
- ``cm-latency``: a reconcile that GETs its object from the API server (one real request)
  and records when it first saw each ``e2e.fastctl.dev/seq`` annotation value.

Each prints JSON lines on stdout: ``{"started": t}`` once imported, and the ConfigMap modes a
``{"report": ...}`` after SIGTERM. The driver reads memory and CPU from ``/proc``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from common import emit, loop_factory, run_on_chosen_loop

GROUP = "demo.fastctl.dev"
SEQ_ANNOTATION = "e2e.fastctl.dev/seq"

WIDGET_MODES = (
    "fastctl",
    "fastctl-model",
    "fastctl-no-trust-env",
    "fastctl-filtered",
    "fastctl-no-ryw",
    "fastctl-no-otel",
    "fastctl-traced",
    "fastctl-otlp",
    "fastctl-sampled",
    "kopf",
    "kopf-default",
    "kopf-event",
    "kopf-limited",
)
CM_MODES = ("cm-record", "cm-latency")


def status_for(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The status patch a Widget needs, or None when it is up to date (the common work)."""
    meta = obj["metadata"]
    generation = meta.get("generation")
    if (obj.get("status") or {}).get("observedGeneration") == generation:
        return None
    data = (obj.get("spec") or {}).get("data") or {}
    return {"observedGeneration": generation, "items": len(data)}


# -- fastctl -------------------------------------------------------------------------------


def _no_trust_env(client: Any) -> None:
    """An experiment, not fastctl's behaviour: kubernetes-asyncio opens its aiohttp session
    with ``trust_env=True``, so aiohttp looks up proxy variables and ``~/.netrc`` in a worker
    thread on every request (two thread round trips each). Turn that off, as kopf does
    (``settings.networking.trust_env`` defaults to False), to measure what it costs."""
    client.rest_client.pool_manager._trust_env = False


def _controller(
    client: Any, resource: Any, reconcile: Any, args: argparse.Namespace, model: bool
) -> Any:
    """The Controller every fastctl mode runs: `args.concurrency`, in `args.namespace`, on
    the Rust scheduler or (`model`) the pure-Python one."""
    from fastctl import Controller, ReadYourWrites, generation_changed
    from fastctl.testing.model import ModelScheduler

    return Controller(
        client,
        resource,
        reconcile,
        namespace=args.namespace,
        concurrency=args.concurrency,
        scheduler=ModelScheduler(concurrency=args.concurrency) if model else None,
        event_filter=generation_changed if args.mode == "fastctl-filtered" else None,
        read_your_writes=ReadYourWrites(enabled=args.mode != "fastctl-no-ryw"),
    )


class _HideOpenTelemetry:
    """A finder that refuses every ``opentelemetry`` module: the extra not installed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _trace_to_nowhere() -> None:
    """Tracing on, every span made and dropped by its exporter (``fastctl-traced``)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    import fastctl.tracing

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    assert fastctl.tracing.enable(provider)


def _count_loop_iterations(stats: dict[str, int]) -> None:
    """Count the event loop's iterations (wake-ups) and the ready events each brought, into
    `stats`: an experiment's figure (``FASTCTL_BENCH_STATS``), not for CPU measurements."""
    import selectors

    loop = asyncio.get_running_loop()
    selector = getattr(loop, "_selector", None)
    if selector is None:  # uvloop polls in libuv: nothing of Python's to count
        stats["loop_iterations_uncounted"] = 1
        return
    select = selector.select

    def counted(timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = select(timeout)
        stats["loop_iterations"] = stats.get("loop_iterations", 0) + 1
        stats["ready_events"] = stats.get("ready_events", 0) + len(ready)
        return ready

    selector.select = counted


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread but the main one so far, by name (Linux: read from
    ``/proc``, in the kernel's ticks): what the OTLP export's own thread cost."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.native_id is None:
            continue
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[thread.name] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return found


def _time_collections(stats: dict[str, Any]) -> None:
    """Add the CPU the cyclic garbage collector spends per generation, and its collections,
    into `stats` (``gc_cpu_N``, ``gc_runs_N``; from the first reconcile of the burst on,
    as ``burst_gc_cpu_N``, once ``burst_from_iteration`` is set): what a profiler charges to
    whichever frame allocated when a collection started."""
    import gc
    import time

    started: list[float] = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
            return
        spent = time.thread_time() - started[0]
        gen = info["generation"]
        prefix = "burst_" if "burst_from_iteration" in stats else ""
        stats[f"{prefix}gc_cpu_{gen}"] = stats.get(f"{prefix}gc_cpu_{gen}", 0.0) + spent
        stats[f"{prefix}gc_runs_{gen}"] = stats.get(f"{prefix}gc_runs_{gen}", 0) + 1

    gc.callbacks.append(timed)


_SINK = """
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a collector's receiver answers
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _trace_by_otlp(sampled: bool) -> Any:
    """Tracing on as ``fastctl run --tracing`` turns it on, exporting by OTLP/HTTP to a
    receiver process that reads each export and answers 200 over one kept-alive HTTP/1.1
    connection, as a collector does (``fastctl-otlp``); with `sampled`, a tenth of the
    traces (``fastctl-sampled``). Returns the receiver process."""
    import subprocess

    import fastctl.tracing

    sink = subprocess.Popen([sys.executable, "-c", _SINK], stdout=subprocess.PIPE, text=True)
    assert sink.stdout is not None
    port = int(sink.stdout.readline())
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"http://127.0.0.1:{port}/v1/traces"
    os.environ["OTEL_TRACES_EXPORTER"] = "otlp"
    if sampled:
        os.environ["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
        os.environ["OTEL_TRACES_SAMPLER_ARG"] = "0.1"
    assert fastctl.tracing.enable()
    return sink


async def run_fastctl_widgets(args: argparse.Namespace, model: bool) -> None:
    if args.mode == "fastctl-no-otel":
        sys.meta_path.insert(0, _HideOpenTelemetry())
    if args.mode == "fastctl-traced":
        _trace_to_nowhere()
    sink = None
    if args.mode in ("fastctl-otlp", "fastctl-sampled"):
        sink = _trace_by_otlp(sampled=args.mode == "fastctl-sampled")
    from fastctl import Resource
    from fastctl.kube._client import load_client
    from fastctl.kube._objects import patch

    client = await load_client(args.kubeconfig)
    if args.no_trust_env or args.mode == "fastctl-no-trust-env":
        _no_trust_env(client)
    widgets = await Resource(f"{GROUP}/v1", "Widget").resolve(client)

    async def reconcile(obj: dict[str, Any], ctx: object) -> None:
        status = status_for(obj)
        if status is not None:
            meta = obj["metadata"]
            await patch(
                client,
                widgets,
                meta["name"],
                {"status": status},
                namespace=meta["namespace"],
                subresource="status",
            )

    stats: dict[str, Any] = {}
    if os.environ.get("FASTCTL_BENCH_STATS"):
        _count_loop_iterations(stats)
        _time_collections(stats)
        plain = reconcile

        async def reconcile(obj: dict[str, Any], ctx: object) -> None:
            # Reconciles by generation (1: the initial list, 2: the update burst), and
            # which of them wrote: what a change cost in reconciles, mode against mode.
            wrote = "patch" if status_for(obj) is not None else "noop"
            name = f"gen{obj['metadata'].get('generation')}-{wrote}"
            stats[name] = stats.get(name, 0) + 1
            if name.startswith("gen2") and "burst_from_iteration" not in stats:
                stats["burst_from_iteration"] = stats.get("loop_iterations", 0)
                stats["burst_from_ready"] = stats.get("ready_events", 0)
            await plain(obj, ctx)
            fence = ctl._run.fence if ctl._run is not None else None
            if fence is not None:
                stats["fences_max"] = max(stats.get("fences_max", 0), len(fence))
                stats["followed_max"] = max(stats.get("followed_max", 0), len(fence.written))

    ctl = _controller(client, widgets.resource, reconcile, args, model)
    try:
        await ctl.run()
    finally:
        await client.close()
        if os.environ.get("FASTCTL_BENCH_STATS"):
            stats["thread_cpu"] = _thread_cpu()  # before the export's thread ends
        if sink is not None:
            import fastctl.tracing

            fastctl.tracing.disable()  # the spans still buffered are exported
            sink.kill()
        if os.environ.get("FASTCTL_BENCH_STATS"):
            import gc

            report: dict[str, object] = {
                "reconciles": stats,
                "counters": dataclasses.asdict(ctl.counters),
            }
            report["gc"] = gc.get_stats()
            import resource

            usage = resource.getrusage(resource.RUSAGE_SELF)
            report["rusage"] = {
                name: getattr(usage, name)
                for name in ("ru_utime", "ru_stime", "ru_minflt", "ru_nvcsw", "ru_nivcsw")
            }
            report["threads"] = threading.active_count()
            print(json.dumps(report), file=sys.stderr)


async def run_fastctl_configmaps(args: argparse.Namespace) -> None:
    from fastctl import Resource
    from fastctl.kube._client import load_client
    from fastctl.kube._objects import get

    client = await load_client(args.kubeconfig)
    configmaps = await Resource("v1", "ConfigMap").resolve(client)
    first: dict[str, float] = {}
    starts: list[float] = []
    seen: dict[str, float] = {}
    do_get = args.mode == "cm-latency"

    async def reconcile(obj: dict[str, Any], ctx: object) -> None:
        now = time.monotonic()
        starts.append(now)
        meta = obj["metadata"]
        name = meta["name"]
        if name not in first:
            first[name] = now
            if len(first) == 1:
                emit({"first_reconcile": now})
            if len(first) == args.expect:
                emit({"all_first": now})
        seq = (meta.get("annotations") or {}).get(SEQ_ANNOTATION)
        if seq is not None and seq not in seen:
            seen[seq] = now
        if do_get:
            await get(client, configmaps, name, namespace=meta["namespace"])

    ctl = _controller(client, configmaps.resource, reconcile, args, args.model)

    async def report_ready() -> None:
        await ctl.store.wait_ready()
        emit({"ready": time.monotonic(), "cached": len(ctl.store)})

    ready_task = asyncio.get_running_loop().create_task(report_ready())
    try:
        await ctl.run()
    finally:
        ready_task.cancel()
        await client.close()
    emit({"report": {"first": first, "starts": starts, "seen": seen}})


# -- kopf ----------------------------------------------------------------------------------


def run_kopf(args: argparse.Namespace) -> None:
    # kopf imports kubernetes_asyncio's models when it is installed, only to recognise them
    # in its owner-reference helpers; in kopf's own environment it is not there (kopf does
    # not depend on it), and here it would add ~40 MB to kopf's memory. Hide it.
    for optional in ("kubernetes_asyncio", "kubernetes", "pykube"):
        sys.modules[optional] = None  # type: ignore[assignment]
    import kopf

    @kopf.on.login()
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=args.server,
            ca_path=args.ca,
            certificate_path=args.cert,
            private_key_path=args.key,
            default_namespace=args.namespace,
        )

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # no Events (fastctl posts none either)
        settings.scanning.disabled = True  # no CRD/namespace observation
        settings.queueing.worker_limit = args.kopf_worker_limit  # None: kopf's default
        if args.mode == "kopf-limited":
            settings.queueing.worker_limit = args.concurrency
        if args.mode in ("kopf", "kopf-limited"):
            settings.persistence.progress_storage = kopf.StatusProgressStorage()
            settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage()

    if args.mode == "kopf-event":

        @kopf.on.event(GROUP, "v1", "widgets")
        async def on_event(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
            status = status_for(dict(body))
            if status is not None:
                patch.status.update(status)

    else:

        @kopf.on.create(GROUP, "v1", "widgets")
        @kopf.on.update(GROUP, "v1", "widgets")
        async def on_change(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
            status = status_for(dict(body))
            if status is not None:
                patch.status.update(status)

    # The loop the run asks for (``FASTCTL_LOOP``, as the other Python operators): kopf's
    # own command line picks uvloop when installed; `kopf.run` takes the loop it is given.
    loop = loop_factory()() if os.environ.get("FASTCTL_LOOP") else None
    kopf.run(standalone=True, namespaces=[args.namespace], loop=loop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=WIDGET_MODES + CM_MODES)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--expect", type=int, default=0, help="cm-*: report when this many")
    parser.add_argument("--model", action="store_true", help="cm-*: pure-Python scheduler")
    parser.add_argument(
        "--no-trust-env", action="store_true", help="fastctl: experiment, see _no_trust_env"
    )
    parser.add_argument("--kopf-worker-limit", type=int, default=None)
    parser.add_argument("--server", help="kopf: the API server URL")
    parser.add_argument("--ca", help="kopf: the CA certificate file")
    parser.add_argument("--cert", help="kopf: the client certificate file")
    parser.add_argument("--key", help="kopf: the client key file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    emit({"started": time.monotonic()})
    if args.mode.startswith("kopf"):
        run_kopf(args)
    elif args.mode in CM_MODES:
        run_on_chosen_loop(run_fastctl_configmaps(args))
    elif os.environ.get("FASTCTL_BENCH_CPROFILE"):
        # An experiment's profile (every call counted), not for CPU measurements.
        import cProfile

        with cProfile.Profile() as profile:
            run_on_chosen_loop(run_fastctl_widgets(args, model=args.mode == "fastctl-model"))
        profile.dump_stats(f"{os.environ['FASTCTL_BENCH_CPROFILE']}-{args.mode}.prof")
    else:
        run_on_chosen_loop(run_fastctl_widgets(args, model=args.mode == "fastctl-model"))


if __name__ == "__main__":
    main()
