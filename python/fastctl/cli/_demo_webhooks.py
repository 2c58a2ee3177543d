"""The webhook part of ``fastctl demo``: serve the Widget's webhooks in the demo's process,
check that the API server calls them, and take them out again at the end.

The checks are the demo's own end checks for webhooks, each a request a user would make:
a dry-run create the validating webhook refuses (its message shown), a dry-run create of an
empty Widget (a warning header, and ``spec.owner`` filled by the defaulting webhook), and a
Widget read as v1alpha1 through the conversion webhook. Dry runs store nothing, so the
demo's count of Widgets stays exact.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from fastctl.cli import CliError

__all__ = ["check_conversion", "served_webhooks"]

_PROBES = 300
"""Dry runs (0.1 s apart) until the API server has loaded the configurations."""


def _widgets_path(namespace: str, version: str = "v1") -> str:
    from fastctl.demo.widgets import GROUP

    return f"/apis/{GROUP}/{version}/namespaces/{namespace}/widgets"


async def _dry_create(client: Any, namespace: str, data: dict[str, str]) -> tuple[int, Any, str]:
    """A dry-run create of a Widget: (status, body, the Warning headers joined)."""
    from fastctl.demo.widgets import widget
    from fastctl.kube._http import request

    body = orjson.dumps(widget("webhook-check", namespace, data))
    path = _widgets_path(namespace)
    async with await request(client, "POST", path, query={"dryRun": "All"}, body=body) as resp:
        return (
            resp.status,
            orjson.loads(await resp.read()),
            " | ".join(resp.headers.getall("Warning", [])),
        )


async def _check_admission(client: Any, namespace: str, say: Callable[[str], None]) -> None:
    """Until the API server calls both admission webhooks; then show what they did."""
    for _ in range(_PROBES):
        denied, refusal, _ = await _dry_create(client, namespace, {"not a key!": "x"})
        admitted, empty, warnings = await _dry_create(client, namespace, {})
        if denied == 403 and (empty.get("spec") or {}).get("owner"):
            break
        await asyncio.sleep(0.1)
    else:
        raise CliError(
            f"the API server never called the Widget webhooks (last answers {denied}, {admitted})"
        )
    say(f"validating webhook refused a Widget: {refusal.get('message')}")
    if admitted != 201 or "spec.data is empty" not in warnings:
        raise CliError(f"an empty Widget: expected 201 and a warning, got {admitted} {warnings!r}")
    say(f"an empty Widget is admitted with a warning: {warnings}")
    say(f"defaulting webhook set spec.owner to {empty['spec']['owner']!r}")


@contextlib.asynccontextmanager
async def served_webhooks(
    client: Any, args: argparse.Namespace, say: Callable[[str], None]
) -> AsyncIterator[None]:
    """The Widget's webhooks served, installed and checked, for the body of the block."""
    try:
        from fastctl.demo import webhooks
        from fastctl.webhook import uninstall
    except ImportError as exc:  # the self-signed CA needs cryptography
        raise CliError(
            f"the demo's webhooks need the webhook extra: pip install 'fastctl[webhook]', "
            f"or run with --no-webhooks ({exc})"
        ) from None
    server = webhooks.serve(client, host=args.webhook_host)
    await server.start()
    try:
        try:
            async with asyncio.timeout(args.timeout):
                await server.installed()
        except TimeoutError:
            raise CliError(f"webhooks not installed: {server.install_error}") from None
        say(f"webhooks served at {server.url}, configurations installed with its own CA")
        await _check_admission(client, args.namespace, say)
        yield
    finally:
        with contextlib.suppress(Exception):
            await uninstall(client, server.webhooks, server.name)
        await server.stop()


async def check_conversion(
    client: Any, namespace: str, name: str, say: Callable[[str], None]
) -> None:
    """Read Widget `name` as v1alpha1 (until the API server uses the conversion webhook):
    its values must be the v1 object's data."""
    from fastctl.errors import ApiError
    from fastctl.kube._http import request_json

    stored = await request_json(client, "GET", f"{_widgets_path(namespace)}/{name}")
    expected = [{"key": k, "value": v} for k, v in sorted(stored["spec"]["data"].items())]
    last: object = None
    old_path = f"{_widgets_path(namespace, 'v1alpha1')}/{name}"
    for _ in range(_PROBES):
        try:
            old = await request_json(client, "GET", old_path)
        except ApiError as exc:
            last = exc
        else:
            # Until the CRD's conversion is loaded, the API server only relabels the object.
            last = old["spec"]
            if old["spec"].get("values") == expected:
                say(f"read {name} as v1alpha1 through the conversion webhook: {old['spec']}")
                return
        await asyncio.sleep(0.1)
    raise CliError(f"{name} read as v1alpha1: {last!r}, expected values {expected!r}")
