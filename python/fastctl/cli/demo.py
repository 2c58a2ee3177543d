"""``fastctl demo``: the example operator on a local control plane, with live progress.

It starts etcd and kube-apiserver on loopback (building them from the Go module proxy the
first time; ``--kubeconfig`` uses an existing cluster instead), installs the Widget CRD,
creates N Widgets, runs the Widget operator (`fastctl.demo.widgets`) and shows objects
ready, reconciles per second, running, queued and errors until every Widget is Ready; then
it changes every Widget at once and waits for the re-render, and prints a summary.

The operator serves the Widget's webhooks in its own process (`fastctl.demo.webhooks`):
with a CA it made, it installs the webhook configurations and the CRD's conversion once it
serves, checks that the API server calls them (a refused Widget, a warning, a default, a
Widget read as v1alpha1), and removes them at the end. The API server dials
``https://<--webhook-host>:<port>``; ``--no-webhooks`` skips them (a remote cluster that
cannot reach this host).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from fastctl.cli import CliError, Subcommands
from fastctl.cli.run import add_loop_option, run_on_chosen_loop

__all__ = ["register"]


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "demo",
        help="run the example operator against a local control plane",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--objects", "-n", type=int, default=300, help="Widgets to create")
    parser.add_argument("--concurrency", type=int, default=32, help="reconciles at once")
    parser.add_argument("--namespace", default="fastctl-demo", help="namespace for the Widgets")
    parser.add_argument(
        "--kubeconfig", help="use this cluster instead of starting a local control plane"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="give up after this many seconds"
    )
    parser.add_argument(
        "--no-webhooks",
        dest="webhooks",
        action="store_false",
        help="do not serve the Widget's admission and conversion webhooks",
    )
    parser.add_argument(
        "--webhook-host",
        default="127.0.0.1",
        help="the address the API server calls the webhooks at (default 127.0.0.1)",
    )
    add_loop_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.objects < 1:
        raise CliError(f"--objects must be >= 1, got {args.objects}")
    return run_on_chosen_loop(_demo(args), args.loop)


@contextlib.asynccontextmanager
async def _cluster(args: argparse.Namespace) -> AsyncIterator[str]:
    """Yields a kubeconfig path: the given one, or that of a fresh local control plane."""
    if args.kubeconfig:
        yield args.kubeconfig
        return
    from fastctl.testing.binaries import ControlPlaneError, ensure_binaries
    from fastctl.testing.control_plane import ControlPlane

    try:
        binaries = ensure_binaries(build=True, progress=lambda m: _say(m))
        _say("starting etcd and kube-apiserver on loopback ...")
        started = time.monotonic()
        async with ControlPlane(binaries=binaries) as cp:
            _say(f"control plane up at {cp.server} in {time.monotonic() - started:.1f} s")
            yield str(cp.kubeconfig)
    except ControlPlaneError as exc:
        raise CliError(f"control plane: {exc}") from None


def _say(message: str) -> None:
    print(f"fastctl demo: {message}", file=sys.stderr, flush=True)


async def _demo(args: argparse.Namespace) -> int:
    from fastctl.kube._client import KubeconfigError, load_client

    async with _cluster(args) as kubeconfig:
        try:
            client = await load_client(kubeconfig)
        except KubeconfigError as exc:
            raise CliError(str(exc)) from None
        try:
            return await _run_operator(client, args)
        finally:
            await client.close()
    return 1  # not reached: _cluster yields once


async def _ensure_namespace(client: Any, name: str) -> None:
    from fastctl.kube._objects import apply
    from fastctl.kube._resource import Resource

    await apply(
        client,
        Resource("v1", "Namespace"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        field_manager="fastctl-demo",
    )


def _is_ready(obj: dict[str, Any], generation: int) -> bool:
    status = obj.get("status") or {}
    if status.get("observedGeneration", 0) < generation:
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


async def _run_operator(client: Any, args: argparse.Namespace) -> int:
    try:
        from fastctl.demo import widgets
    except ImportError as exc:  # the Widget is a typed resource: pydantic
        raise CliError(
            f"the demo needs the typed extra: pip install 'fastctl[typed]' ({exc})"
        ) from None

    await widgets.install_crd(client)
    await _ensure_namespace(client, args.namespace)
    if not args.webhooks:
        return await _run_widgets(client, args, widgets)
    from fastctl.cli._demo_webhooks import check_conversion, served_webhooks

    async with served_webhooks(client, args, _say):
        code = await _run_widgets(client, args, widgets)
        await check_conversion(client, args.namespace, "widget-00000", _say)
        return code


async def _run_widgets(client: Any, args: argparse.Namespace, widgets: Any) -> int:
    from fastctl.kube._objects import create, patch

    n, namespace = args.objects, args.namespace
    ctl = widgets.make_controller(client, namespace=namespace, concurrency=args.concurrency)
    counts = {"reconciles": 0, "errors": 0, "peak": 0}

    async def consume() -> None:
        async for result in ctl.stream():
            counts["reconciles"] += 1
            counts["errors"] += result.error is not None

    operator = asyncio.create_task(consume())
    gate = asyncio.Semaphore(32)
    names = [f"widget-{i:05d}" for i in range(n)]

    async def create_one(name: str) -> None:
        async with gate:
            body = widgets.widget(name, namespace, {"greeting": "Hello from {name}"})
            await create(client, widgets.WIDGET, body)

    async def update_one(name: str) -> None:
        async with gate:
            body = {"spec": {"data": {"greeting": "Updated {name}", "round": "2"}}}
            await patch(client, widgets.WIDGET, name, body, namespace=namespace)

    try:
        _say(
            f"creating {n} Widgets in namespace {namespace} (operator concurrency "
            f"{args.concurrency})"
        )
        started = time.monotonic()
        await asyncio.gather(*(create_one(name) for name in names))
        created = await _progress(ctl, counts, n, 1, started, args.timeout, operator)
        _say(f"changing all {n} Widgets at once")
        burst = time.monotonic()
        await asyncio.gather(*(update_one(name) for name in names))
        updated = await _progress(ctl, counts, n, 2, burst, args.timeout, operator)
    finally:
        ctl.shutdown()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(operator, 30)
    print(
        f"\nsummary: {n} Widgets ready {created:.2f} s after the first create; "
        f"all {n} re-rendered {updated:.2f} s after the burst of updates; "
        f"{counts['reconciles']} reconciles, {counts['errors']} errors, "
        f"peak {counts['peak']} running (limit {args.concurrency})"
    )
    return 0 if counts["errors"] == 0 else 1


async def _progress(
    ctl: Any,
    counts: dict[str, int],
    n: int,
    generation: int,
    started: float,
    timeout: float,
    operator: asyncio.Task[None],
) -> float:
    """Show live progress until every Widget in the cache is Ready at `generation`."""
    tty = sys.stdout.isatty()
    last_print = 0.0
    last_count, last_time = counts["reconciles"], time.monotonic()
    rate = 0.0
    while True:
        now = time.monotonic()
        ready = sum(_is_ready(obj, generation) for obj in ctl.store.values())
        if now - last_time >= 0.5:
            rate = (counts["reconciles"] - last_count) / (now - last_time)
            last_count, last_time = counts["reconciles"], now
        stats = ctl.scheduler.stats()
        counts["peak"] = max(counts["peak"], stats["in_flight"])
        line = (
            f"ready {ready:>6}/{n}  reconciles {counts['reconciles']:>7} ({rate:>7.0f}/s)  "
            f"running {stats['in_flight']:>4}  queued {stats['len']:>6}  "
            f"errors {counts['errors']:>4}  {now - started:6.1f} s"
        )
        if tty:
            print(f"\r{line}", end="", flush=True)
        elif now - last_print >= 1.0 or ready == n:
            print(line, flush=True)
            last_print = now
        if ready == n:
            if tty:
                print()
            return now - started
        if operator.done():
            operator.result()
            raise CliError("the operator stopped before every Widget was ready")
        if now - started > timeout:
            raise CliError(f"only {ready} of {n} Widgets ready after {timeout:.0f} s")
        await asyncio.sleep(0.1)
